//! The sweep loop: for each phase (each class alone, then the mix), choose levels with
//! [`Search`], run each with [`run_level_with`] while scraping the engine (and dcgm-exporter),
//! judge it, and write every result so far to the run directory after every level — a later
//! failure, a dead server or Ctrl-C never loses a finished level (hyperfine's habit).

use super::evaluate::{ClientEvidence, evaluate};
use super::search::{LevelPlan, Search};
use super::server_view::{ClientTotals, reconcile, server_view, ttft_remainder};
use headroom_core::objective::{Bound, ObjectiveId, Source};
use headroom_core::run::{
    LevelResult, LoadMode, ObjectiveResult, PhaseResult, RESULTS_SCHEMA_VERSION, RunResult,
    RunStatus, ServerView, TokenCounts,
};
use headroom_core::slo::SloFile;
use headroom_core::{LatencySignal, Objective, Outcome, SloSpec, Verdict};
use headroom_diagnose::{ClientView, Origin, PrefixPlan, Setting, WorkloadDrift, assess_with};
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::recorder::{ClassRecording, LevelRecording};
use headroom_load::runner::{GoodputSlo, LevelCheck, LevelSpec, RunOptions, run_level_with};
use headroom_signals::source::{ScrapeKind, scrape_file_name, write_scrape};
use headroom_signals::{Scrape, Scraper, Window, WindowOptions};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the sweep runs, beyond the workload and the SLO.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    /// Closed loop (concurrency) or open loop (rate).
    pub mode: LoadMode,
    /// Open-loop gap distribution.
    pub arrival: ArrivalProcess,
    /// Open-loop cap on requests in flight.
    pub max_concurrency: Option<u32>,
    /// Levels, given or automatic.
    pub plan: LevelPlan,
    /// Warm-up per level: requests started in it are not recorded.
    pub warmup: Duration,
    /// Measurement window per level.
    pub measure: Duration,
    /// Longest window when a percentile is still undecided at `measure` (≥ `measure`).
    pub measure_max: Duration,
    /// Longest drain of in-flight requests after the window.
    pub drain_max: Duration,
    /// Engine `/metrics` URL; `None` skips the server view.
    pub metrics_url: Option<String>,
    /// dcgm-exporter URL.
    pub dcgm_url: Option<String>,
    /// Time between scrapes during a level.
    pub scrape_interval: Duration,
    /// Run directory (created by the caller).
    pub run_dir: PathBuf,
    /// Base seed; each level derives its own.
    pub seed: u64,
    /// Run only this phase (a class name, or `mix`); `None`: every class, then the mix.
    pub only_phase: Option<String>,
    /// Times each level is run back to back at the same load (1: once). The repeats are kept in
    /// [`LevelResult::repeats`]; the search reads their strictest verdict ([`combine_repeats`]).
    pub repeat: u32,
}

/// Progress callbacks (the CLI draws bars; tests record).
pub trait Progress: Send + Sync {
    /// A level begins; `expected` is its planned duration (warm-up + window).
    fn level_start(&self, phase: &str, load: f64, mode: LoadMode, expected: Duration);
    /// A level ended.
    fn level_done(&self, phase: &str, level: &LevelResult);
    /// Something worth saying once.
    fn note(&self, msg: &str);
    /// The level in progress, about once a second during its measurement window (live views;
    /// the default ignores it).
    fn level_tick(&self, _tick: &LevelTick) {}
}

/// What a level's window has gathered so far: the objectives as the early-stop check judged
/// them on the recording (samples, percentile, verdict), without any histogram copied out.
#[derive(Debug, Clone)]
pub struct LevelTick {
    /// Time since the measurement window opened.
    pub window_elapsed: Duration,
    /// Requests started in the window.
    pub started: u64,
    /// Requests of the window that ended (any outcome).
    pub finished: u64,
    /// Each objective on the window so far (not final: a verdict may still change).
    pub objectives: Vec<ObjectiveResult>,
}

/// The newest [`LevelTick`], sent by the check for [`Progress::level_tick`].
type TickSlot = tokio::sync::watch::Sender<Option<LevelTick>>;

/// A [`Progress`] that says nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn level_start(&self, _: &str, _: f64, _: LoadMode, _: Duration) {}
    fn level_done(&self, _: &str, _: &LevelResult) {}
    fn note(&self, _: &str) {}
}

/// One phase: the classes offered together, with their weights.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Class name, or `mix`.
    pub name: String,
    /// Plans of the classes in this phase.
    pub plans: Vec<ClassPlan>,
}

/// What a phase's classes share as prompt prefixes, by mix weight: the share of requests with a
/// shared prefix, its mean length in tokens, and the share drawn from datasets (which may share
/// prefixes the spec does not declare). Diagnose judges a low prefix-cache hit ratio against it.
fn prefix_plan(plans: &[ClassPlan]) -> PrefixPlan {
    let total: f64 = plans.iter().map(|p| p.weight).sum();
    if total <= 0.0 {
        return PrefixPlan::default();
    }
    let share =
        |f: &dyn Fn(&ClassPlan) -> f64| plans.iter().map(|p| p.weight * f(p)).sum::<f64>() / total;
    PrefixPlan {
        shared_share: share(&|p| f64::from(u8::from(p.shared_prefix_tokens > 0))),
        shared_tokens_mean: share(&|p| f64::from(p.shared_prefix_tokens)),
        dataset_share: share(&|p| {
            f64::from(u8::from(matches!(
                p.prompt,
                headroom_load::prompt::PromptSource::Dataset(_)
            )))
        }),
    }
}

/// Share of a phase's requests sent with `ignore_eos`, by mix weight (1 or 0 for one class).
fn ignore_eos_share(plans: &[ClassPlan]) -> f64 {
    let total: f64 = plans.iter().map(|p| p.weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    plans
        .iter()
        .filter(|p| p.ignore_eos)
        .map(|p| p.weight)
        .sum::<f64>()
        / total
}

/// Each class alone (weight 1), then all together by weight when there is more than one.
pub fn phases(plans: &[ClassPlan]) -> Vec<Phase> {
    let mut out: Vec<Phase> = plans
        .iter()
        .map(|p| Phase {
            name: p.name.clone(),
            plans: vec![p.clone()],
        })
        .collect();
    if plans.len() > 1 {
        out.push(Phase {
            name: "mix".into(),
            plans: plans.to_vec(),
        });
    }
    out
}

/// What one level measured, from wherever it ran: the client's recording and the engine's (and
/// dcgm-exporter's) scrapes, in time order. The sweep judges it the same way whatever measured it.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The client's recording of the level.
    pub rec: LevelRecording,
    /// Engine scrapes: before the level, at the end of the warm-up, periodic, at the end.
    pub engine: Vec<Scrape>,
    /// dcgm-exporter scrapes, taken with the engine's.
    pub dcgm: Vec<Scrape>,
    /// Index of the scrape that opens the measurement window (the one taken when the warm-up
    /// ended), so that warm-up requests do not count in the engine's histograms.
    pub window_from: usize,
    /// Scrape failures and other notes for the level's server view.
    pub notes: Vec<String>,
}

/// One level to measure: the phase's classes at one load, with the sweep's windows and options.
pub struct LevelRequest<'a> {
    /// The phase (its classes and weights).
    pub phase: &'a Phase,
    /// Closed loop at a concurrency, or open loop at a rate.
    pub mode: LevelMode,
    /// Warm-up: requests started in it are not recorded.
    pub warmup: Duration,
    /// Measurement window (extended up to `opts.measure_max` while `opts.check` says so).
    pub measure: Duration,
    /// The level's seed (arrivals, prompts, the mix).
    pub seed: u64,
    /// Early stop/extension check, drain bounds, goodput thresholds.
    pub opts: &'a RunOptions,
}

/// Measures a level somewhere other than over HTTP: `headroom plan` runs the engine twin on
/// its virtual clock through this, so that its levels are searched, judged and written exactly
/// as a sweep's are.
pub trait LevelMeasurer: Send + Sync {
    /// Runs the level to its end (window, extension and drain) and returns what it measured.
    fn measure(&self, level: LevelRequest<'_>) -> Measured;
}

/// A sweep, ready to run.
pub struct Sweep<'a> {
    /// Where requests go.
    pub target: &'a Target,
    /// Request classes, resolved.
    pub plans: &'a [ClassPlan],
    /// Objectives.
    pub slo: &'a SloFile,
    /// Settings.
    pub settings: &'a SweepSettings,
    /// Cancelled on Ctrl-C or by the caller.
    pub cancel: CancellationFlag,
    /// Progress sink.
    pub progress: &'a dyn Progress,
    /// Called with every partial result (after each level) and the final one; the CLI writes the
    /// run directory here. An error (a write failed: disk full, permissions) stops the sweep
    /// after that level, with the error as the stop reason; that level's raw files are then not
    /// written, and the final call records it without them.
    pub on_result: &'a (dyn Fn(&RunResult) -> Result<(), String> + Send + Sync),
    /// For an in-process engine twin: cumulative `(steps, late steps, late s)` of its wall
    /// clock, a late step being one delivered more than 2 ms after its modelled end. A level
    /// with more than [`LATE_STEP_SHARE`] of its steps late gets a warning: the host, not the
    /// modelled GPU, set part of its latencies.
    pub clock_lag: Option<&'a (dyn Fn() -> (u64, u64, f64) + Send + Sync)>,
    /// Measures each level instead of the HTTP load generator (the target is then only named,
    /// never called): the twin on its virtual clock for `headroom plan`.
    pub measurer: Option<&'a dyn LevelMeasurer>,
}

impl Sweep<'_> {
    /// Runs every phase and returns the result (also passed to `on_result` after every level).
    /// Stops early, with valid partial results, when cancelled or when the server stops answering.
    pub async fn run(&self) -> RunResult {
        let mut run = RunResult {
            schema_version: RESULTS_SCHEMA_VERSION,
            status: RunStatus::Running,
            phases: Vec::new(),
            warnings: Vec::new(),
        };
        let mut level_index: u32 = 0;
        let mut stop_reason: Option<String> = None;
        let only = self.settings.only_phase.as_deref();
        'phases: for phase in phases(self.plans)
            .into_iter()
            .filter(|p| only.is_none_or(|o| p.name == o))
        {
            let mut search = Search::new(self.settings.plan.clone());
            run.phases.push(PhaseResult {
                name: phase.name.clone(),
                classes: phase
                    .plans
                    .iter()
                    .map(|p| (p.name.clone(), p.weight))
                    .collect(),
                mode: self.settings.mode,
                levels: Vec::new(),
                capacity: None,
                first_fail: None,
                first_breach: None,
                capacity_band: None,
                search_note: String::new(),
            });
            while let Some(load) = search.next_level() {
                if self.cancel.is_cancelled() {
                    stop_reason = Some("interrupted (Ctrl-C or SIGTERM)".into());
                    break 'phases;
                }
                let lag0 = self.clock_lag.map(|f| f());
                let (mut level, aborted, transport_streak, raws) =
                    self.run_repeats(&phase, load, &mut level_index).await;
                if let (Some(f), Some(before)) = (self.clock_lag, lag0)
                    && let Some(w) = twin_lateness_warning(before, f())
                {
                    level.warnings.push(w);
                }
                let aborted = aborted.map(|why| {
                    let why = format!("load generation broke down: {why}");
                    void_level(&mut level, "aborted", &why);
                    format!(
                        "aborted at {} {}: {why}",
                        headroom_core::slo::fmt_num(load),
                        self.settings.mode.unit()
                    )
                });
                let interrupted = level.window_note.starts_with("interrupted");
                if interrupted {
                    // A window cut short measured other traffic than the one specified (fewer
                    // requests, no drain): neither a capacity nor a breach.
                    let why = format!(
                        "the window was cut short after {:.1} s (Ctrl-C)",
                        level.window_s
                    );
                    void_level(&mut level, "interrupted", &why);
                }
                // Transport failures to the end of the level: ask the server whether it is still
                // there before reading the level as a load result.
                let dead = if !interrupted
                    && self.measurer.is_none()
                    && (transport_streak >= SUSPECT_STREAK || level_is_dead(&level))
                {
                    self.server_gone().await.map(|e| {
                        format!(
                            "server lost at {} {}: server unreachable ({transport_streak} requests in a row failed in transport, then {e})",
                            headroom_core::slo::fmt_num(load),
                            self.settings.mode.unit()
                        )
                    })
                } else {
                    None
                };
                if let Some(why) = &dead {
                    // An outage is not a capacity limit: no verdict for this level.
                    void_level(&mut level, "server lost", why);
                }
                search.record(load, level.verdict);
                self.progress.level_done(&phase.name, &level);
                let p = run.phases.last_mut().expect("phase pushed above");
                p.levels.push(level);
                update_phase(p, &search);
                // results.json first (small), then the level's raw scrapes and histograms
                // (large): on a full disk the results are what must survive. The first write
                // that fails stops the sweep; the files it left unwritten are dropped from the
                // level (with a warning) before the final write of the results.
                let written = (self.on_result)(&run)
                    .map_err(|e| (raws.iter().flat_map(RawFiles::names).collect(), e))
                    .and_then(|()| write_all(&raws, &self.settings.run_dir));
                if let Err((unwritten, e)) = written {
                    // The level must not cite files the directory lacks; the final write below
                    // records the level without them.
                    let level = run.phases.last_mut().and_then(|p| p.levels.last_mut());
                    if let Some(level) = level {
                        for r in &mut level.repeats {
                            drop_unwritten(r, &unwritten, &e);
                        }
                        drop_unwritten(level, &unwritten, &e);
                    }
                    stop_reason = Some(format!("cannot write the run directory: {e}"));
                    break 'phases;
                }
                if interrupted {
                    stop_reason = Some("interrupted (Ctrl-C or SIGTERM)".into());
                    break 'phases;
                }
                if let Some(why) = dead.or(aborted) {
                    stop_reason = Some(why);
                    break 'phases;
                }
                // Prompts that are not the workload's stay so at every level: stop at the first,
                // with the measured ratio and the fix, instead of voiding every level after it.
                let last = run.phases.last().and_then(|p| p.levels.last());
                if let Some(d) = last.and_then(|l| drift(&l.tokens)) {
                    let how = phase
                        .plans
                        .first()
                        .and_then(|p| p.calibration())
                        .map_or_else(|| "uncalibrated words".to_string(), |c| c.method.describe());
                    stop_reason = Some(format!(
                        "stopped at the first level whose prompts are not the workload's: {} (sized by {how}); \
                         the verdicts it could have helped are INCONCLUSIVE",
                        d.note
                    ));
                    break 'phases;
                }
            }
            let p = run.phases.last_mut().expect("phase pushed above");
            update_phase(p, &search);
            p.search_note = search.note.clone();
        }
        if let Some(p) = run.phases.last_mut()
            && p.search_note.is_empty()
        {
            p.search_note = "stopped before the search finished".into();
        }
        run.warnings = collect_warnings(&run);
        run.status = match stop_reason {
            Some(reason) => RunStatus::Stopped { reason },
            None => RunStatus::Complete,
        };
        // A failure here is the caller's to report (it knows what it wrote).
        let _ = (self.on_result)(&run);
        run
    }

    /// `Some(error)` when the target no longer answers `GET /v1/models` within 5 s.
    async fn server_gone(&self) -> Option<String> {
        match tokio::time::timeout(
            Duration::from_secs(5),
            self.target.get("/v1/models", 1 << 20),
        )
        .await
        {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("GET /v1/models failed: {e}")),
            Err(_) => Some("GET /v1/models got no answer within 5 s".into()),
        }
    }

    /// Runs a level [`SweepSettings::repeat`] times back to back (each repeat its own level index,
    /// so its own seed and files), stopping early when a repeat broke down or was interrupted;
    /// the first repeat's record carries the others and their strictest verdict
    /// ([`combine_repeats`]). The transport streak is the last repeat's.
    async fn run_repeats(
        &self,
        phase: &Phase,
        load: f64,
        level_index: &mut u32,
    ) -> (LevelResult, Option<String>, u64, Vec<RawFiles>) {
        let (mut level, mut aborted, mut streak, raw) =
            self.run_one(phase, load, *level_index).await;
        *level_index += 1;
        let mut raws = vec![raw];
        for _ in 1..self.settings.repeat.max(1) {
            if aborted.is_some()
                || level.window_note.starts_with("interrupted")
                || self.cancel.is_cancelled()
            {
                break;
            }
            let (r, a, st, raw) = self.run_one(phase, load, *level_index).await;
            *level_index += 1;
            raws.push(raw);
            (aborted, streak) = (a, st);
            if r.window_note.starts_with("interrupted") {
                level.window_note = r.window_note.clone();
            }
            level.repeats.push(r);
        }
        combine_repeats(&mut level);
        (level, aborted, streak, raws)
    }

    /// Runs and judges one level; also says why its load generation broke down, when it did
    /// (see [`LevelRecording::aborted`]), and how many requests in a row ended it failing in
    /// transport.
    async fn run_one(
        &self,
        phase: &Phase,
        load: f64,
        level_index: u32,
    ) -> (LevelResult, Option<String>, u64, RawFiles) {
        let s = self.settings;
        let mode = match s.mode {
            LoadMode::Concurrency => LevelMode::Concurrency(load.round().max(1.0) as u32),
            LoadMode::Rate => LevelMode::Rate {
                rate_per_s: load,
                arrival: s.arrival,
                max_concurrency: s.max_concurrency,
            },
        };
        self.progress
            .level_start(&phase.name, load, s.mode, s.warmup + s.measure);
        let spec = phase_spec(self.slo, phase);
        let (ticks, tick_rx) = tokio::sync::watch::channel(None);
        let check = early_stop_check(phase, self.slo, s.measure, s.measure_max, ticks);
        let opts = RunOptions {
            drain_max: s.drain_max,
            measure_max: s.measure_max.max(s.measure),
            check: Some(check),
            goodput: phase
                .plans
                .iter()
                .map(|p| GoodputSlo::from_objectives(&self.slo.spec_for(&p.name).objectives))
                .collect(),
            ..RunOptions::default()
        };
        let seed = s.seed ^ (u64::from(level_index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let m = match self.measurer {
            Some(m) => m.measure(LevelRequest {
                phase,
                mode,
                warmup: s.warmup,
                measure: s.measure,
                seed,
                opts: &opts,
            }),
            None => {
                with_ticks(
                    self.measure_http(phase, mode, seed, &opts),
                    tick_rx,
                    self.progress,
                )
                .await
            }
        };
        // The raw files; they are written after results.json (see `RawFiles`).
        let raw = RawFiles {
            level_index,
            engine: m.engine,
            dcgm: m.dcgm,
            rec: m.rec,
            hist_file: crate::run_dir::histogram_name(level_index),
        };
        let mut files = raw.names();
        files.pop(); // the histograms
        let (window_from, notes) = (m.window_from, m.notes);
        let level = judge_level(JudgeInput {
            phase,
            slo: self.slo,
            spec: &spec,
            rec: &raw.rec,
            window_from,
            engine_scrapes: &raw.engine,
            dcgm_scrapes: &raw.dcgm,
            scrape_files: files,
            hist_file: raw.hist_file.clone(),
            notes,
        });
        let streak = transport_streak(&raw.rec);
        let aborted = raw.rec.aborted.clone();
        (level, aborted, streak, raw)
    }

    /// Measures a level over HTTP: the load generator against the target, with the engine (and
    /// dcgm-exporter) scraped before it, when the warm-up ends, periodically and after it.
    async fn measure_http(
        &self,
        phase: &Phase,
        mode: LevelMode,
        seed: u64,
        opts: &RunOptions,
    ) -> Measured {
        let s = self.settings;
        let scraper = Scraper::new(Duration::from_secs(5));
        let mut notes = Vec::new();
        let start = self.scrape_pair(&scraper, &mut notes).await;

        // Periodic scrapes: the first at the end of the warm-up (the measurement window's
        // baseline), then every interval until the level ends.
        let stop = CancellationFlag::new();
        let periodic = {
            let stop = stop.clone();
            let scraper = scraper.clone();
            let urls = (s.metrics_url.clone(), s.dcgm_url.clone());
            let every = s.scrape_interval.max(Duration::from_millis(200));
            let first = s.warmup;
            tokio::spawn(async move {
                let mut got: Vec<(ScrapeKind, Result<Scrape, String>)> = Vec::new();
                let mut wait = first;
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                    wait = every;
                    if let Some(u) = &urls.0 {
                        got.push((
                            ScrapeKind::Engine,
                            scraper.scrape(u).await.map_err(|e| e.to_string()),
                        ));
                    }
                    if let Some(u) = &urls.1 {
                        got.push((
                            ScrapeKind::Dcgm,
                            scraper.scrape(u).await.map_err(|e| e.to_string()),
                        ));
                    }
                }
                got
            })
        };

        let spec = LevelSpec {
            mode,
            warmup: s.warmup,
            measure: s.measure,
            seed,
        };
        let rec = run_level_with(self.target, &phase.plans, spec, self.cancel.clone(), opts).await;
        stop.cancel();
        // A cancelled stream reaches the engine as an abort a moment after the client hangs up;
        // let those land before the closing scrape so both sides count the same requests.
        let ended = rec.level_totals();
        if ended.outcomes.contains_key(&Outcome::ClientCancel)
            || ended.outcomes.contains_key(&Outcome::Timeout)
        {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut engine_scrapes: Vec<Scrape> = Vec::new();
        let mut dcgm_scrapes: Vec<Scrape> = Vec::new();
        let (e0, d0) = start;
        let had_start = e0.is_some();
        engine_scrapes.extend(e0);
        dcgm_scrapes.extend(d0);
        match periodic.await {
            Ok(got) => {
                for (kind, r) in got {
                    match (kind, r) {
                        (ScrapeKind::Engine, Ok(x)) => engine_scrapes.push(x),
                        (ScrapeKind::Dcgm, Ok(x)) => dcgm_scrapes.push(x),
                        (_, Err(e)) => notes.push(e),
                    }
                }
            }
            Err(e) => notes.push(format!("scrape task failed: {e}")),
        }
        let (e1, d1) = self.scrape_pair(&scraper, &mut notes).await;
        engine_scrapes.extend(e1);
        dcgm_scrapes.extend(d1);

        // The measurement window starts at the scrape taken when the warm-up ended (the first
        // periodic one), so warm-up requests do not count in the engine's histograms.
        let window_from = if had_start && !s.warmup.is_zero() {
            1
        } else {
            0
        };
        Measured {
            rec,
            engine: engine_scrapes,
            dcgm: dcgm_scrapes,
            window_from,
            notes,
        }
    }

    async fn scrape_pair(
        &self,
        scraper: &Scraper,
        notes: &mut Vec<String>,
    ) -> (Option<Scrape>, Option<Scrape>) {
        let mut e = None;
        let mut d = None;
        if let Some(u) = &self.settings.metrics_url {
            match scraper.scrape(u).await {
                Ok(x) => e = Some(x),
                Err(err) => notes.push(err.to_string()),
            }
        }
        if let Some(u) = &self.settings.dcgm_url {
            match scraper.scrape(u).await {
                Ok(x) => d = Some(x),
                Err(err) => notes.push(err.to_string()),
            }
        }
        (e, d)
    }
}

/// The objectives a phase is judged on: its class's for a single-class phase; for the mix, the
/// union of every class's server-side objectives (client ones are judged per class).
pub fn phase_spec(slo: &SloFile, phase: &Phase) -> SloSpec {
    if phase.plans.len() == 1 {
        return slo.spec_for(&phase.plans[0].name);
    }
    // The mix judges queue time from the engine's histogram (one queue for all classes); with
    // per-request metrics each class is judged on its own requests instead (client_objectives).
    let mut objectives: Vec<Objective> = Vec::new();
    for p in &phase.plans {
        for o in slo.spec_for(&p.name).objectives {
            if is_server_only(&o) && !objectives.iter().any(|x| x.id() == o.id()) {
                objectives.push(o);
            }
        }
    }
    SloSpec { objectives }
}

fn is_server_only(o: &Objective) -> bool {
    matches!(
        o,
        Objective::Latency {
            signal: LatencySignal::QueueTime,
            ..
        }
    )
}

/// The class's histograms by signal, borrowed: the early-stop check builds this about once a
/// second during a level.
fn latency_map(c: &ClassRecording) -> BTreeMap<LatencySignal, &hdrhistogram::Histogram<u64>> {
    let mut m = BTreeMap::new();
    m.insert(LatencySignal::Ttft, &c.ttft);
    m.insert(LatencySignal::Itl, &c.itl);
    m.insert(LatencySignal::Tpot, &c.tpot);
    m.insert(LatencySignal::E2e, &c.e2e);
    if !c.queue_time.is_empty() {
        m.insert(LatencySignal::QueueTime, &c.queue_time);
    }
    m
}

/// Client objectives of every class in the phase (ids prefixed `class/` in the mix).
pub(crate) fn client_objectives(
    slo: &SloFile,
    phase: &Phase,
    rec: &LevelRecording,
    final_window: bool,
) -> Vec<ObjectiveResult> {
    let mix = phase.plans.len() > 1;
    let mut out = Vec::new();
    for (i, (plan, c)) in phase.plans.iter().zip(&rec.classes).enumerate() {
        let spec = slo.spec_for(&plan.name);
        // Queue time is judged here when the server reported it per request, or when the client's
        // TTFT already bounds it (below); otherwise the engine's histogram decides it (diagnose).
        let per_request = !c.queue_time.is_empty();
        let mut bounded: Vec<ObjectiveResult> = Vec::new();
        let client_objs: Vec<Objective> = spec
            .objectives
            .into_iter()
            .filter(|o| {
                if !is_server_only(o) {
                    return true;
                }
                // Per-request queue times arrive with a request's last chunk, so with answers
                // longer than the window few of them exist: below the percentile's minimum, the
                // TTFT bound (every window start) is tried first.
                let enough = match o {
                    Objective::Latency { percentile, .. } => {
                        c.queue_time.len()
                            >= headroom_core::stats::min_samples_for_percentile(*percentile)
                    }
                    Objective::ErrorRate { .. } => true,
                };
                if !(per_request && enough)
                    && let Some(r) =
                        queue_bound_by_ttft(o, &c.ttft, Some(&c.ttft_censored_age), final_window)
                {
                    bounded.push(r);
                    return false;
                }
                per_request
            })
            .collect();
        // Errors are counted over every request of the level that ended (warm-up, window and
        // drain): an error is an event of the offered load whenever the request began, it is
        // what the server's counters see, and with answers longer than the window (the
        // built-in workload's 10-17 s against 5 s) requests that *start* in the window rarely
        // finish in it. `LevelResult::level_outcomes` holds the same counts, so levels.csv and
        // the reports show the objective's figures.
        let outcomes = rec.class_totals.get(i).map_or(&c.outcomes, |t| &t.outcomes);
        let ev = ClientEvidence {
            latency: latency_map(c),
            outcomes,
            ttft_censored: Some(&c.ttft_censored_age),
        };
        for mut r in evaluate(&client_objs, &ev, final_window)
            .into_iter()
            .chain(bounded)
        {
            if mix {
                r.id = r.id.in_class(&plan.name);
                r.description = format!("{}: {}", plan.name, r.description);
            }
            out.push(r);
        }
    }
    out
}

/// Runs a level's measurement, handing each tick its check sends (about once a second, as
/// often as the runner checks) to `progress`.
async fn with_ticks<T>(
    measure: impl std::future::Future<Output = T>,
    mut ticks: tokio::sync::watch::Receiver<Option<LevelTick>>,
    progress: &dyn Progress,
) -> T {
    tokio::pin!(measure);
    loop {
        tokio::select! {
            m = &mut measure => return m,
            Ok(()) = ticks.changed() => {
                let t = ticks.borrow_and_update().clone();
                if let Some(t) = t {
                    progress.level_tick(&t);
                }
            }
        }
    }
}

/// The check the runner calls during the window: stop early once a breach is certain; at the
/// end of the base window, continue (up to `measure_max`) only while an objective is undecided.
fn early_stop_check(
    phase: &Phase,
    slo: &SloFile,
    measure: Duration,
    measure_max: Duration,
    ticks: TickSlot,
) -> LevelCheck {
    let phase = phase.clone();
    let slo = slo.clone();
    Arc::new(move |rec: &LevelRecording, elapsed: Duration| {
        // A server that refuses every request: stop offering load now (the level is then
        // checked for a lost server).
        if transport_streak(rec) >= LOST_STREAK {
            return true;
        }
        let results = client_objectives(&slo, &phase, rec, false);
        ticks.send_replace(Some(LevelTick {
            window_elapsed: elapsed,
            started: rec.started,
            finished: rec.classes.iter().flat_map(|c| c.outcomes.values()).sum(),
            objectives: results.clone(),
        }));
        if results.iter().any(|r| r.verdict == Verdict::Fail) {
            return true;
        }
        if elapsed < measure {
            return false;
        }
        // Past the base window: keep measuring only while an objective has too few samples to
        // estimate its percentile at all, and can still gather them by the longest window. (With
        // enough samples an undecided objective is settled by its point estimate.)
        // A request is recorded when it ends, but every request started in the window will
        // give one TTFT (and queue-time) sample: count those for per-request objectives.
        // An objective whose 95 % interval still straddles its target gets up to the longest
        // window: more samples narrow the interval, and a verdict a rerun would repeat is worth
        // the time; past it the point estimate decides and the level is labelled borderline.
        // Only while the samples the same share needs to be certain can arrive in time (a share
        // at the threshold itself never becomes certain).
        let borderline_until = measure_max;
        let growth = borderline_until.as_secs_f64() / elapsed.as_secs_f64().max(1e-3);
        if elapsed < borderline_until
            && results.iter().any(|r| {
                // Every request started in the window gives one TTFT (and queue-time) sample,
                // although it is recorded when it ends (a long answer's TTFT only then).
                let per_request = one_sample_per_started_request(&r.id);
                let k = r.share.map_or(r.samples, |s| s.n);
                let have = if per_request { k.max(rec.started) } else { k };
                let need = match r.share {
                    // The share seen so far: the samples at which it would be certain.
                    Some(s) if s.n > 0 && s.bad > 0 => s.samples_to_decide(),
                    // None above the threshold yet (or not recorded yet): the fewest samples
                    // any certain PASS needs (73 for a p95: z²·0.95/0.05).
                    _ => headroom_core::stats::samples_to_decide(0, 1, r.objective_allowed_share()),
                };
                r.verdict == Verdict::Inconclusive
                    && need.is_some_and(|need| have < need && need as f64 <= have as f64 * growth)
            })
        {
            return false;
        }
        let max_s = measure_max.as_secs_f64();
        let el = elapsed.as_secs_f64().max(1e-3);
        !results.iter().any(|r| {
            let need = r.needed_samples();
            let per_request = one_sample_per_started_request(&r.id);
            let n = if per_request {
                r.samples.max(rec.started)
            } else {
                r.samples
            };
            r.verdict == Verdict::Inconclusive && n < need && n as f64 * max_s / el >= need as f64
        })
    })
}

/// Whether every request started in the window gives the objective one sample, although it is
/// recorded when the request ends (TTFT and queue time; a long answer's TTFT only then).
fn one_sample_per_started_request(id: &ObjectiveId) -> bool {
    matches!(
        id.signal(),
        Some(LatencySignal::Ttft | LatencySignal::QueueTime)
    )
}

/// Every request's engine queue time is at most its TTFT (TTFT = frontend + queue + prefill), so
/// when the client's TTFT meets a queue-time objective's threshold at its percentile, the queue
/// time does too — for exactly the requests of the window. The engine's own histogram cannot say
/// this as well: vLLM observes it when a request finishes, so requests started in the warm-up
/// count in the window. Returns the PASS, or `None` when the bound does not settle it.
fn queue_bound_by_ttft(
    o: &Objective,
    ttft: &hdrhistogram::Histogram<u64>,
    ttft_censored: Option<&hdrhistogram::Histogram<u64>>,
    final_window: bool,
) -> Option<ObjectiveResult> {
    let Objective::Latency {
        signal: LatencySignal::QueueTime,
        percentile,
        threshold_s,
    } = o
    else {
        return None;
    };
    let proxy = Objective::Latency {
        signal: LatencySignal::Ttft,
        percentile: *percentile,
        threshold_s: *threshold_s,
    };
    let none = BTreeMap::new();
    // Requests with no first token after more than the threshold make the bound fail, as
    // they should: their queue time is unknown.
    let ev = ClientEvidence {
        latency: BTreeMap::from([(LatencySignal::Ttft, ttft)]),
        outcomes: &none,
        ttft_censored,
    };
    let r = evaluate(&[proxy], &ev, final_window).pop()?;
    (r.verdict == Verdict::Pass).then(|| ObjectiveResult {
        // An upper bound on the queue-time share: as certain as the TTFT count behind it.
        share: r.share,
        id: o.id(),
        description: o.describe(),
        threshold: *threshold_s,
        observed: None,
        bound: Bound::Exact,
        // The client's TTFT is the evidence.
        source: Some(Source::Client),
        verdict: Verdict::Pass,
        samples: r.samples,
        reason: format!(
            "{} (queue time ≤ TTFT for every request): TTFT p{} = {}; {}",
            headroom_diagnose::QUEUE_BOUND_BY_TTFT,
            headroom_core::slo::fmt_num(*percentile),
            r.observed
                .map(headroom_core::slo::fmt_duration_s)
                .unwrap_or_default(),
            r.reason
        ),
    })
}

/// Send lag above which a level is flagged: 2 % of the tightest TTFT or E2E threshold among the
/// phase's classes (the latencies a late send adds to), at least 1 ms. A 3 ms lag against a
/// 250 ms TTFT objective distorts nothing worth a warning; against a 20 ms one it does.
fn send_lag_limit_s(slo: &SloFile, phase: &Phase) -> f64 {
    phase
        .plans
        .iter()
        .flat_map(|p| slo.spec_for(&p.name).objectives)
        .filter_map(|o| match o {
            Objective::Latency {
                signal: LatencySignal::Ttft | LatencySignal::E2e,
                threshold_s,
                ..
            } => Some(threshold_s),
            _ => None,
        })
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))))
        .map_or(0.001, |t| (0.02 * t).max(0.001))
}

/// The objectives the engine's metrics judge for a whole mix: `spec` without the server-only
/// objectives (queue time) that every class already judged from the client's side (per-request
/// queue times, or bounded by its TTFT: a `{class}/{id}` row in `client_rows`). The engine's
/// histogram holds the requests that *finished* in the window, many of them queued behind the
/// warm-up's first burst: as an engine-wide verdict it failed levels whose every class passed
/// on window evidence.
fn mix_engine_spec(
    spec: &SloSpec,
    plans: &[ClassPlan],
    client_rows: &[ObjectiveResult],
) -> SloSpec {
    let judged_by_every_class = |o: &Objective| {
        plans.iter().all(|p| {
            let id = o.id().in_class(&p.name);
            client_rows.iter().any(|r| r.id == id)
        })
    };
    SloSpec {
        objectives: spec
            .objectives
            .iter()
            .filter(|o| !is_server_only(o) || !judged_by_every_class(o))
            .cloned()
            .collect(),
    }
}

/// The engine's FAIL rows for the mix's server-only objectives that every class settled from
/// its TTFT (`{class}/{id}` rows, no engine row `{id}`) and the engine's histogram breaches with
/// certainty ([`headroom_diagnose::engine_overrules_bounds`]).
fn overruled_bounds(
    w: &Window,
    spec: &SloSpec,
    rows: &[ObjectiveResult],
    started_before_window: Option<u64>,
) -> Vec<ObjectiveResult> {
    spec.objectives
        .iter()
        .filter(|o| is_server_only(o) && !rows.iter().any(|r| r.id == o.id()))
        .filter_map(|o| {
            let bounds: Vec<&ObjectiveResult> = rows
                .iter()
                .filter(|r| r.id.class().is_some() && r.id.is(o))
                .collect();
            headroom_diagnose::engine_overrules_bounds(w, o, &bounds, started_before_window)
        })
        .collect()
}

/// A level judged again from what its run directory holds, as [`Sweep::run`] judged it: the
/// client's recording (`histograms/L###.json`), every engine and dcgm-exporter scrape of the
/// level (`scrapes/`, in order), the run's `slo.yaml` and the phase rebuilt from its
/// `workload.yaml`. `recorded` is the level as `results.json` has it: its histogram file, its
/// scrape files, and a void the sweep applied after judging (`aborted`, `interrupted`, `server
/// lost`, in its `window_note`), which no recording shows. Returns the level and the index of the
/// engine scrape that opens its measurement window (the one taken when the warm-up ended).
pub fn rejudge_level(
    phase: &Phase,
    slo: &SloFile,
    rec: &LevelRecording,
    engine_scrapes: &[Scrape],
    dcgm_scrapes: &[Scrape],
    recorded: &LevelResult,
) -> (LevelResult, usize) {
    // The sweep opens the window at its second scrape when it had a start scrape and a
    // warm-up; the start scrape is taken before the warm-up, the second when it ends.
    let window_from = usize::from(
        rec.warmup_s > 0.0
            && engine_scrapes
                .first()
                .is_some_and(|s| s.at_unix_s < rec.started_unix_s - rec.warmup_s / 2.0),
    );
    let spec = phase_spec(slo, phase);
    let mut level = judge_level(JudgeInput {
        phase,
        slo,
        spec: &spec,
        rec,
        window_from,
        engine_scrapes,
        dcgm_scrapes,
        scrape_files: recorded
            .server
            .as_ref()
            .map(|s| s.scrapes.clone())
            .unwrap_or_default(),
        hist_file: recorded.histograms.clone(),
        notes: Vec::new(),
    });
    for state in ["aborted", "interrupted", "server lost"] {
        if let Some(why) = recorded.window_note.strip_prefix(&format!("{state}: ")) {
            void_level(&mut level, state, why);
        }
    }
    (level, window_from)
}

/// Samples an objective needs before its percentile is an observation (`ttft_p95` → 20); error
/// objectives need one finished request.
struct JudgeInput<'a> {
    phase: &'a Phase,
    slo: &'a SloFile,
    spec: &'a SloSpec,
    rec: &'a LevelRecording,
    /// Index of the engine scrape that opens the measurement window.
    window_from: usize,
    engine_scrapes: &'a [Scrape],
    dcgm_scrapes: &'a [Scrape],
    scrape_files: Vec<String>,
    hist_file: String,
    notes: Vec<String>,
}

fn judge_level(j: JudgeInput<'_>) -> LevelResult {
    let rec = j.rec;
    let total = rec.total();
    let mix = j.phase.plans.len() > 1;
    let mut objectives = client_objectives(j.slo, j.phase, rec, true);
    let health = rec.client_health();
    let totals = client_totals(rec);
    let mut warnings = rec.client_warnings(send_lag_limit_s(j.slo, j.phase), 0.8);
    warnings.extend(headroom_load::runner::refusal_warning(rec));
    warnings.extend(headroom_load::runner::stall_warning(rec));
    let mut server: Option<ServerView> = None;
    let workload_drift = drift(&total.tokens);
    if let Some(d) = &workload_drift {
        warnings.push(format!("workload drifted from its spec: {}", d.note));
    }
    let build = |engine: &[Scrape], dcgm: &[Scrape]| {
        Window::from_scrapes(engine, dcgm, &WindowOptions::default())
    };
    let meas_engine = j.engine_scrapes.get(j.window_from..).unwrap_or(&[]);
    let meas_start = meas_engine.first().map_or(f64::INFINITY, |x| x.at_unix_s);
    let meas_dcgm: Vec<Scrape> = j
        .dcgm_scrapes
        .iter()
        .filter(|x| x.at_unix_s + 0.5 >= meas_start)
        .cloned()
        .collect();
    let windows = if meas_engine.len() >= 2 {
        match (
            build(j.engine_scrapes, j.dcgm_scrapes),
            build(meas_engine, &meas_dcgm),
        ) {
            (Ok(full), Ok(meas)) => Some((full, meas)),
            (Err(e), _) | (_, Err(e)) => {
                warnings.push(format!("server view unavailable: {e}"));
                None
            }
        }
    } else {
        if !j.engine_scrapes.is_empty() || !j.notes.is_empty() {
            warnings.push(
                "fewer than two engine scrapes in the window: no server view for this level".into(),
            );
        }
        None
    };
    match &windows {
        Some((full, meas)) => {
            // Send lag measures coordinated omission only in open loop; a closed loop starts each
            // request when a slot frees, so its "lag" is connection set-up, part of TTFT.
            let mut h = health.clone();
            if rec.mode == LoadMode::Concurrency {
                h.send_lag_p99_s = 0.0;
                h.send_lag_max_s = 0.0;
            }
            let view = ClientView {
                objectives: if mix { Vec::new() } else { objectives.clone() },
                health: Some(h),
                // Counts are reconciled over the whole level below, not over the window.
                requests_finished: None,
                output_tokens: None,
                workload_drift: workload_drift.clone(),
                started_before_window: Some(rec.warmup_started),
                ignore_eos_share: Some(ignore_eos_share(&j.phase.plans)),
            };
            let spec = if mix {
                mix_engine_spec(j.spec, &j.phase.plans, &objectives)
            } else {
                j.spec.clone()
            };
            let setting = Setting {
                origin: Origin::Sweep,
                dcgm_scraped: !j.dcgm_scrapes.is_empty(),
                prefixes: Some(prefix_plan(&j.phase.plans)),
            };
            let a = assess_with(meas, Some(&view), &spec, &setting);
            if mix {
                // The engine's rows had the drift applied by the assessment; the classes' not.
                if let Some(d) = &workload_drift {
                    headroom_diagnose::apply_drift(&mut objectives, d);
                }
                objectives.extend(a.objectives.iter().cloned());
                // A queue time every class bounded by its TTFT, which the engine's histogram
                // breaches with certainty: the stricter holds.
                let mut over =
                    overruled_bounds(meas, j.spec, &objectives, Some(rec.warmup_started));
                if let Some(d) = &workload_drift {
                    headroom_diagnose::apply_drift(&mut over, d);
                }
                objectives.extend(over);
                if !a.refused.is_empty() {
                    for o in &mut objectives {
                        o.verdict = Verdict::Inconclusive;
                    }
                }
            } else {
                objectives = a.objectives.clone();
            }
            let mut rec_rows = reconcile(full, &totals);
            let ttft_mean = total.summary(LatencySignal::Ttft);
            if ttft_mean.count > 0
                && let Some(r) = ttft_remainder(meas, ttft_mean.mean_s)
            {
                rec_rows.push(r);
            }
            // Client and server must count the same requests; otherwise the level's numbers
            // describe different traffic and no verdict is given.
            let disagree: Vec<String> = rec_rows
                .iter()
                .filter(|r| r.what.starts_with("requests_") && !r.agrees)
                .map(|r| format!("{} client {} / server {}", r.what, r.client, r.server))
                .collect();
            if !disagree.is_empty() {
                let why = format!(
                    "{DISAGREE} ({}): another client may be using the server",
                    disagree.join(", ")
                );
                for o in &mut objectives {
                    if o.verdict != Verdict::Inconclusive {
                        o.reason = format!(
                            "refused ({why}); the figure alone said {}",
                            o.verdict.as_str()
                        );
                        o.verdict = Verdict::Inconclusive;
                    }
                }
                warnings.push(why);
            }
            for o in &mut objectives {
                first_bucket_observation(o, meas);
            }
            let mut sv = server_view(meas, &a, rec_rows, j.scrape_files.clone());
            sv.notes.extend(j.notes.iter().cloned());
            server = Some(sv);
        }
        None => {
            if let Some(d) = &workload_drift {
                headroom_diagnose::apply_drift(&mut objectives, d);
            }
            // Server-only objectives stay INCONCLUSIVE (evaluate's answer without server data).
            for o in j.spec.objectives.iter().filter(|o| is_server_only(o)) {
                let judged = objectives.iter().any(|x| x.id.is(o));
                if !judged {
                    let out = BTreeMap::new();
                    let none = ClientEvidence {
                        latency: BTreeMap::new(),
                        outcomes: &out,
                        ttft_censored: None,
                    };
                    objectives.extend(evaluate(std::slice::from_ref(o), &none, true));
                }
            }
            for n in &j.notes {
                warnings.push(n.clone());
            }
        }
    }
    let verdict = Verdict::combine(objectives.iter().map(|o| o.verdict));
    let window_s = rec.window_s.max(1e-9);
    // Only worth a warning when an objective needs finished requests (TPOT, E2E); otherwise the
    // level's table simply has no TPOT/E2E figures.
    let needs_finished = objectives.iter().any(|o| {
        matches!(
            o.id.signal(),
            Some(LatencySignal::Tpot | LatencySignal::E2e)
        )
    });
    if needs_finished && total.started_in_window() > 0 && total.tokens.output_realised == 0 {
        warnings.push(
            "no request of the window finished within the window and its drain (answers outlast it): TPOT and E2E are not measured; lengthen --measure for them".to_string()
        );
    }
    // Output throughput: the engine's own counter over the measurement window when available
    // (exact, and independent of which requests finished); else the client's finished requests.
    let server_tok_per_s = windows.as_ref().and_then(|(_, meas)| {
        let d = meas.duration_s()?;
        let t = meas.counter(headroom_signals::Signal::GenerationTokens)?;
        (d > 0.0).then(|| t / d)
    });
    let successes: u64 = total
        .outcomes
        .iter()
        .filter(|(k, _)| k.is_success())
        .map(|(_, v)| v)
        .sum();
    // Completed requests per second: the engine's own count of requests that finished with
    // `stop` or `length` during the measurement window (whenever they started), as for tokens;
    // else the client's window-started successes. With answers longer than the window, hardly
    // any window-started request finishes inside it, and the client's figure reads ~0.
    let server_req_per_s = windows.as_ref().and_then(|(_, meas)| {
        let d = meas.duration_s()?;
        let done = meas.counter_key(headroom_signals::Signal::RequestsFinished, "stop")?
            + meas.counter_key(headroom_signals::Signal::RequestsFinished, "length")?;
        (d > 0.0).then(|| done / d)
    });
    let window_note = if rec.interrupted {
        "interrupted: the window was cut short".to_string()
    } else {
        rec.window_note.clone()
    };
    let mut level = LevelResult {
        level_outcomes: rec.level_totals().outcome_labels(),
        load: rec.load,
        mode: rec.mode,
        started_unix_s: rec.started_unix_s,
        window_s: rec.window_s,
        window_note,
        outcomes: total.outcome_labels(),
        latency: LatencySignal::CLIENT
            .iter()
            .map(|s| (s.name().to_string(), total.summary(*s)))
            .collect(),
        request_rate_per_s: server_req_per_s.unwrap_or(successes as f64 / window_s),
        output_tokens_per_s: server_tok_per_s
            .unwrap_or(total.tokens.output_realised as f64 / window_s),
        // Not measured when every window-started request was cut at the window's end.
        goodput_per_s: (successes > 0
            || total
                .outcomes
                .get(&Outcome::ClientCancel)
                .is_none_or(|c| *c == 0))
        .then(|| total.goodput as f64 / window_s),
        tokens: total.tokens.clone(),
        objectives,
        verdict,
        client: health,
        server,
        histograms: j.hist_file,
        repeats: Vec::new(),
        warnings,
    };
    // The window stopped early on the requests finished by then; the verdict counts every
    // request of the window, and with the in-flight ones the breach may no longer be certain:
    // the note must not claim what the verdict does not.
    if level.window_note.starts_with("early stop") && !level.verdict_is_certain() {
        level.window_note.push_str(
            "; with the requests still in flight counted, the breach is borderline, not certain",
        );
    }
    level
}

/// A server-side quantile that falls in the histogram's first bucket says only "at most the first
/// bound" (vLLM's queue-time buckets start at 0.3 s): PromQL's interpolation would print e.g.
/// 285 ms for requests that waited 2 ms. Such an observation is withheld (no headroom is claimed)
/// and the reason says what is known.
fn first_bucket_observation(o: &mut ObjectiveResult, w: &Window) {
    // Per-request queue times are exact; only the histogram's figure is a bucket bound.
    if o.id.signal() != Some(LatencySignal::QueueTime) || o.bound.is_exact() {
        return;
    }
    let Some(h) = w.histogram(headroom_signals::Signal::QueueTime) else {
        return;
    };
    let Some(first) = h.buckets.first().map(|b| b.le) else {
        return;
    };
    if let Some(v) = o.observed
        && v <= first
    {
        o.observed = None;
        // No figure, so nothing it bounds.
        o.bound = Bound::Exact;
        o.reason = format!(
            "{}; every observation at this percentile lies in the first bucket (≤ {} s), so the engine's histogram gives no finer figure (mean {})",
            o.reason,
            headroom_core::slo::fmt_num(first),
            h.mean()
                .map(headroom_core::slo::fmt_duration_s)
                .unwrap_or_else(|| "n/a".into())
        );
    }
}

/// Whole-level client totals (warm-up, window and drain), the span the server's counters cover.
fn client_totals(rec: &LevelRecording) -> ClientTotals {
    let t = &rec.level_totals();
    let get = |o: Outcome| t.outcomes.get(&o).copied().unwrap_or(0);
    ClientTotals {
        stop: get(Outcome::Stop),
        length: get(Outcome::Length),
        // Streams cut mid-way end on the engine as aborts too.
        cancelled: get(Outcome::ClientCancel) + get(Outcome::Timeout) + t.cut_streams,
        server_abort_or_error: get(Outcome::Abort) + get(Outcome::Error),
        output_tokens: t.output_tokens,
        prompt_tokens: t.prompt_tokens,
        unfinished_chunks: t.unfinished_chunks,
    }
}

/// Realised prompt tokens more than 25 % away from the workload's request: the run measured a
/// different workload from the one specified.
pub(crate) fn drift(t: &TokenCounts) -> Option<WorkloadDrift> {
    // Both sums count only requests whose usage came back: requested > 0 with realised 0 is a
    // server that says it prefilled nothing, a drift like any other.
    if t.prompt_requested == 0 {
        return None;
    }
    let ratio = t.prompt_realised as f64 / t.prompt_requested as f64;
    (!(0.75..=1.25).contains(&ratio)).then(|| WorkloadDrift {
        prompt_ratio: ratio,
        note: format!(
            "prompts realised {} tokens against {} requested ({:.0} %); pass --tokenizer for exact counts",
            t.prompt_realised,
            t.prompt_requested,
            ratio * 100.0
        ),
    })
}

/// A level's raw material for the run directory: every scrape verbatim (`scrapes/`) and the
/// client's histograms (`histograms/L{level}.json`), under the names its [`LevelResult`] cites.
struct RawFiles {
    level_index: u32,
    engine: Vec<Scrape>,
    dcgm: Vec<Scrape>,
    rec: LevelRecording,
    hist_file: String,
}

impl RawFiles {
    /// Every file's name relative to the run directory, in the order [`RawFiles::write`] writes
    /// them: the scrapes (`scrapes/…`, as the level's `server.scrapes` cites them), then the
    /// histograms.
    fn names(&self) -> Vec<String> {
        let scrapes = [
            (ScrapeKind::Engine, &self.engine),
            (ScrapeKind::Dcgm, &self.dcgm),
        ]
        .into_iter()
        .flat_map(|(kind, v)| {
            v.iter().enumerate().map(move |(seq, sc)| {
                let name = scrape_file_name(self.level_index, seq as u32, kind, sc.at_unix_s);
                crate::run_dir::scrape_name(&name)
            })
        });
        scrapes.chain([self.hist_file.clone()]).collect()
    }

    /// Writes every file; stops at the first failure with the files not written (that one and
    /// every one after it, in [`RawFiles::names`] order) and the error naming the file.
    fn write(&self, dir: &std::path::Path) -> Result<(), (Vec<String>, String)> {
        let names = self.names();
        let scrapes = [
            (ScrapeKind::Engine, &self.engine),
            (ScrapeKind::Dcgm, &self.dcgm),
        ]
        .into_iter()
        .flat_map(|(kind, v)| v.iter().enumerate().map(move |(seq, sc)| (kind, seq, sc)));
        for (i, (kind, seq, sc)) in scrapes.enumerate() {
            if let Err(e) = write_scrape(dir, self.level_index, seq as u32, kind, sc) {
                // Written atomically: a failed scrape leaves no file behind.
                return Err((
                    names[i..].to_vec(),
                    format!("cannot store {} in {}: {e}", names[i], dir.display()),
                ));
            }
        }
        let path = crate::run_dir::RunDir::new(dir).file(&self.hist_file);
        self.rec
            .save(&path)
            .map_err(|e| (vec![self.hist_file.clone()], e.to_string()))
    }
}

/// Writes every repeat's files in order; at the first failure, the files not written are that
/// repeat's rest and every later repeat's.
fn write_all(raws: &[RawFiles], dir: &std::path::Path) -> Result<(), (Vec<String>, String)> {
    for (i, r) in raws.iter().enumerate() {
        r.write(dir).map_err(|(mut unwritten, e)| {
            unwritten.extend(raws[i + 1..].iter().flat_map(RawFiles::names));
            (unwritten, e)
        })?;
    }
    Ok(())
}

/// How strict an objective row is: a certain FAIL, a borderline FAIL, INCONCLUSIVE, a borderline
/// PASS, a certain PASS (lowest first).
fn strictness(o: &ObjectiveResult) -> u8 {
    match (o.verdict, o.is_borderline()) {
        (Verdict::Fail, false) => 0,
        (Verdict::Fail, true) => 1,
        (Verdict::Inconclusive, _) => 2,
        (Verdict::Pass, true) => 3,
        (Verdict::Pass, false) => 4,
    }
}

/// The verdict of a level run several times: each objective takes its strictest repeat's row
/// (its reason then names the repeat), and the level's verdict combines those. The repeats must
/// agree for a PASS: a capacity one repeat in N breaks is not a capacity, and each repeat's
/// verdict keeps its own certainty and server view (merging the client histograms would pool the
/// samples but leave the engine's windows, separated by the other repeats' warm-ups, apart).
/// A disagreement between repeats is a level warning.
pub fn combine_repeats(level: &mut LevelResult) {
    if level.repeats.is_empty() {
        return;
    }
    let n = level.repeats.len() + 1;
    let own: Vec<&str> = std::iter::once(level.verdict)
        .chain(level.repeats.iter().map(|r| r.verdict))
        .map(Verdict::as_str)
        .collect();
    for o in &mut level.objectives {
        let strictest = level
            .repeats
            .iter()
            .enumerate()
            .filter_map(|(k, r)| Some((k + 2, r.objectives.iter().find(|x| x.id == o.id)?)))
            .filter(|(_, x)| strictness(x) < strictness(o))
            .min_by_key(|(_, x)| strictness(x));
        if let Some((k, x)) = strictest {
            *o = x.clone();
            o.reason = format!("repeat {k} of {n}: {}", o.reason);
        }
    }
    level.verdict = Verdict::combine(level.objectives.iter().map(|o| o.verdict));
    if own.iter().any(|v| *v != own[0]) {
        level.warnings.push(format!(
            "the {n} repeats disagree ({}): the strictest holds",
            own.join(", ")
        ));
    }
}

/// Removes the files of `unwritten` from what `level` cites (its `histograms` and its server
/// view's `scrapes`) and warns, naming them and `why`, so a run directory written on a full disk
/// never claims files it lacks.
fn drop_unwritten(level: &mut LevelResult, unwritten: &[String], why: &str) {
    if unwritten.is_empty() {
        return;
    }
    if unwritten.contains(&level.histograms) {
        level.histograms.clear();
    }
    if let Some(v) = level.server.as_mut() {
        v.scrapes.retain(|f| !unwritten.contains(f));
    }
    level.warnings.push(format!(
        "not written: {} ({why}); this level's record cites none of them",
        unwritten.join(", ")
    ));
}

/// Transport failures in a row at the end of a level after which the server is asked whether it
/// is still there (`GET /v1/models`); a server that does not answer is lost, and the sweep stops.
const SUSPECT_STREAK: u64 = 3;

/// Transport failures in a row during the window after which the window closes at once.
const LOST_STREAK: u64 = 10;

/// The longest run of transport failures that ends a class's requests so far.
fn transport_streak(rec: &LevelRecording) -> u64 {
    rec.class_totals
        .iter()
        .map(|t| t.transport_streak)
        .max()
        .unwrap_or(0)
}

/// Share of an in-process twin's steps delivered late above which a level is warned about: more
/// than 5 % of stretched gaps reach an ITL p95 (fewer still move p99, which the warning says).
pub const LATE_STEP_SHARE: f64 = 0.05;

/// The warning for a level whose in-process twin delivered more than [`LATE_STEP_SHARE`] of its
/// steps late, from the cumulative `(steps, late steps, late s)` before and after the level.
fn twin_lateness_warning(before: (u64, u64, f64), after: (u64, u64, f64)) -> Option<String> {
    let steps = after.0.saturating_sub(before.0);
    let late = after.1.saturating_sub(before.1);
    let late_s = after.2 - before.2;
    if steps == 0 || (late as f64) <= LATE_STEP_SHARE * steps as f64 {
        return None;
    }
    Some(format!(
        "the in-process engine twin delivered {late} of its {steps} steps ({:.0} %) more than 2 ms late, by {:.1} ms on average: it shares this machine's cores with the load client, so ITL and TTFT percentiles from p95 up include delays the modelled GPU does not have; a quieter machine, or `headroom sim` on another one, avoids it",
        100.0 * late as f64 / steps as f64,
        1e3 * late_s / late as f64
    ))
}

/// Start of the warning (and of the objectives' reasons) when the client's and the server's
/// request counts differ over a level.
const DISAGREE: &str = "client and server disagree on finished requests";

/// Takes every verdict of a level away: `state` (`interrupted`, `server lost`, `aborted`) says
/// what happened and `why` the detail. Each objective becomes INCONCLUSIVE and keeps what its
/// figure alone said in its reason, so a cut-short level never counts as a pass (capacity) or a
/// failure (a breach) in the search. A client/server count disagreement is dropped: a level cut
/// short (no drain, no final scrape of a lost server) is expected to disagree, and blaming
/// "another client" would mislead.
fn void_level(level: &mut LevelResult, state: &str, why: &str) {
    level.warnings.retain(|w| !w.starts_with(DISAGREE));
    for o in &mut level.objectives {
        if o.reason.starts_with(&format!("refused ({DISAGREE}"))
            && let Some(i) = o.reason.find("; the figure alone said ")
        {
            o.reason = o.reason[i + 2..].to_string();
        }
        if o.verdict != Verdict::Inconclusive {
            o.reason = format!(
                "no verdict ({state}: {why}); the figure alone said {}: {}",
                o.verdict.as_str(),
                o.reason
            );
        } else {
            o.reason = format!("no verdict ({state}: {why}); {}", o.reason);
        }
        o.verdict = Verdict::Inconclusive;
    }
    level.verdict = Verdict::Inconclusive;
    level.window_note = format!("{state}: {why}");
}

/// A level where nothing got through and the client saw only transport failures: the server may
/// be gone (the sweep then asks it, see [`SUSPECT_STREAK`]).
fn level_is_dead(l: &LevelResult) -> bool {
    let total: u64 = l.outcomes.values().sum();
    let transport = l.outcomes.get("transport").copied().unwrap_or(0);
    total > 0 && transport == total
}

fn update_phase(p: &mut PhaseResult, s: &Search) {
    p.capacity = s.capacity();
    p.capacity_band = Some(p.capacity_band());
    p.first_fail = s.first_fail();
    p.first_breach = p.first_fail.and_then(|f| {
        let l = p.levels.iter().find(|l| (l.load - f).abs() < 1e-9)?;
        l.objectives
            .iter()
            .find(|o| o.verdict == Verdict::Fail)
            .or_else(|| {
                l.objectives
                    .iter()
                    .find(|o| o.verdict == Verdict::Inconclusive)
            })
            .map(|o| o.id.clone())
    });
}

fn collect_warnings(run: &RunResult) -> Vec<String> {
    run.phases
        .iter()
        .flat_map(|p| {
            group_warnings(
                &p.name,
                p.mode.unit(),
                p.levels.iter().map(|l| (l.load, l.warnings.as_slice())),
            )
        })
        .collect()
}

/// One line per distinct warning of a phase, naming the levels it came from in the order run:
/// `chat at 16, 64 and 112 concurrent: …`.
fn group_warnings<'a>(
    phase: &str,
    unit: &str,
    levels: impl Iterator<Item = (f64, &'a [String])>,
) -> Vec<String> {
    let mut grouped: Vec<(&str, Vec<f64>)> = Vec::new();
    for (load, warnings) in levels {
        for w in warnings {
            match grouped.iter_mut().find(|(g, _)| *g == w.as_str()) {
                Some((_, loads)) if !loads.contains(&load) => loads.push(load),
                Some(_) => {}
                None => grouped.push((w, vec![load])),
            }
        }
    }
    grouped
        .into_iter()
        .map(|(w, loads)| {
            let loads: Vec<String> = loads.iter().map(|x| x.to_string()).collect();
            let list = match loads.split_last() {
                Some((last, init)) if !init.is_empty() => {
                    format!("{} and {last}", init.join(", "))
                }
                _ => loads.concat(),
            };
            format!("{phase} at {list} {unit}: {w}")
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::group_warnings;

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
        use super::*;
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
        let l = limit(
            "objectives:\n  a: {ttft: {p95: 250ms}, itl: {p95: 5ms}}\n  b: {e2e: {p99: 20s}}\n",
        );
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
                    super::DISAGREE
                );
                l.warnings = vec![disagree.clone(), "twin ran late".into()];
                let said = vs[0].1.as_str();
                l.objectives[0].reason =
                    format!("refused ({disagree}); the figure alone said {said}");
                l.objectives[0].verdict = Verdict::Inconclusive;
                super::void_level(&mut l, state, "why");
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
            super::twin_lateness_warning((100, 5, 0.01), (1100, 55, 0.21)),
            None
        );
        // 51 late, 0.255 s in all: 5.1 %, 5.0 ms on average.
        let w = super::twin_lateness_warning((100, 5, 0.01), (1100, 56, 0.265)).unwrap();
        assert!(
            w.contains(
                "delivered 51 of its 1000 steps (5 %) more than 2 ms late, by 5.0 ms on average"
            ),
            "{w}"
        );
        assert_eq!(super::twin_lateness_warning((7, 0, 0.0), (7, 0, 0.0)), None);
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
}
