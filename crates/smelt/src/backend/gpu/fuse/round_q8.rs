//! A norm, GLU, decode attention, or gate and up with their GLU, and the
//! next matmul's Q8 rounding of its output, in one dispatch (`RmsNormQ8`,
//! `GluQ8`, `AttentionQ8`, `MatVecGlu` with `q8`): the rounding is then
//! never a dispatch of its own. A norm stays a step, for `norm_matvec`.

use super::{Cx, holds};
use crate::backend::gpu::tape::Step;

pub(super) fn join(held: &Step, next: &Step, cx: &Cx) -> Option<Step> {
    let Step::RoundQ8 { x, q8 } = *next else {
        return None;
    };
    if held.out() != Some(x) || !held.rounds_output() || !holds(held, cx) {
        return None;
    }
    held.rounded(q8, cx.aux)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, q8, t};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::elementwise::{Elementwise, ElementwiseKernel};
    use crate::backend::gpu::kernels::norm::Norm;
    use crate::backend::gpu::kernels::quantize::QuantizeActs;
    use crate::backend::gpu::tape::Step;

    #[test]
    fn a_norm_rounds_its_output_for_the_next_matmul() {
        let (x, w, h) = (t(1, 1, 64), t(2, 1, 64), t(3, 1, 64));
        let q8 = q8(10, 64);
        let tape = vec![
            Step::Norm {
                x,
                w,
                eps: 1e-6,
                out: h,
                q8: None,
            },
            Step::RoundQ8 { x: h, q8 },
        ];
        assert_eq!(kernels(tape, &cx(false)), [Kernel::Norm(Norm::RmsNormQ8)]);
    }

    #[test]
    fn a_glu_in_place_or_another_tensor_rounded_is_not_joined() {
        let (g, u, other) = (t(1, 1, 64), t(2, 1, 64), t(3, 1, 64));
        let glu = |out| Step::Glu {
            op: Elementwise::SiluMul,
            gate: g,
            up: u,
            out,
        };
        for (out, x) in [(g, g), (other, g)] {
            let tape = vec![glu(out), Step::RoundQ8 { x, q8: q8(10, 64) }];
            let ks = kernels(tape, &cx(false));
            assert_eq!(ks.len(), 2, "{ks:?}");
            assert_eq!(
                ks[0],
                Kernel::Elementwise(ElementwiseKernel::Elementwise(Elementwise::SiluMul))
            );
            assert!(matches!(ks[1], Kernel::Quantize(QuantizeActs(_))), "{ks:?}");
        }
    }
}
