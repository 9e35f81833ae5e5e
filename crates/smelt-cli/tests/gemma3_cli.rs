//! `smelt run` and `smelt perplexity` on Gemma 3 270M Q4_K_M on the CPU,
//! against llama.cpp's greedy text (`testdata/reference`) and
//! `llama-perplexity -c 512` (Debian's license texts, `testdata/gemma`).

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

fn smelt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("run smelt")
}

fn gemma3() -> String {
    common::model(common::GEMMA3).display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Greedy `smelt run` prints exactly llama.cpp's continuation over a
/// case's clear prefix. Three cases keep CI short; every case's ids are
/// checked in `crates/smelt/tests/gemma3_llama_cpp.rs`.
#[test]
fn run_greedy_prints_llama_cpps_text() {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata("reference/gemma3-270m-q4_k_m-greedy.json"))
            .expect("reference file"),
    )
    .expect("reference JSON");
    let model = gemma3();
    let wanted = [
        "def fibonacci(n):",
        "The three primary colors are",
        "Water boils at a temperature of",
    ];
    let cases = reference["cases"].as_array().expect("cases");
    for prompt in wanted {
        let case = cases
            .iter()
            .find(|c| c["prompt"] == prompt)
            .expect("the case is in the reference");
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
            "--ctx",
            "128",
        ]);
        assert!(out.status.success(), "{prompt:?}: {}", stderr(&out));
        let got = String::from_utf8(out.stdout).expect("UTF-8 stdout");
        assert_eq!(got, want, "prompt {prompt:?}");
    }
}

/// The `PPL = X +/- Y` value of the last stdout line of
/// `smelt perplexity --ctx 512` on `testdata/gemma/{file}`.
fn perplexity(file: &str) -> f64 {
    let text = common::testdata(&format!("gemma/{file}"));
    let out = smelt(&[
        "perplexity",
        "-m",
        &gemma3(),
        "-f",
        &text.display().to_string(),
        "--ctx",
        "512",
        "-t",
        "2",
    ]);
    assert!(out.status.success(), "{file}: {}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 stdout");
    let last = stdout.lines().last().expect("a result line");
    let value = last
        .strip_prefix("PPL = ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{file}: no `PPL = ` line: {stdout}"));
    value.parse().expect("a number")
}

fn check_perplexity(file: &str, llama_cpp: f64) {
    let ppl = perplexity(file);
    let rel = (ppl - llama_cpp).abs() / llama_cpp;
    eprintln!(
        "{file}: perplexity {ppl:.4} (llama.cpp {llama_cpp}, {:.3}% off)",
        rel * 100.0
    );
    assert!(
        rel <= 0.01,
        "{file}: perplexity {ppl} vs llama.cpp's {llama_cpp}"
    );
}

/// Kept out of CI's time budget (the CPU backend has no fast kernels for
/// Q5_0, Q4_K and Q6_K yet): run with
/// `cargo test --release -p smelt-cli --test gemma3_cli -- --ignored`.
#[test]
#[ignore = "slow on the CPU backend; run by hand"]
fn perplexity_on_apache_2_is_llama_cpps() {
    check_perplexity("Apache-2.0", 10.1496);
}

#[test]
#[ignore = "slow on the CPU backend; run by hand"]
fn perplexity_on_mpl_2_is_llama_cpps() {
    check_perplexity("MPL-2.0", 8.8967);
}
