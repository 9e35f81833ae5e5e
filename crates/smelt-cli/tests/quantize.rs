//! `smelt quantize`, end to end: the files it writes are checked with the
//! `gguf` Python package (`scripts/quant_ref.py check-requant`): metadata
//! copied with llama.cpp's `general.file_type`, tensor types, and tensor
//! bytes equal to `gguf.quants.quantize` of the source's values.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;
#[path = "../../smelt/tests/quant_ref/mod.rs"]
mod quant_ref;

use std::path::Path;
use std::process::{Command, Output};

use quant_ref::TempDir;
use smelt::gguf::{GgufWriter, Value};
use smelt::quant::{GgmlType, f32_to_f16};

fn smelt_quantize(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .arg("quantize")
        .args(args)
        .output()
        .expect("run smelt")
}

fn quantize_ok(src: &Path, out: &Path, ty: &str, extra: &[&str]) {
    let mut args = vec![src.as_os_str(), out.as_os_str(), ty.as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let o = smelt_quantize(&args);
    assert!(
        o.status.success(),
        "smelt quantize {ty} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&o.stderr));
}

fn check(src: &Path, out: &Path, ty: &str, output_ty: &str) {
    let report = quant_ref::run(&[
        "check-requant".as_ref(),
        src.as_os_str(),
        out.as_os_str(),
        ty.as_ref(),
        output_ty.as_ref(),
    ]);
    eprint!("{report}");
}

#[test]
fn smollm2_to_q8_0_with_an_f16_output_tensor() {
    let dir = TempDir::new("quantize-q8");
    let src = common::model(common::SMOLLM2);
    let out = dir.path("q8_0.gguf");
    // SmolLM2 ties its output to token_embd.weight, which becomes F16.
    quantize_ok(&src, &out, "Q8_0", &["--output-type", "f16"]);
    check(&src, &out, "Q8_0", "F16");
}

#[test]
fn smollm2_to_q4_0() {
    let dir = TempDir::new("quantize-q4");
    let src = common::model(common::SMOLLM2);
    let out = dir.path("q4_0.gguf");
    quantize_ok(&src, &out, "q4_0", &["--threads", "3"]);
    // As llama-quantize: the tied output would be Q6_K, but its rows of 576
    // are not whole 256-value super-blocks, so it falls back to Q8_0.
    check(&src, &out, "Q4_0", "Q8_0");
}

/// A small synthetic model: 2-D weights, an F16 norm, an I32 tensor and a
/// 2-D tensor that is not a weight.
fn synthetic(path: &Path, row_len: u64) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.file_type", Value::U32(0));
    let values = |n: u64| -> Vec<u8> {
        (0..n)
            .flat_map(|i| ((i as f32 * 0.37).sin() * 0.1).to_le_bytes())
            .collect()
    };
    w.add_tensor(
        "token_embd.weight",
        GgmlType::F32,
        &[row_len, 8],
        values(row_len * 8),
    )
    .unwrap();
    w.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::F32,
        &[row_len, 4],
        values(row_len * 4),
    )
    .unwrap();
    let norm: Vec<u8> = (0..row_len)
        .flat_map(|i| f32_to_f16(1.0 + i as f32 / 64.0))
        .collect();
    w.add_tensor("blk.0.attn_norm.weight", GgmlType::F16, &[row_len], norm)
        .unwrap();
    w.add_tensor(
        "ids",
        GgmlType::I32,
        &[4],
        vec![1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0],
    )
    .unwrap();
    w.add_tensor("rope_table", GgmlType::F32, &[4, 2], values(8))
        .unwrap();
    w.write_file(path).unwrap();
}

#[test]
fn synthetic_model_norms_become_f32_and_others_are_copied() {
    let dir = TempDir::new("quantize-synth");
    let (src, out) = (dir.path("src.gguf"), dir.path("out.gguf"));
    synthetic(&src, 64);
    quantize_ok(&src, &out, "Q5_1", &["--output-type", "bf16"]);
    check(&src, &out, "Q5_1", "BF16");
}

fn quantize_err(args: &[&std::ffi::OsStr]) -> String {
    let o = smelt_quantize(args);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "expected a failure, got success");
    assert!(
        !stderr.contains("panicked"),
        "a panic, not an error:\n{stderr}"
    );
    stderr
}

#[test]
fn bad_requests_are_clear_errors() {
    let dir = TempDir::new("quantize-err");
    let (src, out) = (dir.path("src.gguf"), dir.path("out.gguf"));
    synthetic(&src, 48);
    let (s, o) = (src.as_os_str(), out.as_os_str());

    // Rows of 48 values are not whole 32-value blocks: the first weight
    // is named, and nothing is written.
    let e = quantize_err(&[s, o, "Q4_0".as_ref()]);
    assert!(
        e.contains("token_embd.weight") && e.contains("block size 32"),
        "{e}"
    );
    assert!(!out.exists() && !dir.path("out.gguf.partial").exists());

    // The input as the output is refused, and the input is left as it was.
    let before = std::fs::read(&src).unwrap();
    let e = quantize_err(&[s, s, "Q8_0".as_ref()]);
    assert!(e.contains("is the input file"), "{e}");
    let dotted = dir.path(".").join("src.gguf");
    let e = quantize_err(&[s, dotted.as_os_str(), "Q8_0".as_ref()]);
    assert!(e.contains("is the input file"), "{e}");
    assert_eq!(std::fs::read(&src).unwrap(), before);

    let e = quantize_err(&[s, o, "Q9_9".as_ref()]);
    assert!(e.contains("unknown type"), "{e}");
    let e = quantize_err(&[s, o, "Q8_K".as_ref()]);
    assert!(e.contains("activation type"), "{e}");
    let e = quantize_err(&[s, o, "IQ2_XXS".as_ref()]);
    assert!(e.contains("cannot quantize"), "{e}");

    // A truncated file is refused by the reader with a message.
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&src, &bytes[..bytes.len() / 2]).unwrap();
    let e = quantize_err(&[s, o, "Q8_0".as_ref()]);
    assert!(e.contains("cannot open"), "{e}");
    assert!(!out.exists());
}
