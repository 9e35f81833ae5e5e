use super::*;

use crate::backend::cpu::q8::tests::{TYPES, acts, weights};

/// `Σ_b d_w·d_x·isum_b` per output in f64, from the GGUF blocks and
/// the quantized activations, and per output the sum of the terms'
/// magnitudes (the scale the f32 sums' rounding is relative to).
fn block_sums(
    dtype: GgmlType,
    w: &[u8],
    m: usize,
    k: usize,
    x: &Q8Acts,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (nb, size) = (k / q8::QK8, dtype.type_size());
    let mut want = vec![0f64; n * m];
    let mut scale = vec![0f64; n * m];
    for i in 0..n {
        for j in 0..m {
            for b in 0..nb {
                let blk = &w[(j * nb + b) * size..][..size];
                let half = |at: usize| {
                    f64::from(simd::f16_to_f32(u16::from_le_bytes([blk[at], blk[at + 1]])))
                };
                // Value t as ggml's integer, from its nibble (and
                // fifth bit) at `qs` less `off`.
                let nibble = |qs: usize, t: usize| {
                    let byte = blk[qs + t % 16];
                    i32::from(if t < 16 { byte & 15 } else { byte >> 4 })
                };
                let fifth = |qh: usize, t: usize| {
                    let bits = u32::from_le_bytes(blk[qh..qh + 4].try_into().unwrap());
                    (bits >> t & 1) as i32 * 16
                };
                let q = |t: usize| -> i32 {
                    match dtype {
                        GgmlType::Q4_0 => nibble(2, t) - 8,
                        GgmlType::Q4_1 => nibble(4, t),
                        GgmlType::Q5_0 => nibble(6, t) + fifth(2, t) - 16,
                        GgmlType::Q5_1 => nibble(8, t) + fifth(4, t),
                        _ => i32::from(blk[2 + t] as i8),
                    }
                };
                let isum: i32 = (0..q8::QK8)
                    .map(|t| q(t) * i32::from(x.qs[i * k + b * q8::QK8 + t]))
                    .sum();
                let mut term = half(0) * f64::from(x.d[i * nb + b]) * f64::from(isum);
                if matches!(dtype, GgmlType::Q4_1 | GgmlType::Q5_1) {
                    // The minimum times x's rounded sum, as ggml.
                    term += half(2) * f64::from(x.s[i * nb + b]);
                }
                want[i * m + j] += term;
                scale[i * m + j] += term.abs();
            }
        }
    }
    (want, scale)
}

/// On each instruction set, decode, the interleaved GEMM and ggml's
/// tiles give every output its exact block sums to
/// within f32 rounding (relative 1e-5 of the terms' magnitudes), on
/// shapes with partial groups of 8 weight rows, partial items and
/// partial 4-row steps of activations; so does ggml's order. The
/// tolerance is tight enough to see one quant off by one.
#[test]
fn q8_matmuls_match_the_block_sums() {
    const TOL: f64 = 1e-5;
    let mut pool = ThreadPool::new(2).unwrap();
    let scratch: Vec<Mutex<Scratch>> = (0..2).map(|_| Mutex::default()).collect();
    let mut worst_err = 0f64;
    for (t, dtype) in TYPES.into_iter().enumerate() {
        for (m, n, k) in [
            (13, 7, 576),
            (21, 259, 576),
            (37, 6, 1536),
            (8, 263, 1536),
            (3, 5, 64),
            (13, 1, 576),
            (37, 2, 1536),
            // 5, 3 and 7 blocks (no multiple of 64 or 256 values).
            (19, 3, 160),
            (1, 1, 96),
            (9, 70, 224),
        ] {
            let seed = 11 * t as u64 + (m * n + k) as u64;
            let w = weights(dtype, m, k, seed);
            for isa in Isa::available() {
                let mut qa = Q8Acts::default();
                qa.quantize(isa, &acts(n, k, seed + 1));
                let (want, scale) = block_sums(dtype, &w, m, k, &qa, n);
                for exact in [false, true] {
                    let mut out = vec![f32::NAN; n * m];
                    matmul(
                        &mut pool,
                        isa,
                        exact,
                        &scratch,
                        &w,
                        dtype,
                        k,
                        n,
                        Inputs {
                            f32: &[],
                            q8: Some(&qa),
                            q8k: None,
                        },
                        &mut out,
                    )
                    .unwrap();
                    for (o, (&got, (&want, &scale))) in
                        out.iter().zip(want.iter().zip(&scale)).enumerate()
                    {
                        let err = (f64::from(got) - want).abs();
                        worst_err = worst_err.max(err / (TOL * scale));
                        assert!(
                            err <= TOL * scale,
                            "{dtype:?} {isa:?} {m}×{k} · {n} rows, exact {exact}: output {o} = {got}, want {want} (err {err:e}, scale {scale:e})"
                        );
                    }
                }
                // One quant one step off (against an activation quant of
                // at least 8) moves an output by more than the tolerance.
                let mut w1 = w.clone();
                let qs_at = match dtype {
                    GgmlType::Q4_1 => 4,
                    GgmlType::Q5_0 => 6,
                    GgmlType::Q5_1 => 8,
                    _ => 2,
                };
                w1[qs_at] ^= 1;
                let (moved, _) = block_sums(dtype, &w1, m, k, &qa, n);
                let worst = (0..n)
                    .filter(|&i| qa.qs[i * k].unsigned_abs() >= 8)
                    .map(|i| (moved[i * m] - want[i * m]).abs() / (TOL * scale[i * m]))
                    .fold(f64::MAX, f64::min);
                assert!(worst > 1.0, "{dtype:?}: tolerance too loose ({worst})");
            }
        }
    }
    eprintln!("largest error: {worst_err:.3} of the tolerance");
}

/// A row's outputs do not depend on the rows it shares a matmul with:
/// decode items (1 or 2 activation rows), the prefill GEMM's items and
/// their tails give each row the bits it gets alone, in both modes and on
/// each instruction set. A server relies on it: a request's answer is the
/// same alone and batched with others.
#[test]
fn q8_rows_are_batch_invariant() {
    let mut pool = ThreadPool::new(2).unwrap();
    let scratch: Vec<Mutex<Scratch>> = (0..2).map(|_| Mutex::default()).collect();
    let (m, k) = (13, 576);
    for (t, dtype) in TYPES.into_iter().enumerate() {
        let w = weights(dtype, m, k, 7 * t as u64 + 1);
        for isa in Isa::available() {
            for exact in [false, true] {
                let run = |pool: &mut ThreadPool, x: &[f32], n: usize| {
                    let mut qa = Q8Acts::default();
                    qa.quantize(isa, x);
                    let mut out = vec![f32::NAN; n * m];
                    let inputs = Inputs {
                        f32: &[],
                        q8: Some(&qa),
                        q8k: None,
                    };
                    matmul(
                        pool, isa, exact, &scratch, &w, dtype, k, n, inputs, &mut out,
                    )
                    .unwrap();
                    out
                };
                for n in [2, 3, 5, 9, X_BLOCK + 1, X_BLOCK + 2] {
                    let x = acts(n, k, 100 + n as u64);
                    let batched = run(&mut pool, &x, n);
                    for i in 0..n {
                        let alone = run(&mut pool, &x[i * k..(i + 1) * k], 1);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&batched[i * m..(i + 1) * m]),
                            bits(&alone),
                            "{dtype:?} {isa:?} exact {exact}: row {i} of {n}"
                        );
                    }
                }
            }
        }
    }
}

/// In the fast mode on AVX2 and AVX-512, each K-quant output row gets the
/// same bits whether its activation row is multiplied alone or among
/// others: decode items (1 or 2 rows, [`kdot::dots_in_gemmk_order`]) and
/// the GEMM's items ([`gemmk`]) sum in one order. Batches of 2 to 9 rows,
/// and two past `X_BLOCK` whose last items hold 1 and 2 rows.
#[test]
fn k_quant_rows_are_batch_invariant() {
    for isa in Isa::available() {
        if isa != Isa::Baseline {
            k_quant_batch_case(isa);
        }
    }
}

/// [`k_quant_rows_are_batch_invariant`] on `isa`.
fn k_quant_batch_case(isa: Isa) {
    use crate::backend::cpu::kdot::tests::{TYPES, acts, weights};
    let mut pool = ThreadPool::new(2).unwrap();
    let scratch: Vec<Mutex<Scratch>> = (0..2).map(|_| Mutex::default()).collect();
    let (m, k) = (37, 2 * QK_K);
    let mut run = |w: &[u8], dtype: GgmlType, x: &[f32]| {
        let n = x.len() / k;
        let mut qa = Q8KActs::default();
        qa.quantize(isa, x);
        let mut out = vec![f32::NAN; n * m];
        let inputs = Inputs {
            f32: x,
            q8: None,
            q8k: Some(&qa),
        };
        matmul(
            &mut pool, isa, false, &scratch, w, dtype, k, n, inputs, &mut out,
        )
        .unwrap();
        out
    };
    for (t, dtype) in TYPES.into_iter().enumerate() {
        let w = weights(dtype, m, k, 90 + t as u64);
        let most = X_BLOCK + 2;
        let x = acts(most, k, 60 + t as u64);
        let alone: Vec<Vec<f32>> = x.chunks_exact(k).map(|r| run(&w, dtype, r)).collect();
        for n in [2, 3, 5, 9, X_BLOCK + 1, most] {
            let batch = run(&w, dtype, &x[..n * k]);
            for (i, (got, want)) in batch.chunks_exact(m).zip(&alone).enumerate() {
                for (j, (g, a)) in got.iter().zip(want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        a.to_bits(),
                        "{isa:?} {dtype:?}, {n} rows: output {i}·{j} = {g}, alone {a}"
                    );
                }
            }
        }
    }
}
