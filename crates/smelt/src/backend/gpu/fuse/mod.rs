//! The fusion pass: the tape (`tape.rs`) into dispatches. It walks the
//! steps in order holding the last one back; a rule joins the held step
//! and the next into one step where both are one dispatch, else the held
//! step is lowered as it is and the next is held. Each rule is a pure
//! pattern over two neighbouring steps (and the steps after them, where
//! it asks `live` or, as `norm_matvec` and `norm_rope` do, looks ahead),
//! in its own file:
//!
//! - `round_q8`: a norm, GLU, decode attention or gate/up with their GLU,
//!   with the next matmul's Q8 rounding of its output;
//! - `norm_matvec`: a norm taken whole into the repacked decode mat-vecs
//!   of its output (f32 mode);
//! - `half_blocks`: the op before a coop matmul writing its f16 blocks;
//! - `gate_up_glu`: gate and up (mat-vecs or coop tiles) with their GLU;
//! - `residual`: a residual add into the mat-vec before it, a split
//!   matmul's sums into the add after it, an add with the norm after it,
//!   a post-norm with the add after it;
//! - `rope_store`: Q's and K's ropes, then K's and V's cache writes, then
//!   the decode attention after them; two cache writes alike;
//! - `norm_rope`: a head norm and the rope of its output, Q's and K's
//!   together (f32 mode).
//!
//! `live` tells which outputs nothing on the tape reads after them: a
//! held step leaves those unwritten where its kernel can.

mod gate_up_glu;
mod half_blocks;
mod live;
mod norm_matvec;
mod norm_rope;
mod residual;
mod rope_store;
mod round_q8;

use std::collections::HashSet;

use super::kernels::{Aux, Dispatch, ShaderFeatures};
use super::tape::Step;

/// What the rules ask of the adapter and the buffers.
#[derive(Clone, Copy)]
pub(super) struct Cx<'a> {
    pub features: ShaderFeatures,
    /// ggml's exact mode (`GpuOptions::exact`).
    pub quantize_activations: bool,
    pub max_storage_buffers: u32,
    pub aux: Aux,
    /// The ids of scratch buffers (`Backend::alloc_scratch`).
    pub scratch: &'a HashSet<u32>,
}

/// What a pass did besides its dispatches.
#[derive(Default)]
pub(super) struct Passed {
    /// A Q8 rounding was joined away (`norm_matvec`): its buffers do not
    /// hold it.
    pub dropped_rounding: bool,
}

/// Lowers `steps` (emptied, its capacity kept) to `emit`, joining what
/// the rules join.
pub(super) fn pass<E>(
    steps: &mut Vec<Step>,
    cx: &Cx,
    mut emit: impl FnMut(Dispatch) -> Result<(), E>,
) -> Result<Passed, E> {
    let mut passed = Passed::default();
    let mut held: Option<Step> = None;
    let mut rest = steps.drain(..);
    while let Some(next) = rest.next() {
        let step = match held {
            None => next,
            Some(h) => match join(&h, &next, rest.as_slice(), cx, &mut passed) {
                Some(joined) => joined,
                None => {
                    h.lower(cx.aux, &mut emit)?;
                    next
                }
            },
        };
        // Before a rule joins it with what follows, which may fix what
        // it writes.
        held = Some(live::trim(step, rest.as_slice(), cx));
    }
    drop(rest);
    if let Some(h) = held {
        h.lower(cx.aux, &mut emit)?;
    }
    Ok(passed)
}

/// The held step and the next as one step, by the first rule that joins
/// them.
fn join(held: &Step, next: &Step, later: &[Step], cx: &Cx, passed: &mut Passed) -> Option<Step> {
    if let Some(s) = norm_matvec::join(held, next, later, cx) {
        passed.dropped_rounding = true;
        return Some(s);
    }
    norm_rope::join(held, next, later, cx)
        .or_else(|| residual::post_norm(held, next, later, cx))
        .or_else(|| round_q8::join(held, next, cx))
        .or_else(|| half_blocks::join(held, next, cx))
        .or_else(|| gate_up_glu::join(held, next))
        .or_else(|| residual::join(held, next))
        .or_else(|| rope_store::join(held, next, later, cx))
}

/// Whether a norm, GLU or attention may join the op after it that reads
/// its output (as Q8 or f16 blocks): in a mode that rounds, its output
/// whole blocks of 32, and not in place.
fn holds(step: &Step, cx: &Cx) -> bool {
    let rounds = cx.quantize_activations || cx.features.fast_math;
    let (out, in_place) = match step {
        Step::Norm { x, out, .. } => (*out, x.id == out.id),
        Step::Glu { gate, up, out, .. } => (*out, gate.id == out.id || up.id == out.id),
        // A decode attention's heads whole blocks of 32 too.
        Step::Attention { t, params, .. } if params.head_dim.is_multiple_of(32) => {
            (t[5], t[0].id == t[5].id)
        }
        Step::Attention { .. } => return false,
        Step::CoopAttention(a) => (a.t[5], a.t[0].id == a.t[5].id),
        _ => return true,
    };
    rounds && out.cols.is_multiple_of(32) && !in_place
}

/// Hand-built tapes for the rules' tests.
#[cfg(test)]
mod testing {
    use super::{Cx, pass};
    use crate::backend::Tensor;
    use crate::backend::gpu::kernels::{Aux, Kernel, ShaderFeatures};
    use crate::backend::gpu::tape::Step;
    use crate::quant::GgmlType;
    use std::collections::HashSet;

    /// Tensor `id`, `rows × cols` F32.
    pub fn t(id: u32, rows: usize, cols: usize) -> Tensor {
        typed(id, GgmlType::F32, rows, cols)
    }

    pub fn typed(id: u32, dtype: GgmlType, rows: usize, cols: usize) -> Tensor {
        Tensor {
            id,
            dtype,
            rows,
            cols,
        }
    }

    /// Q8 rounding buffers of `n` values (quants, scales, sums).
    pub fn q8(id: u32, n: usize) -> [Tensor; 3] {
        [
            typed(id, GgmlType::I32, 1, n / 4),
            t(id + 1, 1, n / 32),
            t(id + 2, 1, n / 32),
        ]
    }

    /// The f32 mode (`fast_math`) or ggml's exact mode, no buffer
    /// scratch.
    pub fn cx(fast_math: bool) -> Cx<'static> {
        static NONE: std::sync::LazyLock<HashSet<u32>> = std::sync::LazyLock::new(HashSet::new);
        cx_with(fast_math, &NONE)
    }

    /// `cx` with the buffers of `scratch` scratch.
    pub fn cx_with(fast_math: bool, scratch: &HashSet<u32>) -> Cx<'_> {
        Cx {
            features: ShaderFeatures {
                subgroups: true,
                shader_f16: true,
                fast_math,
                ..ShaderFeatures::default()
            },
            quantize_activations: !fast_math,
            max_storage_buffers: 16,
            aux: Aux {
                dummy: t(1000, 1, 4),
                tables: t(1001, 1, 4),
            },
            scratch,
        }
    }

    /// The kernels the pass dispatches for `steps`, in order.
    pub fn kernels(steps: Vec<Step>, cx: &Cx) -> Vec<Kernel> {
        let mut steps = steps;
        let mut out = Vec::new();
        pass(&mut steps, cx, |d| {
            out.push(d.kernel);
            Ok::<(), ()>(())
        })
        .expect("no error to emit");
        assert!(steps.is_empty(), "the pass empties the tape");
        out
    }
}
