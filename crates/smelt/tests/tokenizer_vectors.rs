//! llama.cpp's tokenizer test vectors (`testdata/tokenizer`, from its
//! `models/` folder): every case must tokenize to exactly llama.cpp's ids
//! (add_special = false, parse_special = false) and decode back to its text.
//!
//! Some vocabularies are stored trimmed to what the texts can reach
//! (`scripts/trim_vocab.py`; see testdata/tokenizer/README.md). The ignored
//! test `full_size_vocabularies` runs the untrimmed files of llama.cpp's
//! `models/` folder, named by `SMELT_LLAMA_VOCABS`.

mod common;

use std::io::Read;
use std::path::Path;

use smelt::gguf::Header;
use smelt::tokenizer::{Tokenizer, VocabType};

/// A vocabulary-only GGUF, stored gzipped.
fn load(name: &str) -> Tokenizer {
    let path = common::testdata(&format!("tokenizer/ggml-vocab-{name}.gguf.gz"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tokenizer(name, &bytes)
}

fn tokenizer(name: &str, bytes: &[u8]) -> Tokenizer {
    let header = Header::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    Tokenizer::from_gguf(&header).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `.inp` texts (separated by `\n__ggml_vocab_test__\n`, which also ends
/// most files) and the `.out` ids, one line per text, from `dir`.
fn cases_in(dir: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = dir.join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let inp = read("inp");
    let out = read("out");
    let sep = "\n__ggml_vocab_test__\n";
    let texts: Vec<&str> = inp.strip_suffix(sep).unwrap_or(&inp).split(sep).collect();
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree");
    assert!(texts.len() > 40, "{name}: only {} cases", texts.len());
    texts.into_iter().map(String::from).zip(ids).collect()
}

fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    cases_in(&common::testdata("tokenizer"), name)
}

/// The text `decode` should give back. Vocabularies that clean up spaces
/// (llama.cpp's `clean_spaces`: GPT-2, Llama 3, Falcon, StarCoder) drop the
/// space of " ?", which two cases have; the other patterns the clean-up
/// touches must not occur, or this expectation would be wrong.
fn expected_text(text: &str, cleans_spaces: bool) -> String {
    if !cleans_spaces {
        return text.to_string();
    }
    for pattern in [" !", " .", " ,", " ' ", " 's", " 'm", " 're", " 've"] {
        assert!(
            !text.contains(pattern),
            "case {text:?} needs another clean-up rule"
        );
    }
    text.replace(" ?", "?")
}

fn check(name: &str, vocab_type: VocabType, cleans_spaces: bool) {
    let failures = failures(&load(name), vocab_type, cleans_spaces, cases(name));
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
}

/// The cases `tok` gets wrong, described.
fn failures(
    tok: &Tokenizer,
    vocab_type: VocabType,
    cleans_spaces: bool,
    cases: Vec<(String, Vec<u32>)>,
) -> Vec<String> {
    assert_eq!(tok.vocab_type(), vocab_type);
    let mut failures = Vec::new();
    for (text, want) in cases {
        let got = tok.encode(&text, false, false);
        if got != want {
            failures.push(format!("{text:?}\n   want {want:?}\n    got {got:?}"));
            continue;
        }
        // WordPiece normalizes (lowercase, no accents, punctuation apart):
        // its ids decode to that, not to the text.
        if vocab_type == VocabType::Wpm {
            continue;
        }
        let back = tok.decode(&got);
        let expected = expected_text(&text, cleans_spaces);
        if back != expected {
            failures.push(format!("{text:?} decodes to {back:?}"));
        }
    }
    failures
}

#[test]
fn bert_bge() {
    check("bert-bge", VocabType::Wpm, true);
}

/// With add_special, BERT's text goes between [CLS] and [SEP] (llama.cpp's
/// ids 101 and 102 of this vocabulary); an unknown word is [UNK] whole.
#[test]
fn bert_bge_adds_cls_and_sep() {
    let tok = load("bert-bge");
    let plain = tok.encode("Hello world", false, false);
    let mut want = vec![101];
    want.extend(&plain);
    want.push(102);
    assert_eq!(tok.encode("Hello world", true, false), want);
    assert_eq!(tok.encode("\u{10000}", false, false), [100]);
}

#[test]
fn llama_spm() {
    check("llama-spm", VocabType::Spm, false);
}

#[test]
fn phi_3() {
    check("phi-3", VocabType::Spm, false);
}

#[test]
fn llama_bpe() {
    check("llama-bpe", VocabType::Bpe, true);
}

#[test]
fn gpt_2() {
    check("gpt-2", VocabType::Bpe, true);
}

#[test]
fn qwen2() {
    check("qwen2", VocabType::Bpe, false);
}

#[test]
fn deepseek_llm() {
    check("deepseek-llm", VocabType::Bpe, false);
}

#[test]
fn falcon() {
    check("falcon", VocabType::Bpe, true);
}

#[test]
fn starcoder() {
    check("starcoder", VocabType::Bpe, true);
}

#[test]
fn qwen35() {
    check("qwen35", VocabType::Bpe, false);
}

#[test]
fn gemma_4() {
    check("gemma-4", VocabType::Bpe, true);
}

#[test]
fn command_r() {
    check("command-r", VocabType::Bpe, false);
}

#[test]
fn deepseek_coder() {
    check("deepseek-coder", VocabType::Bpe, false);
}

#[test]
fn mpt() {
    check("mpt", VocabType::Bpe, true);
}

#[test]
fn refact() {
    check("refact", VocabType::Bpe, true);
}

/// Every vector of llama.cpp's `models/` folder whose tokenizer smelt has,
/// on the full-size vocabularies: `SMELT_LLAMA_VOCABS=/path/to/llama.cpp/models
/// cargo test --release -p smelt --test tokenizer_vectors -- --ignored`.
#[test]
#[ignore = "needs SMELT_LLAMA_VOCABS, llama.cpp's models/ folder"]
fn full_size_vocabularies() {
    let dir = std::env::var_os("SMELT_LLAMA_VOCABS")
        .expect("SMELT_LLAMA_VOCABS names llama.cpp's models/ folder");
    let dir = Path::new(&dir);
    let vocabs = [
        ("llama-spm", VocabType::Spm, false),
        ("phi-3", VocabType::Spm, false),
        ("llama-bpe", VocabType::Bpe, true),
        ("gpt-2", VocabType::Bpe, true),
        ("qwen2", VocabType::Bpe, false),
        ("qwen35", VocabType::Bpe, false),
        ("deepseek-llm", VocabType::Bpe, false),
        ("deepseek-coder", VocabType::Bpe, false),
        ("falcon", VocabType::Bpe, true),
        ("starcoder", VocabType::Bpe, true),
        ("refact", VocabType::Bpe, true),
        ("mpt", VocabType::Bpe, true),
        ("command-r", VocabType::Bpe, false),
        ("gemma-4", VocabType::Bpe, true),
        ("bert-bge", VocabType::Wpm, true),
    ];
    let mut report = Vec::new();
    let mut failed = Vec::new();
    for (name, vocab_type, cleans_spaces) in vocabs {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cases = cases_in(dir, name);
        let n = cases.len();
        let fails = failures(&tokenizer(name, &bytes), vocab_type, cleans_spaces, cases);
        report.push(format!("{name}: {}/{n}", n - fails.len()));
        failed.extend(fails.into_iter().map(|f| format!("{name}: {f}")));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
