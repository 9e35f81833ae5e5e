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
pub use pipelines::{ActQuant, Elementwise, Kernel, ShaderFeatures, WEIGHT_TYPES, preprocess};

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
    /// Rounded activations for matmuls (`1 × capacity` F32), grown on first
    /// use of a larger batch and reused.
    acts: Option<Tensor>,
    /// What `acts` holds: (tensor id, rows, cols, rounding), valid until
    /// anything may have written that tensor.
    acts_of: Option<(u32, usize, usize, ActQuant)>,
    /// Q8_1 block sums of `acts` (`1 × capacity / 32` F32).
    acts_sum: Option<Tensor>,
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
            acts: None,
            acts_of: None,
            acts_sum: None,
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
        self.acts_of = None;
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
        if !matches!(
            kernel,
            Kernel::MatVec(_)
                | Kernel::MatMul(_)
                | Kernel::MatVecQ81(_)
                | Kernel::MatMulQ81(_)
                | Kernel::QuantizeActs(_)
        ) {
            // Any other op may write the tensor whose rounding is cached.
            self.acts_of = None;
        }
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

impl GpuBackend {
    /// `x` rounded as ggml rounds a matmul's activations for weights of
    /// type `w`, or `x` itself; with Q8 rounding also the Q8_1 block sums.
    /// Consecutive matmuls on the same input (Q, K, V; gate, up) share one
    /// rounding.
    fn matmul_input(&mut self, w: GgmlType, x: Tensor) -> Result<(Tensor, Option<Tensor>)> {
        let Some(q) = ActQuant::for_weight(w).filter(|_| self.ctx.quantize_activations) else {
            return Ok((x, None));
        };
        let n = x.n_elements();
        let (acts, sums) = match (self.acts, self.acts_sum) {
            (Some(a), Some(s)) if a.n_elements() >= n => (a, s),
            _ => {
                let a = self.alloc_tensor(GgmlType::F32, 1, n.max(1))?;
                let s = self.alloc_tensor(GgmlType::F32, 1, n.div_ceil(32).max(1))?;
                self.acts = Some(a);
                self.acts_sum = Some(s);
                self.acts_of = None;
                (a, s)
            }
        };
        let xq = acts.reshape(x.rows, x.cols);
        let xs = sums.reshape(1, n / 32);
        if self.acts_of != Some((x.id, x.rows, x.cols, q)) {
            let threads = match q {
                ActQuant::F16 => n.div_ceil(256),
                _ => (n / q.block()).div_ceil(64),
            };
            let bound: &[Tensor] = if q == ActQuant::Q8 {
                &[x, xq, xs]
            } else {
                &[x, xq]
            };
            self.run(
                Kernel::QuantizeActs(q),
                params(&[P::U(n as u32)]),
                bound,
                threads as u64,
            )?;
            self.acts_of = Some((x.id, x.rows, x.cols, q));
        }
        Ok((xq, (q == ActQuant::Q8).then_some(xs)))
    }

    /// Forgets the cached rounding if `out` is the tensor it came from.
    fn wrote(&mut self, out: Tensor) {
        if self.acts_of.is_some_and(|(id, ..)| id == out.id) {
            self.acts_of = None;
        }
    }
}
