//! Data quality: what a corrupt exposition looks like, and the rule that such data never turns into
//! a figure.
//!
//! What lives here: the checks applied to every family the adapters read ([`check_value`],
//! [`check_histogram`], [`check_gpu`]) and the [`DataWarning`] that names what was wrong. What
//! does not: deciding what a rejection means for a verdict (crate `diagnose`).
//!
//! The policy is **reject the family, say why**: when any selected series of a family read for a
//! canonical signal is corrupt, the signal is dropped from the scrape (and from every window that
//! scrape is part of), because the series are summed (or maxed) downstream and one corrupt series
//! makes the sum wrong. The warning names the metric, the series and what was wrong.
//!
//! What counts as corrupt (each is impossible for a correct producer):
//!
//! * **counters** (`…_total`, histogram buckets and `_count`): NaN or ±Inf, negative, or at least
//!   2^53 (beyond it an `f64` counter can no longer count by one, so every delta is wrong);
//! * **histograms**: buckets that are not cumulative (a higher `le` holding fewer observations
//!   than a lower one; the exposition format defines bucket `le=x` as the count of observations
//!   ≤ x), the same bound twice in one series (`le="1"` and `le="1.0"`), `_count` disagreeing with
//!   the `+Inf` bucket (the format defines them equal), a negative or infinite `_sum` (every
//!   canonical histogram observes durations or token counts, which are ≥ 0);
//! * **gauges**: the KV-cache usage ratio (`vllm:kv_cache_usage_perc`, a 0–1 ratio despite its
//!   name) NaN or outside 0–1; request counts (running, waiting) NaN, infinite, negative or above
//!   10^9;
//! * **any family**: the same series (sample name and label set, `le` included) written twice
//!   or more in one scrape ([`crate::exposition::Duplicate`]): the formats allow each series once,
//!   and which copy is true cannot be known (keeping one would turn a producer bug into a figure
//!   that looks valid);
//! * **dcgm-exporter fields** outside what the device can report (see [`gpu_range`]): a
//!   utilisation above 100 %, an activity ratio above 1, a temperature above 200 °C, ….
//!
//! Floating-point noise is tolerated: two counts are compared with a relative tolerance of 1e-9
//! (1e-6 for PromQL results, whose `increase()` extrapolation multiplies each series by a
//! float factor).

use serde::{Deserialize, Serialize};

use crate::adapter::{GpuField, Signal, SignalKind};
use crate::exposition::{Duplicate, Labels};

/// 2^53: the largest integer up to which an `f64` counts by one.
pub const MAX_EXACT_COUNT: f64 = 9_007_199_254_740_992.0;

/// The most requests a running/waiting gauge may plausibly report (per series or summed).
pub const MAX_REQUESTS: f64 = 1e9;

/// What was wrong with a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Histogram buckets decrease with a growing `le`.
    NotCumulative,
    /// The same `le` twice in one histogram series.
    DuplicateBound,
    /// A count, counter or `_sum` below zero.
    Negative,
    /// `_count` differs from the `+Inf` bucket.
    CountMismatch,
    /// NaN or ±Inf where a number is required.
    NotFinite,
    /// A value outside the quantity's possible range (ratio above 1, counter at 2^53, …).
    OutOfRange,
    /// The same series (sample name and label set) written more than once in one scrape.
    DuplicateSeries,
}

impl Problem {
    /// snake_case name (`not_cumulative`, `negative`, …), as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::NotCumulative => "not_cumulative",
            Problem::DuplicateBound => "duplicate_bound",
            Problem::Negative => "negative",
            Problem::CountMismatch => "count_mismatch",
            Problem::NotFinite => "not_finite",
            Problem::OutOfRange => "out_of_range",
            Problem::DuplicateSeries => "duplicate_series",
        }
    }
}

/// One corrupt series found in the data, and the consequence: its whole family was rejected for
/// the window. JSON shape (stable): `{"metric", "series", "signal", "problem", "detail",
/// "occurrences"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataWarning {
    /// The metric (family) name as exported, e.g. `vllm:time_to_first_token_seconds`.
    pub metric: String,
    /// The offending series' labels (`{engine="0",model_name="m"}`), empty when the problem is
    /// in the family as a whole (e.g. a window delta of all series).
    pub series: String,
    /// The canonical signal (`ttft`, `kv_cache_usage`) or GPU field (`gpu_util_pct`) affected.
    pub signal: String,
    /// What was wrong, as a stable keyword.
    pub problem: Problem,
    /// What was wrong, with the numbers (`bucket le="0.5" holds 3, fewer than le="0.25" with 5`).
    pub detail: String,
    /// In how many scrapes (or query results) it was seen.
    pub occurrences: usize,
}

impl DataWarning {
    /// A warning for a rejected series.
    pub fn rejected(
        metric: &str,
        series: &Labels,
        signal: String,
        problem: Problem,
        detail: String,
    ) -> DataWarning {
        DataWarning {
            metric: metric.to_owned(),
            series: series.to_string(),
            signal,
            problem,
            detail,
            occurrences: 1,
        }
    }
}

impl std::fmt::Display for DataWarning {
    /// `vllm:x{engine="0"}: <detail>; rejected, no figure uses vllm:x` (+ the occurrence count
    /// when above one).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}: {}; rejected, no figure uses {}",
            self.metric, self.series, self.detail, self.metric
        )?;
        if self.occurrences > 1 {
            write!(f, " (seen in {} scrapes)", self.occurrences)?;
        }
        Ok(())
    }
}

/// Adds `w` to `out`, counting a repeat (same metric, series and problem) instead of listing it
/// twice.
pub fn merge_warning(out: &mut Vec<DataWarning>, w: &DataWarning) {
    match out
        .iter_mut()
        .find(|x| x.metric == w.metric && x.series == w.series && x.problem == w.problem)
    {
        Some(x) => x.occurrences += w.occurrences,
        None => out.push(w.clone()),
    }
}

/// The problem and a sentence for a series written more than once in one scrape (see
/// [`crate::exposition::Duplicate`]), e.g. `the series is written 2 times in one scrape (values
/// 25, 999); each series may appear once`.
pub fn check_duplicate(d: &Duplicate) -> (Problem, String) {
    let values: Vec<String> = d.values.iter().map(|v| format!("{v}")).collect();
    (
        Problem::DuplicateSeries,
        format!(
            "the series `{}` is written {} times in one scrape (values {}); each series may appear once, so no copy can be trusted",
            d.name,
            d.values.len(),
            values.join(", ")
        ),
    )
}

fn fmt_le(le: f64) -> String {
    if le == f64::INFINITY {
        "+Inf".to_owned()
    } else {
        format!("{le}")
    }
}

fn check_count(what: &str, v: f64) -> Option<(Problem, String)> {
    if !v.is_finite() {
        Some((Problem::NotFinite, format!("{what} is {v}, not a count")))
    } else if v < 0.0 {
        Some((Problem::Negative, format!("{what} is negative ({v})")))
    } else if v >= MAX_EXACT_COUNT {
        Some((
            Problem::OutOfRange,
            format!("{what} is {v:e}, at or beyond 2^53 where a float can no longer count by one"),
        ))
    } else {
        None
    }
}

fn less_than(a: f64, b: f64, rel_tol: f64) -> bool {
    a < b - rel_tol * b.abs().max(1.0)
}

/// Checks one counter or gauge value read for `signal` (before any unit scaling). Returns the
/// problem and a sentence with the value, or `None` when the value is plausible.
pub fn check_value(signal: Signal, v: f64) -> Option<(Problem, String)> {
    match signal.kind() {
        SignalKind::Counter => check_count("the counter", v),
        SignalKind::Histogram => None,
        SignalKind::Gauge if signal == Signal::KvCacheUsage => {
            if v.is_nan() {
                Some((
                    Problem::NotFinite,
                    "the KV-cache usage is NaN where a ratio 0–1 is expected".to_owned(),
                ))
            } else if !(0.0..=1.0 + 1e-9).contains(&v) {
                Some((
                    Problem::OutOfRange,
                    format!("the KV-cache usage is {v}, outside the ratio range 0–1"),
                ))
            } else {
                None
            }
        }
        SignalKind::Gauge => {
            if !v.is_finite() {
                Some((
                    Problem::NotFinite,
                    format!("the request count is {v}, not a number of requests"),
                ))
            } else if v < 0.0 {
                Some((
                    Problem::Negative,
                    format!("the request count is negative ({v})"),
                ))
            } else if v > MAX_REQUESTS {
                Some((
                    Problem::OutOfRange,
                    format!("the request count is {v:e}, beyond any plausible 10^9 requests"),
                ))
            } else {
                None
            }
        }
    }
}

/// Checks one histogram series: `buckets` as `(le, cumulative count)` in body order, `_sum`
/// (NaN when absent), `_count` (NaN when absent; `count_given` says whether a `_count` sample
/// existed). Returns the first problem found.
pub fn check_histogram(
    buckets: &[(f64, f64)],
    sum: f64,
    count: f64,
    count_given: bool,
) -> Option<(Problem, String)> {
    check_histogram_tol(buckets, sum, count, count_given, 1e-9)
}

/// [`check_histogram`] with an explicit relative tolerance for comparing counts (1e-6 for
/// PromQL `increase()` results).
pub fn check_histogram_tol(
    buckets: &[(f64, f64)],
    sum: f64,
    count: f64,
    count_given: bool,
    rel_tol: f64,
) -> Option<(Problem, String)> {
    for &(le, c) in buckets {
        if let Some(p) = check_count(&format!("bucket le=\"{}\"", fmt_le(le)), c) {
            return Some(p);
        }
    }
    let mut sorted: Vec<(f64, f64)> = buckets.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in sorted.windows(2) {
        let ((le0, c0), (le1, c1)) = (w[0], w[1]);
        if le0 == le1 {
            return Some((
                Problem::DuplicateBound,
                format!(
                    "the bound le=\"{}\" appears twice in one series (holding {c0} and {c1})",
                    fmt_le(le0)
                ),
            ));
        }
        if less_than(c1, c0, rel_tol) {
            return Some((
                Problem::NotCumulative,
                format!(
                    "buckets are not cumulative: le=\"{}\" holds {c1}, fewer than le=\"{}\" with {c0}",
                    fmt_le(le1),
                    fmt_le(le0)
                ),
            ));
        }
    }
    if count_given {
        if let Some(p) = check_count("_count", count) {
            return Some(p);
        }
        if let Some(&(_, inf)) = sorted.last().filter(|b| b.0 == f64::INFINITY)
            && (less_than(count, inf, rel_tol) || less_than(inf, count, rel_tol))
        {
            return Some((
                Problem::CountMismatch,
                format!("_count is {count} but the +Inf bucket holds {inf}; they must be equal"),
            ));
        }
    }
    if sum.is_infinite() {
        return Some((Problem::NotFinite, format!("_sum is {sum}")));
    }
    if sum < 0.0 && sum < -rel_tol {
        return Some((
            Problem::Negative,
            format!("_sum is negative ({sum}) for observations that cannot be"),
        ));
    }
    None
}

/// The possible range of a dcgm-exporter field in its canonical unit ([`GpuField`]):
/// utilisations 0–100 %, activity ratios 0–1, power 0–10 kW, temperatures −40–200 °C, SM clock
/// 0–10 GHz, framebuffer 0–16 TiB in MiB, XID codes 0–10^6, counters (energy, violation time)
/// and the clock-event bitmask 0–2^53.
pub fn gpu_range(field: GpuField) -> (f64, f64) {
    use GpuField::*;
    match field {
        GpuUtilPct | MemCopyUtilPct => (0.0, 100.0),
        GrEngineActiveRatio | SmActiveRatio | TensorActiveRatio | DramActiveRatio => (0.0, 1.0),
        PowerW => (0.0, 10_000.0),
        GpuTempC | MemoryTempC => (-40.0, 200.0),
        SmClockMhz => (0.0, 10_000.0),
        FbUsedMib | FbFreeMib | FbReservedMib => (0.0, 16.0 * 1024.0 * 1024.0),
        LastXid => (0.0, 1e6),
        ClockEventReasons | EnergyJ | PowerViolationNs | ThermalViolationNs => {
            (0.0, MAX_EXACT_COUNT)
        }
    }
}

/// Checks one dcgm-exporter value (canonical unit) against [`gpu_range`]; returns a sentence
/// when it is NaN, infinite or outside.
pub fn check_gpu(field: GpuField, v: f64) -> Option<String> {
    let (lo, hi) = gpu_range(field);
    if !v.is_finite() {
        return Some(format!("the value is {v}, not a number"));
    }
    // 1e-9 relative slack for ratios computed in floating point (1.0000000001)
    let slack = 1e-9 * hi.abs().max(1.0);
    (v < lo - slack || v > hi + slack).then(|| format!("the value {v} is outside {lo}–{hi}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    #[test]
    fn histogram_checks() {
        let ok = [(0.1, 1.0), (0.5, 3.0), (INF, 4.0)];
        assert_eq!(check_histogram(&ok, 1.2, 4.0, true), None);
        // body order does not matter, the bound does
        let shuffled = [(INF, 4.0), (0.1, 1.0), (0.5, 3.0)];
        assert_eq!(check_histogram(&shuffled, 1.2, 4.0, true), None);
        let down = [(0.1, 5.0), (0.5, 3.0), (INF, 5.0)];
        assert_eq!(
            check_histogram(&down, 1.0, 5.0, true).map(|p| p.0),
            Some(Problem::NotCumulative)
        );
        let neg = [(0.1, -1.0), (INF, 2.0)];
        assert_eq!(
            check_histogram(&neg, 1.0, 2.0, true).map(|p| p.0),
            Some(Problem::Negative)
        );
        assert_eq!(
            check_histogram(&ok, 1.2, 5.0, true).map(|p| p.0),
            Some(Problem::CountMismatch)
        );
        // no `_count` sample: nothing to disagree with
        assert_eq!(check_histogram(&ok, 1.2, f64::NAN, false), None);
        assert_eq!(
            check_histogram(&ok, -0.5, 4.0, true).map(|p| p.0),
            Some(Problem::Negative)
        );
        let dup = [(1.0, 1.0), (1.0, 2.0), (INF, 2.0)];
        assert_eq!(
            check_histogram(&dup, 1.0, 2.0, true).map(|p| p.0),
            Some(Problem::DuplicateBound)
        );
        let nan = [(1.0, f64::NAN), (INF, 2.0)];
        assert_eq!(
            check_histogram(&nan, 1.0, 2.0, true).map(|p| p.0),
            Some(Problem::NotFinite)
        );
        // float noise well inside 1e-6 is tolerated for PromQL results
        let noisy = [(0.1, 2.000_000_1), (INF, 2.0)];
        assert_eq!(check_histogram_tol(&noisy, 1.0, 2.0, true, 1e-6), None);
        assert!(check_histogram(&noisy, 1.0, 2.0, true).is_some());
    }

    #[test]
    fn value_checks() {
        assert_eq!(check_value(Signal::PromptTokens, 12.0), None);
        assert_eq!(
            check_value(Signal::PromptTokens, -1.0).map(|p| p.0),
            Some(Problem::Negative)
        );
        assert_eq!(
            check_value(Signal::PromptTokens, 1e308).map(|p| p.0),
            Some(Problem::OutOfRange)
        );
        assert_eq!(
            check_value(Signal::Preemptions, f64::NAN).map(|p| p.0),
            Some(Problem::NotFinite)
        );
        assert_eq!(check_value(Signal::KvCacheUsage, 1.0), None);
        assert_eq!(check_value(Signal::KvCacheUsage, 0.0), None);
        assert_eq!(
            check_value(Signal::KvCacheUsage, 1.5).map(|p| p.0),
            Some(Problem::OutOfRange)
        );
        assert_eq!(
            check_value(Signal::KvCacheUsage, f64::NAN).map(|p| p.0),
            Some(Problem::NotFinite)
        );
        assert_eq!(
            check_value(Signal::Waiting, -1e308).map(|p| p.0),
            Some(Problem::Negative)
        );
        assert_eq!(
            check_value(Signal::Running, 1e308).map(|p| p.0),
            Some(Problem::OutOfRange)
        );
        assert_eq!(check_value(Signal::Running, 3.0), None);
    }

    #[test]
    fn gpu_checks() {
        assert_eq!(check_gpu(GpuField::GpuUtilPct, 100.0), None);
        assert!(check_gpu(GpuField::GpuUtilPct, 101.0).is_some());
        assert!(check_gpu(GpuField::DramActiveRatio, 1.5).is_some());
        assert!(check_gpu(GpuField::GpuTempC, f64::NAN).is_some());
        assert!(check_gpu(GpuField::PowerW, 1e308).is_some());
        assert_eq!(check_gpu(GpuField::GpuTempC, 31.0), None);
    }
}
