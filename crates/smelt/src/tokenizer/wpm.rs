//! WordPiece (BERT's tokenizer, `tokenizer.ggml.model = "bert"`), as
//! llama.cpp's WPM tokenizer splits and matches:
//!
//! 1. Normalize: each code point replaced by the first code point of its
//!    canonical decomposition and combining marks dropped (where accents
//!    are stripped), lowercased (where asked), control characters, U+0000
//!    and U+FFFD dropped.
//! 2. Split into words at whitespace; each punctuation mark, ASCII symbol
//!    and CJK ideograph is a word of its own.
//! 3. Each word, with U+2581 before it (the vocabulary marks word starts
//!    so, where BERT's marks continuations with `##`), is taken greedily:
//!    the longest vocabulary entry at each position. A word with a
//!    position no entry starts at becomes the unknown token whole.

use super::unicode::{Category, flags};
use super::unicode_nfd::NFD_RUNS;
use super::vocab::Vocab;

/// How a WordPiece vocabulary normalizes text
/// (`tokenizer.ggml.normalizer.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Normalizer {
    pub lowercase: bool,
    pub strip_accents: bool,
}

/// The word-start mark the vocabulary's entries carry.
const WORD_START: &str = "\u{2581}";

/// Appends the tokens of `text` (a fragment between special tokens).
pub(super) fn tokenize(v: &Vocab, text: &str, out: &mut Vec<u32>) {
    let longest = v.longest;
    let mut word = String::from(WORD_START);
    for w in words(text, v.normalizer) {
        word.truncate(WORD_START.len());
        word.push_str(&w);
        let start = out.len();
        let mut at = 0;
        while at < word.len() {
            // The longest entry at `at`; entries are whole characters, so
            // ends that split one never match.
            let end = (at + longest).min(word.len());
            let found = (at + 1..=end)
                .rev()
                .filter(|&e| word.is_char_boundary(e))
                .find_map(|e| v.id(&word[at..e]).map(|id| (id, e)));
            match found {
                Some((id, e)) => {
                    out.push(id);
                    at = e;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.extend(v.special.ids.unk);
        }
    }
}

/// The words of `text` after normalization.
fn words(text: &str, norm: Normalizer) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if norm.strip_accents { decomposed(c) } else { c };
        let f = flags(c);
        if f.whitespace {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || f.category == Category::Control {
            continue;
        }
        if norm.strip_accents && f.category == Category::Mark {
            continue;
        }
        let alone = f.category == Category::Punctuation
            || (c.is_ascii() && f.category == Category::Symbol)
            || is_cjk_ideograph(c);
        let c = if norm.lowercase { lowercase(c) } else { c };
        let last = words.last_mut().expect("never empty");
        if alone {
            if !last.is_empty() {
                words.push(String::new());
            }
            let last = words.last_mut().expect("never empty");
            last.push(c);
            words.push(String::new());
        } else {
            last.push(c);
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

/// The first code point of `c`'s canonical decomposition (`c` if none).
fn decomposed(c: char) -> char {
    let cp = c as u32;
    let i = NFD_RUNS.partition_point(|&(first, _, _)| first <= cp);
    match i.checked_sub(1).map(|i| NFD_RUNS[i]) {
        Some((_, last, nfd)) if cp <= last => char::from_u32(nfd).unwrap_or(c),
        _ => c,
    }
}

/// `c`'s simple lowercase mapping: the first code point of the full one
/// (they differ only for U+0130, whose simple mapping is the `i` its full
/// one starts with).
fn lowercase(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// The CJK ideograph blocks BERT splits one character at a time (as
/// Hugging Face's tokenizers and llama.cpp list them, Extension C's start
/// included as they have it).
fn is_cjk_ideograph(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: Normalizer = Normalizer {
        lowercase: true,
        strip_accents: true,
    };

    #[test]
    fn words_are_normalized_and_split() {
        assert_eq!(
            words("  Äpfel, naïve\tCAFÉ!\u{0}x", BERT),
            ["apfel", ",", "naive", "cafe", "!", "x"]
        );
        // Combining marks go with the accents; CJK ideographs stand alone.
        assert_eq!(
            words("e\u{301}t\u{e9} 中文ab", BERT),
            ["ete", "中", "文", "ab"]
        );
        // Without stripping or lowercasing, text stays as it is.
        let plain = Normalizer {
            lowercase: false,
            strip_accents: false,
        };
        assert_eq!(words("Äpfel $5", plain), ["Äpfel", "$", "5"]);
        assert_eq!(lowercase('\u{130}'), 'i');
        assert_eq!(decomposed('\u{AC00}'), '\u{1100}');
    }
}
