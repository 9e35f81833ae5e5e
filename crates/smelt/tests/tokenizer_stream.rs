//! StreamDecoder: text comes out only once each character is whole, when
//! characters are split across byte-fallback or byte-level BPE tokens. The
//! ids are llama.cpp's, from its test vectors.

mod common;

use std::io::Read;

use smelt::gguf::Header;
use smelt::tokenizer::{StreamDecoder, Tokenizer};

fn load(name: &str) -> Tokenizer {
    let path = common::testdata(&format!("tokenizer/ggml-vocab-{name}.gguf.gz"));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    Tokenizer::from_gguf(&Header::parse(&bytes).unwrap()).unwrap()
}

#[test]
fn byte_fallback_tokens_make_one_character() {
    let tok = load("llama-spm");
    // llama.cpp's ids for " this is 🦙.cpp": the llama is four byte tokens,
    // <0xF0> <0x9F> <0xA6> <0x99>.
    let ids = [29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223];
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id)).collect();
    assert_eq!(
        pieces,
        [" ", " this", " is", " ", "", "", "", "🦙", ".", "cpp"]
    );
    assert_eq!(stream.finish(), "");
    // decode, unlike streaming, drops the space SentencePiece prefixed.
    assert_eq!(tok.decode(&ids), " this is 🦙.cpp");
}

#[test]
fn broken_sequences_become_replacement_characters() {
    let tok = load("llama-spm");
    let mut stream = StreamDecoder::new(&tok);
    // <0xF0> <0x9F> then the stream ends: one U+FFFD for the cut character.
    assert_eq!(stream.push(243), "");
    assert_eq!(stream.push(162), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
    // A lone continuation byte <0x9F> can never start a character.
    assert_eq!(stream.push(162), "\u{FFFD}");
    // <0xF0> then "▁this": the cut character is replaced, the text goes on.
    assert_eq!(stream.push(243), "");
    assert_eq!(stream.push(445), "\u{FFFD} this");
    assert_eq!(stream.finish(), "");
}

#[test]
fn byte_level_bpe_tokens_split_inside_characters() {
    let tok = load("llama-bpe");
    // llama.cpp's ids for "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅
    // (only emoji that has its own token)": several emoji end mid-token.
    let text = "🚀 (normal) 😶\u{200d}🌫\u{fe0f} (multiple emojis concatenated) ✅ (only emoji that has its own token)";
    let ids = [
        9468, 248, 222, 320, 8416, 8, 27623, 114, 102470, 9468, 234, 104, 31643, 320, 36773,
        100166, 98634, 8, 26602, 227, 320, 3323, 43465, 430, 706, 1202, 1866, 4037, 8,
    ];
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id)).collect();
    assert!(pieces.iter().any(String::is_empty), "nothing was held back");
    assert_eq!(pieces.concat() + &stream.finish(), text);
    assert_eq!(pieces[2], "🚀");
}
