//! Training the LeNet CNN on the 8×8 digits, and classifying with it.

use crate::data::{DIGIT_PIXELS, Digits};
use crate::device::Device;
use crate::error::{NnError, Result};
use crate::models::lenet::{CLASSES, LeNet, PARAMS, argmax_rows};
use crate::ops::optim::Adam;
use crate::safetensors::Tensors;
use crate::train::{StepInfo, checkpoint, restore};
use crate::vars::Rng;

#[derive(Clone, Debug)]
pub struct CnnOptions {
    pub steps: usize,
    pub batch: usize,
    pub lr: f32,
    /// Seeds the split, the shuffles and the first weights.
    pub seed: u64,
    /// After training, time each GPU kernel of one step on its own.
    pub profile: bool,
    /// The held-out share of the digits.
    pub held_out: f32,
}

impl Default for CnnOptions {
    fn default() -> Self {
        CnnOptions {
            steps: 1500,
            batch: 32,
            lr: 2e-3,
            seed: 1,
            profile: false,
            held_out: 0.2,
        }
    }
}

pub struct CnnRun {
    pub losses: Vec<f32>,
    pub accuracy: f64,
    pub test_size: usize,
    pub train_size: usize,
    /// Submissions and dispatches of one training step (GPU).
    pub submissions_per_step: u64,
    pub dispatches_per_step: usize,
    pub train_seconds: f64,
    /// Seconds and dispatches of each kernel in one step (`profile`).
    pub profile: Option<Vec<(String, f64, usize)>>,
}

/// The digits split as training uses it.
pub fn split(opts: &CnnOptions) -> Result<(Digits, Digits)> {
    Ok(Digits::load()?.split(opts.held_out, opts.seed))
}

/// Trains on `dev` (whose seed drew the first weights), calling `on_step`
/// after every step, then evaluates on the held-out split.
pub fn train(
    dev: &mut Device,
    opts: &CnnOptions,
    on_step: &mut dyn FnMut(StepInfo),
) -> Result<CnnRun> {
    if opts.batch == 0 || opts.steps == 0 {
        return Err(NnError::Graph("steps and batch must be at least 1".into()));
    }
    let (train_set, test_set) = split(opts)?;
    if train_set.len() < opts.batch {
        return Err(NnError::Graph(format!(
            "batch {} is larger than the {} training digits",
            opts.batch,
            train_set.len()
        )));
    }
    let model = LeNet::train(opts.batch, Adam::new(opts.lr))?;
    let loss = model.loss.expect("a training graph");
    let labels = model.labels.expect("a training graph");
    let mut exe = dev.compile(&model.graph, &[loss])?;
    let mut rng = Rng::new(opts.seed ^ 0x5eed);
    let mut order: Vec<usize> = (0..train_set.len()).collect();
    let mut at = order.len();
    let mut losses = Vec::with_capacity(opts.steps);
    let before = dev.stats();
    let start = std::time::Instant::now();
    for step in 0..opts.steps {
        if at + opts.batch > order.len() {
            rng.shuffle(&mut order);
            at = 0;
        }
        let (images, ys) = train_set.batch(&order[at..at + opts.batch]);
        at += opts.batch;
        let out = dev.run(&mut exe, &[(model.images, &images), (labels, &ys)])?;
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
            items: opts.batch,
        });
    }
    let train_seconds = start.elapsed().as_secs_f64();
    let profile = if opts.profile {
        dev.profile(&exe)?
    } else {
        None
    };
    let after = dev.stats();
    let (accuracy, _) = evaluate(dev, &test_set)?;
    Ok(CnnRun {
        losses,
        accuracy,
        test_size: test_set.len(),
        train_size: train_set.len(),
        submissions_per_step: (after.submissions - before.submissions) / opts.steps as u64,
        dispatches_per_step: exe.ops_per_run(),
        train_seconds,
        profile,
    })
}

/// Batch size of inference.
const INFER_BATCH: usize = 64;

/// Predicted classes of `images` (`[n, 64]` pixels in 0..1), in batches
/// (the last padded with blank images).
pub fn classify(dev: &mut Device, images: &[f32]) -> Result<Vec<usize>> {
    let n = images.len() / DIGIT_PIXELS;
    let model = LeNet::infer(INFER_BATCH)?;
    let mut exe = dev.compile(&model.graph, &[model.logits])?;
    let mut preds = Vec::with_capacity(n);
    for start in (0..n).step_by(INFER_BATCH) {
        let take = INFER_BATCH.min(n - start);
        let mut batch = images[start * DIGIT_PIXELS..(start + take) * DIGIT_PIXELS].to_vec();
        batch.resize(INFER_BATCH * DIGIT_PIXELS, 0.0);
        let out = dev.run(&mut exe, &[(model.images, &batch)])?;
        preds.extend(argmax_rows(&out[0], CLASSES).into_iter().take(take));
    }
    Ok(preds)
}

/// Accuracy on a labelled set, and the predictions.
pub fn evaluate(dev: &mut Device, set: &Digits) -> Result<(f64, Vec<usize>)> {
    let preds = classify(dev, &set.images)?;
    let right = preds
        .iter()
        .zip(&set.labels)
        .filter(|(p, l)| **p as f32 == **l)
        .count();
    Ok((right as f64 / set.len().max(1) as f64, preds))
}

fn param_names() -> Vec<String> {
    PARAMS.iter().map(|(n, _)| n.to_string()).collect()
}

pub fn save(dev: &mut Device, opts: &CnnOptions) -> Result<Tensors> {
    checkpoint(
        dev,
        &param_names(),
        &[
            ("model", "lenet-digits".into()),
            ("seed", opts.seed.to_string()),
            ("held_out", opts.held_out.to_string()),
        ],
    )
}

/// Loads a checkpoint's weights into `dev` (compiling the inference graph
/// first, so the variables exist).
pub fn load(dev: &mut Device, t: &Tensors) -> Result<()> {
    if t.metadata.get("model").map(String::as_str) != Some("lenet-digits") {
        return Err(NnError::Graph(
            "not a LeNet digits checkpoint (metadata model != lenet-digits)".into(),
        ));
    }
    let model = LeNet::infer(INFER_BATCH)?;
    dev.compile(&model.graph, &[model.logits])?;
    restore(dev, t, &param_names())
}
