//! The training examples, short: the CNN's loss curve on the CPU and on
//! the GPU for the first 50 steps with the same seed (within 1e-4
//! relative), learning, checkpoints, and the LSTM learning on a corpus.

use smelt::backend::gpu::GpuOptions;
use smelt_nn::Device;
use smelt_nn::data::Corpus;
use smelt_nn::train::{cnn, rnn};

fn gpu(seed: u64) -> Option<Device> {
    Device::gpu(&GpuOptions::default(), seed)
        .map_err(|e| eprintln!("no GPU adapter ({e}); skipping the GPU half"))
        .ok()
}

#[test]
fn cnn_loss_curves_match_on_cpu_and_gpu() {
    let opts = cnn::CnnOptions {
        steps: 50,
        ..Default::default()
    };
    let mut cpu = Device::cpu(2, opts.seed).unwrap();
    let c = cnn::train(&mut cpu, &opts, &mut |_| {}).unwrap();
    assert!(
        c.losses[49] < c.losses[0] * 0.7,
        "not learning: {:?}",
        c.losses
    );
    let Some(mut g) = gpu(opts.seed) else { return };
    let r = cnn::train(&mut g, &opts, &mut |_| {}).unwrap();
    assert_eq!(r.submissions_per_step, 1);
    for (i, (a, b)) in c.losses.iter().zip(&r.losses).enumerate() {
        let rel = ((a - b) / a).abs();
        assert!(rel < 1e-4, "step {}: cpu {a} gpu {b} ({rel:e})", i + 1);
    }
}

#[test]
fn cnn_learns_and_its_checkpoint_classifies_the_same() {
    let opts = cnn::CnnOptions {
        steps: 300,
        ..Default::default()
    };
    let mut dev = Device::cpu(2, opts.seed).unwrap();
    let run = cnn::train(&mut dev, &opts, &mut |_| {}).unwrap();
    assert!(
        run.accuracy > 0.9,
        "accuracy {} after 300 steps",
        run.accuracy
    );
    let ck = cnn::save(&mut dev, &opts).unwrap();
    let bytes = ck.to_bytes();
    let back = smelt_nn::safetensors::Tensors::from_bytes(&bytes).unwrap();
    let mut fresh = Device::cpu(1, 99).unwrap();
    cnn::load(&mut fresh, &back).unwrap();
    let (_, test) = cnn::split(&opts).unwrap();
    let (acc, preds) = cnn::evaluate(&mut fresh, &test).unwrap();
    let (acc0, preds0) = cnn::evaluate(&mut dev, &test).unwrap();
    assert_eq!(preds, preds0);
    assert_eq!(acc, acc0);
}

#[test]
fn lstm_learns_text_on_cpu_and_gpu_alike() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/graph.rs"))
        .unwrap()
        .repeat(3);
    let corpus = Corpus::from_bytes(text.as_bytes());
    let opts = rnn::RnnOptions {
        steps: 60,
        batch: 8,
        seq: 16,
        hidden: 32,
        embed: 8,
        lr: 1e-2,
        seed: 3,
        profile: false,
    };
    let mut cpu = Device::cpu(2, opts.seed).unwrap();
    let c = rnn::train(&mut cpu, &corpus, &opts, &mut |_| {}).unwrap();
    let first: f32 = c.losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = c.losses[55..].iter().sum::<f32>() / 5.0;
    assert!(last < first * 0.8, "not learning: {first} -> {last}");
    assert!(c.held_out.is_finite());
    let cfg = rnn::config(&corpus, &opts);
    let s = rnn::sample(&mut cpu, &cfg, &corpus.vocab, b"fn ", 50, 0.0, 1).unwrap();
    assert_eq!(s.len(), 50);
    let Some(mut g) = gpu(opts.seed) else { return };
    let opts10 = rnn::RnnOptions { steps: 10, ..opts };
    let mut cpu = Device::cpu(2, opts.seed).unwrap();
    let c = rnn::train(&mut cpu, &corpus, &opts10, &mut |_| {}).unwrap();
    let r = rnn::train(&mut g, &corpus, &opts10, &mut |_| {}).unwrap();
    assert_eq!(r.submissions_per_step, 1);
    for (i, (a, b)) in c.losses.iter().zip(&r.losses).enumerate() {
        assert!(
            ((a - b) / a).abs() < 1e-4,
            "step {}: cpu {a} gpu {b}",
            i + 1
        );
    }
}
