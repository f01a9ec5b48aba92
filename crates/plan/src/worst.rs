//! The capacity a plan still claims when the twin is as wrong as its validation saw it be.
//!
//! A plan's capacity band ([`headroom_core::run::CapacityBand`]) is the sampling noise of the
//! simulated levels; the twin's own error is a separate, larger term ([`crate::bounds`]). This
//! module turns that error into a figure a capacity review can hold: each planned latency is
//! moved to the pessimistic edge of its signal's validated error, every objective is judged
//! again on the levels already planned, and the highest level that still meets all of them is
//! the worst case. Relative errors are `twin / real − 1`, so a real figure is `twin / (1 + e)`
//! and the largest real latency is `twin / (1 + low)`.

use crate::bounds::{
    CALIBRATED_HELD_OUT, CALIBRATED_WHAT_IF, FitBounds, SIGNAL_ERRORS, SignalError,
};
use headroom_core::LatencySignal;
use headroom_core::Verdict;
use headroom_core::objective::ObjectiveKind;
use headroom_core::run::{LevelResult, PhaseResult};

/// Factors that move planned figures to the pessimistic edge of the twin's error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorEdge {
    /// Planned TTFT is multiplied by this (≥ 1).
    pub ttft: f64,
    /// Planned ITL and TPOT are multiplied by this (≥ 1).
    pub itl: f64,
    /// Planned throughput (tokens/s, requests/s) is divided by this (≥ 1).
    pub throughput: f64,
}

/// The largest factor applied (an error of −99 % reads as 100×): beyond it the edge says
/// nothing a capacity review could use.
const MAX_FACTOR: f64 = 100.0;

impl ErrorEdge {
    /// From per-signal error ranges `(signal, low, high)` (`itl`, `ttft`, `throughput`; relative,
    /// `twin / real − 1`); a signal not given is taken from [`SIGNAL_ERRORS`].
    pub fn from_errors<'a>(errors: impl IntoIterator<Item = &'a (&'a str, f64, f64)>) -> Self {
        let given: Vec<&(&str, f64, f64)> = errors.into_iter().collect();
        let range = |s: &str| {
            given
                .iter()
                .find(|e| e.0 == s)
                .map(|e| (e.1, e.2))
                .or_else(|| {
                    SIGNAL_ERRORS
                        .iter()
                        .find(|e| e.signal == s)
                        .map(|e| (e.low, e.high))
                })
                .unwrap_or((0.0, 0.0))
        };
        // A twin that reads low (e < 0) is optimistic on a latency; one that reads high on
        // throughput is optimistic there. Pessimistic figures are never relaxed (factor ≥ 1).
        let latency = |(low, _): (f64, f64)| (1.0 / (1.0 + low).max(1.0 / MAX_FACTOR)).max(1.0);
        let (_, thr_high) = range("throughput");
        ErrorEdge {
            ttft: latency(range("ttft")),
            itl: latency(range("itl")),
            throughput: (1.0 + thr_high).clamp(1.0, MAX_FACTOR),
        }
    }

    /// The edge a plan states. Calibrated: per signal, the wider of the fit's own residuals
    /// (in-sample) and what a calibrated twin was seen to miss where its fit never looked: other
    /// loads ([`CALIBRATED_HELD_OUT`]), or in a what-if ([`FitBounds::what_if`]) another
    /// configuration ([`CALIBRATED_WHAT_IF`]). Otherwise the presets' validated errors
    /// ([`SIGNAL_ERRORS`]). Constants carried to another card are validated by nothing of that
    /// card, so there the presets' errors widen the edge too.
    pub fn of(fit: Option<&FitBounds>) -> Self {
        let Some(f) = fit else {
            return Self::from_errors(&[]);
        };
        let held = if f.what_if.is_empty() {
            &CALIBRATED_HELD_OUT
        } else {
            &CALIBRATED_WHAT_IF
        };
        let presets: &[SignalError] = if f.other_card { &SIGNAL_ERRORS } else { &[] };
        let wider: Vec<(&str, f64, f64)> = held
            .iter()
            .map(|h| {
                let others = f
                    .errors
                    .iter()
                    .copied()
                    .chain(presets.iter().map(|p| (p.signal, p.low, p.high)));
                others
                    .filter(|e| e.0 == h.signal)
                    .fold((h.signal, h.low, h.high), |r, e| {
                        (r.0, r.1.min(e.1), r.2.max(e.2))
                    })
            })
            .collect();
        Self::from_errors(&wider)
    }

    /// The factor on `signal`'s planned value at `level`. E2E is its TTFT part times the TTFT
    /// factor plus its decode part times the ITL factor, split by the level's means. Queue time
    /// is the engine's own and was never held against a real server: it stays as planned.
    pub fn latency(&self, signal: LatencySignal, level: &LevelResult) -> f64 {
        match signal {
            LatencySignal::Ttft => self.ttft,
            LatencySignal::Itl | LatencySignal::Tpot => self.itl,
            LatencySignal::QueueTime => 1.0,
            LatencySignal::E2e => {
                let mean = |s: &str| level.latency.get(s).map_or(0.0, |l| l.mean_s);
                let (ttft, e2e) = (mean("ttft"), mean("e2e"));
                // Without both means the split is unknown: the larger factor, never the smaller.
                if e2e > 0.0 && ttft > 0.0 {
                    let ttft = ttft.min(e2e);
                    (ttft * self.ttft + (e2e - ttft) * self.itl) / e2e
                } else {
                    self.ttft.max(self.itl)
                }
            }
        }
    }

    /// One line for the plan's output: what the worst case multiplies.
    pub fn describe(&self) -> String {
        format!(
            "TTFT ×{:.2}, ITL and TPOT ×{:.2}, E2E in proportion, throughput ÷{:.2}; queue time and error rate as planned",
            self.ttft, self.itl, self.throughput
        )
    }
}

/// A phase's capacity at the edge of the twin's error.
#[derive(Debug, Clone, PartialEq)]
pub struct WorstCase {
    /// Highest planned load that meets every objective with its figure at the edge, below the
    /// lowest load that does not (`None`: not even the lowest level planned does).
    pub capacity: Option<f64>,
    /// Completed requests per second at that level, divided by the throughput factor.
    pub request_rate_per_s: Option<f64>,
    /// The objective that broke first at the edge (its description), if one did.
    pub first_breach: Option<String>,
}

/// Whether `level` meets every objective with its figures at `edge`, and if not, the first
/// objective that does not. An objective that was not a PASS as planned is not one at the edge.
fn holds_at_edge(level: &LevelResult, edge: &ErrorEdge) -> Result<(), String> {
    for o in &level.objectives {
        if o.verdict != Verdict::Pass {
            return Err(o.description.clone());
        }
        if let ObjectiveKind::Latency { signal, .. } = o.id.kind
            && let Some(v) = o.observed
            && v * edge.latency(signal, level) > o.threshold
        {
            return Err(o.description.clone());
        }
    }
    if level.verdict == Verdict::Pass {
        Ok(())
    } else {
        Err("the level's verdict".into())
    }
}

/// The phase's capacity with every figure at `edge`, from the levels already planned (no level
/// is run again: the worst case is a planned level, so it is a lower bound on the load between
/// it and the next level planned).
pub fn worst_case(p: &PhaseResult, edge: &ErrorEdge) -> WorstCase {
    let mut levels: Vec<&LevelResult> = p.levels.iter().collect();
    levels.sort_by(|a, b| a.load.total_cmp(&b.load));
    let mut out = WorstCase {
        capacity: None,
        request_rate_per_s: None,
        first_breach: None,
    };
    for l in levels {
        match holds_at_edge(l, edge) {
            Ok(()) => {
                out.capacity = Some(l.load);
                out.request_rate_per_s = Some(l.request_rate_per_s / edge.throughput);
            }
            Err(what) => {
                out.first_breach = Some(what);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::Objective;
    use headroom_core::run::{
        ClientHealth, LatencySummary, LoadMode, ObjectiveResult, TokenCounts,
    };
    use std::collections::BTreeMap;

    fn ttft_p95(observed_s: f64, threshold_s: f64) -> ObjectiveResult {
        let o = Objective::Latency {
            signal: LatencySignal::Ttft,
            percentile: 95.0,
            threshold_s,
        };
        let pass = observed_s <= threshold_s;
        ObjectiveResult::new(
            &o,
            threshold_s,
            Some(observed_s),
            if pass { Verdict::Pass } else { Verdict::Fail },
            1000,
            String::new(),
        )
    }

    fn level(load: f64, ttft_s: f64) -> LevelResult {
        let objectives = vec![ttft_p95(ttft_s, 0.3)];
        LevelResult {
            load,
            mode: LoadMode::Concurrency,
            started_unix_s: 0.0,
            window_s: 600.0,
            window_note: "full".into(),
            outcomes: BTreeMap::new(),
            level_outcomes: BTreeMap::new(),
            latency: BTreeMap::from([(
                "ttft".to_string(),
                LatencySummary {
                    count: 1000,
                    mean_s: ttft_s,
                    ..LatencySummary::default()
                },
            )]),
            request_rate_per_s: load,
            output_tokens_per_s: 0.0,
            goodput_per_s: None,
            tokens: TokenCounts::default(),
            verdict: objectives[0].verdict,
            objectives,
            client: ClientHealth::default(),
            server: None,
            histograms: String::new(),
            repeats: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn phase(levels: Vec<LevelResult>) -> PhaseResult {
        PhaseResult {
            name: "chat".into(),
            classes: vec![("chat".into(), 1.0)],
            mode: LoadMode::Concurrency,
            capacity: None,
            first_fail: None,
            first_breach: None,
            capacity_band: None,
            search_note: String::new(),
            levels,
        }
    }

    #[test]
    fn the_edge_is_the_reciprocal_of_the_most_optimistic_error_and_never_relaxes_a_figure() {
        // Twin reads TTFT 50 % low at worst: the real TTFT may be twice the planned one.
        let e = ErrorEdge::from_errors(&[
            ("ttft", -0.5, 0.1),
            ("itl", 0.02, 0.05),
            ("throughput", -0.1, 0.25),
        ]);
        assert!((e.ttft - 2.0).abs() < 1e-12);
        // An ITL that only ever read high is pessimistic already: left as planned.
        assert_eq!(e.itl, 1.0);
        assert!((e.throughput - 1.25).abs() < 1e-12);
        // The presets' own errors fill a signal the calibration did not measure.
        let g = ErrorEdge::from_errors(&[("itl", -0.2, 0.0)]);
        let ttft = SIGNAL_ERRORS.iter().find(|e| e.signal == "ttft").unwrap();
        assert!((g.ttft - 1.0 / (1.0 + ttft.low)).abs() < 1e-12);
        assert!((g.itl - 1.25).abs() < 1e-12);
        assert_eq!(ErrorEdge::of(None), ErrorEdge::from_errors(&[]));
    }

    #[test]
    fn a_calibrated_edge_is_the_wider_of_the_fits_residuals_and_the_held_out_errors() {
        let fit = |ttft_low: f64| FitBounds {
            source: "run".into(),
            same_card: true,
            errors: vec![("ttft", ttft_low, 0.0), ("itl", -0.01, 0.01)],
            unconstrained: Vec::new(),
            other_card: false,
            what_if: Vec::new(),
        };
        let held = |s: &str| CALIBRATED_HELD_OUT.iter().find(|e| e.signal == s).unwrap();
        // A tight in-sample fit still carries the held-out error.
        let e = ErrorEdge::of(Some(&fit(-0.01)));
        assert!((e.ttft - 1.0 / (1.0 + held("ttft").low)).abs() < 1e-12);
        assert!((e.itl - 1.0 / (1.0 + held("itl").low)).abs() < 1e-12);
        assert!((e.throughput - (1.0 + held("throughput").high)).abs() < 1e-12);
        // A loose fit widens it.
        let e = ErrorEdge::of(Some(&fit(-0.4)));
        assert!((e.ttft - 1.0 / 0.6).abs() < 1e-12);
        // Narrower than the presets' own error: calibrating is what narrows the worst case.
        assert!(e.ttft < ErrorEdge::of(None).ttft);
        // A what-if takes the wider band of configurations the fit never saw.
        let mut w = fit(-0.01);
        w.what_if = vec!["--max-num-seqs 2 (measured 8)".into()];
        let e = ErrorEdge::of(Some(&w));
        let what_if = CALIBRATED_WHAT_IF
            .iter()
            .find(|e| e.signal == "ttft")
            .unwrap();
        assert!((e.ttft - 1.0 / (1.0 + what_if.low)).abs() < 1e-12);
        assert!(e.ttft > ErrorEdge::of(Some(&fit(-0.01))).ttft);
        // Carried to another card, the edge is never narrower than the presets' own.
        w.other_card = true;
        let e = ErrorEdge::of(Some(&w));
        let presets = ErrorEdge::of(None);
        assert_eq!(e.ttft, presets.ttft);
        assert!(e.itl >= presets.itl && e.throughput >= presets.throughput);
    }

    #[test]
    fn the_worst_case_is_the_highest_level_that_still_passes_with_its_figures_at_the_edge() {
        // TTFT p95 120, 140, 160, 280 ms against 300 ms: all pass as planned. At ×2 only the
        // first two stay under 300 ms.
        let p = phase(vec![
            level(8.0, 0.16),
            level(1.0, 0.12),
            level(4.0, 0.14),
            level(16.0, 0.28),
        ]);
        let e = ErrorEdge::from_errors(&[("ttft", -0.5, 0.0), ("throughput", 0.0, 0.25)]);
        let w = worst_case(&p, &e);
        assert_eq!(w.capacity, Some(4.0));
        assert_eq!(w.request_rate_per_s, Some(4.0 / 1.25));
        assert_eq!(
            w.first_breach.as_deref(),
            Some(p.levels[0].objectives[0].description.as_str())
        );
        // A twin without error keeps every planned pass.
        let none = ErrorEdge {
            ttft: 1.0,
            itl: 1.0,
            throughput: 1.0,
        };
        assert_eq!(worst_case(&p, &none).capacity, Some(16.0));
        // Not even the lowest level holds: no worst-case capacity.
        let harsh = ErrorEdge { ttft: 3.0, ..none };
        assert_eq!(worst_case(&p, &harsh).capacity, None);
    }

    #[test]
    fn a_level_that_did_not_pass_as_planned_ends_the_worst_case_whatever_the_edge() {
        let mut l = level(2.0, 0.1);
        l.objectives[0].verdict = Verdict::Inconclusive;
        l.verdict = Verdict::Inconclusive;
        let p = phase(vec![level(1.0, 0.1), l, level(4.0, 0.1)]);
        let none = ErrorEdge {
            ttft: 1.0,
            itl: 1.0,
            throughput: 1.0,
        };
        assert_eq!(worst_case(&p, &none).capacity, Some(1.0));
    }

    #[test]
    fn e2e_takes_each_factor_on_its_own_part() {
        let mut l = level(1.0, 0.1);
        l.latency.insert(
            "e2e".into(),
            LatencySummary {
                count: 1000,
                mean_s: 1.0,
                ..LatencySummary::default()
            },
        );
        let e = ErrorEdge {
            ttft: 3.0,
            itl: 1.1,
            throughput: 1.0,
        };
        // 0.1 s of TTFT ×3 and 0.9 s of decode ×1.1.
        assert!((e.latency(LatencySignal::E2e, &l) - (0.3 + 0.99)).abs() < 1e-12);
        assert_eq!(e.latency(LatencySignal::QueueTime, &l), 1.0);
    }
}
