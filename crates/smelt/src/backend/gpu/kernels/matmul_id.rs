//! The experts' matmuls of a mixture of experts (`matmul_id.wgsl`, ggml's
//! `mul_mat_id`): one dispatch over every (token, chosen expert) pair,
//! each a mat-vec of its expert's rows read in place from the quantized
//! stack of experts. Weights decode through `quant.wgsl` on f32
//! activations, or through `q8_lanes.wgsl` on ggml's Q8 blocks (the exact
//! mode's legacy quants), so every type the matmuls take works here too.

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::matmul_q8::{Q8_WEIGHT_TYPES, has_min};
use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WEIGHT_TYPES, r, rw, shared};

const SOURCE: &str = include_str!("matmul_id.wgsl");

/// Workgroup size of the f32 form: 4 rows' sums in one vec4 reduction.
const WG: u32 = 64;
/// Rows a workgroup of the Q8 form takes (16 quads).
const Q8_ROWS: usize = 16;

kernel_params! {
    /// matmul_id.wgsl's parameters.
    pub struct Params {
        /// Rows of one expert.
        pub m: u32,
        /// Values per row.
        pub k: u32,
        /// Tokens × experts per token.
        pub pairs: u32,
        /// w's row stride (`GpuBackend::row_param`).
        pub row_bytes: u32,
        /// Workgroups along m.
        pub groups_m: u32,
        /// Pairs per row of x: K where each expert reads its token's row,
        /// 1 where x has a row per pair.
        pub x_div: u32,
        /// Experts in the stack; ids are clamped below it.
        pub n_expert: u32,
        /// 0: exact.wgsl's `opaque` reads it.
        pub zero: u32,
    }
}

/// The weight type, on f32 activations or on Q8 blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatMulId {
    /// f32 activations, or ggml's f32 rounding of them (Q8_K, f16).
    MatVecId(GgmlType),
    /// ggml's Q8 blocks of the legacy quants, in ggml's arithmetic.
    MatVecIdQ8(GgmlType),
}

impl MatMulId {
    fn weight(self) -> GgmlType {
        match self {
            MatMulId::MatVecId(t) | MatMulId::MatVecIdQ8(t) => t,
        }
    }
}

impl Family for MatMulId {
    type Params = Params;

    fn all() -> Vec<Self> {
        let f32s = WEIGHT_TYPES.into_iter().map(MatMulId::MatVecId);
        f32s.chain(Q8_WEIGHT_TYPES.into_iter().map(MatMulId::MatVecIdQ8))
            .collect()
    }

    fn bindings(self) -> &'static [Binding] {
        match self {
            MatMulId::MatVecId(_) => &const { [r("wq"), r("x"), r("ids"), rw("out")] },
            MatMulId::MatVecIdQ8(t) if has_min(t) => {
                &const { [r("wq"), r("xq"), r("xd"), r("ids"), rw("out"), r("xs")] }
            }
            MatMulId::MatVecIdQ8(_) => &const { [r("wq"), r("xq"), r("xd"), r("ids"), rw("out")] },
        }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.weight();
        match self {
            MatMulId::MatVecId(_) => {
                s.weights(t, f.repacks(t), f.shader_f16 && t == GgmlType::F16, false);
                s.wg = WG;
                s.def("REDUCE4");
                s.include(&[shared::QUANT, shared::REDUCE, shared::MATVEC_ROWS, SOURCE]);
            }
            MatMulId::MatVecIdQ8(_) => {
                s.weights(t, false, false, false);
                s.def("Q8_BLOCKS");
                if has_min(t) {
                    s.def("HAS_MIN");
                }
                s.include(&[shared::QUANT, shared::EXACT, shared::Q8_LANES, SOURCE]);
            }
        }
    }
}

/// What a `matmul_id` reads: the stack of experts `w` (`row_bytes`: its
/// row stride, `n_expert` experts), the ids (`pairs` of them) and `out`
/// (`pairs × m`).
#[derive(Clone, Copy)]
pub struct Experts {
    pub w: Tensor,
    pub row_bytes: usize,
    pub n_expert: usize,
    pub ids: Tensor,
    pub out: Tensor,
}

impl Experts {
    fn params(&self, x_rows: usize, groups_m: usize) -> Params {
        let pairs = self.ids.n_elements();
        Params {
            m: self.out.cols as u32,
            k: self.w.cols as u32,
            pairs: pairs as u32,
            row_bytes: self.row_bytes as u32,
            groups_m: groups_m as u32,
            x_div: (pairs / x_rows.max(1)) as u32,
            n_expert: self.n_expert as u32,
            zero: 0,
        }
    }
}

/// Every pair's mat-vec on f32 activations `x` (`n × k` or `pairs × k`).
pub fn f32s(e: Experts, x: Tensor) -> Dispatch {
    let groups = e.out.cols.div_ceil(4);
    Dispatch::new(
        MatMulId::MatVecId(e.w.dtype),
        e.params(x.rows, groups),
        &[("wq", e.w), ("x", x), ("ids", e.ids), ("out", e.out)],
        (groups * e.ids.n_elements()) as u64,
    )
}

/// Every pair's mat-vec on x's Q8 blocks (quants, scales, sums) of
/// `x_rows` rows, in ggml's arithmetic.
pub fn q8(e: Experts, [xq, xd, xs]: [Tensor; 3], x_rows: usize) -> Dispatch {
    let groups = e.out.cols.div_ceil(Q8_ROWS);
    let kernel = MatMulId::MatVecIdQ8(e.w.dtype);
    let params = e.params(x_rows, groups);
    let workgroups = (groups * e.ids.n_elements()) as u64;
    let bound = [
        ("wq", e.w),
        ("xq", xq),
        ("xd", xd),
        ("ids", e.ids),
        ("out", e.out),
    ];
    if has_min(e.w.dtype) {
        let with_sums = [&bound[..], &[("xs", xs)]].concat();
        Dispatch::new(kernel, params, &with_sums, workgroups)
    } else {
        Dispatch::new(kernel, params, &bound, workgroups)
    }
}
