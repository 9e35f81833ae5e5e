//! Byte-level BPE (`tokenizer.ggml.model = gpt2`), as llama.cpp's
//! `llm_tokenizer_bpe` does it: pre-tokenize into words, spell each word's
//! bytes with GPT-2's byte→unicode map, then merge adjacent symbols in merge
//! rank order until no ranked pair is left.
//!
//! SentencePiece-style BPE (Gemma 4) is the same machinery with spaces
//! written as U+2581 first and words kept in raw UTF-8; a piece no token
//! spells falls back to `<0xXX>` byte tokens instead of one-byte ones.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::TokenizerError;
use super::pretokenize::{PreSpec, PreTokenizer};
use super::unicode::byte_to_char;
use super::vocab::Vocab;
use crate::gguf::{Array, Header};

const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// No neighbour.
const NONE: usize = usize::MAX;

pub(super) struct Bpe {
    pre: PreTokenizer,
    spec: PreSpec,
    /// Merge rank by (left, right) symbol id. A symbol id is a token id, or
    /// for a merge part that is no token, an id from `extra_symbols`.
    ranks: HashMap<(u32, u32), u32>,
    /// Merge parts that are not tokens, numbered from n_vocab.
    extra_symbols: HashMap<String, u32>,
}

impl Bpe {
    /// Reads `tokenizer.ggml.merges` ("left right", rank = position) and
    /// compiles the pre-tokenizer.
    pub fn from_gguf(h: &Header, vocab: &Vocab, spec: &PreSpec) -> Result<Self, TokenizerError> {
        let merges = match h.get_array(KEY_MERGES)? {
            Array::String(v) => v,
            other => {
                return Err(TokenizerError::ArrayType {
                    key: KEY_MERGES,
                    found: other.element_type().name(),
                    expected: "strings",
                });
            }
        };
        let mut bpe = Bpe {
            pre: PreTokenizer::new(spec.exprs)?,
            spec: *spec,
            ranks: HashMap::with_capacity(merges.len()),
            extra_symbols: HashMap::new(),
        };
        for (rank, merge) in merges.iter().enumerate() {
            // Split at the first space after the first byte, as llama.cpp
            // does; a merge without one can never apply.
            let Some(sp) = merge.bytes().skip(1).position(|b| b == b' ').map(|i| i + 1) else {
                continue;
            };
            let left = bpe.intern(vocab, &merge[..sp]);
            let right = bpe.intern(vocab, &merge[sp + 1..]);
            // The first rank of a pair listed twice wins.
            bpe.ranks.entry((left, right)).or_insert(rank as u32);
        }
        Ok(bpe)
    }

    fn intern(&mut self, vocab: &Vocab, s: &str) -> u32 {
        if let Some(id) = vocab.id(s) {
            return id;
        }
        let next = (vocab.n_vocab() + self.extra_symbols.len()) as u32;
        *self.extra_symbols.entry(s.to_string()).or_insert(next)
    }

    fn symbol_id(&self, vocab: &Vocab, s: &str) -> Option<u32> {
        vocab.id(s).or_else(|| self.extra_symbols.get(s).copied())
    }

    /// Tokenizes one fragment of raw text.
    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let escaped;
        let text = if self.spec.escape_whitespaces {
            escaped = text.replace(' ', "\u{2581}");
            &escaped
        } else {
            text
        };
        for range in self.pre.split(text) {
            if self.spec.byte_encode {
                let word: String = text.as_bytes()[range]
                    .iter()
                    .map(|&b| byte_to_char(b))
                    .collect();
                self.tokenize_word(vocab, &word, out);
            } else {
                self.tokenize_word(vocab, &text[range], out);
            }
        }
    }

    fn tokenize_word(&self, vocab: &Vocab, word: &str, out: &mut Vec<u32>) {
        // Gemma 4 takes a run of newlines whole when it is a token, as
        // llama.cpp does (merges alone would not reach every such token).
        let whole = vocab.ignore_merges
            || (self.spec.newline_words_whole && word.bytes().all(|b| b == b'\n'));
        if whole && let Some(id) = vocab.id(word) {
            out.push(id);
            return;
        }

        let n = word.chars().count();
        let mut symbols: Vec<Symbol> = word
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol {
                start,
                len: c.len_utf8(),
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                id: self.symbol_id(vocab, &word[start..start + c.len_utf8()]),
            })
            .collect();

        let mut queue = BinaryHeap::new();
        let try_add =
            |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
                if left == NONE || right == NONE {
                    return;
                }
                let (l, r) = (&symbols[left], &symbols[right]);
                let rank = l.id.zip(r.id).and_then(|pair| self.ranks.get(&pair));
                if let Some(&rank) = rank {
                    queue.push(Bigram {
                        rank,
                        left,
                        right,
                        size: l.len + r.len,
                    });
                }
            };
        for i in 1..symbols.len() {
            try_add(&symbols, &mut queue, i - 1, i);
        }

        while let Some(b) = queue.pop() {
            let (l, r) = (&symbols[b.left], &symbols[b.right]);
            // Symbols only grow rightwards from fixed starts, so the pair is
            // still the one queued exactly when its length is unchanged.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            let (start, right_next) = (l.start, r.next);
            symbols[b.left].len = b.size;
            symbols[b.left].next = right_next;
            symbols[b.left].id = self.symbol_id(vocab, &word[start..start + b.size]);
            symbols[b.right].len = 0;
            if right_next != NONE {
                symbols[right_next].prev = b.left;
            }
            let left_prev = symbols[b.left].prev;
            try_add(&symbols, &mut queue, left_prev, b.left);
            try_add(&symbols, &mut queue, b.left, right_next);
        }

        for s in symbols.iter().filter(|s| s.len > 0) {
            let piece = &word[s.start..s.start + s.len];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => self.byte_fallback(vocab, piece, out),
            }
        }
    }

    /// A piece no token spells, byte by byte: byte-level BPE looks each
    /// byte up as a one-byte token, which only ASCII bytes can be;
    /// SentencePiece-style BPE as its `<0xXX>` token. Bytes without a
    /// token are dropped, as in llama.cpp.
    fn byte_fallback(&self, vocab: &Vocab, piece: &str, out: &mut Vec<u32>) {
        for b in piece.bytes() {
            let id = if self.spec.byte_encode {
                b.is_ascii()
                    .then(|| vocab.id((b as char).encode_utf8(&mut [0; 4])))
                    .flatten()
            } else {
                vocab.id(&format!("<0x{b:02X}>"))
            };
            out.extend(id);
        }
    }
}

/// A span of the word, linked to its neighbours; empty once merged away.
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
    /// Symbol id of the span's text, if it takes part in any merge.
    id: Option<u32>,
}

/// A candidate merge of two adjacent symbols (`size` bytes together).
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    size: usize,
}

/// Lowest rank first; among equal ranks, the leftmost.
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}
