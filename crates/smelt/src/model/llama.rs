//! The Llama forward pass, written once against the backend contract.
//!
//! Per layer (pre-norm residual blocks):
//!
//! ```text
//! h = rms_norm(x) · attn_norm
//! q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q), rope(k)      (normal mode)
//! cache[pos] = k, v;  x += attention(q, cache)·Woᵀ      (causal GQA)
//! h = rms_norm(x) · ffn_norm
//! x += (silu(h·Wgateᵀ) * h·Wupᵀ)·Wdownᵀ                  (SwiGLU)
//! ```
//!
//! then `logits = rms_norm(x) · output_norm · Woutputᵀ` for the rows whose
//! logits are wanted only (llama.cpp's `inp_out_ids`): they are picked out
//! of the residual after the last layer's attention, so the last FFN and the
//! output projection skip every other row.
//!
//! Legend: `B` rows per step (at most `n_batch`), `O` output rows, `E`
//! `n_embd`, `F` `n_ff`, `H`/`Hkv` query/KV heads of `hd` values, `V` vocab.

use super::output::Logits;
use super::{Config, ModelError, kv_cache::KvCache};
use crate::backend::{AttentionParams, Backend, Op, RopeMode, RopeParams, Tensor, WeightInput};
use crate::gguf::GgufFile;
use crate::quant::GgmlType;

pub struct Layer {
    pub attn_norm: Tensor,   // 1 × E, F32
    pub attn_q: Tensor,      // (H·hd) × E
    pub attn_k: Tensor,      // (Hkv·hd) × E
    pub attn_v: Tensor,      // (Hkv·hd) × E
    pub attn_output: Tensor, // E × (H·hd)
    /// Optional biases (some Llama-architecture models carry them), 1 × rows.
    pub bias: [Option<Tensor>; 4], // q, k, v, output
    pub ffn_norm: Tensor,    // 1 × E, F32
    pub ffn_gate: Tensor,    // F × E
    pub ffn_up: Tensor,      // F × E
    pub ffn_down: Tensor,    // E × F
}

pub struct Weights {
    pub token_embd: Tensor,  // V × E
    pub output_norm: Tensor, // 1 × E, F32
    /// V × E: `output.weight`, or `token_embd` when the file ties them.
    pub output: Tensor,
    /// Llama 3.1's per-pair RoPE divisors, `n_rot / 2` F32 values.
    pub rope_freqs: Option<Tensor>,
    pub layers: Vec<Layer>,
}

/// Loads weights by GGUF name, checking each one's shape and that the
/// backend can run it; `progress(done, total)` counts bytes.
pub struct Loader<'a> {
    pub file: &'a GgufFile,
    pub backend: &'a mut dyn Backend,
    pub progress: &'a mut dyn FnMut(u64, u64),
    pub done: u64,
    pub total: u64,
}

impl Loader<'_> {
    /// A required tensor of `rows × cols`, used as `op`'s typed input.
    pub fn tensor(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        op: Op,
    ) -> Result<Tensor, ModelError> {
        self.optional(name, rows, cols, op)?
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })
    }

    pub fn optional(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        op: Op,
    ) -> Result<Option<Tensor>, ModelError> {
        let Some(w) = self.input(name, rows, cols, op)? else {
            return Ok(None);
        };
        let bytes = w.data.len() as u64;
        let t = self
            .backend
            .load_weight(&w.name, w.dtype, rows, cols, w.data)?;
        self.loaded(bytes);
        Ok(Some(t))
    }

    /// Weights of one input, `(name, rows)` of `cols` each, that
    /// [`Backend::matmuls`] takes together (Q, K, V; gate, up): loaded
    /// through [`Backend::load_joined`], which may place them side by side.
    pub fn joined<const N: usize>(
        &mut self,
        names: [(&str, usize); N],
        cols: usize,
    ) -> Result<[Tensor; N], ModelError> {
        let mut ws = Vec::with_capacity(N);
        for (name, rows) in names {
            let w = self
                .input(name, rows, cols, Op::MatMul)?
                .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
            ws.push(w);
        }
        let ts = self.backend.load_joined(&ws)?;
        self.loaded(ws.iter().map(|w| w.data.len() as u64).sum());
        ts.try_into().map_err(|ts: Vec<Tensor>| {
            ModelError::Param(format!(
                "the {} backend loaded {} of {N} joined weights",
                self.backend.name(),
                ts.len()
            ))
        })
    }

    /// The file's tensor `name` as a weight to load, having checked its
    /// shape (`rows × cols`) and that the backend runs `op` on its type;
    /// `None` where the file has no such tensor.
    fn input(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        op: Op,
    ) -> Result<Option<WeightInput>, ModelError> {
        let Some(info) = self.file.tensor_info(name) else {
            return Ok(None);
        };
        // ggml order: dims[0] is the row length. Trailing 1s are allowed.
        let dims: Vec<u64> = info.dims.to_vec();
        let shape_ok = dims.first() == Some(&(cols as u64))
            && dims.get(1).copied().unwrap_or(1) == rows as u64
            && dims.iter().skip(2).all(|&d| d == 1);
        if !shape_ok {
            return Err(ModelError::TensorShape {
                name: name.into(),
                expected: vec![cols as u64, rows as u64],
                found: dims,
            });
        }
        // Norms and factors are plain values the element-wise ops read.
        let plain = matches!(op, Op::RmsNorm | Op::Rope | Op::Add);
        let ok = if plain {
            info.dtype == GgmlType::F32
        } else {
            self.backend.supports(op, info.dtype)
        };
        if !ok {
            return Err(ModelError::UnsupportedType {
                name: name.into(),
                dtype: info.dtype,
                backend: self.backend.name(),
            });
        }
        Ok(Some(WeightInput {
            name: name.into(),
            dtype: info.dtype,
            rows,
            cols,
            data: self.file.tensor_bytes(name)?,
        }))
    }

    fn loaded(&mut self, bytes: u64) {
        self.done += bytes;
        (self.progress)(self.done, self.total);
    }
}

impl Loader<'_> {
    /// The output projection: `output.weight` (`V × E`), or `token_embd`
    /// when the file ties them.
    pub fn output(&mut self, token_embd: Tensor) -> Result<Tensor, ModelError> {
        let (v, e) = (token_embd.rows, token_embd.cols);
        match self.optional("output.weight", v, e, Op::MatMul)? {
            Some(o) => Ok(o),
            // Tied embeddings: the table must also work as a matmul weight.
            None if self.backend.supports(Op::MatMul, token_embd.dtype) => Ok(token_embd),
            None => Err(ModelError::UnsupportedType {
                name: "token_embd.weight (as the tied output)".into(),
                dtype: token_embd.dtype,
                backend: self.backend.name(),
            }),
        }
    }
}

impl Weights {
    pub fn load(c: &Config, l: &mut Loader) -> Result<Self, ModelError> {
        let (e, v, f) = (c.n_embd, c.n_vocab, c.n_ff);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let token_embd = l.tensor("token_embd.weight", v, e, Op::GetRows)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let name = |n: &str| format!("blk.{i}.{n}");
            let attn_norm = l.tensor(&name("attn_norm.weight"), 1, e, Op::RmsNorm)?;
            let [attn_q, attn_k, attn_v] = l.joined(
                [
                    (&name("attn_q.weight"), qd),
                    (&name("attn_k.weight"), kvd),
                    (&name("attn_v.weight"), kvd),
                ],
                e,
            )?;
            let attn_output = l.tensor(&name("attn_output.weight"), e, qd, Op::MatMul)?;
            let ffn_norm = l.tensor(&name("ffn_norm.weight"), 1, e, Op::RmsNorm)?;
            let [ffn_gate, ffn_up] = l.joined(
                [(&name("ffn_gate.weight"), f), (&name("ffn_up.weight"), f)],
                e,
            )?;
            let ffn_down = l.tensor(&name("ffn_down.weight"), e, f, Op::MatMul)?;
            let mut bias =
                |name: &str, cols| l.optional(&format!("blk.{i}.{name}.bias"), 1, cols, Op::Add);
            let bias = [
                bias("attn_q", qd)?,
                bias("attn_k", kvd)?,
                bias("attn_v", kvd)?,
                bias("attn_output", e)?,
            ];
            layers.push(Layer {
                attn_norm,
                attn_q,
                attn_k,
                attn_v,
                attn_output,
                bias,
                ffn_norm,
                ffn_gate,
                ffn_up,
                ffn_down,
            });
        }
        let output_norm = l.tensor("output_norm.weight", 1, e, Op::RmsNorm)?;
        let output = l.output(token_embd)?;
        let rope_freqs = l.optional("rope_freqs.weight", 1, c.n_rot / 2, Op::Rope)?;
        Ok(Self {
            token_embd,
            output_norm,
            output,
            rope_freqs,
            layers,
        })
    }
}

/// Activation buffers, allocated once per session for `B = n_batch` rows
/// and `O = n_outputs` output rows; each step uses views of its first rows.
/// Gemma 3 runs on the same buffers.
pub struct Activations {
    pub tokens: Tensor,  // 1 × B, I32
    pub pos: Tensor,     // 1 × B, I32
    pub seq: Tensor,     // 1 × B, I32
    pub kv_rows: Tensor, // 1 × B, I32: seq · n_ctx + pos
    pub out_ids: Tensor, // 1 × O, I32: rows whose logits are wanted
    pub x: Tensor,       // B × E: the residual stream
    pub h: Tensor,       // B × E: normed
    pub q: Tensor,       // B × (H·hd)
    pub k: Tensor,       // B × (Hkv·hd)
    pub k_rot: Tensor,   // B × (Hkv·hd): K rotated (not in place, see `forward`)
    pub v: Tensor,       // B × (Hkv·hd)
    pub attn: Tensor,    // B × (H·hd)
    pub proj: Tensor,    // B × E: attention and FFN outputs
    pub gate: Tensor,    // B × F
    pub up: Tensor,      // B × F
    pub act: Tensor,     // B × F: act(gate) · up
    pub x_out: Tensor,   // O × E: the residual of the output rows
    pub logits: Logits,  // O × V, in pieces that fit the backend
}

impl Activations {
    pub fn new(
        c: &Config,
        b: &mut dyn Backend,
        n_batch: usize,
        n_outputs: usize,
    ) -> Result<Self, ModelError> {
        let (i32_, f32_) = (GgmlType::I32, GgmlType::F32);
        Ok(Self {
            tokens: b.alloc(i32_, 1, n_batch)?,
            pos: b.alloc(i32_, 1, n_batch)?,
            seq: b.alloc(i32_, 1, n_batch)?,
            kv_rows: b.alloc(i32_, 1, n_batch)?,
            out_ids: b.alloc(i32_, 1, n_outputs)?,
            x: b.alloc(f32_, n_batch, c.n_embd)?,
            h: b.alloc(f32_, n_batch, c.n_embd)?,
            q: b.alloc(f32_, n_batch, c.q_dim())?,
            k: b.alloc(f32_, n_batch, c.kv_dim())?,
            k_rot: b.alloc(f32_, n_batch, c.kv_dim())?,
            v: b.alloc(f32_, n_batch, c.kv_dim())?,
            attn: b.alloc(f32_, n_batch, c.q_dim())?,
            proj: b.alloc(f32_, n_batch, c.n_embd)?,
            gate: b.alloc(f32_, n_batch, c.n_ff)?,
            up: b.alloc(f32_, n_batch, c.n_ff)?,
            act: b.alloc(f32_, n_batch, c.n_ff)?,
            x_out: b.alloc(f32_, n_outputs, c.n_embd)?,
            logits: Logits::new(b, n_outputs, c.n_embd, c.n_vocab)?,
        })
    }
}

/// One step of `n` rows, whose ids, positions, slots and cache rows are
/// already written to `a`; `n_out` rows' ids are in `a.out_ids`. Records the
/// logits into `a.logits` (`n_out × V`); with `n_out == 0` it only fills the
/// cache.
pub fn forward(
    b: &mut dyn Backend,
    c: &Config,
    w: &Weights,
    cache: &KvCache,
    a: &Activations,
    n: usize,
    n_out: usize,
) -> Result<(), ModelError> {
    let rows = |t: Tensor| t.with_rows(n);
    let ids = |t: Tensor, len: usize| t.reshape(1, len);
    let (tokens, pos, seq, kv_rows) = (
        ids(a.tokens, n),
        ids(a.pos, n),
        ids(a.seq, n),
        ids(a.kv_rows, n),
    );
    let rope = |n_heads| RopeParams {
        mode: RopeMode::Normal,
        n_heads,
        head_dim: c.head_dim,
        n_dims: c.n_rot,
        freq_base: c.rope_freq_base,
        freq_scale: c.rope_freq_scale,
        freq_factors: w.rope_freqs,
    };
    let (rope_q, rope_k) = (rope(c.n_head), rope(c.n_head_kv));
    let attn = AttentionParams::new(c.n_head, c.n_head_kv, c.head_dim, cache.n_ctx);

    let x = rows(a.x);
    b.get_rows(w.token_embd, tokens, x)?;
    for (il, l) in w.layers.iter().enumerate() {
        let last = il + 1 == w.layers.len();
        let (h, q, k, v) = (rows(a.h), rows(a.q), rows(a.k), rows(a.v));
        b.rms_norm(x, Some(l.attn_norm), c.rms_eps, h)?;
        b.matmuls(&[l.attn_q, l.attn_k, l.attn_v], h, &[q, k, v])?;
        for (bias, out) in [(l.bias[0], q), (l.bias[1], k), (l.bias[2], v)] {
            if let Some(bias) = bias {
                b.add(out, bias, out)?;
            }
        }
        // K rotated into its own buffer: a GPU decode attention that takes
        // in the ropes reads K from every head of a group.
        let k_rot = rows(a.k_rot);
        b.rope(q, pos, &rope_q, q)?;
        b.rope(k, pos, &rope_k, k_rot)?;
        b.set_rows(k_rot, kv_rows, cache.k[il])?;
        b.set_rows(v, kv_rows, cache.v[il])?;
        if last && n_out == 0 {
            // Only the cache was wanted of this step.
            return Ok(());
        }
        b.attention(q, cache.k[il], cache.v[il], pos, seq, &attn, rows(a.attn))?;
        b.matmul(l.attn_output, rows(a.attn), rows(a.proj))?;
        if let Some(bias) = l.bias[3] {
            b.add(rows(a.proj), bias, rows(a.proj))?;
        }
        b.add(x, rows(a.proj), x)?;
        b.discard(&[rows(a.proj)])?;

        // From here on the last layer works on the output rows only.
        let (cur, m) = if last {
            let xo = a.x_out.with_rows(n_out);
            b.get_rows(x, ids(a.out_ids, n_out), xo)?;
            (xo, n_out)
        } else {
            (x, n)
        };
        let (h, proj) = (a.h.with_rows(m), a.proj.with_rows(m));
        let (gate, up, act) = (a.gate.with_rows(m), a.up.with_rows(m), a.act.with_rows(m));
        b.rms_norm(cur, Some(l.ffn_norm), c.rms_eps, h)?;
        b.matmuls(&[l.ffn_gate, l.ffn_up], h, &[gate, up])?;
        b.silu_mul(gate, up, act)?;
        b.discard(&[gate, up])?;
        b.matmul(l.ffn_down, act, proj)?;
        b.add(cur, proj, cur)?;
        b.discard(&[proj])?;
    }
    let (xo, h) = (a.x_out.with_rows(n_out), a.h.with_rows(n_out));
    b.rms_norm(xo, Some(w.output_norm), c.rms_eps, h)?;
    a.logits.project(b, w.output, h)
}
