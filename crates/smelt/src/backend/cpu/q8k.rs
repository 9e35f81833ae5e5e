//! Activations rounded to ggml's Q8_K blocks, what the K-quants' integer
//! dot products take: once per matmul, as `quantize_row_q8_K_ref` rounds.
//!
//! ```text
//! per block of 256: max = the value of largest magnitude (the first on ties, sign kept)
//! iscale = -127/max, q = min(127, round_ties_even(iscale · x)), d = 1/iscale
//! bsums16[i] = Σ q[16i..16i+16],  bsums32[i] = Σ q[32i..32i+32]
//! ```
//!
//! A block of zeros has `d = 0` and zero quants and sums.
//!
//! Legend: `k` values per row, `nb = k/256` blocks per row.

use super::simd::{Madd, multiversion};

/// Values per Q8_K block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// Q8_K blocks of `n` rows, laid out as arrays.
#[derive(Default)]
pub struct Q8KActs {
    /// `n × k` quants.
    pub qs: Vec<i8>,
    /// `n × nb` scales.
    pub d: Vec<f32>,
    /// `n × nb × 16` sums of 16 quants (ggml's `bsums`).
    pub bsums16: Vec<i16>,
    /// `n × nb × 8` sums of 32 quants: the sub-blocks of Q4_K and Q5_K.
    pub bsums32: Vec<i16>,
}

/// One row of [`Q8KActs`].
#[derive(Clone, Copy)]
pub struct Q8KRow<'a> {
    /// `k` quants.
    pub qs: &'a [i8],
    /// `nb` scales.
    pub d: &'a [f32],
    /// `nb × 16` sums of 16.
    pub bsums16: &'a [i16],
    /// `nb × 8` sums of 32.
    pub bsums32: &'a [i16],
}

impl Q8KActs {
    /// Quantizes rows of `k` values (`k` a multiple of 256).
    pub fn quantize(&mut self, isa: super::simd::Isa, x: &[f32]) {
        quantize_kernel(isa, self, x);
    }

    /// Row `i` of rows of `k` values.
    pub fn row(&self, i: usize, k: usize) -> Q8KRow<'_> {
        let nb = k / QK_K;
        Q8KRow {
            qs: &self.qs[i * k..(i + 1) * k],
            d: &self.d[i * nb..(i + 1) * nb],
            bsums16: &self.bsums16[i * nb * 16..(i + 1) * nb * 16],
            bsums32: &self.bsums32[i * nb * 8..(i + 1) * nb * 8],
        }
    }

    fn resize(&mut self, n: usize) {
        let nb = n / QK_K;
        self.qs.resize(n, 0);
        self.d.resize(nb, 0.0);
        self.bsums16.resize(nb * 16, 0);
        self.bsums32.resize(nb * 8, 0);
    }
}

multiversion! {
    fn quantize_kernel(acts: &mut Q8KActs, x: &[f32]) = quantize_generic;
}

#[inline(always)]
fn quantize_generic<M: Madd>(acts: &mut Q8KActs, x: &[f32]) {
    acts.resize(x.len());
    let blocks = x
        .chunks_exact(QK_K)
        .zip(acts.qs.chunks_exact_mut(QK_K))
        .zip(acts.d.iter_mut());
    for ((xb, qb), d) in blocks {
        let xb: &[f32; QK_K] = xb.try_into().expect("whole blocks");
        let qb: &mut [i8; QK_K] = qb.try_into().expect("whole blocks");
        #[cfg(target_arch = "x86_64")]
        if M::AVX2 {
            // SAFETY: `M::AVX2` holds only inside the AVX2 entry points,
            // which run after the CPU reported AVX2 and FMA.
            *d = unsafe { avx2::quantize_block(xb, qb) };
            continue;
        }
        *d = quantize_block(xb, qb);
    }
    for (qb, (s16, s32)) in acts.qs.chunks_exact(QK_K).zip(
        acts.bsums16
            .chunks_exact_mut(16)
            .zip(acts.bsums32.chunks_exact_mut(8)),
    ) {
        for (s, q) in s16.iter_mut().zip(qb.chunks_exact(16)) {
            // At most 16 · 127: no i16 overflow.
            *s = q.iter().map(|&v| i16::from(v)).sum();
        }
        for (i, s) in s32.iter_mut().enumerate() {
            *s = s16[2 * i] + s16[2 * i + 1];
        }
    }
}

/// The value of largest magnitude in `x`, the first on ties, with its sign.
#[inline(always)]
fn signed_max(x: &[f32], amax: f32) -> f32 {
    x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0)
}

/// One block, value by value; returns `d`.
#[inline(always)]
fn quantize_block(x: &[f32; QK_K], q: &mut [i8; QK_K]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / signed_max(x, amax);
    for (q, &v) in q.iter_mut().zip(x) {
        // |iscale · v| ≤ 127 up to the product's rounding.
        *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
    }
    1.0 / iscale
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{QK_K, signed_max};

    /// [`super::quantize_block`] 8 values at a time, with the same
    /// arithmetic (the rounding of `_mm256_round_ps` to nearest is ties to
    /// even).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_block(x: &[f32; QK_K], q: &mut [i8; QK_K]) -> f32 {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        // SAFETY (every load below): `x` is 256 f32s, read 8 at a time;
        // loadu needs no alignment.
        let load = |i: usize| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
        let mut m = _mm256_setzero_ps();
        for i in 0..QK_K / 8 {
            m = _mm256_max_ps(m, _mm256_and_ps(load(i), abs_mask));
        }
        let mut lanes = [0f32; 8];
        // SAFETY: 8 writable f32s.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        let amax = lanes.iter().fold(0f32, |a, &b| a.max(b));
        if amax == 0.0 {
            q.fill(0);
            return 0.0;
        }
        let iscale = -127.0 / signed_max(x, amax);
        let vs = _mm256_set1_ps(iscale);
        let top = _mm256_set1_epi32(127);
        // packs interleaves 128-bit halves; this puts the 32 bytes in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for c in 0..QK_K / 32 {
            let v: [__m256i; 4] = std::array::from_fn(|j| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(load(4 * c + j), vs),
                );
                _mm256_min_epi32(_mm256_cvtps_epi32(r), top)
            });
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(v[0], v[1]),
                _mm256_packs_epi32(v[2], v[3]),
            );
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            // SAFETY: 32 writable bytes of `q`.
            unsafe { _mm256_storeu_si256(q.as_mut_ptr().add(32 * c).cast(), bytes) };
        }
        1.0 / iscale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::Isa;
    use crate::quant::{BlockQ8_K, Quantize};

    /// Every instruction set rounds as ggml's `quantize_row_q8_K_ref`
    /// (smelt's `BlockQ8_K::quantize`): quants, scales and sums, on rows
    /// with ties of magnitude, zero blocks and values of every size.
    #[test]
    fn q8_k_rows_match_the_reference_blocks() {
        let k = 3 * QK_K;
        let mut s = 0x2545_f491_u32;
        let mut x: Vec<f32> = (0..2 * k)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as i32) as f32 * 1e-10 * (1 + i % 7) as f32
            })
            .collect();
        // A zero block; a tie of +m and -m (the first wins); a block whose
        // largest value is positive.
        x[QK_K..2 * QK_K].fill(0.0);
        x[2 * QK_K + 5] = -9.0;
        x[2 * QK_K + 9] = 9.0;
        x[k + 17] = 12.5;
        for isa in Isa::available() {
            let mut acts = Q8KActs::default();
            acts.quantize(isa, &x);
            for (b, xb) in x.chunks_exact(QK_K).enumerate() {
                let want = BlockQ8_K::quantize(xb);
                assert_eq!(
                    acts.d[b].to_bits(),
                    want.d().to_bits(),
                    "{isa:?} block {b} d"
                );
                assert_eq!(
                    &acts.qs[b * QK_K..(b + 1) * QK_K],
                    &want.qs[..],
                    "{isa:?} block {b}"
                );
                for i in 0..16 {
                    assert_eq!(
                        acts.bsums16[b * 16 + i],
                        want.bsum(i),
                        "{isa:?} block {b} sum {i}"
                    );
                }
                for i in 0..8 {
                    let pair = want.bsum(2 * i) + want.bsum(2 * i + 1);
                    assert_eq!(acts.bsums32[b * 8 + i], pair, "{isa:?} block {b} sum32 {i}");
                }
            }
            assert_eq!(acts.d[1], 0.0);
            assert!(acts.d[2] > 0.0, "-9 came first: d is positive");
            assert!(acts.d[3] < 0.0, "12.5 is the largest: d is negative");
        }
    }
}
