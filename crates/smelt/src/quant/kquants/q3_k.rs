//! Q3_K: 3-bit symmetric quants in 16 sub-blocks of 16, each with a 6-bit
//! scale under the super-block's f16 `d`.

use bytemuck::{Pod, Zeroable};

use super::q2_k::pack_2bit;
use super::search::{make_q3_quants, nearest_int, signed_absmax};
use crate::quant::blocks::{Block, F16Bytes, Quantize, f16_to_f32, f32_to_f16};
use crate::quant::{GgmlType, QK_K};

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

/// The 6-bit scale of Q3_K sub-block `i`, minus its bias of 32: the low
/// nibble is in byte `i % 8` (low nibble for i < 8, high for i >= 8), the
/// top two bits in byte `8 + i % 4` at bit `2 * (i / 4)`.
pub fn scale_q3_k(i: usize, scales: &[u8; 12]) -> i32 {
    let low = (scales[i % 8] >> (4 * (i / 8))) & 0x0F;
    let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// Packs sixteen biased 6-bit scales the way [`scale_q3_k`] reads them.
fn pack_scales(biased: &[u8; QK_K / 16]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (i, &s) in biased.iter().enumerate() {
        packed[i % 8] |= (s & 0x0F) << (4 * (i / 8));
        packed[8 + i % 4] |= (s >> 4) << (2 * (i / 4));
    }
    packed
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

impl Quantize for BlockQ3_K {
    /// `quantize_row_q3_K_ref`: each sub-block's scale by `make_q3_quants`,
    /// the scales rounded to 6 bits against the one of largest magnitude
    /// (which maps to -32), then the quants redone with the rounded scales.
    fn quantize(x: &[f32]) -> Self {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        for ((s, xs), ls) in scales
            .iter_mut()
            .zip(x.chunks_exact(16))
            .zip(levels.chunks_exact_mut(16))
        {
            *s = make_q3_quants(4, xs, ls);
        }
        let (max_scale, _) = signed_absmax(&scales);

        let mut b = Self::zeroed();
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            let mut biased = [0u8; QK_K / 16];
            for (q, &s) in biased.iter_mut().zip(&scales) {
                // ggml narrows to int8_t before clamping.
                *q = (i32::from(nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            }
            b.scales = pack_scales(&biased);
            b.d = f32_to_f16(1.0 / iscale);
        }
        let d_all = f16_to_f32(b.d);
        for (j, (xs, ls)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let d = d_all * scale_q3_k(j, &b.scales) as f32;
            // A zero scale keeps the search's levels.
            if d == 0.0 {
                continue;
            }
            for (l, &v) in ls.iter_mut().zip(xs) {
                *l = (nearest_int(v / d).clamp(-4, 3) + 4) as u8;
            }
        }
        // Levels 4..8 set their high bit: value `k` uses bit `k / 32` of
        // byte `k % 32`.
        for (k, l) in levels.iter_mut().enumerate() {
            if *l > 3 {
                b.hmask[k % 32] |= 1 << (k / 32);
                *l -= 4;
            }
        }
        b.qs = pack_2bit(&levels);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scales_unpack_like_ggml_kmask_shuffle() {
        // Each scale s_i = 4i + 1 (6 bits), packed by hand the ggml way:
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
}
