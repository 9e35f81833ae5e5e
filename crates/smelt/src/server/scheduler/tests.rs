//! The scheduler's bookkeeping on a toy engine whose next token is always
//! `last + 1` (so every output is known in advance), and which checks that
//! each slot's rows continue what the slot holds. The real model runs in
//! the server's integration tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::sample::SamplerParams;
use crate::server::FinishReason;

const N_VOCAB: usize = 8;
/// The toy's end-of-generation token.
const EOG: u32 = 7;

struct Toy {
    n_slots: usize,
    n_ctx: usize,
    lens: Vec<usize>,
    logits: Vec<f32>,
    /// Every decode call's rows.
    log: Arc<Mutex<Vec<Vec<Row>>>>,
    /// When set, each decode waits for a message first.
    gate: Option<Receiver<()>>,
}

impl Toy {
    fn new(n_slots: usize, n_ctx: usize) -> (Self, Arc<Mutex<Vec<Vec<Row>>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let toy = Toy {
            n_slots,
            n_ctx,
            lens: vec![0; n_slots],
            logits: Vec::new(),
            log: Arc::clone(&log),
            gate: None,
        };
        (toy, log)
    }
}

impl Engine for Toy {
    fn n_slots(&self) -> usize {
        self.n_slots
    }
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    fn n_vocab(&self) -> usize {
        N_VOCAB
    }
    fn n_batch(&self) -> usize {
        4
    }
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        if let Some(gate) = &self.gate {
            gate.recv().map_err(|e| e.to_string())?;
        }
        self.log.lock().unwrap().push(rows.to_vec());
        self.logits.clear();
        for r in rows {
            if r.pos != self.lens[r.seq] || r.pos >= self.n_ctx {
                return Err(format!("row {r:?} does not continue slot {}", r.seq));
            }
            self.lens[r.seq] += 1;
            if r.logits {
                let mut row = [0.0; N_VOCAB];
                row[(r.token as usize + 1) % N_VOCAB] = 10.0;
                self.logits.extend_from_slice(&row);
            }
        }
        Ok(&self.logits)
    }
    fn truncate(&mut self, slot: usize, len: usize) {
        self.lens[slot] = self.lens[slot].min(len);
    }
    fn n_embd(&self) -> usize {
        2
    }
    /// Each row's hidden state is `(token, 1)`.
    fn hidden(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        self.log.lock().unwrap().push(rows.to_vec());
        self.logits.clear();
        for r in rows {
            if r.pos != self.lens[r.seq] || r.pos >= self.n_ctx {
                return Err(format!("row {r:?} does not continue slot {}", r.seq));
            }
            self.lens[r.seq] += 1;
            self.logits.extend_from_slice(&[r.token as f32, 1.0]);
        }
        Ok(&self.logits)
    }
}

struct Letters;

impl Vocab for Letters {
    fn is_eog(&self, id: u32) -> bool {
        id == EOG
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

fn sink() -> (Box<dyn Sink>, Receiver<Event>, Arc<AtomicBool>) {
    let (tx, rx) = channel();
    let closed = Arc::new(AtomicBool::new(false));
    let sink = ChanSink {
        tx,
        closed: Arc::clone(&closed),
    };
    (Box::new(sink), rx, closed)
}

fn request(prompt: &[u32], max_tokens: Option<usize>, stop: &[&str]) -> GenRequest {
    GenRequest {
        prompt: prompt.to_vec(),
        max_tokens,
        sampler: SamplerParams::greedy(),
        stop: stop.iter().map(|s| s.to_string()).collect(),
        logprobs: None,
        constraint: None,
    }
}

/// All text until the end, and the usage.
fn collect(rx: &Receiver<Event>) -> (String, Usage) {
    let mut text = String::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(10)).expect("an event") {
            Event::Text(t) => text.push_str(&t),
            Event::Logprob(_) => {}
            Event::Done(u) => return (text, u),
            Event::Error(e) => panic!("error: {e}"),
        }
    }
}

#[test]
fn generates_until_eog_max_tokens_or_stop() {
    let (toy, _) = Toy::new(1, 64);
    let sched = Scheduler::spawn(toy, Letters, 4);
    // (prompt, max_tokens, stop strings, text, finish)
    type Case<'a> = (
        &'a [u32],
        Option<usize>,
        &'a [&'a str],
        &'a str,
        FinishReason,
    );
    let cases: [Case; 4] = [
        (&[0, 1], None, &[], "cdefg", FinishReason::Stop),
        (&[1], Some(2), &[], "cd", FinishReason::Length),
        (&[1], None, &["ef"], "cd", FinishReason::Stop),
        // "de" is held back as a possible start of "dex", then released.
        (&[1], None, &["dex"], "cdefg", FinishReason::Stop),
    ];
    for (prompt, max, stop, want, finish) in cases {
        let (s, rx, _) = sink();
        sched.submit(request(prompt, max, stop), s).unwrap();
        let (text, usage) = collect(&rx);
        assert_eq!(
            (text.as_str(), usage.finish),
            (want, finish),
            "{prompt:?} {stop:?}"
        );
        assert_eq!(usage.prompt_tokens, prompt.len());
    }
}

#[test]
fn context_end_is_length_and_long_prompts_are_refused() {
    let (toy, _) = Toy::new(1, 4);
    let sched = Scheduler::spawn(toy, Letters, 4);
    let (s, rx, _) = sink();
    sched.submit(request(&[0, 0], None, &[]), s).unwrap();
    // Positions 0 and 1 hold the prompt; 2 and 3 the first two tokens; the
    // third cannot be fed.
    let (text, usage) = collect(&rx);
    assert_eq!((text.as_str(), usage.finish), ("bcd", FinishReason::Length));
    let (s, _, _) = sink();
    assert_eq!(
        sched.submit(request(&[0; 4], None, &[]), s),
        Err(SubmitError::PromptTooLong {
            tokens: 4,
            n_ctx: 4
        })
    );
    let (s, _, _) = sink();
    assert_eq!(
        sched.submit(request(&[], None, &[]), s),
        Err(SubmitError::EmptyPrompt)
    );
}

#[test]
fn active_sequences_share_each_forward_pass() {
    let (toy, log) = Toy::new(3, 64);
    let (gate_tx, gate_rx) = channel();
    let toy = Toy {
        gate: Some(gate_rx),
        ..toy
    };
    let sched = Scheduler::spawn(toy, Letters, 0);
    let gate_tx = gate_tx;
    let mut rxs = Vec::new();
    for start in [0u32, 1, 2] {
        let (s, rx, _) = sink();
        sched.submit(request(&[start], Some(3), &[]), s).unwrap();
        rxs.push(rx);
    }
    // Three slots, no queue: a fourth is refused, whether the three are
    // running yet or still wait for the worker (which may be held at the
    // gate in a pass it started with the first alone).
    let (s, _, _) = sink();
    assert!(matches!(
        sched.submit(request(&[0], None, &[]), s),
        Err(SubmitError::QueueFull(_))
    ));
    for _ in 0..100 {
        let _ = gate_tx.send(());
    }
    let texts: Vec<String> = rxs.iter().map(|rx| collect(rx).0).collect();
    assert_eq!(texts, ["bcd", "cde", "def"]);
    // Some pass decoded a token for all three slots at once.
    let log = log.lock().unwrap();
    assert!(
        log.iter().any(|rows| {
            let mut seqs: Vec<usize> = rows.iter().filter(|r| r.logits).map(|r| r.seq).collect();
            seqs.dedup();
            seqs.len() == 3
        }),
        "{log:?}"
    );
}

#[test]
fn closed_sinks_cancel_and_free_their_slot() {
    let (toy, _) = Toy::new(1, 64);
    let (gate_tx, gate_rx) = channel();
    let toy = Toy {
        gate: Some(gate_rx),
        ..toy
    };
    let sched = Scheduler::spawn(toy, Letters, 2);
    // Dropped before `sched`, so a failing assert cannot leave the
    // scheduler thread blocked on the gate while the handle joins it.
    let gate_tx = gate_tx;
    // The first request streams one token, then its listener leaves.
    let (s, rx, closed) = sink();
    sched.submit(request(&[0], None, &[]), s).unwrap();
    gate_tx.send(()).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(Event::Text("b".into()))
    );
    closed.store(true, Ordering::SeqCst);
    // A second one waits for the slot; a third waits while it is closed.
    let (s2, rx2, _) = sink();
    sched.submit(request(&[2], None, &[]), s2).unwrap();
    let (s3, rx3, closed3) = sink();
    closed3.store(true, Ordering::SeqCst);
    sched.submit(request(&[2], None, &[]), s3).unwrap();
    for _ in 0..100 {
        let _ = gate_tx.send(());
    }
    // The step already waiting on the gate may still deliver one token.
    let (text, usage) = collect(&rx);
    assert_eq!(usage.finish, FinishReason::Cancelled);
    assert!(text.is_empty() || text == "c", "{text:?}");
    assert_eq!(
        collect(&rx2),
        ("defg".to_string(), collect_usage(&rx2, 1, 4))
    );
    assert_eq!(collect(&rx3).1.finish, FinishReason::Cancelled);
}

fn collect_usage(_: &Receiver<Event>, prompt_tokens: usize, completion_tokens: usize) -> Usage {
    Usage {
        finish: FinishReason::Stop,
        prompt_tokens,
        completion_tokens,
        cached_tokens: 0,
    }
}

#[test]
fn a_slot_reuses_the_prompt_prefix_it_holds() {
    let (toy, _) = Toy::new(2, 64);
    let sched = Scheduler::spawn(toy, Letters, 4);
    let (s, rx, _) = sink();
    sched
        .submit(request(&[0, 1, 2, 3], Some(1), &[]), s)
        .unwrap();
    assert_eq!(collect(&rx).1.cached_tokens, 0);
    let (s, rx, _) = sink();
    sched
        .submit(request(&[0, 1, 2, 5, 4], Some(1), &[]), s)
        .unwrap();
    let (text, usage) = collect(&rx);
    assert_eq!((text.as_str(), usage.cached_tokens), ("f", 3));
}

#[test]
fn a_finished_request_frees_its_slot_before_done_arrives() {
    // One slot and no queue, as `smelt chat` runs: each next turn is
    // submitted as soon as the last one's Done arrives.
    let (toy, _) = Toy::new(1, 64);
    let sched = Scheduler::spawn(toy, Letters, 0);
    for _ in 0..50 {
        let (s, rx, _) = sink();
        sched.submit(request(&[3], Some(2), &[]), s).unwrap();
        assert_eq!(collect(&rx).0, "ef");
    }
}

/// With logprobs asked for, each generated token's log-probability comes
/// before its text; the end-of-generation token has none.
#[test]
fn logprobs_come_before_each_tokens_text() {
    let (toy, _) = Toy::new(1, 64);
    let sched = Scheduler::spawn(toy, Letters, 4);
    let (sink, rx, _) = sink();
    let mut req = request(&[3], None, &[]);
    req.logprobs = Some(2);
    sched.submit(req, sink).unwrap();
    let mut events = Vec::new();
    loop {
        let e = rx.recv_timeout(Duration::from_secs(10)).expect("an event");
        let done = matches!(e, Event::Done(_));
        events.push(e);
        if done {
            break;
        }
    }
    // 3 → 4, 5, 6 (e, f, g), then 7: the end of generation.
    let logprobs: Vec<&TokenLogprob> = events
        .iter()
        .filter_map(|e| match e {
            Event::Logprob(l) => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(
        logprobs.iter().map(|l| l.token).collect::<Vec<_>>(),
        [4, 5, 6]
    );
    // One logit of 10 among eight zeros.
    let want = -(1.0f64 + 7.0 * (-10.0f64).exp()).ln() as f32;
    for l in &logprobs {
        assert!((l.logprob - want).abs() < 1e-6, "{l:?}");
        assert_eq!(l.top.len(), 2);
        assert_eq!(l.top[0].0, l.token);
    }
    assert!(matches!(&events[0], Event::Logprob(_)));
}

/// Embedding jobs run between steps in a free slot, each input its own
/// sequence from position 0, pooled and normalized; bad ones are refused.
#[test]
fn embeds_each_input_in_a_free_slot() {
    let (toy, log) = Toy::new(2, 8);
    let sched = Scheduler::spawn(toy, Letters, 4);
    // A generation holds one slot meanwhile.
    let (s, rx, _) = sink();
    sched.submit(request(&[0], None, &[]), s).unwrap();
    let embed = |inputs: Vec<Vec<u32>>, pooling| {
        let (tx, rx) = channel();
        let reply: EmbedReply = Box::new(move |r| tx.send(r).unwrap());
        sched
            .submit_embed(EmbedRequest { inputs, pooling }, reply)
            .map(|()| rx.recv_timeout(Duration::from_secs(10)).unwrap())
    };
    use crate::model::Pooling;
    let got = embed(vec![vec![3], vec![1, 2]], Pooling::Last)
        .unwrap()
        .unwrap();
    let unit = |x: f32, y: f32| {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    };
    assert_eq!(got, vec![unit(3.0, 1.0), unit(2.0, 1.0)]);
    let got = embed(vec![vec![1, 2]], Pooling::Mean).unwrap().unwrap();
    assert_eq!(got, vec![unit(1.5, 1.0)]);
    assert_eq!(collect(&rx).0, "bcdefg");
    // Each input was read from position 0.
    let log = log.lock().unwrap();
    assert!(
        log.iter()
            .any(|rows| rows.len() == 2 && rows[0].pos == 0 && !rows[0].logits)
    );

    assert_eq!(
        embed(vec![], Pooling::Last).err(),
        Some(SubmitError::EmptyPrompt)
    );
    assert_eq!(
        embed(vec![vec![1], vec![]], Pooling::Last).err(),
        Some(SubmitError::EmptyInput(1))
    );
    assert_eq!(
        embed(vec![vec![1; 9]], Pooling::Last).err(),
        Some(SubmitError::InputTooLong {
            index: 0,
            tokens: 9,
            n_ctx: 8
        })
    );
}
