//! The legacy 32-value block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Each block holds 32 values `x[0..32]` with one f16 scale `d` (and, for
//! the `_1` types, an f16 offset `m` or sum `s`). The 4-bit types pack
//! `x[j]` in the low nibble of `qs[j]` and `x[j + 16]` in the high nibble;
//! the 5-bit types keep each value's fifth bit in bit `j` of the u32 `qh`.
//!
//! Quantizers follow ggml's `quantize_row_*_ref` to the bit: the same scale
//! formula, the same reciprocal, the same rounding (truncation after adding
//! 0.5 or 8.5, `roundf` for Q8), so requantized files match llama-quantize's.

use bytemuck::{Pod, Zeroable};

use super::GgmlType;
use super::blocks::{Block, F16Bytes, Quantize, f16_to_f32, f32_to_f16};

/// ggml's `QK4_0`, `QK4_1`, `QK5_0`, `QK5_1`, `QK8_0`, `QK8_1`.
pub const QK: usize = 32;

/// `block_q4_0`: `x = d * (q - 8)`, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: F16Bytes,
    /// (16) x[j] in the low nibble, x[j + 16] in the high nibble.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

/// `block_q4_1`: `x = d * q + m`, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: F16Bytes,
    pub m: F16Bytes,
    /// (16) as in Q4_0.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

/// `block_q5_0`: `x = d * (q - 16)`, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: F16Bytes,
    /// (4) a little-endian u32: bit j is the fifth bit of x[j].
    pub qh: [u8; 4],
    /// (16) the low four bits, packed as in Q4_0.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

/// `block_q5_1`: `x = d * q + m`, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: F16Bytes,
    pub m: F16Bytes,
    /// (4) as in Q5_0.
    pub qh: [u8; 4],
    /// (16) as in Q5_0.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

/// `block_q8_0`: `x = d * q`, q in -127..=127.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: F16Bytes,
    /// (32)
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

/// `block_q8_1`: Q8_0 plus `s = d * Σq`, which the Q4_1/Q5_1 integer dot
/// products use to apply the weights' offset `m` once per block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: F16Bytes,
    pub s: F16Bytes,
    /// (32)
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);

// ---- scale search, shared by the quantizers -------------------------------

/// The value of largest magnitude, keeping its sign (the first one on ties),
/// as the symmetric ggml quantizers pick it.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `(min, max)` of a block, starting from `(FLT_MAX, -FLT_MAX)` as ggml does.
fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    })
}

/// ggml's `d ? 1.0f/d : 0.0f`.
fn recip_or_zero(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// C's conversion of a float to an integer type as x86-64 compiles it
/// (`cvttss2si`, then the low bits for a narrower type): truncation toward
/// zero, and `i32::MIN` for NaN and out-of-range values, where Rust's `as`
/// would saturate. Narrow the result with `as i8`/`as u8`, which wrap as C
/// does. Only a block of subnormal values, whose reciprocal scale is
/// infinite, takes the out-of-range path; llama-quantize's bytes show it.
fn c_trunc(x: f32) -> i32 {
    const LIMIT: f32 = 2_147_483_648.0;
    if x.is_nan() || !(-LIMIT..LIMIT).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// Splits nibble-packed `qs` back into 32 values.
fn unpack_nibbles(qs: &[u8; QK / 2]) -> impl Iterator<Item = (usize, u8, u8)> + '_ {
    qs.iter().enumerate().map(|(j, &b)| (j, b & 0x0F, b >> 4))
}

// ---- Q4_0 -----------------------------------------------------------------

impl Block for BlockQ4_0 {
    const DTYPE: GgmlType = GgmlType::Q4_0;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (j, lo, hi) in unpack_nibbles(&self.qs) {
            y[j] = (i32::from(lo) - 8) as f32 * d;
            y[j + QK / 2] = (i32::from(hi) - 8) as f32 * d;
        }
    }
}

impl Quantize for BlockQ4_0 {
    fn quantize(x: &[f32]) -> Self {
        // The extreme value maps to -8, the one end of 0..16 that has no
        // mirror, so the full range is used on the side that needs it.
        let d = signed_absmax(x) / -8.0;
        let id = recip_or_zero(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            // `MIN(15, (int8_t)(v + 8.5f))`.
            let lo = (c_trunc(x[j] * id + 8.5) as i8).min(15) as u8;
            let hi = (c_trunc(x[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            *q = lo | (hi << 4);
        }
        Self {
            d: f32_to_f16(d),
            qs,
        }
    }
}

// ---- Q4_1 -----------------------------------------------------------------

impl Block for BlockQ4_1 {
    const DTYPE: GgmlType = GgmlType::Q4_1;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        for (j, lo, hi) in unpack_nibbles(&self.qs) {
            y[j] = f32::from(lo) * d + m;
            y[j + QK / 2] = f32::from(hi) * d + m;
        }
    }
}

impl Quantize for BlockQ4_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = recip_or_zero(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let lo = (c_trunc((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let hi = (c_trunc((x[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            *q = lo | (hi << 4);
        }
        Self {
            d: f32_to_f16(d),
            m: f32_to_f16(min),
            qs,
        }
    }
}

// ---- Q5_0 -----------------------------------------------------------------

/// The 5-bit value `j` of a block: its low nibble from `qs`, its fifth bit
/// from `qh`.
fn q5(qs: &[u8; QK / 2], qh: u32, j: usize) -> u8 {
    let nibble = if j < QK / 2 {
        qs[j] & 0x0F
    } else {
        qs[j - QK / 2] >> 4
    };
    nibble | ((((qh >> j) & 1) as u8) << 4)
}

/// Packs 32 five-bit values into `(qs, qh)`.
fn pack_q5(q: &[u8; QK]) -> ([u8; QK / 2], [u8; 4]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0F) | ((q[j + QK / 2] & 0x0F) << 4);
    }
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from((v >> 4) & 1) << j;
    }
    (qs, qh.to_le_bytes())
}

impl Block for BlockQ5_0 {
    const DTYPE: GgmlType = GgmlType::Q5_0;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        let qh = u32::from_le_bytes(self.qh);
        for (j, v) in y.iter_mut().enumerate() {
            *v = (i32::from(q5(&self.qs, qh, j)) - 16) as f32 * d;
        }
    }
}

impl Quantize for BlockQ5_0 {
    fn quantize(x: &[f32]) -> Self {
        let d = signed_absmax(x) / -16.0;
        let id = recip_or_zero(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (c_trunc(v * id + 16.5) as i8).min(31) as u8;
        }
        let (qs, qh) = pack_q5(&q);
        Self {
            d: f32_to_f16(d),
            qh,
            qs,
        }
    }
}

// ---- Q5_1 -----------------------------------------------------------------

impl Block for BlockQ5_1 {
    const DTYPE: GgmlType = GgmlType::Q5_1;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        let qh = u32::from_le_bytes(self.qh);
        for (j, v) in y.iter_mut().enumerate() {
            *v = f32::from(q5(&self.qs, qh, j)) * d + m;
        }
    }
}

impl Quantize for BlockQ5_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = recip_or_zero(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            // ggml casts to uint8_t without a clamp: (max - min) * id + 0.5
            // stays below 32 for finite values.
            *q = c_trunc((v - min) * id + 0.5) as u8;
        }
        let (qs, qh) = pack_q5(&q);
        Self {
            d: f32_to_f16(d),
            m: f32_to_f16(min),
            qh,
            qs,
        }
    }
}

// ---- Q8_0 -----------------------------------------------------------------

/// The symmetric 8-bit scale and quants of `quantize_row_q8_0_ref`:
/// `d = amax / 127`, `q = roundf(x / d)` (ties away from zero).
fn quantize_q8(x: &[f32]) -> (f32, [i8; QK]) {
    let amax = x.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = recip_or_zero(d);
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = c_trunc((v * id).round()) as i8;
    }
    (d, qs)
}

impl Block for BlockQ8_0 {
    const DTYPE: GgmlType = GgmlType::Q8_0;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (v, &q) in y.iter_mut().zip(&self.qs) {
            *v = f32::from(q) * d;
        }
    }
}

impl Quantize for BlockQ8_0 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = quantize_q8(x);
        Self {
            d: f32_to_f16(d),
            qs,
        }
    }
}

// ---- Q8_1 -----------------------------------------------------------------

impl Block for BlockQ8_1 {
    const DTYPE: GgmlType = GgmlType::Q8_1;
    const QK: usize = QK;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (v, &q) in y.iter_mut().zip(&self.qs) {
            *v = f32::from(q) * d;
        }
    }
}

impl Quantize for BlockQ8_1 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = quantize_q8(x);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        Self {
            d: f32_to_f16(d),
            s: f32_to_f16(sum as f32 * d),
            qs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_uses_minus_8_for_the_extreme_value() {
        // A hand-worked block: max |x| is -4 at index 3, so d = 0.5 and
        // x = -4 maps to q = 0 (value -8 * 0.5).
        let mut x = [0f32; QK];
        x[3] = -4.0;
        x[20] = 1.0;
        let b = BlockQ4_0::quantize(&x);
        assert_eq!(f16_to_f32(b.d), 0.5);
        assert_eq!(b.qs[3] & 0x0F, 0);
        assert_eq!(b.qs[4] >> 4, 8 + 2);
        let mut y = [0f32; QK];
        b.dequantize(&mut y);
        assert_eq!(y, x);
    }

    #[test]
    fn all_zero_blocks_quantize_to_zero() {
        let x = [0f32; QK];
        let mut y = [1f32; QK];
        BlockQ4_1::quantize(&x).dequantize(&mut y);
        assert_eq!(y, x);
        BlockQ5_0::quantize(&x).dequantize(&mut y);
        assert_eq!(y, x);
        BlockQ8_1::quantize(&x).dequantize(&mut y);
        assert_eq!(y, x);
    }
}
