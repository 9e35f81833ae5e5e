//! What a `tokenizer.ggml.pre` name (or Gemma 4's own tokenizer model) sets
//! beyond where words split, on small hand-made vocabularies: default BOS,
//! spaces written as U+2581, merges over raw UTF-8 with `<0xXX>` byte
//! fallback, and newline runs taken whole.

use smelt::gguf::{Array, Header, Metadata, Value};
use smelt::tokenizer::Tokenizer;

const NORMAL: i32 = 1;
const BYTE: i32 = 6;

/// A vocabulary of `(text, token type)` with `merges`.
fn header(model: &str, pre: Option<&str>, tokens: &[(&str, i32)], merges: &[&str]) -> Header {
    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String(model.into()));
    if let Some(pre) = pre {
        m.insert("tokenizer.ggml.pre", Value::String(pre.into()));
    }
    let texts = tokens.iter().map(|(t, _)| t.to_string()).collect();
    m.insert("tokenizer.ggml.tokens", Value::Array(Array::String(texts)));
    let types = tokens.iter().map(|&(_, t)| t).collect();
    m.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let merges = merges.iter().map(|s| s.to_string()).collect();
    m.insert("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    Header {
        version: 3,
        metadata: m,
        tensors: Vec::new(),
        alignment: 32,
        data_offset: 0,
    }
}

fn tokenizer(h: &Header) -> Tokenizer {
    Tokenizer::from_gguf(h).unwrap()
}

/// Twelve one-letter tokens, so that id 11 (byte-level BPE's default BOS
/// and EOS) exists.
fn letters() -> Vec<(&'static str, i32)> {
    "abcdefghijkl"
        .split("")
        .filter(|s| !s.is_empty())
        .map(|s| (s, NORMAL))
        .collect()
}

#[test]
fn glm_has_no_default_bos() {
    let bos = |pre| tokenizer(&header("gpt2", Some(pre), &letters(), &[])).bos();
    assert_eq!(bos("gpt-2"), Some(11));
    assert_eq!(bos("chatglm-bpe"), None);
    assert_eq!(bos("glm4"), None);
    let eos = tokenizer(&header("gpt2", Some("glm4"), &letters(), &[])).eos();
    assert_eq!(eos, Some(11));
}

/// SentencePiece-style BPE: spaces become U+2581, merges run over UTF-8
/// (no byte map), a piece no token spells falls back to `<0xXX>` tokens,
/// and decoding turns U+2581 back into spaces.
#[test]
fn escaped_spaces_and_raw_utf8_merges() {
    let tokens = [
        ("h", NORMAL),
        ("é", NORMAL),
        ("hé", NORMAL),
        ("\u{2581}", NORMAL),
        ("\u{2581}hé", NORMAL),
        ("<0x21>", BYTE),
        ("\n", NORMAL),
    ];
    let merges = ["h é", "\u{2581} hé"];
    for (model, pre) in [("gpt2", Some("sarvam-moe")), ("gemma4", None)] {
        let tok = tokenizer(&header(model, pre, &tokens, &merges));
        let ids = tok.encode(" hé!\n", false, false);
        assert_eq!(ids, [4, 5, 6], "{model} {pre:?}");
        assert_eq!(tok.decode(&ids), " hé!\n");
    }
    // Byte-level BPE would have spelled é's bytes through GPT-2's map and
    // found no token.
    let byte_level = tokenizer(&header("gpt2", Some("qwen2"), &tokens, &merges));
    assert_eq!(byte_level.encode("hé", false, false), [0]);
}

/// Gemma 4 takes a run of newlines whole when the vocabulary has it, even
/// with no merge that builds it.
#[test]
fn gemma4_takes_newline_runs_whole() {
    let tokens = [("a", NORMAL), ("\n", NORMAL), ("\n\n\n", NORMAL)];
    let tok = tokenizer(&header("gemma4", None, &tokens, &[]));
    assert_eq!(tok.encode("a\n\n\na", false, false), [0, 2, 0]);
    // Another pre-tokenizer splits the same way but merges newline by newline.
    let tok = tokenizer(&header("gpt2", Some("sarvam-moe"), &tokens, &[]));
    assert_eq!(tok.encode("a\n\n\na", false, false), [0, 1, 1, 1, 0]);
}

/// Gemma 4's tokenizer model ignores `tokenizer.ggml.pre`; byte-level BPE
/// does not accept a name llama.cpp does not know.
#[test]
fn gemma4_model_overrides_the_pre_name() {
    let tokens = [("a", NORMAL)];
    assert!(Tokenizer::from_gguf(&header("gemma4", Some("made-up"), &tokens, &[])).is_ok());
    assert!(Tokenizer::from_gguf(&header("gpt2", Some("made-up"), &tokens, &[])).is_err());
}
