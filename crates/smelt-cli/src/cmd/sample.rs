//! `smelt sample`: text from the character LSTM's checkpoint, with the
//! same kernels as training's forward pass.

use std::io::Write;
use std::path::PathBuf;

use smelt_nn::safetensors::Tensors;
use smelt_nn::train::rnn;

use crate::cmd::train::NnDeviceArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The checkpoint `smelt train rnn` wrote
    checkpoint: PathBuf,
    /// Text to start from
    #[arg(short = 'p', long, default_value = "The ")]
    prompt: String,
    /// Characters to generate
    #[arg(short = 'n', long, default_value_t = 400)]
    length: usize,
    /// Sampling temperature (0: greedy)
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
    #[command(flatten)]
    dev: NnDeviceArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.temperature >= 0.0 && a.temperature.is_finite(),
        "temperature must be 0 or more"
    );
    let ck = Tensors::load(&a.checkpoint)?;
    let mut dev = a.dev.open()?;
    let (cfg, vocab) = rnn::load(&mut dev, &ck)?;
    let text = rnn::sample(
        &mut dev,
        &cfg,
        &vocab,
        a.prompt.as_bytes(),
        a.length,
        a.temperature,
        a.dev.seed,
    )?;
    let mut out = std::io::stdout().lock();
    out.write_all(a.prompt.as_bytes())?;
    out.write_all(&text)?;
    out.write_all(b"\n")?;
    Ok(())
}
