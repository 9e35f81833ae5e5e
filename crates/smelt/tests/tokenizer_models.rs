//! The tokenizers of the real test models against independent references:
//! llama.cpp's prompt ids and generated text (`testdata/reference/*-greedy.json`)
//! and the vocabulary as the `gguf` Python package reads it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use smelt::gguf::GgufFile;
use smelt::tokenizer::{StreamDecoder, Tokenizer, VocabType};

fn load(model: &str) -> Tokenizer {
    let path = common::model(model);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(prompt, prompt_ids)` of every case of a reference file.
fn reference_prompts(file: &str) -> Vec<(String, Vec<u32>)> {
    let path = common::testdata(&format!("reference/{file}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).expect("reference JSON");
    let cases = json["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    cases
        .iter()
        .map(|c| {
            let prompt = c["prompt"].as_str().expect("prompt").to_string();
            let ids = c["prompt_ids"]
                .as_array()
                .expect("prompt_ids")
                .iter()
                .map(|v| v.as_u64().expect("id") as u32)
                .collect();
            (prompt, ids)
        })
        .collect()
}

/// llama-server tokenizes prompts with add_special and parse_special on,
/// and streams the generated tokens' pieces as its `output_text`.
fn check_reference(model: &str, reference: &str) {
    let tok = load(model);
    for (prompt, want) in reference_prompts(reference) {
        assert_eq!(tok.encode(&prompt, true, true), want, "{model}: {prompt:?}");
    }
    for (ids, text) in reference_outputs(reference) {
        let mut stream = StreamDecoder::with_special(&tok, false);
        let streamed: String = ids.iter().map(|&id| stream.push(id)).collect();
        assert_eq!(streamed + &stream.finish(), text, "{model}");
        // Neither model adds a space prefix or cleans up spaces, so the
        // whole-sequence decode is the same text.
        assert_eq!(tok.decode(&ids), text, "{model}");
    }
}

/// `(output_ids, output_text)` of every case of a reference file.
fn reference_outputs(file: &str) -> Vec<(Vec<u32>, String)> {
    let path = common::testdata(&format!("reference/{file}"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ids = c["output_ids"].as_array().unwrap();
            let ids = ids.iter().map(|v| v.as_u64().unwrap() as u32).collect();
            (ids, c["output_text"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn smollm2_prompts_and_outputs_match_llama_cpp() {
    check_reference(common::SMOLLM2, "smollm2-135m-q4_1-greedy.json");
}

#[test]
fn gemma3_prompts_and_outputs_match_llama_cpp() {
    check_reference(common::GEMMA3, "gemma3-270m-q4_k_m-greedy.json");
}

/// What the `gguf` package says about some tokens of a byte-level BPE
/// model: their texts, their types (3 = control), and the text they spell
/// (through GPT-2's byte map, control tokens as themselves).
struct PyTokens {
    texts: Vec<String>,
    types: Vec<i64>,
    spelled: String,
}

const PY_TOKENS: &str = r#"
import json, sys
try:
    from gguf import GGUFReader
except ImportError:
    sys.exit("the gguf Python package is missing: pip install -r scripts/requirements-test.txt")
r = GGUFReader(sys.argv[1])
toks, types = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
# GPT-2's bytes_to_unicode, inverted.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
to_byte = {chr(c): b for b, c in zip(bs, cs)}
answers = []
for ids in json.loads(sys.argv[2]):
    texts = [bytes(toks.parts[toks.data[i]]).decode("utf-8") for i in ids]
    kinds = [int(types.parts[types.data[i]][0]) for i in ids]
    out = b""
    for t, k in zip(texts, kinds):
        out += t.encode("utf-8") if k == 3 else bytes(to_byte[c] for c in t)
    answers.append({"texts": texts, "types": kinds, "spelled": out.decode("utf-8")})
print(json.dumps(answers))
"#;

/// One python run (reading the file takes seconds) for several id lists.
fn py_tokens(model: &Path, id_lists: &[&[u32]]) -> Vec<PyTokens> {
    let out = Command::new("python3")
        .args(["-c", PY_TOKENS])
        .arg(model)
        .arg(serde_json::to_string(id_lists).unwrap())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let strings = |v: &serde_json::Value| -> Vec<String> {
        let items = v.as_array().unwrap().iter();
        items.map(|t| t.as_str().unwrap().to_string()).collect()
    };
    answers
        .as_array()
        .unwrap()
        .iter()
        .map(|a| PyTokens {
            texts: strings(&a["texts"]),
            types: a["types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_i64().unwrap())
                .collect(),
            spelled: a["spelled"].as_str().unwrap().to_string(),
        })
        .collect()
}

#[test]
fn smollm2_special_tokens_against_the_gguf_package() {
    let path = common::model(common::SMOLLM2);
    let tok = load(common::SMOLLM2);
    assert_eq!(tok.vocab_type(), VocabType::Bpe);
    assert_eq!(tok.n_vocab(), 49152);
    assert!(!tok.add_bos() && !tok.add_eos());

    let text = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
    let parsed = tok.encode(text, false, true);
    let plain = tok.encode(text, false, false);
    let specials = [
        tok.bos().unwrap(),
        tok.eos().unwrap(),
        tok.eot().unwrap(),
        tok.token_id("<|endoftext|>").unwrap(),
    ];
    let py = py_tokens(&path, &[&parsed, &plain, &specials]);

    // parse_special cuts the markers out as their control tokens, and the
    // ids still spell the text.
    let controls: Vec<(usize, &str)> = (0..parsed.len())
        .filter(|&i| py[0].types[i] == 3)
        .map(|i| (i, py[0].texts[i].as_str()))
        .collect();
    assert_eq!(controls.len(), 3, "{parsed:?}: {:?}", py[0].texts);
    assert_eq!(controls[0], (0, "<|im_start|>"));
    assert_eq!(controls[1].1, "<|im_end|>");
    assert_eq!(controls[2].1, "<|im_start|>");
    assert_eq!(py[0].spelled, text);
    assert_eq!(tok.decode(&parsed), text);

    // Without it the markers are plain text: no control token at all.
    assert!(
        py[1].types.iter().all(|&t| t != 3),
        "{plain:?}: {:?}",
        py[1].texts
    );
    assert_eq!(py[1].spelled, text);
    assert!(plain.len() > parsed.len());
    assert_eq!(tok.decode(&plain), text);

    // BOS, EOS, EOT (found by text), and <|endoftext|>, which also ends
    // generation.
    let names = ["<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>"];
    assert_eq!(py[2].texts, names);
    assert!(!tok.is_eog(specials[0]));
    assert!(specials[1..].iter().all(|&id| tok.is_eog(id)));
}

// Gemma's vocabulary is too big for the gguf package to read quickly
// (minutes on a loaded machine), so its ids below were read with it once:
// GGUFReader(...).fields["tokenizer.ggml.tokens"] holds "<eos>" at 1, "<bos>"
// at 2, "<end_of_turn>" at 106 and "\n\n" at 108 (a user-defined token).
#[test]
fn gemma3_loads_fast_and_knows_its_specials() {
    let path = common::model(common::GEMMA3);
    let file = GgufFile::open(&path).unwrap();
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let elapsed = t0.elapsed();
    eprintln!("gemma-3 tokenizer (262144 tokens) built in {elapsed:.2?}");
    // Anything quadratic in 262144 tokens would take minutes.
    assert!(elapsed.as_secs_f64() < 10.0, "{elapsed:?}");

    assert_eq!(tok.vocab_type(), VocabType::Spm);
    assert_eq!(tok.n_vocab(), 262144);
    assert!(tok.add_bos() && !tok.add_eos());
    assert_eq!(
        (tok.bos(), tok.eos(), tok.eot()),
        (Some(2), Some(1), Some(106))
    );
    assert!(tok.is_eog(1) && tok.is_eog(106) && !tok.is_eog(2));

    // "\n\n" is cut out even without parse_special, and Gemma adds no space
    // prefix after it: " of" stays "▁of". The other ids are llama.cpp's for
    // "The capital of France is".
    let ids = tok.encode("The capital\n\n of France is", true, false);
    assert_eq!(ids, [2, 818, 5279, 108, 529, 7001, 563]);
    assert_eq!(tok.decode(&ids[1..]), "The capital\n\n of France is");
}
