//! `diagnose` over a 30-minute range of a real Prometheus (the Debian `prometheus` binary on
//! loopback) holding 35 minutes of backfilled vLLM-shaped series (`support/prom_backfill.rs`):
//! the figures PromQL returns, and the judgement on them, checked against the fixture file.
//!
//! Expected values, by hand from `fixtures/vllm/v0.32-cpu-queueing-maxseqs4.prom` (each counter
//! grows by its fixture value per minute, so 30 minutes hold 30 × the fixture value, and every
//! histogram keeps the fixture's shape):
//! * `vllm:request_success_total{finished_reason="length"}` 16 → 480 finished, all `length`;
//! * `vllm:request_queue_time_seconds` sum 17.183870237000065, count 16 → mean 1.07399… s;
//! * `vllm:time_to_first_token_seconds` sum 19.118664264678955, count 16 → mean 1.19491… s;
//! * `vllm:prompt_tokens_total` 1024 → 30,720 prompt tokens.

#[path = "support/prom_backfill.rs"]
mod backfill;

use std::time::Duration;

use headroom_core::{LatencySignal, Objective, SloSpec};
use headroom_diagnose::assess;
use headroom_signals::promql::{PromClient, window_from_prometheus};
use headroom_signals::{Selection, Signal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_minutes_from_a_local_prometheus() {
    let (Some(prometheus), Some(promtool)) = (
        backfill::on_path("prometheus"),
        backfill::on_path("promtool"),
    ) else {
        return;
    };
    let prom = tokio::task::spawn_blocking(move || backfill::start(&prometheus, &promtool, 35))
        .await
        .unwrap();
    let client = PromClient::new(&prom.base, Duration::from_secs(20)).unwrap();
    let w = tokio::time::timeout(
        Duration::from_secs(60),
        window_from_prometheus(
            &client,
            1800.0,
            prom.end_unix_s as f64,
            &Selection::default(),
            None,
        ),
    )
    .await
    .expect("answered within 60 s")
    .expect("a window");
    assert!(w.data_warnings.is_empty(), "{:?}", w.data_warnings);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    let fin = w.requests_finished().unwrap();
    assert!(close(fin, 480.0), "finished {fin}");
    assert!(close(
        w.counter_key(Signal::RequestsFinished, "length").unwrap(),
        480.0
    ));
    assert!(close(
        w.counter(Signal::PromptTokens).unwrap(),
        30.0 * 1024.0
    ));
    let q = w.histogram(Signal::QueueTime).unwrap().mean().unwrap();
    assert!(close(q, 17.183870237000065 / 16.0), "queue mean {q}");
    let ttft = w.histogram(Signal::Ttft).unwrap();
    assert!(close(ttft.count, 480.0), "TTFT count {}", ttft.count);
    // gauges: the peaks placed one sample inside the range
    assert_eq!(
        w.gauge(Signal::Waiting).unwrap().max,
        backfill::WAITING_PEAK
    );
    assert_eq!(
        w.gauge(Signal::KvCacheUsage).unwrap().max,
        backfill::KV_PEAK
    );
    assert_eq!(w.gauge(Signal::Running).unwrap().last, backfill::RUNNING);
    assert_eq!(w.gpus.len(), 1, "the T4 of the dcgm fixture");

    let slo = SloSpec {
        objectives: vec![Objective::Latency {
            signal: LatencySignal::Ttft,
            percentile: 50.0,
            threshold_s: 0.5,
        }],
    };
    let a = assess(&w, None, &slo);
    let ids = a.finding_ids();
    assert!(ids.contains(&"admission_saturation"), "{ids:?}");
    assert!(!ids.contains(&"kv_pressure"), "{ids:?}");
    let share = a
        .finding("admission_saturation")
        .unwrap()
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "queue_share_of_ttft")
        .unwrap()
        .value;
    assert!(
        close(share, 17.183870237000065 / 19.118664264678955),
        "{share}"
    );
    drop(prom);
}
