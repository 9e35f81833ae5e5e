//! The HTTP layer on a toy engine (no model): OpenAI's error shapes and
//! statuses, the SSE stream's form, 503 on a full queue, and a disconnect
//! freeing its slot. The same checks against SmolLM2 are in
//! `tests/serve_*.rs`; these keep the HTTP layer tested on its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use smelt::server::{Engine, Row, Vocab};

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

/// A server on a free loopback port, on its own runtime.
struct TestServer {
    addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

fn start(
    slots: usize,
    queue: usize,
    n_ctx: usize,
    delay_ms: u64,
    api_key: Option<&str>,
) -> TestServer {
    let toy = Toy {
        lens: vec![0; slots],
        n_ctx,
        out: Vec::new(),
        delay: Duration::from_millis(delay_ms),
    };
    let state = AppState::new(
        Scheduler::spawn(toy, Bytes, queue),
        ChatTemplate::builtin("chatml").unwrap(),
        Box::new(|s: &str| s.bytes().map(u32::from).collect()),
        "toy".into(),
        api_key.map(String::from),
        1 << 16,
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
    runtime.spawn(async move { axum::serve(listener, router(Arc::new(state))).await });
    TestServer {
        addr,
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
