//! Shape and type checks for every op of the contract.
//!
//! They look only at the handles, never at data, so any backend can run them
//! before it records or executes an op (the GPU backend too): a mismatch is a
//! [`BackendError::Shape`], never a panic or an out-of-bounds access.
//! Checks that need the data (an id past the table, a position past the
//! context) are the executing backend's job.

use super::{AttentionParams, BackendError, MoeParams, Op, Result, RopeParams, Tensor};
use crate::quant::GgmlType;

fn shape(op: Op, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

fn dtype(op: Op, what: &str, t: Tensor, allowed: &[GgmlType]) -> Result<()> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        Err(shape(
            op,
            format!("{what} is {}, expected one of {allowed:?}", t.dtype),
        ))
    }
}

fn f32(op: Op, what: &str, t: Tensor) -> Result<()> {
    dtype(op, what, t, &[GgmlType::F32])
}

/// An index tensor: I32, one row.
fn index(op: Op, what: &str, t: Tensor) -> Result<()> {
    dtype(op, what, t, &[GgmlType::I32])?;
    if t.rows != 1 {
        return Err(shape(op, format!("{what} has {} rows, expected 1", t.rows)));
    }
    Ok(())
}

fn same_shape(op: Op, what: &str, a: Tensor, b: Tensor) -> Result<()> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Err(shape(
            op,
            format!(
                "{what}: {}x{} and {}x{} differ",
                a.rows, a.cols, b.rows, b.cols
            ),
        ));
    }
    Ok(())
}

fn distinct(op: Op, what: &str, a: Tensor, b: Tensor) -> Result<()> {
    if a.id == b.id {
        return Err(shape(op, format!("{what} may not share memory")));
    }
    Ok(())
}

pub fn get_rows(table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
    let op = Op::GetRows;
    index(op, "ids", ids)?;
    f32(op, "out", out)?;
    distinct(op, "table and out", table, out)?;
    if out.rows != ids.cols || out.cols != table.cols {
        return Err(shape(
            op,
            format!(
                "{} ids of a {}-wide table into {}x{}",
                ids.cols, table.cols, out.rows, out.cols
            ),
        ));
    }
    Ok(())
}

/// The KV cache types of `set_rows` and `attention`: floats, or ggml's
/// 32-value blocks along each row.
pub const KV_TYPES: [GgmlType; 4] = [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0];

pub fn set_rows(src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
    let op = Op::SetRows;
    f32(op, "src", src)?;
    index(op, "ids", ids)?;
    dtype(op, "dst", dst, &KV_TYPES)?;
    distinct(op, "src and dst", src, dst)?;
    if dst.dtype.row_bytes(dst.cols).is_none() {
        return Err(shape(
            op,
            format!(
                "{}-wide rows of {} (whole blocks of {})",
                dst.cols,
                dst.dtype,
                dst.dtype.block_size()
            ),
        ));
    }
    if src.rows != ids.cols || src.cols != dst.cols {
        return Err(shape(
            op,
            format!(
                "{}x{} src with {} ids into a {}-wide dst",
                src.rows, src.cols, ids.cols, dst.cols
            ),
        ));
    }
    Ok(())
}

pub fn rms_norm(x: Tensor, weight: Option<Tensor>, out: Tensor) -> Result<()> {
    let op = Op::RmsNorm;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    same_shape(op, "x and out", x, out)?;
    if let Some(w) = weight {
        f32(op, "weight", w)?;
        if w.n_elements() != x.cols {
            return Err(shape(
                op,
                format!("weight of {} values for rows of {}", w.n_elements(), x.cols),
            ));
        }
    }
    Ok(())
}

pub fn rope(x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
    let op = Op::Rope;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    index(op, "pos", pos)?;
    same_shape(op, "x and out", x, out)?;
    if x.cols != p.n_heads * p.head_dim {
        return Err(shape(
            op,
            format!("rows of {} for {}x{} heads", x.cols, p.n_heads, p.head_dim),
        ));
    }
    if p.n_dims > p.head_dim || !p.n_dims.is_multiple_of(2) {
        return Err(shape(
            op,
            format!("{} rotated dims in heads of {}", p.n_dims, p.head_dim),
        ));
    }
    if pos.cols != x.rows {
        return Err(shape(
            op,
            format!("{} positions for {} rows", pos.cols, x.rows),
        ));
    }
    if let Some(f) = p.freq_factors {
        f32(op, "freq_factors", f)?;
        if f.n_elements() != p.n_dims / 2 {
            return Err(shape(
                op,
                format!("{} freq factors for {} dims", f.n_elements(), p.n_dims),
            ));
        }
    }
    Ok(())
}

pub fn matmul(w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
    let op = Op::MatMul;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    distinct(op, "x and out", x, out)?;
    distinct(op, "w and out", w, out)?;
    if x.cols != w.cols || out.rows != x.rows || out.cols != w.rows {
        return Err(shape(
            op,
            format!(
                "x {}x{} · w {}x{}ᵀ into {}x{}",
                x.rows, x.cols, w.rows, w.cols, out.rows, out.cols
            ),
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    pos: Tensor,
    seq: Tensor,
    p: &AttentionParams,
    out: Tensor,
) -> Result<()> {
    let op = Op::Attention;
    f32(op, "q", q)?;
    f32(op, "out", out)?;
    index(op, "pos", pos)?;
    index(op, "seq", seq)?;
    dtype(op, "k cache", k_cache, &KV_TYPES)?;
    dtype(op, "v cache", v_cache, &KV_TYPES)?;
    same_shape(op, "q and out", q, out)?;
    same_shape(op, "k and v caches", k_cache, v_cache)?;
    distinct(op, "q and out", q, out)?;
    if p.n_kv_heads == 0 || p.head_dim == 0 || !p.n_heads.is_multiple_of(p.n_kv_heads) {
        return Err(shape(
            op,
            format!("{} heads over {} kv heads", p.n_heads, p.n_kv_heads),
        ));
    }
    if q.cols != p.n_heads * p.head_dim {
        return Err(shape(
            op,
            format!("q rows of {} for {}x{}", q.cols, p.n_heads, p.head_dim),
        ));
    }
    // Each head reads whole blocks of a block cache.
    for cache in [k_cache, v_cache] {
        let block = cache.dtype.block_size();
        if !p.head_dim.is_multiple_of(block) {
            return Err(shape(
                op,
                format!(
                    "a {} cache needs a head dim that is a multiple of {block}, not {}",
                    cache.dtype, p.head_dim
                ),
            ));
        }
    }
    if k_cache.cols != p.n_kv_heads * p.head_dim {
        return Err(shape(
            op,
            format!(
                "cache rows of {} for {}x{}",
                k_cache.cols, p.n_kv_heads, p.head_dim
            ),
        ));
    }
    if p.ctx == 0 || !k_cache.rows.is_multiple_of(p.ctx) {
        return Err(shape(
            op,
            format!("cache of {} rows in slots of {}", k_cache.rows, p.ctx),
        ));
    }
    if pos.cols != q.rows || seq.cols != q.rows {
        return Err(shape(
            op,
            format!(
                "{} positions and {} slots for {} rows",
                pos.cols, seq.cols, q.rows
            ),
        ));
    }
    if p.window == Some(0) {
        return Err(shape(op, "a window of 0 positions".into()));
    }
    Ok(())
}

/// `add` and `mul`: `b` is `a`'s shape or one row of it; `out` may be `a`.
pub fn binary(op: Op, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
    f32(op, "a", a)?;
    f32(op, "b", b)?;
    f32(op, "out", out)?;
    same_shape(op, "a and out", a, out)?;
    distinct(op, "b and out", b, out)?;
    if b.cols != a.cols || (b.rows != a.rows && b.rows != 1) {
        return Err(shape(
            op,
            format!(
                "b {}x{} does not broadcast over a {}x{}",
                b.rows, b.cols, a.rows, a.cols
            ),
        ));
    }
    Ok(())
}

/// `scale`: `out` may be `x`.
pub fn scale(x: Tensor, out: Tensor) -> Result<()> {
    let op = Op::Scale;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    same_shape(op, "x and out", x, out)
}

/// `silu_mul` and `gelu_mul`.
pub fn glu(op: Op, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
    f32(op, "gate", gate)?;
    f32(op, "up", up)?;
    f32(op, "out", out)?;
    same_shape(op, "gate and up", gate, up)?;
    same_shape(op, "gate and out", gate, out)?;
    distinct(op, "gate and out", gate, out)?;
    distinct(op, "up and out", up, out)
}

pub fn softmax(x: Tensor, out: Tensor) -> Result<()> {
    let op = Op::Softmax;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    same_shape(op, "x and out", x, out)?;
    distinct(op, "x and out", x, out)
}

pub fn argmax(x: Tensor, out: Tensor) -> Result<()> {
    let op = Op::Argmax;
    f32(op, "x", x)?;
    dtype(op, "out", out, &[GgmlType::I32])?;
    if out.n_elements() != x.rows || x.cols == 0 {
        return Err(shape(
            op,
            format!(
                "{} indices for {} rows of {}",
                out.n_elements(),
                x.rows,
                x.cols
            ),
        ));
    }
    Ok(())
}

pub fn copy(src: Tensor, dst: Tensor) -> Result<()> {
    let op = Op::Copy;
    let types = [GgmlType::F32, GgmlType::F16];
    dtype(op, "src", src, &types)?;
    dtype(op, "dst", dst, &types)?;
    same_shape(op, "src and dst", src, dst)?;
    distinct(op, "src and dst", src, dst)
}

/// `softcap`: `out` may be `x`; the cap is a positive number.
pub fn softcap(x: Tensor, cap: f32, out: Tensor) -> Result<()> {
    let op = Op::Softcap;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    same_shape(op, "x and out", x, out)?;
    if !(cap.is_finite() && cap > 0.0) {
        return Err(shape(op, format!("a cap of {cap}")));
    }
    Ok(())
}

/// `topk_moe`: logits `n × n_expert`; ids (I32) and weights `n × k`.
pub fn topk_moe(logits: Tensor, p: &MoeParams, ids: Tensor, weights: Tensor) -> Result<()> {
    let op = Op::TopKMoe;
    f32(op, "logits", logits)?;
    dtype(op, "ids", ids, &[GgmlType::I32])?;
    f32(op, "weights", weights)?;
    if p.k == 0 || p.k > logits.cols {
        return Err(shape(op, format!("{} of {} experts", p.k, logits.cols)));
    }
    for (what, t) in [("ids", ids), ("weights", weights)] {
        if (t.rows, t.cols) != (logits.rows, p.k) {
            return Err(shape(
                op,
                format!(
                    "{what} {}x{} for {} rows of {} experts",
                    t.rows, t.cols, logits.rows, p.k
                ),
            ));
        }
    }
    distinct(op, "logits and weights", logits, weights)
}

/// `matmul_id`: `w` `(n_expert·m) × k`, ids (I32) `n × K`, `x` `n × k` or
/// `(n·K) × k`, `out` `(n·K) × m`. Returns `n_expert`.
pub fn matmul_id(w: Tensor, x: Tensor, ids: Tensor, out: Tensor) -> Result<usize> {
    let op = Op::MatMulId;
    f32(op, "x", x)?;
    f32(op, "out", out)?;
    dtype(op, "ids", ids, &[GgmlType::I32])?;
    distinct(op, "x and out", x, out)?;
    let (n, k_used) = (ids.rows, ids.cols);
    let m = out.cols;
    if m == 0 || !w.rows.is_multiple_of(m) || w.cols != x.cols {
        return Err(shape(
            op,
            format!(
                "experts {}x{} of {m} rows each, x of {} columns",
                w.rows, w.cols, x.cols
            ),
        ));
    }
    if out.rows != n * k_used || (x.rows != n && x.rows != n * k_used) {
        return Err(shape(
            op,
            format!(
                "x {}x{} and out {}x{} for {n} rows of {k_used} experts",
                x.rows, x.cols, out.rows, out.cols
            ),
        ));
    }
    Ok(w.rows / m)
}

/// `moe_sum`: experts `(n·K) × E`, weights `n × K`, out `n × E`.
pub fn moe_sum(experts: Tensor, weights: Tensor, out: Tensor) -> Result<()> {
    let op = Op::MoeSum;
    f32(op, "experts", experts)?;
    f32(op, "weights", weights)?;
    f32(op, "out", out)?;
    distinct(op, "experts and out", experts, out)?;
    distinct(op, "weights and out", weights, out)?;
    if out.rows != weights.rows
        || experts.rows != weights.rows * weights.cols
        || experts.cols != out.cols
    {
        return Err(shape(
            op,
            format!(
                "experts {}x{} and weights {}x{} into {}x{}",
                experts.rows, experts.cols, weights.rows, weights.cols, out.rows, out.cols
            ),
        ));
    }
    Ok(())
}
