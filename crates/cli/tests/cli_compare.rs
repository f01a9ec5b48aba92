//! `headroom compare` end to end on the engine twin: the same workload swept against a twin and
//! against the same twin with half its scheduler slots (`--max-num-seqs`); the comparison must
//! call that a regression and name the queue as the phase that moved, while two sweeps of one
//! configuration with different seeds must show no detectable change; `headroom report` renders
//! a run directory again. Each child is bounded.

use headroom_testkit::{Killed, printed_addr, prometheus_bin, start_prometheus};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

const WORKLOAD: &str = "\
seed: 1
load: {mode: concurrency}
classes:
  - name: chat
    endpoint: completions
    prompt_tokens: {fixed: 64}
    max_tokens: {fixed: 32}
    ignore_eos: true
";

const SLO: &str = "\
objectives:
  \"*\":
    ttft: {p95: 500ms}
    itl: {p95: 250ms}
    error_rate: 5%
";

fn sim(extra: &[&str]) -> (Killed, String) {
    let mut c = Command::new(BIN)
        .args(["sim", "--port", "0", "--dcgm-port", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = printed_addr(&mut c);
    (Killed(c), format!("http://{addr}"))
}

fn sweep(dir: &Path, target: &str, seed: &str, out: &str) {
    let st = Command::new("timeout")
        .args(["240", BIN, "sweep", "--target", target])
        .arg("--workload")
        .arg(dir.join("w.yaml"))
        .arg("--slo")
        .arg(dir.join("slo.yaml"))
        .args([
            "--levels",
            "4,16",
            "--warmup",
            "2",
            "--measure",
            "6",
            "--seed",
            seed,
        ])
        .arg("--out")
        .arg(dir.join(out))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    // 0: capacities found; 3: none anywhere (still a valid run directory to compare).
    assert!(matches!(st.code(), Some(0 | 3)), "sweep {out}: {st:?}");
}

fn compare(dir: &Path, a: &str, b: &str, extra: &[&str]) -> (i32, serde_json::Value) {
    let o = Command::new(BIN)
        .arg("compare")
        .arg(dir.join(a))
        .arg(dir.join(b))
        .args(["--format", "json"])
        .args(extra)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "compare {a} {b}: {e}; stderr {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

#[test]
fn a_halved_scheduler_is_a_regression_and_a_reseed_is_not() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.yaml"), WORKLOAD).unwrap();
    std::fs::write(dir.path().join("slo.yaml"), SLO).unwrap();
    {
        let (_twin, url) = sim(&[]);
        sweep(dir.path(), &url, "1", "base");
        sweep(dir.path(), &url, "2", "same");
    }
    {
        let (_twin, url) = sim(&["--max-num-seqs", "4"]);
        sweep(dir.path(), &url, "1", "cand");
    }
    let (code, v) = compare(dir.path(), "base", "same", &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["decision"], "promote");
    let (code, v) = compare(dir.path(), "base", "cand", &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["capacity"][0]["change"], "worse", "{v:#}");
    let at16 = v["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["load"] == 16.0)
        .expect("level 16 in both");
    let moved = at16["moved_most"].as_str().unwrap_or_default();
    assert!(
        moved.contains("queue") || moved.contains("waiting"),
        "moved most: {moved}; {at16:#}"
    );
    // `headroom report` renders a run directory again from its results.json alone.
    let base = dir.path().join("base");
    for f in ["report.html", "report.md", "levels.csv"] {
        std::fs::remove_file(base.join(f)).unwrap();
    }
    let before = std::fs::read(base.join("results.json")).unwrap();
    let st = Command::new(BIN)
        .arg("report")
        .arg(&base)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    for f in ["report.html", "report.md", "levels.csv"] {
        assert!(base.join(f).exists(), "{f}");
    }
    assert_eq!(std::fs::read(base.join("results.json")).unwrap(), before);
    // The same comparison refuses runs of another workload unless allowed.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["results.json", "manifest.json", "slo.yaml"] {
        std::fs::copy(dir.path().join("cand").join(f), other.join(f)).unwrap();
    }
    let m = other.join("manifest.json");
    let mut mv: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
    mv["workload"]["classes"][0]["max_tokens"] = serde_json::json!({"fixed": 64});
    std::fs::write(&m, mv.to_string()).unwrap();
    let o = Command::new(BIN)
        .arg("compare")
        .arg(dir.path().join("base"))
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--allow-different-workload"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    budget_holds(dir.path());
}

/// A `/metrics` body of vLLM's TTFT histogram for class `chat` at step `k`: per step 100
/// requests, 92 of them within 500 ms, so 8 % are slow against the 5 % a p95 allows: 160 % of
/// the budget consumed, past `freeze_at` 50 %.
fn ttft_metrics(k: u64) -> String {
    let k = k as f64;
    let name = "vllm:time_to_first_token_seconds";
    let mut s = format!("# TYPE {name} histogram\n");
    for (le, per_step) in [
        ("0.25", 90.0),
        ("0.5", 92.0),
        ("1.0", 100.0),
        ("+Inf", 100.0),
    ] {
        s.push_str(&format!(
            "{name}_bucket{{engine=\"0\",le=\"{le}\",model_name=\"chat\"}} {:.1}\n",
            per_step * k
        ));
    }
    s.push_str(&format!(
        "{name}_count{{engine=\"0\",model_name=\"chat\"}} {:.1}\n",
        100.0 * k
    ));
    s.push_str(&format!(
        "{name}_sum{{engine=\"0\",model_name=\"chat\"}} {:.1}\n",
        20.0 * k
    ));
    s
}

/// Serves [`ttft_metrics`] on a loopback port, one step per 200 ms since the start.
fn serve_ttft_metrics() -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let body = ttft_metrics(t0.elapsed().as_millis() as u64 / 200);
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// `--budget-from` against a real Prometheus whose TTFT budget of `chat` burns: an identical
/// candidate (a copy of the baseline) is HELD with exit 1 naming the objective; the default
/// twin as the candidate against the halved one (better TTFT where the queue formed) promotes.
fn budget_holds(dir: &Path) {
    let Some(bin) = prometheus_bin("`compare --budget-from`") else {
        return;
    };
    let (_prom, port) = start_prometheus(&bin, dir, serve_ttft_metrics());
    std::fs::write(
        dir.join("budget.yaml"),
        "objectives:\n  chat:\n    ttft: {p95: 500ms}\nbudget: {window: 30d, target: 99%, freeze_at: 50%}\n",
    )
    .unwrap();
    copy_dir(&dir.join("base"), &dir.join("base2"));
    let url = format!("http://127.0.0.1:{port}");
    let slo = dir.join("budget.yaml").display().to_string();
    let flags = ["--budget-from", url.as_str(), "--slo", slo.as_str()];
    // Until Prometheus has scraped the counters moving (a few seconds).
    let start = Instant::now();
    let (code, v) = loop {
        let (code, v) = compare(dir, "base", "base2", &flags);
        if v["budget"]["objectives"][0]["past_freeze"] == true {
            break (code, v);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no burning budget: {v:#}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        (code, &v["decision"]),
        (1, &serde_json::json!("held")),
        "{v:#}"
    );
    let b = &v["budget"]["objectives"][0];
    assert_eq!(
        (&b["class"], &b["objective"]),
        (&serde_json::json!("chat"), &serde_json::json!("ttft_p95"))
    );
    assert_eq!(b["strictly_better"], false, "{b:#}");
    let consumed = b["consumed"].as_f64().unwrap();
    assert!(
        (consumed - 1.6).abs() < 1e-6,
        "8 % slow of a 5 % budget: {consumed}"
    );
    let o = Command::new(BIN)
        .arg("compare")
        .arg(dir.join("base"))
        .arg(dir.join("base2"))
        .args(flags)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("HELD") && text.contains("error budget of chat ttft_p95 burns"),
        "{text}"
    );
    let (code, v) = compare(dir, "cand", "base", &flags);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        v["budget"]["objectives"][0]["strictly_better"], true,
        "{v:#}"
    );
}
