//! Q2_K: 2-bit affine quants in 16 sub-blocks of 16, each with a 4-bit
//! scale and min under the super-block's f16 `d` and `dmin`.

use bytemuck::{Pod, Zeroable};

use super::search::{AffineSearch, make_qkx2_quants, nearest_int};
use crate::quant::blocks::{Block, F16Bytes, Quantize, f16_to_f32, f32_to_f16};
use crate::quant::{GgmlType, QK_K};

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

/// Packs four 2-bit quants per byte: value `128*n + 32*j + l` into bits
/// `2j..2j+2` of byte `32*n + l` (Q2_K's and Q3_K's low bits alike).
pub(super) fn pack_2bit(levels: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for (i, q) in qs.iter_mut().enumerate() {
        let (n, l) = (i / 32, i % 32);
        let at = |j: usize| levels[128 * n + 32 * j + l];
        *q = at(0) | (at(1) << 2) | (at(2) << 4) | (at(3) << 6);
    }
    qs
}

impl Quantize for BlockQ2_K {
    /// `quantize_row_q2_K_ref`: each sub-block's scale and min by
    /// `make_qkx2_quants` (weights |x|, absolute error), both rounded to 4
    /// bits against the largest, then the quants redone with the rounded
    /// scales.
    fn quantize(x: &[f32]) -> Self {
        const SEARCH: AffineSearch = AffineSearch {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            steps: 15,
            mad: true,
        };
        const Q4SCALE: f32 = 15.0;
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0f32; QK_K / 16], [0f32; QK_K / 16]);
        let mut aux = [0u8; 16];
        for (j, (xs, ls)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let mut weights = [0f32; 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            (scales[j], mins[j]) = make_qkx2_quants(SEARCH, xs, &weights, ls, &mut aux);
        }
        let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
        let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });

        let mut b = Self::zeroed();
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (sc, &s) in b.scales.iter_mut().zip(&scales) {
                *sc = nearest_int(iscale * s) as u8;
            }
            b.d = f32_to_f16(max_scale / Q4SCALE);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (sc, &m) in b.scales.iter_mut().zip(&mins) {
                *sc |= (nearest_int(iscale * m) << 4) as u8;
            }
            b.dmin = f32_to_f16(max_min / Q4SCALE);
        }
        let (d_all, dmin_all) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (j, (xs, ls)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let d = d_all * f32::from(b.scales[j] & 0x0F);
            // A zero scale keeps the search's quants.
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * f32::from(b.scales[j] >> 4);
            for (l, &v) in ls.iter_mut().zip(xs) {
                *l = nearest_int((v + dm) / d).clamp(0, 3) as u8;
            }
        }
        b.qs = pack_2bit(&levels);
        b
    }
}
