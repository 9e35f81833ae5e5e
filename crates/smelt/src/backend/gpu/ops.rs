//! The contract's ops on the GPU. Each runs the contract's shared shape and
//! type checks (`backend::check`, the same the CPU runs), then the kernels' own
//! limits: a bad call is an error, never a panic or an out-of-bounds
//! dispatch. Then it packs its parameters and records one dispatch.

use crate::backend::check as contract;
use crate::backend::{
    AttentionParams, Backend, BackendError, Caps, Op, OpTime, Result, RopeParams, Stats, Tensor,
    WeightData, WeightInput,
};
use crate::quant::GgmlType::{self, F16, F32};

use super::pending::{CoopAttention, CoopGateUp, DotIn, matvec_call, multi_call};
use super::pipelines::{
    COOP_ATTENTION_HEAD_DIMS, CoopTile, Elementwise, Kernel, MATMUL_Q8_TOKENS, MATVEC_Q8_TOKENS,
    Multi, WEIGHT_TYPES, coop_attention_heads, has_min,
};
use super::{GpuBackend, MATVEC_MAX_TOKENS, MatIn, P, Pending, params};

/// Largest head the attention kernel holds (its rows' kernel keeps a row in
/// registers; decode: up to 4 dims per invocation of WG_ATTENTION).
const MAX_HEAD_DIM: usize = 256;

/// Above this many query rows attention runs one invocation per (head,
/// row) rather than one workgroup per (row, head).
const ATTENTION_ROWS_MIN: usize = 4;

/// A limit of the GPU kernels beyond the contract.
fn limit(op: Op, ok: bool, detail: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BackendError::Shape {
            op,
            detail: detail(),
        })
    }
}

fn u(x: usize) -> P {
    // Tensors are capped below 4 GiB (buffers::max_tensor_bytes), so every
    // count and offset fits.
    P::U(x as u32)
}

impl GpuBackend {
    /// What kernels take as a weight's row stride: bytes per row, or for
    /// a repacked weight blocks per row (offsets count blocks there).
    fn row_param(&self, dtype: GgmlType, cols: usize) -> usize {
        if self.ctx.features.repacks(dtype) {
            cols / dtype.block_size()
        } else {
            dtype.row_bytes(cols).unwrap_or(0)
        }
    }

    fn require(&self, op: Op, dtype: GgmlType) -> Result<()> {
        if self.supports(op, dtype) {
            Ok(())
        } else {
            Err(BackendError::Unsupported {
                backend: self.name(),
                op,
                dtype,
            })
        }
    }

    /// The elementwise family; `b` is absent only for `scale`.
    fn elementwise(
        &mut self,
        op: Elementwise,
        a: Tensor,
        b: Option<Tensor>,
        s: f32,
        out: Tensor,
    ) -> Result<()> {
        let n = a.n_elements();
        let mut bound = vec![a, out];
        let mut b_len = n;
        if let Some(b) = b {
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
        // As llama-bench names a device: the API, then the adapter.
        format!("{} ({})", self.ctx.report.backend, self.ctx.report.name)
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

    fn load_joined(&mut self, ws: &[WeightInput]) -> Result<Vec<Tensor>> {
        // Only the prefill matmuls on cooperative matrices read them joined
        // (`matmuls_coop`).
        if self.ctx.features.coop != 0 {
            if let Some(ts) = self.buffers.load_joined(&self.ctx, ws)? {
                return Ok(ts);
            }
        }
        ws.iter()
            .map(|w| self.load(&w.name, w.dtype, w.rows, w.cols, &w.data))
            .collect()
    }

    fn discard(&mut self, ts: &[Tensor]) -> Result<()> {
        self.discard_held(ts);
        Ok(())
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

    fn op_times(&self) -> Vec<OpTime> {
        self.rec.op_times()
    }

    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        self.require(Op::GetRows, table.dtype)?;
        contract::get_rows(table, ids, out)?;
        let n = ids.n_elements();
        let row_bytes = self.row_param(table.dtype, table.cols);
        let per_row = if table.dtype.is_quantized() {
            table.cols / 8
        } else {
            table.cols
        };
        let groups = (n * per_row).div_ceil(64) as u64;
        // A split table: each part writes the rows whose ids fall in it.
        let parts = self.buffers.parts(table).map(<[_]>::to_vec);
        let Some(parts) = parts else {
            let p = params(&[u(n), u(table.cols), u(row_bytes), u(table.rows), u(0), u(0)]);
            return self.run(Kernel::GetRows(table.dtype), p, &[table, ids, out], groups);
        };
        for (part, row0) in parts {
            let p = params(&[
                u(n),
                u(table.cols),
                u(row_bytes),
                u(part.rows),
                u(row0),
                u(1),
            ]);
            self.run(Kernel::GetRows(table.dtype), p, &[part, ids, out], groups)?;
        }
        Ok(())
    }

    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        let op = Op::SetRows;
        self.require(op, dst.dtype)?;
        contract::set_rows(src, ids, dst)?;
        // Each invocation writes one whole u32 word of an F16 row.
        limit(op, dst.dtype == F32 || dst.cols.is_multiple_of(2), || {
            format!(
                "an F16 destination needs an even row length, not {}",
                dst.cols
            )
        })?;
        // Held back for V's write to join K's (the same arithmetic).
        self.set_rows_paired(src, ids, dst)
    }

    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()> {
        contract::rms_norm(x, weight, out)?;
        // Held back for fusing with the next matmul's Q8 rounding
        // (`matmul_input`); any other use dispatches it first (`run`).
        if let Some(w) = weight {
            if self.norm_of_pending_add(x, w, eps, out)? {
                return Ok(());
            }
            return self.defer(Pending::Norm { x, w, eps, out });
        }
        let mut bound = vec![x, out];
        bound.extend(weight);
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
        contract::rope(x, pos, p, out)?;
        // One invocation per pair of values.
        limit(
            op,
            p.head_dim.is_multiple_of(2) && p.n_dims.is_multiple_of(2),
            || {
                format!(
                    "n_dims {} and head_dim {} must be even",
                    p.n_dims, p.head_dim
                )
            },
        )?;
        // Held back for K's rope to join Q's (the same arithmetic).
        self.rope_paired(x, pos, p, out)
    }

    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
        self.require(Op::MatMul, w.dtype)?;
        contract::matmul(w, x, out)?;
        // A split weight: each part computes its columns of `out`, from
        // one shared rounding of `x`.
        match self.buffers.parts(w).map(<[_]>::to_vec) {
            // Held for a residual add after it to join.
            None if self.dot_decode(w.dtype, x) && x.id != out.id => {
                let MatIn::Q8(q8) = self.matmul_input(w.dtype, x)? else {
                    return Err(BackendError::Other(
                        "matmul: Q8 activations expected".into(),
                    ));
                };
                self.hold_matvec(w, q8, out);
                Ok(())
            }
            None => self.matmul_cols(w, x, out, 0),
            Some(parts) => parts
                .into_iter()
                .try_for_each(|(part, row0)| self.matmul_cols(part, x, out, row0)),
        }
    }

    fn matmuls(&mut self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Result<()> {
        // Gate and up on cooperative matrices: held for the GLU after them.
        if let Some(g) = self.coop_gate_up(ws, x, outs)? {
            return self.hold_coop_gate_up(g);
        }
        let coop = self.multi_coop(ws, x, outs);
        if coop.is_none() && !self.multi_matvec(ws, x, outs) {
            for (&w, &out) in ws.iter().zip(outs) {
                self.matmul(w, x, out)?;
            }
            return Ok(());
        }
        for (&w, &out) in ws.iter().zip(outs) {
            self.require(Op::MatMul, w.dtype)?;
            contract::matmul(w, x, out)?;
        }
        // Prefill: the weights before `first` alone (none is split).
        if let Some((first, tile)) = coop {
            for (&w, &out) in ws[..first].iter().zip(outs) {
                self.matmul_cols(w, x, out, 0)?;
            }
            return self.matmuls_coop(&ws[first..], x, &outs[first..], tile);
        }
        let gate_up = match (ws, outs) {
            ([w0, w1], [o0, o1]) if w0.rows == w1.rows && w0.rows.is_multiple_of(32) => {
                Some(([*w0, *w1], [*o0, *o1]))
            }
            _ => None,
        };
        // The rms_norm held back whose output x is, taken in; or x's Q8
        // rounding.
        let input = match self.norm_for_matvec((ws[0].dtype, x), outs, gate_up.is_some()) {
            Some(norm) => DotIn::Norm(norm),
            None => {
                let MatIn::Q8([xq, xd, _]) = self.matmul_input(ws[0].dtype, x)? else {
                    return Err(BackendError::Other(
                        "matmuls: Q8 activations expected".into(),
                    ));
                };
                DotIn::Q8([xq, xd])
            }
        };
        for &out in outs {
            self.wrote(out);
        }
        // Gate and up: held for the GLU after them to join.
        if let Some((w, o)) = gate_up {
            return self.hold_gate_up(w, input, o);
        }
        let (kernel, params, bound, groups) = multi_call(ws, input, outs, x.rows);
        self.run(kernel, params, &bound, groups)
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
        self.require(op, k_cache.dtype)?;
        contract::attention(q, k_cache, v_cache, pos, seq, p, out)?;
        limit(op, k_cache.rows >= p.ctx, || {
            format!(
                "a cache of {} rows for a context of {}",
                k_cache.rows, p.ctx
            )
        })?;
        limit(op, k_cache.dtype == v_cache.dtype, || {
            format!("K cache {} and V cache {}", k_cache.dtype, v_cache.dtype)
        })?;
        // Output dims are spread 4 per invocation; f16 caches are read in
        // pairs.
        limit(
            op,
            p.head_dim <= MAX_HEAD_DIM && p.head_dim.is_multiple_of(2),
            || {
                format!(
                    "head_dim {} (the GPU kernel takes even sizes up to {MAX_HEAD_DIM})",
                    p.head_dim
                )
            },
        )?;
        // Prefill: one invocation per (head, row), no barriers; decode: a
        // workgroup per (row, head) so one row still fills the GPU.
        let per_row = q.rows > ATTENTION_ROWS_MIN && p.head_dim.is_multiple_of(4);
        let params = params(&[
            u(q.rows),
            u(p.n_heads),
            u(p.n_kv_heads),
            u(p.head_dim),
            u(p.ctx),
            u(p.window.unwrap_or(0)),
            // With a softcap ggml folds 1/cap into the scale.
            P::F(p.softcap.map_or(p.scale, |cap| p.scale / cap)),
            P::F(p.softcap.unwrap_or(0.0)),
            u(k_cache.rows),
        ]);
        if per_row {
            let (kv, head_dim) = (k_cache.dtype, p.head_dim as u32);
            let f = self.ctx.features;
            let heads = coop_attention_heads(p.n_heads, p.n_kv_heads);
            let coop = Kernel::AttentionCoop {
                head_dim,
                heads,
                half: false,
            };
            let quads = Kernel::AttentionQuads { kv, head_dim };
            let (kernel, groups) = if kv == F16
                && COOP_ATTENTION_HEAD_DIMS.contains(&head_dim)
                && coop.builds_with(f)
                && k_cache.rows >= f.coop as usize
            {
                (
                    coop,
                    q.rows.div_ceil(f.coop as usize) * p.n_heads / heads as usize,
                )
            } else if p.head_dim.is_multiple_of(16) && quads.builds_with(f) {
                (quads, q.rows.div_ceil(32) * p.n_heads)
            } else {
                let rows = Kernel::AttentionRows { kv, head_dim };
                (rows, (q.rows * p.n_heads).div_ceil(64))
            };
            let (groups, t) = (groups as u64, [q, k_cache, v_cache, pos, seq, out]);
            if kernel == coop {
                // Held for the next coop matmul of its output to have it
                // write its f16 blocks too.
                return self.defer(Pending::CoopAttention(CoopAttention {
                    head_dim,
                    heads,
                    t,
                    params,
                    groups,
                }));
            }
            return self.run(kernel, params, &[&t[..], &[self.tables]].concat(), groups);
        }
        // Decode: held for the next matmul's Q8 rounding to join when a
        // head is whole blocks of 32.
        let t = [q, k_cache, v_cache, pos, seq, out];
        let groups = (q.rows * p.n_heads) as u64;
        // The ropes and cache writes just held, joined where they can be.
        let rope = self.rope_store_for_attention(t, (p.n_heads, p.n_kv_heads, p.head_dim));
        let held = Pending::Attention {
            t,
            params,
            groups,
            rope,
        };
        if p.head_dim.is_multiple_of(32) {
            return self.defer(held);
        }
        let (kernel, params, bound, groups) = held.dispatch(None, self.aux());
        self.run(kernel, params, &bound, groups)
    }

    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        contract::binary(Op::Add, a, b, out)?;
        // A residual add: into the mat-vec before it, or an rms_norm of
        // the sum may follow (`AddRmsNorm`).
        if !self.ctx.quantize_activations && a.rows == b.rows && a.cols == b.cols {
            if self.matvec_with_residual(a, b, out)? {
                return Ok(());
            }
            return self.defer_add(a, b, out);
        }
        self.elementwise(Elementwise::Add, a, Some(b), 0.0, out)
    }

    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        contract::binary(Op::Mul, a, b, out)?;
        self.elementwise(Elementwise::Mul, a, Some(b), 0.0, out)
    }

    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()> {
        contract::scale(x, out)?;
        self.elementwise(Elementwise::Scale, x, None, s, out)
    }

    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        contract::glu(Op::SiluMul, gate, up, out)?;
        let op = Elementwise::SiluMul;
        if self.glu_of_gate_up(op, gate, up, out) {
            return Ok(());
        }
        self.defer(Pending::Glu { op, gate, up, out })
    }

    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        contract::glu(Op::GeluMul, gate, up, out)?;
        let op = Elementwise::GeluMul;
        if self.glu_of_gate_up(op, gate, up, out) {
            return Ok(());
        }
        self.defer(Pending::Glu { op, gate, up, out })
    }

    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        contract::softmax(x, out)?;
        self.run(
            Kernel::Softmax,
            params(&[u(x.rows), u(x.cols)]),
            &[x, out],
            x.rows as u64,
        )
    }

    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        contract::argmax(x, out)?;
        limit(Op::Argmax, x.cols > 0, || "rows of 0 values".into())?;
        self.run(
            Kernel::Argmax,
            params(&[u(x.rows), u(x.cols)]),
            &[x, out],
            x.rows as u64,
        )
    }

    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()> {
        contract::copy(src, dst)?;
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

impl GpuBackend {
    /// Whether `matmuls` can be one `MatVecMulti` dispatch: decode (up to
    /// MATVEC_MAX_TOKENS rows) of 2 or 3 repacked weights of one type and
    /// width, none split, outputs of their own.
    fn multi_matvec(&self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> bool {
        x.rows <= MATVEC_MAX_TOKENS && self.multi_repacked(ws, x, outs)
    }

    /// Whether `matmuls` runs multi `MatMulCoop` dispatches: prefill (f32
    /// activations) on cooperative matrices of 2 or 3 repacked weights as
    /// `multi_matvec` takes them; then which of them together, on which
    /// tile (`CoopTile::group`).
    fn multi_coop(&self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Option<(usize, CoopTile)> {
        let f = self.ctx.features;
        let fits = !self.ctx.quantize_activations
            && x.rows > MATVEC_MAX_TOKENS
            && f.coop != 0
            && x.cols.is_multiple_of(32)
            && self.multi_repacked(ws, x, outs);
        if !fits {
            return None;
        }
        let rows: Vec<usize> = ws.iter().map(|w| w.rows).collect();
        CoopTile::group(f.coop, &rows, x.rows, self.ctx.coop_huge)
    }

    /// Gate and up as `Pending::CoopGateUp`: prefill on cooperative
    /// matrices, as `multi_coop` takes it, of two weights of the same rows
    /// (a multiple of 32), each on huge tiles, joined in one buffer; None
    /// for anything else.
    fn coop_gate_up(
        &mut self,
        ws: &[Tensor],
        x: Tensor,
        outs: &[Tensor],
    ) -> Result<Option<CoopGateUp>> {
        let f = self.ctx.features;
        let (&[w0, w1], &[o0, o1]) = (ws, outs) else {
            return Ok(None);
        };
        let kernel = Kernel::MatMulCoop {
            t: w0.dtype,
            tile: CoopTile::Huge,
            multi: Multi::Glu(Elementwise::SiluMul),
        };
        let fits = !self.ctx.quantize_activations
            && x.rows > MATVEC_MAX_TOKENS
            && x.cols.is_multiple_of(32)
            && kernel.builds_with(f)
            && w0.rows == w1.rows
            && w0.rows.is_multiple_of(32)
            && CoopTile::pick(f.coop, w0.rows, x.rows, self.ctx.coop_huge) == CoopTile::Huge
            && self.multi_repacked(ws, x, outs);
        let joint = match self.buffers.joint(ws) {
            Some((joint, firsts)) if fits => (joint, [firsts[0], firsts[1]]),
            _ => return Ok(None),
        };
        for (&w, &out) in ws.iter().zip(outs) {
            self.require(Op::MatMul, w.dtype)?;
            contract::matmul(w, x, out)?;
        }
        Ok(Some(CoopGateUp {
            w: [w0, w1],
            joint,
            x: self.half_input(x)?,
            outs: [o0, o1],
            glu: None,
            keep: true,
            tile: f.coop_tile(CoopTile::Huge),
            row_bytes: self.row_param(w0.dtype, w0.cols),
        }))
    }

    /// 2 or 3 repacked weights of one type and width, none split, and
    /// outputs of their own.
    fn multi_repacked(&self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> bool {
        let w0 = ws.first().copied();
        (2..=3).contains(&ws.len())
            && ws.len() == outs.len()
            && w0.is_some_and(|w0| {
                ws.iter().all(|w| {
                    w.dtype == w0.dtype
                        && w.cols == w0.cols
                        && self.ctx.features.repacks(w.dtype)
                        && self.buffers.parts(*w).is_none()
                })
            })
            && outs
                .iter()
                .enumerate()
                .all(|(i, o)| o.id != x.id && outs[..i].iter().all(|p| p.id != o.id))
    }

    /// The matmuls of `multi_coop` in one dispatch on its tile: the
    /// weights' tiles along m one after the other.
    fn matmuls_coop(
        &mut self,
        ws: &[Tensor],
        x: Tensor,
        outs: &[Tensor],
        tile: CoopTile,
    ) -> Result<()> {
        let (w, n) = (ws[0], x.rows);
        let (tm, tn) = self.ctx.features.coop_tile(tile);
        let tiles: Vec<usize> = ws.iter().map(|w| w.rows.div_ceil(tm)).collect();
        let all = tiles.iter().sum::<usize>();
        // A missing third weight binds the second again and has no tiles.
        let (w2, o2) = (
            ws.get(2).copied().unwrap_or(ws[1]),
            outs.get(2).copied().unwrap_or(outs[1]),
        );
        let m2 = if ws.len() == 3 { w2.rows } else { 0 };
        let row_bytes = self.row_param(w.dtype, w.cols);
        let half = self.half_input(x)?;
        for &out in outs {
            self.wrote(out);
        }
        let mut p = params(&[
            u(w.rows),
            u(w.cols),
            u(n),
            u(row_bytes),
            u(all),
            u(w.rows),
            u(0),
            u(ws[1].rows),
            u(m2),
            u(tiles[0]),
            u(tiles[0] + tiles[1]),
        ]);
        // Weights side by side in one buffer: bound once, each from its
        // first block.
        let (multi, bound) = match self.buffers.joint(ws) {
            Some((joint, firsts)) => {
                p[11..11 + firsts.len()].copy_from_slice(&firsts);
                (Multi::Joint, vec![joint, half, outs[0], outs[1], o2])
            }
            None => (Multi::Apart, vec![w, half, outs[0], ws[1], outs[1], w2, o2]),
        };
        let kernel = Kernel::MatMulCoop {
            t: w.dtype,
            tile,
            multi,
        };
        self.run(kernel, p, &bound, (all * n.div_ceil(tn)) as u64)
    }

    /// `out[:, o0 .. o0 + w.rows] = x · wᵀ`: the whole matmul (o0 = 0), or
    /// one part of a split weight. `out` rows are `ldo` = `out.cols` wide.
    fn matmul_cols(&mut self, w: Tensor, x: Tensor, out: Tensor, o0: usize) -> Result<()> {
        let (m, k, n, ldo) = (w.rows, w.cols, x.rows, out.cols);
        let row_bytes = self.row_param(w.dtype, k);
        let input = self.matmul_input(w.dtype, x)?;
        self.wrote(out);
        match input {
            // f32 mode's repacked decode (a part of a split weight).
            MatIn::Q8(q8) if self.ctx.features.repacks(w.dtype) => {
                let (kernel, params, bound, groups) = matvec_call((w, q8, out), o0, None);
                self.run(kernel, params, &bound, groups)
            }
            MatIn::Q8([xq, xd, xs]) => {
                // ggml's integer lanes: 16 rows per workgroup, TT tokens
                // per invocation.
                let (kernel, tokens) = if n <= MATVEC_MAX_TOKENS {
                    (Kernel::MatVecQ8(w.dtype), MATVEC_Q8_TOKENS)
                } else {
                    (Kernel::MatMulQ8(w.dtype), MATMUL_Q8_TOKENS)
                };
                let groups = m.div_ceil(16);
                let mut bound = vec![w, xq, xd, out];
                if has_min(w.dtype) {
                    bound.push(xs);
                }
                self.run(
                    kernel,
                    params(&[u(m), u(k), u(n), u(row_bytes), u(groups), u(ldo), u(o0)]),
                    &bound,
                    (groups * n.div_ceil(tokens)) as u64,
                )
            }
            MatIn::F32(x) if n <= MATVEC_MAX_TOKENS => {
                let blocks = m.div_ceil(4);
                self.run(
                    Kernel::MatVec(w.dtype),
                    params(&[u(m), u(k), u(n), u(row_bytes), u(blocks), u(ldo), u(o0)]),
                    &[w, x, out],
                    (blocks * n) as u64,
                )
            }
            MatIn::F32(x) if self.ctx.features.coop != 0 && k.is_multiple_of(32) => {
                let (fs, huge) = (self.ctx.features.coop, self.ctx.coop_huge);
                let mut tile = CoopTile::pick(fs, m, n, huge);
                // Split where the output is one run of whole 16-byte words
                // (`SplitSums`).
                let len = n * m;
                if o0 == 0 && ldo == m && len.is_multiple_of(4) {
                    tile = tile.split(fs, m, n, k, huge);
                }
                let (tm, tn) = self.ctx.features.coop_tile(tile);
                let tiles_m = m.div_ceil(tm);
                let parts = tile.parts();
                let x = self.half_input(x)?;
                let p = params(&[
                    u(m),
                    u(k),
                    u(n),
                    u(row_bytes),
                    u(tiles_m),
                    u(ldo),
                    u(o0),
                    u(k / parts),
                ]);
                let kernel = Kernel::MatMulCoop {
                    t: w.dtype,
                    tile,
                    multi: Multi::One,
                };
                let groups = (tiles_m * n.div_ceil(tn) * parts) as u64;
                if parts == 1 {
                    return self.run(kernel, p, &[w, x, out], groups);
                }
                // The second half's sums, then added to the first's, held
                // for the residual add after it (`Pending::SplitSums`).
                let sums = self.split_sums(len)?.reshape(n, m);
                self.run(kernel, p, &[w, x, out, sums], groups)?;
                self.hold_split_sums(out, sums)
            }
            MatIn::F32(x) => {
                let tiles_m = m.div_ceil(64);
                self.run(
                    Kernel::MatMul(w.dtype),
                    params(&[u(m), u(k), u(n), u(row_bytes), u(tiles_m), u(ldo), u(o0)]),
                    &[w, x, out],
                    (tiles_m * n.div_ceil(64)) as u64,
                )
            }
        }
    }
}
