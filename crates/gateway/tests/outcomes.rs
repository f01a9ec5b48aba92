//! How each measured request ends, counted exactly: streaming and non-streaming responses ×
//! success / upstream 500 / upstream 404 / client cancel mid-response, over a keep-alive
//! connection and over `Connection: close`, each against the engine twin on loopback.
//!
//! Every scenario asserts the whole `outcome` row of the class (each label's count, zeros
//! included), the E2E count, and that the admission slot came back. The expected counts are the
//! scenario's own bookkeeping: each request sent is one outcome.
//!
//! The regression these guard: a body with a known length (every non-streaming answer, and
//! every upstream error, which the twin and vLLM send as a JSON body with `content-length`) is
//! never polled to its end by hyper — it stops once it has written `content-length` bytes — so
//! an outcome decided only "at the end" fell to the drop path and read `client_cancel`.

mod common;

use bytes::Bytes;
use common::*;
use headroom_gateway::GatewayOutcome;
use headroom_sim::server::Faults;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Gateway configuration of every scenario: one limited class, so the slot's release shows in
/// `headroom_gateway_in_flight`.
const GW: &str = "default_class: {name: default, concurrency: {limit: 8, queue: 8}}\n";

/// One client connection (hyper's HTTP/1.1 client over one TCP stream), so keep-alive is
/// under the test's control.
struct Conn {
    send: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Conn { send, task }
    }

    /// Hangs up: the TCP stream closes (the gateway sees EOF).
    fn hang_up(self) {
        drop(self.send);
        self.task.abort();
    }
}

/// Whether a request asks for an SSE stream or one JSON body.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Stream,
    Whole,
}

fn body(mode: Mode, max_tokens: u32, model: Option<&str>) -> String {
    let mut v = serde_json::json!({
        "prompt": "how do gateways end requests",
        "max_tokens": max_tokens,
        "ignore_eos": true,
    });
    if mode == Mode::Stream {
        v["stream"] = true.into();
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    if let Some(m) = model {
        v["model"] = m.into();
    }
    v.to_string()
}

fn request(addr: SocketAddr, body: String, keep_alive: bool) -> Request<Full<Bytes>> {
    let mut b = Request::post("/v1/completions")
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if !keep_alive {
        b = b.header("connection", "close");
    }
    b.body(Full::new(Bytes::from(body))).unwrap()
}

/// Sends on `conn` and reads the whole answer (10 s bound): status, body, seconds taken.
async fn exchange(conn: &mut Conn, req: Request<Full<Bytes>>) -> (StatusCode, String, f64) {
    let t0 = Instant::now();
    let fut = async {
        conn.send.ready().await.unwrap();
        let resp = conn.send.send_request(req).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let (s, b) = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("answer within 10 s");
    (s, b, t0.elapsed().as_secs_f64())
}

/// The class's full outcome row, in [`GatewayOutcome::ALL`] order.
fn outcomes(text: &str) -> Vec<(&'static str, f64)> {
    GatewayOutcome::ALL
        .iter()
        .map(|o| {
            let series = format!(
                "headroom_gateway_requests_total{{class=\"default\",tenant=\"other\",outcome=\"{}\"}}",
                o.label()
            );
            (o.label(), value(text, &series).unwrap_or(-1.0))
        })
        .collect()
}

/// The outcome row with `want` (label, count) and zeros elsewhere.
fn row(want: &[(&str, f64)]) -> Vec<(&'static str, f64)> {
    GatewayOutcome::ALL
        .iter()
        .map(|o| {
            let n = want
                .iter()
                .find(|(l, _)| *l == o.label())
                .map_or(0.0, |w| w.1);
            (o.label(), n)
        })
        .collect()
}

fn series(text: &str, family: &str, what: &str) -> f64 {
    value(
        text,
        &format!("headroom_gateway_{family}_seconds_{what}{{class=\"default\",tenant=\"other\"}}"),
    )
    .unwrap_or(0.0)
}

fn in_flight(text: &str) -> Option<f64> {
    value(text, "headroom_gateway_in_flight{class=\"default\"}")
}

/// Scrapes until `in_flight` is 0 (at most 5 s), then returns that scrape.
async fn settled(addr: SocketAddr) -> String {
    let t0 = Instant::now();
    loop {
        let text = scrape(addr).await;
        if in_flight(&text) == Some(0.0) || t0.elapsed() > Duration::from_secs(5) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends one request of each mode on one keep-alive connection (twice, interleaved), then one
/// of each on its own `Connection: close` connection; checks each status with `check` and
/// returns the client's elapsed seconds of every request in order (stream, whole, whole,
/// stream, stream-close, whole-close) and the text scraped *while the keep-alive connection is
/// still open*.
async fn six_requests(
    addr: SocketAddr,
    model: Option<&str>,
    check: impl Fn(Mode, StatusCode, &str),
) -> (Vec<f64>, String) {
    let mut took = Vec::new();
    let mut ka = Conn::open(addr).await;
    for mode in [Mode::Stream, Mode::Whole, Mode::Whole, Mode::Stream] {
        let (s, b, t) = exchange(&mut ka, request(addr, body(mode, 4, model), true)).await;
        check(mode, s, &b);
        took.push(t);
    }
    for mode in [Mode::Stream, Mode::Whole] {
        let mut c = Conn::open(addr).await;
        let (s, b, t) = exchange(&mut c, request(addr, body(mode, 4, model), false)).await;
        check(mode, s, &b);
        took.push(t);
        c.hang_up();
    }
    let text = settled(addr).await;
    ka.hang_up();
    (took, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_read_to_the_end_are_stop_or_length_with_an_e2e_each() {
    let twin = twin(0.05, Faults::default(), None).await;
    let gw = gateway(GW, &[url(twin.api_addr)], None).await;
    let (took, text) = six_requests(gw.addr, None, |mode, s, b| {
        assert_eq!(s, StatusCode::OK, "{mode:?}: {b}");
        match mode {
            Mode::Stream => assert!(b.ends_with("data: [DONE]\n\n"), "{b}"),
            Mode::Whole => {
                let v: serde_json::Value = serde_json::from_str(b).unwrap();
                assert_eq!(v["choices"][0]["finish_reason"], "length", "{b}");
            }
        }
    })
    .await;
    // max_tokens 4 with ignore_eos: every answer ends `length`.
    assert_eq!(outcomes(&text), row(&[("length", 6.0)]), "{text}");
    assert_eq!(in_flight(&text), Some(0.0));
    // One E2E per request, streaming or not; TTFT (and ITL, TPOT) only for the 3 streams: a
    // non-streaming answer has no first chunk of generated text.
    assert_eq!(series(&text, "e2e", "count"), 6.0);
    assert_eq!(series(&text, "ttft", "count"), 3.0);
    assert_eq!(series(&text, "tpot", "count"), 3.0);
    // The gateway's E2E starts after the client sent and ends before the client got the last
    // byte: its sum is positive and at most the client's.
    let e2e = series(&text, "e2e", "sum");
    let client: f64 = took.iter().sum();
    assert!(
        e2e > 0.0 && e2e <= client,
        "gateway {e2e} s vs client {client} s"
    );
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_500_is_upstream_error_streaming_or_not() {
    let faults = Faults {
        error_500_rate: 1.0,
        ..Faults::default()
    };
    let twin = twin(0.05, faults, None).await;
    let gw = gateway(GW, &[url(twin.api_addr)], None).await;
    let (_, text) = six_requests(gw.addr, None, |mode, s, b| {
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{mode:?}: {b}");
        let v: serde_json::Value = serde_json::from_str(b).unwrap();
        assert_eq!(
            v["error"]["code"], 500,
            "the upstream's body is passed on: {b}"
        );
    })
    .await;
    assert_eq!(outcomes(&text), row(&[("upstream_error", 6.0)]), "{text}");
    assert_eq!(in_flight(&text), Some(0.0));
    assert_eq!(series(&text, "e2e", "count"), 0.0);
    assert_eq!(series(&text, "ttft", "count"), 0.0);
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_404_for_an_unknown_model_is_invalid_request_not_an_error() {
    let twin = twin(0.05, Faults::default(), None).await;
    let gw = gateway(GW, &[url(twin.api_addr)], None).await;
    let (_, text) = six_requests(gw.addr, Some("no-such-model"), |mode, s, b| {
        assert_eq!(s, StatusCode::NOT_FOUND, "{mode:?}: {b}");
        let v: serde_json::Value = serde_json::from_str(b).unwrap();
        assert_eq!(v["error"]["type"], "NotFoundError", "{b}");
    })
    .await;
    assert_eq!(outcomes(&text), row(&[("invalid_request", 6.0)]), "{text}");
    assert_eq!(in_flight(&text), Some(0.0));
    assert_eq!(series(&text, "e2e", "count"), 0.0);
    gw.shutdown().await;
    twin.shutdown().await;
}

/// Sends a long request on `conn` and hangs up mid-response: a stream after its first body
/// frame, a non-streaming request while the engine is still generating (before any byte of the
/// answer).
async fn cancel_midway(mut conn: Conn, addr: SocketAddr, mode: Mode, keep_alive: bool) {
    let req = request(addr, body(mode, 2000, None), keep_alive);
    conn.send.ready().await.unwrap();
    match mode {
        Mode::Stream => {
            let resp = tokio::time::timeout(Duration::from_secs(5), conn.send.send_request(req))
                .await
                .expect("head within 5 s")
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let mut b = resp.into_body();
            let f = tokio::time::timeout(Duration::from_secs(5), b.frame())
                .await
                .expect("a first frame within 5 s");
            assert!(f.is_some_and(|f| f.is_ok()));
            conn.hang_up();
        }
        Mode::Whole => {
            let pending = tokio::spawn(conn.send.send_request(req));
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!pending.is_finished(), "2,000 tokens take seconds");
            pending.abort();
            conn.task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_mid_response_is_client_cancel_streaming_or_not() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(GW, &[url(twin.api_addr)], None).await;
    let addr = gw.addr;
    for mode in [Mode::Stream, Mode::Whole] {
        // Keep-alive: a short answer read in full, then a long one abandoned on the same
        // connection.
        let mut ka = Conn::open(addr).await;
        let (s, b, _) = exchange(&mut ka, request(addr, body(mode, 2, None), true)).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        cancel_midway(ka, addr, mode, true).await;
        // Connection: close.
        cancel_midway(Conn::open(addr).await, addr, mode, false).await;
    }
    let text = settled(addr).await;
    assert_eq!(
        outcomes(&text),
        row(&[("length", 2.0), ("client_cancel", 4.0)]),
        "{text}"
    );
    assert_eq!(in_flight(&text), Some(0.0));
    // Only the two answers read in full have an E2E; the three streams (one short, two
    // abandoned after their first frame) a TTFT each.
    assert_eq!(series(&text, "e2e", "count"), 2.0);
    assert_eq!(series(&text, "ttft", "count"), 3.0);
    // Every cancellation reached the engine: nothing keeps generating, nothing finished there
    // but the two short answers.
    let generated = wait_engine_idle(twin.api_addr, Duration::from_secs(5))
        .await
        .expect("the engine dropped every cancelled request");
    assert!(
        generated < 1000.0,
        "generated {generated} tokens for 4 × 2,000 asked"
    );
    assert_eq!(twin_finished(twin.api_addr).await, 2.0);
    gw.shutdown().await;
    twin.shutdown().await;
}
