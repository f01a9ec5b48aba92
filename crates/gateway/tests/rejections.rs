//! Every answer the gateway writes itself is counted: one real request per kind of
//! [`Rejection`], each through a gateway on loopback, asserting the status, the OpenAI-shaped
//! error body (and `Retry-After` where it applies) and that, of all the gateway's counters on
//! `/metrics`, exactly one went up, by exactly one.
//!
//! The kinds are listed once, in the `kinds!` invocation, which makes both the test functions
//! and the [`Kind`] enum; [`kind_of`] matches every [`Rejection`] variant, so a new variant does
//! not compile until it has a kind here, and [`scenario`] matches every kind, so a kind does not
//! compile until it has a scenario. The expected statuses and series are written out by hand
//! from the gateway's documentation (the table in `headroom_gateway::rescue`), not read from
//! the code under test.

mod common;

use common::*;
use headroom_gateway::GatewayConfig;
use headroom_gateway::rescue::Rejection;
use http::StatusCode;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Defines [`Kind`] and one test per kind, from one list, so neither can miss an entry.
macro_rules! kinds {
    ($($kind:ident => $test:ident),* $(,)?) => {
        /// One per [`Rejection`] variant.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Kind { $($kind),* }

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                check(Kind::$kind).await;
            }
        )*
    };
}

kinds! {
    BadPath => a_non_canonical_path_is_400_counted_bad_path,
    NotFound => an_unknown_path_is_404_counted_not_found,
    Unauthorized => a_missing_api_key_is_401_counted_unauthorized,
    BodyTooLarge => a_chunked_body_over_the_limit_is_413_counted_body_too_large,
    BodyTimeout => a_body_too_slow_is_408_counted_body_timeout,
    BodyUnreadable => a_broken_chunked_body_is_400_counted_body_unreadable,
    MalformedJson => a_body_that_is_not_json_is_400_counted_malformed_json,
    TooWide => a_request_wider_than_the_limit_is_400_counted_invalid_request,
    QueueFull => a_full_queue_is_429_counted_rejected,
    QueueTimeout => a_queue_timeout_is_503_counted_rejected,
    NoPool => a_class_without_its_pool_is_502_counted_upstream_error,
    Unforwardable => an_unforwardable_uri_is_400_counted_invalid_request,
    Unreachable => an_unreachable_pool_is_502_counted_upstream_error,
    UpstreamFailed => an_upstream_dropping_the_request_is_502_counted_upstream_error,
    HeadTimeout => no_head_within_first_byte_is_504_counted_timeout,
}

/// The compile-time guard: every [`Rejection`] variant has a [`Kind`], hence a test.
#[allow(dead_code)]
fn kind_of(r: &Rejection) -> Kind {
    match r {
        Rejection::BadPath(_) => Kind::BadPath,
        Rejection::NotFound(_) => Kind::NotFound,
        Rejection::Unauthorized => Kind::Unauthorized,
        Rejection::BodyTooLarge { .. } => Kind::BodyTooLarge,
        Rejection::BodyTimeout { .. } => Kind::BodyTimeout,
        Rejection::BodyUnreadable(_) => Kind::BodyUnreadable,
        Rejection::MalformedJson(_) => Kind::MalformedJson,
        Rejection::TooWide { .. } => Kind::TooWide,
        Rejection::QueueFull { .. } => Kind::QueueFull,
        Rejection::QueueTimeout { .. } => Kind::QueueTimeout,
        Rejection::NoPool { .. } => Kind::NoPool,
        Rejection::Unforwardable => Kind::Unforwardable,
        Rejection::Unreachable { .. } => Kind::Unreachable,
        Rejection::UpstreamFailed { .. } => Kind::UpstreamFailed,
        Rejection::HeadTimeout { .. } => Kind::HeadTimeout,
    }
}

/// The upstream behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Up {
    /// Refuses connections.
    Dead,
    /// Accepts connections and reads, never answers.
    Silent,
    /// Reads the request, then closes the connection without an answer.
    Hangup,
}

/// What the client sends.
enum Ask {
    /// A request through hyper's client: method, path, body, extra headers.
    Call(
        &'static str,
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ),
    /// Raw bytes on a new connection, which stays open until the answer is read.
    Raw(&'static str),
}

struct Scenario {
    /// `gateway.yaml`.
    yaml: &'static str,
    up: Up,
    /// A change to the resolved configuration (for states `gateway.yaml` cannot express).
    edit: fn(&mut GatewayConfig),
    /// A streaming request holding the only admission slot while the request is sent.
    hold: bool,
    send: Ask,
    status: u16,
    /// The error body's `type` (vLLM's names) and a part of its message.
    error_type: &'static str,
    message_has: &'static str,
    retry_after: Option<&'static str>,
    /// The one counter series that goes up by one.
    counter: &'static str,
}

const STREAM: &str = r#"{"prompt":"p","max_tokens":4,"stream":true}"#;
const DEFAULT_REJECTED: &str =
    r#"headroom_gateway_requests_total{class="default",tenant="other",outcome="rejected"}"#;
const DEFAULT_INVALID: &str =
    r#"headroom_gateway_requests_total{class="default",tenant="other",outcome="invalid_request"}"#;
const DEFAULT_UPSTREAM_ERROR: &str =
    r#"headroom_gateway_requests_total{class="default",tenant="other",outcome="upstream_error"}"#;

fn no_edit(_: &mut GatewayConfig) {}

fn scenario(k: Kind) -> Scenario {
    let base = Scenario {
        yaml: "{}",
        up: Up::Dead,
        edit: no_edit,
        hold: false,
        send: Ask::Call("POST", "/v1/completions", STREAM, &[]),
        status: 0,
        error_type: "",
        message_has: "",
        retry_after: None,
        counter: "",
    };
    match k {
        Kind::BadPath => Scenario {
            send: Ask::Call("POST", "/v1/chat/%2e%2e/completions", STREAM, &[]),
            status: 400,
            error_type: "BadRequestError",
            message_has: "`..` segment",
            counter: r#"headroom_gateway_invalid_requests_total{reason="bad_path"}"#,
            ..base
        },
        Kind::NotFound => Scenario {
            send: Ask::Call("POST", "/reset_prefix_cache", "", &[]),
            status: 404,
            error_type: "NotFoundError",
            message_has: "no route /reset_prefix_cache",
            counter: r#"headroom_gateway_invalid_requests_total{reason="not_found"}"#,
            ..base
        },
        Kind::Unauthorized => Scenario {
            edit: |c| c.api_key = Some("sk-rejections".into()),
            send: Ask::Call(
                "POST",
                "/v1/completions",
                STREAM,
                &[("authorization", "Bearer sk-wrong")],
            ),
            status: 401,
            error_type: "AuthenticationError",
            message_has: "API key",
            counter: r#"headroom_gateway_invalid_requests_total{reason="unauthorized"}"#,
            ..base
        },
        // Chunked, so the limit is found while reading (by `Content-Length` it is found before;
        // `failures.rs` counts that one).
        Kind::BodyTooLarge => Scenario {
            yaml: "max_body_bytes: 100\n",
            send: Ask::Raw(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n50\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n50\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n0\r\n\r\n",
            ),
            status: 413,
            error_type: "PayloadTooLargeError",
            message_has: "limit of 100 bytes",
            counter: r#"headroom_gateway_invalid_requests_total{reason="body_too_large"}"#,
            ..base
        },
        // The head promises 100 bytes, 10 arrive, then nothing.
        Kind::BodyTimeout => Scenario {
            yaml: "timeouts: {body_read: 300ms}\n",
            send: Ask::Raw(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"prompt\":",
            ),
            status: 408,
            error_type: "RequestTimeoutError",
            message_has: "within 0.300 s",
            counter: r#"headroom_gateway_invalid_requests_total{reason="body_timeout"}"#,
            ..base
        },
        // `zz` is no chunk size. This 400 was once answered without being counted.
        Kind::BodyUnreadable => Scenario {
            send: Ask::Raw(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            ),
            status: 400,
            error_type: "BadRequestError",
            message_has: "could not be read",
            counter: r#"headroom_gateway_invalid_requests_total{reason="body_unreadable"}"#,
            ..base
        },
        Kind::MalformedJson => Scenario {
            send: Ask::Call("POST", "/v1/completions", r#"{"prompt": "x""#, &[]),
            status: 400,
            error_type: "BadRequestError",
            message_has: "not valid JSON",
            counter: r#"headroom_gateway_invalid_requests_total{reason="malformed_json"}"#,
            ..base
        },
        // Two sequences (`n: 2`) against a limit of one.
        Kind::TooWide => Scenario {
            yaml: "default_class: {name: default, concurrency: {limit: 1, queue: 1}}\n",
            send: Ask::Call("POST", "/v1/completions", r#"{"prompt":"p","n":2}"#, &[]),
            status: 400,
            error_type: "BadRequestError",
            message_has: "admits at most 1 at once",
            counter: DEFAULT_INVALID,
            ..base
        },
        Kind::QueueFull => Scenario {
            yaml: "default_class: {name: default, concurrency: {limit: 1, queue: 0, retry_after: 3s}}\ntimeouts: {drain: 1s}\n",
            up: Up::Silent,
            hold: true,
            status: 429,
            error_type: "RateLimitError",
            message_has: "wait queue is full",
            retry_after: Some("3"),
            counter: DEFAULT_REJECTED,
            ..base
        },
        Kind::QueueTimeout => Scenario {
            yaml: "default_class: {name: default, concurrency: {limit: 1, queue: 1, queue_timeout: 200ms, retry_after: 4s}}\ntimeouts: {drain: 1s}\n",
            up: Up::Silent,
            hold: true,
            status: 503,
            error_type: "ServiceUnavailableError",
            message_has: "no free slot within",
            retry_after: Some("4"),
            counter: DEFAULT_REJECTED,
            ..base
        },
        // Only a configuration built without `resolve`'s check can name a pool that is not there.
        Kind::NoPool => Scenario {
            edit: |c| {
                for class in &mut c.classes {
                    class.pool = "gone".into();
                }
            },
            status: 502,
            error_type: "BadGatewayError",
            message_has: "no upstream pool `gone`",
            counter: DEFAULT_UPSTREAM_ERROR,
            ..base
        },
        // A prefix with a space (which `resolve` would refuse) makes no URI.
        Kind::Unforwardable => Scenario {
            edit: |c| {
                for up in c.pools.values_mut().flatten() {
                    up.prefix = "/a b".into();
                }
            },
            status: 400,
            error_type: "BadRequestError",
            message_has: "cannot be forwarded",
            counter: DEFAULT_INVALID,
            ..base
        },
        Kind::Unreachable => Scenario {
            status: 502,
            error_type: "BadGatewayError",
            message_has: "no upstream of pool `default` could be reached",
            counter: DEFAULT_UPSTREAM_ERROR,
            ..base
        },
        Kind::UpstreamFailed => Scenario {
            up: Up::Hangup,
            status: 502,
            error_type: "BadGatewayError",
            message_has: "upstream 1 of 1 in pool `default` failed",
            counter: DEFAULT_UPSTREAM_ERROR,
            ..base
        },
        Kind::HeadTimeout => Scenario {
            yaml: "timeouts: {first_byte: 300ms, drain: 1s}\n",
            up: Up::Silent,
            status: 504,
            error_type: "GatewayTimeoutError",
            message_has: "no response head within 0.300 s",
            counter: r#"headroom_gateway_requests_total{class="default",tenant="other",outcome="timeout"}"#,
            ..base
        },
    }
}

/// Starts the upstream `up`; `None` is kept alive as long as the address must refuse.
async fn upstream(
    up: Up,
) -> (
    SocketAddr,
    Option<tokio::net::TcpSocket>,
    Option<JoinHandle<()>>,
) {
    if up == Up::Dead {
        let (held, port) = headroom_testkit::refusing_port();
        return (SocketAddr::from(([127, 0, 0, 1], port)), Some(held), None);
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    if up == Up::Hangup && buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        // Late enough that the request counts as sent, so it is not retried.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        return;
                    }
                }
            });
        }
    });
    (addr, None, Some(task))
}

/// Writes `raw` on a new connection and reads one answer (head and `content-length` body;
/// 10 s bound), keeping the connection open meanwhile.
async fn raw(addr: SocketAddr, raw: &str) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    return (
                        head,
                        String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned(),
                    );
                }
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => panic!(
                    "connection closed before a whole answer: {:?}",
                    String::from_utf8_lossy(&buf)
                ),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let (head, body) = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    let mut headers = http::HeaderMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':')
            && let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.trim().as_bytes()),
                http::HeaderValue::from_str(v.trim()),
            )
        {
            headers.append(k, v);
        }
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// Every counter sample of the gateway (`headroom_gateway_*_total`), series → value.
fn counters(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with("headroom_gateway_"))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            series
                .split('{')
                .next()
                .is_some_and(|f| f.ends_with("_total"))
        })
        .filter_map(|(series, v)| Some((series.to_string(), v.parse().ok()?)))
        .collect()
}

/// The counters that changed between two scrapes, with how much.
fn changed(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|(s, v)| {
            let d = v - before.get(s).copied().unwrap_or(0.0);
            (d != 0.0).then(|| (s.clone(), d))
        })
        .collect()
}

/// Waits (at most 5 s) until `series` reads `want`.
async fn wait_for(addr: SocketAddr, series: &str, want: f64) {
    let t0 = std::time::Instant::now();
    while value(&scrape(addr).await, series) != Some(want) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{series} never reached {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn check(kind: Kind) {
    let sc = scenario(kind);
    let (up, _held, up_task) = upstream(sc.up).await;
    let mut cfg = config(sc.yaml, &[url(up)], None);
    (sc.edit)(&mut cfg);
    let gw = headroom_gateway::start(cfg).await.expect("gateway starts");
    let holder = sc.hold.then(|| {
        let addr = gw.addr;
        tokio::spawn(async move { call(addr, "POST", "/v1/completions", STREAM, &[]).await })
    });
    if holder.is_some() {
        wait_for(
            gw.addr,
            r#"headroom_gateway_in_flight{class="default"}"#,
            1.0,
        )
        .await;
    }
    let before = counters(&scrape(gw.addr).await);
    let a = match sc.send {
        Ask::Call(method, path, body, headers) => call(gw.addr, method, path, body, headers).await,
        Ask::Raw(bytes) => raw(gw.addr, bytes).await,
    };
    let after = counters(&scrape(gw.addr).await);

    assert_eq!(a.status.as_u16(), sc.status, "{kind:?}: {}", a.body);
    assert_eq!(
        a.headers.get("content-type").map(|v| v.to_str().unwrap()),
        Some("application/json"),
        "{kind:?}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{kind:?}: {e}: {}", a.body));
    let e = &v["error"];
    assert_eq!(e["code"], sc.status, "{kind:?}: {}", a.body);
    assert_eq!(e["type"], sc.error_type, "{kind:?}: {}", a.body);
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains(sc.message_has)),
        "{kind:?}: {e}"
    );
    assert_eq!(
        a.headers.get("retry-after").map(|v| v.to_str().unwrap()),
        sc.retry_after,
        "{kind:?}"
    );
    assert!(a.headers.contains_key("x-request-id"), "{kind:?}");
    assert_eq!(
        changed(&before, &after),
        [(sc.counter.to_string(), 1.0)],
        "{kind:?}: exactly one counter, by one"
    );

    if let Some(h) = holder {
        h.abort();
    }
    gw.shutdown().await;
    if let Some(t) = up_task {
        t.abort();
    }
}

/// An unmeasured route has no class: its failures are counted in
/// `headroom_gateway_passthrough_errors_total`, by outcome.
#[tokio::test]
async fn an_unmeasured_route_that_fails_is_counted_in_passthrough_errors() {
    let (up, _held, _) = upstream(Up::Dead).await;
    let gw = gateway("{}", &[url(up)], None).await;
    let before = counters(&scrape(gw.addr).await);
    assert_eq!(
        before.get(r#"headroom_gateway_passthrough_errors_total{outcome="upstream_error"}"#),
        Some(&0.0),
        "exported at zero from the first scrape"
    );
    let a = call(gw.addr, "GET", "/v1/models", "", &[]).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY, "{}", a.body);
    let after = counters(&scrape(gw.addr).await);
    assert_eq!(
        changed(&before, &after),
        [(
            r#"headroom_gateway_passthrough_errors_total{outcome="upstream_error"}"#.to_string(),
            1.0
        )]
    );
    gw.shutdown().await;
}
