//! `smelt embed`: each text's embedding, as llama-embedding computes it
//! (the final hidden states after the output norm, pooled, L2-normalized),
//! printed as JSON in the shape of OpenAI's embeddings response.

use std::io::Write;

use anyhow::bail;
use serde_json::{Value, json};
use smelt::model::{Batch, Pooling, SessionParams};

use crate::engine::{self, EngineArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    engine: EngineArgs,
    /// How a text's hidden states become its vector: mean, last (the last
    /// token's), cls (the first token's) or none (a vector per token).
    /// Default: the model's pooling_type, else none, as llama-embedding
    #[arg(long, value_name = "POOLING")]
    pooling: Option<Pooling>,
    /// The texts to embed, each its own sequence (BOS added as the model
    /// wants, control tokens' text parsed as those tokens)
    #[arg(required = true, value_name = "TEXT")]
    texts: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let params = SessionParams {
        n_ctx: args.engine.ctx,
        ..SessionParams::default()
    };
    let mut m = engine::open(args.engine.model.as_deref(), &args.engine.backend, params)?;
    let pooling = args
        .pooling
        .or(m.session.config().pooling)
        .unwrap_or(Pooling::None);
    let n_embd = m.session.config().n_embd;
    let n_ctx = m.session.n_ctx();
    let mut data = Vec::with_capacity(args.texts.len());
    let mut prompt_tokens = 0;
    for (index, text) in args.texts.iter().enumerate() {
        let tokens = m.tokenizer.encode(text, true, true);
        if tokens.is_empty() {
            bail!("text {index} is empty, and the model adds no BOS to it");
        }
        if tokens.len() > n_ctx {
            bail!(
                "text {index} has {} tokens; the context holds {n_ctx} (--ctx)",
                tokens.len()
            );
        }
        prompt_tokens += tokens.len();
        m.session.truncate(0, 0);
        let hidden = m.session.hidden(&Batch::sequence(&tokens, 0, 0))?;
        let vector = pooling.pool(hidden, n_embd);
        let embedding = match pooling {
            Pooling::None => json!(vector.chunks(n_embd).collect::<Vec<_>>()),
            _ => json!(vector),
        };
        data.push(json!({"object": "embedding", "index": index, "embedding": embedding}));
    }
    let out: Value = json!({
        "object": "list",
        "data": data,
        "model": m.path.file_stem().map(|s| s.to_string_lossy()),
        "pooling": pooling.to_string(),
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    });
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &out)?;
    writeln!(stdout)?;
    Ok(())
}
