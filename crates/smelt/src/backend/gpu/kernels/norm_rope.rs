//! A head norm and the rope after it in one dispatch (`norm_rope.wgsl`):
//! the per-head Q and K RMSNorm of Qwen 3 and Gemma 3, f32 mode.

use crate::backend::{RopeMode, RopeParams, Tensor};

use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, r, rw, shared};

const SOURCE: &str = include_str!("norm_rope.wgsl");

/// Its workgroup: 64 invocations, a head of up to 128 pairs in two steps.
const WG: u32 = 64;

kernel_params! {
    /// norm_rope.wgsl's parameters.
    pub struct Params {
        /// Head rows: tokens × heads.
        pub rows: u32,
        /// Heads per token.
        pub heads: u32,
        pub head_dim: u32,
        pub n_dims: u32,
        pub eps: f32,
        /// base^(-2 / n_dims), as ggml takes it with powf.
        pub theta_scale: f32,
        pub freq_scale: f32,
        /// 1: `ff` holds frequency factors.
        pub factored: u32,
        /// The cosines and sines times this (LongRoPE's magnitude).
        pub attn_factor: f32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

/// The rope's pairing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NormRope(pub RopeMode);

impl Family for NormRope {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![NormRope(RopeMode::Normal), NormRope(RopeMode::Neox)]
    }

    fn bindings(self) -> &'static [Binding] {
        // exact.wgsl's tables last.
        &const { [rw("x"), rw("w"), rw("pos"), rw("ff"), rw("out"), r("tab")] }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        if self.0 == RopeMode::Neox {
            s.def("NEOX");
        }
        s.tables(self.bindings());
        s.wg = WG;
        s.include(&[shared::REDUCE, shared::EXACT, shared::ROTATE, SOURCE]);
    }
}

/// `out = rope(rms_norm(x) · w)` of the head rows of `x` (`tokens ·
/// p.n_heads` rows of `p.head_dim`) at the tokens' positions `pos`; `out`
/// is `x`'s shape and may be `x`.
pub fn dispatch(
    (x, w, eps): (Tensor, Tensor, f32),
    (pos, p): (Tensor, &RopeParams),
    out: Tensor,
    aux: Aux,
) -> Dispatch {
    let params = Params {
        rows: x.rows as u32,
        heads: p.n_heads as u32,
        head_dim: p.head_dim as u32,
        n_dims: p.n_dims as u32,
        eps,
        // ggml's theta_scale, with the CPU's powf.
        theta_scale: p.freq_base.powf(-2.0 / p.n_dims as f32),
        freq_scale: p.freq_scale,
        factored: u32::from(p.freq_factors.is_some()),
        attn_factor: p.attn_factor,
        zero: 0,
    };
    let bound = [
        ("x", x),
        ("w", w),
        ("pos", pos),
        ("ff", p.freq_factors.unwrap_or(aux.dummy)),
        ("out", out),
        ("tab", aux.tables),
    ];
    Dispatch::new(NormRope(p.mode), params, &bound, x.rows as u64)
}
