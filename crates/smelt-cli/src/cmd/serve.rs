//! `smelt serve`: the OpenAI-compatible HTTP server (see `crate::serve`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::engine::{self, EngineArgs};
use crate::serve::{AppState, serve};

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
    /// Requests that may wait for a slot; more get 503
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Use this built-in chat template instead of the model's: chatml, llama3,
    /// gemma, qwen3, phi3, phi4, mistral-v1, mistral-v3, mistral-v3-tekken,
    /// mistral-v7, mistral-v7-tekken or gpt-oss
    #[arg(long = "chat-template", value_name = "NAME")]
    chat_template: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.api_key.as_deref() == Some("") {
        anyhow::bail!("--api-key must not be empty");
    }
    let loaded = engine::load(
        &args.engine,
        args.parallel as usize,
        args.chat_template.as_deref(),
    )?;
    let model_id = model_id(&loaded.path);
    let scheduler = smelt::server::Scheduler::spawn(loaded.engine, loaded.vocab, args.queue);
    let state = AppState::new(
        scheduler,
        loaded.template,
        loaded.encode,
        model_id,
        args.api_key,
        BODY_LIMIT,
    );
    serve(state, SocketAddr::new(args.host, args.port))
}

/// The model file's name without `.gguf`, as llama.cpp's server lists it.
fn model_id(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| PathBuf::from(path).display().to_string())
}
