//! Training the character-level LSTM on a corpus, its held-out
//! cross-entropy, and sampling text from it.

use crate::data::Corpus;
use crate::device::Device;
use crate::error::{NnError, Result};
use crate::models::char_lstm::{CharLstm, Config};
use crate::ops::optim::Adam;
use crate::safetensors::Tensors;
use crate::train::{StepInfo, checkpoint, restore};
use crate::vars::Rng;

#[derive(Clone, Debug)]
pub struct RnnOptions {
    pub steps: usize,
    pub batch: usize,
    /// Characters per sequence (steps of backpropagation through time).
    pub seq: usize,
    pub hidden: usize,
    pub embed: usize,
    pub lr: f32,
    pub seed: u64,
    /// After training, time each GPU kernel of one step on its own.
    pub profile: bool,
}

impl Default for RnnOptions {
    fn default() -> Self {
        RnnOptions {
            steps: 1500,
            batch: 32,
            seq: 64,
            hidden: 128,
            embed: 32,
            lr: 3e-3,
            seed: 1,
            profile: false,
        }
    }
}

pub struct RnnRun {
    pub losses: Vec<f32>,
    /// Nats per character on the held-out tenth.
    pub held_out: f64,
    pub baseline: f64,
    pub submissions_per_step: u64,
    pub dispatches_per_step: usize,
    pub train_seconds: f64,
    /// Seconds and dispatches of each kernel in one step (`profile`).
    pub profile: Option<Vec<(String, f64, usize)>>,
}

pub fn config(corpus: &Corpus, opts: &RnnOptions) -> Config {
    Config {
        vocab: corpus.vocab.len(),
        embed: opts.embed,
        hidden: opts.hidden,
    }
}

/// Trains on random windows of the training text (zero initial state).
pub fn train(
    dev: &mut Device,
    corpus: &Corpus,
    opts: &RnnOptions,
    on_step: &mut dyn FnMut(StepInfo),
) -> Result<RnnRun> {
    if opts.batch == 0 || opts.seq == 0 || opts.steps == 0 || opts.hidden == 0 || opts.embed == 0 {
        return Err(NnError::Graph(
            "steps, batch, seq, hidden and embed must be at least 1".into(),
        ));
    }
    if corpus.train.len() <= opts.seq + 1 {
        return Err(NnError::Graph(format!(
            "the text is shorter than a sequence of {}",
            opts.seq
        )));
    }
    let cfg = config(corpus, opts);
    let model = CharLstm::train(&cfg, opts.seq, opts.batch, Adam::new(opts.lr))?;
    let loss = model.loss.expect("a training graph");
    let targets = model.targets.expect("a training graph");
    let mut exe = dev.compile(&model.graph, &[loss])?;
    let zeros = vec![0f32; opts.batch * opts.hidden];
    let mut rng = Rng::new(opts.seed ^ 0x7e47);
    let mut losses = Vec::with_capacity(opts.steps);
    let before = dev.stats();
    let start = std::time::Instant::now();
    let (t, b) = (opts.seq, opts.batch);
    for step in 0..opts.steps {
        // ids [T, B] and targets [T·B], time-major.
        let starts: Vec<usize> = (0..b)
            .map(|_| rng.below(corpus.train.len() - t - 1))
            .collect();
        let mut ids = vec![0f32; t * b];
        let mut next = vec![0f32; t * b];
        for (bi, &s) in starts.iter().enumerate() {
            for ti in 0..t {
                ids[ti * b + bi] = corpus.train[s + ti] as f32;
                next[ti * b + bi] = corpus.train[s + ti + 1] as f32;
            }
        }
        let out = dev.run(
            &mut exe,
            &[
                (model.ids, &ids),
                (targets, &next),
                (model.h0, &zeros),
                (model.c0, &zeros),
            ],
        )?;
        let l = out[0][0];
        if !l.is_finite() {
            return Err(NnError::Graph(format!(
                "the loss diverged at step {step} ({l})"
            )));
        }
        losses.push(l);
        on_step(StepInfo {
            step: step + 1,
            steps: opts.steps,
            loss: l,
            items: t * b,
        });
    }
    let train_seconds = start.elapsed().as_secs_f64();
    let profile = if opts.profile {
        dev.profile(&exe)?
    } else {
        None
    };
    let after = dev.stats();
    let held_out = evaluate(dev, &cfg, &corpus.held_out, opts.seq)?;
    Ok(RnnRun {
        losses,
        held_out,
        baseline: corpus.unigram_baseline(),
        submissions_per_step: (after.submissions - before.submissions) / opts.steps as u64,
        dispatches_per_step: exe.ops_per_run(),
        train_seconds,
        profile,
    })
}

/// Streams read side by side in evaluation.
const EVAL_STREAMS: usize = 16;

/// Mean cross-entropy (nats per character) of predicting each next id of
/// `ids`, the text cut into `EVAL_STREAMS` streams that carry their state
/// from window to window.
pub fn evaluate(dev: &mut Device, cfg: &Config, ids: &[u32], seq: usize) -> Result<f64> {
    let b = EVAL_STREAMS;
    let per = (ids.len().saturating_sub(1)) / b;
    let windows = per / seq;
    if windows == 0 {
        return Err(NnError::Graph(
            "the held-out text is too short to evaluate".into(),
        ));
    }
    let model = CharLstm::eval(cfg, seq, b)?;
    let loss = model.loss.expect("an eval graph");
    let targets = model.targets.expect("an eval graph");
    let mut exe = dev.compile(&model.graph, &[loss, model.hs, model.cs])?;
    let h = cfg.hidden;
    let mut state_h = vec![0f32; b * h];
    let mut state_c = vec![0f32; b * h];
    let mut total = 0.0f64;
    for w in 0..windows {
        let mut x = vec![0f32; seq * b];
        let mut y = vec![0f32; seq * b];
        for bi in 0..b {
            for ti in 0..seq {
                let at = bi * per + w * seq + ti;
                x[ti * b + bi] = ids[at] as f32;
                y[ti * b + bi] = ids[at + 1] as f32;
            }
        }
        let out = dev.run(
            &mut exe,
            &[
                (model.ids, &x),
                (targets, &y),
                (model.h0, &state_h),
                (model.c0, &state_c),
            ],
        )?;
        total += out[0][0] as f64;
        let last = (seq - 1) * b * h;
        state_h.copy_from_slice(&out[1][last..]);
        state_c.copy_from_slice(&out[2][last..]);
    }
    Ok(total / windows as f64)
}

/// `length` bytes sampled after `prompt` at `temperature` (greedy at 0).
pub fn sample(
    dev: &mut Device,
    cfg: &Config,
    vocab: &[u8],
    prompt: &[u8],
    length: usize,
    temperature: f32,
    seed: u64,
) -> Result<Vec<u8>> {
    let model = CharLstm::sampler(cfg)?;
    let mut exe = dev.compile(&model.graph, &[model.logits, model.hs, model.cs])?;
    let mut h = vec![0f32; cfg.hidden];
    let mut c = vec![0f32; cfg.hidden];
    let mut rng = Rng::new(seed);
    let id_of = |byte: u8| vocab.iter().position(|&v| v == byte);
    let prompt: Vec<usize> = if prompt.is_empty() {
        vec![0]
    } else {
        prompt.iter().filter_map(|&b| id_of(b)).collect()
    };
    if prompt.is_empty() {
        return Err(NnError::Feed(
            "no byte of the prompt is in the model's vocabulary".into(),
        ));
    }
    let mut out = Vec::with_capacity(length);
    let mut next = prompt[0];
    let mut logits = Vec::new();
    for i in 0..prompt.len() + length {
        let r = dev.run(
            &mut exe,
            &[(model.ids, &[next as f32]), (model.h0, &h), (model.c0, &c)],
        )?;
        logits.clone_from(&r[0]);
        h.copy_from_slice(&r[1]);
        c.copy_from_slice(&r[2]);
        if i + 1 < prompt.len() {
            next = prompt[i + 1];
            continue;
        }
        next = pick(&logits, temperature, &mut rng);
        out.push(vocab[next]);
        if out.len() == length {
            break;
        }
    }
    Ok(out)
}

fn pick(logits: &[f32], temperature: f32, rng: &mut Rng) -> usize {
    let best =
        logits.iter().enumerate().fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &v)| if v > b.1 { (i, v) } else { b },
        );
    if temperature <= 0.0 {
        return best.0;
    }
    let w: Vec<f64> = logits
        .iter()
        .map(|&v| (((v - best.1) / temperature) as f64).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let mut u = rng.uniform() as f64 * total;
    for (i, wi) in w.iter().enumerate() {
        u -= wi;
        if u <= 0.0 {
            return i;
        }
    }
    best.0
}

fn param_names(cfg: &Config) -> Vec<String> {
    cfg.params().iter().map(|(n, _)| n.to_string()).collect()
}

pub fn save(dev: &mut Device, cfg: &Config, vocab: &[u8]) -> Result<Tensors> {
    let vocab_list: Vec<String> = vocab.iter().map(|b| b.to_string()).collect();
    checkpoint(
        dev,
        &param_names(cfg),
        &[
            ("model", "char-lstm".into()),
            ("embed", cfg.embed.to_string()),
            ("hidden", cfg.hidden.to_string()),
            ("vocab", vocab_list.join(",")),
        ],
    )
}

/// The configuration and vocabulary of a checkpoint, its weights loaded
/// into `dev`.
pub fn load(dev: &mut Device, t: &Tensors) -> Result<(Config, Vec<u8>)> {
    let meta = |k: &str| {
        t.metadata
            .get(k)
            .ok_or_else(|| NnError::Graph(format!("not a char-lstm checkpoint: no metadata {k}")))
    };
    if meta("model")? != "char-lstm" {
        return Err(NnError::Graph(
            "not a char-lstm checkpoint (metadata model != char-lstm)".into(),
        ));
    }
    let num = |k: &str| -> Result<usize> {
        meta(k)?
            .parse()
            .map_err(|_| NnError::Graph(format!("metadata {k} is not a number")))
    };
    let vocab: Vec<u8> = meta("vocab")?
        .split(',')
        .map(|b| b.parse::<u8>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| NnError::Graph("metadata vocab is not a list of bytes".into()))?;
    let cfg = Config {
        vocab: vocab.len(),
        embed: num("embed")?,
        hidden: num("hidden")?,
    };
    if cfg.vocab == 0 || cfg.embed == 0 || cfg.hidden == 0 {
        return Err(NnError::Graph("checkpoint sizes must be at least 1".into()));
    }
    let model = CharLstm::sampler(&cfg)?;
    dev.compile(&model.graph, &[model.logits])?;
    restore(dev, t, &param_names(&cfg))?;
    Ok((cfg, vocab))
}
