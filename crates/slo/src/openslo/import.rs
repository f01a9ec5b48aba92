//! The import: each SLO document's window, budgeting method and objectives into one
//! [`SloFile`], with targets and quantiles as `slo.yaml` percentiles and duplicates refused.

use super::doc::{Doc, ObjectiveDoc, yaml_problem};
use super::indicator::{Entry, ratio, threshold};
use super::write::to_slo_yaml;
use crate::SloError;
use crate::promql::{fmt_float, parse_prom_duration};
use headroom_core::LatencySignal;
use headroom_core::slo::{ClassObjectives, PctKey, SloFile};
use std::collections::BTreeMap;
use std::path::Path;

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

fn map_of(c: &mut ClassObjectives, s: LatencySignal) -> &mut BTreeMap<PctKey, f64> {
    match s {
        LatencySignal::Ttft => &mut c.ttft,
        LatencySignal::Itl => &mut c.itl,
        LatencySignal::Tpot => &mut c.tpot,
        LatencySignal::E2e => &mut c.e2e,
        LatencySignal::QueueTime => &mut c.queue_time,
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::openslo::test_support::{RATIO, first, refused, second, third, with};
    use headroom_core::slo::Objective;

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
}
