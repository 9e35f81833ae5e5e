//! Byte-level BPE pre-tokenizers: the regex lists `tokenizer.ggml.pre` names,
//! applied the way llama.cpp's `unicode_regex_split` applies them.
//!
//! Each regex of a list splits every piece the previous ones left into
//! matches and the gaps between them (gaps are kept as pieces too). A regex
//! sees only its piece: a lookahead stops at the piece's end.
//!
//! Where llama.cpp matches a regex by hand (GPT-2's, Llama 3's, Qwen 2's
//! and 3.5's, Kimi K2's, digit groups, newline runs) we do too, with the same code point classes
//! (`matchers.rs`). The others run through a regex engine with ECMAScript's
//! classes (`\d` is `[0-9]`): those naming `\p{..}` categories on a
//! "collapsed" copy of the text where each non-ASCII code point becomes a
//! stand-in for its category (so `\p{L}` means llama.cpp's letters, not the
//! regex engine's, and every letter subcategory means all letters, as
//! there), the rest on the text with non-ASCII whitespace turned into
//! U+000B.
//!
//! `names.rs` maps each name to its list (`regexes.rs`) and flags.

mod matchers;
mod names;
mod regexes;
#[cfg(test)]
mod tests;

use std::ops::Range;

use fancy_regex::Regex;

use super::TokenizerError;
use super::unicode::{Category, flags};
use matchers::{
    split_digit_groups, split_gpt2, split_kimi_k2, split_llama3, split_newline_runs, split_qwen2,
    split_qwen35,
};
use regexes::{
    AFMOE_DIGITS, GPT2, KIMI_K2_MARKER, LLAMA3, LLAMA3_ORIGINAL, NEWLINE_RUNS, QWEN2, QWEN35,
    TINY_AYA_DIGITS,
};

pub(super) use names::{PreSpec, known_names, spec};

/// A hand-written split: the pieces so far (lengths in code points) to the
/// pieces after.
type Splitter = fn(&[char], &[usize]) -> Vec<usize>;

/// One regex of a list, compiled.
enum Step {
    ByHand(Splitter),
    /// `collapsed` when the regex names categories and so runs on the
    /// collapsed text.
    Regex {
        re: Regex,
        collapsed: bool,
    },
}

/// The regexes llama.cpp matches by hand.
fn by_hand(expr: &str) -> Option<Splitter> {
    Some(match expr {
        GPT2 => split_gpt2,
        LLAMA3 | LLAMA3_ORIGINAL => split_llama3,
        QWEN2 => split_qwen2,
        QWEN35 => split_qwen35,
        KIMI_K2_MARKER => split_kimi_k2,
        AFMOE_DIGITS | TINY_AYA_DIGITS => split_digit_groups,
        NEWLINE_RUNS => split_newline_runs,
        _ => return None,
    })
}

pub(super) struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    pub fn new(exprs: &[&str]) -> Result<Self, TokenizerError> {
        let steps = exprs
            .iter()
            .map(|&expr| {
                if let Some(split) = by_hand(expr) {
                    return Ok(Step::ByHand(split));
                }
                let collapsed = CATEGORY_NAMES.iter().any(|(n, _)| expr.contains(n));
                let re = Regex::new(&engine_pattern(expr, collapsed)).map_err(|e| {
                    TokenizerError::Regex {
                        pattern: expr.to_string(),
                        message: e.to_string(),
                    }
                })?;
                Ok(Step::Regex { re, collapsed })
            })
            .collect::<Result<_, TokenizerError>>()?;
        Ok(Self { steps })
    }

    /// Splits `text` into words: byte ranges covering it, in order.
    pub fn split(&self, text: &str) -> Vec<Range<usize>> {
        let cpts: Vec<char> = text.chars().collect();
        // Piece lengths in code points; the whole text to start with.
        let mut lens = if cpts.is_empty() {
            Vec::new()
        } else {
            vec![cpts.len()]
        };
        let (mut collapsed_view, mut wide_view) = (None, None);
        for step in &self.steps {
            lens = match step {
                Step::ByHand(split) => split(&cpts, &lens),
                Step::Regex { re, collapsed } => {
                    let view = if *collapsed {
                        collapsed_view.get_or_insert_with(|| View::collapsed(&cpts))
                    } else {
                        wide_view.get_or_insert_with(|| View::wide(&cpts))
                    };
                    view.split(re, &lens)
                }
            };
        }

        let mut words = Vec::with_capacity(lens.len());
        let (mut chars, mut byte) = (text.chars(), 0);
        for len in lens {
            let start = byte;
            byte += chars.by_ref().take(len).map(char::len_utf8).sum::<usize>();
            words.push(start..byte);
        }
        words
    }
}

/// `\p{..}` names llama.cpp collapses, and the category each stands for.
const CATEGORY_NAMES: &[(&str, Category)] = &[
    (r"\p{N}", Category::Number),
    (r"\p{L}", Category::Letter),
    (r"\p{P}", Category::Punctuation),
    (r"\p{M}", Category::Mark),
    (r"\p{S}", Category::Symbol),
    (r"\p{Lu}", Category::Letter),
    (r"\p{Ll}", Category::Letter),
    (r"\p{Lt}", Category::Letter),
    (r"\p{Lm}", Category::Letter),
    (r"\p{Lo}", Category::Letter),
];

/// The stand-in for a non-ASCII code point of a category in the collapsed
/// text, and, as regex class items, the ASCII code points of that category
/// (llama.cpp's lists).
fn stand_in(cat: Category) -> (char, &'static str) {
    match cat {
        Category::Number => ('\u{D1}', "0-9"),
        Category::Letter => ('\u{D2}', "A-Za-z"),
        Category::Punctuation => ('\u{D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        Category::Mark => ('\u{D4}', ""),
        Category::Symbol => ('\u{D5}', r"\$\+<->\^`\|\x7E"),
        _ => ('\u{D0}', ""),
    }
}

/// The regex as the engine must see it: `\d` as ECMAScript's `[0-9]` and,
/// when `collapsed`, each `\p{X}` as a class of X's stand-in and X's ASCII
/// members.
fn engine_pattern(expr: &str, collapsed: bool) -> String {
    let mut out = String::with_capacity(expr.len() * 2);
    let mut inside_class = false;
    let mut rest = expr;
    let bracketed = |items: &str, inside: bool| {
        if inside {
            items.to_string()
        } else {
            format!("[{items}]")
        }
    };
    while let Some(c) = rest.chars().next() {
        if c == '\\' {
            let category = CATEGORY_NAMES
                .iter()
                .find(|(n, _)| collapsed && rest.starts_with(n));
            if let Some(&(name, cat)) = category {
                let (ch, ascii) = stand_in(cat);
                out.push_str(&bracketed(
                    &format!(r"\x{{{:X}}}{ascii}", ch as u32),
                    inside_class,
                ));
                rest = &rest[name.len()..];
                continue;
            }
            // An escape pair is copied whole, so `\[` opens no class.
            let next = rest[1..].chars().next();
            match next {
                Some('d') => out.push_str(&bracketed("0-9", inside_class)),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            }
            rest = &rest[1 + next.map_or(0, char::len_utf8)..];
            continue;
        }
        if c == '[' {
            inside_class = true;
        } else if c == ']' {
            inside_class = false;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The text as a regex step sees it, with the byte offset of every code
/// point (n + 1 entries) to turn matches back into code point counts.
struct View {
    text: String,
    offsets: Vec<usize>,
}

impl View {
    fn from_chars(chars: impl Iterator<Item = char>) -> Self {
        let mut text = String::new();
        let mut offsets = Vec::new();
        for c in chars {
            offsets.push(text.len());
            text.push(c);
        }
        offsets.push(text.len());
        View { text, offsets }
    }

    /// Non-ASCII code points replaced by their category's stand-in, or by
    /// U+000B if whitespace.
    fn collapsed(cpts: &[char]) -> Self {
        Self::from_chars(cpts.iter().map(|&c| {
            if c.is_ascii() {
                return c;
            }
            let f = flags(c);
            if f.whitespace {
                '\u{0B}'
            } else {
                stand_in(f.category).0
            }
        }))
    }

    /// Non-ASCII whitespace replaced by U+000B, as llama.cpp does for
    /// std::wregex, whose `\s` is ASCII-only.
    fn wide(cpts: &[char]) -> Self {
        Self::from_chars(cpts.iter().map(|&c| {
            if !c.is_ascii() && flags(c).whitespace {
                '\u{0B}'
            } else {
                c
            }
        }))
    }

    fn cpt_index(&self, byte: usize) -> usize {
        self.offsets.partition_point(|&o| o < byte)
    }

    fn split(&self, re: &Regex, lens: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(lens.len());
        let mut start = 0;
        for &len in lens {
            let end = start + len;
            let base = self.offsets[start];
            let mut done = start;
            for m in re.find_iter(&self.text[base..self.offsets[end]]) {
                // A backtracking limit hit leaves the rest of the piece as
                // one gap rather than failing the whole encode.
                let Ok(m) = m else { break };
                let (ms, me) = (
                    self.cpt_index(base + m.start()),
                    self.cpt_index(base + m.end()),
                );
                if ms > done {
                    out.push(ms - done);
                }
                if me > ms {
                    out.push(me - ms);
                }
                done = me;
            }
            if done < end {
                out.push(end - done);
            }
            start = end;
        }
        out
    }
}
