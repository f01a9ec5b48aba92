//! The error budget in `headroom compare`'s decision (`--budget-from PROMETHEUS_URL --slo
//! slo.yaml`): when an objective's budget is consumed past the SLO file's `budget.freeze_at`,
//! non-essential tuning is frozen, so a candidate is promoted only when it is *strictly better*
//! on every such objective: better beyond the noise at one level or more both runs measured,
//! and worse or undecided at none. Otherwise the decision is HELD (exit 1, as a regression: a
//! freeze blocks the promotion until the budget recovers or the candidate fixes what burns).
//! A regression stays a regression; the output names the burning objective either way.
//!
//! The budget's state is computed by the caller (the CLI reads it from Prometheus with the slo
//! crate); this module only applies it to a [`Comparison`].

use super::compare::{Change, Comparison, Decision};
use headroom_core::objective::ObjectiveId;
use serde::Serialize;

/// One objective's error-budget state, as `headroom slo budget` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetObjective {
    /// Class (a phase of the runs of the same name; a mix's rows are `class/objective`).
    pub class: String,
    /// Objective id (`ttft_p95`, `error_rate`).
    pub objective: ObjectiveId,
    /// Share of the period's budget consumed (1.0: all of it), when there were events.
    pub consumed: Option<f64>,
    /// The budget's decision in words (`freeze non-essential tuning (provisional: …)`).
    pub state: String,
    /// Consumed at least `freeze_at`: the objective burns, and the candidate must be strictly
    /// better on it.
    pub past_freeze: bool,
    /// For a burning objective: whether the candidate is strictly better on it.
    pub strictly_better: Option<bool>,
    /// Why (for a burning objective), in a sentence.
    pub why: String,
}

/// The error budget applied to a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetGate {
    /// Where the budget was read (credentials redacted).
    pub source: String,
    /// The SLO file's `budget.freeze_at` (share consumed, 0–1).
    pub freeze_at: f64,
    /// Every objective of the SLO file, with its state.
    pub objectives: Vec<BudgetObjective>,
}

impl BudgetGate {
    /// The objectives past `freeze_at`.
    pub fn burning(&self) -> impl Iterator<Item = &BudgetObjective> {
        self.objectives.iter().filter(|o| o.past_freeze)
    }
}

/// Whether the candidate is strictly better on `objective` of `class`, with the reason.
fn strictly_better(c: &Comparison, class: &str, objective: &ObjectiveId) -> (bool, String) {
    let mixed = objective.clone().in_class(class);
    let rows: Vec<(f64, &str, Change)> = c
        .levels
        .iter()
        .flat_map(|l| {
            l.latency
                .iter()
                .filter(|x| (l.phase == class && x.id == *objective) || x.id == mixed)
                .map(move |x| (l.load, l.mode.unit(), x.change))
        })
        .collect();
    let f = headroom_core::slo::fmt_num;
    if rows.is_empty() {
        let why = if objective.is_error_rate() {
            "compare tests no difference of error rates, so the candidate cannot be shown better on it".to_string()
        } else {
            format!("no level both runs measured compares {objective} of {class}")
        };
        return (false, why);
    }
    let at = |want: &dyn Fn(Change) -> bool| {
        rows.iter()
            .filter(|r| want(r.2))
            .map(|r| format!("{} {}", f(r.0), r.1))
            .collect::<Vec<_>>()
    };
    let better = at(&|x| x == Change::Better);
    let not = at(&|x| matches!(x, Change::Worse | Change::Inconclusive));
    match (better.is_empty(), not.is_empty()) {
        (false, true) => (true, format!("better at {}", better.join(", "))),
        (_, false) => (false, format!("worse or undecided at {}", not.join(", "))),
        (true, true) => (
            false,
            "no detectable change at any level both runs measured".into(),
        ),
    }
}

/// Applies the budget to `c`: fills each burning objective's verdict and turns a PROMOTE or an
/// INCONCLUSIVE into [`Decision::Held`] when the candidate is not strictly better on one.
pub fn apply_budget(c: &mut Comparison, mut gate: BudgetGate) {
    let mut held = false;
    for o in gate.objectives.iter_mut().filter(|o| o.past_freeze) {
        let (better, why) = strictly_better(c, &o.class, &o.objective);
        o.strictly_better = Some(better);
        o.why = why;
        held |= !better;
    }
    if held && matches!(c.decision, Decision::Promote | Decision::Inconclusive) {
        c.decision = Decision::Held;
    }
    c.budget = Some(gate);
}

/// The lines the decision's summary gets for each burning objective.
pub fn budget_lines(c: &Comparison) -> Vec<String> {
    let Some(g) = &c.budget else {
        return Vec::new();
    };
    g.burning()
        .map(|o| {
            format!(
                "error budget of {} {} burns ({}{}, past freeze_at {:.0} %): the candidate is {}strictly better on it: {}",
                o.class,
                o.objective,
                o.consumed
                    .map(|x| format!("{:.0} % consumed; ", x * 100.0))
                    .unwrap_or_default(),
                o.state,
                g.freeze_at * 100.0,
                if o.strictly_better == Some(true) {
                    ""
                } else {
                    "not "
                },
                o.why
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{LatencyComparison, LevelComparison};
    use headroom_core::Verdict;
    use headroom_core::run::LoadMode;

    fn comparison(changes: &[(f64, Change)]) -> Comparison {
        let levels = changes
            .iter()
            .map(|(load, change)| LevelComparison {
                phase: "chat".into(),
                load: *load,
                mode: LoadMode::Concurrency,
                latency: vec![LatencyComparison {
                    id: serde_json::from_str("\"ttft_p95\"").unwrap(),
                    percentile: 95.0,
                    threshold_s: 0.5,
                    before_s: 0.2,
                    after_s: 0.1,
                    diff_ci_s: (-0.15, -0.05),
                    before_ci_s: (0.18, 0.22),
                    after_ci_s: (0.08, 0.12),
                    confidence: 0.95,
                    samples: (100, 100),
                    verdicts: (Verdict::Pass, Verdict::Pass),
                    allowed_increase_s: None,
                    share_diff_ci: None,
                    engine_delta_s: None,
                    note: None,
                    change: *change,
                    noise_floor_s: None,
                }],
                server: Vec::new(),
                moved_most: None,
            })
            .collect();
        Comparison {
            baseline: "a".into(),
            candidate: "b".into(),
            changes: Vec::new(),
            incomparable: Vec::new(),
            capacity: Vec::new(),
            levels,
            unmatched_phases: Vec::new(),
            decision: Decision::Promote,
            warnings: Vec::new(),
            budget: None,
        }
    }

    fn gate(objective: &str, past_freeze: bool) -> BudgetGate {
        BudgetGate {
            source: "http://127.0.0.1:9090".into(),
            freeze_at: 0.5,
            objectives: vec![BudgetObjective {
                class: "chat".into(),
                objective: serde_json::from_value(serde_json::json!(objective)).unwrap(),
                consumed: Some(if past_freeze { 0.6 } else { 0.1 }),
                state: "freeze non-essential tuning".into(),
                past_freeze,
                strictly_better: None,
                why: String::new(),
            }],
        }
    }

    /// Better at one level and unchanged at the other: strictly better, promoted; unchanged
    /// everywhere, worse somewhere, or an objective compare cannot test: held.
    #[test]
    fn a_burning_objective_holds_all_but_a_strictly_better_candidate() {
        use Change::*;
        for (changes, objective, decision) in [
            (
                vec![(4.0, NoDetectableChange), (16.0, Better)],
                "ttft_p95",
                Decision::Promote,
            ),
            (
                vec![(4.0, NoDetectableChange), (16.0, NoDetectableChange)],
                "ttft_p95",
                Decision::Held,
            ),
            (
                vec![(4.0, Worse), (16.0, Better)],
                "ttft_p95",
                Decision::Held,
            ),
            (vec![(16.0, Better)], "error_rate", Decision::Held),
        ] {
            let mut c = comparison(&changes);
            apply_budget(&mut c, gate(objective, true));
            assert_eq!(c.decision, decision, "{changes:?} {objective}");
            let lines = budget_lines(&c);
            assert_eq!(lines.len(), 1);
            assert!(
                lines[0].contains(&format!("chat {objective} burns")),
                "{}",
                lines[0]
            );
        }
        // Within budget: nothing held, nothing said.
        let mut c = comparison(&[(4.0, NoDetectableChange)]);
        apply_budget(&mut c, gate("ttft_p95", false));
        assert_eq!(c.decision, Decision::Promote);
        assert!(budget_lines(&c).is_empty());
        // A regression stays one.
        let mut c = comparison(&[(4.0, NoDetectableChange)]);
        c.decision = Decision::Regression;
        apply_budget(&mut c, gate("ttft_p95", true));
        assert_eq!(c.decision, Decision::Regression);
        assert_eq!(Decision::Held.exit_code(), 1);
    }
}
