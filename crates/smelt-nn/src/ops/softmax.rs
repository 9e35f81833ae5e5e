//! Softmax over the last dimension, and softmax cross-entropy per row of
//! logits `[N, C]` against class labels `[N]` (class indices as f32).
//!
//! Per row: `m = max x`, `s = Σ exp(x − m)` in order; softmax is
//! `exp(x − m) / s`, the loss `m + ln s − x[label]`. Gradients:
//! softmax `y · (dy − Σ dy·y)` (the sum in order), cross-entropy
//! `(exp(x − m) / s − onehot) · dloss`.

use crate::cpu::vmath;
use crate::cpu::{Cx, par_chunks};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Io, Op, Shapes};

fn rows_cols(s: &[usize]) -> (usize, usize) {
    let cols = *s.last().unwrap_or(&1);
    (s.iter().product::<usize>() / cols.max(1), cols)
}

pub fn infer_softmax(s: &[&[usize]]) -> Result<Vec<Shape>> {
    Ok(vec![s[0].to_vec()])
}

pub fn infer_softmax_grad(s: &[&[usize]]) -> Result<Vec<Shape>> {
    if s[0] != s[1] {
        return shape_err("softmax_grad", format!("{:?} and {:?} differ", s[0], s[1]));
    }
    Ok(vec![s[0].to_vec()])
}

pub fn infer_ce(s: &[&[usize]]) -> Result<Vec<Shape>> {
    match (s[0], s[1]) {
        ([n, c], [nl]) if n == nl && *c > 0 => Ok(vec![vec![*n]]),
        _ => shape_err(
            "cross_entropy",
            format!(
                "logits {:?} and labels {:?}: want [N, C] and [N]",
                s[0], s[1]
            ),
        ),
    }
}

pub fn infer_ce_grad(s: &[&[usize]]) -> Result<Vec<Shape>> {
    match (s[0], s[1], s[2]) {
        ([n0], [n, _], [n2]) if n0 == n && n == n2 => Ok(vec![s[1].to_vec()]),
        _ => shape_err("cross_entropy_grad", format!("{s:?}")),
    }
}

pub fn backward_softmax(g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    let Some(dy) = b.grads[0] else {
        return Ok(vec![None]);
    };
    Ok(vec![Some(g.node1(Op::SoftmaxGrad, &[dy, b.outputs[0]])?)])
}

pub fn backward_ce(g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    let Some(dl) = b.grads[0] else {
        return Ok(vec![None, None]);
    };
    if b.needs[1] {
        return Err(crate::error::NnError::Graph(
            "cross_entropy: labels have no gradient".into(),
        ));
    }
    Ok(vec![
        Some(g.node1(Op::CrossEntropyGrad, &[dl, b.inputs[0], b.inputs[1]])?),
        None,
    ])
}

/// Rows whose sums run side by side: each row's terms are still added in
/// order, but the rows' chains of dependent additions interleave.
const ROWS: usize = 8;

/// Each row's max `m` and `s = Σ exp(x − m)` (added in order) of up to
/// `ROWS` rows of `cols` (`x`), leaving `exp(x − m)` in `e`
/// (`vmath::exp`).
fn block_exps(x: &[f32], cols: usize, e: &mut [f32]) -> ([f32; ROWS], [f32; ROWS]) {
    let (mut m, mut s) = ([0f32; ROWS], [0f32; ROWS]);
    for ((mr, xr), er) in m
        .iter_mut()
        .zip(x.chunks_exact(cols))
        .zip(e.chunks_exact_mut(cols))
    {
        *mr = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for (ev, &v) in er.iter_mut().zip(xr) {
            *ev = v - *mr;
        }
    }
    vmath::exp(e);
    let rows = e.len() / cols;
    if rows == ROWS {
        for c in 0..cols {
            for (r, sr) in s.iter_mut().enumerate() {
                *sr += e[r * cols + c];
            }
        }
    } else {
        for (sr, er) in s.iter_mut().zip(e.chunks_exact(cols)) {
            for &v in er {
                *sr += v;
            }
        }
    }
    (m, s)
}

pub fn cpu_softmax(cx: &mut Cx, io: &mut Io) {
    let (_, cols) = rows_cols(&io.shapes.ins[0]);
    let x = io.ins[0];
    par_chunks(cx, &mut *io.outs[0], cols * ROWS, &|start, out| {
        let (_, s) = block_exps(&x[start..][..out.len()], cols, out);
        for (y, s) in out.chunks_exact_mut(cols).zip(s) {
            for yv in y.iter_mut() {
                *yv /= s;
            }
        }
    });
}

pub fn cpu_ce(cx: &mut Cx, io: &mut Io) {
    let (_, cols) = rows_cols(&io.shapes.ins[0]);
    let (x, labels) = (io.ins[0], io.ins[1]);
    par_chunks(cx, &mut *io.outs[0], 8 * ROWS, &|start, out| {
        let mut e = vec![0f32; cols * ROWS];
        for (b, losses) in out.chunks_mut(ROWS).enumerate() {
            let first = start + b * ROWS;
            let xb = &x[first * cols..][..losses.len() * cols];
            let (m, s) = block_exps(xb, cols, &mut e[..xb.len()]);
            for (r, l) in losses.iter_mut().enumerate() {
                let label = labels[first + r] as usize;
                *l = m[r] + s[r].ln() - xb[r * cols + label];
            }
        }
    });
}

pub fn cpu_ce_grad(cx: &mut Cx, io: &mut Io) {
    let (_, cols) = rows_cols(&io.shapes.ins[1]);
    let (dl, x, labels) = (io.ins[0], io.ins[1], io.ins[2]);
    par_chunks(cx, &mut *io.outs[0], cols * ROWS, &|start, out| {
        let first = start / cols;
        let (_, s) = block_exps(&x[start..][..out.len()], cols, out);
        for (r, (dx, s)) in out.chunks_exact_mut(cols).zip(s).enumerate() {
            let row = first + r;
            let label = labels[row] as usize;
            for (c, d) in dx.iter_mut().enumerate() {
                let onehot = if c == label { 1.0 } else { 0.0 };
                *d = (*d / s - onehot) * dl[row];
            }
        }
    });
}

pub fn cpu_softmax_grad(cx: &mut Cx, io: &mut Io) {
    let (_, cols) = rows_cols(&io.shapes.ins[0]);
    let (dy, y) = (io.ins[0], io.ins[1]);
    par_chunks(cx, &mut *io.outs[0], cols * 8, &|start, out| {
        for (r, dx) in out.chunks_mut(cols).enumerate() {
            let (dyr, yr) = (
                &dy[start + r * cols..][..cols],
                &y[start + r * cols..][..cols],
            );
            let mut dot = 0.0f32;
            for (a, b) in dyr.iter().zip(yr) {
                dot += a * b;
            }
            for ((d, &a), &b) in dx.iter_mut().zip(dyr).zip(yr) {
                *d = b * (a - dot);
            }
        }
    });
}

pub fn gpu(define: &'static str, s: &Shapes) -> Vec<Dispatch> {
    let (rows, cols) = rows_cols(&s.outs[0]);
    let (rows, cols) = if define == "CE" {
        rows_cols(&s.ins[0])
    } else {
        (rows, cols)
    };
    let p = RowParams {
        rows: rows as u32,
        cols: cols as u32,
        pad: [0; 2],
    };
    let binds = match define {
        "CE_GRAD" => vec![Bind::In(0), Bind::In(1), Bind::In(2), Bind::Out(0)],
        _ => vec![Bind::In(0), Bind::In(1), Bind::Out(0)],
    };
    let binds = if define == "SOFTMAX" {
        vec![Bind::In(0), Bind::Out(0)]
    } else {
        binds
    };
    vec![Dispatch::new(
        Kernel::new("softmax", &[define]),
        bytemuck::bytes_of(&p),
        binds,
        groups_1d(rows, 64),
    )]
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RowParams {
    pub rows: u32,
    pub cols: u32,
    pub pad: [u32; 2],
}

pub const ROW_FIELDS: &[&str] = &["rows", "cols", "pad"];
