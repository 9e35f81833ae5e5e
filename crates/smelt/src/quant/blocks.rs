//! What every quantized block type shares: the [`Block`] trait, the row
//! loops built on it, and the f16 fields that hold most block scales.
//!
//! Blocks are `#[repr(C)]` structs of byte arrays laid out exactly as ggml's
//! `block_*` structs are in a GGUF file. Byte arrays give them an alignment
//! of 1, so a row of blocks can be viewed straight from an unaligned memory
//! map with `bytemuck` (no copy, no `unsafe`), and multi-byte fields are
//! read little-endian through accessors.

use bytemuck::{Pod, Zeroable};

use super::{GgmlType, QK_K, QuantError};

/// One block of a quantized type, as stored in GGUF.
pub trait Block: Pod + Zeroable {
    const DTYPE: GgmlType;
    /// Values per block (ggml's `QK*`).
    const QK: usize;

    /// Writes the block's `QK` values to `y`.
    ///
    /// # Panics
    /// If `y` is shorter than `QK`: callers slice rows into blocks, so that
    /// is a bug in the caller, never bad data.
    fn dequantize(&self, y: &mut [f32]);
}

/// A block type that can be made from f32 values, with the rounding of
/// ggml's `quantize_row_*_ref`.
pub trait Quantize: Block {
    /// Quantizes `x.len() == QK` values into one block.
    fn quantize(x: &[f32]) -> Self;
}

/// A row of `B` blocks viewed in place; fails unless `src` holds whole blocks.
pub fn as_blocks<B: Block>(src: &[u8]) -> Result<&[B], QuantError> {
    bytemuck::try_cast_slice(src).map_err(|_| wrong_bytes::<B>(src.len()))
}

/// A row of `B` blocks viewed in place, for writing.
pub fn as_blocks_mut<B: Block>(dst: &mut [u8]) -> Result<&mut [B], QuantError> {
    let len = dst.len();
    bytemuck::try_cast_slice_mut(dst).map_err(|_| wrong_bytes::<B>(len))
}

/// `got` bytes are not a whole number of blocks: report the nearest whole
/// row below it.
fn wrong_bytes<B: Block>(got: usize) -> QuantError {
    let blocks = got / size_of::<B>();
    QuantError::WrongLength {
        dtype: B::DTYPE,
        n: blocks * B::QK,
        got,
        expected: blocks * size_of::<B>(),
    }
}

/// Dequantizes a row; the caller has checked that `dst.len()` values fill
/// `src` exactly.
pub fn dequantize_row<B: Block>(src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    for (b, y) in as_blocks::<B>(src)?.iter().zip(dst.chunks_exact_mut(B::QK)) {
        b.dequantize(y);
    }
    Ok(())
}

/// Quantizes a row; the caller has checked the lengths.
pub fn quantize_row<B: Quantize>(src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    for (b, x) in as_blocks_mut::<B>(dst)?
        .iter_mut()
        .zip(src.chunks_exact(B::QK))
    {
        *b = B::quantize(x);
    }
    Ok(())
}

/// The reference dot product of a quantized row with f32 values: each block
/// is dequantized into a stack buffer, products are taken in f32 and summed
/// in f64, as ggml's scalar `ggml_vec_dot_f32` does.
pub fn dot_row<B: Block>(w: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    // (QK) one dequantized block; QK_K is the largest block size.
    let mut buf = [0f32; QK_K];
    let y = &mut buf[..B::QK];
    let mut sum = 0f64;
    for (b, xs) in as_blocks::<B>(w)?.iter().zip(x.chunks_exact(B::QK)) {
        b.dequantize(y);
        sum += y
            .iter()
            .zip(xs)
            .map(|(&a, &b)| f64::from(a * b))
            .sum::<f64>();
    }
    Ok(sum as f32)
}

/// An IEEE half stored little-endian, as `ggml_half` is in a file.
pub type F16Bytes = [u8; 2];

/// `GGML_FP16_TO_FP32`: exact.
#[inline]
pub fn f16_to_f32(h: F16Bytes) -> f32 {
    half::f16::from_le_bytes(h).to_f32()
}

/// `GGML_FP32_TO_FP16`: round to nearest, ties to even.
#[inline]
pub fn f32_to_f16(x: f32) -> F16Bytes {
    half::f16::from_f32(x).to_le_bytes()
}
