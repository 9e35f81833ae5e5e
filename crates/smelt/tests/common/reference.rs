//! llama.cpp's greedy references (`testdata/reference/*-greedy.json`) and
//! the checks against them: teacher forcing, top-1 agreement where the
//! reference margin is clear, and log-probability differences.
//!
//! Test binaries that use it declare it next to `common`:
//! `#[path = "common/reference.rs"] mod reference;`.

#![allow(dead_code)]

use serde_json::Value;
use smelt::backend::Backend;
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};

pub struct Case {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    /// Per generated step: llama.cpp's ten most likely (id, log-prob).
    pub top: Vec<Vec<(u32, f64)>>,
    pub clear_prefix_len: usize,
}

pub fn cases(file: &str) -> Vec<Case> {
    let text =
        std::fs::read_to_string(crate::common::testdata(&format!("reference/{file}"))).unwrap();
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
    let gguf = GgufFile::open(crate::common::model(file)).unwrap();
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
    let logits = teacher_forced_logits(s, case);
    compare_steps(case, &logits, s.config().n_vocab)
}

/// The logits of every generated step (`steps × vocab`), teacher forced.
pub fn teacher_forced_logits(s: &mut Session, case: &Case) -> Vec<f32> {
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
    s.decode(&batch).unwrap().to_vec()
}

/// Our logits of each step against the case's top candidates: (steps whose
/// reference top-1 beats its top-2 by 0.5 nats or more, those where our
/// top-1 differs, mean |Δ log-prob| of the reference top-1).
pub fn compare_steps(case: &Case, logits: &[f32], vocab: usize) -> (usize, Vec<String>, f64) {
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

/// Free-running greedy decoding of `case`'s prompt in slot 0: the first
/// `clear_prefix_len` ids, one decode per generated token.
pub fn greedy(s: &mut Session, case: &Case) -> Vec<u32> {
    s.truncate(0, 0);
    let np = case.prompt_ids.len();
    let mut next = argmax(s.decode(&Batch::sequence(&case.prompt_ids, 0, 0)).unwrap());
    let mut out = vec![next];
    while out.len() < case.clear_prefix_len {
        let pos = np + out.len() - 1;
        next = argmax(s.decode(&Batch::sequence(&[next], pos, 0)).unwrap());
        out.push(next);
    }
    out.truncate(case.clear_prefix_len);
    out
}
