//! The GPU backend on wgpu: WGSL kernels, recorded into one submission per
//! forward pass (sent in pieces as it is recorded on hardware adapters:
//! `GpuOptions::early_submits`). Three layers:
//!
//! - kernels (`kernels/`): one family per `.wgsl` file, each with its
//!   variants, named bindings, typed parameters and dispatch builders;
//! - ops (this file, `matmul.rs`, `attention.rs`, `moe.rs`, `acts.rs`): the
//!   contract's ops, each checked, then turned into dispatches;
//! - the tape (`tape.rs`): ops recorded as `Step` values until a read,
//!   write or sync;
//! - fusion (`fuse/`): the pass that turns the tape into dispatches, one
//!   pattern rule per file joining neighbouring steps.
//!
//! Below them, `recorder` (the open encoder, the parameter arena, bind
//! groups), `pipelines` (the pipeline cache), `buffers` (a device buffer
//! per tensor) and `context` (adapters and the device).
//!
//! Shapes follow the contract: tensors are `rows × cols`, `cols` contiguous.
//! Weights keep their GGUF block layout; kernels decode blocks in registers.

mod acts;
mod attention;
mod buffers;
mod context;
mod fuse;
pub mod kernels;
mod matmul;
mod memory;
mod moe;
mod pipelines;
mod recorder;
mod tables;
mod tape;

pub use context::{
    AdapterReport, Context, GpuOptions, adapters, best_hardware, best_hardware_of, hardware_by_rank,
};
pub use kernels::{Kernel, ShaderFeatures, WEIGHT_TYPES};
pub use memory::{AdapterMemory, MemorySource};
pub use pipelines::preprocess;

use std::collections::HashSet;

use crate::backend::check as contract;
use crate::backend::{
    AttentionParams, Backend, BackendError, Caps, MoeParams, Op, OpTime, Result, RopeParams, Stats,
    Tensor, WeightData, WeightInput,
};
use crate::quant::GgmlType::{self, F16, F32, Q4_0, Q8_0};

use acts::Acts;
use buffers::Buffers;
use kernels::elementwise::{self, Elementwise};
use kernels::{Aux, Dispatch, copy, norm, softmax};
use pipelines::PipelineCache;
use recorder::Recorder;
use tape::Step;

/// Up to this many tokens a matmul of the f32 mode runs as mat-vecs, the
/// tokens of a row group next to each other so that its weights come
/// from memory once and from the cache after; above it, the tiled
/// kernels, whose tiles would mostly sit idle on fewer tokens.
const MATVEC_MAX_TOKENS: usize = 16;
/// ... but only up to this many where the tiles are cooperative matrices:
/// a mat-vec decodes its weights once per token, while split short tiles
/// (`CoopTile::ShortSplit`) cost about the same from 9 to 32 tokens, less
/// from 13 on (8B Q4_K_M, 16 tokens: 20.5 against 24.5 ms).
const MATVEC_MAX_TOKENS_COOP: usize = 12;

pub struct GpuBackend {
    ctx: Context,
    buffers: Buffers,
    pipelines: PipelineCache,
    rec: Recorder,
    /// A small buffer bound where a kernel's optional input is absent.
    dummy: Tensor,
    /// exact.wgsl's constants and tables (`1 × tables::LEN` F32).
    tables: Tensor,
    /// Rounded activations for matmuls, and what they hold.
    acts: Acts,
    /// The ops recorded since the last read, write or sync (`tape.rs`),
    /// reused from one forward to the next.
    tape: Vec<Step>,
    /// The ids of tensors from `alloc_scratch`.
    scratch: HashSet<u32>,
}

impl GpuBackend {
    /// The most tokens a matmul runs as mat-vecs (`MATVEC_MAX_TOKENS`).
    fn matvec_max_tokens(&self) -> usize {
        if self.ctx.features.coop != 0 && !self.ctx.quantize_activations {
            MATVEC_MAX_TOKENS_COOP
        } else {
            MATVEC_MAX_TOKENS
        }
    }

    /// Opens the adapter `opts` selects (see [`adapters`]).
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        Self::with_context(Context::open(opts)?)
    }

    /// [`GpuBackend::new`] among adapters already listed by [`adapters`]
    /// (`opts.device` indexes `list`), so that choosing one probes the
    /// drivers once.
    pub fn new_in(list: Vec<(AdapterReport, wgpu::Adapter)>, opts: &GpuOptions) -> Result<Self> {
        Self::with_context(Context::open_in(list, opts)?)
    }

    fn with_context(ctx: Context) -> Result<Self> {
        let mut buffers = Buffers::default();
        let dummy = buffers.alloc(&ctx, "dummy", F32, 1, 4)?;
        let tables = buffers.alloc(&ctx, "exact tables", F32, 1, tables::LEN)?;
        let mut rec = Recorder::new(&ctx);
        rec.write(
            &ctx,
            (&buffers.get(tables)?.buffer, 0),
            bytemuck::cast_slice(&tables::exact_tables()),
        );
        Ok(Self {
            ctx,
            buffers,
            pipelines: PipelineCache::default(),
            rec,
            dummy,
            tables,
            acts: Acts::default(),
            tape: Vec::new(),
            scratch: HashSet::new(),
        })
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterReport {
        &self.ctx.report
    }

    /// Whether it runs in the exact mode (`GpuOptions::exact`).
    pub fn exact(&self) -> bool {
        self.ctx.quantize_activations
    }

    /// The features the kernels were built with.
    pub fn features(&self) -> ShaderFeatures {
        self.ctx.features
    }

    /// Whether the adapter holds the cooperative-matrix GEMM's huge tiles
    /// (128 rows × 256 tokens), which large prefill matmuls then take.
    pub fn coop_huge(&self) -> bool {
        self.ctx.coop_huge
    }

    /// Whether weights are written straight into mapped device memory.
    pub fn zero_copy(&self) -> bool {
        self.ctx.zero_copy
    }

    /// The kernels that ran since the backend opened, with profiling
    /// (`GpuOptions::profile`); empty otherwise.
    pub fn kernels_run(&self) -> Vec<Kernel> {
        self.rec.kernels_run()
    }

    /// Records `d` on the tape.
    fn run(&mut self, d: Dispatch) -> Result<()> {
        for t in &d.bound {
            self.buffers.get(*t)?;
        }
        self.record(Step::Dispatch(d));
        Ok(())
    }

    /// Records `step` on the tape: what it writes no longer holds the
    /// rounded activations cached of it.
    fn record(&mut self, step: Step) {
        step.writes(|t| self.acts.wrote(t));
        self.tape.push(step);
    }

    /// The fusion pass over the tape, its dispatches recorded into the
    /// open encoder.
    fn flush(&mut self) -> Result<()> {
        if self.tape.is_empty() {
            return Ok(());
        }
        let cx = fuse::Cx {
            features: self.ctx.features,
            quantize_activations: self.ctx.quantize_activations,
            max_storage_buffers: self.ctx.limits.max_storage_buffers_per_shader_stage,
            aux: self.aux(),
            scratch: &self.scratch,
        };
        let passed = fuse::pass(&mut self.tape, &cx, |d| {
            emit(
                &self.ctx,
                &self.buffers,
                &mut self.pipelines,
                &mut self.rec,
                d,
            )
        })?;
        if passed.dropped_rounding {
            self.acts.forget();
        }
        Ok(())
    }

    /// Tensors a dispatch may bind besides its own.
    fn aux(&self) -> Aux {
        Aux {
            dummy: self.dummy,
            tables: self.tables,
        }
    }

    fn alloc_tensor(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let what = format!("{rows}x{cols} {dtype} tensor");
        self.buffers.alloc(&self.ctx, &what, dtype, rows, cols)
    }

    fn load(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: &WeightData,
    ) -> Result<Tensor> {
        // A weight over the binding limit is split by rows when it is one
        // that get_rows and matmul read; anything else is refused there.
        let over = dtype
            .row_bytes(cols)
            .and_then(|r| r.checked_mul(rows))
            .is_some_and(|b| {
                // A repacked weight may grow by up to 7 blocks.
                let b = (b + 7 * dtype.type_size()) as u64;
                buffers::padded(b) > self.ctx.max_weight_binding
            });
        if over && WEIGHT_TYPES.contains(&dtype) {
            return self
                .buffers
                .load_split(&self.ctx, name, dtype, rows, cols, data);
        }
        self.buffers
            .load_weight(&self.ctx, name, dtype, rows, cols, data)
    }

    /// What kernels take as a weight's row stride: bytes per row, or for
    /// a repacked weight blocks per row (offsets count blocks there).
    fn row_param(&self, dtype: GgmlType, cols: usize) -> usize {
        if self.ctx.features.repacks(dtype) {
            cols / dtype.block_size()
        } else {
            dtype.row_bytes(cols).unwrap_or(0)
        }
    }

    fn require(&self, op: Op, dtype: GgmlType) -> Result<()> {
        if self.supports(op, dtype) {
            Ok(())
        } else {
            Err(BackendError::Unsupported {
                backend: self.name(),
                op,
                dtype,
            })
        }
    }

    /// `out = op(gate) · up`.
    fn glu(&mut self, op: Elementwise, gate: Tensor, up: Tensor, out: Tensor) {
        self.record(Step::Glu { op, gate, up, out });
    }
}

/// Records dispatch `d` into the open encoder, its tensors bound by their
/// buffers.
fn emit(
    ctx: &Context,
    buffers: &Buffers,
    pipelines: &mut PipelineCache,
    rec: &mut Recorder,
    d: Dispatch,
) -> Result<()> {
    let mut bound = Vec::with_capacity(d.bound.len());
    for t in &d.bound {
        bound.push((t.id, buffers.get(*t)?.binding()));
    }
    rec.record(ctx, pipelines, d.kernel, &d.params, &bound, d.groups)
}

/// A limit of the GPU kernels beyond the contract.
fn limit(op: Op, ok: bool, detail: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BackendError::Shape {
            op,
            detail: detail(),
        })
    }
}

/// The contract's ops: each runs the contract's shared shape and type
/// checks (`backend::check`, the same the CPU runs), then the kernels' own
/// limits (a bad call is an error, never a panic or an out-of-bounds
/// dispatch), then records itself on the tape.
impl Backend for GpuBackend {
    fn name(&self) -> String {
        // As llama-bench names a device: the API, then the adapter.
        format!("{} ({})", self.ctx.report.backend, self.ctx.report.name)
    }

    fn caps(&self) -> Caps {
        Caps {
            is_gpu: true,
            unified_memory: self.ctx.report.unified_memory,
            max_tensor_bytes: self.ctx.max_binding.saturating_sub(8),
        }
    }

    fn supports(&self, op: Op, dtype: GgmlType) -> bool {
        match op {
            Op::GetRows | Op::MatMul | Op::MatMulId => WEIGHT_TYPES.contains(&dtype),
            // Caches of ggml blocks: `kv_store` writes them, attention
            // reads them.
            Op::SetRows | Op::Attention => matches!(dtype, F32 | F16 | Q8_0 | Q4_0),
            Op::Copy => matches!(dtype, F32 | F16),
            _ => dtype == F32,
        }
    }

    fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        self.alloc_tensor(dtype, rows, cols)
    }

    fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor> {
        self.load(name, dtype, rows, cols, &data)
    }

    fn load_joined(&mut self, ws: &[WeightInput]) -> Result<Vec<Tensor>> {
        // Only the prefill matmuls on cooperative matrices read them joined
        // (`matmul::matmuls_coop`).
        if self.ctx.features.coop != 0
            && let Some(ts) = self.buffers.load_joined(&self.ctx, ws)?
        {
            return Ok(ts);
        }
        ws.iter()
            .map(|w| self.load(&w.name, w.dtype, w.rows, w.cols, &w.data))
            .collect()
    }

    fn alloc_scratch(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let t = self.alloc_tensor(dtype, rows, cols)?;
        self.scratch.insert(t.id);
        Ok(t)
    }

    fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        self.flush()?;
        let slot = self.buffers.get(t)?;
        if bytes.len() as u64 > slot.bytes {
            return Err(BackendError::Other(format!(
                "write of {} bytes into {} ({} bytes)",
                bytes.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec
            .write(&self.ctx, (&slot.buffer, slot.offset), bytes);
        self.acts.forget();
        Ok(())
    }

    fn read(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        self.flush()?;
        let slot = self.buffers.get(t)?;
        if out.len() as u64 > slot.bytes {
            return Err(BackendError::Other(format!(
                "read of {} bytes from {} ({} bytes)",
                out.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.read(&self.ctx, (&slot.buffer, slot.offset), out)
    }

    fn read_all(&mut self, ts: &[Tensor], out: &mut [u8]) -> Result<()> {
        self.flush()?;
        let mut parts = Vec::with_capacity(ts.len());
        for &t in ts {
            let slot = self.buffers.get(t)?;
            let n = t.n_bytes();
            if n as u64 > slot.bytes {
                return Err(BackendError::Other(format!(
                    "read of {n} bytes from {} ({} bytes)",
                    slot.name, slot.bytes
                )));
            }
            parts.push((&slot.buffer, slot.offset, n));
        }
        let total: usize = parts.iter().map(|p| p.2).sum();
        if total != out.len() {
            return Err(BackendError::Other(format!(
                "read of {total} bytes into {} bytes",
                out.len()
            )));
        }
        self.rec.read_parts(&self.ctx, &parts, out)
    }

    fn synchronize(&mut self) -> Result<()> {
        self.flush()?;
        self.rec.wait(&self.ctx)
    }

    fn stats(&self) -> Stats {
        self.rec.stats
    }

    fn op_times(&self) -> Vec<OpTime> {
        self.rec.op_times()
    }

    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        self.require(Op::GetRows, table.dtype)?;
        contract::get_rows(table, ids, out)?;
        let row_bytes = self.row_param(table.dtype, table.cols);
        let t = (table, ids, out);
        // A split table: each part writes the rows whose ids fall in it.
        let Some(parts) = self.buffers.parts(table).map(<[_]>::to_vec) else {
            return self.run(kernels::get_rows::dispatch(t, row_bytes, None));
        };
        for part in parts {
            self.run(kernels::get_rows::dispatch(t, row_bytes, Some(part)))?;
        }
        Ok(())
    }

    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        let op = Op::SetRows;
        self.require(op, dst.dtype)?;
        contract::set_rows(src, ids, dst)?;
        // Each invocation writes one whole u32 word of an F16 row.
        limit(op, dst.dtype == F32 || dst.cols.is_multiple_of(2), || {
            format!(
                "an F16 destination needs an even row length, not {}",
                dst.cols
            )
        })?;
        self.record(Step::SetRows { src, ids, dst });
        Ok(())
    }

    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()> {
        contract::rms_norm(x, weight, out)?;
        if let Some(w) = weight {
            let q8 = None;
            self.record(Step::Norm { x, w, eps, out, q8 });
            return Ok(());
        }
        self.run(norm::rms_norm(x, None, eps, out, None))
    }

    fn rope(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
        let op = Op::Rope;
        contract::rope(x, pos, p, out)?;
        // One invocation per pair of values.
        limit(
            op,
            p.head_dim.is_multiple_of(2) && p.n_dims.is_multiple_of(2),
            || {
                format!(
                    "n_dims {} and head_dim {} must be even",
                    p.n_dims, p.head_dim
                )
            },
        )?;
        self.record(Step::Rope { x, pos, p: *p, out });
        Ok(())
    }

    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
        self.require(Op::MatMul, w.dtype)?;
        contract::matmul(w, x, out)?;
        matmul::matmul(self, w, x, out)
    }

    fn matmuls(&mut self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Result<()> {
        matmul::matmuls(self, ws, x, outs)
    }

    fn attention(
        &mut self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        pos: Tensor,
        seq: Tensor,
        p: &AttentionParams,
        out: Tensor,
    ) -> Result<()> {
        self.require(Op::Attention, k_cache.dtype)?;
        contract::attention(q, k_cache, v_cache, pos, seq, p, out)?;
        attention::attention(self, [q, k_cache, v_cache, pos, seq, out], p)
    }

    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        contract::binary(Op::Add, a, b, out)?;
        // A residual add, for `fuse::residual` (f32 mode).
        if !self.ctx.quantize_activations && a.rows == b.rows && a.cols == b.cols {
            let split = None;
            self.record(Step::Add { a, b, out, split });
            return Ok(());
        }
        self.run(elementwise::dispatch(
            Elementwise::Add,
            a,
            Some(b),
            0.0,
            out,
        ))
    }

    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        contract::binary(Op::Mul, a, b, out)?;
        self.run(elementwise::dispatch(
            Elementwise::Mul,
            a,
            Some(b),
            0.0,
            out,
        ))
    }

    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()> {
        contract::scale(x, out)?;
        for t in [x, out] {
            self.buffers.get(t)?;
        }
        self.record(Step::Scale { x, s, out });
        Ok(())
    }

    fn softcap(&mut self, x: Tensor, cap: f32, out: Tensor) -> Result<()> {
        contract::softcap(x, cap, out)?;
        self.run(elementwise::dispatch(
            Elementwise::Softcap,
            x,
            None,
            cap,
            out,
        ))
    }

    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        contract::glu(Op::SiluMul, gate, up, out)?;
        self.glu(Elementwise::SiluMul, gate, up, out);
        Ok(())
    }

    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        contract::glu(Op::GeluMul, gate, up, out)?;
        self.glu(Elementwise::GeluMul, gate, up, out);
        Ok(())
    }

    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        contract::softmax(x, out)?;
        self.run(softmax::dispatch(softmax::SoftmaxKernel::Softmax, x, out))
    }

    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        contract::argmax(x, out)?;
        limit(Op::Argmax, x.cols > 0, || "rows of 0 values".into())?;
        self.run(softmax::dispatch(softmax::SoftmaxKernel::Argmax, x, out))
    }

    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()> {
        contract::copy(src, dst)?;
        self.run(copy::copy(src, dst))
    }

    fn topk_moe(
        &mut self,
        logits: Tensor,
        p: &MoeParams,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<()> {
        moe::topk_moe(self, logits, p, ids, weights)
    }

    fn matmul_id(&mut self, w: Tensor, x: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        moe::matmul_id(self, w, x, ids, out)
    }

    fn moe_sum(&mut self, experts: Tensor, weights: Tensor, out: Tensor) -> Result<()> {
        moe::moe_sum(self, experts, weights, out)
    }
}
