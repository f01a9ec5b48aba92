//! axum routes of the OpenAI-compatible API and of the dcgm-exporter listener.
//!
//! API listener: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /health`, `GET /version`, `GET /metrics`, `GET|POST /ping`. dcgm listener:
//! `GET /metrics`. With an API key, `/v1/*` requires `Authorization: Bearer <key>` and answers
//! 401 `{"error":"Unauthorized"}` otherwise (vLLM's `AuthenticationMiddleware`).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::BytesMut;
use futures_util::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

use super::driver::{Command, Slot};
use super::error::ApiError;
use super::faults::{FaultPlan, Faults};
use super::http_metrics::HttpCounters;
use super::protocol::{self, Endpoint, ParsedRequest, ValidationContext};
use super::render::{self, FillerTable, Finish, ResponseMeta, SseWriter};
use super::seeded;
use crate::NewRequest;

/// `Content-Type` of vLLM's `/metrics` (prometheus text format 0.0.4).
pub(crate) const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Largest request body accepted, bytes.
const BODY_LIMIT: usize = 64 * 1024 * 1024;
/// Most SSE events written per HTTP frame.
const MAX_EVENTS_PER_FRAME: u32 = 1024;

/// Shared state of the API listener.
pub(crate) struct AppState {
    pub(crate) tx: mpsc::UnboundedSender<Command>,
    pub(crate) ctx: ValidationContext,
    pub(crate) table: Arc<FillerTable>,
    pub(crate) faults: Faults,
    pub(crate) seed: u64,
    pub(crate) fingerprint: String,
    /// `--enable-per-request-metrics`.
    pub(crate) per_request_metrics: bool,
    pub(crate) model_root: String,
    pub(crate) started_unix: u64,
    pub(crate) api_key: Option<String>,
    pub(crate) first_chunk_probe: Option<super::FirstChunkProbe>,
    pub(crate) http: HttpCounters,
    /// Arrival number of completion requests (natural stop, faults, ids).
    pub(crate) next_index: AtomicU64,
}

type Shared = Arc<AppState>;

/// The API router.
pub(crate) fn api_router(state: Shared) -> Router {
    let v1 = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The dcgm-exporter router (`GET /metrics`).
pub(crate) fn dcgm_router(tx: mpsc::UnboundedSender<Command>) -> Router {
    Router::new()
        .route("/metrics", get(dcgm_metrics))
        .fallback(not_found)
        .with_state(tx)
}

async fn count_requests(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let handler = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "none".to_string());
    let method = req.method().as_str().to_string();
    let resp = next.run(req).await;
    s.http.record(&handler, &method, resp.status().as_u16());
    resp
}

async fn require_api_key(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .is_some_and(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && token == key);
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"error":"Unauthorized"}"#,
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn not_found() -> Response {
    ApiError::http(StatusCode::NOT_FOUND).into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::http(StatusCode::METHOD_NOT_ALLOWED).into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn version() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"version":"0.32.0"}"#,
    )
        .into_response()
}

/// `POST /tokenize` as vLLM serves it (`vllm/entrypoints/serve/tokenize`): a `prompt` string, or
/// `messages` rendered with the presets' ChatML template (and the generation prompt unless
/// `add_generation_prompt` is false), counted by [`crate::tokenize`]; `add_special_tokens` adds
/// nothing (the Qwen2.5 presets have no BOS). Answers `count`, `max_model_len`, `tokens` and
/// `token_strs` (null), as vLLM 0.32 does.
async fn tokenize(State(s): State<Shared>, body: Bytes) -> Response {
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return ApiError::bad_request(format!("invalid JSON: {e}")).into_response(),
    };
    if let Some(m) = v.get("model").and_then(serde_json::Value::as_str)
        && !s.ctx.served_model_names.iter().any(|n| n == m)
    {
        return ApiError::unknown_model(m, &s.ctx.served_model_names).into_response();
    }
    let text = if let Some(p) = v.get("prompt").and_then(serde_json::Value::as_str) {
        p.to_string()
    } else if let Some(msgs) = v.get("messages").and_then(serde_json::Value::as_array) {
        let mut t = String::new();
        for m in msgs {
            let role = m
                .get("role")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("user");
            let content = m
                .get("content")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            t.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
        }
        if v.get("add_generation_prompt")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(true)
        {
            t.push_str("<|im_start|>assistant\n");
        }
        t
    } else {
        return ApiError::bad_request("either `prompt` or `messages` is required").into_response();
    };
    let tokens = crate::tokenize(&text);
    let body = serde_json::json!({
        "count": tokens.len(),
        "max_model_len": s.ctx.max_model_len,
        "tokens": tokens,
        "token_strs": null,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `/v1/models` in vLLM's field order (`vllm/entrypoints/openai/models/protocol.py`).
#[derive(serde::Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

#[derive(serde::Serialize)]
struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    root: &'a str,
    parent: Option<&'a str>,
    max_model_len: u32,
    permission: [ModelPermission; 1],
}

#[derive(serde::Serialize)]
struct ModelPermission {
    id: String,
    object: &'static str,
    created: u64,
    allow_create_engine: bool,
    allow_sampling: bool,
    allow_logprobs: bool,
    allow_search_indices: bool,
    allow_view: bool,
    allow_fine_tuning: bool,
    organization: &'static str,
    group: Option<String>,
    is_blocking: bool,
}

async fn models(State(s): State<Shared>) -> Response {
    let data = s
        .ctx
        .served_model_names
        .iter()
        .enumerate()
        .map(|(i, name)| ModelCard {
            id: name,
            object: "model",
            created: s.started_unix,
            owned_by: "vllm",
            root: &s.model_root,
            parent: None,
            max_model_len: s.ctx.max_model_len,
            permission: [ModelPermission {
                id: format!("modelperm-{:016x}", seeded::draw(s.seed, 0x9e12, i as u64)),
                object: "model_permission",
                created: s.started_unix,
                allow_create_engine: false,
                allow_sampling: true,
                allow_logprobs: true,
                allow_search_indices: false,
                allow_view: true,
                allow_fine_tuning: false,
                organization: "*",
                group: None,
                is_blocking: false,
            }],
        })
        .collect();
    let body = serde_json::to_string(&ModelList {
        object: "list",
        data,
    })
    .unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn render_via(
    tx: &mpsc::UnboundedSender<Command>,
    make: fn(oneshot::Sender<String>) -> Command,
) -> Option<String> {
    let (otx, orx) = oneshot::channel();
    tx.send(make(otx)).ok()?;
    orx.await.ok()
}

async fn metrics(State(s): State<Shared>) -> Response {
    let Some(mut text) = render_via(&s.tx, Command::Metrics).await else {
        return ApiError::server_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "The engine twin is shutting down.",
        )
        .into_response();
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    s.http.render_into(&mut text);
    ([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], text).into_response()
}

async fn dcgm_metrics(State(tx): State<mpsc::UnboundedSender<Command>>) -> Response {
    match render_via(&tx, Command::Dcgm).await {
        Some(text) => ([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], text).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "engine twin is shutting down\n",
        )
            .into_response(),
    }
}

async fn completions(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let probe = Probe::arm(&s, &headers);
    serve_completion(s, Endpoint::Completions, body, probe).await
}

async fn chat_completions(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let probe = Probe::arm(&s, &headers);
    serve_completion(s, Endpoint::ChatCompletions, body, probe).await
}

/// A body that could not be read (over [`BODY_LIMIT`], or broken off) in vLLM's error shape,
/// as its `HTTPException` handler writes it (`type` is Python's reason phrase), not axum's
/// plain-text rejection.
fn body_error(e: &BytesRejection) -> Response {
    let status = e.status();
    let (kind, message) = if status == StatusCode::PAYLOAD_TOO_LARGE {
        (
            "Request Entity Too Large",
            format!(
                "The request body is larger than the engine twin's limit of {} MiB.",
                BODY_LIMIT >> 20
            ),
        )
    } else {
        (
            status.canonical_reason().unwrap_or("Bad Request"),
            format!("The request body could not be read: {e}"),
        )
    };
    ApiError {
        status,
        message,
        kind,
        param: None,
    }
    .into_response()
}

/// A [`super::FirstChunkProbe`] armed for one request: called when its first chunk goes out.
struct Probe {
    probe: super::FirstChunkProbe,
    request_id: Option<String>,
    received: Instant,
}

impl Probe {
    fn arm(s: &AppState, headers: &HeaderMap) -> Option<Probe> {
        let probe = s.first_chunk_probe.clone()?;
        Some(Probe {
            probe,
            request_id: headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            received: Instant::now(),
        })
    }

    fn fire(self) {
        (self.probe.0)(self.request_id.as_deref(), self.received, Instant::now());
    }
}

/// Aborts the request in the engine when dropped before the request finished (client gone).
struct AbortGuard {
    key: u64,
    slot: Arc<Slot>,
    tx: mpsc::UnboundedSender<Command>,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.slot.progress().finish.is_none() {
            let _ = self.tx.send(Command::Abort { key: self.key });
        }
    }
}

async fn serve_completion(
    s: Shared,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
    probe: Option<Probe>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return body_error(&e),
    };
    let req = match protocol::parse_and_validate(endpoint, &body, &s.ctx) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    drop(body);
    let index = s.next_index.fetch_add(1, Ordering::Relaxed);
    let natural = protocol::natural_output_len(
        s.seed,
        protocol::natural_stop_index(&req, index),
        req.min_tokens,
        req.max_tokens,
    );
    let expected = if req.ignore_eos {
        req.max_tokens
    } else {
        natural
    };
    let plan = s.faults.plan(s.seed, index, req.stream, expected);
    if let Some(code) = plan.error_status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let field = if code == 503 {
            "error_503_rate"
        } else {
            "error_500_rate"
        };
        return ApiError::server_error(
            status,
            format!("Injected fault (headroom sim faults.{field}): the request was not served."),
        )
        .into_response();
    }
    if plan.slow_start_s > 0.0 {
        tokio::time::sleep(std::time::Duration::from_secs_f64(plan.slow_start_s)).await;
    }
    let meta = response_meta(&s, &req, index);
    let slot = Arc::new(Slot::default());
    let request = NewRequest {
        prompt_tokens: req.prompt_tokens,
        max_tokens: req.max_tokens,
        ignore_eos: req.ignore_eos,
        eos_after: if req.ignore_eos { None } else { Some(natural) },
        min_tokens: req.min_tokens,
    };
    if s.tx
        .send(Command::Add {
            key: index,
            request,
            slot: slot.clone(),
        })
        .is_err()
    {
        return ApiError::server_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "The engine twin is shutting down.",
        )
        .into_response();
    }
    let guard = AbortGuard {
        key: index,
        slot,
        tx: s.tx.clone(),
    };
    if req.stream {
        let stream = SseStream::new(
            guard,
            SseWriter::new(meta),
            s.table.clone(),
            req.include_usage,
            plan,
            &s.faults,
            probe,
        );
        let mut resp = Response::new(Body::from_stream(stream));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        resp
    } else {
        let progress = std::future::poll_fn(|cx| guard.slot.poll_progress_finished(cx)).await;
        match progress.finish {
            Some(Finish::Abort) | None => ApiError::server_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The request was aborted by the engine twin (shutting down).",
            )
            .into_response(),
            Some(f) => {
                let body = render::full_response(&meta, &s.table, progress.produced, f);
                ([(header::CONTENT_TYPE, "application/json")], body).into_response()
            }
        }
    }
}

fn response_meta(s: &AppState, req: &ParsedRequest, index: u64) -> ResponseMeta {
    let id_bits = seeded::draw(s.seed, 0x1d, index);
    let id = match req.endpoint {
        Endpoint::Completions => format!("cmpl-{id_bits:016x}"),
        Endpoint::ChatCompletions => format!("chatcmpl-{id_bits:016x}"),
    };
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let offset = (seeded::draw(s.seed, 0x7e, index) % s.table.len() as u64) as u32;
    ResponseMeta {
        endpoint: req.endpoint,
        id,
        created,
        model_escaped: render::escape_json(&req.model),
        fingerprint: s.fingerprint.clone(),
        prompt_tokens: req.prompt_tokens.len() as u32,
        text_offset: offset,
        continuous_usage: req.continuous_usage,
        per_request_metrics: s.per_request_metrics,
    }
}

impl Slot {
    fn poll_progress_finished(&self, cx: &mut Context<'_>) -> Poll<super::driver::Progress> {
        match self.poll_progress(cx, u32::MAX) {
            Poll::Ready(p) if p.finish.is_some() => Poll::Ready(p),
            _ => Poll::Pending,
        }
    }
}

/// The SSE body of one streaming request.
struct SseStream {
    guard: AbortGuard,
    writer: SseWriter,
    table: Arc<FillerTable>,
    include_usage: bool,
    sent: u32,
    role_sent: bool,
    done: bool,
    stall_after: Option<u32>,
    stall_s: f64,
    stall: Option<Pin<Box<Sleep>>>,
    cut_after: Option<u32>,
    cut_now: bool,
    /// Fired with the first frame.
    probe: Option<Probe>,
}

impl SseStream {
    fn new(
        guard: AbortGuard,
        writer: SseWriter,
        table: Arc<FillerTable>,
        include_usage: bool,
        plan: FaultPlan,
        faults: &Faults,
        probe: Option<Probe>,
    ) -> Self {
        SseStream {
            guard,
            writer,
            table,
            include_usage,
            sent: 0,
            role_sent: false,
            done: false,
            stall_after: plan.stall_after_tokens,
            stall_s: faults.stall_s,
            stall: None,
            cut_after: plan.disconnect_after_tokens,
            cut_now: false,
            probe,
        }
    }
}

impl Stream for SseStream {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(sleep) = this.stall.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.stall = None;
        }
        if this.cut_now {
            // Mid-stream disconnect fault: fail the body so the connection is cut without
            // `[DONE]`; dropping the stream cancels the request in the engine (counted nowhere).
            this.done = true;
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "injected mid-stream disconnect",
            ))));
        }
        let progress = match this.guard.slot.poll_progress(cx, this.sent) {
            Poll::Ready(p) => p,
            Poll::Pending => return Poll::Pending,
        };
        if progress.finish == Some(Finish::Abort) {
            this.done = true;
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "request aborted (engine twin shutting down)",
            ))));
        }
        let mut upto = progress
            .produced
            .min(this.sent.saturating_add(MAX_EVENTS_PER_FRAME));
        let fault_at = [this.stall_after, this.cut_after]
            .into_iter()
            .flatten()
            .filter(|k| *k > this.sent)
            .min();
        if let Some(k) = fault_at {
            upto = upto.min(k);
        }
        if let Some(p) = this.probe.take() {
            p.fire();
        }
        let mut out = BytesMut::with_capacity((upto - this.sent) as usize * 220 + 400);
        if !this.role_sent && this.writer.meta().endpoint == Endpoint::ChatCompletions {
            this.writer.role_chunk(&mut out);
            this.role_sent = true;
        }
        let all_out = progress.finish.is_some() && upto == progress.produced;
        while this.sent < upto {
            let i = this.sent;
            let finish = if all_out && i + 1 == upto {
                progress.finish
            } else {
                None
            };
            this.writer.token_chunk(&mut out, &this.table, i, finish);
            this.sent += 1;
        }
        if Some(this.sent) == this.cut_after {
            this.cut_after = None;
            this.cut_now = true;
            cx.waker().wake_by_ref();
            return Poll::Ready(Some(Ok(out.freeze())));
        }
        if Some(this.sent) == this.stall_after {
            this.stall_after = None;
            let mut sleep = Box::pin(tokio::time::sleep(std::time::Duration::from_secs_f64(
                this.stall_s,
            )));
            // Register the timer now so the stream is woken when the stall ends.
            let _ = sleep.as_mut().poll(cx);
            this.stall = Some(sleep);
        }
        if all_out {
            if this.include_usage {
                let q = this.guard.slot.queue_time_ms();
                this.writer.usage_chunk(&mut out, this.sent, q);
            }
            SseWriter::done(&mut out);
            this.done = true;
        } else if this.stall.is_none() && this.sent < progress.produced {
            // More tokens are already there: come back at once.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Some(Ok(out.freeze())))
    }
}
