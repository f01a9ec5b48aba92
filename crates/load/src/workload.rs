//! The workload spec (`workload.yaml`): request classes, the load to offer, windows and seed.
//!
//! ```yaml
//! model: tiny                 # optional; default: the first model of GET /v1/models
//! seed: 42                    # default: a new random seed per run (recorded in manifest.json)
//! warmup: 5s                  # default 5s; requests started in warm-up are not recorded
//! measure: 30s                # default 30s; requests that START inside are recorded
//! load:
//!   mode: concurrency         # concurrency (closed loop) | rate (open loop, req/s)
//!   levels: [1, 2, 4, 8]      # or `auto` (the sweep brackets, then bisects); default auto
//!   arrival: poisson          # rate mode: constant | poisson | {gamma: {burstiness: 0.5}}
//!   max_concurrency: 256      # rate mode: optional cap on requests in flight
//! classes:
//!   - name: claims_assistant  # letters, digits, `_`, `-`, `.`
//!     weight: 1               # share in the mix (> 0); default 1
//!     endpoint: chat          # chat (/v1/chat/completions) | completions (/v1/completions)
//!     prompt_tokens: {uniform: {min: 40, max: 60}}
//!     max_tokens: {uniform: {min: 500, max: 1000}}
//!     ignore_eos: true        # vLLM extension: generate until max_tokens; default false
//!     shared_prefix_tokens: 200
//!   - name: from_dataset
//!     dataset: {path: sharegpt.json, format: sharegpt}
//!     max_tokens: dataset     # output length of the dataset's reply (see below)
//! ```
//!
//! **Length distributions** (`prompt_tokens`, `max_tokens`), all in tokens, all clamped to
//! `[min, max]` where given and rounded to the nearest integer:
//! - `{fixed: 50}`;
//! - `{uniform: {min: 40, max: 60}}`, inclusive;
//! - `{normal: {mean: 50, stddev: 10, min: 20, max: 80}}`, clamped (not truncated-resampled);
//! - `{lognormal: {median: 300, p90: 1200, min: 10, max: 4000}}`: parameterised by its median
//!   and 90th percentile (easier to read off a production histogram than μ and σ):
//!   `μ = ln(median)`, `σ = ln(p90 / median) / z₀.₉`, `z₀.₉ = 1.2815515655446004`; clamped;
//! - `dataset`: taken from the class's dataset (prompt: the entry's text; `max_tokens`: the
//!   whitespace word count of the entry's reply, ShareGPT, or its `max_tokens` field, JSONL).
//!
//! `prompt_tokens` is the *unique* part of each prompt; `shared_prefix_tokens` more tokens of the
//! same leading text precede it in every request of the class (a system message on the chat
//! endpoint), so the server's prefix cache is exercised. A class with a dataset and no
//! `prompt_tokens` draws its prompts from the dataset.
//!
//! **Datasets** (`dataset: {path, format}`; a relative path is resolved against the directory of
//! the workload file):
//! - `sharegpt`: a JSON list of `{"conversations": [{"from": "human", "value": "…"}, {"from":
//!   "gpt", "value": "…"}, …]}`; the prompt is the first `human` (or `user`) turn, the reply the
//!   next `gpt` (or `assistant`) turn. Entries without a human turn are skipped.
//! - `jsonl`: one JSON object per line, `{"prompt": "…"}` with an optional `"max_tokens": n`;
//!   blank lines are skipped.
//!
//! **Load** (`load:`):
//! - `mode: concurrency`, closed loop: each level keeps that many requests in flight (whole
//!   numbers, 1 to 10⁶); a new request starts when one ends, so a slow server slows the load
//!   down with it.
//! - `mode: rate`, open loop: each level is an arrival rate in req/s (0.001 to 10⁶), sent on a
//!   schedule that does not wait for the server. `arrival` (default `poisson`) spaces the
//!   arrivals, mean gap `1 / rate` in every case: `constant` (every gap `1 / rate`), `poisson`
//!   (exponential gaps, CV 1) or `{gamma: {burstiness: k}}` (gamma gaps of shape `k`, CV
//!   `1 / √k`: `k = 1` is Poisson, `k < 1` burstier, `k > 1` more regular; the parameter of
//!   vLLM's `vllm bench serve`, see [`crate::arrivals`]). `max_concurrency` (optional) caps
//!   the requests in flight: an arrival that finds the cap reached waits, and its wait is send
//!   lag. Latency counts from each request's intended send time, and the send lag (actual −
//!   intended) is recorded (see [`crate::runner`]). `arrival` and `max_concurrency` are ignored
//!   in concurrency mode.
//! - `levels`: a list, run in order, or `auto` (the sweep brackets, then bisects).
//!
//! Errors name the file, the line and column, and the field (`classes[0].max_tokens: …`), and say
//! what was expected; a value of the wrong shape is answered with the form to write instead
//! (`max_tokens: 50` → `write {fixed: 50}`; `arrival: gamma` → `write {gamma: {burstiness:
//! 0.5}}`).

use crate::arrivals::ArrivalProcess;
use headroom_core::run::LoadMode;
use headroom_core::yaml::{YamlError, parse_yaml};
use rand::{Rng, RngExt};
use rand_distr::{Distribution, LogNormal, Normal};
use serde::de::{self, IgnoredAny, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_saphyr::Spanned;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `z` of the standard normal at the 90th percentile, `Φ⁻¹(0.9)`.
pub const Z_P90: f64 = 1.281_551_565_544_600_4;

/// The built-in workload: the claims assistant of the seed guides (short questions behind a
/// shared system prompt, long answers).
///
/// `claims_assistant`: 200 shared-prefix tokens + 40–60 unique prompt tokens, answers of
/// 500–1,000 tokens with `ignore_eos`, chat endpoint. `examples/workload-mixed.yaml` adds a
/// long-context class (prompts of about 2,000 tokens) and so the mix phase.
pub const DEFAULT_WORKLOAD_YAML: &str = "\
# Built-in workload: the claims assistant of the seed guides. One class, so the embedded sweep
# finishes in under two minutes; examples/workload-mixed.yaml adds a long-context class and the mix.
# No seed: each run draws its own (manifest.json records it; --seed N repeats a run).
warmup: 5s
measure: 30s
load:
  mode: concurrency          # closed loop: levels are requests in flight
  levels: auto
  # Open loop instead: requests arrive at a rate, levels are req/s, and latency counts from
  # each request's intended send time (examples/workload-open-loop.yaml is a complete one):
  # mode: rate
  # levels: [2, 4, 8, 16]    # req/s, or auto
  # arrival: poisson         # constant | poisson | {gamma: {burstiness: 0.5}}: gamma shape k,
  #                          # CV of gaps 1/sqrt(k); k = 1 is Poisson, k < 1 burstier
  # max_concurrency: 256     # optional cap on requests in flight; omit to measure the server alone
classes:
  - name: claims_assistant
    weight: 1
    endpoint: chat
    shared_prefix_tokens: 200
    prompt_tokens: {uniform: {min: 40, max: 60}}
    max_tokens: {uniform: {min: 500, max: 1000}}
    ignore_eos: true
";

/// The whole `workload.yaml`, as written (see the module docs for the format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Served model name; `None` means the first of `GET /v1/models`.
    #[serde(default)]
    pub model: Option<String>,
    /// Request classes, at least one.
    pub classes: Vec<ClassSpec>,
    /// Load to offer.
    #[serde(deserialize_with = "hints::load")]
    pub load: LoadSpec,
    /// Warm-up per level (written `5s`; `0` allowed); requests started in it are not recorded.
    #[serde(default = "default_warmup", with = "duration_str")]
    pub warmup: Duration,
    /// Measurement window per level (written `30s`, > 0).
    #[serde(default = "default_measure", with = "duration_str")]
    pub measure: Duration,
    /// Seed for arrivals, the class mix and prompt synthesis; `None`: the sweep draws a new one
    /// per run (and records it), so a rerun against the same server does not replay prompts its
    /// prefix cache already holds.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Longest warm-up or measurement window a level may ask for (24 h): every load test stops by
/// itself in bounded time; a soak belongs in several runs, each with its own results.
pub const MAX_LEVEL_SPAN: Duration = Duration::from_secs(24 * 3600);

/// Highest level in either mode: 1,000,000 requests in flight or req/s.
pub const MAX_LEVEL: f64 = 1e6;

/// Lowest open-loop rate, req/s (one request per 1,000 s): below it a level of minutes sends
/// nothing, and the gap between arrivals no longer fits a clock.
pub const MIN_RATE_PER_S: f64 = 0.001;

/// Most tokens any one request may ask for in a single count (prompt, shared prefix or
/// `max_tokens`), and in prefix + prompt + `max_tokens` together. Far above any served context
/// window (the largest open-weight models serve about 10⁶), so it rejects only typos, while
/// keeping synthesised prompts within memory (about 5 bytes per token).
pub const MAX_REQUEST_TOKENS: u64 = 10_000_000;

/// Checks one load level as written in the workload or on the command line.
///
/// Concurrency: a whole number from 1 to [`MAX_LEVEL`]; rate: a finite number of req/s from
/// [`MIN_RATE_PER_S`] to [`MAX_LEVEL`].
///
/// # Errors
/// What was given and what was expected (the caller adds the field or flag name).
pub fn check_level(mode: LoadMode, x: f64) -> Result<(), String> {
    let x = show_number(x);
    match mode {
        LoadMode::Concurrency => {
            if x.value.is_finite()
                && x.value >= 1.0
                && x.value.fract() == 0.0
                && x.value <= MAX_LEVEL
            {
                Ok(())
            } else {
                Err(format!(
                    "{x}: expected whole numbers from 1 to 1000000 (requests in flight) in concurrency mode"
                ))
            }
        }
        LoadMode::Rate => {
            if x.value.is_finite() && (MIN_RATE_PER_S..=MAX_LEVEL).contains(&x.value) {
                Ok(())
            } else {
                Err(format!(
                    "{x}: expected rates from 0.001 to 1000000 req/s in rate mode"
                ))
            }
        }
    }
}

/// A number as given, displayed compactly in messages: `1e-300`, not 300 digits.
struct Shown {
    value: f64,
}

fn show_number(value: f64) -> Shown {
    Shown { value }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.value;
        if v.is_finite() && v != 0.0 && !(1e-3..1e7).contains(&v.abs()) {
            write!(f, "{v:e}")
        } else {
            write!(f, "{v}")
        }
    }
}

/// A warm-up (`allow_zero`) or measurement window given in seconds, as a [`Duration`]: finite,
/// not negative, positive unless `allow_zero`, at most [`MAX_LEVEL_SPAN`].
///
/// # Errors
/// What was given and what was expected (the caller adds the field or flag name).
pub fn window_from_secs(secs: f64, allow_zero: bool) -> Result<Duration, String> {
    let shown = show_number(secs);
    let want = if allow_zero {
        "expected a duration from 0 to 86400 s (24 h)"
    } else {
        "expected a duration above 0 and at most 86400 s (24 h)"
    };
    if !secs.is_finite() || secs < 0.0 || (!allow_zero && secs == 0.0) {
        return Err(format!("{shown}: {want}"));
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX_LEVEL_SPAN => Ok(d),
        _ => Err(format!(
            "{shown} s is longer than a day per level; {want} (split a soak into several runs)"
        )),
    }
}

fn default_warmup() -> Duration {
    Duration::from_secs(5)
}

fn default_measure() -> Duration {
    Duration::from_secs(30)
}

/// One request class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// Class name, matched against `slo.yaml` and used in file names.
    pub name: String,
    /// Share of the mix (relative, > 0).
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// Endpoint to call.
    #[serde(default)]
    pub endpoint: Endpoint,
    /// Unique prompt tokens per request; `None` with a dataset means `dataset`.
    #[serde(default, deserialize_with = "hints::prompt_tokens")]
    pub prompt_tokens: Option<LengthDist>,
    /// Output cap per request (`max_tokens`).
    #[serde(deserialize_with = "hints::max_tokens")]
    pub max_tokens: LengthDist,
    /// Send vLLM's `ignore_eos: true` so every answer runs to `max_tokens`.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Tokens of shared leading text in every prompt of the class.
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    /// Optional dataset of prompts.
    #[serde(default, deserialize_with = "hints::dataset")]
    pub dataset: Option<DatasetSpec>,
}

fn default_weight() -> f64 {
    1.0
}

/// OpenAI-compatible endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `POST /v1/chat/completions`: the shared prefix is a system message, the prompt a user
    /// message (the server's chat template adds tokens).
    #[default]
    Chat,
    /// `POST /v1/completions`: prefix and prompt as one `prompt` string.
    Completions,
}

impl Endpoint {
    /// URL path, e.g. `/v1/chat/completions`.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }

    /// Short name as written in YAML (`chat`, `completions`).
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        }
    }
}

/// A dataset of prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// File path; relative paths are resolved against the workload file's directory.
    pub path: PathBuf,
    /// File format.
    pub format: DatasetFormat,
}

/// Dataset file format (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetFormat {
    /// ShareGPT JSON: a list of `{conversations: [{from, value}]}`.
    Sharegpt,
    /// JSON Lines of `{"prompt": "…", "max_tokens": n?}`.
    Jsonl,
}

/// A length distribution in tokens (see the module docs).
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

    fn validate(&self) -> Result<(), String> {
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

/// Load section of the workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Closed loop (levels are concurrencies) or open loop (levels are req/s).
    #[serde(deserialize_with = "hints::mode")]
    pub mode: LoadMode,
    /// Levels to run, or `auto`.
    #[serde(default)]
    pub levels: Levels,
    /// Open-loop gap distribution (ignored in concurrency mode).
    #[serde(default, deserialize_with = "hints::arrival")]
    pub arrival: ArrivalProcess,
    /// Open-loop cap on requests in flight.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
}

impl LoadSpec {
    /// The [`LevelMode`](crate::arrivals::LevelMode) of one level: `level` requests in flight
    /// (rounded, at least 1) in concurrency mode, `level` req/s with this spec's arrival process
    /// and cap in rate mode.
    pub fn level_mode(&self, level: f64) -> crate::arrivals::LevelMode {
        match self.mode {
            LoadMode::Concurrency => {
                crate::arrivals::LevelMode::Concurrency(level.round().clamp(1.0, 1e6) as u32)
            }
            LoadMode::Rate => crate::arrivals::LevelMode::Rate {
                rate_per_s: level,
                arrival: self.arrival,
                max_concurrency: self.max_concurrency,
            },
        }
    }
}

/// Levels of a sweep: a list, or `auto` (chosen by the sweep's search).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Levels {
    /// Chosen automatically.
    #[default]
    Auto,
    /// Exactly these, in this order.
    List(Vec<f64>),
}

impl Serialize for Levels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Levels::Auto => s.serialize_str("auto"),
            Levels::List(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Levels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Levels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`auto` or a list of numbers such as [1, 2, 4, 8]")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Levels, E> {
                Err(E::custom(format!(
                    "load.levels: a single number is not a list; write [{v}] or auto"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Levels, E> {
                Err(E::custom(format!(
                    "load.levels: a single number is not a list; write [{v}] or auto"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Levels, E> {
                Err(E::custom(format!(
                    "load.levels: a single number is not a list; write [{}] or auto",
                    show_number(v)
                )))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Levels, E> {
                if v == "auto" {
                    Ok(Levels::Auto)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Levels, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element::<f64>()? {
                    v.push(x);
                }
                Ok(Levels::List(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Durations written as `5s`, `500ms`, `2m` (see [`headroom_core::slo::parse_duration_s`]); `0`
/// is allowed for the warm-up. Serialised back as seconds with a unit, e.g. `5s`.
mod duration_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}s", d.as_secs_f64()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum NumOrStr {
            Num(f64),
            Str(String),
        }
        let text = match NumOrStr::deserialize(d)? {
            NumOrStr::Num(0.0) => return Ok(Duration::ZERO),
            NumOrStr::Num(n) => format!("{n}"),
            NumOrStr::Str(s) => s,
        };
        let t = text.trim();
        if t == "0" || t.trim_end_matches(|c: char| c.is_ascii_alphabetic()) == "0" {
            return Ok(Duration::ZERO);
        }
        let secs = headroom_core::slo::parse_duration_s(t).map_err(serde::de::Error::custom)?;
        // Checked: a huge figure (`99999999999999999999999s`) is an error, not a panic; the
        // 24 h bound is applied by the workload's validation.
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "`{t}`: expected a duration from 0 to 24h, such as 30s"
            ))
        })
    }
}

impl<'de> Deserialize<'de> for LengthDist {
    /// The forms of the module docs; errors say what to write instead (see [`hints`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(hints::FormVisitor::<LengthDist>::new("length distribution"))
    }
}

/// Errors that say what to write, for every field whose value is a mapping or a named form:
/// the length distributions (`prompt_tokens`, `max_tokens`), `load.arrival`, `dataset`, `load`
/// and `load.mode` (`load.levels` is in [`Levels`]' own visitor).
///
/// serde's derived enums read a bare scalar as a unit variant, so `max_tokens: 50` came out as
/// "unknown variant `50`", and a bare word where a mapping is needed (`arrival: gamma`) as
/// "expected mapping start" at the *next* line. Here each field reads its value as whatever it
/// is (scalar, list or mapping) and answers a wrong shape with the field's name and the form to
/// write (`max_tokens: a bare number is not a distribution; write {fixed: 50}`); the YAML
/// parser adds the file, line and column.
mod hints {
    use super::{ArrivalProcess, DatasetSpec, LengthDist, LoadMode, LoadSpec, show_number};
    use serde::Deserialize;
    use serde::de::value::MapAccessDeserializer;
    use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};
    use std::fmt;
    use std::marker::PhantomData;

    /// What a value turned out to be, when it is not a mapping.
    pub(super) enum Found {
        /// A number, as written back (`50`, `0.5`).
        Number(String),
        /// A string or a bare word.
        Word(String),
        /// `true` or `false`.
        Bool(bool),
        /// A list.
        List,
        /// `~`, `null` or nothing.
        Null,
    }

    impl Found {
        /// `a bare number`, `` `gamma` ``, …: what was found, for messages.
        fn describe(&self) -> String {
            match self {
                Found::Number(n) => format!("a bare number ({n})"),
                Found::Word(w) => format!("`{w}`"),
                Found::Bool(b) => format!("`{b}`"),
                Found::List => "a list".into(),
                Found::Null => "an empty value".into(),
            }
        }
    }

    /// A field's value type with named forms.
    pub(super) trait Form: Sized {
        /// The forms, for `expecting` (after "expected").
        const FORMS: &'static str;
        /// Answers a value that is not a mapping: `Ok` for an accepted bare word, else the
        /// message (without the field name).
        fn other(found: Found) -> Result<Self, String>;
        /// Reads a mapping.
        fn map<'de, A: MapAccess<'de>>(field: &str, map: A) -> Result<Self, A::Error>;
    }

    /// Reads one [`Form`], naming `field` in its errors.
    pub(super) struct FormVisitor<T> {
        field: &'static str,
        form: PhantomData<T>,
    }

    impl<T> FormVisitor<T> {
        pub(super) fn new(field: &'static str) -> Self {
            FormVisitor {
                field,
                form: PhantomData,
            }
        }

        fn other<E: de::Error>(&self, found: Found) -> Result<T, E>
        where
            T: Form,
        {
            T::other(found).map_err(|m| E::custom(format!("{}: {m}", self.field)))
        }
    }

    impl<'de, T: Form> Visitor<'de> for FormVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(T::FORMS)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
            self.other(Found::Bool(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            self.other(Found::Number(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            self.other(Found::Number(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
            self.other(Found::Number(show_number(v).to_string()))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            self.other(Found::Word(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<T, E> {
            self.other(Found::Null)
        }
        fn visit_none<E: de::Error>(self) -> Result<T, E> {
            self.other(Found::Null)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
            self.other(Found::List)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::map(self.field, map)
        }
    }

    /// Reads a one-key mapping (`{uniform: {…}}`): its key, then `read` for the value, then
    /// refuses a second key.
    fn one_key<'de, A: MapAccess<'de>, T>(
        field: &str,
        mut map: A,
        empty: &str,
        read: impl FnOnce(&str, &mut A) -> Result<T, A::Error>,
    ) -> Result<T, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom(format!(
                "{field}: an empty mapping; {empty}"
            )));
        };
        let value = read(&key, &mut map)?;
        if let Some(second) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "{field}: `{key}` and `{second}` in one mapping, but it takes one form; {empty}"
            )));
        }
        Ok(value)
    }

    /// Reads a parameter mapping (`{min: 40, max: 60}`) into `P`; anything else is `hint`.
    struct Params<P> {
        field: String,
        hint: String,
        params: PhantomData<P>,
    }

    fn params<'de, A: MapAccess<'de>, P: DeserializeOwned>(
        map: &mut A,
        field: &str,
        hint: String,
    ) -> Result<P, A::Error> {
        map.next_value_seed(Params {
            field: field.to_string(),
            hint,
            params: PhantomData,
        })
    }

    impl<'de, P: DeserializeOwned> DeserializeSeed<'de> for Params<P> {
        type Value = P;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<P, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de, P: DeserializeOwned> Visitor<'de> for Params<P> {
        type Value = P;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(&self.hint)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<P, A::Error> {
            P::deserialize(MapAccessDeserializer::new(map))
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_none<E: de::Error>(self) -> Result<P, E> {
            Err(E::custom(format!("{}: {}", self.field, self.hint)))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<P, A::Error> {
            Err(de::Error::custom(format!("{}: {}", self.field, self.hint)))
        }
    }

    /// `{uniform: {min, max}}`'s parameters.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct UniformParams {
        min: u32,
        max: u32,
    }

    /// `{normal: {mean, stddev, min, max}}`'s parameters.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NormalParams {
        mean: f64,
        stddev: f64,
        min: u32,
        max: u32,
    }

    /// `{lognormal: {median, p90, min, max}}`'s parameters.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct LognormalParams {
        median: f64,
        p90: f64,
        min: u32,
        max: u32,
    }

    /// `{gamma: {burstiness}}`'s parameter.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct GammaParams {
        burstiness: f64,
    }

    const DIST_FORMS: &str = "expected {fixed: 50}, {uniform: {min: 40, max: 60}}, {normal: {mean: 50, stddev: 10, min: 20, max: 80}}, {lognormal: {median: 300, p90: 1200, min: 10, max: 4000}} or dataset";

    /// The form to write for a distribution named without its parameters.
    fn dist_needs(name: &str) -> Option<String> {
        let (what, example) = match name {
            "fixed" => ("its token count", "{fixed: 50}"),
            "uniform" => ("its bounds", "{uniform: {min: 40, max: 60}}"),
            "normal" => (
                "its parameters",
                "{normal: {mean: 50, stddev: 10, min: 20, max: 80}}",
            ),
            "lognormal" => (
                "its parameters",
                "{lognormal: {median: 300, p90: 1200, min: 10, max: 4000}}",
            ),
            _ => return None,
        };
        Some(format!("{name} needs {what}: write {example}"))
    }

    impl Form for LengthDist {
        const FORMS: &'static str = "a length distribution such as {fixed: 50} or {uniform: {min: 40, max: 60}}, or dataset";

        fn other(found: Found) -> Result<Self, String> {
            let number = match &found {
                Found::Number(n) => Some(n.clone()),
                Found::Word(w) if w.trim().parse::<f64>().is_ok() => Some(w.trim().to_string()),
                _ => None,
            };
            if let Some(n) = number {
                return Err(if n.parse::<u32>().is_ok() {
                    format!("a bare number is not a distribution; write {{fixed: {n}}}")
                } else {
                    format!(
                        "a bare number ({n}) is not a distribution; write a whole number of tokens as {{fixed: 50}}"
                    )
                });
            }
            match found {
                Found::Word(w) if w == "dataset" => Ok(LengthDist::Dataset),
                Found::Word(w) if dist_needs(&w).is_some() => {
                    Err(dist_needs(&w).unwrap_or_default())
                }
                Found::List => Err(
                    "a list is not a distribution; for a range write {uniform: {min: 40, max: 60}}"
                        .into(),
                ),
                other => Err(format!(
                    "{} is not a distribution; {DIST_FORMS}",
                    other.describe()
                )),
            }
        }

        fn map<'de, A: MapAccess<'de>>(field: &str, map: A) -> Result<Self, A::Error> {
            one_key(field, map, DIST_FORMS, |key, map| {
                let hint = || dist_needs(key).unwrap_or_default();
                match key {
                    "fixed" => Ok(LengthDist::Fixed(map.next_value()?)),
                    "uniform" => {
                        let p: UniformParams = params(map, field, hint())?;
                        Ok(LengthDist::Uniform {
                            min: p.min,
                            max: p.max,
                        })
                    }
                    "normal" => {
                        let p: NormalParams = params(map, field, hint())?;
                        Ok(LengthDist::Normal {
                            mean: p.mean,
                            stddev: p.stddev,
                            min: p.min,
                            max: p.max,
                        })
                    }
                    "lognormal" => {
                        let p: LognormalParams = params(map, field, hint())?;
                        Ok(LengthDist::Lognormal {
                            median: p.median,
                            p90: p.p90,
                            min: p.min,
                            max: p.max,
                        })
                    }
                    "dataset" => Err(de::Error::custom(format!(
                        "{field}: write dataset alone ({field}: dataset), not as a mapping"
                    ))),
                    other => Err(de::Error::custom(format!(
                        "{field}: unknown distribution `{other}`; expected one of fixed, uniform, normal, lognormal (or the bare word dataset)"
                    ))),
                }
            })
        }
    }

    const GAMMA_NEEDS: &str = "gamma needs its burstiness: write {gamma: {burstiness: 0.5}} (the gamma shape k of the gaps: 1 is Poisson, below 1 burstier, above 1 more regular)";
    const ARRIVAL_FORMS: &str = "expected constant, poisson or {gamma: {burstiness: 0.5}}";

    impl Form for ArrivalProcess {
        const FORMS: &'static str =
            "an arrival process: constant, poisson or {gamma: {burstiness: 0.5}}";

        fn other(found: Found) -> Result<Self, String> {
            match found {
                Found::Word(w) if w == "constant" => Ok(ArrivalProcess::Constant),
                Found::Word(w) if w == "poisson" => Ok(ArrivalProcess::Poisson),
                Found::Word(w) if w == "gamma" => Err(GAMMA_NEEDS.into()),
                Found::Number(n) => Err(format!(
                    "a bare number is not an arrival process; for gamma gaps of burstiness {n} write {{gamma: {{burstiness: {n}}}}}, else constant or poisson"
                )),
                other => Err(format!(
                    "{} is not an arrival process; {ARRIVAL_FORMS}",
                    other.describe()
                )),
            }
        }

        fn map<'de, A: MapAccess<'de>>(field: &str, map: A) -> Result<Self, A::Error> {
            one_key(field, map, ARRIVAL_FORMS, |key, map| match key {
                "gamma" => {
                    let p: GammaParams = params(map, field, GAMMA_NEEDS.into())?;
                    Ok(ArrivalProcess::Gamma {
                        burstiness: p.burstiness,
                    })
                }
                "constant" | "poisson" => Err(de::Error::custom(format!(
                    "{field}: write {key} alone ({field}: {key}), not as a mapping"
                ))),
                other => Err(de::Error::custom(format!(
                    "{field}: unknown arrival process `{other}`; {ARRIVAL_FORMS}"
                ))),
            })
        }
    }

    impl Form for DatasetSpec {
        const FORMS: &'static str =
            "a dataset: {path: FILE, format: sharegpt} or {path: FILE, format: jsonl}";

        fn other(found: Found) -> Result<Self, String> {
            match found {
                Found::Word(path) => {
                    let format = if path.ends_with(".jsonl") {
                        "jsonl"
                    } else {
                        "sharegpt"
                    };
                    Err(format!(
                        "a bare path is not enough; write {{path: {path}, format: {format}}} (format: sharegpt or jsonl)"
                    ))
                }
                other => Err(format!(
                    "{} is not a dataset; expected {{path: FILE, format: sharegpt}} or {{path: FILE, format: jsonl}}",
                    other.describe()
                )),
            }
        }

        fn map<'de, A: MapAccess<'de>>(_: &str, map: A) -> Result<Self, A::Error> {
            DatasetSpec::deserialize(MapAccessDeserializer::new(map))
        }
    }

    const LOAD_FORMS: &str = "write {mode: rate, levels: [1, 2, 4], arrival: poisson} (open loop, req/s) or {mode: concurrency, levels: auto} (closed loop)";

    impl Form for LoadSpec {
        const FORMS: &'static str = "the load to offer, such as {mode: concurrency, levels: auto}";

        fn other(found: Found) -> Result<Self, String> {
            Err(format!(
                "{} is not a load section; {LOAD_FORMS}",
                found.describe()
            ))
        }

        fn map<'de, A: MapAccess<'de>>(_: &str, map: A) -> Result<Self, A::Error> {
            LoadSpec::deserialize(MapAccessDeserializer::new(map))
        }
    }

    impl Form for LoadMode {
        const FORMS: &'static str = "concurrency or rate";

        fn other(found: Found) -> Result<Self, String> {
            match found {
                Found::Word(w) if w == "concurrency" => Ok(LoadMode::Concurrency),
                Found::Word(w) if w == "rate" => Ok(LoadMode::Rate),
                other => Err(format!(
                    "{}: expected concurrency (closed loop: levels are requests in flight) or rate (open loop: levels are req/s)",
                    other.describe()
                )),
            }
        }

        fn map<'de, A: MapAccess<'de>>(field: &str, _: A) -> Result<Self, A::Error> {
            Err(de::Error::custom(format!(
                "{field}: a mapping: expected concurrency (closed loop: levels are requests in flight) or rate (open loop: levels are req/s)"
            )))
        }
    }

    pub(super) fn max_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<LengthDist, D::Error> {
        d.deserialize_any(FormVisitor::new("max_tokens"))
    }

    /// `prompt_tokens` may be left empty (`~`): the class's dataset then supplies the prompts.
    pub(super) fn prompt_tokens<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<LengthDist>, D::Error> {
        d.deserialize_option(Optional(FormVisitor::new("prompt_tokens")))
    }

    pub(super) fn dataset<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DatasetSpec>, D::Error> {
        d.deserialize_option(Optional(FormVisitor::new("dataset")))
    }

    pub(super) fn arrival<'de, D: Deserializer<'de>>(d: D) -> Result<ArrivalProcess, D::Error> {
        d.deserialize_any(FormVisitor::new("load.arrival"))
    }

    pub(super) fn load<'de, D: Deserializer<'de>>(d: D) -> Result<LoadSpec, D::Error> {
        d.deserialize_any(FormVisitor::new("load"))
    }

    pub(super) fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<LoadMode, D::Error> {
        d.deserialize_any(FormVisitor::new("load.mode"))
    }

    /// `None` for an empty value, else the inner form.
    struct Optional<T>(FormVisitor<T>);

    impl<'de, T: Form> Visitor<'de> for Optional<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(T::FORMS)
        }
        fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_any(self.0).map(Some)
        }
    }
}

/// One dataset entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetEntry {
    /// Prompt text.
    pub prompt: String,
    /// Output length hint in tokens (ShareGPT: the reply's whitespace word count; JSONL:
    /// `max_tokens`), when the file has one.
    pub output_tokens: Option<u32>,
}

/// A loaded dataset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dataset {
    /// Entries in file order (at least one).
    pub entries: Vec<DatasetEntry>,
}

impl Dataset {
    /// Reads a dataset file.
    ///
    /// # Errors
    /// A message naming the file (and the line for JSONL) when it cannot be read, does not match
    /// the format, or holds no usable entry.
    pub fn load(path: &Path, format: DatasetFormat) -> Result<Dataset, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read dataset `{}`: {e}", path.display()))?;
        let ds = match format {
            DatasetFormat::Sharegpt => Dataset::parse_sharegpt(&text),
            DatasetFormat::Jsonl => Dataset::parse_jsonl(&text),
        }
        .map_err(|e| format!("dataset `{}`: {e}", path.display()))?;
        if ds.entries.is_empty() {
            return Err(format!(
                "dataset `{}` has no usable entry; expected at least one prompt",
                path.display()
            ));
        }
        Ok(ds)
    }

    /// Parses ShareGPT JSON (see the module docs).
    ///
    /// # Errors
    /// When the text is not a JSON list of `{conversations: [{from, value}]}`.
    pub fn parse_sharegpt(text: &str) -> Result<Dataset, String> {
        #[derive(Deserialize)]
        struct Entry {
            #[serde(default)]
            conversations: Vec<Turn>,
        }
        #[derive(Deserialize)]
        struct Turn {
            from: String,
            value: String,
        }
        let entries: Vec<Entry> = serde_json::from_str(text).map_err(|e| {
            format!("expected ShareGPT JSON (a list of {{\"conversations\": [{{\"from\", \"value\"}}]}}): {e}")
        })?;
        let mut out = Vec::new();
        for e in entries {
            let Some(i) = e
                .conversations
                .iter()
                .position(|t| t.from == "human" || t.from == "user")
            else {
                continue;
            };
            let reply = e.conversations[i + 1..]
                .iter()
                .find(|t| t.from == "gpt" || t.from == "assistant")
                .map(|t| t.value.split_whitespace().count() as u32);
            let prompt = e.conversations[i].value.clone();
            if prompt.trim().is_empty() {
                continue;
            }
            out.push(DatasetEntry {
                prompt,
                output_tokens: reply.filter(|n| *n > 0),
            });
        }
        Ok(Dataset { entries: out })
    }

    /// Parses JSON Lines of `{"prompt": "…", "max_tokens": n?}`.
    ///
    /// # Errors
    /// The 1-based line number and what was expected, for the first bad line.
    pub fn parse_jsonl(text: &str) -> Result<Dataset, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            prompt: String,
            #[serde(default)]
            max_tokens: Option<u32>,
        }
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let l: Line = serde_json::from_str(line).map_err(|e| {
                format!(
                    "line {}: expected {{\"prompt\": \"…\", \"max_tokens\": n (optional)}}: {e}",
                    i + 1
                )
            })?;
            out.push(DatasetEntry {
                prompt: l.prompt,
                output_tokens: l.max_tokens,
            });
        }
        Ok(Dataset { entries: out })
    }

    /// True when every entry has an output length hint.
    pub fn has_output_lengths(&self) -> bool {
        self.entries.iter().all(|e| e.output_tokens.is_some())
    }
}

/// A validated workload with its datasets loaded.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The spec as written (defaults filled in).
    pub spec: WorkloadSpec,
    /// Per class (same order as `spec.classes`): its loaded dataset, if it has one.
    pub datasets: Vec<Option<Arc<Dataset>>>,
    /// Where it came from (`<built-in>` for the default).
    pub origin: PathBuf,
}

impl Workload {
    /// Reads, parses and validates `workload.yaml`, loading its datasets.
    ///
    /// # Errors
    /// [`YamlError`] naming the file, with line, column and field of the first problem.
    pub fn load(path: &Path) -> Result<Workload, YamlError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| YamlError::new(path, format!("cannot read file: {e}")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Workload::parse(&text, path, base)
    }

    /// Parses and validates workload text; `origin` names it in errors and `base_dir` resolves
    /// relative dataset paths.
    ///
    /// # Errors
    /// As [`Workload::load`].
    pub fn parse(text: &str, origin: &Path, base_dir: &Path) -> Result<Workload, YamlError> {
        let spec: WorkloadSpec =
            parse_yaml(text, origin).map_err(|e| name_the_class(e, text, origin))?;
        // A second, lenient pass records where each field sits, so that semantic errors (min >
        // max, weight ≤ 0, a missing dataset) carry a line and column too.
        let locs: Locs = parse_yaml(text, origin).unwrap_or_default();
        let err = |loc: Option<(u64, u64)>, field: String, msg: String| {
            YamlError::at(origin, text, loc, format!("{field}: {msg}"))
        };
        let class_loc = |i: usize, f: fn(&ClassLocs) -> &Option<Spanned<IgnoredAny>>| {
            locs.classes.get(i).and_then(|c| {
                f(c).as_ref()
                    .map(span_pos)
                    .or(c.name.as_ref().map(span_pos))
            })
        };
        let top = |f: fn(&Locs) -> &Option<Spanned<IgnoredAny>>| f(&locs).as_ref().map(span_pos);

        if spec.classes.is_empty() {
            return Err(err(
                None,
                "classes".into(),
                "expected at least one request class".into(),
            ));
        }
        if let Some(m) = &spec.model
            && m.trim().is_empty()
        {
            return Err(err(
                top(|l| &l.model),
                "model".into(),
                "empty; expected a served model name or no `model` field".into(),
            ));
        }
        if spec.measure.is_zero() {
            return Err(err(
                top(|l| &l.measure),
                "measure".into(),
                "expected a positive duration such as 30s".into(),
            ));
        }
        // Every load test stops by itself in bounded time: a level longer than a day is a typo
        // (`30h` for `30s`); a soak belongs in several runs, each with its own results.
        for (value, field, at) in [
            (spec.measure, "measure", top(|l| &l.measure)),
            (spec.warmup, "warmup", top(|l| &l.warmup)),
        ] {
            if value > MAX_LEVEL_SPAN {
                return Err(err(
                    at,
                    field.into(),
                    format!(
                        "{} s is longer than a day per level; expected at most 24h (split a soak into several runs)",
                        value.as_secs()
                    ),
                ));
            }
        }
        let mut datasets = Vec::with_capacity(spec.classes.len());
        for (i, c) in spec.classes.iter().enumerate() {
            let field = |f: &str| format!("classes[{i}] (`{}`).{f}", c.name);
            if c.name.is_empty()
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
            {
                return Err(err(
                    class_loc(i, |c| &c.name),
                    format!("classes[{i}].name"),
                    format!(
                        "`{}`: expected a non-empty name of letters, digits, `_`, `-` or `.`",
                        c.name
                    ),
                ));
            }
            if spec.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(err(
                    class_loc(i, |c| &c.name),
                    format!("classes[{i}].name"),
                    format!("`{}` is used twice; expected unique class names", c.name),
                ));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                return Err(err(
                    class_loc(i, |c| &c.weight),
                    field("weight"),
                    format!("{}: expected a positive number", c.weight),
                ));
            }
            if let Some(p) = &c.prompt_tokens
                && let Err(m) = p.validate()
            {
                return Err(err(
                    class_loc(i, |c| &c.prompt_tokens),
                    field("prompt_tokens"),
                    m,
                ));
            }
            if let Err(m) = c.max_tokens.validate() {
                return Err(err(class_loc(i, |c| &c.max_tokens), field("max_tokens"), m));
            }
            if c.max_tokens.min() == Some(0) {
                return Err(err(
                    class_loc(i, |c| &c.max_tokens),
                    field("max_tokens"),
                    "can be 0; expected at least 1 output token".into(),
                ));
            }
            if u64::from(c.shared_prefix_tokens) > MAX_REQUEST_TOKENS {
                return Err(err(
                    class_loc(i, |c| &c.shared_prefix_tokens),
                    field("shared_prefix_tokens"),
                    format!(
                        "{}: expected at most {MAX_REQUEST_TOKENS} tokens per request",
                        c.shared_prefix_tokens
                    ),
                ));
            }
            let most = u64::from(c.shared_prefix_tokens)
                + c.prompt_tokens
                    .as_ref()
                    .and_then(LengthDist::max)
                    .map_or(0, u64::from)
                + c.max_tokens.max().map_or(0, u64::from);
            if most > MAX_REQUEST_TOKENS {
                return Err(err(
                    class_loc(i, |c| &c.max_tokens),
                    field("max_tokens"),
                    format!(
                        "shared prefix + prompt + max_tokens can reach {most} tokens; expected at most {MAX_REQUEST_TOKENS} per request"
                    ),
                ));
            }
            let prompt_from_dataset = match &c.prompt_tokens {
                None => true,
                Some(LengthDist::Dataset) => true,
                Some(_) => false,
            };
            match (&c.dataset, prompt_from_dataset) {
                (None, true) => {
                    return Err(err(
                        class_loc(i, |c| &c.prompt_tokens),
                        field("prompt_tokens"),
                        "no dataset to draw prompts from; expected a length distribution such as {uniform: {min: 40, max: 60}} or a `dataset`".into(),
                    ));
                }
                (Some(_), false) => {
                    return Err(err(
                        class_loc(i, |c| &c.dataset),
                        field("dataset"),
                        "given, but prompt_tokens is synthetic; expected `prompt_tokens: dataset` (or no prompt_tokens) with a dataset".into(),
                    ));
                }
                _ => {}
            }
            if !prompt_from_dataset
                && c.shared_prefix_tokens == 0
                && c.prompt_tokens.as_ref().and_then(LengthDist::min) == Some(0)
            {
                return Err(err(
                    class_loc(i, |c| &c.prompt_tokens),
                    field("prompt_tokens"),
                    "can be 0 with no shared prefix; expected prompts of at least 1 token".into(),
                ));
            }
            let ds = match &c.dataset {
                None => {
                    if c.max_tokens == LengthDist::Dataset {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            "`dataset` but the class has no dataset; expected a length distribution".into(),
                        ));
                    }
                    None
                }
                Some(d) => {
                    let path = if d.path.is_absolute() {
                        d.path.clone()
                    } else {
                        base_dir.join(&d.path)
                    };
                    let ds = Dataset::load(&path, d.format)
                        .map_err(|m| err(class_loc(i, |c| &c.dataset), field("dataset.path"), m))?;
                    let longest = ds
                        .entries
                        .iter()
                        .filter_map(|e| e.output_tokens)
                        .max()
                        .unwrap_or(0);
                    if c.max_tokens == LengthDist::Dataset
                        && u64::from(longest) > MAX_REQUEST_TOKENS
                    {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            format!(
                                "`dataset`, but an entry of `{}` asks for {longest} output tokens; expected at most {MAX_REQUEST_TOKENS} per request",
                                path.display()
                            ),
                        ));
                    }
                    if c.max_tokens == LengthDist::Dataset && !ds.has_output_lengths() {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            format!(
                                "`dataset`, but not every entry of `{}` has an output length (a ShareGPT reply or a JSONL `max_tokens`); expected a length distribution",
                                path.display()
                            ),
                        ));
                    }
                    Some(Arc::new(ds))
                }
            };
            datasets.push(ds);
        }
        let load = &spec.load;
        if let Levels::List(v) = &load.levels {
            if v.is_empty() {
                return Err(err(
                    top(|l| &l.load),
                    "load.levels".into(),
                    "empty list; expected levels such as [1, 2, 4] or `auto`".into(),
                ));
            }
            for x in v {
                if let Err(m) = check_level(load.mode, *x) {
                    return Err(err(top(|l| &l.load), "load.levels".into(), m));
                }
            }
        }
        if let ArrivalProcess::Gamma { burstiness } = load.arrival
            && !(burstiness.is_finite() && burstiness > 0.0)
        {
            return Err(err(
                top(|l| &l.load),
                "load.arrival.gamma.burstiness".into(),
                format!("{burstiness}: expected a positive number (1 = Poisson, < 1 burstier)"),
            ));
        }
        if load.max_concurrency == Some(0) {
            return Err(err(
                top(|l| &l.load),
                "load.max_concurrency".into(),
                "0: expected at least 1 request in flight, or no cap".into(),
            ));
        }
        Ok(Workload {
            spec,
            datasets,
            origin: origin.to_path_buf(),
        })
    }

    /// The built-in workload ([`DEFAULT_WORKLOAD_YAML`]).
    pub fn builtin() -> Workload {
        Workload::parse(
            DEFAULT_WORKLOAD_YAML,
            Path::new("<built-in workload>"),
            Path::new("."),
        )
        .unwrap_or_else(|e| unreachable!("the built-in workload is valid: {e}"))
    }

    /// Checks every class against the server's context window (vLLM's `max_model_len` from
    /// `GET /v1/models`). vLLM rejects a request whose prompt tokens + `max_tokens` exceed it
    /// (HTTP 400), so a class whose *shortest* request (shared prefix + shortest prompt +
    /// smallest `max_tokens`) exceeds it would send nothing but errors. Prompts drawn from a
    /// dataset count as 0 tokens here (their token count is known only to the server), and the
    /// chat template adds tokens: the check is a lower bound.
    ///
    /// Returns warnings for classes whose *longest* request may exceed the window.
    ///
    /// # Errors
    /// A message naming the first class none of whose requests fits, with the figures.
    pub fn check_context(&self, max_model_len: u64) -> Result<Vec<String>, String> {
        let mut warnings = Vec::new();
        for (i, c) in self.spec.classes.iter().enumerate() {
            let prefix = u64::from(c.shared_prefix_tokens);
            let synthetic = c
                .prompt_tokens
                .as_ref()
                .filter(|p| **p != LengthDist::Dataset);
            let hints = self.datasets.get(i).and_then(Option::as_ref).map(|d| {
                let v = d.entries.iter().filter_map(|e| e.output_tokens);
                (v.clone().min().unwrap_or(0), v.max().unwrap_or(0))
            });
            let (out_min, out_max) = match (&c.max_tokens, hints) {
                (LengthDist::Dataset, Some((lo, hi))) => (u64::from(lo), Some(u64::from(hi))),
                (d, _) => (d.min().map_or(0, u64::from), d.max().map(u64::from)),
            };
            let shortest =
                prefix + synthetic.and_then(LengthDist::min).map_or(0, u64::from) + out_min;
            if shortest > max_model_len {
                return Err(format!(
                    "class `{}`: every request needs at least {shortest} tokens (shared prefix {prefix} + prompt + max_tokens {out_min}), more than the server's max_model_len {max_model_len}: the server would reject all of them. Shorten the class's prompt_tokens or max_tokens in the workload",
                    c.name
                ));
            }
            let longest = synthetic
                .and_then(LengthDist::max)
                .zip(out_max)
                .map(|(p, o)| prefix + u64::from(p) + o);
            if let Some(l) = longest
                && l > max_model_len
            {
                warnings.push(format!(
                    "class `{}`: requests can reach {l} tokens (shared prefix + prompt + max_tokens), more than the server's max_model_len {max_model_len}: the longest ones will be rejected (HTTP 400) and count as errors",
                    c.name
                ));
            }
        }
        Ok(warnings)
    }

    /// Class weights normalised to shares summing to 1, in class order.
    pub fn shares(&self) -> Vec<f64> {
        let total: f64 = self.spec.classes.iter().map(|c| c.weight).sum();
        self.spec.classes.iter().map(|c| c.weight / total).collect()
    }
}

/// A class field's shape error (`max_tokens: a bare number …`, from [`hints`]) names only the
/// field; this names the class too (`classes[1] (`chat`).max_tokens: …`), as the validation's
/// messages do: the class is the last one that starts at or before the error's line.
fn name_the_class(mut e: YamlError, text: &str, origin: &Path) -> YamlError {
    #[derive(Deserialize)]
    struct Starts {
        #[serde(default)]
        classes: Vec<Spanned<IgnoredAny>>,
    }
    #[derive(Deserialize)]
    struct Names {
        #[serde(default)]
        classes: Vec<Name>,
    }
    #[derive(Deserialize)]
    struct Name {
        #[serde(default)]
        name: Option<String>,
    }
    let Some((line, _)) = e.location else {
        return e;
    };
    if !["prompt_tokens: ", "max_tokens: ", "dataset: "]
        .iter()
        .any(|f| e.message.starts_with(f))
    {
        return e;
    }
    let Ok(starts) = parse_yaml::<Starts>(text, origin) else {
        return e;
    };
    let Some(i) = starts.classes.iter().rposition(|c| span_pos(c).0 <= line) else {
        return e;
    };
    let name = parse_yaml::<Names>(text, origin)
        .ok()
        .and_then(|n| n.classes.into_iter().nth(i))
        .and_then(|n| n.name);
    e.message = match name {
        Some(n) => format!("classes[{i}] (`{n}`).{}", e.message),
        None => format!("classes[{i}].{}", e.message),
    };
    e
}

fn span_pos(s: &Spanned<IgnoredAny>) -> (u64, u64) {
    (s.referenced.line(), s.referenced.column())
}

/// Where fields sit in the file (lenient shadow of [`WorkloadSpec`]).
#[derive(Deserialize, Default)]
struct Locs {
    #[serde(default)]
    model: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    measure: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    warmup: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    load: Option<Spanned<IgnoredAny>>,
    #[serde(default, rename = "classes", deserialize_with = "de_class_locs")]
    classes: Vec<ClassLocs>,
}

fn de_class_locs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ClassLocs>, D::Error> {
    Ok(Option::<Vec<ClassLocs>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
struct ClassLocs {
    #[serde(default)]
    name: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    weight: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    prompt_tokens: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    max_tokens: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    dataset: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    shared_prefix_tokens: Option<Spanned<IgnoredAny>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::seeded_rng;

    fn parse(t: &str) -> Result<Workload, YamlError> {
        Workload::parse(t, Path::new("workload.yaml"), Path::new("/nonexistent"))
    }

    const MIN: &str = "load: {mode: concurrency, levels: [1, 2]}\nclasses:\n  - name: a\n    prompt_tokens: {fixed: 10}\n    max_tokens: {fixed: 5}\n";

    #[test]
    fn builtin_workload_resolves() {
        let w = Workload::builtin();
        let s = &w.spec;
        assert_eq!(s.model, None);
        assert_eq!(s.warmup, Duration::from_secs(5));
        assert_eq!(s.measure, Duration::from_secs(30));
        assert_eq!(s.load.mode, LoadMode::Concurrency);
        assert_eq!(s.load.levels, Levels::Auto);
        let c = &s.classes[0];
        assert_eq!(c.name, "claims_assistant");
        assert_eq!(c.endpoint, Endpoint::Chat);
        assert_eq!(c.shared_prefix_tokens, 200);
        assert_eq!(
            c.max_tokens,
            LengthDist::Uniform {
                min: 500,
                max: 1000
            }
        );
        assert!(c.ignore_eos);
        assert_eq!(s.classes.len(), 1);
        assert_eq!(w.shares(), vec![1.0]);
        assert_eq!(w.datasets, vec![None]);
        // The mixed example adds the long-context class at weight 1 against 9.
        let m = Workload::parse(
            include_str!("../../../examples/workload-mixed.yaml"),
            Path::new("examples/workload-mixed.yaml"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(m.spec.classes[1].name, "long_context");
        assert_eq!(m.shares(), vec![0.9, 0.1]);
    }

    #[test]
    fn minimal_and_defaults() {
        let w = parse(MIN).unwrap();
        let c = &w.spec.classes[0];
        assert_eq!(c.weight, 1.0);
        assert_eq!(c.endpoint, Endpoint::Chat);
        assert!(!c.ignore_eos);
        assert_eq!(w.spec.load.levels, Levels::List(vec![1.0, 2.0]));
        assert_eq!(w.spec.load.arrival, ArrivalProcess::Poisson);
        assert_eq!(w.spec.seed, None);
        assert_eq!(
            w.spec.load.level_mode(3.6),
            crate::arrivals::LevelMode::Concurrency(4)
        );
    }

    #[test]
    fn arrival_and_durations_parse() {
        let t = "warmup: 0\nmeasure: 1.5m\nload: {mode: rate, levels: [0.5, 2], arrival: {gamma: {burstiness: 0.5}}, max_concurrency: 64}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {lognormal: {median: 100, p90: 400, min: 1, max: 4000}}, max_tokens: {normal: {mean: 200, stddev: 50, min: 1, max: 400}}}\n";
        let w = parse(t).unwrap();
        assert_eq!(w.spec.warmup, Duration::ZERO);
        assert_eq!(w.spec.measure, Duration::from_secs(90));
        assert_eq!(
            w.spec.load.arrival,
            ArrivalProcess::Gamma { burstiness: 0.5 }
        );
        assert_eq!(w.spec.load.max_concurrency, Some(64));
        assert_eq!(w.spec.classes[0].endpoint, Endpoint::Completions);
        assert_eq!(
            w.spec.load.level_mode(2.0),
            crate::arrivals::LevelMode::Rate {
                rate_per_s: 2.0,
                arrival: ArrivalProcess::Gamma { burstiness: 0.5 },
                max_concurrency: Some(64)
            }
        );
        // round trip through YAML keeps the meaning
        let y = serde_saphyr::to_string(&w.spec).unwrap();
        let back = parse(&y).unwrap();
        assert_eq!(back.spec, w.spec);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        for (text, needles) in [
            (
                MIN.replace("{fixed: 5}", "{uniform: {min: 9, max: 3}}"),
                vec![
                    "workload.yaml:5:",
                    "classes[0] (`a`).max_tokens",
                    "min 9 > max 3",
                ],
            ),
            (
                MIN.replace("- name: a\n", "- name: a\n    weight: 0\n"),
                vec!["workload.yaml:4:", "classes[0] (`a`).weight", "positive"],
            ),
            (
                MIN.replace("prompt_tokens: {fixed: 10}", "prompt_tokens: {fixd: 10}"),
                vec!["workload.yaml:", "fixd"],
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "dataset: {path: nope.json, format: sharegpt}",
                ),
                vec!["classes[0] (`a`).dataset.path", "nope.json", "cannot read"],
            ),
            (
                MIN.replace("levels: [1, 2]", "levels: [1.5]"),
                vec!["load.levels", "whole numbers"],
            ),
            (MIN.replace("levels: [1, 2]", "levels: some"), vec!["auto"]),
            (
                MIN.replace("{fixed: 5}", "{fixed: 0}"),
                vec!["max_tokens", "at least 1"],
            ),
            (
                MIN.replace("prompt_tokens: {fixed: 10}", "prompt_tokens: dataset"),
                vec!["prompt_tokens", "no dataset"],
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "prompt_tokens: {lognormal: {median: 10, p90: 5, min: 1, max: 9}}",
                ),
                vec!["0 < median < p90"],
            ),
            (
                MIN.replace("- name: a", "- name: a/b"),
                vec!["classes[0].name"],
            ),
            (
                format!(
                    "{MIN}  - name: a\n    prompt_tokens: {{fixed: 1}}\n    max_tokens: {{fixed: 1}}\n"
                ),
                vec!["used twice"],
            ),
            (
                format!("warmup: 5 parsecs\n{MIN}"),
                vec!["workload.yaml:1:", "unknown unit"],
            ),
            (
                format!("measure: soon\n{MIN}"),
                vec!["workload.yaml:1:", "`soon`"],
            ),
            (
                format!("measure: 99999999h\n{MIN}"),
                vec!["workload.yaml:1:", "measure", "at most 24h"],
            ),
            (
                format!("warmup: 25h\n{MIN}"),
                vec!["workload.yaml:1:", "warmup", "at most 24h"],
            ),
            (
                MIN.replace("levels: [1, 2]", "levels: [1, 2000000]"),
                vec!["load.levels", "2000000", "1 to 1000000"],
            ),
            (
                MIN.replace(
                    "mode: concurrency, levels: [1, 2]",
                    "mode: rate, levels: [1e300]",
                ),
                vec!["load.levels", "to 1000000 req/s"],
            ),
            (format!("{MIN}extra: 1\n"), vec!["extra"]),
        ] {
            let e = match parse(&text) {
                Ok(_) => panic!("accepted: {text}"),
                Err(e) => e.to_string(),
            };
            for n in needles {
                assert!(e.contains(n), "`{n}` not in: {e}");
            }
            assert!(!e.contains("error:") && !e.contains("<input>"), "{e}");
        }
    }

    #[test]
    fn datasets_load_and_validate() {
        let dir = tempfile::tempdir().unwrap();
        let sg = dir.path().join("sg.json");
        std::fs::write(
            &sg,
            r#"[{"id":"x","conversations":[{"from":"system","value":"s"},{"from":"human","value":"What is a claim?"},{"from":"gpt","value":"A claim is a request"}]},
                {"conversations":[{"from":"gpt","value":"orphan"}]},
                {"conversations":[{"from":"human","value":"Hi there"}]}]"#,
        )
        .unwrap();
        let ds = Dataset::load(&sg, DatasetFormat::Sharegpt).unwrap();
        assert_eq!(ds.entries.len(), 2);
        assert_eq!(ds.entries[0].prompt, "What is a claim?");
        assert_eq!(ds.entries[0].output_tokens, Some(5)); // "A claim is a request"
        assert_eq!(ds.entries[1].output_tokens, None);
        assert!(!ds.has_output_lengths());

        let jl = dir.path().join("p.jsonl");
        std::fs::write(
            &jl,
            "{\"prompt\": \"one two\"}\n\n{\"prompt\": \"three\", \"max_tokens\": 7}\n",
        )
        .unwrap();
        let ds = Dataset::load(&jl, DatasetFormat::Jsonl).unwrap();
        assert_eq!(ds.entries.len(), 2);
        assert_eq!(ds.entries[1].output_tokens, Some(7));

        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"prompt\": \"ok\"}\n{\"text\": \"no\"}\n").unwrap();
        let e = Dataset::load(&bad, DatasetFormat::Jsonl).unwrap_err();
        assert!(e.contains("line 2") && e.contains("bad.jsonl"), "{e}");

        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "\n").unwrap();
        let e = Dataset::load(&empty, DatasetFormat::Jsonl).unwrap_err();
        assert!(e.contains("no usable entry"), "{e}");

        // relative to the workload's directory; max_tokens: dataset needs every reply length
        let text = "load: {mode: rate}\nclasses:\n  - name: sg\n    dataset: {path: sg.json, format: sharegpt}\n    max_tokens: dataset\n";
        let e = Workload::parse(text, Path::new("w.yaml"), dir.path()).unwrap_err();
        assert!(e.to_string().contains("output length"), "{e}");
        let text = text.replace("max_tokens: dataset", "max_tokens: {fixed: 10}");
        let w = Workload::parse(&text, Path::new("w.yaml"), dir.path()).unwrap();
        assert_eq!(w.datasets[0].as_ref().unwrap().entries.len(), 2);
        let text = "load: {mode: rate}\nclasses:\n  - name: e\n    dataset: {path: empty.jsonl, format: jsonl}\n    max_tokens: {fixed: 1}\n";
        let e = Workload::parse(text, Path::new("w.yaml"), dir.path()).unwrap_err();
        assert!(
            e.to_string().contains("w.yaml:4:") && e.to_string().contains("no usable entry"),
            "{e}"
        );
    }

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

    /// Every way a duration can be out of range is an error at its line, never a panic: values
    /// past `Duration`'s range (which `Duration::from_secs_f64` panics on), negative, not a
    /// number, and longer than a day.
    #[test]
    fn any_out_of_range_duration_is_an_error_at_its_line() {
        for field in ["measure", "warmup"] {
            for v in [
                "99999999999999999999999s",
                "1e30",
                "1e300h",
                "18446744073709551616s",
                "-5",
                "-1s",
                ".nan",
                ".inf",
                "-.inf",
                "25h",
                "86401s",
            ] {
                let text = format!("{field}: {v}\n{MIN}");
                let got = std::panic::catch_unwind(|| parse(&text));
                let e = match got {
                    Err(_) => panic!("{field}: {v} panicked"),
                    Ok(Ok(_)) => panic!("{field}: {v} accepted"),
                    Ok(Err(e)) => e.to_string(),
                };
                assert!(e.contains("workload.yaml:1:"), "{field}: {v}: {e}");
            }
        }
        // The bounds themselves are accepted.
        let w = parse(&format!("measure: 24h\nwarmup: 0\n{MIN}")).unwrap();
        assert_eq!(w.spec.measure, Duration::from_secs(86_400));
        assert_eq!(w.spec.warmup, Duration::ZERO);
    }

    #[test]
    fn window_seconds_are_checked_like_the_yaml_fields() {
        for bad in [
            -1.0,
            -0.0001,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e19,
            1e300,
            86_400.001,
        ] {
            assert!(window_from_secs(bad, true).is_err(), "{bad}");
            assert!(window_from_secs(bad, false).is_err(), "{bad}");
        }
        assert!(window_from_secs(0.0, false).is_err());
        assert_eq!(window_from_secs(0.0, true), Ok(Duration::ZERO));
        assert_eq!(window_from_secs(86_400.0, false), Ok(MAX_LEVEL_SPAN));
        assert_eq!(
            window_from_secs(1.5, false),
            Ok(Duration::from_millis(1500))
        );
    }

    /// One rule for levels, in the YAML and on the command line: concurrency is a whole number
    /// 1..=10⁶; a rate is 0.001..=10⁶ req/s (a rate of 10⁻³⁰⁰ once killed the pacer thread).
    #[test]
    fn levels_outside_their_mode_range_are_refused() {
        let bad_any = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -3.0,
            0.0,
            1e300,
            1e6 + 1.0,
        ];
        for x in bad_any {
            assert!(check_level(LoadMode::Concurrency, x).is_err(), "{x}");
            assert!(check_level(LoadMode::Rate, x).is_err(), "{x}");
        }
        for x in [0.5, 1.5, 1e-300] {
            assert!(check_level(LoadMode::Concurrency, x).is_err(), "{x}");
        }
        for x in [1e-300, 5e-324, 0.000_999] {
            assert!(check_level(LoadMode::Rate, x).is_err(), "{x}");
        }
        for x in [1.0, 64.0, 1e6] {
            assert_eq!(check_level(LoadMode::Concurrency, x), Ok(()));
        }
        for x in [0.001, 0.5, 1e6] {
            assert_eq!(check_level(LoadMode::Rate, x), Ok(()));
        }
        // Compact in messages: not 300 digits.
        let e = check_level(LoadMode::Rate, 1e-300).unwrap_err();
        assert!(e.starts_with("1e-300:"), "{e}");
        // And the same in the file, at the line of `load`.
        let e = parse(&MIN.replace(
            "mode: concurrency, levels: [1, 2]",
            "mode: rate, levels: [1e-300]",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("workload.yaml:1:") && e.contains("0.001"), "{e}");
    }

    /// Token counts beyond [`MAX_REQUEST_TOKENS`] are refused at their field, for every field
    /// that sets a request's size and for their sum (they once aborted the process allocating
    /// the prompt).
    #[test]
    fn token_counts_beyond_the_cap_are_refused() {
        let over = MAX_REQUEST_TOKENS + 1;
        for (text, needle) in [
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "prompt_tokens: {fixed: 4000000000}",
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    &format!("prompt_tokens: {{uniform: {{min: 1, max: {over}}}}}"),
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    &format!(
                        "prompt_tokens: {{lognormal: {{median: 10, p90: 20, min: 1, max: {over}}}}}"
                    ),
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace("max_tokens: {fixed: 5}", "max_tokens: {fixed: 4294967295}"),
                "max_tokens",
            ),
            (
                MIN.replace(
                    "max_tokens: {fixed: 5}",
                    &format!("max_tokens: {{normal: {{mean: 5, stddev: 1, min: 1, max: {over}}}}}"),
                ),
                "max_tokens",
            ),
            (
                MIN.replace(
                    "- name: a\n",
                    "- name: a\n    shared_prefix_tokens: 4294967295\n",
                ),
                "shared_prefix_tokens",
            ),
            // Each under the cap, the sum over it.
            (
                MIN.replace(
                    "- name: a\n",
                    "- name: a\n    shared_prefix_tokens: 6000000\n",
                )
                .replace("{fixed: 5}", "{fixed: 5000000}"),
                "shared prefix + prompt + max_tokens can reach 11000010",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(needle), "`{needle}` not in {e}");
            assert!(e.contains("workload.yaml:"), "{e}");
        }
        // The cap itself is allowed.
        let ok = MIN.replace(
            "max_tokens: {fixed: 5}",
            &format!("max_tokens: {{fixed: {}}}", MAX_REQUEST_TOKENS - 10),
        );
        parse(&ok).unwrap();
        // A dataset's output lengths count too.
        let dir = std::env::temp_dir().join(format!("headroom-wl-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("d.jsonl"),
            "{\"prompt\": \"hi\", \"max_tokens\": 4000000000}\n",
        )
        .unwrap();
        let t = "load: {mode: concurrency, levels: [1]}\nclasses:\n  - name: a\n    dataset: {path: d.jsonl, format: jsonl}\n    max_tokens: dataset\n";
        let e = Workload::parse(t, Path::new("workload.yaml"), &dir)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("4000000000 output tokens"), "{e}");
    }

    /// vLLM rejects prompt + max_tokens > max_model_len. Shortest request over it: an error;
    /// only the longest over it: a warning. Figures by hand: prefix 100 + prompt 40..60 +
    /// max_tokens 500..1000 → shortest 640, longest 1160.
    #[test]
    fn requests_are_checked_against_the_context_window() {
        let w = parse(
            "load: {mode: concurrency, levels: [1]}\nclasses:\n  - name: a\n    shared_prefix_tokens: 100\n    prompt_tokens: {uniform: {min: 40, max: 60}}\n    max_tokens: {uniform: {min: 500, max: 1000}}\n",
        )
        .unwrap();
        assert_eq!(w.check_context(1160), Ok(vec![]));
        let warn = w.check_context(1159).unwrap();
        assert_eq!(warn.len(), 1);
        assert!(
            warn[0].contains("1160") && warn[0].contains("1159"),
            "{warn:?}"
        );
        assert_eq!(w.check_context(640).unwrap().len(), 1);
        let e = w.check_context(639).unwrap_err();
        assert!(
            e.contains("class `a`") && e.contains("at least 640") && e.contains("639"),
            "{e}"
        );
    }

    #[test]
    fn lognormal_parameters_by_hand() {
        // median e², p90 e^(2 + 1.2816·0.5) → μ = 2, σ = 0.5
        let (mu, sigma) = lognormal_params(2f64.exp(), (2.0 + Z_P90 * 0.5).exp());
        assert!((mu - 2.0).abs() < 1e-12 && (sigma - 0.5).abs() < 1e-12);
    }
}
