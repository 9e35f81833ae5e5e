//! The writer's checks and layout. What it writes is checked against gguf-py
//! in `gguf_python.rs`; here: what it refuses, ggml's padding, zero-copy
//! tensors from a mapped file, and atomic file writes.

mod gguf_common;

use smelt::gguf::{GgufError, GgufFile, GgufWriter, Header, Value};
use smelt::quant::GgmlType;

fn refused(dtype: GgmlType, dims: &[u64], len: usize) -> String {
    let mut w = GgufWriter::new();
    match w.add_tensor("w", dtype, dims, vec![0; len]) {
        Err(e @ GgufError::InvalidTensor { .. }) => e.to_string(),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("{dtype} {dims:?} with {len} bytes was accepted"),
    }
}

#[test]
fn bad_tensors_are_refused() {
    assert!(refused(GgmlType::F32, &[], 0).contains("0 dimensions"));
    assert!(refused(GgmlType::F32, &[1, 1, 1, 1, 1], 4).contains("5 dimensions"));
    assert!(refused(GgmlType::F32, &[u64::MAX, 2], 0).contains("not whole"));
    assert!(refused(GgmlType::F32, &[1 << 62, 4], 0).contains("not whole"));
    assert!(refused(GgmlType::Q4_0, &[33], 18).contains("not whole"));
    // A row that is not whole blocks, though the total would be.
    assert!(refused(GgmlType::Q4_0, &[16, 2], 18).contains("not whole"));
    assert!(refused(GgmlType::Q8_0, &[32, 2], 67).contains("67 bytes given, 68 expected"));

    let mut w = GgufWriter::new();
    w.add_tensor("w", GgmlType::F32, &[1], vec![0; 4])
        .expect("first");
    let err = w.add_tensor("w", GgmlType::F32, &[1], vec![0; 4]).err();
    assert!(matches!(err, Some(GgufError::InvalidTensor { name, .. }) if name == "w"));
}

#[test]
#[should_panic(expected = "general.alignment must be a u32 power of two")]
fn bad_alignment_is_a_programming_error() {
    GgufWriter::new().set("general.alignment", Value::U32(24));
}

#[test]
fn layout_is_ggmls() {
    for align in [None, Some(1), Some(64), Some(256)] {
        let bytes = gguf_common::sample_writer(align, 3).to_bytes();
        let a = u64::from(align.unwrap_or(32));
        // ggml pads after every tensor, the last included.
        assert_eq!(bytes.len() as u64 % a, 0);
        let h = Header::parse(&bytes).expect("parses");
        assert_eq!(h.alignment, a);
        let mut expected_offset = 0;
        for t in &h.tensors {
            // Tensors back to back in the order added, each aligned: the
            // layout ggml's gguf reader insists on.
            assert_eq!(t.offset, expected_offset, "{}", t.name);
            expected_offset = (t.offset + t.size).div_ceil(a) * a;
        }
        assert_eq!(h.data_offset + expected_offset, bytes.len() as u64);
    }
}

#[test]
fn tensors_copy_from_a_mapped_file_without_copying() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("writer-src.gguf");
    gguf_common::sample_writer(None, 5)
        .write_file(&src)
        .expect("write");
    let file = GgufFile::open(&src).expect("open");

    let mut w = GgufWriter::new();
    for (k, v) in file.metadata.iter() {
        w.set(k, v.clone());
    }
    for t in file.tensors.iter().rev() {
        let bytes = file.tensor_bytes(&t.name).expect("present");
        // The view points into the map, not at a copy.
        assert_eq!(bytes.as_ptr(), file.tensor_data(t).as_ptr());
        w.add_tensor_bytes(t.name.clone(), t.dtype, &t.dims, bytes)
            .expect("valid");
    }
    let dst = dir.join("writer-dst.gguf");
    w.write_file(&dst).expect("write");
    let copy = GgufFile::open(&dst).expect("open");
    assert_eq!(copy.tensors.len(), file.tensors.len());
    for t in &file.tensors {
        let c = copy.tensor_info(&t.name).expect("copied");
        assert_eq!((&c.dims, c.dtype), (&t.dims, t.dtype));
        assert_eq!(copy.tensor_data(c), file.tensor_data(t), "{}", t.name);
    }
    assert!(matches!(
        file.tensor_bytes("nope"),
        Err(GgufError::MissingTensor { .. })
    ));
}

#[test]
fn failed_writes_leave_nothing_behind() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-dir");
    let path = dir.join("x.gguf");
    let err = GgufWriter::new()
        .write_file(&path)
        .expect_err("no directory");
    assert!(matches!(err, GgufError::Write { .. }));
    // A failed write says so, naming the file once and the cause once.
    let msg = err.to_string();
    assert!(msg.starts_with("cannot write "), "{msg}");
    assert!(std::error::Error::source(&err).is_none(), "{msg}");
    assert!(!path.exists());

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("writer-ok.gguf");
    GgufWriter::new().write_file(&path).expect("write");
    assert!(!dir.join("writer-ok.gguf.partial").exists());
    assert_eq!(GgufFile::open(&path).expect("open").metadata.len(), 0);
}
