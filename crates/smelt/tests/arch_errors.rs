//! The new architectures' bad or missing hyperparameters and misshapen
//! tensors are clear errors at load, naming the key or tensor: edits of
//! the synthetic models of `scripts/synth_arch.py` (see `common/arch.rs`).

#[path = "common/arch.rs"]
mod arch;
mod common;

use smelt::backend::cpu::CpuBackend;
use smelt::gguf::{GgufFile, GgufWriter, Value};
use smelt::model::{Model, ModelError};

type Meta = Vec<(String, Value)>;
/// (name in the edited file, name in the source file).
type Tensors = Vec<(String, String)>;

/// `arch`'s synthetic model, edited by `edit`, loaded on the CPU.
fn load_edited(
    arch: &str,
    edit: impl FnOnce(&mut Meta, &mut Tensors),
) -> Result<Model, ModelError> {
    let (_, path) = arch::reference(arch);
    let src = GgufFile::open(&path).unwrap();
    let mut meta: Meta = src
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut tensors: Tensors = src
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.name.clone()))
        .collect();
    edit(&mut meta, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.set(k, v);
    }
    for (name, from) in tensors {
        let info = src.tensor_info(&from).unwrap();
        let data = src.tensor_bytes(&from).unwrap();
        w.add_tensor_bytes(name, info.dtype, &info.dims, data)
            .unwrap();
    }
    let out = path.with_extension(format!("edited.{}.gguf", std::process::id()));
    std::fs::write(&out, w.to_bytes()).unwrap();
    let file = GgufFile::open(&out).unwrap();
    let r = Model::load(&file, Box::new(CpuBackend::reference()), &mut |_, _| {});
    drop(file);
    std::fs::remove_file(&out).unwrap();
    r
}

fn set(meta: &mut Meta, key: &str, v: Value) {
    meta.retain(|(k, _)| k != key);
    meta.push((key.to_string(), v));
}

fn bad_key(r: Result<Model, ModelError>, want: &str) {
    match r {
        Err(ModelError::BadConfig { key, .. }) if key == want => {}
        other => panic!("{want}: {:?}", other.err()),
    }
}

#[test]
fn broken_qwen3moe_files_are_errors() {
    load_edited("qwen3moe", |_, _| {}).unwrap();
    // More experts per token than there are.
    bad_key(
        load_edited("qwen3moe", |m, _| {
            set(m, "qwen3moe.expert_used_count", Value::U32(9))
        }),
        "qwen3moe.expert_used_count",
    );
    // A missing count names its key.
    let err = load_edited("qwen3moe", |m, _| {
        m.retain(|(k, _)| k != "qwen3moe.expert_count")
    })
    .err()
    .unwrap();
    assert!(err.to_string().contains("qwen3moe.expert_count"), "{err}");
    // Experts of another width than the file declares.
    let err = load_edited("qwen3moe", |m, _| {
        set(m, "qwen3moe.expert_feed_forward_length", Value::U32(32))
    });
    assert!(
        matches!(&err, Err(ModelError::TensorShape { name, .. }) if name == "blk.0.ffn_gate_exps.weight"),
        "{:?}",
        err.err()
    );
}

#[test]
fn broken_phi3_and_gemma2_files_are_errors() {
    load_edited("phi3", |_, _| {}).unwrap();
    // A fused gate-up of another width than feed_forward_length's two.
    let err = load_edited("phi3", |m, _| {
        set(m, "phi3.feed_forward_length", Value::U32(128))
    });
    assert!(
        matches!(&err, Err(ModelError::TensorShape { name, .. }) if name == "blk.0.ffn_up.weight"),
        "{:?}",
        err.err()
    );
    // One LongRoPE factor set without the other.
    let err = load_edited("phi3", |_, t| {
        t.retain(|(n, _)| n != "rope_factors_short.weight")
    });
    assert!(
        matches!(&err, Err(ModelError::MissingTensor { .. })),
        "{:?}",
        err.err()
    );
    // Neither a fused QKV nor separate ones.
    let err = load_edited("phi3", |_, t| {
        t.retain(|(n, _)| n != "blk.1.attn_qkv.weight")
    });
    assert!(
        matches!(&err, Err(ModelError::MissingTensor { name }) if name == "blk.1.attn_q.weight"),
        "{:?}",
        err.err()
    );

    bad_key(
        load_edited("gemma2", |m, _| {
            set(m, "gemma2.attn_logit_softcapping", Value::F32(0.0))
        }),
        "gemma2.attn_logit_softcapping",
    );
    bad_key(
        load_edited("gemma2", |m, _| {
            set(m, "gemma2.attention.head_count_kv", Value::U32(3))
        }),
        "gemma2.attention.head_count_kv",
    );
}
