//! The engine twin's HTTP server over loopback: response shapes against the real vLLM 0.32
//! answers in `fixtures/openai/`, token accounting, errors, `/metrics` counters, client
//! disconnects and HTTP-level faults. Every test runs on ephemeral ports and is bounded in time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use headroom_sim::SimSpec;
use headroom_sim::server::{Faults, ServerConfig, ServerHandle, serve};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TEST_LIMIT: Duration = Duration::from_secs(60);

fn spec(time_scale: f64) -> SimSpec {
    SimSpec {
        max_model_len: Some(2048),
        served_model_name: Some("tiny".into()),
        seed: 1,
        time_scale,
        ..SimSpec::default()
    }
}

async fn start(spec: SimSpec, faults: Faults, api_key: Option<&str>) -> ServerHandle {
    let cfg = ServerConfig {
        port: 0,
        dcgm_port: Some(0),
        spec,
        faults,
        api_key: api_key.map(str::to_string),
        ..ServerConfig::default()
    };
    serve(cfg).await.expect("server starts")
}

/// The real vLLM answers are committed under `fixtures/` at the repository root.
fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The body of a fixture that may start with an HTTP response head.
fn fixture_body(name: &str) -> String {
    let text = fixture(name);
    if text.starts_with("HTTP/") {
        let i = text
            .find("\r\n\r\n")
            .map(|i| i + 4)
            .or_else(|| text.find("\n\n").map(|i| i + 2))
            .unwrap();
        text[i..].to_string()
    } else {
        text
    }
}

/// A response read to the end, with the arrival time of every SSE event.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Arrival times of `data: ` events, in order.
    event_times: Vec<Instant>,
    /// True when a chunked body ended with its terminating zero-size chunk.
    complete: bool,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("utf-8 body")
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    /// SSE `data:` payloads, `[DONE]` included.
    fn events(&self) -> Vec<String> {
        sse_events(self.text())
    }
}

fn sse_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data: prefix").to_string())
        .collect()
}

/// Sends one HTTP/1.1 request with `Connection: close` and reads the response to EOF.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Resp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    if let Some(b) = body {
        req.push_str(b);
    }
    s.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let mut event_times = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        let piece = &buf[..n];
        let events = piece.windows(6).filter(|w| w == b"data: ").count();
        event_times.extend(std::iter::repeat_n(now, events));
        raw.extend_from_slice(piece);
    }
    parse_response(&raw, event_times)
}

fn parse_response(raw: &[u8], event_times: Vec<Instant>) -> Resp {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head")
        + 4;
    let head = std::str::from_utf8(&raw[..head_end]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let rest = &raw[head_end..];
    if !chunked {
        return Resp {
            status,
            headers,
            body: rest.to_vec(),
            event_times,
            complete: true,
        };
    }
    let (mut body, mut i, mut complete) = (Vec::new(), 0usize, false);
    while let Some(p) = rest[i..].windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[i..i + p]).unwrap().trim(), 16)
            .unwrap();
        i += p + 2;
        if size == 0 {
            complete = true;
            break;
        }
        if i + size > rest.len() {
            body.extend_from_slice(&rest[i..]);
            break;
        }
        body.extend_from_slice(&rest[i..i + size]);
        i += size + 2;
    }
    Resp {
        status,
        headers,
        body,
        event_times,
        complete,
    }
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    http(addr, "POST", path, Some(&body.to_string()), &[]).await
}

/// Same key sets and JSON types, recursively (arrays: first elements).
fn assert_same_shape(ours: &Value, want: &Value, path: &str) {
    match (ours, want) {
        (Value::Object(a), Value::Object(b)) => {
            let ka: Vec<&String> = a.keys().collect();
            let kb: Vec<&String> = b.keys().collect();
            assert_eq!(ka, kb, "keys at {path}");
            for k in kb {
                assert_same_shape(&a[k], &b[k], &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.is_empty(), b.is_empty(), "emptiness at {path}");
            if let (Some(x), Some(y)) = (a.first(), b.first()) {
                assert_same_shape(x, y, &format!("{path}[0]"));
            }
        }
        (a, b) => assert_eq!(kind(a), kind(b), "type at {path}: ours {a}, vLLM {b}"),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Object keys in the order they appear in raw JSON text (`"key":` at any depth). Both sides'
/// string values here (filler words, ids, model names) contain no `":`.
fn key_sequence(raw: &str) -> Vec<&str> {
    let mut keys = Vec::new();
    let mut rest = raw;
    while let Some(i) = rest.find("\":") {
        let head = &rest[..i];
        if let Some(q) = head.rfind('"') {
            keys.push(&head[q + 1..]);
        }
        rest = &rest[i + 2..];
    }
    keys
}

/// Chunk `i` of the fixture stream against chunk `j` of ours.
fn assert_stream_shape(ours: &[String], fixture_name: &str) {
    let want = sse_events(&fixture_body(fixture_name));
    assert_eq!(ours.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(want.last().map(String::as_str), Some("[DONE]"));
    let o: Vec<Value> = ours[..ours.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let w: Vec<Value> = want[..want.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(o.len() >= 4 && w.len() >= 4);
    // first, second, last content chunk, usage chunk
    for (a, b, what) in [
        (0, 0, "first"),
        (1, 1, "second"),
        (o.len() - 2, w.len() - 2, "last content"),
        (o.len() - 1, w.len() - 1, "usage"),
    ] {
        assert_same_shape(&o[a], &w[b], &format!("{fixture_name} {what} chunk"));
        assert_eq!(
            key_sequence(&ours[a]),
            key_sequence(&want[b]),
            "key order of the {what} chunk of {fixture_name}"
        );
    }
    let id = o[0]["id"].as_str().unwrap();
    assert!(o.iter().all(|c| c["id"] == id), "one id per stream");
}

async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_LIMIT, f)
        .await
        .expect("test finished within its time limit");
}

#[tokio::test]
async fn response_shapes_match_vllm_fixtures() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), None).await;
        let a = srv.api_addr;

        let r = post(a, "/v1/completions", &serde_json::json!({"model":"tiny","prompt":"a b c","max_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("text/event-stream; charset=utf-8"));
        assert!(r.complete);
        assert_stream_shape(&r.events(), "completion_stream.txt");
        let first: Value = serde_json::from_str(&r.events()[0]).unwrap();
        assert!(first["id"].as_str().unwrap().starts_with("cmpl-"));
        assert_eq!(first["model"], "tiny");

        let chat = serde_json::json!({"model":"tiny","messages":[{"role":"user","content":"hi there"}],"max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}});
        let r = post(a, "/v1/chat/completions", &chat).await;
        assert_eq!(r.status, 200);
        assert_stream_shape(&r.events(), "chat_stream.txt");
        let ev = r.events();
        let first: Value = serde_json::from_str(&ev[0]).unwrap();
        assert_eq!(first["choices"][0]["delta"], serde_json::json!({"role":"assistant","content":""}));
        assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
        let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
        assert!(usage["system_fingerprint"].as_str().unwrap().starts_with("vllm-0.32.0-"));

        let mut cont = chat.clone();
        cont["stream_options"]["continuous_usage_stats"] = Value::Bool(true);
        let r = post(a, "/v1/chat/completions", &cont).await;
        assert_stream_shape(&r.events(), "chat_stream_continuous_usage.txt");
        // Continuous usage counts up 0, 1, 2, … completion tokens.
        let ev = r.events();
        for (i, e) in ev[..ev.len() - 2].iter().enumerate() {
            let c: Value = serde_json::from_str(e).unwrap();
            assert_eq!(c["usage"]["completion_tokens"], i, "chunk {i}");
            assert_eq!(c["usage"]["total_tokens"].as_u64().unwrap(), c["usage"]["prompt_tokens"].as_u64().unwrap() + i as u64);
        }

        let r = post(a, "/v1/completions", &serde_json::json!({"model":"tiny","prompt":"a b c","max_tokens":16,"ignore_eos":true})).await;
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_same_shape(&r.json(), &serde_json::from_str(&fixture_body("completion_nonstream.txt")).unwrap(), "completion");
        assert_eq!(key_sequence(r.text()), key_sequence(&fixture_body("completion_nonstream.txt")));

        let r = post(a, "/v1/chat/completions", &serde_json::json!({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"ignore_eos":true})).await;
        assert_same_shape(&r.json(), &serde_json::from_str(&fixture_body("chat_nonstream.txt")).unwrap(), "chat");
        assert_eq!(key_sequence(r.text()), key_sequence(&fixture_body("chat_nonstream.txt")));

        let r = http(a, "GET", "/v1/models", None, &[]).await;
        let models = r.json();
        assert_same_shape(&models, &serde_json::from_str(&fixture_body("models.json")).unwrap(), "models");
        assert_eq!(key_sequence(r.text()), key_sequence(&fixture_body("models.json")));
        assert_eq!(models["data"][0]["id"], "tiny");
        assert_eq!(models["data"][0]["max_model_len"], 2048);

        let r = http(a, "GET", "/version", None, &[]).await;
        assert_eq!(r.json(), serde_json::from_str::<Value>(&fixture_body("version.json")).unwrap());
        for path in ["/health", "/ping"] {
            let r = http(a, "GET", path, None, &[]).await;
            assert_eq!((r.status, r.body.len()), (200, 0), "{path}");
        }
        srv.shutdown().await;
    })
    .await;
}

/// Counts the content-bearing chunks of a stream and returns (count, usage, finish_reason).
fn tally(events: &[String]) -> (u64, Value, String) {
    let mut n = 0;
    let mut usage = Value::Null;
    let mut finish = String::new();
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        if let Some(choice) = c["choices"].get(0) {
            let text = choice
                .get("text")
                .or_else(|| choice["delta"].get("content"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if !text.is_empty() {
                n += 1;
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = f.to_string();
            }
        } else {
            usage = c["usage"].clone();
        }
    }
    (n, usage, finish)
}

#[tokio::test]
async fn streamed_tokens_equal_usage_and_ignore_eos_gives_max_tokens() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), None).await;
        let a = srv.api_addr;
        for (endpoint, max_tokens) in [("/v1/completions", 1), ("/v1/completions", 37), ("/v1/chat/completions", 64)] {
            let body = if endpoint == "/v1/completions" {
                serde_json::json!({"prompt":"one two three four","max_tokens":max_tokens,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})
            } else {
                serde_json::json!({"messages":[{"role":"user","content":"one two"}],"max_tokens":max_tokens,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})
            };
            let r = post(a, endpoint, &body).await;
            let (n, usage, finish) = tally(&r.events());
            assert_eq!(n, max_tokens, "{endpoint}");
            assert_eq!(usage["completion_tokens"], max_tokens, "{endpoint}");
            assert_eq!(finish, "length", "{endpoint}");
            if endpoint == "/v1/completions" {
                assert_eq!(usage["prompt_tokens"], 4);
            }
        }
        // Natural stops: "stop" before max_tokens, and the streamed count still equals usage.
        let mut stops = 0;
        for i in 0..20 {
            let body = serde_json::json!({"prompt":format!("request {i}"),"max_tokens":50,"stream":true,"stream_options":{"include_usage":true}});
            let (n, usage, finish) = tally(&post(a, "/v1/completions", &body).await.events());
            assert_eq!(usage["completion_tokens"], n);
            assert!((1..=50).contains(&n));
            if finish == "stop" {
                stops += 1;
                assert!(n <= 50);
            } else {
                assert_eq!((finish.as_str(), n), ("length", 50));
            }
        }
        // P(length) = 1/50 per request, so at least 15 of 20 stop naturally (P(fail) < 1e-6).
        assert!(stops >= 15, "{stops} natural stops");
        // Non-streaming: the text re-tokenises to completion_tokens (one word per token).
        let r = post(a, "/v1/completions", &serde_json::json!({"prompt":"x","max_tokens":23,"ignore_eos":true})).await;
        let v = r.json();
        assert_eq!(v["usage"]["completion_tokens"], 23);
        assert_eq!(headroom_sim::tokenize(v["choices"][0]["text"].as_str().unwrap()).len(), 23);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        srv.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn errors_match_vllm_fixtures_over_http() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), Some("sekrit")).await;
        let a = srv.api_addr;
        let auth = [("Authorization", "Bearer sekrit")];
        for (body, name) in [
            (r#"{"model":"tiny","prompt":"hello","max_tokens":4096}"#.to_string(), "error_max_tokens.txt"),
            (serde_json::json!({"model":"tiny","prompt":vec!["w"; 2100].join(" "),"max_tokens":5}).to_string(), "error_prompt_too_long.txt"),
            (r#"{"model":"nope","prompt":"hello"}"#.to_string(), "error_unknown_model.txt"),
        ] {
            let r = http(a, "POST", "/v1/completions", Some(&body), &auth).await;
            let text = fixture(name);
            let status: u16 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert_eq!(r.status, status, "{name}");
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(r.json(), serde_json::from_str::<Value>(&fixture_body(name)).unwrap(), "{name}");
        }
        let shape: Value = serde_json::from_str(&fixture_body("error_max_tokens.txt")).unwrap();
        for body in ["{not json", r#"{"prompt":"x","max_tokens":"many"}"#, r#"{"prompt":"x","n":3}"#, "[]"] {
            let r = http(a, "POST", "/v1/completions", Some(body), &auth).await;
            assert_eq!(r.status, 400, "{body}");
            let v = r.json();
            assert_eq!(v["error"]["code"], 400);
            // Same keys as vLLM's error; `param` may be null.
            let keys: Vec<&String> = v["error"].as_object().unwrap().keys().collect();
            assert_eq!(keys, shape["error"].as_object().unwrap().keys().collect::<Vec<_>>(), "{body}");
        }
        let r = http(a, "POST", "/v1/completions", Some(r#"{"prompt":"x"}"#), &[]).await;
        assert_eq!((r.status, r.json()), (401, serde_json::json!({"error":"Unauthorized"})));
        let r = http(a, "GET", "/health", None, &[]).await;
        assert_eq!(r.status, 200, "/health needs no key");
        let r = http(a, "GET", "/v2/nothing", None, &[]).await;
        assert_eq!(r.status, 404);
        assert_eq!(r.json()["error"]["code"], 404);
        srv.shutdown().await;
    })
    .await;
}

/// One sample: metric name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Parses a Prometheus text body, checking every line, and returns the samples.
fn parse_prom(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            assert!(
                line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                "bad comment line {line:?}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Vec::new()),
            Some((n, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
                let labels = body
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p
                            .split_once("=\"")
                            .unwrap_or_else(|| panic!("bad label in {line:?}"));
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (n.to_string(), labels)
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line:?}"
        );
        out.push((name, labels, value));
    }
    out
}

/// Sum of the samples named `name` whose labels include `want`.
fn sample(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| *v)
        .sum()
}

async fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let r = http(addr, "GET", "/metrics", None, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_prom(r.text())
}

#[tokio::test]
async fn metrics_counters_agree_with_requests_sent() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let (mut prompt_sum, mut gen_sum, mut length, mut stop) = (0.0, 0.0, 0.0, 0.0);
        for i in 0..12u32 {
            let words = 3 + i;
            let prompt = vec!["w"; words as usize].join(" ");
            let ignore = i % 3 != 0;
            let r = post(
                a,
                "/v1/completions",
                &serde_json::json!({"prompt":prompt,"max_tokens":5 + i,"ignore_eos":ignore}),
            )
            .await;
            let v = r.json();
            prompt_sum += f64::from(words);
            gen_sum += v["usage"]["completion_tokens"].as_f64().unwrap();
            match v["choices"][0]["finish_reason"].as_str().unwrap() {
                "length" => length += 1.0,
                _ => stop += 1.0,
            }
        }
        for _ in 0..3 {
            let r = post(
                a,
                "/v1/completions",
                &serde_json::json!({"prompt":"x","max_tokens":100000}),
            )
            .await;
            assert_eq!(r.status, 400);
        }
        let s = scrape(a).await;
        assert_eq!(sample(&s, "vllm:prompt_tokens_total", &[]), prompt_sum);
        assert_eq!(sample(&s, "vllm:generation_tokens_total", &[]), gen_sum);
        assert_eq!(
            sample(
                &s,
                "vllm:request_success_total",
                &[("finished_reason", "length")]
            ),
            length
        );
        assert_eq!(
            sample(
                &s,
                "vllm:request_success_total",
                &[("finished_reason", "stop")]
            ),
            stop
        );
        assert_eq!(
            sample(
                &s,
                "vllm:request_success_total",
                &[("finished_reason", "abort")]
            ),
            0.0
        );
        assert_eq!(
            sample(
                &s,
                "http_requests_total",
                &[
                    ("handler", "/v1/completions"),
                    ("method", "POST"),
                    ("status", "2xx")
                ]
            ),
            12.0
        );
        assert_eq!(
            sample(
                &s,
                "http_requests_total",
                &[
                    ("handler", "/v1/completions"),
                    ("method", "POST"),
                    ("status", "4xx")
                ]
            ),
            3.0
        );
        assert_eq!(
            sample(&s, "http_requests_total", &[("handler", "/metrics")]),
            0.0,
            "/metrics is not counted"
        );

        let d = http(srv.dcgm_addr, "GET", "/metrics", None, &[]).await;
        assert_eq!(d.status, 200);
        let ds = parse_prom(d.text());
        assert!(
            ds.iter().any(|(n, _, _)| n == "DCGM_FI_DEV_GPU_UTIL"),
            "dcgm body has DCGM_FI_DEV_GPU_UTIL"
        );
        srv.shutdown().await;
    })
    .await;
}

/// Polls `/metrics` until nothing runs or waits and `vllm:generation_tokens_total` holds still
/// for 200 ms (at most 10 s); returns that total.
async fn wait_idle(addr: SocketAddr) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = scrape(addr).await;
        let busy = sample(&m, "vllm:num_requests_running", &[])
            + sample(&m, "vllm:num_requests_waiting", &[]);
        let generated = sample(&m, "vllm:generation_tokens_total", &[]);
        if busy == 0.0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if sample(&scrape(addr).await, "vllm:generation_tokens_total", &[]) == generated {
                return generated;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the engine is still busy after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn client_disconnect_stops_the_request_uncounted() {
    bounded(async {
        // Real step times (A10G + Qwen2.5-3B): a 2,000-token answer takes tens of seconds.
        let srv = start(spec(1.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let body = serde_json::json!({"model":"tiny","prompt":"tell me a long story","max_tokens":2000,"ignore_eos":true,"stream":true}).to_string();
        let mut s = TcpStream::connect(a).await.unwrap();
        let req = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(6).any(|w| w == b"data: ") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "stream ended early");
            got.extend_from_slice(&buf[..n]);
        }
        drop(s);
        // vLLM 0.32 (measured live, scripts/conformance/vllm.sh `cancel`): the request stops
        // generating and leaves the running set, is counted in no finished_reason, and keeps the
        // TTFT it already observed.
        let generated = wait_idle(a).await;
        assert!(generated > 0.0 && generated < 200.0, "generated {generated} of 2000 tokens");
        let m = scrape(a).await;
        assert_eq!(sample(&m, "vllm:request_success_total", &[]), 0.0);
        assert_eq!(sample(&m, "vllm:e2e_request_latency_seconds_count", &[]), 0.0);
        assert_eq!(sample(&m, "vllm:time_to_first_token_seconds_count", &[]), 1.0);

        // A non-streaming client that gives up is cancelled too.
        let body = serde_json::json!({"prompt":"another long one","max_tokens":2000,"ignore_eos":true}).to_string();
        let mut s = TcpStream::connect(a).await.unwrap();
        let req = format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        s.write_all(req.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(s);
        let generated2 = wait_idle(a).await;
        assert!(generated2 < generated + 200.0, "generated {} of 2000 tokens", generated2 - generated);
        assert_eq!(sample(&scrape(a).await, "vllm:request_success_total", &[]), 0.0);
        srv.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn server_errors_are_injected_at_their_rates() {
    bounded(async {
        let faults = Faults {
            seed: Some(5),
            error_500_rate: 0.2,
            error_503_rate: 0.1,
            ..Faults::default()
        };
        let srv = start(spec(0.0), faults, None).await;
        let a = srv.api_addr;
        let n = 400;
        let (mut e500, mut e503, mut ok) = (0u32, 0u32, 0u32);
        for _ in 0..n {
            let r = post(
                a,
                "/v1/completions",
                &serde_json::json!({"prompt":"x","max_tokens":1}),
            )
            .await;
            match r.status {
                200 => ok += 1,
                500 | 503 => {
                    let v = r.json();
                    assert_eq!(v["error"]["code"], r.status);
                    assert_eq!(
                        v["error"]["type"],
                        if r.status == 500 {
                            "InternalServerError"
                        } else {
                            "ServiceUnavailableError"
                        }
                    );
                    if r.status == 500 {
                        e500 += 1
                    } else {
                        e503 += 1
                    }
                }
                s => panic!("unexpected status {s}"),
            }
        }
        // Binomial(400, p): sd = 8.0 (p=0.2) and 6.0 (p=0.1); allow 4 sd.
        assert!((f64::from(e500) - 80.0).abs() <= 32.0, "500s: {e500}");
        assert!((f64::from(e503) - 40.0).abs() <= 24.0, "503s: {e503}");
        let s = scrape(a).await;
        // The engine never saw the injected errors; the HTTP counter did.
        assert_eq!(sample(&s, "vllm:request_success_total", &[]), f64::from(ok));
        assert_eq!(
            sample(
                &s,
                "http_requests_total",
                &[("handler", "/v1/completions"), ("status", "5xx")]
            ),
            f64::from(e500 + e503)
        );
        srv.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn stream_faults_stall_cut_and_delay_at_their_rates() {
    bounded(async {
        let faults = Faults {
            seed: Some(9),
            stall_rate: 0.5,
            stall_s: 0.4,
            disconnect_rate: 0.3,
            slow_start_rate: 0.5,
            slow_start_s: 0.4,
            ..Faults::default()
        };
        let srv = start(spec(0.0), faults, None).await;
        let a = srv.api_addr;
        let n = 80;
        let mut tasks = Vec::new();
        for i in 0..n {
            tasks.push(tokio::spawn(async move {
                let sent = Instant::now();
                let body = serde_json::json!({"prompt":format!("p {i}"),"max_tokens":20,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}});
                let r = post(a, "/v1/completions", &body).await;
                (sent, r)
            }));
        }
        let (mut cut, mut stalled, mut slow) = (0u32, 0u32, 0u32);
        for t in tasks {
            let (sent, r) = t.await.unwrap();
            assert_eq!(r.status, 200);
            let events = r.events();
            let done = events.last().map(String::as_str) == Some("[DONE]");
            if !done {
                cut += 1;
                assert!(!r.complete, "a cut stream has no terminating chunk");
            } else {
                assert_eq!(tally(&events).0, 20);
            }
            // TTFT: first content event (completions have no role chunk).
            if r.event_times.first().is_some_and(|t| *t - sent >= Duration::from_millis(350)) {
                slow += 1;
            }
            if r.event_times.windows(2).any(|w| w[1] - w[0] >= Duration::from_millis(350)) {
                stalled += 1;
            }
        }
        // Binomial(80, p): sd = 4.1 (p=0.3) and 4.5 (p=0.5); allow 4 sd. Stalls only show in
        // streams that reach the stall point, so they are counted among all streams loosely.
        assert!((f64::from(cut) - 24.0).abs() <= 17.0, "cut: {cut}");
        assert!((f64::from(slow) - 40.0).abs() <= 18.0, "slow: {slow}");
        assert!((10..=58).contains(&stalled), "stalled: {stalled}");
        // A cut stream is, to the engine, a client that went away: vLLM 0.32 counts it in no
        // finished_reason, unless the zero-latency engine had already generated all of it
        // (then it finished as `length` before the cut).
        wait_idle(a).await;
        let s = scrape(a).await;
        let length = sample(&s, "vllm:request_success_total", &[("finished_reason", "length")]);
        assert_eq!(sample(&s, "vllm:request_success_total", &[]), length, "only `length` is counted");
        assert!(length >= f64::from(n - cut) && length <= f64::from(n), "length {length}, n {n}, cut {cut}");
        srv.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn many_concurrent_streams_complete() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let mut tasks = Vec::new();
        for i in 0..300 {
            tasks.push(tokio::spawn(async move {
                let body = serde_json::json!({"prompt":format!("stream {i}"),"max_tokens":30,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}});
                tally(&post(a, "/v1/completions", &body).await.events())
            }));
        }
        for t in tasks {
            let (n, usage, finish) = t.await.unwrap();
            assert_eq!((n, usage["completion_tokens"].as_u64(), finish.as_str()), (30, Some(30), "length"));
        }
        srv.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn wall_clock_delivery_matches_the_engine_clock() {
    bounded(async {
        // Real step times: the client-side E2E of one stream must equal the engine's own
        // `vllm:e2e_request_latency_seconds` (arrival → last token on the engine clock) up to
        // scheduling jitter; a driver that delivered early, late, or scaled time twice would
        // miss by a whole step or more.
        let srv = start(spec(1.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let sent = Instant::now();
        let r = post(a, "/v1/completions", &serde_json::json!({"prompt":"time me","max_tokens":40,"ignore_eos":true,"stream":true})).await;
        let client_e2e = (*r.event_times.last().unwrap() - sent).as_secs_f64();
        let client_ttft = (r.event_times[0] - sent).as_secs_f64();
        assert_eq!(tally(&r.events()).0, 40);
        let s = scrape(a).await;
        let server_e2e = sample(&s, "vllm:e2e_request_latency_seconds_sum", &[]);
        let server_ttft = sample(&s, "vllm:time_to_first_token_seconds_sum", &[]);
        assert_eq!(sample(&s, "vllm:e2e_request_latency_seconds_count", &[]), 1.0);
        // 40 decode steps of an A10G + Qwen2.5-3B take several hundred ms.
        assert!(server_e2e > 0.2, "server e2e {server_e2e}");
        // The client can only be later than the engine (network, parsing): allow 5 ms early
        // for clock granularity and 150 ms late for a loaded shared machine.
        assert!(client_e2e >= server_e2e - 0.005 && client_e2e <= server_e2e + 0.15, "client e2e {client_e2e} vs server {server_e2e}");
        assert!(client_ttft >= server_ttft - 0.005 && client_ttft <= server_ttft + 0.15, "client ttft {client_ttft} vs server {server_ttft}");
        srv.shutdown().await;
    })
    .await;
}

/// `--enable-per-request-metrics`: the final chunk carries the request's own engine queue time.
/// With `max_num_seqs` 1, a request sent while another runs waits for it: its queue time is at
/// least the first one's decode time, and the first waits less than one step; the sum of both
/// equals the engine's `vllm:request_queue_time_seconds_sum`.
#[tokio::test]
async fn per_request_metrics_report_each_requests_queue_time() {
    bounded(async {
        let mut sp = spec(1.0);
        sp.max_num_seqs = Some(1);
        sp.enable_per_request_metrics = true;
        let srv = start(sp, Faults::default(), None).await;
        let a = srv.api_addr;
        let body = serde_json::json!({"prompt":"one two three","max_tokens":12,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}});
        let first = tokio::spawn({
            let body = body.clone();
            async move { post(a, "/v1/completions", &body).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        let second = post(a, "/v1/completions", &body).await;
        let first = first.await.unwrap();
        let q = |r: &Resp| -> f64 {
            let ev = r.events();
            let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
            usage["metrics"]["queue_time_ms"].as_f64().expect("metrics.queue_time_ms")
        };
        let (q1, q2) = (q(&first), q(&second));
        // 12 tokens at ~16 ms (A10G, Qwen2.5-3B) ≈ 190 ms of decode; the second arrived 60 ms in.
        assert!(q1 < 50.0, "first waited {q1} ms");
        assert!(q2 > 80.0, "second waited only {q2} ms behind a 12-token request");
        let metrics = post_get_metrics(a).await;
        let sum: f64 = metrics
            .lines()
            .find(|l| l.starts_with("vllm:request_queue_time_seconds_sum"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!((sum * 1e3 - (q1 + q2)).abs() < 0.01, "histogram sum {sum} s vs {q1} + {q2} ms");
        srv.shutdown().await;
    })
    .await;
}

async fn post_get_metrics(a: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

/// On the wall clock the twin keeps the modelled step timeline: a request's tokens arrive one
/// modelled step apart on average, and the driver's wake-up jitter (tokio's timer rounds every
/// deadline up to its 1 ms tick) does not add up step after step. Regression: each step used to
/// start when the driver woke, so ~0.5–1 ms was added to every step (+3–6 % ITL on the A10G
/// preset), and the sweep warned "ran behind real time" on an idle host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_steps_keep_the_modelled_timeline() {
    bounded(async {
        // Steps a quarter of the A10G preset's (~4 ms): tokio's ~1 ms rounding, if it added up,
        // would be +12–25 %, far outside the tolerance below, while a host busy enough to wake
        // the driver more than 50 ms late (which restarts the timeline) stays rare.
        let srv = start(spec(0.25), Faults::default(), None).await;
        let n_tokens = 150u64;
        let body = serde_json::json!({
            "model": "tiny", "prompt": "hello there", "max_tokens": n_tokens,
            "ignore_eos": true, "stream": true,
        });
        let r = post(srv.api_addr, "/v1/completions", &body).await;
        assert_eq!(r.status, 200);
        let lag = srv.clock_lag();
        let (step_s, late_s) = (lag.step_s, lag.late_s);
        // One prefill step and a decode step per further token (plus, with async scheduling,
        // possibly one step that finishes the request).
        assert!((n_tokens..=n_tokens + 1).contains(&lag.steps), "{} steps", lag.steps);
        // One prefill step and n − 1 decode steps slept; the content events (all but the final
        // `[DONE]`) arrive one step apart, so n − 1 gaps span the n − 1 decode steps.
        let t = &r.event_times;
        assert!(t.len() as u64 > n_tokens, "{} events", t.len());
        let span = (t[n_tokens as usize - 1] - t[0]).as_secs_f64();
        let modelled_step = step_s / lag.steps as f64;
        let observed_step = span / (n_tokens - 1) as f64;
        let excess = observed_step / modelled_step - 1.0;
        eprintln!(
            "modelled step {:.3} ms, observed {:.3} ms ({:+.2} %), driver late {:.1} ms over {:.3} s",
            modelled_step * 1e3,
            observed_step * 1e3,
            excess * 100.0,
            late_s * 1e3,
            step_s
        );
        assert!(
            excess.abs() < 0.08,
            "tokens arrive {:+.2} % off the modelled step",
            excess * 100.0
        );
        srv.shutdown().await;
    })
    .await;
}

/// Reads until the server closes the connection (EOF or reset); the time it took from `t0`.
async fn until_closed(s: &mut TcpStream, t0: Instant) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return t0.elapsed(),
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn idle_and_trickling_connections_close_after_5_s_but_long_requests_do_not() {
    // uvicorn's --timeout-keep-alive (5 s), which vLLM keeps: see server::KEEP_ALIVE_TIMEOUT.
    bounded(async {
        let srv = start(spec(1.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let within = |what: &str, d: Duration| {
            assert!(
                d >= Duration::from_millis(4500) && d <= Duration::from_millis(7500),
                "{what}: closed after {d:?}, expected about 5 s"
            );
        };
        // 1. A connection that never sends a byte.
        let silent = async {
            let t0 = Instant::now();
            let mut s = TcpStream::connect(a).await.unwrap();
            within("silent connection", until_closed(&mut s, t0).await);
        };
        // 2. A keep-alive connection after one response: closed 5 s after the response.
        let keep_alive = async {
            let mut s = TcpStream::connect(a).await.unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                assert_eq!(s.read(&mut b).await.unwrap(), 1, "response head");
                head.push(b[0]);
            }
            let head = String::from_utf8(head).unwrap();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head.to_ascii_lowercase().contains("content-length: 0"), "{head}");
            within("idle keep-alive", until_closed(&mut s, Instant::now()).await);
        };
        // 3. A request head trickled a byte every 250 ms (it would take 15 s to complete).
        let trickle = async {
            let t0 = Instant::now();
            let s = TcpStream::connect(a).await.unwrap();
            let (mut r, mut w) = s.into_split();
            let writer = tokio::spawn(async move {
                let head = format!("GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "p".repeat(30));
                for byte in head.bytes() {
                    if w.write_all(&[byte]).await.is_err() {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                true
            });
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf).await;
            let d = t0.elapsed();
            within("trickled head", d);
            assert!(
                !String::from_utf8_lossy(&buf).contains(" 200 "),
                "no response to a head that never completed in time: {buf:?}"
            );
            writer.abort();
        };
        // 4. Requests longer than 5 s run to the end: ~16 ms per token on an A10G for 450 tokens.
        let long_stream = async {
            let t0 = Instant::now();
            let r = post(a, "/v1/completions", &serde_json::json!({"prompt":"a b c","max_tokens":450,"ignore_eos":true,"stream":true})).await;
            let d = t0.elapsed();
            assert_eq!(r.status, 200);
            assert!(d > Duration::from_millis(5500), "the stream took only {d:?}");
            let events = r.events();
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            assert_eq!(tally(&events).0, 450);
        };
        let long_plain = async {
            let t0 = Instant::now();
            let r = post(a, "/v1/completions", &serde_json::json!({"prompt":"d e f","max_tokens":450,"ignore_eos":true})).await;
            assert_eq!(r.status, 200);
            assert!(t0.elapsed() > Duration::from_millis(5500), "{:?}", t0.elapsed());
            assert_eq!(r.json()["usage"]["completion_tokens"], 450);
        };
        tokio::join!(silent, keep_alive, trickle, long_stream, long_plain);
        srv.shutdown().await;
    })
    .await;
}

/// `ServerConfig::first_chunk_probe` fires once per streaming request, with its `X-Request-Id`,
/// between the client's send and the client's first byte; its engine-side span (first chunk −
/// received) adds up to the engine's own `vllm:time_to_first_token_seconds` for those requests.
/// A non-streaming request does not fire it.
#[tokio::test]
async fn first_chunk_probe_brackets_each_streaming_requests_engine_ttft() {
    use std::sync::{Arc, Mutex};
    type Seen = Arc<Mutex<Vec<(Option<String>, Instant, Instant)>>>;
    bounded(async {
        let seen: Seen = Arc::default();
        let cfg = ServerConfig {
            port: 0,
            dcgm_port: Some(0),
            spec: spec(1.0),
            first_chunk_probe: Some(headroom_sim::server::FirstChunkProbe(Arc::new({
                let seen = seen.clone();
                move |id: Option<&str>, received, first| {
                    seen.lock()
                        .unwrap()
                        .push((id.map(str::to_owned), received, first))
                }
            }))),
            ..ServerConfig::default()
        };
        let srv = serve(cfg).await.expect("server starts");
        let a = srv.api_addr;
        let plain = r#"{"prompt":"one two","max_tokens":5,"ignore_eos":true}"#;
        let r = http(a, "POST", "/v1/completions", Some(plain), &[]).await;
        assert_eq!(r.status, 200);
        assert!(
            seen.lock().unwrap().is_empty(),
            "a non-streaming request fired the probe"
        );
        let ttft_sum = |s: &[Sample]| sample(s, "vllm:time_to_first_token_seconds_sum", &[]);
        let before = ttft_sum(&scrape(a).await);
        let streaming = r#"{"prompt":"one two","max_tokens":5,"ignore_eos":true,"stream":true}"#;
        let mut client = Vec::new();
        for id in [Some("req-a"), Some("req-b"), None] {
            let headers: Vec<(&str, &str)> = id.map(|v| ("X-Request-Id", v)).into_iter().collect();
            let sent = Instant::now();
            let r = http(a, "POST", "/v1/completions", Some(streaming), &headers).await;
            assert_eq!(r.status, 200);
            client.push((id, sent, r.event_times[0]));
        }
        let after = ttft_sum(&scrape(a).await);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "one call per streaming request: {seen:?}");
        let mut engine_sum = 0.0;
        for ((id, sent, first_byte), (pid, received, first_chunk)) in client.iter().zip(&seen) {
            assert_eq!(pid.as_deref(), *id);
            assert!(sent <= received && received <= first_chunk && first_chunk <= first_byte);
            engine_sum += (*first_chunk - *received).as_secs_f64();
        }
        // A prefill step of an A10G + Qwen2.5-3B is several ms; the probe and the engine clock
        // may differ by the driver's delivery jitter, 3 ms per request at most.
        let want = after - before;
        assert!(want > 0.003, "engine TTFT sum {want}");
        assert!(
            (engine_sum - want).abs() < 0.009,
            "probe spans {engine_sum} s vs engine TTFT {want} s"
        );
        srv.shutdown().await;
    })
    .await;
}

/// A body over the twin's limit is answered in vLLM's JSON error shape (its `HTTPException`
/// handler's), not as plain text.
#[tokio::test]
async fn an_oversized_body_is_a_json_413() {
    let srv = start(spec(0.0), Faults::default(), None).await;
    let addr = srv.api_addr;
    let fut = async {
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut s, mut w) = s.into_split();
        let len = 65 << 20;
        // Written while the answer is read: the twin may answer, and close, before the end.
        let writer = tokio::spawn(async move {
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
            );
            w.write_all(head.as_bytes()).await?;
            let chunk = vec![b' '; 1 << 20];
            for _ in 0..65 {
                w.write_all(&chunk).await?;
            }
            Ok::<_, std::io::Error>(w)
        });
        // The twin answers before the body arrives and may keep waiting for it: read the
        // head and its content-length, not to EOF.
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
            let done = text.split_once("\r\n\r\n").is_some_and(|(head, body)| {
                head.split("content-length: ")
                    .nth(1)
                    .and_then(|l| l.lines().next()?.trim().parse::<usize>().ok())
                    .is_some_and(|len| body.len() >= len)
            });
            if n == 0 || done {
                break;
            }
        }
        let _ = writer.await;
        parse_response(&raw, Vec::new())
    };
    let r = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("answered within 10 s");
    assert_eq!(r.status, 413);
    let v: Value = serde_json::from_slice(&r.body).expect("a JSON body");
    assert_eq!(v["error"]["code"], 413);
    assert_eq!(v["error"]["type"], "Request Entity Too Large");
    assert!(v["error"]["param"].is_null());
    assert!(v["error"]["message"].as_str().unwrap().contains("64 MiB"));
}

/// However many method names clients invent, `http_requests_total` gets one `method` value for
/// them (`OTHER`); the answers stay vLLM's 404 / 405 JSON.
#[tokio::test]
async fn invented_methods_share_one_label_value() {
    let srv = start(spec(0.0), Faults::default(), None).await;
    let addr = srv.api_addr;
    bounded(async {
        for i in 0..50 {
            let m = format!("BREW{i}");
            let r = http(addr, &m, "/v1/completions", None, &[]).await;
            assert_eq!(r.status, 405, "{m}");
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(v["error"]["code"], 405);
            let r = http(addr, &m, "/nowhere", None, &[]).await;
            assert_eq!(r.status, 404, "{m}");
        }
        let r = http(addr, "GET", "/metrics", None, &[]).await;
        let text = String::from_utf8_lossy(&r.body).into_owned();
        let methods: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| l.starts_with("http_requests_total{"))
            .filter_map(|l| l.split("method=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(methods, ["OTHER"].into_iter().collect(), "{text}");
        assert!(text.contains(
            r#"http_requests_total{handler="/v1/completions",method="OTHER",status="4xx"} 50.0"#
        ));
        assert!(
            text.contains(
                r#"http_requests_total{handler="none",method="OTHER",status="4xx"} 50.0"#
            )
        );
    })
    .await;
}

/// `POST /tokenize` counts as the completions and chat endpoints count a prompt (their `usage`
/// is the check), in vLLM's answer shape; an unknown model is vLLM's 404.
#[tokio::test]
async fn tokenize_counts_as_usage_does() {
    bounded(async {
        let srv = start(spec(0.0), Faults::default(), None).await;
        let a = srv.api_addr;
        let t = post(a, "/tokenize", &serde_json::json!({"prompt": "one two three four"})).await;
        assert_eq!(t.status, 200);
        let v = t.json();
        assert_eq!(v["count"], 4);
        assert_eq!(v["tokens"].as_array().unwrap().len(), 4);
        assert_eq!(v["max_model_len"], 2048);
        let msgs = serde_json::json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two"}]);
        let t = post(a, "/tokenize", &serde_json::json!({"messages": msgs})).await;
        let chat = post(
            a,
            "/v1/chat/completions",
            &serde_json::json!({"messages": msgs, "max_tokens": 1, "stream": true, "stream_options": {"include_usage": true}}),
        )
        .await;
        let (_, usage, _) = tally(&chat.events());
        assert_eq!(t.json()["count"], usage["prompt_tokens"]);
        let t = post(a, "/tokenize", &serde_json::json!({"model": "nope", "prompt": "x"})).await;
        assert_eq!(t.status, 404);
    })
    .await;
}
