//! What a judgement is about and how far its figure goes, as types: the objective a result
//! judges ([`ObjectiveId`]: a class, and a signal's percentile or the error rate), whether its
//! figure is exact or only an upper bound ([`Bound`]), who measured it ([`Source`]) and the unit
//! of its threshold and figure ([`Unit`]).
//!
//! `results.json` and `diagnose --format json` write an id as they always have: `ttft_p95`,
//! `itl_p99.9`, `error_rate`, and `chat/ttft_p95` for a mix's per-class row. [`ObjectiveId`]'s
//! deserialiser is the one place that reads that string back; everything else asks the type.

use crate::signal::LatencySignal;
use crate::slo::{Objective, PctKey, fmt_pct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The objective of an SLO a result judges, without its threshold: a signal's percentile, or the
/// error rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectiveKind {
    /// `signal`'s `percentile`-th percentile (`ttft_p95`).
    Latency {
        /// Which latency.
        signal: LatencySignal,
        /// The percentile, exact to a thousandth (`p99.9`).
        percentile: PctKey,
    },
    /// Errors + aborts over finished requests (`error_rate`).
    ErrorRate,
}

impl ObjectiveKind {
    /// The kind of `o`.
    pub fn of(o: &Objective) -> ObjectiveKind {
        match o {
            Objective::Latency {
                signal, percentile, ..
            } => ObjectiveKind::Latency {
                signal: *signal,
                percentile: PctKey::of(*percentile),
            },
            Objective::ErrorRate { .. } => ObjectiveKind::ErrorRate,
        }
    }

    /// The latency signal, for a latency objective.
    pub fn signal(self) -> Option<LatencySignal> {
        match self {
            ObjectiveKind::Latency { signal, .. } => Some(signal),
            ObjectiveKind::ErrorRate => None,
        }
    }

    /// The percentile in (0, 100), for a latency objective.
    pub fn percentile(self) -> Option<f64> {
        match self {
            ObjectiveKind::Latency { percentile, .. } => Some(percentile.value()),
            ObjectiveKind::ErrorRate => None,
        }
    }

    /// The unit of the threshold and the observed figure: seconds for a latency, a ratio (0–1)
    /// for the error rate.
    pub fn unit(self) -> Unit {
        match self {
            ObjectiveKind::Latency { .. } => Unit::Seconds,
            ObjectiveKind::ErrorRate => Unit::Ratio,
        }
    }
}

impl fmt::Display for ObjectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectiveKind::Latency { signal, percentile } => {
                write!(f, "{}_p{}", signal.name(), fmt_pct(percentile.value()))
            }
            ObjectiveKind::ErrorRate => f.write_str("error_rate"),
        }
    }
}

/// Which objective a result judges: its [kind](ObjectiveKind), and in a mix the request class
/// whose requests it was judged on (`None`: the phase's requests as a whole, or a single-class
/// phase). Written `kind` or `class/kind` (`chat/ttft_p95`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectiveId {
    /// The class of a mix's per-class row.
    pub class: Option<String>,
    /// The objective.
    pub kind: ObjectiveKind,
}

impl ObjectiveId {
    /// The id of `o`, for no class in particular.
    pub fn of(o: &Objective) -> ObjectiveId {
        ObjectiveKind::of(o).into()
    }

    /// The same objective judged on `class`'s requests (`chat/ttft_p95`).
    pub fn in_class(self, class: impl Into<String>) -> ObjectiveId {
        ObjectiveId {
            class: Some(class.into()),
            ..self
        }
    }

    /// The class, if any.
    pub fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// The latency signal, for a latency objective.
    pub fn signal(&self) -> Option<LatencySignal> {
        self.kind.signal()
    }

    /// The percentile in (0, 100), for a latency objective.
    pub fn percentile(&self) -> Option<f64> {
        self.kind.percentile()
    }

    /// Whether this is the error-rate objective.
    pub fn is_error_rate(&self) -> bool {
        self.kind == ObjectiveKind::ErrorRate
    }

    /// [`ObjectiveKind::unit`].
    pub fn unit(&self) -> Unit {
        self.kind.unit()
    }

    /// Whether this id names `o` (whatever the class).
    pub fn is(&self, o: &Objective) -> bool {
        self.kind == ObjectiveKind::of(o)
    }
}

impl From<ObjectiveKind> for ObjectiveId {
    fn from(kind: ObjectiveKind) -> ObjectiveId {
        ObjectiveId { class: None, kind }
    }
}

impl fmt::Display for ObjectiveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = &self.class {
            write!(f, "{c}/")?;
        }
        self.kind.fmt(f)
    }
}

/// Compares the written form (`id == "chat/ttft_p95"`), for tests and messages.
impl PartialEq<&str> for ObjectiveId {
    #[expect(
        clippy::cmp_owned,
        reason = "the written form is the comparison; no hot path compares ids to text"
    )]
    fn eq(&self, other: &&str) -> bool {
        self.to_string() == *other
    }
}

impl Serialize for ObjectiveId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ObjectiveId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ObjectiveId, D::Error> {
        let s = String::deserialize(d)?;
        read_id(&s).map_err(serde::de::Error::custom)
    }
}

/// The signals an id may name, in `slo.yaml`'s order.
const SIGNALS: [LatencySignal; 5] = [
    LatencySignal::Ttft,
    LatencySignal::Itl,
    LatencySignal::Tpot,
    LatencySignal::E2e,
    LatencySignal::QueueTime,
];

/// Reads `kind` or `class/kind`: the inverse of [`ObjectiveId`]'s `Display`. The class is
/// everything before the last `/` (a kind never holds one; a class name may).
fn read_id(s: &str) -> Result<ObjectiveId, String> {
    let (class, kind) = match s.rsplit_once('/') {
        Some((c, k)) => (Some(c.to_owned()), k),
        None => (None, s),
    };
    let unknown = || {
        format!(
            "objective id `{s}`: expected a signal's percentile (ttft_p95, itl_p99.9, tpot, e2e, queue_time) or error_rate, optionally after `class/`"
        )
    };
    let kind = if kind == "error_rate" {
        ObjectiveKind::ErrorRate
    } else {
        let (signal, pct) = SIGNALS
            .iter()
            .find_map(|sig| Some((*sig, kind.strip_prefix(sig.name())?.strip_prefix("_p")?)))
            .ok_or_else(unknown)?;
        let percentile = crate::slo::parse_pct_key(&format!("p{pct}"))
            .map_err(|e| format!("{}: {e}", unknown()))?;
        ObjectiveKind::Latency { signal, percentile }
    };
    Ok(ObjectiveId { class, kind })
}

/// Whether a figure is the value itself or only bounds it from above.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The figure is the value (within the histogram's precision).
    #[default]
    Exact,
    /// Only "at most the figure" is known: a quantile whose rank fell in a histogram's first
    /// bucket `[0, le₀]` is shown as `le₀` and reads "≤"
    /// (`headroom_signals::Quantile::upper_bound_only`). Written `"bound": "upper"`; it is no
    /// margin to a threshold.
    Upper,
}

impl Bound {
    /// Whether the figure is exact (the default, left out of JSON).
    pub fn is_exact(&self) -> bool {
        *self == Bound::Exact
    }

    /// `≤ ` for an upper bound, nothing for an exact figure: what a display puts before it.
    pub fn prefix(self) -> &'static str {
        match self {
            Bound::Exact => "",
            Bound::Upper => "≤ ",
        }
    }
}

/// Who measured a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Headroom's load client, from its own timings and outcomes.
    Client,
    /// The engine's `/metrics` (histograms, counters or per-request metrics).
    Engine,
    /// A Headroom gateway's series, the users' side of the engine.
    Gateway,
}

impl Source {
    /// Lower-case name (`client`, `engine`, `gateway`).
    pub fn name(self) -> &'static str {
        match self {
            Source::Client => "client",
            Source::Engine => "engine",
            Source::Gateway => "gateway",
        }
    }
}

/// The unit of an objective's threshold and observed figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds (latency objectives).
    Seconds,
    /// A ratio 0–1 (the error rate).
    Ratio,
}

impl Unit {
    /// Lower-case name (`seconds`, `ratio`), as the Prometheus `unit` label writes it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Ratio => "ratio",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id form the sweep, diagnose and compare write reads back as the type and writes
    /// back as the same string; the typed parts are those the text says.
    #[test]
    fn every_id_form_round_trips() {
        use LatencySignal::*;
        let lat = |signal, p: u32| ObjectiveKind::Latency {
            signal,
            percentile: PctKey(p),
        };
        for (text, class, kind) in [
            ("ttft_p95", None, lat(Ttft, 95_000)),
            ("itl_p99", None, lat(Itl, 99_000)),
            ("tpot_p50", None, lat(Tpot, 50_000)),
            ("e2e_p90", None, lat(E2e, 90_000)),
            ("queue_time_p95", None, lat(QueueTime, 95_000)),
            ("ttft_p99.9", None, lat(Ttft, 99_900)),
            ("itl_p99.99", None, lat(Itl, 99_990)),
            ("ttft_p1", None, lat(Ttft, 1_000)),
            ("error_rate", None, ObjectiveKind::ErrorRate),
            ("chat/ttft_p95", Some("chat"), lat(Ttft, 95_000)),
            (
                "long_context/queue_time_p99",
                Some("long_context"),
                lat(QueueTime, 99_000),
            ),
            (
                "rag.v2/error_rate",
                Some("rag.v2"),
                ObjectiveKind::ErrorRate,
            ),
            ("a/b/e2e_p99.5", Some("a/b"), lat(E2e, 99_500)),
        ] {
            let json = format!("\"{text}\"");
            let id: ObjectiveId = serde_json::from_str(&json).unwrap();
            assert_eq!(id.class(), class, "{text}");
            assert_eq!(id.kind, kind, "{text}");
            assert_eq!(serde_json::to_string(&id).unwrap(), json);
            assert_eq!(id.to_string(), text);
        }
    }

    #[test]
    fn ids_of_objectives_are_what_results_json_has_always_said() {
        let o = Objective::Latency {
            signal: LatencySignal::Itl,
            percentile: 99.9,
            threshold_s: 0.05,
        };
        assert_eq!(ObjectiveId::of(&o).to_string(), "itl_p99.9");
        assert_eq!(ObjectiveId::of(&o).in_class("chat"), "chat/itl_p99.9");
        assert_eq!(ObjectiveId::of(&o).unit(), Unit::Seconds);
        let e = Objective::ErrorRate { max_ratio: 0.005 };
        assert_eq!(ObjectiveId::of(&e), "error_rate");
        assert_eq!(ObjectiveId::of(&e).unit(), Unit::Ratio);
    }

    #[test]
    fn unknown_ids_are_refused_with_what_was_expected() {
        for bad in ["ttft", "ttfb_p95", "ttft_p", "ttft_p100", "chat/", "errors"] {
            let e = serde_json::from_str::<ObjectiveId>(&format!("\"{bad}\"")).unwrap_err();
            assert!(
                e.to_string().contains("expected a signal's percentile"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn an_exact_bound_is_left_out_and_an_upper_one_says_upper() {
        assert_eq!(serde_json::to_value(Bound::Upper).unwrap(), "upper");
        assert!(Bound::default().is_exact());
        assert_eq!(Bound::Upper.prefix(), "≤ ");
    }
}
