//! The attention op on the GPU: its kernel limits, then which kernel.
//!
//! - Prefill (more than `ATTENTION_ROWS_MIN` rows): on cooperative
//!   matrices with an F16 cache (`attention_coop`, a step that may write
//!   the next matmul's f16 blocks too: `fuse::half_blocks`), or four invocations per
//!   (head, row) (`AttentionQuads`), or one (`AttentionRows`).
//! - Decode: a workgroup per (row, head), a step that the ropes and cache
//!   writes before it and the next matmul's Q8 rounding may join
//!   (`fuse::rope_store`, `fuse::round_q8`); in the f32 mode with a float
//!   cache, few heads and long rows of keys (`AttentionParams::keys`),
//!   split over the keys into parts, merged by a second dispatch
//!   (`attention::parts_for`).

use crate::backend::{AttentionParams, Op, Result};
use crate::quant::GgmlType::{F16, F32, Q4_0, Q8_0};

use super::kernels::Family;
use super::kernels::attention::{self, AttentionKernel, Operands, Params};
use super::kernels::attention_coop::{
    AttentionCoop, COOP_ATTENTION_HEAD_DIMS, CoopAttention, coop_attention_heads,
};
use super::tape::Step;
use super::{GpuBackend, limit};

/// Largest head the attention kernel holds (its rows' kernel keeps a row in
/// registers; decode: up to 4 dims per invocation of its workgroup).
const MAX_HEAD_DIM: usize = 256;

/// Above this many query rows attention runs one invocation per (head,
/// row) rather than one workgroup per (row, head).
const ATTENTION_ROWS_MIN: usize = 4;

/// Attention of `t` (q, caches, positions, slots, out; checked by the
/// contract) by `p`.
pub(super) fn attention(be: &mut GpuBackend, t: Operands, p: &AttentionParams) -> Result<()> {
    let op = Op::Attention;
    let [q, k_cache, v_cache, ..] = t;
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
    let params = Params::new(q.rows, p, k_cache.rows);
    // A block cache's heads are whole rotation groups, so that each head
    // rotates its own query and output (attention_blocks.wgsl).
    limit(
        op,
        !matches!(k_cache.dtype, Q8_0 | Q4_0) || p.head_dim.is_multiple_of(params.rot as usize),
        || {
            format!(
                "a {} cache of {}-value heads in rotation groups of {} (the GPU needs heads of whole groups: use --cache-type f16)",
                k_cache.dtype, p.head_dim, params.rot
            )
        },
    )?;
    // Prefill: one invocation per (head, row), no barriers; decode: a
    // workgroup per (row, head) so one row still fills the GPU.
    if q.rows > ATTENTION_ROWS_MIN && p.head_dim.is_multiple_of(4) {
        // A server step's decode rows as decodes: in a prefill tile, rows
        // of many sequences walk the keys of all their slots.
        let lone = p.decode_rows.min(q.rows);
        if lone > 0 {
            let [q, kc, vc, pos, seq, out] = t;
            let t = [q.with_rows(lone), kc, vc, pos, seq, out.with_rows(lone)];
            decode(be, t, p, Params::new(lone, p, k_cache.rows))?;
        }
        if lone < q.rows {
            let row0 = lone as u32;
            prefill(be, t, p, Params { row0, ..params })?;
        }
        return Ok(());
    }
    decode(be, t, p, params)
}

/// Decode attention of every row of `t`.
fn decode(be: &mut GpuBackend, t: Operands, p: &AttentionParams, params: Params) -> Result<()> {
    let [q, k_cache, ..] = t;
    let groups = q.rows * p.n_heads;
    let keys = p.window.map_or(p.keys, |w| w.min(p.keys));
    let parts = match attention::parts_for(groups, keys) {
        // Split over the keys in the f32 mode with a float cache.
        n if n > 1 && be.ctx.features.fast_math && matches!(k_cache.dtype, F32 | F16) => {
            let buffer = super::acts::attention_parts(be, groups * n as usize * (p.head_dim + 2))?;
            Some(attention::Parts { n, buffer })
        }
        _ => None,
    };
    be.record(Step::Attention {
        t,
        params,
        groups: groups as u64,
        rope: None,
        q8: None,
        parts,
    });
    Ok(())
}

/// Prefill attention of rows `params.row0..` of `t`.
fn prefill(be: &mut GpuBackend, t: Operands, p: &AttentionParams, params: Params) -> Result<()> {
    let [q, k_cache, ..] = t;
    let rows = q.rows - params.row0 as usize;
    let (kv, head_dim) = (k_cache.dtype, p.head_dim as u32);
    let f = be.ctx.features;
    let heads = coop_attention_heads(p.n_heads, p.n_kv_heads);
    let coop = AttentionCoop {
        head_dim,
        heads,
        half: false,
    };
    if kv == F16
        && COOP_ATTENTION_HEAD_DIMS.contains(&head_dim)
        && coop.builds_with(f)
        && k_cache.rows >= f.coop as usize
    {
        let groups = rows.div_ceil(f.coop as usize) * p.n_heads / heads as usize;
        let step = CoopAttention {
            head_dim,
            heads,
            t,
            params,
            groups: groups as u64,
        };
        be.record(Step::CoopAttention(step));
        return Ok(());
    }
    let quads = AttentionKernel::AttentionQuads { kv, head_dim };
    let (kernel, groups) = if p.head_dim.is_multiple_of(16) && quads.builds_with(f) {
        (quads, rows.div_ceil(32) * p.n_heads)
    } else {
        let kernel = AttentionKernel::AttentionRows { kv, head_dim };
        (kernel, (rows * p.n_heads).div_ceil(64))
    };
    be.run(attention::dispatch(
        kernel,
        t,
        params,
        groups as u64,
        be.aux(),
    ))
}
