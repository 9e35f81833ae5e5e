//! The `smelt` command line.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "smelt", version, about = "Run large language models from GGUF files on GPUs and CPUs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a GGUF file's architecture, metadata and tensors
    Info(cmd::info::Args),
    /// Turn text into token ids, or ids back into text
    Tokenize(cmd::tokenize::Args),
    /// Requantize a model's 2-D weights to another type
    Quantize(cmd::quantize::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
