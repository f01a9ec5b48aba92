//! The workload's types as written in `workload.yaml` (see the [module docs](super) for the
//! format), the limits on levels and windows shared with the command line, the built-in
//! workload, and the check of a workload against a server's context window.

use super::datasets::Dataset;
use super::distributions::LengthDist;
use super::hints;
use crate::arrivals::ArrivalProcess;
use headroom_core::run::LoadMode;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

/// The whole `workload.yaml`, as written (see the [`workload`](crate::workload) docs for the
/// format).
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
pub(super) struct Shown {
    value: f64,
}

pub(super) fn show_number(value: f64) -> Shown {
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

/// Dataset file format (see the [`workload`](crate::workload) docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetFormat {
    /// ShareGPT JSON: a list of `{conversations: [{from, value}]}`.
    Sharegpt,
    /// JSON Lines of `{"prompt": "…", "max_tokens": n?}`.
    Jsonl,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::test_support::{MIN, parse};

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
}
