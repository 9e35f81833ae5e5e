//! Fusion's joins: how the op held back (`pending.rs`) and the op after
//! it become one dispatch, each join checking that the second op's
//! tensors do not alias what the first reads or writes.

use crate::backend::{Result, RopeMode, RopeParams, Tensor};
use crate::quant::GgmlType;

use super::GpuBackend;
use super::kernels::attention::{AttentionKernel, RopeJoin};
use super::kernels::elementwise::Elementwise;
use super::kernels::matmul_coop::CoopGateUp;
use super::kernels::matvec_blocks::{self, DotIn, MatVecBlocks, NORM_MAX_COLS, NormJoin};
use super::kernels::norm::AddNorm;
use super::kernels::split_sums::Split;
use super::kernels::{Family, copy};
use super::pending::{self, Pending};

/// Holds a rope back, or dispatches it paired with
/// the one held if that one has the same positions and frequencies.
pub(super) fn rope_paired(
    be: &mut GpuBackend,
    x: Tensor,
    pos: Tensor,
    p: &RopeParams,
    out: Tensor,
) -> Result<()> {
    if let Some(Pending::Rope {
        x: x1,
        pos: pos1,
        p: p1,
        out: out1,
    }) = be.pending
    {
        let same = RopeParams {
            n_heads: p.n_heads,
            ..p1
        } == *p;
        let apart = [x.id, out.id]
            .iter()
            .all(|&id| id != x1.id && id != out1.id && id != pos.id);
        if pos1 == pos && same && apart {
            be.acts.wrote(out);
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
                be.pending = Some(ropes);
                return Ok(());
            }
            be.pending = None;
            let d = ropes.dispatch(None, be.aux());
            return be.run(d);
        }
    }
    pending::flush(be)?;
    be.acts.wrote(out);
    be.pending = Some(Pending::Rope { x, pos, p: *p, out });
    Ok(())
}

/// Holds a KV-cache write back: with the ropes held if it writes K's
/// rotated rows, or alone; or dispatches it with what is held, the
/// ropes and K's write (`RopeStore`) or K's write (`SetRowsPair`), if
/// it is V's with the same ids and shapes.
pub(super) fn set_rows_paired(
    be: &mut GpuBackend,
    src: Tensor,
    ids: Tensor,
    dst: Tensor,
) -> Result<()> {
    // A block cache is written by `kv_store`, a rotation group per
    // invocation, which the ropes' pairs of values cannot join.
    let floats = matches!(dst.dtype, GgmlType::F32 | GgmlType::F16);
    if let Some(Pending::Ropes {
        q,
        k,
        pos,
        p,
        store,
    }) = be.pending
        && floats
    {
        let (x, out) = q;
        let read = [x, out, k.0, k.1, pos, ids];
        match store {
            // K's cache write: rows of K's rotated output.
            None if src == k.1 && dst.cols == src.cols && read.iter().all(|t| t.id != dst.id) => {
                be.acts.wrote(dst);
                be.pending = Some(Pending::Ropes {
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
                be.acts.wrote(dst);
                let held = Pending::RopeStore {
                    q,
                    k,
                    pos,
                    p,
                    ids,
                    kc,
                    v: (src, dst),
                };
                // The attention next may take them in: one row, K's
                // input not overwritten (other heads read it), and the
                // adapter binding all its buffers.
                let bindings = AttentionKernel::AttentionRope(kc.dtype).bindings().len() as u32;
                let joinable = be.ctx.features.fast_math
                    && x.rows == 1
                    && k.0.id != k.1.id
                    && p.head_dim.is_multiple_of(4)
                    && be.ctx.limits.max_storage_buffers_per_shader_stage >= bindings;
                if joinable {
                    be.pending = Some(held);
                    return Ok(());
                }
                be.pending = None;
                let d = held.dispatch(None, be.aux());
                return be.run(d);
            }
            _ => {}
        }
    }
    if let Some(Pending::SetRows {
        src: src1,
        ids: ids1,
        dst: dst1,
    }) = be.pending
    {
        let same = ids1 == ids
            && (src1.rows, src1.cols) == (src.rows, src.cols)
            && (dst1.dtype, dst1.rows, dst1.cols) == (dst.dtype, dst.rows, dst.cols)
            && src1.dtype == src.dtype;
        let apart = [src.id, dst.id]
            .iter()
            .all(|&id| id != src1.id && id != dst1.id && id != ids.id);
        if same && apart {
            be.pending = None;
            return be.run(copy::set_rows((src1, ids, dst1), Some((src, dst))));
        }
    }
    pending::flush(be)?;
    be.acts.wrote(dst);
    be.pending = Some(Pending::SetRows { src, ids, dst });
    Ok(())
}

/// The held ropes and cache writes, if the decode attention of `q` over
/// caches `kc`, `vc` at `pos` (writing `out`) can take them in
/// (`Pending::RopeStore`); they are no longer held then.
pub(super) fn rope_store_for_attention(
    be: &mut GpuBackend,
    [q, kc, vc, pos, seq, out]: [Tensor; 6],
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
) -> Option<RopeJoin> {
    let Some(Pending::RopeStore {
        q: (x, qo),
        k,
        pos: rpos,
        p,
        ids,
        kc: rkc,
        v,
    }) = be.pending
    else {
        return None;
    };
    // The attention's rope has no LongRoPE magnitude (`attn_factor`).
    let same = (qo, rkc, v.1, rpos) == (q, kc, vc, pos)
        && (p.n_heads, k.2, p.head_dim) == (n_heads, n_kv_heads, head_dim)
        && p.attn_factor == 1.0;
    // The output is none of what the kernel reads or writes besides.
    let apart = [x, k.0, k.1, v.0, kc, vc, ids, pos, seq]
        .iter()
        .all(|t| t.id != out.id);
    if !same || !apart {
        return None;
    }
    be.pending = None;
    Some(RopeJoin {
        x,
        k: (k.0, k.1),
        v: v.0,
        ids,
        p,
    })
}

/// A split matmul's second half's sums held back (`Pending::SplitSums`)
/// for the residual add after it to take in, after dispatching what was
/// held.
pub(super) fn hold_split_sums(be: &mut GpuBackend, out: Tensor, sums: Tensor) -> Result<()> {
    pending::flush(be)?;
    be.pending = Some(Pending::SplitSums(Split {
        out,
        sums,
        keep: true,
    }));
    Ok(())
}

/// Holds `out = a + b` back, joining the split matmul's sums held if
/// one of a, b is its output (neither the sums, nor `out` that output).
pub(super) fn defer_add(be: &mut GpuBackend, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
    let joined = match be.pending {
        Some(Pending::SplitSums(s)) if s.out.id != out.id && a.id != b.id => {
            let other = if b == s.out {
                Some(a)
            } else {
                (a == s.out).then_some(b)
            };
            other
                .filter(|o| o.id != s.sums.id && out.id != s.sums.id)
                .map(|o| (o, s))
        }
        _ => None,
    };
    match joined {
        Some((a, s)) => {
            be.pending = None;
            be.acts.wrote(out);
            be.pending = Some(Pending::Add {
                a,
                b: s.out,
                out,
                split: Some(s),
            });
        }
        None => {
            pending::flush(be)?;
            be.acts.wrote(out);
            be.pending = Some(Pending::Add {
                a,
                b,
                out,
                split: None,
            });
        }
    }
    Ok(())
}

/// The rms_norm (with weight `w`) of a held-back add's sum, held back
/// in its place to be one dispatch with the add (`Pending::AddNorm`);
/// false if no such add is pending.
pub(super) fn norm_of_pending_add(
    be: &mut GpuBackend,
    x: Tensor,
    w: Tensor,
    eps: f32,
    out: Tensor,
) -> bool {
    let Some(Pending::Add {
        a,
        b,
        out: sum,
        split,
    }) = be.pending
    else {
        return false;
    };
    let on_sums = split.is_some_and(|s| s.sums.id == out.id);
    if sum != x || out.id == sum.id || out.id == a.id || out.id == b.id || on_sums {
        return false;
    }
    be.acts.forget();
    be.pending = Some(Pending::AddNorm(AddNorm {
        a,
        b,
        sum,
        w,
        eps,
        out,
        split,
    }));
    true
}

/// The rms_norm held back whose output is `x`, for the repacked decode
/// mat-vecs of `x` (writing `outs`; with `glu`, gate and up, whose GLU
/// may join) to take in (f32 mode, rows of up to 4096 values, the
/// adapter binding the kernel's buffers); it is no longer held then,
/// and x's Q8 rounding is not stored.
pub(super) fn norm_for_matvec(
    be: &mut GpuBackend,
    (t, x): (GgmlType, Tensor),
    outs: &[Tensor],
    glu: bool,
) -> Option<NormJoin> {
    let Some(Pending::Norm { x: nx, w, eps, out }) = be.pending else {
        return None;
    };
    // The GLU's op binds nothing of its own.
    let kernel = if glu {
        MatVecBlocks::MatVecGlu {
            t,
            op: Elementwise::SiluMul,
            norm: true,
        }
    } else {
        MatVecBlocks::MatVecMulti { t, norm: true }
    };
    let bindings = kernel.bindings().len() as u32;
    let fits = be.ctx.features.fast_math
        && out == x
        && x.cols <= NORM_MAX_COLS
        && x.cols.is_multiple_of(32)
        && be.ctx.limits.max_storage_buffers_per_shader_stage >= bindings;
    let apart = outs
        .iter()
        .all(|o| [nx.id, w.id, out.id].iter().all(|&id| id != o.id));
    if !fits || !apart {
        return None;
    }
    be.pending = None;
    be.acts.forget();
    Some(NormJoin { x: nx, w, eps, out })
}

/// Holds gate and up mat-vecs back (see `Pending::GateUp`), after
/// dispatching what was held.
pub(super) fn hold_gate_up(
    be: &mut GpuBackend,
    w: [Tensor; 2],
    x: DotIn,
    outs: [Tensor; 2],
) -> Result<()> {
    pending::flush(be)?;
    be.pending = Some(Pending::GateUp {
        w,
        x,
        outs,
        glu: None,
    });
    Ok(())
}

/// `out = op(gate) · up` joining the gate and up mat-vecs (or coop
/// matmuls) held back, if they made `gate` and `up` and `out` is none
/// of their tensors; false otherwise.
pub(super) fn glu_of_gate_up(
    be: &mut GpuBackend,
    op: Elementwise,
    gate: Tensor,
    up: Tensor,
    out: Tensor,
) -> bool {
    if let Some(Pending::CoopGateUp(g)) = be.pending {
        let apart = [g.joint.0, g.x, g.outs[0], g.outs[1]]
            .iter()
            .all(|t| t.id != out.id);
        if g.glu.is_some() || g.outs != [gate, up] || !apart {
            return false;
        }
        be.acts.wrote(out);
        let glu = Some((op, out));
        be.pending = Some(Pending::CoopGateUp(CoopGateUp { glu, ..g }));
        return true;
    }
    let Some(Pending::GateUp {
        w,
        x,
        outs,
        glu: None,
    }) = be.pending
    else {
        return false;
    };
    let apart = w
        .iter()
        .chain(&x.tensors())
        .chain(&outs)
        .all(|t| t.id != out.id);
    if outs != [gate, up] || !apart {
        return false;
    }
    be.acts.wrote(out);
    be.pending = Some(Pending::GateUp {
        w,
        x,
        outs,
        glu: Some((op, out)),
    });
    true
}

/// `Backend::discard`: gate and up held back with their GLU are not
/// written if both are discarded, nor a split's whole output if it is
/// (where the add and norm after it take its sums in).
pub(super) fn discard_held(be: &mut GpuBackend, ts: &[Tensor]) {
    match &mut be.pending {
        Some(Pending::CoopGateUp(g))
            if g.glu.is_some() && g.outs.iter().all(|o| ts.contains(o)) =>
        {
            g.keep = false;
        }
        Some(Pending::Add { split: Some(s), .. })
        | Some(Pending::AddNorm(AddNorm { split: Some(s), .. }))
            if ts.contains(&s.out) =>
        {
            s.keep = false
        }
        _ => {}
    }
}

/// Holds gate and up on cooperative matrices back (see
/// `Pending::CoopGateUp`), after dispatching what was held.
pub(super) fn hold_coop_gate_up(be: &mut GpuBackend, g: CoopGateUp) -> Result<()> {
    pending::flush(be)?;
    for out in g.outs {
        be.acts.wrote(out);
    }
    be.pending = Some(Pending::CoopGateUp(g));
    Ok(())
}

/// Holds a repacked decode mat-vec back (f32 mode, whole rows of
/// `out`) for a residual add to join.
pub(super) fn hold_matvec(
    be: &mut GpuBackend,
    w: Tensor,
    x: [Tensor; 3],
    out: Tensor,
) -> Result<()> {
    // What is held already goes first: a mat-vec of the same rounded input
    // (the one before it, reusing the rounding) would otherwise be dropped.
    pending::flush(be)?;
    be.acts.wrote(out);
    be.pending = Some(Pending::MatVec { w, x, out });
    Ok(())
}

/// The residual add `sum = a + b` of a held-back mat-vec's output, in
/// one dispatch with it; false if no such mat-vec is held, or if the
/// add touches what the mat-vec reads.
pub(super) fn matvec_with_residual(
    be: &mut GpuBackend,
    a: Tensor,
    b: Tensor,
    sum: Tensor,
) -> Result<bool> {
    let Some(Pending::MatVec { w, x, out }) = be.pending else {
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
    be.pending = None;
    be.acts.wrote(sum);
    be.run(matvec_blocks::dot((w, x, out), 0, Some((res, sum))))?;
    Ok(true)
}
