//! Fusion's held op: an op held back (`Pending`) and recorded with the op
//! after it when the two fuse, as one dispatch; anything else first
//! dispatches it as it is (`GpuBackend::run`, writes, reads, syncs). The
//! joins themselves are in `fusion.rs`.
//!
//! - A norm, GLU or decode attention with the next matmul's Q8 rounding
//!   (`RmsNormQ8`, `GluQ8`, `AttentionQ8`; in `acts::matmul_input`).
//! - In the f32 mode, a norm taken whole into the repacked decode mat-vecs
//!   of its output (`Backend::matmuls`: `MatVecMulti`, `MatVecGlu` with
//!   `norm`; `fusion::norm_for_matvec`).
//! - A residual add into the repacked decode mat-vec before it
//!   (`MatVecDot` with `residual`), or else into the rms_norm after it
//!   (`AddRmsNorm`), in the f32 mode.
//! - In the f32 mode's prefill, a GLU, a residual add and norm or an
//!   attention on cooperative matrices with the next coop matmul's f16
//!   blocks of its output (`GluHalf`, `AddRmsNormHalf`, `AttentionCoop`
//!   with `half`; in `acts::half_input`).
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
//! Each op's dispatch is built by its kernel family, so an op held back
//! and the same op recorded at once are the same dispatch.

use crate::backend::{Result, RopeParams, Tensor};

use super::GpuBackend;
use super::kernels::attention::{self, RopeJoin};
use super::kernels::attention_coop::CoopAttention;
use super::kernels::elementwise::{self, Elementwise};
use super::kernels::matmul_coop::CoopGateUp;
use super::kernels::matvec_blocks::{self, DotIn};
use super::kernels::norm::{self, AddNorm};
use super::kernels::norm_half::AddRmsNormHalf;
use super::kernels::split_sums::Split;
use super::kernels::{Aux, Dispatch, Family, ShaderFeatures, copy, rope};

/// An op held back, recorded later with the op that follows if they fuse.
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
    /// (`AddRmsNormHalf`, in `acts::half_input`).
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
        t: attention::Operands,
        params: attention::Params,
        groups: u64,
        rope: Option<RopeJoin>,
    },
    /// Prefill attention on cooperative matrices: the next matmul on
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

    /// Whether it reads the backend's f16 blocks (so its own output's go
    /// to the other set).
    pub(super) fn reads_half(&self) -> bool {
        matches!(self, Pending::CoopGateUp(_))
    }

    /// What must run before its `dispatch` as it is: a split's adds held
    /// in the add or norm after it.
    fn before(&self) -> Option<Dispatch> {
        match *self {
            Pending::Add { split, .. } | Pending::AddNorm(AddNorm { split, .. }) => {
                split.map(Split::call)
            }
            _ => None,
        }
    }

    /// The dispatch of the op that also writes its output as `HalfBlocks`
    /// does, into `half`, for the next matmul on cooperative matrices
    /// (`acts::half_input`): a GLU (`GluHalf`), an add and norm
    /// (`AddRmsNormHalf`, with fast math) or a prefill attention
    /// (`AttentionCoop` with `half`); None for any other op.
    pub(super) fn half_dispatch(
        &self,
        half: Tensor,
        f: ShaderFeatures,
        aux: Aux,
    ) -> Option<Dispatch> {
        match *self {
            Pending::Glu { op, gate, up, out } => {
                Some(elementwise::glu_half(op, (gate, up, out), half))
            }
            // Whole 16-byte words a row (norm_half.wgsl).
            Pending::AddNorm(n)
                if AddRmsNormHalf {
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

    /// The dispatch of the op alone, or (`q8`: quants, scales, sums) fused
    /// with the Q8 rounding of its output.
    pub(super) fn dispatch(&self, q8: Option<[Tensor; 3]>, aux: Aux) -> Dispatch {
        match *self {
            Pending::Rope { x, pos, ref p, out } => rope::rope((x, pos, p, out), None, aux),
            Pending::Ropes {
                q: (x, out),
                k,
                pos,
                ref p,
                store: None,
            } => rope::rope((x, pos, p, out), Some((k.0, k.2, k.1)), aux),
            Pending::Ropes {
                q,
                k,
                pos,
                ref p,
                store: Some((ids, kc)),
            } => rope::rope_store((q, k, pos, p), (ids, kc), None, aux),
            Pending::RopeStore {
                q,
                k,
                pos,
                ref p,
                ids,
                kc,
                v,
            } => rope::rope_store((q, k, pos, p), (ids, kc), Some(v), aux),
            Pending::SetRows { src, ids, dst } => copy::set_rows((src, ids, dst), None),
            Pending::CoopAttention(a) => a.call(None, aux),
            Pending::CoopGateUp(g) => g.call(None, aux),
            Pending::Attention {
                t,
                params,
                groups,
                rope: Some(rope),
            } => attention::with_rope((t, params, groups), rope, q8, aux),
            Pending::Attention {
                t,
                params,
                groups,
                rope: None,
            } => match q8 {
                None => {
                    let kernel = attention::AttentionKernel::Attention(t[1].dtype);
                    attention::dispatch(kernel, t, params, groups, aux)
                }
                Some(q8) => attention::with_q8(t, params, groups, q8, aux),
            },
            Pending::MatVec { w, x, out } => matvec_blocks::dot((w, x, out), 0, None),
            Pending::GateUp {
                w,
                x,
                outs,
                glu: None,
            } => matvec_blocks::multi(&w, x, &outs, outs[0].rows),
            Pending::GateUp {
                w,
                x,
                outs,
                glu: Some(glu),
            } => matvec_blocks::gate_up_glu((w, x, outs), glu, q8, aux),
            Pending::Norm { x, w, eps, out } => norm::rms_norm(x, Some(w), eps, out, q8),
            Pending::SplitSums(s) => s.call(),
            // After `before`.
            Pending::Add { a, b, out, .. } => {
                elementwise::dispatch(Elementwise::Add, a, Some(b), 0.0, out)
            }
            Pending::AddNorm(n) => n.call(None),
            Pending::Glu { op, gate, up, out } => match q8 {
                None => elementwise::dispatch(op, gate, Some(up), 0.0, out),
                Some(q8) => elementwise::glu_q8(op, (gate, up, out), q8),
            },
        }
    }
}

/// Dispatches the held-back op, if any, as it is.
pub(super) fn flush(be: &mut GpuBackend) -> Result<()> {
    let Some(p) = be.pending.take() else {
        return Ok(());
    };
    if let Some(d) = p.before() {
        be.run(d)?;
    }
    let d = p.dispatch(None, be.aux());
    be.run(d)
}

/// Holds a norm, GLU or attention `p` back for fusing with the next
/// matmul's Q8 rounding (every matmul in ggml's mode, repacked decode in
/// f32 mode) or f16 blocks when its output is whole blocks of 32, and not
/// in place; dispatches it otherwise.
pub(super) fn defer(be: &mut GpuBackend, p: Pending) -> Result<()> {
    flush(be)?;
    let out = p.out();
    let in_place = match p {
        Pending::Norm { x, .. } => x.id == out.id,
        Pending::Glu { gate, up, .. } => gate.id == out.id || up.id == out.id,
        Pending::Attention { t, .. } | Pending::CoopAttention(CoopAttention { t, .. }) => {
            t[0].id == out.id
        }
        _ => true,
    };
    let rounds = be.ctx.quantize_activations || be.ctx.features.fast_math;
    if rounds && out.cols.is_multiple_of(32) && !in_place {
        be.acts.forget();
        be.pending = Some(p);
        return Ok(());
    }
    let d = p.dispatch(None, be.aux());
    be.run(d)
}
