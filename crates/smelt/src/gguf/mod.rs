//! GGUF files: a bounds-checked reader over a memory map, typed metadata,
//! zero-copy tensor views, and a writer.

mod cursor;
mod reader;
mod value;
mod writer;

use std::fs::File;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

pub use reader::{DEFAULT_ALIGNMENT, Header, MAGIC, MAX_ARRAY_DEPTH, TensorInfo};
pub use value::{Array, Metadata, Value, ValueType};
pub use writer::GgufWriter;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;

/// Everything that can be wrong with a GGUF file, or with a request made of
/// one. Errors about the file's bytes name the key or tensor involved and the
/// absolute file offset where the bad field starts.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The cause is part of the message, not a `source()`, so that error
    /// chains print it once.
    #[error("cannot read {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot write {path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("not a GGUF file: it starts with \"{}\", not \"GGUF\"", found.escape_ascii())]
    BadMagic { found: [u8; 4] },
    #[error("version field is {version:#010x}: a big-endian GGUF file, which is not supported")]
    BigEndian { version: u32 },
    #[error("unsupported GGUF version {0} (versions 2 and 3 are supported)")]
    UnsupportedVersion(u32),
    #[error("file truncated: {what} at offset {offset} needs {needed} bytes, {available} remain")]
    Truncated {
        what: String,
        offset: usize,
        needed: u64,
        available: usize,
    },
    #[error("{what} at offset {offset} is {count}, more than the rest of the file can hold")]
    BadCount {
        what: String,
        count: u64,
        offset: usize,
    },
    #[error("metadata key {key:?} at offset {offset}: unknown value type {id}")]
    UnknownValueType { key: String, id: u32, offset: usize },
    #[error("metadata key {key:?} at offset {offset}: bool byte is {value}, not 0 or 1")]
    BadBool {
        key: String,
        value: u8,
        offset: usize,
    },
    #[error(
        "metadata key {key:?} at offset {offset}: arrays nested more than {} deep",
        reader::MAX_ARRAY_DEPTH
    )]
    TooDeep { key: String, offset: usize },
    #[error("metadata key {key:?} at offset {offset} appears twice")]
    DuplicateKey { key: String, offset: usize },
    #[error(
        "metadata key \"general.alignment\" at offset {offset} is {value}; it must be a u32 power of two"
    )]
    BadAlignment { value: String, offset: usize },
    #[error("tensor {name:?}: type id {id} at offset {offset} is not a known ggml type")]
    UnknownTensorType {
        name: String,
        id: u32,
        offset: usize,
    },
    #[error("tensor {name:?} at offset {offset}: {reason}")]
    BadTensor {
        name: String,
        offset: usize,
        reason: String,
    },
    #[error("tensor {name:?} at offset {offset} repeats an earlier tensor's name")]
    DuplicateTensor { name: String, offset: usize },
    #[error(
        "tensor {name:?} at offset {offset}: data at {data_offset} with size {size} runs past the data section ({data_len} bytes)"
    )]
    TensorOutOfBounds {
        name: String,
        offset: usize,
        data_offset: u64,
        size: u64,
        data_len: u64,
    },
    #[error("tensor {second:?} at offset {offset}: its data overlaps tensor {first:?}")]
    TensorOverlap {
        first: String,
        second: String,
        offset: usize,
    },
    #[error("{what} overflows")]
    Overflow { what: String },
    #[error("cannot write tensor {name:?}: {reason}")]
    InvalidTensor { name: String, reason: String },
    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        key: String,
        found: String,
        expected: &'static str,
    },
    #[error("tensor {name:?} is missing")]
    MissingTensor { name: String },
}

/// An open GGUF file: the parsed header plus the memory-mapped bytes.
pub struct GgufFile {
    header: Header,
    map: Arc<Mmap>,
    path: PathBuf,
}

impl GgufFile {
    /// Maps and parses a file. The whole header is validated here; tensor
    /// data is not read until used.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |cause| GgufError::Io {
            path: path.clone(),
            cause,
        };
        // Mapping a directory fails with "No such device".
        if path.is_dir() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "it is a directory, not a GGUF file",
            )));
        }
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. If
        // another process truncates or rewrites the file while it is mapped,
        // reads may fault or see new bytes; like every mmap-based loader we
        // accept that, and nothing here writes through the map.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = Header::parse(&map)?;
        Ok(Self {
            header,
            map: Arc::new(map),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's data, borrowed from the map.
    ///
    /// # Panics
    /// If `info` did not come from this file: `Header::parse` proved only
    /// this file's tensors lie inside it.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        &self.map[self.range_of(info)]
    }

    /// A tensor's data as an owned, zero-copy handle that keeps the map alive.
    pub fn tensor_bytes(&self, name: &str) -> Result<TensorBytes, GgufError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor { name: name.into() })?;
        Ok(TensorBytes {
            owner: Arc::clone(&self.map) as Arc<dyn AsRef<[u8]> + Send + Sync>,
            range: self.range_of(info),
        })
    }

    fn range_of(&self, info: &TensorInfo) -> Range<usize> {
        // Header::parse checked that every tensor lies inside the file.
        let start = (self.header.data_offset + info.offset) as usize;
        start..start + info.size as usize
    }
}

impl Deref for GgufFile {
    type Target = Header;
    fn deref(&self) -> &Header {
        &self.header
    }
}

/// A tensor's bytes, shared without a copy: a range of a memory-mapped file
/// (kept alive by this handle), or owned bytes made in memory.
#[derive(Clone)]
pub struct TensorBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl TensorBytes {
    /// Owned bytes, for tensors made in memory (tests, quantized copies).
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let range = 0..bytes.len();
        Self {
            owner: Arc::new(bytes),
            range,
        }
    }
}

impl TensorBytes {
    /// Bytes `range` of these, sharing their owner (no copy); `None` past
    /// the end.
    pub fn slice(&self, range: Range<usize>) -> Option<TensorBytes> {
        let len = self.range.len();
        (range.start <= range.end && range.end <= len).then(|| Self {
            owner: Arc::clone(&self.owner),
            range: self.range.start + range.start..self.range.start + range.end,
        })
    }
}

impl Deref for TensorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

impl std::fmt::Debug for TensorBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorBytes({:?})", self.range)
    }
}

/// Typed metadata lookups with errors that name the key.
impl Header {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })
    }

    fn wrong(key: &str, v: &Value, expected: &'static str) -> GgufError {
        GgufError::WrongType {
            key: key.into(),
            found: v.value_type().name().into(),
            expected,
        }
    }

    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.require(key)?;
        v.as_u32()
            .ok_or_else(|| Self::wrong(key, v, "an integer that fits in u32"))
    }

    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        v.as_f32().ok_or_else(|| Self::wrong(key, v, "a number"))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong(key, v, "a bool"))
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, v, "a string"))
    }

    pub fn get_array(&self, key: &str) -> Result<&Array, GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, v, "an array"))
    }

    /// `general.architecture`, which every model file carries.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }

    /// Optional lookups: `Ok(None)` when absent, an error when present with
    /// the wrong type.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get(key).map(|_| self.get_u32(key)).transpose()
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.get(key).map(|_| self.get_f32(key)).transpose()
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get(key).map(|_| self.get_bool(key)).transpose()
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key).map(|_| self.get_str(key)).transpose()
    }
}
