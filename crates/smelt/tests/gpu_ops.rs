//! The differential op table: every GPU op against the CPU reference op, in
//! the spirit of ggml's test-backend-ops.
//!
//! - Random inputs, fresh every run; the seed is printed (set SMELT_SEED to
//!   replay one).
//! - A sweep of shapes, odd ones included (sizes no workgroup divides), and
//!   every weight type, with quantized blocks built from random bytes and
//!   sane scales, so the CPU and GPU decode the very same GGUF blocks.
//! - Error = normalised mean squared error against the CPU, with a threshold
//!   per op and type; NaN or Inf fails.
//! - GPU outputs are poisoned (NaN) before each run and carry guard rows
//!   after the view the op writes: an unwritten element or an out-of-bounds
//!   write fails.
//! - Run twice: with the adapter's subgroups and f16, and with both off (the
//!   portable fallbacks).
//! - `SMELT_OP_PERF=1 cargo test --release --test gpu_ops -- --nocapture`
//!   also prints the time per op on each backend.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::kernels::attention::AttentionKernel;
use smelt::backend::gpu::kernels::attention_coop::AttentionCoop;
use smelt::backend::gpu::kernels::copy::CopyKernel;
use smelt::backend::gpu::kernels::elementwise::{Elementwise, ElementwiseKernel};
use smelt::backend::gpu::kernels::matmul::MatMul;
use smelt::backend::gpu::kernels::matmul_coop::{CoopTile, MatMulCoop, Multi};
use smelt::backend::gpu::kernels::norm_half::AddRmsNormHalf;
use smelt::backend::gpu::kernels::split_sums::SplitSums;
use smelt::backend::gpu::{GpuBackend, GpuOptions, Kernel, WEIGHT_TYPES};
use smelt::backend::{
    AttentionParams, Backend, RopeMode, RopeParams, Tensor, WeightData, WeightInput,
};
use smelt::quant::GgmlType::{self, F16, F32, I32};

/// Rows after every GPU output that no op may touch.
const GUARD: usize = 3;
/// NaN as an f32, and both halves NaN as f16s.
const POISON: u32 = 0x7fc0_7e01;

struct Bench {
    rng: StdRng,
    cpu: CpuBackend,
    gpu: GpuBackend,
    perf: bool,
    failures: Vec<String>,
    cases: usize,
}

/// One tensor on both backends; `gpu` is the view the op sees, `gpu_full`
/// includes the guard rows.
#[derive(Clone, Copy)]
struct Pair {
    cpu: Tensor,
    gpu: Tensor,
    gpu_full: Tensor,
}

impl Bench {
    fn new(seed: u64, opts: GpuOptions) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            cpu: CpuBackend::reference(),
            gpu: GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)"),
            perf: std::env::var_os("SMELT_OP_PERF").is_some(),
            failures: Vec::new(),
            cases: 0,
        }
    }

    fn randn(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| self.rng.gen_range(-1.0f32..1.0) * scale)
            .collect()
    }

    /// An input with the same bytes on both backends.
    fn input(&mut self, dtype: GgmlType, rows: usize, cols: usize, bytes: &[u8]) -> Pair {
        let cpu = self.cpu.alloc(dtype, rows, cols).unwrap();
        let gpu = self.gpu.alloc(dtype, rows, cols).unwrap();
        self.cpu.write(cpu, bytes).unwrap();
        self.gpu.write(gpu, bytes).unwrap();
        Pair {
            cpu,
            gpu,
            gpu_full: gpu,
        }
    }

    fn f32s(&mut self, rows: usize, cols: usize, scale: f32) -> Pair {
        let v = self.randn(rows * cols, scale);
        self.input(F32, rows, cols, bytemuck::cast_slice(&v))
    }

    fn i32s(&mut self, values: &[i32]) -> Pair {
        self.input(I32, 1, values.len(), bytemuck::cast_slice(values))
    }

    /// An output: zero on the CPU; poisoned, with guard rows, on the GPU.
    fn output(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Pair {
        self.output_in(dtype, rows, cols, false)
    }

    /// An output from `alloc_scratch`: one a backend may leave unwritten
    /// where nothing reads it after.
    fn scratch(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Pair {
        self.output_in(dtype, rows, cols, true)
    }

    fn output_in(&mut self, dtype: GgmlType, rows: usize, cols: usize, scratch: bool) -> Pair {
        let (cpu, full) = if scratch {
            let cpu = self.cpu.alloc_scratch(dtype, rows, cols).unwrap();
            (
                cpu,
                self.gpu.alloc_scratch(dtype, rows + GUARD, cols).unwrap(),
            )
        } else {
            let cpu = self.cpu.alloc(dtype, rows, cols).unwrap();
            (cpu, self.gpu.alloc(dtype, rows + GUARD, cols).unwrap())
        };
        let words = full.n_bytes().div_ceil(4);
        let poison = vec![POISON; words];
        self.gpu
            .write(full, &bytemuck::cast_slice(&poison)[..full.n_bytes()])
            .unwrap();
        Pair {
            cpu,
            gpu: full.with_rows(rows),
            gpu_full: full,
        }
    }

    /// Zeroes an output on both backends (a cache that ops write rows of).
    fn zero(&mut self, t: Pair) {
        let zeros = vec![0u8; t.gpu.n_bytes()];
        self.cpu.write(t.cpu, &zeros).unwrap();
        self.gpu.write(t.gpu, &zeros).unwrap();
    }

    /// A weight of random GGUF blocks with finite scales.
    fn weight(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Pair {
        let bytes = random_blocks(&mut self.rng, dtype, rows * cols);
        let cpu = self
            .cpu
            .load_weight("w", dtype, rows, cols, WeightData::from_vec(bytes.clone()))
            .unwrap();
        let gpu = self
            .gpu
            .load_weight("w", dtype, rows, cols, WeightData::from_vec(bytes))
            .unwrap();
        Pair {
            cpu,
            gpu,
            gpu_full: gpu,
        }
    }

    /// Weights of one input, `rows` of `cols` each, of random GGUF blocks,
    /// loaded as the model loads Q, K and V (`load_joined`): side by side in
    /// one GPU buffer where the GPU can.
    fn joined_weights(&mut self, dtype: GgmlType, rows: &[usize], cols: usize) -> Vec<Pair> {
        let ws: Vec<WeightInput> = rows
            .iter()
            .map(|&r| WeightInput {
                name: "w".into(),
                dtype,
                rows: r,
                cols,
                data: WeightData::from_vec(random_blocks(&mut self.rng, dtype, r * cols)),
            })
            .collect();
        let cpu = self.cpu.load_joined(&ws).unwrap();
        let gpu = self.gpu.load_joined(&ws).unwrap();
        cpu.into_iter()
            .zip(gpu)
            .map(|(cpu, gpu)| Pair {
                cpu,
                gpu,
                gpu_full: gpu,
            })
            .collect()
    }

    /// Runs `op` on both backends and compares `out` (F32, F16 or I32).
    fn check(
        &mut self,
        name: &str,
        tol: f64,
        out: Pair,
        op: impl Fn(&mut dyn Backend, bool) -> smelt::backend::Result<()>,
    ) {
        self.cases += 1;
        let t0 = Instant::now();
        op(&mut self.cpu, false).unwrap_or_else(|e| panic!("{name}: CPU: {e}"));
        let cpu_time = t0.elapsed();
        if let Err(e) = op(&mut self.gpu, true) {
            self.failures.push(format!("{name}: GPU error: {e}"));
            return;
        }
        let want = values(out.cpu.dtype, &read_bytes(&mut self.cpu, out.cpu));
        let full = read_bytes(&mut self.gpu, out.gpu_full);
        let (view, guard) = full.split_at(out.gpu.n_bytes());
        let poison = POISON.to_le_bytes();
        if let Some(i) = (0..guard.len()).find(|&i| guard[i] != poison[(view.len() + i) % 4]) {
            self.failures
                .push(format!("{name}: wrote past its output (guard byte {i})"));
        }
        let got = values(out.gpu.dtype, view);
        if let Some(i) = got.iter().position(|v| !v.is_finite()) {
            self.failures.push(format!(
                "{name}: element {i} is {} (unwritten or NaN/Inf)",
                got[i]
            ));
            return;
        }
        let err = nmse(&got, &want);
        // NaN errors fail too: they are not <= tol.
        if err.partial_cmp(&tol) != Some(std::cmp::Ordering::Less) && err != tol {
            self.failures
                .push(format!("{name}: normalised error {err:.3e} > {tol:.0e}"));
        }
        if self.perf {
            let reps = 20;
            self.gpu.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..reps {
                op(&mut self.gpu, true).unwrap();
            }
            self.gpu.synchronize().unwrap();
            let gpu_time = t.elapsed() / reps;
            println!("perf {name:<48} gpu {gpu_time:>10.2?}  cpu-ref {cpu_time:>10.2?}");
        }
    }
}

impl Bench {
    /// Fails the test with every failed case, naming the seed.
    fn assert_passed(&self, seed: u64) {
        assert!(
            self.failures.is_empty(),
            "seed {seed}: {} of {} cases failed:\n{}",
            self.failures.len(),
            self.cases,
            self.failures.join("\n")
        );
    }
}

/// A fresh seed and a bench of the f32-activation mode with the adapter's
/// features.
fn f32_mode_bench() -> (u64, Bench) {
    let seed = seed();
    let opts = GpuOptions {
        quantize_activations: false,
        ..GpuOptions::default()
    };
    (seed, Bench::new(seed, opts))
}

/// As `f32_mode_bench`, profiling, so that a test can tell which kernels
/// ran (`kernels_run`).
fn f32_mode_profiled_bench() -> (u64, Bench) {
    let seed = seed();
    let opts = GpuOptions {
        quantize_activations: false,
        profile: true,
        ..GpuOptions::default()
    };
    (seed, Bench::new(seed, opts))
}

/// The kernels a profiling bench's GPU has run, each once.
fn kernels_run(b: &Bench) -> Vec<Kernel> {
    b.gpu.kernels_run()
}

/// Whether any kernel of `used` is a `GluHalf` (the GLU apart, writing
/// the next coop matmul's f16 blocks).
fn ran_glu_half(used: &[Kernel]) -> bool {
    used.iter()
        .any(|k| matches!(k, Kernel::Elementwise(ElementwiseKernel::GluHalf(_))))
}

/// Whether the GPU splits a prefill matmul of `m` rows, `n` tokens and
/// `k` values along k on cooperative matrices (`CoopTile::split`): a
/// `SplitSums` dispatch after it, where nothing takes the sums in.
fn coop_splits(b: &Bench, m: usize, n: usize, k: usize) -> bool {
    let fs = b.gpu.features().coop;
    let huge = b.gpu.coop_huge();
    fs != 0
        && (m * n).is_multiple_of(4)
        && CoopTile::pick(fs, m, n, huge).split(fs, m, n, k, huge).1 > 1
}

/// The dispatches one run of `op` takes on the GPU.
fn gpu_dispatches(
    b: &mut Bench,
    op: impl Fn(&mut dyn Backend, bool) -> smelt::backend::Result<()>,
) -> u64 {
    let before = b.gpu.stats().dispatches;
    op(&mut b.gpu, true).unwrap();
    b.gpu.synchronize().unwrap();
    b.gpu.stats().dispatches - before
}

/// The weight types whose decode mat-vecs in the f32-activation mode take
/// packed integer dot products on Q8-rounded activations, as llama.cpp's
/// GPU ones do: every legacy quant and K-quant that `WEIGHT_TYPES` has.
const DOT_TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Whether the f32-activation mode rounds a matmul's activations to Q8
/// blocks first: decode and short batches (up to `matvec_tokens`) of the
/// `DOT_TYPES`.
fn f32_mode_rounds(b: &Bench, t: GgmlType, n: usize) -> bool {
    DOT_TYPES.contains(&t) && n <= matvec_tokens(b)
}

/// The most tokens the f32 mode's matmuls take as mat-vecs: 16, or 12
/// where the prefill tiles are cooperative matrices.
fn matvec_tokens(b: &Bench) -> usize {
    if b.gpu.features().coop != 0 { 12 } else { 16 }
}

/// On the CPU reference, `src` rounded as the GPU rounds it before such a
/// mat-vec, written to `dst`: blocks of 32, d = f16(amax / 127), q =
/// round_ties_even(x · 127 / amax), values q · d.
fn cpu_q8_rounded(
    be: &mut dyn Backend,
    src: Tensor,
    dst: Tensor,
) -> smelt::backend::Result<Tensor> {
    let x = values(F32, &read_bytes(be, src));
    let rounded: Vec<f32> = x
        .chunks(32)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
            let d = half::f16::from_f32(amax / 127.0).to_f32();
            b.iter().map(move |v| (v * id).round_ties_even() * d)
        })
        .collect();
    be.write(dst, bytemuck::cast_slice(&rounded))?;
    Ok(dst)
}

fn read_bytes(b: &mut dyn Backend, t: Tensor) -> Vec<u8> {
    let mut bytes = vec![0u8; t.n_bytes()];
    b.read(t, &mut bytes).unwrap();
    bytes
}

/// Values as f32 for comparison; I32 keeps its bits (so poison reads as
/// NaN and any difference counts).
fn values(dtype: GgmlType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        F32 | I32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => panic!("cannot compare {other}"),
    }
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(*g), f64::from(*w));
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 { num } else { num / den }
}

/// Random blocks of `dtype` holding `n` values: random quant bytes, and
/// every f16 scale field set to a small finite value.
fn random_blocks(rng: &mut StdRng, dtype: GgmlType, n: usize) -> Vec<u8> {
    let f16 = |rng: &mut StdRng, lo: f32, hi: f32| {
        half::f16::from_f32(rng.gen_range(lo..hi)).to_le_bytes()
    };
    match dtype {
        F32 => (0..n)
            .flat_map(|_| rng.gen_range(-1.0f32..1.0).to_le_bytes())
            .collect(),
        F16 => (0..n).flat_map(|_| f16(rng, -1.0, 1.0)).collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.gen_range(-1.0f32..1.0)).to_le_bytes())
            .collect(),
        _ => {
            let blocks = n / dtype.block_size();
            let size = dtype.type_size();
            // (offset, is a min/offset rather than a positive scale)
            let scales: &[(usize, bool)] = match dtype {
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[(0, false)],
                GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, false), (2, true)],
                GgmlType::Q4_K | GgmlType::Q5_K => &[(0, false), (2, false)],
                GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[(0, false)],
                GgmlType::MXFP4 => &[],
                GgmlType::Q2_K => &[(80, false), (82, false)],
                GgmlType::Q3_K => &[(108, false)],
                GgmlType::Q6_K => &[(208, false)],
                other => panic!("no block generator for {other}"),
            };
            let mut out = vec![0u8; blocks * size];
            rng.fill(&mut out[..]);
            for b in 0..blocks {
                for &(off, signed) in scales {
                    let v = if signed {
                        f16(rng, -0.05, 0.05)
                    } else {
                        f16(rng, 0.001, 0.05)
                    };
                    out[b * size + off..b * size + off + 2].copy_from_slice(&v);
                }
                if dtype == GgmlType::MXFP4 {
                    // The shared exponent: scales 2^-10 .. 2^-5.
                    out[b * size] = rng.gen_range(118..124);
                }
            }
            out
        }
    }
}

/// Columns for a weight type: whole blocks, and for the plain types a
/// length no group of 8 divides.
fn weight_cols(t: GgmlType) -> usize {
    match t {
        F32 | F16 | GgmlType::BF16 => 67,
        t if t.block_size() == 256 => 512,
        _ => 96,
    }
}

/// Tolerance of a matmul on a weight type. By default the GPU rounds the
/// activations as ggml does (8-bit blocks, or f16 for F16 weights), which
/// the f32 CPU reference does not: ggml's test-backend-ops allows 5e-4.
fn matmul_tol(t: GgmlType) -> f64 {
    match t {
        F32 => 1e-9,
        F16 | GgmlType::BF16 => 1e-6,
        _ => 5e-4,
    }
}

fn run_table(b: &mut Bench) {
    // get_rows and matmul on every weight type.
    for t in WEIGHT_TYPES {
        let k = weight_cols(t);
        let table = b.weight(t, 37, k);
        for n in [1usize, 6] {
            let ids: Vec<i32> = (0..n).map(|_| b.rng.gen_range(0..37)).collect();
            let ids = b.i32s(&ids);
            let out = b.output(F32, n, k);
            b.check(&format!("get_rows {t} n={n} k={k}"), 1e-12, out, |be, g| {
                let p = |x: Pair| if g { x.gpu } else { x.cpu };
                be.get_rows(p(table), p(ids), p(out))
            });
        }
        for (m, n) in [(67usize, 1usize), (130, 3), (67, 70)] {
            let w = b.weight(t, m, k);
            let x = b.f32s(n, k, 1.0);
            let out = b.output(F32, n, m);
            b.check(
                &format!("matmul {t} m={m} k={k} n={n}"),
                matmul_tol(t),
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.matmul(p(w), p(x), p(out))
                },
            );
        }
    }

    // Norm, softmax, argmax.
    for (rows, cols) in [(1usize, 67usize), (5, 300)] {
        let x = b.f32s(rows, cols, 3.0);
        let w = b.f32s(1, cols, 1.0);
        for weight in [false, true] {
            let out = b.output(F32, rows, cols);
            b.check(
                &format!("rms_norm {rows}x{cols} weight={weight}"),
                1e-10,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.rms_norm(p(x), weight.then_some(p(w)), 1e-5, p(out))
                },
            );
        }
        let out = b.output(F32, rows, cols);
        b.check(&format!("softmax {rows}x{cols}"), 1e-10, out, |be, g| {
            let p = |x: Pair| if g { x.gpu } else { x.cpu };
            be.softmax(p(x), p(out))
        });
    }
    let mut rows = b.randn(4 * 1001, 5.0);
    rows[1001..2002].fill(0.5); // a row of ties: the first index wins
    let x = b.input(F32, 4, 1001, bytemuck::cast_slice(&rows));
    let out = b.output(I32, 1, 4);
    b.check("argmax 4x1001", 0.0, out, |be, g| {
        let p = |x: Pair| if g { x.gpu } else { x.cpu };
        be.argmax(p(x), p(out))
    });

    // Elementwise, with broadcast rows and odd sizes.
    for (rows, cols) in [(1usize, 67usize), (3, 1000)] {
        let a = b.f32s(rows, cols, 4.0);
        let c = b.f32s(rows, cols, 4.0);
        let row = b.f32s(1, cols, 4.0);
        let ops: [(&str, f64); 8] = [
            ("add", 1e-12),
            ("add_row", 1e-12),
            ("mul", 1e-12),
            ("mul_row", 1e-12),
            ("scale", 1e-12),
            // The GPU's tanh is the driver's, not libm's.
            ("softcap", 1e-10),
            ("silu_mul", 1e-10),
            ("gelu_mul", 1e-8),
        ];
        for (name, tol) in ops {
            let out = b.output(F32, rows, cols);
            b.check(&format!("{name} {rows}x{cols}"), tol, out, |be, g| {
                let p = |x: Pair| if g { x.gpu } else { x.cpu };
                match name {
                    "add" => be.add(p(a), p(c), p(out)),
                    "add_row" => be.add(p(a), p(row), p(out)),
                    "mul" => be.mul(p(a), p(c), p(out)),
                    "mul_row" => be.mul(p(a), p(row), p(out)),
                    "scale" => be.scale(p(a), 0.37, p(out)),
                    // A cap inside the values' range, so both the linear
                    // part and the saturation are taken.
                    "softcap" => be.softcap(p(a), 1.5, p(out)),
                    "silu_mul" => be.silu_mul(p(a), p(c), p(out)),
                    _ => be.gelu_mul(p(a), p(c), p(out)),
                }
            });
        }
    }

    // Copy and convert, on an odd element count.
    for (src_t, dst_t) in [(F32, F16), (F16, F32), (F32, F32), (F16, F16)] {
        let v = b.randn(3 * 67, 2.0);
        let bytes: Vec<u8> = match src_t {
            F16 => v
                .iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect(),
            _ => bytemuck::cast_slice(&v).to_vec(),
        };
        let src = b.input(src_t, 3, 67, &bytes);
        let out = b.output(dst_t, 3, 67);
        b.check(
            &format!("copy {src_t}->{dst_t} 3x67"),
            1e-12,
            out,
            |be, g| {
                let p = |x: Pair| if g { x.gpu } else { x.cpu };
                be.copy(p(src), p(out))
            },
        );
    }

    rope_cases(b);
    kv_cases(b);
    if b.perf {
        model_shapes(b);
    }
}

/// Perf mode only: Llama-8B-sized decode mat-vecs.
fn decode_shapes(b: &mut Bench) {
    for t in [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        for (m, k) in [(4096usize, 4096usize), (14336, 4096), (4096, 14336)] {
            let w = b.weight(t, m, k);
            let x = b.f32s(1, k, 1.0);
            let out = b.output(F32, 1, m);
            b.check(
                &format!("matmul {t} m={m} k={k} n=1"),
                matmul_tol(t),
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.matmul(p(w), p(x), p(out))
                },
            );
        }
    }
}

/// Perf mode only: SmolLM2-sized matmuls (decode and a 512-token prefill).
fn model_shapes(b: &mut Bench) {
    for t in [F32, F16] {
        for (m, k, n) in [
            (1536usize, 576usize, 1usize),
            (1536, 576, 512),
            (576, 1536, 512),
        ] {
            let w = b.weight(t, m, k);
            let x = b.f32s(n, k, 1.0);
            let out = b.output(F32, n, m);
            b.check(
                &format!("matmul {t} m={m} k={k} n={n}"),
                matmul_tol(t) * 10.0,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.matmul(p(w), p(x), p(out))
                },
            );
        }
    }
}

fn rope_cases(b: &mut Bench) {
    let (n_heads, head_dim, rows) = (11usize, 64usize, 5usize);
    let pos: Vec<i32> = (0..rows).map(|_| b.rng.gen_range(0..300)).collect();
    let pos = b.i32s(&pos);
    let x = b.f32s(rows, n_heads * head_dim, 1.0);
    let ffv: Vec<f32> = (0..head_dim / 2)
        .map(|_| b.rng.gen_range(1.0f32..8.0))
        .collect();
    let ff = b.input(F32, 1, head_dim / 2, bytemuck::cast_slice(&ffv));
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_dims, factors) in [(64usize, false), (32, false), (64, true)] {
            let out = b.output(F32, rows, n_heads * head_dim);
            b.check(
                &format!("rope {mode:?} n_dims={n_dims} factors={factors}"),
                1e-9,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    let params = RopeParams {
                        mode,
                        n_heads,
                        head_dim,
                        n_dims,
                        freq_base: 10000.0,
                        freq_scale: 1.0,
                        freq_factors: factors.then_some(p(ff)),
                        attn_factor: 1.0,
                    };
                    be.rope(p(x), p(pos), &params, p(out))
                },
            );
        }
    }
}

fn kv_cases(b: &mut Bench) {
    let (n_heads, n_kv, hd, ctx, slots) = (4usize, 2usize, 64usize, 70usize, 2usize);
    for cache_t in [F32, F16] {
        // set_rows into a cache holding random data: untouched rows must
        // keep it.
        let (cache, bytes) = random_cache(b, cache_t, slots * ctx, n_kv * hd);
        let src = b.f32s(5, n_kv * hd, 1.0);
        let ids = b.i32s(&[3, 71, 0, 139, 64]);
        b.check(&format!("set_rows {cache_t}"), 1e-12, cache, |be, g| {
            let p = |x: Pair| if g { x.gpu } else { x.cpu };
            be.set_rows(p(src), p(ids), p(cache))
        });

        let kc = b.input(cache_t, slots * ctx, n_kv * hd, &bytes);
        let (vc, _) = random_cache(b, cache_t, slots * ctx, n_kv * hd);
        // Decode (one row per slot) and a prefill of 37 rows in slot 1.
        let cases: [(&str, Vec<i32>, Vec<i32>); 2] = [
            ("decode", vec![69, 5], vec![0, 1]),
            ("prefill", (0..37).collect(), vec![1; 37]),
        ];
        for (kind, pos_v, seq_v) in cases {
            let n = pos_v.len();
            let pos = b.i32s(&pos_v);
            let seq = b.i32s(&seq_v);
            let q = b.f32s(n, n_heads * hd, 1.0);
            for (window, softcap) in [(None, None), (Some(16), None), (None, Some(2.0f32))] {
                let out = b.output(F32, n, n_heads * hd);
                let name =
                    format!("attention {cache_t} {kind} window={window:?} softcap={softcap:?}");
                // With an F16 cache the GPU rounds as ggml does (query and
                // accumulator to f16); the reference does not.
                let tol = if cache_t == F16 { 1e-5 } else { 1e-8 };
                b.check(&name, tol, out, |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    let params = AttentionParams {
                        window,
                        softcap,
                        ..AttentionParams::new(n_heads, n_kv, hd, ctx)
                    };
                    be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(out))
                });
            }
        }
    }
}

/// A KV cache of random values in `t` (F32 or F16) on both backends, and
/// its bytes.
fn random_cache(b: &mut Bench, t: GgmlType, rows: usize, cols: usize) -> (Pair, Vec<u8>) {
    let v = b.randn(rows * cols, 1.0);
    cache_of(b, t, rows, cols, &v)
}

/// A KV cache of type t (F32 or F16) holding `v`, and its bytes.
fn cache_of(b: &mut Bench, t: GgmlType, rows: usize, cols: usize, v: &[f32]) -> (Pair, Vec<u8>) {
    let bytes: Vec<u8> = match t {
        F16 => v
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect(),
        _ => bytemuck::cast_slice(v).to_vec(),
    };
    (b.input(t, rows, cols, &bytes), bytes)
}

fn seed() -> u64 {
    match std::env::var("SMELT_SEED") {
        Ok(s) => s.parse().expect("SMELT_SEED is a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

fn run(label: &str, opts: GpuOptions) {
    let seed = seed();
    let mut b = Bench::new(seed, opts);
    println!(
        "{label}: seed {seed} (SMELT_SEED={seed} replays), adapter {}, features {:?}",
        b.gpu.adapter().name,
        b.gpu.features()
    );
    run_table(&mut b);
    assert!(b.cases > 80, "only {} cases ran", b.cases);
    assert!(
        b.failures.is_empty(),
        "{label} (seed {seed}): {} of {} cases failed:\n{}",
        b.failures.len(),
        b.cases,
        b.failures.join("\n")
    );
    println!("{label}: {} cases passed", b.cases);
}

#[test]
fn ops_match_cpu_with_adapter_features() {
    run(
        "exact mode, subgroups+f16 where available",
        GpuOptions::exact(),
    );
}

#[test]
fn ops_match_cpu_without_subgroups_or_f16() {
    run(
        "portable fallbacks, bounds-checked kernels, f32 activations",
        GpuOptions {
            allow_subgroups: false,
            allow_shader_f16: false,
            allow_zero_copy: false,
            shader_bounds_checks: true,
            quantize_activations: false,
            ..GpuOptions::default()
        },
    );
}

/// Decode mat-vecs on f32 activations with the adapter's features (the
/// runs above cover them without subgroups only): rows spanning several
/// sweeps of a workgroup (matvec_blocks.wgsl walks 64 blocks per sweep),
/// blocks at both word alignments, a partial last group of 4 rows, and a
/// part of a wider output (the split-weight path).
#[test]
fn decode_matvec_f32_acts_with_adapter_features() {
    let (seed, mut b) = f32_mode_bench();
    for t in WEIGHT_TYPES {
        // 65 blocks of 32, or 9 of 256: one more than a sweep's worth.
        let k = if t.block_size() == 256 { 2304 } else { 2080 };
        // And a row of over 4 sweeps of the mat-vec's 128 invocations (its
        // steps of four blocks, or units of 64 for the K-quants).
        let long = if t.block_size() == 256 { 33024 } else { 16416 };
        // Rows of 2 and 3 blocks of 32 (a small model's narrow weights).
        let short: &[(usize, usize, usize)] = if t.block_size() == 32 {
            &[
                (9, 1, 64),
                (6, 3, 96),
                (64, 1, 64),
                (64, 1, 96),
                (256, 1, 96),
            ]
        } else {
            &[]
        };
        // The most tokens the mat-vecs take.
        let shapes = [
            (1usize, 1usize, k),
            (7, 1, k),
            (130, 4, k),
            (5, 2, long),
            (37, matvec_tokens(&b), k),
        ];
        for &(m, n, k) in shapes.iter().chain(short) {
            let w = b.weight(t, m, k);
            let (x, xr) = (b.f32s(n, k, 1.0), b.output(F32, n, k));
            let out = b.output(F32, n, m);
            let rounds = f32_mode_rounds(&b, t, n);
            b.check(
                &format!("matvec {t} m={m} k={k} n={n}"),
                // Only the summation order differs (one row's error is a
                // single ratio, cancellation included); Q8 quants
                // computed on both sides may rarely round apart.
                if rounds { 1e-6 } else { 1e-7 },
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    let x = if rounds && !g {
                        cpu_q8_rounded(be, x.cpu, xr.cpu)?
                    } else {
                        p(x)
                    };
                    be.matmul(p(w), x, p(out))
                },
            );
        }
    }
    if b.perf {
        decode_shapes(&mut b);
    }
    b.assert_passed(seed);
    println!("{} decode cases passed", b.cases);
}

/// Prefill matmuls on f32 activations with the adapter's features: the
/// cooperative-matrix kernel where the adapter has one (f16 operands, f32
/// sums; tiles of 32 tokens below 96, of 128 from there, of 128 rows × 256
/// tokens from 8192 rows and 256 tokens: all here), the tiled f32 kernel
/// elsewhere. Shapes off the tile sizes in rows and tokens, k over several
/// steps of 32. Every shape against the CPU, and which kernels ran: each
/// tile for every type.
#[test]
fn prefill_matmul_f32_acts_with_adapter_features() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let coop = b.gpu.features().coop;
    println!(
        "seed {seed}, adapter {}, cooperative matrices {coop}",
        b.gpu.adapter().name
    );
    // f16 operands: each product carries two roundings of 2^-11.
    let tol = if coop != 0 { 2e-6 } else { 1e-8 };
    for t in WEIGHT_TYPES {
        let k0 = if t.block_size() == 256 { 512 } else { 160 };
        // Short tiles (n < 96; k split in two from k = 512), slim ones (few
        // tiles) and, where the adapter has cooperative matrices, short
        // tiles of k in one part and in 8, wide ones (132 tiles or more),
        // huge ones, and huge ones split along a long k.
        let mut shapes = vec![
            (130usize, 70usize, k0),
            (64, 64, k0),
            (67, 17, k0),
            (200, 129, k0),
        ];
        if coop != 0 {
            let k1 = t.block_size().max(160);
            shapes.extend([
                (70, 40, k1),
                (300, 40, 2048),
                (4200, 129, k0),
                (8200, 260, k0),
                (4300, 256, 2048),
            ]);
        }
        for (m, n, k) in shapes {
            let w = b.weight(t, m, k);
            let x = b.f32s(n, k, 1.0);
            let out = b.output(F32, n, m);
            b.check(
                &format!("matmul {t} m={m} k={k} n={n}"),
                tol,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.matmul(p(w), p(x), p(out))
                },
            );
        }
    }
    b.assert_passed(seed);
    println!("{} prefill cases passed", b.cases);
    let used = kernels_run(&b);
    let huge = b.gpu.coop_huge();
    for t in WEIGHT_TYPES {
        if coop == 0 {
            assert!(
                used.contains(&Kernel::MatMul(MatMul(t))),
                "seed {seed}: {t}: kernels run: {used:?}"
            );
            continue;
        }
        for (tile, want) in [
            (CoopTile::Short, true),
            (CoopTile::Slim, true),
            (CoopTile::Wide, true),
            (CoopTile::Huge, huge),
            (CoopTile::HugeSplit, huge),
            (CoopTile::ShortSplit, true),
        ] {
            let multi = Multi::One;
            assert_eq!(
                used.contains(&Kernel::MatMulCoop(MatMulCoop { t, tile, multi })),
                want,
                "seed {seed}: {t} {tile:?}: kernels run: {used:?}"
            );
        }
    }
}

/// The f32-activation mode fuses a residual add with the rms_norm of its
/// sum (`AddRmsNorm`), in place as the models call it: both the sum and
/// the norm against the CPU.
#[test]
fn f32_mode_residual_add_fused_with_norm() {
    let (seed, mut b) = f32_mode_bench();
    for (rows, cols) in [(1usize, 576usize), (5, 2048), (3, 67)] {
        let x = b.f32s(rows, cols, 1.0);
        let r = b.f32s(rows, cols, 1.0);
        let w = b.f32s(1, cols, 1.0);
        let h = b.output(F32, rows, cols);
        b.check(&format!("add+rms_norm {rows}x{cols}"), 1e-10, h, |be, g| {
            let p = |t: Pair| if g { t.gpu } else { t.cpu };
            be.add(p(x), p(r), p(x))?;
            be.rms_norm(p(x), Some(p(w)), 1e-5, p(h))
        });
        // The sum itself (x += r ran once per backend above).
        let sum = b.output(F32, rows, cols);
        b.check(&format!("sum {rows}x{cols}"), 1e-12, sum, |be, g| {
            let p = |t: Pair| if g { t.gpu } else { t.cpu };
            be.copy(p(x), p(sum))
        });
    }
    b.assert_passed(seed);
}

/// Prefill in the f32-activation mode: a residual add and rms_norm before
/// a matmul on cooperative matrices also write the matmul's f16 input
/// (`AddRmsNormHalf`, with fast math): one dispatch for the three, and one
/// for the matmul, where a `HalfBlocks` copy would be one more. The sum,
/// the norm and the matmul against the CPU, the dispatch count, and which
/// kernel ran; rows of 80 words, and of 1040 (more than the 1024 words
/// that norm_half.wgsl's invocations keep in registers).
#[test]
fn f32_mode_prefill_add_norm_writes_the_coop_matmul_input() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let f = b.gpu.features();
    let fused = f.coop != 0 && f.fast_math;
    let cases = [
        (GgmlType::Q4_0, 130usize, 320usize, 96usize),
        (GgmlType::Q4_1, 130, 320, 96),
        (GgmlType::Q4_0, 20, 4160, 64),
    ];
    for (t, n, k, m) in cases {
        let (x, r, nw) = (b.f32s(n, k, 1.0), b.f32s(n, k, 1.0), b.f32s(1, k, 1.0));
        let w = b.weight(t, m, k);
        let (h, sum, out) = (
            b.output(F32, n, k),
            b.output(F32, n, k),
            b.output(F32, n, m),
        );
        // As the models call them: x += r in place, then its norm; x is
        // copied out first, so every run starts from the same x.
        let layer = move |be: &mut dyn Backend, g: bool| {
            let p = |t: Pair| if g { t.gpu } else { t.cpu };
            be.copy(p(x), p(sum))?;
            be.add(p(sum), p(r), p(sum))?;
            be.rms_norm(p(sum), Some(p(nw)), 1e-5, p(h))?;
            be.matmul(p(w), p(h), p(out))
        };
        let name = format!("{t} add + rms_norm + matmul n={n} k={k}");
        let tol = if f.coop != 0 { 2e-6 } else { 1e-8 };
        b.check(&format!("{name}: out"), tol, out, layer);
        b.check(&format!("{name}: norm"), 1e-10, h, layer);
        b.check(&format!("{name}: sum"), 1e-12, sum, layer);
        // The copy, the add and norm, and the matmul; with cooperative
        // matrices but no fusing, a HalfBlocks copy too; a matmul split
        // along k, its sums added.
        let want = if f.coop != 0 && !fused { 4 } else { 3 } + u64::from(coop_splits(&b, m, n, k));
        assert_eq!(gpu_dispatches(&mut b, layer), want, "{name}");
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    let add_norm_half = used.iter().any(|k| matches!(k, Kernel::NormHalf(_)));
    let half_blocks = used.contains(&Kernel::Copy(CopyKernel::HalfBlocks));
    assert_eq!(
        (add_norm_half, half_blocks),
        (fused, f.coop != 0 && !fused),
        "seed {seed}: kernels run: {used:?}"
    );
}

/// Prefill in the f32-activation mode, where the adapter holds huge tiles
/// (else smaller sizes, and no split): a matmul split along k (`HugeSplit`)
/// leaves its second half's sums to the residual add and norm after it,
/// which take them in where they write the next coop matmul's f16 blocks
/// (`AddRmsNormHalf` with `sums`), or else add them first (`SplitSums`).
/// The projection, the sum, the norm and the next matmul against the CPU,
/// with the projection a scratch buffer (which the add may leave
/// unwritten) or not, and with nothing after the add; the dispatch count
/// and which kernels ran.
#[test]
fn f32_mode_prefill_split_sums_join_the_add_norm() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let f = b.gpu.features();
    let split = f.coop != 0 && b.gpu.coop_huge();
    // Wide tiles enough to split, huge ones too few to fill an H200.
    let (n, k, m, m2) = if split {
        (512usize, 2048usize, 4096usize, 64usize)
    } else {
        (130, 320, 96, 64)
    };
    let t = GgmlType::Q4_0;
    let (x, a, nw) = (b.f32s(n, m, 1.0), b.f32s(n, k, 1.0), b.f32s(1, m, 1.0));
    let (wp, w2) = (b.weight(t, m, k), b.weight(t, m2, m));
    let (proj, sum) = (b.output(F32, n, m), b.output(F32, n, m));
    let scratch_proj = b.scratch(F32, n, m);
    let (h, out) = (b.output(F32, n, m), b.output(F32, n, m2));
    // As the models call them: proj = a · wpᵀ, x += proj in place (x
    // copied to sum first, so every run starts from the same x), its norm
    // and the next matmul; `upto` 0 stops after the add.
    let layer = move |be: &mut dyn Backend, g: bool, scratch: bool, upto: usize| {
        let p = |t: Pair| if g { t.gpu } else { t.cpu };
        let proj = if scratch { scratch_proj } else { proj };
        be.copy(p(x), p(sum))?;
        be.matmul(p(wp), p(a), p(proj))?;
        be.add(p(sum), p(proj), p(sum))?;
        if upto > 0 {
            be.rms_norm(p(sum), Some(p(nw)), 1e-5, p(h))?;
            be.matmul(p(w2), p(h), p(out))?;
        }
        Ok(())
    };
    let name = format!("{t} split matmul + add + rms_norm + matmul n={n} k={k} m={m}");
    let tol: f64 = if f.coop != 0 { 2e-6 } else { 1e-8 };
    for scratch in [false, true] {
        let name = format!("{name} scratch={scratch}");
        let whole = move |be: &mut dyn Backend, g: bool| layer(be, g, scratch, 1);
        b.check(&format!("{name}: out"), 5.0 * tol, out, whole);
        b.check(&format!("{name}: norm"), tol, h, whole);
        b.check(&format!("{name}: sum"), tol, sum, whole);
        if !scratch {
            b.check(&format!("{name}: proj"), tol, proj, whole);
        }
        // The copy, the matmul's f16 input (on cooperative matrices), the
        // matmul, the add and norm with the sums, and the next matmul.
        let want = if f.coop != 0 { 5 } else { 4 };
        assert_eq!(gpu_dispatches(&mut b, whole), want, "{name}");
    }
    let added = move |be: &mut dyn Backend, g: bool| layer(be, g, false, 0);
    b.check(&format!("{name}, nothing after: sum"), tol, sum, added);
    b.check(&format!("{name}, nothing after: proj"), tol, proj, added);
    b.assert_passed(seed);
    let used = kernels_run(&b);
    let add_norm_sums = Kernel::NormHalf(AddRmsNormHalf { sums: true });
    assert_eq!(
        (
            used.contains(&add_norm_sums),
            used.contains(&Kernel::SplitSums(SplitSums))
        ),
        (split, split),
        "seed {seed}: kernels run: {used:?}"
    );
}

/// Prefill in the f32-activation mode: an attention on cooperative
/// matrices before a matmul on cooperative matrices also writes the
/// matmul's f16 input (`AttentionCoop` with `half`), so the two are two
/// dispatches, not three. Both outputs against the CPU, the dispatch
/// count, and which kernels ran.
#[test]
fn f32_mode_prefill_attention_writes_the_coop_matmul_input() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let coop = b.gpu.features().coop != 0;
    let (n_heads, n_kv, ctx, n, m) = (8usize, 2usize, 64usize, 45usize, 96usize);
    let pos = b.i32s(&(0..n as i32).collect::<Vec<_>>());
    let seq = b.i32s(&vec![0; n]);
    for hd in [64usize, 128] {
        let (kc, _) = random_cache(&mut b, F16, ctx, n_kv * hd);
        let (vc, _) = random_cache(&mut b, F16, ctx, n_kv * hd);
        let q = b.f32s(n, n_heads * hd, 1.0);
        let w = b.weight(GgmlType::Q4_0, m, n_heads * hd);
        let (att, out) = (b.output(F32, n, n_heads * hd), b.output(F32, n, m));
        let layer = move |be: &mut dyn Backend, g: bool| {
            let p = |x: Pair| if g { x.gpu } else { x.cpu };
            let params = AttentionParams::new(n_heads, n_kv, hd, ctx);
            be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(att))?;
            be.matmul(p(w), p(att), p(out))
        };
        let name = format!("attention + matmul hd {hd}");
        let (tol_att, tol_out) = if coop { (1e-6, 2e-6) } else { (1e-10, 1e-8) };
        b.check(&format!("{name}: attention"), tol_att, att, layer);
        b.check(&format!("{name}: out"), tol_out, out, layer);
        // A matmul split along k: its sums added after it.
        let want = 2 + u64::from(coop_splits(&b, m, n, n_heads * hd));
        assert_eq!(gpu_dispatches(&mut b, layer), want, "{name}");
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    let half = |head_dim| {
        let k = AttentionCoop {
            head_dim,
            heads: 2,
            half: true,
        };
        used.contains(&Kernel::AttentionCoop(k))
    };
    let half_blocks = used.contains(&Kernel::Copy(CopyKernel::HalfBlocks));
    assert_eq!(
        (half(64), half(128), half_blocks),
        (coop, coop, false),
        "seed {seed}: kernels run: {used:?}"
    );
}

/// Prefill in the f32-activation mode: a GLU before a matmul on
/// cooperative matrices also writes the matmul's f16 input (`GluHalf`), so
/// the two are two dispatches, not three. Both outputs against the CPU, the
/// dispatch count, and which kernel ran.
#[test]
fn f32_mode_prefill_glu_writes_the_coop_matmul_input() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let coop = b.gpu.features().coop != 0;
    let (n, k, m) = (130usize, 320usize, 96usize);
    for t in [GgmlType::Q4_0, GgmlType::Q4_1] {
        for gelu in [false, true] {
            let (gate, up) = (b.f32s(n, k, 1.0), b.f32s(n, k, 1.0));
            let w = b.weight(t, m, k);
            let (act, out) = (b.output(F32, n, k), b.output(F32, n, m));
            let ffn = move |be: &mut dyn Backend, g: bool| {
                let p = |x: Pair| if g { x.gpu } else { x.cpu };
                glu(be, gelu, p(gate), p(up), p(act))?;
                be.matmul(p(w), p(act), p(out))
            };
            let name = format!("{t} gelu={gelu} glu + matmul n={n}");
            let tol = if coop { 2e-6 } else { 1e-8 };
            b.check(&format!("{name}: out"), tol, out, ffn);
            // GELU's output is rounded to f16 (ggml's table): where the
            // GPU's f32 value lies within an ulp of an f16 tie it lands one
            // f16 step from the CPU's, about one element in a thousand.
            let act_tol = if gelu { 1e-10 } else { 1e-12 };
            b.check(&format!("{name}: act"), act_tol, act, ffn);
            assert_eq!(gpu_dispatches(&mut b, ffn), 2, "{name}");
        }
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    let half_blocks = used.contains(&Kernel::Copy(CopyKernel::HalfBlocks));
    assert_eq!(
        (ran_glu_half(&used), half_blocks),
        (coop, false),
        "seed {seed}: kernels run: {used:?}"
    );
}

/// Prefill in the f32-activation mode, gate and up joined in one buffer
/// (`load_joined`) and each on huge tiles: the two matmuls, the GLU after
/// them and the f16 blocks of its output for the down matmul are one
/// dispatch (`MatMulCoop` with `Glu`), with tiles that end inside the
/// features and past the last token. Gate, up, the GLU and down against
/// the CPU, with nothing after the matmuls, after the GLU, and the whole
/// FFN; the dispatch count and which kernels ran. With gate and up
/// scratch buffers, the fused dispatch leaves them unwritten.
#[test]
fn f32_mode_prefill_gate_up_glu_joined() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let coop = b.gpu.features().coop != 0;
    let fused = coop && b.gpu.coop_huge();
    let (n, k, m) = (260usize, 64usize, 8224usize);
    for t in [GgmlType::Q4_0, GgmlType::Q8_0] {
        for gelu in [false, true] {
            let x = b.f32s(n, k, 1.0);
            let [wg, wu] = b.joined_weights(t, &[m, m], k)[..] else {
                panic!("two weights asked for")
            };
            let wd = b.weight(t, k, m);
            let (g, u) = (b.output(F32, n, m), b.output(F32, n, m));
            let (act, out) = (b.output(F32, n, m), b.output(F32, n, k));
            let (gs, us) = (b.scratch(F32, n, m), b.scratch(F32, n, m));
            // Up to the matmuls (0), the GLU (1) or down (2); 3: down
            // with gate and up in scratch buffers.
            let steps = move |be: &mut dyn Backend, gpu: bool, last: usize| {
                let p = |t: Pair| if gpu { t.gpu } else { t.cpu };
                let (g, u) = if last > 2 { (gs, us) } else { (g, u) };
                be.matmuls(&[p(wg), p(wu)], p(x), &[p(g), p(u)])?;
                if last > 0 {
                    glu(be, gelu, p(g), p(u), p(act))?;
                }
                if last > 1 {
                    be.matmul(p(wd), p(act), p(out))?;
                }
                Ok(())
            };
            let name = format!("{t} gelu={gelu} gate, up, glu, down n={n} m={m}");
            b.check(&format!("{name}: gate"), 2e-6, g, move |be, gpu| {
                steps(be, gpu, 0)
            });
            b.check(&format!("{name}: up"), 2e-6, u, move |be, gpu| {
                steps(be, gpu, 0)
            });
            b.check(&format!("{name}: glu"), 1e-5, act, move |be, gpu| {
                steps(be, gpu, 1)
            });
            let ffn = move |be: &mut dyn Backend, gpu: bool| steps(be, gpu, 2);
            b.check(&format!("{name}: gate after the ffn"), 2e-6, g, ffn);
            b.check(&format!("{name}: glu after the ffn"), 1e-5, act, ffn);
            b.check(&format!("{name}: down"), 1e-5, out, ffn);
            // x's f16 blocks, then gate, up and GLU, then down.
            let want = if fused { 3 } else { 4 };
            assert_eq!(gpu_dispatches(&mut b, ffn), want, "{name}");
            // Gate and up in scratch buffers: the rest the same, and where
            // they are fused gate and up left as they were.
            let lean = move |be: &mut dyn Backend, gpu: bool| steps(be, gpu, 3);
            b.check(&format!("{name}: glu, scratch"), 1e-5, act, lean);
            b.check(&format!("{name}: down, scratch"), 1e-5, out, lean);
            let before = vec![0x5au8; gs.gpu.n_bytes()];
            b.gpu.write(gs.gpu, &before).unwrap();
            b.gpu.write(us.gpu, &before).unwrap();
            lean(&mut b.gpu, true).unwrap();
            let kept = [gs, us].map(|t| read_bytes(&mut b.gpu, t.gpu) == before);
            assert_eq!(kept, [fused; 2], "{name}: gate and up left as they were");
        }
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    for t in [GgmlType::Q4_0, GgmlType::Q8_0] {
        for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
            let glu = MatMulCoop {
                t,
                tile: CoopTile::Huge,
                multi: Multi::Glu(op),
            };
            let ran = used.contains(&Kernel::MatMulCoop(glu));
            assert_eq!(ran, fused, "seed {seed}: kernels run: {used:?}");
        }
    }
    let apart = coop && !fused;
    assert_eq!(
        ran_glu_half(&used),
        apart,
        "seed {seed}: kernels run: {used:?}"
    );
}

/// The GELU or SiLU GLU of gate and up into out.
fn glu(
    be: &mut dyn Backend,
    gelu: bool,
    gate: Tensor,
    up: Tensor,
    out: Tensor,
) -> smelt::backend::Result<()> {
    if gelu {
        be.gelu_mul(gate, up, out)
    } else {
        be.silu_mul(gate, up, out)
    }
}

/// Decode in the f32-activation mode: mat-vecs of the `DOT_TYPES` (Q4_0
/// and Q8_0 repacked, the others in their GGUF layout) run on Q8-rounded
/// activations, rounded inside the rms_norm or GLU before them, and take
/// in the residual add after them; so norm + Q, K, V is one dispatch
/// (with V of another K-quant than Q and K too, as in Q4_K_M),
/// GLU + down + add two, and a whole FFN two (the norm and GLU inside the
/// gate and up mat-vecs). Every output, the fused ops' own included,
/// against the CPU (on the same rounding); and the dispatch counts (F16
/// takes no integer dots: its ops run apart, on f32 activations). Q4_0 and
/// Q8_0 at two widths, the others at one (rows of whole superblocks for
/// the K-quants).
#[test]
fn f32_mode_decode_mat_vecs_fuse_with_their_neighbours() {
    let (seed, mut b) = f32_mode_bench();
    let dispatches =
        |b: &mut Bench, op: &dyn Fn(&mut dyn Backend) -> smelt::backend::Result<()>| {
            let before = b.gpu.stats().dispatches;
            op(&mut b.gpu).unwrap();
            b.gpu.synchronize().unwrap();
            b.gpu.stats().dispatches - before
        };
    // (Q and K's type, V's, k, n): K-quants also with V of another
    // K-quant (Q4_K_M's Q6_K V), still one dispatch.
    let mut cases = vec![(F16, F16, 576usize, 1usize)];
    for t in DOT_TYPES {
        match t.block_size() {
            256 => {
                let v = if t == GgmlType::Q6_K {
                    GgmlType::Q4_K
                } else {
                    GgmlType::Q6_K
                };
                cases.extend([(t, t, 768, 2), (t, v, 768, 1)]);
            }
            _ if matches!(t, GgmlType::Q4_0 | GgmlType::Q8_0) => {
                cases.extend([(t, t, 576, 1), (t, t, 2080, 3)]);
            }
            _ => cases.push((t, t, 576, 1)),
        }
    }
    for (t, v, k, n) in cases {
        let dots = DOT_TYPES.contains(&t);
        // A matmul's input on either side: on the CPU, the GPU's rounding
        // of `x`, in `xr`.
        let input = move |be: &mut dyn Backend, g: bool, x: Pair, xr: Pair| match (g, dots) {
            (true, _) => Ok(x.gpu),
            (false, true) => cpu_q8_rounded(be, x.cpu, xr.cpu),
            (false, false) => Ok(x.cpu),
        };
        // With dots, each side rounds its own norm or GLU output to Q8, and
        // those differ in their last bits: a value may round a step apart
        // (lavapipe, 30 seeds: 7 such steps, up to 1.2e-7; one in CI cost
        // 4e-6 when the FFN was 96 wide). Not rounding at all costs 1.2e-5
        // or more, so 4e-6 still tells them apart.
        let tol = if dots { 4e-6 } else { 1e-7 };
        {
            let (x, nw, h) = (b.f32s(n, k, 1.0), b.f32s(1, k, 1.0), b.output(F32, n, k));
            let hr = b.output(F32, n, k);
            let ms = [130usize, 67, 64];
            let ws = [0, 1, 2].map(|i| b.weight(if i == 2 { v } else { t }, ms[i], k));
            let outs = ms.map(|m| b.output(F32, n, m));
            let norm_qkv = |be: &mut dyn Backend, g: bool| {
                let p = |t: Pair| if g { t.gpu } else { t.cpu };
                be.rms_norm(p(x), Some(p(nw)), 1e-5, p(h))?;
                let h = input(be, g, h, hr)?;
                be.matmuls(&ws.map(p), h, &outs.map(p))
            };
            for (name, out, tol) in [
                ("norm", h, 1e-10),
                ("q", outs[0], tol),
                ("k", outs[1], tol),
                ("v", outs[2], tol),
            ] {
                b.check(
                    &format!("rms_norm+matmuls {t} (V {v}) k={k} n={n}: {name}"),
                    tol,
                    out,
                    norm_qkv,
                );
            }
            // With dots: the norm taken into Q, K and V's one dispatch.
            let d = dispatches(&mut b, &|be| norm_qkv(be, true));
            assert_eq!(d, if dots { 1 } else { 4 }, "rms_norm+matmuls {t} (V {v})");
            // That dispatch stores no Q8 rounding of the norm's output: a
            // later matmul of it rounds it afresh.
            let again = b.output(F32, n, ms[0]);
            b.check(
                &format!("rms_norm+matmuls, then a matmul {t} (V {v}) k={k} n={n}"),
                tol,
                again,
                |be, g| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    norm_qkv(be, g)?;
                    let h = input(be, g, h, hr)?;
                    be.matmul(p(ws[0]), h, p(again))
                },
            );
            // The rest takes one type.
            if v != t {
                continue;
            }

            let (gate, up, act) = (b.f32s(n, k, 1.0), b.f32s(n, k, 1.0), b.output(F32, n, k));
            let actr = b.output(F32, n, k);
            let wd = b.weight(t, 96, k);
            let r = b.f32s(n, 96, 1.0);
            let (proj, sum) = (b.output(F32, n, 96), b.output(F32, n, 96));
            for gelu in [false, true] {
                let glu_down_add = |be: &mut dyn Backend, g: bool| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    glu(be, gelu, p(gate), p(up), p(act))?;
                    let act = input(be, g, act, actr)?;
                    be.matmul(p(wd), act, p(proj))?;
                    be.add(p(r), p(proj), p(sum))
                };
                // GELU's f16-rounded output may land one f16 step from
                // the CPU's at a tie (about one element in a thousand).
                let act_tol = if gelu { 2e-9 } else { 1e-10 };
                for (name, out, tol) in [
                    ("act", act, act_tol),
                    ("down", proj, tol),
                    ("sum", sum, tol),
                ] {
                    let what = format!("glu(gelu {gelu})+matmul+add {t} k={k} n={n}: {name}");
                    b.check(&what, tol, out, glu_down_add);
                }
                let d = dispatches(&mut b, &|be| glu_down_add(be, true));
                assert_eq!(d, if dots { 2 } else { 3 }, "glu+matmul+add {t}");
            }

            // A whole FFN: norm, gate and up (rows a multiple of 32), GLU,
            // down, residual add. With dots: the norm, gate + up and the GLU
            // with its rounding (`MatVecGlu` with the norm), then down + add.
            // 256 wide between gate/up and down: a Q8 step rounded apart
            // there costs ~1/256 of what not rounding costs (see `tol`).
            // The norm's weight is small: the random K-quant blocks hold
            // values up to ~100, and at full scale the GLU's output could
            // pass 127 · 65504, where a Q8 block's f16 scale overflows.
            let nw = b.f32s(1, k, 0.05);
            let (wg, wu, wdn) = (
                b.weight(t, 256, k),
                b.weight(t, 256, k),
                b.weight(t, k, 256),
            );
            let [g2, u2, a2, a2r] = [0; 4].map(|_| b.output(F32, n, 256));
            let (dn, x2) = (b.output(F32, n, k), b.output(F32, n, k));
            for gelu in [false, true] {
                let ffn = |be: &mut dyn Backend, g: bool| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    be.rms_norm(p(x), Some(p(nw)), 1e-5, p(h))?;
                    let h = input(be, g, h, hr)?;
                    be.matmuls(&[p(wg), p(wu)], h, &[p(g2), p(u2)])?;
                    glu(be, gelu, p(g2), p(u2), p(a2))?;
                    let a = input(be, g, a2, a2r)?;
                    be.matmul(p(wdn), a, p(dn))?;
                    be.add(p(x), p(dn), p(x2))
                };
                // Down reads what both roundings gave (the norm's, through
                // gate and up, then the GLU's), so steps rounded apart add
                // up there: 2-3 of them measured 7.5e-6 (seed
                // 1795819389928635461, Q5_0). Each costs ~2.5e-6; not
                // rounding the GLU's output costs 1.2e-5 or more.
                let after_both = if dots { 1e-5 } else { tol };
                for (name, out, tol) in [
                    ("gate", g2, tol),
                    ("up", u2, tol),
                    ("act", a2, tol),
                    ("down", dn, after_both),
                    ("sum", x2, after_both),
                ] {
                    let what = format!("ffn(gelu {gelu}) {t} k={k} n={n}: {name}");
                    b.check(&what, tol, out, ffn);
                }
                let d = dispatches(&mut b, &|be| ffn(be, true));
                assert_eq!(d, if dots { 2 } else { 6 }, "ffn {t}");
            }

            // The model's residual stream: x += a · woᵀ, in place.
            let ka = if t.block_size() == 256 { 512 } else { 576 };
            let (wo, a, ar) = (b.weight(t, k, ka), b.f32s(n, ka, 1.0), b.output(F32, n, ka));
            let (o, x_copy) = (b.output(F32, n, k), b.output(F32, n, k));
            b.check(
                &format!("matmul+add in place {t} k={k} n={n}"),
                tol,
                o,
                |be, g| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    let a = input(be, g, a, ar)?;
                    be.matmul(p(wo), a, p(o))?;
                    be.add(p(x), p(o), p(x))
                },
            );
            // The sum itself (x += o ran once per backend above).
            b.check(
                &format!("x after add in place {t} k={k} n={n}"),
                tol,
                x_copy,
                |be, g| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    be.copy(p(x), p(x_copy))
                },
            );
        }
    }
    b.assert_passed(seed);
}

/// `matmuls` (Q, K, V; gate, up) in the f32-activation mode: one dispatch
/// for the weights in decode (every `DOT_TYPES` type), and for repacked
/// Q4_0 and Q8_0 (on cooperative matrices) in prefill, with tiles that end inside each weight and past
/// the last token; every output against the CPU. Then again with the
/// weights joined in one buffer (`load_joined`), which the prefill reads
/// bound once.
#[test]
fn f32_mode_matmuls_of_one_input() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let repacked = [GgmlType::Q4_0, GgmlType::Q8_0];
    let coop = b.gpu.features().coop != 0;
    // Where there are cooperative matrices, also Q, K and V too many wide
    // tiles together: Q alone, K and V together.
    let mut cases = vec![
        (&[130usize, 67, 64][..], 1usize),
        (&[96, 33][..], 4),
        (&[40, 40, 8][..], 7),
        (&[200, 72, 40][..], 130),
        (&[96, 160][..], 100),
    ];
    if coop {
        cases.push((&[4200, 2100, 2100][..], 260));
    }
    // Prefill for Q4_0, Q8_0 and Q4_1 (repacked or not); decode for every
    // type that takes integer dots (`MatVecMulti`).
    let prefills = [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1];
    let matvec_max = matvec_tokens(&b);
    for t in DOT_TYPES {
        let k = if t.block_size() == 256 { 2304 } else { 2080 };
        for &(ms, n) in &cases {
            if n > matvec_max && !prefills.contains(&t) {
                continue;
            }
            let (x, xr) = (b.f32s(n, k, 1.0), b.output(F32, n, k));
            let outs: Vec<Pair> = ms.iter().map(|&m| b.output(F32, n, m)).collect();
            let rounds = f32_mode_rounds(&b, t, n);
            for joined in [false, true] {
                let ws: Vec<Pair> = if joined {
                    b.joined_weights(t, ms, k)
                } else {
                    ms.iter().map(|&m| b.weight(t, m, k)).collect()
                };
                for (i, &out) in outs.iter().enumerate() {
                    let (ws, outs) = (ws.clone(), outs.clone());
                    // Past `matvec_tokens`, the prefill kernels: on
                    // cooperative matrices, f16 operands.
                    let tol = match (n > matvec_max, rounds) {
                        (true, _) => 2e-6,
                        (false, true) => 1e-6,
                        (false, false) => 1e-7,
                    };
                    b.check(
                        &format!("matmuls {t} {ms:?} k={k} n={n} joined {joined} out {i}"),
                        tol,
                        out,
                        move |be, g| {
                            let p = |t: &Pair| if g { t.gpu } else { t.cpu };
                            let w: Vec<Tensor> = ws.iter().map(p).collect();
                            let o: Vec<Tensor> = outs.iter().map(p).collect();
                            let x = if rounds && !g {
                                cpu_q8_rounded(be, x.cpu, xr.cpu)?
                            } else {
                                p(&x)
                            };
                            be.matmuls(&w, x, &o)
                        },
                    );
                }
            }
        }
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    for t in prefills {
        for multi in [Multi::Apart, Multi::Joint] {
            let ran = used
                .iter()
                .any(|k| matches!(k, Kernel::MatMulCoop(c) if c.t == t && c.multi == multi));
            assert_eq!(
                ran,
                coop && repacked.contains(&t),
                "seed {seed}: {t} {multi:?}: kernels run: {used:?}"
            );
        }
    }
}

/// A rope of `n_heads` heads of `hd` values, all rotated, base 10000.
/// The f32 mode's head norms and ropes (Qwen 3's and Gemma 3's per-head
/// Q and K RMSNorm), as the model records them: each head of Q, then of K,
/// normed into one buffer, then roped back in place, and Q scaled in place
/// (Gemma's query scale) or not. One dispatch for all of it (`NormRope`
/// with `pair`) where that buffer is scratch, one per op where the host
/// may read it; Q and K against the CPU over modes, head sizes, partial
/// rotary dims, frequency factors and LongRoPE's magnitude.
#[test]
fn f32_mode_head_norms_join_their_ropes() {
    let (seed, mut b) = f32_mode_bench();
    let (tokens, q_heads, k_heads) = (3usize, 4usize, 2usize);
    let pos: Vec<i32> = (0..tokens).map(|_| b.rng.gen_range(0..300)).collect();
    let pos = b.i32s(&pos);
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (hd, n_dims, factored, attn_factor) in [
            (64usize, 64usize, false, 1.0f32),
            (128, 64, false, 1.0),
            (256, 256, true, 1.25),
        ] {
            let factors: Vec<f32> = (0..n_dims / 2).map(|i| 1.0 + i as f32 / 8.0).collect();
            let factors = b.input(F32, 1, n_dims / 2, bytemuck::cast_slice(&factors));
            let (qw, kw) = (b.f32s(1, hd, 1.0), b.f32s(1, hd, 1.0));
            for (scratch, q_scale) in [(true, None), (true, Some(0.125)), (false, Some(0.125))] {
                let (q, k) = (
                    b.f32s(tokens, q_heads * hd, 1.0),
                    b.f32s(tokens, k_heads * hd, 1.0),
                );
                let normed = if scratch {
                    b.scratch(F32, tokens, q_heads * hd)
                } else {
                    b.output(F32, tokens, q_heads * hd)
                };
                let layer = |be: &mut dyn Backend, g: bool| {
                    let p = |t: Pair| if g { t.gpu } else { t.cpu };
                    for (x, w, heads) in [(q, qw, q_heads), (k, kw, k_heads)] {
                        let rope = RopeParams {
                            n_dims,
                            freq_factors: factored.then(|| p(factors)),
                            attn_factor,
                            ..rope_params(mode, heads, hd)
                        };
                        let into = p(normed).reshape(tokens, heads * hd);
                        let rows = |t: Tensor| t.reshape(tokens * heads, hd);
                        be.rms_norm(rows(p(x)), Some(p(w)), 1e-6, rows(into))?;
                        be.rope(into, p(pos), &rope, p(x))?;
                    }
                    match q_scale {
                        Some(s) => be.scale(p(q), s, p(q)),
                        None => Ok(()),
                    }
                };
                let name = format!(
                    "head norms + ropes {mode:?} hd {hd} dims {n_dims} scratch {scratch} q scale {q_scale:?}"
                );
                // Each check ropes Q and K again on both sides (K's check
                // sees them twice).
                b.check(&format!("{name}: q"), 1e-8, q, layer);
                b.check(&format!("{name}: k"), 1e-8, k, layer);
                let before = b.gpu.stats().dispatches;
                layer(&mut b.gpu, true).unwrap();
                b.gpu.synchronize().unwrap();
                let d = b.gpu.stats().dispatches - before;
                let apart = 4 + u64::from(q_scale.is_some());
                assert_eq!(d, if scratch { 1 } else { apart }, "seed {seed}: {name}");
            }
        }
    }
    b.assert_passed(seed);
}

/// The f32 mode's post-norm (Gemma's): the projection normed into a
/// scratch buffer, added to the residual in place. One dispatch
/// (`RmsNormResidual`) where the norm's output is scratch, two where the
/// host may read it; against the CPU over widths and rows.
#[test]
fn f32_mode_post_norm_joins_its_residual_add() {
    let (seed, mut b) = f32_mode_bench();
    for (rows, cols) in [(1usize, 640usize), (5, 1152), (3, 100)] {
        let w = b.f32s(1, cols, 1.0);
        for scratch in [true, false] {
            let (res, proj) = (b.f32s(rows, cols, 1.0), b.f32s(rows, cols, 4.0));
            let h = if scratch {
                b.scratch(F32, rows, cols)
            } else {
                b.output(F32, rows, cols)
            };
            let layer = |be: &mut dyn Backend, g: bool| {
                let p = |t: Pair| if g { t.gpu } else { t.cpu };
                be.rms_norm(p(proj), Some(p(w)), 1e-6, p(h))?;
                be.add(p(res), p(h), p(res))
            };
            let name = format!("post-norm + residual add {rows}x{cols} scratch {scratch}");
            // Each check adds to the residual again on both sides: once.
            b.check(&name, 1e-10, res, layer);
            let before = b.gpu.stats().dispatches;
            layer(&mut b.gpu, true).unwrap();
            b.gpu.synchronize().unwrap();
            let d = b.gpu.stats().dispatches - before;
            assert_eq!(d, if scratch { 1 } else { 2 }, "seed {seed}: {name}");
        }
    }
    b.assert_passed(seed);
}

fn rope_params(mode: RopeMode, n_heads: usize, hd: usize) -> RopeParams {
    RopeParams {
        mode,
        n_heads,
        head_dim: hd,
        n_dims: hd,
        freq_base: 10000.0,
        freq_scale: 1.0,
        freq_factors: None,
        attn_factor: 1.0,
    }
}

/// A layer's ropes and cache writes: Q's and K's ropes, K's rotated rows
/// and V's rows into their caches. In normal mode the GPU records all four
/// as one dispatch (RopeStore), in NEOX mode as two (RopePair,
/// SetRowsPair); in both arithmetics every output against the CPU, and the
/// dispatch counts. Q has 12 heads: a rope invocation turns 8
/// (`ROPE_HEADS`), so a whole group and a part of one.
#[test]
fn ropes_and_cache_writes_of_a_layer() {
    for f32_mode in [false, true] {
        let (seed, mut b) = if f32_mode {
            f32_mode_bench()
        } else {
            let seed = seed();
            (seed, Bench::new(seed, GpuOptions::exact()))
        };
        let (rows, hd) = (3usize, 64usize);
        let pos: Vec<i32> = (0..rows).map(|_| b.rng.gen_range(0..300)).collect();
        let pos = b.i32s(&pos);
        let ids = b.i32s(&[5, 0, 7]);
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            for cache_t in [F32, F16] {
                let (q, k, v) = (
                    b.f32s(rows, 12 * hd, 1.0),
                    b.f32s(rows, 2 * hd, 1.0),
                    b.f32s(rows, 2 * hd, 1.0),
                );
                let (kc, vc) = (b.output(cache_t, 9, 2 * hd), b.output(cache_t, 9, 2 * hd));
                b.zero(kc);
                b.zero(vc);
                let layer = |be: &mut dyn Backend, g: bool| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    let rope = |n_heads| rope_params(mode, n_heads, hd);
                    // In place, as the model ropes.
                    be.rope(p(q), p(pos), &rope(12), p(q))?;
                    be.rope(p(k), p(pos), &rope(2), p(k))?;
                    be.set_rows(p(k), p(ids), p(kc))?;
                    be.set_rows(p(v), p(ids), p(vc))
                };
                let tol = if cache_t == F16 { 1e-6 } else { 1e-9 };
                for (name, out) in [("k cache", kc), ("v cache", vc)] {
                    let what = format!(
                        "ropes+cache writes f32 mode {f32_mode} {mode:?} {cache_t}: {name}"
                    );
                    b.check(&what, tol, out, layer);
                }
                // The ropes themselves (in place: q and k now rotated once
                // more on each side, as the checks above ran the layer).
                for (name, t, cols) in [("q", q, 12 * hd), ("k", k, 2 * hd)] {
                    let copy = b.output(F32, rows, cols);
                    let what = format!(
                        "ropes+cache writes f32 mode {f32_mode} {mode:?} {cache_t}: {name}"
                    );
                    b.check(&what, 1e-9, copy, |be, g| {
                        let p = |x: Pair| if g { x.gpu } else { x.cpu };
                        be.copy(p(t), p(copy))
                    });
                }
                let before = b.gpu.stats().dispatches;
                layer(&mut b.gpu, true).unwrap();
                b.gpu.synchronize().unwrap();
                let d = b.gpu.stats().dispatches - before;
                let want = if mode == RopeMode::Normal { 1 } else { 2 };
                assert_eq!(d, want, "ropes+cache writes {mode:?} {cache_t}: dispatches");
            }
        }
        b.assert_passed(seed);
    }
}

/// The f32-activation mode pairs the rope of K with that of Q, and the
/// cache write of V with that of K, in one dispatch each: both outputs of
/// each pair against the CPU.
#[test]
fn f32_mode_paired_ropes_and_cache_writes() {
    let (seed, mut b) = f32_mode_bench();
    let (rows, hd) = (3usize, 64usize);
    let pos: Vec<i32> = (0..rows).map(|_| b.rng.gen_range(0..300)).collect();
    let pos = b.i32s(&pos);
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let (q, k) = (b.f32s(rows, 4 * hd, 1.0), b.f32s(rows, 2 * hd, 1.0));
        let (qo, ko) = (b.output(F32, rows, 4 * hd), b.output(F32, rows, 2 * hd));
        for (i, out) in [qo, ko].into_iter().enumerate() {
            b.check(
                &format!("paired rope {mode:?} out {i}"),
                1e-9,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    let rope = |n_heads| rope_params(mode, n_heads, hd);
                    be.rope(p(q), p(pos), &rope(4), p(qo))?;
                    be.rope(p(k), p(pos), &rope(2), p(ko))
                },
            );
        }
    }
    let ids = b.i32s(&[5, 0, 7]);
    for cache_t in [F32, F16] {
        let (k, v) = (b.f32s(rows, 2 * hd, 1.0), b.f32s(rows, 2 * hd, 1.0));
        let (kc, vc) = (b.output(cache_t, 9, 2 * hd), b.output(cache_t, 9, 2 * hd));
        b.zero(kc);
        b.zero(vc);
        for (i, out) in [kc, vc].into_iter().enumerate() {
            b.check(
                &format!("paired set_rows {cache_t} out {i}"),
                1e-12,
                out,
                |be, g| {
                    let p = |x: Pair| if g { x.gpu } else { x.cpu };
                    be.set_rows(p(k), p(ids), p(kc))?;
                    be.set_rows(p(v), p(ids), p(vc))
                },
            );
        }
    }
    b.assert_passed(seed);
}

/// The f32 mode's decode of one row takes Q's and K's ropes and K's and V's
/// cache writes into the attention after them (`AttentionRope`), which
/// also rounds its output for the mat-vec after it: two dispatches.
/// Every output against the CPU (the mat-vec's, the attention's, Q and K
/// rotated, both caches) over head sizes and cache types, at the first
/// position (the new key alone), at a position whose key starts a chunk of
/// the workgroup's, with a window, with frequency factors, and with the
/// row written where the attention does not read (ids ≠ slot · ctx + pos:
/// key p then comes from the cache). K is rotated into a buffer of its
/// own, or (at one position) in place as the model ropes it: in a scratch
/// buffer the attention still takes the ropes in and leaves K rotated
/// unwritten; in one the host may read, the rope runs apart.
#[test]
fn f32_mode_decode_attention_takes_in_the_ropes() {
    let (seed, mut b) = f32_mode_bench();
    let (n_heads, n_kv, ctx, slots) = (8usize, 2usize, 300usize, 2usize);
    // (position, slot, window, cache row written; None: slot · ctx + pos)
    let cases = [
        (0usize, 1usize, None, None),
        (128, 0, None, None),
        (200, 1, Some(50), None),
        (77, 0, None, Some(299)),
    ];
    for hd in [64usize, 128] {
        let w = b.weight(GgmlType::Q4_0, 96, n_heads * hd);
        let factors: Vec<f32> = (0..hd / 2).map(|i| 1.0 + i as f32 / 16.0).collect();
        let factors = b.input(F32, 1, hd / 2, bytemuck::cast_slice(&factors));
        for cache_t in [F32, F16] {
            for (ci, &(at, slot, window, row)) in cases.iter().enumerate() {
                // K rotated apart, in place, in place in scratch (each way
                // with its own Q: the dispatch count runs the GPU alone).
                let ways: &[usize] = if ci == 1 { &[0, 1, 2] } else { &[0] };
                for &way in ways {
                    let (kc, _) = random_cache(&mut b, cache_t, slots * ctx, n_kv * hd);
                    let (vc, _) = random_cache(&mut b, cache_t, slots * ctx, n_kv * hd);
                    let (pos, seq) = (b.i32s(&[at as i32]), b.i32s(&[slot as i32]));
                    let ids = b.i32s(&[row.unwrap_or(slot * ctx + at) as i32]);
                    let (q, k, v) = (
                        b.f32s(1, n_heads * hd, 1.0),
                        b.f32s(1, n_kv * hd, 1.0),
                        b.f32s(1, n_kv * hd, 1.0),
                    );
                    let (k_rot, out) =
                        (b.output(F32, 1, n_kv * hd), b.output(F32, 1, n_heads * hd));
                    let (out_r, mv) = (b.output(F32, 1, n_heads * hd), b.output(F32, 1, 96));
                    let (k_in, k_scratch) =
                        (b.output(F32, 1, n_kv * hd), b.scratch(F32, 1, n_kv * hd));
                    let ff = (ci == 2).then_some(factors);
                    let layer = |be: &mut dyn Backend, g: bool| {
                        let p = |x: Pair| if g { x.gpu } else { x.cpu };
                        let rope = |n| RopeParams {
                            freq_factors: ff.map(p),
                            attn_factor: 1.0,
                            ..rope_params(RopeMode::Normal, n, hd)
                        };
                        let params = AttentionParams {
                            window,
                            ..AttentionParams::new(n_heads, n_kv, hd, ctx)
                        };
                        // Q in place; K apart, or a copy of it in place.
                        let kr = match way {
                            0 => k_rot,
                            1 => k_in,
                            _ => k_scratch,
                        };
                        if way > 0 {
                            be.copy(p(k), p(kr))?;
                        }
                        be.rope(p(q), p(pos), &rope(n_heads), p(q))?;
                        let k = if way > 0 { kr } else { k };
                        be.rope(p(k), p(pos), &rope(n_kv), p(kr))?;
                        be.set_rows(p(kr), p(ids), p(kc))?;
                        be.set_rows(p(v), p(ids), p(vc))?;
                        be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(out))?;
                        let x = if g {
                            out.gpu
                        } else {
                            cpu_q8_rounded(be, out.cpu, out_r.cpu)?
                        };
                        be.matmul(p(w), x, p(mv))
                    };
                    let name = format!("rope+attention hd {hd} {cache_t} case {ci} k way {way}");
                    // Each check runs the layer again: Q rotates once more on
                    // both sides, so it is checked first (on the H200 its error
                    // after three rotations was 1.02e-9: the hardware's sin,
                    // cos and pow, as the plain rope's). The mat-vec's input is
                    // the attention's output rounded to Q8 on each side, and
                    // those outputs differ in their last bits: a value may round
                    // a step apart, which costs up to ~1.2e-6 (lavapipe, 480
                    // cases: 19 such steps, none twice in a case). Not rounding
                    // at all costs 8e-6 or more, so 4e-6 still tells them apart.
                    let k_out = [Some(k_rot), Some(k_in), None][way];
                    for (what, t, tol) in [
                        ("q", Some(q), 1e-9),
                        ("mat-vec", Some(mv), 4e-6),
                        ("attention", Some(out), 1e-9),
                        ("k rotated", k_out, 1e-9),
                        ("k cache", Some(kc), 1e-9),
                        ("v cache", Some(vc), 1e-9),
                    ] {
                        if let Some(t) = t {
                            b.check(&format!("{name}: {what}"), tol, t, layer);
                        }
                    }
                    let before = b.gpu.stats().dispatches;
                    layer(&mut b.gpu, true).unwrap();
                    b.gpu.synchronize().unwrap();
                    let d = b.gpu.stats().dispatches - before;
                    // The copy; the ropes and cache writes apart from the
                    // attention where K in place is read after.
                    let want = [2, 4, 3][way];
                    assert_eq!(d, want, "seed {seed}: {name}: dispatches");
                }
            }
        }
    }
    b.assert_passed(seed);
}

/// A decode attention of few heads (8 heads of one row or three: fewer
/// workgroups than a GPU has multiprocessors) splits each head's keys into
/// parts, a workgroup each, merged by a second dispatch: at the first
/// position (one part with the key, the rest empty), inside one part,
/// across parts, with a window that leaves the first keys out, rows of
/// two slots; alone, with the next mat-vec's Q8 rounding in the merge, and
/// with the ropes and cache writes before it joined (Q rotated in place
/// in scratch, as the model ropes it, so no part reads a Q another has
/// rotated). Every output against the CPU; the dispatches counted.
#[test]
fn f32_mode_decode_attention_splits_over_the_keys() {
    let (seed, mut b) = f32_mode_bench();
    let (n_heads, n_kv, ctx) = (8usize, 2usize, 700usize);
    // (positions, window, split: the window leaves 4 chunks or more)
    let cases: [(&[i32], Option<usize>, bool); 6] = [
        (&[0], None, true),
        (&[20], None, true),
        (&[699], None, true),
        (&[650], Some(560), true),
        (&[250], Some(40), false),
        (&[3, 150, 699], None, true),
    ];
    for hd in [64usize, 128] {
        let w = b.weight(GgmlType::Q4_0, 96, n_heads * hd);
        for cache_t in [F32, F16] {
            let (kc, _) = random_cache(&mut b, cache_t, 2 * ctx, n_kv * hd);
            let (vc, _) = random_cache(&mut b, cache_t, 2 * ctx, n_kv * hd);
            // The host's bound on the keys a row sees, above these rows'
            // (8 chunks of the workgroup's 128 keys: 4 parts), or unknown
            // (not split).
            let params = |window, keys| AttentionParams {
                window,
                keys,
                ..AttentionParams::new(n_heads, n_kv, hd, ctx)
            };
            for (ci, &(at, window, split)) in cases.iter().enumerate() {
                let rows = at.len();
                let slots: Vec<i32> = (0..rows as i32).map(|r| r % 2).collect();
                let (pos, seq) = (b.i32s(at), b.i32s(&slots));
                let q = b.f32s(rows, n_heads * hd, 1.0);
                let (out, out_r) = (
                    b.output(F32, rows, n_heads * hd),
                    b.output(F32, rows, n_heads * hd),
                );
                let mv = b.output(F32, rows, 96);
                let name = format!("split attention hd {hd} {cache_t} case {ci}");
                for (with_matvec, keys) in [(false, 1024), (true, 1024), (false, 0)] {
                    let ap = params(window, keys);
                    let layer = |be: &mut dyn Backend, g: bool| {
                        let p = |x: Pair| if g { x.gpu } else { x.cpu };
                        be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &ap, p(out))?;
                        if !with_matvec {
                            return Ok(());
                        }
                        let x = if g {
                            out.gpu
                        } else {
                            cpu_q8_rounded(be, out.cpu, out_r.cpu)?
                        };
                        be.matmul(p(w), x, p(mv))
                    };
                    // The mat-vec's tolerance: f32_mode_decode_attention_takes_in_the_ropes.
                    let (what, t, tol) = match with_matvec {
                        false => ("attention", out, 1e-9),
                        true => ("mat-vec", mv, 4e-6),
                    };
                    let what = format!("{what} (keys {keys})");
                    b.check(&format!("{name}: {what}"), tol, t, layer);
                    let before = b.gpu.stats().dispatches;
                    layer(&mut b.gpu, true).unwrap();
                    b.gpu.synchronize().unwrap();
                    let d = b.gpu.stats().dispatches - before;
                    // Parts and merge, then the mat-vec.
                    let want = [1, 2][usize::from(split && keys > 0)] + u64::from(with_matvec);
                    assert_eq!(d, want, "seed {seed}: {name}: {what}: dispatches");
                }
            }
            // One row with the ropes and cache writes joined: its key and
            // value come from the rope, the rest from the cache.
            let at = 600usize;
            let (pos, seq) = (b.i32s(&[at as i32]), b.i32s(&[1]));
            let ids = b.i32s(&[(ctx + at) as i32]);
            let (q, k, v) = (
                b.f32s(1, n_heads * hd, 1.0),
                b.f32s(1, n_kv * hd, 1.0),
                b.f32s(1, n_kv * hd, 1.0),
            );
            let q_scratch = b.scratch(F32, 1, n_heads * hd);
            let k_rot = b.output(F32, 1, n_kv * hd);
            let (out, out_r) = (
                b.output(F32, 1, n_heads * hd),
                b.output(F32, 1, n_heads * hd),
            );
            let mv = b.output(F32, 1, 96);
            let layer = |be: &mut dyn Backend, g: bool| {
                let p = |x: Pair| if g { x.gpu } else { x.cpu };
                let rope = |n| RopeParams {
                    attn_factor: 1.0,
                    ..rope_params(RopeMode::Normal, n, hd)
                };
                be.copy(p(q), p(q_scratch))?;
                be.rope(p(q_scratch), p(pos), &rope(n_heads), p(q_scratch))?;
                be.rope(p(k), p(pos), &rope(n_kv), p(k_rot))?;
                be.set_rows(p(k_rot), p(ids), p(kc))?;
                be.set_rows(p(v), p(ids), p(vc))?;
                let ap = params(None, 1024);
                be.attention(p(q_scratch), p(kc), p(vc), p(pos), p(seq), &ap, p(out))?;
                let x = if g {
                    out.gpu
                } else {
                    cpu_q8_rounded(be, out.cpu, out_r.cpu)?
                };
                be.matmul(p(w), x, p(mv))
            };
            let name = format!("split rope+attention hd {hd} {cache_t}");
            // K rotated at position 600 carries the hardware's sin and cos
            // of larger angles than f32_mode_decode_attention_takes_in_the_ropes'
            // (H200, hd 128: 2.1e-9 and 2.4e-9).
            for (what, t, tol) in [
                ("mat-vec", mv, 4e-6),
                ("attention", out, 1e-9),
                ("k rotated", k_rot, 5e-9),
                ("k cache", kc, 1e-9),
                ("v cache", vc, 1e-9),
            ] {
                b.check(&format!("{name}: {what}"), tol, t, layer);
            }
            let before = b.gpu.stats().dispatches;
            layer(&mut b.gpu, true).unwrap();
            b.gpu.synchronize().unwrap();
            let d = b.gpu.stats().dispatches - before;
            // The copy, the parts with the ropes and cache writes, the
            // merge with the rounding, the mat-vec.
            assert_eq!(d, 4, "seed {seed}: {name}: dispatches");
        }
    }
    b.assert_passed(seed);
}

/// Prefill attention in the f32 mode: with subgroups, four invocations a
/// (head, row) in workgroups of 32 rows (`AttentionQuads`); on cooperative
/// matrices, workgroups of 2 query heads of a KV head, or 1 (groups of 4
/// and 3 heads). Head sizes of the models (64, 128, 256), a last block of
/// fewer rows, blocks whose rows belong to two sequences (ranges that
/// differ per row), a sliding window and a softcap; every output against
/// the CPU reference.
#[test]
fn f32_mode_prefill_attention() {
    let (seed, mut b) = f32_mode_profiled_bench();
    let (ctx, slots) = (90usize, 3usize);
    // 45 rows of slot 1 from position 0; rows alternating between slot 0
    // (positions 30..) and slot 2 (positions 0..); the cache's last rows
    // (the cooperative kernel's last block of keys moves back).
    let cases: [(&str, Vec<i32>, Vec<i32>); 3] = [
        ("one sequence", (0..45).collect(), vec![1; 45]),
        (
            "two sequences",
            (0..40)
                .map(|i| if i % 2 == 0 { 30 + i } else { i })
                .collect(),
            (0..40).map(|i| if i % 2 == 0 { 0 } else { 2 }).collect(),
        ),
        ("last rows", (50..90).collect(), vec![2; 40]),
    ];
    // On cooperative matrices (F16 caches, heads of 64 and 128) queries and
    // p are rounded to f16.
    let coop = b.gpu.features().coop != 0;
    let on_coop = |hd: usize, cache_t| coop && cache_t == F16 && hd <= 128;
    for (hd, (n_heads, n_kv)) in [64usize, 128, 256]
        .into_iter()
        .flat_map(|hd| [(8usize, 2usize), (3, 1)].map(|heads| (hd, heads)))
    {
        for cache_t in [F32, F16] {
            let (kc, _) = random_cache(&mut b, cache_t, slots * ctx, n_kv * hd);
            let (vc, _) = random_cache(&mut b, cache_t, slots * ctx, n_kv * hd);
            for (kind, pos_v, seq_v) in &cases {
                let n = pos_v.len();
                let (pos, seq) = (b.i32s(pos_v), b.i32s(seq_v));
                let q = b.f32s(n, n_heads * hd, 1.0);
                for (window, softcap) in [(None, None), (Some(7), None), (None, Some(2.0f32))] {
                    let out = b.output(F32, n, n_heads * hd);
                    let name = format!(
                        "prefill attention hd {hd} heads {n_heads}/{n_kv} {cache_t} {kind} \
                         window={window:?} softcap={softcap:?}"
                    );
                    let tol = if on_coop(hd, cache_t) { 1e-6 } else { 1e-10 };
                    b.check(&name, tol, out, |be, g| {
                        let p = |x: Pair| if g { x.gpu } else { x.cpu };
                        let params = AttentionParams {
                            window,
                            softcap,
                            ..AttentionParams::new(n_heads, n_kv, hd, ctx)
                        };
                        be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(out))
                    });
                }
            }
        }
    }
    // Keys that grow along the sequence (row j of a slot scaled by
    // 1 + j / 4): each row's largest score keeps growing, so the
    // cooperative kernel's maximum moves (and its outputs are rescaled)
    // after the first block too.
    let (n_heads, n_kv) = (8usize, 2usize);
    for hd in [64usize, 128] {
        let cols = n_kv * hd;
        let mut v = b.randn(slots * ctx * cols, 1.0);
        for (j, row) in v.chunks_mut(cols).enumerate() {
            let f = 1.0 + (j % ctx) as f32 / 4.0;
            row.iter_mut().for_each(|x| *x *= f);
        }
        let (kc, _) = cache_of(&mut b, F16, slots * ctx, cols, &v);
        let (vc, _) = random_cache(&mut b, F16, slots * ctx, cols);
        let (pos, seq) = (b.i32s(&(0..45).collect::<Vec<_>>()), b.i32s(&[1; 45]));
        let q = b.f32s(45, n_heads * hd, 1.0);
        let out = b.output(F32, 45, n_heads * hd);
        let tol = if on_coop(hd, F16) { 1e-6 } else { 1e-10 };
        let name = format!("prefill attention hd {hd} F16 growing keys");
        b.check(&name, tol, out, |be, g| {
            let p = |x: Pair| if g { x.gpu } else { x.cpu };
            let params = AttentionParams::new(n_heads, n_kv, hd, ctx);
            be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(out))
        });
    }
    b.assert_passed(seed);
    let used = kernels_run(&b);
    let is_coop = |k: &&Kernel| matches!(k, Kernel::AttentionCoop(_));
    let is_quads =
        |k: &&Kernel| matches!(k, Kernel::Attention(AttentionKernel::AttentionQuads { .. }));
    // Distinct kernels: on cooperative matrices 2 head sizes × 2 head
    // counts, the quads for the rest (F32 caches, heads of 256).
    let (coops, quads) = match (coop, b.gpu.features().subgroups) {
        (true, _) => (4, 4),
        (false, true) => (0, 6),
        (false, false) => (0, 0),
    };
    assert_eq!(
        (
            used.iter().filter(is_coop).count(),
            used.iter().filter(is_quads).count()
        ),
        (coops, quads),
        "seed {seed}: kernels run: {used:?}"
    );
}

/// Decode of a K-quant weight of many short rows, an output projection's
/// shape (`MatVecDot` 16 rows a workgroup), alone and with the residual
/// add, against the CPU on the same Q8 rounding of `x`. The rows end in a
/// part of a workgroup.
#[test]
fn f32_mode_decode_of_many_short_k_quant_rows() {
    let (seed, mut b) = f32_mode_bench();
    let (m, k) = (16384 + 16 * 3 + 5, 512);
    let x = b.f32s(1, k, 1.0);
    let xr = b.output(F32, 1, k);
    let r = b.f32s(1, m, 1.0);
    for t in [GgmlType::Q4_K, GgmlType::Q6_K] {
        let w = b.weight(t, m, k);
        let (out, sum) = (b.output(F32, 1, m), b.output(F32, 1, m));
        let matvec_add = |be: &mut dyn Backend, g: bool| {
            let p = |t: Pair| if g { t.gpu } else { t.cpu };
            let x = if g {
                x.gpu
            } else {
                cpu_q8_rounded(be, x.cpu, xr.cpu)?
            };
            be.matmul(p(w), x, p(out))?;
            be.add(p(r), p(out), p(sum))
        };
        b.check(&format!("matmul {t} m={m} k={k}"), 1e-9, out, matvec_add);
        b.check(
            &format!("matmul+add {t} m={m} k={k}"),
            1e-9,
            sum,
            matvec_add,
        );
    }
    b.assert_passed(seed);
}

/// Decode mat-vecs that do not join (weights of different types) one
/// after the other, as a Gemma 3 Q4_K_M's layers run them: Q (F16), K
/// (Q5_0) and V (Q8_0) of one normed input, each held for a residual add
/// in turn, must each be written (a held one was once dropped by the
/// next: K read as never written); and a SiLU GLU of a Q8_0 gate and an
/// F32 up before a Q5_0 down. Rows of 2 and 3 blocks.
#[test]
fn f32_mode_decode_mat_vecs_of_mixed_types_in_turn() {
    let (seed, mut b) = f32_mode_bench();
    let (e, f, n) = (64usize, 96usize, 1usize);
    let x = b.f32s(n, e, 1.0);
    let nw = b.f32s(1, e, 1.0);
    let (h, hr) = (b.output(F32, n, e), b.output(F32, n, e));
    let wq = b.weight(F16, 128, e);
    let wk = b.weight(GgmlType::Q5_0, 64, e);
    let wv = b.weight(GgmlType::Q8_0, 64, e);
    let (oq, ok, ov) = (
        b.output(F32, n, 128),
        b.output(F32, n, 64),
        b.output(F32, n, 64),
    );
    let qkv = |be: &mut dyn Backend, g: bool| {
        let p = |t: Pair| if g { t.gpu } else { t.cpu };
        be.rms_norm(p(x), Some(p(nw)), 1e-5, p(h))?;
        let hh = if g {
            h.gpu
        } else {
            cpu_q8_rounded(be, h.cpu, hr.cpu)?
        };
        be.matmul(p(wq), p(h), p(oq))?;
        be.matmul(p(wk), hh, p(ok))?;
        be.matmul(p(wv), hh, p(ov))
    };
    b.check("q", 1e-6, oq, qkv);
    b.check("k", 1e-6, ok, qkv);
    b.check("v", 1e-6, ov, qkv);
    let wg = b.weight(GgmlType::Q8_0, f, e);
    let wu = b.weight(F32, f, e);
    let wd = b.weight(GgmlType::Q5_0, e, f);
    let (g2, u2, a2, a2r, dn) = (
        b.output(F32, n, f),
        b.output(F32, n, f),
        b.output(F32, n, f),
        b.output(F32, n, f),
        b.output(F32, n, e),
    );
    let ffn = |be: &mut dyn Backend, g: bool| {
        let p = |t: Pair| if g { t.gpu } else { t.cpu };
        let hh = if g {
            x.gpu
        } else {
            cpu_q8_rounded(be, x.cpu, hr.cpu)?
        };
        be.matmuls(&[p(wg), p(wu)], hh, &[p(g2), p(u2)])?;
        be.silu_mul(p(g2), p(u2), p(a2))?;
        let a = if g {
            a2.gpu
        } else {
            cpu_q8_rounded(be, a2.cpu, a2r.cpu)?
        };
        be.matmul(p(wd), a, p(dn))
    };
    // Each side rounds its own GLU output to Q8, and on 96 values a step
    // apart moves the sum by up to ~1e-4: ggml's quantized-matmul bound
    // (an unwritten or wrong output is far beyond it).
    b.check("down", matmul_tol(GgmlType::Q5_0), dn, ffn);
    b.assert_passed(seed);
}
