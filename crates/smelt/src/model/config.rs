//! A model's hyperparameters, read from its GGUF metadata (`{arch}.*` keys,
//! `llama.*` or `gemma3.*`), with each architecture's fixed values where
//! llama.cpp hard-codes them rather than reading them (Gemma 3's
//! sliding-window pattern and local RoPE base).
//!
//! Every value is checked here, against the others and against the tensor
//! shapes, so the forward pass and the buffers it sizes can trust them.

use super::ModelError;
use crate::gguf::{GgufError, Header};

/// The architectures smelt runs, by `general.architecture`.
pub const SUPPORTED_ARCHS: &[&str] = &["llama", "gemma3"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Gemma3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Gemma3 => "gemma3",
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
    /// `{arch}.feed_forward_length`.
    pub n_ff: usize,
    /// `{arch}.attention.head_count`.
    pub n_head: usize,
    /// `{arch}.attention.head_count_kv` (default: `n_head`).
    pub n_head_kv: usize,
    /// `{arch}.attention.key_length` (default: `n_embd / n_head`).
    pub head_dim: usize,
    /// `{arch}.rope.dimension_count` (default: `head_dim`).
    pub n_rot: usize,
    /// `{arch}.rope.freq_base` (default 10000).
    pub rope_freq_base: f32,
    /// `1 / {arch}.rope.scaling.factor` for linear scaling (default 1).
    pub rope_freq_scale: f32,
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
}

/// Sizes beyond these are not a model but a hostile or broken file.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;

impl Config {
    /// Reads the config of a GGUF file's architecture.
    pub fn from_gguf(h: &Header) -> Result<Config, ModelError> {
        let arch_name = h.architecture()?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "gemma3" => Arch::Gemma3,
            other => {
                return Err(ModelError::UnsupportedArch {
                    arch: other.to_string(),
                    supported: SUPPORTED_ARCHS.join(", "),
                });
            }
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let get = |k: &str| -> Result<usize, GgufError> { Ok(h.get_u32(&key(k))? as usize) };
        let opt = |k: &str| -> Result<Option<usize>, GgufError> {
            Ok(h.opt_u32(&key(k))?.map(|v| v as usize))
        };

        let n_layer = get("block_count")?;
        let n_embd = get("embedding_length")?;
        let n_ff = get("feed_forward_length")?;
        let n_head = get("attention.head_count")?;
        let n_head_kv = opt("attention.head_count_kv")?.unwrap_or(n_head);
        let head_dim = match opt("attention.key_length")? {
            Some(d) => d,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        let n_rot = opt("rope.dimension_count")?.unwrap_or(head_dim);
        let rope_freq_base = h.opt_f32(&key("rope.freq_base"))?.unwrap_or(10000.0);
        let rope_freq_scale = match h.opt_str(&key("rope.scaling.type"))? {
            None | Some("none") => 1.0,
            Some("linear") => {
                let factor = h.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0);
                if !(factor.is_finite() && factor > 0.0) {
                    return Err(bad(&key("rope.scaling.factor"), "must be positive"));
                }
                1.0 / factor
            }
            Some(other) => {
                return Err(bad(
                    &key("rope.scaling.type"),
                    &format!("{other:?} RoPE scaling is not supported (none, linear are)"),
                ));
            }
        };
        // One head size serves keys and values in the attention contract.
        match opt("attention.value_length")? {
            Some(v) if v != head_dim => {
                return Err(bad(
                    &key("attention.value_length"),
                    &format!("is {v}, unlike the key length {head_dim}: unsupported"),
                ));
            }
            _ => {}
        }
        let rms_eps = h.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        let n_ctx_train = get("context_length")?;
        let n_vocab = match opt("vocab_size")? {
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

        let mut c = Config {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rms_eps,
            n_ctx_train,
            n_vocab,
            n_swa: 0,
            swa_layers: Vec::new(),
            rope_freq_base_swa: rope_freq_base,
            rope_freq_scale_swa: rope_freq_scale,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
        };
        c.validate(&key)?;
        c.check_file(h, &key)?;
        c.swa_layers = vec![false; c.n_layer];
        if arch == Arch::Gemma3 {
            c.gemma3(h, &key)?;
        }
        Ok(c)
    }

    /// Gemma 3's hyperparameters as llama.cpp sets them: every sixth layer
    /// (5, 11, 17, ...) is global, the others slide over the last
    /// `sliding_window` positions with their own RoPE base of 10000 and no
    /// scaling; the attention scale is `1/sqrt(key_length)`
    /// (`query_pre_attn_scalar`), except for the 27B model (62 layers),
    /// whose scalar is `n_embd / n_head`.
    fn gemma3(&mut self, h: &Header, key: &dyn Fn(&str) -> String) -> Result<(), ModelError> {
        const SWA_PATTERN: usize = 6;
        // A file without a window attends globally everywhere; llama.cpp
        // then caps the logits with `final_logit_softcapping`, which the
        // contract has no op for.
        self.n_swa = h.opt_u32(&key("attention.sliding_window"))?.unwrap_or(0) as usize;
        if self.n_swa > 0 {
            for (il, swa) in self.swa_layers.iter_mut().enumerate() {
                *swa = il % SWA_PATTERN < SWA_PATTERN - 1;
            }
            self.rope_freq_base_swa = 10000.0;
            self.rope_freq_scale_swa = 1.0;
        } else if h.get(&key("final_logit_softcapping")).is_some() {
            return Err(bad(
                &key("final_logit_softcapping"),
                "is set on a model without a sliding window: unsupported",
            ));
        }
        let query_pre_attn_scalar = match self.n_layer {
            62 => (self.n_embd / self.n_head).max(1),
            _ => self.head_dim,
        };
        self.attn_scale = 1.0 / (query_pre_attn_scalar as f32).sqrt();
        Ok(())
    }

    fn validate(&self, key: &dyn Fn(&str) -> String) -> Result<(), ModelError> {
        let sizes = [
            ("block_count", self.n_layer, MAX_LAYERS),
            ("embedding_length", self.n_embd, MAX_DIM),
            ("feed_forward_length", self.n_ff, MAX_DIM),
            ("attention.head_count", self.n_head, MAX_DIM),
            ("attention.head_count_kv", self.n_head_kv, MAX_DIM),
            ("attention.key_length", self.head_dim, MAX_DIM),
            ("context_length", self.n_ctx_train, 1 << 24),
            ("vocab_size", self.n_vocab, 1 << 24),
        ];
        for (k, v, max) in sizes {
            if v == 0 || v > max {
                return Err(bad(&key(k), &format!("is {v}; expected 1..={max}")));
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return Err(bad(
                &key("attention.head_count_kv"),
                &format!(
                    "{} does not divide head_count {}",
                    self.n_head_kv, self.n_head
                ),
            ));
        }
        if self.n_rot == 0 || self.n_rot > self.head_dim || !self.n_rot.is_multiple_of(2) {
            return Err(bad(
                &key("rope.dimension_count"),
                &format!(
                    "is {}; it must be even, positive and at most the head size {}",
                    self.n_rot, self.head_dim
                ),
            ));
        }
        if !(self.rope_freq_base.is_finite() && self.rope_freq_base > 0.0) {
            return Err(bad(&key("rope.freq_base"), "must be positive"));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(bad(
                &key("attention.layer_norm_rms_epsilon"),
                "must be a non-negative number",
            ));
        }
        Ok(())
    }

    /// What the metadata says against what the file holds: no layer
    /// tensor past `block_count` (its weights would be ignored), and
    /// BOS/EOS ids inside the vocabulary (the tokenizer would otherwise
    /// fall back to a default id silently).
    fn check_file(&self, h: &Header, key: &dyn Fn(&str) -> String) -> Result<(), ModelError> {
        let past = h.tensors.iter().find_map(|t| {
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
                &key("block_count"),
                &format!(
                    "is {}, but the file has tensor {name:?}: the count is smaller than the tensors",
                    self.n_layer
                ),
            ));
        }
        for which in ["bos", "eos"] {
            let k = format!("tokenizer.ggml.{which}_token_id");
            if let Some(id) = h.get(&k).and_then(|v| v.as_i128())
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
}

fn bad(key: &str, reason: &str) -> ModelError {
    ModelError::BadConfig {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}
