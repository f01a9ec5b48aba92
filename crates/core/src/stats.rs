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
