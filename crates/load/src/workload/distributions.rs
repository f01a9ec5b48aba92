//! Length distributions in tokens (`prompt_tokens`, `max_tokens`): fixed, uniform, normal,
//! log-normal by median and p90, or the class's dataset; their sampling, bounds and checks.

use super::hints;
use super::spec::MAX_REQUEST_TOKENS;
use rand::{Rng, RngExt};
use rand_distr::{Distribution, LogNormal, Normal};
use serde::{Deserialize, Deserializer, Serialize};

/// `z` of the standard normal at the 90th percentile, `Φ⁻¹(0.9)`.
pub const Z_P90: f64 = 1.281_551_565_544_600_4;

/// A length distribution in tokens (see the [`workload`](crate::workload) docs).
///
/// Written as a one-key mapping (`{fixed: 50}`, `{uniform: {min: 40, max: 60}}`, …) or the bare
/// word `dataset`; anything else is an error that says what to write instead (a bare `50`:
/// write `{fixed: 50}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthDist {
    /// Always this many.
    Fixed(u32),
    /// Uniform integers in `[min, max]`.
    Uniform {
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// Normal, rounded and clamped to `[min, max]`.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation (≥ 0).
        stddev: f64,
        /// Clamp below.
        min: u32,
        /// Clamp above.
        max: u32,
    },
    /// Log-normal given by median and 90th percentile, rounded and clamped to `[min, max]`.
    Lognormal {
        /// Median (> 0).
        median: f64,
        /// 90th percentile (> median).
        p90: f64,
        /// Clamp below.
        min: u32,
        /// Clamp above.
        max: u32,
    },
    /// From the class's dataset.
    Dataset,
}

impl LengthDist {
    /// Draws one length; `None` for [`LengthDist::Dataset`] (the caller takes the dataset entry's).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<u32> {
        let clamp = |v: f64, min: u32, max: u32| -> u32 {
            if v.is_nan() {
                return min;
            }
            v.round().clamp(f64::from(min), f64::from(max)) as u32
        };
        Some(match self {
            LengthDist::Fixed(n) => *n,
            LengthDist::Uniform { min, max } => rng.random_range(*min..=*max),
            LengthDist::Normal {
                mean,
                stddev,
                min,
                max,
            } => {
                let v = Normal::new(*mean, *stddev).map_or(*mean, |d| d.sample(rng));
                clamp(v, *min, *max)
            }
            LengthDist::Lognormal {
                median,
                p90,
                min,
                max,
            } => {
                let (mu, sigma) = lognormal_params(*median, *p90);
                let v = LogNormal::new(mu, sigma).map_or(*median, |d| d.sample(rng));
                clamp(v, *min, *max)
            }
            LengthDist::Dataset => return None,
        })
    }

    /// Smallest value the distribution can produce (`None` for a dataset).
    pub fn min(&self) -> Option<u32> {
        match self {
            LengthDist::Fixed(n) => Some(*n),
            LengthDist::Uniform { min, .. }
            | LengthDist::Normal { min, .. }
            | LengthDist::Lognormal { min, .. } => Some(*min),
            LengthDist::Dataset => None,
        }
    }

    /// Largest value the distribution can produce (`None` for a dataset).
    pub fn max(&self) -> Option<u32> {
        match self {
            LengthDist::Fixed(n) => Some(*n),
            LengthDist::Uniform { max, .. }
            | LengthDist::Normal { max, .. }
            | LengthDist::Lognormal { max, .. } => Some(*max),
            LengthDist::Dataset => None,
        }
    }

    /// Checks the parameters (bounds in order, finite, within [`MAX_REQUEST_TOKENS`]).
    ///
    /// # Errors
    /// What is wrong and what was expected (the caller adds the field).
    pub(super) fn validate(&self) -> Result<(), String> {
        if let Some(m) = self.max()
            && u64::from(m) > MAX_REQUEST_TOKENS
        {
            return Err(format!(
                "can reach {m} tokens; expected at most {MAX_REQUEST_TOKENS} tokens per request"
            ));
        }
        let order = |min: u32, max: u32| {
            if min > max {
                Err(format!("min {min} > max {max}; expected min ≤ max"))
            } else {
                Ok(())
            }
        };
        match self {
            LengthDist::Fixed(_) | LengthDist::Dataset => Ok(()),
            LengthDist::Uniform { min, max } => order(*min, *max),
            LengthDist::Normal {
                mean,
                stddev,
                min,
                max,
            } => {
                if !(mean.is_finite() && stddev.is_finite() && *stddev >= 0.0) {
                    return Err(format!(
                        "normal mean {mean}, stddev {stddev}: expected a finite mean and a stddev ≥ 0"
                    ));
                }
                order(*min, *max)
            }
            LengthDist::Lognormal {
                median,
                p90,
                min,
                max,
            } => {
                if !(median.is_finite() && *median > 0.0 && p90.is_finite() && p90 > median) {
                    return Err(format!(
                        "lognormal median {median}, p90 {p90}: expected 0 < median < p90"
                    ));
                }
                order(*min, *max)
            }
        }
    }
}

/// `(μ, σ)` of the log-normal with this median and 90th percentile.
pub fn lognormal_params(median: f64, p90: f64) -> (f64, f64) {
    (median.ln(), (p90 / median).ln() / Z_P90)
}

impl<'de> Deserialize<'de> for LengthDist {
    /// The forms of the [`workload`](crate::workload) docs; errors say what to write instead
    /// (see [`hints`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(hints::FormVisitor::<LengthDist>::new("length distribution"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::seeded_rng;

    fn stats(d: &LengthDist, n: usize) -> Vec<f64> {
        let mut rng = seeded_rng(5, 0);
        let mut v: Vec<f64> = (0..n)
            .map(|_| f64::from(d.sample(&mut rng).unwrap()))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    #[test]
    fn distributions_match_their_parameters() {
        let n = 40_000;
        assert_eq!(stats(&LengthDist::Fixed(7), 10), vec![7.0; 10]);

        // uniform 500..=1000: mean 750, every value in range, both ends reached
        let u = stats(
            &LengthDist::Uniform {
                min: 500,
                max: 1000,
            },
            n,
        );
        assert!((mean(&u) - 750.0).abs() < 3.0, "{}", mean(&u));
        assert_eq!((u[0], u[n - 1]), (500.0, 1000.0));

        // normal 2000 ± 200, clamp far away: mean 2000, sd 200
        let x = stats(
            &LengthDist::Normal {
                mean: 2000.0,
                stddev: 200.0,
                min: 0,
                max: 10_000,
            },
            n,
        );
        let m = mean(&x);
        let sd = (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(
            (m - 2000.0).abs() < 5.0 && (sd - 200.0).abs() < 5.0,
            "{m} {sd}"
        );
        // clamped: with min = mean, half the draws sit exactly on min
        let c = stats(
            &LengthDist::Normal {
                mean: 100.0,
                stddev: 30.0,
                min: 100,
                max: 200,
            },
            n,
        );
        let at_min = c.iter().filter(|v| **v == 100.0).count() as f64 / n as f64;
        assert!((at_min - 0.5).abs() < 0.02, "{at_min}");
        assert!(c[n - 1] <= 200.0);

        // lognormal median 300, p90 1200: the empirical median and p90 match
        let l = stats(
            &LengthDist::Lognormal {
                median: 300.0,
                p90: 1200.0,
                min: 1,
                max: 1_000_000,
            },
            n,
        );
        let med = l[n / 2];
        let p90 = l[n * 9 / 10];
        assert!((med / 300.0 - 1.0).abs() < 0.03, "median {med}");
        assert!((p90 / 1200.0 - 1.0).abs() < 0.04, "p90 {p90}");
        assert_eq!(LengthDist::Dataset.sample(&mut seeded_rng(1, 1)), None);
    }

    #[test]
    fn lognormal_parameters_by_hand() {
        // median e², p90 e^(2 + 1.2816·0.5) → μ = 2, σ = 0.5
        let (mu, sigma) = lognormal_params(2f64.exp(), (2.0 + Z_P90 * 0.5).exp());
        assert!((mu - 2.0).abs() < 1e-12 && (sigma - 0.5).abs() < 1e-12);
    }
}
