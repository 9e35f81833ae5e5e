//! Weights over the binding limit: split by rows into parts under the limit
//! for get_rows and matmul, or refused with the limit named. The limit is
//! forced small (`GpuOptions::max_weight_binding_bytes`) so that any adapter
//! splits; results are checked against the fast CPU backend in its exact
//! mode, which the exact kernels match bit for bit (see gpu_exact.rs), and
//! against the GPU without splitting for the other weight types.
//!
//! Logits over the binding limit (`GpuOptions::max_binding_bytes`, a small
//! limit for every tensor): kept in pieces by the model's output step,
//! equal to the logits of a run without the limit.

mod common;

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
        ..GpuOptions::exact()
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
    let mut whole = GpuBackend::new(&GpuOptions::exact()).unwrap();
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

/// The fast mode repacks Q4_0 and Q8_0 into superblocks per part: a split
/// weight gives the same bits as the whole one.
#[test]
fn fast_mode_split_repacked_weights_match_the_whole() {
    let f32_mode = |limit| GpuOptions {
        max_weight_binding_bytes: limit,
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

/// SmolLM2's logits for 40 output rows (49152 × 4 bytes each, 7.5 MiB)
/// under a binding limit of 4 MiB for every tensor: 2 pieces of up to 21
/// rows, recorded in one forward pass and read back with one submission,
/// equal bit for bit to the logits of the same batch without the limit,
/// in both modes. The rows are a prompt's, each wanting logits, and the
/// pieces hold more rows than the mat-vecs take (16): the same kernels
/// run (tiled, not mat-vec) as on the whole batch. The tied output weight
/// is split under the limit too.
#[test]
fn logits_over_the_binding_limit_are_kept_in_pieces() {
    use smelt::gguf::GgufFile;
    use smelt::model::{Batch, Model, Session, SessionParams};

    const MODEL_LIMIT: u64 = 4 << 20;
    const ROWS: usize = 40;
    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let logits = |opts: GpuOptions| {
        let gpu = GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)");
        let model = Model::load(&gguf, Box::new(gpu), &mut |_, _| {}).unwrap();
        let params = SessionParams {
            n_ctx: Some(64),
            n_batch: 64,
            n_outputs: ROWS,
            ..SessionParams::default()
        };
        let mut s = Session::new(model, params).unwrap();
        let mut batch = Batch::default();
        for i in 0..ROWS {
            batch.push((i * 977 % 49152) as u32, i, 0, true);
        }
        let before = s.model().backend_stats();
        let out = s.decode(&batch).unwrap().to_vec();
        let submissions = s.model().backend_stats().submissions - before.submissions;
        (s.n_logit_pieces(), submissions, out)
    };
    for exact in [false, true] {
        let opts = GpuOptions {
            quantize_activations: exact,
            ..GpuOptions::default()
        };
        let (whole_pieces, _, whole) = logits(opts);
        let (pieces, submissions, split) = logits(GpuOptions {
            max_binding_bytes: Some(MODEL_LIMIT),
            ..opts
        });
        assert_eq!(whole_pieces, 1);
        assert_eq!(pieces, 2, "exact {exact}");
        assert_eq!(submissions, 1, "exact {exact}: one submission for the pass");
        assert_eq!(split.len(), whole.len());
        let differ = split
            .iter()
            .zip(&whole)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "exact {exact}: {differ} logits differ");
    }
}

/// A row of logits over the limit cannot be split: the session is refused
/// with the tensor and the limit named, not a panic.
#[test]
fn a_logits_row_over_the_binding_limit_is_refused() {
    use smelt::gguf::GgufFile;
    use smelt::model::{Model, Session, SessionParams};

    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    // 49152 logits are 192 KiB; weights split to fit 128 KiB parts.
    let gpu = GpuBackend::new(&GpuOptions {
        max_binding_bytes: Some(128 << 10),
        ..GpuOptions::default()
    })
    .unwrap();
    let model = Model::load(&gguf, Box::new(gpu), &mut |_, _| {}).unwrap();
    // Buffers small enough for the limit, but for the logits.
    let params = SessionParams {
        n_ctx: Some(64),
        n_batch: 8,
        ..SessionParams::default()
    };
    let err = Session::new(model, params)
        .err()
        .expect("a 192 KiB row under a 128 KiB limit");
    let msg = err.to_string();
    assert!(
        msg.contains("1x49152 F32 tensor") && msg.contains("allows 131072"),
        "{msg}"
    );
}
