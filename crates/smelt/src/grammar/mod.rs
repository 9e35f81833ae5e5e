//! Constrained decoding: at each step, the tokens that cannot continue a
//! grammar are masked out of the logits before sampling, so the output
//! always matches it. Grammars come from a JSON schema (OpenAI's
//! `response_format`), any JSON object, llama.cpp's GBNF ([`gbnf`]) or
//! Lark.
//!
//! The matching is llguidance's: an Earley parser over a lexer, and a
//! trie of the vocabulary's token bytes walked once per step to find the
//! allowed tokens.
//!
//! ```text
//! Grammars::new(tokenizer) ─once─▶ compile(spec) ─per request─▶ Constraint
//!   step: mask(logits) ──▶ sample ──▶ accept(token)
//! ```
//!
//! The mask works on the logits the host reads back, so the CPU and GPU
//! backends are constrained alike.

pub mod gbnf;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{self, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use crate::tokenizer::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    #[error(transparent)]
    Gbnf(#[from] gbnf::GbnfError),
    #[error("the grammar cannot be used: {0}")]
    Compile(String),
    #[error("the vocabulary cannot be matched against grammars: {0}")]
    Vocabulary(String),
}

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON schema (`response_format: {"type": "json_schema"}`).
    JsonSchema(serde_json::Value),
    /// A llama.cpp GBNF grammar (llama-server's `grammar` field).
    Gbnf(String),
    /// llguidance's Lark dialect.
    Lark(String),
}

/// Compiles grammars against one vocabulary; made once per model.
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

/// The vocabulary as llguidance sees it: each token's bytes, control
/// tokens marked as special (`\xff` then their text), and every
/// end-of-generation token an end of sequence.
struct Vocabulary {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        self.tokenizer
            .encode(&String::from_utf8_lossy(s), false, false)
    }
}

impl Grammars {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<Self, GrammarError> {
        let n = tokenizer.n_vocab();
        let eog: Vec<u32> = (0..n as u32).filter(|&id| tokenizer.is_eog(id)).collect();
        let Some(&first_eog) = eog.first() else {
            return Err(GrammarError::Vocabulary(
                "it has no end-of-generation token".into(),
            ));
        };
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let piece = tokenizer.token_to_piece(id);
                if tokenizer.is_control(id) || tokenizer.is_eog(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(&piece);
                    w
                } else {
                    piece
                }
            })
            .collect();
        let mut info = TokRxInfo::new(n as u32, first_eog);
        info.tok_bos = tokenizer.bos();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(Vocabulary { trie, tokenizer });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        Ok(Self {
            factory: Arc::new(factory),
        })
    }

    /// A fresh constraint for one generation.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let grammar = match spec {
            GrammarSpec::JsonObject => json_schema(serde_json::json!({"type": "object"})),
            GrammarSpec::JsonSchema(schema) => json_schema(schema.clone()),
            GrammarSpec::Gbnf(g) => TopLevelGrammar::from_lark(gbnf::to_lark(g)?),
            GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Compile(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Compile(e));
        }
        Ok(Constraint { matcher })
    }
}

/// JSON as compact as the schema allows: no whitespace between tokens,
/// so a sampling model cannot pad its output with newlines until it runs
/// out of tokens.
fn json_schema(mut schema: serde_json::Value) -> TopLevelGrammar {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    TopLevelGrammar::from_json_schema(schema)
}

/// One generation's grammar state.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").finish_non_exhaustive()
    }
}

impl Constraint {
    /// Sets the logits of the tokens that cannot come next to -∞; when
    /// the grammar is complete, only end-of-generation tokens remain.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        if allowed.is_zero() {
            return Err("the grammar allows no token here".into());
        }
        for (id, l) in logits.iter_mut().enumerate() {
            if !allowed.is_allowed(id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances past a sampled token.
    pub fn accept(&mut self, token: u32) -> Result<(), String> {
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }
}
