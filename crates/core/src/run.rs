//! The run-directory schema: what `headroom sweep` measured, in the shape written to
//! `results.json` and read back by reports, `diagnose --from RUN_DIR` and `compare`.
//!
//! Every figure carries its unit in its name (`_s`, `_ms`, `_ratio`, `_per_s`). Latency percentiles
//! are client-side, from HDR histograms (3 significant digits), in seconds.

use crate::objective::{Bound, ObjectiveId, Source, Unit};
use crate::verdict::{Finding, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Schema version of `results.json`; bump on incompatible change. Still 1: fields added since
/// (an objective's `bound` and `source`, absent from older files) are optional, readers of
/// version 1 ignore them, and every field written before reads and writes the same bytes.
pub const RESULTS_SCHEMA_VERSION: u32 = 1;

/// How load is offered at a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadMode {
    /// Closed loop: a fixed number of requests in flight; the level is the concurrency.
    Concurrency,
    /// Open loop: requests arrive at a rate; the level is requests per second.
    Rate,
}

impl LoadMode {
    /// Unit of a level in this mode, for display (`concurrent`, `req/s`).
    pub fn unit(self) -> &'static str {
        match self {
            LoadMode::Concurrency => "concurrent",
            LoadMode::Rate => "req/s",
        }
    }
}

/// Whether the run finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunStatus {
    /// Still running: this file is a partial result written after a level.
    Running,
    /// Every phase finished.
    Complete,
    /// Stopped early (Ctrl-C, server died, client error); results so far are valid.
    Stopped {
        /// Why.
        reason: String,
    },
}

/// Latency summary of one signal at one level, seconds.
///
/// In JSON, a summary of no observations (`count` 0) carries only `count`: its mean, percentiles
/// and maximum do not exist, and a `0.0` there read as a measured zero latency. Reading such a
/// summary (or one written before, with zeros) gives 0.0 in those fields.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct LatencySummary {
    /// Number of observations.
    pub count: u64,
    /// Mean, seconds.
    #[serde(default)]
    pub mean_s: f64,
    /// Median, seconds.
    #[serde(default)]
    pub p50_s: f64,
    /// 90th percentile, seconds.
    #[serde(default)]
    pub p90_s: f64,
    /// 95th percentile, seconds.
    #[serde(default)]
    pub p95_s: f64,
    /// 99th percentile, seconds.
    #[serde(default)]
    pub p99_s: f64,
    /// Maximum, seconds.
    #[serde(default)]
    pub max_s: f64,
}

impl Serialize for LatencySummary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let empty = self.count == 0;
        let mut m = s.serialize_struct("LatencySummary", if empty { 1 } else { 7 })?;
        m.serialize_field("count", &self.count)?;
        if !empty {
            m.serialize_field("mean_s", &self.mean_s)?;
            m.serialize_field("p50_s", &self.p50_s)?;
            m.serialize_field("p90_s", &self.p90_s)?;
            m.serialize_field("p95_s", &self.p95_s)?;
            m.serialize_field("p99_s", &self.p99_s)?;
            m.serialize_field("max_s", &self.max_s)?;
        }
        m.end()
    }
}

/// Fewest finished requests on which an undecided error objective is settled by its point
/// estimate (a certain breach or pass needs no minimum). Deliberately below `1 / max_ratio`:
/// answers longer than a level's window finish a few dozen requests per level, and the error
/// objective is there to catch an overloaded server's errors, which a Wilson interval shows as
/// certain within a few requests.
pub const MIN_REQUESTS_FOR_ERROR_RATE: u64 = 10;

/// Judgement of one objective at one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveResult {
    /// Which objective, and in a mix which class (written `ttft_p95`, `chat/ttft_p95`).
    pub id: ObjectiveId,
    /// Human form (`TTFT p95 < 300 ms`).
    pub description: String,
    /// Threshold in the objective's [unit](Self::unit): seconds (latency) or a ratio (error
    /// rate).
    pub threshold: f64,
    /// Observed value in the same unit, when measurable.
    pub observed: Option<f64>,
    /// Whether `observed` is the value or only an upper bound on it (written `"bound": "upper"`,
    /// absent when exact).
    #[serde(default, skip_serializing_if = "Bound::is_exact")]
    pub bound: Bound,
    /// Who measured the figure behind the verdict; absent in results written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// PASS / FAIL / INCONCLUSIVE.
    pub verdict: Verdict,
    /// Samples behind the figure.
    pub samples: u64,
    /// Why, for FAIL and INCONCLUSIVE (and the source of the figure: client or server).
    pub reason: String,
    /// The count behind a verdict judged by its share of bad samples (observations above a
    /// latency threshold, errors among finished requests), when it was: what makes the verdict
    /// certain or borderline, and what `compare` tests a difference on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<BadShare>,
}

/// `bad` of `n` independent samples exceeded the objective, which allows the share `allowed`;
/// the verdict is certain when the 95 % Wilson interval of `bad / n` lies wholly on one side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BadShare {
    /// Samples above the threshold (latency) or errors + aborts (error rate).
    pub bad: u64,
    /// Independent samples (requests, for ITL whose gaps cluster by request).
    pub n: u64,
    /// Share of bad samples the objective allows (0.05 for a p95; the ratio for errors).
    pub allowed: f64,
}

impl BadShare {
    /// The 95 % Wilson interval of the bad share.
    pub fn interval(&self) -> (f64, f64) {
        crate::stats::wilson_interval(self.bad, self.n, crate::stats::Z_95)
    }

    /// Whether the interval decides the objective either way.
    pub fn is_certain(&self) -> bool {
        crate::stats::decide(self.bad, self.n, self.allowed) != crate::stats::Decision::Undecided
    }

    /// Samples at which the same share would be certain ([`crate::stats::samples_to_decide`]).
    pub fn samples_to_decide(&self) -> Option<u64> {
        crate::stats::samples_to_decide(self.bad, self.n, self.allowed)
    }
}

/// The words a judge ends a reason with before the window's end when the 95 % interval does not
/// decide the objective yet: the sweep may measure longer to decide it.
pub const UNDECIDED_SO_FAR: &str = "undecided so far";

/// The words a judge writes into a PASS or FAIL its 95 % interval did not decide (the point
/// estimate did): such a verdict is within noise of the threshold, and a rerun may flip it.
pub const BORDERLINE: &str =
    "borderline (95 % interval straddles the target), decided by the point estimate";

impl ObjectiveResult {
    /// A PASS or FAIL decided by the point estimate, within noise of the threshold
    /// ([`BORDERLINE`]).
    pub fn is_borderline(&self) -> bool {
        self.verdict != Verdict::Inconclusive
            && match &self.share {
                Some(s) => !s.is_certain(),
                // Results written before the share was recorded.
                None => self.reason.contains(BORDERLINE),
            }
    }

    /// The share of bad samples the objective allows: 1 − p/100 for a latency percentile, the
    /// ratio for an error objective.
    pub fn objective_allowed_share(&self) -> f64 {
        if let Some(s) = &self.share {
            return s.allowed;
        }
        match self.id.percentile() {
            Some(p) => 1.0 - p / 100.0,
            None => self.threshold,
        }
    }

    /// The unit of `threshold` and `observed`.
    pub fn unit(&self) -> Unit {
        self.id.unit()
    }

    /// The same result marked as measured by `source`.
    pub fn from_source(mut self, source: Source) -> ObjectiveResult {
        self.source = Some(source);
        self
    }

    /// The same result with `observed` marked as only an upper bound.
    pub fn upper_bound(mut self) -> ObjectiveResult {
        self.bound = Bound::Upper;
        self
    }

    /// The same result with the count behind it recorded.
    pub fn with_share(mut self, bad: u64, n: u64, allowed: f64) -> ObjectiveResult {
        self.share = Some(BadShare { bad, n, allowed });
        self
    }

    /// The reason's first clause, at most about 60 characters: what a terminal line can carry
    /// (`prompts 40 % shorter than specified`, `client and server disagree on finished requests`).
    pub fn short_reason(&self) -> String {
        let r = self.reason.trim();
        let r = r.strip_prefix("refused (").unwrap_or(r);
        // A sample minimum counted in requests (ITL: gaps of few requests) is the why, wherever
        // it stands: `8 requests; p95 needs 20`.
        if let Some(need) = r.split("; ").find(|c| c.contains("needs at least")) {
            let n = need
                .split_whitespace()
                .skip_while(|w| *w != "least")
                .nth(1)
                .unwrap_or("?");
            let had = r
                .split("over the ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .filter(|t| t.parse::<u64>().is_ok());
            let pct = need.split_whitespace().next().unwrap_or("percentile");
            return match had {
                Some(k) => format!("{k} requests; {pct} needs {n}"),
                None => format!("{pct} needs {n} samples"),
            };
        }
        let cut = ["; ", ": ", " (", ". "]
            .iter()
            .filter_map(|sep| r.find(sep))
            .min()
            .unwrap_or(r.len());
        let first = r[..cut].trim_end_matches([')', '.', ',']);
        if first.chars().count() <= 64 {
            return first.to_string();
        }
        let mut out: String = first.chars().take(60).collect();
        if let Some(sp) = out.rfind(' ') {
            out.truncate(sp);
        }
        out.push('…');
        out
    }

    /// The result of `objective` with its id and description filled in from the objective.
    pub fn new(
        objective: &crate::slo::Objective,
        threshold: f64,
        observed: Option<f64>,
        verdict: Verdict,
        samples: u64,
        reason: String,
    ) -> ObjectiveResult {
        ObjectiveResult {
            id: objective.id(),
            description: objective.describe(),
            threshold,
            observed,
            bound: Bound::Exact,
            source: None,
            verdict,
            samples,
            reason,
            share: None,
        }
    }

    /// The judgement of an error objective: `bad` errors + aborts among `n` finished requests
    /// against `max_ratio`, the same rule wherever it is judged (the sweep on the client's counts,
    /// `diagnose` on the engine's counters). A 95 % Wilson interval (Newcombe 1998) entirely above
    /// the ratio is a certain breach (FAIL), entirely at or below a certain pass; in between,
    /// with at least [`MIN_REQUESTS_FOR_ERROR_RATE`] requests the point estimate decides, with
    /// fewer it is INCONCLUSIVE — and so is an undecided interval before the window's end
    /// (`final_window` false). `share` describes the counts (`0 errors + aborts of 11 finished
    /// requests`) and starts the reason.
    pub fn error_ratio(
        objective: &crate::slo::Objective,
        bad: u64,
        n: u64,
        max_ratio: f64,
        final_window: bool,
        share: String,
    ) -> ObjectiveResult {
        use crate::stats::{Decision, decide};
        let r = |v, why: String| {
            let observed = (n > 0).then(|| bad as f64 / n as f64);
            let o = ObjectiveResult::new(objective, max_ratio, observed, v, n, why);
            if n > 0 {
                o.with_share(bad, n, max_ratio)
            } else {
                o
            }
        };
        if n == 0 {
            return r(
                Verdict::Inconclusive,
                format!("{share}; no finished requests"),
            );
        }
        match decide(bad, n, max_ratio) {
            Decision::BreachCertain => r(Verdict::Fail, format!("{share}; breach certain at 95 %")),
            Decision::PassCertain => r(Verdict::Pass, share),
            Decision::Undecided if !final_window => r(
                Verdict::Inconclusive,
                format!("{share}; {UNDECIDED_SO_FAR}"),
            ),
            Decision::Undecided if n < MIN_REQUESTS_FOR_ERROR_RATE => r(
                Verdict::Inconclusive,
                format!("{share}; fewer than {MIN_REQUESTS_FOR_ERROR_RATE} finished requests"),
            ),
            Decision::Undecided => {
                let v = if bad as f64 / n as f64 <= max_ratio {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                r(v, format!("{share}; {BORDERLINE}"))
            }
        }
    }

    /// Fewest samples that can estimate this objective's percentile at all:
    /// [`crate::stats::min_samples_for_percentile`] of its percentile (20 for `ttft_p95`, 100
    /// for `itl_p99`); 1 for an objective without a percentile (`error_rate`).
    pub fn needed_samples(&self) -> u64 {
        self.id
            .percentile()
            .map_or(1, crate::stats::min_samples_for_percentile)
    }

    /// `Some((samples, needed))` when the objective is INCONCLUSIVE because it had fewer samples
    /// than [`Self::needed_samples`] — a window too short for the load, not a borderline figure.
    pub fn sample_shortfall(&self) -> Option<(u64, u64)> {
        let need = self.needed_samples();
        (self.verdict == Verdict::Inconclusive && self.samples < need)
            .then_some((self.samples, need))
    }
}

/// Token counts at one level, summed over requests that finished in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TokenCounts {
    /// Prompt tokens the workload asked for (synthesis target).
    pub prompt_requested: u64,
    /// Prompt tokens the server reported in `usage`.
    pub prompt_realised: u64,
    /// `max_tokens` requested.
    pub output_cap_requested: u64,
    /// Output tokens the server reported in `usage`.
    pub output_realised: u64,
    /// Requests whose usage was missing (counts then exclude them).
    pub usage_missing: u64,
}

/// The client's own health during a level: when it was busy or late, its numbers may be distorted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ClientHealth {
    /// CPU seconds the client process used during the level (user + system).
    pub cpu_s: f64,
    /// Wall seconds of the level.
    pub wall_s: f64,
    /// SSE chunks received.
    pub chunks: u64,
    /// Client CPU per chunk, microseconds.
    pub cpu_per_chunk_us: f64,
    /// Open-loop send lag (actual − intended send time), p99, seconds.
    pub send_lag_p99_s: f64,
    /// Send lag max, seconds.
    pub send_lag_max_s: f64,
    /// Open loop: how late the operating system woke the pacer thread at the intended send
    /// times, p99, seconds: the share of the send lag due to the host's scheduler (0 for an
    /// arrival that was already due when the pacer got to it: that delay is the client's own).
    #[serde(default)]
    pub pacer_late_p99_s: f64,
    /// Open loop: the pacer thread ran at real-time priority (needs CAP_SYS_NICE).
    #[serde(default)]
    pub pacer_realtime: bool,
}

/// The engine's own view of a level (from `/metrics` scrapes at start, during and end), and the
/// reconciliation of client and server views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServerView {
    /// Engine detected (`vllm`, `sglang`, `tgi`, `llama.cpp`, `unknown`).
    pub engine: String,
    /// Named figures over the window (e.g. `queue_time_p95_s`, `kv_cache_usage_max_ratio`,
    /// `preemptions`, `prefix_cache_hit_ratio`, `requests_finished`), each from a named metric.
    pub figures: BTreeMap<String, f64>,
    /// Client − server differences that matter (token counts, request counts, TTFT remainder).
    pub reconciliation: Vec<Reconciliation>,
    /// Decision-table findings.
    pub findings: Vec<Finding>,
    /// Scrape files (relative to the run directory) behind these figures.
    pub scrapes: Vec<String>,
    /// Problems reading the server (scrape failed, metrics missing); figures may be partial.
    pub notes: Vec<String>,
}

/// One client-versus-server comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// What is compared (`output_tokens`, `requests_finished`, `ttft_unexplained_p50_s`).
    pub what: String,
    /// Client-side figure.
    pub client: f64,
    /// Server-side figure.
    pub server: f64,
    /// Whether they agree within tolerance.
    pub agrees: bool,
    /// Explanation.
    pub note: String,
}

/// Everything measured at one load level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelResult {
    /// Concurrency or requests per second.
    pub load: f64,
    /// Mode of `load`.
    pub mode: LoadMode,
    /// Unix time of the measurement window's start, seconds.
    pub started_unix_s: f64,
    /// Measurement window length actually used, seconds (extended or cut short).
    pub window_s: f64,
    /// How the window ended (`full`, `early_stop: …`, `extended`, `interrupted`).
    pub window_note: String,
    /// Requests of the measurement window by outcome label (`stop`, `length`, `http_503`,
    /// `client_cancel`, …).
    pub outcomes: BTreeMap<String, u64>,
    /// Every request of the level that ended (warm-up, window and drain) by outcome label: the
    /// population of the error objective (errors are judged over what ended while the load was
    /// offered, as the server's counters see them) and of the client/server reconciliation.
    /// Empty in results written before it existed; [`LevelResult::error_counts`] then falls back
    /// to [`LevelResult::outcomes`].
    #[serde(default)]
    pub level_outcomes: BTreeMap<String, u64>,
    /// Latency per signal name (`ttft`, `itl`, `tpot`, `e2e`).
    pub latency: BTreeMap<String, LatencySummary>,
    /// Completed requests (`stop` or `length`) per second over the measurement window: from the
    /// engine's `vllm:request_success_total` when its metrics were scraped (every request that
    /// finished in the window, whenever it started), else the client's window-started successes.
    pub request_rate_per_s: f64,
    /// Output tokens per second (from usage).
    pub output_tokens_per_s: f64,
    /// Goodput (DistServe; vLLM `bench serve --goodput`): requests that started in the window,
    /// succeeded and met their class's per-request thresholds — its TTFT, TPOT and E2E
    /// objectives' thresholds (the smallest of a signal's percentiles; ITL and queue-time
    /// objectives have no per-request form) — per second of window. `None` (JSON `null`) when
    /// none of the requests that started in the window finished: each was still running when
    /// the window and its drain closed (answers longer than the window), so goodput was not
    /// measured; it is not zero. Lengthen the measure window to measure it.
    #[serde(default)]
    pub goodput_per_s: Option<f64>,
    /// Token accounting.
    pub tokens: TokenCounts,
    /// Per objective.
    pub objectives: Vec<ObjectiveResult>,
    /// Combined verdict.
    pub verdict: Verdict,
    /// Client health.
    pub client: ClientHealth,
    /// Engine view, when `/metrics` was readable.
    pub server: Option<ServerView>,
    /// Histogram file for this level (relative to the run directory).
    pub histograms: String,
    /// With `sweep --repeat N`: the level's repeats after the first, run back to back at the
    /// same load (each with its own seed, histogram file and scrapes). This record is the first
    /// repeat's measurement; its objectives and verdict are the strictest of all repeats' (see
    /// the sweep's controller). Empty without repeats, and absent from the JSON then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<LevelResult>,
    /// Warnings specific to this level.
    pub warnings: Vec<String>,
}

impl LevelResult {
    /// `(errors + aborts, finished requests)` over [`LevelResult::level_outcomes`] (every
    /// request of the level that ended; [`LevelResult::outcomes`] when that is empty), counted as
    /// the error objective counts them ([`crate::Outcome::counts_as_error`]): every outcome but
    /// `stop`, `length` and `client_cancel` is an error; client cancels are not finished
    /// requests. `levels.csv` and the reports use this, so their figures are the objective's.
    pub fn error_counts(&self) -> (u64, u64) {
        let mut errors = 0;
        let mut finished = 0;
        let population = if self.level_outcomes.is_empty() {
            &self.outcomes
        } else {
            &self.level_outcomes
        };
        for (label, n) in population {
            match label.as_str() {
                "client_cancel" => {}
                "stop" | "length" => finished += n,
                _ => {
                    errors += n;
                    finished += n;
                }
            }
        }
        (errors, finished)
    }

    /// Ids of the objectives that failed, in order.
    pub fn failed_objectives(&self) -> Vec<&ObjectiveId> {
        self.objective_ids(Verdict::Fail)
    }

    /// Ids of the objectives left INCONCLUSIVE, in order.
    pub fn inconclusive_objectives(&self) -> Vec<&ObjectiveId> {
        self.objective_ids(Verdict::Inconclusive)
    }

    fn objective_ids(&self, v: Verdict) -> Vec<&ObjectiveId> {
        self.objectives
            .iter()
            .filter(|o| o.verdict == v)
            .map(|o| &o.id)
            .collect()
    }

    /// The level's verdict with the objectives behind it, failed and inconclusive apart:
    /// `PASS`, `FAIL (error_rate)`, `FAIL (error_rate; inconclusive: ttft_p95)`,
    /// `INCONCLUSIVE (inconclusive: queue_time_p95)`. An objective left undecided for lack of
    /// samples says so with its count: `INCONCLUSIVE (too few samples: ttft_p95 3 of 20)`.
    pub fn verdict_line(&self) -> String {
        let failed: Vec<String> = self
            .failed_objectives()
            .iter()
            .map(ToString::to_string)
            .collect();
        let (short, unsure): (Vec<_>, Vec<_>) = self
            .objectives
            .iter()
            .filter(|o| o.verdict == Verdict::Inconclusive)
            .partition(|o| o.sample_shortfall().is_some());
        let mut parts = Vec::new();
        if !failed.is_empty() {
            parts.push(failed.join(", "));
        }
        // Grouped by why, in a few words: `inconclusive: ttft_p95, itl_p95 (prompts 40 % shorter
        // than specified)`.
        let mut why: Vec<(String, Vec<String>)> = Vec::new();
        for o in &unsure {
            let r = o.short_reason();
            match why.iter_mut().find(|(w, _)| *w == r) {
                Some((_, ids)) => ids.push(o.id.to_string()),
                None => why.push((r, vec![o.id.to_string()])),
            }
        }
        for (r, ids) in why {
            if r.is_empty() {
                parts.push(format!("inconclusive: {}", ids.join(", ")));
            } else {
                parts.push(format!("inconclusive: {} ({r})", ids.join(", ")));
            }
        }
        if !short.is_empty() {
            let each: Vec<String> = short
                .iter()
                .filter_map(|o| {
                    let (n, need) = o.sample_shortfall()?;
                    Some(format!("{} {n} of {need}", o.id))
                })
                .collect();
            parts.push(format!("too few samples: {}", each.join(", ")));
        }
        if parts.is_empty() {
            self.verdict.as_str().to_string()
        } else {
            format!("{} ({})", self.verdict.as_str(), parts.join("; "))
        }
    }
}

/// Capacity found by one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Class name, or `mix`.
    pub name: String,
    /// Classes in this phase with their weights.
    pub classes: Vec<(String, f64)>,
    /// Load mode.
    pub mode: LoadMode,
    /// Levels in the order run.
    pub levels: Vec<LevelResult>,
    /// Highest load that passed every objective (none passed: `None`).
    pub capacity: Option<f64>,
    /// Lowest load that failed, when one did.
    pub first_fail: Option<f64>,
    /// Objective that broke first (at `first_fail`), by id.
    pub first_breach: Option<ObjectiveId>,
    /// The capacity with its uncertainty, from the certainty of each level's verdict (absent in
    /// results written before it existed; [`PhaseResult::capacity_band`] recomputes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_band: Option<CapacityBand>,
    /// How the search ended (resolution reached, limit hit, interrupted).
    pub search_note: String,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// [`RESULTS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Whether the run finished.
    pub status: RunStatus,
    /// Phases: each class alone, then the mix.
    pub phases: Vec<PhaseResult>,
    /// Warnings for the whole run (client saturated, token drift, …), printed once at the end.
    pub warnings: Vec<String>,
}

/// Margin of one objective at the operating point: `threshold / observed` (5.9 means the observed
/// figure could grow 5.9× before breaching).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    /// Load of the operating point (the capacity level).
    pub load: f64,
    /// Objective id.
    pub objective: ObjectiveId,
    /// Objective text.
    pub description: String,
    /// Observed value, in the objective's [unit](ObjectiveId::unit).
    pub observed: f64,
    /// Threshold, in the same unit.
    pub threshold: f64,
    /// `threshold / observed`; infinite when nothing was observed above zero.
    pub ratio: f64,
}

/// Where a phase's capacity lies, given how certain each level's verdict was: at least the
/// highest load that passed with a certain verdict, below the lowest load that failed with one.
/// Levels between them, or decided by a point estimate, are within noise of an objective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityBand {
    /// Highest load whose PASS was certain (every objective's 95 % interval on the good side).
    pub low: Option<f64>,
    /// Lowest load above `low` whose FAIL was certain (some objective's interval wholly beyond).
    pub high: Option<f64>,
    /// Loads whose verdict a point estimate decided, ascending.
    pub borderline: Vec<f64>,
}

impl LevelResult {
    /// Whether the level's verdict is certain at 95 %: a PASS with no objective borderline, or a
    /// FAIL with at least one objective failing for certain. INCONCLUSIVE is never certain.
    pub fn verdict_is_certain(&self) -> bool {
        self.verdict_is_certain_for(None)
    }

    /// [`Self::verdict_is_certain`] counting only the `binding` objectives for a PASS (all when
    /// `None`; see [`PhaseResult::binding_objectives`]). A FAIL is certain when any objective
    /// fails for certain.
    pub fn verdict_is_certain_for(&self, binding: Option<&[ObjectiveId]>) -> bool {
        let counts = |o: &ObjectiveResult| binding.is_none_or(|b| b.contains(&o.id));
        match self.verdict {
            Verdict::Pass => !self
                .objectives
                .iter()
                .any(|o| counts(o) && o.is_borderline()),
            Verdict::Fail => self
                .objectives
                .iter()
                .any(|o| o.verdict == Verdict::Fail && !o.is_borderline()),
            Verdict::Inconclusive => false,
        }
    }

    /// The borderline objective that keeps the level's verdict from being certain: of those
    /// with the level's verdict (and among `binding`, when given), the one furthest from
    /// certainty (most samples to decide it; within noise of its threshold first).
    pub fn deciding_borderline(&self, binding: Option<&[ObjectiveId]>) -> Option<&ObjectiveResult> {
        if self.verdict_is_certain_for(binding) {
            return None;
        }
        self.objectives
            .iter()
            .filter(|o| binding.is_none_or(|b| b.contains(&o.id)))
            .filter(|o| o.is_borderline() && o.verdict == self.verdict)
            .max_by_key(|o| {
                o.share
                    .as_ref()
                    .map_or(u64::MAX, |s| s.samples_to_decide().unwrap_or(u64::MAX))
            })
    }
}

impl PhaseResult {
    /// The objectives that locate the phase's capacity: those that failed at some level (all of
    /// them when none did). One that passes at every level tried, up to loads where another
    /// fails, bounds nothing in the range tried, so its own uncertainty (an error rate of 0 in 40
    /// requests is not certain below 0.5 %) does not widen the capacity band.
    pub fn binding_objectives(&self) -> Option<Vec<ObjectiveId>> {
        let failed: Vec<ObjectiveId> = self
            .levels
            .iter()
            .flat_map(|l| l.objectives.iter())
            .filter(|o| o.verdict == Verdict::Fail)
            .map(|o| o.id.clone())
            .fold(Vec::new(), |mut v, id| {
                if !v.contains(&id) {
                    v.push(id);
                }
                v
            });
        (!failed.is_empty()).then_some(failed)
    }

    /// The capacity with its uncertainty ([`CapacityBand`]), judged on the
    /// [binding objectives](Self::binding_objectives).
    pub fn capacity_band(&self) -> CapacityBand {
        let binding = self.binding_objectives();
        let binding = binding.as_deref();
        let low = self
            .levels
            .iter()
            .filter(|l| l.verdict == Verdict::Pass && l.verdict_is_certain_for(binding))
            .map(|l| l.load)
            .reduce(f64::max);
        let high = self
            .levels
            .iter()
            .filter(|l| l.verdict == Verdict::Fail && l.verdict_is_certain())
            .map(|l| l.load)
            .filter(|x| low.is_none_or(|lo| *x > lo))
            .reduce(f64::min);
        let mut borderline: Vec<f64> = self
            .levels
            .iter()
            .filter(|l| l.verdict != Verdict::Inconclusive && !l.verdict_is_certain_for(binding))
            .map(|l| l.load)
            .collect();
        borderline.sort_by(f64::total_cmp);
        borderline.dedup();
        CapacityBand {
            low,
            high,
            borderline,
        }
    }

    /// The level at the phase's capacity, if any passed.
    pub fn operating_level(&self) -> Option<&LevelResult> {
        let cap = self.capacity?;
        self.levels
            .iter()
            .rev()
            .find(|l| (l.load - cap).abs() < 1e-9 && l.verdict == Verdict::Pass)
    }

    /// Headroom of every measured objective at the operating point, tightest first.
    pub fn headroom(&self) -> Vec<Headroom> {
        let Some(level) = self.operating_level() else {
            return Vec::new();
        };
        let mut out: Vec<Headroom> = level
            .objectives
            .iter()
            .filter_map(|o| {
                let observed = o.observed?;
                let ratio = if observed > 0.0 {
                    o.threshold / observed
                } else {
                    f64::INFINITY
                };
                Some(Headroom {
                    load: level.load,
                    objective: o.id.clone(),
                    description: o.description.clone(),
                    observed,
                    threshold: o.threshold,
                    ratio,
                })
            })
            .collect();
        out.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
        out
    }
}

#[cfg(test)]
mod tests {
    /// An empty summary is written as its count alone (no 0.0 latencies that read as measured);
    /// a full one keeps every field; both read back, as do old files with zeros.
    #[test]
    fn an_empty_latency_summary_has_no_figures() {
        let empty = super::LatencySummary::default();
        let v = serde_json::to_value(&empty).unwrap();
        assert_eq!(v, serde_json::json!({"count": 0}));
        let back: super::LatencySummary = serde_json::from_value(v).unwrap();
        assert_eq!(back, empty);
        let full = super::LatencySummary {
            count: 3,
            mean_s: 0.2,
            p50_s: 0.1,
            p90_s: 0.3,
            p95_s: 0.35,
            p99_s: 0.39,
            max_s: 0.4,
        };
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(v["p95_s"], 0.35);
        assert_eq!(
            serde_json::from_value::<super::LatencySummary>(v).unwrap(),
            full
        );
        let old: super::LatencySummary = serde_json::from_str(
            r#"{"count":0,"mean_s":0.0,"p50_s":0.0,"p90_s":0.0,"p95_s":0.0,"p99_s":0.0,"max_s":0.0}"#,
        )
        .unwrap();
        assert_eq!(old, empty);
    }

    use super::*;

    fn level(load: f64, verdict: Verdict, observed: &[(&str, f64, f64)]) -> LevelResult {
        LevelResult {
            level_outcomes: Default::default(),
            load,
            mode: LoadMode::Concurrency,
            started_unix_s: 0.0,
            window_s: 10.0,
            window_note: "full".into(),
            outcomes: BTreeMap::new(),
            latency: BTreeMap::new(),
            request_rate_per_s: 0.0,
            output_tokens_per_s: 0.0,
            goodput_per_s: Some(0.0),
            tokens: TokenCounts::default(),
            objectives: observed
                .iter()
                .map(|(id, obs, thr)| ObjectiveResult {
                    share: None,
                    bound: Bound::Exact,
                    source: None,
                    id: serde_json::from_value(serde_json::json!(id)).unwrap(),
                    description: (*id).into(),
                    threshold: *thr,
                    observed: Some(*obs),
                    verdict: Verdict::Pass,
                    samples: 100,
                    reason: String::new(),
                })
                .collect(),
            verdict,
            client: ClientHealth::default(),
            server: None,
            histograms: String::new(),
            repeats: Vec::new(),
            warnings: vec![],
        }
    }

    /// The error objective's rule, by hand: Wilson 95 % bounds (0/11: [0, 0.259]; 1/3: lower
    /// 0.0615; 0/1000: upper z²/(n + z²) = 0.00383).
    #[test]
    fn error_ratio_rule_by_hand() {
        let o = crate::slo::Objective::ErrorRate { max_ratio: 0.005 };
        let j = |bad, n, fin| ObjectiveResult::error_ratio(&o, bad, n, 0.005, fin, "s".into());
        let r = j(0, 11, true);
        assert_eq!(
            (r.verdict, r.samples, r.observed),
            (Verdict::Pass, 11, Some(0.0))
        );
        assert!(r.reason.contains("point estimate"), "{}", r.reason);
        assert_eq!(j(0, 11, false).verdict, Verdict::Inconclusive);
        let r = j(0, 9, true);
        assert_eq!(r.verdict, Verdict::Inconclusive);
        assert!(r.reason.contains("fewer than 10"), "{}", r.reason);
        let r = j(1, 3, false);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.reason.contains("breach certain"), "{}", r.reason);
        let r = j(0, 1000, false);
        assert_eq!((r.verdict, r.reason.as_str()), (Verdict::Pass, "s"));
        let r = j(0, 0, true);
        assert_eq!((r.verdict, r.observed), (Verdict::Inconclusive, None));
    }

    #[test]
    fn error_counts_and_verdict_line_by_hand() {
        let mut l = level(
            2.0,
            Verdict::Fail,
            &[("ttft_p95", 0.1, 0.3), ("error_rate", 0.2, 0.005)],
        );
        for (k, n) in [
            ("length", 16),
            ("http_500", 3),
            ("abort", 1),
            ("client_cancel", 7),
        ] {
            l.outcomes.insert(k.into(), n);
        }
        // 3 + 1 errors of 16 + 4 finished; the 7 cancels are neither.
        assert_eq!(l.error_counts(), (4, 20));
        l.objectives[1].verdict = Verdict::Fail;
        assert_eq!(l.verdict_line(), "FAIL (error_rate)");
        l.objectives[0].verdict = Verdict::Inconclusive;
        assert_eq!(
            l.verdict_line(),
            "FAIL (error_rate; inconclusive: ttft_p95)"
        );
        l.objectives[1].verdict = Verdict::Inconclusive;
        l.verdict = Verdict::Inconclusive;
        assert_eq!(
            l.verdict_line(),
            "INCONCLUSIVE (inconclusive: ttft_p95, error_rate)"
        );
        // Undecided for want of samples: p95 needs 1/(1 − 0.95) = 20, p99 needs 100.
        l.objectives[0].samples = 3;
        assert_eq!(l.objectives[0].sample_shortfall(), Some((3, 20)));
        assert_eq!(
            l.verdict_line(),
            "INCONCLUSIVE (inconclusive: error_rate; too few samples: ttft_p95 3 of 20)"
        );
        l.objectives[0].id = serde_json::from_str("\"itl_p99\"").unwrap();
        l.objectives[0].samples = 99;
        assert_eq!(l.objectives[0].sample_shortfall(), Some((99, 100)));
        l.objectives[0].samples = 100;
        assert_eq!(l.objectives[0].sample_shortfall(), None);
        assert_eq!(l.objectives[1].needed_samples(), 1);
        l.objectives[0].id = serde_json::from_str("\"ttft_p95\"").unwrap();
        for o in &mut l.objectives {
            o.verdict = Verdict::Pass;
        }
        l.verdict = Verdict::Pass;
        assert_eq!(l.verdict_line(), "PASS");
    }

    /// The terminal's few words of why, from the reasons the judges write.
    #[test]
    fn short_reasons_say_why_in_a_few_words() {
        let mut l = level(2.0, Verdict::Inconclusive, &[("itl_p95", 0.1, 0.05)]);
        let o = &mut l.objectives[0];
        for (reason, want) in [
            (
                "0 of 497 above the threshold (client); 95 % interval over the 8 requests they came from; p95 needs at least 20 samples (requests)",
                "8 requests; p95 needs 20",
            ),
            (
                "prompts 40 % shorter than specified: the PASS may be the drift's doing (prompts realised 600 tokens against 1000 requested (60 %)); 3 of 100 above",
                "prompts 40 % shorter than specified",
            ),
            (
                "refused (client and server disagree on finished requests: client 3, server 4 (vllm:request_success_total)); the figure alone said PASS",
                "client and server disagree on finished requests",
            ),
            ("", ""),
        ] {
            o.reason = reason.into();
            o.verdict = Verdict::Inconclusive;
            assert_eq!(o.short_reason(), want);
        }
        assert_eq!(
            l.verdict_line(),
            "INCONCLUSIVE (inconclusive: itl_p95)",
            "an empty reason adds nothing"
        );
        l.objectives[0].reason = "p95 needs at least 20 samples; over the 8 requests".into();
        assert_eq!(
            l.verdict_line(),
            "INCONCLUSIVE (inconclusive: itl_p95 (8 requests; p95 needs 20))"
        );
    }

    #[test]
    fn headroom_at_capacity_tightest_first() {
        let p = PhaseResult {
            name: "c".into(),
            classes: vec![],
            mode: LoadMode::Concurrency,
            levels: vec![
                level(8.0, Verdict::Pass, &[("ttft_p95", 0.030, 0.3)]),
                level(
                    12.0,
                    Verdict::Pass,
                    &[("ttft_p95", 0.051, 0.3), ("itl_p95", 0.025, 0.05)],
                ),
                level(16.0, Verdict::Fail, &[("ttft_p95", 0.4, 0.3)]),
            ],
            capacity: Some(12.0),
            first_fail: Some(16.0),
            first_breach: serde_json::from_str("\"ttft_p95\"").unwrap(),
            capacity_band: None,
            search_note: String::new(),
        };
        let h = p.headroom();
        assert_eq!(h.len(), 2);
        // itl: 0.05 / 0.025 = 2.0; ttft: 0.3 / 0.051 = 5.88
        assert_eq!(h[0].objective, "itl_p95");
        assert!((h[0].ratio - 2.0).abs() < 1e-12);
        assert!((h[1].ratio - 5.882_352_941).abs() < 1e-6);
        assert_eq!(h[1].load, 12.0);
    }
}

/// `manifest.json`: what was run, so the run can be understood and repeated without the shell
/// history. Credentials never appear: the target is stored with any userinfo removed and the API
/// key only as `"set"` or absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `headroom` version (Cargo package version).
    pub tool_version: String,
    /// Command line with secrets removed.
    pub command: Vec<String>,
    /// Unix time the run started, seconds.
    pub started_unix_s: f64,
    /// Base URL of the target (credentials redacted), or `embedded` for the in-process twin.
    pub target: String,
    /// Whether an API key was used (never its value).
    pub api_key: bool,
    /// Model name sent in requests.
    pub model: String,
    /// Server's `/v1/models` response, verbatim JSON (null when unavailable).
    pub models: serde_json::Value,
    /// Server's `/version` response, verbatim JSON (null when unavailable).
    pub server_version: serde_json::Value,
    /// Engine configuration as exposed (`vllm:cache_config_info` labels, twin spec …).
    pub engine_config: serde_json::Value,
    /// The resolved workload (all defaults filled in).
    pub workload: serde_json::Value,
    /// The resolved SLO file.
    pub slo: serde_json::Value,
    /// Seed of every random choice.
    pub seed: u64,
    /// Logical CPUs on the load-generating host.
    pub host_cpus: usize,
    /// `/metrics` URL scraped, if any.
    pub metrics_url: Option<String>,
    /// dcgm-exporter URL scraped, if any.
    pub dcgm_url: Option<String>,
    /// How prompt lengths were fitted to the target's tokenizer before the first level (method,
    /// per-request overhead, one check request per class with its realised `usage`); absent in
    /// run directories written before calibration existed.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub prompt_calibration: serde_json::Value,
}

/// Removes userinfo (`user:pass@`) and query strings from a URL for storage and display.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let (hostpath, _query) = rest.split_once('?').unwrap_or((rest, ""));
    let (auth, path) = match hostpath.find('/') {
        Some(i) => hostpath.split_at(i),
        None => (hostpath, ""),
    };
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    match scheme {
        Some(s) => format!("{s}://{host}{path}"),
        None => format!("{host}{path}"),
    }
}

#[cfg(test)]
mod redact_tests {
    #[test]
    fn strips_credentials_and_query() {
        assert_eq!(
            super::redact_url("http://u:secret@127.0.0.1:8000/v1?key=abc"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            super::redact_url("http://127.0.0.1:8000"),
            "http://127.0.0.1:8000"
        );
        assert_eq!(super::redact_url("127.0.0.1:8000/x"), "127.0.0.1:8000/x");
    }
}
