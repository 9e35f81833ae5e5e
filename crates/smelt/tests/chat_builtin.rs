//! The built-in chat templates against llama.cpp's built-ins of the same
//! names (`llama_chat_apply_template`), whose renders of a set of
//! conversations `scripts/llama_chat_renders.py` recorded in
//! `testdata/chat-templates/llama-cpp-builtins.json`.

mod common;

use serde_json::Value;
use smelt::chat::ChatTemplate;

#[test]
fn builtins_render_like_llama_cpp() {
    let path = common::testdata("chat-templates/llama-cpp-builtins.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["template"].as_str().unwrap();
        names.insert(name);
        let template = ChatTemplate::builtin(name).unwrap().with_special_tokens(
            case["bos_token"].as_str().unwrap(),
            case["eos_token"].as_str().unwrap(),
        );
        let got = template.render(
            &case["messages"],
            case["add_generation_prompt"].as_bool().unwrap(),
        );
        let want = case["expected"].as_str().unwrap();
        match got {
            Ok(got) if got == want => {}
            got => failures.push(format!(
                "case {i} ({name}):\n smelt {got:?}\n llama.cpp {want:?}"
            )),
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
