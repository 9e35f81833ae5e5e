//! Which type each tensor becomes: llama-quantize's rules
//! (`llama_tensor_get_type` in llama.cpp's `src/llama-quant.cpp`), for the
//! file types smelt writes.
//!
//! - Only weights of two or more dimensions are quantized, less the small
//!   or sensitive ones listed in [`allows_quantization`].
//! - The output matrix (the embeddings, where they are tied to it) gets
//!   Q6_K, or Q8_0 where its rows are not whole blocks of the file's type.
//! - A mix (`_S`, `_M`, `_L`) gives some tensors more bits: the attention
//!   values, `ffn_down` of the first and last eighths of the layers and
//!   every third between ([`use_more_bits`]), the attention output.
//! - A type whose blocks do not divide a tensor's rows falls back to a
//!   32-value type (Q4_K to Q5_0, ...), and then to F16.
//!
//! Some rules count tensors (the `i`-th `attn_v`, the `i`-th `ffn_down`), so
//! [`Mix::tensor_type`] must see the tensors in llama.cpp's order
//! (`super::llama_order`).

use super::QuantizeError;
use crate::gguf::{Header, TensorInfo};
use crate::quant::{FileType, GgmlType};

/// The model facts the rules depend on (llama.cpp's `hparams` and model
/// type, read from the metadata).
#[derive(Clone, Debug)]
pub struct ModelShape {
    pub arch: String,
    /// `{arch}.block_count`; required only by the rules that count layers.
    pub n_layer: Option<u32>,
    /// Query heads per KV head in the first layer (`n_gqa()`), 0 if unknown.
    pub n_gqa: u32,
    /// `{arch}.expert_count`, 0 for a dense model.
    pub n_expert: u32,
    /// llama.cpp's `LLM_TYPE_70B`, which gives `attn_v` more bits.
    pub is_70b: bool,
}

impl ModelShape {
    pub fn from_metadata(header: &Header) -> Self {
        let arch = header.architecture().unwrap_or("").to_string();
        let key = |k: &str| format!("{arch}.{k}");
        // Per-layer arrays count as their first layer's value.
        let first = |k: &str| {
            header.get(&key(k)).and_then(|v| {
                v.as_u32()
                    .or_else(|| v.as_array()?.to_i64_vec()?.first().map(|&x| x as u32))
            })
        };
        let n_layer = header.get(&key("block_count")).and_then(|v| v.as_u32());
        let n_head = first("attention.head_count").unwrap_or(0);
        let n_head_kv = first("attention.head_count_kv").unwrap_or(n_head);
        let n_expert = first("expert_count").filter(|&n| n > 1).unwrap_or(0);
        // The architectures whose loaders call an 80-layer model (68 for
        // jais2) a 70B one; llama's 65B had no grouped-query attention.
        let is_70b = match (arch.as_str(), n_layer) {
            ("llama", Some(80)) => n_head != n_head_kv,
            ("deci" | "olmo" | "qwen2", Some(80)) | ("jais2", Some(68)) => true,
            _ => false,
        };
        Self {
            arch,
            n_layer,
            n_gqa: n_head.checked_div(n_head_kv).unwrap_or(0),
            n_expert,
            is_70b,
        }
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }
}

/// What the user asked for beyond the file type (llama-quantize's flags).
#[derive(Clone, Debug, Default)]
pub struct MixOptions {
    /// `--output-tensor-type`
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`
    pub token_embedding_type: Option<GgmlType>,
    /// `--pure`: every quantized tensor gets the file type's own type.
    pub pure: bool,
    /// `--leave-output-tensor`: `output.weight` keeps its type.
    pub leave_output_tensor: bool,
}

/// llama.cpp's `tensor_category`, from the tensor's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    const BY_FRAGMENT: [(&str, Category); 9] = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    match name {
        "output.weight" => Output,
        "token_embd.weight" | "per_layer_token_embd.weight" => TokenEmbd,
        _ => BY_FRAGMENT
            .iter()
            .find(|(fragment, _)| name.contains(fragment))
            .map_or(Other, |&(_, c)| c),
    }
}

/// The attention value projections, where quantization error hurts most.
fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// Name fragments of weights llama-quantize never quantizes: norms, MoE
/// routers, convolution and RWKV mixing weights, position tables and other
/// small or sensitive matrices.
const KEEP_FRAGMENTS: [&str; 35] = [
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// What GLM-5 next (`glm5-next`) keeps besides: its indexer and its small
/// projections.
const GLM5_NEXT_KEEP_FRAGMENTS: [&str; 14] = [
    "hc_",
    "indexer.attn_q_b",
    "indexer.attn_k",
    "indexer.proj",
    "indexer_compressor_gate",
    "indexer_compressor_ape",
    "ssm_f_a.weight",
    "ssm_f_b.weight",
    "ssm_g_a.weight",
    "ssm_g_b.weight",
    "ssm_beta.weight",
    "attn_kv_a_mqa.weight",
    "attn_k_b.weight",
    "attn_v_b.weight",
];

/// ggml's `ggml_n_dims`: trailing dimensions of 1 do not count.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// `tensor_allows_quantization`: whether llama-quantize may change this
/// tensor's type at all.
pub fn allows_quantization(arch: &str, info: &TensorInfo, options: &MixOptions) -> bool {
    let name = info.name.as_str();
    if n_dims(&info.dims) < 2 || !name.ends_with("weight") {
        return false;
    }
    if options.leave_output_tensor && name == "output.weight" {
        return false;
    }
    if matches!(name, "position_embd.weight" | "token_types.weight") {
        return false;
    }
    let keep = |fragments: &[&str]| fragments.iter().any(|f| name.contains(f));
    !(keep(&KEEP_FRAGMENTS) || (arch == "glm5-next" && keep(&GLM5_NEXT_KEEP_FRAGMENTS)))
}

/// llama.cpp's `use_more_bits`: the first and last eighths of the layers,
/// and every third layer between them.
fn use_more_bits(i_layer: i32, n_layers: i32) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The per-file state of the rules: how many of each counted tensor have
/// been seen.
pub struct Mix<'a> {
    ftype: FileType,
    default_type: GgmlType,
    shape: &'a ModelShape,
    options: &'a MixOptions,
    /// No `output.weight`: the embeddings are the output matrix too.
    tied_embeddings: bool,
    n_attention_wv: i32,
    i_attention_wv: i32,
    i_ffn_down: i32,
    /// Tensors whose type fell back because its blocks do not divide their
    /// rows, with the type they fell back from.
    pub fallbacks: Vec<(String, GgmlType, GgmlType)>,
}

impl<'a> Mix<'a> {
    /// `names` are every tensor of the file.
    pub fn new<'n>(
        ftype: FileType,
        default_type: GgmlType,
        shape: &'a ModelShape,
        options: &'a MixOptions,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Self {
        let (mut n_attention_wv, mut tied_embeddings) = (0, true);
        for name in names {
            let c = category(name);
            n_attention_wv += i32::from(is_attn_v(c));
            tied_embeddings &= c != Category::Output;
        }
        Self {
            ftype,
            default_type,
            shape,
            options,
            tied_embeddings,
            n_attention_wv,
            i_attention_wv: 0,
            i_ffn_down: 0,
            fallbacks: Vec::new(),
        }
    }

    /// `llama_tensor_get_type`: the type `info` becomes (its own type when it
    /// is not to be quantized). Call once per tensor, in llama.cpp's order.
    pub fn tensor_type(&mut self, info: &TensorInfo) -> Result<GgmlType, QuantizeError> {
        if !allows_quantization(&self.shape.arch, info, self.options) {
            return Ok(info.dtype);
        }
        let c = category(&info.name);
        match (
            c,
            self.options.token_embedding_type,
            self.options.output_tensor_type,
        ) {
            (Category::TokenEmbd, Some(t), _) | (Category::Output, _, Some(t)) => return Ok(t),
            _ => {}
        }
        if !self.default_type.is_quantized() {
            return Ok(self.default_type);
        }
        let chosen = if self.options.pure {
            self.default_type
        } else {
            self.mixed_type(info, c)?
        };
        Ok(self.fallback(info, chosen))
    }

    /// `llama_tensor_get_type_impl`, for the file types smelt writes (the
    /// IQ, TQ and MXFP4 branches are left out).
    fn mixed_type(&mut self, info: &TensorInfo, c: Category) -> Result<GgmlType, QuantizeError> {
        use Category::*;
        use FileType as F;
        use GgmlType::*;
        let (ftype, shape) = (self.ftype, self.shape);
        let mut t = self.default_type;
        if c == Output || (self.tied_embeddings && c == TokenEmbd) {
            if let Some(o) = self.options.output_tensor_type {
                t = o;
            } else if shape.is_falcon() || !info.dims[0].is_multiple_of(t.block_size() as u64) {
                t = Q8_0;
            } else if t != Q8_0 {
                t = Q6_K;
            }
        } else if c == TokenEmbd {
            // Only the IQ and ternary file types change the embeddings.
        } else if is_attn_v(c) {
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            match ftype {
                F::Q2_K => t = if shape.n_gqa >= 4 { Q4_K } else { Q3_K },
                F::Q2_K_S if shape.n_gqa >= 4 => t = Q4_K,
                F::Q3_K_M => t = if i < 2 { Q5_K } else { Q4_K },
                F::Q3_K_L => t = Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => t = Q6_K,
                F::Q4_K_S if i < 4 => t = Q5_K,
                _ => {}
            }
            if shape.is_70b && matches!(t, Q3_K | Q4_K) {
                t = Q5_K;
            }
            if shape.n_expert == 8 {
                t = Q8_0;
            }
            self.i_attention_wv += 1;
        } else if c == AttnK {
            if shape.n_expert == 8 {
                t = Q8_0;
            }
        } else if c == FfnDown {
            let (i, n) = self.layer_of(self.i_ffn_down, info)?;
            let falcon = shape.is_falcon();
            match ftype {
                F::Q2_K => t = Q3_K,
                F::Q2_K_S if i < n / 8 => t = Q4_K,
                F::Q3_K_M => {
                    t = if i < n / 16 {
                        Q5_K
                    } else if !falcon || use_more_bits(i, n) {
                        Q4_K
                    } else {
                        Q3_K
                    }
                }
                F::Q3_K_L => t = if falcon { Q4_K } else { Q5_K },
                F::Q4_K_M if falcon => {
                    t = if i < n / 16 {
                        Q6_K
                    } else if use_more_bits(i, n) {
                        Q5_K
                    } else {
                        Q4_K
                    }
                }
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => t = Q6_K,
                F::Q4_K_S if !falcon && i < n / 8 => t = Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if c == AttnOutput {
            if shape.is_falcon() {
                if ftype == F::Q3_K_L {
                    t = Q4_K;
                }
            } else if shape.n_expert == 8 {
                if matches!(
                    ftype,
                    F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::Q4_K_S | F::Q4_K_M
                ) {
                    t = Q5_K;
                }
            } else {
                match ftype {
                    F::Q2_K => t = Q3_K,
                    F::Q3_K_M => t = Q4_K,
                    F::Q3_K_L => t = Q5_K,
                    _ => {}
                }
            }
        } else if (c == FfnGate || c == FfnUp) && shape.n_expert > 1 {
            // Only the IQ3_XS mix changes these, but an expert's tensor
            // must still name its layer.
            self.layer_of(0, info)?;
        }
        Ok(t)
    }

    /// `layer_info`: the layer of the `counter`-th tensor of a kind, and the
    /// number of layers. MoE models interleave their experts' tensors, so
    /// there the layer comes from the name.
    fn layer_of(&self, counter: i32, info: &TensorInfo) -> Result<(i32, i32), QuantizeError> {
        let n_layer = self.shape.n_layer.ok_or_else(|| QuantizeError::Metadata {
            key: format!("{}.block_count", self.shape.arch),
            reason: "missing, and the mix of this file type depends on it".into(),
        })? as i32;
        if self.shape.n_expert <= 1 {
            return Ok((counter, n_layer));
        }
        match super::layer_number(&info.name) {
            Some(i) if (0..n_layer).contains(&i) => Ok((i, n_layer)),
            _ => Err(QuantizeError::Metadata {
                key: info.name.clone(),
                reason: format!("no layer in [0, {n_layer}) in the tensor's name"),
            }),
        }
    }

    /// `tensor_type_fallback`: a type whose blocks do not divide the rows
    /// becomes a 32-value type, and F16 if even that does not divide them.
    fn fallback(&mut self, info: &TensorInfo, t: GgmlType) -> GgmlType {
        use GgmlType::*;
        let whole = |t: GgmlType| info.dims[0].is_multiple_of(t.block_size() as u64);
        if whole(t) {
            return t;
        }
        let smaller = match t {
            Q2_K | Q3_K | TQ1_0 | TQ2_0 => Q4_0,
            Q4_K => Q5_0,
            Q5_K => Q5_1,
            Q6_K => Q8_0,
            IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS => IQ4_NL,
            // A 32-value type has nothing smaller but F16.
            t => t,
        };
        let fallen = if whole(smaller) { smaller } else { F16 };
        self.fallbacks.push((info.name.clone(), t, fallen));
        fallen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_for_the_ends_and_every_third_layer() {
        let picked: Vec<i32> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            picked,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
    }

    #[test]
    fn categories_follow_llama_cpp_precedence() {
        assert_eq!(category("blk.0.attn_kv_b.weight"), Category::AttnKvB);
        assert_eq!(category("blk.0.attn_k.weight"), Category::AttnK);
        assert_eq!(category("blk.3.ffn_down_exps.weight"), Category::FfnDown);
        assert_eq!(category("per_layer_token_embd.weight"), Category::TokenEmbd);
        assert_eq!(category("blk.0.attn_k_norm.weight"), Category::Other);
    }

    #[test]
    fn n_dims_ignores_trailing_ones() {
        assert_eq!(n_dims(&[256, 1]), 1);
        assert_eq!(n_dims(&[256, 4, 1]), 2);
        assert_eq!(n_dims(&[1]), 1);
    }
}
