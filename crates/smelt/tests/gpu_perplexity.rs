//! Perplexity on the GPU (lavapipe in CI), computed as llama.cpp's
//! `llama-perplexity -c 512` does: the whole text tokenized with BOS,
//! non-overlapping chunks of 512 tokens whose first token becomes BOS, the
//! second half of each chunk scored. SmolLM2-135M Q4_1 on Debian's
//! Apache-2.0 text must come within 1% of llama.cpp's 15.9411 (the shared
//! reference README).

mod common;

use smelt::backend::gpu::{GpuBackend, GpuOptions};
use smelt::gguf::GgufFile;
use smelt::model::{Batch, Model, Session, SessionParams};
use smelt::tokenizer::Tokenizer;

const CTX: usize = 512;

#[test]
fn smollm2_gpu_perplexity_on_apache_2_is_llama_cpps() {
    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let text = std::fs::read_to_string("/usr/share/common-licenses/Apache-2.0").unwrap();
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
    let ppl = (nll / count as f64).exp();
    let reference = 15.9411;
    let rel = (ppl - reference).abs() / reference;
    eprintln!(
        "GPU perplexity {ppl:.4} vs llama.cpp {reference} ({:.2}%)",
        rel * 100.0
    );
    assert!(
        rel <= 0.01,
        "perplexity {ppl:.4} is {:.2}% from llama.cpp's {reference}",
        rel * 100.0
    );
}
