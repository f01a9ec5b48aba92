//! `headroom top` end to end against the engine twin and a gateway in front of it, on loopback:
//! the plain lines without a terminal, and the full-screen view in a detached tmux session of a
//! fixed size, driven with `send-keys` and read back with `capture-pane`. The tmux tests skip,
//! saying why, where tmux is missing. Every child is killed when its test ends.

use headroom_testkit::{Killed, Tmux};
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");
const MODEL: &str = "Qwen/Qwen2.5-3B-Instruct";

/// `headroom sim` on free ports: (guard, API `host:port`, dcgm `host:port`), read from its
/// announcement `OpenAI API on http://A (…), dcgm-exporter on http://B/metrics`.
fn sim() -> (Killed, String, String) {
    let mut child = Command::new(BIN)
        .args(["sim", "--port", "0", "--dcgm-port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let guard = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { return };
            let addrs: Vec<String> = line
                .split("http://")
                .skip(1)
                .map(|r| {
                    r.chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                        .collect()
                })
                .collect();
            if addrs.len() >= 2 {
                let _ = tx.send((addrs[0].clone(), addrs[1].clone()));
            }
        }
    });
    let (api, dcgm) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("sim address");
    (guard, api, dcgm)
}

/// `headroom gateway` in front of `upstream` with classes `chat` (chat route) and `default`.
fn gateway(upstream: &str, dir: &std::path::Path) -> (Killed, String) {
    let cfg = dir.join("gateway.yaml");
    std::fs::write(
        &cfg,
        format!("upstreams: [http://{upstream}]\nclasses:\n  - name: chat\n    route: chat\n"),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["gateway", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = headroom_testkit::printed_addr(&mut child);
    (Killed(child), addr)
}

/// POSTs a small request and reads the whole answer (`Connection: close`); returns the status
/// line.
fn post(addr: &str, path: &str, body: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

fn completion(addr: &str) {
    let st = post(
        addr,
        "/v1/completions",
        &format!(r#"{{"model":"{MODEL}","prompt":"hello there","max_tokens":4,"stream":true}}"#),
    );
    assert!(st.contains("200"), "{st}");
}

fn chat(addr: &str) {
    let st = post(
        addr,
        "/v1/chat/completions",
        &format!(
            r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"hi"}}],"max_tokens":4,"stream":true}}"#
        ),
    );
    assert!(st.contains("200"), "{st}");
}

/// `key=value` of a plain line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Without a terminal (stdout a pipe), one line per class per refresh, `--iterations` ends it;
/// the requests sent after the baseline scrape are in the window, with the SLO's thresholds,
/// the engine's phases and the twin's GPU.
#[test]
fn plain_lines_without_a_terminal() {
    let (_sim, api, dcgm) = sim();
    let mut top = Command::new(BIN)
        .args(["top", "--url"])
        .arg(format!("http://{api}/metrics"))
        .arg("--dcgm")
        .arg(format!("http://{dcgm}/metrics"))
        .args(["--interval", "1", "--iterations", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // after the baseline scrape
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..5 {
        completion(&api);
    }
    let t0 = Instant::now();
    let out = loop {
        if let Some(s) = top.try_wait().unwrap() {
            let mut o = String::new();
            top.stdout.take().unwrap().read_to_string(&mut o).unwrap();
            let mut e = String::new();
            top.stderr.take().unwrap().read_to_string(&mut e).unwrap();
            assert!(s.success(), "{s}: {e}");
            break o;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = top.kill();
            panic!("top did not end after --iterations 3");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for l in &lines {
        assert!(l.starts_with("ts="), "{l}");
        assert_eq!(field(l, "class"), Some(MODEL), "{l}");
        assert_eq!(field(l, "window"), Some("1m"), "{l}");
        assert_eq!(field(l, "ttft_p95_max"), Some("0.300000"), "{l}");
        assert_eq!(field(l, "itl_p95_max"), Some("0.050000"), "{l}");
        assert_eq!(field(l, "error_rate_max"), Some("0.00500"), "{l}");
        assert_eq!(field(l, "gpus"), Some("1"), "{l}");
        assert!(field(l, "gpu_power_w").is_some_and(|v| v != "-"), "{l}");
    }
    let last = lines[2];
    assert_eq!(field(last, "requests"), Some("5"), "{last}");
    assert_eq!(field(last, "ttft_p95_n"), Some("5"), "{last}");
    assert_eq!(field(last, "ttft_p95_status"), Some("too_few"), "{last}");
    assert_eq!(field(last, "error_rate"), Some("0.00000"), "{last}");
    assert_eq!(field(last, "error_rate_status"), Some("ok"), "{last}");
    assert!(
        field(last, "prefill_mean_s").is_some_and(|v| v.parse::<f64>().is_ok()),
        "{last}"
    );
}

/// An unreachable URL and a body that is not metrics are lines naming the URL; top keeps
/// retrying and still ends by itself.
/// `headroom top --plain --interval 0.2 BOUND --url URL EXTRA` (no `--url` when `url` is
/// empty): its lines, after checking it ended 0.
fn plain_top(bound: [&str; 2], url: &str, extra: &[&str]) -> Vec<String> {
    let mut cmd = Command::new(BIN);
    cmd.args(["top", "--plain", "--interval", "0.2", bound[0], bound[1]]);
    if !url.is_empty() {
        cmd.args(["--url", url]);
    }
    let out = cmd.args(extra).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An unreachable URL and a body that is not metrics are lines naming the URL; top keeps
/// retrying and still ends by itself.
#[test]
fn errors_name_the_url_and_top_retries() {
    let (_sock, port) = headroom_testkit::refusing_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let lines = plain_top(["--iterations", "2"], &url, &[]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert!(
            l.contains(" error=") && l.contains(&url) && l.contains("unreachable"),
            "{l}"
        );
    }
    let (_sim, api, _) = sim();
    let url = format!("http://{api}/v1/models");
    let lines = plain_top(["--duration", "1"], &url, &[]);
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" error=") && l.contains(&url)),
        "{lines:?}"
    );
}

/// The full-screen view under tmux: classes of a gateway as tabs, the objectives with their
/// thresholds and the requests seen; Tab switches class, `w` the window, `q` quits and the
/// terminal is restored (the shell's next line shows on the normal screen).
#[test]
fn full_screen_view_under_tmux() {
    let Some(bin) = headroom_testkit::tmux() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, api, _) = sim();
    let (_gw, gw) = gateway(&api, dir.path());
    let cmd = format!(
        "{BIN} top --url http://{gw}/metrics --interval 0.5 --duration 60; echo TOP-EXIT=$?; sleep 30"
    );
    let t = Tmux::start(bin, &cmd);
    t.wait(Duration::from_secs(20), "view", |s| {
        s.contains("headroom top") && s.contains("TTFT p95 < 300 ms")
    });
    for _ in 0..3 {
        chat(&gw);
    }
    // classes in name order: chat first
    let s = t.wait(Duration::from_secs(20), "3 chat requests", |s| {
        s.contains("chat · window 1m") && s.contains("3 / 20")
    });
    for want in [
        "ITL p95 < 50 ms",
        "errors + aborts < 0.5%",
        "300 ms",
        "50 ms",
        "too few",
        "default",
        "in flight (gateway)",
        "queue_time_p95: engine only",
        "tab/←→ class",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    // the 3 chat requests' TTFT p95 is a figure in ms or s, not "–"
    let row = s.lines().find(|l| l.contains("TTFT p95 < 300 ms")).unwrap();
    assert!(row.contains(" ms") || row.contains(" s "), "{row}");
    t.keys(&["Tab"]);
    t.wait(Duration::from_secs(10), "the default class", |s| {
        s.contains("default · window 1m")
    });
    t.keys(&["w"]);
    t.wait(Duration::from_secs(10), "the 5m window", |s| {
        s.contains("default · window 5m")
    });
    t.keys(&["Left"]);
    t.wait(Duration::from_secs(10), "back to chat", |s| {
        s.contains("chat · window 5m")
    });
    t.keys(&["q"]);
    let s = t.wait(Duration::from_secs(10), "exit", |s| s.contains("TOP-EXIT="));
    assert!(s.contains("TOP-EXIT=0"), "{s}");
    assert!(
        !s.contains("headroom top"),
        "the alternate screen was not left:\n{s}"
    );
}

/// The twin's engine series in the view: the model as the class, phases and KV cache.
#[test]
fn engine_view_under_tmux_quits_on_ctrl_c() {
    let Some(bin) = headroom_testkit::tmux() else {
        return;
    };
    let (_sim, api, dcgm) = sim();
    let cmd = format!(
        "{BIN} top --url http://{api}/metrics --dcgm http://{dcgm}/metrics --interval 0.5 --windows 30s,2m --duration 60; echo TOP-EXIT=$?; sleep 30"
    );
    let t = Tmux::start(bin, &cmd);
    t.wait(Duration::from_secs(20), "view", |s| {
        s.contains("queue time p95 < 300 ms")
    });
    for _ in 0..2 {
        completion(&api);
    }
    let s = t.wait(Duration::from_secs(20), "2 requests", |s| {
        s.contains("requests finished 2")
    });
    for want in [
        MODEL,
        "window 30s",
        "phases (means)",
        "KV cache",
        "preemptions 0",
        "GPU (dcgm-exporter)",
        "power",
        "DRAM active",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    t.keys(&["w"]);
    t.wait(Duration::from_secs(10), "the 2m window", |s| {
        s.contains("window 2m")
    });
    t.keys(&["C-c"]);
    let s = t.wait(Duration::from_secs(10), "exit", |s| s.contains("TOP-EXIT="));
    assert!(s.contains("TOP-EXIT=0"), "{s}");
}

/// `--prometheus`: the same lines from a real Prometheus scraping the twin every second, the
/// window PromQL's `increase()` over it (extrapolated to the range's edges, so the counts are
/// near, not exactly, the requests sent). Skips, saying so, without Prometheus.
#[test]
fn plain_lines_from_a_real_prometheus() {
    let Some(prom) = headroom_testkit::prometheus_bin("headroom top --prometheus") else {
        return;
    };
    let (_sim, api, _) = sim();
    let dir = tempfile::tempdir().unwrap();
    let port: u16 = api.rsplit(':').next().unwrap().parse().unwrap();
    let (_p, pport) = headroom_testkit::start_prometheus(&prom, dir.path(), port);
    let prom_args = [
        "--prometheus",
        &format!("http://127.0.0.1:{pport}"),
        "--windows",
        "30s",
    ];
    // Requests before Prometheus's first scrape of the twin would be in its first sample,
    // where increase() cannot see them: wait until it holds the twin's series.
    let t0 = Instant::now();
    while !plain_top(["--iterations", "1"], "", &prom_args)
        .iter()
        .any(|l| l.contains(" class="))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "Prometheus never scraped the twin"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..6 {
        completion(&api);
    }
    let t0 = Instant::now();
    let line = loop {
        let lines = plain_top(["--iterations", "1"], "", &prom_args);
        if let Some(l) = lines
            .iter()
            // Prometheus may hold the TTFT histogram's increase a scrape before the request
            // counter's: wait for both.
            .find(|l| {
                field(l, "ttft_p95_n").is_some_and(|n| n != "0")
                    && field(l, "requests")
                        .and_then(|n| n.parse::<f64>().ok())
                        .is_some_and(|n| n >= 1.0)
            })
        {
            break l.clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no requests seen through Prometheus: {lines:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(
        line.contains("source=\"prometheus http://127.0.0.1:"),
        "{line}"
    );
    assert_eq!(field(&line, "class"), Some(MODEL), "{line}");
    assert_eq!(field(&line, "window"), Some("30s"), "{line}");
    assert_eq!(field(&line, "ttft_p95_max"), Some("0.300000"), "{line}");
    let n: f64 = field(&line, "requests").unwrap().parse().unwrap();
    assert!((1.0..=12.0).contains(&n), "{line}");
}
