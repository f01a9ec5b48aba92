//! vLLM-shaped error responses.
//!
//! vLLM 0.32 answers every failed OpenAI request with
//! `{"error": {"message": str, "type": str, "param": str|null, "code": int}}`
//! (`vllm/entrypoints/openai/engine/protocol.py`, `ErrorResponse`/`ErrorInfo`). Two families of
//! `type` exist and the twin keeps both:
//!
//! * semantic checks made by the serving layer (`VLLMValidationError`, unknown model) use the
//!   exception class name: `"BadRequestError"` (400), `"NotFoundError"` (404),
//!   `"InternalServerError"` (500); their message ends with `(parameter=…, value=…)` when a
//!   parameter is named (fixtures `error_max_tokens.txt`, `error_prompt_too_long.txt`,
//!   `error_unknown_model.txt`);
//! * request-body validation done by FastAPI/pydantic (malformed JSON, wrong types, missing
//!   fields) uses the HTTP reason phrase, `"Bad Request"`, with `param: null` and a message that
//!   lists pydantic's error dicts (`validation_exception_handler` in `api_server.py`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// One error answer of the OpenAI-compatible API, serialised exactly as vLLM does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status of the answer (400, 404, 500, 503, …).
    pub status: StatusCode,
    /// `error.message`: human-readable, vLLM's wording where vLLM has one.
    pub message: String,
    /// `error.type`: `"BadRequestError"`, `"Bad Request"`, `"NotFoundError"`, … (see module doc).
    pub kind: &'static str,
    /// `error.param`: the request field at fault, or `None` (serialised as `null`).
    pub param: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Info<'a>,
}

#[derive(Serialize)]
struct Info<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: u16,
}

impl ApiError {
    /// A 400 `BadRequestError` raised by a vLLM serving-layer check on `param`; the message gets
    /// vLLM's `" (parameter=…, value=…)"` suffix (`VLLMValidationError.__str__`).
    pub fn bad_request_param(
        message: impl Into<String>,
        param: &str,
        value: impl std::fmt::Display,
    ) -> Self {
        let message = format!("{} (parameter={param}, value={value})", message.into());
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
            kind: "BadRequestError",
            param: Some(param.to_string()),
        }
    }

    /// A 400 `BadRequestError` with no parameter named (`param: null`).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "BadRequestError",
            param: None,
        }
    }

    /// A 400 `"Bad Request"` from body validation (FastAPI's `RequestValidationError`): `errors`
    /// is rendered like `str(exc.errors())`, a Python list of pydantic error dicts.
    pub fn validation(errors: &[ValidationIssue]) -> Self {
        let mut message = String::from("[");
        for (i, e) in errors.iter().enumerate() {
            if i > 0 {
                message.push_str(", ");
            }
            message.push_str(&e.render());
        }
        message.push(']');
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
            kind: "Bad Request",
            param: None,
        }
    }

    /// The 404 for a model name that is not served, worded as vLLM 0.32
    /// (`"The model `nope` does not exist. Valid aliases: tiny."`, `param: "model"`).
    pub fn unknown_model(requested: &str, served: &[String]) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{requested}` does not exist. Valid aliases: {}.",
                served.join(", ")
            ),
            kind: "NotFoundError",
            param: Some("model".to_string()),
        }
    }

    /// An injected or internal server error: 500 `InternalServerError` or 503
    /// `ServiceUnavailableError`, `param: null`.
    pub fn server_error(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = if status == StatusCode::SERVICE_UNAVAILABLE {
            "ServiceUnavailableError"
        } else {
            "InternalServerError"
        };
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
        }
    }

    /// Errors raised by routing itself (unknown path, wrong method): vLLM's `HTTPException`
    /// handler uses the reason phrase for both `message` and `type`.
    pub fn http(status: StatusCode) -> Self {
        let phrase = status.canonical_reason().unwrap_or("Error");
        ApiError {
            status,
            message: phrase.to_string(),
            kind: phrase,
            param: None,
        }
    }

    /// The JSON body, e.g. `{"error":{"message":"…","type":"BadRequestError","param":"max_tokens","code":400}}`.
    pub fn to_json(&self) -> String {
        let body = Body {
            error: Info {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        // Serialising plain strings and integers cannot fail.
        serde_json::to_string(&body).unwrap_or_default()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.to_json(),
        )
            .into_response()
    }
}

/// One pydantic-style validation error: `{'type': …, 'loc': ('body', …), 'msg': …, 'input': …}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationIssue {
    /// pydantic error type, e.g. `"int_type"`, `"missing"`, `"json_invalid"`.
    pub kind: &'static str,
    /// Location below `body`, e.g. `["max_tokens"]` or `["messages", "0", "role"]`.
    pub loc: Vec<String>,
    /// pydantic's message, e.g. `"Input should be a valid integer"`.
    pub msg: String,
    /// The offending input, already rendered (JSON text, cut to 100 characters).
    pub input: String,
}

impl ValidationIssue {
    fn render(&self) -> String {
        let mut loc = String::from("('body'");
        for part in &self.loc {
            loc.push_str(", ");
            if part.parse::<u64>().is_ok() {
                loc.push_str(part);
            } else {
                loc.push('\'');
                loc.push_str(part);
                loc.push('\'');
            }
        }
        loc.push(')');
        format!(
            "{{'type': '{}', 'loc': {loc}, 'msg': '{}', 'input': {}}}",
            self.kind, self.msg, self.input
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_error_matches_fixture_bytes() {
        // Body of shared/fixtures/openai/error_max_tokens.txt.
        let want = r#"{"error":{"message":"max_tokens=4096 cannot be greater than max_model_len=2048. Please request fewer output tokens. (parameter=max_tokens, value=4096)","type":"BadRequestError","param":"max_tokens","code":400}}"#;
        let e = ApiError::bad_request_param(
            "max_tokens=4096 cannot be greater than max_model_len=2048. Please request fewer output tokens.",
            "max_tokens",
            4096,
        );
        assert_eq!(e.to_json(), want);
    }

    #[test]
    fn unknown_model_matches_fixture_bytes() {
        let want = r#"{"error":{"message":"The model `nope` does not exist. Valid aliases: tiny.","type":"NotFoundError","param":"model","code":404}}"#;
        assert_eq!(
            ApiError::unknown_model("nope", &["tiny".to_string()]).to_json(),
            want
        );
    }

    #[test]
    fn validation_message_is_a_python_list() {
        let e = ApiError::validation(&[ValidationIssue {
            kind: "int_type",
            loc: vec!["max_tokens".into()],
            msg: "Input should be a valid integer".into(),
            input: "'abc'".into(),
        }]);
        assert_eq!(
            e.message,
            "[{'type': 'int_type', 'loc': ('body', 'max_tokens'), 'msg': 'Input should be a valid integer', 'input': 'abc'}]"
        );
        assert_eq!(e.kind, "Bad Request");
        assert!(e.to_json().contains(r#""param":null,"code":400"#));
    }
}
