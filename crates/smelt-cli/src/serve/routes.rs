//! The endpoints: `POST /v1/chat/completions`, `POST /v1/completions`
//! (each streaming as server-sent events or answering once; embeddings
//! are in `embeddings.rs`),
//! `GET /v1/models` and `GET /health`.
//!
//! A request becomes a prompt (chat: rendered through the model's chat
//! template), then a job on the scheduler whose events come back through a
//! channel. Dropping the response (the client left) drops the channel's
//! receiver, which the scheduler sees as a closed sink: it cancels the
//! generation and frees the slot.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Json, http::Uri};
use serde_json::{Value, json};
use smelt::chat::tools;
use smelt::grammar::GrammarSpec;
use smelt::server::{Event, GenRequest, Sink};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::api::{ChatRequest, Checked, CompletionRequest, Endpoint, check_messages};
use super::error::ApiError;
use super::response::{self, Meta, ToolReading};
use super::{AppState, ServedBy};

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(&state, body).await?;
    check_model(&state, req.params.model.as_deref())?;
    let mut checked = req
        .params
        .check(Endpoint::Chat, state.scheduler.n_vocab())?;
    let tool_use = req.tool_use()?;
    let mut messages = check_messages(&req.messages)?;
    let format = state.template.tool_format();
    let offered = (!tool_use.tools.is_empty()).then(|| Value::Array(tool_use.tools.clone()));
    tools::prepare_messages(format, &mut messages, offered.as_ref());
    let prompt = state
        .template
        .render_with_tools(&messages, true, offered.as_ref())
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    if tool_use.required {
        if checked.grammar.is_some() {
            return Err(ApiError::bad_param(
                "tool_choice",
                "a required tool call cannot also follow response_format or grammar",
            ));
        }
        let grammar = tools::call_grammar(format, &tool_use.tools).ok_or_else(|| {
            ApiError::bad_param(
                "tool_choice",
                format!(
                    "this model's tool-call format ({format:?}) cannot be required; use \"auto\""
                ),
            )
        })?;
        checked.grammar = Some(GrammarSpec::Lark(grammar));
    }
    let reading = offered.map(|_| ToolReading {
        format,
        next_id: Box::new(call_ids(&state)),
    });
    generate(state, Endpoint::Chat, &prompt, checked, reading).await
}

/// Tool-call ids: nine alphanumeric characters, as Mistral's templates
/// demand, unique within the server's life.
fn call_ids(state: &AppState) -> impl FnMut() -> String + Send + use<> {
    let first = state.next_id();
    let mut n = 0u64;
    move || {
        n += 1;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&(first.as_str(), n), &mut h);
        format!("{:09x}", std::hash::Hasher::finish(&h) & 0xf_ffff_ffff)
    }
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(&state, body).await?;
    check_model(&state, req.params.model.as_deref())?;
    let checked = req
        .params
        .check(Endpoint::Completion, state.scheduler.n_vocab())?;
    let prompt = req.prompt.single()?;
    generate(state, Endpoint::Completion, &prompt, checked, None).await
}

pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": state.created,
            "owned_by": "smelt",
            "meta": {"n_ctx": state.scheduler.n_ctx(), "n_slots": state.scheduler.n_slots()},
        }],
    }))
}

/// The slots' state, all replicas together, then each replica's.
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (active, waiting) = state.scheduler.load();
    let slots = state.scheduler.n_slots();
    let each = slots / state.scheduler.len();
    let replicas: Vec<Value> = state
        .scheduler
        .loads()
        .iter()
        .zip(&state.devices)
        .map(|(load, device)| {
            json!({
                "device": device,
                "slots_idle": each - load.active.min(each),
                "slots_processing": load.active,
                "requests_waiting": load.waiting,
                "requests_served": load.served,
            })
        })
        .collect();
    Json(json!({
        "status": "ok",
        "slots_idle": slots - active.min(slots),
        "slots_processing": active,
        "requests_waiting": waiting,
        "replicas": replicas,
    }))
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

/// Reads and parses a JSON body within the body timeout. Every failure is
/// in OpenAI's shape: 408 past the timeout, 413 past the size limit, 400
/// for a body cut short (fewer bytes than its `Content-Length`) or bad
/// JSON.
pub(super) async fn parse<T: serde::de::DeserializeOwned>(
    state: &AppState,
    body: Body,
) -> Result<T, ApiError> {
    let read = axum::body::to_bytes(body, state.body_limit);
    let body: Bytes = match tokio::time::timeout(state.timeouts.body, read).await {
        Err(_) => return Err(ApiError::timeout(state.timeouts.body)),
        Ok(Err(e)) if is_length_limit(&e) => return Err(ApiError::too_large(state.body_limit)),
        Ok(Err(e)) => {
            return Err(ApiError::bad_request(format!(
                "the request body ended early (shorter than its Content-Length) or could not be read: {}",
                causes(&e)
            )));
        }
        Ok(Ok(body)) => body,
    };
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Whether reading a body failed on the size limit.
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// An error and its causes on one line, each said once.
fn causes(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// A request naming a model must name the one loaded: by its id (what
/// `/v1/models` lists) or its file name.
pub(super) fn check_model(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None => Ok(()),
        Some(m) if m == state.model_id || m == format!("{}.gguf", state.model_id) => Ok(()),
        Some(m) => Err(ApiError::model_not_found(m, &state.model_id)),
    }
}

/// Tokenizes, queues and answers: a stream of SSE chunks, or one JSON
/// object when the generation is over.
async fn generate(
    state: Arc<AppState>,
    endpoint: Endpoint,
    prompt: &str,
    checked: Checked,
    tools: Option<ToolReading>,
) -> Result<Response, ApiError> {
    let constraint = match (&checked.grammar, &state.grammars) {
        (None, _) => None,
        (Some(spec), Some(grammars)) => Some(grammars.compile(spec).map_err(|e| {
            let param = match spec {
                GrammarSpec::Gbnf(_) => "grammar",
                _ => "response_format",
            };
            ApiError::bad_param(param, e.to_string())
        })?),
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "this server cannot constrain its output to a grammar",
            ));
        }
    };
    let tokens = (state.encode)(prompt);
    let (tx, rx) = unbounded_channel();
    let req = GenRequest {
        prompt: tokens,
        max_tokens: checked.max_tokens,
        sampler: checked.sampler,
        stop: checked.stop,
        logprobs: checked.logprobs,
        constraint,
    };
    let replica = state.scheduler.submit(req, Box::new(ChannelSink(tx)))?;
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completion => "cmpl",
    };
    let meta = Meta {
        id: format!("{prefix}-{}", state.next_id()),
        created: unix_now(),
        model: state.model_id.clone(),
        endpoint,
        token_bytes: Arc::clone(&state.token_bytes),
        tools,
    };
    let logprobs = checked.logprobs.is_some();
    let response = if checked.stream {
        response::stream(meta, rx, checked.include_usage, logprobs).into_response()
    } else {
        response::whole(meta, rx, logprobs)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    };
    Ok(served_by(&state, replica, response))
}

/// Marks `response` with the replica that served it, for the access log.
pub(super) fn served_by(state: &AppState, replica: usize, mut response: Response) -> Response {
    if state.scheduler.len() > 1 {
        response.extensions_mut().insert(ServedBy(replica));
    }
    response
}

/// Events into a channel; the receiver's drop is the cancel signal.
struct ChannelSink(UnboundedSender<Event>);

impl Sink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
