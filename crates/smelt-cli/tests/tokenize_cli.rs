//! `smelt tokenize`: llama.cpp's prompt ids on one line, text back from ids,
//! and errors for bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

/// A test model; missing is a failure (the test command fetches them).
fn model(file: &str) -> String {
    let cache = match std::env::var_os("SMELT_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/smelt"),
    };
    let path = cache.join("models").join(file);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

fn smelt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("smelt runs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "smelt failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The first case of a reference file: llama.cpp's prompt and its ids.
fn first_reference(file: &str) -> (String, Vec<u64>) {
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(testdata(&format!("reference/{file}"))).unwrap(),
    )
    .unwrap();
    let case = &json["cases"][0];
    let ids = case["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    (case["prompt"].as_str().unwrap().to_string(), ids)
}

fn line(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    ids.join(" ")
}

#[test]
fn prints_llama_cpp_prompt_ids() {
    for (model_file, reference) in [
        (
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "smollm2-135m-q4_1-greedy.json",
        ),
        ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m-greedy.json"),
    ] {
        let m = model(model_file);
        let (prompt, ids) = first_reference(reference);
        let out = smelt(&[
            "tokenize",
            "--model",
            &m,
            "--add-special",
            "--text",
            &prompt,
        ]);
        assert_eq!(stdout(&out), format!("{}\n", line(&ids)), "{model_file}");

        // From a file, the same.
        let path = std::env::temp_dir().join(format!("smelt-tokenize-{}.txt", std::process::id()));
        std::fs::write(&path, &prompt).unwrap();
        let out = smelt(&[
            "tokenize",
            "--model",
            &m,
            "--add-special",
            "--file",
            path.to_str().unwrap(),
        ]);
        std::fs::remove_file(&path).ok();
        assert_eq!(stdout(&out), format!("{}\n", line(&ids)), "{model_file}");
    }
}

#[test]
fn decodes_ids_back_to_text() {
    let m = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let (prompt, ids) = first_reference("smollm2-135m-q4_1-greedy.json");
    let out = smelt(&["tokenize", "--model", &m, "--decode", &line(&ids)]);
    assert_eq!(stdout(&out), format!("{prompt}\n"));
}

#[test]
fn parse_special_turns_markers_into_tokens() {
    let m = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let text = "<|im_start|>user";
    let parsed = stdout(&smelt(&[
        "tokenize",
        "--model",
        &m,
        "--parse-special",
        "--text",
        text,
    ]));
    let plain = stdout(&smelt(&["tokenize", "--model", &m, "--text", text]));
    // SmolLM2's GGUF lists <|im_start|> as token 1.
    assert!(parsed.starts_with("1 "), "{parsed}");
    assert!(plain.split_whitespace().all(|id| id != "1"), "{plain}");
    assert!(plain.split_whitespace().count() > parsed.split_whitespace().count());
}

#[test]
fn bad_input_is_an_error() {
    let m = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    for args in [
        vec!["tokenize", "--model", &m, "--decode", "1 49152"],
        vec!["tokenize", "--model", &m, "--decode", "1 x"],
        vec!["tokenize", "--model", &m],
        vec!["tokenize", "--model", "/nonexistent.gguf", "--text", "a"],
    ] {
        let out = smelt(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
    let out = smelt(&["tokenize", "--model", &m, "--decode", "7 49152"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"));
}
