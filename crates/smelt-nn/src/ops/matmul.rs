//! Matrix product `C[M, N] = op(A) · op(B)`, `op` the matrix or its
//! transpose as stored: fully connected layers and their gradients. Each
//! output is `Σ_k` in order of `k` (`cpu::gemm`, `matmul.wgsl`), in
//! chunks when `k` is long and the output small (a weight gradient, `k`
//! the batch): `split_chunk` cuts `k` into chunks, each summed in order
//! from zero, and the chunks' sums are added in order. On the GPU each
//! chunk is its own workgroup, writing a partial tile; a second dispatch
//! adds the partials.

use crate::cpu::Cx;
use crate::cpu::gemm::{Dims, View, gemm};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Io, Op, Shapes};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMul {
    /// A is stored `[K, M]`.
    pub trans_a: bool,
    /// B is stored `[N, K]`.
    pub trans_b: bool,
}

/// `(m, n, k)` of a product of these stored shapes.
fn dims(t: &MatMul, a: &[usize], b: &[usize]) -> Option<(usize, usize, usize)> {
    let ([a0, a1], [b0, b1]) = (a, b) else {
        return None;
    };
    let (m, ka) = if t.trans_a { (*a1, *a0) } else { (*a0, *a1) };
    let (kb, n) = if t.trans_b { (*b1, *b0) } else { (*b0, *b1) };
    (ka == kb).then_some((m, n, ka))
}

impl MatMul {
    pub fn infer(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        match dims(self, s[0], s[1]) {
            Some((m, n, _)) => Ok(vec![vec![m, n]]),
            None => shape_err(
                "matmul",
                format!(
                    "{:?}{} · {:?}{} do not multiply",
                    s[0],
                    tr(self.trans_a),
                    s[1],
                    tr(self.trans_b)
                ),
            ),
        }
    }

    pub fn backward(&self, g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
        let Some(dc) = b.grads[0] else {
            return Ok(vec![None, None]);
        };
        let (a, bm) = (b.inputs[0], b.inputs[1]);
        let mm = |g: &mut Graph, x, y, trans_a, trans_b| {
            g.node1(Op::MatMul(MatMul { trans_a, trans_b }), &[x, y])
        };
        let da = match (b.needs[0], self.trans_a) {
            (false, _) => None,
            (true, false) => Some(mm(g, dc, bm, false, !self.trans_b)?),
            (true, true) => Some(mm(g, bm, dc, self.trans_b, true)?),
        };
        let db = match (b.needs[1], self.trans_b) {
            (false, _) => None,
            (true, false) => Some(mm(g, a, dc, !self.trans_a, false)?),
            (true, true) => Some(mm(g, dc, a, true, self.trans_a)?),
        };
        Ok(vec![da, db])
    }

    pub fn cpu(&self, cx: &mut Cx, io: &mut Io) {
        let (m, n, k) = dims(self, &io.shapes.ins[0], &io.shapes.ins[1]).expect("checked shapes");
        let a = View::new(io.ins[0], k, m, self.trans_a);
        let b = View::new(io.ins[1], n, k, self.trans_b);
        let chunk = split_chunk(m, n, k);
        gemm(cx, Dims { m, n, k, chunk }, a, b, &mut *io.outs[0]);
    }

    pub fn gpu(&self, s: &Shapes) -> Vec<Dispatch> {
        let (m, n, k) = dims(self, &s.ins[0], &s.ins[1]).expect("checked shapes");
        let chunk = split_chunk(m, n, k);
        let splits = k.div_ceil(chunk.max(1)).max(1);
        let (a_row, a_k) = if self.trans_a { (1, m) } else { (k, 1) };
        let (b_k, b_col) = if self.trans_b { (1, k) } else { (n, 1) };
        let p = MatMulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            a_row: a_row as u32,
            a_k: a_k as u32,
            b_k: b_k as u32,
            b_col: b_col as u32,
            chunk: chunk as u32,
        };
        let tiles = [
            n.div_ceil(TILE) as u32,
            m.div_ceil(TILE) as u32,
            splits as u32,
        ];
        let kernel = Kernel::new("matmul", &[]);
        if splits == 1 {
            let binds = vec![Bind::In(0), Bind::In(1), Bind::Out(0)];
            return vec![Dispatch::new(kernel, bytemuck::bytes_of(&p), binds, tiles)];
        }
        let partials = Dispatch {
            scratch: splits * m * n,
            ..Dispatch::new(
                kernel,
                bytemuck::bytes_of(&p),
                vec![Bind::In(0), Bind::In(1), Bind::Scratch],
                tiles,
            )
        };
        let sum = SplitSumParams {
            len: (m * n) as u32,
            splits: splits as u32,
            pad: [0; 2],
        };
        let total = Dispatch::new(
            Kernel::new("matmul", &["SPLIT_SUM"]),
            bytemuck::bytes_of(&sum),
            vec![Bind::Scratch, Bind::Out(0)],
            groups_1d(m * n, 256),
        );
        vec![partials, total]
    }
}

/// Workgroups a product should reach before splitting `k` stops paying
/// (about one per compute unit of a large GPU).
const TARGET_GROUPS: usize = 128;

/// The shortest chunk of `k` a split makes.
const MIN_CHUNK: usize = 64;

/// The chunk length `k` is summed in: `k` itself (one sum) unless the
/// output has too few tiles to fill the GPU, then a multiple of `BK`
/// chosen so that tiles × chunks comes near `TARGET_GROUPS`. A function of
/// the shape alone, so that both backends add in the same order.
pub fn split_chunk(m: usize, n: usize, k: usize) -> usize {
    let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
    let splits = TARGET_GROUPS.div_ceil(tiles.max(1)).min(k / MIN_CHUNK);
    if splits < 2 {
        return k;
    }
    k.div_ceil(splits).next_multiple_of(BK)
}

fn tr(t: bool) -> &'static str {
    if t { "ᵀ" } else { "" }
}

/// Output rows and columns of a workgroup (matmul.wgsl).
pub const TILE: usize = 64;

/// The step along `k` a workgroup stages in its memory (matmul.wgsl).
pub const BK: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatMulParams {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a_row: u32,
    pub a_k: u32,
    pub b_k: u32,
    pub b_col: u32,
    /// The chunk of `k` a workgroup sums (`split_chunk`).
    pub chunk: u32,
}

pub const MATMUL_FIELDS: &[&str] = &["m", "n", "k", "a_row", "a_k", "b_k", "b_col", "chunk"];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SplitSumParams {
    /// `m · n`.
    pub len: u32,
    pub splits: u32,
    pub pad: [u32; 2],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_k_with_few_tiles_is_split_into_whole_steps() {
        // A weight gradient: 64 × 128 output, k the batch of 256.
        assert_eq!(split_chunk(64, 128, 256), 64);
        // k not a multiple of the chunk: the last chunk is shorter.
        let c = split_chunk(9, 7, 333);
        assert!(
            c.is_multiple_of(BK) && c < 333 && !333usize.is_multiple_of(c),
            "{c}"
        );
        // Short k, or enough tiles: one sum.
        assert_eq!(split_chunk(9, 7, 100), 100);
        assert_eq!(split_chunk(1024, 1024, 4096), 4096);
    }
}
