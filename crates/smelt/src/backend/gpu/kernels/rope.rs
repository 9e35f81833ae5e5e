//! RoPE (`rope.wgsl`): a rope, two at the same positions (Q and K) in one
//! dispatch, and those with K's and V's KV-cache writes.

use crate::backend::{RopeMode, RopeParams, Tensor};
use crate::quant::GgmlType::{self, F16, F32};

use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, r, rw, shared};

const SOURCE: &str = include_str!("rope.wgsl");

kernel_params! {
    /// rope.wgsl's parameters.
    pub struct Params {
        pub rows: u32,
        pub n_heads: u32,
        pub head_dim: u32,
        pub n_dims: u32,
        /// base^(-2 / n_dims), as ggml takes it with powf.
        pub theta_scale: f32,
        pub freq_scale: f32,
        /// 1: `ff` holds frequency factors.
        pub factored: u32,
        /// PAIR: heads of the second tensor.
        pub heads2: u32,
        /// STORE: rows of the caches.
        pub cache_rows: u32,
        /// STORE: values of a V row (0: no V).
        pub v_cols: u32,
        /// The cosines and sines times this (LongRoPE's magnitude).
        pub attn_factor: f32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

/// Heads an invocation turns: the angle taken once for them, their loads
/// in flight together.
pub const ROPE_HEADS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeKernel {
    Rope(RopeMode),
    /// Two ropes at the same positions (Q and K) in one dispatch.
    RopePair(RopeMode),
    /// Q's and K's ropes (normal mode) with K's and V's cache writes (the
    /// cache type, F32 or F16) in one dispatch.
    RopeStore(GgmlType),
}

impl Family for RopeKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        use RopeMode::{Neox, Normal};
        vec![
            RopeKernel::Rope(Normal),
            RopeKernel::Rope(Neox),
            RopeKernel::RopePair(Normal),
            RopeKernel::RopePair(Neox),
            RopeKernel::RopeStore(F32),
            RopeKernel::RopeStore(F16),
        ]
    }

    fn bindings(self) -> &'static [Binding] {
        // exact.wgsl's tables last.
        match self {
            RopeKernel::Rope(_) => &const { [rw("x"), rw("pos"), rw("out"), rw("ff"), r("tab")] },
            RopeKernel::RopePair(_) => {
                &const {
                    [
                        rw("x"),
                        rw("pos"),
                        rw("out"),
                        rw("ff"),
                        rw("x2"),
                        rw("out2"),
                        r("tab"),
                    ]
                }
            }
            RopeKernel::RopeStore(_) => {
                &const {
                    [
                        rw("x"),
                        rw("pos"),
                        rw("out"),
                        rw("ff"),
                        rw("x2"),
                        rw("out2"),
                        rw("ids"),
                        rw("kc"),
                        rw("v"),
                        rw("vc"),
                        r("tab"),
                    ]
                }
            }
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        match self {
            RopeKernel::Rope(mode) | RopeKernel::RopePair(mode) => {
                if mode == RopeMode::Neox {
                    s.def("NEOX");
                }
                if matches!(self, RopeKernel::RopePair(_)) {
                    s.def("PAIR");
                }
            }
            RopeKernel::RopeStore(cache) => {
                s.def("PAIR");
                s.def("STORE");
                if cache == F16 {
                    s.def("CACHE_F16");
                }
            }
        }
        s.tables(self.bindings());
        s.set("HEADS", ROPE_HEADS);
        s.include(&[shared::EXACT, shared::ROTATE, shared::PAIR_IO, SOURCE]);
    }
}

/// The parameters of a rope of `rows` rows by `p`, and of a second
/// tensor's `heads2` heads.
fn params(rows: usize, p: &RopeParams, heads2: usize) -> Params {
    Params {
        rows: rows as u32,
        n_heads: p.n_heads as u32,
        head_dim: p.head_dim as u32,
        n_dims: p.n_dims as u32,
        // ggml's theta_scale, with the CPU's powf.
        theta_scale: p.freq_base.powf(-2.0 / p.n_dims as f32),
        freq_scale: p.freq_scale,
        factored: u32::from(p.freq_factors.is_some()),
        heads2: heads2 as u32,
        attn_factor: p.attn_factor,
        ..Params::default()
    }
}

/// Invocations for `rows` rows of `p.n_heads` heads and of `heads2` (a
/// second tensor's): one per pair position of a row and group of
/// `ROPE_HEADS` heads.
fn invocations(rows: usize, p: &RopeParams, heads2: usize) -> usize {
    let groups = p.n_heads.div_ceil(ROPE_HEADS) + heads2.div_ceil(ROPE_HEADS);
    rows * groups * p.head_dim / 2
}

/// A rope of `x` (and, paired, of `x2` into `out2` with its own heads) at
/// `pos`.
pub fn rope(
    (x, pos, p, out): (Tensor, Tensor, &RopeParams, Tensor),
    pair: Option<(Tensor, usize, Tensor)>,
    aux: Aux,
) -> Dispatch {
    let heads2 = pair.map_or(0, |(_, h, _)| h);
    let params = params(x.rows, p, heads2);
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    let groups = invocations(x.rows, p, heads2).div_ceil(64) as u64;
    let one = [
        ("x", x),
        ("pos", pos),
        ("out", out),
        ("ff", ff),
        ("tab", aux.tables),
    ];
    match pair {
        None => Dispatch::new(RopeKernel::Rope(p.mode), params, &one, groups),
        Some((x2, _, out2)) => {
            let bound = [&one[..], &[("x2", x2), ("out2", out2)][..]].concat();
            Dispatch::new(RopeKernel::RopePair(p.mode), params, &bound, groups)
        }
    }
}

/// Q's and K's ropes (normal mode; K's input, output and heads in `k`),
/// K's rotated rows written to cache rows `ids` of `kc` and, with `v =
/// (v, vc)`, V's rows to `vc` alike: one dispatch (`RopeStore`), two
/// values per invocation.
pub fn rope_store(
    ((x, out), k, pos, p): (
        (Tensor, Tensor),
        (Tensor, Tensor, usize),
        Tensor,
        &RopeParams,
    ),
    (ids, kc): (Tensor, Tensor),
    v: Option<(Tensor, Tensor)>,
    aux: Aux,
) -> Dispatch {
    let (x2, out2, heads2) = k;
    let v_cols = v.map_or(0, |(v, _)| v.cols);
    let params = Params {
        cache_rows: kc.rows as u32,
        v_cols: v_cols as u32,
        ..params(x.rows, p, heads2)
    };
    let pairs = invocations(x.rows, p, heads2) + x.rows * v_cols / 2;
    let (v, vc) = v.unwrap_or((aux.dummy, aux.dummy));
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    let bound = [
        ("x", x),
        ("pos", pos),
        ("out", out),
        ("ff", ff),
        ("x2", x2),
        ("out2", out2),
        ("ids", ids),
        ("kc", kc),
        ("v", v),
        ("vc", vc),
        ("tab", aux.tables),
    ];
    Dispatch::new(
        RopeKernel::RopeStore(kc.dtype),
        params,
        &bound,
        pairs.div_ceil(64) as u64,
    )
}
