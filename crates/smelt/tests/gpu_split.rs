//! Weights over the binding limit: split by rows into parts under the limit
//! for get_rows and matmul, or refused with the limit named. The limit is
//! forced small (`GpuOptions::max_weight_binding_bytes`) so that any adapter
//! splits; results are checked against the fast CPU backend in its exact
//! mode, which the kernels match bit for bit (see gpu_exact.rs), and
//! against the GPU without splitting for the other weight types.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::backend::{Backend, BackendError, BackendExt, Tensor};
use smelt::gguf::TensorBytes;
use smelt::quant::GgmlType::{self, F32, I32};

/// 16 KiB: a 300-row weight of 256 columns is 3 to 5 parts.
const LIMIT: u64 = 16 << 10;

fn split_gpu() -> GpuBackend {
    GpuBackend::new(&GpuOptions {
        max_weight_binding_bytes: Some(LIMIT),
        ..GpuOptions::default()
    })
    .expect("a GPU adapter (lavapipe in CI)")
}

/// Random blocks with sane f16 scales (and minimums); random f16 values
/// for F16.
fn weight_bytes(rng: &mut StdRng, t: GgmlType, m: usize, k: usize) -> Vec<u8> {
    if t == GgmlType::F16 {
        return (0..m * k)
            .flat_map(|_| half::f16::from_f32(rng.gen_range(-1.0..1.0)).to_le_bytes())
            .collect();
    }
    let size = t.type_size();
    let mut bytes = vec![0u8; m * t.row_bytes(k).unwrap()];
    rng.fill(&mut bytes[..]);
    if t.block_size() == 32 {
        for blk in bytes.chunks_exact_mut(size) {
            blk[..2]
                .copy_from_slice(&half::f16::from_f32(rng.gen_range(0.001..0.05)).to_le_bytes());
            if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1) {
                blk[2..4].copy_from_slice(
                    &half::f16::from_f32(rng.gen_range(-0.05..0.05)).to_le_bytes(),
                );
            }
        }
    } else {
        // K-quants: the super-block scales (d, dmin) are the f16s at the
        // block's end for Q6_K and at its start for the others.
        for blk in bytes.chunks_exact_mut(size) {
            let d = half::f16::from_f32(rng.gen_range(0.001..0.02)).to_le_bytes();
            match t {
                GgmlType::Q6_K => blk[size - 2..].copy_from_slice(&d),
                _ => {
                    blk[..2].copy_from_slice(&d);
                    blk[2..4].copy_from_slice(&d);
                }
            }
        }
    }
    bytes
}

/// get_rows of `ids` and matmul with `n` random tokens, on `b`.
fn run(
    b: &mut dyn Backend,
    t: GgmlType,
    w: &[u8],
    (m, k): (usize, usize),
    ids: &[i32],
    x: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let w = b
        .load_weight("w", t, m, k, TensorBytes::from_vec(w.to_vec()))
        .unwrap();
    let id = b.alloc(I32, 1, ids.len()).unwrap();
    b.write_i32(id, ids).unwrap();
    let rows = b.alloc(F32, ids.len(), k).unwrap();
    b.get_rows(w, id, rows).unwrap();
    let n = x.len() / k;
    let xt: Tensor = b.alloc(F32, n, k).unwrap();
    b.write_f32(xt, x).unwrap();
    let out = b.alloc(F32, n, m).unwrap();
    b.matmul(w, xt, out).unwrap();
    (b.read_f32(rows).unwrap(), b.read_f32(out).unwrap())
}

#[test]
fn weights_over_the_binding_limit_are_split_by_rows() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut split = split_gpu();
    let mut whole = GpuBackend::new(&GpuOptions::default()).unwrap();
    let mut cpu = CpuBackend::new_exact(2).unwrap();
    let (m, k) = (300, 256);
    // Rows from every part, the first and last included.
    let ids = [0, 299, 57, 150, 1, 233, 64, 298];
    for t in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::F16,
    ] {
        let w = weight_bytes(&mut rng, t, m, k);
        assert!(w.len() as u64 > LIMIT, "{t} is not over the limit");
        // Decode (mat-vec) and prefill (tiled) kernels.
        for n in [1, 3, 70] {
            let x: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let got = run(&mut split, t, &w, (m, k), &ids, &x);
            let want = if matches!(t, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) {
                run(&mut cpu, t, &w, (m, k), &ids, &x)
            } else {
                run(&mut whole, t, &w, (m, k), &ids, &x)
            };
            let same = |a: &[f32], b: &[f32]| {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            };
            assert!(same(&got.0, &want.0), "get_rows {t} n={n}");
            assert!(same(&got.1, &want.1), "matmul {t} n={n}");
        }
    }
}

#[test]
fn a_row_over_the_binding_limit_is_refused_with_the_limit() {
    let mut g = split_gpu();
    // One F32 row of 8192 values is 32 KiB.
    let k = 8192;
    let w = TensorBytes::from_vec(vec![0; 2 * 4 * k]);
    match g.load_weight("wide", F32, 2, k, w) {
        Err(BackendError::TooLarge { limit, bytes, what }) => {
            assert_eq!(limit, LIMIT);
            assert!(bytes > limit);
            assert!(what.contains("max_storage_buffer_binding_size"), "{what}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // A split weight is read by get_rows and matmul only.
    let split = g
        .load_weight(
            "split",
            F32,
            8,
            1024,
            TensorBytes::from_vec(vec![0; 8 * 4 * 1024]),
        )
        .unwrap();
    let out = g.alloc(F32, 8, 1024).unwrap();
    assert!(g.add(split, split, out).is_err());
}

/// The f32-activation mode repacks Q4_0 and Q8_0 into superblocks per
/// part: a split weight gives the same bits as the whole one.
#[test]
fn f32_mode_split_repacked_weights_match_the_whole() {
    let f32_mode = |limit| GpuOptions {
        max_weight_binding_bytes: limit,
        quantize_activations: false,
        ..GpuOptions::default()
    };
    let mut rng = StdRng::seed_from_u64(12);
    let mut split = GpuBackend::new(&f32_mode(Some(LIMIT))).unwrap();
    let mut whole = GpuBackend::new(&f32_mode(None)).unwrap();
    // 301 rows: the parts and the whole end in partial superblocks.
    let (m, k) = (301, 256);
    let ids = [0, 300, 57, 150, 1, 233, 64, 298];
    for t in [GgmlType::Q4_0, GgmlType::Q8_0] {
        let w = weight_bytes(&mut rng, t, m, k);
        for n in [1, 3, 70] {
            let x: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let got = run(&mut split, t, &w, (m, k), &ids, &x);
            let want = run(&mut whole, t, &w, (m, k), &ids, &x);
            assert_eq!(got.0, want.0, "get_rows {t} n={n}");
            assert_eq!(got.1, want.1, "matmul {t} n={n}");
        }
    }
}
