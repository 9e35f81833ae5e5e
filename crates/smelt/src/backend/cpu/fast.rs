//! The fast CPU ops: the pool, the per-thread scratch, and the row-wise ops
//! in `f32` with vectorizable loops. Matmul and attention, the heavy ones,
//! have their own files; ops too small to matter (argmax) use the
//! reference.
//!
//! Every op here is tested against its reference twin.

use std::sync::Mutex;

use half::slice::HalfFloatSliceExt;

use super::kdot;
use super::matmul::Inputs;
use super::pool::{SharedMut, ThreadPool};
use super::q8::{self, Q8Acts};
use super::q8k::{Q8KActs, QK_K};
use super::reference::{self, Rows, RowsMut, checked_index};
use super::simd::{self, Isa, Madd, multiversion};
use super::{attention, matmul};
use crate::backend::{AttentionParams, Op, Result, RopeMode, RopeParams};
use crate::quant::GgmlType;

/// Elementwise work below this many values runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

pub struct Fast {
    pool: ThreadPool,
    isa: Isa,
    /// Q4_0 and Q8_0 prefill matmuls in ggml's `vec_dot` order (bit for
    /// bit llama.cpp's numbers) rather than the faster interleaved GEMM
    /// (see `CpuBackend::new_exact`).
    exact: bool,
    /// One per thread, grown on first use and kept.
    scratch: Vec<Mutex<matmul::Scratch>>,
    /// The current matmul's activations in Q8 blocks (legacy types).
    q8: Q8Acts,
    /// ... and in Q8_K blocks (K-quants).
    q8k: Q8KActs,
    spans: Vec<(usize, usize, usize)>,
    /// Attention scratch: whether each query row takes the tiles.
    tiled: Vec<bool>,
    /// RoPE's (cos, sin) per row and pair.
    rope_table: Vec<f32>,
}

impl Fast {
    pub fn new(n_threads: usize, exact: bool, isa: Isa) -> std::io::Result<Self> {
        let pool = ThreadPool::new(n_threads)?;
        let scratch = (0..pool.n_threads()).map(|_| Mutex::default()).collect();
        Ok(Self {
            pool,
            isa,
            exact,
            scratch,
            q8: Q8Acts::default(),
            q8k: Q8KActs::default(),
            spans: Vec::new(),
            tiled: Vec::new(),
            rope_table: Vec::new(),
        })
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    pub fn matmul(
        &mut self,
        w: &[u8],
        dtype: GgmlType,
        k: usize,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        self.matmuls(&[(w, dtype)], k, x, &mut [out])
    }

    /// Per-expert matmuls (`Backend::matmul_id`): the rows routed to each
    /// expert gathered, one matmul per expert that has any, and scattered
    /// back, as ggml's `mul_mat_id` does.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_id(
        &mut self,
        w: &[u8],
        dtype: GgmlType,
        k: usize,
        n_expert: usize,
        x: &[f32],
        ids: &[i32],
        k_used: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let expert_bytes = w.len() / n_expert.max(1);
        let m = out.len() / ids.len().max(1);
        let shared = x.len() / k.max(1) != ids.len();
        let mut routed: Vec<Vec<usize>> = vec![Vec::new(); n_expert];
        for (r, &id) in ids.iter().enumerate() {
            routed[checked_index("expert id", id, n_expert)?].push(r);
        }
        let (mut xs, mut os) = (Vec::new(), Vec::new());
        for (e, rows) in routed.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            xs.clear();
            for &r in rows {
                let xr = if shared { r / k_used } else { r };
                xs.extend_from_slice(&x[xr * k..(xr + 1) * k]);
            }
            os.resize(rows.len() * m, 0.0);
            self.matmul(
                &w[e * expert_bytes..(e + 1) * expert_bytes],
                dtype,
                k,
                &xs,
                &mut os,
            )?;
            for (&r, o) in rows.iter().zip(os.chunks_exact(m)) {
                out[r * m..(r + 1) * m].copy_from_slice(o);
            }
        }
        Ok(())
    }

    /// Whether [`Fast::matmuls`] shares one job among weights of `dtype`
    /// with rows of `k` (the quantized paths; F32 and F16 run apart).
    pub fn shares_matmuls(dtype: GgmlType, k: usize) -> bool {
        takes_q8(dtype, k) || takes_q8k(dtype, k)
    }

    /// `outs[i] = x · ws[i]ᵀ` in one pool job, with `x` rounded once to
    /// each kind of blocks the weights' types take.
    pub fn matmuls(
        &mut self,
        ws: &[(&[u8], GgmlType)],
        k: usize,
        x: &[f32],
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        let n = x.len() / k.max(1);
        let q8 = ws.iter().any(|&(_, t)| takes_q8(t, k));
        let q8k = ws.iter().any(|&(_, t)| takes_q8k(t, k));
        if q8 {
            self.q8.quantize(self.isa, x);
        }
        if q8k {
            self.q8k.quantize(self.isa, x);
        }
        let inputs = Inputs {
            f32: x,
            q8: q8.then_some(&self.q8),
            q8k: q8k.then_some(&self.q8k),
        };
        matmul::matmuls(
            &mut self.pool,
            self.isa,
            self.exact,
            &self.scratch,
            ws,
            k,
            n,
            inputs,
            outs,
        )
        .map_err(|e| reference::quant_error(Op::MatMul, e))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        q: &[f32],
        k: Rows,
        v: Rows,
        cache_rows: usize,
        pos: &[i32],
        seq: &[i32],
        p: &AttentionParams,
        out: &mut [f32],
    ) -> Result<()> {
        attention::attention(
            &mut self.pool,
            self.isa,
            self.exact,
            &self.scratch,
            &mut self.spans,
            &mut self.tiled,
            q,
            k,
            v,
            cache_rows,
            pos,
            seq,
            p,
            out,
        )
    }

    pub fn get_rows(
        &mut self,
        table: &[u8],
        dtype: GgmlType,
        cols: usize,
        ids: &[i32],
        out: &mut [f32],
    ) -> Result<()> {
        let row_bytes = dtype.row_bytes(cols).unwrap_or(0).max(1);
        let n_rows = table.len() / row_bytes;
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(cols)) {
            let r = checked_index("get_rows id", id, n_rows)?;
            matmul::dequantize_rows(dtype, &table[r * row_bytes..(r + 1) * row_bytes], cols, dst)
                .map_err(|e| reference::quant_error(Op::GetRows, e))?;
        }
        Ok(())
    }

    pub fn rms_norm(
        &mut self,
        x: &[f32],
        cols: usize,
        weight: Option<&[f32]>,
        eps: f32,
        out: &mut [f32],
    ) {
        rms_norm_kernel(self.isa, x, cols, weight, eps, out);
    }

    /// RoPE with each row's angles computed once (in f64, as the reference
    /// does) and shared by its heads.
    pub fn rope(
        &mut self,
        src: Option<&[f32]>,
        out: &mut [f32],
        pos: &[i32],
        p: &RopeParams,
        factors: Option<&[f32]>,
    ) {
        if let Some(src) = src {
            out.copy_from_slice(&src[..out.len()]);
        }
        let half = p.n_dims / 2;
        let table = &mut self.rope_table;
        table.clear();
        // ggml's angles, in f32: the position times base^(-2/n_dims) once
        // per pair, over the pair's factor, times freq_scale.
        let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
        for &ps in pos {
            let mut theta = ps as f32;
            for d in 0..half {
                let t = p.freq_scale * factors.map_or(theta, |f| theta / f[d]);
                table.extend([t.cos() * p.attn_factor, t.sin() * p.attn_factor]);
                theta *= theta_scale;
            }
        }
        rope_kernel(self.isa, out, table, p);
    }

    /// `out = f(a, b)` with `b` broadcast by rows (`a` in place when `None`).
    pub fn binary(
        &mut self,
        a: Option<&[f32]>,
        b: &[f32],
        out: &mut [f32],
        f: impl Fn(f32, f32) -> f32,
    ) {
        let cols = b.len().min(out.len()).max(1);
        if b.len() >= out.len() {
            match a {
                Some(a) => out
                    .iter_mut()
                    .zip(a)
                    .zip(b)
                    .for_each(|((o, &x), &y)| *o = f(x, y)),
                None => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(*o, y)),
            }
            return;
        }
        for (r, orow) in out.chunks_exact_mut(cols).enumerate() {
            match a {
                Some(a) => orow
                    .iter_mut()
                    .zip(&a[r * cols..(r + 1) * cols])
                    .zip(b)
                    .for_each(|((o, &x), &y)| *o = f(x, y)),
                None => orow.iter_mut().zip(b).for_each(|(o, &y)| *o = f(*o, y)),
            }
        }
    }

    /// `out = act(gate) · up`, rows split over the pool when large.
    pub fn glu(&mut self, gate: &[f32], up: &[f32], cols: usize, out: &mut [f32], gelu: bool) {
        let isa = self.isa;
        let rows = out.len() / cols.max(1);
        if out.len() < PARALLEL_MIN {
            glu_kernel(isa, gate, up, out, gelu);
            return;
        }
        let shared = SharedMut::new(out);
        let chunk = (PARALLEL_MIN / 4 / cols.max(1)).max(1);
        self.pool.for_each(rows, chunk, &|_, r| {
            let span = r.start * cols..r.end * cols;
            // SAFETY: the pool hands out disjoint row ranges, and `out`
            // outlives the job.
            let o = unsafe { shared.slice(span.start, span.len()) };
            glu_kernel(isa, &gate[span.clone()], &up[span], o, gelu);
        });
    }

    pub fn softmax(&mut self, x: &[f32], cols: usize, out: &mut [f32]) {
        softmax_kernel(self.isa, x, cols, out);
    }

    pub fn set_rows(&mut self, src: &[f32], cols: usize, ids: &[i32], dst: RowsMut) -> Result<()> {
        reference::set_rows(src, cols, ids, dst)
    }

    pub fn copy(&mut self, src: Rows, dst: RowsMut) {
        match (src, dst) {
            (Rows::F16(s), RowsMut::F32(d)) => s[..d.len()].convert_to_f32_slice(d),
            (Rows::F32(s), RowsMut::F16(d)) => d.convert_from_f32_slice(&s[..d.len()]),
            (Rows::F32(s), RowsMut::F32(d)) => d.copy_from_slice(&s[..d.len()]),
            (Rows::F16(s), RowsMut::F16(d)) => d.copy_from_slice(&s[..d.len()]),
            (s, d) => reference::copy(s, d),
        }
    }
}

/// Whether `dtype` weights with rows of `k` take Q8 activations.
fn takes_q8(dtype: GgmlType, k: usize) -> bool {
    q8::has_q8_path(dtype) && k.is_multiple_of(q8::QK8)
}

/// Whether `dtype` weights with rows of `k` take Q8_K activations.
fn takes_q8k(dtype: GgmlType, k: usize) -> bool {
    kdot::has_path(dtype) && k.is_multiple_of(QK_K)
}

multiversion! {
    fn rope_kernel(out: &mut [f32], table: &[f32], p: &RopeParams) = rope_generic;
}

/// Rotates each head's pairs by the row's (cos, sin) from `table`. The
/// products are fused as a C compiler contracts ggml's
/// `x0·cos − x1·sin`: always with `mul_add`, exact with or without FMA
/// hardware, so the result does not depend on the ISA.
#[inline(always)]
fn rope_generic<M: Madd>(out: &mut [f32], table: &[f32], p: &RopeParams) {
    let (cols, half) = (p.n_heads * p.head_dim, p.n_dims / 2);
    for (row, cs) in out
        .chunks_exact_mut(cols)
        .zip(table.chunks_exact(2 * half.max(1)))
    {
        for head in row.chunks_exact_mut(p.head_dim) {
            for d in 0..half {
                let (cos, sin) = (cs[2 * d], cs[2 * d + 1]);
                let (i0, i1) = match p.mode {
                    RopeMode::Normal => (2 * d, 2 * d + 1),
                    RopeMode::Neox => (d, d + half),
                };
                let (x0, x1) = (head[i0], head[i1]);
                head[i0] = x0.mul_add(cos, -(x1 * sin));
                head[i1] = x0.mul_add(sin, x1 * cos);
            }
        }
    }
}

multiversion! {
    fn rms_norm_kernel(x: &[f32], cols: usize, weight: Option<&[f32]>, eps: f32, out: &mut [f32]) = rms_norm_generic;
}

#[inline(always)]
fn rms_norm_generic<M: Madd>(
    x: &[f32],
    cols: usize,
    weight: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        // Squares in f32 summed in f64, as ggml does: cheap next to the
        // matmuls, and it keeps the Q8 rounding of the next matmul's
        // activations on ggml's side of every rounding boundary.
        let sum: f64 = xr.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (sum / cols as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        match weight {
            Some(w) => or
                .iter_mut()
                .zip(xr)
                .zip(w)
                .for_each(|((o, &v), &wv)| *o = v * scale * wv),
            None => or.iter_mut().zip(xr).for_each(|(o, &v)| *o = v * scale),
        }
    }
}

multiversion! {
    fn glu_kernel(gate: &[f32], up: &[f32], out: &mut [f32], gelu: bool) = glu_generic;
}

#[inline(always)]
fn glu_generic<M: Madd>(gate: &[f32], up: &[f32], out: &mut [f32], gelu: bool) {
    let it = out.iter_mut().zip(gate).zip(up);
    if gelu {
        it.for_each(|((o, &g), &u)| *o = simd::gelu(g) * u);
    } else {
        it.for_each(|((o, &g), &u)| *o = simd::silu::<M>(g) * u);
    }
}

multiversion! {
    fn softmax_kernel(x: &[f32], cols: usize, out: &mut [f32]) = softmax_generic;
}

#[inline(always)]
fn softmax_generic<M: Madd>(x: &[f32], cols: usize, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let max = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        or.iter_mut()
            .zip(xr)
            .for_each(|(o, &v)| *o = simd::exp::<M>(v - max));
        let inv = 1.0 / simd::sum(or);
        or.iter_mut().for_each(|o| *o *= inv);
    }
}
