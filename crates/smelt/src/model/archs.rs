//! Each architecture's entry: what it reads or fixes beyond the keys every
//! architecture shares ([`Config::from_gguf`]), as llama.cpp's
//! `load_arch_hparams` and graph do. The layer itself is the shared decoder
//! (`decoder.rs`); an entry only says which of its parts the architecture
//! has.

use super::ModelError;
use super::config::{Arch, Config, Glu, Meta};
use crate::backend::{MoeGating, RopeMode};

pub(super) fn hparams(c: &mut Config, m: &Meta) -> Result<(), ModelError> {
    match c.arch {
        Arch::Llama => llama(c, m),
        Arch::Qwen2 => qwen2(c),
        Arch::Qwen3 => qwen3(c),
        Arch::Qwen3Moe => qwen3moe(c, m),
        Arch::Phi3 => phi3(c),
        Arch::Gemma2 => gemma2(c, m),
        Arch::Gemma3 => gemma3(c, m),
    }
}

/// Llama, and Mistral under its name: adjacent-pair RoPE. Where the file
/// declares `llama.attention.sliding_window` (Mistral 7B v0.1's 4096),
/// every layer attends through that window, as Mistral was trained;
/// llama.cpp ignores the key. `llama.expert_count` makes the FFN Mixtral's
/// experts.
fn llama(c: &mut Config, m: &Meta) -> Result<(), ModelError> {
    if let Some(n_swa) = m.opt_u32("attention.sliding_window")? {
        c.set_swa_pattern(n_swa, 0);
    }
    if m.opt_u32("expert_count")?.is_some_and(|n| n > 0) {
        c.read_moe(m, MoeGating::Softmax, true)?;
    }
    Ok(())
}

/// Qwen 2 and 2.5 (and the R1 distills on them): Llama with NeoX RoPE and
/// biases on Q, K and V (loaded where the file has them).
fn qwen2(c: &mut Config) -> Result<(), ModelError> {
    c.rope_mode = RopeMode::Neox;
    Ok(())
}

/// Qwen 3: Qwen 2 without the biases, with a per-head RMSNorm of Q and K
/// before RoPE.
fn qwen3(c: &mut Config) -> Result<(), ModelError> {
    c.rope_mode = RopeMode::Neox;
    c.head_norms = true;
    Ok(())
}

/// Qwen 3 MoE: Qwen 3's attention; the FFN is `expert_used_count` of
/// `expert_count` SwiGLU experts, chosen by a softmax over the router's
/// logits, their weights divided by their sum.
fn qwen3moe(c: &mut Config, m: &Meta) -> Result<(), ModelError> {
    qwen3(c)?;
    c.read_moe(m, MoeGating::Softmax, true)
}

/// Phi-3 (and Phi-4): NeoX RoPE, the query scaled by `1/sqrt(head_dim)`
/// before the attention. Q, K, V may be one `attn_qkv` tensor and gate and
/// up one `ffn_up` of twice the rows (the loader splits them). The 128k
/// variants' LongRoPE is per-pair factors (`rope_factors_long` beyond
/// `rope.scaling.original_context_length`, `rope_factors_short` within it)
/// and `rope.scaling.attn_factor` on the cosines and sines. Their
/// `sliding_window` is ignored, as llama.cpp does.
fn phi3(c: &mut Config) -> Result<(), ModelError> {
    c.rope_mode = RopeMode::Neox;
    c.scale_query = true;
    Ok(())
}

/// Gemma 2: embeddings times `sqrt(n_embd)`, GeGLU, RMSNorms after the
/// attention and the FFN too, the query scaled before the attention
/// (`1/sqrt(key_length)`, or `1/sqrt(n_embd/n_head)` for the 27B model),
/// scores and logits soft-capped (`attn_logit_softcapping`, default 50;
/// `final_logit_softcapping`, default 30), and every other layer, from the
/// first, sliding over `attention.sliding_window` positions (default 4096).
fn gemma2(c: &mut Config, m: &Meta) -> Result<(), ModelError> {
    gemma(c);
    let n_swa = m.opt_u32("attention.sliding_window")?.unwrap_or(4096);
    c.load_swa_pattern(m, n_swa, 2)?;
    c.rope_freq_base_swa = m.opt_f32("rope.freq_base_swa")?.unwrap_or(c.rope_freq_base);
    c.attn_softcap = Some(m.opt_f32("attn_logit_softcapping")?.unwrap_or(50.0));
    c.final_softcap = Some(m.opt_f32("final_logit_softcapping")?.unwrap_or(30.0));
    if c.n_layer == 46 {
        c.attn_scale = 1.0 / ((c.n_embd / c.n_head).max(1) as f32).sqrt();
    }
    Ok(())
}

/// Gemma 3: Gemma 2 with Qwen 3's per-head Q/K norms, scores not capped and
/// logits only where `final_logit_softcapping` says; five of every six
/// layers (all but 5, 11, 17, ...) slide over the window with their own
/// RoPE base (`rope.freq_base_swa`, default 10000) and no scaling. The
/// attention scale is
/// `1/sqrt(key_length)` (`query_pre_attn_scalar`), except for the 27B model
/// (62 layers), whose scalar is `n_embd / n_head`.
fn gemma3(c: &mut Config, m: &Meta) -> Result<(), ModelError> {
    gemma(c);
    c.head_norms = true;
    // A file without a window attends globally everywhere.
    let n_swa = m.opt_u32("attention.sliding_window")?.unwrap_or(0);
    if n_swa > 0 {
        c.load_swa_pattern(m, n_swa, 6)?;
        c.rope_freq_base_swa = m.opt_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
        c.rope_freq_scale_swa = 1.0;
    }
    c.final_softcap = m
        .opt_f32("final_logit_softcapping")?
        .filter(|&cap| cap != 0.0);
    if c.n_layer == 62 {
        c.attn_scale = 1.0 / ((c.n_embd / c.n_head).max(1) as f32).sqrt();
    }
    Ok(())
}

/// What Gemma 2 and 3 share.
fn gemma(c: &mut Config) {
    c.rope_mode = RopeMode::Neox;
    c.embd_scale = Some((c.n_embd as f32).sqrt());
    c.glu = Glu::Gelu;
    c.post_norms = true;
    c.scale_query = true;
}
