//! `smelt train cnn|rnn`: the two training examples of smelt-nn, on the
//! CPU or a GPU through the same graph: a progress bar with the loss and
//! throughput, a checkpoint (safetensors), the held-out evaluation and the
//! loss curve as SVG.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use smelt::backend::gpu::{GpuOptions, best_hardware};
use smelt_nn::Device;
use smelt_nn::data::{Corpus, DEFAULT_CORPUS};
use smelt_nn::plot::{Series, svg};
use smelt_nn::train::{StepInfo, cnn, rnn};

/// `--backend`, `--device`, `--threads`, `--seed` and `--verbose` of the
/// neural-network commands.
#[derive(clap::Args, Clone)]
pub struct NnDeviceArgs {
    /// Compute backend: cpu, gpu, auto (a hardware GPU if there is one,
    /// else the CPU)
    #[arg(long, default_value = "cpu")]
    pub backend: NnBackend,
    /// GPU adapter: an index into `smelt devices`
    #[arg(long)]
    pub device: Option<usize>,
    /// CPU threads (default: the physical cores)
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Seed of the first weights, the data split and the shuffles
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the device and the work of each training step (GPU
    /// submissions and dispatches) on stderr
    #[arg(long)]
    pub verbose: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NnBackend {
    Cpu,
    Gpu,
    Auto,
}

impl NnDeviceArgs {
    pub fn open(&self) -> anyhow::Result<Device> {
        let gpu = match self.backend {
            NnBackend::Cpu => false,
            NnBackend::Gpu => true,
            NnBackend::Auto => self.device.is_some() || best_hardware().is_some(),
        };
        let dev = if gpu {
            let opts = GpuOptions {
                device: self.device,
                ..GpuOptions::default()
            };
            Device::gpu(&opts, self.seed)
                .context("opening the GPU (--backend cpu runs on the CPU)")?
        } else {
            let threads = self
                .threads
                .unwrap_or_else(smelt::backend::cpu::default_threads);
            Device::cpu(threads, self.seed)?
        };
        if self.verbose {
            eprintln!("smelt: device {}", dev.name());
        }
        Ok(dev)
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    model: Model,
}

#[derive(clap::Subcommand)]
enum Model {
    /// A LeNet-style CNN on scikit-learn's 8x8 handwritten digits
    Cnn(CnnArgs),
    /// A character-level LSTM language model on a text corpus
    Rnn(RnnArgs),
}

#[derive(clap::Args)]
struct CnnArgs {
    #[command(flatten)]
    dev: NnDeviceArgs,
    /// Training steps
    #[arg(long, default_value_t = cnn::CnnOptions::default().steps)]
    steps: usize,
    /// Images per step
    #[arg(long, default_value_t = cnn::CnnOptions::default().batch)]
    batch: usize,
    /// Adam's learning rate
    #[arg(long, default_value_t = cnn::CnnOptions::default().lr)]
    lr: f32,
    /// Directory for the checkpoint (lenet-digits.safetensors) and the loss
    /// curve (lenet-digits-loss.svg)
    #[arg(long, default_value = "smelt-runs")]
    out: PathBuf,
    /// Write each step's loss to this file, one per line
    #[arg(long)]
    losses: Option<PathBuf>,
    /// GPU: after training, time each kernel of one step on its own and
    /// print where the time goes
    #[arg(long)]
    profile: bool,
}

#[derive(clap::Args)]
struct RnnArgs {
    #[command(flatten)]
    dev: NnDeviceArgs,
    /// The text to learn: a file, or a directory whose files are read in
    /// name order
    #[arg(long, default_value = DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Training steps
    #[arg(long, default_value_t = rnn::RnnOptions::default().steps)]
    steps: usize,
    /// Sequences per step
    #[arg(long, default_value_t = rnn::RnnOptions::default().batch)]
    batch: usize,
    /// Characters per sequence
    #[arg(long, default_value_t = rnn::RnnOptions::default().seq)]
    seq: usize,
    /// LSTM hidden units
    #[arg(long, default_value_t = rnn::RnnOptions::default().hidden)]
    hidden: usize,
    /// Embedding width
    #[arg(long, default_value_t = rnn::RnnOptions::default().embed)]
    embed: usize,
    /// Adam's learning rate
    #[arg(long, default_value_t = rnn::RnnOptions::default().lr)]
    lr: f32,
    /// Directory for the checkpoint (char-lstm.safetensors) and the loss
    /// curve (char-lstm-loss.svg)
    #[arg(long, default_value = "smelt-runs")]
    out: PathBuf,
    /// Write each step's loss to this file, one per line
    #[arg(long)]
    losses: Option<PathBuf>,
    /// GPU: after training, time each kernel of one step on its own and
    /// print where the time goes
    #[arg(long)]
    profile: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.model {
        Model::Cnn(a) => train_cnn(a),
        Model::Rnn(a) => train_rnn(a),
    }
}

fn progress(steps: usize, unit: &'static str) -> (indicatif::ProgressBar, impl FnMut(StepInfo)) {
    let bar = indicatif::ProgressBar::new(steps as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} steps  loss {msg}  [{elapsed_precise}]",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let b = bar.clone();
    let on_step = move |s: StepInfo| {
        let rate = s.step as f64 * s.items as f64 / start.elapsed().as_secs_f64().max(1e-9);
        b.set_message(format!(
            "{:.4}  {:.0} {unit}/s  {:.1} steps/s",
            s.loss,
            rate,
            s.step as f64 / start.elapsed().as_secs_f64().max(1e-9)
        ));
        b.set_position(s.step as u64);
    };
    (bar, on_step)
}

fn print_profile(profile: &Option<Vec<(String, f64, usize)>>) {
    let Some(p) = profile else { return };
    let total: f64 = p.iter().map(|k| k.1).sum();
    eprintln!(
        "smelt: one step's kernels, each dispatch timed alone: {:.2} ms",
        total * 1e3
    );
    for (k, t, n) in p {
        eprintln!(
            "  {:>8.3} ms {:>5.1}%  {n:>4} x {k}",
            t * 1e3,
            t / total * 100.0
        );
    }
}

fn write_outputs(
    out: &Path,
    stem: &str,
    title: &str,
    losses: &[f32],
    losses_file: Option<&Path>,
    ck: &smelt_nn::safetensors::Tensors,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let ck_path = out.join(format!("{stem}.safetensors"));
    ck.save(&ck_path)
        .with_context(|| format!("writing {}", ck_path.display()))?;
    let points: Vec<(f64, f64)> = losses
        .iter()
        .enumerate()
        .map(|(i, &l)| ((i + 1) as f64, l as f64))
        .collect();
    let plot = svg(
        title,
        "step",
        "loss (nats)",
        &[Series {
            name: "training loss",
            points: &points,
            color: "#1f77b4",
        }],
    );
    let svg_path = out.join(format!("{stem}-loss.svg"));
    std::fs::write(&svg_path, plot).with_context(|| format!("writing {}", svg_path.display()))?;
    if let Some(f) = losses_file {
        let text: String = losses.iter().map(|l| format!("{l:.9}\n")).collect();
        std::fs::write(f, text).with_context(|| format!("writing {}", f.display()))?;
    }
    println!(
        "checkpoint {}\nloss curve {}",
        ck_path.display(),
        svg_path.display()
    );
    Ok(())
}

fn train_cnn(a: CnnArgs) -> anyhow::Result<()> {
    let mut dev = a.dev.open()?;
    let opts = cnn::CnnOptions {
        steps: a.steps,
        batch: a.batch,
        lr: a.lr,
        seed: a.dev.seed,
        profile: a.profile,
        ..Default::default()
    };
    let (bar, mut on_step) = progress(opts.steps, "images");
    let run = cnn::train(&mut dev, &opts, &mut on_step)?;
    bar.finish();
    if a.dev.verbose {
        eprintln!(
            "smelt: a training step is {} submission(s) and {} dispatches (ops on the CPU)",
            run.submissions_per_step, run.dispatches_per_step
        );
    }
    print_profile(&run.profile);
    println!(
        "trained {} steps of {} images in {:.1} s ({:.1} steps/s) on {}",
        opts.steps,
        opts.batch,
        run.train_seconds,
        opts.steps as f64 / run.train_seconds,
        dev.name()
    );
    let ck = cnn::save(&mut dev, &opts)?;
    write_outputs(
        &a.out,
        "lenet-digits",
        "LeNet on 8x8 digits",
        &run.losses,
        a.losses.as_deref(),
        &ck,
    )?;
    println!(
        "held-out digits {}, accuracy {:.1}%",
        run.test_size,
        run.accuracy * 100.0
    );
    Ok(())
}

fn train_rnn(a: RnnArgs) -> anyhow::Result<()> {
    let corpus = Corpus::load(&a.corpus)?;
    let mut dev = a.dev.open()?;
    let opts = rnn::RnnOptions {
        steps: a.steps,
        batch: a.batch,
        seq: a.seq,
        hidden: a.hidden,
        embed: a.embed,
        lr: a.lr,
        seed: a.dev.seed,
        profile: a.profile,
    };
    println!(
        "corpus {}: {} training and {} held-out bytes, vocabulary {}",
        a.corpus.display(),
        corpus.train.len(),
        corpus.held_out.len(),
        corpus.vocab.len()
    );
    let (bar, mut on_step) = progress(opts.steps, "chars");
    let run = rnn::train(&mut dev, &corpus, &opts, &mut on_step)?;
    bar.finish();
    if a.dev.verbose {
        eprintln!(
            "smelt: a training step is {} submission(s) and {} dispatches (ops on the CPU)",
            run.submissions_per_step, run.dispatches_per_step
        );
    }
    print_profile(&run.profile);
    println!(
        "trained {} steps of {}x{} characters in {:.1} s ({:.2} steps/s) on {}",
        opts.steps,
        opts.batch,
        opts.seq,
        run.train_seconds,
        opts.steps as f64 / run.train_seconds,
        dev.name()
    );
    let cfg = rnn::config(&corpus, &opts);
    let ck = rnn::save(&mut dev, &cfg, &corpus.vocab)?;
    write_outputs(
        &a.out,
        "char-lstm",
        "character LSTM",
        &run.losses,
        a.losses.as_deref(),
        &ck,
    )?;
    let text = rnn::sample(&mut dev, &cfg, &corpus.vocab, b"The ", 200, 0.7, a.dev.seed)?;
    println!("sample: The {}", String::from_utf8_lossy(&text));
    println!(
        "held-out cross-entropy {:.4} nats/char, unigram baseline {:.4} ({:.1}% below)",
        run.held_out,
        run.baseline,
        (1.0 - run.held_out / run.baseline) * 100.0
    );
    Ok(())
}
