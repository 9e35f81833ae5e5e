//! [`super::kdot`]'s dot products with AVX2 integer instructions: a chunk
//! of 32 weight values (unsigned bytes) against 32 Q8_K quants by
//! `maddubs` (pairs into i16, no saturation at these ranges), then `madd`
//! against the sub-block scales in i16 (pairs into the 8 i32 lanes), which
//! is exactly the portable lanes' arithmetic. Each type's super-block gives
//! its integers ([`Block::sums`]); ggml's order scales the lanes in f32,
//! gemmk's sums them first (exact) and scales the rows' totals.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::kdot::scales_k4;
use super::q8k::{Q8KRow, QK_K};
use super::simd::{LANES, hsum};
use crate::quant::GgmlType;

/// One dot product (`w` holds `x.d.len()` super-blocks of `dtype`).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the rows must hold their blocks
/// (`x.qs`, `x.bsums16`, `x.bsums32` and `w` for `x.d.len()` super-blocks).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot(dtype: GgmlType, x: Q8KRow, w: &[u8]) -> f32 {
    // SAFETY: as the caller promises.
    unsafe { dot_of::<Avx2Blocks>(dtype, x, w) }
}

/// [`dot`] with the super-blocks of `S`, inlined into the caller's
/// instruction set.
///
/// # Safety
/// As [`dot`]'s, and the CPU has what `S`'s blocks are compiled for.
#[inline(always)]
pub(super) unsafe fn dot_of<S: BlockSet>(dtype: GgmlType, x: Q8KRow, w: &[u8]) -> f32 {
    // SAFETY: as the caller promises.
    unsafe {
        match dtype {
            GgmlType::Q2_K => dot_q2_k::<S::Q2K>(w, x),
            GgmlType::Q3_K => dot_folded::<S::Q3K>(w, x),
            GgmlType::Q4_K => dot_q4_k::<S::Q4K>(w, x),
            GgmlType::Q5_K => dot_q5_k::<S::Q5K>(w, x),
            _ => dot_folded::<S::Q6K>(w, x),
        }
    }
}

/// `C` dot products as [`super::gemmk`] sums them, bit for bit (`ws`
/// hold `x.d.len()` super-blocks of `dtype`): per super-block `b`, gemmk's
/// exact `S` and `M` and its `fma`s on one accumulator per row,
///
/// ```text
/// acc = fma(−(dmin·x.d[b]), M, acc); acc = fma(d·x.d[b], S, acc)   (Q2_K, Q4_K, Q5_K)
/// acc = fma(d·x.d[b], S − M, acc)                                  (Q3_K, Q6_K)
/// ```
///
/// # Safety
/// As [`dot`]'s, for each row of `ws`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dots_in_gemmk_order<const C: usize>(
    dtype: GgmlType,
    x: Q8KRow,
    ws: [&[u8]; C],
) -> [f32; C] {
    // SAFETY: as the caller promises.
    unsafe { dots_in_gemmk_order_of::<Avx2Blocks, C>(dtype, x, ws) }
}

/// [`dots_in_gemmk_order`] with the super-blocks of `S`, inlined into the
/// caller's instruction set.
///
/// # Safety
/// As [`dots_in_gemmk_order`]'s, and the CPU has what `S`'s blocks are
/// compiled for.
#[inline(always)]
pub(super) unsafe fn dots_in_gemmk_order_of<S: BlockSet, const C: usize>(
    dtype: GgmlType,
    x: Q8KRow,
    ws: [&[u8]; C],
) -> [f32; C] {
    // SAFETY: as the caller promises.
    unsafe {
        match dtype {
            GgmlType::Q2_K => gemmk_order::<S::Q2K, C>(x, ws),
            GgmlType::Q3_K => gemmk_order::<S::Q3K, C>(x, ws),
            GgmlType::Q4_K => gemmk_order::<S::Q4K, C>(x, ws),
            GgmlType::Q5_K => gemmk_order::<S::Q5K, C>(x, ws),
            // Q6_K's 4-row body spills AVX2's registers: two rows at a
            // time. No closure around the kernel: it would be compiled
            // without the entry point's instruction set.
            _ if C == 4 => {
                let w = |a: usize| ws[a];
                let lo = gemmk_order::<S::Q6K, 2>(x, [w(0), w(1)]);
                let hi = gemmk_order::<S::Q6K, 2>(x, [w(2), w(3)]);
                std::array::from_fn(|c| if c < 2 { lo[c] } else { hi[c - 2] })
            }
            _ => gemmk_order::<S::Q6K, C>(x, ws),
        }
    }
}

#[inline(always)]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller reads 32 bytes inside its blocks; loadu needs no
    // alignment.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: two bytes inside the caller's block.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    // SAFETY: only called from functions compiled with F16C.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))) }
}

/// The 8 lanes summed pairwise, as [`hsum`].
#[inline(always)]
unsafe fn hsum8(v: __m256) -> f32 {
    let mut a = [0f32; LANES];
    // SAFETY: 8 writable f32s.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
    hsum(a)
}

/// i16 scale `i` of `scales` (8 per 128-bit half, the same in both)
/// broadcast to every i16 lane.
#[inline(always)]
unsafe fn scale_of(scales: __m256i, i: i16) -> __m256i {
    // SAFETY: only called from functions compiled with AVX2.
    unsafe { _mm256_shuffle_epi8(scales, _mm256_set1_epi16(0x0100 + 0x0202 * i)) }
}

/// Two i16 scales: `a` in lanes 0..8 (values 0..16 of a chunk), `b` in
/// 8..16, from 8 i16 `scales` in both halves.
#[inline(always)]
unsafe fn scale_pair(scales: __m256i, a: i16, b: i16) -> __m256i {
    // SAFETY: only called from functions compiled with AVX2.
    unsafe {
        _mm256_shuffle_epi8(
            scales,
            _mm256_setr_epi16(
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * a,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
                0x0100 + 0x0202 * b,
            ),
        )
    }
}

/// `madd` of `maddubs(q, x)` with `scale`: a chunk's scaled lanes.
#[inline(always)]
unsafe fn scaled(q: __m256i, x: *const i8, scale: __m256i) -> __m256i {
    // SAFETY: 32 quants of the caller's row; compiled with AVX2.
    unsafe { _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, load(x.cast()))) }
}

/// Both 128-bit halves set to `v`.
#[inline(always)]
unsafe fn twice(v: __m128i) -> __m256i {
    // SAFETY: compiled with AVX2.
    unsafe { _mm256_set_m128i(v, v) }
}

/// A super-block's exact integers in 8 i32 lanes each, lane `l` holding
/// ggml's products `4l..4l+3` of each chunk: `s` the scaled products
/// `Σ sc·q·x` (Q3_K and Q6_K with q signed, so their offsets are taken
/// off: gemmk's `S − M`), `m` the minimums' products `Σ mm·b` (Q2_K in 8
/// lanes, Q4_K and Q5_K in the low 4, zeros for Q3_K and Q6_K).
#[derive(Clone, Copy)]
pub(super) struct Sums {
    pub s: __m256i,
    pub m: __m256i,
}

/// One K-quant type's super-block, for the loops of both orders.
pub(super) trait Block {
    /// Bytes per super-block.
    const SIZE: usize;
    /// Whether `s` already holds `S − M` (the minimum is `d`'s).
    const FOLD: bool;
    /// Byte offsets of the f16 `d` and `dmin` (unused where FOLD).
    const D_AT: usize;
    const DMIN_AT: usize;

    /// Super-block `i`'s integers, its weight block at `blk`.
    ///
    /// # Safety
    /// `blk` and row `x` hold super-block `i`; compiled with AVX2.
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums;
}

/// The super-blocks of each type one instruction set computes.
pub(super) trait BlockSet {
    type Q2K: Block;
    type Q3K: Block;
    type Q4K: Block;
    type Q5K: Block;
    type Q6K: Block;
}

/// AVX2's super-blocks.
pub(super) struct Avx2Blocks;

impl BlockSet for Avx2Blocks {
    type Q2K = Q2K;
    type Q3K = Q3K;
    type Q4K = Q4K;
    type Q5K = Q5K;
    type Q6K = Q6K;
}

pub(super) struct Q2K;
pub(super) struct Q3K;
pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

impl Block for Q2K {
    const SIZE: usize = 84;
    const FOLD: bool = false;
    const D_AT: usize = 80;
    const DMIN_AT: usize = 82;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY (all reads below): super-block i of the block and the row
        // (the caller's promise); compiled with AVX2.
        unsafe {
            let m3 = _mm256_set1_epi8(3);
            let m15 = _mm_set1_epi8(15);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let packed = _mm_loadu_si128(blk.cast());
            let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m15));
            let b16 = load(x.bsums16.as_ptr().add(16 * i).cast());
            let all = _mm256_cvtepi8_epi16(_mm_and_si128(packed, m15));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let mut s = _mm256_setzero_si256();
            for (j, &scales) in halves.iter().enumerate() {
                let bits = load(blk.add(16 + 32 * j));
                for k in 0..4 {
                    let q = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * k)), m3);
                    let sc = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    let xs = xq.add(128 * j + 32 * k as usize);
                    s = _mm256_add_epi32(s, scaled(q, xs, sc));
                }
            }
            Sums {
                s,
                m: _mm256_madd_epi16(mins, b16),
            }
        }
    }
}

impl Block for Q3K {
    const SIZE: usize = 110;
    const FOLD: bool = true;
    const D_AT: usize = 108;
    const DMIN_AT: usize = 108;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY (all reads below): super-block i of the block and the row
        // (the caller's promise); compiled with AVX2.
        unsafe {
            let m3 = _mm256_set1_epi8(3);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let sc = super::kdot::scales_q3_k(std::slice::from_raw_parts(blk.add(96), 12));
            let sc8: [i8; 16] = std::array::from_fn(|s| sc[s] as i8);
            let all = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc8.as_ptr().cast()));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let hbits = load(blk);
            let mut s = _mm256_setzero_si256();
            for (j, &scales) in halves.iter().enumerate() {
                let bits = load(blk.add(32 + 32 * j));
                for k in 0..4 {
                    let shift = _mm_cvtsi32_si128(2 * k);
                    let low = _mm256_and_si256(_mm256_srl_epi16(bits, shift), m3);
                    // 4 where the high bit is clear, taken off by a second
                    // `maddubs`: the same integers as (low − 4·!high)·x.
                    let bit = _mm256_set1_epi8(1 << (4 * j + k as usize));
                    let clear =
                        _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), _mm256_setzero_si256());
                    let four = _mm256_and_si256(clear, _mm256_set1_epi8(4));
                    let xv = load(xq.add(128 * j + 32 * k as usize).cast());
                    let pairs = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(low, xv),
                        _mm256_maddubs_epi16(four, xv),
                    );
                    let sc = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    s = _mm256_add_epi32(s, _mm256_madd_epi16(sc, pairs));
                }
            }
            Sums {
                s,
                m: _mm256_setzero_si256(),
            }
        }
    }
}

/// Q4_K's and Q5_K's scales (i16 in both halves) and minimums (i16).
#[inline(always)]
pub(super) unsafe fn scales_and_mins(blk: *const u8) -> (__m256i, __m128i) {
    // SAFETY: the block's 12 bytes of scales at 4..16.
    let sm = scales_k4(unsafe { std::slice::from_raw_parts(blk.add(4), 12) });
    // SAFETY: compiled with AVX2; 16 readable bytes.
    unsafe {
        let both = _mm256_cvtepu8_epi16(_mm_loadu_si128(sm.as_ptr().cast()));
        (
            twice(_mm256_castsi256_si128(both)),
            _mm256_extracti128_si256::<1>(both),
        )
    }
}

/// Q4_K's and Q5_K's sums, their values (unsigned bytes) made by
/// `values(bits of chunk pair j, high half)`, the minimums against the
/// Q8_K sums of 32.
#[inline(always)]
unsafe fn sums_k4(
    blk: *const u8,
    x: Q8KRow,
    i: usize,
    values: impl Fn(usize, bool) -> __m256i,
) -> Sums {
    // SAFETY (all reads below): super-block i of the block and the row
    // (the caller's promise); compiled with AVX2.
    unsafe {
        let xq = x.qs.as_ptr().add(QK_K * i);
        let (scales, mins) = scales_and_mins(blk);
        let b32 = _mm_loadu_si128(x.bsums32.as_ptr().add(8 * i).cast());
        let mut s = _mm256_setzero_si256();
        for j in 0..4 {
            let l = scaled(
                values(j, false),
                xq.add(64 * j),
                scale_of(scales, 2 * j as i16),
            );
            let h = scaled(
                values(j, true),
                xq.add(64 * j + 32),
                scale_of(scales, 2 * j as i16 + 1),
            );
            s = _mm256_add_epi32(s, _mm256_add_epi32(l, h));
        }
        Sums {
            s,
            m: _mm256_set_m128i(_mm_setzero_si128(), _mm_madd_epi16(mins, b32)),
        }
    }
}

impl Block for Q4K {
    const SIZE: usize = 144;
    const FOLD: bool = false;
    const D_AT: usize = 0;
    const DMIN_AT: usize = 2;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY: as the caller promises; every load is inside the block.
        unsafe {
            let m15 = _mm256_set1_epi8(15);
            sums_k4(blk, x, i, |j, high| {
                let bits = load(blk.add(16 + 32 * j));
                let bits = if high {
                    _mm256_srli_epi16::<4>(bits)
                } else {
                    bits
                };
                _mm256_and_si256(bits, m15)
            })
        }
    }
}

impl Block for Q5K {
    const SIZE: usize = 176;
    const FOLD: bool = false;
    const D_AT: usize = 0;
    const DMIN_AT: usize = 2;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY: as the caller promises; every load is inside the block.
        unsafe {
            let m15 = _mm256_set1_epi8(15);
            let hbits = load(blk.add(16));
            sums_k4(blk, x, i, |j, high| {
                let bits = load(blk.add(48 + 32 * j));
                let bits = if high {
                    _mm256_srli_epi16::<4>(bits)
                } else {
                    bits
                };
                // The fifth bit of each value as 16 (or 0).
                let bit = _mm256_set1_epi8(1 << (2 * j + usize::from(high)));
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), bit);
                let fifth = _mm256_and_si256(set, _mm256_set1_epi8(16));
                _mm256_or_si256(_mm256_and_si256(bits, m15), fifth)
            })
        }
    }
}

impl Block for Q6K {
    const SIZE: usize = 210;
    const FOLD: bool = true;
    const D_AT: usize = 208;
    const DMIN_AT: usize = 208;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY (all reads below): super-block i of the block and the row
        // (the caller's promise); compiled with AVX2.
        unsafe {
            let m15 = _mm256_set1_epi8(15);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let all = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192).cast()));
            let b16 = load(x.bsums16.as_ptr().add(16 * i).cast());
            // The offset 32·Σ sc·b of the values' bias of 32.
            let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(b16, all));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let mut s = _mm256_setzero_si256();
            for (j, &scales) in halves.iter().enumerate() {
                let b1 = load(blk.add(64 * j));
                let b2 = load(blk.add(64 * j + 32));
                let bh = load(blk.add(128 + 32 * j));
                let top = |mask: i8| _mm256_and_si256(bh, _mm256_set1_epi8(mask));
                let q = [
                    _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16::<4>(top(3))),
                    _mm256_or_si256(_mm256_and_si256(b2, m15), _mm256_slli_epi16::<2>(top(12))),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b1), m15), top(48)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m15),
                        _mm256_srli_epi16::<2>(top(-64)),
                    ),
                ];
                for (k, &q) in q.iter().enumerate() {
                    let sc = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    s = _mm256_add_epi32(s, scaled(q, xq.add(128 * j + 32 * k), sc));
                }
            }
            Sums {
                s: _mm256_sub_epi32(s, offset),
                m: _mm256_setzero_si256(),
            }
        }
    }
}

// ggml's order: the lanes scaled and summed in f32, per type.

#[inline(always)]
unsafe fn dot_q2_k<B: Block>(w: &[u8], x: Q8KRow) -> f32 {
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc = unsafe { _mm256_setzero_ps() };
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(B::SIZE * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk.add(B::D_AT));
            let dmin = -xd * f16_at(blk.add(B::DMIN_AT));
            let v = B::sums(blk, x, i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(v.m), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v.s), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) }
}

/// Q3_K and Q6_K: one `fma` of the lanes a super-block.
#[inline(always)]
unsafe fn dot_folded<B: Block>(w: &[u8], x: Q8KRow) -> f32 {
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc = unsafe { _mm256_setzero_ps() };
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(B::SIZE * i);
            let d = *x.d.get_unchecked(i) * f16_at(blk.add(B::D_AT));
            let v = B::sums(blk, x, i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v.s), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) }
}

#[inline(always)]
unsafe fn dot_q4_k<B: Block>(w: &[u8], x: Q8KRow) -> f32 {
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc = unsafe { _mm256_setzero_ps() };
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc_m = unsafe { _mm_setzero_ps() };
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(B::SIZE * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk.add(B::D_AT));
            let dmin = -xd * f16_at(blk.add(B::DMIN_AT));
            let v = B::sums(blk, x, i);
            let m = _mm_cvtepi32_ps(_mm256_castsi256_si128(v.m));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), m, acc_m);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v.s), acc);
        }
    }
    let mut m = [0f32; 4];
    // SAFETY: 4 writable f32s.
    unsafe { _mm_storeu_ps(m.as_mut_ptr(), acc_m) };
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) + ((m[0] + m[2]) + (m[1] + m[3])) }
}

#[inline(always)]
unsafe fn dot_q5_k<B: Block>(w: &[u8], x: Q8KRow) -> f32 {
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc = unsafe { _mm256_setzero_ps() };
    let mut summs = 0f32;
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(B::SIZE * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk.add(B::D_AT));
            let dmin = -xd * f16_at(blk.add(B::DMIN_AT));
            let v = B::sums(blk, x, i);
            summs = dmin.mul_add(hsum_i32(v.m) as f32, summs);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v.s), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) + summs }
}

// gemmk's order: per super-block the lanes summed into exact integers,
// then its one or two `fma`s.

/// `C` (at most 4) dot products in [`super::gemmk`]'s order (see
/// [`dots_in_gemmk_order`]): the rows' integers reduced together into
/// the lanes of one vector, and the f32 steps a vector of rows at a time
/// (each lane the one row's scalar arithmetic).
#[inline(always)]
unsafe fn gemmk_order<B: Block, const C: usize>(x: Q8KRow, ws: [&[u8]; C]) -> [f32; C] {
    const { assert!(C <= 4, "at most 4 rows") };
    // SAFETY: compiled with AVX2 (the caller's promise).
    let mut acc = unsafe { _mm_setzero_ps() };
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise); compiled with AVX2.
        unsafe {
            let dx = _mm_set1_ps(*x.d.get_unchecked(i));
            // Plain code: a closure (`array::map`) would not inline the
            // intrinsics, compiled without AVX2; and 4 rows written out,
            // which the compiler does not unroll.
            let mut blk = [std::ptr::null(); C];
            for c in 0..C {
                blk[c] = ws[c].as_ptr().add(B::SIZE * i);
            }
            let zero = Sums {
                s: _mm256_setzero_si256(),
                m: _mm256_setzero_si256(),
            };
            let row = |c: usize| if c < C { B::sums(blk[c], x, i) } else { zero };
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let (s, m) = ([r0.s, r1.s, r2.s, r3.s], [r0.m, r1.m, r2.m, r3.m]);
            if !B::FOLD {
                let dmin = _mm_mul_ps(f16s(blk, B::DMIN_AT), dx);
                acc = _mm_fnmadd_ps(dmin, _mm_cvtepi32_ps(hsums(m)), acc);
            }
            let d = _mm_mul_ps(f16s(blk, B::D_AT), dx);
            acc = _mm_fmadd_ps(d, _mm_cvtepi32_ps(hsums(s)), acc);
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: 4 writable f32s; compiled with AVX2.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    std::array::from_fn(|c| out[c])
}

/// The f16 at byte `at` of each of the `C` blocks, as f32 lanes (0 past
/// `C`).
#[inline(always)]
unsafe fn f16s<const C: usize>(blk: [*const u8; C], at: usize) -> __m128 {
    let mut bits = 0u64;
    for (c, b) in blk.iter().enumerate() {
        // SAFETY: two bytes inside the caller's block.
        bits |= u64::from(unsafe { b.add(at).cast::<u16>().read_unaligned() }) << (16 * c);
    }
    // SAFETY: only called from functions compiled with F16C.
    unsafe { _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64)) }
}

/// The sum of each vector's 8 lanes (exact in i32), by horizontal adds.
#[inline(always)]
unsafe fn hsums(v: [__m256i; 4]) -> __m128i {
    // SAFETY: compiled with AVX2 (the caller's promise).
    unsafe {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }
}

/// The sum of the 8 lanes.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: compiled with AVX2 (the caller's promise).
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
    }
}
