//! Renderers for a sweep's results: terminal summary, Markdown, CSV, JSON and a self-contained
//! HTML page with SVG charts. Renderers only render: every statistic they show was computed
//! elsewhere (crate `load` measures, `core::run` derives headroom). One file per format, as in
//! hyperfine's `export/`; the run directory's formats are listed in [`export::EXPORTERS`].

pub mod chart;
pub mod csv;
pub mod diagnosis;
pub mod export;
pub mod html;
pub mod json;
pub mod levels;
pub mod markdown;
pub mod remote_write;
pub mod terminal;

use export::EXPORTERS;
use headroom_core::objective::Unit;
use headroom_core::run::RunResult;
use headroom_core::run_dir::RunDir;
use std::path::Path;

/// The files of a run directory that [`write_run_files`] writes, in the order written:
/// `results.json` first (the small, complete record), the renderings after it.
pub use headroom_core::run_dir::RUN_FILES;

/// A write of the run files that stopped part-way.
#[derive(Debug)]
pub struct RunFilesError {
    /// Files written (renamed into place) before the failure, in order.
    pub written: Vec<&'static str>,
    /// The file that could not be written. It and every file after it in [`RUN_FILES`] are not
    /// current: `results.json` keeps whatever an earlier write left; the renderings an earlier
    /// write left are removed ([`RunFilesError::removed`]).
    pub file: &'static str,
    /// Renderings (`levels.csv`, `report.md`, `report.html`) an earlier write left that this one
    /// could not replace, removed so that none shows an older state of the run (a report still
    /// "in progress" after the run stopped) beside the newer record.
    pub removed: Vec<&'static str>,
    /// The I/O error, with the path.
    pub source: std::io::Error,
}

impl std::fmt::Display for RunFilesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.source)
    }
}

impl std::error::Error for RunFilesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Writes every format of [`EXPORTERS`] (the [`RUN_FILES`]) into `dir`, in that order, and
/// returns the files written.
///
/// Each file is written to a temporary name and renamed, so a crash or a full disk never leaves a
/// half-written report over a good one (nor a temporary file behind). The first failure stops:
/// on a full disk nothing after it would fit either. The renderings it leaves unwritten are
/// removed where an earlier write left them: derived from an older record, they would say so
/// beside the newer one (a run stopped by a full disk would keep a report saying "in progress").
///
/// # Errors
/// [`RunFilesError`]: what was written before the failure, the file and the I/O error.
pub fn write_run_files(dir: &Path, run: &RunResult) -> Result<Vec<&'static str>, RunFilesError> {
    let dir = RunDir::new(dir);
    let mut written = Vec::new();
    for e in EXPORTERS {
        let name = e.file_name();
        if let Err(source) = e.render(run).and_then(|b| dir.write(name, &b)) {
            // The renderings from here on; a record that failed keeps its earlier contents.
            let stale = EXPORTERS
                .iter()
                .skip(written.len())
                .filter(|e| !e.is_record())
                .map(|e| e.file_name());
            let removed = stale
                .filter(|f| std::fs::remove_file(dir.file(f)).is_ok())
                .collect();
            return Err(RunFilesError {
                written,
                file: name,
                removed,
                source,
            });
        }
        written.push(name);
    }
    Ok(written)
}

/// Renders a run directory's reports again from its `results.json` (`headroom report`): the
/// derived files (levels.csv, report.md, report.html) with this version's renderers, after an
/// upgrade or to produce them again; `results.json` itself, the record, is left as it is.
/// Capacity bands missing from results written before they existed are recomputed for the
/// renderings.
///
/// # Errors
/// The file and the I/O error of the first write that failed.
pub fn rerender_run_files(
    dir: &Path,
    run: &RunResult,
) -> Result<Vec<&'static str>, (&'static str, std::io::Error)> {
    let mut run = run.clone();
    for p in &mut run.phases {
        if p.capacity_band.is_none() {
            p.capacity_band = Some(p.capacity_band());
        }
    }
    let dir = RunDir::new(dir);
    let mut written = Vec::new();
    for e in EXPORTERS.iter().filter(|e| !e.is_record()) {
        let name = e.file_name();
        e.render(&run)
            .and_then(|b| dir.write(name, &b))
            .map_err(|err| (name, err))?;
        written.push(name);
    }
    Ok(written)
}

pub use headroom_core::atomic::write_atomic;

/// Formats a load level for people: `12 concurrent`, `2.5 req/s`.
pub fn fmt_load(load: f64, mode: headroom_core::run::LoadMode) -> String {
    format!("{} {}", headroom_core::slo::fmt_num(load), mode.unit())
}

/// Objective ids as written (`ttft_p95`, `chat/error_rate`), joined with `sep`.
pub(crate) fn join_ids(ids: &[&headroom_core::objective::ObjectiveId], sep: &str) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

/// Formats an objective's value in its `unit`: seconds as a duration, error ratios as percent.
pub fn fmt_objective_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => format!("{}%", headroom_core::slo::fmt_num(v * 100.0)),
        Unit::Seconds => headroom_core::slo::fmt_duration_s(v),
    }
}

/// An observed value printed beside its threshold: as [`fmt_objective_value`], with more
/// decimals when the usual rounding would print the threshold itself (`ITL p95 < 50 ms
/// (observed 50 ms)` for 50.04 ms reads as a pass; it prints `50.04 ms`).
pub fn fmt_observed(unit: Unit, v: f64, threshold: f64) -> String {
    let plain = fmt_objective_value(unit, v);
    if v == threshold || plain != fmt_objective_value(unit, threshold) {
        return plain;
    }
    // The value and threshold in the unit fmt_objective_value chose, with 2 to 6 decimals
    // until they differ.
    let (scale, suffix) = match unit {
        Unit::Ratio => (100.0, "%"),
        Unit::Seconds if v >= 1.0 => (1.0, " s"),
        Unit::Seconds if v >= 1e-3 => (1e3, " ms"),
        Unit::Seconds => (1e6, " µs"),
    };
    let (scaled, t) = (v * scale, threshold * scale);
    for d in 2..=6 {
        let (a, b) = (format!("{scaled:.d$}"), format!("{t:.d$}"));
        if a != b {
            return format!("{a}{suffix}");
        }
    }
    plain
}

#[cfg(test)]
mod observed_tests {
    use headroom_core::objective::Unit::{Ratio, Seconds};

    #[test]
    fn an_observed_value_never_prints_as_its_threshold() {
        use super::fmt_observed as f;
        assert_eq!(f(Seconds, 0.05004, 0.05), "50.04 ms");
        assert_eq!(f(Seconds, 0.0500004, 0.05), "50.0004 ms");
        assert_eq!(f(Seconds, 0.0523, 0.05), "52.3 ms");
        assert_eq!(f(Seconds, 0.05, 0.05), "50 ms");
        assert_eq!(f(Seconds, 1.0004, 1.0), "1.0004 s");
        assert_eq!(f(Ratio, 0.005001, 0.005), "0.5001%");
        assert_eq!(f(Ratio, 0.02, 0.005), "2%");
        assert_eq!(f(Ratio, 0.0, 0.005), "0%");
    }

    /// Every id form, with or without a class, prints in its kind's unit.
    #[test]
    fn objective_units_by_kind_with_or_without_a_class() {
        use super::fmt_objective_value as v;
        for (id, unit) in [
            ("error_rate", Ratio),
            ("long_context/error_rate", Ratio),
            ("ttft_p95", Seconds),
            ("itl_p99", Seconds),
            ("tpot_p50", Seconds),
            ("e2e_p99.9", Seconds),
            ("queue_time_p95", Seconds),
            ("a/b/queue_time_p95", Seconds),
            ("claims/queue_time_p99.99", Seconds),
        ] {
            let id: headroom_core::objective::ObjectiveId =
                serde_json::from_value(serde_json::json!(id)).unwrap();
            assert_eq!(id.unit(), unit, "{id}");
        }
        assert_eq!(v(Ratio, 0.0), "0%");
        assert_eq!(v(Ratio, 0.005), "0.5%");
        assert_eq!(v(Seconds, 0.0788), "78.8 ms");
        assert_eq!(v(Seconds, 2.48), "2.48 s");
    }
}

#[cfg(test)]
mod write_tests {
    /// Every file is written in order and reported; a failure part-way names what was written
    /// and leaves no temporary file.
    #[test]
    fn run_files_are_written_in_order_and_failures_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = crate::testdata::run();
        assert_eq!(
            super::write_run_files(dir.path(), &run).unwrap(),
            super::RUN_FILES
        );
        for f in super::RUN_FILES {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        // levels.csv cannot be replaced (a directory stands in its way): results.json is
        // written, the rest is not, and no `.tmp` stays.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("levels.csv")).unwrap();
        std::fs::create_dir(dir.path().join("levels.csv").join("x")).unwrap();
        let e = super::write_run_files(dir.path(), &run).unwrap_err();
        assert_eq!(e.written, vec!["results.json"]);
        assert_eq!(e.file, "levels.csv");
        assert!(e.to_string().contains("levels.csv"), "{e}");
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!left.iter().any(|n| n.ends_with(".tmp")), "{left:?}");
        assert!(!dir.path().join("report.md").exists());
    }

    /// A write that fails at any file, after an earlier write of a run still in progress,
    /// leaves no rendering of the older record: each file is either this write's or gone
    /// (removed and reported), except `results.json`, whose earlier record stays when it is the
    /// file that failed.
    #[test]
    fn a_failed_write_leaves_no_stale_rendering() {
        use headroom_core::run::RunStatus;
        let mut running = crate::testdata::run();
        running.status = RunStatus::Running;
        let mut stopped = running.clone();
        stopped.status = RunStatus::Stopped {
            reason: "cannot write the run directory: No space left on device".into(),
        };
        let in_progress = "still in progress";
        assert!(super::markdown::render(&running).contains(in_progress));
        for (i, fail) in super::RUN_FILES.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            super::write_run_files(dir.path(), &running).unwrap();
            // A folder stands where the file goes: its write fails as on a full disk.
            let blocked = dir.path().join(fail);
            std::fs::remove_file(&blocked).unwrap();
            std::fs::create_dir_all(blocked.join("x")).unwrap();
            let e = super::write_run_files(dir.path(), &stopped).unwrap_err();
            assert_eq!(e.written, super::RUN_FILES[..i], "{fail}");
            assert_eq!(e.file, *fail);
            let after: Vec<&str> = super::RUN_FILES[i + 1..].to_vec();
            assert_eq!(e.removed, after, "{fail}");
            for f in super::RUN_FILES {
                let p = dir.path().join(f);
                if f == *fail {
                    assert!(p.is_dir(), "{f}");
                } else if e.removed.contains(&f) {
                    assert!(!p.exists(), "{fail}: {f} stale");
                } else {
                    let text = std::fs::read_to_string(&p).unwrap();
                    assert!(
                        !text.contains(in_progress),
                        "{fail}: {f} says {in_progress}"
                    );
                    if f == "results.json" {
                        assert!(text.contains("No space left"), "{fail}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod testdata {
    use headroom_core::objective::ObjectiveId;
    use headroom_core::run::*;
    use headroom_core::verdict::*;
    use std::collections::BTreeMap;

    /// The id `results.json` writes as `text`.
    pub fn id(text: &str) -> ObjectiveId {
        serde_json::from_value(serde_json::json!(text)).unwrap()
    }

    pub fn level(load: f64, ttft_p95: f64, verdict: Verdict) -> LevelResult {
        let mut latency = BTreeMap::new();
        latency.insert(
            "ttft".to_string(),
            LatencySummary {
                count: 40,
                mean_s: ttft_p95 / 2.0,
                p50_s: ttft_p95 / 2.0,
                p90_s: ttft_p95 * 0.9,
                p95_s: ttft_p95,
                p99_s: ttft_p95 * 1.2,
                max_s: ttft_p95 * 1.5,
            },
        );
        let mut outcomes = BTreeMap::new();
        outcomes.insert("length".to_string(), 40);
        outcomes.insert("http_503".to_string(), 1);
        LevelResult {
            level_outcomes: Default::default(),
            load,
            mode: LoadMode::Concurrency,
            started_unix_s: 1.0,
            window_s: 10.0,
            window_note: "full".into(),
            outcomes,
            latency,
            request_rate_per_s: 4.0,
            output_tokens_per_s: 400.0 * load,
            goodput_per_s: Some(3.5),
            tokens: TokenCounts::default(),
            objectives: vec![ObjectiveResult {
                share: None,
                bound: Default::default(),
                source: None,
                id: id("ttft_p95"),
                description: "TTFT p95 < 300 ms".into(),
                threshold: 0.3,
                observed: Some(ttft_p95),
                verdict,
                samples: 40,
                reason: String::new(),
            }],
            verdict,
            client: ClientHealth::default(),
            server: None,
            histograms: "histograms/x.json".into(),
            repeats: Vec::new(),
            warnings: vec![],
        }
    }

    pub fn run() -> RunResult {
        RunResult {
            schema_version: RESULTS_SCHEMA_VERSION,
            status: RunStatus::Complete,
            phases: vec![PhaseResult {
                name: "chat <&>".into(),
                classes: vec![("chat <&>".into(), 1.0)],
                mode: LoadMode::Concurrency,
                levels: vec![
                    level(4.0, 0.05, Verdict::Pass),
                    level(8.0, 0.1, Verdict::Pass),
                    level(16.0, 0.5, Verdict::Fail),
                ],
                capacity: Some(8.0),
                first_fail: Some(16.0),
                first_breach: Some(id("ttft_p95")),
                capacity_band: None,
                search_note: "bracketed".into(),
            }],
            warnings: vec!["client CPU high".into()],
        }
    }
}
