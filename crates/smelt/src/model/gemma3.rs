//! The Gemma 3 forward pass, written once against the backend contract, as
//! llama.cpp runs it (`llm_build_gemma3`).
//!
//! ```text
//! x = token_embd[ids] · sqrt(E)
//! per layer:
//!   h = rms_norm(x) · attn_norm
//!   q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ
//!   q = rope(rms_norm_per_head(q) · attn_q_norm) · attn_scale   (NeoX)
//!   k = rope(rms_norm_per_head(k) · attn_k_norm)
//!   cache[pos] = k, v
//!   x += rms_norm(attention(q, cache)·Woᵀ) · post_attention_norm
//!   h = rms_norm(x) · ffn_norm
//!   x += rms_norm((gelu(h·Wgateᵀ) * h·Wupᵀ)·Wdownᵀ) · post_ffw_norm  (GeGLU)
//! logits = rms_norm(x) · output_norm · token_embdᵀ                    (tied)
//! ```
//!
//! Most layers attend over a sliding window of the last `n_swa` positions
//! with their own RoPE base; every sixth is global (see
//! `Config::swa_layers`). The GGUF norm weights already hold Gemma's `1 +
//! w`, so every norm is a plain RMSNorm. There is no logit softcapping in
//! Gemma 3 with sliding windows.
//!
//! Like Llama, only the rows whose logits are wanted go on after the last
//! layer's attention. The loader and the activation buffers are Llama's.
//!
//! Legend: `B` rows per step, `O` output rows, `E` `n_embd`, `F` `n_ff`,
//! `H`/`Hkv` query/KV heads of `hd` values, `V` vocab.

use super::llama::{Activations, Loader};
use super::{Config, ModelError, kv_cache::KvCache};
use crate::backend::{AttentionParams, Backend, Op, RopeMode, RopeParams, Tensor};

pub struct Layer {
    pub attn_norm: Tensor,           // 1 × E, F32
    pub attn_q: Tensor,              // (H·hd) × E
    pub attn_k: Tensor,              // (Hkv·hd) × E
    pub attn_v: Tensor,              // (Hkv·hd) × E
    pub attn_q_norm: Tensor,         // 1 × hd, F32: per head
    pub attn_k_norm: Tensor,         // 1 × hd, F32: per head
    pub attn_output: Tensor,         // E × (H·hd)
    pub post_attention_norm: Tensor, // 1 × E, F32
    pub ffn_norm: Tensor,            // 1 × E, F32
    pub ffn_gate: Tensor,            // F × E
    pub ffn_up: Tensor,              // F × E
    pub ffn_down: Tensor,            // E × F
    pub post_ffw_norm: Tensor,       // 1 × E, F32
}

pub struct Weights {
    pub token_embd: Tensor,  // V × E
    pub output_norm: Tensor, // 1 × E, F32
    /// V × E: `token_embd` (Gemma ties them), or `output.weight` if present.
    pub output: Tensor,
    pub layers: Vec<Layer>,
}

impl Weights {
    pub fn load(c: &Config, l: &mut Loader) -> Result<Self, ModelError> {
        let (e, v, f, hd) = (c.n_embd, c.n_vocab, c.n_ff, c.head_dim);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let token_embd = l.tensor("token_embd.weight", v, e, Op::GetRows)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let mut t =
                |name: &str, rows, cols, op| l.tensor(&format!("blk.{i}.{name}"), rows, cols, op);
            layers.push(Layer {
                attn_norm: t("attn_norm.weight", 1, e, Op::RmsNorm)?,
                attn_q: t("attn_q.weight", qd, e, Op::MatMul)?,
                attn_k: t("attn_k.weight", kvd, e, Op::MatMul)?,
                attn_v: t("attn_v.weight", kvd, e, Op::MatMul)?,
                attn_q_norm: t("attn_q_norm.weight", 1, hd, Op::RmsNorm)?,
                attn_k_norm: t("attn_k_norm.weight", 1, hd, Op::RmsNorm)?,
                attn_output: t("attn_output.weight", e, qd, Op::MatMul)?,
                post_attention_norm: t("post_attention_norm.weight", 1, e, Op::RmsNorm)?,
                ffn_norm: t("ffn_norm.weight", 1, e, Op::RmsNorm)?,
                ffn_gate: t("ffn_gate.weight", f, e, Op::MatMul)?,
                ffn_up: t("ffn_up.weight", f, e, Op::MatMul)?,
                ffn_down: t("ffn_down.weight", e, f, Op::MatMul)?,
                post_ffw_norm: t("post_ffw_norm.weight", 1, e, Op::RmsNorm)?,
            });
        }
        let output_norm = l.tensor("output_norm.weight", 1, e, Op::RmsNorm)?;
        let output = l.output(token_embd)?;
        Ok(Self {
            token_embd,
            output_norm,
            output,
            layers,
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
    let hd = c.head_dim;
    let rope = |n_heads, swa: bool| RopeParams {
        mode: RopeMode::Neox,
        n_heads,
        head_dim: hd,
        n_dims: c.n_rot,
        freq_base: if swa {
            c.rope_freq_base_swa
        } else {
            c.rope_freq_base
        },
        freq_scale: if swa {
            c.rope_freq_scale_swa
        } else {
            c.rope_freq_scale
        },
        freq_factors: None,
    };
    // The query is scaled before the scores, as llama.cpp does (it rounds
    // the scaled query to the cache type), so the scores are not scaled.
    let attn = |swa: bool| AttentionParams {
        scale: 1.0,
        window: swa.then_some(c.n_swa),
        ..AttentionParams::new(c.n_head, c.n_head_kv, hd, cache.n_ctx)
    };

    let x = rows(a.x);
    b.get_rows(w.token_embd, tokens, x)?;
    b.scale(x, (c.n_embd as f32).sqrt(), x)?;
    for (il, l) in w.layers.iter().enumerate() {
        let last = il + 1 == w.layers.len();
        let swa = c.swa_layers[il];
        let (h, q, k, v) = (rows(a.h), rows(a.q), rows(a.k), rows(a.v));
        b.rms_norm(x, Some(l.attn_norm), c.rms_eps, h)?;
        b.matmul(l.attn_q, h, q)?;
        b.matmul(l.attn_k, h, k)?;
        b.matmul(l.attn_v, h, v)?;
        // Per-head norms: each head is a row of `hd` values. `attn` is
        // free until the attention writes it, so it holds the normed heads
        // that RoPE then writes back.
        for (t, norm, n_heads) in [
            (q, l.attn_q_norm, c.n_head),
            (k, l.attn_k_norm, c.n_head_kv),
        ] {
            let normed = rows(a.attn).reshape(n, n_heads * hd);
            b.rms_norm(
                t.reshape(n * n_heads, hd),
                Some(norm),
                c.rms_eps,
                normed.reshape(n * n_heads, hd),
            )?;
            b.rope(normed, pos, &rope(n_heads, swa), t)?;
        }
        b.scale(q, c.attn_scale, q)?;
        b.set_rows(k, kv_rows, cache.k[il])?;
        b.set_rows(v, kv_rows, cache.v[il])?;
        if last && n_out == 0 {
            // Only the cache was wanted of this step.
            return Ok(());
        }
        b.attention(
            q,
            cache.k[il],
            cache.v[il],
            pos,
            seq,
            &attn(swa),
            rows(a.attn),
        )?;
        b.matmul(l.attn_output, rows(a.attn), rows(a.proj))?;
        b.rms_norm(rows(a.proj), Some(l.post_attention_norm), c.rms_eps, h)?;
        b.add(x, h, x)?;

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
        b.matmul(l.ffn_gate, h, gate)?;
        b.matmul(l.ffn_up, h, up)?;
        b.gelu_mul(gate, up, act)?;
        b.matmul(l.ffn_down, act, proj)?;
        b.rms_norm(proj, Some(l.post_ffw_norm), c.rms_eps, h)?;
        b.add(cur, h, cur)?;
    }
    let (xo, h) = (a.x_out.with_rows(n_out), a.h.with_rows(n_out));
    b.rms_norm(xo, Some(w.output_norm), c.rms_eps, h)?;
    a.logits.project(b, w.output, h)
}
