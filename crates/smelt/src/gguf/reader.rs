//! The GGUF reader: header, metadata and tensor infos, parsed from bytes that
//! nobody vouches for.
//!
//! Layout (all little-endian):
//!
//! ```text
//! magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
//! n_kv × (key: string, type: u32, value)
//! n_tensors × (name: string, n_dims: u32, dims: u64 × n_dims, type: u32, offset: u64)
//! padding to `general.alignment` (default 32)
//! tensor data; each tensor's offset is relative to here and aligned
//! ```
//!
//! A string is a u64 byte length and the bytes; an array is an element type
//! u32, a u64 count and the elements. Versions 2 and 3 share this layout
//! (version 1 used u32 counts and is refused, as ggml refuses it).
//!
//! Memory. Nothing is sized from a count until the count is known to fit in
//! the bytes that remain (`Cursor::check_count`), and every element is then
//! read from its own bytes, so each parsed item costs a bounded multiple of
//! the bytes it was read from: at most 64 bytes of `(String, Value)` per 13
//! encoded bytes of metadata entry, 72 bytes of `TensorInfo` per 32 encoded
//! bytes of tensor info, 32 bytes of `Array` per 12 encoded bytes of nested
//! array. Nested arrays are walked once without allocating before they are
//! built, so the counts of inner arrays never reserve memory for bytes that
//! an outer array also claims. `tests/gguf_hostile.rs` measures the bound.

use super::cursor::{Cursor, Site};
use super::value::{Array, Metadata, Value, ValueType};
use super::{GgufError, MAX_DIMS};
use crate::quant::GgmlType;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays nested deeper than this are refused. Real files use one level;
/// the limit keeps recursion (and the stack) shallow on hostile input.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Where a tensor lives and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension. One to
    /// `MAX_DIMS` entries, each at most `i64::MAX` (ggml's `ne` is int64).
    pub dims: Vec<u64>,
    pub dtype: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data, from the dims and the type.
    pub size: u64,
}

impl TensorInfo {
    /// Number of values.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Values per row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of every dim but the first.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// A parsed GGUF header: everything but the tensor data itself.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset where tensor data begins.
    pub data_offset: u64,
}

impl Header {
    /// Parses and validates a GGUF file held in `bytes`: every tensor's data
    /// must lie inside `bytes`, aligned, and not overlap another.
    pub fn parse(bytes: &[u8]) -> Result<Self, GgufError> {
        let mut r = Cursor::new(bytes);
        let magic = r.array::<4>(Site::Header("magic"))?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = r.u32(Site::Header("version"))?;
        // A big-endian file's version reads as 0x0n000000 here; ggml tells
        // them apart the same way (low 16 bits zero).
        if version != 0 && version & 0xFFFF == 0 {
            return Err(GgufError::BigEndian { version });
        }
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64(Site::Header("tensor count"))?;
        let n_kv = r.u64(Site::Header("metadata count"))?;

        let (metadata, alignment) = read_metadata(&mut r, n_kv)?;

        // Name length, n_dims, one dim, type and offset at the least.
        let n = r.check_count(
            n_tensors,
            8 + 4 + 8 + 4 + 8,
            8,
            Site::Header("tensor count"),
        )?;
        let mut tensors = Vec::with_capacity(n);
        // Where each tensor's info starts, for errors found after parsing.
        let mut info_at = Vec::with_capacity(n);
        for i in 0..n_tensors {
            info_at.push(r.pos());
            tensors.push(read_tensor_info(&mut r, i, alignment)?);
        }

        let data_offset = align_up(r.pos() as u64, alignment).ok_or(GgufError::Overflow {
            what: "data section offset".into(),
        })?;
        check_tensor_placement(&tensors, &info_at, data_offset, bytes.len() as u64)?;

        Ok(Header {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }
}

/// The key→value table and the data alignment it sets.
fn read_metadata(r: &mut Cursor, n_kv: u64) -> Result<(Metadata, u64), GgufError> {
    // Each entry takes at least a key length, a type and a one-byte value.
    let n = r.check_count(n_kv, 8 + 4 + 1, 16, Site::Header("metadata count"))?;
    let mut entries = Vec::with_capacity(n);
    let mut entry_at = Vec::with_capacity(n);
    for i in 0..n_kv {
        entry_at.push(r.pos());
        let key = r.string(Site::Key(i))?;
        let ty = value_type(r, &key)?;
        let value = read_value(r, ty, &key)?;
        entries.push((key, value));
    }
    let alignment = match entries.iter().position(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(i) => match entries[i].1 {
            Value::U32(a) if a.is_power_of_two() => u64::from(a),
            ref v => {
                return Err(GgufError::BadAlignment {
                    value: format!("{} {v}", v.value_type().name()),
                    offset: entry_at[i],
                });
            }
        },
    };
    let metadata = Metadata::from_entries(entries).map_err(|(i, key)| GgufError::DuplicateKey {
        key,
        offset: entry_at[i],
    })?;
    Ok((metadata, alignment))
}

fn value_type(r: &mut Cursor, key: &str) -> Result<ValueType, GgufError> {
    let at = r.pos();
    let id = r.u32(Site::Value(key))?;
    ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        id,
        offset: at,
    })
}

/// `n` bools, each byte 0 or 1.
fn bools<'a>(r: &mut Cursor<'a>, n: usize, key: &str) -> Result<&'a [u8], GgufError> {
    let at = r.pos();
    let raw = r.take(n as u64, Site::Value(key))?;
    match raw.iter().position(|&b| b > 1) {
        None => Ok(raw),
        Some(i) => Err(GgufError::BadBool {
            key: key.to_string(),
            value: raw[i],
            offset: at + i,
        }),
    }
}

fn read_value(r: &mut Cursor, ty: ValueType, key: &str) -> Result<Value, GgufError> {
    let site = Site::Value(key);
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::from_le_bytes(r.array(site)?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(r.array(site)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(r.array(site)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(r.array(site)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(r.array(site)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(r.array(site)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(r.array(site)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(r.array(site)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(r.array(site)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(r.array(site)?)),
        ValueType::Bool => Value::Bool(bools(r, 1, key)?[0] == 1),
        ValueType::String => Value::String(r.string(site)?),
        ValueType::Array => Value::Array(read_array(r, key, 0, false)?),
    })
}

/// An array at nesting `depth` (0 for a key's own value). `walked` says an
/// enclosing array already checked this one with `walk_array`, so its counts
/// are known to be honest.
fn read_array(r: &mut Cursor, key: &str, depth: usize, walked: bool) -> Result<Array, GgufError> {
    let site = Site::Value(key);
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::TooDeep {
            key: key.to_string(),
            offset: r.pos(),
        });
    }
    let ty = value_type(r, key)?;
    let n = r.count(ty.min_encoded_size(), site)?;

    // Fixed-size elements: the bytes are taken first, so the vector built
    // from them is exactly as large as what was read.
    macro_rules! scalars {
        ($variant:ident, $t:ty) => {{
            let raw = r.take((n * size_of::<$t>()) as u64, site)?;
            Array::$variant(
                raw.chunks_exact(size_of::<$t>())
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks_exact")))
                    .collect(),
            )
        }};
    }
    Ok(match ty {
        ValueType::U8 => scalars!(U8, u8),
        ValueType::I8 => scalars!(I8, i8),
        ValueType::U16 => scalars!(U16, u16),
        ValueType::I16 => scalars!(I16, i16),
        ValueType::U32 => scalars!(U32, u32),
        ValueType::I32 => scalars!(I32, i32),
        ValueType::F32 => scalars!(F32, f32),
        ValueType::U64 => scalars!(U64, u64),
        ValueType::I64 => scalars!(I64, i64),
        ValueType::F64 => scalars!(F64, f64),
        ValueType::Bool => Array::Bool(bools(r, n, key)?.iter().map(|&b| b == 1).collect()),
        ValueType::String => {
            // n ≤ remaining / 8: at most 24 bytes of String per 8 bytes left.
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(r.string(site)?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            // Every inner array would reserve room against the same remaining
            // bytes; walk them first so each count is known to be honest.
            if !walked {
                let start = r.pos();
                for _ in 0..n {
                    walk_array(r, key, depth + 1)?;
                }
                r.rewind(start);
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(r, key, depth + 1, true)?);
            }
            Array::Array(v)
        }
    })
}

/// Checks an array as `read_array` would, allocating nothing.
fn walk_array(r: &mut Cursor, key: &str, depth: usize) -> Result<(), GgufError> {
    let site = Site::Value(key);
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::TooDeep {
            key: key.to_string(),
            offset: r.pos(),
        });
    }
    let ty = value_type(r, key)?;
    let n = r.count(ty.min_encoded_size(), site)?;
    match ty {
        ValueType::String => {
            for _ in 0..n {
                r.string_bytes(site)?;
            }
        }
        ValueType::Array => {
            for _ in 0..n {
                walk_array(r, key, depth + 1)?;
            }
        }
        ValueType::Bool => {
            bools(r, n, key)?;
        }
        // Fixed-size scalars: check_count already proved they fit.
        _ => {
            r.take((n * ty.min_encoded_size()) as u64, site)?;
        }
    }
    Ok(())
}

/// The `i`-th tensor info. Its data is checked later, once the data section
/// is known.
fn read_tensor_info(r: &mut Cursor, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let at = r.pos();
    let name = r.string(Site::TensorName(i))?;
    let bad = |reason: String| GgufError::BadTensor {
        name: name.clone(),
        offset: at,
        reason,
    };
    let n_dims = r.u32(Site::Tensor(&name, "dimension count"))?;
    // ggml would read 0 dims as a scalar, but no ggml or gguf-py writer
    // emits it, and downstream code may rely on `dims[0]`.
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(bad(format!(
            "{n_dims} dimensions (1 to {MAX_DIMS} allowed)"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(r.u64(Site::Tensor(&name, "dimensions"))?);
    }
    let type_at = r.pos();
    let type_id = r.u32(Site::Tensor(&name, "type"))?;
    let offset = r.u64(Site::Tensor(&name, "data offset"))?;

    let dtype = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        name: name.clone(),
        id: type_id,
        offset: type_at,
    })?;
    if let Some(d) = dims.iter().find(|&&d| d > i64::MAX as u64) {
        return Err(bad(format!(
            "dimension {d} exceeds i64::MAX (dims {dims:?})"
        )));
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| bad(format!("element count overflows: dims {dims:?}")))?;
    let block = dtype.block_size() as u64;
    if dims[0] % block != 0 {
        return Err(bad(format!(
            "row length {} is not a multiple of the {dtype} block size {block}",
            dims[0]
        )));
    }
    let size = (n_elements / block)
        .checked_mul(dtype.type_size() as u64)
        .ok_or_else(|| bad(format!("byte size overflows: dims {dims:?}")))?;
    if offset % alignment != 0 {
        return Err(bad(format!(
            "data offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    Ok(TensorInfo {
        name,
        dims,
        dtype,
        offset,
        size,
    })
}

/// Names are unique, every tensor's data lies inside the file, and no two
/// overlap. `info_at[i]` is where tensor `i`'s info starts.
fn check_tensor_placement(
    tensors: &[TensorInfo],
    info_at: &[usize],
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    // Sorting positions by name finds repeats in O(n log n) with one usize
    // per tensor, where a hash set would cost several words.
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name).then(a.cmp(&b)));
    let repeat = order
        .windows(2)
        .filter(|w| tensors[w[0]].name == tensors[w[1]].name)
        .map(|w| w[1])
        .min();
    if let Some(i) = repeat {
        return Err(GgufError::DuplicateTensor {
            name: tensors[i].name.clone(),
            offset: info_at[i],
        });
    }

    // (start, end, tensor) in file offsets.
    let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len => spans.push((start, end, i)),
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: info_at[i],
                    data_offset: t.offset,
                    size: t.size,
                    data_len: file_len.saturating_sub(data_offset),
                });
            }
        }
    }
    spans.sort_unstable();
    // The furthest end seen so far, and whose it is: a span that starts
    // before it overlaps. Empty tensors take no bytes and overlap nothing.
    let mut furthest: Option<(u64, usize)> = None;
    for &(start, end, i) in spans.iter().filter(|s| s.1 > s.0) {
        if let Some((prev_end, prev)) = furthest
            && start < prev_end
        {
            return Err(GgufError::TensorOverlap {
                first: tensors[prev].name.clone(),
                second: tensors[i].name.clone(),
                offset: info_at[i],
            });
        }
        if furthest.is_none_or(|(e, _)| end > e) {
            furthest = Some((end, i));
        }
    }
    Ok(())
}

pub(super) fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v / align * align)
}
