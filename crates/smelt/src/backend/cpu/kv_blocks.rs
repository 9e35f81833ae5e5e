//! KV caches of ggml blocks (Q8_0, Q4_0): how a row is stored and read.
//!
//! A row is cut into rotation groups of [`rotation`] values, each multiplied
//! by the orthonormal Walsh-Hadamard matrix before its 32-value blocks are
//! quantized, and multiplied again when it is read (the matrix is its own
//! inverse). llama.cpp rotates a quantized cache's keys and values alike:
//! the rotation spreads an outlier channel (RoPE'd keys have a few) over
//! the group, so a block's scale no longer starves its other values. A
//! Q4_0 cache lost a tenth of SmolLM2's perplexity with groups of 32, the
//! block alone, and a third without the rotation. Reading rotates back, so
//! attention sees plain keys and values, whatever the heads' width: a group
//! may span two heads.
//!
//! Legend: `n` values per rotation group.

use crate::quant::{Block, Quantize};

/// Values per block of a block cache (ggml's `QK8_0` and `QK4_0`).
pub const BLOCK: usize = 32;

/// The largest rotation group, which keeps a group's quantization error
/// spread over two blocks without reading much past a head.
const MAX_GROUP: usize = 64;

/// Values per rotation group of rows of `cols` (a multiple of [`BLOCK`]):
/// the largest power of two up to [`MAX_GROUP`] that divides the row.
pub fn rotation(cols: usize) -> usize {
    let mut n = MAX_GROUP;
    while n > BLOCK && !cols.is_multiple_of(n) {
        n /= 2;
    }
    n
}

/// The orthonormal Walsh-Hadamard matrix's scale for groups of `n`,
/// `1 / sqrt(n)` (the GPU's cache writes take it from here).
pub fn hadamard_scale(n: usize) -> f32 {
    1.0 / (n as f32).sqrt()
}

/// Each run of `n` values of `v` (a power of two) times the orthonormal
/// Walsh-Hadamard matrix `H[i][j] = (-1)^popcount(i & j) / sqrt(n)`: the
/// fast transform's butterflies, then the scale.
pub fn hadamard(v: &mut [f32], n: usize) {
    let scale = hadamard_scale(n);
    for x in v.chunks_exact_mut(n) {
        let mut half = 1;
        while half < n {
            for start in (0..n).step_by(2 * half) {
                for i in start..start + half {
                    let (a, b) = (x[i], x[i + half]);
                    x[i] = a + b;
                    x[i + half] = a - b;
                }
            }
            half *= 2;
        }
        x.iter_mut().for_each(|v| *v *= scale);
    }
}

/// Rows of `B` blocks, rotated in groups of `group` values.
#[derive(Clone, Copy)]
pub struct BlockRows<'a, B> {
    pub blocks: &'a [B],
    pub group: usize,
}

impl<B: Block> BlockRows<'_, B> {
    /// Values `at..at + dst.len()`, rotated back: each group the span
    /// touches is dequantized and rotated whole, then its part copied.
    #[inline(always)]
    pub fn widen(&self, at: usize, dst: &mut [f32]) {
        let n = self.group;
        let mut buf = [0f32; MAX_GROUP];
        let end = at + dst.len();
        let mut start = at / n * n;
        while start < end {
            let values = &mut buf[..n];
            for (b, y) in self.blocks[start / B::QK..]
                .iter()
                .zip(values.chunks_exact_mut(B::QK))
            {
                b.dequantize(y);
            }
            hadamard(values, n);
            let (from, to) = (start.max(at), (start + n).min(end));
            dst[from - at..to - at].copy_from_slice(&values[from - start..to - start]);
            start += n;
        }
    }
}

/// Rows of `B` blocks for writing, rotated in groups of `group` values.
pub struct BlockRowsMut<'a, B> {
    pub blocks: &'a mut [B],
    pub group: usize,
}

impl<B: Quantize> BlockRowsMut<'_, B> {
    /// Stores `src` from value `at`, both on group boundaries: each group
    /// rotated, then quantized as ggml's `quantize_row_*_ref` rounds.
    #[inline(always)]
    pub fn store(&mut self, at: usize, src: &[f32]) {
        let n = self.group;
        let mut buf = [0f32; MAX_GROUP];
        let blocks = &mut self.blocks[at / B::QK..];
        for (x, group) in src.chunks_exact(n).zip(blocks.chunks_exact_mut(n / B::QK)) {
            let values = &mut buf[..n];
            values.copy_from_slice(x);
            hadamard(values, n);
            for (b, v) in group.iter_mut().zip(values.chunks_exact(B::QK)) {
                *b = B::quantize(v);
            }
        }
    }

    /// Values held (a block counts its 32).
    pub fn n_values(&self) -> usize {
        self.blocks.len() * B::QK
    }
}
