//! Prefill matmuls of K-quant weights (Q2_K..Q6_K) on Q8_K activations, 8
//! weight rows at a time (AVX2): the rows are unpacked interleaved, one
//! unsigned byte per value, so one `maddubs` of a broadcast of 4
//! activation quants against 4 values of 8 rows gives each row's products
//! in its own 32-bit lane, as [`super::gemm8`] does for 32-value blocks.
//!
//! Every type becomes the same sum. With `u` the value as an unsigned
//! integer, `sc` and `mm` per sub-block (of 16 or 32 values) small integers
//! and `b` the Q8_K sums of a sub-block's quants:
//!
//! ```text
//! value = d·sc·u − dmin·mm                (Q2_K, Q4_K, Q5_K: ggml's scale and minimum)
//! value = d·sc·(u − o) = d·sc·u − d·(o·sc) (Q3_K: u = low + 4·high, o = 4; Q6_K: o = 32)
//! dot_superblock = x.d · (d·S − dmin·M)   S = Σ_sub sc·Σ u·x_q,  M = Σ_sub mm·b
//! ```
//!
//! `S` and `M` are exact integers (`S − M` one sum where `dmin = d`); only
//! the f32 order differs from ggml's (which [`super::kdot::dots`] keeps for
//! the exact mode), as in `gemm8`. Decode takes this order too
//! ([`super::kdot::dots_in_gemmk_order`]).
//!
//! Per word, `maddubs` pairs stay in i16 for a run of words (`span`: as
//! many as keep `2·span·u_max·127` within i16), then one `madd` against
//! the sub-block's scales adds them into i32.
//!
//! Layout of [`KInterleaved`], per group of 8 rows and super-block: 64 words
//! of 4 values per row (word `8t + c`: values `4t..4t+4` of row `c`); per
//! sub-block the 8 rows' scales, each in both i16 halves of its i32; per
//! pair of sub-blocks the 8 rows' minimums, as i16 pairs; the 8 rows' `d`
//! and `dmin`. Rows past the last are zeros.
//!
//! Legend: `k` values per row, `nb = k/256` super-blocks per row.

use super::kdot::{scales_k4, scales_q3_k};
use std::ops::Range;

use super::q8k::{Q8KActs, QK_K};
use super::simd::{Madd, f16_to_f32};
use crate::quant::GgmlType;

/// Weight rows interleaved in one group.
pub const ROWS: usize = 8;
/// Words of 4 values per super-block.
const WORDS: usize = QK_K / 4;
/// Most sub-blocks per super-block.
const MAX_SUBS: usize = 16;

/// How a type's super-block splits (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Shape {
    /// Values per sub-block: 16 or 32.
    pub sub: usize,
    /// Words whose pairs are summed in i16 before the scales.
    pub span: usize,
    /// Whether the minimum is `d`'s (`S − M` in integers).
    pub fold: bool,
}

impl Shape {
    pub fn of(dtype: GgmlType) -> Shape {
        let (sub, span, fold) = match dtype {
            GgmlType::Q2_K => (16, 4, false),
            GgmlType::Q3_K => (16, 4, true),
            GgmlType::Q4_K => (32, 8, false),
            GgmlType::Q5_K => (32, 4, false),
            _ => (16, 2, true),
        };
        Shape { sub, span, fold }
    }

    fn subs(self) -> usize {
        QK_K / self.sub
    }
}

/// Weight rows unpacked interleaved (see the module docs).
#[derive(Default)]
pub struct KInterleaved {
    /// `groups × nb × 64 × 8` words of 4 unsigned values.
    pub qs: Vec<u32>,
    /// `groups × nb × subs × 8` scales, `sc · 0x0001_0001`.
    pub scales: Vec<i32>,
    /// `groups × nb × subs/2 × 8` minimum pairs `mm[2j] | mm[2j+1] << 16`.
    pub mins: Vec<i32>,
    /// `groups × nb × 8` super-block scales and minimum scales.
    pub d: Vec<f32>,
    pub dmin: Vec<f32>,
    pub nb: usize,
    pub groups: usize,
    pub shape: Option<Shape>,
}

/// One row's super-block's scales in the integers of the module docs.
#[derive(Default)]
struct Scales {
    sc: [i16; MAX_SUBS],
    mm: [i16; MAX_SUBS],
    d: f32,
    dmin: f32,
}

impl KInterleaved {
    /// Unpacks `src`, whole rows of `nb` super-blocks of `dtype`, into
    /// groups of 8 rows.
    #[inline(always)]
    pub fn unpack<M: Madd>(&mut self, dtype: GgmlType, src: &[u8], nb: usize) {
        let shape = Shape::of(dtype);
        let size = dtype.type_size();
        let rows = src.len() / (nb * size).max(1);
        self.nb = nb;
        self.groups = rows.div_ceil(ROWS);
        self.shape = Some(shape);
        let blocks = self.groups * nb;
        self.qs.resize(blocks * WORDS * ROWS, 0);
        self.scales.resize(blocks * shape.subs() * ROWS, 0);
        self.mins.resize(blocks * shape.subs() / 2 * ROWS, 0);
        self.d.resize(blocks * ROWS, 0.0);
        self.dmin.resize(blocks * ROWS, 0.0);
        for g in 0..self.groups {
            for b in 0..nb {
                let base = g * nb + b;
                // Row c's block, or none for the padding rows.
                let blk: [Option<&[u8]>; ROWS] = std::array::from_fn(|c| {
                    let r = g * ROWS + c;
                    (r < rows).then(|| &src[(r * nb + b) * size..][..size])
                });
                for (c, blk) in blk.iter().enumerate() {
                    let mut one = Scales::default();
                    if let Some(blk) = blk {
                        scales_of(dtype, blk, &mut one);
                    }
                    self.store_scales(base, c, shape, &one);
                }
                let q = &mut self.qs[base * WORDS * ROWS..][..WORDS * ROWS];
                #[cfg(target_arch = "x86_64")]
                if M::AVX2 {
                    // SAFETY: `M::AVX2` holds only inside the AVX2 entry
                    // points, which run after the CPU reported AVX2.
                    unsafe { avx2::store_values(dtype, blk, q) };
                    continue;
                }
                let mut u = [0u8; QK_K];
                for (c, blk) in blk.iter().enumerate() {
                    match blk {
                        Some(blk) => values_of(dtype, blk, &mut u),
                        None => u.fill(0),
                    }
                    for (t, v) in u.chunks_exact(4).enumerate() {
                        q[t * ROWS + c] = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                    }
                }
            }
        }
    }

    /// Writes row `c`'s scales of super-block `base` (group × nb + block).
    #[inline(always)]
    fn store_scales(&mut self, base: usize, c: usize, shape: Shape, one: &Scales) {
        let subs = shape.subs();
        let sc = &mut self.scales[base * subs * ROWS..][..subs * ROWS];
        for j in 0..subs {
            sc[j * ROWS + c] = (u32::from(one.sc[j] as u16) * 0x0001_0001) as i32;
        }
        let mins = &mut self.mins[base * subs / 2 * ROWS..][..subs / 2 * ROWS];
        for j in 0..subs / 2 {
            let pair = u32::from(one.mm[2 * j] as u16) | u32::from(one.mm[2 * j + 1] as u16) << 16;
            mins[j * ROWS + c] = pair as i32;
        }
        self.d[base * ROWS + c] = one.d;
        self.dmin[base * ROWS + c] = one.dmin;
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// A super-block's values of `dtype` as unsigned integers, in value order
/// (the element order of `quant::kquants`).
#[inline(always)]
fn values_of(dtype: GgmlType, blk: &[u8], u: &mut [u8; QK_K]) {
    match dtype {
        GgmlType::Q2_K => {
            let qs = &blk[16..80];
            for (e, u) in u.iter_mut().enumerate() {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                *u = (qs[32 * n + l] >> (2 * j)) & 3;
            }
        }
        GgmlType::Q3_K => {
            let (hmask, qs) = (&blk[..32], &blk[32..96]);
            for (e, u) in u.iter_mut().enumerate() {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                let low = (qs[32 * n + l] >> (2 * j)) & 3;
                let high = (hmask[l] >> (4 * n + j)) & 1;
                *u = low | high << 2;
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let five = dtype == GgmlType::Q5_K;
            let qs = if five { &blk[48..176] } else { &blk[16..144] };
            for (e, u) in u.iter_mut().enumerate() {
                let (n, h, l) = (e / 64, e % 64 / 32, e % 32);
                let low = (qs[32 * n + l] >> (4 * h)) & 15;
                let high = if five {
                    (blk[16 + l] >> (2 * n + h)) & 1
                } else {
                    0
                };
                *u = low | high << 4;
            }
        }
        _ => {
            let (ql, qh) = (&blk[..128], &blk[128..192]);
            for (e, u) in u.iter_mut().enumerate() {
                let (n, k, l) = (e / 128, e % 128 / 32, e % 32);
                let low = (ql[64 * n + l + 32 * (k & 1)] >> (4 * (k / 2))) & 15;
                let high = (qh[32 * n + l] >> (2 * k)) & 3;
                *u = low | high << 4;
            }
        }
    }
}

/// A super-block's sub-block scales, minimums (see the module docs) and
/// super-block scales.
#[inline(always)]
fn scales_of(dtype: GgmlType, blk: &[u8], out: &mut Scales) {
    match dtype {
        GgmlType::Q2_K => {
            for (s, &b) in blk[..16].iter().enumerate() {
                out.sc[s] = i16::from(b & 15);
                out.mm[s] = i16::from(b >> 4);
            }
            (out.d, out.dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        }
        GgmlType::Q3_K => {
            let sc = scales_q3_k(&blk[96..108]);
            for (s, &v) in sc.iter().enumerate() {
                out.sc[s] = v as i16;
                out.mm[s] = 4 * v as i16;
            }
            (out.d, out.dmin) = (f16_at(blk, 108), f16_at(blk, 108));
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let sm = scales_k4(&blk[4..16]);
            for s in 0..8 {
                out.sc[s] = i16::from(sm[s]);
                out.mm[s] = i16::from(sm[8 + s]);
            }
            (out.d, out.dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        }
        _ => {
            for s in 0..16 {
                let sc = i16::from(blk[192 + s] as i8);
                out.sc[s] = sc;
                out.mm[s] = 32 * sc;
            }
            (out.d, out.dmin) = (f16_at(blk, 208), f16_at(blk, 208));
        }
    }
}

/// Whether [`rows8`] has a kernel for this entry point (AVX2 only; the
/// others keep [`super::kdot`]'s dot products).
#[inline(always)]
pub fn has_kernel<M: Madd>() -> bool {
    cfg!(target_arch = "x86_64") && M::AVX2
}

/// Activation rows `rows` of `x` (rows of `k` values) against group `g`
/// of `w`: 8 outputs per row (the padding rows' too) into `out`, row after
/// row. One call per group, so the group's weights stay in L1 while the
/// rows pass. Only when [`has_kernel`].
#[inline(always)]
pub fn group<M: Madd>(
    w: &KInterleaved,
    g: usize,
    x: &Q8KActs,
    k: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if M::AVX512 {
        let shape = w.shape.expect("unpacked");
        use avx2::group_vnni as run;
        // SAFETY: `M::AVX512` holds only inside the AVX-512 entry points,
        // which run after the CPU reported AVX2, FMA, F16C and AVX-512 F,
        // BW, VL and VNNI.
        return unsafe {
            match (shape.sub, shape.fold) {
                (16, false) => run::<16, false>(w, g, x, k, rows, out),
                (16, true) => run::<16, true>(w, g, x, k, rows, out),
                _ => run::<32, false>(w, g, x, k, rows, out),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        let shape = w.shape.expect("unpacked");
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C.
        return unsafe {
            match (shape.sub, shape.span, shape.fold) {
                (16, 4, false) => avx2::group::<16, 4, false>(w, g, x, k, rows, out),
                (16, 4, true) => avx2::group::<16, 4, true>(w, g, x, k, rows, out),
                (32, 8, false) => avx2::group::<32, 8, false>(w, g, x, k, rows, out),
                (32, 4, false) => avx2::group::<32, 4, false>(w, g, x, k, rows, out),
                _ => avx2::group::<16, 2, true>(w, g, x, k, rows, out),
            }
        };
    }
    let _ = (w, g, x, k, rows, out);
    unreachable!("gemmk::group without has_kernel")
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use std::ops::Range;

    use super::{GgmlType, KInterleaved, Q8KActs, QK_K, ROWS, WORDS};
    use crate::backend::cpu::gemm8::avx2::transpose8;

    /// The 8 rows' values of one super-block (`None`: a padding row of
    /// zeros) into `q`, the group's 64 × 8 words: each row's values in
    /// value order, 32 a vector ([`values`]), then transposed 8 words
    /// at a time.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn store_values(dtype: GgmlType, blk: [Option<&[u8]>; ROWS], q: &mut [u32]) {
        assert!(
            q.len() >= WORDS * ROWS && blk.iter().flatten().all(|b| b.len() >= dtype.type_size()),
            "blocks shorter than their type"
        );
        let rows: [[__m256i; 8]; ROWS] = std::array::from_fn(|c| match blk[c] {
            // SAFETY: the block holds its type's bytes (asserted above).
            Some(b) => unsafe { values(dtype, b.as_ptr()) },
            None => [_mm256_setzero_si256(); 8],
        });
        for v in 0..8 {
            let words = transpose8(rows.map(|r| r[v]));
            for (t, w) in words.into_iter().enumerate() {
                // SAFETY: word 8v + t < 64 of the 64 × 8 (asserted above);
                // storeu needs no alignment.
                unsafe { _mm256_storeu_si256(q.as_mut_ptr().add((8 * v + t) * ROWS).cast(), w) };
            }
        }
    }

    /// [`super::values_of`] 32 values a vector.
    ///
    /// # Safety
    /// `blk` points to a whole block of `dtype`; compiled with AVX2.
    #[inline(always)]
    unsafe fn values(dtype: GgmlType, blk: *const u8) -> [__m256i; 8] {
        // SAFETY: every load is 32 bytes inside the block (the caller's
        // promise); loadu needs no alignment.
        unsafe {
            let load = |at: usize| _mm256_loadu_si256(blk.add(at).cast());
            let byte = _mm256_set1_epi8;
            // Bits `shift..shift + width` of each byte.
            let field = |v: __m256i, shift: i32, mask: i8| {
                _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), byte(mask))
            };
            // `value` where bit `bit` of the byte is set, else 0.
            let flag = |v: __m256i, bit: usize, value: i8| {
                let b = byte(1 << bit);
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, b), b), byte(value))
            };
            match dtype {
                GgmlType::Q2_K => std::array::from_fn(|i| {
                    let (n, j) = (i / 4, i % 4);
                    field(load(16 + 32 * n), 2 * j as i32, 3)
                }),
                GgmlType::Q3_K => {
                    let hmask = load(0);
                    std::array::from_fn(|i| {
                        let (n, j) = (i / 4, i % 4);
                        let low = field(load(32 + 32 * n), 2 * j as i32, 3);
                        _mm256_or_si256(low, flag(hmask, 4 * n + j, 4))
                    })
                }
                GgmlType::Q4_K => std::array::from_fn(|i| {
                    let (n, h) = (i / 2, i % 2);
                    field(load(16 + 32 * n), 4 * h as i32, 15)
                }),
                GgmlType::Q5_K => {
                    let qh = load(16);
                    std::array::from_fn(|i| {
                        let (n, h) = (i / 2, i % 2);
                        let low = field(load(48 + 32 * n), 4 * h as i32, 15);
                        _mm256_or_si256(low, flag(qh, 2 * n + h, 16))
                    })
                }
                _ => std::array::from_fn(|i| {
                    let (n, k) = (i / 4, i % 4);
                    let low = field(load(64 * n + 32 * (k & 1)), 4 * (k / 2) as i32, 15);
                    let high = field(load(128 + 32 * n), 2 * k as i32, 3);
                    _mm256_or_si256(low, _mm256_slli_epi16::<4>(high))
                }),
            }
        }
    }

    /// [`super::group`]: the rows 4 at a time ([`rows_of`]), then one at a
    /// time.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn group<const SUB: usize, const SPAN: usize, const FOLD: bool>(
        w: &KInterleaved,
        g: usize,
        x: &Q8KActs,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        // SAFETY: as the caller promises.
        unsafe { group_of::<SUB, SPAN, FOLD, false>(w, g, x, k, rows, out) }
    }

    /// [`group`] with the integer dot products on AVX-512 VNNI's
    /// `vpdpbusd` (256 bits wide): a sub-block's products summed in i32,
    /// so no i16 runs (`SPAN`).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and AVX-512 F, BW, VL and VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn group_vnni<const SUB: usize, const FOLD: bool>(
        w: &KInterleaved,
        g: usize,
        x: &Q8KActs,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        // SAFETY: as the caller promises.
        unsafe { group_of::<SUB, 1, FOLD, true>(w, g, x, k, rows, out) }
    }

    /// [`group`]'s body, inlined into the entry point's instruction set.
    ///
    /// # Safety
    /// As [`group`]'s, with AVX-512 VNNI too where `VNNI`.
    #[inline(always)]
    unsafe fn group_of<const SUB: usize, const SPAN: usize, const FOLD: bool, const VNNI: bool>(
        w: &KInterleaved,
        g: usize,
        x: &Q8KActs,
        k: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let nb = w.nb;
        let subs = QK_K / SUB;
        let blocks = w.groups * nb;
        assert!(
            g < w.groups
                && nb * QK_K == k
                && w.qs.len() >= blocks * WORDS * ROWS
                && w.scales.len() >= blocks * subs * ROWS
                && w.mins.len() >= blocks * subs / 2 * ROWS
                && w.d.len() >= blocks * ROWS
                && w.dmin.len() >= blocks * ROWS
                && x.qs.len() >= rows.end * k
                && x.d.len() >= rows.end * nb
                && x.bsums16.len() >= rows.end * nb * 16
                && x.bsums32.len() >= rows.end * nb * 8
                && out.len() >= rows.len() * ROWS,
            "rows shorter than their blocks"
        );
        // Row i's arrays (inside the asserted lengths).
        let row = |i: usize| XPtr {
            qs: x.qs.as_ptr().wrapping_add(i * k),
            d: x.d.as_ptr().wrapping_add(i * nb),
            sums: if SUB == 16 {
                x.bsums16.as_ptr().wrapping_add(i * nb * 16)
            } else {
                x.bsums32.as_ptr().wrapping_add(i * nb * 8)
            },
        };
        let mut i = rows.start;
        while i < rows.end {
            let o = out.as_mut_ptr().wrapping_add((i - rows.start) * ROWS);
            // SAFETY: rows i.. < rows.end and their outputs, as asserted.
            if rows.end - i >= 4 {
                let xs = [row(i), row(i + 1), row(i + 2), row(i + 3)];
                unsafe { rows_of::<4, SUB, SPAN, FOLD, VNNI>(w, g, xs, o) };
                i += 4;
            } else {
                unsafe { rows_of::<1, SUB, SPAN, FOLD, VNNI>(w, g, [row(i)], o) };
                i += 1;
            }
        }
    }

    /// One activation row's arrays: quants, scales, and the sums of its
    /// sub-blocks (of 16 or 32, as the weights').
    #[derive(Clone, Copy)]
    struct XPtr {
        qs: *const i8,
        d: *const f32,
        sums: *const i16,
    }

    /// Per super-block: the minimums' sum `M` (a `madd` of the 8 rows'
    /// pairs against each pair of activation sums); then per word the 8
    /// rows' values loaded once and each activation row's 4 quants
    /// broadcast against them (`maddubs`: its 2 pair sums per row), added
    /// in i16 for `SPAN` words, then `madd` with the sub-block's scales
    /// into `S`; then one conversion and `fma` per activation row (two
    /// where `dmin` is not `d`). The `P` rows' 8 outputs go to `out`, row
    /// after row. With `VNNI`, one `vpdpbusd` a word sums each row's 4
    /// products into i32 for the whole sub-block, then one `mullo` by its
    /// scales: the same integers.
    ///
    /// # Safety
    /// The rows hold group `g`'s `nb` super-blocks and `out` `P · 8`
    /// floats; compiled with AVX2 and FMA, and AVX-512 VL and VNNI where
    /// `VNNI`.
    #[inline(always)]
    unsafe fn rows_of<
        const P: usize,
        const SUB: usize,
        const SPAN: usize,
        const FOLD: bool,
        const VNNI: bool,
    >(
        w: &KInterleaved,
        g: usize,
        xs: [XPtr; P],
        out: *mut f32,
    ) {
        let nb = w.nb;
        let subs = QK_K / SUB;
        // SAFETY: compiled with AVX2 (the caller's promise).
        let mut acc = unsafe { [_mm256_setzero_ps(); P] };
        for b in 0..nb {
            let base = g * nb + b;
            // SAFETY (every read below): super-block `base` of the asserted
            // arrays, and block b < nb of each activation row; loadu and
            // read_unaligned need no alignment. The VNNI instruction runs
            // only where `VNNI`, set only in an entry point compiled with it.
            unsafe {
                let wq = w.qs.as_ptr().add(base * WORDS * ROWS);
                let wsc = w.scales.as_ptr().add(base * subs * ROWS);
                let wmin = w.mins.as_ptr().add(base * subs / 2 * ROWS);
                let per = if SUB == 16 { 16 } else { 8 };
                let sums: [*const i16; P] = std::array::from_fn(|p| xs[p].sums.add(per * b));
                let dx: [__m256; P] = std::array::from_fn(|p| _mm256_set1_ps(*xs[p].d.add(b)));
                let mut s = [_mm256_setzero_si256(); P];
                for j in 0..subs / 2 {
                    let mv = _mm256_loadu_si256(wmin.add(j * ROWS).cast());
                    for p in 0..P {
                        let pair =
                            _mm256_set1_epi32(sums[p].add(2 * j).cast::<i32>().read_unaligned());
                        s[p] = _mm256_add_epi32(s[p], _mm256_madd_epi16(mv, pair));
                    }
                }
                if FOLD {
                    for v in &mut s {
                        *v = _mm256_sub_epi32(_mm256_setzero_si256(), *v);
                    }
                } else {
                    let dmin = _mm256_loadu_ps(w.dmin.as_ptr().add(base * ROWS));
                    for p in 0..P {
                        let m = _mm256_mul_ps(dmin, dx[p]);
                        acc[p] = _mm256_fnmadd_ps(m, _mm256_cvtepi32_ps(s[p]), acc[p]);
                        s[p] = _mm256_setzero_si256();
                    }
                }
                let xq: [*const i8; P] = std::array::from_fn(|p| xs[p].qs.add(QK_K * b));
                for j in 0..subs {
                    let sc = _mm256_loadu_si256(wsc.add(j * ROWS).cast());
                    if VNNI {
                        // Each row's scale is in both i16 halves of its i32.
                        let sc32 = _mm256_srai_epi32::<16>(sc);
                        let mut run = [_mm256_setzero_si256(); P];
                        for t in 0..SUB / 4 {
                            let word = j * SUB / 4 + t;
                            let q = _mm256_loadu_si256(wq.add(word * ROWS).cast());
                            for p in 0..P {
                                let x4 = xq[p].add(4 * word).cast::<i32>().read_unaligned();
                                run[p] = crate::backend::cpu::vnni::dpbusd(
                                    run[p],
                                    q,
                                    _mm256_set1_epi32(x4),
                                );
                            }
                        }
                        for p in 0..P {
                            s[p] = _mm256_add_epi32(s[p], _mm256_mullo_epi32(run[p], sc32));
                        }
                        continue;
                    }
                    for r in 0..SUB / 4 / SPAN {
                        let mut run = [_mm256_setzero_si256(); P];
                        for t in 0..SPAN {
                            let word = j * SUB / 4 + r * SPAN + t;
                            let q = _mm256_loadu_si256(wq.add(word * ROWS).cast());
                            for p in 0..P {
                                let x4 = xq[p].add(4 * word).cast::<i32>().read_unaligned();
                                let pairs = _mm256_maddubs_epi16(q, _mm256_set1_epi32(x4));
                                run[p] = if t == 0 {
                                    pairs
                                } else {
                                    _mm256_add_epi16(run[p], pairs)
                                };
                            }
                        }
                        for p in 0..P {
                            s[p] = _mm256_add_epi32(s[p], _mm256_madd_epi16(run[p], sc));
                        }
                    }
                }
                let d = _mm256_loadu_ps(w.d.as_ptr().add(base * ROWS));
                for p in 0..P {
                    acc[p] =
                        _mm256_fmadd_ps(_mm256_mul_ps(d, dx[p]), _mm256_cvtepi32_ps(s[p]), acc[p]);
                }
            }
        }
        for (p, acc) in acc.iter().enumerate() {
            // SAFETY: `out` holds P · 8 floats (the caller's promise).
            unsafe { _mm256_storeu_ps(out.add(p * ROWS), *acc) };
        }
    }
}

#[cfg(test)]
mod tests;
