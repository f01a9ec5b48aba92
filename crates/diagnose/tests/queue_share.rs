//! `queue_share_of_ttft` above 1 explains itself: per request queue time is part of TTFT, so a
//! share above 1 means the two engine means cover different requests (vLLM observes queue time
//! when a request finishes, TTFT at its first token), not that queueing exceeds TTFT.

use headroom_core::SloSpec;
use headroom_diagnose::assess;
use headroom_signals::{Scrape, Window, WindowOptions};

/// A minimal vLLM 0.32 scrape: TTFT and queue-time histograms with the given sums over `n`
/// observations (all in the +Inf bucket's lower neighbour), and the counters a window needs.
fn body(ttft_sum: f64, queue_sum: f64, n: u64) -> String {
    let hist = |name: &str, sum: f64| {
        format!(
            "# HELP {name} h\n# TYPE {name} histogram\n{name}_bucket{{le=\"10.0\",model_name=\"m\",engine=\"0\"}} {n}\n{name}_bucket{{le=\"+Inf\",model_name=\"m\",engine=\"0\"}} {n}\n{name}_count{{model_name=\"m\",engine=\"0\"}} {n}\n{name}_sum{{model_name=\"m\",engine=\"0\"}} {sum}\n"
        )
    };
    format!(
        "{}{}# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\",engine=\"0\"}} 0\n",
        hist("vllm:time_to_first_token_seconds", ttft_sum),
        hist("vllm:request_queue_time_seconds", queue_sum)
    )
}

fn share_source(ttft_sum: f64, queue_sum: f64) -> (f64, String) {
    let a = Scrape::from_body("a", body(0.0, 0.0, 0), 1000.0, None).unwrap();
    let b = Scrape::from_body("b", body(ttft_sum, queue_sum, 5), 1010.0, None).unwrap();
    let w = Window::from_scrapes(&[a, b], &[], &WindowOptions::default()).unwrap();
    let d = assess(&w, None, &SloSpec { objectives: vec![] });
    let f = d
        .steps
        .iter()
        .flat_map(|s| &s.figures)
        .find(|f| f.name == "queue_share_of_ttft")
        .expect("queue_share_of_ttft figure");
    (f.value, f.source.clone())
}

#[test]
fn a_queue_share_above_one_says_why() {
    // Queue 10 s and TTFT 5 s over the same 5 observations: share 2, explained.
    let (v, src) = share_source(5.0, 10.0);
    assert!((v - 2.0).abs() < 1e-12, "{v}");
    assert!(
        src.contains("observes queue time when a request finishes"),
        "{src}"
    );
    // Queue 1 s of TTFT 5 s: 0.2, the plain definition.
    let (v, src) = share_source(5.0, 1.0);
    assert!((v - 0.2).abs() < 1e-12, "{v}");
    assert_eq!(src, "queue mean / TTFT mean");
}
