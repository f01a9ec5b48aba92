//! The twin under load against published vLLM sweeps its constants were not fitted to, and the
//! bands `headroom plan` prints ([`SIGNAL_ERRORS`]) must hold what they show.
//!
//! Each level runs as `headroom plan` runs it (closed loop on the virtual clock, fixed lengths,
//! `ignore_eos`, vLLM's default scheduler limits). Sources (figures copied as published; the
//! workloads are `vllm bench serve --dataset-name random … --ignore-eos --max-concurrency c`):
//!
//! - **L4 + Qwen2.5-0.5B-Instruct**, vLLM 0.23.0, GKE g2-standard-4, `--gpu-memory-utilization
//!   0.6 --max-model-len 8192`, 256 in / 128 out, medians (<https://ai.wmx.dev/benchmarks>). The
//!   L4 preset's MBU and frontend time come from its concurrency-1 row; the rows above it are
//!   held out.
//! - **A100 80GB PCIe + Qwen2.5-7B-Instruct**, vLLM 0.19.0, fp16, `--gpu-memory-utilization 0.75
//!   --max-model-len 4096`, 512 in / 256 out at 8 concurrent, TP 1 and TP 2 over PCIe without
//!   NVLink (topology `SYS`); the two clean repeats of each (GitHub
//!   `cssnoeasy/a100-vllm-benchmark-blog`, `docs/reports/a100-tp1-vs-tp2-formal-baseline.md` at
//!   `e4226b0`). Its TPOT is published as p99 only; with fixed lengths it is within a few
//!   percent of the median. Nothing of the `a100-80gb-pcie` preset was fitted to it.
//!
//! A second test holds the L4 sweep to the calibrated twin: `plan --calibrate-from`'s fit on
//! the published c = 1, 2 and 4 rows alone, then c = 8, 16 and 32 (held out) predicted within the
//! issue's 20 %, TTFT included.
//!
//! `cargo test -p headroom-plan --test published_under_load -- --nocapture` prints the tables.

use headroom_core::LatencySignal;
use headroom_load::arrivals::LevelMode;
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::RunOptions;
use headroom_load::workload::Workload;
use headroom_plan::bounds::{CALIBRATED_HELD_OUT, SIGNAL_ERRORS, SignalError};
use headroom_plan::calibrate::{FitOptions, Param, RunData, TargetLevel, fit};
use headroom_plan::twin::TwinLevels;
use headroom_plan::worst::ErrorEdge;
use headroom_sim::SimSpec;
use headroom_sweep::controller::{LevelMeasurer, LevelRequest, phases};
use std::path::Path;
use std::time::Duration;

/// One published level: concurrency and figures (ms, tokens/s); `None` where not published.
struct Row {
    c: u32,
    ttft_p50_ms: f64,
    itl_ms: Option<f64>,
    tpot_ms: Option<f64>,
    out_tok_s: Option<f64>,
    req_s: Option<f64>,
}

/// What the twin read at one level.
struct Twin {
    ttft_p50_ms: f64,
    itl_p50_ms: f64,
    tpot_p50_ms: f64,
    out_tok_s: f64,
    req_s: f64,
}

/// `vllm bench serve --dataset-name random --ignore-eos` as a workload of one class.
fn workload(prompt: u32, output: u32) -> Workload {
    let w = format!(
        "warmup: 20s\nmeasure: 120s\nload: {{mode: concurrency}}\nclasses:\n  - name: random\n    \
         endpoint: completions\n    prompt_tokens: {{fixed: {prompt}}}\n    max_tokens: {{fixed: {output}}}\n    \
         ignore_eos: true\n"
    );
    Workload::parse(&w, Path::new("w.yaml"), Path::new(".")).unwrap()
}

fn run(spec: SimSpec, prompt: u32, output: u32, c: u32) -> Twin {
    run_cfg(spec.resolve().unwrap(), prompt, output, c)
}

fn run_cfg(cfg: headroom_sim::EngineConfig, prompt: u32, output: u32, c: u32) -> Twin {
    let w = workload(prompt, output);
    let plans = ClassPlan::from_workload(&w, None).unwrap();
    let phase = phases(&plans).into_iter().next().unwrap();
    let opts = RunOptions {
        drain_max: Duration::from_secs(60),
        ..RunOptions::default()
    };
    let m = TwinLevels::new(cfg, 0.0, Duration::from_secs(60)).measure(LevelRequest {
        phase: &phase,
        mode: LevelMode::Concurrency(c),
        warmup: Duration::from_secs(20),
        measure: Duration::from_secs(120),
        seed: 42,
        opts: &opts,
    });
    assert_eq!(m.rec.aborted, None);
    let t = m.rec.total();
    let ms = |s: LatencySignal| t.summary(s).p50_s * 1e3;
    let ok: u64 = t
        .outcomes
        .iter()
        .filter(|(o, _)| o.is_success())
        .map(|(_, n)| n)
        .sum();
    Twin {
        ttft_p50_ms: ms(LatencySignal::Ttft),
        itl_p50_ms: ms(LatencySignal::Itl),
        tpot_p50_ms: ms(LatencySignal::Tpot),
        out_tok_s: t.tokens.output_realised as f64 / m.rec.window_s,
        req_s: ok as f64 / m.rec.window_s,
    }
}

/// The band `plan` prints for `signal`, of `bands`.
fn band(bands: &[SignalError], signal: &str) -> (f64, f64) {
    let e = bands
        .iter()
        .find(|e| e.signal == signal)
        .expect("a band per signal");
    (e.low, e.high)
}

/// Checks `twin` against `published`, prints the line, and returns the failures.
fn check(what: &str, signal: &str, twin: f64, published: f64, out: &mut Vec<String>) {
    check_in(&SIGNAL_ERRORS, what, signal, twin, published, out)
}

/// [`check`] against `bands`.
fn check_in(
    bands: &[SignalError],
    what: &str,
    signal: &str,
    twin: f64,
    published: f64,
    out: &mut Vec<String>,
) {
    let err = twin / published - 1.0;
    let (lo, hi) = band(bands, signal);
    // A hundredth of slack: the bands are stated to the percent.
    let inside = err >= lo - 0.01 && err <= hi + 0.01;
    println!(
        "{what:<40} twin {twin:>9.2}  published {published:>9.2}  error {:+6.1} %  band {:+.0} … {:+.0} %{}",
        err * 100.0,
        lo * 100.0,
        hi * 100.0,
        if inside { "" } else { "  OUTSIDE" }
    );
    if !inside {
        out.push(format!("{what}: {:+.1} %", err * 100.0));
    }
}

fn compare(
    name: &str,
    spec: &SimSpec,
    prompt: u32,
    output: u32,
    rows: &[Row],
    out: &mut Vec<String>,
) -> Vec<f64> {
    let mut ttft = Vec::new();
    for r in rows {
        let t = run(spec.clone(), prompt, output, r.c);
        ttft.push(t.ttft_p50_ms);
        let at = |f: &str| format!("{name} c={} {f}", r.c);
        check(
            &at("TTFT p50 (ms)"),
            "ttft",
            t.ttft_p50_ms,
            r.ttft_p50_ms,
            out,
        );
        if let Some(v) = r.itl_ms {
            check(&at("ITL p50 (ms)"), "itl", t.itl_p50_ms, v, out);
        }
        if let Some(v) = r.tpot_ms {
            check(&at("TPOT p50 vs p99 (ms)"), "itl", t.tpot_p50_ms, v, out);
        }
        if let Some(v) = r.out_tok_s {
            check(&at("output tok/s"), "throughput", t.out_tok_s, v, out);
        }
        if let Some(v) = r.req_s {
            check(&at("requests/s"), "throughput", t.req_s, v, out);
        }
    }
    ttft
}

fn l4() -> SimSpec {
    SimSpec {
        gpu: "l4".into(),
        model: "qwen2.5-0.5b".into(),
        gpu_memory_utilization: 0.6,
        max_model_len: Some(8192),
        ..SimSpec::default()
    }
}

/// The L4 sweep's rows (ai.wmx.dev, medians).
#[rustfmt::skip]
const L4_ROWS: [Row; 6] = [
    Row { c: 1, ttft_p50_ms: 27.0, itl_ms: Some(5.1), tpot_ms: None, out_tok_s: Some(168.0), req_s: None },
    Row { c: 2, ttft_p50_ms: 37.8, itl_ms: Some(5.2), tpot_ms: None, out_tok_s: Some(367.0), req_s: None },
    Row { c: 4, ttft_p50_ms: 50.1, itl_ms: Some(5.3), tpot_ms: None, out_tok_s: Some(698.0), req_s: None },
    Row { c: 8, ttft_p50_ms: 60.9, itl_ms: Some(5.5), tpot_ms: None, out_tok_s: Some(1312.0), req_s: None },
    Row { c: 16, ttft_p50_ms: 103.8, itl_ms: Some(6.0), tpot_ms: None, out_tok_s: Some(2277.0), req_s: None },
    Row { c: 32, ttft_p50_ms: 135.3, itl_ms: Some(7.1), tpot_ms: None, out_tok_s: Some(3773.0), req_s: None },
];

#[test]
fn calibrated_on_the_l4_sweeps_low_levels_the_twin_predicts_its_high_levels_within_20_percent() {
    let w = workload(256, 128);
    let fitted_rows = &L4_ROWS[..3];
    let data = RunData {
        dir: "ai.wmx.dev L4 sweep, c = 1, 2, 4".into(),
        plans: ClassPlan::from_workload(&w, None).unwrap(),
        load: w.spec.load.clone(),
        warmup: w.spec.warmup,
        levels: fitted_rows
            .iter()
            .map(|r| TargetLevel {
                phase: "random".into(),
                load: f64::from(r.c),
                window_s: 120.0,
                figures: [
                    ("ttft_p50_s", r.ttft_p50_ms * 1e-3),
                    ("itl_p50_s", r.itl_ms.unwrap() * 1e-3),
                    ("output_tokens_per_s", r.out_tok_s.unwrap()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                kv_usage_mean: None,
            })
            .collect(),
        num_gpu_blocks: None,
        block_size: 16,
        gpu_model_name: Some("NVIDIA L4".into()),
    };
    let base = l4().resolve().unwrap();
    // Bounded by evaluations, not by wall time, so that the fit is the same on any machine.
    let opts = FitOptions {
        measure_max: Duration::from_secs(60),
        budget: Duration::from_secs(900),
        max_evals: 400,
        ..FitOptions::default()
    };
    let cal = fit(&base, &data, &opts);
    println!("{}", cal.table());
    let load = cal.value(Param::FrontendLoadMs).unwrap();
    // The published TTFT grows by ~29 ms per 1,000 tokens/s over c = 1..4 (27 → 50 ms while the
    // rate goes 168 → 698 tokens/s, less the engine's own ~6 ms).
    assert!(
        (5.0..80.0).contains(&load),
        "frontend_load_ms {load}: {}",
        cal.table()
    );
    let mut cfg = base.clone();
    cal.apply(&base, &mut cfg);
    let mut outside = Vec::new();
    let mut unbanded = Vec::new();
    let mut ttft = Vec::new();
    for (i, r) in L4_ROWS.iter().enumerate() {
        let t = run_cfg(cfg.clone(), 256, 128, r.c);
        ttft.push(t.ttft_p50_ms);
        if i < fitted_rows.len() {
            continue;
        }
        for (what, signal, twin, published) in [
            ("TTFT p50 (ms)", "ttft", t.ttft_p50_ms, r.ttft_p50_ms),
            ("ITL p50 (ms)", "itl", t.itl_p50_ms, r.itl_ms.unwrap()),
            (
                "output tok/s",
                "throughput",
                t.out_tok_s,
                r.out_tok_s.unwrap(),
            ),
        ] {
            let err = twin / published - 1.0;
            check_in(
                &CALIBRATED_HELD_OUT,
                &format!("held out L4 c={} {what}", r.c),
                signal,
                twin,
                published,
                &mut unbanded,
            );
            if err.abs() > 0.20 {
                outside.push(format!("c={} {what}: {:+.1} %", r.c, err * 100.0));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "held-out levels off by more than 20 %: {outside:?}"
    );
    assert!(
        unbanded.is_empty(),
        "held-out levels outside CALIBRATED_HELD_OUT, the band a calibrated plan's worst case takes: {unbanded:?}"
    );
    let edge = ErrorEdge::of(Some(&cal.bounds("l4")));
    let close = worst_case_brackets_the_published_capacity("calibrated on c = 1-4", &ttft, edge);
    // Calibrated, the capacity is the real one and the worst case at most one level below it.
    assert!(close.is_empty(), "{close:?}");
}

/// Highest concurrency of `L4_ROWS` whose TTFT p50 (`ttft_ms`, one per row) times `factor`
/// stays under `threshold_ms`, every lower one passing too (`0`: none passes).
fn capacity(ttft_ms: &[f64], factor: f64, threshold_ms: f64) -> u32 {
    L4_ROWS
        .iter()
        .zip(ttft_ms)
        // As `plan` judges it: a figure at the threshold meets it.
        .take_while(|(_, t)| *t * factor <= threshold_ms)
        .last()
        .map_or(0, |(r, _)| r.c)
}

/// For SLOs of TTFT p50 under each threshold, `plan`'s worst case (the twin's TTFT at `edge`)
/// never claims more than the real server sustained: the capacity a review can defend. Returns
/// the thresholds where the twin's capacity is not the real one or the worst case lies more than
/// one level below it.
fn worst_case_brackets_the_published_capacity(
    what: &str,
    twin_ttft_ms: &[f64],
    edge: ErrorEdge,
) -> Vec<String> {
    let mut far = Vec::new();
    let published: Vec<f64> = L4_ROWS.iter().map(|r| r.ttft_p50_ms).collect();
    let mut over = Vec::new();
    for thr in [30.0, 40.0, 55.0, 65.0, 80.0, 110.0, 150.0] {
        let real = capacity(&published, 1.0, thr);
        let twin = capacity(twin_ttft_ms, 1.0, thr);
        let worst = capacity(twin_ttft_ms, edge.ttft, thr);
        println!(
            "L4 {what}, TTFT p50 < {thr} ms: published capacity {real}, twin {twin}, worst case {worst} (TTFT ×{:.2})",
            edge.ttft
        );
        if worst > real {
            over.push(format!("< {thr} ms: worst case {worst} > published {real}"));
        }
        if twin != real || worst < real / 2 {
            far.push(format!(
                "< {thr} ms: twin {twin}, worst case {worst}, published {real}"
            ));
        }
    }
    assert!(
        over.is_empty(),
        "{what}: the worst case claims more than the real server sustained: {over:?}"
    );
    far
}

#[test]
fn published_sweeps_under_load_fall_inside_the_bands_plan_prints() {
    let mut outside = Vec::new();
    let ttft = compare("L4 0.5B", &l4(), 256, 128, &L4_ROWS, &mut outside);
    let _ = worst_case_brackets_the_published_capacity("presets", &ttft, ErrorEdge::of(None));
    for (tp, ttft, tpot, req_s) in [
        (1, [68.74, 75.91], [11.33, 11.34], [2.63, 2.63]),
        (2, [53.87, 54.43], [8.10, 8.09], [3.65, 3.66]),
    ] {
        let spec = SimSpec {
            gpu: "a100-80gb-pcie".into(),
            model: "qwen2.5-7b".into(),
            tensor_parallel: tp,
            gpu_memory_utilization: 0.75,
            max_model_len: Some(4096),
            ..SimSpec::default()
        };
        let mean = |v: [f64; 2]| (v[0] + v[1]) / 2.0;
        let rows = [Row {
            c: 8,
            ttft_p50_ms: mean(ttft),
            itl_ms: None,
            tpot_ms: Some(mean(tpot)),
            out_tok_s: None,
            req_s: Some(mean(req_s)),
        }];
        let _ = compare(
            &format!("A100 PCIe 7B TP{tp}"),
            &spec,
            512,
            256,
            &rows,
            &mut outside,
        );
    }
    assert!(
        outside.is_empty(),
        "figures outside the band plan prints: {outside:?}"
    );
}
