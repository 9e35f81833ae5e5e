//! End to end on the GPU (lavapipe in CI): SmolLM2-135M Q4_1 against
//! llama.cpp's outputs and top-10 log-probabilities (`testdata/reference`),
//! teacher forced, and the one-submission-per-token rule on real decoding.

mod common;
#[path = "common/reference.rs"]
mod reference;

use reference::{argmax, cases, greedy, teacher_forced};
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::model::{Batch, Session, SessionParams};

const REFERENCE: &str = "smollm2-135m-q4_1-greedy.json";

fn session(n_outputs: usize) -> Session {
    session_with(n_outputs, &GpuOptions::default())
}

fn session_with(n_outputs: usize, opts: &GpuOptions) -> Session {
    let gpu = GpuBackend::new(opts).expect("a GPU adapter (lavapipe in CI)");
    let params = SessionParams {
        n_ctx: Some(128),
        n_outputs,
        ..SessionParams::default()
    };
    reference::session(common::SMOLLM2, Box::new(gpu), params)
}

/// The prompt and llama.cpp's output in one batch: at every step where
/// llama.cpp's top-1 beats its top-2 by 0.5 nats our top-1 must be the
/// same, and our log-prob of its top-1 within 0.05 nats on average on every
/// prompt, as on the CPU (the kernels round as ggml's CPU code does; the
/// worst prompt measured 0.045).
#[test]
fn smollm2_on_gpu_agrees_with_llama_cpp_teacher_forced() {
    teacher_forced_within(&mut session(64), 0.05);
}

/// The same in the f32-activation mode (`--gpu-f32-acts`: plain hardware
/// arithmetic, activations never rounded to 8 bits, cooperative matrices
/// where the adapter has them), which computes the f32 maths of the CPU
/// reference rather than ggml's rounding: the same top-1 at every clear
/// step, and a slightly looser mean bound (measured worst prompt 0.047 on
/// lavapipe). Free-running greedy does not follow llama.cpp's clear
/// prefixes in this mode: the first prompt parts at step 5.
#[test]
fn smollm2_f32_mode_on_gpu_agrees_with_llama_cpp_teacher_forced() {
    let opts = GpuOptions {
        quantize_activations: false,
        ..GpuOptions::default()
    };
    teacher_forced_within(&mut session_with(64, &opts), F32_MODE_BOUND);
}

/// Mean |Δ logprob| allowed in the f32-activation mode.
const F32_MODE_BOUND: f64 = 0.06;

fn teacher_forced_within(s: &mut Session, bound: f64) {
    let mut worst = 0f64;
    for case in cases(REFERENCE) {
        let (checked, bad, mean) = teacher_forced(s, &case);
        eprintln!(
            "{:?}: {checked} clear steps, mean |Δ logprob| {mean:.4}",
            case.prompt
        );
        assert!(checked > 0);
        assert!(bad.is_empty(), "{:?}: top-1 differs: {bad:?}", case.prompt);
        worst = worst.max(mean);
    }
    eprintln!("worst mean |Δ logprob| {worst:.4}");
    assert!(worst <= bound, "mean |Δ logprob| {worst} > {bound} nats");
}

/// Free-running greedy decoding, one token per submission, reproduces
/// llama.cpp's output over each prompt's clear prefix (issue 4, as on the
/// CPU). This holds because the kernels round as ggml's CPU code does
/// (`kernels/exact.wgsl`).
#[test]
fn smollm2_greedy_on_gpu_reproduces_clear_prefix() {
    let mut s = session(1);
    for case in cases(REFERENCE) {
        let out = greedy(&mut s, &case);
        eprintln!("{:?}: {} steps", case.prompt, out.len());
        assert_eq!(
            out,
            case.output_ids[..case.clear_prefix_len],
            "{:?}",
            case.prompt
        );
    }
}

/// Free-running decode: each generated token is one submission.
#[test]
fn gpu_decode_is_one_submission_per_token() {
    let mut s = session(1);
    let case = &cases(REFERENCE)[0];
    let np = case.prompt_ids.len();
    let mut next = argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
    for i in 0..4 {
        let before = s.model().backend_stats();
        next = argmax(s.decode(&Batch::sequence(&[next], np + i, 0)).unwrap());
        let after = s.model().backend_stats();
        assert_eq!(after.submissions - before.submissions, 1, "step {i}");
        assert!(after.dispatches - before.dispatches > 30 * 10, "{after:?}");
        eprintln!(
            "token {i}: {} submission, {} dispatches",
            after.submissions - before.submissions,
            after.dispatches - before.dispatches
        );
    }
}
