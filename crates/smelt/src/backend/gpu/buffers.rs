//! Device memory: one `wgpu::Buffer` per tensor, allocated once (weights at
//! load, activations and KV cache per session) and never freed while the
//! backend lives, so tensor ids and cached bind groups stay valid.
//!
//! Every buffer is padded to a multiple of 4 bytes plus one spare word:
//! kernels read GGUF blocks (18, 20, 22, 34, ... bytes) as u32 words at any
//! byte offset, and an unaligned read near the end touches the next word.

use crate::backend::{BackendError, Result, Tensor, WeightData, WeightInput};
use crate::quant::GgmlType;

use super::context::Context;

pub struct Slot {
    pub buffer: wgpu::Buffer,
    /// Where the tensor starts in `buffer`: 0, or for a weight joined with
    /// others (`Buffers::load_joined`) its place in their buffer.
    pub offset: u64,
    /// The tensor's own bytes (before padding).
    pub bytes: u64,
    pub name: String,
    /// A weight over the binding limit: its rows in consecutive parts, each
    /// its own tensor, with the first row of each; `buffer` is then a
    /// placeholder. Empty for every other tensor.
    pub parts: Vec<(Tensor, usize)>,
    /// A joined weight's buffer as a tensor of its own, and the block
    /// where this weight starts in it.
    pub joint: Option<(Tensor, u32)>,
}

impl Slot {
    /// The tensor's bytes (padded) as a binding.
    pub fn binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            // A joined weight: its own bytes of the joint buffer.
            size: self
                .joint
                .and_then(|_| wgpu::BufferSize::new(padded(self.bytes))),
        }
    }
}

#[derive(Default)]
pub struct Buffers {
    slots: Vec<Slot>,
    /// Weight bytes uploaded through staging since the last wait.
    staged: u64,
}

/// Staging bytes in flight before `load_weight` waits for the uploads.
const STAGING_FLUSH_BYTES: u64 = 256 << 20;

/// The padded size of a buffer holding `bytes`.
pub fn padded(bytes: u64) -> u64 {
    bytes.div_ceil(4) * 4 + 4
}

impl Buffers {
    pub fn get(&self, t: Tensor) -> Result<&Slot> {
        let slot = self
            .slots
            .get(t.id as usize)
            .ok_or_else(|| BackendError::Other(format!("tensor id {} is not on this GPU", t.id)))?;
        if !slot.parts.is_empty() {
            return Err(BackendError::Other(format!(
                "weight {} is split in {} parts over the binding limit; only get_rows and \
                 matmul read it",
                slot.name,
                slot.parts.len()
            )));
        }
        if t.n_bytes() as u64 > slot.bytes {
            return Err(BackendError::Other(format!(
                "tensor {} viewed as {}x{} {} needs {} bytes, it has {}",
                slot.name,
                t.rows,
                t.cols,
                t.dtype,
                t.n_bytes(),
                slot.bytes
            )));
        }
        Ok(slot)
    }

    /// A zero-filled tensor (wgpu zero-initializes new buffers).
    pub fn alloc(
        &mut self,
        ctx: &Context,
        what: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Result<Tensor> {
        let bytes = tensor_bytes(what, dtype, rows, cols)?;
        let buffer = create(ctx, what, bytes, false, ctx.max_binding)?;
        Ok(self.push(buffer, what, bytes, dtype, rows, cols))
    }

    /// A weight, uploaded once. With zero copy the buffer is host-visible
    /// device memory written in place; otherwise wgpu stages the mapped
    /// range and copies it when unmapped.
    pub fn load_weight(
        &mut self,
        ctx: &Context,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
    ) -> Result<Tensor> {
        let bytes = stored_bytes(ctx, name, dtype, rows, cols, data)?;
        let buffer = create(ctx, name, bytes, true, ctx.max_weight_binding)?;
        self.upload(ctx, &buffer, &[(0, dtype, data)])?;
        Ok(self.push(buffer, name, bytes, dtype, rows, cols))
    }

    /// Writes weights (at their offsets, repacked where the adapter reads
    /// them so) into `buffer`, mapped at its creation, and unmaps it.
    fn upload(
        &mut self,
        ctx: &Context,
        buffer: &wgpu::Buffer,
        ws: &[(u64, GgmlType, &[u8])],
    ) -> Result<()> {
        {
            let mut view = buffer
                .get_mapped_range_mut(..)
                .map_err(|e| BackendError::Other(format!("mapping a weight's buffer: {e}")))?;
            // Zeros between and after the weights (the padding).
            let mut written = 0;
            for &(at, dtype, data) in ws {
                let at = at as usize;
                view.slice(written..at).fill(0);
                let packed;
                let bytes = if ctx.features.repacks(dtype) {
                    packed = repack(data, dtype.type_size());
                    &packed[..]
                } else {
                    data
                };
                written = at + bytes.len();
                view.slice(at..written).copy_from_slice(bytes);
            }
            view.slice(written..).fill(0);
        }
        buffer.unmap();
        if !ctx.zero_copy {
            // wgpu copies a mapped-at-creation buffer through a staging
            // buffer that lives until the copy completes; flush and wait
            // now and then so a model's worth of staging is never held.
            ctx.queue.submit([]);
            self.staged += buffer.size();
            if self.staged > STAGING_FLUSH_BYTES {
                self.staged = 0;
                ctx.device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .map_err(|e| BackendError::DeviceLost(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// A weight over the binding limit, as consecutive parts of whole rows
    /// (so whole blocks), each under the limit: get_rows and matmul run
    /// once per part. Refused with `TooLarge` where one row is over it.
    pub fn load_split(
        &mut self,
        ctx: &Context,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: &WeightData,
    ) -> Result<Tensor> {
        let row_bytes = tensor_bytes(name, dtype, 1, cols)?;
        // padded() adds at most 7 bytes.
        // Room for a repacked part's padding to whole superblocks too.
        let room = ctx
            .max_weight_binding
            .saturating_sub(8 + 8 * dtype.type_size() as u64);
        let per_part = (room / row_bytes.max(1)) as usize;
        if per_part == 0 {
            return Err(BackendError::TooLarge {
                what: format!(
                    "one row of {name} (the adapter's max_storage_buffer_binding_size \
                     and max_buffer_size)"
                ),
                bytes: padded(row_bytes),
                limit: ctx.max_weight_binding,
            });
        }
        if data.len() as u64 != row_bytes * rows as u64 {
            return Err(BackendError::Other(format!(
                "weight {name}: {} bytes given for {rows}x{cols} {dtype}",
                data.len()
            )));
        }
        let mut parts = Vec::new();
        for row0 in (0..rows).step_by(per_part) {
            let n = per_part.min(rows - row0);
            let span = row0 * row_bytes as usize..(row0 + n) * row_bytes as usize;
            let what = format!("{name} rows {row0}..{}", row0 + n);
            let part = self.load_weight(ctx, &what, dtype, n, cols, &data[span])?;
            parts.push((part, row0));
        }
        let placeholder = create(ctx, name, 0, false, ctx.max_binding)?;
        let t = self.push(placeholder, name, 0, dtype, rows, cols);
        self.slots[t.id as usize].parts = parts;
        Ok(t)
    }

    /// Weights of one input (`Backend::load_joined`: Q, K, V; gate, up)
    /// uploaded one after the other into one buffer, so that a matmul of
    /// them binds that buffer once and picks a row's weight by arithmetic
    /// (a branch between bindings per load costs the GEMMs ~25%). Each is
    /// a tensor of its own, bound at its offset, which is a multiple of the
    /// adapter's offset alignment and of a superblock. Only repacked
    /// weights of one type and width; `None` (nothing loaded) for any
    /// others, or where the joint buffer would be over the binding limit.
    /// They are uploaded straight into the joint buffer, not copied there
    /// after uploads of their own, which slowed every decode mat-vec
    /// (docs/perf-notes.md).
    pub fn load_joined(
        &mut self,
        ctx: &Context,
        ws: &[WeightInput],
    ) -> Result<Option<Vec<Tensor>>> {
        let Some(w0) = ws.first() else {
            return Ok(None);
        };
        let alike = ws.iter().all(|w| w.dtype == w0.dtype && w.cols == w0.cols);
        if ws.len() < 2 || !alike || !ctx.features.repacks(w0.dtype) {
            return Ok(None);
        }
        let ts = w0.dtype.type_size() as u64;
        let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
        let step = lcm(align, 8 * ts);
        let mut placed = Vec::with_capacity(ws.len());
        let mut end = 0u64;
        for w in ws {
            let bytes = stored_bytes(ctx, &w.name, w.dtype, w.rows, w.cols, &w.data)?;
            let start = end.div_ceil(step) * step;
            placed.push((start, bytes));
            end = start + padded(bytes);
        }
        // The kernels index the joint buffer's blocks in u32.
        if end > ctx.max_weight_binding || end / ts > u64::from(u32::MAX) {
            return Ok(None);
        }
        let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
        let what = format!("joint of {}", names.join(", "));
        let buffer = create(ctx, &what, end - 4, true, ctx.max_weight_binding)?;
        let data: Vec<_> = ws
            .iter()
            .zip(&placed)
            .map(|(w, &(at, _))| (at, w.dtype, &w.data[..]))
            .collect();
        self.upload(ctx, &buffer, &data)?;
        let rows = ws.iter().map(|w| w.rows).sum();
        let joint = self.push(buffer.clone(), &what, end - 4, w0.dtype, rows, w0.cols);
        let mut tensors = Vec::with_capacity(ws.len());
        for (w, &(at, bytes)) in ws.iter().zip(&placed) {
            let t = self.push(buffer.clone(), &w.name, bytes, w.dtype, w.rows, w.cols);
            let slot = &mut self.slots[t.id as usize];
            slot.offset = at;
            slot.joint = Some((joint, (at / ts) as u32));
            tensors.push(t);
        }
        Ok(Some(tensors))
    }

    /// The joint buffer (`load_joined`) that holds all of `ws`, and the block where
    /// each starts in it; `None` if they are not all in one.
    pub fn joint(&self, ws: &[Tensor]) -> Option<(Tensor, Vec<u32>)> {
        let mut firsts = Vec::with_capacity(ws.len());
        let mut joint = None;
        for w in ws {
            let (j, first) = self.slots.get(w.id as usize)?.joint?;
            if joint.is_some_and(|k: Tensor| k.id != j.id) {
                return None;
            }
            joint = Some(j);
            firsts.push(first);
        }
        joint.map(|j| (j, firsts))
    }

    /// The parts of a split weight (see `load_split`), or `None`.
    pub fn parts(&self, t: Tensor) -> Option<&[(Tensor, usize)]> {
        let slot = self.slots.get(t.id as usize)?;
        (!slot.parts.is_empty()).then_some(&slot.parts[..])
    }

    fn push(
        &mut self,
        buffer: wgpu::Buffer,
        name: &str,
        bytes: u64,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Tensor {
        self.slots.push(Slot {
            buffer,
            offset: 0,
            bytes,
            name: name.to_string(),
            parts: Vec::new(),
            joint: None,
        });
        Tensor {
            id: (self.slots.len() - 1) as u32,
            dtype,
            rows,
            cols,
        }
    }
}

/// Q4_0 or Q8_0 blocks (`size` bytes: an f16 scale, then the quants)
/// regrouped 8 to a superblock: the 8 blocks' quants, then their 8 scales
/// (quant.wgsl's REPACKED). A last partial superblock is padded with zero
/// blocks. The same bytes in another order: nothing is rounded.
pub fn repack(data: &[u8], size: usize) -> Vec<u8> {
    let q = size - 2;
    let blocks = data.len() / size;
    let mut out = vec![0u8; blocks.div_ceil(8) * 8 * size];
    for (b, block) in data.chunks_exact(size).enumerate() {
        let sb = &mut out[(b / 8) * 8 * size..][..8 * size];
        let j = b % 8;
        sb[j * q..(j + 1) * q].copy_from_slice(&block[2..]);
        sb[8 * q + 2 * j..8 * q + 2 * j + 2].copy_from_slice(&block[..2]);
    }
    out
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a.max(1), b.max(1));
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a.max(1) / x * b.max(1)
}

/// The bytes a weight takes on the device, having checked that `data`
/// holds its blocks: a repacked one takes whole superblocks, up to 7 blocks
/// more.
fn stored_bytes(
    ctx: &Context,
    name: &str,
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
) -> Result<u64> {
    let bytes = tensor_bytes(name, dtype, rows, cols)?;
    if data.len() as u64 != bytes {
        return Err(BackendError::Other(format!(
            "weight {name}: {} bytes given for {rows}x{cols} {dtype}, {bytes} expected",
            data.len()
        )));
    }
    let ts = dtype.type_size() as u64;
    Ok(if ctx.features.repacks(dtype) {
        (bytes / ts).div_ceil(8) * 8 * ts
    } else {
        bytes
    })
}

fn tensor_bytes(what: &str, dtype: GgmlType, rows: usize, cols: usize) -> Result<u64> {
    dtype
        .row_bytes(cols)
        .and_then(|r| r.checked_mul(rows))
        .map(|b| b as u64)
        .ok_or_else(|| {
            BackendError::Other(format!(
                "{what}: {rows}x{cols} is not a whole number of {dtype} blocks"
            ))
        })
}

/// Creates a storage buffer for `bytes`, refusing what is over `limit`
/// (what the adapter can bind) and turning out-of-memory into an error.
fn create(ctx: &Context, what: &str, bytes: u64, mapped: bool, limit: u64) -> Result<wgpu::Buffer> {
    let size = padded(bytes);
    if size > limit {
        return Err(BackendError::TooLarge {
            what: format!(
                "{what} (one buffer; the adapter's max_storage_buffer_binding_size \
                 and max_buffer_size)"
            ),
            bytes: size,
            limit,
        });
    }
    let mut usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    if mapped && ctx.zero_copy {
        usage |= wgpu::BufferUsages::MAP_WRITE;
    }
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(what),
        size,
        usage,
        mapped_at_creation: mapped,
    });
    if pollster::block_on(scope.pop()).is_some() {
        return Err(BackendError::OutOfMemory {
            what: what.to_string(),
            bytes: size,
        });
    }
    Ok(buffer)
}

/// The largest buffer a tensor may have: one binding, and byte offsets that
/// fit the kernels' u32 arithmetic.
pub fn max_tensor_bytes(l: &wgpu::Limits) -> u64 {
    l.max_storage_buffer_binding_size
        .min(l.max_buffer_size)
        .min(u64::from(u32::MAX) & !3)
}
