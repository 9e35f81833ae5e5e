//! The server's error cases over raw HTTP: OpenAI's JSON error shape with
//! the right status for bad JSON and parameters (400), keys (401), prompts
//! longer than the context (400), unknown routes (404), oversized bodies
//! (413) and a full wait queue (503); disconnects that free their slots;
//! loopback unless told otherwise; and a clean exit on SIGINT and SIGTERM,
//! even with a stream running or straight after start.

mod serve_support;

use std::io::Read;
use std::net::{IpAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, connect, http, post_json, sse_data};

/// Asserts OpenAI's error shape and returns the message.
fn error_of(status: u16, r: &serve_support::Response) -> String {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
    assert!(e.get("code").is_some(), "{v}");
    e["message"].as_str().unwrap().to_string()
}

fn chat(max_tokens: u32) -> Value {
    json!({"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": max_tokens})
}

#[test]
fn bad_requests_get_openai_errors() {
    let server = Server::start(&["--parallel", "1", "--ctx", "128", "--api-key", "sesame"]);
    let a = server.addr;
    let auth = [
        ("Authorization", "Bearer sesame"),
        ("Content-Type", "application/json"),
    ];
    let post = |path: &str, body: &str| http(a, "POST", path, &auth, body.as_bytes());

    // 401 without a key or with a wrong one; /health stays open.
    let r = post_json(a, "/v1/chat/completions", &chat(1));
    error_of(401, &r);
    let r = http(
        a,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert_eq!(http(a, "GET", "/health", &[], b"").status, 200);
    let models = http(a, "GET", "/v1/models", &auth, b"");
    assert_eq!(models.status, 200);
    assert_eq!(models.json()["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");

    // 400: bad JSON, wrong types, parameters out of range.
    let msg = error_of(400, &post("/v1/chat/completions", "{\"messages\": [}"));
    assert!(msg.contains("JSON"), "{msg}");
    error_of(400, &post("/v1/chat/completions", "{\"messages\": \"hi\"}"));
    error_of(400, &post("/v1/completions", "{}"));
    let user = json!([{"role": "user", "content": "hi"}]);
    for (field, value) in [
        ("temperature", json!(3.5)),
        ("top_p", json!(-0.1)),
        ("max_tokens", json!(0)),
        ("n", json!(2)),
        ("presence_penalty", json!(9)),
        ("frequency_penalty", json!("a lot")),
        ("stop", json!(["a", "b", "c", "d", "e"])),
        ("messages", json!([])),
        ("messages", json!([{"content": "no role"}])),
    ] {
        let mut body = json!({"messages": user, "max_tokens": 1});
        body[field] = value.clone();
        let r = post("/v1/chat/completions", &body.to_string());
        error_of(400, &r);
    }

    // 400 for a prompt longer than the context (128 tokens here).
    let long = "word ".repeat(400);
    let r = post(
        "/v1/completions",
        &json!({"prompt": long, "max_tokens": 1}).to_string(),
    );
    let msg = error_of(400, &r);
    assert!(msg.contains("context"), "{msg}");
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");

    // 404 for unknown routes, 405 for a wrong method, both as JSON.
    error_of(404, &http(a, "GET", "/v2/nothing", &auth, b""));
    error_of(404, &post("/v1/images/generations", "{}"));
    // /v1/embeddings exists: a body without `input` is a bad request.
    error_of(400, &post("/v1/embeddings", "{}"));
    error_of(405, &http(a, "GET", "/v1/chat/completions", &auth, b""));

    // 413 past the body limit (4 MiB).
    let huge = format!("{{\"prompt\": \"{}\"}}", "x".repeat(5 << 20));
    let r = post("/v1/completions", &huge);
    error_of(413, &r);

    // Still serving after all that.
    let r = post(
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["completion_tokens"], 2);

    // Every request left one access-log line: peer, request, status,
    // bytes, seconds.
    let mut lines = Vec::new();
    while let Ok(line) = server.log.recv_timeout(Duration::from_secs(5)) {
        lines.push(line);
        if lines
            .iter()
            .filter(|l| l.contains("\"POST /v1/completions\" 200 "))
            .count()
            == 1
        {
            break;
        }
    }
    let logged = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(logged("\"POST /v1/completions\" 200 "), 1, "{lines:#?}");
    assert_eq!(logged("\"POST /v1/completions\" 413 "), 1, "{lines:#?}");
    assert_eq!(logged("\"GET /v2/nothing\" 404 "), 1, "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("\" 200 ") || l.starts_with("smelt serve: 127.0.0.1:")),
        "{lines:#?}"
    );
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
}

/// One slot and a queue of one: a third concurrent request gets 503. A
/// client that disconnects mid-stream frees its slot at once.
#[test]
fn full_queue_is_503_and_disconnects_free_slots() {
    let server = Server::start(&["--parallel", "1", "--queue", "1", "--ctx", "1024"]);
    let a = server.addr;
    let stream_body = json!({
        "messages": [{"role": "user", "content": "Write a very long essay about the sea."}],
        "max_tokens": 900, "stream": true, "temperature": 0.8, "seed": 1
    })
    .to_string();
    let headers = [("Content-Type", "application/json")];
    // The first holds the slot (wait for its first bytes), the second waits.
    let mut first = connect(
        a,
        "POST",
        "/v1/chat/completions",
        &headers,
        stream_body.as_bytes(),
    );
    let mut buf = [0u8; 256];
    let n = first.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let second = connect(
        a,
        "POST",
        "/v1/chat/completions",
        &headers,
        stream_body.as_bytes(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while http(a, "GET", "/health", &[], b"").json()["requests_waiting"] != 1 {
        assert!(Instant::now() < deadline, "the second request never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post_json(a, "/v1/chat/completions", &chat(1));
    let msg = error_of(503, &r);
    assert!(msg.contains("busy"), "{msg}");

    // Both clients leave mid-stream: the slot and the queue empty quickly,
    // long before 900 tokens could have been generated.
    drop(first);
    drop(second);
    let left = Instant::now();
    loop {
        let h = http(a, "GET", "/health", &[], b"").json();
        if h["slots_processing"] == 0 && h["requests_waiting"] == 0 {
            break;
        }
        assert!(
            left.elapsed() < Duration::from_secs(10),
            "slot not freed: {h}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post_json(
        a,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(server.terminate().success());
}

/// Without `--host` the server listens on loopback only: it says so, and
/// the machine's other address (if it has one) refuses the connection.
#[test]
fn binds_loopback_unless_told_otherwise() {
    let server = Server::start_with(&["--port", "0", "--parallel", "1", "--ctx", "64"]);
    assert_eq!(server.addr.ip(), IpAddr::from([127, 0, 0, 1]));
    assert_eq!(http(server.addr, "GET", "/health", &[], b"").status, 200);
    // The address outgoing traffic would use; connecting a UDP socket
    // sends nothing. A machine without a route has none to try.
    let outward = UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("192.0.2.1:9").map(|()| u))
        .and_then(|u| u.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    if let Some(ip) = outward {
        let there = (ip, server.addr.port()).into();
        assert!(
            TcpStream::connect_timeout(&there, Duration::from_secs(2)).is_err(),
            "the server answers on {there}"
        );
    }
    assert!(server.terminate().success());
}

/// A signal sent as soon as the address is announced finds the handlers
/// in place: the server exits with success, not by the signal's default
/// action.
#[test]
fn a_signal_right_after_the_address_line_exits_cleanly() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGTERM] {
        let mut server = Server::start(&["--parallel", "1", "--ctx", "64"]);
        server.signal(signal);
        let status = server.wait_exit();
        assert!(status.success(), "signal {signal}: {status}");
    }
}

/// SIGINT and SIGTERM while a stream runs: the stream ends with an error
/// event and `data: [DONE]`, new connections are refused, and the process
/// exits with success.
#[test]
fn sigint_and_sigterm_end_running_streams_and_exit_cleanly() {
    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let mut server = Server::start(&["--parallel", "1", "--ctx", "1024"]);
        let a = server.addr;
        // SmolLM2 counts on for hundreds of tokens: this runs until stopped.
        let body = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 900,
            "temperature": 0, "stream": true});
        let mut s = connect(
            a,
            "POST",
            "/v1/completions",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&raw).contains("\"text\":\"") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{name}: the stream ended before any text");
            raw.extend_from_slice(&buf[..n]);
        }
        server.signal(signal);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.read_to_end(&mut raw)
            .unwrap_or_else(|e| panic!("{name}: the stream did not end: {e}"));
        let data = sse_data(&serve_support::parse(&raw).body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{name}");
        let last: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
        let msg = last["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("shutting down"), "{name}: {last}");
        // Far fewer than 900 tokens came: the generation was cut short.
        assert!(data.len() < 300, "{name}: {} events", data.len());
        assert!(
            TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_err(),
            "{name}: still accepting connections"
        );
        let status = server.wait_exit();
        assert!(status.success(), "{name}: exit status {status}");
    }
}
