use std::arch::x86_64::*;

use super::{LANES, dot_finish};

/// `online_softmax` for `hd = 8·N` with the accumulator in `N`
/// registers instead of memory; the same operations in the same order.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn online_softmax<const N: usize>(
    qh: &[f32],
    keys: &[f32],
    vals: &[f32],
    scale: f32,
    softcap: Option<f32>,
    f16_cache: bool,
    out: &mut [f32],
) -> f32 {
    let hd = N * LANES;
    let s = keys.len() / hd;
    let round = |v: __m256| {
        if f16_cache {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
        } else {
            v
        }
    };
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for (key, val) in keys.chunks_exact(hd).zip(vals.chunks_exact(hd)).take(s) {
        // SAFETY: this function's own features.
        let lanes = unsafe { dot_lanes(&qh[..hd], key) };
        let mut score = dot_finish(lanes, qh, key, hd) * scale;
        if let Some(cap) = softcap {
            score = cap * score.tanh();
        }
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if score > max {
            ms = (max - score).exp();
            max = score;
            let m = _mm256_set1_ps(ms);
            for a in &mut acc {
                *a = round(_mm256_mul_ps(*a, m));
            }
        } else {
            vs = (score - max).exp();
        }
        let v8 = _mm256_set1_ps(vs);
        for (a, v) in acc.iter_mut().zip(val.chunks_exact(LANES)) {
            // SAFETY: 8 readable f32s; loadu needs no alignment.
            let v = unsafe { _mm256_loadu_ps(v.as_ptr()) };
            *a = round(_mm256_fmadd_ps(v, v8, *a));
        }
        sum = sum.mul_add(ms, vs);
    }
    for (o, a) in out.chunks_exact_mut(LANES).zip(acc) {
        // SAFETY: 8 writable f32s; storeu needs no alignment.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
    sum
}

/// `grouped_softmax` for `hd = 8·N`: queries `g × hd`, keys and values
/// `s × hd`; `accs` gets the `g × hd` accumulators, `sums` (`g`) the
/// denominators; `work` holds `2·g·s`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn grouped_softmax<const N: usize>(
    qs: &[f32],
    keys: &[f32],
    vals: &[f32],
    scale: f32,
    softcap: Option<f32>,
    f16_cache: bool,
    accs: &mut [f32],
    work: &mut [f32],
    sums: &mut [f32],
) {
    let hd = N * LANES;
    let (g, s) = (sums.len(), keys.len() / hd);
    // Per head: each step's exp (`es`), and whether it raised the
    // maximum (`ups`: then it scales the accumulator, else the value).
    let (es, ups) = work[..2 * g * s].split_at_mut(g * s);
    for h in 0..g {
        let q = &qs[h * hd..(h + 1) * hd];
        // SAFETY: 8 readable f32s each; loadu needs no alignment.
        let q: [__m256; N] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(q[i * LANES..].as_ptr()) });
        let (e, up) = (&mut es[h * s..(h + 1) * s], &mut ups[h * s..(h + 1) * s]);
        // `dot_lanes` per key in registers, and `dot_finish` for 8 keys
        // at a time (`v` = the folded accumulators of each).
        let fold = |key: &[f32]| {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (i, q) in q.iter().enumerate() {
                // SAFETY: 8 readable f32s; loadu needs no alignment.
                let k = unsafe { _mm256_loadu_ps(key[i * LANES..].as_ptr()) };
                acc[i % 4] = _mm256_fmadd_ps(*q, k, acc[i % 4]);
            }
            _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]))
        };
        let scale8 = _mm256_set1_ps(scale);
        // hadd leaves keys in order 0 2 4 6 1 3 5 7.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let mut e8 = e.chunks_exact_mut(LANES);
        for (e, keys) in (&mut e8).zip(keys.chunks_exact(LANES * hd)) {
            let v: [__m256; LANES] = std::array::from_fn(|i| fold(&keys[i * hd..]));
            // t = v[0..4] + v[4..8] of two keys per register.
            let t: [__m256; 4] = std::array::from_fn(|i| {
                let (a, b) = (v[2 * i], v[2 * i + 1]);
                _mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(a, b),
                    _mm256_permute2f128_ps::<0x31>(a, b),
                )
            });
            // (t0 + t1) and (t2 + t3), then their sum.
            let h = _mm256_hadd_ps(_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));
            let scores = _mm256_mul_ps(_mm256_permutevar8x32_ps(h, order), scale8);
            // SAFETY: 8 writable f32s; storeu needs no alignment.
            unsafe { _mm256_storeu_ps(e.as_mut_ptr(), scores) };
        }
        let done = s - s % LANES;
        for (e, key) in e8
            .into_remainder()
            .iter_mut()
            .zip(keys[done * hd..].chunks_exact(hd))
        {
            let v = fold(key);
            let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            // (t0 + t1) + (t2 + t3).
            let t = _mm_hadd_ps(t, t);
            *e = _mm_cvtss_f32(_mm_hadd_ps(t, t)) * scale;
        }
        if let Some(cap) = softcap {
            for e in e.iter_mut() {
                *e = cap * e.tanh();
            }
        }
        let mut max = f32::NEG_INFINITY;
        for (e, up) in e.iter_mut().zip(up.iter_mut()) {
            // Without branches: early on a new maximum is common and
            // unpredictable.
            let score = *e;
            let raised = score > max;
            *e = if raised { max - score } else { score - max };
            *up = f32::from(u8::from(raised));
            max = if raised { score } else { max };
        }
        for e in e.iter_mut() {
            *e = e.exp();
        }
    }
    // The value updates, over units of 4 registers (32 values) of one
    // head, 2 units at a time: 8 accumulators stay in registers (12
    // spilled to the stack), and their independent f16 roundings
    // overlap.
    sums.fill(0.0);
    let units = g * N / 4;
    let steps = (&es[..], &ups[..], s);
    let mut u = 0;
    while u < units {
        if units - u >= 2 {
            value_updates::<N, 2>(u, steps, vals, f16_cache, accs, sums);
            u += 2;
        } else {
            value_updates::<N, 1>(u, steps, vals, f16_cache, accs, sums);
            u += 1;
        }
    }
}

/// Units `u0..u0 + U` of `grouped_softmax`'s value updates (unit `u`:
/// head `u / (N/4)`, values `32·(u % (N/4))..` of it); `steps` = (exps,
/// maximum raised, span) per head.
#[target_feature(enable = "avx2,fma,f16c")]
fn value_updates<const N: usize, const U: usize>(
    u0: usize,
    steps: (&[f32], &[f32], usize),
    vals: &[f32],
    f16_cache: bool,
    accs: &mut [f32],
    sums: &mut [f32],
) {
    let (es, ups, s) = steps;
    let hd = N * LANES;
    let per_head = N / 4;
    let round = |v: __m256| {
        if f16_cache {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
        } else {
            v
        }
    };
    let unit = |k: usize| ((u0 + k) / per_head, (u0 + k) % per_head);
    // One unit's update for key `j`, written out per unit below (with
    // a loop LLVM kept the accumulators on the stack).
    let step = |acc: &mut [__m256; 4], sums: &mut [f32], k: usize, j: usize| {
        let (h, c) = unit(k);
        let (e, up) = (es[h * s + j], ups[h * s + j] != 0.0);
        let (ms, vs) = if up { (e, 1.0) } else { (1.0, e) };
        let v8 = _mm256_set1_ps(vs);
        if up {
            let m = _mm256_set1_ps(ms);
            for a in acc.iter_mut() {
                *a = round(_mm256_mul_ps(*a, m));
            }
        }
        let val = &vals[j * hd + c * 4 * LANES..j * hd + (c + 1) * 4 * LANES];
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: 8 readable f32s; loadu needs no alignment.
            let v = unsafe { _mm256_loadu_ps(val[r * LANES..].as_ptr()) };
            *a = round(_mm256_fmadd_ps(v, v8, *a));
        }
        if c == 0 {
            sums[h] = sums[h].mul_add(ms, vs);
        }
    };
    let [mut a0, mut a1, mut a2] = [[_mm256_setzero_ps(); 4]; 3];
    for j in 0..s {
        step(&mut a0, sums, 0, j);
        if U >= 2 {
            step(&mut a1, sums, 1, j);
        }
        if U >= 3 {
            step(&mut a2, sums, 2, j);
        }
    }
    let acc = [a0, a1, a2];
    let acc = &acc[..U];
    for (k, acc) in acc.iter().enumerate() {
        let (h, c) = unit(k);
        let out = &mut accs[h * hd + c * 4 * LANES..h * hd + (c + 1) * 4 * LANES];
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: 8 writable f32s; storeu needs no alignment.
            unsafe { _mm256_storeu_ps(out[r * LANES..].as_mut_ptr(), *a) };
        }
    }
}

/// The four accumulators of `dot_ggml` over `a` and `b` (equal lengths,
/// a multiple of 32): lane `l` of accumulator `j` is the fused sum of
/// products `32·i + 8·j + l`, in order of `i`, as the portable loop.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_lanes(a: &[f32], b: &[f32]) -> [[f32; LANES]; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        for (j, acc) in acc.iter_mut().enumerate() {
            let (x, y) = (
                &x[j * LANES..(j + 1) * LANES],
                &y[j * LANES..(j + 1) * LANES],
            );
            // SAFETY: 8 readable f32s each; loadu needs no alignment.
            let (x, y) = unsafe { (_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(y.as_ptr())) };
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
    }
    let mut out = [[0f32; LANES]; 4];
    for (o, acc) in out.iter_mut().zip(acc) {
        // SAFETY: 8 writable f32s; storeu needs no alignment.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc) };
    }
    out
}
