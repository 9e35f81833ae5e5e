//! Decode mat-vecs of the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0) on Q8 activations, reading the GGUF blocks in place (AVX2, and
//! its integer dot products on `vpdpbusd` where AVX-512 VNNI runs): a
//! decode uses each weight block once or twice, so unpacking it first
//! ([`super::q8::Unpacked`]) would cost more than the dot product.
//!
//! Two f32 orders over the same exact integer block sums ([`SumOrder`]):
//!
//! - `Ggml`: [`super::q8::tile`]'s numbers after unpacking, bit for bit:
//!   ggml's `vec_dot` order, with per block the same 8 integer lanes (lane
//!   `l` sums products `4l..4l+3`, the weight quant as ggml's value: Q4_0
//!   `q − 8`, Q5_0 `q − 16`, the others as stored) and `acc = fma(d_w·d_x,
//!   lane, acc)`; Q4_1 and Q5_1 add `m_w·s_x` per block in a scalar `fma`.
//! - `Blocks`: [`super::gemm8`]'s numbers, bit for bit: per block the whole
//!   integer sum, then `acc = fma(d_w·d_x, isum, acc)` (and Q5_1's
//!   `acc = fma(m_w, s_x, acc)`). The fast mode decodes in this order
//!   wherever its prefill runs `gemm8`, so that a row's logits do not depend
//!   on how many rows share its batch (a server's answer to a request is
//!   the same alone and among others).

use super::simd::Madd;
use crate::quant::GgmlType;

/// A Q8 activation row: quants, scales, `d·Σq` per block.
pub type XRow<'a> = (&'a [i8], &'a [f32], &'a [f32]);

/// The f32 order in which block sums are scaled and added (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SumOrder {
    /// ggml's `vec_dot`: 8 lanes a block, summed at the end.
    Ggml,
    /// `gemm8`'s: one integer sum a block, added in block order.
    Blocks,
}

/// Whether [`raw_dots`] has a kernel for this entry point (AVX2 only; the
/// portable path unpacks).
#[inline(always)]
pub fn has_raw_kernel<M: Madd>() -> bool {
    cfg!(target_arch = "x86_64") && M::AVX2
}

/// One Q8 activation row against `C` weight rows still in their GGUF
/// blocks, in `order`: `Ggml` gives `q8::tile`'s numbers after
/// `Unpacked::unpack`, `Blocks` `gemm8::group`'s (Q4_0, Q5_0, Q5_1 and
/// Q8_0 only). Only when [`has_raw_kernel`].
#[inline(always)]
pub fn raw_dots<M: Madd, const C: usize>(
    dtype: GgmlType,
    order: SumOrder,
    x: XRow,
    ws: [&[u8]; C],
) -> [f32; C] {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 and AVX-512 entry
        // points, which run after the CPU reported AVX2, FMA and F16C;
        // `M::AVX512` only inside the latter, after it reported AVX-512 F,
        // BW, VL and VNNI too.
        return unsafe { avx2::raw_dots(M::AVX512, dtype, order, x, ws) };
    }
    let _ = (dtype, order, x, ws);
    unreachable!("raw_dots without has_raw_kernel")
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{GgmlType, SumOrder, XRow};
    use crate::backend::cpu::q8::QK8;
    use crate::backend::cpu::simd::{LANES, hsum};

    /// `_mm256_maddubs_epi16` wants its first operand unsigned: the weight's
    /// sign moves onto x (exact: |w| ≤ 128 and |x| ≤ 127 keep each pair sum
    /// within i16). Then `madd` against ones sums the pairs into 8 lanes.
    #[inline(always)]
    fn lanes(w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: only called from functions compiled with AVX2.
        unsafe {
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
        }
    }

    /// The 8 i32 lanes of each of 4 vectors summed (exact integers): lane
    /// `c` of the result is `v[c]`'s total.
    #[inline(always)]
    fn totals4(v: [__m256i; 4]) -> __m128i {
        // SAFETY: only called from functions compiled with AVX2.
        unsafe {
            let pairs =
                _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            _mm_add_epi32(
                _mm256_castsi256_si128(pairs),
                _mm256_extracti128_si256::<1>(pairs),
            )
        }
    }

    /// The 8 i32 lanes of `v` summed (exact integers).
    #[inline(always)]
    fn total(v: __m256i) -> i32 {
        // SAFETY: only called from functions compiled with AVX2.
        unsafe {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
        }
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and AVX-512 F, BW, VL and
    /// VNNI where `vnni`; `dtype` is a 32-value block type of the Q8 path.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn raw_dots<const C: usize>(
        vnni: bool,
        dtype: GgmlType,
        order: SumOrder,
        x: XRow,
        ws: [&[u8]; C],
    ) -> [f32; C] {
        // One body per type and order (and instruction set), so the inner
        // loop does not branch on them. Q4_1 has no `gemm8` path and so
        // only ggml's order.
        macro_rules! body {
            ($t:expr, $blocks:expr) => {
                if vnni {
                    // SAFETY: `vnni` only where the CPU has AVX-512 VNNI
                    // (the caller's promise).
                    unsafe { raw_dots_vnni::<C, { $t }, { $blocks }>(x, ws) }
                } else {
                    raw_dots_of::<C, { $t }, { $blocks }>(x, ws)
                }
            };
        }
        match (dtype, order) {
            (GgmlType::Q4_0, SumOrder::Ggml) => body!(Q4_0, false),
            (GgmlType::Q4_0, SumOrder::Blocks) => body!(Q4_0, true),
            (GgmlType::Q4_1, _) => body!(Q4_1, false),
            (GgmlType::Q5_0, SumOrder::Ggml) => body!(Q5_0, false),
            (GgmlType::Q5_0, SumOrder::Blocks) => body!(Q5_0, true),
            (GgmlType::Q5_1, SumOrder::Ggml) => body!(Q5_1, false),
            (GgmlType::Q5_1, SumOrder::Blocks) => body!(Q5_1, true),
            (_, SumOrder::Ggml) => body!(Q8_0, false),
            (_, SumOrder::Blocks) => body!(Q8_0, true),
        }
    }

    const Q4_0: u8 = 0;
    const Q4_1: u8 = 1;
    const Q5_0: u8 = 2;
    const Q5_1: u8 = 3;
    const Q8_0: u8 = 4;

    /// Bytes per block, and where its quants start.
    const BYTES: [usize; 5] = [18, 20, 22, 24, 34];
    const QS_AT: [usize; 5] = [2, 4, 6, 8, 2];
    /// Where Q5's 32 fifth bits are.
    const QH_AT: [usize; 5] = [0, 0, 2, 4, 0];

    /// Defines `$name`, [`raw_dots`]' body for one type and order,
    /// compiled with `$features`; `$vnni` takes the integer dot products
    /// on AVX-512 VNNI's `vpdpbusd` (the same integers).
    macro_rules! raw_dots_fn {
        ($name:ident, $features:literal, $vnni:literal) => {
            #[target_feature(enable = $features)]
            fn $name<const C: usize, const T: u8, const BLOCKS: bool>(
                x: XRow,
                ws: [&[u8]; C],
            ) -> [f32; C] {
                const VNNI: bool = $vnni;
                let (bytes, at) = (BYTES[T as usize], QS_AT[T as usize]);
                let with_min = T == Q4_1 || T == Q5_1;
                let five = T == Q5_0 || T == Q5_1;
                let nb = x.1.len();
                assert!(
                    x.0.len() >= nb * QK8
                        && (!with_min || x.2.len() >= nb)
                        && ws.iter().all(|w| w.len() >= nb * bytes),
                    "rows shorter than their blocks"
                );
                let ones = _mm256_set1_epi16(1);
                let eights = _mm256_set1_epi8(8);
                let mask = _mm256_set1_epi8(15);
                // The high 128 bits shift by 4: high nibbles.
                let shift = _mm256_setr_epi64x(0, 0, 4, 4);
                // Byte i of the fifth bits' u32 picks byte i / 8, then bit i % 8.
                let spread = _mm256_setr_epi64x(
                    0,
                    0x0101_0101_0101_0101,
                    0x0202_0202_0202_0202,
                    0x0303_0303_0303_0303,
                );
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
                let mut acc = [_mm256_setzero_ps(); C];
                let mut mins = [0f32; C];
                // `Blocks`: one accumulator per row (C = 4: the 4 rows' lanes).
                let mut acc4 = _mm_setzero_ps();
                let mut acc1 = [0f32; C];
                // Every pointer read below is at block b < nb of a row that holds
                // nb blocks (asserted above), within the block's bytes; the reads
                // and loads are unaligned ones.
                let half = |p: *const u8| {
                    // SAFETY: see above (a block's scale or minimum).
                    let h = unsafe { p.cast::<u16>().read_unaligned() };
                    _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))
                };
                for b in 0..nb {
                    // SAFETY: see above.
                    let xv = unsafe { _mm256_loadu_si256(x.0.as_ptr().add(b * QK8).cast()) };
                    // SAFETY: see above.
                    let xd = unsafe { *x.1.get_unchecked(b) };
                    // 8·(x pair) per i16 lane: what Q4_0 takes off; twice that, Q5_0.
                    let x8 = _mm256_maddubs_epi16(eights, xv);
                    let off = if T == Q5_0 {
                        _mm256_add_epi16(x8, x8)
                    } else {
                        x8
                    };
                    // VNNI: the same offset per i32 lane, negated, as the sum's
                    // start (zero for the types without one).
                    let start = if VNNI && (T == Q4_0 || T == Q5_0) {
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(off, ones))
                    } else {
                        _mm256_setzero_si256()
                    };
                    let blk: [*const u8; C] =
                        std::array::from_fn(|c| unsafe { ws[c].as_ptr().add(b * bytes) });
                    // The C scales times x's: one conversion and one multiply for 4
                    // rows, each lane then broadcast.
                    // The 4 rows' f16 at byte `i` of their blocks, as f32.
                    let halves4 = |i: usize| {
                        // SAFETY: see above (a block's scale or minimum).
                        let h = |c: usize| unsafe { blk[c].add(i).cast::<i16>().read_unaligned() };
                        _mm_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), 0, 0, 0, 0))
                    };
                    let d4 = if C == 4 {
                        _mm_mul_ps(halves4(0), _mm_set1_ps(xd))
                    } else {
                        _mm_setzero_ps()
                    };
                    let dd: [__m256; C] = if C == 4 {
                        let d = _mm256_castps128_ps256(d4);
                        std::array::from_fn(|c| {
                            _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(c as i32))
                        })
                    } else {
                        std::array::from_fn(|c| _mm256_set1_ps(_mm_cvtss_f32(half(blk[c])) * xd))
                    };
                    let mut sums = [_mm256_setzero_si256(); C];
                    for c in 0..C {
                        let q = if T == Q8_0 {
                            // SAFETY: see above (the block's 32 quants).
                            unsafe { _mm256_loadu_si256(blk[c].add(at).cast()) }
                        } else {
                            // Low nibbles are values 0..16, high nibbles 16..32.
                            // SAFETY: see above (the block's 16 bytes of nibbles).
                            let lo = unsafe { _mm_loadu_si128(blk[c].add(at).cast()) };
                            let q = _mm256_and_si256(
                                _mm256_srlv_epi64(_mm256_broadcastsi128_si256(lo), shift),
                                mask,
                            );
                            if five {
                                // SAFETY: see above (the block's 4 bytes of fifth bits).
                                let qh = unsafe {
                                    blk[c].add(QH_AT[T as usize]).cast::<i32>().read_unaligned()
                                };
                                let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
                                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                                _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)))
                            } else {
                                q
                            }
                        };
                        let l = if VNNI {
                            let (q, xv) = if T == Q8_0 {
                                (_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q))
                            } else {
                                (q, xv)
                            };
                            // SAFETY: `VNNI` only in the entry point compiled with
                            // AVX-512 VL and VNNI.
                            unsafe { crate::backend::cpu::vnni::dpbusd(start, q, xv) }
                        } else if T == Q8_0 {
                            lanes(q, xv)
                        } else {
                            // Unsigned values as they are: no sign moves; Q4_0 and
                            // Q5_0 take `8·` or `16·(x pair)` off each pair instead
                            // of 8 or 16 off each value (the same integers).
                            let mut pairs = _mm256_maddubs_epi16(q, xv);
                            if T == Q4_0 || T == Q5_0 {
                                pairs = _mm256_sub_epi16(pairs, off);
                            }
                            _mm256_madd_epi16(pairs, ones)
                        };
                        if BLOCKS {
                            sums[c] = l;
                            continue;
                        }
                        acc[c] = _mm256_fmadd_ps(dd[c], _mm256_cvtepi32_ps(l), acc[c]);
                        if with_min {
                            // SAFETY: see above (x's sum and the block's minimum).
                            let (s, m) = unsafe { (*x.2.get_unchecked(b), blk[c].add(2)) };
                            mins[c] = _mm_cvtss_f32(half(m)).mul_add(s, mins[c]);
                        }
                    }
                    if BLOCKS {
                        // gemm8's order: d_w·d_x times the block's integer sum, then
                        // Q5_1's m_w·s_x, each in one fma (|isum| < 2^24: exact).
                        // SAFETY: see above (x's sum).
                        let xs = unsafe { *x.2.get_unchecked(b) };
                        if C == 4 {
                            let isum = _mm_cvtepi32_ps(totals4(std::array::from_fn(|c| sums[c])));
                            acc4 = _mm_fmadd_ps(d4, isum, acc4);
                            if with_min {
                                acc4 = _mm_fmadd_ps(halves4(2), _mm_set1_ps(xs), acc4);
                            }
                        } else {
                            for c in 0..C {
                                let d = _mm_cvtss_f32(half(blk[c])) * xd;
                                acc1[c] = d.mul_add(total(sums[c]) as f32, acc1[c]);
                                if with_min {
                                    // SAFETY: see above (the block's minimum).
                                    let m = _mm_cvtss_f32(half(unsafe { blk[c].add(2) }));
                                    acc1[c] = m.mul_add(xs, acc1[c]);
                                }
                            }
                        }
                    }
                }
                if BLOCKS {
                    if C == 4 {
                        let mut v = [0f32; 4];
                        // SAFETY: `v` is 4 writable f32s; storeu needs no alignment.
                        unsafe { _mm_storeu_ps(v.as_mut_ptr(), acc4) };
                        return std::array::from_fn(|c| v[c]);
                    }
                    return acc1;
                }
                let mut out = [0f32; C];
                for c in 0..C {
                    let mut v = [0f32; LANES];
                    // SAFETY: `v` is 8 writable f32s; storeu needs no alignment.
                    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc[c]) };
                    out[c] = hsum(v) + mins[c];
                }
                out
            }
        };
    }

    raw_dots_fn!(raw_dots_of, "avx2,fma,f16c", false);
    raw_dots_fn!(
        raw_dots_vnni,
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        true
    );
}
