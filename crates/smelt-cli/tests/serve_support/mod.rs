//! Starting `smelt serve` for a test, and raw HTTP/1.1 to talk to it.
//!
//! The server listens on loopback on a port it picks (`--port 0`); the test
//! reads the address from its first line on stderr. It is killed when the
//! handle drops, whatever the test did.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A test model in the cache `scripts/fetch-models.sh` fills. Missing
/// models fail the test.
pub fn model(file: &str) -> PathBuf {
    let dir = match std::env::var_os("SMELT_CACHE") {
        Some(d) => PathBuf::from(d).join("models"),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/smelt/models"),
    };
    let path = dir.join(file);
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/fetch-models.sh`",
        path.display()
    );
    path
}

pub fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The server's stderr after the first line, as it comes.
    pub log: mpsc::Receiver<String>,
}

impl Server {
    /// `smelt serve -m SmolLM2 --host 127.0.0.1 --port 0 EXTRA...`.
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["--host", "127.0.0.1", "--port", "0"];
        args.extend_from_slice(extra);
        Server::start_with(&args)
    }

    /// `smelt serve -m SmolLM2 ARGS...`: nothing added but the model.
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_model(&model(SMOLLM2), args)
    }

    /// `smelt serve -m MODEL ARGS...`.
    pub fn start_model(model: &std::path::Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_smelt"))
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("smelt serve starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            addr: "127.0.0.1:0".parse().unwrap(),
            log: rx,
        };
        let mut seen = Vec::new();
        loop {
            match server.log.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => {
                    if let Some(rest) = line.split("on http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap();
                        server.addr = addr.parse().expect("an address");
                        return server;
                    }
                    seen.push(line);
                }
                Err(_) => panic!("smelt serve did not start:\n{}", seen.join("\n")),
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    pub fn signal(&mut self, signal: libc::c_int) {
        // SAFETY: the pid is our child's, still unreaped (we hold `child`),
        // so it names no other process.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
    }

    /// Waits up to 10 s for the server to exit.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("smelt serve did not exit within 10 s");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (lower-cased names), body.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection, read to the end (`Connection:
/// close`); chunked bodies are joined.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = connect(addr, method, path, headers, body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reading the response");
    parse(&raw)
}

/// Sends a request and returns the open connection, for streams.
pub fn connect(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // A body the server refuses early may not be read whole.
    let _ = s.write_all(body);
    s
}

pub fn parse(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Response {
    http(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim_start().to_string())
        .collect()
}
