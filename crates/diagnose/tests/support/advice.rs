//! Checks on the advice and evidence of an [`Assessment`], written independently of the rules:
//! they read only the text a user sees.
//!
//! - [`contradictions`]: two findings whose first actions pull opposite ways (a larger batch
//!   against a smaller one; "no change needed" against any change).
//! - [`unsupported_claims`]: evidence notes that make a qualitative claim ("short", "busy",
//!   "room") without stating the comparison that decides it, or whose stated comparison does not
//!   hold for the value shown.

use headroom_diagnose::Assessment;

/// Which way a first action pulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    /// More sequences per batch (`raise --max-num-seqs`, "larger batch").
    GrowBatch,
    /// Fewer sequences per batch (`lower --max-num-seqs`, "smaller batch").
    ShrinkBatch,
    /// Leave the load and the server as they are ("keep this load", "no change needed").
    Hold,
    /// Change the capacity or the load (replicas, GPUs, draining, scaling, reducing load).
    Change,
    /// Work on prefill (chunked prefill, prefix caching, disaggregation).
    PrefillWork,
    /// Leave prefill alone ("stop optimising prefill", "not on prefill").
    NoPrefillWork,
}

/// The ways an action text pulls, read from its words.
pub fn pulls(action: &str) -> Vec<Pull> {
    let a = action.to_lowercase();
    let any = |ps: &[&str]| ps.iter().any(|p| a.contains(p));
    let mut out = Vec::new();
    if any(&[
        "raise --max-num-seqs",
        "larger batch",
        "increase --max-num-seqs",
    ]) {
        out.push(Pull::GrowBatch);
    }
    if any(&[
        "lower --max-num-seqs",
        "smaller batch",
        "reduce --max-num-seqs",
    ]) {
        out.push(Pull::ShrinkBatch);
    }
    if any(&[
        "keep this load",
        "no change needed",
        "add load",
        "as the per-replica capacity",
    ]) {
        out.push(Pull::Hold);
    }
    if any(&["enable chunked prefill", "separate prefill and decode"]) {
        out.push(Pull::PrefillWork);
    }
    if any(&[
        "not on prefill",
        "rather than prefill",
        "stop optimising prefill",
        "stop optimizing prefill",
    ]) {
        out.push(Pull::NoPrefillWork);
    }
    if any(&[
        "add replicas",
        "scale",
        "add gpus",
        "reduce load",
        "lower the load",
        "drain",
    ]) {
        out.push(Pull::Change);
    }
    out
}

fn opposite(a: Pull, b: Pull) -> bool {
    use Pull::*;
    matches!(
        (a, b),
        (GrowBatch, ShrinkBatch)
            | (ShrinkBatch, GrowBatch)
            | (Hold, GrowBatch | ShrinkBatch | Change)
            | (GrowBatch | ShrinkBatch | Change, Hold)
            | (PrefillWork, NoPrefillWork)
            | (NoPrefillWork, PrefillWork)
    )
}

/// Pairs of findings of `a` whose actions pull opposite ways, as `"id1 (pull) vs id2 (pull)"`.
pub fn contradictions(a: &Assessment) -> Vec<String> {
    let mut out = Vec::new();
    let fs: Vec<(&str, Vec<Pull>)> = a
        .findings
        .iter()
        .map(|f| (f.finding.id.as_str(), pulls(&f.finding.action)))
        .collect();
    for (i, (id1, p1)) in fs.iter().enumerate() {
        for (id2, p2) in &fs[i + 1..] {
            for x in p1 {
                for y in p2 {
                    if opposite(*x, *y) {
                        out.push(format!("{id1} ({x:?}) vs {id2} ({y:?})"));
                    }
                }
            }
        }
    }
    out
}

/// Whole words (letters, digits, `_`) that state a judgement about a figure.
const CLAIM_WORDS: [&str; 22] = [
    "short",
    "long",
    "busy",
    "idle",
    "full",
    "room",
    "spike",
    "spikes",
    "little",
    "limit",
    "enough",
    "dominates",
    "nearly",
    "mostly",
    "high",
    "low",
    "slow",
    "fast",
    "large",
    "small",
    "most",
    "rare",
];

/// The comparison a note starts with (`≥ 0.5: …`, `< 0.3 s: …`): operator and threshold.
fn leading_comparison(note: &str) -> Option<(&str, f64)> {
    let op = ["≥", "≤", "<", ">"]
        .into_iter()
        .find(|o| note.starts_with(o))?;
    let rest = note[op.len()..].trim_start();
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | '+'))
        .collect();
    let t: f64 = num.parse().ok()?;
    // the comparison ends at the first ':' (after an optional unit)
    rest.contains(':').then_some((op, t))
}

/// Evidence notes of `a` that claim something their number does not show, each as
/// `"finding / metric = value: note (why)"`.
pub fn unsupported_claims(a: &Assessment) -> Vec<String> {
    let mut out = Vec::new();
    for f in &a.findings {
        for e in &f.finding.evidence {
            let say = |why: &str| {
                format!(
                    "{} / {} = {}: {} ({why})",
                    f.finding.id, e.metric, e.value, e.note
                )
            };
            match leading_comparison(&e.note) {
                Some((op, t)) => {
                    let v = e.value;
                    let holds = match op {
                        "≥" => v >= t,
                        "≤" => v <= t,
                        "<" => v < t,
                        ">" => v > t,
                        _ => false,
                    };
                    if !holds {
                        out.push(say(&format!("the value does not satisfy {op} {t}")));
                    }
                }
                None => {
                    let lower = e.note.to_lowercase();
                    let words: Vec<&str> = lower
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .collect();
                    if let Some(w) = CLAIM_WORDS.iter().find(|w| words.contains(w)) {
                        out.push(say(&format!(
                            "claims \"{w}\" without the comparison that decides it"
                        )));
                    }
                    if lower.contains("well used") || lower.contains("not the limit") {
                        out.push(say("a judgement without its threshold"));
                    }
                }
            }
        }
    }
    out
}

/// The note a row demoted from the findings became (it names the row as `` `id` ``), if any.
pub fn note_of<'a>(a: &'a Assessment, id: &str) -> Option<&'a String> {
    a.notes.iter().find(|n| n.contains(&format!("`{id}`")))
}

/// Asserts both checks on `a`, naming `scenario` and the findings on failure.
pub fn assert_consistent(scenario: &str, a: &Assessment) {
    let c = contradictions(a);
    assert!(
        c.is_empty(),
        "{scenario}: opposite advice at one level: {c:?}; findings {:?}",
        a.finding_ids()
    );
    let u = unsupported_claims(a);
    assert!(u.is_empty(), "{scenario}: evidence claims: {u:#?}");
}

#[test]
fn the_checks_catch_the_old_texts() {
    // The advice the decision table gave before: each pair pulled opposite ways.
    let old_admission = "raise --max-num-seqs (and --max-num-batched-tokens) while KV usage and ITL stay within bounds; otherwise add replicas";
    let old_decode = "lower --max-num-seqs to shorten decode steps, or quantise the weights (FP8/INT4) / use a faster GPU; speculative decoding helps at low batch sizes";
    let old_bandwidth = "quantise before buying hardware (FP8/INT4 weights halve or quarter the bytes read per token); larger batches amortise the reads";
    let old_efficient = "keep this load as the per-replica capacity; scale out beyond it";
    let grow = pulls(old_admission);
    let shrink = pulls(old_decode);
    assert!(grow.contains(&Pull::GrowBatch) && shrink.contains(&Pull::ShrinkBatch));
    assert!(pulls(old_bandwidth).contains(&Pull::GrowBatch));
    assert!(pulls(old_efficient).contains(&Pull::Hold));
    assert!(opposite(Pull::GrowBatch, Pull::ShrinkBatch));
    assert!(opposite(Pull::Hold, Pull::Change));
    assert!(!opposite(Pull::ShrinkBatch, Pull::Change));
    let old_decode_dominated =
        "optimise decode (batching, quantisation, speculative decoding) rather than prefill";
    let prefill = "enable chunked prefill with a smaller --max-num-batched-tokens, enable prefix caching for shared prefixes, or separate prefill and decode (disaggregation) for long-context traffic";
    assert_eq!(pulls(old_decode_dominated), vec![Pull::NoPrefillWork]);
    assert_eq!(pulls(prefill), vec![Pull::PrefillWork]);
    // "prefill is short" beside 1.004 s, and a stated comparison that does not hold
    assert_eq!(leading_comparison("≥ 0.5: DRAM is busy"), Some(("≥", 0.5)));
    assert_eq!(leading_comparison("< 0.05 s: short"), Some(("<", 0.05)));
    assert_eq!(
        leading_comparison("mean per request: prefill is short"),
        None
    );
}

#[test]
fn the_claim_check_catches_a_claim_its_number_does_not_show() {
    use headroom_core::verdict::{Confidence, Evidence, Finding};
    use headroom_diagnose::{Category, RuledFinding};
    let with = |evidence: Vec<Evidence>| Assessment {
        verdict: headroom_core::Verdict::Fail,
        refused: Vec::new(),
        objectives: Vec::new(),
        steps: Vec::new(),
        findings: vec![RuledFinding {
            finding: Finding {
                id: "admission_saturation".into(),
                title: String::new(),
                bottleneck: String::new(),
                action: String::new(),
                trade_off: String::new(),
                evidence,
                confidence: Confidence::Medium,
            },
            category: Category::Bottleneck,
            watch: Vec::new(),
        }],
        notes: Vec::new(),
        views: Vec::new(),
    };
    let e = |value: f64, note: &str| Evidence {
        metric: "m".into(),
        value,
        unit: "s".into(),
        note: note.into(),
    };
    // the old admission evidence: a claim with no threshold, beside 1.004 s
    assert_eq!(
        unsupported_claims(&with(vec![e(1.004, "mean per request: prefill is short")])).len(),
        1
    );
    // a stated comparison the value does not satisfy
    assert_eq!(
        unsupported_claims(&with(vec![e(1.004, "≤ 0.3 s: prefill is short")])).len(),
        1
    );
    // a stated comparison that holds, and neutral notes
    assert!(
        unsupported_claims(&with(vec![
            e(1.004, "> 0.3 s: prefill is long"),
            e(0.2, "mean per request"),
            e(1.0, "gpu 0: hw_slowdown"),
        ]))
        .is_empty()
    );
}
