//! Incremental detokenization for streaming generated text.
//!
//! A character can be split across tokens: byte-fallback tokens carry one
//! byte each, and byte-level BPE tokens can end mid-character. The decoder
//! keeps the bytes of an unfinished character until the token that finishes
//! it arrives, so every string it hands out is whole text.

use super::Tokenizer;

/// Turns token ids, one at a time, into text.
///
/// Each token renders as [`Tokenizer::token_to_piece`] renders it, as
/// llama.cpp's streaming does: no leading-space removal and no clean-up of
/// spaces, which [`Tokenizer::decode`] applies to a whole sequence.
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    special: bool,
    text: Utf8Stream,
}

impl<'a> StreamDecoder<'a> {
    /// Renders control tokens as their text, like `decode`.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Self::with_special(tokenizer, true)
    }

    /// `special = false` renders control and unknown tokens as nothing, as
    /// llama.cpp's server and CLI do by default.
    pub fn with_special(tokenizer: &'a Tokenizer, special: bool) -> Self {
        Self {
            tokenizer,
            special,
            text: Utf8Stream::default(),
        }
    }

    /// Adds one token; returns the text it completes (maybe empty). Bytes
    /// that can never become valid UTF-8 come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.tokenizer.piece(id, self.special);
        self.text.push(&piece)
    }

    /// Ends the stream: bytes still pending come out as U+FFFD.
    pub fn finish(&mut self) -> String {
        self.text.finish()
    }
}

/// Joins token pieces (raw bytes) into text, holding back the bytes of a
/// character that a later token will finish.
#[derive(Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds a token's bytes; returns the text they complete. Bytes that can
    /// never be valid UTF-8 become U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut done = 0;
        loop {
            match std::str::from_utf8(&self.pending[done..]) {
                Ok(s) => {
                    out.push_str(s);
                    done = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = done + e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[done..valid]));
                    done = valid;
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            done += n;
                        }
                        // Cut short at the end: a later token finishes it.
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..done);
        out
    }

    /// Ends the stream; an unfinished character becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_waits_for_whole_characters() {
        let mut s = Utf8Stream::default();
        let bytes = "é✓".as_bytes();
        assert_eq!(s.push(&bytes[..1]), "");
        assert_eq!(s.push(&bytes[1..3]), "é");
        assert_eq!(s.push(&bytes[3..]), "✓");
        assert_eq!(s.push(&[0xff, b'a']), "\u{FFFD}a");
        assert_eq!(s.push(&[0xe2]), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
