//! Loading a model for `smelt serve` and `smelt chat`: the session behind
//! the scheduler's [`Engine`] trait, the tokenizer behind [`Vocab`], the
//! chat template, and prompt encoding.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;
use smelt::chat::ChatTemplate;
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};
use smelt::server::{Engine, Row, Vocab};
use smelt::tokenizer::Tokenizer;

use crate::serve::Encode;

/// The model used without `-m`, in the cache `scripts/fetch-models.sh` fills.
const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Rows per forward pass: prompt chunks and the running sequences' tokens.
const N_BATCH: usize = 512;

/// Model and backend flags shared by `serve` and `chat`.
#[derive(clap::Args)]
pub struct EngineArgs {
    /// The GGUF model (default: SmolLM2-135M-Instruct in the model cache)
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Context length per sequence slot (default: the model's, up to 4096)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Compute backend: cpu, or cpu-ref (the plain reference ops)
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// CPU threads (default: the number of cores)
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// A model ready to serve.
pub struct Loaded {
    pub path: PathBuf,
    pub engine: Box<dyn Engine>,
    pub vocab: Box<dyn Vocab>,
    pub template: ChatTemplate,
    pub encode: Encode,
}

/// Loads the model with `n_slots` sequence slots; `chat_template` names a
/// built-in template to use instead of the model's.
pub fn load(
    args: &EngineArgs,
    n_slots: usize,
    chat_template: Option<&str>,
) -> anyhow::Result<Loaded> {
    let path = match &args.model {
        Some(p) => p.clone(),
        None => default_model()?,
    };
    let file = GgufFile::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file).context("loading the tokenizer")?);
    let template = ChatTemplate::from_gguf(&file, chat_template)?;
    let backend: Box<dyn Backend> = match args.backend.as_str() {
        "cpu" | "auto" => {
            let threads = args
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            Box::new(CpuBackend::new(threads)?)
        }
        "cpu-ref" => Box::new(CpuBackend::reference()),
        other => anyhow::bail!("unknown backend {other:?}: use cpu or cpu-ref"),
    };
    let model = Model::load(&file, backend, &mut |_, _| {})
        .with_context(|| format!("loading {}", path.display()))?;
    let session = Session::new(
        model,
        SessionParams {
            n_ctx: args.ctx,
            n_slots,
            n_batch: N_BATCH,
            // Every running sequence samples from its own row each step.
            n_outputs: n_slots,
            ..SessionParams::default()
        },
    )?;
    let encode = encoder(Arc::clone(&tokenizer), template.bos_token().to_string());
    Ok(Loaded {
        path,
        engine: Box::new(SessionEngine {
            session,
            n_slots,
            batch: Batch::default(),
        }),
        vocab: Box::new(TokenizerVocab(tokenizer)),
        template,
        encode,
    })
}

fn default_model() -> anyhow::Result<PathBuf> {
    let cache = match std::env::var_os("SMELT_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache/smelt")
        }
    };
    let path = cache.join("models").join(DEFAULT_MODEL);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: pass -m MODEL, or run `bash scripts/fetch-models.sh`",
        path.display()
    );
    Ok(path)
}

/// A session as the scheduler's engine: slots are the session's sequence
/// slots, and a step's rows go through one `decode`.
struct SessionEngine {
    session: Session,
    n_slots: usize,
    batch: Batch,
}

impl Engine for SessionEngine {
    fn n_slots(&self) -> usize {
        self.n_slots
    }
    fn n_ctx(&self) -> usize {
        self.session.n_ctx()
    }
    fn n_vocab(&self) -> usize {
        self.session.config().n_vocab
    }
    fn n_batch(&self) -> usize {
        self.session.params().n_batch
    }
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        self.batch.rows.clear();
        for r in rows {
            self.batch.push(r.token, r.pos, r.seq, r.logits);
        }
        self.session.decode(&self.batch).map_err(|e| e.to_string())
    }
    fn truncate(&mut self, slot: usize, len: usize) {
        self.session.truncate(slot, len);
    }
}

/// The tokenizer as the scheduler's vocabulary: control tokens print
/// nothing, as in llama.cpp's server.
struct TokenizerVocab(Arc<Tokenizer>);

impl Vocab for TokenizerVocab {
    fn is_eog(&self, id: u32) -> bool {
        self.0.is_eog(id)
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        if self.0.is_control(id) {
            Vec::new()
        } else {
            self.0.token_to_piece(id)
        }
    }
}

/// Prompt text to ids: special tokens parsed (templates write them as
/// text), BOS added if the model wants it, unless the template already
/// wrote it.
fn encoder(tokenizer: Arc<Tokenizer>, bos_text: String) -> Encode {
    Box::new(move |text: &str| {
        let text = match text.strip_prefix(bos_text.as_str()) {
            Some(rest) if tokenizer.add_bos() && !bos_text.is_empty() => rest,
            _ => text,
        };
        tokenizer.encode(text, true, true)
    })
}
