//! `headroom compare BASELINE CANDIDATE`: is a change safe to promote?
//!
//! Two run directories of the same workload and SLO are compared three ways:
//!
//! 1. **What changed**: their manifests side by side. A *material* change is one that can move
//!    capacity (engine version, engine configuration, model, served models, GPU, Headroom's own
//!    version, the load host); more than one is flagged, since a canary should change one thing.
//!    A different workload or SLO makes the runs measure different things: refused unless the
//!    caller allows it.
//! 2. **Capacity per phase**, with the uncertainty each sweep recorded
//!    ([`CapacityBand`]: highest certain PASS, lowest certain FAIL). The candidate is *worse* only
//!    when the bands say so: it fails for certain at a load the baseline passes for certain (at
//!    or below it); *better* in the mirror case; otherwise no detectable change.
//! 3. **Latency at each level both runs measured**: each latency objective's percentile before
//!    and after, with a confidence interval on the difference from the stored HDR histograms by
//!    **order statistics**: for `n` samples, the ranks `j < k` with `P(j ≤ B < k) ≥ 1 − α` for
//!    `B ~ Binomial(n, p)` bracket the p-quantile whatever the distribution (the exact binomial
//!    interval for a quantile; Hahn & Meeker, *Statistical Intervals*, §5.2); a rank beyond the
//!    sample leaves that side unbounded. Each run's interval is taken at 1 − α/2, so the
//!    difference interval (after's low − before's high, after's high − before's low) holds at
//!    ≥ 1 − α, and α is Bonferroni-split over every comparison shown (or every gated one), so
//!    the family's false-alarm rate stays at 5 %. ITL
//!    gaps of one request are correlated; their ranks are computed for the number of requests
//!    they came from, which widens the interval as the correlation requires. Order statistics
//!    rather than a bootstrap: the histograms are what the run directory keeps (no per-request
//!    list), the interval is exact and deterministic, and it needs no resampling.
//!
//! The server's figures of each common level are set side by side, largest relative change
//! first, so a regression names the phase that moved (queue, prefill, decode, KV, preemptions).

use crate::run_dir::{ReadError, Run};
use headroom_core::objective::ObjectiveId;
use headroom_core::run::{CapacityBand, LevelResult, LoadMode, PhaseResult};
use headroom_core::slo::{Objective, SloFile};
use headroom_core::{LatencySignal, Verdict};
use headroom_load::recorder::{ClassRecording, LevelRecording};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Why a comparison could not be made; every message names the file or the flag.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A run directory's file is missing or unreadable.
    #[error("{path}: {message}")]
    Read {
        /// File.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The runs measured different workloads or SLOs.
    #[error(
        "the runs are not comparable: {0}; compare runs of the same workload and SLO, or pass --allow-different-workload to compare anyway"
    )]
    Different(String),
}

impl From<ReadError> for CompareError {
    fn from(e: ReadError) -> CompareError {
        CompareError::Read {
            path: e.path,
            message: e.message,
        }
    }
}

/// One field of the manifests that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ManifestChange {
    /// What (`server version`, `engine configuration`, `workload`).
    pub what: String,
    /// Baseline value (compact JSON).
    pub before: String,
    /// Candidate value.
    pub after: String,
    /// Whether it can move capacity by itself.
    pub material: bool,
}

/// The manifest fields compared: (label, JSON pointer, material). Workload and SLO are checked
/// separately: they decide whether the runs are comparable at all.
const MANIFEST_FIELDS: &[(&str, &str, bool)] = &[
    ("server version", "/server_version", true),
    ("engine", "/engine_config/engine", true),
    (
        "engine configuration (vllm:cache_config_info)",
        "/engine_config/cache_config",
        true,
    ),
    ("GPU (dcgm-exporter)", "/engine_config/gpus", true),
    ("engine twin preset", "/engine_config/embedded_twin", true),
    ("model", "/model", true),
    ("served models", "/models", true),
    ("headroom version", "/tool_version", true),
    ("load host CPUs", "/host_cpus", true),
    ("target", "/target", false),
    ("prompt sizing", "/prompt_calibration/method", false),
    ("seed", "/seed", false),
];

fn compact(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => "–".into(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 120 {
                format!("{}…", s.chars().take(117).collect::<String>())
            } else {
                s
            }
        }
    }
}

/// What of a manifest field is compared: `/v1/models` answers carry creation times that differ
/// on every restart, so only the served ids and their context lengths count.
fn normalised(ptr: &str, v: Option<&serde_json::Value>) -> Option<serde_json::Value> {
    let v = v?;
    if ptr == "/models" {
        let ids: Vec<serde_json::Value> = v
            .get("data")
            .and_then(|d| d.as_array())
            .map(|a| {
                a.iter()
                    .map(|m| serde_json::json!({"id": m.get("id"), "max_model_len": m.get("max_model_len")}))
                    .collect()
            })
            .unwrap_or_default();
        return Some(serde_json::Value::Array(ids));
    }
    Some(v.clone())
}

/// The differences between two manifests, material ones first.
pub fn manifest_changes(a: &serde_json::Value, b: &serde_json::Value) -> Vec<ManifestChange> {
    let mut out: Vec<ManifestChange> = MANIFEST_FIELDS
        .iter()
        .filter_map(|(what, ptr, material)| {
            let (x, y) = (
                normalised(ptr, a.pointer(ptr)),
                normalised(ptr, b.pointer(ptr)),
            );
            let (x, y) = (x.as_ref(), y.as_ref());
            (x != y).then(|| ManifestChange {
                what: (*what).to_string(),
                before: compact(x),
                after: compact(y),
                material: *material,
            })
        })
        .collect();
    out.sort_by_key(|c| !c.material);
    out
}

/// The workload or SLO differences that make two runs incomparable (the windows may differ:
/// they change precision, not what is measured).
fn incomparable(a: &Run, b: &Run) -> Vec<String> {
    let mut out = Vec::new();
    let strip = |m: &serde_json::Value| {
        let mut w = m.get("workload").cloned().unwrap_or_default();
        if let Some(o) = w.as_object_mut() {
            for k in ["warmup", "measure", "seed"] {
                o.remove(k);
            }
        }
        w
    };
    if strip(&a.manifest) != strip(&b.manifest) {
        out.push("the workloads differ (classes, lengths, load mode or arrivals)".into());
    }
    if a.manifest.get("slo") != b.manifest.get("slo") {
        out.push("the SLOs differ".into());
    }
    out
}

/// What the evidence says about a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Better beyond the noise.
    Better,
    /// Worse beyond the noise.
    Worse,
    /// Within the noise: no detectable change.
    NoDetectableChange,
    /// The runs cannot say (no capacity, too few samples, noise wider than the gate).
    Inconclusive,
}

impl Change {
    /// Lower-case words.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Better => "better",
            Change::Worse => "worse",
            Change::NoDetectableChange => "no detectable change",
            Change::Inconclusive => "inconclusive",
        }
    }
}

/// One phase's capacity, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityComparison {
    /// Phase (class name or `mix`).
    pub phase: String,
    /// Load mode of both runs.
    pub mode: LoadMode,
    /// Baseline capacity (highest PASS).
    pub before: Option<f64>,
    /// Candidate capacity.
    pub after: Option<f64>,
    /// Baseline band.
    pub before_band: CapacityBand,
    /// Candidate band.
    pub after_band: CapacityBand,
    /// The decision.
    pub change: Change,
    /// Why, in a sentence.
    pub why: String,
}

fn band_of(p: &PhaseResult) -> CapacityBand {
    p.capacity_band.clone().unwrap_or_else(|| p.capacity_band())
}

/// Capacity decision of one phase from the two bands (see the module docs); `max_drop` (a share,
/// e.g. 0.1) turns a point drop beyond it that the bands cannot prove into INCONCLUSIVE.
pub fn compare_capacity(
    a: &PhaseResult,
    b: &PhaseResult,
    max_drop: Option<f64>,
) -> CapacityComparison {
    let (ba, bb) = (band_of(a), band_of(b));
    let unit = a.mode.unit();
    let f = headroom_core::slo::fmt_num;
    let (change, why) = match (ba.low, bb.high, bb.low, ba.high) {
        // The candidate fails for certain at or below a load the baseline passes for certain.
        (Some(pass_a), Some(fail_b), _, _) if fail_b <= pass_a => (
            Change::Worse,
            format!(
                "the candidate fails for certain at {} {unit}, where the baseline passes for certain (up to {} {unit})",
                f(fail_b),
                f(pass_a)
            ),
        ),
        (_, _, Some(pass_b), Some(fail_a)) if fail_a <= pass_b => (
            Change::Better,
            format!(
                "the candidate passes for certain at {} {unit}, where the baseline fails for certain (from {} {unit})",
                f(pass_b),
                f(fail_a)
            ),
        ),
        _ => match (a.capacity, b.capacity) {
            (None, None) => (Change::Inconclusive, "neither run found a capacity".into()),
            (Some(_), None) | (None, Some(_)) => (
                Change::Inconclusive,
                "only one run found a capacity, and the bands do not prove a change".into(),
            ),
            (Some(x), Some(y)) => {
                let drop = 1.0 - y / x;
                match max_drop {
                    Some(d) if drop > d => (
                        Change::Inconclusive,
                        format!(
                            "the capacity moved {} → {} {unit} ({:+.0} %), beyond the allowed {:.0} % drop, but within the runs' uncertainty; a finer --resolution or a longer --measure would decide it",
                            f(x),
                            f(y),
                            -drop * 100.0,
                            d * 100.0
                        ),
                    ),
                    _ => (
                        Change::NoDetectableChange,
                        format!(
                            "{} → {} {unit}: within the runs' uncertainty (the bands overlap)",
                            f(x),
                            f(y)
                        ),
                    ),
                }
            }
        },
    };
    CapacityComparison {
        phase: a.name.clone(),
        mode: a.mode,
        before: a.capacity,
        after: b.capacity,
        before_band: ba,
        after_band: bb,
        change,
        why,
    }
}

/// A distribution-free interval for the `p`-quantile of `n` samples with two-sided confidence
/// `1 − alpha`, as quantile positions `(lo, hi)` in [0, 1]: the order statistics `X(j) ≤ ξp ≤
/// X(k)` with `B ~ Binomial(n, p)` the count of samples below the quantile and `P(j ≤ B < k) ≥
/// 1 − alpha`, from the exact binomial distribution (each tail at most `alpha / 2`).
///
/// A rank beyond the sample is no bound at all: the lower position is then 0 (nothing is known
/// below the smallest sample but that latency is ≥ 0) and the upper `None` (unbounded above), so
/// a handful of samples never yields a narrow interval.
pub fn quantile_rank_interval(n: u64, p: f64, alpha: f64) -> (f64, Option<f64>) {
    if n == 0 || !(0.0..1.0).contains(&p) {
        return (0.0, None);
    }
    let tail = alpha / 2.0;
    // log pmf by the recurrence pmf(k+1) = pmf(k)·(n−k)/(k+1)·p/(1−p), from pmf(0) = (1−p)^n;
    // the cumulative in log space (log-sum-exp) so that 0.05^10000 does not underflow.
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_pmf = n as f64 * lq;
    let mut log_cdf = f64::NEG_INFINITY;
    let add = |a: f64, b: f64| {
        if a == f64::NEG_INFINITY {
            b
        } else {
            let m = a.max(b);
            m + ((a - m).exp() + (b - m).exp()).ln()
        }
    };
    // j: the largest rank with P(B < j) ≤ tail; k: the smallest with P(B ≥ k) ≤ tail.
    let mut j = 0u64;
    let mut k = None;
    for b in 0..=n {
        // log_cdf before adding b is log P(B < b).
        if log_cdf.exp() <= tail {
            j = b;
        }
        log_cdf = add(log_cdf, log_pmf);
        if k.is_none() && 1.0 - log_cdf.exp() <= tail {
            // P(B > b) ≤ tail: the quantile lies below X(b + 1).
            k = Some(b + 1);
        }
        if b < n {
            log_pmf += ((n - b) as f64).ln() - ((b + 1) as f64).ln() + lp - lq;
        }
    }
    let nf = n as f64;
    let lo = if j < 1 { 0.0 } else { j as f64 / nf };
    (lo, k.filter(|k| *k <= n).map(|k| k as f64 / nf))
}

/// The engine's own figures for a client-side signal at a percentile, as the server view names
/// them (`server_ttft_p95_s`, or `server_itl_p95_upper_bound_s` for a first-bucket bound);
/// `None` where it has none.
fn engine_figure(signal: LatencySignal, pct: f64) -> Option<[String; 2]> {
    let p = headroom_core::slo::fmt_num(pct);
    let name = match signal {
        LatencySignal::Ttft => "ttft",
        LatencySignal::Itl => "itl",
        _ => return None,
    };
    // Interpolated, or only an upper bound when the percentile fell in the first bucket.
    Some([
        format!("server_{name}_p{p}_s"),
        format!("server_{name}_p{p}_upper_bound_s"),
    ])
}

/// Newcombe's hybrid score interval (1998, method 10) for `b/n − a/m` at two-sided confidence
/// `1 − alpha`, from the two Wilson intervals.
fn share_difference(a: u64, m: u64, b: u64, n: u64, alpha: f64) -> (f64, f64) {
    let z = z_for(1.0 - alpha);
    let (p1, p2) = (a as f64 / m as f64, b as f64 / n as f64);
    let (l1, u1) = headroom_core::stats::wilson_interval(a, m, z);
    let (l2, u2) = headroom_core::stats::wilson_interval(b, n, z);
    let d = p2 - p1;
    (
        d - ((p2 - l2).powi(2) + (u1 - p1).powi(2)).sqrt(),
        d + ((u2 - p2).powi(2) + (p1 - l1).powi(2)).sqrt(),
    )
}

/// Normal quantile of a two-sided interval of confidence `level` (0.95 → 1.96), by bisection on
/// the complementary error function.
fn z_for(level: f64) -> f64 {
    let tail = (1.0 - level) / 2.0;
    let (mut lo, mut hi) = (0.0f64, 10.0f64);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if upper_tail(mid) > tail {
            lo = mid
        } else {
            hi = mid
        }
    }
    (lo + hi) / 2.0
}

/// P(Z > x) for a standard normal (Abramowitz & Stegun 7.1.26, |error| < 1.5·10⁻⁷).
fn upper_tail(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x / std::f64::consts::SQRT_2);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    0.5 * poly * (-(x * x) / 2.0).exp()
}

/// One latency objective at one level, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyComparison {
    /// Objective id as the sweep wrote it (`ttft_p95`, `chat/ttft_p95` in a mix).
    pub id: ObjectiveId,
    /// Percentile (95 for p95).
    pub percentile: f64,
    /// The objective's threshold, seconds.
    pub threshold_s: f64,
    /// Baseline percentile, seconds.
    pub before_s: f64,
    /// Candidate percentile, seconds.
    pub after_s: f64,
    /// Confidence interval of `after − before`, seconds; a side the samples cannot bound is
    /// infinite (`null` in JSON).
    pub diff_ci_s: (f64, f64),
    /// The baseline's percentile interval (order statistics, each run's share of the
    /// confidence), seconds.
    pub before_ci_s: (f64, f64),
    /// The candidate's percentile interval, seconds (upper side `null` in JSON when unbounded).
    pub after_ci_s: (f64, f64),
    /// Confidence of that interval (0.95, or more when split over several gated comparisons).
    pub confidence: f64,
    /// Independent samples behind each side (requests; for ITL the requests its gaps came from).
    pub samples: (u64, u64),
    /// Verdicts the sweeps gave the objective at this level.
    pub verdicts: (Verdict, Verdict),
    /// The gate's allowed increase, seconds, when one was set for this objective.
    pub allowed_increase_s: Option<f64>,
    /// Confidence interval (same confidence) of the change in the share of samples above the
    /// threshold, `after − before`, from each sweep's count (Newcombe's hybrid score interval
    /// of two Wilson intervals; Newcombe 1998, method 10): what the SLO itself counts, and
    /// decisive with far fewer samples than a percentile's bounds.
    pub share_diff_ci: Option<(f64, f64)>,
    /// The engine's own percentile of the same signal (`server_ttft_p95_s`,
    /// `server_itl_p95_upper_bound_s`), after − before, seconds, where both runs have it. A
    /// client-side increase the engine does not show lies outside the engine (the load host, the
    /// network): not a regression of the server's change.
    pub engine_delta_s: Option<f64>,
    /// Why the change reads as it does, when it is not plain (an unbounded interval, a change
    /// outside the engine).
    pub note: Option<String>,
    /// The decision against the allowed increase (0 when none was set).
    pub change: Change,
    /// With the baseline swept with `--repeat`: the lowest and highest percentile its repeats
    /// measured at this level (seconds), the spread a rerun of the same configuration shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_floor_s: Option<(f64, f64)>,
}

impl LatencyComparison {
    /// Whether the difference exceeds the spread between the baseline's repeats (`None`
    /// without repeats).
    pub fn beyond_noise_floor(&self) -> Option<bool> {
        let (lo, hi) = self.noise_floor_s?;
        Some((self.after_s - self.before_s).abs() > hi - lo)
    }

    /// How the noise reads to a user: the repeats' spread and whether the difference exceeds
    /// it, or, without repeats, how much of the difference noise alone could explain (the
    /// interval's half-width).
    pub fn noise_words(&self) -> String {
        let words = match (self.noise_floor_s, self.beyond_noise_floor()) {
            (Some((lo, hi)), Some(beyond)) => format!(
                "baseline repeats {} … {} (noise floor {}): the difference {} it",
                fmt_s(lo),
                fmt_s(hi),
                fmt_s(hi - lo),
                if beyond { "exceeds" } else { "is within" }
            ),
            _ if !(self.diff_ci_s.1 - self.diff_ci_s.0).is_finite() => {
                "too few samples to bound the difference in this percentile".to_string()
            }
            _ => format!(
                "noise alone could explain ±{}",
                fmt_s((self.diff_ci_s.1 - self.diff_ci_s.0) / 2.0)
            ),
        };
        let share = self
            .share_diff_ci
            .map(|(lo, hi)| {
                format!(
                    "; share above the threshold {:+.1} … {:+.1} points",
                    lo * 100.0,
                    hi * 100.0
                )
            })
            .unwrap_or_default();
        let note = self
            .note
            .as_ref()
            .map(|n| format!("; {n}"))
            .unwrap_or_default();
        format!("{words}{share}{note}")
    }
}

/// The range of the baseline's percentile over its first measurement (`first_s`) and its
/// repeats; `None` without repeats that recorded the class.
fn noise_floor(
    first_s: f64,
    repeats: &[LevelRecording],
    class: &str,
    signal: LatencySignal,
    pct: f64,
) -> Option<(f64, f64)> {
    let values: Vec<f64> = repeats
        .iter()
        .filter_map(|r| r.classes.iter().find(|c| c.name == class))
        .filter_map(|c| percentile_interval(c, signal, pct, 0.05).map(|v| v.0))
        .collect();
    if values.is_empty() {
        return None;
    }
    let lo = values.iter().copied().fold(first_s, f64::min);
    let hi = values.iter().copied().fold(first_s, f64::max);
    Some((lo, hi))
}

/// One server figure at one level, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureComparison {
    /// Figure name (`queue_time_mean_s`, `kv_cache_usage_max_ratio`, …).
    pub name: String,
    /// Baseline.
    pub before: f64,
    /// Candidate.
    pub after: f64,
    /// `after / before − 1` (∞ from zero).
    pub relative: f64,
}

/// A level both runs measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelComparison {
    /// Phase.
    pub phase: String,
    /// Load.
    pub load: f64,
    /// Mode.
    pub mode: LoadMode,
    /// Latency objectives.
    pub latency: Vec<LatencyComparison>,
    /// Server figures, largest relative change first.
    pub server: Vec<FigureComparison>,
    /// The phase figure that moved most (what a regression points at), if any moved.
    pub moved_most: Option<String>,
}

/// An allowed latency increase: relative (`10%`) or absolute (`5ms`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Allowance {
    /// A share of the baseline's percentile.
    Relative(f64),
    /// Seconds.
    Absolute(f64),
}

impl Allowance {
    fn seconds(self, before_s: f64) -> f64 {
        match self {
            Allowance::Relative(r) => r * before_s,
            Allowance::Absolute(s) => s,
        }
    }
}

/// What the gate allows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gate {
    /// Largest capacity drop promoted (share, e.g. 0.1).
    pub max_capacity_drop: Option<f64>,
    /// Allowed increase per objective id without the class (`ttft_p95`), applied in every phase.
    pub max_latency_increase: BTreeMap<String, Allowance>,
    /// Compare runs of different workloads or SLOs anyway.
    pub allow_different_workload: bool,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Baseline run directory.
    pub baseline: String,
    /// Candidate run directory.
    pub candidate: String,
    /// Manifest differences, material first.
    pub changes: Vec<ManifestChange>,
    /// Workload/SLO differences (empty when comparable; set only with the allowance).
    pub incomparable: Vec<String>,
    /// Capacity per phase present in both.
    pub capacity: Vec<CapacityComparison>,
    /// Levels present in both.
    pub levels: Vec<LevelComparison>,
    /// Phases only one run has.
    pub unmatched_phases: Vec<String>,
    /// The overall decision.
    pub decision: Decision,
    /// Warnings (several material changes, missing histograms, …).
    pub warnings: Vec<String>,
    /// The error budget's state, with `--budget-from` (see [`super::compare_budget`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::compare_budget::BudgetGate>,
}

/// What to do with the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Nothing got worse beyond the noise and the gate: promote (exit 0).
    Promote,
    /// Something got worse beyond the noise or the gate (exit 1).
    Regression,
    /// The evidence cannot decide (exit 2).
    Inconclusive,
    /// The error budget of an objective is past `freeze_at` and the candidate is not strictly
    /// better on it (exit 1: the freeze blocks the promotion).
    Held,
}

impl Decision {
    /// Exit status for CI: 0 promote, 1 regression or held, 2 inconclusive.
    pub fn exit_code(self) -> i32 {
        match self {
            Decision::Promote => 0,
            Decision::Regression | Decision::Held => 1,
            Decision::Inconclusive => 2,
        }
    }

    /// Upper-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Promote => "PROMOTE",
            Decision::Regression => "REGRESSION",
            Decision::Inconclusive => "INCONCLUSIVE",
            Decision::Held => "HELD",
        }
    }
}

/// The latency objectives of a phase as (id as the sweep wrote it, class, signal, percentile,
/// threshold).
pub(crate) fn latency_objectives(
    slo: &SloFile,
    phase: &PhaseResult,
) -> Vec<(ObjectiveId, String, LatencySignal, f64, f64)> {
    let mix = phase.classes.len() > 1;
    let mut out = Vec::new();
    for (class, _) in &phase.classes {
        for o in slo.spec_for(class).objectives {
            if let Objective::Latency {
                signal,
                percentile,
                threshold_s,
            } = o
            {
                // Queue time comes from the engine or per-request metrics, not always recorded.
                let id = if mix { o.id().in_class(class) } else { o.id() };
                out.push((id, class.clone(), signal, percentile, threshold_s));
            }
        }
    }
    out
}

/// The percentile and its quantile interval from one class recording, with the independent
/// sample count (requests for ITL). `None` when there are no observations.
fn percentile_interval(
    c: &ClassRecording,
    signal: LatencySignal,
    pct: f64,
    alpha: f64,
) -> Option<(f64, (f64, f64), u64)> {
    let h = c.histogram(signal)?;
    if h.is_empty() {
        return None;
    }
    let p = pct / 100.0;
    let n_units = match signal {
        LatencySignal::Itl => c.requests().min(h.len()).max(1),
        _ => h.len(),
    };
    let (qlo, qhi) = quantile_rank_interval(n_units, p, alpha);
    let v = |q: f64| h.value_at_quantile(q.clamp(0.0, 1.0)) as f64 / 1e9;
    let lo = if qlo > 0.0 { v(qlo) } else { 0.0 };
    let hi = qhi.map_or(f64::INFINITY, v);
    Some((v(p), (lo, hi), n_units))
}

/// Figures whose change names a phase of the engine (what moved).
const PHASE_FIGURES: &[&str] = &[
    "queue_time_mean_s",
    "prefill_time_mean_s",
    "decode_time_mean_s",
    "kv_cache_usage_max_ratio",
    "preemptions_per_request",
    "tokens_per_iteration",
    "prefix_cache_hit_ratio",
    "waiting_mean",
    "running_mean",
];

fn figures(a: &LevelResult, b: &LevelResult) -> (Vec<FigureComparison>, Option<String>) {
    let (Some(sa), Some(sb)) = (&a.server, &b.server) else {
        return (Vec::new(), None);
    };
    // Rates, means, shares and percentiles compare across windows of different lengths; raw
    // counts (tokens, requests) only measure the window.
    // The workload's own shape (token lengths, finish counts) is the same traffic in both runs,
    // not the server's behaviour: left out.
    let workload = |k: &str| {
        [
            "tokens_mean",
            "max_tokens",
            "generation_to_prompt",
            "finished",
            "http_",
            "requests",
        ]
        .iter()
        .any(|w| k.contains(w))
    };
    let comparable = |k: &str| {
        !workload(k)
            && (k.ends_with("_s")
                || k.ends_with("_ratio")
                || k.contains("mean")
                || k.contains("per_")
                || k.contains("share")
                || PHASE_FIGURES.contains(&k))
    };
    let mut out: Vec<FigureComparison> = sa
        .figures
        .iter()
        .filter(|(k, _)| comparable(k))
        .filter_map(|(k, x)| {
            let y = *sb.figures.get(k)?;
            let relative = if *x == 0.0 {
                if y == 0.0 { 0.0 } else { f64::INFINITY }
            } else {
                y / x - 1.0
            };
            Some(FigureComparison {
                name: k.clone(),
                before: *x,
                after: y,
                relative,
            })
        })
        .collect();
    out.sort_by(|p, q| q.relative.abs().total_cmp(&p.relative.abs()));
    // A phase "moved" when it changed by more than a tenth and by a visible amount.
    let moved = out
        .iter()
        .filter(|f| PHASE_FIGURES.contains(&f.name.as_str()))
        .find(|f| f.relative.abs() > 0.1 && (f.after - f.before).abs() > 1e-6)
        .map(|f| f.name.clone());
    (out, moved)
}

/// Compares two run directories under `gate`.
///
/// # Errors
/// [`CompareError::Different`] when the workloads or SLOs differ and the gate does not allow it.
pub fn compare(a: &Run, b: &Run, gate: &Gate) -> Result<Comparison, CompareError> {
    let incomparable = incomparable(a, b);
    if !incomparable.is_empty() && !gate.allow_different_workload {
        return Err(CompareError::Different(incomparable.join("; ")));
    }
    let changes = manifest_changes(&a.manifest, &b.manifest);
    let mut warnings = Vec::new();
    let material: Vec<&str> = changes
        .iter()
        .filter(|c| c.material)
        .map(|c| c.what.as_str())
        .collect();
    if material.len() > 1 {
        warnings.push(format!(
            "{} material changes at once ({}): one change per canary, or a regression cannot be attributed",
            material.len(),
            material.join(", ")
        ));
    }
    let mut capacity = Vec::new();
    let mut common: Vec<(&PhaseResult, &PhaseResult)> = Vec::new();
    let mut unmatched = Vec::new();
    for pa in &a.results.phases {
        match b.results.phases.iter().find(|pb| pb.name == pa.name) {
            Some(pb) => {
                capacity.push(compare_capacity(pa, pb, gate.max_capacity_drop));
                common.push((pa, pb));
            }
            None => unmatched.push(format!("{} (baseline only)", pa.name)),
        }
    }
    for pb in &b.results.phases {
        if !a.results.phases.iter().any(|pa| pa.name == pb.name) {
            unmatched.push(format!("{} (candidate only)", pb.name));
        }
    }
    // Levels both ran, with the latency comparisons; the confidence of each is split over the
    // gated ones (Bonferroni), so the gate's family-wise false-alarm rate is 5 %.
    struct Pending<'r> {
        phase: &'r PhaseResult,
        la: &'r LevelResult,
        lb: &'r LevelResult,
    }
    let mut pending = Vec::new();
    for (pa, pb) in &common {
        for la in &pa.levels {
            let Some(lb) = pb.levels.iter().find(|l| (l.load - la.load).abs() < 1e-9) else {
                continue;
            };
            pending.push(Pending { phase: pa, la, lb });
        }
    }
    // The gate names objectives as `--max-latency-increase` wrote them, for every class.
    let gated_ids = |id: &ObjectiveId| gate.max_latency_increase.get(&id.kind.to_string()).copied();
    let n_gated: usize = pending
        .iter()
        .filter(|p| p.la.verdict == Verdict::Pass)
        .map(|p| {
            latency_objectives(&a.slo, p.phase)
                .iter()
                .filter(|o| gated_ids(&o.0).is_some())
                .count()
        })
        .sum();
    // Without a gate every comparison shown is labelled, so the split is over all of them: two
    // runs of one configuration then show no "worse" anywhere in 95 % of comparisons.
    let n_tests = if gate.max_latency_increase.is_empty() {
        pending
            .iter()
            .map(|p| latency_objectives(&a.slo, p.phase).len())
            .sum()
    } else {
        n_gated
    };
    let family = 0.05;
    let per_test = family / n_tests.max(1) as f64;
    // Each side at 1 − per_test/2: the difference interval then holds at ≥ 1 − per_test.
    let alpha = per_test / 2.0;
    let mut levels = Vec::new();
    let mut missing = Vec::new();
    for p in &pending {
        let (ra, rb) = (a.recording(p.la), b.recording(p.lb));
        if ra.is_none() || rb.is_none() {
            missing.push(format!("{} at {}", p.phase.name, p.la.load));
        }
        let mut latency = Vec::new();
        // The baseline's repeats (`sweep --repeat`), whose spread is the noise floor.
        let repeats: Vec<LevelRecording> =
            p.la.repeats.iter().filter_map(|r| a.recording(r)).collect();
        if let (Some(ra), Some(rb)) = (&ra, &rb) {
            for (id, class, signal, pct, thr) in latency_objectives(&a.slo, p.phase) {
                let ca = ra.classes.iter().find(|c| c.name == class);
                let cb = rb.classes.iter().find(|c| c.name == class);
                let (Some(ca), Some(cb)) = (ca, cb) else {
                    continue;
                };
                let (Some((va, (la, ha), na)), Some((vb, (lb, hb), nb))) = (
                    percentile_interval(ca, signal, pct, alpha),
                    percentile_interval(cb, signal, pct, alpha),
                ) else {
                    continue;
                };
                let verdict = |l: &LevelResult| {
                    l.objectives
                        .iter()
                        .find(|o| o.id == id)
                        .map_or(Verdict::Inconclusive, |o| o.verdict)
                };
                let ci = (lb - ha, hb - la);
                let allowed = gated_ids(&id).filter(|_| p.la.verdict == Verdict::Pass);
                let allowed_s = allowed.map(|x| x.seconds(va));
                let share = |l: &LevelResult| {
                    l.objectives
                        .iter()
                        .find(|o| o.id == id)
                        .and_then(|o| o.share)
                };
                let share_diff_ci = match (share(p.la), share(p.lb)) {
                    (Some(x), Some(y)) if x.n > 0 && y.n > 0 => {
                        Some(share_difference(x.bad, x.n, y.bad, y.n, per_test))
                    }
                    _ => None,
                };
                let engine_delta_s = engine_figure(signal, pct).and_then(|names| {
                    let get = |l: &LevelResult| {
                        let f = &l.server.as_ref()?.figures;
                        names.iter().find_map(|n| f.get(n).copied())
                    };
                    Some(get(p.lb)? - get(p.la)?)
                });
                let mut note = None;
                let mut change = match allowed_s {
                    Some(d) if ci.0 > d => Change::Worse,
                    Some(d) if ci.1 <= d => Change::NoDetectableChange,
                    Some(_) => Change::Inconclusive,
                    None if ci.0 > 0.0 || share_diff_ci.is_some_and(|s| s.0 > 0.0) => Change::Worse,
                    None if ci.1 < 0.0 || share_diff_ci.is_some_and(|s| s.1 < 0.0) => {
                        Change::Better
                    }
                    // With the share above the threshold compared, its interval decides;
                    // without one, an unbounded percentile interval says nothing.
                    None if share_diff_ci.is_none() && (!ci.0.is_finite() || !ci.1.is_finite()) => {
                        note = Some(format!(
                            "{} and {} samples cannot bound a p{} at this confidence",
                            na,
                            nb,
                            headroom_core::slo::fmt_num(pct)
                        ));
                        Change::Inconclusive
                    }
                    None => Change::NoDetectableChange,
                };
                // With repeats, the baseline's own spread between runs is the noise floor: a
                // gated increase within it is not shown to be the change's.
                let noise_floor_s = noise_floor(va, &repeats, &class, signal, pct);
                if change == Change::Worse
                    && allowed_s.is_some()
                    && let Some((lo, hi)) = noise_floor_s
                    && vb - va <= hi - lo
                {
                    note = Some(format!(
                        "the increase {} is within the baseline's spread between its repeats ({})",
                        fmt_signed_s(vb - va),
                        fmt_s(hi - lo)
                    ));
                    change = Change::Inconclusive;
                }
                // A client-side increase the engine's own histogram does not show is the
                // load host's or the network's, not the server change's: no regression.
                if change == Change::Worse
                    && let Some(e) = engine_delta_s
                {
                    let floor = allowed_s.unwrap_or(0.0).max(0.0);
                    if e <= floor && ci.0.is_finite() && e < ci.0 / 2.0 {
                        note = Some(format!(
                            "the client saw {} … {}, the engine's own p{} moved {}: the change lies outside the engine (load host, network)",
                            fmt_signed_s(ci.0),
                            fmt_signed_s(ci.1),
                            headroom_core::slo::fmt_num(pct),
                            fmt_signed_s(e)
                        ));
                        change = Change::Inconclusive;
                    }
                }
                let verdicts = (verdict(p.la), verdict(p.lb));
                latency.push(LatencyComparison {
                    id,
                    percentile: pct,
                    threshold_s: thr,
                    before_s: va,
                    after_s: vb,
                    diff_ci_s: ci,
                    before_ci_s: (la, ha),
                    after_ci_s: (lb, hb),
                    confidence: 1.0 - per_test,
                    samples: (na, nb),
                    verdicts,
                    allowed_increase_s: allowed_s,
                    share_diff_ci,
                    engine_delta_s,
                    note,
                    change,
                    noise_floor_s,
                });
            }
        }
        let (server, moved) = figures(p.la, p.lb);
        // Which phase moved is the explanation of a change; where nothing changed beyond the
        // noise, the largest figure change is noise too and is not named.
        let changed = latency
            .iter()
            .any(|x| x.change != Change::NoDetectableChange)
            || p.la.verdict != p.lb.verdict;
        let moved_most = moved.filter(|_| changed);
        levels.push(LevelComparison {
            phase: p.phase.name.clone(),
            load: p.la.load,
            mode: p.la.mode,
            latency,
            server,
            moved_most,
        });
    }
    if !missing.is_empty() {
        warnings.push(format!(
            "no client histograms for {}: their latencies are not compared",
            missing.join(", ")
        ));
    }
    if levels.is_empty() {
        warnings.push(
            "no level was measured by both runs: only capacities are compared (give both sweeps the same --levels to compare latencies)".into(),
        );
    }
    let gated = |l: &&LatencyComparison| l.allowed_increase_s.is_some();
    let any_worse = capacity.iter().any(|c| c.change == Change::Worse)
        || levels
            .iter()
            .flat_map(|l| l.latency.iter())
            .filter(gated)
            .any(|l| l.change == Change::Worse);
    let any_unsure = capacity.iter().any(|c| c.change == Change::Inconclusive)
        || levels
            .iter()
            .flat_map(|l| l.latency.iter())
            .filter(gated)
            .any(|l| l.change == Change::Inconclusive)
        || (!gate.max_latency_increase.is_empty() && n_gated == 0);
    if !gate.max_latency_increase.is_empty() && n_gated == 0 {
        warnings.push(
            "--max-latency-increase names objectives no common passing level measured: the gate has nothing to judge".into(),
        );
    }
    let any_repeats = a
        .results
        .phases
        .iter()
        .any(|p| p.levels.iter().any(|l| !l.repeats.is_empty()));
    if !gate.max_latency_increase.is_empty() && !any_repeats {
        warnings.push(
            "the intervals cover each run's sampling noise, not how much two runs of one configuration differ on this host (a busy or shared host moves both the client's and the engine's figures between runs); sweep the baseline with --repeat 2 or more to measure that noise floor before gating on small increases".into(),
        );
    }
    // A phase whose candidate measured no level has a capacity only from its stored fields.
    let empty: Vec<&str> = common
        .iter()
        .filter(|(pa, pb)| pb.levels.is_empty() || pa.levels.is_empty())
        .map(|(pa, _)| pa.name.as_str())
        .collect();
    if !empty.is_empty() {
        warnings.push(format!(
            "no measured level in one of the runs for {}: its capacity is not evidence",
            empty.join(", ")
        ));
    }
    let missing_phases =
        unmatched.iter().any(|u| u.ends_with("(baseline only)")) || !empty.is_empty();
    if missing_phases {
        warnings.push(
            "the candidate did not measure every phase the baseline did: what it left out cannot be promoted".into(),
        );
    }
    let decision = if any_worse {
        Decision::Regression
    } else if any_unsure || capacity.is_empty() || missing_phases {
        Decision::Inconclusive
    } else {
        Decision::Promote
    };
    Ok(Comparison {
        baseline: a.dir.root().display().to_string(),
        candidate: b.dir.root().display().to_string(),
        changes,
        incomparable,
        capacity,
        levels,
        unmatched_phases: unmatched,
        decision,
        warnings,
        budget: None,
    })
}

/// Parses `--max-latency-increase ttft_p95=10%,itl_p95=5ms`.
///
/// # Errors
/// A message naming the entry that is not `ID=N%` or `ID=DURATION`.
pub fn parse_latency_allowances(text: &str) -> Result<BTreeMap<String, Allowance>, String> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((id, v)) = part.split_once('=') else {
            return Err(format!(
                "`{part}`: expected OBJECTIVE=LIMIT, e.g. ttft_p95=10% or itl_p95=5ms"
            ));
        };
        let v = v.trim();
        let a = if let Some(p) = v.strip_suffix('%') {
            p.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(|x| Allowance::Relative(x / 100.0))
        } else {
            parse_duration_s(v).map(Allowance::Absolute)
        };
        match a {
            Some(a) => {
                out.insert(id.trim().to_string(), a);
            }
            None => {
                return Err(format!(
                    "`{part}`: the limit `{v}` is neither a percentage (10%) nor a duration (5ms, 0.2s)"
                ));
            }
        }
    }
    Ok(out)
}

/// `5ms`, `0.2s`, `200us` → seconds.
fn parse_duration_s(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(x) = v.strip_suffix("ms") {
        (x, 1e-3)
    } else if let Some(x) = v.strip_suffix("us") {
        (x, 1e-6)
    } else if let Some(x) = v.strip_suffix('s') {
        (x, 1.0)
    } else {
        return None;
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| x * scale)
}

pub(crate) fn fmt_s(s: f64) -> String {
    let a = s.abs();
    if a.is_infinite() {
        "∞".into()
    } else if a >= 1.0 {
        format!("{s:.2} s")
    } else if a >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

pub(crate) fn fmt_signed_s(s: f64) -> String {
    if s >= 0.0 {
        format!("+{}", fmt_s(s))
    } else {
        format!("−{}", fmt_s(-s))
    }
}

/// A confidence as a percentage with the decimals that keep it below 100 (99.6, not 100).
fn fmt_confidence(c: f64) -> String {
    (0..=3)
        .map(|d| format!("{:.d$}", c * 100.0))
        .find(|t| t.parse::<f64>().is_ok_and(|v| v < 100.0))
        .unwrap_or_else(|| format!("{:.4}", c * 100.0))
}

pub(crate) fn fmt_band(b: &CapacityBand) -> String {
    let f = headroom_core::slo::fmt_num;
    match (b.low, b.high) {
        (Some(l), Some(h)) => format!("certain {}, fails {}", f(l), f(h)),
        (Some(l), None) => format!("certain {}", f(l)),
        (None, Some(h)) => format!("fails {}", f(h)),
        (None, None) => "no certain verdict".into(),
    }
}

/// The lines that explain the decision: each burning error budget, each capacity and each gated
/// latency comparison that is not "no detectable change" (empty when nothing moved beyond the
/// runs' uncertainty and no budget burns).
pub fn headline(c: &Comparison) -> Vec<String> {
    let f = headroom_core::slo::fmt_num;
    let mut out = super::compare_budget::budget_lines(c);
    out.extend(
        c.capacity
            .iter()
            .filter(|x| x.change != Change::NoDetectableChange)
            .map(|x| format!("{}: capacity {}: {}", x.phase, x.change.as_str(), x.why))
            .chain(
                c.levels
                    .iter()
                    .flat_map(|l| l.latency.iter().map(move |x| (l, x)))
                    .filter(|(_, x)| {
                        x.allowed_increase_s.is_some() && x.change != Change::NoDetectableChange
                    })
                    .map(|(l, x)| {
                        format!(
                            "{} at {} {}: {} {} (difference {} … {}, allowed {})",
                            l.phase,
                            f(l.load),
                            l.mode.unit(),
                            x.id,
                            x.change.as_str(),
                            fmt_signed_s(x.diff_ci_s.0),
                            fmt_signed_s(x.diff_ci_s.1),
                            fmt_signed_s(x.allowed_increase_s.unwrap_or(0.0))
                        )
                    }),
            ),
    );
    // Ungated changes do not decide, but a headline that hid them would read as "nothing
    // moved" beside a body that says worse.
    let ungated: Vec<String> = c
        .levels
        .iter()
        .flat_map(|l| l.latency.iter().map(move |x| (l, x)))
        .filter(|(_, x)| {
            x.allowed_increase_s.is_none() && matches!(x.change, Change::Worse | Change::Better)
        })
        .map(|(l, x)| format!("{} {} at {}", x.id, x.change.as_str(), f(l.load)))
        .collect();
    if !ungated.is_empty() {
        out.push(format!(
            "not gated (no --max-latency-increase for them), so not deciding: {}",
            ungated.join(", ")
        ));
    }
    out
}

/// Plain-text report (also valid Markdown, with `md`): decision first, then what changed,
/// capacity, and each common level.
pub fn render_text(c: &Comparison, markdown: bool) -> String {
    let f = headroom_core::slo::fmt_num;
    let mut o = String::new();
    let h = |o: &mut String, t: &str| {
        if markdown {
            o.push_str(&format!("\n## {t}\n\n"));
        } else {
            o.push_str(&format!("\n{t}\n"));
        }
    };
    o.push_str(&format!(
        "{}{}: {} against {}\n",
        if markdown { "# " } else { "" },
        c.decision.as_str(),
        c.candidate,
        c.baseline
    ));
    let first = headline(c);
    if first.is_empty() {
        o.push_str("  nothing moved beyond the runs' uncertainty\n");
    }
    for l in first {
        o.push_str(&format!("  {l}\n"));
    }
    h(&mut o, "What changed");
    if c.changes.is_empty() {
        o.push_str("  nothing the manifests record differs (engine and its version, model, exposed configuration, GPU, host)\n");
    }
    for ch in &c.changes {
        o.push_str(&format!(
            "  {} {}: {} → {}\n",
            if ch.material { "material" } else { "        " },
            ch.what,
            ch.before,
            ch.after
        ));
    }
    for i in &c.incomparable {
        o.push_str(&format!("  (allowed) {i}\n"));
    }
    h(&mut o, "Capacity");
    for x in &c.capacity {
        let unit = x.mode.unit();
        let cap =
            |v: Option<f64>| v.map_or("none passed".to_string(), |c| format!("{} {unit}", f(c)));
        o.push_str(&format!(
            "  {}: {} → {} ({} → {}): {}\n",
            x.phase,
            cap(x.before),
            cap(x.after),
            fmt_band(&x.before_band),
            fmt_band(&x.after_band),
            x.change.as_str()
        ));
    }
    for u in &c.unmatched_phases {
        o.push_str(&format!("  {u}: not compared\n"));
    }
    for l in &c.levels {
        h(
            &mut o,
            &format!("{} at {} {}", l.phase, f(l.load), l.mode.unit()),
        );
        for x in &l.latency {
            o.push_str(&format!(
                "  {:<24} {:>10} → {:<10} difference {} … {} ({} % CI, {} / {} samples){}: {}\n",
                x.id,
                fmt_s(x.before_s),
                fmt_s(x.after_s),
                fmt_signed_s(x.diff_ci_s.0),
                fmt_signed_s(x.diff_ci_s.1),
                fmt_confidence(x.confidence),
                x.samples.0,
                x.samples.1,
                x.allowed_increase_s
                    .map(|d| format!(", allowed {}", fmt_signed_s(d)))
                    .unwrap_or_default(),
                x.change.as_str()
            ));
            o.push_str(&format!("  {:<24} {}\n", "", x.noise_words()));
        }
        if let Some(m) = &l.moved_most {
            o.push_str(&format!("  the phase that moved most: {m}\n"));
        }
        for s in l.server.iter().take(6) {
            o.push_str(&format!(
                "  server {:<32} {} → {} ({})\n",
                s.name,
                f(s.before),
                f(s.after),
                if !s.relative.is_finite() || s.before.abs() < 1e-3 * s.after.abs() {
                    "from ≈ 0".into()
                } else {
                    format!("{:+.0} %", s.relative * 100.0)
                }
            ));
        }
    }
    if let Some(g) = &c.budget {
        h(&mut o, &format!("Error budget ({})", g.source));
        for b in &g.objectives {
            o.push_str(&format!(
                "  {} {}: {}{}\n",
                b.class,
                b.objective,
                b.state,
                b.consumed
                    .map(|x| format!(", {:.0} % consumed", x * 100.0))
                    .unwrap_or_default()
            ));
        }
    }
    if !c.warnings.is_empty() {
        h(&mut o, "Warnings");
        for w in &c.warnings {
            o.push_str(&format!("  - {w}\n"));
        }
    }
    // Names come from the users' files: no terminal control sequence or bidirectional
    // override reaches the terminal through them.
    let o: String = o
        .chars()
        .map(|c| {
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if (c.is_control() && c != '\n') || bidi {
                '?'
            } else {
                c
            }
        })
        .collect();
    if !markdown {
        return o;
    }
    // Markdown: indented lines become list items (a nested one for the continuation lines), so
    // a rendered page keeps one line per figure.
    o.lines()
        .map(|l| {
            let trimmed = l.trim_start();
            match l.len() - trimmed.len() {
                0 => l.to_string(),
                2 if trimmed.starts_with("- ") => trimmed.to_string(),
                2 => format!("- {trimmed}"),
                _ => format!("  - {trimmed}"),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_ranks_by_hand() {
        // n = 100, p = 0.95, 95 %: P(B ≥ 100) = 0.95^100 = 0.0059 ≤ 0.025 < P(B ≥ 99) = 0.037 →
        // upper X(100); P(B < 90) = 0.0115 ≤ 0.025 < P(B < 91) = 0.0282 → lower X(90).
        assert_eq!(quantile_rank_interval(100, 0.95, 0.05), (0.90, Some(1.0)));
        // n = 20, p = 0.95: P(B ≤ 19) = 1 − 0.95^20 = 0.642 < 0.975: no upper bound.
        assert_eq!(quantile_rank_interval(20, 0.95, 0.05).1, None);
        // The median of 10,000: 5000 ∓ 1.96·50 = 5000 ∓ 98 by the normal approximation.
        let (lo, hi) = quantile_rank_interval(10_000, 0.5, 0.05);
        let (lo, hi) = (lo * 10_000.0, hi.unwrap() * 10_000.0);
        assert!((4900.0..=4904.0).contains(&lo), "{lo}");
        assert!((5097.0..=5101.0).contains(&hi), "{hi}");
        // One sample bounds nothing.
        assert_eq!(quantile_rank_interval(1, 0.95, 0.05), (0.0, None));
    }

    /// The engine's exposed configuration and the GPU are material; a restart's new creation
    /// time in `/v1/models` is not a change at all.
    #[test]
    fn manifest_changes_name_the_material_ones() {
        let m = |blocks: &str, gpu: &str, created: u64| {
            serde_json::json!({
                "tool_version": "0.1.0", "server_version": {"version": "0.32.0"}, "model": "m",
                "models": {"data": [{"id": "m", "created": created, "max_model_len": 4096}]},
                "engine_config": {"engine": "vllm", "cache_config": {"num_gpu_blocks": blocks},
                    "gpus": [{"gpu": "0", "model": gpu}], "embedded_twin": null},
                "host_cpus": 2, "seed": 1, "target": "http://h:8000"
            })
        };
        let a = m("24551", "NVIDIA A10G", 1);
        assert!(manifest_changes(&a, &m("24551", "NVIDIA A10G", 2)).is_empty());
        let c = manifest_changes(&a, &m("12000", "NVIDIA L4", 2));
        let what: Vec<(&str, bool)> = c.iter().map(|c| (c.what.as_str(), c.material)).collect();
        assert_eq!(
            what,
            [
                ("engine configuration (vllm:cache_config_info)", true),
                ("GPU (dcgm-exporter)", true)
            ]
        );
    }

    /// By hand (Newcombe 1998, table II, example a: 56/70 − 48/80 = 0.2, 95 % interval
    /// 0.0524 … 0.3339): the hybrid score interval.
    #[test]
    fn share_difference_by_hand() {
        let (lo, hi) = share_difference(48, 80, 56, 70, 0.05);
        assert!((lo - 0.0524).abs() < 5e-4, "{lo}");
        assert!((hi - 0.3339).abs() < 5e-4, "{hi}");
        assert!((z_for(0.95) - 1.959_96).abs() < 1e-3);
    }

    /// A run directory's files are read only as regular files of bounded size: a FIFO (which
    /// blocked for ever), a link (to /dev/zero: read until memory ran out; to a secret file:
    /// quoted in the parse error) is refused, naming the file, at once.
    #[test]
    fn only_regular_files_are_read() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "root:x:0:0:SECRET\n").unwrap();
        let run = d.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&secret, run.join("results.json")).unwrap();
        let e = Run::open(&run).unwrap_err().to_string();
        assert!(
            e.contains("results.json") && e.contains("symbolic link"),
            "{e}"
        );
        assert!(!e.contains("SECRET"), "{e}");
        std::fs::remove_file(run.join("results.json")).unwrap();
        let st = std::process::Command::new("mkfifo")
            .arg(run.join("results.json"))
            .status()
            .unwrap();
        assert!(st.success());
        let t0 = std::time::Instant::now();
        let e = Run::open(&run).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn allowances_parse_and_refuse() {
        let a = parse_latency_allowances("ttft_p95=10%, itl_p95=5ms,e2e_p99=0.5s").unwrap();
        assert_eq!(a["ttft_p95"], Allowance::Relative(0.1));
        assert_eq!(a["itl_p95"], Allowance::Absolute(0.005));
        assert_eq!(a["e2e_p99"], Allowance::Absolute(0.5));
        for bad in ["ttft_p95", "ttft_p95=fast", "ttft_p95=-1%", "x=5m"] {
            assert!(parse_latency_allowances(bad).is_err(), "{bad}");
        }
    }

    fn level(load: f64, verdict: Verdict, certain: bool) -> LevelResult {
        let mut l: LevelResult = serde_json::from_value(serde_json::json!({
            "load": load, "mode": "concurrency", "started_unix_s": 0.0, "window_s": 1.0,
            "window_note": "", "outcomes": {}, "latency": {}, "request_rate_per_s": 0.0,
            "output_tokens_per_s": 0.0, "tokens": {"prompt_requested": 0, "prompt_realised": 0,
            "output_cap_requested": 0, "output_realised": 0, "usage_missing": 0},
            "objectives": [], "verdict": verdict,
            "client": serde_json::to_value(headroom_core::run::ClientHealth::default()).unwrap(),
            "server": null, "histograms": "", "warnings": []
        }))
        .unwrap();
        let bad = match (verdict, certain) {
            (Verdict::Fail, true) => 40,
            (Verdict::Fail, false) => 6,
            (_, true) => 0,
            (_, false) => 4,
        };
        let o = headroom_core::run::ObjectiveResult::new(
            &Objective::Latency {
                signal: LatencySignal::Ttft,
                percentile: 95.0,
                threshold_s: 0.3,
            },
            0.3,
            Some(0.2),
            verdict,
            100,
            String::new(),
        )
        .with_share(bad, 100, 0.05);
        l.objectives.push(o);
        l
    }

    fn phase(levels: Vec<LevelResult>) -> PhaseResult {
        let cap = levels
            .iter()
            .filter(|l| l.verdict == Verdict::Pass)
            .map(|l| l.load)
            .reduce(f64::max);
        PhaseResult {
            name: "chat".into(),
            classes: vec![("chat".into(), 1.0)],
            mode: LoadMode::Concurrency,
            levels,
            capacity: cap,
            first_fail: None,
            first_breach: None,
            capacity_band: None,
            search_note: String::new(),
        }
    }

    /// Worse only when the bands say so: a certain FAIL at a load the baseline passed for
    /// certain; a lower point capacity inside the bands is no detectable change, or
    /// inconclusive under a gate it exceeds.
    #[test]
    fn capacity_decisions_follow_the_bands() {
        use Verdict::*;
        let base = phase(vec![
            level(8.0, Pass, true),
            level(16.0, Pass, true),
            level(32.0, Fail, true),
        ]);
        let worse = phase(vec![level(8.0, Pass, true), level(16.0, Fail, true)]);
        assert_eq!(compare_capacity(&base, &worse, None).change, Change::Worse);
        assert_eq!(compare_capacity(&worse, &base, None).change, Change::Better);
        let noisy = phase(vec![
            level(8.0, Pass, true),
            level(16.0, Fail, false),
            level(32.0, Fail, true),
        ]);
        assert_eq!(
            compare_capacity(&base, &noisy, None).change,
            Change::NoDetectableChange
        );
        assert_eq!(
            compare_capacity(&base, &noisy, Some(0.1)).change,
            Change::Inconclusive
        );
        assert_eq!(
            compare_capacity(&base, &base, Some(0.1)).change,
            Change::NoDetectableChange
        );
    }
}
