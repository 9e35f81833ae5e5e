//! `smelt info` on the two test models, checked against what llama.cpp
//! reports for them, and on bad files.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn smelt_info(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .arg("info")
        .arg(path)
        .output()
        .expect("run smelt")
}

/// What the report says, parsed back.
struct Report {
    text: String,
    fields: BTreeMap<String, String>,
    /// type → tensor count, from the table (the `total` row included).
    tensors: BTreeMap<String, u64>,
}

fn report(path: &Path) -> Report {
    let out = smelt_info(path);
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    assert!(
        out.status.success(),
        "smelt info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut fields = BTreeMap::new();
    let mut tensors = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("tensors (") {
            in_table = true;
        } else if in_table {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if let [ty, count, ..] = cols[..]
                && let Ok(n) = count.parse()
            {
                tensors.insert(ty.to_string(), n);
            }
        } else if let Some((k, v)) = line.split_once(':')
            && !line.starts_with(' ')
        {
            fields.insert(k.to_string(), v.trim().to_string());
        }
    }
    Report {
        text,
        fields,
        tensors,
    }
}

fn expect_tensors(r: &Report, expected: &[(&str, u64)]) {
    let total: u64 = expected.iter().map(|e| e.1).sum();
    let mut want: BTreeMap<String, u64> = expected.iter().map(|&(t, n)| (t.into(), n)).collect();
    want.insert("total".into(), total);
    assert_eq!(r.tensors, want, "tensors by type in:\n{}", r.text);
}

/// Millions of parameters, as printed ("134.52 M").
fn params_m(r: &Report) -> f64 {
    let p = &r.fields["parameters"];
    p.strip_suffix(" M")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("parameters {p:?}"))
}

#[test]
fn smollm2() {
    let r = report(&common::model(common::SMOLLM2));
    assert_eq!(r.fields["architecture"], "llama");
    assert_eq!(r.fields["blocks"], "30");
    // llama.cpp's name for general.file_type 3, as llama-bench prints it.
    assert_eq!(r.fields["file type"], "Q4_1");
    assert_eq!(r.fields["version"], "GGUF v3");
    assert_eq!(format!("{:.1}", params_m(&r)), "134.5");
    expect_tensors(&r, &[("Q4_1", 210), ("F32", 61), ("Q8_0", 1)]);

    // Long arrays and strings are summarised, not dumped.
    assert!(
        r.text
            .lines()
            .any(|l| l.starts_with("  tokenizer.ggml.tokens = [")
                && l.ends_with("... (49152 items)]")),
        "{}",
        r.text
    );
    assert!(r.text.contains("  tokenizer.ggml.merges = [\"Ġ t\", "));
    assert!(r.text.lines().all(|l| l.chars().count() < 200));
    assert!(
        r.text
            .contains("tokenizer.chat_template = \"{% for message")
    );
}

#[test]
fn gemma3() {
    let r = report(&common::model(common::GEMMA3));
    assert_eq!(r.fields["architecture"], "gemma3");
    assert_eq!(r.fields["blocks"], "18");
    // Mostly Q5_0 by count, but general.file_type says what llama.cpp calls it.
    assert_eq!(r.fields["file type"], "Q4_K - Medium");
    assert_eq!(format!("{:.1}", params_m(&r)), "268.1");
    expect_tensors(
        &r,
        &[
            ("Q5_0", 81),
            ("Q4_K", 27),
            ("Q6_K", 9),
            ("Q8_0", 10),
            ("F32", 109),
        ],
    );
}

/// A bad file gives one line on stderr, naming the file and the problem,
/// nothing on stdout, and a non-zero exit.
fn expect_one_line_error(path: &Path, needles: &[&str]) {
    let out = smelt_info(path);
    let stderr = String::from_utf8(out.stderr).expect("UTF-8");
    assert!(!out.status.success(), "exit status {:?}", out.status);
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{stderr:?} should mention {n:?}");
    }
}

#[test]
fn bad_files() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));

    let garbage = dir.join("garbage.gguf");
    std::fs::write(&garbage, b"not a model\n").expect("write");
    expect_one_line_error(&garbage, &["not a GGUF file"]);

    // A real header cut short inside the vocabulary.
    let bytes = std::fs::read(common::model(common::SMOLLM2)).expect("read");
    let cut = dir.join("smollm2-cut.gguf");
    std::fs::write(&cut, &bytes[..100_000]).expect("write");
    expect_one_line_error(&cut, &["tokenizer.ggml.tokens", "offset"]);

    // The header whole, the tensor data gone.
    let cut = dir.join("smollm2-no-data.gguf");
    std::fs::write(&cut, &bytes[..1_785_664 + 1000]).expect("write");
    expect_one_line_error(&cut, &["tensor", "runs past"]);

    expect_one_line_error(&dir.join("missing.gguf"), &["No such file"]);
}
