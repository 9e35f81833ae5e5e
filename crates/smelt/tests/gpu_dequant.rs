//! The GPU's in-register block decoding against an independent reference:
//! the `gguf` Python package's numpy dequantizers. For every weight type,
//! random GGUF blocks (random quants, finite scales) go through the GPU's
//! get_rows and through `gguf.quants.dequantize`; the values must agree to
//! f16 rounding of the scales' products (f32 arithmetic on both sides).

use std::io::Write;
use std::process::{Command, Stdio};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::gpu::{GpuBackend, GpuOptions, WEIGHT_TYPES};
use smelt::backend::{Backend, BackendExt, WeightData};
use smelt::quant::GgmlType;

/// Random blocks with every f16 scale field set to a finite value.
fn random_blocks(rng: &mut StdRng, dtype: GgmlType, n: usize) -> Vec<u8> {
    let f16 = |rng: &mut StdRng, lo: f32, hi: f32| {
        half::f16::from_f32(rng.gen_range(lo..hi)).to_le_bytes()
    };
    match dtype {
        GgmlType::F32 => (0..n)
            .flat_map(|_| rng.gen_range(-1.0f32..1.0).to_le_bytes())
            .collect(),
        GgmlType::F16 => (0..n).flat_map(|_| f16(rng, -1.0, 1.0)).collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.gen_range(-1.0f32..1.0)).to_le_bytes())
            .collect(),
        _ => {
            let size = dtype.type_size();
            let scales: &[usize] = match dtype {
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
                GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
                GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
                GgmlType::MXFP4 => &[],
                GgmlType::Q2_K => &[80, 82],
                GgmlType::Q3_K => &[108],
                GgmlType::Q6_K => &[208],
                other => panic!("no block generator for {other}"),
            };
            let mut out = vec![0u8; n / dtype.block_size() * size];
            rng.fill(&mut out[..]);
            for block in out.chunks_exact_mut(size) {
                for &off in scales {
                    block[off..off + 2].copy_from_slice(&f16(rng, -0.05, 0.05));
                }
                if dtype == GgmlType::MXFP4 {
                    // The shared exponent: 2^-18 .. 2^2, subnormal scales
                    // are checked by the CPU's own tests.
                    block[0] = rng.gen_range(110..130);
                }
            }
            out
        }
    }
}

/// `gguf.quants.dequantize` of `bytes` (a whole number of blocks of `dtype`).
fn python_dequantize(dtype: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let script = format!(
        "import sys, numpy as np\n\
         try:\n    from gguf.quants import dequantize\n    from gguf import GGMLQuantizationType as Q\n\
         except ImportError as e:\n    sys.exit(f'the gguf Python package is needed (scripts/requirements-test.txt): {{e}}')\n\
         raw = np.frombuffer(sys.stdin.buffer.read(), dtype=np.uint8)\n\
         out = dequantize(raw, Q.{}).astype(np.float32)\n\
         sys.stdout.buffer.write(out.tobytes())\n",
        dtype.name()
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python dequantize of {dtype} failed");
    bytemuck::pod_collect_to_vec(&out.stdout)
}

#[test]
fn gpu_block_decoding_matches_gguf_python() {
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut g = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter");
    let mut failures = Vec::new();
    for t in WEIGHT_TYPES {
        let (rows, cols) = (5, if t.block_size() == 256 { 512 } else { 96 });
        let bytes = random_blocks(&mut rng, t, rows * cols);
        let want = python_dequantize(t, &bytes);
        assert_eq!(want.len(), rows * cols);
        let table = g
            .load_weight("w", t, rows, cols, WeightData::from_vec(bytes))
            .unwrap();
        let ids = g.alloc(GgmlType::I32, 1, rows).unwrap();
        g.write_i32(ids, &(0..rows as i32).collect::<Vec<_>>())
            .unwrap();
        let out = g.alloc(GgmlType::F32, rows, cols).unwrap();
        g.get_rows(table, ids, out).unwrap();
        let got = g.read_f32(out).unwrap();
        let bad = (0..got.len()).find(|&i| {
            let (a, b) = (got[i], want[i]);
            !a.is_finite() || (a - b).abs() > 1e-6 * b.abs().max(1e-3)
        });
        if let Some(i) = bad {
            failures.push(format!("{t}: value {i}: gpu {} python {}", got[i], want[i]));
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}
