//! `SumTo`: sums a tensor down to the `count` values a broadcast reads
//! (`Bcast`): output `j` is the sum of the elements `i` with
//! `(i / inner) % count == j`. It is the gradient of every broadcast read
//! (bias, normalisation statistics, scalars) and the reduction of the norms.
//!
//! Order: for each outer block `q` in turn, the block's `inner` consecutive
//! elements are summed in order (from zero), and that partial is added to
//! the running total (from zero).

use crate::cpu::{Cx, par_chunks};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Bcast, Io, MapOp, Shapes};

pub fn infer(b: &Bcast, s: &[&[usize]]) -> Result<Vec<Shape>> {
    let n: usize = s[0].iter().product();
    let period = b.inner.saturating_mul(b.count);
    if b.inner == 0 || b.count == 0 || period > n || !n.is_multiple_of(period) {
        return shape_err("sum_to", format!("{:?} cannot be summed to {b:?}", s[0]));
    }
    Ok(vec![vec![b.count]])
}

pub fn backward(b: &Bcast, g: &mut Graph, bw: &Backward) -> Result<Vec<Option<Value>>> {
    let Some(dy) = bw.grads[0] else {
        return Ok(vec![None]);
    };
    let shape = g.shape(bw.inputs[0]).to_vec();
    let m = MapOp {
        code: vec![crate::ops::Instr::Input(0)],
        bcast: vec![*b],
        shape,
    };
    Ok(vec![Some(g.map(m, &[dy])?)])
}

/// One output of the canonical sum.
#[inline]
fn sum_one(x: &[f32], b: &Bcast, j: usize) -> f32 {
    let period = b.inner * b.count;
    let mut total = 0.0f32;
    for q in 0..x.len() / period {
        let run = &x[q * period + j * b.inner..][..b.inner];
        let mut partial = 0.0f32;
        for &v in run {
            partial += v;
        }
        total += partial;
    }
    total
}

pub fn cpu(b: &Bcast, cx: &mut Cx, io: &mut Io) {
    let x = io.ins[0];
    par_chunks(cx, &mut *io.outs[0], 16, &|start, out| {
        for (k, o) in out.iter_mut().enumerate() {
            *o = sum_one(x, b, start + k);
        }
    });
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SumToParams {
    pub inner: u32,
    pub count: u32,
    pub outer: u32,
    pub pad: u32,
}

pub const SUM_TO_FIELDS: &[&str] = &["inner", "count", "outer", "pad"];

pub fn gpu(b: &Bcast, s: &Shapes) -> Vec<Dispatch> {
    let n: usize = s.ins[0].iter().product();
    let p = SumToParams {
        inner: b.inner as u32,
        count: b.count as u32,
        outer: (n / (b.inner * b.count)) as u32,
        pad: 0,
    };
    vec![Dispatch::new(
        Kernel::new("reduce", &[]),
        bytemuck::bytes_of(&p),
        vec![Bind::In(0), Bind::Out(0)],
        groups_1d(b.count, 64),
    )]
}
