//! Model architectures, written once against the backend contract, and the
//! session that runs them: KV cache, activation buffers and batches.
//!
//! ```text
//! Model::load(gguf, backend) ──▶ Session::new(model, params) ──▶ session.decode(&batch) ──▶ logits
//! ```
//!
//! A [`Batch`] is a set of rows, each a token at a position of a sequence
//! slot, so several sequences can share one forward pass (continuous
//! batching). A batch of any length is run in chunks of `n_batch` rows; only
//! the rows that ask for logits go through the output projection.

mod archs;
pub mod blocks;
pub mod config;
pub mod decoder;
pub mod kv_cache;
pub mod loader;
pub mod output;
pub mod pooling;

use std::time::{Duration, Instant};

use crate::backend::{Backend, BackendError, BackendExt, Op};
use crate::gguf::{GgufError, GgufFile};
use crate::quant::GgmlType;
use crate::server;
pub use config::{ARCHS, Arch, Config};
use kv_cache::KvCache;
pub use pooling::Pooling;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("unsupported architecture {arch:?} (supported: {supported})")]
    UnsupportedArch { arch: String, supported: String },
    #[error("metadata key {key:?} {reason}")]
    BadConfig { key: String, reason: String },
    #[error("tensor {name:?} is missing")]
    MissingTensor { name: String },
    #[error("tensor {name:?} has dims {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {name:?} is {dtype}, which the {backend} backend cannot run")]
    UnsupportedType {
        name: String,
        dtype: GgmlType,
        backend: String,
    },
    #[error("{needed} positions do not fit the context of {n_ctx}")]
    ContextFull { needed: usize, n_ctx: usize },
    #[error("{0}")]
    Param(String),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// A model's config and weights, loaded into a backend.
pub struct Model {
    config: Config,
    weights: decoder::Weights,
    backend: Box<dyn Backend>,
    /// Parameters and bytes of the file's tensors (llama-bench's "params"
    /// and "size").
    pub n_params: u64,
    pub n_bytes: u64,
}

impl Model {
    /// Reads the config and loads every weight into `backend` (zero-copy on
    /// the CPU). `progress(done, total)` counts weight bytes.
    pub fn load(
        file: &GgufFile,
        mut backend: Box<dyn Backend>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model> {
        let config = Config::from_gguf(file)?;
        let n_bytes: u64 = file.tensors.iter().map(|t| t.size).sum();
        let n_params: u64 = file.tensors.iter().map(|t| t.n_elements()).sum();
        for (op, needed) in [
            (Op::Softcap, config.final_softcap.is_some()),
            (Op::TopKMoe, config.moe.is_some()),
            (Op::MoeSum, config.moe.is_some()),
        ] {
            if needed && !backend.supports(op, GgmlType::F32) {
                return Err(BackendError::Unsupported {
                    backend: backend.name(),
                    op,
                    dtype: GgmlType::F32,
                }
                .into());
            }
        }
        let mut loader = loader::Loader {
            file,
            backend: backend.as_mut(),
            progress,
            done: 0,
            total: n_bytes,
        };
        let weights = decoder::Weights::load(&config, &mut loader)?;
        Ok(Model {
            config,
            weights,
            backend,
            n_params,
            n_bytes,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn backend_name(&self) -> String {
        self.backend.name()
    }

    /// The backend's work counters (submissions and dispatches so far).
    pub fn backend_stats(&self) -> crate::backend::Stats {
        self.backend.stats()
    }

    /// The work counters of each device (several on a layer split), with
    /// the boundary copies into each.
    pub fn backend_device_stats(&self) -> Vec<crate::backend::DeviceStats> {
        self.backend.device_stats()
    }

    /// Device time per kernel so far (a profiling GPU backend only).
    pub fn backend_op_times(&self) -> Vec<crate::backend::OpTime> {
        self.backend.op_times()
    }
}

/// How a session sizes its buffers.
#[derive(Clone, Debug)]
pub struct SessionParams {
    /// Positions per sequence slot; `None` takes the model's context length,
    /// capped at [`DEFAULT_MAX_CTX`].
    pub n_ctx: Option<usize>,
    /// Sequence slots sharing the cache.
    pub n_slots: usize,
    /// Rows per forward pass; longer batches run in chunks of this.
    pub n_batch: usize,
    /// Most rows that may ask for logits in one `decode` call.
    pub n_outputs: usize,
    /// KV cache type, one of [`kv_cache::TYPES`]: F16 (llama.cpp's
    /// default), F32, Q8_0 or Q4_0.
    pub kv_type: GgmlType,
}

/// Host time spent in [`Session::decode`]: recording forward passes
/// (inputs written, ops recorded or, on the CPU, run) and finishing them
/// (submitting, waiting, copying the logits back).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostTimes {
    pub recording: Duration,
    pub finishing: Duration,
}

/// The default context when none is asked for: the model's, up to this.
pub const DEFAULT_MAX_CTX: usize = 4096;

impl Default for SessionParams {
    fn default() -> Self {
        Self {
            n_ctx: None,
            n_slots: 1,
            n_batch: 512,
            n_outputs: 1,
            kv_type: GgmlType::F16,
        }
    }
}

/// One row of a batch: `token` at position `pos` of slot `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    pub token: u32,
    pub pos: usize,
    pub seq: usize,
    /// Whether `decode` returns this row's logits.
    pub logits: bool,
}

/// Rows for one `decode` call.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub rows: Vec<BatchRow>,
}

impl std::ops::Deref for Batch {
    type Target = [BatchRow];
    fn deref(&self) -> &[BatchRow] {
        &self.rows
    }
}

impl Batch {
    /// `tokens` at positions `start..` of slot `seq`, with logits for the
    /// last row only: a prompt, or one decoded token.
    pub fn sequence(tokens: &[u32], start: usize, seq: usize) -> Batch {
        let n = tokens.len();
        Batch {
            rows: (0..n)
                .map(|i| BatchRow {
                    token: tokens[i],
                    pos: start + i,
                    seq,
                    logits: i + 1 == n,
                })
                .collect(),
        }
    }

    pub fn push(&mut self, token: u32, pos: usize, seq: usize, logits: bool) {
        self.rows.push(BatchRow {
            token,
            pos,
            seq,
            logits,
        });
    }
}

/// A model with its KV cache and activation buffers: everything a forward
/// pass needs, allocated once.
pub struct Session {
    model: Model,
    host: HostTimes,
    params: SessionParams,
    n_ctx: usize,
    cache: KvCache,
    act: decoder::Activations,
    /// Host staging, reused: per-chunk indices, and all outputs' logits or
    /// hidden states.
    staging: [Vec<i32>; 5],
    out: Vec<f32>,
}

impl Session {
    pub fn new(mut model: Model, params: SessionParams) -> Result<Session> {
        let c = model.config.clone();
        let n_ctx = match params.n_ctx {
            Some(n) if n > c.n_ctx_train => {
                return Err(ModelError::Param(format!(
                    "a context of {n} exceeds the model's context length {}",
                    c.n_ctx_train
                )));
            }
            Some(0) => {
                return Err(ModelError::Param(
                    "a context of 0 positions holds no token; it must be at least 1".into(),
                ));
            }
            Some(n) => n,
            None => c.n_ctx_train.min(DEFAULT_MAX_CTX),
        };
        if params.n_slots == 0 || params.n_batch == 0 || params.n_outputs == 0 {
            return Err(ModelError::Param(format!(
                "slots ({}), batch ({}) and outputs ({}) must be positive",
                params.n_slots, params.n_batch, params.n_outputs
            )));
        }
        let b = model.backend.as_mut();
        kv_cache::check_type(b, params.kv_type, c.head_dim)?;
        let cache = KvCache::new(
            b,
            c.n_layer,
            c.kv_dim(),
            n_ctx,
            params.n_slots,
            params.kv_type,
        )?;
        let act = decoder::Activations::new(&c, b, params.n_batch, params.n_outputs)?;
        Ok(Session {
            model,
            host: HostTimes::default(),
            params,
            n_ctx,
            cache,
            act,
            staging: Default::default(),
            out: Vec::new(),
        })
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn config(&self) -> &Config {
        &self.model.config
    }

    /// Positions per slot.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// How many tensors the logits are kept in: more than one where
    /// `n_outputs` rows of them are more than the backend's largest tensor
    /// (see [`output`]).
    pub fn n_logit_pieces(&self) -> usize {
        self.act.logits.n_pieces()
    }

    /// Host time spent in `decode` so far.
    pub fn host_times(&self) -> HostTimes {
        self.host
    }

    /// Valid positions of `slot`.
    pub fn slot_len(&self, slot: usize) -> usize {
        self.cache.len(slot)
    }

    /// Forgets positions `len..` of `slot`; 0 clears it.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        self.cache.truncate(slot, len);
    }

    /// Runs the rows and returns the logits of the rows that asked for
    /// them, in row order: `n_outputs × n_vocab` values.
    ///
    /// Each slot's rows must be consecutive positions, starting at most at
    /// the slot's current length (continuing it or rewinding it).
    pub fn decode(&mut self, rows: &[BatchRow]) -> Result<&[f32]> {
        self.run(rows, false)
    }

    /// Runs the rows as `decode` does and returns every row's final hidden
    /// state after the output norm, in row order: `rows × n_embd` values,
    /// what [`Pooling`] makes embeddings of. The rows' `logits` flags are
    /// ignored.
    pub fn hidden(&mut self, rows: &[BatchRow]) -> Result<&[f32]> {
        self.run(rows, true)
    }

    /// `decode` (`hidden` false) or `hidden`, in chunks of `n_batch` rows.
    fn run(&mut self, rows: &[BatchRow], hidden: bool) -> Result<&[f32]> {
        let spans = self.check(rows)?;
        let c = &self.model.config;
        let (width, n_out_total) = match hidden {
            true => (c.n_embd, rows.len()),
            false => (c.n_vocab, rows.iter().filter(|r| r.logits).count()),
        };
        self.out.resize(n_out_total * width, 0.0);
        let mut out_done = 0;
        for chunk in rows.chunks(self.params.n_batch) {
            if let Err(e) = self.run_chunk(chunk, hidden, out_done) {
                // What this batch wrote is unknown now; what came before
                // its first position of each slot is intact.
                for (slot, &(first, _)) in spans
                    .iter()
                    .enumerate()
                    .filter_map(|(s, v)| Some((s, v.as_ref()?)))
                {
                    self.cache.truncate(slot, first);
                }
                return Err(e);
            }
            out_done += match hidden {
                true => chunk.len(),
                false => chunk.iter().filter(|r| r.logits).count(),
            };
        }
        for (slot, span) in spans.iter().enumerate() {
            if let Some((_, last)) = *span {
                self.cache.commit(slot, last);
            }
        }
        Ok(&self.out)
    }

    /// Checks a batch against the vocabulary, the slots and the context;
    /// returns each slot's `(first, last)` position in it.
    fn check(&self, rows: &[BatchRow]) -> Result<Vec<Option<(usize, usize)>>> {
        if rows.is_empty() {
            return Err(ModelError::Param("an empty batch".into()));
        }
        let n_out = rows.iter().filter(|r| r.logits).count();
        if n_out > self.params.n_outputs {
            return Err(ModelError::Param(format!(
                "{n_out} rows ask for logits; the session allows {}",
                self.params.n_outputs
            )));
        }
        let vocab = self.model.config.n_vocab;
        // Per slot: (first, last) position seen so far in this batch.
        let mut spans: Vec<Option<(usize, usize)>> = vec![None; self.cache.n_slots];
        for r in rows {
            if r.token as usize >= vocab {
                return Err(ModelError::Param(format!(
                    "token {} is outside the vocabulary of {vocab}",
                    r.token
                )));
            }
            let span = spans.get_mut(r.seq).ok_or_else(|| {
                ModelError::Param(format!(
                    "sequence slot {} outside 0..{}",
                    r.seq, self.cache.n_slots
                ))
            })?;
            *span = match *span {
                None => Some((r.pos, r.pos)),
                Some((first, last)) if r.pos == last + 1 => Some((first, r.pos)),
                Some((_, last)) => {
                    return Err(ModelError::Param(format!(
                        "slot {}: position {} follows {last}; positions must be consecutive",
                        r.seq, r.pos
                    )));
                }
            };
        }
        for (slot, span) in spans.iter().enumerate() {
            if let Some((first, last)) = *span {
                self.cache.check_span(slot, first, last)?;
            }
        }
        Ok(spans)
    }

    /// One forward pass of at most `n_batch` rows; its outputs' logits (or
    /// every row's hidden state) go to `self.out` from output row
    /// `out_done` on.
    fn run_chunk(&mut self, rows: &[BatchRow], hidden: bool, out_done: usize) -> Result<()> {
        let [tokens, pos, seq, kv_rows, out_ids] = &mut self.staging;
        for v in [
            &mut *tokens,
            &mut *pos,
            &mut *seq,
            &mut *kv_rows,
            &mut *out_ids,
        ] {
            v.clear();
        }
        // Every value was checked against the vocabulary and the context,
        // which are far below i32::MAX.
        for (i, r) in rows.iter().enumerate() {
            tokens.push(r.token as i32);
            pos.push(r.pos as i32);
            seq.push(r.seq as i32);
            kv_rows.push((r.seq * self.n_ctx + r.pos) as i32);
            if r.logits {
                out_ids.push(i as i32);
            }
        }
        let (n, n_out) = (rows.len(), out_ids.len());
        let start = Instant::now();
        let b = self.model.backend.as_mut();
        let a = &self.act;
        b.write_i32(a.tokens, tokens)?;
        b.write_i32(a.pos, pos)?;
        b.write_i32(a.seq, seq)?;
        b.write_i32(a.kv_rows, kv_rows)?;
        b.write_i32(a.out_ids, out_ids)?;
        let c = &self.model.config;
        let out = match hidden {
            true => decoder::Output::Hidden,
            false => decoder::Output::Logits { rows: n_out },
        };
        let keys = rows.iter().map(|r| r.pos + 1).max().unwrap_or(0);
        let decode_rows = leading_decode_rows(rows);
        let step = decoder::Rows {
            n,
            keys,
            decode_rows,
        };
        decoder::forward(b, c, &self.model.weights, &self.cache, a, step, out)?;
        let recorded = Instant::now();
        if hidden {
            let e = c.n_embd;
            let dst = &mut self.out[out_done * e..(out_done + n) * e];
            b.read(a.h.with_rows(n), bytemuck::cast_slice_mut(dst))?;
        } else if n_out > 0 {
            let vocab = c.n_vocab;
            let dst = &mut self.out[out_done * vocab..(out_done + n_out) * vocab];
            let pieces: Vec<_> = a.logits.views(n_out).collect();
            b.read_all(&pieces, bytemuck::cast_slice_mut(dst))?;
        }
        self.host.recording += recorded - start;
        self.host.finishing += recorded.elapsed();
        Ok(())
    }
}

/// The server's scheduler drives a session through this.
impl server::Engine for Session {
    fn n_slots(&self) -> usize {
        self.params.n_slots
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn n_vocab(&self) -> usize {
        self.model.config.n_vocab
    }

    fn n_batch(&self) -> usize {
        self.params.n_batch
    }

    fn decode(&mut self, rows: &[server::Row]) -> std::result::Result<&[f32], String> {
        Session::decode(self, rows).map_err(|e| e.to_string())
    }

    fn truncate(&mut self, slot: usize, len: usize) {
        Session::truncate(self, slot, len);
    }

    fn n_embd(&self) -> usize {
        self.model.config.n_embd
    }

    fn hidden(&mut self, rows: &[server::Row]) -> std::result::Result<&[f32], String> {
        Session::hidden(self, rows).map_err(|e| e.to_string())
    }
}

/// How many of `rows`' first rows are each the only row of their sequence
/// (`AttentionParams::decode_rows`): a server step puts its generating
/// sequences' rows before any prompt chunk.
///
/// No allocation: the one-row decode of every token compares one pair.
fn leading_decode_rows(rows: &[BatchRow]) -> usize {
    let alone = |r: &BatchRow| rows.iter().filter(|o| o.seq == r.seq).count() == 1;
    rows.iter().take_while(|r| alone(r)).count()
}
