//! A quantile whose rank falls in the first bucket `[0, le₀]` is only known to be ≤ le₀ (or less,
//! where `_sum` caps it): every figure and objective shows the bound, never PromQL's
//! interpolation inside the bucket.

use headroom_core::objective::Bound;
use headroom_core::{LatencySignal, Objective, SloSpec, Verdict};
use headroom_diagnose::assess;

/// What a reason or figure source tells people about an upper bound.
const UPPER_BOUND_ONLY: &str = "upper bound only: ≤";
use headroom_signals::{Scrape, Window, WindowOptions};

/// vLLM's queue-time buckets start at 0.3 s. 40 requests, all queued ≤ 0.3 s, mean 1.2 ms
/// (sum 0.048 s); TTFT: 10 ≤ 0.1 s, 40 ≤ 0.5 s (p95 in the second bucket: a point estimate).
fn window() -> Window {
    let l = r#"engine="0",model_name="m""#;
    let body = format!(
        "# TYPE vllm:request_success_total counter
vllm:request_success_total{{{l},finished_reason=\"stop\"}} 40
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{{{l},le=\"0.3\"}} 40
vllm:request_queue_time_seconds_bucket{{{l},le=\"0.5\"}} 40
vllm:request_queue_time_seconds_bucket{{{l},le=\"+Inf\"}} 40
vllm:request_queue_time_seconds_sum{{{l}}} 0.048
vllm:request_queue_time_seconds_count{{{l}}} 40
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.1\"}} 10
vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.5\"}} 40
vllm:time_to_first_token_seconds_bucket{{{l},le=\"+Inf\"}} 40
vllm:time_to_first_token_seconds_sum{{{l}}} 8
vllm:time_to_first_token_seconds_count{{{l}}} 40
"
    );
    let s = Scrape::from_body("t.prom", body, 1000.0, None).unwrap();
    Window::from_scrapes(&[s], &[], &WindowOptions::default()).unwrap()
}

fn queue(percentile: f64, threshold_s: f64) -> Objective {
    Objective::Latency {
        signal: LatencySignal::QueueTime,
        percentile,
        threshold_s,
    }
}

#[test]
fn first_bucket_quantiles_are_upper_bounds_everywhere() {
    let w = window();
    let slo = SloSpec {
        objectives: vec![queue(95.0, 0.3), queue(95.0, 0.1), queue(95.0, 0.5)],
    };
    let a = assess(&w, None, &slo);
    // _sum caps the first bucket's bound: the p95 rank is the 38th of 40, so the 3 observations
    // from it on hold at most the whole 0.048 s: p95 ≤ 0.016 s, below every threshold here
    // (0.1 s included, which the bucket edge 0.3 s alone could not decide).
    let verdicts: Vec<Verdict> = a.objectives.iter().map(|o| o.verdict).collect();
    assert_eq!(verdicts, vec![Verdict::Pass, Verdict::Pass, Verdict::Pass]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b;
    for o in &a.objectives {
        // the bound, not 0.3 × 38/40 = 0.285, nor the bucket edge 0.3
        assert!(
            close(o.observed.unwrap(), 0.048 / 3.0),
            "{}: {:?}",
            o.id,
            o.observed
        );
        assert_eq!(o.bound, Bound::Upper, "{}", o.id);
        assert!(o.reason.contains(UPPER_BOUND_ONLY), "{}", o.reason);
        assert!(!o.reason.contains("0.285"), "{}", o.reason);
    }
    // step figures: every queue-time quantile is the bound, marked and capped by the sum
    // (p50: 21 observations from rank 20 on; p99: the 40th alone); TTFT p95 is a point
    let figs: Vec<_> = a.steps.iter().flat_map(|s| &s.figures).collect();
    for (name, bound) in [
        ("queue_time_p50_s", 0.048 / 21.0),
        ("queue_time_p95_s", 0.048 / 3.0),
        ("queue_time_p99_s", 0.048),
    ] {
        let f = figs.iter().find(|f| f.name == name).unwrap();
        assert!(close(f.value, bound), "{name}: {}", f.value);
        assert_eq!(f.bound, Bound::Upper, "{name}");
        assert!(
            f.source.starts_with(UPPER_BOUND_ONLY) && f.source.contains("capped by _sum"),
            "{name}: {}",
            f.source
        );
    }
    // TTFT p95: rank 38 in (0.1, 0.5]: 0.1 + 0.4 × (38 − 10)/30 = 0.47333…
    let t = figs.iter().find(|f| f.name == "server_ttft_p95_s").unwrap();
    assert!(
        (t.value - (0.1 + 0.4 * 28.0 / 30.0)).abs() < 1e-9,
        "{}",
        t.value
    );
    assert!(!t.source.starts_with(UPPER_BOUND_ONLY));
    assert_eq!(t.bound, Bound::Exact);
}

#[test]
fn too_few_observations_stay_inconclusive_even_in_the_first_bucket() {
    // p99.9 needs 1000 observations; 40 are not enough whatever the bound says
    let a = assess(
        &window(),
        None,
        &SloSpec {
            objectives: vec![queue(99.9, 0.3)],
        },
    );
    assert_eq!(a.objectives[0].verdict, Verdict::Inconclusive);
    assert!(
        a.objectives[0]
            .reason
            .contains("fewer than the 1000 needed")
    );
    // The figure shown with it is still only the bound, and says so (displays print "≤ 300 ms",
    // not "300 ms" beside a 300 ms threshold).
    // (capped by _sum: the p99.9 rank is the 40th observation, at most the whole 0.048 s)
    let observed = a.objectives[0].observed.unwrap();
    assert!((observed - 0.048).abs() < 1e-6, "{observed}");
    assert_eq!(a.objectives[0].bound, Bound::Upper);
    assert!(
        a.objectives[0].reason.contains(UPPER_BOUND_ONLY),
        "{}",
        a.objectives[0].reason
    );
}

/// A threshold on a bucket bound gives an exact share above it, printed as one number; one
/// inside a bucket a range.
#[test]
fn the_share_above_the_threshold_is_one_number_when_exact() {
    let ttft = |thr: f64| Objective::Latency {
        signal: LatencySignal::Ttft,
        percentile: 50.0,
        threshold_s: thr,
    };
    let a = assess(
        &window(),
        None,
        &SloSpec {
            objectives: vec![ttft(0.1), ttft(0.3)],
        },
    );
    // 30 of 40 above 0.1 s (a bound): 75.00 %, a breach of p50.
    assert!(
        a.objectives[0]
            .reason
            .contains("breached: 75.00 % of 40 observations above 0.1 s"),
        "{}",
        a.objectives[0].reason
    );
    // 0.3 s lies inside (0.1, 0.5]: between 0 and 75 % above it by the buckets; _sum 8 s
    // caps it: with the 10 first at ≥ 0 and the 30 others at ≥ 0.1 s, at most (8 − 3) / (0.3 −
    // 0.1) = 25 can be above 0.3 s, 62.5 %.
    assert!(
        a.objectives[1]
            .reason
            .contains("0.00–62.50 % of 40 observations above 0.3 s"),
        "{}",
        a.objectives[1].reason
    );
}
