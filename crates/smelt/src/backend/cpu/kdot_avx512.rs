//! [`super::kdot`]'s dot products with AVX-512 (F, BW, VL, VNNI): the
//! super-blocks of Q4_K, Q5_K and Q6_K two 32-value chunks a 512-bit
//! vector, `maddubs` of the values (unsigned bytes) against 64 Q8_K quants
//! into i16 pairs, then `vpdpwssd` against the chunks' sub-block scales
//! into 16 i32 lanes: one instruction for AVX2's `madd` and `add`. The
//! halves (even and odd chunk) added give the 8 lanes the AVX2 kernels
//! give, exactly (integer sums in any order), so both f32 orders are
//! [`super::kdot_avx2`]'s loops, unchanged. Q2_K and Q3_K keep AVX2's
//! super-blocks, compiled here with the wider instruction set.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::kdot::scales_k4;
use super::kdot_avx2::{self as avx2, Block, BlockSet, Sums, load};
use super::q8k::{Q8KRow, QK_K};
use crate::quant::GgmlType;

/// [`avx2::dot`] on AVX-512.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI; the
/// rows must hold their blocks, as [`avx2::dot`]'s.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot(dtype: GgmlType, x: Q8KRow, w: &[u8]) -> f32 {
    // SAFETY: as the caller promises.
    unsafe { avx2::dot_of::<Avx512Blocks>(dtype, x, w) }
}

/// [`avx2::dots_in_gemmk_order`] on AVX-512.
///
/// # Safety
/// As [`dot`]'s, for each row of `ws`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dots_in_gemmk_order<const C: usize>(
    dtype: GgmlType,
    x: Q8KRow,
    ws: [&[u8]; C],
) -> [f32; C] {
    // SAFETY: as the caller promises.
    unsafe { avx2::dots_in_gemmk_order_of::<Avx512Blocks, C>(dtype, x, ws) }
}

struct Avx512Blocks;

impl BlockSet for Avx512Blocks {
    type Q2K = avx2::Q2K;
    type Q3K = avx2::Q3K;
    type Q4K = Q4K;
    type Q5K = Q5K;
    type Q6K = Q6K;
}

struct Q4K;
struct Q5K;
struct Q6K;

#[inline(always)]
unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: the caller reads 64 bytes inside its blocks; loadu needs no
    // alignment.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// `acc + Σ pairs(q·x)·scale`: 64 values (unsigned bytes) against 64
/// quants, each i16 pair sum times its i16 scale, into 16 i32 lanes.
#[inline(always)]
unsafe fn scaled(acc: __m512i, q: __m512i, x: *const i8, scale: __m512i) -> __m512i {
    // SAFETY: 64 quants of the caller's row; compiled with AVX-512 BW and
    // VNNI (the caller's promise).
    unsafe { _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, load512(x.cast())), scale) }
}

/// The 8 lanes of the two chunks' halves added (lane `l` of each chunk).
#[inline(always)]
unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: compiled with AVX-512 F (the caller's promise).
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

/// `lo` in the low 256 bits, `hi` in the high.
#[inline(always)]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: compiled with AVX-512 F (the caller's promise).
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// Every byte of the low 256 bits `lo`, of the high ones `hi`.
#[inline(always)]
unsafe fn bytes2(lo: u8, hi: u8) -> __m512i {
    // SAFETY: compiled with AVX-512 F (the caller's promise).
    unsafe { join(_mm256_set1_epi8(lo as i8), _mm256_set1_epi8(hi as i8)) }
}

/// i16 lane `t` of the result is lane `first + t / (32 / n)` of `v`: `n`
/// scales, each spread over an equal run of the 32 lanes.
#[inline(always)]
unsafe fn spread(v: __m512i, first: i16, n: i16) -> __m512i {
    let idx: [i16; 32] = std::array::from_fn(|t| first + t as i16 / (32 / n));
    // SAFETY: 32 readable i16s; compiled with AVX-512 BW (the caller's
    // promise).
    unsafe { _mm512_permutexvar_epi16(_mm512_loadu_si512(idx.as_ptr().cast()), v) }
}

/// Q4_K's (`FIVE` false) and Q5_K's sums: chunk pair `j` (values
/// `64j..64j+64`, their low nibbles then high nibbles, Q5_K's fifth bits
/// added), the scales spread over its two chunks, the minimums as AVX2
/// takes them. Plain code, no closures: a closure would be compiled
/// without the entry point's instruction set.
#[inline(always)]
unsafe fn sums_k4<const FIVE: bool>(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
    // SAFETY (all reads below): super-block i of the block and the row
    // (the caller's promise); compiled with AVX-512.
    unsafe {
        let xq = x.qs.as_ptr().add(QK_K * i);
        let sm = scales_k4(std::slice::from_raw_parts(blk.add(4), 12));
        let scales =
            _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(sm.as_ptr().cast())));
        let (_, mins) = avx2::scales_and_mins(blk);
        let b32 = _mm_loadu_si128(x.bsums32.as_ptr().add(8 * i).cast());
        // Q5_K's fifth bits (32 bytes), in both halves.
        let high = if FIVE {
            let hbits = load(blk.add(16));
            join(hbits, hbits)
        } else {
            _mm512_setzero_si512()
        };
        let qs_at = if FIVE { 48 } else { 16 };
        let mut s = _mm512_setzero_si512();
        for j in 0..4 {
            let mut q = nibbles(blk.add(qs_at + 32 * j));
            if FIVE {
                // Bit 2j of the low chunk's bytes, 2j + 1 of the high
                // chunk's: 16 where set.
                let bit = bytes2(1 << (2 * j), 1 << (2 * j + 1));
                let set = _mm512_test_epi8_mask(high, bit);
                q = _mm512_or_si512(q, _mm512_maskz_mov_epi8(set, _mm512_set1_epi8(16)));
            }
            let sc = spread(scales, 2 * j as i16, 2);
            s = scaled(s, q, xq.add(64 * j), sc);
        }
        Sums {
            s: fold(s),
            m: _mm256_set_m128i(_mm_setzero_si128(), _mm_madd_epi16(mins, b32)),
        }
    }
}

/// The 32 bytes at `p` as low nibbles then high nibbles (64 values).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m512i {
    // SAFETY: 32 bytes inside the caller's block; compiled with AVX-512.
    unsafe {
        let bits = load(p);
        let both = join(bits, _mm256_srli_epi16::<4>(bits));
        _mm512_and_si512(both, _mm512_set1_epi8(15))
    }
}

impl Block for Q4K {
    const SIZE: usize = 144;
    const FOLD: bool = false;
    const D_AT: usize = 0;
    const DMIN_AT: usize = 2;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY: as the caller promises.
        unsafe { sums_k4::<false>(blk, x, i) }
    }
}

impl Block for Q5K {
    const SIZE: usize = 176;
    const FOLD: bool = false;
    const D_AT: usize = 0;
    const DMIN_AT: usize = 2;

    #[inline(always)]
    unsafe fn sums(blk: *const u8, x: Q8KRow, i: usize) -> Sums {
        // SAFETY: as the caller promises.
        unsafe { sums_k4::<true>(blk, x, i) }
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
        // (the caller's promise); compiled with AVX-512.
        unsafe {
            let m15 = _mm512_set1_epi8(15);
            let xq = x.qs.as_ptr().add(QK_K * i);
            let all = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192).cast()));
            let b16 = load(x.bsums16.as_ptr().add(16 * i).cast());
            // The offset 32·Σ sc·b of the values' bias of 32.
            let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(b16, all));
            let scales = _mm512_castsi256_si512(all);
            // Per chunk pair (values of ql's low nibbles, then high): the
            // two high bits' mask in qh and their shift to bits 4..6.
            let masks = [bytes2(3, 12), bytes2(48, 192)];
            let up = join(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
            let down = join(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
            let mut s = _mm512_setzero_si512();
            for j in 0..2 {
                let low = load512(blk.add(64 * j));
                let bh = load(blk.add(128 + 32 * j));
                let high = join(bh, bh);
                let q01 = _mm512_or_si512(
                    _mm512_and_si512(low, m15),
                    _mm512_sllv_epi16(_mm512_and_si512(high, masks[0]), up),
                );
                let q23 = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(low), m15),
                    _mm512_srlv_epi16(_mm512_and_si512(high, masks[1]), down),
                );
                // Chunk k's values 0..16 take scale 8j + 2k, 16..32 the next.
                let base = 8 * j as i16;
                s = scaled(s, q01, xq.add(128 * j), spread(scales, base, 4));
                s = scaled(s, q23, xq.add(128 * j + 64), spread(scales, base + 4, 4));
            }
            Sums {
                s: _mm256_sub_epi32(fold(s), offset),
                m: _mm256_setzero_si256(),
            }
        }
    }
}
