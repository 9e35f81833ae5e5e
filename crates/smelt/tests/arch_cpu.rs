//! Every architecture on the CPU against llama.cpp's CPU outputs
//! (`testdata/arch`): top-10 log-probabilities within 1e-3 at every
//! position of the recorded sequences, and greedy tokens over each
//! continuation's clear prefix. See `common/arch.rs`.
//!
//! The backend keeps ggml's order of every quantized matmul
//! (`CpuBackend::new_exact`): the synthetic models' peaked attention turns
//! the interleaved prefill GEMM's other f32 order into up to 0.1 nats at a
//! position, as it would any model's near-ties.

#[path = "common/arch.rs"]
mod arch;
mod common;

use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;

/// The bound on |Δ log-prob| on the CPU, which rounds as ggml does.
const BOUND: f64 = 1e-3;

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new_exact(2).unwrap())
}

fn check(arch: &str) {
    let r = arch::check(arch, &cpu);
    arch::assert_within(arch, &r, BOUND);
}

#[test]
fn qwen2_cpu() {
    check("qwen2");
}

#[test]
fn qwen3_cpu() {
    check("qwen3");
}

#[test]
fn qwen3moe_cpu() {
    check("qwen3moe");
}

#[test]
fn gemma2_cpu() {
    check("gemma2");
}

#[test]
fn mistral_cpu() {
    check("mistral");
}

#[test]
fn phi3_cpu() {
    check("phi3");
}
