//! Quantized matmuls the way ggml's CPU backend computes them: activations
//! rounded to 8-bit blocks once per matmul, integer dot products per
//! 32-value block, scaled and summed in f32.
//!
//! Which matmuls take this order, for the 32-value block types (Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0): decode (items of at most 2 activation rows, on
//! AVX2 by [`super::q8_decode`] on the blocks in place), every Q4_1 one,
//! and prefill where AVX2 is missing or in the exact mode
//! (`CpuBackend::new_exact`, `SMELT_CPU_EXACT=1`). Other prefill on AVX2
//! takes [`super::gemm8`]: the same activation blocks and integer block
//! sums, added to each output in another f32 order.
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
    use GgmlType::*;
    matches!(dtype, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
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
    /// `n × k/2` sums `8·(q[2i] + q[2i+1])`, what Q4_0's unsigned nibbles
    /// take off each pair ([`Kind::Offset8`]); AVX2 quantizing only.
    pub x8: Vec<i16>,
    /// `n × nb` sums `8·Σq` per block, what Q4_0's unsigned nibbles take off
    /// a block's dot product in [`super::gemm8`].
    pub sum8: Vec<i32>,
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
        self.sum8.resize(nb, 0);
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
            self.sum8[b] = 8 * sum;
        }
    }
}

/// How a weight type's unpacked quants enter the integer dot products.
/// Every kind gives each lane the same integer as `Σ (signed quant)·x`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Q8_0, Q5_0 (unpacked as `q − 16`): signed quants; `maddubs` gets
    /// their magnitudes and x their signs.
    Signed,
    /// Q4_0: nibbles 0..16 kept unsigned; `8·Σx` of each lane is taken off
    /// afterwards, which gives the same integers as `Σ (q − 8)·x`.
    Offset8,
    /// Q4_1, Q5_1: values 0..16 or 0..32 as they are, plus a minimum per
    /// block.
    Min,
}

impl Kind {
    /// The kind of a type [`has_q8_path`] accepts.
    pub fn of(dtype: GgmlType) -> Kind {
        match dtype {
            GgmlType::Q4_0 => Kind::Offset8,
            GgmlType::Q4_1 | GgmlType::Q5_1 => Kind::Min,
            _ => Kind::Signed,
        }
    }

    /// What each lane's sum of `quant · x` is off by, per unit of `Σx`.
    #[inline(always)]
    fn offset(self) -> i32 {
        if self == Kind::Offset8 { 8 } else { 0 }
    }
}

/// Weight rows unpacked to one byte per value (see [`Kind`]), with per-block
/// scale and minimum (0 for types without one).
#[derive(Default)]
pub struct Unpacked {
    /// Q4_0, Q4_1: nibbles 0..16; Q5_1: 0..32; Q5_0: `q − 16`; Q8_0:
    /// the signed quants.
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub m: Vec<f32>,
}

impl Unpacked {
    /// Unpacks whole rows of `dtype` blocks (a type [`has_q8_path`] accepts).
    #[inline(always)]
    pub fn unpack<M: Madd>(&mut self, dtype: GgmlType, src: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        if M::AVX2 {
            // SAFETY: `M::AVX2` holds only inside the AVX2 entry points,
            // which run after the CPU reported AVX2, FMA and F16C.
            return unsafe { avx2::unpack(self, dtype, src) };
        }
        self.unpack_portable(dtype, src);
    }

    #[inline(always)]
    fn unpack_portable(&mut self, dtype: GgmlType, src: &[u8]) {
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
                GgmlType::Q4_0 => nibbles(blk[2..18].try_into().expect("Q4_0 block"), q),
                GgmlType::Q4_1 => {
                    self.m[i] = f16_at(blk, 2);
                    nibbles(blk[4..20].try_into().expect("Q4_1 block"), q);
                }
                GgmlType::Q5_0 => {
                    nibbles(blk[6..22].try_into().expect("Q5_0 block"), q);
                    fifth_bits(&blk[2..6], q, 16);
                }
                GgmlType::Q5_1 => {
                    self.m[i] = f16_at(blk, 2);
                    nibbles(blk[8..24].try_into().expect("Q5_1 block"), q);
                    fifth_bits(&blk[4..8], q, 0);
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

/// Adds Q5's fifth bits (bit `j` of the little-endian `qh`, value `j`)
/// as 16 to the nibbles, less `off`.
#[inline(always)]
fn fifth_bits(qh: &[u8], q: &mut [i8; QK8], off: i8) {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in q.iter_mut().enumerate() {
        *v = *v + ((qh >> j & 1) << 4) as i8 - off;
    }
}

/// Low nibbles are values 0..16, high nibbles 16..32. Fixed sizes, so the
/// loop vectorizes.
#[inline(always)]
fn nibbles(qs: &[u8; 16], q: &mut [i8; QK8]) {
    for j in 0..16 {
        q[j] = (qs[j] & 15) as i8;
        q[j + 16] = (qs[j] >> 4) as i8;
    }
}

/// The 8 integer lanes of one block: lane `l` sums products `4l..4l+3`,
/// with the weight quants less `off`.
/// On aarch64's `dotprod`, `sdot` gives Σ w·x and Σ x per lane, and the
/// lane is Σ w·x − off·Σ x: the same integers.
#[inline(always)]
fn lanes<M: Madd>(w: &[i8], x: &[i8], off: i32) -> [f32; LANES] {
    // Plain loops over fixed sizes: closures (`array::from_fn`) may stay
    // out of line, compiled without the entry point's AVX2.
    let (w, x) = (&w[..QK8], &x[..QK8]);
    #[cfg(target_arch = "aarch64")]
    if M::DOTPROD {
        let (w, x): (&[i8; QK8], &[i8; QK8]) =
            (w.try_into().expect("32"), x.try_into().expect("32"));
        // SAFETY: `M::DOTPROD` holds only inside the `dotprod` entry
        // points, which run after the CPU reported it.
        let wx = unsafe { super::neon::dot_lanes(w, x) };
        if off == 0 {
            return wx.map(|v| v as f32);
        }
        // Σ x per lane, for the types whose quants carry an offset.
        // SAFETY: as above.
        let sx = unsafe { super::neon::dot_lanes(&[1; QK8], x) };
        return std::array::from_fn(|l| (wx[l] - off * sx[l]) as f32);
    }
    let mut out = [0f32; LANES];
    for l in 0..LANES {
        let mut s = 0i32;
        for t in 0..4 {
            s += (i32::from(w[4 * l + t]) - off) * i32::from(x[4 * l + t]);
        }
        // At most 4 · 127 · 128: exact in f32.
        out[l] = s as f32;
    }
    out
}

/// `R × C` dot products of Q8 activation rows with unpacked weight rows,
/// each over `nb` blocks, accumulated as ggml does (see the module docs).
/// `xs[r] = (quants, scales, sums)`, `ws[c]` a row of [`Unpacked`].
#[inline(always)]
pub fn tile<M: Madd, const R: usize, const C: usize>(
    xs: [XRow; R],
    ws: [WRow; C],
    kind: Kind,
) -> [[f32; C]; R] {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA.
        return unsafe { avx2::tile(xs, ws, kind) };
    }
    let with_min = kind == Kind::Min;
    let nb = ws[0].d.len();
    let mut acc = [[[0f32; LANES]; C]; R];
    let mut mins = [[0f32; C]; R];
    for b in 0..nb {
        let o = b * QK8;
        for r in 0..R {
            for c in 0..C {
                let lane = lanes::<M>(&ws[c].q[o..], &xs[r].0[o..], kind.offset());
                let d = ws[c].d[b] * xs[r].1[b];
                for l in 0..LANES {
                    acc[r][c][l] = M::madd(d, lane[l], acc[r][c][l]);
                }
                if with_min {
                    mins[r][c] = M::madd(ws[c].m[b], xs[r].2[b], mins[r][c]);
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

/// A Q8 activation row: quants, scales, sums, 8·pair sums (see
/// [`Q8Acts`]; only the AVX2 Q4_0 tile reads them).
pub type XRow<'a> = (&'a [i8], &'a [f32], &'a [f32], &'a [i16]);

/// A row of [`Unpacked`] weights.
#[derive(Clone, Copy)]
pub struct WRow<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub m: &'a [f32],
}

#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// The same tile with AVX2 integer instructions: `maddubs` multiplies
/// unsigned by signed bytes and adds pairs into i16, `madd` against ones adds
/// pairs of those into the 8 i32 lanes, exactly [`lanes`]' sums, so the
/// result is bit for bit the portable one's.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{GgmlType, Kind, LANES, Q8Acts, QK8, Unpacked, WRow, XRow, hsum};

    /// [`Unpacked::unpack`] a block at a time: LLVM left the nibble loop
    /// scalar, 6% of a prompt.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn unpack(u: &mut Unpacked, dtype: GgmlType, src: &[u8]) {
        let bytes = dtype.type_size();
        let nb = src.len() / bytes;
        u.qs.resize(nb * QK8, 0);
        u.d.resize(nb, 0.0);
        u.m.resize(nb, 0.0);
        let half = |b: &[u8], at: usize| {
            let h = i32::from(u16::from_le_bytes([b[at], b[at + 1]]));
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)))
        };
        let (at, qh_at) = match dtype {
            GgmlType::Q4_1 => (4, 0),
            GgmlType::Q5_0 => (6, 2),
            GgmlType::Q5_1 => (8, 4),
            _ => (2, 0),
        };
        let five = matches!(dtype, GgmlType::Q5_0 | GgmlType::Q5_1);
        // Byte i of the fifth bits' u32 picks byte i / 8, then bit i % 8.
        let spread = _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let sixteen = _mm256_set1_epi8(16);
        let blocks = src.chunks_exact(bytes).zip(u.qs.chunks_exact_mut(QK8));
        for (i, (blk, q)) in blocks.enumerate() {
            u.d[i] = half(blk, 0);
            let q: &mut [i8; QK8] = q.try_into().expect("whole blocks");
            let v = if dtype == GgmlType::Q8_0 {
                let qs: &[u8; 32] = blk[2..34].try_into().expect("a Q8_0 block");
                // SAFETY: 32 readable bytes; loadu needs no alignment.
                unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) }
            } else {
                if matches!(dtype, GgmlType::Q4_1 | GgmlType::Q5_1) {
                    u.m[i] = half(blk, 2);
                }
                let qs: &[u8; 16] = blk[at..at + 16].try_into().expect("a Q4 block");
                // SAFETY: 16 readable bytes.
                let lo = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
                // Low nibbles are values 0..16, high nibbles 16..32.
                let both = _mm256_set_m128i(_mm_srli_epi16(lo, 4), lo);
                let v = _mm256_and_si256(both, _mm256_set1_epi8(15));
                if five {
                    let qh = i32::from_le_bytes(blk[qh_at..qh_at + 4].try_into().expect("qh"));
                    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                    let v = _mm256_or_si256(v, _mm256_and_si256(set, sixteen));
                    if dtype == GgmlType::Q5_0 {
                        _mm256_sub_epi8(v, sixteen)
                    } else {
                        v
                    }
                } else {
                    v
                }
            };
            // SAFETY: `q` is 32 writable bytes; storeu needs no alignment.
            unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), v) };
        }
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
        acts.x8.resize(x.len() / 2, 0);
        let eights = _mm256_set1_epi8(8);
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        // packs interleaves 128-bit halves; this puts the 32 bytes in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let blocks = x
            .chunks_exact(QK8)
            .zip(acts.qs.chunks_exact_mut(QK8))
            .zip(acts.x8.chunks_exact_mut(QK8 / 2));
        let scales = acts
            .d
            .iter_mut()
            .zip(acts.s.iter_mut())
            .zip(acts.sum8.iter_mut());
        for (((xb, qb), x8), ((d, s), sum8)) in blocks.zip(scales) {
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
            // SAFETY: `x8` is 16 writable i16s.
            unsafe {
                _mm256_storeu_si256(x8.as_mut_ptr().cast(), _mm256_maddubs_epi16(eights, bytes))
            };
            *d = f16::from_f32(dv).to_f32();
            let sum = sums.iter().sum::<i32>();
            *s = f16::from_f32(dv * sum as f32).to_f32();
            *sum8 = 8 * sum;
        }
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile<const R: usize, const C: usize>(
        xs: [XRow; R],
        ws: [WRow; C],
        kind: Kind,
    ) -> [[f32; C]; R] {
        match kind {
            Kind::Signed => tile_of::<R, C, SIGNED>(xs, ws),
            Kind::Offset8 => tile_of::<R, C, OFFSET8>(xs, ws),
            Kind::Min => tile_of::<R, C, MIN>(xs, ws),
        }
    }

    const SIGNED: u8 = 0;
    const OFFSET8: u8 = 1;
    const MIN: u8 = 2;

    /// One activation row at a time against the `C` weight rows, so the `C`
    /// accumulators stay in registers (a 3 × 4 tile of them spilled to the
    /// stack on every block) and weight blocks are read again from L1 for
    /// each row, which costs less. Per block and weight row the vector
    /// units do one `maddubs`, one `madd`, one conversion, one multiply of
    /// the scales (each broadcast straight from memory) and one `fma`, plus
    /// by kind: Q8_0 two sign moves, Q4_0 one subtraction of `8·(x pair)`
    /// (one `maddubs` per activation block), Q4_1 a scalar `fma` of the
    /// minimum.
    #[target_feature(enable = "avx2,fma")]
    fn tile_of<const R: usize, const C: usize, const K: u8>(
        xs: [XRow; R],
        ws: [WRow; C],
    ) -> [[f32; C]; R] {
        let nb = ws[0].d.len();
        let whole_x = |(q, d, s, x8): XRow| {
            q.len() >= nb * QK8
                && d.len() >= nb
                && (K != MIN || s.len() >= nb)
                && (K != OFFSET8 || x8.len() >= nb * QK8 / 2)
        };
        let whole_w =
            |w: WRow| w.q.len() >= nb * QK8 && w.d.len() >= nb && (K != MIN || w.m.len() >= nb);
        assert!(
            xs.iter().all(|&x| whole_x(x)) && ws.iter().all(|&w| whole_w(w)),
            "tile rows shorter than their blocks"
        );
        let mut out = [[0f32; C]; R];
        let mut r = 0;
        while r < R {
            if R - r >= 2 {
                let t = rows_of::<2, C, K>([xs[r], xs[r + 1]], ws, nb);
                out[r..r + 2].copy_from_slice(&t);
                r += 2;
            } else {
                out[r] = rows_of::<1, C, K>([xs[r]], ws, nb)[0];
                r += 1;
            }
        }
        out
    }

    /// `P` activation rows (1 or 2) against the `C` weight rows, each
    /// weight block loaded once for the `P` rows (`P · C` accumulators in
    /// registers). Rows hold `nb` blocks (checked by the caller).
    #[target_feature(enable = "avx2,fma")]
    fn rows_of<const P: usize, const C: usize, const K: u8>(
        xs: [XRow; P],
        ws: [WRow; C],
        nb: usize,
    ) -> [[f32; C]; P] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); C]; P];
        let mut mins = [[0f32; C]; P];
        for b in 0..nb {
            // SAFETY: b < nb, and every row holds nb blocks (asserted by
            // `tile_of`); loadu needs no alignment.
            let x: [__m256i; P] = std::array::from_fn(|p| unsafe {
                _mm256_loadu_si256(xs[p].0.as_ptr().add(b * QK8).cast())
            });
            // SAFETY: as above.
            let dx: [__m256; P] =
                std::array::from_fn(|p| unsafe { _mm256_broadcast_ss(&*xs[p].1.as_ptr().add(b)) });
            for (c, w) in ws.iter().enumerate() {
                // SAFETY: as above.
                let q = unsafe { _mm256_loadu_si256(w.q.as_ptr().add(b * QK8).cast()) };
                // SAFETY: as above.
                let dw = unsafe { _mm256_broadcast_ss(&*w.d.as_ptr().add(b)) };
                let qa = if K == SIGNED {
                    _mm256_sign_epi8(q, q)
                } else {
                    q
                };
                for p in 0..P {
                    let pairs = match K {
                        SIGNED => _mm256_maddubs_epi16(qa, _mm256_sign_epi8(x[p], q)),
                        // |pair| ≤ 2·15·127 before and 2·8·127 after the
                        // subtraction: no i16 saturation.
                        // (8·(x pair) read from memory: in registers it
                        // left too few for two rows.)
                        OFFSET8 => {
                            // SAFETY: as above (Q4_0 rows hold nb · 16
                            // pair sums).
                            let x8 = unsafe {
                                _mm256_loadu_si256(xs[p].3.as_ptr().add(b * QK8 / 2).cast())
                            };
                            _mm256_sub_epi16(_mm256_maddubs_epi16(q, x[p]), x8)
                        }
                        _ => _mm256_maddubs_epi16(q, x[p]),
                    };
                    let lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                    acc[p][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[p]), lanes, acc[p][c]);
                    if K == MIN {
                        // SAFETY: as above (`MIN` rows hold nb sums and
                        // minimums).
                        let (m, s) = unsafe { (*w.m.get_unchecked(b), *xs[p].2.get_unchecked(b)) };
                        mins[p][c] = m.mul_add(s, mins[p][c]);
                    }
                }
            }
        }
        let mut out = [[0f32; C]; P];
        for p in 0..P {
            for c in 0..C {
                let mut v = [0f32; LANES];
                // SAFETY: `v` is 8 writable f32s; storeu needs no alignment.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc[p][c]) };
                out[p][c] = hsum(v) + mins[p][c];
            }
        }
        out
    }
}

#[cfg(test)]
pub(super) mod tests;
