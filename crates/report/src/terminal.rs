//! The summary printed at the end of `headroom sweep`: per phase, the capacity, the first
//! objective to break and the headroom at the operating point.

use crate::{fmt_load, fmt_objective_value};
use headroom_core::Verdict;
use headroom_core::run::{PhaseResult, RunResult, RunStatus};
use headroom_core::slo::fmt_num;

/// Renders the capacity table and warnings as plain text (no colour codes).
pub fn render(run: &RunResult) -> String {
    let mut out = String::new();
    out.push_str("Capacity per phase (highest load meeting every objective)\n\n");
    let rows: Vec<[String; 4]> = run
        .phases
        .iter()
        .map(|p| {
            let binding = p.binding_objectives();
            let cap = match (p.capacity, p.operating_level()) {
                (Some(c), Some(l)) if !l.verdict_is_certain_for(binding.as_deref()) => {
                    match p.capacity_band().low.filter(|lo| *lo < c) {
                        Some(lo) => format!("{}–{}", fmt_num(lo), fmt_load(c, p.mode)),
                        None => format!("≤ {} (borderline)", fmt_load(c, p.mode)),
                    }
                }
                // Nothing failed above it: the highest load tried, a lower bound.
                (Some(c), _) if p.first_fail.is_none() => format!("≥ {}", fmt_load(c, p.mode)),
                (Some(c), _) => fmt_load(c, p.mode),
                (None, _) => "none passed".into(),
            };
            let breach = match (&p.first_breach, p.first_fail) {
                (Some(b), Some(f)) => p
                    .levels
                    .iter()
                    .find(|l| (l.load - f).abs() < 1e-9)
                    .and_then(|l| l.objectives.iter().find(|o| &o.id == b))
                    .map(|o| match o.verdict {
                        headroom_core::Verdict::Fail => format!(
                            "{} (observed {}) at {}",
                            o.description,
                            o.observed
                                .map(|v| crate::fmt_observed(o.unit(), v, o.threshold))
                                .unwrap_or_else(|| "n/a".into()),
                            fmt_load(f, p.mode)
                        ),
                        // Nothing broke there: the level gave no verdict, which stops the
                        // search just the same, and says so.
                        _ => format!(
                            "none; {} undecided at {} ({})",
                            o.id,
                            fmt_load(f, p.mode),
                            o.reason
                        ),
                    })
                    .unwrap_or_else(|| b.to_string()),
                (None, Some(f)) => format!("inconclusive at {}", fmt_load(f, p.mode)),
                _ => "none broke".into(),
            };
            let head = p
                .headroom()
                .first()
                .map(|h| {
                    format!(
                        "{} {} against {}, {}×",
                        h.objective,
                        crate::fmt_observed(h.objective.unit(), h.observed, h.threshold),
                        fmt_objective_value(h.objective.unit(), h.threshold),
                        fmt_ratio(h.ratio)
                    )
                })
                .unwrap_or_else(|| "-".into());
            [p.name.clone(), cap, breach, head]
        })
        .collect();
    let header = [
        "phase".to_string(),
        "capacity".into(),
        "first objective to break".into(),
        "tightest headroom at capacity".into(),
    ];
    let mut widths = header.clone().map(|h| h.chars().count());
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String; 4]| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            s.push_str(c);
            if i < 3 {
                s.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    out.push_str(&line(&header));
    for r in &rows {
        out.push_str(&line(r));
    }
    for p in &run.phases {
        if let Some(h) = p.headroom().first() {
            out.push_str(&format!(
                "\n{}: at {}: {} {} against {}, {}× headroom",
                p.name,
                fmt_load(h.load, p.mode),
                h.description.split(" < ").next().unwrap_or_default(),
                crate::fmt_observed(h.objective.unit(), h.observed, h.threshold),
                fmt_objective_value(h.objective.unit(), h.threshold),
                fmt_ratio(h.ratio)
            ));
        }
    }
    for p in &run.phases {
        if let Some(line) = uncertainty_line(p) {
            out.push_str(&format!("\n{line}"));
        }
    }
    out.push('\n');
    if let RunStatus::Stopped { reason } = &run.status {
        out.push_str(&format!(
            "\nThe run stopped early: {reason}. Results above cover the levels that finished.\n"
        ));
    }
    if !run.warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for w in &run.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}

/// What the capacity's uncertainty is, when there is some to tell: `mix: capacity 112–160
/// concurrent: ITL p95 is within noise of 50 ms at 160 (a borderline PASS); certain FAIL at 192`,
/// or, for a phase whose levels were all short of samples, the flag that would settle it.
fn uncertainty_line(p: &PhaseResult) -> Option<String> {
    let band = p.capacity_band();
    let binding = p.binding_objectives();
    if let (Some(cap), Some(level)) = (p.capacity, p.operating_level())
        && let Some(o) = level.deciding_borderline(binding.as_deref())
    {
        let range = match band.low.filter(|lo| *lo < cap) {
            Some(lo) => format!("{}–{}", fmt_num(lo), fmt_load(cap, p.mode)),
            None => format!("at most {}", fmt_load(cap, p.mode)),
        };
        let sig = o.description.split(" < ").next().unwrap_or_default();
        let fail = band
            .high
            .map(|h| format!("; certain FAIL at {}", fmt_load(h, p.mode)))
            .unwrap_or_default();
        let thr = fmt_objective_value(o.unit(), o.threshold);
        let at = fmt_load(cap, p.mode);
        // Too few samples to be sure of a clear figure, or a figure at the threshold itself:
        // the first a longer window settles, the second no window will.
        let why = match o.share.as_ref().map(|s| (s, s.samples_to_decide())) {
            Some((s, Some(need))) if need <= 10 * s.n.max(1) => format!(
                "{sig} passed with {} of {} samples above {thr}, too few to be certain; about {need} would be (a --measure {:.1}× longer)",
                s.bad,
                s.n,
                need as f64 / s.n.max(1) as f64
            ),
            // The verdict is on the share of samples above the threshold; say so, since the
            // percentile shown elsewhere can sit far below the threshold when the share is at
            // the allowed one (two modes: most ITL gaps are decode steps, a few are prefills).
            Some((s, _)) if s.n > 0 => format!(
                "{sig}: {} of {} samples above {thr} ({:.1}%), within noise of the {:.0}% it allows at {at} (a borderline PASS)",
                s.bad,
                s.n,
                100.0 * s.bad as f64 / s.n as f64,
                100.0 * s.allowed
            ),
            _ => format!("{sig} is within noise of {thr} at {at} (a borderline PASS)"),
        };
        return Some(format!("{}: capacity {range}: {why}{fail}", p.name));
    }
    let all_short = !p.levels.is_empty()
        && p.levels.iter().all(|l| {
            l.verdict == Verdict::Inconclusive
                && l.objectives.iter().any(|o| o.sample_shortfall().is_some())
        });
    if p.capacity.is_none() && all_short {
        return Some(format!(
            "{}: no level gathered the samples a verdict needs; a longer window (e.g. --measure 2m) or a higher --start would",
            p.name
        ));
    }
    None
}

/// A headroom ratio (`threshold / observed`): as `fmt_num`, with more decimals (up to 4) when
/// that would print `1` for a ratio that is not exactly 1 (49.97 ms against 50 ms is 1.001×,
/// not 1×, and not a breach); `∞` when nothing was observed above zero.
fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() {
        return "∞".into();
    }
    let plain = fmt_num(r);
    if plain != "1" || r == 1.0 {
        return plain;
    }
    (2..=4)
        .map(|d| format!("{r:.d$}"))
        .find(|s| s.trim_end_matches('0').trim_end_matches('.') != "1")
        .map_or(plain, |s| s.trim_end_matches('0').to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_undecided_level_is_not_called_a_breach() {
        let mut run = crate::testdata::run();
        let p = &mut run.phases[0];
        let f = p.first_fail.unwrap();
        let l = p
            .levels
            .iter_mut()
            .find(|l| (l.load - f).abs() < 1e-9)
            .unwrap();
        l.objectives[0].verdict = headroom_core::Verdict::Inconclusive;
        l.objectives[0].reason = "3 samples; p95 needs at least 20".into();
        let s = super::render(&run);
        assert!(
            s.contains(
                "none; ttft_p95 undecided at 16 concurrent (3 samples; p95 needs at least 20)"
            ),
            "{s}"
        );
        assert!(!s.contains("(observed"), "{s}");
    }

    /// An observed value just under its threshold never prints as the threshold, nor its
    /// headroom as exactly 1: 50 ms / 49.971199 ms = 1.000576…, 1.001× to three decimals.
    #[test]
    fn headroom_just_under_the_threshold_reads_as_such() {
        let mut run = crate::testdata::run();
        let l = &mut run.phases[0].levels[1];
        l.objectives[0].observed = Some(0.049971199);
        l.objectives[0].threshold = 0.05;
        let s = super::render(&run);
        assert!(
            s.contains("at 8 concurrent: TTFT p95 49.97 ms against 50 ms, 1.001× headroom"),
            "{s}"
        );
        assert_eq!(super::fmt_ratio(1.0), "1");
        assert_eq!(super::fmt_ratio(0.9996), "0.9996");
        assert_eq!(super::fmt_ratio(1.00001), "1");
        assert_eq!(super::fmt_ratio(3.0), "3");
        assert_eq!(super::fmt_ratio(f64::INFINITY), "∞");
    }

    /// A capacity decided by a point estimate is a band, not a number: certain PASS at 4, a
    /// borderline PASS at 8 (TTFT p95 within noise of 300 ms), a certain FAIL at 16.
    #[test]
    fn a_borderline_capacity_is_shown_as_a_band() {
        let mut run = crate::testdata::run();
        let p = &mut run.phases[0];
        p.levels[1].objectives[0].reason = format!(
            "15 of 300 above the threshold; {}",
            headroom_core::run::BORDERLINE
        );
        p.levels[1].objectives[0].observed = Some(0.299);
        let band = p.capacity_band();
        assert_eq!(
            (band.low, band.high, band.borderline.as_slice()),
            (Some(4.0), Some(16.0), &[8.0][..])
        );
        let s = super::render(&run);
        assert!(s.contains("4–8 concurrent"), "{s}");
        assert!(
            s.contains(
                "chat <&>: capacity 4–8 concurrent: TTFT p95 is within noise of 300 ms at 8 concurrent (a borderline PASS); certain FAIL at 16 concurrent"
            ),
            "{s}"
        );
        // Judged by its share: the share and what the percentile allows, not the percentile
        // (which can sit far below the threshold when a few samples are far above it).
        run.phases[0].levels[1].objectives[0] = run.phases[0].levels[1].objectives[0]
            .clone()
            .with_share(15, 300, 0.05);
        let s = super::render(&run);
        assert!(
            s.contains("TTFT p95: 15 of 300 samples above 300 ms (5.0%), within noise of the 5% it allows at 8 concurrent (a borderline PASS)"),
            "{s}"
        );
        // A clear figure on too few samples: the count says how many would settle it.
        run.phases[0].levels[1].objectives[0] = run.phases[0].levels[1].objectives[0]
            .clone()
            .with_share(0, 33, 0.05);
        let s = super::render(&run);
        assert!(
            s.contains("TTFT p95 passed with 0 of 33 samples above 300 ms, too few to be certain; about 73 would be (a --measure 2.2× longer)"),
            "{s}"
        );
        run.phases[0].levels[1].objectives[0].share = None;
        // With no certain pass below it, the capacity is an upper bound.
        run.phases[0].levels[0].objectives[0].reason =
            format!("1 of 40 above; {}", headroom_core::run::BORDERLINE);
        let s = super::render(&run);
        assert!(s.contains("≤ 8 concurrent (borderline)"), "{s}");
        assert!(s.contains("capacity at most 8 concurrent"), "{s}");
    }

    /// A phase whose every level lacked samples says which flag would settle it.
    #[test]
    fn a_phase_short_of_samples_everywhere_names_the_flag() {
        let mut run = crate::testdata::run();
        let p = &mut run.phases[0];
        for l in &mut p.levels {
            l.verdict = headroom_core::Verdict::Inconclusive;
            l.objectives[0].verdict = headroom_core::Verdict::Inconclusive;
            l.objectives[0].samples = 2;
        }
        p.capacity = None;
        p.first_fail = None;
        let s = super::render(&run);
        assert!(s.contains("--measure 2m"), "{s}");
    }

    #[test]
    fn summary_shows_capacity_breach_and_headroom() {
        let s = super::render(&crate::testdata::run());
        assert!(s.contains("8 concurrent"), "{s}");
        assert!(
            s.contains("TTFT p95 < 300 ms (observed 500 ms) at 16 concurrent"),
            "{s}"
        );
        // 0.3 / 0.1 = 3
        assert!(
            s.contains("at 8 concurrent: TTFT p95 100 ms against 300 ms, 3× headroom"),
            "{s}"
        );
        assert!(s.contains("client CPU high"));
    }
}
