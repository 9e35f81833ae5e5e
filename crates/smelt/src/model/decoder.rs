//! The decoder every architecture runs, written once against the backend
//! contract; the config says which parts a model has (see `archs.rs` and
//! the blocks in `blocks.rs`).
//!
//! ```text
//! x = token_embd[ids]  (· embd_scale: Gemma)
//! per layer:
//!   a = attention(x)                              (blocks::attention)
//!   x += a, or rms_norm(a) · post_attention_norm  (post norms: Gemma)
//!   f = glu(x) or moe(x)                          (blocks::glu, blocks::moe)
//!   x += f, or rms_norm(f) · post_ffw_norm
//! h = rms_norm(x) · output_norm                 (Output::Hidden stops here)
//! logits = h · Woutputᵀ (+ output bias)  (output.rs: in pieces)
//!          (then cap · tanh(logits / cap): final soft-capping)
//! ```
//!
//! Only the rows whose logits are wanted (llama.cpp's `inp_out_ids`) go on
//! after the last layer's attention: they are picked out of the residual
//! there, so the last FFN and the output projection skip every other row.
//!
//! Legend: `B` rows per step (at most `n_batch`), `O` output rows, `E`
//! `n_embd`, `F` `n_ff`, `H`/`Hkv` query/KV heads of `hd` values, `V`
//! vocab, `X` experts, `K` used per token, `Fx` an expert's `n_ff`.

use super::blocks::{self, Attention, AttentionLayer, Glu, Moe, Step};
use super::loader::Loader;
use super::output::Logits;
use super::{Config, ModelError, kv_cache::KvCache};
use crate::backend::{Backend, Op, Tensor};
use crate::quant::GgmlType;

/// A layer's FFN.
pub enum Ffn {
    Glu(Glu),
    Moe(Moe),
}

pub struct Layer {
    pub attn: Attention,
    /// 1 × E, F32: `post_attention_norm`, `post_ffw_norm` (post norms).
    pub post_norms: Option<[Tensor; 2]>,
    pub ffn: Ffn,
}

pub struct Weights {
    pub token_embd: Tensor,  // V × E
    pub output_norm: Tensor, // 1 × E, F32
    /// V × E: `output.weight`, or `token_embd` when the file ties them.
    pub output: Tensor,
    pub output_bias: Option<Tensor>, // 1 × V
    /// Per-pair RoPE divisors, `n_rot / 2` F32 values: Llama 3.1's
    /// `rope_freqs`, or Phi-3's LongRoPE `rope_factors_long` and
    /// `rope_factors_short`, chosen by the session's context.
    pub rope_freqs: Option<Tensor>,
    pub rope_long_short: Option<[Tensor; 2]>,
    pub layers: Vec<Layer>,
}

impl Weights {
    pub fn load(c: &Config, l: &mut Loader) -> Result<Self, ModelError> {
        let (e, v) = (c.n_embd, c.n_vocab);
        let token_embd = l.tensor("token_embd.weight", v, e, Op::GetRows)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for il in 0..c.n_layer {
            let name = |n: &str| format!("blk.{il}.{n}");
            let attn = Attention::load(c, l, il, "attn_norm.weight")?;
            let ffn_norm = "ffn_norm.weight";
            let ffn = match &c.moe {
                Some(moe) => Ffn::Moe(Moe::load(c, moe, l, il, ffn_norm)?),
                None => Ffn::Glu(Glu::load(c, l, il, ffn_norm)?),
            };
            let post_norms = if c.post_norms {
                let mut norm = |n: &str| l.tensor(&name(n), 1, e, Op::RmsNorm);
                Some([
                    norm("post_attention_norm.weight")?,
                    norm("post_ffw_norm.weight")?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                attn,
                post_norms,
                ffn,
            });
        }
        let output_norm = l.tensor("output_norm.weight", 1, e, Op::RmsNorm)?;
        let output = l.output(token_embd)?;
        let output_bias = l.optional("output.bias", 1, v, Op::Add)?;
        let half = c.n_rot / 2;
        let rope_freqs = l.optional("rope_freqs.weight", 1, half, Op::Rope)?;
        let long = l.optional("rope_factors_long.weight", 1, half, Op::Rope)?;
        let short = l.optional("rope_factors_short.weight", 1, half, Op::Rope)?;
        let rope_long_short = match (long, short) {
            (Some(long), Some(short)) => Some([long, short]),
            (None, None) => None,
            _ => {
                return Err(ModelError::MissingTensor {
                    name: "rope_factors_long.weight and rope_factors_short.weight (one without the other)".into(),
                });
            }
        };
        Ok(Self {
            token_embd,
            output_norm,
            output,
            output_bias,
            rope_freqs,
            rope_long_short,
            layers,
        })
    }

    /// The RoPE factors for a context of `n_ctx` positions: llama.cpp takes
    /// the long factors where the context exceeds the original one.
    fn rope_factors(&self, c: &Config, n_ctx: usize) -> Option<Tensor> {
        match self.rope_long_short {
            Some([long, _]) if n_ctx > c.n_ctx_orig => Some(long),
            Some([_, short]) => Some(short),
            None => self.rope_freqs,
        }
    }
}

/// Activation buffers, allocated once per session for `B = n_batch` rows
/// and `O = n_outputs` output rows; each step uses views of its first rows.
/// Those only the forward reads are scratch (`Backend::alloc_scratch`):
/// the host reads `h` (hidden states) and the logits.
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
    pub v: Tensor,       // B × (Hkv·hd)
    pub attn: Tensor,    // B × (H·hd)
    pub proj: Tensor,    // B × E: attention and FFN outputs
    pub gate: Tensor,    // B × F
    pub up: Tensor,      // B × F
    pub act: Tensor,     // B × F: act(gate) · up
    pub experts: Option<ExpertActivations>,
    pub x_out: Tensor,  // O × E: the residual of the output rows
    pub logits: Logits, // O × V, in pieces that fit the backend
}

/// The mixture of experts' buffers.
pub struct ExpertActivations {
    pub logits: Tensor,  // B × X: the router's
    pub ids: Tensor,     // B × K, I32: each row's experts
    pub weights: Tensor, // B × K
    pub gate: Tensor,    // (B·K) × Fx
    pub up: Tensor,      // (B·K) × Fx
    pub act: Tensor,     // (B·K) × Fx
    pub down: Tensor,    // (B·K) × E
}

impl Activations {
    pub fn new(
        c: &Config,
        b: &mut dyn Backend,
        n_batch: usize,
        n_outputs: usize,
    ) -> Result<Self, ModelError> {
        let (i32_, f32_) = (GgmlType::I32, GgmlType::F32);
        let experts = match &c.moe {
            Some(moe) => {
                let (x, k, f) = (moe.n_expert, moe.n_expert_used, moe.n_ff_exp);
                let bk = n_batch
                    .checked_mul(k)
                    .ok_or_else(|| ModelError::Param("expert rows overflow".into()))?;
                Some(ExpertActivations {
                    logits: b.alloc_scratch(f32_, n_batch, x)?,
                    ids: b.alloc_scratch(i32_, n_batch, k)?,
                    weights: b.alloc_scratch(f32_, n_batch, k)?,
                    gate: b.alloc_scratch(f32_, bk, f)?,
                    up: b.alloc_scratch(f32_, bk, f)?,
                    act: b.alloc_scratch(f32_, bk, f)?,
                    down: b.alloc_scratch(f32_, bk, c.n_embd)?,
                })
            }
            None => None,
        };
        // A MoE model has no dense FFN; its buffers keep one value.
        let f = if c.moe.is_some() { 1 } else { c.n_ff };
        Ok(Self {
            tokens: b.alloc(i32_, 1, n_batch)?,
            pos: b.alloc(i32_, 1, n_batch)?,
            seq: b.alloc(i32_, 1, n_batch)?,
            kv_rows: b.alloc(i32_, 1, n_batch)?,
            out_ids: b.alloc(i32_, 1, n_outputs)?,
            x: b.alloc(f32_, n_batch, c.n_embd)?,
            h: b.alloc(f32_, n_batch, c.n_embd)?,
            q: b.alloc_scratch(f32_, n_batch, c.q_dim())?,
            k: b.alloc_scratch(f32_, n_batch, c.kv_dim())?,
            v: b.alloc_scratch(f32_, n_batch, c.kv_dim())?,
            attn: b.alloc_scratch(f32_, n_batch, c.q_dim())?,
            proj: b.alloc_scratch(f32_, n_batch, c.n_embd)?,
            gate: b.alloc_scratch(f32_, n_batch, f)?,
            up: b.alloc_scratch(f32_, n_batch, f)?,
            act: b.alloc_scratch(f32_, n_batch, f)?,
            experts,
            x_out: b.alloc(f32_, n_outputs, c.n_embd)?,
            logits: Logits::new(b, n_outputs, c.n_embd, c.n_vocab)?,
        })
    }
}

/// What a forward pass leaves for the host to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The logits of `rows` rows, whose ids are in `a.out_ids`, into
    /// `a.logits` (`rows × V`); with 0 rows the pass only fills the cache.
    Logits { rows: usize },
    /// Every row's final hidden state, after the output norm (llama.cpp's
    /// `embd`), into `a.h` (`B × E`): what embeddings are pooled from.
    Hidden,
}

/// A step's rows: how many, the most keys one of them attends to (its
/// position + 1), and how many of the first are decode rows
/// (`AttentionParams::decode_rows`).
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    pub n: usize,
    pub keys: usize,
    pub decode_rows: usize,
}

/// One step of `rows`, whose ids, positions, slots and cache rows are
/// already written to `a`; records what `out` asks for.
pub fn forward(
    b: &mut dyn Backend,
    c: &Config,
    w: &Weights,
    cache: &KvCache,
    a: &Activations,
    rows: Rows,
    out: Output,
) -> Result<(), ModelError> {
    let n = rows.n;
    let n_out = match out {
        Output::Logits { rows } => rows,
        Output::Hidden => n,
    };
    let s = Step::new(c, a, cache, rows, out);
    let factors = w.rope_factors(c, cache.n_ctx);
    let x = s.rows(a.x);
    b.get_rows(w.token_embd, s.tokens, x)?;
    if let Some(scale) = c.embd_scale {
        b.scale(x, scale, x)?;
    }
    for (il, l) in w.layers.iter().enumerate() {
        let layer = AttentionLayer::new(c, il, factors, cache.n_ctx);
        let Some(proj) = blocks::attention(b, &s, &l.attn, &layer, x)? else {
            // Only the cache was wanted of this step.
            return Ok(());
        };
        residual(b, c, s.rows(a.h), l.post_norms.map(|p| p[0]), x, proj)?;

        // From here on the last layer works on the output rows only.
        let (cur, m) = if il + 1 == w.layers.len() && out != Output::Hidden {
            let xo = a.x_out.with_rows(n_out);
            b.get_rows(x, s.out_ids, xo)?;
            (xo, n_out)
        } else {
            (x, n)
        };
        let proj = match &l.ffn {
            Ffn::Glu(f) => blocks::glu(b, &s, m, f, cur)?,
            Ffn::Moe(f) => blocks::moe(b, &s, m, f, cur)?,
        };
        residual(
            b,
            c,
            a.h.with_rows(m),
            l.post_norms.map(|p| p[1]),
            cur,
            proj,
        )?;
    }
    let h = a.h.with_rows(n_out);
    if out == Output::Hidden {
        b.rms_norm(x, Some(w.output_norm), c.rms_eps, h)?;
        return Ok(());
    }
    b.rms_norm(a.x_out.with_rows(n_out), Some(w.output_norm), c.rms_eps, h)?;
    a.logits.project(b, w.output, h)?;
    // The bias and the cap are per logit: each piece gets them on its own.
    for logits in a.logits.views(n_out) {
        if let Some(bias) = w.output_bias {
            b.add(logits, bias, logits)?;
        }
        if let Some(cap) = c.final_softcap {
            b.softcap(logits, cap, logits)?;
        }
    }
    Ok(())
}

/// `x += proj`, through the post norm where the layer has one (into the
/// free buffer `h`).
fn residual(
    b: &mut dyn Backend,
    c: &Config,
    h: Tensor,
    post_norm: Option<Tensor>,
    x: Tensor,
    proj: Tensor,
) -> Result<(), ModelError> {
    match post_norm {
        Some(norm) => {
            b.rms_norm(proj, Some(norm), c.rms_eps, h)?;
            b.add(x, h, x)?;
        }
        None => {
            b.add(x, proj, x)?;
        }
    }
    Ok(())
}
