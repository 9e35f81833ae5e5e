//! The generation loop for one sequence: prefill the prompt, then sample and
//! decode a token at a time until an end-of-generation token, a stop string,
//! the token limit or a full context. Text streams to a callback as it is
//! made.
//!
//! ```text
//! prompt ──decode (chunks of n_batch)──▶ logits ──sample──▶ id ──decode──▶ logits ──▶ …
//!                                                           └──▶ StreamDecoder ──▶ StopMatcher ──▶ on_text
//! ```
//!
//! This is `smelt run`'s loop and any single-prompt caller's. The server
//! batches many sequences with its own scheduler (`server::Scheduler`) over
//! the same session.

use std::time::Instant;

use crate::model::{Batch, ModelError, Session};
use crate::sample::{Sampler, SamplerParams, TokenLogprob, logprobs};
pub use crate::server::FinishReason;
use crate::server::{StopMatcher, StopScan};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate; at least 1.
    pub max_tokens: usize,
    pub sampler: SamplerParams,
    /// Generation ends before the first of these; it is not part of the text.
    pub stop: Vec<String>,
    /// `Some(n)`: record each generated token's log-probability and the
    /// `n` most likely tokens' ([`Generation::logprobs`]).
    pub logprobs: Option<usize>,
}

/// Where the time went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prompt_tokens: usize,
    /// Prefill of the prompt.
    pub prompt_secs: f64,
    /// Tokens sampled after the prompt (an end-of-generation token not
    /// counted).
    pub gen_tokens: usize,
    /// Sampling and decoding after the prefill.
    pub gen_secs: f64,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_secs.max(1e-9)
    }

    /// Generated tokens per second.
    pub fn gen_tps(&self) -> f64 {
        self.gen_tokens as f64 / self.gen_secs.max(1e-9)
    }
}

/// A finished generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated ids (an end-of-generation token not included).
    pub tokens: Vec<u32>,
    /// Exactly the text given to the callback.
    pub text: String,
    /// Per generated token, when asked for: the model's log-probabilities
    /// (see [`crate::sample::logprobs`]).
    pub logprobs: Vec<TokenLogprob>,
    pub finish: FinishReason,
    pub timings: Timings,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "the prompt is {n_prompt} tokens; the context holds {n_ctx} (raise --ctx or shorten the prompt)"
    )]
    PromptTooLong { n_prompt: usize, n_ctx: usize },
    #[error("asked to generate 0 tokens")]
    ZeroTokens,
    #[error("bad sampling settings: {0}")]
    Sampler(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Generates from `prompt` (token ids, BOS included if the model wants it)
/// in slot 0 of `session`, which is cleared first. `on_text` receives each
/// piece of text as it becomes final; returning `false` stops generation
/// (finish reason `Cancelled`).
pub fn generate(
    session: &mut Session,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation, GenerateError> {
    let n_ctx = session.n_ctx();
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    // The last prompt position must leave room to sample one token.
    if prompt.len() > n_ctx {
        return Err(GenerateError::PromptTooLong {
            n_prompt: prompt.len(),
            n_ctx,
        });
    }
    if params.max_tokens == 0 {
        return Err(GenerateError::ZeroTokens);
    }
    params.sampler.validate().map_err(GenerateError::Sampler)?;

    let mut timings = Timings {
        prompt_tokens: prompt.len(),
        ..Timings::default()
    };
    session.truncate(0, 0);
    let start = Instant::now();
    let mut logits = Session::decode(session, &Batch::sequence(prompt, 0, 0))?.to_vec();
    timings.prompt_secs = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut sampler = Sampler::new(params.sampler.clone());
    let mut decoder = StreamDecoder::new(tokenizer);
    let mut stops = StopMatcher::new(&params.stop);
    let mut history = prompt.to_vec();
    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        logprobs: Vec::new(),
        finish: FinishReason::Length,
        timings,
    };
    let mut emit = |out: &mut Generation, text: &str| {
        out.text.push_str(text);
        text.is_empty() || on_text(text)
    };
    let stopped_by_string = loop {
        // The sampler's biases and penalties change the logits in place;
        // log-probabilities are the model's own.
        let raw = params.logprobs.map(|_| logits.clone());
        let id = sampler.sample(&mut logits, &history);
        if tokenizer.is_eog(id) {
            out.finish = FinishReason::Stop;
            break false;
        }
        if let (Some(n), Some(raw)) = (params.logprobs, raw) {
            out.logprobs.push(logprobs(&raw, id, n));
        }
        out.tokens.push(id);
        history.push(id);
        let piece = decoder.push(id);
        match stops.push(&piece) {
            StopScan::Continue(text) => {
                if !emit(&mut out, &text) {
                    out.finish = FinishReason::Cancelled;
                    break true;
                }
            }
            StopScan::Stopped(text) => {
                emit(&mut out, &text);
                out.finish = FinishReason::Stop;
                break true;
            }
        }
        let pos = prompt.len() + out.tokens.len() - 1;
        if out.tokens.len() == params.max_tokens || pos >= n_ctx {
            out.finish = FinishReason::Length;
            break false;
        }
        logits.copy_from_slice(Session::decode(session, &Batch::sequence(&[id], pos, 0))?);
    };
    if !stopped_by_string {
        // Text held back for a character or a possible stop string is final.
        let text = match stops.push(&decoder.finish()) {
            StopScan::Continue(t) => t + &stops.flush(),
            StopScan::Stopped(t) => {
                out.finish = FinishReason::Stop;
                t
            }
        };
        emit(&mut out, &text);
    }
    out.timings.gen_tokens = out.tokens.len();
    out.timings.gen_secs = start.elapsed().as_secs_f64();
    Ok(out)
}
