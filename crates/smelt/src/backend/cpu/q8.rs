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

use super::simd::{LANES, Madd, hsum};
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
    pub fn quantize(&mut self, x: &[f32]) {
        let nb = x.len() / QK8;
        self.qs.resize(x.len(), 0);
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
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
        let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        for (i, (blk, q)) in src
            .chunks_exact(bytes)
            .zip(self.qs.chunks_exact_mut(QK8))
            .enumerate()
        {
            self.d[i] = f16_at(blk, 0);
            match dtype {
                // Low nibbles are values 0..16, high nibbles 16..32.
                GgmlType::Q4_0 | GgmlType::Q4_1 => {
                    let (off, qs) = if dtype == GgmlType::Q4_0 {
                        (8, &blk[2..18])
                    } else {
                        self.m[i] = f16_at(blk, 2);
                        (0, &blk[4..20])
                    };
                    let (lo, hi) = q.split_at_mut(16);
                    for j in 0..16 {
                        lo[j] = (qs[j] & 15) as i8 - off;
                        hi[j] = (qs[j] >> 4) as i8 - off;
                    }
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

/// The 8 integer lanes of one block: lane `l` sums products `4l..4l+3`.
#[inline(always)]
fn lanes(w: &[i8], x: &[i8]) -> [f32; LANES] {
    let (w, x) = (&w[..QK8], &x[..QK8]);
    std::array::from_fn(|l| {
        let mut s = 0i32;
        for t in 0..4 {
            s += i32::from(w[4 * l + t]) * i32::from(x[4 * l + t]);
        }
        // At most 4 · 127 · 128: exact in f32.
        s as f32
    })
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
    std::array::from_fn(|r| std::array::from_fn(|c| hsum(acc[r][c]) + mins[r][c]))
}
