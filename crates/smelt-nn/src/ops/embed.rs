//! Embedding: rows of a table `[V, D]` gathered by indices (any shape, as
//! f32 integers) into `ids.shape + [D]`; its gradient sums gradient rows
//! into the table's rows, for each table row over the indices in order.

use crate::cpu::{Cx, par_chunks};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Io, Op, Shapes};

pub fn infer(s: &[&[usize]]) -> Result<Vec<Shape>> {
    let [_, d] = s[0] else {
        return shape_err("embedding", format!("table {:?} is not [V, D]", s[0]));
    };
    let mut out = s[1].to_vec();
    out.push(*d);
    Ok(vec![out])
}

pub fn infer_grad(vocab: usize, s: &[&[usize]]) -> Result<Vec<Shape>> {
    let d = *s[0].last().unwrap_or(&0);
    let n: usize = s[1].iter().product();
    if s[0].iter().product::<usize>() != n * d || vocab == 0 {
        return shape_err("embedding_grad", format!("{s:?}"));
    }
    Ok(vec![vec![vocab, d]])
}

pub fn backward(g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    let Some(dy) = b.grads[0] else {
        return Ok(vec![None, None]);
    };
    if b.needs[1] {
        return Err(crate::error::NnError::Graph(
            "embedding: indices have no gradient".into(),
        ));
    }
    let vocab = g.shape(b.inputs[0])[0];
    Ok(vec![
        Some(g.node1(Op::GatherGrad { vocab }, &[dy, b.inputs[1]])?),
        None,
    ])
}

pub fn cpu(cx: &mut Cx, io: &mut Io) {
    let d = io.shapes.ins[0][1];
    let (table, ids) = (io.ins[0], io.ins[1]);
    par_chunks(cx, &mut *io.outs[0], d * 16, &|start, out| {
        for (r, row) in out.chunks_mut(d).enumerate() {
            let id = ids[start / d + r] as usize;
            row.copy_from_slice(&table[id * d..][..d]);
        }
    });
}

/// Each table row sums the gradients of the ids that read it, in order of
/// the ids; a task takes a run of rows and scans the ids once for them.
pub fn cpu_grad(cx: &mut Cx, io: &mut Io) {
    let d = io.shapes.outs[0][1];
    let vocab = io.shapes.outs[0][0];
    let (dy, ids) = (io.ins[0], io.ins[1]);
    let rows = vocab.div_ceil(4 * cx.pool.n_threads()).max(1);
    par_chunks(cx, &mut *io.outs[0], d * rows, &|start, out| {
        out.fill(0.0);
        let first = start / d;
        let range = first as f32..(first + out.len() / d) as f32;
        for (n, &id) in ids.iter().enumerate() {
            if range.contains(&id) {
                let row = &mut out[(id as usize - first) * d..][..d];
                for (o, &g) in row.iter_mut().zip(&dy[n * d..][..d]) {
                    *o += g;
                }
            }
        }
    });
}

pub fn gpu(grad: bool, s: &Shapes) -> Vec<Dispatch> {
    let (d, n_ids, vocab) = if grad {
        (
            s.outs[0][1],
            s.ins[1].iter().product::<usize>(),
            s.outs[0][0],
        )
    } else {
        (s.ins[0][1], s.ins[1].iter().product::<usize>(), s.ins[0][0])
    };
    let p = EmbedParams {
        dim: d as u32,
        ids: n_ids as u32,
        vocab: vocab as u32,
        pad: 0,
    };
    let threads = if grad { vocab * d } else { n_ids * d };
    vec![Dispatch::new(
        Kernel::new("embed", &[if grad { "GRAD" } else { "GATHER" }]),
        bytemuck::bytes_of(&p),
        vec![Bind::In(0), Bind::In(1), Bind::Out(0)],
        groups_1d(threads, 64),
    )]
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EmbedParams {
    pub dim: u32,
    pub ids: u32,
    pub vocab: u32,
    pub pad: u32,
}

pub const EMBED_FIELDS: &[&str] = &["dim", "ids", "vocab", "pad"];
