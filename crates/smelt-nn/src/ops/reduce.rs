//! `SumTo`: sums a tensor down to the `count` values a broadcast reads
//! (`Bcast`): output `j` is the sum of the elements `i` with
//! `(i / inner) % count == j`. It is the gradient of every broadcast read
//! (bias, normalisation statistics, scalars) and the reduction of the norms.
//!
//! Order (a fixed tree, the same on both backends): output `j` has
//! `L = outer · inner` terms, term `e` being element
//! `(e / inner) · inner · count + j · inner + e % inner`. `W = lanes(L)`
//! lanes (a power of two, about `L / TERMS_PER_LANE`, at most `LANES`)
//! each sum the terms `e ≡ lane (mod W)` in order of `e` from zero; then
//! the lanes are halved in place, `lane[t] += lane[t + s]` for `t < s`,
//! `s = W/2, W/4, …, 1`, and `lane[0]` is the output. On the GPU a lane is
//! an invocation and the halving runs in workgroup memory; `LANES / W`
//! outputs share a workgroup.

use std::ops::Range;

use crate::cpu::{Cx, par_chunks};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Bcast, Io, MapOp, Shapes};

/// Lanes of the widest tree: one workgroup of `reduce.wgsl`.
pub const LANES: usize = 256;

/// Terms a lane sums on its own before the tree: enough serial work to
/// pay for a lane, few enough that long sums spread over many lanes.
const TERMS_PER_LANE: usize = 8;

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

/// The tree's width for `terms` terms per output.
pub fn lanes(terms: usize) -> usize {
    terms
        .div_ceil(TERMS_PER_LANE)
        .next_power_of_two()
        .min(LANES)
}

/// One output by the tree.
fn sum_one(x: &[f32], b: &Bcast, j: usize) -> f32 {
    let period = b.inner * b.count;
    let terms = x.len() / period * b.inner;
    let width = lanes(terms);
    let mut lane = [0f32; LANES];
    let mut e = 0;
    for q in 0..x.len() / period {
        for &v in &x[q * period + j * b.inner..][..b.inner] {
            lane[e & (width - 1)] += v;
            e += 1;
        }
    }
    let mut s = width / 2;
    while s > 0 {
        for t in 0..s {
            lane[t] += lane[t + s];
        }
        s /= 2;
    }
    lane[0]
}

/// Outputs a column-sum block handles together: runs of 1 KB of each row.
const BLOCK: usize = 256;

/// Outputs a task sums otherwise.
const OUTPUTS_PER_TASK: usize = 16;

/// Outputs `start..start + out.len()` by the tree. Column sums
/// (`inner == 1`) evaluate the tree depth first: lane `t`'s value is
/// `V(t, W)`, its rows' sum, and `V(t, s) = V(t, 2s) + V(t + s, 2s)`
/// is what the halvings leave in lane `t`, so the output is `V(0, 1)`.
/// A lane reads whole runs of its rows' block of columns, and the partial
/// sums held at once are one per level of the tree.
fn sum_outputs(x: &[f32], b: &Bcast, start: usize, out: &mut [f32]) {
    if b.inner != 1 || out.len() > BLOCK {
        for (k, o) in out.iter_mut().enumerate() {
            *o = sum_one(x, b, start + k);
        }
        return;
    }
    let cols = start..start + out.len();
    let tree = ColumnTree {
        x,
        count: b.count,
        width: lanes(x.len() / b.count),
        cols,
    };
    tree.value(0, 1, out);
}

/// The tree of a block of column sums.
struct ColumnTree<'a> {
    x: &'a [f32],
    count: usize,
    width: usize,
    cols: Range<usize>,
}

impl ColumnTree<'_> {
    /// `V(t, s)` into `out`.
    fn value(&self, t: usize, s: usize, out: &mut [f32]) {
        if s >= self.width {
            out.fill(0.0);
            for row in self.x.chunks_exact(self.count).skip(t).step_by(self.width) {
                for (o, &v) in out.iter_mut().zip(&row[self.cols.clone()]) {
                    *o += v;
                }
            }
            return;
        }
        self.value(t, 2 * s, out);
        let mut right = [0f32; BLOCK];
        let right = &mut right[..out.len()];
        self.value(t + s, 2 * s, right);
        for (o, &r) in out.iter_mut().zip(right.iter()) {
            *o += r;
        }
    }
}

pub fn cpu(b: &Bcast, cx: &mut Cx, io: &mut Io) {
    let x = io.ins[0];
    let chunk = if b.inner == 1 {
        BLOCK.min(b.count.div_ceil(cx.pool.n_threads()))
    } else {
        OUTPUTS_PER_TASK
    };
    par_chunks(cx, &mut *io.outs[0], chunk, &|start, out| {
        sum_outputs(x, b, start, out)
    });
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SumToParams {
    pub inner: u32,
    pub count: u32,
    /// Terms per output (`outer · inner`).
    pub terms: u32,
    /// The tree's width `W`.
    pub lanes: u32,
    /// 1: a workgroup's neighbouring invocations are neighbouring outputs
    /// (coalesced reads when `inner` is 1), 0: neighbouring lanes of one
    /// output (coalesced along runs of `inner`).
    pub outputs_minor: u32,
    pub pad: [u32; 3],
}

pub const SUM_TO_FIELDS: &[&str] = &["inner", "count", "terms", "lanes", "outputs_minor", "pad"];

pub fn gpu(b: &Bcast, s: &Shapes) -> Vec<Dispatch> {
    let n: usize = s.ins[0].iter().product();
    let terms = n / b.count;
    let width = lanes(terms);
    let p = SumToParams {
        inner: b.inner as u32,
        count: b.count as u32,
        terms: terms as u32,
        lanes: width as u32,
        outputs_minor: u32::from(b.inner == 1),
        pad: [0; 3],
    };
    vec![Dispatch::new(
        Kernel::new("reduce", &[]),
        bytemuck::bytes_of(&p),
        vec![Bind::In(0), Bind::Out(0)],
        groups_1d(b.count * width, LANES),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stated order, written out directly: lane sums by term index,
    /// then the halving.
    fn by_the_rule(x: &[f32], b: &Bcast, j: usize) -> f32 {
        let period = b.inner * b.count;
        let terms: Vec<f32> = (0..x.len() / period * b.inner)
            .map(|e| x[e / b.inner * period + j * b.inner + e % b.inner])
            .collect();
        let width = lanes(terms.len());
        let mut lane: Vec<f32> = (0..width)
            .map(|t| terms.iter().skip(t).step_by(width).fold(0.0, |s, &v| s + v))
            .collect();
        while lane.len() > 1 {
            let half = lane.len() / 2;
            let (lo, hi) = lane.split_at_mut(half);
            for (l, h) in lo.iter_mut().zip(hi.iter()) {
                *l += *h;
            }
            lane.truncate(half);
        }
        lane[0]
    }

    #[test]
    fn trees_are_about_eight_terms_a_lane_wide() {
        let widths = [
            (1, 1),
            (3, 1),
            (9, 2),
            (20, 4),
            (256, 32),
            (350, 64),
            (16384, 256),
        ];
        for (terms, width) in widths {
            assert_eq!(lanes(terms), width, "{terms} terms");
        }
    }

    #[test]
    fn the_cpu_sum_follows_the_tree() {
        // Magnitudes far apart, so that another order gives other bits.
        let value = |i: usize| ((i * 7919 % 1000) as f32 - 500.0) * 10f32.powi((i % 7) as i32);
        for (outer, count, inner) in [
            (7, 3, 50),
            (300, 4, 1),
            (20, 70, 1),
            (2048, 130, 1),
            (3, 5, 37),
            (1, 1, 6),
        ] {
            let x: Vec<f32> = (0..outer * count * inner).map(value).collect();
            let b = Bcast { inner, count };
            let mut out = vec![0f32; count];
            for (start, block) in (0..).step_by(BLOCK).zip(out.chunks_mut(BLOCK)) {
                sum_outputs(&x, &b, start, block);
            }
            for (j, o) in out.iter().enumerate() {
                assert_eq!(
                    o.to_bits(),
                    by_the_rule(&x, &b, j).to_bits(),
                    "outer {outer} count {count} inner {inner} output {j}"
                );
            }
        }
    }
}
