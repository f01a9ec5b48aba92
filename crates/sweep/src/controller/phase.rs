//! The phases of a sweep (each class alone, then the mix) and what each is judged on.

use super::Phase;
use headroom_core::slo::SloFile;
use headroom_core::{LatencySignal, Objective, SloSpec};
use headroom_diagnose::PrefixPlan;
use headroom_load::prompt::ClassPlan;

/// What a phase's classes share as prompt prefixes, by mix weight: the share of requests with a
/// shared prefix, its mean length in tokens, and the share drawn from datasets (which may share
/// prefixes the spec does not declare). Diagnose judges a low prefix-cache hit ratio against it.
pub(super) fn prefix_plan(plans: &[ClassPlan]) -> PrefixPlan {
    let total: f64 = plans.iter().map(|p| p.weight).sum();
    if total <= 0.0 {
        return PrefixPlan::default();
    }
    let share =
        |f: &dyn Fn(&ClassPlan) -> f64| plans.iter().map(|p| p.weight * f(p)).sum::<f64>() / total;
    PrefixPlan {
        shared_share: share(&|p| f64::from(u8::from(p.shared_prefix_tokens > 0))),
        shared_tokens_mean: share(&|p| f64::from(p.shared_prefix_tokens)),
        dataset_share: share(&|p| {
            f64::from(u8::from(matches!(
                p.prompt,
                headroom_load::prompt::PromptSource::Dataset(_)
            )))
        }),
    }
}

/// Share of a phase's requests sent with `ignore_eos`, by mix weight (1 or 0 for one class).
pub(super) fn ignore_eos_share(plans: &[ClassPlan]) -> f64 {
    let total: f64 = plans.iter().map(|p| p.weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    plans
        .iter()
        .filter(|p| p.ignore_eos)
        .map(|p| p.weight)
        .sum::<f64>()
        / total
}

/// Each class alone (weight 1), then all together by weight when there is more than one.
pub fn phases(plans: &[ClassPlan]) -> Vec<Phase> {
    let mut out: Vec<Phase> = plans
        .iter()
        .map(|p| Phase {
            name: p.name.clone(),
            plans: vec![p.clone()],
        })
        .collect();
    if plans.len() > 1 {
        out.push(Phase {
            name: "mix".into(),
            plans: plans.to_vec(),
        });
    }
    out
}

/// The objectives a phase is judged on: its class's for a single-class phase; for the mix, the
/// union of every class's server-side objectives (client ones are judged per class).
pub fn phase_spec(slo: &SloFile, phase: &Phase) -> SloSpec {
    if phase.plans.len() == 1 {
        return slo.spec_for(&phase.plans[0].name);
    }
    // The mix judges queue time from the engine's histogram (one queue for all classes); with
    // per-request metrics each class is judged on its own requests instead (client_objectives).
    let mut objectives: Vec<Objective> = Vec::new();
    for p in &phase.plans {
        for o in slo.spec_for(&p.name).objectives {
            if is_server_only(&o) && !objectives.iter().any(|x| x.id() == o.id()) {
                objectives.push(o);
            }
        }
    }
    SloSpec { objectives }
}

pub(super) fn is_server_only(o: &Objective) -> bool {
    matches!(
        o,
        Objective::Latency {
            signal: LatencySignal::QueueTime,
            ..
        }
    )
}

/// Send lag above which a level is flagged: 2 % of the tightest TTFT or E2E threshold among the
/// phase's classes (the latencies a late send adds to), at least 1 ms. A 3 ms lag against a
/// 250 ms TTFT objective distorts nothing worth a warning; against a 20 ms one it does.
pub(super) fn send_lag_limit_s(slo: &SloFile, phase: &Phase) -> f64 {
    phase
        .plans
        .iter()
        .flat_map(|p| slo.spec_for(&p.name).objectives)
        .filter_map(|o| match o {
            Objective::Latency {
                signal: LatencySignal::Ttft | LatencySignal::E2e,
                threshold_s,
                ..
            } => Some(threshold_s),
            _ => None,
        })
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))))
        .map_or(0.001, |t| (0.02 * t).max(0.001))
}
