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
    assert!(matches!(&e, TokenizerError::UnknownPre { name } if name == "made-up"));
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
    assert!(matches!(err(&h), TokenizerError::UnknownPre { name } if name == "smollm-9"));
}

#[test]
fn unknown_model_is_an_error() {
    let h = with(
        bpe_header(),
        "tokenizer.ggml.model",
        Value::String("t5".into()),
    );
    let e = err(&h);
    assert!(
        matches!(&e, TokenizerError::UnknownModel(m) if m == "t5"),
        "{e}"
    );
    assert!(e.to_string().contains("\"bert\" (WordPiece)"), "{e}");
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

/// Random vocabularies (odd texts, every token type, NaN and infinite
/// scores, merges of anything) must load or fail cleanly, and then encode
/// and decode anything without panicking.
#[test]
fn random_vocabularies_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let pieces = [
        "a",
        "b",
        "ab",
        " ",
        "▁",
        "▁a",
        "\n",
        "<s>",
        "</s>",
        "<0x41>",
        "<0xE2>",
        "<0x",
        "Ġ",
        "é",
        "🦙",
        "<|im_start|>",
        "\t\t",
        "'s",
        "ĠĠ",
        "",
    ];
    let texts = [
        "",
        "a b",
        "<s>ab</s>",
        "🦙 é\n\n",
        "<|im_start|>x",
        "  'sab  \t",
        "\u{0}",
    ];
    let mut loaded = 0;
    for round in 0..300 {
        let n = rng.gen_range(1..40);
        // Mostly the pieces themselves, so that they merge and match; a
        // repeat gets a suffix (or stays, for the duplicate-token error).
        let mut tokens: Vec<String> = Vec::new();
        for i in 0..n {
            let piece = pieces[rng.gen_range(0..pieces.len())];
            let unique = !tokens.iter().any(|t| t == piece) || rng.gen_bool(0.05);
            tokens.push(if unique {
                piece.into()
            } else {
                format!("{piece}{i}")
            });
        }
        let mut m = Metadata::new();
        let model = ["gpt2", "llama", "gemma4"][round % 3];
        m.insert("tokenizer.ggml.model", Value::String(model.into()));
        // Pre-tokenizers of every kind: engine regexes, hand-written
        // matchers, escaped spaces, raw UTF-8.
        let pre = [
            "qwen2",
            "kimi-k2",
            "afmoe",
            "tekken",
            "sarvam-moe",
            "whitespace",
            "superbpe",
            "chameleon",
            "deepseek-v3",
            "chatglm-bpe",
        ][rng.gen_range(0..10)];
        m.insert("tokenizer.ggml.pre", Value::String(pre.into()));
        m.insert(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(tokens.clone())),
        );
        let scores = (0..n)
            .map(|_| match rng.gen_range(0..4) {
                0 => f32::NAN,
                1 => f32::INFINITY,
                _ => rng.gen_range(-10.0..10.0),
            })
            .collect();
        m.insert("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
        let types = (0..n).map(|_| rng.gen_range(-1..8)).collect();
        m.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        let merges = (0..rng.gen_range(0..30))
            .map(|_| {
                let a = &tokens[rng.gen_range(0..n)];
                let b = &tokens[rng.gen_range(0..n)];
                format!("{a} {b}")
            })
            .collect();
        m.insert("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
        for key in ["bos", "eos", "unknown", "eot"] {
            let id = rng.gen_range(0..n as u32 + 3);
            m.insert(format!("tokenizer.ggml.{key}_token_id"), Value::U32(id));
        }
        m.insert(
            "tokenizer.ggml.add_bos_token",
            Value::Bool(rng.gen_bool(0.5)),
        );
        m.insert(
            "tokenizer.ggml.add_eos_token",
            Value::Bool(rng.gen_bool(0.5)),
        );
        let h = Header {
            version: 3,
            metadata: m,
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let Ok(tok) = Tokenizer::from_gguf(&h) else {
            continue;
        };
        loaded += 1;
        for text in texts {
            for (add, parse) in [(false, false), (true, true)] {
                let ids = tok.encode(text, add, parse);
                assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()));
                let _ = tok.decode(&ids);
            }
        }
        let ids: Vec<u32> = (0..20).map(|_| rng.gen_range(0..n as u32 + 5)).collect();
        let _ = tok.decode(&ids);
        let mut stream = smelt::tokenizer::StreamDecoder::new(&tok);
        for &id in &ids {
            let _ = stream.push(id);
        }
        let _ = stream.finish();
    }
    assert!(loaded > 100, "only {loaded} of 300 vocabularies loaded");
}
