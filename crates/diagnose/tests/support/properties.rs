//! Properties every assessment must have, checked on the window it was judged from, written
//! independently of the rules (they read the window, the findings' text and the declared
//! effects of their actions):
//!
//! - no evidence line quotes a gauge whose samples are idle ([`GaugeValidity::IdleSampled`]);
//! - every bottleneck or health finding shows evidence, and every claim in it holds for its
//!   number (`advice::unsupported_claims`);
//! - every action has declared effects ([`moves_of`]), and none raises the metric of an
//!   objective that fails;
//! - the first finding, when it explains the objective the ranking is about, lowers that
//!   objective's metric.

use headroom_core::Verdict;
use headroom_diagnose::rules::{Dir, Target, moves_of};
use headroom_diagnose::{Assessment, Category};
use headroom_signals::window::OCCUPANCY_GAUGES;
use headroom_signals::{GaugeValidity, Window};

use super::advice;

/// Violations of the properties, one line each.
pub fn violations(w: &Window, a: &Assessment) -> Vec<String> {
    let mut out = Vec::new();
    let idle: Vec<String> = OCCUPANCY_GAUGES
        .into_iter()
        .filter(|s| w.gauge_validity(*s) == Some(GaugeValidity::IdleSampled))
        .filter_map(|s| w.sources.get(&s).cloned())
        .collect();
    for f in &a.findings {
        let id = &f.finding.id;
        for e in &f.finding.evidence {
            if let Some(g) = idle.iter().find(|g| e.metric.starts_with(g.as_str())) {
                out.push(format!("{id}: evidence quotes the idle-sampled gauge {g}"));
            }
        }
        if matches!(f.category, Category::Bottleneck | Category::Health)
            && f.finding.evidence.is_empty()
        {
            out.push(format!("{id}: a {:?} finding without evidence", f.category));
        }
        let Some(moves) = moves_of(id, &f.finding.action) else {
            out.push(format!(
                "{id}: action without declared effects: {}",
                f.finding.action
            ));
            continue;
        };
        for o in a.objectives.iter().filter(|o| o.verdict == Verdict::Fail) {
            let t = Target::of_objective(&o.id);
            if moves.iter().any(|m| m.target == t && m.dir == Dir::Raises) {
                out.push(format!(
                    "{id}: the action raises {t:?}, whose objective {} fails: {}",
                    o.id, f.finding.action
                ));
            }
        }
    }
    out.extend(advice::unsupported_claims(a));
    out
}

/// Asserts [`violations`] is empty, naming `scenario`.
pub fn assert_properties(scenario: &str, w: &Window, a: &Assessment) {
    let v = violations(w, a);
    assert!(
        v.is_empty(),
        "{scenario}: {v:#?}\nfindings {:?}",
        a.finding_ids()
    );
}
