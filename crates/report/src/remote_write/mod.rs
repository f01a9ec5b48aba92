//! A sweep's results as Prometheus series, pushed by remote write 1.0 (`sweep --push-to`,
//! `report --push-to`). This module says which series a [`RunResult`] is; [`proto`] is the wire
//! format and [`client`] the HTTP push. Every series is a gauge (nothing here counts up), named
//! in base units, with these labels:
//!
//! * `job="headroom"`, `run_id` (the run directory's name), `phase` (a class, or `mix`), `mode`
//!   (`concurrency` or `rate`), `load` (the level: concurrent requests or requests per second);
//! * `class`: the class a figure is about (a class phase's own; in the mix, an objective's class;
//!   the mix's level-wide figures and capacity have none);
//! * `objective` (`ttft_p95`, `error_rate`) and `unit` (`seconds` or `ratio`) on objective series.
//!
//! | series | value |
//! |---|---|
//! | `headroom_sweep_level_objective_value` | the measured figure (absent when not measured) |
//! | `headroom_sweep_level_objective_threshold` | the objective's threshold, same unit |
//! | `headroom_sweep_level_objective_verdict` | 1 PASS, 0 FAIL, absent when INCONCLUSIVE |
//! | `headroom_sweep_level_verdict` | the level's verdict, 1 PASS, 0 FAIL, absent when INCONCLUSIVE |
//! | `headroom_sweep_level_inconclusive` | 1 when the level has no verdict, else 0 |
//! | `headroom_sweep_level_throughput_tokens_per_second` | output tokens per second |
//! | `headroom_sweep_level_requests_per_second` | completed requests per second |
//! | `headroom_sweep_level_goodput_per_second` | requests per second that met their objectives (absent when not measured) |
//! | `headroom_sweep_phase_capacity` | the phase's capacity so far, in its mode's unit (absent while no level passed) |
//!
//! Each level's samples carry the time its measurement ended (of its last repeat), in
//! milliseconds; a phase's capacity carries its latest level's. A verdict is absent rather than
//! NaN when inconclusive so that `== 0` means FAIL and `== 1` means PASS with no special case,
//! and `headroom_sweep_level_inconclusive == 1` alerts on a level that could not judge.

pub mod client;
pub mod proto;

pub use client::{PushReport, Pusher, RemoteWriteClient};

use headroom_core::run::{LevelResult, LoadMode, PhaseResult, RunResult};
use headroom_core::verdict::Verdict;
use proto::{Label, Sample, TimeSeries, WriteRequest};
use std::collections::{BTreeMap, HashSet};

/// Samples one push request carries at most (Prometheus's own sender's default
/// `max_samples_per_send`): a large run is split into several requests.
pub const MAX_SAMPLES_PER_REQUEST: usize = 2000;

/// One sample of one series: labels sorted by name, `__name__` among them.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Sorted, unique labels.
    pub labels: Vec<Label>,
    /// The value in the series' unit.
    pub value: f64,
    /// Unix time, milliseconds.
    pub timestamp_ms: i64,
}

/// Every sample of `run` (see the module doc), run `run_id`, in time order.
pub fn points(run: &RunResult, run_id: &str) -> Vec<Point> {
    let mut out = Vec::new();
    for phase in &run.phases {
        let class = phase_class(phase);
        let mut latest = None;
        for level in &phase.levels {
            let t = level_end_ms(level);
            latest = Some(latest.map_or(t, |l: i64| l.max(t)));
            let base = |name: &str, class: Option<&str>| {
                let mut l = vec![
                    ("__name__", name.to_string()),
                    ("job", "headroom".to_string()),
                    ("run_id", run_id.to_string()),
                    ("phase", phase.name.clone()),
                    ("mode", mode_name(level.mode).to_string()),
                    ("load", level.load.to_string()),
                ];
                if let Some(c) = class {
                    l.push(("class", c.to_string()));
                }
                l
            };
            let mut push = |labels: Vec<(&str, String)>, value: f64| {
                out.push(point(labels, value, t));
            };
            if let Some(v) = verdict_value(level.verdict) {
                push(base("headroom_sweep_level_verdict", class), v);
            }
            push(
                base("headroom_sweep_level_inconclusive", class),
                f64::from(u8::from(level.verdict == Verdict::Inconclusive)),
            );
            push(
                base("headroom_sweep_level_throughput_tokens_per_second", class),
                level.output_tokens_per_s,
            );
            push(
                base("headroom_sweep_level_requests_per_second", class),
                level.request_rate_per_s,
            );
            if let Some(g) = level.goodput_per_s {
                push(base("headroom_sweep_level_goodput_per_second", class), g);
            }
            for o in &level.objectives {
                // A mix phase judges each class's objectives apart: the class is the row's.
                let o_class = o.id.class().or(class);
                let with = |name: &str| {
                    let mut l = base(name, o_class);
                    l.push(("objective", o.id.kind.to_string()));
                    l.push(("unit", o.unit().name().into()));
                    l
                };
                if let Some(v) = o.observed.filter(|v| !v.is_nan()) {
                    push(with("headroom_sweep_level_objective_value"), v);
                }
                push(
                    with("headroom_sweep_level_objective_threshold"),
                    o.threshold,
                );
                if let Some(v) = verdict_value(o.verdict) {
                    push(with("headroom_sweep_level_objective_verdict"), v);
                }
            }
        }
        if let (Some(c), Some(t)) = (phase.capacity, latest) {
            let mut l = vec![
                ("__name__", "headroom_sweep_phase_capacity".to_string()),
                ("job", "headroom".to_string()),
                ("run_id", run_id.to_string()),
                ("phase", phase.name.clone()),
                ("mode", mode_name(phase.mode).to_string()),
            ];
            if let Some(cl) = class {
                l.push(("class", cl.to_string()));
            }
            out.push(point(l, c, t));
        }
    }
    // Stable: a series' samples keep their order, and every request is in time order.
    out.sort_by_key(|p| p.timestamp_ms);
    out
}

/// The push requests for `points`: each series once per request with its samples in time order,
/// at most [`MAX_SAMPLES_PER_REQUEST`] samples a request, requests in time order.
pub fn write_requests(points: &[Point]) -> Vec<WriteRequest> {
    points
        .chunks(MAX_SAMPLES_PER_REQUEST)
        .map(|chunk| {
            let mut series: BTreeMap<&[Label], Vec<Sample>> = BTreeMap::new();
            for p in chunk {
                series.entry(&p.labels).or_default().push(Sample {
                    value: p.value,
                    timestamp: p.timestamp_ms,
                });
            }
            WriteRequest {
                timeseries: series
                    .into_iter()
                    .map(|(labels, samples)| TimeSeries {
                        labels: labels.to_vec(),
                        samples,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// What a sweep that pushes after every level has already sent: each push sends only the
/// samples it has not (a finished level's samples do not change; a capacity moves to a new
/// timestamp with each level), so no sample is sent twice and a failed push's samples go
/// again with the next one.
#[derive(Debug, Default)]
pub struct Outbox {
    sent: HashSet<(Vec<Label>, i64)>,
}

impl Outbox {
    /// The samples of `run` not yet marked sent.
    pub fn pending(&self, run: &RunResult, run_id: &str) -> Vec<Point> {
        points(run, run_id)
            .into_iter()
            .filter(|p| !self.sent.contains(&(p.labels.clone(), p.timestamp_ms)))
            .collect()
    }

    /// Marks `points` sent: delivered, or refused for good (a 4xx: sending them again would be
    /// refused again).
    pub fn mark_sent(&mut self, points: &[Point]) {
        self.sent
            .extend(points.iter().map(|p| (p.labels.clone(), p.timestamp_ms)));
    }
}

/// The `run_id` label of the run in `run_dir`: the directory's name (`20261129T215726Z` for
/// `runs/20261129T215726Z`), of its canonical path when the path as given has none (`.`).
pub fn run_id(run_dir: &std::path::Path) -> String {
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
    };
    name(run_dir)
        .or_else(|| run_dir.canonicalize().ok().as_deref().and_then(name))
        .unwrap_or_else(|| run_dir.display().to_string())
}

/// When the level's measurement ended (its last repeat's), Unix milliseconds.
fn level_end_ms(level: &LevelResult) -> i64 {
    let end = std::iter::once(level)
        .chain(&level.repeats)
        .map(|l| l.started_unix_s + l.window_s)
        .fold(f64::NEG_INFINITY, f64::max);
    (end * 1000.0).round() as i64
}

/// The class a class phase is about; none for the mix.
fn phase_class(phase: &PhaseResult) -> Option<&str> {
    match phase.classes.as_slice() {
        [(c, _)] if *c == phase.name => Some(c.as_str()),
        _ => None,
    }
}

fn mode_name(m: LoadMode) -> &'static str {
    match m {
        LoadMode::Concurrency => "concurrency",
        LoadMode::Rate => "rate",
    }
}

fn verdict_value(v: Verdict) -> Option<f64> {
    match v {
        Verdict::Pass => Some(1.0),
        Verdict::Fail => Some(0.0),
        Verdict::Inconclusive => None,
    }
}

fn point(labels: Vec<(&str, String)>, value: f64, timestamp_ms: i64) -> Point {
    let mut labels: Vec<Label> = labels
        .into_iter()
        .map(|(name, value)| Label {
            name: name.to_string(),
            value,
        })
        .collect();
    // The specification requires labels sorted by name.
    labels.sort_by(|a, b| a.name.cmp(&b.name));
    Point {
        labels,
        value,
        timestamp_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn label<'a>(p: &'a Point, name: &str) -> Option<&'a str> {
        p.labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.as_str())
    }

    fn named<'a>(ps: &'a [Point], name: &str) -> Vec<&'a Point> {
        ps.iter()
            .filter(|p| label(p, "__name__") == Some(name))
            .collect()
    }

    #[test]
    fn a_run_is_these_series() {
        // testdata::run: phase `chat <&>`, levels 4 PASS, 8 PASS, 16 FAIL (TTFT p95 0.05, 0.1,
        // 0.5 s against 0.3 s), each window 1 s + 10 s, capacity 8.
        let ps = points(&testdata::run(), "20261129T215726Z");
        let v = named(&ps, "headroom_sweep_level_objective_value");
        assert_eq!(
            v.iter().map(|p| p.value).collect::<Vec<_>>(),
            [0.05, 0.1, 0.5]
        );
        let p = v[2];
        assert_eq!(p.timestamp_ms, 11_000);
        let want = [
            ("__name__", "headroom_sweep_level_objective_value"),
            ("class", "chat <&>"),
            ("job", "headroom"),
            ("load", "16"),
            ("mode", "concurrency"),
            ("objective", "ttft_p95"),
            ("phase", "chat <&>"),
            ("run_id", "20261129T215726Z"),
            ("unit", "seconds"),
        ];
        let got: Vec<(&str, &str)> = p
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(got, want);
        let verdicts = named(&ps, "headroom_sweep_level_verdict");
        assert_eq!(
            verdicts.iter().map(|p| p.value).collect::<Vec<_>>(),
            [1.0, 1.0, 0.0]
        );
        let cap = named(&ps, "headroom_sweep_phase_capacity");
        assert_eq!(cap.len(), 1);
        assert_eq!((cap[0].value, cap[0].timestamp_ms), (8.0, 11_000));
        assert_eq!(label(cap[0], "load"), None);
        let tput = named(&ps, "headroom_sweep_level_throughput_tokens_per_second");
        assert_eq!(
            tput.iter().map(|p| p.value).collect::<Vec<_>>(),
            [1600.0, 3200.0, 6400.0]
        );
        assert_eq!(
            named(&ps, "headroom_sweep_level_goodput_per_second").len(),
            3
        );
    }

    #[test]
    fn an_inconclusive_level_has_no_verdict_sample_and_the_mix_names_classes() {
        let mut run = testdata::run();
        let phase = &mut run.phases[0];
        phase.name = "mix".into();
        phase.classes = vec![("a".into(), 1.0), ("b".into(), 1.0)];
        let level = &mut phase.levels[0];
        level.verdict = Verdict::Inconclusive;
        level.objectives[0].verdict = Verdict::Inconclusive;
        level.objectives[0].id = crate::testdata::id("a/error_rate");
        level.objectives[0].observed = None;
        level.goodput_per_s = None;
        let ps: Vec<Point> = points(&run, "r")
            .into_iter()
            .filter(|p| label(p, "load") == Some("4"))
            .collect();
        let names: Vec<&str> = ps.iter().filter_map(|p| label(p, "__name__")).collect();
        assert_eq!(
            names,
            [
                "headroom_sweep_level_inconclusive",
                "headroom_sweep_level_throughput_tokens_per_second",
                "headroom_sweep_level_requests_per_second",
                "headroom_sweep_level_objective_threshold",
            ]
        );
        assert_eq!(ps[0].value, 1.0);
        assert_eq!(label(&ps[0], "class"), None);
        assert_eq!(label(&ps[3], "class"), Some("a"));
        assert_eq!(label(&ps[3], "objective"), Some("error_rate"));
        assert_eq!(label(&ps[3], "unit"), Some("ratio"));
    }

    #[test]
    fn a_level_ends_with_its_last_repeat() {
        let mut run = testdata::run();
        let level = &mut run.phases[0].levels[0];
        let mut repeat = level.clone();
        repeat.started_unix_s = 20.0;
        level.repeats.push(repeat);
        let ps = points(&run, "r");
        let first = named(&ps, "headroom_sweep_level_verdict")
            .into_iter()
            .find(|p| label(p, "load") == Some("4"))
            .unwrap();
        assert_eq!(first.timestamp_ms, 30_000);
    }

    #[test]
    fn the_outbox_sends_each_sample_once() {
        let mut run = testdata::run();
        for (i, l) in run.phases[0].levels.iter_mut().enumerate() {
            l.started_unix_s = 10.0 * i as f64;
        }
        let full = run.clone();
        run.phases[0].levels.truncate(1);
        run.phases[0].capacity = Some(4.0);
        let mut outbox = Outbox::default();
        let first = outbox.pending(&run, "r");
        assert!(!first.is_empty());
        outbox.mark_sent(&first);
        assert!(outbox.pending(&run, "r").is_empty());
        let next = outbox.pending(&full, "r");
        // Levels 8 and 16 (ending at 20 and 30 s), and the capacity at the last one's end.
        assert!(
            next.iter()
                .all(|p| [20_000, 30_000].contains(&p.timestamp_ms)),
            "{next:?}"
        );
        let cap = named(&next, "headroom_sweep_phase_capacity");
        assert_eq!((cap[0].value, cap[0].timestamp_ms), (8.0, 30_000));
        // 8 samples a level (5 level-wide, 3 of its one objective), 1 capacity.
        assert_eq!((first.len(), next.len()), (9, 17));
    }

    #[test]
    fn requests_group_series_and_split_at_the_limit() {
        let mut run = testdata::run();
        let level = run.phases[0].levels[0].clone();
        run.phases[0].levels = (0..300)
            .map(|i| {
                let mut l = level.clone();
                l.load = f64::from(i) + 1.0;
                l.started_unix_s = f64::from(i);
                l
            })
            .collect();
        let ps = points(&run, "r");
        let reqs = write_requests(&ps);
        assert_eq!(reqs.len(), ps.len().div_ceil(MAX_SAMPLES_PER_REQUEST));
        let samples: usize = reqs
            .iter()
            .flat_map(|r| &r.timeseries)
            .map(|s| s.samples.len())
            .sum();
        assert_eq!(samples, ps.len());
        for r in &reqs {
            let n: usize = r.timeseries.iter().map(|s| s.samples.len()).sum();
            assert!(n <= MAX_SAMPLES_PER_REQUEST);
            for s in &r.timeseries {
                assert!(s.labels.windows(2).all(|w| w[0].name < w[1].name));
                assert!(
                    s.samples
                        .windows(2)
                        .all(|w| w[0].timestamp < w[1].timestamp)
                );
            }
        }
    }
}
