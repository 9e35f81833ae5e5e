//! Real models' chat templates (from llama.cpp's `models/templates`) render
//! exactly what jinja2 renders in Hugging Face's environment, and raise
//! where jinja2 raised. The expected strings in `testdata/chat-templates`
//! were produced by Python jinja2, not by this code.

mod common;

use smelt::chat::{ChatTemplate, Clock};

/// 2026-01-15T00:00:00Z, the date the references were rendered with.
const REFERENCE_DATE: i64 = 1_768_435_200;

#[derive(serde::Deserialize)]
struct Case {
    messages: serde_json::Value,
    add_generation_prompt: bool,
    bos_token: String,
    eos_token: String,
    expected: Option<String>,
    expected_error: Option<String>,
}

#[test]
fn every_reference_template_renders_exactly() {
    let dir = common::testdata("chat-templates");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/chat-templates exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "only {} templates found", names.len());

    let mut failures = Vec::new();
    let mut n_cases = 0;
    for path in &names {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(path).unwrap();
        let cases: Vec<Case> = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{stem}.expected.json"))).unwrap(),
        )
        .unwrap();
        let mut template = match ChatTemplate::new(&source, &stem) {
            Ok(t) => t.with_clock(Clock::Fixed(REFERENCE_DATE)).unwrap(),
            Err(e) => {
                failures.push(format!("{stem}: does not compile: {e}"));
                continue;
            }
        };
        for (i, case) in cases.iter().enumerate() {
            n_cases += 1;
            template.set_special_tokens(&case.bos_token, &case.eos_token);
            let got = template.render(&case.messages, case.add_generation_prompt);
            match (&case.expected, &case.expected_error, got) {
                (Some(want), _, Ok(got)) if &got == want => {}
                (Some(want), _, Ok(got)) => failures.push(format!(
                    "{stem} case {i}: rendered\n{got:?}\nexpected\n{want:?}"
                )),
                (Some(_), _, Err(e)) => failures.push(format!("{stem} case {i}: error {e}")),
                // The message of raise_exception comes through.
                (None, Some(want), Err(e)) if e.to_string().contains(want.as_str()) => {}
                (None, Some(want), Err(e)) => failures.push(format!(
                    "{stem} case {i}: expected the error {want:?}, got {e}"
                )),
                (None, Some(want), Ok(got)) => failures.push(format!(
                    "{stem} case {i}: expected the error {want:?}, rendered {got:?}"
                )),
                (None, None, _) => {
                    panic!("{stem} case {i} has neither expected nor expected_error")
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n_cases} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
