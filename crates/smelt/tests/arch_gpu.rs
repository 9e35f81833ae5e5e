//! Every architecture on the GPU (lavapipe in CI) against the CPU backend
//! on the same synthetic model (`common/arch.rs`; `arch_cpu.rs` checks the
//! CPU against llama.cpp): GPU ops against CPU ops.
//!
//! Per architecture and recorded context size, its longest recorded
//! sequence (longer than the sliding windows) is run twice on each backend:
//! - prefill: every position in one batch, each position's logits;
//! - prefill of its first half, then greedy decode steps one token at a
//!   time, fed the CPU's choice so both backends see the same tokens.
//!
//! - the hidden states embeddings are pooled from (`Session::hidden`) of
//!   every position, by relative L2 error per row.
//!
//! At every position and step, the CPU's ten most likely tokens' log-probs
//! must agree within the mode's bound (the exact mode rounds as ggml and
//! the CPU do; the fast mode runs plain f32), and the GPU's greedy token
//! must be the CPU's where the CPU's top-1 leads by `arch::CLEAR_MARGIN`.

#[path = "common/arch.rs"]
mod arch;
mod common;

use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;
use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::model::{Batch, Session};

/// |Δ log-prob| bounds against the CPU: the exact mode's, the fast mode's.
const EXACT: f64 = 1e-3;
const FAST: f64 = 2e-2;

/// Relative L2 error bounds of a row's hidden state: exact mode, fast mode.
const HIDDEN_EXACT: f64 = 1e-4;
const HIDDEN_FAST: f64 = 1e-2;

/// Greedy decode steps after the prefilled half.
const DECODE_STEPS: usize = 6;

fn gpu(quantize_activations: bool) -> Box<dyn Backend> {
    let opts = GpuOptions {
        quantize_activations,
        ..GpuOptions::default()
    };
    Box::new(GpuBackend::new(&opts).expect("a GPU adapter (lavapipe in CI)"))
}

/// Log-softmax in f64.
fn log_probs(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z = logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&l| l as f64 - z).collect()
}

/// What the GPU gave against the CPU.
#[derive(Debug, Default)]
struct Report {
    /// Largest |Δ log-prob| over the CPU's top 10, and where.
    max_delta: f64,
    worst: String,
    compared: usize,
    /// Clear greedy steps compared, and the first disagreement.
    greedy_steps: usize,
    mismatch: Option<String>,
}

impl Report {
    /// Compares one position's logits.
    fn position(&mut self, cpu: &[f32], gpu: &[f32], at: &str) {
        let (lc, lg) = (log_probs(cpu), log_probs(gpu));
        let mut order: Vec<usize> = (0..lc.len()).collect();
        order.select_nth_unstable_by(10, |&a, &b| lc[b].total_cmp(&lc[a]));
        order.truncate(10);
        order.sort_by(|&a, &b| lc[b].total_cmp(&lc[a]));
        for &id in &order {
            let d = (lc[id] - lg[id]).abs();
            if d > self.max_delta {
                (self.max_delta, self.worst) = (d, format!("{at}, token {id}"));
            }
        }
        self.compared += 1;
        if lc[order[0]] - lc[order[1]] >= arch::CLEAR_MARGIN {
            self.greedy_steps += 1;
            let ours = smelt::sample::argmax(gpu) as usize;
            if ours != order[0] && self.mismatch.is_none() {
                self.mismatch = Some(format!("{at}: GPU {ours}, CPU {}", order[0]));
            }
        }
    }
}

/// The hidden state of every position of `tokens` in one batch.
fn hidden(s: &mut Session, tokens: &[u32]) -> Vec<f32> {
    s.truncate(0, 0);
    s.hidden(&Batch::sequence(tokens, 0, 0)).unwrap().to_vec()
}

/// `‖a - b‖ / ‖a‖`.
fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let norm: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum();
    (diff / norm).sqrt()
}

/// The logits of every position of `tokens` in one batch.
fn prefill(s: &mut Session, tokens: &[u32]) -> Vec<f32> {
    let mut batch = Batch::default();
    for (i, &t) in tokens.iter().enumerate() {
        batch.push(t, i, 0, true);
    }
    s.truncate(0, 0);
    s.decode(&batch).unwrap().to_vec()
}

fn check(arch: &str, quantize_activations: bool, bound: f64) {
    let (runs, model) = arch::reference(arch);
    for run in &runs {
        check_run(arch, &model, run, quantize_activations, bound);
    }
}

fn check_run(
    arch: &str,
    model: &std::path::Path,
    run: &arch::Run,
    quantize_activations: bool,
    bound: f64,
) {
    let tokens = run
        .sequences
        .iter()
        .map(|s| &s.0)
        .max_by_key(|t| t.len())
        .unwrap();
    let n = tokens.len();
    let mut cpu = arch::session(model, Box::new(CpuBackend::new_exact(2).unwrap()), run, n);
    let mut gpu = arch::session(model, gpu(quantize_activations), run, n);
    let vocab = cpu.config().n_vocab;
    let mut r = Report::default();

    let (c, g) = (prefill(&mut cpu, tokens), prefill(&mut gpu, tokens));
    for i in 0..n {
        let row = i * vocab..(i + 1) * vocab;
        r.position(&c[row.clone()], &g[row], &format!("prefill position {i}"));
    }

    let e = cpu.config().n_embd;
    let (hc, hg) = (hidden(&mut cpu, tokens), hidden(&mut gpu, tokens));
    let hidden_error = hc
        .chunks(e)
        .zip(hg.chunks(e))
        .map(|(c, g)| relative_l2(c, g))
        .fold(0.0, f64::max);
    let hidden_bound = if quantize_activations {
        HIDDEN_EXACT
    } else {
        HIDDEN_FAST
    };
    assert!(
        hc.len() == n * e && hidden_error <= hidden_bound,
        "{arch}: the GPU's hidden states differ from the CPU's by {hidden_error:.2e} > {hidden_bound:.0e}"
    );

    let prompt = &tokens[..n / 2];
    let last = |l: Vec<f32>| l[l.len() - vocab..].to_vec();
    let (mut c, mut g) = (
        last(prefill(&mut cpu, prompt)),
        last(prefill(&mut gpu, prompt)),
    );
    for step in 0..DECODE_STEPS {
        r.position(&c, &g, &format!("decode step {step}"));
        let next = smelt::sample::argmax(&c);
        let one = Batch::sequence(&[next], prompt.len() + step, 0);
        c = cpu.decode(&one).unwrap().to_vec();
        g = gpu.decode(&one).unwrap().to_vec();
    }

    eprintln!(
        "{arch}, n_ctx {} (GPU exact: {quantize_activations}): {r:?}, hidden {hidden_error:.2e}",
        run.n_ctx
    );
    assert!(
        r.compared > 0 && r.greedy_steps > 0,
        "{arch}: nothing compared"
    );
    assert!(
        r.max_delta <= bound,
        "{arch}: the GPU's log-probs differ from the CPU's by {:.2e} > {bound:.0e} at {}",
        r.max_delta,
        r.worst
    );
    assert!(r.mismatch.is_none(), "{arch}: {:?}", r.mismatch);
}

#[test]
fn qwen2_gpu_exact() {
    check("qwen2", true, EXACT);
}

#[test]
#[ignore = "fast mode is 0.34-0.51 nats from the CPU on the peaked synthetic Qwen models (issue 25: bound 2e-2)"]
fn qwen2_gpu_fast() {
    check("qwen2", false, FAST);
}

#[test]
fn qwen3_gpu_exact() {
    check("qwen3", true, EXACT);
}

#[test]
#[ignore = "fast mode is 0.34-0.51 nats from the CPU on the peaked synthetic Qwen models (issue 25: bound 2e-2)"]
fn qwen3_gpu_fast() {
    check("qwen3", false, FAST);
}

#[test]
fn mistral_gpu_exact() {
    check("mistral", true, EXACT);
}

#[test]
fn mistral_gpu_fast() {
    check("mistral", false, FAST);
}

#[test]
#[ignore = "decode step 4 is 0.09 nats from the CPU: the attention's soft-cap tanh is 1 ulp from glibc's tanhf on some scores, which the f16 value accumulator turns into a step (docs/perf-notes.md)"]
fn gemma2_gpu_exact() {
    check("gemma2", true, EXACT);
}

#[test]
#[ignore = "not passing yet: see gemma2_gpu_exact"]
fn gemma2_gpu_fast() {
    check("gemma2", false, FAST);
}

#[test]
fn phi3_gpu_exact() {
    check("phi3", true, EXACT);
}

#[test]
#[ignore = "fast mode is about 1 nat from the CPU on the peaked synthetic phi3 (issue 25: bound 2e-2)"]
fn phi3_gpu_fast() {
    check("phi3", false, FAST);
}

#[test]
fn qwen3moe_gpu_exact() {
    check("qwen3moe", true, EXACT);
}

#[test]
#[ignore = "fast mode is 0.53 nats from the CPU on the peaked synthetic qwen3moe, as qwen3_gpu_fast is 0.37 (the MoE ops alone agree to 1e-9: gpu_moe.rs)"]
fn qwen3moe_gpu_fast() {
    check("qwen3moe", false, FAST);
}
