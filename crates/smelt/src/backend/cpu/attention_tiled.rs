//! Prefill attention in tiles: the fast mode's for batches of at least
//! [`MIN_ROWS`] rows, where llama.cpp also leaves its one-row path for
//! `flash_attn_ext_tiled`. All in f32 (no f16 rounding of the query or the
//! accumulator, which [`super::attention`] keeps for ggml's one-row
//! numbers).
//!
//! A work item's queries (its rows × its KV head's query heads) go in
//! sub-blocks of [`QB`], one query per vector lane, against the widened
//! keys and values in tiles of [`KT`]:
//!
//! ```text
//! S[j][q] = scale · Σ_d K[j][d] · Q[q][d]     (−∞ outside query q's span)
//! m' = max(m, max_j S[j]);  α = e^(m − m');  P[j] = e^(S[j] − m')
//! l = α·l + Σ_j P[j];  O[d] = α·O[d] + Σ_j P[j] · V[j][d]
//! out[q] = O[q] / l[q]
//! ```
//!
//! With queries in lanes the softmax is elementwise across keys, and both
//! products are broadcasts against 16-lane rows (`Qᵀ`, `P`, `Oᵀ` are kept
//! transposed: `[d][q]`, `[j][q]`).
//!
//! Legend: `hd` head dim, `s` widened keys, `q` a query of the sub-block.

use std::ops::Range;

use super::simd::{Madd, exp};

/// Queries per sub-block: two vectors of 8 lanes.
pub const QB: usize = 16;
/// Keys per tile.
const KT: usize = 64;
/// Rows of a batch from which the fast mode takes this path.
pub const MIN_ROWS: usize = 64;

/// One run of a work item's query rows whose keys were widened together
/// (rows of one sequence: one cache base).
pub struct Run<'a> {
    /// The batch's queries, rows of `q_cols`.
    pub q: &'a [f32],
    pub q_cols: usize,
    /// The run's rows of the batch, and per row its span as positions of
    /// the widened keys (`first..=last`).
    pub rows: Range<usize>,
    pub spans: &'a [(usize, usize)],
    /// The query heads of the item's KV head.
    pub heads: Range<usize>,
    pub hd: usize,
    /// Widened keys and values, `s × hd` each.
    pub keys: &'a [f32],
    pub vals: &'a [f32],
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// Scratch floats [`run`] needs for heads of `hd`.
pub fn scratch_len(hd: usize) -> usize {
    2 * hd * QB + KT * QB + hd
}

/// Attention of every query of `r`, each output (`hd` values) handed to
/// `store(row, head, values)`. `work` holds [`scratch_len`] floats.
#[inline(always)]
pub fn run<M: Madd>(r: &Run, work: &mut [f32], store: &mut impl FnMut(usize, usize, &[f32])) {
    let hd = r.hd;
    let group = r.heads.len();
    // Query `i` is row `rows.start + i / group`, head `heads.start + i % group`.
    let row_head = |i: usize| (r.rows.start + i / group, r.heads.start + i % group);
    let n_queries = r.rows.len() * group;
    let (qt, rest) = work.split_at_mut(hd * QB);
    let (ot, rest) = rest.split_at_mut(hd * QB);
    let (st, out) = rest.split_at_mut(KT * QB);
    let out = &mut out[..hd];
    for start in (0..n_queries).step_by(QB) {
        let count = (n_queries - start).min(QB);
        // Each lane's span; lanes past `count` have none and are not stored.
        let mut first = [usize::MAX; QB];
        let mut last = [0usize; QB];
        for i in 0..count {
            (first[i], last[i]) = r.spans[(start + i) / group];
        }
        let lo = first[..count].iter().copied().min().unwrap_or(0);
        let hi = last[..count].iter().map(|&l| l + 1).max().unwrap_or(0);
        // Qᵀ: `qt[d·QB + i]`.
        qt.fill(0.0);
        for i in 0..count {
            let (row, head) = row_head(start + i);
            let src = &r.q[row * r.q_cols + head * hd..][..hd];
            for (d, &v) in src.iter().enumerate() {
                qt[d * QB + i] = v;
            }
        }
        ot.fill(0.0);
        let mut m = [f32::NEG_INFINITY; QB];
        let mut l = [0f32; QB];
        let mut t0 = lo;
        while t0 < hi {
            let kt = (hi - t0).min(KT);
            let st = &mut st[..kt * QB];
            scores::<M>(qt, &r.keys[t0 * hd..(t0 + kt) * hd], hd, st);
            let masked = (0..count).any(|i| first[i] > t0 || last[i] + 1 < t0 + kt);
            let span = masked.then_some((&first, &last));
            softmax_step::<M>(st, t0, span, r.scale, r.softcap, &mut m, &mut l, ot);
            values::<M>(st, &r.vals[t0 * hd..(t0 + kt) * hd], hd, ot);
            t0 += kt;
        }
        for i in 0..count {
            let inv = if l[i] == 0.0 { 0.0 } else { 1.0 / l[i] };
            for (d, o) in out.iter_mut().enumerate() {
                *o = ot[d * QB + i] * inv;
            }
            let (row, head) = row_head(start + i);
            store(row, head, out);
        }
    }
}

/// `st[j·QB + q] = Σ_d keys[j][d] · qt[d·QB + q]` for the tile's keys,
/// four keys at a time.
#[inline(always)]
fn scores<M: Madd>(qt: &[f32], keys: &[f32], hd: usize, st: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if M::AVX512 {
        // SAFETY: `M::AVX512` holds only inside the AVX-512 entry points,
        // which run after the CPU reported AVX-512 F (and AVX2, FMA).
        return unsafe { x86::scores_avx512(qt, keys, hd, st) };
    }
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA.
        return unsafe { x86::scores_avx2(qt, keys, hd, st) };
    }
    for (key, s) in keys.chunks_exact(hd).zip(st.chunks_exact_mut(QB)) {
        let mut acc = [0f32; QB];
        for (d, &k) in key.iter().enumerate() {
            let q = &qt[d * QB..(d + 1) * QB];
            for i in 0..QB {
                acc[i] = M::madd(k, q[i], acc[i]);
            }
        }
        s.copy_from_slice(&acc);
    }
}

/// The softmax update of one tile of scores `st` (its first key at
/// widened position `t0`), lane by lane: scale, cap, mask (where `span`
/// is given: lanes' `first..=last`), the new maxima, `P` in place of the
/// scores, the denominators, and `ot` scaled by each lane's `α`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn softmax_step<M: Madd>(
    st: &mut [f32],
    t0: usize,
    span: Option<(&[usize; QB], &[usize; QB])>,
    scale: f32,
    softcap: Option<f32>,
    m: &mut [f32; QB],
    l: &mut [f32; QB],
    ot: &mut [f32],
) {
    let mut tile_max = [f32::NEG_INFINITY; QB];
    for (j, s) in st.chunks_exact_mut(QB).enumerate() {
        let s: &mut [f32; QB] = s.try_into().expect("a row of lanes");
        for v in s.iter_mut() {
            *v *= scale;
        }
        if let Some(cap) = softcap {
            for v in s.iter_mut() {
                // tanh(x) = 1 − 2 / (e^{2x} + 1), vectorizable.
                *v = cap * (1.0 - 2.0 / (exp::<M>(2.0 * *v) + 1.0));
            }
        }
        if let Some((first, last)) = span {
            let at = t0 + j;
            for i in 0..QB {
                if at < first[i] || at > last[i] {
                    s[i] = f32::NEG_INFINITY;
                }
            }
        }
        for i in 0..QB {
            tile_max[i] = tile_max[i].max(s[i]);
        }
    }
    // The maximum each lane's exps are taken against: 0 while a lane has
    // seen no key, so that e^(−∞ − 0) = 0 rather than NaN.
    let mut base = [0f32; QB];
    let mut alpha = [0f32; QB];
    for i in 0..QB {
        let new = m[i].max(tile_max[i]);
        base[i] = if new == f32::NEG_INFINITY { 0.0 } else { new };
        alpha[i] = if m[i] == f32::NEG_INFINITY {
            0.0
        } else {
            exp::<M>(m[i] - base[i])
        };
        m[i] = new;
    }
    let mut sum = [0f32; QB];
    for s in st.chunks_exact_mut(QB) {
        for i in 0..QB {
            let p = if s[i] == f32::NEG_INFINITY {
                0.0
            } else {
                exp::<M>(s[i] - base[i])
            };
            s[i] = p;
            sum[i] += p;
        }
    }
    for i in 0..QB {
        l[i] = M::madd(l[i], alpha[i], sum[i]);
    }
    for o in ot.chunks_exact_mut(QB) {
        for i in 0..QB {
            o[i] *= alpha[i];
        }
    }
}

/// `ot[d·QB + q] += Σ_j st[j·QB + q] · vals[j][d]` for the tile's keys,
/// four dims at a time.
#[inline(always)]
fn values<M: Madd>(st: &[f32], vals: &[f32], hd: usize, ot: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if M::AVX512 {
        // SAFETY: as in `scores`.
        return unsafe { x86::values_avx512(st, vals, hd, ot) };
    }
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA.
        return unsafe { x86::values_avx2(st, vals, hd, ot) };
    }
    for (p, val) in st.chunks_exact(QB).zip(vals.chunks_exact(hd)) {
        for (d, &v) in val.iter().enumerate() {
            let o = &mut ot[d * QB..(d + 1) * QB];
            for i in 0..QB {
                o[i] = M::madd(v, p[i], o[i]);
            }
        }
    }
}

/// The tiles on x86: the 16 queries of a sub-block as one row of lanes
/// ([`Row16`]: two AVX2 registers or one AVX-512 register), `STEP` keys
/// (scores) or dims (values) a step, each lane summing in the same order
/// on both, so the bits are the same.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::QB;

    /// 16 f32 lanes and the operations the tiles take on them.
    ///
    /// # Safety
    /// Every method only from functions compiled with the implementing
    /// ISA's features, and `load`/`store` with a pointer to 16 readable or
    /// writable f32s (loadu/storeu need no alignment).
    pub trait Row16: Copy {
        unsafe fn zero() -> Self;
        unsafe fn load(p: *const f32) -> Self;
        unsafe fn splat(v: f32) -> Self;
        /// `a · b + c`, fused.
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
        unsafe fn store(self, p: *mut f32);
    }

    /// AVX2 and FMA: two 8-lane registers (the tiles take 4 rows a step).
    #[derive(Clone, Copy)]
    pub struct Avx2(__m256, __m256);

    impl Row16 for Avx2 {
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm256_setzero_ps(), _mm256_setzero_ps()) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm256_set1_ps(v), _mm256_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe {
                Self(
                    _mm256_fmadd_ps(a.0, b.0, c.0),
                    _mm256_fmadd_ps(a.1, b.1, c.1),
                )
            }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe {
                _mm256_storeu_ps(p, self.0);
                _mm256_storeu_ps(p.add(8), self.1);
            }
        }
    }

    /// AVX-512 F: one 16-lane register (the tiles take 8 rows a step).
    #[derive(Clone, Copy)]
    pub struct Avx512(__m512);

    impl Row16 for Avx512 {
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm512_setzero_ps()) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm512_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm512_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { Self(_mm512_fmadd_ps(a.0, b.0, c.0)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: `Row16`'s contract: the ISA's features, 16 f32s at `p`.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
    }

    /// [`super::scores`] on AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scores_avx2(qt: &[f32], keys: &[f32], hd: usize, st: &mut [f32]) {
        // SAFETY: compiled with AVX2 and FMA, as `Avx2` asks.
        unsafe { scores::<Avx2, 4>(qt, keys, hd, st) }
    }

    /// [`super::scores`] on AVX-512 F.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores_avx512(qt: &[f32], keys: &[f32], hd: usize, st: &mut [f32]) {
        // SAFETY: compiled with AVX-512 F, as `Avx512` asks.
        unsafe { scores::<Avx512, 8>(qt, keys, hd, st) }
    }

    /// [`super::values`] on AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn values_avx2(st: &[f32], vals: &[f32], hd: usize, ot: &mut [f32]) {
        // SAFETY: compiled with AVX2 and FMA, as `Avx2` asks.
        unsafe { values::<Avx2, 4>(st, vals, hd, ot) }
    }

    /// [`super::values`] on AVX-512 F.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn values_avx512(st: &[f32], vals: &[f32], hd: usize, ot: &mut [f32]) {
        // SAFETY: compiled with AVX-512 F, as `Avx512` asks.
        unsafe { values::<Avx512, 8>(st, vals, hd, ot) }
    }

    /// `STEP` keys × 16 queries in accumulator rows, each step one row of
    /// `Qᵀ` against `STEP` broadcast key values.
    ///
    /// # Safety
    /// Only inlined into functions compiled with `R`'s features.
    #[inline(always)]
    unsafe fn scores<R: Row16, const STEP: usize>(
        qt: &[f32],
        keys: &[f32],
        hd: usize,
        st: &mut [f32],
    ) {
        let kt = keys.len() / hd;
        assert!(
            qt.len() >= hd * QB && st.len() >= kt * QB,
            "tile buffers too short"
        );
        let mut j = 0;
        while j < kt {
            let c = (kt - j).min(STEP);
            // SAFETY: the caller's features; row d of Qᵀ, value d of keys
            // j..j + c and rows j..j + c of the scores lie within the
            // asserted lengths.
            unsafe {
                let mut acc = [R::zero(); STEP];
                for d in 0..hd {
                    let q = R::load(qt.as_ptr().add(d * QB));
                    for (k, acc) in acc.iter_mut().enumerate().take(c) {
                        let kv = R::splat(*keys.get_unchecked((j + k) * hd + d));
                        *acc = R::fmadd(kv, q, *acc);
                    }
                }
                for (k, acc) in acc.iter().enumerate().take(c) {
                    acc.store(st.as_mut_ptr().add((j + k) * QB));
                }
            }
            j += c;
        }
    }

    /// `STEP` dims × 16 queries in accumulator rows, each step one row of
    /// `P` against `STEP` broadcast values.
    ///
    /// # Safety
    /// Only inlined into functions compiled with `R`'s features.
    #[inline(always)]
    unsafe fn values<R: Row16, const STEP: usize>(
        st: &[f32],
        vals: &[f32],
        hd: usize,
        ot: &mut [f32],
    ) {
        let kt = vals.len() / hd;
        assert!(
            st.len() >= kt * QB && ot.len() >= hd * QB,
            "tile buffers too short"
        );
        let mut d = 0;
        while d < hd {
            let c = (hd - d).min(STEP);
            // SAFETY: the caller's features; rows d..d + c of Oᵀ, row j of
            // P and values d..d + c of key j lie within the asserted
            // lengths.
            unsafe {
                let mut acc = [R::zero(); STEP];
                for (k, acc) in acc.iter_mut().enumerate().take(c) {
                    *acc = R::load(ot.as_ptr().add((d + k) * QB));
                }
                for j in 0..kt {
                    let p = R::load(st.as_ptr().add(j * QB));
                    for (k, acc) in acc.iter_mut().enumerate().take(c) {
                        let v = R::splat(*vals.get_unchecked(j * hd + d + k));
                        *acc = R::fmadd(v, p, *acc);
                    }
                }
                for (k, acc) in acc.iter().enumerate().take(c) {
                    acc.store(ot.as_mut_ptr().add((d + k) * QB));
                }
            }
            d += c;
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::Isa;

    /// The AVX-512 tiles give the AVX2 tiles' bits (the same sums per
    /// lane), over tiles whose keys and dims are not whole steps.
    #[test]
    fn avx512_tiles_give_the_avx2_bits() {
        if !Isa::available().contains(&Isa::Avx512Vnni) {
            eprintln!("skipped: this CPU has no AVX-512");
            return;
        }
        let val = |i: usize| ((i * 7919 % 1013) as f32 - 506.0) / 97.0;
        for (hd, kt) in [(64, 64), (80, 13), (6, 3)] {
            let qt: Vec<f32> = (0..hd * QB).map(val).collect();
            let keys: Vec<f32> = (0..kt * hd).map(|i| val(i + 5)).collect();
            let (mut s2, mut s5) = (vec![0f32; kt * QB], vec![0f32; kt * QB]);
            // SAFETY: the CPU has AVX-512 F (checked above), hence AVX2 and
            // FMA too.
            unsafe {
                x86::scores_avx2(&qt, &keys, hd, &mut s2);
                x86::scores_avx512(&qt, &keys, hd, &mut s5);
            }
            assert_eq!(
                s2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                s5.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "scores hd {hd} kt {kt}"
            );
            let (mut o2, mut o5): (Vec<f32>, Vec<f32>) = (
                (0..hd * QB).map(val).collect(),
                (0..hd * QB).map(val).collect(),
            );
            // SAFETY: as above.
            unsafe {
                x86::values_avx2(&s2, &keys, hd, &mut o2);
                x86::values_avx512(&s2, &keys, hd, &mut o5);
            }
            assert_eq!(
                o2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                o5.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "values hd {hd} kt {kt}"
            );
        }
    }
}
