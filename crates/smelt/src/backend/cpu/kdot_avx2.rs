//! [`super::kdot`]'s dot products with AVX2 integer instructions: a chunk
//! of 32 weight values (unsigned bytes) against 32 Q8_K quants by
//! `maddubs` (pairs into i16, no saturation at these ranges), then `madd`
//! against the sub-block scales in i16 (pairs into the 8 i32 lanes), which
//! is exactly the portable lanes' arithmetic.
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
    unsafe {
        match dtype {
            GgmlType::Q2_K => dot_q2_k(w, x),
            GgmlType::Q3_K => dot_q3_k(w, x),
            GgmlType::Q4_K => dot_q4_k(w, x),
            GgmlType::Q5_K => dot_q5_k(w, x),
            _ => dot_q6_k(w, x),
        }
    }
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
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

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q2_k(w: &[u8], x: Q8KRow) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm_set1_epi8(15);
    let mut acc = _mm256_setzero_ps();
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(84 * i);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk.add(80));
            let dmin = -xd * f16_at(blk.add(82));
            let packed = _mm_loadu_si128(blk.cast());
            let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m15));
            let sums = load(x.bsums16.as_ptr().add(16 * i).cast());
            let prod = _mm256_madd_epi16(mins, sums);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
            let all = _mm256_cvtepi8_epi16(_mm_and_si128(packed, m15));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let mut sumi = _mm256_setzero_si256();
            for (j, &scales) in halves.iter().enumerate() {
                let bits = load(blk.add(16 + 32 * j));
                for k in 0..4 {
                    let q = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * k)), m3);
                    let sc = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    let xs = xq.add(128 * j + 32 * k as usize);
                    sumi = _mm256_add_epi32(sumi, scaled(q, xs, sc));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q3_k(w: &[u8], x: Q8KRow) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(110 * i);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let d = *x.d.get_unchecked(i) * f16_at(blk.add(108));
            let sc = super::kdot::scales_q3_k(std::slice::from_raw_parts(blk.add(96), 12));
            let sc8: [i8; 16] = std::array::from_fn(|s| sc[s] as i8);
            let all = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc8.as_ptr().cast()));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let hbits = load(blk);
            let mut sumi = _mm256_setzero_si256();
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
                    let s = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, pairs));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) }
}

/// Q4_K's and Q5_K's scales (i16 in both halves) and minimums (i16).
#[inline(always)]
unsafe fn scales_and_mins(blk: *const u8) -> (__m256i, __m128i) {
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

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k(w: &[u8], x: Q8KRow) -> f32 {
    let m15 = _mm256_set1_epi8(15);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(144 * i);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk);
            let dmin = -xd * f16_at(blk.add(2));
            let (scales, mins) = scales_and_mins(blk);
            let sums = _mm_loadu_si128(x.bsums32.as_ptr().add(8 * i).cast());
            let prod = _mm_madd_epi16(mins, sums);
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let bits = load(blk.add(16 + 32 * j));
                let lo = _mm256_and_si256(bits, m15);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m15);
                let l = scaled(lo, xq.add(64 * j), scale_of(scales, 2 * j as i16));
                let h = scaled(hi, xq.add(64 * j + 32), scale_of(scales, 2 * j as i16 + 1));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(l, h));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    let mut m = [0f32; 4];
    // SAFETY: 4 writable f32s.
    unsafe { _mm_storeu_ps(m.as_mut_ptr(), acc_m) };
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) + ((m[0] + m[2]) + (m[1] + m[3])) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_k(w: &[u8], x: Q8KRow) -> f32 {
    let m15 = _mm256_set1_epi8(15);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(176 * i);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let xd = *x.d.get_unchecked(i);
            let d = xd * f16_at(blk);
            let dmin = -xd * f16_at(blk.add(2));
            let (scales, mins) = scales_and_mins(blk);
            let sums = _mm_loadu_si128(x.bsums32.as_ptr().add(8 * i).cast());
            let prod = _mm_madd_epi16(mins, sums);
            let prod = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
            let prod = _mm_add_epi32(prod, _mm_shuffle_epi32::<1>(prod));
            summs = dmin.mul_add(_mm_cvtsi128_si32(prod) as f32, summs);
            let hbits = load(blk.add(16));
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let bits = load(blk.add(48 + 32 * j));
                // The fifth bit of each value as 16 (or 0).
                let high = |b: usize| {
                    let bit = _mm256_set1_epi8(1 << b);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), bit);
                    _mm256_and_si256(set, _mm256_set1_epi8(16))
                };
                let lo = _mm256_or_si256(_mm256_and_si256(bits, m15), high(2 * j));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m15),
                    high(2 * j + 1),
                );
                let l = scaled(lo, xq.add(64 * j), scale_of(scales, 2 * j as i16));
                let h = scaled(hi, xq.add(64 * j + 32), scale_of(scales, 2 * j as i16 + 1));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(l, h));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) + summs }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k(w: &[u8], x: Q8KRow) -> f32 {
    let m15 = _mm256_set1_epi8(15);
    let mut acc = _mm256_setzero_ps();
    for i in 0..x.d.len() {
        // SAFETY (all block and row reads below): super-block i < nb of
        // rows that hold nb (the caller's promise).
        unsafe {
            let blk = w.as_ptr().add(210 * i);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let d = *x.d.get_unchecked(i) * f16_at(blk.add(208));
            let sc8 = _mm_loadu_si128(blk.add(192).cast());
            let all = _mm256_cvtepi8_epi16(sc8);
            let sums = load(x.bsums16.as_ptr().add(16 * i).cast());
            let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sums, all));
            let halves = [
                twice(_mm256_castsi256_si128(all)),
                twice(_mm256_extracti128_si256::<1>(all)),
            ];
            let mut sumi = _mm256_setzero_si256();
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
                    let s = scale_pair(scales, 2 * k as i16, 2 * k as i16 + 1);
                    sumi = _mm256_add_epi32(sumi, scaled(q, xq.add(128 * j + 32 * k), s));
                }
            }
            let sumi = _mm256_sub_epi32(sumi, offset);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    // SAFETY: compiled with AVX2.
    unsafe { hsum8(acc) }
}
