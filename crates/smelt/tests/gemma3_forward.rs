//! The Gemma 3 forward pass, on the CPU and GPU backends, against an
//! independent numpy implementation (`testdata/gemma/gemma3_ref.py`) on a
//! small random model it writes, with
//! a sequence four times its sliding window; Gemma 3's hyperparameters
//! against llama.cpp's rules; and broken Gemma 3 files, which must fail to
//! load with errors that say why.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::gguf::{GgufFile, GgufWriter, Value};
use smelt::model::{Batch, Config, Model, ModelError, Session, SessionParams};
use smelt::quant::GgmlType;

/// A fresh directory for one test's files.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smelt-gemma3-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the numpy reference: writes `model.gguf` and the logits of every
/// position of `ids` into `dir`.
fn numpy_reference(dir: &Path, ids: &[u32]) -> Vec<f32> {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let out = Command::new("python3")
        .arg(common::testdata("gemma/gemma3_ref.py"))
        .arg(dir)
        .arg(ids.join(","))
        .output()
        .expect("python3 must be installed for the reference checks");
    assert!(
        out.status.success(),
        "gemma3_ref.py failed (are `gguf` and `numpy` installed? scripts/test.sh installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join("logits.f32")).unwrap();
    bytemuck::pod_collect_to_vec(&bytes)
}

fn load(path: &Path, backend: Box<dyn Backend>) -> Result<Model, ModelError> {
    let file = GgufFile::open(path)?;
    Model::load(&file, backend, &mut |_, _| {})
}

/// Normalised mean squared error `Σ(a−b)² / Σb²`; NaN anywhere fails.
fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan(), "NaN at {i}");
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    num / den.max(1e-30)
}

/// The logits of every position: a prompt of `n_prompt` tokens in one
/// batch, then the rest one token per step, as generation runs.
fn run(s: &mut Session, ids: &[u32], n_prompt: usize) -> Vec<f32> {
    let mut prompt = Batch::default();
    for (i, &t) in ids[..n_prompt].iter().enumerate() {
        prompt.push(t, i, 0, true);
    }
    let mut logits = s.decode(&prompt).unwrap().to_vec();
    for (i, &t) in ids.iter().enumerate().skip(n_prompt) {
        logits.extend_from_slice(s.decode(&Batch::sequence(&[t], i, 0)).unwrap());
    }
    logits
}

#[test]
fn forward_matches_numpy_reference() {
    let dir = temp_dir("numpy");
    // 20 positions over a window of 5: most keys fall out of the sliding
    // layers' view.
    let ids: Vec<u32> = (0..20).map(|i| (i * 37 + 11) % 300).collect();
    let want = numpy_reference(&dir, &ids);
    let model_path = dir.join("model.gguf");
    let gpu = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter (lavapipe in CI)");
    let gpu_exact = GpuBackend::new(&GpuOptions::exact()).unwrap();
    let cases: [(&str, Box<dyn Backend>, GgmlType, f64); 5] = [
        // The reference ops in f64 sums, F32 cache: f32 storage only.
        (
            "cpu-ref, F32 cache",
            Box::new(CpuBackend::reference()),
            GgmlType::F32,
            1e-10,
        ),
        // The fast ops round as ggml does (8-bit activations, f16 cache).
        (
            "cpu, F32 cache",
            Box::new(CpuBackend::new(2).unwrap()),
            GgmlType::F32,
            2e-4,
        ),
        (
            "cpu, F16 cache",
            Box::new(CpuBackend::new(2).unwrap()),
            GgmlType::F16,
            2e-4,
        ),
        // Every op Gemma 3 needs, on the GPU backend in both modes.
        ("gpu, F16 cache", Box::new(gpu), GgmlType::F16, 2e-4),
        (
            "gpu exact, F16 cache",
            Box::new(gpu_exact),
            GgmlType::F16,
            2e-4,
        ),
    ];
    for (what, backend, kv_type, tol) in cases {
        let model = load(&model_path, backend).unwrap();
        let params = SessionParams {
            n_ctx: Some(32),
            n_outputs: 8,
            kv_type,
            ..SessionParams::default()
        };
        let mut s = Session::new(model, params).unwrap();
        let got = run(&mut s, &ids, 8);
        let e = nmse(&got, &want);
        eprintln!("{what}: nmse {e:e}");
        assert!(e <= tol, "{what}: nmse {e:e} > {tol:e}");
        // Each position's top token too, where the reference is clear.
        for (pos, (g, w)) in got.chunks(300).zip(want.chunks(300)).enumerate() {
            let top = smelt::sample::argmax(w);
            let mut sorted = w.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            if sorted[0] - sorted[1] > 0.1 {
                assert_eq!(smelt::sample::argmax(g), top, "{what}: position {pos}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn config_follows_llama_cpp() {
    let file = GgufFile::open(common::model(common::GEMMA3)).unwrap();
    let c = Config::from_gguf(&file).unwrap();
    assert_eq!(c.arch.name(), "gemma3");
    assert_eq!((c.n_layer, c.n_embd, c.n_ff), (18, 640, 2048));
    assert_eq!(
        (c.n_head, c.n_head_kv, c.head_dim, c.n_rot),
        (4, 1, 256, 256)
    );
    // llama.cpp's `set_swa_pattern(6)`: layers 5, 11 and 17 are global.
    let global: Vec<usize> = (0..c.n_layer).filter(|&i| !c.swa_layers[i]).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!(c.n_swa, 512);
    assert_eq!((c.rope_freq_base, c.rope_freq_scale), (1e6, 1.0));
    assert_eq!((c.rope_freq_base_swa, c.rope_freq_scale_swa), (1e4, 1.0));
    // query_pre_attn_scalar = key_length = 256.
    assert_eq!(c.attn_scale, 1.0 / 16.0);
    assert_eq!(c.n_vocab, 262_144);
}

/// The numpy model's file rewritten with `edit` applied to its metadata and
/// its tensors (pairs of the name written and the source tensor whose data
/// it takes), loaded on the CPU.
fn load_edited(
    src: &GgufFile,
    dir: &Path,
    edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<(String, String)>),
) -> Result<Model, ModelError> {
    let mut meta: Vec<(String, Value)> = src
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut tensors: Vec<(String, String)> = src
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
    let path = dir.join("edited.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    load(&path, Box::new(CpuBackend::reference()))
}

#[test]
fn broken_gemma3_files_are_errors() {
    let dir = temp_dir("broken");
    numpy_reference(&dir, &[1]);
    let src = GgufFile::open(dir.join("model.gguf")).unwrap();
    let set = |meta: &mut Vec<(String, Value)>, key: &str, v: Value| {
        meta.retain(|(k, _)| k != key);
        meta.push((key.to_string(), v));
    };

    // The untouched file loads.
    load_edited(&src, &dir, |_, _| {}).unwrap();

    let err = load_edited(&src, &dir, |m, _| {
        set(m, "gemma3.attention.value_length", Value::U32(16))
    });
    assert!(
        matches!(&err, Err(ModelError::BadConfig { key, .. }) if key == "gemma3.attention.value_length"),
        "{:?}",
        err.err()
    );

    // Without a window every layer is global, and the logits are capped
    // where the file says (as llama.cpp runs it); a cap must be positive.
    let model = load_edited(&src, &dir, |m, _| {
        m.retain(|(k, _)| k != "gemma3.attention.sliding_window");
        set(m, "gemma3.final_logit_softcapping", Value::F32(30.0));
    })
    .unwrap();
    let c = model.config();
    assert_eq!((c.n_swa, c.final_softcap), (0, Some(30.0)));
    assert!(c.swa_layers.iter().all(|&s| !s));
    let err = load_edited(&src, &dir, |m, _| {
        set(m, "gemma3.final_logit_softcapping", Value::F32(-1.0));
    });
    assert!(
        matches!(&err, Err(ModelError::BadConfig { key, .. }) if key == "gemma3.final_logit_softcapping"),
        "{:?}",
        err.err()
    );

    let err = load_edited(&src, &dir, |_, tensors| {
        tensors.retain(|(name, _)| name != "blk.3.attn_q_norm.weight")
    });
    assert!(
        matches!(&err, Err(ModelError::MissingTensor { name }) if name == "blk.3.attn_q_norm.weight"),
        "{:?}",
        err.err()
    );

    // Layer 2's post-FFN norm (64 values) holding a head norm (32 values).
    let err = load_edited(&src, &dir, |_, tensors| {
        for (name, from) in tensors.iter_mut() {
            if name == "blk.2.post_ffw_norm.weight" {
                *from = "blk.2.attn_k_norm.weight".into();
            }
        }
    });
    assert!(
        matches!(&err, Err(ModelError::TensorShape { name, .. }) if name == "blk.2.post_ffw_norm.weight"),
        "{:?}",
        err.err()
    );
    std::fs::remove_dir_all(&dir).ok();
}
