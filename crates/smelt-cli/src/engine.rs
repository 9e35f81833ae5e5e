//! Loading a model for `smelt serve` and `smelt chat`: the session behind
//! the scheduler's [`Engine`] trait, the tokenizer behind [`Vocab`], the
//! chat template, and prompt encoding.

use std::path::PathBuf;

use smelt::chat::ChatTemplate;
use smelt::server::{Engine, Vocab};

use crate::serve::Encode;

/// Model and backend flags shared by `serve` and `chat`.
#[derive(clap::Args)]
pub struct EngineArgs {
    /// The GGUF model (default: SmolLM2-135M-Instruct in the model cache)
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Context length per sequence slot (default: the model's, up to 4096)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Compute backend
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// CPU threads (default: the number of cores)
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// A model ready to serve.
pub struct Loaded {
    pub path: PathBuf,
    pub engine: Box<dyn Engine>,
    pub vocab: Box<dyn Vocab>,
    pub template: ChatTemplate,
    pub encode: Encode,
}

/// Loads the model with `n_slots` sequence slots.
pub fn load(
    args: &EngineArgs,
    n_slots: usize,
    chat_template: Option<&str>,
) -> anyhow::Result<Loaded> {
    let _ = (args, n_slots, chat_template);
    anyhow::bail!("the generation engine has not landed on main yet")
}
