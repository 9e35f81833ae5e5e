//! A layer split (`SplitBackend`) over two devices that are the same GPU
//! adapter opened twice (lavapipe in CI), against that adapter alone, on
//! the synthetic models of `common/arch.rs`: a prefill, then decode steps.
//!
//! - exact mode: every logit equal, bit for bit (the same kernels run the
//!   same ops; only where they run differs);
//! - fast mode: within the fast mode's bound against the exact CPU
//!   (`arch_gpu.rs`), here against the single device;
//! - the boundary is crossed by copies, counted per forward pass, and the
//!   split makes one submission per device per pass.
//!
//! gemma2 (3 layers, the output tied to the token embeddings, kept on
//! both ends of the split) and phi3 (2 layers, fused
//! QKV, LongRoPE's factor tensors on every device, its own output
//! projection on the last device).

#[path = "common/arch.rs"]
mod arch;
mod common;

use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::backend::split::{Placement, SplitBackend, SplitOptions};
use smelt::backend::{Backend, DeviceStats};
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};

/// Prompt rows prefilled in one batch, then decode steps.
const PROMPT: usize = 12;
const DECODE_STEPS: usize = 4;

/// |Δ logit| bound of the fast mode between two placements of one model.
const FAST: f32 = 1e-3;

fn gpu(exact: bool) -> Box<dyn Backend> {
    let opts = if exact {
        GpuOptions::exact()
    } else {
        GpuOptions::default()
    };
    Box::new(GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)"))
}

fn split(
    exact: bool,
    model: &std::path::Path,
    layers: Vec<std::ops::Range<usize>>,
) -> Box<dyn Backend> {
    let devices = (0..layers.len()).map(|_| gpu(exact)).collect();
    let placement = Placement::of_file(layers, &GgufFile::open(model).unwrap());
    Box::new(SplitBackend::new(devices, placement, SplitOptions::default()).unwrap())
}

fn session(model: &std::path::Path, backend: Box<dyn Backend>) -> Session {
    let gguf = GgufFile::open(model).unwrap();
    let model = Model::load(&gguf, backend, &mut |_, _| {}).unwrap();
    let params = SessionParams {
        n_ctx: Some(64),
        n_outputs: PROMPT,
        ..SessionParams::default()
    };
    Session::new(model, params).unwrap()
}

/// Every position's logits of a prefill of `PROMPT` tokens, then of
/// `DECODE_STEPS` single-token steps (fed fixed tokens, so both runs see
/// the same input), one after another.
fn logits(s: &mut Session) -> Vec<f32> {
    let vocab = s.config().n_vocab as u32;
    let token = |i: usize| (i as u32 * 7919 + 13) % vocab;
    let mut batch = Batch::default();
    for pos in 0..PROMPT {
        batch.rows.push(smelt::model::BatchRow {
            token: token(pos),
            pos,
            seq: 0,
            logits: true,
        });
    }
    let mut all = s.decode(&batch).unwrap().to_vec();
    for pos in PROMPT..PROMPT + DECODE_STEPS {
        let step = Batch::sequence(&[token(pos)], pos, 0);
        all.extend_from_slice(s.decode(&step).unwrap());
    }
    all
}

fn model(arch: &str) -> std::path::PathBuf {
    arch::reference(arch).1
}

/// Copies and submissions per device during `DECODE_STEPS` decode steps.
fn decode_work(s: &mut Session, start: usize) -> (Vec<DeviceStats>, Vec<DeviceStats>) {
    let before = s.model().backend_device_stats();
    for pos in start..start + DECODE_STEPS {
        s.decode(&Batch::sequence(&[1], pos, 0)).unwrap();
    }
    (before, s.model().backend_device_stats())
}

fn exact_split_equals_one_device(arch: &str, layers: Vec<std::ops::Range<usize>>) {
    let path = model(arch);
    let one = logits(&mut session(&path, gpu(true)));
    let mut s = session(&path, split(true, &path, layers));
    let two = logits(&mut s);
    assert_eq!(one.len(), two.len());
    let differ = one
        .iter()
        .zip(&two)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{arch}: {differ} of {} logits differ", one.len());

    // Each decode step crosses the boundary once per device after the
    // first, and each device submits once.
    let (before, after) = decode_work(&mut s, PROMPT + DECODE_STEPS);
    for (d, (b, a)) in before.iter().zip(&after).enumerate() {
        let copies = a.copies_in.count - b.copies_in.count;
        let submissions = a.stats.submissions - b.stats.submissions;
        eprintln!(
            "{arch} device {d}: {copies} copies ({} bytes), {submissions} submissions in {DECODE_STEPS} steps",
            a.copies_in.bytes - b.copies_in.bytes
        );
        assert_eq!(submissions, DECODE_STEPS as u64, "{arch} device {d}");
        let expected = if d == 0 { 0 } else { DECODE_STEPS as u64 };
        assert_eq!(copies, expected, "{arch} device {d}");
    }
}

#[test]
fn gemma2_exact_split_is_bit_for_bit() {
    exact_split_equals_one_device("gemma2", vec![0..2, 2..3]);
}

#[test]
fn phi3_untied_output_exact_split_is_bit_for_bit() {
    exact_split_equals_one_device("phi3", vec![0..1, 1..2]);
}

#[test]
fn fast_split_is_within_the_fast_bound() {
    let path = model("phi3");
    let one = logits(&mut session(&path, gpu(false)));
    let two = logits(&mut session(&path, split(false, &path, vec![0..1, 1..2])));
    let worst = one
        .iter()
        .zip(&two)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("phi3 fast: largest |Δ logit| {worst:e}");
    assert!(worst <= FAST, "largest |Δ logit| {worst} over {FAST}");
}

#[test]
fn a_weight_of_no_layer_is_refused() {
    // qwen3 has 2 layers; a split of one layer lacks layer 1.
    let path = model("qwen3");
    let gguf = GgufFile::open(&path).unwrap();
    let err = Model::load(
        &gguf,
        split(false, &path, std::iter::once(0..1).collect()),
        &mut |_, _| {},
    )
    .err()
    .expect("layer 1 has no device");
    let msg = err.to_string();
    assert!(msg.contains("blk.1.") && msg.contains("no layer"), "{msg}");
}
