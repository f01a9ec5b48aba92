//! The two real-vLLM scenarios of `shared/vllm-cpu/RECIPE.md` §6, from the fixture scrapes.
//!
//! Each fixture is one scrape taken after a fresh server ran exactly one burst, so the window is
//! "since server start" (a single file): every counter counts from 0, which is how
//! `headroom diagnose --from FILE` reads it. (The `v0.32-cpu-pre-burst.prom` / `idle.prom`
//! scrapes come from a different server process — `process_start_time_seconds` differs — so they
//! cannot serve as these scenarios' start scrapes.)

use headroom_core::LatencySignal;
use headroom_core::{Objective, SloSpec, Verdict};
use headroom_diagnose::{ClientView, assess};
use headroom_signals::{Scrape, Window, WindowOptions};

fn window(rel: &str) -> Window {
    let path = format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let s = Scrape::from_body(rel, body, 2_000_000_000.0, None).unwrap();
    Window::from_scrapes(&[s], &[], &WindowOptions::default()).unwrap()
}

fn slo() -> SloSpec {
    SloSpec {
        objectives: vec![
            Objective::Latency {
                signal: LatencySignal::Ttft,
                percentile: 50.0,
                threshold_s: 0.5,
            },
            Objective::Latency {
                signal: LatencySignal::QueueTime,
                percentile: 50.0,
                threshold_s: 0.01,
            },
            Objective::ErrorRate { max_ratio: 0.1 },
        ],
    }
}

#[test]
fn max_num_seqs_4_is_admission_saturation() {
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    let a = assess(&w, None, &slo());
    let ids = a.finding_ids();
    assert!(ids.contains(&"admission_saturation"), "{ids:?}");
    assert!(!ids.contains(&"kv_pressure"), "{ids:?}");
    assert!(!ids.contains(&"prefill_contention"), "{ids:?}");
    let f = a.finding("admission_saturation").unwrap();
    // queue_time sum 17.183870237000065 over 16; TTFT sum 19.118664264678955 over 16
    let share = f
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "queue_share_of_ttft")
        .unwrap()
        .value;
    assert!((share - 17.183870237000065 / 19.118664264678955).abs() < 1e-12);
    let q = f
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "vllm:request_queue_time_seconds")
        .unwrap()
        .value;
    assert!((q - 17.183870237000065 / 16.0).abs() < 1e-12);
    assert!(
        ids.contains(&"truncation"),
        "all 16 ended with length: {ids:?}"
    );
    assert!(ids.contains(&"autoscaling_trigger"), "{ids:?}");

    // TTFT buckets: le 0.25: 4, le 0.5: 4, le 1.0: 8 → 12 of 16 above 0.5 s: p50 ≤ 0.5 s fails.
    let ttft = a.objectives.iter().find(|o| o.id == "ttft_p50").unwrap();
    assert_eq!(ttft.verdict, Verdict::Fail, "{}", ttft.reason);
    assert_eq!(ttft.samples, 16);
    // queue p50: 4 of 16 ≤ 0.3 s and 0 ≤ 0.01 (first bucket 0.3 s): at most 25 % ≤ 0.01 s,
    // so the bad share lies in [75 %, 100 %] > 50 %: FAIL, decided inside the first bucket.
    let qt = a
        .objectives
        .iter()
        .find(|o| o.id == "queue_time_p50")
        .unwrap();
    assert_eq!(qt.verdict, Verdict::Fail, "{}", qt.reason);
    // error rate: 0 of 16, 16 ≥ 1/0.1 = 10 requests: PASS
    let er = a.objectives.iter().find(|o| o.id == "error_rate").unwrap();
    assert_eq!(er.verdict, Verdict::Pass, "{}", er.reason);
    assert_eq!(er.observed, Some(0.0));
    assert_eq!(a.verdict, Verdict::Fail);
    assert!(a.refused.is_empty());
    assert_eq!(a.steps.len(), 6);
}

#[test]
fn gpu_blocks_24_is_kv_pressure_with_preemption() {
    let w = window("vllm/v0.32-cpu-kv-pressure-24blocks.prom");
    let a = assess(&w, None, &slo());
    let ids = a.finding_ids();
    assert!(ids.contains(&"kv_pressure"), "{ids:?}");
    assert!(!ids.contains(&"admission_saturation"), "{ids:?}");
    let f = a.finding("kv_pressure").unwrap();
    let ev = |m: &str| {
        f.finding
            .evidence
            .iter()
            .find(|e| e.metric == m)
            .unwrap_or_else(|| panic!("no evidence {m}"))
            .value
    };
    assert_eq!(ev("vllm:num_preemptions_total"), 50.0);
    // cache_config_info: num_gpu_blocks 24 × block_size 128 = 3072 tokens (kv_cache_size_tokens)
    assert_eq!(ev("kv_pool_tokens"), 3072.0);
    assert_eq!(ev("kv_cache_max_concurrency"), 1.5);
    assert_eq!(f.finding.confidence, headroom_core::Confidence::High);
    assert_eq!(a.verdict, Verdict::Fail);
}

#[test]
fn refusals() {
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    // The client says 15 finished; the server counted 16.
    let client = ClientView {
        requests_finished: Some(15),
        ..ClientView::default()
    };
    let a = assess(&w, Some(&client), &slo());
    assert_eq!(a.verdict, Verdict::Inconclusive);
    assert!(
        a.refused.iter().any(|r| r.contains("client 15, server 16")),
        "{:?}",
        a.refused
    );
    assert!(
        a.objectives
            .iter()
            .all(|o| o.verdict == Verdict::Inconclusive)
    );
    // The findings are still reported.
    assert!(a.finding("admission_saturation").is_some());

    // An idle server: nothing finished.
    let idle = window("vllm/v0.32-cpu-idle.prom");
    let a = assess(&idle, None, &slo());
    assert_eq!(a.verdict, Verdict::Inconclusive);
    assert!(a.refused.iter().any(|r| r.contains("no request finished")));
    assert!(a.findings.is_empty(), "{:?}", a.finding_ids());
}

#[test]
fn too_few_samples_for_p99() {
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    let slo = SloSpec {
        objectives: vec![Objective::Latency {
            signal: LatencySignal::Ttft,
            percentile: 99.0,
            threshold_s: 5.0,
        }],
    };
    let a = assess(&w, None, &slo);
    // 16 observations < 100 needed for p99
    assert_eq!(a.objectives[0].verdict, Verdict::Inconclusive);
    assert!(
        a.objectives[0].reason.contains("fewer than the 100"),
        "{}",
        a.objectives[0].reason
    );
}

#[test]
fn json_findings_carry_stable_ids() {
    let w = window("vllm/v0.32-cpu-kv-pressure-24blocks.prom");
    let a = assess(&w, None, &slo());
    let v = serde_json::to_value(&a).unwrap();
    let ids: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"kv_pressure"), "{ids:?}");
    let kv = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "kv_pressure")
        .unwrap();
    assert_eq!(kv["category"], "bottleneck");
    assert_eq!(kv["confidence"], "high");
    assert_eq!(v["verdict"], "FAIL");
    assert_eq!(v["steps"].as_array().unwrap().len(), 6);
}
