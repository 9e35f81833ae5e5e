//! `smelt pull` and `-m hf://` against a stand-in hub on loopback
//! (`tests/hub/fake_hub.py`, the hub's HTTP API: model info with LFS
//! hashes, `resolve/main` redirects, range requests): the file arrives
//! whole and checked; a download cut at 50% resumes where it stopped; a
//! cached file that was corrupted is detected and fetched again; a hub
//! that sends wrong bytes, or wants a token, gives a clear error.

#[path = "../../smelt/tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

struct Hub {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Hub {
    fn start(root: &Path, extra: &[&str]) -> Hub {
        let log = root.with_extension("log");
        std::fs::remove_file(&log).ok();
        let mut child = Command::new("python3")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/hub/fake_hub.py"))
            .arg(root)
            .arg("org/repo")
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().strip_prefix("port ").expect("the hub's port");
        Hub {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// The requests of each download of the file: their `Range` headers.
    fn ranges(&self) -> Vec<Option<String>> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["path"].as_str().unwrap().starts_with("/cdn/"))
            .map(|r| r["range"].as_str().map(String::from))
            .collect()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smelt-pull-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Bytes that are not all alike, so a resumed file at a wrong offset
/// would not match.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn smelt(args: &[&str], hub: &Hub, cache: &Path, token: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_smelt"));
    cmd.args(args)
        .env("HF_ENDPOINT", &hub.url)
        .env("SMELT_CACHE", cache)
        .env_remove("HF_TOKEN");
    if let Some(t) = token {
        cmd.env("HF_TOKEN", t);
    }
    cmd.output().expect("smelt runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_interrupted_download_resumes_and_corruption_is_refetched() {
    let dir = temp_dir("resume");
    let root = dir.join("hub");
    std::fs::create_dir_all(&root).unwrap();
    let q4 = noise(3 << 20, 1);
    std::fs::write(root.join("tiny-Q4_K_M.gguf"), &q4).unwrap();
    std::fs::write(root.join("tiny-Q8_0.gguf"), noise(1 << 20, 2)).unwrap();
    let hub = Hub::start(&root, &["--token", "sesame", "--cut-first", "0.5"]);
    let cache = dir.join("cache");

    // No token: the hub says 401, and smelt says what to do.
    let out = smelt(&["pull", "org/repo"], &hub, &cache, None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("HF_TOKEN"),
        "{}",
        text(&out.stderr)
    );

    // The first download is cut at half; the second asks for the rest.
    let out = smelt(&["pull", "org/repo"], &hub, &cache, Some("sesame"));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let path = PathBuf::from(text(&out.stdout).trim());
    assert_eq!(path, cache.join("models/hub/org/repo/tiny-Q4_K_M.gguf"));
    assert!(std::fs::read(&path).unwrap() == q4, "the file differs");
    let half = (3 << 20) / 2;
    assert_eq!(
        hub.ranges(),
        [None, Some(format!("bytes={half}-"))],
        "{err}"
    );
    assert!(
        err.contains(&format!("resuming tiny-Q4_K_M.gguf at {half} bytes")),
        "{err}"
    );
    assert!(!path.with_extension("gguf.partial").exists());

    // Cached and whole: nothing is downloaded.
    let out = smelt(&["pull", "org/repo:q4_k_m"], &hub, &cache, Some("sesame"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(hub.ranges().len(), 2);

    // A corrupted cache is noticed by its hash and fetched again.
    let mut bytes = q4.clone();
    bytes[12345] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let out = smelt(&["pull", "org/repo"], &hub, &cache, Some("sesame"));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("SHA-256") && err.contains("fetching it again"),
        "{err}"
    );
    assert!(std::fs::read(&path).unwrap() == q4);

    // A quantization by name, and one the repository lacks.
    let out = smelt(&["pull", "org/repo:Q8_0"], &hub, &cache, Some("sesame"));
    assert!(
        text(&out.stdout).trim().ends_with("tiny-Q8_0.gguf"),
        "{}",
        text(&out.stderr)
    );
    let out = smelt(&["pull", "org/repo:q2_k"], &hub, &cache, Some("sesame"));
    assert!(
        text(&out.stderr).contains("tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn wrong_bytes_from_the_hub_are_refused() {
    let dir = temp_dir("corrupt");
    let root = dir.join("hub");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("only.gguf"), noise(200_000, 3)).unwrap();
    let hub = Hub::start(&root, &["--corrupt"]);
    let cache = dir.join("cache");
    let out = smelt(&["pull", "org/repo"], &hub, &cache, None);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("SHA-256"), "{err}");
    assert!(!cache.join("models/hub/org/repo/only.gguf").exists());
    assert!(!cache.join("models/hub/org/repo/only.gguf.partial").exists());
}

/// `-m hf://org/repo/file.gguf` fetches the model and runs it.
#[test]
fn a_model_named_by_hf_url_is_fetched_and_used() {
    let dir = temp_dir("hf-url");
    let root = dir.join("hub");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(common::model(common::SMOLLM2), root.join("smollm2.gguf")).unwrap();
    let hub = Hub::start(&root, &[]);
    let cache = dir.join("cache");
    let url = "hf://org/repo/smollm2.gguf";
    let out = smelt(
        &["tokenize", "-m", url, "--text", "Hello world"],
        &hub,
        &cache,
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "19556 905");
    assert!(cache.join("models/hub/org/repo/smollm2.gguf").is_file());
    let out = smelt(
        &["tokenize", "-m", "hf://org/repo/nope.gguf", "--text", "x"],
        &hub,
        &cache,
        None,
    );
    assert!(
        text(&out.stderr).contains("has no file \"nope.gguf\""),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}
