//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`), as llama.cpp's
//! `llm_tokenizer_spm` does it: start from single characters and keep merging
//! the adjacent pair whose concatenation is the highest-scoring token; what
//! is left that is not a token falls back to byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// No neighbour.
const NONE: usize = usize::MAX;

/// A span of the text, linked to its neighbours; empty once merged away.
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A candidate merge of two adjacent symbols into the token `left + right`
/// (`size` bytes), scored by that token.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// Highest score first; among equal scores, the leftmost.
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
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

/// Tokenizes one fragment whose spaces are already escaped as U+2581.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let n = text.chars().count();
    let mut symbols: Vec<Symbol> = text
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: if i == 0 { NONE } else { i - 1 },
            next: if i + 1 == n { NONE } else { i + 1 },
        })
        .collect();

    let mut queue = BinaryHeap::new();
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (&symbols[left], &symbols[right]);
            let size = l.len + r.len;
            if let Some(id) = vocab.id(&text[l.start..l.start + size]) {
                queue.push(Bigram {
                    score: vocab.tokens[id as usize].score,
                    left,
                    right,
                    size,
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (&symbols[b.left], &symbols[b.right]);
        // A side that has merged since the bigram was queued makes it stale.
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        let right_next = r.next;
        symbols[b.left].len = b.size;
        symbols[b.left].next = right_next;
        symbols[b.right].len = 0;
        if right_next != NONE {
            symbols[right_next].prev = b.left;
        }
        let left_prev = symbols[b.left].prev;
        try_add(&symbols, &mut queue, left_prev, b.left);
        try_add(&symbols, &mut queue, b.left, right_next);
    }

    // Every merged symbol is a token (only token-forming pairs are queued),
    // so what is not a token is a single character: spell it in bytes.
    // (llama.cpp's `resegment` keeps a reverse-merge map for the other case,
    // which cannot arise.)
    let mut i = if symbols.is_empty() { NONE } else { 0 };
    while i != NONE {
        let s = &symbols[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    // llama.cpp throws when a byte has no token; we fall back
                    // to the unknown token, or drop the byte if there is none.
                    if let Some(id) = vocab.byte_tokens[b as usize].or(vocab.special.ids.unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
