//! `smelt info`: what a GGUF file holds: architecture, size, the
//! hyperparameters smelt reads from it, metadata (long arrays and strings
//! shortened) and tensors by type.

use std::collections::BTreeMap;
use std::path::PathBuf;

use smelt::quant::GgmlType;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file
    model: PathBuf,
}

/// Metadata values longer than this many characters are cut.
const MAX_VALUE_CHARS: usize = 120;

pub fn run(args: Args) -> anyhow::Result<()> {
    let file = crate::engine::open_gguf(&args.model)?;
    let arch = file.architecture().unwrap_or("(none)");
    let n_params: u64 = file.tensors.iter().map(|t| t.n_elements()).sum();

    println!("file:         {}", args.model.display());
    println!("size:         {}", mib(file.bytes().len() as u64));
    println!("version:      GGUF v{}", file.version);
    println!("architecture: {}", arch.escape_debug());
    if let Some(name) = file.get("general.name").and_then(|v| v.as_str()) {
        println!("name:         {}", name.escape_debug());
    }
    if let Some(n) = file
        .get(&format!("{arch}.block_count"))
        .and_then(|v| v.as_u32())
    {
        println!("blocks:       {n}");
    }
    println!("parameters:   {}", format_params(n_params));
    println!("file type:    {}", smelt::quantize::describe_file(&file));
    println!(
        "data:         at offset {}, aligned to {} bytes",
        file.data_offset, file.alignment
    );

    // The hyperparameters as smelt reads them, or why it cannot run them.
    match smelt::model::Config::from_gguf(&file) {
        Ok(c) => {
            println!("\nmodel (as smelt runs it):");
            for (name, value) in c.describe() {
                println!("  {name:<18} {value}");
            }
        }
        Err(e) => println!("\nmodel: cannot run it: {e}"),
    }

    println!("\nmetadata ({} keys):", file.metadata.len());
    for (key, value) in file.metadata.iter() {
        // Display writes strings escaped and arrays shortened to a few items.
        let text = value.to_string();
        let n_chars = text.chars().count();
        let text = if n_chars > MAX_VALUE_CHARS {
            let cut: String = text.chars().take(MAX_VALUE_CHARS - 3).collect();
            format!("{cut}... ({n_chars} chars)")
        } else {
            text
        };
        println!("  {} = {text}", key.escape_debug());
    }

    // type → (tensors, parameters, bytes)
    let mut by_type: BTreeMap<GgmlType, (usize, u64, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let e = by_type.entry(t.dtype).or_default();
        e.0 += 1;
        e.1 += t.n_elements();
        e.2 += t.size;
    }
    println!("\ntensors ({}):", file.tensors.len());
    println!(
        "  {:<8} {:>7} {:>12} {:>12} {:>12}",
        "type", "tensors", "parameters", "MiB", "bits/weight"
    );
    let row = |name: &str, count: usize, params: u64, bytes: u64| {
        let bpw = if params == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", bytes as f64 * 8.0 / params as f64)
        };
        println!(
            "  {name:<8} {count:>7} {:>12} {:>12.2} {bpw:>12}",
            format_params(params),
            bytes as f64 / (1024.0 * 1024.0)
        );
    };
    for (dtype, &(count, params, bytes)) in &by_type {
        row(dtype.name(), count, params, bytes);
    }
    let total_bytes: u64 = by_type.values().map(|v| v.2).sum();
    row("total", file.tensors.len(), n_params, total_bytes);
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!(
        "{:.2} MiB ({bytes} bytes)",
        bytes as f64 / (1024.0 * 1024.0)
    )
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
