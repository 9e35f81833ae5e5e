//! The mat-vec for decode on f32 activations (`matvec.wgsl`): a workgroup
//! per (token, 4 rows), weights decoded in registers; one variant per
//! weight type that is not repacked (those take `matvec_blocks`).

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::matmul::Params;
use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WEIGHT_TYPES, r, rw, shared};

const SOURCE: &str = include_str!("matvec.wgsl");

/// Workgroup size: the 4 rows' sums meet in one vec4 reduction.
const WG: u32 = 64;

/// The weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatVec(pub GgmlType);

impl Family for MatVec {
    type Params = Params;

    fn all() -> Vec<Self> {
        WEIGHT_TYPES.into_iter().map(MatVec).collect()
    }

    /// Repacked weights decode on Q8 activations (`MatVecDot`).
    fn builds_with(self, f: ShaderFeatures) -> bool {
        !f.repacks(self.0)
    }

    fn bindings(self) -> &'static [Binding] {
        // Activations read-only: the driver may use its read-only cache.
        &const { [r("wq"), r("x"), rw("out")] }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.0;
        s.weights(t, f.repacks(t), f.shader_f16 && t == GgmlType::F16, false);
        s.wg = WG;
        s.def("REDUCE4");
        s.include(&[shared::QUANT, shared::REDUCE, shared::MATVEC_ROWS, SOURCE]);
    }
}

/// `out[:, o0 .. o0 + w.rows] = x · wᵀ` for a few tokens (`row_bytes`:
/// w's row stride).
pub fn dispatch(w: Tensor, x: Tensor, out: Tensor, o0: usize, row_bytes: usize) -> Dispatch {
    let blocks = w.rows.div_ceil(4);
    Dispatch::new(
        MatVec(w.dtype),
        Params::of(w, out, o0, row_bytes, blocks),
        &[("wq", w), ("x", x), ("out", out)],
        (blocks * out.rows) as u64,
    )
}
