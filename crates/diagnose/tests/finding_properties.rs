//! The properties of `support/properties.rs` on every real-vLLM fixture (each alone, since
//! server start, and the pre-burst → after-burst pair as a 30 s window) under several SLOs, and
//! the first finding each gives: the designed bottleneck where there is one, none where the
//! server was healthy or idle.

use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile};
use headroom_core::{LatencySignal, Objective, SloSpec};
use headroom_diagnose::assess;
use headroom_signals::{Scrape, Signal, Window, WindowOptions};

#[path = "support/advice.rs"]
mod advice;
#[path = "support/properties.rs"]
mod properties;

fn scrape(rel: &str, at: f64) -> Scrape {
    let path = format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Scrape::from_body(rel, body, at, None).unwrap()
}

fn slos() -> Vec<(&'static str, SloSpec)> {
    let lat = |signal, percentile, threshold_s| Objective::Latency {
        signal,
        percentile,
        threshold_s,
    };
    vec![
        (
            "built-in",
            SloFile::parse(DEFAULT_SLO_YAML, std::path::Path::new("slo.yaml"))
                .unwrap()
                .spec_for("*"),
        ),
        (
            "scenario",
            SloSpec {
                objectives: vec![
                    lat(LatencySignal::Ttft, 50.0, 0.5),
                    lat(LatencySignal::QueueTime, 50.0, 0.01),
                    Objective::ErrorRate { max_ratio: 0.1 },
                ],
            },
        ),
        (
            "tight ITL and E2E",
            SloSpec {
                objectives: vec![
                    lat(LatencySignal::Itl, 50.0, 0.001),
                    lat(LatencySignal::E2e, 50.0, 1.0),
                ],
            },
        ),
    ]
}

/// Every fixture window, with the first finding expected under the built-in and scenario SLOs
/// (`None`: no finding at all).
fn windows() -> Vec<(&'static str, Window, Option<&'static str>)> {
    let one = |rel: &str| {
        Window::from_scrapes(
            &[scrape(rel, 2_000_000_000.0)],
            &[],
            &WindowOptions::default(),
        )
        .unwrap()
    };
    let pair = Window::from_scrapes(
        &[
            scrape("vllm/v0.32-cpu-pre-burst.prom", 1000.0),
            scrape("vllm/v0.32-cpu-after-burst-c16.prom", 1030.0),
        ],
        &[],
        &WindowOptions::default(),
    )
    .unwrap();
    vec![
        (
            "queueing-maxseqs4",
            one("vllm/v0.32-cpu-queueing-maxseqs4.prom"),
            Some("admission_saturation"),
        ),
        (
            "kv-pressure-24blocks",
            one("vllm/v0.32-cpu-kv-pressure-24blocks.prom"),
            Some("kv_pressure"),
        ),
        // 16 requests of 64 + 128 tokens at c16, no queueing, nothing failing: the two
        // observations it offers (all at max_tokens, no prefix reuse) are notes.
        ("pre → after burst, 30 s", pair, None),
        ("idle", one("vllm/v0.32-cpu-idle.prom"), None),
        ("v0.17 idle", one("vllm/v0.17-gpu-idle-qwen05b.prom"), None),
    ]
}

#[test]
fn every_real_vllm_fixture_has_the_properties_and_its_designed_first_finding() {
    for (name, w, first) in windows() {
        for (slo_name, slo) in slos() {
            let a = assess(&w, None, &slo);
            let scenario = format!("{name}, {slo_name} SLO");
            properties::assert_properties(&scenario, &w, &a);
            advice::assert_consistent(&scenario, &a);
            if slo_name != "tight ITL and E2E" {
                assert_eq!(
                    a.finding_ids().first().copied(),
                    first,
                    "{scenario}: {:?}",
                    a.finding_ids()
                );
            }
        }
    }
    // the after-burst scrape alone (since server start) has the properties too
    let w = Window::from_scrapes(
        &[scrape(
            "vllm/v0.32-cpu-after-burst-c16.prom",
            2_000_000_000.0,
        )],
        &[],
        &WindowOptions::default(),
    )
    .unwrap();
    for (slo_name, slo) in slos() {
        properties::assert_properties(
            &format!("after burst, {slo_name}"),
            &w,
            &assess(&w, None, &slo),
        );
    }
}

/// The reproduction: `diagnose --from pre-burst.prom@1000 --from after-burst.prom@1030`.
/// Both scrapes were taken idle, so no gauge figure or evidence shows their zeros; the counters
/// give the occupancy; the queue-time p95 is bounded by _sum (16 observations summing to 1.13 ms:
/// the 2 from the rank on hold at most that), not shown as the 300 ms bucket edge.
#[test]
fn the_burst_pair_shows_no_idle_gauge_and_bounded_quantiles() {
    let (_, w, _) = windows().swap_remove(2);
    let slo = &slos()[0].1;
    let a = assess(&w, None, slo);
    let figs: Vec<_> = a.steps.iter().flat_map(|s| &s.figures).collect();
    for name in [
        "running_mean",
        "running_max",
        "waiting_max",
        "kv_cache_usage_max_ratio",
    ] {
        assert!(figs.iter().all(|f| f.name != name), "{name} shown");
    }
    let running = figs
        .iter()
        .find(|f| f.name == "running_mean_from_counters")
        .unwrap();
    assert!((running.value - (13.302237436999576 - 2.3473596490000546) / 30.0).abs() < 1e-9);
    let q95 = figs.iter().find(|f| f.name == "queue_time_p95_s").unwrap();
    let dsum = 0.004058749999785505 - 0.002928627000017059;
    assert!((q95.value - dsum).abs() < 1e-6 * dsum, "{}", q95.value);
    assert!(q95.source.contains("capped by _sum"), "{}", q95.source);
    assert!(
        a.steps[1]
            .remarks
            .iter()
            .any(|r| r.contains("read 0 at every scrape while 16 requests finished")),
        "{:?}",
        a.steps[1].remarks
    );
    assert!(
        w.gauge(Signal::Running).is_some(),
        "the gauge was read, just not used"
    );
    assert!(a.findings.is_empty(), "{:?}", a.finding_ids());
    for id in ["truncation", "low_prefix_reuse"] {
        assert!(advice::note_of(&a, id).is_some(), "{id}: {:?}", a.notes);
    }
}
