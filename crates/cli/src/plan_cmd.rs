//! `headroom plan`: the sweep, run on the engine twin's virtual clock. Wiring only: the
//! workload, the SLO and the twin's configuration are resolved here; the levels are searched,
//! measured ([`headroom_plan::twin::TwinLevels`]), judged and written by `headroom_sweep`, exactly
//! as `headroom sweep` does, so `compare` and `report` read a plan's run directory as a sweep's.

use crate::duration_arg::duration_arg;
use crate::sweep_cmd::{
    FileLog, Specs, default_run_dir, flag_window, fmt_secs, read_specs, redact_argv,
};
use anyhow::{Context, Result, bail};
use clap::Args;
use headroom_core::run::{LevelResult, LoadMode, Manifest, PhaseResult, RunResult};
use headroom_core::slo::{SloFile, fmt_num, parse_ratio};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::workload::{Levels, Workload, check_level};
use headroom_plan::twin::TwinLevels;
use headroom_plan::worst::{ErrorEdge, WorstCase, worst_case};
use headroom_sweep::controller::{Progress, Sweep, SweepSettings};
use headroom_sweep::run_dir::{CALIBRATION, PLAN_SUMMARY, RunDir};
use headroom_sweep::search::{AutoBracket, LevelPlan};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Arguments of `headroom plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// GPU preset (a10g, l4, l40s, a100-40gb, a100-80gb, a100-80gb-pcie, h100-sxm, h100-pcie, h200, mi300x, …).
    #[arg(long, default_value = "a10g")]
    pub gpu: String,
    /// Model preset (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b, llama-3.1-8b,
    /// llama-3.1-70b, mistral-7b).
    #[arg(long, default_value = "qwen2.5-3b")]
    pub model: String,
    /// Weight precision: bf16, fp8 or int4.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Tensor-parallel degree: 1, 2, 4 or 8.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// vLLM --max-num-seqs (default: vLLM's for the GPU).
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// vLLM --max-num-batched-tokens (default: vLLM's for the GPU).
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM --max-model-len (default: the model's context window).
    #[arg(long)]
    pub max_model_len: Option<u32>,
    /// vLLM --gpu-memory-utilization (default 0.9).
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,
    /// Model the frontend as one CPU queue (per-request and per-chunk service times) and a
    /// client gap between requests; off by default (not validated, see the caveats).
    #[arg(long)]
    pub frontend_cpu_queue: bool,
    /// Plan these GPUs side by side (comma-separated presets): one plan each, in
    /// OUT/<gpu>/, and one table.
    #[arg(long, value_delimiter = ',', value_name = "GPUS")]
    pub compare_gpus: Option<Vec<String>>,
    /// Peak load to serve: requests per second (`40req/s`) or concurrent requests (`64`).
    /// Prints the replicas needed with --headroom kept.
    #[arg(long, value_name = "LOAD")]
    pub peak: Option<String>,
    /// Share of each replica's capacity kept free at the peak (default 20%).
    #[arg(long, default_value = "20%")]
    pub headroom: String,
    /// SLO file (default: the built-in claims-assistant SLO).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Workload file (default: the built-in claims-assistant workload).
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// Levels (comma-separated concurrencies or req/s); default automatic.
    #[arg(long, value_delimiter = ',')]
    pub levels: Option<Vec<f64>>,
    /// First level of the automatic search (default 1 concurrent or 0.5 req/s).
    #[arg(long)]
    pub start: Option<f64>,
    /// Highest level the automatic search may try.
    #[arg(long)]
    pub max_load: Option<f64>,
    /// Bisection stops when fail − pass ≤ this share of the pass level (default 5%).
    #[arg(long, default_value = "5%")]
    pub resolution: String,
    /// Simulated warm-up per level (default 60s).
    #[arg(long, value_parser = duration_arg, default_value = "60")]
    pub warmup: Duration,
    /// Simulated measurement window per level (default 5m, about 1,300 requests at the
    /// default workload's capacity; extended up to 4× while a percentile is undecided).
    #[arg(long, value_parser = duration_arg, default_value = "300")]
    pub measure: Duration,
    /// Sweep only this phase: one class of the workload, or `mix`.
    #[arg(long, value_name = "NAME")]
    pub class: Option<String>,
    /// Seed of the twin, arrivals, prompts and the mix (default 0: a plan is deterministic).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run directory (default: runs/<UTC time>; with --compare-gpus, one subdirectory per GPU).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fit the twin's constants (MBU, MFU, step, per-sequence and per-prefill overheads, KV
    /// read factor, frontend time, KV pool) to a sweep of your server (its run directory) and
    /// plan with them; --gpu, --model, --dtype and --tp describe that server. Writes
    /// calibration.json.
    #[arg(long, value_name = "RUN_DIR")]
    pub calibrate_from: Option<PathBuf>,
    /// The measured server's --max-num-seqs, when the plan's --max-num-seqs is a what-if.
    #[arg(long, value_name = "N")]
    pub measured_max_num_seqs: Option<u32>,
    /// YAML file of extra GPU presets (the schema of crates/sim/presets/gpus.yaml).
    #[arg(long, value_name = "FILE")]
    pub gpu_file: Option<PathBuf>,
    /// YAML file of extra model presets (the schema of crates/sim/presets/models.yaml).
    #[arg(long, value_name = "FILE")]
    pub model_file: Option<PathBuf>,
}

/// A fit to a measured sweep and the configuration it was fitted on.
struct Calibrated {
    cal: headroom_plan::calibrate::Calibration,
    base: headroom_sim::EngineConfig,
    /// The run's GPU as its dcgm-exporter named it, when that is not `--gpu`'s.
    other_gpu: Option<String>,
}

/// Shortest measurement window (s) a calibration run's levels should have; shorter ones are
/// fitted with a warning.
const MIN_CALIBRATION_WINDOW_S: f64 = 20.0;

/// Fits the twin to `--calibrate-from`'s run on the plan's base GPU; prints the fit on stderr.
fn calibrate(a: &PlanArgs) -> Result<Option<Calibrated>> {
    let Some(dir) = &a.calibrate_from else {
        return Ok(None);
    };
    let mut spec = twin_spec(a, &a.gpu);
    spec.max_num_seqs = a.measured_max_num_seqs.or(a.max_num_seqs);
    let base = spec
        .resolve()
        .map_err(|e| anyhow::anyhow!("--gpu {} --model {}: {}", a.gpu, a.model, with_flags(&e)))?;
    let data = headroom_plan::calibrate::read_run(dir)
        .map_err(|e| anyhow::anyhow!("--calibrate-from: {e}"))?;
    eprintln!(
        "headroom: fitting the twin to {} levels of {} ...",
        data.levels.len(),
        dir.display()
    );
    let other_gpu = data
        .gpu_model_name
        .clone()
        .filter(|m| !m.eq_ignore_ascii_case(&base.gpu.display_name));
    if let Some(m) = &other_gpu {
        eprintln!(
            "headroom: warning: --calibrate-from {}: its dcgm-exporter names the GPU {m}, --gpu {} is the {}; the fit describes that card as if it were this one",
            dir.display(),
            a.gpu,
            base.gpu.display_name
        );
    }
    // A mean over a few seconds carries the start of the level and a handful of requests.
    if let Some(w) = data
        .levels
        .iter()
        .map(|l| l.window_s)
        .filter(|w| *w < MIN_CALIBRATION_WINDOW_S)
        .reduce(f64::min)
    {
        eprintln!(
            "headroom: warning: --calibrate-from {}: levels measured for as little as {w:.0} s; windows under {MIN_CALIBRATION_WINDOW_S:.0} s make noisy figures to fit (sweep with --measure 30s or more)",
            dir.display()
        );
    }
    let cal = headroom_plan::calibrate::fit(&base, &data, &Default::default());
    eprint!("{}", cal.table());
    Ok(Some(Calibrated {
        cal,
        base,
        other_gpu,
    }))
}

/// Prints one line per finished level (a plan's levels take well under a second each).
struct Lines {
    gpu: String,
}

impl Progress for Lines {
    fn level_start(&self, _: &str, _: f64, _: LoadMode, _: Duration) {}
    fn level_done(&self, phase: &str, l: &LevelResult) {
        eprintln!(
            "  {}{phase}: {} {}: {}",
            if self.gpu.is_empty() {
                String::new()
            } else {
                format!("{}: ", self.gpu)
            },
            fmt_num(l.load),
            l.mode.unit(),
            l.verdict_line()
        );
    }
    fn note(&self, msg: &str) {
        eprintln!("  {msg}");
    }
}

/// The peak to plan replicas for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Peak {
    /// Requests per second.
    Rate(f64),
    /// Concurrent requests.
    Concurrency(f64),
}

fn parse_peak(v: &str) -> Result<Peak> {
    let t = v.trim();
    let (num, rate) = match t.strip_suffix("req/s").or_else(|| t.strip_suffix("rps")) {
        Some(n) => (n.trim(), true),
        None => (t, false),
    };
    let x: f64 = num.parse().map_err(|_| {
        anyhow::anyhow!(
            "--peak {v}: expected requests per second (`40req/s`) or concurrent requests (`64`)"
        )
    })?;
    if !(x.is_finite() && x > 0.0) {
        bail!("--peak {v}: expected a finite load above 0");
    }
    if x > MAX_PEAK {
        bail!(
            "--peak {v}: at most {} (requests per second or concurrent); a larger fleet is several plans",
            fmt_num(MAX_PEAK)
        );
    }
    Ok(if rate {
        Peak::Rate(x)
    } else {
        Peak::Concurrency(x)
    })
}

/// Shortest `--measure` a plan accepts.
const MIN_PLAN_WINDOW: Duration = Duration::from_secs(1);
/// Largest `--peak`: ten million requests per second or concurrent, so replica counts stay
/// exact integers.
const MAX_PEAK: f64 = 1e7;
/// Highest closed-loop concurrency a plan simulates: every user's request waits in the twin's
/// memory, and no preset serves more than a few thousand at once.
const MAX_PLAN_CONCURRENCY: f64 = 65_536.0;
/// Highest open-loop rate a plan simulates (requests per second).
const MAX_PLAN_RATE: f64 = 100_000.0;

/// Everything a plan needs besides the GPU: the parsed spec files and the search.
struct Prepared {
    workload: Workload,
    workload_text: String,
    slo: SloFile,
    slo_text: String,
    plans: Vec<ClassPlan>,
    settings: SweepSettings,
    calibration: Option<Calibrated>,
}

fn prepare(a: &PlanArgs) -> Result<Prepared> {
    let Specs {
        workload,
        workload_text,
        slo,
        slo_text,
    } = read_specs(a.workload.as_deref(), a.slo.as_deref(), a.class.as_deref())?;
    let mode = workload.spec.load.mode;
    let workload_levels = match &workload.spec.load.levels {
        Levels::List(l) => l.clone(),
        Levels::Auto => Vec::new(),
    };
    let given = a
        .levels
        .iter()
        .flatten()
        .map(|l| ("--levels", *l))
        .chain(
            workload_levels
                .iter()
                .map(|l| ("the workload's levels", *l)),
        )
        .chain(a.start.map(|v| ("--start", v)))
        .chain(a.max_load.map(|v| ("--max-load", v)));
    for (flag, v) in given {
        check_level(mode, v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        let cap = match mode {
            LoadMode::Concurrency => MAX_PLAN_CONCURRENCY,
            LoadMode::Rate => MAX_PLAN_RATE,
        };
        if v > cap {
            bail!(
                "{flag}: {} {} is beyond what a plan simulates (at most {} {}): the twin holds every waiting request in memory",
                fmt_num(v),
                mode.unit(),
                fmt_num(cap),
                mode.unit()
            );
        }
    }
    let resolution = parse_ratio(&a.resolution)
        .ok()
        .filter(|x| *x > 0.0 && *x <= 10.0)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--resolution {}: expected a share above 0 and at most 1000% (e.g. 5%)",
                a.resolution
            )
        })?;
    let warmup = flag_window("--warmup", a.warmup.as_secs_f64(), true)?;
    let measure = flag_window("--measure", a.measure.as_secs_f64(), false)?;
    if measure < MIN_PLAN_WINDOW {
        bail!(
            "--measure {}: at least {} s; simulated time is cheap, and a shorter window leaves every level without the samples a verdict needs",
            a.measure.as_secs_f64(),
            MIN_PLAN_WINDOW.as_secs()
        );
    }
    // The twin counts one token per word: the plans' words are exact token counts.
    let plans = ClassPlan::from_workload(&workload, None)?;
    let plan = LevelPlan::resolve(
        a.levels.as_ref(),
        &workload.spec.load.levels,
        mode,
        AutoBracket {
            start: a.start.unwrap_or(match mode {
                LoadMode::Concurrency => 1.0,
                LoadMode::Rate => 0.5,
            }),
            growth: 2.0,
            max: a.max_load.unwrap_or(match mode {
                LoadMode::Concurrency => 4096.0,
                LoadMode::Rate => 2000.0,
            }),
        },
        resolution,
    );
    let settings = SweepSettings {
        mode,
        arrival: workload.spec.load.arrival,
        max_concurrency: workload.spec.load.max_concurrency,
        plan,
        warmup,
        measure,
        measure_max: measure.saturating_mul(4),
        // Virtual time: a drain as long as the longest answer costs nothing.
        drain_max: Duration::from_secs(600),
        metrics_url: None,
        dcgm_url: None,
        scrape_interval: Duration::from_secs(30),
        run_dir: PathBuf::new(),
        seed: a.seed,
        only_phase: a.class.clone(),
        repeat: 1,
    };
    Ok(Prepared {
        workload,
        workload_text,
        slo,
        slo_text,
        plans,
        settings,
        calibration: None,
    })
}

/// The twin's configuration for `gpu`.
fn twin_spec(a: &PlanArgs, gpu: &str) -> headroom_sim::SimSpec {
    let mut spec = headroom_sim::SimSpec {
        gpu: gpu.to_string(),
        model: a.model.clone(),
        dtype: a.dtype.clone(),
        tensor_parallel: a.tp,
        max_model_len: a.max_model_len,
        max_num_seqs: a.max_num_seqs,
        max_num_batched_tokens: a.max_num_batched_tokens,
        enable_per_request_metrics: true,
        frontend_cpu_queue: a.frontend_cpu_queue,
        seed: a.seed,
        custom_gpu_file: a.gpu_file.clone(),
        custom_model_file: a.model_file.clone(),
        ..headroom_sim::SimSpec::default()
    };
    if let Some(u) = a.gpu_memory_utilization {
        spec.gpu_memory_utilization = u;
    }
    spec
}

/// What one GPU's plan found, for the table.
struct Planned {
    gpu: String,
    caveats: Vec<String>,
    /// Where the twin's validated error (or the calibration's residuals) puts each figure at
    /// worst: the table's worst-case columns.
    edge: ErrorEdge,
    /// Per phase of `result`, in its order: the capacity at that edge.
    worst: Vec<WorstCase>,
    dir: PathBuf,
    result: RunResult,
    exit: i32,
}

/// What a calibrated plan changes from the measured server `base`: another card (by preset, or
/// by the run's own dcgm-exporter, `measured_on`), a `--max-num-seqs` other than the
/// `--measured-max-num-seqs`, contexts past the calibrated ones (`longer`). Empty: the measured
/// configuration at other loads. `--dtype`, `--tp` and the other engine flags describe the
/// measured server, so they are never a what-if.
fn what_if(
    a: &PlanArgs,
    base: &headroom_sim::EngineConfig,
    cfg: &headroom_sim::EngineConfig,
    measured_on: Option<&str>,
    longer: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if cfg.gpu_name != base.gpu_name {
        out.push(format!(
            "--gpu {} (measured {})",
            cfg.gpu_name, base.gpu_name
        ));
    }
    if let Some(m) = measured_on {
        out.push(format!("measured on the {m}"));
    }
    if let Some(m) = a.measured_max_num_seqs
        && m != cfg.max_num_seqs
    {
        out.push(format!(
            "--max-num-seqs {} (measured {m})",
            cfg.max_num_seqs
        ));
    }
    if longer {
        out.push("contexts past the calibrated ones".into());
    }
    out
}

/// A configuration error with the flag that sets each field it names (`tensor_parallel` is
/// `--tp`), so the message points at what to change on this command line.
fn with_flags(e: &dyn std::fmt::Display) -> String {
    const FLAGS: [(&str, &str); 6] = [
        ("tensor_parallel", "--tp"),
        ("max_num_seqs", "--max-num-seqs"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("max_model_len", "--max-model-len"),
        ("dtype", "--dtype"),
    ];
    let mut m = e.to_string();
    for (field, flag) in FLAGS {
        m = m.replace(&format!("`{field}`"), &format!("`{field}` ({flag})"));
    }
    m
}

/// Plans one GPU into `dir`.
async fn plan_one(
    a: &PlanArgs,
    p: &Prepared,
    gpu: &str,
    dir: &Path,
    argv: &[String],
    cancel: &CancellationFlag,
    label: bool,
) -> Result<Planned> {
    let spec = twin_spec(a, gpu);
    let mut cfg = spec
        .resolve()
        .map_err(|e| anyhow::anyhow!("--gpu {gpu} --model {}: {}", a.model, with_flags(&e)))?;
    let context = p
        .calibration
        .as_ref()
        .and_then(|c| c.cal.context_caveat(&p.plans));
    let fit = p.calibration.as_ref().map(|c| {
        c.cal.apply(&c.base, &mut cfg);
        let mut b = c.cal.bounds(&cfg.gpu_name);
        b.what_if = what_if(a, &c.base, &cfg, c.other_gpu.as_deref(), context.is_some());
        // A run measured on another card than --gpu's describes that card.
        b.other_card |= c.other_gpu.is_some();
        b
    });
    let edge = ErrorEdge::of(fit.as_ref());
    let mut caveats = headroom_plan::bounds::caveats_with(
        &cfg,
        fit.as_ref(),
        headroom_plan::calibrate::longest_context(&p.plans),
    );
    if let Some(c) = &p.calibration
        && let Some(m) = &c.other_gpu
    {
        caveats.insert(
            0,
            format!(
                "the calibration run was measured on the {m} (its dcgm-exporter), not on the {} given as --gpu: its fitted constants describe the wrong card",
                c.base.gpu.display_name
            ),
        );
    }
    if let Some(c) = context {
        caveats.push(c);
    }
    if let Some(c) =
        headroom_plan::bounds::identical_requests_caveat(&p.plans, p.workload.spec.load.mode)
    {
        caveats.push(c);
    }
    let warnings = p
        .workload
        .check_context(u64::from(cfg.max_model_len))
        .map_err(|e| anyhow::anyhow!("{gpu}: {e}"))?;
    for w in warnings {
        eprintln!("headroom: warning: {gpu}: {w}");
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out: cannot create run directory {}", dir.display()))?;
    let origin = headroom_signals::scrape::unix_now_s();
    // About ten periodic scrapes per window, at least 30 s apart.
    let every = (p.settings.measure / 10).max(Duration::from_secs(30));
    let twin = TwinLevels::new(cfg.clone(), origin, every).with_cancel(cancel.clone());
    let mut settings = p.settings.clone();
    settings.run_dir = dir.to_path_buf();
    let describe = format!(
        "{} + {} {} tp{}",
        gpu,
        a.model,
        cfg.dtype.as_str(),
        cfg.tensor_parallel
    );
    let manifest = Manifest {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: redact_argv(argv),
        started_unix_s: origin,
        target: format!("twin (virtual clock): {describe}"),
        api_key: false,
        model: cfg.served_model_name.clone(),
        models: serde_json::Value::Null,
        server_version: serde_json::Value::Null,
        engine_config: serde_json::json!({
            "engine": "vllm",
            "embedded_twin": {"gpu": gpu, "model": a.model},
            "plan": {
                "virtual_clock": true,
                "gpu": gpu,
                "model": a.model,
                "dtype": cfg.dtype.as_str(),
                "tensor_parallel": cfg.tensor_parallel,
                "max_num_seqs": cfg.max_num_seqs,
                "max_num_batched_tokens": cfg.max_num_batched_tokens,
                "max_model_len": cfg.max_model_len,
                "gpu_memory_utilization": cfg.gpu_memory_utilization,
                "num_gpu_blocks": cfg.num_gpu_blocks,
                "block_size": cfg.block_size,
                "async_scheduling": cfg.async_scheduling,
                "frontend_cpu_queue": cfg.frontend_cpu_queue,
                "caveats": caveats.clone(),
                "calibrated_from": a.calibrate_from,
            },
        }),
        workload: {
            let mut spec = p.workload.spec.clone();
            spec.warmup = settings.warmup;
            spec.measure = settings.measure;
            serde_json::to_value(&spec).unwrap_or_default()
        },
        slo: serde_json::to_value(&p.slo).unwrap_or_default(),
        seed: a.seed,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        metrics_url: None,
        dcgm_url: None,
        prompt_calibration: serde_json::Value::Null,
    };
    let workload_text = crate::workload_as_run::workload_as_run(
        &p.workload_text,
        a.workload
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(".")),
        (p.workload.spec.warmup, p.workload.spec.measure),
        (settings.warmup, settings.measure),
    );
    let run_dir = RunDir::new(dir);
    run_dir
        .write_inputs(&p.slo_text, &workload_text, &manifest)
        .context("cannot write the run directory")?;
    if let Some(c) = &p.calibration {
        run_dir.write(CALIBRATION, &serde_json::to_vec_pretty(&c.cal)?)?;
    }
    let files: Arc<Mutex<FileLog>> = Arc::default();
    let on_result = {
        let dir = dir.to_path_buf();
        let files = files.clone();
        move |r: &RunResult| {
            let got = headroom_report::write_run_files(&dir, r);
            let mut log = files
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            log.record(&got);
            got.map(|_| ()).map_err(|e| e.to_string())
        }
    };
    // Named in results and the manifest only; the measurer answers every level.
    let target = Target::new(
        "http://127.0.0.1:1",
        None,
        Some(cfg.served_model_name.as_str()),
    )?;
    let progress = Lines {
        gpu: if label {
            gpu.to_string()
        } else {
            String::new()
        },
    };
    eprintln!(
        "headroom: planning {describe} on the virtual clock: each level {} warm-up, {} window (simulated); run directory {}",
        fmt_secs(settings.warmup),
        fmt_secs(settings.measure),
        dir.display()
    );
    let sweep = Sweep {
        target: &target,
        plans: &p.plans,
        slo: &p.slo,
        settings: &settings,
        cancel: cancel.clone(),
        progress: &progress,
        on_result: &on_result,
        clock_lag: None,
        measurer: Some(&twin),
    };
    let result = sweep.run().await;
    let log = files
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    eprintln!("{}", log.describe(dir));
    if let Some(e) = &log.error {
        bail!("could not write the run directory: {e}");
    }
    let worst: Vec<WorstCase> = result
        .phases
        .iter()
        .map(|ph| worst_case(ph, &edge))
        .collect();
    let summary = serde_json::json!({
        "gpu": gpu,
        "model": a.model,
        "edge": {"ttft_factor": edge.ttft, "itl_factor": edge.itl, "throughput_divisor": edge.throughput},
        "phases": result.phases.iter().zip(&worst).map(|(ph, w)| {
            serde_json::json!({
                "name": ph.name,
                "mode": ph.mode,
                "capacity": ph.capacity,
                "capacity_band": ph.capacity_band,
                "request_rate_per_s": capacity_level(ph).map(|l| l.request_rate_per_s),
                "worst_case_capacity": w.capacity,
                "worst_case_request_rate_per_s": w.request_rate_per_s,
                "worst_case_first_breach": w.first_breach,
            })
        }).collect::<Vec<_>>(),
        "caveats": caveats,
    });
    run_dir
        .write(PLAN_SUMMARY, &serde_json::to_vec_pretty(&summary)?)
        .context("cannot write the run directory")?;
    let exit = match &result.status {
        _ if cancel.is_cancelled() => 130,
        headroom_core::run::RunStatus::Stopped { .. } => 1,
        _ if result.phases.iter().all(|p| p.capacity.is_none()) => 3,
        _ => 0,
    };
    Ok(Planned {
        gpu: gpu.to_string(),
        caveats,
        edge,
        worst,
        dir: dir.to_path_buf(),
        result,
        exit,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The level a phase's capacity was found at.
fn capacity_level(p: &PhaseResult) -> Option<&LevelResult> {
    let c = p.capacity?;
    p.levels.iter().find(|l| (l.load - c).abs() < 1e-9)
}

/// A server figure of a level, by name.
fn figure(l: &LevelResult, name: &str) -> Option<f64> {
    l.server.as_ref()?.figures.get(name).copied()
}

/// Replicas for `peak` with `headroom` kept, from one replica's capacity in the same unit.
fn replicas(peak: f64, per_replica: f64, headroom: f64) -> Option<u64> {
    let usable = per_replica * (1.0 - headroom);
    (usable > 0.0).then(|| (peak / usable - 1e-9).ceil().max(1.0) as u64)
}

/// One replica's capacity in the peak's unit: the phase's capacity in its own mode, or for a
/// request rate under a closed loop, the completions per second measured at that capacity.
fn per_replica(p: &PhaseResult, peak: Peak) -> Option<f64> {
    let l = capacity_level(p)?;
    match (peak, p.mode) {
        (Peak::Rate(_), LoadMode::Rate) | (Peak::Concurrency(_), LoadMode::Concurrency) => {
            p.capacity
        }
        (Peak::Rate(_), LoadMode::Concurrency) => Some(l.request_rate_per_s),
        (Peak::Concurrency(_), LoadMode::Rate) => None,
    }
}

/// One replica's capacity in the peak's unit at the edge of the twin's error: the worst-case
/// capacity, or its completions per second; a request rate is divided by the throughput factor.
fn per_replica_worst(p: &PhaseResult, w: &WorstCase, edge: &ErrorEdge, peak: Peak) -> Option<f64> {
    match (peak, p.mode) {
        (Peak::Concurrency(_), LoadMode::Concurrency) => w.capacity,
        (Peak::Rate(_), LoadMode::Rate) => w.capacity.map(|c| c / edge.throughput),
        (Peak::Rate(_), LoadMode::Concurrency) => w.request_rate_per_s,
        (Peak::Concurrency(_), LoadMode::Rate) => None,
    }
}

/// The plan table: per GPU and phase, the capacity at the SLO with its band, tokens/s, tokens
/// per joule, KV use and, with a peak, the replicas.
fn table(planned: &[Planned], peak: Option<Peak>, headroom: f64) -> String {
    let mut head: Vec<String> = [
        "GPU",
        "phase",
        "capacity",
        "band",
        "worst case",
        "output tok/s",
        "tok/J",
        "KV use",
        "power W (all GPUs)",
    ]
    .map(String::from)
    .to_vec();
    if peak.is_some() {
        head.push("replicas".into());
        head.push("worst-case replicas".into());
    }
    let mut rows = vec![head];
    for pl in planned {
        for (p, w) in pl.result.phases.iter().zip(&pl.worst) {
            let l = capacity_level(p);
            let f = |v: Option<f64>, d: usize| v.map_or("–".to_string(), |v| format!("{v:.d$}"));
            let mut row = vec![
                pl.gpu.clone(),
                p.name.clone(),
                p.capacity.map_or("none passed".to_string(), |c| {
                    headroom_report::fmt_load(c, p.mode)
                }),
                band(p),
                w.capacity.map_or("none passed".to_string(), |c| {
                    headroom_report::fmt_load(c, p.mode)
                }),
                f(l.map(|l| l.output_tokens_per_s), 0),
                // The engine's generated tokens over the DCGM energy of the same window.
                f(l.and_then(|l| figure(l, "generation_tokens_per_joule")), 2),
                l.and_then(|l| figure(l, "kv_cache_usage_mean_ratio"))
                    .map_or("–".to_string(), |k| format!("{:.0}%", k * 100.0)),
                f(l.and_then(|l| figure(l, "gpu_power_mean_w")), 0),
            ];
            if let Some(pk) = peak {
                let want = match pk {
                    Peak::Rate(x) | Peak::Concurrency(x) => x,
                };
                for per in [per_replica(p, pk), per_replica_worst(p, w, &pl.edge, pk)] {
                    row.push(
                        per.and_then(|c| replicas(want, c, headroom))
                            .map_or("–".to_string(), |n| n.to_string()),
                    );
                }
            }
            rows.push(row);
        }
    }
    headroom_report::diagnosis::table(&rows, "  ")
}

/// A phase's capacity band as `certain PASS … certain FAIL` (`–` when the search found none).
fn band(p: &PhaseResult) -> String {
    match &p.capacity_band {
        Some(b) => {
            let lo = b.low.map_or("–".to_string(), fmt_num);
            let hi = b.high.map_or("–".to_string(), fmt_num);
            format!("[{lo}, {hi})")
        }
        None => "–".to_string(),
    }
}

/// Runs the plan; exit status 0 when every plan completed with a capacity, 3 when a GPU's found
/// none, 130 when stopped by Ctrl-C or SIGTERM.
pub async fn run(a: PlanArgs, argv: Vec<String>) -> Result<i32> {
    let mut stop =
        crate::StopSignal::install().context("cannot install the Ctrl-C and SIGTERM handlers")?;
    let peak = a.peak.as_deref().map(parse_peak).transpose()?;
    let headroom = parse_ratio(&a.headroom)
        .ok()
        .filter(|h| (0.0..1.0).contains(h))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--headroom {}: expected a share from 0 to below 100% (e.g. 20%)",
                a.headroom
            )
        })?;
    let mut p = prepare(&a)?;
    p.calibration = calibrate(&a)?;
    let gpus: Vec<String> = match &a.compare_gpus {
        Some(g) if !g.is_empty() => g.iter().map(|s| s.trim().to_lowercase()).collect(),
        _ => vec![a.gpu.clone()],
    };
    // Every GPU resolved before the first plan: a bad name fails at once under its own flag, and
    // one preset named twice (or by an alias) is not planned twice into one directory.
    let flag = if a.compare_gpus.is_some() {
        "--compare-gpus"
    } else {
        "--gpu"
    };
    let mut seen: Vec<(String, &str)> = Vec::new();
    for gpu in &gpus {
        let cfg = twin_spec(&a, gpu).resolve().map_err(|e| {
            anyhow::anyhow!("{flag} `{gpu}` (--model {}): {}", a.model, with_flags(&e))
        })?;
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == cfg.gpu_name) {
            bail!(
                "{flag}: `{gpu}` and `{first}` are the same GPU preset ({}); name each once",
                cfg.gpu_name
            );
        }
        seen.push((cfg.gpu_name.clone(), gpu));
    }
    let base = a.out.clone().unwrap_or_else(default_run_dir);
    let cancel = CancellationFlag::new();
    {
        let c = cancel.clone();
        tokio::spawn(async move {
            let sig = stop.recv().await;
            eprintln!("\nheadroom: {sig}: stopping after this level; finished levels are kept");
            c.cancel();
        });
    }
    let many = gpus.len() > 1;
    // One plan per core at a time: each is CPU-bound on its own engine, with nothing shared.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(gpus.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Result<Planned>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let i = next.fetch_add(gpus.len(), std::sync::atomic::Ordering::Relaxed);
                        if i < gpus.len() {
                            let e = anyhow::anyhow!("cannot start a planner thread: {e}");
                            lock(&done).push((i, Err(e)));
                        }
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(gpu) = gpus.get(i) else { break };
                    if cancel.is_cancelled() {
                        break;
                    }
                    let dir = if many { base.join(gpu) } else { base.clone() };
                    let r = rt.block_on(plan_one(&a, &p, gpu, &dir, &argv, &cancel, many));
                    lock(&done).push((i, r));
                }
            });
        }
    });
    let mut done = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by_key(|d| d.0);
    let mut planned = Vec::new();
    for (_, r) in done {
        planned.push(r?);
    }
    if !many && let Some(pl) = planned.first() {
        println!("{}", headroom_report::terminal::render(&pl.result));
    }
    println!(
        "Plan ({}, simulated on the engine twin; figures at the capacity level){}:",
        a.model,
        peak.map_or(String::new(), |pk| format!(
            "; replicas for a peak of {} with {}% headroom",
            match pk {
                Peak::Rate(x) => format!("{} req/s", fmt_num(x)),
                Peak::Concurrency(x) => format!("{} concurrent", fmt_num(x)),
            },
            fmt_num(headroom * 100.0)
        ))
    );
    print!("{}", table(&planned, peak, headroom));
    // What "worst case" multiplies, once per distinct edge (a calibration gives every GPU the
    // same one).
    let mut edges: Vec<ErrorEdge> = Vec::new();
    for pl in &planned {
        if !edges.contains(&pl.edge) {
            edges.push(pl.edge);
        }
    }
    for e in &edges {
        let whose: Vec<&str> = planned
            .iter()
            .filter(|pl| pl.edge == *e)
            .map(|pl| pl.gpu.as_str())
            .collect();
        println!(
            "Worst case{}: the highest level planned that still meets every objective if the twin (Headroom's engine simulation) is as wrong as the errors listed below allow ({}); the real worst case lies between it and the next level planned.",
            if edges.len() > 1 {
                format!(" ({})", whose.join(", "))
            } else {
                String::new()
            },
            e.describe()
        );
    }
    // The capacity band is sampling noise; what the model itself may get wrong, per GPU (the
    // signal biases are the same for all, printed once).
    let shared: Vec<&String> = planned
        .first()
        .map(|p| {
            p.caveats
                .iter()
                .filter(|c| planned.iter().all(|q| q.caveats.contains(c)))
                .collect()
        })
        .unwrap_or_default();
    println!("How wrong the twin may be (crates/sim/CALIBRATION.md):");
    for c in &shared {
        println!("  - {c}");
    }
    for pl in &planned {
        for c in pl.caveats.iter().filter(|c| !shared.contains(c)) {
            println!("  - {c}");
        }
    }
    for pl in &planned {
        if many {
            println!("{}: {}", pl.gpu, pl.dir.display());
        }
    }
    Ok(planned.iter().map(|p| p.exit).max().unwrap_or(0))
}
