//! `smelt serve`: an OpenAI-compatible HTTP API over the scheduler, with
//! axum on a small tokio runtime. Generation runs on the scheduler's own
//! thread; the async side only parses, queues and streams.

mod api;
mod conn;
mod embeddings;
mod error;
mod response;
mod routes;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use smelt::chat::ChatTemplate;
use smelt::grammar::Grammars;
use smelt::model::Pooling;
use smelt::server::Replicas;

pub use conn::Timeouts;
use error::ApiError;
pub use response::TokenBytes;

/// Turns prompt text into token ids, special tokens parsed and BOS added
/// as the model wants.
pub type Encode = Box<dyn Fn(&str) -> Vec<u32> + Send + Sync>;

/// The model a server runs, and how text becomes its tokens and back.
pub struct Served {
    /// One scheduler per copy of the model (`--replicas`).
    pub scheduler: Replicas,
    /// Where each replica runs (`GPU 1 (NAME)`), for `/health`.
    pub devices: Vec<String>,
    pub template: ChatTemplate,
    pub encode: Encode,
    pub token_bytes: TokenBytes,
    /// Compiles `response_format` and `grammar` for this vocabulary.
    pub grammars: Option<Arc<Grammars>>,
    /// The name `/v1/models` lists: the model file's stem.
    pub model_id: String,
    /// How `/v1/embeddings` pools a sequence's hidden states.
    pub pooling: Pooling,
}

/// What a client may send, and how long it may take.
pub struct Limits {
    /// `Authorization: Bearer KEY` on the `/v1` routes, when set.
    pub api_key: Option<String>,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    pub timeouts: Timeouts,
}

/// What every handler shares.
pub struct AppState {
    pub scheduler: Replicas,
    pub devices: Vec<String>,
    pub template: ChatTemplate,
    pub encode: Encode,
    pub token_bytes: TokenBytes,
    pub grammars: Option<Arc<Grammars>>,
    pub model_id: String,
    pub pooling: Pooling,
    pub created: u64,
    pub api_key: Option<String>,
    pub body_limit: usize,
    pub timeouts: Timeouts,
    ids: AtomicU64,
}

impl AppState {
    pub fn new(served: Served, limits: Limits) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            scheduler: served.scheduler,
            devices: served.devices,
            template: served.template,
            encode: served.encode,
            token_bytes: served.token_bytes,
            grammars: served.grammars,
            model_id: served.model_id,
            pooling: served.pooling,
            created,
            api_key: limits.api_key,
            body_limit: limits.body_limit,
            timeouts: limits.timeouts,
            ids: AtomicU64::new(0),
        }
    }

    /// A response id unique within this server's life.
    fn next_id(&self) -> String {
        format!(
            "{:x}{:06x}",
            self.created,
            self.ids.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// Which replica served a request: a response extension that the access
/// log reads, set where the server has more than one.
#[derive(Clone, Copy, Debug)]
pub struct ServedBy(pub usize);

/// The routes. `/health` stays open; the `/v1` routes need the API key
/// when one is set.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/completions", post(routes::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(routes::models))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(routes::health))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state)
}

async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if !given.is_some_and(|g| same_secret(g.as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The token of `Bearer TOKEN`; the scheme is case-insensitive (RFC 9110,
/// section 11.1).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without stopping at the first difference, so response times
/// do not reveal how much of a guessed key was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves until SIGINT or SIGTERM, then stops taking connections, cancels
/// running generations (their streams end with an error event, waiting
/// requests get 503) and waits for open responses to finish.
pub fn serve(state: AppState, addr: SocketAddr) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let state = Arc::new(state);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        // The handlers are in place before the address is announced: a
        // signal sent by whoever read that line must find them.
        let signalled = shutdown_signal();
        let n = state.scheduler.len();
        let slots = match n {
            1 => format!("{} slots", state.scheduler.n_slots()),
            n => format!("{n} replicas × {} slots", state.scheduler.n_slots() / n),
        };
        eprintln!(
            "smelt serve: {} on http://{local} ({slots} × {} context)",
            state.model_id,
            state.scheduler.n_ctx()
        );
        serve_on(listener, state, async {
            signalled.await;
            eprintln!("smelt serve: shutting down");
        })
        .await;
        anyhow::Ok(())
    })?;
    eprintln!("smelt serve: stopped");
    Ok(())
}

/// Serves on `listener` until `shutdown` resolves. The listener is closed
/// before the generations are cancelled, so that a client whose stream was
/// cut short finds new connections refused.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) {
    let app = router(Arc::clone(&state));
    let timeouts = state.timeouts;
    conn::serve(listener, app, timeouts, shutdown, || {
        state.scheduler.shutdown()
    })
    .await;
}

/// Registers the SIGINT and SIGTERM handlers now, and returns a future
/// that resolves on the first of them. Registering inside the future would
/// leave the default action (exit by signal) in place until its first poll.
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        async fn first(signal: Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        let int = signal(SignalKind::interrupt()).ok();
        let term = signal(SignalKind::terminate()).ok();
        async move {
            tokio::select! {
                _ = first(int) => {}
                _ = first(term) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
