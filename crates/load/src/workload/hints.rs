//! Errors that say what to write, for every field whose value is a mapping or a named form:
//! the length distributions (`prompt_tokens`, `max_tokens`), `load.arrival`, `dataset`, `load`
//! and `load.mode` (`load.levels` is in [`Levels`](super::Levels)' own visitor).
//!
//! serde's derived enums read a bare scalar as a unit variant, so `max_tokens: 50` came out as
//! "unknown variant `50`", and a bare word where a mapping is needed (`arrival: gamma`) as
//! "expected mapping start" at the *next* line. Here each field reads its value as whatever it
//! is (scalar, list or mapping) and answers a wrong shape with the field's name and the form to
//! write (`max_tokens: a bare number is not a distribution; write {fixed: 50}`); the YAML
//! parser adds the file, line and column.

use super::distributions::LengthDist;
use super::spec::{DatasetSpec, LoadSpec, show_number};
use crate::arrivals::ArrivalProcess;
use headroom_core::run::LoadMode;
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
    const FORMS: &'static str =
        "a length distribution such as {fixed: 50} or {uniform: {min: 40, max: 60}}, or dataset";

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
            Found::Word(w) if dist_needs(&w).is_some() => Err(dist_needs(&w).unwrap_or_default()),
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

pub(super) fn dataset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DatasetSpec>, D::Error> {
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
