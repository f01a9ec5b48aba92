//! A local Prometheus holding `minutes` of vLLM-shaped series, for the range test and the
//! `prometheus_range` benchmark (shared through `#[path]`).
//!
//! The series are the real vLLM 0.32 scrape `fixtures/vllm/v0.32-cpu-queueing-maxseqs4.prom`
//! (every histogram populated) and the dcgm-exporter scrape `fixtures/dcgm/t4-loaded-no-help.prom`,
//! replayed every [`EVERY_S`] s: counters, histogram buckets, `_sum` and `_count` grow linearly,
//! by the fixture's value **per minute**, from 0 at the first sample; gauges keep the fixture's
//! value except for the overrides below. Over the last 30 minutes every counter therefore
//! increases by exactly 30 × its fixture value, and every histogram's bucket shape is the
//! fixture's, so the expected figures can be read off the fixture file by hand.
//!
//! The text is OpenMetrics with timestamps, loaded with `promtool tsdb create-blocks-from
//! openmetrics`, and served by the Debian `prometheus` binary on 127.0.0.1 (killed by PID on
//! drop).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use headroom_signals::exposition::{MetricType, parse};

/// Seconds between replayed samples.
pub const EVERY_S: i64 = 5;
/// `vllm:num_requests_running` at every sample.
pub const RUNNING: f64 = 4.0;
/// `vllm:num_requests_waiting` at sample [`PEAK_AT`] (0 elsewhere).
pub const WAITING_PEAK: f64 = 12.0;
/// `vllm:kv_cache_usage_perc` at sample [`PEAK_AT`] (0.25 elsewhere).
pub const KV_PEAK: f64 = 0.6;
/// Index of the sample holding the gauge peaks, counted back from the last one.
pub const PEAK_BACK: i64 = 60;

fn fixture(rel: &str) -> String {
    let p = format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The OpenMetrics text: samples every [`EVERY_S`] s from `end − minutes` to `end` (Unix s).
pub fn openmetrics(end_unix_s: i64, minutes: i64) -> String {
    openmetrics_of(end_unix_s, minutes, true)
}

/// [`openmetrics`], with the dcgm-exporter series only when `with_dcgm`.
fn openmetrics_of(end_unix_s: i64, minutes: i64, with_dcgm: bool) -> String {
    let n = minutes * 60 / EVERY_S; // samples 0..=n
    let start = end_unix_s - n * EVERY_S;
    let mut out = String::with_capacity(32 << 20);
    let mut bodies = vec![fixture("vllm/v0.32-cpu-queueing-maxseqs4.prom")];
    if with_dcgm {
        bodies.push(fixture("dcgm/t4-loaded-no-help.prom"));
    }
    for body in bodies {
        let exp = parse(&body).expect("fixture parses");
        for f in exp.data_families() {
            let grows = matches!(f.kind, MetricType::Counter | MetricType::Histogram);
            for s in &f.samples {
                if s.name.ends_with("_created") {
                    continue;
                }
                for k in 0..=n {
                    let t = start + k * EVERY_S;
                    let minutes_in = (k * EVERY_S) as f64 / 60.0;
                    let v = match s.name.as_str() {
                        _ if grows => s.value * minutes_in,
                        "vllm:num_requests_running" => RUNNING,
                        "vllm:num_requests_waiting" if k == n - PEAK_BACK => WAITING_PEAK,
                        "vllm:num_requests_waiting" => 0.0,
                        "vllm:kv_cache_usage_perc" if k == n - PEAK_BACK => KV_PEAK,
                        "vllm:kv_cache_usage_perc" => 0.25,
                        _ => s.value,
                    };
                    let _ = writeln!(out, "{}{} {v:?} {t}", s.name, s.labels);
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Whether `name` is on PATH; when it is not, fails if `HEADROOM_REQUIRE_PROMTOOL` is set and
/// otherwise says loudly that the check was skipped.
pub fn on_path(name: &str) -> Option<PathBuf> {
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
            "\n!!! SKIPPED: {name} is not installed, so diagnose over a Prometheus range was NOT\n\
             !!! checked. Run scripts/install-prometheus.\n"
        );
    }
    found
}

/// A running Prometheus over backfilled blocks; killed (by PID) when dropped.
pub struct LocalProm {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// End of the data, Unix seconds (the last sample's time).
    pub end_unix_s: i64,
    /// Time spent generating, backfilling and starting, s.
    pub setup_s: f64,
    _dir: tempfile::TempDir,
}

impl Drop for LocalProm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
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

/// Generates `minutes` of series ending a minute ago, backfills them with `promtool` and starts
/// `prometheus` on loopback; waits (at most 60 s) until a query over the data answers.
pub fn start(prometheus: &Path, promtool: &Path, minutes: i64) -> LocalProm {
    start_with(prometheus, promtool, minutes, true)
}

/// [`start`] with the engine's series only: a Prometheus that never scraped dcgm-exporter.
pub fn start_engine_only(prometheus: &Path, promtool: &Path, minutes: i64) -> LocalProm {
    start_with(prometheus, promtool, minutes, false)
}

fn start_with(prometheus: &Path, promtool: &Path, minutes: i64, with_dcgm: bool) -> LocalProm {
    let t0 = Instant::now();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let end = now - 60 - now % EVERY_S;
    let dir = tempfile::tempdir().expect("temp dir");
    let om = dir.path().join("series.om.txt");
    std::fs::write(&om, openmetrics_of(end, minutes, with_dcgm)).unwrap();
    let data = dir.path().join("data");
    let out = Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool tsdb create-blocks-from openmetrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global: {evaluation_interval: 15s}\nscrape_configs: []\n",
    )
    .unwrap();
    let log = dir.path().join("prometheus.log");
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg("--storage.tsdb.retention.time=30d")
        .arg("--log.level=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start prometheus");
    let mut prom = LocalProm {
        child,
        base: String::new(),
        end_unix_s: end,
        setup_s: 0.0,
        _dir: dir,
    };
    // Read only once `prom` owns the child: a panic here still kills it.
    let port = headroom_testkit::prometheus_port(&log);
    prom.base = format!("http://127.0.0.1:{port}");
    let q = format!("/api/v1/query?query=vllm%3Anum_requests_running&time={end}");
    let waited = Instant::now();
    loop {
        let body = http_get(port, &q).unwrap_or_default();
        if body.contains("\"result\":[{") {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "Prometheus did not serve the backfilled data within 60 s (last answer {body:?}); log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    prom.setup_s = t0.elapsed().as_secs_f64();
    prom
}
