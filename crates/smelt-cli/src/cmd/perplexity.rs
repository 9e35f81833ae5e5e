//! `smelt perplexity`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`smelt perplexity` is not built yet")
}
