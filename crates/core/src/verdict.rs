//! Judgements: a verdict per objective and findings with evidence.

use serde::{Deserialize, Serialize};

/// Whether an objective holds at one load level (or over one window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// The objective holds, with enough samples to say so.
    Pass,
    /// The objective is breached.
    Fail,
    /// Not enough valid evidence either way; the reason travels with it.
    Inconclusive,
}

impl Verdict {
    /// `PASS`, `FAIL` or `INCONCLUSIVE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// Combines per-objective verdicts: any FAIL fails; otherwise any INCONCLUSIVE is
    /// inconclusive; otherwise PASS. An empty set is INCONCLUSIVE.
    pub fn combine(vs: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut any = false;
        let mut inconclusive = false;
        for v in vs {
            any = true;
            match v {
                Verdict::Fail => return Verdict::Fail,
                Verdict::Inconclusive => inconclusive = true,
                Verdict::Pass => {}
            }
        }
        if !any || inconclusive {
            Verdict::Inconclusive
        } else {
            Verdict::Pass
        }
    }
}

/// How sure a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// One weak signal.
    Low,
    /// Several signals agree, or one strong one.
    Medium,
    /// Several strong signals agree.
    High,
}

/// One figure backing a finding: a metric, its value over a window, and a note.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Metric or derived signal name (e.g. `vllm:num_requests_waiting`, `ttft_p95`).
    pub metric: String,
    /// Value in the unit given.
    pub value: f64,
    /// Unit (`s`, `ratio`, `count`, `W`, …).
    pub unit: String,
    /// Free text: window, comparison, threshold.
    pub note: String,
}

/// A row of the decision table that matched, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable id scripts can act on (`admission_saturation`, `kv_pressure`, `truncation`, …).
    pub id: String,
    /// One-line statement of what is happening.
    pub title: String,
    /// Likely bottleneck.
    pub bottleneck: String,
    /// First corrective action to test.
    pub action: String,
    /// What the action costs.
    pub trade_off: String,
    /// Figures that support the finding.
    pub evidence: Vec<Evidence>,
    /// How sure.
    pub confidence: Confidence,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine() {
        use Verdict::*;
        assert_eq!(Verdict::combine([Pass, Pass]), Pass);
        assert_eq!(Verdict::combine([Pass, Inconclusive]), Inconclusive);
        assert_eq!(Verdict::combine([Inconclusive, Fail]), Fail);
        assert_eq!(Verdict::combine([]), Inconclusive);
    }
}
