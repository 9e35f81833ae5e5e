//! The reference ops: plain loops, sums in `f64`, no threads, no tricks.
//!
//! Every fast CPU op and every GPU kernel is tested against these, so they
//! are written to be obviously right rather than quick. Inputs were checked
//! by `check` (shapes, types); the checks that need data values (ids inside
//! the table, positions inside the context) are made here and reported as
//! errors.
//!
//! Legend: `n` rows of a step, `k` inputs, `m` outputs, `hd` head dim.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::super::{
    AttentionParams, BackendError, MoeGating, MoeParams, Result, RopeMode, RopeParams,
};
use super::kv_blocks::{BlockRows, BlockRowsMut};
use crate::quant::{self, BlockQ4_0, BlockQ8_0, GgmlType, QuantError};

/// Rows of a KV cache: F32, F16, or ggml's 32-value blocks along each row
/// (Q8_0, Q4_0), stored rotated ([`kv_blocks`]) and read back plain.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Q8_0(BlockRows<'a, BlockQ8_0>),
    Q4_0(BlockRows<'a, BlockQ4_0>),
}

pub enum RowsMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    Q8_0(BlockRowsMut<'a, BlockQ8_0>),
    Q4_0(BlockRowsMut<'a, BlockQ4_0>),
}

impl Rows<'_> {
    /// Values `at..at + dst.len()`, widened to f32 (a block cache's
    /// dequantized and rotated back).
    #[inline(always)]
    pub fn widen(&self, at: usize, dst: &mut [f32]) {
        match self {
            Rows::F32(s) => dst.copy_from_slice(&s[at..at + dst.len()]),
            Rows::F16(s) => s[at..at + dst.len()].convert_to_f32_slice(dst),
            Rows::Q8_0(s) => s.widen(at, dst),
            Rows::Q4_0(s) => s.widen(at, dst),
        }
    }

    /// Whether the cache holds ggml blocks rather than floats.
    pub fn is_blocks(&self) -> bool {
        matches!(self, Rows::Q8_0(_) | Rows::Q4_0(_))
    }
}

impl RowsMut<'_> {
    /// Values in the cache.
    pub fn n_values(&self) -> usize {
        match self {
            RowsMut::F32(d) => d.len(),
            RowsMut::F16(d) => d.len(),
            RowsMut::Q8_0(d) => d.n_values(),
            RowsMut::Q4_0(d) => d.n_values(),
        }
    }

    /// Stores whole rows `src` from value `at` (a row's start), rounded to
    /// the cache type.
    #[inline(always)]
    pub fn store(&mut self, at: usize, src: &[f32]) {
        match self {
            RowsMut::F32(d) => d[at..at + src.len()].copy_from_slice(src),
            RowsMut::F16(d) => d[at..at + src.len()].convert_from_f32_slice(src),
            RowsMut::Q8_0(d) => d.store(at, src),
            RowsMut::Q4_0(d) => d.store(at, src),
        }
    }
}

pub(super) fn quant_error(op: super::super::Op, e: QuantError) -> BackendError {
    match e {
        QuantError::Unsupported { dtype, .. } => BackendError::Unsupported {
            backend: "cpu".into(),
            op,
            dtype,
        },
        other => BackendError::Other(other.to_string()),
    }
}

fn out_of_range(what: &str, value: i64, limit: usize) -> BackendError {
    BackendError::Other(format!("{what} {value} is outside 0..{limit}"))
}

/// An index value checked against `limit`.
pub(super) fn checked_index(what: &str, value: i32, limit: usize) -> Result<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&v| v < limit)
        .ok_or_else(|| out_of_range(what, value.into(), limit))
}

/// `out[i] = table[ids[i]]`: table `rows × cols` of `dtype`, out `n × cols`.
pub fn get_rows(
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
        let src = &table[r * row_bytes..(r + 1) * row_bytes];
        quant::dequantize_row(dtype, src, dst)
            .map_err(|e| quant_error(super::super::Op::GetRows, e))?;
    }
    Ok(())
}

/// `dst[ids[i]] = src[i]`: src `n × cols`, dst `rows × cols`, each row
/// rounded to the cache type.
pub fn set_rows(src: &[f32], cols: usize, ids: &[i32], mut dst: RowsMut) -> Result<()> {
    let n_rows = dst.n_values() / cols.max(1);
    for (&id, s) in ids.iter().zip(src.chunks_exact(cols)) {
        let r = checked_index("set_rows id", id, n_rows)?;
        dst.store(r * cols, s);
    }
    Ok(())
}

/// Each row of `x` (`n × cols`) over its root mean square, times `weight`.
pub fn rms_norm(x: &[f32], cols: usize, weight: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let sum: f64 = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let mean = (sum / cols as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (i, (o, &v)) in or.iter_mut().zip(xr).enumerate() {
            *o = v * scale * weight.map_or(1.0, |w| w[i]);
        }
    }
}

/// The rotation angle of pair `d` (of `n_dims / 2`) at position `pos`:
/// `pos · freq_scale · base^(-2d/n_dims) / factor[d]`.
pub fn rope_theta(p: &RopeParams, factors: Option<&[f32]>, pos: i32, d: usize) -> f64 {
    let inv_freq = f64::from(p.freq_base).powf(-2.0 * d as f64 / p.n_dims as f64);
    let factor = factors.map_or(1.0, |f| f64::from(f[d]));
    f64::from(pos) * f64::from(p.freq_scale) * inv_freq / factor
}

/// RoPE on `out` (`n × (n_heads·hd)`), reading `src` or, when it is `None`,
/// `out` itself.
pub fn rope(
    src: Option<&[f32]>,
    out: &mut [f32],
    pos: &[i32],
    p: &RopeParams,
    factors: Option<&[f32]>,
) {
    let cols = p.n_heads * p.head_dim;
    if let Some(src) = src {
        out.copy_from_slice(&src[..out.len()]);
    }
    let half = p.n_dims / 2;
    for (row, &ps) in out.chunks_exact_mut(cols).zip(pos) {
        for head in row.chunks_exact_mut(p.head_dim) {
            for d in 0..half {
                let (sin, cos) = rope_theta(p, factors, ps, d).sin_cos();
                let (sin, cos) = (
                    sin * f64::from(p.attn_factor),
                    cos * f64::from(p.attn_factor),
                );
                let (i0, i1) = match p.mode {
                    RopeMode::Normal => (2 * d, 2 * d + 1),
                    RopeMode::Neox => (d, d + half),
                };
                let (x0, x1) = (f64::from(head[i0]), f64::from(head[i1]));
                head[i0] = (x0 * cos - x1 * sin) as f32;
                head[i1] = (x0 * sin + x1 * cos) as f32;
            }
        }
    }
}

/// `out = x · wᵀ`: w `m × k` of `dtype`, x `n × k`, out `n × m`. Each weight
/// row is dequantized into `scratch` (grown once, kept).
pub fn matmul(
    w: &[u8],
    dtype: GgmlType,
    k: usize,
    x: &[f32],
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) -> Result<()> {
    let row_bytes = dtype.row_bytes(k).unwrap_or(0);
    let m = w.len().checked_div(row_bytes).unwrap_or(0);
    if scratch.len() < k {
        scratch.resize(k, 0.0);
    }
    let wrow = &mut scratch[..k];
    for j in 0..m {
        quant::dequantize_row(dtype, &w[j * row_bytes..(j + 1) * row_bytes], wrow)
            .map_err(|e| quant_error(super::super::Op::MatMul, e))?;
        for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
            let dot: f64 = xr
                .iter()
                .zip(wrow.iter())
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            or[j] = dot as f32;
        }
    }
    Ok(())
}

/// Which cache rows query row `i` attends to: `(first, last)` positions.
pub fn attention_span(
    p: &AttentionParams,
    cache_rows: usize,
    pos: i32,
    seq: i32,
) -> Result<(usize, usize, usize)> {
    let slots = cache_rows / p.ctx;
    let pos = checked_index("attention position", pos, p.ctx)?;
    let seq = checked_index("attention sequence slot", seq, slots)?;
    let first = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    Ok((seq * p.ctx, first, pos))
}

/// Causal GQA attention of `q` (`n × (n_heads·hd)`) over the caches
/// (`(slots·ctx) × (n_kv_heads·hd)`), into `out` (`n × (n_heads·hd)`).
/// `probs` is scratch for one row's scores (grown once, kept).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: Rows,
    v: Rows,
    cache_rows: usize,
    pos: &[i32],
    seq: &[i32],
    p: &AttentionParams,
    out: &mut [f32],
    probs: &mut Vec<f64>,
) -> Result<()> {
    let (hd, q_cols, kv_cols) = (
        p.head_dim,
        p.n_heads * p.head_dim,
        p.n_kv_heads * p.head_dim,
    );
    let group = p.n_heads / p.n_kv_heads;
    for (i, (qr, or)) in q
        .chunks_exact(q_cols)
        .zip(out.chunks_exact_mut(q_cols))
        .enumerate()
    {
        let (base, first, last) = attention_span(p, cache_rows, pos[i], seq[i])?;
        // Cache row of position j, offset to this head's kv head.
        let at = |j: usize, kv_head: usize| (base + j) * kv_cols + kv_head * hd;
        let mut key = vec![0f32; hd];
        for h in 0..p.n_heads {
            let qh = &qr[h * hd..(h + 1) * hd];
            let kv_head = h / group;
            probs.clear();
            for j in first..=last {
                k.widen(at(j, kv_head), &mut key);
                let dot: f64 = (0..hd).map(|d| f64::from(qh[d]) * f64::from(key[d])).sum();
                let mut s = dot * f64::from(p.scale);
                if let Some(cap) = p.softcap {
                    s = f64::from(cap) * (s / f64::from(cap)).tanh();
                }
                probs.push(s);
            }
            let max = probs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = probs.iter().map(|s| (s - max).exp()).sum();
            for s in probs.iter_mut() {
                *s = (*s - max).exp() / sum;
            }
            let mut acc = vec![0f64; hd];
            for (j, pr) in (first..=last).zip(probs.iter()) {
                v.widen(at(j, kv_head), &mut key);
                for (a, &x) in acc.iter_mut().zip(&key) {
                    *a += pr * f64::from(x);
                }
            }
            for (o, a) in or[h * hd..(h + 1) * hd].iter_mut().zip(acc) {
                *o = a as f32;
            }
        }
    }
    Ok(())
}

/// `out = a ∘ b` (`a` in place when `None`), `b` one row or `a`'s shape.
pub fn binary(a: Option<&[f32]>, b: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let cols = b.len().min(out.len()).max(1);
    let broadcast = b.len() < out.len();
    for (i, o) in out.iter_mut().enumerate() {
        let bv = if broadcast { b[i % cols] } else { b[i] };
        let av = a.map_or(*o, |a| a[i]);
        *o = f(av, bv);
    }
}

pub fn silu(x: f32) -> f32 {
    (f64::from(x) / (1.0 + (-f64::from(x)).exp())) as f32
}

/// GELU as ggml's CPU defines it (`GGML_GELU_FP16`): the tanh
/// approximation of the input rounded to f16, rounded to f16; 0 at or
/// below -10 and the input at or above 10. llama.cpp's Gemma logits follow
/// this, and so do the fast CPU backend's table and the GPU.
pub fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let h = f64::from(half::f16::from_f32(x).to_f32());
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let y = 0.5 * h * (1.0 + (c * (h + 0.044715 * h * h * h)).tanh());
    half::f16::from_f64(y).to_f32()
}

/// `out = act(gate) * up`.
pub fn glu(gate: &[f32], up: &[f32], out: &mut [f32], act: impl Fn(f32) -> f32) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = act(g) * u;
    }
}

pub fn softmax(x: &[f32], cols: usize, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let max = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = xr.iter().map(|&v| f64::from(v - max).exp()).sum();
        for (o, &v) in or.iter_mut().zip(xr) {
            *o = (f64::from(v - max).exp() / sum) as f32;
        }
    }
}

/// The first index of each row's largest value.
pub fn argmax(x: &[f32], cols: usize, out: &mut [i32]) {
    for (xr, o) in x.chunks_exact(cols).zip(out.iter_mut()) {
        let mut best = 0;
        for (i, &v) in xr.iter().enumerate() {
            if v > xr[best] {
                best = i;
            }
        }
        *o = best as i32;
    }
}

/// Copies between F32 and F16 rows (or within a type).
pub fn copy(src: Rows, mut dst: RowsMut) {
    let mut values = vec![0f32; dst.n_values()];
    src.widen(0, &mut values);
    dst.store(0, &values);
}

/// `out = cap · tanh(x / cap)`, rounded as ggml's scale, tanh, scale.
pub fn softcap(x: Option<&[f32]>, cap: f32, out: &mut [f32]) {
    let inv = 1.0 / cap;
    for (i, o) in out.iter_mut().enumerate() {
        let v = x.map_or(*o, |x| x[i]);
        *o = (v * inv).tanh() * cap;
    }
}

/// ggml's `soft_max` of one row: `exp(x - max)` in f32, summed in f64,
/// times the f32 reciprocal of the sum.
fn softmax_ggml(x: &[f32], out: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - max).exp();
        sum += f64::from(*o);
    }
    let inv = (1.0 / sum) as f32;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Mixture-of-experts routing of each row of `logits` (`n × n_expert`):
/// the `p.k` best experts into `ids` and their weights into `weights`
/// (`n × k` each), as llama.cpp's `build_moe_ffn` computes them. Ties go to
/// the lower expert.
pub fn topk_moe(
    logits: &[f32],
    n_expert: usize,
    p: &MoeParams,
    ids: &mut [i32],
    weights: &mut [f32],
) {
    let mut probs = vec![0f32; n_expert];
    let mut order: Vec<usize> = Vec::with_capacity(n_expert);
    for ((row, id), w) in logits
        .chunks_exact(n_expert)
        .zip(ids.chunks_exact_mut(p.k))
        .zip(weights.chunks_exact_mut(p.k))
    {
        // What the experts are ranked by.
        match p.gating {
            MoeGating::Softmax => softmax_ggml(row, &mut probs),
            MoeGating::SoftmaxWeight => probs.copy_from_slice(row),
        }
        order.clear();
        order.extend(0..n_expert);
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        for (j, &e) in order[..p.k].iter().enumerate() {
            id[j] = e as i32;
            w[j] = probs[e];
        }
        if p.gating == MoeGating::SoftmaxWeight {
            let chosen = w.to_vec();
            softmax_ggml(&chosen, w);
        }
        if p.normalize {
            // ggml's sum_rows (f64, rounded), clamped to f16's smallest
            // normal against a division by zero.
            let sum = (w.iter().map(|&v| f64::from(v)).sum::<f64>() as f32).max(6.103_515_6e-5);
            w.iter_mut().for_each(|v| *v /= sum);
        }
    }
}

/// `out` row `t·K + j` = `x_row · w[ids[t, j]]ᵀ` (see `Backend::matmul_id`):
/// `w` holds `n_expert` blocks of `m × k`, `x` has `n` or `n·K` rows.
#[allow(clippy::too_many_arguments)]
pub fn matmul_id(
    w: &[u8],
    dtype: GgmlType,
    k: usize,
    n_expert: usize,
    x: &[f32],
    ids: &[i32],
    k_used: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) -> Result<()> {
    let expert_bytes = w.len() / n_expert.max(1);
    let m = out.len() / ids.len().max(1);
    let shared = x.len() / k.max(1) != ids.len();
    for (r, (&id, o)) in ids.iter().zip(out.chunks_exact_mut(m)).enumerate() {
        let e = checked_index("expert id", id, n_expert)?;
        let xr = if shared { r / k_used } else { r };
        let we = &w[e * expert_bytes..(e + 1) * expert_bytes];
        matmul(we, dtype, k, &x[xr * k..(xr + 1) * k], o, scratch)?;
    }
    Ok(())
}

/// `out[t] = Σ_j weights[t, j] · experts[t·K + j]`, summed in order of `j`
/// as ggml's chain of adds does.
pub fn moe_sum(experts: &[f32], weights: &[f32], k_used: usize, out: &mut [f32]) {
    let e = out.len() / (weights.len() / k_used.max(1)).max(1);
    for ((o, w), ex) in out
        .chunks_exact_mut(e)
        .zip(weights.chunks_exact(k_used))
        .zip(experts.chunks_exact(e * k_used))
    {
        for (j, (&wj, row)) in w.iter().zip(ex.chunks_exact(e)).enumerate() {
            for (o, &v) in o.iter_mut().zip(row) {
                *o = if j == 0 { v * wj } else { *o + v * wj };
            }
        }
    }
}
