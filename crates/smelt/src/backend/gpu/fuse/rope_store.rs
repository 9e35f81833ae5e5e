//! Ropes and KV-cache writes, joined in the order the model records them:
//!
//! - K's rope after Q's, at the same positions and frequencies: one
//!   dispatch (`RopePair`); in normal mode it stays a step (K's pairs are
//!   neighbours, whole f16 words of its cache row);
//! - then K's cache write of its rotated rows, then V's with the same ids
//!   into a cache like K's (`RopeStore`), floating-point caches only (a
//!   block cache's writer rotates groups the pairs cannot join);
//! - then the decode attention of the rotated Q over those caches
//!   (`AttentionRope`, f32 mode, one row), which leaves K rotated
//!   unwritten where nothing reads it after (`live`), and joins only then
//!   when K is rotated in place (other heads read K);
//! - two cache writes alike (V's after K's) without ropes (`SetRowsPair`).

use super::{Cx, live};
use crate::backend::gpu::kernels::attention::{AttentionKernel, RopeJoin};
use crate::backend::gpu::kernels::{Family, copy, rope};
use crate::backend::gpu::tape::Step;
use crate::backend::{RopeMode, RopeParams};
use crate::quant::GgmlType;

pub(super) fn join(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
    match (held, next) {
        (Step::Rope { .. }, Step::Rope { .. }) => rope_pair(held, next, cx),
        (Step::Ropes { .. }, Step::SetRows { .. }) => ropes_store(held, next, cx),
        (Step::RopeStore { .. }, Step::Attention { .. }) => attention_rope(held, next, later, cx),
        (
            &Step::SetRows {
                src: src1,
                ids: ids1,
                dst: dst1,
            },
            &Step::SetRows { src, ids, dst },
        ) => {
            let same = ids1 == ids
                && (src1.rows, src1.cols) == (src.rows, src.cols)
                && (dst1.dtype, dst1.rows, dst1.cols) == (dst.dtype, dst.rows, dst.cols)
                && src1.dtype == src.dtype;
            let apart = [src.id, dst.id]
                .iter()
                .all(|&id| id != src1.id && id != dst1.id && id != ids.id);
            (same && apart)
                .then(|| Step::Dispatch(copy::set_rows((src1, ids, dst1), Some((src, dst)))))
        }
        _ => None,
    }
}

fn rope_pair(held: &Step, next: &Step, cx: &Cx) -> Option<Step> {
    let (
        &Step::Rope {
            x: x1,
            pos: pos1,
            p: p1,
            out: out1,
        },
        &Step::Rope { x, pos, ref p, out },
    ) = (held, next)
    else {
        return None;
    };
    let same = RopeParams {
        n_heads: p.n_heads,
        ..p1
    } == *p;
    let apart = [x.id, out.id]
        .iter()
        .all(|&id| id != x1.id && id != out1.id && id != pos.id);
    if pos1 != pos || !same || !apart {
        return None;
    }
    if p.mode != RopeMode::Normal {
        let k = Some((x, p.n_heads, out));
        return Some(Step::Dispatch(rope::rope((x1, pos, &p1, out1), k, cx.aux)));
    }
    Some(Step::Ropes {
        q: (x1, out1),
        k: (x, out, p.n_heads),
        pos,
        p: p1,
        store: None,
    })
}

fn ropes_store(held: &Step, next: &Step, cx: &Cx) -> Option<Step> {
    let (
        &Step::Ropes {
            q,
            k,
            pos,
            p,
            store,
        },
        &Step::SetRows { src, ids, dst },
    ) = (held, next)
    else {
        return None;
    };
    if !matches!(dst.dtype, GgmlType::F32 | GgmlType::F16) {
        return None;
    }
    let (x, out) = q;
    let read = [x, out, k.0, k.1, pos, ids];
    match store {
        // K's cache write: rows of K's rotated output.
        None if src == k.1 && dst.cols == src.cols && read.iter().all(|t| t.id != dst.id) => {
            Some(Step::Ropes {
                q,
                k,
                pos,
                p,
                store: Some((ids, dst)),
            })
        }
        // V's: the same ids into a cache like K's.
        Some((ids1, kc))
            if ids1 == ids
                && (src.rows, src.cols) == (k.1.rows, k.1.cols)
                && (dst.dtype, dst.rows, dst.cols) == (kc.dtype, kc.rows, kc.cols)
                && src.id != kc.id
                && read.iter().chain([&kc]).all(|t| t.id != dst.id) =>
        {
            let v = (src, dst);
            // The attention next may take them in: one row, and the
            // adapter binding all its buffers.
            let bindings = AttentionKernel::AttentionRope(kc.dtype).bindings().len() as u32;
            let joinable = cx.features.fast_math
                && x.rows == 1
                && p.head_dim.is_multiple_of(4)
                && cx.max_storage_buffers >= bindings;
            if joinable {
                return Some(Step::RopeStore {
                    q,
                    k,
                    pos,
                    p,
                    ids,
                    kc,
                    v,
                });
            }
            let d = rope::rope_store((q, k, pos, &p), (ids, kc), Some(v), cx.aux);
            Some(Step::Dispatch(d))
        }
        _ => None,
    }
}

fn attention_rope(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
    let (
        &Step::RopeStore {
            q: (x, qo),
            k,
            pos: rpos,
            p,
            ids,
            kc: rkc,
            v,
        },
        &Step::Attention {
            t,
            params,
            groups,
            rope: None,
            q8: None,
            parts,
        },
    ) = (held, next)
    else {
        return None;
    };
    let [q, kc, vc, pos, seq, out] = t;
    let heads = (params.n_heads, params.n_kv_heads, params.head_dim);
    let rope_heads = (p.n_heads as u32, k.2 as u32, p.head_dim as u32);
    // The attention's rope has no LongRoPE magnitude (`attn_factor`).
    let same =
        (qo, rkc, v.1, rpos) == (q, kc, vc, pos) && heads == rope_heads && p.attn_factor == 1.0;
    // The output is none of what the kernel reads or writes besides.
    let apart = [x, k.0, k.1, v.0, kc, vc, ids, pos, seq]
        .iter()
        .all(|t| t.id != out.id);
    if !same || !apart {
        return None;
    }
    let k_out = (!live::dead(k.1, later, cx)).then_some(k.1);
    // Rotated in place, K's first head would be written while the
    // group's other heads read it.
    if k_out.is_some() && k.0.id == k.1.id {
        return None;
    }
    let rope = Some(RopeJoin {
        x,
        keep_q: !live::dead(qo, later, cx),
        k: (k.0, k_out),
        v: v.0,
        ids,
        p,
    });
    Some(Step::Attention {
        t,
        params,
        groups,
        rope,
        q8: None,
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, cx_with, kernels, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::attention::{AttentionKernel, Params};
    use crate::backend::gpu::kernels::elementwise::Elementwise;
    use crate::backend::gpu::kernels::rope::RopeKernel;
    use crate::backend::gpu::tape::Step;
    use crate::backend::{AttentionParams, RopeMode, RopeParams, Tensor};
    use crate::quant::GgmlType::{F16, I32};
    use std::collections::HashSet;

    const HEAD: usize = 64;

    fn rope(mode: RopeMode, n_heads: usize) -> RopeParams {
        RopeParams {
            mode,
            n_heads,
            head_dim: HEAD,
            n_dims: HEAD,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
        }
    }

    /// One decode row's ropes of Q (4 heads) and K (2), K's and V's cache
    /// writes, and the attention over the caches.
    fn tape(mode: RopeMode) -> Vec<Step> {
        let (q, qr, k, kr, v) = (
            t(1, 1, 4 * HEAD),
            t(2, 1, 4 * HEAD),
            t(3, 1, 2 * HEAD),
            t(4, 1, 2 * HEAD),
            t(5, 1, 2 * HEAD),
        );
        let (pos, ids) = (typed(6, I32, 1, 1), typed(7, I32, 1, 1));
        let (kc, vc) = (typed(8, F16, 16, 2 * HEAD), typed(9, F16, 16, 2 * HEAD));
        let (seq, out): (Tensor, Tensor) = (typed(10, I32, 1, 1), t(11, 1, 4 * HEAD));
        let ap = AttentionParams::new(4, 2, HEAD, 16);
        vec![
            Step::Rope {
                x: q,
                pos,
                p: rope(mode, 4),
                out: qr,
            },
            Step::Rope {
                x: k,
                pos,
                p: rope(mode, 2),
                out: kr,
            },
            Step::SetRows {
                src: kr,
                ids,
                dst: kc,
            },
            Step::SetRows {
                src: v,
                ids,
                dst: vc,
            },
            Step::Attention {
                t: [qr, kc, vc, pos, seq, out],
                params: Params::new(1, &ap, 16),
                groups: 4,
                rope: None,
                q8: None,
                parts: None,
            },
        ]
    }

    #[test]
    fn ropes_cache_writes_and_attention_are_one_dispatch() {
        let ks = kernels(tape(RopeMode::Normal), &cx(true));
        assert_eq!(ks, [Kernel::Attention(AttentionKernel::AttentionRope(F16))]);
    }

    /// `tape` with K rotated in place, then (`overwritten`) the next
    /// layer's K projection writing all of K.
    fn in_place_tape(overwritten: bool) -> Vec<Step> {
        let mut steps = tape(RopeMode::Normal);
        let k = t(3, 1, 2 * HEAD);
        if let Step::Rope { out, .. } = &mut steps[1] {
            *out = k;
        }
        if let Step::SetRows { src, .. } = &mut steps[2] {
            *src = k;
        }
        if overwritten {
            steps.push(Step::Glu {
                op: Elementwise::SiluMul,
                gate: t(20, 1, 2 * HEAD),
                up: t(21, 1, 2 * HEAD),
                out: k,
            });
        }
        steps
    }

    #[test]
    fn k_rotated_in_place_joins_the_attention_only_where_nothing_reads_it() {
        let joined = Kernel::Attention(AttentionKernel::AttentionRope(F16));
        // Overwritten before anything reads it: dead, left unwritten.
        let ks = kernels(in_place_tape(true), &cx(true));
        assert_eq!(ks[0], joined, "{ks:?}");
        // At the tape's end: dead only in a scratch buffer.
        let ks = kernels(in_place_tape(false), &cx(true));
        assert_ne!(ks[0], joined, "{ks:?}");
        let scratch = HashSet::from([3]);
        let ks = kernels(in_place_tape(false), &cx_with(true, &scratch));
        assert_eq!(ks, [joined]);
    }

    #[test]
    fn neox_ropes_pair_and_the_cache_writes_pair() {
        let ks = kernels(tape(RopeMode::Neox), &cx(true));
        assert_eq!(ks.len(), 3, "{ks:?}");
        assert_eq!(ks[0], Kernel::Rope(RopeKernel::RopePair(RopeMode::Neox)));
        assert!(matches!(
            ks[2],
            Kernel::Attention(AttentionKernel::Attention(F16))
        ));
    }
}
