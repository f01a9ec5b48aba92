//! An error objective is judged only on a counter of failed requests: an engine that exports a
//! request count without its outcome (SGLang's `sglang:num_requests_total`, llama.cpp's server,
//! a vLLM scrape without `vllm:request_success_total`) gives it no evidence, so it is
//! INCONCLUSIVE naming what is missing, never a PASS on failures read as 0. Expected figures are
//! the bodies' own counts, by hand.

use headroom_core::{Objective, SloSpec, Verdict};
use headroom_diagnose::assess;
use headroom_signals::{Scrape, Window, WindowOptions};

/// Errors + aborts < 0.5 % of finished requests, the built-in SLO's error objective.
fn slo() -> SloSpec {
    SloSpec {
        objectives: vec![Objective::ErrorRate { max_ratio: 0.005 }],
    }
}

/// The error objective's row of a window made of two scrapes 60 s apart.
fn judge(before: &str, after: &str) -> headroom_core::run::ObjectiveResult {
    let s0 = Scrape::from_body("t0", before.to_owned(), 1_000.0, None).unwrap();
    let s1 = Scrape::from_body("t1", after.to_owned(), 1_060.0, None).unwrap();
    let w = Window::from_scrapes(&[s0, s1], &[], &WindowOptions::default()).unwrap();
    let a = assess(&w, None, &slo());
    a.objectives
        .into_iter()
        .find(|o| o.id == "error_rate")
        .expect("the error objective is judged")
}

fn sglang(requests: u64) -> String {
    format!(
        "# TYPE sglang:num_requests_total counter\n\
         sglang:num_requests_total{{model_name=\"m\"}} {requests}\n\
         # TYPE sglang:generation_tokens_total counter\n\
         sglang:generation_tokens_total{{model_name=\"m\"}} {}\n\
         # TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{{model_name=\"m\"}} 0\n",
        requests * 100
    )
}

/// A vLLM body whose only request count is the E2E histogram (`request_success_total` absent)
/// or, with `outcomes`, `request_success_total` by `finished_reason`.
fn vllm(finished: u64, outcomes: &[(&str, u64)]) -> String {
    let mut b = format!(
        "# TYPE vllm:e2e_request_latency_seconds histogram\n\
         vllm:e2e_request_latency_seconds_bucket{{le=\"1.0\",model_name=\"m\"}} {finished}\n\
         vllm:e2e_request_latency_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {finished}\n\
         vllm:e2e_request_latency_seconds_sum{{model_name=\"m\"}} {}\n\
         vllm:e2e_request_latency_seconds_count{{model_name=\"m\"}} {finished}\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"m\"}} 0\n",
        finished as f64 * 0.5
    );
    if !outcomes.is_empty() {
        b.push_str("# TYPE vllm:request_success_total counter\n");
        for (reason, n) in outcomes {
            b.push_str(&format!(
                "vllm:request_success_total{{finished_reason=\"{reason}\",model_name=\"m\"}} {n}\n"
            ));
        }
    }
    b
}

fn tgi(success: u64, failure: Option<u64>) -> String {
    let mut b = format!(
        "# TYPE tgi_request_success counter\ntgi_request_success {success}\n\
         # TYPE tgi_queue_size gauge\ntgi_queue_size 0\n"
    );
    if let Some(f) = failure {
        b.push_str(&format!(
            "# TYPE tgi_request_failure counter\ntgi_request_failure{{err=\"overloaded\"}} {f}\n"
        ));
    }
    b
}

#[test]
fn sglang_has_no_outcome_series_so_its_error_objective_is_inconclusive() {
    let r = judge(&sglang(10), &sglang(410));
    assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.reason);
    assert!(
        r.reason.contains("sglang:num_requests_total"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("400 requests finished"), "{}", r.reason);
    assert!(!r.reason.contains("vllm"), "{}", r.reason);
}

#[test]
fn vllm_without_request_success_total_is_inconclusive_naming_it() {
    let r = judge(&vllm(0, &[]), &vllm(200, &[]));
    assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.reason);
    assert!(
        r.reason
            .contains("vllm:request_success_total is not exported"),
        "{}",
        r.reason
    );
}

#[test]
fn vllm_with_its_outcome_series_is_judged_on_it() {
    // 190 stop + 10 abort of 200: 5 % > 0.5 %, a certain breach.
    let fail = judge(
        &vllm(0, &[("stop", 0), ("abort", 0)]),
        &vllm(200, &[("stop", 190), ("abort", 10)]),
    );
    assert_eq!(fail.verdict, Verdict::Fail, "{}", fail.reason);
    assert!(
        fail.reason.contains("10 errors + aborts of 200"),
        "{}",
        fail.reason
    );
    // 2,000 stop, none failed: 0 of 2,000 is certainly below 0.5 %.
    let pass = judge(
        &vllm(0, &[("stop", 0), ("abort", 0)]),
        &vllm(2_000, &[("stop", 2_000), ("abort", 0)]),
    );
    assert_eq!(pass.verdict, Verdict::Pass, "{}", pass.reason);
}

#[test]
fn tgi_counts_its_failure_counter_which_appears_with_the_first_failure() {
    let none_yet = judge(&tgi(0, None), &tgi(2_000, None));
    assert_eq!(none_yet.verdict, Verdict::Pass, "{}", none_yet.reason);
    assert!(none_yet.reason.contains("none yet"), "{}", none_yet.reason);
    let failed = judge(&tgi(0, Some(0)), &tgi(190, Some(10)));
    assert_eq!(failed.verdict, Verdict::Fail, "{}", failed.reason);
    assert!(
        failed.reason.contains("tgi_request_failure"),
        "{}",
        failed.reason
    );
}

#[test]
fn llama_cpp_exports_no_outcome_so_its_error_objective_is_inconclusive() {
    let path = format!(
        "{}/tests/fixtures/llamacpp-b11434-cpu-after-load.prom",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = std::fs::read_to_string(&path).unwrap();
    let s = Scrape::from_body(path, body, 2_000.0, None).unwrap();
    let w = Window::from_scrapes(&[s], &[], &WindowOptions::default()).unwrap();
    let a = assess(&w, None, &slo());
    let r = &a.objectives[0];
    assert_eq!(r.verdict, Verdict::Inconclusive, "{}", r.reason);
    assert!(r.reason.contains("llama.cpp"), "{}", r.reason);
    assert_ne!(a.verdict, Verdict::Pass);
}
