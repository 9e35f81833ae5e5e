//! Elementwise ops (`elementwise.wgsl`): add, mul, scale, softcap and the
//! GLUs, and
//! the GLUs fused with what the next matmul reads (its Q8 rounding, or
//! its f16 blocks).

use crate::backend::Tensor;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WG_ROW, rw, shared};

const SOURCE: &str = include_str!("elementwise.wgsl");

kernel_params! {
    /// elementwise.wgsl's parameters.
    pub struct Params {
        /// Elements.
        pub n: u32,
        /// Elements of b (`b[i % b_len]`: a row broadcast over a's rows).
        pub b_len: u32,
        /// SCALE: the factor; SOFTCAP: the cap.
        pub s: f32,
        /// HALF: values per row (a multiple of 32).
        pub cols: u32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

/// The elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    Add,
    Mul,
    Scale,
    /// `cap · tanh(a / cap)`.
    Softcap,
    SiluMul,
    GeluMul,
}

impl Elementwise {
    /// The define of a GLU (SiluMul or GeluMul) in the kernels that fuse
    /// one: SILU_MUL for any but GeluMul.
    pub fn glu_define(self) -> &'static str {
        match self {
            Elementwise::GeluMul => "GELU_MUL",
            _ => "SILU_MUL",
        }
    }
}

/// An op, or a GLU (SiluMul or GeluMul) fused with what the next matmul
/// reads of its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementwiseKernel {
    Elementwise(Elementwise),
    /// A GLU fused with the next matmul's Q8 rounding.
    GluQ8(Elementwise),
    /// A GLU that also writes its output as `HalfBlocks` does, for the
    /// next matmul on cooperative matrices.
    GluHalf(Elementwise),
}

impl Family for ElementwiseKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        use Elementwise::*;
        let mut v: Vec<Self> = [Add, Mul, Scale, Softcap, SiluMul, GeluMul]
            .into_iter()
            .map(ElementwiseKernel::Elementwise)
            .collect();
        for op in [SiluMul, GeluMul] {
            v.push(ElementwiseKernel::GluQ8(op));
            v.push(ElementwiseKernel::GluHalf(op));
        }
        v
    }

    fn bindings(self) -> &'static [Binding] {
        // Every binding read_write: out may be a.
        match self {
            ElementwiseKernel::Elementwise(Elementwise::Scale | Elementwise::Softcap) => {
                &const { [rw("a"), rw("out")] }
            }
            ElementwiseKernel::Elementwise(_) => &const { [rw("a"), rw("out"), rw("b")] },
            ElementwiseKernel::GluQ8(_) => {
                &const { [rw("a"), rw("out"), rw("b"), rw("xq"), rw("xd"), rw("xs")] }
            }
            ElementwiseKernel::GluHalf(_) => &const { [rw("a"), rw("out"), rw("b"), rw("halves")] },
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        match self {
            ElementwiseKernel::Elementwise(op) => {
                s.def(match op {
                    Elementwise::Add => "ADD",
                    Elementwise::Mul => "MUL",
                    Elementwise::Scale => "SCALE",
                    Elementwise::Softcap => "SOFTCAP",
                    Elementwise::SiluMul => "SILU_MUL",
                    Elementwise::GeluMul => "GELU_MUL",
                });
                if matches!(op, Elementwise::Scale | Elementwise::Softcap) {
                    s.def("ONE_INPUT");
                }
            }
            ElementwiseKernel::GluQ8(op) => {
                s.def(op.glu_define());
                s.def("Q8");
            }
            ElementwiseKernel::GluHalf(op) => {
                s.def(op.glu_define());
                s.def("HALF");
            }
        }
        s.include(&[shared::EXACT, SOURCE]);
    }
}

/// `out = op(a, b)` (`b` absent only for Scale and Softcap, whose factor
/// or cap is `s`): one invocation per value.
pub fn dispatch(op: Elementwise, a: Tensor, b: Option<Tensor>, s: f32, out: Tensor) -> Dispatch {
    let n = a.n_elements();
    let params = Params {
        n: n as u32,
        b_len: b.map_or(n, |b| b.n_elements()).max(1) as u32,
        s,
        ..Params::default()
    };
    let groups = n.div_ceil(256) as u64;
    let kernel = ElementwiseKernel::Elementwise(op);
    match b {
        Some(b) => Dispatch::new(kernel, params, &[("a", a), ("out", out), ("b", b)], groups),
        None => Dispatch::new(kernel, params, &[("a", a), ("out", out)], groups),
    }
}

/// `out = op(gate) · up` with its Q8 rounding (quants, scales, sums) for
/// the next matmul: one invocation per word of 4 values.
pub fn glu_q8(
    op: Elementwise,
    (gate, up, out): (Tensor, Tensor, Tensor),
    q8: [Tensor; 3],
) -> Dispatch {
    let n = gate.n_elements();
    let params = Params {
        n: n as u32,
        b_len: n as u32,
        ..Params::default()
    };
    let [xq, xd, xs] = q8;
    let bound = [
        ("a", gate),
        ("out", out),
        ("b", up),
        ("xq", xq),
        ("xd", xd),
        ("xs", xs),
    ];
    let groups = (n / 4).div_ceil(WG_ROW as usize) as u64;
    Dispatch::new(ElementwiseKernel::GluQ8(op), params, &bound, groups)
}

/// `out = op(gate) · up`, also written into `half` as `HalfBlocks` would
/// for the next matmul on cooperative matrices: one invocation per word
/// of 2 values.
pub fn glu_half(
    op: Elementwise,
    (gate, up, out): (Tensor, Tensor, Tensor),
    half: Tensor,
) -> Dispatch {
    let n = out.n_elements();
    let params = Params {
        n: n as u32,
        b_len: n as u32,
        cols: out.cols as u32,
        ..Params::default()
    };
    let bound = [("a", gate), ("out", out), ("b", up), ("halves", half)];
    let groups = n.div_ceil(2 * 256) as u64;
    Dispatch::new(ElementwiseKernel::GluHalf(op), params, &bound, groups)
}
