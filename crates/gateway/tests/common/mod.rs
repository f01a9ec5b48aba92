//! Helpers shared by the gateway's integration tests: the engine twin, a gateway in front of it,
//! a raw HTTP client and a reader for single series of a Prometheus text body. Everything binds
//! `127.0.0.1:0` and every wait is bounded.

#![allow(dead_code)]

use bytes::Bytes;
use headroom_gateway::{GatewayConfig, GatewayFile, GatewayHandle, start};
use headroom_sim::SimSpec;
use headroom_sim::server::{Faults, ServerConfig, ServerHandle, serve};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The twin with real step times scaled by `time_scale`, and `faults`.
pub async fn twin(time_scale: f64, faults: Faults, name: Option<&str>) -> ServerHandle {
    let spec = SimSpec {
        time_scale,
        served_model_name: name.map(str::to_string),
        ..SimSpec::default()
    };
    serve(ServerConfig {
        port: 0,
        dcgm_port: Some(0),
        spec,
        faults,
        ..ServerConfig::default()
    })
    .await
    .expect("twin starts")
}

/// A gateway from `yaml` (its `upstreams:` may be empty) with `upstreams` added.
pub async fn gateway(yaml: &str, upstreams: &[String], slo: Option<&str>) -> GatewayHandle {
    start(config(yaml, upstreams, slo))
        .await
        .expect("gateway starts")
}

/// The resolved configuration [`gateway`] starts from, listening on `127.0.0.1:0`.
pub fn config(yaml: &str, upstreams: &[String], slo: Option<&str>) -> GatewayConfig {
    let file = GatewayFile::parse(yaml, Path::new("gateway.yaml")).expect("gateway.yaml parses");
    let slo = slo
        .map(|s| headroom_core::SloFile::parse(s, Path::new("slo.yaml")).expect("slo.yaml parses"));
    GatewayConfig::resolve(
        "127.0.0.1:0".parse().unwrap(),
        upstreams,
        file,
        "gateway.yaml",
        slo,
    )
    .expect("gateway config resolves")
}

/// `http://<addr>`.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// A plain hyper client.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// A finished exchange.
#[derive(Debug)]
pub struct Answer {
    /// Status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Whole body as text.
    pub body: String,
}

/// Sends `method path` with `body` and `headers` and reads the whole answer (10 s bound).
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let fut = async {
        let resp = client().request(req).await.expect("request sent");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
            .unwrap_or_else(|e| format!("<body error: {e}>"));
        Answer {
            status,
            headers,
            body,
        }
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("answer within 10 s")
}

/// `GET /metrics` of `addr` as text.
pub async fn scrape(addr: SocketAddr) -> String {
    call(addr, "GET", "/metrics", "", &[]).await.body
}

/// The value of the series whose line starts with `series` followed by a space (exact labels in
/// the order printed), or `None`.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Sum of every sample of `family` (lines `family{...} v`) whose labels contain all `needles`.
pub fn sum_where(text: &str, family: &str, needles: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits (at most `within`) until the engine twin has dropped every request: no request running
/// or waiting, and `vllm:generation_tokens_total` unchanged over 300 ms. Returns the generated
/// token total then, or `None` if the engine was still busy when `within` ran out.
///
/// This is how a cancellation shows on a real vLLM 0.32: a request whose client went away is
/// counted in no `request_success_total` reason (not even `abort`); it simply stops generating
/// and leaves the running set (measured live by `scripts/conformance/vllm.sh` step `cancel`).
pub async fn wait_engine_idle(twin: SocketAddr, within: Duration) -> Option<f64> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < within {
        let a = scrape(twin).await;
        let busy = sum_where(&a, "vllm:num_requests_running", &[])
            + sum_where(&a, "vllm:num_requests_waiting", &[]);
        if busy == 0.0 {
            let gen_a = sum_where(&a, "vllm:generation_tokens_total", &[]);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let b = scrape(twin).await;
            if sum_where(&b, "vllm:generation_tokens_total", &[]) == gen_a {
                return Some(gen_a);
            }
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    None
}

/// Requests the engine twin counts as finished, by every `finished_reason`
/// (`vllm:request_success_total`).
pub async fn twin_finished(twin: SocketAddr) -> f64 {
    sum_where(&scrape(twin).await, "vllm:request_success_total", &[])
}

/// A streaming completions body.
pub fn completion_body(prompt: &str, max_tokens: u32) -> String {
    serde_json::json!({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

/// Starts a streaming completion of `tokens` tokens (`ignore_eos`) that holds an admission
/// slot while it runs.
pub fn hold(addr: SocketAddr, tokens: u32) -> tokio::task::JoinHandle<Answer> {
    tokio::spawn(async move {
        call(
            addr,
            "POST",
            "/v1/completions",
            &completion_body("hold", tokens),
            &[],
        )
        .await
    })
}

/// What [`fill_one_slot`] started and saw.
pub struct Filled {
    /// The request holding the slot, still streaming.
    pub holder: tokio::task::JoinHandle<Answer>,
    /// The request that waited in the queue (refused at its `queue_timeout`), and how long it
    /// waited.
    pub waiter: (Answer, Duration),
    /// The request that found the queue full.
    pub full: Answer,
}

/// Against a class with one slot and a one-place queue: a stream of `hold_tokens` tokens takes
/// the slot, a second request waits in the queue until its timeout, and a third, sent while
/// the second waits, finds the queue full.
pub async fn fill_one_slot(addr: SocketAddr, hold_tokens: u32) -> Filled {
    let holder = hold(addr, hold_tokens);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiter = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        let a = call(
            addr,
            "POST",
            "/v1/completions",
            &completion_body("wait", 2),
            &[],
        )
        .await;
        (a, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let full = call(
        addr,
        "POST",
        "/v1/completions",
        &completion_body("full", 2),
        &[],
    )
    .await;
    Filled {
        holder,
        waiter: waiter.await.expect("waiter task"),
        full,
    }
}
