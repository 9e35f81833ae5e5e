//! `smelt tokenize`: text to token ids, or ids back to text, with a model's
//! (or a vocabulary-only GGUF's) tokenizer.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::ArgGroup;
use smelt::tokenizer::Tokenizer;

#[derive(clap::Args)]
#[command(group(ArgGroup::new("input").required(true).args(["text", "file", "decode"])))]
pub struct Args {
    /// The GGUF file, a model or a vocabulary-only file (default:
    /// SmolLM2-135M-Instruct Q4_1 in the model cache, fetched on first use)
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Add BOS/EOS where the model's metadata says to
    #[arg(long, conflicts_with = "decode")]
    add_special: bool,
    /// Turn the text of control tokens (like <|im_start|>) into those tokens
    #[arg(long, conflicts_with = "decode")]
    parse_special: bool,
    /// The text to tokenize
    #[arg(long)]
    text: Option<String>,
    /// A UTF-8 file whose text to tokenize
    #[arg(long)]
    file: Option<PathBuf>,
    /// Token ids to turn back into text, separated by spaces
    #[arg(long, value_name = "IDS")]
    decode: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = crate::model_file::model_path(args.model.as_deref())?;
    let file = crate::engine::open_gguf(&path)?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("no usable tokenizer in {}", path.display()))?;

    let mut out = std::io::stdout().lock();
    if let Some(ids) = &args.decode {
        let ids = parse_ids(ids, tokenizer.n_vocab())?;
        out.write_all(&tokenizer.detokenize(&ids, false, true))?;
        out.write_all(b"\n")?;
        return Ok(());
    }

    let text = match (&args.text, &args.file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            String::from_utf8(bytes)
                .with_context(|| format!("{} is not valid UTF-8", path.display()))?
        }
        (None, None) => bail!("give --text, --file or --decode"),
    };
    let ids = tokenizer.encode(&text, args.add_special, args.parse_special);
    let line: Vec<String> = ids.iter().map(u32::to_string).collect();
    writeln!(out, "{}", line.join(" "))?;
    Ok(())
}

/// Ids separated by whitespace, each below `n_vocab`.
fn parse_ids(s: &str, n_vocab: usize) -> anyhow::Result<Vec<u32>> {
    s.split_whitespace()
        .map(|t| {
            let id: u32 = t
                .parse()
                .with_context(|| format!("{t:?} is not a token id"))?;
            if id as usize >= n_vocab {
                bail!("token id {id} is out of range: the vocabulary has {n_vocab} tokens");
            }
            Ok(id)
        })
        .collect()
}
