//! `headroom diagnose` with the user's view: the engine twin behind the real gateway (both
//! in-process on loopback), a long-context class admitted one request at a time so that its
//! gateway queue dominates TTFT, and the binary judging it live (`--url … --gateway …`) and
//! from a real Prometheus scraping both (`--prometheus … --range 1m`, no gateway flag).
//!
//! Expected values come from outside the code under test: the gateway's TTFT p95 is computed
//! here from the raw `/metrics` text with PromQL's `histogram_quantile` interpolation, and, for
//! the Prometheus case, by Prometheus itself.

use headroom_gateway::{GatewayConfig, GatewayFile, GatewayHandle, start};
use headroom_sim::server::{ServerConfig, ServerHandle, serve};
use headroom_testkit::{Killed, prometheus_bin, prometheus_port};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// 300 ms TTFT for the long-context class: a bucket bound of the gateway (it is given the SLO),
/// not of vLLM (0.25 s, 0.5 s).
const SLO: &str = "objectives:\n  \"*\": {ttft: {p95: 300ms}, error_rate: 1%}\n  long_context: {ttft: {p95: 300ms}, error_rate: 1%}\nbudget: {window: 7d, target: 99%}\n";

/// Prompts of at least 200 estimated tokens are `long_context`, admitted one at a time, with
/// room for every request of the test in the queue.
const GATEWAY_YAML: &str = "classes:\n  - {name: long_context, prompt_tokens: {min: 200}, concurrency: {limit: 1, queue: 64, queue_timeout: 60s}}\n";

/// Requests sent at once: more than the 20 a p95 needs on both views.
const REQUESTS: usize = 24;

async fn twin() -> ServerHandle {
    serve(ServerConfig {
        port: 0,
        ..ServerConfig::default()
    })
    .await
    .expect("the engine twin starts")
}

async fn gateway(upstream: SocketAddr) -> GatewayHandle {
    let file = GatewayFile::parse(GATEWAY_YAML, Path::new("gateway.yaml")).expect("parses");
    let slo = headroom_core::SloFile::parse(SLO, Path::new("slo.yaml")).expect("slo parses");
    let cfg = GatewayConfig::resolve(
        "127.0.0.1:0".parse().unwrap(),
        &[format!("http://{upstream}")],
        file,
        "gateway.yaml",
        Some(slo),
    )
    .expect("gateway config resolves");
    start(cfg).await.expect("the gateway starts")
}

/// One streamed completion of a 250-word prompt (about 300 tokens by the gateway's estimate) through `addr`; waits for the whole answer.
async fn long_stream(addr: SocketAddr, i: usize) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = serde_json::json!({
        "prompt": format!("{i} {}", "abcd ".repeat(250)),
        "max_tokens": 16,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut resp))
        .await
        .map_err(|_| std::io::Error::other("timeout"))??;
    if resp.starts_with(b"HTTP/1.1 200") && resp.windows(6).any(|w| w == b"[DONE]") {
        Ok(())
    } else {
        Err(std::io::Error::other(
            String::from_utf8_lossy(&resp[..resp.len().min(300)]).into_owned(),
        ))
    }
}

/// [`REQUESTS`] long-context streams sent at once through the gateway; all must succeed.
async fn load(gw: SocketAddr) {
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| tokio::spawn(long_stream(gw, i)))
        .collect();
    for t in tasks {
        t.await
            .unwrap()
            .expect("a long-context stream through the gateway");
    }
}

/// `GET path` on loopback (HTTP/1.1, `Connection: close`), the body.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap()
}

/// PromQL's `histogram_quantile(q, …)` over the `…_bucket` lines of `family` whose labels
/// contain `class="<class>"`, summed by `le`, from a Prometheus text body: linear within the
/// bucket holding rank `q × total`, from 0 in the first bucket, the highest finite bound when
/// the rank falls into `+Inf`.
fn histogram_quantile(text: &str, family: &str, class: &str, q: f64) -> f64 {
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    let needle = format!("class=\"{class}\"");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&format!("{family}_bucket{{")) else {
            continue;
        };
        if !rest.contains(&needle) {
            continue;
        }
        let le = rest
            .split("le=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        match by_le.iter_mut().find(|(l, _)| *l == le) {
            Some((_, c)) => *c += v,
            None => by_le.push((le, v)),
        }
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = by_le.last().expect("buckets").1;
    let rank = q * total;
    let i = by_le.iter().position(|(_, c)| *c >= rank).unwrap();
    if by_le[i].0.is_infinite() {
        return by_le[i - 1].0;
    }
    let (lo, below) = if i == 0 { (0.0, 0.0) } else { by_le[i - 1] };
    let (hi, count) = by_le[i];
    lo + (hi - lo) * (rank - below) / (count - below)
}

fn headroom(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().expect("run headroom")
}

fn json(o: &Output) -> Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The diagnosis of `class` (one object, or one of an array).
fn of_class(v: &Value, class: &str) -> Value {
    let all = match v.as_array() {
        Some(a) => a.clone(),
        None => vec![v.clone()],
    };
    all.into_iter()
        .find(|d| d["class"] == class)
        .unwrap_or_else(|| panic!("no diagnosis of class {class}: {v:#}"))
}

fn by_id(list: &Value, id: &str) -> Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {list:#}"))
        .clone()
}

/// What every test checks of the long-context class's diagnosis: TTFT FAIL on the gateway's
/// histogram at `expected_p95` s, PASS on the engine's, FAIL holding with the disagreement
/// said, and the gateway queue named as the largest part of the gap.
fn check_long_context(d: &Value, expected_p95: f64) {
    let views = by_id(&d["views"], "ttft_p95");
    eprintln!("ttft_p95 views: {views:#}");
    let gw = &views["gateway"];
    assert_eq!(gw["verdict"], "FAIL", "{views:#}");
    assert_eq!(views["engine"]["verdict"], "PASS", "{views:#}");
    assert_eq!(views["verdict"], "FAIL");
    assert_eq!(views["agree"], false);
    let observed = gw["observed"].as_f64().unwrap();
    assert!(
        (observed - expected_p95).abs() <= 1e-9 * expected_p95.max(1.0),
        "gateway TTFT p95 {observed} vs {expected_p95} computed from the gateway's buckets"
    );
    assert!(
        gw["reason"]
            .as_str()
            .unwrap()
            .contains("headroom_gateway_ttft_seconds"),
        "{gw}"
    );
    // The objective that holds is the gateway's, and says both views.
    let held = by_id(&d["objectives"], "ttft_p95");
    assert_eq!(held["verdict"], "FAIL");
    assert_eq!(held["observed"].as_f64(), Some(observed));
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .contains("the two views disagree"),
        "{held}"
    );
    assert_eq!(d["verdict"], "FAIL");
    // The gap: the gateway's queue is most of it.
    let at = &views["gap"]["at_percentile"];
    let queue = at["gateway_queue_s"].as_f64().unwrap();
    let engine = at["engine_s"].as_f64().unwrap();
    assert!(queue > 0.8 * observed, "queue {queue} of {observed}: {at}");
    assert!(engine < 0.3, "engine TTFT p95 {engine}");
    let mean = &views["gap"]["mean"];
    let parts: f64 = [
        "engine_s",
        "gateway_queue_s",
        "gateway_overhead_s",
        "other_s",
    ]
    .iter()
    .map(|k| mean[*k].as_f64().unwrap())
    .sum();
    assert!(
        (parts - mean["gateway_s"].as_f64().unwrap()).abs() < 1e-9,
        "{mean}"
    );
    let notes: Vec<&str> = d["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("TTFT p95")
            && n.contains("largest: the gateway's admission queue")),
        "{notes:#?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("every class together")),
        "{notes:#?}"
    );
    // No request failed at the gateway.
    assert_eq!(
        by_id(&d["views"], "error_rate")["gateway"]["verdict"],
        "PASS"
    );
}

/// Live: `diagnose --url ENGINE --gateway GATEWAY` judges the long-context class's TTFT FAIL on
/// the gateway's histogram, while the engine alone passes it. Bounded: 24 requests of 16
/// tokens, 90 s overall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_gateway_view_fails_what_the_engine_passes() {
    tokio::time::timeout(Duration::from_secs(90), live())
        .await
        .expect("finished within 90 s");
}

async fn live() {
    let twin = twin().await;
    let gw = gateway(twin.api_addr).await;
    let (api, gaddr) = (twin.api_addr, gw.addr);
    load(gaddr).await;
    let dir = tempfile::tempdir().unwrap();
    let slo = dir.path().join("slo.yaml");
    std::fs::write(&slo, SLO).unwrap();
    let slo = slo.display().to_string();
    let args = move |gateway: bool, format: &str| -> Vec<String> {
        let mut v: Vec<String> = [
            "diagnose",
            "--url",
            &format!("http://{api}/metrics"),
            "--duration",
            "0s",
            "--slo",
            &slo,
            "--format",
            format,
        ]
        .map(str::to_owned)
        .to_vec();
        if gateway {
            v.extend(["--gateway".to_owned(), format!("http://{gaddr}/metrics")]);
        } else {
            v.extend(["--class".to_owned(), "long_context".to_owned()]);
        }
        v
    };
    let (with, alone, text) = tokio::task::spawn_blocking(move || {
        (
            headroom(&args(true, "json")),
            headroom(&args(false, "json")),
            headroom(&args(true, "terminal")),
        )
    })
    .await
    .unwrap();
    let raw = tokio::task::spawn_blocking(move || http_get(&gaddr.to_string(), "/metrics"))
        .await
        .unwrap();
    gw.shutdown().await;
    twin.shutdown().await;
    let expected = histogram_quantile(&raw, "headroom_gateway_ttft_seconds", "long_context", 0.95);
    eprintln!("gateway TTFT p95 from its /metrics: {expected} s");
    let v = json(&with);
    // Only the long-context class saw traffic.
    assert!(v.is_object(), "one class with traffic: {v:#}");
    let d = of_class(&v, "long_context");
    assert_eq!(d["source"]["kind"], "url");
    assert!(
        d["source"]["location"]
            .as_str()
            .unwrap()
            .contains(&gaddr.to_string()),
        "{}",
        d["source"]
    );
    check_long_context(&d, expected);
    // The engine's view alone passes the same objective.
    let alone = json(&alone);
    assert_eq!(by_id(&alone["objectives"], "ttft_p95")["verdict"], "PASS");
    assert!(alone.get("views").is_none());
    // The terminal shows both views and the gap.
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    eprintln!("{text}");
    assert!(text.contains("Two views"), "{text}");
    assert!(text.contains("disagree"), "{text}");
    assert!(text.contains("the gateway's admission queue"), "{text}");
}

/// Prometheus: a real Prometheus scraping the twin and the gateway every second;
/// `diagnose --prometheus URL --range 1m` finds the gateway's series with no flag and judges
/// as above, its figure the one Prometheus' own `histogram_quantile` gives. Skipped loudly
/// without the binary unless `HEADROOM_REQUIRE_PROMTOOL` is set. Bounded: 120 s overall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_finds_the_gateway_series_by_name() {
    let Some(bin) = prometheus_bin("`diagnose --prometheus` with a gateway's series") else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(120), with_prometheus(bin))
        .await
        .expect("finished within 120 s");
}

/// An instant query's first value, or `None`.
fn prom_value(port: u16, expr: &str, at: Option<f64>) -> Option<f64> {
    let mut enc = String::new();
    for b in expr.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            enc.push(b as char);
        } else {
            enc.push_str(&format!("%{b:02X}"));
        }
    }
    let time = at.map(|t| format!("&time={t:.3}")).unwrap_or_default();
    let body = http_get(
        &format!("127.0.0.1:{port}"),
        &format!("/api/v1/query?query={enc}{time}"),
    );
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

async fn with_prometheus(bin: PathBuf) {
    let twin = twin().await;
    let gw = gateway(twin.api_addr).await;
    let (api, gaddr) = (twin.api_addr, gw.addr);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: vllm\n    static_configs: [{{targets: ['{api}']}}]\n  - job_name: gateway\n    static_configs: [{{targets: ['{gaddr}']}}]\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("prometheus.log");
    let _prom = Killed(
        Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start prometheus"),
    );
    let port = tokio::task::spawn_blocking({
        let log = log.clone();
        move || prometheus_port(&log)
    })
    .await
    .unwrap();
    // Both targets scraped idle first, so every counter's first sample is 0.
    let waited = std::time::Instant::now();
    while tokio::task::spawn_blocking(move || prom_value(port, "sum(up)", None))
        .await
        .unwrap()
        != Some(2.0)
    {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "Prometheus did not scrape both targets within 30 s; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    load(gaddr).await;
    // Wait until Prometheus has scraped every request's end at the gateway.
    let waited = std::time::Instant::now();
    let done = r#"sum(headroom_gateway_ttft_seconds_count{class="long_context"})"#;
    while tokio::task::spawn_blocking(move || prom_value(port, done, None))
        .await
        .unwrap()
        .is_none_or(|n| n < REQUESTS as f64)
    {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "Prometheus did not see the {REQUESTS} requests"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let slo = dir.path().join("slo.yaml");
    std::fs::write(&slo, SLO).unwrap();
    let args: Vec<String> = [
        "diagnose",
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--range",
        "1m",
        "--end",
        &format!("{end:.3}"),
        "--slo",
        &slo.display().to_string(),
        "--format",
        "json",
    ]
    .map(str::to_owned)
    .to_vec();
    let (out, expected) = tokio::task::spawn_blocking(move || {
        let q = r#"histogram_quantile(0.95, sum by (le) (increase(headroom_gateway_ttft_seconds_bucket{class="long_context"}[60s])))"#;
        (headroom(&args), prom_value(port, q, Some(end)))
    })
    .await
    .unwrap();
    gw.shutdown().await;
    twin.shutdown().await;
    let expected = expected.expect("Prometheus answers histogram_quantile");
    eprintln!("gateway TTFT p95 per Prometheus' histogram_quantile: {expected} s");
    let v = json(&out);
    let d = of_class(&v, "long_context");
    assert_eq!(d["source"]["kind"], "prometheus");
    check_long_context(&d, expected);
}
