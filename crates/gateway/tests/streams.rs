//! How the gateway frames what it forwards and when its deadlines cut a response, against
//! scripted upstreams on loopback that write exact bytes, split where a test wants and close
//! where a test wants: events cut across frames, a stream cut mid-event, an upstream that always
//! has data ready, a non-streaming answer slower than `first_byte`, and the unmeasured routes.

mod common;

use bytes::Bytes;
use common::*;
use headroom_sim::server::Faults;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One step of a scripted upstream response.
#[derive(Debug, Clone)]
enum Step {
    /// Write these bytes as one HTTP chunk.
    Chunk(&'static str),
    /// Pause.
    Sleep(u64),
    /// Write the same chunk again and again, flat out, until the write fails.
    Flood(&'static str),
    /// Close the connection without the terminating chunk.
    Cut,
    /// Send nothing more, keeping the connection open for this long.
    Stall(u64),
}

/// An upstream that answers every request on its connection with `200`, `head_type` and then
/// `script` as HTTP/1.1 chunks (a clean end sends the terminating chunk).
async fn scripted(head_type: &'static str, script: Vec<Step>) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let script = script.clone();
            tokio::spawn(async move {
                // Read the request head and its Content-Length body.
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    let Ok(n) = s.read(&mut b).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&b[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= i + 4 + len {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {head_type}\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = |c: &str| format!("{:x}\r\n{c}\r\n", c.len());
                for step in script {
                    match step {
                        Step::Chunk(c) => {
                            if s.write_all(chunk(c).as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                        Step::Flood(c) => {
                            let c = chunk(c).repeat(64);
                            while s.write_all(c.as_bytes()).await.is_ok() {}
                            return;
                        }
                        Step::Cut => return,
                        Step::Stall(ms) => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            return;
                        }
                    }
                }
                let _ = s.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

/// A streaming completion through `gw`: status, the body's data frames as the client's hyper
/// decoded them (one per chunk the gateway wrote), and whether the body ended with an error.
async fn frames(gw: SocketAddr, path: &str) -> (StatusCode, Vec<Bytes>, bool) {
    let req = Request::post(format!("http://{gw}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(completion_body("p", 8))))
        .unwrap();
    let fut = async {
        let resp = client().request(req).await.expect("request sent");
        let status = resp.status();
        let mut body = resp.into_body();
        let mut out = Vec::new();
        let mut failed = false;
        while let Some(f) = body.frame().await {
            match f {
                Ok(f) => {
                    if let Ok(d) = f.into_data() {
                        out.push(d);
                    }
                }
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        (status, out, failed)
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("answer within 10 s")
}

fn joined(frames: &[Bytes]) -> String {
    frames
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect()
}

/// The `data:` payloads of a whole SSE body, every one of them required to be `[DONE]` or JSON.
fn events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        // Extra blank lines are empty events: no event at all.
        .map(|e| e.trim_start_matches(['\n', '\r']))
        .filter(|e| !e.is_empty())
        .map(|e| {
            let d = e
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"));
            if d == "[DONE]" {
                serde_json::Value::Null
            } else {
                serde_json::from_str(d).unwrap_or_else(|x| panic!("event is not JSON ({x}): {d:?}"))
            }
        })
        .collect()
}

const EV1: &str = "data: {\"id\":\"c1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n";
const EV2_HEAD: &str = "data: {\"id\":\"c1\",\"object\":\"text_com";
const EV2_TAIL: &str =
    "pletion\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n";
const DONE: &str = "data: [DONE]\n\n";

/// An upstream that cuts its stream in the middle of an event: the client gets the whole
/// events, then the gateway's error event as an event of its own (every event parses as JSON),
/// and never the half event — an SSE parser cannot drop half an event it already holds, so
/// appending the error event after it made the client read one broken event (the OpenAI SDK
/// raised a JSONDecodeError instead of the gateway's message).
#[tokio::test]
async fn a_stream_cut_mid_event_ends_with_whole_events_and_the_error_event() {
    for cut_after in [EV2_HEAD, "data: {\"id\"", "data", "\n"] {
        let up = scripted(
            "text/event-stream",
            vec![
                Step::Chunk(EV1),
                Step::Sleep(20),
                Step::Chunk(cut_after),
                Step::Sleep(20),
                Step::Cut,
            ],
        )
        .await;
        let gw = gateway("{}", &[url(up)], None).await;
        let (status, fr, failed) = frames(gw.addr, "/v1/completions").await;
        assert_eq!(status, StatusCode::OK);
        assert!(!failed, "the stream ends cleanly, with the error event");
        let body = joined(&fr);
        assert!(body.starts_with(EV1), "{body:?}");
        let ev = events(&body);
        assert_eq!(ev.len(), 3, "{body:?}");
        assert_eq!(ev[1]["error"]["code"], 502, "{body:?}");
        assert_eq!(ev[2], serde_json::Value::Null, "then [DONE]");
        let text = scrape(gw.addr).await;
        assert_eq!(
            value(
                &text,
                "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"upstream_error\"}"
            ),
            Some(1.0)
        );
        gw.shutdown().await;
    }
}

/// Events the upstream splits across frames reach the client whole, byte for byte, and every
/// frame the client reads ends at an event boundary; the stream is measured as usual.
#[tokio::test]
async fn events_split_across_frames_reach_the_client_whole() {
    let up = scripted(
        "text/event-stream",
        vec![
            Step::Chunk("data: {\"id\":\"c1\",\"object\":\"text_completion\",\"cho"),
            Step::Sleep(15),
            Step::Chunk("ices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n"),
            Step::Sleep(15),
            Step::Chunk("\n"),
            Step::Sleep(15),
            Step::Chunk(EV2_HEAD),
            Step::Chunk(EV2_TAIL),
            Step::Sleep(15),
            Step::Chunk("\r\n"),
            Step::Chunk(DONE),
        ],
    )
    .await;
    let gw = gateway("{}", &[url(up)], None).await;
    let (status, fr, failed) = frames(gw.addr, "/v1/completions").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!failed);
    let want = format!("{EV1}{EV2_HEAD}{EV2_TAIL}\r\n{DONE}");
    assert_eq!(joined(&fr), want, "the bytes are unchanged");
    for f in &fr {
        assert!(
            f.ends_with(b"\n\n") || f.ends_with(b"\r\n\r\n") || f.ends_with(b"\n\r\n"),
            "a frame ends mid-event: {:?}",
            String::from_utf8_lossy(f)
        );
    }
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"length\"}"
        ),
        Some(1.0)
    );
    // Both content events were seen: one TTFT and one ITL gap.
    assert_eq!(
        sum_where(&text, "headroom_gateway_itl_seconds_count", &[]),
        1.0
    );
    gw.shutdown().await;
}

/// `timeouts.total` holds against an upstream that always has data ready (the deadline was
/// checked only when the upstream had nothing to read, so a fast stream ran on for as long as
/// the upstream liked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_timeout_cuts_an_upstream_that_never_pauses() {
    let up = scripted("text/event-stream", vec![Step::Flood(EV1)]).await;
    let gw = gateway("timeouts: {total: 500ms}\n", &[url(up)], None).await;
    let t0 = Instant::now();
    let (status, fr, _) = frames(gw.addr, "/v1/completions").await;
    let took = t0.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let body = joined(&fr);
    let tail: Vec<&str> = body
        .rsplit("\n\n")
        .filter(|e| !e.is_empty())
        .take(2)
        .collect();
    assert_eq!(tail[0], "data: [DONE]");
    assert!(
        tail[1].contains("\"code\":504") && tail[1].contains("total timeout"),
        "{:?}",
        tail[1]
    );
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"timeout\"}"
        ),
        Some(1.0)
    );
    gw.shutdown().await;
}

/// A non-streaming answer comes with its head only when generation ends (vLLM sends it then),
/// so `first_byte` does not apply to it: only `total` does. A streaming request keeps
/// `first_byte`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_byte_bounds_streams_and_total_bounds_non_streaming_answers() {
    // 40 tokens at real step times take a few hundred ms, more than first_byte.
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(
        "timeouts: {first_byte: 50ms, total: 20s}\n",
        &[url(twin.api_addr)],
        None,
    )
    .await;
    let non_stream = r#"{"prompt":"p","max_tokens":40,"ignore_eos":true}"#;
    let t0 = Instant::now();
    let a = call(gw.addr, "POST", "/v1/completions", non_stream, &[]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(
        t0.elapsed() > Duration::from_millis(50),
        "the answer was slower than first_byte"
    );
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body("p", 40),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    gw.shutdown().await;
    // With total below the generation time, the non-streaming request gets 504.
    let gw = gateway("timeouts: {total: 100ms}\n", &[url(twin.api_addr)], None).await;
    let a = call(gw.addr, "POST", "/v1/completions", non_stream, &[]).await;
    assert_eq!(a.status, StatusCode::GATEWAY_TIMEOUT, "{}", a.body);
    gw.shutdown().await;
    twin.shutdown().await;
}

/// The unmeasured routes (`/v1/models`, `/v1/responses`, …) are under the idle and total
/// deadlines too: an upstream that sends a head and then nothing is cut after `idle`.
#[tokio::test]
async fn unmeasured_routes_are_under_the_idle_timeout() {
    let up = scripted(
        "text/event-stream",
        vec![
            Step::Chunk("event: response.created\ndata: {}\n\n"),
            Step::Stall(5_000),
        ],
    )
    .await;
    let gw = gateway("timeouts: {idle: 300ms}\n", &[url(up)], None).await;
    let t0 = Instant::now();
    let (status, fr, failed) = frames(gw.addr, "/v1/responses").await;
    assert_eq!(status, StatusCode::OK);
    assert!(failed, "the body is cut");
    assert_eq!(joined(&fr), "event: response.created\ndata: {}\n\n");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "cut after {:?}",
        t0.elapsed()
    );
    gw.shutdown().await;
}

/// `body` streamed through `gw`: the whole body as text (10 s bound), and when its first frame
/// arrived.
async fn stream_text(
    gw: SocketAddr,
    body: String,
    first: tokio::sync::oneshot::Sender<()>,
) -> String {
    let req = Request::post(format!("http://{gw}/v1/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let fut = async {
        let resp = client().request(req).await.expect("request sent");
        let mut b = resp.into_body();
        let mut text = String::new();
        let mut first = Some(first);
        while let Some(Ok(f)) = b.frame().await {
            if let Ok(d) = f.into_data() {
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
                text.push_str(&String::from_utf8_lossy(&d));
            }
        }
        text
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("answer within 10 s")
}

/// On shutdown (SIGTERM, Ctrl-C) the gateway refuses new connections, lets open streams
/// finish within `timeouts.drain`, and ends those still open then with an SSE error event (503,
/// counted `timeout`) instead of cutting them mid-chunk after a fixed 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_then_ends_open_streams_with_an_error_event() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway("timeouts: {drain: 600ms}\n", &[url(twin.api_addr)], None).await;
    let addr = gw.addr;
    let (tx_short, rx_short) = tokio::sync::oneshot::channel();
    let (tx_long, rx_long) = tokio::sync::oneshot::channel();
    let short = tokio::spawn(stream_text(addr, completion_body("p", 6), tx_short));
    let long = tokio::spawn(stream_text(addr, completion_body("p", 2000), tx_long));
    rx_short.await.unwrap();
    rx_long.await.unwrap();
    let t0 = Instant::now();
    let metrics = gw.gateway.clone();
    gw.shutdown().await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_millis(2500),
        "shutdown took {took:?}"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting"
    );
    let short = short.await.unwrap();
    let ev = events(&short);
    assert!(
        ev.iter()
            .any(|e| e["choices"][0]["finish_reason"] == "length"),
        "{short}"
    );
    assert!(!short.contains("\"error\""), "{short}");
    let long = long.await.unwrap();
    let ev = events(&long);
    assert_eq!(
        ev.last(),
        Some(&serde_json::Value::Null),
        "ends with [DONE]: {long}"
    );
    let err = &ev[ev.len() - 2]["error"];
    assert_eq!(err["code"], 503, "{long}");
    assert!(
        err["message"].as_str().unwrap().contains("shutting down"),
        "{err}"
    );
    let text = metrics.metrics_text();
    for (outcome, n) in [("length", 1.0), ("timeout", 1.0)] {
        assert_eq!(
            value(
                &text,
                &format!(
                    "headroom_gateway_requests_total{{class=\"default\",tenant=\"other\",outcome=\"{outcome}\"}}"
                )
            ),
            Some(n),
            "{outcome}"
        );
    }
    twin.shutdown().await;
}

/// An event longer than the gateway holds back (`MAX_HELD_EVENT`) is passed on as it comes, and
/// no byte is lost either way: when the overlong part arrives in one frame, and when it grows
/// over many frames.
#[tokio::test]
async fn an_overlong_event_is_passed_on_whole() {
    let big: &'static str = Box::leak(
        format!(
            "data: {{\"id\":\"c1\",\"object\":\"text_completion\",\"choices\":[{{\"index\":0,\"text\":\"{}\",\"finish_reason\":null}}]}}",
            "x".repeat(headroom_gateway::body::MAX_HELD_EVENT + 10)
        )
        .into_boxed_str(),
    );
    let (head, tail) = big.split_at(big.len() / 3);
    let (mid, tail) = tail.split_at(tail.len() / 2);
    let scripts = [
        vec![
            Step::Chunk(EV1),
            Step::Chunk(big),
            Step::Sleep(10),
            Step::Chunk("\n\n"),
        ],
        vec![
            Step::Chunk(head),
            Step::Sleep(10),
            Step::Chunk(mid),
            Step::Sleep(10),
            Step::Chunk(tail),
            Step::Sleep(10),
            Step::Chunk("\n\n"),
        ],
    ];
    for (i, script) in scripts.into_iter().enumerate() {
        let want: String = script
            .iter()
            .filter_map(|s| match s {
                Step::Chunk(c) => Some(*c),
                _ => None,
            })
            .chain([EV2_HEAD, EV2_TAIL, "\n", DONE])
            .collect();
        let mut script = script;
        script.extend([
            Step::Chunk(EV2_HEAD),
            Step::Chunk(EV2_TAIL),
            Step::Chunk("\n"),
            Step::Chunk(DONE),
        ]);
        let up = scripted("text/event-stream", script).await;
        let gw = gateway("{}", &[url(up)], None).await;
        let (status, fr, failed) = frames(gw.addr, "/v1/completions").await;
        assert_eq!(status, StatusCode::OK);
        assert!(!failed, "script {i}");
        let got = joined(&fr);
        assert_eq!(got.len(), want.len(), "script {i}: every byte arrives");
        assert!(got == want, "script {i}: the bytes are unchanged");
        gw.shutdown().await;
    }
}
