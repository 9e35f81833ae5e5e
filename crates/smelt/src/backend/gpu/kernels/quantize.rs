//! Activations rounded as ggml's matmuls round them (`quantize.wgsl`): Q8
//! blocks of 32 for the legacy quants, Q8_K blocks of 256 for the
//! K-quants, f16 for F16 weights.

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, WG_ROW, rw, shared};

const SOURCE: &str = include_str!("quantize.wgsl");

kernel_params! {
    /// quantize.wgsl's parameters.
    pub struct Params {
        /// Values: a whole number of blocks for Q8 and Q8_K.
        pub n: u32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

/// How a matmul's activations are rounded first, as ggml's `vec_dot_type`
/// of the weight type does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// Q8_0 / Q8_1 blocks of 32 (legacy quants), kept as packed quants
    /// with their scales and sums.
    Q8,
    /// Q8_K blocks of 256 (K-quants).
    Q8K,
    /// F16 (F16 weights).
    F16,
}

impl ActQuant {
    /// ggml's activation type for a weight type; `None` for F32.
    pub fn for_weight(t: GgmlType) -> Option<Self> {
        use GgmlType::*;
        match t {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 => Some(Self::Q8),
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => Some(Self::Q8K),
            F16 => Some(Self::F16),
            _ => None,
        }
    }

    /// Values per block.
    pub fn block(self) -> usize {
        match self {
            Self::Q8 => 32,
            Self::Q8K => 256,
            Self::F16 => 1,
        }
    }
}

/// The rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantizeActs(pub ActQuant);

impl Family for QuantizeActs {
    type Params = Params;

    fn all() -> Vec<Self> {
        [ActQuant::Q8, ActQuant::Q8K, ActQuant::F16]
            .into_iter()
            .map(QuantizeActs)
            .collect()
    }

    fn bindings(self) -> &'static [Binding] {
        match self.0 {
            ActQuant::Q8 => &const { [rw("x"), rw("xq"), rw("xd"), rw("xs")] },
            ActQuant::Q8K | ActQuant::F16 => &const { [rw("x"), rw("xq")] },
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        s.def(match self.0 {
            ActQuant::Q8 => "Q8",
            ActQuant::Q8K => "Q8_K",
            ActQuant::F16 => "F16",
        });
        s.include(&[shared::EXACT, SOURCE]);
    }
}

/// `x` rounded into Q8 blocks (quants, scales, sums): one invocation per
/// word of 4 values.
pub fn q8(x: Tensor, [xq, xd, xs]: [Tensor; 3]) -> Dispatch {
    let n = x.n_elements();
    let bound = [("x", x), ("xq", xq), ("xd", xd), ("xs", xs)];
    let groups = (n / 4).div_ceil(WG_ROW as usize) as u64;
    Dispatch::new(
        QuantizeActs(ActQuant::Q8),
        Params {
            n: n as u32,
            zero: 0,
        },
        &bound,
        groups,
    )
}

/// `x` rounded (Q8_K: one invocation per block of 256; F16: per value)
/// into `vals`, as f32.
pub fn values(q: ActQuant, x: Tensor, vals: Tensor) -> Dispatch {
    let n = x.n_elements();
    let groups = match q {
        ActQuant::Q8K => (n / 256).div_ceil(64),
        _ => n.div_ceil(WG_ROW as usize),
    };
    let bound = [("x", x), ("xq", vals)];
    Dispatch::new(
        QuantizeActs(q),
        Params {
            n: n as u32,
            zero: 0,
        },
        &bound,
        groups as u64,
    )
}
