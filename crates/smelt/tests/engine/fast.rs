//! The fast CPU backend against the reference, op by op, on random data over
//! a sweep of shapes (odd sizes that do not divide the tiles, blocks or
//! lanes), by normalised error. Outputs are poisoned with NaN first, so an
//! element the fast op forgets to write fails the test.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::{AttentionParams, Backend, BackendExt, RopeMode, RopeParams, Tensor};
use smelt::gguf::TensorBytes;
use smelt::quant::GgmlType;

use crate::ops::{f16_bytes, f32s, i32s, random};

/// The reference and a fast backend on three threads (more than this
/// machine may have cores, so the work splitting is exercised).
fn pair() -> (CpuBackend, CpuBackend) {
    (CpuBackend::reference(), CpuBackend::new(3).unwrap())
}

/// Normalised mean squared error `Σ(a−b)² / Σb²`; NaN anywhere fails.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan() && !w.is_nan(), "NaN at {i}: got {g}, want {w}");
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    num / den.max(1e-30)
}

fn poison(b: &mut dyn Backend, t: Tensor) {
    b.write_f32(t, &vec![f32::NAN; t.n_elements()]).unwrap();
}

/// Runs `op` on both backends (with identically made inputs) and compares
/// the F32 output.
fn compare(tol: f64, what: &str, op: impl Fn(&mut dyn Backend) -> Tensor) {
    let (mut r, mut f) = pair();
    let want = {
        let out = op(&mut r);
        r.read_f32(out).unwrap()
    };
    let got = {
        let out = op(&mut f);
        f.read_f32(out).unwrap()
    };
    let e = nmse(&got, &want);
    assert!(e <= tol, "{what}: nmse {e:e} > {tol:e}");
}

/// [`compare`] on the fast backend of each instruction set this CPU has
/// (the better ones forced off), in the fast and the exact mode.
fn compare_each(tol: f64, what: &str, op: impl Fn(&mut dyn Backend) -> Tensor) {
    use smelt::backend::cpu::{CpuOptions, Isa};
    let want = {
        let mut r = CpuBackend::reference();
        let out = op(&mut r);
        r.read_f32(out).unwrap()
    };
    for isa in Isa::available() {
        for exact in [false, true] {
            let options = CpuOptions {
                threads: 3,
                exact,
                isa,
            };
            let mut f = CpuBackend::with_options(&options).unwrap();
            let out = op(&mut f);
            let e = nmse(&f.read_f32(out).unwrap(), &want);
            assert!(
                e <= tol,
                "{what} {isa:?} exact {exact}: nmse {e:e} > {tol:e}"
            );
        }
    }
}

fn weight(b: &mut dyn Backend, dtype: GgmlType, m: usize, k: usize, v: &[f32]) -> Tensor {
    let bytes = match dtype {
        GgmlType::F32 => bytemuck::cast_slice(v).to_vec(),
        GgmlType::F16 => f16_bytes(v),
        _ => unreachable!(),
    };
    b.load_weight("w", dtype, m, k, TensorBytes::from_vec(bytes))
        .unwrap()
}

#[test]
fn matmul_sweep() {
    let mut rng = StdRng::seed_from_u64(10);
    for dtype in [GgmlType::F32, GgmlType::F16] {
        for &(m, k) in &[(1, 8), (5, 100), (16, 64), (17, 96), (67, 33), (130, 256)] {
            for &n in &[1, 2, 3, 4, 7, 64, 65, 131] {
                let wv = random(&mut rng, m * k);
                let xv = random(&mut rng, n * k);
                compare(1e-11, &format!("matmul {dtype} m{m} k{k} n{n}"), |b| {
                    let w = weight(b, dtype, m, k, &wv);
                    let x = f32s(b, n, k, &xv);
                    let out = b.alloc(GgmlType::F32, n, m).unwrap();
                    poison(b, out);
                    b.matmul(w, x, out).unwrap();
                    out
                });
            }
        }
    }
}

/// `m` rows of `k` random `dtype` values: random bytes with the blocks'
/// f16 scales (and minimums) set to small finite values.
fn quantized(rng: &mut StdRng, dtype: GgmlType, m: usize, k: usize) -> Vec<u8> {
    use GgmlType::*;
    let size = dtype.type_size();
    let mut w: Vec<u8> = (0..m * k / dtype.block_size() * size)
        .map(|_| rng.r#gen())
        .collect();
    // Where each type keeps its f16 scale (and minimum).
    let at: &[usize] = match dtype {
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[0],
    };
    for blk in w.chunks_exact_mut(size) {
        for &a in at {
            let v = rng.gen_range(-0.02f32..0.02);
            blk[a..a + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

/// Every quantized weight type the fast backend rounds activations for
/// (Q8 blocks for the 32-value types, Q8_K for the K-quants), decode and
/// prefill, in both orders (the exact mode's ggml order and the fast
/// GEMMs), on each instruction set this CPU has with the better ones
/// forced off, against the reference's f32 dot products: odd row counts
/// (not whole tiles or groups of 8), 1 to 6 blocks or 1 to 3
/// super-blocks (and 5 of either), 1 to 70 activation rows.
///
/// Each output is held to the bound the activations' 8-bit rounding
/// allows: `Σ |w|·(amax/254 + |x|/1000)` over its products (half a step of
/// the block's scale, and the f16 rounding of Q8's scale), plus 1e-5 of
/// `Σ |w·x|` for the f32 sums. A wrong value, scale or block breaks it.
#[test]
fn quantized_matmul_sweep() {
    use GgmlType::*;
    use smelt::backend::cpu::{CpuOptions, Isa};
    let mut rng = StdRng::seed_from_u64(14);
    let types = [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];
    for dtype in types {
        // The activations are rounded in blocks as long as the weights'.
        let block = dtype.block_size();
        for &(m, blocks) in &[(1, 1), (17, 3), (37, 2), (9, 5)] {
            let k = blocks * block.max(64);
            for &n in &[1, 2, 3, 5, 17, 70] {
                let wv = quantized(&mut rng, dtype, m, k);
                let xv = random(&mut rng, n * k);
                let mut wf = vec![0f32; m * k];
                let rb = dtype.row_bytes(k).unwrap();
                for (row, out) in wv.chunks_exact(rb).zip(wf.chunks_exact_mut(k)) {
                    smelt::quant::dequantize_row(dtype, row, out).unwrap();
                }
                let bound: Vec<f64> = (0..n * m)
                    .map(|o| {
                        let (x, w) = (&xv[o / m * k..][..k], &wf[o % m * k..][..k]);
                        let mut b = 0f64;
                        for (xb, wb) in x.chunks_exact(block).zip(w.chunks_exact(block)) {
                            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                            for (&xv, &wv) in xb.iter().zip(wb) {
                                let (xv, wv) = (f64::from(xv), f64::from(wv));
                                b += wv.abs() * (f64::from(amax) / 254.0 + xv.abs() / 1000.0);
                                b += 1e-5 * (wv * xv).abs();
                            }
                        }
                        b
                    })
                    .collect();
                let op = |b: &mut dyn Backend| {
                    let w = b
                        .load_weight("w", dtype, m, k, TensorBytes::from_vec(wv.clone()))
                        .unwrap();
                    let x = f32s(b, n, k, &xv);
                    let out = b.alloc(GgmlType::F32, n, m).unwrap();
                    poison(b, out);
                    b.matmul(w, x, out).unwrap();
                    out
                };
                let want = {
                    let mut r = CpuBackend::reference();
                    let out = op(&mut r);
                    r.read_f32(out).unwrap()
                };
                for isa in Isa::available() {
                    for exact in [false, true] {
                        let options = CpuOptions {
                            threads: 3,
                            exact,
                            isa,
                        };
                        let mut f = CpuBackend::with_options(&options).unwrap();
                        let out = op(&mut f);
                        let got = f.read_f32(out).unwrap();
                        for (o, ((&g, &w), &b)) in got.iter().zip(&want).zip(&bound).enumerate() {
                            let err = (f64::from(g) - f64::from(w)).abs();
                            assert!(
                                err <= b,
                                "matmul {dtype} m{m} k{k} n{n} {isa:?} exact {exact}: output {o} = {g}, want {w} (bound {b:e})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn attention_sweep() {
    let mut rng = StdRng::seed_from_u64(11);
    let cases = [
        (4, 4, 8, 7, 1, 1),
        (6, 2, 16, 40, 2, 5),
        (9, 3, 64, 70, 1, 33),
        (8, 1, 12, 19, 3, 17),
        // Enough rows for work items of more than 16 rows, which mix the
        // sequences and positions; from 64 rows the fast mode tiles.
        (8, 2, 32, 300, 2, 260),
        (4, 1, 256, 200, 1, 100),
        (6, 3, 40, 150, 2, 70),
        (9, 3, 64, 90, 1, 64),
    ];
    for &(hq, hk, hd, ctx, slots, n) in &cases {
        let rows = ctx * slots;
        let kv = random(&mut rng, rows * hk * hd);
        let vv = random(&mut rng, rows * hk * hd);
        let qv: Vec<f32> = random(&mut rng, n * hq * hd)
            .iter()
            .map(|x| x * 4.0)
            .collect();
        let posv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..ctx as i32)).collect();
        let seqv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..slots as i32)).collect();
        for dtype in [GgmlType::F32, GgmlType::F16] {
            for (window, softcap) in [(None, None), (Some(5), None), (None, Some(3.0))] {
                let p = AttentionParams {
                    n_heads: hq,
                    n_kv_heads: hk,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    ctx,
                    window,
                    softcap,
                    keys: 0,
                    decode_rows: 0,
                };
                // The fast op rounds the query and its value accumulator to
                // f16 with an F16 cache, as ggml does: more so the longer
                // the span (1.6e-6 over 300 positions).
                let tol = match dtype {
                    GgmlType::F16 if ctx > 100 => 4e-6,
                    GgmlType::F16 => 1e-6,
                    _ => 1e-11,
                };
                compare_each(
                    tol,
                    &format!("attention {dtype} {hq}/{hk}x{hd} ctx{ctx} n{n}"),
                    |b| {
                        let (k32, v32) = (f32s(b, rows, hk * hd, &kv), f32s(b, rows, hk * hd, &vv));
                        let (k, v) = if dtype == GgmlType::F16 {
                            let k = b.alloc(dtype, rows, hk * hd).unwrap();
                            let v = b.alloc(dtype, rows, hk * hd).unwrap();
                            b.copy(k32, k).unwrap();
                            b.copy(v32, v).unwrap();
                            (k, v)
                        } else {
                            (k32, v32)
                        };
                        let q = f32s(b, n, hq * hd, &qv);
                        let (pos, seq) = (i32s(b, &posv), i32s(b, &seqv));
                        let out = b.alloc(GgmlType::F32, n, hq * hd).unwrap();
                        poison(b, out);
                        b.attention(q, k, v, pos, seq, &p, out).unwrap();
                        out
                    },
                );
            }
        }
    }
}

/// A sequence's attention rows get the same bits batched with another
/// sequence as alone: the tiles are chosen per sequence (here one of 70
/// rows, which tiles, beside one of 30, which does not), not per batch.
#[test]
fn attention_rows_are_batch_invariant() {
    use smelt::backend::cpu::{CpuOptions, Isa};
    let mut rng = StdRng::seed_from_u64(15);
    let (hq, hk, hd, ctx) = (6, 2, 32, 128);
    let runs = [(0, 70), (1, 30)];
    let kv = random(&mut rng, 2 * ctx * hk * hd);
    let vv = random(&mut rng, 2 * ctx * hk * hd);
    let n: usize = runs.iter().map(|r| r.1).sum();
    let qv = random(&mut rng, n * hq * hd);
    let p = AttentionParams {
        n_heads: hq,
        n_kv_heads: hk,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        ctx,
        window: None,
        softcap: None,
        keys: 0,
        decode_rows: 0,
    };
    // Attention of runs of `(slot, rows)` (positions 5.. each) on `q`.
    let run = |b: &mut dyn Backend, rows: &[(i32, usize)], q: &[f32]| {
        let k32 = f32s(b, 2 * ctx, hk * hd, &kv);
        let v32 = f32s(b, 2 * ctx, hk * hd, &vv);
        let k = b.alloc(GgmlType::F16, 2 * ctx, hk * hd).unwrap();
        let v = b.alloc(GgmlType::F16, 2 * ctx, hk * hd).unwrap();
        b.copy(k32, k).unwrap();
        b.copy(v32, v).unwrap();
        let posv: Vec<i32> = rows
            .iter()
            .flat_map(|&(_, len)| 5..5 + len as i32)
            .collect();
        let seqv: Vec<i32> = rows
            .iter()
            .flat_map(|&(seq, len)| std::iter::repeat_n(seq, len))
            .collect();
        let m = posv.len();
        let q = f32s(b, m, hq * hd, q);
        let (pos, seq) = (i32s(b, &posv), i32s(b, &seqv));
        let out = b.alloc(GgmlType::F32, m, hq * hd).unwrap();
        poison(b, out);
        b.attention(q, k, v, pos, seq, &p, out).unwrap();
        b.read_f32(out).unwrap()
    };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for isa in Isa::available() {
        let options = CpuOptions {
            threads: 3,
            exact: false,
            isa,
        };
        let mut f = CpuBackend::with_options(&options).unwrap();
        let batched = run(&mut f, &runs, &qv);
        let mut at = 0;
        for &(seq, len) in &runs {
            let cols = hq * hd;
            let alone = run(&mut f, &[(seq, len)], &qv[at * cols..(at + len) * cols]);
            assert_eq!(
                bits(&batched[at * cols..(at + len) * cols]),
                bits(&alone),
                "{isa:?}: sequence {seq} ({len} rows) batched and alone"
            );
            at += len;
        }
    }
}

#[test]
fn rope_sweep() {
    let mut rng = StdRng::seed_from_u64(12);
    for &(n, heads, hd, n_dims) in &[(1, 1, 2, 2), (5, 3, 64, 64), (9, 2, 80, 32)] {
        let xv = random(&mut rng, n * heads * hd);
        let posv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..8192)).collect();
        let ff: Vec<f32> = (0..n_dims / 2).map(|_| rng.gen_range(1.0..8.0)).collect();
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            for with_ff in [false, true] {
                // Fast angles are f32 products, as ggml's; the reference's f64.
                compare(
                    1e-9,
                    &format!("rope {mode:?} n{n} {heads}x{hd}/{n_dims}"),
                    |b| {
                        let x = f32s(b, n, heads * hd, &xv);
                        let pos = i32s(b, &posv);
                        let p = RopeParams {
                            mode,
                            n_heads: heads,
                            head_dim: hd,
                            n_dims,
                            freq_base: 100000.0,
                            freq_scale: 0.25,
                            freq_factors: with_ff.then(|| f32s(b, 1, n_dims / 2, &ff)),
                            // LongRoPE's factors come with a magnitude.
                            attn_factor: if with_ff { 1.19 } else { 1.0 },
                        };
                        b.rope(x, pos, &p, x).unwrap();
                        x
                    },
                );
            }
        }
    }
}

/// Per-expert matmuls: every (token, expert) row of the fast backend's
/// gathered matmuls against the reference's one row at a time, with the
/// token's row shared by its experts or one row each, over expert stacks
/// whose rows do and do not fill the gathered tiles.
#[test]
fn matmul_id_sweep() {
    let mut rng = StdRng::seed_from_u64(14);
    for dtype in [GgmlType::F32, GgmlType::F16] {
        for &(x_count, m, k, k_used) in &[(4, 3, 8, 2), (8, 17, 64, 3), (3, 64, 96, 1)] {
            for &n in &[1, 5, 33] {
                let wv = random(&mut rng, x_count * m * k);
                let idv: Vec<i32> = (0..n * k_used)
                    .map(|_| rng.gen_range(0..x_count as i32))
                    .collect();
                for per_slot in [false, true] {
                    let rows = if per_slot { n * k_used } else { n };
                    let xv = random(&mut rng, rows * k);
                    let what =
                        format!("matmul_id {dtype} {x_count}x{m}x{k} n{n} K{k_used} {per_slot}");
                    compare(1e-11, &what, |b| {
                        let w = weight(b, dtype, x_count * m, k, &wv);
                        let x = f32s(b, rows, k, &xv);
                        let ids = i32s(b, &idv).reshape(n, k_used);
                        let out = b.alloc(GgmlType::F32, n * k_used, m).unwrap();
                        poison(b, out);
                        b.matmul_id(w, x, ids, out).unwrap();
                        out
                    });
                }
            }
        }
    }
}

#[test]
fn rowwise_sweep() {
    let mut rng = StdRng::seed_from_u64(13);
    // The largest shape is past the size where glu splits over threads.
    for &(n, c) in &[(1, 1), (3, 7), (4, 576), (130, 1537)] {
        let (av, bv, wv) = (
            random(&mut rng, n * c),
            random(&mut rng, n * c),
            random(&mut rng, c),
        );
        let big: Vec<f32> = av.iter().map(|x| x * 30.0).collect();
        let new = |b: &mut dyn Backend| {
            let out = b.alloc(GgmlType::F32, n, c).unwrap();
            poison(b, out);
            out
        };
        compare(1e-12, "rms_norm", |b| {
            let (x, w, out) = (f32s(b, n, c, &av), f32s(b, 1, c, &wv), new(b));
            b.rms_norm(x, Some(w), 1e-6, out).unwrap();
            out
        });
        compare(1e-12, "softmax", |b| {
            let (x, out) = (f32s(b, n, c, &big), new(b));
            b.softmax(x, out).unwrap();
            out
        });
        for gelu in [false, true] {
            // The fast GELU rounds its input and output to f16, as ggml's.
            let tol = if gelu { 1e-6 } else { 1e-12 };
            compare(tol, "glu", |b| {
                let (g, u, out) = (f32s(b, n, c, &big), f32s(b, n, c, &bv), new(b));
                if gelu {
                    b.gelu_mul(g, u, out).unwrap();
                } else {
                    b.silu_mul(g, u, out).unwrap();
                }
                out
            });
        }
        compare(0.0, "add, mul, scale", |b| {
            let (x, y, row, out) = (
                f32s(b, n, c, &av),
                f32s(b, n, c, &bv),
                f32s(b, 1, c, &wv),
                new(b),
            );
            b.add(x, y, out).unwrap();
            b.mul(out, row, out).unwrap();
            b.add(out, row, out).unwrap();
            b.mul(out, y, out).unwrap();
            b.scale(out, 0.5, out).unwrap();
            out
        });
        compare(0.0, "set_rows F16, copy, get_rows F16", |b| {
            let x = f32s(b, n, c, &av);
            let ids: Vec<i32> = (0..n as i32).rev().collect();
            let ids = i32s(b, &ids);
            let cache = b.alloc(GgmlType::F16, n + 2, c).unwrap();
            b.set_rows(x, ids, cache).unwrap();
            let table = b
                .load_weight(
                    "t",
                    GgmlType::F16,
                    n,
                    c,
                    TensorBytes::from_vec(f16_bytes(&bv)),
                )
                .unwrap();
            let (out, out2) = (new(b), new(b));
            b.get_rows(table, ids, out).unwrap();
            b.copy(cache.with_rows(n), out2).unwrap();
            b.add(out, out2, out).unwrap();
            out
        });
    }
}

#[test]
fn fast_errors_match_reference() {
    let (mut r, mut f) = pair();
    for b in [&mut r as &mut dyn Backend, &mut f] {
        let table = f32s(b, 4, 8, &[0.0; 32]);
        let ids = i32s(b, &[0, 4]);
        let out = b.alloc(GgmlType::F32, 2, 8).unwrap();
        assert!(b.get_rows(table, ids, out).is_err(), "{}", b.name());
        let q = f32s(b, 1, 8, &[0.0; 8]);
        let kv = b.alloc(GgmlType::F16, 10, 8).unwrap();
        let pos = i32s(b, &[5]);
        let seq = i32s(b, &[2]);
        let p = AttentionParams {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 8,
            scale: 1.0,
            ctx: 5,
            window: None,
            softcap: None,
            keys: 0,
            decode_rows: 0,
        };
        let o = b.alloc(GgmlType::F32, 1, 8).unwrap();
        assert!(
            b.attention(q, kv, kv, pos, seq, &p, o).is_err(),
            "{}",
            b.name()
        );
    }
}
