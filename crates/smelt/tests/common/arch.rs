//! The architecture checks against llama.cpp (`testdata/arch/*.json`,
//! recorded by `scripts/record_arch.py` on the synthetic models of
//! `scripts/synth_arch.py`, which the tests generate into the target
//! directory): top-10 log-probabilities at every position of the recorded
//! sequences, and greedy tokens over each continuation's clear prefix.
//!
//! Test binaries that use it declare it next to `common`:
//! `#[path = "common/arch.rs"] mod arch;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use smelt::backend::Backend;
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};
use smelt::quant::GgmlType;

/// A greedy step is clear when llama.cpp's top-1 beats its top-2 by this.
pub const CLEAR_MARGIN: f64 = 0.1;

/// Per position or step: llama.cpp's ten most likely (id, log-prob).
pub type Top10 = Vec<Vec<(u32, f64)>>;

/// One recorded run: a context size and what llama.cpp gave in it.
pub struct Run {
    pub n_ctx: usize,
    /// The KV cache type llama.cpp ran with.
    pub kv_type: GgmlType,
    /// Teacher-forced sequences: tokens, and per position the top 10.
    pub sequences: Vec<(Vec<u32>, Top10)>,
    /// Greedy continuations: prompt, output, per step the top 10.
    pub greedy: Vec<(Vec<u32>, Vec<u32>, Top10)>,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn tops(v: &Value) -> Top10 {
    v.as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step.as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap()))
                .collect()
        })
        .collect()
}

/// The reference of `arch`, and the path of its synthetic model.
pub fn reference(arch: &str) -> (Vec<Run>, PathBuf) {
    let path = crate::common::testdata(&format!("arch/{arch}.json"));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let sha = json["model"]["sha256"].as_str().unwrap();
    let model = synthetic_model(arch, sha);
    let runs = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Run {
            n_ctx: r["n_ctx"].as_u64().unwrap() as usize,
            kv_type: match r["kv_type"].as_str() {
                Some("f32") => GgmlType::F32,
                _ => GgmlType::F16,
            },
            sequences: r["sequences"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (ids(&s["tokens"]), tops(&s["top"])))
                .collect(),
            greedy: r["greedy"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| (ids(&g["prompt"]), ids(&g["output"]), tops(&g["top"])))
                .collect(),
        })
        .collect();
    (runs, model)
}

static GENERATING: Mutex<()> = Mutex::new(());

/// `scripts/synth_arch.py ARCH` into the target directory, once: its
/// SHA-256 (which the script prints) must be the one the reference was
/// recorded on.
pub fn synthetic_model(arch: &str, sha: &str) -> PathBuf {
    let _one = GENERATING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("arch");
    std::fs::create_dir_all(&dir).unwrap();
    let (model, stamp) = (
        dir.join(format!("{arch}.gguf")),
        dir.join(format!("{arch}.sha256")),
    );
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == sha) && model.is_file() {
        return model;
    }
    let tmp = dir.join(format!("{arch}.gguf.{}", std::process::id()));
    let script = crate::common::testdata("../scripts/synth_arch.py");
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(&script)
        .arg(arch)
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 for synth_arch.py: {e}"));
    assert!(
        out.status.success(),
        "synth_arch.py {arch} failed (PYTHONPATH needs the gguf package: scripts/test.sh sets it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        made, sha,
        "synth_arch.py {arch} wrote other bytes than the reference was recorded on: \
         re-record testdata/arch/{arch}.json (scripts/record_arch.py)"
    );
    std::fs::rename(&tmp, &model).unwrap();
    std::fs::write(&stamp, sha).unwrap();
    model
}

pub fn session(model: &Path, backend: Box<dyn Backend>, run: &Run, n_outputs: usize) -> Session {
    let gguf = GgufFile::open(model).unwrap();
    let model = Model::load(&gguf, backend, &mut |_, _| {}).unwrap();
    let params = SessionParams {
        n_ctx: Some(run.n_ctx),
        n_outputs,
        kv_type: run.kv_type,
        ..SessionParams::default()
    };
    Session::new(model, params).unwrap()
}

/// `log_softmax` in f64.
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

/// The largest |Δ log-prob| over llama.cpp's top 10 of one position.
fn top10_delta(logits: &[f32], top: &[(u32, f64)]) -> f64 {
    let lp = log_probs(logits);
    top.iter()
        .map(|&(id, l)| (lp[id as usize] - l).abs())
        .fold(0.0, f64::max)
}

/// What one architecture on one backend gave against the reference.
#[derive(Debug, Default)]
pub struct Report {
    /// Largest |Δ log-prob| over every position's top 10, and where.
    pub max_delta: f64,
    pub worst: (usize, usize),
    pub positions: usize,
    /// Greedy tokens compared over clear prefixes, and the first mismatch.
    pub greedy_tokens: usize,
    pub greedy_mismatch: Option<String>,
    /// Largest |Δ log-prob| of the greedy steps within the clear prefix.
    pub greedy_max_delta: f64,
}

/// Runs every recorded sequence and continuation of `arch` on backends
/// made by `backend`.
pub fn check(arch: &str, backend: &dyn Fn() -> Box<dyn Backend>) -> Report {
    let (runs, model) = reference(arch);
    let mut r = Report::default();
    for run in &runs {
        let longest = run.sequences.iter().map(|s| s.0.len()).max().unwrap();
        let mut s = session(&model, backend(), run, longest);
        let vocab = s.config().n_vocab;
        for (si, (tokens, top)) in run.sequences.iter().enumerate() {
            // Every position of the sequence in one batch.
            let mut batch = Batch::default();
            for (i, &t) in tokens.iter().enumerate() {
                batch.push(t, i, 0, true);
            }
            s.truncate(0, 0);
            let logits = s.decode(&batch).unwrap();
            for (i, top) in top.iter().enumerate() {
                let d = top10_delta(&logits[i * vocab..(i + 1) * vocab], top);
                if d > r.max_delta {
                    (r.max_delta, r.worst) = (d, (si, i));
                }
                r.positions += 1;
            }
        }
        for (prompt, output, top) in &run.greedy {
            let clear = top
                .iter()
                .take_while(|t| t[0].1 - t[1].1 >= CLEAR_MARGIN)
                .count();
            s.truncate(0, 0);
            let mut logits = s.decode(&Batch::sequence(prompt, 0, 0)).unwrap().to_vec();
            for step in 0..clear {
                let ours = smelt::sample::argmax(&logits);
                r.greedy_max_delta = r.greedy_max_delta.max(top10_delta(&logits, &top[step]));
                if ours != output[step] && r.greedy_mismatch.is_none() {
                    r.greedy_mismatch = Some(format!(
                        "prompt {prompt:?}: step {step} gives {ours}, llama.cpp {}",
                        output[step]
                    ));
                }
                r.greedy_tokens += 1;
                let pos = prompt.len() + step;
                logits = s
                    .decode(&Batch::sequence(&[output[step]], pos, 0))
                    .unwrap()
                    .to_vec();
            }
        }
    }
    eprintln!("{arch}: {r:?}");
    r
}

/// Asserts a report against a log-probability bound.
pub fn assert_within(arch: &str, r: &Report, bound: f64) {
    assert!(
        r.positions > 0 && r.greedy_tokens > 0,
        "{arch}: nothing compared"
    );
    assert!(
        r.max_delta <= bound,
        "{arch}: top-10 log-probs differ from llama.cpp by {:.2e} > {bound:.0e}",
        r.max_delta
    );
    assert!(
        r.greedy_max_delta <= bound,
        "{arch}: greedy steps' log-probs differ by {:.2e} > {bound:.0e}",
        r.greedy_max_delta
    );
    assert!(
        r.greedy_mismatch.is_none(),
        "{arch}: {:?}",
        r.greedy_mismatch
    );
}
