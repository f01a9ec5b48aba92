//! How a sweep's windows and search are chosen where the command line leaves them out: the
//! workload's own, the embedded demo's (a plain `headroom sweep` of the engine twin with the
//! built-in workload, sized to finish in under two minutes on a 2-core machine), or `--quick`'s
//! (a smoke run: short windows, coarse search). Flags win over all three. The CLI parses the
//! flags into [`Overrides`]; [`SweepPolicy`] decides and builds the [`SweepSettings`].

use crate::controller::SweepSettings;
use crate::search::{AutoBracket, LevelPlan};
use headroom_core::run::LoadMode;
use headroom_load::workload::WorkloadSpec;
use std::path::PathBuf;
use std::time::Duration;

/// Warm-up of the embedded demo.
pub const DEMO_WARMUP: Duration = Duration::from_secs(3);
/// Measurement window of the embedded demo.
pub const DEMO_MEASURE: Duration = Duration::from_secs(5);
/// Warm-up of `--quick`.
pub const QUICK_WARMUP: Duration = Duration::from_secs(2);
/// Measurement window of `--quick`.
pub const QUICK_MEASURE: Duration = Duration::from_secs(4);

/// Whose windows and search a sweep takes where no flag sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The workload file's.
    Workload,
    /// The embedded demo's: no `--target`, no `--workload`.
    Demo,
    /// `--quick`'s (wins over the demo).
    Quick,
}

/// What the command line set; `None` takes the preset's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--levels`: run these loads instead of searching.
    pub levels: Option<Vec<f64>>,
    /// `--start`: first level of the automatic search.
    pub start: Option<f64>,
    /// `--max-load`: highest level the search may try.
    pub max_load: Option<f64>,
    /// `--resolution`: bisection stops when fail − pass ≤ this share of the pass level.
    pub resolution: Option<f64>,
    /// `--warmup`.
    pub warmup: Option<Duration>,
    /// `--measure`.
    pub measure: Option<Duration>,
}

/// What a sweep is pointed at, beyond its windows and search: the CLI's wiring.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// Engine `/metrics` URL; `None` skips the server view.
    pub metrics_url: Option<String>,
    /// dcgm-exporter URL.
    pub dcgm_url: Option<String>,
    /// Time between scrapes during a level.
    pub scrape_interval: Duration,
    /// Run directory (created by the caller).
    pub run_dir: PathBuf,
    /// Base seed.
    pub seed: u64,
    /// `--class`: run only this phase.
    pub only_phase: Option<String>,
    /// `--repeat`.
    pub repeat: u32,
}

/// The sweep's policy for one run: the workload, whether it runs against the embedded twin, the
/// preset and the flags.
#[derive(Debug, Clone)]
pub struct SweepPolicy<'a> {
    /// The workload as parsed.
    pub workload: &'a WorkloadSpec,
    /// No `--target`: the engine twin runs in-process.
    pub embedded: bool,
    /// Whose defaults apply.
    pub preset: Preset,
    /// The flags.
    pub overrides: Overrides,
}

impl<'a> SweepPolicy<'a> {
    /// The policy of a sweep of `workload`: `--quick` when `quick`, the demo when `embedded`
    /// (no `--target`) and the workload is the built-in one, else the workload's.
    pub fn new(
        workload: &'a WorkloadSpec,
        embedded: bool,
        workload_given: bool,
        quick: bool,
        overrides: Overrides,
    ) -> SweepPolicy<'a> {
        let preset = if quick {
            Preset::Quick
        } else if embedded && !workload_given {
            Preset::Demo
        } else {
            Preset::Workload
        };
        SweepPolicy {
            workload,
            embedded,
            preset,
            overrides,
        }
    }

    /// Warm-up and measurement window per level: the flags', else the preset's.
    pub fn windows(&self) -> (Duration, Duration) {
        let (w, m) = match self.preset {
            Preset::Quick => (QUICK_WARMUP, QUICK_MEASURE),
            Preset::Demo => (DEMO_WARMUP, DEMO_MEASURE),
            Preset::Workload => (self.workload.warmup, self.workload.measure),
        };
        (
            self.overrides.warmup.unwrap_or(w),
            self.overrides.measure.unwrap_or(m),
        )
    }

    /// Where the windows came from, for the line that announces them (` (--quick)`).
    pub fn windows_source(&self) -> &'static str {
        if self.overrides.warmup.is_some() || self.overrides.measure.is_some() {
            return " (from --warmup/--measure)";
        }
        match self.preset {
            Preset::Quick => " (--quick)",
            Preset::Demo => " (the embedded demo's; --warmup/--measure change them)",
            Preset::Workload => " (from the workload)",
        }
    }

    /// The levels: `--levels`, else the workload's list, else the automatic search from the
    /// preset's start, growth and ceiling (`--start` and `--max-load` win).
    pub fn level_plan(&self) -> LevelPlan {
        let mode = self.workload.load.mode;
        let quick = self.preset == Preset::Quick;
        let resolution = self
            .overrides
            .resolution
            .unwrap_or(if quick { 0.5 } else { 0.25 });
        // On the embedded twin the first level is 64 concurrent: its 500-1,000-token answers
        // take 10-17 s, so at 16 or 32 a 4-5 s window starts too few requests for a TTFT p95
        // (20), and the level stayed INCONCLUSIVE (at 32 in about half the runs); at 64 it has
        // them.
        let embedded_start = if self.embedded { 64.0 } else { 16.0 };
        let (start, growth, max) = match (mode, self.preset) {
            (LoadMode::Concurrency, Preset::Quick) => (embedded_start, 4.0, 512.0),
            (LoadMode::Concurrency, Preset::Demo) => (64.0, 2.0, 1024.0),
            (LoadMode::Concurrency, Preset::Workload) => (1.0, 2.0, 1024.0),
            (LoadMode::Rate, Preset::Quick) => (0.5, 4.0, 1000.0),
            (LoadMode::Rate, _) => (0.5, 2.0, 1000.0),
        };
        LevelPlan::resolve(
            self.overrides.levels.as_ref(),
            &self.workload.load.levels,
            mode,
            AutoBracket {
                start: self.overrides.start.unwrap_or(start),
                growth,
                max: self.overrides.max_load.unwrap_or(max),
            },
            resolution,
        )
    }

    /// Longest drain of in-flight requests after a window: 2 s on the embedded twin (its
    /// answers are short in wall time), 2 min against a server.
    pub fn drain_max(&self) -> Duration {
        Duration::from_secs(if self.embedded { 2 } else { 120 })
    }

    /// The settings: this policy's windows, levels and drain with `wiring`.
    pub fn settings(&self, wiring: Wiring) -> SweepSettings {
        let (warmup, measure) = self.windows();
        SweepSettings {
            mode: self.workload.load.mode,
            arrival: self.workload.load.arrival,
            max_concurrency: self.workload.load.max_concurrency,
            plan: self.level_plan(),
            warmup,
            measure,
            // Extended only while the start rate so far says the missing samples will come; at
            // most 96 h: `measure` is at most 24 h (checked by the caller).
            measure_max: measure.saturating_mul(4),
            drain_max: self.drain_max(),
            metrics_url: wiring.metrics_url,
            dcgm_url: wiring.dcgm_url,
            scrape_interval: wiring.scrape_interval,
            run_dir: wiring.run_dir,
            seed: wiring.seed,
            only_phase: wiring.only_phase,
            repeat: wiring.repeat,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> WorkloadSpec {
        headroom_load::workload::Workload::parse(
            yaml,
            std::path::Path::new("w.yaml"),
            std::path::Path::new("."),
        )
        .unwrap()
        .spec
    }

    /// The demo and --quick values the README and `--print-defaults` state.
    #[test]
    fn presets_choose_windows_and_search() {
        let builtin = headroom_load::workload::Workload::builtin().spec;
        let demo = SweepPolicy::new(&builtin, true, false, false, Overrides::default());
        assert_eq!(demo.preset, Preset::Demo);
        assert_eq!(
            demo.windows(),
            (Duration::from_secs(3), Duration::from_secs(5))
        );
        let LevelPlan::Auto {
            start, growth, max, ..
        } = demo.level_plan()
        else {
            panic!("automatic levels")
        };
        assert_eq!((start, growth, max), (64.0, 2.0, 1024.0));
        let quick = SweepPolicy::new(&builtin, false, true, true, Overrides::default());
        assert_eq!(
            quick.windows(),
            (Duration::from_secs(2), Duration::from_secs(4))
        );
        let LevelPlan::Auto {
            start,
            growth,
            max,
            resolution,
            ..
        } = quick.level_plan()
        else {
            panic!("automatic levels")
        };
        assert_eq!((start, growth, max, resolution), (16.0, 4.0, 512.0, 0.5));
        assert_eq!(quick.drain_max(), Duration::from_secs(120));
        let flags = Overrides {
            measure: Some(Duration::from_secs(9)),
            start: Some(3.0),
            ..Overrides::default()
        };
        let given = SweepPolicy::new(&builtin, true, false, true, flags);
        assert_eq!(
            given.windows(),
            (Duration::from_secs(2), Duration::from_secs(9))
        );
        assert_eq!(given.windows_source(), " (from --warmup/--measure)");
        let LevelPlan::Auto { start, .. } = given.level_plan() else {
            panic!("automatic levels")
        };
        assert_eq!(start, 3.0);
    }

    #[test]
    fn a_workload_keeps_its_own_windows_and_levels() {
        let w = spec(
            "load: {mode: rate, levels: [1, 2]}\nwarmup: 7s\nmeasure: 11s\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n",
        );
        let p = SweepPolicy::new(&w, false, true, false, Overrides::default());
        assert_eq!(p.preset, Preset::Workload);
        assert_eq!(
            p.windows(),
            (Duration::from_secs(7), Duration::from_secs(11))
        );
        assert!(matches!(p.level_plan(), LevelPlan::Fixed(l) if l == vec![1.0, 2.0]));
        assert_eq!(p.windows_source(), " (from the workload)");
    }
}
