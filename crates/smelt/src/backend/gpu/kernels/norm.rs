//! rms_norm (`norm.wgsl`), with its weight, and fused with the next
//! matmul's Q8 rounding, with the residual add before it, or with the
//! residual add after it.

use crate::backend::Tensor;

use super::norm_half;
use super::split_sums::Split;
use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WG_ROW, rw, shared};

const SOURCE: &str = include_str!("norm.wgsl");

kernel_params! {
    /// norm.wgsl's parameters.
    pub struct Params {
        pub rows: u32,
        pub cols: u32,
        pub eps: f32,
        /// Q8: workgroups per row.
        pub parts: u32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Norm {
    RmsNorm {
        weight: bool,
    },
    /// rms_norm with a weight, fused with the next matmul's Q8 rounding.
    RmsNormQ8,
    /// A residual add and the rms_norm (with a weight) of its sum.
    AddRmsNorm,
    /// rms_norm with a weight, added to a residual (a post-norm).
    RmsNormResidual,
}

impl Family for Norm {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![
            Norm::RmsNorm { weight: false },
            Norm::RmsNorm { weight: true },
            Norm::RmsNormQ8,
            Norm::AddRmsNorm,
            Norm::RmsNormResidual,
        ]
    }

    fn bindings(self) -> &'static [Binding] {
        match self {
            Norm::RmsNorm { weight: false } => &const { [rw("x"), rw("out")] },
            Norm::RmsNorm { weight: true } => &const { [rw("x"), rw("out"), rw("w")] },
            Norm::RmsNormQ8 => {
                &const { [rw("x"), rw("out"), rw("w"), rw("xq"), rw("xd"), rw("xs")] }
            }
            Norm::AddRmsNorm => &const { [rw("x"), rw("out"), rw("w"), rw("addend"), rw("sum")] },
            Norm::RmsNormResidual => &const { [rw("x"), rw("out"), rw("w"), rw("res")] },
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        match self {
            Norm::RmsNorm { weight } => {
                if weight {
                    s.def("WEIGHT");
                }
            }
            Norm::RmsNormQ8 => {
                s.def("WEIGHT");
                s.def("Q8");
            }
            Norm::AddRmsNorm => {
                s.def("WEIGHT");
                s.def("ADD");
            }
            Norm::RmsNormResidual => {
                s.def("WEIGHT");
                s.def("RESIDUAL");
            }
        }
        s.include(&[shared::REDUCE, shared::EXACT, SOURCE]);
    }
}

/// `out = rms_norm(x) · w`: a workgroup per row; with `q8` (a weight
/// required) the next matmul's Q8 rounding of `out` too, a row in parts of
/// `WG_ROW` words.
pub fn rms_norm(
    x: Tensor,
    w: Option<Tensor>,
    eps: f32,
    out: Tensor,
    q8: Option<[Tensor; 3]>,
) -> Dispatch {
    let parts = (x.cols / 4).div_ceil(WG_ROW as usize).max(1);
    let params = Params {
        rows: x.rows as u32,
        cols: x.cols as u32,
        eps,
        parts: if w.is_some() { parts as u32 } else { 0 },
        zero: 0,
    };
    match (w, q8) {
        (None, _) => Dispatch::new(
            Norm::RmsNorm { weight: false },
            params,
            &[("x", x), ("out", out)],
            x.rows as u64,
        ),
        (Some(w), None) => Dispatch::new(
            Norm::RmsNorm { weight: true },
            params,
            &[("x", x), ("out", out), ("w", w)],
            x.rows as u64,
        ),
        (Some(w), Some([xq, xd, xs])) => Dispatch::new(
            Norm::RmsNormQ8,
            params,
            &[
                ("x", x),
                ("out", out),
                ("w", w),
                ("xq", xq),
                ("xd", xd),
                ("xs", xs),
            ],
            (x.rows * parts) as u64,
        ),
    }
}

/// `out = res + rms_norm(x) · w`, a workgroup per row; `out` may be `res`.
pub fn rms_norm_residual(x: Tensor, w: Tensor, eps: f32, res: Tensor, out: Tensor) -> Dispatch {
    let params = Params {
        rows: x.rows as u32,
        cols: x.cols as u32,
        eps,
        parts: 1,
        zero: 0,
    };
    let bound = [("x", x), ("out", out), ("w", w), ("res", res)];
    Dispatch::new(Norm::RmsNormResidual, params, &bound, x.rows as u64)
}

/// `sum = a + b`, then `rms_norm(sum, w, eps, out)`, joined on the tape
/// (`Step::AddNorm`); with `split`, b is a split matmul's first half.
#[derive(Clone, Copy)]
pub struct AddNorm {
    pub a: Tensor,
    pub b: Tensor,
    pub sum: Tensor,
    pub w: Tensor,
    pub eps: f32,
    pub out: Tensor,
    pub split: Option<Split>,
}

impl AddNorm {
    /// Its dispatch, with `half` (the next matmul's f16 blocks) written
    /// too (`AddRmsNormHalf`), which then takes a split's sums in; without
    /// it, after the split's own adds (`Step::lower`).
    pub fn call(self, half: Option<Tensor>) -> Dispatch {
        let out = self.out;
        let (rows, cols) = (out.rows as u32, out.cols as u32);
        let bound = [
            ("x", self.a),
            ("out", out),
            ("w", self.w),
            ("addend", self.b),
            ("sum", self.sum),
        ];
        let Some(half) = half else {
            let params = Params {
                rows,
                cols,
                eps: self.eps,
                parts: 0,
                zero: 0,
            };
            return Dispatch::new(Norm::AddRmsNorm, params, &bound, out.rows as u64);
        };
        let params = norm_half::Params {
            rows,
            cols,
            eps: self.eps,
            keep: self.split.map_or(0, |s| u32::from(s.keep)),
        };
        let mut bound = bound.to_vec();
        bound.push(("halves", half));
        bound.extend(self.split.map(|s| ("sums", s.sums)));
        let kernel = norm_half::AddRmsNormHalf {
            sums: self.split.is_some(),
        };
        Dispatch::new(kernel, params, &bound, out.rows as u64)
    }
}
