//! The analysis: (window, client view, SLO) → [`Assessment`]. Pure functions: no I/O, no clock.
//!
//! An assessment has the six steps of `DESIGN.md` (where latency goes; efficiency; workload
//! shape; outcomes; the GPU as an independent witness; KV pool versus VRAM and tokens per watt),
//! a verdict per objective, the decision-table findings ([`rules::RULES`]) with evidence and
//! confidence, and — when the evidence is not valid — a refusal with its reasons, in which case
//! every verdict is INCONCLUSIVE.
//!
//! Objectives are judged on the server's histograms when no client view is given (`headroom
//! diagnose`): the bad share at the threshold is bracketed by the histogram's buckets
//! ([`headroom_signals::Histogram::fraction_le`]) and a verdict is given only when the whole
//! bracket is on one side of the allowed share. With a client view (`headroom sweep`), the
//! client's own objective results are the record, and the server's are used only for objectives
//! the client cannot measure.

mod bounds;
pub mod facts;
mod rank;
pub mod rules;
pub mod setting;
mod steps;
pub mod views;

use headroom_core::objective::{Bound, Source};
use headroom_core::run::{ClientHealth, ObjectiveResult};
use headroom_core::stats::{Decision, decide, min_samples_for_percentile};
use headroom_core::verdict::{Confidence, Finding};
use headroom_core::{LatencySignal, Objective, SloSpec, Verdict};
use headroom_signals::{Engine, Signal, Window};
use serde::Serialize;

pub use facts::Facts;
pub use rules::{Category, RULES, Rule};
pub use setting::{Origin, PrefixPlan, Setting};

/// What the load generator saw over the same window (sweep levels only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientView {
    /// Objective results decided on client measurements (TTFT, ITL, TPOT, E2E, error rate).
    pub objectives: Vec<ObjectiveResult>,
    /// The client's health (CPU use, send lag).
    pub health: Option<ClientHealth>,
    /// Requests the client saw finish with a server outcome (`stop`, `length`, `error`, `abort`)
    /// over the same span as the server's counters.
    pub requests_finished: Option<u64>,
    /// Σ `usage.completion_tokens` over the same span.
    pub output_tokens: Option<u64>,
    /// Set when the realised workload drifted from its spec.
    pub workload_drift: Option<WorkloadDrift>,
    /// Requests the client started before the measurement window (its warm-up): they may
    /// finish inside it, so the engine's window counters and histograms include them while the
    /// client's window figures do not. A breach of the engine's histogram no larger than this
    /// count can be theirs ([`engine_overrules_bounds`]). `None` when unknown.
    pub started_before_window: Option<u64>,
    /// Share (0–1, by mix weight) of the requests the client sent with vLLM's `ignore_eos: true`,
    /// which makes every such answer run to `max_tokens` and end with `finished_reason="length"`
    /// by design. `None` when unknown (a `diagnose` of a live server).
    pub ignore_eos_share: Option<f64>,
}

/// Realised prompt tokens far from the workload's request: what the server was given is not
/// what was specified. Which verdicts survive depends on the direction: prompts shorter than
/// specified gave the server less work, so a FAIL stands and a PASS proves nothing; longer ones
/// gave it more, so a PASS stands and a FAIL may be the drift's doing.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadDrift {
    /// Realised / requested prompt tokens over the level (1 = as specified).
    pub prompt_ratio: f64,
    /// What drifted and what to do about it, in a sentence.
    pub note: String,
}

impl WorkloadDrift {
    /// Whether the drift can have helped `verdict` (made a PASS easier or a FAIL harder to get).
    pub fn voids(&self, verdict: Verdict) -> bool {
        match verdict {
            Verdict::Pass => self.prompt_ratio < 1.0,
            Verdict::Fail => self.prompt_ratio > 1.0,
            Verdict::Inconclusive => false,
        }
    }

    /// Which way the drift cuts, in a few words.
    pub fn direction(&self) -> String {
        let pct = (self.prompt_ratio - 1.0).abs() * 100.0;
        if self.prompt_ratio < 1.0 {
            format!("prompts {pct:.0} % shorter than specified")
        } else {
            format!("prompts {pct:.0} % longer than specified")
        }
    }
}

/// Applies a workload drift to judged objectives: a verdict the drift can have helped becomes
/// INCONCLUSIVE with the reason; one it cannot have helped stands, and says so.
pub fn apply_drift(objectives: &mut [ObjectiveResult], drift: &WorkloadDrift) {
    for o in objectives {
        if drift.voids(o.verdict) {
            o.reason = format!(
                "{}: the {} may be the drift's doing ({}); {}",
                drift.direction(),
                o.verdict.as_str(),
                drift.note,
                o.reason
            );
            o.verdict = Verdict::Inconclusive;
        } else if o.verdict != Verdict::Inconclusive {
            o.reason = format!(
                "{}; the {} stands (the drift cannot have helped it); {}",
                drift.direction(),
                o.verdict.as_str(),
                o.reason
            );
        }
    }
}

/// One figure of a step, with its source metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// Name with unit suffix (`queue_time_mean_s`, `prefix_cache_hit_ratio`). One name predates
    /// the suffix rule and is kept for the tools that read it: [`GENERATED_OVER_MAX_TOKENS`], a
    /// ratio, not a count.
    pub name: String,
    /// Value.
    pub value: f64,
    /// Unit (`s`, `ratio`, `tokens`, `%`, `W`, …).
    pub unit: String,
    /// Metric(s) it comes from, and the precision bracket for quantiles.
    pub source: String,
    /// Whether `value` is the figure or only an upper bound on it (a quantile in the
    /// histogram's first bucket): `"bound": "upper"` in JSON, absent when exact.
    #[serde(skip_serializing_if = "Bound::is_exact")]
    pub bound: Bound,
}

/// One of the six analysis steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// 1–6.
    pub number: u8,
    /// Title (`Where latency goes`, …).
    pub title: String,
    /// Figures, in reading order.
    pub figures: Vec<Figure>,
    /// Sentences (what the figures say, what is missing).
    pub remarks: Vec<String>,
}

/// A finding with its category (JSON: the core [`Finding`] fields plus `category`, `watch`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuledFinding {
    /// The finding (stable `id`, title, bottleneck, action, trade-off, evidence, confidence).
    #[serde(flatten)]
    pub finding: Finding,
    /// Kind of statement.
    pub category: Category,
    /// Metrics to watch after acting.
    pub watch: Vec<String>,
}

/// The whole judgement of one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    /// Combined verdict (any FAIL fails; any INCONCLUSIVE is inconclusive; INCONCLUSIVE when
    /// refused).
    pub verdict: Verdict,
    /// Reasons the evidence is not valid; non-empty means the verdict is refused.
    pub refused: Vec<String>,
    /// Per objective.
    pub objectives: Vec<ObjectiveResult>,
    /// The six steps.
    pub steps: Vec<Step>,
    /// Decision-table findings, the one that explains most of the failing (or closest)
    /// objective first (`rank`); low-confidence workload observations are in `notes` instead.
    pub findings: Vec<RuledFinding>,
    /// Anything else (counter resets, missing metrics, version hint).
    pub notes: Vec<String>,
    /// Per objective, a Headroom gateway's view beside the engine's, when the gateway's series
    /// were read too ([`views::assess_views`]); empty (and absent from JSON) otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub views: Vec<views::ObjectiveViews>,
}

impl Assessment {
    /// The finding with this id, if it fired.
    pub fn finding(&self, id: &str) -> Option<&RuledFinding> {
        self.findings.iter().find(|f| f.finding.id == id)
    }

    /// Ids of the findings that fired, in order.
    pub fn finding_ids(&self) -> Vec<&str> {
        self.findings
            .iter()
            .map(|f| f.finding.id.as_str())
            .collect()
    }
}

/// Name of step 3's figure and of the `truncation` finding's evidence: mean generated tokens /
/// mean `max_tokens` per finished request (`vllm:request_generation_tokens` over
/// `vllm:request_params_max_tokens`, both histogram means). A ratio (unit `ratio`, 0–1, shown as
/// a percentage), not a count of tokens: 1 means the answers run to their cap, 0.5 that the mean
/// answer stops halfway. The JSON name stays as it is (other tools read it); the unit is in the
/// figure's `unit` and the text label in its `source`.
pub const GENERATED_OVER_MAX_TOKENS: &str = "generated_over_max_tokens";

/// The words a reason or a figure's source says an upper bound with, for people: the rank fell
/// into the histogram's first bucket `[0, le₀]` ([`headroom_signals::Quantile::upper_bound_only`]),
/// the value shown is `le₀`, and it reads "at most". Programs read the `bound` field
/// ([`Bound::Upper`], `"bound": "upper"` in JSON) instead.
const UPPER_BOUND_ONLY: &str = "upper bound only: ≤";

/// An upper bound in seconds to three significant digits (a `_sum` cap of 0.0011301230008985688
/// reads `0.00113`; a bucket edge of 0.01 reads `0.01`).
pub(crate) fn bound_s(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Prefix of the notes that report corrupt data ([`headroom_signals::DataWarning`]), so that
/// readers and scripts can pick them out: `data warning: <metric><series>: <what was wrong>;
/// rejected, no figure uses <metric>`.
pub const DATA_WARNING_PREFIX: &str = "data warning: ";

/// Judges one window against `slo`, with the client's view when there is one; the same as
/// [`assess_with`] with [`Setting::default()`] (origin unspecified, workload unknown).
pub fn assess(window: &Window, client: Option<&ClientView>, slo: &SloSpec) -> Assessment {
    assess_with(window, client, slo, &Setting::default())
}

/// Judges one window against `slo`, with the client's view when there is one, and what the
/// caller knows of the window's origin and workload (`setting`): hints about missing data name
/// what works for that origin, and a low prefix-cache hit ratio is no finding on a workload that
/// shares no prefix ([`PrefixPlan::nothing_shared`]).
///
/// Corrupt data never becomes a figure here: signals the window rejected
/// ([`Window::rejected`]) are reported in `notes` (prefixed [`DATA_WARNING_PREFIX`]), an
/// objective read from one is INCONCLUSIVE with the reason, and a decision-table row that reads
/// one is not evaluated (a note says so).
pub fn assess_with(
    window: &Window,
    client: Option<&ClientView>,
    slo: &SloSpec,
    setting: &Setting,
) -> Assessment {
    let facts = Facts::of(window);
    let mut notes = Vec::new();
    if let Some(v) = &window.version_hint {
        notes.push(format!("{} {v}", window.engine.name()));
    }
    if window.since_server_start {
        notes.push(
            "window runs since server start (a single scrape): counters count from 0".to_owned(),
        );
    }
    for r in &window.counter_resets {
        notes.push(format!(
            "{r} (server restarted?); deltas include the values before the reset"
        ));
    }
    for (sig, names) in &window.missing {
        notes.push(format!(
            "{} not exported (looked for {})",
            sig.name(),
            names.join(", ")
        ));
    }
    notes.extend(window.notes.iter().cloned());
    // Corrupt families were rejected by `headroom_signals::quality`; say which and why, first.
    let data_notes: Vec<String> = window
        .data_warnings
        .iter()
        .map(|d| format!("{DATA_WARNING_PREFIX}{d}"))
        .collect();
    notes.splice(0..0, data_notes);

    let refused = refusals(window, &facts, client);
    let mut objectives = judge_objectives(window, &facts, client, slo);
    if !refused.is_empty() {
        for o in &mut objectives {
            if o.verdict != Verdict::Inconclusive {
                o.reason = format!(
                    "refused ({}); the figure alone said {}",
                    refused.join("; "),
                    o.verdict.as_str()
                );
                o.verdict = Verdict::Inconclusive;
            }
        }
    }
    if let Some(d) = client.and_then(|c| c.workload_drift.as_ref()) {
        apply_drift(&mut objectives, d);
    }
    let verdict = if refused.is_empty() {
        Verdict::combine(objectives.iter().map(|o| o.verdict))
    } else {
        Verdict::Inconclusive
    };

    // A mix's per-class rows (`chat/queue_time_p95`) are the SLO's objectives too.
    let slo_has_queue_objective = slo.objectives.iter().any(|o| {
        matches!(
            o,
            Objective::Latency {
                signal: LatencySignal::QueueTime,
                ..
            }
        )
    }) || objectives
        .iter()
        .any(|o| o.id.signal() == Some(LatencySignal::QueueTime));
    let mut fired: Vec<&'static str> = Vec::new();
    let mut findings = Vec::new();
    for rule in RULES {
        // A row whose input was rejected as corrupt is not evaluated: its condition could only
        // be decided on a default standing in for the rejected figure.
        if let Some(sig) = rule.inputs.iter().find(|s| window.rejected.contains_key(s)) {
            notes.push(format!(
                "finding `{}` not evaluated: {}",
                rule.id,
                window
                    .rejection(*sig)
                    .unwrap_or_else(|| format!("{} rejected", sig.name()))
            ));
            continue;
        }
        let ctx = rules::Context {
            facts: &facts,
            objectives: &objectives,
            slo_has_queue_objective,
            workload_drift: client
                .and_then(|c| c.workload_drift.as_ref())
                .map(|d| d.note.as_str()),
            ignore_eos_share: client.and_then(|c| c.ignore_eos_share),
            prefixes: setting.prefixes,
            fired: &fired,
        };
        if let Some(m) = (rule.check)(&ctx) {
            fired.push(rule.id);
            let confidence = if window.counter_resets.is_empty() {
                m.confidence
            } else {
                m.confidence.min(Confidence::Medium)
            };
            findings.push(RuledFinding {
                finding: Finding {
                    id: rule.id.to_owned(),
                    title: rule.title.to_owned(),
                    bottleneck: rule.bottleneck.to_owned(),
                    action: m.action.map_or(rule.action, |a| a.text).to_owned(),
                    trade_off: rule.trade_off.to_owned(),
                    evidence: m.evidence,
                    confidence,
                },
                category: rule.category,
                watch: rule.watch.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    let (findings, demoted) = rank::rank(findings, &objectives, &facts);
    notes.extend(demoted);
    Assessment {
        verdict,
        refused,
        objectives,
        steps: steps::six_steps(window, &facts, setting),
        findings,
        notes,
        views: Vec::new(),
    }
}

/// Reasons the evidence is not valid for a verdict (`DESIGN.md`: client saturated or lagging,
/// client and server counts disagree; plus: not an engine's metrics, nothing finished). A
/// workload drift voids only the verdicts it can have helped ([`WorkloadDrift`]).
fn refusals(w: &Window, f: &Facts, client: Option<&ClientView>) -> Vec<String> {
    let mut out = Vec::new();
    match w.engine {
        Engine::VllmRouter => out.push(
            "these are the production-stack router's metrics, not an engine's; point at the engine pods".to_owned(),
        ),
        Engine::Unknown => out.push("no inference-engine metrics recognised".to_owned()),
        _ => {}
    }
    if f.finished.is_some_and(|n| n <= 0.0) {
        out.push("no request finished in the window".to_owned());
    }
    let Some(c) = client else {
        return out;
    };
    if let Some(h) = &c.health {
        // One client core busy 90 % of the wall time distorts timestamps (oha/hyperfine practice:
        // say when the tool is the bottleneck).
        if h.wall_s > 0.0 && h.cpu_s / h.wall_s >= 0.9 {
            out.push(format!(
                "client saturated: {:.0} % of one CPU over the level",
                100.0 * h.cpu_s / h.wall_s
            ));
        }
        if h.send_lag_p99_s > 0.05 {
            out.push(format!(
                "client lagging: open-loop send lag p99 {:.0} ms (> 50 ms)",
                h.send_lag_p99_s * 1e3
            ));
        }
    }
    if let (Some(cn), Some(sn)) = (c.requests_finished, f.finished) {
        // Counts of whole requests: any difference is real below 100 requests, 1 % above.
        let tol = (0.01 * sn).max(0.5);
        if (cn as f64 - sn).abs() > tol {
            out.push(format!(
                "client and server disagree on finished requests: client {cn}, server {sn} (vllm:request_success_total)"
            ));
        }
    }
    if let (Some(ct), Some(st)) = (c.output_tokens, f.generation_tokens) {
        let tol = (0.01 * st).max(1.0);
        if (ct as f64) > st + tol {
            out.push(format!(
                "client counted more output tokens ({ct}) than the server generated ({st}): the scrapes do not cover the client's window"
            ));
        }
    }
    out
}

fn server_signal(s: LatencySignal) -> Signal {
    match s {
        LatencySignal::Ttft => Signal::Ttft,
        LatencySignal::Itl => Signal::Itl,
        LatencySignal::Tpot => Signal::Tpot,
        LatencySignal::E2e => Signal::E2e,
        LatencySignal::QueueTime => Signal::QueueTime,
    }
}

fn judge_objectives(
    w: &Window,
    f: &Facts,
    client: Option<&ClientView>,
    slo: &SloSpec,
) -> Vec<ObjectiveResult> {
    let rows = client.map_or(&[][..], |c| c.objectives.as_slice());
    let mut out: Vec<ObjectiveResult> = slo
        .objectives
        .iter()
        .map(|o| {
            if let Some(r) = rows.iter().find(|r| r.id == o.id()) {
                // The client's TTFT bound and the engine's histogram: the stricter holds.
                let before = client.and_then(|c| c.started_before_window);
                return engine_overrules_bounds(w, o, &[r], before).unwrap_or_else(|| r.clone());
            }
            match o {
                Objective::Latency {
                    signal,
                    percentile,
                    threshold_s,
                } => latency_objective(w, o, *signal, *percentile, *threshold_s),
                Objective::ErrorRate { max_ratio } => {
                    error_objective(w, f, o, *max_ratio).from_source(Source::Engine)
                }
            }
        })
        .collect();
    // Rows the caller judged for objectives outside `slo` (a mix's per-class `chat/ttft_p95`,
    // which the engine's series cannot split) are part of the judgement as given.
    out.extend(
        rows.iter()
            .filter(|r| !slo.objectives.iter().any(|o| o.id() == r.id))
            .cloned(),
    );
    out
}

/// Start of the reason of a queue-time row that the client's TTFT settled (queue time ≤ TTFT for
/// every request of the window, so a TTFT percentile within the threshold bounds the queue time's);
/// the sweep writes it, [`engine_overrules_bounds`] recognises it.
pub const QUEUE_BOUND_BY_TTFT: &str = "bounded by the client's TTFT";

/// The stricter of the client's bound and the engine's histogram for a queue-time objective `o`:
/// when every row in `bounds` is a PASS the client's TTFT settled ([`QUEUE_BOUND_BY_TTFT`]) and
/// the engine's own queue-time histogram over `w` (vLLM `vllm:request_queue_time_seconds`)
/// puts the share above the threshold beyond the allowed one with 95 % certainty (the bucket
/// counts' lower bound on that share, as a Wilson interval, [`decide`]), the engine's FAIL, id
/// `o.id()`, whose reason names both: the bound covers the requests that started in the window,
/// the histogram every request that finished in it (earlier ones included), and a breach the
/// engine counted happened. `None` otherwise (no such bound, no histogram, no certain breach),
/// and also when the breach is no larger than `started_before_window`, the requests started
/// before the window that may have finished in it: then the breach can be theirs (the start-up
/// of a level, whose answers outlast the window, queues while the window's requests do not),
/// and the window's own requests, whose TTFT bounds their queue time, are the measurement.
pub fn engine_overrules_bounds(
    w: &Window,
    o: &Objective,
    bounds: &[&ObjectiveResult],
    started_before_window: Option<u64>,
) -> Option<ObjectiveResult> {
    let Objective::Latency {
        signal: LatencySignal::QueueTime,
        percentile,
        threshold_s,
    } = o
    else {
        return None;
    };
    if bounds.is_empty()
        || !bounds
            .iter()
            .all(|b| b.verdict == Verdict::Pass && b.reason.starts_with(QUEUE_BOUND_BY_TTFT))
    {
        return None;
    }
    let engine = latency_objective(w, o, LatencySignal::QueueTime, *percentile, *threshold_s);
    if engine.verdict != Verdict::Fail {
        return None;
    }
    let h = w.histogram(Signal::QueueTime)?;
    let n = engine.samples;
    let (_, _, le_hi) = h.fraction_le_bounded(*threshold_s)?;
    let bad = ((1.0 - le_hi) * n as f64 - 1e-9).ceil().max(0.0) as u64;
    let allowed = 1.0 - percentile / 100.0;
    if decide(bad, n, allowed) != Decision::BreachCertain
        || started_before_window.is_some_and(|k| bad <= k)
    {
        return None;
    }
    let named: Vec<String> = bounds
        .iter()
        .map(|b| {
            let ttft = b
                .reason
                .split(": ")
                .nth(1)
                .and_then(|t| t.split(';').next())
                .unwrap_or("within the threshold");
            if b.id.class().is_some() {
                format!("{} ({ttft})", b.id)
            } else {
                ttft.to_owned()
            }
        })
        .collect();
    Some(ObjectiveResult {
        reason: format!(
            "the engine's histogram and the client's bound disagree; the stricter holds: {}; the client's TTFT said PASS ({}), but that bound covers the requests that started in the window, while the engine counted at least {bad} of {n} requests that finished in it queued longer than {threshold_s} s, a breach certain at 95 %",
            engine.reason,
            named.join(", ")
        ),
        ..engine
    })
}

/// A latency objective "p-th percentile ≤ T" on a server histogram. The share of observations
/// ≤ T is bracketed by the buckets around T; the objective allows a bad share of `1 − p/100`.
/// PASS when even the pessimistic bad share is allowed, FAIL when even the optimistic one is not,
/// otherwise INCONCLUSIVE (the threshold lies inside a bucket that straddles the decision).
fn latency_objective(
    w: &Window,
    o: &Objective,
    signal: LatencySignal,
    percentile: f64,
    threshold_s: f64,
) -> ObjectiveResult {
    latency_objective_on(w, o, signal, percentile, threshold_s, Source::Engine)
}

/// [`latency_objective`] on `w`, the series of `source` (the engine's, or a gateway's), which
/// its reasons start with (`server-side`, `gateway`).
fn latency_objective_on(
    w: &Window,
    o: &Objective,
    signal: LatencySignal,
    percentile: f64,
    threshold_s: f64,
    source: Source,
) -> ObjectiveResult {
    latency_judgement(w, o, signal, percentile, threshold_s, source).from_source(source)
}

fn latency_judgement(
    w: &Window,
    o: &Objective,
    signal: LatencySignal,
    percentile: f64,
    threshold_s: f64,
    source: Source,
) -> ObjectiveResult {
    let side = match source {
        Source::Gateway => "gateway",
        Source::Engine | Source::Client => "server-side",
    };
    let sig = server_signal(signal);
    if let Some(why) = w.rejection(sig) {
        return ObjectiveResult::new(
            o,
            threshold_s,
            None,
            Verdict::Inconclusive,
            0,
            format!("refused: {why}"),
        );
    }
    let metric = w.sources.get(&sig).cloned().unwrap_or_else(|| sig.name());
    let Some(h) = w.histogram(sig) else {
        return ObjectiveResult::new(
            o,
            threshold_s,
            None,
            Verdict::Inconclusive,
            0,
            format!("the server exports no {} histogram", sig.name()),
        );
    };
    let n = h.observations();
    let samples = if n.is_finite() && n > 0.0 {
        n.round() as u64
    } else {
        0
    };
    let need = min_samples_for_percentile(percentile);
    // Bounded by _sum and by the phases the signal is part of (`bounds`): a queue-time p95 is
    // never shown above the TTFT p95, nor at a bucket edge the sum rules out.
    let bounded = bounds::quantile(w, sig, percentile / 100.0);
    let q = bounded.map(|b| b.q);
    // In the first bucket only "≤ le₀" is known: report the bound, never PromQL's interpolation.
    let observed = q.map(|q| q.reported());
    let bracket = bounded
        .map(|b| format!("between {} and {} s{}", b.q.lower, b.q.upper, b.why(w)))
        .unwrap_or_default();
    let allowed = 1.0 - percentile / 100.0;
    // Bucket counts and _sum bound the share above the threshold even inside a bucket.
    let bad_share = h
        .fraction_le_bounded(threshold_s)
        .map(|(_, lo, hi)| (1.0 - hi, 1.0 - lo));
    if samples < need {
        // A breach the counts already prove needs no minimum (the sweep's rule: the bad share's
        // 95 % Wilson interval lies above the allowed share even at its lowest).
        if let Some((bad_lo, _)) = bad_share {
            let bad = (bad_lo * samples as f64 - 1e-9).ceil().max(0.0) as u64;
            if decide(bad, samples, allowed) == Decision::BreachCertain {
                let r = ObjectiveResult::new(
                    o,
                    threshold_s,
                    observed,
                    Verdict::Fail,
                    samples,
                    format!(
                        "{side} ({metric}), breached: at least {bad} of {samples} observations above {threshold_s} s (allowed {:.2} %), a breach certain at 95 % with fewer than the {need} observations p{percentile} needs; p{percentile} ≈ {} s, {bracket}",
                        allowed * 100.0,
                        observed
                            .map(|v| format!("{v:.4}"))
                            .unwrap_or_else(|| "?".into()),
                    ),
                );
                return if q.is_some_and(|q| q.upper_bound_only) {
                    r.upper_bound()
                } else {
                    r
                };
            }
        }
        // The figure shown is then only the first bucket's bound: say so, so every display
        // marks it "≤".
        let upper = q.filter(|q| q.upper_bound_only);
        let r = ObjectiveResult::new(
            o,
            threshold_s,
            observed,
            Verdict::Inconclusive,
            samples,
            format!(
                "{side} ({metric}): {samples} observations, fewer than the {need} needed for p{percentile}{}",
                match upper {
                    Some(q) => format!("; {UPPER_BOUND_ONLY} {} s", bound_s(q.upper)),
                    None => String::new(),
                }
            ),
        );
        return if upper.is_some() { r.upper_bound() } else { r };
    }
    if let Some(q) = q.filter(|q| q.upper_bound_only) {
        let le0 = q.upper;
        let proven = bad_share.filter(|(lo, hi)| *hi <= allowed + 1e-12 || *lo > allowed + 1e-12);
        let (verdict, why) = if le0 <= threshold_s {
            (
                Verdict::Pass,
                format!(
                    "holds: {UPPER_BOUND_ONLY} {} s, which does not exceed the threshold (a value equal to it meets it, as Prometheus' le does)",
                    bound_s(le0)
                ),
            )
        } else if let Some((lo, hi)) = proven {
            let share = format!("{:.2}–{:.2} %", lo * 100.0, hi * 100.0);
            if hi <= allowed + 1e-12 {
                (
                    Verdict::Pass,
                    format!(
                        "holds: {UPPER_BOUND_ONLY} {} s; _sum/_count put {share} of the observations above the threshold {threshold_s} s (allowed {:.2} %)",
                        bound_s(le0),
                        allowed * 100.0
                    ),
                )
            } else {
                (
                    Verdict::Fail,
                    format!(
                        "breached: {UPPER_BOUND_ONLY} {} s; _sum/_count put {share} of the observations above the threshold {threshold_s} s (allowed {:.2} %)",
                        bound_s(le0),
                        allowed * 100.0
                    ),
                )
            }
        } else {
            (
                Verdict::Inconclusive,
                format!(
                    "undecided: {UPPER_BOUND_ONLY} {} s; the first bucket's bound is above the threshold {threshold_s} s and _sum/_count do not settle it, so the histogram cannot tell",
                    bound_s(le0)
                ),
            )
        };
        return ObjectiveResult::new(
            o,
            threshold_s,
            observed,
            verdict,
            samples,
            format!(
                "{side} ({metric}), {why} (p{percentile} of {samples} observations falls in the first bucket)"
            ),
        )
        .upper_bound();
    }
    let Some((bad_lo, bad_hi)) = bad_share else {
        return ObjectiveResult::new(
            o,
            threshold_s,
            observed,
            Verdict::Inconclusive,
            samples,
            format!("{side} ({metric}): histogram has no +Inf bucket"),
        );
    };
    // Exact when the threshold is a bucket bound; a range when it falls inside a bucket.
    let share = if (bad_hi - bad_lo).abs() < 5e-5 {
        format!("{:.2} %", bad_lo * 100.0)
    } else {
        format!("{:.2}–{:.2} %", bad_lo * 100.0, bad_hi * 100.0)
    };
    let (verdict, why) = if bad_hi <= allowed + 1e-12 {
        (Verdict::Pass, "holds")
    } else if bad_lo > allowed + 1e-12 {
        (Verdict::Fail, "breached")
    } else {
        (
            Verdict::Inconclusive,
            "undecided: the threshold falls inside a bucket that straddles the percentile",
        )
    };
    ObjectiveResult::new(
        o,
        threshold_s,
        observed,
        verdict,
        samples,
        format!(
            "{side} ({metric}), {why}: {share} of {samples} observations above {threshold_s} s (allowed {:.2} %); p{percentile} ≈ {} s, {bracket}",
            allowed * 100.0,
            observed
                .map(|v| format!("{v:.4}"))
                .unwrap_or_else(|| "?".into()),
        ),
    )
}

fn error_objective(w: &Window, f: &Facts, o: &Objective, max_ratio: f64) -> ObjectiveResult {
    if let Some(why) = w.rejection(Signal::RequestsFinished) {
        return ObjectiveResult::new(
            o,
            max_ratio,
            None,
            Verdict::Inconclusive,
            0,
            format!("refused: {why}"),
        );
    }
    // Failures are counted only where the engine exports a request's outcome: a count of
    // finished requests alone cannot fail the objective, so it gives no verdict.
    let series = headroom_signals::adapter::outcome_series(w.engine);
    let outcomes = w.counters.get(&Signal::RequestsFinished);
    let Some(failures) = series.failures.filter(|_| outcomes.is_some()) else {
        return ObjectiveResult::new(
            o,
            max_ratio,
            None,
            Verdict::Inconclusive,
            0,
            format!(
                "no evidence: {}; {}",
                series.missing,
                match f.finished {
                    Some(n) => format!("{n:.0} requests finished, how many failed is unknown"),
                    None => "how many requests failed is unknown".to_owned(),
                }
            ),
        );
    };
    let Some(n) = f.finished.filter(|n| *n > 0.0) else {
        return ObjectiveResult::new(
            o,
            max_ratio,
            None,
            Verdict::Inconclusive,
            0,
            format!("no finished requests on the server's counters ({failures})"),
        );
    };
    let bad = f.finished_error.unwrap_or(0.0) + f.finished_abort.unwrap_or(0.0);
    let none_yet = series.absent_means_none
        && !outcomes.is_some_and(|m| m.keys().any(|k| k.starts_with("error")));
    // The sweep's rule ([`ObjectiveResult::error_ratio`]), so a level reads the same in both.
    let (bad, n) = (bad.round() as u64, n.round() as u64);
    ObjectiveResult::error_ratio(
        o,
        bad,
        n,
        max_ratio,
        true,
        format!(
            "server-side ({failures}): {bad} errors + aborts of {n} finished requests{}",
            if none_yet {
                format!(
                    "; {failures} is absent, which {} exports from its first failure: none yet",
                    w.engine.name()
                )
            } else {
                String::new()
            }
        ),
    )
}

#[cfg(test)]
mod drift_tests {
    use super::*;

    fn row(v: Verdict) -> ObjectiveResult {
        ObjectiveResult {
            share: None,
            bound: Default::default(),
            source: None,
            id: serde_json::from_str("\"ttft_p95\"").unwrap(),
            description: "TTFT p95 < 300 ms".into(),
            threshold: 0.3,
            observed: Some(0.2),
            verdict: v,
            samples: 100,
            reason: "client".into(),
        }
    }

    /// Shorter prompts than specified void a PASS and keep a FAIL; longer ones the reverse.
    #[test]
    fn a_drift_voids_only_the_verdicts_it_can_have_helped() {
        let cases = [
            (0.6, Verdict::Pass, Verdict::Inconclusive),
            (0.6, Verdict::Fail, Verdict::Fail),
            (1.4, Verdict::Pass, Verdict::Pass),
            (1.4, Verdict::Fail, Verdict::Inconclusive),
            (1.4, Verdict::Inconclusive, Verdict::Inconclusive),
        ];
        for (ratio, before, after) in cases {
            let d = WorkloadDrift {
                prompt_ratio: ratio,
                note: "prompts realised".into(),
            };
            let mut rows = vec![row(before)];
            apply_drift(&mut rows, &d);
            assert_eq!(rows[0].verdict, after, "{ratio} {before:?}");
            let dir = if ratio < 1.0 { "shorter" } else { "longer" };
            assert!(
                before == Verdict::Inconclusive || rows[0].reason.contains(dir),
                "{}",
                rows[0].reason
            );
        }
    }
}
