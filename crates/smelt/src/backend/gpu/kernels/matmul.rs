//! The tiled matmul for prefill on f32 activations (`matmul.wgsl`):
//! `out[t, r] = dot(w[r], x[t])`, 64 × 64 output tiles; one variant per
//! weight type. Its parameter block is also the mat-vec's and the Q8
//! kernels' (`matvec`, `matmul_q8`).

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WEIGHT_TYPES, r, rw, shared};

const SOURCE: &str = include_str!("matmul.wgsl");

kernel_params! {
    /// `out[:, out_col0 ..][t, r] = dot(w[r], x[t])`: the parameters of
    /// matmul.wgsl, matvec.wgsl and matmul_q8.wgsl.
    pub struct Params {
        /// Rows of w.
        pub m: u32,
        /// Values per row.
        pub k: u32,
        /// Tokens.
        pub n: u32,
        /// w's row stride (`GpuBackend::row_param`).
        pub row_bytes: u32,
        /// Workgroups along m.
        pub groups_m: u32,
        /// out's row stride: m, or more where w is a part of a split weight.
        pub out_stride: u32,
        /// out's first column.
        pub out_col0: u32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

impl Params {
    /// `out[:, o0 .. o0 + w.rows] = x · wᵀ` for `out.rows` tokens, in
    /// `groups_m` workgroups along w's rows.
    pub fn of(w: Tensor, out: Tensor, o0: usize, row_bytes: usize, groups_m: usize) -> Params {
        Params {
            m: w.rows as u32,
            k: w.cols as u32,
            n: out.rows as u32,
            row_bytes: row_bytes as u32,
            groups_m: groups_m as u32,
            out_stride: out.cols as u32,
            out_col0: o0 as u32,
            zero: 0,
        }
    }
}

/// The weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatMul(pub GgmlType);

impl Family for MatMul {
    type Params = Params;

    fn all() -> Vec<Self> {
        WEIGHT_TYPES.into_iter().map(MatMul).collect()
    }

    fn bindings(self) -> &'static [Binding] {
        &const { [r("wq"), rw("x"), rw("out")] }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.0;
        s.weights(t, f.repacks(t), f.shader_f16 && t == GgmlType::F16, false);
        s.include(&[shared::QUANT, SOURCE]);
    }
}

/// `out[:, o0 .. o0 + w.rows] = x · wᵀ` in 64 × 64 tiles (`row_bytes`:
/// w's row stride).
pub fn dispatch(w: Tensor, x: Tensor, out: Tensor, o0: usize, row_bytes: usize) -> Dispatch {
    let tiles_m = w.rows.div_ceil(64);
    Dispatch::new(
        MatMul(w.dtype),
        Params::of(w, out, o0, row_bytes, tiles_m),
        &[("wq", w), ("x", x), ("out", out)],
        (tiles_m * out.rows.div_ceil(64)) as u64,
    )
}
