//! Q5_K: Q4_K's layout plus a fifth bit per quant.

use bytemuck::{Pod, Zeroable};

use super::q4_k::{quantize_affine_k4, scale_min_k4};
use super::search::AffineSearch;
use crate::quant::blocks::{Block, F16Bytes, Quantize, f16_to_f32};
use crate::quant::{GgmlType, QK_K};

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

impl Quantize for BlockQ5_K {
    /// `quantize_row_q5_K_ref`: Q4_K's search with 32 levels.
    fn quantize(x: &[f32]) -> Self {
        const SEARCH: AffineSearch = AffineSearch {
            nmax: 31,
            rmin: -0.5,
            rdelta: 0.1,
            steps: 15,
            mad: false,
        };
        let k4 = quantize_affine_k4(x, SEARCH);
        let mut b = Self {
            d: k4.d,
            dmin: k4.dmin,
            scales: k4.scales,
            qh: [0; QK_K / 8],
            qs: [0; QK_K / 2],
        };
        for (e, &q) in k4.levels.iter().enumerate() {
            let (n, h, l) = (e / 64, e % 64 / 32, e % 32);
            b.qs[32 * n + l] |= (q & 0x0F) << (4 * h);
            b.qh[l] |= (q >> 4) << (2 * n + h);
        }
        b
    }
}
