//! The reference CPU ops against hand-computed values and against naive
//! formulas written differently (full matrices, complex numbers) on random
//! data.
#![allow(clippy::needless_range_loop)] // naive formulas index like the math does

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::{
    AttentionParams, Backend, BackendError, BackendExt, RopeMode, RopeParams, Tensor,
};
use smelt::gguf::TensorBytes;
use smelt::quant::GgmlType;

pub fn f32s(b: &mut dyn Backend, rows: usize, cols: usize, v: &[f32]) -> Tensor {
    let t = b.alloc(GgmlType::F32, rows, cols).unwrap();
    b.write_f32(t, v).unwrap();
    t
}

pub fn i32s(b: &mut dyn Backend, v: &[i32]) -> Tensor {
    let t = b.alloc(GgmlType::I32, 1, v.len()).unwrap();
    b.write_i32(t, v).unwrap();
    t
}

pub fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect()
}

pub fn f16_round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
}

pub fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

pub fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

/// The reference, and the fast backend on one and on three threads.
pub fn backends() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(CpuBackend::reference()),
        Box::new(CpuBackend::new(1).unwrap()),
        Box::new(CpuBackend::new(3).unwrap()),
    ]
}

fn each_backend(f: fn(&mut dyn Backend)) {
    for mut b in backends() {
        eprintln!("backend {}", b.name());
        f(b.as_mut());
    }
}

#[test]
fn get_rows_f32_f16_and_bad_ids() {
    each_backend(get_rows_f32_f16_and_bad_ids_on);
}

fn get_rows_f32_f16_and_bad_ids_on(b: &mut dyn Backend) {
    let table: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect();
    let t32 = f32s(b, 4, 3, &table);
    let t16 = b
        .load_weight(
            "t16",
            GgmlType::F16,
            4,
            3,
            TensorBytes::from_vec(f16_bytes(&table)),
        )
        .unwrap();
    for t in [t32, t16] {
        let ids = i32s(b, &[3, 0, 3]);
        let out = b.alloc(GgmlType::F32, 3, 3).unwrap();
        b.get_rows(t, ids, out).unwrap();
        assert_eq!(
            b.read_f32(out).unwrap(),
            [4.5, 5.0, 5.5, 0.0, 0.5, 1.0, 4.5, 5.0, 5.5]
        );
        for bad in [-1, 4] {
            let ids = i32s(b, &[0, bad, 1]);
            let e = b.get_rows(t, ids, out).unwrap_err();
            assert!(e.to_string().contains("outside 0..4"), "{e}");
        }
    }
}

#[test]
fn set_rows_converts_to_the_cache_type() {
    each_backend(set_rows_converts_to_the_cache_type_on);
}

fn set_rows_converts_to_the_cache_type_on(b: &mut dyn Backend) {
    let src = f32s(b, 2, 2, &[1.0, 2.0, 1.0 / 3.0, -4.0]);
    let ids = i32s(b, &[2, 0]);
    let d32 = b.alloc(GgmlType::F32, 3, 2).unwrap();
    b.set_rows(src, ids, d32).unwrap();
    assert_eq!(
        b.read_f32(d32).unwrap(),
        [1.0 / 3.0, -4.0, 0.0, 0.0, 1.0, 2.0]
    );
    let d16 = b.alloc(GgmlType::F16, 3, 2).unwrap();
    b.set_rows(src, ids, d16).unwrap();
    let back = b.alloc(GgmlType::F32, 3, 2).unwrap();
    b.copy(d16, back).unwrap();
    let third = f16::from_f32(1.0 / 3.0).to_f32();
    assert_eq!(b.read_f32(back).unwrap(), [third, -4.0, 0.0, 0.0, 1.0, 2.0]);
    let bad = i32s(b, &[0, 3]);
    assert!(b.set_rows(src, bad, d16).is_err());
}

#[test]
fn rms_norm_by_hand_and_random() {
    each_backend(rms_norm_by_hand_and_random_on);
}

fn rms_norm_by_hand_and_random_on(b: &mut dyn Backend) {
    // rms([3, 4]) = sqrt(12.5).
    let x = f32s(b, 1, 2, &[3.0, 4.0]);
    let w = f32s(b, 1, 2, &[1.0, 2.0]);
    let out = b.alloc(GgmlType::F32, 1, 2).unwrap();
    b.rms_norm(x, Some(w), 0.0, out).unwrap();
    let r = 12.5f64.sqrt();
    assert_close(&b.read_f32(out).unwrap(), &[3.0 / r, 8.0 / r], 1e-6);
    // eps joins the mean square: rms([0, 0]) = sqrt(eps).
    let z = f32s(b, 1, 2, &[0.0, 1e-3]);
    b.rms_norm(z, None, 0.25, out).unwrap();
    assert_close(
        &b.read_f32(out).unwrap(),
        &[0.0, 1e-3 / (0.25f64 + 5e-7).sqrt()],
        1e-6,
    );

    let mut rng = StdRng::seed_from_u64(1);
    let (n, c) = (5, 37);
    let xv = random(&mut rng, n * c);
    let wv = random(&mut rng, c);
    let x = f32s(b, n, c, &xv);
    let w = f32s(b, 1, c, &wv);
    let out = b.alloc(GgmlType::F32, n, c).unwrap();
    b.rms_norm(x, Some(w), 1e-5, out).unwrap();
    let mut want = Vec::new();
    for r in 0..n {
        let row = &xv[r * c..(r + 1) * c];
        let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / c as f64;
        for i in 0..c {
            want.push(row[i] as f64 / (ms + 1e-5).sqrt() * wv[i] as f64);
        }
    }
    assert_close(&b.read_f32(out).unwrap(), &want, 1e-5);
}

fn rope_params(mode: RopeMode, n_heads: usize, head_dim: usize, n_dims: usize) -> RopeParams {
    RopeParams {
        mode,
        n_heads,
        head_dim,
        n_dims,
        freq_base: 10000.0,
        freq_scale: 1.0,
        freq_factors: None,
        attn_factor: 1.0,
    }
}

#[test]
fn rope_by_hand() {
    each_backend(rope_by_hand_on);
}

fn rope_by_hand_on(b: &mut dyn Backend) {
    // One head of 4, two pairs: angles pos·1 and pos·10000^(-1/2) = pos/100.
    let x = f32s(b, 2, 4, &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
    let pos = i32s(b, &[0, 2]);
    let out = b.alloc(GgmlType::F32, 2, 4).unwrap();
    let rot = |x0: f64, x1: f64, t: f64| (x0 * t.cos() - x1 * t.sin(), x0 * t.sin() + x1 * t.cos());

    b.rope(x, pos, &rope_params(RopeMode::Normal, 1, 4, 4), out)
        .unwrap();
    let (a0, a1) = rot(1.0, 2.0, 2.0);
    let (b0, b1) = rot(3.0, 4.0, 0.02);
    assert_close(
        &b.read_f32(out).unwrap(),
        &[1.0, 2.0, 3.0, 4.0, a0, a1, b0, b1],
        1e-6,
    );

    // NeoX pairs the halves: (x0, x2) and (x1, x3).
    b.rope(x, pos, &rope_params(RopeMode::Neox, 1, 4, 4), out)
        .unwrap();
    let (a0, a2) = rot(1.0, 3.0, 2.0);
    let (b1, b3) = rot(2.0, 4.0, 0.02);
    assert_close(
        &b.read_f32(out).unwrap(),
        &[1.0, 2.0, 3.0, 4.0, a0, b1, a2, b3],
        1e-6,
    );

    // Two rotated dims of four: the rest pass through. Freq factors divide
    // the angle; freq_scale multiplies the position. In place.
    let ff = f32s(b, 1, 1, &[4.0]);
    let mut p = rope_params(RopeMode::Normal, 1, 4, 2);
    p.freq_factors = Some(ff);
    p.freq_scale = 0.5;
    b.rope(x, pos, &p, x).unwrap();
    let (a0, a1) = rot(1.0, 2.0, 2.0 * 0.5 / 4.0);
    assert_close(
        &b.read_f32(x).unwrap(),
        &[1.0, 2.0, 3.0, 4.0, a0, a1, 3.0, 4.0],
        1e-6,
    );
}

#[test]
fn rope_random_as_complex_rotation() {
    each_backend(rope_random_as_complex_rotation_on);
}

fn rope_random_as_complex_rotation_on(b: &mut dyn Backend) {
    let mut rng = StdRng::seed_from_u64(2);
    let (n, heads, hd, n_dims) = (6, 3, 8, 6);
    let xv = random(&mut rng, n * heads * hd);
    let posv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..5000)).collect();
    let x = f32s(b, n, heads * hd, &xv);
    let pos = i32s(b, &posv);
    let out = b.alloc(GgmlType::F32, n, heads * hd).unwrap();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let mut p = rope_params(mode, heads, hd, n_dims);
        p.freq_base = 500000.0;
        b.rope(x, pos, &p, out).unwrap();
        let mut want: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
        for r in 0..n {
            for h in 0..heads {
                let base = r * heads * hd + h * hd;
                for d in 0..n_dims / 2 {
                    let (i0, i1) = match mode {
                        RopeMode::Normal => (2 * d, 2 * d + 1),
                        RopeMode::Neox => (d, d + n_dims / 2),
                    };
                    // z · e^{iθ} with θ = pos / base^(2d / n_dims).
                    let theta = posv[r] as f64 / 500000f64.powf(2.0 * d as f64 / n_dims as f64);
                    let (re, im) = (xv[base + i0] as f64, xv[base + i1] as f64);
                    let (c, s) = (theta.cos(), theta.sin());
                    want[base + i0] = re * c - im * s;
                    want[base + i1] = re * s + im * c;
                }
            }
        }
        assert_close(&b.read_f32(out).unwrap(), &want, 1e-5);
    }
}

#[test]
fn matmul_by_hand_and_random() {
    each_backend(matmul_by_hand_and_random_on);
}

fn matmul_by_hand_and_random_on(b: &mut dyn Backend) {
    // [[1, 2, 3]] · [[1, 0, 0], [0, 1, -1]]ᵀ = [[1, -1]]
    let w = f32s(b, 2, 3, &[1.0, 0.0, 0.0, 0.0, 1.0, -1.0]);
    let x = f32s(b, 1, 3, &[1.0, 2.0, 3.0]);
    let out = b.alloc(GgmlType::F32, 1, 2).unwrap();
    b.matmul(w, x, out).unwrap();
    assert_eq!(b.read_f32(out).unwrap(), [1.0, -1.0]);

    let mut rng = StdRng::seed_from_u64(3);
    let (m, k, n) = (13, 70, 4);
    let wv = random(&mut rng, m * k);
    let xv = random(&mut rng, n * k);
    let x = f32s(b, n, k, &xv);
    let out = b.alloc(GgmlType::F32, n, m).unwrap();
    let w16 = b
        .load_weight(
            "w16",
            GgmlType::F16,
            m,
            k,
            TensorBytes::from_vec(f16_bytes(&wv)),
        )
        .unwrap();
    let w32 = f32s(b, m, k, &wv);
    for (w, wv) in [(w32, wv.clone()), (w16, f16_round(&wv))] {
        b.matmul(w, x, out).unwrap();
        let mut want = vec![0f64; n * m];
        for i in 0..n {
            for j in 0..m {
                for l in 0..k {
                    want[i * m + j] += xv[i * k + l] as f64 * wv[j * k + l] as f64;
                }
            }
        }
        assert_close(&b.read_f32(out).unwrap(), &want, 1e-6);
    }
}

#[test]
fn attention_by_hand() {
    each_backend(attention_by_hand_on);
}

fn attention_by_hand_on(b: &mut dyn Backend) {
    // One head of 2. Keys [1, 0] and [0, 1], query [1, 1]: equal scores, so
    // the output at position 1 is the mean of the values; at position 0 it
    // is the first value alone (causal).
    let k = f32s(b, 2, 2, &[1.0, 0.0, 0.0, 1.0]);
    let v = f32s(b, 2, 2, &[2.0, 4.0, 6.0, 8.0]);
    let q = f32s(b, 2, 2, &[1.0, 1.0, 1.0, 1.0]);
    let pos = i32s(b, &[1, 0]);
    let seq = i32s(b, &[0, 0]);
    let out = b.alloc(GgmlType::F32, 2, 2).unwrap();
    let p = AttentionParams::new(1, 1, 2, 2);
    b.attention(q, k, v, pos, seq, &p, out).unwrap();
    assert_close(&b.read_f32(out).unwrap(), &[4.0, 6.0, 2.0, 4.0], 1e-6);

    // Query [ln 3 · sqrt 2, 0] (scale 1/sqrt 2): weights 3:1 at position 1.
    let q = f32s(b, 1, 2, &[3f32.ln() * 2f32.sqrt(), 0.0]);
    let pos = i32s(b, &[1]);
    let seq = i32s(b, &[0]);
    let out = b.alloc(GgmlType::F32, 1, 2).unwrap();
    b.attention(q, k, v, pos, seq, &p, out).unwrap();
    assert_close(
        &b.read_f32(out).unwrap(),
        &[0.75 * 2.0 + 0.25 * 6.0, 0.75 * 4.0 + 0.25 * 8.0],
        1e-6,
    );

    // A position past the context or a slot past the cache is an error.
    for (pv, sv) in [(2, 0), (0, 1), (-1, 0)] {
        let pos = i32s(b, &[pv]);
        let seq = i32s(b, &[sv]);
        assert!(b.attention(q, k, v, pos, seq, &p, out).is_err());
    }
}

/// Attention as matrices: S = scale·Q·Kᵀ over the whole cache, masked to
/// -inf outside each query's span, P = softmax(S), O = P·V.
#[allow(clippy::too_many_arguments)]
pub fn naive_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[i32],
    seq: &[i32],
    p: &AttentionParams,
    cache_rows: usize,
) -> Vec<f64> {
    let n = pos.len();
    let (hd, hq, hk) = (p.head_dim, p.n_heads, p.n_kv_heads);
    let mut out = vec![0f64; n * hq * hd];
    for h in 0..hq {
        let kh = h * hk / hq;
        for i in 0..n {
            let mut s = vec![f64::NEG_INFINITY; cache_rows];
            for (r, sr) in s.iter_mut().enumerate() {
                let (slot, j) = (r / p.ctx, (r % p.ctx) as i32);
                let visible = slot as i32 == seq[i]
                    && j <= pos[i]
                    && p.window.is_none_or(|w| pos[i] - j < w as i32);
                if visible {
                    let dot: f64 = (0..hd)
                        .map(|d| {
                            q[i * hq * hd + h * hd + d] as f64 * k[r * hk * hd + kh * hd + d] as f64
                        })
                        .sum::<f64>()
                        * p.scale as f64;
                    *sr = match p.softcap {
                        Some(c) => c as f64 * (dot / c as f64).tanh(),
                        None => dot,
                    };
                }
            }
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - max).exp()).sum();
            for (r, sr) in s.iter().enumerate() {
                let pr = (sr - max).exp() / z;
                for d in 0..hd {
                    out[i * hq * hd + h * hd + d] += pr * v[r * hk * hd + kh * hd + d] as f64;
                }
            }
        }
    }
    out
}

#[test]
fn attention_random_gqa_slots_window_softcap_f16() {
    each_backend(attention_random_gqa_slots_window_softcap_f16_on);
}

fn attention_random_gqa_slots_window_softcap_f16_on(b: &mut dyn Backend) {
    let mut rng = StdRng::seed_from_u64(4);
    let (hq, hk, hd, ctx, slots, n) = (6, 2, 16, 9, 3, 7);
    let rows = ctx * slots;
    let kv = random(&mut rng, rows * hk * hd);
    let vv = random(&mut rng, rows * hk * hd);
    let qv: Vec<f32> = random(&mut rng, n * hq * hd)
        .iter()
        .map(|x| x * 3.0)
        .collect();
    let posv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..ctx as i32)).collect();
    let seqv: Vec<i32> = (0..n).map(|_| rng.gen_range(0..slots as i32)).collect();
    let q = f32s(b, n, hq * hd, &qv);
    let pos = i32s(b, &posv);
    let seq = i32s(b, &seqv);
    let out = b.alloc(GgmlType::F32, n, hq * hd).unwrap();
    let k32 = f32s(b, rows, hk * hd, &kv);
    let v32 = f32s(b, rows, hk * hd, &vv);
    let k16 = b.alloc(GgmlType::F16, rows, hk * hd).unwrap();
    let v16 = b.alloc(GgmlType::F16, rows, hk * hd).unwrap();
    b.copy(k32, k16).unwrap();
    b.copy(v32, v16).unwrap();
    for (window, softcap) in [
        (None, None),
        (Some(3), None),
        (None, Some(2.0)),
        (Some(1), Some(5.0)),
    ] {
        let mut p = AttentionParams::new(hq, hk, hd, ctx);
        p.window = window;
        p.softcap = softcap;
        b.attention(q, k32, v32, pos, seq, &p, out).unwrap();
        let want = naive_attention(&qv, &kv, &vv, &posv, &seqv, &p, rows);
        assert_close(&b.read_f32(out).unwrap(), &want, 1e-5);
        b.attention(q, k16, v16, pos, seq, &p, out).unwrap();
        let want = naive_attention(
            &qv,
            &f16_round(&kv),
            &f16_round(&vv),
            &posv,
            &seqv,
            &p,
            rows,
        );
        // The fast op keeps ggml's f16 query and value accumulator.
        let tol = if b.name() == "cpu-ref" { 1e-5 } else { 3e-3 };
        assert_close(&b.read_f32(out).unwrap(), &want, tol);
    }
}

#[test]
fn elementwise_ops() {
    each_backend(elementwise_ops_on);
}

fn elementwise_ops_on(b: &mut dyn Backend) {
    let a = f32s(b, 2, 2, &[1.0, 2.0, 3.0, 4.0]);
    let row = f32s(b, 1, 2, &[10.0, 20.0]);
    let full = f32s(b, 2, 2, &[1.0, -1.0, 0.5, 2.0]);
    let out = b.alloc(GgmlType::F32, 2, 2).unwrap();
    b.add(a, row, out).unwrap();
    assert_eq!(b.read_f32(out).unwrap(), [11.0, 22.0, 13.0, 24.0]);
    b.mul(a, full, out).unwrap();
    assert_eq!(b.read_f32(out).unwrap(), [1.0, -2.0, 1.5, 8.0]);
    b.scale(a, -2.0, out).unwrap();
    assert_eq!(b.read_f32(out).unwrap(), [-2.0, -4.0, -6.0, -8.0]);
    // In place.
    b.add(a, full, a).unwrap();
    b.mul(a, row, a).unwrap();
    b.scale(a, 0.5, a).unwrap();
    assert_eq!(b.read_f32(a).unwrap(), [10.0, 10.0, 17.5, 60.0]);

    let g = f32s(b, 1, 3, &[0.0, 1.0, -2.0]);
    let u = f32s(b, 1, 3, &[5.0, 2.0, 1.0]);
    let o = b.alloc(GgmlType::F32, 1, 3).unwrap();
    b.silu_mul(g, u, o).unwrap();
    let silu = |x: f64| x / (1.0 + (-x).exp());
    assert_close(
        &b.read_f32(o).unwrap(),
        &[0.0, 2.0 * silu(1.0), silu(-2.0)],
        1e-6,
    );
    b.gelu_mul(g, u, o).unwrap();
    // gelu_tanh(1) = 0.8411920, gelu_tanh(-2) = -0.0454023 (published
    // values); the fast backend's, as ggml's, is rounded to f16.
    assert_close(
        &b.read_f32(o).unwrap(),
        &[0.0, 2.0 * 0.841192, -0.0454023],
        1e-3,
    );
}

#[test]
fn softmax_argmax_copy() {
    each_backend(softmax_argmax_copy_on);
}

fn softmax_argmax_copy_on(b: &mut dyn Backend) {
    let x = f32s(b, 2, 3, &[0.0, 2f32.ln(), f32::NEG_INFINITY, 5.0, 5.0, 1.0]);
    let out = b.alloc(GgmlType::F32, 2, 3).unwrap();
    b.softmax(x, out).unwrap();
    let e = (-4f64).exp();
    assert_close(
        &b.read_f32(out).unwrap(),
        &[
            1.0 / 3.0,
            2.0 / 3.0,
            0.0,
            1.0 / (2.0 + e),
            1.0 / (2.0 + e),
            e / (2.0 + e),
        ],
        1e-6,
    );
    let idx = b.alloc(GgmlType::I32, 1, 2).unwrap();
    b.argmax(x, idx).unwrap();
    assert_eq!(b.read_i32(idx).unwrap(), [1, 0], "first of equal maxima");

    let h = b.alloc(GgmlType::F16, 2, 3).unwrap();
    let back = b.alloc(GgmlType::F32, 2, 3).unwrap();
    let y = f32s(b, 2, 3, &[0.1, -2.5, 65504.0, 1e-8, 3.0, 7.0]);
    b.copy(y, h).unwrap();
    b.copy(h, back).unwrap();
    assert_eq!(
        b.read_f32(back).unwrap(),
        f16_round(&[0.1, -2.5, 65504.0, 1e-8, 3.0, 7.0])
    );
}

#[test]
fn bad_shapes_types_and_aliases_are_errors() {
    each_backend(bad_shapes_types_and_aliases_are_errors_on);
}

fn bad_shapes_types_and_aliases_are_errors_on(b: &mut dyn Backend) {
    let a = f32s(b, 2, 3, &[0.0; 6]);
    let c = b.alloc(GgmlType::F32, 3, 2).unwrap();
    let ids = i32s(b, &[0, 1]);
    let shape = |e: BackendError| matches!(e, BackendError::Shape { .. });
    assert!(shape(b.add(a, c, a).unwrap_err()));
    assert!(shape(b.matmul(a, a, c).unwrap_err()));
    assert!(shape(b.matmul(a, c, c).unwrap_err()));
    assert!(shape(b.softmax(a, a).unwrap_err()));
    assert!(shape(b.get_rows(a, a, c).unwrap_err()));
    assert!(shape(b.silu_mul(a, a, a).unwrap_err()));
    // A weight cannot be written by an op.
    let w = b
        .load_weight("w", GgmlType::F32, 2, 3, TensorBytes::from_vec(vec![0; 24]))
        .unwrap();
    assert!(b.scale(a, 1.0, w).is_err());
    // Wrong byte counts for a weight.
    assert!(
        b.load_weight("w", GgmlType::F32, 2, 3, TensorBytes::from_vec(vec![0; 20]))
            .is_err()
    );
    // A handle forged larger than its memory.
    let big = Tensor { rows: 100, ..a };
    assert!(b.read_f32(big).is_err());
    let _ = ids;
    // Absurd sizes are errors, not aborts.
    assert!(b.alloc(GgmlType::F32, usize::MAX / 2, 3).is_err());
}

#[test]
fn moe_ops_and_softcap() {
    each_backend(moe_ops_and_softcap_on);
}

/// Routing, per-expert matmuls and their weighted sum on hand-checked
/// values; soft-capping; an expert id past the stack is an error.
fn moe_ops_and_softcap_on(b: &mut dyn Backend) {
    use smelt::backend::{MoeGating, MoeParams};
    // Two tokens over four experts.
    let logits = f32s(b, 2, 4, &[1.0, 3.0, 2.0, 0.0, 0.5, -1.0, 0.5, 4.0]);
    let ids = b.alloc(GgmlType::I32, 2, 2).unwrap();
    let weights = b.alloc(GgmlType::F32, 2, 2).unwrap();
    let e = |x: f64| x.exp();
    for (gating, normalize, want) in [
        // Softmax over all four, then the top two, normalized: the same as
        // a softmax of the two.
        (
            MoeGating::Softmax,
            true,
            [e(1.0) / (e(1.0) + 1.0), 1.0 / (e(1.0) + 1.0)],
        ),
        // Not normalized: their share of all four.
        (
            MoeGating::Softmax,
            false,
            [
                e(3.0) / (e(1.0) + e(3.0) + e(2.0) + 1.0),
                e(2.0) / (e(1.0) + e(3.0) + e(2.0) + 1.0),
            ],
        ),
        (
            MoeGating::SoftmaxWeight,
            false,
            [e(1.0) / (e(1.0) + 1.0), 1.0 / (e(1.0) + 1.0)],
        ),
    ] {
        let p = MoeParams {
            k: 2,
            gating,
            normalize,
        };
        b.topk_moe(logits, &p, ids, weights).unwrap();
        // Token 1's tie between experts 0 and 2 goes to the lower.
        assert_eq!(b.read_i32(ids).unwrap(), [1, 2, 3, 0], "{gating:?}");
        let w = b.read_f32(weights).unwrap();
        assert_close(&w[..2], &want, 1e-6);
    }

    // Experts of 2 rows × 3: expert e's row r is (e, r, 1).
    let stack: Vec<f32> = (0..4)
        .flat_map(|e| (0..2).flat_map(move |r| [e as f32, r as f32, 1.0]))
        .collect();
    let w = f32s(b, 8, 3, &stack);
    let x = f32s(b, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = b.alloc(GgmlType::F32, 4, 2).unwrap();
    b.matmul_id(w, x, ids, out).unwrap();
    // Token 0 reads experts 1 and 2, token 1 experts 3 and 0.
    let dot = |e: f32, r: f32, x: [f32; 3]| e * x[0] + r * x[1] + x[2];
    let (x0, x1) = ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]);
    let want: Vec<f64> = [(1.0, x0), (2.0, x0), (3.0, x1), (0.0, x1)]
        .iter()
        .flat_map(|&(e, x)| [dot(e, 0.0, x), dot(e, 1.0, x)])
        .map(f64::from)
        .collect();
    assert_close(&b.read_f32(out).unwrap(), &want, 1e-6);
    // One row per (token, expert) as the input: row t·K + j.
    let per_slot = f32s(
        b,
        4,
        3,
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    );
    b.matmul_id(w, per_slot, ids, out).unwrap();
    assert_close(
        &b.read_f32(out).unwrap(),
        &[1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0],
        1e-6,
    );

    let sum = b.alloc(GgmlType::F32, 2, 2).unwrap();
    let wts = f32s(b, 2, 2, &[0.25, 0.75, 1.0, 2.0]);
    b.moe_sum(out, wts, sum).unwrap();
    assert_close(
        &b.read_f32(sum).unwrap(),
        &[0.25, 0.25 + 0.75, 1.0 + 2.0, 1.0 + 4.0],
        1e-6,
    );

    let bad = i32s(b, &[1, 4, 0, 0]);
    let bad = bad.reshape(2, 2);
    assert!(b.matmul_id(w, x, bad, out).is_err());

    let v = f32s(b, 1, 3, &[0.0, 30.0, -90.0]);
    b.softcap(v, 30.0, v).unwrap();
    let cap = |x: f64| 30.0 * (x / 30.0).tanh();
    assert_close(&b.read_f32(v).unwrap(), &[0.0, cap(30.0), cap(-90.0)], 1e-6);
}
