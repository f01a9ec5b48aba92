//! A level on the virtual clock ends by its window, whatever the engine does between requests.
//!
//! Regression: without an early-stop check (as `plan --calibrate-from` simulates its levels), the
//! next check time stayed an event for ever; an engine that went idle exactly then (one user
//! waiting out the frontend delay, the client's gap after an answer) waited at it until the
//! level was aborted as "no progress", and the fit took the aborted level's few requests as
//! figures. Every combination of scheduling and frontend model that leaves the engine idle
//! between requests is run here, with and without a check.

use headroom_load::arrivals::LevelMode;
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::RunOptions;
use headroom_load::workload::Workload;
use headroom_plan::twin::TwinLevels;
use headroom_sim::{EngineConfig, SimSpec};
use headroom_sweep::controller::{LevelMeasurer, LevelRequest, phases};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const WORKLOAD: &str = "\
load: {mode: concurrency}
classes:
  - name: chat
    endpoint: completions
    prompt_tokens: {fixed: 128}
    max_tokens: {fixed: 16}
    ignore_eos: true
";

fn cfg(async_scheduling: bool, frontend_cpu_queue: bool) -> EngineConfig {
    let mut c = SimSpec {
        gpu: "a10g".into(),
        model: "qwen2.5-0.5b".into(),
        max_model_len: Some(4096),
        frontend_cpu_queue,
        ..SimSpec::default()
    }
    .resolve()
    .unwrap();
    c.async_scheduling = async_scheduling;
    c
}

#[test]
fn an_idle_engine_between_requests_never_stalls_a_level() {
    let w = Workload::parse(WORKLOAD, Path::new("w.yaml"), Path::new(".")).unwrap();
    let plans = ClassPlan::from_workload(&w, None).unwrap();
    let phase = phases(&plans).into_iter().next().unwrap();
    let measure = Duration::from_secs(20);
    for async_scheduling in [true, false] {
        for fq in [false, true] {
            for with_check in [false, true] {
                let opts = RunOptions {
                    drain_max: Duration::from_secs(10),
                    // A check that never closes the window early.
                    check: with_check
                        .then(|| Arc::new(|_: &_, _| false) as headroom_load::runner::LevelCheck),
                    ..RunOptions::default()
                };
                let m = TwinLevels::new(cfg(async_scheduling, fq), 0.0, Duration::from_secs(5))
                    .measure(LevelRequest {
                        phase: &phase,
                        mode: LevelMode::Concurrency(1),
                        warmup: Duration::from_secs(2),
                        measure,
                        seed: 7,
                        opts: &opts,
                    });
                let case = format!("async {async_scheduling}, cpu queue {fq}, check {with_check}");
                assert_eq!(m.rec.aborted, None, "{case}");
                // One user, one request at a time: a 16-token answer takes well under 0.5 s on
                // an A10G, so a 20 s window holds dozens.
                assert!(
                    (m.rec.window_s - measure.as_secs_f64()).abs() < 1.0,
                    "{case}: window {} s",
                    m.rec.window_s
                );
                assert!(m.rec.started > 40, "{case}: {} requests", m.rec.started);
            }
        }
    }
}
