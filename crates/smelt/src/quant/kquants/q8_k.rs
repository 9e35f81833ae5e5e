//! Q8_K: the activation type the K-quant integer dot products pair with.

use bytemuck::{Pod, Zeroable};

use super::search::nearest_int;
use crate::quant::blocks::{Block, Quantize};
use crate::quant::{GgmlType, QK_K};

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
