//! The K-quants: super-blocks of `QK_K = 256` values split into sub-blocks
//! of 16 or 32, each with its own small integer scale (and min) that a
//! super-block f16 scale multiplies. Q2_K..Q6_K are weight types; Q8_K is
//! the activation type their integer dot products pair with.
//!
//! Element order inside a super-block follows ggml's `dequantize_row_*`
//! exactly; each type's comment gives the index of value `e` in its arrays.

use bytemuck::{Pod, Zeroable};

use super::blocks::{Block, F16Bytes, Quantize, f16_to_f32};
use super::{GgmlType, QK_K};

/// `block_q2_K`: 16 sub-blocks of 16; `x = d*sc*q - dmin*m`, q in 0..4,
/// with 4-bit `sc` and `m` per sub-block.
///
/// Value `e = 128*n + 32*j + l` (n < 2, j < 4, l < 32) is bits `2j..2j+2`
/// of `qs[32*n + l]`, with sub-block `8*n + 2*j + l/16`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2_K {
    /// (16) per sub-block: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// (64) four 2-bit quants per byte.
    pub qs: [u8; QK_K / 4],
    pub d: F16Bytes,
    pub dmin: F16Bytes,
}
const _: () = assert!(size_of::<BlockQ2_K>() == 84);

/// `block_q3_K`: 16 sub-blocks of 16; `x = d*(sc - 32)*(q - 4*!h)`, with a
/// 2-bit `q`, a high bit `h` and a 6-bit `sc`.
///
/// Value `e = 128*n + 32*j + l` takes its low bits from bits `2j..2j+2` of
/// `qs[32*n + l]`, its high bit from bit `4*n + j` of `hmask[l]`, and its
/// scale from sub-block `8*n + 2*j + l/16`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3_K {
    /// (32) high bits; a clear bit subtracts 4.
    pub hmask: [u8; QK_K / 8],
    /// (64) low 2 bits, four per byte.
    pub qs: [u8; QK_K / 4],
    /// (12) sixteen 6-bit scales: low nibbles in bytes 0..8, high 2-bit
    /// pairs in bytes 8..12.
    pub scales: [u8; 12],
    pub d: F16Bytes,
}
const _: () = assert!(size_of::<BlockQ3_K>() == 110);

/// `block_q4_K`: 8 sub-blocks of 32; `x = d*sc*q - dmin*m`, q in 0..16,
/// with 6-bit `sc` and `m` packed in `scales` (see [`scale_min_k4`]).
///
/// Value `e = 64*n + 32*h + l` (n < 4, h < 2, l < 32) is the low (h = 0)
/// or high (h = 1) nibble of `qs[32*n + l]`, with sub-block `2*n + h`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_K {
    pub d: F16Bytes,
    pub dmin: F16Bytes,
    /// (12) eight 6-bit scales and eight 6-bit mins.
    pub scales: [u8; 12],
    /// (128) nibbles.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ4_K>() == 144);

/// `block_q5_K`: Q4_K plus a fifth bit: value `e = 64*n + 32*h + l` has
/// its fifth bit at bit `2*n + h` of `qh[l]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_K {
    pub d: F16Bytes,
    pub dmin: F16Bytes,
    /// (12) as in Q4_K.
    pub scales: [u8; 12],
    /// (32) fifth bits.
    pub qh: [u8; QK_K / 8],
    /// (128) low nibbles, as in Q4_K.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ5_K>() == 176);

/// `block_q6_K`: 16 sub-blocks of 16; `x = d*sc*(q - 32)`, q in 0..64,
/// with an i8 `sc`.
///
/// Value `e = 128*n + 32*k + l` (n < 2, k < 4, l < 32) takes its low
/// nibble from `ql[64*n + l + 32*(k & 1)]` (low nibble for k < 2, high for
/// k >= 2), its top two bits from bits `2k..2k+2` of `qh[32*n + l]`, and its
/// scale from `scales[8*n + 2*k + l/16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6_K {
    /// (128) low nibbles.
    pub ql: [u8; QK_K / 2],
    /// (64) high 2-bit pairs.
    pub qh: [u8; QK_K / 4],
    /// (16)
    pub scales: [i8; QK_K / 16],
    pub d: F16Bytes,
}
const _: () = assert!(size_of::<BlockQ6_K>() == 210);

/// `block_q8_K`: `x = d * q` with an f32 `d`, plus the sums of each 16
/// quants, which the K-quant dot products use to apply mins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_K {
    /// An f32, little-endian.
    pub d: [u8; 4],
    /// (256)
    pub qs: [i8; QK_K],
    /// (16) little-endian i16 sums of `qs[16*i..16*i + 16]`.
    pub bsums: [u8; QK_K / 16 * 2],
}
const _: () = assert!(size_of::<BlockQ8_K>() == 292);

impl BlockQ8_K {
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// Sum of `qs[16*i..16*i + 16]`.
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * i], self.bsums[2 * i + 1]])
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a
/// Q4_K/Q5_K super-block. Sub-blocks 0..4 keep theirs in the low six bits
/// of bytes `j` and `j + 4`; sub-blocks 4..8 split theirs between a nibble
/// of byte `j + 4` and the top two bits of bytes `j - 4` and `j`.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 6-bit scale of Q3_K sub-block `i`, minus its bias of 32: the low
/// nibble is in byte `i % 8` (low nibble for i < 8, high for i >= 8), the
/// top two bits in byte `8 + i % 4` at bit `2 * (i / 4)`.
pub fn scale_q3_k(i: usize, scales: &[u8; 12]) -> i32 {
    let low = (scales[i % 8] >> (4 * (i / 8))) & 0x0F;
    let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

// ---- dequantization ------------------------------------------------------

impl Block for BlockQ2_K {
    const DTYPE: GgmlType = GgmlType::Q2_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        for (e, v) in y.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
            let sc = self.scales[8 * n + 2 * j + l / 16];
            let q = (self.qs[32 * n + l] >> (2 * j)) & 3;
            let dl = d * f32::from(sc & 0x0F);
            let ml = dmin * f32::from(sc >> 4);
            *v = dl * f32::from(q) - ml;
        }
    }
}

impl Block for BlockQ3_K {
    const DTYPE: GgmlType = GgmlType::Q3_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (e, v) in y.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
            let dl = d * scale_q3_k(8 * n + 2 * j + l / 16, &self.scales) as f32;
            let low = i32::from((self.qs[32 * n + l] >> (2 * j)) & 3);
            let high_set = self.hmask[l] & (1 << (4 * n + j)) != 0;
            let q = low - if high_set { 0 } else { 4 };
            *v = dl * q as f32;
        }
    }
}

impl Block for BlockQ4_K {
    const DTYPE: GgmlType = GgmlType::Q4_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        for (e, v) in y.iter_mut().enumerate() {
            let (n, h, l) = (e / 64, e % 64 / 32, e % 32);
            let (sc, m) = scale_min_k4(2 * n + h, &self.scales);
            let q = (self.qs[32 * n + l] >> (4 * h)) & 0x0F;
            *v = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
        }
    }
}

impl Block for BlockQ5_K {
    const DTYPE: GgmlType = GgmlType::Q5_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        for (e, v) in y.iter_mut().enumerate() {
            let (n, h, l) = (e / 64, e % 64 / 32, e % 32);
            let (sc, m) = scale_min_k4(2 * n + h, &self.scales);
            let low = (self.qs[32 * n + l] >> (4 * h)) & 0x0F;
            let high = (self.qh[l] >> (2 * n + h)) & 1;
            let q = low | (high << 4);
            *v = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
        }
    }
}

impl Block for BlockQ6_K {
    const DTYPE: GgmlType = GgmlType::Q6_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (e, v) in y.iter_mut().enumerate() {
            let (n, k, l) = (e / 128, e % 128 / 32, e % 32);
            let low = (self.ql[64 * n + l + 32 * (k & 1)] >> (4 * (k / 2))) & 0x0F;
            let high = (self.qh[32 * n + l] >> (2 * k)) & 3;
            let q = i32::from(low | (high << 4)) - 32;
            let sc = self.scales[8 * n + 2 * k + l / 16];
            *v = d * f32::from(sc) * q as f32;
        }
    }
}

impl Block for BlockQ8_K {
    const DTYPE: GgmlType = GgmlType::Q8_K;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d();
        for (v, &q) in y.iter_mut().zip(&self.qs) {
            *v = d * f32::from(q);
        }
    }
}

// ---- quantization --------------------------------------------------------

/// ggml's `nearest_int`: round to nearest, ties to even (it adds 1.5 * 2^23
/// and reads the mantissa, which is exact for |x| < 2^22).
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

impl Quantize for BlockQ8_K {
    /// `quantize_row_q8_K_ref`: the value of largest magnitude maps to
    /// -127, so `d` carries the opposite sign of that value.
    fn quantize(x: &[f32]) -> Self {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let mut b = Self::zeroed();
        if amax == 0.0 {
            // ggml leaves `bsums` unwritten here; zero is their true value.
            return b;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (i, group) in b.qs.chunks_exact(16).enumerate() {
            let sum: i16 = group.iter().map(|&q| i16::from(q)).sum();
            b.bsums[2 * i..2 * i + 2].copy_from_slice(&sum.to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scales_unpack_like_ggml_kmask_shuffle() {
        // Each scale s_i = i + 1 (6 bits), packed by hand the ggml way:
        // low nibbles of s_0..s_7 in bytes 0..8, of s_8..s_15 in their high
        // nibbles; top bits of s_i in byte 8 + i%4 at bit 2*(i/4).
        let s: Vec<u8> = (0..16).map(|i| (i * 4 + 1) as u8 & 63).collect();
        let mut packed = [0u8; 12];
        for (i, &si) in s.iter().enumerate() {
            packed[i % 8] |= (si & 0x0F) << (4 * (i / 8));
            packed[8 + i % 4] |= (si >> 4) << (2 * (i / 4));
        }
        for (i, &si) in s.iter().enumerate() {
            assert_eq!(scale_q3_k(i, &packed), i32::from(si) - 32, "scale {i}");
        }
    }

    #[test]
    fn q8_k_zero_block_and_bsums() {
        let b = BlockQ8_K::quantize(&[0.0; QK_K]);
        assert_eq!(b.d(), 0.0);
        let x: Vec<f32> = (0..QK_K).map(|i| i as f32 - 100.0).collect();
        let b = BlockQ8_K::quantize(&x);
        // The largest magnitude is 155 (last value), which maps to -127.
        assert_eq!(b.qs[QK_K - 1], -127);
        for i in 0..16 {
            let want: i32 = b.qs[16 * i..16 * i + 16]
                .iter()
                .map(|&q| i32::from(q))
                .sum();
            assert_eq!(i32::from(b.bsum(i)), want);
        }
    }
}
