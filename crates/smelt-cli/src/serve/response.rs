//! Turning a generation's events into OpenAI's responses: one JSON object
//! when it is over, or a stream of server-sent events as it goes.
//!
//! Both endpoints share the envelope (`id`, `object`, `created`, `model`,
//! `choices`, `usage`) and differ in the choice: chat has a `message` (a
//! `delta` when streamed), completions a `text`; their `logprobs` are
//! spelled differently too ([`logprobs_json`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::{Value, json};
use smelt::chat::tools::{self, ToolCall, ToolFormat};
use smelt::sample::TokenLogprob;
use smelt::server::{Event, FinishReason, SubmitError, Usage};
use tokio::sync::mpsc::UnboundedReceiver;

use super::api::Endpoint;
use super::error::ApiError;

/// A token's bytes as it adds them to text (control tokens' text
/// included), for the `token` and `bytes` fields of log-probabilities.
pub type TokenBytes = Arc<dyn Fn(u32) -> Vec<u8> + Send + Sync>;

/// What every chunk and response repeats, and how its tokens read.
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
    pub token_bytes: TokenBytes,
    /// Chat with tools: the format their calls are read back in, and the
    /// ids the calls get.
    pub tools: Option<ToolReading>,
}

/// How a chat's tool calls are read from its output.
pub struct ToolReading {
    pub format: ToolFormat,
    pub next_id: Box<dyn FnMut() -> String + Send>,
}

impl ToolReading {
    fn parse(&mut self, text: &str) -> (String, Vec<ToolCall>) {
        tools::parse(self.format, text, &mut *self.next_id)
    }
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
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

    /// A streamed choice: `delta` for chat, `text` for completions.
    fn chunk_choice(
        &self,
        delta: Value,
        text: &str,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        match self.endpoint {
            Endpoint::Chat => {
                json!([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])
            }
            Endpoint::Completion => {
                json!([{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}])
            }
        }
    }

    /// OpenAI's `logprobs` of these tokens; `null` when none were asked
    /// for. `offset`: characters of text before the first token
    /// (completions' `text_offset`).
    fn logprobs_json(&self, tokens: &[TokenLogprob], asked: bool, offset: &mut usize) -> Value {
        if !asked {
            return Value::Null;
        }
        let text = |id: u32| String::from_utf8_lossy(&(self.token_bytes)(id)).into_owned();
        match self.endpoint {
            Endpoint::Chat => {
                let entry = |id: u32, logprob: f32| json!({"token": text(id), "logprob": logprob, "bytes": (self.token_bytes)(id)});
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|t| {
                        let mut e = entry(t.token, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                        e
                    })
                    .collect();
                json!({"content": content, "refusal": null})
            }
            Endpoint::Completion => {
                let mut offsets = Vec::with_capacity(tokens.len());
                for t in tokens {
                    offsets.push(*offset);
                    *offset += text(t.token).chars().count();
                }
                let top: Vec<Value> = tokens
                    .iter()
                    .map(|t| {
                        let map: serde_json::Map<String, Value> = t
                            .top
                            .iter()
                            .map(|&(id, lp)| (text(id), json!(lp)))
                            .collect();
                        Value::Object(map)
                    })
                    .collect();
                json!({
                    "tokens": tokens.iter().map(|t| text(t.token)).collect::<Vec<_>>(),
                    "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }
}

pub fn usage_json(u: &Usage) -> Value {
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
pub async fn whole(
    mut meta: Meta,
    mut rx: UnboundedReceiver<Event>,
    logprobs: bool,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Logprob(lp) => tokens.push(lp),
            Event::Error(e) => return Err(ApiError::internal(e)),
            Event::Done(u) if u.finish == FinishReason::Cancelled => {
                return Err(ApiError::from(SubmitError::ShuttingDown));
            }
            Event::Done(u) => {
                let mut finish = finish_str(u.finish);
                let lp = meta.logprobs_json(&tokens, logprobs, &mut 0);
                let mut message = json!({"role": "assistant", "content": text});
                if let Some(reading) = &mut meta.tools {
                    let (content, calls) = reading.parse(&text);
                    if !calls.is_empty() {
                        message["content"] = if content.is_empty() {
                            Value::Null
                        } else {
                            Value::String(content)
                        };
                        message["tool_calls"] = calls.iter().map(ToolCall::to_json).collect();
                        finish = "tool_calls";
                    }
                }
                let choices = match meta.endpoint {
                    Endpoint::Chat => json!([{
                        "index": 0,
                        "message": message,
                        "logprobs": lp,
                        "finish_reason": finish,
                    }]),
                    Endpoint::Completion => json!([{
                        "index": 0, "text": text, "logprobs": lp, "finish_reason": finish,
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

/// The state of one SSE stream.
struct Streaming {
    meta: Meta,
    rx: UnboundedReceiver<Event>,
    include_usage: bool,
    logprobs: bool,
    /// Events ready to send.
    ready: VecDeque<SseEvent>,
    /// Log-probabilities of tokens whose text has not been sent yet.
    pending: Vec<TokenLogprob>,
    /// Characters of text sent so far (completions' `text_offset`).
    offset: usize,
    /// Text held back while it may be the start of a tool call.
    held: String,
    over: bool,
}

impl Streaming {
    fn data(v: Value) -> SseEvent {
        SseEvent::default().data(v.to_string())
    }

    fn chunk(&mut self, delta: Value, text: &str, finish: Option<&str>) {
        let tokens = std::mem::take(&mut self.pending);
        let lp = self
            .meta
            .logprobs_json(&tokens, self.logprobs, &mut self.offset);
        let choices = self.meta.chunk_choice(delta, text, lp, finish);
        let event = Self::data(self.meta.envelope(true, choices));
        self.ready.push_back(event);
    }

    /// Ends the stream with an error event and `[DONE]`.
    fn fail(&mut self, e: ApiError) {
        self.ready.push_back(Self::data(e.body()));
        self.ready.push_back(SseEvent::default().data("[DONE]"));
        self.over = true;
    }

    /// Takes the next generation event into ready SSE events.
    fn take(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Logprob(lp)) => self.pending.push(lp),
            Some(Event::Text(t)) => match self.meta.tools.as_ref().map(|r| r.format) {
                None => self.chunk(json!({"content": t}), &t, None),
                Some(format) => {
                    self.held.push_str(&t);
                    let n = tools::content_prefix(format, &self.held);
                    if n > 0 {
                        let sure: String = self.held.drain(..n).collect();
                        self.chunk(json!({"content": sure}), &sure, None);
                    }
                }
            },
            Some(Event::Done(u)) if u.finish != FinishReason::Cancelled => {
                let mut finish = finish_str(u.finish);
                let held = std::mem::take(&mut self.held);
                let parsed = match &mut self.meta.tools {
                    Some(reading) if !held.is_empty() => Some(reading.parse(&held)),
                    _ => None,
                };
                let calls = match parsed {
                    Some((_, calls)) if calls.is_empty() => {
                        self.chunk(json!({"content": held}), &held, None);
                        calls
                    }
                    Some((content, calls)) => {
                        if !content.is_empty() {
                            self.chunk(json!({"content": content}), &content, None);
                        }
                        calls
                    }
                    None => Vec::new(),
                };
                if !calls.is_empty() {
                    let deltas: Vec<Value> = calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let mut d = c.to_json();
                            d["index"] = json!(i);
                            d
                        })
                        .collect();
                    self.chunk(json!({"tool_calls": deltas}), "", None);
                    finish = "tool_calls";
                }
                // Tokens whose text was held back and dropped (a stop
                // string) still carry their log-probabilities.
                if !self.pending.is_empty() {
                    self.chunk(json!({"content": ""}), "", None);
                }
                self.chunk(json!({}), "", Some(finish));
                if self.include_usage {
                    let mut body = self.meta.envelope(true, json!([]));
                    body["usage"] = usage_json(&u);
                    self.ready.push_back(Self::data(body));
                }
                self.ready.push_back(SseEvent::default().data("[DONE]"));
                self.over = true;
            }
            Some(Event::Done(_)) => self.fail(ApiError::from(SubmitError::ShuttingDown)),
            Some(Event::Error(e)) => self.fail(ApiError::internal(e)),
            None => self.fail(ApiError::internal("the generation ended without a result")),
        }
    }
}

/// The SSE stream: for chat a first chunk with the role, then a chunk per
/// piece of text, a last chunk with the finish reason, the usage chunk if
/// asked for, and `data: [DONE]`.
pub fn stream(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
    include_usage: bool,
    logprobs: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut s = Streaming {
        meta,
        rx,
        include_usage,
        logprobs: false,
        ready: VecDeque::new(),
        pending: Vec::new(),
        offset: 0,
        held: String::new(),
        over: false,
    };
    if s.meta.endpoint == Endpoint::Chat {
        s.chunk(json!({"role": "assistant", "content": ""}), "", None);
    }
    s.logprobs = logprobs;
    let stream = futures::stream::unfold(s, |mut s| async move {
        while s.ready.is_empty() && !s.over {
            let event = s.rx.recv().await;
            s.take(event);
        }
        let event = s.ready.pop_front()?;
        Some((Ok(event), s))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
