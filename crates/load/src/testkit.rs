//! A minimal OpenAI-compatible SSE stub server on loopback, for tests and the client benchmark.
//!
//! Not the engine twin (crate `sim`): no scheduler, no KV cache, no metrics. It streams exactly
//! `max_tokens` content chunks shaped like vLLM's (a role-only first chunk on chat, one token of
//! text per chunk, the final chunk with `finish_reason`, a usage chunk with empty `choices`, then
//! `[DONE]`), with a fixed time to first chunk and a fixed gap, or as fast as it can. Faults can be
//! injected. It runs on its own OS thread and runtime, binds `127.0.0.1:0`, and stops when dropped.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A fault the stub injects into every streaming request.
#[derive(Debug, Clone, PartialEq)]
pub enum StubFault {
    /// None: a normal stream.
    None,
    /// Answer with this status and an OpenAI error body carrying `message` (no `Retry-After`).
    Status(u16, String),
    /// As `Status`, with a `Retry-After` header: how a gateway refuses a request it has no room
    /// for (HTTP 429, queue full; 503, queue timeout).
    Refuse {
        /// Status code (429, 503).
        status: u16,
        /// Error message in the OpenAI error body.
        message: String,
        /// The `Retry-After` value, sent verbatim (seconds, or an HTTP-date).
        retry_after: String,
    },
    /// After this many content chunks, send `data: {"error": {...}}` and end the stream.
    ErrorAfter(u32),
    /// After this many content chunks, close the connection without ending the body.
    DropAfter(u32),
    /// Send the headers, then nothing until the client gives up.
    Stall,
    /// Hostile: after the headers, one SSE line that never ends (64 KiB frames of `x`, no line
    /// end), until the client goes away.
    EndlessLine,
    /// Hostile: content chunks for ever, whatever `max_tokens` asked (no `finish_reason`).
    IgnoreMaxTokens,
    /// Hostile: before the first content chunk, one event of `lines` `data:` lines of
    /// `line_bytes` bytes each (no blank line between them), then the normal stream.
    HugeEvent {
        /// Bytes of each `data:` line's value.
        line_bytes: usize,
        /// `data:` lines in the event.
        lines: usize,
    },
    /// A frozen server: no frame of any stream is sent between `from` and `until`; frames due
    /// then go out at `until` (the streams resume as after a GC pause or a stuck engine step).
    Freeze {
        /// Start of the freeze.
        from: std::time::Instant,
        /// End of the freeze.
        until: std::time::Instant,
    },
    /// The first `n` streaming requests answer with this status (an OpenAI error body); the
    /// rest are normal streams: a server that errs now and then.
    FailFirst {
        /// Requests that fail.
        n: u64,
        /// Their status.
        status: u16,
    },
}

/// Stub behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct StubConfig {
    /// Models listed by `GET /v1/models`; requests naming another model get vLLM's 404.
    pub models: Vec<String>,
    /// Delay before the first content chunk.
    pub ttft: Duration,
    /// Gap between content chunks (zero: as fast as the connection takes them).
    pub itl: Duration,
    /// Fault injected into every streaming request.
    pub fault: StubFault,
    /// Worker threads of the stub's runtime (1 = current-thread runtime).
    pub threads: usize,
    /// How the stub counts prompt tokens in `usage` (and at `/tokenize`).
    pub tokenizer: StubTokenizer,
}

/// How the stub counts prompt tokens: its own rule, unknown to the client, so calibration can be
/// tested against a tokenizer that is not one token per word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StubTokenizer {
    /// One token per whitespace-separated word, nothing added (the engine twin's rule).
    #[default]
    Words,
    /// A word of 6 characters or more is 2 tokens, shorter ones 1; every prompt gets a BOS
    /// token; on chat every message adds 4 template tokens and the generation prompt 3.
    Subword {
        /// Serve vLLM's `POST /tokenize` (`prompt`, `add_special_tokens` → `count`, `tokens`).
        tokenize: bool,
        /// As SentencePiece does: a word of 4 characters or more right after a line end (where
        /// a chat template puts a message's first word) is one token more, having no word
        /// marker there.
        line_start_split: bool,
    },
}

impl StubTokenizer {
    /// Tokens of `text` by this rule, without special tokens.
    pub fn count(self, text: &str) -> u32 {
        let mut n = 0;
        for line in text.split('\n').enumerate() {
            for (j, w) in line.1.split_whitespace().enumerate() {
                n += match self {
                    StubTokenizer::Subword { .. } if w.len() >= 6 => 2,
                    _ => 1,
                };
                if let StubTokenizer::Subword {
                    line_start_split: true,
                    ..
                } = self
                    && line.0 > 0
                    && j == 0
                    && !line.1.starts_with(' ')
                    && w.len() >= 4
                {
                    n += 1;
                }
            }
        }
        n
    }

    /// `usage.prompt_tokens` of a completions or chat request body.
    pub fn prompt_tokens(self, v: &serde_json::Value) -> u32 {
        let sub = matches!(self, StubTokenizer::Subword { .. });
        let bos = u32::from(sub);
        if let Some(p) = v.get("prompt").and_then(|p| p.as_str()) {
            return bos + self.count(p);
        }
        let Some(msgs) = v.get("messages").and_then(|m| m.as_array()) else {
            return 0;
        };
        // The template puts every message's content after a line end.
        let content: u32 = msgs
            .iter()
            .filter_map(|m| m.get("content").and_then(|c| c.as_str()))
            .map(|c| self.count(&format!("x\n{c}")) - 1)
            .sum();
        if sub {
            bos + content + 4 * msgs.len() as u32 + 3
        } else {
            content
        }
    }
}

impl Default for StubConfig {
    fn default() -> Self {
        StubConfig {
            models: vec!["tiny".into()],
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
            fault: StubFault::None,
            threads: 1,
            tokenizer: StubTokenizer::Words,
        }
    }
}

/// A running stub server; stops when dropped.
pub struct StubServer {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StubServer {
    /// Starts the stub on `127.0.0.1:0` in its own thread.
    ///
    /// # Errors
    /// When the runtime cannot be built or the port cannot be bound.
    pub fn start(config: StubConfig) -> std::io::Result<StubServer> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = if config.threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(config.threads)
                .enable_all()
                .build()?
        };
        let counter = requests.clone();
        let thread = std::thread::Builder::new()
            .name("headroom-stub".into())
            .spawn(move || {
                rt.block_on(serve(std_listener, Arc::new(config), counter, rx));
            })?;
        Ok(StubServer {
            addr,
            requests,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests received so far (all paths).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    std_listener: std::net::TcpListener,
    config: Arc<StubConfig>,
    counter: Arc<AtomicU64>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
        return;
    };
    let mut conns = tokio::task::JoinSet::new();
    // Streaming requests seen, for StubFault::FailFirst.
    let posts = Arc::new(AtomicU64::new(0));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                let _ = stream.set_nodelay(true);
                let config = config.clone();
                let counter = counter.clone();
                let posts = posts.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        counter.fetch_add(1, Ordering::Relaxed);
                        handle(req, config.clone(), posts.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    }
    conns.abort_all();
}

type StubBody = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, ctype: &'static str, body: String) -> Response<StubBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    r
}

fn error_json(status: StatusCode, message: &str) -> Response<StubBody> {
    let body = serde_json::json!({"error": {"message": message, "type": "BadRequestError",
        "param": null, "code": status.as_u16()}});
    full(status, "application/json", body.to_string())
}

async fn handle(
    req: Request<Incoming>,
    config: Arc<StubConfig>,
    posts: Arc<AtomicU64>,
) -> Result<Response<StubBody>, Infallible> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    match (method.as_str(), path.as_str()) {
        ("GET", "/v1/models") => {
            let data: Vec<_> = config
                .models
                .iter()
                .map(|m| serde_json::json!({"id": m, "object": "model", "owned_by": "stub", "max_model_len": 4096}))
                .collect();
            let v = serde_json::json!({"object": "list", "data": data});
            Ok(full(StatusCode::OK, "application/json", v.to_string()))
        }
        ("GET", "/version") => Ok(full(
            StatusCode::OK,
            "application/json",
            "{\"version\":\"stub\"}".into(),
        )),
        ("POST", "/v1/completions") | ("POST", "/v1/chat/completions") => {
            let chat = path.ends_with("chat/completions");
            let v: serde_json::Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return Ok(error_json(
                        StatusCode::BAD_REQUEST,
                        &format!("invalid JSON: {e}"),
                    ));
                }
            };
            if let Some(m) = v.get("model").and_then(|m| m.as_str())
                && !config.models.iter().any(|x| x == m)
            {
                return Ok(error_json(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "The model `{m}` does not exist. Valid aliases: {}.",
                        config.models.join(", ")
                    ),
                ));
            }
            let nth = posts.fetch_add(1, Ordering::Relaxed);
            if let StubFault::FailFirst { n, status } = &config.fault
                && nth < *n
            {
                let s = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return Ok(error_json(s, "injected failure"));
            }
            if let StubFault::Status(code, msg) = &config.fault {
                let s = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return Ok(error_json(s, msg));
            }
            if let StubFault::Refuse {
                status,
                message,
                retry_after,
            } = &config.fault
            {
                let s = StatusCode::from_u16(*status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
                let mut r = error_json(s, message);
                if let Ok(v) = http::HeaderValue::from_str(retry_after) {
                    r.headers_mut().insert(http::header::RETRY_AFTER, v);
                }
                return Ok(r);
            }
            let max_tokens = v
                .get("max_tokens")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(16)
                .min(1_000_000) as u32;
            let prompt_tokens = config.tokenizer.prompt_tokens(&v);
            Ok(stream_response(
                chat,
                max_tokens,
                prompt_tokens,
                config.as_ref().clone(),
            ))
        }
        ("POST", "/tokenize")
            if matches!(
                config.tokenizer,
                StubTokenizer::Subword { tokenize: true, .. }
            ) =>
        {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let Some(p) = v.get("prompt").and_then(|p| p.as_str()) else {
                return Ok(error_json(StatusCode::BAD_REQUEST, "no prompt"));
            };
            let special = v
                .get("add_special_tokens")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true);
            let n = config.tokenizer.count(p) + u32::from(special);
            let tokens: Vec<u32> = (0..n).collect();
            let v = serde_json::json!({"count": n, "max_model_len": 4096, "tokens": tokens, "token_strs": null});
            Ok(full(StatusCode::OK, "application/json", v.to_string()))
        }
        _ => Ok(error_json(StatusCode::NOT_FOUND, "Not Found")),
    }
}

/// The frames of a hostile fault that replace the stream (`EndlessLine`) or come before its
/// first content chunk (`HugeEvent`), by step `i`; `None` when the normal chunk is due. The
/// content steps count these frames too, so `HugeEvent` shifts the chunk count by its frames.
fn hostile_frame(fault: &StubFault, i: u32) -> Option<Bytes> {
    static XS: [u8; 64 * 1024] = [b'x'; 64 * 1024];
    match *fault {
        StubFault::EndlessLine if i == 0 => {
            Some(Bytes::from_static(b"data: {\"choices\":[{\"text\":\""))
        }
        StubFault::EndlessLine => Some(Bytes::from_static(&XS)),
        StubFault::HugeEvent { line_bytes, lines } if (i as usize) < lines => {
            let mut v = Vec::with_capacity(line_bytes + 8);
            v.extend_from_slice(b"data: ");
            v.resize(6 + line_bytes, b'x');
            v.push(b'\n');
            Some(Bytes::from(v))
        }
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Step {
    Role,
    Content(u32),
    Usage,
    Done,
    End,
}

fn stream_response(
    chat: bool,
    max_tokens: u32,
    prompt_tokens: u32,
    config: StubConfig,
) -> Response<StubBody> {
    let content: Bytes = if chat {
        Bytes::from_static(b"data: {\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion.chunk\",\"created\":1795969818,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":null,\"token_ids\":null}]}\n\n")
    } else {
        Bytes::from_static(b"data: {\"id\":\"cmpl-stub\",\"object\":\"text_completion\",\"created\":1795969814,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"text\":\" token\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null,\"prompt_token_ids\":null,\"token_ids\":null}]}\n\n")
    };
    let last: Bytes = if chat {
        Bytes::from_static(b"data: {\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion.chunk\",\"created\":1795969818,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\"token_ids\":null}]}\n\n")
    } else {
        Bytes::from_static(b"data: {\"id\":\"cmpl-stub\",\"object\":\"text_completion\",\"created\":1795969814,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"text\":\" token\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_token_ids\":null,\"token_ids\":null}]}\n\n")
    };
    let role = Bytes::from_static(b"data: {\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion.chunk\",\"created\":1795969818,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"prompt_token_ids\":null}\n\n");
    let usage = Bytes::from(format!(
        "data: {{\"id\":\"stub\",\"object\":\"chat.completion.chunk\",\"created\":1795969818,\"model\":\"tiny\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"total_tokens\":{},\"completion_tokens\":{max_tokens}}}}}\n\n",
        prompt_tokens + max_tokens
    ));
    let first = if chat { Step::Role } else { Step::Content(0) };
    let state = (first, config);
    let stream = futures_util::stream::unfold(state, move |(step, config)| {
        let (content, last, role, usage) =
            (content.clone(), last.clone(), role.clone(), usage.clone());
        async move {
            let frame = |b: Bytes| Ok::<_, std::io::Error>(Frame::data(b));
            match step {
                Step::End => None,
                Step::Role => Some((frame(role), (Step::Content(0), config))),
                Step::Content(i) => {
                    if config.fault == StubFault::Stall {
                        std::future::pending::<()>().await;
                    }
                    if let Some(b) = hostile_frame(&config.fault, i) {
                        return Some((frame(b), (Step::Content(i + 1), config)));
                    }
                    let wait = if i == 0 { config.ttft } else { config.itl };
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    if let StubFault::Freeze { from, until } = config.fault {
                        let now = std::time::Instant::now();
                        if now >= from && now < until {
                            tokio::time::sleep_until(until.into()).await;
                        }
                    }
                    match config.fault {
                        StubFault::ErrorAfter(n) if i == n => {
                            return Some((
                                frame(Bytes::from_static(b"data: {\"error\": {\"object\": \"error\", \"message\": \"injected engine failure\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n")),
                                (Step::Done, config),
                            ));
                        }
                        StubFault::DropAfter(n) if i == n => {
                            // Let hyper flush what was sent before breaking the connection.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            return Some((
                                Err(std::io::Error::new(
                                    std::io::ErrorKind::ConnectionReset,
                                    "injected drop",
                                )),
                                (Step::End, config),
                            ));
                        }
                        _ => {}
                    }
                    if i + 1 >= max_tokens && config.fault != StubFault::IgnoreMaxTokens {
                        Some((frame(last), (Step::Usage, config)))
                    } else {
                        Some((frame(content), (Step::Content(i + 1), config)))
                    }
                }
                Step::Usage => Some((frame(usage), (Step::Done, config))),
                Step::Done => Some((
                    frame(Bytes::from_static(b"data: [DONE]\n\n")),
                    (Step::End, config),
                )),
            }
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r
}
