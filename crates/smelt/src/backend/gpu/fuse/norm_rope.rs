//! A head norm, then the rope of its output (Qwen 3's and Gemma 3's
//! per-head Q and K RMSNorm): one dispatch (`NormRope`), in the f32 mode,
//! where nothing reads the norm's output after the rope.

use super::{Cx, live};
use crate::backend::gpu::kernels::norm_rope;
use crate::backend::gpu::tape::Step;

pub(super) fn join(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
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
    ) = (held, next)
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
    joins.then(|| {
        let d = norm_rope::dispatch((x, w, eps), (pos, p), out.reshape(x.rows, hd), cx.aux);
        Step::Dispatch(d)
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::norm_rope::NormRope;
    use crate::backend::gpu::tape::Step;
    use crate::backend::{RopeMode, RopeParams};
    use crate::quant::GgmlType::I32;

    /// Two tokens' 4 heads of 64 normed into `normed`, roped into q, then
    /// (`overwritten`) `normed` written whole by the next step.
    fn tape(overwritten: bool) -> Vec<Step> {
        let (q, normed, w) = (t(1, 2, 256), t(2, 2, 256), t(3, 1, 64));
        let pos = typed(4, I32, 1, 2);
        let mut steps = vec![
            Step::Norm {
                x: q.reshape(8, 64),
                w,
                eps: 1e-6,
                out: normed.reshape(8, 64),
                q8: None,
            },
            Step::Rope {
                x: normed,
                pos,
                p: RopeParams {
                    mode: RopeMode::Neox,
                    n_heads: 4,
                    head_dim: 64,
                    n_dims: 64,
                    freq_base: 1e6,
                    freq_scale: 1.0,
                    freq_factors: None,
                    attn_factor: 1.0,
                },
                out: q,
            },
        ];
        if overwritten {
            steps.push(Step::Norm {
                x: q,
                w: t(5, 1, 256),
                eps: 1e-6,
                out: normed,
                q8: None,
            });
        }
        steps
    }

    #[test]
    fn a_head_norm_joins_its_rope_where_its_output_is_not_read() {
        let joined = Kernel::NormRope(NormRope(RopeMode::Neox));
        let ks = kernels(tape(true), &cx(true));
        assert_eq!(ks[0], joined, "{ks:?}");
        assert_eq!(ks.len(), 2);
        // At the tape's end, in a buffer the host may read: apart.
        assert_eq!(kernels(tape(false), &cx(true)).len(), 2);
        // The exact mode keeps ggml's norm.
        assert_ne!(kernels(tape(true), &cx(false))[0], joined);
    }
}
