//! The quantized KV cache (`--cache-type q8_0` / `q4_0`) against the F16
//! cache: perplexity on a short text (the first chunks of Debian's
//! Apache-2.0 license, `testdata/gemma/Apache-2.0`) must stay within 0.5%
//! (Q8_0) and 2% (Q4_0) of the F16 cache's on SmolLM2 (head dim 64), and
//! within 0.5% (Q8_0) and llama.cpp's own loss (Q4_0) on Gemma 3 (head dim
//! 256, sliding-window layers), with the cache written by
//! `set_rows` and read by the prompt's attention (one-row order and
//! tiles) and by single-row decode steps, on the CPU and on the GPU
//! (lavapipe in CI). A head dim that is not whole blocks is refused with
//! an error that says so.

mod common;

use smelt::backend::Backend;
use smelt::backend::cpu::CpuBackend;
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};
use smelt::quant::GgmlType;
use smelt::tokenizer::Tokenizer;

/// How much of the text a perplexity reads.
#[derive(Clone, Copy)]
struct Span {
    /// Positions per chunk: the first half is context, the second scored.
    ctx: usize,
    /// Chunks scored.
    chunks: usize,
    /// Rows of each chunk fed one at a time after the prompt, so that the
    /// decode path (single rows over a long cache) is scored too.
    decoded: usize,
}

/// A few hundred tokens, for the CPU.
const CPU_SPAN: Span = Span {
    ctx: 128,
    chunks: 2,
    decoded: 16,
};

/// One short chunk, for lavapipe: its 32 scored tokens separate a broken
/// cache (a unit of perplexity or more) from the bounds, within CI's time.
const GPU_SPAN: Span = Span {
    ctx: 64,
    chunks: 1,
    decoded: 8,
};

/// Perplexity of `model` over `span` of the text with a `kv_type` cache on
/// `backend`, scored as llama.cpp's `llama-perplexity` scores a chunk (its
/// second half).
fn perplexity(backend: Box<dyn Backend>, model: &str, kv_type: GgmlType, span: Span) -> f64 {
    let Span {
        ctx,
        chunks,
        decoded,
    } = span;
    let gguf = GgufFile::open(common::model(model)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let text = std::fs::read_to_string(common::testdata("gemma/Apache-2.0")).unwrap();
    let tokens = tok.encode(&text, true, false);
    assert!(tokens.len() >= chunks * ctx, "{} tokens", tokens.len());
    let model = Model::load(&gguf, backend, &mut |_, _| {}).unwrap();
    let mut s = Session::new(
        model,
        SessionParams {
            n_ctx: Some(ctx),
            n_outputs: ctx / 2,
            kv_type,
            ..SessionParams::default()
        },
    )
    .unwrap();
    let vocab = s.config().n_vocab;
    let first = ctx / 2;
    let prompt = ctx - decoded;
    let (mut nll, mut count) = (0f64, 0usize);
    let mut score = |row: &[f32], target: u32| {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let z = row
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln()
            + max;
        nll += z - row[target as usize] as f64;
        count += 1;
    };
    for c in 0..chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if tok.add_bos() {
            chunk[0] = tok.bos().unwrap();
        }
        s.truncate(0, 0);
        // The prompt in one batch, its rows from `first` scored.
        let mut batch = Batch::default();
        for (i, &t) in chunk[..prompt].iter().enumerate() {
            batch.push(t, i, 0, i >= first);
        }
        let logits = s.decode(&batch).unwrap().to_vec();
        for (j, row) in logits.chunks_exact(vocab).enumerate() {
            score(row, chunk[first + j + 1]);
        }
        // The rest one row at a time, the last row predicting nothing.
        for i in prompt..ctx - 1 {
            let mut batch = Batch::default();
            batch.push(chunk[i], i, 0, true);
            let logits = s.decode(&batch).unwrap().to_vec();
            score(&logits, chunk[i + 1]);
        }
    }
    (nll / count as f64).exp()
}

/// F16, Q8_0 and Q4_0 caches of `model` on `make()`'s backend: the
/// quantized ones within `bounds` (Q8_0, Q4_0) of the F16 one.
fn within_bounds(model: &str, bounds: [f64; 2], make: impl Fn() -> Box<dyn Backend>, span: Span) {
    let f16 = perplexity(make(), model, GgmlType::F16, span);
    for (kv_type, bound) in [GgmlType::Q8_0, GgmlType::Q4_0].into_iter().zip(bounds) {
        let ppl = perplexity(make(), model, kv_type, span);
        let rel = (ppl - f16).abs() / f16;
        eprintln!(
            "{model}: {kv_type} cache perplexity {ppl:.4} vs F16 {f16:.4} ({:+.3}%)",
            (ppl / f16 - 1.0) * 100.0
        );
        assert!(
            rel <= bound,
            "{model}: the {kv_type} cache's perplexity {ppl:.4} is {:.2}% from F16's {f16:.4} (bound {:.1}%)",
            rel * 100.0,
            bound * 100.0
        );
    }
}

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new(2).unwrap())
}

#[test]
fn smollm2_cpu_quantized_cache_perplexity_is_f16s() {
    within_bounds(common::SMOLLM2, [0.005, 0.02], cpu, CPU_SPAN);
}

/// Gemma 3 270M loses more to a Q4_0 cache than the 2% of SmolLM2: on
/// these chunks llama.cpp's `llama-perplexity -c 128 --chunks 2 -ctk q4_0
/// -ctv q4_0 -fa on`, its cache rotated as this one is, is 13.9% above
/// its F16 cache's; the bound keeps this cache no worse than that.
#[test]
fn gemma3_cpu_quantized_cache_perplexity_is_f16s() {
    within_bounds(common::GEMMA3, [0.005, 0.139], cpu, CPU_SPAN);
}

#[test]
fn unusable_cache_types_are_refused_in_words() {
    use smelt::model::kv_cache::check_type;
    let b = CpuBackend::new(1).unwrap();
    for dtype in [GgmlType::F16, GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0] {
        check_type(&b, dtype, 64).unwrap();
    }
    let e = check_type(&b, GgmlType::Q5_K, 64).unwrap_err().to_string();
    assert!(e.contains("f16, f32, q8_0, q4_0"), "{e}");
    // Gemma 2's head dim is 256, some models' 80 or 96; 48 splits a block.
    check_type(&b, GgmlType::Q8_0, 96).unwrap();
    let e = check_type(&b, GgmlType::Q4_0, 48).unwrap_err().to_string();
    assert!(e.contains("multiple of 32") && e.contains("48"), "{e}");
    check_type(&b, GgmlType::F16, 48).unwrap();
}

/// The GPU in the exact mode: an F16 cache and a block cache then differ
/// only by the cache's rounding. In the fast mode they also take
/// different attention kernels (the block caches' round less), which on
/// 32 scored tokens moved the Q8_0 cache's perplexity by 1.3%, below the
/// F16 cache's: noise of the kernels, not of the cache.
fn gpu() -> Box<dyn Backend> {
    use smelt::backend::gpu::{GpuBackend, GpuOptions};
    Box::new(GpuBackend::new(&GpuOptions::exact()).expect("a GPU adapter (lavapipe in CI)"))
}

/// On the CPU's span (126 scored tokens; `GPU_SPAN`'s 32 are too few for a
/// 0.5% bound) lavapipe holds the bounds, but takes many times CI's share
/// on 2 cores: `cargo test --release --test kv_quant -- --ignored`
/// (docs/perf-notes.md). `gpu_kv_blocks` holds the GPU kernels to the
/// CPU's on the same cache bytes in CI.
#[test]
#[ignore = "lavapipe on 126 scored tokens is over CI's budget; see the comment"]
fn smollm2_gpu_quantized_cache_perplexity_is_f16s() {
    within_bounds(common::SMOLLM2, [0.005, 0.02], gpu, CPU_SPAN);
}

/// Gemma 3's 262144-value logits make even one chunk on lavapipe several
/// times CI's share: `cargo test --release --test kv_quant -- --ignored`.
#[test]
#[ignore = "Gemma 3 on lavapipe is over CI's budget"]
fn gemma3_gpu_quantized_cache_perplexity_is_f16s() {
    within_bounds(common::GEMMA3, [0.005, 0.139], gpu, GPU_SPAN);
}
