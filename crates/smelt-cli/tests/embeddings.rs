//! Embeddings of SmolLM2 on the CPU against llama.cpp's `llama-embedding`
//! (`testdata/embeddings`): `/v1/embeddings` driven by the real `openai`
//! Python client (`tests/serve/embeddings_client.py`, mean pooling), and
//! `smelt embed` (last pooling, and none). The GPU's hidden states are
//! checked against the CPU's in `smelt/tests/arch_gpu.rs`.

mod serve_support;

use std::process::Command;

use serde_json::Value;
use serve_support::{SMOLLM2, Server, model, repo};

const REFERENCE: &str = "testdata/embeddings/smollm2-135m-q4_1.json";

#[test]
fn openai_python_client_embeddings() {
    let server = Server::start(&["--parallel", "2", "--ctx", "256", "--pooling", "mean"]);
    let out = Command::new("python3")
        .arg(repo("tests/serve/embeddings_client.py"))
        .arg(server.url())
        .arg(repo(REFERENCE))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    eprintln!("{stdout}");
    assert!(server.terminate().success());
}

fn embed(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .arg("embed")
        .arg("-m")
        .arg(model(SMOLLM2))
        .args(["--backend", "cpu", "--ctx", "256"])
        .args(args)
        .output()
        .expect("smelt embed runs");
    assert!(
        out.status.success(),
        "smelt embed {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// `smelt embed --pooling last` gives llama-embedding's vectors.
#[test]
fn embed_cli_last_pooling_matches_llama_cpp() {
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(repo(REFERENCE)).unwrap()).unwrap();
    let texts: Vec<&str> = reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let mut args = vec!["--pooling", "last"];
    args.extend(&texts);
    let out = embed(&args);
    let data = out["data"].as_array().unwrap();
    assert_eq!(data.len(), texts.len());
    let (mut worst_cos, mut worst_diff) = (1f64, 0f64);
    for (d, want) in data.iter().zip(reference["last"].as_array().unwrap()) {
        let (got, want) = (floats(&d["embedding"]), floats(want));
        assert_eq!(got.len(), want.len());
        worst_cos = worst_cos.min(cosine(&got, &want));
        let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs());
        worst_diff = worst_diff.max(diff.fold(0.0, f64::max));
    }
    eprintln!(
        "last pooling vs llama-embedding: min cosine {worst_cos:.7}, max |diff| {worst_diff:.2e}"
    );
    assert!(worst_cos > 0.999, "cosine {worst_cos}");
    assert_eq!(out["usage"]["prompt_tokens"], 49);
}

/// Without a pooling (SmolLM2's file names none), a vector per token, each
/// of unit length, as llama-embedding prints them.
#[test]
fn embed_cli_defaults_to_a_vector_per_token() {
    let out = embed(&["Hello, world!"]);
    assert_eq!(out["pooling"], "none");
    let rows = out["data"][0]["embedding"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "one vector per token of 'Hello, world!'");
    for row in rows {
        let v = floats(row);
        assert_eq!(v.len(), 576);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
}

/// `smelt serve` without `--pooling`, for a model that names none, pools
/// the last token's state: /v1/embeddings answers without a flag, with
/// what `smelt embed --pooling last` gives.
#[test]
fn serve_pools_the_last_token_when_the_model_names_no_pooling() {
    let text = "Hello, world!";
    let want = floats(&embed(&["--pooling", "last", text])["data"][0]["embedding"]);
    let server = Server::start(&["--ctx", "256", "--backend", "cpu"]);
    let body = serde_json::json!({ "input": text });
    let response = serve_support::post_json(server.addr, "/v1/embeddings", &body);
    assert_eq!(response.status, 200, "{}", response.body);
    let got = floats(&response.json()["data"][0]["embedding"]);
    assert_eq!(got.len(), want.len());
    let cos = cosine(&got, &want);
    assert!(cos > 0.99999, "cosine {cos} to smelt embed --pooling last");
    assert!(server.terminate().success());
}
