//! `smelt run`: generate from a prompt. Only the generated text goes to
//! stdout, streamed; loading and timings go to stderr.

use std::io::{IsTerminal, Write};

use anyhow::bail;
use smelt::generate::{GenerateParams, generate};
use smelt::model::SessionParams;
use smelt::sample::SamplerParams;

use crate::engine::{self, EngineArgs, PerToken};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    engine: EngineArgs,
    /// The prompt
    #[arg(short = 'p', long)]
    prompt: String,
    /// Tokens to generate
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Sampling temperature; 0 is greedy
    #[arg(long = "temp", default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Penalty on the last 64 tokens; 1 is off
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Seed of the sampler (default: from the clock)
    #[arg(long)]
    seed: Option<u64>,
    /// Stop before this text (repeatable)
    #[arg(long)]
    stop: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Errors that need no model come first.
    if args.prompt.is_empty() {
        bail!("the prompt is empty (-p TEXT)");
    }
    if args.n_predict == 0 {
        bail!("-n 0 asks for no tokens; ask for at least 1");
    }
    let sampler = SamplerParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplerParams::default()
    };
    sampler
        .validate()
        .map_err(|e| anyhow::anyhow!("bad sampling flags: {e}"))?;

    let params = SessionParams {
        n_ctx: args.engine.ctx,
        ..SessionParams::default()
    };
    let mut m = engine::open(args.engine.model.as_deref(), &args.engine.backend, params)?;
    let prompt = m.tokenizer.encode(&args.prompt, true, true);
    let request = GenerateParams {
        max_tokens: args.n_predict,
        sampler,
        stop: args.stop,
    };
    let mut stdout = std::io::stdout().lock();
    let before = m.session.model().backend_stats();
    let out = generate(
        &mut m.session,
        &m.tokenizer,
        &prompt,
        &request,
        &mut |text| {
            // A closed pipe ends generation quietly.
            stdout.write_all(text.as_bytes()).is_ok() && stdout.flush().is_ok()
        },
    )?;
    if stdout.is_terminal() {
        writeln!(stdout).ok();
    }
    let t = out.timings;
    eprintln!(
        "smelt: prompt {} tokens, {:.1} tokens/s | generation {} tokens, {:.1} tokens/s | finish: {}",
        t.prompt_tokens,
        t.prompt_tps(),
        t.gen_tokens,
        t.gen_tps(),
        out.finish.as_str()
    );
    if args.engine.backend.verbose {
        // One forward pass for the prompt and one per generated token but
        // the last: per generated token, the prompt's pass included.
        let after = m.session.model().backend_stats();
        PerToken::between(before, after, t.gen_tokens).report("generation");
    }
    Ok(())
}
