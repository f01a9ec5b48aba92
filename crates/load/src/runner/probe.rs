//! The pre-flight probe of a target: its models, its version, and one tiny request per
//! endpoint before any load.

use crate::client::{CancellationFlag, PreparedRequest, Target, server_message};
use crate::prompt::DrawnRequest;
use crate::workload::Endpoint;
use headroom_core::Outcome;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One served model from `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelInfo {
    /// Model id (the name requests use).
    pub id: String,
    /// vLLM's `max_model_len`, when listed.
    pub max_model_len: Option<u64>,
}

/// What the probe learnt about the server.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerInfo {
    /// Base URL (no credentials).
    pub base_url: String,
    /// Served models, in the server's order.
    pub models: Vec<ModelInfo>,
    /// The model the run will use (given, or the first served).
    pub model: String,
    /// `GET /version` → `version`, when the server has it (vLLM does).
    pub version: Option<String>,
    /// `GET /v1/models` as returned.
    pub models_raw: serde_json::Value,
    /// `GET /version` as returned.
    pub version_raw: Option<serde_json::Value>,
    /// Things worth a warning (for example: no `usage` in the stream).
    pub notes: Vec<String>,
}

/// Why a target is not usable; every message says what to do next.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// Nothing answered.
    #[error(
        "cannot reach {url}: {reason}. Is the server running and listening on that address? (check the port, and that the URL is the OpenAI base URL, e.g. http://127.0.0.1:8000)"
    )]
    Unreachable {
        /// URL tried.
        url: String,
        /// Connection error.
        reason: String,
    },
    /// The server refused the credentials.
    #[error(
        "{url}: HTTP {status}: {message}. Pass the API key the server expects (headroom sweep --api-key-env VAR, with the key in VAR)"
    )]
    Unauthorized {
        /// URL tried.
        url: String,
        /// Status code.
        status: u16,
        /// Server's message.
        message: String,
    },
    /// `/v1/models` did not answer as an OpenAI-compatible server does.
    #[error(
        "{url}: {message}. Is this an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp)?"
    )]
    NotOpenAi {
        /// URL tried.
        url: String,
        /// What came back.
        message: String,
    },
    /// The requested model is not served.
    #[error("model `{requested}` is not served by {url}; served: {}. Use one of these names (workload `model:` or --model)", served.join(", "))]
    UnknownModel {
        /// URL.
        url: String,
        /// Model asked for.
        requested: String,
        /// Models served.
        served: Vec<String>,
    },
    /// The server lists no model.
    #[error("{url}/v1/models lists no model; is the server still loading?")]
    NoModels {
        /// URL.
        url: String,
    },
    /// The first (tiny) request was rejected with an HTTP status.
    #[error("the first request to {endpoint} was rejected: HTTP {status}: {message}")]
    FirstRequest {
        /// Endpoint path.
        endpoint: String,
        /// Status code.
        status: u16,
        /// Server's message.
        message: String,
    },
    /// The first request failed otherwise (transport, protocol, server error, timeout).
    #[error("the first request to {endpoint} failed ({outcome}): {message}")]
    FirstRequestFailed {
        /// Endpoint path.
        endpoint: String,
        /// Outcome label.
        outcome: String,
        /// Detail.
        message: String,
    },
}

/// Attempts of a probe request that meets a server error (HTTP 5xx).
const PROBE_ATTEMPTS: u32 = 4;
/// Pause before the first retry of a probe request; doubled before each next one.
const PROBE_BACKOFF: Duration = Duration::from_millis(200);

/// Checks a target before any load: `GET /v1/models` (reachable, OpenAI-compatible, the model is
/// served — a missing model resolves to the first served), `GET /version` (optional), and one
/// tiny streaming request (`max_tokens` 2) to each endpoint in `endpoints`, which must succeed,
/// or fail with a server error (HTTP 5xx) on each of [`PROBE_ATTEMPTS`] tries: that is a note in
/// [`ServerInfo::notes`], not an error, since a server's error rate is something to measure.
///
/// # Errors
/// [`ProbeError`] with the server's own message where it sent one (4xx, transport, timeout).
pub async fn probe(target: &Target, endpoints: &[Endpoint]) -> Result<ServerInfo, ProbeError> {
    let url = target.base_url().to_string();
    let (status, body) =
        target
            .get("/v1/models", 4 << 20)
            .await
            .map_err(|reason| ProbeError::Unreachable {
                url: url.clone(),
                reason,
            })?;
    if status.as_u16() == 401 || status.as_u16() == 403 {
        return Err(ProbeError::Unauthorized {
            url: format!("{url}/v1/models"),
            status: status.as_u16(),
            message: server_message(&body),
        });
    }
    if !status.is_success() {
        return Err(ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: format!("HTTP {}: {}", status.as_u16(), server_message(&body)),
        });
    }
    let models_raw: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: format!("not JSON ({e})"),
        })?;
    let models: Vec<ModelInfo> = models_raw
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or_else(|| ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: "no `data` list in the answer".into(),
        })?
        .iter()
        .filter_map(|m| {
            Some(ModelInfo {
                id: m.get("id")?.as_str()?.to_string(),
                max_model_len: m.get("max_model_len").and_then(serde_json::Value::as_u64),
            })
        })
        .collect();
    if models.is_empty() {
        return Err(ProbeError::NoModels { url });
    }
    let model = match target.model() {
        Some(m) => {
            if !models.iter().any(|x| x.id == m) {
                return Err(ProbeError::UnknownModel {
                    url,
                    requested: m.to_string(),
                    served: models.iter().map(|x| x.id.clone()).collect(),
                });
            }
            m.to_string()
        }
        None => models[0].id.clone(),
    };
    let version_raw = match target.get("/version", 64 << 10).await {
        Ok((s, b)) if s.is_success() => serde_json::from_slice::<serde_json::Value>(&b).ok(),
        _ => None,
    };
    let version = version_raw
        .as_ref()
        .and_then(|v| v.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);

    let t = target.with_model(&model);
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    for e in endpoints {
        if seen.contains(e) {
            continue;
        }
        seen.push(*e);
        let d = DrawnRequest {
            class: 0,
            endpoint: *e,
            prefix: Arc::from(""),
            prompt: "Hello".into(),
            requested_prompt_tokens: 1,
            max_tokens: 2,
            ignore_eos: false,
        };
        let p = PreparedRequest::encode(&d, Some(&model));
        let cancel = CancellationFlag::new();
        let probe_timeout = t.config().request_timeout.min(Duration::from_secs(60));
        // A server whose error rate is what the sweep is to measure fails some first requests:
        // a 5xx is retried, and after the last attempt it is a warning, not a stop. A 4xx (wrong
        // model, bad key) is the caller's to fix and stops at once.
        let mut server_errors = 0u32;
        let r = loop {
            let r = tokio::time::timeout(probe_timeout, t.send(&p, Instant::now(), &cancel)).await;
            let Ok(r) = r else {
                return Err(ProbeError::FirstRequestFailed {
                    endpoint: e.path().into(),
                    outcome: "timeout".into(),
                    message: format!("no complete answer within {} s", probe_timeout.as_secs()),
                });
            };
            match r.outcome {
                Outcome::HttpStatus(code) if code >= 500 => {
                    server_errors += 1;
                    if server_errors >= PROBE_ATTEMPTS {
                        break r;
                    }
                    tokio::time::sleep(PROBE_BACKOFF * 2u32.pow(server_errors - 1)).await;
                }
                _ => break r,
            }
        };
        if server_errors > 0 {
            notes.push(format!(
                "{}: the first request got a server error (HTTP 5xx) {server_errors} time{} of {}{}; the sweep measures the server's errors as they come",
                e.path(),
                if server_errors == 1 { "" } else { "s" },
                server_errors + u32::from(r.outcome.is_success()),
                if r.outcome.is_success() {
                    String::new()
                } else {
                    format!(
                        " (last: {})",
                        r.message.as_deref().unwrap_or_default()
                    )
                }
            ));
        }
        match r.outcome {
            Outcome::Stop | Outcome::Length => {}
            Outcome::HttpStatus(code) if code >= 500 => continue,
            Outcome::HttpStatus(code) => {
                return Err(ProbeError::FirstRequest {
                    endpoint: e.path().into(),
                    status: code,
                    message: r.message.unwrap_or_default(),
                });
            }
            other => {
                return Err(ProbeError::FirstRequestFailed {
                    endpoint: e.path().into(),
                    outcome: other.label(),
                    message: r.message.unwrap_or_default(),
                });
            }
        }
        if r.timing.output_tokens.is_none() || r.prompt_tokens.is_none() {
            notes.push(format!(
                "{}: the stream carried no `usage` although stream_options.include_usage was sent; token counts will be missing (the server's own counters still work)",
                e.path()
            ));
        }
        if r.timing.content_chunk_ns.is_empty() {
            notes.push(format!(
                "{}: the first request produced no text chunk; TTFT cannot be measured for answers like it",
                e.path()
            ));
        }
    }
    Ok(ServerInfo {
        base_url: url,
        models,
        model,
        version,
        models_raw,
        version_raw,
        notes,
    })
}
