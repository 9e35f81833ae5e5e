//! Mixture-of-experts routing and combining (`moe.wgsl`): the top k
//! experts of each token and their weights (`TopK`, a workgroup per
//! token), and the weighted sum of the experts' outputs (`Sum`). The
//! experts' matmuls between them are `matmul_id`.

use crate::backend::{MoeGating, MoeParams, Tensor};

use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, WG_ROW, r, rw, shared};

const SOURCE: &str = include_str!("moe.wgsl");

/// Experts a router may have: a token's probabilities sit in workgroup
/// memory (2 KiB).
pub const MAX_EXPERTS: usize = 512;
/// Experts a token may use: its weights sit in registers.
pub const MAX_USED: usize = 64;

/// Workgroup size of the routing: one token's experts across it.
const WG_TOPK: u32 = 64;

kernel_params! {
    /// moe.wgsl's parameters.
    pub struct Params {
        /// Tokens.
        pub rows: u32,
        /// TopK: experts; Sum: values per row.
        pub cols: u32,
        /// Experts per token.
        pub k_used: u32,
        /// TopK: 1 to divide the chosen weights by their sum.
        pub normalize: u32,
        /// 0: exact.wgsl's `opaque` reads it.
        pub zero: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoeKernel {
    /// The top k experts of each token, gated as `MoeGating` says.
    TopK(MoeGating),
    /// The experts' outputs summed by their weights.
    Sum,
}

impl Family for MoeKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![
            MoeKernel::TopK(MoeGating::Softmax),
            MoeKernel::TopK(MoeGating::SoftmaxWeight),
            MoeKernel::Sum,
        ]
    }

    fn bindings(self) -> &'static [Binding] {
        match self {
            MoeKernel::TopK(_) => &const { [r("logits"), rw("ids"), rw("weights"), r("tab")] },
            MoeKernel::Sum => &const { [r("experts"), r("weights"), rw("out")] },
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        match self {
            MoeKernel::TopK(gating) => {
                s.def("TOPK");
                if gating == MoeGating::Softmax {
                    s.def("SOFTMAX");
                }
                s.set("MAX_EXPERTS", MAX_EXPERTS);
                s.set("MAX_USED", MAX_USED);
                s.wg = WG_TOPK;
                s.tables(self.bindings());
                s.include(&[shared::REDUCE, shared::EXACT, SOURCE]);
            }
            MoeKernel::Sum => {
                s.def("SUM");
                s.include(&[shared::EXACT, SOURCE]);
            }
        }
    }
}

/// Each row of router `logits`' `p.k` best experts into `ids` and their
/// weights into `weights`.
pub fn topk(logits: Tensor, p: &MoeParams, ids: Tensor, weights: Tensor, aux: Aux) -> Dispatch {
    let params = Params {
        rows: logits.rows as u32,
        cols: logits.cols as u32,
        k_used: p.k as u32,
        normalize: p.normalize as u32,
        zero: 0,
    };
    let bound = [
        ("logits", logits),
        ("ids", ids),
        ("weights", weights),
        ("tab", aux.tables),
    ];
    Dispatch::new(
        MoeKernel::TopK(p.gating),
        params,
        &bound,
        logits.rows as u64,
    )
}

/// `out[t] = Σ_j weights[t, j] · experts[t·K + j]`.
pub fn sum(experts: Tensor, weights: Tensor, out: Tensor) -> Dispatch {
    let n = out.n_elements();
    let params = Params {
        rows: out.rows as u32,
        cols: out.cols as u32,
        k_used: weights.cols as u32,
        normalize: 0,
        zero: 0,
    };
    let bound = [("experts", experts), ("weights", weights), ("out", out)];
    let groups = n.div_ceil(WG_ROW as usize) as u64;
    Dispatch::new(MoeKernel::Sum, params, &bound, groups)
}
