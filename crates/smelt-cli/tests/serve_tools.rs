//! Tool calls through the real `openai` Python client
//! (`tests/serve/tools_client.py`): a call, its result, an answer,
//! streaming and not, on SmolLM2 with its own template (which knows no
//! tools: the generic JSON format) and with real templates of each
//! format: Hermes `<tool_call>`, Llama 3.1 JSON, Mistral `[TOOL_CALLS]`
//! (JSON, and Small 3.2's `name[ARGS]{...}`) and Gemma 4's
//! `<|tool_call>call:name{key:<|"|>text<|"|>}<tool_call|>`.

mod serve_support;

use std::process::Command;

use serve_support::{Server, repo};

/// `banned`: token ids the answer turn may not use (see the client).
fn round_trip(template: Option<&str>, banned: &[u32]) {
    let path = template.map(|t| repo(&format!("testdata/chat-templates/{t}.jinja")));
    let path = path.as_ref().map(|p| p.display().to_string());
    let mut args = vec!["--parallel", "1", "--ctx", "2048"];
    if let Some(p) = &path {
        args.extend(["--chat-template-file", p]);
    }
    let server = Server::start(&args);
    let out = Command::new("python3")
        .arg(repo("tests/serve/tools_client.py"))
        .arg(server.url())
        .args((!banned.is_empty()).then(|| {
            banned
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{template:?}: {stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(server.terminate().success());
}

#[test]
fn tool_calls_with_smollm2s_own_template() {
    round_trip(None, &[]);
}

#[test]
fn tool_calls_in_hermes_format() {
    round_trip(Some("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), &[]);
}

#[test]
fn tool_calls_in_llama3_format() {
    round_trip(Some("meta-llama-Llama-3.1-8B-Instruct"), &[]);
}

#[test]
fn tool_calls_in_mistral_format() {
    // SmolLM2 ends its answer to a Mistral-format tool result at once
    // (`<|endoftext|>` first); with its end tokens banned it answers.
    round_trip(Some("mistralai-Mistral-Nemo-Instruct-2407"), &[0, 2]);
}

#[test]
fn tool_calls_in_mistral_args_format() {
    round_trip(Some("Mistral-Small-3.2-24B-Instruct-2506"), &[0, 2]);
}

#[test]
fn tool_calls_in_gemma_format() {
    // Gemma 4's template goes on in the model's turn after the tool's
    // result; SmolLM2 there copies the template's markup and calls again
    // (`<|tool_call>`): with `<` (44) and its end tokens banned it answers.
    round_trip(Some("google-gemma-4-31B-it"), &[0, 2, 44]);
}
