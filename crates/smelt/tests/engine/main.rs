//! The CPU engine: reference ops, the fast CPU backend against them, the
//! Llama forward pass against llama.cpp, generation and the CLI.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/reference.rs"]
mod reference;

mod fast;
mod kv_blocks;
mod llama;
mod ops;
mod quant_blocks;

use std::path::PathBuf;
use std::process::Command;

/// Runs `python3 testdata/engine/SCRIPT ARGS`, whose outputs go to a fresh
/// directory passed as its first argument; returns that directory.
pub fn python(script: &str, args: &[&str]) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "smelt-engine-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("python3")
        .arg(common::testdata(&format!("engine/{script}")))
        .arg(&dir)
        .args(args)
        .output()
        .expect("python3 must be installed for the reference checks");
    assert!(
        out.status.success(),
        "{script} failed (is the `gguf` package installed? scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}
