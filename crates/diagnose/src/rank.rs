//! Findings in the order an SRE would give them: the one that explains most of the failing (or
//! closest) objective first, then the rest; observations the window cannot judge become notes.
//!
//! **Target.** The objective the ranking is about: the failing one furthest past its threshold
//! (observed / threshold), else the one closest to it. Readings known only as an upper bound (a
//! histogram's first bucket, or capped by `_sum`) have no margin and are not targets.
//!
//! **Explained share.** Each row acts on a phase of a request's latency (queueing, prefill,
//! decode, the whole request, errors). The share of the target that phase accounts for comes
//! from the server's phase means (`Facts`): queue / TTFT for admission saturation against a TTFT
//! objective, decode / E2E for decode capacity against an E2E one, all of ITL for a decode row
//! against an ITL objective. It is weighted by the finding's confidence (strength of evidence)
//! and halved for advice rows, which follow from a bottleneck rather than name one.
//!
//! **Notes.** A workload or advice row at low confidence describes something the window cannot
//! judge (every request ran to `max_tokens`, which an `ignore_eos` benchmark produces by design;
//! low prefix reuse on traffic whose sharing is unknown; one stray 4xx): it is moved to the notes,
//! with its evidence, instead of standing among the findings.

use headroom_core::Verdict;
use headroom_core::run::ObjectiveResult;
use headroom_core::verdict::Confidence;

use crate::RuledFinding;
use crate::facts::Facts;
use crate::rules::{Category, Target};

/// The part of a request's latency a row acts on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Queue,
    Prefill,
    /// Queueing and recomputed prefill (KV pressure: preempted requests wait and prefill again).
    QueueAndPrefill,
    Decode,
    /// Every phase (a throttled or faulty GPU).
    All,
    Errors,
    /// Explains no latency.
    None,
}

fn phase(id: &str) -> Phase {
    match id {
        "admission_saturation" | "batching_not_working" | "autoscaling_trigger" => Phase::Queue,
        "prefill_contention" | "low_prefix_reuse" => Phase::Prefill,
        "kv_pressure" => Phase::QueueAndPrefill,
        "decode_capacity" | "memory_bandwidth_bound" | "decode_dominated" => Phase::Decode,
        "device_fault" => Phase::All,
        "errors_outside_engine" => Phase::Errors,
        _ => Phase::None,
    }
}

/// `a / b`, clamped to 0–1; 0.5 (no figure to say) when either is missing.
fn share(a: Option<f64>, b: Option<f64>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => (a / b).clamp(0.0, 1.0),
        _ => 0.5,
    }
}

/// Share (0–1) of `target` the phase accounts for.
fn explained(p: Phase, target: Target, f: &Facts) -> f64 {
    let sum = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        _ => a.or(b),
    };
    match (p, target) {
        (Phase::None, _) => 0.0,
        (Phase::Errors, Target::Errors) => 1.0,
        (Phase::Errors, _) | (_, Target::Errors) => 0.0,
        (Phase::All, _) => 1.0,
        (Phase::Queue | Phase::QueueAndPrefill, Target::Queue) => 1.0,
        (_, Target::Queue) => 0.0,
        (Phase::Queue, Target::Ttft) => share(f.queue_mean_s, f.ttft_mean_s),
        (Phase::Prefill, Target::Ttft) => share(f.prefill_mean_s, f.ttft_mean_s),
        (Phase::QueueAndPrefill, Target::Ttft) => {
            share(sum(f.queue_mean_s, f.prefill_mean_s), f.ttft_mean_s)
        }
        (Phase::Decode, Target::Ttft) => 0.0,
        (Phase::Decode, Target::Itl | Target::Tpot) => 1.0,
        // Prefill chunks stall decode steps (ITL spikes), a part of ITL, never most of it.
        (Phase::Prefill | Phase::QueueAndPrefill, Target::Itl | Target::Tpot) => 0.3,
        (Phase::Queue, Target::Itl | Target::Tpot) => 0.0,
        (Phase::Queue, Target::E2e) => share(f.queue_mean_s, f.e2e_mean_s),
        (Phase::Prefill, Target::E2e) => share(f.prefill_mean_s, f.e2e_mean_s),
        (Phase::QueueAndPrefill, Target::E2e) => {
            share(sum(f.queue_mean_s, f.prefill_mean_s), f.e2e_mean_s)
        }
        (Phase::Decode, Target::E2e) => share(f.decode_mean_s, f.e2e_mean_s),
    }
}

fn weight(c: Confidence) -> f64 {
    match c {
        Confidence::High => 1.0,
        Confidence::Medium => 0.75,
        Confidence::Low => 0.5,
    }
}

/// The objective the ranking is about, with its target metric: the failing one furthest past
/// its threshold, else the one closest to it.
pub(crate) fn target(objectives: &[ObjectiveResult]) -> Option<(&ObjectiveResult, Target)> {
    let margin = |o: &ObjectiveResult| {
        let v = o.observed?;
        (o.threshold > 0.0 && v.is_finite() && o.bound.is_exact()).then(|| v / o.threshold)
    };
    let best = |fail: bool| {
        objectives
            .iter()
            .filter(|o| (o.verdict == Verdict::Fail) == fail)
            .filter_map(|o| Some((o, margin(o)?, Target::of_objective(&o.id))))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(o, _, t)| (o, t))
    };
    best(true).or_else(|| best(false))
}

/// How much of the target objective `f` explains, weighted by its confidence (0 without a
/// target).
pub(crate) fn score(f: &RuledFinding, target: Option<Target>, facts: &Facts) -> f64 {
    let Some(t) = target else { return 0.0 };
    let advice = if f.category == Category::Advice {
        0.5
    } else {
        1.0
    };
    explained(phase(&f.finding.id), t, facts) * weight(f.finding.confidence) * advice
}

fn category_order(c: Category) -> u8 {
    match c {
        Category::Health => 0,
        Category::Bottleneck => 1,
        Category::Workload => 2,
        Category::Advice => 3,
    }
}

/// Whether a finding is a note rather than a finding: a workload or advice row at low
/// confidence.
pub(crate) fn is_note(f: &RuledFinding) -> bool {
    matches!(f.category, Category::Workload | Category::Advice)
        && f.finding.confidence == Confidence::Low
}

/// The note a demoted finding becomes: its title, id and evidence, in one line.
fn as_note(f: &RuledFinding) -> String {
    let evidence: Vec<String> = f
        .finding
        .evidence
        .iter()
        .map(|e| format!("{} = {} {}: {}", e.metric, e.value, e.unit, e.note))
        .collect();
    format!(
        "not a finding (`{}`, low confidence: the window cannot judge it): {}; {}",
        f.finding.id,
        f.finding.title,
        evidence.join("; ")
    )
}

/// Orders `findings` by what they explain of the target objective (ties: health, bottleneck,
/// workload, advice, then table order) and moves the low-confidence observations to notes.
pub(crate) fn rank(
    findings: Vec<RuledFinding>,
    objectives: &[ObjectiveResult],
    facts: &Facts,
) -> (Vec<RuledFinding>, Vec<String>) {
    let t = target(objectives).map(|(_, t)| t);
    let (notes, mut kept): (Vec<RuledFinding>, Vec<RuledFinding>) =
        findings.into_iter().partition(is_note);
    // Stable sort: equal keys keep table order.
    kept.sort_by(|a, b| {
        score(b, t, facts)
            .total_cmp(&score(a, t, facts))
            .then(category_order(a.category).cmp(&category_order(b.category)))
    });
    (kept, notes.iter().map(as_note).collect())
}
