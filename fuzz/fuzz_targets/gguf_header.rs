//! `Header::parse` on arbitrary bytes: it must return, never panic, never
//! read outside the input, and never allocate far beyond the input's size
//! (run with `-malloc_limit_mb`, see fuzz/README.md).
//!
//! Whatever parses must also be usable, and survive a round trip through
//! the writer: writing a parsed header and parsing that again gives the same
//! header, and writing it again gives the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smelt::gguf::{GgufWriter, Header};

fuzz_target!(|data: &[u8]| {
    let Ok(header) = Header::parse(data) else {
        return;
    };
    let first = rewrite(&header, data);
    let again = Header::parse(&first).expect("the writer's output parses");
    assert_eq!(header.tensors.len(), again.tensors.len());
    for (a, b) in header.tensors.iter().zip(&again.tensors) {
        assert_eq!((&a.name, &a.dims, a.dtype, a.size), (&b.name, &b.dims, b.dtype, b.size));
    }
    let keys = |h: &Header| h.metadata.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>();
    assert_eq!(keys(&header), keys(&again));
    assert_eq!(first, rewrite(&again, &first), "writing is deterministic");
});

/// The header and its tensors' bytes (sliced from `data`, which must lie
/// inside it) written back out with `GgufWriter`.
fn rewrite(header: &Header, data: &[u8]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (key, value) in header.metadata.iter() {
        // Exercise the display and lookup paths too.
        let _ = value.to_string();
        assert!(header.metadata.get(key).is_some());
        w.set(key, value.clone());
    }
    for t in &header.tensors {
        let start = (header.data_offset + t.offset) as usize;
        let bytes = data[start..start + t.size as usize].to_vec();
        w.add_tensor(t.name.clone(), t.dtype, &t.dims, bytes)
            .expect("a parsed tensor is a valid tensor");
    }
    w.to_bytes()
}
