//! `e^x`, `σ(x) = 1 / (1 + e^−x)` and `tanh` over slices, sixteen or eight
//! lanes at a time with AVX-512 or AVX2/FMA where the CPU has them (checked
//! at run time; both give each lane the same bits), else the same formulas
//! one value at a time.
//!
//! `e^y = 2ⁿ · (1 + p(r))`, `n = round(y / ln 2)`, `r = y − n·ln 2` (ln 2 in
//! two parts, so `r` is exact), `p(r) = e^r − 1` by its Taylor series to
//! `r⁷` (`|r| ≤ ln 2 / 2`: truncation below 2⁻²⁴ relative).
//! `tanh |x| = m / (m + 2)`, `m = e^{2|x|} − 1 = 2ⁿ·p + (2ⁿ − 1)`, so that
//! small `x` keep their relative accuracy (no `1 − e` cancellation).
//! Both agree with libm to a few units in the last place; the GPU's
//! `exp`/`tanh` differ from libm by as much.

const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `e^y` overflows f32 above 88.7; σ is 0 or 1 to f32 beyond ±87.
const EXP_LIMIT: f32 = 87.0;
/// `tanh` is ±1 to f32 beyond ±9.1; `2·|x|` is clamped here.
const TANH_LIMIT: f32 = 20.0;
/// `1/k!` for `k = 2..=7`: `p(r) = r + r²·(c2 + r·(c3 + …))`.
const C: [f32; 6] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// `(2ⁿ, e^r − 1)` with `e^y = 2ⁿ · (1 + p)`, `|y| ≤ EXP_LIMIT`.
#[inline(always)]
fn exp_parts(y: f32) -> (f32, f32) {
    let n = (y * LOG2E).round();
    let r = (y - n * LN2_HI) - n * LN2_LO;
    let mut q = C[5];
    for &c in C[..5].iter().rev() {
        q = q * r + c;
    }
    let p = r + r * r * q;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    (scale, p)
}

#[inline(always)]
pub fn sigmoid_one(x: f32) -> f32 {
    let (s, p) = exp_parts((-x).clamp(-EXP_LIMIT, EXP_LIMIT));
    1.0 / (1.0 + (s + s * p))
}

#[inline(always)]
pub fn tanh_one(x: f32) -> f32 {
    let (s, p) = exp_parts((2.0 * x.abs()).min(TANH_LIMIT));
    let m = s * p + (s - 1.0);
    (m / (m + 2.0)).copysign(x)
}

/// `e^x`, `x` clamped to `±EXP_LIMIT` (`e^−87` is 1.6e−38: below it
/// the result stays there instead of reaching zero).
#[inline(always)]
pub fn exp_one(x: f32) -> f32 {
    let (s, p) = exp_parts(x.clamp(-EXP_LIMIT, EXP_LIMIT));
    s + s * p
}

/// `x[i] = e^x[i]` (`exp_one`).
pub fn exp(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked above).
        return unsafe { avx512::exp(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2::exp(x) };
    }
    x.iter_mut().for_each(|v| *v = exp_one(*v));
}

/// `x[i] = σ(x[i])`.
pub fn sigmoid(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked above).
        return unsafe { avx512::sigmoid(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2::sigmoid(x) };
    }
    x.iter_mut().for_each(|v| *v = sigmoid_one(*v));
}

/// `x[i] = tanh(x[i])`.
pub fn tanh(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked above).
        return unsafe { avx512::tanh(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { avx2::tanh(x) };
    }
    x.iter_mut().for_each(|v| *v = tanh_one(*v));
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{C, EXP_LIMIT, LN2_HI, LN2_LO, LOG2E, TANH_LIMIT, exp_one, sigmoid_one, tanh_one};
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    /// `(2ⁿ, e^r − 1)` of eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp_parts(y: __m256) -> (__m256, __m256) {
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(y, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), y);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut q = _mm256_set1_ps(C[5]);
        for &c in C[..5].iter().rev() {
            q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(c));
        }
        let p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, r);
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        (_mm256_castsi256_ps(bits), p)
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn exp(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds exactly eight f32s.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = _mm256_min_ps(
                _mm256_max_ps(v, _mm256_set1_ps(-EXP_LIMIT)),
                _mm256_set1_ps(EXP_LIMIT),
            );
            let (s, p) = exp_parts(y);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), _mm256_fmadd_ps(s, p, s)) };
        }
        chunks
            .into_remainder()
            .iter_mut()
            .for_each(|v| *v = exp_one(*v));
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn sigmoid(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds exactly eight f32s.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = _mm256_min_ps(
                _mm256_max_ps(
                    _mm256_sub_ps(_mm256_setzero_ps(), v),
                    _mm256_set1_ps(-EXP_LIMIT),
                ),
                _mm256_set1_ps(EXP_LIMIT),
            );
            let (s, p) = exp_parts(y);
            let e = _mm256_fmadd_ps(s, p, s);
            let one = _mm256_set1_ps(1.0);
            let out = _mm256_div_ps(one, _mm256_add_ps(one, e));
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), out) };
        }
        chunks
            .into_remainder()
            .iter_mut()
            .for_each(|v| *v = sigmoid_one(*v));
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn tanh(x: &mut [f32]) {
        let sign_bit = _mm256_set1_ps(-0.0);
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds exactly eight f32s.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let abs = _mm256_andnot_ps(sign_bit, v);
            let y = _mm256_min_ps(_mm256_add_ps(abs, abs), _mm256_set1_ps(TANH_LIMIT));
            let (s, p) = exp_parts(y);
            let m = _mm256_fmadd_ps(s, p, _mm256_sub_ps(s, _mm256_set1_ps(1.0)));
            let t = _mm256_div_ps(m, _mm256_add_ps(m, _mm256_set1_ps(2.0)));
            let out = _mm256_or_ps(t, _mm256_and_ps(sign_bit, v));
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), out) };
        }
        chunks
            .into_remainder()
            .iter_mut()
            .for_each(|v| *v = tanh_one(*v));
    }
}

/// The AVX2 path's operations on sixteen lanes (the same bits a lane); a
/// slice's last `len % 16` values go to the AVX2 path.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{C, EXP_LIMIT, LN2_HI, LN2_LO, LOG2E, TANH_LIMIT, avx2};
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f") && avx2::available()
    }

    /// `(2ⁿ, e^r − 1)` of sixteen lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn exp_parts(y: __m512) -> (__m512, __m512) {
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(y, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), y);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let mut q = _mm512_set1_ps(C[5]);
        for &c in C[..5].iter().rev() {
            q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(c));
        }
        let p = _mm512_fmadd_ps(_mm512_mul_ps(r, r), q, r);
        let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        (_mm512_castsi512_ps(bits), p)
    }

    /// `f` on each whole 16-lane piece of `x`, the rest by `tail`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lanes(x: &mut [f32], f: impl Fn(__m512) -> __m512, tail: impl FnOnce(&mut [f32])) {
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds exactly sixteen f32s.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(c.as_mut_ptr(), f(v)) };
        }
        tail(chunks.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn exp(x: &mut [f32]) {
        let f = |v: __m512| {
            let y = _mm512_min_ps(
                _mm512_max_ps(v, _mm512_set1_ps(-EXP_LIMIT)),
                _mm512_set1_ps(EXP_LIMIT),
            );
            let (s, p) = exp_parts(y);
            _mm512_fmadd_ps(s, p, s)
        };
        lanes(x, f, |t| avx2::exp(t));
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn sigmoid(x: &mut [f32]) {
        let f = |v: __m512| {
            let y = _mm512_min_ps(
                _mm512_max_ps(
                    _mm512_sub_ps(_mm512_setzero_ps(), v),
                    _mm512_set1_ps(-EXP_LIMIT),
                ),
                _mm512_set1_ps(EXP_LIMIT),
            );
            let (s, p) = exp_parts(y);
            let e = _mm512_fmadd_ps(s, p, s);
            let one = _mm512_set1_ps(1.0);
            _mm512_div_ps(one, _mm512_add_ps(one, e))
        };
        lanes(x, f, |t| avx2::sigmoid(t));
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub fn tanh(x: &mut [f32]) {
        let f = |v: __m512| {
            let sign_bit = _mm512_castsi512_ps(_mm512_set1_epi32(i32::MIN));
            let abs = _mm512_castsi512_ps(_mm512_andnot_si512(
                _mm512_castps_si512(sign_bit),
                _mm512_castps_si512(v),
            ));
            let y = _mm512_min_ps(_mm512_add_ps(abs, abs), _mm512_set1_ps(TANH_LIMIT));
            let (s, p) = exp_parts(y);
            let m = _mm512_fmadd_ps(s, p, _mm512_sub_ps(s, _mm512_set1_ps(1.0)));
            let t = _mm512_div_ps(m, _mm512_add_ps(m, _mm512_set1_ps(2.0)));
            let sign = _mm512_and_si512(_mm512_castps_si512(sign_bit), _mm512_castps_si512(v));
            _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign))
        };
        lanes(x, f, |t| avx2::tanh(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs across every range the formulas branch on: tiny, the
    /// reduction's boundaries, large, and the clamps.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.01).collect();
        v.extend([
            0.0, -0.0, 1e-8, -1e-8, 1e-4, -3e-4, 0.3465, -0.3466, 9.0, 9.2, 40.0, -40.0, 87.5,
            -87.5, 100.0, -100.0, 1e30, -1e30,
        ]);
        v
    }

    fn check(name: &str, got: &[f32], want: impl Fn(f32) -> f32, xs: &[f32], ulps: f32) {
        for (&x, &g) in xs.iter().zip(got) {
            let w = want(x);
            // σ below e^−87 is flushed towards zero by the clamp.
            let tol = ulps * f32::EPSILON * w.abs() + 1e-37;
            assert!((g - w).abs() <= tol, "{name}({x}) = {g}, libm {w}");
        }
    }

    #[test]
    fn agree_with_libm() {
        let xs = inputs();
        let mut s = xs.clone();
        sigmoid(&mut s);
        check(
            "sigmoid",
            &s,
            |x| (1.0 / (1.0 + (-(x as f64)).exp())) as f32,
            &xs,
            4.0,
        );
        let mut t = xs.clone();
        tanh(&mut t);
        check("tanh", &t, |x| (x as f64).tanh() as f32, &xs, 4.0);
        // e^x within range (the clamp holds e^±87 beyond it).
        let inside: Vec<f32> = xs.iter().copied().filter(|x| x.abs() <= 87.0).collect();
        let mut e = inside.clone();
        exp(&mut e);
        check("exp", &e, |x| (x as f64).exp() as f32, &inside, 4.0);
    }

    /// The AVX-512 path gives each lane the AVX2 path's bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_lanes_give_the_avx2_bits() {
        if !avx512::available() {
            return;
        }
        let xs = inputs();
        type Path = unsafe fn(&mut [f32]);
        let paths: [(&str, Path, Path); 3] = [
            ("exp", avx512::exp, avx2::exp),
            ("sigmoid", avx512::sigmoid, avx2::sigmoid),
            ("tanh", avx512::tanh, avx2::tanh),
        ];
        for (name, wide, narrow) in paths {
            let (mut a, mut b) = (xs.clone(), xs.clone());
            // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked above).
            unsafe {
                wide(&mut a);
                narrow(&mut b);
            }
            for ((x, a), b) in xs.iter().zip(&a).zip(&b) {
                assert_eq!(a.to_bits(), b.to_bits(), "{name}({x}): {a} vs {b}");
            }
        }
    }

    /// The vector path (where the CPU has it) against the scalar one.
    #[test]
    fn vector_matches_scalar() {
        let xs = inputs();
        let mut s = xs.clone();
        sigmoid(&mut s);
        let mut t = xs.clone();
        tanh(&mut t);
        let mut e = xs.clone();
        exp(&mut e);
        for (i, &x) in xs.iter().enumerate() {
            let we = exp_one(x);
            assert!(
                (e[i] - we).abs() <= 2.0 * f32::EPSILON * we.abs(),
                "exp({x}): {} vs {we}",
                e[i]
            );
            let (ws, wt) = (sigmoid_one(x), tanh_one(x));
            assert!(
                (s[i] - ws).abs() <= 2.0 * f32::EPSILON * ws.abs(),
                "σ({x}): {} vs {ws}",
                s[i]
            );
            assert!(
                (t[i] - wt).abs() <= 2.0 * f32::EPSILON * wt.abs(),
                "tanh({x}): {} vs {wt}",
                t[i]
            );
        }
    }
}
