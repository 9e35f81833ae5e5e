//! OpenAI request bodies and their checks. Unknown fields are ignored, as
//! OpenAI-compatible servers do; known ones are checked against OpenAI's
//! ranges and give a 400 naming the parameter.

use serde::Deserialize;
use serde_json::Value;
use smelt::grammar::GrammarSpec;
use smelt::sample::SamplerParams;

use super::error::ApiError;

/// The sampling fields shared by both endpoints.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// The model asked for; the loaded one's name, or absent.
    pub model: Option<String>,
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
    /// Chat: `true` for the sampled tokens' log-probabilities;
    /// completions: how many alternatives to give with each (0..=5).
    pub logprobs: Option<Value>,
    /// Chat: how many alternatives to give with each token (0..=20).
    pub top_logprobs: Option<i64>,
    /// Token id (as a string) → bias added to its logit, -100..=100.
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    /// `{"type": "text" | "json_object" | "json_schema", "json_schema":
    /// {"schema": ...}}`: the output's form, enforced while sampling.
    pub response_format: Option<Value>,
    /// A GBNF grammar the output must match (llama-server's field).
    pub grammar: Option<String>,
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
    /// `[{"type": "function", "function": {"name", "description",
    /// "parameters"}}]`: what the model may call.
    pub tools: Option<Value>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function",
    /// "function": {"name": ...}}`.
    pub tool_choice: Option<Value>,
    #[serde(flatten)]
    pub params: Params,
}

/// The tools a chat offers, checked, and whether one must be called.
#[derive(Debug, Default)]
pub struct ToolUse {
    /// The tools the template is given (none for `tool_choice: "none"`).
    pub tools: Vec<Value>,
    /// `"required"` or a named function: the output must be a call of one
    /// of `tools`.
    pub required: bool,
}

impl ChatRequest {
    /// Checks `tools` and `tool_choice`.
    pub fn tool_use(&self) -> Result<ToolUse, ApiError> {
        let tools = match &self.tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(tools)) => tools.clone(),
            Some(_) => return Err(ApiError::bad_param("tools", "tools must be a list")),
        };
        for (i, t) in tools.iter().enumerate() {
            let name = t.pointer("/function/name").and_then(Value::as_str);
            let typed = t.get("type").and_then(Value::as_str) == Some("function");
            let params_ok = t
                .pointer("/function/parameters")
                .is_none_or(Value::is_object);
            if !typed || name.is_none_or(str::is_empty) || !params_ok {
                return Err(ApiError::bad_param(
                    &format!("tools[{i}]"),
                    format!(
                        "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": {{...}}}}}}"
                    ),
                ));
            }
        }
        let bad = |msg: String| ApiError::bad_param("tool_choice", msg);
        match &self.tool_choice {
            None | Some(Value::Null) => Ok(ToolUse {
                tools,
                required: false,
            }),
            Some(Value::String(c)) if c == "none" => Ok(ToolUse::default()),
            Some(Value::String(c)) if c == "auto" || c == "required" => {
                if c == "required" && tools.is_empty() {
                    return Err(bad("tool_choice \"required\" needs tools".into()));
                }
                Ok(ToolUse {
                    tools,
                    required: c == "required",
                })
            }
            Some(choice @ Value::Object(_)) => {
                let name = choice
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("tool_choice {choice} names no function")))?;
                let named: Vec<Value> = tools
                    .iter()
                    .filter(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name))
                    .cloned()
                    .collect();
                if named.is_empty() {
                    return Err(bad(format!(
                        "tool_choice names {name:?}, which is not in tools"
                    )));
                }
                Ok(ToolUse {
                    tools: named,
                    required: true,
                })
            }
            Some(other) => Err(bad(format!(
                "tool_choice must be \"none\", \"auto\", \"required\" or a function, got {other}"
            ))),
        }
    }
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
    /// `Some(n)`: log-probabilities with `n` alternatives per token.
    pub logprobs: Option<usize>,
    /// What the output must match, if anything.
    pub grammar: Option<GrammarSpec>,
}

/// Which endpoint a request came to: they spell `logprobs` differently.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// OpenAI's limits on the alternatives per token.
const MAX_TOP_LOGPROBS_CHAT: i64 = 20;
const MAX_LOGPROBS_COMPLETION: i64 = 5;

/// Most stop strings a request may give, as OpenAI allows.
const MAX_STOPS: usize = 4;

impl Params {
    /// Checks every field; `n_vocab` bounds `logit_bias`'s token ids.
    pub fn check(&self, endpoint: Endpoint, n_vocab: usize) -> Result<Checked, ApiError> {
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
            logit_bias: self.logit_bias(n_vocab)?,
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
            logprobs: self.logprobs(endpoint)?,
            grammar: self.grammar()?,
        })
    }

    /// `response_format` or `grammar`, not both.
    fn grammar(&self) -> Result<Option<GrammarSpec>, ApiError> {
        let bad = |msg: String| ApiError::bad_param("response_format", msg);
        let format = match &self.response_format {
            None | Some(Value::Null) => None,
            Some(f) => match f.get("type").and_then(Value::as_str) {
                Some("text") => None,
                Some("json_object") => Some(GrammarSpec::JsonObject),
                Some("json_schema") => {
                    let schema = f
                        .get("json_schema")
                        .and_then(|j| j.get("schema"))
                        .filter(|s| s.is_object() || s.is_boolean())
                        .ok_or_else(|| {
                            bad("response_format json_schema needs {\"json_schema\": {\"schema\": {...}}}".into())
                        })?;
                    Some(GrammarSpec::JsonSchema(schema.clone()))
                }
                _ => {
                    return Err(bad(format!(
                        "response_format type must be text, json_object or json_schema, got {}",
                        f.get("type").unwrap_or(&Value::Null)
                    )));
                }
            },
        };
        match (format, &self.grammar) {
            (Some(_), Some(_)) => Err(ApiError::bad_param(
                "grammar",
                "give response_format or grammar, not both",
            )),
            (Some(f), None) => Ok(Some(f)),
            (None, Some(g)) => Ok(Some(GrammarSpec::Gbnf(g.clone()))),
            (None, None) => Ok(None),
        }
    }

    fn logprobs(&self, endpoint: Endpoint) -> Result<Option<usize>, ApiError> {
        let count = |name: &str, v: i64, max: i64| {
            if (0..=max).contains(&v) {
                Ok(v as usize)
            } else {
                Err(ApiError::bad_param(
                    name,
                    format!("{name} must be between 0 and {max}, got {v}"),
                ))
            }
        };
        match endpoint {
            Endpoint::Chat => {
                let on = match &self.logprobs {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(ApiError::bad_param(
                            "logprobs",
                            format!("logprobs must be true or false, got {other}"),
                        ));
                    }
                };
                let top = self
                    .top_logprobs
                    .map(|n| count("top_logprobs", n, MAX_TOP_LOGPROBS_CHAT))
                    .transpose()?;
                if top.is_some() && !on {
                    return Err(ApiError::bad_param(
                        "top_logprobs",
                        "top_logprobs needs logprobs: true",
                    ));
                }
                Ok(on.then_some(top.unwrap_or(0)))
            }
            Endpoint::Completion => match &self.logprobs {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) if n.is_i64() => count(
                    "logprobs",
                    n.as_i64().unwrap_or(-1),
                    MAX_LOGPROBS_COMPLETION,
                )
                .map(Some),
                Some(other) => Err(ApiError::bad_param(
                    "logprobs",
                    format!(
                        "logprobs must be an integer from 0 to {MAX_LOGPROBS_COMPLETION}, got {other}"
                    ),
                )),
            },
        }
    }

    /// `{"token id": bias}` as (id, bias) pairs, each checked.
    fn logit_bias(&self, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
        let Some(map) = &self.logit_bias else {
            return Ok(Vec::new());
        };
        let bad = |msg: String| ApiError::bad_param("logit_bias", msg);
        map.iter()
            .map(|(k, v)| {
                let id: u32 = k
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&id| (id as usize) < n_vocab)
                    .ok_or_else(|| {
                        bad(format!(
                            "logit_bias key {k:?} is not a token id below {n_vocab}"
                        ))
                    })?;
                let bias = v
                    .as_f64()
                    .filter(|b| (-100.0..=100.0).contains(b))
                    .ok_or_else(|| {
                        bad(format!(
                            "logit_bias of token {id} must be a number from -100 to 100, got {v}"
                        ))
                    })?;
                Ok((id, bias as f32))
            })
            .collect()
    }
}

/// The roles of OpenAI's chat API.
const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

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
        let role = match obj.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
            Some(Value::String(r)) => {
                return Err(ApiError::bad_param(
                    &param,
                    format!("{param}.role {r:?} is not one of {}", ROLES.join(", ")),
                ));
            }
            _ => {
                return Err(ApiError::bad_param(
                    &param,
                    format!("{param}.role must be one of {}", ROLES.join(", ")),
                ));
            }
        };
        // An assistant's turn may be only tool calls; every other message
        // says something.
        let has_tool_calls =
            matches!(obj.get("tool_calls"), Some(Value::Array(c)) if !c.is_empty());
        let mut obj = obj.clone();
        let content = match obj.get("content") {
            None | Some(Value::Null) if role == "assistant" && has_tool_calls => String::new(),
            None | Some(Value::Null) => {
                return Err(ApiError::bad_param(
                    &param,
                    format!("{param} has no content"),
                ));
            }
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
