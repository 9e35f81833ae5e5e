//! What the command line says when it is given something wrong, or works
//! on something long: each message names the problem once, in words, and
//! long work shows progress (issue 27's probe of the CLI).

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

fn smelt_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_smelt"));
    cmd.args(args);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.output().expect("run smelt")
}

fn smelt(args: &[&str]) -> Output {
    smelt_env(args, &[])
}

fn smollm2() -> String {
    common::model(common::SMOLLM2).display().to_string()
}

/// A failing command's stderr.
fn failure(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected a failure: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A fresh directory for one test's files.
fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("smelt-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_directory_as_the_model_says_so() {
    let dir = temp_dir("dir-model");
    let d = dir.display().to_string();
    for args in [
        vec!["run", "-m", &d, "-p", "hi"],
        vec!["info", &d],
        vec!["tokenize", "-m", &d, "--text", "hi"],
    ] {
        let err = failure(&smelt(&args));
        assert!(err.contains("is a directory"), "{args:?}: {err}");
        assert!(!err.contains("No such device"), "{args:?}: {err}");
    }
}

#[test]
fn ctx_zero_is_refused_in_words() {
    let err = failure(&smelt(&["run", "-m", &smollm2(), "--ctx", "0", "-p", "hi"]));
    assert!(err.contains("--ctx") && err.contains("at least 1"), "{err}");
}

#[test]
fn a_missing_file_is_named_once_with_its_cause_once() {
    let missing = "/no/such/model.gguf";
    let out = temp_dir("missing-in").join("out.gguf");
    let out = out.display().to_string();
    for args in [
        vec!["info", missing],
        vec!["quantize", missing, &out, "Q8_0"],
        vec!["template", "-m", missing, "--messages", &out],
    ] {
        let err = failure(&smelt(&args));
        assert_eq!(err.matches(missing).count(), 1, "{args:?}: {err}");
        assert_eq!(err.matches("No such file").count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_bad_output_folder_is_a_write_error() {
    let dir = temp_dir("quant-out");
    let out = dir.join("no/such/folder/out.gguf");
    let err = failure(&smelt(&[
        "quantize",
        &smollm2(),
        &out.display().to_string(),
        "Q8_0",
    ]));
    assert!(err.contains("cannot write"), "{err}");
    assert!(!err.contains("cannot read"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn perplexity_refuses_invalid_utf8() {
    let dir = temp_dir("ppl-utf8");
    let file = dir.join("latin1.txt");
    let mut text = "The quick brown fox jumps over the lazy dog. "
        .repeat(50)
        .into_bytes();
    text.extend_from_slice(b"caf\xe9 ");
    std::fs::write(&file, text).unwrap();
    let f = file.display().to_string();
    let err = failure(&smelt(&[
        "perplexity",
        "-m",
        &smollm2(),
        "-f",
        &f,
        "-c",
        "64",
    ]));
    assert!(
        err.contains("not valid UTF-8") && err.contains("offset 2253"),
        "{err}"
    );
}

#[test]
fn tokenize_takes_dash_m_and_the_default_model() {
    let with_m = smelt(&["tokenize", "-m", &smollm2(), "--text", "Hello world"]);
    assert!(
        with_m.status.success(),
        "{}",
        String::from_utf8_lossy(&with_m.stderr)
    );
    // The default model is the same SmolLM2, found in the model cache.
    let default = smelt(&["tokenize", "--text", "Hello world"]);
    assert!(
        default.status.success(),
        "{}",
        String::from_utf8_lossy(&default.stderr)
    );
    assert_eq!(with_m.stdout, default.stdout);
    assert_eq!(String::from_utf8_lossy(&with_m.stdout).trim(), "19556 905");
}

/// `bench` says what it is doing before the table, run by run.
#[test]
fn bench_reports_progress() {
    let out = smelt(&[
        "bench",
        "-m",
        &smollm2(),
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for line in [
        "pp8: warm-up",
        "pp8: run 1/2",
        "pp8: run 2/2",
        "tg4: run 2/2",
    ] {
        assert!(err.contains(line), "no {line:?} in {err}");
    }
}

/// Mesa's device-select layer prints an error on every GPU enumeration
/// when `XDG_RUNTIME_DIR` is unset; smelt asks for the adapters once and
/// without that layer, so nothing is printed.
#[test]
fn the_gpu_probe_prints_no_xdg_error() {
    let out = smelt_env(
        &["devices"],
        &[("XDG_RUNTIME_DIR", None), ("NODEVICE_SELECT", None)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
}

/// `--parallel` × `--ctx` past the machine's memory is refused before any
/// allocation, naming the sizes.
#[test]
fn a_kv_cache_that_cannot_fit_is_refused() {
    let err = failure(&smelt(&[
        "serve",
        "-m",
        &smollm2(),
        "--port",
        "0",
        "--parallel",
        "256",
        "--ctx",
        "8192",
    ]));
    assert!(err.contains("256 slots × 8192 positions"), "{err}");
    assert!(
        err.contains("45.0 GiB") && err.contains("lower --parallel or --ctx"),
        "{err}"
    );
}

/// `--cache-type` takes the cache types by name, says which when given
/// another, and sizes the memory estimate by the type's blocks (Q8_0: 34
/// bytes per 32 values).
#[test]
fn cache_types_are_named_and_sized() {
    for cmd in ["run", "chat", "serve", "bench", "perplexity"] {
        let err = failure(&smelt(&[cmd, "--cache-type", "q5_k"]));
        assert!(
            err.contains("\"q5_k\" is not a KV cache type: one of f16, f32, q8_0, q4_0"),
            "{cmd}: {err}"
        );
    }
    let err = failure(&smelt(&[
        "serve",
        "-m",
        &smollm2(),
        "--backend",
        "cpu",
        "--port",
        "0",
        "--parallel",
        "256",
        "--ctx",
        "16384",
        "--cache-type",
        "q8_0",
    ]));
    assert!(err.contains("47.8 GiB") && err.contains("× Q8_0"), "{err}");
}

/// A quantized cache runs end to end on the CPU.
#[test]
fn a_q4_0_cache_generates() {
    let out = smelt(&[
        "run",
        "-m",
        &smollm2(),
        "--backend",
        "cpu",
        "--cache-type",
        "q4_0",
        "-p",
        "The capital of France is",
        "-n",
        "6",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}
