use std::sync::Mutex;

use super::*;
use crate::backend::cpu::kdot::tests::{TYPES, acts, exact_dot, weights};
use crate::backend::cpu::matmul::{Inputs, Scratch, matmul};
use crate::backend::cpu::pool::ThreadPool;
use crate::backend::cpu::q8k::Q8KActs;
use crate::backend::cpu::simd::{Avx2Fma, Isa, Unfused};

/// The AVX2 unpacking gives the value-at-a-time one's words, scales
/// and minimums, padding rows included.
#[test]
fn avx2_unpacking_matches_the_portable_one() {
    if !Isa::available().contains(&Isa::Avx2) {
        return;
    }
    for dtype in TYPES {
        let (rows, nb) = (21, 2);
        let w = weights(dtype, rows, nb * QK_K, 5);
        let mut want = KInterleaved::default();
        want.unpack::<Unfused>(dtype, &w, nb);
        let mut got = KInterleaved::default();
        got.unpack::<Avx2Fma>(dtype, &w, nb);
        assert_eq!(got.groups, 3);
        assert_eq!(got.qs, want.qs, "{dtype:?} values");
        assert_eq!(
            (&got.scales, &got.mins, &got.d, &got.dmin),
            (&want.scales, &want.mins, &want.d, &want.dmin),
            "{dtype:?} scales"
        );
    }
}

/// Every K-quant matmul (decode, the interleaved GEMM, ggml's order in
/// the exact mode), on each instruction set, gives every output its
/// exact sum over the Q8_K activations to within f32 rounding
/// (relative 1e-5 of the terms' magnitudes): on shapes with partial
/// groups of 8 weight rows, partial items and partial 4-row steps of
/// activations, 1 to 5 super-blocks. The tolerance is tight enough to
/// see one quant off by one.
#[test]
fn k_matmuls_match_the_exact_sums() {
    const TOL: f64 = 1e-5;
    let mut pool = ThreadPool::new(2).unwrap();
    let scratch: Vec<Mutex<Scratch>> = (0..2).map(|_| Mutex::default()).collect();
    let mut worst_err = 0f64;
    for (t, dtype) in TYPES.into_iter().enumerate() {
        for (m, n, nb) in [
            (13, 7, 1),
            (21, 259, 2),
            (8, 5, 3),
            (3, 1, 1),
            (17, 2, 2),
            (9, 17, 1),
            // 5 and 3 super-blocks (k a multiple of 256 only), one
            // row against 4, and 66 rows (a partial 4-row step).
            (11, 3, 5),
            (1, 1, 4),
            (29, 66, 3),
        ] {
            let k = nb * QK_K;
            let seed = 11 * t as u64 + (m * n + k) as u64;
            let w = weights(dtype, m, k, seed);
            let rb = w.len() / m;
            let x = acts(n, k, seed + 1);
            for isa in Isa::available() {
                let mut qa = Q8KActs::default();
                qa.quantize(isa, &x);
                let want: Vec<(f64, f64)> = (0..n * m)
                    .map(|o| exact_dot(dtype, &w[o % m * rb..][..rb], qa.row(o / m, k)))
                    .collect();
                for exact in [false, true] {
                    let mut out = vec![f32::NAN; n * m];
                    let inputs = Inputs {
                        f32: &x,
                        q8: None,
                        q8k: Some(&qa),
                    };
                    matmul(
                        &mut pool, isa, exact, &scratch, &w, dtype, k, n, inputs, &mut out,
                    )
                    .unwrap();
                    for (o, (&got, &(want, scale))) in out.iter().zip(&want).enumerate() {
                        let err = (f64::from(got) - want).abs();
                        worst_err = worst_err.max(err / (TOL * scale));
                        assert!(
                            err <= TOL * scale,
                            "{dtype:?} {isa:?} {m}×{k} · {n} rows, exact {exact}: output {o} = {got}, want {want} (scale {scale:e})"
                        );
                    }
                }
                // One quant one step off (where its sub-block's scale
                // is not 0) moves some output by more than the
                // tolerance, in rows of up to 3 super-blocks (in longer
                // ones a step is a smaller share of the terms' sizes).
                if nb > 3 {
                    continue;
                }
                let moved = (20..60)
                    .flat_map(|at| (0..n).map(move |i| (at, i)))
                    .map(|(at, i)| {
                        let mut w1 = w[..rb].to_vec();
                        w1[at] ^= 1;
                        let (a, scale) = exact_dot(dtype, &w1, qa.row(i, k));
                        (a - want[i * m].0).abs() / (TOL * scale)
                    })
                    .fold(0f64, f64::max);
                assert!(moved > 1.0, "{dtype:?}: tolerance too loose ({moved})");
            }
        }
    }
    eprintln!("largest error: {worst_err:.3} of the tolerance");
}
