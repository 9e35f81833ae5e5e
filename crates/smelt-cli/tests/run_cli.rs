//! `smelt run`, `smelt perplexity` and `smelt bench` on SmolLM2 on the CPU,
//! checked against llama.cpp's outputs, and the errors each must give
//! instead of a panic.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};

use smelt::gguf::{GgufWriter, Value};

fn smelt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("run smelt")
}

fn smollm2() -> String {
    common::model(common::SMOLLM2).display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---- run ----

/// Greedy `smelt run` prints exactly llama.cpp's continuation over each
/// case's clear prefix: the prompt not echoed, nothing else on stdout.
#[test]
fn run_greedy_prints_llama_cpps_text() {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata("reference/smollm2-135m-q4_1-greedy.json"))
            .expect("reference file"),
    )
    .expect("reference JSON");
    let model = smollm2();
    for case in reference["cases"].as_array().expect("cases") {
        let prompt = case["prompt"].as_str().expect("prompt");
        let n = case["clear_prefix_len"].as_u64().expect("clear_prefix_len");
        let want = case["clear_prefix_text"]
            .as_str()
            .expect("clear_prefix_text");
        let out = smelt(&[
            "run",
            "-m",
            &model,
            "-p",
            prompt,
            "-n",
            &n.to_string(),
            "--temp",
            "0",
            "-t",
            "2",
        ]);
        assert!(out.status.success(), "{prompt:?}: {}", stderr(&out));
        let err = stderr(&out);
        let got = String::from_utf8(out.stdout).expect("UTF-8 stdout");
        assert_eq!(got, want, "prompt {prompt:?}");
        assert!(
            err.contains("tokens/s"),
            "stderr reports speed for {prompt:?}: {err}"
        );
    }
}

// ---- perplexity ----

/// The `PPL = X +/- Y` value of the last stdout line.
fn perplexity(text: &Path) -> f64 {
    let out = smelt(&[
        "perplexity",
        "-m",
        &smollm2(),
        "-f",
        &text.display().to_string(),
        "--ctx",
        "512",
        "-t",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 stdout");
    let last = stdout.lines().last().expect("a last line");
    let rest = last
        .strip_prefix("PPL = ")
        .unwrap_or_else(|| panic!("last line {last:?}"));
    let (ppl, err) = rest.split_once(" +/- ").expect("PPL = X +/- Y");
    assert!(err.parse::<f64>().expect("uncertainty") > 0.0);
    ppl.parse().expect("perplexity")
}

fn assert_within_1_percent(file: &str, llama_cpp: f64) {
    let ppl = perplexity(&Path::new("/usr/share/common-licenses").join(file));
    let rel = (ppl - llama_cpp).abs() / llama_cpp;
    eprintln!(
        "{file}: smelt {ppl:.4}, llama.cpp {llama_cpp:.4}, {:.2}%",
        rel * 100.0
    );
    assert!(
        rel < 0.01,
        "{file}: {ppl} vs llama.cpp {llama_cpp} ({:.2}%)",
        rel * 100.0
    );
}

#[test]
fn perplexity_on_apache_2_is_llama_cpps() {
    assert_within_1_percent("Apache-2.0", 15.9411);
}

#[test]
fn perplexity_on_mpl_2_is_llama_cpps() {
    assert_within_1_percent("MPL-2.0", 11.6765);
}

// ---- bench ----

#[test]
fn bench_prints_llama_bench_json_and_markdown() {
    let model = smollm2();
    let out = smelt(&[
        "bench", "-m", &model, "-p", "16", "-n", "4", "-r", "2", "-t", "2", "-o", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON array");
    let tests: Vec<&str> = rows.iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp16", "tg4"]);
    for r in &rows {
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["stddev_ts"].as_f64().unwrap() >= 0.0, "{r}");
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2, "{r}");
        // llama-bench's model column: architecture, size, file type.
        assert_eq!(r["model_type"], "llama 135M Q4_1", "{r}");
    }

    // At a depth: the cache filled first, the tests named as llama-bench
    // names them.
    let out = smelt(&[
        "bench", "-m", &model, "-p", "8", "-n", "2", "-d", "20", "-r", "1", "-t", "2", "-o", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON array");
    let tests: Vec<&str> = rows.iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp8 @ d20", "tg2 @ d20"]);
    assert!(rows.iter().all(|r| r["n_depth"] == 20), "{rows:?}");

    let out = smelt(&["bench", "-m", &model, "-p", "8", "-n", "2", "-r", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(
        lines[0],
        "| model | size | params | backend | threads | test | t/s |"
    );
    assert!(
        lines[2].contains("| pp8 |") && lines[3].contains("| tg2 |"),
        "{md}"
    );
}

// ---- errors ----

/// A one-line error on stderr, a non-zero exit, and no panic.
fn assert_clean_error(args: &[&str], wanted: &str) {
    let out = smelt(args);
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line: {err}");
    assert!(
        errors[0].contains(wanted),
        "{args:?}: {:?} should mention {wanted:?}",
        errors[0]
    );
}

#[test]
fn bad_requests_are_one_line_errors() {
    let model = smollm2();
    let long = "word ".repeat(200);
    assert_clean_error(
        &["run", "-m", &model, "-p", &long, "--ctx", "64"],
        "the context holds 64",
    );
    assert_clean_error(&["run", "-m", &model, "-p", ""], "the prompt is empty");
    assert_clean_error(&["run", "-m", &model, "-p", "hi", "-n", "0"], "-n 0");
    assert_clean_error(
        &["run", "-m", &model, "-p", "hi", "--ctx", "100000"],
        "exceeds the model's context length 8192",
    );
    assert_clean_error(
        &["run", "-m", "/nonexistent/model.gguf", "-p", "hi"],
        "/nonexistent/model.gguf",
    );
    assert_clean_error(
        &["perplexity", "-m", &model, "-f", "/nonexistent/text"],
        "/nonexistent/text",
    );
    assert_clean_error(&["bench", "-m", &model, "-r", "0"], "-r 0");
}

#[test]
fn unreadable_and_unsupported_models_are_one_line_errors() {
    let dir = std::env::temp_dir().join(format!("smelt-run-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"this is not a model").unwrap();
    let not_gguf = not_gguf.display().to_string();
    assert_clean_error(&["run", "-m", &not_gguf, "-p", "hi"], "not a GGUF file");

    // A well-formed GGUF of an architecture smelt does not run.
    let mamba = dir.join("mamba.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("mamba".into()));
    w.write_file(&mamba).unwrap();
    let mamba = mamba.display().to_string();
    assert_clean_error(&["run", "-m", &mamba, "-p", "hi"], "llama");
    let out = smelt(&["run", "-m", &mamba, "-p", "hi"]);
    assert!(stderr(&out).contains("mamba"), "{}", stderr(&out));

    std::fs::remove_dir_all(&dir).ok();
}
