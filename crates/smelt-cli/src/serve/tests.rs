//! The HTTP layer on a toy engine (no model): OpenAI's error shapes and
//! statuses, the SSE stream's form, 503 on a full queue, and a disconnect
//! freeing its slot. The same checks against SmolLM2 are in
//! `tests/serve_*.rs`; these keep the HTTP layer tested on its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use smelt::server::{Engine, Row, Scheduler, Vocab};

use super::*;

/// Next token is always `(last * 7 + 1) % 26 + 'a'`; never ends by itself.
struct Toy {
    lens: Vec<usize>,
    n_ctx: usize,
    out: Vec<f32>,
    delay: Duration,
}

impl Engine for Toy {
    fn n_slots(&self) -> usize {
        self.lens.len()
    }
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    fn n_vocab(&self) -> usize {
        256
    }
    fn n_batch(&self) -> usize {
        64
    }
    fn decode(&mut self, rows: &[Row]) -> Result<&[f32], String> {
        std::thread::sleep(self.delay);
        self.out.clear();
        for r in rows {
            if r.pos != self.lens[r.seq] {
                return Err(format!("row {r:?} does not continue its slot"));
            }
            self.lens[r.seq] += 1;
            if r.logits {
                let mut v = [0.0f32; 256];
                v[(r.token as usize * 7 + 1) % 26 + 97] = 5.0;
                self.out.extend_from_slice(&v);
            }
        }
        Ok(&self.out)
    }
    fn truncate(&mut self, slot: usize, len: usize) {
        self.lens[slot] = self.lens[slot].min(len);
    }
}

struct Bytes;

impl Vocab for Bytes {
    fn is_eog(&self, _: u32) -> bool {
        false
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        vec![id as u8]
    }
}

/// A server on a free loopback port, on its own runtime; `stop` shuts it
/// down as a signal would.
struct TestServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _runtime: tokio::runtime::Runtime,
}

impl TestServer {
    /// Shuts down as SIGTERM does and waits (bounded) until the server is
    /// done.
    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Options {
    slots: usize,
    queue: usize,
    n_ctx: usize,
    delay_ms: u64,
    api_key: Option<&'static str>,
    timeouts: Timeouts,
    pooling: smelt::model::Pooling,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            slots: 1,
            queue: 4,
            n_ctx: 64,
            delay_ms: 0,
            api_key: None,
            timeouts: Timeouts::default(),
            pooling: smelt::model::Pooling::Last,
        }
    }
}

fn start(
    slots: usize,
    queue: usize,
    n_ctx: usize,
    delay_ms: u64,
    api_key: Option<&'static str>,
) -> TestServer {
    start_with(Options {
        slots,
        queue,
        n_ctx,
        delay_ms,
        api_key,
        ..Options::default()
    })
}

fn start_with(o: Options) -> TestServer {
    let toy = Toy {
        lens: vec![0; o.slots],
        n_ctx: o.n_ctx,
        out: Vec::new(),
        delay: Duration::from_millis(o.delay_ms),
    };
    let state = AppState::new(
        Served {
            scheduler: Scheduler::spawn(toy, Bytes, o.queue).into(),
            devices: vec!["toy".into()],
            template: ChatTemplate::builtin("chatml").unwrap(),
            encode: Box::new(|s: &str| s.bytes().map(u32::from).collect()),
            token_bytes: Arc::new(|id| vec![id as u8]),
            grammars: None,
            model_id: "toy".into(),
            pooling: o.pooling,
        },
        Limits {
            api_key: o.api_key.map(String::from),
            body_limit: 1 << 16,
            timeouts: o.timeouts,
        },
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(serve_on(listener, Arc::new(state), async move {
        let _ = stopped.await;
    }));
    TestServer {
        addr,
        stop: Some(stop),
        _runtime: runtime,
    }
}

fn send(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body.as_bytes());
    s
}

/// (status, body with chunked framing removed).
fn request(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut raw = String::new();
    send(addr, method, path, headers, body)
        .read_to_string(&mut raw)
        .unwrap();
    let (head, mut rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_string());
    }
    let mut body = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size, 16).unwrap();
        if n == 0 {
            break;
        }
        body.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    (status, body)
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, String) {
    request(addr, "POST", path, "", &body.to_string())
}

fn openai_error(status: u16, (got, body): (u16, String)) -> Value {
    assert_eq!(got, status, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let e = &v["error"];
    assert!(
        e["message"].is_string() && e["type"].is_string() && e.get("code").is_some(),
        "{v}"
    );
    v
}

#[test]
fn errors_have_openai_shape_and_status() {
    let s = start(1, 4, 64, 0, Some("k"));
    let a = s.addr;
    let key = "Authorization: Bearer k\r\n";
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    openai_error(401, post(a, "/v1/chat/completions", &chat));
    openai_error(
        401,
        request(a, "GET", "/v1/models", "Authorization: Bearer j\r\n", ""),
    );
    assert_eq!(request(a, "GET", "/health", "", "").0, 200);
    let (status, body) = request(a, "POST", "/v1/chat/completions", key, &chat.to_string());
    assert_eq!(status, 200, "{body}");
    openai_error(400, request(a, "POST", "/v1/completions", key, "{nope"));
    for bad in [
        json!({"prompt": "hi", "temperature": -1}),
        json!({"prompt": "hi", "top_p": 2}),
        json!({"prompt": "hi", "n": 3}),
        json!({"prompt": "hi", "max_tokens": 0}),
        json!({"prompt": ["a", "b"]}),
        json!({"prompt": 5}),
    ] {
        openai_error(
            400,
            request(a, "POST", "/v1/completions", key, &bad.to_string()),
        );
    }
    let long = json!({"prompt": "x".repeat(64)});
    let e = openai_error(
        400,
        request(a, "POST", "/v1/completions", key, &long.to_string()),
    );
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    openai_error(404, request(a, "GET", "/nowhere", key, ""));
    openai_error(405, request(a, "DELETE", "/v1/models", key, ""));
    let huge = json!({"prompt": "x".repeat(1 << 17)});
    openai_error(
        413,
        request(a, "POST", "/v1/completions", key, &huge.to_string()),
    );
}

#[test]
fn streams_are_well_formed_and_match_whole_answers() {
    let s = start(2, 4, 256, 0, None);
    let body =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0});
    let (status, whole) = post(s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200);
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["finish_reason"], "length");
    assert_eq!(whole["usage"]["completion_tokens"], 5);

    let mut body = body;
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, sse) = post(s.addr, "/v1/chat/completions", &body);
    assert_eq!(status, 200);
    let data: Vec<&str> = sse
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data: events only"))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    let usage = &chunks[n - 1]["usage"];
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage[k], whole["usage"][k], "{usage}");
    }
    // The second request reused the first one's prompt from the slot.
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 51);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"])
    );
}

#[test]
fn full_queue_is_503_and_a_disconnect_frees_the_slot() {
    let s = start(1, 1, 1 << 20, 2, None);
    let a = s.addr;
    let endless = json!({"prompt": "go", "stream": true}).to_string();
    let mut first = send(a, "POST", "/v1/completions", "", &endless);
    let mut buf = [0u8; 64];
    let n = first.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let second = send(a, "POST", "/v1/completions", "", &endless);
    let health =
        || -> Value { serde_json::from_str(&request(a, "GET", "/health", "", "").1).unwrap() };
    let t = Instant::now();
    while health()["requests_waiting"] != 1 {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = openai_error(503, post(a, "/v1/completions", &json!({"prompt": "hi"})));
    assert_eq!(e["error"]["code"], "server_busy");
    drop(first);
    drop(second);
    let t = Instant::now();
    while health()["slots_processing"] != 0 || health()["requests_waiting"] != 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", health());
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, _) = post(
        a,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 1}),
    );
    assert_eq!(status, 200);
}

// ---- issue 27: timeouts, short bodies, shutdown, models, messages ----

fn short_timeouts() -> Timeouts {
    Timeouts {
        header: Duration::from_millis(400),
        body: Duration::from_millis(400),
        idle: Duration::from_millis(1500),
    }
}

/// Reads until the server closes the connection; returns what came and
/// when the connection closed.
fn read_until_closed(s: &mut TcpStream) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A reset is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server kept the connection open: {e}"),
        }
    }
    (String::from_utf8_lossy(&raw).into_owned(), t.elapsed())
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let s = start_with(Options {
        timeouts: short_timeouts(),
        ..Options::default()
    });
    // Nothing sent: idle, not a header in progress.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    let (got, after) = read_until_closed(&mut idle);
    assert_eq!(got, "");
    assert!(
        after >= Duration::from_millis(1300) && after < Duration::from_secs(5),
        "{after:?}"
    );
    // Kept alive after a response: idle again, closed the same way.
    let mut kept = TcpStream::connect(s.addr).unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (got, after) = read_until_closed(&mut kept);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(after >= Duration::from_millis(1300), "{after:?}");
}

#[test]
fn partial_headers_are_cut_at_the_header_timeout() {
    let s = start_with(Options {
        timeouts: short_timeouts(),
        ..Options::default()
    });
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let (_, after) = read_until_closed(&mut c);
    assert!(after < Duration::from_millis(1300), "{after:?}");
}

#[test]
fn a_slow_body_gets_408_and_a_short_one_400() {
    let s = start_with(Options {
        timeouts: short_timeouts(),
        ..Options::default()
    });
    let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    // Ten bytes of a hundred, then silence.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.write_all(format!("{head}{{\"prompt\":").as_bytes())
        .unwrap();
    let (got, after) = read_until_closed(&mut slow);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("request_timeout"), "{got}");
    assert!(after < Duration::from_secs(3), "{after:?}");
    // Ten bytes, then the end of the stream: the body is short.
    let mut short = TcpStream::connect(s.addr).unwrap();
    short
        .write_all(format!("{head}{{\"prompt\":").as_bytes())
        .unwrap();
    short.shutdown(std::net::Shutdown::Write).unwrap();
    let (got, _) = read_until_closed(&mut short);
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert!(got.contains("ended early"), "{got}");
}

#[test]
fn queued_requests_get_503_at_shutdown() {
    let mut s = start(1, 4, 1 << 20, 2, None);
    let a = s.addr;
    let endless = json!({"prompt": "go", "stream": true}).to_string();
    let mut running = send(a, "POST", "/v1/completions", "", &endless);
    let mut buf = [0u8; 64];
    let n = running.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let mut waiting = send(
        a,
        "POST",
        "/v1/completions",
        "",
        &json!({"prompt": "hi", "max_tokens": 4}).to_string(),
    );
    let health =
        || -> Value { serde_json::from_str(&request(a, "GET", "/health", "", "").1).unwrap() };
    let t = Instant::now();
    while health()["requests_waiting"] != 1 {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    s.shut_down();
    let (got, _) = read_until_closed(&mut waiting);
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("shutting down"), "{got}");
    let (stream, _) = read_until_closed(&mut running);
    assert!(stream.contains("shutting down"), "{stream}");
}

#[test]
fn other_model_names_get_404() {
    let s = start(1, 4, 64, 0, None);
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let body = json!({"model": "gpt-4o", "prompt": "hi", "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}]});
        let e = openai_error(404, post(s.addr, path, &body));
        assert_eq!(e["error"]["code"], "model_not_found", "{e}");
        let mut body = body;
        body["model"] = json!("toy");
        assert_eq!(post(s.addr, path, &body).0, 200, "{path}");
    }
}

#[test]
fn messages_need_a_known_role_and_content() {
    let s = start(1, 4, 256, 0, None);
    let chat = |messages: Value| {
        post(
            s.addr,
            "/v1/chat/completions",
            &json!({"messages": messages, "max_tokens": 1}),
        )
    };
    for bad in [
        json!([{"role": "wizard", "content": "hi"}]),
        json!([{"role": "user"}]),
        json!([{"role": "user", "content": null}]),
        json!([{"role": "user", "content": "hi"}, {"role": "assistant"}]),
    ] {
        let e = openai_error(400, chat(bad.clone()));
        assert!(
            e["error"]["param"]
                .as_str()
                .unwrap()
                .starts_with("messages["),
            "{e}"
        );
    }
    // An assistant turn of tool calls alone has no content, rightly.
    let calls = json!([{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}]);
    assert_eq!(chat(calls).0, 200);
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let s = start(1, 4, 64, 0, Some("k"));
    for header in ["Bearer k", "bearer k", "BEARER  k"] {
        let h = format!("Authorization: {header}\r\n");
        assert_eq!(
            request(s.addr, "GET", "/v1/models", &h, "").0,
            200,
            "{header}"
        );
    }
    for header in ["Basic k", "k", "Bearerk"] {
        let h = format!("Authorization: {header}\r\n");
        assert_eq!(
            request(s.addr, "GET", "/v1/models", &h, "").0,
            401,
            "{header}"
        );
    }
}

/// `/v1/embeddings` refuses what it cannot answer in OpenAI's shape: no
/// pooling (a vector per token), an engine without hidden states, bad
/// inputs; each in OpenAI's error shape.
#[test]
fn embeddings_refusals() {
    let none = start_with(Options {
        pooling: smelt::model::Pooling::None,
        ..Options::default()
    });
    let v = openai_error(
        400,
        post(none.addr, "/v1/embeddings", &json!({"input": "hi"})),
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--pooling mean"),
        "{v}"
    );
    let s = start_with(Options::default());
    let v = openai_error(400, post(s.addr, "/v1/embeddings", &json!({"input": "hi"})));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no embeddings"),
        "{v}"
    );
    for bad in [
        json!({"input": 3.5}),
        json!({"input": [["a"]]}),
        json!({"input": {}}),
    ] {
        openai_error(400, post(s.addr, "/v1/embeddings", &bad));
    }
    openai_error(
        404,
        post(
            s.addr,
            "/v1/embeddings",
            &json!({"input": "x", "model": "m"}),
        ),
    );
}
