//! `headroom sweep`: the saturation matrix. Wiring only: resolve the target (or start the
//! embedded engine twin), the workload and the SLO, run `headroom_sweep`, write the run directory
//! after every level, print the summary.

use crate::duration_arg::duration_arg;
use crate::sweep_progress::ProgressMode;
use anyhow::{Context, Result, bail};
use clap::Args;
use headroom_core::run::{LevelResult, LoadMode, Manifest, RunResult, redact_url};
use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile, parse_ratio};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::{ClassPlan, PromptTokenizer};
use headroom_load::runner::probe;
use headroom_load::workload::{DEFAULT_WORKLOAD_YAML, Workload, check_level, window_from_secs};
use headroom_report::remote_write::{self, Pusher, RemoteWriteClient};
use headroom_sweep::controller::{Progress, Sweep};
use headroom_sweep::policy::{self, Overrides, SweepPolicy, Wiring};
use headroom_sweep::run_dir::RunDir;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Arguments of `headroom sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// OpenAI-compatible base URL (e.g. http://127.0.0.1:8000). Without it, the engine twin runs
    /// in-process on loopback.
    #[arg(long)]
    pub target: Option<String>,
    /// SLO file (default: the built-in claims-assistant SLO; see --print-defaults).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Workload file (default: the built-in claims-assistant workload).
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// Model name to request (default: the workload's, else the server's first).
    #[arg(long)]
    pub model: Option<String>,
    /// Name of an environment variable holding the API key (never written anywhere).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Engine metrics URL (default: TARGET/metrics).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Do not scrape the engine's metrics.
    #[arg(long)]
    pub no_metrics: bool,
    /// dcgm-exporter metrics URL (e.g. http://127.0.0.1:9400/metrics).
    #[arg(long)]
    pub dcgm: Option<String>,
    /// Time between scrapes during a level: seconds (2) or a duration (2s, 500ms).
    #[arg(long, default_value = "2", value_parser = duration_arg)]
    pub scrape_interval: Duration,
    /// Levels to run (comma-separated concurrencies or req/s); default automatic.
    #[arg(long, value_delimiter = ',')]
    pub levels: Option<Vec<f64>>,
    /// First level of the automatic search.
    #[arg(long)]
    pub start: Option<f64>,
    /// Highest level the automatic search may try.
    #[arg(long)]
    pub max_load: Option<f64>,
    /// Bisection stops when fail − pass ≤ this share of the pass level (e.g. 10%).
    #[arg(long)]
    pub resolution: Option<String>,
    /// Warm-up per level: seconds (10) or a duration (10s, 1m) (default: the workload's).
    #[arg(long, value_parser = duration_arg)]
    pub warmup: Option<Duration>,
    /// Measurement window per level: seconds (30) or a duration (30s, 2m) (default: the
    /// workload's).
    #[arg(long, value_parser = duration_arg)]
    pub measure: Option<Duration>,
    /// Seed of arrivals, prompts and the mix (default: the workload's `seed`, else a new random
    /// one per run, printed and recorded in manifest.json). A rerun with the same seed sends the
    /// same prompts, which an engine's prefix cache may still hold from the last run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Sweep only this phase: one class of the workload, or `mix` (default: every class, then
    /// their mix). Reruns one class whose levels could not reach a verdict.
    #[arg(long, value_name = "NAME")]
    pub class: Option<String>,
    /// Run each level N times back to back at the same load (each repeat its own seed and
    /// files): the level passes only when every repeat does, and `compare` reads the repeats'
    /// spread as the noise floor.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Exit with status 3 when a phase's capacity is below LOAD (or none passed): a CI gate.
    #[arg(long, value_name = "LOAD")]
    pub fail_below: Option<f64>,
    /// HF tokenizer.json for exact prompt token counts (default: sized by the server's own
    /// tokenizer through its /tokenize, or usage).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Run directory (default: runs/<UTC date>T<time>Z, e.g. runs/20261129T215726Z).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Prometheus remote-write URL (e.g. http://127.0.0.1:9090/api/v1/write): each finished
    /// level's results are pushed there as series, after every level and at the end. A failed
    /// push is a warning; the run directory keeps everything.
    #[arg(long, value_name = "URL")]
    pub push_to: Option<String>,
    /// A short smoke run: short windows, coarse search.
    #[arg(long)]
    pub quick: bool,
    /// Print the built-in workload and SLO files and exit.
    #[arg(long)]
    pub print_defaults: bool,
    /// GPU preset of the embedded twin.
    #[arg(long, default_value = "a10g")]
    pub sim_gpu: String,
    /// Model preset of the embedded twin.
    #[arg(long, default_value = "qwen2.5-3b")]
    pub sim_model: String,
    /// How a level in progress shows on stderr: tui (a live view), plain (a line per level, a
    /// heartbeat at least every 10 s) or none (only the final table). Default: tui when stderr
    /// is a terminal, else plain.
    #[arg(long, value_enum)]
    pub progress: Option<crate::sweep_progress::ProgressMode>,
}

#[derive(Default)]
struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for Bars {
    fn level_start(&self, phase: &str, load: f64, mode: LoadMode, expected: Duration) {
        // `--progress plain`: lines only, the bar stays hidden.
        let pb = ProgressBar::with_draw_target(
            Some(expected.as_millis() as u64),
            indicatif::ProgressDrawTarget::hidden(),
        );
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg:<40} [{bar:30}] {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_message(format!(
            "{phase}: {} {}",
            headroom_core::slo::fmt_num(load),
            mode.unit()
        ));
        pb.enable_steady_tick(Duration::from_millis(200));
        let tick = pb.clone();
        std::thread::spawn(move || {
            while !tick.is_finished() && tick.position() < tick.length().unwrap_or(0) {
                std::thread::sleep(Duration::from_millis(200));
                tick.inc(200);
            }
        });
        // Without a terminal the bar is hidden: a heartbeat line at least every 10 s says the
        // level is still running (a level may run past its windows, up to 4 × measure).
        if pb.is_hidden() {
            let beat = pb.clone();
            let what = format!(
                "{phase}: {} {}",
                headroom_core::slo::fmt_num(load),
                mode.unit()
            );
            std::thread::spawn(move || {
                heartbeat(&beat, HEARTBEAT, |t| {
                    eprintln!("{}", heartbeat_line(&what, t, expected));
                });
            });
        }
        if let Ok(mut b) = self.bar.lock()
            && let Some(old) = b.replace(pb)
        {
            old.finish_and_clear();
        }
    }

    fn level_done(&self, phase: &str, l: &LevelResult) {
        if let Ok(mut b) = self.bar.lock()
            && let Some(pb) = b.take()
        {
            pb.finish_and_clear();
            // Failed and inconclusive objectives apart: `FAIL (error_rate; inconclusive: …)`.
            eprintln!("{}", crate::sweep_progress::level_line(phase, l));
        }
    }

    fn note(&self, msg: &str) {
        eprintln!("  {msg}");
    }
}

/// Interval of the heartbeat lines of a level without a terminal.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// Calls `say(elapsed)` every `every` until `bar` is finished: the heartbeat of a level whose
/// progress bar is hidden (stderr not a terminal).
fn heartbeat(bar: &ProgressBar, every: Duration, mut say: impl FnMut(Duration)) {
    let t0 = std::time::Instant::now();
    let mut next = every;
    while !bar.is_finished() {
        std::thread::sleep((every / 8).min(Duration::from_millis(250)));
        if t0.elapsed() >= next && !bar.is_finished() {
            say(t0.elapsed());
            next += every;
        }
    }
}

/// The longest prompt calibration may take before the sweep goes on with uncalibrated words.
const CALIBRATION_LIMIT: Duration = Duration::from_secs(120);

/// The workload and SLO of a run: each file as given (or the built-in), read once, parsed, and
/// checked against each other and against `--class` (a class of the workload, or `mix` when it
/// has several). `sweep` and `plan` both start from it; the texts are copied into the run
/// directory.
pub(crate) struct Specs {
    pub(crate) workload: Workload,
    pub(crate) workload_text: String,
    pub(crate) slo: SloFile,
    pub(crate) slo_text: String,
}

/// Reads [`Specs`].
///
/// # Errors
/// A file that cannot be read or parsed (naming it), SLO objectives for a class the workload
/// lacks, or a `--class` that is no phase of the workload.
pub(crate) fn read_specs(
    workload_path: Option<&Path>,
    slo_path: Option<&Path>,
    class: Option<&str>,
) -> Result<Specs> {
    let read = |p: &Path| {
        headroom_core::input_file::read_to_string(p, headroom_core::input_file::MAX_CONFIG_BYTES)
            .map_err(|e| headroom_core::yaml::YamlError::new(p, format!("cannot read file: {e}")))
    };
    let workload_text = match workload_path {
        Some(p) => read(p)?,
        None => DEFAULT_WORKLOAD_YAML.to_string(),
    };
    let workload = match workload_path {
        Some(p) => Workload::parse(&workload_text, p, p.parent().unwrap_or(Path::new(".")))?,
        None => Workload::builtin(),
    };
    let slo_text = match slo_path {
        Some(p) => read(p)?,
        None => DEFAULT_SLO_YAML.to_string(),
    };
    let slo = match slo_path {
        Some(p) => SloFile::parse(&slo_text, p)?,
        None => SloFile::parse(DEFAULT_SLO_YAML, Path::new("<built-in slo>"))?,
    };
    let names: Vec<&str> = workload
        .spec
        .classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for c in slo.named_classes() {
        if !names.contains(&c) {
            bail!(
                "{}: objectives for class `{c}`, which the workload does not define (classes: {})",
                slo_path.map_or("<built-in slo>".into(), |p| p.display().to_string()),
                names.join(", ")
            );
        }
    }
    if let Some(c) = class
        && !(names.contains(&c) || (c == "mix" && names.len() > 1))
    {
        bail!(
            "--class {c}: the workload has no such phase; expected one of {}{}",
            names.join(", "),
            if names.len() > 1 { ", mix" } else { "" }
        );
    }
    Ok(Specs {
        workload,
        workload_text,
        slo,
        slo_text,
    })
}

/// Runs the sweep; exit status 0 when it completed (whatever the verdicts), 130 when stopped by
/// Ctrl-C or SIGTERM (partial results written).
pub async fn run(args: SweepArgs, argv: Vec<String>) -> Result<i32> {
    // From here on Ctrl-C and SIGTERM stop the sweep cleanly (a signal before the first level
    // starts cancels it at once), instead of killing the process.
    let mut stop =
        crate::StopSignal::install().context("cannot install the Ctrl-C and SIGTERM handlers")?;
    if args.print_defaults {
        let s = |d: Duration| d.as_secs();
        let (dw, dm, qw, qm) = (
            s(policy::DEMO_WARMUP),
            s(policy::DEMO_MEASURE),
            s(policy::QUICK_WARMUP),
            s(policy::QUICK_MEASURE),
        );
        println!(
            "# workload.yaml (built-in)\n\
             # Its warmup/measure apply when it is given with --workload. Without --workload, a\n\
             # plain `headroom sweep` on the embedded twin is a demo sized to finish in under two\n\
             # minutes: warmup {dw}s, measure {dm}s, levels from 64 concurrent ×2; with\n\
             # --quick: warmup {qw}s, measure {qm}s, levels from 64 ×4 up to 512 on the\n\
             # embedded twin (from 16 against --target). --warmup and --measure override all of these.\n\
             {DEFAULT_WORKLOAD_YAML}\n# slo.yaml (built-in)\n{DEFAULT_SLO_YAML}"
        );
        return Ok(0);
    }
    // Every number on the command line is checked before anything starts, as the workload's
    // fields are: bad input is an error naming the flag, never a panic.
    let scrape_interval = flag_scrape_interval(args.scrape_interval)?;
    let push_client = push_client(args.push_to.as_deref())?;
    // Each spec file is read once: parsed here, and copied into the run directory below.
    let Specs {
        workload,
        workload_text,
        slo,
        slo_text,
    } = read_specs(
        args.workload.as_deref(),
        args.slo.as_deref(),
        args.class.as_deref(),
    )?;
    let mode = workload.spec.load.mode;
    for l in args.levels.iter().flatten() {
        check_level(mode, *l).map_err(|e| anyhow::anyhow!("--levels: {e}"))?;
    }
    for (flag, v) in [("--start", args.start), ("--max-load", args.max_load)] {
        if let Some(v) = v {
            check_level(mode, v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        }
    }
    if let (Some(a), Some(b)) = (args.start, args.max_load)
        && a > b
    {
        bail!("--start {a} is above --max-load {b}; expected start ≤ max-load");
    }
    let resolution_flag = args
        .resolution
        .as_deref()
        .map(|r| {
            parse_ratio(r)
                .and_then(|x| {
                    (x > 0.0 && x <= 10.0).then_some(x).ok_or_else(|| {
                        format!("`{r}`: expected a share above 0 and at most 1000% (e.g. 10%)")
                    })
                })
                .map_err(|e| anyhow::anyhow!("--resolution: {e}"))
        })
        .transpose()?;
    let warmup_flag = args
        .warmup
        .map(|v| flag_window("--warmup", v.as_secs_f64(), true))
        .transpose()?;
    let measure_flag = args
        .measure
        .map(|v| flag_window("--measure", v.as_secs_f64(), false))
        .transpose()?;
    let tokenizer = match &args.tokenizer {
        Some(p) => Some(Arc::new(PromptTokenizer::from_file(p)?)),
        None => None,
    };
    let plans: Vec<ClassPlan> = ClassPlan::from_workload(&workload, tokenizer.clone())?;

    // The target: given, or the embedded twin.
    let mut embedded = None;
    let (base, metrics_default, dcgm_default) = match &args.target {
        Some(t) => (
            t.clone(),
            Some(format!(
                "{}/metrics",
                t.trim_end_matches('/').trim_end_matches("/v1")
            )),
            None,
        ),
        None => {
            let spec = headroom_sim::SimSpec {
                gpu: args.sim_gpu.clone(),
                model: args.sim_model.clone(),
                // Exact per-request queue times, as vLLM --enable-per-request-metrics gives.
                enable_per_request_metrics: true,
                ..headroom_sim::SimSpec::default()
            };
            let cfg = headroom_sim::server::ServerConfig {
                host: "127.0.0.1".parse().context("loopback address")?,
                port: 0,
                dcgm_port: Some(0),
                spec,
                faults: Default::default(),
                api_key: None,
                first_chunk_probe: None,
            };
            let h = headroom_sim::server::serve(cfg)
                .await
                .context("starting the embedded engine twin")?;
            let base = format!("http://{}", h.api_addr);
            let m = format!("{base}/metrics");
            let d = format!("http://{}/metrics", h.dcgm_addr);
            eprintln!(
                "headroom: no --target given; sweeping the embedded engine twin ({} + {}) on {base}",
                args.sim_gpu, args.sim_model
            );
            embedded = Some(h);
            (base, Some(m), Some(d))
        }
    };
    let api_key = match &args.api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .with_context(|| format!("--api-key-env {var}: the variable is not set"))?,
        ),
        None => None,
    };
    let model = args.model.clone().or(workload.spec.model.clone());
    let target = Target::new(&base, api_key.as_deref(), model.as_deref())?;
    let endpoints: Vec<_> = {
        let mut e: Vec<_> = plans.iter().map(|p| p.endpoint).collect();
        e.dedup();
        e
    };
    let info = probe(&target, &endpoints).await?;
    let target = target.with_model(&info.model);
    // Requests longer than the server's context window are rejected: refuse a workload none of
    // whose requests fit, before any load; warn when only the longest do not.
    if let Some(len) = info
        .models
        .iter()
        .find(|m| m.id == info.model)
        .and_then(|m| m.max_model_len)
    {
        let warnings = workload.check_context(len).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}",
                args.workload
                    .as_ref()
                    .map_or("<built-in workload>".into(), |p| p.display().to_string())
            )
        })?;
        for w in warnings {
            eprintln!("headroom: warning: {w}");
        }
    }

    // Windows and search: the workload's, unless this is the embedded demo or --quick; flags
    // win over both (headroom_sweep::policy).
    let policy = SweepPolicy::new(
        &workload.spec,
        args.target.is_none(),
        args.workload.is_some(),
        args.quick,
        Overrides {
            levels: args.levels.clone(),
            start: args.start,
            max_load: args.max_load,
            resolution: resolution_flag,
            warmup: warmup_flag,
            measure: measure_flag,
        },
    );
    let (warmup, measure) = policy.windows();
    let run_dir = args.out.clone().unwrap_or_else(default_run_dir);
    std::fs::create_dir_all(&run_dir)
        .with_context(|| format!("cannot create run directory {}", run_dir.display()))?;
    let metrics_url = if args.no_metrics {
        None
    } else {
        args.metrics_url.clone().or(metrics_default)
    };
    let dcgm_url = args.dcgm.clone().or(dcgm_default);
    let seed = match args.seed.or(workload.spec.seed) {
        Some(s) => s,
        None => {
            let s = rand::random::<u64>() >> 11; // 53 bits: exact in JSON readers that use f64
            eprintln!("headroom: seed {s} (new for this run; --seed {s} repeats it)");
            s
        }
    };
    // Prompt sizes: the twin counts one token per word; a real server's tokenizer is learned
    // (its /tokenize, else usage) so that the workload's token counts are what it prefills.
    let (plans, calibration) = if args.target.is_none() {
        (plans, None)
    } else {
        eprintln!(
            "headroom: sizing prompts by the server's tokenizer (at most {} s; Ctrl-C stops)",
            CALIBRATION_LIMIT.as_secs()
        );
        let tok_path = args.tokenizer.as_deref().map(|p| p.display().to_string());
        let calibration = async {
            let (cal, mut report) = headroom_load::calibrate::calibrate(
                &target,
                &plans,
                tokenizer.as_deref(),
                tok_path.as_deref(),
            )
            .await;
            let plans = ClassPlan::calibrated(&plans, Arc::new(cal))?;
            headroom_load::calibrate::check_plans(&target, &plans, seed, &mut report).await;
            anyhow::Ok((plans, report))
        };
        // Bounded in time, and stoppable: a slow tokenizer endpoint (each answer just inside the
        // client's deadline) would otherwise hold the sweep for many minutes before any level.
        let (plans, report) = tokio::select! {
            r = tokio::time::timeout(CALIBRATION_LIMIT, calibration) => match r {
                Ok(r) => r?,
                Err(_) => {
                    let reason = format!(
                        "calibration did not finish within {} s (a slow /tokenize or server); prompts are uncalibrated words — pass --tokenizer PATH for exact counts",
                        CALIBRATION_LIMIT.as_secs()
                    );
                    let (cal, report) =
                        headroom_load::calibrate::CalibrationReport::uncalibrated(reason);
                    let plans = ClassPlan::calibrated(&plans, Arc::new(cal))?;
                    (plans, report)
                }
            },
            sig = stop.recv() => {
                eprintln!("\nheadroom: {sig} during prompt calibration: stopped before the first level");
                return Ok(130);
            }
        };
        for line in calibration_lines(&report) {
            eprintln!("headroom: {line}");
        }
        (plans, Some(report))
    };
    let settings = policy.settings(Wiring {
        metrics_url: metrics_url.clone(),
        dcgm_url: dcgm_url.clone(),
        scrape_interval,
        run_dir: run_dir.clone(),
        seed,
        only_phase: args.class.clone(),
        repeat: args.repeat,
    });
    let manifest = Manifest {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: redact_argv(&argv),
        started_unix_s: headroom_signals::scrape::unix_now_s(),
        target: if args.target.is_some() {
            redact_url(&base)
        } else {
            format!("embedded ({base})")
        },
        api_key: api_key.is_some(),
        model: info.model.clone(),
        models: info.models_raw.clone(),
        server_version: info.version_raw.clone().unwrap_or(serde_json::Value::Null),
        engine_config: {
            let mut c = served_configuration(metrics_url.as_deref(), dcgm_url.as_deref()).await;
            c["embedded_twin"] = serde_json::json!(
                args.target
                    .is_none()
                    .then(|| serde_json::json!({"gpu": args.sim_gpu, "model": args.sim_model}))
            );
            c
        },
        // The workload as run: windows overridden by flags, --quick or the embedded demo.
        workload: {
            let mut spec = workload.spec.clone();
            spec.warmup = warmup;
            spec.measure = measure;
            serde_json::to_value(&spec).unwrap_or_default()
        },
        slo: serde_json::to_value(&slo).unwrap_or_default(),
        seed,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        metrics_url: metrics_url.as_deref().map(redact_url),
        dcgm_url: dcgm_url.as_deref().map(redact_url),
        prompt_calibration: calibration
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok())
            .unwrap_or_default(),
    };
    // The spec files as given, so the run directory is reproducible and `headroom diagnose
    // --from RUN_DIR` judges against the same SLO; workload.yaml with the windows as run (also
    // in manifest.json) when flags, --quick or the demo overrode the file's.
    let workload_text = crate::workload_as_run::workload_as_run(
        &workload_text,
        args.workload
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(".")),
        (workload.spec.warmup, workload.spec.measure),
        (warmup, measure),
    );
    RunDir::new(&run_dir)
        .write_inputs(&slo_text, &workload_text, &manifest)
        .context("cannot write the run directory")?;

    let cancel = CancellationFlag::new();
    {
        let c = cancel.clone();
        tokio::spawn(async move {
            let sig = stop.recv().await;
            eprintln!(
                "\nheadroom: {sig}: stopping after cancelling in-flight requests; finished levels are kept"
            );
            c.cancel();
        });
    }
    // What each run file's latest write did, so the closing line names only files that exist.
    let files: Arc<Mutex<FileLog>> = Arc::default();
    // Pushes run beside the sweep: a slow or dead receiver never holds up a level.
    let pusher = push_client.map(|c| {
        Pusher::spawn(c, remote_write::run_id(&run_dir), |e| {
            eprintln!(
                "headroom: warning: push failed: {e}; the sweep goes on, the run directory has every level"
            );
        })
    });
    let push = pusher.as_ref();
    let on_result = {
        let dir = run_dir.clone();
        let files = files.clone();
        move |r: &RunResult| {
            let got = headroom_report::write_run_files(&dir, r);
            let mut log = files
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            log.record(&got);
            if let Some(p) = push {
                p.offer(r);
            }
            got.map(|_| ()).map_err(|e| e.to_string())
        }
    };
    let lag_fn = embedded.as_ref().map(|h| {
        move || {
            let l = h.clock_lag();
            (l.steps, l.late_steps, l.late_s)
        }
    });
    eprintln!(
        "headroom: sweeping {} of {} at {}; run directory {}",
        match (args.class.as_deref(), plans.len()) {
            (Some("mix"), n) => format!("the mix of {n} classes"),
            (Some(c), _) => format!("class {c} alone (--class)"),
            (None, 1) => "1 class".to_string(),
            (None, n) => format!("{n} classes, then their mix"),
        },
        info.model,
        redact_url(&base),
        run_dir.display()
    );
    eprintln!(
        "headroom: each level: {} warm-up, {} measurement window{}",
        fmt_secs(warmup),
        fmt_secs(measure),
        policy.windows_source()
    );
    let progress: Box<dyn Progress> = match args.progress.unwrap_or_else(ProgressMode::detect) {
        ProgressMode::Tui => match crate::sweep_progress::Tui::start() {
            Ok(t) => Box::new(t),
            Err(e) => {
                eprintln!("headroom: no live view ({e}); lines as with --progress plain");
                Box::new(Bars::default())
            }
        },
        ProgressMode::Plain => Box::new(Bars::default()),
        ProgressMode::None => Box::new(crate::sweep_progress::Silent),
    };
    let sweep = Sweep {
        target: &target,
        plans: &plans,
        slo: &slo,
        settings: &settings,
        cancel: cancel.clone(),
        progress: progress.as_ref(),
        on_result: &on_result,
        clock_lag: lag_fn
            .as_ref()
            .map(|f| f as &(dyn Fn() -> (u64, u64, f64) + Send + Sync)),
        measurer: None,
    };
    let result = sweep.run().await;
    drop(progress); // leaves the live view before the table prints
    if let Some(h) = embedded {
        h.shutdown().await;
    }
    if let (Some(p), Some(url)) = (pusher, &args.push_to) {
        let report = p.finish(remote_write::client::FINISH_WAIT).await;
        match report.warning(&redact_url(url)) {
            Some(w) => eprintln!("headroom: warning: {w}"),
            None => eprintln!(
                "headroom: pushed {} samples to {} (job=\"headroom\", run_id=\"{}\")",
                report.samples,
                redact_url(url),
                remote_write::run_id(&run_dir)
            ),
        }
    }
    println!("{}", headroom_report::terminal::render(&result));
    let log = files
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    println!("{}", log.describe(&run_dir));
    if let Some(e) = &log.error {
        bail!("could not write the run directory: {e}");
    }
    // No capacity in any phase is not a result a script should read as success; with
    // --fail-below, any phase under the floor (or with none) fails.
    let none_anywhere =
        !result.phases.is_empty() && result.phases.iter().all(|p| p.capacity.is_none());
    let short: Vec<String> = result
        .phases
        .iter()
        .filter(|p| match (p.capacity, args.fail_below) {
            (None, Some(_)) => true,
            (None, None) => none_anywhere,
            (Some(c), Some(floor)) => c < floor,
            (Some(_), None) => false,
        })
        .map(|p| {
            format!(
                "{} ({})",
                p.name,
                p.capacity.map_or("none passed".into(), |c| {
                    headroom_report::fmt_load(c, p.mode)
                })
            )
        })
        .collect();
    if !short.is_empty() && !cancel.is_cancelled() {
        eprintln!(
            "headroom: {}: {}",
            match args.fail_below {
                Some(f) => format!(
                    "capacity below --fail-below {}",
                    headroom_core::slo::fmt_num(f)
                ),
                None => "no capacity found".into(),
            },
            short.join(", ")
        );
    }
    Ok(match &result.status {
        _ if cancel.is_cancelled() => 130,
        headroom_core::run::RunStatus::Stopped { .. } => 1,
        _ if !short.is_empty() => 3,
        _ => 0,
    })
}

/// What the servers say of their configuration before the first level, for the manifest (what
/// `headroom compare` names as a material change): the engine detected in one scrape of
/// `metrics_url` and every label of vLLM's `cache_config_info` (block size, GPU memory share,
/// prefix caching, KV blocks: the flags vLLM exposes); the GPUs' `modelName`s from one scrape of
/// dcgm-exporter. A scrape that fails leaves its part out (`null`), with no error: the sweep's
/// own scrapes report a missing endpoint.
async fn served_configuration(
    metrics_url: Option<&str>,
    dcgm_url: Option<&str>,
) -> serde_json::Value {
    let limit = Duration::from_secs(3);
    let mut out = serde_json::json!({"engine": null, "cache_config": null, "gpus": null});
    if let Some(u) = metrics_url
        && let Ok(s) = headroom_signals::scrape_once(u, limit).await
    {
        let d = headroom_signals::adapter::detect(&s.exposition);
        out["engine"] = serde_json::json!(d.engine.name());
        if let Some(c) = s.exposition.samples("vllm:cache_config_info").next() {
            let labels: serde_json::Map<String, serde_json::Value> = c
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
                .collect();
            out["cache_config"] = serde_json::Value::Object(labels);
        }
    }
    if let Some(u) = dcgm_url
        && let Ok(s) = headroom_signals::scrape_once(u, limit).await
    {
        let snap = headroom_signals::adapter::dcgm_snapshot(&s.exposition);
        let gpus: Vec<serde_json::Value> = snap
            .gpus
            .iter()
            .map(|g| serde_json::json!({"gpu": g.id.gpu, "model": g.model}))
            .collect();
        out["gpus"] = serde_json::Value::Array(gpus);
    }
    out
}

/// The terminal's account of a prompt calibration: the method, the overhead, each class's
/// check, and a warning when a check is off by more than 2 %.
fn calibration_lines(r: &headroom_load::calibrate::CalibrationReport) -> Vec<String> {
    use headroom_load::calibrate::Method;
    let mut out = Vec::new();
    let words = match (r.vocabulary_words, r.words_measured) {
        (Some(v), m) if m > 0 => format!(": {v} of {m} words are one token each"),
        _ => String::new(),
    };
    let overhead = if r.overhead_tokens.is_empty() {
        String::new()
    } else {
        format!(
            "; the server adds {} per request",
            r.overhead_tokens
                .iter()
                .map(|(s, n)| format!(
                    "{n} token{} ({})",
                    if *n == 1 { "" } else { "s" },
                    serde_json::to_value(s)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    out.push(format!(
        "prompts sized by {}{words}{overhead} ({} calibration requests, outside every level)",
        r.method.describe(),
        r.requests_sent
    ));
    for n in &r.notes {
        out.push(format!("calibration: {n}"));
    }
    if !r.checks.is_empty() {
        out.push(format!(
            "calibration check, prompt tokens requested → realised: {}",
            r.checks
                .iter()
                .map(|c| format!("{} {} → {}", c.class, c.requested, c.realised))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(x) = r.worst_residual().filter(|x| x.abs() > 0.02) {
        let fix = match r.method {
            Method::Tokenizer { .. } => "check that the tokenizer is the served model's",
            _ => "pass --tokenizer PATH (the served model's tokenizer.json) for exact counts",
        };
        out.push(format!(
            "warning: after calibration prompts are still {:+.0} % off the workload's sizes; {fix}",
            x * 100.0
        ));
    }
    out
}

/// What the writes of the run files did: which files the latest write put in place, which exist
/// only from an earlier write, which the latest failed write removed, and the last error.
#[derive(Debug, Default)]
pub(crate) struct FileLog {
    /// Written by the latest write (current).
    current: Vec<&'static str>,
    /// Written by some earlier write but not the latest (they hold older results).
    stale: Vec<&'static str>,
    /// Removed by the latest write, which could not replace them (they would have shown an
    /// older state of the run).
    removed: Vec<&'static str>,
    /// The latest write's error.
    pub(crate) error: Option<String>,
}

impl FileLog {
    pub(crate) fn record(
        &mut self,
        got: &Result<Vec<&'static str>, headroom_report::RunFilesError>,
    ) {
        let (now, removed, error) = match got {
            Ok(w) => (w.clone(), Vec::new(), None),
            Err(e) => (e.written.clone(), e.removed.clone(), Some(e.to_string())),
        };
        let mut ever: Vec<&'static str> = self.current.iter().chain(&self.stale).copied().collect();
        ever.retain(|f| !now.contains(f) && !removed.contains(f));
        self.stale = ever;
        self.current = now;
        self.removed = removed;
        self.error = error;
    }

    /// The closing line: the run directory and only the files that exist in it.
    pub(crate) fn describe(&self, dir: &Path) -> String {
        let mut s = format!("Run directory: {}", dir.display());
        if self.current.is_empty() && self.stale.is_empty() {
            s.push_str(" (no results file could be written)");
        }
        if !self.current.is_empty() {
            s.push_str(&format!(" ({})", self.current.join(", ")));
        }
        if !self.stale.is_empty() {
            s.push_str(&format!(
                "; from an earlier level only (the last write failed): {}",
                self.stale.join(", ")
            ));
        }
        if !self.removed.is_empty() {
            s.push_str(&format!(
                "; removed, as the last write could not replace them: {}",
                self.removed.join(", ")
            ));
        }
        s
    }
}

/// The remote-write client for `--push-to URL`, checked before anything starts.
///
/// # Errors
/// The URL is not `http://host:port/path`; the message names the flag.
pub(crate) fn push_client(url: Option<&str>) -> Result<Option<RemoteWriteClient>> {
    url.map(RemoteWriteClient::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--push-to: {e}"))
}

/// `--warmup` / `--measure` in seconds, checked as the workload's `warmup` / `measure` are.
/// The plain heartbeat of a level `t` into a run of about `planned` (warm-up and window).
fn heartbeat_line(what: &str, t: Duration, planned: Duration) -> String {
    let (t, planned) = (t.as_secs_f64(), planned.as_secs_f64());
    if t <= planned {
        format!("  {what}: running, {t:.0} s of ~{planned:.0} s")
    } else {
        // Past the warm-up and window: the window extended while an objective lacks samples,
        // or the drain of the requests still in flight when it closed.
        format!(
            "  {what}: running, {t:.0} s (past the ~{planned:.0} s of warm-up and window planned: the window is extended while an objective lacks samples, then requests in flight drain)"
        )
    }
}

pub(crate) fn flag_window(flag: &str, secs: f64, allow_zero: bool) -> Result<Duration> {
    window_from_secs(secs, allow_zero).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// Shortest and longest time between scrapes, seconds: a scrape costs the engine a little, and a
/// level needs at least two scrapes to see anything.
const SCRAPE_INTERVAL_S: std::ops::RangeInclusive<f64> = 0.2..=3600.0;

/// `--scrape-interval`: from 0.2 s to 1 h.
fn flag_scrape_interval(d: Duration) -> Result<Duration> {
    let secs = d.as_secs_f64();
    if !SCRAPE_INTERVAL_S.contains(&secs) {
        bail!(
            "--scrape-interval: {secs}: expected seconds from {} to {} (e.g. 2)",
            SCRAPE_INTERVAL_S.start(),
            SCRAPE_INTERVAL_S.end()
        );
    }
    Ok(d)
}

/// The command line as stored in `manifest.json`: every URL without its userinfo and query
/// ([`redact_url`]), whatever the form — `--flag URL`, `--flag=URL`, `NAME=URL` — and the value
/// of every secret-looking flag or variable (`key`, `token`, `secret`, `password`, `auth` in its
/// name; not `--api-key-env`, whose value names a variable, nor `--tokenizer`) replaced by
/// `<redacted>`.
pub(crate) fn redact_argv(argv: &[String]) -> Vec<String> {
    fn secret_name(name: &str) -> bool {
        let l = name.to_lowercase();
        ["key", "token", "secret", "password", "passwd", "auth"]
            .iter()
            .any(|w| l.contains(w))
            && !l.ends_with("-env")
            && !l.starts_with("--tokenizer")
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if std::mem::take(&mut hide_next) {
            out.push("<redacted>".into());
            continue;
        }
        // `NAME=VALUE` (a flag or a variable), unless the first `=` is inside a URL's query.
        match a.split_once('=').filter(|(k, _)| !k.contains("://")) {
            Some((k, _)) if secret_name(k) => out.push(format!("{k}=<redacted>")),
            Some((k, v)) if v.contains("://") => out.push(format!("{k}={}", redact_url(v))),
            Some(_) => out.push(a.clone()),
            None if a.contains("://") => out.push(redact_url(a)),
            None => {
                hide_next = a.starts_with('-') && secret_name(a);
                out.push(a.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// The closing line names exactly the files that exist: none, the current ones, and those
    /// left from an earlier write; not those a failed write removed.
    #[test]
    fn the_closing_line_names_only_written_files() {
        use std::path::Path;
        let err = |written: Vec<&'static str>, file, removed: Vec<&'static str>| {
            Err(headroom_report::RunFilesError {
                written,
                file,
                removed,
                source: std::io::Error::other("No space left on device"),
            })
        };
        let dir = Path::new("runs/x");
        let mut log = super::FileLog::default();
        log.record(&err(vec![], "results.json", vec![]));
        assert_eq!(
            log.describe(dir),
            "Run directory: runs/x (no results file could be written)"
        );
        assert!(log.error.as_deref().unwrap().contains("No space"));
        log.record(&Ok(headroom_report::RUN_FILES.to_vec()));
        assert_eq!(
            log.describe(dir),
            "Run directory: runs/x (results.json, levels.csv, report.md, report.html)"
        );
        assert_eq!(log.error, None);
        log.record(&err(vec!["results.json"], "levels.csv", vec![]));
        assert_eq!(
            log.describe(dir),
            "Run directory: runs/x (results.json); from an earlier level only (the last write failed): levels.csv, report.md, report.html"
        );
        // Renderings the failed write removed are no longer named as present.
        log.record(&err(
            vec!["results.json", "levels.csv"],
            "report.md",
            vec!["report.md", "report.html"],
        ));
        assert_eq!(
            log.describe(dir),
            "Run directory: runs/x (results.json, levels.csv); removed, as the last write could not replace them: report.md, report.html"
        );
        log.record(&err(vec![], "results.json", vec!["levels.csv"]));
        assert_eq!(
            log.describe(dir),
            "Run directory: runs/x; from an earlier level only (the last write failed): results.json; removed, as the last write could not replace them: levels.csv"
        );
    }

    fn redact(a: &[&str]) -> Vec<String> {
        let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        super::redact_argv(&a)
    }

    #[test]
    fn argv_secrets_removed() {
        assert_eq!(
            redact(&[
                "headroom",
                "sweep",
                "--api-key",
                "sk-1",
                "--target",
                "http://u:p@h:1",
                "--token=abc",
                "--api-key-env",
                "VAR",
                "--tokenizer",
                "tok.json",
            ]),
            vec![
                "headroom",
                "sweep",
                "--api-key",
                "<redacted>",
                "--target",
                "http://h:1",
                "--token=<redacted>",
                "--api-key-env",
                "VAR",
                "--tokenizer",
                "tok.json",
            ]
        );
    }

    /// A URL's userinfo and query go in every form a URL can take on the command line, whatever
    /// else the argument looks like (the query once held `token=`, which sent the whole
    /// argument down the secret-flag path and kept `u2:SECRETM@`).
    #[test]
    fn urls_lose_credentials_in_every_argv_form() {
        let url = "http://u2:SECRETM@127.0.0.1:18000/metrics?token=SECRETQ";
        let clean = "http://127.0.0.1:18000/metrics";
        for flag in ["--metrics-url", "--target", "--dcgm"] {
            assert_eq!(redact(&[flag, url]), vec![flag.to_string(), clean.into()]);
            assert_eq!(
                redact(&[&format!("{flag}={url}")]),
                vec![format!("{flag}={clean}")]
            );
        }
        // Variable style and a bare URL.
        assert_eq!(
            redact(&[&format!("METRICS_URL={url}")]),
            vec![format!("METRICS_URL={clean}")]
        );
        assert_eq!(redact(&[url]), vec![clean.to_string()]);
        // A secret flag's value is hidden even when it is a URL.
        assert_eq!(
            redact(&["--api-key", url, "--auth-token=x://y"]),
            vec!["--api-key", "<redacted>", "--auth-token=<redacted>"]
        );
        // Secret-looking variables: value hidden, name kept.
        assert_eq!(
            redact(&["HF_TOKEN=hf_abc", "DB_PASSWORD=p"]),
            vec!["HF_TOKEN=<redacted>", "DB_PASSWORD=<redacted>"]
        );
        for a in [
            "--target",
            url,
            &format!("--metrics-url={url}"),
            &format!("X={url}"),
        ] {
            let r = redact(&[a]).join(" ");
            assert!(!r.contains("SECRET"), "{a} -> {r}");
        }
    }
}

/// `runs/<UTC yyyymmdd>T<hhmmss>Z`: sorts by time and reads as a date; a suffix `-2`, `-3`, …
/// when two runs start in the same second.
pub(crate) fn default_run_dir() -> PathBuf {
    let base = PathBuf::from("runs").join(utc_stamp(chrono::Utc::now()));
    let mut dir = base.clone();
    let mut n = 2;
    while dir.exists() {
        dir = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    dir
}

/// `yyyymmddThhmmssZ`.
fn utc_stamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

#[cfg(test)]
mod flag_tests {
    use clap::Parser;

    /// A level ran 42 s with nothing printed when stderr was not a terminal: the heartbeat
    /// speaks every interval until the level's bar is finished, then stops.
    #[test]
    fn a_hidden_level_beats_until_it_finishes() {
        use std::time::Duration;
        let bar = indicatif::ProgressBar::hidden();
        let beats = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (b, log) = (bar.clone(), beats.clone());
        let t = std::thread::spawn(move || {
            super::heartbeat(&b, Duration::from_millis(40), |e| {
                log.lock().unwrap().push(e)
            })
        });
        std::thread::sleep(Duration::from_millis(210));
        bar.finish_and_clear();
        t.join().unwrap();
        let n = beats.lock().unwrap().len();
        assert!((1..=5).contains(&n), "{n} beats in 210 ms at 40 ms");
        assert!(super::HEARTBEAT <= Duration::from_secs(10));
    }

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: super::SweepArgs,
    }

    /// Without `--seed` and without `seed:` in the workload, every run draws its own seed and
    /// records it, so a rerun does not replay prompts the engine's prefix cache still holds; a
    /// given `--seed` is used as is.
    #[test]
    fn the_heartbeat_says_when_the_window_runs_past_its_plan() {
        let l = |t| {
            super::heartbeat_line(
                "c: 8 concurrent",
                std::time::Duration::from_secs(t),
                std::time::Duration::from_secs(6),
            )
        };
        assert_eq!(l(4), "  c: 8 concurrent: running, 4 s of ~6 s");
        assert!(
            l(20).starts_with(
                "  c: 8 concurrent: running, 20 s (past the ~6 s of warm-up and window planned"
            ),
            "{}",
            l(20)
        );
    }

    #[test]
    fn a_run_without_a_seed_draws_its_own_and_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let wl = dir.path().join("w.yaml");
        std::fs::write(
            &wl,
            "load: {mode: concurrency, levels: [1]}\nclasses:\n  - {name: tiny, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 2}, ignore_eos: true}\n",
        )
        .unwrap();
        let run = |out: &str, extra: &[&str]| -> u64 {
            let out = dir.path().join(out);
            let mut argv = vec![
                "sweep".to_string(),
                "--workload".into(),
                wl.display().to_string(),
                "--warmup".into(),
                "0".into(),
                "--measure".into(),
                "0.5".into(),
                "--out".into(),
                out.display().to_string(),
            ];
            argv.extend(extra.iter().map(|s| s.to_string()));
            let t = T::try_parse_from(&argv).unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            let code = rt.block_on(super::run(t.a, argv)).unwrap();
            assert_eq!(code, 0);
            let m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap())
                    .unwrap();
            m["seed"].as_u64().expect("manifest.json records the seed")
        };
        let (a, b) = (run("a", &[]), run("b", &[]));
        assert_ne!(a, b, "two runs without a seed drew the same one");
        assert!(a < 1 << 53 && b < 1 << 53);
        assert_eq!(run("c", &["--seed", "5"]), 5);
    }

    /// Runs `headroom sweep ARGS` up to its first error; bad flags fail before anything starts
    /// (no engine twin, no load), so each call returns at once. A value clap refuses (a time
    /// that is not one) comes back as clap's message, which names the flag as `'--flag <NAME>'`.
    fn sweep_error(args: &[&str]) -> String {
        let argv: Vec<String> = std::iter::once("sweep")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        let t = match T::try_parse_from(&argv) {
            Ok(t) => t,
            Err(e) => return e.to_string(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        match rt.block_on(super::run(t.a, argv)) {
            Ok(code) => panic!("{args:?} accepted (exit {code})"),
            Err(e) => format!("{e:#}"),
        }
    }

    /// Every numeric flag of `sweep`, with every kind of bad value: negative, NaN, ±∞, zero
    /// where it must be positive, past `Duration`'s range, past its bound. Each is an error
    /// naming the flag (exit 2 in `main`), never a panic: clap's for a time that is not one
    /// (negative, NaN, ±∞, past `Duration`), the command's for one out of its range.
    #[test]
    fn every_numeric_flag_rejects_every_bad_value() {
        let not_numbers = ["nan", "inf", "-inf", "1e300"];
        let mut cases: Vec<(String, &str)> = Vec::new();
        for v in not_numbers.iter().chain(&["-1", "1e19", "86401"]) {
            cases.push((format!("--warmup={v}"), "--warmup"));
            cases.push((format!("--measure={v}"), "--measure"));
        }
        cases.push(("--measure=0".into(), "--measure"));
        for v in not_numbers.iter().chain(&["-1", "0", "0.1", "3601"]) {
            cases.push((format!("--scrape-interval={v}"), "--scrape-interval"));
        }
        for v in not_numbers
            .iter()
            .chain(&["-3", "0", "0.5", "1e-300", "2000000"])
        {
            cases.push((format!("--levels={v}"), "--levels"));
            cases.push((format!("--start={v}"), "--start"));
            cases.push((format!("--max-load={v}"), "--max-load"));
        }
        cases.push(("--levels=1,nan,-3".into(), "--levels"));
        for v in ["0", "-5%", "nan", "inf", "2000%"] {
            cases.push((format!("--resolution={v}"), "--resolution"));
        }
        for (arg, flag) in &cases {
            let e = std::panic::catch_unwind(|| sweep_error(&[arg.as_str()]))
                .unwrap_or_else(|_| panic!("{arg} panicked"));
            assert!(
                e.starts_with(&format!("{flag}:")) || e.contains(&format!("for '{flag} <")),
                "{arg}: {e}"
            );
        }
        let e = sweep_error(&["--scrape-interval", "100ms"]);
        assert!(
            e.starts_with("--scrape-interval: 0.1: expected seconds from 0.2 to 3600"),
            "{e}"
        );
        let e = sweep_error(&["--warmup=-1"]);
        assert!(e.contains("`-1` is not a time of 0 or more"), "{e}");
        let e = sweep_error(&["--measure", "25h"]);
        assert!(
            e.starts_with("--measure: 90000 s is longer than a day"),
            "{e}"
        );
        let e = sweep_error(&["--start", "8", "--max-load", "4"]);
        assert!(e.contains("--start 8 is above --max-load 4"), "{e}");
    }
}

#[cfg(test)]
mod run_dir_tests {
    #[test]
    fn utc_stamps_match_known_dates() {
        // Known instants: the epoch, 2000-02-29 (leap day), and 2026-11-29 21:57:26 UTC.
        for (unix_s, want) in [
            (0, "19700101T000000Z"),
            (951_782_400, "20000229T000000Z"),
            (1_795_989_446, "20261129T215726Z"),
        ] {
            let t = chrono::DateTime::from_timestamp(unix_s, 0).unwrap();
            assert_eq!(super::utc_stamp(t), want);
        }
    }
}

/// `3s`, `1.5s`, `2m`: a window length as users write it.
pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{}m", s / 60.0)
    } else {
        format!("{s}s")
    }
}
