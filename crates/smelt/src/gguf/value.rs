//! GGUF metadata values and the ordered key→value table.

use std::fmt;

/// The on-disk value type ids (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The fewest bytes one value of this type takes on disk: its exact size
    /// for scalars, the length prefix for strings, type and count for arrays.
    pub fn min_encoded_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed array. GGUF arrays hold one element type; arrays of arrays nest.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value, widened. Floats and other types give `None`.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer that fits in a `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_i128().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer that fits in a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// Any float or integer, as `f32`.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => self.as_i128().map(|v| v as f32),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Integer elements widened to `i64`, for token types and similar lists
    /// that writers store with varying widths. `None` for non-integer arrays
    /// or values that do not fit.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy + TryInto<i64>>(v: &[T]) -> Option<Vec<i64>> {
            v.iter().map(|&x| x.try_into().ok()).collect()
        }
        match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => conv(v),
            _ => None,
        }
    }
}

/// Shortens long arrays for display: `[a, b, c, ... (49152 items)]`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(a) => write!(f, "{a}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 6;
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
            write!(f, "[")?;
            for (i, x) in v.iter().take(SHOWN).enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{x:?}")?;
            }
            if v.len() > SHOWN {
                write!(f, ", ... ({} items)", v.len())?;
            }
            write!(f, "]")
        }
        match self {
            Array::U8(v) => list(f, v),
            Array::I8(v) => list(f, v),
            Array::U16(v) => list(f, v),
            Array::I16(v) => list(f, v),
            Array::U32(v) => list(f, v),
            Array::I32(v) => list(f, v),
            Array::F32(v) => list(f, v),
            Array::Bool(v) => list(f, v),
            Array::String(v) => list(f, v),
            Array::Array(v) => {
                write!(f, "[")?;
                for (i, a) in v.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{a}")?;
                }
                if v.len() > SHOWN {
                    write!(f, ", ... ({} items)", v.len())?;
                }
                write!(f, "]")
            }
            Array::U64(v) => list(f, v),
            Array::I64(v) => list(f, v),
            Array::F64(v) => list(f, v),
        }
    }
}

/// Metadata in file order, with lookup by key.
///
/// The index is a list of entry positions sorted by key, not a hash map: it
/// costs one `usize` per key instead of a second copy of every key, which
/// keeps what a hostile file can make the reader allocate close to the
/// file's own size (see `reader.rs`).
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    /// Positions in `entries`, sorted by key.
    index: Vec<usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds the table from entries in file order. On a repeated key,
    /// returns the position of its first repeat in file order, and the key.
    pub(super) fn from_entries(mut entries: Vec<(String, Value)>) -> Result<Self, (usize, String)> {
        let mut index: Vec<usize> = (0..entries.len()).collect();
        // Ties broken by position, so each run of equal keys is in file order
        // and its second element is that key's first repeat.
        index.sort_unstable_by(|&a, &b| entries[a].0.cmp(&entries[b].0).then(a.cmp(&b)));
        let first_repeat = index
            .windows(2)
            .filter(|w| entries[w[0]].0 == entries[w[1]].0)
            .map(|w| w[1])
            .min();
        match first_repeat {
            Some(i) => Err((i, entries.swap_remove(i).0)),
            None => Ok(Self { entries, index }),
        }
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.index
            .binary_search_by(|&i| self.entries[i].0.as_str().cmp(key))
    }

    /// Adds a key, or replaces its value in place. Returns true if the key
    /// was already present.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> bool {
        let key = key.into();
        match self.find(&key) {
            Ok(at) => {
                self.entries[self.index[at]].1 = value;
                true
            }
            Err(at) => {
                self.index.insert(at, self.entries.len());
                self.entries.push((key, value));
                false
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.find(key)
            .ok()
            .map(|at| &self.entries[self.index[at]].1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Entries in file (or insertion) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: &str, v: u32) -> (String, Value) {
        (k.to_string(), Value::U32(v))
    }

    #[test]
    fn metadata_keeps_file_order_and_finds_keys() {
        let m = Metadata::from_entries(vec![entry("b", 1), entry("a", 2), entry("c", 3)])
            .expect("no repeats");
        let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "a", "c"]);
        assert_eq!(m.get("a"), Some(&Value::U32(2)));
        assert_eq!(m.get("c"), Some(&Value::U32(3)));
        assert_eq!(m.get("d"), None);
        assert!(m.contains("b") && !m.contains(""));
    }

    #[test]
    fn metadata_reports_the_first_repeat_in_file_order() {
        let entries = vec![
            entry("x", 0),
            entry("y", 1),
            entry("y", 2),
            entry("x", 3),
            entry("y", 4),
        ];
        assert_eq!(Metadata::from_entries(entries).err(), Some((2, "y".into())));
    }

    #[test]
    fn insert_replaces_in_place() {
        let mut m = Metadata::new();
        assert!(!m.insert("z", Value::U8(1)));
        assert!(!m.insert("a", Value::U8(2)));
        assert!(m.insert("z", Value::U8(3)));
        let all: Vec<(&str, &Value)> = m.iter().collect();
        assert_eq!(all, [("z", &Value::U8(3)), ("a", &Value::U8(2))]);
        assert_eq!(m.get("a"), Some(&Value::U8(2)));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn long_arrays_display_shortened() {
        let v = Value::Array(Array::U32((0..100).collect()));
        assert_eq!(v.to_string(), "[0, 1, 2, 3, 4, 5, ... (100 items)]");
        let v = Value::Array(Array::String(vec!["a\n".into()]));
        assert_eq!(v.to_string(), r#"["a\n"]"#);
    }
}
