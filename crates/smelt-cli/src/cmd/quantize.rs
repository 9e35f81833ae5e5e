//! `smelt quantize IN OUT TYPE`: a model to another file type, tensor for
//! tensor the file llama-quantize writes (`smelt::quantize`), with its
//! flags.
//!
//! OUT is written beside its final path and renamed into place when whole;
//! it may not be IN under any name. A progress bar shows on a terminal.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use smelt::gguf::{GgufError, GgufFile};
use smelt::quant::{FileType, GgmlType};
use smelt::quantize::{self, MixOptions, Plan, Progress, QuantizeOptions, TensorPlan};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file to read
    input: PathBuf,
    /// The GGUF file to write: made beside its path and renamed into place
    /// when complete; never the input
    output: PathBuf,
    /// File type to make: Q4_K_M, Q8_0, ... (llama-quantize's names;
    /// Q3_K, Q4_K, Q5_K mean the _M mixes)
    #[arg(value_parser = parse_file_type)]
    r#type: FileType,
    /// Type of output.weight (or of the embeddings where the output is tied
    /// to them), as llama-quantize's --output-tensor-type
    #[arg(long, alias = "output-type", value_parser = parse_tensor_type)]
    output_tensor_type: Option<GgmlType>,
    /// Type of token_embd.weight, as llama-quantize's --token-embedding-type
    #[arg(long, value_parser = parse_tensor_type)]
    token_embedding_type: Option<GgmlType>,
    /// Convert tensors that are already quantized (their rounding error adds
    /// to the new type's)
    #[arg(long)]
    allow_requantize: bool,
    /// Leave output.weight as it is
    #[arg(long)]
    leave_output_tensor: bool,
    /// Give every quantized tensor the file type's own type: no mix, no
    /// Q6_K output
    #[arg(long)]
    pure: bool,
    /// Print what each tensor would become, and the sizes, without writing
    #[arg(long)]
    dry_run: bool,
    /// Worker threads [default: all cores]
    #[arg(short, long)]
    threads: Option<usize>,
    /// Print one line per tensor
    #[arg(short, long)]
    verbose: bool,
}

/// A file type smelt can write, or an error listing them.
fn parse_file_type(s: &str) -> Result<FileType, String> {
    let names = || {
        quantize::writable_file_types()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let t = FileType::from_name(s)
        .ok_or_else(|| format!("unknown file type {s:?}; smelt writes {}", names()))?;
    if !quantize::writable_file_types().any(|w| w == t) {
        return Err(format!(
            "smelt cannot write {t} files; it writes {}",
            names()
        ));
    }
    Ok(t)
}

/// A tensor type smelt can quantize to, for the per-tensor overrides.
fn parse_tensor_type(s: &str) -> Result<GgmlType, String> {
    let t = GgmlType::from_name(s).ok_or_else(|| format!("unknown tensor type {s:?}"))?;
    if !smelt::quant::can_quantize(t) || t.llama_ftype().is_none() {
        return Err(format!(
            "smelt cannot quantize weights to {t}; it can to Q2_K..Q6_K, Q4_0, Q4_1, Q5_0, \
             Q5_1, Q8_0, F16, BF16 and F32"
        ));
    }
    Ok(t)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let start = Instant::now();
    // A read error names the path itself; a format error gets it here.
    let file = GgufFile::open(&args.input).map_err(|e| match e {
        GgufError::Io { .. } => anyhow::anyhow!("{e}"),
        other => anyhow::anyhow!("cannot open {}: {other}", args.input.display()),
    })?;
    if !args.dry_run {
        // Before the plan's notes and the work: a clear refusal first.
        quantize::check_output(&args.output, &args.input)?;
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let options = QuantizeOptions {
        ftype: args.r#type,
        mix: MixOptions {
            output_tensor_type: args.output_tensor_type,
            token_embedding_type: args.token_embedding_type,
            pure: args.pure,
            leave_output_tensor: args.leave_output_tensor,
        },
        allow_requantize: args.allow_requantize,
    };
    let plan = quantize::plan(&file, &options).with_context(|| {
        format!(
            "cannot quantize {} to {}",
            args.input.display(),
            args.r#type
        )
    })?;
    if args.verbose || args.dry_run {
        for (i, t) in plan.tensors.iter().enumerate() {
            eprintln!(
                "[{:>4}/{}] {:<40} {:>6} -> {:<6} {:?}",
                i + 1,
                plan.tensors.len(),
                t.name,
                t.from.name(),
                t.to.name(),
                t.dims
            );
        }
    }
    report_fallbacks(&plan, args.verbose);
    let (bytes_in, bytes_out) = plan
        .tensors
        .iter()
        .fold((0, 0), |(i, o), t| (i + t.bytes_in, o + t.bytes_out));
    if args.dry_run {
        eprintln!(
            "{} tensors: {} -> {} (not written)",
            plan.tensors.len(),
            mib(bytes_in),
            mib(bytes_out)
        );
        return Ok(());
    }
    let bar = ProgressBar::new(&plan, bytes_in);
    let written = quantize::quantize_file(&file, &args.input, &plan, &args.output, threads, &bar)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    bar.finish();
    eprintln!(
        "quantized {} tensors to {} ({}) with {threads} threads: {} -> {} in {:.2} s: {}",
        plan.tensors.len(),
        plan.ftype,
        plan.ftype.description(),
        mib(bytes_in),
        mib(written),
        start.elapsed().as_secs_f64(),
        args.output.display()
    );
    Ok(())
}

/// One line for the tensors whose rows are not whole blocks of their type,
/// which fall back as in llama-quantize; each named with `--verbose`.
fn report_fallbacks(plan: &Plan, verbose: bool) {
    let mut kinds: BTreeMap<(GgmlType, GgmlType), usize> = BTreeMap::new();
    for (name, chosen, used) in &plan.fallbacks {
        *kinds.entry((*chosen, *used)).or_default() += 1;
        if verbose {
            eprintln!("{name}: rows are not whole {chosen} blocks, so it is {used}");
        }
    }
    if !kinds.is_empty() {
        let kinds: Vec<String> = kinds
            .iter()
            .map(|((chosen, used), n)| format!("{n} {chosen} -> {used}"))
            .collect();
        eprintln!(
            "note: rows not whole blocks of their type, so a smaller block: {}",
            kinds.join(", ")
        );
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The terminal's progress bar, by bytes of the input; nothing elsewhere.
struct ProgressBar(Option<indicatif::ProgressBar>);

impl ProgressBar {
    fn new(plan: &Plan, total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} {bar:30} {binary_bytes}/{binary_total_bytes} {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_prefix(format!("quantizing to {}", plan.ftype));
            bar
        });
        Self(bar)
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Progress for ProgressBar {
    fn tensor(&self, plan: &TensorPlan) {
        if let Some(bar) = &self.0 {
            bar.set_message(format!("{} -> {}", plan.name, plan.to));
        }
    }

    fn bytes(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }
}
