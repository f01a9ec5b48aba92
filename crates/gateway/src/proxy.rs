//! The pipeline, assembled in one place: accept → correlate → authenticate → read body →
//! classify → admit → forward → measure → export.
//!
//! One HTTP/1.1 server (hyper) on the listen address serves `/metrics` itself and forwards the
//! OpenAI API: `POST /v1/chat/completions` and `POST /v1/completions` are classified, admitted
//! and measured; the rest of `/v1/*` and `/health`, `/version`, `/ping`, `/tokenize`,
//! `/detokenize` pass through unmeasured, with no admission limit but under the same deadlines;
//! any other path, and vLLM's LoRA management under `/v1/`, is a 404 (engine admin endpoints
//! are not exposed). With `api_key_env`, `/v1/*` needs the key, as with vLLM's `--api-key`. Upstream connections (`TCP_NODELAY`, connect timeout) are driven inside the task of
//! the client's connection and kept in a pool per upstream ([`crate::upstream`]); a pool of
//! upstreams is used round-robin, and a request whose connection could not be made is tried
//! once on each other member of its pool (it never reached an engine, so this is safe).
//!
//! Routing uses the percent-decoded, checked path ([`crate::path`]): a path that is not
//! canonical is a 400, and upstream `Location` headers are rewritten so they never name the
//! upstream.
//!
//! Each stage that can refuse a request returns a [`Rejection`]; [`rescue`] alone counts it and
//! writes the answer (the table of statuses and counts is in [`crate::rescue`]). Every response
//! carries `x-request-id` and `traceparent` (see [`crate::ids`]). Prompts and completions are
//! never logged.
//!
//! Every classified request is counted in exactly one `outcome`: by [`rescue`] for refusals and
//! failures before an upstream head, by a guard if the client hangs up before that head
//! (`client_cancel`), and from the head on by the measured body ([`crate::body`]).

use crate::admit::{Limiter, Refusal, Slot};
use crate::body::{Measure, MeasuredBody, PlainBody, ProxyBody};
use crate::classify::{RequestFacts, classify, tenant_of};
use crate::config::{GatewayConfig, Route, Upstream, is_hop_by_hop};
use crate::drain::Drain;
use crate::ids;
use crate::listen;
use crate::metrics::{CONTENT_TYPE, ClassMetrics, GatewayOutcome, Metrics};
use crate::path::{self, Canonical, PathError};
use crate::rescue::{Rejection, rescue};
use crate::upstream::{Conns, UpstreamBody, UpstreamError};
use bytes::{Bytes, BytesMut};
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE as CT, HeaderValue};
use http::{HeaderName, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// After the drain ran out, how long the bodies still open get to write their error event.
const DRAIN_TAIL: Duration = Duration::from_secs(2);

/// Shared state of a running gateway.
#[derive(Debug)]
pub struct Gateway {
    cfg: GatewayConfig,
    metrics: Metrics,
    limiters: Vec<Option<Limiter>>,
    pools: BTreeMap<String, Pool>,
    upstream_auth: Option<HeaderValue>,
    drain: Arc<Drain>,
}

#[derive(Debug)]
struct Pool {
    members: Vec<Member>,
    next: AtomicUsize,
}

#[derive(Debug)]
struct Member {
    up: Upstream,
    /// The upstream's connections (shared by every pool that names the same base URL), or why
    /// its base URL has no usable authority.
    conns: Result<Arc<Conns>, String>,
}

impl Gateway {
    /// Builds the state: metrics families, one limiter per limited class, the upstream
    /// connection pools.
    pub fn new(cfg: GatewayConfig) -> Gateway {
        let names: Vec<String> = cfg.classes.iter().map(|c| c.name.clone()).collect();
        let metrics = Metrics::new(&names, &cfg.tenants, cfg.slo.as_ref());
        let limiters = cfg
            .classes
            .iter()
            .map(|c| {
                c.concurrency.clone().map(|k| {
                    let (in_flight, queued) = metrics.admission_gauges(&c.name);
                    Limiter::new(k, in_flight, queued)
                })
            })
            .collect();
        let mut by_base: BTreeMap<&str, Result<Arc<Conns>, String>> = BTreeMap::new();
        let pools = cfg
            .pools
            .iter()
            .map(|(k, v)| {
                let members = v
                    .iter()
                    .map(|up| Member {
                        up: up.clone(),
                        conns: by_base
                            .entry(up.base.as_str())
                            .or_insert_with(|| conns_for(&up.base, cfg.timeouts.connect))
                            .clone(),
                    })
                    .collect();
                (
                    k.clone(),
                    Pool {
                        members,
                        next: AtomicUsize::new(0),
                    },
                )
            })
            .collect();
        let upstream_auth = cfg.upstream_api_key.as_ref().and_then(|k| {
            let mut v = HeaderValue::from_str(&format!("Bearer {k}")).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        Gateway {
            cfg,
            metrics,
            limiters,
            pools,
            upstream_auth,
            drain: Arc::default(),
        }
    }

    /// The configuration it runs on.
    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    /// The gateway's series as OpenMetrics text (what `/metrics` serves).
    pub fn metrics_text(&self) -> String {
        self.metrics.render()
    }

    /// Handles one request (the whole pipeline). Never fails: every problem is a response.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<ProxyBody> {
        let accepted = Instant::now();
        let canon = path::canonicalise(req.uri().path());
        // HEAD too (uptime checks use it); hyper sends a HEAD answer's headers without the body.
        if canon.as_ref().is_ok_and(|c| c.route_path() == "/metrics")
            && matches!(*req.method(), Method::GET | Method::HEAD)
        {
            let mut r = Response::new(ProxyBody::full(self.metrics.render()));
            r.headers_mut()
                .insert(CT, HeaderValue::from_static(CONTENT_TYPE));
            return r;
        }
        let rid = ids::request_id(req.headers().get(X_REQUEST_ID));
        let (tp, tp_valid) = ids::traceparent(req.headers().get(TRACEPARENT));
        let corr = Correlation {
            rid: rid.clone(),
            tp: tp.clone(),
            tracestate: if tp_valid {
                req.headers().get(TRACESTATE).cloned()
            } else {
                None
            },
        };
        let mut resp = self.pipeline(req, canon, accepted, &corr).await;
        let h = resp.headers_mut();
        h.insert(X_REQUEST_ID, rid);
        h.insert(TRACEPARENT, tp);
        resp
    }

    async fn pipeline(
        &self,
        req: Request<Incoming>,
        canon: Result<Canonical, PathError>,
        accepted: Instant,
        corr: &Correlation,
    ) -> Response<ProxyBody> {
        let mut a = match self.accept(req, canon).await {
            Ok(a) => a,
            // No class yet: counted by reason.
            Err(r) => return rescue(r, &self.metrics, None),
        };
        match a.measured.take() {
            Some((route, facts)) => self.measure(a, route, facts, accepted, corr).await,
            // No class: counted in the passthrough errors.
            None => self
                .forward_plain(a, corr, accepted)
                .await
                .unwrap_or_else(|r| rescue(r, &self.metrics, None)),
        }
    }

    /// The stages before classification: the path, the route, the API key, the body and (on a
    /// measured route) its JSON.
    async fn accept(
        &self,
        req: Request<Incoming>,
        canon: Result<Canonical, PathError>,
    ) -> Result<Accepted, Rejection> {
        // Every decision below is taken on the canonical path (see [`crate::path`]).
        let canon = canon.map_err(Rejection::BadPath)?;
        let path = canon.route_path();
        let route = Route::of_path(path).filter(|_| req.method() == Method::POST);
        if route.is_none() && !passthrough_path(path) {
            return Err(Rejection::NotFound(path::encode(path)));
        }
        // A measured route goes to its exact path; anything else keeps its trailing slash, so
        // the upstream's own slash handling (a redirect, rewritten below) still applies.
        let target = {
            let p = match route {
                Some(_) => path.to_string(),
                None => canon.forward(),
            };
            match req.uri().query() {
                Some(q) => format!("{p}?{q}"),
                None => p,
            }
        };
        // As vLLM's `--api-key`: only `/v1/*` needs the key, so uptime probes of `/health`
        // work without it.
        if let Some(key) = &self.cfg.api_key
            && path.starts_with("/v1/")
            && !authorized(req.headers().get(AUTHORIZATION), key)
        {
            return Err(Rejection::Unauthorized);
        }
        let (parts, body) = req.into_parts();
        let body = self.read_body(&parts, body).await?;
        let measured = match route {
            Some(r) => Some((
                r,
                RequestFacts::from_body(&body, Some(r))
                    .map_err(|e| Rejection::MalformedJson(e.0))?,
            )),
            None => None,
        };
        Ok(Accepted {
            parts,
            body,
            target,
            measured,
        })
    }

    /// The stages from classification on: classify, admit, forward; then the measured body
    /// owns the outcome.
    async fn measure(
        &self,
        a: Accepted,
        route: Route,
        facts: RequestFacts,
        accepted: Instant,
        corr: &Correlation,
    ) -> Response<ProxyBody> {
        let Accepted {
            parts,
            body,
            target,
            ..
        } = a;
        let tenant = tenant_of(
            &self.cfg,
            parts
                .headers
                .get(&self.cfg.tenant_header)
                .map(HeaderValue::as_bytes),
        );
        let class = classify(&self.cfg, route, &facts, tenant);
        let m = self.metrics.class(class, tenant);
        let mut gone = CancelGuard(Some(m.clone()));
        let (slot, waited) = match self.admit(class, &m, facts.sequences).await {
            Ok(s) => s,
            Err(r) => return gone.rescue(r, &self.metrics),
        };
        let pool = &self.cfg.classes[class].pool;
        // Before dispatch: body read, parsing, classification and admission bookkeeping.
        let before_upstream = accepted.elapsed().saturating_sub(waited);
        let head_within = self.head_within(facts.stream, accepted);
        let resp = match self
            .forward(pool, &parts, &target, body, corr, head_within)
            .await
        {
            Ok(r) => r,
            // The slot is freed after the count (on return), so a scrape that sees it free
            // sees the outcome too.
            Err(r) => return gone.rescue(r, &self.metrics),
        };
        // From here the measured body owns the outcome.
        gone.disarm();
        let head_at = Instant::now();
        let fixed = status_outcome(resp.status(), self.upstream_auth.is_some());
        let (mut rparts, rbody) = resp.into_parts();
        let sse = rparts
            .headers
            .get(CT)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        strip_hop_by_hop(&mut rparts.headers, sse);
        m.overhead
            .observe((before_upstream + head_at.elapsed()).as_secs_f64());
        let body = MeasuredBody::new(
            rbody,
            Measure {
                metrics: m,
                slot,
                accepted,
                sse,
                fixed,
                total_deadline: accepted + self.cfg.timeouts.total,
                idle: self.cfg.timeouts.idle,
                drain: self.drain.watch(),
            },
        );
        Response::from_parts(rparts, ProxyBody::Measured(Box::new(body)))
    }

    /// Takes `sequences` admission slots of `class` (none for a class without a limit);
    /// returns the slot and the time queued. The wait is observed in `m.queue` however it ends.
    async fn admit(
        &self,
        class: usize,
        m: &Arc<ClassMetrics>,
        sequences: u64,
    ) -> Result<(Slot, Duration), Rejection> {
        let Some(l) = &self.limiters[class] else {
            m.queue.observe(0.0);
            return Ok((Slot::unlimited(), Duration::ZERO));
        };
        // Observed however the wait ends, a client leaving the queue included.
        let wait = m.queue_wait();
        match l.admit(sequences).await {
            Ok((slot, waited)) => {
                wait.admitted(waited);
                Ok((slot, waited))
            }
            Err(r) => {
                match r {
                    Refusal::QueueTimeout { waited, .. } => wait.timed_out(waited),
                    // Neither waited.
                    Refusal::QueueFull { .. } | Refusal::TooWide { .. } => wait.queue_full(),
                }
                Err(Rejection::refused(r, &self.cfg.classes[class].name))
            }
        }
    }

    /// Reads the whole request body within `max_body_bytes` and `timeouts.body_read`.
    async fn read_body(
        &self,
        parts: &http::request::Parts,
        mut body: Incoming,
    ) -> Result<Bytes, Rejection> {
        let limit = self.cfg.max_body_bytes;
        let too_large = Rejection::BodyTooLarge { limit };
        if let Some(n) = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            && n > limit as u64
        {
            return Err(too_large);
        }
        let read = async {
            let mut buf = BytesMut::new();
            while let Some(f) = body.frame().await {
                let f = f.map_err(|e| Rejection::BodyUnreadable(e.to_string()))?;
                if let Some(d) = f.data_ref() {
                    if buf.len() + d.len() > limit {
                        return Err(too_large);
                    }
                    buf.extend_from_slice(d);
                }
            }
            Ok(buf.freeze())
        };
        let within = self.cfg.timeouts.body_read;
        tokio::time::timeout(within, read)
            .await
            .unwrap_or(Err(Rejection::BodyTimeout { within }))
    }

    /// The request for `up`, in origin form (the connection sets `Host`); `pq` is the
    /// canonical path (and the query as sent).
    fn upstream_request(
        &self,
        up: &Upstream,
        parts: &http::request::Parts,
        pq: &str,
        body: Bytes,
        corr: &Correlation,
    ) -> Option<Request<Full<Bytes>>> {
        let uri: Uri = if up.prefix.is_empty() {
            pq.parse().ok()?
        } else {
            format!("{}{pq}", up.prefix).parse().ok()?
        };
        let mut b = Request::builder().method(parts.method.clone()).uri(uri);
        let h = b.headers_mut()?;
        for name in &self.cfg.forward_headers {
            for v in parts.headers.get_all(name) {
                h.append(name.clone(), v.clone());
            }
        }
        h.insert(X_REQUEST_ID, corr.rid.clone());
        h.insert(TRACEPARENT, corr.tp.clone());
        if let Some(ts) = &corr.tracestate {
            h.insert(TRACESTATE, ts.clone());
        }
        if let Some(a) = &self.upstream_auth {
            h.insert(AUTHORIZATION, a.clone());
        }
        b.body(Full::new(body)).ok()
    }

    /// How long the upstream may take to send the response head: `timeouts.first_byte` for a
    /// streaming request, whose head comes with the stream's start; the rest of
    /// `timeouts.total` for a non-streaming one, whose head comes only with the finished answer
    /// (vLLM sends it when generation ends).
    fn head_within(&self, stream: bool, accepted: Instant) -> Duration {
        let rest = (accepted + self.cfg.timeouts.total).saturating_duration_since(Instant::now());
        if stream {
            rest.min(self.cfg.timeouts.first_byte)
        } else {
            rest
        }
    }

    /// Sends to the pool's members in round-robin order until one accepts the connection;
    /// `head_within` bounds the wait for the response head.
    async fn forward(
        &self,
        pool: &str,
        parts: &http::request::Parts,
        target: &str,
        body: Bytes,
        corr: &Correlation,
        head_within: Duration,
    ) -> Result<Response<UpstreamBody>, Rejection> {
        let Some(p) = self.pools.get(pool) else {
            return Err(Rejection::NoPool {
                pool: pool.to_string(),
            });
        };
        let n = p.members.len();
        let start = p.next.fetch_add(1, Ordering::Relaxed);
        let mut reasons = Vec::new();
        for i in 0..n {
            let k = (start + i) % n;
            let Member { up, conns } = &p.members[k];
            // Clients are told which member of which pool, never its address (the operator's
            // gateway.yaml lists them in that order).
            let who = format!("upstream {} of {n} in pool `{pool}`", k + 1);
            let conns = match conns {
                Ok(c) => c,
                Err(e) => {
                    reasons.push(format!("{who}: {e}"));
                    continue;
                }
            };
            let Some(req) = self.upstream_request(up, parts, target, body.clone(), corr) else {
                return Err(Rejection::Unforwardable);
            };
            match tokio::time::timeout(head_within, conns.request(req)).await {
                Ok(Ok(mut r)) => {
                    client_locations(r.headers_mut(), &up.prefix);
                    return Ok(r);
                }
                Ok(Err(UpstreamError::Connect(e))) => {
                    reasons.push(format!("{who}: {e}"));
                }
                Ok(Err(UpstreamError::Transport(e))) => {
                    return Err(Rejection::UpstreamFailed { who, error: e });
                }
                Err(_) => {
                    return Err(Rejection::HeadTimeout {
                        who,
                        within: head_within,
                    });
                }
            }
        }
        Err(Rejection::Unreachable {
            pool: pool.to_string(),
            reasons,
        })
    }

    /// Forwards an unmeasured request (models, health, …) and passes the answer through,
    /// under the idle and total deadlines. A JSON body that asks for `stream` gets the
    /// streaming head deadline.
    async fn forward_plain(
        &self,
        a: Accepted,
        corr: &Correlation,
        accepted: Instant,
    ) -> Result<Response<ProxyBody>, Rejection> {
        let stream = a.parts.method == Method::GET
            || RequestFacts::from_body(&a.body, None).is_ok_and(|f| f.stream);
        let head_within = self.head_within(stream, accepted);
        let r = self
            .forward(
                crate::config::DEFAULT_POOL,
                &a.parts,
                &a.target,
                a.body,
                corr,
                head_within,
            )
            .await?;
        let (mut p, b) = r.into_parts();
        strip_hop_by_hop(&mut p.headers, false);
        let b = PlainBody::new(
            b,
            accepted + self.cfg.timeouts.total,
            self.cfg.timeouts.idle,
            self.drain.watch(),
        );
        Ok(Response::from_parts(p, ProxyBody::Plain(Box::new(b))))
    }
}

/// Counts `client_cancel` for a classified request whose handler is dropped before the upstream
/// answered with a head: hyper watches the connection for EOF while a request is in flight and
/// drops the handler's future when the client hangs up, so a client that leaves its admission
/// queue, or a non-streaming client that leaves while the engine generates, ends here (dropping
/// the pending upstream request, which closes its connection: vLLM aborts the request).
struct CancelGuard(Option<Arc<ClassMetrics>>);

impl CancelGuard {
    /// The request's outcome is counted elsewhere from now on.
    fn disarm(&mut self) {
        self.0 = None;
    }

    /// Counts and answers a rejection in the guard's class instead of `client_cancel`.
    fn rescue(&mut self, r: Rejection, metrics: &Metrics) -> Response<ProxyBody> {
        let m = self.0.take();
        rescue(r, metrics, m.as_deref())
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            m.outcome(GatewayOutcome::ClientCancel);
        }
    }
}

/// The outcome an upstream response status fixes, or `None` for 2xx (the body decides).
///
/// The split keeps the error budget for failures of the serving path, not of clients' requests:
/// * `upstream_error`: 5xx, 429 (the engine is overloaded), 408 (the gateway had already sent the
///   whole body, so the upstream timed out on its own side), any 1xx/3xx (an OpenAI-compatible
///   completion endpoint never answers so), and 401/403 when the gateway itself sets the
///   upstream `Authorization` (`upstream_api_key`: the operator's key was refused, not the
///   client's);
/// * `invalid_request`: every other 4xx (400 bad parameters, 404 unknown model, 413, 422, and
///   401/403 for a key the client sent): the client's own request was refused.
pub fn status_outcome(status: StatusCode, gateway_sets_auth: bool) -> Option<GatewayOutcome> {
    if status.is_success() {
        return None;
    }
    let client_fault = status.is_client_error()
        && !matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::REQUEST_TIMEOUT
        )
        && !(gateway_sets_auth
            && matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN));
    Some(if client_fault {
        GatewayOutcome::InvalidRequest
    } else {
        GatewayOutcome::UpstreamError
    })
}

/// A request past [`Gateway::accept`].
#[derive(Debug)]
struct Accepted {
    parts: http::request::Parts,
    body: Bytes,
    /// Path and query to send upstream.
    target: String,
    /// The measured route and what its body says; `None` on an unmeasured route (and once
    /// taken).
    measured: Option<(Route, RequestFacts)>,
}

#[derive(Debug)]
struct Correlation {
    rid: HeaderValue,
    tp: HeaderValue,
    tracestate: Option<HeaderValue>,
}

/// Paths forwarded unmeasured: the OpenAI API under `/v1/` and vLLM's read-only endpoints,
/// but not vLLM's runtime LoRA management (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`,
/// enabled by `VLLM_ALLOW_RUNTIME_LORA_UPDATING`), which changes what the engine serves.
fn passthrough_path(path: &str) -> bool {
    (path.starts_with("/v1/")
        && !matches!(path, "/v1/load_lora_adapter" | "/v1/unload_lora_adapter"))
        || matches!(
            path,
            "/health" | "/version" | "/ping" | "/tokenize" | "/detokenize"
        )
}

/// `Authorization: Bearer <key>`, the key compared in constant time (for keys of the same
/// length); the scheme name in any case (RFC 9110 §11.1: auth schemes are case-insensitive).
fn authorized(h: Option<&HeaderValue>, key: &str) -> bool {
    let Some(v) = h.map(HeaderValue::as_bytes) else {
        return false;
    };
    let Some((scheme, token)) = v.split_at_checked(7) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    token.ct_eq(key.as_bytes()).into()
}

/// Removes the hop-by-hop headers of an upstream response before it goes to the client: the
/// fixed list ([`is_hop_by_hop`]; `content-length` only for SSE, which is re-framed) and every
/// header the response's own `Connection` header names (RFC 9110 §7.6.1), so an upstream cannot
/// pass a header meant for its hop through the gateway.
fn strip_hop_by_hop(h: &mut http::HeaderMap, sse: bool) {
    let mut drop: Vec<HeaderName> = h
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|k| sse || *k != CONTENT_LENGTH)
        .collect();
    drop.extend(
        h.keys()
            .filter(|k| is_hop_by_hop(k) && (sse || *k != CONTENT_LENGTH))
            .cloned(),
    );
    for k in drop {
        h.remove(k);
    }
}

/// Rewrites the upstream's `Location` and `Content-Location` headers so that they never name
/// the upstream (see [`path::client_location`]); one with nothing safe left is dropped.
fn client_locations(h: &mut http::HeaderMap, prefix: &str) {
    for name in [http::header::LOCATION, http::header::CONTENT_LOCATION] {
        let Some(v) = h.get(&name) else { continue };
        let fixed = v
            .to_str()
            .ok()
            .and_then(|v| path::client_location(v, prefix))
            .and_then(|v| HeaderValue::from_str(&v).ok());
        match fixed {
            Some(v) => {
                h.insert(name, v);
            }
            None => {
                h.remove(name);
            }
        }
    }
}

/// The connections of the upstream at `base` (`http://host[:port]`).
fn conns_for(base: &str, connect_timeout: Duration) -> Result<Arc<Conns>, String> {
    let uri: Uri = base
        .parse()
        .map_err(|e| format!("upstream base URL `{base}`: {e}"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| format!("upstream base URL `{base}` has no host"))?;
    Conns::new(authority.as_str(), connect_timeout).map(Arc::new)
}

/// A running gateway.
#[derive(Debug)]
pub struct GatewayHandle {
    /// Bound listen address.
    pub addr: SocketAddr,
    /// Client connections served at once (`max_connections`, or derived from the fd limit).
    pub max_connections: usize,
    /// The shared state (metrics, configuration).
    pub gateway: Arc<Gateway>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl GatewayHandle {
    /// Stops accepting and closes idle connections at once; lets open requests finish for up
    /// to `timeouts.drain`; then ends the streams still open with an SSE error event (counted
    /// `timeout`), gives them [`DRAIN_TAIL`] to write it, and drops what is left.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        let drain = self.gateway.cfg.timeouts.drain;
        if tokio::time::timeout(drain + DRAIN_TAIL + Duration::from_secs(1), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// Binds `cfg.listen` and serves on the current tokio runtime; returns at once. Raises the
/// process's soft fd limit to its hard limit first ([`listen::raise_fd_limit`]).
///
/// # Errors
/// The listener cannot be bound (the address is in the message).
pub async fn start(cfg: GatewayConfig) -> std::io::Result<GatewayHandle> {
    let listener = TcpListener::bind(cfg.listen).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", cfg.listen))
    })?;
    let addr = listener.local_addr()?;
    let fd_limit = listen::raise_fd_limit();
    let max_connections = cfg
        .max_connections
        .unwrap_or_else(|| listen::default_max_connections(fd_limit))
        .min(Semaphore::MAX_PERMITS);
    let gateway = Arc::new(Gateway::new(cfg));
    let (stop, stop_rx) = watch::channel(false);
    let gw = gateway.clone();
    let cap = Arc::new(Semaphore::new(max_connections));
    let task = tokio::spawn(accept_loop(listener, gw, cap, stop_rx));
    Ok(GatewayHandle {
        addr,
        max_connections,
        gateway,
        stop,
        task,
    })
}

/// Resolves once the stop flag is set (the borrow of the flag ends before it resolves).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn accept_loop(
    listener: TcpListener,
    gw: Arc<Gateway>,
    cap: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let header_read = gw.cfg.timeouts.header_read;
    let drain = gw.cfg.timeouts.drain;
    let mut conns = tokio::task::JoinSet::new();
    let mut backoff = listen::Backoff::default();
    loop {
        // Room under the connection cap first: past it, clients wait in the accept queue.
        let permit = tokio::select! {
            p = cap.clone().acquire_owned() => p.expect("the connection cap is never closed"),
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => {
                    backoff.reset();
                    tcp
                }
                Err(e) if listen::is_connection_error(&e) => continue,
                Err(e) => {
                    let (pause, first) = backoff.fail();
                    if first {
                        eprintln!(
                            "headroom gateway: accept failed: {e}; retrying with back-off up to {} s ({} connections open; raise the fd limit or lower max_connections)",
                            listen::Backoff::MAX.as_secs(),
                            conns.len()
                        );
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = stopped(&mut stop) => break,
                    }
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let _ = tcp.set_nodelay(true);
        let gw = gw.clone();
        let mut stop = stop.clone();
        conns.spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(gw.handle(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read)
                .serve_connection(TokioIo::new(tcp), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stopped(&mut stop) => {
                    // Idle keep-alive connections close now; one with a request in
                    // flight closes once its response is done.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(drain + DRAIN_TAIL, conn).await;
                }
            }
        });
    }
    drop(listener);
    let ended = Instant::now() + drain;
    loop {
        match tokio::time::timeout_at(ended.into(), conns.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(_) => break,
        }
    }
    gw.drain.end();
    let _ = tokio::time::timeout(DRAIN_TAIL, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_check() {
        for ok in ["Bearer sk-1", "bearer sk-1", "BEARER sk-1"] {
            assert!(
                authorized(Some(&HeaderValue::from_static(ok)), "sk-1"),
                "{ok}"
            );
        }
        for bad in [
            "Bearer sk-2",
            "Bearer sk-1x",
            "sk-1",
            "Basic sk-1",
            "Bearer ",
        ] {
            assert!(
                !authorized(Some(&HeaderValue::from_static(bad)), "sk-1"),
                "{bad}"
            );
        }
        assert!(!authorized(None, "sk-1"));
    }

    #[test]
    fn upstream_statuses_split_server_faults_from_client_faults() {
        use GatewayOutcome::{InvalidRequest as Inv, UpstreamError as Up};
        // (status, outcome without upstream_api_key, outcome with it), from the doc's table.
        let cases = [
            (200, None, None),
            (204, None, None),
            (500, Some(Up), Some(Up)),
            (502, Some(Up), Some(Up)),
            (503, Some(Up), Some(Up)),
            (429, Some(Up), Some(Up)),
            (408, Some(Up), Some(Up)),
            (302, Some(Up), Some(Up)),
            (400, Some(Inv), Some(Inv)),
            (404, Some(Inv), Some(Inv)),
            (413, Some(Inv), Some(Inv)),
            (422, Some(Inv), Some(Inv)),
            (401, Some(Inv), Some(Up)),
            (403, Some(Inv), Some(Up)),
        ];
        for (code, plain, keyed) in cases {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(status_outcome(s, false), plain, "{code}");
            assert_eq!(
                status_outcome(s, true),
                keyed,
                "{code} with upstream_api_key"
            );
        }
    }

    #[test]
    fn headers_a_response_names_in_connection_are_not_forwarded() {
        let mut h = http::HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Secret ,x-other"),
        );
        h.append("connection", HeaderValue::from_static("close"));
        h.insert("x-secret", HeaderValue::from_static("internal"));
        h.insert("x-other", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-kept", HeaderValue::from_static("2"));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("10"));
        strip_hop_by_hop(&mut h, false);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "x-kept"]);
        h.insert("connection", HeaderValue::from_static("content-length"));
        strip_hop_by_hop(&mut h, true);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn paths() {
        assert!(passthrough_path("/v1/models"));
        assert!(passthrough_path("/health"));
        assert!(!passthrough_path("/reset_prefix_cache"));
        assert!(!passthrough_path("/v1/load_lora_adapter"));
        assert!(!passthrough_path("/v1/unload_lora_adapter"));
        assert!(!passthrough_path("/v1"));
    }
}
