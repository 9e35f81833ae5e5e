//! `smelt serve --replicas 2` on lavapipe, with adapter 0 opened as two
//! devices (`--devices 0,0`), serving the synthetic Mistral of
//! `scripts/synth_arch.py` (one layer of F32 weights: its decode steps are
//! cheap on a software adapter) in the exact mode, whose tokens do not
//! depend on what else is in the batch.
//!
//! Requests sent at once go to both replicas (the access log and
//! `/health` say which served each), and each answer, with logprobs or a
//! grammar, equals what a one-replica server gives for it; a client that
//! leaves frees its replica's slot; a shutdown ends a running stream. Bad
//! flags are refused before anything loads.

mod serve_support;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{SMOLLM2, Server, connect, http, model, post_json, repo};

/// Two slots per replica, a short context, ggml's arithmetic.
const FLAGS: &[&str] = &[
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--exact",
    "--parallel",
    "2",
    "--ctx",
    "96",
];

/// `scripts/synth_arch.py mistral`, written into the target directory
/// once (the script needs the `gguf` package: `scripts/test.sh` puts it
/// on PYTHONPATH).
fn mistral() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve_replicas");
    let path = dir.join("mistral.gguf");
    if path.is_file() {
        return path;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let tmp = dir.join(format!("mistral.gguf.{}", std::process::id()));
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(repo("scripts/synth_arch.py"))
        .arg("mistral")
        .arg(&tmp)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "synth_arch.py mistral failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// Completions at temperature 0, plain, with log-probabilities, and under
/// a GBNF grammar; and an embedding.
fn requests() -> Vec<(&'static str, Value)> {
    let complete = |prompt: &str| json!({"prompt": prompt, "max_tokens": 6, "temperature": 0});
    let mut with_logprobs = complete("Once upon a time");
    with_logprobs["logprobs"] = json!(2);
    let mut with_grammar = complete("def fibonacci(n):");
    with_grammar["grammar"] = json!("root ::= [a-z ]+");
    vec![
        ("/v1/completions", complete("The capital of France is")),
        ("/v1/completions", with_logprobs),
        ("/v1/completions", with_grammar),
        ("/v1/completions", complete("One, two, three,")),
        (
            "/v1/embeddings",
            json!({"input": "The capital of France is"}),
        ),
    ]
}

/// What the server answers, without the fields that differ per response.
fn answers(addr: SocketAddr, requests: &[(&'static str, Value)]) -> Vec<Value> {
    std::thread::scope(|s| {
        let handles: Vec<_> = requests
            .iter()
            .map(|(path, body)| s.spawn(move || post_json(addr, path, body)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let r = h.join().unwrap();
                assert_eq!(r.status, 200, "{}", r.body);
                // Ids and times differ, and so do the prompt tokens each
                // server had cached.
                let mut v = r.json();
                for key in ["id", "created"] {
                    v.as_object_mut().unwrap().remove(key);
                }
                if let Some(usage) = v["usage"].as_object_mut() {
                    usage.remove("prompt_tokens_details");
                }
                v
            })
            .collect()
    })
}

/// Equal, numbers within 1e-5: the texts are the same tokens, while a
/// row's logits may take another kernel in another batch (decode or
/// prompt rows), whose last bits differ.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= 1e-5
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| close(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

fn health(addr: SocketAddr) -> Value {
    http(addr, "GET", "/health", &[], b"").json()
}

/// Waits (bounded) until `/health` satisfies `done`.
fn eventually(addr: SocketAddr, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let h = health(addr);
        if done(&h) {
            return h;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never {what}: {h}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Opens a long streaming completion and returns once its first piece of
/// text came: it then holds a slot.
fn long_stream(addr: SocketAddr) -> std::net::TcpStream {
    let body = json!({"prompt": "The", "max_tokens": 80, "temperature": 0, "stream": true});
    let mut s = connect(
        addr,
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&seen).contains("\"text\":") {
        let n = s.read(&mut buf).expect("the stream's first chunk");
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

#[test]
fn two_replicas_share_the_load_and_answer_as_one() {
    let model = mistral();
    let want = {
        let one = Server::start_model(&model, &[FLAGS, &["--device", "0"]].concat());
        let want = answers(one.addr, &requests());
        assert!(one.terminate().success());
        want
    };

    let mut two = Server::start_model(
        &model,
        &[FLAGS, &["--devices", "0,0", "--replicas", "2"]].concat(),
    );
    let h = health(two.addr);
    assert_eq!(h["replicas"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["slots_idle"], 4, "{h}");
    // A long stream holds a slot of replica 0 (an idle server's first), so
    // the requests after it start on replica 1 and spread over both.
    let held = long_stream(two.addr);
    let got = answers(two.addr, &requests());
    for (got, want) in got.iter().zip(&want) {
        assert!(close(got, want), "{got}\n{want}");
    }
    let h = health(two.addr);
    let served: Vec<u64> = (0..2)
        .map(|r| h["replicas"][r]["requests_served"].as_u64().unwrap())
        .collect();
    assert_eq!(served.iter().sum::<u64>(), 6, "{h}");
    assert!(served.iter().all(|&n| n >= 2), "{h}");

    // The client of the long stream leaves: replica 0's slot frees.
    drop(held);
    eventually(two.addr, "idle after the disconnect", |h| {
        h["slots_processing"] == 0 && h["replicas"][0]["slots_idle"] == 2
    });

    // The access log names the replica of every generation and embedding.
    let mut lines = Vec::new();
    let start = Instant::now();
    while lines.len() < 6 && start.elapsed() < Duration::from_secs(10) {
        if let Ok(line) = two.log.recv_timeout(Duration::from_millis(100))
            && line.contains("\"POST /v1/")
        {
            lines.push(line);
        }
    }
    for (r, &n) in served.iter().enumerate() {
        let tag = format!(" replica {r}");
        let on = lines.iter().filter(|l| l.ends_with(&tag)).count();
        assert_eq!(on as u64, n, "replica {r}: {lines:#?}");
    }

    // A shutdown ends a running stream, on whichever replica.
    let mut running = long_stream(two.addr);
    two.signal(libc::SIGTERM);
    let mut rest = String::new();
    let _ = running.read_to_string(&mut rest);
    assert!(two.wait_exit().success());
}

/// Flags that contradict `--replicas` are refused before anything loads.
#[test]
fn replica_flags_are_checked() {
    let model = model(SMOLLM2);
    for (flags, says) in [
        (
            &["--replicas", "2"][..],
            "--replicas 2 puts a copy of the model on each of 2 GPUs, but",
        ),
        (
            &["--replicas", "2", "--devices", "0,0,0"],
            "--replicas 2 needs 2 adapters in --devices",
        ),
        (
            &["--replicas", "2", "--devices", "0,7"],
            "--devices names adapter 7",
        ),
        (
            &[
                "--replicas",
                "2",
                "--devices",
                "0,0",
                "--split-mode",
                "layer",
            ],
            "cannot go with a layer split",
        ),
        (
            &[
                "--replicas",
                "2",
                "--devices",
                "0,0",
                "--tensor-split",
                "1,1",
            ],
            "cannot go with a layer split",
        ),
        (
            &["--replicas", "2", "--backend", "cpu"],
            "cannot go with a CPU backend",
        ),
        (&["--replicas", "2", "--device", "0"], "not --device"),
        (&["--replicas", "0"], "0 is not in 1..=64"),
        (
            &["--replicas", "2", "--devices", "0,0"],
            "2 copies of SmolLM2-135M-Instruct.Q4_1.gguf need 2 × ",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
            .arg("serve")
            .arg("-m")
            .arg(&model)
            .args(["--port", "0"])
            .args(flags)
            // Far more KV cache than the adapter has, for the memory check.
            .args(["--parallel", "256", "--ctx", "8192"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // clap's own refusals exit with 2.
        let code = if flags == ["--replicas", "0"] { 2 } else { 1 };
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("smelt: loaded"), "{flags:?}: {err}");
    }
}
