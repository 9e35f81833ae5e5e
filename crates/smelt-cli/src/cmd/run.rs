//! `smelt run`: generate from a prompt. Only the generated text goes to
//! stdout, streamed; loading and timings go to stderr.

use std::io::{IsTerminal, Write};

use anyhow::bail;
use smelt::generate::{GenerateParams, generate};
use smelt::model::SessionParams;

use super::sampling::SamplingArgs;
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
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Stop before this text (repeatable)
    #[arg(long)]
    stop: Vec<String>,
    /// Print each generated token's log-probability and the N most likely
    /// tokens' on stderr, one JSON object a line (the model's own, before
    /// sampling; what the server's `logprobs` gives)
    #[arg(long, value_name = "N")]
    logprobs: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Errors that need no model come first.
    if args.prompt.is_empty() {
        bail!("the prompt is empty (-p TEXT)");
    }
    if args.n_predict == 0 {
        bail!("-n 0 asks for no tokens; ask for at least 1");
    }
    let sampler = args.sampling.params()?;

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
        logprobs: args.logprobs,
    };
    let mut stdout = std::io::stdout().lock();
    let before = m.session.model().backend_stats();
    let devices_before = m.session.model().backend_device_stats();
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
    for lp in &out.logprobs {
        eprintln!("{}", logprob_line(&m.tokenizer, lp));
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
        let devices_after = m.session.model().backend_device_stats();
        engine::report_devices(&devices_before, &devices_after, t.gen_tokens, "generation");
    }
    Ok(())
}

/// One token's `--logprobs` line: `{"id", "token", "logprob", "top_logprobs":
/// [{"id", "token", "logprob"}]}`.
fn logprob_line(
    tokenizer: &smelt::tokenizer::Tokenizer,
    lp: &smelt::sample::TokenLogprob,
) -> String {
    let entry = |id: u32, logprob: f32| {
        serde_json::json!({
            "id": id,
            "token": String::from_utf8_lossy(&tokenizer.token_to_piece(id)),
            "logprob": logprob,
        })
    };
    let mut line = entry(lp.token, lp.logprob);
    line["top_logprobs"] = lp.top.iter().map(|&(id, l)| entry(id, l)).collect();
    line.to_string()
}
