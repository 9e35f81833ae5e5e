//! `smelt run` and `smelt bench` on the GPU backend (lavapipe in CI), with
//! tiny settings: greedy text against llama.cpp's output, and bench's JSON
//! carrying the GPU's work per token.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

fn smelt(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("run smelt");
    assert!(
        out.status.success(),
        "smelt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn model() -> String {
    common::model(common::SMOLLM2).display().to_string()
}

/// Greedy `run -n 4` prints llama.cpp's first four tokens (" Paris.\n\n",
/// inside the reference's clear prefix), and `--verbose` one submission
/// per generated token.
#[test]
fn run_on_gpu_is_greedy_and_verbose() {
    let m = model();
    let out = smelt(&[
        "run",
        "-m",
        &m,
        "--backend",
        "gpu",
        "-n",
        "4",
        "--temp",
        "0",
        "--verbose",
        "-p",
        "The capital of France is",
    ]);
    let path = common::testdata("reference/smollm2-135m-q4_1-greedy.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = &json["cases"][0];
    assert_eq!(case["prompt"], "The capital of France is");
    let clear = case["clear_prefix_text"].as_str().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, " Paris.\n\n");
    assert!(clear.starts_with(&text), "{text:?} vs {clear:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("on Vulkan ("), "{err}");
    assert!(
        err.contains("generation: 1.00 submissions"),
        "no per-token line with one submission: {err}"
    );
}

/// `bench -o json` on the GPU: both tests, the backend named, decode in
/// one submission per token with the same dispatches every token.
#[test]
fn bench_on_gpu_reports_work_per_token() {
    let m = model();
    let out = smelt(&[
        "bench",
        "-m",
        &m,
        "--backend",
        "gpu",
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "1",
        "-o",
        "json",
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["test"], "pp8");
    assert_eq!(rows[1]["test"], "tg4");
    for r in rows {
        assert!(r["backends"].as_str().unwrap().starts_with("Vulkan ("));
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
    }
    // A forward pass is one submission: 1 per token decoding, 1/8 for a
    // batch of 8.
    assert_eq!(rows[1]["submissions_per_token"].as_f64(), Some(1.0));
    assert_eq!(rows[0]["submissions_per_token"].as_f64(), Some(0.125));
    let d = rows[1]["dispatches_per_token"].as_f64().unwrap();
    assert!(d >= 30.0 * 10.0 && d.fract() == 0.0, "dispatches/token {d}");
}
