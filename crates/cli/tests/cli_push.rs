//! `sweep --push-to` and `report --push-to` against a real Prometheus (Debian's `prometheus`,
//! started by the test on loopback with its remote-write receiver on): the series read back
//! with PromQL carry the labels and values that results.json holds, at each level's end; a run
//! pushed again is taken (identical samples), a changed one is refused with Prometheus's reason;
//! a dead receiver is a warning and the run directory is complete. Every child is bounded.

use headroom_testkit::{prometheus_bin, refusing_port, start_prometheus_receiver};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// Lenient enough that the twin passes with a few requests (TTFT p50 needs 2 samples), so
/// verdicts and a capacity are pushed, not only INCONCLUSIVE levels.
const SLO: &str = "objectives:\n  \"*\":\n    ttft: {p50: 60s}\n    error_rate: 50%\n";

/// A short sweep of the embedded twin at 2 and 4 concurrent, pushing to `push_to`.
fn sweep(dir: &Path, push_to: &str) -> Output {
    std::fs::write(dir.join("slo.yaml"), SLO).unwrap();
    Command::new("timeout")
        .args(["180", BIN, "sweep", "--quick", "--slo"])
        .arg(dir.join("slo.yaml"))
        .args([
            "--levels",
            "2,4",
            "--warmup",
            "1",
            "--measure",
            "3",
            "--seed",
            "7",
            "--progress",
            "plain",
            "--push-to",
            push_to,
            "--out",
        ])
        .arg(dir.join("run"))
        .output()
        .unwrap()
}

/// `GET path` on 127.0.0.1:port: (status, body). Bounded by a 10 s read timeout.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, body.to_string());
    }
    // Go's server sends a larger answer in chunks: `SIZE-in-hex\r\nDATA\r\n`, 0 last.
    let (mut rest, mut out) = (body, String::new());
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    (status, out)
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The instant vector `query` evaluates to now: (labels, value) per series.
fn query(port: u16, q: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let (status, body) = get(port, &format!("/api/v1/query?query={}", percent_encode(q)));
    assert_eq!(status, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = r["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let value: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            (labels, value)
        })
        .collect()
}

fn wait_ready(port: u16) {
    let t0 = Instant::now();
    while get(port, "/-/ready").0 != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "Prometheus not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// The value of the series with exactly `want` labels (`__name__` aside) in `got`.
fn value_of(got: &[(BTreeMap<String, String>, f64)], want: &BTreeMap<String, String>) -> f64 {
    let hits: Vec<f64> = got
        .iter()
        .filter(|(l, _)| {
            let mut l = l.clone();
            l.remove("__name__");
            l == *want
        })
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(hits.len(), 1, "{want:?} in {got:#?}");
    hits[0]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn a_sweep_pushes_what_results_json_says_to_a_real_prometheus() {
    let Some(bin) = prometheus_bin("`sweep --push-to`") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_prom, port) = start_prometheus_receiver(&bin, dir.path());
    wait_ready(port);
    let url = format!("http://127.0.0.1:{port}/api/v1/write");
    let out = sweep(dir.path(), &url);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{err}");
    assert!(!err.contains("warning: push"), "{err}");
    assert!(
        err.contains(&format!("to {url} (job=\"headroom\", run_id=\"run\")")),
        "{err}"
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/results.json")).unwrap())
            .unwrap();

    let series = |name: &str| query(port, &format!("{name}{{job=\"headroom\",run_id=\"run\"}}"));
    let values = series("headroom_sweep_level_objective_value");
    let thresholds = series("headroom_sweep_level_objective_threshold");
    let objective_verdicts = series("headroom_sweep_level_objective_verdict");
    let verdicts = series("headroom_sweep_level_verdict");
    let inconclusive = series("headroom_sweep_level_inconclusive");
    let throughput = series("headroom_sweep_level_throughput_tokens_per_second");
    let capacity = series("headroom_sweep_phase_capacity");
    let ends = query(
        port,
        "timestamp(headroom_sweep_level_inconclusive{job=\"headroom\",run_id=\"run\"})",
    );
    let verdict_value = |v: &serde_json::Value| match v.as_str().unwrap() {
        "PASS" => Some(1.0),
        "FAIL" => Some(0.0),
        _ => None,
    };
    let (mut checked, mut judged) = (0, 0);
    for phase in results["phases"].as_array().unwrap() {
        let name = phase["name"].as_str().unwrap();
        let mode = phase["mode"].as_str().unwrap();
        for level in phase["levels"].as_array().unwrap() {
            let load = level["load"].as_f64().unwrap().to_string();
            let base = [
                ("job", "headroom"),
                ("run_id", "run"),
                ("phase", name),
                ("class", name),
                ("mode", mode),
                ("load", load.as_str()),
            ];
            let level_labels = labels(&base);
            assert!(close(
                value_of(&throughput, &level_labels),
                level["output_tokens_per_s"].as_f64().unwrap()
            ));
            let end =
                level["started_unix_s"].as_f64().unwrap() + level["window_s"].as_f64().unwrap();
            assert!(
                (value_of(&ends, &level_labels) - end).abs() < 0.001,
                "level {load} ends at {end}"
            );
            let v = verdict_value(&level["verdict"]);
            assert_eq!(
                value_of(&inconclusive, &level_labels),
                f64::from(u8::from(v.is_none()))
            );
            match v {
                Some(v) => {
                    assert_eq!(value_of(&verdicts, &level_labels), v);
                    judged += 1;
                }
                None => assert!(verdicts.iter().all(|(l, _)| l.get("load") != Some(&load))),
            }
            for o in level["objectives"].as_array().unwrap() {
                let id = o["id"].as_str().unwrap();
                let unit = if id == "error_rate" {
                    "ratio"
                } else {
                    "seconds"
                };
                let mut l = base.to_vec();
                l.extend([("objective", id), ("unit", unit)]);
                let l = labels(&l);
                assert!(close(
                    value_of(&thresholds, &l),
                    o["threshold"].as_f64().unwrap()
                ));
                if let Some(obs) = o["observed"].as_f64() {
                    assert!(close(value_of(&values, &l), obs), "{id} at {load}");
                    checked += 1;
                }
                if let Some(v) = verdict_value(&o["verdict"]) {
                    assert_eq!(value_of(&objective_verdicts, &l), v);
                }
            }
        }
        match phase["capacity"].as_f64() {
            Some(c) => {
                let l = labels(&[
                    ("job", "headroom"),
                    ("run_id", "run"),
                    ("phase", name),
                    ("class", name),
                    ("mode", mode),
                ]);
                assert_eq!(value_of(&capacity, &l), c);
            }
            None => assert!(capacity.iter().all(|(l, _)| l["phase"] != name)),
        }
    }
    assert!(
        checked >= 2 && judged >= 1,
        "too little measured: {results}"
    );

    // The same run again: identical samples, taken. A changed value for a time Prometheus has
    // is refused with its reason and what it means.
    let report = |extra: &[&str]| {
        Command::new("timeout")
            .args(["60", BIN, "report"])
            .arg(dir.path().join("run"))
            .args(extra)
            .output()
            .unwrap()
    };
    let again = report(&["--push-to", &url]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let path = dir.path().join("run/results.json");
    let mut tampered = results.clone();
    tampered["phases"][0]["levels"][0]["output_tokens_per_s"] = serde_json::json!(1.5);
    std::fs::write(&path, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let refused = report(&["--push-to", &url]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains(&format!("{url}: HTTP 400, not retried: ")),
        "{err}"
    );
    assert!(err.contains("a changed value for a time it has"), "{err}");
}

#[test]
fn a_dead_push_target_is_a_warning_and_the_run_directory_is_complete() {
    let (_held, port) = refusing_port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/api/v1/write");
    let out = sweep(dir.path(), &url);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{err}");
    assert!(
        err.contains(&format!(
            "headroom: warning: push failed: {url}: 4 attempts failed"
        )),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    assert!(
        err.contains(&format!("pushes to {url} failed (0 samples landed)")),
        "{err}"
    );
    let run = dir.path().join("run");
    for f in [
        "manifest.json",
        "results.json",
        "levels.csv",
        "report.md",
        "report.html",
    ] {
        assert!(run.join(f).is_file(), "{f} missing: {err}");
    }
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["status"]["state"], "complete", "{results}");
    assert_eq!(results["phases"][0]["levels"].as_array().unwrap().len(), 2);
}
