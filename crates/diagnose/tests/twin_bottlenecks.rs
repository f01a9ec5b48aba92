//! The engine twin driven into each bottleneck of the decision table (README "bottlenecks on
//! demand", `crates/sim/tests/engine_scenarios.rs`), judged through `diagnose::assess` on the
//! twin's own `/metrics` and dcgm-exporter bodies, scraped every few seconds of engine time on the
//! virtual clock: each scenario must produce its finding and none of the other bottleneck
//! findings.
//!
//! The driver is a closed loop of `concurrency` clients, written here rather than with
//! `run_virtual` because the test needs scrapes *during* the run (the gauges, running / waiting /
//! KV usage, are only seen at scrape times, exactly as for a real server).

use headroom_core::{LatencySignal, Objective, SloSpec};
use headroom_diagnose::{Assessment, Category, ClientView, assess};
use headroom_signals::{Scrape, Window, WindowOptions};
use headroom_sim::{Engine, NewRequest, SimSpec};

/// The decision-table rows that name a bottleneck or a device problem: a scenario's own finding
/// must be among them and the others absent.
const BOTTLENECKS: [&str; 7] = [
    "kv_pressure",
    "admission_saturation",
    "prefill_contention",
    "decode_capacity",
    "device_fault",
    "memory_bandwidth_bound",
    "batching_not_working",
];

fn engine(f: impl FnOnce(&mut SimSpec)) -> Engine {
    let mut s = SimSpec {
        max_model_len: Some(4096),
        ..SimSpec::default()
    };
    f(&mut s);
    Engine::new(s.resolve().expect("spec")).expect("engine")
}

/// A prompt of `prompt` distinct tokens (no prefix sharing between requests) that stops by itself
/// after `out` tokens, well below its `max_tokens` (so it finishes `stop`, not `length`).
fn req(prompt: u32, out: u32, salt: u32) -> NewRequest {
    NewRequest {
        prompt_tokens: (0..prompt)
            .map(|k| 50_000 + (k * 31 + salt * 7919) % 60_000)
            .collect(),
        max_tokens: out + 64,
        ignore_eos: false,
        eos_after: Some(out),
        min_tokens: 0,
    }
}

struct Scraped {
    engine: Vec<Scrape>,
    dcgm: Vec<Scrape>,
    end_s: f64,
}

/// Runs a closed loop of `concurrency` clients over `requests` until they are all done or the
/// engine clock passes `until_s`, scraping `/metrics` and dcgm at 0 s, every `every_s` and at the
/// end.
fn drive(
    e: &mut Engine,
    concurrency: usize,
    requests: Vec<NewRequest>,
    until_s: f64,
    every_s: f64,
) -> Scraped {
    let origin = e.created_unix_s();
    let mut out = Scraped {
        engine: Vec::new(),
        dcgm: Vec::new(),
        end_s: 0.0,
    };
    let scrape = |e: &Engine, t: f64, out: &mut Scraped| {
        let at = origin + t;
        out.engine.push(
            Scrape::from_body("twin/metrics", e.render_metrics(t), at, None)
                .expect("twin /metrics parses"),
        );
        out.dcgm.push(
            Scrape::from_body("twin/dcgm", e.render_dcgm(t), at, None).expect("twin dcgm parses"),
        );
    };
    let mut pending = requests.into_iter();
    let mut t = 0.0f64;
    for _ in 0..concurrency {
        if let Some(r) = pending.next() {
            e.add_request(r, t);
        }
    }
    scrape(e, 0.0, &mut out);
    let mut next_scrape = every_s;
    let mut idle = 0u32;
    while t < until_s {
        if !e.has_work() {
            break;
        }
        let r = e.step(t);
        let done = t + r.duration_s;
        let finished = r.tokens.iter().filter(|k| k.finished.is_some()).count();
        if r.duration_s > 0.0 || !r.tokens.is_empty() {
            idle = 0;
            t = done;
        } else {
            idle += 1;
            assert!(idle < 1000, "the twin made no progress at t = {t}");
            if let Some(n) = e.next_queued_s().filter(|n| *n > t) {
                t = n;
            }
        }
        for _ in 0..finished {
            if let Some(r) = pending.next() {
                e.add_request(r, t);
            }
        }
        while next_scrape <= t {
            scrape(e, next_scrape.min(t), &mut out);
            next_scrape += every_s;
        }
    }
    if out.engine.last().is_none_or(|s| s.at_unix_s < origin + t) {
        scrape(e, t, &mut out);
    }
    out.end_s = t;
    out
}

fn slo(itl_p95_s: f64) -> SloSpec {
    SloSpec {
        objectives: vec![
            Objective::Latency {
                signal: LatencySignal::Ttft,
                percentile: 95.0,
                threshold_s: 2.0,
            },
            Objective::Latency {
                signal: LatencySignal::Itl,
                percentile: 95.0,
                threshold_s: itl_p95_s,
            },
        ],
    }
}

fn judge(s: &Scraped, slo: &SloSpec) -> (Window, Assessment) {
    let w = Window::from_scrapes(&s.engine, &s.dcgm, &WindowOptions::default()).expect("window");
    assert!(
        w.data_warnings.is_empty(),
        "the twin's metrics are consistent: {:?}",
        w.data_warnings
    );
    let a = assess(&w, None, slo);
    (w, a)
}

/// Asserts that `want` fired (when given) and no other bottleneck or device finding did.
fn only(a: &Assessment, want: Option<&str>) {
    only_these(a, want.as_slice());
}

/// Asserts that every id of `want` fired and no other bottleneck or device finding did.
fn only_these(a: &Assessment, want: &[&str]) {
    let ids = a.finding_ids();
    let detail = || {
        format!(
            "findings {ids:?}\nsteps {:#?}\nnotes {:#?}",
            a.steps
                .iter()
                .map(|s| (&s.title, &s.figures))
                .collect::<Vec<_>>(),
            a.notes
        )
    };
    for w in want {
        assert!(ids.contains(w), "{w} expected; {}", detail());
    }
    for b in BOTTLENECKS {
        if !want.contains(&b) {
            assert!(
                !ids.contains(&b),
                "{b} fired but the scenario is {want:?}; {}",
                detail()
            );
        }
    }
    for f in &a.findings {
        if matches!(f.category, Category::Bottleneck | Category::Health) {
            assert!(want.contains(&f.finding.id.as_str()), "{}", detail());
        }
    }
}

fn evidence(a: &Assessment, id: &str, metric: &str) -> f64 {
    a.finding(id)
        .and_then(|f| f.finding.evidence.iter().find(|e| e.metric == metric))
        .unwrap_or_else(|| panic!("{id}: no evidence {metric}"))
        .value
}

#[test]
fn healthy_baseline_has_no_bottleneck() {
    // A10G + Qwen2.5-3B, 4 clients, short prompts, answers that stop by themselves.
    let mut e = engine(|_| {});
    let s = drive(
        &mut e,
        4,
        (0..200).map(|i| req(200, 100, i)).collect(),
        60.0,
        5.0,
    );
    let (w, a) = judge(&s, &slo(0.1));
    only(&a, None);
    assert!(
        a.finding("truncation").is_none(),
        "answers stopped by themselves"
    );
    // every request the twin finished is counted (the twin's own counter, read directly)
    let st = e.stats();
    assert_eq!(
        w.requests_finished(),
        Some((st.success_stop + st.success_length + st.success_abort) as f64)
    );
}

#[test]
fn small_max_num_seqs_is_admission_saturation() {
    // README: `--max-num-seqs 4`, then more than 4 concurrent requests.
    let mut e = engine(|s| s.max_num_seqs = Some(4));
    let s = drive(
        &mut e,
        16,
        (0..200).map(|i| req(50, 100, i)).collect(),
        60.0,
        5.0,
    );
    let (w, a) = judge(&s, &slo(0.1));
    only(&a, Some("admission_saturation"));
    assert!(a.finding("autoscaling_trigger").is_some());
    // the queue-time evidence is the twin's own histogram mean over the window
    let st = e.stats();
    let q = evidence(
        &a,
        "admission_saturation",
        "vllm:request_queue_time_seconds",
    );
    assert!(
        (q - st.queue.sum() / st.queue.count() as f64).abs() < 1e-6,
        "{q}"
    );
    assert!(w.gauge(headroom_signals::Signal::Waiting).unwrap().max >= 8.0);
}

#[test]
fn small_kv_pool_is_kv_pressure() {
    // README: `--num-gpu-blocks-override 64` (64 × 16 = 1,024 KV tokens) and long outputs.
    let mut e = engine(|s| {
        s.num_gpu_blocks_override = Some(64);
        s.max_model_len = Some(1000);
    });
    let s = drive(
        &mut e,
        16,
        (0..64).map(|i| req(100, 400, i)).collect(),
        120.0,
        5.0,
    );
    let (_, a) = judge(&s, &slo(0.1));
    only(&a, Some("kv_pressure"));
    let pre = evidence(&a, "kv_pressure", "vllm:num_preemptions_total");
    assert_eq!(pre, e.stats().num_preemptions as f64);
    assert!(pre > 0.0);
}

#[test]
fn long_prompts_are_prefill_contention() {
    // Qwen2.5-3B, 16 clients, a quarter of the prompts 8k tokens (simulator.md §6).
    let mut e = engine(|s| s.max_model_len = Some(16384));
    let reqs = (0..400)
        .map(|i| {
            if i % 4 == 0 {
                req(8000, 100, i)
            } else {
                req(100, 100, i)
            }
        })
        .collect();
    let s = drive(&mut e, 16, reqs, 120.0, 5.0);
    let (_, a) = judge(&s, &slo(1.0));
    only(&a, Some("prefill_contention"));
}

#[test]
fn large_model_on_small_gpu_is_decode_capacity() {
    // README: `--gpu l4 --model qwen2.5-7b`, high concurrency: ITL grows with the batch.
    let mut e = engine(|s| {
        s.gpu = "l4".into();
        s.model = "qwen2.5-7b".into();
    });
    let s = drive(
        &mut e,
        64,
        (0..256).map(|i| req(100, 300, i)).collect(),
        120.0,
        5.0,
    );
    let (_, a) = judge(&s, &slo(0.03));
    // the same bottleneck seen from the GPU: DRAM busy, tensor pipes idle
    only_these(&a, &["decode_capacity", "memory_bandwidth_bound"]);
}

#[test]
fn thermal_fault_is_a_device_fault() {
    // README: `--thermal-throttle`: the GPU heats past its slowdown temperature under load.
    let mut e = engine(|s| s.thermal_throttle = true);
    let s = drive(
        &mut e,
        32,
        (0..200).map(|i| req(50, 2000, i)).collect(),
        300.0,
        10.0,
    );
    let (_, a) = judge(&s, &slo(0.1));
    only(&a, Some("device_fault"));
}

#[test]
fn xid_is_a_device_fault() {
    let mut e = engine(|s| s.xid_at_s = Some(10.0));
    let s = drive(
        &mut e,
        4,
        (0..200).map(|i| req(200, 100, i)).collect(),
        30.0,
        5.0,
    );
    let (_, a) = judge(&s, &slo(0.1));
    only(&a, Some("device_fault"));
    assert!(
        a.finding("device_fault")
            .unwrap()
            .finding
            .evidence
            .iter()
            .any(|e| e.metric == "DCGM_FI_DEV_XID_ERRORS" && e.note.contains("xid 13"))
    );
}

#[test]
fn answers_cut_at_max_tokens_are_truncation_and_natural_stops_are_not() {
    // Answers that would run to 300 tokens capped at 100: every request ends `length`.
    let mut e = engine(|_| {});
    let cut = (0..100)
        .map(|i| NewRequest {
            max_tokens: 100,
            ..req(200, 300, i)
        })
        .collect();
    let s = drive(&mut e, 4, cut, 60.0, 5.0);
    let (w, a) = judge(&s, &slo(0.1));
    only(&a, None);
    assert!(a.finding("truncation").is_some(), "{:?}", a.finding_ids());

    // The same server view from a sweep whose client sent every request with ignore_eos: the
    // answers end at max_tokens by design, so this is not truncation.
    let all = ClientView {
        ignore_eos_share: Some(1.0),
        ..ClientView::default()
    };
    let a = assess(&w, Some(&all), &slo(0.1));
    assert!(a.finding("truncation").is_none(), "{:?}", a.finding_ids());
    // Half of them with ignore_eos: the other half still ended at the cap (100 % length, 50 %
    // by design), which is truncation, with the by-design share in the evidence.
    let half = ClientView {
        ignore_eos_share: Some(0.5),
        ..ClientView::default()
    };
    let a = assess(&w, Some(&half), &slo(0.1));
    let f = a
        .finding("truncation")
        .expect("truncation beyond the ignore_eos share");
    assert!(
        f.finding
            .evidence
            .iter()
            .any(|e| e.metric == "client_ignore_eos_share" && e.value == 0.5)
    );
    // 97 % by design leaves 3 % unexplained, under the 5 % threshold.
    let most = ClientView {
        ignore_eos_share: Some(0.97),
        ..ClientView::default()
    };
    assert!(
        assess(&w, Some(&most), &slo(0.1))
            .finding("truncation")
            .is_none()
    );
}
