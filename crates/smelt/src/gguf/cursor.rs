//! A bounds-checked little-endian cursor over bytes nobody vouches for, and
//! the names of the places it reads, for error messages.
//!
//! Every read compares its length with what remains before touching the
//! bytes, and `check_count` is called before anything is sized from a count
//! read from the input.

use std::fmt;

use super::GgufError;

/// What is being read: formatted into an error only when one is made, so
/// the hot path (150k-token vocabularies) never builds a string.
#[derive(Clone, Copy, Debug)]
pub(super) enum Site<'a> {
    /// A fixed field of the file header.
    Header(&'static str),
    /// The key of the `i`-th metadata entry (its name is not known yet).
    Key(u64),
    /// The value of a metadata key.
    Value(&'a str),
    /// The name of the `i`-th tensor info.
    TensorName(u64),
    /// A field of a tensor info.
    Tensor(&'a str, &'static str),
}

impl fmt::Display for Site<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Site::Header(field) => f.write_str(field),
            Site::Key(i) => write!(f, "key of metadata entry {i}"),
            Site::Value(key) => write!(f, "value of metadata key {key:?}"),
            Site::TensorName(i) => write!(f, "name of tensor {i}"),
            Site::Tensor(name, field) => write!(f, "{field} of tensor {name:?}"),
        }
    }
}

pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Offset of the next byte to read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves back to an offset already read past (after a validating pass).
    pub fn rewind(&mut self, pos: usize) {
        debug_assert!(pos <= self.pos);
        self.pos = pos;
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, borrowed from the input.
    pub fn take(&mut self, n: u64, site: Site) -> Result<&'a [u8], GgufError> {
        let available = self.remaining();
        let len = usize::try_from(n)
            .ok()
            .filter(|&n| n <= available)
            .ok_or_else(|| GgufError::Truncated {
                what: site.to_string(),
                offset: self.pos,
                needed: n,
                available,
            })?;
        let bytes: &'a [u8] = self.bytes;
        let out = &bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self, site: Site) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, site)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub fn u32(&mut self, site: Site) -> Result<u32, GgufError> {
        self.array(site).map(u32::from_le_bytes)
    }

    pub fn u64(&mut self, site: Site) -> Result<u64, GgufError> {
        self.array(site).map(u64::from_le_bytes)
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit
    /// in what remains. Called before anything is sized from `count`, so a
    /// count that passes is at most `remaining / min_size` and fits a usize.
    /// `at` is where the count was read, for the error.
    pub fn check_count(
        &self,
        count: u64,
        min_size: usize,
        at: usize,
        site: Site,
    ) -> Result<usize, GgufError> {
        count
            .checked_mul(min_size as u64)
            .filter(|&need| need <= self.remaining() as u64)
            .map(|_| count as usize)
            .ok_or_else(|| GgufError::BadCount {
                what: match site {
                    Site::Header(_) => site.to_string(),
                    _ => format!("count in {site}"),
                },
                count,
                offset: at,
            })
    }

    /// Reads a u64 count and checks it as `check_count` does.
    pub fn count(&mut self, min_size: usize, site: Site) -> Result<usize, GgufError> {
        let at = self.pos;
        let count = self.u64(site)?;
        self.check_count(count, min_size, at, site)
    }

    /// A length-prefixed string's raw bytes.
    pub fn string_bytes(&mut self, site: Site) -> Result<&'a [u8], GgufError> {
        let at = self.pos;
        let len = self.u64(site)?;
        self.take(len, site).map_err(|e| match e {
            // Point at the length that lied, not at the bytes after it.
            GgufError::Truncated {
                what,
                needed,
                available,
                ..
            } => GgufError::Truncated {
                what,
                offset: at,
                needed,
                available,
            },
            e => e,
        })
    }

    /// A length-prefixed string. Some converters wrote tokens that are not
    /// valid UTF-8; they are kept readable (U+FFFD) rather than refusing the
    /// whole file.
    pub fn string(&mut self, site: Site) -> Result<String, GgufError> {
        self.string_bytes(site)
            .map(|raw| String::from_utf8_lossy(raw).into_owned())
    }
}
