//! `smelt classify`: the digits CNN from its checkpoint, on the held-out
//! split it was trained beside (with its accuracy) or on images from a CSV
//! file. The same kernels as training's forward pass.

use std::path::PathBuf;

use anyhow::Context as _;
use smelt_nn::data::DIGIT_PIXELS;
use smelt_nn::safetensors::Tensors;
use smelt_nn::train::cnn;

use crate::cmd::train::NnDeviceArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The checkpoint `smelt train cnn` wrote
    checkpoint: PathBuf,
    /// Images to classify: CSV rows of 64 pixels (0..16) and optionally the
    /// label (as scikit-learn's digits.csv); without it, the held-out split
    #[arg(long)]
    input: Option<PathBuf>,
    #[command(flatten)]
    dev: NnDeviceArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ck = Tensors::load(&a.checkpoint)?;
    let mut dev = a.dev.open()?;
    cnn::load(&mut dev, &ck)?;
    match &a.input {
        None => {
            let meta =
                |k: &str, d: &str| ck.metadata.get(k).cloned().unwrap_or_else(|| d.to_string());
            let opts = cnn::CnnOptions {
                seed: meta("seed", "1")
                    .parse()
                    .context("checkpoint metadata seed")?,
                held_out: meta("held_out", "0.2")
                    .parse()
                    .context("checkpoint metadata held_out")?,
                ..Default::default()
            };
            let (_, test) = cnn::split(&opts)?;
            let (acc, _) = cnn::evaluate(&mut dev, &test)?;
            println!(
                "held-out digits {}, accuracy {:.1}%",
                test.len(),
                acc * 100.0
            );
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let (images, labels) =
                parse_rows(&text).with_context(|| format!("reading {}", path.display()))?;
            let preds = cnn::classify(&mut dev, &images)?;
            let mut right = 0;
            for (i, p) in preds.iter().enumerate() {
                match labels.get(i).copied().flatten() {
                    Some(l) => {
                        right += usize::from(*p == l);
                        println!("{i}\t{p}\t(label {l})");
                    }
                    None => println!("{i}\t{p}"),
                }
            }
            let labelled = labels.iter().filter(|l| l.is_some()).count();
            if labelled > 0 {
                println!(
                    "accuracy {:.1}% of {labelled} labelled",
                    right as f64 * 100.0 / labelled as f64
                );
            }
        }
    }
    Ok(())
}

/// Rows of 64 pixels and an optional label.
fn parse_rows(text: &str) -> anyhow::Result<(Vec<f32>, Vec<Option<usize>>)> {
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let vals: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse::<f32>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("line {}", i + 1))?;
        let label = match vals.len() {
            DIGIT_PIXELS => None,
            n if n == DIGIT_PIXELS + 1 => {
                let l = vals[DIGIT_PIXELS];
                anyhow::ensure!(
                    (0.0..10.0).contains(&l) && l.fract() == 0.0,
                    "line {}: label {l}",
                    i + 1
                );
                Some(l as usize)
            }
            n => anyhow::bail!(
                "line {}: {n} values, want 64 pixels and an optional label",
                i + 1
            ),
        };
        anyhow::ensure!(
            vals[..DIGIT_PIXELS]
                .iter()
                .all(|p| (0.0..=16.0).contains(p)),
            "line {}: pixels must be in 0..16",
            i + 1
        );
        images.extend(vals[..DIGIT_PIXELS].iter().map(|p| p / 16.0));
        labels.push(label);
    }
    anyhow::ensure!(!labels.is_empty(), "no images");
    Ok((images, labels))
}
