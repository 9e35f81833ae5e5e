//! The reader and writer against an independent implementation: the `gguf`
//! Python package (gguf-py, llama.cpp's own), driven through
//! `scripts/gguf_dump.py`, which prints what `gguf.GGUFReader` sees as JSON.
//!
//! - gguf-py must read what our writer wrote: every value type, several
//!   tensor types, two alignments, version 2 as well as 3.
//! - Our reader must agree with gguf-py on the two test models, on every
//!   vocabulary file of llama.cpp's tokenizer tests, and on files gguf-py's
//!   own writer made: metadata keys, types and values (floats bit for bit),
//!   tensor names, dims, types, offsets and sizes.

mod common;
mod gguf_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value as Json, json};
use smelt::gguf::{Array, GgufFile, Header, Value};

// ---------------------------------------------------------------------------
// Running gguf-py

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs a script under `scripts/`, failing the test with its stderr (which
/// names a missing package) if it fails.
fn python(script: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(repo_root().join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 for {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// gguf-py's view of a file.
fn gguf_py_dump(path: &Path, extra: &[&str]) -> Json {
    let mut args = extra.to_vec();
    let p = path.to_str().expect("UTF-8 path");
    args.push(p);
    serde_json::from_slice(&python("gguf_dump.py", &args)).expect("gguf_dump.py prints JSON")
}

// ---------------------------------------------------------------------------
// Our structures in gguf_dump.py's JSON shape

fn value_json(v: &Value) -> Json {
    let scalar = match v {
        Value::Array(a) => return array_json(a),
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x.to_bits()),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x.to_bits()),
    };
    json!({"type": v.value_type().name(), "value": scalar})
}

fn array_json(a: &Array) -> Json {
    let items: Vec<Json> = match a {
        Array::U8(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I8(v) => v.iter().map(|x| json!(x)).collect(),
        Array::U16(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I16(v) => v.iter().map(|x| json!(x)).collect(),
        Array::U32(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I32(v) => v.iter().map(|x| json!(x)).collect(),
        Array::F32(v) => v.iter().map(|x| json!(x.to_bits())).collect(),
        Array::Bool(v) => v.iter().map(|x| json!(x)).collect(),
        Array::String(v) => v.iter().map(|x| json!(x)).collect(),
        Array::Array(v) => v.iter().map(array_json).collect(),
        Array::U64(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I64(v) => v.iter().map(|x| json!(x)).collect(),
        Array::F64(v) => v.iter().map(|x| json!(x.to_bits())).collect(),
    };
    json!({"type": "array", "elem": a.element_type().name(), "items": items})
}

/// Compares two JSON values, naming the first difference by its path.
fn assert_same(ours: &Json, theirs: &Json, path: &str) {
    if ours == theirs {
        return;
    }
    match (ours, theirs) {
        (Json::Array(a), Json::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: length (ours, gguf-py)");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_same(x, y, &format!("{path}[{i}]"));
            }
        }
        (Json::Object(a), Json::Object(b)) => {
            let keys = |m: &serde_json::Map<String, Json>| {
                let mut k: Vec<String> = m.keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(keys(a), keys(b), "{path}: fields (ours, gguf-py)");
            for (k, x) in a {
                assert_same(x, &b[k], &format!("{path}.{k}"));
            }
        }
        _ => panic!("{path}: ours {ours}, gguf-py {theirs}"),
    }
}

/// Checks our reader's view of `file` against gguf-py's `dump` of it, and
/// that our zero-copy tensor views point where gguf-py's data does.
fn assert_reader_agrees(file: &GgufFile, dump: &Json) {
    let h: &Header = file;
    assert_eq!(json!(h.version), dump["version"], "version");
    assert_eq!(json!(h.alignment), dump["alignment"], "alignment");
    assert_eq!(json!(h.data_offset), dump["data_offset"], "data offset");

    let metadata: Vec<Json> = h
        .metadata
        .iter()
        .map(|(k, v)| json!({"key": k, "value": value_json(v)}))
        .collect();
    assert_same(&Json::Array(metadata), &dump["metadata"], "metadata");

    let theirs = dump["tensors"].as_array().expect("tensors");
    assert_eq!(h.tensors.len(), theirs.len(), "tensor count");
    let base = file.bytes().as_ptr() as usize;
    for (t, py) in h.tensors.iter().zip(theirs) {
        let data = file.tensor_data(t);
        let ours = json!({
            "name": t.name,
            "type": t.dtype.id(),
            "dims": t.dims,
            "offset": h.data_offset + t.offset,
            "n_bytes": t.size,
        });
        let mut py = py.clone();
        let py_data = py.as_object_mut().and_then(|o| o.remove("data"));
        assert_same(&ours, &py, &format!("tensor {}", t.name));
        assert_eq!(
            data.as_ptr() as usize - base,
            (h.data_offset + t.offset) as usize
        );
        assert_eq!(data.len() as u64, t.size);
        if let Some(hex) = py_data {
            assert_eq!(json!(to_hex(data)), hex, "tensor {} data", t.name);
        }
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens `path` with our reader and with gguf-py, and compares.
fn check_file(path: &Path, with_data: bool) {
    let file = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dump = gguf_py_dump(path, if with_data { &["--data"] } else { &[] });
    assert_reader_agrees(&file, &dump);
}

// ---------------------------------------------------------------------------
// gguf-py reads what our writer wrote

/// Writes the sample with our writer, then checks gguf-py's reading of it
/// against what was given to the writer (not against our reader).
fn gguf_py_reads_our_writer(alignment: Option<u32>, version: u32) {
    let seed = 11;
    let bytes = {
        let mut b = gguf_common::sample_writer(alignment, seed).to_bytes();
        b[4..8].copy_from_slice(&version.to_le_bytes());
        b
    };
    let path = scratch(&format!("ours-{alignment:?}-v{version}.gguf"));
    std::fs::write(&path, &bytes).expect("write");
    let dump = gguf_py_dump(&path, &["--data"]);

    assert_eq!(dump["version"], json!(version));
    let align = u64::from(alignment.unwrap_or(32));
    assert_eq!(dump["alignment"], json!(align));
    let mut expected: Vec<Json> = gguf_common::every_value()
        .iter()
        .map(|(k, v)| json!({"key": k, "value": value_json(v)}))
        .collect();
    if let Some(a) = alignment {
        expected.push(json!({"key": "general.alignment", "value": value_json(&Value::U32(a))}));
    }
    assert_same(&Json::Array(expected), &dump["metadata"], "metadata");

    // The same random tensors the writer was given.
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let tensors = dump["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), gguf_common::TENSORS.len());
    for (i, (&(dtype, dims), py)) in gguf_common::TENSORS.iter().zip(tensors).enumerate() {
        let data = gguf_common::tensor_bytes(&mut rng, dtype, dims);
        let name = format!("t{i}.{dtype}");
        assert_eq!(py["name"], json!(name));
        assert_eq!(py["type"], json!(dtype.id()), "{name}");
        assert_eq!(py["dims"], json!(dims), "{name}");
        assert_eq!(py["n_bytes"], json!(data.len()), "{name}");
        assert_eq!(py["data"], json!(to_hex(&data)), "{name}");
        let offset = py["offset"].as_u64().expect("offset");
        assert_eq!(offset % align, 0, "{name} is aligned");
    }

    // And our reader sees the same as gguf-py.
    check_file(&path, true);
}

#[test]
fn gguf_py_reads_our_writer_v3() {
    gguf_py_reads_our_writer(None, 3);
}

#[test]
fn gguf_py_reads_our_writer_with_alignment_64() {
    gguf_py_reads_our_writer(Some(64), 3);
}

#[test]
fn gguf_py_reads_our_writer_with_alignment_1_as_v2() {
    gguf_py_reads_our_writer(Some(1), 2);
}

// ---------------------------------------------------------------------------
// Our reader reads what gguf-py's writer wrote

#[test]
fn reader_agrees_on_gguf_py_written_files() {
    for (name, args) in [
        ("py-default.gguf", vec![]),
        ("py-align64.gguf", vec!["--alignment", "64"]),
        ("py-vocab-only.gguf", vec!["--no-tensors"]),
    ] {
        let path = scratch(name);
        let mut a = args.clone();
        a.insert(0, path.to_str().expect("UTF-8 path"));
        python("gguf_write_sample.py", &a);
        check_file(&path, true);
    }
}

// ---------------------------------------------------------------------------
// Real files

#[test]
fn reader_agrees_on_smollm2() {
    check_file(&common::model(common::SMOLLM2), false);
}

#[test]
fn reader_agrees_on_gemma3() {
    check_file(&common::model(common::GEMMA3), false);
}

/// llama.cpp's vocabulary-only GGUFs, gzipped in `testdata/tokenizer` (the
/// tokenizer tests' copy; one copy in the repository serves both). Some are
/// trimmed by `scripts/trim_vocab.py` to the tokens their vectors reach, so
/// the size check only asserts a real vocabulary, not a full one.
fn check_vocab(name: &str) {
    let gz = common::testdata(&format!("tokenizer/ggml-vocab-{name}.gguf.gz"));
    let path = scratch(&format!("ggml-vocab-{name}.gguf"));
    let dump = gguf_py_dump(&gz, &["--gunzip-to", path.to_str().expect("UTF-8 path")]);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_reader_agrees(&file, &dump);
    assert!(
        file.get_array("tokenizer.ggml.tokens")
            .expect("tokens")
            .len()
            > 200
    );
}

macro_rules! vocab_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(#[test] fn $test() { check_vocab($name); })*

        /// Every vocabulary file in testdata has a test above.
        #[test]
        fn every_vocab_file_is_checked() {
            let mut found: Vec<String> = std::fs::read_dir(common::testdata("tokenizer"))
                .expect("testdata/tokenizer")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".gguf.gz"))
                .collect();
            found.sort();
            let mut listed = vec![$(format!("ggml-vocab-{}.gguf.gz", $name)),*];
            listed.sort();
            assert_eq!(found, listed);
        }
    };
}

vocab_tests! {
    vocab_bert_bge => "bert-bge",
    vocab_command_r => "command-r",
    vocab_deepseek_coder => "deepseek-coder",
    vocab_deepseek_llm => "deepseek-llm",
    vocab_falcon => "falcon",
    vocab_gemma_4 => "gemma-4",
    vocab_gpt_2 => "gpt-2",
    vocab_llama_bpe => "llama-bpe",
    vocab_llama_spm => "llama-spm",
    vocab_mpt => "mpt",
    vocab_phi_3 => "phi-3",
    vocab_qwen2 => "qwen2",
    vocab_qwen35 => "qwen35",
    vocab_refact => "refact",
    vocab_starcoder => "starcoder",
}
