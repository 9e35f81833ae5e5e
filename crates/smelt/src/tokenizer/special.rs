//! Special tokens: the ids GGUF names (BOS, EOS, ...), the ones llama.cpp
//! finds by their text (EOT, FIM, end of generation), and the partition of
//! input text around control and user-defined tokens before the model's
//! tokenizer sees it (llama.cpp's `tokenizer_st_partition`).

use std::collections::{BTreeSet, HashMap};

use super::TokenizerError;
use super::vocab::{Attr, TokenData, Vocab};
use crate::gguf::{GgufError, Header};

/// Token ids with a role. `None` where the vocabulary has none.
#[derive(Clone, Debug, Default)]
pub(super) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

pub(super) struct SpecialTokens {
    pub ids: SpecialIds,
    /// Tokens that end generation. (sorted)
    pub eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first: the
    /// order in which they are cut out of input text.
    pub partition_order: Vec<u32>,
}

// Texts by which llama.cpp recognises roles that converters do not always
// record, in its order of preference.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\u{FF5C}end\u{2581}of\u{2581}sentence\u{FF5C}>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{FF5C}fim\u{2581}begin\u{FF5C}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{FF5C}fim\u{2581}hole\u{FF5C}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{FF5C}fim\u{2581}end\u{FF5C}>",
    "<MID>",
    "\u{2581}<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Tokens that end generation wherever they appear in a vocabulary.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{FF5C}end\u{2581}of\u{2581}sentence\u{FF5C}>",
    "[e~[",
];

/// The BOS, EOS and unknown ids a tokenizer type assumes where the GGUF
/// names none (llama.cpp's per-type defaults).
#[derive(Clone, Copy, Debug)]
pub(super) struct DefaultIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
}

impl SpecialTokens {
    /// Ids from the model type's defaults and the GGUF keys, then the roles
    /// found by text, which are marked as control tokens as llama.cpp does.
    pub fn from_gguf(
        h: &Header,
        defaults: DefaultIds,
        tokens: &mut [TokenData],
        token_to_id: &HashMap<String, u32>,
    ) -> Result<Self, TokenizerError> {
        let n = tokens.len();
        let mut ids = SpecialIds::default();
        (ids.bos, ids.eos, ids.unk, ids.sep) =
            (defaults.bos, defaults.eos, defaults.unk, defaults.sep);
        // A default out of the vocabulary's range is no token at all; a GGUF
        // value out of range is ignored, keeping the default.
        let read = |slot: &mut Option<u32>, key: &str| -> Result<(), GgufError> {
            *slot = slot.filter(|&id| (id as usize) < n);
            let key = format!("tokenizer.ggml.{key}_token_id");
            if let Some(v) = h.get(&key) {
                let id = v.as_i128().ok_or_else(|| GgufError::WrongType {
                    key: key.clone(),
                    found: v.value_type().name().into(),
                    expected: "an integer token id",
                })?;
                if (0..n as i128).contains(&id) {
                    *slot = Some(id as u32);
                }
            }
            Ok(())
        };
        for (slot, key) in [
            (&mut ids.bos, "bos"),
            (&mut ids.eos, "eos"),
            (&mut ids.eot, "eot"),
            (&mut ids.eom, "eom"),
            (&mut ids.unk, "unknown"),
            (&mut ids.sep, "seperator"),
            (&mut ids.pad, "padding"),
            (&mut ids.mask, "mask"),
            (&mut ids.fim_pre, "fim_pre"),
            (&mut ids.fim_suf, "fim_suf"),
            (&mut ids.fim_mid, "fim_mid"),
            (&mut ids.fim_pad, "fim_pad"),
            (&mut ids.fim_rep, "fim_rep"),
            (&mut ids.fim_sep, "fim_sep"),
        ] {
            read(slot, key)?;
        }
        // Older names for the FIM tokens win over the newer ones.
        for (slot, key) in [
            (&mut ids.fim_pre, "prefix"),
            (&mut ids.fim_suf, "suffix"),
            (&mut ids.fim_mid, "middle"),
        ] {
            read(slot, key)?;
        }

        let mut find = |slot: &mut Option<u32>, texts: &[&str]| {
            if slot.is_none() {
                *slot = texts.iter().find_map(|t| token_to_id.get(*t).copied());
                if let Some(id) = *slot {
                    tokens[id as usize].attr.set(Attr::CONTROL, true);
                }
            }
        };
        find(&mut ids.eot, EOT_TEXTS);
        find(&mut ids.eom, EOM_TEXTS);
        find(&mut ids.fim_pre, FIM_PRE_TEXTS);
        find(&mut ids.fim_suf, FIM_SUF_TEXTS);
        find(&mut ids.fim_mid, FIM_MID_TEXTS);
        find(&mut ids.fim_pad, FIM_PAD_TEXTS);
        find(&mut ids.fim_rep, FIM_REP_TEXTS);
        find(&mut ids.fim_sep, FIM_SEP_TEXTS);

        let eog = end_of_generation(&ids, tokens, token_to_id);
        let mut partition_order: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                tokens[id as usize]
                    .attr
                    .any(Attr::CONTROL | Attr::USER_DEFINED | Attr::UNKNOWN)
            })
            .collect();
        partition_order.sort_by_key(|&id| std::cmp::Reverse(tokens[id as usize].text.len()));

        Ok(SpecialTokens {
            ids,
            eog: eog.into_iter().collect(),
            partition_order,
        })
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
}

/// The end-of-generation set: the FIM pad/repo/file-separator tokens, every
/// token whose text says "end", and EOS/EOT/EOM; less `<|end|>` where a
/// vocabulary (gpt-oss, solar-open) ends turns with other tokens, and less
/// `</s>` where it has `<|tool_response>` (Gemma 4).
fn end_of_generation(
    ids: &SpecialIds,
    tokens: &mut [TokenData],
    token_to_id: &HashMap<String, u32>,
) -> BTreeSet<u32> {
    let mut eog: BTreeSet<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for text in EOG_TEXTS {
        if let Some(&id) = token_to_id.get(*text) {
            eog.insert(id);
            tokens[id as usize].attr.set(Attr::CONTROL, true);
        }
    }
    // gpt-oss's channel markers are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(&id) = token_to_id.get(text) {
            tokens[id as usize].attr = Attr::USER_DEFINED;
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());

    let in_eog = |eog: &BTreeSet<u32>, text: &str| {
        token_to_id.get(text).copied().filter(|id| eog.contains(id))
    };
    let has_call = in_eog(&eog, "<|call|>").is_some() || in_eog(&eog, "<|calls|>").is_some();
    if let Some(end) = in_eog(&eog, "<|end|>") {
        let has_return = in_eog(&eog, "<|return|>").is_some();
        let has_flush = in_eog(&eog, "<|flush|>").is_some();
        if has_call && (has_return || has_flush) {
            eog.remove(&end);
            tokens[end as usize].attr = Attr::USER_DEFINED;
        }
    }
    if in_eog(&eog, "<|tool_response>").is_some()
        && let Some(s) = in_eog(&eog, "</s>")
    {
        eog.remove(&s);
        tokens[s as usize].attr = Attr::NORMAL;
    }
    eog
}

/// A piece of input text: raw text for the model's tokenizer, or a special
/// token found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Cuts special tokens out of `text`, longest token first; each token cuts
/// every text fragment left by the longer ones, at every occurrence, left to
/// right. Control and unknown tokens are cut only when `parse_special`;
/// user-defined tokens always are. LSTRIP/RSTRIP tokens swallow the ASCII
/// whitespace next to them.
pub(super) fn partition<'a>(
    vocab: &Vocab,
    text: &'a str,
    parse_special: bool,
) -> Vec<Fragment<'a>> {
    // Fragments as byte ranges of `text`, or token ids.
    #[derive(Clone, Copy)]
    enum Frag {
        Text(usize, usize),
        Token(u32),
    }
    let mut frags = Vec::new();
    if !text.is_empty() {
        frags.push(Frag::Text(0, text.len()));
    }
    let bytes = text.as_bytes();
    // C's isspace() in the C locale, as llama.cpp strips with.
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');

    for &id in &vocab.special.partition_order {
        let token = &vocab.tokens[id as usize];
        if !parse_special && token.attr.any(Attr::CONTROL | Attr::UNKNOWN) {
            continue;
        }
        let needle = token.text.as_str();
        // Fragments are pieces of `text`: a token absent from it is absent
        // from all of them.
        if needle.is_empty() || !text.contains(needle) {
            continue;
        }
        let (lstrip, rstrip) = (token.attr.any(Attr::LSTRIP), token.attr.any(Attr::RSTRIP));
        let mut next = Vec::with_capacity(frags.len() + 2);
        for frag in frags {
            let Frag::Text(start, end) = frag else {
                next.push(frag);
                continue;
            };
            let mut pos = start;
            while let Some(rel) = text[pos..end].find(needle) {
                let at = pos + rel;
                let mut left_end = at;
                if lstrip {
                    while left_end > pos && is_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > pos {
                    next.push(Frag::Text(pos, left_end));
                }
                next.push(Frag::Token(id));
                pos = at + needle.len();
                if rstrip {
                    while pos < end && is_space(bytes[pos]) {
                        pos += 1;
                    }
                }
            }
            if pos < end {
                next.push(Frag::Text(pos, end));
            }
        }
        frags = next;
    }

    frags
        .into_iter()
        .map(|f| match f {
            // Token texts are whole UTF-8 strings and ASCII whitespace is
            // one byte, so every cut falls on a character boundary.
            Frag::Text(s, e) => Fragment::Text(&text[s..e]),
            Frag::Token(id) => Fragment::Token(id),
        })
        .collect()
}
