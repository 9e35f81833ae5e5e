//! Instruction-set selection for the fast kernels, and the small numeric
//! helpers they share.
//!
//! Kernels are plain Rust written so that LLVM vectorizes them (fixed-size
//! lane arrays, no data-dependent branches). Each is generic over [`Madd`]
//! and compiled three times: inside a `#[target_feature]` entry point for
//! AVX-512 with VNNI and one for AVX2 (each chosen at run time when the CPU
//! has those), and once for the baseline target. [`Isa::detect`] makes that
//! choice once per backend.

/// Vector lanes the kernels are written for: one AVX register of f32.
pub const LANES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// x86-64 with AVX-512 F, BW, VL and VNNI besides AVX2, FMA and F16C,
    /// detected at run time: the AVX2 kernels, with the integer dot
    /// products on `vpdpbusd`/`vpdpwssd` and 512-bit vectors.
    Avx512Vnni,
    /// x86-64 with AVX2, FMA and F16C, detected at run time.
    Avx2,
    /// aarch64 with the dot-product extension (`dotprod`), detected at run
    /// time: the portable kernels with their integer block lanes on
    /// `sdot` (`neon.rs`).
    NeonDot,
    /// Whatever the compile target guarantees (SSE2 on x86-64, NEON with
    /// fused multiply-add on aarch64).
    Baseline,
}

impl Isa {
    /// Every instruction set, best first.
    const ALL: [Isa; 4] = [Isa::Avx512Vnni, Isa::Avx2, Isa::NeonDot, Isa::Baseline];

    /// The best instruction set this CPU has.
    pub fn detect() -> Isa {
        Isa::available()[0]
    }

    /// Every instruction set this CPU can run the kernels of, best first:
    /// a test runs each, with the better ones forced off.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.supported()).collect()
    }

    /// Whether this CPU has every feature the ISA's kernels are compiled
    /// with.
    fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            match self {
                Isa::Avx512Vnni => {
                    avx2 && has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512vnni")
                }
                Isa::Avx2 => avx2,
                Isa::NeonDot => false,
                Isa::Baseline => true,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            match self {
                Isa::NeonDot => std::arch::is_aarch64_feature_detected!("dotprod"),
                Isa::Baseline => true,
                Isa::Avx512Vnni | Isa::Avx2 => false,
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            self == Isa::Baseline
        }
    }

    /// The name `SMELT_CPU_ISA` takes: `avx512`, `avx2`, `neon` or
    /// `baseline`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512Vnni => "avx512",
            Isa::Avx2 => "avx2",
            Isa::NeonDot => "neon",
            Isa::Baseline => "baseline",
        }
    }

    /// The instruction set of [`Isa::name`] `name`.
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name)
    }

    /// Every name [`Isa::from_name`] takes, for error messages.
    pub fn names() -> String {
        Isa::ALL.map(Isa::name).join(", ")
    }
}

/// Multiply-add, fused where the ISA has it. `f32::mul_add` without FMA
/// hardware is a slow library call, so the baseline x86 build multiplies
/// and adds instead.
pub trait Madd {
    /// Set only on the types of the AVX2 and AVX-512 entry points, so a
    /// kernel may call hand-written AVX2 code: the CPU was checked before
    /// that type is used.
    const AVX2: bool = false;
    /// Set only on the type of the AVX-512 entry points, so a kernel may
    /// call hand-written AVX-512 (F, BW, VL, VNNI) code.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX512: bool = false;
    /// Set only on the type of the aarch64 `dotprod` entry points, so a
    /// kernel may call `neon.rs`.
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    const DOTPROD: bool = false;
    fn madd(a: f32, b: f32, c: f32) -> f32;

    /// Rounds each value to the nearest f16 (ties to even), as storing to
    /// and loading from f16 would.
    #[inline(always)]
    fn round_to_f16(v: &mut [f32]) {
        for x in v {
            *x = half::f16::from_f32(*x).to_f32();
        }
    }
}

/// Fused multiply-add on a CPU without AVX2 (aarch64).
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub struct Fused;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Unfused;
/// Fused multiply-add inside the AVX2 entry points of [`multiversion`].
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Avx2Fma;
/// Fused multiply-add inside the AVX-512 entry points of [`multiversion`].
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Avx512Vnni;
/// Fused multiply-add inside the aarch64 `dotprod` entry points of
/// [`multiversion`].
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub struct NeonDot;

impl Madd for NeonDot {
    const DOTPROD: bool = true;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl Madd for Fused {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl Madd for Avx2Fma {
    const AVX2: bool = true;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }

    #[inline(always)]
    fn round_to_f16(v: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            let mut chunks = v.chunks_exact_mut(LANES);
            for c in &mut chunks {
                // SAFETY: `Avx2Fma` runs only inside entry points compiled
                // for AVX2 and F16C on a CPU that has them; `c` is 8 f32s,
                // and loadu/storeu need no alignment.
                unsafe {
                    let x = _mm256_loadu_ps(c.as_ptr());
                    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                    _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
                }
            }
            for x in chunks.into_remainder() {
                *x = half::f16::from_f32(*x).to_f32();
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        for x in v {
            *x = half::f16::from_f32(*x).to_f32();
        }
    }
}

impl Madd for Avx512Vnni {
    const AVX2: bool = true;
    const AVX512: bool = true;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }

    #[inline(always)]
    fn round_to_f16(v: &mut [f32]) {
        Avx2Fma::round_to_f16(v);
    }
}

impl Madd for Unfused {
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// The `Madd` of the baseline build: aarch64 always has fused multiply-add.
#[cfg(target_arch = "aarch64")]
pub type BaselineMadd = Fused;
#[cfg(not(target_arch = "aarch64"))]
pub type BaselineMadd = Unfused;

/// Defines `$name(isa, args)`, which runs `$generic::<M>(args)` with the
/// best [`Madd`] for `isa`: on AVX2 and AVX-512 machines through a
/// `#[target_feature]` entry point, into which the `#[inline(always)]`
/// generic kernel is compiled with that ISA's features.
macro_rules! multiversion {
    ($vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? = $generic:ident;) => {
        $vis fn $name(isa: $crate::backend::cpu::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            fn avx2($($arg: $ty),*) $(-> $ret)? {
                $generic::<$crate::backend::cpu::simd::Avx2Fma>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            fn avx512($($arg: $ty),*) $(-> $ret)? {
                $generic::<$crate::backend::cpu::simd::Avx512Vnni>($($arg),*)
            }
            #[cfg(target_arch = "aarch64")]
            #[target_feature(enable = "neon,dotprod")]
            fn neon($($arg: $ty),*) $(-> $ret)? {
                $generic::<$crate::backend::cpu::simd::NeonDot>($($arg),*)
            }
            match isa {
                #[cfg(target_arch = "aarch64")]
                // SAFETY: `Isa::NeonDot` is only made by `Isa::detect` or
                // `Isa::available`, after the CPU reported `dotprod`.
                $crate::backend::cpu::simd::Isa::NeonDot => unsafe { neon($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx512Vnni` is only made by `Isa::detect`
                // or `Isa::available`, after the CPU reported every feature
                // `avx512` is compiled with.
                $crate::backend::cpu::simd::Isa::Avx512Vnni => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx2` is only made by `Isa::detect`, after
                // the CPU reported AVX2, FMA and F16C.
                $crate::backend::cpu::simd::Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => $generic::<$crate::backend::cpu::simd::BaselineMadd>($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;

/// IEEE half to single precision, exactly, in plain integer arithmetic so it
/// inlines into kernels (the `half` crate's conversion is a call that checks
/// the CPU each time). Normal and subnormal halves: the bits shifted into a
/// float whose exponent is 112 too small, then scaled by 2^112, which is
/// exact; infinities and NaNs are rebuilt.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let rest = u32::from(h & 0x7fff);
    if rest >= 0x7c00 {
        return f32::from_bits(sign | 0x7f80_0000 | ((rest & 0x3ff) << 13));
    }
    let magnitude = f32::from_bits(rest << 13) * f32::from_bits(0x7780_0000); // 2^112
    f32::from_bits(sign | magnitude.to_bits())
}

/// The lanes of `v` summed pairwise.
#[inline(always)]
pub fn hsum(v: [f32; LANES]) -> f32 {
    let a = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// `R × C` dot products of `xs` with `ws` (all of one length), in `R·C`
/// accumulators of 8 lanes.
#[inline(always)]
pub fn tile<M: Madd, const R: usize, const C: usize>(
    xs: [&[f32]; R],
    ws: [&[f32]; C],
) -> [[f32; C]; R] {
    let k = xs[0].len();
    let mut acc = [[[0f32; LANES]; C]; R];
    let full = k - k % LANES;
    for o in (0..full).step_by(LANES) {
        for r in 0..R {
            let x = &xs[r][o..o + LANES];
            for c in 0..C {
                let w = &ws[c][o..o + LANES];
                for l in 0..LANES {
                    acc[r][c][l] = M::madd(x[l], w[l], acc[r][c][l]);
                }
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            let mut s = hsum(acc[r][c]);
            for o in full..k {
                s = M::madd(xs[r][o], ws[c][o], s);
            }
            out[r][c] = s;
        }
    }
    out
}

/// `Σ v[i]` over 8 lanes.
#[inline(always)]
pub fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut c = v.chunks_exact(LANES);
    for x in &mut c {
        for l in 0..LANES {
            acc[l] += x[l];
        }
    }
    hsum(acc) + c.remainder().iter().sum::<f32>()
}

/// `e^x` in f32 without a library call, so loops over it vectorize:
/// `x = n·ln2 + r`, `e^r` by a degree-6 polynomial on `|r| ≤ ln2/2`, times
/// `2^n` built in the exponent bits. Relative error below 3e-7 (2 ulp). Inputs
/// below -87 give about 1e-38 (as good as 0 next to a softmax maximum);
/// NaN stays NaN.
#[inline(always)]
pub fn exp<M: Madd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E).round();
    let r = M::madd(n, -LN2_LO, M::madd(n, -LN2_HI, x));
    // Taylor coefficients 1/k!, Horner form.
    let mut p = 1.0 / 720.0;
    p = M::madd(p, r, 1.0 / 120.0);
    p = M::madd(p, r, 1.0 / 24.0);
    p = M::madd(p, r, 1.0 / 6.0);
    p = M::madd(p, r, 0.5);
    p = M::madd(p, r, 1.0);
    p = M::madd(p, r, 1.0);
    // n is in -126..=127 after the clamp, so the biased exponent is a
    // valid normal number's.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `x · sigmoid(x)`.
#[inline(always)]
pub fn silu<M: Madd>(x: f32) -> f32 {
    x / (1.0 + exp::<M>(-x))
}

/// GELU as ggml's CPU computes it (`GGML_GELU_FP16`): the tanh
/// approximation `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))` of the
/// input rounded to f16, from a table of f16 results; 0 at or below -10,
/// the input at or above 10. It rounds by up to 2^-11 of the value each
/// way; llama.cpp's Gemma logits follow it, not the exact function.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let i = half::f16::from_f32(x).to_bits();
        f16_to_f32(gelu_table()[usize::from(i)])
    }
}

/// `gelu_tanh(x)` in f32 as `x·(1 − 1/(e^{2y} + 1))`, `y = √(2/π)·(x +
/// 0.044715·x³)`, with fused multiply-adds: the arithmetic the GPU's
/// `cpu_gelu` repeats bit for bit, so that the table's f16 entries are
/// the GPU's too (ggml's own table, made with `tanhf`, differs from it by
/// one f16 step where an f32 value lies within an ulp of a rounding tie).
pub fn gelu_f32(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    let y = C * Fused::madd(0.044715 * x * x, x, x);
    x * (1.0 - 1.0 / (exp::<Fused>(2.0 * y) + 1.0))
}

/// f16 GELU of every f16 input, made once.
fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|i| half::f16::from_f32(gelu_f32(f16_to_f32(i))).to_bits())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ISA's name round-trips, `available` is best first and ends
    /// with the baseline, and asking for an ISA the CPU lacks is a clear
    /// error, not an illegal instruction.
    #[test]
    fn isa_names_and_availability() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::from_name("avx512vnni"), None);
        let available = Isa::available();
        assert_eq!(available.last(), Some(&Isa::Baseline));
        assert_eq!(available[0], Isa::detect());
        let rank = |i: &Isa| Isa::ALL.iter().position(|a| a == i);
        assert!(available.windows(2).all(|w| rank(&w[0]) < rank(&w[1])));
        for isa in Isa::ALL {
            let options = crate::backend::cpu::CpuOptions {
                isa,
                ..crate::backend::cpu::CpuOptions::best(1)
            };
            match crate::backend::cpu::CpuBackend::with_options(&options) {
                Ok(_) => assert!(available.contains(&isa), "{isa:?}"),
                Err(e) => {
                    assert!(!available.contains(&isa), "{isa:?}: {e}");
                    let msg = e.to_string();
                    assert!(msg.contains(isa.name()), "{msg}");
                }
            }
        }
    }

    #[test]
    fn exp_matches_libm() {
        let mut worst = 0f64;
        for i in -8700..=8800 {
            let x = i as f32 * 0.01;
            let want = f64::from(x).exp();
            let got = f64::from(exp::<Unfused>(x));
            if want > 1e-37 {
                worst = worst.max((got - want).abs() / want);
            }
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert!(exp::<Unfused>(f32::NAN).is_nan());
        assert!(exp::<Unfused>(f32::NEG_INFINITY) < 1e-37);
    }

    #[test]
    fn f16_to_f32_is_exact_for_every_half() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{h:#06x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn silu_and_gelu_match_formulas() {
        for i in -400..=400 {
            let x = i as f32 * 0.05;
            let xd = f64::from(x);
            let silu_want = xd / (1.0 + (-xd).exp());
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let gelu_want = 0.5 * xd * (1.0 + (c * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!(
                (f64::from(silu::<Unfused>(x)) - silu_want).abs() < 1e-6 * (1.0 + silu_want.abs())
            );
            // Input and output rounded to f16: each within 2^-11.
            let tol = 2e-3 * (1.0 + gelu_want.abs());
            assert!((f64::from(gelu(x)) - gelu_want).abs() < tol, "gelu({x})");
        }
        assert_eq!((gelu(-10.0), gelu(10.0), gelu(12.5)), (0.0, 10.0, 12.5));
    }
}
