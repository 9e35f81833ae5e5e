//! The GPU's Q8_0/Q4_0 KV cache against the CPU's (`backend/cpu/kv_blocks.rs`):
//! - `set_rows` bytes: each row rotated in groups (64 values, or 32 where
//!   64 does not divide the row: then a group's blocks share words with
//!   their neighbours') and quantized as ggml rounds; bit for bit in the
//!   exact mode, within one quant step and one f16 ulp of a scale in the
//!   fast mode; rows not written keep their bytes; K and V written by one paired dispatch, after the
//!   ropes, as the model writes them;
//! - attention over the same cache bytes, decode and prefill (each kernel
//!   the adapter runs: decode, rows, quads), windows and soft-caps, against
//!   the CPU reference (f64 sums over the dequantized, rotated-back cache)
//!   by normalised error;
//! - heads that split a rotation group refused in words.
//!
//! Random inputs; the seed is printed (SMELT_SEED replays one).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::backend::{AttentionParams, Backend, RopeMode, RopeParams, Tensor};
use smelt::quant::GgmlType::{self, F32, I32, Q4_0, Q8_0};

/// One tensor on both backends.
#[derive(Clone, Copy)]
struct Pair {
    cpu: Tensor,
    gpu: Tensor,
}

struct Bench {
    rng: StdRng,
    cpu: CpuBackend,
    gpu: GpuBackend,
    exact: bool,
    failures: Vec<String>,
}

impl Bench {
    fn new(seed: u64, opts: GpuOptions) -> Bench {
        Bench {
            rng: StdRng::seed_from_u64(seed),
            cpu: CpuBackend::reference(),
            exact: opts.quantize_activations,
            gpu: GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)"),
            failures: Vec::new(),
        }
    }

    fn input(&mut self, dtype: GgmlType, rows: usize, cols: usize, bytes: &[u8]) -> Pair {
        let cpu = self.cpu.alloc(dtype, rows, cols).unwrap();
        let gpu = self.gpu.alloc(dtype, rows, cols).unwrap();
        self.cpu.write(cpu, bytes).unwrap();
        self.gpu.write(gpu, bytes).unwrap();
        Pair { cpu, gpu }
    }

    /// Values in -1..1 with a few outlier channels (as RoPE'd keys have),
    /// which the rotation spreads over their group.
    fn f32s(&mut self, rows: usize, cols: usize) -> Pair {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let x = self.rng.gen_range(-1.0f32..1.0);
                if i % cols % 29 == 3 { 8.0 * x } else { x }
            })
            .collect();
        self.input(F32, rows, cols, bytemuck::cast_slice(&v))
    }

    fn i32s(&mut self, v: &[i32]) -> Pair {
        self.input(I32, 1, v.len(), bytemuck::cast_slice(v))
    }

    /// A cache of random bytes (whatever blocks they make) on both sides.
    fn cache(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Pair {
        let n = dtype.row_bytes(cols).unwrap() * rows;
        let bytes: Vec<u8> = (0..n).map(|_| self.rng.r#gen()).collect();
        self.input(dtype, rows, cols, &bytes)
    }
}

fn read(b: &mut dyn Backend, t: Tensor) -> Vec<u8> {
    let mut out = vec![0u8; t.n_bytes()];
    b.read(t, &mut out).unwrap();
    out
}

/// Where the GPU's cache bytes differ from the CPU's by more than the
/// mode allows (exact: none; fast: one quant step, one ulp of a scale),
/// or `None`.
fn block_difference(dtype: GgmlType, exact: bool, gpu: &[u8], cpu: &[u8]) -> Option<String> {
    let size = dtype.type_size();
    for (b, (g, c)) in gpu
        .chunks_exact(size)
        .zip(cpu.chunks_exact(size))
        .enumerate()
    {
        if g == c {
            continue;
        }
        if exact {
            return Some(format!("block {b}: {g:?} vs {c:?}"));
        }
        let d = |x: &[u8]| i32::from(u16::from_le_bytes([x[0], x[1]]));
        let quants = |x: &[u8]| -> Vec<i32> {
            match dtype {
                Q8_0 => x[2..].iter().map(|&q| i32::from(q as i8)).collect(),
                _ => x[2..]
                    .iter()
                    .flat_map(|&q| [i32::from(q & 15), i32::from(q >> 4)])
                    .collect(),
            }
        };
        let steps = quants(g)
            .iter()
            .zip(quants(c))
            .map(|(a, b)| (a - b).abs())
            .max();
        if (d(g) - d(c)).abs() > 1 || steps > Some(1) {
            return Some(format!("block {b}: {g:?} vs {c:?}"));
        }
    }
    None
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(*g), f64::from(*w));
        num += (g - w) * (g - w);
        den += w * w;
    }
    num / den
}

/// set_rows of 5 rows (in no order) into a cache of random
/// bytes: alone, and K and V as the model writes them (ropes, then both
/// writes, one dispatch on the GPU).
fn set_rows_cases(b: &mut Bench, dtype: GgmlType, cols: usize) {
    let rows = 40;
    let ids = b.i32s(&[3, 39, 0, 22, 17]);
    let src = b.f32s(5, cols);
    let cache = b.cache(dtype, rows, cols);
    for (be, gpu) in [(&mut b.cpu as &mut dyn Backend, false), (&mut b.gpu, true)] {
        let p = |x: Pair| if gpu { x.gpu } else { x.cpu };
        be.set_rows(p(src), p(ids), p(cache)).unwrap();
    }
    let (g, c) = (read(&mut b.gpu, cache.gpu), read(&mut b.cpu, cache.cpu));
    if let Some(d) = block_difference(dtype, b.exact, &g, &c) {
        b.failures
            .push(format!("set_rows {dtype} cols {cols}: {d}"));
    }

    // Q and K roped at the same positions, then K's and V's writes.
    let hd = 32;
    let (n_heads, n_kv) = (2 * cols / hd, cols / hd);
    let q = b.f32s(5, n_heads * hd);
    let k = b.f32s(5, cols);
    let v = b.f32s(5, cols);
    let pos = b.i32s(&[3, 9, 0, 1, 17]);
    let (q_rot, k_rot) = (b.f32s(5, n_heads * hd), b.f32s(5, cols));
    let (kc, vc) = (b.cache(dtype, rows, cols), b.cache(dtype, rows, cols));
    let rope = |heads| RopeParams {
        n_heads: heads,
        head_dim: hd,
        n_dims: hd,
        freq_base: 10000.0,
        freq_scale: 1.0,
        mode: RopeMode::Normal,
        freq_factors: None,
        attn_factor: 1.0,
    };
    for (be, gpu) in [(&mut b.cpu as &mut dyn Backend, false), (&mut b.gpu, true)] {
        let p = |x: Pair| if gpu { x.gpu } else { x.cpu };
        be.rope(p(q), p(pos), &rope(n_heads), p(q_rot)).unwrap();
        be.rope(p(k), p(pos), &rope(n_kv), p(k_rot)).unwrap();
        be.set_rows(p(k_rot), p(ids), p(kc)).unwrap();
        be.set_rows(p(v), p(ids), p(vc)).unwrap();
    }
    for (name, t) in [("K", kc), ("V", vc)] {
        let (g, c) = (read(&mut b.gpu, t.gpu), read(&mut b.cpu, t.cpu));
        // The ropes' sines and cosines may differ in a last bit (glibc's
        // vs the GPU's), and so a quant by a step, in either mode.
        if let Some(d) = block_difference(dtype, false, &g, &c) {
            b.failures
                .push(format!("rope + set_rows {dtype} cols {cols} {name}: {d}"));
        }
    }
}

/// Attention over caches of the same bytes on both sides (the CPU's
/// writes copied to the GPU), decode and prefill.
fn attention_cases(b: &mut Bench, dtype: GgmlType, (n_heads, n_kv, hd): (usize, usize, usize)) {
    let (ctx, slots) = (70, 2);
    let cols = n_kv * hd;
    let rows: Vec<i32> = (0..(slots * ctx) as i32).collect();
    let ids = b.i32s(&rows);
    let (k, v) = (b.f32s(slots * ctx, cols), b.f32s(slots * ctx, cols));
    let (kc, vc) = (
        b.cache(dtype, slots * ctx, cols),
        b.cache(dtype, slots * ctx, cols),
    );
    b.cpu.set_rows(k.cpu, ids.cpu, kc.cpu).unwrap();
    b.cpu.set_rows(v.cpu, ids.cpu, vc.cpu).unwrap();
    for t in [kc, vc] {
        let bytes = read(&mut b.cpu, t.cpu);
        b.gpu.write(t.gpu, &bytes).unwrap();
    }
    let cases: [(&str, Vec<i32>, Vec<i32>); 3] = [
        ("decode", vec![69], vec![1]),
        ("decode of two slots", vec![69, 5], vec![0, 1]),
        ("prefill", (0..37).collect(), vec![1; 37]),
    ];
    for (kind, pos_v, seq_v) in cases {
        let n = pos_v.len();
        let (pos, seq) = (b.i32s(&pos_v), b.i32s(&seq_v));
        let q = b.f32s(n, n_heads * hd);
        for (window, softcap) in [(None, None), (Some(16), None), (None, Some(2.0f32))] {
            let params = AttentionParams {
                window,
                softcap,
                ..AttentionParams::new(n_heads, n_kv, hd, ctx)
            };
            let out = b.input(F32, n, n_heads * hd, &vec![0xffu8; n * n_heads * hd * 4]);
            let name = format!(
                "attention {dtype} {n_heads}x{n_kv}x{hd} {kind} window={window:?} softcap={softcap:?}"
            );
            let mut outs = Vec::new();
            for (be, gpu) in [(&mut b.cpu as &mut dyn Backend, false), (&mut b.gpu, true)] {
                let p = |x: Pair| if gpu { x.gpu } else { x.cpu };
                be.attention(p(q), p(kc), p(vc), p(pos), p(seq), &params, p(out))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let bytes = read(be, p(out));
                outs.push(bytemuck::cast_slice::<u8, f32>(&bytes).to_vec());
            }
            let err = nmse(&outs[1], &outs[0]);
            // NaN fails too: it is not below the bound.
            if err.is_nan() || err > 1e-9 {
                b.failures
                    .push(format!("{name}: normalised error {err:.3e}"));
            }
        }
    }
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
    println!("{label}: seed {seed}, features {:?}", b.gpu.features());
    for dtype in [Q8_0, Q4_0] {
        // Rows of 4 groups of 64; of 3 groups of 32 (96 values); of one
        // block (its neighbours share words).
        for cols in [256, 96, 32] {
            set_rows_cases(&mut b, dtype, cols);
        }
        // Groups of 64 in heads of 64 and 256 (Gemma 3's), of 32 in heads
        // of 32.
        for shape in [(4, 2, 64), (2, 1, 256), (4, 1, 32)] {
            attention_cases(&mut b, dtype, shape);
        }
    }
    assert!(
        b.failures.is_empty(),
        "{label} (SMELT_SEED={seed}): {} failures:\n{}",
        b.failures.len(),
        b.failures.join("\n")
    );
}

#[test]
fn block_caches_match_the_cpu_with_adapter_features() {
    run("fast mode", GpuOptions::default());
}

#[test]
fn block_caches_match_the_cpu_without_subgroups_or_f16() {
    run(
        "portable fallbacks",
        GpuOptions {
            allow_subgroups: false,
            allow_shader_f16: false,
            shader_bounds_checks: true,
            ..GpuOptions::default()
        },
    );
}

#[test]
fn block_caches_match_the_cpu_in_the_exact_mode() {
    run("exact mode", GpuOptions::exact());
}

/// Heads of 32 values in rows of 64 (two heads): a rotation group spans
/// both, which the GPU's kernels cannot rotate per head.
#[test]
fn heads_splitting_a_rotation_group_are_refused_in_words() {
    let mut gpu = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter");
    let (n_heads, n_kv, hd, ctx) = (4, 2, 32, 8);
    let q = gpu.alloc(F32, 1, n_heads * hd).unwrap();
    let out = gpu.alloc(F32, 1, n_heads * hd).unwrap();
    let kc = gpu.alloc(Q8_0, ctx, n_kv * hd).unwrap();
    let vc = gpu.alloc(Q8_0, ctx, n_kv * hd).unwrap();
    let pos = gpu.alloc(I32, 1, 1).unwrap();
    let seq = gpu.alloc(I32, 1, 1).unwrap();
    let params = AttentionParams::new(n_heads, n_kv, hd, ctx);
    let e = gpu
        .attention(q, kc, vc, pos, seq, &params, out)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rotation groups of 64") && e.contains("--cache-type f16"),
        "{e}"
    );
}
