//! HTTP-level fault injection: 5xx answers, slow start, stalled streams, mid-stream disconnects.
//!
//! Faults act in the HTTP layer, in front of the engine, the way a broken proxy, an overloaded
//! API server or a flaky network would; engine-level faults (thermal throttling, an XID event, a
//! power cap) live in [`crate::SimSpec`]. What each fault does to the engine's own metrics is
//! part of its definition, because the diagnosis must tell them apart:
//!
//! | fault | client sees | engine sees |
//! |---|---|---|
//! | `error_500_rate`, `error_503_rate` | a vLLM-shaped 500 `InternalServerError` / 503 `ServiceUnavailableError` JSON body | nothing (only `http_requests_total{status="5xx"}` counts it) |
//! | `slow_start_rate`, `slow_start_s` | TTFT longer by `slow_start_s` | the request arrives `slow_start_s` later (server TTFT unchanged) |
//! | `stall_rate`, `stall_s` | one gap of `stall_s` between two content chunks | nothing: the engine keeps generating; the tokens are delivered in a burst after the pause |
//! | `disconnect_rate` | the connection closes mid-stream, with no `data: [DONE]` | the request is cancelled as a client that went away: vLLM 0.32 drops it without counting it in any `vllm:request_success_total{finished_reason}` (`abort` included) or finished-request histogram; only its TTFT and the tokens already produced stay counted (see [`crate::Engine::cancel`]) |
//!
//! Decisions are drawn per completion request from `(seed, request index)` (index = arrival order
//! of `/v1/completions` and `/v1/chat/completions` requests, from 0), so a run with the same seed
//! and the same request order injects the same faults. Stalls and disconnects apply to streaming
//! requests only; the token after which they happen is drawn uniformly over
//! `[1, max(1, expected_output_tokens − 1)]`, so they fall mid-stream.
//!
//! YAML form (every key optional, defaults all zero):
//! ```yaml
//! seed: 7              # default: the engine seed (SimSpec.seed)
//! error_500_rate: 0.01 # fraction of completion requests answered with a 500
//! error_503_rate: 0.0  # fraction answered with a 503
//! slow_start_rate: 0.05
//! slow_start_s: 2.0
//! stall_rate: 0.02
//! stall_s: 5.0
//! disconnect_rate: 0.01
//! ```

use serde::{Deserialize, Serialize};

use super::seeded;

/// Fault-injection settings of the HTTP layer (see the module doc for each fault's effect).
///
/// Rates are fractions of completion requests in `[0, 1]`; durations are seconds `≥ 0`.
/// `Faults::default()` injects nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Seed of every fault decision; `None` uses the engine seed (`SimSpec.seed`).
    pub seed: Option<u64>,
    /// Fraction of completion requests answered with HTTP 500 `InternalServerError`.
    pub error_500_rate: f64,
    /// Fraction of completion requests answered with HTTP 503 `ServiceUnavailableError`.
    pub error_503_rate: f64,
    /// Fraction of completion requests whose admission to the engine is delayed by `slow_start_s`.
    pub slow_start_rate: f64,
    /// Extra delay before a slow-start request reaches the engine, seconds.
    pub slow_start_s: f64,
    /// Fraction of streaming requests that pause once, mid-stream, for `stall_s`.
    pub stall_rate: f64,
    /// Length of a stream stall, seconds.
    pub stall_s: f64,
    /// Fraction of streaming requests cut mid-stream without `data: [DONE]`.
    pub disconnect_rate: f64,
}

/// A `Faults` value that cannot be used: names the field and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultsError {
    /// A field is out of its range.
    #[error("faults.{field}: expected {expected}, got {got}")]
    Invalid {
        /// The field name, as in YAML.
        field: &'static str,
        /// What the field accepts.
        expected: &'static str,
        /// The value given.
        got: String,
    },
    /// The YAML text could not be read as a `Faults` mapping.
    #[error(
        "faults YAML: {0} (expected a mapping with keys seed, error_500_rate, error_503_rate, slow_start_rate, slow_start_s, stall_rate, stall_s, disconnect_rate)"
    )]
    Yaml(String),
}

/// What happens to one completion request, drawn by [`Faults::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultPlan {
    /// Answer with this 5xx status instead of serving the request.
    pub error_status: Option<u16>,
    /// Delay before the request is handed to the engine, seconds (0 = none).
    pub slow_start_s: f64,
    /// Pause `stall_s` once this many tokens have been sent (streams only).
    pub stall_after_tokens: Option<u32>,
    /// Cut the connection once this many tokens have been sent (streams only).
    pub disconnect_after_tokens: Option<u32>,
}

// Independent decision streams.
const S_ERROR: u64 = 1;
const S_SLOW: u64 = 2;
const S_STALL: u64 = 3;
const S_STALL_AT: u64 = 4;
const S_CUT: u64 = 5;
const S_CUT_AT: u64 = 6;

impl Faults {
    /// Parses the YAML form shown in the module doc and validates it.
    ///
    /// # Errors
    /// [`FaultsError::Yaml`] for text that is not such a mapping (unknown keys included),
    /// [`FaultsError::Invalid`] naming the first field out of range.
    pub fn from_yaml_str(text: &str) -> Result<Faults, FaultsError> {
        let f: Faults =
            serde_saphyr::from_str(text).map_err(|e| FaultsError::Yaml(e.to_string()))?;
        f.validate()?;
        Ok(f)
    }

    /// Checks every rate is in `[0, 1]`, the two error rates sum to at most 1, and durations
    /// are finite and `≥ 0`.
    ///
    /// # Errors
    /// [`FaultsError::Invalid`] naming the first offending field.
    pub fn validate(&self) -> Result<(), FaultsError> {
        const MAX_FAULT_DELAY_S: f64 = 3600.0;
        let rates = [
            ("error_500_rate", self.error_500_rate),
            ("error_503_rate", self.error_503_rate),
            ("slow_start_rate", self.slow_start_rate),
            ("stall_rate", self.stall_rate),
            ("disconnect_rate", self.disconnect_rate),
        ];
        for (field, v) in rates {
            if !(0.0..=1.0).contains(&v) {
                return Err(FaultsError::Invalid {
                    field,
                    expected: "a fraction in [0, 1]",
                    got: v.to_string(),
                });
            }
        }
        let sum = self.error_500_rate + self.error_503_rate;
        if sum > 1.0 {
            return Err(FaultsError::Invalid {
                field: "error_503_rate",
                expected: "error_500_rate + error_503_rate <= 1",
                got: format!("{} + {} = {sum}", self.error_500_rate, self.error_503_rate),
            });
        }
        for (field, v) in [
            ("slow_start_s", self.slow_start_s),
            ("stall_s", self.stall_s),
        ] {
            // An hour bounds every injected delay: longer is a typo, and a delay beyond
            // Duration's range would panic the request's task.
            if !(v.is_finite() && (0.0..=MAX_FAULT_DELAY_S).contains(&v)) {
                return Err(FaultsError::Invalid {
                    field,
                    expected: "a number of seconds from 0 to 3600",
                    got: v.to_string(),
                });
            }
        }
        Ok(())
    }

    /// True when no fault can ever fire.
    pub fn is_inert(&self) -> bool {
        self.error_500_rate <= 0.0
            && self.error_503_rate <= 0.0
            && (self.slow_start_rate <= 0.0 || self.slow_start_s <= 0.0)
            && (self.stall_rate <= 0.0 || self.stall_s <= 0.0)
            && self.disconnect_rate <= 0.0
    }

    /// The faults of completion request number `index` (arrival order from 0), whose output is
    /// expected to be `expected_output_tokens` long; `default_seed` is used when `seed` is unset.
    pub fn plan(
        &self,
        default_seed: u64,
        index: u64,
        stream: bool,
        expected_output_tokens: u32,
    ) -> FaultPlan {
        let seed = self.seed.unwrap_or(default_seed);
        let mut plan = FaultPlan::default();
        let u = seeded::unit(seed, S_ERROR, index);
        if u < self.error_500_rate {
            plan.error_status = Some(500);
            return plan;
        }
        if u < self.error_500_rate + self.error_503_rate {
            plan.error_status = Some(503);
            return plan;
        }
        if self.slow_start_s > 0.0 && seeded::unit(seed, S_SLOW, index) < self.slow_start_rate {
            plan.slow_start_s = self.slow_start_s;
        }
        if stream {
            let hi = expected_output_tokens.saturating_sub(1).max(1);
            if self.stall_s > 0.0 && seeded::unit(seed, S_STALL, index) < self.stall_rate {
                plan.stall_after_tokens = Some(seeded::uniform_u32(seed, S_STALL_AT, index, 1, hi));
            }
            if seeded::unit(seed, S_CUT, index) < self.disconnect_rate {
                plan.disconnect_after_tokens =
                    Some(seeded::uniform_u32(seed, S_CUT_AT, index, 1, hi));
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_beyond_an_hour_or_not_finite_are_refused() {
        for (field, v) in [
            ("slow_start_s", 1e300),
            ("slow_start_s", 3600.5),
            ("stall_s", f64::INFINITY),
            ("stall_s", f64::NAN),
            ("stall_s", -0.1),
        ] {
            let mut f = Faults::default();
            match field {
                "slow_start_s" => f.slow_start_s = v,
                _ => f.stall_s = v,
            }
            let e = f.validate().unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("0 to 3600"), "{v}: {e}");
        }
        let ok = Faults {
            slow_start_s: 3600.0,
            stall_s: 0.0,
            ..Faults::default()
        };
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn default_is_inert_and_plans_nothing() {
        let f = Faults::default();
        assert!(f.is_inert());
        for i in 0..1000 {
            assert_eq!(f.plan(1, i, true, 100), FaultPlan::default());
        }
    }

    #[test]
    fn rates_are_respected_statistically() {
        let f = Faults {
            error_500_rate: 0.1,
            error_503_rate: 0.05,
            slow_start_rate: 0.2,
            slow_start_s: 1.0,
            stall_rate: 0.3,
            stall_s: 2.0,
            disconnect_rate: 0.25,
            seed: Some(99),
        };
        let n = 20_000u64;
        let (mut e500, mut e503, mut slow, mut stall, mut cut, mut served) = (0, 0, 0, 0, 0, 0);
        for i in 0..n {
            let p = f.plan(0, i, true, 50);
            match p.error_status {
                Some(500) => e500 += 1,
                Some(503) => e503 += 1,
                _ => {
                    served += 1;
                    slow += u32::from(p.slow_start_s > 0.0);
                    if let Some(k) = p.stall_after_tokens {
                        assert!((1..=49).contains(&k));
                        stall += 1;
                    }
                    if let Some(k) = p.disconnect_after_tokens {
                        assert!((1..=49).contains(&k));
                        cut += 1;
                    }
                }
            }
        }
        // Binomial standard deviations at n = 20,000 are below 0.0035; allow 4 sigma (0.014).
        let frac = |k: u32, of: u64| f64::from(k) / of as f64;
        assert!((frac(e500, n) - 0.10).abs() < 0.014, "500: {e500}");
        assert!((frac(e503, n) - 0.05).abs() < 0.014, "503: {e503}");
        assert!((frac(slow, served) - 0.20).abs() < 0.014, "slow: {slow}");
        assert!((frac(stall, served) - 0.30).abs() < 0.014, "stall: {stall}");
        assert!((frac(cut, served) - 0.25).abs() < 0.014, "cut: {cut}");
    }

    #[test]
    fn non_streaming_requests_never_stall_or_disconnect() {
        let f = Faults {
            stall_rate: 1.0,
            stall_s: 1.0,
            disconnect_rate: 1.0,
            ..Faults::default()
        };
        let p = f.plan(3, 0, false, 10);
        assert_eq!(p.stall_after_tokens, None);
        assert_eq!(p.disconnect_after_tokens, None);
        let p = f.plan(3, 0, true, 1);
        assert_eq!(p.stall_after_tokens, Some(1));
        assert_eq!(p.disconnect_after_tokens, Some(1));
    }

    #[test]
    fn yaml_round_trip_and_errors_name_the_field() {
        let f =
            Faults::from_yaml_str("error_500_rate: 0.5\nstall_s: 3\nstall_rate: 0.1\n").unwrap();
        assert_eq!(f.error_500_rate, 0.5);
        assert_eq!(f.stall_s, 3.0);
        assert_eq!(f.seed, None);
        let e = Faults::from_yaml_str("stall_rate: 1.5\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "faults.stall_rate: expected a fraction in [0, 1], got 1.5"
        );
        let e = Faults::from_yaml_str("error_500_rate: 0.7\nerror_503_rate: 0.6\n").unwrap_err();
        assert!(e.to_string().starts_with("faults.error_503_rate:"), "{e}");
        let e = Faults::from_yaml_str("stal_rate: 0.1\n").unwrap_err();
        assert!(matches!(e, FaultsError::Yaml(_)), "{e}");
        let e = Faults::from_yaml_str("slow_start_s: -1\n").unwrap_err();
        assert!(e.to_string().contains("slow_start_s"), "{e}");
    }
}
