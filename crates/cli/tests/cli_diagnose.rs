//! `headroom diagnose` end to end: the binary on real vLLM 0.32 scrapes (copied from
//! `shared/fixtures/vllm/` into `tests/fixtures/`, names kept), on a run directory, on bad input
//! (each must exit 2 with a message naming the file or URL), and live against the engine twin.
//!
//! Expected figures are read off the fixture files by hand (line numbers cited).

use headroom_testkit::{Killed, prometheus_port, refusing_port};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_headroom");
const QUEUEING: &str = "v0.32-cpu-queueing-maxseqs4.prom";
const KV: &str = "v0.32-cpu-kv-pressure-24blocks.prom";
const DCGM: &str = "t4-loaded-no-help.prom";

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn headroom(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run the headroom binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            stdout(o),
            stderr(o)
        )
    })
}

fn ids(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .expect("findings array")
        .iter()
        .map(|f| f["id"].as_str().expect("finding id").to_owned())
        .collect()
}

fn figure(v: &Value, step: usize, name: &str) -> f64 {
    v["steps"][step - 1]["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no figure {name} in step {step}: {v}"))["value"]
        .as_f64()
        .unwrap()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn max_num_seqs_4_is_admission_saturation_in_json() {
    let o = headroom(&["diagnose", "--from", &fixture(QUEUEING), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    let ids = ids(&v);
    assert!(ids.contains(&"admission_saturation".to_owned()), "{ids:?}");
    assert!(!ids.contains(&"kv_pressure".to_owned()), "{ids:?}");
    assert_eq!(v["source"]["engine"], "vllm");
    assert_eq!(v["source"]["kind"], "files");
    // one file alone: everything since the server started
    assert_eq!(v["source"]["since_server_start"], true);
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(6));
    // fixture lines 159–160: request_success_total stop 0, length 16
    assert_eq!(figure(&v, 4, "requests_finished"), 16.0);
    // vllm:request_queue_time_seconds_sum 17.183870237000065 / _count 16
    assert!((figure(&v, 1, "queue_time_mean_s") - 17.183870237000065 / 16.0).abs() < 1e-12);
    // every finding carries its evidence, confidence, action and trade-off
    for f in v["findings"].as_array().unwrap() {
        assert!(!f["evidence"].as_array().unwrap().is_empty(), "{f}");
        assert!(f["confidence"].is_string(), "{f}");
        assert!(!f["action"].as_str().unwrap().is_empty(), "{f}");
        assert!(!f["trade_off"].as_str().unwrap().is_empty(), "{f}");
    }
    // every objective has a verdict
    for ob in v["objectives"].as_array().unwrap() {
        assert!(
            ["PASS", "FAIL", "INCONCLUSIVE"].contains(&ob["verdict"].as_str().unwrap()),
            "{ob}"
        );
    }
}

#[test]
fn gpu_blocks_24_is_kv_pressure_in_json() {
    let o = headroom(&["diagnose", "--from", &fixture(KV), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    let ids = ids(&v);
    assert!(ids.contains(&"kv_pressure".to_owned()), "{ids:?}");
    assert!(!ids.contains(&"admission_saturation".to_owned()), "{ids:?}");
    let kv = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "kv_pressure")
        .unwrap();
    // fixture line 111: vllm:num_preemptions_total 50.0
    let pre = kv["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metric"] == "vllm:num_preemptions_total")
        .unwrap();
    assert_eq!(pre["value"], 50.0);
    assert_eq!(figure(&v, 4, "requests_finished"), 80.0);
}

/// TTFT buckets of the queueing fixture: 12 of 16 observations above 0.5 s, so `ttft: {p50:
/// 500ms}` fails; 0.5 s is a bucket bound, so the verdict is exact.
const FAILING_SLO: &str = "objectives:\n  \"*\":\n    ttft: {p50: 500ms}\n";

#[test]
fn verdicts_and_exit_codes() {
    let dir = tempdir();
    let slo = write(dir.path(), "slo.yaml", FAILING_SLO);
    let slo = slo.to_str().unwrap();
    let q = fixture(QUEUEING);
    let o = headroom(&["diagnose", "--from", &q, "--slo", slo, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "any verdict renders with 0");
    let v = json(&o);
    assert_eq!(v["verdict"], "FAIL");
    assert_eq!(v["objectives"][0]["id"], "ttft_p50");
    assert_eq!(v["objectives"][0]["verdict"], "FAIL");
    assert_eq!(v["objectives"][0]["samples"], 16);
    let o = headroom(&["diagnose", "--from", &q, "--slo", slo, "--fail-on-breach"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("Verdict: FAIL"));
    // an unknown class without a "*" default
    let only = write(
        dir.path(),
        "only.yaml",
        "objectives:\n  chat:\n    ttft: {p50: 500ms}\n",
    );
    let o = headroom(&[
        "diagnose",
        "--from",
        &q,
        "--slo",
        only.to_str().unwrap(),
        "--class",
        "batch",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("\"batch\""), "{}", stderr(&o));
    assert!(stderr(&o).contains("chat"), "{}", stderr(&o));
}

#[test]
fn terminal_and_markdown_show_the_six_steps_and_findings() {
    let o = headroom(&["diagnose", "--from", &fixture(QUEUEING)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    for n in 1..=6 {
        assert!(t.contains(&format!("\n{n}. ")), "step {n} missing:\n{t}");
    }
    assert!(t.contains("[admission_saturation]"), "{t}");
    assert!(t.contains("first action:"), "{t}");
    assert!(t.contains("trade-off:"), "{t}");
    assert!(t.contains("Verdict: "), "{t}");
    let o = headroom(&["diagnose", "--from", &fixture(KV), "--format", "markdown"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = stdout(&o);
    assert!(m.starts_with("# Headroom diagnosis"), "{m}");
    assert!(m.contains("### `kv_pressure`"), "{m}");
    assert!(m.contains("## 6. "), "{m}");
}

#[test]
fn engine_and_dcgm_files_together() {
    let o = headroom(&[
        "diagnose",
        "--from",
        &fixture(QUEUEING),
        "--from",
        &fixture(DCGM),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["source"]["engine"], "vllm");
    assert!(
        v["source"]["gpus"].as_u64().unwrap() >= 1,
        "{}",
        v["source"]
    );
}

#[test]
fn counter_reset_mid_window_is_reported_and_counted_like_prometheus() {
    // KV fixture (80 finished) then the queueing fixture (16 finished): the counter went down,
    // so the server restarted; Prometheus' increase() counts the post-reset value: 16.
    let o = headroom(&[
        "diagnose",
        "--from",
        &format!("{}@1000", fixture(KV)),
        "--from",
        &format!("{}@1010", fixture(QUEUEING)),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("reset"), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["source"]["duration_s"], 10.0);
    assert_eq!(figure(&v, 4, "requests_finished"), 16.0);
    let notes = v["notes"].to_string();
    assert!(notes.contains("reset"), "{notes}");
}

#[test]
fn run_directory_per_level_or_all() {
    let dir = tempdir();
    let scrapes = dir.path().join("scrapes");
    std::fs::create_dir(&scrapes).unwrap();
    std::fs::copy(
        fixture(QUEUEING),
        scrapes.join("L000-0000-engine@1767000000.000.prom"),
    )
    .unwrap();
    std::fs::copy(
        fixture(KV),
        scrapes.join("L001-0000-engine@1767000100.000.prom"),
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let o = headroom(&["diagnose", "--from", d, "--level", "1", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["source"]["level"], 1);
    assert_eq!(v["source"]["kind"], "run_dir");
    assert!(ids(&v).contains(&"kv_pressure".to_owned()));
    let o = headroom(&["diagnose", "--from", d, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all = json(&o);
    let all = all.as_array().expect("an array for several levels");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["source"]["level"], 0);
    assert!(ids(&all[0]).contains(&"admission_saturation".to_owned()));
    let o = headroom(&["diagnose", "--from", d, "--level", "7"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("levels 0, 1"), "{}", stderr(&o));
}

/// A sweep level is diagnosed over its measurement window, as the sweep judged it: from the
/// scrape taken when the warm-up ended (results.json `started_unix_s`), not from the level's
/// first scrape; and against the run's own slo.yaml unless --slo is given.
#[test]
fn run_directory_levels_use_their_measurement_window_and_slo() {
    let dir = tempdir();
    let scrapes = dir.path().join("scrapes");
    std::fs::create_dir(&scrapes).unwrap();
    for (seq, (name, at)) in [
        ("v0.32-cpu-idle.prom", "1767000000.000"),
        ("v0.32-cpu-pre-burst.prom", "1767000010.000"),
        ("v0.32-cpu-after-burst-c16.prom", "1767000020.000"),
    ]
    .iter()
    .enumerate()
    {
        std::fs::copy(
            format!("{}/../../fixtures/vllm/{name}", env!("CARGO_MANIFEST_DIR")),
            scrapes.join(format!("L000-{seq:04}-engine@{at}.prom")),
        )
        .unwrap();
    }
    let d = dir.path().to_str().unwrap();
    // Without results.json the whole span: 3 scrapes from t = 1767000000.
    let o = headroom(&["diagnose", "--from", d, "--level", "0", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["source"]["scrapes"], 3);
    assert_eq!(v["source"]["start_unix_s"], 1767000000.0);
    // With it, the measurement window: the pre-burst scrape onward (2 scrapes, 10 s), so the
    // 11 requests that started before it are not counted (27 − 11 = 16 TTFT observations).
    write(
        dir.path(),
        "results.json",
        r#"{"phases": [{"levels": [{"started_unix_s": 1767000010.05}]}]}"#,
    );
    write(
        dir.path(),
        "slo.yaml",
        "objectives:\n  \"*\": {ttft: {p90: 5s}}\n",
    );
    let o = headroom(&["diagnose", "--from", d, "--level", "0", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("judging against the run's SLO"),
        "{}",
        stderr(&o)
    );
    let v = json(&o);
    assert_eq!(v["source"]["scrapes"], 2);
    assert_eq!(v["source"]["start_unix_s"], 1767000010.0);
    let obs = v["objectives"].as_array().unwrap();
    assert_eq!(obs.len(), 1, "only the run's SLO: {obs:?}");
    assert_eq!(obs[0]["id"], "ttft_p90");
    assert_eq!(obs[0]["samples"], 16);
    // --slo still wins.
    let other = write(
        dir.path(),
        "other.yaml",
        "objectives:\n  \"*\": {ttft: {p50: 9s}}\n",
    );
    let o = headroom(&[
        "diagnose",
        "--from",
        d,
        "--level",
        "0",
        "--slo",
        other.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(json(&o)["objectives"][0]["id"], "ttft_p50");
}

fn assert_bad(o: &Output, needles: &[&str]) {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
    assert!(
        stdout(o).is_empty(),
        "no report on bad input: {}",
        stdout(o)
    );
    let e = stderr(o);
    for n in needles {
        assert!(e.contains(n), "`{n}` not in: {e}");
    }
}

#[test]
fn bad_files_exit_2_naming_the_file() {
    let dir = tempdir();
    let missing = dir.path().join("nope.prom");
    let missing = missing.to_str().unwrap();
    assert_bad(&headroom(&["diagnose", "--from", missing]), &[missing]);

    let html = write(
        dir.path(),
        "page.prom",
        "<!DOCTYPE html>\n<html><body>Login</body></html>\n",
    );
    let html = html.to_str().unwrap();
    assert_bad(&headroom(&["diagnose", "--from", html]), &[html]);

    let other = write(
        dir.path(),
        "node.prom",
        "# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{cpu=\"0\"} 12.5\n",
    );
    let other = other.to_str().unwrap();
    assert_bad(&headroom(&["diagnose", "--from", other]), &[other, "vllm:"]);

    let q = fixture(QUEUEING);
    assert_bad(
        &headroom(&["diagnose", "--from", &format!("{q}@yesterday")]),
        &["@yesterday", "Unix seconds"],
    );
    assert_bad(
        &headroom(&[
            "diagnose",
            "--from",
            &format!("{q}@2000"),
            "--from",
            &format!("{}@1000", fixture(KV)),
        ]),
        &["not in time order"],
    );
    assert_bad(
        &headroom(&["diagnose", "--from", &fixture(DCGM)]),
        &["no engine scrape", DCGM],
    );
    assert_bad(
        &headroom(&["diagnose", "--from", &q, "--selector", "model_name=absent"]),
        &[QUEUEING, "--selector", "model_name=tiny engine=0"],
    );
    // the fixture's model is `tiny` (line 111): that selection keeps everything
    let o = headroom(&[
        "diagnose",
        "--from",
        &q,
        "--selector",
        "model=tiny",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(figure(&json(&o), 4, "requests_finished"), 16.0);
}

/// A loopback server answering every request with `response` (a whole HTTP/1.1 response), for at
/// most `count` connections; returns its port.
fn canned_server(response: String, count: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(count) {
            let Ok(mut s) = s else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let _ = s.write_all(response.as_bytes());
        }
    });
    port
}

fn http(content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn bad_endpoints_exit_2_naming_the_url() {
    // a port nobody listens on (reserved while the test runs)
    let (_reserved_port, port) = refusing_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    assert_bad(
        &headroom(&["diagnose", "--url", &url, "--duration", "0s"]),
        &[&url, "unreachable"],
    );

    let port = canned_server(
        http(
            "text/html; charset=utf-8",
            "<html><body>Grafana</body></html>",
        ),
        4,
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    assert_bad(
        &headroom(&["diagnose", "--url", &url, "--duration", "0s"]),
        &[&url, "HTML"],
    );

    let port = canned_server(http("text/plain; version=0.0.4", "up 1\n"), 4);
    let url = format!("http://127.0.0.1:{port}/metrics");
    assert_bad(
        &headroom(&["diagnose", "--url", &url, "--duration", "0s"]),
        &[&url, "none of the expected"],
    );

    // a Prometheus that knows no metric names in the range
    let port = canned_server(
        http("application/json", r#"{"status":"success","data":[]}"#),
        8,
    );
    let base = format!("http://127.0.0.1:{port}");
    assert_bad(
        &headroom(&[
            "diagnose",
            "--prometheus",
            &base,
            "--range",
            "30m",
            "--end",
            "1767000000",
        ]),
        &[&base, "no data"],
    );
    assert_bad(
        &headroom(&["diagnose", "--prometheus", &base, "--range", "thirty"]),
        &["thirty"],
    );
}

/// Live: the engine twin in-process on loopback, a few streamed requests, and `diagnose --url`
/// polling it over 3 s. Bounded: requests have `max_tokens` 8 and the twin is shut down at the
/// end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_against_the_engine_twin() {
    use headroom_sim::server::{ServerConfig, serve};
    let handle = serve(ServerConfig {
        port: 0,
        dcgm_port: Some(0),
        ..ServerConfig::default()
    })
    .await
    .expect("start the engine twin");
    let api = handle.api_addr;
    let dcgm = handle.dcgm_addr;
    let load = tokio::spawn(async move {
        let mut done = 0u32;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(2500);
        while tokio::time::Instant::now() < deadline && done < 40 {
            if post_completion(api).await.is_ok() {
                done += 1;
            }
        }
        done
    });
    let out = tokio::task::spawn_blocking(move || {
        headroom(&[
            "diagnose",
            "--url",
            &format!("http://{api}/metrics"),
            "--dcgm",
            &format!("http://{dcgm}/metrics"),
            "--duration",
            "3s",
            "--interval",
            "1s",
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    let sent = load.await.unwrap();
    handle.shutdown().await;
    assert!(sent > 0, "no request completed against the twin");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["source"]["engine"], "vllm");
    assert_eq!(v["source"]["kind"], "url");
    // t = 0, 1, 2, 3 s
    assert!(
        v["source"]["scrapes"].as_u64().unwrap() >= 3,
        "{}",
        v["source"]
    );
    assert!(
        v["source"]["gpus"].as_u64().unwrap() >= 1,
        "{}",
        v["source"]
    );
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(6));
    assert!(v["findings"].is_array());
}

/// One non-streamed completion over a raw HTTP/1.1 connection; waits for the whole answer.
async fn post_completion(addr: std::net::SocketAddr) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"prompt":"hello there, how are you","max_tokens":8}"#;
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut resp))
        .await
        .map_err(|_| std::io::Error::other("timeout"))??;
    if resp.starts_with(b"HTTP/1.1 200") {
        Ok(())
    } else {
        Err(std::io::Error::other(
            String::from_utf8_lossy(&resp[..resp.len().min(200)]).into_owned(),
        ))
    }
}

/// `--prometheus`: a real Prometheus (Debian's `prometheus`, started here on loopback with a
/// temporary TSDB, killed by PID) scraping the engine twin and its dcgm endpoint every second
/// while requests run. Skipped loudly without the binary unless `HEADROOM_REQUIRE_PROMTOOL` is
/// set. Bounded: 90 s overall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_range_of_the_engine_twin() {
    let Some(bin) = on_path("prometheus") else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(90), prometheus_run(bin))
        .await
        .expect("finished within 90 s");
}

fn on_path(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("HEADROOM_REQUIRE_PROMTOOL").is_none(),
            "{name} not found on PATH and HEADROOM_REQUIRE_PROMTOOL is set; run scripts/install-prometheus"
        );
        eprintln!(
            "\n!!! SKIPPED: {name} is not installed, so `diagnose --prometheus` was NOT tested\n\
             !!! against a real Prometheus. Run scripts/install-prometheus.\n"
        );
    }
    found
}

/// `GET path` on loopback, returning the body (HTTP/1.1, `Connection: close`).
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    r.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

async fn prometheus_run(bin: PathBuf) {
    use headroom_sim::server::{ServerConfig, serve};
    let handle = serve(ServerConfig {
        port: 0,
        dcgm_port: Some(0),
        ..ServerConfig::default()
    })
    .await
    .expect("start the engine twin");
    let (api, dcgm) = (handle.api_addr, handle.dcgm_addr);
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "prometheus.yml",
        &format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: vllm\n    static_configs: [{{targets: ['{api}']}}]\n  - job_name: dcgm\n    static_configs: [{{targets: ['{dcgm}']}}]\n"
        ),
    );
    let log = dir.path().join("prometheus.log");
    let _prom = Killed(
        Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--log.level=info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start prometheus"),
    );
    let prom_port = tokio::task::spawn_blocking({
        let log = log.clone();
        move || prometheus_port(&log)
    })
    .await
    .unwrap();
    // wait until Prometheus has scraped the idle twin, so the counters' first samples are 0
    let waited = std::time::Instant::now();
    loop {
        let body = tokio::task::spawn_blocking(move || {
            http_get(
                prom_port,
                "/api/v1/query?query=sum(up%7Bjob%3D%22vllm%22%7D)",
            )
        })
        .await
        .unwrap()
        .unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if v["data"]["result"][0]["value"][1] == "1" {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "Prometheus did not scrape the twin within 30 s; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // four clients, each sending one request after another for 6 s
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(tokio::spawn(async move {
            let mut done = 0u32;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
            while tokio::time::Instant::now() < deadline {
                if post_completion(api).await.is_ok() {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut sent = 0;
    for c in clients {
        sent += c.await.unwrap();
    }
    assert!(sent > 0, "no request completed against the twin");
    // wait until Prometheus has scraped every finished request
    let q = "/api/v1/query?query=sum(vllm:request_success_total)";
    let waited = std::time::Instant::now();
    loop {
        let body = tokio::task::spawn_blocking(move || http_get(prom_port, q))
            .await
            .unwrap()
            .unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let got = v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok());
        if got.is_some_and(|g| g >= f64::from(sent)) {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "Prometheus did not see {sent} finished requests (last {got:?}); log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let range = format!("{}s", (end - t0).ceil() as u64 + 5);
    let base = format!("http://127.0.0.1:{prom_port}");
    let end_arg = format!("{end:.3}");
    let out = tokio::task::spawn_blocking(move || {
        headroom(&[
            "diagnose",
            "--prometheus",
            &base,
            "--range",
            &range,
            "--end",
            &end_arg,
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    handle.shutdown().await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["source"]["kind"], "prometheus");
    assert_eq!(v["source"]["engine"], "vllm");
    assert!(
        v["source"]["gpus"].as_u64().unwrap() >= 1,
        "{}",
        v["source"]
    );
    // The first sample is 0 (load started after the first scrape) and the last one counts every
    // request the clients saw finish, so increase() is at least `sent`; its extrapolation to the
    // range end adds at most about one scrape interval's worth (fractional counts: module docs
    // of signals::promql). Measured: 219.2 for 213 sent.
    let n = figure(&v, 4, "requests_finished");
    eprintln!("requests finished: {n} per Prometheus increase(), {sent} seen by the clients");
    assert!(
        n >= 0.999 * f64::from(sent) && n < 1.25 * f64::from(sent),
        "server count {n} vs {sent} requests sent"
    );
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(6));

    // `headroom slo budget` on the same Prometheus (issue 5: the error budget against a real
    // Prometheus scraping the engine twin under load). Expected SLI computed here, with our own
    // PromQL: TTFT ≤ 40 ms (a vLLM bucket bound) over all requests, at the same instant. Every
    // series started at 0 in the first scrape, so increase() over the budget window is the last
    // value and the ratio is exact.
    let at = format!("{end:.3}");
    let q = |expr: &str| {
        let path = format!(
            "/api/v1/query?query={}&time={at}",
            expr.replace('{', "%7B")
                .replace('}', "%7D")
                .replace('"', "%22")
                .replace(' ', "%20")
        );
        let body = http_get(prom_port, &path).unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no value for {expr}: {body}"))
    };
    let good = q(r#"sum(vllm:time_to_first_token_seconds_bucket{le="0.04"})"#);
    let total = q("sum(vllm:time_to_first_token_seconds_count)");
    assert!(
        total >= f64::from(sent),
        "{total} TTFT observations for {sent} requests"
    );
    let expected_sli = good / total;
    let slo = write(
        dir.path(),
        "slo.yaml",
        "objectives:\n  \"*\":\n    ttft: {p95: 40ms}\n    error_rate: 0.5%\nbudget: {window: 7d, target: 99%, freeze_at: 50%}\n",
    );
    let base = format!("http://127.0.0.1:{prom_port}");
    let slo_arg = slo.display().to_string();
    let out = headroom(&[
        "slo",
        "budget",
        "--prometheus",
        &base,
        "--slo",
        &slo_arg,
        "--at",
        &at,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let row = text
        .lines()
        .find(|l| l.contains("TTFT p95"))
        .unwrap_or_else(|| panic!("no TTFT row in:\n{text}"));
    eprintln!("budget: {row}\n  expected SLI {good} / {total}");
    // The budget prints the SLI as a percentage with two decimals.
    let want = format!("{:.2}", expected_sli * 100.0);
    let want = want.trim_end_matches('0').trim_end_matches('.');
    assert!(
        row.contains(&format!("{want} %")),
        "budget row {row:?} should show the SLI {want} % ({good} of {total} within 40 ms)"
    );
    // Burn rate = (1 − SLI) / (1 − 0.95), the same in every tier (all traffic is in every window).
    let burn = format!("{:.2}", (1.0 - expected_sli) / 0.05);
    let burn = burn.trim_end_matches('0').trim_end_matches('.');
    assert!(
        row.contains(&format!("1h/5m {burn}/{burn}")),
        "{row} should burn {burn}"
    );
    // All requests succeeded: the error SLI is 100 % and none of the budget is used.
    let err_row = text
        .lines()
        .find(|l| l.contains("errors"))
        .unwrap_or_else(|| panic!("no error row in:\n{text}"));
    assert!(err_row.contains("100 %"), "{err_row}");
}

/// The lines of stderr that are errors (`error: …`), for checking their exact shape.
fn error_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.contains("error"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_malformed_scrape_file_is_reported_once_with_file_line_and_expectation() {
    let dir = tempdir();
    let bad = write(
        dir.path(),
        "bad.prom",
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} three\n",
    );
    let bad = bad.to_str().unwrap();
    let o = headroom(&["diagnose", "--from", bad]);
    assert_bad(&o, &[bad]);
    let e = stderr(&o);
    // one line, one `error:`, the file named once, the line named once, the cause once
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(e.matches("error").count(), 1, "{e}");
    assert!(e.starts_with(&format!("error: {bad}: ")), "{e}");
    assert_eq!(e.matches(bad).count(), 1, "{e}");
    assert_eq!(e.matches("line 2").count(), 1, "{e}");
    assert_eq!(e.matches("not a float").count(), 1, "{e}");
    assert!(
        e.contains("`three`") || e.contains("three"),
        "names what it read: {e}"
    );
}

#[test]
fn an_html_page_is_reported_once_naming_the_url() {
    let port = canned_server(
        http(
            "text/html; charset=utf-8",
            "<!DOCTYPE html><html><body>Grafana</body></html>",
        ),
        2,
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let o = headroom(&["diagnose", "--url", &url, "--duration", "0s"]);
    assert_bad(&o, &[&url]);
    let errs = error_lines(&o);
    assert_eq!(errs.len(), 1, "{}", stderr(&o));
    let e = &errs[0];
    assert!(
        e.starts_with(&format!("error: {url}: got an HTML page")),
        "{e}"
    );
    assert_eq!(e.matches(&url).count(), 1, "{e}");
    assert_eq!(e.matches("HTML page").count(), 1, "{e}");
    // the content type as sent, not a Rust `Some("…")`
    assert!(
        e.contains("(Content-Type: text/html; charset=utf-8)"),
        "{e}"
    );
    assert!(!e.contains("Some("), "{e}");
}

#[test]
fn corrupt_families_are_data_warnings_in_every_format() {
    let dir = tempdir();
    // the queueing fixture with its TTFT histogram made non-cumulative: le="0.5" (line 300 of
    // the fixture holds 4) lowered below le="0.25" (4) to 1
    let body = std::fs::read_to_string(fixture(QUEUEING)).unwrap();
    let needle =
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"tiny\"} 4.0";
    assert!(body.contains(needle), "fixture changed");
    let bad = write(
        dir.path(),
        "corrupt.prom",
        &body.replace(
            needle,
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"tiny\"} 1.0",
        ),
    );
    let bad = bad.to_str().unwrap();
    let o = headroom(&["diagnose", "--from", bad, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    let w = &v["data_warnings"];
    assert_eq!(w.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(w[0]["metric"], "vllm:time_to_first_token_seconds");
    assert_eq!(w[0]["series"], "{engine=\"0\",model_name=\"tiny\"}");
    assert_eq!(w[0]["signal"], "ttft");
    assert_eq!(w[0]["problem"], "not_cumulative");
    assert_eq!(w[0]["occurrences"], 1);
    assert!(
        w[0]["detail"]
            .as_str()
            .unwrap()
            .contains("le=\"0.5\" holds 1, fewer than le=\"0.25\" with 4"),
        "{w}"
    );
    // the TTFT objective of the built-in SLO is refused, and no figure comes from TTFT
    let ttft = v["objectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"].as_str().unwrap().starts_with("ttft"))
        .unwrap();
    assert_eq!(ttft["verdict"], "INCONCLUSIVE");
    assert!(ttft["observed"].is_null());
    for s in v["steps"].as_array().unwrap() {
        for f in s["figures"].as_array().unwrap() {
            assert!(
                !f["source"]
                    .as_str()
                    .unwrap()
                    .contains("time_to_first_token"),
                "{f}"
            );
        }
    }
    // stderr warns once
    let e = stderr(&o);
    assert_eq!(
        e.matches("warning: vllm:time_to_first_token_seconds")
            .count(),
        1,
        "{e}"
    );
    // a consistent file has an empty array (stable shape)
    let o = headroom(&["diagnose", "--from", &fixture(QUEUEING), "--format", "json"]);
    assert_eq!(json(&o)["data_warnings"], serde_json::json!([]));
    for format in ["terminal", "markdown"] {
        let o = headroom(&["diagnose", "--from", bad, "--format", format]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let t = stdout(&o);
        assert!(
            t.contains("data warning: vllm:time_to_first_token_seconds{engine=\"0\",model_name=\"tiny\"}: buckets are not cumulative"),
            "{format}: {t}"
        );
    }
}

#[test]
fn a_series_written_twice_is_rejected_not_summed_or_guessed() {
    let line =
        r#"vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"}"#;
    let base = std::fs::read_to_string(fixture(QUEUEING)).unwrap();
    let dup = base.replace(
        &format!("{line} 16.0\n"),
        &format!("{line} 16.0\n{line} 999.0\n"),
    );
    assert_ne!(dup, base);
    let dir = tempdir();
    let p = write(dir.path(), "dup.prom", &dup);
    let o = headroom(&[
        "diagnose",
        "--from",
        p.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("warning: {line}: the series `vllm:request_success_total` is written 2 times in one scrape (values 16, 999)")),
        "{}",
        stderr(&o)
    );
    let v = json(&o);
    let w = &v["data_warnings"][0];
    assert_eq!(w["problem"], "duplicate_series");
    assert_eq!(w["metric"], "vllm:request_success_total");
    // neither 16, 999 nor 1015 finished requests: no figure at all
    let finished = v["steps"][3]["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "requests_finished");
    assert!(finished.is_none(), "{finished:?}");
    let err = v["objectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "error_rate")
        .unwrap();
    assert_eq!(err["verdict"], "INCONCLUSIVE", "{err}");
}

#[test]
fn first_bucket_quantiles_show_the_bound_and_json_marks_it() {
    // ITL buckets of the fixture: 2017 of 2032 ≤ 0.01 s (the first bucket), so p50 (rank 1016)
    // and p95 (rank 1930.4) are only known to be ≤ 10 ms; p99 (rank 2011.7) too.
    let o = headroom(&["diagnose", "--from", &fixture(QUEUEING), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    for name in ["server_itl_p50_s", "server_itl_p95_s", "server_itl_p99_s"] {
        let f = v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["figures"].as_array().unwrap())
            .find(|f| f["name"] == name)
            .unwrap();
        assert_eq!(f["value"], 0.01, "{name}");
        assert_eq!(f["bound"], "upper", "{name}");
    }
    // a quantile beyond the first bucket carries no bound
    assert_eq!(figure(&v, 1, "queue_time_p95_s"), 2.4);
    let t = headroom(&["diagnose", "--from", &fixture(QUEUEING)]);
    let text = stdout(&t);
    assert!(
        text.contains("upper bound only: ≤ 0.01 s: the rank falls in the first bucket [0, 0.01] s"),
        "{text}"
    );
}

#[test]
fn unbounded_or_timeless_files_are_refused() {
    if Path::new("/dev/zero").exists() {
        assert_bad(
            &headroom(&["diagnose", "--from", "/dev/zero"]),
            &["/dev/zero", "larger than 32 MiB"],
        );
    }
    let dir = tempdir();
    let body = std::fs::read_to_string(fixture(QUEUEING)).unwrap();
    let a = write(dir.path(), "a.prom", &body);
    let b = write(dir.path(), "b.prom", &body);
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_767_000_000);
    for p in [&a, &b] {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    assert_bad(
        &headroom(&[
            "diagnose",
            "--from",
            a.to_str().unwrap(),
            "--from",
            b.to_str().unwrap(),
        ]),
        &["both at 1767000000.000", "FILE@unix_seconds"],
    );
}

#[test]
fn prometheus_urls_are_joined_and_never_shown_with_secrets() {
    // not a Prometheus: a JSON API of something else
    let port = canned_server(
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 22\r\nConnection: close\r\n\r\n{\"detail\":\"Not Found\"}".to_owned(),
        1,
    );
    let url = format!("http://u:PWSECRET@127.0.0.1:{port}/?token=QSECRET");
    let o = headroom(&["diagnose", "--prometheus", &url]);
    assert_bad(
        &o,
        &[
            &format!("http://127.0.0.1:{port}/api/v1/label/__name__/values?start="),
            "HTTP 404 Not Found (application/json)",
            "does not look like a Prometheus HTTP API",
        ],
    );
    assert!(!stderr(&o).contains("SECRET"), "{}", stderr(&o));
    // unreachable: still no secret
    let o = headroom(&[
        "diagnose",
        "--prometheus",
        "http://u:PWSECRET@127.0.0.1:9/?token=QSECRET",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("SECRET"), "{}", stderr(&o));
    // a range far beyond what any server keeps
    assert_bad(
        &headroom(&[
            "diagnose",
            "--prometheus",
            "http://127.0.0.1:9",
            "--range",
            "99999999999999999999h",
        ]),
        &["--range", "longer than 90 days"],
    );
}

/// `diagnose --from RUN_DIR --level N` judges a sweep level as the sweep did: the phase's own
/// class objectives (not `*`), and the client's measurements of the window as the record for
/// every objective the sweep decided — so a level the sweep passed is not failed by an engine
/// histogram that also holds the warm-up's requests (a new user saw queue time PASS in the sweep
/// and FAIL in diagnose). The mix, whose engine series cannot be split by class, keeps `*`.
/// `diagnose --from RUN --level N` re-judges every level of a mixed sweep as the sweep did: the
/// phase's class (`mix` for the mix, whose rows are per class: `short/ttft_p95`), every
/// objective's verdict, value and sample count, and the level's verdict, all as results.json
/// records them. The embedded twin is swept for real at two fixed loads, the higher one past the
/// queue-time objective's 40 ms, so levels pass and fail.
#[test]
fn every_level_of_a_mixed_sweep_is_diagnosed_with_the_sweeps_class_and_verdicts() {
    let dir = tempdir();
    let wl = write(
        dir.path(),
        "w.yaml",
        "load: {mode: concurrency, levels: [2, 48]}\nclasses:\n  - {name: short, weight: 3, prompt_tokens: {fixed: 16}, max_tokens: {fixed: 8}, ignore_eos: true}\n  - {name: long, weight: 1, endpoint: completions, prompt_tokens: {fixed: 600}, max_tokens: {fixed: 8}, ignore_eos: true}\n",
    );
    let slo = write(
        dir.path(),
        "slo.yaml",
        "objectives:\n  \"*\": {ttft: {p95: 2s}, queue_time: {p95: 40ms}, error_rate: 5%}\n  long: {ttft: {p95: 3s}, queue_time: {p95: 40ms}, error_rate: 5%}\n",
    );
    let run = sweep_embedded(dir.path(), &wl, &slo, "1.5", "3");
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    let phases = results["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["short", "long", "mix"]);
    let mut seen = Vec::new();
    for p in phases {
        let name = p["name"].as_str().unwrap();
        for level in p["levels"].as_array().unwrap() {
            let idx: u32 = level["histograms"]
                .as_str()
                .unwrap()
                .trim_start_matches("histograms/L")
                .trim_end_matches(".json")
                .parse()
                .unwrap();
            let o = headroom(&[
                "diagnose",
                "--from",
                run.to_str().unwrap(),
                "--level",
                &idx.to_string(),
                "--format",
                "json",
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let v = json(&o);
            let at = format!("{name} L{idx} at {}", level["load"]);
            assert_eq!(v["class"], name, "{at}");
            assert_eq!(v["verdict"], level["verdict"], "{at}: {v}");
            let got = v["objectives"].as_array().unwrap();
            let swept = level["objectives"].as_array().unwrap();
            let ids = |rows: &[Value]| {
                let mut ids: Vec<String> = rows
                    .iter()
                    .map(|r| r["id"].as_str().unwrap().to_owned())
                    .collect();
                ids.sort();
                ids
            };
            assert_eq!(ids(got), ids(swept), "{at}");
            for s in swept {
                let g = got.iter().find(|o| o["id"] == s["id"]).unwrap();
                for field in ["verdict", "observed", "samples", "threshold"] {
                    assert_eq!(g[field], s[field], "{at} {}: {field}", s["id"]);
                }
            }
            if name == "mix" {
                assert!(
                    got.iter()
                        .any(|o| o["id"] == "long/ttft_p95" && o["threshold"] == 3.0),
                    "{at}: {v}"
                );
            }
            // The client-visible error rate beside the engine's: every request of the level
            // that ended, counted from results.json by hand (client cancels are not finished).
            let (mut bad, mut n) = (0.0, 0.0);
            for (label, count) in level["level_outcomes"].as_object().unwrap() {
                let c = count.as_f64().unwrap();
                match label.as_str() {
                    "client_cancel" => {}
                    "stop" | "length" => n += c,
                    _ => {
                        bad += c;
                        n += c;
                    }
                }
            }
            if n > 0.0 {
                assert_eq!(figure(&v, 4, "client_error_ratio"), bad / n, "{at}");
            }
            eprintln!(
                "{at}: sweep {} / diagnose {}",
                level["verdict"], v["verdict"]
            );
            seen.push(level["verdict"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(seen.len(), 6, "two levels per phase: {seen:?}");
    assert!(seen.iter().any(|v| v == "FAIL"), "{seen:?}");
}

#[path = "../../diagnose/tests/support/prom_backfill.rs"]
mod backfill;

/// The remarks of step `n` of a diagnosis in JSON.
fn remarks(v: &Value, n: usize) -> Vec<String> {
    v["steps"][n - 1]["remarks"]
        .as_array()
        .expect("remarks")
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

/// Step 5's remark on missing GPU telemetry, if any.
fn telemetry_hint(v: &Value) -> Option<String> {
    remarks(v, 5)
        .into_iter()
        .find(|r| r.contains("dcgm-exporter") || r.contains("DCGM_FI_"))
}

/// A run directory holding `body` as level 0's only engine scrapes (two, 10 s apart).
fn run_dir_of(body_file: &str) -> tempfile::TempDir {
    let dir = tempdir();
    let scrapes = dir.path().join("scrapes");
    std::fs::create_dir(&scrapes).unwrap();
    for (seq, at) in ["1767000000.000", "1767000010.000"].iter().enumerate() {
        std::fs::copy(
            body_file,
            scrapes.join(format!("L000-{seq:04}-engine@{at}.prom")),
        )
        .unwrap();
    }
    dir
}

/// Without GPU telemetry, step 5 says what gets it *in the mode used*: `--dcgm` beside `--url`
/// live; a rerun of the sweep with `--dcgm` for a saved run (diagnose cannot scrape the past);
/// more `--from` files for scrape files; a scrape job for Prometheus. No output says "pass
/// --dcgm" without saying where, and with dcgm data there is no hint at all.
#[test]
fn gpu_telemetry_hints_fit_each_mode() {
    let no_bare_pass = |o: &Output| {
        let out = stdout(o);
        assert!(!out.contains("pass --"), "{out}");
    };

    // --from FILE
    let o = headroom(&["diagnose", "--from", &fixture(QUEUEING), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    no_bare_pass(&o);
    let h = telemetry_hint(&json(&o)).expect("a hint");
    assert!(h.contains("among the --from files"), "{h}");
    assert!(
        h.contains("--from FILE[@unix_s]") && !h.contains("--dcgm"),
        "{h}"
    );
    // --from FILE with a dcgm-exporter file: GPU data, no hint
    let o = headroom(&[
        "diagnose",
        "--from",
        &fixture(QUEUEING),
        "--from",
        &fixture(DCGM),
        "--format",
        "json",
    ]);
    assert_eq!(telemetry_hint(&json(&o)), None);

    // --from RUN_DIR, in every format
    let dir = run_dir_of(&fixture(QUEUEING));
    let d = dir.path().to_str().unwrap();
    let o = headroom(&["diagnose", "--from", d, "--level", "0", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let h = telemetry_hint(&json(&o)).expect("a hint");
    assert!(
        h.contains("cannot scrape the past")
            && h.contains("rerun `headroom sweep` with --dcgm URL"),
        "{h}"
    );
    for format in ["terminal", "markdown"] {
        let o = headroom(&["diagnose", "--from", d, "--format", format]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        no_bare_pass(&o);
        assert!(stdout(&o).contains("rerun `headroom sweep` with --dcgm URL"));
    }

    // --url, live, one scrape of the same body
    let body = std::fs::read_to_string(fixture(QUEUEING)).unwrap();
    let port = canned_server(http("text/plain; version=0.0.4", &body), 2);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let o = headroom(&[
        "diagnose",
        "--url",
        &url,
        "--duration",
        "0s",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    no_bare_pass(&o);
    let h = telemetry_hint(&json(&o)).expect("a hint");
    assert!(
        h.contains("add --dcgm URL") && h.contains("beside --url"),
        "{h}"
    );
    // --url with --dcgm pointing at an exporter that is not there: the flag is not missing
    let (_reserved_dead, dead) = refusing_port();
    let port = canned_server(http("text/plain; version=0.0.4", &body), 2);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let o = headroom(&[
        "diagnose",
        "--url",
        &url,
        "--dcgm",
        &format!("http://127.0.0.1:{dead}/metrics"),
        "--duration",
        "0s",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let h = telemetry_hint(&json(&o)).expect("a hint");
    assert!(h.contains("no GPU series") && !h.contains("--dcgm"), "{h}");

    // --prometheus over a range with the engine's series only (backfilled from the same
    // fixture; Prometheus never scraped dcgm-exporter)
    let (Some(prometheus), Some(promtool)) = (
        backfill::on_path("prometheus"),
        backfill::on_path("promtool"),
    ) else {
        return;
    };
    let prom = backfill::start_engine_only(&prometheus, &promtool, 3);
    let end = prom.end_unix_s.to_string();
    let o = headroom(&[
        "diagnose",
        "--prometheus",
        &prom.base,
        "--range",
        "2m",
        "--end",
        &end,
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    no_bare_pass(&o);
    let v = json(&o);
    assert_eq!(v["source"]["kind"], "prometheus");
    let h = telemetry_hint(&v).expect("a hint");
    assert!(h.contains("have Prometheus scrape dcgm-exporter"), "{h}");
    assert!(!h.contains("--dcgm"), "{h}");
}

/// A Headroom gateway's /metrics given where the engine's belong is refused with the fix for
/// the mode used: `--url` live, another file for `--from FILE`, a rerun of the sweep with
/// `--metrics-url` for a run directory.
#[test]
fn a_gateways_metrics_are_refused_with_the_fix_for_the_mode() {
    let body = "# TYPE headroom_gateway_requests_total counter\nheadroom_gateway_requests_total{class=\"default\",outcome=\"stop\"} 3\n";
    let dir = tempdir();
    let gw = write(dir.path(), "gateway.prom", body);
    let gw = gw.to_str().unwrap();

    let o = headroom(&["diagnose", "--from", gw]);
    assert_bad(
        &o,
        &[
            gw,
            "Headroom gateway's /metrics",
            "give that file to --from",
        ],
    );
    assert!(!stderr(&o).contains("--metrics-url"), "{}", stderr(&o));

    let run = run_dir_of(gw);
    let o = headroom(&["diagnose", "--from", run.path().to_str().unwrap()]);
    assert_bad(
        &o,
        &[
            "cannot scrape the past",
            "rerun `headroom sweep` with --metrics-url http://ENGINE:8000/metrics",
        ],
    );

    let port = canned_server(http("text/plain; version=0.0.4", body), 2);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let o = headroom(&["diagnose", "--url", &url, "--duration", "0s"]);
    assert_bad(&o, &[&url, "point --url at the engine's own"]);
    assert!(!stderr(&o).contains("--metrics-url"), "{}", stderr(&o));
}

/// The evidence of finding `id` in a diagnosis in JSON, by metric.
fn finding_evidence(v: &Value, id: &str, metric: &str) -> Value {
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("{id} did not fire: {:?}", ids(v)));
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metric"] == metric)
        .unwrap_or_else(|| panic!("{id}: no evidence {metric}: {f}"))
        .clone()
}

/// A sweep of a workload with no shared prefix (the in-process twin, distinct prompts), then
/// `diagnose --from RUN_DIR`: the prefix cache hits almost nothing, as it must, and since the
/// run's workload.yaml sets no shared prefix that is a remark, not a `low_prefix_reuse` finding.
/// The same scrapes as plain files (workload unknown) keep the finding, saying what it assumes;
/// and a workload.yaml that declares a shared prefix turns the same hit ratio into a finding.
#[test]
fn low_prefix_reuse_is_judged_against_the_runs_workload() {
    let dir = tempdir();
    let plain = "load: {mode: concurrency, levels: [2]}\nclasses:\n  - {name: plain, endpoint: completions, prompt_tokens: {fixed: 200}, max_tokens: {fixed: 4}, ignore_eos: true}\n";
    let wl = write(dir.path(), "w.yaml", plain);
    let slo = write(
        dir.path(),
        "slo.yaml",
        "objectives:\n  \"*\": {ttft: {p50: 2s}, error_rate: 5%}\n",
    );
    let run = sweep_embedded(dir.path(), &wl, &slo, "2", "5");
    let r = run.to_str().unwrap();
    let diag = |extra: &[&str]| {
        let mut args = vec!["diagnose", "--format", "json"];
        args.extend_from_slice(extra);
        let o = headroom(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        json(&o)
    };

    // The run's own workload: nothing shared, no finding, a remark in step 2.
    let v = diag(&["--from", r, "--level", "0"]);
    let hit = figure(&v, 2, "prefix_cache_hit_ratio");
    assert!(hit < 0.1, "distinct prompts hit the cache: {hit}");
    assert!(
        !ids(&v).contains(&"low_prefix_reuse".to_owned()),
        "{:?}",
        ids(&v)
    );
    assert!(
        remarks(&v, 2)
            .iter()
            .any(|r| r.contains("sets no shared prefix")),
        "{:?}",
        remarks(&v, 2)
    );

    // The level's scrapes as plain files: the workload is unknown.
    let mut files: Vec<String> = std::fs::read_dir(run.join("scrapes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("L000-") && n.contains("-engine@")
        })
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let mut args = Vec::new();
    for f in &files {
        args.push("--from");
        args.push(f.as_str());
    }
    // Without the workload the window cannot judge the ratio: a note (not a finding) that
    // says what it assumes.
    let v = diag(&args);
    assert!(
        !ids(&v).contains(&"low_prefix_reuse".to_owned()),
        "{:?}",
        ids(&v)
    );
    let note = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.contains("`low_prefix_reuse`"))
        .unwrap_or_else(|| panic!("no low_prefix_reuse note: {}", v["notes"]));
    assert!(
        note.contains("vllm:prefix_cache_queries_total = "),
        "{note}"
    );
    assert!(
        note.contains("assumes the traffic shares prefixes"),
        "{note}"
    );

    // The same run, had its workload declared a 100-token shared prefix for the class.
    std::fs::write(
        run.join("workload.yaml"),
        plain.replace(
            "ignore_eos: true}",
            "ignore_eos: true, shared_prefix_tokens: 100}",
        ),
    )
    .unwrap();
    let v = diag(&["--from", r, "--level", "0"]);
    assert_eq!(
        finding_evidence(&v, "low_prefix_reuse", "workload_shared_prefix_share")["value"],
        1.0
    );
    let c = finding_evidence(&v, "low_prefix_reuse", "workload_shared_prefix_over_prompt");
    let prompt_mean = figure(&v, 3, "prompt_tokens_mean");
    let want = 100.0 / prompt_mean;
    assert!(
        (c["value"].as_f64().unwrap() - want).abs() < 1e-9,
        "{c} vs 100 / {prompt_mean}"
    );
    assert!(
        !remarks(&v, 2)
            .iter()
            .any(|r| r.contains("sets no shared prefix"))
    );
}

/// Sweeps the in-process engine twin with `workload` and `slo` (0.5 s warm-up, `measure`
/// seconds per level, `seed`) into `dir/run`, asserting that the sweep completed; returns the run
/// directory.
fn sweep_embedded(dir: &Path, workload: &Path, slo: &Path, measure: &str, seed: &str) -> PathBuf {
    let run = dir.join("run");
    let o = headroom(&[
        "sweep",
        "--workload",
        workload.to_str().unwrap(),
        "--slo",
        slo.to_str().unwrap(),
        "--warmup",
        "0.5",
        "--measure",
        measure,
        "--seed",
        seed,
        "--out",
        run.to_str().unwrap(),
    ]);
    // 3: no phase found a capacity, which a sweep of failing levels may well end with.
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    run
}

/// A run directory is read as the sweep wrote it: a symbolic link in it (slo.yaml or a scrape
/// pointing at a secret) is refused, naming it, without reading it; a parse error quotes no
/// secret; a corrupt results.json is refused, not ignored.
#[test]
fn run_directory_links_secrets_and_damage_are_named() {
    let secret_text = "root:$6$s4ltS4lt$Q9xTopSecretHash0123456789abcdef:19000:0:99999:7:::\n";
    let fresh = || {
        let dir = tempdir();
        let scrapes = dir.path().join("scrapes");
        std::fs::create_dir(&scrapes).unwrap();
        std::fs::copy(
            fixture(QUEUEING),
            scrapes.join("L000-0000-engine@1767000000.000.prom"),
        )
        .unwrap();
        let secret = write(dir.path(), "outside-secret", secret_text);
        (dir, secret)
    };
    for linked in ["slo.yaml", "scrapes/L000-0001-engine@1767000010.000.prom"] {
        let (dir, secret) = fresh();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::rename(dir.path().join("scrapes"), run.join("scrapes")).unwrap();
        std::os::unix::fs::symlink(&secret, run.join(linked)).unwrap();
        let o = headroom(&["diagnose", "--from", run.to_str().unwrap()]);
        assert_bad(&o, &[linked, "symbolic link"]);
        assert!(!stderr(&o).contains("TopSecret"), "{}", stderr(&o));
    }
    // The same secret as a file of the run: the SLO's parse error quotes no hash.
    let (dir, _) = fresh();
    write(dir.path(), "slo.yaml", secret_text);
    let o = headroom(&["diagnose", "--from", dir.path().to_str().unwrap()]);
    assert_bad(&o, &["slo.yaml"]);
    assert!(!stderr(&o).contains("TopSecret"), "{}", stderr(&o));
    // A corrupt results.json is named, not silently replaced by the engine's view alone.
    let (dir, _) = fresh();
    write(
        dir.path(),
        "results.json",
        "{\"schema_version\": 1, \"phases\": [tru",
    );
    let o = headroom(&["diagnose", "--from", dir.path().to_str().unwrap()]);
    assert_bad(&o, &["results.json", "not JSON", "damaged"]);
    // None at all is a warning, and the diagnosis runs.
    let (dir, _) = fresh();
    let o = headroom(&["diagnose", "--from", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("no results.json"), "{}", stderr(&o));
}
