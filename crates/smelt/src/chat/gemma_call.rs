//! Gemma 4's tool-call syntax: reading a call back, and the grammar that
//! `tool_choice: "required"` enforces.
//!
//! ```text
//! <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>
//! ```
//!
//! Arguments are not JSON: keys are bare words, strings are fenced by
//! `<|"|>` (so they hold any character but that fence), and the template
//! writes the keys of an object in sorted order (`dictsort`).

use serde_json::Value;

/// A string's fence.
const QUOTE: &str = "<|\"|>";

/// `f{key:<|"|>text<|"|>,n:1,list:[1,2]}` → (f, arguments as JSON).
pub(super) fn read(text: &str) -> Option<(String, Value)> {
    let brace = text.find('{')?;
    let name = text[..brace].trim();
    if name.is_empty() {
        return None;
    }
    let mut json = String::new();
    let mut rest = &text[brace..];
    // Outside strings: quote bare keys (a word before `:`).
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(QUOTE) {
            let end = after.find(QUOTE)?;
            json.push_str(&Value::String(after[..end].to_string()).to_string());
            rest = &after[end + QUOTE.len()..];
            continue;
        }
        let c = rest.chars().next()?;
        if c.is_alphabetic() || c == '_' {
            let word_len = rest
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len());
            let word = &rest[..word_len];
            let key = rest[word_len..].trim_start().starts_with(':');
            match (key, word) {
                (true, _) => json.push_str(&Value::String(word.to_string()).to_string()),
                (false, "true" | "false" | "null") => json.push_str(word),
                (false, _) => json.push_str(&Value::String(word.to_string()).to_string()),
            }
            rest = &rest[word_len..];
            continue;
        }
        json.push(c);
        rest = &rest[c.len_utf8()..];
    }
    let args: Value = serde_json::from_str(&json).ok()?;
    args.is_object().then(|| (name.to_string(), args))
}

/// A Lark grammar whose sentences are one call of one of `tools` (OpenAI
/// tool objects), its arguments written as the template writes them and
/// following the tool's JSON schema: properties in sorted order, the
/// required ones always, strings within `maxLength`, `enum` values only.
/// Schemas it does not model take any Gemma value.
pub(super) fn grammar(tools: &[Value]) -> Option<String> {
    let mut g = Rules::default();
    let calls: Vec<String> = tools
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            let name = f.get("name")?.as_str()?;
            let params = f.get("parameters").cloned().unwrap_or_default();
            let args = g.object_body(&params);
            Some(g.rule(&format!("{} {args} \"}}\"", literal(&format!("{name}{{")))))
        })
        .collect();
    if calls.is_empty() {
        return None;
    }
    let mut text = format!(
        "start: \"<|tool_call>call:\" call \"<tool_call|>\"\ncall: {}\n",
        calls.join(" | ")
    );
    for (i, body) in g.rules.iter().enumerate() {
        text.push_str(&format!("r{i}: {body}\n"));
    }
    if g.any_used {
        text.push_str(ANY_VALUE);
    }
    Some(text)
}

/// Any Gemma value, for schemas without a shape this module models.
const ANY_VALUE: &str = r#"any: any_string | any_number | "true" | "false" | "null" | any_list | any_object
any_string: "<|\"|>" /[^<]+/? "<|\"|>"
any_number: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
any_list: "[" (any ("," any)*)? "]"
any_object: "{" (/[A-Za-z_][A-Za-z0-9_]*/ ":" any ("," /[A-Za-z_][A-Za-z0-9_]*/ ":" any)*)? "}"
"#;

/// The grammar's numbered rules (`r0`, `r1`, ...).
#[derive(Default)]
struct Rules {
    rules: Vec<String>,
    any_used: bool,
}

impl Rules {
    /// A new rule for a (non-empty) expression: its name.
    fn rule(&mut self, expr: &str) -> String {
        self.rules.push(expr.to_string());
        format!("r{}", self.rules.len() - 1)
    }

    /// A Lark expression for one value of `schema`.
    fn value(&mut self, schema: &Value) -> String {
        let choices = schema
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| schema.get("const").map(|c| vec![c.clone()]));
        if let Some(choices) = choices.filter(|c| !c.is_empty()) {
            let alts: Vec<String> = choices.iter().map(|c| literal(&written(c))).collect();
            return format!("({})", alts.join(" | "));
        }
        let max = |key: &str| schema.get(key).and_then(Value::as_u64);
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => {
                let body = match max("maxLength") {
                    Some(0) => String::new(),
                    Some(n) => format!("/[^<]{{1,{n}}}/?"),
                    None => "/[^<]+/?".to_string(),
                };
                format!("{} {body} {}", literal(QUOTE), literal(QUOTE))
            }
            Some("integer") => "/-?(0|[1-9][0-9]{0,17})/".to_string(),
            Some("number") => {
                "/-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,17})?([eE][+-]?[0-9]{1,3})?/".to_string()
            }
            Some("boolean") => "(\"true\" | \"false\")".to_string(),
            Some("null") => "\"null\"".to_string(),
            Some("array") => {
                let item = match schema.get("items") {
                    Some(items) => self.value(items),
                    None => self.any(),
                };
                let item = self.rule(&item);
                format!("\"[\" ({item} (\",\" {item})*)? \"]\"")
            }
            Some("object") if schema.get("properties").is_some() => {
                let body = self.object_body(schema);
                format!("\"{{\" {body} \"}}\"")
            }
            _ => self.any(),
        }
    }

    fn any(&mut self) -> String {
        self.any_used = true;
        "any".to_string()
    }

    /// The inside of an object of `schema`: its properties in sorted
    /// order, separated by commas, the optional ones maybe left out.
    fn object_body(&mut self, schema: &Value) -> String {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            // No properties named: any arguments.
            self.any_used = true;
            return "(/[A-Za-z_][A-Za-z0-9_]*/ \":\" any (\",\" /[A-Za-z_][A-Za-z0-9_]*/ \":\" any)*)?"
                .to_string();
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut keys: Vec<&String> = props.keys().collect();
        keys.sort();
        let pairs: Vec<(String, bool)> = keys
            .iter()
            .map(|k| {
                let value = self.value(&props[*k]);
                let pair = format!("{} {value}", literal(&format!("{k}:")));
                (pair, required.contains(&k.as_str()))
            })
            .collect();
        // `after[i]`: pairs i.. once something was written (each after a
        // comma); `first`: pairs i.. when nothing was written yet.
        let mut after = vec![String::new(); pairs.len() + 1];
        for i in (0..pairs.len()).rev() {
            let (pair, required) = &pairs[i];
            let head = if *required {
                format!("\",\" {pair}")
            } else {
                format!("(\",\" {pair})?")
            };
            after[i] = join(&head, &after[i + 1]);
        }
        let mut first = String::new();
        for i in (0..pairs.len()).rev() {
            let (pair, required) = &pairs[i];
            let with = join(pair, &after[i + 1]);
            first = match (*required, first.is_empty()) {
                (true, _) => with,
                (false, true) => format!("({with})?"),
                (false, false) => {
                    let rest = self.rule(&first);
                    format!("({with} | {rest})")
                }
            };
        }
        first
    }
}

/// Two Lark sequences, one after the other (either may be empty).
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (_, true) => a.to_string(),
        (true, false) => b.to_string(),
        (false, false) => format!("{a} {b}"),
    }
}

/// A Lark string literal for `text` (a JSON string is one).
fn literal(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// A value as the template's `format_argument` writes it.
fn written(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{QUOTE}{s}{QUOTE}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(written).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let pairs: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", written(&map[*k])))
                .collect();
            format!("{{{}}}", pairs.join(","))
        }
        other => other.to_string(),
    }
}
