//! Load: 32 concurrent streaming clients × 3 requests each, over loopback,
//! against SmolLM2 on the CPU with 4 slots. Every stream must be well
//! formed and complete, and each client must get exactly the answer its
//! prompt gets alone; clients that leave mid-stream, among the load and
//! all at once, must free their slots (`tests/serve/load.py`).
//!
//! Bounded: 8 tokens per answer, and the clients get 240 s before the run
//! counts as failed (it takes 30–55 s on the shared 2-core machine).

mod serve_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serve_support::{Server, repo};

#[test]
fn thirty_two_streaming_clients() {
    // A context far longer than the test lasts in steps: a disconnected
    // generation that kept running would hold its slot past the checks.
    let server = Server::start(&["--parallel", "4", "--ctx", "1024", "--queue", "64"]);
    let mut child = Command::new("python3")
        .arg(repo("tests/serve/load.py"))
        .arg(server.url())
        .args(["--clients", "32", "--requests", "3", "--max-tokens", "8"])
        .args(["--disconnects", "4", "--slots", "4", "--long-tokens", "900"])
        .args(["--timeout", "240"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("96 passed, 0 failed"), "{stdout}\n{stderr}");
    assert!(server.terminate().success());
}
