//! The endpoints: `POST /v1/chat/completions`, `POST /v1/completions`
//! (each streaming as server-sent events or answering once),
//! `GET /v1/models` and `GET /health`.
//!
//! A request becomes a prompt (chat: rendered through the model's chat
//! template), then a job on the scheduler whose events come back through a
//! channel. Dropping the response (the client left) drops the channel's
//! receiver, which the scheduler sees as a closed sink: it cancels the
//! generation and frees the slot.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Json, http::Uri};
use futures::Stream;
use serde_json::{Value, json};
use smelt::server::{Event, FinishReason, GenRequest, Sink, Usage};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::AppState;
use super::api::{ChatRequest, Checked, CompletionRequest, check_messages};
use super::error::ApiError;

/// The two OpenAI endpoints differ only in how chunks look.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(&state, body)?;
    let checked = req.params.check()?;
    let messages = check_messages(&req.messages)?;
    let prompt = state
        .template
        .render(&messages, true)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    generate(state, Kind::Chat, &prompt, checked).await
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(&state, body)?;
    let checked = req.params.check()?;
    let prompt = req.prompt.single()?;
    generate(state, Kind::Completion, &prompt, checked).await
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

pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (active, waiting) = state.scheduler.load();
    Json(json!({
        "status": "ok",
        "slots_idle": state.scheduler.n_slots() - active.min(state.scheduler.n_slots()),
        "slots_processing": active,
        "requests_waiting": waiting,
    }))
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

/// Parses a JSON body; every failure is a 400 (413 past the size limit)
/// in OpenAI's shape.
fn parse<T: serde::de::DeserializeOwned>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(_) => ApiError::too_large(state.body_limit),
        other => ApiError::bad_request(other.body_text()),
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Tokenizes, queues and answers: a stream of SSE chunks, or one JSON
/// object when the generation is over.
async fn generate(
    state: Arc<AppState>,
    kind: Kind,
    prompt: &str,
    checked: Checked,
) -> Result<Response, ApiError> {
    let tokens = (state.encode)(prompt);
    let (tx, rx) = unbounded_channel();
    let req = GenRequest {
        prompt: tokens,
        max_tokens: checked.max_tokens,
        sampler: checked.sampler,
        stop: checked.stop,
    };
    state.scheduler.submit(req, Box::new(ChannelSink(tx)))?;
    let meta = Meta {
        id: format!(
            "{}-{}",
            if kind == Kind::Chat {
                "chatcmpl"
            } else {
                "cmpl"
            },
            state.next_id()
        ),
        created: unix_now(),
        model: state.model_id.clone(),
        kind,
    };
    if checked.stream {
        Ok(stream(meta, rx, checked.include_usage).into_response())
    } else {
        whole(meta, rx).await
    }
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

/// What every chunk and response repeats.
struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "smelt",
            "choices": choices,
        })
    }

    /// A streamed choice carrying `text` (or, for chat, the role first).
    fn choice(&self, delta: Value, text: Option<&str>, finish: Option<&str>) -> Value {
        match self.kind {
            Kind::Chat => {
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
            }
            Kind::Completion => {
                json!([{"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}])
            }
        }
    }
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

fn finish_str(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// Waits for the whole generation. If the client leaves, this future is
/// dropped with the receiver, which cancels the job.
async fn whole(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Error(e) => return Err(ApiError::internal(e)),
            Event::Done(u) if u.finish == FinishReason::Cancelled => {
                return Err(ApiError::from(smelt::server::SubmitError::ShuttingDown));
            }
            Event::Done(u) => {
                let finish = finish_str(u.finish);
                let choices = match meta.kind {
                    Kind::Chat => json!([{
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": null,
                        "finish_reason": finish,
                    }]),
                    Kind::Completion => json!([{
                        "index": 0, "text": text, "logprobs": null, "finish_reason": finish,
                    }]),
                };
                let mut body = meta.envelope(false, choices);
                body["usage"] = usage_json(&u);
                return Ok(Json(body).into_response());
            }
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

/// The SSE stream: for chat a first chunk with the role, then a chunk per
/// piece of text, a last chunk with the finish reason, the usage chunk if
/// asked for, and `data: [DONE]`.
fn stream(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    enum Phase {
        Start,
        Body,
        Usage(Usage),
        Done,
        End,
    }
    let data = |v: Value| SseEvent::default().data(v.to_string());
    let stream = futures::stream::unfold(
        (meta, rx, Phase::Start),
        move |(meta, mut rx, phase)| async move {
            let (event, next) = match phase {
                Phase::End => return None,
                Phase::Done => (SseEvent::default().data("[DONE]"), Phase::End),
                Phase::Usage(u) => {
                    let mut body = meta.envelope(true, json!([]));
                    body["usage"] = usage_json(&u);
                    (data(body), Phase::Done)
                }
                Phase::Start if meta.kind == Kind::Chat => {
                    let choices =
                        meta.choice(json!({"role": "assistant", "content": ""}), None, None);
                    (data(meta.envelope(true, choices)), Phase::Body)
                }
                Phase::Start | Phase::Body => match rx.recv().await {
                    Some(Event::Text(t)) => {
                        let choices = meta.choice(json!({"content": t}), Some(&t), None);
                        (data(meta.envelope(true, choices)), Phase::Body)
                    }
                    Some(Event::Done(u)) if u.finish != FinishReason::Cancelled => {
                        let choices = meta.choice(json!({}), None, Some(finish_str(u.finish)));
                        let next = if include_usage {
                            Phase::Usage(u)
                        } else {
                            Phase::Done
                        };
                        (data(meta.envelope(true, choices)), next)
                    }
                    Some(Event::Done(_)) => {
                        let e = ApiError::from(smelt::server::SubmitError::ShuttingDown);
                        (data(e.body()), Phase::Done)
                    }
                    Some(Event::Error(e)) => (data(ApiError::internal(e).body()), Phase::Done),
                    None => {
                        let e = ApiError::internal("the generation ended without a result");
                        (data(e.body()), Phase::Done)
                    }
                },
            };
            Some((Ok(event), (meta, rx, next)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
