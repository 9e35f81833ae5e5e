//! The op before a matmul on cooperative matrices writing the f16 blocks
//! of its output too (`GluHalf`, `AddRmsNormHalf`, `AttentionCoop` with
//! `half`, `MatMulCoop` GLU tiles with `half`), where a `HalfBlocks` copy
//! would be a dispatch of its own.

use super::{Cx, holds};
use crate::backend::gpu::tape::Step;

pub(super) fn join(held: &Step, next: &Step, cx: &Cx) -> Option<Step> {
    let Step::Half { x, half } = *next else {
        return None;
    };
    if held.out() != Some(x) || !holds(held, cx) {
        return None;
    }
    held.half_dispatch(half, cx.features, cx.aux)
        .map(Step::Dispatch)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::copy::CopyKernel;
    use crate::backend::gpu::kernels::elementwise::{Elementwise, ElementwiseKernel};
    use crate::backend::gpu::tape::Step;
    use crate::quant::GgmlType::F16;

    #[test]
    fn a_glu_writes_the_f16_blocks_of_its_output() {
        let (g, u, act) = (t(1, 8, 64), t(2, 8, 64), t(3, 8, 64));
        let half = typed(4, F16, 8, 64);
        let glu = |out| Step::Glu {
            op: Elementwise::GeluMul,
            gate: g,
            up: u,
            out,
        };
        let joined = kernels(vec![glu(act), Step::Half { x: act, half }], &cx(true));
        assert_eq!(
            joined,
            [Kernel::Elementwise(ElementwiseKernel::GluHalf(
                Elementwise::GeluMul
            ))]
        );
        // In place: the GLU overwrites what it reads, then a copy.
        let apart = kernels(vec![glu(u), Step::Half { x: u, half }], &cx(true));
        assert_eq!(apart.len(), 2);
        assert_eq!(apart[1], Kernel::Copy(CopyKernel::HalfBlocks));
    }
}
