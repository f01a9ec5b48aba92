//! Import of OpenSLO v1 (`apiVersion: openslo/v1`, `kind: SLO`; github.com/OpenSLO/OpenSLO)
//! into Headroom's `slo.yaml` ([`SloFile`]), wherever OpenSLO expresses the same objectives:
//!
//! - `ratioMetric` (counters) whose `good` query reads `<histogram>_bucket{le="T"}` and whose
//!   `total` reads `<histogram>_count` of a latency histogram Headroom knows (vLLM's or the
//!   gateway's) → `<signal>: {p<target×100>: T}`, the same reading as [`crate::sli`];
//! - `ratioMetric` over `vllm:request_success_total`, `good` selecting `finished_reason` `stop`
//!   / `length` (or `bad` selecting `abort` / `error`) → `error_rate: 1 − target`;
//! - `thresholdMetric` whose query is `histogram_quantile(q, …<histogram>_bucket…)` with `op: lt`
//!   or `lte` and `value: T` → `<signal>: {p<q×100>: T}`; its `target` (a share of good time
//!   slices) becomes `budget.target`.
//!
//! Each query must have the shape that counts exactly what `slo.yaml` counts: a counter as
//! `sum(rate(<series>{…}[w]))` (or `increase`, `sum by (<class label>)`, `rate` alone, or the
//! bare counter), a quantile as `histogram_quantile(q, sum by (le) (rate(<histogram>_bucket{…}[w])))`.
//! Good (or bad) and total must select the same series except for the one matcher that splits
//! them (`le`, `finished_reason`), and an error ratio's total must not filter `finished_reason`.
//! Arithmetic (`1 - sum(…)`), other functions and aggregations, groupings by other labels,
//! `offset` and `@`, a regex or negative class matcher, a second objective for the same class,
//! signal and percentile, and a target or quantile outside p1–p99.99 (or with more than three
//! decimals of a percent) are refused at the OpenSLO path (`openslo[0].spec.indicator.spec.…`)
//! with the reason. Other matchers (`job="vllm"`) are not part of `slo.yaml`: a warning gives
//! the `--match` flags that carry them.
//!
//! The class is the value of the equality matcher on `class_label` (`model_name`, or `class` on
//! gateway series) in the query, else `"*"`. The SLO's `timeWindow` becomes `budget.window` and
//! must be rolling and a Prometheus duration. Everything else (raw ratios, gauges,
//! `indicatorRef`, calendar windows, `RatioTimeslices`, composite objectives, queries over
//! other metrics) is refused with the field that cannot be expressed. The result is written
//! with [`to_slo_yaml`] and re-read with [`SloFile::parse`], so it obeys every rule of a
//! hand-written `slo.yaml`.

use crate::SloError;
use crate::catalogue::{self, VLLM_REQUEST_SUCCESS};
use crate::promql::{fmt_float, parse_prom_duration};
use headroom_core::LatencySignal;
use headroom_core::slo::{ClassObjectives, PctKey, SloFile};
use promql_parser::label::MatchOp;
use promql_parser::parser::{AggregateExpr, Expr, LabelModifier, VectorSelector, parse};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    spec: Option<SloSpecDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SloSpecDoc {
    #[serde(default)]
    indicator: Option<Indicator>,
    #[serde(default)]
    indicator_ref: Option<String>,
    #[serde(default)]
    time_window: Vec<TimeWindow>,
    #[serde(default)]
    budgeting_method: Option<String>,
    #[serde(default)]
    objectives: Vec<ObjectiveDoc>,
}

#[derive(Deserialize)]
struct Indicator {
    spec: IndicatorSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndicatorSpec {
    #[serde(default)]
    ratio_metric: Option<RatioMetric>,
    #[serde(default)]
    threshold_metric: Option<MetricHolder>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RatioMetric {
    #[serde(default)]
    counter: Option<bool>,
    #[serde(default)]
    good: Option<MetricHolder>,
    #[serde(default)]
    bad: Option<MetricHolder>,
    #[serde(default)]
    total: Option<MetricHolder>,
    #[serde(default)]
    raw: Option<MetricHolder>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricHolder {
    metric_source: MetricSource,
}

#[derive(Deserialize)]
struct MetricSource {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    spec: QuerySpec,
}

#[derive(Deserialize)]
struct QuerySpec {
    query: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimeWindow {
    duration: String,
    #[serde(default)]
    is_rolling: Option<bool>,
    #[serde(default)]
    calendar: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectiveDoc {
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    target: Option<f64>,
    #[serde(default)]
    target_percent: Option<f64>,
    #[serde(default)]
    indicator: Option<serde_json::Value>,
    #[serde(default)]
    indicator_ref: Option<String>,
}

/// The one vector selector of a query: metric name and its matchers (`__name__` folded into
/// the name).
struct Sel {
    name: String,
    matchers: Vec<(String, MatchOp, String)>,
}

impl Sel {
    /// Matchers other than on `label`, as comparable text (`job="vllm"`), sorted.
    fn others(&self, skip: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = self
            .matchers
            .iter()
            .filter(|(n, _, _)| !skip.contains(&n.as_str()))
            .map(|(n, op, v)| format!("{n}{op}{}", crate::promql::quote(v)))
            .collect();
        v.sort();
        v
    }
}

fn parse_query(query: &str, field: &str) -> Result<Expr, SloError> {
    parse(query)
        .map_err(|e| SloError::invalid(field, format!("query is not valid PromQL ({e}): {query}")))
}

/// What a PromQL expression is, for messages.
fn kind_of(e: &Expr) -> String {
    match e {
        Expr::Aggregate(a) => format!("the aggregation {}(…)", a.op),
        Expr::Unary(_) => "a negation (-…)".into(),
        Expr::Binary(b) => format!("arithmetic or a comparison (… {} …)", b.op),
        Expr::Paren(p) => kind_of(&p.expr),
        Expr::Subquery(_) => "a subquery ([…:…])".into(),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => "a constant".into(),
        Expr::VectorSelector(_) => "a bare selector".into(),
        Expr::MatrixSelector(_) => "a range selector without a function".into(),
        Expr::Call(c) => format!("the function {}(…)", c.func.name),
        Expr::Extension(_) => "an extension".into(),
    }
}

/// The selector inside `rate(…[w])` / `increase(…[w])`, refusing `offset` and `@`, which move
/// the window away from "now" where Headroom's SLIs always look.
fn leaf(vs: &VectorSelector, field: &str) -> Result<Sel, SloError> {
    if vs.offset.is_some() || vs.at.is_some() {
        return Err(SloError::invalid(
            field,
            "`offset` or `@` moves the window into the past; Headroom's SLIs always cover the window ending now, so the query cannot be expressed exactly",
        ));
    }
    let mut name = vs.name.clone();
    let mut matchers = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == "__name__" && matches!(m.op, MatchOp::Equal) {
            name = Some(m.value.clone());
        } else {
            matchers.push((m.name.clone(), m.op.clone(), m.value.clone()));
        }
    }
    if !vs.matchers.or_matchers.is_empty() {
        return Err(SloError::invalid(
            field,
            "`or` inside a selector selects several series sets; expected one selector",
        ));
    }
    let name = name.ok_or_else(|| {
        SloError::invalid(
            field,
            "the selector names no metric; expected e.g. vllm:…_count{…}",
        )
    })?;
    Ok(Sel { name, matchers })
}

/// `rate(sel[w])` or `increase(sel[w])`.
fn rate_of(e: &Expr, field: &str) -> Result<Option<Sel>, SloError> {
    match e {
        Expr::Paren(p) => rate_of(&p.expr, field),
        Expr::Call(c) if matches!(c.func.name, "rate" | "increase") => {
            match c.args.args.first().map(|a| a.as_ref()) {
                Some(Expr::MatrixSelector(m)) if c.args.args.len() == 1 => {
                    leaf(&m.vs, field).map(Some)
                }
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// Grouping labels of `sum by (…)` must lie within `allowed` (`sum without (…)` never does):
/// grouping by anything else gives several ratios where `slo.yaml` has one per class.
fn check_grouping(a: &AggregateExpr, allowed: &[&str], field: &str) -> Result<(), SloError> {
    match &a.modifier {
        None => Ok(()),
        Some(LabelModifier::Include(l))
            if l.labels.iter().all(|x| allowed.contains(&x.as_str())) =>
        {
            Ok(())
        }
        Some(m) => Err(SloError::invalid(
            field,
            format!(
                "grouping {} gives one series per group; Headroom's SLI is one ratio per class, so only `sum` (or `sum by ({})`) can be expressed",
                match m {
                    LabelModifier::Include(l) => format!("by ({})", l.labels.join(", ")),
                    LabelModifier::Exclude(l) => format!("without ({})", l.labels.join(", ")),
                },
                allowed.join(", ")
            ),
        )),
    }
}

/// A counter query of a ratio metric: `sum(rate(<counter>{…}[w]))`, `sum(increase(…))`,
/// `rate(…)` / `increase(…)` alone, or the bare counter `<counter>{…}` (OpenSLO's
/// `counter: true` lets the tool take the rate). Anything else (arithmetic such as
/// `1 - sum(…)`, other functions, `offset`) changes what is counted and is refused.
fn counter_query(query: &str, field: &str, class_label: &str) -> Result<Sel, SloError> {
    let expr = parse_query(query, field)?;
    let expected = "expected sum(rate(<counter>{…}[<window>])) (or increase, or the bare counter)";
    let mut e = &expr;
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    if let Expr::VectorSelector(vs) = e {
        return leaf(vs, field);
    }
    if let Some(sel) = rate_of(e, field)? {
        return Ok(sel);
    }
    if let Expr::Aggregate(a) = e
        && a.op.to_string() == "sum"
        && a.param.is_none()
    {
        check_grouping(a, &[class_label], field)?;
        if let Some(sel) = rate_of(&a.expr, field)? {
            return Ok(sel);
        }
        return Err(SloError::invalid(
            field,
            format!("sum over {}: {expected}; query: {query}", kind_of(&a.expr)),
        ));
    }
    Err(SloError::invalid(
        field,
        format!(
            "{} cannot be expressed exactly: {expected}; query: {query}",
            kind_of(e)
        ),
    ))
}

/// A threshold metric's query: `histogram_quantile(q, sum by (le) (rate(<histogram>_bucket{…}[w])))`
/// (increase also accepted; grouping by `le` and the class label only). Quantiles of each
/// series (no `sum`) or of other groupings are not the class's percentile and are refused.
fn quantile_query(query: &str, field: &str, class_label: &str) -> Result<(f64, Sel), SloError> {
    let expr = parse_query(query, field)?;
    let expected =
        "expected histogram_quantile(<q>, sum by (le) (rate(<histogram>_bucket{…}[<window>])))";
    let mut e = &expr;
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    let Expr::Call(c) = e else {
        return Err(SloError::invalid(
            field,
            format!(
                "{} cannot be expressed: {expected}; query: {query}",
                kind_of(e)
            ),
        ));
    };
    if c.func.name != "histogram_quantile" || c.args.args.len() != 2 {
        return Err(SloError::invalid(
            field,
            format!(
                "{} cannot be expressed: {expected}; query: {query}",
                kind_of(e)
            ),
        ));
    }
    let mut q_expr = c.args.args[0].as_ref();
    while let Expr::Paren(p) = q_expr {
        q_expr = &p.expr;
    }
    let Expr::NumberLiteral(q) = q_expr else {
        return Err(SloError::invalid(
            field,
            format!("the quantile must be a number; {expected}; query: {query}"),
        ));
    };
    let mut inner = c.args.args[1].as_ref();
    while let Expr::Paren(p) = inner {
        inner = &p.expr;
    }
    let sel = match inner {
        Expr::Aggregate(a) if a.op.to_string() == "sum" && a.param.is_none() => {
            match &a.modifier {
                Some(LabelModifier::Include(l)) if l.labels.iter().any(|x| x == "le") => {}
                _ => {
                    return Err(SloError::invalid(
                        field,
                        format!(
                            "histogram_quantile needs the buckets summed by le; {expected}; query: {query}"
                        ),
                    ));
                }
            }
            check_grouping(a, &["le", class_label], field)?;
            rate_of(&a.expr, field)?
        }
        _ => None,
    };
    let sel = sel.ok_or_else(|| {
        SloError::invalid(
            field,
            format!(
                "{} inside histogram_quantile cannot be expressed (without `sum by (le)` it is a percentile per series, not the class's); {expected}; query: {query}",
                kind_of(inner)
            ),
        )
    })?;
    if !sel.name.ends_with("_bucket") {
        return Err(SloError::invalid(
            field,
            format!(
                "{} is not a histogram's _bucket series; {expected}",
                sel.name
            ),
        ));
    }
    Ok((q.val, sel))
}

fn signal_of(family: &str) -> Option<(LatencySignal, bool)> {
    for s in [
        LatencySignal::Ttft,
        LatencySignal::Itl,
        LatencySignal::Tpot,
        LatencySignal::E2e,
        LatencySignal::QueueTime,
    ] {
        if catalogue::vllm_histogram(s).metric == family {
            return Some((s, false));
        }
        if catalogue::gateway_histogram(s).is_some_and(|h| h.metric == family) {
            return Some((s, true));
        }
    }
    None
}

/// The `le` of a selector: `le="0.25"` or Pyrra's `le=~"1(\\.0)?"`.
fn le_of(sel: &Sel) -> Option<f64> {
    sel.matchers
        .iter()
        .find(|(n, _, _)| n == "le")
        .and_then(|(_, op, v)| {
            let v = match op {
                MatchOp::Equal => v.as_str(),
                MatchOp::Re(_) => v.strip_suffix("(\\.0)?").unwrap_or(v),
                _ => return None,
            };
            v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)
        })
}

fn regex_values(sel: &Sel, label: &str) -> Option<Vec<String>> {
    sel.matchers
        .iter()
        .find(|(n, _, _)| n == label)
        .and_then(|(_, op, v)| match op {
            MatchOp::Equal => Some(vec![v.clone()]),
            MatchOp::Re(_) => Some(v.split('|').map(String::from).collect()),
            _ => None,
        })
}

/// The class a selector reads: the value of an equality matcher on the class label (`"*"`
/// without one). A regex or negative matcher on the class label selects a set of classes,
/// which `slo.yaml` cannot hold (it names one class, or `"*"` for every class).
fn class_of(sel: &Sel, label: &str, field: &str) -> Result<String, SloError> {
    let on_label: Vec<&(String, MatchOp, String)> =
        sel.matchers.iter().filter(|(n, _, _)| n == label).collect();
    match on_label.as_slice() {
        [] => Ok("*".to_string()),
        [(_, MatchOp::Equal, v)] => Ok(v.clone()),
        [(n, op, v)] => Err(SloError::invalid(
            field,
            format!(
                "`{n}{op}{}` selects a set of classes; slo.yaml has objectives per class ({n}=\"<class>\") or for every class (no {n} matcher), so it cannot be expressed exactly",
                crate::promql::quote(v)
            ),
        )),
        _ => Err(SloError::invalid(
            field,
            format!(
                "several matchers on the class label {label}; expected at most one `{label}=\"<class>\"`"
            ),
        )),
    }
}

/// Warns about matchers `slo.yaml` does not carry (e.g. `job="vllm"`): they belong in the
/// `--match` flag of `slo rules` and `slo budget`.
fn note_other_matchers(sel: &Sel, skip: &[&str], field: &str, warnings: &mut Vec<String>) {
    let others = sel.others(skip);
    if !others.is_empty() {
        warnings.push(format!(
            "{field}: the matchers {} are not part of slo.yaml; pass them to `headroom slo rules` and `slo budget` as {}",
            others.join(", "),
            others
                .iter()
                .map(|m| format!("--match '{m}'"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
}

fn target_of(o: &ObjectiveDoc, field: &str) -> Result<f64, SloError> {
    let t = match (o.target, o.target_percent) {
        (Some(t), None) => (t, format!("{field}.target")),
        (None, Some(p)) => (p / 100.0, format!("{field}.targetPercent")),
        (Some(_), Some(_)) => {
            return Err(SloError::invalid(
                field,
                "both target and targetPercent; OpenSLO allows one",
            ));
        }
        (None, None) => {
            return Err(SloError::invalid(
                field,
                "no target; expected target (0–1) or targetPercent (0–100)",
            ));
        }
    };
    if !(t.0 > 0.0 && t.0 < 1.0) {
        return Err(SloError::invalid(
            t.1,
            format!(
                "{} is out of range: a target must lie strictly between 0 and 100 % (100 % or more leaves no error budget)",
                fmt_float(t.0)
            ),
        ));
    }
    Ok(crate::promql::clean(t.0))
}

/// The YAML parser's complaint in the user's terms: where (line and column) and what, without
/// the parser's snippet or its advice to Rust programmers (`use Option<String>`).
fn yaml_problem(e: &serde_saphyr::Error) -> String {
    let plain = e.without_snippet().to_string();
    let loc = e
        .location()
        .map(|l| (l.line(), l.column()))
        .filter(|&(l, _)| l > 0);
    let mut msg = plain.trim_start_matches("error: ").to_owned();
    if let Some((l, c)) = loc {
        for cut in [
            format!(" at line {l}, column {c}"),
            format!("line {l} column {c}: "),
        ] {
            msg = msg.replace(&cut, "");
        }
    }
    if let Some(i) = msg.find("; use ") {
        msg.truncate(i);
    }
    let internal = [
        "deserialize",
        "Option<",
        "struct ",
        "Vec<",
        "String",
        "invalid type",
    ];
    if internal.iter().any(|w| msg.contains(w)) {
        msg = "expected an OpenSLO document here: a mapping with apiVersion, kind and spec, each field of the type the OpenSLO v1 spec gives".to_owned();
    }
    match loc {
        Some((l, c)) => format!("line {l}, column {c}: {msg}"),
        None => msg,
    }
}

/// Options of [`import_openslo`].
#[derive(Debug, Clone, PartialEq)]
pub struct ImportOptions {
    /// Label carrying the class on engine series (`model_name`).
    pub class_label: String,
    /// `freeze_at` of the resulting budget policy (OpenSLO has no such field).
    pub freeze_at: f64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            class_label: "model_name".into(),
            freeze_at: 0.5,
        }
    }
}

/// Converts an OpenSLO v1 YAML stream (one or more documents; kinds other than `SLO` are skipped
/// with a warning) into an [`SloFile`], plus warnings.
///
/// # Errors
/// [`SloError::Invalid`] naming the document and field (`openslo[0].spec.objectives[1].target`)
/// of anything that cannot be expressed: see the module docs.
pub fn import_openslo(
    text: &str,
    opts: &ImportOptions,
) -> Result<(SloFile, Vec<String>), SloError> {
    let docs: Vec<Doc> = serde_saphyr::from_multiple(text).map_err(|e| {
        SloError::invalid(
            "openslo",
            format!("not an OpenSLO YAML stream: {}", yaml_problem(&e)),
        )
    })?;
    let mut classes: BTreeMap<String, ClassObjectives> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut window: Option<String> = None;
    let mut budget_target: Option<f64> = None;
    let mut n_slo = 0;
    // Where each objective came from, to name both places of a duplicate.
    let mut seen: BTreeMap<(String, &'static str, PctKey), (String, f64)> = BTreeMap::new();
    let mut seen_errors: BTreeMap<String, String> = BTreeMap::new();
    for (i, d) in docs.iter().enumerate() {
        let f = format!("openslo[{i}]");
        if d.api_version.as_deref() != Some("openslo/v1") {
            return Err(SloError::invalid(
                format!("{f}.apiVersion"),
                format!(
                    "{:?}; expected openslo/v1 (v1alpha and v2alpha are not supported)",
                    d.api_version.as_deref().unwrap_or("")
                ),
            ));
        }
        if d.kind.as_deref() != Some("SLO") {
            warnings.push(format!(
                "{f}: kind {} skipped; only kind SLO is imported (alerting comes from `headroom slo rules`)",
                d.kind.as_deref().unwrap_or("(none)")
            ));
            continue;
        }
        n_slo += 1;
        let spec = d
            .spec
            .as_ref()
            .ok_or_else(|| SloError::invalid(format!("{f}.spec"), "missing"))?;
        if spec.indicator_ref.is_some() {
            return Err(SloError::invalid(
                format!("{f}.spec.indicatorRef"),
                "references a separate SLI document; inline it as spec.indicator",
            ));
        }
        // Window.
        let w = match spec.time_window.as_slice() {
            [w] => w,
            _ => {
                return Err(SloError::invalid(
                    format!("{f}.spec.timeWindow"),
                    format!(
                        "expected exactly one window, found {}",
                        spec.time_window.len()
                    ),
                ));
            }
        };
        if w.calendar.is_some() || w.is_rolling == Some(false) {
            return Err(SloError::invalid(
                format!("{f}.spec.timeWindow[0]"),
                "calendar windows cannot be evaluated by Prometheus range queries; use a rolling window (isRolling: true, e.g. 28d)",
            ));
        }
        parse_prom_duration(&w.duration)
            .map_err(|m| SloError::invalid(format!("{f}.spec.timeWindow[0].duration"), m))?;
        match &window {
            Some(prev) if *prev != w.duration => {
                return Err(SloError::invalid(
                    format!("{f}.spec.timeWindow[0].duration"),
                    format!(
                        "{} differs from {prev} of an earlier SLO; slo.yaml has one budget window",
                        w.duration
                    ),
                ));
            }
            _ => window = Some(w.duration.clone()),
        }
        let method = spec.budgeting_method.as_deref().unwrap_or("Occurrences");
        let ind = spec.indicator.as_ref().ok_or_else(|| {
            SloError::invalid(
                format!("{f}.spec.indicator"),
                "missing (and no indicatorRef)",
            )
        })?;
        let fi = format!("{f}.spec.indicator.spec");
        if spec.objectives.is_empty() {
            return Err(SloError::invalid(
                format!("{f}.spec.objectives"),
                "expected at least one objective",
            ));
        }
        for (j, o) in spec.objectives.iter().enumerate() {
            let fo = format!("{f}.spec.objectives[{j}]");
            if o.indicator.is_some() || o.indicator_ref.is_some() {
                return Err(SloError::invalid(
                    &fo,
                    "composite objectives (an indicator per objective) cannot be expressed; split them into one SLO each",
                ));
            }
            let target = target_of(o, &fo)?;
            if let Some(r) = &ind.spec.ratio_metric {
                if method != "Occurrences" {
                    return Err(SloError::invalid(
                        format!("{f}.spec.budgetingMethod"),
                        format!(
                            "{method} cannot be expressed for a ratio metric; Headroom counts events (Occurrences)"
                        ),
                    ));
                }
                let (class, entry) = ratio(r, &fi, opts, &mut warnings)?;
                match entry {
                    Entry::Latency(signal, t) => {
                        let key = pct_key(target, &target_field(o, &fo), "target")?;
                        put_latency(&mut classes, &mut seen, &class, signal, key, t, &fo)?;
                    }
                    Entry::ErrorRate => {
                        if let Some(prev) = seen_errors.get(&class) {
                            return Err(SloError::invalid(
                                &fo,
                                format!(
                                    "a second error-rate objective for class {class} (the first is {prev}); slo.yaml holds one error_rate per class"
                                ),
                            ));
                        }
                        seen_errors.insert(class.clone(), fo.clone());
                        classes.entry(class).or_default().error_rate =
                            Some(crate::promql::clean(1.0 - target));
                    }
                }
            } else if let Some(t) = &ind.spec.threshold_metric {
                if method == "RatioTimeslices" {
                    return Err(SloError::invalid(
                        format!("{f}.spec.budgetingMethod"),
                        "RatioTimeslices cannot be expressed",
                    ));
                }
                let (class, signal, q) =
                    threshold(t, &format!("{fi}.thresholdMetric"), opts, &mut warnings)?;
                let value = o.value.ok_or_else(|| {
                    SloError::invalid(
                        format!("{fo}.value"),
                        "missing; expected the threshold in seconds",
                    )
                })?;
                match o.op.as_deref() {
                    Some("lt") | Some("lte") => {}
                    other => {
                        return Err(SloError::invalid(
                            format!("{fo}.op"),
                            format!(
                                "{}; only lt or lte (latency at most the threshold) can be expressed",
                                match other {
                                    Some(op) => format!("`{op}`"),
                                    None => "missing".to_owned(),
                                }
                            ),
                        ));
                    }
                }
                if !(value > 0.0 && value.is_finite()) {
                    return Err(SloError::invalid(
                        format!("{fo}.value"),
                        format!("{value}: expected a positive number of seconds"),
                    ));
                }
                let key = pct_key(
                    q,
                    &format!("{fi}.thresholdMetric.metricSource.spec.query"),
                    "quantile",
                )?;
                put_latency(&mut classes, &mut seen, &class, signal, key, value, &fo)?;
                budget_target = Some(budget_target.map_or(target, |b: f64| b.min(target)));
                // What the target counted depends on the budgeting method: good time slices
                // (Timeslices) or good events (Occurrences).
                let counted = if method == "Timeslices" {
                    "good time slices"
                } else {
                    "good events"
                };
                warnings.push(format!(
                    "{fo}: the target {} of {counted} becomes budget.target; slo.yaml judges the percentile itself",
                    fmt_float(target)
                ));
                // OpenSLO values are in the metric's unit: seconds for vLLM's histograms. A
                // latency objective above a minute is more likely milliseconds written as seconds.
                if value > 60.0 {
                    warnings.push(format!(
                        "{fo}.value: {} is read as {} s (OpenSLO values are in the metric's unit, seconds for vLLM's histograms); if milliseconds were meant, write {}",
                        fmt_float(value),
                        fmt_float(value),
                        fmt_float(value / 1000.0)
                    ));
                }
            } else {
                return Err(SloError::invalid(
                    &fi,
                    "expected ratioMetric or thresholdMetric",
                ));
            }
        }
    }
    if n_slo == 0 {
        return Err(SloError::invalid("openslo", "no document of kind SLO"));
    }
    // Ratio objectives carry their own targets; budget.target only records the threshold
    // metrics' time-slice target (else there is none: it would enter no computation).
    let file = SloFile {
        objectives: classes,
        budget: Some(headroom_core::slo::BudgetPolicy {
            window: window.unwrap_or_else(|| "30d".into()),
            target: budget_target.map(crate::promql::clean),
            freeze_at: opts.freeze_at,
        }),
    };
    let text = to_slo_yaml(&file);
    // Every field was checked above; should the result still not read back, say so without
    // dumping the generated file.
    let reread = SloFile::parse(&text, Path::new("converted slo.yaml")).map_err(|e| {
        SloError::invalid(
            "openslo",
            format!("the converted SLO does not validate: {}", e.message),
        )
    })?;
    Ok((reread, warnings))
}

/// The field that carried an objective's target (`target` or `targetPercent`).
fn target_field(o: &ObjectiveDoc, fo: &str) -> String {
    if o.target_percent.is_some() {
        format!("{fo}.targetPercent")
    } else {
        format!("{fo}.target")
    }
}

/// A share in (0, 1) (a target, or a quantile) as a `slo.yaml` percentile key: p1 to p99.99
/// ([`headroom_core::slo::MIN_PERCENTILE`], [`headroom_core::slo::MAX_PERCENTILE`]) with at
/// most three decimals, as a hand-written file requires; anything else is refused at `field`
/// rather than rounded.
fn pct_key(share: f64, field: &str, what: &str) -> Result<PctKey, SloError> {
    use headroom_core::slo::{MAX_PERCENTILE, MIN_PERCENTILE};
    let p = share * 100.0;
    let thousandths = p * 1000.0;
    if !(MIN_PERCENTILE..=MAX_PERCENTILE).contains(&crate::promql::clean(p)) {
        return Err(SloError::invalid(
            field,
            format!(
                "{what} {} makes p{}; slo.yaml percentiles lie from p1 to p99.99 (p99.99 already needs 10 000 observations)",
                fmt_float(share),
                fmt_float(crate::promql::clean(p))
            ),
        ));
    }
    if (thousandths - thousandths.round()).abs() > 1e-6 {
        return Err(SloError::invalid(
            field,
            format!(
                "{what} {} has more than three decimals of a percent; slo.yaml percentiles are written like p99.9 or p99.995",
                fmt_float(share)
            ),
        ));
    }
    Ok(PctKey(thousandths.round() as u32))
}

/// Records a latency objective, refusing a second one for the same class, signal and
/// percentile (slo.yaml holds one threshold there; the error-rate rule likewise).
fn put_latency(
    classes: &mut BTreeMap<String, ClassObjectives>,
    seen: &mut BTreeMap<(String, &'static str, PctKey), (String, f64)>,
    class: &str,
    signal: LatencySignal,
    key: PctKey,
    threshold_s: f64,
    field: &str,
) -> Result<(), SloError> {
    let k = (class.to_owned(), signal.name(), key);
    if let Some((prev, prev_t)) = seen.get(&k) {
        return Err(SloError::invalid(
            field,
            format!(
                "a second {} p{} objective for class {class} ({} here, {} at {prev}); slo.yaml holds one threshold per class, signal and percentile",
                signal.display(),
                fmt_float(key.value()),
                headroom_core::slo::fmt_duration_s(threshold_s),
                headroom_core::slo::fmt_duration_s(*prev_t),
            ),
        ));
    }
    seen.insert(k, (field.to_owned(), threshold_s));
    map_of(classes.entry(class.to_owned()).or_default(), signal).insert(key, threshold_s);
    Ok(())
}

enum Entry {
    Latency(LatencySignal, f64),
    ErrorRate,
}

fn map_of(c: &mut ClassObjectives, s: LatencySignal) -> &mut BTreeMap<PctKey, f64> {
    match s {
        LatencySignal::Ttft => &mut c.ttft,
        LatencySignal::Itl => &mut c.itl,
        LatencySignal::Tpot => &mut c.tpot,
        LatencySignal::E2e => &mut c.e2e,
        LatencySignal::QueueTime => &mut c.queue_time,
    }
}

fn ratio(
    r: &RatioMetric,
    fi: &str,
    opts: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<(String, Entry), SloError> {
    let fr = format!("{fi}.ratioMetric");
    if r.counter == Some(false) {
        return Err(SloError::invalid(
            format!("{fr}.counter"),
            "false (gauges) cannot be expressed; Headroom's SLIs are counters of events",
        ));
    }
    if r.raw.is_some() {
        return Err(SloError::invalid(
            format!("{fr}.raw"),
            "a precomputed ratio cannot be expressed; give good (or bad) and total queries",
        ));
    }
    let total = r
        .total
        .as_ref()
        .ok_or_else(|| SloError::invalid(format!("{fr}.total"), "missing"))?;
    let query = |h: &MetricHolder, f: &str| -> Result<Sel, SloError> {
        if let Some(k) = &h.metric_source.kind
            && !k.eq_ignore_ascii_case("prometheus")
        {
            return Err(SloError::invalid(
                format!("{f}.metricSource.type"),
                format!("{k}: only Prometheus (PromQL) sources can be imported"),
            ));
        }
        counter_query(
            &h.metric_source.spec.query,
            &format!("{f}.metricSource.spec.query"),
            &opts.class_label,
        )
    };
    let total_field = format!("{fr}.total.metricSource.spec.query");
    let total_sel = query(total, &format!("{fr}.total"))?;
    let (num, num_holder, is_good) = match (&r.good, &r.bad) {
        (Some(g), None) => (g, format!("{fr}.good"), true),
        (None, Some(b)) => (b, format!("{fr}.bad"), false),
        _ => {
            return Err(SloError::invalid(
                &fr,
                "expected exactly one of good and bad next to total",
            ));
        }
    };
    let num_field = format!("{num_holder}.metricSource.spec.query");
    let num_sel = query(num, &num_holder)?;
    // Good (or bad) events must be a subset of the very series total counts: the same
    // matchers but for the one that splits good from bad (le, or finished_reason).
    let same_series = |split: &str| -> Result<(), SloError> {
        let n = num_sel.others(&[split]);
        let t = total_sel.others(&[]);
        if n != t {
            return Err(SloError::invalid(
                &total_field,
                format!(
                    "total selects {{{}}} but {} selects {{{}}} (besides {split}); both must count the same series, differing only in {split}, or the ratio mixes classes or requests",
                    t.join(","),
                    if is_good { "good" } else { "bad" },
                    n.join(",")
                ),
            ));
        }
        Ok(())
    };
    // Latency: good = X_bucket{le}, total = X_count.
    if let (Some(fam), Some(tfam)) = (
        num_sel.name.strip_suffix("_bucket"),
        total_sel.name.strip_suffix("_count"),
    ) {
        let (signal, gateway) = signal_of(fam).ok_or_else(|| {
            SloError::invalid(
                &num_field,
                format!("{fam} is not a latency histogram Headroom knows (vLLM's TTFT, ITL, TPOT, E2E, queue time or the gateway's)"),
            )
        })?;
        if fam != tfam {
            return Err(SloError::invalid(
                &total_field,
                format!("counts {tfam}_count but the good events come from {fam}_bucket"),
            ));
        }
        if !is_good {
            return Err(SloError::invalid(
                &num_holder,
                "a latency SLI needs good = the bucket at the threshold, not bad",
            ));
        }
        let le = le_of(&num_sel).ok_or_else(|| {
            SloError::invalid(
                &num_field,
                "no le matcher with a number; a latency SLI's good events are the bucket at the threshold (le=\"0.25\")",
            )
        })?;
        same_series("le")?;
        let label = if gateway {
            catalogue::GATEWAY_CLASS_LABEL
        } else {
            opts.class_label.as_str()
        };
        let class = class_of(&num_sel, label, &num_field)?;
        note_other_matchers(&total_sel, &[label], &total_field, warnings);
        return Ok((class, Entry::Latency(signal, le)));
    }
    // Errors: request_success_total by finished_reason.
    if num_sel.name == VLLM_REQUEST_SUCCESS && total_sel.name == VLLM_REQUEST_SUCCESS {
        if total_sel
            .matchers
            .iter()
            .any(|(n, _, _)| n == "finished_reason")
        {
            return Err(SloError::invalid(
                &total_field,
                "total filters finished_reason; error_rate's total is every finished request (stop, length, abort, error), so a filtered total cannot be expressed",
            ));
        }
        let reasons = regex_values(&num_sel, "finished_reason")
            .ok_or_else(|| SloError::invalid(&num_field, "no finished_reason matcher (= or =~)"))?;
        let expect: &[&str] = if is_good {
            &["stop", "length"]
        } else {
            &["abort", "error"]
        };
        let ok = reasons.iter().all(|r| expect.contains(&r.as_str()))
            && expect.iter().all(|e| reasons.iter().any(|r| r == e));
        if !ok {
            return Err(SloError::invalid(
                &num_field,
                format!(
                    "finished_reason {} cannot be expressed; error_rate counts abort and error as bad, stop and length as good",
                    reasons.join("|")
                ),
            ));
        }
        same_series("finished_reason")?;
        let class = class_of(&num_sel, &opts.class_label, &num_field)?;
        note_other_matchers(&total_sel, &[&opts.class_label], &total_field, warnings);
        return Ok((class, Entry::ErrorRate));
    }
    Err(SloError::invalid(
        &fr,
        format!(
            "{} over {} cannot be expressed; Headroom imports latency histograms (bucket over count) and vllm:request_success_total",
            num_sel.name, total_sel.name
        ),
    ))
}

fn threshold(
    t: &MetricHolder,
    f: &str,
    opts: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<(String, LatencySignal, f64), SloError> {
    let fq = format!("{f}.metricSource.spec.query");
    let (q, sel) = quantile_query(&t.metric_source.spec.query, &fq, &opts.class_label)?;
    if !(q > 0.0 && q < 1.0) {
        return Err(SloError::invalid(
            &fq,
            format!(
                "quantile {q} out of range; expected 0 < q < 1 (a percentile strictly between p0 and p100)"
            ),
        ));
    }
    let fam = sel.name.strip_suffix("_bucket").unwrap_or(&sel.name);
    let (signal, gateway) = signal_of(fam).ok_or_else(|| {
        SloError::invalid(
            &fq,
            format!("{fam} is not a latency histogram Headroom knows"),
        )
    })?;
    let label = if gateway {
        catalogue::GATEWAY_CLASS_LABEL
    } else {
        opts.class_label.as_str()
    };
    if sel.matchers.iter().any(|(n, _, _)| n == "le") {
        return Err(SloError::invalid(
            &fq,
            "an le matcher inside histogram_quantile drops buckets and changes the percentile",
        ));
    }
    let class = class_of(&sel, label, &fq)?;
    note_other_matchers(&sel, &[label], &fq, warnings);
    Ok((class, signal, crate::promql::clean(q)))
}

/// Writes an [`SloFile`] as `slo.yaml` text that [`SloFile::parse`] reads back to the same value.
pub fn to_slo_yaml(f: &SloFile) -> String {
    let mut out = String::from("objectives:\n");
    for (class, o) in &f.objectives {
        out.push_str(&format!("  {}:\n", crate::promql::quote(class)));
        for (name, map) in [
            ("ttft", &o.ttft),
            ("itl", &o.itl),
            ("tpot", &o.tpot),
            ("e2e", &o.e2e),
            ("queue_time", &o.queue_time),
        ] {
            if map.is_empty() {
                continue;
            }
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("p{}: {}", fmt_float(k.value()), duration(*v)))
                .collect();
            out.push_str(&format!("    {name}: {{{}}}\n", items.join(", ")));
        }
        if let Some(r) = o.error_rate {
            out.push_str(&format!("    error_rate: {}%\n", fmt_float(r * 100.0)));
        }
    }
    if let Some(b) = &f.budget {
        let target = b
            .target
            .map(|t| format!(", target: {}%", fmt_float(t * 100.0)))
            .unwrap_or_default();
        out.push_str(&format!(
            "budget: {{window: {}{target}, freeze_at: {}%}}\n",
            b.window,
            fmt_float(b.freeze_at * 100.0)
        ));
    }
    out
}

/// Seconds as the shortest exact `slo.yaml` duration: `250ms`, `1.5s`, `50us`.
fn duration(s: f64) -> String {
    let ms = crate::promql::clean(s * 1e3);
    if ms >= 1.0 && ms == ms.trunc() {
        if ms >= 1000.0 && (ms / 1000.0) == (ms / 1000.0).trunc() {
            return format!("{}s", fmt_float(ms / 1000.0));
        }
        return format!("{}ms", fmt_float(ms));
    }
    if ms < 1.0 {
        return format!("{}us", fmt_float(s * 1e6));
    }
    format!("{}s", fmt_float(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::slo::Objective;

    const RATIO: &str = r#"
apiVersion: openslo/v1
kind: SLO
metadata: {name: chat-ttft}
spec:
  service: chat
  indicator:
    metadata: {name: ttft-under-250ms}
    spec:
      ratioMetric:
        counter: true
        good:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(vllm:time_to_first_token_seconds_bucket{model_name="chat",le="0.25"}[5m]))'}
        total:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(vllm:time_to_first_token_seconds_count{model_name="chat"}[5m]))'}
  timeWindow: [{duration: 28d, isRolling: true}]
  budgetingMethod: Occurrences
  objectives: [{displayName: fast first token, target: 0.95}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {name: chat-errors}
spec:
  service: chat
  indicator:
    metadata: {name: errors}
    spec:
      ratioMetric:
        counter: true
        bad:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(vllm:request_success_total{model_name="chat",finished_reason=~"abort|error"}[5m]))'}
        total:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(vllm:request_success_total{model_name="chat"}[5m]))'}
  timeWindow: [{duration: 28d, isRolling: true}]
  budgetingMethod: Occurrences
  objectives: [{targetPercent: 99.5}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {name: itl-p99}
spec:
  service: chat
  indicator:
    metadata: {name: itl}
    spec:
      thresholdMetric:
        metricSource:
          type: Prometheus
          spec: {query: 'histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{model_name="chat"}[5m])))'}
  timeWindow: [{duration: 28d, isRolling: true}]
  budgetingMethod: Timeslices
  objectives: [{op: lte, value: 0.05, target: 0.99, timeSliceTarget: 0.99, timeSliceWindow: 5m}]
"#;

    #[test]
    fn ratio_and_threshold_metrics_become_slo_yaml() {
        let (f, w) = import_openslo(RATIO, &ImportOptions::default()).unwrap();
        let spec = f.spec_for("chat");
        assert_eq!(
            spec.objectives,
            vec![
                Objective::Latency {
                    signal: LatencySignal::Ttft,
                    percentile: 95.0,
                    threshold_s: 0.25
                },
                Objective::Latency {
                    signal: LatencySignal::Itl,
                    percentile: 99.0,
                    threshold_s: 0.05
                },
                Objective::ErrorRate { max_ratio: 0.005 },
            ]
        );
        let b = f.budget.clone().unwrap();
        assert_eq!(b.window, "28d");
        assert_eq!(b.target, Some(0.99));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("openslo[2].spec.objectives[0]: the target 0.99"));
        // The written file reads back to the same value.
        let again = SloFile::parse(&to_slo_yaml(&f), Path::new("x")).unwrap();
        assert_eq!(again, f);
        assert_eq!(
            to_slo_yaml(&f),
            "objectives:\n  \"chat\":\n    ttft: {p95: 250ms}\n    itl: {p99: 50ms}\n    error_rate: 0.5%\nbudget: {window: 28d, target: 99%, freeze_at: 50%}\n"
        );
    }

    /// The warning names what an Occurrences target counts (events, not time slices), and a
    /// latency value above a minute is flagged as probably milliseconds written as seconds.
    #[test]
    fn threshold_warnings_follow_the_method_and_flag_large_values() {
        let text = RATIO
            .replace(
                "budgetingMethod: Timeslices",
                "budgetingMethod: Occurrences",
            )
            .replace("{op: lte, value: 0.05,", "{op: lte, value: 250,");
        let (f, w) = import_openslo(&text, &ImportOptions::default()).unwrap();
        assert!(
            w.iter()
                .any(|x| x.contains("the target 0.99 of good events becomes budget.target")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|x| x.contains("value: 250 is read as 250 s") && x.contains("write 0.25")),
            "{w:?}"
        );
        assert_eq!(
            f.spec_for("chat").objectives[1],
            Objective::Latency {
                signal: LatencySignal::Itl,
                percentile: 99.0,
                threshold_s: 250.0
            }
        );
    }

    fn with(replace: (&str, &str)) -> String {
        let first = RATIO.split("---").next().unwrap();
        assert!(first.contains(replace.0), "{}", replace.0);
        first.replace(replace.0, replace.1)
    }

    #[test]
    fn what_cannot_be_expressed_is_refused_with_the_field() {
        let o = ImportOptions::default();
        for (text, needle) in [
            (
                with(("target: 0.95", "target: 1.0")),
                "openslo[0].spec.objectives[0].target: 1 is out of range",
            ),
            (
                with(("target: 0.95", "targetPercent: 100")),
                "openslo[0].spec.objectives[0].targetPercent: 1 is out of range",
            ),
            (
                with((
                    "duration: 28d, isRolling: true",
                    "duration: 1M, isRolling: true",
                )),
                "openslo[0].spec.timeWindow[0].duration: `1M` is not a Prometheus duration",
            ),
            (
                with(("isRolling: true", "isRolling: false")),
                "openslo[0].spec.timeWindow[0]: calendar windows",
            ),
            (
                with(("counter: true", "counter: false")),
                "ratioMetric.counter: false (gauges)",
            ),
            (with(("le=\"0.25\"", "code=\"200\"")), "no le matcher"),
            (
                with(("apiVersion: openslo/v1", "apiVersion: openslo/v1alpha")),
                "openslo[0].apiVersion",
            ),
            (
                with((
                    "vllm:time_to_first_token_seconds_bucket",
                    "http_request_duration_seconds_bucket",
                )),
                "http_request_duration_seconds is not a latency histogram Headroom knows",
            ),
        ] {
            let e = import_openslo(&text, &o).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}\n  not in: {e}");
        }
        let third = RATIO.split("---").nth(2).unwrap();
        let e = import_openslo(&third.replace("0.99, sum", "1.5, sum"), &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("quantile 1.5 out of range"), "{e}");
        let e = import_openslo(&third.replace("op: lte", "op: gte"), &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("objectives[0].op"), "{e}");
    }

    const GOOD_Q: &str =
        r#"sum(rate(vllm:time_to_first_token_seconds_bucket{model_name="chat",le="0.25"}[5m]))"#;
    const TOTAL_Q: &str =
        r#"sum(rate(vllm:time_to_first_token_seconds_count{model_name="chat"}[5m]))"#;
    const ERR_BAD_Q: &str = r#"sum(rate(vllm:request_success_total{model_name="chat",finished_reason=~"abort|error"}[5m]))"#;
    const ERR_TOTAL_Q: &str = r#"sum(rate(vllm:request_success_total{model_name="chat"}[5m]))"#;
    const ITL_Q: &str = "histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{model_name=\"chat\"}[5m])))";

    fn first() -> &'static str {
        RATIO.split("---").next().unwrap()
    }
    fn second() -> &'static str {
        RATIO.split("---").nth(1).unwrap()
    }
    fn third() -> &'static str {
        RATIO.split("---").nth(2).unwrap()
    }

    fn refused(text: &str) -> String {
        import_openslo(text, &ImportOptions::default())
            .map(|(f, _)| format!("ACCEPTED: {}", to_slo_yaml(&f)))
            .unwrap_or_else(|e| e.to_string())
    }

    /// Each query shape that does not count what slo.yaml counts is refused at the query's
    /// path with the reason; the accepted shapes give the same objective as the canonical one.
    #[test]
    fn query_shapes_that_cannot_be_expressed_exactly_are_refused() {
        let good = "openslo[0].spec.indicator.spec.ratioMetric.good.metricSource.spec.query: ";
        let total = "openslo[0].spec.indicator.spec.ratioMetric.total.metricSource.spec.query: ";
        let cases: Vec<(String, &str, &str)> = vec![
            // good and total select different classes, or different series
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("\"chat\"", "\"other\"")), total, "total selects {model_name=\"other\"} but good selects {model_name=\"chat\"}"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("le=", "job=\"a\",le=")), total, "but good selects {job=\"a\",model_name=\"chat\"}"),
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("\"chat\"}", "\"chat\",le=\"0.25\"}")), total, "total selects {le=\"0.25\",model_name=\"chat\"}"),
            // arithmetic, other functions and aggregations change what is counted
            (first().replace(GOOD_Q, &format!("1 - {GOOD_Q}")), good, "arithmetic or a comparison (… - …) cannot be expressed exactly"),
            (first().replace(GOOD_Q, &format!("{GOOD_Q} * 2")), good, "arithmetic or a comparison (… * …)"),
            (first().replace(GOOD_Q, &format!("-{GOOD_Q}")), good, "a negation"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(rate(", "max(rate(")), good, "the aggregation max(…) cannot be expressed"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("rate(", "irate(")), good, "sum over the function irate(…)"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(", "sum by (instance) (")), good, "grouping by (instance) gives one series per group"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(", "sum without (instance) (")), good, "grouping without (instance)"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("[5m]", "[5m:1m]")), good, "sum over the function rate(…)"),
            // windows in the past
            (first().replace(GOOD_Q, &GOOD_Q.replace("[5m]", "[5m] offset 1w")), good, "`offset` or `@` moves the window into the past"),
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("[5m]", "[5m] @ 1700000000")), total, "`offset` or `@`"),
            // a set of classes
            (first().replace(GOOD_Q, &GOOD_Q.replace("model_name=\"chat\"", "model_name=~\"chat.*\"")).replace(TOTAL_Q, &TOTAL_Q.replace("model_name=\"chat\"", "model_name=~\"chat.*\"")), good, "`model_name=~\"chat.*\"` selects a set of classes"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("model_name=\"chat\"", "model_name!=\"chat\"")).replace(TOTAL_Q, &TOTAL_Q.replace("model_name=\"chat\"", "model_name!=\"chat\"")), good, "`model_name!=\"chat\"` selects a set of classes"),
            // error ratio: a filtered total, bad reasons that are not abort|error
            (second().replace(ERR_TOTAL_Q, &ERR_TOTAL_Q.replace("\"chat\"}", "\"chat\",finished_reason=\"stop\"}")), "ratioMetric.total.metricSource.spec.query: total filters finished_reason", "a filtered total cannot be expressed"),
            (second().replace(ERR_BAD_Q, &ERR_BAD_Q.replace("abort|error", "abort|error|stop")), "ratioMetric.bad.metricSource.spec.query: ", "finished_reason abort|error|stop cannot be expressed"),
            (second().replace(ERR_TOTAL_Q, &ERR_TOTAL_Q.replace("\"chat\"", "\"other\"")), "ratioMetric.total.metricSource.spec.query: ", "total selects {model_name=\"other\"} but bad selects {model_name=\"chat\"}"),
            // threshold metric: per-series quantiles, other groupings, offsets, regex classes
            (third().replace(ITL_Q, "histogram_quantile(0.99, rate(vllm:inter_token_latency_seconds_bucket{model_name=\"chat\"}[5m]))"), "thresholdMetric.metricSource.spec.query: ", "a percentile per series, not the class's"),
            (third().replace(ITL_Q, &ITL_Q.replace("by (le)", "by (le, instance)")), "thresholdMetric.metricSource.spec.query: ", "grouping by (le, instance)"),
            (third().replace(ITL_Q, &ITL_Q.replace("sum by (le)", "sum")), "thresholdMetric.metricSource.spec.query: ", "needs the buckets summed by le"),
            (third().replace(ITL_Q, &ITL_Q.replace("[5m]", "[5m] offset 1d")), "thresholdMetric.metricSource.spec.query: ", "`offset` or `@`"),
            (third().replace(ITL_Q, &ITL_Q.replace("model_name=\"chat\"", "model_name=~\"chat|rag\"")), "thresholdMetric.metricSource.spec.query: ", "selects a set of classes"),
            (third().replace(ITL_Q, &format!("2 * {ITL_Q}")), "thresholdMetric.metricSource.spec.query: ", "arithmetic or a comparison (… * …) cannot be expressed"),
            (third().replace("0.99, sum", "0.953335, sum"), "thresholdMetric.metricSource.spec.query: ", "quantile 0.953335 has more than three decimals of a percent"),
            (third().replace("op: lte", "op: gt"), "objectives[0].op: ", "`gt`; only lt or lte"),
            (third().replace("op: lte, ", ""), "objectives[0].op: ", "missing; only lt or lte"),
            // targets outside slo.yaml's percentiles: named at the target, not in generated YAML
            (first().replace("target: 0.95", "target: 0.005"), "openslo[0].spec.objectives[0].target: ", "target 0.005 makes p0.5; slo.yaml percentiles lie from p1 to p99.99"),
            (first().replace("target: 0.95", "targetPercent: 99.995"), "openslo[0].spec.objectives[0].targetPercent: ", "makes p99.995"),
            (first().replace("target: 0.95", "target: 0.9512345"), "openslo[0].spec.objectives[0].target: ", "more than three decimals"),
        ];
        for (text, field, reason) in &cases {
            assert!(
                !RATIO.contains(text.as_str()),
                "the mutation did not apply: {reason}"
            );
            let e = refused(text);
            assert!(
                e.contains(field) && e.contains(reason),
                "{field} … {reason}\n  not in: {e}"
            );
            for internal in ["Some(", "Option<", "objectives:\n"] {
                assert!(!e.contains(internal), "{internal} in: {e}");
            }
        }
        // Accepted shapes: rate or increase, the bare counter, sum by the class label,
        // parentheses, other matchers (with a warning naming the --match flag).
        let want = Objective::Latency {
            signal: LatencySignal::Ttft,
            percentile: 95.0,
            threshold_s: 0.25,
        };
        for (g, t) in [
            (GOOD_Q.to_string(), TOTAL_Q.to_string()),
            (
                GOOD_Q.replace("rate(", "increase("),
                TOTAL_Q.replace("rate(", "increase("),
            ),
            (
                r#"vllm:time_to_first_token_seconds_bucket{model_name="chat",le="0.25"}"#
                    .to_string(),
                r#"(vllm:time_to_first_token_seconds_count{model_name="chat"})"#.to_string(),
            ),
            (
                GOOD_Q.replace("sum(", "sum by (model_name) ("),
                format!("({TOTAL_Q})"),
            ),
            (
                GOOD_Q.replace("le=", "job=\"vllm\",le="),
                TOTAL_Q.replace("}", ",job=\"vllm\"}"),
            ),
        ] {
            let text = first().replace(GOOD_Q, &g).replace(TOTAL_Q, &t);
            assert_eq!(text == first(), g == GOOD_Q, "{g}");
            let (f, w) = import_openslo(&text, &ImportOptions::default()).unwrap();
            assert_eq!(f.spec_for("chat").objectives, vec![want.clone()], "{g}");
            if g.contains("job=") {
                assert_eq!(w.len(), 1, "{w:?}");
                assert!(w[0].contains("--match 'job=\"vllm\"'"), "{w:?}");
            } else {
                assert!(w.is_empty(), "{w:?}");
            }
        }
    }

    /// A second objective for the same class, signal and percentile is refused like a second
    /// error rate, whether the thresholds differ or not, naming both places.
    #[test]
    fn duplicate_objectives_are_refused_naming_both() {
        let again = first().replace("le=\"0.25\"", "le=\"0.5\"");
        let e = refused(&format!("{}---{again}", first()));
        assert!(
            e.starts_with("openslo[1].spec.objectives[0]: a second TTFT p95 objective for class chat (500 ms here, 250 ms at openslo[0].spec.objectives[0])"),
            "{e}"
        );
        let e = refused(&format!("{}---{}", first(), first()));
        assert!(e.contains("a second TTFT p95 objective"), "{e}");
        // the threshold metric's ITL p99 next to a ratio ITL p99
        let ratio_itl = first()
            .replace("time_to_first_token_seconds", "inter_token_latency_seconds")
            .replace("le=\"0.25\"", "le=\"0.05\"")
            .replace("target: 0.95", "target: 0.99");
        let e = refused(&format!("{ratio_itl}---{}", third()));
        assert!(e.starts_with("openslo[1].spec.objectives[0]: a second ITL p99 objective for class chat (50 ms here, 50 ms at openslo[0]"), "{e}");
        let e = refused(&format!("{}---{}", second(), second()));
        assert!(e.starts_with("openslo[1].spec.objectives[0]: a second error-rate objective for class chat (the first is openslo[0].spec.objectives[0])"), "{e}");
    }

    #[test]
    fn yaml_errors_read_without_parser_internals() {
        let e = refused(": : :\n    - [\n");
        assert!(e.starts_with("openslo: not an OpenSLO YAML stream: line 1, column 1: expected an OpenSLO document"), "{e}");
        let e = refused(&first().replace("target: 0.95", "target: \"abc\""));
        assert!(e.contains("line "), "{e}");
        for internal in ["Option<", "use ", "-->", "deserialize"] {
            assert!(!e.contains(internal), "{internal} in: {e}");
        }
    }

    #[test]
    fn durations_write_exactly() {
        assert_eq!(duration(0.25), "250ms");
        assert_eq!(duration(2.0), "2s");
        assert_eq!(duration(1.5), "1500ms");
        assert_eq!(duration(0.00005), "50us");
    }
}
