//! Bad or unsupported tokenizer metadata is a clear error, never a panic or
//! a silent fallback.

mod common;

use smelt::gguf::{Array, GgufFile, Header, Metadata, Value};
use smelt::tokenizer::{Tokenizer, TokenizerError};

/// A small byte-level BPE vocabulary: the 256 byte symbols and one merge.
fn bpe_header() -> Header {
    let mut m = Metadata::new();
    let mut tokens: Vec<String> = (0x21u8..=0x7E).map(|b| (b as char).to_string()).collect();
    tokens.push("ab".into());
    m.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    m.insert("tokenizer.ggml.pre", Value::String("gpt-2".into()));
    m.insert("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    m.insert(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(vec!["a b".into()])),
    );
    m.insert("tokenizer.ggml.bos_token_id", Value::U32(0));
    m.insert("tokenizer.ggml.eos_token_id", Value::U32(0));
    Header {
        version: 3,
        metadata: m,
        tensors: Vec::new(),
        alignment: 32,
        data_offset: 0,
    }
}

fn with(mut h: Header, key: &str, value: Value) -> Header {
    h.metadata.insert(key, value);
    h
}

fn err(h: &Header) -> TokenizerError {
    match Tokenizer::from_gguf(h) {
        Ok(_) => panic!("metadata accepted"),
        Err(e) => e,
    }
}

#[test]
fn the_synthetic_vocabulary_works() {
    let tok = Tokenizer::from_gguf(&bpe_header()).unwrap();
    let ab = tok.token_id("ab").unwrap();
    assert_eq!(tok.encode("ab", false, false), [ab]);
    assert_eq!(tok.decode(&[ab]), "ab");
}

#[test]
fn unknown_pre_tokenizer_is_an_error() {
    let h = with(
        bpe_header(),
        "tokenizer.ggml.pre",
        Value::String("made-up".into()),
    );
    let e = err(&h);
    assert!(matches!(&e, TokenizerError::UnknownPre(name) if name == "made-up"));
    assert!(e.to_string().contains("\"made-up\""), "{e}");
}

#[test]
fn unknown_pre_tokenizer_in_a_real_model_is_an_error() {
    let file = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let h = with(
        (*file).clone(),
        "tokenizer.ggml.pre",
        Value::String("smollm-9".into()),
    );
    assert!(matches!(err(&h), TokenizerError::UnknownPre(name) if name == "smollm-9"));
}

#[test]
fn unknown_model_is_an_error() {
    let h = with(
        bpe_header(),
        "tokenizer.ggml.model",
        Value::String("bert".into()),
    );
    assert!(matches!(err(&h), TokenizerError::UnknownModel(m) if m == "bert"));
}

#[test]
fn missing_or_mistyped_arrays_are_errors() {
    let mut h = bpe_header();
    h.metadata = Metadata::new();
    for (k, v) in bpe_header().metadata.iter() {
        if k != "tokenizer.ggml.merges" {
            h.metadata.insert(k, v.clone());
        }
    }
    assert!(err(&h).to_string().contains("tokenizer.ggml.merges"));

    let h = with(
        bpe_header(),
        "tokenizer.ggml.tokens",
        Value::Array(Array::U32(vec![1, 2])),
    );
    assert!(matches!(err(&h), TokenizerError::ArrayType { .. }));

    let h = with(
        bpe_header(),
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(Vec::new())),
    );
    assert!(matches!(err(&h), TokenizerError::BadVocabSize(0)));

    let h = with(
        bpe_header(),
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; 3])),
    );
    assert!(matches!(
        err(&h),
        TokenizerError::ShortArray { found: 3, .. }
    ));

    let h = with(
        bpe_header(),
        "tokenizer.ggml.token_type",
        Value::Array(Array::String(vec!["1".into()])),
    );
    assert!(matches!(err(&h), TokenizerError::ArrayType { .. }));

    let h = with(
        bpe_header(),
        "tokenizer.ggml.merges",
        Value::String("a b".into()),
    );
    assert!(err(&h).to_string().contains("tokenizer.ggml.merges"));
}

#[test]
fn duplicate_tokens_are_an_error() {
    let h = with(
        bpe_header(),
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(vec!["a".into(), "b".into(), "a".into()])),
    );
    let e = err(&h);
    assert!(
        matches!(
            &e,
            TokenizerError::DuplicateToken {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn special_ids_are_checked() {
    // Out of range: ignored, as llama.cpp does (keeping the default, which
    // for BPE is 11 and here out of range too).
    let h = with(
        bpe_header(),
        "tokenizer.ggml.eos_token_id",
        Value::U32(1_000_000),
    );
    assert_eq!(Tokenizer::from_gguf(&h).unwrap().eos(), Some(11));
    let h = with(
        bpe_header(),
        "tokenizer.ggml.bos_token_id",
        Value::String("1".into()),
    );
    assert!(err(&h).to_string().contains("tokenizer.ggml.bos_token_id"));

    // Asked to add a BOS it does not have.
    let mut h = with(
        bpe_header(),
        "tokenizer.ggml.add_bos_token",
        Value::Bool(true),
    );
    h.metadata = {
        let mut m = Metadata::new();
        for (k, v) in h.metadata.iter() {
            if k != "tokenizer.ggml.bos_token_id" {
                m.insert(k, v.clone());
            }
        }
        m
    };
    let h = with(
        h,
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(vec!["a".into(), "b".into()])),
    );
    assert!(matches!(err(&h), TokenizerError::MissingSpecial { .. }));
}
