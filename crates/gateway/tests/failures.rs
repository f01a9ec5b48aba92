//! Every failure path of the gateway, each against a real server on loopback: bad input, slow
//! clients, an API key, upstreams that are down, stall, break mid-stream or answer late,
//! admission refusals, header forwarding and correlation ids, and bounded label cardinality.

mod common;

use bytes::Bytes;
use common::*;
use headroom_sim::server::Faults;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn error_of(body: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"].clone()
}

/// A port nothing listens on (bound, then released).
/// A loopback address that refuses connections while the returned socket lives (see
/// [`headroom_testkit::refusing_port`]).
fn dead_addr() -> (tokio::net::TcpSocket, SocketAddr) {
    let (held, port) = headroom_testkit::refusing_port();
    (held, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// An upstream that answers every request with a finished completion whose text is the JSON
/// of the request headers it received (names → values).
async fn echo_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let h: serde_json::Map<String, serde_json::Value> = req
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                        .collect();
                    let body = serde_json::json!({
                        "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                        "usage": {"completion_tokens": 1},
                        "headers": h,
                    });
                    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
                    r.headers_mut()
                        .insert("content-type", "application/json".parse().unwrap());
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

/// `/metrics` answers GET with the exposition and HEAD with the same headers and no body.
#[tokio::test]
async fn metrics_answer_get_and_head() {
    let (up, task) = echo_upstream().await;
    let gw = gateway("", &[url(up)], None).await;
    let get = call(gw.addr, "GET", "/metrics", "", &[]).await;
    assert_eq!(get.status, StatusCode::OK);
    assert!(
        get.body.contains("headroom_gateway_invalid_requests_total"),
        "{}",
        get.body
    );
    let head = call(gw.addr, "HEAD", "/metrics", "", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(
        head.headers.get("content-type"),
        get.headers.get("content-type")
    );
    assert_eq!(head.body, "");
    gw.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn bad_input_is_answered_in_openai_shape() {
    let (up, task) = echo_upstream().await;
    let gw = gateway("max_body_bytes: 1000\n", &[url(up)], None).await;
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        "{\"prompt\": \"x\"",
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let e = error_of(&a.body);
    assert_eq!(e["type"], "BadRequestError");
    assert_eq!(e["code"], 400);
    assert!(
        e["message"].as_str().unwrap().contains("not valid JSON"),
        "{e}"
    );
    let a = call(gw.addr, "POST", "/v1/chat/completions", "[1]", &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    // Over the limit: by Content-Length, at once.
    let big = format!("{{\"prompt\": \"{}\"}}", "x".repeat(2000));
    let a = call(gw.addr, "POST", "/v1/completions", &big, &[]).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_of(&a.body)["code"], 413);
    // Unknown path: not forwarded.
    let a = call(gw.addr, "POST", "/reset_prefix_cache", "", &[]).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    // A passthrough path is forwarded.
    let a = call(gw.addr, "GET", "/v1/models", "", &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    let text = scrape(gw.addr).await;
    for (reason, n) in [
        ("malformed_json", 2.0),
        ("body_too_large", 1.0),
        ("not_found", 1.0),
    ] {
        assert_eq!(
            value(
                &text,
                &format!("headroom_gateway_invalid_requests_total{{reason=\"{reason}\"}}")
            ),
            Some(n),
            "{reason}"
        );
    }
    gw.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_413() {
    let (up, task) = echo_upstream().await;
    let gw = gateway("max_body_bytes: 100\n", &[url(up)], None).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let chunk = "x".repeat(80);
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    gw.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn slow_clients_time_out() {
    let (up, task) = echo_upstream().await;
    let gw = gateway(
        "timeouts: {header_read: 300ms, body_read: 300ms}\n",
        &[url(up)],
        None,
    )
    .await;
    // Body: the head promises 100 bytes, 10 arrive, then nothing → 408.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"prompt\":",
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    // Head: half a request line, then nothing → the connection is closed.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"POST /v1/compl").await.unwrap();
    let t0 = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("the gateway closes a slow head within 5 s");
    assert!(r.is_ok() || r.is_err());
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_invalid_requests_total{reason=\"body_timeout\"}"
        ),
        Some(1.0)
    );
    gw.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn api_key_and_header_allowlist() {
    let (up, task) = echo_upstream().await;
    // SAFETY: the variable is unique to this test; no other thread reads it.
    unsafe {
        std::env::set_var("HEADROOM_GW_TEST_KEY", "sk-gw-test");
        std::env::set_var("HEADROOM_GW_TEST_UPSTREAM_KEY", "sk-upstream");
    }
    let gw = gateway(
        "api_key_env: HEADROOM_GW_TEST_KEY\nupstream_api_key_env: HEADROOM_GW_TEST_UPSTREAM_KEY\nforward_headers: [content-type, x-keep]\n",
        &[url(up)],
        None,
    )
    .await;
    let body = "{\"prompt\":\"p\",\"max_tokens\":1}";
    for auth in [None, Some("Bearer wrong"), Some("Bearer sk-gw-tes")] {
        let h: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let a = call(gw.addr, "POST", "/v1/completions", body, &h).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(error_of(&a.body)["type"], "AuthenticationError");
    }
    // As vLLM's --api-key: paths outside /v1/ need no key (uptime probes), and the scheme
    // name is case-insensitive.
    for path in ["/health", "/version", "/ping"] {
        let a = call(gw.addr, "GET", path, "", &[]).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
    }
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        body,
        &[("authorization", "bearer sk-gw-test")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "lower-case scheme: {}", a.body);
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        body,
        &[
            ("authorization", "Bearer sk-gw-test"),
            ("x-keep", "1"),
            ("x-drop", "2"),
            ("cookie", "secret"),
            ("x-request-id", "client-id-7"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "vendor=1"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let h = &v["headers"];
    assert_eq!(h["x-keep"], "1");
    assert!(
        h.get("x-drop").is_none() && h.get("cookie").is_none(),
        "{h}"
    );
    // The upstream gets its own key, never the client's.
    assert_eq!(h["authorization"], "Bearer sk-upstream");
    assert_eq!(h["x-request-id"], "client-id-7");
    assert_eq!(h["tracestate"], "vendor=1");
    let tp = h["traceparent"].as_str().unwrap();
    assert!(
        tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && tp.ends_with("-01"),
        "{tp}"
    );
    // The client gets the same ids back.
    assert_eq!(a.headers["x-request-id"], "client-id-7");
    assert_eq!(a.headers["traceparent"].to_str().unwrap(), tp);
    // Without ids, the gateway makes them and still returns them.
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        body,
        &[("authorization", "Bearer sk-gw-test")],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let rid = a.headers["x-request-id"].to_str().unwrap();
    assert_eq!(rid.len(), 32);
    assert_eq!(v["headers"]["x-request-id"], rid);
    assert!(v["headers"].get("tracestate").is_none());
    assert_eq!(
        v["headers"]["traceparent"],
        a.headers["traceparent"].to_str().unwrap()
    );
    // Errors carry the ids too.
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        "{",
        &[
            ("authorization", "Bearer sk-gw-test"),
            ("x-request-id", "e-1"),
        ],
    )
    .await;
    assert_eq!(
        (
            a.status.as_u16(),
            a.headers["x-request-id"].to_str().unwrap()
        ),
        (400, "e-1")
    );
    gw.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn upstream_down_is_502_with_the_reason_and_the_pool_fails_over() {
    let (_held, dead) = dead_addr();
    let gw = gateway("{}", &[url(dead)], None).await;
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 2),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    let msg = error_of(&a.body)["message"].as_str().unwrap().to_string();
    // The reason names the member and the pool, never the upstream's address (clients need not
    // be authenticated to read it).
    assert!(
        msg.contains("upstream 1 of 1 in pool `default`")
            && msg.contains("connect")
            && msg.contains("could be reached")
            && !msg.contains(&dead.port().to_string()),
        "{msg}"
    );
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"upstream_error\"}"
        ),
        Some(1.0)
    );
    gw.shutdown().await;
    // One dead member and one live: every request lands on the live one.
    let (up, task) = echo_upstream().await;
    let gw = gateway("{}", &[url(dead), url(up)], None).await;
    for _ in 0..4 {
        let a = call(
            gw.addr,
            "POST",
            "/v1/completions",
            "{\"prompt\":\"p\"}",
            &[],
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    }
    gw.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_break_mid_stream_ends_with_an_error_event() {
    let faults = Faults {
        disconnect_rate: 1.0,
        ..Faults::default()
    };
    let twin = twin(0.05, faults, None).await;
    let gw = gateway("{}", &[url(twin.api_addr)], None).await;
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 40),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        a.body.contains("\"text\""),
        "some tokens came first: {}",
        a.body
    );
    let events: Vec<&str> = a.body.split("\n\n").filter(|e| !e.is_empty()).collect();
    let n = events.len();
    assert_eq!(events[n - 1], "data: [DONE]", "{}", a.body);
    let err: serde_json::Value =
        serde_json::from_str(events[n - 2].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(err["error"]["code"], 502);
    assert_eq!(err["error"]["type"], "BadGatewayError");
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"upstream_error\"}"
        ),
        Some(1.0)
    );
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_first_byte_timeouts_end_the_request_and_cancel_upstream() {
    // Stall: one 3 s gap mid-stream; the gateway gives up after 300 ms of silence.
    let stall = Faults {
        stall_rate: 1.0,
        stall_s: 3.0,
        ..Faults::default()
    };
    let twin_a = twin(0.05, stall, None).await;
    let gw = gateway("timeouts: {idle: 300ms}\n", &[url(twin_a.api_addr)], None).await;
    let t0 = Instant::now();
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 40),
        &[],
    )
    .await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        a.body.contains("\"code\":504") && a.body.contains("idle timeout"),
        "{}",
        a.body
    );
    assert!(a.body.ends_with("data: [DONE]\n\n"));
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"timeout\"}"
        ),
        Some(1.0)
    );
    gw.shutdown().await;
    twin_a.shutdown().await;

    // Total: a 2,000-token stream at real step times is cut after 1 s; the upstream request is
    // dropped, so the engine, still generating, stops it (and counts it in no finished_reason).
    let twin_c = twin(1.0, Faults::default(), None).await;
    let gw = gateway("timeouts: {total: 1s}\n", &[url(twin_c.api_addr)], None).await;
    let t0 = Instant::now();
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 2000),
        &[],
    )
    .await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(a.body.contains("\"text\""), "tokens came first");
    assert!(
        a.body.contains("\"code\":504") && a.body.contains("total timeout"),
        "{}",
        a.body
    );
    let generated = wait_engine_idle(twin_c.api_addr, Duration::from_secs(5))
        .await
        .expect("the engine dropped the timed-out request");
    assert!(generated < 2000.0, "generated {generated} of 2000 tokens");
    assert_eq!(twin_finished(twin_c.api_addr).await, 0.0);
    gw.shutdown().await;
    twin_c.shutdown().await;

    // Slow start: the response head comes 2 s late; first_byte is 300 ms → 504.
    let slow = Faults {
        slow_start_rate: 1.0,
        slow_start_s: 2.0,
        ..Faults::default()
    };
    let twin_b = twin(0.05, slow, None).await;
    let gw = gateway(
        "timeouts: {first_byte: 300ms}\n",
        &[url(twin_b.api_addr)],
        None,
    )
    .await;
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 4),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::GATEWAY_TIMEOUT, "{}", a.body);
    assert!(
        error_of(&a.body)["message"]
            .as_str()
            .unwrap()
            .contains("no response head")
    );
    gw.shutdown().await;
    twin_b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_queues_then_refuses_with_retry_after() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(
        "classes:\n  - {name: capped, concurrency: {limit: 1, queue: 1, queue_timeout: 400ms, retry_after: 2s}}\n",
        &[url(twin.api_addr)],
        None,
    )
    .await;
    let addr = gw.addr;
    // One long stream holds the only slot; the second waits in the queue and times out with
    // 503; meanwhile a third finds it full.
    let Filled {
        holder,
        waiter: (w, waited),
        full,
    } = fill_one_slot(addr, 60).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS, "{}", full.body);
    assert_eq!(full.headers["retry-after"], "2");
    assert_eq!(error_of(&full.body)["type"], "RateLimitError");
    assert_eq!(w.status, StatusCode::SERVICE_UNAVAILABLE, "{}", w.body);
    assert_eq!(w.headers["retry-after"], "2");
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    let h = holder.await.unwrap();
    assert_eq!(h.status, StatusCode::OK);
    // With the slot free again, a request goes through.
    let ok = call(
        addr,
        "POST",
        "/v1/completions",
        &completion_body("after", 2),
        &[],
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    let text = scrape(addr).await;
    let c = "class=\"capped\",tenant=\"other\"";
    assert_eq!(
        value(
            &text,
            &format!("headroom_gateway_requests_total{{{c},outcome=\"rejected\"}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("headroom_gateway_requests_total{{{c},outcome=\"length\"}}")
        ),
        Some(2.0)
    );
    // Queue time: two admitted (0 s each, the holder and the last) and the one refused after
    // waiting 400 ms; the queue-full 429 never waited and is not observed.
    assert_eq!(
        value(
            &text,
            &format!("headroom_gateway_queue_seconds_count{{{c}}}")
        ),
        Some(3.0)
    );
    assert!(
        value(&text, &format!("headroom_gateway_queue_seconds_sum{{{c}}}"))
            .is_some_and(|s| s >= 0.4)
    );
    assert_eq!(
        value(&text, "headroom_gateway_in_flight{class=\"capped\"}"),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "headroom_gateway_queued{class=\"capped\"}"),
        Some(0.0)
    );
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test]
async fn label_cardinality_is_bounded_under_adversarial_headers() {
    let (up, task) = echo_upstream().await;
    let gw = gateway(
        "tenants: [gold, silver]\nclasses:\n  - {name: chat, route: chat}\n",
        &[url(up)],
        None,
    )
    .await;
    for i in 0..200 {
        let tenant = match i % 4 {
            0 => "gold".to_string(),
            1 => format!("tenant-{i}"),
            2 => format!("gold\"}} injected{{x=\"{i}"),
            _ => "x".repeat(i),
        };
        let model = format!("model-{i}");
        let path = if i % 2 == 0 {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let body = format!(
            "{{\"model\":\"{model}\",\"prompt\":\"secret-prompt-{i}\",\"messages\":[{{\"role\":\"user\",\"content\":\"secret-{i}\"}}]}}"
        );
        let a = call(
            gw.addr,
            "POST",
            path,
            &body,
            &[("x-tenant", &tenant), ("x-request-id", &format!("rid-{i}"))],
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
    }
    let text = scrape(gw.addr).await;
    let label_values = |label: &str| -> BTreeSet<String> {
        text.lines()
            .filter(|l| l.starts_with("headroom_gateway_"))
            .filter_map(|l| {
                l.split(&format!("{label}=\""))
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_string)
            })
            .collect()
    };
    assert_eq!(
        label_values("tenant"),
        ["gold", "other"].map(String::from).into_iter().collect()
    );
    assert_eq!(
        label_values("class"),
        ["chat", "default"].map(String::from).into_iter().collect()
    );
    assert!(!text.contains("secret") && !text.contains("model-") && !text.contains("rid-"));
    // Series per family: classes × tenants seen (2 × 2), each with its bucket lines; in total
    // at most 2 classes × 3 tenants × (buckets + 3) per histogram.
    let ttft_series = text
        .lines()
        .filter(|l| l.starts_with("headroom_gateway_ttft_seconds_count"))
        .count();
    assert!(ttft_series <= 6, "{ttft_series}");
    gw.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_the_queue_frees_its_place() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(
        "classes:\n  - {name: capped, concurrency: {limit: 1, queue: 4, queue_timeout: 20s}}\n",
        &[url(twin.api_addr)],
        None,
    )
    .await;
    let addr = gw.addr;
    let holder = hold(addr, 150);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A second client queues, then hangs up.
    let body = completion_body("leave", 2);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let queued = |t: &str| value(t, "headroom_gateway_queued{class=\"capped\"}");
    let t0 = Instant::now();
    while queued(&scrape(addr).await) != Some(1.0) && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(queued(&scrape(addr).await), Some(1.0));
    drop(s);
    let t1 = Instant::now();
    while queued(&scrape(addr).await) != Some(0.0) && t1.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = t1.elapsed();
    assert_eq!(queued(&scrape(addr).await), Some(0.0));
    assert!(
        left < Duration::from_secs(1),
        "left the queue after {left:?}"
    );
    assert!(!holder.is_finished(), "the holder still streams");
    let h = holder.await.unwrap();
    assert_eq!(h.status, StatusCode::OK);
    gw.shutdown().await;
    twin.shutdown().await;
}
