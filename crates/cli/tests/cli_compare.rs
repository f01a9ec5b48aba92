//! `headroom compare` end to end on the engine twin: the same workload swept against a twin and
//! against the same twin with half its scheduler slots (`--max-num-seqs`); the comparison must
//! call that a regression and name the queue as the phase that moved, while two sweeps of one
//! configuration with different seeds must show no detectable change; `headroom report` renders
//! a run directory again. Each child is bounded.

use headroom_testkit::{Killed, printed_addr};
use std::path::Path;
use std::process::{Command, Stdio};

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

fn compare(dir: &Path, a: &str, b: &str) -> (i32, serde_json::Value) {
    let o = Command::new(BIN)
        .arg("compare")
        .arg(dir.join(a))
        .arg(dir.join(b))
        .args(["--format", "json"])
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
    let (code, v) = compare(dir.path(), "base", "same");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["decision"], "promote");
    let (code, v) = compare(dir.path(), "base", "cand");
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
}
