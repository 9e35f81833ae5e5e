//! Errors in OpenAI's JSON shape: `{"error": {"message", "type", "code"}}`,
//! with the HTTP status a client expects.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use smelt::server::SubmitError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`,
    /// `server_error`.
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
}

impl ApiError {
    /// 400: a request the server cannot take as it is.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
            param: None,
        }
    }

    /// 400 naming the parameter at fault.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            code: Some("invalid_value"),
            ..Self::bad_request(message)
        }
    }

    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key: send `Authorization: Bearer KEY`".into(),
            kind: "authentication_error",
            code: Some("invalid_api_key"),
            param: None,
        }
    }

    pub fn not_found(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("no route {path}"),
            kind: "invalid_request_error",
            code: Some("not_found"),
            param: None,
        }
    }

    /// 404 for a `model` other than the one loaded, as OpenAI answers.
    pub fn model_not_found(asked: &str, loaded: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("the model `{asked}` does not exist; this server runs `{loaded}`"),
            kind: "invalid_request_error",
            code: Some("model_not_found"),
            param: Some("model".into()),
        }
    }

    /// 408: the body did not arrive within the body timeout.
    pub fn timeout(limit: std::time::Duration) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {:.1} s",
                limit.as_secs_f64()
            ),
            kind: "invalid_request_error",
            code: Some("request_timeout"),
            param: None,
        }
    }

    pub fn method_not_allowed() -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "method not allowed on this route".into(),
            kind: "invalid_request_error",
            code: Some("method_not_allowed"),
            param: None,
        }
    }

    pub fn too_large(limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body exceeds {limit} bytes"),
            kind: "invalid_request_error",
            code: Some("request_too_large"),
            param: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            code: None,
            param: None,
        }
    }

    /// The body of an error, also sent as an SSE event when a stream fails.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.code,
                "param": self.param,
            }
        })
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let message = e.to_string();
        match e {
            SubmitError::QueueFull(_) => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message,
                kind: "server_error",
                code: Some("server_busy"),
                param: None,
            },
            SubmitError::ShuttingDown => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message,
                kind: "server_error",
                code: Some("shutting_down"),
                param: None,
            },
            SubmitError::PromptTooLong { .. } => Self {
                code: Some("context_length_exceeded"),
                ..Self::bad_request(message)
            },
            SubmitError::InputTooLong { .. } => Self {
                code: Some("context_length_exceeded"),
                param: Some("input".into()),
                ..Self::bad_request(message)
            },
            SubmitError::EmptyPrompt => Self::bad_param("prompt", message),
            SubmitError::EmptyInput(_) => Self::bad_param("input", message),
            SubmitError::NoEmbeddings => Self::bad_request(message),
            SubmitError::ZeroMaxTokens => Self::bad_param("max_tokens", message),
            SubmitError::BadSampler(_) => Self::bad_request(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}
