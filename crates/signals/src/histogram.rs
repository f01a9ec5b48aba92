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
