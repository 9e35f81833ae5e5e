//! Hostile GGUF files: each must give an error that names what is wrong and
//! where, never a panic, and never make the reader allocate more than a
//! small multiple of the input's size.
//!
//! A counting global allocator (per thread, so parallel tests do not mix)
//! measures the peak bytes live during every `Header::parse` here.

mod gguf_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gguf_common::{Raw, small_file, ty};
use rand::{Rng, SeedableRng, rngs::StdRng};
use smelt::gguf::{GgufError, GgufFile, Header, MAX_ARRAY_DEPTH};

// ---------------------------------------------------------------------------
// Allocation accounting

struct Counting;

thread_local! {
    /// Bytes allocated and not yet freed by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The most `LIVE` has been since `reset_peak`.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    // try_with: a thread being torn down has no locals left; its frees are
    // not ours to count.
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(delta);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards to `System` with the caller's layout and
// pointer unchanged, so `System` upholds the allocator contract; the only
// addition is bookkeeping in const-initialised thread locals of `Cell<isize>`,
// which neither allocate nor register destructors, so it cannot recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with
        // this layout.
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The allocation bound this test proves for `Header::parse`: the parsed
/// structures cost at most ~6.2× the bytes they came from (see `reader.rs`).
const BOUND_FACTOR: usize = 8;
const BOUND_CONST: usize = 4096;

/// Parses `bytes`, failing the test if the peak of live allocations during
/// the parse exceeds the bound. Returns the result and that peak.
fn parse_measured(bytes: &[u8]) -> (Result<Header, GgufError>, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let result = Header::parse(bytes);
    let peak = (PEAK.with(Cell::get) - base).max(0) as usize;
    let bound = BOUND_FACTOR * bytes.len() + BOUND_CONST;
    assert!(
        peak <= bound,
        "parse of {} bytes allocated {peak} bytes at peak, bound {bound}; result {:?}",
        bytes.len(),
        result.as_ref().map(|_| "Ok")
    );
    (result, peak)
}

fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    parse_measured(bytes).0
}

/// Parses, expects an error, and checks its message names every `needle`.
fn parse_err(bytes: &[u8], needles: &[&str]) -> GgufError {
    let err = match parse(bytes) {
        Ok(_) => panic!("hostile file parsed without error (needles {needles:?})"),
        Err(e) => e,
    };
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    err
}

// ---------------------------------------------------------------------------
// Header

#[test]
fn empty_and_short_inputs() {
    assert!(matches!(
        parse_err(&[], &["magic", "offset 0"]),
        GgufError::Truncated { offset: 0, .. }
    ));
    parse_err(b"GGU", &["magic"]);
    parse_err(b"GGUF\x03\x00", &["version", "offset 4"]);
}

#[test]
fn bad_magic() {
    let mut f = small_file();
    f[..4].copy_from_slice(b"GGML");
    assert!(matches!(parse_err(&f, &["GGUF"]), GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn versions() {
    for v in [0, 1, 4, 0xFFFF_FFFF] {
        let err = parse_err(&Raw::header(v, 0, 0).build(), &[&v.to_string()]);
        assert!(
            matches!(err, GgufError::UnsupportedVersion(x) if x == v),
            "{err}"
        );
    }
    // A big-endian v3 file reads its version as 0x03000000.
    let err = parse_err(&Raw::header(0x0300_0000, 0, 0).build(), &["big-endian"]);
    assert!(matches!(err, GgufError::BigEndian { .. }));
    // Version 2 shares version 3's little-endian layout.
    let mut f = small_file();
    f[4..8].copy_from_slice(&2u32.to_le_bytes());
    let h = parse(&f).expect("v2 parses");
    assert_eq!(h.version, 2);
    assert_eq!(h.tensors.len(), 2);
}

#[test]
fn absurd_counts() {
    let err = parse_err(
        &Raw::header(3, 0, u64::MAX).build(),
        &["metadata count", "offset 16"],
    );
    assert!(matches!(
        err,
        GgufError::BadCount {
            count: u64::MAX,
            ..
        }
    ));
    let err = parse_err(
        &Raw::header(3, u64::MAX, 0).build(),
        &["tensor count", "offset 8"],
    );
    assert!(matches!(
        err,
        GgufError::BadCount {
            count: u64::MAX,
            ..
        }
    ));
    // Counts that fit the bytes only at the smallest entry size.
    let mut r = Raw::header(3, 0, 10);
    r.zeros(10 * 13 - 1);
    parse_err(&r.build(), &["metadata count"]);
    let mut r = Raw::header(3, 10, 0);
    r.zeros(10 * 32 - 1);
    parse_err(&r.build(), &["tensor count"]);
    // 1000 entries of the smallest size: empty keys, u8 values.
    let mut r = Raw::header(3, 0, 1000);
    r.zeros(1000 * 13);
    parse_err(&r.build(), &["\"\"", "offset 37", "appears twice"]);
}

// ---------------------------------------------------------------------------
// Metadata

#[test]
fn absurd_string_lengths() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX).zeros(16);
    let err = parse_err(&r.build(), &["key of metadata entry 0", "offset 24"]);
    assert!(matches!(
        err,
        GgufError::Truncated {
            needed: u64::MAX,
            offset: 24,
            ..
        }
    ));

    let mut r = Raw::header(3, 0, 1);
    r.key("general.name", ty::STRING).u64(1 << 40).bytes(b"abc");
    let err = parse_err(&r.build(), &["general.name", "offset 48"]);
    assert!(matches!(
        err,
        GgufError::Truncated {
            needed: 0x100_0000_0000,
            ..
        }
    ));

    // One byte short.
    let mut r = Raw::header(3, 0, 1);
    r.key("k", ty::STRING).u64(4).bytes(b"abc");
    parse_err(&r.build(), &["\"k\"", "needs 4 bytes, 3 remain"]);
}

#[test]
fn absurd_array_counts_of_every_type() {
    for elem in 0..=12u32 {
        let mut r = Raw::header(3, 0, 1);
        r.key("tokenizer.ggml.tokens", ty::ARRAY)
            .u32(elem)
            .u64(u64::MAX);
        let err = parse_err(&r.build(), &["tokenizer.ggml.tokens", "offset 61"]);
        assert!(
            matches!(err, GgufError::BadCount { .. }),
            "type {elem}: {err}"
        );

        // A count that fits only if elements took one byte each.
        let mut r = Raw::header(3, 0, 1);
        r.key("k", ty::ARRAY).u32(elem).u64(64).zeros(64);
        let result = parse(&r.build());
        assert_eq!(result.is_ok(), elem <= 1 || elem == ty::BOOL, "type {elem}");
    }
}

#[test]
fn string_array_that_lies_about_its_count() {
    // The count fits the remaining bytes at 8 bytes per string, so the
    // reader may reserve room for it; the strings then run out.
    let n = 100_000u64;
    let mut r = Raw::header(3, 0, 1);
    r.key("tokenizer.ggml.tokens", ty::ARRAY)
        .u32(ty::STRING)
        .u64(n);
    r.string("first").u64(u64::MAX).zeros(8 * n as usize - 21);
    let (result, peak) = parse_measured(&r.build());
    assert!(matches!(result, Err(GgufError::Truncated { .. })));
    assert!(peak > 0, "the allocator counts");
}

#[test]
fn nested_arrays_that_lie_about_their_counts() {
    // Each level claims as many inner arrays as the rest of the file could
    // hold; reserving at every level before reading would multiply memory by
    // the depth. The innermost array is short of its last element.
    let depth = MAX_ARRAY_DEPTH;
    let tail = 200_000usize;
    let mut r = Raw::header(3, 0, 1);
    r.key("k", ty::ARRAY);
    for _ in 0..depth - 1 {
        r.u32(ty::ARRAY).u64((tail / 12) as u64);
    }
    r.u32(ty::U64).u64((tail / 8) as u64).zeros(tail - 1);
    parse_err(&r.build(), &["\"k\"", "count"]);
}

#[test]
fn unknown_value_types() {
    for id in [13, 100, u32::MAX] {
        let mut r = Raw::header(3, 0, 1);
        r.key("general.name", id).zeros(8);
        let err = parse_err(&r.build(), &["general.name", "offset 44", &id.to_string()]);
        assert!(matches!(
            err,
            GgufError::UnknownValueType { offset: 44, .. }
        ));

        let mut r = Raw::header(3, 0, 1);
        r.key("a", ty::ARRAY).u32(id).u64(1).zeros(8);
        let err = parse_err(&r.build(), &["\"a\"", "offset 37"]);
        assert!(matches!(
            err,
            GgufError::UnknownValueType { offset: 37, .. }
        ));
    }
}

#[test]
fn bool_bytes_other_than_0_or_1() {
    let mut r = Raw::header(3, 0, 1);
    r.key("b", ty::BOOL).u8(2);
    parse_err(&r.build(), &["\"b\"", "offset 37", "bool byte is 2"]);
    let mut r = Raw::header(3, 0, 1);
    r.key("bs", ty::ARRAY)
        .u32(ty::BOOL)
        .u64(3)
        .bytes(&[1, 0, 0xff]);
    parse_err(&r.build(), &["\"bs\"", "offset 52", "255"]);
}

#[test]
fn deep_nesting() {
    // One level too deep.
    let mut r = Raw::header(3, 0, 1);
    r.key("deep", ty::ARRAY);
    for _ in 0..MAX_ARRAY_DEPTH {
        r.u32(ty::ARRAY).u64(1);
    }
    r.u32(ty::U8).u64(0);
    let err = parse_err(&r.build(), &["\"deep\"", "nested"]);
    assert!(matches!(err, GgufError::TooDeep { .. }));

    // The deepest allowed parses.
    let mut r = Raw::header(3, 0, 1);
    r.key("deep", ty::ARRAY);
    for _ in 0..MAX_ARRAY_DEPTH - 1 {
        r.u32(ty::ARRAY).u64(1);
    }
    r.u32(ty::U8).u64(1).u8(9);
    parse(&r.build()).expect("depth limit itself is allowed");

    // A million levels: refused at the limit, without recursing further.
    let mut r = Raw::header(3, 0, 1);
    r.key("deeper", ty::ARRAY);
    for _ in 0..1_000_000 {
        r.u32(ty::ARRAY).u64(1);
    }
    parse_err(&r.build(), &["\"deeper\""]);
}

#[test]
fn duplicate_keys() {
    let mut r = Raw::header(3, 0, 3);
    r.key("a", ty::U8).u8(1);
    r.key("b", ty::U8).u8(2);
    let second_a = r.0.len();
    r.key("a", ty::U32).u32(3);
    let err = parse_err(&r.build(), &["\"a\"", &format!("offset {second_a}")]);
    assert!(matches!(err, GgufError::DuplicateKey { offset, .. } if offset == second_a));
}

#[test]
fn bad_alignment() {
    let cases: Vec<(u32, Vec<u8>, &str)> = vec![
        (ty::U32, 0u32.to_le_bytes().to_vec(), "u32 0"),
        (ty::U32, 48u32.to_le_bytes().to_vec(), "u32 48"),
        (ty::U64, 32u64.to_le_bytes().to_vec(), "u64 32"),
        (ty::U8, vec![32], "u8 32"),
        (
            ty::STRING,
            [&2u64.to_le_bytes()[..], b"32"].concat(),
            "string",
        ),
    ];
    for (t, value, shown) in cases {
        let mut r = Raw::header(3, 0, 2);
        r.key("general.architecture", ty::STRING).string("llama");
        let at = r.0.len();
        r.key("general.alignment", t).bytes(&value);
        let err = parse_err(&r.build(), &[shown, &format!("offset {at}")]);
        assert!(matches!(err, GgufError::BadAlignment { .. }), "{err}");
    }
}

// ---------------------------------------------------------------------------
// Tensor infos and placement

/// A file with one key and the given tensor infos, then `data` bytes of
/// tensor data after the aligned data section start.
fn with_tensors(infos: &[(&str, &[u64], u32, u64)], data: usize) -> Vec<u8> {
    let mut r = Raw::header(3, infos.len() as u64, 1);
    r.key("general.architecture", ty::STRING).string("llama");
    for &(name, dims, t, off) in infos {
        r.tensor_info(name, dims, t, off);
    }
    r.pad(32).zeros(data);
    r.build()
}

/// Offset where the first tensor info starts in `with_tensors` files.
const FIRST_INFO: usize = 24 + 8 + 20 + 4 + 8 + 5;

#[test]
fn valid_tensor_file_parses() {
    let f = with_tensors(&[("a", &[8, 2], 0, 0), ("b", &[32], 8, 64)], 64 + 34);
    let h = parse(&f).expect("valid");
    assert_eq!(h.tensors[1].size, 34);
    assert_eq!(h.data_offset as usize, f.len() - 98);
}

#[test]
fn bad_dimension_counts() {
    for n in [0u32, 5, u32::MAX] {
        let mut r = Raw::header(3, 1, 0);
        r.string("w").u32(n).zeros(64);
        let err = parse_err(&r.build(), &["\"w\"", "offset 24", "dimensions"]);
        assert!(matches!(err, GgufError::BadTensor { .. }));
    }
}

#[test]
fn absurd_dims() {
    let f = with_tensors(&[("w", &[1 << 32, 1 << 32, 1 << 32], 0, 0)], 0);
    parse_err(&f, &["\"w\"", &format!("offset {FIRST_INFO}"), "overflows"]);
    let f = with_tensors(&[("w", &[u64::MAX, 0], 0, 0)], 0);
    parse_err(&f, &["\"w\"", "i64::MAX"]);
    // Fits in i64 elements, but not in bytes: 2^62 F32 values.
    let f = with_tensors(&[("w", &[1 << 31, 1 << 30], 0, 0)], 0);
    assert!(matches!(
        parse(&f),
        Err(GgufError::TensorOutOfBounds { .. })
    ));
    let f = with_tensors(&[("w", &[1 << 61, 2], 0, 0)], 0);
    parse_err(&f, &["\"w\"", "byte size overflows"]);
    // Rows must be whole blocks: Q4_0 holds 32 values per block.
    let f = with_tensors(&[("w", &[33, 1], 2, 0)], 64);
    parse_err(&f, &["\"w\"", "row length 33", "Q4_0"]);
}

#[test]
fn unknown_tensor_types() {
    // 4 and 5 were Q4_2 and Q4_3, retired by ggml.
    for id in [4u32, 5, 31, 40, 1000, u32::MAX] {
        let f = with_tensors(&[("blk.0.attn_q.weight", &[32], id, 0)], 128);
        let err = parse_err(
            &f,
            &[
                "\"blk.0.attn_q.weight\"",
                &format!("offset {}", FIRST_INFO + 8 + 19 + 4 + 8),
                &id.to_string(),
            ],
        );
        assert!(matches!(err, GgufError::UnknownTensorType { .. }), "{err}");
    }
}

#[test]
fn tensor_offsets() {
    // Not a multiple of the alignment.
    let f = with_tensors(&[("w", &[4], 0, 8)], 64);
    parse_err(&f, &["\"w\"", "not a multiple of the alignment 32"]);
    // Past the end, partly and wholly.
    let f = with_tensors(&[("w", &[16], 0, 32)], 64);
    let err = parse_err(&f, &["\"w\"", &format!("offset {FIRST_INFO}"), "runs past"]);
    assert!(matches!(
        err,
        GgufError::TensorOutOfBounds {
            data_offset: 32,
            size: 64,
            data_len: 64,
            ..
        }
    ));
    let f = with_tensors(&[("w", &[1], 0, 1 << 40)], 64);
    parse_err(&f, &["\"w\"", "runs past"]);
    // Offset + size overflows u64.
    let f = with_tensors(&[("w", &[8], 0, u64::MAX - 31)], 64);
    parse_err(&f, &["\"w\"", "runs past"]);
    // Data section cut short: the file ends inside the last tensor.
    let f = with_tensors(&[("a", &[8], 0, 0), ("b", &[8], 0, 32)], 32 + 31);
    parse_err(&f, &["\"b\"", "runs past"]);
}

#[test]
fn overlapping_tensors() {
    // b starts inside a.
    let f = with_tensors(&[("a", &[16], 0, 0), ("b", &[8], 0, 32)], 128);
    let b_at = FIRST_INFO + (8 + 1 + 4 + 8 + 4 + 8);
    let err = parse_err(
        &f,
        &["\"a\"", "\"b\"", &format!("offset {b_at}"), "overlaps"],
    );
    assert!(matches!(err, GgufError::TensorOverlap { .. }));
    // Same offset, listed out of order; c is nested in the middle of a.
    let f = with_tensors(
        &[("c", &[8], 0, 32), ("b", &[8], 0, 96), ("a", &[64], 0, 0)],
        256,
    );
    parse_err(&f, &["\"a\"", "overlaps"]);
    // Touching is fine, and empty tensors overlap nothing.
    let f = with_tensors(
        &[("a", &[8], 0, 0), ("b", &[8], 0, 32), ("e", &[0], 0, 32)],
        64,
    );
    parse(&f).expect("adjacent tensors do not overlap");
}

#[test]
fn duplicate_tensor_names() {
    let f = with_tensors(
        &[("a", &[8], 0, 0), ("b", &[8], 0, 32), ("a", &[8], 0, 64)],
        96,
    );
    let third = FIRST_INFO + 2 * (8 + 1 + 4 + 8 + 4 + 8);
    let err = parse_err(&f, &["\"a\"", &format!("offset {third}")]);
    assert!(matches!(err, GgufError::DuplicateTensor { offset, .. } if offset == third));
}

// ---------------------------------------------------------------------------
// Sweeps

#[test]
fn every_truncation_of_a_small_file_fails_cleanly() {
    let f = small_file();
    let h = parse(&f).expect("the whole file parses");
    let data_end = h
        .tensors
        .iter()
        .map(|t| h.data_offset + t.offset + t.size)
        .max()
        .expect("has tensors") as usize;
    assert!(data_end <= f.len() && data_end > f.len() - 16);
    for cut in 0..f.len() {
        let result = parse(&f[..cut]);
        // Only the padding after the last tensor may go.
        assert_eq!(result.is_ok(), cut >= data_end, "cut at {cut}: {result:?}");
        if let Err(e) = result {
            let msg = e.to_string();
            assert!(msg.contains("offset") || msg.contains("GGUF"), "{msg}");
        }
    }
}

#[test]
fn every_single_byte_change_in_the_header_is_handled() {
    let f = small_file();
    let header_len = parse(&f).expect("valid").data_offset as usize;
    let mut g = f.clone();
    for i in 0..header_len {
        for v in [0x00, 0xff, 0x7f, 0x80, f[i] ^ 1, f[i].wrapping_add(1)] {
            g[i] = v;
            let _ = parse(&g);
        }
        g[i] = f[i];
    }
}

#[test]
fn random_corruptions_are_handled() {
    let f = small_file();
    let mut rng = StdRng::seed_from_u64(0x6767_7566);
    let fields: [u64; 6] = [0, 1, u64::MAX, u64::MAX / 8, 1 << 32, 1 << 20];
    for _ in 0..20_000 {
        let mut g = f.clone();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..g.len());
            if rng.gen_bool(0.5) {
                g[at] = rng.r#gen();
            } else {
                // Overwrite what may be a count, length or offset.
                let v = fields[rng.gen_range(0..fields.len())].to_le_bytes();
                let end = (at + 8).min(g.len());
                g[at..end].copy_from_slice(&v[..end - at]);
            }
        }
        if rng.gen_bool(0.2) {
            g.truncate(rng.gen_range(0..g.len()));
        }
        let _ = parse(&g);
    }
}

/// The files in `dir`, but not its README.
fn inputs(dir: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readable").path())
        .filter(|p| p.file_name().is_some_and(|n| n != "README.md"))
        .map(|p| {
            let bytes = std::fs::read(&p).expect("readable");
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Inputs that made the fuzzer fail (crash, hang, or allocate past its
/// limit), kept so that they stay fixed. See testdata/gguf/fuzz/README.md.
#[test]
fn fuzz_regressions() {
    for (path, bytes) in inputs("testdata/gguf/fuzz") {
        let result = parse(&bytes);
        println!("{}: {:?}", path.display(), result.map(|_| "Ok"));
    }
}

/// The fuzzer's seeds, written by gguf-py, are valid files.
#[test]
fn fuzz_seeds_parse() {
    let seeds = inputs("fuzz/seeds");
    assert!(seeds.len() >= 3);
    for (path, bytes) in seeds {
        parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

// ---------------------------------------------------------------------------
// Files

#[test]
fn open_reports_io_and_parse_errors() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let missing = dir.join("no-such-file.gguf");
    assert!(matches!(
        GgufFile::open(&missing),
        Err(GgufError::Io { .. })
    ));
    // A directory is named as one, not as "No such device".
    let e = GgufFile::open(&dir).err().expect("a directory is refused");
    assert!(e.to_string().contains("is a directory"), "{e}");
    let empty = dir.join("hostile-empty.gguf");
    std::fs::write(&empty, b"").expect("write");
    assert!(matches!(
        GgufFile::open(&empty),
        Err(GgufError::Truncated { .. })
    ));
    assert!(
        GgufFile::open(&dir).is_err(),
        "a directory is not a GGUF file"
    );
}

// ---------------------------------------------------------------------------
// The allocation bound, at its worst

/// Distinct three-byte names, for as many entries as possible.
fn name(i: usize) -> String {
    let b = [
        b'a' + (i / 676 % 26) as u8,
        b'a' + (i / 26 % 26) as u8,
        b'a' + (i % 26) as u8,
    ];
    String::from_utf8(b.to_vec()).expect("ascii")
}

/// Each worst case must parse (so every byte became a structure) and stay
/// inside the bound that `parse_measured` asserts. The ratios are printed
/// for `--nocapture`.
#[test]
fn densest_inputs_stay_within_the_bound() {
    let n = 17_000;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();

    let mut r = Raw::header(3, 0, n as u64);
    for i in 0..n {
        r.key(&name(i), ty::U8).u8(0);
    }
    cases.push(("metadata entries of one byte", r.build()));

    let mut r = Raw::header(3, n as u64, 0);
    for i in 0..n {
        r.tensor_info(&name(i), &[0], 0, 0);
    }
    cases.push(("empty tensors", r.pad(32).build()));

    let mut r = Raw::header(3, 0, 1);
    r.key("k", ty::ARRAY).u32(ty::STRING).u64(n as u64);
    for _ in 0..n {
        r.u64(1).u8(0xff);
    }
    cases.push(("one-byte strings that are not UTF-8", r.build()));

    let mut r = Raw::header(3, 0, 1);
    r.key("k", ty::ARRAY).u32(ty::ARRAY).u64(n as u64);
    for _ in 0..n {
        r.u32(ty::U8).u64(0);
    }
    cases.push(("empty nested arrays", r.build()));

    for (what, bytes) in cases {
        let (result, peak) = parse_measured(&bytes);
        result.unwrap_or_else(|e| panic!("{what}: {e}"));
        println!(
            "{what}: {} bytes, peak {peak} bytes allocated ({:.2}x)",
            bytes.len(),
            peak as f64 / bytes.len() as f64
        );
    }
}
