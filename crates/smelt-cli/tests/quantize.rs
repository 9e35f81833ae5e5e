//! `smelt quantize`, end to end:
//!
//! - against llama-quantize: the files it made of a small synthetic model for
//!   14 file types (`testdata/quantize/tiny-256.json`) and of SmolLM2 for
//!   two (`smollm2-135m-q4_1.json`), whole file by whole file, and tensor by
//!   tensor as the `gguf` package reads them where a file differs;
//! - against the `gguf` package's quantizers (`scripts/quant_ref.py
//!   check-requant`): metadata, tensor types, and tensor bytes equal to
//!   `gguf.quants.quantize` of the source's values;
//! - bad requests: clear errors, and nothing written.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;
#[path = "../../smelt/tests/quant_ref/mod.rs"]
mod quant_ref;

use std::path::{Path, PathBuf};
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

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// `quant_ref.py hashes FILE`: the file's and each tensor's sha256 as the
/// `gguf` package reads them.
fn hashes(path: &Path) -> serde_json::Value {
    let out = quant_ref::run(&["hashes".as_ref(), path.as_os_str()]);
    serde_json::from_str(&out).expect("hashes prints JSON")
}

/// Each file's sha256, by Python's `hashlib` in one process.
fn file_sha256s(paths: &[PathBuf]) -> Vec<String> {
    let out = quant_ref::python()
        .arg("-c")
        .arg(
            "import hashlib, sys\n\
             for p in sys.argv[1:]: print(hashlib.sha256(open(p, 'rb').read()).hexdigest())",
        )
        .args(paths)
        .output()
        .expect("run python3");
    assert!(out.status.success(), "hashing failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn read_fixture(name: &str) -> serde_json::Value {
    let path = common::testdata(&format!("quantize/{name}"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `smelt quantize SRC` to every file type of a llama-quantize fixture
/// (`testdata/quantize/README.md`), compared whole file by whole file;
/// a file that differs is then compared tensor by tensor (type, shape and
/// sha256 as the `gguf` package reads them) to say where.
fn matches_llama_quantize(
    dir: &TempDir,
    src: &Path,
    reference: &serde_json::Value,
    extra: &[&str],
) {
    let types = reference["types"].as_object().unwrap();
    let outs: Vec<PathBuf> = types
        .keys()
        .map(|ftype| {
            let out = dir.path(&format!("{ftype}.gguf"));
            quantize_ok(src, &out, ftype, extra);
            out
        })
        .collect();
    let mut mismatches = Vec::new();
    for ((ftype, want), (out, sha)) in types.iter().zip(outs.iter().zip(file_sha256s(&outs))) {
        if want["file_sha256"] == sha.as_str() {
            eprintln!("{ftype}: the file is llama-quantize's");
            continue;
        }
        mismatches.push(format!(
            "{ftype}: file {sha}, llama-quantize's {}",
            want["file_sha256"]
        ));
        let got = hashes(out);
        for (name, w) in want["tensors"].as_object().unwrap() {
            let g = &got["tensors"][name];
            if g != w {
                mismatches.push(format!(
                    "{ftype} {name}: {} {} (llama-quantize: {} {})",
                    g["type"], g["sha256"], w["type"], w["sha256"]
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Every file type of the fixture as llama-quantize (default options, no
/// importance matrix) wrote it. The source is rebuilt by the repository's
/// `scripts/synth_gguf.py`, checked against the hash the fixture records.
#[test]
fn tiny_256_is_what_llama_quantize_writes_for_every_file_type() {
    let reference = read_fixture("tiny-256.json");
    assert_eq!(reference["types"].as_object().unwrap().len(), 14);
    let dir = TempDir::new("quantize-tiny");
    let src = dir.path("tiny-256-f16.gguf");
    let made = quant_ref::python()
        .arg(repo_file("scripts/synth_gguf.py"))
        .arg(common::testdata("tokenizer/ggml-vocab-gpt-2.gguf.gz"))
        .arg(&src)
        .args(["tiny-256", "F16"])
        .status()
        .expect("run synth_gguf.py");
    assert!(made.success(), "synth_gguf.py failed");
    assert_eq!(
        file_sha256s(std::slice::from_ref(&src))[0],
        reference["source"]["sha256"].as_str().unwrap(),
        "scripts/synth_gguf.py no longer writes the fixture's source"
    );
    matches_llama_quantize(&dir, &src, &reference, &["--threads", "2"]);
}

/// A real model requantized: SmolLM2's rows of 576 are not whole K-quant
/// super-blocks, so most tensors take llama-quantize's fallbacks, and its
/// output is tied to the token embedding.
#[test]
fn smollm2_requantized_is_what_llama_quantize_writes() {
    let reference = read_fixture("smollm2-135m-q4_1.json");
    let src = common::model(common::SMOLLM2);
    assert_eq!(
        file_sha256s(std::slice::from_ref(&src))[0],
        reference["source"]["sha256"].as_str().unwrap(),
        "the fixture was made from another {}",
        common::SMOLLM2
    );
    let dir = TempDir::new("quantize-smollm2");
    matches_llama_quantize(&dir, &src, &reference, &["--allow-requantize"]);
    // Mostly Q5_0 and Q8_0 by count, but named by its file type, as
    // llama-bench names it.
    let info = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .arg("info")
        .arg(dir.path("Q4_K_M.gguf"))
        .output()
        .expect("run smelt info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.lines().any(|l| l == "file type:    Q4_K - Medium"),
        "{info}"
    );
}

#[test]
fn smollm2_to_q8_0_with_an_f16_output_tensor() {
    let dir = TempDir::new("quantize-q8");
    let src = common::model(common::SMOLLM2);
    let out = dir.path("q8_0.gguf");
    // SmolLM2 ties its output to token_embd.weight, which becomes F16.
    quantize_ok(
        &src,
        &out,
        "Q8_0",
        &["--output-tensor-type", "f16", "--allow-requantize"],
    );
    check(&src, &out, "Q8_0", "F16");
}

#[test]
fn smollm2_to_q4_0() {
    let dir = TempDir::new("quantize-q4");
    let src = common::model(common::SMOLLM2);
    let out = dir.path("q4_0.gguf");
    quantize_ok(
        &src,
        &out,
        "q4_0",
        &["--threads", "3", "--allow-requantize"],
    );
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
fn synthetic_model_keeps_norms_and_copies_others() {
    let dir = TempDir::new("quantize-synth");
    let (src, out) = (dir.path("src.gguf"), dir.path("out.gguf"));
    synthetic(&src, 64);
    quantize_ok(&src, &out, "Q5_1", &["--output-tensor-type", "bf16"]);
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

/// The names in a folder, sorted.
fn listing(dir: &TempDir) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn bad_requests_are_clear_errors_and_write_nothing() {
    let dir = TempDir::new("quantize-err");
    let (src, out) = (dir.path("src.gguf"), dir.path("out.gguf"));
    synthetic(&src, 48);
    let (s, o) = (src.as_os_str(), out.as_os_str());
    let arg = |a: &'static str| std::ffi::OsStr::new(a);

    let e = quantize_err(&[s, o, arg("Q9_9")]);
    assert!(
        e.contains("unknown file type") && e.contains("Q4_K_M"),
        "{e}"
    );
    let e = quantize_err(&[s, o, arg("IQ2_XXS")]);
    assert!(e.contains("cannot write IQ2_XXS"), "{e}");
    let e = quantize_err(&[s, o, arg("Q8_0"), arg("--output-tensor-type"), arg("q8_k")]);
    assert!(e.contains("cannot quantize weights to Q8_K"), "{e}");
    // Rows of 48 values are not whole 32-value blocks: llama-quantize's
    // fallback makes them F16, but --token-embedding-type skips it (where
    // llama-quantize would abort), so that is an error.
    let e = quantize_err(&[
        s,
        o,
        arg("Q4_0"),
        arg("--token-embedding-type"),
        arg("q4_0"),
    ]);
    assert!(
        e.contains("token_embd.weight") && e.contains("not whole Q4_0 blocks"),
        "{e}"
    );
    let e = quantize_err(&[dir.path("missing.gguf").as_os_str(), o, arg("Q8_0")]);
    assert!(
        e.contains("cannot read") && e.matches("missing.gguf").count() == 1,
        "{e}"
    );
    let nowhere = dir.path("no-such-folder/out.gguf");
    let e = quantize_err(&[s, nowhere.as_os_str(), arg("Q8_0")]);
    assert!(e.contains("no-such-folder"), "{e}");
    assert_eq!(listing(&dir), ["src.gguf"]);

    // Never over the input, by any name; the input is left as it was.
    let before = std::fs::read(&src).unwrap();
    std::fs::hard_link(&src, dir.path("hard.gguf")).unwrap();
    let mut aliases = vec![src.clone(), dir.path("./src.gguf"), dir.path("hard.gguf")];
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&src, dir.path("soft.gguf")).unwrap();
        aliases.push(dir.path("soft.gguf"));
    }
    for alias in &aliases {
        let e = quantize_err(&[s, alias.as_os_str(), arg("Q8_0")]);
        assert!(e.contains("refusing to write"), "{}: {e}", alias.display());
    }
    assert_eq!(std::fs::read(&src).unwrap(), before);

    // Requantizing needs --allow-requantize, as in llama-quantize.
    let src64 = dir.path("src64.gguf");
    synthetic(&src64, 64);
    quantize_ok(&src64, &out, "Q8_0", &[]);
    let again = dir.path("again.gguf");
    let e = quantize_err(&[o, again.as_os_str(), arg("Q4_0")]);
    assert!(
        e.contains("already quantized (Q8_0)") && e.contains("--allow-requantize"),
        "{e}"
    );
    assert!(!again.exists());

    // A tensor type smelt cannot read is named.
    let iq = dir.path("iq.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::IQ2_XXS,
        &[256, 2],
        vec![0; 132],
    )
    .unwrap();
    w.write_file(&iq).unwrap();
    let e = quantize_err(&[
        iq.as_os_str(),
        again.as_os_str(),
        arg("Q8_0"),
        arg("--allow-requantize"),
    ]);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("IQ2_XXS"),
        "{e}"
    );

    // A truncated file is refused by the reader with a message.
    std::fs::write(&src, &before[..before.len() / 2]).unwrap();
    let e = quantize_err(&[s, again.as_os_str(), arg("Q8_0")]);
    assert!(e.contains("cannot open"), "{e}");
    assert!(!again.exists());
    let mut want = vec!["hard.gguf", "iq.gguf", "out.gguf", "src.gguf", "src64.gguf"];
    if cfg!(unix) {
        want.insert(3, "soft.gguf");
    }
    assert_eq!(listing(&dir), want);
}
