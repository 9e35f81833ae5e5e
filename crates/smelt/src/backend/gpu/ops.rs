//! The contract's ops on the GPU: each checks shapes and types (a bad call
//! is an error, never a panic or an out-of-bounds dispatch), packs its
//! parameters and records one dispatch.

use crate::backend::{
    AttentionParams, Backend, BackendError, Caps, Op, Result, RopeParams, Stats, Tensor, WeightData,
};
use crate::quant::GgmlType::{self, F16, F32, I32};

use super::pipelines::{Elementwise, Kernel, WEIGHT_TYPES};
use super::{GpuBackend, P, params};

/// Up to this many tokens a matmul runs as mat-vec (weights streamed once
/// per token); above it, the tiled kernel.
const MATVEC_MAX_TOKENS: usize = 4;

/// Largest head the attention kernel holds (4 dims per invocation of 64).
const MAX_HEAD_DIM: usize = 256;

fn check(op: Op, ok: bool, detail: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BackendError::Shape {
            op,
            detail: detail(),
        })
    }
}

fn dtype(op: Op, t: Tensor, want: &[GgmlType], what: &str) -> Result<()> {
    check(op, want.contains(&t.dtype), || {
        format!("{what} is {}, expected one of {want:?}", t.dtype)
    })
}

fn u(x: usize) -> P {
    // Tensors are capped below 4 GiB (buffers::max_tensor_bytes), so every
    // count and offset fits.
    P::U(x as u32)
}

impl GpuBackend {
    fn unsupported(&self, op: Op, dtype: GgmlType) -> BackendError {
        BackendError::Unsupported {
            backend: self.name(),
            op,
            dtype,
        }
    }

    fn elementwise(
        &mut self,
        op: Elementwise,
        a: Tensor,
        b: Option<Tensor>,
        s: f32,
        out: Tensor,
    ) -> Result<()> {
        let cop = match op {
            Elementwise::Add => Op::Add,
            Elementwise::Mul => Op::Mul,
            Elementwise::Scale => Op::Scale,
            Elementwise::SiluMul => Op::SiluMul,
            Elementwise::GeluMul => Op::GeluMul,
        };
        dtype(cop, a, &[F32], "input")?;
        dtype(cop, out, &[F32], "output")?;
        check(cop, out.rows == a.rows && out.cols == a.cols, || {
            format!(
                "output {}x{} for input {}x{}",
                out.rows, out.cols, a.rows, a.cols
            )
        })?;
        let n = a.n_elements();
        let mut b_len = n;
        let mut bound = vec![a, out];
        if let Some(b) = b {
            dtype(cop, b, &[F32], "second input")?;
            let broadcast = matches!(op, Elementwise::Add | Elementwise::Mul) && b.rows == 1;
            check(
                cop,
                b.cols == a.cols && (b.rows == a.rows || broadcast),
                || {
                    format!(
                        "second input {}x{} for {}x{}",
                        b.rows, b.cols, a.rows, a.cols
                    )
                },
            )?;
            b_len = b.n_elements();
            bound.push(b);
        }
        self.run(
            Kernel::Elementwise(op),
            params(&[u(n), u(b_len.max(1)), P::F(s)]),
            &bound,
            n.div_ceil(256) as u64,
        )
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        format!(
            "gpu ({}, {})",
            self.ctx.report.name, self.ctx.report.backend
        )
    }

    fn caps(&self) -> Caps {
        self.gpu_caps()
    }

    fn supports(&self, op: Op, dtype: GgmlType) -> bool {
        match op {
            Op::GetRows | Op::MatMul => WEIGHT_TYPES.contains(&dtype),
            Op::SetRows | Op::Attention | Op::Copy => matches!(dtype, F32 | F16),
            _ => dtype == F32,
        }
    }

    fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        self.alloc_tensor(dtype, rows, cols)
    }

    fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor> {
        self.load(name, dtype, rows, cols, &data)
    }

    fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        self.write_bytes(t, bytes)
    }

    fn read(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        self.read_bytes(t, out)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.sync()
    }

    fn stats(&self) -> Stats {
        self.gpu_stats()
    }

    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        let op = Op::GetRows;
        if !self.supports(op, table.dtype) {
            return Err(self.unsupported(op, table.dtype));
        }
        dtype(op, ids, &[I32], "ids")?;
        dtype(op, out, &[F32], "output")?;
        let n = ids.n_elements();
        check(op, out.rows == n && out.cols == table.cols, || {
            format!(
                "output {}x{} for {n} ids of {} columns",
                out.rows, out.cols, table.cols
            )
        })?;
        let row_bytes = table.dtype.row_bytes(table.cols).unwrap_or(0);
        let per_row = if table.dtype.is_quantized() {
            table.cols / 8
        } else {
            table.cols
        };
        self.run(
            Kernel::GetRows(table.dtype),
            params(&[u(n), u(table.cols), u(row_bytes), u(table.rows)]),
            &[table, ids, out],
            (n * per_row).div_ceil(64) as u64,
        )
    }

    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        let op = Op::SetRows;
        if !self.supports(op, dst.dtype) {
            return Err(self.unsupported(op, dst.dtype));
        }
        dtype(op, src, &[F32], "source")?;
        dtype(op, ids, &[I32], "ids")?;
        let n = ids.n_elements();
        check(op, src.rows == n && src.cols == dst.cols, || {
            format!(
                "source {}x{} for {n} ids into {} columns",
                src.rows, src.cols, dst.cols
            )
        })?;
        check(op, dst.dtype == F32 || dst.cols.is_multiple_of(2), || {
            format!(
                "an F16 destination needs an even row length, not {}",
                dst.cols
            )
        })?;
        let per_row = if dst.dtype == F16 {
            dst.cols / 2
        } else {
            dst.cols
        };
        self.run(
            Kernel::SetRows(dst.dtype),
            params(&[u(n), u(dst.cols), u(dst.rows)]),
            &[src, dst, ids],
            (n * per_row).div_ceil(256) as u64,
        )
    }

    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()> {
        let op = Op::RmsNorm;
        dtype(op, x, &[F32], "input")?;
        dtype(op, out, &[F32], "output")?;
        check(op, out.rows == x.rows && out.cols == x.cols, || {
            format!(
                "output {}x{} for input {}x{}",
                out.rows, out.cols, x.rows, x.cols
            )
        })?;
        let mut bound = vec![x, out];
        if let Some(w) = weight {
            dtype(op, w, &[F32], "weight")?;
            check(op, w.n_elements() == x.cols, || {
                format!("weight of {} values for rows of {}", w.n_elements(), x.cols)
            })?;
            bound.push(w);
        }
        self.run(
            Kernel::RmsNorm {
                weight: weight.is_some(),
            },
            params(&[u(x.rows), u(x.cols), P::F(eps)]),
            &bound,
            x.rows as u64,
        )
    }

    fn rope(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
        let op = Op::Rope;
        dtype(op, x, &[F32], "input")?;
        dtype(op, out, &[F32], "output")?;
        dtype(op, pos, &[I32], "positions")?;
        check(op, x.cols == p.n_heads * p.head_dim, || {
            format!(
                "rows of {} for {} heads of {}",
                x.cols, p.n_heads, p.head_dim
            )
        })?;
        check(op, out.rows == x.rows && out.cols == x.cols, || {
            format!(
                "output {}x{} for input {}x{}",
                out.rows, out.cols, x.rows, x.cols
            )
        })?;
        check(op, pos.n_elements() == x.rows, || {
            format!("{} positions for {} rows", pos.n_elements(), x.rows)
        })?;
        check(
            op,
            p.head_dim.is_multiple_of(2) && p.n_dims.is_multiple_of(2) && p.n_dims <= p.head_dim,
            || {
                format!(
                    "n_dims {} and head_dim {} must be even, n_dims <= head_dim",
                    p.n_dims, p.head_dim
                )
            },
        )?;
        let ff = match p.freq_factors {
            Some(f) => {
                dtype(op, f, &[F32], "freq_factors")?;
                check(op, f.n_elements() >= p.n_dims / 2, || {
                    format!("{} freq_factors for {} pairs", f.n_elements(), p.n_dims / 2)
                })?;
                f
            }
            None => self.dummy,
        };
        let kernel = Kernel::Rope(p.mode);
        self.run(
            kernel,
            params(&[
                u(x.rows),
                u(p.n_heads),
                u(p.head_dim),
                u(p.n_dims),
                P::F(p.freq_base),
                P::F(p.freq_scale),
                u(usize::from(p.freq_factors.is_some())),
            ]),
            &[x, pos, out, ff],
            (x.rows * p.n_heads * p.head_dim / 2).div_ceil(64) as u64,
        )
    }

    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
        let op = Op::MatMul;
        if !self.supports(op, w.dtype) {
            return Err(self.unsupported(op, w.dtype));
        }
        dtype(op, x, &[F32], "input")?;
        dtype(op, out, &[F32], "output")?;
        check(
            op,
            x.cols == w.cols && out.rows == x.rows && out.cols == w.rows,
            || {
                format!(
                    "weight {}x{}, input {}x{}, output {}x{}",
                    w.rows, w.cols, x.rows, x.cols, out.rows, out.cols
                )
            },
        )?;
        let (m, k, n) = (w.rows, w.cols, x.rows);
        let row_bytes = w.dtype.row_bytes(k).unwrap_or(0);
        if n <= MATVEC_MAX_TOKENS {
            self.run(
                Kernel::MatVec(w.dtype),
                params(&[u(m), u(k), u(n), u(row_bytes)]),
                &[w, x, out],
                (m * n) as u64,
            )
        } else {
            let tiles_m = m.div_ceil(64);
            self.run(
                Kernel::MatMul(w.dtype),
                params(&[u(m), u(k), u(n), u(row_bytes), u(tiles_m)]),
                &[w, x, out],
                (tiles_m * n.div_ceil(64)) as u64,
            )
        }
    }

    fn attention(
        &mut self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        pos: Tensor,
        seq: Tensor,
        p: &AttentionParams,
        out: Tensor,
    ) -> Result<()> {
        let op = Op::Attention;
        if !self.supports(op, k_cache.dtype) {
            return Err(self.unsupported(op, k_cache.dtype));
        }
        dtype(op, q, &[F32], "queries")?;
        dtype(op, out, &[F32], "output")?;
        dtype(op, pos, &[I32], "positions")?;
        dtype(op, seq, &[I32], "slots")?;
        check(op, v_cache.dtype == k_cache.dtype, || {
            format!("K cache {} and V cache {}", k_cache.dtype, v_cache.dtype)
        })?;
        check(
            op,
            p.n_kv_heads > 0 && p.n_heads.is_multiple_of(p.n_kv_heads) && p.head_dim > 0,
            || format!("{} heads over {} KV heads", p.n_heads, p.n_kv_heads),
        )?;
        check(
            op,
            p.head_dim <= MAX_HEAD_DIM && p.head_dim.is_multiple_of(2),
            || {
                format!(
                    "head_dim {} (the GPU kernel takes even sizes up to {MAX_HEAD_DIM})",
                    p.head_dim
                )
            },
        )?;
        check(
            op,
            q.cols == p.n_heads * p.head_dim && out.rows == q.rows && out.cols == q.cols,
            || {
                format!(
                    "queries {}x{}, output {}x{} for {} heads of {}",
                    q.rows, q.cols, out.rows, out.cols, p.n_heads, p.head_dim
                )
            },
        )?;
        let kv_cols = p.n_kv_heads * p.head_dim;
        check(
            op,
            k_cache.cols == kv_cols
                && v_cache.cols == kv_cols
                && p.ctx > 0
                && k_cache.rows >= p.ctx
                && k_cache.rows.is_multiple_of(p.ctx)
                && v_cache.rows == k_cache.rows,
            || {
                format!(
                    "caches {}x{} and {}x{} for ctx {} and {} KV columns",
                    k_cache.rows, k_cache.cols, v_cache.rows, v_cache.cols, p.ctx, kv_cols
                )
            },
        )?;
        check(
            op,
            pos.n_elements() == q.rows && seq.n_elements() == q.rows,
            || {
                format!(
                    "{} positions and {} slots for {} rows",
                    pos.n_elements(),
                    seq.n_elements(),
                    q.rows
                )
            },
        )?;
        self.run(
            Kernel::Attention(k_cache.dtype),
            params(&[
                u(q.rows),
                u(p.n_heads),
                u(p.n_kv_heads),
                u(p.head_dim),
                u(p.ctx),
                u(p.window.unwrap_or(0)),
                P::F(p.scale),
                P::F(p.softcap.unwrap_or(0.0)),
                u(k_cache.rows),
            ]),
            &[q, k_cache, v_cache, pos, seq, out],
            (q.rows * p.n_heads) as u64,
        )
    }

    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.elementwise(Elementwise::Add, a, Some(b), 0.0, out)
    }

    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.elementwise(Elementwise::Mul, a, Some(b), 0.0, out)
    }

    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()> {
        self.elementwise(Elementwise::Scale, x, None, s, out)
    }

    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.elementwise(Elementwise::SiluMul, gate, Some(up), 0.0, out)
    }

    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.elementwise(Elementwise::GeluMul, gate, Some(up), 0.0, out)
    }

    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        let op = Op::Softmax;
        dtype(op, x, &[F32], "input")?;
        dtype(op, out, &[F32], "output")?;
        check(op, out.rows == x.rows && out.cols == x.cols, || {
            format!(
                "output {}x{} for input {}x{}",
                out.rows, out.cols, x.rows, x.cols
            )
        })?;
        self.run(
            Kernel::Softmax,
            params(&[u(x.rows), u(x.cols)]),
            &[x, out],
            x.rows as u64,
        )
    }

    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        let op = Op::Argmax;
        dtype(op, x, &[F32], "input")?;
        dtype(op, out, &[I32], "output")?;
        check(op, out.n_elements() == x.rows && x.cols > 0, || {
            format!(
                "{} outputs for {} rows of {}",
                out.n_elements(),
                x.rows,
                x.cols
            )
        })?;
        self.run(
            Kernel::Argmax,
            params(&[u(x.rows), u(x.cols)]),
            &[x, out],
            x.rows as u64,
        )
    }

    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()> {
        let op = Op::Copy;
        dtype(op, src, &[F32, F16], "source")?;
        dtype(op, dst, &[F32, F16], "destination")?;
        check(op, src.rows == dst.rows && src.cols == dst.cols, || {
            format!(
                "source {}x{}, destination {}x{}",
                src.rows, src.cols, dst.rows, dst.cols
            )
        })?;
        let n = src.n_elements();
        let threads = if dst.dtype == F16 { n.div_ceil(2) } else { n };
        self.run(
            Kernel::Copy {
                src: src.dtype,
                dst: dst.dtype,
            },
            params(&[u(n)]),
            &[src, dst],
            threads.div_ceil(256) as u64,
        )
    }
}
