//! Causal grouped-query attention over the KV cache, flash style
//! (`attention.wgsl`): a workgroup per (row, head) for decode, fused with
//! the next matmul's Q8 rounding and with the ropes and cache writes
//! before it; an invocation (or four) per (head, row) for prefill.

use crate::backend::cpu::kv_blocks;
use crate::backend::{AttentionParams, RopeParams, Tensor};
use crate::quant::GgmlType::{self, F16, F32, Q4_0, Q8_0};

use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, r, rw, shared};

/// The bindings and helpers of both kernels.
const SOURCE: &str = include_str!("attention.wgsl");
const DECODE: &str = include_str!("attention_decode.wgsl");
const ROWS: &str = include_str!("attention_rows.wgsl");
/// The readers of a block cache and its rotation.
const BLOCKS: &str = include_str!("attention_blocks.wgsl");
/// The merge of a split decode attention's parts.
const MERGE: &str = include_str!("attention_merge.wgsl");
/// Which cache rows a query row sees, and the parameters: shared with
/// `attention_coop`.
pub const KEYS: &str = include_str!("attention_keys.wgsl");

kernel_params! {
    /// The parameters of attention.wgsl and attention_coop.wgsl, declared
    /// in attention_keys.wgsl.
    pub struct Params {
        /// Query rows.
        pub n: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        /// Positions per sequence slot.
        pub ctx: u32,
        /// Sliding window (0: none).
        pub window: u32,
        /// Over softcap when there is one (ggml folds 1 / cap into it).
        pub scale: f32,
        /// 0: none.
        pub softcap: f32,
        /// Rows of the caches.
        pub cache_rows: u32,
        /// ROPE: rope.wgsl's n_dims, theta_scale, freq_scale, factored.
        pub n_dims: u32,
        pub theta_scale: f32,
        pub freq_scale: f32,
        pub factored: u32,
        /// ROPE: what it writes besides the output, `ROUND_Q8 | KEEP_K |
        /// KEEP_Q`.
        pub rope_writes: u32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
        /// A block cache's rotation group (`kv_blocks::rotation`).
        pub rot: u32,
        /// Prefill: the first query row the dispatch takes (the rows
        /// before it are decode rows, another dispatch's).
        pub row0: u32,
    }
}

impl Params {
    /// Attention of `n` query rows by `p` over caches of `cache_rows` rows.
    pub fn new(n: usize, p: &AttentionParams, cache_rows: usize) -> Params {
        Params {
            n: n as u32,
            n_heads: p.n_heads as u32,
            n_kv_heads: p.n_kv_heads as u32,
            head_dim: p.head_dim as u32,
            ctx: p.ctx as u32,
            window: p.window.unwrap_or(0) as u32,
            scale: p.softcap.map_or(p.scale, |cap| p.scale / cap),
            softcap: p.softcap.unwrap_or(0.0),
            cache_rows: cache_rows as u32,
            rot: kv_blocks::rotation(p.n_kv_heads * p.head_dim) as u32,
            ..Params::default()
        }
    }
}

/// Decode attention's workgroup size: 128 ran decode faster than 64, 256
/// no faster.
const WG_DECODE: u32 = 128;

/// The cache type (F32, F16, or Q8_0 and Q4_0 blocks, not joined with
/// the rope), and for prefill the head size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionKernel {
    /// A workgroup per (row, head), keys spread over the workgroup
    /// (decode).
    Attention(GgmlType),
    /// Decode attention that also rounds its output to Q8 blocks for the
    /// matmul after it (`fuse::round_q8`).
    AttentionQ8(GgmlType),
    /// Decode attention of one row (f32 mode) that first ropes its Q and K
    /// heads and writes K's and V's cache rows (`RopeStore` joined), then
    /// takes the new key from workgroup memory; `rope_writes` says whether
    /// it rounds its output to Q8 too, and whether it writes K and Q
    /// rotated.
    AttentionRope(GgmlType),
    /// Decode attention split over the keys (f32 mode, F32 or F16 cache):
    /// a workgroup per (row, head, part), each writing its part's running
    /// max, sum and unnormalised output to `parts` for `AttentionMerge`;
    /// with `rope`, the ropes and cache writes joined as `AttentionRope`.
    AttentionParts {
        kv: GgmlType,
        rope: bool,
        parts: u32,
    },
    /// The parts' outputs rescaled to their common max and summed: the
    /// attention's output, with `q8` also rounded to Q8 blocks.
    AttentionMerge { q8: bool, parts: u32 },
    /// One invocation per (head, row) (prefill).
    AttentionRows { kv: GgmlType, head_dim: u32 },
    /// Four invocations per (head, row), each a quarter of the head, for a
    /// head size that is a multiple of 16 (prefill, f32 mode, subgroups).
    AttentionQuads { kv: GgmlType, head_dim: u32 },
}

/// The part counts a split decode attention is built for.
pub const PARTS: [u32; 3] = [2, 4, 8];

impl AttentionKernel {
    fn kv(self) -> GgmlType {
        match self {
            AttentionKernel::Attention(kv)
            | AttentionKernel::AttentionQ8(kv)
            | AttentionKernel::AttentionRope(kv)
            | AttentionKernel::AttentionParts { kv, .. }
            | AttentionKernel::AttentionRows { kv, .. }
            | AttentionKernel::AttentionQuads { kv, .. } => kv,
            AttentionKernel::AttentionMerge { .. } => F32,
        }
    }
}

impl Family for AttentionKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        use AttentionKernel::*;
        let mut v = Vec::new();
        for kv in [F32, F16] {
            v.push(AttentionRope(kv));
        }
        for kv in [F32, F16, Q8_0, Q4_0] {
            v.extend([Attention(kv), AttentionQ8(kv)]);
        }
        for parts in PARTS {
            for kv in [F32, F16] {
                for rope in [false, true] {
                    v.push(AttentionParts { kv, rope, parts });
                }
            }
            v.extend([false, true].map(|q8| AttentionMerge { q8, parts }));
        }
        for kv in [F32, F16, Q8_0, Q4_0] {
            for head_dim in [64, 128, 256] {
                v.push(AttentionRows { kv, head_dim });
                v.push(AttentionQuads { kv, head_dim });
            }
        }
        v
    }

    fn builds_with(self, f: ShaderFeatures) -> bool {
        match self {
            // Its quad sums in registers: plain f32 arithmetic.
            AttentionKernel::AttentionQuads { .. } => f.fast_math && f.subgroups,
            AttentionKernel::AttentionRope(_) | AttentionKernel::AttentionParts { .. } => {
                f.fast_math
            }
            _ => true,
        }
    }

    fn bindings(self) -> &'static [Binding] {
        const ONE: [Binding; 6] = [rw("q"), r("kc"), r("vc"), rw("pos"), rw("seq"), rw("out")];
        const Q8: [Binding; 3] = [rw("xq"), rw("xd"), rw("xs")];
        // The caches written too, then Q rotated, K, K rotated, V, the
        // frequency factors and the new row's cache row.
        const ROPE: [Binding; 16] = [
            rw("q"),
            rw("kc"),
            rw("vc"),
            ONE[3],
            ONE[4],
            ONE[5],
            Q8[0],
            Q8[1],
            Q8[2],
            rw("qo"),
            rw("xk"),
            rw("ko"),
            rw("xv"),
            rw("ff"),
            rw("ids"),
            r("tab"),
        ];
        // A split's parts where the output was.
        const fn parts<const N: usize>(mut b: [Binding; N]) -> [Binding; N] {
            b[5] = rw("parts");
            b
        }
        // exact.wgsl's tables last.
        match self {
            AttentionKernel::AttentionQ8(_) => {
                &const {
                    [
                        ONE[0],
                        ONE[1],
                        ONE[2],
                        ONE[3],
                        ONE[4],
                        ONE[5],
                        Q8[0],
                        Q8[1],
                        Q8[2],
                        r("tab"),
                    ]
                }
            }
            AttentionKernel::AttentionRope(_) => &ROPE,
            // Its Q8 bindings left unread, so that the rope's keep their
            // numbers.
            AttentionKernel::AttentionParts { rope: true, .. } => &const { parts(ROPE) },
            AttentionKernel::AttentionParts { rope: false, .. } => {
                &const { parts([ONE[0], ONE[1], ONE[2], ONE[3], ONE[4], ONE[5], r("tab")]) }
            }
            AttentionKernel::AttentionMerge { q8: true, .. } => {
                &const { [r("parts"), ONE[5], Q8[0], Q8[1], Q8[2], r("tab")] }
            }
            AttentionKernel::AttentionMerge { q8: false, .. } => {
                &const { [r("parts"), ONE[5], r("tab")] }
            }
            _ => &const { [ONE[0], ONE[1], ONE[2], ONE[3], ONE[4], ONE[5], r("tab")] },
        }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        if let AttentionKernel::AttentionMerge { q8, parts } = self {
            s.def("MERGE");
            if q8 {
                s.def("Q8");
            }
            s.set("PARTS", parts);
            s.wg = WG_DECODE;
            s.tables(self.bindings());
            s.include(&[shared::EXACT, KEYS, MERGE]);
            return;
        }
        let rope = matches!(
            self,
            AttentionKernel::AttentionRope(_) | AttentionKernel::AttentionParts { rope: true, .. }
        );
        // Caches read as vec2<f16> (the rope-joined attention writes them
        // as u32 words, as rope.wgsl does).
        if f.shader_f16 && !rope {
            s.def("KV_HALF");
        }
        s.set("KV", if f.shader_f16 { "vec2<f16>" } else { "u32" });
        match self.kv() {
            F16 => s.def("KV_F16"),
            Q8_0 => s.def("KV_Q8_0"),
            Q4_0 => s.def("KV_Q4_0"),
            _ => {}
        }
        let blocks = matches!(self.kv(), Q8_0 | Q4_0);
        if blocks {
            s.def("KV_BLOCKS");
            s.include(&[BLOCKS]);
        }
        match self {
            AttentionKernel::AttentionRows { head_dim, .. }
            | AttentionKernel::AttentionQuads { head_dim, .. } => {
                if matches!(self, AttentionKernel::AttentionQuads { .. }) {
                    s.def("QUADS");
                }
                s.set("HD", head_dim);
                s.tables(self.bindings());
                s.include(&[shared::EXACT, KEYS, SOURCE, ROWS]);
            }
            _ => {
                if let AttentionKernel::AttentionParts { parts, .. } = self {
                    s.def("SPLIT");
                    s.set("PARTS", parts);
                } else if !matches!(self, AttentionKernel::Attention(_)) {
                    s.def("Q8");
                }
                if rope || matches!(self, AttentionKernel::AttentionQ8(_)) {
                    s.def("Q8_BOUND");
                }
                if rope {
                    s.def("ROPE");
                }
                s.wg = WG_DECODE;
                s.tables(self.bindings());
                s.include(&[shared::REDUCE, shared::EXACT]);
                if rope {
                    s.include(&[shared::ROTATE]);
                }
                s.include(&[KEYS, SOURCE, DECODE]);
            }
        }
    }
}

/// An attention's tensors: q, the caches, positions, slots, out.
pub type Operands = [Tensor; 6];

fn named([q, kc, vc, pos, seq, out]: Operands) -> [(&'static str, Tensor); 6] {
    [
        ("q", q),
        ("kc", kc),
        ("vc", vc),
        ("pos", pos),
        ("seq", seq),
        ("out", out),
    ]
}

/// Prefill attention on `kernel` (`AttentionRows` or `AttentionQuads`) or
/// decode attention (`Attention`) over `groups` workgroups.
pub fn dispatch(
    kernel: AttentionKernel,
    t: Operands,
    params: Params,
    groups: u64,
    aux: Aux,
) -> Dispatch {
    let bound = [&named(t)[..], &[("tab", aux.tables)][..]].concat();
    Dispatch::new(kernel, params, &bound, groups)
}

/// Decode attention with the Q8 rounding (quants, scales, sums) of its
/// output for the matmul after it (`AttentionQ8`).
pub fn with_q8(
    t: Operands,
    params: Params,
    groups: u64,
    [xq, xd, xs]: [Tensor; 3],
    aux: Aux,
) -> Dispatch {
    let kernel = AttentionKernel::AttentionQ8(t[1].dtype);
    let q8 = [("xq", xq), ("xd", xd), ("xs", xs), ("tab", aux.tables)];
    Dispatch::new(kernel, params, &[&named(t)[..], &q8[..]].concat(), groups)
}

/// `Params::rope_writes`: the output rounded to Q8 too.
pub const ROUND_Q8: u32 = 1;
/// `Params::rope_writes`: K rotated written to `ko`.
pub const KEEP_K: u32 = 2;
/// `Params::rope_writes`: Q rotated written to `qo`.
pub const KEEP_Q: u32 = 4;

/// What a decode attention takes over from the `RopeStore` before it: Q
/// before its rope (the attention's q is the rotated one, written only if
/// `keep_q`: something reads it after), K and K rotated (None where
/// nothing reads it: left unwritten), V, the cache rows and the rope.
#[derive(Clone, Copy)]
pub struct RopeJoin {
    pub x: Tensor,
    pub keep_q: bool,
    pub k: (Tensor, Option<Tensor>),
    pub v: Tensor,
    pub ids: Tensor,
    pub p: RopeParams,
}

/// Decode attention (`t`, with its parameters and workgroups) of one row
/// with the ropes and cache writes before it, and with `q8` the Q8
/// rounding of its output (`AttentionRope`).
pub fn with_rope(
    (t, params, groups): (Operands, Params, u64),
    r: RopeJoin,
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> Dispatch {
    let (params, bound) = rope_bound(t, params, r, q8, aux);
    Dispatch::new(
        AttentionKernel::AttentionRope(t[1].dtype),
        params,
        &bound,
        groups,
    )
}

/// `AttentionRope`'s parameters and tensors.
fn rope_bound(
    t: Operands,
    params: Params,
    r: RopeJoin,
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> (Params, [(&'static str, Tensor); 16]) {
    let [q, kc, vc, pos, seq, out] = t;
    let params = Params {
        n_dims: r.p.n_dims as u32,
        theta_scale: r.p.freq_base.powf(-2.0 / r.p.n_dims as f32),
        freq_scale: r.p.freq_scale,
        factored: u32::from(r.p.freq_factors.is_some()),
        rope_writes: u32::from(q8.is_some()) * ROUND_Q8
            + u32::from(r.k.1.is_some()) * KEEP_K
            + u32::from(r.keep_q) * KEEP_Q,
        ..params
    };
    let [xq, xd, xs] = q8.unwrap_or([aux.dummy; 3]);
    let ff = r.p.freq_factors.unwrap_or(aux.dummy);
    let bound = [
        ("q", r.x),
        ("kc", kc),
        ("vc", vc),
        ("pos", pos),
        ("seq", seq),
        ("out", out),
        ("xq", xq),
        ("xd", xd),
        ("xs", xs),
        ("qo", q),
        ("xk", r.k.0),
        ("ko", r.k.1.unwrap_or(aux.dummy)),
        ("xv", r.v),
        ("ff", ff),
        ("ids", r.ids),
        ("tab", aux.tables),
    ];
    (params, bound)
}

/// A decode attention split over its keys: `n` parts a (row, head), whose
/// running maxima, sums and unnormalised outputs go to `buffer`, `n ×
/// (head_dim + 2)` values a (row, head).
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    pub n: u32,
    pub buffer: Tensor,
}

/// The parts a decode attention of `workgroups` (rows × heads) over at
/// most `keys` keys a row is split into: enough that about 128 workgroups
/// share the keys (a GPU's multiprocessors each get one), each part two
/// chunks of the workgroup's keys or more (the merge is a dispatch of its
/// own); 1 (not split) from 64 workgroups, or under 4 chunks.
pub fn parts_for(workgroups: usize, keys: usize) -> u32 {
    if workgroups >= 64 {
        return 1;
    }
    let chunks = keys.div_ceil(WG_DECODE as usize);
    let want = 128usize.div_ceil(workgroups.max(1)).min(chunks / 2);
    PARTS
        .into_iter()
        .rev()
        .find(|&p| p as usize <= want)
        .unwrap_or(1)
}

/// The split decode attention's two dispatches (`t`, with its parameters
/// and the workgroups of its rows and heads): the parts, with the ropes
/// and cache writes before them joined where `rope` is
/// (`AttentionParts`), then their merge into the output, with `q8` its
/// Q8 rounding too (`AttentionMerge`).
pub fn split(
    (t, params, groups): (Operands, Params, u64),
    parts: Parts,
    rope: Option<RopeJoin>,
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> [Dispatch; 2] {
    let kernel = AttentionKernel::AttentionParts {
        kv: t[1].dtype,
        rope: rope.is_some(),
        parts: parts.n,
    };
    let rename = |(name, t): (&'static str, Tensor)| match name {
        "out" => ("parts", parts.buffer),
        _ => (name, t),
    };
    let split_groups = groups * u64::from(parts.n);
    let first = match rope {
        Some(r) => {
            let (params, bound) = rope_bound(t, params, r, None, aux);
            Dispatch::new(kernel, params, &bound.map(rename), split_groups)
        }
        None => {
            let bound = [&named(t).map(rename)[..], &[("tab", aux.tables)][..]].concat();
            Dispatch::new(kernel, params, &bound, split_groups)
        }
    };
    let merge = AttentionKernel::AttentionMerge {
        q8: q8.is_some(),
        parts: parts.n,
    };
    let mut bound = vec![("parts", parts.buffer), ("out", t[5])];
    if let Some([xq, xd, xs]) = q8 {
        bound.extend([("xq", xq), ("xd", xd), ("xs", xs)]);
    }
    bound.push(("tab", aux.tables));
    [first, Dispatch::new(merge, params, &bound, groups)]
}
