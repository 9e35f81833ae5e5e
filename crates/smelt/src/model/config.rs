//! A model's hyperparameters, read from its GGUF metadata (`{arch}.*`
//! keys), with each architecture's fixed values where llama.cpp hard-codes
//! them rather than reading them (Gemma's sliding-window patterns). The
//! keys every architecture shares are read here; what one architecture adds
//! or fixes is its entry in [`super::archs`].
//!
//! Every value is checked here, against the others and against the tensor
//! shapes, so the forward pass and the buffers it sizes can trust them.

use super::pooling::Pooling;
use super::{ModelError, archs};
use crate::backend::{MoeGating, MoeParams, RopeMode};
use crate::gguf::{Array, GgufError, Header};

/// The architectures smelt runs, by `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Qwen3Moe,
    Phi3,
    Gemma2,
    Gemma3,
}

/// `general.architecture` names, in the order `smelt info` lists them.
pub const ARCHS: &[(&str, Arch)] = &[
    ("llama", Arch::Llama),
    ("qwen2", Arch::Qwen2),
    ("qwen3", Arch::Qwen3),
    ("qwen3moe", Arch::Qwen3Moe),
    ("phi3", Arch::Phi3),
    ("gemma2", Arch::Gemma2),
    ("gemma3", Arch::Gemma3),
];

impl Arch {
    pub fn name(self) -> &'static str {
        ARCHS
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The FFN's gated activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// `silu(gate) · up` (SwiGLU).
    Silu,
    /// `gelu(gate) · up`, tanh approximation (GeGLU).
    Gelu,
}

/// A mixture-of-experts FFN (llama.cpp's `build_moe_ffn`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moe {
    /// `{arch}.expert_count`.
    pub n_expert: usize,
    /// `{arch}.expert_used_count`: experts per token.
    pub n_expert_used: usize,
    /// `{arch}.expert_feed_forward_length`: one expert's hidden size.
    pub n_ff_exp: usize,
    pub gating: MoeGating,
    /// Whether the chosen experts' weights are divided by their sum.
    pub normalize: bool,
}

impl Moe {
    pub fn params(&self) -> MoeParams {
        MoeParams {
            k: self.n_expert_used,
            gating: self.gating,
            normalize: self.normalize,
        }
    }
}

/// Hyperparameters, named after llama.cpp's `llama_hparams`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    /// `{arch}.block_count`.
    pub n_layer: usize,
    /// `{arch}.embedding_length`.
    pub n_embd: usize,
    /// `{arch}.feed_forward_length` (0 where every layer is a MoE).
    pub n_ff: usize,
    /// `{arch}.attention.head_count`.
    pub n_head: usize,
    /// `{arch}.attention.head_count_kv` (default: `n_head`).
    pub n_head_kv: usize,
    /// `{arch}.attention.key_length` (default: `n_embd / n_head`).
    pub head_dim: usize,
    /// `{arch}.rope.dimension_count` (default: `head_dim`).
    pub n_rot: usize,
    /// How RoPE pairs a head's values: the architecture's.
    pub rope_mode: RopeMode,
    /// `{arch}.rope.freq_base` (default 10000).
    pub rope_freq_base: f32,
    /// `1 / {arch}.rope.scaling.factor` for linear scaling (default 1).
    pub rope_freq_scale: f32,
    /// `{arch}.rope.scaling.attn_factor` (default 1): multiplies RoPE's
    /// cosines and sines (Phi-3's LongRoPE).
    pub rope_attn_factor: f32,
    /// `{arch}.rope.scaling.original_context_length` (default: the
    /// training context): contexts longer than it take the long RoPE
    /// factors where a model has two sets (llama.cpp's `n_ctx_orig_yarn`).
    pub n_ctx_orig: usize,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `{arch}.context_length`: the context the model was trained for.
    pub n_ctx_train: usize,
    /// `{arch}.vocab_size`, else the tokenizer's token count, else the rows
    /// of `token_embd`.
    pub n_vocab: usize,
    /// `{arch}.attention.sliding_window`: how many positions, its own
    /// included, a sliding-window layer's query sees (0: none).
    pub n_swa: usize,
    /// Per layer: whether it attends through the sliding window
    /// (llama.cpp's `swa_layers`).
    pub swa_layers: Vec<bool>,
    /// RoPE base and linear scale of the sliding-window layers (llama.cpp's
    /// `rope_freq_base_train_swa` and `rope_freq_scale_train_swa`); the
    /// other layers use `rope_freq_base` and `rope_freq_scale`.
    pub rope_freq_base_swa: f32,
    pub rope_freq_scale_swa: f32,
    /// Multiplies `q·k` before the softmax (llama.cpp's
    /// `f_attention_scale`): `1/sqrt(head_dim)` unless the architecture
    /// says otherwise.
    pub attn_scale: f32,
    /// Whether `attn_scale` multiplies the query before the attention (as
    /// llama.cpp's Gemma and Phi-3 graphs do, so that the cache type's
    /// rounding sees the scaled query) rather than the scores.
    pub scale_query: bool,
    /// `{arch}.attn_logit_softcapping`: `cap · tanh(s / cap)` on the scores.
    pub attn_softcap: Option<f32>,
    /// `{arch}.final_logit_softcapping`: the same on the logits.
    pub final_softcap: Option<f32>,
    /// Multiplies the token embeddings (Gemma: `sqrt(n_embd)`).
    pub embd_scale: Option<f32>,
    /// Per-head RMSNorm of Q and K before RoPE (`attn_q_norm`,
    /// `attn_k_norm`: Qwen 3, Gemma 3).
    pub head_norms: bool,
    /// RMSNorm of the attention's and the FFN's outputs before their
    /// residual adds (`post_attention_norm`, `post_ffw_norm`: Gemma).
    pub post_norms: bool,
    pub glu: Glu,
    /// The experts, where the FFN is a mixture of them.
    pub moe: Option<Moe>,
    /// `{arch}.pooling_type`: how the model's embeddings are pooled, where
    /// it says (rank, a reranker's head, and unknown values count as
    /// unsaid).
    pub pooling: Option<Pooling>,
}

/// Sizes beyond these are not a model but a hostile or broken file.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;
const MAX_EXPERTS: usize = 1 << 12;

/// A model's metadata under its architecture's prefix.
pub struct Meta<'a> {
    pub h: &'a Header,
    pub arch: &'a str,
}

impl Meta<'_> {
    /// `{arch}.{k}`.
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    pub fn u32(&self, k: &str) -> Result<usize, GgufError> {
        Ok(self.h.get_u32(&self.key(k))? as usize)
    }

    pub fn opt_u32(&self, k: &str) -> Result<Option<usize>, GgufError> {
        Ok(self.h.opt_u32(&self.key(k))?.map(|v| v as usize))
    }

    pub fn opt_f32(&self, k: &str) -> Result<Option<f32>, GgufError> {
        self.h.opt_f32(&self.key(k))
    }

    pub fn opt_bool(&self, k: &str) -> Result<Option<bool>, GgufError> {
        self.h.opt_bool(&self.key(k))
    }

    /// A positive, finite `{arch}.{k}`, if present.
    pub fn opt_positive(&self, k: &str) -> Result<Option<f32>, ModelError> {
        match self.opt_f32(k)? {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(bad(&self.key(k), "must be positive")),
            v => Ok(v),
        }
    }
}

impl Config {
    /// Reads the config of a GGUF file's architecture.
    pub fn from_gguf(h: &Header) -> Result<Config, ModelError> {
        let arch_name = h.architecture()?;
        let Some(&(_, arch)) = ARCHS.iter().find(|(n, _)| *n == arch_name) else {
            return Err(ModelError::UnsupportedArch {
                arch: arch_name.to_string(),
                supported: ARCHS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            });
        };
        let m = Meta { h, arch: arch_name };

        let n_layer = m.u32("block_count")?;
        let n_embd = m.u32("embedding_length")?;
        let n_ff = m.opt_u32("feed_forward_length")?.unwrap_or(0);
        let n_head = m.u32("attention.head_count")?;
        let n_head_kv = m.opt_u32("attention.head_count_kv")?.unwrap_or(n_head);
        let head_dim = match m.opt_u32("attention.key_length")? {
            Some(d) => d,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        let n_rot = m.opt_u32("rope.dimension_count")?.unwrap_or(head_dim);
        let rope_freq_base = m.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
        let rope_freq_scale = match h.opt_str(&m.key("rope.scaling.type"))? {
            None | Some("none") => 1.0,
            Some("linear") => 1.0 / m.opt_positive("rope.scaling.factor")?.unwrap_or(1.0),
            Some(other) => {
                return Err(bad(
                    &m.key("rope.scaling.type"),
                    &format!("{other:?} RoPE scaling is not supported (none, linear are)"),
                ));
            }
        };
        let rope_attn_factor = m.opt_positive("rope.scaling.attn_factor")?.unwrap_or(1.0);
        // One head size serves keys and values in the attention contract.
        match m.opt_u32("attention.value_length")? {
            Some(v) if v != head_dim => {
                return Err(bad(
                    &m.key("attention.value_length"),
                    &format!("is {v}, unlike the key length {head_dim}: unsupported"),
                ));
            }
            _ => {}
        }
        let rms_eps = h.get_f32(&m.key("attention.layer_norm_rms_epsilon"))?;
        let n_ctx_train = m.u32("context_length")?;
        let n_ctx_orig = m
            .opt_u32("rope.scaling.original_context_length")?
            .unwrap_or(n_ctx_train);
        let n_vocab = match m.opt_u32("vocab_size")? {
            Some(v) => v,
            None => match h.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(tokens) => tokens.len(),
                None => h
                    .tensors
                    .iter()
                    .find(|t| t.name == "token_embd.weight")
                    .map_or(0, |t| t.n_rows() as usize),
            },
        };

        let pooling = m
            .opt_u32("pooling_type")?
            .and_then(|v| Pooling::from_gguf(v as u32));

        let mut c = Config {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_mode: RopeMode::Normal,
            rope_freq_base,
            rope_freq_scale,
            rope_attn_factor,
            n_ctx_orig,
            rms_eps,
            n_ctx_train,
            n_vocab,
            n_swa: 0,
            swa_layers: Vec::new(),
            rope_freq_base_swa: rope_freq_base,
            rope_freq_scale_swa: rope_freq_scale,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            scale_query: false,
            attn_softcap: None,
            final_softcap: None,
            embd_scale: None,
            head_norms: false,
            post_norms: false,
            glu: Glu::Silu,
            moe: None,
            pooling,
        };
        c.validate(&m)?;
        c.check_file(&m)?;
        c.swa_layers = vec![false; c.n_layer];
        archs::hparams(&mut c, &m)?;
        c.validate_arch(&m)?;
        Ok(c)
    }

    /// Reads `{arch}.expert_*` into a MoE FFN of `gating`.
    pub fn read_moe(
        &mut self,
        m: &Meta,
        gating: MoeGating,
        normalize: bool,
    ) -> Result<(), ModelError> {
        let n_expert = m.u32("expert_count")?;
        let n_expert_used = m.u32("expert_used_count")?;
        if n_expert == 0 || n_expert > MAX_EXPERTS || n_expert_used == 0 || n_expert_used > n_expert
        {
            return Err(bad(
                &m.key("expert_used_count"),
                &format!(
                    "{n_expert_used} of {n_expert} experts: expected 1..=experts, experts in 1..={MAX_EXPERTS}"
                ),
            ));
        }
        // llama.cpp's default: the dense size shared out over the used experts.
        let n_ff_exp = match m.opt_u32("expert_feed_forward_length")? {
            Some(f) => f,
            None => self.n_ff / n_expert_used,
        };
        if n_ff_exp == 0 || n_ff_exp > MAX_DIM {
            return Err(bad(
                &m.key("expert_feed_forward_length"),
                &format!("is {n_ff_exp}; expected 1..={MAX_DIM}"),
            ));
        }
        self.moe = Some(Moe {
            n_expert,
            n_expert_used,
            n_ff_exp,
            gating,
            normalize,
        });
        Ok(())
    }

    /// Sets every `pattern`-th layer, from `pattern - 1` on, global and the
    /// others sliding (llama.cpp's `set_swa_pattern`), with a window of
    /// `n_swa` positions; `pattern` 0 makes every layer sliding.
    pub fn set_swa_pattern(&mut self, n_swa: usize, pattern: usize) {
        self.n_swa = n_swa;
        for (il, swa) in self.swa_layers.iter_mut().enumerate() {
            *swa = n_swa > 0 && (pattern == 0 || il % pattern < pattern - 1);
        }
    }

    /// [`Config::set_swa_pattern`] with the file's
    /// `attention.sliding_window_pattern` where it has one (a pattern, or
    /// one flag per layer), else `default` (llama.cpp's `load_swa_pattern`).
    pub fn load_swa_pattern(
        &mut self,
        m: &Meta,
        n_swa: usize,
        default: usize,
    ) -> Result<(), ModelError> {
        let key = m.key("attention.sliding_window_pattern");
        match m.h.get(&key) {
            None => self.set_swa_pattern(n_swa, default),
            Some(v) => match (v.as_u32(), v.as_array()) {
                (Some(pattern), _) => self.set_swa_pattern(n_swa, pattern as usize),
                (None, Some(Array::Bool(flags))) if flags.len() == self.n_layer => {
                    self.n_swa = n_swa;
                    self.swa_layers = flags.iter().map(|&f| f && n_swa > 0).collect();
                }
                _ => {
                    return Err(bad(
                        &key,
                        &format!("must be a number or {} flags", self.n_layer),
                    ));
                }
            },
        }
        Ok(())
    }

    fn validate(&self, m: &Meta) -> Result<(), ModelError> {
        let sizes = [
            ("block_count", self.n_layer, MAX_LAYERS),
            ("embedding_length", self.n_embd, MAX_DIM),
            ("attention.head_count", self.n_head, MAX_DIM),
            ("attention.head_count_kv", self.n_head_kv, MAX_DIM),
            ("attention.key_length", self.head_dim, MAX_DIM),
            ("context_length", self.n_ctx_train, 1 << 24),
            ("vocab_size", self.n_vocab, 1 << 24),
        ];
        for (k, v, max) in sizes {
            if v == 0 || v > max {
                return Err(bad(&m.key(k), &format!("is {v}; expected 1..={max}")));
            }
        }
        if self.n_ff > MAX_DIM {
            return Err(bad(
                &m.key("feed_forward_length"),
                &format!("is {}; expected at most {MAX_DIM}", self.n_ff),
            ));
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return Err(bad(
                &m.key("attention.head_count_kv"),
                &format!(
                    "{} does not divide head_count {}",
                    self.n_head_kv, self.n_head
                ),
            ));
        }
        if self.n_rot == 0 || self.n_rot > self.head_dim || !self.n_rot.is_multiple_of(2) {
            return Err(bad(
                &m.key("rope.dimension_count"),
                &format!(
                    "is {}; it must be even, positive and at most the head size {}",
                    self.n_rot, self.head_dim
                ),
            ));
        }
        if !(self.rope_freq_base.is_finite() && self.rope_freq_base > 0.0) {
            return Err(bad(&m.key("rope.freq_base"), "must be positive"));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(bad(
                &m.key("attention.layer_norm_rms_epsilon"),
                "must be a non-negative number",
            ));
        }
        Ok(())
    }

    /// Checks what the architecture's entry set.
    fn validate_arch(&self, m: &Meta) -> Result<(), ModelError> {
        if self.moe.is_none() && self.n_ff == 0 {
            return Err(bad(&m.key("feed_forward_length"), "is missing or 0"));
        }
        if self.swa_layers.iter().any(|&s| s) && self.n_swa == 0 {
            return Err(bad(&m.key("attention.sliding_window"), "is 0"));
        }
        for (k, cap) in [
            ("attn_logit_softcapping", self.attn_softcap),
            ("final_logit_softcapping", self.final_softcap),
        ] {
            if cap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
                return Err(bad(&m.key(k), "must be positive"));
            }
        }
        Ok(())
    }

    /// What the metadata says against what the file holds: no layer
    /// tensor past `block_count` (its weights would be ignored), and
    /// BOS/EOS ids inside the vocabulary (the tokenizer would otherwise
    /// fall back to a default id silently).
    fn check_file(&self, m: &Meta) -> Result<(), ModelError> {
        let past = m.h.tensors.iter().find_map(|t| {
            let layer: usize = t
                .name
                .strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse()
                .ok()?;
            (layer >= self.n_layer).then_some(&t.name)
        });
        if let Some(name) = past {
            return Err(bad(
                &m.key("block_count"),
                &format!(
                    "is {}, but the file has tensor {name:?}: the count is smaller than the tensors",
                    self.n_layer
                ),
            ));
        }
        for which in ["bos", "eos"] {
            let k = format!("tokenizer.ggml.{which}_token_id");
            if let Some(id) = m.h.get(&k).and_then(|v| v.as_i128())
                && !(0..self.n_vocab as i128).contains(&id)
            {
                return Err(bad(
                    &k,
                    &format!("is {id}, outside the vocabulary of {} tokens", self.n_vocab),
                ));
            }
        }
        Ok(())
    }

    /// Query width: `n_head · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Key/value width: `n_head_kv · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// The hyperparameters as `smelt info` lists them: (name, value).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("architecture", self.arch.name().to_string()),
            ("layers", self.n_layer.to_string()),
            ("embedding", self.n_embd.to_string()),
            (
                "heads",
                format!(
                    "{} query, {} key/value, {} values each",
                    self.n_head, self.n_head_kv, self.head_dim
                ),
            ),
            (
                "rope",
                format!(
                    "{:?}, {} dims, base {}, scale {}{}",
                    self.rope_mode,
                    self.n_rot,
                    self.rope_freq_base,
                    self.rope_freq_scale,
                    if self.rope_attn_factor == 1.0 {
                        String::new()
                    } else {
                        format!(", attn_factor {}", self.rope_attn_factor)
                    }
                ),
            ),
            (
                "attention scale",
                format!(
                    "{} on the {}",
                    self.attn_scale,
                    if self.scale_query { "query" } else { "scores" }
                ),
            ),
            ("context", format!("{} trained", self.n_ctx_train)),
            ("vocabulary", self.n_vocab.to_string()),
            ("rms epsilon", self.rms_eps.to_string()),
        ];
        if self.n_swa > 0 {
            let layers: Vec<String> = (0..self.n_layer)
                .filter(|&i| self.swa_layers[i])
                .map(|i| i.to_string())
                .collect();
            v.push((
                "sliding window",
                format!(
                    "{} positions on layers {} (rope base {})",
                    self.n_swa,
                    layers.join(","),
                    self.rope_freq_base_swa
                ),
            ));
        }
        if let Some(cap) = self.attn_softcap {
            v.push(("attention softcap", cap.to_string()));
        }
        if let Some(cap) = self.final_softcap {
            v.push(("logit softcap", cap.to_string()));
        }
        if self.head_norms {
            v.push(("q/k norms", "per head".into()));
        }
        if self.post_norms {
            v.push(("post norms", "attention and FFN outputs".into()));
        }
        match &self.moe {
            Some(moe) => v.push((
                "experts",
                format!(
                    "{} of {} per token, {} wide, {:?} gating{}",
                    moe.n_expert_used,
                    moe.n_expert,
                    moe.n_ff_exp,
                    moe.gating,
                    if moe.normalize { ", normalized" } else { "" }
                ),
            )),
            None => v.push((
                "feed-forward",
                format!("{} ({:?} GLU)", self.n_ff, self.glu),
            )),
        }
        v
    }
}

pub(super) fn bad(key: &str, reason: &str) -> ModelError {
    ModelError::BadConfig {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}
