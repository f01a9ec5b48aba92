//! Rejections: every answer the gateway writes itself instead of forwarding the upstream's, as
//! one type, and the one place that counts and answers it.
//!
//! Each stage of the pipeline ([`crate::proxy`]) that can refuse a request returns
//! `Result<_, Rejection>`; [`rescue`] turns the rejection into its count and its response, as
//! linkerd2-proxy's error-rescue layer turns a stack's errors into responses. No stage writes an
//! error response or counts a refusal itself, so none can answer without counting, and a new
//! kind of rejection cannot be added without saying, in [`Rejection::entry`], how it is counted.
//!
//! | rejection | status | counted as |
//! |---|---|---|
//! | [`BadPath`](Rejection::BadPath) | 400 | `invalid_requests_total{reason="bad_path"}` |
//! | [`NotFound`](Rejection::NotFound) | 404 | `invalid_requests_total{reason="not_found"}` |
//! | [`Unauthorized`](Rejection::Unauthorized) | 401 | `invalid_requests_total{reason="unauthorized"}` |
//! | [`BodyTooLarge`](Rejection::BodyTooLarge) | 413 | `invalid_requests_total{reason="body_too_large"}` |
//! | [`BodyTimeout`](Rejection::BodyTimeout) | 408 | `invalid_requests_total{reason="body_timeout"}` |
//! | [`BodyUnreadable`](Rejection::BodyUnreadable) | 400 | `invalid_requests_total{reason="body_unreadable"}` |
//! | [`MalformedJson`](Rejection::MalformedJson) | 400 | `invalid_requests_total{reason="malformed_json"}` |
//! | [`TooWide`](Rejection::TooWide) | 400 | outcome `invalid_request` |
//! | [`QueueFull`](Rejection::QueueFull) | 429, `Retry-After` | outcome `rejected` |
//! | [`QueueTimeout`](Rejection::QueueTimeout) | 503, `Retry-After` | outcome `rejected` |
//! | [`NoPool`](Rejection::NoPool) | 502 | outcome `upstream_error` |
//! | [`Unforwardable`](Rejection::Unforwardable) | 400 | outcome `invalid_request` |
//! | [`Unreachable`](Rejection::Unreachable) | 502 | outcome `upstream_error` |
//! | [`UpstreamFailed`](Rejection::UpstreamFailed) | 502 | outcome `upstream_error` |
//! | [`HeadTimeout`](Rejection::HeadTimeout) | 504 | outcome `timeout` |
//!
//! A `reason` is counted in `headroom_gateway_invalid_requests_total`: those rejections come
//! before classification, so there is no class to count them in. An `outcome` is counted in the
//! class's `headroom_gateway_requests_total`, or, on an unmeasured route (`/v1/models`,
//! `/health`, …), which has no class, in `headroom_gateway_passthrough_errors_total`.
//!
//! Not rejections, because the gateway writes no answer of its own for them: a client that
//! hangs up before the upstream's response head (`client_cancel`, counted by the handler's
//! guard in [`crate::proxy`]), and whatever ends a response after its head (counted by the
//! measured body, [`crate::body`]: idle and total timeouts, a broken stream, the end of a
//! drain).

use crate::admit::Refusal;
use crate::body::ProxyBody;
use crate::error::error_json;
use crate::metrics::{ClassMetrics, GatewayOutcome, InvalidReason, Metrics};
use crate::path::PathError;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use std::time::Duration;

/// Why the gateway answered a request itself; see the module doc for each one's status and
/// count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The path is not canonical ([`crate::path`]).
    BadPath(PathError),
    /// A path the gateway does not forward (the path, percent-encoded).
    NotFound(String),
    /// A `/v1/*` request without the gateway's API key.
    Unauthorized,
    /// The body is over `max_body_bytes`, by `Content-Length` or as it arrived.
    BodyTooLarge {
        /// `max_body_bytes`.
        limit: usize,
    },
    /// The body did not arrive within `timeouts.body_read`.
    BodyTimeout {
        /// `timeouts.body_read`.
        within: Duration,
    },
    /// The body could not be read: a broken chunked encoding, or the connection failed while it
    /// arrived (hyper's error, as text).
    BodyUnreadable(String),
    /// A measured route's body is not a JSON object (where the parser stopped, and why).
    MalformedJson(String),
    /// The request runs more sequences than the class's whole concurrency limit, so it could
    /// never be admitted.
    TooWide {
        /// The class.
        class: String,
        /// Its limit.
        limit: usize,
        /// The sequences asked for (prompts × `n`).
        sequences: u64,
    },
    /// The class's wait queue was full.
    QueueFull {
        /// The class.
        class: String,
        /// `Retry-After`, seconds.
        retry_after_s: u64,
    },
    /// The request waited `queue_timeout` without a slot.
    QueueTimeout {
        /// The class.
        class: String,
        /// `Retry-After`, seconds.
        retry_after_s: u64,
        /// How long it waited.
        waited: Duration,
    },
    /// The class's pool is not among the gateway's (a configuration built without
    /// [`crate::GatewayConfig::resolve`]'s check).
    NoPool {
        /// The pool's name.
        pool: String,
    },
    /// The upstream's path prefix and the request's path and query do not form a URI.
    Unforwardable,
    /// No member of the pool accepted a connection (the request reached no engine).
    Unreachable {
        /// The pool's name.
        pool: String,
        /// Why, one entry per member (`upstream K of N in pool …: …`, never an address).
        reasons: Vec<String>,
    },
    /// The upstream connection failed after the request was handed to it.
    UpstreamFailed {
        /// Which member (`upstream K of N in pool …`).
        who: String,
        /// The connection's error, as text.
        error: String,
    },
    /// No response head within the deadline (`timeouts.first_byte` for a stream, the rest of
    /// `timeouts.total` otherwise).
    HeadTimeout {
        /// Which member (`upstream K of N in pool …`).
        who: String,
        /// The deadline it had.
        within: Duration,
    },
}

/// Where a rejection is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// `headroom_gateway_invalid_requests_total{reason}`.
    Invalid(InvalidReason),
    /// The `outcome` of the class, or of the unmeasured routes.
    Outcome(GatewayOutcome),
}

/// One row of the module doc's table.
struct Entry {
    counted: Counted,
    status: StatusCode,
    message: String,
    retry_after_s: Option<u64>,
}

impl Rejection {
    /// The rejection of an admission [`Refusal`] by class `class`.
    pub fn refused(r: Refusal, class: &str) -> Rejection {
        let class = class.to_string();
        match r {
            Refusal::TooWide { limit, sequences } => Rejection::TooWide {
                class,
                limit,
                sequences,
            },
            Refusal::QueueFull { retry_after_s } => Rejection::QueueFull {
                class,
                retry_after_s,
            },
            Refusal::QueueTimeout {
                retry_after_s,
                waited,
            } => Rejection::QueueTimeout {
                class,
                retry_after_s,
                waited,
            },
        }
    }

    /// The table: how the rejection is counted and answered.
    fn entry(self) -> Entry {
        use Counted::{Invalid, Outcome};
        let row = |counted, status, message: String| Entry {
            counted,
            status,
            message,
            retry_after_s: None,
        };
        match self {
            Rejection::BadPath(e) => row(
                Invalid(InvalidReason::BadPath),
                StatusCode::BAD_REQUEST,
                e.message().to_string(),
            ),
            Rejection::NotFound(path) => row(
                Invalid(InvalidReason::NotFound),
                StatusCode::NOT_FOUND,
                format!("no route {path} at the gateway"),
            ),
            Rejection::Unauthorized => row(
                Invalid(InvalidReason::Unauthorized),
                StatusCode::UNAUTHORIZED,
                "missing or invalid API key; send `Authorization: Bearer <key>`".into(),
            ),
            Rejection::BodyTooLarge { limit } => row(
                Invalid(InvalidReason::BodyTooLarge),
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than the gateway's limit of {limit} bytes"),
            ),
            Rejection::BodyTimeout { within } => row(
                Invalid(InvalidReason::BodyTimeout),
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {:.3} s",
                    within.as_secs_f64()
                ),
            ),
            Rejection::BodyUnreadable(e) => row(
                Invalid(InvalidReason::BodyUnreadable),
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            ),
            Rejection::MalformedJson(e) => row(
                Invalid(InvalidReason::MalformedJson),
                StatusCode::BAD_REQUEST,
                e,
            ),
            // The client's request can never fit: its fault, not the budget's.
            Rejection::TooWide {
                class,
                limit,
                sequences,
            } => row(
                Outcome(GatewayOutcome::InvalidRequest),
                StatusCode::BAD_REQUEST,
                format!(
                    "the request runs {sequences} sequences (prompts × n); class `{class}` admits at most {limit} at once: send fewer prompts or a smaller n per request"
                ),
            ),
            Rejection::QueueFull {
                class,
                retry_after_s,
            } => Entry {
                retry_after_s: Some(retry_after_s),
                ..row(
                    Outcome(GatewayOutcome::Rejected),
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "class `{class}` is at its concurrency limit and its wait queue is full"
                    ),
                )
            },
            Rejection::QueueTimeout {
                class,
                retry_after_s,
                waited,
            } => Entry {
                retry_after_s: Some(retry_after_s),
                ..row(
                    Outcome(GatewayOutcome::Rejected),
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "class `{class}` had no free slot within {:.3} s",
                        waited.as_secs_f64()
                    ),
                )
            },
            Rejection::NoPool { pool } => row(
                Outcome(GatewayOutcome::UpstreamError),
                StatusCode::BAD_GATEWAY,
                format!("no upstream pool `{pool}`"),
            ),
            Rejection::Unforwardable => row(
                Outcome(GatewayOutcome::InvalidRequest),
                StatusCode::BAD_REQUEST,
                "the request URI cannot be forwarded".into(),
            ),
            Rejection::Unreachable { pool, reasons } => row(
                Outcome(GatewayOutcome::UpstreamError),
                StatusCode::BAD_GATEWAY,
                format!(
                    "no upstream of pool `{pool}` could be reached: {}",
                    reasons.join("; ")
                ),
            ),
            Rejection::UpstreamFailed { who, error } => row(
                Outcome(GatewayOutcome::UpstreamError),
                StatusCode::BAD_GATEWAY,
                format!("{who} failed: {error}"),
            ),
            Rejection::HeadTimeout { who, within } => row(
                Outcome(GatewayOutcome::Timeout),
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "{who} sent no response head within {:.3} s",
                    within.as_secs_f64()
                ),
            ),
        }
    }
}

/// Counts `r` and answers it: a `reason` in `metrics`' invalid-request counter, an `outcome` in
/// `class`'s counter (`None`: an unmeasured route, counted in the passthrough errors); the
/// response is the OpenAI-shaped error ([`error_json`]) with the rejection's status, and
/// `Retry-After` for the admission refusals that have one.
pub fn rescue(
    r: Rejection,
    metrics: &Metrics,
    class: Option<&ClassMetrics>,
) -> Response<ProxyBody> {
    let e = r.entry();
    match (e.counted, class) {
        (Counted::Invalid(reason), _) => metrics.invalid(reason),
        (Counted::Outcome(o), Some(m)) => m.outcome(o),
        (Counted::Outcome(o), None) => metrics.passthrough_error(o),
    }
    let mut resp = Response::new(ProxyBody::full(error_json(e.status, &e.message)));
    *resp.status_mut() = e.status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(s) = e.retry_after_s {
        h.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}
