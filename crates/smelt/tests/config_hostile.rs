//! Metadata that contradicts the file, or values no model can have, are
//! refused when the config is read, naming the key: a block count smaller
//! than the layers the file holds, a RoPE dimension of 0, and BOS/EOS ids
//! outside the vocabulary.

use smelt::gguf::{Array, GgufWriter, Header, Value};
use smelt::model::{Config, ModelError};
use smelt::quant::GgmlType;

/// A llama header with two layers and ten tokens, edited by `edit`
/// (metadata) and with the layer tensors `layers` (an RMS norm each).
fn header(edit: impl FnOnce(&mut GgufWriter), layers: &[usize]) -> Header {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", 8),
        ("feed_forward_length", 16),
        ("attention.head_count", 2),
        ("context_length", 64),
    ] {
        w.set(format!("llama.{k}"), Value::U32(v));
    }
    w.set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    let tokens = (0..10).map(|i| format!("t{i}")).collect();
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    edit(&mut w);
    for l in layers {
        let norm = vec![0u8; 8 * 4];
        w.add_tensor(
            format!("blk.{l}.attn_norm.weight"),
            GgmlType::F32,
            &[8],
            norm,
        )
        .unwrap();
    }
    Header::parse(&w.to_bytes()).unwrap()
}

fn bad_key(edit: impl FnOnce(&mut GgufWriter), layers: &[usize]) -> (String, String) {
    match Config::from_gguf(&header(edit, layers)) {
        Err(ModelError::BadConfig { key, reason }) => (key, reason),
        other => panic!("expected a BadConfig error, got {other:?}"),
    }
}

#[test]
fn the_untouched_header_is_a_config() {
    let c = Config::from_gguf(&header(|_| {}, &[0, 1])).unwrap();
    assert_eq!((c.n_layer, c.n_rot, c.n_vocab), (2, 4, 10));
}

#[test]
fn block_count_smaller_than_the_tensors() {
    let (key, reason) = bad_key(|_| {}, &[0, 1, 2]);
    assert_eq!(key, "llama.block_count");
    assert!(reason.contains("blk.2.attn_norm.weight"), "{reason}");
}

#[test]
fn rope_dimension_count_zero() {
    let (key, reason) = bad_key(
        |w| {
            w.set("llama.rope.dimension_count", Value::U32(0));
        },
        &[0, 1],
    );
    assert_eq!(key, "llama.rope.dimension_count");
    assert!(reason.contains("is 0"), "{reason}");
}

#[test]
fn bos_and_eos_past_the_vocabulary() {
    for (which, id) in [("bos", 10u32), ("eos", 4_000_000)] {
        let k = format!("tokenizer.ggml.{which}_token_id");
        let (key, reason) = bad_key(
            |w| {
                w.set(k.clone(), Value::U32(id));
            },
            &[0, 1],
        );
        assert_eq!(key, k);
        assert!(reason.contains("outside the vocabulary of 10"), "{reason}");
    }
}
