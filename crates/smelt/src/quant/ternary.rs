//! The ternary types TQ1_0 and TQ2_0: 256 values in {-1, 0, 1} times one
//! f16 scale, made for BitNet b1.58 models.

use bytemuck::{Pod, Zeroable};

use super::blocks::{Block, F16Bytes, f16_to_f32};
use super::{GgmlType, QK_K};

/// `block_tq1_0`: five trits per byte (3^5 = 243 ≤ 256) in `qs`, four per
/// byte in `qh`, stored as fixed-point fractions of 243.
///
/// Trit `n` of a byte `b` is the top of `(b * 3^n mod 256) * 3`, read in the
/// order: `qs[0..32]` for n = 0..5, then `qs[32..48]` for n = 0..5, then
/// `qh[0..4]` for n = 0..4.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTQ1_0 {
    /// (48)
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    /// (4)
    pub qh: [u8; QK_K / 64],
    pub d: F16Bytes,
}
const _: () = assert!(size_of::<BlockTQ1_0>() == 54);

/// `block_tq2_0`: 2 bits per value, `x = d * (q - 1)`. Value
/// `e = 128*n + 32*l + m` is bits `2l..2l+2` of `qs[32*n + m]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTQ2_0 {
    /// (64)
    pub qs: [u8; QK_K / 4],
    pub d: F16Bytes,
}
const _: () = assert!(size_of::<BlockTQ2_0>() == 66);

/// Trit `n` (0..5) of a base-3 fixed-point byte, as -1, 0 or 1.
fn trit(b: u8, n: u32) -> i32 {
    let q = b.wrapping_mul(3u8.pow(n));
    ((u16::from(q) * 3) >> 8) as i32 - 1
}

impl Block for BlockTQ1_0 {
    const DTYPE: GgmlType = GgmlType::TQ1_0;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        // (byte run, trits per byte) in storage order.
        let runs: [(&[u8], u32); 3] = [(&self.qs[..32], 5), (&self.qs[32..], 5), (&self.qh, 4)];
        let values = runs.into_iter().flat_map(|(run, trits)| {
            (0..trits).flat_map(move |n| run.iter().map(move |&b| trit(b, n)))
        });
        for (v, t) in y.iter_mut().zip(values) {
            *v = t as f32 * d;
        }
    }
}

impl Block for BlockTQ2_0 {
    const DTYPE: GgmlType = GgmlType::TQ2_0;
    const QK: usize = QK_K;

    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (e, v) in y.iter_mut().enumerate() {
            let (n, l, m) = (e / 128, e % 128 / 32, e % 32);
            let q = (self.qs[32 * n + m] >> (2 * l)) & 3;
            *v = (i32::from(q) - 1) as f32 * d;
        }
    }
}
