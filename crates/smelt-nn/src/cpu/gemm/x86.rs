//! The x86 register tiles and the 16 × 16 transposes that pack operands.
//! A tile's accumulators live in registers: a tile row is one 512-bit
//! register (16 rows a step of `k`) or two 256-bit ones (4 rows a pass).

use super::{MR, NR, Start, Tile};
use std::arch::x86_64::*;

/// Steps of `k` ahead whose row of B is fetched into L1 while a step is
/// summed: a panel streamed from L2 otherwise holds the tile to about
/// four fifths of its speed from L1. A prefetch past the panel's end
/// (the next panel, or nothing) reads no memory.
const PREFETCH: usize = 8;

/// The tile's first `R` rows: `R` accumulators.
#[target_feature(enable = "avx512f")]
pub fn tile_avx512<const R: usize>(tile: &mut Tile, start: Start, a: &[f32], b: &[f32]) {
    let mut acc = [_mm512_setzero_ps(); R];
    if start == Start::Tile {
        for (v, row) in acc.iter_mut().zip(tile.iter()) {
            // SAFETY: a row holds NR = 16 values.
            *v = unsafe { _mm512_loadu_ps(row.as_ptr()) };
        }
    }
    for (q, (ap, bp)) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).enumerate() {
        // SAFETY: bp holds NR = 16 values.
        let bv = unsafe { _mm512_loadu_ps(bp.as_ptr()) };
        let ahead = b.as_ptr().wrapping_add((q + PREFETCH) * NR);
        _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        for (v, &x) in acc.iter_mut().zip(ap) {
            *v = _mm512_fmadd_ps(_mm512_set1_ps(x), bv, *v);
        }
    }
    for (row, v) in tile.iter_mut().zip(acc) {
        // SAFETY: a row holds NR = 16 values.
        unsafe { _mm512_storeu_ps(row.as_mut_ptr(), v) };
    }
}

/// `dst[q·16 + r] = rows[r][q]` for `q` in whole squares of 16 (each
/// row as long as `dst` has steps); returns the steps done.
#[target_feature(enable = "avx512f")]
pub fn transpose_squares(rows: &[&[f32]; 16], dst: &mut [f32]) -> usize {
    let steps = (dst.len() / 16).min(rows[0].len());
    let squares = steps / 16;
    for sq in 0..squares {
        let q = sq * 16;
        // SAFETY: each row holds `steps ≥ q + 16` values.
        let r: [__m512; 16] =
            std::array::from_fn(|i| unsafe { _mm512_loadu_ps(rows[i][q..q + 16].as_ptr()) });
        // Pairs of rows interleaved, then fours: lane group L of u[4g + j]
        // holds column 4L + j of rows 4g..4g + 4.
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (r0, r1, r2, r3) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
            let (lo01, hi01) = (_mm512_unpacklo_ps(r0, r1), _mm512_unpackhi_ps(r0, r1));
            let (lo23, hi23) = (_mm512_unpacklo_ps(r2, r3), _mm512_unpackhi_ps(r2, r3));
            u[4 * g] = _mm512_shuffle_ps::<0x44>(lo01, lo23);
            u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(lo01, lo23);
            u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(hi01, hi23);
            u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(hi01, hi23);
        }
        // Lane groups gathered: column c of all 16 rows.
        let mut cols = [_mm512_setzero_ps(); 16];
        for j in 0..4 {
            for half in 0..2 {
                let (a, b) = (u[8 * half + j], u[8 * half + 4 + j]);
                let (even, odd) = (
                    _mm512_shuffle_f32x4::<0x88>(a, b),
                    _mm512_shuffle_f32x4::<0xDD>(a, b),
                );
                // even: [c j, c 8+j, c j, c 8+j] of rows (8·half + 0..4, 8·half + 4..8);
                // odd: the same of columns 4+j and 12+j.
                if half == 0 {
                    cols[j] = even;
                    cols[4 + j] = odd;
                } else {
                    let (e0, o0) = (cols[j], cols[4 + j]);
                    cols[j] = _mm512_shuffle_f32x4::<0x88>(e0, even);
                    cols[8 + j] = _mm512_shuffle_f32x4::<0xDD>(e0, even);
                    cols[4 + j] = _mm512_shuffle_f32x4::<0x88>(o0, odd);
                    cols[12 + j] = _mm512_shuffle_f32x4::<0xDD>(o0, odd);
                }
            }
        }
        for (c, v) in cols.iter().enumerate() {
            // SAFETY: `dst` holds `steps · 16` values, `q + c < steps`.
            unsafe { _mm512_storeu_ps(dst[(q + c) * 16..][..16].as_mut_ptr(), *v) };
        }
    }
    squares * 16
}

/// Rows a pass: 16 registers hold 4 rows of two 256-bit halves and B's
/// row; the rows' sums do not depend on each other, so passes over `k`
/// a group of rows at a time give the same bits as one.
const HALF: usize = 4;

#[target_feature(enable = "avx2,fma")]
pub fn tile_avx2(tile: &mut Tile, start: Start, rows: usize, a: &[f32], b: &[f32]) {
    for half in 0..rows.clamp(1, MR).div_ceil(HALF) {
        let rows = &mut tile[half * HALF..][..HALF];
        let mut acc = [[_mm256_setzero_ps(); 2]; HALF];
        if start == Start::Tile {
            for (v, row) in acc.iter_mut().zip(rows.iter()) {
                // SAFETY: a row holds NR = 16 values, two halves of 8.
                *v = unsafe {
                    [
                        _mm256_loadu_ps(row.as_ptr()),
                        _mm256_loadu_ps(row[8..].as_ptr()),
                    ]
                };
            }
        }
        for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            // SAFETY: bp holds NR = 16 values, two halves of 8.
            let bv = unsafe {
                [
                    _mm256_loadu_ps(bp.as_ptr()),
                    _mm256_loadu_ps(bp[8..].as_ptr()),
                ]
            };
            for (v, &x) in acc.iter_mut().zip(&ap[half * HALF..][..HALF]) {
                let xv = _mm256_set1_ps(x);
                v[0] = _mm256_fmadd_ps(xv, bv[0], v[0]);
                v[1] = _mm256_fmadd_ps(xv, bv[1], v[1]);
            }
        }
        for (row, v) in rows.iter_mut().zip(acc) {
            // SAFETY: a row holds NR = 16 values, two halves of 8.
            unsafe {
                _mm256_storeu_ps(row.as_mut_ptr(), v[0]);
                _mm256_storeu_ps(row[8..].as_mut_ptr(), v[1]);
            }
        }
    }
}
