//! Types whose 4-bit quants index a fixed table of values instead of
//! standing for integers: IQ4_NL and IQ4_XS (a non-linear grid fitted to
//! weight distributions) and MXFP4 (OCP microscaling FP4, e2m1, with a
//! power-of-two block scale).

use bytemuck::{Pod, Zeroable};

use super::blocks::{Block, F16Bytes, f16_to_f32};
use super::{GgmlType, QK_K};

/// ggml's `kvalues_iq4nl`: the 16 levels of IQ4_NL and IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `kvalues_mxfp4`: the e2m1 values, doubled so they are integers
/// (the block scale is halved to match).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `block_iq4_nl`: `x = d * KVALUES_IQ4NL[q]`, 32 values, nibbles packed as
/// in Q4_0 (`x[j]` low, `x[j + 16]` high).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4_NL {
    pub d: F16Bytes,
    /// (16)
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockIQ4_NL>() == 18);

/// `block_iq4_xs`: 8 sub-blocks of 32, each IQ4_NL-coded with a 6-bit
/// scale `ls`: `x = d * (ls - 32) * KVALUES_IQ4NL[q]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4_XS {
    pub d: F16Bytes,
    /// A little-endian u16: the top two bits of sub-block `i`'s scale at
    /// bit `2 * i`.
    pub scales_h: [u8; 2],
    /// (4) the low four bits of the scales, two per byte.
    pub scales_l: [u8; QK_K / 64],
    /// (128) 16 bytes per sub-block, nibbles packed as in IQ4_NL.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockIQ4_XS>() == 136);

/// `block_mxfp4`: `x = 2^(e - 128) * KVALUES_MXFP4[q]`, 32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockMXFP4 {
    /// E8M0 shared exponent.
    pub e: u8,
    /// (16) nibbles packed as in Q4_0.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockMXFP4>() == 17);

/// `GGML_E8M0_TO_FP32_HALF`: `2^(e - 127) / 2`, built from its bits (e < 2
/// lands in the subnormals).
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (u32::from(e) - 1) << 23
    };
    f32::from_bits(bits)
}

/// Writes 32 values coded as nibbles of `qs` into a table, times `d`.
fn dequantize_nibbles(qs: &[u8; 16], table: &[i8; 16], d: f32, y: &mut [f32]) {
    for (j, &b) in qs.iter().enumerate() {
        y[j] = d * f32::from(table[usize::from(b & 0x0F)]);
        y[j + 16] = d * f32::from(table[usize::from(b >> 4)]);
    }
}

impl Block for BlockIQ4_NL {
    const DTYPE: GgmlType = GgmlType::IQ4_NL;
    const QK: usize = 32;

    fn dequantize(&self, y: &mut [f32]) {
        dequantize_nibbles(&self.qs, &KVALUES_IQ4NL, f16_to_f32(self.d), y);
    }
}

impl Block for BlockIQ4_XS {
    const DTYPE: GgmlType = GgmlType::IQ4_XS;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        let scales_h = u16::from_le_bytes(self.scales_h);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * (i32::from(low | (high << 4)) - 32) as f32;
            let qs: &[u8; 16] = self.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
            dequantize_nibbles(qs, &KVALUES_IQ4NL, dl, y);
        }
    }
}

impl Block for BlockMXFP4 {
    const DTYPE: GgmlType = GgmlType::MXFP4;
    const QK: usize = 32;

    fn dequantize(&self, y: &mut [f32]) {
        dequantize_nibbles(&self.qs, &KVALUES_MXFP4, e8m0_to_f32_half(self.e), y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_is_two_to_the_e_minus_128() {
        for e in 0..=254u8 {
            // 2^-128 is an f32 subnormal; f32::powi would flush it to 0.
            let want = 2f64.powi(i32::from(e) - 128) as f32;
            assert_eq!(e8m0_to_f32_half(e), want, "e = {e}");
        }
    }
}
