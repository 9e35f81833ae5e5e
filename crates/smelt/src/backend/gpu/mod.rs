//! The GPU backend on wgpu: WGSL kernels, recorded into one submission per
//! forward pass.
//!
//! - `context`: adapters (for `smelt devices` and selection) and the device.
//! - `buffers`: one device buffer per tensor, weights uploaded once.
//! - `pipelines`: the kernel table (`kernels/*.wgsl`, variants by defines)
//!   and the pipeline cache.
//! - `recorder`: the open encoder, the per-submission parameter arena and
//!   the bind-group cache.
//! - `ops`: the contract's ops: checks, then one dispatch each.
//!
//! Shapes follow the contract: tensors are `rows × cols`, `cols` contiguous.
//! Weights keep their GGUF block layout; kernels decode blocks in registers.

mod buffers;
mod context;
mod ops;
mod pipelines;
mod recorder;
mod tables;

pub use context::{AdapterReport, GpuOptions, adapters, best_hardware};
pub use pipelines::{
    ActQuant, Elementwise, Kernel, Q8_WEIGHT_TYPES, ShaderFeatures, WEIGHT_TYPES, preprocess,
};

use crate::backend::{Caps, Result, RopeMode, RopeParams, Stats, Tensor, WeightData};
use crate::quant::GgmlType;

use buffers::Buffers;
use context::Context;
use pipelines::{PipelineCache, WG_ROW};
use recorder::{Params, Recorder};

/// Up to this many tokens a matmul runs as mat-vec (weights streamed once
/// per token); above it, the tiled kernel.
const MATVEC_MAX_TOKENS: usize = 4;

pub struct GpuBackend {
    ctx: Context,
    buffers: Buffers,
    pipelines: PipelineCache,
    rec: Recorder,
    /// A small buffer bound where a kernel's optional input is absent.
    dummy: Tensor,
    /// exact.wgsl's constants and tables (`1 × tables::LEN` F32).
    tables: Tensor,
    /// Rounded activations for matmuls, grown on first use of a larger
    /// batch and reused.
    acts: Acts,
    /// What `acts` holds: (tensor id, rows, cols, rounding), valid until
    /// anything may have written that tensor.
    acts_of: Option<(u32, usize, usize, ActQuant)>,
    /// An op not yet dispatched, for the next to join (`Pending`); anything
    /// else dispatches it as it is first.
    pending: Option<Pending>,
}

/// An op held back, recorded later with the op that follows if they fuse:
/// a norm or GLU with the next matmul's Q8 rounding (`RmsNormQ8`,
/// `GluQ8`), a residual add inside the norm after it (`AddRmsNorm`) or the
/// mat-vec before it (`MatVecDot`), paired ropes and cache writes.
#[derive(Clone, Copy)]
enum Pending {
    /// `rms_norm(x, w, eps, out)`.
    Norm {
        x: Tensor,
        w: Tensor,
        eps: f32,
        out: Tensor,
    },
    /// `out = act(gate) · up` (SiluMul or GeluMul).
    Glu {
        op: Elementwise,
        gate: Tensor,
        up: Tensor,
        out: Tensor,
    },
    /// `out = a + b`, same shapes (f32 activations): an rms_norm of `out`
    /// next takes it in (`AddRmsNorm`).
    Add { a: Tensor, b: Tensor, out: Tensor },
    /// A rope: a rope at the same positions and with the same frequencies
    /// next (K after Q) joins it in one dispatch.
    Rope {
        x: Tensor,
        pos: Tensor,
        p: RopeParams,
        out: Tensor,
    },
    /// Two ropes (normal mode): K's cache write next joins them, then V's
    /// (`RopeStore`); anything else dispatches them as a `RopePair`, or with
    /// K's write (`store`, cache rows `ids` of `kc`) a `RopeStore` without V.
    Ropes {
        q: (Tensor, Tensor),
        /// K's input, output and heads (`p` has Q's).
        k: (Tensor, Tensor, usize),
        pos: Tensor,
        p: RopeParams,
        store: Option<(Tensor, Tensor)>,
    },
    /// A KV-cache write: one with the same ids into a cache of the same
    /// shape next (V after K) joins it in one dispatch.
    SetRows {
        src: Tensor,
        ids: Tensor,
        dst: Tensor,
    },
    /// Decode attention (q, caches, positions, slots, out; its parameters
    /// and workgroups), whose output the next matmul rounds to Q8 inside
    /// it (`AttentionQ8`).
    Attention {
        t: [Tensor; 6],
        params: Params,
        groups: u64,
    },
    /// A repacked decode mat-vec (f32 mode) of Q8-rounded activations
    /// `x` (quants, scales, sums), `out = x · wᵀ`: a residual add of `out`
    /// next joins it.
    MatVec {
        w: Tensor,
        x: [Tensor; 3],
        out: Tensor,
        /// `row_param` of `w`.
        row_param: usize,
    },
}

/// Tensors a held-back dispatch may bind besides its own: the dummy for an
/// absent input and the exact.wgsl tables.
#[derive(Clone, Copy)]
struct Aux {
    dummy: Tensor,
    tables: Tensor,
}

/// One dispatch: kernel, parameters, bindings, workgroups.
type Call = (Kernel, Params, Vec<Tensor>, u64);

/// A rope of `x` (and, paired, of `x2` into `out2` with its own heads) at
/// `pos`: one invocation per pair of values.
fn rope_call(
    (x, pos, p, out): (Tensor, Tensor, &RopeParams, Tensor),
    pair: Option<(Tensor, usize, Tensor)>,
    aux: Aux,
) -> Call {
    // ggml's theta_scale, with the CPU's powf.
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let heads2 = pair.map_or(0, |(_, h, _)| h);
    let params = params(&[
        P::U(x.rows as u32),
        P::U(p.n_heads as u32),
        P::U(p.head_dim as u32),
        P::U(p.n_dims as u32),
        P::F(theta_scale),
        P::F(p.freq_scale),
        P::U(u32::from(p.freq_factors.is_some())),
        P::U(heads2 as u32),
    ]);
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    let groups = (x.rows * (p.n_heads + heads2) * p.head_dim / 2).div_ceil(64) as u64;
    match pair {
        None => (
            Kernel::Rope(p.mode),
            params,
            vec![x, pos, out, ff, aux.tables],
            groups,
        ),
        Some((x2, _, out2)) => (
            Kernel::RopePair(p.mode),
            params,
            vec![x, pos, out, ff, x2, out2, aux.tables],
            groups,
        ),
    }
}

/// A repacked decode mat-vec `out = x · wᵀ` over whole rows of `out`,
/// with `resid = (res, sum)` the residual add `sum = res + out`.
fn matvec_call(
    (w, [xq, xd, _], out, row_param): (Tensor, [Tensor; 3], Tensor, usize),
    resid: Option<(Tensor, Tensor)>,
) -> Call {
    let (m, n, blocks) = (w.rows, out.rows, w.rows.div_ceil(4));
    let params = params(&[
        P::U(m as u32),
        P::U(w.cols as u32),
        P::U(n as u32),
        P::U(row_param as u32),
        P::U(blocks as u32),
        P::U(m as u32),
        P::U(0),
    ]);
    let mut bound = vec![w, xq, xd, out];
    bound.extend(resid.into_iter().flat_map(|(res, sum)| [res, sum]));
    let kernel = Kernel::MatVecDot {
        t: w.dtype,
        residual: resid.is_some(),
    };
    (kernel, params, bound, (blocks * n) as u64)
}

/// Q's and K's ropes (normal mode; K's input, output and heads in `k`),
/// K's rotated rows written to cache rows `ids` of `kc` and, with `v =
/// (v, vc)`, V's rows to `vc` alike: one dispatch (`RopeStore`), two
/// values per invocation.
fn rope_store_call(
    ((x, out), k, pos, p): (
        (Tensor, Tensor),
        (Tensor, Tensor, usize),
        Tensor,
        &RopeParams,
    ),
    (ids, kc): (Tensor, Tensor),
    v: Option<(Tensor, Tensor)>,
    aux: Aux,
) -> Call {
    let (x2, out2, heads2) = (k.0, k.1, k.2);
    let (_, mut params, _, _) = rope_call((x, pos, p, out), Some((x2, heads2, out2)), aux);
    let vcols = v.map_or(0, |(v, _)| v.cols);
    params[8] = kc.rows as u32;
    params[9] = vcols as u32;
    let pairs = x.rows * (p.n_heads + heads2) * p.head_dim / 2 + x.rows * vcols / 2;
    let (v, vc) = v.unwrap_or((aux.dummy, aux.dummy));
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    (
        Kernel::RopeStore(kc.dtype),
        params,
        vec![x, pos, out, ff, x2, out2, ids, kc, v, vc, aux.tables],
        pairs.div_ceil(64) as u64,
    )
}

/// `dst[ids[i]] = src[i]` (and, paired, `dst2[ids[i]] = src2[i]`): one
/// invocation per value, or per pair of values of an F16 cache.
fn set_rows_call(
    (src, ids, dst): (Tensor, Tensor, Tensor),
    pair: Option<(Tensor, Tensor)>,
) -> Call {
    let n = ids.n_elements();
    let per_row = if dst.dtype == GgmlType::F16 {
        dst.cols / 2
    } else {
        dst.cols
    };
    let params = params(&[P::U(n as u32), P::U(dst.cols as u32), P::U(dst.rows as u32)]);
    let calls = if pair.is_some() { 2 } else { 1 };
    let groups = (calls * n * per_row).div_ceil(256) as u64;
    match pair {
        None => (
            Kernel::SetRows(dst.dtype),
            params,
            vec![src, dst, ids],
            groups,
        ),
        Some((src2, dst2)) => (
            Kernel::SetRowsPair(dst.dtype),
            params,
            vec![src, dst, ids, src2, dst2],
            groups,
        ),
    }
}

impl Pending {
    fn out(&self) -> Tensor {
        match *self {
            Pending::Norm { out, .. }
            | Pending::Glu { out, .. }
            | Pending::Add { out, .. }
            | Pending::Rope { out, .. }
            | Pending::MatVec { out, .. } => out,
            Pending::Ropes { store, k, .. } => store.map_or(k.1, |(_, kc)| kc),
            Pending::Attention { t, .. } => t[5],
            Pending::SetRows { dst, .. } => dst,
        }
    }

    /// The kernel, parameters, bindings and workgroups of the op alone,
    /// or (`q8`: quants, scales, sums) fused with the Q8 rounding of its
    /// output.
    fn dispatch(&self, q8: Option<[Tensor; 3]>, aux: Aux) -> Call {
        match *self {
            Pending::Rope { x, pos, ref p, out } => rope_call((x, pos, p, out), None, aux),
            Pending::Ropes {
                q: (x, out),
                k,
                pos,
                ref p,
                store: None,
            } => rope_call((x, pos, p, out), Some((k.0, k.2, k.1)), aux),
            Pending::Ropes {
                q,
                k,
                pos,
                ref p,
                store: Some((ids, kc)),
            } => rope_store_call((q, k, pos, p), (ids, kc), None, aux),
            Pending::SetRows { src, ids, dst } => set_rows_call((src, ids, dst), None),
            Pending::Attention { t, params, groups } => {
                let [q, k, v, pos, seq, out] = t;
                match q8 {
                    None => (
                        Kernel::Attention(k.dtype),
                        params,
                        vec![q, k, v, pos, seq, out, aux.tables],
                        groups,
                    ),
                    Some([xq, xd, xs]) => (
                        Kernel::AttentionQ8(k.dtype),
                        params,
                        vec![q, k, v, pos, seq, out, xq, xd, xs, aux.tables],
                        groups,
                    ),
                }
            }
            Pending::MatVec {
                w,
                x,
                out,
                row_param,
            } => matvec_call((w, x, out, row_param), None),
            Pending::Norm { x, w, eps, out } => {
                // With the rounding, a row in parts of WG_ROW words.
                let parts = (x.cols / 4).div_ceil(WG_ROW as usize).max(1);
                let p = params(&[
                    P::U(x.rows as u32),
                    P::U(x.cols as u32),
                    P::F(eps),
                    P::U(parts as u32),
                ]);
                match q8 {
                    None => (
                        Kernel::RmsNorm { weight: true },
                        p,
                        vec![x, out, w],
                        x.rows as u64,
                    ),
                    Some([xq, xd, xs]) => (
                        Kernel::RmsNormQ8,
                        p,
                        vec![x, out, w, xq, xd, xs],
                        (x.rows * parts) as u64,
                    ),
                }
            }
            Pending::Add { a, b, out } => {
                let n = a.n_elements();
                let p = params(&[P::U(n as u32), P::U(n as u32), P::F(0.0)]);
                (
                    Kernel::Elementwise(Elementwise::Add),
                    p,
                    vec![a, out, b],
                    n.div_ceil(256) as u64,
                )
            }
            Pending::Glu { op, gate, up, out } => {
                let n = gate.n_elements();
                let p = params(&[P::U(n as u32), P::U(n as u32), P::F(0.0)]);
                match q8 {
                    None => (
                        Kernel::Elementwise(op),
                        p,
                        vec![gate, out, up],
                        n.div_ceil(256) as u64,
                    ),
                    // One invocation per word of 4 values.
                    Some([xq, xd, xs]) => (
                        Kernel::GluQ8(op),
                        p,
                        vec![gate, out, up, xq, xd, xs],
                        (n / 4).div_ceil(WG_ROW as usize) as u64,
                    ),
                }
            }
        }
    }
}

/// A matmul's activations, rounded as ggml rounds them (`quantize.wgsl`).
#[derive(Default)]
struct Acts {
    /// Values that fit: rounded values, or Q8 quants, as F32 or I32 words.
    capacity: usize,
    /// `1 × capacity` F32: Q8_K- or f16-rounded values.
    vals: Option<Tensor>,
    /// Q8 blocks: quants 4 per word (`1 × capacity / 4` I32), scales and
    /// sums (`1 × capacity / 32` F32 each).
    q8: Option<[Tensor; 3]>,
}

/// The input a matmul kernel reads.
enum MatIn {
    /// F32 values: the activations themselves or their rounding.
    F32(Tensor),
    /// Q8 blocks: quants, scales, sums.
    Q8([Tensor; 3]),
}

impl GpuBackend {
    /// Opens the adapter `opts` selects (see [`adapters`]).
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        let ctx = Context::open(opts)?;
        let mut buffers = Buffers::default();
        let dummy = buffers.alloc(&ctx, "dummy", GgmlType::F32, 1, 4)?;
        let tables = buffers.alloc(&ctx, "exact tables", GgmlType::F32, 1, tables::LEN)?;
        let mut rec = Recorder::new(&ctx);
        rec.write(
            &ctx,
            &buffers.get(tables)?.buffer,
            bytemuck::cast_slice(&tables::exact_tables()),
        );
        Ok(Self {
            ctx,
            buffers,
            pipelines: PipelineCache::default(),
            rec,
            dummy,
            tables,
            acts: Acts::default(),
            acts_of: None,
            pending: None,
        })
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterReport {
        &self.ctx.report
    }

    /// The features the kernels were built with.
    pub fn features(&self) -> ShaderFeatures {
        self.ctx.features
    }

    /// Whether weights are written straight into mapped device memory.
    pub fn zero_copy(&self) -> bool {
        self.ctx.zero_copy
    }

    pub(crate) fn gpu_caps(&self) -> Caps {
        Caps {
            is_gpu: true,
            unified_memory: self.ctx.report.unified_memory,
            max_tensor_bytes: self.ctx.max_binding.saturating_sub(8),
        }
    }

    pub(crate) fn gpu_stats(&self) -> Stats {
        self.rec.stats
    }

    fn alloc_tensor(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let what = format!("{rows}x{cols} {dtype} tensor");
        self.buffers.alloc(&self.ctx, &what, dtype, rows, cols)
    }

    fn load(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: &WeightData,
    ) -> Result<Tensor> {
        // A weight over the binding limit is split by rows when it is one
        // that get_rows and matmul read; anything else is refused there.
        let over = dtype
            .row_bytes(cols)
            .and_then(|r| r.checked_mul(rows))
            .is_some_and(|b| {
                // A repacked weight may grow by up to 7 blocks.
                let b = (b + 7 * dtype.type_size()) as u64;
                buffers::padded(b) > self.ctx.max_weight_binding
            });
        if over && WEIGHT_TYPES.contains(&dtype) {
            return self
                .buffers
                .load_split(&self.ctx, name, dtype, rows, cols, data);
        }
        self.buffers
            .load_weight(&self.ctx, name, dtype, rows, cols, data)
    }

    fn write_bytes(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        self.flush_pending()?;
        let slot = self.buffers.get(t)?;
        if bytes.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "write of {} bytes into {} ({} bytes)",
                bytes.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.write(&self.ctx, &slot.buffer, bytes);
        self.acts_of = None;
        Ok(())
    }

    fn read_bytes(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        self.flush_pending()?;
        let slot = self.buffers.get(t)?;
        if out.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "read of {} bytes from {} ({} bytes)",
                out.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.read(&self.ctx, &slot.buffer, out)
    }

    fn sync(&mut self) -> Result<()> {
        self.flush_pending()?;
        self.rec.wait(&self.ctx)
    }

    /// Records `kernel` over `groups` workgroups with `tensors` bound in its
    /// binding order.
    fn run(
        &mut self,
        kernel: Kernel,
        params: Params,
        tensors: &[Tensor],
        groups: u64,
    ) -> Result<()> {
        // Whatever this dispatch is, a held-back norm comes before it.
        self.flush_pending()?;
        if !matches!(
            kernel,
            Kernel::MatVec(_)
                | Kernel::MatVecMulti(_)
                | Kernel::MatVecDot { .. }
                | Kernel::MatMul(_)
                | Kernel::MatMulCoop(_)
                | Kernel::MatVecQ8(_)
                | Kernel::MatMulQ8(_)
                | Kernel::QuantizeActs(_)
        ) {
            // Any other op may write the tensor whose rounding is cached.
            self.acts_of = None;
        }
        let mut bound = Vec::with_capacity(tensors.len());
        for t in tensors {
            bound.push((t.id, &self.buffers.get(*t)?.buffer));
        }
        self.rec.dispatch(
            &self.ctx,
            &mut self.pipelines,
            kernel,
            &params,
            &bound,
            groups,
        )
    }
}

/// Packs parameters: integers as they are, floats by their bits.
fn params(values: &[P]) -> Params {
    let mut p = [0u32; 16];
    for (slot, v) in p.iter_mut().zip(values) {
        *slot = match *v {
            P::U(u) => u,
            P::F(f) => f.to_bits(),
        };
    }
    p
}

/// One parameter of a dispatch.
#[derive(Clone, Copy)]
enum P {
    U(u32),
    F(f32),
}

impl GpuBackend {
    /// Whether a matmul of `x` by a `w` weight is a repacked decode (f32
    /// mode) on Q8-rounded activations (`MatVecDot`, `MatVecMulti`).
    fn dot_decode(&self, w: GgmlType, x: Tensor) -> bool {
        self.ctx.features.repacks(w) && x.rows <= MATVEC_MAX_TOKENS
    }

    /// `x` rounded as ggml rounds a matmul's activations for weights of
    /// type `w` (in f32 mode for `dot_decode` only), or `x` itself. Consecutive matmuls on the same input (Q, K,
    /// V; gate, up) share one rounding.
    fn matmul_input(&mut self, w: GgmlType, x: Tensor) -> Result<MatIn> {
        let rounds = self.ctx.quantize_activations || self.dot_decode(w, x);
        let Some(q) = ActQuant::for_weight(w).filter(|_| rounds) else {
            return Ok(MatIn::F32(x));
        };
        let n = x.n_elements().max(32);
        if self.acts.capacity < n {
            self.acts = Acts {
                capacity: n,
                ..Acts::default()
            };
            self.acts_of = None;
        }
        let cap = self.acts.capacity;
        let input = if q == ActQuant::Q8 {
            let bufs = match self.acts.q8 {
                Some(b) => b,
                None => {
                    let b = [
                        self.alloc_tensor(GgmlType::I32, 1, cap / 4)?,
                        self.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
                        self.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
                    ];
                    self.acts.q8 = Some(b);
                    b
                }
            };
            let n = x.n_elements();
            MatIn::Q8([
                bufs[0].reshape(1, n / 4),
                bufs[1].reshape(1, n / 32),
                bufs[2].reshape(1, n / 32),
            ])
        } else {
            let vals = match self.acts.vals {
                Some(v) => v,
                None => {
                    let v = self.alloc_tensor(GgmlType::F32, 1, cap)?;
                    self.acts.vals = Some(v);
                    v
                }
            };
            MatIn::F32(vals.reshape(x.rows, x.cols))
        };
        let fused = self.pending.filter(|p| p.out() == x).zip(match &input {
            MatIn::Q8(bufs) => Some(*bufs),
            MatIn::F32(_) => None,
        });
        if let Some((p, bufs)) = fused {
            // The op and the rounding in one dispatch.
            self.pending = None;
            let (kernel, params, bound, groups) = p.dispatch(Some(bufs), self.aux());
            self.run(kernel, params, &bound, groups)?;
            self.acts_of = Some((x.id, x.rows, x.cols, q));
        }
        if self.acts_of != Some((x.id, x.rows, x.cols, q)) {
            let n = x.n_elements();
            let (threads, bound) = match &input {
                MatIn::Q8([xq, xd, xs]) => (n / 4, vec![x, *xq, *xd, *xs]),
                MatIn::F32(v) if q == ActQuant::F16 => (n, vec![x, *v]),
                MatIn::F32(v) => (n / 256, vec![x, *v]),
            };
            // Q8: one invocation per word; Q8_K: per block of 256.
            let wg = if q == ActQuant::Q8K {
                64
            } else {
                WG_ROW as usize
            };
            self.run(
                Kernel::QuantizeActs(q),
                params(&[P::U(n as u32)]),
                &bound,
                threads.div_ceil(wg) as u64,
            )?;
            self.acts_of = Some((x.id, x.rows, x.cols, q));
        }
        Ok(input)
    }

    /// Dispatches the held-back op, if any, as it is.
    fn flush_pending(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let (kernel, params, bound, groups) = p.dispatch(None, self.aux());
        self.run(kernel, params, &bound, groups)
    }

    /// Holds a norm, GLU or decode attention `p` back for fusing with the
    /// next matmul's Q8 rounding (every matmul in ggml's mode, repacked
    /// decode in f32 mode) when its output is whole blocks of 32, and not
    /// in place; dispatches it otherwise.
    fn defer(&mut self, p: Pending) -> Result<()> {
        self.flush_pending()?;
        let out = p.out();
        let in_place = match p {
            Pending::Norm { x, .. } => x.id == out.id,
            Pending::Glu { gate, up, .. } => gate.id == out.id || up.id == out.id,
            Pending::Attention { t, .. } => t[0].id == out.id,
            _ => true,
        };
        let rounds = self.ctx.quantize_activations || self.ctx.features.fast_math;
        if rounds && out.cols.is_multiple_of(32) && !in_place {
            self.acts_of = None;
            self.pending = Some(p);
            return Ok(());
        }
        let (kernel, params, bound, groups) = p.dispatch(None, self.aux());
        self.run(kernel, params, &bound, groups)
    }

    fn aux(&self) -> Aux {
        Aux {
            dummy: self.dummy,
            tables: self.tables,
        }
    }

    /// Holds a rope back, or dispatches it paired with
    /// the one held if that one has the same positions and frequencies.
    fn rope_paired(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
        if let Some(Pending::Rope {
            x: x1,
            pos: pos1,
            p: p1,
            out: out1,
        }) = self.pending
        {
            let same = RopeParams {
                n_heads: p.n_heads,
                ..p1
            } == *p;
            let apart = [x.id, out.id]
                .iter()
                .all(|&id| id != x1.id && id != out1.id && id != pos.id);
            if pos1 == pos && same && apart {
                self.wrote(out);
                let ropes = Pending::Ropes {
                    q: (x1, out1),
                    k: (x, out, p.n_heads),
                    pos,
                    p: p1,
                    store: None,
                };
                // Normal mode: K's pairs are neighbours, whole f16 words of
                // its cache row, for its cache write to join.
                if p.mode == RopeMode::Normal {
                    self.pending = Some(ropes);
                    return Ok(());
                }
                self.pending = None;
                let (kernel, params, bound, groups) = ropes.dispatch(None, self.aux());
                return self.run(kernel, params, &bound, groups);
            }
        }
        self.flush_pending()?;
        self.wrote(out);
        self.pending = Some(Pending::Rope { x, pos, p: *p, out });
        Ok(())
    }

    /// Holds a KV-cache write back: with the ropes held if it writes K's
    /// rotated rows, or alone; or dispatches it with what is held, the
    /// ropes and K's write (`RopeStore`) or K's write (`SetRowsPair`), if
    /// it is V's with the same ids and shapes.
    fn set_rows_paired(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        if let Some(Pending::Ropes {
            q,
            k,
            pos,
            p,
            store,
        }) = self.pending
        {
            let (x, out) = q;
            let read = [x, out, k.0, k.1, pos, ids];
            match store {
                // K's cache write: rows of K's rotated output.
                None if src == k.1
                    && dst.cols == src.cols
                    && read.iter().all(|t| t.id != dst.id) =>
                {
                    self.wrote(dst);
                    self.pending = Some(Pending::Ropes {
                        q,
                        k,
                        pos,
                        p,
                        store: Some((ids, dst)),
                    });
                    return Ok(());
                }
                // V's: the same ids into a cache like K's.
                Some((ids1, kc))
                    if ids1 == ids
                        && (src.rows, src.cols) == (k.1.rows, k.1.cols)
                        && (dst.dtype, dst.rows, dst.cols) == (kc.dtype, kc.rows, kc.cols)
                        && src.id != kc.id
                        && read.iter().chain([&kc]).all(|t| t.id != dst.id) =>
                {
                    self.pending = None;
                    self.wrote(dst);
                    let (kernel, params, bound, groups) =
                        rope_store_call((q, k, pos, &p), (ids, kc), Some((src, dst)), self.aux());
                    return self.run(kernel, params, &bound, groups);
                }
                _ => {}
            }
        }
        if let Some(Pending::SetRows {
            src: src1,
            ids: ids1,
            dst: dst1,
        }) = self.pending
        {
            let same = ids1 == ids
                && (src1.rows, src1.cols) == (src.rows, src.cols)
                && (dst1.dtype, dst1.rows, dst1.cols) == (dst.dtype, dst.rows, dst.cols)
                && src1.dtype == src.dtype;
            let apart = [src.id, dst.id]
                .iter()
                .all(|&id| id != src1.id && id != dst1.id && id != ids.id);
            if same && apart {
                self.pending = None;
                let (kernel, params, bound, groups) =
                    set_rows_call((src1, ids, dst1), Some((src, dst)));
                return self.run(kernel, params, &bound, groups);
            }
        }
        self.flush_pending()?;
        self.wrote(dst);
        self.pending = Some(Pending::SetRows { src, ids, dst });
        Ok(())
    }

    /// Holds a residual add back (f32 activations), for an rms_norm of its
    /// sum to take in.
    fn defer_add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.flush_pending()?;
        self.wrote(out);
        self.pending = Some(Pending::Add { a, b, out });
        Ok(())
    }

    /// The rms_norm (with weight `w`) of a held-back add's sum, in one
    /// dispatch with the add; false if no such add is pending.
    fn norm_of_pending_add(&mut self, x: Tensor, w: Tensor, eps: f32, out: Tensor) -> Result<bool> {
        let Some(Pending::Add { a, b, out: sum }) = self.pending else {
            return Ok(false);
        };
        if sum != x || out.id == sum.id || out.id == a.id || out.id == b.id {
            return Ok(false);
        }
        self.pending = None;
        self.run(
            Kernel::AddRmsNorm,
            params(&[P::U(x.rows as u32), P::U(x.cols as u32), P::F(eps)]),
            &[a, out, w, b, sum],
            x.rows as u64,
        )?;
        Ok(true)
    }

    /// Holds a repacked decode mat-vec back (f32 mode, whole rows of
    /// `out`) for a residual add to join.
    fn hold_matvec(&mut self, w: Tensor, x: [Tensor; 3], out: Tensor, row_param: usize) {
        self.wrote(out);
        self.pending = Some(Pending::MatVec {
            w,
            x,
            out,
            row_param,
        });
    }

    /// The residual add `sum = a + b` of a held-back mat-vec's output, in
    /// one dispatch with it; false if no such mat-vec is held, or if the
    /// add touches what the mat-vec reads.
    fn matvec_with_residual(&mut self, a: Tensor, b: Tensor, sum: Tensor) -> Result<bool> {
        let Some(Pending::MatVec {
            w,
            x,
            out,
            row_param,
        }) = self.pending
        else {
            return Ok(false);
        };
        let res = match (a == out, b == out) {
            (_, true) => a,
            (true, false) => b,
            (false, false) => return Ok(false),
        };
        // Not a tensor the mat-vec reads (bound read-only).
        let clash = [w, x[0], x[1]]
            .iter()
            .any(|t| t.id == res.id || t.id == sum.id);
        if clash || (res.rows, res.cols) != (out.rows, out.cols) {
            return Ok(false);
        }
        self.pending = None;
        self.wrote(sum);
        let (kernel, params, bound, groups) = matvec_call((w, x, out, row_param), Some((res, sum)));
        self.run(kernel, params, &bound, groups)?;
        Ok(true)
    }

    /// Forgets the cached rounding if `out` is the tensor it came from.
    fn wrote(&mut self, out: Tensor) {
        if self.acts_of.is_some_and(|(id, ..)| id == out.id) {
            self.acts_of = None;
        }
    }
}
