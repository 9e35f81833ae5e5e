//! Q6_K: 6-bit symmetric quants in 16 sub-blocks of 16, each with an 8-bit
//! scale under the super-block's f16 `d`.

use bytemuck::{Pod, Zeroable};

use super::search::{GROUP_MAX_EPS, make_qx_quants, nearest_int, signed_absmax};
use crate::quant::blocks::{Block, F16Bytes, Quantize, f16_to_f32, f32_to_f16};
use crate::quant::{GgmlType, QK_K};

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

impl Quantize for BlockQ6_K {
    /// `quantize_row_q6_K_ref`: each sub-block's scale by `make_qx_quants`,
    /// the scales rounded to 8 bits against the one of largest magnitude
    /// (which maps to -128), then the quants redone with the rounded scales.
    fn quantize(x: &[f32]) -> Self {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        for ((s, xs), ls) in scales
            .iter_mut()
            .zip(x.chunks_exact(16))
            .zip(levels.chunks_exact_mut(16))
        {
            *s = make_qx_quants(32, xs, ls);
        }
        let (max_scale, max_abs_scale) = signed_absmax(&scales);
        let mut b = Self::zeroed();
        if max_abs_scale < GROUP_MAX_EPS {
            return b;
        }

        let iscale = -128.0 / max_scale;
        b.d = f32_to_f16(1.0 / iscale);
        for (sc, &s) in b.scales.iter_mut().zip(&scales) {
            *sc = nearest_int(iscale * s).min(127) as i8;
        }
        let d_all = f16_to_f32(b.d);
        for (j, (xs, ls)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let d = d_all * f32::from(b.scales[j]);
            // A zero scale keeps the search's levels.
            if d == 0.0 {
                continue;
            }
            for (l, &v) in ls.iter_mut().zip(xs) {
                *l = (nearest_int(v / d).clamp(-32, 31) + 32) as u8;
            }
        }
        for (e, &q) in levels.iter().enumerate() {
            let (n, k, l) = (e / 128, e % 128 / 32, e % 32);
            b.ql[64 * n + l + 32 * (k & 1)] |= (q & 0x0F) << (4 * (k / 2));
            b.qh[32 * n + l] |= (q >> 4) << (2 * k);
        }
        b
    }
}
