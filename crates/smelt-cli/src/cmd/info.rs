//! `smelt info`: what a GGUF file holds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use smelt::gguf::GgufFile;
use smelt::quant::GgmlType;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file
    model: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.model)
        .with_context(|| format!("cannot open {}", args.model.display()))?;
    let arch = file.architecture().unwrap_or("(none)");
    let n_params: u64 = file.tensors.iter().map(|t| t.n_elements()).sum();
    let block_count = file
        .get(&format!("{arch}.block_count"))
        .and_then(|v| v.as_u32());

    println!("file:         {}", args.model.display());
    println!("version:      GGUF v{}", file.version);
    println!("architecture: {arch}");
    if let Some(name) = file.get("general.name").and_then(|v| v.as_str()) {
        println!("name:         {name}");
    }
    if let Some(n) = block_count {
        println!("blocks:       {n}");
    }
    println!("parameters:   {}", format_params(n_params));
    println!("alignment:    {}", file.alignment);

    println!("\nmetadata ({} keys):", file.metadata.len());
    for (key, value) in file.metadata.iter() {
        let text = value.to_string();
        let text = if text.chars().count() > 120 {
            let cut: String = text.chars().take(117).collect();
            format!("{cut}... ({} chars)", text.chars().count())
        } else {
            text
        };
        println!("  {key} = {}", text.replace('\n', "\\n"));
    }

    let mut by_type: BTreeMap<GgmlType, (usize, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let e = by_type.entry(t.dtype).or_default();
        e.0 += 1;
        e.1 += t.size;
    }
    println!("\ntensors ({}):", file.tensors.len());
    for (dtype, (count, bytes)) in &by_type {
        println!(
            "  {:<8} {count:>5} tensors  {:>10.2} MiB",
            dtype.name(),
            *bytes as f64 / (1024.0 * 1024.0)
        );
    }
    let total: u64 = by_type.values().map(|v| v.1).sum();
    println!(
        "  total    {:>5} tensors  {:>10.2} MiB",
        file.tensors.len(),
        total as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

/// `134.52 M`, `1.50 B`: parameters the way llama.cpp prints them.
fn format_params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.2} K", n / 1e3)
    } else {
        format!("{n}")
    }
}
