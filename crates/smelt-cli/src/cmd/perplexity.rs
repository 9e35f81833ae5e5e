//! `smelt perplexity`: perplexity over a text file, computed as llama.cpp's
//! `llama-perplexity` computes it.
//!
//! The whole text is tokenized once (with BOS if the model adds one) and
//! cut into non-overlapping chunks of `ctx` tokens; the tail that does not
//! fill a chunk is dropped. Each chunk runs from an empty cache, its first
//! token replaced by BOS when the model adds one. Only the second half of
//! each chunk is scored: the logits at positions `ctx/2 .. ctx-2` predict
//! the tokens after them. stdout gets the running `[chunk]ppl` values and,
//! last, `PPL = X +/- Y`, with llama.cpp's uncertainty
//! `ppl · sqrt((E[nll²] − E[nll]²) / (count − 1))`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use smelt::model::{Batch, SessionParams};

use crate::engine::{self, BackendArgs, PerToken};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model (default: SmolLM2-135M-Instruct Q4_1)
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// The text file
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Tokens per chunk
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx: usize,
    /// At most this many chunks, from the start (default: all), as
    /// llama-perplexity's --chunks
    #[arg(long)]
    chunks: Option<usize>,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let n_ctx = args.ctx;
    if n_ctx < 4 {
        bail!("--ctx {n_ctx} is too small to score half of each chunk");
    }
    if args.chunks == Some(0) {
        bail!("--chunks 0 scores nothing; ask for at least 1");
    }
    let text = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    // Replacing bad bytes would score text that is not in the file.
    let text = String::from_utf8(text).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        anyhow::anyhow!(
            "{} is not valid UTF-8: the bytes at offset {at} are not a character (convert it, e.g. with iconv)",
            args.file.display()
        )
    })?;
    let first = n_ctx / 2;
    let params = SessionParams {
        n_ctx: Some(n_ctx),
        n_batch: n_ctx.min(512),
        n_outputs: n_ctx - first,
        ..SessionParams::default()
    };
    let mut m = engine::open(args.model.as_deref(), &args.backend, params)?;
    let add_bos = m.tokenizer.add_bos();
    let bos = m.tokenizer.bos();
    let mut tokens = m.tokenizer.encode(&text, true, false);
    if tokens.len() < 2 * n_ctx {
        bail!(
            "{} has {} tokens; perplexity with a context of {n_ctx} needs at least {}",
            args.file.display(),
            tokens.len(),
            2 * n_ctx
        );
    }
    let n_chunks = (tokens.len() / n_ctx).min(args.chunks.unwrap_or(usize::MAX));
    let vocab = m.session.config().n_vocab;
    eprintln!(
        "smelt: {} tokens, {n_chunks} chunks of {n_ctx}, scoring the second half of each",
        tokens.len()
    );

    let mut stdout = std::io::stdout().lock();
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let before = m.session.model().backend_stats();
    let start = Instant::now();
    for chunk in 0..n_chunks {
        let span = chunk * n_ctx..(chunk + 1) * n_ctx;
        let original = tokens[span.start];
        if let (true, Some(bos)) = (add_bos, bos) {
            tokens[span.start] = bos;
        }
        let mut batch = Batch::default();
        for (i, &t) in tokens[span.clone()].iter().enumerate() {
            batch.push(t, i, 0, i >= first);
        }
        tokens[span.start] = original;
        m.session.truncate(0, 0);
        let logits = m.session.decode(&batch)?;
        // Output row r is position first + r; it predicts the token after.
        for r in 0..n_ctx - 1 - first {
            let next = tokens[span.start + first + r + 1] as usize;
            let v = -log_softmax(&logits[r * vocab..(r + 1) * vocab], next);
            nll += v;
            nll2 += v * v;
        }
        count += n_ctx - 1 - first;
        write!(stdout, "[{}]{:.4},", chunk + 1, (nll / count as f64).exp())?;
        stdout.flush()?;
        if chunk == 0 {
            eprintln!("smelt: {:.2} s per chunk", start.elapsed().as_secs_f64());
        }
    }
    writeln!(stdout)?;
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = nll2 / count as f64 - mean * mean;
    let err = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    eprintln!(
        "smelt: {count} tokens scored in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    if args.backend.verbose {
        let after = m.session.model().backend_stats();
        PerToken::between(before, after, n_chunks * n_ctx).report("evaluation");
    }
    writeln!(stdout, "PPL = {ppl:.4} +/- {err:.4}")?;
    Ok(())
}

/// `log p(tok)` under `softmax(logits)`: the max subtracted, `exp` summed
/// in f64, as llama.cpp does.
fn log_softmax(logits: &[f32], tok: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    f64::from(logits[tok] - max) - sum.ln()
}
