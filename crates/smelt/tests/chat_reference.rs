//! Chat templates against Python jinja2 (`scripts/render_chat_template.py`,
//! Hugging Face's environment): the built-in templates (as written, and
//! against the models' own templates they stand in for), SmolLM2's own
//! template read from the GGUF (by the `gguf` package on the Python side,
//! by our reader on ours), Gemma 3's fallback, and every reference template
//! on messages the shipped cases do not cover (tool calls, odd whitespace,
//! escapes).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use smelt::chat::{ChatTemplate, Clock, tools};
use smelt::gguf::GgufFile;

/// 2026-01-15T00:00:00Z, the date the Python side renders with.
const REFERENCE_DATE: i64 = 1_768_435_200;

/// Conversations that exercise the templates' branches.
fn conversations() -> Vec<Value> {
    vec![
        json!([{"role": "user", "content": "Hello!"}]),
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?\nOne word."}
        ]),
        json!([
            {"role": "user", "content": "  padded\t\n"},
            {"role": "assistant", "content": "\n\nquotes \" ' \\ {{ not jinja }} {% raw %}"},
            {"role": "user", "content": "Ünïcödé ✓ 日本語 🦀"}
        ]),
        json!([
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2, "metric": true, "scale": 1.5}}
            }]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 3.5}"},
            {"role": "user", "content": "Thanks"}
        ]),
        json!([]),
    ]
}

fn cases(bos: Option<&str>, eos: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    for messages in conversations() {
        for add_generation_prompt in [true, false] {
            out.push(json!({
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "bos_token": bos,
                "eos_token": eos,
            }));
        }
    }
    out
}

/// Renders with jinja2. Each result is the text, or the error message.
fn jinja2(request: &Value) -> Vec<Result<String, String>> {
    let script = common::testdata("../scripts/render_chat_template.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "render_chat_template.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .into_iter()
        .map(|r| match (r.get("ok"), r.get("error")) {
            (Some(Value::String(s)), _) => Ok(s.clone()),
            (_, Some(e)) => Err(e.to_string()),
            _ => panic!("bad result {r}"),
        })
        .collect()
}

/// Renders every case with `template` and with jinja2 (`reference`
/// describes the same template to Python) and lists the disagreements.
fn compare(
    name: &str,
    template: &mut ChatTemplate,
    reference: Value,
    cases: &[Value],
) -> Vec<String> {
    let mut request = reference;
    request["cases"] = json!(cases);
    let want = jinja2(&request);
    let (bos, eos) = (
        template.bos_token().to_string(),
        template.eos_token().to_string(),
    );
    let mut failures = Vec::new();
    for (i, (case, want)) in cases.iter().zip(want).enumerate() {
        template.set_special_tokens(
            case["bos_token"].as_str().unwrap_or(&bos),
            case["eos_token"].as_str().unwrap_or(&eos),
        );
        let got = template.render_with_tools(
            &case["messages"],
            case["add_generation_prompt"].as_bool().unwrap(),
            case.get("tools"),
        );
        match (got, want) {
            (Ok(g), Ok(w)) if g == w => {}
            (Err(_), Err(_)) => {}
            (g, w) => failures.push(format!("{name} case {i}: smelt {g:?}\njinja2 {w:?}")),
        }
    }
    failures
}

fn fixed(t: ChatTemplate) -> ChatTemplate {
    t.with_clock(Clock::Fixed(REFERENCE_DATE)).unwrap()
}

#[test]
fn builtin_templates_match_jinja2() {
    let mut failures = Vec::new();
    let mut rendered = 0;
    for (name, source) in smelt::chat::BUILTINS {
        let mut t = fixed(ChatTemplate::builtin(name).unwrap());
        let cases = cases(Some("<s>"), Some("</s>"));
        failures.extend(compare(name, &mut t, json!({"template": source}), &cases));
        rendered += cases.len();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(rendered, smelt::chat::BUILTINS.len() * 10);
}

/// Hand-checked against the model cards, so the built-ins are right and not
/// only consistent with jinja2.
#[test]
fn builtin_templates_match_model_cards() {
    let msgs = json!([
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "V"}
    ]);
    let render = |name: &str| {
        ChatTemplate::builtin(name)
            .unwrap()
            .with_special_tokens("<BOS>", "<EOS>")
            .render(&msgs, true)
            .unwrap()
    };
    assert_eq!(
        render("chatml"),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n\
         <|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        render("llama3"),
        "<BOS><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    assert_eq!(
        render("gemma"),
        "<BOS><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n\
         <start_of_turn>user\nV<end_of_turn>\n<start_of_turn>model\n"
    );
    let err = ChatTemplate::builtin("gemma")
        .unwrap()
        .render(&json!([{"role": "assistant", "content": "A"}]), false)
        .unwrap_err();
    assert!(err.to_string().contains("alternate"), "{err}");
    assert!(
        ChatTemplate::builtin("vicuna")
            .unwrap_err()
            .to_string()
            .contains("chatml")
    );
}

#[test]
fn smollm2_template_from_gguf_matches_jinja2() {
    let path = common::model(common::SMOLLM2);
    let file = GgufFile::open(&path).unwrap();
    let mut t = fixed(ChatTemplate::from_gguf(&file, None).unwrap());
    assert_eq!(t.origin(), "from the GGUF");
    let failures = compare("SmolLM2", &mut t, json!({"gguf": path}), &cases(None, None));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Gemma 3 270M's GGUF has no template: the built-in gemma one is chosen by
/// its architecture, with the model's own `<bos>`.
#[test]
fn gemma3_falls_back_to_builtin_gemma() {
    let file = GgufFile::open(common::model(common::GEMMA3)).unwrap();
    let t = ChatTemplate::from_gguf(&file, None).unwrap();
    assert_eq!(t.origin(), "built-in gemma");
    assert_eq!(t.bos_token(), "<bos>");
    let text = t
        .render(&json!([{"role": "user", "content": "Hi"}]), true)
        .unwrap();
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn reference_templates_match_jinja2_on_more_messages() {
    let dir = common::testdata("chat-templates");
    let mut failures = Vec::new();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jinja") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(&path).unwrap();
        let mut t = fixed(ChatTemplate::new(&source, &name).unwrap());
        failures.extend(compare(
            &name,
            &mut t,
            json!({"template": source}),
            &cases(Some("<BOS>"), Some("<EOS>")),
        ));
        n += 1;
    }
    assert!(n >= 20);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// OpenAI tools and a call round trip (call, result, answer), as the server
/// prepares them for each template's tool format
/// (`tools::prepare_messages`), rendered with `tools` given.
#[test]
fn reference_templates_match_jinja2_with_tools() {
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]);
    let conversation = json!([
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "abc123xyz", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "abc123xyz", "content": "{\"temp\": 21}"},
    ]);
    let dir = common::testdata("chat-templates");
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jinja") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(&path).unwrap();
        let mut t = fixed(ChatTemplate::new(&source, &name).unwrap());
        let format = t.tool_format();
        let mut cases = Vec::new();
        for n in [2, 4] {
            let mut messages: Vec<Value> = conversation.as_array().unwrap()[..n].to_vec();
            tools::prepare_messages(format, &mut messages, Some(&tools));
            cases.push(json!({
                "messages": messages, "add_generation_prompt": true,
                "bos_token": "<BOS>", "eos_token": "<EOS>", "tools": tools,
            }));
        }
        failures.extend(compare(&name, &mut t, json!({"template": source}), &cases));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Conversations without tools, with the reasoning fields Qwen 3 and
/// gpt-oss read, for comparing built-ins with the models' own templates.
fn plain_conversations() -> Vec<Value> {
    let mut out: Vec<Value> = conversations()
        .into_iter()
        .filter(|c| !c.to_string().contains("tool"))
        .collect();
    out.extend([
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}
        ]),
        json!([
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
            {"role": "user", "content": "3+3?"},
            {"role": "assistant", "content": "<think>again</think>6", "thinking": "again"}
        ]),
        json!([
            {"role": "user", "content": "Why?"},
            {"role": "assistant", "content": "Because.", "reasoning_content": "\nThinking.\n"}
        ]),
        json!([{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}]),
    ]);
    out
}

fn starts_with_system(c: &Value) -> bool {
    c[0]["role"] == "system"
}

fn has_system(c: &Value) -> bool {
    c.to_string().contains("\"system\"")
}

fn has_thinking(c: &Value) -> bool {
    c.to_string().contains("think")
}

/// Which conversations a model's own template accepts and its built-in
/// stands in for.
type Accepts = fn(&Value) -> bool;

/// Each built-in renders what the model's own template (jinja2) renders,
/// on the conversations that template accepts and the built-in covers.
#[test]
fn builtins_match_the_models_own_templates() {
    let pairs: [(&str, &str, Accepts); 6] = [
        ("qwen3", "Qwen-Qwen3-0.6B", |_| true),
        // Qwen 2.5 adds a system message of its own where none is given.
        ("chatml", "Qwen-Qwen2.5-7B-Instruct", |c| {
            starts_with_system(c) && !has_thinking(c)
        }),
        ("phi3", "microsoft-Phi-3.5-mini-instruct", |c| {
            !has_thinking(c)
        }),
        // Gemma 2 refuses a system message.
        ("gemma", "google-gemma-2-2b-it", |c| {
            !has_system(c) && !has_thinking(c)
        }),
        ("gpt-oss", "openai-gpt-oss-120b", |c| {
            !c.to_string().contains("<think>")
        }),
        // NeMo moves a system message into the last user turn.
        (
            "mistral-v3-tekken",
            "mistralai-Mistral-Nemo-Instruct-2407",
            |c| !has_system(c) && !has_thinking(c),
        ),
    ];
    let dir = common::testdata("chat-templates");
    let mut failures = Vec::new();
    for (builtin, model, accepts) in pairs {
        let source = std::fs::read_to_string(dir.join(format!("{model}.jinja"))).unwrap();
        let cases: Vec<Value> = plain_conversations()
            .into_iter()
            .filter(|c| accepts(c) && c.as_array().is_some_and(|m| !m.is_empty()))
            .flat_map(|messages| {
                [true, false].map(|add_generation_prompt| {
                    json!({
                        "messages": messages,
                        "add_generation_prompt": add_generation_prompt,
                        "bos_token": "<BOS>",
                        "eos_token": "<EOS>",
                    })
                })
            })
            .collect();
        assert!(cases.len() >= 4, "{builtin}: only {} cases", cases.len());
        let mut t = fixed(ChatTemplate::builtin(builtin).unwrap());
        t.set_special_tokens("<BOS>", "<EOS>");
        for case in &cases {
            // Agreeing on an error would prove nothing here.
            let rendered = t.render(&case["messages"], case["add_generation_prompt"] == true);
            assert!(rendered.is_ok(), "{builtin}: {rendered:?}");
        }
        let name = format!("{builtin} as {model}");
        failures.extend(compare(&name, &mut t, json!({"template": source}), &cases));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
