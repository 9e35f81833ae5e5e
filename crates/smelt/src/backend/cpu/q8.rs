//! Quantized matmuls the way ggml's CPU backend computes them: activations
//! rounded to 8-bit blocks once per matmul, integer dot products per
//! 32-value block, scaled and summed in f32.
//!
//! Why copy ggml's arithmetic rather than dequantize the weights to f32: the
//! 8-bit rounding of activations moves a small model's log-probabilities by
//! tenths of a nat, and which way depends on every earlier rounding. An
//! engine that should follow llama.cpp's greedy choices must round where it
//! rounds. The structure, per weight row × activation row:
//!
//! ```text
//! x block → q = round_ties_even(x · 127/amax), d = f16(amax/127), s = f16(amax/127 · Σq)
//! lane l of block b = Σ_{p=4l..4l+3} w_q[p] · x_q[p]          (exact integers, 8 lanes)
//! acc[l] = fma(d_w · d_x, lane l, acc[l])   over the blocks
//! dot = pairwise sum of acc + Σ_b fma(m_w, s_x)               (m: Q4_1's minimum)
//! ```
//!
//! The integer lanes are what AVX2's `maddubs`/`madd` pair produces, so a
//! later SIMD version (issue 5) keeps these numbers exactly.
//!
//! Legend: `k` values per row, `nb = k/32` blocks per row.

use half::f16;

use super::simd::{Isa, LANES, Madd, f16_to_f32, hsum, multiversion};
use crate::quant::GgmlType;

/// Values per Q8 block.
pub const QK8: usize = 32;

/// Whether matmuls with `dtype` weights take this path.
pub fn has_q8_path(dtype: GgmlType) -> bool {
    matches!(dtype, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// Activations quantized to Q8 blocks (ggml's `block_q8_0`/`block_q8_1`,
/// laid out as arrays).
#[derive(Default)]
pub struct Q8Acts {
    /// `n × k` quants.
    pub qs: Vec<i8>,
    /// `n × nb` scales `f16(amax/127)`, widened.
    pub d: Vec<f32>,
    /// `n × nb` `f16(amax/127 · Σq)`, widened: Q4_1's minimum multiplies it.
    pub s: Vec<f32>,
}

impl Q8Acts {
    /// Quantizes rows of `k` values (`k` a multiple of 32).
    pub fn quantize(&mut self, isa: Isa, x: &[f32]) {
        quantize_kernel(isa, self, x);
    }
}

multiversion! {
    fn quantize_kernel(acts: &mut Q8Acts, x: &[f32]) = quantize_generic;
}

#[inline(always)]
fn quantize_generic<M: Madd>(acts: &mut Q8Acts, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA.
        return unsafe { avx2::quantize_rows(acts, x) };
    }
    acts.quantize_rows(x);
}

impl Q8Acts {
    /// Sizes the arrays for `n` values.
    #[inline(always)]
    fn resize(&mut self, n: usize) {
        let nb = n / QK8;
        self.qs.resize(n, 0);
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
    }

    #[inline(always)]
    fn quantize_rows(&mut self, x: &[f32]) {
        self.resize(x.len());
        for (b, (xb, qb)) in x
            .chunks_exact(QK8)
            .zip(self.qs.chunks_exact_mut(QK8))
            .enumerate()
        {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in qb.iter_mut().zip(xb) {
                // |v · id| ≤ 127, so the cast cannot saturate.
                let r = (v * id).round_ties_even() as i32;
                sum += r;
                *q = r as i8;
            }
            self.d[b] = f16::from_f32(d).to_f32();
            self.s[b] = f16::from_f32(d * sum as f32).to_f32();
        }
    }
}

/// Weight rows unpacked to one signed byte per value, with per-block scale
/// and minimum (0 for types without one).
#[derive(Default)]
pub struct Unpacked {
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub m: Vec<f32>,
}

impl Unpacked {
    /// Unpacks whole rows of `dtype` blocks (a type [`has_q8_path`] accepts).
    #[inline(always)]
    pub fn unpack(&mut self, dtype: GgmlType, src: &[u8]) {
        let bytes = dtype.type_size();
        let nb = src.len() / bytes;
        self.qs.resize(nb * QK8, 0);
        self.d.resize(nb, 0.0);
        self.m.resize(nb, 0.0);
        let blocks = src.chunks_exact(bytes).zip(self.qs.chunks_exact_mut(QK8));
        for (i, (blk, q)) in blocks.enumerate() {
            self.d[i] = f16_at(blk, 0);
            let q: &mut [i8; QK8] = q.try_into().expect("whole blocks");
            match dtype {
                GgmlType::Q4_0 => nibbles(blk[2..18].try_into().expect("Q4_0 block"), 8, q),
                GgmlType::Q4_1 => {
                    self.m[i] = f16_at(blk, 2);
                    nibbles(blk[4..20].try_into().expect("Q4_1 block"), 0, q);
                }
                _ => {
                    for (o, &b) in q.iter_mut().zip(&blk[2..34]) {
                        *o = b as i8;
                    }
                }
            }
        }
    }
}

/// Low nibbles are values 0..16, high nibbles 16..32, each minus `off`.
/// Fixed sizes, so the loop vectorizes.
#[inline(always)]
fn nibbles(qs: &[u8; 16], off: i8, q: &mut [i8; QK8]) {
    for j in 0..16 {
        q[j] = (qs[j] & 15) as i8 - off;
        q[j + 16] = (qs[j] >> 4) as i8 - off;
    }
}

/// The 8 integer lanes of one block: lane `l` sums products `4l..4l+3`.
#[inline(always)]
fn lanes(w: &[i8], x: &[i8]) -> [f32; LANES] {
    // Plain loops over fixed sizes: closures (`array::from_fn`) may stay
    // out of line, compiled without the entry point's AVX2.
    let (w, x) = (&w[..QK8], &x[..QK8]);
    let mut out = [0f32; LANES];
    for l in 0..LANES {
        let mut s = 0i32;
        for t in 0..4 {
            s += i32::from(w[4 * l + t]) * i32::from(x[4 * l + t]);
        }
        // At most 4 · 127 · 128: exact in f32.
        out[l] = s as f32;
    }
    out
}

/// `R × C` dot products of Q8 activation rows with unpacked weight rows,
/// each over `nb` blocks, accumulated as ggml does (see the module docs).
/// `xs[r] = (quants, scales, sums)`, `ws[c] = (quants, scales, minimums)`.
#[inline(always)]
pub fn tile<M: Madd, const R: usize, const C: usize>(
    xs: [(&[i8], &[f32], &[f32]); R],
    ws: [(&[i8], &[f32], &[f32]); C],
    with_min: bool,
) -> [[f32; C]; R] {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA.
        return unsafe { avx2::tile(xs, ws, with_min) };
    }
    let nb = ws[0].1.len();
    let mut acc = [[[0f32; LANES]; C]; R];
    let mut mins = [[0f32; C]; R];
    for b in 0..nb {
        let o = b * QK8;
        for r in 0..R {
            for c in 0..C {
                let lane = lanes(&ws[c].0[o..], &xs[r].0[o..]);
                let d = ws[c].1[b] * xs[r].1[b];
                for l in 0..LANES {
                    acc[r][c][l] = M::madd(d, lane[l], acc[r][c][l]);
                }
                if with_min {
                    mins[r][c] = M::madd(ws[c].2[b], xs[r].2[b], mins[r][c]);
                }
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            out[r][c] = hsum(acc[r][c]) + mins[r][c];
        }
    }
    out
}

#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Whether [`raw_dots`] has a kernel for this entry point (AVX2 only; the
/// portable path unpacks).
#[inline(always)]
pub fn has_raw_kernel<M: Madd>() -> bool {
    cfg!(target_arch = "x86_64") && M::AVX2
}

/// One Q8 activation row against `C` weight rows still in their GGUF
/// blocks: the same numbers as [`tile`] after [`Unpacked::unpack`].
/// Only when [`has_raw_kernel`].
#[inline(always)]
pub fn raw_dots<M: Madd, const C: usize>(
    dtype: GgmlType,
    x: (&[i8], &[f32], &[f32]),
    ws: [&[u8]; C],
) -> [f32; C] {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C.
        return unsafe { avx2::raw_dots(dtype, x, ws) };
    }
    let _ = (dtype, x, ws);
    unreachable!("raw_dots without has_raw_kernel")
}

/// The same tile with AVX2 integer instructions: `maddubs` multiplies
/// unsigned by signed bytes and adds pairs into i16, `madd` against ones adds
/// pairs of those into the 8 i32 lanes, exactly [`lanes`]' sums, so the
/// result is bit for bit the portable one's.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{GgmlType, LANES, Q8Acts, QK8, hsum};

    /// `_mm256_maddubs_epi16` wants its first operand unsigned: the weight's
    /// sign moves onto x (exact: |w| ≤ 128 and |x| ≤ 127 keep each pair sum
    /// within i16). Then `madd` against ones sums the pairs into 8 lanes.
    #[inline(always)]
    fn lanes(w: __m256i, x: __m256i) -> __m256 {
        // SAFETY: only called from functions compiled with AVX2.
        unsafe {
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `dtype` is Q4_0, Q4_1 or Q8_0.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn raw_dots<const C: usize>(
        dtype: GgmlType,
        x: (&[i8], &[f32], &[f32]),
        ws: [&[u8]; C],
    ) -> [f32; C] {
        // One body per type, so the inner loop does not branch on it.
        match dtype {
            GgmlType::Q4_0 => raw_dots_of::<C, Q4_0>(x, ws),
            GgmlType::Q4_1 => raw_dots_of::<C, Q4_1>(x, ws),
            _ => raw_dots_of::<C, Q8_0>(x, ws),
        }
    }

    const Q4_0: u8 = 0;
    const Q4_1: u8 = 1;
    const Q8_0: u8 = 2;

    #[target_feature(enable = "avx2,fma,f16c")]
    fn raw_dots_of<const C: usize, const T: u8>(
        x: (&[i8], &[f32], &[f32]),
        ws: [&[u8]; C],
    ) -> [f32; C] {
        let bytes = [18, 20, 34][T as usize];
        let nb = x.1.len();
        let mut acc = [_mm256_setzero_ps(); C];
        let mut mins = [0f32; C];
        let half = |b: &[u8], at: usize| {
            let h = i32::from(u16::from_le_bytes([b[at], b[at + 1]]));
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)))
        };
        for b in 0..nb {
            let xb: &[i8; QK8] = x.0[b * QK8..(b + 1) * QK8]
                .try_into()
                .expect("a whole block");
            // SAFETY: 32 readable bytes; loadu needs no alignment.
            let xv = unsafe { _mm256_loadu_si256(xb.as_ptr().cast()) };
            let xd = x.1[b];
            for c in 0..C {
                let blk = &ws[c][b * bytes..(b + 1) * bytes];
                let q = if T == Q8_0 {
                    let qs: &[u8; 32] = blk[2..34].try_into().expect("a Q8_0 block");
                    // SAFETY: 32 readable bytes.
                    unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) }
                } else {
                    let at = if T == Q4_1 { 4 } else { 2 };
                    let qs: &[u8; 16] = blk[at..at + 16].try_into().expect("a Q4 block");
                    // SAFETY: 16 readable bytes.
                    let lo = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
                    // Low nibbles are values 0..16, high nibbles 16..32.
                    let both = _mm256_set_m128i(_mm_srli_epi16(lo, 4), lo);
                    let q = _mm256_and_si256(both, _mm256_set1_epi8(15));
                    if T == Q4_0 {
                        _mm256_sub_epi8(q, _mm256_set1_epi8(8))
                    } else {
                        q
                    }
                };
                let dd = _mm256_set1_ps(half(blk, 0) * xd);
                let l = if T == Q4_1 {
                    // Quants 0..16 are unsigned as they are: no sign moves.
                    let pairs = _mm256_maddubs_epi16(q, xv);
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
                } else {
                    lanes(q, xv)
                };
                acc[c] = _mm256_fmadd_ps(dd, l, acc[c]);
                if T == Q4_1 {
                    mins[c] = half(blk, 2).mul_add(x.2[b], mins[c]);
                }
            }
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

    /// [`Q8Acts::quantize_rows`] 8 values at a time, with the same
    /// arithmetic: `|x|` maximum, `x · (127/amax)` rounded to nearest even,
    /// the integer sum of the quants.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_rows(acts: &mut Q8Acts, x: &[f32]) {
        acts.resize(x.len());
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        // packs interleaves 128-bit halves; this puts the 32 bytes in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let blocks = x.chunks_exact(QK8).zip(acts.qs.chunks_exact_mut(QK8));
        for ((xb, qb), (d, s)) in blocks.zip(acts.d.iter_mut().zip(acts.s.iter_mut())) {
            // SAFETY: `xb` is 32 readable f32s; loadu needs no alignment.
            let v: [__m256; 4] =
                std::array::from_fn(|j| unsafe { _mm256_loadu_ps(xb[8 * j..].as_ptr()) });
            let m = _mm256_max_ps(
                _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)),
            );
            let mut lanes = [0f32; LANES];
            // SAFETY: 8 writable f32s.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
            let amax = lanes.iter().fold(0f32, |a, &b| a.max(b));
            let dv = amax / 127.0;
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let q: [__m256i; 4] = std::array::from_fn(|j| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(v[j], id),
                );
                _mm256_cvtps_epi32(r)
            });
            let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let mut sums = [0i32; LANES];
            // SAFETY: 8 writable i32s.
            unsafe { _mm256_storeu_si256(sums.as_mut_ptr().cast(), sum) };
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            // SAFETY: `qb` is 32 writable bytes.
            unsafe { _mm256_storeu_si256(qb.as_mut_ptr().cast(), bytes) };
            *d = f16::from_f32(dv).to_f32();
            *s = f16::from_f32(dv * sums.iter().sum::<i32>() as f32).to_f32();
        }
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile<const R: usize, const C: usize>(
        xs: [(&[i8], &[f32], &[f32]); R],
        ws: [(&[i8], &[f32], &[f32]); C],
        with_min: bool,
    ) -> [[f32; C]; R] {
        if with_min {
            tile_of::<R, C, true>(xs, ws)
        } else {
            tile_of::<R, C, false>(xs, ws)
        }
    }

    /// One activation row at a time against the `C` weight rows, so the `C`
    /// accumulators stay in registers (a 3 × 4 tile of them spilled to the
    /// stack on every block) and weight blocks are read again from L1 for
    /// each row, which costs less. `MIN`: Q4_1, whose quants are 0..16, so
    /// `maddubs` takes them unsigned as they are, with no sign moves.
    #[target_feature(enable = "avx2,fma")]
    fn tile_of<const R: usize, const C: usize, const MIN: bool>(
        xs: [(&[i8], &[f32], &[f32]); R],
        ws: [(&[i8], &[f32], &[f32]); C],
    ) -> [[f32; C]; R] {
        let nb = ws[0].1.len();
        let whole = |(q, d, s): (&[i8], &[f32], &[f32])| {
            q.len() >= nb * QK8 && d.len() >= nb && (!MIN || s.len() >= nb)
        };
        assert!(
            xs.iter().all(|&x| whole(x)) && ws.iter().all(|&w| whole(w)),
            "tile rows shorter than their blocks"
        );
        let ones = _mm256_set1_epi16(1);
        let mut out = [[0f32; C]; R];
        for (r, out) in out.iter_mut().enumerate() {
            let (xq, xd, xs) = xs[r];
            let mut acc = [_mm256_setzero_ps(); C];
            let mut mins = [0f32; C];
            for b in 0..nb {
                // SAFETY: b < nb, and every row holds nb blocks (asserted
                // above); loadu needs no alignment.
                let x = unsafe { _mm256_loadu_si256(xq.as_ptr().add(b * QK8).cast()) };
                // SAFETY: as above.
                let dx = unsafe { *xd.get_unchecked(b) };
                for c in 0..C {
                    let (wq, wd, wm) = ws[c];
                    // SAFETY: as above.
                    let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * QK8).cast()) };
                    let pairs = if MIN {
                        _mm256_maddubs_epi16(w, x)
                    } else {
                        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                    };
                    let lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                    // SAFETY: as above.
                    let d = _mm256_set1_ps(unsafe { *wd.get_unchecked(b) } * dx);
                    acc[c] = _mm256_fmadd_ps(d, lanes, acc[c]);
                    if MIN {
                        // SAFETY: as above (`MIN` rows hold nb sums and minimums).
                        let (m, s) = unsafe { (*wm.get_unchecked(b), *xs.get_unchecked(b)) };
                        mins[c] = m.mul_add(s, mins[c]);
                    }
                }
            }
            for c in 0..C {
                let mut v = [0f32; LANES];
                // SAFETY: `v` is 8 writable f32s; storeu needs no alignment.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc[c]) };
                out[c] = hsum(v) + mins[c];
            }
        }
        out
    }
}
