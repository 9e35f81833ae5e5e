//! A server step on the GPU (lavapipe in CI): the generating sequences'
//! decode rows first, each the only row of its sequence, then a prompt
//! chunk of another. With `AttentionParams::decode_rows` the decode rows
//! are attended as decodes of one row and the chunk as a prefill from its
//! first row, so that every sequence gets the bits it gets alone (in the
//! fast and the exact mode, F32, F16 and Q8_0 caches), and the CPU's
//! values within the mode's bound.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::backend::{AttentionParams, Backend, BackendExt};
use smelt::quant::GgmlType::{self, F16, F32, Q8_0};

const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
/// Positions per slot.
const CTX: usize = 48;
const SLOTS: usize = 8;

/// The rows of one call: per sequence, its slot, first position and rows.
type Runs = [(i32, i32, usize)];

/// A step of 6 generating sequences (one row each, positions 3..47) and
/// a 20-row prompt chunk of slot 6 from position 10.
const STEP: [(i32, i32, usize); 7] = [
    (0, 47, 1),
    (3, 3, 1),
    (1, 20, 1),
    (5, 33, 1),
    (7, 12, 1),
    (2, 40, 1),
    (6, 10, 20),
];

/// Caches of random keys and values (the same on every backend).
struct Caches {
    k: Vec<f32>,
    v: Vec<f32>,
}

/// Attention of `runs` (their query rows in `q`) on `b` over `caches`
/// stored as `dtype`, the first `decode_rows` rows declared decode rows.
fn attend(
    b: &mut dyn Backend,
    caches: &Caches,
    dtype: GgmlType,
    runs: &Runs,
    q: &[f32],
    decode_rows: usize,
) -> Vec<f32> {
    let (cols, rows) = (KV_HEADS * HEAD_DIM, SLOTS * CTX);
    let all = b.alloc(GgmlType::I32, 1, rows).unwrap();
    b.write_i32(all, &(0..rows as i32).collect::<Vec<_>>())
        .unwrap();
    // Written as the model writes its cache rows.
    let mut cache = |v: &[f32]| {
        let f = b.alloc(F32, rows, cols).unwrap();
        b.write_f32(f, v).unwrap();
        let c = b.alloc(dtype, rows, cols).unwrap();
        b.set_rows(f, all, c).unwrap();
        c
    };
    let (k, v) = (cache(&caches.k), cache(&caches.v));
    let pos: Vec<i32> = runs
        .iter()
        .flat_map(|&(_, p0, n)| p0..p0 + n as i32)
        .collect();
    let seq: Vec<i32> = runs
        .iter()
        .flat_map(|&(slot, _, n)| std::iter::repeat_n(slot, n))
        .collect();
    let n = pos.len();
    let i32s = |b: &mut dyn Backend, v: &[i32]| {
        let t = b.alloc(GgmlType::I32, 1, v.len()).unwrap();
        b.write_i32(t, v).unwrap();
        t
    };
    let (pos, seq) = (i32s(b, &pos), i32s(b, &seq));
    let qt = b.alloc(F32, n, HEADS * HEAD_DIM).unwrap();
    b.write_f32(qt, q).unwrap();
    let out = b.alloc(F32, n, HEADS * HEAD_DIM).unwrap();
    b.write_f32(out, &vec![f32::NAN; n * HEADS * HEAD_DIM])
        .unwrap();
    let p = AttentionParams {
        keys: CTX,
        decode_rows,
        ..AttentionParams::new(HEADS, KV_HEADS, HEAD_DIM, CTX)
    };
    b.attention(qt, k, v, pos, seq, &p, out).unwrap();
    b.read_f32(out).unwrap()
}

/// The step's rows on `gpu` against each sequence alone, bit for bit, and
/// against `cpu` within `tol`.
fn check(gpu: &mut GpuBackend, exact: bool, cpu: &mut CpuBackend, tol: f32) {
    let mut rng = StdRng::seed_from_u64(27);
    let mut random = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect() };
    let cols = KV_HEADS * HEAD_DIM;
    let caches = Caches {
        k: random(SLOTS * CTX * cols),
        v: random(SLOTS * CTX * cols),
    };
    let row = HEADS * HEAD_DIM;
    let n: usize = STEP.iter().map(|r| r.2).sum();
    let q = random(n * row);
    let decode_rows = STEP.iter().take_while(|r| r.2 == 1).count();
    for dtype in [F32, F16, Q8_0] {
        let batched = attend(gpu, &caches, dtype, &STEP, &q, decode_rows);
        let want = attend(cpu, &caches, dtype, &STEP, &q, decode_rows);
        let worst = batched
            .iter()
            .zip(&want)
            .map(|(g, c)| (g - c).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= tol,
            "{dtype} cache, exact {exact}: GPU against CPU {worst:e} > {tol:e}"
        );
        let mut at = 0;
        for &run in &STEP {
            let alone_rows = usize::from(run.2 == 1);
            let alone = attend(
                gpu,
                &caches,
                dtype,
                &[run],
                &q[at * row..(at + run.2) * row],
                alone_rows,
            );
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&batched[at * row..(at + run.2) * row]),
                bits(&alone),
                "{dtype} cache, exact {exact}: slot {} ({} rows) in the step and alone",
                run.0,
                run.2
            );
            at += run.2;
        }
    }
}

/// The fast mode (plain f32) against the CPU's f64 reference ops.
#[test]
fn fast_mode_step_rows_get_their_bits_alone() {
    let mut gpu = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter (lavapipe in CI)");
    check(&mut gpu, false, &mut CpuBackend::reference(), 1e-5);
}

/// The exact mode (ggml's f16 query and value sums; gpu_exact holds its
/// bits to the CPU's) against the same reference.
#[test]
fn exact_mode_step_rows_get_their_bits_alone() {
    let mut gpu = GpuBackend::new(&GpuOptions::exact()).expect("a GPU adapter (lavapipe in CI)");
    check(&mut gpu, true, &mut CpuBackend::reference(), 2e-3);
}
