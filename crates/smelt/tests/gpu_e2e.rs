//! End to end on the GPU (lavapipe in CI): SmolLM2-135M Q4_1 against
//! llama.cpp's outputs and top-10 log-probabilities (`testdata/reference`),
//! teacher forced, and the one-submission-per-token rule on real decoding.

mod common;

use serde_json::Value;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};

struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    output_ids: Vec<u32>,
    /// Per generated step: llama.cpp's ten most likely (id, log-prob).
    top: Vec<Vec<(u32, f64)>>,
    /// Leading steps where llama.cpp's choice is clear of rounding.
    clear_prefix_len: usize,
}

fn cases() -> Vec<Case> {
    let path = common::testdata("reference/smollm2-135m-q4_1-greedy.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: c["prompt"].as_str().unwrap().to_string(),
            prompt_ids: ids(&c["prompt_ids"]),
            output_ids: ids(&c["output_ids"]),
            top: c["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    s["top"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap()))
                        .collect()
                })
                .collect(),
            clear_prefix_len: c["clear_prefix_len"].as_u64().unwrap() as usize,
        })
        .collect()
}

fn session(n_outputs: usize) -> Session {
    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let gpu = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter (lavapipe in CI)");
    let model = Model::load(&gguf, Box::new(gpu), &mut |_, _| {}).unwrap();
    let params = SessionParams {
        n_ctx: Some(128),
        n_outputs,
        ..SessionParams::default()
    };
    Session::new(model, params).unwrap()
}

fn log_probs(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z = logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&l| l as f64 - z).collect()
}

/// The prompt and llama.cpp's output in one batch: at every step where
/// llama.cpp's top-1 beats its top-2 by 0.5 nats our top-1 must be the
/// same, and our log-prob of its top-1 within 0.06 nats on average. (The
/// CPU is held to 0.05: it also sums in ggml's order, which a GPU
/// reduction does not; the GPU's worst prompt measured 0.053.)
#[test]
fn smollm2_on_gpu_agrees_with_llama_cpp_teacher_forced() {
    let mut s = session(64);
    let vocab = s.config().n_vocab;
    let mut worst = 0f64;
    for case in cases() {
        let np = case.prompt_ids.len();
        let tokens: Vec<u32> = case
            .prompt_ids
            .iter()
            .chain(&case.output_ids)
            .copied()
            .collect();
        let mut batch = Batch::default();
        for (i, &t) in tokens.iter().enumerate().take(tokens.len() - 1) {
            batch.push(t, i, 0, i + 1 >= np);
        }
        s.truncate(0, 0);
        let logits = s.decode(&batch).unwrap().to_vec();
        let (mut checked, mut bad, mut delta) = (0, Vec::new(), 0.0);
        for (step, top) in case.top.iter().enumerate() {
            let row = &logits[step * vocab..(step + 1) * vocab];
            let lp = log_probs(row);
            let (ref_id, ref_lp) = top[0];
            delta += (lp[ref_id as usize] - ref_lp).abs();
            if ref_lp - top[1].1 >= 0.5 {
                checked += 1;
                let ours = smelt::sample::argmax(row);
                if ours != ref_id {
                    bad.push(format!("step {step}: ours {ours}, llama.cpp {ref_id}"));
                }
            }
        }
        let mean = delta / case.top.len() as f64;
        eprintln!(
            "{:?}: {checked} clear steps, mean |Δ logprob| {mean:.4}",
            case.prompt
        );
        assert!(checked > 0);
        assert!(bad.is_empty(), "{:?}: top-1 differs: {bad:?}", case.prompt);
        worst = worst.max(mean);
    }
    assert!(worst <= 0.06, "mean |Δ logprob| {worst} > 0.06 nats");
}

/// Free-running greedy decoding, one token per submission, reproduces
/// llama.cpp's output over each prompt's clear prefix (issue 4, as on the
/// CPU). This holds because the kernels round as ggml's CPU code does
/// (`kernels/exact.wgsl`).
#[test]
fn smollm2_greedy_on_gpu_reproduces_clear_prefix() {
    let mut s = session(1);
    for case in cases() {
        s.truncate(0, 0);
        let np = case.prompt_ids.len();
        let mut next =
            smelt::sample::argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
        let mut out = vec![next];
        while out.len() < case.clear_prefix_len {
            let pos = np + out.len() - 1;
            next = smelt::sample::argmax(s.decode(&Batch::sequence(&[next], pos, 0)).unwrap());
            out.push(next);
        }
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
    let case = &cases()[0];
    let np = case.prompt_ids.len();
    let mut next =
        smelt::sample::argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
    for i in 0..4 {
        let before = s.model().backend_stats();
        next = smelt::sample::argmax(s.decode(&Batch::sequence(&[next], np + i, 0)).unwrap());
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
