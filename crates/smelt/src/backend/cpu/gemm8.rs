//! Prefill matmuls of the 32-value block types (Q4_0, Q5_0, Q5_1, Q8_0;
//! not Q4_1, see [`has_path`]), 8 weight rows at a time: the rows are unpacked interleaved, so
//! one integer vector holds the dot products of one activation block with 8
//! weight rows, and one conversion and one `fma` scale and add 8 outputs
//! (AVX2 only).
//!
//! This is not ggml's `vec_dot` order ([`super::q8`] keeps that one, for
//! decode and in the exact mode: `CpuBackend::new_exact`,
//! `SMELT_CPU_EXACT=1`), but the same terms: per output,
//!
//! ```text
//! dot = Σ_b (d_w · d_x) · isum_b (+ m_w · s_x)   (f32, one fma per block; Q5_1's minimum)
//! isum_b = Σ_{j<32} w_q[j] · x_q[j]              (exact integers; Q4_0: Σ u·x − 8·Σx, Q5_0: − 16·Σx)
//! ```
//!
//! Activations are rounded to the same 8-bit blocks and the block sums are
//! the same integers, so only the f32 rounding of the sums differs from
//! ggml's order (about 1e-7 of the terms' magnitudes); through a model that
//! moves perplexity about as much as summing the blocks in reverse does.
//!
//! Layout of [`Interleaved`]: groups of 8 weight rows (the last one padded
//! with zero rows); per group and block 64 words of 4 bytes, word `8t + c`
//! holding values `4t..4t+4` of row `c`'s block, one byte each (the 4- and
//! 5-bit types: the unsigned values 0..16 or 0..32, Q8_0: the signed
//! quants); and apart, per group and block, the 8 rows' scales (and
//! minimums). A 32-byte load at word `8t` is then values `4t..4t+4` of the
//! 8 rows, and a broadcast of activation values `4t..4t+4` against it gives
//! each row's products in its own 32-bit lane.
//!
//! Legend: `k` values per row, `nb = k/32` blocks per row, `n` activation
//! rows.

use std::ops::Range;

use super::q8::{Q8Acts, QK8};
use super::simd::Madd;
use crate::quant::GgmlType;

/// Weight rows interleaved in one group.
pub const ROWS: usize = 8;
/// Words of 4 quants per block and group.
const WORDS: usize = QK8 / 4 * ROWS;

/// Whether weights of `dtype` take this path (where AVX2 is there). Q4_1
/// keeps ggml's order: with it SmolLM2 as shipped follows llama.cpp's
/// greedy choices, which a small model's chaotic 8-bit rounding ties to
/// the order of every sum before it.
pub fn has_path(dtype: GgmlType) -> bool {
    use GgmlType::*;
    matches!(dtype, Q4_0 | Q5_0 | Q5_1 | Q8_0)
}

/// Where a block keeps its parts: bytes, the minimum (0: none), the fifth
/// bits (0: none), the quants.
#[derive(Clone, Copy)]
struct Layout {
    bytes: usize,
    m: usize,
    qh: usize,
    qs: usize,
}

impl Layout {
    fn of(dtype: GgmlType) -> Layout {
        let (bytes, m, qh, qs) = match dtype {
            GgmlType::Q4_0 => (18, 0, 0, 2),
            GgmlType::Q4_1 => (20, 2, 0, 4),
            GgmlType::Q5_0 => (22, 0, 2, 6),
            GgmlType::Q5_1 => (24, 2, 4, 8),
            _ => (34, 0, 0, 2),
        };
        Layout { bytes, m, qh, qs }
    }
}

/// Weight rows unpacked interleaved (see the module docs).
#[derive(Default)]
pub struct Interleaved {
    /// `groups × nb × 64` words of 4 quants.
    pub qs: Vec<u32>,
    /// `groups × nb × 8` scales.
    pub d: Vec<f32>,
    /// `groups × nb × 8` minimums (Q4_1, Q5_1).
    pub m: Vec<f32>,
    pub nb: usize,
    pub groups: usize,
}

impl Interleaved {
    /// Unpacks `src`, whole rows of `nb` blocks of `dtype` (a type
    /// [`has_path`] accepts), into groups of 8 rows.
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
        if Layout::of(dtype).m != 0 {
            self.m.resize(self.groups * nb * ROWS, 0.0);
        }
        rows
    }

    /// Group `g` of `src`'s `rows` rows, a value at a time; rows past the
    /// last are padding: zero quants and scales, outputs 0 that nobody
    /// stores.
    fn unpack_group(&mut self, g: usize, dtype: GgmlType, src: &[u8], rows: usize) {
        let (nb, at) = (self.nb, Layout::of(dtype));
        let half =
            |b: &[u8], i: usize| super::simd::f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]));
        for c in 0..ROWS {
            let r = g * ROWS + c;
            for b in 0..nb {
                let q = &mut self.qs[(g * nb + b) * WORDS..][..WORDS];
                let i = (g * nb + b) * ROWS + c;
                if r >= rows {
                    for t in 0..QK8 / 4 {
                        q[t * ROWS + c] = 0;
                    }
                    self.d[i] = 0.0;
                    if at.m != 0 {
                        self.m[i] = 0.0;
                    }
                    continue;
                }
                let blk = &src[(r * nb + b) * at.bytes..][..at.bytes];
                self.d[i] = half(blk, 0);
                if at.m != 0 {
                    self.m[i] = half(blk, at.m);
                }
                let value = |j: usize| -> u8 {
                    if dtype == GgmlType::Q8_0 {
                        return blk[at.qs + j];
                    }
                    let byte = blk[at.qs + j % 16];
                    let nibble = if j < 16 { byte & 15 } else { byte >> 4 };
                    let fifth = if at.qh != 0 {
                        (blk[at.qh + j / 8] >> (j % 8) & 1) << 4
                    } else {
                        0
                    };
                    nibble | fifth
                };
                for t in 0..QK8 / 4 {
                    let v: [u8; 4] = std::array::from_fn(|e| value(4 * t + e));
                    q[t * ROWS + c] = u32::from_le_bytes(v);
                }
            }
        }
    }
}

/// Whether [`group`] has a kernel for this entry point (AVX2 only; the
/// others keep [`super::q8`]'s tiles).
#[inline(always)]
pub fn has_kernel<M: Madd>() -> bool {
    cfg!(target_arch = "x86_64") && M::AVX2
}

/// Activation rows `rows` of `x` (rows of `k` values) against group `g`
/// of `w`: 8 outputs per row (the padding rows' too) into `out`, row after
/// row. One call per group, so the group's weights stay in L1 while the
/// rows pass. Only when [`has_kernel`].
#[inline(always)]
pub fn group<M: Madd>(
    dtype: GgmlType,
    w: &Interleaved,
    g: usize,
    x: &Q8Acts,
    k: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if M::AVX512 {
        use avx2::{Q4_0, Q5_0, Q5_1, Q8_0, group_vnni as run};
        // SAFETY: `M::AVX512` holds only inside the AVX-512 entry points,
        // which run after the CPU reported AVX2, FMA, F16C and AVX-512 F,
        // BW, VL and VNNI.
        return unsafe {
            match dtype {
                GgmlType::Q4_0 => run::<Q4_0>(w, g, x, k, rows, out),
                GgmlType::Q5_0 => run::<Q5_0>(w, g, x, k, rows, out),
                GgmlType::Q5_1 => run::<Q5_1>(w, g, x, k, rows, out),
                _ => run::<Q8_0>(w, g, x, k, rows, out),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        use avx2::{Q4_0, Q5_0, Q5_1, Q8_0, group as run};
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C.
        return unsafe {
            match dtype {
                GgmlType::Q4_0 => run::<Q4_0>(w, g, x, k, rows, out),
                GgmlType::Q5_0 => run::<Q5_0>(w, g, x, k, rows, out),
                GgmlType::Q5_1 => run::<Q5_1>(w, g, x, k, rows, out),
                _ => run::<Q8_0>(w, g, x, k, rows, out),
            }
        };
    }
    let _ = (dtype, w, g, x, k, rows, out);
    unreachable!("gemm8::group without has_kernel")
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use std::ops::Range;

    use super::{GgmlType, Interleaved, Layout, Q8Acts, QK8, ROWS, WORDS};

    /// [`Interleaved::unpack_group`] for a group of 8 real rows, a block at
    /// a time: the 8 rows' words transposed in registers (the 4- and 5-bit
    /// types: 8 × 4 words of nibble pairs, then split, the fifth bits
    /// spread onto them; Q8_0: 8 × 8 words), the 8 scales (and minimums)
    /// converted together.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn unpack_group(w: &mut Interleaved, g: usize, dtype: GgmlType, src: &[u8]) {
        let (nb, at) = (w.nb, Layout::of(dtype));
        let row_bytes = nb * at.bytes;
        assert!(
            src.len() >= (g + 1) * ROWS * row_bytes
                && w.qs.len() >= (g + 1) * nb * WORDS
                && w.d.len() >= (g + 1) * nb * ROWS
                && (at.m == 0 || w.m.len() >= (g + 1) * nb * ROWS),
            "group outside the rows"
        );
        let rows = src[g * ROWS * row_bytes..].as_ptr();
        let q = w.qs[g * nb * WORDS..].as_mut_ptr();
        let d = w.d[g * nb * ROWS..].as_mut_ptr();
        let m = w.m.as_mut_ptr().wrapping_add(g * nb * ROWS);
        let mask = _mm256_set1_epi8(15);
        for b in 0..nb {
            // Block b of row c: its bytes lie within the group's 8 rows
            // (asserted above).
            let blk = |c: usize| rows.wrapping_add(c * row_bytes + b * at.bytes);
            // The 8 rows' f16 at byte `i` of their blocks, as f32.
            let halves = |i: usize| {
                // SAFETY: two bytes of the block; read_unaligned needs no
                // alignment.
                let h: [u16; ROWS] = std::array::from_fn(|c| unsafe {
                    blk(c).add(i).cast::<u16>().read_unaligned()
                });
                // SAFETY: 8 readable u16s.
                _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
            };
            let out = q.wrapping_add(b * WORDS);
            // SAFETY: the group's block b: 8 scales and 64 words within
            // `d` and `qs` (asserted above); storeu needs no alignment.
            let store =
                |t: usize, v: __m256i| unsafe { _mm256_storeu_si256(out.add(t * ROWS).cast(), v) };
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(d.add(b * ROWS), halves(0)) };
            if at.m != 0 {
                // SAFETY: as above (`m` is as long as `d` for these types).
                unsafe { _mm256_storeu_ps(m.add(b * ROWS), halves(at.m)) };
            }
            if dtype == GgmlType::Q8_0 {
                // SAFETY: bytes 2..34 of each block (see `blk`).
                let r: [__m256i; ROWS] =
                    std::array::from_fn(|c| unsafe { _mm256_loadu_si256(blk(c).add(2).cast()) });
                for (t, v) in transpose8(r).into_iter().enumerate() {
                    store(t, v);
                }
                continue;
            }
            // Row c's 16 bytes of nibbles in lane half c / 4.
            // SAFETY: the block's 16 bytes of nibbles (see `blk`).
            let r: [__m256i; 4] = std::array::from_fn(|c| unsafe {
                _mm256_set_m128i(
                    _mm_loadu_si128(blk(c + 4).add(at.qs).cast()),
                    _mm_loadu_si128(blk(c).add(at.qs).cast()),
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
            // The 8 rows' fifth bits, row c in lane c.
            let qh = if at.qh != 0 {
                // SAFETY: the block's 4 bytes of fifth bits.
                let h: [i32; ROWS] = std::array::from_fn(|c| unsafe {
                    blk(c).add(at.qh).cast::<i32>().read_unaligned()
                });
                // SAFETY: 8 readable i32s.
                unsafe { _mm256_loadu_si256(h.as_ptr().cast()) }
            } else {
                _mm256_setzero_si256()
            };
            // Values 4t..4t+4's fifth bits as 16 in their bytes: the 4 bits
            // copied 7 bits apart by one multiply, bit e landing in byte e.
            let fifth = |t: usize| {
                let bits = _mm256_and_si256(
                    _mm256_srlv_epi32(qh, _mm256_set1_epi32(4 * t as i32)),
                    _mm256_set1_epi32(15),
                );
                let spread = _mm256_mullo_epi32(bits, _mm256_set1_epi32(0x0020_4081));
                _mm256_slli_epi32::<4>(_mm256_and_si256(spread, _mm256_set1_epi32(0x0101_0101)))
            };
            for (t, v) in words.into_iter().enumerate() {
                let (lo, hi) = (
                    _mm256_and_si256(v, mask),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask),
                );
                if at.qh != 0 {
                    store(t, _mm256_or_si256(lo, fifth(t)));
                    store(t + 4, _mm256_or_si256(hi, fifth(t + 4)));
                } else {
                    store(t, lo);
                    store(t + 4, hi);
                }
            }
        }
    }

    /// 8 rows of 8 words transposed: word `t` of rows 0..8 in `out[t]`.
    #[inline(always)]
    pub(in crate::backend::cpu) fn transpose8(r: [__m256i; ROWS]) -> [__m256i; ROWS] {
        // SAFETY: only called from functions compiled with AVX2.
        unsafe {
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
            std::array::from_fn(|w| {
                let j = w % 4;
                if w < 4 {
                    _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j])
                } else {
                    _mm256_permute2x128_si256::<0x31>(u[j], u[4 + j])
                }
            })
        }
    }

    pub const Q4_0: u8 = 0;
    pub const Q5_0: u8 = 2;
    pub const Q5_1: u8 = 3;
    pub const Q8_0: u8 = 4;

    /// [`super::group`]: the rows 4 at a time ([`rows_of`]), then one at a
    /// time.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn group<const T: u8>(
        w: &Interleaved,
        g: usize,
        x: &Q8Acts,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        // SAFETY: as the caller promises.
        unsafe { group_of::<T, false>(w, g, x, k, rows, out) }
    }

    /// [`group`] with the integer dot products on AVX-512 VNNI's
    /// `vpdpbusd` (256 bits wide).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and AVX-512 F, BW, VL and VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn group_vnni<const T: u8>(
        w: &Interleaved,
        g: usize,
        x: &Q8Acts,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        // SAFETY: as the caller promises.
        unsafe { group_of::<T, true>(w, g, x, k, rows, out) }
    }

    /// [`group`]'s body, inlined into the entry point's instruction set.
    ///
    /// # Safety
    /// As [`group`]'s, with AVX-512 VNNI too where `VNNI`.
    #[inline(always)]
    unsafe fn group_of<const T: u8, const VNNI: bool>(
        w: &Interleaved,
        g: usize,
        x: &Q8Acts,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let nb = w.nb;
        assert!(
            g < w.groups
                && nb * QK8 == k
                && w.qs.len() >= w.groups * nb * WORDS
                && w.d.len() >= w.groups * nb * ROWS
                && (T != Q5_1 || w.m.len() >= w.groups * nb * ROWS)
                && x.qs.len() >= rows.end * k
                && x.d.len() >= rows.end * nb
                && x.sum8.len() >= rows.end * nb
                && x.s.len() >= rows.end * nb
                && out.len() >= rows.len() * ROWS,
            "rows shorter than their blocks"
        );
        // Row i's arrays (inside the asserted lengths).
        let row = |i: usize| XPtr {
            qs: x.qs.as_ptr().wrapping_add(i * k),
            d: x.d.as_ptr().wrapping_add(i * nb),
            sum8: x.sum8.as_ptr().wrapping_add(i * nb),
            s: x.s.as_ptr().wrapping_add(i * nb),
        };
        let mut i = rows.start;
        while i < rows.end {
            let o = out.as_mut_ptr().wrapping_add((i - rows.start) * ROWS);
            // SAFETY: rows i.. < rows.end and their outputs, as asserted.
            if rows.end - i >= 4 {
                let xs = [row(i), row(i + 1), row(i + 2), row(i + 3)];
                unsafe { rows_of::<4, T, VNNI>(w, g, xs, o) };
                i += 4;
            } else {
                unsafe { rows_of::<1, T, VNNI>(w, g, [row(i)], o) };
                i += 1;
            }
        }
    }

    /// One activation row's arrays: quants, scales, `8·Σq` and `f16(d·Σq)`
    /// per block.
    #[derive(Clone, Copy)]
    struct XPtr {
        qs: *const i8,
        d: *const f32,
        sum8: *const i32,
        s: *const f32,
    }

    /// Per block: for each word `t`, the 8 rows' quants are loaded once and
    /// each activation row's 4 values broadcast against them; `maddubs`
    /// gives each row's 2 pair sums in its lane. The unsigned types add
    /// those in i16 for a run of words (Q4: 8 words of nibble · x, at most
    /// 8 · 2 · 15 · 127 = 30480; Q5: 4 words, 31496), then in i32, and
    /// Q4_0 and Q5_0 take `8·Σx` or `16·Σx` off; Q8_0 moves the weight's
    /// sign onto x (|w| ≤ 128, |x| ≤ 127: a pair is at most 32512) and adds
    /// in i32. Then one conversion, one multiply of the scales, one `fma`
    /// for the 8 outputs, and one more `fma` for Q5_1's minimums. The `P`
    /// rows' 8 outputs go to `out`, row after row. With `VNNI` one
    /// `vpdpbusd` a word sums each row's 4 products straight into i32: the
    /// same integers, with no i16 runs.
    ///
    /// # Safety
    /// The rows hold group `g`'s `nb` blocks and `out` `P · 8` floats;
    /// compiled with AVX2 and FMA, and AVX-512 VL and VNNI where `VNNI`.
    #[inline(always)]
    unsafe fn rows_of<const P: usize, const T: u8, const VNNI: bool>(
        w: &Interleaved,
        g: usize,
        xs: [XPtr; P],
        out: *mut f32,
    ) {
        let nb = w.nb;
        let with_min = T == Q5_1;
        let offset = T == Q4_0 || T == Q5_0;
        // Words summed in i16 before they widen.
        let span = if T == Q5_0 || T == Q5_1 { 4 } else { 8 };
        let wq = w.qs.as_ptr().wrapping_add(g * nb * WORDS);
        let wd = w.d.as_ptr().wrapping_add(g * nb * ROWS);
        let wm = w.m.as_ptr().wrapping_add(g * nb * ROWS);
        // SAFETY (the whole body): every read is inside group g's block b <
        // nb or an activation row's block b, as the caller promises; loads
        // need no alignment. The VNNI instruction runs only where `VNNI`,
        // which the caller sets only in an entry point compiled with it.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); P];
            for b in 0..nb {
                let mut sums = [_mm256_setzero_si256(); P];
                let mut run = [_mm256_setzero_si256(); P];
                for t in 0..QK8 / 4 {
                    let q = _mm256_loadu_si256(wq.add(b * WORDS + t * ROWS).cast());
                    let qa = if T == Q8_0 { _mm256_sign_epi8(q, q) } else { q };
                    for p in 0..P {
                        let x4 = xs[p].qs.add(b * QK8 + 4 * t).cast::<i32>().read_unaligned();
                        let xv = _mm256_set1_epi32(x4);
                        if VNNI {
                            let (qa, xv) = if T == Q8_0 {
                                (qa, _mm256_sign_epi8(xv, q))
                            } else {
                                (q, xv)
                            };
                            sums[p] = crate::backend::cpu::vnni::dpbusd(sums[p], qa, xv);
                            continue;
                        }
                        if T == Q8_0 {
                            let pairs = _mm256_maddubs_epi16(qa, _mm256_sign_epi8(xv, q));
                            let l = _mm256_madd_epi16(pairs, ones);
                            sums[p] = if t == 0 {
                                l
                            } else {
                                _mm256_add_epi32(sums[p], l)
                            };
                            continue;
                        }
                        let pairs = _mm256_maddubs_epi16(q, xv);
                        run[p] = if t % span == 0 {
                            pairs
                        } else {
                            _mm256_add_epi16(run[p], pairs)
                        };
                        if t % span == span - 1 {
                            let l = _mm256_madd_epi16(run[p], ones);
                            sums[p] = if t < span {
                                l
                            } else {
                                _mm256_add_epi32(sums[p], l)
                            };
                        }
                    }
                }
                let dw = _mm256_loadu_ps(wd.add(b * ROWS));
                for p in 0..P {
                    let isum = if offset {
                        let off = *xs[p].sum8.add(b);
                        let off = if T == Q5_0 { 2 * off } else { off };
                        _mm256_sub_epi32(sums[p], _mm256_set1_epi32(off))
                    } else {
                        sums[p]
                    };
                    let dx = _mm256_set1_ps(*xs[p].d.add(b));
                    let scaled = _mm256_mul_ps(dw, dx);
                    acc[p] = _mm256_fmadd_ps(scaled, _mm256_cvtepi32_ps(isum), acc[p]);
                    if with_min {
                        let mw = _mm256_loadu_ps(wm.add(b * ROWS));
                        acc[p] = _mm256_fmadd_ps(mw, _mm256_set1_ps(*xs[p].s.add(b)), acc[p]);
                    }
                }
            }
            for (p, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.add(p * ROWS), *acc);
            }
        }
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
        if !Isa::available().contains(&Isa::Avx2) {
            return;
        }
        for dtype in crate::backend::cpu::q8::tests::TYPES {
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
            assert_eq!(got.m, want.m, "{dtype:?} minimums");
        }
    }
}
