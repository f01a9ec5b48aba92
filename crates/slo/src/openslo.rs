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
use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};
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

/// One vector selector found in a query: metric name and its matchers.
struct Sel {
    name: String,
    matchers: Vec<(String, MatchOp, String)>,
}

struct Collect(Vec<Sel>);

impl ExprVisitor for Collect {
    type Error = ();
    fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
        let vs = match e {
            Expr::VectorSelector(v) => Some(v),
            Expr::MatrixSelector(m) => Some(&m.vs),
            _ => None,
        };
        if let Some(v) = vs {
            let mut matchers = Vec::new();
            let mut name = v.name.clone();
            for m in &v.matchers.matchers {
                if m.name == "__name__" {
                    name = Some(m.value.clone());
                } else {
                    matchers.push((m.name.clone(), m.op.clone(), m.value.clone()));
                }
            }
            if let Some(name) = name {
                self.0.push(Sel { name, matchers });
            }
        }
        Ok(true)
    }
}

fn selectors(query: &str, field: &str) -> Result<(Expr, Sel), SloError> {
    let expr = parse(query).map_err(|e| {
        SloError::invalid(field, format!("query is not valid PromQL ({e}): {query}"))
    })?;
    let mut c = Collect(Vec::new());
    let _ = walk_expr(&mut c, &expr);
    let mut names: Vec<&str> = c.0.iter().map(|s| s.name.as_str()).collect();
    names.dedup();
    if names.len() != 1 {
        return Err(SloError::invalid(
            field,
            format!(
                "expected a query over exactly one metric, found {}: {query}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        ));
    }
    let sel = c.0.into_iter().next().expect("one selector");
    Ok((expr, sel))
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

fn eq_value<'a>(sel: &'a Sel, label: &str) -> Option<&'a str> {
    sel.matchers
        .iter()
        .find(|(n, op, _)| n == label && matches!(op, MatchOp::Equal))
        .map(|(_, _, v)| v.as_str())
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

fn class_of(sel: &Sel, gateway: bool, class_label: &str) -> String {
    let label = if gateway {
        catalogue::GATEWAY_CLASS_LABEL
    } else {
        class_label
    };
    eq_value(sel, label).unwrap_or("*").to_string()
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
    let docs: Vec<Doc> = serde_saphyr::from_multiple(text)
        .map_err(|e| SloError::invalid("openslo", format!("not an OpenSLO YAML stream: {e}")))?;
    let mut classes: BTreeMap<String, ClassObjectives> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut window: Option<String> = None;
    let mut budget_target: Option<f64> = None;
    let mut n_slo = 0;
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
                let (class, entry) = ratio(r, &fi, opts)?;
                let c = classes.entry(class.clone()).or_default();
                match entry {
                    Entry::Latency(s, t) => {
                        map_of(c, s).insert(PctKey((target * 100_000.0).round() as u32), t);
                    }
                    Entry::ErrorRate => {
                        if c.error_rate.is_some() {
                            return Err(SloError::invalid(
                                &fo,
                                format!("a second error-rate objective for class {class}"),
                            ));
                        }
                        c.error_rate = Some(crate::promql::clean(1.0 - target));
                    }
                }
            } else if let Some(t) = &ind.spec.threshold_metric {
                if method == "RatioTimeslices" {
                    return Err(SloError::invalid(
                        format!("{f}.spec.budgetingMethod"),
                        "RatioTimeslices cannot be expressed",
                    ));
                }
                let (class, signal, q) = threshold(t, &format!("{fi}.thresholdMetric"), opts)?;
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
                                "{other:?}: only lt / lte (latency at most the threshold) can be expressed"
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
                let c = classes.entry(class).or_default();
                map_of(c, signal).insert(PctKey((q * 100_000.0).round() as u32), value);
                budget_target = Some(budget_target.map_or(target, |b: f64| b.min(target)));
                warnings.push(format!(
                    "{fo}: the target {} of good time slices becomes budget.target; slo.yaml judges the percentile itself",
                    fmt_float(target)
                ));
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
    // metrics' time-slice target, else the strictest objective target.
    let strictest = classes
        .values()
        .flat_map(|c| {
            let mut v: Vec<f64> = [&c.ttft, &c.itl, &c.tpot, &c.e2e, &c.queue_time]
                .iter()
                .flat_map(|m| m.keys().map(|k| k.value() / 100.0))
                .collect();
            v.extend(c.error_rate.map(|r| 1.0 - r));
            v
        })
        .fold(0.0_f64, f64::max);
    let target = budget_target.unwrap_or(strictest);
    let file = SloFile {
        objectives: classes,
        budget: Some(headroom_core::slo::BudgetPolicy {
            window: window.unwrap_or_else(|| "30d".into()),
            target: crate::promql::clean(target),
            freeze_at: opts.freeze_at,
        }),
    };
    let text = to_slo_yaml(&file);
    let reread = SloFile::parse(&text, Path::new("imported slo.yaml"))
        .map_err(|e| SloError::invalid("openslo", format!("{e}\n{text}")))?;
    Ok((reread, warnings))
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

fn ratio(r: &RatioMetric, fi: &str, opts: &ImportOptions) -> Result<(String, Entry), SloError> {
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
        Ok(selectors(
            &h.metric_source.spec.query,
            &format!("{f}.metricSource.spec.query"),
        )?
        .1)
    };
    let total_sel = query(total, &format!("{fr}.total"))?;
    let (num, num_field, is_good) = match (&r.good, &r.bad) {
        (Some(g), None) => (g, format!("{fr}.good"), true),
        (None, Some(b)) => (b, format!("{fr}.bad"), false),
        _ => {
            return Err(SloError::invalid(
                &fr,
                "expected exactly one of good and bad next to total",
            ));
        }
    };
    let num_sel = query(num, &num_field)?;
    // Latency: good = X_bucket{le}, total = X_count.
    if let (Some(fam), Some(tfam)) = (
        num_sel.name.strip_suffix("_bucket"),
        total_sel.name.strip_suffix("_count"),
    ) {
        let (signal, gateway) = signal_of(fam).ok_or_else(|| {
            SloError::invalid(
                format!("{num_field}.metricSource.spec.query"),
                format!("{fam} is not a latency histogram Headroom knows (vLLM's TTFT, ITL, TPOT, E2E, queue time or the gateway's)"),
            )
        })?;
        if fam != tfam {
            return Err(SloError::invalid(
                format!("{fr}.total.metricSource.spec.query"),
                format!("counts {tfam}_count but the good events come from {fam}_bucket"),
            ));
        }
        if !is_good {
            return Err(SloError::invalid(
                &num_field,
                "a latency SLI needs good = the bucket at the threshold, not bad",
            ));
        }
        let le = le_of(&num_sel).ok_or_else(|| {
            SloError::invalid(
                format!("{num_field}.metricSource.spec.query"),
                "no le matcher with a number; a latency SLI's good events are the bucket at the threshold (le=\"0.25\")",
            )
        })?;
        return Ok((
            class_of(&num_sel, gateway, &opts.class_label),
            Entry::Latency(signal, le),
        ));
    }
    // Errors: request_success_total by finished_reason.
    if num_sel.name == VLLM_REQUEST_SUCCESS && total_sel.name == VLLM_REQUEST_SUCCESS {
        let reasons = regex_values(&num_sel, "finished_reason").ok_or_else(|| {
            SloError::invalid(
                format!("{num_field}.metricSource.spec.query"),
                "no finished_reason matcher (= or =~)",
            )
        })?;
        let expect: &[&str] = if is_good {
            &["stop", "length"]
        } else {
            &["abort", "error"]
        };
        let ok = reasons.iter().all(|r| expect.contains(&r.as_str()))
            && expect.iter().all(|e| reasons.iter().any(|r| r == e));
        if !ok {
            return Err(SloError::invalid(
                format!("{num_field}.metricSource.spec.query"),
                format!(
                    "finished_reason {} cannot be expressed; error_rate counts abort and error as bad, stop and length as good",
                    reasons.join("|")
                ),
            ));
        }
        return Ok((
            class_of(&num_sel, false, &opts.class_label),
            Entry::ErrorRate,
        ));
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
) -> Result<(String, LatencySignal, f64), SloError> {
    let fq = format!("{f}.metricSource.spec.query");
    let (expr, sel) = selectors(&t.metric_source.spec.query, &fq)?;
    let q = quantile_arg(&expr).ok_or_else(|| {
        SloError::invalid(
            &fq,
            "expected histogram_quantile(<q>, …) over a latency histogram",
        )
    })?;
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
    Ok((
        class_of(&sel, gateway, &opts.class_label),
        signal,
        crate::promql::clean(q),
    ))
}

fn quantile_arg(e: &Expr) -> Option<f64> {
    match e {
        Expr::Paren(p) => quantile_arg(&p.expr),
        Expr::Call(c) if c.func.name == "histogram_quantile" => match c.args.args.first()?.as_ref()
        {
            Expr::NumberLiteral(n) => Some(n.val),
            _ => None,
        },
        _ => None,
    }
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
        out.push_str(&format!(
            "budget: {{window: {}, target: {}%, freeze_at: {}%}}\n",
            b.window,
            fmt_float(b.target * 100.0),
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
        assert_eq!(b.target, 0.99);
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

    #[test]
    fn durations_write_exactly() {
        assert_eq!(duration(0.25), "250ms");
        assert_eq!(duration(2.0), "2s");
        assert_eq!(duration(1.5), "1500ms");
        assert_eq!(duration(0.00005), "50us");
    }
}
