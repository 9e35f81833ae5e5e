//! Legacy quants on Q8-rounded activations in ggml's arithmetic
//! (`matmul_q8.wgsl`): integer lanes, a quad of invocations per row, each
//! carrying several tokens; bit for bit ggml's CPU (exact.wgsl says why).

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::matmul::Params;
use super::{Binding, Dispatch, Family, ShaderFeatures, Source, r, rw, shared};

const SOURCE: &str = include_str!("matmul_q8.wgsl");

/// Weight types with these kernels.
pub const Q8_WEIGHT_TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// Tokens one invocation carries: the mat-vec up to this many, the
/// prefill kernel in groups of this many.
pub const MATVEC_Q8_TOKENS: usize = 4;
pub const MATMUL_Q8_TOKENS: usize = 8;

/// Rows a workgroup takes (4 quads).
const ROWS: usize = 16;

/// The weight type, for decode or prefill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatQ8 {
    /// Up to `MATVEC_Q8_TOKENS` tokens.
    MatVecQ8(GgmlType),
    /// Groups of `MATMUL_Q8_TOKENS` tokens.
    MatMulQ8(GgmlType),
}

/// Q4_1 and Q5_1: a block minimum, multiplied by the activations' sums.
pub fn has_min(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1)
}

impl MatQ8 {
    fn weight(self) -> GgmlType {
        match self {
            MatQ8::MatVecQ8(t) | MatQ8::MatMulQ8(t) => t,
        }
    }

    fn tokens(self) -> usize {
        match self {
            MatQ8::MatVecQ8(_) => MATVEC_Q8_TOKENS,
            MatQ8::MatMulQ8(_) => MATMUL_Q8_TOKENS,
        }
    }
}

impl Family for MatQ8 {
    type Params = Params;

    fn all() -> Vec<Self> {
        Q8_WEIGHT_TYPES
            .into_iter()
            .flat_map(|t| [MatQ8::MatVecQ8(t), MatQ8::MatMulQ8(t)])
            .collect()
    }

    fn bindings(self) -> &'static [Binding] {
        if has_min(self.weight()) {
            &const { [r("wq"), r("xq"), r("xd"), rw("out"), r("xs")] }
        } else {
            &const { [r("wq"), r("xq"), r("xd"), rw("out")] }
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        let t = self.weight();
        s.weights(t, false, false, false);
        if has_min(t) {
            s.def("HAS_MIN");
        }
        s.set("TT", self.tokens());
        s.include(&[shared::QUANT, shared::EXACT, shared::Q8_LANES, SOURCE]);
    }
}

/// `out[:, o0 .. o0 + w.rows] = x · wᵀ` of x's Q8 blocks (quants, scales,
/// sums), for decode (`MatVecQ8`) or prefill (`row_bytes`: w's row
/// stride).
pub fn dispatch(
    w: Tensor,
    [xq, xd, xs]: [Tensor; 3],
    out: Tensor,
    (o0, row_bytes): (usize, usize),
    decode: bool,
) -> Dispatch {
    let kernel = if decode {
        MatQ8::MatVecQ8(w.dtype)
    } else {
        MatQ8::MatMulQ8(w.dtype)
    };
    let groups = w.rows.div_ceil(ROWS);
    let params = Params::of(w, out, o0, row_bytes, groups);
    let workgroups = (groups * out.rows.div_ceil(kernel.tokens())) as u64;
    let (a, b, c, d) = (("wq", w), ("xq", xq), ("xd", xd), ("out", out));
    if has_min(w.dtype) {
        Dispatch::new(kernel, params, &[a, b, c, d, ("xs", xs)], workgroups)
    } else {
        Dispatch::new(kernel, params, &[a, b, c, d], workgroups)
    }
}
