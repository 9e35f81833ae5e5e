//! Several copies of one model, each behind its own [`Scheduler`] (one per
//! GPU adapter: `smelt serve --replicas N`, the throughput mode).
//!
//! A request is routed once, when it is submitted, to the replica with the
//! fewest sequences running and waiting (the lowest index on a tie, so an
//! idle server keeps using the first replica and its cached prompts). From
//! then on that replica's scheduler owns it exactly as a lone scheduler
//! would: its slot, its continuous batching, cancellation when the client
//! leaves, shutdown. Two submissions at once are routed one after the
//! other, so each sees the other's load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::{EmbedReply, EmbedRequest, GenRequest, Scheduler, Sink, SubmitError};

/// The schedulers of a model's replicas, routed by load.
pub struct Replicas {
    schedulers: Vec<Scheduler>,
    /// Held from reading the loads to queueing the request.
    route: Mutex<()>,
    /// Requests each replica has accepted.
    served: Vec<AtomicU64>,
}

/// One replica's work, for `/health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaLoad {
    /// Requests holding a slot.
    pub active: usize,
    /// Requests waiting for one.
    pub waiting: usize,
    /// Requests it has accepted since it started.
    pub served: u64,
}

impl From<Scheduler> for Replicas {
    fn from(scheduler: Scheduler) -> Self {
        Self::new(vec![scheduler])
    }
}

impl Replicas {
    /// # Panics
    ///
    /// With no scheduler: a server needs at least one replica.
    pub fn new(schedulers: Vec<Scheduler>) -> Self {
        assert!(
            !schedulers.is_empty(),
            "a server needs at least one replica"
        );
        let served = schedulers.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            schedulers,
            route: Mutex::new(()),
            served,
        }
    }

    pub fn len(&self) -> usize {
        self.schedulers.len()
    }

    /// Always `false`: there is at least one replica.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Queues a generation on the least loaded replica; returns its index.
    pub fn submit(&self, req: GenRequest, sink: Box<dyn Sink>) -> Result<usize, SubmitError> {
        self.route(|s| s.submit(req, sink))
    }

    /// Queues an embedding request on the least loaded replica; returns
    /// its index.
    pub fn submit_embed(&self, req: EmbedRequest, reply: EmbedReply) -> Result<usize, SubmitError> {
        self.route(|s| s.submit_embed(req, reply))
    }

    /// Runs `submit` on the replica with the fewest running and waiting
    /// requests. Every replica has the same slots and queue, so where that
    /// one's queue is full, all are.
    fn route(
        &self,
        submit: impl FnOnce(&Scheduler) -> Result<(), SubmitError>,
    ) -> Result<usize, SubmitError> {
        let _routing = self.route.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, scheduler) = self
            .schedulers
            .iter()
            .enumerate()
            .min_by_key(|(i, s)| {
                let (active, waiting) = s.load();
                (active + waiting, *i)
            })
            .expect("at least one replica");
        submit(scheduler)?;
        self.served[index].fetch_add(1, Ordering::Relaxed);
        Ok(index)
    }

    /// Positions per slot: a prompt must be shorter than this.
    pub fn n_ctx(&self) -> usize {
        self.schedulers
            .iter()
            .map(Scheduler::n_ctx)
            .min()
            .unwrap_or(0)
    }

    /// Slots of all replicas together.
    pub fn n_slots(&self) -> usize {
        self.schedulers.iter().map(Scheduler::n_slots).sum()
    }

    pub fn n_vocab(&self) -> usize {
        self.schedulers[0].n_vocab()
    }

    /// An embedding's length; 0 where the model gives none.
    pub fn n_embd(&self) -> usize {
        self.schedulers[0].n_embd()
    }

    /// (requests holding a slot, requests waiting), all replicas together.
    pub fn load(&self) -> (usize, usize) {
        self.schedulers
            .iter()
            .map(Scheduler::load)
            .fold((0, 0), |(a, w), (da, dw)| (a + da, w + dw))
    }

    /// Each replica's work, in order.
    pub fn loads(&self) -> Vec<ReplicaLoad> {
        self.schedulers
            .iter()
            .zip(&self.served)
            .map(|(s, served)| {
                let (active, waiting) = s.load();
                ReplicaLoad {
                    active,
                    waiting,
                    served: served.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Refuses new requests and cancels the running and waiting ones on
    /// every replica.
    pub fn shutdown(&self) {
        for s in &self.schedulers {
            s.shutdown();
        }
    }
}

#[cfg(test)]
mod tests;
