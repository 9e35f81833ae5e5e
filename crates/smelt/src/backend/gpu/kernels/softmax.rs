//! softmax and argmax of each row (`softmax.wgsl`): a workgroup per row.

use crate::backend::Tensor;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, rw, shared};

const SOURCE: &str = include_str!("softmax.wgsl");

kernel_params! {
    /// softmax.wgsl's parameters.
    pub struct Params {
        pub rows: u32,
        pub cols: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxKernel {
    Softmax,
    Argmax,
}

impl Family for SoftmaxKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![SoftmaxKernel::Softmax, SoftmaxKernel::Argmax]
    }

    fn bindings(self) -> &'static [Binding] {
        &const { [rw("x"), rw("out")] }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        if self == SoftmaxKernel::Argmax {
            s.def("ARGMAX");
        }
        s.include(&[shared::REDUCE, SOURCE]);
    }
}

/// The softmax (or the index of the largest value) of each row of `x`.
pub fn dispatch(kernel: SoftmaxKernel, x: Tensor, out: Tensor) -> Dispatch {
    let params = Params {
        rows: x.rows as u32,
        cols: x.cols as u32,
    };
    Dispatch::new(kernel, params, &[("x", x), ("out", out)], x.rows as u64)
}
