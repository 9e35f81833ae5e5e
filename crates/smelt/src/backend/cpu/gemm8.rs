//! Prefill matmuls of Q4_0 and Q8_0 weights, 8 weight rows at a time: the
//! rows are unpacked interleaved, so one integer vector holds the dot
//! products of one activation block with 8 weight rows, and one conversion
//! and one `fma` scale and add 8 outputs (AVX2 only).
//!
//! This is not ggml's `vec_dot` order ([`super::q8`] keeps that one, for
//! decode, Q4_1, and in the exact mode: `CpuBackend::new_exact`,
//! `SMELT_CPU_EXACT=1`), but the same terms: per output,
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
//! nibbles 0..16, Q8_0: the signed quants); and apart, per group and
//! block, the 8 rows' scales. A 32-byte load at word `8t` is then values `4t..4t+4` of
//! the 8 rows, and a broadcast of activation values `4t..4t+4` against it
//! gives each row's products in its own 32-bit lane.
//!
//! Legend: `k` values per row, `nb = k/32` blocks per row, `n` activation
//! rows.

use super::q8::QK8;
use super::simd::Madd;
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
    #[inline(always)]
    pub fn unpack<M: Madd>(&mut self, dtype: GgmlType, src: &[u8], nb: usize) {
        let rows = self.resize(dtype, src, nb);
        for g in 0..self.groups {
            #[cfg(target_arch = "x86_64")]
            if M::AVX2 && (g + 1) * ROWS <= rows {
                // SAFETY: `M::AVX2` holds only inside the AVX2 entry
                // points, which run after the CPU reported AVX2, FMA and
                // F16C.
                unsafe { avx2::unpack_group(self, g, dtype, src) };
                continue;
            }
            self.unpack_group(g, dtype, src, rows);
        }
    }

    /// Sizes the arrays for `src`'s rows; returns how many there are.
    fn resize(&mut self, dtype: GgmlType, src: &[u8], nb: usize) -> usize {
        let row_bytes = nb * dtype.type_size();
        let rows = src.len() / row_bytes.max(1);
        self.nb = nb;
        self.groups = rows.div_ceil(ROWS);
        self.qs.resize(self.groups * nb * WORDS, 0);
        self.d.resize(self.groups * nb * ROWS, 0.0);
        rows
    }

    /// Group `g` of `src`'s `rows` rows, a value at a time; rows past the
    /// last are padding: zero quants and scales, outputs 0 that nobody
    /// stores.
    fn unpack_group(&mut self, g: usize, dtype: GgmlType, src: &[u8], rows: usize) {
        let (nb, bytes) = (self.nb, dtype.type_size());
        let word =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        for c in 0..ROWS {
            let r = g * ROWS + c;
            for b in 0..nb {
                let q = &mut self.qs[(g * nb + b) * WORDS..][..WORDS];
                let d = &mut self.d[(g * nb + b) * ROWS + c];
                if r >= rows {
                    for t in 0..QK8 / 4 {
                        q[t * ROWS + c] = 0;
                    }
                    *d = 0.0;
                    continue;
                }
                let blk = &src[(r * nb + b) * bytes..][..bytes];
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

/// An activation row for [`rows8`]: quants, scales, and (Q4_0) `8·Σq` per
/// block.
pub type XRow<'a> = (&'a [i8], &'a [f32], &'a [i32]);

/// Whether [`rows8`] has a kernel for this entry point (AVX2 only; the
/// others keep [`super::q8`]'s tiles).
#[inline(always)]
pub fn has_kernel<M: Madd>() -> bool {
    cfg!(target_arch = "x86_64") && M::AVX2
}

/// `P` activation rows against group `g` of `w`: 8 outputs per row (the
/// padding rows' too). Only when [`has_kernel`].
#[inline(always)]
pub fn rows8<M: Madd, const P: usize>(
    dtype: GgmlType,
    w: &Interleaved,
    g: usize,
    xs: [XRow; P],
) -> [[f32; ROWS]; P] {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C.
        return unsafe {
            if dtype == GgmlType::Q4_0 {
                avx2::rows8::<P, true>(w, g, xs)
            } else {
                avx2::rows8::<P, false>(w, g, xs)
            }
        };
    }
    let _ = (dtype, w, g, xs);
    unreachable!("rows8 without has_kernel")
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{GgmlType, Interleaved, QK8, ROWS, WORDS, XRow};

    /// [`Interleaved::unpack_group`] for a group of 8 real rows, a block at
    /// a time: the 8 rows' words transposed in registers (Q4_0: 8 × 4
    /// words of nibble pairs, then split; Q8_0: 8 × 8 words), the 8 scales
    /// converted together.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn unpack_group(w: &mut Interleaved, g: usize, dtype: GgmlType, src: &[u8]) {
        let (nb, bytes) = (w.nb, dtype.type_size());
        let row_bytes = nb * bytes;
        assert!(
            src.len() >= (g + 1) * ROWS * row_bytes
                && w.qs.len() >= (g + 1) * nb * WORDS
                && w.d.len() >= (g + 1) * nb * ROWS,
            "group outside the rows"
        );
        let rows = src[g * ROWS * row_bytes..].as_ptr();
        let q = w.qs[g * nb * WORDS..].as_mut_ptr();
        let d = w.d[g * nb * ROWS..].as_mut_ptr();
        let mask = _mm256_set1_epi8(15);
        for b in 0..nb {
            // Block b of row c: its bytes lie within the group's 8 rows
            // (asserted above).
            let blk = |c: usize| rows.wrapping_add(c * row_bytes + b * bytes);
            // SAFETY: the block's f16 scale; read_unaligned needs no
            // alignment.
            let h: [u16; ROWS] =
                std::array::from_fn(|c| unsafe { blk(c).cast::<u16>().read_unaligned() });
            // SAFETY: 8 readable u16s.
            let h = unsafe { _mm_loadu_si128(h.as_ptr().cast()) };
            let out = q.wrapping_add(b * WORDS);
            // SAFETY: the group's block b: 8 scales and 64 words within
            // `d` and `qs` (asserted above); storeu needs no alignment.
            let store =
                |t: usize, v: __m256i| unsafe { _mm256_storeu_si256(out.add(t * ROWS).cast(), v) };
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(d.add(b * ROWS), _mm256_cvtph_ps(h)) };
            if dtype == GgmlType::Q4_0 {
                // Row c's 16 bytes of nibbles in lane half c / 4.
                // SAFETY: bytes 2..18 of each block (see `blk`).
                let r: [__m256i; 4] = std::array::from_fn(|c| unsafe {
                    _mm256_set_m128i(
                        _mm_loadu_si128(blk(c + 4).add(2).cast()),
                        _mm_loadu_si128(blk(c).add(2).cast()),
                    )
                });
                let a0 = _mm256_unpacklo_epi32(r[0], r[1]);
                let a1 = _mm256_unpacklo_epi32(r[2], r[3]);
                let a2 = _mm256_unpackhi_epi32(r[0], r[1]);
                let a3 = _mm256_unpackhi_epi32(r[2], r[3]);
                // Word t of rows 0..8, in row order.
                let words = [
                    _mm256_unpacklo_epi64(a0, a1),
                    _mm256_unpackhi_epi64(a0, a1),
                    _mm256_unpacklo_epi64(a2, a3),
                    _mm256_unpackhi_epi64(a2, a3),
                ];
                for (t, v) in words.into_iter().enumerate() {
                    store(t, _mm256_and_si256(v, mask));
                    store(t + 4, _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
                }
            } else {
                // SAFETY: bytes 2..34 of each block (see `blk`).
                let r: [__m256i; ROWS] =
                    std::array::from_fn(|c| unsafe { _mm256_loadu_si256(blk(c).add(2).cast()) });
                // Pairs of rows interleaved by words, then quads: u[t] holds
                // words t (low half) and t + 4 (high half) of rows 0..4,
                // u[4 + t] those of rows 4..8.
                let t: [__m256i; ROWS] = std::array::from_fn(|i| {
                    let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
                    if i % 2 == 0 {
                        _mm256_unpacklo_epi32(a, b)
                    } else {
                        _mm256_unpackhi_epi32(a, b)
                    }
                });
                let u: [__m256i; ROWS] = std::array::from_fn(|i| {
                    let (h, j) = (4 * (i / 4), i % 4);
                    let (a, b) = (t[h + j / 2], t[h + 2 + j / 2]);
                    if j % 2 == 0 {
                        _mm256_unpacklo_epi64(a, b)
                    } else {
                        _mm256_unpackhi_epi64(a, b)
                    }
                });
                for j in 0..4 {
                    store(j, _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]));
                    store(j + 4, _mm256_permute2x128_si256::<0x31>(u[j], u[4 + j]));
                }
            }
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::{Avx2Fma, Isa};

    /// The AVX2 unpacking gives the value-at-a-time one's words and scales,
    /// padding groups included.
    #[test]
    fn avx2_unpacking_matches_the_portable_one() {
        if Isa::detect() != Isa::Avx2 {
            return;
        }
        for dtype in [GgmlType::Q4_0, GgmlType::Q8_0] {
            let (rows, nb) = (21, 5);
            let mut s = 0x9e37_79b9_u32;
            let src: Vec<u8> = (0..rows * nb * dtype.type_size())
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 17;
                    s ^= s << 5;
                    // Scales stay finite: no f16 NaN/infinity exponents.
                    (s >> 8) as u8 & 0xbf
                })
                .collect();
            let mut want = Interleaved::default();
            want.resize(dtype, &src, nb);
            for g in 0..want.groups {
                want.unpack_group(g, dtype, &src, rows);
            }
            let mut got = Interleaved::default();
            got.unpack::<Avx2Fma>(dtype, &src, nb);
            assert_eq!(got.groups, 3);
            assert_eq!(got.qs, want.qs, "{dtype:?} quants");
            assert_eq!(got.d, want.d, "{dtype:?} scales");
        }
    }
}
