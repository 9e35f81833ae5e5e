//! K-quant dot products (Q2_K..Q6_K weights with Q8_K activations) on the
//! GGUF blocks in place, in one of two f32 orders:
//! - [`dots`]: the way ggml's AVX2 `ggml_vec_dot_q*_K_q8_K` compute them,
//!   the same integers in the same 8 lanes, scaled and summed in the same
//!   f32 order, so results are bit for bit llama.cpp's where it takes that
//!   path. The exact mode and CPUs without AVX2 (decode and prefill).
//! - [`dots_in_gemmk_order`]: the same integers summed per super-block and
//!   scaled as [`super::gemmk`]'s prefill GEMM does, bit for bit its
//!   outputs. The fast mode's decode on AVX2, so that a row's result does
//!   not depend on how many rows share its matmul.
//!
//! Decode streams the weights from memory once, so both read them in
//! place. ggml's order, per super-block of 256 values, with lane `l` of a
//! 32-value chunk holding products `4l..4l+3`:
//!
//! ```text
//! sumi[l] = Σ_chunks sc(chunk, l) · Σ_{p=4l..4l+3} q[p] · x[p]     (exact integers)
//! d = x.d · f16(w.d);  acc[l] = fma(d, sumi[l], acc[l])
//! dot = pairwise sum of acc + the type's minimum term
//! ```
//!
//! Per type (q the value as stored, sc its sub-block scale, b the Q8_K
//! sums of 16 or 32):
//! - Q2_K: q in 0..4; first `acc[l] = fma(-x.d·dmin, m[2l]·b16[2l] + m[2l+1]·b16[2l+1], acc[l])`.
//! - Q3_K: q = low − 4·!high in -4..4, sc − 32.
//! - Q4_K: q in 0..16; 4 lanes `acc_m[l] = fma(-x.d·dmin, m[2l]·b32[2l] + m[2l+1]·b32[2l+1], acc_m[l])`,
//!   added pairwise at the end.
//! - Q5_K: q in 0..32; one `summs = fma(-x.d·dmin, Σ m·b32, summs)`.
//! - Q6_K: q in 0..64 less `32·(sc[2l]·b16[2l] + sc[2l+1]·b16[2l+1])` per lane.
//!
//! The portable functions here compute lane by lane what the AVX2 ones
//! ([`super::kdot_avx2`]) compute a vector at a time; tests hold them to
//! the same bits. The AVX-512 entry points take the AVX2 ones: decode is
//! bound by memory, and 512-bit K-quant dots measured slower.
//!
//! Legend: `nb = k/256` super-blocks per row.

use super::q8k::{Q8KRow, QK_K};
use super::simd::{LANES, Madd, f16_to_f32, hsum};
use crate::quant::GgmlType;

/// Whether matmuls with `dtype` weights take the Q8_K path.
pub fn has_path(dtype: GgmlType) -> bool {
    use GgmlType::*;
    matches!(dtype, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K)
}

/// `C` dot products of one Q8_K row with weight rows in their GGUF blocks,
/// each `nb` super-blocks of `dtype` (a type [`has_path`] accepts), in
/// ggml's order.
#[inline(always)]
pub fn dots<M: Madd, const C: usize>(dtype: GgmlType, x: Q8KRow, ws: [&[u8]; C]) -> [f32; C] {
    check_rows(dtype, x, &ws);
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C; the lengths are
        // checked above.
        return std::array::from_fn(|c| unsafe { super::kdot_avx2::dot(dtype, x, ws[c]) });
    }
    std::array::from_fn(|c| dot_portable::<M>(dtype, x, ws[c]))
}

/// [`dots`] in [`super::gemmk`]'s order: each equals the output gemmk
/// gives the pair, bit for bit, so a row's result does not depend on how
/// many rows share its matmul. Only where [`gemmk::has_kernel`] (AVX2).
///
/// [`gemmk::has_kernel`]: super::gemmk::has_kernel
#[inline(always)]
pub fn dots_in_gemmk_order<M: Madd, const C: usize>(
    dtype: GgmlType,
    x: Q8KRow,
    ws: [&[u8]; C],
) -> [f32; C] {
    check_rows(dtype, x, &ws);
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2, FMA and F16C; the lengths are
        // checked above.
        return unsafe { super::kdot_avx2::dots_in_gemmk_order(dtype, x, ws) };
    }
    unreachable!("kdot::dots_in_gemmk_order without gemmk::has_kernel")
}

/// Panics unless `x` and each of `ws` hold `x.d.len()` super-blocks.
#[inline(always)]
fn check_rows(dtype: GgmlType, x: Q8KRow, ws: &[&[u8]]) {
    let nb = x.d.len();
    assert!(
        x.qs.len() >= nb * QK_K
            && x.bsums16.len() >= nb * 16
            && x.bsums32.len() >= nb * 8
            && ws.iter().all(|w| w.len() >= nb * dtype.type_size()),
        "rows shorter than their blocks"
    );
}

/// One dot product, lane by lane (rows checked by the caller).
#[inline(always)]
pub fn dot_portable<M: Madd>(dtype: GgmlType, x: Q8KRow, w: &[u8]) -> f32 {
    match dtype {
        GgmlType::Q2_K => dot_q2_k::<M>(w, x),
        GgmlType::Q3_K => dot_q3_k::<M>(w, x),
        GgmlType::Q4_K => dot_q4_k::<M>(w, x),
        GgmlType::Q5_K => dot_q5_k::<M>(w, x),
        _ => dot_q6_k::<M>(w, x),
    }
}

/// The 8 lanes of a 32-value chunk: lane `l` sums products `4l..4l+3`.
/// Plain loops over fixed sizes, so they vectorize; `sdot` on aarch64's
/// `dotprod` (every type's q fits a byte: -4..64).
#[inline(always)]
fn lanes<M: Madd>(q: &[i32; 32], x: &[i8]) -> [i32; LANES] {
    let x = &x[..32];
    #[cfg(target_arch = "aarch64")]
    if M::DOTPROD {
        let w: [i8; 32] = std::array::from_fn(|p| q[p] as i8);
        let x: &[i8; 32] = x.try_into().expect("32 values");
        // SAFETY: `M::DOTPROD` holds only inside the `dotprod` entry
        // points, which run after the CPU reported it.
        return unsafe { super::neon::dot_lanes(&w, x) };
    }
    let mut out = [0i32; LANES];
    for l in 0..LANES {
        for t in 0..4 {
            out[l] += q[4 * l + t] * i32::from(x[4 * l + t]);
        }
    }
    out
}

/// Adds a chunk's lanes to `sumi`, its first half (lanes 0..4, values
/// 0..16) scaled by `lo`, the second by `hi`: sub-blocks of 16 (equal
/// scales for sub-blocks of 32).
#[inline(always)]
fn add_scaled(sumi: &mut [i32; LANES], lane: [i32; LANES], lo: i32, hi: i32) {
    for l in 0..LANES {
        sumi[l] += lane[l] * if l < 4 { lo } else { hi };
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Q4_K/Q5_K's 12 bytes of 6-bit scales and minimums as `[sc0..sc8,
/// m0..m8]`, four bytes at a time (ggml's `get_scale_min_k4` for all 8):
/// sub-blocks 0..4 keep the low 6 bits of bytes 0..4 (scales) and 4..8
/// (minimums); 4..8 take a nibble of bytes 8..12 and the top 2 bits of
/// bytes 0..4 or 4..8.
#[inline(always)]
pub fn scales_k4(b: &[u8]) -> [u8; 16] {
    let (lo, mid, hi) = (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8));
    let six = 0x3f3f_3f3f;
    let (nibble, top) = (0x0f0f_0f0f, 0x0303_0303);
    let words = [
        lo & six,
        (hi & nibble) | (((lo >> 6) & top) << 4),
        mid & six,
        ((hi >> 4) & nibble) | (((mid >> 6) & top) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Q3_K's 16 6-bit scales less their bias of 32 (see `quant::scale_q3_k`).
#[inline(always)]
pub fn scales_q3_k(b: &[u8]) -> [i32; 16] {
    let b: &[u8; 12] = b[..12].try_into().expect("12 bytes of scales");
    std::array::from_fn(|i| crate::quant::scale_q3_k(i, b))
}

/// `block_q2_K`: scales (16), qs (64), d, dmin.
fn dot_q2_k<M: Madd>(w: &[u8], x: Q8KRow) -> f32 {
    let mut acc = [0f32; LANES];
    for (i, blk) in w.chunks_exact(84).take(x.d.len()).enumerate() {
        let d = x.d[i] * f16_at(blk, 80);
        let dmin = -x.d[i] * f16_at(blk, 82);
        let (scales, qs) = (&blk[..16], &blk[16..80]);
        let b16 = &x.bsums16[16 * i..16 * i + 16];
        let m = |s: usize| i32::from(scales[s] >> 4) * i32::from(b16[s]);
        for (l, a) in acc.iter_mut().enumerate() {
            *a = M::madd(dmin, (m(2 * l) + m(2 * l + 1)) as f32, *a);
        }
        let mut sumi = [0i32; LANES];
        for j in 0..2 {
            for k in 0..4 {
                let q: [i32; 32] =
                    std::array::from_fn(|p| i32::from((qs[32 * j + p] >> (2 * k)) & 3));
                let xs = &x.qs[QK_K * i + 128 * j + 32 * k..];
                let sc = |s: usize| i32::from(scales[8 * j + 2 * k + s] & 15);
                add_scaled(&mut sumi, lanes::<M>(&q, xs), sc(0), sc(1));
            }
        }
        for l in 0..LANES {
            acc[l] = M::madd(d, sumi[l] as f32, acc[l]);
        }
    }
    hsum(acc)
}

/// `block_q3_K`: hmask (32), qs (64), scales (12), d.
fn dot_q3_k<M: Madd>(w: &[u8], x: Q8KRow) -> f32 {
    let mut acc = [0f32; LANES];
    for (i, blk) in w.chunks_exact(110).take(x.d.len()).enumerate() {
        let d = x.d[i] * f16_at(blk, 108);
        let (hmask, qs) = (&blk[..32], &blk[32..96]);
        let scales = scales_q3_k(&blk[96..108]);
        let mut sumi = [0i32; LANES];
        for j in 0..2 {
            for k in 0..4 {
                let bit = 4 * j + k;
                let q: [i32; 32] = std::array::from_fn(|p| {
                    let low = i32::from((qs[32 * j + p] >> (2 * k)) & 3);
                    low - if hmask[p] >> bit & 1 == 0 { 4 } else { 0 }
                });
                let xs = &x.qs[QK_K * i + 128 * j + 32 * k..];
                let s = 8 * j + 2 * k;
                add_scaled(&mut sumi, lanes::<M>(&q, xs), scales[s], scales[s + 1]);
            }
        }
        for l in 0..LANES {
            acc[l] = M::madd(d, sumi[l] as f32, acc[l]);
        }
    }
    hsum(acc)
}

/// `block_q4_K`: d, dmin, scales (12), qs (128).
fn dot_q4_k<M: Madd>(w: &[u8], x: Q8KRow) -> f32 {
    let mut acc = [0f32; LANES];
    let mut acc_m = [0f32; 4];
    for (i, blk) in w.chunks_exact(144).take(x.d.len()).enumerate() {
        let d = x.d[i] * f16_at(blk, 0);
        let dmin = -x.d[i] * f16_at(blk, 2);
        let sm = scales_k4(&blk[4..16]);
        let b32 = &x.bsums32[8 * i..8 * i + 8];
        let m = |s: usize| i32::from(sm[8 + s]) * i32::from(b32[s]);
        for (l, a) in acc_m.iter_mut().enumerate() {
            *a = M::madd(dmin, (m(2 * l) + m(2 * l + 1)) as f32, *a);
        }
        let qs = &blk[16..144];
        let mut sumi = [0i32; LANES];
        for j in 0..4 {
            for h in 0..2 {
                let q: [i32; 32] =
                    std::array::from_fn(|p| i32::from((qs[32 * j + p] >> (4 * h)) & 15));
                let xs = &x.qs[QK_K * i + 64 * j + 32 * h..];
                let sc = i32::from(sm[2 * j + h]);
                add_scaled(&mut sumi, lanes::<M>(&q, xs), sc, sc);
            }
        }
        for l in 0..LANES {
            acc[l] = M::madd(d, sumi[l] as f32, acc[l]);
        }
    }
    hsum(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// `block_q5_K`: d, dmin, scales (12), qh (32), qs (128).
fn dot_q5_k<M: Madd>(w: &[u8], x: Q8KRow) -> f32 {
    let mut acc = [0f32; LANES];
    let mut summs = 0f32;
    for (i, blk) in w.chunks_exact(176).take(x.d.len()).enumerate() {
        let d = x.d[i] * f16_at(blk, 0);
        let dmin = -x.d[i] * f16_at(blk, 2);
        let sm = scales_k4(&blk[4..16]);
        let b32 = &x.bsums32[8 * i..8 * i + 8];
        let mins: i32 = (0..8)
            .map(|s| i32::from(sm[8 + s]) * i32::from(b32[s]))
            .sum();
        summs = M::madd(dmin, mins as f32, summs);
        let (qh, qs) = (&blk[16..48], &blk[48..176]);
        let mut sumi = [0i32; LANES];
        for j in 0..4 {
            for h in 0..2 {
                let q: [i32; 32] = std::array::from_fn(|p| {
                    let low = (qs[32 * j + p] >> (4 * h)) & 15;
                    let high = (qh[p] >> (2 * j + h)) & 1;
                    i32::from(low | high << 4)
                });
                let xs = &x.qs[QK_K * i + 64 * j + 32 * h..];
                let sc = i32::from(sm[2 * j + h]);
                add_scaled(&mut sumi, lanes::<M>(&q, xs), sc, sc);
            }
        }
        for l in 0..LANES {
            acc[l] = M::madd(d, sumi[l] as f32, acc[l]);
        }
    }
    hsum(acc) + summs
}

/// `block_q6_K`: ql (128), qh (64), scales (16, signed), d.
fn dot_q6_k<M: Madd>(w: &[u8], x: Q8KRow) -> f32 {
    let mut acc = [0f32; LANES];
    for (i, blk) in w.chunks_exact(210).take(x.d.len()).enumerate() {
        let d = x.d[i] * f16_at(blk, 208);
        let (ql, qh) = (&blk[..128], &blk[128..192]);
        let sc = |s: usize| i32::from(blk[192 + s] as i8);
        let b16 = &x.bsums16[16 * i..16 * i + 16];
        let mut sumi = [0i32; LANES];
        for j in 0..2 {
            for k in 0..4 {
                let q: [i32; 32] = std::array::from_fn(|p| {
                    let low = (ql[64 * j + 32 * (k & 1) + p] >> (4 * (k / 2))) & 15;
                    let high = (qh[32 * j + p] >> (2 * k)) & 3;
                    i32::from(low | high << 4)
                });
                let xs = &x.qs[QK_K * i + 128 * j + 32 * k..];
                let s = 8 * j + 2 * k;
                add_scaled(&mut sumi, lanes::<M>(&q, xs), sc(s), sc(s + 1));
            }
        }
        for l in 0..LANES {
            let off = 32
                * (sc(2 * l) * i32::from(b16[2 * l]) + sc(2 * l + 1) * i32::from(b16[2 * l + 1]));
            acc[l] = M::madd(d, (sumi[l] - off) as f32, acc[l]);
        }
    }
    hsum(acc)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::backend::cpu::q8::tests::bytes;
    use crate::backend::cpu::q8k::Q8KActs;
    use crate::backend::cpu::simd::{Fused, Isa};
    use crate::quant;

    pub const TYPES: [GgmlType; 5] = [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// `m` rows of `k` random `dtype` values: random quants and scales,
    /// small finite super-block scales (and minimums).
    pub fn weights(dtype: GgmlType, m: usize, k: usize, seed: u64) -> Vec<u8> {
        let size = dtype.type_size();
        let mut w = bytes(seed, m * k / QK_K * size);
        let at: &[usize] = match dtype {
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q6_K => &[208],
            _ => &[0, 2],
        };
        for (i, blk) in w.chunks_exact_mut(size).enumerate() {
            for (j, &a) in at.iter().enumerate() {
                let v = ((i * 7 + j * 3) % 11) as f32 * 0.0007 + 0.0001;
                blk[a..a + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        w
    }

    /// `n` rows of `k` activations of a few magnitudes.
    pub fn acts(n: usize, k: usize, seed: u64) -> Vec<f32> {
        bytes(seed, n * k)
            .iter()
            .enumerate()
            .map(|(i, &b)| (b as i8) as f32 * 0.01 * (1 + i % 5) as f32)
            .collect()
    }

    /// `Σ w·x` in f64 over the dequantized weights and the Q8_K
    /// activations (`x.d · q`), and the sum of the terms' magnitudes.
    pub fn exact_dot(dtype: GgmlType, w: &[u8], x: Q8KRow) -> (f64, f64) {
        let k = x.qs.len();
        let mut wf = vec![0f32; k];
        quant::dequantize_row(dtype, w, &mut wf).unwrap();
        let mut sum = 0f64;
        let mut scale = 0f64;
        for (e, &wv) in wf.iter().enumerate() {
            let xv = f64::from(x.d[e / QK_K]) * f64::from(x.qs[e]);
            sum += f64::from(wv) * xv;
            scale += (f64::from(wv) * xv).abs();
        }
        (sum, scale)
    }

    /// Every type's dot products are the exact sums to within f32
    /// rounding (relative 1e-5 of the terms' magnitudes), on each
    /// instruction set, and the AVX2 kernels give the portable ones' bits.
    #[test]
    fn k_dots_match_exact_sums_and_each_other() {
        const TOL: f64 = 1e-5;
        for (t, dtype) in TYPES.into_iter().enumerate() {
            for nb in [1, 2, 5] {
                let (m, k) = (6, nb * QK_K);
                let w = weights(dtype, m, k, 3 + t as u64);
                let mut qa = Q8KActs::default();
                qa.quantize(Isa::Baseline, &acts(2, k, 40 + t as u64));
                let rb = w.len() / m;
                for i in 0..2 {
                    let x = qa.row(i, k);
                    for j in 0..m {
                        let row = &w[j * rb..(j + 1) * rb];
                        let (want, scale) = exact_dot(dtype, row, x);
                        let portable = dot_portable::<Fused>(dtype, x, row);
                        let err = (f64::from(portable) - want).abs();
                        assert!(
                            err <= TOL * scale,
                            "{dtype:?} nb {nb} row {j}: {portable} vs {want} (scale {scale})"
                        );
                        for isa in Isa::available() {
                            let got = dots_on(isa, dtype, x, [row])[0];
                            if isa != Isa::Baseline {
                                assert_eq!(got.to_bits(), portable.to_bits(), "{dtype:?} {isa:?}");
                            }
                            let err = (f64::from(got) - want).abs();
                            assert!(err <= TOL * scale, "{dtype:?} {isa:?}: {got} vs {want}");
                        }
                    }
                }
            }
        }
    }

    /// On AVX2 and AVX-512, [`dots_in_gemmk_order`] gives every pair the
    /// bits [`gemmk::group`] gives it, 4 weight rows at a time and one:
    /// each type, 1 and 3 super-blocks, weight rows past a group of 8, and
    /// activation rows that gemmk takes 4 at a time and one.
    ///
    /// [`gemmk::group`]: super::super::gemmk::group
    #[test]
    fn gemmk_order_gives_gemmks_bits() {
        use crate::backend::cpu::simd::{Avx2Fma, Avx512Vnni};
        if Isa::available().contains(&Isa::Avx2) {
            gemmk_order_case::<Avx2Fma>();
        }
        if Isa::available().contains(&Isa::Avx512Vnni) {
            gemmk_order_case::<Avx512Vnni>();
        }
    }

    /// [`gemmk_order_gives_gemmks_bits`] with `M`'s kernels.
    fn gemmk_order_case<M: Madd>() {
        use crate::backend::cpu::gemmk::{self, KInterleaved};
        let isa = std::any::type_name::<M>();
        let (m, n) = (11, 5);
        for (t, dtype) in TYPES.into_iter().enumerate() {
            for k in [QK_K, 3 * QK_K] {
                let seed = 7 * t as u64 + k as u64;
                let w = weights(dtype, m, k, seed);
                let rb = w.len() / m;
                let row = |j: usize| &w[j * rb..(j + 1) * rb];
                let mut qa = Q8KActs::default();
                qa.quantize(Isa::Avx2, &acts(n, k, seed + 1));
                let mut kw = KInterleaved::default();
                kw.unpack::<M>(dtype, &w, k / QK_K);
                let mut want = vec![f32::NAN; kw.groups * n * gemmk::ROWS];
                for (g, out) in want.chunks_exact_mut(n * gemmk::ROWS).enumerate() {
                    gemmk::group::<M>(&kw, g, &qa, k, 0..n, out);
                }
                // gemmk's output of activation row i, weight row j.
                let want = |i: usize, j: usize| {
                    let (g, c) = (j / gemmk::ROWS, j % gemmk::ROWS);
                    want[(g * n + i) * gemmk::ROWS + c]
                };
                for i in 0..n {
                    let x = qa.row(i, k);
                    for j in 0..m {
                        let one = dots_in_gemmk_order::<M, 1>(dtype, x, [row(j)])[0];
                        assert_eq!(
                            one.to_bits(),
                            want(i, j).to_bits(),
                            "{isa} {dtype:?} k {k} row {i}·{j}: {one} vs gemmk's {}",
                            want(i, j)
                        );
                    }
                    for j in (0..m - 3).step_by(4) {
                        let four = dots_in_gemmk_order::<M, 4>(
                            dtype,
                            x,
                            [row(j), row(j + 1), row(j + 2), row(j + 3)],
                        );
                        for (c, got) in four.iter().enumerate() {
                            assert_eq!(
                                got.to_bits(),
                                want(i, j + c).to_bits(),
                                "{isa} {dtype:?} k {k} row {i}·{}, 4 at a time",
                                j + c
                            );
                        }
                    }
                }
            }
        }
    }

    crate::backend::cpu::simd::multiversion! {
        fn dots_kernel(dtype: GgmlType, x: Q8KRow, ws: [&[u8]; 1]) -> [f32; 1] = dots_generic;
    }

    #[inline(always)]
    fn dots_generic<M: Madd>(dtype: GgmlType, x: Q8KRow, ws: [&[u8]; 1]) -> [f32; 1] {
        dots::<M, 1>(dtype, x, ws)
    }

    pub fn dots_on(isa: Isa, dtype: GgmlType, x: Q8KRow, ws: [&[u8]; 1]) -> [f32; 1] {
        dots_kernel(isa, dtype, x, ws)
    }
}
