//! Chat templates: `tokenizer.chat_template` rendered with minijinja the way
//! Hugging Face's `apply_chat_template` renders it with jinja2, plus
//! built-in templates for models that carry none.
//!
//! The environment matches Hugging Face's: `trim_blocks`, `lstrip_blocks`,
//! loop controls, no autoescape, a `tojson` that is `json.dumps` with
//! non-ASCII kept, `raise_exception(msg)` and `strftime_now(fmt)`. Python
//! string and dict methods (`.strip()`, `.split()`, `.items()`, `.get()`…)
//! come from minijinja-contrib's pycompat, and values print the way Python
//! prints them (`None`, `True`, `{'a': 1}`).

mod builtin;
mod gemma_call;
mod pyfmt;
mod strftime;
pub mod tools;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::{Deserialize, Serialize};

use crate::gguf::{Array, Header};

pub use builtin::{BUILTINS, names as builtin_names};
pub use pyfmt::{DumpOptions, json_dumps};
pub use strftime::{Clock, strftime};

/// The GGUF key holding a model's Jinja chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The template's name inside the environment. It has no `.html` suffix,
/// so minijinja does not autoescape.
const TEMPLATE_NAME: &str = "chat_template";

/// Bounds the work one render may do, so a hostile template (from a GGUF
/// or `--template`) cannot loop forever. Real templates use a few hundred
/// instructions per message.
const FUEL: u64 = 50_000_000;

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat template {origin}: syntax error: {message}")]
    Syntax { origin: String, message: String },
    #[error("chat template {origin}: {message}")]
    Render { origin: String, message: String },
    #[error("unknown chat template {name:?}; the built-in ones are {}", .known.join(", "))]
    UnknownBuiltin {
        name: String,
        known: Vec<&'static str>,
    },
    #[error("{0}")]
    Gguf(#[from] crate::gguf::GgufError),
}

/// One chat message. Templates see every field, so tool calls and other
/// extras pass through `extra` untouched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            extra: Default::default(),
        }
    }
}

/// A compiled chat template with the special tokens it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// Where the template came from, for error messages: `gguf`, a file
    /// name, or `built-in chatml`.
    origin: String,
    bos_token: String,
    eos_token: String,
    clock: Clock,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `origin` names it in errors.
    pub fn new(source: &str, origin: impl Into<String>) -> Result<Self, ChatError> {
        let origin = origin.into();
        let env = environment(source, Clock::System).map_err(|e| ChatError::Syntax {
            origin: origin.clone(),
            message: describe(&e),
        })?;
        Ok(Self {
            env,
            source: source.to_string(),
            origin,
            bos_token: String::new(),
            eos_token: String::new(),
            clock: Clock::System,
        })
    }

    /// A built-in template by name (see [`builtin_names`]).
    pub fn builtin(name: &str) -> Result<Self, ChatError> {
        let source = builtin::source(name).ok_or_else(|| ChatError::UnknownBuiltin {
            name: name.into(),
            known: builtin::names(),
        })?;
        Self::new(source, format!("built-in {name}"))
    }

    /// The template for a model: `name` if given (a built-in), else the
    /// GGUF's `tokenizer.chat_template`, else the built-in for its
    /// architecture. BOS and EOS come from the GGUF's vocabulary.
    pub fn from_gguf(header: &Header, name: Option<&str>) -> Result<Self, ChatError> {
        let template = match (name, header.opt_str(CHAT_TEMPLATE_KEY)?) {
            (Some(name), _) => Self::builtin(name)?,
            (None, Some(source)) => Self::new(source, "from the GGUF")?,
            (None, None) => {
                let hints = builtin::ModelHints {
                    architecture: header.architecture()?,
                    tokens: vocabulary(header).map_or(&[], Vec::as_slice),
                    pre: header.opt_str("tokenizer.ggml.pre")?.unwrap_or(""),
                    name: header.opt_str("general.name")?.unwrap_or(""),
                };
                Self::builtin(builtin::for_model(&hints))?
            }
        };
        let token = |key: &str| -> Result<String, ChatError> {
            let Some(id) = header.opt_u32(key)? else {
                return Ok(String::new());
            };
            Ok(vocabulary(header)
                .and_then(|t| t.get(id as usize))
                .cloned()
                .unwrap_or_default())
        };
        let bos = token("tokenizer.ggml.bos_token_id")?;
        let eos = token("tokenizer.ggml.eos_token_id")?;
        Ok(template.with_special_tokens(bos, eos))
    }

    /// Sets the `bos_token` and `eos_token` the template sees.
    pub fn with_special_tokens(mut self, bos: impl Into<String>, eos: impl Into<String>) -> Self {
        self.set_special_tokens(bos, eos);
        self
    }

    pub fn set_special_tokens(&mut self, bos: impl Into<String>, eos: impl Into<String>) {
        self.bos_token = bos.into();
        self.eos_token = eos.into();
    }

    /// Sets the time `strftime_now` reports.
    pub fn with_clock(mut self, clock: Clock) -> Result<Self, ChatError> {
        self.env = environment(&self.source, clock).map_err(|e| ChatError::Syntax {
            origin: self.origin.clone(),
            message: describe(&e),
        })?;
        self.clock = clock;
        Ok(self)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Renders `messages` (a list of objects with at least `role` and
    /// `content`). A template that calls `raise_exception` gives
    /// [`ChatError::Render`] with its message.
    pub fn render<M: Serialize + ?Sized>(
        &self,
        messages: &M,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with_tools(messages, add_generation_prompt, None)
    }

    /// [`ChatTemplate::render`] with OpenAI's `tools` list, which the
    /// template sees as `tools` (undefined when `None`, as when Hugging
    /// Face's `apply_chat_template` is given none).
    pub fn render_with_tools<M: Serialize + ?Sized>(
        &self,
        messages: &M,
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatError> {
        let render_err = |e: Error| ChatError::Render {
            origin: self.origin.clone(),
            message: describe(&e),
        };
        let template = self.env.get_template(TEMPLATE_NAME).map_err(render_err)?;
        let mut ctx = std::collections::BTreeMap::new();
        ctx.insert("messages", Value::from_serialize(messages));
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        ctx.insert("bos_token", Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token", Value::from(self.eos_token.as_str()));
        if let Some(tools) = tools {
            ctx.insert("tools", Value::from_serialize(tools));
        }
        template.render(ctx).map_err(render_err)
    }

    /// How this template's model writes tool calls.
    pub fn tool_format(&self) -> tools::ToolFormat {
        tools::ToolFormat::detect(&self.source)
    }
}

fn vocabulary(header: &Header) -> Option<&Vec<String>> {
    match header.get_array("tokenizer.ggml.tokens").ok()? {
        Array::String(tokens) => Some(tokens),
        _ => None,
    }
}

/// An error's message with its causes, on one line.
fn describe(e: &Error) -> String {
    let mut msg = match e.kind() {
        // raise_exception's message is the whole story.
        ErrorKind::InvalidOperation if e.detail().is_some() => {
            e.detail().unwrap_or_default().to_string()
        }
        _ => e.to_string(),
    };
    if let (Some(line), Some(_)) = (e.line(), e.detail()) {
        msg.push_str(&format!(" (line {line})"));
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// The jinja2 environment Hugging Face renders chat templates in.
fn environment(source: &str, clock: Clock) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    env.add_filter("tojson", tojson);
    env.add_filter("string", |v: &Value| -> Result<Value, Error> {
        Ok(Value::from(pyfmt::py_str(&to_json(v)?)))
    });
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", move |format: String| {
        strftime::strftime(&format, clock.now())
    });
    env.add_template_owned(TEMPLATE_NAME, source.to_string())?;
    Ok(env)
}

/// `{{ value }}` the way jinja2 prints it: Python's `str()`.
fn python_formatter(
    out: &mut minijinja::Output<'_>,
    _state: &State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    use minijinja::value::ValueKind;
    let text = match value.kind() {
        ValueKind::Undefined => return Ok(()),
        ValueKind::String => {
            return out
                .write_str(value.as_str().unwrap_or_default())
                .map_err(fmt_err);
        }
        _ => pyfmt::py_str(&to_json(value)?),
    };
    out.write_str(&text).map_err(fmt_err)
}

fn fmt_err(_: std::fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "formatting failed")
}

fn to_json(v: &Value) -> Result<serde_json::Value, Error> {
    serde_json::to_value(v).map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "value cannot be serialized").with_source(e)
    })
}

/// Hugging Face's `tojson`: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let separators = match separators.as_deref() {
        None => None,
        Some([item, key]) => Some((item.clone(), key.clone())),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item, key)",
            ));
        }
    };
    let opts = DumpOptions {
        indent: kwargs.get("indent")?,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        separators,
    };
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(json_dumps(&to_json(value)?, &opts)))
}
