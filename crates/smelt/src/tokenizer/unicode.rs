//! Code point classes as llama.cpp's `unicode.cpp` sees them, and GPT-2's
//! byte↔unicode map.
//!
//! Pre-tokenizer regexes speak of `\p{L}`, `\p{N}` and `\s`; llama.cpp answers
//! those from its own tables (Unicode 15.1, one category class per code point,
//! plus the White_Space list), not from a regex engine's. We use the same
//! classes so that a code point new in a later Unicode version splits the
//! same way here as there.

use super::unicode_table::CATEGORY_RUNS;

/// The category classes of llama.cpp's `unicode_cpt_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Category {
    /// Unassigned (Cn).
    Undefined,
    /// \p{N}
    Number,
    /// \p{L}
    Letter,
    /// \p{Z}
    Separator,
    /// \p{M}
    Mark,
    /// \p{P}
    Punctuation,
    /// \p{S}
    Symbol,
    /// Cc, Cf, Co, Cs.
    Control,
}

/// What the pre-tokenizers ask about one code point.
#[derive(Clone, Copy, Debug)]
pub(super) struct Flags {
    pub category: Category,
    pub whitespace: bool,
}

impl Flags {
    pub fn is_letter(self) -> bool {
        self.category == Category::Letter
    }

    pub fn is_number(self) -> bool {
        self.category == Category::Number
    }
}

pub(super) fn flags(c: char) -> Flags {
    Flags {
        category: category(c),
        whitespace: is_whitespace(c),
    }
}

fn category(c: char) -> Category {
    let cp = c as u32;
    // CATEGORY_RUNS starts at 0, so the run holding `cp` is the last one whose
    // start is <= cp, and there always is one.
    let i = CATEGORY_RUNS.partition_point(|&(start, _)| start <= cp);
    CATEGORY_RUNS[i.saturating_sub(1)].1
}

/// Unicode's White_Space property (PropList.txt), which llama.cpp lists as
/// `unicode_set_whitespace`.
fn is_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{09}'..='\u{0D}'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
    )
}

/// GPT-2's `bytes_to_unicode`: every byte gets a printable stand-in, so that
/// byte-level BPE vocabularies are strings. Printable Latin-1 bytes stand
/// for themselves; the other 68 take U+0100 onwards, in byte order.
pub(super) fn byte_to_char(b: u8) -> char {
    BYTE_TO_CHAR[b as usize]
}

/// The inverse of [`byte_to_char`]; `None` for characters no byte maps to.
pub(super) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 {
        // A printable Latin-1 character stands for its own byte.
        let b = cp as u8;
        return (BYTE_TO_CHAR[b as usize] == c).then_some(b);
    }
    CHAR_TO_BYTE_HIGH.get((cp - 0x100) as usize).copied()
}

const fn is_printable_latin1(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

const BYTE_TO_CHAR: [char; 256] = {
    let mut map = ['\0'; 256];
    let mut next = 0x100u32;
    let mut b = 0usize;
    while b < 256 {
        map[b] = if is_printable_latin1(b as u8) {
            b as u8 as char
        } else {
            let c = match char::from_u32(next) {
                Some(c) => c,
                None => panic!("U+0100..U+0144 are characters"),
            };
            next += 1;
            c
        };
        b += 1;
    }
    map
};

/// The bytes stood for by U+0100 onwards, in order (68 of them).
const CHAR_TO_BYTE_HIGH: [u8; 68] = {
    let mut map = [0u8; 68];
    let mut n = 0;
    let mut b = 0usize;
    while b < 256 {
        if !is_printable_latin1(b as u8) {
            map[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    map
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(char_to_byte('▁'), None);
    }

    #[test]
    fn categories_match_unicode() {
        assert_eq!(category('a'), Category::Letter);
        assert_eq!(category('7'), Category::Number);
        assert_eq!(category(' '), Category::Separator);
        assert_eq!(category('\n'), Category::Control);
        assert_eq!(category('~'), Category::Symbol);
        assert_eq!(category('½'), Category::Number);
        assert_eq!(category('\u{0378}'), Category::Undefined);
        assert_eq!(category('\u{10FFFF}'), Category::Undefined);
        // New in Unicode 15.1: llama.cpp's table knows it.
        assert_eq!(category('\u{2FFC}'), Category::Symbol);
        assert!(flags('\u{3000}').whitespace && !flags('\u{1C}').whitespace);
    }
}
