//! aarch64 NEON with the dot-product extension (`sdot`, Armv8.2's
//! `dotprod`: Apple M1 and later, Neoverse servers): the integer block
//! lanes of the portable kernels ([`super::q8`]'s legacy blocks,
//! [`super::kdot`]'s K-quant chunks) on `vdotq_s32`.
//!
//! `sdot` sums the products of 4 neighbouring bytes into each 32-bit lane,
//! which is exactly the portable kernels' lane (lane `l` of 32 values sums
//! products `4l..4l+3`), so the results are the same integers, and the
//! f32 sums after them the same bits.
//!
//! Runs only inside the `neon` entry points of `simd::multiversion`,
//! after the CPU reported `dotprod` (`Isa::NeonDot`). Not built on x86-64.

use std::arch::aarch64::*;

/// The 8 lanes of 32 byte products: lane `l` = Σ_{t<4} w[4l+t] · x[4l+t].
///
/// # Safety
/// The CPU must have NEON and `dotprod`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_lanes(w: &[i8; 32], x: &[i8; 32]) -> [i32; 8] {
    let mut out = [0i32; 8];
    // SAFETY: w, x and out hold 32, 32 and 8 elements: two 16-byte loads
    // each and two 4-lane stores stay inside them; `sdot` only reads and
    // writes its registers, and this function is compiled with `dotprod`.
    unsafe {
        let (w0, w1) = (vld1q_s8(w.as_ptr()), vld1q_s8(w.as_ptr().add(16)));
        let (x0, x1) = (vld1q_s8(x.as_ptr()), vld1q_s8(x.as_ptr().add(16)));
        let (mut lo, mut hi) = (vdupq_n_s32(0), vdupq_n_s32(0));
        // `vdotq_s32` is still unstable in std::arch: `sdot` itself.
        std::arch::asm!(
            "sdot {lo:v}.4s, {w0:v}.16b, {x0:v}.16b",
            "sdot {hi:v}.4s, {w1:v}.16b, {x1:v}.16b",
            lo = inout(vreg) lo,
            hi = inout(vreg) hi,
            w0 = in(vreg) w0,
            x0 = in(vreg) x0,
            w1 = in(vreg) w1,
            x1 = in(vreg) x1,
            options(pure, nomem, nostack),
        );
        vst1q_s32(out.as_mut_ptr(), lo);
        vst1q_s32(out.as_mut_ptr().add(4), hi);
    }
    out
}
