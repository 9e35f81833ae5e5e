//! The matmul ops on the GPU: which kernel takes a matmul (by weight type,
//! tokens and the adapter's features), split weights, and the matmuls of
//! one input (`Backend::matmuls`) as one dispatch.
//!
//! - Up to `GpuBackend::matvec_max_tokens` tokens: a mat-vec (`matvec`), or in ggml's
//!   mode the legacy quants' integer lanes (`matmul_q8`), or in the f32
//!   mode the quants on Q8 blocks (`matvec_blocks`, a step the residual
//!   add after it may join).
//! - Above: 64 × 64 tiles (`matmul`), or cooperative matrices
//!   (`matmul_coop`) on the adapter's tiles, split along k where the tiles
//!   are too few, and gate and up a step the GLU after them may join.

use crate::backend::check as contract;
use crate::backend::{Backend, BackendError, Op, Result, Tensor};
use crate::quant::GgmlType;

use super::acts::{self, MatIn};
use super::kernels::elementwise::Elementwise;
use super::kernels::matmul_coop::{self, CoopGateUp, CoopTile, Multi};
use super::kernels::matvec_blocks::{self, DotIn};
use super::kernels::split_sums::Split;
use super::kernels::{Dispatch, Family, matmul_q8, matvec};
use super::tape::Step;
use super::{GpuBackend, kernels};

/// Whether a matmul of `x` by a `w` weight is a decode (f32 mode) on
/// Q8-rounded activations with integer dot products (`MatVecDot`,
/// `MatVecMulti`).
pub(super) fn dot_decode(be: &GpuBackend, w: GgmlType, x: Tensor) -> bool {
    be.ctx.features.dots(w) && x.rows <= be.matvec_max_tokens()
}

/// `out = x · wᵀ`, checked: a split weight a part at a time, each part
/// computing its columns of `out` from one shared rounding of `x`.
pub(super) fn matmul(be: &mut GpuBackend, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
    match be.buffers.parts(w).map(<[_]>::to_vec) {
        // A step for a residual add after it to join.
        None if dot_decode(be, w.dtype, x) && x.id != out.id => {
            let MatIn::Q8(q8) = acts::matmul_input(be, w.dtype, x)? else {
                return Err(BackendError::Other(
                    "matmul: Q8 activations expected".into(),
                ));
            };
            be.record(Step::MatVec { w, x: q8, out });
            Ok(())
        }
        None => matmul_cols(be, w, x, out, 0),
        Some(parts) => parts
            .into_iter()
            .try_for_each(|(part, row0)| matmul_cols(be, part, x, out, row0)),
    }
}

/// `outs[i] = x · ws[i]ᵀ`: as one dispatch where the kernels can
/// (`MatVecMulti`, coop multi dispatches, gate and up for the GLU),
/// each on its own otherwise.
pub(super) fn matmuls(
    be: &mut GpuBackend,
    ws: &[Tensor],
    x: Tensor,
    outs: &[Tensor],
) -> Result<()> {
    // Gate and up on cooperative matrices, for the GLU after them.
    if let Some(g) = coop_gate_up(be, ws, x, outs)? {
        be.record(Step::CoopGateUp(g));
        return Ok(());
    }
    let coop = multi_coop(be, ws, x, outs);
    if coop.is_none() && !multi_matvec(be, ws, x, outs) {
        // Decode of weights of two types that one dispatch cannot take
        // (`matvec_blocks::multi_types`): the leading run of one type in
        // one dispatch.
        let run = ws.iter().take_while(|w| w.dtype == ws[0].dtype).count();
        let lead = run >= 2 && multi_matvec(be, &ws[..run], x, &outs[..run]);
        if lead && run < ws.len() {
            matmuls(be, &ws[..run], x, &outs[..run])?;
            for (&w, &out) in ws[run..].iter().zip(&outs[run..]) {
                be.matmul(w, x, out)?;
            }
            return Ok(());
        }
        for (&w, &out) in ws.iter().zip(outs) {
            be.matmul(w, x, out)?;
        }
        return Ok(());
    }
    for (&w, &out) in ws.iter().zip(outs) {
        be.require(Op::MatMul, w.dtype)?;
        contract::matmul(w, x, out)?;
    }
    // Prefill: the weights before `first` alone (none is split).
    if let Some((first, tile)) = coop {
        for (&w, &out) in ws[..first].iter().zip(outs) {
            matmul_cols(be, w, x, out, 0)?;
        }
        return matmuls_coop(be, &ws[first..], x, &outs[first..], tile);
    }
    let gate_up = match (ws, outs) {
        ([w0, w1], [o0, o1]) if w0.rows == w1.rows && w0.rows.is_multiple_of(32) => {
            Some(([*w0, *w1], [*o0, *o1]))
        }
        _ => None,
    };
    // x's Q8 rounding (the norm before it may take its place:
    // `fuse::norm_matvec`).
    let MatIn::Q8([xq, xd, _]) = acts::matmul_input(be, ws[0].dtype, x)? else {
        return Err(BackendError::Other(
            "matmuls: Q8 activations expected".into(),
        ));
    };
    let x_in = DotIn::Q8([xq, xd]);
    if let Some((w, outs)) = gate_up {
        be.record(Step::GateUp {
            w,
            x: x_in,
            outs,
            glu: None,
        });
        return Ok(());
    }
    let n = ws.len();
    let (mut w, mut o) = ([ws[0]; 3], [outs[0]; 3]);
    w[..n].copy_from_slice(ws);
    o[..n].copy_from_slice(outs);
    be.record(Step::MatVecs {
        w,
        outs: o,
        n,
        x: x_in,
        rows: x.rows,
    });
    Ok(())
}

/// Whether `matmuls` can be one `MatVecMulti` dispatch: decode (up to
/// `matvec_max_tokens` rows) of 2 or 3 weights of one width, of one type
/// that `matvec_blocks` takes or with a third of another
/// (`matvec_blocks::multi_types`), none split, outputs of their own.
fn multi_matvec(be: &GpuBackend, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> bool {
    let f = be.ctx.features;
    x.rows <= be.matvec_max_tokens()
        && multi_alike(be, ws, x, outs, |t| f.dots(t), matvec_blocks::multi_types)
}

/// Whether `matmuls` runs multi `MatMulCoop` dispatches: prefill (f32
/// activations) on cooperative matrices of 2 or 3 repacked weights as
/// `multi_matvec` takes them; then which of them together, on which
/// tile (`CoopTile::group`).
fn multi_coop(
    be: &GpuBackend,
    ws: &[Tensor],
    x: Tensor,
    outs: &[Tensor],
) -> Option<(usize, CoopTile)> {
    let f = be.ctx.features;
    let fits = !be.ctx.quantize_activations
        && x.rows > be.matvec_max_tokens()
        && f.coop != 0
        && x.cols.is_multiple_of(32)
        && multi_alike(be, ws, x, outs, |t| f.repacks(t), |_, _| false);
    if !fits {
        return None;
    }
    let rows: Vec<usize> = ws.iter().map(|w| w.rows).collect();
    CoopTile::group(f.coop, &rows, x.rows, be.ctx.coop_huge)
}

/// Gate and up as `Step::CoopGateUp`: prefill on cooperative
/// matrices, as `multi_coop` takes it, of two weights of the same rows
/// (a multiple of 32), each on huge tiles, joined in one buffer; None
/// for anything else.
fn coop_gate_up(
    be: &mut GpuBackend,
    ws: &[Tensor],
    x: Tensor,
    outs: &[Tensor],
) -> Result<Option<CoopGateUp>> {
    let f = be.ctx.features;
    let (&[w0, w1], &[o0, o1]) = (ws, outs) else {
        return Ok(None);
    };
    let kernel = matmul_coop::MatMulCoop {
        t: w0.dtype,
        tile: CoopTile::Huge,
        multi: Multi::Glu(Elementwise::SiluMul),
    };
    let fits = !be.ctx.quantize_activations
        && x.rows > be.matvec_max_tokens()
        && x.cols.is_multiple_of(32)
        && kernel.builds_with(f)
        && w0.rows == w1.rows
        && w0.rows.is_multiple_of(32)
        && CoopTile::pick(f.coop, w0.rows, x.rows, be.ctx.coop_huge) == CoopTile::Huge
        && multi_alike(be, ws, x, outs, |t| f.repacks(t), |_, _| false);
    let joint = match be.buffers.joint(ws) {
        Some((joint, firsts)) if fits => (joint, [firsts[0], firsts[1]]),
        _ => return Ok(None),
    };
    for (&w, &out) in ws.iter().zip(outs) {
        be.require(Op::MatMul, w.dtype)?;
        contract::matmul(w, x, out)?;
    }
    Ok(Some(CoopGateUp {
        w: [w0, w1],
        joint,
        x: acts::half_input(be, x)?,
        outs: [o0, o1],
        glu: None,
        keep: true,
        tile: f.coop_tile(CoopTile::Huge),
        row_bytes: be.row_param(w0.dtype, w0.cols),
    }))
}

/// 2 or 3 weights of one width, of types that `takes`, none split, and
/// outputs of their own: of one type, or the third of a type that
/// `third(first's, its)` allows.
fn multi_alike(
    be: &GpuBackend,
    ws: &[Tensor],
    x: Tensor,
    outs: &[Tensor],
    takes: impl Fn(GgmlType) -> bool,
    third: impl Fn(GgmlType, GgmlType) -> bool,
) -> bool {
    let alike = |i: usize, t0: GgmlType, t: GgmlType| t == t0 || (i == 2 && third(t0, t));
    let w0 = ws.first().copied();
    (2..=3).contains(&ws.len())
        && ws.len() == outs.len()
        && w0.is_some_and(|w0| {
            ws.iter().enumerate().all(|(i, w)| {
                alike(i, w0.dtype, w.dtype)
                    && w.cols == w0.cols
                    && takes(w.dtype)
                    && be.buffers.parts(*w).is_none()
            })
        })
        && outs
            .iter()
            .enumerate()
            .all(|(i, o)| o.id != x.id && outs[..i].iter().all(|p| p.id != o.id))
}

/// The matmuls of `multi_coop` in one dispatch on its tile: the weights'
/// tiles along m one after the other.
fn matmuls_coop(
    be: &mut GpuBackend,
    ws: &[Tensor],
    x: Tensor,
    outs: &[Tensor],
    tile: CoopTile,
) -> Result<()> {
    let w = ws[0];
    let row_bytes = be.row_param(w.dtype, w.cols);
    let half = acts::half_input(be, x)?;
    for &out in outs {
        be.acts.wrote(out);
    }
    // Weights side by side in one buffer are bound once.
    let joint = be.buffers.joint(ws);
    let fs = be.ctx.features.coop;
    be.run(matmul_coop::multi(
        (ws, half, outs),
        (tile, fs),
        row_bytes,
        joint,
    ))
}

/// `out[:, o0 .. o0 + w.rows] = x · wᵀ`: the whole matmul (o0 = 0), or
/// one part of a split weight. `out` rows are `out.cols` wide.
fn matmul_cols(be: &mut GpuBackend, w: Tensor, x: Tensor, out: Tensor, o0: usize) -> Result<()> {
    let (m, k, n) = (w.rows, w.cols, x.rows);
    let row_bytes = be.row_param(w.dtype, k);
    let input = acts::matmul_input(be, w.dtype, x)?;
    be.acts.wrote(out);
    let decode = n <= be.matvec_max_tokens();
    let f = be.ctx.features;
    // The whole matmul writes all of `out` and reads none of it.
    let whole = o0 == 0 && out.cols == m;
    let mark = |d: Dispatch| if whole { d.writing(out) } else { d };
    match input {
        // f32 mode's decode on integer dots (a part of a split weight).
        MatIn::Q8(q8) if f.dots(w.dtype) => {
            be.run(mark(matvec_blocks::dot((w, q8, out), o0, None)))
        }
        // ggml's integer lanes.
        MatIn::Q8(q8) => {
            let decode = n <= matmul_q8::MATVEC_Q8_TOKENS;
            be.run(mark(matmul_q8::dispatch(
                w,
                q8,
                out,
                (o0, row_bytes),
                decode,
            )))
        }
        MatIn::F32(x) if decode => be.run(mark(matvec::dispatch(w, x, out, o0, row_bytes))),
        MatIn::F32(x) if f.coop != 0 && k.is_multiple_of(32) => {
            let huge = be.ctx.coop_huge;
            let tile = CoopTile::pick(f.coop, m, n, huge);
            // Split where the output is one run of whole 16-byte words
            // (`SplitSums`).
            let len = n * m;
            let (tile, parts) = if whole && len.is_multiple_of(4) {
                tile.split(f.coop, m, n, k, huge)
            } else {
                (tile, 1)
            };
            let x = acts::half_input(be, x)?;
            let t = (w, x, out);
            if parts == 1 {
                let d = matmul_coop::one(t, (o0, row_bytes), (tile, f.coop), None);
                return be.run(mark(d));
            }
            // The other parts' sums, then added to the first's, a step
            // for the residual add after it to join (`Step::SplitSums`).
            let sums = acts::split_sums(be, (parts - 1) * len)?.reshape((parts - 1) * n, m);
            let split = Some((sums, parts));
            let d = matmul_coop::one(t, (o0, row_bytes), (tile, f.coop), split);
            be.run(mark(d))?;
            let keep = true;
            be.record(Step::SplitSums(Split {
                out,
                sums,
                parts,
                keep,
            }));
            Ok(())
        }
        MatIn::F32(x) => be.run(mark(kernels::matmul::dispatch(w, x, out, o0, row_bytes))),
    }
}
