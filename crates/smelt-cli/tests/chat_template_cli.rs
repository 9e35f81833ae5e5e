//! `smelt template`: prints exactly the rendered string, and fails with a
//! message and a non-zero exit when the template raises.

use std::path::PathBuf;
use std::process::Command;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn smelt(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("smelt runs")
}

/// Writes case `i` of a reference file's messages to a temporary file.
fn case(name: &str, i: usize) -> (PathBuf, serde_json::Value) {
    let cases: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(testdata(&format!("chat-templates/{name}.expected.json")))
            .unwrap(),
    )
    .unwrap();
    let case = cases[i].clone();
    let path = std::env::temp_dir().join(format!(
        "smelt-template-{}-{name}-{i}.json",
        std::process::id()
    ));
    std::fs::write(&path, case["messages"].to_string()).unwrap();
    (path, case)
}

#[test]
fn prints_the_exact_render() {
    // The expected strings are jinja2's renders (non-ASCII, quotes, with and
    // without the generation prompt).
    for (name, i) in [
        ("google-gemma-2-2b-it", 4),
        ("google-gemma-2-2b-it", 1),
        ("Qwen-Qwen2.5-7B-Instruct", 0),
    ] {
        let (messages, case) = case(name, i);
        let template = testdata(&format!("chat-templates/{name}.jinja"));
        let mut args = vec![
            "template",
            "--template",
            template.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
            "--bos",
            case["bos_token"].as_str().unwrap(),
            "--eos",
            case["eos_token"].as_str().unwrap(),
        ];
        if case["add_generation_prompt"].as_bool().unwrap() {
            args.push("--add-generation-prompt");
        }
        let out = smelt(&args);
        std::fs::remove_file(&messages).ok();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            case["expected"].as_str().unwrap()
        );
    }
}

#[test]
fn a_raising_template_fails() {
    let (messages, case) = case("google-gemma-2-2b-it", 2);
    assert_eq!(case["expected_error"], "System role not supported");
    let template = testdata("chat-templates/google-gemma-2-2b-it.jinja");
    let out = smelt(&[
        "template",
        "--template",
        template.to_str().unwrap(),
        "--messages",
        messages.to_str().unwrap(),
    ]);
    std::fs::remove_file(&messages).ok();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("System role not supported"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn bad_inputs_are_errors() {
    let dir = std::env::temp_dir().join(format!("smelt-template-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let good_tpl = write("ok.jinja", "{{ messages[0].content }}");
    let bad_tpl = write("bad.jinja", "{% for m in messages %}{{ m.content }");
    let msgs = write("m.json", r#"[{"role": "user", "content": "hi"}]"#);
    let bad_json = write("bad.json", "[{");
    let not_list = write("obj.json", r#"{"role": "user"}"#);
    for (tpl, m, want) in [
        (&bad_tpl, &msgs, "syntax error"),
        (&good_tpl, &bad_json, "not valid JSON"),
        (&good_tpl, &not_list, "expected an array"),
        (&"/nonexistent.jinja".to_string(), &msgs, "cannot read"),
    ] {
        let out = smelt(&["template", "--template", tpl, "--messages", m]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(want),
            "{want}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let out = smelt(&["template", "--chat-template", "nope", "--messages", &msgs]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("chatml, llama3, gemma"));
    let out = smelt(&["template", "--template", &good_tpl, "--messages", &msgs]);
    assert_eq!(out.stdout, b"hi");
    std::fs::remove_dir_all(&dir).ok();
}
