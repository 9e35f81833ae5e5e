//! OpenAI request bodies and their checks. Unknown fields are ignored, as
//! OpenAI-compatible servers do; known ones are checked against OpenAI's
//! ranges and give a 400 naming the parameter.

use serde::Deserialize;
use serde_json::Value;
use smelt::sample::SamplerParams;

use super::error::ApiError;

/// The sampling fields shared by both endpoints.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<i64>,
    /// The newer name of `max_tokens` in the chat API.
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Value>,
    #[serde(flatten)]
    pub params: Params,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub params: Params,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
}

/// What the generation needs, checked.
#[derive(Debug)]
pub struct Checked {
    pub sampler: SamplerParams,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

/// Most stop strings a request may give, as OpenAI allows.
const MAX_STOPS: usize = 4;

impl Params {
    pub fn check(&self) -> Result<Checked, ApiError> {
        let range = |name: &str, v: Option<f32>, lo: f32, hi: f32, default: f32| match v {
            None => Ok(default),
            Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(x),
            Some(x) => Err(ApiError::bad_param(
                name,
                format!("{name} must be between {lo} and {hi}, got {x}"),
            )),
        };
        let temperature = range("temperature", self.temperature, 0.0, 2.0, 1.0)?;
        let top_p = range("top_p", self.top_p, 0.0, 1.0, 1.0)?;
        let presence_penalty = range("presence_penalty", self.presence_penalty, -2.0, 2.0, 0.0)?;
        let frequency_penalty = range("frequency_penalty", self.frequency_penalty, -2.0, 2.0, 0.0)?;
        if let Some(n) = self.n
            && n != 1
        {
            return Err(ApiError::bad_param(
                "n",
                format!("only n = 1 is supported, got {n}"),
            ));
        }
        let max_tokens = match self.max_completion_tokens.or(self.max_tokens) {
            None => None,
            Some(m) if m >= 1 => Some(usize::try_from(m).unwrap_or(usize::MAX)),
            Some(m) => {
                return Err(ApiError::bad_param(
                    "max_tokens",
                    format!("max_tokens must be at least 1, got {m}"),
                ));
            }
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS {
            return Err(ApiError::bad_param(
                "stop",
                format!("at most {MAX_STOPS} stop strings, got {}", stop.len()),
            ));
        }
        let seed = self.seed.map(|s| s as u64);
        let sampler = SamplerParams {
            temperature,
            // OpenAI's API has no top-k or min-p: all tokens stay eligible.
            top_k: 0,
            top_p,
            min_p: 0.0,
            repeat_penalty: 1.0,
            // OpenAI's penalties count every generated token.
            repeat_last_n: usize::MAX,
            frequency_penalty,
            presence_penalty,
            seed,
        };
        let include_usage = self
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        Ok(Checked {
            sampler,
            max_tokens,
            stop,
            stream: self.stream.unwrap_or(false),
            include_usage,
        })
    }
}

/// Checks chat messages and flattens OpenAI's content parts
/// (`[{"type": "text", "text": ...}]`) to strings, which every template
/// understands.
pub fn check_messages(messages: &[Value]) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let Value::Object(obj) = m else {
            return Err(ApiError::bad_param(
                &param,
                format!("{param} must be an object"),
            ));
        };
        match obj.get("role") {
            Some(Value::String(r)) if !r.is_empty() => {}
            _ => {
                return Err(ApiError::bad_param(
                    &param,
                    format!("{param}.role must be a non-empty string"),
                ));
            }
        }
        let mut obj = obj.clone();
        let content = match obj.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.get("type"), part.get("text")) {
                        (Some(t), Some(Value::String(s))) if t == "text" => text.push_str(s),
                        _ => {
                            return Err(ApiError::bad_param(
                                &param,
                                format!("{param}.content: only text parts are supported"),
                            ));
                        }
                    }
                }
                text
            }
            Some(_) => {
                return Err(ApiError::bad_param(
                    &param,
                    format!("{param}.content must be a string or a list of text parts"),
                ));
            }
        };
        obj.insert("content".into(), Value::String(content));
        out.push(Value::Object(obj));
    }
    Ok(out)
}

impl Prompt {
    /// The one prompt of the request (`n = 1`, one prompt).
    pub fn single(self) -> Result<String, ApiError> {
        match self {
            Prompt::Text(s) => Ok(s),
            Prompt::Texts(mut v) if v.len() == 1 => Ok(v.remove(0)),
            Prompt::Texts(v) => Err(ApiError::bad_param(
                "prompt",
                format!("exactly one prompt is supported, got {}", v.len()),
            )),
        }
    }
}
