//! Slow-client load (`tests/serve/slow_clients.py`): 500 connections that
//! never finish a request (half silent, half stopped inside their headers)
//! beside 32 real streams. The streams must finish within 1.5× the time
//! they take alone, and the server must close every hanging connection
//! at its timeout: partial headers at the header timeout, silent ones at
//! the idle timeout (each within 5 s). The timeouts are shortened (2 s
//! and 4 s) so the test lasts seconds, not a minute.

mod serve_support;

use std::process::Command;

use serve_support::{Server, repo};

#[test]
fn hanging_connections_neither_stall_streams_nor_stay_open() {
    let server = Server::start(&[
        "--parallel",
        "4",
        "--ctx",
        "1024",
        "--queue",
        "64",
        "--header-timeout",
        "2",
        "--idle-timeout",
        "4",
    ]);
    let out = Command::new("python3")
        .arg(repo("tests/serve/slow_clients.py"))
        .arg(server.url())
        .args(["--idle", "500", "--streams", "32", "--max-tokens", "8"])
        .args(["--header-timeout", "2", "--idle-timeout", "4"])
        .args(["--slack", "1.5", "--margin", "5"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("5 passed, 0 failed"), "{stdout}\n{stderr}");
    assert!(server.terminate().success());
}
