//! Windows over the real vLLM 0.32 fixture scrapes. Every expected figure below was computed by
//! hand from the files (the values are quoted in the comments).

use headroom_signals::adapter::{Engine, GpuField, Signal};
use headroom_signals::{Scrape, Window, WindowError, WindowOptions};

fn fixture(rel: &str) -> String {
    let path = format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn scrape(rel: &str, at: f64) -> Scrape {
    Scrape::from_body(rel, fixture(rel), at, None).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn burst_window_pre_to_after() {
    let pre = scrape("vllm/v0.32-cpu-pre-burst.prom", 1000.0);
    let after = scrape("vllm/v0.32-cpu-after-burst-c16.prom", 1030.0);
    let w = Window::from_scrapes(&[pre, after], &[], &WindowOptions::default()).unwrap();
    assert_eq!(w.engine, Engine::Vllm);
    assert!(!w.since_server_start);
    assert_eq!(w.duration_s(), Some(30.0));
    // prompt_tokens_total 97 → 1121, generation_tokens_total 67 → 2115
    assert_eq!(w.counter(Signal::PromptTokens), Some(1024.0));
    assert_eq!(w.counter(Signal::GenerationTokens), Some(2048.0));
    // request_success_total: stop 2 → 2, length 9 → 25
    assert_eq!(
        w.counter_key(Signal::RequestsFinished, "length"),
        Some(16.0)
    );
    assert_eq!(w.counter_key(Signal::RequestsFinished, "stop"), Some(0.0));
    assert_eq!(w.requests_finished(), Some(16.0));
    assert_eq!(w.counter(Signal::Preemptions), Some(0.0));
    // prefix_cache_queries 97 → 1121, hits 0 → 0
    assert_eq!(w.counter(Signal::PrefixCacheQueries), Some(1024.0));
    assert_eq!(w.prefix_cache_hit_ratio(), Some(0.0));
    // http_requests_total{status="2xx"}: both files
    assert!(w.counter_key(Signal::HttpRequests, "2xx").unwrap() >= 16.0);

    // TTFT bucket deltas: le 0.04 → 1, 0.06 → 1, 0.08 → 16, … +Inf → 16.
    let ttft = w.histogram(Signal::Ttft).unwrap();
    assert_eq!(ttft.count, 16.0);
    assert!(close(ttft.sum, 3.2767491340637207 - 2.227635383605957));
    // p50: rank 8 in (0.06, 0.08]: 0.06 + 0.02 × (8 − 1)/(16 − 1)
    let p50 = ttft.quantile(0.5).unwrap();
    assert!(close(p50.value, 0.06 + 0.02 * 7.0 / 15.0), "{p50:?}");
    assert_eq!((p50.lower, p50.upper), (0.06, 0.08));
    // p95: rank 15.2: 0.06 + 0.02 × 14.2/15
    assert!(close(
        ttft.quantile(0.95).unwrap().value,
        0.06 + 0.02 * 14.2 / 15.0
    ));

    // ITL: 56 → 2088 observations; le 0.01: 54 → 2085 (2031), le 0.05: 2032.
    let itl = w.histogram(Signal::Itl).unwrap();
    assert_eq!(itl.count, 2032.0);
    // p99: rank 2011.68 in the first bucket (0, 0.01]: 0.01 × 2011.68/2031
    let p99 = itl.quantile(0.99).unwrap();
    assert!(close(p99.value, 0.01 * 2011.68 / 2031.0), "{p99:?}");
    assert_eq!((p99.lower, p99.upper), (0.0, 0.01));

    // E2E: le 0.5: 9 → 9 (0), le 0.8: 9 → 25 (16). p50 = 0.5 + 0.3 × 8/16 = 0.65.
    let e2e = w.histogram(Signal::E2e).unwrap();
    assert!(close(e2e.quantile(0.5).unwrap().value, 0.65));

    // queue time sum: 0.002928627000017059 → 0.004058749999785505
    let q = w.histogram(Signal::QueueTime).unwrap();
    assert!(close(q.sum, 0.004058749999785505 - 0.002928627000017059));

    // gauges: both scrapes idle
    let running = w.gauge(Signal::Running).unwrap();
    assert_eq!((running.max, running.samples), (0.0, 2));
    assert_eq!(w.kv_pool.num_gpu_blocks, Some(8192.0));
    assert!(w.counter_resets.is_empty());
}

#[test]
fn single_scrape_counts_since_server_start() {
    let q = scrape("vllm/v0.32-cpu-queueing-maxseqs4.prom", 2000.0);
    let w = Window::from_scrapes(&[q], &[], &WindowOptions::default()).unwrap();
    assert!(w.since_server_start);
    // process_start_time_seconds 1.79597017431e+09
    assert_eq!(w.start_unix_s, Some(1.79597017431e9));
    assert_eq!(
        w.counter_key(Signal::RequestsFinished, "length"),
        Some(16.0)
    );
    // queue buckets: 0.3:4, 0.5:4, 0.8:8, 1.0:8, 1.5:12, 2.0:12, 2.5:16
    let qt = w.histogram(Signal::QueueTime).unwrap();
    assert!(close(qt.sum, 17.183870237000065));
    // p50: rank 8 reached at le 0.8 → 0.5 + 0.3 × (8 − 4)/(8 − 4) = 0.8
    assert!(close(qt.quantile(0.5).unwrap().value, 0.8));
    // p90: rank 14.4 in (2.0, 2.5]: 2.0 + 0.5 × 2.4/4 = 2.3
    let p90 = qt.quantile(0.9).unwrap();
    assert!(close(p90.value, 2.3));
    assert_eq!((p90.lower, p90.upper), (2.0, 2.5));

    let kv = scrape("vllm/v0.32-cpu-kv-pressure-24blocks.prom", 2000.0);
    let w = Window::from_scrapes(&[kv], &[], &WindowOptions::default()).unwrap();
    assert_eq!(w.counter(Signal::Preemptions), Some(50.0));
    assert_eq!(
        w.counter_key(Signal::RequestsFinished, "length"),
        Some(80.0)
    );
    assert_eq!(w.kv_pool.num_gpu_blocks, Some(24.0));
    assert_eq!(w.kv_pool.block_size, Some(128.0));
}

#[test]
fn counter_reset_mid_window() {
    // pre (97 prompt tokens) → after (1121) → restart: idle (0) → queueing (1024).
    // increase = 1024 − 97 + 1121 (value before the reset) = 2048.
    let s = vec![
        scrape("vllm/v0.32-cpu-pre-burst.prom", 1.0),
        scrape("vllm/v0.32-cpu-after-burst-c16.prom", 2.0),
        scrape("vllm/v0.32-cpu-idle.prom", 3.0),
        scrape("vllm/v0.32-cpu-queueing-maxseqs4.prom", 4.0),
    ];
    let w = Window::from_scrapes(&s, &[], &WindowOptions::default()).unwrap();
    assert_eq!(w.counter(Signal::PromptTokens), Some(2048.0));
    // TTFT count 11 → 27 → 0 → 16: 16 − 11 + 27 = 32
    assert_eq!(w.histogram(Signal::Ttft).unwrap().count, 32.0);
    // finished length: 9 → 25 → 0 → 16: 16 − 9 + 25 = 32
    assert_eq!(
        w.counter_key(Signal::RequestsFinished, "length"),
        Some(32.0)
    );
    assert!(!w.counter_resets.is_empty());
    assert!(
        w.counter_resets
            .iter()
            .any(|r| r.contains("before scrape 2"))
    );
}

#[test]
fn errors_out_of_order_and_no_engine() {
    let a = scrape("vllm/v0.32-cpu-pre-burst.prom", 10.0);
    let b = scrape("vllm/v0.32-cpu-after-burst-c16.prom", 5.0);
    let e = Window::from_scrapes(&[a, b], &[], &WindowOptions::default()).unwrap_err();
    assert!(matches!(e, WindowError::OutOfOrder { index: 1, .. }), "{e}");

    let d = scrape("dcgm/l4-idle-default-counters.prom", 1.0);
    let e = Window::from_scrapes(&[d], &[], &WindowOptions::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("vllm:prompt_tokens_total"), "{msg}");
    assert!(msg.contains("dcgm/l4-idle-default-counters.prom"), "{msg}");
    assert!(matches!(
        Window::from_scrapes(&[], &[], &WindowOptions::default()),
        Err(WindowError::NoScrapes)
    ));
}

#[test]
fn dcgm_window() {
    let v = scrape("vllm/v0.32-cpu-after-burst-c16.prom", 1.0);
    let t4 = scrape("dcgm/t4-loaded-no-help.prom", 1.0);
    let w = Window::from_scrapes(&[v], &[t4], &WindowOptions::default()).unwrap();
    assert_eq!(w.gpus.len(), 1);
    let g = &w.gpus[0];
    assert_eq!(g.model.as_deref(), Some("Tesla T4"));
    assert_eq!(g.id.hostname.as_deref(), Some("gpu-node-b"));
    assert_eq!(g.gauges[&GpuField::GpuUtilPct].last, 91.0);
    assert_eq!(g.gauges[&GpuField::GrEngineActiveRatio].last, 0.156205);
    assert_eq!(g.gauges[&GpuField::FbUsedMib].last, 5120.0);
    assert!(g.increases.is_empty());
    assert!(!w.notes.is_empty());

    // Two L4 scrapes: energy counter 4742776 mJ both times → 0 J increase.
    let l4a = scrape("dcgm/l4-idle-default-counters.prom", 1.0);
    let l4b = scrape("dcgm/l4-idle-default-counters.prom", 11.0);
    let v = scrape("vllm/v0.32-cpu-idle.prom", 11.0);
    let w = Window::from_scrapes(&[v], &[l4a, l4b], &WindowOptions::default()).unwrap();
    assert_eq!(w.gpus[0].increases[&GpuField::EnergyJ], 0.0);
    assert_eq!(w.gpus[0].gauges[&GpuField::PowerW].mean, 16.365);
}

#[test]
fn hostile_bucket_count_stays_linear() {
    // One histogram series with 20 000 buckets in each of two scrapes: matching bounds must not
    // be quadratic (2 × 10^8 comparisons would take seconds in a debug build).
    let body = |scale: f64| {
        let mut b = String::from("# TYPE vllm:e2e_request_latency_seconds histogram\n");
        for i in 0..20_000 {
            b.push_str(&format!(
                "vllm:e2e_request_latency_seconds_bucket{{le=\"{i}\"}} {}\n",
                (i as f64) * scale
            ));
        }
        b.push_str(&format!(
            "vllm:e2e_request_latency_seconds_bucket{{le=\"+Inf\"}} {}\n",
            20_000.0 * scale
        ));
        b
    };
    let a = Scrape::from_body("a", body(1.0), 1.0, None).unwrap();
    let b = Scrape::from_body("b", body(2.0), 2.0, None).unwrap();
    let t = std::time::Instant::now();
    let w = Window::from_scrapes(&[a, b], &[], &WindowOptions::default()).unwrap();
    assert_eq!(w.histogram(Signal::E2e).unwrap().observations(), 20_000.0);
    assert!(t.elapsed().as_secs_f64() < 10.0, "{:?}", t.elapsed());
}

/// Both scrapes of the burst pair were taken with the server idle: every gauge reads 0 while 16
/// requests ran between them. The gauges are marked idle-sampled and the counters give the
/// occupancy: request_inference_time_seconds_sum 2.3473596490000546 → 13.302237436999576 and
/// request_queue_time_seconds_sum 0.002928627000017059 → 0.004058749999785505 over 30 s.
#[test]
fn idle_sampled_gauges_and_occupancy_by_littles_law() {
    use headroom_signals::GaugeValidity;
    let pre = scrape("vllm/v0.32-cpu-pre-burst.prom", 1000.0);
    let after = scrape("vllm/v0.32-cpu-after-burst-c16.prom", 1030.0);
    let w = Window::from_scrapes(&[pre.clone(), after], &[], &WindowOptions::default()).unwrap();
    for sig in [Signal::Running, Signal::Waiting, Signal::KvCacheUsage] {
        assert_eq!(w.gauge(sig).unwrap().max, 0.0, "{sig:?}");
        assert_eq!(
            w.gauge_validity(sig),
            Some(GaugeValidity::IdleSampled),
            "{sig:?}"
        );
    }
    let running = w.running_mean_from_counters().unwrap();
    assert!(close(
        running,
        (13.302237436999576 - 2.3473596490000546) / 30.0
    ));
    let waiting = w.waiting_mean_from_counters().unwrap();
    assert!(close(
        waiting,
        (0.004058749999785505 - 0.002928627000017059) / 30.0
    ));
    assert_eq!(w.gauge_validity(Signal::Ttft), None, "no gauge");
    // an idle server: the zeros describe it, nothing ran
    let idle = scrape("vllm/v0.32-cpu-idle.prom", 1000.0);
    let later = Scrape {
        at_unix_s: 1030.0,
        ..idle.clone()
    };
    let w = Window::from_scrapes(&[idle, later], &[], &WindowOptions::default()).unwrap();
    assert_eq!(
        w.gauge_validity(Signal::Running),
        Some(GaugeValidity::Describes)
    );
    assert_eq!(
        w.gauge_validity(Signal::Waiting),
        Some(GaugeValidity::Describes)
    );
    // cache_config_info says enable_prefix_caching="True"
    let w = Window::from_scrapes(&[pre], &[], &WindowOptions::default()).unwrap();
    assert_eq!(w.kv_pool.prefix_caching, Some(true));
}
