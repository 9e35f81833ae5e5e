//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The model cache that `scripts/fetch-models.sh` fills.
pub fn model_cache() -> PathBuf {
    match std::env::var_os("SMELT_CACHE") {
        Some(dir) => PathBuf::from(dir).join("models"),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/smelt/models"),
    }
}

/// A test model by file name. A missing model fails the test: the test
/// command fetches them, and a test that skips itself proves nothing.
pub fn model(file: &str) -> PathBuf {
    let path = model_cache().join(file);
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/fetch-models.sh` (or the README's test command)",
        path.display()
    );
    path
}

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// A file under the repository's `testdata/`.
pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}
