//! Connections: the accept loop, HTTP/1.1 through hyper, the timeouts that
//! keep slow or idle clients from holding sockets, the access log, and the
//! graceful shutdown.
//!
//! A connection is always in one of three phases, and each phase but the
//! last has its own deadline for the client's bytes:
//!
//! ```text
//! Idle ──first byte──▶ Headers ──request parsed──▶ Request ──response ended──▶ Idle
//! (idle timeout)       (header timeout)            (body timeout: in the handler)
//! ```
//!
//! hyper's own header timer starts when it waits for a request, so it would
//! cut idle keep-alive connections at the header timeout; the deadlines are
//! kept here instead, in the socket's reads ([`TimedIo`]). A response that
//! streams is never cut: while a request runs the socket has no deadline.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower_service::Service;

use super::ServedBy;

/// How long a client may take, each configurable on `smelt serve`.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// From a request's first byte to the end of its headers.
    pub header: Duration,
    /// To read a request's whole body, once its headers are in.
    pub body: Duration,
    /// A keep-alive connection with no request in progress.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then stops
/// accepting, calls `on_close` (which ends running generations), closes
/// idle connections, lets the others finish their responses, and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    shutdown: impl Future<Output = ()>,
    on_close: impl FnOnce(),
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection task holds a sender; when all are gone, so are the
    // connections.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let conn = Connection {
                        app: app.clone(),
                        timeouts,
                        peer,
                        stop: stop_rx.clone(),
                        _alive: alive_tx.clone(),
                    };
                    tokio::spawn(conn.run(stream));
                }
                // Out of file descriptors and the like: the listener is
                // still good; back off rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    drop(listener);
    on_close();
    let _ = stop_tx.send(true);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

struct Connection {
    app: Router,
    timeouts: Timeouts,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::new(self.timeouts));
        let io = TokioIo::new(TimedIo::new(stream, Arc::clone(&phase)));
        let (app, peer) = (self.app.clone(), self.peer);
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            phase.request_started();
            let line = AccessLine::new(peer, &req);
            let mut app = app.clone();
            let phase = Arc::clone(&phase);
            async move {
                let response = app.call(req.map(Body::new)).await?;
                let (parts, body) = response.into_parts();
                let status = parts.status.as_u16();
                let line = AccessLine {
                    replica: parts.extensions.get::<ServedBy>().map(|r| r.0),
                    ..line
                };
                let body = Logged {
                    inner: body,
                    bytes: 0,
                    end: Some((line, status, phase)),
                };
                Ok::<_, std::convert::Infallible>(Response::from_parts(parts, Body::new(body)))
            }
        });
        let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = self.stop.wait_for(|&stop| stop) => {}
        }
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    }
}

/// The connection's phase and when it began, shared by the socket's reads
/// and the service.
struct Phase {
    state: Mutex<(PhaseKind, Instant)>,
    timeouts: Timeouts,
    /// The socket's read waiting with no deadline (a request running):
    /// woken when the phase changes, so that it arms the next phase's
    /// deadline instead of waiting on the client alone.
    reader: Mutex<Option<Waker>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PhaseKind {
    /// Between requests, or before the first.
    Idle,
    /// A request's first bytes came; its headers are not complete.
    Headers,
    /// A request is being answered.
    Request,
}

impl Phase {
    fn new(timeouts: Timeouts) -> Self {
        Self {
            state: Mutex::new((PhaseKind::Idle, Instant::now())),
            timeouts,
            reader: Mutex::new(None),
        }
    }

    fn set(&self, kind: PhaseKind) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (kind, Instant::now());
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = reader {
            w.wake();
        }
    }

    /// Wakes `w` at the next phase change.
    fn wake_on_change(&self, w: &Waker) {
        *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(w.clone());
    }

    fn bytes_read(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.0 == PhaseKind::Idle {
            *s = (PhaseKind::Headers, Instant::now());
        }
    }

    fn request_started(&self) {
        self.set(PhaseKind::Request);
    }

    fn response_ended(&self) {
        self.set(PhaseKind::Idle);
    }

    /// When the client's next bytes are due, if they are.
    fn deadline(&self) -> Option<Instant> {
        let (kind, since) = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        match kind {
            PhaseKind::Idle => Some(since + self.timeouts.idle),
            PhaseKind::Headers => Some(since + self.timeouts.header),
            PhaseKind::Request => None,
        }
    }
}

/// The socket, whose reads fail with `TimedOut` once the phase's deadline
/// passes with nothing to read; hyper then closes the connection.
struct TimedIo {
    stream: TcpStream,
    phase: Arc<Phase>,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl TimedIo {
    fn new(stream: TcpStream, phase: Arc<Phase>) -> Self {
        Self {
            stream,
            phase,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.phase.bytes_read();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(deadline) = self.phase.deadline() else {
                    self.phase.wake_on_change(cx.waker());
                    // The phase may have changed before the waker was kept.
                    if self.phase.deadline().is_some() {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                };
                let deadline = tokio::time::Instant::from_std(deadline);
                if self.sleep.deadline() != deadline {
                    self.sleep.as_mut().reset(deadline);
                }
                match self.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing in time",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// What the access log says of a request, written when its response ends.
struct AccessLine {
    peer: SocketAddr,
    method: String,
    path: String,
    start: Instant,
    /// The replica that served it, where the server has several.
    replica: Option<usize>,
}

impl AccessLine {
    fn new<B>(peer: SocketAddr, req: &Request<B>) -> Self {
        Self {
            peer,
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
            start: Instant::now(),
            replica: None,
        }
    }

    /// One line on stderr: `PEER "METHOD PATH" STATUS BYTES SECONDS`, then
    /// `replica N` where one of several served it.
    fn write(&self, status: u16, bytes: u64) {
        let replica = self
            .replica
            .map_or_else(String::new, |r| format!(" replica {r}"));
        eprintln!(
            "smelt serve: {} \"{} {}\" {status} {bytes} {:.3}s{replica}",
            self.peer,
            self.method,
            self.path.escape_debug(),
            self.start.elapsed().as_secs_f64()
        );
    }
}

/// A response body that counts its bytes and, when it ends or the client
/// leaves, writes the access log line and returns the connection to idle.
struct Logged {
    inner: Body,
    bytes: u64,
    end: Option<(AccessLine, u16, Arc<Phase>)>,
}

impl http_body::Body for Logged {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.bytes += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some((line, status, phase)) = self.end.take() {
            line.write(status, self.bytes);
            phase.response_ended();
        }
    }
}
