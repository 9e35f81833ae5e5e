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
//! - `pending`: fusion, an op held back to be recorded with the next.
//!
//! Shapes follow the contract: tensors are `rows × cols`, `cols` contiguous.
//! Weights keep their GGUF block layout; kernels decode blocks in registers.

mod buffers;
mod context;
mod ops;
mod pending;
mod pipelines;
mod recorder;
mod tables;

pub use context::{AdapterReport, Context, GpuOptions, adapters, best_hardware, best_hardware_of};
pub use pipelines::{
    ActQuant, Elementwise, Kernel, Q8_WEIGHT_TYPES, ShaderFeatures, WEIGHT_TYPES, preprocess,
};

use crate::backend::{Caps, Result, Stats, Tensor, WeightData};
use crate::quant::GgmlType;

use buffers::Buffers;
use pending::Pending;
use pipelines::{PipelineCache, WG_ROW};
use recorder::{Params, Recorder};

/// Up to this many tokens a matmul runs as mat-vec (weights streamed once
/// per token); above it, the tiled kernel.
const MATVEC_MAX_TOKENS: usize = 4;

pub struct GpuBackend {
    ctx: Context,
    buffers: Buffers,
    pipelines: PipelineCache,
    rec: Recorder,
    /// A small buffer bound where a kernel's optional input is absent.
    dummy: Tensor,
    /// exact.wgsl's constants and tables (`1 × tables::LEN` F32).
    tables: Tensor,
    /// Rounded activations for matmuls, grown on first use of a larger
    /// batch and reused.
    acts: Acts,
    /// What `acts` holds: (tensor id, rows, cols, rounding), valid until
    /// anything may have written that tensor.
    acts_of: Option<(u32, usize, usize, Held)>,
    /// An op not yet dispatched, for the next to join (`Pending`); anything
    /// else dispatches it as it is first.
    pending: Option<Pending>,
    /// The split matmul's scratch (`split_sums`).
    split_sums: Option<Tensor>,
}

/// A matmul's activations, rounded as ggml rounds them (`quantize.wgsl`).
#[derive(Default)]
struct Acts {
    /// Values that fit: rounded values, or Q8 quants, as F32 or I32 words.
    capacity: usize,
    /// `1 × capacity` F32: Q8_K- or f16-rounded values.
    vals: Option<Tensor>,
    /// Q8 blocks: quants 4 per word (`1 × capacity / 4` I32), scales and
    /// sums (`1 × capacity / 32` F32 each). Two sets: a fused op that reads
    /// one set's rounding (`MatVecGlu`) writes its output's to the other.
    q8: [Option<[Tensor; 3]>; 2],
    /// The set that holds the cached rounding (`acts_of`).
    q8_set: usize,
    /// `1 × capacity` F16: packed f16 activations of the cooperative-matrix
    /// matmul (`half_input`). Two sets, as `q8`: a fused op that reads one
    /// set (`Pending::CoopGateUp`) writes its output's blocks to the other.
    half: [Option<Tensor>; 2],
    /// The set that holds the cached blocks (`acts_of`).
    half_set: usize,
}

/// What `acts` holds for the tensor named in `acts_of`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// ggml's rounding for a matmul's weight type (`quantize.wgsl`, or the
    /// op before it, fused).
    Rounded(ActQuant),
    /// Packed f16 for the cooperative-matrix matmul (`half_input`).
    Half,
}

/// The input a matmul kernel reads.
enum MatIn {
    /// F32 values: the activations themselves or their rounding.
    F32(Tensor),
    /// Q8 blocks: quants, scales, sums.
    Q8([Tensor; 3]),
}

impl GpuBackend {
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
        let dummy = buffers.alloc(&ctx, "dummy", GgmlType::F32, 1, 4)?;
        let tables = buffers.alloc(&ctx, "exact tables", GgmlType::F32, 1, tables::LEN)?;
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
            acts_of: None,
            pending: None,
            split_sums: None,
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

    pub(crate) fn gpu_caps(&self) -> Caps {
        Caps {
            is_gpu: true,
            unified_memory: self.ctx.report.unified_memory,
            max_tensor_bytes: self.ctx.max_binding.saturating_sub(8),
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

    fn write_bytes(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        self.flush_pending()?;
        let slot = self.buffers.get(t)?;
        if bytes.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "write of {} bytes into {} ({} bytes)",
                bytes.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec
            .write(&self.ctx, (&slot.buffer, slot.offset), bytes);
        self.acts_of = None;
        Ok(())
    }

    fn read_bytes(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        self.flush_pending()?;
        let slot = self.buffers.get(t)?;
        if out.len() as u64 > slot.bytes {
            return Err(crate::backend::BackendError::Other(format!(
                "read of {} bytes from {} ({} bytes)",
                out.len(),
                slot.name,
                slot.bytes
            )));
        }
        self.rec.read(&self.ctx, (&slot.buffer, slot.offset), out)
    }

    /// `Backend::read_all`: every tensor's bytes copied by one submission.
    fn read_all_bytes(&mut self, ts: &[Tensor], out: &mut [u8]) -> Result<()> {
        self.flush_pending()?;
        let mut parts = Vec::with_capacity(ts.len());
        for &t in ts {
            let slot = self.buffers.get(t)?;
            let n = t.n_bytes();
            if n as u64 > slot.bytes {
                return Err(crate::backend::BackendError::Other(format!(
                    "read of {n} bytes from {} ({} bytes)",
                    slot.name, slot.bytes
                )));
            }
            parts.push((&slot.buffer, slot.offset, n));
        }
        let total: usize = parts.iter().map(|p| p.2).sum();
        if total != out.len() {
            return Err(crate::backend::BackendError::Other(format!(
                "read of {total} bytes into {} bytes",
                out.len()
            )));
        }
        self.rec.read_parts(&self.ctx, &parts, out)
    }

    fn sync(&mut self) -> Result<()> {
        self.flush_pending()?;
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
        // Whatever this dispatch is, a held-back norm comes before it.
        self.flush_pending()?;
        if !matches!(
            kernel,
            Kernel::MatVec(_)
                | Kernel::MatVecMulti { .. }
                | Kernel::MatVecDot { .. }
                | Kernel::MatMul(_)
                | Kernel::MatMulCoop { .. }
                | Kernel::MatVecQ8(_)
                | Kernel::MatMulQ8(_)
                | Kernel::QuantizeActs(_)
                | Kernel::SplitSums
        ) {
            // These write only the outputs their callers report (`wrote`);
            // any other op may write the tensor whose rounding is cached.
            self.acts_of = None;
        }
        let mut bound = Vec::with_capacity(tensors.len());
        for t in tensors {
            bound.push((t.id, self.buffers.get(*t)?.binding()));
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
    /// Whether a matmul of `x` by a `w` weight is a repacked decode (f32
    /// mode) on Q8-rounded activations (`MatVecDot`, `MatVecMulti`).
    fn dot_decode(&self, w: GgmlType, x: Tensor) -> bool {
        self.ctx.features.repacks(w) && x.rows <= MATVEC_MAX_TOKENS
    }

    /// `x` rounded as ggml rounds a matmul's activations for weights of
    /// type `w` (in f32 mode for `dot_decode` only), or `x` itself. Consecutive matmuls on the same input (Q, K,
    /// V; gate, up) share one rounding.
    fn matmul_input(&mut self, w: GgmlType, x: Tensor) -> Result<MatIn> {
        let rounds = self.ctx.quantize_activations || self.dot_decode(w, x);
        let Some(q) = ActQuant::for_weight(w).filter(|_| rounds) else {
            return Ok(MatIn::F32(x));
        };
        let cap = self.grow_acts(x.n_elements());
        // The held-back op whose output x is, if it rounds it in its own
        // dispatch.
        let fusing = self.pending.filter(|p| p.out() == x && p.rounds_output());
        let input = if q == ActQuant::Q8 {
            let set = match fusing {
                Some(p) if p.reads_q8() => 1 - self.acts.q8_set,
                _ => self.acts.q8_set,
            };
            let bufs = match self.acts.q8[set] {
                Some(b) => b,
                None => {
                    let b = [
                        self.alloc_tensor(GgmlType::I32, 1, cap / 4)?,
                        self.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
                        self.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
                    ];
                    self.acts.q8[set] = Some(b);
                    b
                }
            };
            if set != self.acts.q8_set {
                self.acts.q8_set = set;
                self.acts_of = None;
            }
            let n = x.n_elements();
            MatIn::Q8([
                bufs[0].reshape(1, n / 4),
                bufs[1].reshape(1, n / 32),
                bufs[2].reshape(1, n / 32),
            ])
        } else {
            let vals = match self.acts.vals {
                Some(v) => v,
                None => {
                    let v = self.alloc_tensor(GgmlType::F32, 1, cap)?;
                    self.acts.vals = Some(v);
                    v
                }
            };
            MatIn::F32(vals.reshape(x.rows, x.cols))
        };
        let fused = fusing.zip(match &input {
            MatIn::Q8(bufs) => Some(*bufs),
            MatIn::F32(_) => None,
        });
        if let Some((p, bufs)) = fused {
            // The op and the rounding in one dispatch.
            self.pending = None;
            let (kernel, params, bound, groups) = p.dispatch(Some(bufs), self.aux());
            self.run(kernel, params, &bound, groups)?;
            self.acts_of = Some((x.id, x.rows, x.cols, Held::Rounded(q)));
        }
        if self.acts_of != Some((x.id, x.rows, x.cols, Held::Rounded(q))) {
            let n = x.n_elements();
            let (threads, bound) = match &input {
                MatIn::Q8([xq, xd, xs]) => (n / 4, vec![x, *xq, *xd, *xs]),
                MatIn::F32(v) if q == ActQuant::F16 => (n, vec![x, *v]),
                MatIn::F32(v) => (n / 256, vec![x, *v]),
            };
            // Q8: one invocation per word; Q8_K: per block of 256.
            let wg = if q == ActQuant::Q8K {
                64
            } else {
                WG_ROW as usize
            };
            self.run(
                Kernel::QuantizeActs(q),
                params(&[P::U(n as u32)]),
                &bound,
                threads.div_ceil(wg) as u64,
            )?;
            self.acts_of = Some((x.id, x.rows, x.cols, Held::Rounded(q)));
        }
        Ok(input)
    }

    /// A `1 × n` F32 scratch for a split matmul's second half
    /// (`CoopTile::HugeSplit`), grown when a larger one is asked for.
    fn split_sums(&mut self, n: usize) -> Result<Tensor> {
        match self.split_sums {
            Some(t) if t.n_elements() >= n => Ok(t.reshape(1, n)),
            _ => {
                let t = self.alloc_tensor(GgmlType::F32, 1, n)?;
                self.split_sums = Some(t);
                Ok(t)
            }
        }
    }

    /// Makes `acts` hold at least `n` values (a new, empty set if it held
    /// fewer); its capacity.
    fn grow_acts(&mut self, n: usize) -> usize {
        let n = n.max(32);
        if self.acts.capacity < n {
            self.acts = Acts {
                capacity: n,
                ..Acts::default()
            };
            self.acts_of = None;
        }
        self.acts.capacity
    }

    /// `x` as packed f16 for `matmul_coop.wgsl`, which would round it so
    /// when staging: rounded once per input rather than once per tile of
    /// rows, and read at half the bytes. Consecutive matmuls on the same
    /// input (Q, K, V; gate, up) share it. The tensor has x's shape but
    /// `HalfBlocks`'s layout (blocks of 32 along a row, each block of all
    /// rows together); only that kernel reads it. x's columns are a
    /// multiple of 32 (the caller's condition for the coop matmul).
    fn half_input(&mut self, x: Tensor) -> Result<Tensor> {
        let cap = self.grow_acts(x.n_elements());
        let key = Some((x.id, x.rows, x.cols, Held::Half));
        let held = self.pending.filter(|p| p.out() == x);
        let set = match held {
            Some(p) if self.acts_of != key && p.reads_half() => 1 - self.acts.half_set,
            _ => self.acts.half_set,
        };
        let half = match self.acts.half[set] {
            Some(t) => t,
            None => {
                let t = self.alloc_tensor(GgmlType::F16, 1, cap)?;
                self.acts.half[set] = Some(t);
                t
            }
        };
        let half = half.reshape(x.rows, x.cols);
        if self.acts_of != key {
            self.acts.half_set = set;
            // The op held back whose output x is writes both, if it can.
            let (f, aux) = (self.ctx.features, self.aux());
            let fused = held.and_then(|p| p.half_dispatch(half, f, aux));
            let (kernel, params, bound, groups) = match fused {
                Some(call) => {
                    self.pending = None;
                    call
                }
                None => {
                    let n = x.n_elements();
                    let p = params(&[P::U(n as u32), P::U(x.cols as u32)]);
                    (
                        Kernel::HalfBlocks,
                        p,
                        vec![x, half],
                        n.div_ceil(2 * 256) as u64,
                    )
                }
            };
            self.run(kernel, params, &bound, groups)?;
            self.acts_of = key;
        }
        Ok(half)
    }

    /// Forgets the cached rounding if `out` is the tensor it came from.
    fn wrote(&mut self, out: Tensor) {
        if self.acts_of.is_some_and(|(id, ..)| id == out.id) {
            self.acts_of = None;
        }
    }
}
