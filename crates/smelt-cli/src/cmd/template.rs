//! `smelt template`: renders a chat template with messages and prints the
//! exact string a model would be prompted with.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use smelt::chat::ChatTemplate;

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("source").required(true))]
pub struct Args {
    /// A Jinja chat template file
    #[arg(long, group = "source")]
    template: Option<PathBuf>,
    /// Use the template of this GGUF model (its own, or the built-in one for
    /// its architecture); BOS and EOS come from its vocabulary
    #[arg(short = 'm', long, group = "source")]
    model: Option<PathBuf>,
    /// Use a built-in template: chatml, llama3, gemma, qwen3, phi3, phi4,
    /// mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7,
    /// mistral-v7-tekken or gpt-oss
    #[arg(long = "chat-template", value_name = "NAME", group = "source")]
    chat_template: Option<String>,
    /// A JSON file with the messages: an array of {"role", "content", ...}
    /// objects, or an object whose "messages" field is one
    #[arg(long, value_name = "MESSAGES.json")]
    messages: PathBuf,
    /// End with the header of an assistant turn, as for generation
    #[arg(long)]
    add_generation_prompt: bool,
    /// The text of `bos_token`
    #[arg(long, value_name = "TEXT")]
    bos: Option<String>,
    /// The text of `eos_token`
    #[arg(long, value_name = "TEXT")]
    eos: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut template = if let Some(path) = &args.template {
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        ChatTemplate::new(&source, path.display().to_string())?
    } else if let Some(path) = &args.model {
        let file = crate::engine::open_gguf(path)?;
        ChatTemplate::from_gguf(&file, None)?
    } else {
        ChatTemplate::builtin(args.chat_template.as_deref().unwrap_or_default())?
    };
    let bos = args.bos.unwrap_or_else(|| template.bos_token().to_string());
    let eos = args.eos.unwrap_or_else(|| template.eos_token().to_string());
    template = template.with_special_tokens(bos, eos);

    let text = std::fs::read_to_string(&args.messages)
        .with_context(|| format!("cannot read {}", args.messages.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", args.messages.display()))?;
    let messages = match json {
        serde_json::Value::Object(mut obj) => obj.remove("messages"),
        other => Some(other),
    };
    let Some(messages @ serde_json::Value::Array(_)) = messages else {
        anyhow::bail!(
            "{}: expected an array of messages, or an object with a \"messages\" array",
            args.messages.display()
        );
    };

    let prompt = template.render(&messages, args.add_generation_prompt)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(prompt.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
