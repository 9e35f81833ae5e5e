//! Model quantization, as llama-quantize does it: a GGUF file to another
//! file type (`Q4_K_M`, `Q8_0`, ...), every tensor's type and bytes the same
//! as llama-quantize's without an importance matrix.
//!
//! - [`plan`] decides each tensor's type (`mix.rs`: llama.cpp's mixes) and
//!   checks, before anything is written, that every conversion can be done.
//! - [`quantize_file`] writes the output (`output.rs`: beside the output,
//!   never over the input, renamed into place when whole), converting rows
//!   through f32 on `threads` threads with `crate::quant`'s quantizers,
//!   which round as ggml's `quantize_row_*_ref` do.
//!
//! The output is laid out as llama-quantize lays it out: the input's
//! metadata in order, less the split keys, then `general.quantization_version`
//! and `general.file_type`; tensors in llama.cpp's order ([`llama_order`]).

mod mix;
mod output;

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use mix::{MixOptions, ModelShape, allows_quantization};
pub use output::{OutputFile, check_output};

use crate::gguf::{GgufError, GgufFile, GgufWriter, Header, Value};
use crate::quant::{self, FileType, GgmlType, QuantError};

/// ggml's `GGML_QNT_VERSION`, which llama-quantize writes.
pub const GGML_QNT_VERSION: u32 = 2;

/// Values per work item of a tensor's conversion, in whole rows
/// (llama-quantize's `min_chunk_size`): enough to outweigh taking the item.
const CHUNK_VALUES: usize = 32 * 512;

/// Keys of a split model's parts, which llama-quantize drops.
const SPLIT_KEYS: [&str; 3] = ["split.no", "split.count", "split.tensors.count"];

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("refusing to write {output} over the input {input} (the same file)")]
    SameFile { input: PathBuf, output: PathBuf },
    #[error("smelt cannot write {ftype} files: {reason}")]
    UnsupportedFileType { ftype: FileType, reason: String },
    #[error("tensor {tensor:?} is {dtype}, which smelt cannot convert from")]
    CannotDequantize { tensor: String, dtype: GgmlType },
    #[error("tensor {tensor:?} would become {dtype}, which smelt cannot quantize to")]
    CannotQuantize { tensor: String, dtype: GgmlType },
    #[error(
        "tensor {tensor:?} is already quantized ({dtype}); requantizing adds its rounding \
         error to the new type's (allow it with --allow-requantize)"
    )]
    RequantizeDisabled { tensor: String, dtype: GgmlType },
    #[error("tensor {tensor:?}: rows of {row_len} values are not whole {dtype} blocks of {block}")]
    NotWholeBlocks {
        tensor: String,
        row_len: u64,
        dtype: GgmlType,
        block: usize,
    },
    #[error("{key}: {reason}")]
    Metadata { key: String, reason: String },
    #[error("tensor {tensor:?}: {source}")]
    Quant { tensor: String, source: QuantError },
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// What to make of a file.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub ftype: FileType,
    pub mix: MixOptions,
    /// llama-quantize's `--allow-requantize`: convert tensors that are
    /// already quantized.
    pub allow_requantize: bool,
}

/// One tensor of the output.
#[derive(Clone, Debug)]
pub struct TensorPlan {
    /// Its index in the input's tensor table.
    pub source: usize,
    pub name: String,
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl TensorPlan {
    /// False when the bytes are copied as they are.
    pub fn converts(&self) -> bool {
        self.from != self.to
    }
}

/// Every output tensor, in output order.
#[derive(Clone, Debug)]
pub struct Plan {
    pub ftype: FileType,
    pub tensors: Vec<TensorPlan>,
    /// Tensors whose type fell back to a smaller block (name, chosen, used).
    pub fallbacks: Vec<(String, GgmlType, GgmlType)>,
}

/// The file types smelt writes: those whose tensor types it can quantize
/// to without an importance matrix.
pub fn writable_file_types() -> impl Iterator<Item = FileType> {
    use FileType::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K,
        Q8_0, F16, BF16, F32,
    ]
    .into_iter()
}

/// llama.cpp's tensor order (`weight_name_comparer`): by layer number
/// (`blk.N.`; tensors outside the layers first), then by name.
pub fn llama_order(a: &str, b: &str) -> Ordering {
    let layer = |name| layer_number(name).unwrap_or(-1);
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

/// What llama.cpp calls a file's type (`llama_ftype_name`, as llama-bench
/// and llama-cli print it): `Q4_K - Medium` for `general.file_type` 15, or
/// a guess from the tensors' types where that key is missing.
pub fn describe_file(header: &Header) -> String {
    let mut tensors: Vec<_> = header.tensors.iter().collect();
    tensors.sort_by(|a, b| llama_order(&a.name, &b.name));
    let file_type = header.get("general.file_type").and_then(|v| v.as_u32());
    quant::describe_file_type(file_type, tensors.iter().map(|t| t.dtype))
}

/// The `N` of a name starting `blk.N`, read as `sscanf("blk.%d")` reads it.
fn layer_number(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("blk.")?.trim_start();
    let digits_at = usize::from(rest.starts_with(['+', '-']));
    let end = rest[digits_at..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(rest.len(), |i| i + digits_at);
    rest[..end].parse().ok()
}

/// Decides every tensor's type and checks that each conversion can be done.
pub fn plan(file: &GgufFile, options: &QuantizeOptions) -> Result<Plan, QuantizeError> {
    let ftype = options.ftype;
    let unsupported = |reason: &str| QuantizeError::UnsupportedFileType {
        ftype,
        reason: reason.into(),
    };
    if ftype == FileType::Q2_K_S {
        return Err(unsupported(
            "its Q2_K tensors need an importance matrix, which smelt does not make",
        ));
    }
    let default_type = ftype
        .default_type()
        .filter(|&t| quant::can_quantize(t) && writable_file_types().any(|w| w == ftype))
        .ok_or_else(|| unsupported("smelt has no quantizer for its tensor types"))?;

    let mut order: Vec<usize> = (0..file.tensors.len()).collect();
    order.sort_by(|&a, &b| llama_order(&file.tensors[a].name, &file.tensors[b].name));
    let shape = ModelShape::from_metadata(file);
    let names = file.tensors.iter().map(|t| t.name.as_str());
    let mut mix = mix::Mix::new(ftype, default_type, &shape, &options.mix, names);
    let mut tensors = Vec::with_capacity(order.len());
    for source in order {
        let info = &file.tensors[source];
        let to = mix.tensor_type(info)?;
        let tensor = TensorPlan {
            source,
            name: info.name.clone(),
            dims: info.dims.clone(),
            from: info.dtype,
            to,
            bytes_in: info.size,
            bytes_out: 0,
        };
        let bytes_out = check_conversion(&tensor, info.n_elements(), options)?;
        tensors.push(TensorPlan {
            bytes_out,
            ..tensor
        });
    }
    Ok(Plan {
        ftype,
        tensors,
        fallbacks: mix.fallbacks,
    })
}

/// The output size of a tensor of `n` values, or why it cannot be made.
fn check_conversion(
    t: &TensorPlan,
    n: u64,
    options: &QuantizeOptions,
) -> Result<u64, QuantizeError> {
    if !t.converts() {
        return Ok(t.bytes_in);
    }
    let tensor = || t.name.clone();
    if !quant::can_dequantize(t.from) {
        return Err(QuantizeError::CannotDequantize {
            tensor: tensor(),
            dtype: t.from,
        });
    }
    if t.from.is_quantized() && !options.allow_requantize {
        return Err(QuantizeError::RequantizeDisabled {
            tensor: tensor(),
            dtype: t.from,
        });
    }
    if !quant::can_quantize(t.to) || t.to.llama_ftype().is_none() {
        return Err(QuantizeError::CannotQuantize {
            tensor: tensor(),
            dtype: t.to,
        });
    }
    let row_len = t.dims[0];
    let not_whole = || QuantizeError::NotWholeBlocks {
        tensor: tensor(),
        row_len,
        dtype: t.to,
        block: t.to.block_size(),
    };
    if !row_len.is_multiple_of(t.to.block_size() as u64) {
        return Err(not_whole());
    }
    usize::try_from(n)
        .ok()
        .and_then(|n| t.to.row_bytes(n))
        .map(|b| b as u64)
        .ok_or_else(not_whole)
}

/// Reports how far [`quantize_file`] has got; called from worker threads.
pub trait Progress: Sync {
    /// A tensor is about to be written.
    fn tensor(&self, _plan: &TensorPlan) {}
    /// `bytes` more of the input are done.
    fn bytes(&self, _bytes: u64) {}
}

impl Progress for () {}

/// Writes `plan` of `file` (read from `input`) to `output`. Returns the
/// output's size.
pub fn quantize_file(
    file: &GgufFile,
    input: &Path,
    plan: &Plan,
    output: &Path,
    threads: usize,
    progress: &dyn Progress,
) -> Result<u64, QuantizeError> {
    let mut out = OutputFile::create(output, input)?;
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata.iter() {
        let reset = ["general.quantization_version", "general.file_type"].contains(&key);
        if !reset && !SPLIT_KEYS.contains(&key) {
            writer.set(key, value.clone());
        }
    }
    writer.set("general.quantization_version", Value::U32(GGML_QNT_VERSION));
    writer.set("general.file_type", Value::U32(plan.ftype.id()));
    for t in &plan.tensors {
        writer.declare_tensor(t.name.clone(), t.to, &t.dims)?;
    }
    let header = writer.header_bytes();
    out.write_all(&header)?;
    let mut written = header.len() as u64;
    let zeros = vec![0u8; writer.padded(1) as usize];
    for t in &plan.tensors {
        progress.tensor(t);
        let info = &file.tensors[t.source];
        let data = file.tensor_data(info);
        let converted;
        let bytes = if t.converts() {
            let row_len = info.row_len() as usize;
            converted =
                convert(data, t.from, t.to, row_len, threads, progress).map_err(|source| {
                    QuantizeError::Quant {
                        tensor: t.name.clone(),
                        source,
                    }
                })?;
            &converted[..]
        } else {
            progress.bytes(data.len() as u64);
            data
        };
        debug_assert_eq!(bytes.len() as u64, t.bytes_out);
        let len = bytes.len() as u64;
        let padding = (writer.padded(len) - len) as usize;
        out.write_all(bytes)?;
        out.write_all(&zeros[..padding])?;
        written += len + padding as u64;
    }
    out.commit()?;
    Ok(written)
}

/// Converts whole rows of `row_len` values from `from` to `to`, in work
/// items of [`CHUNK_VALUES`] taken in turn by `threads` threads.
fn convert(
    src: &[u8],
    from: GgmlType,
    to: GgmlType,
    row_len: usize,
    threads: usize,
    progress: &dyn Progress,
) -> Result<Vec<u8>, QuantError> {
    let not_whole = |dtype: GgmlType| QuantError::NotWholeBlocks {
        dtype,
        n: row_len,
        block: dtype.block_size(),
    };
    let src_row = from.row_bytes(row_len).ok_or(not_whole(from))?;
    let dst_row = to.row_bytes(row_len).ok_or(not_whole(to))?;
    let rows = src.len().checked_div(src_row).unwrap_or(0);
    // (rows, dst_row) the converted tensor.
    let mut out = vec![0u8; rows * dst_row];
    let item_rows = CHUNK_VALUES.div_ceil(row_len.max(1));
    let items = Mutex::new(
        src.chunks(item_rows * src_row.max(1))
            .zip(out.chunks_mut(item_rows * dst_row.max(1))),
    );
    let work = || -> Result<(), QuantError> {
        let mut scratch = Vec::new();
        loop {
            let next = items.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((s, d)) = next else {
                return Ok(());
            };
            quant::convert_rows(from, s, to, d, row_len, &mut scratch)?;
            progress.bytes(s.len() as u64);
        }
    };
    let workers = threads.clamp(1, rows.div_ceil(item_rows).max(1));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
        let mine = work();
        handles
            .into_iter()
            .map(|h| h.join().expect("a conversion worker panicked"))
            .fold(mine, Result::and)
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_order_sorts_by_layer_then_name() {
        let mut names = vec![
            "blk.10.attn_q.weight",
            "token_embd.weight",
            "blk.2.ffn_up.weight",
            "blk.2.attn_k.weight",
            "output.weight",
            "blk.0.attn_q.weight",
        ];
        names.sort_by(|a, b| llama_order(a, b));
        assert_eq!(
            names,
            [
                "output.weight",
                "token_embd.weight",
                "blk.0.attn_q.weight",
                "blk.2.attn_k.weight",
                "blk.2.ffn_up.weight",
                "blk.10.attn_q.weight",
            ]
        );
        assert_eq!(layer_number("blk.7x"), Some(7));
        assert_eq!(layer_number("blk.x"), None);
    }
}
