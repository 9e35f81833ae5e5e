//! `smelt bench`: prompt processing and generation speed, as llama-bench
//! measures them.
//!
//! - `ppN`: N random tokens in one batch (logits for the last only), from an
//!   empty cache.
//! - `tgN`: N tokens decoded one at a time from an empty cache, each a
//!   random id.
//! - With `-d D`, the cache is first filled with D random tokens, once,
//!   untimed and uncounted, and each run (`ppN @ dD`, `tgN @ dD`) continues
//!   from there.
//!
//! Each test runs once to warm up, then `-r` times; the table gives the mean
//! and sample standard deviation of tokens per second.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use smelt::backend::OpTime;
use smelt::model::{Batch, Session, SessionParams};

use crate::engine::{self, BackendArgs, PerToken};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model (default: SmolLM2-135M-Instruct Q4_1)
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Prompt tokens (0 skips the test)
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Generated tokens (0 skips the test)
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Tokens already in the KV cache when each test starts, filled
    /// untimed: prompt and generation speed at that depth (llama-bench's -d)
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    n_depth: usize,
    /// Repetitions of each test
    #[arg(short = 'r', long, default_value_t = 5)]
    repetitions: usize,
    /// Output format: md or json
    #[arg(short = 'o', long, default_value = "md")]
    output: Format,
    #[command(flatten)]
    backend: BackendArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Md,
    Json,
}

struct Result {
    test: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    /// Tokens per second of each repetition.
    samples: Vec<f64>,
    /// The backend's work per token over the repetitions.
    work: PerToken,
}

impl Result {
    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len() as f64
    }

    fn stddev(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|s| (s - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// `--perf`: device time per kernel over one test (since `before`), per
/// token, on stderr; nothing where the backend does not time its kernels.
fn perf_table(s: &Session, test: &str, before: &[OpTime], tokens: usize) {
    let mut rows: Vec<OpTime> = s
        .model()
        .backend_op_times()
        .into_iter()
        .map(|t| {
            let b = before.iter().find(|b| b.kernel == t.kernel);
            OpTime {
                calls: t.calls - b.map_or(0, |b| b.calls),
                seconds: t.seconds - b.map_or(0.0, |b| b.seconds),
                kernel: t.kernel,
            }
        })
        .filter(|t| t.calls > 0)
        .collect();
    if rows.is_empty() {
        return;
    }
    rows.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    let total: f64 = rows.iter().map(|t| t.seconds).sum();
    let n = tokens.max(1) as f64;
    eprintln!(
        "smelt: {test}: device time per token {:.1} µs",
        total / n * 1e6
    );
    eprintln!("| kernel | calls/token | µs/token | share |");
    eprintln!("| --- | ---: | ---: | ---: |");
    for t in rows {
        eprintln!(
            "| {} | {:.2} | {:.2} | {:.1}% |",
            t.kernel,
            t.calls as f64 / n,
            t.seconds / n * 1e6,
            100.0 * t.seconds / total
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.repetitions == 0 {
        bail!("-r 0 measures nothing");
    }
    if args.n_prompt == 0 && args.n_gen == 0 {
        bail!("both -p and -n are 0: nothing to measure");
    }
    let depth = args.n_depth;
    let params = SessionParams {
        n_ctx: Some(depth + args.n_prompt.max(args.n_gen).max(1)),
        n_batch: args.n_prompt.clamp(1, 512),
        ..SessionParams::default()
    };
    let mut m = engine::open(args.model.as_deref(), &args.backend, params)?;
    let threads = args
        .backend
        .threads
        .unwrap_or_else(smelt::backend::cpu::default_threads);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let vocab = m.session.config().n_vocab as u64;
    let mut random = move || (rng.next() % vocab) as u32;
    // A test's name, with its depth as llama-bench names it.
    let name = |test: String| match depth {
        0 => test,
        d => format!("{test} @ d{d}"),
    };
    // The depth's tokens, decoded once before any count or timing; each
    // run forgets what came after them.
    if depth > 0 {
        eprintln!("smelt: filling the cache to depth {depth}");
        let tokens: Vec<u32> = (0..depth).map(|_| random()).collect();
        m.session.decode(&Batch::sequence(&tokens, 0, 0))?;
    }

    let mut results = Vec::new();
    if args.n_prompt > 0 {
        let mut run = |s: &mut Session| -> anyhow::Result<f64> {
            s.truncate(0, depth);
            let tokens: Vec<u32> = (0..args.n_prompt).map(|_| random()).collect();
            let start = Instant::now();
            s.decode(&Batch::sequence(&tokens, depth, 0))?;
            Ok(args.n_prompt as f64 / start.elapsed().as_secs_f64())
        };
        let test = name(format!("pp{}", args.n_prompt));
        progress(&test, None, args.repetitions);
        run(&mut m.session)?;
        let before = m.session.model().backend_stats();
        let devices_before = m.session.model().backend_device_stats();
        let times = m.session.model().backend_op_times();
        let samples = (0..args.repetitions)
            .map(|i| {
                let tps = run(&mut m.session)?;
                progress(&test, Some((i, tps)), args.repetitions);
                Ok(tps)
            })
            .collect::<anyhow::Result<_>>()?;
        let after = m.session.model().backend_stats();
        let tokens = args.n_prompt * args.repetitions;
        if args.backend.verbose {
            let devices_after = m.session.model().backend_device_stats();
            engine::report_devices(&devices_before, &devices_after, tokens, &test);
        }
        perf_table(&m.session, &test, &times, tokens);
        results.push(Result {
            test,
            n_prompt: args.n_prompt,
            n_gen: 0,
            n_depth: depth,
            samples,
            work: PerToken::between(before, after, args.n_prompt * args.repetitions),
        });
    }
    if args.n_gen > 0 {
        let mut run = |s: &mut Session, n: usize| -> anyhow::Result<f64> {
            s.truncate(0, depth);
            let start = Instant::now();
            for pos in depth..depth + n {
                s.decode(&Batch::sequence(&[random()], pos, 0))?;
            }
            Ok(n as f64 / start.elapsed().as_secs_f64())
        };
        let test = name(format!("tg{}", args.n_gen));
        progress(&test, None, args.repetitions);
        run(&mut m.session, 1)?;
        let before = m.session.model().backend_stats();
        let devices_before = m.session.model().backend_device_stats();
        let times = m.session.model().backend_op_times();
        let host = m.session.host_times();
        let samples = (0..args.repetitions)
            .map(|i| {
                let tps = run(&mut m.session, args.n_gen)?;
                progress(&test, Some((i, tps)), args.repetitions);
                Ok(tps)
            })
            .collect::<anyhow::Result<_>>()?;
        let after = m.session.model().backend_stats();
        let tokens = args.n_gen * args.repetitions;
        if args.backend.verbose {
            let devices_after = m.session.model().backend_device_stats();
            engine::report_devices(&devices_before, &devices_after, tokens, &test);
            let now = m.session.host_times();
            let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / tokens as f64;
            eprintln!(
                "smelt: {test}: host time per token: recording {:.1} µs, submit to logits {:.1} µs",
                per(now.recording - host.recording),
                per(now.finishing - host.finishing)
            );
        }
        perf_table(&m.session, &test, &times, tokens);
        results.push(Result {
            test,
            n_prompt: 0,
            n_depth: depth,
            n_gen: args.n_gen,
            samples,
            work: PerToken::between(before, after, args.n_gen * args.repetitions),
        });
    }
    // Only a backend that counts its work (the GPU) reports it.
    let counted = results.iter().any(|r| r.work.dispatches > 0.0);
    if args.backend.verbose {
        for r in &results {
            r.work.report(&r.test);
        }
    }

    let model = m.session.model();
    let arch = m.session.config().arch.name();
    let size_label = m
        .file
        .get("general.size_label")
        .and_then(|v| v.as_str())
        .map_or_else(|| params_label(model.n_params), str::to_string);
    let ftype = smelt::quantize::describe_file(&m.file);
    let model_name = format!("{arch} {size_label} {ftype}");
    let size = format_size(model.n_bytes);
    let params = format_params(model.n_params);
    let backend = model.backend_name();
    match args.output {
        Format::Md => {
            println!("| model | size | params | backend | threads | test | t/s |");
            println!("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
            for r in &results {
                println!(
                    "| {model_name} | {size} | {params} | {backend} | {threads} | {} | {:.2} ± {:.2} |",
                    r.test,
                    r.mean(),
                    r.stddev()
                );
            }
        }
        Format::Json => {
            let rows: Vec<_> = results
                .iter()
                .map(|r| {
                    let mut row = serde_json::json!({
                        "model_filename": m.path.display().to_string(),
                        "model_type": model_name,
                        "model_size": model.n_bytes,
                        "model_n_params": model.n_params,
                        "backends": backend,
                        "n_threads": threads,
                        "n_prompt": r.n_prompt,
                        "n_gen": r.n_gen,
                        "n_depth": r.n_depth,
                        "test": r.test,
                        "avg_ts": r.mean(),
                        "stddev_ts": r.stddev(),
                        "samples_ts": r.samples,
                    });
                    if counted {
                        row["submissions_per_token"] = r.work.submissions.into();
                        row["dispatches_per_token"] = r.work.dispatches.into();
                    }
                    row
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
    }
    Ok(())
}

/// A line on stderr as each run starts and ends, as llama-bench's
/// `--progress`: the table comes only at the end. `done`: the repetition
/// that ended and its tokens per second; `None` for the warm-up.
fn progress(test: &str, done: Option<(usize, f64)>, repetitions: usize) {
    match done {
        None => eprintln!("smelt: {test}: warm-up run"),
        Some((i, tps)) => eprintln!("smelt: {test}: run {}/{repetitions}: {tps:.2} t/s", i + 1),
    }
}

/// Random token ids: any fixed sequence will do, as llama-bench's `rand()`.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn format_size(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.2} MiB")
    }
}

fn format_params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else {
        format!("{:.2} M", n / 1e6)
    }
}

fn params_label(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{}B", n / 1_000_000_000)
    } else {
        format!("{}M", n / 1_000_000)
    }
}
