//! The mixture-of-experts ops on the GPU against the CPU, on random data:
//! `topk_moe` (both gatings, with and without normalising, ties),
//! `matmul_id` (weight types, experts per token, x per token or per pair)
//! and `moe_sum`.
//!
//! - exact mode (`GpuOptions::exact`) against `CpuBackend::new_exact`
//!   (ggml's arithmetic): the legacy quants' `matmul_id` and `moe_sum` bit
//!   for bit; the routing's ids equal and weights within 4 ulps (glibc's
//!   expf is within 0.56 ulp of the GPU's correctly rounded exp); the other
//!   types' `matmul_id` within a normalised squared error of 1e-10 (their
//!   f32 sums run in another order; 1e-4 for F16 and BF16, whose
//!   activations the two round differently, as for their plain matmuls);
//! - fast mode against `CpuBackend::reference` (f32 activations, f64
//!   sums): ids equal, weights within 1e-5, `matmul_id` within 1e-9 on
//!   f32 activations and 5e-5 for the types it runs on Q8-rounded ones as
//!   the dense decode does (`matvec_blocks`; the rounding alone is ~1.5e-5);
//! - `matmul_id` is one dispatch whatever the tokens and experts.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::backend::{Backend, BackendExt, MoeGating, MoeParams, Tensor, WeightData};
use smelt::quant::GgmlType::{self, F32, I32};

struct Pair {
    cpu: CpuBackend,
    gpu: GpuBackend,
    exact: bool,
}

impl Pair {
    fn new(exact: bool) -> Pair {
        let (cpu, opts) = if exact {
            (CpuBackend::new_exact(2).unwrap(), GpuOptions::exact())
        } else {
            (CpuBackend::reference(), GpuOptions::default())
        };
        let gpu = GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)");
        Pair { cpu, gpu, exact }
    }

    fn f32s(&mut self, rows: usize, cols: usize, v: &[f32]) -> [Tensor; 2] {
        let mk = |b: &mut dyn Backend| {
            let t = b.alloc(F32, rows, cols).unwrap();
            b.write_f32(t, v).unwrap();
            t
        };
        [mk(&mut self.cpu), mk(&mut self.gpu)]
    }

    fn i32s(&mut self, rows: usize, cols: usize, v: &[i32]) -> [Tensor; 2] {
        let mk = |b: &mut dyn Backend| {
            let t = b.alloc(I32, rows, cols).unwrap();
            b.write_i32(t, v).unwrap();
            t
        };
        [mk(&mut self.cpu), mk(&mut self.gpu)]
    }

    fn out(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> [Tensor; 2] {
        let nan = vec![0xffu8; rows * cols * 4];
        let mk = |b: &mut dyn Backend| {
            let t = b.alloc(dtype, rows, cols).unwrap();
            // Poisoned (NaN, or -1 ids): an unwritten element shows.
            b.write(t, &nan).unwrap();
            t
        };
        [mk(&mut self.cpu), mk(&mut self.gpu)]
    }

    fn weight(&mut self, dtype: GgmlType, rows: usize, cols: usize, v: &[f32]) -> [Tensor; 2] {
        let mut bytes = vec![0u8; dtype.row_bytes(cols).unwrap() * rows];
        let row = bytes.len() / rows;
        for (src, dst) in v.chunks_exact(cols).zip(bytes.chunks_exact_mut(row)) {
            smelt::quant::quantize_row(dtype, src, dst).unwrap();
        }
        let mk = |b: &mut dyn Backend| {
            b.load_weight(
                "experts",
                dtype,
                rows,
                cols,
                WeightData::from_vec(bytes.clone()),
            )
            .unwrap()
        };
        [mk(&mut self.cpu), mk(&mut self.gpu)]
    }
}

/// Normalised mean squared error of `b` against `a`; NaN or Inf is 1.
fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    if b.iter().any(|v| !v.is_finite()) {
        return 1.0;
    }
    let err: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let norm: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum();
    err / norm.max(1e-30)
}

/// Router logits: each row a shuffle of distinct levels 0.05 apart (no
/// near ties for the fast mode's exp to flip), or of 3 levels only (ties
/// everywhere, which must go to the lower expert).
fn logits(rng: &mut StdRng, n: usize, n_expert: usize, ties: bool) -> Vec<f32> {
    let mut v = Vec::with_capacity(n * n_expert);
    for _ in 0..n {
        let mut row: Vec<f32> = (0..n_expert)
            .map(|e| {
                if ties {
                    (e % 3) as f32
                } else {
                    e as f32 * 0.05 - 2.0
                }
            })
            .collect();
        row.shuffle(rng);
        v.extend(row);
    }
    v
}

fn check_topk(p: &mut Pair, rng: &mut StdRng, failures: &mut Vec<String>) {
    for (n, n_expert) in [(1, 8), (5, 60), (3, 128)] {
        for k in [1, 2, 4, 8] {
            for gating in [MoeGating::Softmax, MoeGating::SoftmaxWeight] {
                for normalize in [false, true] {
                    for ties in [false, true] {
                        let params = MoeParams {
                            k,
                            gating,
                            normalize,
                        };
                        let l = logits(rng, n, n_expert, ties);
                        let [lc, lg] = p.f32s(n, n_expert, &l);
                        let [ic, ig] = p.out(I32, n, k);
                        let [wc, wg] = p.out(F32, n, k);
                        p.cpu.topk_moe(lc, &params, ic, wc).unwrap();
                        p.gpu.topk_moe(lg, &params, ig, wg).unwrap();
                        let (idc, idg) = (p.cpu.read_i32(ic).unwrap(), p.gpu.read_i32(ig).unwrap());
                        let (wtc, wtg) = (p.cpu.read_f32(wc).unwrap(), p.gpu.read_f32(wg).unwrap());
                        let worst = wtc
                            .iter()
                            .zip(&wtg)
                            .map(|(a, b)| {
                                if p.exact {
                                    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as f64
                                } else {
                                    (a - b).abs() as f64
                                }
                            })
                            .fold(
                                0.0,
                                |m: f64, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
                            );
                        let bound = if p.exact { 4.0 } else { 1e-5 };
                        let what = format!(
                            "topk_moe {n}x{n_expert} k {k} {gating:?} normalize {normalize} ties {ties}"
                        );
                        if idc != idg {
                            failures.push(format!("{what}: ids CPU {idc:?}, GPU {idg:?}"));
                        } else if worst > bound {
                            failures.push(format!("{what}: weights off by {worst:e} > {bound:e}"));
                        }
                    }
                }
            }
        }
    }
}

fn check_matmul_id(p: &mut Pair, rng: &mut StdRng, failures: &mut Vec<String>) {
    use GgmlType::*;
    // 6 experts of 72 rows (no workgroup's rows divide it) by 256.
    let (n_expert, m, k) = (6, 72, 256);
    let types = [Q4_0, Q8_0, Q4_1, Q5_1, Q4_K, Q6_K, Q3_K, F16, BF16];
    for dtype in types {
        let wv: Vec<f32> = (0..n_expert * m * k)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        let [w_c, w_g] = p.weight(dtype, n_expert * m, k, &wv);
        for (n, k_used, per_pair) in [
            (1, 1, false),
            (1, 4, false),
            (5, 2, false),
            (3, 4, true),
            (9, 2, false),
        ] {
            let x_rows = if per_pair { n * k_used } else { n };
            let xv: Vec<f32> = (0..x_rows * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let [xc, xg] = p.f32s(x_rows, k, &xv);
            let idv: Vec<i32> = (0..n)
                .flat_map(|_| {
                    let mut e: Vec<i32> = (0..n_expert as i32).collect();
                    e.shuffle(rng);
                    e.truncate(k_used);
                    e
                })
                .collect();
            let [ic, ig] = p.i32s(n, k_used, &idv);
            let [oc, og] = p.out(F32, n * k_used, m);
            p.cpu.matmul_id(w_c, xc, ic, oc).unwrap();
            let before = p.gpu.stats().dispatches;
            p.gpu.matmul_id(w_g, xg, ig, og).unwrap();
            let c = p.cpu.read_f32(oc).unwrap();
            let g = p.gpu.read_f32(og).unwrap();
            let what = format!("matmul_id {dtype} n {n} K {k_used} x per pair {per_pair}");
            // The exact mode rounds x first (one more dispatch), once per input.
            let dispatches = p.gpu.stats().dispatches - before;
            if dispatches > 2 {
                failures.push(format!("{what}: {dispatches} dispatches"));
            }
            let legacy = matches!(dtype, Q4_0 | Q8_0 | Q4_1 | Q5_1);
            if p.exact && legacy {
                let bad = c
                    .iter()
                    .zip(&g)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                if bad > 0 {
                    failures.push(format!("{what}: {bad} of {} differ in some bit", c.len()));
                }
            } else {
                let e = nmse(&c, &g);
                // x is rounded alike but for the float weights: the GPU's
                // exact matmuls round x to f16 for F16 (as ggml), the CPU's
                // do not; ggml rounds it to BF16 for BF16, the GPU does not.
                let alike = !matches!(dtype, F16 | BF16);
                // The fast mode's integer dots round x to Q8 blocks.
                let dots = p.gpu.features().dots(dtype);
                let bound = match (p.exact, alike, dots) {
                    (true, true, _) => 1e-10,
                    (true, false, _) => 1e-4,
                    (false, _, true) => 5e-5,
                    (false, _, false) => 1e-9,
                };
                if e.is_nan() || e > bound {
                    failures.push(format!("{what}: nmse {e:e} > {bound:e}"));
                }
            }
        }
    }
}

fn check_moe_sum(p: &mut Pair, rng: &mut StdRng, failures: &mut Vec<String>) {
    for (n, k_used, e) in [(1, 1, 64), (1, 8, 128), (7, 2, 100), (4, 4, 257)] {
        let ev: Vec<f32> = (0..n * k_used * e)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        let wv: Vec<f32> = (0..n * k_used).map(|_| rng.gen_range(0.0..1.0)).collect();
        let [ec, eg] = p.f32s(n * k_used, e, &ev);
        let [wc, wg] = p.f32s(n, k_used, &wv);
        let [oc, og] = p.out(F32, n, e);
        p.cpu.moe_sum(ec, wc, oc).unwrap();
        p.gpu.moe_sum(eg, wg, og).unwrap();
        let (c, g) = (p.cpu.read_f32(oc).unwrap(), p.gpu.read_f32(og).unwrap());
        let bad = c
            .iter()
            .zip(&g)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        if bad > 0 {
            failures.push(format!(
                "moe_sum n {n} K {k_used} E {e}: {bad} of {} differ",
                c.len()
            ));
        }
    }
}

fn check_all(exact: bool) {
    let mut p = Pair::new(exact);
    let mut rng = StdRng::seed_from_u64(25);
    let mut failures = Vec::new();
    check_topk(&mut p, &mut rng, &mut failures);
    check_matmul_id(&mut p, &mut rng, &mut failures);
    check_moe_sum(&mut p, &mut rng, &mut failures);
    assert!(
        failures.is_empty(),
        "exact {exact}:\n{}",
        failures.join("\n")
    );
}

#[test]
fn moe_ops_exact_mode_match_ggml_cpu() {
    check_all(true);
}

#[test]
fn moe_ops_fast_mode_match_the_cpu() {
    check_all(false);
}

/// Ids the CPU would refuse are clamped on the GPU (a kernel cannot
/// fail), never read outside the experts; a router too wide is an error.
#[test]
fn moe_limits() {
    let mut p = Pair::new(false);
    let wv = vec![0.5f32; 2 * 4 * 32];
    let [_, w] = p.weight(GgmlType::Q8_0, 8, 32, &wv);
    let [_, x] = p.f32s(1, 32, &[1.0; 32]);
    let [_, ids] = p.i32s(1, 2, &[-5, 9]);
    let [_, out] = p.out(F32, 2, 4);
    p.gpu.matmul_id(w, x, ids, out).unwrap();
    let o = p.gpu.read_f32(out).unwrap();
    assert!(o.iter().all(|v| v.is_finite()), "{o:?}");
    let [_, wide] = p.f32s(1, 600, &[0.0; 600]);
    let [_, i] = p.out(I32, 1, 2);
    let [_, wt] = p.out(F32, 1, 2);
    let params = MoeParams {
        k: 2,
        gating: MoeGating::Softmax,
        normalize: true,
    };
    let err = p.gpu.topk_moe(wide, &params, i, wt).unwrap_err();
    assert!(err.to_string().contains("512"), "{err}");
}
