//! The summary printed at the end of `headroom sweep`: per phase, the capacity, the first
//! objective to break and the headroom at the operating point.

use crate::{fmt_load, fmt_objective_value};
use headroom_core::run::{RunResult, RunStatus};
use headroom_core::slo::fmt_num;

/// Renders the capacity table and warnings as plain text (no colour codes).
pub fn render(run: &RunResult) -> String {
    let mut out = String::new();
    out.push_str("Capacity per phase (highest load meeting every objective)\n\n");
    let rows: Vec<[String; 4]> = run
        .phases
        .iter()
        .map(|p| {
            let cap = p
                .capacity
                .map(|c| fmt_load(c, p.mode))
                .unwrap_or_else(|| "none passed".into());
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
                                .map(|v| crate::fmt_observed(&o.id, v, o.threshold))
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
                    .unwrap_or_else(|| b.clone()),
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
                        fmt_objective_value(&h.objective, h.observed),
                        fmt_objective_value(&h.objective, h.threshold),
                        if h.ratio.is_finite() {
                            fmt_num(h.ratio)
                        } else {
                            "∞".into()
                        }
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
                h.description.split(" < ").next().unwrap_or(&h.objective),
                fmt_objective_value(&h.objective, h.observed),
                fmt_objective_value(&h.objective, h.threshold),
                if h.ratio.is_finite() {
                    fmt_num(h.ratio)
                } else {
                    "∞".into()
                }
            ));
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
