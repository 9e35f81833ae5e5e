//! Head norms and their ropes (Qwen 3's and Gemma 3's per-head Q and K
//! RMSNorm), f32 mode, where nothing reads a norm's output after its rope:
//!
//! - a head norm, then the rope of its output: one step (`NormRope`);
//! - then K's head norm, when the step after it is its rope that would
//!   join it alike: held with Q's (`KHead::Normed`), then with that rope
//!   (`KHead::Roped`) one dispatch for both (`NormRope` with `pair`).
//!   Lowered before its rope comes, the held K norm runs alone and its
//!   rope after it, as recorded;
//! - then a scale of Q's output in place (Gemma's query scale), taken in
//!   as the factor Q's values are scaled by last.

use super::{Cx, live};
use crate::backend::gpu::kernels::norm_rope::HeadNorm;
use crate::backend::gpu::tape::{KHead, Step};
use crate::backend::{RopeParams, Tensor};

pub(super) fn join(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
    match (held, next) {
        (Step::Norm { .. }, Step::Rope { .. }) => {
            let (q, pos, p) = norm_and_rope(held, next, later, cx)?;
            Some(Step::NormRope { q, pos, p, k: None })
        }
        (&Step::NormRope { q, pos, p, k: None }, Step::Norm { .. }) => {
            let (rope, after) = later.split_first()?;
            let (k, k_pos, k_p) = norm_and_rope(next, rope, after, cx)?;
            let Step::Norm { out: normed, .. } = *next else {
                return None;
            };
            let alike = RopeParams {
                n_heads: k_p.n_heads,
                ..p
            } == k_p
                && k_pos == pos
                && k.eps == q.eps;
            // K's tensors none of Q's (the two halves run at once).
            let apart = [k.x, k.w, k.out, normed]
                .iter()
                .all(|t| ![q.x.id, q.out.id].contains(&t.id))
                && ![k.out.id, normed.id].contains(&q.w.id);
            (alike && apart).then_some(Step::NormRope {
                q,
                pos,
                p,
                k: Some(KHead::Normed(HeadNorm { out: normed, ..k })),
            })
        }
        (
            &Step::NormRope {
                q,
                pos,
                p,
                k: Some(KHead::Normed(k)),
            },
            &Step::Rope {
                x,
                pos: k_pos,
                p: ref k_p,
                out,
            },
        ) => {
            // The rope `later` showed when K's norm joined.
            let same = x == k.out.reshape(x.rows, x.cols) && k_pos == pos;
            same.then(|| {
                let k = HeadNorm {
                    out: out.reshape(k.x.rows, k.x.cols),
                    ..k
                };
                Step::NormRope {
                    q,
                    pos,
                    p,
                    k: Some(KHead::Roped(k, k_p.n_heads)),
                }
            })
        }
        (&Step::NormRope { q, pos, p, k }, &Step::Scale { x, s, out }) => {
            let on_q = x == out && x.id == q.out.id && x.n_bytes() == q.out.n_bytes();
            let unscaled = q.scale == 1.0 && !matches!(k, Some(KHead::Normed(_)));
            (on_q && unscaled).then_some(Step::NormRope {
                q: HeadNorm { scale: s, ..q },
                pos,
                p,
                k,
            })
        }
        _ => None,
    }
}

/// A head norm and the rope of its output as one: its head rows, weight
/// and eps with the rope's output (as head rows), the positions and the
/// rope.
fn norm_and_rope(
    norm: &Step,
    rope: &Step,
    later: &[Step],
    cx: &Cx,
) -> Option<(HeadNorm, Tensor, RopeParams)> {
    let (
        &Step::Norm {
            x,
            w,
            eps,
            out: normed,
            q8: None,
        },
        &Step::Rope {
            x: rx,
            pos,
            ref p,
            out,
        },
    ) = (norm, rope)
    else {
        return None;
    };
    let hd = p.head_dim;
    // The norm's rows are the rope's heads, its output the rope's input.
    let heads = x.cols == hd
        && w.cols * w.rows == hd
        && rx.cols == p.n_heads * hd
        && x.rows == rx.rows * p.n_heads
        && out.rows == rx.rows
        && out.cols == rx.cols;
    let chained = rx.id == normed.id && rx.n_bytes() == normed.n_bytes();
    // Out may be x (read whole before it is written) but not the weight,
    // positions or factors.
    let apart = [w.id, pos.id]
        .into_iter()
        .chain(p.freq_factors.map(|f| f.id))
        .all(|id| id != out.id && id != normed.id);
    let joins = cx.features.fast_math
        && !cx.quantize_activations
        && heads
        && chained
        && apart
        && hd.is_multiple_of(2)
        && p.n_dims <= hd
        && live::dead(normed, later, cx);
    let out = out.reshape(x.rows, hd);
    let n = HeadNorm {
        x,
        w,
        eps,
        out,
        scale: 1.0,
    };
    joins.then_some((n, pos, *p))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, cx_with, kernels, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::norm::Norm;
    use crate::backend::gpu::kernels::norm_rope::NormRope;
    use crate::backend::gpu::tape::Step;
    use crate::backend::{RopeMode, RopeParams, Tensor};
    use crate::quant::GgmlType::I32;
    use std::collections::HashSet;

    /// Two tokens' `heads` heads of 64 in `x` normed into `normed`, then
    /// roped back into `x`.
    fn head_norm(x: Tensor, heads: usize, normed: u32) -> [Step; 2] {
        let normed = t(normed, 2, heads * 64);
        [
            Step::Norm {
                x: x.reshape(2 * heads, 64),
                w: t(x.id + 100, 1, 64),
                eps: 1e-6,
                out: normed.reshape(2 * heads, 64),
                q8: None,
            },
            Step::Rope {
                x: normed,
                pos: typed(4, I32, 1, 2),
                p: RopeParams {
                    mode: RopeMode::Neox,
                    n_heads: heads,
                    head_dim: 64,
                    n_dims: 64,
                    freq_base: 1e6,
                    freq_scale: 1.0,
                    freq_factors: None,
                    attn_factor: 1.0,
                },
                out: x,
            },
        ]
    }

    /// `normed` written whole.
    fn overwrite(normed: u32) -> Step {
        Step::Norm {
            x: t(30, 2, 256),
            w: t(31, 1, 256),
            eps: 1e-6,
            out: t(normed, 2, 256),
            q8: None,
        }
    }

    const ONE: Kernel = Kernel::NormRope(NormRope {
        mode: RopeMode::Neox,
        pair: false,
    });
    const PAIR: Kernel = Kernel::NormRope(NormRope {
        mode: RopeMode::Neox,
        pair: true,
    });
    const NORM: Kernel = Kernel::Norm(Norm::RmsNorm { weight: true });

    #[test]
    fn a_head_norm_joins_its_rope_where_its_output_is_not_read() {
        let q = t(1, 2, 256);
        let tape = |overwritten: bool| {
            let mut steps = Vec::from(head_norm(q, 4, 2));
            steps.extend(overwritten.then(|| overwrite(2)));
            steps
        };
        assert_eq!(kernels(tape(true), &cx(true)), [ONE, NORM]);
        // At the tape's end, in a buffer the host may read: apart.
        assert_eq!(kernels(tape(false), &cx(true)).len(), 2);
        // The exact mode keeps ggml's norm.
        assert_ne!(kernels(tape(true), &cx(false))[0], ONE);
    }

    #[test]
    fn q_and_k_head_norms_and_ropes_are_one_dispatch() {
        // Q's 4 heads and K's 2, both normed into buffer 2.
        let (q, k) = (t(1, 2, 256), t(3, 2, 128));
        let both = || {
            let mut steps = Vec::from(head_norm(q, 4, 2));
            steps.extend(head_norm(k, 2, 2));
            steps
        };
        let mut steps = both();
        steps.push(overwrite(2));
        assert_eq!(kernels(steps, &cx(true)), [PAIR, NORM]);
        // With Q scaled in place after (Gemma's query scale): taken in.
        let mut steps = both();
        steps.push(Step::Scale {
            x: q,
            s: 0.125,
            out: q,
        });
        steps.push(overwrite(2));
        assert_eq!(kernels(steps, &cx(true)), [PAIR, NORM]);
        // K's normed read after its rope: Q's joins alone, K's stay apart.
        let mut steps = both();
        steps.push(Step::Norm {
            x: t(2, 2, 128),
            w: t(31, 1, 128),
            eps: 1e-6,
            out: t(32, 2, 128),
            q8: None,
        });
        // (Buffer 2 scratch: what the K norm left of Q's is dead at the end.)
        let scratch = HashSet::from([2]);
        let ks = kernels(steps, &cx_with(true, &scratch));
        assert_eq!(ks[0], ONE, "{ks:?}");
        assert_eq!(ks.len(), 4, "{ks:?}");
    }
}
