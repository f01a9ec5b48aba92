//! Deciding a percentile objective from a finite sample.
//!
//! An objective "p95 of TTFT below 300 ms" holds when at most 5 % of requests exceed 300 ms. With
//! `k` of `n` observations above the threshold, the exceedance share has a Wilson score interval
//! (Wilson 1927; Agresti & Coull 1998). The sweep uses it three ways:
//! - **breach certain** (lower bound above the allowed share): stop the level early;
//! - **pass certain** (upper bound below it): no need to extend;
//! - **undecided**: extend the window while time allows; at the end the point estimate decides,
//!   and too few samples to estimate the percentile at all gives INCONCLUSIVE.
//!
//! ITL observations within one request are correlated, so their interval is narrower than the
//! truth; the minimum-sample rule and the per-request TTFT/TPOT objectives keep this honest.

/// z for a two-sided 95 % interval (each side 2.5 %).
pub const Z_95: f64 = 1.959_963_984_540_054;

/// Wilson score interval `(low, high)` for `k` successes in `n` trials at normal quantile `z`.
/// Returns `(0, 1)` for `n = 0`.
pub fn wilson_interval(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n_f = n as f64;
    let p = k as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) / n_f) + z2 / (4.0 * n_f * n_f)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// What the sample says about an objective "at most `allowed` share of observations are bad".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The whole 95 % interval lies above `allowed`.
    BreachCertain,
    /// The whole 95 % interval lies at or below `allowed`.
    PassCertain,
    /// The interval straddles `allowed`.
    Undecided,
}

/// Decides from `bad` of `n` observations against an allowed bad share (`1 − p/100` for a
/// percentile objective, the maximum error ratio for an error objective).
pub fn decide(bad: u64, n: u64, allowed: f64) -> Decision {
    let (lo, hi) = wilson_interval(bad, n, Z_95);
    if lo > allowed {
        Decision::BreachCertain
    } else if hi <= allowed {
        Decision::PassCertain
    } else {
        Decision::Undecided
    }
}

/// Samples at which the same observed share `bad / n` would decide an objective against
/// `allowed` at 95 % (the Wilson interval wholly on one side), searched up to 10⁹; `None` when
/// the share equals `allowed` (no sample size decides it) or `n` is 0. At most `n` when the
/// sample already decides it. For 0 bad of any `n` against 5 % this is 73 (z²·0.95/0.05 ≈ 73).
pub fn samples_to_decide(bad: u64, n: u64, allowed: f64) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let p = bad as f64 / n as f64;
    if (p - allowed).abs() < 1e-12 {
        return None;
    }
    let decided = |m: u64| {
        let k = (p * m as f64).round() as u64;
        decide(k, m, allowed) != Decision::Undecided
    };
    if decided(n) {
        return Some(n);
    }
    let (mut lo, mut hi) = (n, n.max(1));
    while !decided(hi) {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi > 1_000_000_000 {
            return None;
        }
    }
    // decided(hi), not decided(lo): bisect (rounding of k makes this near-monotone).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if decided(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}

/// Fewest observations for which the `percentile`-th percentile is an observation rather than an
/// extrapolation beyond the largest one: `ceil(1 / (1 − p/100))`, e.g. 20 for p95, 100 for p99.
pub fn min_samples_for_percentile(percentile: f64) -> u64 {
    let tail = 1.0 - percentile / 100.0;
    if tail <= 0.0 {
        return u64::MAX;
    }
    (1.0 / tail - 1e-9).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: 0 of n against 5 % is certain once z²/(n + z²) ≤ 0.05, n ≥ 19·z² = 72.99 → 73;
    /// a share equal to the target is never decided; an already certain sample needs no more.
    #[test]
    fn samples_to_decide_by_hand() {
        assert_eq!(samples_to_decide(0, 33, 0.05), Some(73));
        assert_eq!(samples_to_decide(0, 200, 0.05), Some(200));
        assert_eq!(samples_to_decide(5, 100, 0.05), None);
        assert_eq!(samples_to_decide(1, 0, 0.05), None);
        let m = samples_to_decide(6, 100, 0.05).unwrap();
        assert_eq!(
            decide((0.06 * m as f64).round() as u64, m, 0.05),
            Decision::BreachCertain
        );
        assert!(m > 1000, "{m}");
    }

    #[test]
    fn wilson_matches_published_values() {
        // Newcombe (1998), Table I, example: 81/263 -> 0.2553 to 0.3662 (95 %).
        let (lo, hi) = wilson_interval(81, 263, Z_95);
        assert!((lo - 0.2553).abs() < 5e-4, "{lo}");
        assert!((hi - 0.3662).abs() < 5e-4, "{hi}");
        // 0/10 -> 0 to 0.2775 (Newcombe Table I).
        let (lo, hi) = wilson_interval(0, 10, Z_95);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.2775).abs() < 5e-4, "{hi}");
        assert_eq!(wilson_interval(0, 0, Z_95), (0.0, 1.0));
    }

    #[test]
    fn decisions() {
        // 30 % of 200 above the threshold, 5 % allowed: certain breach.
        assert_eq!(decide(60, 200, 0.05), Decision::BreachCertain);
        // 0 of 200 above; upper bound 0.0188 <= 0.05: certain pass.
        assert_eq!(decide(0, 200, 0.05), Decision::PassCertain);
        // 5 of 100 at 5 % allowed: undecided.
        assert_eq!(decide(5, 100, 0.05), Decision::Undecided);
        // too few to tell anything
        assert_eq!(decide(0, 3, 0.05), Decision::Undecided);
    }

    #[test]
    fn min_samples() {
        assert_eq!(min_samples_for_percentile(95.0), 20);
        assert_eq!(min_samples_for_percentile(99.0), 100);
        assert_eq!(min_samples_for_percentile(50.0), 2);
        assert_eq!(min_samples_for_percentile(99.9), 1000);
    }
}
