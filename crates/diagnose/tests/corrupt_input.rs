//! Corrupt expositions, hand-made: each kind of corruption must be named in a data warning (metric,
//! series, what was wrong), and no figure, evidence or verdict may be derived from the corrupt
//! family.

use headroom_core::{LatencySignal, Objective, SloSpec, Verdict};
use headroom_diagnose::{Assessment, DATA_WARNING_PREFIX, assess};
use headroom_signals::{Problem, Scrape, Signal, Window, WindowOptions};

const L: &str = r#"{engine="0",model_name="m"}"#;

/// A consistent vLLM 0.32-style body. Hand arithmetic for the healthy case: 20 requests, all
/// `stop`; TTFT buckets 0.1 → 10, 0.25 → 18, 0.5 → 20, +Inf → 20 (sum 3.0); queue all ≤ 0.3 s
/// (sum 0.2, mean 0.01 s).
struct Body {
    running: &'static str,
    waiting: &'static str,
    kv: &'static str,
    preemptions: &'static str,
    prompt_tokens: &'static str,
    ttft_buckets: [&'static str; 4],
    ttft_count: &'static str,
    queue_buckets: [&'static str; 2],
}

impl Default for Body {
    fn default() -> Self {
        Body {
            running: "2",
            waiting: "0",
            kv: "0.25",
            preemptions: "0",
            prompt_tokens: "1000",
            ttft_buckets: ["10", "18", "20", "20"],
            ttft_count: "20",
            queue_buckets: ["20", "20"],
        }
    }
}

impl Body {
    fn render(&self) -> String {
        let l = L;
        let le = |b: &str| format!(r#"{{engine="0",le="{b}",model_name="m"}}"#);
        let mut o = String::new();
        o += &format!(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{l} {}\n",
            self.running
        );
        o += &format!(
            "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{l} {}\n",
            self.waiting
        );
        o += &format!(
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{l} {}\n",
            self.kv
        );
        o += &format!(
            "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{l} {}\n",
            self.preemptions
        );
        o += &format!(
            "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{l} {}\n",
            self.prompt_tokens
        );
        o += "# TYPE vllm:generation_tokens_total counter\n";
        o += &format!("vllm:generation_tokens_total{l} 2000\n");
        o += "# TYPE vllm:request_success_total counter\n";
        o += "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 20\n";
        o += "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 0\n";
        o += "# TYPE vllm:time_to_first_token_seconds histogram\n";
        for (b, c) in ["0.1", "0.25", "0.5", "+Inf"].iter().zip(self.ttft_buckets) {
            o += &format!("vllm:time_to_first_token_seconds_bucket{} {c}\n", le(b));
        }
        o += &format!("vllm:time_to_first_token_seconds_sum{l} 3.0\n");
        o += &format!(
            "vllm:time_to_first_token_seconds_count{l} {}\n",
            self.ttft_count
        );
        o += "# TYPE vllm:request_queue_time_seconds histogram\n";
        for (b, c) in ["0.3", "+Inf"].iter().zip(self.queue_buckets) {
            o += &format!("vllm:request_queue_time_seconds_bucket{} {c}\n", le(b));
        }
        o += &format!("vllm:request_queue_time_seconds_sum{l} 0.2\n");
        o += &format!(
            "vllm:request_queue_time_seconds_count{l} {}\n",
            self.queue_buckets[1]
        );
        o
    }
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
                threshold_s: 0.3,
            },
            Objective::ErrorRate { max_ratio: 0.1 },
        ],
    }
}

fn window_of(bodies: &[String], dcgm: &[String]) -> Window {
    let scrapes: Vec<Scrape> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            Scrape::from_body("t.prom", b.clone(), 1000.0 + i as f64 * 10.0, None).unwrap()
        })
        .collect();
    let d: Vec<Scrape> = dcgm
        .iter()
        .enumerate()
        .map(|(i, b)| {
            Scrape::from_body("d.prom", b.clone(), 1000.0 + i as f64 * 10.0, None).unwrap()
        })
        .collect();
    Window::from_scrapes(&scrapes, &d, &WindowOptions::default()).unwrap()
}

fn one(b: Body) -> (Window, Assessment) {
    let w = window_of(&[b.render()], &[]);
    let a = assess(&w, None, &slo());
    (w, a)
}

/// Asserts that nothing in the assessment was computed from `metric`: no step figure sourced from
/// it, no evidence naming it, and that the notes carry a data warning naming it.
fn nothing_from(a: &Assessment, metric: &str) {
    for s in &a.steps {
        for f in &s.figures {
            assert!(
                !f.source.contains(metric),
                "figure {} from {metric}: {:?}",
                f.name,
                f
            );
        }
    }
    for f in &a.findings {
        for e in &f.finding.evidence {
            assert!(
                !e.metric.contains(metric),
                "evidence from {metric} in {}: {e:?}",
                f.finding.id
            );
        }
    }
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with(DATA_WARNING_PREFIX) && n.contains(metric)),
        "no data warning names {metric}: {:#?}",
        a.notes
    );
}

fn objective<'a>(a: &'a Assessment, id: &str) -> &'a headroom_core::run::ObjectiveResult {
    a.objectives.iter().find(|o| o.id == id).unwrap()
}

#[test]
fn the_healthy_body_has_no_warnings_and_passes() {
    let (w, a) = one(Body::default());
    assert!(w.data_warnings.is_empty(), "{:?}", w.data_warnings);
    assert!(w.rejected.is_empty());
    // 20 of 20 TTFT observations ≤ 0.5 s → p50 ≤ 0.5 s holds
    assert_eq!(objective(&a, "ttft_p50").verdict, Verdict::Pass);
    assert_eq!(w.histogram(Signal::Ttft).unwrap().count, 20.0);
    assert!(!a.notes.iter().any(|n| n.starts_with(DATA_WARNING_PREFIX)));
}

#[test]
fn non_cumulative_buckets_reject_the_histogram() {
    // le=0.25 holds 8, fewer than le=0.1 with 10
    let (w, a) = one(Body {
        ttft_buckets: ["10", "8", "20", "20"],
        ..Body::default()
    });
    assert_eq!(w.data_warnings.len(), 1, "{:?}", w.data_warnings);
    let d = &w.data_warnings[0];
    assert_eq!(d.metric, "vllm:time_to_first_token_seconds");
    assert_eq!(d.series, L);
    assert_eq!(d.problem, Problem::NotCumulative);
    assert!(
        d.detail
            .contains("le=\"0.25\" holds 8, fewer than le=\"0.1\" with 10"),
        "{}",
        d.detail
    );
    assert!(w.histogram(Signal::Ttft).is_none());
    assert!(
        !w.missing.contains_key(&Signal::Ttft),
        "rejected is not missing"
    );
    let o = objective(&a, "ttft_p50");
    assert_eq!(o.verdict, Verdict::Inconclusive);
    assert_eq!(o.observed, None);
    assert!(
        o.reason.contains("vllm:time_to_first_token_seconds")
            && o.reason.contains("not cumulative"),
        "{}",
        o.reason
    );
    nothing_from(&a, "vllm:time_to_first_token_seconds");
    // rows reading TTFT are not evaluated, and say so
    for id in [
        "admission_saturation",
        "prefill_contention",
        "alert_on_queue_time",
    ] {
        assert!(
            a.notes
                .iter()
                .any(|n| n.starts_with(&format!("finding `{id}` not evaluated"))),
            "{id}: {:#?}",
            a.notes
        );
        assert!(a.finding(id).is_none());
    }
    // the other objectives stand
    assert_eq!(objective(&a, "queue_time_p50").verdict, Verdict::Pass);
}

#[test]
fn count_disagreeing_with_inf_bucket_rejects_the_histogram() {
    let (w, a) = one(Body {
        ttft_count: "25",
        ..Body::default()
    });
    let d = &w.data_warnings[0];
    assert_eq!(d.problem, Problem::CountMismatch);
    assert!(
        d.detail
            .contains("_count is 25 but the +Inf bucket holds 20"),
        "{}",
        d.detail
    );
    assert_eq!(objective(&a, "ttft_p50").verdict, Verdict::Inconclusive);
    nothing_from(&a, "vllm:time_to_first_token_seconds");
}

#[test]
fn negative_histogram_count_rejects_the_histogram() {
    let (w, a) = one(Body {
        queue_buckets: ["-1", "20"],
        ..Body::default()
    });
    let d = &w.data_warnings[0];
    assert_eq!(d.metric, "vllm:request_queue_time_seconds");
    assert_eq!(d.problem, Problem::Negative);
    assert!(
        d.detail.contains("bucket le=\"0.3\" is negative (-1)"),
        "{}",
        d.detail
    );
    assert_eq!(
        objective(&a, "queue_time_p50").verdict,
        Verdict::Inconclusive
    );
    assert_eq!(objective(&a, "ttft_p50").verdict, Verdict::Pass);
    nothing_from(&a, "vllm:request_queue_time_seconds");
}

#[test]
fn negative_counter_rejects_the_family_and_the_rows_reading_it() {
    let (w, a) = one(Body {
        preemptions: "-3",
        ..Body::default()
    });
    let d = &w.data_warnings[0];
    assert_eq!(d.metric, "vllm:num_preemptions_total");
    assert_eq!(d.problem, Problem::Negative);
    assert_eq!(w.counter(Signal::Preemptions), None);
    // kv_pressure would otherwise read "0 preemptions": not evaluated
    for id in ["kv_pressure", "admission_saturation"] {
        assert!(
            a.notes.iter().any(|n| n.starts_with(&format!(
                "finding `{id}` not evaluated: vllm:num_preemptions_total"
            ))),
            "{:#?}",
            a.notes
        );
    }
    nothing_from(&a, "vllm:num_preemptions_total");
}

#[test]
fn absurd_counter_values_are_rejected() {
    for (v, problem) in [
        ("1e308", Problem::OutOfRange),
        ("NaN", Problem::NotFinite),
        ("+Inf", Problem::NotFinite),
    ] {
        let (w, a) = one(Body {
            prompt_tokens: v,
            ..Body::default()
        });
        assert_eq!(w.data_warnings.len(), 1, "{v}");
        assert_eq!(w.data_warnings[0].problem, problem, "{v}");
        assert_eq!(w.counter(Signal::PromptTokens), None, "{v}");
        nothing_from(&a, "vllm:prompt_tokens_total");
    }
}

#[test]
fn impossible_gauges_are_rejected() {
    for (kv, problem) in [
        ("1e308", Problem::OutOfRange),
        ("1.5", Problem::OutOfRange),
        ("-0.2", Problem::OutOfRange),
        ("NaN", Problem::NotFinite),
    ] {
        let (w, a) = one(Body {
            kv,
            ..Body::default()
        });
        assert_eq!(w.data_warnings[0].problem, problem, "{kv}");
        assert_eq!(w.data_warnings[0].metric, "vllm:kv_cache_usage_perc");
        assert!(w.gauge(Signal::KvCacheUsage).is_none(), "{kv}");
        nothing_from(&a, "vllm:kv_cache_usage_perc");
        assert!(a.finding("kv_pressure").is_none());
    }
    for (waiting, problem) in [
        ("-1e308", Problem::Negative),
        ("1e308", Problem::OutOfRange),
        ("-Inf", Problem::NotFinite),
    ] {
        let (w, a) = one(Body {
            waiting,
            ..Body::default()
        });
        assert_eq!(w.data_warnings[0].problem, problem, "{waiting}");
        assert!(w.gauge(Signal::Waiting).is_none());
        nothing_from(&a, "vllm:num_requests_waiting");
    }
}

#[test]
fn one_corrupt_scrape_rejects_the_signal_for_the_whole_window() {
    let good = Body::default().render();
    let bad = Body {
        running: "-5",
        ..Body::default()
    }
    .render();
    let w = window_of(&[good.clone(), bad, good], &[]);
    assert!(w.gauge(Signal::Running).is_none());
    assert_eq!(w.data_warnings.len(), 1);
    assert_eq!(w.data_warnings[0].occurrences, 1);
    assert!(
        w.gauge(Signal::KvCacheUsage).is_some(),
        "other gauges stand"
    );
}

#[test]
fn a_window_delta_that_uncounts_observations_is_rejected() {
    // Both scrapes are cumulative, but between them le=0.1 grew by 5 while +Inf grew by 1:
    // 4 observations above 0.1 s vanished without a reset.
    let first = Body {
        ttft_buckets: ["3", "8", "10", "10"],
        ttft_count: "10",
        ..Body::default()
    }
    .render();
    let second = Body {
        ttft_buckets: ["8", "9", "11", "11"],
        ttft_count: "11",
        ..Body::default()
    }
    .render()
    .replace(
        "vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} 3.0",
        "vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"m\"} 3.1",
    );
    let w = window_of(&[first, second], &[]);
    assert!(w.histogram(Signal::Ttft).is_none());
    let d = &w.data_warnings[0];
    assert_eq!(d.problem, Problem::NotCumulative);
    assert!(
        d.detail
            .starts_with("the increase over the window is impossible"),
        "{}",
        d.detail
    );
    let a = assess(&w, None, &slo());
    assert_eq!(objective(&a, "ttft_p50").verdict, Verdict::Inconclusive);
}

#[test]
fn gpu_fields_out_of_range_are_left_out() {
    let dcgm = |util: &str| {
        format!(
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-a\"}} {util}\nDCGM_FI_DEV_GPU_TEMP{{gpu=\"0\",UUID=\"GPU-a\"}} 60\nDCGM_FI_PROF_DRAM_ACTIVE{{gpu=\"0\",UUID=\"GPU-a\"}} 0.5\n"
        )
    };
    let body = Body::default().render();
    let w = window_of(&[body.clone(), body], &[dcgm("50"), dcgm("250")]);
    let g = &w.gpus[0];
    assert!(
        !g.gauges
            .contains_key(&headroom_signals::adapter::GpuField::GpuUtilPct)
    );
    assert_eq!(
        g.gauges[&headroom_signals::adapter::GpuField::GpuTempC].max,
        60.0
    );
    let d = &w.data_warnings[0];
    assert_eq!(d.metric, "DCGM_FI_DEV_GPU_UTIL");
    assert_eq!(d.signal, "gpu_util_pct");
    assert!(d.detail.contains("250 is outside 0–100"), "{}", d.detail);
    let a = assess(&w, None, &slo());
    nothing_from(&a, "DCGM_FI_DEV_GPU_UTIL");
}

#[test]
fn the_error_objective_refuses_a_corrupt_finished_counter() {
    let body = Body::default().render().replace(
        "finished_reason=\"stop\",model_name=\"m\"} 20",
        "finished_reason=\"stop\",model_name=\"m\"} -20",
    );
    let w = window_of(&[body], &[]);
    let a = assess(&w, None, &slo());
    let o = objective(&a, "error_rate");
    assert_eq!(o.verdict, Verdict::Inconclusive);
    assert!(
        o.reason.contains("vllm:request_success_total"),
        "{}",
        o.reason
    );
    assert_eq!(
        w.requests_finished(),
        None,
        "no fallback to the E2E count under the same name"
    );
    nothing_from(&a, "vllm:request_success_total");
}

/// Inserts `extra` right after the first line of `body` that contains `after`.
fn with_line_after(body: &str, after: &str, extra: &str) -> String {
    let mut out = String::new();
    let mut done = false;
    for line in body.lines() {
        out += line;
        out.push('\n');
        if !done && line.contains(after) {
            out += extra;
            out.push('\n');
            done = true;
        }
    }
    assert!(done, "no line contains {after}");
    out
}

#[test]
fn a_series_written_twice_rejects_its_family_whatever_the_kind() {
    let stop = r#"vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"}"#;
    let bucket = r#"vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="m"}"#;
    let sum = r#"vllm:request_queue_time_seconds_sum{engine="0",model_name="m"}"#;
    let kv = r#"vllm:kv_cache_usage_perc{engine="0",model_name="m"}"#;
    // (the repeated line, the family, the signal it feeds, the values in body order)
    for (line, repeat, metric, signal, values) in [
        // the adversarial case: a counter written 20 then 999 (a last-one-wins or summing
        // reader would count 999 or 1019 finished requests)
        (
            stop,
            format!("{stop} 999"),
            "vllm:request_success_total",
            Signal::RequestsFinished,
            "values 20, 999",
        ),
        (
            bucket,
            format!("{bucket} 19"),
            "vllm:time_to_first_token_seconds",
            Signal::Ttft,
            "values 18, 19",
        ),
        (
            sum,
            format!("{sum} 0.2"),
            "vllm:request_queue_time_seconds",
            Signal::QueueTime,
            "values 0.2, 0.2",
        ),
        (
            kv,
            format!("{kv} 0.5"),
            "vllm:kv_cache_usage_perc",
            Signal::KvCacheUsage,
            "values 0.25, 0.5",
        ),
    ] {
        let body = with_line_after(&Body::default().render(), line, &repeat);
        let w = window_of(&[body], &[]);
        assert_eq!(w.data_warnings.len(), 1, "{metric}: {:?}", w.data_warnings);
        let d = &w.data_warnings[0];
        assert_eq!(d.metric, metric);
        assert_eq!(d.problem, Problem::DuplicateSeries);
        // the series is named, with its full label set (`le` included for a bucket)
        let labels = &line[line.find('{').unwrap()..];
        assert_eq!(d.series, labels, "{metric}");
        assert!(
            d.detail.contains("written 2 times in one scrape"),
            "{}",
            d.detail
        );
        assert!(d.detail.contains(values), "{values} not in {}", d.detail);
        assert!(w.rejected.contains_key(&signal), "{metric}");
        let a = assess(&w, None, &slo());
        nothing_from(&a, metric);
    }
    // the error objective no longer passes on a made-up count
    let body = with_line_after(&Body::default().render(), stop, &format!("{stop} 999"));
    let w = window_of(&[body], &[]);
    assert_eq!(w.requests_finished(), None);
    let a = assess(&w, None, &slo());
    assert_eq!(objective(&a, "error_rate").verdict, Verdict::Inconclusive);
}

#[test]
fn a_gpu_series_written_twice_is_left_out() {
    let util = r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"}"#;
    let dcgm = format!(
        "{util} 40\n{util} 90\nDCGM_FI_DEV_GPU_TEMP{{gpu=\"0\",UUID=\"GPU-a\"}} 60\nDCGM_FI_DEV_GPU_TEMP{{gpu=\"1\",UUID=\"GPU-b\"}} 61\n"
    );
    let body = Body::default().render();
    let w = window_of(&[body.clone(), body], &[dcgm.clone(), dcgm]);
    let g0 = w.gpus.iter().find(|g| g.id.gpu == "0").unwrap();
    assert!(
        !g0.gauges
            .contains_key(&headroom_signals::adapter::GpuField::GpuUtilPct)
    );
    // the same metric name with another `gpu` label is a different series
    assert_eq!(
        g0.gauges[&headroom_signals::adapter::GpuField::GpuTempC].max,
        60.0
    );
    let d = &w.data_warnings[0];
    assert_eq!(d.metric, "DCGM_FI_DEV_GPU_UTIL");
    assert_eq!(d.problem, Problem::DuplicateSeries);
    assert!(d.detail.contains("values 40, 90"), "{}", d.detail);
    let a = assess(&w, None, &slo());
    nothing_from(&a, "DCGM_FI_DEV_GPU_UTIL");
}
