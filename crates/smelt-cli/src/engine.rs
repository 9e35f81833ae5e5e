//! Loading a model, for every command that runs one: the model file (the
//! default one fetched on first use), the backend flags, load progress, the
//! tokenizer and the session. For `smelt serve` and `smelt chat` it also
//! puts the session behind the scheduler's [`Engine`] and the tokenizer
//! behind [`Vocab`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use smelt::backend::gpu::{AdapterMemory, GpuOptions, MemorySource};
use smelt::backend::select::{self, BackendKind};
use smelt::backend::split;
use smelt::backend::{DeviceStats, Stats};
use smelt::chat::ChatTemplate;
use smelt::gguf::{GgufError, GgufFile};
use smelt::grammar::Grammars;
use smelt::model::{Model, Pooling, Session, SessionParams};
use smelt::server::{Engine, Vocab};
use smelt::tokenizer::Tokenizer;

use crate::serve::{Encode, TokenBytes};

/// Model and backend flags shared by the commands that run a model.
#[derive(clap::Args)]
pub struct EngineArgs {
    /// The GGUF model, a path or hf://org/repo/file.gguf (default:
    /// SmolLM2-135M-Instruct Q4_1 in the model cache, fetched on first use)
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Context length per sequence slot (default: the model's, up to 4096)
    #[arg(short = 'c', long, value_parser = positive)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// A count of at least 1, for flags where 0 means nothing useful.
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?} is not a count: {e}")),
    }
}

/// A KV cache type by its lower-case ggml name (`f16`, `q8_0`, ...).
fn cache_type(s: &str) -> Result<smelt::quant::GgmlType, String> {
    let types = smelt::model::kv_cache::TYPES;
    let name = |t: smelt::quant::GgmlType| t.to_string().to_lowercase();
    types
        .into_iter()
        .find(|&t| name(t) == s.to_lowercase())
        .ok_or_else(|| {
            let names: Vec<String> = types.into_iter().map(name).collect();
            format!("{s:?} is not a KV cache type: one of {}", names.join(", "))
        })
}

/// `--backend`, `--device`, `--cache-type`, `--threads`, `--exact` and
/// `--verbose`.
#[derive(clap::Args)]
pub struct BackendArgs {
    /// Compute backend: auto (a hardware GPU when there is one, else the
    /// CPU), gpu (the best adapter, software ones such as lavapipe too),
    /// cpu, or cpu-ref (the plain reference ops)
    #[arg(long, default_value = "auto")]
    pub backend: BackendKind,
    /// GPU adapter: an index into `smelt devices` (alone, it means
    /// --backend gpu)
    #[arg(long)]
    pub device: Option<usize>,
    /// How a model spreads over several GPU adapters: none (one adapter)
    /// or layer (each adapter in --devices holds a contiguous run of
    /// layers, with their weights and KV cache; the activations cross at
    /// each boundary). Naming several --devices, or --tensor-split, means
    /// layer
    #[arg(long, default_value = "none")]
    pub split_mode: SplitMode,
    /// GPU adapters of a layer split, as indices into `smelt devices`,
    /// comma-separated: `--devices 0,1`. An index may repeat (one adapter
    /// opened as two devices, for testing)
    #[arg(long, value_delimiter = ',', conflicts_with = "device")]
    pub devices: Vec<usize>,
    /// The share of the layers each of --devices takes, comma-separated
    /// positive numbers, one per device: `--tensor-split 3,1` puts three
    /// quarters of the layers' bytes on the first (default: in proportion
    /// to each adapter's memory)
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub tensor_split: Vec<f64>,
    /// KV cache type: f16 (llama.cpp's default), f32, or q8_0 / q4_0
    /// (ggml's 32-value blocks, quantized as written: about half and a
    /// quarter of f16's memory; the head dim must be a multiple of 32, and
    /// on the GPU of the row's rotation group, 64 or 32)
    #[arg(long, default_value = "f16", value_parser = cache_type, value_name = "TYPE")]
    pub cache_type: smelt::quant::GgmlType,
    /// CPU threads (default: the physical cores)
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// ggml's arithmetic bit for bit, as llama.cpp's CPU backend computes:
    /// on the GPU, activations rounded to 8-bit blocks and every operation
    /// rounded as ggml's C code (several times slower than the default fast
    /// mode, whose plain hardware arithmetic is within 1% of llama.cpp's
    /// perplexity); on the CPU, ggml's order for Q4_0/Q8_0 prefill too
    #[arg(long)]
    pub exact: bool,
    /// Deprecated and ignored: the GPU's fast mode is the default (see
    /// --exact)
    #[arg(long, hide = true, conflicts_with = "exact")]
    pub gpu_f32_acts: bool,
    /// Print the backend's work per token (submissions, dispatches, and
    /// on a layer split the boundary copies) for each device on stderr
    #[arg(long)]
    pub verbose: bool,
    /// GPU: time every kernel with timestamp queries (each dispatch in its
    /// own pass, a wait per submission) and print where the time goes
    #[arg(long)]
    pub perf: bool,
}

/// `--split-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitMode {
    /// One adapter holds the whole model.
    #[default]
    None,
    /// Each adapter of --devices holds a contiguous run of layers.
    Layer,
}

impl BackendArgs {
    /// The backend, with one line on stderr saying which it is; a layer
    /// split is planned for `model` first (see [`split::plan`]).
    fn make(&self, model: &SplitModel) -> anyhow::Result<Box<dyn smelt::backend::Backend>> {
        let gpu = self.gpu_options();
        let chosen = if self.is_split()? {
            let adapters = select::split_adapters(&self.devices)?;
            let memory: Vec<split::plan::DeviceMemory> = adapters
                .iter()
                .map(|a| split::plan::DeviceMemory {
                    name: format!("GPU {} ({})", a.index, a.name),
                    bytes: a.memory.map(|m| m.usable()),
                })
                .collect();
            let shares = (!self.tensor_split.is_empty()).then_some(self.tensor_split.as_slice());
            let placement = split::plan::plan(&model.need(), &memory, shares)
                .map_err(|e| anyhow::anyhow!("cannot split {}: {e}", model.name))?;
            // --perf times each boundary copy alone (a sync first).
            let opts = split::SplitOptions {
                time_copies: self.perf,
            };
            select::split(&self.devices, &gpu, placement, opts)?
        } else {
            let chosen = select::choose(self.backend, self.device, self.threads, &gpu)?;
            if let select::Choice::Gpu { index, .. } = chosen.choice {
                check_fits_one_adapter(model, index)?;
            }
            chosen
        };
        eprintln!("smelt: {}", chosen.choice);
        Ok(chosen.backend)
    }

    /// The GPU's options as `--exact` and `--perf` say.
    pub fn gpu_options(&self) -> GpuOptions {
        if self.gpu_f32_acts {
            eprintln!("smelt: --gpu-f32-acts is deprecated: the fast mode is the GPU's default");
        }
        GpuOptions {
            quantize_activations: self.exact,
            profile: self.perf,
            ..GpuOptions::default()
        }
    }

    /// Whether the flags ask for a layer split, refusing ones that
    /// contradict each other.
    fn is_split(&self) -> anyhow::Result<bool> {
        let asked = self.split_mode == SplitMode::Layer
            || self.devices.len() > 1
            || !self.tensor_split.is_empty();
        if !asked {
            if let [one] = self.devices[..] {
                bail!(
                    "--devices {one} names one adapter: use --device {one}, or name several to split"
                );
            }
            return Ok(false);
        }
        if matches!(self.backend, BackendKind::Cpu | BackendKind::CpuRef) {
            bail!(
                "a layer split spreads a model over GPU adapters; it cannot go with --backend cpu"
            );
        }
        if self.split_mode == SplitMode::None && !self.devices.is_empty() && self.devices.len() < 2
        {
            bail!("--split-mode none takes one adapter (--device N)");
        }
        if self.devices.is_empty() {
            bail!("--split-mode layer and --tensor-split need --devices (e.g. --devices 0,1)");
        }
        Ok(true)
    }
}

/// Refuses, before any upload, a model that GPU adapter `index` cannot
/// hold with its KV cache and activations (where its own memory is known:
/// one that shares the host's is checked against that by `check_kv_fits`),
/// naming a layer split over the adapters there are where that would fit.
fn check_fits_one_adapter(model: &SplitModel, index: usize) -> anyhow::Result<()> {
    let adapter = select::split_adapters(&[index])?.remove(0);
    let own = |m: &AdapterMemory| m.source == MemorySource::VulkanHeap;
    let Some(memory) = adapter
        .memory
        .filter(own)
        .filter(|_| !adapter.unified_memory)
    else {
        return Ok(());
    };
    let one = [split::plan::DeviceMemory {
        name: format!("GPU {index} ({})", adapter.name),
        bytes: Some(memory.usable()),
    }];
    let Err(e) = split::plan::plan(&model.need(), &one, None) else {
        return Ok(());
    };
    let others = smelt::backend::gpu::adapters().len().saturating_sub(1);
    let hint = if others > 0 {
        "; or split it over several GPUs: --devices 0,1"
    } else {
        ""
    };
    bail!("cannot load {} on GPU {index}: {e}{hint}", model.name)
}

/// What planning a layer split (or the replicas' memory) needs to know of
/// the model and session.
pub struct SplitModel<'a> {
    name: String,
    file: &'a GgufFile,
    config: &'a smelt::model::Config,
    params: &'a SessionParams,
}

impl SplitModel<'_> {
    /// The bytes one adapter needs to hold the whole model and session.
    pub fn one_copy(&self) -> u64 {
        let need = self.need();
        need.on_device(0, 1, &(0..need.layers.len()))
    }

    /// Weights by layer, the KV cache, and a reserve on each device for
    /// the activations of a batch and the logits.
    fn need(&self) -> split::plan::Need {
        let c = self.config;
        let n_ctx = self
            .params
            .n_ctx
            .unwrap_or(c.n_ctx_train.min(smelt::model::DEFAULT_MAX_CTX));
        let kv = smelt::model::kv_cache::bytes(c, n_ctx, self.params.n_slots, self.params.kv_type)
            .unwrap_or(u64::MAX)
            / c.n_layer.max(1) as u64;
        // A batch's widest rows (the FFN's gate and up, attention's
        // scores) and the logits, with room for the backend's scratch.
        let widest = c.n_ff.max(c.n_embd * 4) as u64;
        let reserve = self.params.n_batch as u64 * widest * 4 * 4
            + self.params.n_outputs as u64 * c.n_vocab as u64 * 4
            + (256 << 20);
        split::plan::Need::from_gguf(self.file, c.n_layer, kv, reserve)
    }
}

/// The backend's work between two readings of its counters, per token.
#[derive(Clone, Copy, Debug)]
pub struct PerToken {
    pub submissions: f64,
    pub dispatches: f64,
}

impl PerToken {
    pub fn between(before: Stats, after: Stats, tokens: usize) -> Self {
        let n = tokens.max(1) as f64;
        Self {
            submissions: (after.submissions - before.submissions) as f64 / n,
            dispatches: (after.dispatches - before.dispatches) as f64 / n,
        }
    }

    /// `--verbose`'s line on stderr.
    pub fn report(&self, what: &str) {
        eprintln!(
            "smelt: {what}: {:.2} submissions, {:.1} dispatches per token",
            self.submissions, self.dispatches
        );
    }
}

/// `--verbose`'s lines for a layer split (nothing for one device): per
/// device, its submissions and dispatches per token and the boundary
/// copies into it, their host time where `--perf` timed them alone.
pub fn report_devices(before: &[DeviceStats], after: &[DeviceStats], tokens: usize, what: &str) {
    if after.len() < 2 || before.len() != after.len() {
        return;
    }
    let n = tokens.max(1) as f64;
    for (d, (b, a)) in before.iter().zip(after).enumerate() {
        let work = PerToken::between(b.stats, a.stats, tokens);
        let copies = (a.copies_in.count - b.copies_in.count) as f64 / n;
        let bytes = (a.copies_in.bytes - b.copies_in.bytes) as f64 / n;
        let seconds = (a.copies_in.seconds - b.copies_in.seconds) / n;
        let timed = if seconds > 0.0 {
            format!(", {:.1} µs", seconds * 1e6)
        } else {
            String::new()
        };
        eprintln!(
            "smelt: {what}: device {d} ({}): {:.2} submissions, {:.1} dispatches, \
             {copies:.2} copies in ({:.1} KiB{timed}) per token",
            a.name,
            work.submissions,
            work.dispatches,
            bytes / 1024.0
        );
    }
}

/// A model ready to run.
pub struct Opened {
    pub path: PathBuf,
    pub file: GgufFile,
    pub tokenizer: Tokenizer,
    pub session: Session,
}

/// A model file opened and checked, before any backend: what every copy of
/// it shares.
pub struct Prepared {
    pub path: PathBuf,
    pub file: GgufFile,
    pub config: smelt::model::Config,
    pub tokenizer: Tokenizer,
    /// The session's, with the KV cache type of the flags.
    pub params: SessionParams,
}

impl Prepared {
    /// Opens the model of `model` (or the default one) and reads its
    /// hyperparameters and tokenizer.
    pub fn open(
        model: Option<&Path>,
        backend: &BackendArgs,
        params: SessionParams,
    ) -> anyhow::Result<Self> {
        let params = SessionParams {
            kv_type: backend.cache_type,
            ..params
        };
        let path = crate::model_file::model_path(model)?;
        let file = open_gguf(&path)?;
        // The architecture is checked before the tokenizer: an unsupported
        // model should say so, not fail on its vocabulary.
        let config = smelt::model::Config::from_gguf(&file)
            .with_context(|| format!("cannot run {}", path.display()))?;
        let tokenizer = Tokenizer::from_gguf(&file)
            .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
        Ok(Self {
            path,
            file,
            config,
            tokenizer,
            params,
        })
    }

    /// What planning its memory needs.
    pub fn split_model(&self) -> SplitModel<'_> {
        SplitModel {
            name: file_name(&self.path),
            file: &self.file,
            config: &self.config,
            params: &self.params,
        }
    }

    /// Loads the weights into `backend`, with a progress bar on a
    /// terminal, and makes a session.
    pub fn load(
        &self,
        backend: Box<dyn smelt::backend::Backend>,
        verbose: bool,
    ) -> anyhow::Result<Session> {
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| self.progress_bar(&file_name(&self.path)));
        self.load_with(backend, verbose, bar, "")
    }

    /// A bar for a load, labelled `label`.
    pub fn progress_bar(&self, label: &str) -> indicatif::ProgressBar {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "loading {msg} {bar:30} {binary_bytes}/{binary_total_bytes}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(label.to_string());
        bar
    }

    /// [`Prepared::load`] with the progress shown on `bar`, if any, and
    /// `who` (`replica 1: `) before the lines it prints.
    pub fn load_with(
        &self,
        backend: Box<dyn smelt::backend::Backend>,
        verbose: bool,
        bar: Option<indicatif::ProgressBar>,
        who: &str,
    ) -> anyhow::Result<Session> {
        let path = &self.path;
        let name = backend.name();
        let start = Instant::now();
        let mut progress = |done: u64, total: u64| {
            if let Some(bar) = &bar {
                bar.set_length(total);
                bar.set_position(done);
            }
        };
        let model = Model::load(&self.file, backend, &mut progress)
            .with_context(|| format!("cannot load {}", path.display()))?;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let session = Session::new(model, self.params.clone())?;
        if verbose {
            // Commands that decode report per token; this is the load's share.
            let st = session.model().backend_stats();
            eprintln!(
                "smelt: {who}backend {name}: {} submissions, {} dispatches to load",
                st.submissions, st.dispatches
            );
        }
        eprintln!(
            "smelt: {who}loaded {} ({:.1} MiB, {} context) on {name} in {:.2} s",
            file_name(path),
            session.model().n_bytes as f64 / (1024.0 * 1024.0),
            session.n_ctx(),
            start.elapsed().as_secs_f64()
        );
        Ok(session)
    }
}

/// Opens the model of `model` (or the default one), checks it, loads it
/// into the backend with a progress bar on a terminal, and makes a session.
pub fn open(
    model: Option<&Path>,
    backend: &BackendArgs,
    params: SessionParams,
) -> anyhow::Result<Opened> {
    let (prepared, session) = open_prepared(model, backend, params)?;
    Ok(Opened {
        path: prepared.path,
        file: prepared.file,
        tokenizer: prepared.tokenizer,
        session,
    })
}

/// [`open`], keeping what the model's copies share apart from the session.
fn open_prepared(
    model: Option<&Path>,
    backend: &BackendArgs,
    params: SessionParams,
) -> anyhow::Result<(Prepared, Session)> {
    let prepared = Prepared::open(model, backend, params)?;
    let made = backend.make(&prepared.split_model())?;
    if !made.caps().is_gpu || made.caps().unified_memory {
        check_kv_fits(&prepared.config, &prepared.params, available_memory())?;
    }
    let session = prepared.load(made, backend.verbose)?;
    Ok((prepared, session))
}

/// Opens a GGUF file for a command. Errors name the file once: the
/// reader's own I/O errors already do.
pub fn open_gguf(path: &Path) -> anyhow::Result<GgufFile> {
    GgufFile::open(path).map_err(|e| match e {
        GgufError::Io { .. } => anyhow::anyhow!("{e}"),
        other => anyhow::anyhow!("{}: {other}", path.display()),
    })
}

/// Refuses a KV cache (slots × context) larger than the memory there is,
/// before anything is allocated, naming the sizes.
pub fn check_kv_fits(
    config: &smelt::model::Config,
    params: &SessionParams,
    available: Option<u64>,
) -> anyhow::Result<()> {
    let Some(available) = available else {
        return Ok(());
    };
    let n_ctx = params
        .n_ctx
        .unwrap_or(config.n_ctx_train.min(smelt::model::DEFAULT_MAX_CTX));
    let bytes = smelt::model::kv_cache::bytes(config, n_ctx, params.n_slots, params.kv_type);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match bytes {
        Some(b) if b <= available => Ok(()),
        needed => bail!(
            "the KV cache of {} slots × {n_ctx} positions needs {} ({} layers × K and V × {} values × {}); \
             {:.1} GiB of memory is available: lower --parallel or --ctx, or --cache-type (q8_0, q4_0)",
            params.n_slots,
            needed.map_or("more than 16 EiB".into(), |b| format!("{:.1} GiB", gib(b))),
            config.n_layer,
            config.kv_dim(),
            params.kv_type,
            gib(available),
        ),
    }
}

/// The memory the system could give this process now (Linux's
/// `MemAvailable`); `None` where it cannot be read.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A path's last part, for messages.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A model ready to serve.
pub struct Loaded {
    pub path: PathBuf,
    /// One copy of the model per replica (one unless `--replicas`).
    pub replicas: Vec<Replica>,
    pub template: ChatTemplate,
    pub encode: Encode,
    /// A token's text, control tokens' included.
    pub token_bytes: TokenBytes,
    /// Grammars compiled against the vocabulary, for constrained output.
    pub grammars: Arc<Grammars>,
    /// The model's own embedding pooling (`{arch}.pooling_type`), if it
    /// says.
    pub pooling: Option<Pooling>,
}

/// One copy of the model, for one scheduler.
pub struct Replica {
    pub engine: Box<dyn Engine>,
    pub vocab: Box<dyn Vocab>,
    /// Where it runs, as the access log names it: `GPU 1 (NAME)`.
    pub device: String,
}

/// Loads the model with `n_slots` sequence slots, `replicas` times (each
/// copy on its own GPU adapter: see [`crate::replicas`]).
pub fn load(
    args: &EngineArgs,
    n_slots: usize,
    replicas: usize,
    chat_template: Option<&str>,
) -> anyhow::Result<Loaded> {
    let params = SessionParams {
        n_ctx: args.ctx,
        n_slots,
        // One output row per slot and step, and a prompt's last row.
        n_outputs: n_slots.max(1),
        ..SessionParams::default()
    };
    let (prepared, sessions) = if replicas > 1 {
        crate::replicas::open(args, params, replicas)?
    } else {
        let (prepared, session) = open_prepared(args.model.as_deref(), &args.backend, params)?;
        let device = session.model().backend_name();
        (prepared, vec![(session, device)])
    };
    let template = ChatTemplate::from_gguf(&prepared.file, chat_template)
        .with_context(|| format!("the chat template of {}", prepared.path.display()))?;
    let pooling = prepared.config.pooling;
    let tokenizer = Arc::new(prepared.tokenizer);
    let encode = encoder(Arc::clone(&tokenizer), template.bos_token().to_string());
    let token_bytes: TokenBytes = {
        let tokenizer = Arc::clone(&tokenizer);
        Arc::new(move |id| tokenizer.token_to_piece(id))
    };
    let grammars = Arc::new(
        Grammars::new(Arc::clone(&tokenizer))
            .with_context(|| format!("the vocabulary of {}", prepared.path.display()))?,
    );
    let replicas = sessions
        .into_iter()
        .map(|(session, device)| Replica {
            engine: Box::new(session),
            vocab: Box::new(TokenizerVocab(Arc::clone(&tokenizer))),
            device,
        })
        .collect();
    Ok(Loaded {
        path: prepared.path,
        replicas,
        template,
        encode,
        token_bytes,
        grammars,
        pooling,
    })
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
