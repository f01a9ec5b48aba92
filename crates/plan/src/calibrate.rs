//! Fitting the twin's free constants to a sweep of the user's own server
//! (`headroom plan --calibrate-from RUN_DIR`).
//!
//! The twin's step-time model (`crates/sim/src/engine/timing.rs`) has a handful of constants no
//! datasheet gives: the memory-bandwidth and FLOP utilisations (MBU, MFU), the per-step and
//! per-sequence host overheads, the KV read factor (`k_kv`) and the frontend's service time;
//! the KV pool is vLLM's profiler's
//! figure. A calibration re-measures every level of a real sweep on the virtual clock ([`TwinLevels`],
//! the run's own workload and load, short virtual windows, the same seed for every candidate so
//! that the objective is smooth) and minimises the sum of squared log-residuals of the level's
//! client ITL and TTFT medians, output tokens/s and the engine's queue, prefill and decode means,
//! by Nelder–Mead on the logarithms of the constants (bounded, deterministic). The KV pool is the
//! run's `cache_config_info` `num_gpu_blocks` where the engine exposed it (exact); otherwise it is
//! scaled until the twin's mean KV use matches the measured one.
//!
//! What the data constrains is read from the fit's local sensitivity: the Gauss–Newton
//! covariance of the log-constants (the residuals' Jacobian by finite differences, a weak prior of
//! a factor of 10 around the preset, the residual variance with a floor of 2 %). A constant
//! whose standard deviation exceeds a factor of 1.25 is reported as not constrained: it keeps
//! (about) its preset value and the plan cannot vouch for what depends on it.

use crate::twin::TwinLevels;
use headroom_core::LatencySignal;
use headroom_core::run::{LevelResult, RunResult};
use headroom_load::arrivals::LevelMode;
use headroom_load::prompt::{ClassPlan, PromptSource};
use headroom_load::runner::RunOptions;
use headroom_load::workload::LengthDist;
use headroom_load::workload::{LoadSpec, Workload};
use headroom_signals::{Signal, Window, WindowOptions};
use headroom_sim::EngineConfig;
use headroom_sim::engine::GpuPreset;
use headroom_sweep::controller::{LevelMeasurer, LevelRequest, Phase, phases};
use headroom_sweep::run_dir::{self, RunDir};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A free constant of the twin's GPU preset that the fit adjusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    /// `GpuPreset::mbu`: memory-bandwidth utilisation of decode GEMVs and KV reads (0–1).
    Mbu,
    /// `GpuPreset::mfu`: FLOP utilisation of prefill GEMMs and attention (0–1).
    Mfu,
    /// `GpuPreset::t_step_ms`: fixed host cost per engine step (ms); the per-layer cost
    /// (`t_layer_us`) is the same constant for one model and is held at its preset.
    TStepMs,
    /// `GpuPreset::t_seq_us`: host cost per scheduled sequence per step (µs).
    TSeqUs,
    /// `GpuPreset::t_prefill_ms`: extra cost per sequence prefilled in a step (ms). With one
    /// prompt length in the run it trades off against MFU (both scale with the prefills); a
    /// run with two prompt lengths separates them.
    TPrefillMs,
    /// `GpuPreset::k_kv`: the KV bytes' factor in decode attention (dimensionless). Only classes
    /// whose contexts differ in length separate it from the per-sequence cost and the weight
    /// stream, which grow with the same sequences; otherwise it is held at the preset.
    KKv,
    /// `GpuPreset::frontend_in_ms`: HTTP, template, tokenisation and IPC before the engine sees
    /// a request (ms).
    FrontendInMs,
    /// `GpuPreset::frontend_load_ms`: the frontend time each request gains per 1,000 output
    /// tokens/s being streamed (ms per 1,000 tokens/s), the host's contention. Only a run whose
    /// levels stream at different rates shows it: TTFT growing with the load beyond the engine's
    /// own wait.
    FrontendLoadMs,
}

/// The constants fitted, in the order of the fit's vector.
pub const PARAMS: [Param; 8] = [
    Param::Mbu,
    Param::Mfu,
    Param::TStepMs,
    Param::TSeqUs,
    Param::TPrefillMs,
    Param::KKv,
    Param::FrontendInMs,
    Param::FrontendLoadMs,
];

impl Param {
    /// The preset field's name.
    pub fn name(self) -> &'static str {
        match self {
            Param::Mbu => "mbu",
            Param::Mfu => "mfu",
            Param::TStepMs => "t_step_ms",
            Param::TSeqUs => "t_seq_us",
            Param::TPrefillMs => "t_prefill_ms",
            Param::KKv => "k_kv",
            Param::FrontendInMs => "frontend_in_ms",
            Param::FrontendLoadMs => "frontend_load_ms",
        }
    }

    /// The constant's value in `g`.
    pub fn get(self, g: &GpuPreset) -> f64 {
        match self {
            Param::Mbu => g.mbu,
            Param::Mfu => g.mfu,
            Param::TStepMs => g.t_step_ms,
            Param::TSeqUs => g.t_seq_us,
            Param::TPrefillMs => g.t_prefill_ms,
            Param::KKv => g.k_kv,
            Param::FrontendInMs => g.frontend_in_ms,
            Param::FrontendLoadMs => g.frontend_load_ms,
        }
    }

    fn set(self, g: &mut GpuPreset, v: f64) {
        match self {
            Param::Mbu => g.mbu = v,
            Param::Mfu => g.mfu = v,
            Param::TStepMs => g.t_step_ms = v,
            Param::TSeqUs => g.t_seq_us = v,
            Param::TPrefillMs => g.t_prefill_ms = v,
            Param::KKv => g.k_kv = v,
            Param::FrontendInMs => g.frontend_in_ms = v,
            Param::FrontendLoadMs => g.frontend_load_ms = v,
        }
    }

    /// Bounds of the search, in the field's unit: utilisations up to 1, overheads from
    /// negligible to far beyond any server's (a CPU "GPU" has milliseconds of step overhead).
    fn bounds(self) -> (f64, f64) {
        match self {
            Param::Mbu => (0.005, 1.0),
            Param::Mfu => (0.002, 1.0),
            Param::TStepMs => (1e-3, 500.0),
            Param::TSeqUs => (1e-2, 1e5),
            Param::TPrefillMs => (1e-3, 1e4),
            // From GEMV-grade KV reads to a CPU's scalar attention kernel.
            Param::KKv => (1.0, 1e3),
            Param::FrontendInMs => (1e-2, 5_000.0),
            // The floor is no contention at any real rate (1 µs at 1,000 tokens/s).
            Param::FrontendLoadMs => (1e-3, 5_000.0),
        }
    }

    /// Where the fit starts: the preset's value, or for a constant the preset leaves at 0 a value
    /// of the right order that the data moves down to its bound when nothing depends on it: for
    /// the per-prefill cost (no GPU preset has one) the step overhead; for the frontend's load
    /// term (no preset measures one) 10 ms per 1,000 tokens/s, a third of the L4 sweep's, as the
    /// centre of the fit's prior only: [`fit`] searches it from the TTFT growth the engine's
    /// constants leave unexplained. The search is on logarithms.
    fn start(self, g: &GpuPreset) -> f64 {
        let (lo, hi) = self.bounds();
        let v = self.get(g);
        if v > 0.0 {
            v.clamp(lo, hi)
        } else if self == Param::FrontendLoadMs {
            10.0
        } else {
            g.t_step_ms.clamp(lo, hi)
        }
    }
}

/// A figure of a level that the fit reproduces.
#[derive(Debug, Clone, Copy)]
struct Figure {
    /// Name in `calibration.json` (and, for the server's, in `results.json`'s figures).
    name: &'static str,
    /// Weight of its log-residual: the ITL median and the decode mean are the steadiest figures
    /// between two runs of the same server (within 1 %), TTFT and the queue the noisiest (a
    /// tenth and more at a level where requests wait for a step).
    weight: f64,
    /// Added to both sides before the logarithm, in the figure's unit: below it a difference is
    /// no evidence (a 0.2 ms queue against a 0.02 ms one).
    floor: f64,
    /// Whether the level's measured ITL median (one engine step) raises the floor.
    step_floor: bool,
}

const FIGURES: [Figure; 7] = [
    Figure {
        name: "itl_p50_s",
        step_floor: false,
        weight: 2.0,
        floor: 1e-4,
    },
    // A TTFT median under load is bimodal (a prompt scheduled in the running step or one step
    // later) and lands on either mode by chance; the mean is the steadier target.
    Figure {
        name: "ttft_p50_s",
        step_floor: true,
        weight: 0.25,
        floor: 1e-3,
    },
    Figure {
        name: "ttft_mean_s",
        step_floor: true,
        weight: 0.5,
        floor: 1e-3,
    },
    Figure {
        name: "output_tokens_per_s",
        step_floor: false,
        weight: 0.5,
        floor: 1e-2,
    },
    Figure {
        name: "decode_time_mean_s",
        step_floor: false,
        weight: 1.0,
        floor: 1e-3,
    },
    Figure {
        name: "prefill_time_mean_s",
        step_floor: true,
        weight: 0.25,
        floor: 1e-3,
    },
    Figure {
        name: "queue_time_mean_s",
        step_floor: true,
        weight: 0.25,
        floor: 2e-3,
    },
];

/// Where [`robust`] turns linear (log units: about 15 %).
const HUBER: f64 = 0.14;

/// Prior standard deviation of a log-constant around its preset (a factor of 10): weak enough
/// that any figure that depends on a constant moves it, strong enough that a constant nothing
/// depends on stays put.
const PRIOR_SD: f64 = std::f64::consts::LN_10;

/// The prior in the fit's own cost: only a tie-breaker along directions no figure moves (a
/// factor of 2 costs what a 0.3 % ITL error does), so that it never pulls a constant the data
/// does pin down away from it ([`PRIOR_SD`] is the prior of the reported uncertainty).
const FIT_PRIOR_SD: f64 = 40.0;

/// A constant is reported as constrained when its standard deviation is below this (log units:
/// a factor of 1.25).
const CONSTRAINED_SD: f64 = 0.223;

/// Why a run directory cannot be calibrated from.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// A file of the run directory is missing or unreadable.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The run measured nothing to fit to.
    #[error("{0}")]
    Empty(String),
}

/// One measured level: what the fit reproduces.
#[derive(Debug, Clone, Serialize)]
pub struct TargetLevel {
    /// Phase (class name or `mix`).
    pub phase: String,
    /// Concurrency or requests per second.
    pub load: f64,
    /// The measurement window the sweep used, seconds.
    pub window_s: f64,
    /// Measured figures by name (see the module docs).
    pub figures: BTreeMap<String, f64>,
    /// The engine's mean KV-cache use over the window (0–1), where scraped.
    pub kv_usage_mean: Option<f64>,
}

/// What a calibration reads from a run directory.
#[derive(Debug, Clone)]
pub struct RunData {
    /// The run directory.
    pub dir: PathBuf,
    /// The run's classes, from its `workload.yaml` (one word per token on the twin).
    pub plans: Vec<ClassPlan>,
    /// The run's load mode, arrival process and cap.
    pub load: LoadSpec,
    /// The run's warm-up.
    pub warmup: Duration,
    /// The levels to reproduce.
    pub levels: Vec<TargetLevel>,
    /// The KV pool the engine reported (`cache_config_info` `num_gpu_blocks`), blocks of
    /// `block_size` tokens.
    pub num_gpu_blocks: Option<u32>,
    /// The engine's KV block size (`cache_config_info` `block_size`), tokens: 16 on GPUs, 128 on
    /// vLLM's CPU backend. 16 when the run does not say.
    pub block_size: u32,
    /// The GPU the run was measured on, as its dcgm-exporter names it (`modelName`, e.g.
    /// `NVIDIA A10G`); `None` when the run scraped no dcgm-exporter.
    pub gpu_model_name: Option<String>,
}

fn read(path: &Path) -> Result<String, CalibrationError> {
    run_dir::read_text(path).map_err(|e| CalibrationError::Read {
        path: path.display().to_string(),
        message: e.message,
    })
}

/// The measured figures of one level of `results.json`.
fn level_figures(l: &LevelResult) -> BTreeMap<String, f64> {
    let mut f = BTreeMap::new();
    for (sig, name) in [("itl", "itl_p50_s"), ("ttft", "ttft_p50_s")] {
        if let Some(s) = l.latency.get(sig).filter(|s| s.count > 0 && s.p50_s > 0.0) {
            f.insert(name.to_string(), s.p50_s);
            if sig == "ttft" {
                f.insert("ttft_mean_s".into(), s.mean_s);
            }
        }
    }
    if l.output_tokens_per_s > 0.0 {
        f.insert("output_tokens_per_s".into(), l.output_tokens_per_s);
    }
    if let Some(s) = &l.server {
        for fig in &FIGURES[4..] {
            if let Some(v) = s
                .figures
                .get(fig.name)
                .filter(|v| v.is_finite() && **v >= 0.0)
            {
                f.insert(fig.name.to_string(), *v);
            }
        }
    }
    f
}

/// Reads a run directory: `results.json` (the levels), `workload.yaml` (the classes and load) and
/// `manifest.json` (the KV pool, when the engine exposed `cache_config_info`).
///
/// Errors: a missing or unparsable file, or a run without a level that finished requests.
pub fn read_run(dir: &Path) -> Result<RunData, CalibrationError> {
    let bad = |p: &Path, m: String| CalibrationError::Read {
        path: p.display().to_string(),
        message: m,
    };
    let layout = RunDir::new(dir);
    let rp = layout.results();
    let run: RunResult = serde_json::from_str(&read(&rp)?)
        .map_err(|e| bad(&rp, format!("not a results.json: {e}")))?;
    let wp = layout.workload();
    let workload = Workload::parse(&read(&wp)?, &wp, dir).map_err(|e| bad(&wp, e.to_string()))?;
    let plans = ClassPlan::from_workload(&workload, None).map_err(|e| bad(&wp, e.to_string()))?;
    let mp = layout.manifest();
    let manifest: serde_json::Value = match run_dir::read_text(&mp) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| bad(&mp, e.to_string()))?,
        Err(_) => serde_json::Value::Null,
    };
    let ec = &manifest["engine_config"];
    // vLLM's labels are strings; a plan's manifest records the twin's pool as a number.
    let num_gpu_blocks = [
        &ec["cache_config"]["num_gpu_blocks"],
        &ec["plan"]["num_gpu_blocks"],
    ]
    .into_iter()
    .find_map(|v| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
    })
    .and_then(|n| u32::try_from(n).ok())
    .filter(|n| *n > 1);
    let block_size = [&ec["cache_config"]["block_size"], &ec["plan"]["block_size"]]
        .into_iter()
        .find_map(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        })
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=4096).contains(n))
        .unwrap_or(headroom_sim::engine::spec::BLOCK_SIZE);
    let mut levels = Vec::new();
    for p in &run.phases {
        for l in &p.levels {
            let figures = level_figures(l);
            if !figures.contains_key("itl_p50_s") && !figures.contains_key("ttft_p50_s") {
                continue;
            }
            levels.push(TargetLevel {
                phase: p.name.clone(),
                load: l.load,
                window_s: l.window_s,
                figures,
                kv_usage_mean: l
                    .server
                    .as_ref()
                    .and_then(|s| s.figures.get("kv_cache_usage_mean_ratio").copied()),
            });
        }
    }
    if levels.is_empty() {
        return Err(CalibrationError::Empty(format!(
            "{}: no level measured an ITL or a TTFT to fit the twin to",
            dir.display()
        )));
    }
    Ok(RunData {
        dir: dir.to_path_buf(),
        plans,
        load: workload.spec.load.clone(),
        warmup: workload.spec.warmup,
        levels,
        num_gpu_blocks,
        block_size,
        gpu_model_name: dcgm_model_name(&layout),
    })
}

/// The `modelName` label of the first dcgm-exporter scrape of `layout` that carries one.
fn dcgm_model_name(layout: &RunDir) -> Option<String> {
    let mut files: Vec<_> = std::fs::read_dir(layout.scrapes())
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("-dcgm@"))
        })
        .collect();
    files.sort();
    files.iter().take(4).find_map(|p| {
        let text = run_dir::read_text(p).ok()?;
        let at = text.find("modelName=\"")? + "modelName=\"".len();
        let end = text[at..].find('"')?;
        Some(text[at..at + end].to_string())
    })
}

/// Knobs of the fit.
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// Longest virtual measurement window per level (the run's own window when shorter, at
    /// least 20 s).
    pub measure_max: Duration,
    /// Longest virtual warm-up per level.
    pub warmup_max: Duration,
    /// Most candidate evaluations of the search (each simulates every level).
    pub max_evals: usize,
    /// Wall-clock budget of the search; the best point so far is kept when it runs out.
    pub budget: Duration,
    /// Worker threads for the levels of one evaluation.
    pub threads: usize,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            measure_max: Duration::from_secs(60),
            warmup_max: Duration::from_secs(15),
            max_evals: 400,
            budget: Duration::from_secs(25),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// One fitted constant.
#[derive(Debug, Clone, Serialize)]
pub struct Fitted {
    /// Which.
    pub param: Param,
    /// The base preset's value.
    pub preset: f64,
    /// The fitted value.
    pub fitted: f64,
    /// Standard deviation of its logarithm (≈ relative uncertainty).
    pub sd_log: f64,
    /// Whether the measured figures pin it down (`sd_log` below a factor of 1.25).
    pub constrained: bool,
    /// Held at the preset, not searched: nothing in the run separates it from the others.
    pub held: bool,
    /// Why not, when not.
    pub note: Option<String>,
}

/// One figure of one level: measured, as the fitted twin reproduces it, and the residual.
#[derive(Debug, Clone, Serialize)]
pub struct Residual {
    /// Phase.
    pub phase: String,
    /// Load.
    pub load: f64,
    /// Figure name.
    pub figure: String,
    /// Measured on the server.
    pub measured: f64,
    /// The calibrated twin's figure (`None`: the twin did not produce it).
    pub predicted: Option<f64>,
    /// (predicted − measured) / measured.
    pub relative_error: Option<f64>,
}

/// The calibrated twin's error per figure over the run's levels.
#[derive(Debug, Clone, Serialize)]
pub struct Bias {
    /// Figure name.
    pub figure: String,
    /// Lowest relative error over the levels.
    pub low: f64,
    /// Highest relative error.
    pub high: f64,
    /// Levels compared.
    pub levels: usize,
}

/// A fit's result: `calibration.json` in the plan's run directory.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// The run directory fitted to.
    pub source: String,
    /// Base GPU preset name.
    pub base_gpu: String,
    /// Base model preset name.
    pub base_model: String,
    /// The constants.
    pub constants: Vec<Fitted>,
    /// `t_layer_us`, held at the preset (one constant with `t_step_ms` for one model).
    pub t_layer_us: f64,
    /// The KV pool used (blocks, vLLM's null block included).
    pub num_gpu_blocks: u32,
    /// Where the pool came from.
    pub num_gpu_blocks_source: String,
    /// Weighted sum of squared log-residuals at the preset and at the fit.
    pub cost_preset: f64,
    /// At the fit.
    pub cost_fitted: f64,
    /// Candidate evaluations made.
    pub evaluations: usize,
    /// Wall time of the fit, seconds.
    pub wall_s: f64,
    /// Per level and figure.
    pub residuals: Vec<Residual>,
    /// Per figure.
    pub bias: Vec<Bias>,
    /// The levels' mean KV use, measured and predicted, where both exist.
    pub kv_usage: Vec<Residual>,
    /// The longest context (shared prefix + prompt + output tokens) a request of the run could
    /// reach (`None` when a class read a dataset): how far the fitted KV read factor was
    /// measured ([`longest_context`]).
    pub longest_context_tokens: Option<u64>,
}

/// A class's context lengths (shared prefix tokens, prompt and output distributions); `None`
/// when its prompts or output lengths come from a dataset.
fn synthetic_lengths(c: &ClassPlan) -> Option<(u32, &LengthDist, &LengthDist)> {
    match &c.prompt {
        PromptSource::Synthetic(d) if c.max_tokens != LengthDist::Dataset => {
            Some((c.shared_prefix_tokens, d, &c.max_tokens))
        }
        _ => None,
    }
}

/// The longest context (tokens: shared prefix + prompt + max_tokens) a request of `plans` can
/// reach, each length at its distribution's bound; `None` when a class reads a dataset.
pub fn longest_context(plans: &[ClassPlan]) -> Option<u64> {
    plans.iter().try_fold(0u64, |longest, c| {
        let (prefix, prompt, out) = synthetic_lengths(c)?;
        let l = u64::from(prefix) + u64::from(prompt.max()?) + u64::from(out.max()?);
        Some(longest.max(l))
    })
}

/// A simulated level: its figures by name, and its mean KV use.
type SimLevel = (BTreeMap<String, f64>, Option<f64>);

/// The figures of one simulated level, by the same names as [`TargetLevel::figures`].
fn simulate_level(
    cfg: &EngineConfig,
    data: &RunData,
    phase: &Phase,
    t: &TargetLevel,
    opts: &FitOptions,
    seed: u64,
) -> SimLevel {
    let measure = Duration::from_secs_f64(t.window_s.clamp(20.0, opts.measure_max.as_secs_f64()));
    // Gauges (KV use) are means of the scrapes, so the window needs a few.
    let twin = TwinLevels::new(cfg.clone(), 0.0, measure / 6);
    let warmup = data.warmup.min(opts.warmup_max).max(Duration::from_secs(2));
    let ropts = RunOptions {
        drain_max: Duration::from_secs(60),
        ..RunOptions::default()
    };
    let mode: LevelMode = data.load.level_mode(t.load);
    let m = twin.measure(LevelRequest {
        phase,
        mode,
        warmup,
        measure,
        seed,
        opts: &ropts,
    });
    let mut f = BTreeMap::new();
    if m.rec.aborted.is_some() {
        // A level the twin could not finish has no figures: each then costs the prior's
        // penalty instead of lending a half-run's numbers to the fit.
        return (f, None);
    }
    let total = m.rec.total();
    for (sig, name) in [
        (LatencySignal::Itl, "itl_p50_s"),
        (LatencySignal::Ttft, "ttft_p50_s"),
    ] {
        let s = total.summary(sig);
        if s.count > 0 {
            f.insert(name.to_string(), s.p50_s);
            if sig == LatencySignal::Ttft {
                f.insert("ttft_mean_s".into(), s.mean_s);
            }
        }
    }
    let meas = m.engine.get(m.window_from..).unwrap_or(&[]);
    let w = Window::from_scrapes(meas, &[], &WindowOptions::default()).ok();
    let tok_s = w.as_ref().and_then(|w| {
        let d = w.duration_s()?;
        (d > 0.0).then_some(w.counter(Signal::GenerationTokens)? / d)
    });
    let window_s = m.rec.window_s.max(1e-9);
    f.insert(
        "output_tokens_per_s".into(),
        tok_s.unwrap_or(total.tokens.output_realised as f64 / window_s),
    );
    let mut kv = None;
    if let Some(w) = &w {
        for (sig, name) in [
            (Signal::DecodeTime, "decode_time_mean_s"),
            (Signal::PrefillTime, "prefill_time_mean_s"),
            (Signal::QueueTime, "queue_time_mean_s"),
        ] {
            if let Some(v) = w.histogram(sig).and_then(|h| h.mean()) {
                f.insert(name.to_string(), v);
            }
        }
        kv = w.gauge(Signal::KvCacheUsage).map(|g| g.mean);
    }
    (f, kv)
}

/// Simulated figures of every level of `data` on `cfg`, the levels spread over threads.
fn simulate_all(
    cfg: &EngineConfig,
    data: &RunData,
    phases: &[Phase],
    opts: &FitOptions,
) -> Vec<SimLevel> {
    let n = data.levels.len();
    let out: Vec<std::sync::Mutex<Option<SimLevel>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..opts.threads.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(t) = data.levels.get(i) else { break };
                    let r = match phases.iter().find(|p| p.name == t.phase) {
                        // The same seed per level for every candidate: differences between
                        // candidates are the constants', not the draws'.
                        Some(p) => simulate_level(cfg, data, p, t, opts, 0x5EED ^ i as u64),
                        None => (BTreeMap::new(), None),
                    };
                    *out[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_default()
        })
        .collect()
}

/// Weighted log-residuals of simulated against measured figures, in a fixed order (level, then
/// [`FIGURES`]); a figure the twin did not produce counts as a residual of ln 10.
fn residuals(data: &RunData, sim: &[SimLevel]) -> Vec<f64> {
    let mut r = Vec::new();
    for (t, (s, _)) in data.levels.iter().zip(sim) {
        // A TTFT, prefill or queue difference shorter than one measured inter-token gap (one
        // engine step) is no evidence: a request waits for the next step boundary either way.
        let step = t.figures.get("itl_p50_s").copied().unwrap_or(0.0);
        for fig in FIGURES {
            let Some(m) = t.figures.get(fig.name) else {
                continue;
            };
            let floor = if fig.step_floor {
                fig.floor.max(step)
            } else {
                fig.floor
            };
            r.push(robust(match s.get(fig.name) {
                Some(p) => fig.weight * ((p + floor) / (m + floor)).ln(),
                None => fig.weight * PRIOR_SD,
            }));
        }
    }
    r
}

/// Huber's loss as a residual: squared up to [`HUBER`], linear beyond, so that one figure the
/// twin cannot reproduce (a mix's bimodal TTFT median, a queue on a knife's edge) does not drag
/// every constant towards it.
fn robust(r: f64) -> f64 {
    if r.abs() <= HUBER {
        r
    } else {
        r.signum() * (2.0 * HUBER * r.abs() - HUBER * HUBER).sqrt()
    }
}

/// A configuration with the constants `x` (logarithms, in [`PARAMS`] order).
fn with_params(base: &EngineConfig, x: &[f64]) -> EngineConfig {
    let mut c = base.clone();
    for (p, v) in PARAMS.iter().zip(x) {
        p.set(&mut c.gpu, v.exp());
    }
    c
}

fn clamp_x(x: &mut [f64]) {
    for (p, v) in PARAMS.iter().zip(x.iter_mut()) {
        let (lo, hi) = p.bounds();
        *v = v.clamp(lo.ln(), hi.ln());
    }
}

/// Whether the run's classes ask for contexts of different lengths (shared prefix, prompt or
/// output lengths differ between two classes, or a class reads a dataset): only then does the
/// KV read factor move the step time apart from the per-sequence cost, which scales with the
/// same sequences.
fn contexts_differ(plans: &[ClassPlan]) -> bool {
    let synthetic: Vec<_> = plans.iter().filter_map(synthetic_lengths).collect();
    synthetic.len() < plans.len() || synthetic.windows(2).any(|w| w[0] != w[1])
}

/// The classes of `data` whose phase, or the mix of all of them, has a measured level.
fn measured_plans(data: &RunData) -> Vec<ClassPlan> {
    let has = |name: &str| data.levels.iter().any(|l| l.phase == name);
    // The sweep names the mix's phase "mix" (`headroom_sweep::controller::phases`).
    let mix = has("mix");
    data.plans
        .iter()
        .filter(|c| mix || has(&c.name))
        .cloned()
        .collect()
}

/// The fit's state: data, base, and the evaluations made.
struct Problem<'a> {
    data: &'a RunData,
    phases: Vec<Phase>,
    base: EngineConfig,
    x0: Vec<f64>,
    /// Per constant of [`PARAMS`]: held at its start because nothing in the run separates it.
    held: Vec<bool>,
    opts: &'a FitOptions,
    evals: usize,
}

impl Problem<'_> {
    /// Forward-difference Jacobian of the residuals at `x` (whose residuals are `r`), one
    /// column per constant; a step that would leave the bounds goes the other way.
    fn jacobian(&mut self, x: &[f64], r: &[f64]) -> Vec<Vec<f64>> {
        (0..PARAMS.len())
            .map(|j| {
                if self.held[j] {
                    return vec![0.0; r.len()];
                }
                let mut xp = x.to_vec();
                let (_, hi) = PARAMS[j].bounds();
                let step = if xp[j] + JAC_STEP > hi.ln() {
                    -JAC_STEP
                } else {
                    JAC_STEP
                };
                xp[j] += step;
                self.residuals_at(&xp)
                    .iter()
                    .zip(r)
                    .map(|(a, b)| (a - b) / step)
                    .collect()
            })
            .collect()
    }

    fn residuals_at(&mut self, x: &[f64]) -> Vec<f64> {
        self.evals += 1;
        let sim = simulate_all(
            &with_params(&self.base, x),
            self.data,
            &self.phases,
            self.opts,
        );
        residuals(self.data, &sim)
    }

    fn prior(&self, x: &[f64]) -> f64 {
        x.iter()
            .zip(&self.x0)
            .map(|(a, b)| ((a - b) / FIT_PRIOR_SD).powi(2))
            .sum()
    }

    fn cost(&mut self, x: &[f64]) -> f64 {
        let r = self.residuals_at(x);
        r.iter().map(|v| v * v).sum::<f64>() + self.prior(x)
    }
}

/// Finite-difference step of the Jacobian (log units: 5 %), wide enough to average over the
/// step-to-step granularity of a simulated level.
const JAC_STEP: f64 = 0.05;

/// Nelder–Mead on `f` from `x0` over the coordinates `free` (the others stay at `x0`'s: every
/// vertex shares them, and each move is an affine combination of vertices), with initial steps
/// `step` (log units), within the bounds, stopping at `max_evals`, the deadline, or when the
/// simplex has collapsed.
fn nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: &[f64],
    free: &[usize],
    step: f64,
    max_evals: usize,
    deadline: Instant,
) -> (Vec<f64>, f64) {
    let n = free.len();
    let mut evals = 0usize;
    let mut eval = |mut x: Vec<f64>, evals: &mut usize| {
        clamp_x(&mut x);
        *evals += 1;
        let v = f(&x);
        (x, v)
    };
    let mut pts: Vec<(Vec<f64>, f64)> = vec![eval(x0.to_vec(), &mut evals)];
    for &i in free {
        let mut x = x0.to_vec();
        x[i] += step;
        if x[i] > PARAMS[i].bounds().1.ln() {
            x[i] = x0[i] - step;
        }
        pts.push(eval(x, &mut evals));
    }
    while evals < max_evals && Instant::now() < deadline {
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let spread = pts[n].1 - pts[0].1;
        let size = pts[1..]
            .iter()
            .flat_map(|p| p.0.iter().zip(&pts[0].0).map(|(a, b)| (a - b).abs()))
            .fold(0.0f64, f64::max);
        if spread < 1e-6 && size < 1e-3 {
            break;
        }
        let centroid: Vec<f64> = (0..x0.len())
            .map(|j| pts[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64)
            .collect();
        let worst = pts[n].0.clone();
        let along = |t: f64| -> Vec<f64> {
            centroid
                .iter()
                .zip(&worst)
                .map(|(c, w)| c + t * (c - w))
                .collect()
        };
        let r = eval(along(1.0), &mut evals);
        if r.1 < pts[0].1 {
            let e = eval(along(2.0), &mut evals);
            pts[n] = if e.1 < r.1 { e } else { r };
        } else if r.1 < pts[n - 1].1 {
            pts[n] = r;
        } else {
            let t = if r.1 < pts[n].1 { 0.5 } else { -0.5 };
            let c = eval(along(t), &mut evals);
            if c.1 < pts[n].1.min(r.1) {
                pts[n] = c;
            } else {
                // Shrink towards the best point.
                let best = pts[0].0.clone();
                for p in pts.iter_mut().skip(1) {
                    let x =
                        p.0.iter()
                            .zip(&best)
                            .map(|(a, b)| b + 0.5 * (a - b))
                            .collect();
                    *p = eval(x, &mut evals);
                }
            }
        }
    }
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    pts.swap_remove(0)
}

/// Levenberg–Marquardt on the log-constants from `x` (whose residuals are `r0`), the prior as
/// extra residuals, until the cost stops falling, the evaluations run out or the deadline
/// passes: the polish after Nelder–Mead, which closes in on a long valley slowly. Returns the
/// point, its residuals and the Jacobian there.
fn levenberg_marquardt(
    pb: &mut Problem<'_>,
    x: Vec<f64>,
    r0: Vec<f64>,
    deadline: Instant,
) -> (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) {
    let np = PARAMS.len();
    let mut x = x;
    let mut r = r0;
    let mut cost = r.iter().map(|v| v * v).sum::<f64>() + pb.prior(&x);
    let mut lambda = 1e-2;
    let mut jac = pb.jacobian(&x, &r);
    while pb.evals < pb.opts.max_evals && Instant::now() < deadline {
        // (JᵀJ + P + λ·diag) δ = −(Jᵀr + P(x − x0)), P the prior's precision.
        let p = FIT_PRIOR_SD.powi(-2);
        let mut a: Vec<Vec<f64>> = (0..np)
            .map(|i| {
                (0..np)
                    .map(|k| jac[i].iter().zip(&jac[k]).map(|(u, v)| u * v).sum::<f64>())
                    .collect()
            })
            .collect();
        let g: Vec<f64> = (0..np)
            .map(|i| jac[i].iter().zip(&r).map(|(u, v)| u * v).sum::<f64>() + p * (x[i] - pb.x0[i]))
            .collect();
        for (i, row) in a.iter_mut().enumerate() {
            row[i] += p + lambda * (row[i] + p);
        }
        let Some(inv) = invert(&a) else { break };
        let mut xn: Vec<f64> = (0..np)
            .map(|i| x[i] - (0..np).map(|k| inv[i][k] * g[k]).sum::<f64>())
            .collect();
        clamp_x(&mut xn);
        for (j, v) in xn.iter_mut().enumerate() {
            if pb.held[j] {
                *v = pb.x0[j];
            }
        }
        let moved = xn
            .iter()
            .zip(&x)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max);
        if moved < 1e-4 {
            break;
        }
        let rn = pb.residuals_at(&xn);
        let cn = rn.iter().map(|v| v * v).sum::<f64>() + pb.prior(&xn);
        if cn < cost {
            let gain = (cost - cn) / cost.max(1e-12);
            x = xn;
            r = rn;
            cost = cn;
            lambda = (lambda / 3.0).max(1e-6);
            jac = pb.jacobian(&x, &r);
            if gain < 1e-4 {
                break;
            }
        } else {
            lambda *= 4.0;
            if lambda > 1e4 {
                break;
            }
        }
    }
    (x, r, jac)
}

/// Solves `a·x = b` for a small symmetric positive-definite `a` (Gauss–Jordan with pivoting);
/// returns the inverse of `a`, or `None` when it is singular.
fn invert(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = a.len();
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..n).map(|j| f64::from(u8::from(i == j))));
            row
        })
        .collect();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs()))?;
        if m[p][c].abs() < 1e-300 {
            return None;
        }
        m.swap(c, p);
        let d = m[c][c];
        for v in m[c].iter_mut() {
            *v /= d;
        }
        for r in 0..n {
            if r != c {
                let k = m[r][c];
                if k != 0.0 {
                    let row_c = m[c].clone();
                    for (v, w) in m[r].iter_mut().zip(row_c) {
                        *v -= k * w;
                    }
                }
            }
        }
    }
    Some(m.into_iter().map(|r| r[n..].to_vec()).collect())
}

/// The least-squares slope, against the levels' measured output tokens/s, of how much longer
/// their TTFT (mean where measured, else median) is than `sim`'s, in ms per 1,000 tokens/s: the
/// TTFT growth with the load that the engine's own waits leave unexplained, where the frontend's
/// load term starts. `None` with fewer than two levels at different rates, or a slope that is
/// not positive (nothing left to explain).
fn ttft_excess_slope_ms_per_ktok(data: &RunData, sim: &[SimLevel]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = data
        .levels
        .iter()
        .zip(sim)
        .filter_map(|(t, (s, _))| {
            let name = ["ttft_mean_s", "ttft_p50_s"]
                .into_iter()
                .find(|n| t.figures.contains_key(*n) && s.contains_key(*n))?;
            let rate = t.figures.get("output_tokens_per_s")?;
            Some((rate / 1e3, (t.figures[name] - s[name]) * 1e3))
        })
        .collect();
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    (pts.len() >= 2 && sxx > 1e-9 && slope.is_finite() && slope > 0.0).then_some(slope)
}

/// Fits the twin's constants on `base` (the run's GPU, model, dtype, parallelism and scheduler
/// limits, resolved) to `data`. Deterministic for the same inputs and options (the wall-clock
/// budget aside, which only cuts the search short).
pub fn fit(base: &EngineConfig, data: &RunData, opts: &FitOptions) -> Calibration {
    let started = Instant::now();
    let deadline = started + opts.budget;
    let mut base = base.clone();
    let (pool_source, pool_exact) = match data.num_gpu_blocks {
        Some(n) => {
            // The twin's blocks are 16 tokens: the same usable tokens ((n − 1) × block_size, the
            // null block aside) in its blocks, so the pool and its use agree with the engine's
            // up to the last partial block of each request.
            let bs = headroom_sim::engine::spec::BLOCK_SIZE;
            let twin = (u64::from(n - 1) * u64::from(data.block_size)).div_ceil(u64::from(bs)) + 1;
            base.num_gpu_blocks = u32::try_from(twin).unwrap_or(u32::MAX);
            base.num_gpu_blocks_overridden = true;
            let note = if data.block_size == bs {
                "the engine's cache_config_info num_gpu_blocks (exact)".to_string()
            } else {
                format!(
                    "the engine's cache_config_info: {n} blocks of {} tokens, as {twin} twin blocks of {bs} (the same tokens; use rounds to {bs}-token blocks, the engine's to {})",
                    data.block_size, data.block_size
                )
            };
            (note, true)
        }
        None => (String::new(), false),
    };
    let x0: Vec<f64> = PARAMS.iter().map(|p| p.start(&base.gpu).ln()).collect();
    let phases = phases(&data.plans);
    // Only the classes the run measured (a sweep with --class measures one of the workload's).
    let measured = measured_plans(data);
    let held: Vec<bool> = PARAMS
        .iter()
        .map(|p| *p == Param::KKv && !contexts_differ(&measured))
        .collect();
    let mut pb = Problem {
        data,
        phases,
        base: base.clone(),
        x0: x0.clone(),
        held: held.clone(),
        opts,
        evals: 0,
    };
    // Without the engine's figure, the pool is scaled until the twin's mean KV use is the
    // measured one (used blocks hardly depend on the pool until it preempts).
    let rescale_pool = |pb: &mut Problem<'_>, x: &[f64]| -> Option<f64> {
        let sim = simulate_all(&with_params(&pb.base, x), data, &pb.phases, opts);
        pb.evals += 1;
        let mut ratios: Vec<f64> = data
            .levels
            .iter()
            .zip(&sim)
            .filter_map(|(t, (_, k))| {
                let (m, s) = (t.kv_usage_mean?, (*k)?);
                (m > 0.02 && s > 0.0).then_some(s / m)
            })
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let r = ratios[ratios.len() / 2].clamp(0.05, 20.0);
        let n = (f64::from(pb.base.num_gpu_blocks - 1) * r)
            .round()
            .max(16.0)
            + 1.0;
        pb.base.num_gpu_blocks = n.min(f64::from(u32::MAX)) as u32;
        pb.base.num_gpu_blocks_overridden = true;
        Some(r)
    };
    let mut pool_note = pool_source;
    if !pool_exact {
        pool_note = match rescale_pool(&mut pb, &x0) {
            Some(_) => {
                let _ = rescale_pool(&mut pb, &x0);
                "scaled until the twin's mean KV use matched the measured (no num_gpu_blocks in the run's manifest)".into()
            }
            None => {
                "the preset's profile (the run records neither num_gpu_blocks nor KV use)".into()
            }
        };
    }
    let r_preset = pb.residuals_at(&x0);
    let cost_preset = r_preset.iter().map(|v| v * v).sum::<f64>();
    // Three quarters of the evaluations for Nelder–Mead, the rest for the polish.
    let nm_evals = opts.max_evals * 3 / 4;
    let nm_deadline = started + opts.budget * 3 / 4;
    let all: Vec<usize> = (0..PARAMS.len()).filter(|j| !held[*j]).collect();
    let load_j = PARAMS
        .iter()
        .position(|p| *p == Param::FrontendLoadMs)
        .unwrap_or(0);
    // No preset measures the frontend's load term, and from any start it is the constant that
    // everything else can trade against: first the engine's constants alone (the term at its
    // floor), then the term where the TTFT growth the engine left unexplained puts it.
    let staged = base.gpu.frontend_load_ms == 0.0;
    let first: Vec<usize> = if staged {
        all.iter().copied().filter(|j| *j != load_j).collect()
    } else {
        all.clone()
    };
    let mut start = x0.clone();
    if staged {
        start[load_j] = Param::FrontendLoadMs.bounds().0.ln();
    }
    let (mut x, _) = {
        let mut f = |x: &[f64]| pb.cost(x);
        let evals = if staged { nm_evals * 2 / 3 } else { nm_evals };
        nelder_mead(&mut f, &start, &first, 0.4, evals, nm_deadline)
    };
    if staged {
        let sim = simulate_all(&with_params(&pb.base, &x), data, &pb.phases, opts);
        pb.evals += 1;
        if let Some(slope) = ttft_excess_slope_ms_per_ktok(data, &sim) {
            let (lo, hi) = Param::FrontendLoadMs.bounds();
            x[load_j] = slope.clamp(lo, hi).ln();
        }
    }
    // A second, smaller simplex from the best point over every constant: Nelder–Mead can stall
    // on a ridge.
    if Instant::now() < nm_deadline && pb.evals < nm_evals {
        let left = nm_evals - pb.evals;
        let mut f = |x: &[f64]| pb.cost(x);
        x = nelder_mead(&mut f, &x.clone(), &all, 0.1, left, nm_deadline).0;
    }
    let r_nm = pb.residuals_at(&x);
    // LM's last Jacobian is the local sensitivity, for what the data constrains.
    let (x, r_fit, cols) = levenberg_marquardt(&mut pb, x, r_nm, deadline);
    let cost_fitted = r_fit.iter().map(|v| v * v).sum::<f64>();
    let np = PARAMS.len();
    let free = held.iter().filter(|h| !**h).count();
    let dof = r_fit.len().saturating_sub(free).max(1) as f64;
    let s2 = (cost_fitted / dof).max(0.02f64.powi(2));
    let jtj: Vec<Vec<f64>> = (0..np)
        .map(|a| {
            (0..np)
                .map(|b| {
                    let v: f64 = cols[a].iter().zip(&cols[b]).map(|(p, q)| p * q).sum();
                    v / s2 + if a == b { PRIOR_SD.powi(-2) } else { 0.0 }
                })
                .collect()
        })
        .collect();
    let cov = invert(&jtj);
    let constants = PARAMS
        .iter()
        .enumerate()
        .map(|(j, p)| {
            let sd = cov.as_ref().map_or(PRIOR_SD, |c| c[j][j].max(0.0).sqrt());
            let constrained = sd < CONSTRAINED_SD;
            let influence = cols[j].iter().map(|v| v * v).sum::<f64>().sqrt();
            let note = (!constrained).then(|| {
                if held[j] {
                    "held at the preset: every class of the run asks for the same prefix, prompt and output lengths, so nothing separates it from t_seq_us and mbu".to_string()
                } else if influence < 0.05 {
                    format!(
                        "no measured figure depends on it ({}); it stays near the preset",
                        match p {
                            Param::Mfu => "every level's steps are memory-bound: prefill is too short to be compute-bound",
                            Param::TStepMs => "the per-step overhead is small against the step time",
                            Param::TSeqUs => "too few sequences per step for their host cost to show",
                            Param::TPrefillMs => "prefill steps are too few or too short for a per-request cost to show",
                            Param::KKv => "the contexts are too short or too alike for the KV reads to show in the step time",
                            Param::FrontendInMs => "small against TTFT",
                            Param::FrontendLoadMs => "the levels stream too few tokens per second for the frontend's contention to show in TTFT",
                            Param::Mbu => "no memory-bound step",
                        }
                    )
                } else {
                    // The constant it trades off against most (the largest correlation).
                    let partner = cov.as_ref().and_then(|c| {
                        (0..np)
                            .filter(|k| *k != j)
                            .max_by(|&a, &b| {
                                let r = |k: usize| (c[j][k] / (c[j][j] * c[k][k]).sqrt()).abs();
                                r(a).total_cmp(&r(b))
                            })
                            .map(|k| PARAMS[k].name())
                    });
                    format!(
                        "the figures move it, but not apart from {}: ±{:.0} %",
                        partner.unwrap_or("the others"),
                        (sd.exp() - 1.0) * 100.0
                    )
                }
            });
            Fitted {
                param: *p,
                preset: p.get(&base.gpu),
                fitted: x[j].exp(),
                sd_log: sd,
                constrained,
                held: held[j],
                note,
            }
        })
        .collect();
    // The per-level account at the fit.
    let fitted_cfg = with_params(&pb.base, &x);
    let (res, kv_usage) = compare(&fitted_cfg, data, opts);
    pb.evals += 1;
    let bias = FIGURES
        .iter()
        .filter_map(|fig| {
            let e: Vec<f64> = res
                .iter()
                .filter(|r| r.figure == fig.name)
                .filter_map(|r| r.relative_error)
                .collect();
            (!e.is_empty()).then(|| Bias {
                figure: fig.name.into(),
                low: e.iter().copied().fold(f64::INFINITY, f64::min),
                high: e.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                levels: e.len(),
            })
        })
        .collect();
    Calibration {
        source: data.dir.display().to_string(),
        base_gpu: base.gpu_name.clone(),
        base_model: base.model_name.clone(),
        constants,
        t_layer_us: base.gpu.t_layer_us,
        num_gpu_blocks: pb.base.num_gpu_blocks,
        num_gpu_blocks_source: pool_note,
        cost_preset,
        cost_fitted,
        evaluations: pb.evals,
        wall_s: started.elapsed().as_secs_f64(),
        residuals: res,
        bias,
        kv_usage,
        longest_context_tokens: longest_context(&measured),
    }
}

/// The twin `cfg`'s figures against every level of `data`: per level and figure, then the mean
/// KV use per level. What a fit reports at its optimum, and what a held-out run checks a
/// calibrated twin against.
pub fn compare(
    cfg: &EngineConfig,
    data: &RunData,
    opts: &FitOptions,
) -> (Vec<Residual>, Vec<Residual>) {
    let sim = simulate_all(cfg, data, &phases(&data.plans), opts);
    let mut res = Vec::new();
    let mut kv_usage = Vec::new();
    for (t, (s, k)) in data.levels.iter().zip(&sim) {
        for fig in FIGURES {
            let Some(m) = t.figures.get(fig.name) else {
                continue;
            };
            let p = s.get(fig.name).copied();
            res.push(Residual {
                phase: t.phase.clone(),
                load: t.load,
                figure: fig.name.into(),
                measured: *m,
                predicted: p,
                relative_error: p.filter(|_| *m > 0.0).map(|p| p / m - 1.0),
            });
        }
        if let Some(m) = t.kv_usage_mean {
            kv_usage.push(Residual {
                phase: t.phase.clone(),
                load: t.load,
                figure: "kv_cache_usage_mean_ratio".into(),
                measured: m,
                predicted: *k,
                relative_error: k.filter(|_| m > 0.0).map(|k| k / m - 1.0),
            });
        }
    }
    (res, kv_usage)
}

impl Calibration {
    /// The fitted value of `p`.
    pub fn value(&self, p: Param) -> Option<f64> {
        self.constants
            .iter()
            .find(|c| c.param == p)
            .map(|c| c.fitted)
    }

    /// Applies the fit to `cfg`, a configuration to plan. On the calibrated card the constants
    /// and the KV pool are the fit's; on another card the efficiencies (MBU, MFU, capped at 1)
    /// and the KV read factor keep their fitted ratio to the base preset, the host overheads
    /// carry over as they are,
    /// and the pool is the card's own profile scaled by the fitted pool's ratio to the base
    /// profile. `base_preset` is the base configuration before the fit (its pool the profiler's).
    /// The pool is kept only where GPU, model, dtype and parallelism are the run's.
    pub fn apply(&self, base_preset: &EngineConfig, cfg: &mut EngineConfig) {
        let same_card = cfg.gpu_name == base_preset.gpu_name;
        for c in &self.constants {
            let ratio = || c.param.get(&cfg.gpu) * c.fitted / c.preset;
            let v = match c.param {
                _ if same_card => c.fitted,
                Param::Mbu | Param::Mfu => ratio().min(1.0),
                Param::KKv => ratio(),
                _ => c.fitted,
            };
            c.param.set(&mut cfg.gpu, v);
        }
        let same_pool = same_card
            && cfg.model_name == base_preset.model_name
            && cfg.dtype == base_preset.dtype
            && cfg.tensor_parallel == base_preset.tensor_parallel
            && cfg.gpu_memory_utilization == base_preset.gpu_memory_utilization;
        if same_pool {
            cfg.num_gpu_blocks = self.num_gpu_blocks;
        } else if !base_preset.num_gpu_blocks_overridden && base_preset.num_gpu_blocks > 1 {
            let r = f64::from(self.num_gpu_blocks - 1) / f64::from(base_preset.num_gpu_blocks - 1);
            cfg.num_gpu_blocks = ((f64::from(cfg.num_gpu_blocks - 1) * r).round() + 1.0)
                .clamp(2.0, f64::from(u32::MAX)) as u32;
        }
        cfg.num_gpu_blocks_overridden = true;
    }

    /// The calibrated twin's error on `figure` (lowest, highest relative error), when measured.
    pub fn bias(&self, figure: &str) -> Option<(f64, f64)> {
        self.bias
            .iter()
            .find(|b| b.figure == figure)
            .map(|b| (b.low, b.high))
    }

    /// A caveat when the fit searched the KV read factor (`k_kv`, constrained or not) and
    /// `planned` asks for contexts more than 1.25× the run's longest: the factor is linear in
    /// context, and the real-vLLM check found a CPU's attention cost growing slower than that
    /// (CALIBRATION.md).
    pub fn context_caveat(&self, planned: &[ClassPlan]) -> Option<String> {
        let k = self
            .constants
            .iter()
            .find(|c| c.param == Param::KKv && !c.held)?;
        let fitted = self.longest_context_tokens?;
        let wanted = longest_context(planned);
        let beyond = wanted.is_none_or(|w| w * 4 > fitted * 5);
        beyond.then(|| {
            format!(
                "k_kv {:.3} (the cost of reading the KV cache) was fitted on contexts of at most {fitted} tokens; this workload reaches {}: decode there is extrapolated (on the CPU real-vLLM check, 1.8× the fitted context read ITL +21 to +33 %: that CPU's attention cost grows slower than linearly)",
                k.fitted,
                wanted.map_or("lengths drawn from a dataset".to_string(), |w| format!("{w} tokens")),
            )
        })
    }

    /// What the plan's caveats say of this fit on `planned_gpu` ([`crate::bounds::caveats_with`]):
    /// the residuals' range per signal (ITL median; TTFT median and mean; output tokens/s) and
    /// the constants the run did not constrain.
    pub fn bounds(&self, planned_gpu: &str) -> crate::bounds::FitBounds {
        let range = |figs: &[&str]| {
            let b: Vec<&Bias> = self
                .bias
                .iter()
                .filter(|b| figs.contains(&b.figure.as_str()))
                .collect();
            (!b.is_empty()).then(|| {
                (
                    b.iter().map(|b| b.low).fold(f64::INFINITY, f64::min),
                    b.iter().map(|b| b.high).fold(f64::NEG_INFINITY, f64::max),
                )
            })
        };
        crate::bounds::FitBounds {
            source: self.source.clone(),
            same_card: planned_gpu == self.base_gpu,
            errors: [
                ("itl", &["itl_p50_s"][..]),
                ("ttft", &["ttft_p50_s", "ttft_mean_s"][..]),
                ("throughput", &["output_tokens_per_s"][..]),
            ]
            .into_iter()
            .filter_map(|(s, f)| range(f).map(|(lo, hi)| (s, lo, hi)))
            .collect(),
            unconstrained: self
                .constants
                .iter()
                .filter_map(|c| {
                    c.note
                        .as_ref()
                        .map(|n| format!("{} (kept at {}): {n}", c.param.name(), sig3(c.fitted)))
                })
                .collect(),
            other_card: planned_gpu != self.base_gpu,
            what_if: Vec::new(),
        }
    }

    /// The fit as text: the constants, then one row per level and figure.
    pub fn table(&self) -> String {
        let mut out = format!(
            "Calibration to {} ({} + {}; {} evaluations, {:.1} s; cost {:.4} at the preset, {:.4} fitted):\n",
            self.source,
            self.base_gpu,
            self.base_model,
            self.evaluations,
            self.wall_s,
            self.cost_preset,
            self.cost_fitted
        );
        for c in &self.constants {
            out.push_str(&format!(
                "  {:<15} {:>10} -> {:>10}  ±{:.0} %  {}\n",
                c.param.name(),
                sig3(c.preset),
                sig3(c.fitted),
                (c.sd_log.exp() - 1.0) * 100.0,
                match &c.note {
                    None => "constrained".to_string(),
                    Some(n) => format!("NOT constrained: {n}"),
                }
            ));
        }
        out.push_str(&format!(
            "  {:<15} {:>10}  (held at the preset: one constant with t_step_ms for one model)\n",
            "t_layer_us",
            sig3(self.t_layer_us)
        ));
        out.push_str(&format!(
            "  {:<15} {:>10}  ({})\n",
            "num_gpu_blocks", self.num_gpu_blocks, self.num_gpu_blocks_source
        ));
        out.push_str(&format!(
            "  {:<8} {:>8}  {:<22} {:>12} {:>12} {:>8}\n",
            "phase", "load", "figure", "measured", "twin", "error"
        ));
        for r in self.residuals.iter().chain(&self.kv_usage) {
            out.push_str(&format!(
                "  {:<8} {:>8} {:<22} {:>12} {:>12} {:>8}\n",
                r.phase,
                sig3(r.load),
                r.figure,
                sig3(r.measured),
                r.predicted.map_or("–".into(), sig3),
                r.relative_error
                    .map_or("–".into(), |e| format!("{:+.1}%", e * 100.0))
            ));
        }
        out
    }
}

/// Three significant digits.
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let d = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.d$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plans(classes: &str) -> Vec<ClassPlan> {
        let w = format!("load: {{mode: concurrency}}\nclasses:\n{classes}");
        let w = Workload::parse(&w, Path::new("w.yaml"), Path::new(".")).unwrap();
        ClassPlan::from_workload(&w, None).unwrap()
    }

    const SHORT: &str =
        "  - name: short\n    prompt_tokens: {fixed: 128}\n    max_tokens: {fixed: 64}\n";
    const LONG: &str =
        "  - name: long\n    prompt_tokens: {fixed: 256}\n    max_tokens: {fixed: 64}\n";

    #[test]
    fn the_kv_read_factor_is_fitted_only_when_the_classes_contexts_differ() {
        assert!(!contexts_differ(&plans(SHORT)));
        let twice = SHORT.to_string() + &SHORT.replace("short", "again");
        assert!(!contexts_differ(&plans(&twice)));
        assert!(contexts_differ(&plans(&(SHORT.to_string() + LONG))));
    }

    fn calibration(k_kv_searched: bool, longest: Option<u64>) -> Calibration {
        Calibration {
            source: "run".into(),
            base_gpu: "a10g".into(),
            base_model: "m".into(),
            constants: vec![Fitted {
                param: Param::KKv,
                preset: 1.4,
                fitted: 14.0,
                sd_log: if k_kv_searched { 0.1 } else { 2.3 },
                constrained: k_kv_searched,
                held: !k_kv_searched,
                note: None,
            }],
            t_layer_us: 0.0,
            num_gpu_blocks: 2,
            num_gpu_blocks_source: String::new(),
            cost_preset: 0.0,
            cost_fitted: 0.0,
            evaluations: 0,
            wall_s: 0.0,
            residuals: Vec::new(),
            bias: Vec::new(),
            kv_usage: Vec::new(),
            longest_context_tokens: longest,
        }
    }

    #[test]
    fn a_plan_past_the_fitted_contexts_says_so_only_when_k_kv_was_fitted() {
        // Searched but not pinned down is still an extrapolation of the fitted value.
        let mut loose = calibration(true, Some(320));
        loose.constants[0].constrained = false;
        // SHORT + LONG reach 320 tokens; a 1.25× margin is 400.
        let long = plans(LONG);
        let twice =
            plans("  - name: x\n    prompt_tokens: {fixed: 600}\n    max_tokens: {fixed: 64}\n");
        let fitted = calibration(true, Some(320));
        assert_eq!(fitted.context_caveat(&long), None);
        let c = fitted.context_caveat(&twice).unwrap();
        assert!(
            c.contains("at most 320 tokens") && c.contains("reaches 664 tokens"),
            "{c}"
        );
        assert!(loose.context_caveat(&twice).is_some());
        assert_eq!(calibration(false, Some(320)).context_caveat(&twice), None);
        assert_eq!(calibration(true, None).context_caveat(&twice), None);
    }

    #[test]
    fn the_longest_context_is_prefix_prompt_and_output_at_their_bounds() {
        assert_eq!(
            longest_context(&plans(&(SHORT.to_string() + LONG))),
            Some(320)
        );
        let prefixed = "  - name: p\n    shared_prefix_tokens: 32\n    prompt_tokens: {fixed: 128}\n    max_tokens: {fixed: 64}\n";
        assert_eq!(longest_context(&plans(prefixed)), Some(224));
        let drawn = "  - name: o\n    prompt_tokens: {lognormal: {median: 500, p90: 2000, min: 1, max: 8000}}\n    max_tokens: {fixed: 64}\n";
        assert_eq!(longest_context(&plans(drawn)), Some(8064));
    }
}
