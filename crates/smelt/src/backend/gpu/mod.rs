//! The GPU backend on wgpu: WGSL kernels, recorded into one submission per
//! forward pass.
//!
//! - `context`: adapters (for `smelt devices` and selection) and the device.
//! - `buffers`: one device buffer per tensor, weights uploaded once.
//! - `pipelines`: the kernel table (`kernels/*.wgsl`, variants by defines)
//!   and the pipeline cache.
//! - `recorder`: the open encoder, the per-submission parameter arena and
//!   the bind-group cache.
//! - `ops`: the contract's ops: checks, then one dispatch each.
//!
//! Shapes follow the contract: tensors are `rows × cols`, `cols` contiguous.
//! Weights keep their GGUF block layout; kernels decode blocks in registers.

mod buffers;
mod context;
mod ops;
mod pipelines;
mod recorder;

pub use context::{AdapterReport, GpuOptions, adapters, best_hardware};
pub use pipelines::{Elementwise, Kernel, ShaderFeatures, WEIGHT_TYPES, preprocess};

use crate::backend::{Caps, Result, Stats, Tensor, WeightData};
use crate::quant::GgmlType;

use buffers::Buffers;
use context::Context;
use pipelines::PipelineCache;
use recorder::{Params, Recorder};

pub struct GpuBackend {
    ctx: Context,
    buffers: Buffers,
    pipelines: PipelineCache,
    rec: Recorder,
    /// A small buffer bound where a kernel's optional input is absent.
    dummy: Tensor,
}

impl GpuBackend {
    /// Opens the adapter `opts` selects (see [`adapters`]).
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        let ctx = Context::open(opts)?;
        let mut buffers = Buffers::default();
        let dummy = buffers.alloc(&ctx, "dummy", GgmlType::F32, 1, 4)?;
        let rec = Recorder::new(&ctx);
        Ok(Self {
            ctx,
            buffers,
            pipelines: PipelineCache::default(),
            rec,
            dummy,
        })
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterReport {
        &self.ctx.report
    }

    /// The features the kernels were built with.
    pub fn features(&self) -> ShaderFeatures {
        self.ctx.features
    }

    /// Whether weights are written straight into mapped device memory.
    pub fn zero_copy(&self) -> bool {
        self.ctx.zero_copy
    }

    pub(crate) fn gpu_caps(&self) -> Caps {
        Caps {
            is_gpu: true,
            unified_memory: self.ctx.report.unified_memory,
            max_tensor_bytes: buffers::max_tensor_bytes(&self.ctx.limits).saturating_sub(8),
        }
    }

    pub(crate) fn gpu_stats(&self) -> Stats {
        self.rec.stats
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
        self.buffers
            .load_weight(&self.ctx, name, dtype, rows, cols, data)
    }

    fn write_bytes(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        let slot = self.buffers.get(t)?;
        if bytes.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "write of {} bytes into {} ({} bytes)",
                bytes.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.write(&self.ctx, &slot.buffer, bytes);
        Ok(())
    }

    fn read_bytes(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        let slot = self.buffers.get(t)?;
        if out.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "read of {} bytes from {} ({} bytes)",
                out.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.read(&self.ctx, &slot.buffer, out)
    }

    fn sync(&mut self) -> Result<()> {
        self.rec.wait(&self.ctx)
    }

    /// Records `kernel` over `groups` workgroups with `tensors` bound in its
    /// binding order.
    fn run(
        &mut self,
        kernel: Kernel,
        params: Params,
        tensors: &[Tensor],
        groups: u64,
    ) -> Result<()> {
        let mut bound = Vec::with_capacity(tensors.len());
        for t in tensors {
            bound.push((t.id, &self.buffers.get(*t)?.buffer));
        }
        self.rec.dispatch(
            &self.ctx,
            &mut self.pipelines,
            kernel,
            &params,
            &bound,
            groups,
        )
    }
}

/// Packs parameters: integers as they are, floats by their bits.
fn params(values: &[P]) -> Params {
    let mut p = [0u32; 16];
    for (slot, v) in p.iter_mut().zip(values) {
        *slot = match *v {
            P::U(u) => u,
            P::F(f) => f.to_bits(),
        };
    }
    p
}

/// One parameter of a dispatch.
#[derive(Clone, Copy)]
enum P {
    U(u32),
    F(f32),
}
