//! A planned level is what a wall-clock level of the same twin measures: the same workload at
//! the same concurrency, once through the HTTP load generator against `headroom sim` served on
//! loopback and once on the virtual clock, give the same ITL and throughput and a TTFT that
//! differs by no more than what loopback HTTP and the host's scheduling add.

use headroom_core::LatencySignal;
use headroom_load::arrivals::LevelMode;
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::{LevelSpec, RunOptions, run_level_with};
use headroom_load::workload::Workload;
use headroom_plan::twin::TwinLevels;
use headroom_sweep::controller::{LevelMeasurer, LevelRequest, Phase};
use std::path::Path;
use std::time::Duration;

const WORKLOAD: &str = "\
load: {mode: concurrency}
classes:
  - name: chat
    endpoint: completions
    prompt_tokens: {uniform: {min: 200, max: 400}}
    max_tokens: {fixed: 96}
    ignore_eos: true
";

fn p50_ms(rec: &headroom_load::recorder::LevelRecording, s: LatencySignal) -> f64 {
    rec.classes[0].percentile_ns(s, 50.0).unwrap() as f64 / 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_level_measures_what_the_http_level_of_the_same_twin_does() {
    let spec = headroom_sim::SimSpec::default();
    let cfg = spec.resolve().unwrap();
    let w = Workload::parse(WORKLOAD, Path::new("w.yaml"), Path::new(".")).unwrap();
    let plans = ClassPlan::from_workload(&w, None).unwrap();
    let phase = Phase {
        name: "chat".into(),
        plans: plans.clone(),
    };
    let (warmup, measure) = (Duration::from_secs(2), Duration::from_secs(8));
    let opts = RunOptions {
        drain_max: Duration::from_secs(5),
        ..RunOptions::default()
    };
    let mode = LevelMode::Concurrency(16);

    let server = headroom_sim::server::serve(headroom_sim::server::ServerConfig {
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        dcgm_port: Some(0),
        spec,
        faults: Default::default(),
        api_key: None,
        first_chunk_probe: None,
    })
    .await
    .unwrap();
    let target = Target::new(
        &format!("http://{}", server.api_addr),
        None,
        Some(&cfg.served_model_name),
    )
    .unwrap();
    let http = run_level_with(
        &target,
        &plans,
        LevelSpec {
            mode,
            warmup,
            measure,
            seed: 7,
        },
        CancellationFlag::new(),
        &opts,
    )
    .await;
    server.shutdown().await;

    let twin = TwinLevels::new(cfg, 0.0, Duration::from_secs(2));
    let virt = twin
        .measure(LevelRequest {
            phase: &phase,
            mode,
            warmup,
            measure,
            seed: 7,
            opts: &opts,
        })
        .rec;

    let (hi, vi) = (
        p50_ms(&http, LatencySignal::Itl),
        p50_ms(&virt, LatencySignal::Itl),
    );
    let (ht, vt) = (
        p50_ms(&http, LatencySignal::Ttft),
        p50_ms(&virt, LatencySignal::Ttft),
    );
    let tput = |r: &headroom_load::recorder::LevelRecording| {
        r.classes[0].tokens.output_realised as f64 / r.window_s
    };
    eprintln!(
        "ITL p50 http {hi:.2} ms virtual {vi:.2} ms; TTFT p50 http {ht:.2} ms virtual {vt:.2} ms; output tok/s http {:.0} virtual {:.0}",
        tput(&http),
        tput(&virt)
    );
    assert!((vi / hi - 1.0).abs() < 0.10, "ITL p50 {hi} vs {vi}");
    // Loopback HTTP, SSE parsing and a busy host only add time: the virtual TTFT is not above
    // the wall-clock one, and not far below it.
    assert!(vt <= ht * 1.05 && vt >= ht * 0.6, "TTFT p50 {ht} vs {vt}");
    assert!((tput(&virt) / tput(&http) - 1.0).abs() < 0.15);
    assert_eq!(
        virt.classes[0].tokens.prompt_requested,
        virt.classes[0].tokens.prompt_realised
    );
}
