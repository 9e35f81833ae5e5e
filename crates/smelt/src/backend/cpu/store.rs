//! CPU memory: one buffer per tensor id, owned or borrowed from the model's
//! memory map.
//!
//! Owned buffers are `u32` words so that every F32, F16 and I32 view of them
//! is aligned. An op takes its output buffer out of the store while it runs
//! ([`Store::take`]) and puts it back after, so inputs are shared borrows of
//! the store and the output a unique one, with no `unsafe`. An input that
//! names the taken output is caught as aliasing.

use half::f16;

use super::super::{BackendError, Result, Tensor, WeightData};
use crate::quant::GgmlType;

enum Buffer {
    /// Activations, caches: zero-filled words.
    Owned(Vec<u32>),
    /// Weights in their GGUF layout, not copied.
    Weight(WeightData),
    /// An output, out of the store while an op writes it.
    Taken,
}

struct Entry {
    dtype: GgmlType,
    /// Bytes the tensor was made with; views may address fewer.
    len: usize,
    buf: Buffer,
}

#[derive(Default)]
pub(super) struct Store {
    entries: Vec<Entry>,
}

/// An output buffer, out of the store.
pub(super) struct OutBuf {
    id: u32,
    words: Vec<u32>,
}

impl OutBuf {
    pub fn f32(&mut self, t: Tensor) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut::<u32, f32>(&mut self.words)[..t.n_elements()]
    }

    pub fn f16(&mut self, t: Tensor) -> &mut [f16] {
        &mut bytemuck::cast_slice_mut::<u32, f16>(&mut self.words)[..t.n_elements()]
    }

    pub fn i32(&mut self, t: Tensor) -> &mut [i32] {
        &mut bytemuck::cast_slice_mut::<u32, i32>(&mut self.words)[..t.n_elements()]
    }

    pub fn bytes(&mut self, t: Tensor) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u32, u8>(&mut self.words)[..t.n_bytes()]
    }
}

fn tensor_bytes(dtype: GgmlType, rows: usize, cols: usize, what: &str) -> Result<usize> {
    dtype
        .row_bytes(cols)
        .and_then(|r| r.checked_mul(rows))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| BackendError::TooLarge {
            what: format!("{what} ({rows}x{cols} {dtype})"),
            bytes: u64::MAX,
            limit: isize::MAX as u64,
        })
}

impl Store {
    fn push(&mut self, entry: Entry) -> Result<u32> {
        let id = u32::try_from(self.entries.len())
            .map_err(|_| BackendError::Other("more than 2^32 tensors".into()))?;
        self.entries.push(entry);
        Ok(id)
    }

    pub fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let len = tensor_bytes(dtype, rows, cols, "tensor")?;
        let mut words = Vec::new();
        words
            .try_reserve_exact(len.div_ceil(4))
            .map_err(|_| BackendError::OutOfMemory {
                what: format!("{rows}x{cols} {dtype}"),
                bytes: len as u64,
            })?;
        words.resize(len.div_ceil(4), 0);
        let id = self.push(Entry {
            dtype,
            len,
            buf: Buffer::Owned(words),
        })?;
        Ok(Tensor {
            id,
            dtype,
            rows,
            cols,
        })
    }

    pub fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor> {
        let len = tensor_bytes(dtype, rows, cols, name)?;
        if data.len() != len {
            return Err(BackendError::Other(format!(
                "weight {name:?}: {} bytes given for {rows}x{cols} {dtype}, {len} expected",
                data.len()
            )));
        }
        // Plain types are read through typed slices, which need alignment; a
        // GGUF's 32-byte data alignment gives it, a hand-made buffer may not.
        let aligned = !matches!(dtype, GgmlType::F32 | GgmlType::F16 | GgmlType::I32)
            || (data.as_ptr() as usize).is_multiple_of(4);
        let buf = if aligned {
            Buffer::Weight(data)
        } else {
            let mut words = vec![0u32; len.div_ceil(4)];
            bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..len].copy_from_slice(&data);
            Buffer::Owned(words)
        };
        let id = self.push(Entry { dtype, len, buf })?;
        Ok(Tensor {
            id,
            dtype,
            rows,
            cols,
        })
    }

    fn entry(&self, t: Tensor) -> Result<&Entry> {
        let e = self
            .entries
            .get(t.id as usize)
            .ok_or_else(|| BackendError::Other(format!("no tensor with id {}", t.id)))?;
        if e.dtype != t.dtype || t.n_bytes() > e.len {
            return Err(BackendError::Other(format!(
                "handle {}x{} {} does not fit tensor {} ({} bytes of {})",
                t.rows, t.cols, t.dtype, t.id, e.len, e.dtype
            )));
        }
        Ok(e)
    }

    /// The bytes a handle addresses.
    pub fn bytes(&self, t: Tensor) -> Result<&[u8]> {
        let e = self.entry(t)?;
        let all: &[u8] = match &e.buf {
            Buffer::Owned(w) => bytemuck::cast_slice(w),
            Buffer::Weight(d) => d,
            Buffer::Taken => {
                return Err(BackendError::Other(format!(
                    "tensor {} is both an input and the output of an op",
                    t.id
                )));
            }
        };
        Ok(&all[..t.n_bytes()])
    }

    pub fn f32(&self, t: Tensor) -> Result<&[f32]> {
        self.typed(t, GgmlType::F32)
    }

    pub fn i32(&self, t: Tensor) -> Result<&[i32]> {
        self.typed(t, GgmlType::I32)
    }

    pub fn f16(&self, t: Tensor) -> Result<&[f16]> {
        self.typed(t, GgmlType::F16)
    }

    fn typed<T: bytemuck::Pod>(&self, t: Tensor, dtype: GgmlType) -> Result<&[T]> {
        if t.dtype != dtype {
            return Err(BackendError::Other(format!(
                "tensor {} is {}, {dtype} expected",
                t.id, t.dtype
            )));
        }
        bytemuck::try_cast_slice(self.bytes(t)?)
            .map_err(|e| BackendError::Other(format!("tensor {}: {e}", t.id)))
    }

    /// Takes an owned tensor out of the store to write it.
    pub fn take(&mut self, t: Tensor) -> Result<OutBuf> {
        self.entry(t)?;
        let e = &mut self.entries[t.id as usize];
        match std::mem::replace(&mut e.buf, Buffer::Taken) {
            Buffer::Owned(words) => Ok(OutBuf { id: t.id, words }),
            other => {
                e.buf = other;
                Err(BackendError::Other(format!(
                    "tensor {} is a weight or already being written; it cannot be an output",
                    t.id
                )))
            }
        }
    }

    pub fn put(&mut self, out: OutBuf) {
        self.entries[out.id as usize].buf = Buffer::Owned(out.words);
    }
}
