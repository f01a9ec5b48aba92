//! The SLO file (`slo.yaml`): objectives per request class, and the error-budget policy.
//!
//! ```yaml
//! objectives:
//!   "*":                       # applies to every class unless the class overrides it
//!     ttft: {p95: 300ms}       # client TTFT, 95th percentile below 300 ms
//!     itl: {p95: 50ms}
//!     queue_time: {p95: 300ms} # server-side (vllm:request_queue_time_seconds)
//!     error_rate: 0.5%         # errors + aborts over all finished requests
//!   long_context:
//!     ttft: {p95: 2s}
//! budget: {window: 30d, freeze_at: 50%}
//! ```
//!
//! Durations accept `ns`, `us`, `ms`, `s`, `m`; ratios accept `0.5%` or `0.005`. Percentiles are
//! written `p50`, `p95`, `p99`, `p99.9` and must lie strictly between 0 and 100.

use crate::signal::LatencySignal;
use crate::yaml::{YamlError, parse_yaml};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One objective, resolved: either a latency percentile below a threshold, or an error ratio.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Objective {
    /// `signal`'s `percentile`-th percentile must be at most `threshold_s` seconds.
    Latency {
        /// Which latency.
        signal: LatencySignal,
        /// Percentile in (0, 100), e.g. 95.0.
        percentile: f64,
        /// Threshold in seconds.
        threshold_s: f64,
    },
    /// (errors + aborts) / finished requests must be at most `max_ratio` (0–1).
    ErrorRate {
        /// Maximum ratio, 0–1.
        max_ratio: f64,
    },
}

impl Objective {
    /// Short stable id, written `ttft_p95`, `error_rate` (in JSON, CSV and findings).
    pub fn id(&self) -> crate::objective::ObjectiveId {
        crate::objective::ObjectiveId::of(self)
    }

    /// Human form, e.g. `TTFT p95 < 300 ms`.
    pub fn describe(&self) -> String {
        match self {
            Objective::Latency {
                signal,
                percentile,
                threshold_s,
            } => format!(
                "{} p{} < {}",
                signal.display(),
                fmt_pct(*percentile),
                fmt_duration_s(*threshold_s)
            ),
            Objective::ErrorRate { max_ratio } => {
                format!("errors + aborts < {}%", fmt_num(max_ratio * 100.0))
            }
        }
    }
}

/// The objectives of one request class, resolved and in a stable order.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct SloSpec {
    /// Objectives, latency first in signal order, then error rate.
    pub objectives: Vec<Objective>,
}

/// Error-budget policy (SRE Workbook ch. 5): the budget of each objective is spent over
/// `window`; past `freeze_at` of it consumed, freeze non-essential tuning. Each objective carries
/// its own target (p95 → 95 % of requests within the threshold; `error_rate: 0.5%` → 99.5 %
/// good), so `target` is optional and enters no computation (the `slo` commands say so when a
/// file sets it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetPolicy {
    /// Rolling window, e.g. `30d` (kept as written; Prometheus syntax).
    pub window: String,
    /// Overall target as a ratio 0–1 (written `99%` or `0.99`), strictly below 1; optional and
    /// informational (OpenSLO imports keep a time-slice target here).
    #[serde(
        default,
        deserialize_with = "de_opt_ratio",
        skip_serializing_if = "Option::is_none"
    )]
    pub target: Option<f64>,
    /// Consumed share of the budget (0–1) at which tuning freezes.
    #[serde(deserialize_with = "de_ratio", default = "default_freeze")]
    pub freeze_at: f64,
}

fn default_freeze() -> f64 {
    0.5
}

/// The whole `slo.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloFile {
    /// Objectives per class name; `"*"` is the default for classes not listed.
    pub objectives: BTreeMap<String, ClassObjectives>,
    /// Optional error-budget policy.
    #[serde(default)]
    pub budget: Option<BudgetPolicy>,
}

/// Objectives of one class as written in YAML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClassObjectives {
    /// TTFT percentiles, e.g. `{p95: 300ms}`.
    #[serde(default, deserialize_with = "de_pcts")]
    pub ttft: BTreeMap<PctKey, f64>,
    /// ITL percentiles.
    #[serde(default, deserialize_with = "de_pcts")]
    pub itl: BTreeMap<PctKey, f64>,
    /// TPOT percentiles.
    #[serde(default, deserialize_with = "de_pcts")]
    pub tpot: BTreeMap<PctKey, f64>,
    /// E2E percentiles.
    #[serde(default, deserialize_with = "de_pcts")]
    pub e2e: BTreeMap<PctKey, f64>,
    /// Server queue-time percentiles.
    #[serde(default, deserialize_with = "de_pcts")]
    pub queue_time: BTreeMap<PctKey, f64>,
    /// Maximum error + abort ratio.
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub error_rate: Option<f64>,
}

/// A percentile key such as `p95` or `p99.9`, stored as thousandths of a percent so it orders
/// and compares exactly. Serialises as it is written in `slo.yaml` (`"p95"`, `"p99.9"`), so the
/// SLO recorded in a run's `manifest.json` reads `{"ttft": {"p95": 0.3}}` (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PctKey(pub u32);

impl Serialize for PctKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("p{}", fmt_pct(self.value())))
    }
}

impl PctKey {
    /// The percentile as a number in (0, 100).
    pub fn value(self) -> f64 {
        f64::from(self.0) / 1000.0
    }

    /// The key of percentile `p` (in (0, 100)), rounded to a thousandth as `slo.yaml` keeps it.
    pub fn of(p: f64) -> PctKey {
        PctKey((p * 1000.0).round() as u32)
    }
}

impl SloFile {
    /// Reads `slo.yaml`.
    ///
    /// # Errors
    /// File, line and field of the first problem: unknown field, a percentile outside p1–p99.99
    /// ([`MIN_PERCENTILE`], [`MAX_PERCENTILE`]) or with more than three decimals,
    /// a duration without a unit, a ratio of 100 % or more.
    pub fn load(path: &Path) -> Result<SloFile, YamlError> {
        let text = crate::input_file::read_to_string(path, crate::input_file::MAX_CONFIG_BYTES)
            .map_err(|e| YamlError::new(path, format!("cannot read file: {e}")))?;
        SloFile::parse(&text, path)
    }

    /// Parses `slo.yaml` text; `origin` names it in errors.
    ///
    /// # Errors
    /// As [`SloFile::load`]; every error carries the line and column of the offending key
    /// (found with [`crate::yaml::field_location`] when the problem shows only after parsing,
    /// e.g. `budget.target: 100%`). A file with nothing but blank lines and comments says that
    /// `objectives:` was expected.
    pub fn parse(text: &str, origin: &Path) -> Result<SloFile, YamlError> {
        let blank = text.lines().all(|l| {
            let t = l.trim();
            t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
        });
        if blank {
            return Err(YamlError::new(
                origin,
                "no SLO in the file (it is empty or only comments); expected `objectives:` with at least one class, e.g.\n  objectives:\n    \"*\": {ttft: {p95: 250ms}, error_rate: 0.5%}",
            ));
        }
        let f: SloFile = parse_yaml(text, origin)?;
        f.validate(text, origin)?;
        Ok(f)
    }

    fn validate(&self, text: &str, origin: &Path) -> Result<(), YamlError> {
        let err = |field: &str, m: String| {
            YamlError::at(origin, text, crate::yaml::field_location(text, field), m)
        };
        if self.objectives.is_empty() {
            return Err(err(
                "objectives",
                "field `objectives`: expected at least one class (use \"*\" for all)".into(),
            ));
        }
        for (class, o) in &self.objectives {
            if let Some(r) = o.error_rate {
                let field = format!("objectives.{class}.error_rate");
                if r >= 1.0 {
                    return Err(err(
                        &field,
                        format!(
                            "{field}: {r} is 100 % or more; expected a ratio below 1 (e.g. 0.5%)"
                        ),
                    ));
                }
                if r <= 0.0 {
                    return Err(err(
                        &field,
                        format!(
                            "{field}: {r} leaves no error budget (a target of 100 %); expected a ratio above 0, e.g. 0.5%"
                        ),
                    ));
                }
            }
            if self.spec_for(class).objectives.is_empty() {
                return Err(err(
                    &format!("objectives.{class}"),
                    format!(
                        "objectives.{class}: no objective given; expected ttft, itl, tpot, e2e, queue_time or error_rate"
                    ),
                ));
            }
        }
        if let Some(b) = &self.budget {
            if let Some(t) = b.target
                && t >= 1.0
            {
                return Err(err(
                    "budget.target",
                    format!(
                        "budget.target: {t} is 100 % or more; a 100 % target leaves no error budget"
                    ),
                ));
            }
            if let Some(t) = b.target
                && t <= 0.0
            {
                return Err(err(
                    "budget.target",
                    format!(
                        "budget.target: {t} is 0 % or less; expected a share of good requests such as 99%"
                    ),
                ));
            }
            if !(b.freeze_at > 0.0 && b.freeze_at <= 1.0) {
                return Err(err(
                    "budget.freeze_at",
                    format!(
                        "budget.freeze_at: {} is outside (0 %, 100 %]; expected the share of the budget consumed at which tuning freezes, e.g. 50%",
                        b.freeze_at
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The resolved objectives of `class`: the class's own entry merged over `"*"`.
    pub fn spec_for(&self, class: &str) -> SloSpec {
        let mut merged = self.objectives.get("*").cloned().unwrap_or_default();
        if let Some(own) = self.objectives.get(class) {
            merged.ttft.extend(own.ttft.iter().map(|(k, v)| (*k, *v)));
            merged.itl.extend(own.itl.iter().map(|(k, v)| (*k, *v)));
            merged.tpot.extend(own.tpot.iter().map(|(k, v)| (*k, *v)));
            merged.e2e.extend(own.e2e.iter().map(|(k, v)| (*k, *v)));
            merged
                .queue_time
                .extend(own.queue_time.iter().map(|(k, v)| (*k, *v)));
            if own.error_rate.is_some() {
                merged.error_rate = own.error_rate;
            }
        }
        let mut objectives = Vec::new();
        for (signal, map) in [
            (LatencySignal::Ttft, &merged.ttft),
            (LatencySignal::Itl, &merged.itl),
            (LatencySignal::Tpot, &merged.tpot),
            (LatencySignal::E2e, &merged.e2e),
            (LatencySignal::QueueTime, &merged.queue_time),
        ] {
            for (k, v) in map {
                objectives.push(Objective::Latency {
                    signal,
                    percentile: k.value(),
                    threshold_s: *v,
                });
            }
        }
        if let Some(r) = merged.error_rate {
            objectives.push(Objective::ErrorRate { max_ratio: r });
        }
        SloSpec { objectives }
    }

    /// Classes named explicitly (not `"*"`).
    pub fn named_classes(&self) -> impl Iterator<Item = &str> {
        self.objectives
            .keys()
            .map(String::as_str)
            .filter(|c| *c != "*")
    }
}

/// Parses a duration such as `300ms`, `1.5s`, `250us`, `2m` into seconds.
///
/// # Errors
/// A message saying what was expected, when there is no unit, an unknown unit, or a negative or
/// non-finite value.
pub fn parse_duration_s(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!("`{s}` has no unit; expected a duration like 300ms, 1.5s or 250us")
        })?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration like 300ms, 1.5s or 250us"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(format!(
                "`{s}`: unknown unit `{u}`; expected ns, us, ms, s, m or h"
            ));
        }
    };
    let out = v * scale;
    if !out.is_finite() || out <= 0.0 {
        return Err(format!("`{s}`: expected a positive duration"));
    }
    Ok(out)
}

/// Parses a ratio written `0.5%` or `0.005` into 0–1.
///
/// # Errors
/// When not a number, negative, or not finite.
pub fn parse_ratio(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a ratio like 0.5% or 0.005"))?;
    let out = v * scale;
    if !out.is_finite() || out < 0.0 {
        return Err(format!("`{s}`: expected a non-negative ratio"));
    }
    Ok(out)
}

/// Lowest percentile an objective may use (`p1`): below it a "percentile below a threshold" says
/// nothing about latency.
pub const MIN_PERCENTILE: f64 = 1.0;

/// Highest percentile an objective may use (`p99.99`): every consumer needs
/// [`crate::stats::min_samples_for_percentile`] observations (10 000 here) and that count must
/// be finite; `slo rules` and OpenSLO need `p < 100`.
pub const MAX_PERCENTILE: f64 = 99.99;

pub(crate) fn parse_pct_key(k: &str) -> Result<PctKey, String> {
    let num = k
        .strip_prefix('p')
        .ok_or_else(|| format!("`{k}`: expected a percentile key like p95 or p99.9"))?;
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{k}`: expected a percentile key like p95 or p99.9"))?;
    if !(MIN_PERCENTILE..=MAX_PERCENTILE).contains(&v) {
        return Err(format!(
            "`{k}`: percentile out of range; expected p{MIN_PERCENTILE} to p{MAX_PERCENTILE} (p{MAX_PERCENTILE} already needs {} observations; p100 no finite number)",
            crate::stats::min_samples_for_percentile(MAX_PERCENTILE)
        ));
    }
    let thousandths = (v * 1000.0).round();
    if (thousandths / 1000.0 - v).abs() > 1e-9 {
        return Err(format!(
            "`{k}`: at most three decimals are kept (p{}); write the percentile you mean",
            thousandths / 1000.0
        ));
    }
    Ok(PctKey(thousandths as u32))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrStr {
    Num(f64),
    Str(String),
}

fn de_pcts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<PctKey, f64>, D::Error> {
    let raw: BTreeMap<String, String> = BTreeMap::deserialize(d)?;
    let mut out = BTreeMap::new();
    for (k, v) in raw {
        let key = parse_pct_key(&k).map_err(serde::de::Error::custom)?;
        let secs = parse_duration_s(&v).map_err(serde::de::Error::custom)?;
        out.insert(key, secs);
    }
    Ok(out)
}

fn de_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match NumOrStr::deserialize(d)? {
        NumOrStr::Num(v) if v.is_finite() && v >= 0.0 => Ok(v),
        NumOrStr::Num(v) => Err(serde::de::Error::custom(format!(
            "{v}: expected a non-negative ratio"
        ))),
        NumOrStr::Str(s) => parse_ratio(&s).map_err(serde::de::Error::custom),
    }
}

fn de_opt_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_ratio(d).map(Some)
}

/// Formats seconds for humans: `300 ms`, `1.5 s`, `250 µs`.
pub fn fmt_duration_s(s: f64) -> String {
    if s >= 1.0 {
        format!("{} s", fmt_num(s))
    } else if s >= 1e-3 {
        format!("{} ms", fmt_num(s * 1e3))
    } else {
        format!("{} µs", fmt_num(s * 1e6))
    }
}

/// Formats a number with up to 3 significant decimals and no trailing zeros.
pub fn fmt_num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A percentile as written in `slo.yaml` keys: up to three decimals, trailing zeros dropped
/// (`95`, `99.9`, `99.99`; [`fmt_num`] would round `99.99` to `100`).
pub(crate) fn fmt_pct(p: f64) -> String {
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The default SLO of the embedded demo, from the seed guides' claims-assistant walkthrough:
/// TTFT p95 < 300 ms, ITL p95 < 50 ms, no queueing, errors + aborts < 0.5 %.
///
/// "No queueing" is written `queue_time: {p95: 300ms}`: 0.3 s is vLLM's finest
/// `request_queue_time_seconds` bucket, so the objective is decidable exactly from the engine's
/// histogram, and even with no queue at all a request waits up to one engine step (~20 ms) to be
/// scheduled, so a threshold of a few milliseconds would fail on an idle server.
pub const DEFAULT_SLO_YAML: &str = "objectives:
  \"*\":
    ttft: {p95: 300ms}
    itl: {p95: 50ms}
    queue_time: {p95: 300ms}
    error_rate: 0.5%
budget: {window: 30d, freeze_at: 50%}
";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<SloFile, YamlError> {
        SloFile::parse(t, Path::new("slo.yaml"))
    }

    #[test]
    fn default_slo_resolves() {
        let f = parse(DEFAULT_SLO_YAML).unwrap();
        let s = f.spec_for("anything");
        assert_eq!(
            s.objectives,
            vec![
                Objective::Latency {
                    signal: LatencySignal::Ttft,
                    percentile: 95.0,
                    threshold_s: 0.3
                },
                Objective::Latency {
                    signal: LatencySignal::Itl,
                    percentile: 95.0,
                    threshold_s: 0.05
                },
                Objective::Latency {
                    signal: LatencySignal::QueueTime,
                    percentile: 95.0,
                    threshold_s: 0.3
                },
                Objective::ErrorRate { max_ratio: 0.005 },
            ]
        );
        assert_eq!(s.objectives[0].id(), "ttft_p95");
        assert_eq!(s.objectives[0].describe(), "TTFT p95 < 300 ms");
        assert_eq!(f.budget.unwrap().target, None);
    }

    #[test]
    fn class_overrides_default() {
        let f = parse(
            "objectives:\n  \"*\": {ttft: {p95: 300ms}, error_rate: 1%}\n  long: {ttft: {p95: 2s, p99.9: 5s}}\n",
        )
        .unwrap();
        let s = f.spec_for("long");
        assert_eq!(s.objectives.len(), 3);
        assert_eq!(s.objectives[0].id(), "ttft_p95");
        assert!(
            matches!(s.objectives[0], Objective::Latency { threshold_s, .. } if threshold_s == 2.0)
        );
        assert_eq!(s.objectives[1].id(), "ttft_p99.9");
        assert_eq!(f.named_classes().collect::<Vec<_>>(), vec!["long"]);
    }

    #[test]
    fn percentile_range_edges_are_accepted() {
        let f = parse("objectives:\n  \"*\": {ttft: {p1: 1s, p99.99: 2s}}\n").unwrap();
        let ids: Vec<String> = f
            .spec_for("*")
            .objectives
            .iter()
            .map(|o| o.id().to_string())
            .collect();
        assert_eq!(ids, vec!["ttft_p1", "ttft_p99.99"]);
        // p99.99 needs ceil(1 / 0.0001) = 10 000 observations: finite
        assert_eq!(
            crate::stats::min_samples_for_percentile(MAX_PERCENTILE),
            10_000
        );
    }

    #[test]
    fn bad_input_names_file_and_field() {
        for (text, needle) in [
            (
                "objectives:\n  \"*\": {ttft: {p100: 1s}}\n",
                "percentile out of range",
            ),
            // every key outside p1–p99.99, including those that would round into p0 or p100
            (
                "objectives:\n  \"*\":\n    ttft: {p99.99999: 1s}\n",
                "slo.yaml:3:",
            ),
            (
                "objectives:\n  \"*\": {ttft: {p99.99999: 1s}}\n",
                "`p99.99999`: percentile out of range; expected p1 to p99.99",
            ),
            (
                "objectives:\n  \"*\": {e2e: {p0.00001: 1s}}\n",
                "`p0.00001`: percentile out of range",
            ),
            (
                "objectives:\n  \"*\": {itl: {p99.995: 1s}}\n",
                "percentile out of range",
            ),
            (
                "objectives:\n  \"*\": {tpot: {p0.5: 1s}}\n",
                "percentile out of range",
            ),
            (
                "objectives:\n  \"*\": {queue_time: {p100.0: 1s}}\n",
                "percentile out of range",
            ),
            (
                "objectives:\n  \"*\": {ttft: {p95.0001: 1s}}\n",
                "at most three decimals",
            ),
            ("objectives:\n  \"*\": {ttft: {p95: 300}}\n", "no unit"),
            (
                "objectives:\n  \"*\": {ttft: {p95: 3 parsecs}}\n",
                "unknown unit",
            ),
            (
                "objectives:\n  \"*\": {error_rate: 100%}\n",
                "100 % or more",
            ),
            ("objectives:\n  \"*\": {tfft: {p95: 1s}}\n", "tfft"),
            ("objectives: {}\n", "at least one class"),
            (
                "objectives:\n  \"*\": {ttft: {p95: 1s}}\nbudget: {window: 30d, target: 100%}\n",
                "no error budget",
            ),
            (
                "objectives:\n  \"*\": {ttft: {p95: 1s}}\nbudget: {window: 30d, target: 0%}\n",
                "budget.target: 0 is 0 % or less",
            ),
            (
                "objectives:\n  \"*\": {ttft: {p95: 1s}}\nbudget: {window: 30d, target: 99%, freeze_at: 150%}\n",
                "budget.freeze_at: 1.5 is outside",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with("slo.yaml:"), "{e}");
            assert!(!e.contains("error:") && !e.contains("<input>"), "{e}");
            assert!(e.contains(needle), "{needle} not in: {e}");
        }
    }

    /// Problems found only after parsing still point at the offending key: line and column
    /// counted by hand in each text, with the key's line quoted under the message.
    #[test]
    fn validation_errors_carry_the_key_location() {
        for (text, head, line) in [
            (
                "objectives:\n  chat:\n    ttft: {p95: 250ms}\nbudget: {window: 30d, target: \"0\"}\n",
                "slo.yaml:4:23: budget.target: 0 is 0 % or less",
                "budget: {window: 30d, target: \"0\"}",
            ),
            (
                "objectives:\n  chat:\n    ttft: {p95: 250ms}\nbudget:\n  window: 30d\n  target: 100%\n",
                "slo.yaml:6:3: budget.target: 1 is 100 % or more",
                "  target: 100%",
            ),
            (
                "objectives:\n  chat:\n    error_rate: 0\n",
                "slo.yaml:3:5: objectives.chat.error_rate: 0 leaves no error budget",
                "    error_rate: 0",
            ),
            (
                "objectives:\n  \"*\": {ttft: {p95: 1s}}\n  rag.v2:\n    error_rate: 100%\n",
                "slo.yaml:4:5: objectives.rag.v2.error_rate: 1 is 100 % or more",
                "    error_rate: 100%",
            ),
            (
                "# SLO\nobjectives: {}\n",
                "slo.yaml:2:1: field `objectives`: expected at least one class",
                "objectives: {}",
            ),
            (
                "objectives:\n  chat: {}\n",
                "slo.yaml:2:3: objectives.chat: no objective given",
                "  chat: {}",
            ),
            (
                "objectives:\n  chat: {itl: {p99: 50ms}}\nbudget: {window: 7d, target: 99%, freeze_at: 0%}\n",
                "slo.yaml:3:35: budget.freeze_at: 0 is outside",
                "budget: {window: 7d, target: 99%, freeze_at: 0%}",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            let mut lines = e.lines();
            let first = lines.next().unwrap();
            assert!(first.starts_with(head), "{head}\n  vs {e}");
            assert!(lines.next().unwrap().ends_with(&format!("| {line}")), "{e}");
            // the caret sits under the key's column
            let col: usize = head.split(':').nth(2).unwrap().parse().unwrap();
            let caret = lines.next().unwrap();
            let bar = caret.find('|').unwrap();
            assert_eq!(caret.find('^').unwrap(), bar + 1 + col, "{e}");
        }
    }

    #[test]
    fn an_empty_or_comment_only_file_asks_for_objectives() {
        for text in ["", "\n\n", "# only a comment\n", "---\n# nothing\n"] {
            let e = parse(text).unwrap_err().to_string();
            assert!(
                e.starts_with("slo.yaml: no SLO in the file (it is empty or only comments); expected `objectives:`"),
                "{e}"
            );
        }
    }

    #[test]
    fn percentile_keys_serialise_as_written() {
        let f = parse(
            "objectives:\n  \"*\": {ttft: {p95: 300ms, p99.9: 1s}, itl: {p50: 20ms, p99.99: 80ms}}\n",
        )
        .unwrap();
        let v = serde_json::to_value(&f).unwrap();
        let o = &v["objectives"]["*"];
        assert_eq!(o["ttft"]["p95"], serde_json::json!(0.3));
        assert_eq!(o["ttft"]["p99.9"], serde_json::json!(1.0));
        assert_eq!(o["itl"]["p50"], serde_json::json!(0.02));
        assert_eq!(o["itl"]["p99.99"], serde_json::json!(0.08));
    }

    #[test]
    fn durations_and_ratios() {
        assert_eq!(parse_duration_s("250us").unwrap(), 250e-6);
        assert_eq!(parse_duration_s("1.5s").unwrap(), 1.5);
        assert_eq!(parse_duration_s("2m").unwrap(), 120.0);
        assert!(parse_duration_s("-1s").is_err());
        assert!((parse_ratio("0.5%").unwrap() - 0.005).abs() < 1e-15);
        assert_eq!(parse_ratio("0.02").unwrap(), 0.02);
        assert_eq!(fmt_duration_s(0.051), "51 ms");
        assert_eq!(fmt_duration_s(1.5), "1.5 s");
    }
}
