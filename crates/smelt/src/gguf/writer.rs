//! The GGUF writer (version 3): for tests, small synthetic models and
//! `smelt quantize`.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use super::reader::{DEFAULT_ALIGNMENT, MAGIC, align_up};
use super::value::{Array, Metadata, Value};
use super::{GgufError, MAX_DIMS, TensorBytes};
use crate::quant::GgmlType;

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    dtype: GgmlType,
    /// The bytes, or `None` for a declared tensor that the caller streams
    /// after [`GgufWriter::header_bytes`].
    data: Option<TensorBytes>,
    size: u64,
}

/// Collects metadata and tensors, then writes them as one GGUF v3 file laid
/// out as ggml lays it out: tensors in the order added, each at the next
/// aligned offset, padding after each (the last included).
pub struct GgufWriter {
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self {
            metadata: Metadata::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }

    /// Sets a metadata value, replacing any earlier one. Setting
    /// `general.alignment` changes the data alignment.
    ///
    /// # Panics
    /// If `general.alignment` is not a `Value::U32` power of two: no reader
    /// would accept the file. Values copied from a parsed file always pass,
    /// since the reader checks the same rule.
    pub fn set(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        let key = key.into();
        if key == "general.alignment" {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = u64::from(a),
                ref v => panic!("general.alignment must be a u32 power of two, not {v:?}"),
            }
        }
        self.metadata.insert(key, value);
        self
    }

    /// Adds a tensor. `dims` is in ggml order (innermost first); `data` must
    /// hold exactly the bytes those dims take in `dtype`.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        dims: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        self.add_tensor_bytes(name, dtype, dims, TensorBytes::from_vec(data))
    }

    /// Adds a tensor whose bytes are shared, not copied: a tensor of another
    /// mapped file (`GgufFile::tensor_bytes`), as when requantizing a model
    /// keeps some tensors as they are.
    pub fn add_tensor_bytes(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        dims: &[u64],
        data: TensorBytes,
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        let size = self.check_tensor(&name, dtype, dims)?;
        if data.len() as u64 != size {
            return Err(GgufError::InvalidTensor {
                name,
                reason: format!(
                    "{} bytes given, {size} expected for {dtype} {dims:?}",
                    data.len()
                ),
            });
        }
        self.push(name, dtype, dims, Some(data), size);
        Ok(self)
    }

    /// Declares a tensor whose bytes the caller writes itself, after
    /// [`header_bytes`](Self::header_bytes): each declared tensor's bytes
    /// in order, each followed by zeros up to [`padded`](Self::padded).
    /// A file too large to hold in memory is written this way. Returns the
    /// tensor's size in bytes.
    pub fn declare_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        dims: &[u64],
    ) -> Result<u64, GgufError> {
        let name = name.into();
        let size = self.check_tensor(&name, dtype, dims)?;
        self.push(name, dtype, dims, None, size);
        Ok(size)
    }

    /// The size in bytes of a new tensor, or why it cannot be added.
    fn check_tensor(&self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<u64, GgufError> {
        let bad = |reason: String| GgufError::InvalidTensor {
            name: name.to_string(),
            reason,
        };
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dimensions (1 to {MAX_DIMS} allowed)",
                dims.len()
            )));
        }
        let size = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| {
                dims[0]
                    .is_multiple_of(dtype.block_size() as u64)
                    .then(|| dtype.row_bytes(n))
                    .flatten()
            })
            .ok_or_else(|| bad(format!("dims {dims:?} are not whole {dtype} blocks")))?;
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("a tensor of that name was already added".into()));
        }
        Ok(size as u64)
    }

    fn push(
        &mut self,
        name: String,
        dtype: GgmlType,
        dims: &[u64],
        data: Option<TensorBytes>,
        size: u64,
    ) {
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            dtype,
            data,
            size,
        });
    }

    /// The whole file as bytes.
    ///
    /// # Panics
    /// If a tensor was declared without bytes ([`declare_tensor`](Self::declare_tensor)).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out)
            .expect("every tensor has bytes, and writing to a Vec cannot fail");
        out
    }

    /// The file up to its first tensor's bytes: magic, counts, metadata,
    /// the tensor table, and padding to the alignment.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_string(&mut head, key);
            head.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut head, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.dtype.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset = self.padded(offset + t.size);
        }
        let data_start = self.padded(head.len() as u64);
        head.resize(data_start as usize, 0);
        head
    }

    /// Writes the whole file; every tensor must have been given its bytes.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.header_bytes())?;
        let zeros = vec![0u8; self.alignment as usize];
        for t in &self.tensors {
            let data = t.data.as_deref().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("tensor {:?} was declared but given no bytes", t.name),
                )
            })?;
            w.write_all(data)?;
            let len = data.len() as u64;
            w.write_all(&zeros[..(self.padded(len) - len) as usize])?;
        }
        w.flush()
    }

    /// `x` rounded up to the alignment: where a tensor of `x` bytes ends
    /// with its padding. Sizes here are of data in memory or of checked
    /// tensors, so they cannot come near `u64::MAX`.
    pub fn padded(&self, x: u64) -> u64 {
        align_up(x, self.alignment).expect("in-memory sizes are far below u64::MAX")
    }

    /// Writes the file next to `path` and renames it into place, so a failed
    /// or interrupted write never leaves a half-written file at `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = std::path::PathBuf::from(tmp);
        let result = (|| {
            let mut f = io::BufWriter::new(fs::File::create(&tmp)?);
            self.write_to(&mut f)?;
            f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(|cause| GgufError::Write {
            path: path.to_path_buf(),
            cause,
        })
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&(a.element_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
    }
}
