//! Perplexity on the GPU (lavapipe in CI) in its default (fast) mode,
//! computed as llama.cpp's `llama-perplexity -c 512` does: the whole text
//! tokenized with BOS, non-overlapping chunks of 512 tokens whose first
//! token becomes BOS, the second half of each chunk scored. On Debian's
//! Apache-2.0 text (`testdata/gemma/Apache-2.0`, a copy of
//! `/usr/share/common-licenses/Apache-2.0`), SmolLM2-135M Q4_1 and Gemma 3
//! 270M Q4_K_M must each come within 1% of llama.cpp's figure in the shared
//! reference README (15.9411 and 10.1496, every chunk of the text).
//!
//! Gemma 3's logits for the 256 rows of a chunk (262144 each, 256 MiB) are
//! more than lavapipe binds at once (128 MiB): they are kept in pieces
//! (`model/output.rs`).

mod common;

use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};
use smelt::tokenizer::Tokenizer;

const CTX: usize = 512;

/// Perplexity of `model` over the text file `text` in the GPU's default
/// mode, every chunk.
fn gpu_perplexity(model: &str, text: &str) -> f64 {
    let gguf = GgufFile::open(common::model(model)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let text = std::fs::read_to_string(common::testdata(text)).unwrap();
    let tokens = tok.encode(&text, true, false);
    let n_chunks = tokens.len() / CTX;
    assert!(n_chunks >= 2, "{} tokens", tokens.len());

    let gpu = GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter (lavapipe in CI)");
    let model = Model::load(&gguf, Box::new(gpu), &mut |_, _| {}).unwrap();
    let mut s = Session::new(
        model,
        SessionParams {
            n_ctx: Some(CTX),
            n_outputs: CTX / 2,
            ..SessionParams::default()
        },
    )
    .unwrap();
    let vocab = s.config().n_vocab;
    let first = CTX / 2;
    let (mut nll, mut count) = (0f64, 0usize);
    for c in 0..n_chunks {
        let mut chunk = tokens[c * CTX..(c + 1) * CTX].to_vec();
        if tok.add_bos() {
            chunk[0] = tok.bos().unwrap();
        }
        let mut batch = Batch::default();
        for (i, &t) in chunk.iter().enumerate() {
            // Logits of position i predict token i + 1; llama.cpp scores
            // predictions of tokens first + 1 .. CTX.
            batch.push(t, i, 0, i >= first && i + 1 < CTX);
        }
        s.truncate(0, 0);
        let logits = s.decode(&batch).unwrap().to_vec();
        for (j, row) in logits.chunks_exact(vocab).enumerate() {
            let target = chunk[first + j + 1] as usize;
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let z = row
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln()
                + max;
            nll += z - row[target] as f64;
            count += 1;
        }
        eprintln!("[{}] ppl {:.4}", c + 1, (nll / count as f64).exp());
    }
    eprintln!(
        "{n_chunks} chunks, logits in {} piece(s)",
        s.n_logit_pieces()
    );
    (nll / count as f64).exp()
}

fn within_one_percent(model: &str, text: &str, reference: f64) {
    let ppl = gpu_perplexity(model, text);
    let rel = (ppl - reference).abs() / reference;
    eprintln!(
        "{model} on {text}: GPU perplexity {ppl:.4} vs llama.cpp {reference} ({:.2}%)",
        rel * 100.0
    );
    assert!(
        rel <= 0.01,
        "perplexity {ppl:.4} is {:.2}% from llama.cpp's {reference}",
        rel * 100.0
    );
}

#[test]
fn smollm2_gpu_perplexity_on_apache_2_is_llama_cpps() {
    within_one_percent(common::SMOLLM2, "gemma/Apache-2.0", 15.9411);
}

#[test]
#[ignore = "Gemma 3 over the whole text on lavapipe is over CI's budget; gpu_cli checks one chunk"]
fn gemma3_gpu_perplexity_on_apache_2_is_llama_cpps() {
    within_one_percent(common::GEMMA3, "gemma/Apache-2.0", 10.1496);
}
