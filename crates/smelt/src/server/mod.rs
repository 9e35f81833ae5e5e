//! Serving many generations from one model at once: a scheduler thread that
//! owns the model session, gives each request a KV-cache slot, and decodes
//! every active sequence in one batched forward pass per step (continuous
//! batching, as llama.cpp's server does). Requests beyond the slots wait in
//! a bounded queue.
//!
//! The HTTP server (`smelt serve`) and the terminal chat (`smelt chat`) both
//! drive this: they submit a [`GenRequest`] with a [`Sink`] that receives
//! the text as it is generated, and learn that a client went away through
//! [`Sink::is_closed`], which cancels the generation and frees its slot.
//!
//! Embedding requests ([`EmbedRequest`]) queue beside them; each takes a
//! free slot between two steps, reads its inputs' hidden states and answers
//! with their pooled vectors.
//!
//! [`Replicas`] puts several copies of the model, each with its own
//! scheduler, behind one front: a request goes to the least loaded.
//!
//! The scheduler sees the model through two small traits, [`Engine`] (a
//! multi-slot session: `decode` a batch of rows, or read its `hidden`
//! states) and [`Vocab`] (end of generation, token bytes).

mod replicas;
mod scheduler;
mod text;

pub use replicas::{ReplicaLoad, Replicas};
pub use scheduler::{Scheduler, SubmitError};
pub use text::{StopMatcher, StopScan, Utf8Stream};

use crate::grammar::Constraint;
use crate::model::Pooling;
use crate::sample::{SamplerParams, TokenLogprob};

/// One row of a forward pass: the model's batch row.
pub use crate::model::BatchRow as Row;

/// A model session with several sequence slots sharing one KV cache.
pub trait Engine: Send {
    /// Sequence slots; each request holds one while it runs.
    fn n_slots(&self) -> usize;
    /// Positions per slot.
    fn n_ctx(&self) -> usize;
    fn n_vocab(&self) -> usize;
    /// Most rows one `decode` call should get.
    fn n_batch(&self) -> usize;
    /// Runs the rows (each slot's rows consecutive positions continuing
    /// what the slot holds) and returns the logits of the rows that asked,
    /// in row order: `n_outputs × n_vocab` values.
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String>;
    /// Forgets positions `len..` of `slot`.
    fn truncate(&mut self, slot: usize, len: usize);
    /// Values per hidden state: an embedding's length (0: none are given).
    fn n_embd(&self) -> usize {
        0
    }
    /// Runs the rows as `decode` does and returns every row's final hidden
    /// state, in row order: `rows × n_embd` values.
    fn hidden(&mut self, _rows: &[Row]) -> Result<&[f32], String> {
        Err("this engine gives no hidden states".into())
    }
}

/// What the scheduler needs from the tokenizer.
pub trait Vocab: Send {
    /// End of generation (EOS, EOT, `<|im_end|>`...).
    fn is_eog(&self, id: u32) -> bool;
    /// The bytes a token adds to generated text; control tokens add none.
    fn piece(&self, id: u32) -> Vec<u8>;
}

impl<E: Engine + ?Sized> Engine for Box<E> {
    fn n_slots(&self) -> usize {
        (**self).n_slots()
    }
    fn n_ctx(&self) -> usize {
        (**self).n_ctx()
    }
    fn n_vocab(&self) -> usize {
        (**self).n_vocab()
    }
    fn n_batch(&self) -> usize {
        (**self).n_batch()
    }
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        (**self).decode(rows)
    }
    fn truncate(&mut self, slot: usize, len: usize) {
        (**self).truncate(slot, len)
    }
    fn n_embd(&self) -> usize {
        (**self).n_embd()
    }
    fn hidden(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        (**self).hidden(rows)
    }
}

impl<V: Vocab + ?Sized> Vocab for Box<V> {
    fn is_eog(&self, id: u32) -> bool {
        (**self).is_eog(id)
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        (**self).piece(id)
    }
}

/// A generation to run.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// The prompt's token ids, BOS included if the model wants it.
    pub prompt: Vec<u32>,
    /// `None`: until the end of generation or of the context.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerParams,
    /// Generation ends before the first of these; it is not returned.
    pub stop: Vec<String>,
    /// `Some(n)`: each sampled token's log-probability is sent
    /// ([`Event::Logprob`]), with the `n` most likely tokens'.
    pub logprobs: Option<usize>,
    /// A grammar the output must match: tokens it does not allow are
    /// masked out before sampling.
    pub constraint: Option<Constraint>,
}

/// Inputs to embed, each read as its own sequence.
#[derive(Clone, Debug)]
pub struct EmbedRequest {
    /// Each input's token ids, BOS included if the model wants it.
    pub inputs: Vec<Vec<u32>>,
    pub pooling: Pooling,
}

/// Where an embedding request's answer goes, once: per input its pooled,
/// L2-normalized vector (`n_embd` values; one per token for
/// [`Pooling::None`]).
pub type EmbedReply = Box<dyn FnOnce(Result<Vec<Vec<f32>>, EmbedError>) + Send>;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
    /// The sink closed (client gone, Ctrl-C) or the server shut down.
    Cancelled,
}

impl FinishReason {
    /// OpenAI's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What a sink receives, in order: any number of `Text` (and, when asked
/// for, a `Logprob` per token before the text it adds), then one `Done` or
/// one `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Text(String),
    Logprob(TokenLogprob),
    Done(Usage),
    Error(String),
}

/// Token counts of a finished generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    /// Sampled tokens, not counting an end-of-generation token.
    pub completion_tokens: usize,
    /// Prompt tokens whose KV was reused from the slot's last request.
    pub cached_tokens: usize,
}

/// Where a generation's events go.
pub trait Sink: Send {
    /// Delivers an event; `false` when nobody listens any more, which
    /// cancels the generation.
    fn send(&mut self, event: Event) -> bool;
    /// Whether the listener has gone, checked before each step.
    fn is_closed(&self) -> bool {
        false
    }
}
