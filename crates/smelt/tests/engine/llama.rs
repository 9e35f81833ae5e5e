//! The Llama forward pass on SmolLM2-135M Q4_1 against llama.cpp's greedy
//! outputs and top-10 log-probabilities (`testdata/reference`).

use smelt::backend::cpu::CpuBackend;
use smelt::model::SessionParams;

use crate::common;
use crate::reference::{cases, greedy, session, teacher_forced};

#[test]
fn smollm2_teacher_forced_matches_llama_cpp() {
    let params = SessionParams {
        n_ctx: Some(128),
        n_outputs: 64,
        ..SessionParams::default()
    };
    let mut s = session(
        common::SMOLLM2,
        Box::new(CpuBackend::new(2).unwrap()),
        params,
    );
    let (mut total, mut steps) = (0f64, 0);
    for case in cases("smollm2-135m-q4_1-greedy.json") {
        let (checked, bad, mean_delta) = teacher_forced(&mut s, &case);
        eprintln!(
            "{:?}: {checked} clear steps, mean |Δ logprob| {mean_delta:.4}",
            case.prompt
        );
        assert!(bad.is_empty(), "{:?}: top-1 differs: {bad:?}", case.prompt);
        assert!(checked > 0);
        total += mean_delta * case.top.len() as f64;
        steps += case.top.len();
    }
    let mean = total / steps as f64;
    eprintln!("mean |Δ logprob| over {steps} steps: {mean:.4}");
    assert!(mean <= 0.05, "mean |Δ logprob| {mean} > 0.05 nats");
}

#[test]
fn smollm2_greedy_reproduces_clear_prefix() {
    let mut s = session(
        common::SMOLLM2,
        Box::new(CpuBackend::new(2).unwrap()),
        SessionParams {
            n_ctx: Some(128),
            ..SessionParams::default()
        },
    );
    for case in cases("smollm2-135m-q4_1-greedy.json") {
        let out = greedy(&mut s, &case);
        assert_eq!(
            out,
            case.output_ids[..case.clear_prefix_len],
            "{:?}",
            case.prompt
        );
    }
}
