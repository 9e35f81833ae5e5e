//! Every architecture on the GPU (lavapipe in CI) against llama.cpp's CPU
//! outputs (`testdata/arch`), in both GPU modes: ggml's rounding (the
//! `--exact` mode) within 1e-3 of llama.cpp's top-10 log-probabilities at
//! every position, and the fast mode (f32 activations, plain hardware
//! arithmetic) within 2e-2; greedy tokens over each continuation's clear
//! prefix in both. See `common/arch.rs`.

#[path = "common/arch.rs"]
mod arch;
mod common;

use smelt::backend::Backend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};

/// |Δ log-prob| bounds: ggml's rounding, and the fast mode's.
const EXACT: f64 = 1e-3;
const FAST: f64 = 2e-2;

fn gpu(quantize_activations: bool) -> Box<dyn Backend> {
    let opts = GpuOptions {
        quantize_activations,
        ..GpuOptions::default()
    };
    Box::new(GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)"))
}

fn exact(arch: &str) {
    let r = arch::check(arch, &|| gpu(true));
    arch::assert_within(arch, &r, EXACT);
}

fn fast(arch: &str) {
    let r = arch::check(arch, &|| gpu(false));
    arch::assert_within(arch, &r, FAST);
}

#[test]
fn qwen2_gpu_exact() {
    exact("qwen2");
}

#[test]
#[ignore = "fast mode is 0.46-0.51 nats from llama.cpp on the peaked synthetic Qwen models (issue 25: bound 2e-2)"]
fn qwen2_gpu_fast() {
    fast("qwen2");
}

#[test]
fn qwen3_gpu_exact() {
    exact("qwen3");
}

#[test]
#[ignore = "fast mode is 0.46-0.51 nats from llama.cpp on the peaked synthetic Qwen models (issue 25: bound 2e-2)"]
fn qwen3_gpu_fast() {
    fast("qwen3");
}

#[test]
fn mistral_gpu_exact() {
    exact("mistral");
}

#[test]
fn mistral_gpu_fast() {
    fast("mistral");
}

#[test]
#[ignore = "greedy decode steps 0.11 nats from llama.cpp (teacher-forced prefill within 8.4e-5): the GPU decode of a sliding NeoX layer to find"]
fn gemma2_gpu_exact() {
    exact("gemma2");
}

#[test]
#[ignore = "not passing yet: see gemma2_gpu_exact"]
fn gemma2_gpu_fast() {
    fast("gemma2");
}

#[test]
#[ignore = "teacher-forced prefill 0.23 nats from llama.cpp at a 40-token sequence (greedy decode within 6.7e-5): to find"]
fn phi3_gpu_exact() {
    exact("phi3");
}

#[test]
#[ignore = "not passing yet: see phi3_gpu_exact"]
fn phi3_gpu_fast() {
    fast("phi3");
}

/// The GPU has no mixture-of-experts kernels yet: a Qwen 3 MoE model is
/// refused at load with the op it lacks, not run wrong or panicking.
#[test]
fn qwen3moe_gpu_is_a_clear_error() {
    let (runs, model) = arch::reference("qwen3moe");
    let gguf = smelt::gguf::GgufFile::open(&model).unwrap();
    let err = smelt::model::Model::load(&gguf, gpu(true), &mut |_, _| {})
        .err()
        .expect("no MoE on the GPU yet");
    let msg = err.to_string();
    assert!(msg.contains("TopKMoe"), "{msg}");
    assert!(!runs.is_empty());
}
