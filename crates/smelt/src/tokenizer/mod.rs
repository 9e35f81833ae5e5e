//! Tokenizers built from a GGUF's `tokenizer.ggml.*` metadata, matching
//! llama.cpp token for token.
//!
//! Encoding: special tokens are cut out of the text first (`special.rs`),
//! then each remaining fragment goes through the model's tokenizer:
//! SentencePiece-style BPE (`spm.rs`), byte-level BPE after a regex
//! pre-tokenizer (`bpe.rs`, `pretokenize.rs`, with llama.cpp's code point
//! classes from `unicode.rs`), or WordPiece (`wpm.rs`). Decoding renders each token's bytes
//! (`decode.rs`) and makes text of them only at the very end, or, when
//! streaming, once a character is complete (`stream.rs`).
//!
//! Read `vocab.rs` for what is taken from the GGUF and which defaults apply.

mod bpe;
mod decode;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod unicode;
mod unicode_nfd;
mod unicode_table;
mod vocab;
mod wpm;

pub use stream::{StreamDecoder, Utf8Stream};
pub use vocab::VocabType;

use bpe::Bpe;
use special::Fragment;
use vocab::{Attr, Vocab};

use crate::gguf::{GgufError, Header};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(
        "tokenizer.ggml.model is {0:?}; supported are \"llama\" (SentencePiece), \"gpt2\" (byte-level BPE), \"gemma4\" (BPE over UTF-8) and \"bert\" (WordPiece)"
    )]
    UnknownModel(String),
    #[error(
        "unknown pre-tokenizer {name:?} (tokenizer.ggml.pre); known are: {known}",
        known = pretokenize::known_names()
    )]
    UnknownPre { name: String },
    #[error("tokenizer.ggml.tokens holds {0} tokens")]
    BadVocabSize(usize),
    #[error("{key} holds {found} entries for {n_vocab} tokens")]
    ShortArray {
        key: &'static str,
        found: usize,
        n_vocab: usize,
    },
    #[error("{key} is an array of {found}, expected {expected}")]
    ArrayType {
        key: &'static str,
        found: &'static str,
        expected: &'static str,
    },
    #[error("token {text:?} appears twice in tokenizer.ggml.tokens, as ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("{flag} is true but the vocabulary has no such token")]
    MissingSpecial { flag: &'static str },
    #[error("pre-tokenizer regex {pattern:?} does not compile: {message}")]
    Regex { pattern: String, message: String },
}

/// A tokenizer for one vocabulary. Cheap to share: encoding and decoding
/// take `&self`.
pub struct Tokenizer {
    vocab: Vocab,
    /// The byte-level BPE machinery; `None` for SentencePiece.
    bpe: Option<Bpe>,
}

// A server shares one tokenizer between its threads.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
};

impl Tokenizer {
    /// Builds the tokenizer from metadata alone, so vocabulary-only GGUFs
    /// work. Malformed or unsupported metadata is an error.
    pub fn from_gguf(h: &Header) -> Result<Self, TokenizerError> {
        let (vocab, spec) = Vocab::from_gguf(h)?;
        let bpe = spec
            .map(|spec| Bpe::from_gguf(h, &vocab, &spec))
            .transpose()?;
        Ok(Self { vocab, bpe })
    }

    /// Text to token ids, as llama.cpp's `llama_tokenize`. `add_special`
    /// adds BOS/EOS where the model's metadata says to; `parse_special`
    /// turns the text of control tokens (like `<|im_start|>`) into those
    /// tokens. User-defined tokens are matched either way.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let v = &self.vocab;
        let mut out = Vec::new();
        if add_special && v.add_bos {
            out.extend(v.special.ids.bos);
        }
        // SentencePiece prefixes a space to text that starts the input or
        // follows a special token.
        let mut after_special = true;
        for fragment in special::partition(v, text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(s) => match &self.bpe {
                    Some(bpe) => bpe.tokenize(v, s, &mut out),
                    None if v.kind == VocabType::Wpm => wpm::tokenize(v, s, &mut out),
                    None => {
                        let prefix = if v.add_space_prefix && after_special {
                            " "
                        } else {
                            ""
                        };
                        let escaped = format!("{prefix}{s}").replace(' ', "\u{2581}");
                        spm::tokenize(v, &escaped, &mut out);
                        after_special = false;
                    }
                },
            }
        }
        if add_special && v.add_eos {
            out.extend(v.special.ids.eos);
        }
        // WordPiece ends a text with [SEP] where BOS ([CLS]) starts it.
        if add_special && v.kind == VocabType::Wpm {
            out.extend(v.special.ids.sep);
        }
        out
    }

    /// Token ids to text, as llama.cpp's `common_detokenize(.., special =
    /// true)`: control tokens shown as their text, the SentencePiece space
    /// prefix removed, spaces cleaned up where the vocabulary asks. Bytes
    /// become text only here at the end (invalid UTF-8 becomes U+FFFD). Ids
    /// out of range render as nothing; check them against
    /// [`n_vocab`](Self::n_vocab) first where that matters.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, false, true)).into_owned()
    }

    /// The raw bytes of one token as llama.cpp's `token_to_piece(.., special
    /// = true)` renders it: byte tokens are their byte, byte-level BPE tokens
    /// their bytes, SentencePiece pieces with U+2581 as spaces, control and
    /// user-defined tokens their text. Empty for ids out of range.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        self.piece(id, true).into_owned()
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n_vocab()
    }

    pub fn vocab_type(&self) -> VocabType {
        self.vocab.kind
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.special.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.special.ids.eos
    }

    /// End of turn: from `tokenizer.ggml.eot_token_id`, else found by text
    /// (`<|eot_id|>`, `<|im_end|>`, `<end_of_turn>`, ...).
    pub fn eot(&self) -> Option<u32> {
        self.vocab.special.ids.eot
    }

    pub fn pad(&self) -> Option<u32> {
        self.vocab.special.ids.pad
    }

    pub fn unk(&self) -> Option<u32> {
        self.vocab.special.ids.unk
    }

    /// End of generation: EOS, EOT, EOM and the other tokens llama.cpp
    /// stops at (`<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`, FIM pad,
    /// ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.special.is_eog(id)
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// The id of the token whose text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// A token's text as the vocabulary stores it.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(|t| t.text.as_str())
    }

    /// Whether a token is a control token (never produced from plain text).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab
            .tokens
            .get(id as usize)
            .is_some_and(|t| t.attr.any(Attr::CONTROL))
    }
}
