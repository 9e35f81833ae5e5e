//! The `smelt` command line.

mod cmd;
mod engine;
mod hub;
mod model_file;
mod replicas;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "smelt",
    version,
    about = "Run large language models from GGUF files on GPUs and CPUs, and train small networks",
    after_help = "Commands that run a model (run, chat, serve, embed, bench, perplexity) use a \
                  hardware GPU when there is one, in its fast mode (--exact: ggml's \
                  arithmetic bit for bit), else the CPU, and say which on stderr \
                  (--backend cpu|gpu|auto, --device N)."
)]
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
    /// Quantize a model to another file type (Q4_K_M, Q8_0, ...) as llama-quantize does
    Quantize(cmd::quantize::Args),
    /// Generate text from a prompt
    Run(cmd::run::Args),
    /// Chat interactively, or over piped stdin
    Chat(cmd::chat::Args),
    /// Serve an OpenAI-compatible HTTP API
    Serve(cmd::serve::Args),
    /// Print texts' embeddings (pooled final hidden states) as JSON
    Embed(cmd::embed::Args),
    /// Measure prompt processing and generation speed, like llama-bench
    Bench(cmd::bench::Args),
    /// Measure perplexity over a text file, like llama-perplexity
    Perplexity(cmd::perplexity::Args),
    /// Fetch a GGUF model from a Hugging Face-style hub into the cache
    Pull(cmd::pull::Args),
    /// Render a chat template with messages
    Template(cmd::template::Args),
    /// List the GPU adapters and what they can do
    Devices(cmd::devices::Args),
    /// Train an example network (a CNN on digits, an LSTM on text) on the
    /// CPU or a GPU
    Train(cmd::train::Args),
    /// Classify 8x8 digits with a checkpoint of `smelt train cnn`
    Classify(cmd::classify::Args),
    /// Sample text from a checkpoint of `smelt train rnn`
    Sample(cmd::sample::Args),
}

fn main() -> ExitCode {
    restore_sigpipe();
    quiet_device_select();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
        Command::Pull(a) => cmd::pull::run(a),
        Command::Template(a) => cmd::template::run(a),
        Command::Devices(a) => cmd::devices::run(a),
        Command::Train(a) => cmd::train::run(a),
        Command::Classify(a) => cmd::classify::run(a),
        Command::Sample(a) => cmd::sample::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Mesa's Vulkan device-select layer connects to Wayland on every
/// enumeration of the GPUs, and with no `XDG_RUNTIME_DIR` libwayland prints
/// an error each time. The layer only reorders devices for programs that
/// take the first one; smelt ranks adapters itself (`smelt devices`), so
/// it is switched off where it would print (`NODEVICE_SELECT`, the
/// layer's own off switch), unless the user set it.
fn quiet_device_select() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && std::env::var_os("NODEVICE_SELECT").is_none()
    {
        // SAFETY: called first thing in main, before any thread starts, so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

/// Rust ignores SIGPIPE, so `smelt info x.gguf | head` would panic on the
/// closed pipe. A command-line tool should just stop, as C tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread starts; setting a
    // signal's disposition to the default is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `smelt CMD --help` describes every flag and argument.
    #[test]
    fn every_flag_has_help() {
        let cli = super::Cli::command();
        let missing: Vec<String> = cli
            .get_subcommands()
            .flat_map(|sub| {
                sub.get_arguments()
                    .filter(|a| a.get_help().is_none())
                    .map(|a| format!("smelt {} --{}", sub.get_name(), a.get_id()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(missing.is_empty(), "flags without help: {missing:?}");
    }
}
