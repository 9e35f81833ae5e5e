//! The scheduler thread: admits queued requests into free slots, and each
//! step decodes one batch holding the next token of every generating
//! sequence plus a chunk of any prompt being read (continuous batching).
//!
//! An embedding job waits in its own queue and runs, when a slot is free,
//! between two steps: all its inputs, one after another, in that slot.
//!
//! A slot remembers the tokens its KV cache holds. A new request goes to
//! the free slot sharing the longest prefix with its prompt and reuses that
//! prefix instead of recomputing it (llama.cpp's `cache_prompt`): a chat's
//! next turn reads only the new messages.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::text::{StopMatcher, StopScan, Utf8Stream};
use super::{
    EmbedError, EmbedReply, EmbedRequest, Engine, Event, FinishReason, GenRequest, Row, Sink,
    Usage, Vocab,
};
use crate::sample::{Sampler, TokenLogprob, logprobs};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("the server is busy: {0} requests are waiting; try again later")]
    QueueFull(usize),
    #[error(
        "the prompt has {tokens} tokens; the context holds {n_ctx}, with room for at least one generated token"
    )]
    PromptTooLong { tokens: usize, n_ctx: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("input {index} has {tokens} tokens; the context holds {n_ctx}")]
    InputTooLong {
        index: usize,
        tokens: usize,
        n_ctx: usize,
    },
    #[error("input {0} is empty")]
    EmptyInput(usize),
    #[error("this model gives no embeddings")]
    NoEmbeddings,
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    #[error("invalid sampling parameters: {0}")]
    BadSampler(String),
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// A handle to the scheduler thread. Dropping it cancels what runs and
/// waits for the thread.
pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    n_ctx: usize,
    n_slots: usize,
    n_vocab: usize,
    n_embd: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

struct Queue {
    waiting: VecDeque<Job>,
    embeds: VecDeque<EmbedJob>,
    /// Most requests that may wait for a slot.
    capacity: usize,
    /// Requests holding a slot.
    active: usize,
    shutdown: bool,
}

struct Job {
    req: GenRequest,
    sink: Box<dyn Sink>,
}

struct EmbedJob {
    req: EmbedRequest,
    reply: EmbedReply,
}

impl Scheduler {
    /// Starts the thread. `queue_capacity` requests may wait beyond the
    /// engine's slots; more are refused with [`SubmitError::QueueFull`].
    pub fn spawn<E, V>(engine: E, vocab: V, queue_capacity: usize) -> Scheduler
    where
        E: Engine + 'static,
        V: Vocab + 'static,
    {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                embeds: VecDeque::new(),
                capacity: queue_capacity,
                active: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
        });
        let (n_ctx, n_slots, n_vocab, n_embd) = (
            engine.n_ctx(),
            engine.n_slots(),
            engine.n_vocab(),
            engine.n_embd(),
        );
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("smelt-scheduler".into())
                .spawn(move || Worker::new(engine, vocab, shared).run())
                .expect("spawning the scheduler thread")
        };
        Scheduler {
            shared,
            thread: Some(thread),
            n_ctx,
            n_slots,
            n_vocab,
            n_embd,
        }
    }

    /// Positions per slot: a prompt must be shorter than this.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// Tokens in the vocabulary: ids are below this.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// An embedding's length; 0 where the engine gives none.
    pub fn n_embd(&self) -> usize {
        self.n_embd
    }

    /// Checks a request and queues it. Events go to `sink` from the
    /// scheduler thread.
    pub fn submit(&self, req: GenRequest, sink: Box<dyn Sink>) -> Result<(), SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        if req.prompt.len() >= self.n_ctx {
            return Err(SubmitError::PromptTooLong {
                tokens: req.prompt.len(),
                n_ctx: self.n_ctx,
            });
        }
        if req.max_tokens == Some(0) {
            return Err(SubmitError::ZeroMaxTokens);
        }
        req.sampler.validate().map_err(SubmitError::BadSampler)?;
        self.enqueue(|q| q.waiting.push_back(Job { req, sink }))
    }

    /// Checks an embedding request and queues it; `reply` gets the vectors
    /// from the scheduler thread. Each input must fit the context.
    pub fn submit_embed(&self, req: EmbedRequest, reply: EmbedReply) -> Result<(), SubmitError> {
        if self.n_embd == 0 {
            return Err(SubmitError::NoEmbeddings);
        }
        if req.inputs.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        for (index, input) in req.inputs.iter().enumerate() {
            if input.is_empty() {
                return Err(SubmitError::EmptyInput(index));
            }
            if input.len() > self.n_ctx {
                return Err(SubmitError::InputTooLong {
                    index,
                    tokens: input.len(),
                    n_ctx: self.n_ctx,
                });
            }
        }
        self.enqueue(|q| q.embeds.push_back(EmbedJob { req, reply }))
    }

    /// Runs `push` on the queue unless it is shut down or full.
    fn enqueue(&self, push: impl FnOnce(&mut Queue)) -> Result<(), SubmitError> {
        let mut q = lock(&self.shared.queue);
        if q.shutdown {
            return Err(SubmitError::ShuttingDown);
        }
        let free_slots = self.n_slots.saturating_sub(q.active);
        let waiting = q.waiting.len() + q.embeds.len();
        if waiting >= q.capacity + free_slots {
            return Err(SubmitError::QueueFull(waiting));
        }
        push(&mut q);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Refuses new requests and cancels the running and waiting ones; the
    /// thread ends once they are told. Dropping the handle also does this,
    /// and waits for the thread.
    pub fn shutdown(&self) {
        lock(&self.shared.queue).shutdown = true;
        self.shared.wake.notify_all();
    }

    /// Wakes the thread so it notices closed sinks of waiting requests.
    pub fn poke(&self) {
        self.shared.wake.notify_one();
    }

    /// (requests holding a slot, requests waiting).
    pub fn load(&self) -> (usize, usize) {
        let q = lock(&self.shared.queue);
        (q.active, q.waiting.len() + q.embeds.len())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A poisoned lock means the scheduler thread panicked; the queue itself
/// is still consistent (every update is a single push or pop).
fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A slot of the KV cache and the tokens it holds.
struct Slot {
    /// Tokens whose keys and values are in the cache, positions `0..len`.
    tokens: Vec<u32>,
    busy: bool,
}

/// A request holding a slot.
struct Seq {
    job: Job,
    slot: usize,
    sampler: Sampler,
    /// Next prompt token to feed; `prompt.len()` once the prompt is read.
    cursor: usize,
    cached: usize,
    /// The sampled token to feed next, once the prompt is read.
    next: Option<u32>,
    generated: Vec<u32>,
    utf8: Utf8Stream,
    stop: StopMatcher,
}

struct Worker<E, V> {
    engine: E,
    vocab: V,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    seqs: Vec<Seq>,
    /// An embedding job taken from the queue, run before the next step.
    embed: Option<EmbedJob>,
    /// Reused: one row of logits for the sampler.
    logits: Vec<f32>,
}

impl<E: Engine, V: Vocab> Worker<E, V> {
    fn new(engine: E, vocab: V, shared: Arc<Shared>) -> Self {
        let slots = (0..engine.n_slots())
            .map(|_| Slot {
                tokens: Vec::new(),
                busy: false,
            })
            .collect();
        Self {
            engine,
            vocab,
            shared,
            slots,
            seqs: Vec::new(),
            embed: None,
            logits: Vec::new(),
        }
    }

    fn run(mut self) {
        while self.admit() {
            self.seqs.retain_mut(|s| {
                if s.job.sink.is_closed() {
                    finish_cancelled(s);
                    false
                } else {
                    true
                }
            });
            self.release_free_slots();
            if let Some(job) = self.embed.take() {
                self.run_embed(job);
            }
            if !self.seqs.is_empty() {
                self.step();
                self.release_free_slots();
            }
        }
        for s in &mut self.seqs {
            finish_cancelled(s);
        }
    }

    /// Moves waiting requests into free slots; blocks while there is
    /// nothing to do. `false` on shutdown.
    fn admit(&mut self) -> bool {
        let shared = Arc::clone(&self.shared);
        let mut q = lock(&shared.queue);
        loop {
            if q.shutdown {
                // Cancelled, not failed: the server answers 503, as it
                // does to requests that come after the shutdown.
                for mut job in q.waiting.drain(..) {
                    cancel_waiting(&mut job);
                }
                for job in q.embeds.drain(..) {
                    (job.reply)(Err(EmbedError::ShuttingDown));
                }
                return false;
            }
            // Drop requests whose client left while they waited.
            q.waiting.retain_mut(|j| {
                let closed = j.sink.is_closed();
                if closed {
                    cancel_waiting(j);
                }
                !closed
            });
            while self.seqs.len() < self.slots.len() {
                let Some(job) = q.waiting.pop_front() else {
                    break;
                };
                self.start(job);
            }
            if self.seqs.len() < self.slots.len() {
                self.embed = q.embeds.pop_front();
            }
            q.active = self.seqs.len();
            if !self.seqs.is_empty() || self.embed.is_some() {
                return true;
            }
            q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Gives `job` the free slot whose cached tokens share the longest
    /// prefix with its prompt.
    fn start(&mut self, job: Job) {
        let prompt = &job.req.prompt;
        let (slot, common) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy)
            .map(|(i, s)| (i, common_prefix(&s.tokens, prompt)))
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
            .expect("a free slot exists when fewer sequences than slots run");
        // The last prompt token is always fed again: its logits are needed.
        let keep = common.min(prompt.len() - 1);
        self.engine.truncate(slot, keep);
        self.slots[slot].tokens.truncate(keep);
        self.slots[slot].busy = true;
        let stop = StopMatcher::new(&job.req.stop);
        let sampler = Sampler::new(job.req.sampler.clone());
        self.seqs.push(Seq {
            job,
            slot,
            sampler,
            cursor: keep,
            cached: keep,
            next: None,
            generated: Vec::new(),
            utf8: Utf8Stream::default(),
            stop,
        });
    }

    /// Reads each input of `job` in a free slot and answers with their
    /// pooled vectors. The slot keeps the last input's tokens cached.
    fn run_embed(&mut self, job: EmbedJob) {
        let slot = (0..self.slots.len())
            .find(|&i| !self.slots[i].busy)
            .expect("an embedding job is taken only when a slot is free");
        let n_embd = self.engine.n_embd();
        let mut vectors = Vec::with_capacity(job.req.inputs.len());
        for input in &job.req.inputs {
            self.engine.truncate(slot, 0);
            self.slots[slot].tokens.clear();
            let rows: Vec<Row> = (0..input.len())
                .map(|pos| Row {
                    token: input[pos],
                    pos,
                    seq: slot,
                    logits: false,
                })
                .collect();
            match self.engine.hidden(&rows) {
                Ok(hidden) => vectors.push(job.req.pooling.pool(hidden, n_embd)),
                Err(e) => {
                    self.engine.truncate(slot, 0);
                    (job.reply)(Err(EmbedError::Failed(e)));
                    return;
                }
            }
            self.slots[slot].tokens.clone_from(input);
        }
        (job.reply)(Ok(vectors));
    }

    fn release_free_slots(&mut self) {
        for slot in &mut self.slots {
            slot.busy = false;
        }
        for s in &self.seqs {
            self.slots[s.slot].busy = true;
        }
    }

    /// One forward pass: a row per generating sequence, then prompt chunks
    /// up to the batch size; then a token sampled for every sequence whose
    /// last row asked for logits.
    fn step(&mut self) {
        let budget = self.engine.n_batch().max(self.seqs.len());
        let mut rows = Vec::with_capacity(budget);
        // (sequence index, number of rows) in row order.
        let mut spans = Vec::with_capacity(self.seqs.len());
        for (i, s) in self.seqs.iter().enumerate() {
            if let Some(tok) = s.next {
                rows.push(Row {
                    token: tok,
                    pos: self.slots[s.slot].tokens.len(),
                    seq: s.slot,
                    logits: true,
                });
                spans.push((i, 1));
            }
        }
        for (i, s) in self.seqs.iter().enumerate() {
            let left = s.job.req.prompt.len() - s.cursor;
            let room = budget - rows.len();
            if s.next.is_some() || left == 0 || room == 0 {
                continue;
            }
            let n = left.min(room);
            let start = self.slots[s.slot].tokens.len();
            for k in 0..n {
                rows.push(Row {
                    token: s.job.req.prompt[s.cursor + k],
                    pos: start + k,
                    seq: s.slot,
                    logits: k + 1 == left,
                });
            }
            spans.push((i, n));
        }

        let (vocab, n_ctx) = (self.engine.n_vocab(), self.engine.n_ctx());
        let out = match self.engine.decode(&rows) {
            Ok(out) => out,
            Err(e) => {
                // Every sequence in the batch fails; their slots restart
                // empty, since what the pass wrote is unknown.
                let mut failed: Vec<usize> = spans.iter().map(|&(i, _)| i).collect();
                failed.sort_unstable_by(|a, b| b.cmp(a));
                for i in failed {
                    let mut s = self.seqs.swap_remove(i);
                    self.engine.truncate(s.slot, 0);
                    self.slots[s.slot].tokens.clear();
                    s.job
                        .sink
                        .send(Event::Error(format!("generation failed: {e}")));
                }
                return;
            }
        };
        // The engine's output buffer is borrowed; copy each sampled row
        // out before touching the sequences.
        let mut done = Vec::new();
        let mut out_row = 0;
        let mut r = 0;
        for &(i, n) in &spans {
            let s = &mut self.seqs[i];
            let fed = &rows[r..r + n];
            r += n;
            self.slots[s.slot]
                .tokens
                .extend(fed.iter().map(|row| row.token));
            if s.next.is_none() {
                s.cursor += n;
            }
            if !fed[n - 1].logits {
                continue;
            }
            self.logits.clear();
            self.logits
                .extend_from_slice(&out[out_row * vocab..(out_row + 1) * vocab]);
            out_row += 1;
            if let Some(c) = &mut s.job.req.constraint
                && let Err(e) = c.mask(&mut self.logits)
            {
                done.push((i, Err(format!("constrained decoding failed: {e}"))));
                continue;
            }
            let token = s.sampler.sample(&mut self.logits, &s.generated);
            if let Some(c) = &mut s.job.req.constraint
                && !self.vocab.is_eog(token)
                && let Err(e) = c.accept(token)
            {
                done.push((i, Err(format!("constrained decoding failed: {e}"))));
                continue;
            }
            let logprob = s.job.req.logprobs.map(|n| {
                let raw = &out[(out_row - 1) * vocab..out_row * vocab];
                logprobs(raw, token, n)
            });
            let pos = self.slots[s.slot].tokens.len();
            if let Some(finish) = advance(s, token, logprob, &self.vocab, pos, n_ctx) {
                done.push((i, Ok(finish)));
            }
        }
        done.sort_by_key(|&(i, _)| std::cmp::Reverse(i));
        let finished: Vec<_> = done
            .into_iter()
            .map(|(i, finish)| (self.seqs.swap_remove(i), finish))
            .collect();
        // The slots count as free before anyone hears the generation is
        // over, so a client that submits again at once finds room.
        lock(&self.shared.queue).active = self.seqs.len();
        for (mut s, finish) in finished {
            match finish {
                Ok(Some(finish)) => finish_done(s, finish),
                Ok(None) => {}
                Err(e) => {
                    s.job.sink.send(Event::Error(e));
                }
            }
        }
    }
}

/// Takes a sampled token: streams its text and decides whether the
/// sequence ends. `pos` is where the token would be fed. Returns
/// `Some(Some(reason))` when it ends, `Some(None)` when its sink closed.
fn advance<V: Vocab>(
    s: &mut Seq,
    token: u32,
    logprob: Option<TokenLogprob>,
    vocab: &V,
    pos: usize,
    n_ctx: usize,
) -> Option<Option<FinishReason>> {
    if vocab.is_eog(token) {
        return Some(Some(FinishReason::Stop));
    }
    if let Some(lp) = logprob
        && !s.job.sink.send(Event::Logprob(lp))
    {
        return Some(None);
    }
    s.generated.push(token);
    let text = s.utf8.push(&vocab.piece(token));
    match s.stop.push(&text) {
        StopScan::Stopped(t) => {
            // Whatever follows the stop string is dropped.
            s.utf8.finish();
            if !t.is_empty() && !s.job.sink.send(Event::Text(t)) {
                return Some(None);
            }
            return Some(Some(FinishReason::Stop));
        }
        StopScan::Continue(t) => {
            if !t.is_empty() && !s.job.sink.send(Event::Text(t)) {
                return Some(None);
            }
        }
    }
    let at_max = s.job.req.max_tokens.is_some_and(|m| s.generated.len() >= m);
    if at_max || pos >= n_ctx {
        return Some(Some(FinishReason::Length));
    }
    s.next = Some(token);
    None
}

/// Sends what is held back and the usage.
fn finish_done(mut s: Seq, finish: FinishReason) {
    let rest = s.utf8.finish();
    let tail = match s.stop.push(&rest) {
        StopScan::Stopped(t) => t,
        StopScan::Continue(t) => t + &s.stop.flush(),
    };
    if !tail.is_empty() && !s.job.sink.send(Event::Text(tail)) {
        return;
    }
    let usage = usage(&s, finish);
    s.job.sink.send(Event::Done(usage));
}

/// Tells a request that never got a slot that it was cancelled.
fn cancel_waiting(job: &mut Job) {
    job.sink.send(Event::Done(Usage {
        finish: FinishReason::Cancelled,
        prompt_tokens: job.req.prompt.len(),
        completion_tokens: 0,
        cached_tokens: 0,
    }));
}

fn finish_cancelled(s: &mut Seq) {
    let usage = usage(s, FinishReason::Cancelled);
    s.job.sink.send(Event::Done(usage));
}

fn usage(s: &Seq, finish: FinishReason) -> Usage {
    Usage {
        finish,
        prompt_tokens: s.job.req.prompt.len(),
        completion_tokens: s.generated.len(),
        cached_tokens: s.cached,
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests;
