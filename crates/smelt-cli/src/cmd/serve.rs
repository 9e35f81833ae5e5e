//! `smelt serve`: the OpenAI-compatible HTTP server (see `crate::serve`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use smelt::chat::ChatTemplate;
use smelt::model::Pooling;
use smelt::server::{Replicas, Scheduler};

use crate::engine::{self, EngineArgs};
use crate::serve::{AppState, Limits, Served, Timeouts, serve};

/// Largest request body: far above any prompt that fits a context, far
/// below what could hurt the machine.
const BODY_LIMIT: usize = 4 << 20;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    engine: EngineArgs,
    /// Address to listen on; loopback unless you mean to expose the server
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on; 0 picks a free one (printed at start)
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on the /v1 routes
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Requests generated at once, each with its own KV-cache slot
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    parallel: u32,
    /// Requests that may wait for a slot; more get 503 (shared among
    /// --replicas)
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Copies of the model, one per GPU adapter, each with --parallel slots
    /// of its own: the throughput mode. A request goes to the copy with
    /// the fewest requests running and waiting. The adapters are --devices
    /// (one per copy), by default the first N hardware GPUs. GPU only; not
    /// with a layer split
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    replicas: u32,
    /// Use this built-in chat template instead of the model's: chatml, llama3,
    /// gemma, qwen3, phi3, phi4, mistral-v1, mistral-v3, mistral-v3-tekken,
    /// mistral-v7, mistral-v7-tekken or gpt-oss
    #[arg(long = "chat-template", value_name = "NAME")]
    chat_template: Option<String>,
    /// Use the Jinja chat template in this file instead of the model's
    /// (its tool-call format is read from it too)
    #[arg(long, value_name = "FILE", conflicts_with = "chat_template")]
    chat_template_file: Option<PathBuf>,
    /// Seconds a client may take from a request's first byte to the end of
    /// its headers; the connection is closed after
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds a client may take to send a request's body (408 after)
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds)]
    body_timeout: Duration,
    /// How /v1/embeddings pools a sequence's hidden states: mean, last
    /// (the last token's), cls (the first token's) or none (refused by the
    /// endpoint: a vector per token). Default: the model's pooling_type, as
    /// llama-server; last where the model does not say (most generative
    /// models), so that /v1/embeddings answers without a flag
    #[arg(long, value_name = "POOLING")]
    pooling: Option<Pooling>,
    /// Seconds a keep-alive connection may wait between requests before it
    /// is closed
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = seconds)]
    idle_timeout: Duration,
}

/// A positive number of seconds, fractions allowed.
fn seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1e6 => Ok(Duration::from_secs_f64(x)),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.api_key.as_deref() == Some("") {
        anyhow::bail!("--api-key must not be empty");
    }
    let replicas = args.replicas as usize;
    let loaded = engine::load(
        &args.engine,
        args.parallel as usize,
        replicas,
        args.chat_template.as_deref(),
    )?;
    let model_id = model_id(&loaded.path);
    let template = match &args.chat_template_file {
        None => loaded.template,
        Some(path) => {
            let source = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the chat template {}", path.display()))?;
            ChatTemplate::new(&source, path.display().to_string())?
                .with_special_tokens(loaded.template.bos_token(), loaded.template.eos_token())
        }
    };
    // The waiting places are shared: each replica gets its part.
    let queue = args.queue.div_ceil(replicas);
    let (schedulers, devices): (Vec<Scheduler>, Vec<String>) = loaded
        .replicas
        .into_iter()
        .map(|r| (Scheduler::spawn(r.engine, r.vocab, queue), r.device))
        .unzip();
    let state = AppState::new(
        Served {
            scheduler: Replicas::new(schedulers),
            devices,
            template,
            encode: loaded.encode,
            token_bytes: loaded.token_bytes,
            grammars: Some(loaded.grammars),
            model_id,
            pooling: args.pooling.or(loaded.pooling).unwrap_or(Pooling::Last),
        },
        Limits {
            api_key: args.api_key,
            body_limit: BODY_LIMIT,
            timeouts: Timeouts {
                header: args.header_timeout,
                body: args.body_timeout,
                idle: args.idle_timeout,
            },
        },
    );
    serve(state, SocketAddr::new(args.host, args.port))
}

/// The model file's name without `.gguf`, as llama.cpp's server lists it.
fn model_id(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| PathBuf::from(path).display().to_string())
}
