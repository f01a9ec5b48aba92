//! The level loop: run each phase's levels (over HTTP or through a [`LevelMeasurer`]), repeat
//! them, void the ones cut short, and write every result and raw file after each level.

use super::judge::{JudgeInput, combine_repeats, drift, early_stop_check, judge_level, void_level};
use super::phase::{phase_spec, phases};
use super::{LevelRequest, LevelTick, Measured, Phase, Progress, Sweep};
use crate::search::Search;
use headroom_core::run::{
    LevelResult, LoadMode, PhaseResult, RESULTS_SCHEMA_VERSION, RunResult, RunStatus,
};
use headroom_core::{Outcome, Verdict};
use headroom_load::arrivals::LevelMode;
use headroom_load::client::CancellationFlag;
use headroom_load::recorder::LevelRecording;
use headroom_load::runner::{GoodputSlo, LevelSpec, RunOptions, run_level_with};
use headroom_signals::source::{ScrapeKind, scrape_file_name, write_scrape};
use headroom_signals::{Scrape, Scraper};
use std::time::Duration;

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
pub(super) const LOST_STREAK: u64 = 10;

/// The longest run of transport failures that ends a class's requests so far.
pub(super) fn transport_streak(rec: &LevelRecording) -> u64 {
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
pub(super) fn twin_lateness_warning(
    before: (u64, u64, f64),
    after: (u64, u64, f64),
) -> Option<String> {
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
pub(super) fn group_warnings<'a>(
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
