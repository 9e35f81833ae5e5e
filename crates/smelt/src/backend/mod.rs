//! The backend contract: memory plus the few ops a transformer needs.
//!
//! Model code is written once against [`Backend`] and knows nothing about
//! CPUs or GPUs. A backend owns its memory; model code holds [`Tensor`]
//! handles into it.
//!
//! - The CPU backend executes each op at once.
//! - The GPU backend *records*: each op appends a dispatch to an open command
//!   encoder, and nothing is submitted until [`Backend::read`] (or
//!   [`Backend::synchronize`]) needs a result. A forward pass is therefore
//!   one submission (sent in pieces while it is recorded on hardware
//!   adapters, so that the GPU starts early).
//!
//! Shapes. Every tensor is a row-major matrix of `rows × cols` values; `cols`
//! is ggml's `ne[0]`, the contiguous dimension. A weight `W` of `m` outputs
//! and `k` inputs is `m × k`, as GGUF stores it. Activations for a step of
//! `n` tokens are `n × dim`. Index tensors (token ids, positions, rows) are
//! `I32` with `rows = 1`.
//!
//! Outputs are always passed in, allocated once per session: no op
//! allocates. A handle narrowed with [`Tensor::with_rows`] addresses the
//! first rows of the same memory, so a buffer sized for the largest batch
//! serves every smaller one.

pub mod check;
pub mod cpu;
pub mod gpu;
pub mod select;
pub mod split;

use crate::quant::GgmlType;

/// A handle to backend memory holding a `rows × cols` matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    pub id: u32,
    pub dtype: GgmlType,
    pub rows: usize,
    pub cols: usize,
}

impl Tensor {
    /// The same memory, viewed as its first `rows` rows.
    ///
    /// # Panics
    /// If `rows` exceeds the handle's rows: that is a bug in model code, not
    /// bad input.
    pub fn with_rows(self, rows: usize) -> Tensor {
        assert!(
            rows <= self.rows,
            "view of {rows} rows on a tensor of {}",
            self.rows
        );
        Tensor { rows, ..self }
    }

    /// The same memory, reshaped; the element count must not grow.
    pub fn reshape(self, rows: usize, cols: usize) -> Tensor {
        assert!(
            rows * cols <= self.rows * self.cols,
            "reshape {}x{} to {rows}x{cols}",
            self.rows,
            self.cols
        );
        Tensor { rows, cols, ..self }
    }

    pub fn n_elements(&self) -> usize {
        self.rows * self.cols
    }

    /// Bytes the tensor's data takes (whole blocks for quantized types).
    pub fn n_bytes(&self) -> usize {
        self.dtype.row_bytes(self.cols).unwrap_or(0) * self.rows
    }
}

/// The ops of the contract, for [`Backend::supports`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    GetRows,
    SetRows,
    RmsNorm,
    Rope,
    MatMul,
    Attention,
    Add,
    Mul,
    Scale,
    SiluMul,
    GeluMul,
    Softmax,
    Argmax,
    Copy,
    Softcap,
    TopKMoe,
    MatMulId,
    MoeSum,
}

/// How RoPE pairs up the values of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])`: Llama as GGUF stores it.
    Normal,
    /// Halves `(x[i], x[i + n_dims/2])`: GPT-NeoX, Qwen, Gemma.
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub mode: RopeMode,
    pub n_heads: usize,
    pub head_dim: usize,
    /// Rotated values per head (`rope.dimension_count`); the rest pass through.
    pub n_dims: usize,
    pub freq_base: f32,
    /// Linear position scaling: positions are multiplied by this.
    pub freq_scale: f32,
    /// Per-pair frequency divisors (`rope_freqs.weight`, Llama 3.1; Phi-3's
    /// LongRoPE factors), an F32 tensor of `n_dims / 2` values.
    pub freq_factors: Option<Tensor>,
    /// Multiplies the cosines and sines (ggml's `attn_factor`: LongRoPE's
    /// magnitude correction, `rope.scaling.attn_factor`); 1 for plain RoPE.
    pub attn_factor: f32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q·k` before the softmax, usually `1/sqrt(head_dim)`.
    pub scale: f32,
    /// Rows of the KV cache that belong to one sequence slot.
    pub ctx: usize,
    /// Attend only to the last `window` positions (sliding-window layers).
    pub window: Option<usize>,
    /// Gemma 2 style `softcap * tanh(s / softcap)` on the scores.
    pub softcap: Option<f32>,
    /// The most keys a query row of the call attends to (the largest
    /// position + 1), known to the host: a hint for kernels that share
    /// long rows of keys out; 0 when not known. Results do not depend
    /// on it.
    pub keys: usize,
    /// How many of the call's first rows are decode rows, each the only
    /// row of its sequence in the call (a server step's generating
    /// sequences, which come first), known to the host: kernels may
    /// attend to those rows one at a time, as to a decode step of one
    /// row, whose bits they then give; 0 when not known.
    pub decode_rows: usize,
}

impl AttentionParams {
    /// Grouped-query attention with the usual `1/sqrt(head_dim)` scale, no
    /// window and no softcap.
    pub fn new(n_heads: usize, n_kv_heads: usize, head_dim: usize, ctx: usize) -> Self {
        Self {
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            ctx,
            window: None,
            softcap: None,
            keys: 0,
            decode_rows: 0,
        }
    }
}

/// How [`Backend::topk_moe`] turns router logits into expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoeGating {
    /// Softmax over every expert, then the top k (Qwen 3 MoE, Mixtral).
    Softmax,
    /// The top k logits, then a softmax over those (gpt-oss).
    SoftmaxWeight,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeParams {
    /// Experts each token uses.
    pub k: usize,
    pub gating: MoeGating,
    /// Divide the chosen weights by their sum (`expert_weights_norm`).
    pub normalize: bool,
}

/// What a backend is and can do.
#[derive(Clone, Debug, Default)]
pub struct Caps {
    pub is_gpu: bool,
    /// Host and device share memory: weights need no staging copy.
    pub unified_memory: bool,
    /// Largest single tensor, in bytes.
    pub max_tensor_bytes: u64,
}

/// Work counters, for `--verbose` and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub submissions: u64,
    pub dispatches: u64,
}

/// Copies a layer split made into one device at its boundaries (a device
/// reading activations another device wrote).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Copies {
    pub count: u64,
    pub bytes: u64,
    /// Host time of the copies, where they are timed alone
    /// (`split::SplitOptions::time_copies`); 0 otherwise.
    pub seconds: f64,
}

/// One device's share of a backend's work (`--verbose`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceStats {
    pub name: String,
    pub stats: Stats,
    /// Copies into this device from the others of a split.
    pub copies_in: Copies,
}

/// Device time spent in one kernel so far, from timestamp queries (the
/// GPU backend with `GpuOptions::profile`; `smelt bench --perf`).
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub kernel: String,
    pub calls: u64,
    pub seconds: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{backend} does not support {op:?} on {dtype}")]
    Unsupported {
        backend: String,
        op: Op,
        dtype: GgmlType,
    },
    #[error("shape mismatch in {op:?}: {detail}")]
    Shape { op: Op, detail: String },
    #[error("{what} needs {bytes} bytes; the device allows {limit}")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    #[error("out of device memory allocating {what} ({bytes} bytes)")]
    OutOfMemory { what: String, bytes: u64 },
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// The backend contract. See the module docs for shapes and recording.
///
/// Unless an op says otherwise, inputs and outputs are F32 and outputs may
/// not alias inputs.
pub trait Backend: Send {
    fn name(&self) -> String;

    fn caps(&self) -> Caps;

    /// Whether `op` runs with `dtype` as its type-specific input (the weight
    /// of a matmul, the table of `get_rows`, the cache of `attention`).
    fn supports(&self, op: Op, dtype: GgmlType) -> bool;

    // ---- memory ----

    /// A zero-filled tensor.
    fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor>;

    /// A zero-filled tensor for values that live within one forward
    /// (activations): each forward writes what it reads of it first, and
    /// the host never reads it. A backend that records a forward may leave
    /// unwritten an op's output there that no later op of the forward
    /// reads (the GPU's fused gate, up and GLU keeps only the GLU's). This
    /// default is [`Backend::alloc`].
    fn alloc_scratch(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        self.alloc(dtype, rows, cols)
    }

    /// A zero-filled tensor that belongs to layer `layer` (its KV cache):
    /// a backend that spreads layers over devices keeps it with the layer.
    /// This default is [`Backend::alloc`].
    fn alloc_in_layer(
        &mut self,
        layer: usize,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Result<Tensor> {
        let _ = layer;
        self.alloc(dtype, rows, cols)
    }

    /// A weight tensor from bytes in its GGUF layout. Backends that can use
    /// host memory directly keep `data` (zero copy); others upload it once.
    fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor>;

    /// Weights of one input that [`Backend::matmuls`] takes together (Q,
    /// K, V; gate, up), each as [`Backend::load_weight`] takes it: a backend
    /// may place them side by side in memory. Each is a tensor of its own,
    /// as if loaded apart; this default loads them one by one.
    fn load_joined(&mut self, ws: &[WeightInput]) -> Result<Vec<Tensor>> {
        ws.iter()
            .map(|w| self.load_weight(&w.name, w.dtype, w.rows, w.cols, w.data.clone()))
            .collect()
    }

    /// Host→device copy of `bytes` into the start of `t`. On a recording
    /// backend it is ordered before every op recorded after it.
    fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()>;

    /// Device→host copy of `t`'s bytes. Submits everything recorded and
    /// waits: the one sync point of a step.
    fn read(&mut self, t: Tensor, out: &mut [u8]) -> Result<()>;

    /// [`Backend::read`] of several tensors, their bytes one after another
    /// in `out` (whose length is their sum): a result kept in pieces, each
    /// under the largest tensor ([`Caps::max_tensor_bytes`]), read back
    /// with one sync. This default reads them one by one.
    fn read_all(&mut self, ts: &[Tensor], out: &mut [u8]) -> Result<()> {
        let total: usize = ts.iter().map(Tensor::n_bytes).sum();
        if total != out.len() {
            return Err(BackendError::Other(format!(
                "read of {total} bytes into {} bytes",
                out.len()
            )));
        }
        let mut rest = out;
        for &t in ts {
            let (part, tail) = rest.split_at_mut(t.n_bytes());
            self.read(t, part)?;
            rest = tail;
        }
        Ok(())
    }

    /// Submits everything recorded and waits for it.
    fn synchronize(&mut self) -> Result<()>;

    fn stats(&self) -> Stats {
        Stats::default()
    }

    /// The work per device: one entry, this backend, unless it spreads
    /// over several devices (a layer split).
    fn device_stats(&self) -> Vec<DeviceStats> {
        vec![DeviceStats {
            name: self.name(),
            stats: self.stats(),
            copies_in: Copies::default(),
        }]
    }

    /// Device time per kernel so far, where the backend measures it.
    fn op_times(&self) -> Vec<OpTime> {
        Vec::new()
    }

    // ---- ops ----

    /// `out[i] = table[ids[i]]`, dequantized to F32. `table` is any supported
    /// type, `ids` is I32.
    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()>;

    /// `dst[ids[i]] = src[i]`, converted to `dst`'s type (F32 or F16): the
    /// KV-cache write.
    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()>;

    /// Each row divided by its root mean square, then times `weight` (one
    /// row of `cols`) when given.
    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()>;

    /// Rotary position embedding of each head of each row; `pos` (I32, one
    /// per row) gives the positions. `x` and `out` may be the same tensor.
    fn rope(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()>;

    /// `out = x · wᵀ`: `w` is `m × k` in any supported type, `x` is `n × k`,
    /// `out` is `n × m`.
    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()>;

    /// `outs[i] = x · ws[i]ᵀ`: matmuls of one input, which a backend may run
    /// as one job (the CPU quantizes `x` once and shares one pool job out).
    /// The same results as [`Backend::matmul`] on each pair, which is what
    /// this default does.
    fn matmuls(&mut self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Result<()> {
        for (&w, &out) in ws.iter().zip(outs) {
            self.matmul(w, x, out)?;
        }
        Ok(())
    }

    /// Causal, grouped-query attention over the KV cache.
    ///
    /// `q` is `n × (n_heads·head_dim)`; the caches are `(slots·ctx) ×
    /// (n_kv_heads·head_dim)` in F32 or F16. Query row `i` belongs to slot
    /// `seq[i]` at position `pos[i]` and attends to cache rows
    /// `seq[i]·ctx + j` for `j ≤ pos[i]` (and within the window). The
    /// caller writes this step's keys and values with `set_rows` first.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        pos: Tensor,
        seq: Tensor,
        p: &AttentionParams,
        out: Tensor,
    ) -> Result<()>;

    /// `out = a + b`; `b` may be a single row, broadcast over `a`'s rows.
    /// `out` may be `a`.
    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()>;

    /// `out = a * b` elementwise; `b` may be a single row, broadcast. `out`
    /// may be `a`.
    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()>;

    /// `out = x * s`. `out` may be `x`.
    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()>;

    /// `out = silu(gate) * up`, SwiGLU's gate.
    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()>;

    /// `out = gelu(gate) * up` (tanh approximation), GeGLU's gate.
    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()>;

    /// Softmax of each row.
    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()>;

    /// Index of the largest value of each row (the first on ties), into an
    /// I32 tensor of `rows` values.
    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()>;

    /// Copies `src` into `dst` of the same shape, converting between F32 and
    /// F16.
    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()>;

    // ---- optional ops: `supports` says whether a backend has them ----

    /// `out = cap · tanh(x / cap)` (Gemma 2's final-logit soft-capping).
    /// `out` may be `x`.
    fn softcap(&mut self, x: Tensor, cap: f32, out: Tensor) -> Result<()> {
        let _ = (x, cap, out);
        Err(self.unsupported(Op::Softcap, GgmlType::F32))
    }

    /// Mixture-of-experts routing: from router `logits` (`n × n_expert`),
    /// each row's `p.k` experts, best first, into `ids` (I32, `n × k`), and
    /// their weights into `weights` (`n × k`), as [`MoeParams`] says.
    fn topk_moe(
        &mut self,
        logits: Tensor,
        p: &MoeParams,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<()> {
        let _ = (logits, p, ids, weights);
        Err(self.unsupported(Op::TopKMoe, GgmlType::F32))
    }

    /// Per-expert matmuls (ggml's `mul_mat_id`): `w` stacks the experts'
    /// `m × k` weights, `(n_expert·m) × k`; `ids` (I32, `n × K`) names each
    /// row's experts. `out` row `t·K + j` is `x_row · w[ids[t, j]]ᵀ`, where
    /// `x_row` is row `t` of `x` when `x` has `n` rows (every expert reads
    /// the token) or row `t·K + j` when it has `n·K`. `out` is `(n·K) × m`.
    fn matmul_id(&mut self, w: Tensor, x: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        let _ = (x, ids, out);
        Err(self.unsupported(Op::MatMulId, w.dtype))
    }

    /// `out[t] = Σ_j weights[t, j] · experts[t·K + j]`, in order of `j`:
    /// the experts' outputs (`(n·K) × E`) combined by their weights (`n ×
    /// K`) into `out` (`n × E`).
    fn moe_sum(&mut self, experts: Tensor, weights: Tensor, out: Tensor) -> Result<()> {
        let _ = (experts, weights, out);
        Err(self.unsupported(Op::MoeSum, GgmlType::F32))
    }

    /// The error for an op this backend does not have.
    fn unsupported(&self, op: Op, dtype: GgmlType) -> BackendError {
        BackendError::Unsupported {
            backend: self.name(),
            op,
            dtype,
        }
    }
}

/// Weight bytes in GGUF layout, borrowed from the model's memory map without
/// a copy.
pub type WeightData = crate::gguf::TensorBytes;

/// A weight as [`Backend::load_joined`] takes it: what
/// [`Backend::load_weight`] takes, in one value.
pub struct WeightInput {
    pub name: String,
    pub dtype: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: WeightData,
}

/// Convenience reads on top of the contract.
pub trait BackendExt: Backend {
    /// Reads an F32 tensor.
    fn read_f32(&mut self, t: Tensor) -> Result<Vec<f32>> {
        let mut bytes = vec![0u8; t.n_elements() * 4];
        self.read(t, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Reads an I32 tensor.
    fn read_i32(&mut self, t: Tensor) -> Result<Vec<i32>> {
        let mut bytes = vec![0u8; t.n_elements() * 4];
        self.read(t, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn write_f32(&mut self, t: Tensor, values: &[f32]) -> Result<()> {
        self.write(t, bytemuck::cast_slice(values))
    }

    fn write_i32(&mut self, t: Tensor, values: &[i32]) -> Result<()> {
        self.write(t, bytemuck::cast_slice(values))
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}
