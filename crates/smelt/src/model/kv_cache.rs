//! The KV cache: per layer, the keys and values of every position of every
//! sequence slot, allocated once per session.
//!
//! Layout of each layer's K and V: `(n_slots · n_ctx) × kv_dim`, so slot `s`
//! position `p` is row `s · n_ctx + p` (what `Backend::attention` expects).
//! The cache also tracks how many positions of each slot hold valid keys,
//! so a step can only extend a sequence or rewind it, never leave a hole.

use super::ModelError;
use crate::backend::{Backend, Op, Tensor};
use crate::quant::GgmlType;

/// Bytes of the K and V buffers of every layer for `n_slots × n_ctx`
/// positions; `None` past `u64`.
pub fn bytes(config: &super::Config, n_ctx: usize, n_slots: usize, dtype: GgmlType) -> Option<u64> {
    let rows = (n_ctx as u64).checked_mul(n_slots as u64)?;
    let row = dtype.row_bytes(config.kv_dim())? as u64;
    rows.checked_mul(row)?
        .checked_mul(2)?
        .checked_mul(config.n_layer as u64)
}

/// The cache types, by the names `--cache-type` takes: floats, or ggml's
/// 32-value blocks along each row (quantized as they are written,
/// dequantized a tile at a time inside attention).
pub const TYPES: [GgmlType; 4] = [GgmlType::F16, GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0];

/// Whether `backend` can hold a cache of `dtype` for heads of `head_dim`
/// values (a block type reads whole blocks per head).
pub fn check_type(
    backend: &dyn Backend,
    dtype: GgmlType,
    head_dim: usize,
) -> Result<(), ModelError> {
    let names = || TYPES.map(|t| t.to_string().to_lowercase()).join(", ");
    if !TYPES.contains(&dtype) {
        return Err(ModelError::Param(format!(
            "KV cache type {dtype}: one of {} expected",
            names()
        )));
    }
    if ![Op::SetRows, Op::Attention]
        .iter()
        .all(|&op| backend.supports(op, dtype))
    {
        return Err(ModelError::Param(format!(
            "the {} backend cannot hold a {dtype} KV cache yet: use --cache-type f16 or f32, or --backend cpu",
            backend.name()
        )));
    }
    let block = dtype.block_size();
    if !head_dim.is_multiple_of(block) {
        return Err(ModelError::Param(format!(
            "a {dtype} KV cache needs a head dim that is a multiple of {block}; this model's is {head_dim}: use --cache-type f16"
        )));
    }
    Ok(())
}

pub struct KvCache {
    /// Per layer: `(n_slots · n_ctx) × kv_dim`, of one of [`TYPES`].
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub n_ctx: usize,
    pub n_slots: usize,
    /// Valid positions per slot: `0..len[s]` hold keys and values.
    len: Vec<usize>,
}

impl KvCache {
    pub fn new(
        backend: &mut dyn Backend,
        n_layer: usize,
        kv_dim: usize,
        n_ctx: usize,
        n_slots: usize,
        dtype: GgmlType,
    ) -> Result<Self, ModelError> {
        if !TYPES.contains(&dtype) {
            return Err(ModelError::Param(format!(
                "KV cache type {dtype}: F16, F32, Q8_0 or Q4_0 expected"
            )));
        }
        let rows = n_slots
            .checked_mul(n_ctx)
            .ok_or_else(|| ModelError::Param("KV cache size overflows".into()))?;
        let mut k = Vec::with_capacity(n_layer);
        let mut v = Vec::with_capacity(n_layer);
        for layer in 0..n_layer {
            k.push(backend.alloc_in_layer(layer, dtype, rows, kv_dim)?);
            v.push(backend.alloc_in_layer(layer, dtype, rows, kv_dim)?);
        }
        Ok(Self {
            k,
            v,
            n_ctx,
            n_slots,
            len: vec![0; n_slots],
        })
    }

    /// Valid positions of `slot`.
    pub fn len(&self, slot: usize) -> usize {
        self.len.get(slot).copied().unwrap_or(0)
    }

    /// Forgets positions `len..` of `slot` (0 clears it), so the next step
    /// may continue from `len`.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        if let Some(l) = self.len.get_mut(slot) {
            *l = (*l).min(len);
        }
    }

    /// Records that a step wrote positions up to `last` of `slot`, from a
    /// start [`KvCache::check_span`] allowed: `0..=last` are valid now.
    pub(super) fn commit(&mut self, slot: usize, last: usize) {
        self.len[slot] = last + 1;
    }

    /// Whether a step may write positions `first..=last` of `slot`: inside
    /// the context, and starting no later than the slot's end.
    pub(super) fn check_span(
        &self,
        slot: usize,
        first: usize,
        last: usize,
    ) -> Result<(), ModelError> {
        if slot >= self.n_slots {
            return Err(ModelError::Param(format!(
                "sequence slot {slot} outside 0..{}",
                self.n_slots
            )));
        }
        if last >= self.n_ctx {
            return Err(ModelError::ContextFull {
                needed: last + 1,
                n_ctx: self.n_ctx,
            });
        }
        if first > self.len[slot] {
            return Err(ModelError::Param(format!(
                "slot {slot} holds positions 0..{}; a step cannot start at {first}",
                self.len[slot]
            )));
        }
        Ok(())
    }
}
