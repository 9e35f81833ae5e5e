//! The tape: the contract's ops recorded as values (`Step`) until a read,
//! write or sync, which the GPU waits for anyway (one submission per
//! forward). There `fuse::pass` turns the tape into dispatches, joining
//! neighbouring steps by its rules (`fuse/`). The vector is reused from
//! one forward to the next: recording an op is a push.
//!
//! A step is an op as the backend lowers it on its own (`Step::lower`):
//! an op a rule may join keeps its operands (`Norm`, `Rope`, ...); any
//! other is its `Dispatch` already.

use crate::backend::{RopeParams, Tensor};

use super::kernels::attention::{self, RopeJoin};
use super::kernels::attention_coop::CoopAttention;
use super::kernels::elementwise::{self, Elementwise};
use super::kernels::matmul_coop::CoopGateUp;
use super::kernels::matvec_blocks::{self, DotIn};
use super::kernels::norm::{self, AddNorm};
use super::kernels::norm_half::AddRmsNormHalf;
use super::kernels::norm_rope::{self, HeadNorm};
use super::kernels::split_sums::Split;
use super::kernels::{Access, Aux, Dispatch, Family, ShaderFeatures, copy, quantize, rope};

/// K's head norm held in a `Step::NormRope`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum KHead {
    /// Its norm (`out` the norm's output); its rope, the next step, may
    /// join.
    Normed(HeadNorm),
    /// Its norm and rope (`out` the rope's), of this many heads a token.
    Roped(HeadNorm, usize),
}

impl KHead {
    fn norm(self) -> HeadNorm {
        match self {
            KHead::Normed(k) | KHead::Roped(k, _) => k,
        }
    }
}

/// How a step uses a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Touch {
    None,
    /// It writes all of this view of it and reads none of it.
    Overwrites(Tensor),
    /// It reads it, or writes only part of it (or cannot say), within
    /// its first this many bytes (views are prefixes).
    Reads(usize),
}

/// One recorded op.
// Steps are values in a vector reused from tape to tape, a few hundred a
// forward: a large variant costs a little memory, a boxed one an
// allocation per op.
#[allow(clippy::large_enum_variant)]
pub(super) enum Step {
    /// `rms_norm(x, w, eps, out)`; with `q8` (quants, scales, sums) the
    /// Q8 rounding of `out` too (`RmsNormQ8`).
    Norm {
        x: Tensor,
        w: Tensor,
        eps: f32,
        out: Tensor,
        q8: Option<[Tensor; 3]>,
    },
    /// `out = act(gate) · up` (SiluMul or GeluMul).
    Glu {
        op: Elementwise,
        gate: Tensor,
        up: Tensor,
        out: Tensor,
    },
    /// `out = a + b`, same shapes (f32 activations). With `split`, b is a
    /// split matmul's first half, its second half's sums not yet added.
    Add {
        a: Tensor,
        b: Tensor,
        out: Tensor,
        split: Option<Split>,
    },
    /// A split matmul's second half's sums to add to its first's
    /// (`SplitSums`).
    SplitSums(Split),
    /// A residual add and the rms_norm of its sum (`AddRmsNorm`).
    AddNorm(AddNorm),
    /// `out = rope(x)` at positions `pos`.
    Rope {
        x: Tensor,
        pos: Tensor,
        p: RopeParams,
        out: Tensor,
    },
    /// Q's and K's ropes in one dispatch (`p` has Q's heads); with
    /// `store` (cache rows `ids` of `kc`) K's cache write too.
    Ropes {
        q: (Tensor, Tensor),
        /// K's input, output and heads.
        k: (Tensor, Tensor, usize),
        pos: Tensor,
        p: RopeParams,
        store: Option<(Tensor, Tensor)>,
    },
    /// Q's and K's ropes and K's and V's cache writes (`RopeStore`).
    RopeStore {
        q: (Tensor, Tensor),
        k: (Tensor, Tensor, usize),
        pos: Tensor,
        p: RopeParams,
        ids: Tensor,
        kc: Tensor,
        v: (Tensor, Tensor),
    },
    /// A KV-cache write: `dst[ids[i]] = src[i]`.
    SetRows {
        src: Tensor,
        ids: Tensor,
        dst: Tensor,
    },
    /// Decode attention (q, caches, positions, slots, out; its parameters
    /// and workgroups, one per row and head); with `rope`, the ropes and
    /// cache writes before it joined (`AttentionRope`); with `q8`, the Q8
    /// rounding of its output (`AttentionQ8`); with `parts`, split over
    /// the keys (`AttentionParts`, then `AttentionMerge`).
    Attention {
        t: attention::Operands,
        params: attention::Params,
        groups: u64,
        rope: Option<RopeJoin>,
        q8: Option<[Tensor; 3]>,
        parts: Option<attention::Parts>,
    },
    /// Prefill attention on cooperative matrices.
    CoopAttention(CoopAttention),
    /// Gate and up: two repacked decode mat-vecs of one input (f32 mode),
    /// with `glu` (op and output) the GLU of their outputs joined.
    GateUp {
        w: [Tensor; 2],
        x: DotIn,
        outs: [Tensor; 2],
        glu: Option<(Elementwise, Tensor)>,
    },
    /// 2 or 3 repacked decode mat-vecs of one input (`MatVecMulti`): the
    /// first `n` of `w` and `outs`, over `rows` tokens.
    MatVecs {
        w: [Tensor; 3],
        outs: [Tensor; 3],
        n: usize,
        x: DotIn,
        rows: usize,
    },
    /// Gate and up on cooperative matrices, joined (prefill, f32 mode).
    CoopGateUp(CoopGateUp),
    /// A repacked decode mat-vec (f32 mode) of Q8-rounded activations `x`
    /// (quants, scales, sums): `out = x · wᵀ`.
    MatVec {
        w: Tensor,
        x: [Tensor; 3],
        out: Tensor,
    },
    /// `x` rounded to Q8 blocks into `q8` (quants, scales, sums) for the
    /// matmuls after it.
    RoundQ8 { x: Tensor, q8: [Tensor; 3] },
    /// `x` as the coop matmul's f16 blocks in `half` (`HalfBlocks`).
    Half { x: Tensor, half: Tensor },
    /// `out = x · s` (`Scale`).
    Scale { x: Tensor, s: f32, out: Tensor },
    /// A head norm and its rope at positions `pos` (`NormRope`), and K's
    /// with it (`fuse::norm_rope`).
    NormRope {
        q: HeadNorm,
        pos: Tensor,
        p: RopeParams,
        k: Option<KHead>,
    },
    /// Any other op, lowered.
    Dispatch(Dispatch),
}

impl Step {
    /// The output an op after it may read, for the rules that join it
    /// with that op.
    pub(super) fn out(&self) -> Option<Tensor> {
        match *self {
            Step::Norm { out, .. }
            | Step::Glu { out, .. }
            | Step::Add { out, .. }
            | Step::SplitSums(Split { out, .. })
            | Step::AddNorm(AddNorm { out, .. })
            | Step::Rope { out, .. }
            | Step::MatVec { out, .. } => Some(out),
            Step::Ropes { store, k, .. } => Some(store.map_or(k.1, |(_, kc)| kc)),
            Step::RopeStore { v, .. } => Some(v.1),
            Step::GateUp { outs, glu, .. } | Step::CoopGateUp(CoopGateUp { outs, glu, .. }) => {
                Some(glu.map_or(outs[1], |(_, act)| act))
            }
            Step::Attention { t, .. } | Step::CoopAttention(CoopAttention { t, .. }) => Some(t[5]),
            Step::SetRows { dst, .. } => Some(dst),
            _ => None,
        }
    }

    /// Calls `f` on each tensor it may write, besides the backend's
    /// rounded activations (`acts.rs`), as recorded: a dispatch's
    /// read-write bindings, an op's outputs.
    pub(super) fn writes(&self, mut f: impl FnMut(Tensor)) {
        match self {
            Step::Dispatch(d) => {
                let bindings = d.kernel.bindings();
                for (b, &t) in bindings.iter().zip(&d.bound) {
                    if b.access == Access::ReadWrite {
                        f(t);
                    }
                }
            }
            Step::GateUp { outs, .. } | Step::CoopGateUp(CoopGateUp { outs, .. }) => {
                outs.iter().copied().for_each(f)
            }
            Step::MatVecs { outs, n, .. } => outs[..*n].iter().copied().for_each(f),
            Step::RoundQ8 { .. } | Step::Half { .. } => {}
            Step::Scale { out, .. } => f(*out),
            Step::NormRope { q, k, .. } => {
                f(q.out);
                if let Some(k) = k {
                    f(k.norm().out);
                }
            }
            other => other.out().into_iter().for_each(f),
        }
    }

    /// How it uses buffer `id` (`fuse::live`).
    pub(super) fn touch(&self, id: u32) -> Touch {
        let (mut named, mut extent) = (0, 0);
        self.operands(|t| {
            if t.id == id {
                named += 1;
                extent = extent.max(t.n_bytes());
            }
        });
        let mut whole = None;
        self.whole_outputs(|t| {
            if t.id == id {
                whole = Some(t)
            }
        });
        match whole {
            _ if named == 0 => Touch::None,
            Some(t) if named == 1 => Touch::Overwrites(t),
            _ => Touch::Reads(extent),
        }
    }

    /// Calls `f` on every tensor it binds, read or written, once per
    /// binding (an op in place names its buffer twice).
    fn operands(&self, mut f: impl FnMut(Tensor)) {
        let mut all = |ts: &[Tensor]| ts.iter().copied().for_each(&mut f);
        match self {
            Step::Norm { x, w, out, q8, .. } => {
                all(&[*x, *w, *out]);
                if let Some(q8) = q8 {
                    all(q8);
                }
            }
            Step::Glu { gate, up, out, .. } => all(&[*gate, *up, *out]),
            Step::Add { a, b, out, split } => {
                all(&[*a, *b, *out]);
                if let Some(s) = split {
                    all(&[s.out, s.sums]);
                }
            }
            Step::SplitSums(s) => all(&[s.out, s.sums]),
            Step::AddNorm(n) => {
                all(&[n.a, n.b, n.sum, n.w, n.out]);
                if let Some(s) = n.split {
                    all(&[s.out, s.sums]);
                }
            }
            Step::Rope { x, pos, p, out } => {
                all(&[*x, *pos, *out]);
                all(p.freq_factors.as_slice());
            }
            Step::Ropes {
                q,
                k,
                pos,
                p,
                store,
                ..
            } => {
                all(&[q.0, q.1, k.0, k.1, *pos]);
                all(p.freq_factors.as_slice());
                if let Some((ids, kc)) = store {
                    all(&[*ids, *kc]);
                }
            }
            Step::RopeStore {
                q,
                k,
                pos,
                p,
                ids,
                kc,
                v,
            } => {
                all(&[q.0, q.1, k.0, k.1, *pos, *ids, *kc, v.0, v.1]);
                all(p.freq_factors.as_slice());
            }
            Step::SetRows { src, ids, dst } => all(&[*src, *ids, *dst]),
            Step::Attention {
                t, rope, q8, parts, ..
            } => {
                all(t);
                if let Some(q8) = q8 {
                    all(q8);
                }
                all(parts.map(|p| p.buffer).as_slice());
                if let Some(r) = rope {
                    all(&[r.x, r.k.0, r.v, r.ids]);
                    all(r.k.1.as_slice());
                    all(r.p.freq_factors.as_slice());
                }
            }
            Step::CoopAttention(a) => all(&a.t),
            Step::GateUp { w, x, outs, glu } => {
                all(w);
                all(&x.tensors());
                all(outs);
                if let Some((_, act)) = glu {
                    all(&[*act]);
                }
            }
            Step::MatVecs { w, outs, n, x, .. } => {
                all(&w[..*n]);
                all(&outs[..*n]);
                all(&x.tensors());
            }
            Step::CoopGateUp(g) => {
                all(&[g.w[0], g.w[1], g.joint.0, g.x, g.outs[0], g.outs[1]]);
                if let Some((_, act)) = g.glu {
                    all(&[act]);
                }
            }
            Step::MatVec { w, x, out } => {
                all(&[*w, *out]);
                all(x);
            }
            Step::RoundQ8 { x, q8 } => {
                all(&[*x]);
                all(q8);
            }
            Step::Half { x, half } => all(&[*x, *half]),
            Step::Scale { x, out, .. } => all(&[*x, *out]),
            Step::NormRope { q, pos, p, k } => {
                all(&[q.x, q.w, q.out, *pos]);
                all(p.freq_factors.as_slice());
                if let Some(k) = k.map(KHead::norm) {
                    all(&[k.x, k.w, k.out]);
                }
            }
            Step::Dispatch(d) => all(&d.bound),
        }
    }

    /// Calls `f` on outputs it writes whole without reading them first
    /// (a subset of `operands`; one left out only costs a write that
    /// could have been skipped).
    fn whole_outputs(&self, mut f: impl FnMut(Tensor)) {
        let mut all = |ts: &[Tensor]| ts.iter().copied().for_each(&mut f);
        match self {
            Step::Norm { out, .. }
            | Step::Glu { out, .. }
            | Step::Add { out, .. }
            | Step::Rope { out, .. }
            | Step::MatVec { out, .. } => all(&[*out]),
            Step::AddNorm(n) => all(&[n.sum, n.out]),
            Step::Ropes { q, k, .. } | Step::RopeStore { q, k, .. } => all(&[q.1, k.1]),
            Step::Attention { t, .. } | Step::CoopAttention(CoopAttention { t, .. }) => {
                all(&[t[5]])
            }
            Step::GateUp { outs, .. } => all(outs),
            Step::CoopGateUp(g) if g.keep => all(&g.outs),
            Step::MatVecs { outs, n, .. } => all(&outs[..*n]),
            Step::Scale { out, .. } => all(&[*out]),
            Step::NormRope { q, k, .. } => {
                all(&[q.out]);
                if let Some(k) = k {
                    all(&[k.norm().out]);
                }
            }
            Step::Dispatch(d) => all(d.whole.as_slice()),
            _ => {}
        }
    }

    /// Whether it reads Q8-rounded activations whose quants are `xq`.
    pub(super) fn reads_q8(&self, xq: Tensor) -> bool {
        match self {
            Step::Dispatch(d) => d.bound.iter().any(|t| t.id == xq.id),
            Step::MatVec { x, .. } => x[0].id == xq.id,
            Step::GateUp {
                x: DotIn::Q8(x), ..
            }
            | Step::MatVecs {
                x: DotIn::Q8(x), ..
            } => x[0].id == xq.id,
            _ => false,
        }
    }

    /// Whether its dispatch can round its output to Q8 for the next
    /// matmul (`fuse::round_q8`).
    pub(super) fn rounds_output(&self) -> bool {
        match *self {
            Step::Norm { q8: None, .. } | Step::Glu { .. } | Step::Attention { q8: None, .. } => {
                true
            }
            Step::GateUp { glu, .. } => glu.is_some(),
            _ => false,
        }
    }

    /// Its dispatch with `q8` (quants, scales, sums), the Q8 rounding of
    /// its output, written too (`rounds_output`).
    pub(super) fn rounded(&self, q8: [Tensor; 3], aux: Aux) -> Option<Step> {
        let d = match *self {
            Step::Norm { x, w, eps, out, .. } => {
                let q8 = Some(q8);
                return Some(Step::Norm { x, w, eps, out, q8 });
            }
            Step::Glu { op, gate, up, out } => elementwise::glu_q8(op, (gate, up, out), q8),
            Step::Attention {
                t,
                params,
                groups,
                rope,
                q8: None,
                parts,
            } => {
                let q8 = Some(q8);
                return Some(Step::Attention {
                    t,
                    params,
                    groups,
                    rope,
                    q8,
                    parts,
                });
            }
            Step::GateUp {
                w,
                x,
                outs,
                glu: Some(glu),
            } => matvec_blocks::gate_up_glu((w, x, outs), glu, Some(q8), aux),
            _ => return None,
        };
        Some(Step::Dispatch(d))
    }

    /// The dispatch of the op that also writes its output as `HalfBlocks`
    /// does, into `half`, for the next matmul on cooperative matrices:
    /// a GLU (`GluHalf`), an add and norm (`AddRmsNormHalf`), a prefill
    /// attention (`AttentionCoop` with `half`) or gate and up with their
    /// GLU; None for any other op.
    pub(super) fn half_dispatch(
        &self,
        half: Tensor,
        f: ShaderFeatures,
        aux: Aux,
    ) -> Option<Dispatch> {
        match *self {
            Step::Glu { op, gate, up, out } => {
                Some(elementwise::glu_half(op, (gate, up, out), half))
            }
            // Whole 16-byte words a row (norm_half.wgsl).
            Step::AddNorm(n)
                if AddRmsNormHalf {
                    sums: n.split.is_some(),
                }
                .builds_with(f)
                    && n.out.cols.is_multiple_of(4) =>
            {
                Some(n.call(Some(half)))
            }
            // Only a dispatch of every row writes every row's blocks.
            Step::CoopAttention(a) if a.params.row0 == 0 => Some(a.call(Some(half), aux)),
            Step::CoopGateUp(g) if g.glu.is_some() => Some(g.call(Some(half), aux)),
            _ => None,
        }
    }

    /// Its dispatches as they are, in order, to `emit`.
    pub(super) fn lower<E>(
        self,
        aux: Aux,
        emit: &mut impl FnMut(Dispatch) -> Result<(), E>,
    ) -> Result<(), E> {
        let d = match self {
            Step::Dispatch(d) => d,
            Step::RoundQ8 { x, q8 } => quantize::q8(x, q8),
            Step::Half { x, half } => copy::half_blocks(x, half),
            Step::Scale { x, s, out } => elementwise::dispatch(Elementwise::Scale, x, None, s, out),
            Step::NormRope { q, pos, ref p, k } => match k {
                None => norm_rope::dispatch(q, (pos, p), None, aux),
                Some(KHead::Roped(k, heads)) => {
                    norm_rope::dispatch(q, (pos, p), Some((k, heads)), aux)
                }
                // K's norm alone: its rope did not join.
                Some(KHead::Normed(k)) => {
                    emit(norm_rope::dispatch(q, (pos, p), None, aux))?;
                    norm::rms_norm(k.x, Some(k.w), k.eps, k.out, None)
                }
            },
            Step::Rope { x, pos, ref p, out } => rope::rope((x, pos, p, out), None, aux),
            Step::Ropes {
                q: (x, out),
                k,
                pos,
                ref p,
                store: None,
            } => rope::rope((x, pos, p, out), Some((k.0, k.2, k.1)), aux),
            Step::Ropes {
                q,
                k,
                pos,
                ref p,
                store: Some((ids, kc)),
            } => rope::rope_store((q, k, pos, p), (ids, kc), None, aux),
            Step::RopeStore {
                q,
                k,
                pos,
                ref p,
                ids,
                kc,
                v,
            } => rope::rope_store((q, k, pos, p), (ids, kc), Some(v), aux),
            Step::SetRows { src, ids, dst } => copy::set_rows((src, ids, dst), None),
            Step::CoopAttention(a) => a.call(None, aux),
            Step::CoopGateUp(g) => g.call(None, aux),
            Step::Attention {
                t,
                params,
                groups,
                rope,
                q8,
                parts,
            } => {
                // A split's parts read Q before its rope while the first
                // part writes it rotated: not where that is in place and
                // read later.
                let racing = rope.is_some_and(|r| r.keep_q && r.x.id == t[0].id);
                match (parts, rope, q8) {
                    (Some(parts), ..) if !racing => {
                        let [first, merge] =
                            attention::split((t, params, groups), parts, rope, q8, aux);
                        emit(first)?;
                        merge
                    }
                    (_, Some(rope), _) => attention::with_rope((t, params, groups), rope, q8, aux),
                    (_, None, Some(q8)) => attention::with_q8(t, params, groups, q8, aux),
                    (_, None, None) => {
                        let kernel = attention::AttentionKernel::Attention(t[1].dtype);
                        attention::dispatch(kernel, t, params, groups, aux)
                    }
                }
            }
            Step::MatVec { w, x, out } => matvec_blocks::dot((w, x, out), 0, None),
            Step::MatVecs {
                w,
                outs,
                n,
                x,
                rows,
            } => matvec_blocks::multi(&w[..n], x, &outs[..n], rows),
            Step::GateUp {
                w,
                x,
                outs,
                glu: None,
            } => matvec_blocks::multi(&w, x, &outs, outs[0].rows),
            Step::GateUp {
                w,
                x,
                outs,
                glu: Some(glu),
            } => matvec_blocks::gate_up_glu((w, x, outs), glu, None, aux),
            Step::Norm { x, w, eps, out, q8 } => norm::rms_norm(x, Some(w), eps, out, q8),
            Step::SplitSums(s) => s.call(),
            Step::Add { a, b, out, split } => {
                // The split's own adds first.
                if let Some(s) = split {
                    emit(s.call())?;
                }
                elementwise::dispatch(Elementwise::Add, a, Some(b), 0.0, out)
            }
            Step::AddNorm(n) => {
                if let Some(s) = n.split {
                    emit(s.call())?;
                }
                n.call(None)
            }
            Step::Glu { op, gate, up, out } => elementwise::dispatch(op, gate, Some(up), 0.0, out),
        };
        emit(d)
    }
}
