//! Fusion: an op held back (`Pending`) and recorded with the op after it
//! when the two fuse, as one dispatch; anything else first dispatches it as
//! it is (`GpuBackend::run`, writes, reads, syncs).
//!
//! - A norm, GLU or decode attention with the next matmul's Q8 rounding
//!   (`RmsNormQ8`, `GluQ8`, `AttentionQ8`; in `GpuBackend::matmul_input`).
//! - In the f32 mode, a norm taken whole into the repacked decode mat-vecs
//!   of its output (`Backend::matmuls`: `MatVecMulti`, `MatVecGlu` with
//!   `norm`; `GpuBackend::norm_for_matvec`).
//! - A residual add into the repacked decode mat-vec before it
//!   (`MatVecDot` with `residual`), or else into the rms_norm after it
//!   (`AddRmsNorm`), in the f32 mode.
//! - In the f32 mode's prefill, a GLU, a residual add and norm or an
//!   attention on cooperative matrices with the next coop matmul's f16
//!   blocks of its output (`GluHalf`, `AddRmsNormHalf`, `AttentionCoop`
//!   with `half`; in `GpuBackend::half_input`).
//! - In the f32 mode's prefill, gate and up joined on huge tiles with the
//!   GLU after them and its f16 blocks for down (`Multi::Glu`), and a split
//!   matmul's second half's sums with the residual add and norm after it
//!   (`AddRmsNormHalf` with `sums`). After `Backend::discard`, these leave
//!   their intermediate outputs (gate, up; the split's first half)
//!   unwritten.
//! - Q's and K's ropes with K's and V's cache writes (`RopeStore`;
//!   `RopePair`, `SetRowsPair`), and in the f32 mode's decode those with
//!   the attention after them (`AttentionRope`).
//!
//! Each op's dispatch (kernel, parameters, bindings, workgroups) is built by
//! a `*_call` function, so an op held back and the same op recorded at
//! once are the same dispatch.

use crate::backend::{Result, RopeMode, RopeParams, Tensor};
use crate::quant::GgmlType;

use super::pipelines::{CoopTile, Elementwise, Kernel, Multi, ROPE_HEADS, ShaderFeatures, WG_ROW};

/// The longest row the mat-vecs take their norm into (matvec_blocks.wgsl's
/// NORM_BLOCKS blocks of 32).
const NORM_MAX_COLS: usize = 4096;
use super::recorder::Params;
use super::{GpuBackend, P, params};

/// An op held back, recorded later with the op that follows if they fuse:
/// a norm or GLU with the next matmul's Q8 rounding (`RmsNormQ8`,
/// `GluQ8`), a residual add inside the norm after it (`AddRmsNorm`) or the
/// mat-vec before it (`MatVecDot`), paired ropes and cache writes.
#[derive(Clone, Copy)]
pub(super) enum Pending {
    /// `rms_norm(x, w, eps, out)`.
    Norm {
        x: Tensor,
        w: Tensor,
        eps: f32,
        out: Tensor,
    },
    /// `out = act(gate) · up` (SiluMul or GeluMul).
    Glu {
        op: Elementwise,
        gate: Tensor,
        up: Tensor,
        out: Tensor,
    },
    /// `out = a + b`, same shapes (f32 activations): an rms_norm of `out`
    /// next takes it in (`AddRmsNorm`). With `split`, b is a split
    /// matmul's first half, its second half's sums not yet added.
    Add {
        a: Tensor,
        b: Tensor,
        out: Tensor,
        split: Option<Split>,
    },
    /// A split matmul's second half's sums to add to its first's
    /// (`SplitSums`): a residual add of its output next joins it, and the
    /// norm after that (`AddRmsNormHalf` with `sums`).
    SplitSums(Split),
    /// A residual add and the rms_norm of its sum (`AddRmsNorm`): a matmul
    /// on cooperative matrices next has it write its f16 blocks too
    /// (`AddRmsNormHalf`, in `GpuBackend::half_input`).
    AddNorm(AddNorm),
    /// A rope: a rope at the same positions and with the same frequencies
    /// next (K after Q) joins it in one dispatch.
    Rope {
        x: Tensor,
        pos: Tensor,
        p: RopeParams,
        out: Tensor,
    },
    /// Two ropes (normal mode): K's cache write next joins them, then V's
    /// (`RopeStore`); anything else dispatches them as a `RopePair`, or with
    /// K's write (`store`, cache rows `ids` of `kc`) a `RopeStore` without V.
    Ropes {
        q: (Tensor, Tensor),
        /// K's input, output and heads (`p` has Q's).
        k: (Tensor, Tensor, usize),
        pos: Tensor,
        p: RopeParams,
        store: Option<(Tensor, Tensor)>,
    },
    /// Q's and K's ropes (one row, K not in place) and K's and V's cache
    /// writes (f32 mode): the decode attention of the rotated Q over those
    /// caches next joins them (`AttentionRope`); anything else dispatches
    /// them as a `RopeStore`.
    RopeStore {
        q: (Tensor, Tensor),
        k: (Tensor, Tensor, usize),
        pos: Tensor,
        p: RopeParams,
        ids: Tensor,
        kc: Tensor,
        v: (Tensor, Tensor),
    },
    /// A KV-cache write: one with the same ids into a cache of the same
    /// shape next (V after K) joins it in one dispatch.
    SetRows {
        src: Tensor,
        ids: Tensor,
        dst: Tensor,
    },
    /// Decode attention (q, caches, positions, slots, out; its parameters
    /// and workgroups), whose output the next matmul rounds to Q8 inside
    /// it (`AttentionQ8`); with `rope`, the ropes and cache writes before
    /// it joined (`AttentionRope`).
    Attention {
        t: [Tensor; 6],
        params: Params,
        groups: u64,
        rope: Option<RopeJoin>,
    },
    /// Prefill attention on cooperative matrices (q, caches, positions,
    /// slots, out; its parameters and workgroups): the next matmul on
    /// cooperative matrices of its output has it write the f16 blocks
    /// too (`AttentionCoop` with `half`), where a `HalfBlocks` copy would
    /// be another dispatch.
    CoopAttention(CoopAttention),
    /// Gate and up (two repacked decode mat-vecs of one input, rows a
    /// multiple of 32; f32 mode): the GLU of their outputs next joins them
    /// (`glu`: op and output), and then the next matmul's Q8 rounding of
    /// its output (`MatVecGlu`); anything else dispatches them as a
    /// `MatVecMulti`, or with the GLU as a `MatVecGlu` that does not round.
    GateUp {
        w: [Tensor; 2],
        x: DotIn,
        outs: [Tensor; 2],
        glu: Option<(Elementwise, Tensor)>,
    },
    /// Gate and up on cooperative matrices, joined (prefill, f32 mode;
    /// `Multi::Glu`): the GLU of their outputs next joins them, and then
    /// the next coop matmul of its output has the same dispatch write its
    /// f16 blocks too; anything else dispatches them with what joined.
    CoopGateUp(CoopGateUp),
    /// A repacked decode mat-vec (f32 mode) of Q8-rounded activations
    /// `x` (quants, scales, sums), `out = x · wᵀ`: a residual add of `out`
    /// next joins it.
    MatVec {
        w: Tensor,
        x: [Tensor; 3],
        out: Tensor,
    },
}

/// The input of a repacked decode mat-vec of several weights (`MatVecMulti`,
/// `MatVecGlu`): its Q8 rounding (quants, scales), or the rms_norm whose
/// output it is, taken into the mat-vec (`NORM` in matvec_blocks.wgsl).
#[derive(Clone, Copy)]
pub(super) enum DotIn {
    Q8([Tensor; 2]),
    Norm(NormJoin),
}

/// `out = rms_norm(x) · w` (`Pending::Norm`), taken into the mat-vecs of
/// its output.
#[derive(Clone, Copy)]
pub(super) struct NormJoin {
    pub x: Tensor,
    pub w: Tensor,
    pub eps: f32,
    pub out: Tensor,
}

impl DotIn {
    /// The tensors it binds: the Q8 quants and scales, or the norm's input
    /// and weight (and its output, bound last).
    fn bound(self) -> [Tensor; 2] {
        match self {
            DotIn::Q8(q8) => q8,
            DotIn::Norm(n) => [n.x, n.w],
        }
    }

    /// Every tensor it reads or writes.
    pub(super) fn tensors(self) -> Vec<Tensor> {
        match self {
            DotIn::Q8(q8) => q8.to_vec(),
            DotIn::Norm(n) => vec![n.x, n.w, n.out],
        }
    }

    fn norm(self) -> Option<NormJoin> {
        match self {
            DotIn::Q8(_) => None,
            DotIn::Norm(n) => Some(n),
        }
    }
}

/// What a decode attention takes over from the `RopeStore` before it: Q
/// before its rope (the attention's q is the rotated one), K and K
/// rotated, V, the cache rows and the rope.
#[derive(Clone, Copy)]
pub(super) struct RopeJoin {
    x: Tensor,
    k: (Tensor, Tensor),
    v: Tensor,
    ids: Tensor,
    p: RopeParams,
}

/// Tensors a held-back dispatch may bind besides its own: the dummy for an
/// absent input and the exact.wgsl tables.
#[derive(Clone, Copy)]
pub(super) struct Aux {
    dummy: Tensor,
    tables: Tensor,
}

/// One dispatch: kernel, parameters, bindings, workgroups.
pub(super) type Call = (Kernel, Params, Vec<Tensor>, u64);

/// A rope of `x` (and, paired, of `x2` into `out2` with its own heads) at
/// `pos` (`rope_invocations`).
fn rope_call(
    (x, pos, p, out): (Tensor, Tensor, &RopeParams, Tensor),
    pair: Option<(Tensor, usize, Tensor)>,
    aux: Aux,
) -> Call {
    // ggml's theta_scale, with the CPU's powf.
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let heads2 = pair.map_or(0, |(_, h, _)| h);
    let params = params(&[
        P::U(x.rows as u32),
        P::U(p.n_heads as u32),
        P::U(p.head_dim as u32),
        P::U(p.n_dims as u32),
        P::F(theta_scale),
        P::F(p.freq_scale),
        P::U(u32::from(p.freq_factors.is_some())),
        P::U(heads2 as u32),
    ]);
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    let groups = rope_invocations(x.rows, p, heads2).div_ceil(64) as u64;
    match pair {
        None => (
            Kernel::Rope(p.mode),
            params,
            vec![x, pos, out, ff, aux.tables],
            groups,
        ),
        Some((x2, _, out2)) => (
            Kernel::RopePair(p.mode),
            params,
            vec![x, pos, out, ff, x2, out2, aux.tables],
            groups,
        ),
    }
}

/// rope.wgsl's invocations for `rows` rows of `p.n_heads` heads and of
/// `heads2` (a second tensor's): one per pair position of a row and group
/// of `ROPE_HEADS` heads.
fn rope_invocations(rows: usize, p: &RopeParams, heads2: usize) -> usize {
    let groups = p.n_heads.div_ceil(ROPE_HEADS) + heads2.div_ceil(ROPE_HEADS);
    rows * groups * p.head_dim / 2
}

/// A repacked decode mat-vec `out[:, o0 .. o0 + w.rows] = x · wᵀ` (o0 >
/// 0: a part of a split weight) on Q8-rounded `x`, with `resid = (res,
/// sum)` the residual add `sum = res + out` (whole rows of `out`).
pub(super) fn matvec_call(
    (w, [xq, xd, _], out): (Tensor, [Tensor; 3], Tensor),
    o0: usize,
    resid: Option<(Tensor, Tensor)>,
) -> Call {
    let (m, n, blocks) = (w.rows, out.rows, w.rows.div_ceil(4));
    // A repacked row's offsets count blocks.
    let row_blocks = w.cols / w.dtype.block_size();
    let params = params(&[
        P::U(m as u32),
        P::U(w.cols as u32),
        P::U(n as u32),
        P::U(row_blocks as u32),
        P::U(blocks as u32),
        P::U(out.cols as u32),
        P::U(o0 as u32),
    ]);
    let mut bound = vec![w, xq, xd, out];
    bound.extend(resid.into_iter().flat_map(|(res, sum)| [res, sum]));
    let kernel = Kernel::MatVecDot {
        t: w.dtype,
        residual: resid.is_some(),
    };
    (kernel, params, bound, (blocks * n) as u64)
}

/// Up to 3 repacked decode mat-vecs of one input in one dispatch
/// (`MatVecMulti`): of its Q8 rounding, 4 rows a workgroup, or with the
/// norm before them, 16; the weights' row groups one after the other.
pub(super) fn multi_call(ws: &[Tensor], x: DotIn, outs: &[Tensor], n: usize) -> Call {
    let norm = x.norm();
    let per = if norm.is_some() { 16 } else { 4 };
    let rb = |t: Tensor| t.rows.div_ceil(per);
    let (w, o) = (ws[0], outs[0]);
    let (w1, o1) = (ws[1], outs[1]);
    // A missing third weight binds the second again and has no rows.
    let (w2, o2) = (
        ws.get(2).copied().unwrap_or(w1),
        outs.get(2).copied().unwrap_or(o1),
    );
    let rb2 = if ws.len() == 3 { rb(w2) } else { 0 };
    let row_blocks = w.cols / w.dtype.block_size();
    let mut params = params(&[
        P::U(w.rows as u32),
        P::U(w.cols as u32),
        P::U(n as u32),
        P::U(row_blocks as u32),
        P::U(rb(w) as u32),
        P::U(w1.rows as u32),
        P::U(rb(w1) as u32),
        P::U(w2.rows as u32),
        P::U(rb2 as u32),
    ]);
    let [x0, x1] = x.bound();
    let mut bound = vec![w, x0, x1, o, w1, o1, w2, o2];
    if let Some(nj) = norm {
        params[9] = nj.eps.to_bits();
        bound.push(nj.out);
    }
    (
        Kernel::MatVecMulti {
            t: w.dtype,
            norm: norm.is_some(),
        },
        params,
        bound,
        ((rb(w) + rb(w1) + rb2) * n) as u64,
    )
}

/// Gate and up mat-vecs (`w`, outputs `outs`) with `act = op(gate) · up`
/// after them, and with `q8` the Q8 rounding of `act`: a workgroup per 32
/// rows of both (`MatVecGlu`).
fn gate_up_glu_call(
    (w, x, outs): ([Tensor; 2], DotIn, [Tensor; 2]),
    (op, act): (Elementwise, Tensor),
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> Call {
    let (m, n) = (w[0].rows, outs[0].rows);
    let row_blocks = w[0].cols / w[0].dtype.block_size();
    let mut params = params(&[
        P::U(m as u32),
        P::U(w[0].cols as u32),
        P::U(n as u32),
        P::U(row_blocks as u32),
        P::U(u32::from(q8.is_some())),
    ]);
    let [xq, xd, xs] = q8.unwrap_or([aux.dummy; 3]);
    let [x0, x1] = x.bound();
    let mut bound = vec![w[0], x0, x1, outs[0], w[1], outs[1], act, xq, xd, xs];
    let norm = x.norm();
    if let Some(nj) = norm {
        params[9] = nj.eps.to_bits();
        bound.push(nj.out);
    }
    (
        Kernel::MatVecGlu {
            t: w[0].dtype,
            op,
            norm: norm.is_some(),
        },
        params,
        bound,
        (m / 32 * n) as u64,
    )
}

/// Q's and K's ropes (normal mode; K's input, output and heads in `k`),
/// K's rotated rows written to cache rows `ids` of `kc` and, with `v =
/// (v, vc)`, V's rows to `vc` alike: one dispatch (`RopeStore`), two
/// values per invocation.
fn rope_store_call(
    ((x, out), k, pos, p): (
        (Tensor, Tensor),
        (Tensor, Tensor, usize),
        Tensor,
        &RopeParams,
    ),
    (ids, kc): (Tensor, Tensor),
    v: Option<(Tensor, Tensor)>,
    aux: Aux,
) -> Call {
    let (x2, out2, heads2) = (k.0, k.1, k.2);
    let (_, mut params, _, _) = rope_call((x, pos, p, out), Some((x2, heads2, out2)), aux);
    let vcols = v.map_or(0, |(v, _)| v.cols);
    params[8] = kc.rows as u32;
    params[9] = vcols as u32;
    let pairs = rope_invocations(x.rows, p, heads2) + x.rows * vcols / 2;
    let (v, vc) = v.unwrap_or((aux.dummy, aux.dummy));
    let ff = p.freq_factors.unwrap_or(aux.dummy);
    (
        Kernel::RopeStore(kc.dtype),
        params,
        vec![x, pos, out, ff, x2, out2, ids, kc, v, vc, aux.tables],
        pairs.div_ceil(64) as u64,
    )
}

/// Decode attention (`t`: q, caches, positions, slots, out; parameters and
/// workgroups) of one row with the ropes and cache writes before it, and
/// with `q8` the Q8 rounding of its output (`AttentionRope`).
fn attention_rope_call(
    (t, mut params, groups): ([Tensor; 6], Params, u64),
    r: RopeJoin,
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> Call {
    let [q, kc, vc, pos, seq, out] = t;
    // After the attention's 9: the rope's, as rope_call's, and whether it
    // rounds.
    params[9] = r.p.n_dims as u32;
    params[10] = r.p.freq_base.powf(-2.0 / r.p.n_dims as f32).to_bits();
    params[11] = r.p.freq_scale.to_bits();
    params[12] = u32::from(r.p.freq_factors.is_some());
    params[13] = u32::from(q8.is_some());
    let [xq, xd, xs] = q8.unwrap_or([aux.dummy; 3]);
    let ff = r.p.freq_factors.unwrap_or(aux.dummy);
    (
        Kernel::AttentionRope(kc.dtype),
        params,
        vec![
            r.x, kc, vc, pos, seq, out, xq, xd, xs, q, r.k.0, r.k.1, r.v, ff, r.ids, aux.tables,
        ],
        groups,
    )
}

/// `dst[ids[i]] = src[i]` (and, paired, `dst2[ids[i]] = src2[i]`): one
/// invocation per value, or per pair of values of an F16 cache.
fn set_rows_call(
    (src, ids, dst): (Tensor, Tensor, Tensor),
    pair: Option<(Tensor, Tensor)>,
) -> Call {
    let n = ids.n_elements();
    let per_row = if dst.dtype == GgmlType::F16 {
        dst.cols / 2
    } else {
        dst.cols
    };
    let params = params(&[P::U(n as u32), P::U(dst.cols as u32), P::U(dst.rows as u32)]);
    let calls = if pair.is_some() { 2 } else { 1 };
    let groups = (calls * n * per_row).div_ceil(256) as u64;
    match pair {
        None => (
            Kernel::SetRows(dst.dtype),
            params,
            vec![src, dst, ids],
            groups,
        ),
        Some((src2, dst2)) => (
            Kernel::SetRowsPair(dst.dtype),
            params,
            vec![src, dst, ids, src2, dst2],
            groups,
        ),
    }
}

/// Prefill attention on cooperative matrices (`Pending::CoopAttention`):
/// the kernel's head size and heads a workgroup, q, caches, positions,
/// slots, out, its parameters and workgroups.
#[derive(Clone, Copy)]
pub(super) struct CoopAttention {
    pub(super) head_dim: u32,
    pub(super) heads: u32,
    pub(super) t: [Tensor; 6],
    pub(super) params: Params,
    pub(super) groups: u64,
}

impl CoopAttention {
    /// Its dispatch, with `half` (the next matmul's f16 blocks) written
    /// too.
    fn call(self, half: Option<Tensor>, aux: Aux) -> Call {
        let kernel = Kernel::AttentionCoop {
            head_dim: self.head_dim,
            heads: self.heads,
            half: half.is_some(),
        };
        let mut bound = self.t.to_vec();
        bound.push(aux.tables);
        bound.extend(half);
        (kernel, self.params, bound, self.groups)
    }
}

/// Gate and up on cooperative matrices (`Pending::CoopGateUp`): the
/// weights, the joint buffer that holds them and the blocks where each
/// starts in it, the input's f16 blocks, the outputs, the GLU that joined
/// (op, output), and the tile (rows × tokens) and `row_bytes` parameter.
#[derive(Clone, Copy)]
pub(super) struct CoopGateUp {
    pub(super) w: [Tensor; 2],
    pub(super) joint: (Tensor, [u32; 2]),
    pub(super) x: Tensor,
    pub(super) outs: [Tensor; 2],
    pub(super) glu: Option<(Elementwise, Tensor)>,
    /// Whether gate and up are written (not after `Backend::discard`).
    pub(super) keep: bool,
    pub(super) tile: (usize, usize),
    pub(super) row_bytes: usize,
}

impl CoopGateUp {
    /// Its dispatch: gate and up, the GLU if one joined, and with `half`
    /// the GLU's f16 blocks (`MatMulCoop` with `Multi::Glu`, huge tiles of
    /// TM / 2 features).
    fn call(self, half: Option<Tensor>, aux: Aux) -> Call {
        let (w, n) = (self.w[0], self.x.rows);
        let (tm, tn) = self.tile;
        let tiles = w.rows.div_ceil(tm / 2);
        let (joint, [g0, u0]) = self.joint;
        let flags = u32::from(self.glu.is_some())
            | (u32::from(half.is_some()) << 1)
            | (u32::from(self.keep) << 2);
        let mut p = params(&[
            P::U(w.rows as u32),
            P::U(w.cols as u32),
            P::U(n as u32),
            P::U(self.row_bytes as u32),
            P::U(tiles as u32),
            P::U(w.rows as u32),
            P::U(0),
            P::U(flags),
        ]);
        p[11] = g0;
        p[12] = u0;
        // Nothing is written to what the flags leave out.
        let (op, act) = self.glu.unwrap_or((Elementwise::SiluMul, aux.dummy));
        let bound = vec![
            joint,
            self.x,
            self.outs[0],
            self.outs[1],
            act,
            half.unwrap_or(aux.dummy),
        ];
        let kernel = Kernel::MatMulCoop {
            t: w.dtype,
            tile: CoopTile::Huge,
            multi: Multi::Glu(op),
        };
        (kernel, p, bound, (tiles * n.div_ceil(tn)) as u64)
    }
}

/// A split matmul's first half's output and its second half's sums, not
/// yet added (`CoopTile::HugeSplit`).
#[derive(Clone, Copy)]
pub(super) struct Split {
    pub(super) out: Tensor,
    pub(super) sums: Tensor,
    /// Whether `out` gets the whole sums (not after `Backend::discard`,
    /// where an add and norm that take the sums in leave it as it is).
    pub(super) keep: bool,
}

impl Split {
    /// The adds on their own: `out += sums`, 4 values an invocation.
    fn call(self) -> Call {
        let len = self.out.n_elements();
        (
            Kernel::SplitSums,
            params(&[P::U(len as u32)]),
            vec![self.out, self.sums],
            len.div_ceil(4 * 256) as u64,
        )
    }
}

/// `sum = a + b`, then `rms_norm(sum, w, eps, out)` (`Pending::AddNorm`);
/// with `split`, b is a split matmul's first half.
#[derive(Clone, Copy)]
pub(super) struct AddNorm {
    a: Tensor,
    b: Tensor,
    sum: Tensor,
    w: Tensor,
    eps: f32,
    out: Tensor,
    split: Option<Split>,
}

impl AddNorm {
    /// Its dispatch, with `half` (the next matmul's f16 blocks) written
    /// too (`AddRmsNormHalf`), which then takes a split's sums in; without
    /// it, after the split's own adds (`Pending::before`).
    fn call(self, half: Option<Tensor>) -> Call {
        let out = self.out;
        let mut params = params(&[P::U(out.rows as u32), P::U(out.cols as u32), P::F(self.eps)]);
        let mut bound = vec![self.a, out, self.w, self.b, self.sum];
        let Some(half) = half else {
            return (Kernel::AddRmsNorm, params, bound, out.rows as u64);
        };
        bound.push(half);
        if let Some(s) = self.split {
            bound.push(s.sums);
            params[3] = u32::from(s.keep);
        }
        let kernel = Kernel::AddRmsNormHalf {
            sums: self.split.is_some(),
        };
        (kernel, params, bound, out.rows as u64)
    }
}

impl Pending {
    pub(super) fn out(&self) -> Tensor {
        match *self {
            Pending::Norm { out, .. }
            | Pending::Glu { out, .. }
            | Pending::Add { out, .. }
            | Pending::SplitSums(Split { out, .. })
            | Pending::AddNorm(AddNorm { out, .. })
            | Pending::Rope { out, .. }
            | Pending::MatVec { out, .. } => out,
            Pending::Ropes { store, k, .. } => store.map_or(k.1, |(_, kc)| kc),
            Pending::RopeStore { v, .. } => v.1,
            Pending::GateUp { outs, glu, .. }
            | Pending::CoopGateUp(CoopGateUp { outs, glu, .. }) => {
                glu.map_or(outs[1], |(_, act)| act)
            }
            Pending::Attention { t, .. } | Pending::CoopAttention(CoopAttention { t, .. }) => t[5],
            Pending::SetRows { dst, .. } => dst,
        }
    }

    /// Whether its dispatch can round its output to Q8 for the next matmul
    /// (`dispatch` with `q8`).
    pub(super) fn rounds_output(&self) -> bool {
        match *self {
            Pending::Norm { .. } | Pending::Glu { .. } | Pending::Attention { .. } => true,
            Pending::GateUp { glu, .. } => glu.is_some(),
            _ => false,
        }
    }

    /// Whether it reads the backend's Q8 activations (so its own output's
    /// rounding goes to the other set).
    pub(super) fn reads_q8(&self) -> bool {
        matches!(
            self,
            Pending::GateUp {
                x: DotIn::Q8(_),
                ..
            }
        )
    }

    /// What must run before its `dispatch` as it is: a split's adds held
    /// in the add or norm after it.
    fn before(&self) -> Option<Call> {
        match *self {
            Pending::Add { split, .. } | Pending::AddNorm(AddNorm { split, .. }) => {
                split.map(Split::call)
            }
            _ => None,
        }
    }

    /// Whether it reads the backend's f16 blocks (so its own output's go
    /// to the other set).
    pub(super) fn reads_half(&self) -> bool {
        matches!(self, Pending::CoopGateUp(_))
    }

    /// The dispatch of the op that also writes its output as `HalfBlocks`
    /// does, into `half`, for the next matmul on cooperative matrices
    /// (`GpuBackend::half_input`): a GLU (`GluHalf`), an add and norm
    /// (`AddRmsNormHalf`, with fast math) or a prefill attention
    /// (`AttentionCoop` with `half`); None for any other op.
    pub(super) fn half_dispatch(&self, half: Tensor, f: ShaderFeatures, aux: Aux) -> Option<Call> {
        match *self {
            Pending::Glu { op, gate, up, out } => {
                // One invocation per word of 2 values.
                let n = out.n_elements();
                let (len, cols) = (P::U(n as u32), P::U(out.cols as u32));
                Some((
                    Kernel::GluHalf(op),
                    params(&[len, len, P::F(0.0), cols]),
                    vec![gate, out, up, half],
                    n.div_ceil(2 * 256) as u64,
                ))
            }
            // Whole 16-byte words a row (norm_half.wgsl).
            Pending::AddNorm(n)
                if Kernel::AddRmsNormHalf {
                    sums: n.split.is_some(),
                }
                .builds_with(f)
                    && n.out.cols.is_multiple_of(4) =>
            {
                Some(n.call(Some(half)))
            }
            Pending::CoopAttention(a) => Some(a.call(Some(half), aux)),
            Pending::CoopGateUp(g) if g.glu.is_some() => Some(g.call(Some(half), aux)),
            _ => None,
        }
    }

    /// The kernel, parameters, bindings and workgroups of the op alone,
    /// or (`q8`: quants, scales, sums) fused with the Q8 rounding of its
    /// output.
    pub(super) fn dispatch(&self, q8: Option<[Tensor; 3]>, aux: Aux) -> Call {
        match *self {
            Pending::Rope { x, pos, ref p, out } => rope_call((x, pos, p, out), None, aux),
            Pending::Ropes {
                q: (x, out),
                k,
                pos,
                ref p,
                store: None,
            } => rope_call((x, pos, p, out), Some((k.0, k.2, k.1)), aux),
            Pending::Ropes {
                q,
                k,
                pos,
                ref p,
                store: Some((ids, kc)),
            } => rope_store_call((q, k, pos, p), (ids, kc), None, aux),
            Pending::RopeStore {
                q,
                k,
                pos,
                ref p,
                ids,
                kc,
                v,
            } => rope_store_call((q, k, pos, p), (ids, kc), Some(v), aux),
            Pending::SetRows { src, ids, dst } => set_rows_call((src, ids, dst), None),
            Pending::CoopAttention(a) => a.call(None, aux),
            Pending::CoopGateUp(g) => g.call(None, aux),
            Pending::Attention {
                t,
                params,
                groups,
                rope: Some(rope),
            } => attention_rope_call((t, params, groups), rope, q8, aux),
            Pending::Attention {
                t,
                params,
                groups,
                rope: None,
            } => {
                let [q, k, v, pos, seq, out] = t;
                match q8 {
                    None => (
                        Kernel::Attention(k.dtype),
                        params,
                        vec![q, k, v, pos, seq, out, aux.tables],
                        groups,
                    ),
                    Some([xq, xd, xs]) => (
                        Kernel::AttentionQ8(k.dtype),
                        params,
                        vec![q, k, v, pos, seq, out, xq, xd, xs, aux.tables],
                        groups,
                    ),
                }
            }
            Pending::MatVec { w, x, out } => matvec_call((w, x, out), 0, None),
            Pending::GateUp {
                w,
                x,
                outs,
                glu: None,
            } => multi_call(&w, x, &outs, outs[0].rows),
            Pending::GateUp {
                w,
                x,
                outs,
                glu: Some(glu),
            } => gate_up_glu_call((w, x, outs), glu, q8, aux),
            Pending::Norm { x, w, eps, out } => {
                // With the rounding, a row in parts of WG_ROW words.
                let parts = (x.cols / 4).div_ceil(WG_ROW as usize).max(1);
                let p = params(&[
                    P::U(x.rows as u32),
                    P::U(x.cols as u32),
                    P::F(eps),
                    P::U(parts as u32),
                ]);
                match q8 {
                    None => (
                        Kernel::RmsNorm { weight: true },
                        p,
                        vec![x, out, w],
                        x.rows as u64,
                    ),
                    Some([xq, xd, xs]) => (
                        Kernel::RmsNormQ8,
                        p,
                        vec![x, out, w, xq, xd, xs],
                        (x.rows * parts) as u64,
                    ),
                }
            }
            Pending::SplitSums(s) => s.call(),
            // After `before`.
            Pending::Add { a, b, out, .. } => {
                let n = a.n_elements();
                let p = params(&[P::U(n as u32), P::U(n as u32), P::F(0.0)]);
                (
                    Kernel::Elementwise(Elementwise::Add),
                    p,
                    vec![a, out, b],
                    n.div_ceil(256) as u64,
                )
            }
            Pending::AddNorm(n) => n.call(None),
            Pending::Glu { op, gate, up, out } => {
                let n = gate.n_elements();
                let p = params(&[P::U(n as u32), P::U(n as u32), P::F(0.0)]);
                match q8 {
                    None => (
                        Kernel::Elementwise(op),
                        p,
                        vec![gate, out, up],
                        n.div_ceil(256) as u64,
                    ),
                    // One invocation per word of 4 values.
                    Some([xq, xd, xs]) => (
                        Kernel::GluQ8(op),
                        p,
                        vec![gate, out, up, xq, xd, xs],
                        (n / 4).div_ceil(WG_ROW as usize) as u64,
                    ),
                }
            }
        }
    }
}

impl GpuBackend {
    /// Dispatches the held-back op, if any, as it is.
    pub(super) fn flush_pending(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        if let Some((kernel, params, bound, groups)) = p.before() {
            self.run(kernel, params, &bound, groups)?;
        }
        let (kernel, params, bound, groups) = p.dispatch(None, self.aux());
        self.run(kernel, params, &bound, groups)
    }

    /// Holds a norm, GLU or decode attention `p` back for fusing with the
    /// next matmul's Q8 rounding (every matmul in ggml's mode, repacked
    /// decode in f32 mode) when its output is whole blocks of 32, and not
    /// in place; dispatches it otherwise.
    pub(super) fn defer(&mut self, p: Pending) -> Result<()> {
        self.flush_pending()?;
        let out = p.out();
        let in_place = match p {
            Pending::Norm { x, .. } => x.id == out.id,
            Pending::Glu { gate, up, .. } => gate.id == out.id || up.id == out.id,
            Pending::Attention { t, .. } | Pending::CoopAttention(CoopAttention { t, .. }) => {
                t[0].id == out.id
            }
            _ => true,
        };
        let rounds = self.ctx.quantize_activations || self.ctx.features.fast_math;
        if rounds && out.cols.is_multiple_of(32) && !in_place {
            self.acts_of = None;
            self.pending = Some(p);
            return Ok(());
        }
        let (kernel, params, bound, groups) = p.dispatch(None, self.aux());
        self.run(kernel, params, &bound, groups)
    }

    pub(super) fn aux(&self) -> Aux {
        Aux {
            dummy: self.dummy,
            tables: self.tables,
        }
    }

    /// Holds a rope back, or dispatches it paired with
    /// the one held if that one has the same positions and frequencies.
    pub(super) fn rope_paired(
        &mut self,
        x: Tensor,
        pos: Tensor,
        p: &RopeParams,
        out: Tensor,
    ) -> Result<()> {
        if let Some(Pending::Rope {
            x: x1,
            pos: pos1,
            p: p1,
            out: out1,
        }) = self.pending
        {
            let same = RopeParams {
                n_heads: p.n_heads,
                ..p1
            } == *p;
            let apart = [x.id, out.id]
                .iter()
                .all(|&id| id != x1.id && id != out1.id && id != pos.id);
            if pos1 == pos && same && apart {
                self.wrote(out);
                let ropes = Pending::Ropes {
                    q: (x1, out1),
                    k: (x, out, p.n_heads),
                    pos,
                    p: p1,
                    store: None,
                };
                // Normal mode: K's pairs are neighbours, whole f16 words of
                // its cache row, for its cache write to join.
                if p.mode == RopeMode::Normal {
                    self.pending = Some(ropes);
                    return Ok(());
                }
                self.pending = None;
                let (kernel, params, bound, groups) = ropes.dispatch(None, self.aux());
                return self.run(kernel, params, &bound, groups);
            }
        }
        self.flush_pending()?;
        self.wrote(out);
        self.pending = Some(Pending::Rope { x, pos, p: *p, out });
        Ok(())
    }

    /// Holds a KV-cache write back: with the ropes held if it writes K's
    /// rotated rows, or alone; or dispatches it with what is held, the
    /// ropes and K's write (`RopeStore`) or K's write (`SetRowsPair`), if
    /// it is V's with the same ids and shapes.
    pub(super) fn set_rows_paired(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        if let Some(Pending::Ropes {
            q,
            k,
            pos,
            p,
            store,
        }) = self.pending
        {
            let (x, out) = q;
            let read = [x, out, k.0, k.1, pos, ids];
            match store {
                // K's cache write: rows of K's rotated output.
                None if src == k.1
                    && dst.cols == src.cols
                    && read.iter().all(|t| t.id != dst.id) =>
                {
                    self.wrote(dst);
                    self.pending = Some(Pending::Ropes {
                        q,
                        k,
                        pos,
                        p,
                        store: Some((ids, dst)),
                    });
                    return Ok(());
                }
                // V's: the same ids into a cache like K's.
                Some((ids1, kc))
                    if ids1 == ids
                        && (src.rows, src.cols) == (k.1.rows, k.1.cols)
                        && (dst.dtype, dst.rows, dst.cols) == (kc.dtype, kc.rows, kc.cols)
                        && src.id != kc.id
                        && read.iter().chain([&kc]).all(|t| t.id != dst.id) =>
                {
                    self.wrote(dst);
                    let held = Pending::RopeStore {
                        q,
                        k,
                        pos,
                        p,
                        ids,
                        kc,
                        v: (src, dst),
                    };
                    // The attention next may take them in: one row, K's
                    // input not overwritten (other heads read it), and the
                    // adapter binding all its buffers.
                    let bindings = Kernel::AttentionRope(kc.dtype).bindings().len() as u32;
                    let joinable = self.ctx.features.fast_math
                        && x.rows == 1
                        && k.0.id != k.1.id
                        && p.head_dim.is_multiple_of(4)
                        && self.ctx.limits.max_storage_buffers_per_shader_stage >= bindings;
                    if joinable {
                        self.pending = Some(held);
                        return Ok(());
                    }
                    self.pending = None;
                    let (kernel, params, bound, groups) = held.dispatch(None, self.aux());
                    return self.run(kernel, params, &bound, groups);
                }
                _ => {}
            }
        }
        if let Some(Pending::SetRows {
            src: src1,
            ids: ids1,
            dst: dst1,
        }) = self.pending
        {
            let same = ids1 == ids
                && (src1.rows, src1.cols) == (src.rows, src.cols)
                && (dst1.dtype, dst1.rows, dst1.cols) == (dst.dtype, dst.rows, dst.cols)
                && src1.dtype == src.dtype;
            let apart = [src.id, dst.id]
                .iter()
                .all(|&id| id != src1.id && id != dst1.id && id != ids.id);
            if same && apart {
                self.pending = None;
                let (kernel, params, bound, groups) =
                    set_rows_call((src1, ids, dst1), Some((src, dst)));
                return self.run(kernel, params, &bound, groups);
            }
        }
        self.flush_pending()?;
        self.wrote(dst);
        self.pending = Some(Pending::SetRows { src, ids, dst });
        Ok(())
    }

    /// The held ropes and cache writes, if the decode attention of `q` over
    /// caches `kc`, `vc` at `pos` (writing `out`) can take them in
    /// (`Pending::RopeStore`); they are no longer held then.
    pub(super) fn rope_store_for_attention(
        &mut self,
        [q, kc, vc, pos, seq, out]: [Tensor; 6],
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    ) -> Option<RopeJoin> {
        let Some(Pending::RopeStore {
            q: (x, qo),
            k,
            pos: rpos,
            p,
            ids,
            kc: rkc,
            v,
        }) = self.pending
        else {
            return None;
        };
        let same = (qo, rkc, v.1, rpos) == (q, kc, vc, pos)
            && (p.n_heads, k.2, p.head_dim) == (n_heads, n_kv_heads, head_dim);
        // The output is none of what the kernel reads or writes besides.
        let apart = [x, k.0, k.1, v.0, kc, vc, ids, pos, seq]
            .iter()
            .all(|t| t.id != out.id);
        if !same || !apart {
            return None;
        }
        self.pending = None;
        Some(RopeJoin {
            x,
            k: (k.0, k.1),
            v: v.0,
            ids,
            p,
        })
    }

    /// Holds a residual add back (f32 activations), for an rms_norm of its
    /// sum to take in.
    /// A split matmul's second half's sums held back (`Pending::SplitSums`)
    /// for the residual add after it to take in, after dispatching what was
    /// held.
    pub(super) fn hold_split_sums(&mut self, out: Tensor, sums: Tensor) -> Result<()> {
        self.flush_pending()?;
        self.pending = Some(Pending::SplitSums(Split {
            out,
            sums,
            keep: true,
        }));
        Ok(())
    }

    /// Holds `out = a + b` back, joining the split matmul's sums held if
    /// one of a, b is its output (neither the sums, nor `out` that output).
    pub(super) fn defer_add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        let joined = match self.pending {
            Some(Pending::SplitSums(s)) if s.out.id != out.id && a.id != b.id => {
                let other = if b == s.out {
                    Some(a)
                } else {
                    (a == s.out).then_some(b)
                };
                other
                    .filter(|o| o.id != s.sums.id && out.id != s.sums.id)
                    .map(|o| (o, s))
            }
            _ => None,
        };
        match joined {
            Some((a, s)) => {
                self.pending = None;
                self.wrote(out);
                self.pending = Some(Pending::Add {
                    a,
                    b: s.out,
                    out,
                    split: Some(s),
                });
            }
            None => {
                self.flush_pending()?;
                self.wrote(out);
                self.pending = Some(Pending::Add {
                    a,
                    b,
                    out,
                    split: None,
                });
            }
        }
        Ok(())
    }

    /// The rms_norm (with weight `w`) of a held-back add's sum, held back
    /// in its place to be one dispatch with the add (`Pending::AddNorm`);
    /// false if no such add is pending.
    pub(super) fn norm_of_pending_add(
        &mut self,
        x: Tensor,
        w: Tensor,
        eps: f32,
        out: Tensor,
    ) -> Result<bool> {
        let Some(Pending::Add {
            a,
            b,
            out: sum,
            split,
        }) = self.pending
        else {
            return Ok(false);
        };
        let on_sums = split.is_some_and(|s| s.sums.id == out.id);
        if sum != x || out.id == sum.id || out.id == a.id || out.id == b.id || on_sums {
            return Ok(false);
        }
        self.acts_of = None;
        self.pending = Some(Pending::AddNorm(AddNorm {
            a,
            b,
            sum,
            w,
            eps,
            out,
            split,
        }));
        Ok(true)
    }

    /// The rms_norm held back whose output is `x`, for the repacked decode
    /// mat-vecs of `x` (writing `outs`; with `glu`, gate and up, whose GLU
    /// may join) to take in (f32 mode, rows of up to 4096 values, the
    /// adapter binding the kernel's buffers); it is no longer held then,
    /// and x's Q8 rounding is not stored.
    pub(super) fn norm_for_matvec(
        &mut self,
        (t, x): (GgmlType, Tensor),
        outs: &[Tensor],
        glu: bool,
    ) -> Option<NormJoin> {
        let Some(Pending::Norm { x: nx, w, eps, out }) = self.pending else {
            return None;
        };
        // The GLU's op binds nothing of its own.
        let kernel = if glu {
            Kernel::MatVecGlu {
                t,
                op: Elementwise::SiluMul,
                norm: true,
            }
        } else {
            Kernel::MatVecMulti { t, norm: true }
        };
        let bindings = kernel.bindings().len() as u32;
        let fits = self.ctx.features.fast_math
            && out == x
            && x.cols <= NORM_MAX_COLS
            && x.cols.is_multiple_of(32)
            && self.ctx.limits.max_storage_buffers_per_shader_stage >= bindings;
        let apart = outs
            .iter()
            .all(|o| [nx.id, w.id, out.id].iter().all(|&id| id != o.id));
        if !fits || !apart {
            return None;
        }
        self.pending = None;
        self.acts_of = None;
        Some(NormJoin { x: nx, w, eps, out })
    }

    /// Holds gate and up mat-vecs back (see `Pending::GateUp`), after
    /// dispatching what was held.
    pub(super) fn hold_gate_up(
        &mut self,
        w: [Tensor; 2],
        x: DotIn,
        outs: [Tensor; 2],
    ) -> Result<()> {
        self.flush_pending()?;
        self.pending = Some(Pending::GateUp {
            w,
            x,
            outs,
            glu: None,
        });
        Ok(())
    }

    /// `out = op(gate) · up` joining the gate and up mat-vecs (or coop
    /// matmuls) held back, if they made `gate` and `up` and `out` is none
    /// of their tensors; false otherwise.
    pub(super) fn glu_of_gate_up(
        &mut self,
        op: Elementwise,
        gate: Tensor,
        up: Tensor,
        out: Tensor,
    ) -> bool {
        if let Some(Pending::CoopGateUp(g)) = self.pending {
            let apart = [g.joint.0, g.x, g.outs[0], g.outs[1]]
                .iter()
                .all(|t| t.id != out.id);
            if g.glu.is_some() || g.outs != [gate, up] || !apart {
                return false;
            }
            self.wrote(out);
            let glu = Some((op, out));
            self.pending = Some(Pending::CoopGateUp(CoopGateUp { glu, ..g }));
            return true;
        }
        let Some(Pending::GateUp {
            w,
            x,
            outs,
            glu: None,
        }) = self.pending
        else {
            return false;
        };
        let apart = w
            .iter()
            .chain(&x.tensors())
            .chain(&outs)
            .all(|t| t.id != out.id);
        if outs != [gate, up] || !apart {
            return false;
        }
        self.wrote(out);
        self.pending = Some(Pending::GateUp {
            w,
            x,
            outs,
            glu: Some((op, out)),
        });
        true
    }

    /// `Backend::discard`: gate and up held back with their GLU are not
    /// written if both are discarded, nor a split's whole output if it is
    /// (where the add and norm after it take its sums in).
    pub(super) fn discard_held(&mut self, ts: &[Tensor]) {
        match &mut self.pending {
            Some(Pending::CoopGateUp(g))
                if g.glu.is_some() && g.outs.iter().all(|o| ts.contains(o)) =>
            {
                g.keep = false;
            }
            Some(Pending::Add { split: Some(s), .. })
            | Some(Pending::AddNorm(AddNorm { split: Some(s), .. }))
                if ts.contains(&s.out) =>
            {
                s.keep = false
            }
            _ => {}
        }
    }

    /// Holds gate and up on cooperative matrices back (see
    /// `Pending::CoopGateUp`), after dispatching what was held.
    pub(super) fn hold_coop_gate_up(&mut self, g: CoopGateUp) -> Result<()> {
        self.flush_pending()?;
        for out in g.outs {
            self.wrote(out);
        }
        self.pending = Some(Pending::CoopGateUp(g));
        Ok(())
    }

    /// Holds a repacked decode mat-vec back (f32 mode, whole rows of
    /// `out`) for a residual add to join.
    pub(super) fn hold_matvec(&mut self, w: Tensor, x: [Tensor; 3], out: Tensor) {
        self.wrote(out);
        self.pending = Some(Pending::MatVec { w, x, out });
    }

    /// The residual add `sum = a + b` of a held-back mat-vec's output, in
    /// one dispatch with it; false if no such mat-vec is held, or if the
    /// add touches what the mat-vec reads.
    pub(super) fn matvec_with_residual(
        &mut self,
        a: Tensor,
        b: Tensor,
        sum: Tensor,
    ) -> Result<bool> {
        let Some(Pending::MatVec { w, x, out }) = self.pending else {
            return Ok(false);
        };
        let res = match (a == out, b == out) {
            (_, true) => a,
            (true, false) => b,
            (false, false) => return Ok(false),
        };
        // Not a tensor the mat-vec reads (bound read-only).
        let clash = [w, x[0], x[1]]
            .iter()
            .any(|t| t.id == res.id || t.id == sum.id);
        if clash || (res.rows, res.cols) != (out.rows, out.cols) {
            return Ok(false);
        }
        self.pending = None;
        self.wrote(sum);
        let (kernel, params, bound, groups) = matvec_call((w, x, out), 0, Some((res, sum)));
        self.run(kernel, params, &bound, groups)?;
        Ok(true)
    }
}
