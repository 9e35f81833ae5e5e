//! `smelt quantize IN OUT TYPE`: requantizes every 2-D weight of a model to
//! one type, like llama-quantize with `--pure`.
//!
//! - Weights (tensors of two or more dimensions named `*.weight`, less the
//!   small ones llama-quantize leaves alone) become TYPE; the output tensor
//!   (`output.weight`, or `token_embd.weight` when the output is tied to
//!   the embeddings) becomes `--output-type`, or by default what
//!   llama-quantize makes it (see [`default_output_type`]).
//! - 1-D tensors (norms, biases) become F32; anything else is copied.
//! - A tensor already of its target type is copied byte for byte.
//! - Metadata is copied in order, with `general.file_type` set to
//!   llama.cpp's `llama_ftype` for TYPE and `general.quantization_version`
//!   to ggml's `GGML_QNT_VERSION`.
//!
//! Rows are converted through f32 by `smelt::quant`, whose quantizers round
//! as ggml's reference ones do, split over threads. OUT is written next to
//! its final path and renamed into place.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use smelt::gguf::{GgufFile, GgufWriter, TensorInfo, Value};
use smelt::quant::{self, GgmlType};

/// ggml's `GGML_QNT_VERSION`, which llama-quantize writes.
const GGML_QNT_VERSION: u32 = 2;

/// Weights llama-quantize never quantizes, by name fragment (from
/// `llama_model_quantize_impl`): MoE routers, positional and token-type
/// embeddings, and the tiny 2-D weights of Gemma 3n, Mamba, RWKV and T5.
const KEEP: [&str; 10] = [
    "_norm.weight",
    "ffn_gate_inp.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "position_embd.weight",
    "token_types.weight",
    "ssm_conv1d.weight",
    "time_mix_first.weight",
    "attn_rel_b.weight",
];

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file to read
    input: PathBuf,
    /// The GGUF file to write (replaced atomically)
    output: PathBuf,
    /// Type of the 2-D weights: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16 or F32
    #[arg(value_parser = parse_weight_type)]
    r#type: GgmlType,
    /// Type of the output tensor (`output.weight`, or `token_embd.weight`
    /// when tied), like llama-quantize's --output-tensor-type
    #[arg(long, value_parser = parse_weight_type)]
    output_type: Option<GgmlType>,
    /// Worker threads [default: all cores]
    #[arg(short, long)]
    threads: Option<usize>,
    /// Print one line per tensor
    #[arg(short, long)]
    verbose: bool,
}

/// OUT replaces its path whole, so OUT naming IN (directly, through `..`
/// or a link) would replace the model being read.
fn refuse_same_file(input: &Path, output: &Path) -> anyhow::Result<()> {
    let (Ok(a), Ok(b)) = (input.canonicalize(), output.canonicalize()) else {
        return Ok(());
    };
    if a == b {
        bail!(
            "the output {} is the input file; write to another path",
            output.display()
        );
    }
    Ok(())
}

/// A type name that smelt can quantize to and llama.cpp can load as weights.
fn parse_weight_type(s: &str) -> Result<GgmlType, String> {
    let t = GgmlType::from_name(s).ok_or_else(|| format!("unknown type {s:?}"))?;
    if !quant::can_quantize(t) {
        return Err(format!("smelt cannot quantize to {t} yet"));
    }
    if t.llama_ftype().is_none() {
        return Err(format!("{t} is an activation type, not a weight type"));
    }
    Ok(t)
}

/// The output tensor's type when none is asked for, as llama-quantize
/// chooses it (`llama_tensor_get_type`): Q6_K for the 4- and 5-bit types, or
/// Q8_0 when the rows are not whole 256-value super-blocks (SmolLM2's 576)
/// or smelt cannot write Q6_K; the weights' own type otherwise (Q8_0 and
/// the float types).
fn default_output_type(weights: GgmlType, row_len: usize) -> GgmlType {
    use GgmlType::*;
    match weights {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 => {
            if quant::can_quantize(Q6_K) && row_len.is_multiple_of(Q6_K.block_size()) {
                Q6_K
            } else {
                Q8_0
            }
        }
        t => t,
    }
}

/// What happens to one tensor.
#[derive(Clone, Copy, PartialEq)]
enum Plan {
    Copy,
    Convert(GgmlType),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let start = Instant::now();
    refuse_same_file(&args.input, &args.output)?;
    let file = GgufFile::open(&args.input)
        .with_context(|| format!("cannot open {}", args.input.display()))?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // With no `output.weight`, the embeddings are also the output matrix.
    let output_name = if file.tensor_info("output.weight").is_some() {
        "output.weight"
    } else {
        "token_embd.weight"
    };

    let output_type = match (args.output_type, file.tensor_info(output_name)) {
        (Some(t), _) => t,
        (None, Some(info)) => default_output_type(args.r#type, info.row_len() as usize),
        (None, None) => args.r#type,
    };
    let mut plans = Vec::with_capacity(file.tensors.len());
    for info in &file.tensors {
        let target = if info.name == output_name {
            output_type
        } else {
            args.r#type
        };
        plans.push(plan(info, target)?);
    }
    // llama-quantize refuses this without --allow-requantize; say it at least.
    let requantized: BTreeSet<GgmlType> = file
        .tensors
        .iter()
        .zip(&plans)
        .filter(|(t, p)| t.dtype.is_quantized() && matches!(p, Plan::Convert(_)))
        .map(|(t, _)| t.dtype)
        .collect();
    if !requantized.is_empty() {
        let names: Vec<&str> = requantized.iter().map(|t| t.name()).collect();
        eprintln!(
            "warning: requantizing weights that are already quantized ({}): \
             their rounding error adds to the new type's",
            names.join(", ")
        );
    }

    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata.iter() {
        writer.set(key, value.clone());
    }
    let ftype = args.r#type.llama_ftype().expect("checked by the parser");
    writer.set("general.file_type", Value::U32(ftype));
    writer.set("general.quantization_version", Value::U32(GGML_QNT_VERSION));

    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    for (i, (info, &plan)) in file.tensors.iter().zip(&plans).enumerate() {
        let data = file.tensor_data(info);
        let (dtype, out) = match plan {
            Plan::Copy => (info.dtype, data.to_vec()),
            Plan::Convert(to) => (to, convert(info, data, to, threads)?),
        };
        if args.verbose {
            eprintln!(
                "[{:>4}/{}] {:<36} {:>8} -> {:<8} {:?}",
                i + 1,
                file.tensors.len(),
                info.name,
                info.dtype.name(),
                dtype.name(),
                info.dims
            );
        }
        bytes_in += data.len() as u64;
        bytes_out += out.len() as u64;
        writer
            .add_tensor(info.name.clone(), dtype, &info.dims, out)
            .with_context(|| format!("tensor {:?}", info.name))?;
    }
    writer.write_file(&args.output)?;

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "quantized {} tensors to {} (output tensor {output_type}) with {threads} threads: \
         {:.2} MiB -> {:.2} MiB in {:.2} s: {}",
        file.tensors.len(),
        args.r#type,
        mib(bytes_in),
        mib(bytes_out),
        start.elapsed().as_secs_f64(),
        args.output.display()
    );
    Ok(())
}

/// Decides a tensor's fate; errors name the tensor.
fn plan(info: &TensorInfo, target: GgmlType) -> anyhow::Result<Plan> {
    let is_weight = info.dims.len() >= 2
        && info.name.ends_with(".weight")
        && !KEEP.iter().any(|k| info.name.contains(k));
    let to = if is_weight {
        target
    } else if info.dims.len() == 1 && quant::can_dequantize(info.dtype) {
        GgmlType::F32
    } else {
        return Ok(Plan::Copy);
    };
    if to == info.dtype {
        return Ok(Plan::Copy);
    }
    if !quant::can_dequantize(info.dtype) {
        bail!(
            "tensor {:?} is {}, which smelt cannot dequantize, so it cannot become {to}",
            info.name,
            info.dtype
        );
    }
    let row_len = info.row_len() as usize;
    if !row_len.is_multiple_of(to.block_size()) {
        bail!(
            "tensor {:?} has rows of {row_len} values, not a multiple of the {to} block size {}; \
             choose a type with a smaller block (Q8_0, Q4_0, F16, ...)",
            info.name,
            to.block_size()
        );
    }
    Ok(Plan::Convert(to))
}

/// Converts a tensor's rows to `to`, spread over `threads` workers that each
/// take a contiguous run of rows.
fn convert(
    info: &TensorInfo,
    data: &[u8],
    to: GgmlType,
    threads: usize,
) -> anyhow::Result<Vec<u8>> {
    let row_len = info.row_len() as usize;
    let rows = info.n_rows() as usize;
    let bad = || format!("tensor {:?}", info.name);
    let src_row = info.dtype.row_bytes(row_len).with_context(bad)?;
    let dst_row = to.row_bytes(row_len).with_context(bad)?;
    // (rows, dst_row) the converted tensor.
    let mut out = vec![0u8; rows * dst_row];
    if out.is_empty() {
        return Ok(out);
    }
    // At least 16 rows per worker: spawning costs more than tiny tensors.
    let per = rows.div_ceil(threads).max(16);
    std::thread::scope(|s| {
        let workers: Vec<_> = data
            .chunks(per * src_row)
            .zip(out.chunks_mut(per * dst_row))
            .map(|(src, dst)| {
                s.spawn(move || {
                    let mut scratch = Vec::new();
                    quant::convert_rows(info.dtype, src, to, dst, row_len, &mut scratch)
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| match w.join() {
            Ok(result) => result.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow!("a conversion worker panicked")),
        })
    })
    .with_context(bad)?;
    Ok(out)
}
