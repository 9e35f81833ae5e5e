//! Gate and up (repacked decode mat-vecs, or coop tiles joined) with the
//! GLU of their outputs: one dispatch writes `act(gate) · up` as well
//! (`MatVecGlu`; `MatMulCoop` with `Multi::Glu`), and stays a step for
//! the next matmul's Q8 rounding or f16 blocks to join.

use crate::backend::gpu::kernels::matmul_coop::CoopGateUp;
use crate::backend::gpu::tape::Step;

pub(super) fn join(held: &Step, next: &Step) -> Option<Step> {
    let Step::Glu { op, gate, up, out } = *next else {
        return None;
    };
    let glu = Some((op, out));
    match *held {
        Step::CoopGateUp(g) => {
            let apart = [g.joint.0, g.x, g.outs[0], g.outs[1]]
                .iter()
                .all(|t| t.id != out.id);
            (g.glu.is_none() && g.outs == [gate, up] && apart)
                .then_some(Step::CoopGateUp(CoopGateUp { glu, ..g }))
        }
        Step::GateUp {
            w,
            x,
            outs,
            glu: None,
        } => {
            let apart = w
                .iter()
                .chain(&x.tensors())
                .chain(&outs)
                .all(|t| t.id != out.id);
            (outs == [gate, up] && apart).then_some(Step::GateUp { w, x, outs, glu })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, q8, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::elementwise::Elementwise;
    use crate::backend::gpu::kernels::matvec_blocks::{DotIn, MatVecBlocks};
    use crate::backend::gpu::tape::Step;
    use crate::quant::GgmlType::Q4_0;

    fn tape(act: crate::backend::Tensor) -> Vec<Step> {
        let x8 = q8(10, 64);
        let (gate, up) = (t(1, 1, 128), t(2, 1, 128));
        vec![
            Step::GateUp {
                w: [typed(20, Q4_0, 128, 64), typed(21, Q4_0, 128, 64)],
                x: DotIn::Q8([x8[0], x8[1]]),
                outs: [gate, up],
                glu: None,
            },
            Step::Glu {
                op: Elementwise::SiluMul,
                gate,
                up,
                out: act,
            },
            Step::RoundQ8 {
                x: act,
                q8: q8(40, 128),
            },
        ]
    }

    #[test]
    fn gate_up_their_glu_and_its_rounding_are_one_dispatch() {
        let ks = kernels(tape(t(3, 1, 128)), &cx(true));
        assert_eq!(
            ks,
            [Kernel::MatVecBlocks(MatVecBlocks::MatVecGlu {
                t: Q4_0,
                op: Elementwise::SiluMul,
                norm: false
            })]
        );
    }

    #[test]
    fn a_glu_into_up_is_its_own_dispatch() {
        let ks = kernels(tape(t(2, 1, 128)), &cx(true));
        assert_eq!(ks.len(), 3, "{ks:?}");
        assert!(matches!(
            ks[0],
            Kernel::MatVecBlocks(MatVecBlocks::MatVecMulti { norm: false, .. })
        ));
    }
}
