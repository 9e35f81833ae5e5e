//! Token ids back to bytes, as llama.cpp's `token_to_piece` and
//! `detokenize` render them.

use std::borrow::Cow;

use super::Tokenizer;
use super::unicode::char_to_byte;
use super::vocab::{Attr, TokenData, VocabType};

impl Tokenizer {
    /// One token's bytes. Control and unknown tokens render as their text
    /// when `special`, else as nothing; user-defined tokens always as their
    /// text. Ids out of range render as nothing.
    pub(super) fn piece(&self, id: u32, special: bool) -> Cow<'_, [u8]> {
        let Some(t) = self.vocab.tokens.get(id as usize) else {
            return Cow::Borrowed(&[]);
        };
        let shown_as_text = Attr::UNKNOWN | Attr::CONTROL;
        if t.attr.any(shown_as_text) && !special {
            return Cow::Borrowed(&[]);
        }
        if t.attr.any(shown_as_text | Attr::USER_DEFINED) {
            return Cow::Borrowed(t.text.as_bytes());
        }
        if t.attr.any(Attr::NORMAL) {
            let escaped = matches!(self.vocab.kind, VocabType::Spm | VocabType::Wpm)
                || self.vocab.escape_whitespaces;
            return if escaped {
                Cow::Owned(t.text.replace('\u{2581}', " ").into_bytes())
            } else {
                Cow::Owned(byte_decode(&t.text))
            };
        }
        if t.attr.any(Attr::BYTE) {
            return Cow::Owned(vec![byte_of_token(t)]);
        }
        // Unused and undefined tokens render as nothing.
        Cow::Borrowed(&[])
    }

    /// llama.cpp's `llama_detokenize`. `remove_special` drops a leading BOS
    /// and a trailing EOS where the model adds them; `unparse_special`
    /// renders control tokens as their text. The first token loses one
    /// leading space where the model adds a space prefix (unless a BOS was
    /// removed before it), and vocabularies that ask for it get Hugging
    /// Face's clean-up of spaces before punctuation.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special
            && v.add_bos
            && let Some((&first, rest)) = ids.split_first()
            && Some(first) == v.special.ids.bos
        {
            remove_space = false;
            ids = rest;
        }
        if remove_special
            && v.add_eos
            && let Some((&last, rest)) = ids.split_last()
            && Some(last) == v.special.ids.eos
        {
            ids = rest;
        }

        let mut text = Vec::new();
        for &id in ids {
            let piece = self.piece(id, unparse_special);
            // Only the first token may lose its space, rendered or not.
            let skip = usize::from(remove_space && piece.first() == Some(&b' '));
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if v.clean_spaces {
            clean_up_spaces(&mut text);
        }
        text
    }
}

/// A byte-level BPE token's bytes, through GPT-2's unicode→byte map. A
/// character outside the map is spelled the way llama.cpp spells it.
fn byte_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The byte a `<0xXX>` token stands for: the hex digits at 3..5, read as far
/// as they go, as C's strtol would.
fn byte_of_token(t: &TokenData) -> u8 {
    let digits = t.text.as_bytes().get(3..).unwrap_or(&[]);
    digits
        .iter()
        .take(2)
        .map_while(|&d| (d as char).to_digit(16))
        .fold(0, |acc, d| (acc << 4) | d as u8)
}

/// llama.cpp's three clean-up passes, over bytes, in place:
/// " ?" " !" " ." " ," lose the space; " ' " becomes "'"; " 's" " 'm" " 're"
/// " 've" lose the space.
fn clean_up_spaces(text: &mut Vec<u8>) {
    // Pass 1.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // Pass 2. The space after the apostrophe is blanked in place, so that a
    // following check no longer sees it as a space.
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // Pass 3.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            let x2 = text.get(i + 2).copied().filter(|_| i + 2 < n);
            let drop_space = matches!(x1, b's' | b'm')
                || (!matches!(x1, b't' | b'd') && matches!((x1, x2), (b'r' | b'v', Some(b'e'))));
            if drop_space {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::clean_up_spaces;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_up_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_up_follows_llama_cpp() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("a ' b"), "a'b");
        assert_eq!(
            clean("it 's I 'm we 're they 've"),
            "it's I'm we're they've"
        );
        assert_eq!(clean("don 't I 'd we 'll"), "don 't I 'd we 'll");
        assert_eq!(clean(" ?"), "?");
    }
}
