//! The OpenAI-compatible streaming client: `POST /v1/completions` and `/v1/chat/completions`
//! with `stream: true` and `stream_options: {include_usage: true}`, timed chunk by chunk.
//!
//! Built on hyper 1's HTTP/1.1 connections (one connection per stream in flight, `TCP_NODELAY`,
//! kept in a pool), because the client must never be what limits a measurement: each request's
//! task drives its own connection (no second task per connection, see
//! [`headroom_wire::conn`]); every body frame is timestamped on arrival (monotonic clock,
//! `std::time::Instant`) *before* it is parsed; the SSE parser ([`sse`], the wire layer's
//! splitter) works incrementally on the frame's bytes without copying them; a plain content
//! chunk is read by a one-pass scanner and only the rest goes through serde_json.
//!
//! Times in a [`RequestRecord`] are nanoseconds since the request's *start*: the intended send
//! time in open loop (so a late send counts against the latency, no coordinated omission), the
//! dispatch time in closed loop. The gap between start and the actual hand-over to the HTTP stack
//! is the *send lag*, recorded separately. In open loop without a concurrency cap the pacer
//! thread writes each request onto an idle connection itself ([`Target::send_now`]) and the
//! hand-over is that write.
//!
//! Only `http://` targets are supported (no TLS); an API key is sent as `Authorization: Bearer`
//! and never printed (the header is marked sensitive and [`Target`]'s `Debug` redacts it).

pub mod fd_limit;
mod retry_after;
pub mod sse;

use crate::prompt::DrawnRequest;
use crate::workload::Endpoint;
use bytes::Bytes;
use headroom_core::{Outcome, RequestTiming};
use headroom_wire::conn::{self, Driver, Pool, PoolLimits, Unanswered, describe, drive};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Body as _;
use serde::Serialize;
use sse::{SseSplitter, StreamState};
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// Cancels in-flight requests (end of a measurement window, Ctrl-C). Child tokens
/// (`child_token()`) cancel with their parent.
pub type CancellationFlag = CancellationToken;

/// Client settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Deadline for one whole request, from its start to the end of its stream.
    pub request_timeout: Duration,
    /// Deadline for a TCP connect.
    pub connect_timeout: Duration,
    /// Idle connections kept per host (the pool; one connection per stream in flight), at most
    /// a quarter of the soft open-file limit ([`fd_limit::fd_limit`]).
    pub max_idle_per_host: usize,
}

impl Default for ClientConfig {
    /// 600 s per request (a 1,000-token answer at 0.5 s per token), 5 s connect, 8,192 idle
    /// connections.
    fn default() -> Self {
        ClientConfig {
            request_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(5),
            max_idle_per_host: 8192,
        }
    }
}

/// How long an idle connection is kept for reuse: 4 s, below the 5 s keep-alive timeout of
/// uvicorn (vLLM, SGLang) and llama.cpp's server, so the client does not reuse a connection at
/// the moment the server closes it.
pub const IDLE_KEEP: Duration = Duration::from_secs(4);

/// Errors constructing a target.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TargetError {
    /// Not a usable base URL.
    #[error(
        "target `{url}`: {reason}; expected a base URL such as http://127.0.0.1:8000 (a trailing /v1 is accepted)"
    )]
    BadUrl {
        /// URL as given (credentials redacted).
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The API key cannot be sent in a header.
    #[error("the API key contains characters that cannot be sent in an HTTP header")]
    BadApiKey,
}

/// Where load goes: base URL, optional API key, optional model (the probe resolves a missing one
/// to the first served model). Cloning shares the connection pool.
#[derive(Clone)]
pub struct Target {
    base: String,
    model: Option<String>,
    auth: Option<HeaderValue>,
    /// Origin-form paths of the two endpoints, as sent.
    paths: [Uri; 2],
    /// Path prefix of the base URL (empty or `/prefix`).
    prefix: String,
    pool: Arc<Pool>,
    config: ClientConfig,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("base", &self.base)
            .field("model", &self.model)
            .field("api_key", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Target {
    /// A target at `base_url` (`http://host:port`, optionally with a path prefix; a trailing
    /// `/v1` is stripped) with default client settings.
    ///
    /// # Errors
    /// [`TargetError`] for a URL that is not `http://host[:port][/prefix]` or an API key that is
    /// not a valid header value.
    pub fn new(
        base_url: &str,
        api_key: Option<&str>,
        model: Option<&str>,
    ) -> Result<Target, TargetError> {
        Target::with_config(base_url, api_key, model, ClientConfig::default())
    }

    /// As [`Target::new`] with explicit client settings.
    ///
    /// # Errors
    /// As [`Target::new`].
    pub fn with_config(
        base_url: &str,
        api_key: Option<&str>,
        model: Option<&str>,
        config: ClientConfig,
    ) -> Result<Target, TargetError> {
        let shown = headroom_core::run::redact_url(base_url);
        let bad = |reason: &str| TargetError::BadUrl {
            url: shown.clone(),
            reason: reason.to_string(),
        };
        let trimmed = base_url.trim().trim_end_matches('/');
        let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
        let uri: Uri = trimmed
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(bad(
                    "https is not supported by the load client; use an http:// URL (for example through a port-forward)",
                ));
            }
            _ => return Err(bad("no http:// scheme")),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if uri.query().is_some() {
            return Err(bad("a query string is not allowed"));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(bad(
                "credentials in the URL are not supported; pass the API key separately",
            ));
        }
        let base = trimmed.to_string();
        let prefix = uri.path().trim_end_matches('/').to_string();
        let mk_path = |path: &str| -> Result<Uri, TargetError> {
            format!("{prefix}{path}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))
        };
        let paths = [
            mk_path(Endpoint::Chat.path())?,
            mk_path(Endpoint::Completions.path())?,
        ];
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let host_header = HeaderValue::from_str(authority).map_err(|e| bad(&e.to_string()))?;
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(80);
        let auth = match api_key {
            Some(k) if !k.is_empty() => {
                let mut v = HeaderValue::from_str(&format!("Bearer {k}"))
                    .map_err(|_| TargetError::BadApiKey)?;
                v.set_sensitive(true);
                Some(v)
            }
            _ => None,
        };
        let pool = Arc::new(Pool::new(
            host,
            port,
            host_header,
            PoolLimits {
                // The first target raises the soft open-file limit; idle connections stay
                // within it.
                max_idle: fd_limit::idle_cap(config.max_idle_per_host, fd_limit::fd_limit().soft),
                // Below the 5 s keep-alive of uvicorn (vLLM, SGLang) and llama.cpp's server: a
                // connection idle longer is closed rather than raced against the server's close.
                idle_timeout: IDLE_KEEP,
                connect_timeout: config.connect_timeout,
            },
        ));
        Ok(Target {
            base,
            model: model.filter(|m| !m.is_empty()).map(str::to_string),
            auth,
            paths,
            prefix,
            pool,
            config,
        })
    }

    /// The same target with `model` set (shares the connection pool).
    pub fn with_model(&self, model: &str) -> Target {
        let mut t = self.clone();
        t.model = Some(model.to_string());
        t
    }

    /// Base URL (without `/v1`), never containing credentials.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Model sent in requests (`None`: the field is omitted and the server picks its default).
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Client settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn path(&self, e: Endpoint) -> &Uri {
        match e {
            Endpoint::Chat => &self.paths[0],
            Endpoint::Completions => &self.paths[1],
        }
    }

    /// `GET {base}{path}` and the whole body (at most `limit` bytes), within the connect and a
    /// 10 s read deadline.
    ///
    /// # Errors
    /// A message for connection failures, timeouts and over-long bodies.
    pub async fn get(&self, path: &str, limit: usize) -> Result<(StatusCode, Bytes), String> {
        let uri: Uri = format!("{}{path}", self.prefix)
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let mut b = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .header(HOST, self.pool.host_header().clone());
        if let Some(a) = &self.auth {
            b = b.header(AUTHORIZATION, a.clone());
        }
        let req = b.body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
        self.small_exchange(req, limit).await
    }

    /// One small request and its whole answer (at most `limit` bytes) within the connect and a
    /// 10 s read deadline.
    async fn small_exchange(
        &self,
        req: Request<Full<Bytes>>,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let fut = async {
            let (mut link, resp) = self.pool.request(req).await.map_err(Failure::from)?;
            let status = resp.status();
            let body = read_limited(&mut link.driver, resp.into_body(), limit).await?;
            self.pool.put_back(link);
            Ok((status, body))
        };
        tokio::time::timeout(self.config.connect_timeout + Duration::from_secs(10), fut)
            .await
            .map_err(|_| "no answer within the deadline".to_string())?
    }

    /// `POST {base}{path}` with a JSON body and the whole answer (at most `limit` bytes), within
    /// the connect and a 10 s read deadline. For small control requests (`/tokenize`), not load.
    ///
    /// # Errors
    /// A message for connection failures, timeouts and over-long bodies.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let uri: Uri = format!("{}{path}", self.prefix)
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let mut b = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(HOST, self.pool.host_header().clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(a) = &self.auth {
            b = b.header(AUTHORIZATION, a.clone());
        }
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let req = b
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| e.to_string())?;
        self.small_exchange(req, limit).await
    }

    /// Sends one streaming request and times it. Never fails: every way a request can end is an
    /// [`Outcome`] in the record.
    ///
    /// `start` is the reference instant for every time in the record (intended send time in open
    /// loop); `cancel` ends the request early as `client_cancel`; the per-request timeout counts
    /// from `start`.
    pub async fn send(
        &self,
        req: &PreparedRequest,
        start: Instant,
        cancel: &CancellationFlag,
    ) -> RequestRecord {
        self.answer(req, None, start, cancel).await.record
    }

    /// [`Target::send`], or [`Target::complete`] when `sent`, with the wait the server asked
    /// for when it refused the request.
    pub(crate) async fn answer(
        &self,
        req: &PreparedRequest,
        sent: Option<Dispatched>,
        start: Instant,
        cancel: &CancellationFlag,
    ) -> Answer {
        let retry_after = None;
        let st = StreamState {
            // Sized for the answer asked for; a workload's huge max_tokens does not reserve GBs.
            content_chunk_ns: Vec::with_capacity((req.max_tokens as usize + 1).min(1 << 16)),
            max_content_chunks: Some(sse::chunk_limit(req.max_tokens)),
            ..StreamState::default()
        };
        let rec = RequestRecord {
            class: req.class,
            start_offset_ns: 0,
            send_lag_ns: 0,
            timing: RequestTiming::default(),
            prompt_tokens: None,
            server_queue_ns: None,
            requested_prompt_tokens: req.requested_prompt_tokens,
            requested_max_tokens: req.max_tokens,
            finish_reason: None,
            outcome: Outcome::Protocol,
            sse_events: 0,
            message: None,
        };
        let deadline = tokio::time::Instant::from_std(start + self.config.request_timeout);
        let mut so_far = SoFar {
            st,
            rec,
            last_ns: 0,
            retry_after,
        };
        let ended = {
            let mut exchange = pin!(self.exchange(req, sent, start, &mut so_far));
            let mut cancelled = pin!(cancel.cancelled());
            let mut timer = pin!(tokio::time::sleep_until(deadline));
            // As `select!` (biased: cancel, then deadline, then the exchange), except that the
            // cancellation and the deadline, which wake this task when they fire, are polled only
            // after they fired or when the task's waker changed; a body frame costs one poll.
            let mut registered: Option<Waker> = None;
            poll_fn(|cx| {
                let fresh = registered.as_ref().is_none_or(|w| !w.will_wake(cx.waker()));
                if fresh {
                    registered = Some(cx.waker().clone());
                }
                if (fresh || cancel.is_cancelled()) && cancelled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Outcome::ClientCancel));
                }
                if (fresh || timer.is_elapsed()) && timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Outcome::Timeout));
                }
                exchange.as_mut().poll(cx)
            })
            .await
        };
        let SoFar {
            mut st,
            mut rec,
            last_ns,
            retry_after,
        } = so_far;
        let end_ns = nanos_since(start);
        rec.outcome = match ended {
            Some(o) => o,
            None => st.outcome(false),
        };
        if matches!(rec.outcome, Outcome::Transport) && rec.message.is_none() {
            rec.message = Some("connection closed before the stream ended".into());
        }
        if rec.outcome == Outcome::Protocol && rec.message.is_none() {
            rec.message =
                Some(st.protocol_error.clone().unwrap_or_else(|| {
                    "stream ended without a finish_reason or [DONE]".to_string()
                }));
        }
        if rec.outcome == Outcome::Error && rec.message.is_none() {
            rec.message = st.server_error.clone();
        }
        let usage = st.usage.unwrap_or_default();
        rec.prompt_tokens = usage.prompt_tokens;
        rec.server_queue_ns = st
            .metrics
            .and_then(|m| m.queue_time_ms)
            .filter(|q| q.is_finite() && *q >= 0.0)
            .map(|q| (q * 1e6) as u64);
        rec.finish_reason = st.finish_reason.take();
        rec.sse_events = st.events;
        rec.timing = RequestTiming {
            content_chunk_ns: std::mem::take(&mut st.content_chunk_ns),
            end_ns: match ended {
                // Cancelled or timed out: the stream ended when we gave up on it.
                Some(_) => end_ns,
                None => st.done_ns.unwrap_or(last_ns),
            },
            output_tokens: usage.completion_tokens,
        };
        Answer {
            record: rec,
            retry_after,
        }
    }

    /// The HTTP request for `req`.
    fn http_request(&self, req: &PreparedRequest) -> Result<Request<Full<Bytes>>, String> {
        let mut b = Request::builder()
            .method(Method::POST)
            .uri(self.path(req.endpoint).clone())
            .header(HOST, self.pool.host_header().clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(a) = &self.auth {
            b = b.header(AUTHORIZATION, a.clone());
        }
        b.body(Full::new(req.body.clone()))
            .map_err(|e| format!("cannot build request: {e}"))
    }

    /// Writes `req` onto an idle pooled connection now, from the calling thread, and returns
    /// without waiting for anything (no runtime needed on this thread). The open-loop pacer
    /// sends this way at each intended time, so the send does not wait for a runtime worker to
    /// pick up a task; [`Target::complete`] then awaits the answer in a task. The send lag of
    /// such a request is measured to this hand-over.
    ///
    /// `None` when no idle connection is ready (none yet, or the ones in the pool were closed)
    /// or the request cannot be built: send it with [`Target::send`] instead.
    pub fn send_now(&self, req: &PreparedRequest) -> Option<Dispatched> {
        let http_req = self.http_request(req).ok()?;
        self.pool.send_now(http_req).map(Dispatched)
    }

    /// Idle connections kept for this target (shared by its clones).
    pub fn idle_connections(&self) -> usize {
        self.pool.idle_len()
    }

    /// Idle connections thrown away so far without carrying a request (expired after
    /// [`IDLE_KEEP`], or closed by the server while idle); shared by clones.
    pub fn discarded_connections(&self) -> u64 {
        self.pool.discarded()
    }

    /// Opens a connection ahead of need and keeps it idle, so that a later
    /// [`Target::send_now`] finds one ready.
    ///
    /// # Errors
    /// The connect error, described (refused, timed out).
    pub async fn open_spare_connection(&self) -> Result<(), String> {
        Ok(self.pool.open_spare().await.map_err(Failure::from)?)
    }

    /// As [`Target::send`] for a request already handed to a connection by
    /// [`Target::send_now`] (`req` must be the same request).
    pub async fn complete(
        &self,
        req: &PreparedRequest,
        sent: Dispatched,
        start: Instant,
        cancel: &CancellationFlag,
    ) -> RequestRecord {
        self.answer(req, Some(sent), start, cancel).await.record
    }

    /// Runs the HTTP exchange, filling `so_far`; `Some(outcome)` when it ended before or outside
    /// the stream (HTTP status, transport), `None` when the stream ran and `so_far.st` decides.
    /// An error status sets `so_far.retry_after` from its `Retry-After` / `retry-after-ms`
    /// headers.
    async fn exchange(
        &self,
        req: &PreparedRequest,
        sent: Option<Dispatched>,
        start: Instant,
        so_far: &mut SoFar,
    ) -> Option<Outcome> {
        let SoFar {
            st,
            rec,
            last_ns,
            retry_after,
        } = so_far;
        let answered = match sent {
            Some(Dispatched(sent)) => {
                rec.send_lag_ns = nanos_between(start, sent.at);
                match sent.answer(false).await {
                    Ok(r) => Ok(r),
                    Err(Unanswered::Failed(e)) => Err(Failure::Transport(e)),
                    // The connection was closed under the request: it goes out again now. The
                    // send lag stays the first send's (the request left on time; the time lost
                    // counts in its latency).
                    Err(Unanswered::Resend { req, written }) => self
                        .pool
                        .request_again(*req, written)
                        .await
                        .map_err(Failure::from),
                }
            }
            None => match self.http_request(req) {
                Ok(http_req) => {
                    rec.send_lag_ns = nanos_since(start);
                    self.pool.request(http_req).await.map_err(Failure::from)
                }
                Err(e) => {
                    rec.message = Some(e);
                    return Some(Outcome::Protocol);
                }
            },
        };
        let (mut link, resp) = match answered {
            Ok(r) => r,
            Err(Failure::Transport(e)) => {
                rec.message = Some(e);
                return Some(Outcome::Transport);
            }
            // The client's own limit, not the server's failure.
            Err(Failure::ClientLimit(e)) => {
                rec.message = Some(e);
                return Some(Outcome::ClientLimit);
            }
        };
        let status = resp.status();
        if !status.is_success() {
            *retry_after = retry_after::retry_after(resp.headers(), SystemTime::now());
            let body = read_limited(&mut link.driver, resp.into_body(), 64 * 1024).await;
            if body.is_ok() {
                self.pool.put_back(link);
            }
            rec.message = Some(server_message(&body.unwrap_or_default()));
            return Some(Outcome::HttpStatus(status.as_u16()));
        }
        let mut body = resp.into_body();
        let mut sp = SseSplitter::new();
        loop {
            match drive(&mut link.driver, |cx| Pin::new(&mut body).poll_frame(cx)).await {
                None => break,
                Some(Ok(frame)) => {
                    // Timestamp first, parse after.
                    let t = nanos_since(start);
                    *last_ns = t;
                    if let Some(data) = frame.data_ref() {
                        sp.feed(data, &mut |ev| st.on_event(ev, t));
                        // A stream past the client's bounds ends here; dropping the link closes
                        // the connection, so the server stops sending.
                        if let Some(why) = sp.overflow().or(st.over_limit.as_deref()) {
                            rec.message = Some(why.to_string());
                            return Some(Outcome::Protocol);
                        }
                    }
                }
                Some(Err(e)) => {
                    let t = nanos_since(start);
                    sp.finish(&mut |ev| st.on_event(ev, t));
                    if st.finish_reason.is_none() && st.server_error.is_none() {
                        rec.message = Some(format!("stream broke: {}", describe(&e)));
                        return Some(Outcome::Transport);
                    }
                    return None;
                }
            }
        }
        let t = *last_ns;
        sp.finish(&mut |ev| st.on_event(ev, t));
        self.pool.put_back(link);
        None
    }
}

fn nanos_since(start: Instant) -> u64 {
    nanos_between(start, Instant::now())
}

fn nanos_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

/// Why a request got no connection or no answer, as the client tells them apart.
#[derive(Debug, Clone, PartialEq)]
enum Failure {
    /// The connection failed, or broke before the answer (the server's side or the network's),
    /// described.
    Transport(String),
    /// The client's own limit (open files, local ports) refused the connect: the server never
    /// saw the request ([`fd_limit::client_limit`]).
    ClientLimit(String),
}

impl From<conn::Failure> for Failure {
    fn from(f: conn::Failure) -> Failure {
        match f {
            conn::Failure::Transport(m) => Failure::Transport(m),
            conn::Failure::Connect(e) => e.into(),
        }
    }
}

impl From<conn::ConnectError> for Failure {
    fn from(e: conn::ConnectError) -> Failure {
        match e
            .io
            .as_ref()
            .and_then(|io| Some((fd_limit::client_limit(io)?, io)))
        {
            Some((what, io)) => Failure::ClientLimit(fd_limit::limit_message(what, io)),
            None => Failure::Transport(e.message),
        }
    }
}

impl From<Failure> for String {
    fn from(f: Failure) -> String {
        match f {
            Failure::Transport(m) | Failure::ClientLimit(m) => m,
        }
    }
}

/// What [`Target::exchange`] has seen of a request so far; it stays with the caller, so a
/// request cancelled or timed out mid-stream keeps what arrived.
struct SoFar {
    st: StreamState,
    rec: RequestRecord,
    /// When the last body frame arrived, ns from the request's start.
    last_ns: u64,
    /// The wait an error answer asked for.
    retry_after: Option<Duration>,
}

/// A finished request and the wait its answer asked for.
#[derive(Debug)]
pub(crate) struct Answer {
    /// What the request measured.
    pub(crate) record: RequestRecord,
    /// For an error status: the wait its `retry-after-ms` or `Retry-After` header asked for,
    /// from the moment the answer arrived (zero for a date already past); `None` without
    /// either header, and for every other ending.
    pub(crate) retry_after: Option<Duration>,
}

/// A request already written onto a pooled connection ([`Target::send_now`]), its answer not yet
/// awaited; finish it with [`Target::complete`]. Dropping it closes the connection.
pub struct Dispatched(conn::Sent);

impl fmt::Debug for Dispatched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatched")
            .field("at", &self.0.at)
            .finish_non_exhaustive()
    }
}

/// The whole body (at most `limit` bytes), driving its connection.
async fn read_limited(
    conn: &mut Driver,
    mut body: hyper::body::Incoming,
    limit: usize,
) -> Result<Bytes, String> {
    let mut out = Vec::new();
    while let Some(f) = drive(conn, |cx| Pin::new(&mut body).poll_frame(cx)).await {
        let f = f.map_err(|e| describe(&e))?;
        if let Some(d) = f.data_ref() {
            if out.len() + d.len() > limit {
                return Err(format!("response body longer than {limit} bytes"));
            }
            out.extend_from_slice(d);
        }
    }
    Ok(Bytes::from(out))
}

/// The server's error message from an error body (`{"error": {"message": ...}}`, vLLM's older
/// `{"message": ...}`, or the text itself, shortened).
pub fn server_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(e) = v.get("error") {
            return sse::error_message(e);
        }
        if let Some(serde_json::Value::String(m)) = v.get("message") {
            return m.clone();
        }
        if let Some(serde_json::Value::String(m)) = v.get("detail") {
            return m.clone();
        }
    }
    let t = String::from_utf8_lossy(body);
    let t = t.trim();
    if t.is_empty() {
        "(empty body)".to_string()
    } else {
        t.chars().take(500).collect()
    }
}

/// A request encoded for the wire, ready to send (possibly many times).
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// Class index.
    pub class: usize,
    /// Endpoint.
    pub endpoint: Endpoint,
    /// JSON body.
    pub body: Bytes,
    /// Requested prompt tokens (synthesis target).
    pub requested_prompt_tokens: u32,
    /// `max_tokens`.
    pub max_tokens: u32,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<&'a [ChatMessage<'a>]>,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
}

impl PreparedRequest {
    /// Encodes a drawn request: chat puts the shared prefix in a system message and the prompt in
    /// a user message; completions sends `prefix + prompt` as one `prompt`. Always `stream: true`
    /// and `stream_options: {include_usage: true}`; `ignore_eos` only when set (a vLLM extension).
    pub fn encode(d: &DrawnRequest, model: Option<&str>) -> PreparedRequest {
        let joined;
        let sys = [
            ChatMessage {
                role: "system",
                content: &d.prefix,
            },
            ChatMessage {
                role: "user",
                content: &d.prompt,
            },
        ];
        let (prompt, messages) = match d.endpoint {
            Endpoint::Completions => {
                joined = format!("{}{}", d.prefix, d.prompt);
                (Some(joined.as_str()), None)
            }
            Endpoint::Chat if d.prefix.is_empty() => (None, Some(&sys[1..])),
            Endpoint::Chat => (None, Some(&sys[..])),
        };
        let body = Body {
            model,
            prompt,
            messages,
            max_tokens: d.max_tokens,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            ignore_eos: d.ignore_eos,
        };
        // Serialising plain strings and numbers cannot fail.
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        PreparedRequest {
            class: d.class,
            endpoint: d.endpoint,
            body: Bytes::from(bytes),
            requested_prompt_tokens: d.requested_prompt_tokens,
            max_tokens: d.max_tokens,
        }
    }
}

/// What one request measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// Class index.
    pub class: usize,
    /// Start (intended send time) as ns since the level start; set by the runner.
    pub start_offset_ns: u64,
    /// Actual hand-over to the HTTP stack minus start, ns.
    pub send_lag_ns: u64,
    /// Content chunk times, end of stream and output tokens (from `usage`), ns since start.
    pub timing: RequestTiming,
    /// Engine queue time of this request, ns, from vLLM's per-request `metrics.queue_time_ms`
    /// (`--enable-per-request-metrics`); `None` when the server does not send it.
    pub server_queue_ns: Option<u64>,
    /// `usage.prompt_tokens` (realised prompt length), when the server sent usage.
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens the workload asked for.
    pub requested_prompt_tokens: u32,
    /// `max_tokens` sent.
    pub requested_max_tokens: u32,
    /// `finish_reason` as sent.
    pub finish_reason: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// SSE data events received (content, role-only, usage, `[DONE]`).
    pub sse_events: u32,
    /// Server error message or client-side reason, for non-success outcomes.
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn drawn(endpoint: Endpoint, prefix: &str) -> DrawnRequest {
        DrawnRequest {
            class: 1,
            endpoint,
            prefix: Arc::from(prefix),
            prompt: " hello world".into(),
            requested_prompt_tokens: 4,
            max_tokens: 7,
            ignore_eos: true,
        }
    }

    #[test]
    fn bodies_as_openai_expects() {
        let p = PreparedRequest::encode(&drawn(Endpoint::Completions, "sys text"), Some("tiny"));
        let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model": "tiny", "prompt": "sys text hello world", "max_tokens": 7,
                "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})
        );
        let p = PreparedRequest::encode(&drawn(Endpoint::Chat, "sys"), None);
        let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"messages": [{"role": "system", "content": "sys"},
                {"role": "user", "content": " hello world"}], "max_tokens": 7,
                "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})
        );
        let mut d = drawn(Endpoint::Chat, "");
        d.ignore_eos = false;
        let v: serde_json::Value =
            serde_json::from_slice(&PreparedRequest::encode(&d, Some("m")).body).unwrap();
        assert_eq!(v["messages"].as_array().unwrap().len(), 1);
        assert!(v.get("ignore_eos").is_none());
    }

    #[test]
    fn target_urls() {
        let t = Target::new("http://127.0.0.1:8000/v1/", Some("sk-secret"), None).unwrap();
        assert_eq!(t.base_url(), "http://127.0.0.1:8000");
        assert_eq!(t.path(Endpoint::Chat).to_string(), "/v1/chat/completions");
        assert_eq!(t.pool.host_header(), "127.0.0.1:8000");
        let dbg = format!("{t:?}");
        assert!(
            !dbg.contains("sk-secret") && dbg.contains("redacted"),
            "{dbg}"
        );
        let t = Target::new("http://gw:80/llm", None, Some("m")).unwrap();
        assert_eq!(t.base_url(), "http://gw:80/llm");
        assert_eq!(
            t.path(Endpoint::Completions).to_string(),
            "/llm/v1/completions"
        );
        assert_eq!(t.pool.host_header(), "gw:80");
        assert_eq!(t.with_model("x").model(), Some("x"));
        for (u, needle) in [
            ("https://x", "https is not supported"),
            ("127.0.0.1:8000", "scheme"),
            ("http://", "expected a base URL"),
            ("http://u:pw@h:1", "credentials"),
        ] {
            let e = Target::new(u, None, None).unwrap_err().to_string();
            assert!(e.contains(needle), "{u}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
        assert_eq!(
            Target::new("http://h:1", Some("bad\nkey"), None).unwrap_err(),
            TargetError::BadApiKey
        );
    }

    #[test]
    fn error_bodies_from_fixtures() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openai");
        let raw = std::fs::read(dir.join("error_unknown_model.txt")).unwrap();
        let i = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        assert_eq!(
            server_message(&raw[i + 4..]),
            "The model `nope` does not exist. Valid aliases: tiny."
        );
        assert_eq!(
            server_message(b"Internal Server Error"),
            "Internal Server Error"
        );
        assert_eq!(server_message(b""), "(empty body)");
    }
}
