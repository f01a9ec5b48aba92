//! The sweep loop: for each phase (each class alone, then the mix), choose levels with
//! [`Search`](crate::search::Search), run each with
//! [`run_level_with`](headroom_load::runner::run_level_with) while scraping the engine (and
//! dcgm-exporter), judge it, and write every result so far to the run directory after every level —
//! a later failure, a dead server or Ctrl-C never loses a finished level (hyperfine's habit).

mod judge;
mod level_loop;
mod phase;
#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
pub(crate) use judge::{client_objectives, drift};
pub use judge::{combine_repeats, rejudge_level};
pub use level_loop::LATE_STEP_SHARE;
pub use phase::{phase_spec, phases};

use crate::search::LevelPlan;
use headroom_core::run::{LevelResult, LoadMode, ObjectiveResult, RunResult};
use headroom_core::slo::SloFile;
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::recorder::LevelRecording;
use headroom_load::runner::RunOptions;
use headroom_signals::Scrape;
use std::path::PathBuf;
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
