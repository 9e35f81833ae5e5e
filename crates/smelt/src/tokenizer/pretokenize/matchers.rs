//! The splitters llama.cpp writes by hand instead of running a regex
//! (`unicode_regex_split_custom_*`): GPT-2's and Llama 3's regexes, Kimi
//! K2's (Han runs apart from other letters), AFMoE's digit groups, and runs
//! of newlines. Each takes the pieces so far (lengths in code points) and
//! cuts every piece on its own.

use super::super::unicode::{Category, Flags, flags};

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
pub(super) fn split_gpt2(cpts: &[char], lens: &[usize]) -> Vec<usize> {
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

impl Piece<'_> {
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: the length matched, 0 if
    /// none. Only ASCII letters fold to these.
    fn contraction_len(&self, pos: usize) -> usize {
        if self.cpt(pos) != Some('\'') {
            return 0;
        }
        let lower = |at| self.cpt(at).map(|c: char| c.to_ascii_lowercase());
        match (lower(pos + 1), lower(pos + 2)) {
            (Some('s' | 't' | 'm' | 'd'), _) => 2,
            (Some('r' | 'v'), Some('e')) | (Some('l'), Some('l')) => 3,
            _ => 0,
        }
    }

    /// ` ?[^\s\p{L}\p{N}]+[\r\n]*` at `pos`, if it starts there: its end,
    /// where `in_words` says which code points count as `\p{L}`. A lone
    /// space at the end of the piece matches too (llama.cpp tests the class
    /// on the code point after the space, which is none) and becomes its
    /// own word.
    fn symbols_end(&self, pos: usize, in_words: fn(Flags) -> bool) -> Option<usize> {
        let symbol = |f: Flags| !(f.whitespace || in_words(f) || f.is_number());
        let c = self.cpts[pos];
        let mut pos = pos;
        let mut f = if c == ' ' {
            self.flags(pos + 1)
        } else {
            self.flags(pos)
        };
        if f.is_some_and(|f| !symbol(f)) {
            return None;
        }
        pos += usize::from(c == ' ');
        while f.is_some_and(symbol) {
            pos += 1;
            f = self.flags(pos);
        }
        while matches!(self.cpt(pos), Some('\r' | '\n')) {
            pos += 1;
        }
        Some(pos)
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`, or else the one code point
    /// there: where the word ends.
    fn whitespace_end(&self, pos: usize) -> usize {
        let mut n_ws = 0;
        let mut last_newline_end = None;
        while is_whitespace(self.flags(pos + n_ws)) {
            if matches!(self.cpts[pos + n_ws], '\r' | '\n') {
                last_newline_end = Some(pos + n_ws + 1);
            }
            n_ws += 1;
        }
        if let Some(e) = last_newline_end {
            e
        } else if n_ws > 1 && self.cpt(pos + n_ws).is_some() {
            // \s+(?!\S): leave the last whitespace to prefix the next word.
            pos + n_ws - 1
        } else {
            pos + n_ws.max(1)
        }
    }

    /// `\p{N}{1,n}` repeated from `pos`: ends a word every `n` digits.
    fn number_groups_to(&mut self, mut pos: usize, n: usize) -> usize {
        let mut ini = pos;
        while is_number(self.flags(pos)) {
            pos += 1;
            if pos - ini >= n {
                self.word_to(pos);
                ini = pos;
            }
        }
        self.word_to(pos);
        pos
    }
}

/// What tells the regexes of the Llama 3 family apart.
struct WordRules {
    /// Digits per number word: `\p{N}{1,3}` or `\p{N}`.
    digits: usize,
    /// What letter runs hold: `\p{L}`, or `[\p{L}\p{M}]` (Qwen 3.5), which
    /// symbol runs then leave out.
    in_words: fn(Flags) -> bool,
}

/// Llama 3's regex (see [`LLAMA3`](super::regexes::LLAMA3)).
pub(super) fn split_llama3(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    split_llama3_family(
        cpts,
        lens,
        &WordRules {
            digits: 3,
            in_words: Flags::is_letter,
        },
    )
}

/// Qwen 2's: Llama 3's with single digits.
pub(super) fn split_qwen2(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    split_llama3_family(
        cpts,
        lens,
        &WordRules {
            digits: 1,
            in_words: Flags::is_letter,
        },
    )
}

/// Qwen 3.5's: Qwen 2's with combining marks in letter runs.
pub(super) fn split_qwen35(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    split_llama3_family(
        cpts,
        lens,
        &WordRules {
            digits: 1,
            in_words: |f| f.is_letter() || f.category == Category::Mark,
        },
    )
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?W+|\p{N}{1,d}|
/// ?[^\s W \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, where W is what
/// letter runs hold and d the digits per word.
fn split_llama3_family(cpts: &[char], lens: &[usize], rules: &WordRules) -> Vec<usize> {
    let in_words = rules.in_words;
    let word_at = |p: &Piece, at| p.flags(at).is_some_and(in_words);
    for_each_piece(cpts, lens, |p, mut pos| {
        while pos < p.end {
            let c = cpts[pos];
            let f = flags(c);

            let contraction = p.contraction_len(pos);
            if contraction > 0 {
                pos += contraction;
                p.word_to(pos);
                continue;
            }

            // [^\r\n\p{L}\p{N}]?W+
            if !(c == '\r' || c == '\n' || f.is_number()) && (in_words(f) || word_at(p, pos + 1)) {
                pos += 1;
                while word_at(p, pos) {
                    pos += 1;
                }
                p.word_to(pos);
                continue;
            }

            if f.is_number() {
                pos = p.number_groups_to(pos, rules.digits);
                continue;
            }

            pos = p
                .symbols_end(pos, in_words)
                .unwrap_or_else(|| p.whitespace_end(pos));
            p.word_to(pos);
        }
    })
}

/// llama.cpp's `unicode_cpt_is_han`: the CJK ideograph blocks.
fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2EBEF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F)
}

/// Kimi K2's regex as llama.cpp matches it: `\p{Han}+`, then Llama 3's
/// rules where a letter run holds letters other than Han (of any case; no
/// marks) and may end in a contraction.
pub(super) fn split_kimi_k2(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    for_each_piece(cpts, lens, |p, mut pos| {
        let non_han_letter = |p: &Piece, at| {
            p.cpt(at)
                .is_some_and(|c| !is_han(c) && flags(c).is_letter())
        };
        while pos < p.end {
            let c = cpts[pos];
            let f = flags(c);

            if is_han(c) {
                while p.cpt(pos).is_some_and(is_han) {
                    pos += 1;
                }
                p.word_to(pos);
                continue;
            }

            // [^\r\n\p{L}\p{N}]?[\p{L}--\p{Han}]+ then an optional contraction.
            let may_lead = !(c == '\r' || c == '\n' || f.is_letter() || f.is_number());
            if non_han_letter(p, pos) || (may_lead && non_han_letter(p, pos + 1)) {
                pos += usize::from(may_lead);
                while non_han_letter(p, pos) {
                    pos += 1;
                }
                pos += p.contraction_len(pos);
                p.word_to(pos);
                continue;
            }

            if f.is_number() {
                pos = p.number_groups_to(pos, 3);
                continue;
            }

            pos = p
                .symbols_end(pos, Flags::is_letter)
                .unwrap_or_else(|| p.whitespace_end(pos));
            p.word_to(pos);
        }
    })
}

/// AFMoE's digit runs (also what llama.cpp runs for Tiny Aya's
/// `\d{1,3}(?=(?:\d{3})*\b)`): each run of `\p{N}` cut into threes from
/// the right, the remainder first. What precedes a run since the last cut
/// stays in one piece with the run's first group, as llama.cpp's matcher
/// leaves it; the text after the last run is one piece.
pub(super) fn split_digit_groups(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    for_each_piece(cpts, lens, |p, mut pos| {
        while pos < p.end {
            if !is_number(p.flags(pos)) {
                pos += 1;
                continue;
            }
            let run_start = pos;
            while is_number(p.flags(pos)) {
                pos += 1;
            }
            let remainder = (pos - run_start) % 3;
            if remainder > 0 {
                p.word_to(run_start + remainder);
            }
            for group_end in (run_start + remainder + 3..=pos).step_by(3) {
                p.word_to(group_end);
            }
        }
        p.word_to(p.end);
    })
}

/// `[^\n]+|[\n]+`: runs of newlines and runs of everything else.
pub(super) fn split_newline_runs(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    for_each_piece(cpts, lens, |p, mut pos| {
        while pos < p.end {
            let newline = cpts[pos] == '\n';
            while p.cpt(pos).is_some_and(|c| (c == '\n') == newline) {
                pos += 1;
            }
            p.word_to(pos);
        }
    })
}
