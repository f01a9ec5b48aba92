//! Classic Prometheus histograms: cumulative buckets, and quantiles interpolated exactly the way
//! PromQL's `histogram_quantile` does for classic buckets (Prometheus `promql/quantile.go`,
//! `bucketQuantile`), with the precision bracket PromQL does not report.
//!
//! The rules, restated from the PromQL documentation and behaviour:
//! * buckets are sorted by upper bound (`le`, compared numerically: `"1"`, `"1.0"` and `"+Inf"`);
//!   buckets with the same bound are merged by adding their counts;
//! * the highest bucket must be `+Inf`, otherwise there is no answer (PromQL: NaN);
//! * counts that differ from the previous bucket's by a relative 1e-12 or less are set equal (float
//!   noise), then any remaining decrease is removed by carrying the running maximum forward
//!   ("monotonicity forced"), and that fact is reported;
//! * fewer than two buckets or zero observations: no answer;
//! * the rank is `q × count(+Inf)`; the answer lies in the first bucket whose cumulative count is
//!   ≥ rank, interpolated linearly between its lower bound (the previous bucket's `le`, or 0 for
//!   the first bucket) and its `le`;
//! * if that is the `+Inf` bucket, the answer is the highest finite `le` (and the truth is only
//!   known to be above it);
//! * if it is the first bucket and that bucket's `le` ≤ 0, the answer is that `le`;
//! * if it is the first bucket and its `le` > 0, PromQL interpolates in `[0, le]`; the truth is
//!   only known to be ≤ `le`, which [`Quantile::upper_bound_only`] records.

use serde::{Deserialize, Serialize};

/// One cumulative bucket: observations ≤ `le`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Upper bound (inclusive); `f64::INFINITY` for `+Inf`.
    pub le: f64,
    /// Cumulative count of observations ≤ `le` (a delta over a window, so it may be fractional
    /// after Prometheus `rate()`, but is a whole number for our own scrapes).
    pub count: f64,
}

/// A classic histogram over some window: cumulative buckets sorted by `le`, `_sum` and `_count`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Histogram {
    /// Cumulative buckets, sorted by `le`, bounds unique.
    pub buckets: Vec<Bucket>,
    /// `_sum`: sum of observed values (unit of the metric, e.g. seconds or tokens).
    pub sum: f64,
    /// `_count`: number of observations (equals the `+Inf` bucket for a consistent producer).
    pub count: f64,
}

/// A quantile estimate with its precision bracket: the truth lies in `[lower, upper]` (the
/// bucket the rank fell into). `upper` is `+Inf` when the rank fell into the `+Inf` bucket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantile {
    /// Quantile asked for, 0–1.
    pub q: f64,
    /// PromQL `histogram_quantile` value.
    pub value: f64,
    /// Lower bound of the bucket holding the rank (0 for the first bucket when its `le` > 0).
    pub lower: f64,
    /// Upper bound (`le`) of that bucket.
    pub upper: f64,
    /// Whether bucket counts had to be made monotonic (inconsistent data at the source).
    pub forced_monotonic: bool,
    /// Observations behind the estimate (count of the `+Inf` bucket).
    pub observations: f64,
    /// The rank fell into the first bucket `[0, le₀]` (with `le₀ > 0`): the histogram only says
    /// the quantile is **at most** `upper`. PromQL still interpolates inside that bucket as if
    /// observations were spread evenly from 0 (vLLM's queue-time p95 of "285 ms" with a first
    /// bucket of 0.3 s and a mean of 1 ms), so [`Quantile::value`] is no figure to show; use
    /// [`Quantile::reported`] / [`Quantile::describe`].
    #[serde(default)]
    pub upper_bound_only: bool,
    /// `upper` (and `value`, when it was above) was lowered by what `_sum` permits
    /// ([`Histogram::quantile_bounded`]): the bucket's own edge was further from the truth than
    /// the histogram's sum allows.
    #[serde(default)]
    pub capped_by_sum: bool,
}

impl Quantile {
    /// The value to report: `upper` when [`Quantile::upper_bound_only`] (read it as "≤"),
    /// otherwise the PromQL value.
    pub fn reported(&self) -> f64 {
        if self.upper_bound_only {
            self.upper
        } else {
            self.value
        }
    }

    /// The figure in words with `fmt` formatting a value: `≤ 300 ms` when only the upper bound is
    /// known, otherwise the value alone (`812 ms`).
    pub fn describe(&self, fmt: impl Fn(f64) -> String) -> String {
        if self.upper_bound_only {
            format!("≤ {}", fmt(self.upper))
        } else {
            fmt(self.value)
        }
    }
}

impl Histogram {
    /// Builds a histogram from unsorted `(le, cumulative count)` pairs: sorts and merges equal
    /// bounds by adding counts (as PromQL does when series are summed by `le`).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (f64, f64)>, sum: f64, count: f64) -> Self {
        let mut buckets: Vec<Bucket> = pairs
            .into_iter()
            .filter(|(le, _)| !le.is_nan())
            .map(|(le, count)| Bucket { le, count })
            .collect();
        buckets.sort_by(|a, b| a.le.total_cmp(&b.le));
        let mut merged: Vec<Bucket> = Vec::with_capacity(buckets.len());
        for b in buckets {
            match merged.last_mut() {
                Some(last) if last.le == b.le => last.count += b.count,
                _ => merged.push(b),
            }
        }
        Histogram {
            buckets: merged,
            sum,
            count,
        }
    }

    /// Mean observation, `_sum / _count`; `None` with no observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// Number of observations as the `+Inf` bucket states it (falls back to `_count`).
    pub fn observations(&self) -> f64 {
        match self.buckets.last() {
            Some(b) if b.le == f64::INFINITY => b.count,
            _ => self.count,
        }
    }

    /// The `q`-quantile (0 ≤ q ≤ 1) as PromQL's `histogram_quantile(q, …)` computes it for
    /// classic buckets, with its bracket. `None` where PromQL answers NaN: q is NaN, no `+Inf`
    /// bucket, fewer than two buckets, or no observations. For q < 0 or q > 1 PromQL answers
    /// −Inf / +Inf; this returns `None` too, since no caller should ask.
    pub fn quantile(&self, q: f64) -> Option<Quantile> {
        if !(0.0..=1.0).contains(&q) {
            return None;
        }
        let mut b = self.buckets.clone();
        if b.last().is_none_or(|l| l.le != f64::INFINITY) {
            return None;
        }
        correct_precision_errors(&mut b, 1e-12);
        let forced_monotonic = ensure_monotonic(&mut b);
        if b.len() < 2 {
            return None;
        }
        let observations = b[b.len() - 1].count;
        if observations.is_nan() || observations <= 0.0 {
            return None;
        }
        let mut rank = q * observations;
        // first bucket (excluding +Inf) whose count ≥ rank; len-1 when none
        let idx = b[..b.len() - 1]
            .iter()
            .position(|x| x.count >= rank)
            .unwrap_or(b.len() - 1);
        let out = |value, lower, upper| Quantile {
            q,
            value,
            lower,
            upper,
            forced_monotonic,
            observations,
            upper_bound_only: idx == 0 && b[0].le > 0.0,
            capped_by_sum: false,
        };
        if idx == b.len() - 1 {
            let top = b[b.len() - 2].le;
            return Some(out(top, top, f64::INFINITY));
        }
        if idx == 0 && b[0].le <= 0.0 {
            return Some(out(b[0].le, f64::NEG_INFINITY, b[0].le));
        }
        let end = b[idx].le;
        let mut count = b[idx].count;
        let mut start = 0.0;
        if idx > 0 {
            start = b[idx - 1].le;
            count -= b[idx - 1].count;
            rank -= b[idx - 1].count;
        }
        Some(out(start + (end - start) * (rank / count), start, end))
    }

    /// [`Histogram::quantile`] with its bracket tightened by `_sum`, for histograms of
    /// non-negative values (durations, token counts) whose first bucket bound is > 0.
    ///
    /// The observations ranked at or above the quantile are all ≥ it, and every other one is at
    /// least its bucket's lower bound, so `_sum` ≥ (those above the rank) × quantile + the lower
    /// bounds of the rest: the quantile is at most what is left of `_sum` over their number.
    /// With a mean of 0.1 ms a p95 cannot be 300 ms, the first bucket's edge: at most 5 % of the
    /// observations can hold the 20 × 0.1 ms of sum each needs, so p95 ≤ 2 ms. When that is
    /// below `upper`, `upper` becomes it (never below `lower`), `value` is capped to it and
    /// [`Quantile::capped_by_sum`] is set. Counts that are not whole numbers (a Prometheus
    /// `increase()`) are taken conservatively. Data the bound contradicts (a `_sum` smaller
    /// than the buckets' lower bounds allow) leaves the quantile as it is.
    pub fn quantile_bounded(&self, q: f64) -> Option<Quantile> {
        let mut out = self.quantile(q)?;
        let b = self.prepared()?;
        if b[0].le <= 0.0 || !self.sum.is_finite() {
            return Some(out);
        }
        let n = b[b.len() - 1].count;
        let rank = q * n;
        let idx = b[..b.len() - 1]
            .iter()
            .position(|x| x.count >= rank)
            .unwrap_or(b.len() - 1);
        let lo = if idx == 0 { 0.0 } else { b[idx - 1].le };
        let cum_lo = if idx == 0 { 0.0 } else { b[idx - 1].count };
        let cum_hi = b[idx].count;
        let whole = b.iter().all(|x| x.count.fract() == 0.0);
        // observations of the rank's bucket at or above the rank, and those below it
        let (above, below) = if whole {
            let pos = rank.ceil().max(1.0);
            (cum_hi - pos + 1.0, (pos - 1.0 - cum_lo).max(0.0))
        } else {
            (cum_hi - rank, 0.0)
        };
        if above <= 0.0 {
            return Some(out);
        }
        let others: f64 = lower_bound_mass(&b, Some(idx));
        let slack = 1e-9 * self.sum.abs();
        let bound = (self.sum + slack - others - below * lo) / above;
        if bound < lo - slack {
            return Some(out); // inconsistent with the buckets: no claim
        }
        let bound = bound.max(lo);
        if bound < out.upper {
            out.upper = bound;
            out.value = out.value.min(bound);
            out.capped_by_sum = true;
        }
        Some(out)
    }

    /// [`Histogram::fraction_le`] with the bracket tightened by `_sum`, for non-negative values
    /// and a first bucket bound > 0: when `threshold` falls inside a bucket, how many of that
    /// bucket's observations can lie above it is bounded by what `_sum` leaves once every other
    /// observation has its bucket's lower bound (at most), and by what it still needs once every
    /// other one has its upper bound (at least, when no observation is in `+Inf`). A threshold
    /// of 10 ms inside a first bucket of 300 ms, with 27 observations summing to 4 ms: at most
    /// 0.4 of them are above 10 ms, so ≥ 98.5 % are ≤ 10 ms, where the buckets alone say
    /// 0–100 %. The estimate is clamped into the bracket.
    pub fn fraction_le_bounded(&self, threshold: f64) -> Option<(f64, f64, f64)> {
        let (est, lo, hi) = self.fraction_le(threshold)?;
        let b = self.prepared()?;
        if b[0].le <= 0.0 || threshold <= 0.0 || !self.sum.is_finite() || lo == hi {
            return Some((est, lo, hi));
        }
        let n = b[b.len() - 1].count;
        let Some(s) = b.iter().position(|x| threshold < x.le) else {
            return Some((est, lo, hi));
        };
        let lo_s = if s == 0 { 0.0 } else { b[s - 1].le };
        if threshold <= lo_s {
            return Some((est, lo, hi));
        }
        let hi_s = b[s].le;
        let cum_lo = if s == 0 { 0.0 } else { b[s - 1].count };
        let c_s = b[s].count - cum_lo;
        let slack = 1e-9 * self.sum.abs();
        // at most: the others at their lower bounds, this bucket's at lo_s or just above T
        let x_max =
            (self.sum + slack - lower_bound_mass(&b, Some(s)) - c_s * lo_s) / (threshold - lo_s);
        // at least: the others at their upper bounds, this bucket's at T or at hi_s
        let upper_others = upper_bound_mass(&b, Some(s));
        let x_min = if hi_s.is_finite() && upper_others.is_finite() {
            (self.sum - slack - upper_others - c_s * threshold) / (hi_s - threshold)
        } else {
            0.0
        };
        let (x_min, x_max) = (x_min.clamp(0.0, c_s), x_max.clamp(0.0, c_s));
        if x_min > x_max {
            return Some((est, lo, hi)); // inconsistent with the buckets: no claim
        }
        let lo2 = ((b[s].count - x_max) / n).max(lo);
        let hi2 = ((b[s].count - x_min) / n).min(hi);
        Some((est.clamp(lo2, hi2), lo2, hi2))
    }

    /// Buckets sorted, float noise corrected and monotonicity forced, as PromQL reads them;
    /// `None` without `+Inf`, with fewer than two buckets or no observations.
    fn prepared(&self) -> Option<Vec<Bucket>> {
        let mut b = self.buckets.clone();
        if b.last().is_none_or(|l| l.le != f64::INFINITY) || b.len() < 2 {
            return None;
        }
        correct_precision_errors(&mut b, 1e-12);
        ensure_monotonic(&mut b);
        let n = b[b.len() - 1].count;
        (n.is_finite() && n > 0.0).then_some(b)
    }

    /// Share of observations ≤ `threshold` (0–1) with a bracket: `(estimate, lower, upper)`.
    /// Exact (all three equal) when `threshold` is a bucket bound; otherwise linear
    /// interpolation within the bucket as PromQL's `histogram_fraction`, bracketed by the
    /// shares at the bucket's two bounds. `None` with no observations or no `+Inf` bucket.
    pub fn fraction_le(&self, threshold: f64) -> Option<(f64, f64, f64)> {
        let mut b = self.buckets.clone();
        if b.last().is_none_or(|l| l.le != f64::INFINITY) || threshold.is_nan() {
            return None;
        }
        correct_precision_errors(&mut b, 1e-12);
        ensure_monotonic(&mut b);
        let total = b[b.len() - 1].count;
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        let mut prev_le = if b[0].le > 0.0 {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        let mut prev_count = 0.0;
        for x in &b {
            if threshold == x.le {
                let f = x.count / total;
                return Some((f, f, f));
            }
            if threshold < x.le {
                let lo = prev_count / total;
                let hi = x.count / total;
                if threshold <= prev_le {
                    return Some((lo, lo, lo));
                }
                let est = if x.le.is_infinite() || prev_le.is_infinite() {
                    lo
                } else {
                    (prev_count + (x.count - prev_count) * (threshold - prev_le) / (x.le - prev_le))
                        / total
                };
                return Some((est, lo, hi));
            }
            prev_le = x.le;
            prev_count = x.count;
        }
        Some((1.0, 1.0, 1.0))
    }
}

/// Σ over buckets (but `skip`) of their observations × their lower bound (0 for the first):
/// the least those observations can add to `_sum` when values are non-negative.
fn lower_bound_mass(b: &[Bucket], skip: Option<usize>) -> f64 {
    let mut prev = (0.0, 0.0); // (le, cumulative count) of the bucket below
    let mut out = 0.0;
    for (i, x) in b.iter().enumerate() {
        if Some(i) != skip {
            out += (x.count - prev.1) * prev.0;
        }
        prev = (x.le, x.count);
    }
    out
}

/// Σ over buckets (but `skip`) of their observations × their upper bound: the most they can
/// add to `_sum`; `+Inf` when a bucket other than `skip` above the last finite bound holds any.
fn upper_bound_mass(b: &[Bucket], skip: Option<usize>) -> f64 {
    let mut prev = 0.0;
    let mut out = 0.0;
    for (i, x) in b.iter().enumerate() {
        let c = x.count - prev;
        if Some(i) != skip && c > 0.0 {
            out += c * x.le;
        }
        prev = x.count;
    }
    out
}

/// PromQL `correctPrecisionErrors`: a bucket whose count differs from the previous kept count
/// by a relative `tolerance` or less is set to that count.
fn correct_precision_errors(b: &mut [Bucket], tolerance: f64) -> bool {
    let mut fixed = false;
    let Some(first) = b.first() else {
        return false;
    };
    let mut prev = first.count;
    for x in b.iter_mut().skip(1) {
        let delta = (x.count - prev).abs();
        if delta == 0.0 {
            continue;
        }
        if delta / x.count <= tolerance {
            x.count = prev;
            fixed = true;
        } else {
            prev = x.count;
        }
    }
    fixed
}

/// PromQL `ensureMonotonic`: carries the running maximum forward; true if anything changed.
fn ensure_monotonic(b: &mut [Bucket]) -> bool {
    let mut forced = false;
    let Some(first) = b.first() else {
        return false;
    };
    let mut max = first.count;
    for x in b.iter_mut().skip(1) {
        if x.count > max {
            max = x.count;
        } else if x.count < max {
            x.count = max;
            forced = true;
        }
    }
    forced
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    fn h(pairs: &[(f64, f64)]) -> Histogram {
        let count = pairs.last().map(|p| p.1).unwrap_or(0.0);
        Histogram::from_pairs(pairs.iter().copied(), 0.0, count)
    }

    #[test]
    fn interpolates_within_bucket() {
        // 10 obs: 2 ≤ 0.1, 8 ≤ 0.5, 10 ≤ 1. p50: rank 5 in (0.1, 0.5]: 0.1 + 0.4 * (3/6) = 0.3.
        let x = h(&[(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)]);
        let q = x.quantile(0.5).unwrap();
        assert!((q.value - 0.3).abs() < 1e-12);
        assert_eq!((q.lower, q.upper), (0.1, 0.5));
        // p10: rank 1 in the first bucket, lower bound 0: 0.1 * 1/2 = 0.05.
        let q = x.quantile(0.1).unwrap();
        assert!((q.value - 0.05).abs() < 1e-12);
        assert_eq!((q.lower, q.upper), (0.0, 0.1));
        // p100: rank 10 reached at le=1.0 (first bucket with count ≥ 10).
        assert_eq!(x.quantile(1.0).unwrap().value, 1.0);
    }

    #[test]
    fn a_rank_in_the_first_bucket_is_an_upper_bound_only() {
        // vLLM's queue time: first bucket le=0.3; 20 of 20 observations there (p95 rank 19).
        // PromQL interpolates 0.3 × 19/20 = 0.285 s; the histogram only knows "≤ 0.3 s".
        let x = h(&[(0.3, 20.0), (0.5, 20.0), (INF, 20.0)]);
        let q = x.quantile(0.95).unwrap();
        assert!(
            (q.value - 0.285).abs() < 1e-12,
            "PromQL value kept: {}",
            q.value
        );
        assert!(q.upper_bound_only);
        assert_eq!((q.lower, q.upper), (0.0, 0.3));
        assert_eq!(q.reported(), 0.3);
        assert_eq!(q.describe(|v| format!("{v} s")), "≤ 0.3 s");
        // a rank beyond the first bucket is a point estimate, as is one at a bound ≤ 0
        let x = h(&[(0.1, 2.0), (0.5, 8.0), (INF, 10.0)]);
        let q = x.quantile(0.5).unwrap();
        assert!(!q.upper_bound_only);
        assert_eq!(q.reported(), q.value);
        assert_eq!(q.describe(|v| format!("{v:.1} s")), "0.3 s");
        assert!(
            !h(&[(-1.0, 5.0), (1.0, 10.0), (INF, 10.0)])
                .quantile(0.2)
                .unwrap()
                .upper_bound_only
        );
        // the +Inf bucket is the other end (only "above the highest bound"), not this flag
        assert!(
            !h(&[(0.1, 1.0), (INF, 10.0)])
                .quantile(0.9)
                .unwrap()
                .upper_bound_only
        );
    }

    #[test]
    fn inf_bucket_returns_highest_finite_bound() {
        let x = h(&[(0.1, 1.0), (0.5, 2.0), (INF, 10.0)]);
        let q = x.quantile(0.9).unwrap();
        assert_eq!(q.value, 0.5);
        assert_eq!((q.lower, q.upper), (0.5, INF));
    }

    #[test]
    fn nan_cases() {
        assert!(
            h(&[(0.1, 1.0), (0.5, 2.0)]).quantile(0.5).is_none(),
            "no +Inf"
        );
        assert!(h(&[(INF, 3.0)]).quantile(0.5).is_none(), "one bucket");
        assert!(
            h(&[(0.1, 0.0), (INF, 0.0)]).quantile(0.5).is_none(),
            "empty"
        );
        assert!(h(&[(0.1, 1.0), (INF, 1.0)]).quantile(f64::NAN).is_none());
    }

    #[test]
    fn non_positive_first_bucket() {
        let x = h(&[(-1.0, 5.0), (1.0, 10.0), (INF, 10.0)]);
        assert_eq!(x.quantile(0.2).unwrap().value, -1.0);
    }

    #[test]
    fn monotonicity_is_forced_and_reported() {
        // le=0.5 dips below le=0.1; envelope makes it 5, so p50 (rank 5) falls in le=0.1.
        let x = h(&[(0.1, 5.0), (0.5, 3.0), (1.0, 10.0), (INF, 10.0)]);
        let q = x.quantile(0.5).unwrap();
        assert!(q.forced_monotonic);
        assert!((q.value - 0.1).abs() < 1e-12);
    }

    #[test]
    fn le_spellings_merge() {
        // "1" and "1.0" from two series summed by le are the same bound.
        let x = Histogram::from_pairs([(1.0, 2.0), (1.0, 3.0), (INF, 5.0), (INF, 5.0)], 0.0, 10.0);
        assert_eq!(x.buckets.len(), 2);
        assert_eq!(x.buckets[0].count, 5.0);
        assert_eq!(x.buckets[1].count, 10.0);
    }

    /// The real vLLM after-burst scrape: 27 queue-time observations summing to 4.06 ms, all in
    /// the first bucket [0, 0.3] s. PromQL's p95 is 285 ms; the sum allows at most
    /// (4.06 ms) / 2 observations at or above the rank (27 − ⌈25.65⌉ + 1 = 2) = 2.03 ms.
    #[test]
    fn the_sum_caps_a_quantile_its_buckets_leave_wide() {
        let sum = 0.004058750000;
        let x = Histogram::from_pairs([(0.3, 27.0), (0.5, 27.0), (INF, 27.0)], sum, 27.0);
        let q = x.quantile_bounded(0.95).unwrap();
        assert!(q.capped_by_sum && q.upper_bound_only);
        assert!((q.upper - sum / 2.0).abs() < 1e-9, "{}", q.upper);
        assert!(q.value <= q.upper);
        assert_eq!(q.reported(), q.upper);
        // the sum never widens a bracket, and never goes below the bucket's lower bound
        let y = h(&[(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)]);
        let y = Histogram { sum: 4.0, ..y };
        let q = y.quantile_bounded(0.5).unwrap();
        assert!(!q.capped_by_sum, "{q:?}");
        // 10 observations: 2 ≤ 0.1, 6 in (0.1, 0.5], 2 in (0.5, 1]; sum 1.7 s. p95 rank 9.5
        // lands in (0.5, 1]: the 10th observation is ≥ p95 and the rest add ≥ 2×0 + 6×0.1 + 1
        // × 0.5 (the 9th, in the same bucket), so p95 ≤ 1.7 − 0.6 − 0.5 = 0.6 s.
        let z = Histogram {
            sum: 1.7,
            ..h(&[(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)])
        };
        let q = z.quantile_bounded(0.95).unwrap();
        assert!(q.capped_by_sum && (q.upper - 0.6).abs() < 1e-6, "{q:?}");
        assert!(q.value <= 0.6 + 1e-6);
        // a sum below what the buckets' lower bounds need (≥ 1.6 s): inconsistent, no claim
        let bad = Histogram {
            sum: 1.3,
            ..h(&[(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)])
        };
        assert!(!bad.quantile_bounded(0.95).unwrap().capped_by_sum);
        // the +Inf bucket gets a finite bound from the sum: 4 observations above 1 s summing
        // to 8 s; the 4th is ≥ p95 and the 3 others ≥ 1 s each, so p95 ≤ 8 − 3 = 5 s
        let inf = Histogram::from_pairs([(1.0, 0.0), (INF, 4.0)], 8.0, 4.0);
        let q = inf.quantile_bounded(0.95).unwrap();
        assert!(q.capped_by_sum && (q.upper - 5.0).abs() < 1e-6, "{q:?}");
    }

    #[test]
    fn the_sum_decides_a_share_inside_a_bucket() {
        // 27 observations summing to 4.06 ms, all ≤ 0.3 s: how many are ≤ 10 ms? At most
        // 4.06 ms / 10 ms = 0.406 of them can be above.
        let x = Histogram::from_pairs([(0.3, 27.0), (0.5, 27.0), (INF, 27.0)], 0.00406, 27.0);
        assert_eq!(x.fraction_le(0.01).map(|f| (f.1, f.2)), Some((0.0, 1.0)));
        let (est, lo, hi) = x.fraction_le_bounded(0.01).unwrap();
        assert!((lo - (27.0 - 0.406) / 27.0).abs() < 1e-6, "{lo}");
        assert_eq!(hi, 1.0);
        assert!(est >= lo && est <= hi);
        // a sum that needs mass above the threshold: 10 observations in (0, 1] summing to 9.5
        // s: with 10 − x at ≤ 0.5 and x at ≤ 1, x ≥ (9.5 − 5) / 0.5 = 9, so ≤ 10 % are ≤ 0.5 s.
        let y = Histogram::from_pairs([(1.0, 10.0), (INF, 10.0)], 9.5, 10.0);
        let (_, lo, hi) = y.fraction_le_bounded(0.5).unwrap();
        assert!(lo.abs() < 1e-9 && (hi - 0.1).abs() < 1e-6, "{lo} {hi}");
        // on a bound nothing changes
        assert_eq!(y.fraction_le_bounded(1.0), y.fraction_le(1.0));
    }

    #[test]
    fn fraction_le_is_exact_on_bounds() {
        let x = h(&[(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0)]);
        assert_eq!(x.fraction_le(0.5), Some((0.8, 0.8, 0.8)));
        let (est, lo, hi) = x.fraction_le(0.3).unwrap();
        assert_eq!((lo, hi), (0.2, 0.8));
        assert!((est - 0.5).abs() < 1e-12);
        assert_eq!(x.fraction_le(5.0), Some((1.0, 1.0, 1.0)));
    }
}
