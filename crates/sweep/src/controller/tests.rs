use super::judge::{DISAGREE, mix_engine_spec, void_level};
use super::level_loop::{group_warnings, twin_lateness_warning};
use super::phase::{prefix_plan, send_lag_limit_s};

/// The class plans of a workload given as YAML text.
fn plans_of(text: &str) -> Vec<super::ClassPlan> {
    let w = headroom_load::workload::Workload::parse(
        text,
        std::path::Path::new("w.yaml"),
        std::path::Path::new("."),
    )
    .unwrap();
    super::ClassPlan::from_workload(&w, None).unwrap()
}

/// The sweep tells diagnose what its classes share as prefixes, by mix weight.
#[test]
fn the_prefix_plan_weighs_classes_by_the_mix() {
    let text = "load: {mode: concurrency}\nclasses:\n  - {name: a, weight: 9, endpoint: completions, shared_prefix_tokens: 50, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n  - {name: b, weight: 1, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n";
    let plans = plans_of(text);
    let p = prefix_plan(&plans);
    assert!((p.shared_share - 0.9).abs() < 1e-12, "{p:?}");
    assert!((p.shared_tokens_mean - 45.0).abs() < 1e-9, "{p:?}");
    assert_eq!(p.dataset_share, 0.0);
    let none = prefix_plan(&plans[1..]);
    assert!(none.nothing_shared(), "{none:?}");
}

/// The send-lag warning scales with the tightest TTFT/E2E objective: 2 %, at least 1 ms.
#[test]
fn the_send_lag_limit_follows_the_objectives() {
    use super::*;
    let text = "load: {mode: rate}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n  - {name: b, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n";
    let phase = Phase {
        name: "mix".into(),
        plans: plans_of(text),
    };
    let limit = |yaml: &str| {
        let slo = SloFile::parse(yaml, std::path::Path::new("slo.yaml")).unwrap();
        send_lag_limit_s(&slo, &phase)
    };
    let l =
        limit("objectives:\n  a: {ttft: {p95: 250ms}, itl: {p95: 5ms}}\n  b: {e2e: {p99: 20s}}\n");
    assert!((l - 0.005).abs() < 1e-12, "{l}");
    let l = limit("objectives:\n  a: {ttft: {p95: 30ms}}\n");
    assert!((l - 0.001).abs() < 1e-12, "{l}");
    let l = limit("objectives:\n  a: {itl: {p95: 50ms}}\n");
    assert!((l - 0.001).abs() < 1e-12, "{l}");
}

/// The engine-wide queue objective of a mix is left to the classes when each judged it
/// client-side, and kept when one did not.
#[test]
fn the_mix_leaves_queue_time_to_classes_that_judged_it() {
    use super::*;
    use headroom_core::objective::Bound;
    use headroom_core::{LatencySignal, Objective, SloSpec};
    let text = "load: {mode: concurrency}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n  - {name: b, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n";
    let plans = plans_of(text);
    let queue = Objective::Latency {
        signal: LatencySignal::QueueTime,
        percentile: 95.0,
        threshold_s: 0.3,
    };
    let ttft = Objective::Latency {
        signal: LatencySignal::Ttft,
        percentile: 95.0,
        threshold_s: 0.25,
    };
    let spec = SloSpec {
        objectives: vec![ttft.clone(), queue.clone()],
    };
    let row = |id: &str, v: Verdict| ObjectiveResult {
        share: None,
        bound: Bound::Exact,
        source: None,
        id: serde_json::from_value(serde_json::json!(id)).unwrap(),
        description: String::new(),
        threshold: 0.3,
        observed: None,
        verdict: v,
        samples: 20,
        reason: String::new(),
    };
    let both = [
        row("a/queue_time_p95", Verdict::Pass),
        row("b/queue_time_p95", Verdict::Inconclusive),
    ];
    assert_eq!(
        mix_engine_spec(&spec, &plans, &both).objectives,
        vec![ttft.clone()]
    );
    let one = [row("a/queue_time_p95", Verdict::Pass)];
    assert_eq!(
        mix_engine_spec(&spec, &plans, &one).objectives,
        vec![ttft, queue]
    );
}
use headroom_core::Verdict;
use headroom_core::run::{LevelResult, ObjectiveResult};

pub(crate) fn level_with(verdicts: &[(&str, Verdict)]) -> LevelResult {
    let objectives: Vec<ObjectiveResult> = verdicts
        .iter()
        .map(|(id, v)| ObjectiveResult {
            share: None,
            bound: Default::default(),
            source: None,
            id: serde_json::from_value(serde_json::json!(id)).unwrap(),
            description: (*id).into(),
            threshold: 0.3,
            observed: Some(0.1),
            verdict: *v,
            samples: 50,
            reason: "50 of 50 below".into(),
        })
        .collect();
    LevelResult {
        level_outcomes: Default::default(),
        load: 2.0,
        mode: headroom_core::run::LoadMode::Concurrency,
        started_unix_s: 0.0,
        window_s: 2.9,
        window_note: "full".into(),
        outcomes: Default::default(),
        latency: Default::default(),
        request_rate_per_s: 0.0,
        output_tokens_per_s: 0.0,
        goodput_per_s: Some(0.0),
        tokens: Default::default(),
        verdict: Verdict::combine(objectives.iter().map(|o| o.verdict)),
        objectives,
        client: Default::default(),
        server: None,
        histograms: String::new(),
        repeats: Vec::new(),
        warnings: vec![],
    }
}

/// Whatever the objectives said, a voided level (interrupted, server lost, aborted) is
/// INCONCLUSIVE throughout, says why, and keeps what the figures alone said.
/// Two repeats: a PASS and a FAIL of TTFT make the level FAIL with the second repeat's row
/// and a warning; the error objective both passed keeps the first repeat's row.
#[test]
fn repeats_must_agree_and_the_strictest_row_holds() {
    let mut l = level_with(&[("ttft_p95", Verdict::Pass), ("error_rate", Verdict::Pass)]);
    let mut r = level_with(&[("ttft_p95", Verdict::Fail), ("error_rate", Verdict::Pass)]);
    r.objectives[0].reason = "9 of 50 above".into();
    l.repeats.push(r);
    super::combine_repeats(&mut l);
    assert_eq!(l.verdict, Verdict::Fail);
    assert_eq!(l.objectives[0].reason, "repeat 2 of 2: 9 of 50 above");
    assert_eq!(l.objectives[1].reason, "50 of 50 below");
    assert_eq!(
        l.warnings,
        ["the 2 repeats disagree (PASS, FAIL): the strictest holds"]
    );
    // Agreeing repeats: nothing changes, no warning.
    let mut l = level_with(&[("ttft_p95", Verdict::Pass)]);
    l.repeats.push(level_with(&[("ttft_p95", Verdict::Pass)]));
    super::combine_repeats(&mut l);
    assert_eq!(l.verdict, Verdict::Pass);
    assert!(l.warnings.is_empty());
}

#[test]
fn a_voided_level_gives_no_verdict_whatever_its_figures_said() {
    for state in ["interrupted", "server lost", "aborted"] {
        for vs in [
            vec![("ttft_p95", Verdict::Pass), ("error_rate", Verdict::Pass)],
            vec![("ttft_p95", Verdict::Fail), ("error_rate", Verdict::Pass)],
            vec![("ttft_p95", Verdict::Inconclusive)],
        ] {
            let mut l = level_with(&vs);
            // As the judge leaves a level whose counts disagreed: the warning, and each
            // decided objective refused with what its figure said.
            let disagree = format!(
                "{} (requests_length client 3 / server 5): another client may be using the server",
                DISAGREE
            );
            l.warnings = vec![disagree.clone(), "twin ran late".into()];
            let said = vs[0].1.as_str();
            l.objectives[0].reason = format!("refused ({disagree}); the figure alone said {said}");
            l.objectives[0].verdict = Verdict::Inconclusive;
            void_level(&mut l, state, "why");
            assert_eq!(l.verdict, Verdict::Inconclusive);
            assert_eq!(l.window_note, format!("{state}: why"));
            assert_eq!(l.warnings, vec!["twin ran late".to_string()]);
            assert_eq!(
                l.objectives[0].reason,
                format!("no verdict ({state}: why); the figure alone said {said}")
            );
            for (o, (_, v)) in l.objectives.iter().zip(&vs) {
                assert_eq!(o.verdict, Verdict::Inconclusive);
                assert!(o.reason.starts_with(&format!("no verdict ({state}: why)")));
                if *v != Verdict::Inconclusive {
                    assert!(o.reason.contains(&format!("alone said {}", v.as_str())));
                }
            }
        }
    }
}

#[test]
fn twin_lateness_is_warned_above_five_percent_of_steps() {
    // 1,000 steps of the level, 50 late (5 %): not above the share, no warning.
    assert_eq!(
        twin_lateness_warning((100, 5, 0.01), (1100, 55, 0.21)),
        None
    );
    // 51 late, 0.255 s in all: 5.1 %, 5.0 ms on average.
    let w = twin_lateness_warning((100, 5, 0.01), (1100, 56, 0.265)).unwrap();
    assert!(
        w.contains(
            "delivered 51 of its 1000 steps (5 %) more than 2 ms late, by 5.0 ms on average"
        ),
        "{w}"
    );
    assert_eq!(twin_lateness_warning((7, 0, 0.0), (7, 0, 0.0)), None);
}

#[test]
fn a_warning_repeated_across_levels_reads_once_with_its_levels() {
    let a = "answers outlast the window".to_string();
    let b = "the twin ran 7 % behind".to_string();
    let levels = [
        (16.0, vec![a.clone(), b.clone()]),
        (64.0, vec![a.clone()]),
        (256.0, vec![]),
        (112.0, vec![a.clone(), a.clone()]),
    ];
    let out = group_warnings(
        "chat",
        "concurrent",
        levels.iter().map(|(l, w)| (*l, w.as_slice())),
    );
    assert_eq!(
        out,
        vec![
            "chat at 16, 64 and 112 concurrent: answers outlast the window".to_string(),
            "chat at 16 concurrent: the twin ran 7 % behind".to_string(),
        ]
    );
    let two = [(0.5, vec![b.clone()]), (2.0, vec![b.clone()])];
    assert_eq!(
        group_warnings("x", "req/s", two.iter().map(|(l, w)| (*l, w.as_slice()))),
        vec!["x at 0.5 and 2 req/s: the twin ran 7 % behind".to_string()]
    );
}
