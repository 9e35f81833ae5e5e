//! A norm taken whole into the repacked decode mat-vecs of its output
//! (f32 mode; `MatVecMulti`, `MatVecGlu` with `norm`): each workgroup
//! normalizes the row itself, so neither the norm nor its Q8 rounding is a
//! dispatch. The norm arrives rounded (`round_q8`); the rounding is
//! dropped, so nothing after may read it (`Passed::dropped_rounding`).

use super::Cx;
use crate::backend::gpu::kernels::Family;
use crate::backend::gpu::kernels::elementwise::Elementwise;
use crate::backend::gpu::kernels::matvec_blocks::{DotIn, MatVecBlocks, NORM_MAX_COLS, NormJoin};
use crate::backend::gpu::tape::Step;

pub(super) fn join(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
    let Step::Norm {
        x: nx,
        w,
        eps,
        out,
        q8: Some(q8),
    } = *held
    else {
        return None;
    };
    let (t, x, outs, glu) = match next {
        Step::GateUp {
            w, x, outs, glu, ..
        } => (w[0].dtype, *x, &outs[..], glu.is_some()),
        Step::MatVecs { w, x, outs, n, .. } => (w[0].dtype, *x, &outs[..*n], false),
        _ => return None,
    };
    let DotIn::Q8([xq, xd]) = x else {
        return None;
    };
    if glu || (xq, xd) != (q8[0], q8[1]) {
        return None;
    }
    // The GLU's op binds nothing of its own.
    let kernel = if matches!(next, Step::GateUp { .. }) {
        MatVecBlocks::MatVecGlu {
            t,
            op: Elementwise::SiluMul,
            norm: true,
        }
    } else {
        MatVecBlocks::MatVecMulti {
            t,
            v: t,
            norm: true,
        }
    };
    let fits = cx.features.fast_math
        && out.cols <= NORM_MAX_COLS
        && out.cols.is_multiple_of(32)
        && cx.max_storage_buffers >= kernel.bindings().len() as u32;
    let apart = outs
        .iter()
        .all(|o| [nx.id, w.id, out.id].iter().all(|&id| id != o.id));
    if !fits || !apart || read_later(later, q8[0]) {
        return None;
    }
    let x = DotIn::Norm(NormJoin { x: nx, w, eps, out });
    Some(match *next {
        Step::GateUp { w, outs, glu, .. } => Step::GateUp { w, x, outs, glu },
        Step::MatVecs {
            w, outs, n, rows, ..
        } => Step::MatVecs {
            w,
            outs,
            n,
            x,
            rows,
        },
        _ => return None,
    })
}

/// Whether a step of `later` reads the rounding in `xq` before another
/// rounding overwrites it.
fn read_later(later: &[Step], xq: crate::backend::Tensor) -> bool {
    for s in later {
        if s.reads_q8(xq) {
            return true;
        }
        if let Step::RoundQ8 { q8, .. } = s
            && q8[0].id == xq.id
        {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, q8, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::matvec_blocks::{DotIn, MatVecBlocks};
    use crate::backend::gpu::tape::Step;
    use crate::quant::GgmlType::Q4_0;

    /// A norm, its rounding, the Q, K, V mat-vecs of it, then what
    /// follows.
    fn tape(after: Vec<Step>) -> Vec<Step> {
        let (x, w, h) = (t(1, 1, 64), t(2, 1, 64), t(3, 1, 64));
        let q8 = q8(10, 64);
        let ws = [20, 21, 22].map(|id| typed(id, Q4_0, 64, 64));
        let outs = [30, 31, 32].map(|id| t(id, 1, 64));
        let mut steps = vec![
            Step::Norm {
                x,
                w,
                eps: 1e-6,
                out: h,
                q8: None,
            },
            Step::RoundQ8 { x: h, q8 },
            Step::MatVecs {
                w: ws,
                outs,
                n: 3,
                x: DotIn::Q8([q8[0], q8[1]]),
                rows: 1,
            },
        ];
        steps.extend(after);
        steps
    }

    #[test]
    fn the_mat_vecs_of_a_norm_take_it_whole() {
        let ks = kernels(tape(vec![]), &cx(true));
        assert_eq!(
            ks,
            [Kernel::MatVecBlocks(MatVecBlocks::MatVecMulti {
                t: Q4_0,
                v: Q4_0,
                norm: true
            })]
        );
    }

    #[test]
    fn a_rounding_read_later_is_kept() {
        let q8 = q8(10, 64);
        let later = Step::MatVec {
            w: typed(23, Q4_0, 64, 64),
            x: q8,
            out: t(33, 1, 64),
        };
        let ks = kernels(tape(vec![later]), &cx(true));
        assert_eq!(ks.len(), 3, "{ks:?}");
        assert!(matches!(
            ks[1],
            Kernel::MatVecBlocks(MatVecBlocks::MatVecMulti { norm: false, .. })
        ));
    }
}
