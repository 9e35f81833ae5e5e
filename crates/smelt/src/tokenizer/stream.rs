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
    /// Bytes of a character not yet complete.
    pending: Vec<u8>,
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
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text it completes (maybe empty). Bytes
    /// that can never become valid UTF-8 come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.tokenizer.piece(id, self.special);
        self.pending.extend_from_slice(&piece);

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
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[done..done + valid]));
                    done += valid;
                    match e.error_len() {
                        // Invalid whatever follows: replace it, go on.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            done += n;
                        }
                        // A character cut short at the end: keep it.
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..done);
        out
    }

    /// Ends the stream: bytes still pending come out as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
