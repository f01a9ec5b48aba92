//! Errors the gateway answers itself, in the OpenAI error shape vLLM uses:
//! `{"error": {"message": …, "type": …, "param": null, "code": <status>}}` (see the fixture
//! `error_max_tokens.txt`: `"type":"BadRequestError"`, `"code":400`), and the same object as an
//! SSE event when a stream has to end early.

use http::StatusCode;
use serde::Serialize;

#[derive(Serialize)]
struct Envelope<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: u16,
}

/// The error `type` for a status, named like vLLM's (and Starlette's) exception classes.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        404 => "NotFoundError",
        408 => "RequestTimeoutError",
        413 => "PayloadTooLargeError",
        429 => "RateLimitError",
        502 => "BadGatewayError",
        503 => "ServiceUnavailableError",
        504 => "GatewayTimeoutError",
        _ => "InternalServerError",
    }
}

/// The JSON error body for `status` with `message`.
pub fn error_json(status: StatusCode, message: &str) -> String {
    let e = Envelope {
        error: Inner {
            message,
            kind: error_type(status),
            param: None,
            code: status.as_u16(),
        },
    };
    // Serialising strings and numbers cannot fail.
    serde_json::to_string(&e).unwrap_or_default()
}

/// An SSE error event followed by `data: [DONE]`, ending a stream that cannot finish; a client
/// reading OpenAI streams (the `openai` SDK, Headroom's load client) reports it as an error.
pub fn error_event(status: StatusCode, message: &str) -> String {
    format!("data: {}\n\ndata: [DONE]\n\n", error_json(status, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let v: serde_json::Value =
            serde_json::from_str(&error_json(StatusCode::BAD_REQUEST, "bad \"x\"")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "bad \"x\"", "type": "BadRequestError",
                "param": null, "code": 400}})
        );
        let ev = error_event(StatusCode::BAD_GATEWAY, "broke");
        assert!(
            ev.starts_with("data: {\"error\":{\"message\":\"broke\",\"type\":\"BadGatewayError\"")
        );
        assert!(ev.ends_with("\n\ndata: [DONE]\n\n"));
    }
}
