//! The AVX-512 VNNI instruction the AVX2 kernels take where
//! [`super::simd::Isa::Avx512Vnni`] runs them: `vpdpbusd` on 256 bits
//! (AVX-512 VL), four u8 × i8 products summed into each i32 lane, for
//! AVX2's `maddubs` (pairs into i16, which saturate past 32767) and
//! `madd` against ones (into i32).
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// `acc[l] + Σ_{e<4} u[4l+e]·s[4l+e]` per i32 lane `l`, `u` unsigned and
/// `s` signed bytes: exact.
///
/// # Safety
/// Only inlined into functions compiled with AVX-512 VL and VNNI.
#[inline(always)]
pub unsafe fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: as the caller promises.
    unsafe { _mm256_dpbusd_epi32(acc, u, s) }
}
