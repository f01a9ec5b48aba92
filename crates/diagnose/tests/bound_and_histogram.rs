//! A queue-time objective the client's TTFT bound passes while the engine's own histogram
//! breaches it with certainty: the stricter holds (FAIL), and the reason names both. A bound the
//! histogram does not contradict stands. Counts are the body's, by hand.

use headroom_core::run::ObjectiveResult;
use headroom_core::{LatencySignal, Objective, SloSpec, Verdict};
use headroom_diagnose::{ClientView, QUEUE_BOUND_BY_TTFT, assess};
use headroom_signals::{Scrape, Window, WindowOptions};

/// Queue time p95 < 300 ms.
fn slo() -> SloSpec {
    SloSpec {
        objectives: vec![Objective::Latency {
            signal: LatencySignal::QueueTime,
            percentile: 95.0,
            threshold_s: 0.3,
        }],
    }
}

/// 100 queue-time observations, `above` of them in (0.3 s, 1 s].
fn window(above: u64) -> Window {
    let body = |below: u64, above: u64| {
        let n = below + above;
        format!(
            "# TYPE vllm:request_queue_time_seconds histogram\n\
             vllm:request_queue_time_seconds_bucket{{le=\"0.3\",model_name=\"m\"}} {below}\n\
             vllm:request_queue_time_seconds_bucket{{le=\"1.0\",model_name=\"m\"}} {n}\n\
             vllm:request_queue_time_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}\n\
             vllm:request_queue_time_seconds_sum{{model_name=\"m\"}} {}\n\
             vllm:request_queue_time_seconds_count{{model_name=\"m\"}} {n}\n\
             # TYPE vllm:request_success_total counter\n\
             vllm:request_success_total{{finished_reason=\"stop\",model_name=\"m\"}} {n}\n",
            below as f64 * 0.1 + above as f64 * 0.7
        )
    };
    let s0 = Scrape::from_body("t0", body(0, 0), 1_000.0, None).unwrap();
    let s1 = Scrape::from_body("t1", body(100 - above, above), 1_010.0, None).unwrap();
    Window::from_scrapes(&[s0, s1], &[], &WindowOptions::default()).unwrap()
}

/// The row the sweep writes when the client's TTFT settles the objective.
fn bound() -> ObjectiveResult {
    ObjectiveResult {
        id: serde_json::from_str("\"queue_time_p95\"").unwrap(),
        description: "queue time p95 < 300 ms".into(),
        bound: Default::default(),
        source: None,
        threshold: 0.3,
        observed: None,
        verdict: Verdict::Pass,
        samples: 120,
        reason: format!(
            "{QUEUE_BOUND_BY_TTFT} (queue time ≤ TTFT for every request): TTFT p95 = 120 ms; client-side"
        ),
        share: None,
    }
}

fn judged(above: u64) -> ObjectiveResult {
    judged_after_warmup(above, None)
}

fn judged_after_warmup(above: u64, started_before_window: Option<u64>) -> ObjectiveResult {
    let client = ClientView {
        started_before_window,
        objectives: vec![bound()],
        ..ClientView::default()
    };
    assess(&window(above), Some(&client), &slo()).objectives[0].clone()
}

/// A breach no larger than the requests started before the window can be theirs (a level's
/// start-up queues while the window's own requests, whose TTFT bounds their queue time, do
/// not): the bound stands. One request more than the warm-up could hold and the engine wins.
#[test]
fn a_breach_the_warm_up_can_explain_does_not_overrule() {
    let r = judged_after_warmup(40, Some(40));
    assert_eq!(r.verdict, Verdict::Pass, "{}", r.reason);
    let r = judged_after_warmup(40, Some(39));
    assert_eq!(r.verdict, Verdict::Fail, "{}", r.reason);
}

#[test]
fn a_certain_engine_breach_overrules_the_ttft_bound() {
    // 40 of 100 above 300 ms: 40 % against the 5 % allowed, certain at 95 %.
    let r = judged(40);
    assert_eq!(r.verdict, Verdict::Fail, "{}", r.reason);
    assert!(r.reason.contains("the stricter holds"), "{}", r.reason);
    assert!(
        r.reason.contains("vllm:request_queue_time_seconds"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("TTFT p95 = 120 ms"), "{}", r.reason);
    assert!(r.reason.contains("at least 40 of 100"), "{}", r.reason);
}

#[test]
fn a_bound_the_histogram_does_not_contradict_stands() {
    // 2 of 100 above: within the 5 % allowed.
    let r = judged(2);
    assert_eq!(r.verdict, Verdict::Pass, "{}", r.reason);
    assert!(r.reason.starts_with(QUEUE_BOUND_BY_TTFT), "{}", r.reason);
    // 8 of 100 above: the histogram's FAIL is not certain at 95 % (8 % ± 5 %), so the bound stands.
    let r = judged(8);
    assert_eq!(r.verdict, Verdict::Pass, "{}", r.reason);
}
