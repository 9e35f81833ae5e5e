//! Routing over replicas of a toy engine that never ends a generation by
//! itself (its next token is `last + 1`, wrapping, with no end of
//! generation), so requests stay where they were routed until cancelled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::model::Pooling;
use crate::sample::SamplerParams;
use crate::server::{Engine, Event, FinishReason, Row, Vocab};

const N_VOCAB: usize = 8;

/// `n_slots` slots of a long context; each decode takes a millisecond.
/// `rows` counts every row it ran.
struct Toy {
    lens: Vec<usize>,
    out: Vec<f32>,
    rows: Arc<Mutex<usize>>,
}

impl Toy {
    fn new(n_slots: usize) -> (Self, Arc<Mutex<usize>>) {
        let rows = Arc::new(Mutex::new(0));
        let toy = Toy {
            lens: vec![0; n_slots],
            out: Vec::new(),
            rows: Arc::clone(&rows),
        };
        (toy, rows)
    }
}

impl Engine for Toy {
    fn n_slots(&self) -> usize {
        self.lens.len()
    }
    fn n_ctx(&self) -> usize {
        1 << 20
    }
    fn n_vocab(&self) -> usize {
        N_VOCAB
    }
    fn n_batch(&self) -> usize {
        8
    }
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        std::thread::sleep(Duration::from_millis(1));
        *self.rows.lock().unwrap() += rows.len();
        self.out.clear();
        for r in rows {
            if r.pos != self.lens[r.seq] {
                return Err(format!("row {r:?} does not continue slot {}", r.seq));
            }
            self.lens[r.seq] += 1;
            if r.logits {
                let mut row = [0.0; N_VOCAB];
                row[(r.token as usize + 1) % N_VOCAB] = 10.0;
                self.out.extend_from_slice(&row);
            }
        }
        Ok(&self.out)
    }
    fn truncate(&mut self, slot: usize, len: usize) {
        self.lens[slot] = self.lens[slot].min(len);
    }
    fn n_embd(&self) -> usize {
        1
    }
    fn hidden(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        self.out.clear();
        for r in rows {
            self.lens[r.seq] = r.pos + 1;
            self.out.push(r.token as f32);
        }
        Ok(&self.out)
    }
}

struct Letters;

impl Vocab for Letters {
    fn is_eog(&self, _: u32) -> bool {
        false
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        vec![b'a' + id as u8]
    }
}

struct ChanSink {
    tx: Sender<Event>,
    closed: Arc<AtomicBool>,
}

impl Sink for ChanSink {
    fn send(&mut self, event: Event) -> bool {
        self.tx.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// A sink, its events, and the switch that closes it.
fn sink() -> (Box<dyn Sink>, Receiver<Event>, Arc<AtomicBool>) {
    let (tx, rx) = channel();
    let closed = Arc::new(AtomicBool::new(false));
    let sink = ChanSink {
        tx,
        closed: Arc::clone(&closed),
    };
    (Box::new(sink), rx, closed)
}

fn endless(prompt: &[u32]) -> GenRequest {
    GenRequest {
        prompt: prompt.to_vec(),
        max_tokens: None,
        sampler: SamplerParams::greedy(),
        stop: Vec::new(),
        logprobs: None,
        constraint: None,
    }
}

/// `n` replicas of `slots` slots and `queue` waiting places each, and
/// each one's row counter.
fn replicas(n: usize, slots: usize, queue: usize) -> (Replicas, Vec<Arc<Mutex<usize>>>) {
    let (schedulers, rows) = (0..n)
        .map(|_| {
            let (toy, rows) = Toy::new(slots);
            (Scheduler::spawn(toy, Letters, queue), rows)
        })
        .unzip();
    (Replicas::new(schedulers), rows)
}

/// Waits (bounded) until `done` holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn loads(r: &Replicas) -> Vec<(usize, usize)> {
    r.loads().iter().map(|l| (l.active, l.waiting)).collect()
}

#[test]
fn requests_go_to_the_least_loaded_replica() {
    let (r, rows) = replicas(2, 2, 4);
    assert_eq!((r.len(), r.n_slots(), r.n_vocab()), (2, 4, N_VOCAB));
    let mut open = Vec::new();
    // Ties go to the lower index: 0, 1, 0, 1.
    for (k, want) in [0, 1, 0, 1].into_iter().enumerate() {
        let (s, rx, closed) = sink();
        assert_eq!(r.submit(endless(&[k as u32]), s), Ok(want), "request {k}");
        open.push((rx, closed));
    }
    eventually("both replicas generate", || {
        loads(&r) == [(2, 0), (2, 0)] && rows.iter().all(|n| *n.lock().unwrap() > 8)
    });
    // A client of replica 1 leaves: its slot frees, and the next request
    // goes there.
    open[1].1.store(true, Ordering::SeqCst);
    eventually("replica 1 frees the slot", || loads(&r)[1] == (1, 0));
    let (s, _rx, _closed) = sink();
    assert_eq!(r.submit(endless(&[5]), s), Ok(1));
    // Full slots: the fifth and sixth wait, one on each replica.
    let (s5, rx5, _c5) = sink();
    let (s6, rx6, _c6) = sink();
    assert_eq!(r.submit(endless(&[6]), s5), Ok(0));
    assert_eq!(r.submit(endless(&[7]), s6), Ok(1));
    eventually("four running, two waiting", || r.load() == (4, 2));
    let served: Vec<u64> = r.loads().iter().map(|l| l.served).collect();
    assert_eq!(served, [3, 4]);
    // Shutdown cancels running and waiting requests on every replica.
    r.shutdown();
    for rx in [&open[0].0, &open[2].0, &open[3].0, &rx5, &rx6] {
        let done = rx
            .iter()
            .find_map(|e| match e {
                Event::Done(u) => Some(u.finish),
                _ => None,
            })
            .expect("a Done event");
        assert_eq!(done, FinishReason::Cancelled);
    }
    let (s, _, _) = sink();
    assert_eq!(r.submit(endless(&[1]), s), Err(SubmitError::ShuttingDown));
}

#[test]
fn a_full_server_refuses_and_embeddings_are_routed_too() {
    let (r, _) = replicas(2, 1, 0);
    let mut open = Vec::new();
    for want in [0, 1] {
        let (s, rx, closed) = sink();
        assert_eq!(r.submit(endless(&[1]), s), Ok(want));
        open.push((rx, closed));
    }
    eventually("both slots taken", || loads(&r) == [(1, 0), (1, 0)]);
    let (s, _, _) = sink();
    assert_eq!(r.submit(endless(&[1]), s), Err(SubmitError::QueueFull(0)));
    // Replica 0's client leaves; an embedding request takes its slot.
    open[0].1.store(true, Ordering::SeqCst);
    eventually("replica 0 frees the slot", || loads(&r)[0] == (0, 0));
    let (tx, rx) = channel();
    let req = EmbedRequest {
        inputs: vec![vec![3, 4]],
        pooling: Pooling::Last,
    };
    let reply = Box::new(move |v| tx.send(v).unwrap());
    assert_eq!(r.submit_embed(req, reply), Ok(0));
    let vectors = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(vectors, [[1.0]]);
}
