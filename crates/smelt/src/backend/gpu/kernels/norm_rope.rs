//! A head norm and the rope after it in one dispatch (`norm_rope.wgsl`):
//! the per-head Q and K RMSNorm of Qwen 3 and Gemma 3, f32 mode; Q's and
//! K's in one (`pair`).

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
        /// PAIR: head rows of the second tensor.
        pub rows2: u32,
        /// PAIR: its heads per token.
        pub heads2: u32,
        /// The first tensor's outputs times this.
        pub scale: f32,
        /// PAIR: the second's.
        pub scale2: f32,
    }
}

/// The rope's pairing, and whether a second tensor (K) comes along.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NormRope {
    pub mode: RopeMode,
    pub pair: bool,
}

impl Family for NormRope {
    type Params = Params;

    fn all() -> Vec<Self> {
        let modes = [RopeMode::Normal, RopeMode::Neox];
        let kernels = modes.map(|mode| [false, true].map(|pair| NormRope { mode, pair }));
        kernels.into_iter().flatten().collect()
    }

    fn bindings(self) -> &'static [Binding] {
        // exact.wgsl's tables last.
        if self.pair {
            &const {
                [
                    rw("x"),
                    rw("w"),
                    rw("pos"),
                    rw("ff"),
                    rw("out"),
                    rw("x2"),
                    rw("w2"),
                    rw("out2"),
                    r("tab"),
                ]
            }
        } else {
            &const { [rw("x"), rw("w"), rw("pos"), rw("ff"), rw("out"), r("tab")] }
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        if self.mode == RopeMode::Neox {
            s.def("NEOX");
        }
        if self.pair {
            s.def("PAIR");
        }
        s.tables(self.bindings());
        s.wg = WG;
        s.include(&[
            shared::REDUCE,
            shared::EXACT,
            shared::ROTATE,
            shared::PAIR_IO,
            SOURCE,
        ]);
    }
}

/// One head norm and rope: the head rows of `x` (`tokens · heads` rows of
/// the head size), the norm's weight and eps, the output (`x`'s shape; it
/// may be `x`) and a factor its values are scaled by last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadNorm {
    pub x: Tensor,
    pub w: Tensor,
    pub eps: f32,
    pub out: Tensor,
    pub scale: f32,
}

/// `out = rope(rms_norm(x) · w)` of `n`'s head rows (`p.n_heads` a token)
/// at the tokens' positions `pos`; with `pair`, a second tensor's too (its
/// own heads a token, the same eps, head size and rope).
pub fn dispatch(
    n: HeadNorm,
    (pos, p): (Tensor, &RopeParams),
    pair: Option<(HeadNorm, usize)>,
    aux: Aux,
) -> Dispatch {
    let HeadNorm {
        x,
        w,
        eps,
        out,
        scale,
    } = n;
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
        rows2: pair.map_or(0, |(k, _)| k.x.rows as u32),
        heads2: pair.map_or(0, |(_, heads)| heads as u32),
        scale,
        scale2: pair.map_or(1.0, |(k, _)| k.scale),
    };
    let one = [
        ("x", x),
        ("w", w),
        ("pos", pos),
        ("ff", p.freq_factors.unwrap_or(aux.dummy)),
        ("out", out),
        ("tab", aux.tables),
    ];
    let kernel = NormRope {
        mode: p.mode,
        pair: pair.is_some(),
    };
    match pair {
        None => Dispatch::new(kernel, params, &one, x.rows as u64),
        Some((k, _)) => {
            let two = [("x2", k.x), ("w2", k.w), ("out2", k.out)];
            let groups = (x.rows + k.x.rows) as u64;
            Dispatch::new(kernel, params, &[&one[..], &two[..]].concat(), groups)
        }
    }
}
