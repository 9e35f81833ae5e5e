//! The Llama forward pass on SmolLM2-135M Q4_1 against llama.cpp's greedy
//! outputs and top-10 log-probabilities (`testdata/reference`).

use serde_json::Value;
use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};

use crate::common;

pub struct Case {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    /// Per generated step: llama.cpp's ten most likely (id, log-prob).
    pub top: Vec<Vec<(u32, f64)>>,
    pub clear_prefix_len: usize,
}

pub fn cases(file: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(common::testdata(&format!("reference/{file}"))).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
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

pub fn session(file: &str, backend: Box<dyn Backend>, params: SessionParams) -> Session {
    let gguf = GgufFile::open(common::model(file)).unwrap();
    let model = Model::load(&gguf, backend, &mut |_, _| {}).unwrap();
    Session::new(model, params).unwrap()
}

/// `log_softmax` in f64.
pub fn log_probs(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&l| l as f64 - z).collect()
}

pub fn argmax(v: &[f32]) -> u32 {
    smelt::sample::argmax(v)
}

/// Teacher forcing: the prompt and llama.cpp's output in one batch, logits
/// for every generated step. Returns (steps checked for top-1, mismatches,
/// mean |Δ log-prob| of llama.cpp's top-1).
pub fn teacher_forced(s: &mut Session, case: &Case) -> (usize, Vec<String>, f64) {
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
    let vocab = s.config().n_vocab;
    let logits = s.decode(&batch).unwrap().to_vec();
    let (mut checked, mut bad, mut delta) = (0, Vec::new(), 0.0);
    for (step, top) in case.top.iter().enumerate() {
        let row = &logits[step * vocab..(step + 1) * vocab];
        let lp = log_probs(row);
        let (ref_id, ref_lp) = top[0];
        delta += (lp[ref_id as usize] - ref_lp).abs();
        if ref_lp - top[1].1 >= 0.5 {
            checked += 1;
            let ours = argmax(row);
            if ours != ref_id {
                bad.push(format!("step {step}: ours {ours}, llama.cpp {ref_id}"));
            }
        }
    }
    (checked, bad, delta / case.top.len() as f64)
}

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
        s.truncate(0, 0);
        let np = case.prompt_ids.len();
        let mut next = argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
        let mut out = vec![next];
        while out.len() < case.clear_prefix_len {
            let pos = np + out.len() - 1;
            next = argmax(s.decode(&Batch::sequence(&[next], pos, 0)).unwrap());
            out.push(next);
        }
        assert_eq!(
            out,
            case.output_ids[..case.clear_prefix_len],
            "{:?}",
            case.prompt
        );
    }
}
