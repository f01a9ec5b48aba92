//! A calibration recovers the constants of a server it knows nothing of: a sweep of a twin
//! whose MBU is 0.8× its preset's and whose per-sequence overhead is 2× is written to a run
//! directory, the fit starts from the unaltered preset, and it must find the altered constants
//! again and predict held-out levels (another concurrency, another --max-num-seqs) of the altered
//! twin.

use headroom_core::LatencySignal;
use headroom_core::slo::SloFile;
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::RunOptions;
use headroom_load::workload::Workload;
use headroom_plan::calibrate::{FitOptions, Param, fit, read_run};
use headroom_plan::twin::TwinLevels;
use headroom_sim::{EngineConfig, SimSpec};
use headroom_sweep::controller::{
    LevelMeasurer, LevelRequest, Quiet, Sweep, SweepSettings, phases,
};
use headroom_sweep::search::LevelPlan;
use std::path::Path;
use std::time::Duration;

/// Fixed lengths, as a calibration sweep should use.
const WORKLOAD: &str = "\
warmup: 5s
measure: 30s
load: {mode: concurrency}
classes:
  - name: chat
    endpoint: completions
    prompt_tokens: {fixed: 400}
    max_tokens: {fixed: 128}
    ignore_eos: true
";

const SLO: &str = "\
objectives:
  \"*\":
    ttft: {p95: 60s}
";

fn base() -> EngineConfig {
    SimSpec {
        gpu: "a10g".into(),
        model: "qwen2.5-0.5b".into(),
        max_model_len: Some(4096),
        enable_per_request_metrics: true,
        ..SimSpec::default()
    }
    .resolve()
    .unwrap()
}

fn altered() -> EngineConfig {
    let mut c = base();
    c.gpu.mbu *= 0.8;
    c.gpu.t_seq_us *= 2.0;
    c
}

/// ITL and TTFT medians (s) of one level of `cfg`, on the virtual clock.
fn level(cfg: &EngineConfig, class: &str, c: u32) -> (f64, f64) {
    let w = Workload::parse(WORKLOAD, Path::new("w.yaml"), Path::new(".")).unwrap();
    let plans = ClassPlan::from_workload(&w, None).unwrap();
    let phase = phases(&plans)
        .into_iter()
        .find(|p| p.name == class)
        .unwrap();
    let opts = RunOptions {
        drain_max: Duration::from_secs(60),
        ..RunOptions::default()
    };
    let m = TwinLevels::new(cfg.clone(), 0.0, Duration::from_secs(3600)).measure(LevelRequest {
        phase: &phase,
        mode: headroom_load::arrivals::LevelMode::Concurrency(c),
        warmup: Duration::from_secs(5),
        measure: Duration::from_secs(40),
        seed: 99,
        opts: &opts,
    });
    let t = m.rec.total();
    (
        t.summary(LatencySignal::Itl).p50_s,
        t.summary(LatencySignal::Ttft).p50_s,
    )
}

/// Sweeps `cfg` at `levels` into `dir` as `headroom plan` would (results, workload, manifest).
async fn sweep_into(cfg: &EngineConfig, levels: &[f64], dir: &Path) {
    let w = Workload::parse(WORKLOAD, Path::new("w.yaml"), Path::new(".")).unwrap();
    let plans = ClassPlan::from_workload(&w, None).unwrap();
    let slo = SloFile::parse(SLO, Path::new("slo.yaml")).unwrap();
    let settings = SweepSettings {
        mode: w.spec.load.mode,
        arrival: w.spec.load.arrival,
        max_concurrency: None,
        plan: LevelPlan::Fixed(levels.to_vec()),
        warmup: w.spec.warmup,
        measure: w.spec.measure,
        measure_max: w.spec.measure,
        drain_max: Duration::from_secs(60),
        metrics_url: None,
        dcgm_url: None,
        scrape_interval: Duration::from_secs(10),
        run_dir: dir.to_path_buf(),
        seed: 3,
        only_phase: None,
        repeat: 1,
    };
    let twin = TwinLevels::new(cfg.clone(), 1.0e9, Duration::from_secs(10));
    let target = Target::new("http://127.0.0.1:1", None, Some("m")).unwrap();
    let ok = |_: &headroom_core::run::RunResult| Ok(());
    let result = Sweep {
        target: &target,
        plans: &plans,
        slo: &slo,
        settings: &settings,
        cancel: CancellationFlag::new(),
        progress: &Quiet,
        on_result: &ok,
        clock_lag: None,
        measurer: Some(&twin),
    }
    .run()
    .await;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_vec(&result).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("workload.yaml"), WORKLOAD).unwrap();
    let manifest = serde_json::json!({
        "engine_config": {"cache_config": {"num_gpu_blocks": cfg.num_gpu_blocks.to_string()}}
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fit_recovers_altered_constants_and_predicts_held_out_levels() {
    let truth = altered();
    let dir = tempfile::tempdir().unwrap();
    sweep_into(&truth, &[1.0, 32.0, 128.0], dir.path()).await;
    let data = read_run(dir.path()).unwrap();
    assert_eq!(data.num_gpu_blocks, Some(truth.num_gpu_blocks));
    assert_eq!(data.levels.len(), 3, "{:?}", data.levels);

    let b = base();
    let opts = FitOptions {
        measure_max: Duration::from_secs(30),
        budget: Duration::from_secs(400),
        max_evals: 200,
        ..FitOptions::default()
    };
    let cal = fit(&b, &data, &opts);
    eprintln!("{}", cal.table());
    assert!(cal.cost_fitted < cal.cost_preset / 10.0, "{}", cal.table());
    let rel = |p: Param, want: f64| (cal.value(p).unwrap() / want - 1.0).abs();
    // MBU sets every decode step: recovered within 5 %.
    assert!(rel(Param::Mbu, truth.gpu.mbu) < 0.05, "{}", cal.table());
    // The per-sequence overhead trades off against the per-step one (both add to every step;
    // only their slope in concurrency tells them apart, and a TTFT or queue figure's seed noise
    // of 10-30 % between two runs of the same server pulls on it): within 35 %.
    assert!(
        rel(Param::TSeqUs, truth.gpu.t_seq_us) < 0.35,
        "{}",
        cal.table()
    );
    let mbu = cal
        .constants
        .iter()
        .find(|c| c.param == Param::Mbu)
        .unwrap();
    assert!(mbu.constrained, "{}", cal.table());
    // One prompt length: nothing separates the KV read factor from the per-sequence cost, so
    // it stays exactly at the preset.
    assert_eq!(cal.value(Param::KKv), Some(b.gpu.k_kv), "{}", cal.table());

    // Held out: another concurrency, and another --max-num-seqs (requests queue at 24).
    let mut fitted = b.clone();
    cal.apply(&b, &mut fitted);
    let mut truth_small = truth.clone();
    truth_small.max_num_seqs = 32;
    let mut fitted_small = fitted.clone();
    fitted_small.max_num_seqs = 32;
    for (what, t, f, class, c) in [
        ("c = 64", &truth, &fitted, "chat", 64),
        (
            "max-num-seqs 32, c = 128",
            &truth_small,
            &fitted_small,
            "chat",
            128,
        ),
    ] {
        let (ti, tt) = level(t, class, c);
        let (fi, ft) = level(f, class, c);
        eprintln!(
            "held out {what} {class}: ITL {:.2} ms vs {:.2} ms ({:+.1} %), TTFT {:.1} ms vs {:.1} ms ({:+.1} %)",
            fi * 1e3,
            ti * 1e3,
            (fi / ti - 1.0) * 100.0,
            ft * 1e3,
            tt * 1e3,
            (ft / tt - 1.0) * 100.0
        );
        assert!((fi / ti - 1.0).abs() < 0.05, "{what}: ITL {fi} vs {ti}");
        assert!((ft / tt - 1.0).abs() < 0.10, "{what}: TTFT {ft} vs {tt}");
    }
}
