//! The gateway's `/metrics` before and around admission:
//! - a fresh gateway, scraped before any request, already exports every configured class's
//!   histograms and outcome counters at zero for tenant `other` (and nothing per allowlisted
//!   tenant), so the `absent()` alerts that `headroom slo rules --latency-source gateway`
//!   generates stay silent after a restart (checked with `promtool test rules` on the scraped
//!   series when promtool is installed);
//! - `headroom_gateway_queue_seconds` observes the wait of a request refused after
//!   `queue_timeout` (503) and of a client that left the queue, but not a queue-full 429, which
//!   never waited.
//!
//! Everything binds 127.0.0.1 with ephemeral ports; every wait is bounded.

mod common;

use common::{Filled, completion_body, fill_one_slot, gateway, scrape, twin, url, value};
use headroom_sim::server::Faults;
use http::StatusCode;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// Three classes (two written, plus the implicit `default`), one of them limited, and an
/// allowlisted tenant that sends nothing.
const GW: &str = "tenants: [gold]\nclasses:\n  - {name: chat, route: chat, concurrency: {limit: 2, queue: 2}}\n  - {name: long_context, prompt_tokens: {min: 4096}}\n";

/// TTFT p95 300 ms (chat), E2E p99 20 s (long_context), error rate 1 % for every class.
const SLO: &str = "objectives:\n  \"*\": {error_rate: 1%}\n  chat: {ttft: {p95: 300ms}}\n  long_context: {e2e: {p99: 20s}}\n";

const OUTCOMES: [&str; 7] = [
    "stop",
    "length",
    "client_cancel",
    "upstream_error",
    "timeout",
    "rejected",
    "invalid_request",
];

const HISTOGRAMS: [&str; 6] = [
    "headroom_gateway_ttft_seconds",
    "headroom_gateway_itl_seconds",
    "headroom_gateway_tpot_seconds",
    "headroom_gateway_e2e_seconds",
    "headroom_gateway_queue_seconds",
    "headroom_gateway_overhead_seconds",
];

/// Sample lines of an exposition (no comments, no `# EOF`).
fn samples(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[tokio::test]
async fn a_fresh_gateway_exports_every_class_at_zero_before_any_request() {
    // No request is ever sent, so the upstream is never contacted.
    let gw = gateway(GW, &["http://127.0.0.1:9".to_string()], Some(SLO)).await;
    let text = scrape(gw.addr).await;
    gw.shutdown().await;

    for class in ["chat", "long_context", "default"] {
        let l = format!("class=\"{class}\",tenant=\"other\"");
        for o in OUTCOMES {
            assert_eq!(
                value(
                    &text,
                    &format!("headroom_gateway_requests_total{{{l},outcome=\"{o}\"}}")
                ),
                Some(0.0),
                "{class} {o}:\n{text}"
            );
        }
        for h in HISTOGRAMS {
            assert_eq!(
                value(&text, &format!("{h}_count{{{l}}}")),
                Some(0.0),
                "{h} {class}"
            );
            assert_eq!(
                value(&text, &format!("{h}_bucket{{le=\"+Inf\",{l}}}")),
                Some(0.0),
                "{h} {class}"
            );
        }
        // The SLO thresholds' own buckets, which the absent() rules select.
        assert_eq!(
            value(
                &text,
                &format!("headroom_gateway_ttft_seconds_bucket{{le=\"0.3\",{l}}}")
            ),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                &format!("headroom_gateway_e2e_seconds_bucket{{le=\"20.0\",{l}}}")
            ),
            Some(0.0)
        );
    }
    // Only `other`: the allowlisted tenant gets its series at its first request.
    let tenants: BTreeSet<&str> = samples(&text)
        .iter()
        .filter_map(|l| l.split("tenant=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(tenants, BTreeSet::from(["other"]));
    assert!(
        samples(&text)
            .iter()
            .all(|l| l.ends_with(" 0") || l.ends_with(" 0.0"))
    );

    // Series count, by hand. Bounds per histogram: 18 fixed ones; TTFT adds 300 ms × {0.5, 0.8,
    // 0.9, 1, 1.1, 1.25, 1.5, 2} = 0.15 … 0.6, none of them fixed → 26; E2E adds 20 s × the
    // same = 10, 16, 18, 20, 22, 25, 30, 40, of which 10 and 25 are fixed → 24; ITL, TPOT and
    // queue 18; overhead 13. A histogram of B bounds prints B + 1 buckets, _sum and _count:
    // 29 + 21 + 21 + 27 + 21 + 16 = 135, plus 7 outcome counters = 142 per class, × 3 classes =
    // 426; plus 7 invalid-request reasons, 3 passthrough-error outcomes (upstream_error,
    // timeout, invalid_request) and in_flight + queued of the one limited class = 438.
    let n = samples(&text).len();
    assert_eq!(n, 438, "{text}");
    let per_family = |f: &str| {
        samples(&text)
            .iter()
            .filter(|l| l.starts_with(&format!("{f}_bucket{{")))
            .count()
    };
    assert_eq!(per_family("headroom_gateway_ttft_seconds"), 3 * 27);
    assert_eq!(per_family("headroom_gateway_e2e_seconds"), 3 * 25);
    assert_eq!(per_family("headroom_gateway_overhead_seconds"), 3 * 14);

    absent_rules_stay_silent(&text);
}

fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("promtool"))
            .find(|c| c.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("HEADROOM_REQUIRE_PROMTOOL").is_none(),
            "promtool not found on PATH and HEADROOM_REQUIRE_PROMTOOL is set; run scripts/install-prometheus"
        );
        eprintln!(
            "\n!!! SKIPPED: promtool is not installed, so the gateway's initial series were NOT !!!\n\
             !!! checked against the generated absent() rules. Run scripts/install-prometheus. !!!\n"
        );
    }
    found
}

/// The rules `headroom slo rules --latency-source gateway` writes for [`SLO`], evaluated by
/// promtool on the scraped series held at their values: no `HeadroomSLIAbsent` fires, and
/// (the control) it fires for every one of the four objectives when there are no series.
fn absent_rules_stay_silent(text: &str) {
    let Some(pt) = promtool() else { return };
    let slo = headroom_core::SloFile::parse(SLO, Path::new("slo.yaml")).unwrap();
    let mut opts = headroom_slo::RulesOptions {
        absent_for: Some("15m".into()),
        queue_alert: None,
        ..Default::default()
    };
    opts.sli.latency_source = headroom_slo::LatencySource::Gateway;
    let r = headroom_slo::rules(&slo, &opts).unwrap();
    let dir = std::env::temp_dir().join(format!("headroom-gw-metrics-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.yaml"), &r.text).unwrap();
    let mut series = String::new();
    for l in samples(text) {
        let (name, _) = l.rsplit_once(' ').unwrap();
        let _ = writeln!(series, "      - series: '{name}'\n        values: '0+0x30'");
    }
    // The control, without series: every objective's alert fires (chat ttft_p95 and
    // error_rate, long_context e2e_p99 and error_rate; the "*" block is their defaults, no class
    // of its own, so it has no alert that would fire for traffic that does not exist), counted
    // on ALERTS because alert_rule_test would compare the annotations verbatim.
    let test = format!(
        "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}    alert_rule_test:\n      - eval_time: 20m\n        alertname: HeadroomSLIAbsent\n        exp_alerts: []\n  - interval: 1m\n    input_series: []\n    promql_expr_test:\n      - expr: 'count(ALERTS{{alertname=\"HeadroomSLIAbsent\",alertstate=\"firing\"}})'\n        eval_time: 20m\n        exp_samples:\n          - labels: '{{}}'\n            value: 4\n"
    );
    std::fs::write(dir.join("test.yaml"), test).unwrap();
    let out = Command::new(pt)
        .args(["test", "rules", "test.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "promtool test rules failed:\n{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_time_observes_timed_out_and_abandoned_waits_but_not_queue_full() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(
        "classes:\n  - {name: capped, concurrency: {limit: 1, queue: 1, queue_timeout: 300ms, retry_after: 1s}}\n",
        &[url(twin.api_addr)],
        None,
    )
    .await;
    let addr = gw.addr;
    let c = "class=\"capped\",tenant=\"other\"";
    let count = |t: &str| value(t, &format!("headroom_gateway_queue_seconds_count{{{c}}}"));
    let sum = |t: &str| value(t, &format!("headroom_gateway_queue_seconds_sum{{{c}}}"));
    // Before any request: the series exist at zero.
    let t = scrape(addr).await;
    assert_eq!((count(&t), sum(&t)), (Some(0.0), Some(0.0)));

    // One long stream holds the only slot (admitted at once: a 0 s wait).
    // A second request waits 300 ms and is refused with 503; while it waits, a third finds the
    // queue full (429).
    let Filled {
        holder,
        waiter: (w, _),
        full,
    } = fill_one_slot(addr, 150).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS, "{}", full.body);
    assert_eq!(w.status, StatusCode::SERVICE_UNAVAILABLE, "{}", w.body);
    let t = scrape(addr).await;
    // The holder's 0 s and the refused request's ≥ 300 ms; the 429 is not observed.
    assert_eq!(count(&t), Some(2.0), "{t}");
    let s1 = sum(&t).unwrap();
    assert!(s1 >= 0.3, "sum {s1}");
    // 0.25 s is a fixed bound: only the holder's 0 s wait is at or below it.
    assert_eq!(
        value(
            &t,
            &format!("headroom_gateway_queue_seconds_bucket{{le=\"0.25\",{c}}}")
        ),
        Some(1.0)
    );

    // A client that queues and hangs up after about 150 ms is observed too, when it leaves.
    let body = completion_body("leave", 2);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let queued = |t: &str| value(t, "headroom_gateway_queued{class=\"capped\"}");
    let t0 = Instant::now();
    while queued(&scrape(addr).await) != Some(1.0) && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queued(&scrape(addr).await), Some(1.0), "the client queued");
    tokio::time::sleep(Duration::from_millis(150)).await;
    drop(s);
    let t1 = Instant::now();
    let mut t = scrape(addr).await;
    while count(&t) != Some(3.0) && t1.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        t = scrape(addr).await;
    }
    assert!(!holder.is_finished(), "the holder still streams");
    assert_eq!(count(&t), Some(3.0), "{t}");
    let left = sum(&t).unwrap() - s1;
    assert!((0.15..2.0).contains(&left), "abandoned wait {left} s");
    assert_eq!(
        value(
            &t,
            &format!("headroom_gateway_requests_total{{{c},outcome=\"client_cancel\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &t,
            &format!("headroom_gateway_requests_total{{{c},outcome=\"rejected\"}}")
        ),
        Some(2.0)
    );
    let h = holder.await.unwrap();
    assert_eq!(h.status, StatusCode::OK);
    gw.shutdown().await;
    twin.shutdown().await;
}
