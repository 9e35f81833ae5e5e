//! `POST /v1/embeddings` in OpenAI's shape: `input` is a string, an array
//! of strings, an array of token ids or an array of such arrays; each
//! input is read as its own sequence and answered with its pooled,
//! L2-normalized vector (the server's `--pooling`), as floats or as
//! base64 of their little-endian bytes (`encoding_format`).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use smelt::model::Pooling;
use smelt::server::{EmbedError, EmbedRequest, SubmitError};

use super::AppState;
use super::error::ApiError;
use super::routes::{check_model, parse, served_by};

#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    input: Value,
    model: Option<String>,
    encoding_format: Option<String>,
    /// Only the model's own size is possible: its vectors are not trained
    /// to be cut short.
    dimensions: Option<u64>,
}

pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse(&state, body).await?;
    check_model(&state, req.model.as_deref())?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("unknown encoding_format {other:?}: float or base64"),
            ));
        }
    };
    let n_embd = state.scheduler.n_embd();
    if let Some(d) = req.dimensions
        && d != n_embd as u64
    {
        return Err(ApiError::bad_param(
            "dimensions",
            format!("this model's embeddings have {n_embd} dimensions, not {d}"),
        ));
    }
    if state.pooling == Pooling::None {
        return Err(ApiError::bad_request(
            "this server pools embeddings as none (a vector per token), which OpenAI's \
             embeddings cannot carry: start it with --pooling mean or --pooling last",
        ));
    }
    let inputs = inputs(&state, &req.input)?;
    let prompt_tokens: usize = inputs.iter().map(Vec::len).sum();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |result| {
        let _ = tx.send(result);
    });
    let request = EmbedRequest {
        inputs,
        pooling: state.pooling,
    };
    let replica = state
        .scheduler
        .submit_embed(request, reply)
        .map_err(|e| match e {
            SubmitError::EmptyPrompt | SubmitError::EmptyInput(_) => {
                ApiError::bad_param("input", e.to_string())
            }
            other => other.into(),
        })?;
    let vectors = match rx.await {
        Ok(Ok(vectors)) => vectors,
        Ok(Err(EmbedError::ShuttingDown)) => return Err(SubmitError::ShuttingDown.into()),
        Ok(Err(e)) => return Err(ApiError::internal(e.to_string())),
        Err(_) => return Err(ApiError::internal("the scheduler dropped the request")),
    };
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match base64 {
                true => Value::String(encode_base64(v)),
                false => json!(v),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = Json(json!({
        "object": "list",
        "data": data,
        "model": state.model_id,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }));
    Ok(served_by(&state, replica, body.into_response()))
}

/// Each input's token ids: texts tokenized as prompts are (BOS as the
/// model wants, special tokens parsed), ids checked against the
/// vocabulary.
fn inputs(state: &AppState, input: &Value) -> Result<Vec<Vec<u32>>, ApiError> {
    const SHAPE: &str = "input must be a string, an array of strings, an array of token ids \
                         or an array of arrays of token ids";
    let bad = |message: String| ApiError::bad_param("input", message);
    let ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|v| match v.as_u64() {
                Some(id) if id < state.scheduler.n_vocab() as u64 => Ok(id as u32),
                _ => Err(bad(format!(
                    "{v} is not a token id of this model's vocabulary (0..{})",
                    state.scheduler.n_vocab()
                ))),
            })
            .collect()
    };
    let items = match input {
        Value::String(text) => return Ok(vec![(state.encode)(text)]),
        Value::Array(items) => items,
        _ => return Err(bad(SHAPE.into())),
    };
    if items.is_empty() {
        return Err(bad("input must not be empty".into()));
    }
    if items.iter().all(Value::is_number) {
        return Ok(vec![ids(items)?]);
    }
    items
        .iter()
        .map(|item| match item {
            Value::String(text) => Ok((state.encode)(text)),
            Value::Array(inner) if inner.iter().all(Value::is_number) => ids(inner),
            _ => Err(bad(SHAPE.into())),
        })
        .collect()
}

/// Standard base64 of the vector's little-endian f32 bytes, as OpenAI's
/// clients decode it.
fn encode_base64(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
