//! Running `scripts/quant_ref.py`, the `gguf` Python package's reference
//! (de)quantizers, from the quant tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// `python3`, or `$PYTHON`.
pub fn python() -> Command {
    Command::new(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()))
}

pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quant_ref.py")
}

/// Runs `quant_ref.py ARGS...`, failing the test with its stderr (which says
/// so when `gguf` or `numpy` is missing).
pub fn run(args: &[&std::ffi::OsStr]) -> String {
    let out = python()
        .arg(script())
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .expect("cannot start python3: the quant tests need Python 3 with gguf and numpy");
    assert!(
        out.status.success(),
        "quant_ref.py {:?} failed:\n{}{}",
        args,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh seed each run, printed so a failure can be replayed with
/// `SMELT_SEED=<seed>`.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("SMELT_SEED") {
        Ok(s) => s.parse().expect("SMELT_SEED is a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64,
    };
    eprintln!("{test}: seed {seed} (replay with SMELT_SEED={seed})");
    seed
}

/// A scratch directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("smelt-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).expect("write f32 file");
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("read f32 file");
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Compares values with the reference `want`, row by row: each value must
/// be within `1e-6 × (largest finite |want| in its row)` of the reference
/// (exact when that is 0); a NaN must meet a NaN and an infinity the same
/// infinity. Returns how many values matched bit for bit.
pub fn assert_close_rows(what: &str, got: &[f32], want: &[f32], row: usize) -> usize {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut exact = 0;
    for (r, (g, w)) in got.chunks(row).zip(want.chunks(row)).enumerate() {
        let scale = w
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f32, |m, v| m.max(v.abs()));
        let tol = 1e-6 * scale;
        for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
            let ok = if b.is_nan() {
                a.is_nan()
            } else if b.is_infinite() {
                a == b
            } else {
                (a - b).abs() <= tol
            };
            assert!(
                ok,
                "{what}: row {r} value {i}: got {a:e}, reference {b:e} (tolerance {tol:e})"
            );
            exact += usize::from(a.to_bits() == b.to_bits());
        }
    }
    exact
}
