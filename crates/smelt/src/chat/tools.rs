//! Tool calls: how a chat template shows tools to its model, how the
//! model writes a call, and reading those calls back into OpenAI's
//! `tool_calls`.
//!
//! Formats, told apart by the template's source:
//!
//! ```text
//! Hermes   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Hermes, Qwen)
//! Llama3   {"name": "f", "parameters": {...}}, maybe after <|python_tag|> (Llama 3.1-3.3)
//! Mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}}]                 (Nemo)
//!          [TOOL_CALLS]f[ARGS]{...}                                        (Small 3.2: [ARGS] in the template)
//! Gemma    <|tool_call>call:f{key:<|"|>text<|"|>,n:1}<tool_call|>         (Gemma 4)
//! Generic  {"tool_call": {"name": "f", "arguments": {...}}}                (templates that know no tools)
//! ```
//!
//! Templates that know no tools get them in a system message, and the
//! assistant's earlier calls as that JSON in its content (as llama.cpp's
//! generic format does). Arguments given as JSON text are parsed into
//! objects before rendering, since templates iterate over them or write
//! them with `tojson`.

use serde_json::{Map, Value, json};

use super::gemma_call;

/// How a template's model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3,
    MistralJson,
    MistralArgs,
    Gemma,
    Generic,
}

impl ToolFormat {
    /// The format a template's source shows.
    pub fn detect(source: &str) -> ToolFormat {
        if source.contains("<|tool_call>") {
            ToolFormat::Gemma
        } else if source.contains("[TOOL_CALLS]") && source.contains("[ARGS]") {
            ToolFormat::MistralArgs
        } else if source.contains("[TOOL_CALLS]") {
            ToolFormat::MistralJson
        } else if source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if source.contains("<|start_header_id|>") && source.contains("tools") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// Where a call starts in the output, for the formats marked by text.
    fn marker(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes => Some("<tool_call>"),
            ToolFormat::MistralJson | ToolFormat::MistralArgs => Some("[TOOL_CALLS]"),
            ToolFormat::Gemma => Some("<|tool_call>"),
            ToolFormat::Llama3 | ToolFormat::Generic => None,
        }
    }
}

/// A call read from the output. `arguments` is JSON text, as OpenAI sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// OpenAI's `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// Messages ready for a template with `tools`: arguments as objects, and
/// for [`ToolFormat::Generic`] the tools and earlier calls in text.
pub fn prepare_messages(format: ToolFormat, messages: &mut Vec<Value>, tools: Option<&Value>) {
    for m in messages.iter_mut() {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                if let Some(args) = call.pointer_mut("/function/arguments")
                    && let Some(text) = args.as_str()
                    && let Ok(parsed @ Value::Object(_)) = serde_json::from_str::<Value>(text)
                {
                    *args = parsed;
                }
            }
        }
    }
    if format != ToolFormat::Generic {
        return;
    }
    for m in messages.iter_mut() {
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array).cloned() else {
            continue;
        };
        let call = calls.first().and_then(|c| c.get("function")).cloned();
        if let (Some(obj), Some(call)) = (m.as_object_mut(), call) {
            obj.remove("tool_calls");
            let text = json!({"tool_call": {"name": call["name"], "arguments": call["arguments"]}});
            obj.insert("content".into(), Value::String(text.to_string()));
        }
    }
    let Some(tools) = tools.and_then(Value::as_array).filter(|t| !t.is_empty()) else {
        return;
    };
    let listed: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
    let prompt = format!(
        "You can call these tools:\n{}\n\nTo call one, answer with only this JSON: \
         {{\"tool_call\": {{\"name\": \"<tool name>\", \"arguments\": {{<its arguments>}}}}}}",
        listed.join("\n")
    );
    match messages.first_mut() {
        Some(first) if first["role"] == "system" => {
            let old = first["content"].as_str().unwrap_or_default().to_string();
            first["content"] = Value::String(format!("{old}\n\n{prompt}"));
        }
        _ => messages.insert(0, json!({"role": "system", "content": prompt})),
    }
}

/// How many bytes at the start of `text` are surely content, not a call
/// that may still be coming: the rest is held back while streaming.
pub fn content_prefix(format: ToolFormat, text: &str) -> usize {
    match format.marker() {
        Some(marker) => {
            if let Some(at) = text.find(marker) {
                return at;
            }
            // A partial marker at the end may be a call's start.
            (1..marker.len())
                .rev()
                .find(|&n| text.ends_with(&marker[..n]))
                .map_or(text.len(), |n| text.len() - n)
        }
        // These formats are a call only when the whole output is one.
        None => {
            let trimmed = text.trim_start();
            if trimmed.is_empty()
                || trimmed.starts_with('{')
                || "<|python_tag|>".starts_with(trimmed)
                || trimmed.starts_with("<|python_tag|>")
            {
                0
            } else {
                text.len()
            }
        }
    }
}

/// Reads the calls in `text`: (the content outside them, the calls). Text
/// that only looks like a call but does not parse stays content.
pub fn parse(
    format: ToolFormat,
    text: &str,
    next_id: &mut dyn FnMut() -> String,
) -> (String, Vec<ToolCall>) {
    let mut call = |name: &str, args: &Value| ToolCall {
        id: next_id(),
        name: name.to_string(),
        arguments: match args {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    };
    let none = || (text.to_string(), Vec::new());
    match format {
        ToolFormat::Hermes => {
            let mut content = String::new();
            let mut calls = Vec::new();
            let mut rest = text;
            while let Some(at) = rest.find("<tool_call>") {
                let body = &rest[at + "<tool_call>".len()..];
                let Some(end) = body.find("</tool_call>") else {
                    break;
                };
                let Some((name, args)) = name_and_args(body[..end].trim(), "arguments") else {
                    break;
                };
                content.push_str(&rest[..at]);
                calls.push(call(&name, &args));
                rest = &body[end + "</tool_call>".len()..];
            }
            content.push_str(rest);
            (content.trim().to_string(), calls)
        }
        ToolFormat::Llama3 => {
            let body = text.trim();
            let body = body.strip_prefix("<|python_tag|>").unwrap_or(body).trim();
            match name_and_args(body, "parameters").or_else(|| name_and_args(body, "arguments")) {
                Some((name, args)) => (String::new(), vec![call(&name, &args)]),
                None => none(),
            }
        }
        ToolFormat::Generic => {
            let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
            match parsed
                .as_ref()
                .and_then(|v| v.get("tool_call"))
                .and_then(|c| name_and_args(&c.to_string(), "arguments"))
            {
                Some((name, args)) => (String::new(), vec![call(&name, &args)]),
                None => none(),
            }
        }
        ToolFormat::MistralJson => {
            let Some((before, body)) = text.split_once("[TOOL_CALLS]") else {
                return none();
            };
            let mut stream = serde_json::Deserializer::from_str(body.trim()).into_iter::<Value>();
            let Some(Ok(Value::Array(items))) = stream.next() else {
                return none();
            };
            let calls: Option<Vec<ToolCall>> = items
                .iter()
                .map(|item| {
                    name_and_args(&item.to_string(), "arguments").map(|(n, a)| call(&n, &a))
                })
                .collect();
            match calls {
                Some(calls) => (before.trim().to_string(), calls),
                None => none(),
            }
        }
        ToolFormat::MistralArgs => {
            let mut pieces = text.split("[TOOL_CALLS]");
            let before = pieces.next().unwrap_or_default();
            let mut calls = Vec::new();
            for piece in pieces {
                let Some((head, args)) = piece.split_once("[ARGS]") else {
                    return none();
                };
                let name = head.split("[CALL_ID]").next().unwrap_or_default().trim();
                let args: Option<Value> = serde_json::Deserializer::from_str(args.trim())
                    .into_iter::<Value>()
                    .next()
                    .and_then(Result::ok);
                match args {
                    Some(args @ Value::Object(_)) if !name.is_empty() => {
                        calls.push(call(name, &args))
                    }
                    _ => return none(),
                }
            }
            if calls.is_empty() {
                return none();
            }
            (before.trim().to_string(), calls)
        }
        ToolFormat::Gemma => {
            let mut content = String::new();
            let mut calls = Vec::new();
            let mut rest = text;
            while let Some(at) = rest.find("<|tool_call>call:") {
                let body = &rest[at + "<|tool_call>call:".len()..];
                let Some(end) = body.find("<tool_call|>") else {
                    break;
                };
                let Some((name, args)) = gemma_call::read(&body[..end]) else {
                    break;
                };
                content.push_str(&rest[..at]);
                calls.push(call(&name, &args));
                rest = &body[end + "<tool_call|>".len()..];
            }
            content.push_str(rest);
            (content.trim().to_string(), calls)
        }
    }
}

/// `{"name": "f", "<args_key>": {...}}` → (f, args).
fn name_and_args(json_text: &str, args_key: &str) -> Option<(String, Value)> {
    let v: Value = serde_json::from_str(json_text).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get(args_key)? {
        a @ Value::Object(_) => a.clone(),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)?,
        _ => return None,
    };
    Some((name, args))
}

/// A Lark grammar whose every sentence is one call, in `format`, of one of
/// `tools` (OpenAI tool objects), its arguments matching the tool's JSON
/// schema: what `tool_choice: "required"` (or a named function) enforces.
pub fn call_grammar(format: ToolFormat, tools: &[Value]) -> Option<String> {
    let schema_of = |args_key: &str| -> Value {
        let alternatives: Vec<Value> = tools
            .iter()
            .filter_map(|t| {
                let f = t.get("function")?;
                let params = f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"}));
                let mut props = Map::new();
                props.insert("name".into(), json!({"const": f.get("name")?}));
                props.insert(args_key.into(), params);
                Some(json!({
                    "type": "object",
                    "properties": props,
                    "required": ["name", args_key],
                    "additionalProperties": false,
                }))
            })
            .collect();
        json!({"anyOf": alternatives})
    };
    // Compact JSON: a sampling model cannot pad a call with whitespace.
    let compact = |mut schema: Value| {
        schema["x-guidance"] = json!({"whitespace_flexible": false});
        schema
    };
    let grammar = match format {
        ToolFormat::Hermes => format!(
            "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json{}",
            compact(schema_of("arguments"))
        ),
        ToolFormat::Llama3 => format!(
            "start: call\ncall: %json{}",
            compact(schema_of("parameters"))
        ),
        ToolFormat::Generic => {
            let call = schema_of("arguments");
            let wrapped = json!({
                "type": "object",
                "properties": {"tool_call": call},
                "required": ["tool_call"],
                "additionalProperties": false,
            });
            format!("start: call\ncall: %json{}", compact(wrapped))
        }
        ToolFormat::MistralJson => format!(
            "start: \"[TOOL_CALLS][\" call \"]\"\ncall: %json{}",
            compact(schema_of("arguments"))
        ),
        // The name comes first, then that tool's arguments: one
        // alternative per tool.
        ToolFormat::MistralArgs => {
            let calls: Vec<String> = tools
                .iter()
                .filter_map(|t| {
                    let f = t.get("function")?;
                    let name = f.get("name")?.as_str()?;
                    let params = f
                        .get("parameters")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object"}));
                    // A JSON string is a Lark string literal.
                    let head = Value::String(format!("{name}[ARGS]"));
                    Some(format!("{head} %json{}", compact(params)))
                })
                .collect();
            if calls.is_empty() {
                return None;
            }
            format!("start: \"[TOOL_CALLS]\" call\ncall: {}", calls.join(" | "))
        }
        // Gemma 4's arguments are not JSON (`key:<|"|>text<|"|>`).
        ToolFormat::Gemma => return gemma_call::grammar(tools),
    };
    Some(grammar)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("call{n:05}")
        }
    }

    #[test]
    fn every_format_is_read_back() {
        let args = r#"{"city":"Paris","days":2}"#;
        let cases = [
            (
                ToolFormat::Hermes,
                format!(
                    "Sure.\n<tool_call>\n{{\"name\": \"weather\", \"arguments\": {args}}}\n</tool_call>"
                ),
                "Sure.",
            ),
            (
                ToolFormat::Llama3,
                format!("<|python_tag|>{{\"name\": \"weather\", \"parameters\": {args}}}"),
                "",
            ),
            (
                ToolFormat::Generic,
                format!("{{\"tool_call\": {{\"name\": \"weather\", \"arguments\": {args}}}}}"),
                "",
            ),
            (
                ToolFormat::MistralJson,
                format!(
                    "[TOOL_CALLS][{{\"name\": \"weather\", \"arguments\": {args}, \"id\": \"abc123def\"}}]"
                ),
                "",
            ),
            (
                ToolFormat::MistralArgs,
                format!("[TOOL_CALLS]weather[ARGS]{args}"),
                "",
            ),
            (
                ToolFormat::Gemma,
                "<|tool_call>call:weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>".to_string(),
                "",
            ),
        ];
        for (format, text, content) in cases {
            let (got, calls) = parse(format, &text, &mut ids());
            assert_eq!(got, content, "{format:?}");
            assert_eq!(calls.len(), 1, "{format:?}: {text}");
            assert_eq!(calls[0].name, "weather");
            let a: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert_eq!(a, json!({"city": "Paris", "days": 2}), "{format:?}");
            assert_eq!(calls[0].id, "call00001");
        }
    }

    #[test]
    fn text_that_is_no_call_stays_content() {
        for (format, text) in [
            (ToolFormat::Hermes, "<tool_call>\nnot json\n</tool_call>"),
            (ToolFormat::Llama3, "{\"answer\": 4}"),
            (ToolFormat::Generic, "Paris is sunny."),
            (ToolFormat::MistralJson, "[TOOL_CALLS] oops"),
        ] {
            let (content, calls) = parse(format, text, &mut ids());
            assert!(calls.is_empty(), "{format:?}");
            assert_eq!(content, text.trim());
        }
    }

    #[test]
    fn streaming_holds_back_what_may_be_a_call() {
        assert_eq!(content_prefix(ToolFormat::Hermes, "Hello <tool"), 6);
        assert_eq!(content_prefix(ToolFormat::Hermes, "Hello <tool_call>{"), 6);
        assert_eq!(content_prefix(ToolFormat::Hermes, "Hello"), 5);
        assert_eq!(content_prefix(ToolFormat::Llama3, "  {\"name\""), 0);
        assert_eq!(content_prefix(ToolFormat::Llama3, "Paris"), 5);
        assert_eq!(content_prefix(ToolFormat::Generic, ""), 0);
    }

    #[test]
    fn formats_are_told_by_the_template() {
        let t = |name: &str| {
            let path = format!(
                "{}/../../testdata/chat-templates/{name}.jinja",
                env!("CARGO_MANIFEST_DIR")
            );
            ToolFormat::detect(&std::fs::read_to_string(path).unwrap())
        };
        assert_eq!(
            t("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"),
            ToolFormat::Hermes
        );
        assert_eq!(t("Qwen-Qwen2.5-7B-Instruct"), ToolFormat::Hermes);
        assert_eq!(t("meta-llama-Llama-3.1-8B-Instruct"), ToolFormat::Llama3);
        assert_eq!(
            t("mistralai-Mistral-Nemo-Instruct-2407"),
            ToolFormat::MistralJson
        );
        assert_eq!(
            t("Mistral-Small-3.2-24B-Instruct-2506"),
            ToolFormat::MistralArgs
        );
        assert_eq!(t("google-gemma-2-2b-it"), ToolFormat::Generic);
        assert_eq!(t("google-gemma-4-31B-it"), ToolFormat::Gemma);
    }
}
