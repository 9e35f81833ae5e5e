//! The vocabulary: token texts, scores and attributes, and the flags that
//! steer encoding and decoding, read from `tokenizer.ggml.*` the way
//! llama.cpp's `llama_vocab::impl::load` reads them.

use std::collections::HashMap;

use super::TokenizerError;
use super::pretokenize::{self, PreSpec};
use super::special::{DefaultIds, SpecialTokens};
use super::wpm::Normalizer;
use crate::gguf::{Array, Header};

pub(super) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(super) const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
const KEY_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";

/// Which tokenizer `tokenizer.ggml.model` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabType {
    /// `llama`: SentencePiece-style BPE over scores, with byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE over merge ranks, after a regex pre-tokenizer
    /// (also `gemma4`: BPE over raw UTF-8 with spaces as U+2581).
    Bpe,
    /// `bert`: WordPiece, the longest entries of normalized words.
    Wpm,
}

/// llama.cpp's `llama_token_attr` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) struct Attr(u16);

impl Attr {
    pub const UNDEFINED: Attr = Attr(0);
    pub const UNKNOWN: Attr = Attr(1 << 0);
    pub const UNUSED: Attr = Attr(1 << 1);
    pub const NORMAL: Attr = Attr(1 << 2);
    pub const CONTROL: Attr = Attr(1 << 3);
    pub const USER_DEFINED: Attr = Attr(1 << 4);
    pub const BYTE: Attr = Attr(1 << 5);
    pub const LSTRIP: Attr = Attr(1 << 7);
    pub const RSTRIP: Attr = Attr(1 << 8);

    /// From `tokenizer.ggml.token_type` (llama.cpp's `llama_token_type`).
    fn from_token_type(t: i64) -> Attr {
        match t {
            1 => Attr::NORMAL,
            2 => Attr::UNKNOWN,
            3 => Attr::CONTROL,
            4 => Attr::USER_DEFINED,
            5 => Attr::UNUSED,
            6 => Attr::BYTE,
            _ => Attr::UNDEFINED,
        }
    }

    pub fn any(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    pub fn set(&mut self, other: Attr, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
}

impl std::ops::BitOr for Attr {
    type Output = Attr;
    fn bitor(self, rhs: Attr) -> Attr {
        Attr(self.0 | rhs.0)
    }
}

pub(super) struct TokenData {
    pub text: String,
    pub score: f32,
    pub attr: Attr,
}

pub(super) struct Vocab {
    pub kind: VocabType,
    /// `tokenizer.ggml.pre`, empty when absent.
    pub pre: String,
    pub tokens: Vec<TokenData>, // (n_vocab)
    pub token_to_id: HashMap<String, u32>,
    pub special: SpecialTokens,
    /// SentencePiece byte fallback: the token for each byte, `<0xXX>` or the
    /// byte itself. (256)
    pub byte_tokens: Vec<Option<u32>>,
    pub add_space_prefix: bool,
    pub add_bos: bool,
    pub add_eos: bool,
    /// Drop the spaces before `?!.,` and some apostrophes when decoding
    /// (Hugging Face's `clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
    /// Take a pre-tokenized word that is itself a token whole, without merges.
    pub ignore_merges: bool,
    /// Normal tokens spell spaces as U+2581 (SentencePiece-style BPE).
    pub escape_whitespaces: bool,
    /// WordPiece: how words are normalized.
    pub normalizer: Normalizer,
    /// The longest token's text, in bytes.
    pub longest: usize,
}

impl Vocab {
    /// Reads the vocabulary; `Some(spec)` comes back for byte-level BPE, whose
    /// pre-tokenizer the caller builds.
    pub fn from_gguf(h: &Header) -> Result<(Self, Option<PreSpec>), TokenizerError> {
        let model = h.get_str(KEY_MODEL)?;
        let pre = h.opt_str(KEY_PRE)?.unwrap_or("");
        // Gemma 4 names its own model: BPE with its pre-tokenizer, whatever
        // `tokenizer.ggml.pre` says.
        let (kind, pre) = match model {
            "llama" => (VocabType::Spm, pre),
            "gpt2" => (VocabType::Bpe, pre),
            "gemma4" => (VocabType::Bpe, "gemma4"),
            "bert" => (VocabType::Wpm, pre),
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };
        let pre = pre.to_string();

        // Flags by model type; for BPE the pre-tokenizer adjusts them. Only
        // BPE has pre-tokenizers, so SentencePiece ignores the name.
        let spec = match kind {
            VocabType::Spm | VocabType::Wpm => None,
            VocabType::Bpe => Some(
                pretokenize::spec(&pre)
                    .ok_or_else(|| TokenizerError::UnknownPre { name: pre.clone() })?,
            ),
        };
        let (mut add_space_prefix, mut add_bos, clean_spaces, ignore_merges, escape_whitespaces) =
            match &spec {
                None if kind == VocabType::Wpm => (false, true, true, false, false),
                None => (true, true, false, false, false),
                Some(s) => (
                    false,
                    s.add_bos,
                    s.clean_spaces,
                    s.ignore_merges,
                    s.escape_whitespaces,
                ),
            };
        if let Some(v) = h.opt_bool(KEY_ADD_SPACE_PREFIX)? {
            add_space_prefix = v;
        }

        let (mut tokens, token_to_id) = read_tokens(h)?;
        let defaults = default_ids(model, spec.as_ref());
        let special = SpecialTokens::from_gguf(h, defaults, &mut tokens, &token_to_id)?;
        add_bos = h.opt_bool(KEY_ADD_BOS)?.unwrap_or(add_bos);
        let add_eos = h.opt_bool(KEY_ADD_EOS)?.unwrap_or(false);
        for (on, id, flag) in [
            (add_bos, special.ids.bos, KEY_ADD_BOS),
            (add_eos, special.ids.eos, KEY_ADD_EOS),
        ] {
            if on && id.is_none() {
                return Err(TokenizerError::MissingSpecial { flag });
            }
        }
        // BERT's uncased vocabularies lowercase and strip accents; the keys
        // say otherwise where they are present (llama.cpp's defaults).
        let lowercase = h.opt_bool(KEY_LOWERCASE)?.unwrap_or(true);
        let normalizer = Normalizer {
            lowercase,
            strip_accents: h.opt_bool(KEY_STRIP_ACCENTS)?.unwrap_or(lowercase),
        };
        let longest = tokens.iter().map(|t| t.text.len()).max().unwrap_or(0);
        let byte_tokens = (0..=255u8)
            .map(|b| spm_byte_token(&token_to_id, b))
            .collect();
        let mut vocab = Vocab {
            kind,
            pre,
            add_bos,
            add_eos,
            tokens,
            token_to_id,
            special,
            byte_tokens,
            add_space_prefix,
            clean_spaces,
            ignore_merges,
            escape_whitespaces,
            normalizer,
            longest,
        };
        vocab.set_attrs_by_name(h);
        Ok((vocab, spec))
    }

    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// Strip attributes some models need and GGUF does not carry, chosen by
    /// name as llama.cpp does: Phi-3's special tokens eat the whitespace after
    /// them; some BERT-likes' mask token eats the whitespace before it.
    fn set_attrs_by_name(&mut self, h: &Header) {
        let name = h
            .opt_str("general.name")
            .ok()
            .flatten()
            .unwrap_or("")
            .to_ascii_lowercase();
        let arch = h
            .opt_str("general.architecture")
            .ok()
            .flatten()
            .unwrap_or("");
        let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));

        if contains_any(&self.pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
            || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            self.set_attr("<mask>", Attr::LSTRIP, true);
        } else if contains_any(&name, &["phi-3", "phi3"]) {
            for i in 0..self.special.partition_order.len() {
                let id = self.special.partition_order[i] as usize;
                self.tokens[id].attr.set(Attr::RSTRIP, true);
            }
            self.set_attr("</s>", Attr::RSTRIP, true);
            for text in ["<unk>", "<s>", "<|endoftext|>"] {
                self.set_attr(text, Attr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            self.set_attr("[MASK]", Attr::LSTRIP, true);
        }
    }

    fn set_attr(&mut self, text: &str, attr: Attr, on: bool) {
        if let Some(id) = self.id(text) {
            self.tokens[id as usize].attr.set(attr, on);
        }
    }
}

/// llama.cpp's default BOS, EOS and unknown ids for a tokenizer model,
/// used where the GGUF names none.
fn default_ids(model: &str, spec: Option<&PreSpec>) -> DefaultIds {
    match (model, spec) {
        ("llama", _) => DefaultIds {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            sep: None,
        },
        ("bert", _) => DefaultIds {
            bos: Some(101),
            eos: None,
            unk: Some(100),
            sep: Some(102),
        },
        ("gemma4", _) => DefaultIds {
            bos: None,
            eos: None,
            unk: None,
            sep: None,
        },
        (_, spec) => DefaultIds {
            bos: (!spec.is_some_and(|s| s.no_default_bos)).then_some(11),
            eos: Some(11),
            unk: None,
            sep: None,
        },
    }
}

/// The token list with scores and attributes, and the text→id map, built
/// once. Empty texts become `[EMPTY_i]` as in llama.cpp; a repeated text is
/// an error, as there.
fn read_tokens(h: &Header) -> Result<(Vec<TokenData>, HashMap<String, u32>), TokenizerError> {
    let texts = match h.get_array(KEY_TOKENS)? {
        Array::String(v) => v,
        other => return Err(array_type(KEY_TOKENS, other, "strings")),
    };
    let n = texts.len();
    if n == 0 || u32::try_from(n).is_err() {
        return Err(TokenizerError::BadVocabSize(n));
    }

    let scores: Option<Vec<f32>> = match h.get(KEY_SCORES) {
        None => None,
        Some(_) => Some(match h.get_array(KEY_SCORES)? {
            Array::F32(v) => v.clone(),
            Array::I32(v) => v.iter().map(|&s| s as f32).collect(),
            other => return Err(array_type(KEY_SCORES, other, "f32 or i32")),
        }),
    };
    let types: Option<Vec<i64>> = match h.get(KEY_TOKEN_TYPE) {
        None => None,
        Some(_) => {
            let a = h.get_array(KEY_TOKEN_TYPE)?;
            Some(
                a.to_i64_vec()
                    .ok_or_else(|| array_type(KEY_TOKEN_TYPE, a, "integers"))?,
            )
        }
    };
    for (key, len) in [
        (KEY_SCORES, scores.as_ref().map(Vec::len)),
        (KEY_TOKEN_TYPE, types.as_ref().map(Vec::len)),
    ] {
        if let Some(len) = len.filter(|&len| len < n) {
            return Err(TokenizerError::ShortArray {
                key,
                found: len,
                n_vocab: n,
            });
        }
    }

    let mut tokens = Vec::with_capacity(n);
    let mut token_to_id = HashMap::with_capacity(n);
    for (i, text) in texts.iter().enumerate() {
        let text = if text.is_empty() {
            format!("[EMPTY_{i}]")
        } else {
            text.clone()
        };
        let id = i as u32;
        if let Some(first) = token_to_id.insert(text.clone(), id) {
            return Err(TokenizerError::DuplicateToken {
                text,
                first,
                second: id,
            });
        }
        tokens.push(TokenData {
            text,
            score: scores.as_ref().map_or(0.0, |s| s[i]),
            attr: types
                .as_ref()
                .map_or(Attr::NORMAL, |t| Attr::from_token_type(t[i])),
        });
    }
    Ok((tokens, token_to_id))
}

fn array_type(key: &'static str, found: &Array, expected: &'static str) -> TokenizerError {
    TokenizerError::ArrayType {
        key,
        found: found.element_type().name(),
        expected,
    }
}

/// llama.cpp's `byte_to_token` for SentencePiece: `<0xXX>` (upper-case hex),
/// else a token that is the byte itself.
fn spm_byte_token(token_to_id: &HashMap<String, u32>, b: u8) -> Option<u32> {
    token_to_id
        .get(&format!("<0x{b:02X}>"))
        .copied()
        .or_else(|| {
            // Only an ASCII byte can be a token text on its own.
            b.is_ascii()
                .then(|| token_to_id.get((b as char).encode_utf8(&mut [0; 4]) as &str))
                .flatten()
                .copied()
        })
}
