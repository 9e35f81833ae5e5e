//! `smelt pull org/repo[:quant]`: fetches a GGUF file from a Hugging
//! Face-style hub into the model cache and prints its path (see
//! `crate::hub`).

use crate::hub::{Hub, Wanted};
use crate::model_file::model_cache;

#[derive(clap::Args)]
pub struct Args {
    /// The repository, `org/repo`, with `:QUANT` to pick its GGUF file of
    /// that quantization (e.g. `:q4_k_m`), or `hf://org/repo/file.gguf`
    /// for one file. The hub is `HF_ENDPOINT` (default
    /// https://huggingface.co); `HF_TOKEN` is sent as a bearer token
    #[arg(value_name = "REPO")]
    repo: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let wanted = if args.repo.starts_with("hf://") {
        Wanted::from_url(&args.repo)?
    } else {
        Wanted::from_repo(&args.repo)?
    };
    let path = Hub::from_env(model_cache()?).fetch(&wanted)?;
    println!("{}", path.display());
    Ok(())
}
