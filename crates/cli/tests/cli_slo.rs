//! `headroom slo …` end to end: the binary's output, files and exit codes.
//!
//! `slo rules` output is checked with `promtool check rules` when promtool is on PATH; without
//! it the check is skipped with a loud message, unless `HEADROOM_REQUIRE_PROMTOOL` is set (the
//! project's `scripts/test` sets it after `scripts/install-prometheus`), in which case it fails.

use headroom_testkit::refusing_port;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// Every latency threshold is a vLLM bucket bound: TTFT 0.25 s and ITL 0.05 s
/// (`vllm/v1/metrics/loggers.py`), queue time 0.3 s (request-latency buckets).
const ON_BUCKET: &str = "objectives:
  \"*\":
    ttft: {p95: 250ms}
    itl: {p95: 50ms}
    queue_time: {p95: 300ms}
    error_rate: 0.5%
  chat:
    ttft: {p99: 500ms}
budget: {window: 30d, target: 99%, freeze_at: 50%}
";

/// TTFT 300 ms lies between vLLM's 0.25 s and 0.5 s bounds.
const OFF_BUCKET: &str = "objectives:
  chat:
    ttft: {p95: 300ms}
";

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

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("promtool"))
            .find(|c| c.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if std::env::var_os("HEADROOM_REQUIRE_PROMTOOL").is_some() => panic!(
            "promtool not found on PATH and HEADROOM_REQUIRE_PROMTOOL is set; run scripts/install-prometheus"
        ),
        None => {
            eprintln!(
                "\n!!! SKIPPED: promtool is not installed, so `headroom slo rules` output was NOT\n\
                 !!! checked by Prometheus. Run scripts/install-prometheus, or set\n\
                 !!! HEADROOM_REQUIRE_PROMTOOL=1 to make this a failure.\n"
            );
            None
        }
    }
}

#[test]
fn rules_on_bucket_pass_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", ON_BUCKET);
    let out = dir.path().join("rules.yml");
    let o = headroom(&[
        "slo",
        "rules",
        "--slo",
        slo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--label",
        "team=inference",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "--out writes the file, not stdout");
    let text = std::fs::read_to_string(&out).unwrap();
    // one group per class, the four Workbook tiers' alert, the queue alert, no VRAM alert
    assert!(text.contains("headroom-slo-chat"), "{text}");
    assert!(text.contains("HeadroomErrorBudgetBurn"), "{text}");
    assert!(text.contains("HeadroomEngineQueueing"), "{text}");
    assert!(text.contains("le=\"0.25\""), "{text}");
    assert!(text.contains("team: inference"), "{text}");
    assert!(
        !text.contains("DCGM_FI_DEV_FB_USED"),
        "no VRAM alert: {text}"
    );
    if let Some(pt) = promtool() {
        let c = Command::new(pt)
            .args(["check", "rules"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            c.status.success(),
            "promtool check rules failed:\n{}\n{}\n{text}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        );
    }
    // the same to stdout
    let o = headroom(&[
        "slo",
        "rules",
        "--slo",
        slo.to_str().unwrap(),
        "--label",
        "team=inference",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), text);
}

#[test]
fn rules_off_bucket_threshold_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", OFF_BUCKET);
    let s = slo.to_str().unwrap();
    let o = headroom(&["slo", "rules", "--slo", s]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).is_empty());
    let e = stderr(&o);
    assert!(e.contains(s), "names the file: {e}");
    assert!(
        e.contains("objectives.chat.ttft.p95"),
        "names the field: {e}"
    );
    assert!(
        e.contains("250 ms below and 500 ms above"),
        "nearest bounds: {e}"
    );
    assert!(e.contains("--off-bucket snap-up"), "says which flag: {e}");
    // snapping up is allowed on request, with a warning on stderr
    let o = headroom(&["slo", "rules", "--slo", s, "--off-bucket", "snap-up"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("le=\"0.5\""), "{}", stdout(&o));
    assert!(stderr(&o).contains("warning:"), "{}", stderr(&o));
    // --off-bucket refuse is honoured with the built-in SLO too
    let o = headroom(&["slo", "rules", "--off-bucket", "refuse"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("built-in slo.yaml"), "{}", stderr(&o));
}

/// The built-in SLO (no --slo) keeps the seed guides' TTFT p95 < 300 ms, which lies between
/// vLLM's 0.25 s and 0.5 s TTFT buckets; its ITL 50 ms and queue-time 300 ms are bounds. Without
/// --off-bucket, `slo rules` and `slo budget` snap TTFT to 250 ms (the stricter bound) and say
/// so on stderr; the same SLO given as an explicit --slo file is still refused.
#[test]
fn builtin_slo_snaps_to_the_stricter_bound_with_a_warning() {
    let o = headroom(&["slo", "rules"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("warning: no --slo given"), "{e}");
    assert!(
        e.contains("--off-bucket snap-up"),
        "says how to choose otherwise: {e}"
    );
    assert!(
        e.contains("objectives.*.ttft.p95: threshold 300 ms is not a bucket bound"),
        "{e}"
    );
    assert!(e.contains("using 250 ms (snapped down"), "{e}");
    // exactly one snap: ITL 0.05 and queue time 0.3 are bounds
    assert_eq!(e.matches("(snapped ").count(), 1, "{e}");
    let text = stdout(&o);
    assert!(
        text.contains("vllm:time_to_first_token_seconds_bucket{le=\"0.25\"}"),
        "{text}"
    );
    assert!(
        text.contains("vllm:request_queue_time_seconds_bucket{le=\"0.3\"}"),
        "{text}"
    );
    if let Some(pt) = promtool() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "builtin.yml", &text);
        let c = Command::new(pt)
            .args(["check", "rules"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            c.status.success(),
            "promtool check rules failed:\n{}\n{}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        );
    }
    // snap-up on request: 500 ms, no default note
    let o = headroom(&["slo", "rules", "--off-bucket", "snap-up"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("no --slo given"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("vllm:time_to_first_token_seconds_bucket{le=\"0.5\"}"),
        "{}",
        stdout(&o)
    );
    // the same SLO as an explicit file is refused by default
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "slo.yaml", headroom_core::slo::DEFAULT_SLO_YAML);
    let o = headroom(&["slo", "rules", "--slo", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("not a bucket bound"), "{}", stderr(&o));
    // slo budget gets past the SLI (and fails only on the unreachable Prometheus)
    let (_reserved_port, port) = refusing_port();
    let o = headroom(&[
        "slo",
        "budget",
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--timeout",
        "2s",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(!e.contains("not a bucket bound of"), "{e}");
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn rules_unknown_class_and_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", ON_BUCKET);
    let o = headroom(&[
        "slo",
        "rules",
        "--slo",
        slo.to_str().unwrap(),
        "--class",
        "batch",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("batch"), "{}", stderr(&o));
    let bad = write(
        dir.path(),
        "bad.yaml",
        "objectives:\n  chat:\n    ttft: {p100: 1s}\n",
    );
    let o = headroom(&["slo", "rules", "--slo", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.yaml"), "{}", stderr(&o));
    assert!(stderr(&o).contains("percentile"), "{}", stderr(&o));
}

#[test]
fn dashboard_is_grafana_json_with_a_row_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", ON_BUCKET);
    let o = headroom(&[
        "slo",
        "dashboard",
        "--slo",
        slo.to_str().unwrap(),
        "--uid",
        "my-uid",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("dashboard JSON");
    assert_eq!(v["uid"], "my-uid");
    let rows = v["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "row")
        .count();
    assert!(rows >= 6, "one row per analysis step, got {rows}");
}

#[test]
fn autoscale_on_kv_and_waiting_never_gpu_utilisation() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", OFF_BUCKET);
    let o = headroom(&[
        "slo",
        "autoscale",
        "--slo",
        slo.to_str().unwrap(),
        "--deployment",
        "vllm-chat",
        "--namespace",
        "llm",
        "--max-replicas",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("kind: ScaledObject"), "{t}");
    assert!(t.contains("vllm:kv_cache_usage_perc"), "{t}");
    assert!(t.contains("vllm:num_requests_waiting"), "{t}");
    assert!(t.contains("vllm-chat"), "{t}");
    assert!(!t.contains("DCGM_FI_DEV_GPU_UTIL"), "{t}");
    let o = headroom(&[
        "slo",
        "autoscale",
        "--slo",
        slo.to_str().unwrap(),
        "--kv-usage-target",
        "150%",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

/// `--kind hpa` writes the HPA alone to stdout and the adapter values to their own file;
/// `--from RUN_DIR` takes the targets from the sweep's capacity level, less the headroom.
#[test]
fn autoscale_hpa_apart_and_targets_from_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::write(
        run.join("results.json"),
        r#"{"phases": [{"name": "claims_assistant", "mode": "concurrency", "capacity": 64.0, "levels": [
            {"load": 64.0, "server": {"figures": {"kv_cache_usage_max_ratio": 0.9, "waiting_mean": 2.5}}},
            {"load": 128.0, "server": {"figures": {"kv_cache_usage_max_ratio": 1.0, "waiting_mean": 60.0}}}]}]}"#,
    )
    .unwrap();
    let values = dir.path().join("adapter.yaml");
    let o = headroom(&[
        "slo",
        "autoscale",
        "--kind",
        "hpa",
        "--adapter-values",
        values.to_str().unwrap(),
        "--from",
        run.to_str().unwrap(),
        "--headroom",
        "20%",
        "--namespace",
        "llm",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("kind: HorizontalPodAutoscaler"), "{t}");
    assert!(!t.contains("ScaledObject") && !t.contains("\n---"), "{t}");
    // 0.9 × 0.8 = 0.72 per engine; 2.5 × 0.8 = 2 waiting per replica.
    assert!(t.contains("averageValue: 720m"), "{t}");
    assert!(t.contains("averageValue: \"2\""), "{t}");
    assert!(
        t.contains("# from the sweep: phase claims_assistant held 64"),
        "{t}"
    );
    let v = std::fs::read_to_string(&values).unwrap();
    assert!(
        v.contains("seriesQuery: vllm:kv_cache_usage_perc{namespace=\"llm\",model_name!=\"\"}"),
        "{v}"
    );
    // --adapter-values is only for the HPA.
    let o = headroom(&[
        "slo",
        "autoscale",
        "--adapter-values",
        values.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

#[test]
fn budget_against_an_unreachable_prometheus_names_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(dir.path(), "slo.yaml", ON_BUCKET);
    let (_reserved_port, port) = refusing_port();
    let url = format!("http://127.0.0.1:{port}");
    let o = headroom(&[
        "slo",
        "budget",
        "--slo",
        slo.to_str().unwrap(),
        "--prometheus",
        &url,
        "--timeout",
        "2s",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains(&url), "{}", stderr(&o));
}

/// A ratio-metric OpenSLO v1 document (TTFT of served model `chat`).
const OPENSLO: &str = include_str!("fixtures/openslo-chat-ttft.yaml");

#[test]
fn import_openslo_gives_an_slo_file_the_other_commands_accept() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(dir.path(), "openslo.yaml", OPENSLO);
    let out = dir.path().join("slo.yaml");
    let o = headroom(&[
        "slo",
        "import",
        src.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    // good = le 0.25 over all, target 0.95 → chat: ttft p95 ≤ 250 ms; window 28d
    let f = headroom_core::SloFile::parse(&text, Path::new("slo.yaml")).unwrap();
    let spec = f.spec_for("chat");
    assert_eq!(spec.objectives.len(), 1, "{text}");
    assert_eq!(spec.objectives[0].id(), "ttft_p95");
    assert!(matches!(
        spec.objectives[0],
        headroom_core::Objective::Latency { threshold_s, .. } if threshold_s == 0.25
    ));
    assert_eq!(f.budget.unwrap().window, "28d");
    // and the imported file generates rules
    let o = headroom(&["slo", "rules", "--slo", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let bad = write(
        dir.path(),
        "v2.yaml",
        &OPENSLO.replace("openslo/v1", "openslo/v2alpha"),
    );
    let o = headroom(&["slo", "import", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("v2.yaml"), "{}", stderr(&o));
    assert!(stderr(&o).contains("apiVersion"), "{}", stderr(&o));
}

/// Errors found after parsing name FILE:LINE:COL of the offending key (counted by hand in each
/// file below) and quote its line: a window past a year, an off-bucket threshold, a target of
/// 0 %, an error rate of 0, an OpenSLO field in the second document of a stream.
#[test]
fn refusals_point_at_the_key_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "w.yaml",
            "objectives:\n  chat:\n    ttft: {p95: 250ms}\nbudget:\n  window: 300y\n  target: 99%\n",
            vec!["slo", "rules"],
            ":5:3: budget.window: `300y` is longer than 365 days (1y)",
            "  window: 300y",
        ),
        (
            "b.yaml",
            "objectives:\n  chat:\n    ttft: {p95: 300ms}\n",
            vec!["slo", "rules"],
            ":3:12: objectives.chat.ttft.p95: threshold 300 ms is not a bucket bound",
            "    ttft: {p95: 300ms}",
        ),
        (
            "t.yaml",
            "objectives:\n  chat:\n    ttft: {p95: 250ms}\nbudget: {window: 30d, target: 0%}\n",
            vec!["slo", "rules"],
            ":4:23: budget.target: 0 is 0 % or less",
            "budget: {window: 30d, target: 0%}",
        ),
        (
            "e.yaml",
            "objectives:\n  chat:\n    error_rate: 0\n",
            vec!["slo", "dashboard"],
            ":3:5: objectives.chat.error_rate: 0 leaves no error budget",
            "    error_rate: 0",
        ),
        (
            "c.yaml",
            "# nothing yet\n",
            vec!["slo", "rules"],
            ": no SLO in the file (it is empty or only comments); expected `objectives:`",
            "",
        ),
    ];
    for (name, text, args, head, line) in cases {
        let f = write(dir.path(), name, text);
        let mut a = args.clone();
        a.extend(["--slo", f.to_str().unwrap()]);
        let o = headroom(&a);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stdout(&o));
        let e = stderr(&o);
        let first = e.lines().next().unwrap();
        assert!(
            first.starts_with(&format!("error: {}{head}", f.display())),
            "{head}\n  vs {e}"
        );
        if !line.is_empty() {
            assert!(
                e.lines().nth(1).unwrap().ends_with(&format!("| {line}")),
                "{e}"
            );
        }
    }
    let os = write(
        dir.path(),
        "os.yaml",
        &format!(
            "{OPENSLO}---\n{}",
            OPENSLO.replace("target: 0.95", "target: 0.005")
        ),
    );
    let o = headroom(&["slo", "import", os.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    // OPENSLO is 21 lines, `---` is line 22, so the second document's objectives line (its
    // 21st) is line 43; `target` starts in column 48 of it
    assert!(
        e.starts_with(&format!(
            "error: {}:43:48: openslo[1].spec.objectives[0].target: target 0.005 makes p0.5",
            os.display()
        )),
        "{e}"
    );
}

/// A stand-in for Prometheus (`POST /api/v1/query`) and vLLM (`GET /v1/models`) serving one
/// model, `llama`, with vLLM series only for it: `count(sel)` is empty when `sel` names
/// another model.
fn fake_prometheus_and_vllm() -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            // The form-encoded query, matched as sent (`count by (job)` is `count%20by%20%28job%29`).
            let q = String::from_utf8(body).unwrap();
            let sample = |labels: &str| {
                format!(
                    r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{{labels}}},"value":[1,"1"]}}]}}}}"#
                )
            };
            let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
            let answer = if line.starts_with("GET /v1/models") {
                r#"{"object":"list","data":[{"id":"llama","object":"model"}]}"#.to_string()
            } else if q.contains("count%20by%20%28model_name%29") {
                sample(r#""model_name":"llama""#)
            } else if q.contains("count%20by%20%28job%29") {
                sample(r#""job":"vllm""#)
            } else if q.contains("count%20by") {
                empty.to_string()
            } else if q.contains("model_name%3D%22llama%22") {
                sample("")
            } else {
                empty.to_string()
            };
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    port
}

/// Classes `chat` and `rag` on a server that serves `llama`: without a check the commands warn
/// that classes are matched as served model names; `--target` names the served models and
/// `--check-against` the selectors that match nothing and what the Prometheus holds; a class
/// named after the served model passes both.
#[test]
fn outputs_are_checked_against_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let slo = write(
        dir.path(),
        "slo.yaml",
        "objectives:\n  \"*\": {ttft: {p95: 250ms}, error_rate: 1%}\n  chat: {}\n  rag: {ttft: {p95: 1s}}\n",
    );
    let slo = slo.to_str().unwrap();
    let o = headroom(&["slo", "rules", "--slo", slo]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("class(es) chat, rag are matched as model_name=\"<class>\""),
        "{}",
        stderr(&o)
    );
    let url = format!("http://127.0.0.1:{}", fake_prometheus_and_vllm());
    let o = headroom(&["slo", "rules", "--slo", slo, "--target", &url]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("serves llama; class(es) chat, rag"),
        "{}",
        stderr(&o)
    );
    for cmd in [
        vec!["slo", "rules", "--slo", slo, "--check-against", &url],
        vec![
            "slo",
            "autoscale",
            "--slo",
            slo,
            "--class",
            "chat",
            "--check-against",
            &url,
        ],
    ] {
        let o = headroom(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(e.contains("match no series in Prometheus"), "{e}");
        assert!(e.contains("model_name=\"chat\""), "{e}");
        assert!(e.contains("served models): llama; job: vllm"), "{e}");
    }
    let ok = write(
        dir.path(),
        "ok.yaml",
        "objectives:\n  llama: {ttft: {p95: 250ms}, error_rate: 1%}\n",
    );
    let ok = ok.to_str().unwrap();
    for cmd in ["rules", "autoscale"] {
        let o = headroom(&[
            "slo",
            cmd,
            "--slo",
            ok,
            "--check-against",
            &url,
            "--target",
            &url,
        ]);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", stderr(&o));
        assert!(!stderr(&o).contains("matched as"), "{}", stderr(&o));
    }
}

/// The Kubernetes schema validator of `scripts/k8s-validate/setup.sh` (`HEADROOM_K8S_VALIDATE`
/// names another); `None`, loudly, when it is not installed, and a failure instead with
/// `HEADROOM_REQUIRE_K8S_VALIDATE=1` (set by `scripts/test` once the setup succeeded).
fn k8s_validator() -> Option<PathBuf> {
    let bin = std::env::var_os("HEADROOM_K8S_VALIDATE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| {
                PathBuf::from(h).join(".cache/headroom-k8s-validate/venv/bin/kubernetes-validate")
            })
        })
        .filter(|p| p.is_file());
    if bin.is_none() {
        assert!(
            std::env::var("HEADROOM_REQUIRE_K8S_VALIDATE")
                .ok()
                .is_none_or(|v| v != "1"),
            "HEADROOM_REQUIRE_K8S_VALIDATE=1 but no validator; run scripts/k8s-validate/setup.sh"
        );
        eprintln!(
            "SKIPPED: kubernetes-validate not installed (scripts/k8s-validate/setup.sh installs it)"
        );
    }
    bin
}

/// What `slo autoscale --kind hpa` writes passes the Kubernetes schema in strict mode (no
/// unknown field), scoped or not; the adapter values are a file of their own, not an object in
/// the stream (`kubectl apply` once failed with "Object 'Kind' is missing").
#[test]
fn autoscale_hpa_passes_the_kubernetes_schema() {
    let Some(validator) = k8s_validator() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for extra in [
        &[][..],
        &["--namespace", "llm", "--match", "job=~\"vllm|vllm-b\""][..],
    ] {
        let out = dir.path().join("hpa.yaml");
        let values = dir.path().join("values.yaml");
        let mut args = vec![
            "slo",
            "autoscale",
            "--kind",
            "hpa",
            "--out",
            out.to_str().unwrap(),
            "--adapter-values",
            values.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = headroom(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v = Command::new(&validator)
            .args(["--strict", out.to_str().unwrap()])
            .output()
            .unwrap();
        let said = format!("{}{}", stdout(&v), stderr(&v));
        assert!(
            v.status.success() && said.contains("passed"),
            "{extra:?}: {said}"
        );
        assert!(!said.contains("WARN") && !said.contains("ERROR"), "{said}");
    }
}
