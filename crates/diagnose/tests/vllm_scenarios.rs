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

#[path = "support/advice.rs"]
mod advice;

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
    // All 16 ended exactly at max_tokens: what an ignore_eos benchmark produces by design, so
    // without the client's word it is a note, not a finding; the bottleneck comes first.
    assert!(!ids.contains(&"truncation"), "{ids:?}");
    assert!(
        a.notes.iter().any(|n| n.contains("`truncation`")),
        "{:?}",
        a.notes
    );
    assert_eq!(ids.first(), Some(&"admission_saturation"), "{ids:?}");
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
        started_before_window: None,
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

fn figure(a: &headroom_diagnose::Assessment, name: &str) -> f64 {
    a.steps
        .iter()
        .flat_map(|s| &s.figures)
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no figure {name}"))
        .value
}

/// Every real-vLLM scenario, under the scenario SLO and a tight ITL one: no two findings pull
/// opposite ways, and every qualitative claim in the evidence states the comparison that decides
/// it and holds for its number (`support/advice.rs`).
#[test]
fn real_vllm_scenarios_give_consistent_advice() {
    let itl = SloSpec {
        objectives: vec![
            Objective::Latency {
                signal: LatencySignal::Itl,
                percentile: 50.0,
                threshold_s: 0.001,
            },
            Objective::Latency {
                signal: LatencySignal::E2e,
                percentile: 50.0,
                threshold_s: 1.0,
            },
        ],
    };
    for rel in [
        "vllm/v0.32-cpu-queueing-maxseqs4.prom",
        "vllm/v0.32-cpu-kv-pressure-24blocks.prom",
        "vllm/v0.32-cpu-after-burst-c16.prom",
    ] {
        let w = window(rel);
        for (name, slo) in [("scenario SLO", slo()), ("tight ITL and E2E", itl.clone())] {
            let a = assess(&w, None, &slo);
            advice::assert_consistent(&format!("{rel}, {name}"), &a);
        }
    }
}

/// vLLM's "maximum concurrency" is for requests of max_model_len tokens; the pool holds far more
/// requests of the size actually seen. Both are shown, each labelled, with hand values from the
/// fixtures' `cache_config_info` and token histograms.
#[test]
fn kv_capacity_is_given_at_max_model_len_and_at_the_mean_request() {
    // 24 blocks × 128 = 3072 tokens (kv_cache_size_tokens 3072), kv_cache_max_concurrency 1.5;
    // 80 requests: prompt 13824 + generation 18432 tokens → 403.2 tokens each → 7.619 requests.
    let w = window("vllm/v0.32-cpu-kv-pressure-24blocks.prom");
    let a = assess(&w, None, &slo());
    assert_eq!(figure(&a, "kv_concurrency_at_max_model_len"), 1.5);
    let want = 3072.0 / ((13824.0 + 18432.0) / 80.0);
    assert!((figure(&a, "kv_concurrency_at_mean_request") - want).abs() < 1e-12);
    let f = a.finding("kv_pressure").unwrap();
    let at_mean = f
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "kv_concurrency_at_mean_request")
        .expect("kv_pressure shows the pool at the mean request");
    assert!((at_mean.value - want).abs() < 1e-12);
    let vllm = f
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "kv_cache_max_concurrency")
        .unwrap();
    assert!(
        vllm.note
            .starts_with("KV capacity at max_model_len (vLLM's figure")
    );

    // 8192 × 128 = 1048576 tokens, vLLM's figure 512; 16 requests of 1024 / 16 + 2048 / 16 =
    // 192 tokens → 5461.3 requests.
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    let a = assess(&w, None, &slo());
    assert_eq!(figure(&a, "kv_concurrency_at_max_model_len"), 512.0);
    let want = 1048576.0 / 192.0;
    assert!((figure(&a, "kv_concurrency_at_mean_request") - want).abs() < 1e-9);
    let step6 = &a.steps[5];
    let src = |n: &str| &step6.figures.iter().find(|f| f.name == n).unwrap().source;
    assert!(
        src("kv_concurrency_at_max_model_len")
            .starts_with("KV capacity at max_model_len (vLLM's figure")
    );
    assert!(
        src("kv_concurrency_at_mean_request").contains("(64.0 prompt + 128.0 generated tokens")
    );
    // the old, unlabelled name is gone
    assert!(step6.figures.iter().all(|f| f.name != "kv_max_concurrency"));
}

/// The single scrape after a burst shows the running gauge at 0: not a batch to compare the pool
/// with, so the KV evidence makes no claim about it.
#[test]
fn a_single_scrape_makes_no_claim_about_the_running_batch() {
    let w = window("vllm/v0.32-cpu-kv-pressure-24blocks.prom");
    let a = assess(&w, None, &slo());
    let e = a
        .finding("kv_pressure")
        .unwrap()
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "kv_concurrency_at_mean_request")
        .unwrap();
    assert!(!e.note.contains("running"), "{}", e.note);
}

/// The evidence of `low_prefix_reuse` in `a`, by metric.
fn prefix_evidence<'a>(
    a: &'a headroom_diagnose::Assessment,
    metric: &str,
) -> &'a headroom_core::verdict::Evidence {
    a.finding("low_prefix_reuse")
        .expect("low_prefix_reuse fired")
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == metric)
        .unwrap_or_else(|| panic!("no evidence {metric}"))
}

/// The KV-pressure burst queried the prefix cache for 13,824 tokens and hit none (fixture lines
/// 75 and 81): 80 prompts of 13824 / 80 = 172.8 tokens each (lines 193–194). Whether that is a
/// finding depends on what the workload shares, which only a caller that knows the workload can
/// say (`diagnose --from RUN_DIR` reads the run's workload.yaml).
#[test]
fn low_prefix_reuse_depends_on_what_the_workload_shares() {
    use headroom_core::Confidence;
    use headroom_diagnose::{Origin, PrefixPlan, Setting, assess_with};
    let w = window("vllm/v0.32-cpu-kv-pressure-24blocks.prom");
    let prompt_mean = 13824.0 / 80.0;

    // Workload unknown (a live server, scrape files): the window cannot judge whether the
    // traffic shares prefixes, so the observation is a note, with what it assumes and its
    // figures (Δqueries 13,824 tokens, no hit).
    let a = assess(&w, None, &slo());
    advice::assert_consistent("prefix reuse, workload unknown", &a);
    assert!(
        a.finding("low_prefix_reuse").is_none(),
        "{:?}",
        a.finding_ids()
    );
    let note = advice::note_of(&a, "low_prefix_reuse").expect("unknown workload: a note");
    assert!(
        note.contains("assumes the traffic shares prefixes"),
        "{note}"
    );
    assert!(note.contains("prefix_cache_hit_ratio = 0 ratio"), "{note}");
    assert!(
        note.contains("vllm:prefix_cache_queries_total = 13824 tokens"),
        "{note}"
    );

    let with = |prefixes: PrefixPlan| {
        let s = Setting {
            origin: Origin::RunDir,
            dcgm_scraped: false,
            prefixes: Some(prefixes),
        };
        assess_with(&w, None, &slo(), &s)
    };

    // No class sets a shared prefix and no prompt comes from a dataset: nothing to reuse, so no
    // finding; step 2 says why the hit ratio is 0.
    let a = with(PrefixPlan::default());
    assert!(
        a.finding("low_prefix_reuse").is_none(),
        "{:?}",
        a.finding_ids()
    );
    assert!(
        a.steps[1]
            .remarks
            .iter()
            .any(|r| r.contains("sets no shared prefix")),
        "{:?}",
        a.steps[1].remarks
    );
    // The other findings are untouched.
    assert!(a.finding("kv_pressure").is_some());

    // Every request starts with 100 shared tokens: 100 / 172.8 = 0.579 of the prompt could hit,
    // and 0 did. The finding stays, with the workload's share and that ceiling.
    let a = with(PrefixPlan {
        shared_share: 1.0,
        shared_tokens_mean: 100.0,
        dataset_share: 0.0,
    });
    advice::assert_consistent("prefix reuse, shared prefixes", &a);
    let f = a
        .finding("low_prefix_reuse")
        .expect("shared prefixes, no hits");
    assert_eq!(f.finding.confidence, Confidence::Medium);
    assert_eq!(
        prefix_evidence(&a, "workload_shared_prefix_share").value,
        1.0
    );
    let c = prefix_evidence(&a, "workload_shared_prefix_over_prompt");
    assert!((c.value - 100.0 / prompt_mean).abs() < 1e-12, "{}", c.value);
    assert!(c.note.starts_with("≥ 0.1: "), "{}", c.note);
    assert!(
        !prefix_evidence(&a, "prefix_cache_hit_ratio")
            .note
            .contains("assumes"),
        "the workload is known"
    );

    // A quarter of the requests share 40 tokens: 10 tokens per request on average, 10 / 172.8 =
    // 0.058 of the prompt. A ratio under 0.1 is all the workload offers: no finding.
    let a = with(PrefixPlan {
        shared_share: 0.25,
        shared_tokens_mean: 10.0,
        dataset_share: 0.0,
    });
    assert!(
        a.finding("low_prefix_reuse").is_none(),
        "{:?}",
        a.finding_ids()
    );

    // Dataset prompts and no declared prefix: an assumption about the dataset, so a note that
    // says what it assumes.
    let a = with(PrefixPlan {
        shared_share: 0.0,
        shared_tokens_mean: 0.0,
        dataset_share: 0.5,
    });
    advice::assert_consistent("prefix reuse, dataset prompts", &a);
    let note = advice::note_of(&a, "low_prefix_reuse").expect("dataset prompts: a note");
    assert!(
        note.contains("workload_dataset_share = 0.5 ratio"),
        "{note}"
    );
    assert!(
        note.contains("assumes the dataset's prompts share prefixes"),
        "{note}"
    );

    // The scrape's cache_config_info says prefix caching is on: the action does not ask to
    // check --enable-prefix-caching, and the evidence quotes the setting.
    let a = with(PrefixPlan {
        shared_share: 1.0,
        shared_tokens_mean: 100.0,
        dataset_share: 0.0,
    });
    let f = a.finding("low_prefix_reuse").unwrap();
    assert!(
        !f.finding.action.contains("check that the server runs with"),
        "{}",
        f.finding.action
    );
    assert!(f.finding.action.starts_with("prefix caching is on"));
    assert_eq!(
        prefix_evidence(&a, "vllm:cache_config_info{enable_prefix_caching}").value,
        1.0
    );
}

/// The GPU-telemetry hint of step 5 names what works where the window came from: a saved run
/// cannot be scraped again, so it says to rerun the sweep, never "pass --dcgm".
#[test]
fn the_gpu_telemetry_hint_fits_the_origin() {
    use headroom_diagnose::{Origin, Setting, assess_with};
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    let hint = |origin: Origin, dcgm_scraped: bool| {
        let s = Setting {
            origin,
            dcgm_scraped,
            prefixes: None,
        };
        let a = assess_with(&w, None, &slo(), &s);
        let step5 = &a.steps[4];
        assert_eq!(step5.number, 5);
        step5
            .remarks
            .iter()
            .find(|r| r.contains("dcgm-exporter") || r.contains("DCGM"))
            .unwrap_or_else(|| panic!("{origin:?}: no telemetry remark in {:?}", step5.remarks))
            .clone()
    };
    let live = hint(Origin::Live, false);
    assert!(
        live.contains("add --dcgm URL") && live.contains("--url"),
        "{live}"
    );
    let run = hint(Origin::RunDir, false);
    assert!(
        run.contains("rerun `headroom sweep` with --dcgm URL"),
        "{run}"
    );
    assert!(run.contains("cannot scrape the past"), "{run}");
    let files = hint(Origin::ScrapeFiles, false);
    assert!(files.contains("--from FILE[@unix_s]"), "{files}");
    assert!(!files.contains("--dcgm"), "{files}");
    let prom = hint(Origin::Prometheus, false);
    assert!(
        prom.contains("have Prometheus scrape dcgm-exporter"),
        "{prom}"
    );
    assert!(!prom.contains("--dcgm"), "{prom}");
    let sweep = hint(Origin::Sweep, false);
    assert!(sweep.contains("run the sweep with --dcgm URL"), "{sweep}");
    // dcgm bodies were read and held no GPU: no flag is missing.
    for o in [Origin::Live, Origin::RunDir, Origin::ScrapeFiles] {
        let h = hint(o, true);
        assert!(
            h.contains("no GPU series") && !h.contains("--"),
            "{o:?}: {h}"
        );
    }
    // assess() does not know the origin: it names every way, none of them wrong.
    let a = assess(&w, None, &slo());
    let any = a.steps[4]
        .remarks
        .iter()
        .find(|r| r.contains("dcgm-exporter"))
        .unwrap();
    assert!(
        any.contains("`headroom sweep` or `headroom diagnose --url`"),
        "{any}"
    );
    // No remark tells a reader to "pass" a flag without saying where.
    for o in [
        Origin::Unspecified,
        Origin::Live,
        Origin::Sweep,
        Origin::RunDir,
        Origin::ScrapeFiles,
        Origin::Prometheus,
    ] {
        assert!(!hint(o, false).contains("pass --"), "{o:?}");
    }
}

/// `generated_over_max_tokens` is a ratio: its unit says so and its source says it is not a
/// count. All 16 requests of the queueing burst generated 128 tokens against max_tokens 128
/// (request_generation_tokens sum 2048 / 16, request_params_max_tokens sum 2048 / 16).
#[test]
fn generated_over_max_tokens_is_labelled_a_ratio() {
    let w = window("vllm/v0.32-cpu-queueing-maxseqs4.prom");
    let a = assess(&w, None, &slo());
    let f = a.steps[2]
        .figures
        .iter()
        .find(|f| f.name == headroom_diagnose::GENERATED_OVER_MAX_TOKENS)
        .expect("step 3 shows the figure");
    assert_eq!(f.name, "generated_over_max_tokens", "the JSON name is kept");
    assert_eq!(f.value, 1.0);
    assert_eq!(f.unit, "ratio");
    assert!(
        f.source
            .starts_with("generated/max_tokens ratio (not a count)"),
        "{}",
        f.source
    );
    // A client that sent no request with ignore_eos: every answer at the cap is truncation.
    let client = ClientView {
        started_before_window: None,
        ignore_eos_share: Some(0.0),
        ..ClientView::default()
    };
    let a = assess(&w, Some(&client), &slo());
    let e = a
        .finding("truncation")
        .unwrap()
        .finding
        .evidence
        .iter()
        .find(|e| e.metric == "generated_over_max_tokens")
        .unwrap();
    assert_eq!((e.value, e.unit.as_str()), (1.0, "ratio"));
    assert!(e.note.contains("generated/max_tokens ratio"), "{}", e.note);
}
