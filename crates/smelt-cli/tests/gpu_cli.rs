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
    // At least 4 per layer (SmolLM2 has 30): the fused decode of norm +
    // Q/K/V, attention, output + add, and the FFN.
    assert!(d >= 30.0 * 4.0 && d.fract() == 0.0, "dispatches/token {d}");
}

/// `--device N` alone selects that GPU adapter; with `--backend cpu` it is
/// an error.
#[test]
fn device_alone_means_the_gpu() {
    let m = model();
    let out = smelt(&["run", "-m", &m, "--device", "0", "-n", "1", "-p", "Hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("smelt: loaded") && !err.contains(" on cpu "),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args([
            "run",
            "-m",
            &m,
            "--backend",
            "cpu",
            "--device",
            "0",
            "-p",
            "Hi",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device selects a GPU"));
}

/// Without `--backend`, a command takes `auto`: a hardware GPU in the fast
/// mode, or the CPU where there is none (CI: lavapipe only), saying which
/// in one line; the adapters are probed once (Mesa's warnings about a
/// missing XDG_RUNTIME_DIR come once, as two lines, where it prints them).
#[test]
fn auto_says_what_it_chose_in_one_line() {
    let m = model();
    let out = smelt(&["run", "-m", &m, "-n", "1", "-p", "Hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let choices: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("using GPU") || l.contains("using the CPU"))
        .collect();
    assert_eq!(choices.len(), 1, "{err}");
    let line = choices[0];
    match smelt::backend::gpu::best_hardware() {
        Some(r) => assert!(
            line.starts_with(&format!("smelt: using GPU {} (", r.index))
                && line.ends_with("in fast mode"),
            "{line}"
        ),
        None => assert!(
            line.starts_with("smelt: no hardware GPU; using the CPU ("),
            "{line}"
        ),
    }
    let noise = err
        .lines()
        .filter(|l| l.contains("XDG_RUNTIME_DIR"))
        .count();
    assert!(noise <= 2, "the adapters were probed more than once: {err}");
}

/// `--exact` on the GPU is ggml's arithmetic bit for bit: greedy text
/// equals the CPU's in its exact mode, token for token, past the clear
/// prefix too; the choice line names the mode.
#[test]
fn exact_on_gpu_is_the_cpus_exact_text() {
    let m = model();
    let run = |backend: &str| {
        smelt(&[
            "run",
            "-m",
            &m,
            "--backend",
            backend,
            "--exact",
            "-n",
            "24",
            "--temp",
            "0",
            "--ctx",
            "64",
            "-p",
            "Once upon a time",
        ])
    };
    let gpu = run("gpu");
    let cpu = run("cpu");
    let err = String::from_utf8_lossy(&gpu.stderr);
    assert!(err.contains("in exact mode"), "{err}");
    assert!(!gpu.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&gpu.stdout),
        String::from_utf8_lossy(&cpu.stdout)
    );
}

/// `smelt perplexity` on Gemma 3 on the GPU (issue 23's defect): with a
/// context of 300, a chunk's 150 scored rows of 262144 logits are 150 MiB,
/// over lavapipe's 128 MiB binding limit, so the logits are kept in
/// pieces; the GPU's default mode gives the CPU's perplexity within 1% on
/// one chunk of Debian's Apache-2.0 text.
#[test]
fn gemma3_perplexity_on_gpu_fits_the_binding_limit() {
    let m = common::model(common::GEMMA3).display().to_string();
    let text = common::testdata("gemma/Apache-2.0").display().to_string();
    let ppl = |backend: &str| {
        let out = smelt(&[
            "perplexity",
            "-m",
            &m,
            "-f",
            &text,
            "-c",
            "300",
            "--chunks",
            "1",
            "--backend",
            backend,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("PPL = "))
            .unwrap_or_else(|| panic!("no PPL line: {stdout}"));
        line.split_whitespace()
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let (gpu, cpu) = (ppl("gpu"), ppl("cpu"));
    let rel = (gpu - cpu).abs() / cpu;
    eprintln!(
        "Gemma 3, one chunk of 300: GPU {gpu:.4}, CPU {cpu:.4} ({:.3}%)",
        rel * 100.0
    );
    assert!(rel < 0.01, "GPU {gpu} vs CPU {cpu}");
}

/// With no GPU at all (the Vulkan loader pointed at no driver), `--backend
/// gpu` is refused with a clear error, not a panic, and says how to run on
/// the CPU; the default `auto` runs on the CPU and says why.
#[test]
fn no_gpu_is_an_error_for_gpu_and_the_cpu_for_auto() {
    let m = model();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_smelt"))
            .args(["run", "-m", &m, "-n", "1", "-p", "Hi"])
            .args(extra)
            .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
            .env("WGPU_BACKEND", "vulkan")
            .output()
            .expect("run smelt")
    };
    let gpu = run(&["--backend", "gpu"]);
    let err = String::from_utf8_lossy(&gpu.stderr);
    assert_eq!(gpu.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no GPU adapter") && err.contains("--backend cpu"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let auto = run(&[]);
    let err = String::from_utf8_lossy(&auto.stderr);
    assert!(auto.status.success(), "{err}");
    assert!(
        err.contains("smelt: no hardware GPU; using the CPU ("),
        "{err}"
    );
}

/// A layer split over adapter 0 opened twice (`--devices 0,0`) gives the
/// single device's greedy text, and `--verbose` says per device: one
/// submission per token each, one boundary copy per token into the second.
#[test]
fn split_over_one_adapter_twice_is_greedy_and_verbose() {
    let m = model();
    let out = smelt(&[
        "run",
        "-m",
        &m,
        "--devices",
        "0,0",
        "-n",
        "4",
        "--temp",
        "0",
        "--verbose",
        "-p",
        "The capital of France is",
    ]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), " Paris.\n\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("using a layer split over GPU 0 ("), "{err}");
    assert!(err.contains("layers 0..15, GPU 0 ("), "{err}");
    for (device, copies) in [(0, "0.00"), (1, "1.00")] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("smelt: generation: device {device} (")))
            .unwrap_or_else(|| panic!("no line for device {device}: {err}"));
        assert!(line.contains(": 1.00 submissions"), "{line}");
        assert!(line.contains(&format!("{copies} copies in")), "{line}");
    }
}

/// A split's bad flags are refused with a clear error before any upload.
#[test]
fn split_flags_are_checked() {
    let m = model();
    for (flags, says) in [
        (
            &["--devices", "0,7"][..],
            "--devices names adapter 7, but there is 1",
        ),
        (
            &["--devices", "0,0", "--tensor-split", "0,1"],
            "value 0 is not a positive",
        ),
        (
            &["--devices", "0,0", "--tensor-split=-1,2"],
            "value -1 is not a positive",
        ),
        (
            &["--devices", "0,0", "--tensor-split", "1,2,3"],
            "3 values for 2 devices",
        ),
        (&["--devices", "0"], "names one adapter: use --device 0"),
        (&["--split-mode", "layer"], "need --devices"),
        (
            &["--backend", "cpu", "--devices", "0,0"],
            "cannot go with --backend cpu",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
            .args(["run", "-m", &m, "-n", "1", "-p", "Hi"])
            .args(flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("smelt: loaded"), "{flags:?}: {err}");
    }
}
