//! Constrained decoding over SmolLM2's real vocabulary, with random logits
//! standing in for a model: whatever the logits, every sampled sequence
//! must match the grammar (JSON schemas, any JSON object, GBNF), and the
//! grammar must let it end.

mod common;

use std::sync::Arc;

use serde_json::{Value, json};
use smelt::gguf::GgufFile;
use smelt::grammar::{GrammarSpec, Grammars};
use smelt::sample::{Sampler, SamplerParams};
use smelt::tokenizer::Tokenizer;

fn smollm2() -> Arc<Tokenizer> {
    let file = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    Arc::new(Tokenizer::from_gguf(&file).unwrap())
}

/// Samples up to `max` tokens under `spec` from random logits (seeded),
/// at temperature 1: the text up to the end of generation, and whether it
/// ended there.
fn sample(
    grammars: &Grammars,
    tokenizer: &Tokenizer,
    spec: &GrammarSpec,
    seed: u64,
    max: usize,
) -> (String, bool) {
    let mut constraint = grammars.compile(spec).unwrap();
    let mut sampler = Sampler::new(SamplerParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(seed),
        ..SamplerParams::default()
    });
    let n = tokenizer.n_vocab();
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut tokens = Vec::new();
    for _ in 0..max {
        // Random logits in [-4, 4): a model with no idea of JSON.
        let mut logits: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
            })
            .collect();
        constraint.mask(&mut logits).unwrap();
        let id = sampler.sample(&mut logits, &tokens);
        if tokenizer.is_eog(id) {
            return (tokenizer.decode(&tokens), true);
        }
        constraint.accept(id).unwrap();
        tokens.push(id);
    }
    (tokenizer.decode(&tokens), false)
}

#[test]
fn json_schema_output_always_validates() {
    let tokenizer = smollm2();
    let grammars = Grammars::new(Arc::clone(&tokenizer)).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "pet": {"enum": ["cat", "dog", "none"]},
            "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
        },
        "required": ["name", "age", "pet", "tags"],
        "additionalProperties": false
    });
    let spec = GrammarSpec::JsonSchema(schema);
    for seed in 1..=20 {
        let (text, ended) = sample(&grammars, &tokenizer, &spec, seed, 200);
        assert!(ended, "seed {seed}: no end after 200 tokens: {text:?}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {text:?}"));
        let obj = v.as_object().unwrap();
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(keys, ["name", "age", "pet", "tags"], "seed {seed}: {text}");
        assert!(v["name"].as_str().unwrap().chars().count() <= 8, "{text}");
        assert!((0..=150).contains(&v["age"].as_i64().unwrap()), "{text}");
        assert!(
            ["cat", "dog", "none"].contains(&v["pet"].as_str().unwrap()),
            "{text}"
        );
        let tags = v["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3 && tags.iter().all(Value::is_boolean),
            "{text}"
        );
    }
}

#[test]
fn json_object_and_gbnf() {
    let tokenizer = smollm2();
    let grammars = Grammars::new(Arc::clone(&tokenizer)).unwrap();
    for seed in 1..=5 {
        let (text, ended) = sample(&grammars, &tokenizer, &GrammarSpec::JsonObject, seed, 400);
        if ended {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
            assert!(v.is_object(), "{text}");
        } else {
            assert!(text.starts_with('{'), "{text:?}");
        }
    }
    let gbnf = GrammarSpec::Gbnf(
        "root ::= answer (\", \" answer){0,2} \"!\"\nanswer ::= \"yes\" | \"no\" | [0-9]{1,2}\n"
            .into(),
    );
    for seed in 1..=10 {
        let (text, ended) = sample(&grammars, &tokenizer, &gbnf, seed, 50);
        assert!(ended, "{text:?}");
        let body = text.strip_suffix('!').unwrap_or_else(|| panic!("{text:?}"));
        for answer in body.split(", ") {
            let number = !answer.is_empty()
                && answer.len() <= 2
                && answer.bytes().all(|b| b.is_ascii_digit());
            assert!(answer == "yes" || answer == "no" || number, "{text:?}");
        }
    }
}

#[test]
fn bad_grammars_are_errors() {
    let tokenizer = smollm2();
    let grammars = Grammars::new(tokenizer).unwrap();
    for spec in [
        GrammarSpec::Gbnf("root ::= \"a".into()),
        GrammarSpec::Gbnf("root ::= missing-rule".into()),
        GrammarSpec::JsonSchema(json!({"type": "no-such-type"})),
    ] {
        assert!(grammars.compile(&spec).is_err(), "{spec:?}");
    }
}

/// `tool_choice: "required"`: whatever the logits, the output is one call
/// in the template's format, which reads back as a call of a given tool
/// with arguments of its schema.
#[test]
fn required_tool_calls_read_back() {
    use smelt::chat::tools::{ToolFormat, call_grammar, parse};
    let tokenizer = smollm2();
    let grammars = Grammars::new(Arc::clone(&tokenizer)).unwrap();
    let tools = [json!({"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                       "required": ["city"], "additionalProperties": false}}})];
    for format in [
        ToolFormat::Hermes,
        ToolFormat::Llama3,
        ToolFormat::Generic,
        ToolFormat::MistralJson,
        ToolFormat::MistralArgs,
        ToolFormat::Gemma,
    ] {
        let spec = GrammarSpec::Lark(call_grammar(format, &tools).unwrap());
        for seed in 1..=3 {
            let (text, ended) = sample(&grammars, &tokenizer, &spec, seed, 80);
            assert!(ended, "{format:?}: {text:?}");
            let (content, calls) = parse(format, &text, &mut || "abcdefghi".into());
            assert_eq!(content, "", "{format:?}: {text:?}");
            assert_eq!(calls.len(), 1, "{format:?}: {text:?}");
            assert_eq!(calls[0].name, "get_weather");
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert!(
                args["city"].as_str().unwrap().chars().count() <= 12,
                "{text}"
            );
        }
    }
}

/// Gemma 4's calls are not JSON: the grammar built from a schema keeps
/// its keys sorted, the required ones present, enums and types to the
/// schema, and what it samples reads back as JSON arguments of that schema.
#[test]
fn required_gemma_calls_follow_the_schema() {
    use smelt::chat::tools::{ToolFormat, call_grammar, parse};
    let tokenizer = smollm2();
    let grammars = Grammars::new(Arc::clone(&tokenizer)).unwrap();
    let tools = [json!({"type": "function", "function": {
        "name": "book",
        "parameters": {"type": "object", "properties": {
            "zone": {"enum": ["UTC", "CET"]},
            "nights": {"type": "integer"},
            "city": {"type": "string", "maxLength": 8},
            "late": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}},
            "guest": {"type": "object", "properties": {"age": {"type": "number"}},
                      "required": ["age"]}},
        "required": ["city", "zone"]}}})];
    let spec = GrammarSpec::Lark(call_grammar(ToolFormat::Gemma, &tools).unwrap());
    for seed in 1..=6 {
        let (text, ended) = sample(&grammars, &tokenizer, &spec, seed, 400);
        assert!(ended, "{text:?}");
        let (content, calls) = parse(ToolFormat::Gemma, &text, &mut || "abcdefghi".into());
        assert_eq!((content.as_str(), calls.len()), ("", 1), "{text:?}");
        assert_eq!(calls[0].name, "book");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        let args = args.as_object().unwrap();
        assert!(
            args["city"].as_str().unwrap().chars().count() <= 8,
            "{text}"
        );
        assert!(
            ["UTC", "CET"].contains(&args["zone"].as_str().unwrap()),
            "{text}"
        );
        for (key, value) in args {
            let fits = match key.as_str() {
                "city" | "zone" => true,
                "nights" => value.is_i64(),
                "late" => value.is_boolean(),
                "tags" => value.as_array().unwrap().iter().all(|t| t.is_string()),
                "guest" => value["age"].is_number(),
                _ => false,
            };
            assert!(fits, "{key}: {text}");
        }
        // Written in the template's order (serde_json keeps the text's).
        let keys: Vec<&String> = args.keys().collect();
        assert!(keys.is_sorted(), "{text}");
    }
}
