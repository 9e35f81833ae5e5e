//! Prefill matmuls of Q4_0 and Q8_0 weights, 8 weight rows at a time: the
//! rows are unpacked interleaved, so one integer vector holds the dot
//! products of one activation block with 8 weight rows, and one conversion
//! and one `fma` scale and add 8 outputs (AVX2 only).
//!
//! This is not ggml's `vec_dot` order ([`super::q8`] keeps that one, for
//! decode, Q4_1, and when `SMELT_CPU_EXACT` asks for it), but the same
//! terms: per output,
//!
//! ```text
//! dot = Σ_b (d_w · d_x) · isum_b        (f32, one fma per block)
//! isum_b = Σ_{j<32} w_q[j] · x_q[j]     (exact integers; Q4_0: Σ nibble·x − 8·Σx)
//! ```
//!
//! Activations are rounded to the same 8-bit blocks and the block sums are
//! the same integers, so only the f32 rounding of the sums differs from
//! ggml's order (about 1e-7 of the terms' magnitudes); through a model that
//! moves perplexity about as much as summing the blocks in reverse does.
//!
//! Layout of [`Interleaved`]: groups of 8 weight rows (the last one padded
//! with zero rows); per group and block 64 words of 4 bytes, word `8t + c`
//! holding values `4t..4t+4` of row `c`'s block, one byte each (Q4_0: the
//! nibbles 0..16, Q8_0: the signed quants); then per group and block the 8
//! rows' scales. A 32-byte load at word `8t` is then values `4t..4t+4` of
//! the 8 rows, and a broadcast of activation values `4t..4t+4` against it
//! gives each row's products in its own 32-bit lane.
//!
//! Legend: `k` values per row, `nb = k/32` blocks per row, `n` activation
//! rows.

use super::q8::QK8;
use crate::quant::GgmlType;

/// Weight rows interleaved in one group.
pub const ROWS: usize = 8;
/// Words of 4 quants per block and group.
const WORDS: usize = QK8 / 4 * ROWS;

/// Whether weights of `dtype` take this path (where AVX2 is there).
pub fn has_path(dtype: GgmlType) -> bool {
    matches!(dtype, GgmlType::Q4_0 | GgmlType::Q8_0)
}

/// Weight rows unpacked interleaved (see the module docs).
#[derive(Default)]
pub struct Interleaved {
    /// `groups × nb × 64` words of 4 quants.
    pub qs: Vec<u32>,
    /// `groups × nb × 8` scales.
    pub d: Vec<f32>,
    pub nb: usize,
    pub groups: usize,
}

impl Interleaved {
    /// Unpacks `src`, whole rows of `nb` blocks of `dtype` (Q4_0 or Q8_0),
    /// into groups of 8 rows.
    pub fn unpack(&mut self, dtype: GgmlType, src: &[u8], nb: usize) {
        let bytes = dtype.type_size();
        let row_bytes = nb * bytes;
        let rows = src.len() / row_bytes.max(1);
        self.nb = nb;
        self.groups = rows.div_ceil(ROWS);
        self.qs.resize(self.groups * nb * WORDS, 0);
        self.d.resize(self.groups * nb * ROWS, 0.0);
        let word =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        for g in 0..self.groups {
            for c in 0..ROWS {
                let r = g * ROWS + c;
                for b in 0..nb {
                    let q = &mut self.qs[(g * nb + b) * WORDS..][..WORDS];
                    let d = &mut self.d[(g * nb + b) * ROWS + c];
                    if r >= rows {
                        // Padding rows: zero quants and scales, outputs 0
                        // that nobody stores.
                        for t in 0..QK8 / 4 {
                            q[t * ROWS + c] = 0;
                        }
                        *d = 0.0;
                        continue;
                    }
                    let blk = &src[r * row_bytes + b * bytes..][..bytes];
                    *d = super::simd::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                    if dtype == GgmlType::Q4_0 {
                        // Byte j holds value j (low nibble) and j + 16.
                        for t in 0..4 {
                            let v = word(blk, 2 + 4 * t);
                            q[t * ROWS + c] = v & 0x0f0f_0f0f;
                            q[(t + 4) * ROWS + c] = (v >> 4) & 0x0f0f_0f0f;
                        }
                    } else {
                        for t in 0..8 {
                            q[t * ROWS + c] = word(blk, 2 + 4 * t);
                        }
                    }
                }
            }
        }
    }
}

/// An activation row for [`rows8`]: quants, scales, and (Q4_0) `8·Σq` per
/// block.
pub type XRow<'a> = (&'a [i8], &'a [f32], &'a [i32]);

/// `P` activation rows against group `g` of `w`: 8 outputs per row (the
/// padding rows' too). Only inside AVX2 entry points.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rows8<const P: usize>(
    dtype: GgmlType,
    w: &Interleaved,
    g: usize,
    xs: [XRow; P],
) -> [[f32; ROWS]; P] {
    // SAFETY: the callers run inside AVX2 entry points, after the CPU
    // reported AVX2 and FMA.
    unsafe {
        if dtype == GgmlType::Q4_0 {
            avx2::rows8::<P, true>(w, g, xs)
        } else {
            avx2::rows8::<P, false>(w, g, xs)
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Interleaved, QK8, ROWS, WORDS, XRow};

    /// Per block: for each word `t`, the 8 rows' quants are loaded once and
    /// each activation row's 4 values broadcast against them; `maddubs`
    /// gives each row's 2 pair sums in its lane. Q4_0 adds those in i16
    /// (8 words of pairs of nibble · x: at most 8 · 2 · 15 · 127 = 30480)
    /// and takes `8·Σx` off in i32; Q8_0 moves the weight's sign onto x
    /// (|w| ≤ 128, |x| ≤ 127: a pair is at most 32512) and adds in i32.
    /// Then one conversion, one multiply of the scales, one `fma` for the
    /// 8 outputs.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn rows8<const P: usize, const Q4: bool>(
        w: &Interleaved,
        g: usize,
        xs: [XRow; P],
    ) -> [[f32; ROWS]; P] {
        let nb = w.nb;
        assert!(
            g < w.groups
                && w.qs.len() >= w.groups * nb * WORDS
                && w.d.len() >= w.groups * nb * ROWS
                && xs
                    .iter()
                    .all(|x| x.0.len() >= nb * QK8 && x.1.len() >= nb && (!Q4 || x.2.len() >= nb)),
            "rows shorter than their blocks"
        );
        let wq = w.qs[g * nb * WORDS..].as_ptr();
        let wd = w.d[g * nb * ROWS..].as_ptr();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); P];
        for b in 0..nb {
            let mut sums = [_mm256_setzero_si256(); P];
            for t in 0..QK8 / 4 {
                // SAFETY: group g, block b < nb, word 8t: within `qs`
                // (asserted above); loadu needs no alignment.
                let q = unsafe { _mm256_loadu_si256(wq.add(b * WORDS + t * ROWS).cast()) };
                let qa = if Q4 { q } else { _mm256_sign_epi8(q, q) };
                for p in 0..P {
                    // SAFETY: values 4t..4t+4 of block b < nb of a row of
                    // nb blocks (asserted above).
                    let x4 = unsafe {
                        xs[p]
                            .0
                            .as_ptr()
                            .add(b * QK8 + 4 * t)
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    let xv = _mm256_set1_epi32(x4);
                    if Q4 {
                        let pairs = _mm256_maddubs_epi16(q, xv);
                        sums[p] = if t == 0 {
                            pairs
                        } else {
                            _mm256_add_epi16(sums[p], pairs)
                        };
                    } else {
                        let pairs = _mm256_maddubs_epi16(qa, _mm256_sign_epi8(xv, q));
                        let l = _mm256_madd_epi16(pairs, ones);
                        sums[p] = if t == 0 {
                            l
                        } else {
                            _mm256_add_epi32(sums[p], l)
                        };
                    }
                }
            }
            // SAFETY: the 8 scales of group g, block b < nb (asserted).
            let dw = unsafe { _mm256_loadu_ps(wd.add(b * ROWS)) };
            for p in 0..P {
                let isum = if Q4 {
                    // SAFETY: b < nb (asserted above).
                    let off = unsafe { *xs[p].2.get_unchecked(b) };
                    _mm256_sub_epi32(_mm256_madd_epi16(sums[p], ones), _mm256_set1_epi32(off))
                } else {
                    sums[p]
                };
                // SAFETY: b < nb (asserted above).
                let dx = unsafe { _mm256_set1_ps(*xs[p].1.get_unchecked(b)) };
                acc[p] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[p]);
            }
        }
        let mut out = [[0f32; ROWS]; P];
        for p in 0..P {
            // SAFETY: 8 writable f32s; storeu needs no alignment.
            unsafe { _mm256_storeu_ps(out[p].as_mut_ptr(), acc[p]) };
        }
        out
    }
}
