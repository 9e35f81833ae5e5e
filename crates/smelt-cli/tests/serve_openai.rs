//! The server driven by the real `openai` Python client, streaming and not,
//! against SmolLM2 on the CPU (`tests/serve/openai_client.py` holds the
//! checks and names their references).

mod serve_support;

use std::process::Command;

use serve_support::{SMOLLM2, Server, model, repo};

#[test]
fn openai_python_client() {
    let server = Server::start(&["--parallel", "2", "--ctx", "1024"]);
    let out = Command::new("python3")
        .arg(repo("tests/serve/openai_client.py"))
        .arg(server.url())
        .arg(model(SMOLLM2))
        .arg(repo("testdata/reference/smollm2-135m-q4_1-greedy.json"))
        .arg(env!("CARGO_BIN_EXE_smelt"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(server.terminate().success());
}
