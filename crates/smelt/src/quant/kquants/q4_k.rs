//! Q4_K: 4-bit affine quants in 8 sub-blocks of 32, each with a 6-bit
//! scale and min under the super-block's f16 `d` and `dmin`. The scale
//! search and the packing of scales are shared with Q5_K.

use bytemuck::{Pod, Zeroable};

use super::search::{AffineSearch, make_qkx2_quants, nearest_int};
use crate::quant::blocks::{Block, F16Bytes, Quantize, f16_to_f32, f32_to_f16};
use crate::quant::{GgmlType, QK_K};

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

/// Packs eight 6-bit scales and mins the way [`scale_min_k4`] reads them.
fn pack_scale_min_k4(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (scales[j], mins[j]);
        if j < 4 {
            q[j] = ls;
            q[j + 4] = lm;
        } else {
            q[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            q[j - 4] |= (ls >> 4) << 6;
            q[j] |= (lm >> 4) << 6;
        }
    }
    q
}

/// A Q4_K or Q5_K super-block before its quants are packed.
pub(super) struct AffineK4 {
    pub d: F16Bytes,
    pub dmin: F16Bytes,
    pub scales: [u8; 12],
    /// (256) quants in 0..=nmax, in value order.
    pub levels: [u8; QK_K],
}

/// The shared half of `quantize_row_q4_K_ref` and `quantize_row_q5_K_ref`:
/// each sub-block of 32 gets a scale and min from `make_qkx2_quants`,
/// weighing values by `rms + |x|`; scales and mins are rounded to 6 bits
/// against the largest of each, and the quants redone with the rounded
/// values.
pub(super) fn quantize_affine_k4(x: &[f32], search: AffineSearch) -> AffineK4 {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let mut aux = [0u8; 32];
    for (j, (xs, ls)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(search, xs, &weights, ls, &mut aux);
    }
    let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });

    let inv = |max: f32| if max > 0.0 { 63.0 / max } else { 0.0 };
    let (inv_scale, inv_min) = (inv(max_scale), inv(max_min));
    // ggml narrows to uint8_t before taking the minimum with 63.
    let six_bits = |v: f32| (nearest_int(v) as u8).min(63);
    let ls: [u8; 8] = std::array::from_fn(|j| six_bits(inv_scale * scales[j]));
    let lm: [u8; 8] = std::array::from_fn(|j| six_bits(inv_min * mins[j]));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f32_to_f16(max_scale / 63.0);
    let dmin = f32_to_f16(max_min / 63.0);

    let (d_all, dmin_all) = (f16_to_f32(d), f16_to_f32(dmin));
    let nmax = search.nmax;
    for (j, (xs, ls)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min_k4(j, &packed);
        let d = d_all * f32::from(sc);
        // A zero scale keeps the search's quants.
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m);
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
    AffineK4 {
        d,
        dmin,
        scales: packed,
        levels,
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

impl Quantize for BlockQ4_K {
    /// `quantize_row_q4_K_ref`.
    fn quantize(x: &[f32]) -> Self {
        const SEARCH: AffineSearch = AffineSearch {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            steps: 20,
            mad: false,
        };
        let k4 = quantize_affine_k4(x, SEARCH);
        let mut qs = [0u8; QK_K / 2];
        for (i, q) in qs.iter_mut().enumerate() {
            let (n, l) = (i / 32, i % 32);
            *q = k4.levels[64 * n + l] | (k4.levels[64 * n + 32 + l] << 4);
        }
        Self {
            d: k4.d,
            dmin: k4.dmin,
            scales: k4.scales,
            qs,
        }
    }
}
