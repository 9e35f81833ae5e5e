//! `smelt serve`: an OpenAI-compatible HTTP API over the scheduler, with
//! axum on a small tokio runtime. Generation runs on the scheduler's own
//! thread; the async side only parses, queues and streams.

mod api;
mod error;
mod routes;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use smelt::chat::ChatTemplate;
use smelt::server::Scheduler;

use error::ApiError;

/// Turns prompt text into token ids, special tokens parsed and BOS added
/// as the model wants.
pub type Encode = Box<dyn Fn(&str) -> Vec<u32> + Send + Sync>;

/// What every handler shares.
pub struct AppState {
    pub scheduler: Scheduler,
    pub template: ChatTemplate,
    pub encode: Encode,
    /// The name `/v1/models` lists: the model file's stem.
    pub model_id: String,
    pub created: u64,
    pub api_key: Option<String>,
    pub body_limit: usize,
    ids: AtomicU64,
}

impl AppState {
    pub fn new(
        scheduler: Scheduler,
        template: ChatTemplate,
        encode: Encode,
        model_id: String,
        api_key: Option<String>,
        body_limit: usize,
    ) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            scheduler,
            template,
            encode,
            model_id,
            created,
            api_key,
            body_limit,
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

/// The routes. `/health` stays open; the `/v1` routes need the API key
/// when one is set.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/completions", post(routes::completions))
        .route("/v1/models", get(routes::models))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(routes::health))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(state.body_limit))
        .with_state(state)
}

async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| same_secret(g.as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Compares without stopping at the first difference, so response times
/// do not reveal how much of a guessed key was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves until SIGINT or SIGTERM, then stops taking connections, cancels
/// running generations (their streams end with an error event) and waits
/// for open responses to finish.
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
        eprintln!(
            "smelt serve: {} on http://{local} ({} slots × {} context)",
            state.model_id,
            state.scheduler.n_slots(),
            state.scheduler.n_ctx()
        );
        let app = router(Arc::clone(&state));
        let listener = Closing {
            listener,
            _then: CancelOnDrop(Arc::clone(&state)),
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown_signal().await;
                eprintln!("smelt serve: shutting down");
            })
            .await
            .context("serving")
    })?;
    eprintln!("smelt serve: stopped");
    Ok(())
}

/// The server's listener, which cancels the running generations when axum
/// drops it (on the shutdown signal, as it stops taking connections): a
/// stream cut short by the shutdown ends only after new connections are
/// refused. Cancelling in the signal's future raced the listener's close.
/// Fields drop in order: the socket is closed first.
struct Closing {
    listener: tokio::net::TcpListener,
    _then: CancelOnDrop,
}

/// Cancels the running generations when dropped.
struct CancelOnDrop(Arc<AppState>);

impl axum::serve::Listener for Closing {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        axum::serve::Listener::accept(&mut self.listener)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.scheduler.shutdown();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
