//! Arrival processes: when requests are *meant* to be sent.
//!
//! Two families, as in every serving benchmark:
//! - **Closed loop** ([`LevelMode::Concurrency`]): a fixed number of requests in flight; a new one
//!   starts as soon as one finishes. The level is the concurrency.
//! - **Open loop** ([`LevelMode::Rate`]): requests arrive on a schedule that does not wait for the
//!   server. Gaps between arrivals are constant, exponential (Poisson process) or gamma-distributed
//!   with a *burstiness* factor, the same parameterisation as `vllm bench serve --burstiness`: gamma
//!   shape `k = burstiness`, scale `1 / (rate · k)`, so the mean gap is `1 / rate` and the squared
//!   coefficient of variation of the gaps is `CV² = 1 / k`. `burstiness = 1` is Poisson; below 1 is
//!   burstier, above 1 is more regular. An optional concurrency cap holds arrivals back while the
//!   cap is reached; their latency still counts from the *intended* time (no coordinated omission).
//!
//! Everything here is deterministic for a seed: the generator is Xoshiro256++ (a fixed, documented
//! algorithm, unlike `StdRng` whose algorithm may change between `rand` releases).
//!
//! What does not live here: sending (see [`crate::client`]) and the dispatch loop (see
//! [`crate::runner`]).

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Exp, Gamma};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The random generator used everywhere a seed is given.
pub type SeededRng = Xoshiro256PlusPlus;

/// A generator for `seed`, decorrelated per `stream` (e.g. one stream for arrivals, one for the
/// request mix) by SplitMix64-mixing the pair into the Xoshiro seed.
pub fn seeded_rng(seed: u64, stream: u64) -> SeededRng {
    SeededRng::seed_from_u64(splitmix64(
        seed ^ splitmix64(stream.wrapping_add(0x9E37_79B9_7F4A_7C15)),
    ))
}

/// SplitMix64 finaliser (Steele, Lea and Flood 2014), used to mix seeds.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How open-loop arrivals are spaced (YAML: `constant`, `poisson`, or `{gamma: {burstiness: 0.5}}`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrivalProcess {
    /// Every gap is exactly `1 / rate`.
    Constant,
    /// Exponential gaps with mean `1 / rate` (CV of gaps = 1).
    #[default]
    Poisson,
    /// Gamma gaps, shape `burstiness`, mean `1 / rate`; CV of gaps = `1 / sqrt(burstiness)`.
    Gamma {
        /// Gamma shape `k > 0` (vLLM bench `--burstiness`).
        burstiness: f64,
    },
}

impl ArrivalProcess {
    /// Short label for reports: `constant`, `poisson`, `gamma(k=0.5)`.
    pub fn label(&self) -> String {
        match self {
            ArrivalProcess::Constant => "constant".into(),
            ArrivalProcess::Poisson => "poisson".into(),
            ArrivalProcess::Gamma { burstiness } => format!("gamma(k={burstiness})"),
        }
    }
}

/// How load is offered during one level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LevelMode {
    /// Closed loop with this many requests in flight (≥ 1).
    Concurrency(u32),
    /// Open loop.
    Rate {
        /// Mean arrival rate, requests per second (> 0).
        rate_per_s: f64,
        /// Gap distribution.
        arrival: ArrivalProcess,
        /// Optional cap on requests in flight; arrivals wait for a free slot.
        max_concurrency: Option<u32>,
    },
}

impl LevelMode {
    /// The level as a number: the concurrency, or the rate in requests per second.
    pub fn level(&self) -> f64 {
        match self {
            LevelMode::Concurrency(c) => f64::from(*c),
            LevelMode::Rate { rate_per_s, .. } => *rate_per_s,
        }
    }

    /// The core vocabulary's mode.
    pub fn load_mode(&self) -> headroom_core::run::LoadMode {
        match self {
            LevelMode::Concurrency(_) => headroom_core::run::LoadMode::Concurrency,
            LevelMode::Rate { .. } => headroom_core::run::LoadMode::Rate,
        }
    }
}

/// Errors in an arrival specification.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArrivalError {
    /// The rate is not a positive finite number.
    #[error("arrival rate {0} req/s: expected a positive, finite number")]
    BadRate(f64),
    /// The burstiness is not a positive finite number.
    #[error("gamma burstiness {0}: expected a positive, finite number (1 = Poisson)")]
    BadBurstiness(f64),
}

enum GapDist {
    Constant(f64),
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
}

/// The open-loop schedule: an endless, deterministic sequence of intended send offsets from the
/// level start. Offsets start at the first gap (not at zero), as a process that began before the
/// level would.
pub struct ArrivalSchedule {
    dist: GapDist,
    rng: SeededRng,
    at_s: f64,
}

impl ArrivalSchedule {
    /// A schedule at `rate_per_s` requests per second.
    ///
    /// # Errors
    /// [`ArrivalError`] for a non-positive or non-finite rate or burstiness.
    pub fn new(rate_per_s: f64, process: ArrivalProcess, seed: u64) -> Result<Self, ArrivalError> {
        if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
            return Err(ArrivalError::BadRate(rate_per_s));
        }
        let mean_gap_s = 1.0 / rate_per_s;
        let dist = match process {
            ArrivalProcess::Constant => GapDist::Constant(mean_gap_s),
            ArrivalProcess::Poisson => {
                GapDist::Exp(Exp::new(rate_per_s).map_err(|_| ArrivalError::BadRate(rate_per_s))?)
            }
            ArrivalProcess::Gamma { burstiness } => {
                if !(burstiness.is_finite() && burstiness > 0.0) {
                    return Err(ArrivalError::BadBurstiness(burstiness));
                }
                GapDist::Gamma(
                    Gamma::new(burstiness, mean_gap_s / burstiness)
                        .map_err(|_| ArrivalError::BadBurstiness(burstiness))?,
                )
            }
        };
        Ok(ArrivalSchedule {
            dist,
            rng: seeded_rng(seed, 1),
            at_s: 0.0,
        })
    }

    /// The next gap in seconds.
    pub fn next_gap_s(&mut self) -> f64 {
        match &self.dist {
            GapDist::Constant(g) => *g,
            GapDist::Exp(d) => d.sample(&mut self.rng),
            GapDist::Gamma(d) => d.sample(&mut self.rng),
        }
    }
}

impl Iterator for ArrivalSchedule {
    /// Intended send time as an offset from the level start.
    type Item = Duration;

    /// Ends when the offset no longer fits a [`Duration`] (a rate so low that the next arrival
    /// lies beyond any level).
    fn next(&mut self) -> Option<Duration> {
        self.at_s += self.next_gap_s();
        Duration::try_from_secs_f64(self.at_s).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(process: ArrivalProcess, rate: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut s = ArrivalSchedule::new(rate, process, seed).unwrap();
        (0..n).map(|_| s.next_gap_s()).collect()
    }

    fn mean_cv(x: &[f64]) -> (f64, f64) {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn constant_gaps_are_exact() {
        let mut s = ArrivalSchedule::new(4.0, ArrivalProcess::Constant, 1).unwrap();
        let first: Vec<Duration> = s.by_ref().take(3).collect();
        assert_eq!(
            first,
            vec![
                Duration::from_millis(250),
                Duration::from_millis(500),
                Duration::from_millis(750)
            ]
        );
    }

    #[test]
    fn poisson_mean_rate_and_cv() {
        // 50 000 exponential gaps at 100 req/s: mean 10 ms; the standard error of the mean is
        // 10 ms / sqrt(50 000) = 0.045 ms, so ±0.2 ms is > 4 standard errors. CV of an
        // exponential is exactly 1.
        let g = gaps(ArrivalProcess::Poisson, 100.0, 50_000, 7);
        let (mean, cv) = mean_cv(&g);
        assert!((mean - 0.01).abs() < 0.000_2, "mean gap {mean}");
        assert!((cv - 1.0).abs() < 0.03, "cv {cv}");
    }

    #[test]
    fn gamma_cv_follows_burstiness() {
        // CV of gamma gaps = 1/sqrt(k): k = 0.25 → 2.0, k = 4 → 0.5.
        for (k, want_cv) in [(0.25, 2.0), (4.0, 0.5)] {
            let g = gaps(ArrivalProcess::Gamma { burstiness: k }, 50.0, 80_000, 11);
            let (mean, cv) = mean_cv(&g);
            assert!((mean - 0.02).abs() < 0.02 * 0.03, "k={k} mean {mean}");
            assert!((cv - want_cv).abs() < want_cv * 0.05, "k={k} cv {cv}");
        }
    }

    #[test]
    fn poisson_counts_per_window_have_variance_equal_mean() {
        // A Poisson process: counts in unit windows have mean = variance = rate.
        let s = ArrivalSchedule::new(20.0, ArrivalProcess::Poisson, 3).unwrap();
        let mut counts = vec![0u32; 2_000];
        for t in s.take_while(|t| t.as_secs_f64() < 2_000.0) {
            counts[t.as_secs() as usize] += 1;
        }
        let x: Vec<f64> = counts.iter().map(|c| f64::from(*c)).collect();
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        assert!((mean - 20.0).abs() < 0.5, "mean {mean}");
        assert!((var / mean - 1.0).abs() < 0.1, "dispersion {}", var / mean);
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a: Vec<Duration> = ArrivalSchedule::new(10.0, ArrivalProcess::Poisson, 42)
            .unwrap()
            .take(100)
            .collect();
        let b: Vec<Duration> = ArrivalSchedule::new(10.0, ArrivalProcess::Poisson, 42)
            .unwrap()
            .take(100)
            .collect();
        let c: Vec<Duration> = ArrivalSchedule::new(10.0, ArrivalProcess::Poisson, 43)
            .unwrap()
            .take(100)
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(
            ArrivalSchedule::new(0.0, ArrivalProcess::Poisson, 1).err(),
            Some(ArrivalError::BadRate(0.0))
        );
        assert!(ArrivalSchedule::new(f64::NAN, ArrivalProcess::Constant, 1).is_err());
        assert_eq!(
            ArrivalSchedule::new(1.0, ArrivalProcess::Gamma { burstiness: -1.0 }, 1).err(),
            Some(ArrivalError::BadBurstiness(-1.0))
        );
    }
}
