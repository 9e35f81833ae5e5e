//! Byte-level BPE pre-tokenizers: the regex lists `tokenizer.ggml.pre` names,
//! applied the way llama.cpp's `unicode_regex_split` applies them.
//!
//! Each regex of a list splits every piece the previous ones left into
//! matches and the gaps between them (gaps are kept as pieces too). A regex
//! sees only its piece: a lookahead stops at the piece's end.
//!
//! llama.cpp runs the two commonest regexes (GPT-2's and Llama 3's) through
//! hand-written matchers; we do too, with the same code-point classes. The
//! others run through a regex engine: those naming `\p{..}` categories on a
//! "collapsed" copy of the text where each non-ASCII code point becomes a
//! stand-in for its category (so `\p{L}` means llama.cpp's letters, not the
//! regex engine's), the rest on the text with non-ASCII whitespace turned
//! into U+000B.

use std::ops::Range;

use fancy_regex::Regex;

use super::TokenizerError;
use super::unicode::{Category, Flags, flags};

/// GPT-2's regex.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex, with the case-insensitive group spelled out.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's as written in tokenizer.json; llama.cpp matches it the same way.
const LLAMA3_ORIGINAL: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Han, Samaritan to CJK, and Hangul runs (DeepSeek).
const DEEPSEEK_CJK: &str = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+";
/// DeepSeek LLM's cased letters (Lu, Ll, Lt of an older Unicode), as code
/// points: the published regex holds characters that Unicode normalisation
/// would silently change (U+2126 OHM SIGN, U+212A KELVIN SIGN, ...).
const DEEPSEEK_LETTERS: &str = concat!(
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}",
    r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}",
    r"\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}",
    r"\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}",
    r"\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}",
    r"\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}",
    r"\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}",
    r"\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}",
    r"\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}",
    r"\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}",
    r"\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}",
    r"\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}",
    r"\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}",
    r"\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}",
    r"\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}",
    r"\x{1E900}-\x{1E943}]+",
);
/// ASCII and full-width punctuation, curly quotes, 、。 (DeepSeek LLM).
const DEEPSEEK_PUNCT: &str =
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+";

// The regex lists, named after llama.cpp's LLAMA_VOCAB_PRE_TYPE_*.
const DEFAULT_EXPRS: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
const GPT2_EXPRS: &[&str] = &[GPT2];
const LLAMA3_EXPRS: &[&str] = &[LLAMA3];
const QWEN2_EXPRS: &[&str] = &[QWEN2];
const STARCODER_EXPRS: &[&str] = &[r"\p{N}", GPT2];
const FALCON_EXPRS: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"];
const DEEPSEEK_LLM_EXPRS: &[&str] = &[
    "[\r\n]",
    DEEPSEEK_LETTERS,
    DEEPSEEK_PUNCT,
    r"\s+$",
    DEEPSEEK_CJK,
    r"\p{N}+",
];
const DEEPSEEK_CODER_EXPRS: &[&str] =
    &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"];

/// What a `tokenizer.ggml.pre` name sets.
#[derive(Clone, Copy, Debug)]
pub(super) struct PreSpec {
    pub exprs: &'static [&'static str],
    pub clean_spaces: bool,
    pub ignore_merges: bool,
    pub add_bos: bool,
}

const fn plain(exprs: &'static [&'static str], clean_spaces: bool) -> PreSpec {
    PreSpec {
        exprs,
        clean_spaces,
        ignore_merges: false,
        add_bos: false,
    }
}

/// The `tokenizer.ggml.pre` names llama.cpp knows whose regexes we run, and
/// what each sets. Missing (empty) is llama.cpp's "default".
const PRE_TOKENIZERS: &[(&[&str], PreSpec)] = &[
    (&["", "default"], plain(DEFAULT_EXPRS, true)),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        PreSpec {
            exprs: LLAMA3_EXPRS,
            clean_spaces: true,
            ignore_merges: true,
            add_bos: true,
        },
    ),
    (&["dbrx", "smaug-bpe"], plain(LLAMA3_EXPRS, true)),
    (&["deepseek-llm"], plain(DEEPSEEK_LLM_EXPRS, false)),
    (&["deepseek-coder"], plain(DEEPSEEK_CODER_EXPRS, false)),
    (&["falcon"], plain(FALCON_EXPRS, true)),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
        ],
        plain(GPT2_EXPRS, true),
    ),
    (&["trillion", "granite-docling"], plain(GPT2_EXPRS, false)),
    (
        &["starcoder", "refact", "exaone", "minerva-7b", "mellum2"],
        plain(STARCODER_EXPRS, true),
    ),
    (
        &["smollm", "command-r", "codeshell"],
        plain(STARCODER_EXPRS, false),
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "hunyuan",
            "solar-open",
        ],
        plain(QWEN2_EXPRS, false),
    ),
    (&["stablelm2", "megrez"], plain(QWEN2_EXPRS, true)),
];

/// What a pre-tokenizer name sets; `None` for names we do not run.
pub(super) fn spec(name: &str) -> Option<PreSpec> {
    PRE_TOKENIZERS
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, spec)| spec)
}

/// Every name [`spec`] knows, for error messages.
pub(super) fn known_names() -> String {
    let names: Vec<&str> = PRE_TOKENIZERS
        .iter()
        .flat_map(|(names, _)| names.iter().copied())
        .filter(|n| !n.is_empty())
        .collect();
    names.join(", ")
}

/// One regex of a list, compiled.
enum Step {
    /// GPT-2's regex, matched by hand.
    Gpt2,
    /// Llama 3's regex, matched by hand.
    Llama3,
    /// Any other regex; `collapsed` when it names categories and so runs on
    /// the collapsed text.
    Regex { re: Regex, collapsed: bool },
}

pub(super) struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    pub fn new(exprs: &[&str]) -> Result<Self, TokenizerError> {
        let steps = exprs
            .iter()
            .map(|&expr| {
                Ok(match expr {
                    GPT2 => Step::Gpt2,
                    LLAMA3 | LLAMA3_ORIGINAL => Step::Llama3,
                    _ => {
                        let collapsed = CATEGORY_NAMES.iter().any(|(n, _)| expr.contains(n));
                        let pattern = if collapsed {
                            collapse_regex(expr)
                        } else {
                            expr.to_string()
                        };
                        let re = Regex::new(&pattern).map_err(|e| TokenizerError::Regex {
                            pattern: expr.to_string(),
                            message: e.to_string(),
                        })?;
                        Step::Regex { re, collapsed }
                    }
                })
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
                Step::Gpt2 => split_gpt2(&cpts, &lens),
                Step::Llama3 => split_llama3(&cpts, &lens),
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
/// text, and, as regex class items, the ASCII code points of that category.
/// ASCII `~` is a symbol but llama.cpp's list leaves it out; so do we.
fn stand_in(cat: Category) -> (char, &'static str) {
    match cat {
        Category::Number => ('\u{D1}', "0-9"),
        Category::Letter => ('\u{D2}', "A-Za-z"),
        Category::Punctuation => ('\u{D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        Category::Mark => ('\u{D4}', ""),
        Category::Symbol => ('\u{D5}', r"\$\+<->\^`\|"),
        _ => ('\u{D0}', ""),
    }
}

/// Rewrites `\p{X}` as a class of X's stand-in and X's ASCII members.
fn collapse_regex(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len() * 2);
    let mut inside_class = false;
    let mut prev = None;
    let mut rest = expr;
    while let Some(c) = rest.chars().next() {
        if c == '[' && prev != Some('\\') {
            inside_class = true;
        } else if c == ']' && inside_class && prev != Some('\\') {
            inside_class = false;
        } else if let Some(&(name, cat)) = CATEGORY_NAMES.iter().find(|(n, _)| rest.starts_with(n))
        {
            let (ch, ascii) = stand_in(cat);
            let items = format!(r"\x{{{:X}}}{ascii}", ch as u32);
            if inside_class {
                out.push_str(&items);
            } else {
                out.push_str(&format!("[{items}]"));
            }
            rest = &rest[name.len()..];
            prev = Some('}');
            continue;
        }
        out.push(c);
        prev = Some(c);
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

/// One piece of the text during a hand-written split: its code points
/// `[ini, end)` and the words found so far.
struct Piece<'a> {
    cpts: &'a [char],
    end: usize,
    prev_end: usize,
    out: &'a mut Vec<usize>,
}

impl Piece<'_> {
    fn cpt(&self, pos: usize) -> Option<char> {
        (pos < self.end).then(|| self.cpts[pos])
    }

    fn flags(&self, pos: usize) -> Option<Flags> {
        self.cpt(pos).map(flags)
    }

    /// Ends a word at `end` (if it is not empty).
    fn word_to(&mut self, end: usize) {
        if end > self.prev_end {
            self.out.push(end - self.prev_end);
        }
        self.prev_end = end;
    }
}

fn is_letter(f: Option<Flags>) -> bool {
    f.is_some_and(Flags::is_letter)
}

fn is_number(f: Option<Flags>) -> bool {
    f.is_some_and(Flags::is_number)
}

fn is_whitespace(f: Option<Flags>) -> bool {
    f.is_some_and(|f| f.whitespace)
}

/// `[^\s\p{L}\p{N}]`: inside the piece and none of the three.
fn is_other(f: Option<Flags>) -> bool {
    f.is_some_and(|f| !(f.whitespace || f.is_letter() || f.is_number()))
}

fn for_each_piece(
    cpts: &[char],
    lens: &[usize],
    mut f: impl FnMut(&mut Piece, usize),
) -> Vec<usize> {
    let mut out = Vec::with_capacity(lens.len());
    let mut start = 0;
    for &len in lens {
        let mut piece = Piece {
            cpts,
            end: start + len,
            prev_end: start,
            out: &mut out,
        };
        f(&mut piece, start);
        start += len;
    }
    out
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
/// with any whitespace left over as its own word.
fn split_gpt2(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    for_each_piece(cpts, lens, |p, mut pos| {
        while pos < p.end {
            let c = cpts[pos];
            if c == '\'' && pos + 1 < p.end {
                let c1 = cpts[pos + 1];
                if matches!(c1, 's' | 't' | 'm' | 'd') {
                    pos += 2;
                    p.word_to(pos);
                    continue;
                }
                if pos + 2 < p.end && matches!((c1, cpts[pos + 2]), ('r' | 'v', 'e') | ('l', 'l')) {
                    pos += 3;
                    p.word_to(pos);
                    continue;
                }
            }

            // An optional leading space, then a run of one class.
            let mut f2 = if c == ' ' {
                p.flags(pos + 1)
            } else {
                p.flags(pos)
            };
            let run: Option<fn(Option<Flags>) -> bool> = if is_letter(f2) {
                Some(is_letter)
            } else if is_number(f2) {
                Some(is_number)
            } else if is_other(f2) {
                Some(is_other)
            } else {
                None
            };
            if let Some(in_run) = run {
                pos += usize::from(c == ' ');
                while in_run(f2) {
                    pos += 1;
                    f2 = p.flags(pos);
                }
                p.word_to(pos);
                continue;
            }

            let mut n_ws = 0;
            while is_whitespace(p.flags(pos + n_ws)) {
                n_ws += 1;
            }
            if n_ws > 1 && p.cpt(pos + n_ws).is_some() {
                // \s+(?!\S): leave the last whitespace to prefix the next word.
                pos += n_ws - 1;
            } else if n_ws > 0 {
                pos += n_ws;
            } else {
                pos += 1;
            }
            p.word_to(pos);
        }
    })
}

/// Llama 3's regex (see [`LLAMA3`]).
fn split_llama3(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    for_each_piece(cpts, lens, |p, mut pos| {
        while pos < p.end {
            let c = cpts[pos];
            let f = flags(c);

            // (?i:'s|'t|'re|'ve|'m|'ll|'d): only ASCII letters fold to these.
            if c == '\'' && pos + 1 < p.end {
                let c1 = cpts[pos + 1].to_ascii_lowercase();
                if matches!(c1, 's' | 't' | 'm' | 'd') {
                    pos += 2;
                    p.word_to(pos);
                    continue;
                }
                if pos + 2 < p.end {
                    let c2 = cpts[pos + 2].to_ascii_lowercase();
                    if matches!((c1, c2), ('r' | 'v', 'e') | ('l', 'l')) {
                        pos += 3;
                        p.word_to(pos);
                        continue;
                    }
                }
            }

            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(c == '\r' || c == '\n' || f.is_number())
                && (f.is_letter() || is_letter(p.flags(pos + 1)))
            {
                pos += 1;
                while is_letter(p.flags(pos)) {
                    pos += 1;
                }
                p.word_to(pos);
                continue;
            }

            // \p{N}{1,3}
            if f.is_number() {
                let mut ini = pos;
                while is_number(p.flags(pos)) {
                    pos += 1;
                    if pos - ini >= 3 {
                        p.word_to(pos);
                        ini = pos;
                    }
                }
                p.word_to(pos);
                continue;
            }

            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`. A lone space at the end of the
            // piece enters here too (llama.cpp tests the class on the code
            // point after the space, which is none) and becomes its own word.
            let mut f2 = if c == ' ' { p.flags(pos + 1) } else { Some(f) };
            if f2.is_none_or(|f2| !(f2.whitespace || f2.is_letter() || f2.is_number())) {
                pos += usize::from(c == ' ');
                while is_other(f2) {
                    pos += 1;
                    f2 = p.flags(pos);
                }
                while matches!(p.cpt(pos), Some('\r' | '\n')) {
                    pos += 1;
                }
                p.word_to(pos);
                continue;
            }

            // \s*[\r\n]+ | \s+(?!\S) | \s+
            let mut n_ws = 0;
            let mut last_newline_end = None;
            while is_whitespace(p.flags(pos + n_ws)) {
                if matches!(cpts[pos + n_ws], '\r' | '\n') {
                    last_newline_end = Some(pos + n_ws + 1);
                }
                n_ws += 1;
            }
            if let Some(e) = last_newline_end {
                pos = e;
            } else if n_ws > 1 && p.cpt(pos + n_ws).is_some() {
                pos += n_ws - 1;
            } else if n_ws > 0 {
                pos += n_ws;
            } else {
                pos += 1;
            }
            p.word_to(pos);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'a>(pre: &PreTokenizer, text: &'a str) -> Vec<&'a str> {
        pre.split(text).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn every_known_list_compiles() {
        for name in [
            "",
            "llama-bpe",
            "qwen2",
            "deepseek-llm",
            "deepseek-coder",
            "falcon",
        ] {
            let spec = spec(name).unwrap();
            PreTokenizer::new(spec.exprs).unwrap();
        }
        assert!(spec("no-such-pre").is_none());
    }

    #[test]
    fn collapsed_classes() {
        assert_eq!(collapse_regex(r"\p{N}+"), r"[\x{D1}0-9]+");
        assert_eq!(
            collapse_regex(r"[^\s\p{L}\p{N}]"),
            r"[^\s\x{D2}A-Za-z\x{D1}0-9]"
        );
    }

    /// The hand-written matchers against the regex engine on the collapsed
    /// text, over random strings of awkward characters: llama.cpp takes
    /// them to be the same split.
    #[test]
    fn hand_written_splits_match_the_regexes() {
        use rand::{Rng, SeedableRng};
        let pool: Vec<char> =
            "aZé ß 7٣½'sStTrReEvVmMlLdD\n\r\t \u{A0}\u{3000}\u{85}.,!?-_~$+<>|`\"()[]{}@#\
            \u{301}\u{200D}\u{FE0F}🦙😶🌫中文한국어ـ\u{0378}\u{E000}"
                .chars()
                .collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (expr, split) in [
            (GPT2, split_gpt2 as fn(&[char], &[usize]) -> Vec<usize>),
            (LLAMA3, split_llama3),
        ] {
            let re = Regex::new(&collapse_regex(expr)).unwrap();
            for _ in 0..3000 {
                let len = rng.gen_range(1..24);
                let cpts: Vec<char> = (0..len)
                    .map(|_| pool[rng.gen_range(0..pool.len())])
                    .collect();
                let lens = [cpts.len()];
                let by_hand = split(&cpts, &lens);
                let by_regex = View::collapsed(&cpts).split(&re, &lens);
                let text: String = cpts.iter().collect();
                assert_eq!(by_hand, by_regex, "{expr}: {text:?}");
            }
        }
    }

    #[test]
    fn gpt2_keeps_one_space_for_the_next_word() {
        let pre = PreTokenizer::new(GPT2_EXPRS).unwrap();
        assert_eq!(words(&pre, "a   b  "), ["a", "  ", " b", "  "]);
        assert_eq!(words(&pre, "it's 42!"), ["it", "'s", " 42", "!"]);
    }
}
