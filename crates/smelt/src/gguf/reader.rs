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
//! Every length is compared with the bytes that remain before it is used,
//! and no buffer is sized from a count until that count is known to fit in
//! the input, so a hostile file cannot make the reader allocate more than a
//! small multiple of its own size.

use super::value::{Array, Metadata, Value, ValueType};
use super::{GgufError, MAX_DIMS};
use crate::quant::GgmlType;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays nested deeper than this are refused (real files use one level).
const MAX_ARRAY_DEPTH: usize = 8;

/// Where a tensor lives and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension.
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
        let mut r = Cursor { bytes, pos: 0 };
        let magic = r.array::<4>("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if version == 0x0300_0000 || version == 0x0200_0000 {
            return Err(GgufError::BigEndian);
        }
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;

        // Each entry takes at least a key length, a type and a one-byte value.
        r.check_count(n_kv, 8 + 4 + 1, "metadata count")?;
        let mut metadata = Metadata::new();
        for _ in 0..n_kv {
            let at = r.pos;
            let key = r.string("metadata key")?;
            let ty = r.value_type(&key)?;
            let value = r.value(ty, &key, 0)?;
            if metadata.insert(key.clone(), value) {
                return Err(GgufError::DuplicateKey { key, offset: at });
            }
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
            Some(v) => {
                return Err(GgufError::BadAlignment {
                    value: v.to_string(),
                });
            }
        };

        // Name length, n_dims, one dim, type and offset at the least.
        r.check_count(n_tensors, 8 + 4 + 8 + 4 + 8, "tensor count")?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            tensors.push(r.tensor_info(alignment)?);
        }

        let data_offset = align_up(r.pos as u64, alignment).ok_or(GgufError::Overflow {
            what: "data section offset".into(),
        })?;
        check_tensor_placement(&tensors, data_offset, bytes.len() as u64)?;

        Ok(Header {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }
}

/// Every tensor must fit in the file and none may overlap another; names are
/// unique.
fn check_tensor_placement(
    tensors: &[TensorInfo],
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    let mut spans: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    let mut names = std::collections::HashSet::with_capacity(tensors.len());
    for t in tensors {
        if !names.insert(t.name.as_str()) {
            return Err(GgufError::DuplicateTensor {
                name: t.name.clone(),
            });
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len => spans.push((start, end, &t.name)),
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: t.offset,
                    size: t.size,
                    data_len: file_len.saturating_sub(data_offset),
                });
            }
        }
    }
    spans.sort_unstable();
    // The furthest end seen so far, and whose it is: a span that starts
    // before it overlaps. Empty tensors take no bytes and overlap nothing.
    let mut furthest: Option<(u64, &str)> = None;
    for &(start, end, name) in spans.iter().filter(|s| s.1 > s.0) {
        if let Some((prev_end, prev)) = furthest {
            if start < prev_end {
                return Err(GgufError::TensorOverlap {
                    first: prev.to_string(),
                    second: name.to_string(),
                });
            }
        }
        if furthest.is_none_or(|(e, _)| end > e) {
            furthest = Some((end, name));
        }
    }
    Ok(())
}

pub(super) fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v / align * align)
}

/// A bounds-checked little-endian reader over the input.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit
    /// in what remains; called before anything is sized from `count`.
    fn check_count(&self, count: u64, min_size: usize, what: &str) -> Result<(), GgufError> {
        let fits = count
            .checked_mul(min_size as u64)
            .is_some_and(|need| need <= self.remaining() as u64);
        if fits {
            Ok(())
        } else {
            Err(GgufError::BadCount {
                what: what.to_string(),
                count,
                offset: self.pos,
            })
        }
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let at = self.pos;
        let len = self.u64(what)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.remaining())
            .ok_or_else(|| GgufError::Truncated {
                what: what.to_string(),
                offset: at,
                needed: usize::try_from(len).unwrap_or(usize::MAX),
                available: self.remaining(),
            })?;
        let raw = self.take(len, what)?;
        // Some converters wrote tokens that are not valid UTF-8; keep them
        // readable rather than refusing the file.
        Ok(String::from_utf8_lossy(raw).into_owned())
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType, GgufError> {
        let at = self.pos;
        let id = self.u32(key)?;
        ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            id,
            offset: at,
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(key)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(key)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(GgufError::BadBool {
                            key: key.to_string(),
                            value: b,
                            offset: at,
                        });
                    }
                }
            }
            ValueType::String => Value::String(self.string(key)?),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::TooDeep {
                key: key.to_string(),
                offset: self.pos,
            });
        }
        let ty = self.value_type(key)?;
        let count = self.u64(key)?;
        self.check_count(count, ty.min_encoded_size(), key)?;
        let n = count as usize;

        macro_rules! scalars {
            ($variant:ident, $t:ty) => {{
                let raw = self.take(n * size_of::<$t>(), key)?;
                Array::$variant(
                    raw.chunks_exact(size_of::<$t>())
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n, key)?.to_vec()),
            ValueType::I8 => Array::I8(self.take(n, key)?.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => scalars!(U16, u16),
            ValueType::I16 => scalars!(I16, i16),
            ValueType::U32 => scalars!(U32, u32),
            ValueType::I32 => scalars!(I32, i32),
            ValueType::F32 => scalars!(F32, f32),
            ValueType::U64 => scalars!(U64, u64),
            ValueType::I64 => scalars!(I64, i64),
            ValueType::F64 => scalars!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    match self.value(ValueType::Bool, key, depth + 1)? {
                        Value::Bool(b) => v.push(b),
                        _ => unreachable!("value(Bool) returns a Bool"),
                    }
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(key)?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }

    fn tensor_info(&mut self, alignment: u64) -> Result<TensorInfo, GgufError> {
        let at = self.pos;
        let name = self.string("tensor name")?;
        let n_dims = self.u32(&name)?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(GgufError::BadTensor {
                name,
                offset: at,
                reason: format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&name)?);
        }
        let type_at = self.pos;
        let type_id = self.u32(&name)?;
        let dtype = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            name: name.clone(),
            id: type_id,
            offset: type_at,
        })?;
        let offset = self.u64(&name)?;

        let bad = |reason: String| GgufError::BadTensor {
            name: name.clone(),
            offset: at,
            reason,
        };
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
}
