//! The blocks a decoder layer is made of, each with its weights, their
//! loading by GGUF name, and its forward pass against the backend
//! contract: self-attention, the gated FFN and the mixture-of-experts FFN.
//! Which of their optional parts a model has (biases, per-head norms,
//! fused tensors) is the file's, checked against its [`Config`].
//!
//! ```text
//! attention:  h = rms_norm(x) · attn_norm
//!             q, k, v = h·Wqᵀ (+ bq), h·Wkᵀ (+ bk), h·Wvᵀ (+ bv)
//!             q, k = rms_norm_per_head(q) · q_norm, ...        (head norms)
//!             q, k = rope(q), rope(k);  q *= scale             (scale_query)
//!             cache[pos] = k, v;  out = attention(q, cache)·Woᵀ (+ bo)
//! glu:        h = rms_norm(x) · ffn_norm
//!             out = (act(h·Wgateᵀ) * h·Wupᵀ)·Wdownᵀ
//! moe:        h = rms_norm(x) · ffn_norm;  ids, w = topk(h·Wrouterᵀ)
//!             out = Σ_j w_j · (act(h·Wgate[ids_j]ᵀ) * h·Wup[ids_j]ᵀ)·Wdown[ids_j]ᵀ
//! ```
//!
//! Legend: `B` rows per step, `E` `n_embd`, `F` `n_ff`, `H`/`Hkv` query/KV
//! heads of `hd` values, `X` experts, `K` of them per token, `Fx` an
//! expert's `n_ff`.

use super::ModelError;
use super::config::{Config, Glu as GluAct, Moe as MoeConfig};
use super::decoder::{Activations, Output, Rows};
use super::kv_cache::KvCache;
use super::loader::Loader;
use crate::backend::{AttentionParams, Backend, Op, RopeParams, Tensor};

/// One forward step: the model's config, activations and cache, `n` rows
/// and what is read of them, and the views of its index inputs (already
/// written to the activations).
pub struct Step<'a> {
    pub c: &'a Config,
    pub a: &'a Activations,
    pub cache: &'a KvCache,
    pub n: usize,
    /// The most keys a row attends to (`AttentionParams::keys`).
    pub keys: usize,
    /// The first rows that are decode rows (`AttentionParams::decode_rows`).
    pub decode_rows: usize,
    pub out: Output,
    pub tokens: Tensor,  // 1 × B, I32
    pub pos: Tensor,     // 1 × B, I32
    pub seq: Tensor,     // 1 × B, I32
    pub kv_rows: Tensor, // 1 × B, I32
    pub out_ids: Tensor, // 1 × O, I32
}

impl<'a> Step<'a> {
    pub fn new(
        c: &'a Config,
        a: &'a Activations,
        cache: &'a KvCache,
        rows: Rows,
        out: Output,
    ) -> Self {
        let n = rows.n;
        let ids = |t: Tensor, len: usize| t.reshape(1, len);
        let n_out = match out {
            Output::Logits { rows } => rows,
            Output::Hidden => 0,
        };
        Self {
            c,
            a,
            cache,
            n,
            keys: rows.keys,
            decode_rows: rows.decode_rows,
            out,
            tokens: ids(a.tokens, n),
            pos: ids(a.pos, n),
            seq: ids(a.seq, n),
            kv_rows: ids(a.kv_rows, n),
            out_ids: ids(a.out_ids, n_out),
        }
    }

    /// The step's first `n` rows of `t`.
    pub fn rows(&self, t: Tensor) -> Tensor {
        t.with_rows(self.n)
    }
}

/// One layer's self-attention weights.
pub struct Attention {
    pub norm: Tensor,   // 1 × E, F32
    pub q: Tensor,      // (H·hd) × E
    pub k: Tensor,      // (Hkv·hd) × E
    pub v: Tensor,      // (Hkv·hd) × E
    pub output: Tensor, // E × (H·hd)
    /// Biases of q, k, v and the output, 1 × rows, where the file has them.
    pub bias: [Option<Tensor>; 4],
    /// Per-head norms of q and k, 1 × hd each (`Config::head_norms`).
    pub head_norms: Option<[Tensor; 2]>,
}

impl Attention {
    /// Layer `il`'s attention weights: `attn_q`, `attn_k`, `attn_v` or one
    /// `attn_qkv`, their optional biases, `attn_output`, and the per-head
    /// norms where the config has them. `norm` names the input norm.
    pub fn load(c: &Config, l: &mut Loader, il: usize, norm: &str) -> Result<Self, ModelError> {
        let (e, hd, qd, kvd) = (c.n_embd, c.head_dim, c.q_dim(), c.kv_dim());
        let name = |n: &str| format!("blk.{il}.{n}");
        let norm = l.tensor(&name(norm), 1, e, Op::RmsNorm)?;
        let fused = name("attn_qkv.weight");
        let [q, k, v] = match l.split(&fused, [qd, kvd, kvd], e, Op::MatMul)? {
            Some(qkv) => qkv,
            None => l.joined(
                [
                    (&name("attn_q.weight"), qd),
                    (&name("attn_k.weight"), kvd),
                    (&name("attn_v.weight"), kvd),
                ],
                e,
            )?,
        };
        let [bq, bk, bv] = match l.split(&name("attn_qkv.bias"), [qd, kvd, kvd], 1, Op::Add)? {
            Some(b) => b.map(Some),
            None => [
                l.optional(&name("attn_q.bias"), 1, qd, Op::Add)?,
                l.optional(&name("attn_k.bias"), 1, kvd, Op::Add)?,
                l.optional(&name("attn_v.bias"), 1, kvd, Op::Add)?,
            ],
        };
        let output = l.tensor(&name("attn_output.weight"), e, qd, Op::MatMul)?;
        let bo = l.optional(&name("attn_output.bias"), 1, e, Op::Add)?;
        let head_norms = if c.head_norms {
            Some([
                l.tensor(&name("attn_q_norm.weight"), 1, hd, Op::RmsNorm)?,
                l.tensor(&name("attn_k_norm.weight"), 1, hd, Op::RmsNorm)?,
            ])
        } else {
            None
        };
        Ok(Self {
            norm,
            q,
            k,
            v,
            output,
            bias: [bq, bk, bv, bo],
            head_norms,
        })
    }
}

/// What differs between layers' attention: the sliding window and its RoPE.
pub struct AttentionLayer {
    pub il: usize,
    pub rope_q: RopeParams,
    pub rope_k: RopeParams,
    pub params: AttentionParams,
    /// Multiplies the rotated query (`Config::scale_query`).
    pub q_scale: Option<f32>,
}

impl AttentionLayer {
    /// Layer `il`'s settings, with the RoPE factors `freq_factors` (Llama
    /// 3.1's, Phi-3's) and a cache of `ctx` positions per slot.
    pub fn new(c: &Config, il: usize, freq_factors: Option<Tensor>, ctx: usize) -> Self {
        let swa = c.swa_layers[il];
        let rope = |n_heads| RopeParams {
            mode: c.rope_mode,
            n_heads,
            head_dim: c.head_dim,
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
            freq_factors,
            attn_factor: c.rope_attn_factor,
        };
        // The query is scaled before the scores where llama.cpp does so (it
        // rounds the scaled query to the cache type); the scores are then
        // not scaled.
        let (scale, q_scale) = if c.scale_query {
            (1.0, Some(c.attn_scale))
        } else {
            (c.attn_scale, None)
        };
        Self {
            il,
            rope_q: rope(c.n_head),
            rope_k: rope(c.n_head_kv),
            params: AttentionParams {
                scale,
                window: swa.then_some(c.n_swa),
                softcap: c.attn_softcap,
                ..AttentionParams::new(c.n_head, c.n_head_kv, c.head_dim, ctx)
            },
            q_scale,
        }
    }
}

/// Self-attention of the step's rows of `x` (`B × E`): the projection, not
/// yet added to `x`, in `a.proj`. After writing this step's keys and
/// values to the cache it returns `None` where that was all the step
/// wanted (the last layer of a step without outputs).
pub fn attention(
    b: &mut dyn Backend,
    s: &Step,
    w: &Attention,
    l: &AttentionLayer,
    x: Tensor,
) -> Result<Option<Tensor>, ModelError> {
    let (c, a, cache) = (s.c, s.a, s.cache);
    let (il, n) = (l.il, s.n);
    let (h, q, k, v) = (s.rows(a.h), s.rows(a.q), s.rows(a.k), s.rows(a.v));
    b.rms_norm(x, Some(w.norm), c.rms_eps, h)?;
    b.matmuls(&[w.q, w.k, w.v], h, &[q, k, v])?;
    for (bias, out) in [(w.bias[0], q), (w.bias[1], k), (w.bias[2], v)] {
        if let Some(bias) = bias {
            b.add(out, bias, out)?;
        }
    }
    match w.head_norms {
        None => {
            b.rope(q, s.pos, &l.rope_q, q)?;
            b.rope(k, s.pos, &l.rope_k, k)?;
        }
        Some([q_norm, k_norm]) => {
            // Each head is a row of `hd` values. `attn` is free until the
            // attention writes it, so it holds the normed heads that RoPE
            // then writes back.
            let hd = c.head_dim;
            for (t, norm, rope) in [(q, q_norm, &l.rope_q), (k, k_norm, &l.rope_k)] {
                let heads = rope.n_heads;
                let normed = s.rows(a.attn).reshape(n, heads * hd);
                b.rms_norm(
                    t.reshape(n * heads, hd),
                    Some(norm),
                    c.rms_eps,
                    normed.reshape(n * heads, hd),
                )?;
                b.rope(normed, s.pos, rope, t)?;
            }
        }
    }
    if let Some(scale) = l.q_scale {
        b.scale(q, scale, q)?;
    }
    b.set_rows(k, s.kv_rows, cache.k[il])?;
    b.set_rows(v, s.kv_rows, cache.v[il])?;
    if il + 1 == c.n_layer && s.out == (Output::Logits { rows: 0 }) {
        return Ok(None);
    }
    let (attn, proj) = (s.rows(a.attn), s.rows(a.proj));
    let params = AttentionParams {
        keys: s.keys,
        decode_rows: s.decode_rows,
        ..l.params
    };
    b.attention(q, cache.k[il], cache.v[il], s.pos, s.seq, &params, attn)?;
    b.matmul(w.output, attn, proj)?;
    if let Some(bias) = w.bias[3] {
        b.add(proj, bias, proj)?;
    }
    Ok(Some(proj))
}

/// A layer's gated FFN: gate and up from `ffn_gate` and `ffn_up`, or from
/// one `ffn_up` of twice the rows (gate's first, as Phi-3 writes them).
pub struct Glu {
    pub norm: Tensor, // 1 × E, F32
    pub gate: Tensor, // F × E
    pub up: Tensor,   // F × E
    pub down: Tensor, // E × F
}

impl Glu {
    /// Layer `il`'s FFN; `norm` names its input norm.
    pub fn load(c: &Config, l: &mut Loader, il: usize, norm: &str) -> Result<Self, ModelError> {
        let (e, f) = (c.n_embd, c.n_ff);
        let name = |n: &str| format!("blk.{il}.{n}");
        let norm = l.tensor(&name(norm), 1, e, Op::RmsNorm)?;
        let (gate, up) = (name("ffn_gate.weight"), name("ffn_up.weight"));
        let [gate, up] = if !l.has(&gate) && l.has(&up) {
            l.split(&up, [f, f], e, Op::MatMul)?
                .ok_or(ModelError::MissingTensor { name: up })?
        } else {
            l.joined([(&gate, f), (&up, f)], e)?
        };
        let down = l.tensor(&name("ffn_down.weight"), e, f, Op::MatMul)?;
        Ok(Self {
            norm,
            gate,
            up,
            down,
        })
    }
}

/// The FFN of `m` rows of `x` (`m × E`): the output, not yet added to `x`,
/// in `a.proj`.
pub fn glu(
    b: &mut dyn Backend,
    s: &Step,
    m: usize,
    w: &Glu,
    x: Tensor,
) -> Result<Tensor, ModelError> {
    let (c, a) = (s.c, s.a);
    let (h, proj) = (a.h.with_rows(m), a.proj.with_rows(m));
    let (gate, up, act) = (a.gate.with_rows(m), a.up.with_rows(m), a.act.with_rows(m));
    b.rms_norm(x, Some(w.norm), c.rms_eps, h)?;
    b.matmuls(&[w.gate, w.up], h, &[gate, up])?;
    activation(b, c.glu, gate, up, act)?;
    b.matmul(w.down, act, proj)?;
    Ok(proj)
}

fn activation(
    b: &mut dyn Backend,
    glu: GluAct,
    gate: Tensor,
    up: Tensor,
    out: Tensor,
) -> Result<(), ModelError> {
    match glu {
        GluAct::Silu => b.silu_mul(gate, up, out)?,
        GluAct::Gelu => b.gelu_mul(gate, up, out)?,
    }
    Ok(())
}

/// A layer's mixture of experts: the router and the experts' stacked
/// weights, which stay in their GGUF type.
pub struct Moe {
    pub norm: Tensor,   // 1 × E, F32
    pub router: Tensor, // X × E: ffn_gate_inp
    pub gate: Tensor,   // (X·Fx) × E: ffn_gate_exps
    pub up: Tensor,     // (X·Fx) × E: ffn_up_exps
    pub down: Tensor,   // (X·E) × Fx: ffn_down_exps
}

impl Moe {
    pub fn load(
        c: &Config,
        moe: &MoeConfig,
        l: &mut Loader,
        il: usize,
        norm: &str,
    ) -> Result<Self, ModelError> {
        let (e, x, f) = (c.n_embd, moe.n_expert, moe.n_ff_exp);
        let name = |n: &str| format!("blk.{il}.{n}");
        Ok(Self {
            norm: l.tensor(&name(norm), 1, e, Op::RmsNorm)?,
            router: l.tensor(&name("ffn_gate_inp.weight"), x, e, Op::MatMul)?,
            gate: l.experts(&name("ffn_gate_exps.weight"), x, f, e)?,
            up: l.experts(&name("ffn_up_exps.weight"), x, f, e)?,
            down: l.experts(&name("ffn_down_exps.weight"), x, e, f)?,
        })
    }
}

/// The mixture of experts of `m` rows of `x` (`m × E`): the output, not
/// yet added to `x`, in `a.proj`.
pub fn moe(
    b: &mut dyn Backend,
    s: &Step,
    m: usize,
    w: &Moe,
    x: Tensor,
) -> Result<Tensor, ModelError> {
    let (c, a) = (s.c, s.a);
    let (Some(cfg), Some(e)) = (&c.moe, &a.experts) else {
        return Err(ModelError::Param(
            "a MoE layer in a model without experts".into(),
        ));
    };
    let k = cfg.n_expert_used;
    let (h, proj) = (a.h.with_rows(m), a.proj.with_rows(m));
    let (logits, ids, weights) = (
        e.logits.with_rows(m),
        e.ids.with_rows(m),
        e.weights.with_rows(m),
    );
    let (gate, up, act, down) = (
        e.gate.with_rows(m * k),
        e.up.with_rows(m * k),
        e.act.with_rows(m * k),
        e.down.with_rows(m * k),
    );
    b.rms_norm(x, Some(w.norm), c.rms_eps, h)?;
    b.matmul(w.router, h, logits)?;
    b.topk_moe(logits, &cfg.params(), ids, weights)?;
    b.matmul_id(w.gate, h, ids, gate)?;
    b.matmul_id(w.up, h, ids, up)?;
    activation(b, c.glu, gate, up, act)?;
    b.matmul_id(w.down, act, ids, down)?;
    b.moe_sum(down, weights, proj)?;
    Ok(proj)
}
