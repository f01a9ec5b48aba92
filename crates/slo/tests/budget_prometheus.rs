//! `fetch_budget` against a real Prometheus (Debian's `prometheus` binary, started by the test on
//! 127.0.0.1 with an ephemeral port and a temporary TSDB, killed by PID) scraping a tiny
//! `/metrics` endpoint served by the test, whose vLLM-named counters the test advances.
//!
//! Every scrape shows counters proportional to one step counter `k`, so each ratio is exact
//! whatever the scrape timing and `increase()` extrapolation:
//! - per step 98 `stop`, 1 `abort`, 1 `error` finished requests and 1 HTTP 5xx: error ratio
//!   (1 + 1 + 1) / (100 + 1) = 3/101 = 0.0297 against a 5 % budget → 59.4 % used → freeze
//!   (freeze_at 50 %), burn 0.594 everywhere → no tier burns;
//! - per step 100 TTFTs, 97 of them ≤ 250 ms: 3 % slow against p95's 5 % → 60 % used → freeze;
//! - per step 100 E2Es, 98 of them ≤ 1 s: 2 % slow against p99's 1 % → 200 % used → exhausted,
//!   burn 2 > 1 in both 3d and 6h → the ticket_slow tier burns, ticket_fast (3) does not.
//!
//! Prometheus holds only seconds of data, so every objective's coverage is that span, not the
//! 30-day period, and each decision says it is provisional.
//!
//! Skipped with a loud message when `prometheus` is absent, unless
//! `HEADROOM_REQUIRE_PROMTOOL` is set.

use bytes::Bytes;
use headroom_core::SloFile;
use headroom_slo::budget::{BudgetOptions, Decision, fetch_budget};
use headroom_slo::prom_api::PromClient;
use headroom_testkit::{prometheus_bin, start_prometheus};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn metrics_body(k: u64) -> String {
    let k = k as f64;
    let l = "engine=\"0\",model_name=\"chat\"";
    let mut s = String::new();
    s.push_str("# TYPE vllm:num_requests_running gauge\n");
    s.push_str(&format!("vllm:num_requests_running{{{l}}} 1.0\n"));
    s.push_str("# TYPE vllm:request_success_total counter\n");
    for (reason, per_step) in [
        ("stop", 98.0),
        ("length", 0.0),
        ("abort", 1.0),
        ("error", 1.0),
        ("repetition", 0.0),
    ] {
        s.push_str(&format!(
            "vllm:request_success_total{{engine=\"0\",finished_reason=\"{reason}\",model_name=\"chat\"}} {:.1}\n",
            per_step * k
        ));
    }
    s.push_str("# TYPE http_requests_total counter\n");
    s.push_str(&format!(
        "http_requests_total{{handler=\"/v1/chat/completions\",method=\"POST\",status=\"2xx\"}} {:.1}\n",
        98.0 * k
    ));
    s.push_str(&format!(
        "http_requests_total{{handler=\"/v1/chat/completions\",method=\"POST\",status=\"5xx\"}} {:.1}\n",
        k
    ));
    // Histograms as vLLM prints them (Python floats in `le`).
    for (name, buckets) in [
        (
            "vllm:time_to_first_token_seconds",
            [("0.1", 50.0), ("0.25", 97.0), ("0.5", 99.0), ("1.0", 100.0)],
        ),
        (
            "vllm:e2e_request_latency_seconds",
            [("0.5", 60.0), ("0.8", 90.0), ("1.0", 98.0), ("2.5", 100.0)],
        ),
    ] {
        s.push_str(&format!("# TYPE {name} histogram\n"));
        for (le, per_step) in buckets {
            s.push_str(&format!(
                "{name}_bucket{{engine=\"0\",le=\"{le}\",model_name=\"chat\"}} {:.1}\n",
                per_step * k
            ));
        }
        s.push_str(&format!(
            "{name}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"chat\"}} {:.1}\n",
            100.0 * k
        ));
        s.push_str(&format!("{name}_count{{{l}}} {:.1}\n", 100.0 * k));
        s.push_str(&format!("{name}_sum{{{l}}} {:.1}\n", 20.0 * k));
    }
    s
}

async fn serve_metrics(step: Arc<AtomicU64>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let step = step.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req: Request<Incoming>| {
                    let body = metrics_body(step.load(Ordering::SeqCst));
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

/// Waits until `expr` is at least `n`, or panics after `limit` with Prometheus's log.
async fn wait_for(prom: &PromClient, expr: &str, n: f64, limit: Duration, log: &Path) {
    let start = Instant::now();
    loop {
        let got = prom.single(expr, None).await.ok().flatten();
        if got.is_some_and(|v| v >= n) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "Prometheus not ready within {limit:?} (last {expr} = {got:?}); log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_against_real_prometheus() {
    let Some(bin) = prometheus_bin("`slo budget`") else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(90), run(bin))
        .await
        .expect("test finished within 90 s");
}

async fn run(bin: PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let step = Arc::new(AtomicU64::new(0));
    let target = serve_metrics(step.clone()).await;
    let started = Instant::now();
    let (_prom_proc, port) = start_prometheus(&bin, dir.path(), target);
    let prom =
        PromClient::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
    let log = dir.path().join("prometheus.log");
    let slo = SloFile::parse(
        "objectives:\n  chat:\n    ttft: {p95: 250ms}\n    e2e: {p99: 1s}\n    error_rate: 5%\nbudget: {window: 30d, target: 99%, freeze_at: 50%}\n",
        Path::new("slo.yaml"),
    )
    .unwrap();
    let opts = BudgetOptions::default();

    // Quiet service: three scrapes of counters at 0 → no data, no NaN.
    wait_for(
        &prom,
        "count_over_time(up{job=\"vllm\"}[1m])",
        3.0,
        Duration::from_secs(40),
        &log,
    )
    .await;
    let (quiet, warnings) = fetch_budget(&prom, &slo, &opts).await.unwrap();
    assert!(warnings.is_empty());
    assert_eq!(quiet.len(), 3);
    for s in &quiet {
        assert_eq!(
            s.decision,
            Decision::NoData,
            "{} {:?}",
            s.objective,
            s.period
        );
        assert_eq!(s.sli, None);
    }

    // Traffic: advance the counters every 200 ms until Prometheus has scraped at least 25 steps
    // (about 5 scrapes of moving counters).
    let ticker = {
        let step = step.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                step.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    wait_for(
        &prom,
        "max(vllm:request_success_total{finished_reason=\"stop\"})",
        98.0 * 25.0,
        Duration::from_secs(30),
        &log,
    )
    .await;
    ticker.abort();
    let (st, _) = fetch_budget(&prom, &slo, &opts).await.unwrap();
    let by = |id: &str| st.iter().find(|s| s.objective == id).unwrap();

    let ttft = by("ttft_p95");
    assert!(ttft.period.total > 0.0);
    assert!((ttft.sli.unwrap() - 0.97).abs() < 1e-9, "{ttft:?}");
    assert!((ttft.consumed.unwrap() - 0.6).abs() < 1e-9, "{ttft:?}");
    assert_eq!(ttft.decision, Decision::FreezeTuning);
    assert!(ttft.tiers.iter().all(|t| !t.burning));

    let e2e = by("e2e_p99");
    // le="1.0" as vLLM prints it, matched by le=~"1(\\.0)?".
    assert!((e2e.consumed.unwrap() - 2.0).abs() < 1e-9, "{e2e:?}");
    assert_eq!(e2e.decision, Decision::Exhausted);
    let burning: Vec<&str> = e2e
        .tiers
        .iter()
        .filter(|t| t.burning)
        .map(|t| t.tier.as_str())
        .collect();
    assert_eq!(burning, vec!["ticket_slow"]);

    let err = by("error_rate");
    // HTTP 5xx joined to the class through job and instance, which Prometheus adds at scrape.
    assert!(
        (err.sli.unwrap() - (1.0 - 3.0 / 101.0)).abs() < 1e-9,
        "{err:?}"
    );
    assert!(
        (err.consumed.unwrap() - 3.0 / 101.0 / 0.05).abs() < 1e-9,
        "{err:?}"
    );
    assert_eq!(err.decision, Decision::FreezeTuning);

    // Prometheus has held data for seconds, not 30 days: every row says how much, and no
    // decision is a 30-day verdict.
    let since_start = started.elapsed().as_secs_f64();
    for s in &st {
        let c = s
            .coverage
            .unwrap_or_else(|| panic!("coverage of {}", s.objective));
        assert_eq!(c.period_s, 30.0 * 86_400.0);
        assert!(
            c.covered_s >= 1.0 && c.covered_s <= since_start + 1.0,
            "{}: covered {} s, Prometheus started {since_start} s ago",
            s.objective,
            c.covered_s
        );
        assert!(!c.is_full());
        assert!(
            s.verdict().contains("(provisional: data covers "),
            "{}",
            s.verdict()
        );
    }
    assert!(quiet.iter().all(|s| s.coverage.is_none()));
    let text = headroom_slo::budget::render(&st, "30d").text;
    eprintln!("{text}");
    assert!(
        text.contains("budget exhausted: reliability work only (provisional: data covers "),
        "{text}"
    );
    assert!(
        text.contains("chat e2e_p99: Prometheus holds ")
            && text.contains("so the decision is provisional, not a 30d verdict"),
        "{text}"
    );
}
