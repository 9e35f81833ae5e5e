//! `Header::parse` on arbitrary bytes: it must return, never panic, never
//! read outside the input, and never have more than `8 × len + 4096` bytes
//! allocated at once (the bound `tests/gguf_hostile.rs` asserts; a counting
//! allocator checks it here on every input).
//!
//! Whatever parses must also be usable, and survive a round trip through
//! the writer: writing a parsed header and parsing that again gives the same
//! header, and writing it again gives the same bytes.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use libfuzzer_sys::fuzz_target;
use smelt::gguf::{GgufWriter, Header};

/// Bytes live, and the most live since the last reset. The target runs on
/// one thread; atomics only keep the static `Sync`.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: every method forwards to `System` with the caller's pointer and
// layout unchanged, so `System` upholds the allocator contract; the
// bookkeeping is two atomics, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let parsed = Header::parse(data);
    let peak = PEAK.load(Relaxed) - base;
    let bound = 8 * data.len() + 4096;
    assert!(
        peak <= bound,
        "{peak} bytes allocated for {} input bytes",
        data.len()
    );
    let Ok(header) = parsed else {
        return;
    };
    let first = rewrite(&header, data);
    let again = Header::parse(&first).expect("the writer's output parses");
    assert_eq!(header.tensors.len(), again.tensors.len());
    for (a, b) in header.tensors.iter().zip(&again.tensors) {
        assert_eq!(
            (&a.name, &a.dims, a.dtype, a.size),
            (&b.name, &b.dims, b.dtype, b.size)
        );
    }
    let keys = |h: &Header| {
        h.metadata
            .iter()
            .map(|(k, _)| k.to_string())
            .collect::<Vec<_>>()
    };
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
