//! From an objective of a request class to the PromQL of its SLI: bad events and all events over
//! a window, and their guarded ratio.
//!
//! Latency (threshold `T` on histogram `M`, `T` an exported `le`; "le must equal the threshold",
//! Sloth #506, Pyrra's latency indicator):
//! ```text
//! bad   = sum(rate(M_count{sel}[w])) - sum(rate(M_bucket{sel,le="T"}[w]))
//! total = sum(rate(M_count{sel}[w]))
//! ```
//! Errors (the `error_rate` objective):
//! ```text
//! bad   = vllm:request_success_total{sel,finished_reason=~"abort|error"} + http_requests_total{http,status=~"5.."}
//! total = vllm:request_success_total{sel}                              + http_requests_total{http,status=~"5.."}
//! ```
//! each term as `(sum(rate(…[w])) or vector(0))`, because instrumentator creates the `5xx`
//! series only at the first 5xx and a missing term would otherwise empty the whole sum. HTTP
//! series carry no model label; they are attributed to the class through the scrape target (see
//! [`Selectors::http_join_labels`]). An engine error that also ends as an HTTP 5xx counts
//! twice: the SLI errs on the side of alerting. HTTP 5xx that the engine never saw (a crash of
//! the API server, a timeout in front of the engine) count once, which is the point of adding
//! them.
//!
//! Ratio: `(bad) / ((total) > 0)`. On a quiet service the denominator filter empties the
//! result instead of producing `0/0 = NaN`, so recording rules record nothing and no alert can
//! fire on NaN (Sloth #133, #231, #531).

use crate::catalogue::{
    self, GATEWAY_CLASS_LABEL, HistogramSpec, VLLM_BAD_FINISHED_REASONS, VLLM_HTTP_REQUESTS,
    VLLM_NUM_REQUESTS_RUNNING, VLLM_REQUEST_SUCCESS,
};
use crate::promql::{Matcher, clean, le_matcher, le_value, regex_escape, selector};
use crate::{Rendered, SloError};
use headroom_core::LatencySignal;
use headroom_core::slo::{ClassObjectives, Objective, PctKey, SloFile, fmt_duration_s, fmt_num};
use std::collections::BTreeMap;

/// Which histograms latency SLIs are computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatencySource {
    /// vLLM's own histograms (server-side); thresholds must be vLLM bucket bounds.
    #[default]
    Vllm,
    /// The Headroom gateway's series, labelled `class`: latency from its
    /// `headroom_gateway_*_seconds` histograms (client-side definitions, buckets at every SLO
    /// threshold), errors from its `headroom_gateway_requests_total{outcome}`. Queue time stays
    /// on vLLM's histogram, over every request of the engine (it has no class).
    Gateway,
}

/// What to do with a latency threshold that is not a bucket bound of the histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffBucket {
    /// Refuse with an error naming the objective and the nearest bounds (default).
    #[default]
    Refuse,
    /// Use the next bound above (a looser objective) and warn.
    SnapUp,
    /// Use the next bound below (a stricter objective) and warn.
    SnapDown,
}

/// How a request class maps to series.
///
/// Engine series of class `c` are selected by `overrides[c]` when given, else by
/// `class_label="c"`; the default class `"*"` selects every value of `class_label` that no named
/// class claims (`class_label!~"a|b"`), or everything when the file names no class. `common` is
/// added to every engine selector, e.g. `job="vllm"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Selectors {
    /// Label that carries the class on engine series: `model_name` for vLLM (its
    /// `--served-model-name`).
    pub class_label: String,
    /// Whole matcher lists for some classes, replacing `class_label="c"`.
    pub overrides: BTreeMap<String, Vec<Matcher>>,
    /// Added to every engine selector.
    pub common: Vec<Matcher>,
    /// Selector of the engine's `http_requests_total`. `None` leaves HTTP status out of the
    /// error SLI. Default `handler=~"/v1/.*"` (the OpenAI endpoints); `common` is added.
    pub http: Option<Vec<Matcher>>,
    /// `http_requests_total` has no model label, so its 5xx are attributed to a class through
    /// the scrape target: `* on(<labels>) group_left() group by (<labels>)
    /// (vllm:num_requests_running{<class selector>})` keeps the HTTP series of the targets
    /// that serve the class. Default `job, instance`; empty counts every matching 5xx against
    /// every class.
    pub http_join_labels: Vec<String>,
    /// Added to every gateway selector (with [`LatencySource::Gateway`]).
    pub gateway_common: Vec<Matcher>,
}

impl Default for Selectors {
    fn default() -> Self {
        Selectors {
            class_label: "model_name".into(),
            overrides: BTreeMap::new(),
            common: Vec::new(),
            http: Some(vec![Matcher::re("handler", "/v1/.*")]),
            http_join_labels: vec!["job".into(), "instance".into()],
            gateway_common: Vec::new(),
        }
    }
}

/// Options shared by every SLI consumer (rules, dashboard, budget).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SliOptions {
    /// Class → series.
    pub selectors: Selectors,
    /// vLLM or gateway histograms.
    pub latency_source: LatencySource,
    /// Thresholds off the bucket grid.
    pub off_bucket: OffBucket,
    /// Only these classes (all the file defines when `None`).
    pub classes: Option<Vec<String>>,
}

/// The PromQL source of an SLI.
#[derive(Debug, Clone, PartialEq)]
pub enum SliSource {
    /// Good events are `metric_bucket{selector, le}`, all events `metric_count{selector}`.
    Latency {
        /// Histogram family.
        metric: String,
        /// The bucket bound, as printed in `le`.
        le: String,
        /// Class selector.
        selector: Vec<Matcher>,
    },
    /// The gateway's outcomes (with [`LatencySource::Gateway`]): bad events are requests that
    /// ended `upstream_error`, `timeout` or `rejected`; all events every finished request except
    /// `client_cancel` and `invalid_request` (the client's doing, not the service's).
    GatewayErrors {
        /// Class selector on `headroom_gateway_requests_total`.
        selector: Vec<Matcher>,
    },
    /// Bad events are aborted and failed requests plus HTTP 5xx.
    Errors {
        /// Class selector on `vllm:request_success_total`.
        selector: Vec<Matcher>,
        /// Selector on `http_requests_total`, if HTTP status is used.
        http: Option<Vec<Matcher>>,
        /// Labels joining HTTP series to the class's engine series (see
        /// [`Selectors::http_join_labels`]).
        join: Vec<String>,
    },
}

/// One objective of one class, ready to be queried.
#[derive(Debug, Clone, PartialEq)]
pub struct Sli {
    /// Class name as in `slo.yaml` (`"*"` for the default).
    pub class: String,
    /// The objective as evaluated (threshold snapped to a bucket when asked).
    pub objective: Objective,
    /// Dotted path of the objective in `slo.yaml`, e.g. `objectives.chat.ttft.p95`.
    pub field: String,
    /// Target share of good events (0.95 for p95; 0.995 for `error_rate: 0.5%`).
    pub target: f64,
    /// Error budget, `1 − target`.
    pub budget: f64,
    /// Where the events come from.
    pub source: SliSource,
}

impl Sli {
    /// `(bad, total)` events per second over `window` (PromQL `rate`).
    pub fn rates(&self, window: &str) -> (String, String) {
        self.events("rate", window)
    }

    /// `(bad, total)` event counts over `window` (PromQL `increase`).
    pub fn increases(&self, window: &str) -> (String, String) {
        self.events("increase", window)
    }

    fn events(&self, func: &str, w: &str) -> (String, String) {
        match &self.source {
            SliSource::Latency {
                metric,
                le,
                selector: sel,
            } => {
                let count = format!(
                    "sum({func}({}[{w}]))",
                    selector(&format!("{metric}_count"), sel)
                );
                let mut bsel = sel.clone();
                bsel.push(le_matcher(le));
                let good = format!(
                    "sum({func}({}[{w}]))",
                    selector(&format!("{metric}_bucket"), &bsel)
                );
                (format!("{count} - {good}"), count)
            }
            SliSource::GatewayErrors { selector: sel } => {
                let with = |m: Matcher| {
                    let mut v = sel.clone();
                    v.push(m);
                    format!(
                        "(sum({func}({}[{w}])) or vector(0))",
                        selector(catalogue::GATEWAY_REQUESTS, &v)
                    )
                };
                (
                    with(Matcher::re(
                        "outcome",
                        &catalogue::GATEWAY_BAD_OUTCOMES.join("|"),
                    )),
                    with(Matcher::not_re(
                        "outcome",
                        &catalogue::GATEWAY_NOT_SERVICE_OUTCOMES.join("|"),
                    )),
                )
            }
            SliSource::Errors {
                selector: sel,
                http,
                join,
            } => {
                let mut bad_sel = sel.clone();
                bad_sel.push(Matcher::re(
                    "finished_reason",
                    &VLLM_BAD_FINISHED_REASONS.join("|"),
                ));
                let term = |s: String| format!("(sum({func}({s}[{w}])) or vector(0))");
                let mut bad = term(selector(VLLM_REQUEST_SUCCESS, &bad_sel));
                let mut total = term(selector(VLLM_REQUEST_SUCCESS, sel));
                if let Some(h) = http {
                    let mut hs = h.clone();
                    hs.push(Matcher::re("status", "5.."));
                    let http_sel = selector(VLLM_HTTP_REQUESTS, &hs);
                    let t = if join.is_empty() {
                        term(http_sel)
                    } else {
                        let on = join.join(", ");
                        format!(
                            "(sum({func}({http_sel}[{w}]) * on({on}) group_left() group by ({on}) ({})) or vector(0))",
                            selector(VLLM_NUM_REQUESTS_RUNNING, sel)
                        )
                    };
                    bad = format!("{bad} + {t}");
                    total = format!("{total} + {t}");
                }
                (bad, total)
            }
        }
    }

    /// Error ratio over `window`, empty (not NaN) when there were no events.
    pub fn error_ratio(&self, window: &str) -> String {
        let (bad, total) = self.rates(window);
        format!("({bad})\n/\n(({total}) > 0)")
    }

    /// The series every event of this SLI is counted in, for `absent()` alerts.
    pub fn total_series(&self) -> String {
        match &self.source {
            SliSource::Latency {
                metric,
                selector: sel,
                ..
            } => selector(&format!("{metric}_count"), sel),
            SliSource::Errors { selector: sel, .. } => selector(VLLM_REQUEST_SUCCESS, sel),
            SliSource::GatewayErrors { selector: sel } => {
                selector(catalogue::GATEWAY_REQUESTS, sel)
            }
        }
    }
}

/// The classes to generate for, filtered by `opts.classes`: the named ones; `"*"` only when the
/// file names no class (the built-in SLO), where it stands for all traffic. Beside named classes
/// a `"*"` block sets their defaults and is no class of its own: as a catch-all it selected
/// `class!~"chat|rag"`, traffic that often does not exist, and its missing-series alert fired
/// forever.
///
/// # Errors
/// [`SloError::UnknownClass`] for a class in `opts.classes` or `opts.selectors.overrides` that
/// the file does not define.
pub fn classes(slo: &SloFile, opts: &SliOptions) -> Result<Vec<String>, SloError> {
    let all: Vec<String> = slo.objectives.keys().cloned().collect();
    let known = || {
        all.iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for c in opts.selectors.overrides.keys() {
        if !all.contains(c) {
            return Err(SloError::UnknownClass {
                field: "selectors.overrides".into(),
                class: c.clone(),
                known: known(),
            });
        }
    }
    let mut order: Vec<String> = slo.named_classes().map(String::from).collect();
    if order.is_empty() && slo.objectives.contains_key("*") {
        order.push("*".into());
    }
    match &opts.classes {
        None => Ok(order),
        Some(want) => {
            for c in want {
                if c == "*" && !order.iter().any(|o| o == "*") {
                    return Err(SloError::invalid(
                        "classes",
                        format!(
                            "`*` sets the defaults of the named classes ({}) and is not a class of its own; name one of them",
                            order.join(", ")
                        ),
                    ));
                }
                if !all.contains(c) {
                    return Err(SloError::UnknownClass {
                        field: "classes".into(),
                        class: c.clone(),
                        known: known(),
                    });
                }
            }
            Ok(order.into_iter().filter(|c| want.contains(c)).collect())
        }
    }
}

/// The engine selector of `class` (see [`Selectors`]).
pub fn engine_selector(slo: &SloFile, sel: &Selectors, class: &str) -> Vec<Matcher> {
    let mut m = match sel.overrides.get(class) {
        Some(o) => o.clone(),
        None if class == "*" => default_class_matchers(slo, &sel.class_label),
        None => vec![Matcher::eq(&sel.class_label, class)],
    };
    m.extend(sel.common.iter().cloned());
    m
}

fn gateway_selector(slo: &SloFile, sel: &Selectors, class: &str) -> Vec<Matcher> {
    let mut m = if class == "*" {
        default_class_matchers(slo, GATEWAY_CLASS_LABEL)
    } else {
        vec![Matcher::eq(GATEWAY_CLASS_LABEL, class)]
    };
    m.extend(sel.gateway_common.iter().cloned());
    m
}

fn default_class_matchers(slo: &SloFile, label: &str) -> Vec<Matcher> {
    let named: Vec<String> = slo.named_classes().map(regex_escape).collect();
    if named.is_empty() {
        Vec::new()
    } else {
        vec![Matcher::not_re(label, &named.join("|"))]
    }
}

fn signal_map(o: &ClassObjectives, s: LatencySignal) -> &BTreeMap<PctKey, f64> {
    match s {
        LatencySignal::Ttft => &o.ttft,
        LatencySignal::Itl => &o.itl,
        LatencySignal::Tpot => &o.tpot,
        LatencySignal::E2e => &o.e2e,
        LatencySignal::QueueTime => &o.queue_time,
    }
}

/// Dotted path of `objective` of `class` in `slo.yaml`: under the class when the class sets it,
/// else under `"*"`.
pub fn objective_field(slo: &SloFile, class: &str, objective: &Objective) -> String {
    let own = slo.objectives.get(class);
    match objective {
        Objective::Latency {
            signal, percentile, ..
        } => {
            let key = PctKey((percentile * 1000.0).round() as u32);
            let origin = if own.is_some_and(|o| signal_map(o, *signal).contains_key(&key)) {
                class
            } else {
                "*"
            };
            format!(
                "objectives.{origin}.{}.p{}",
                signal.name(),
                fmt_num(*percentile)
            )
        }
        Objective::ErrorRate { .. } => {
            let origin = if own.is_some_and(|o| o.error_rate.is_some()) {
                class
            } else {
                "*"
            };
            format!("objectives.{origin}.error_rate")
        }
    }
}

/// Resolves every objective of the selected classes to an [`Sli`]; warnings for snapped
/// thresholds.
///
/// # Errors
/// Unknown classes; a percentile outside (0, 100); a threshold that is not positive, or is not a
/// bucket bound under [`OffBucket::Refuse`] (naming the nearest bounds); an error rate of 0 or
/// ≥ 1 (no budget).
pub fn resolve(slo: &SloFile, opts: &SliOptions) -> Result<(Vec<Sli>, Vec<String>), SloError> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for class in classes(slo, opts)? {
        for objective in slo.spec_for(&class).objectives {
            let field = objective_field(slo, &class, &objective);
            out.push(resolve_one(
                slo,
                opts,
                &class,
                objective,
                field,
                &mut warnings,
            )?);
        }
    }
    Ok((out, warnings))
}

fn resolve_one(
    slo: &SloFile,
    opts: &SliOptions,
    class: &str,
    objective: Objective,
    field: String,
    warnings: &mut Vec<String>,
) -> Result<Sli, SloError> {
    match objective {
        Objective::Latency {
            signal,
            percentile,
            threshold_s,
        } => {
            if !(percentile > 0.0 && percentile < 100.0) {
                return Err(SloError::invalid(
                    field,
                    format!("percentile {percentile} out of range; expected 0 < p < 100"),
                ));
            }
            if !(threshold_s.is_finite() && threshold_s > 0.0) {
                return Err(SloError::invalid(
                    field,
                    format!("threshold {threshold_s} s; expected a positive duration"),
                ));
            }
            let gateway = match opts.latency_source {
                LatencySource::Gateway => catalogue::gateway_histogram(signal),
                LatencySource::Vllm => None,
            };
            let (metric, le, threshold, selector) = match gateway {
                Some(h) => (
                    h.metric,
                    le_value(threshold_s),
                    threshold_s,
                    gateway_selector(slo, &opts.selectors, class),
                ),
                None => {
                    let h = catalogue::vllm_histogram(signal);
                    let (le, t) = bucket_for(&h, threshold_s, opts, &field, warnings)?;
                    // With the gateway's classes, only the engine knows queue time, and its
                    // series carry no class: the objective is judged on all of its requests.
                    let sel = if opts.latency_source == LatencySource::Gateway {
                        warnings.push(format!(
                            "{field}: queue time is measured only by the engine, whose series carry no request class; with --latency-source gateway it is judged on every request of the engine (matchers {:?}), not on class {class:?} alone",
                            opts.selectors.common.iter().map(|m| m.to_string()).collect::<Vec<_>>()
                        ));
                        opts.selectors.common.clone()
                    } else {
                        engine_selector(slo, &opts.selectors, class)
                    };
                    (h.metric, le, t, sel)
                }
            };
            let target = clean(percentile / 100.0);
            Ok(Sli {
                class: class.into(),
                objective: Objective::Latency {
                    signal,
                    percentile,
                    threshold_s: threshold,
                },
                field,
                target,
                budget: clean(1.0 - target),
                source: SliSource::Latency {
                    metric: metric.into(),
                    le,
                    selector,
                },
            })
        }
        Objective::ErrorRate { max_ratio } => {
            if !(max_ratio > 0.0 && max_ratio < 1.0) {
                return Err(SloError::invalid(
                    field,
                    format!(
                        "{max_ratio} leaves no error budget (target of 100 % or more); expected a ratio in (0, 1), e.g. 0.5%"
                    ),
                ));
            }
            if opts.latency_source == LatencySource::Gateway {
                // The gateway's outcomes are per class; the engine's counters are not.
                return Ok(Sli {
                    class: class.into(),
                    objective,
                    field,
                    target: clean(1.0 - max_ratio),
                    budget: clean(max_ratio),
                    source: SliSource::GatewayErrors {
                        selector: gateway_selector(slo, &opts.selectors, class),
                    },
                });
            }
            let mut http = opts.selectors.http.clone();
            if let Some(h) = &mut http {
                h.extend(opts.selectors.common.iter().cloned());
            }
            Ok(Sli {
                class: class.into(),
                objective,
                field,
                target: clean(1.0 - max_ratio),
                budget: clean(max_ratio),
                source: SliSource::Errors {
                    selector: engine_selector(slo, &opts.selectors, class),
                    http,
                    join: opts.selectors.http_join_labels.clone(),
                },
            })
        }
    }
}

/// Finds the bucket bound equal to `t` (relative tolerance 1e-9), or snaps, or explains.
fn bucket_for(
    h: &HistogramSpec,
    t: f64,
    opts: &SliOptions,
    field: &str,
    warnings: &mut Vec<String>,
) -> Result<(String, f64), SloError> {
    let bounds: Vec<(f64, &str)> = h
        .buckets
        .iter()
        .filter_map(|b| b.parse::<f64>().ok().map(|v| (v, *b)))
        .collect();
    if let Some((v, b)) = bounds.iter().find(|(v, _)| (v - t).abs() <= 1e-9 * v.abs()) {
        return Ok((b.to_string(), *v));
    }
    let below = bounds.iter().rev().find(|(v, _)| *v < t);
    let above = bounds.iter().find(|(v, _)| *v > t);
    let show = |b: Option<&(f64, &str)>, side: &str| match b {
        Some((v, _)) => format!("{} {side}", fmt_duration_s(*v)),
        None => format!("none {side}"),
    };
    let problem = format!(
        "threshold {} is not a bucket bound of {} (vLLM 0.32 buckets); the nearest bounds are {} and {}",
        fmt_duration_s(t),
        h.metric,
        show(below, "below"),
        show(above, "above")
    );
    let snapped = match opts.off_bucket {
        OffBucket::Refuse => None,
        OffBucket::SnapUp => above.map(|b| (b, "up: the objective is looser than written")),
        OffBucket::SnapDown => below.map(|b| (b, "down: the objective is stricter than written")),
    };
    if let Some(((v, b), how)) = snapped {
        warnings.push(format!(
            "{field}: {problem}; using {} (snapped {how})",
            fmt_duration_s(*v)
        ));
        return Ok((b.to_string(), *v));
    }
    let gateway_hint = if h.signal == LatencySignal::QueueTime {
        "queue time is measured only by the engine, so the gateway cannot help"
    } else {
        "or measure at the Headroom gateway (latency source `gateway`), whose buckets include every SLO threshold"
    };
    Err(SloError::invalid(
        field,
        format!(
            "{problem}. A classic histogram counts events at or below a bound, so the threshold must be one (Sloth #506). Use a bound, snap up or down, {gateway_hint}"
        ),
    ))
}

/// Formats warnings as YAML comment lines for the top of a generated file.
pub(crate) fn warning_comments(r: &mut Rendered) {
    if r.warnings.is_empty() {
        return;
    }
    let mut head = String::new();
    for w in &r.warnings {
        head.push_str(&format!("# warning: {w}\n"));
    }
    r.text = head + &r.text;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn slo(t: &str) -> SloFile {
        SloFile::parse(t, Path::new("slo.yaml")).unwrap()
    }

    #[test]
    fn latency_sli_uses_count_minus_bucket() {
        let f = slo("objectives:\n  chat: {ttft: {p95: 250ms}}\n");
        let (s, w) = resolve(&f, &SliOptions::default()).unwrap();
        assert!(w.is_empty());
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].target, 0.95);
        assert_eq!(s[0].budget, 0.05);
        assert_eq!(s[0].field, "objectives.chat.ttft.p95");
        let (bad, total) = s[0].rates("5m");
        assert_eq!(
            total,
            "sum(rate(vllm:time_to_first_token_seconds_count{model_name=\"chat\"}[5m]))"
        );
        assert_eq!(
            bad,
            format!(
                "{total} - sum(rate(vllm:time_to_first_token_seconds_bucket{{model_name=\"chat\",le=\"0.25\"}}[5m]))"
            )
        );
        crate::promql::validate(&s[0].error_ratio("5m")).unwrap();
    }

    #[test]
    fn off_bucket_threshold_names_nearest_bounds() {
        let f = slo("objectives:\n  chat: {ttft: {p95: 300ms}}\n");
        let e = resolve(&f, &SliOptions::default()).unwrap_err().to_string();
        assert!(
            e.starts_with("objectives.chat.ttft.p95: threshold 300 ms"),
            "{e}"
        );
        assert!(e.contains("250 ms below and 500 ms above"), "{e}");
        assert!(e.contains("vllm:time_to_first_token_seconds"), "{e}");
        let up = SliOptions {
            off_bucket: OffBucket::SnapUp,
            ..Default::default()
        };
        let (s, w) = resolve(&f, &up).unwrap();
        assert!(
            matches!(s[0].objective, Objective::Latency { threshold_s, .. } if threshold_s == 0.5)
        );
        assert!(w[0].contains("using 500 ms (snapped up"), "{w:?}");
        let down = SliOptions {
            off_bucket: OffBucket::SnapDown,
            ..Default::default()
        };
        let (s, _) = resolve(&f, &down).unwrap();
        assert!(matches!(&s[0].source, SliSource::Latency { le, .. } if le == "0.25"));
    }

    /// With the gateway's classes, queue time (engine-only, no class label) is judged on every
    /// request of the engine, with a warning, and errors come from the gateway's outcomes.
    #[test]
    fn gateway_source_judges_queue_engine_wide_and_errors_per_class() {
        let f = slo("objectives:\n  long: {queue_time: {p95: 500ms}, error_rate: 1%}\n");
        let mut opts = SliOptions {
            latency_source: LatencySource::Gateway,
            ..Default::default()
        };
        opts.selectors.common = vec![Matcher::eq("job", "vllm")];
        let (s, w) = resolve(&f, &opts).unwrap();
        let queue = s
            .iter()
            .find(|x| x.field.ends_with("queue_time.p95"))
            .unwrap();
        assert!(
            matches!(&queue.source, SliSource::Latency { metric, selector, .. }
                if metric == "vllm:request_queue_time_seconds" && *selector == vec![Matcher::eq("job", "vllm")]),
            "{:?}",
            queue.source
        );
        assert!(
            w.iter()
                .any(|x| x.contains("judged on every request of the engine")),
            "{w:?}"
        );
        let err = s.iter().find(|x| x.field.ends_with("error_rate")).unwrap();
        let (bad, total) = err.increases("1h");
        assert_eq!(
            bad,
            "(sum(increase(headroom_gateway_requests_total{class=\"long\",outcome=~\"upstream_error|timeout|rejected\"}[1h])) or vector(0))"
        );
        assert_eq!(
            total,
            "(sum(increase(headroom_gateway_requests_total{class=\"long\",outcome!~\"client_cancel|invalid_request\"}[1h])) or vector(0))"
        );
    }

    #[test]
    fn queue_time_below_first_bucket_has_no_bound_below() {
        // The embedded default SLO's TTFT p95 < 300 ms lies between vLLM's 0.25 and 0.5 buckets,
        // and its queue_time p99 < 10 ms below the first queue bucket (0.3 s).
        let f = slo(headroom_core::slo::DEFAULT_SLO_YAML);
        let e = resolve(&f, &SliOptions::default()).unwrap_err().to_string();
        assert!(
            e.starts_with("objectives.*.ttft.p95: threshold 300 ms"),
            "{e}"
        );
        let f = slo("objectives:\n  \"*\": {queue_time: {p99: 10ms}}\n");
        let e = resolve(&f, &SliOptions::default()).unwrap_err().to_string();
        assert!(e.starts_with("objectives.*.queue_time.p99"), "{e}");
        assert!(e.contains("none below and 300 ms above"), "{e}");
        assert!(e.contains("only by the engine"), "{e}");
    }

    #[test]
    fn default_class_excludes_named_ones_and_unknown_class_is_refused() {
        let f = slo(
            "objectives:\n  \"*\": {error_rate: 1%}\n  chat: {ttft: {p95: 250ms}}\n  rag.v2: {ttft: {p95: 1s}}\n",
        );
        assert_eq!(
            engine_selector(&f, &Selectors::default(), "*"),
            vec![Matcher::not_re("model_name", "chat|rag\\.v2")]
        );
        let opts = SliOptions {
            classes: Some(vec!["chta".into()]),
            ..Default::default()
        };
        let e = resolve(&f, &opts).unwrap_err().to_string();
        assert_eq!(
            e,
            "classes: unknown class `chta`; the SLO file defines `*`, `chat`, `rag.v2`"
        );
        let (s, _) = resolve(&f, &SliOptions::default()).unwrap();
        // chat: ttft + inherited error rate; rag.v2: same; "*" is their defaults, no class.
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|x| x.class != "*"), "{s:?}");
        assert_eq!(s[1].field, "objectives.*.error_rate");
        assert_eq!(s[1].budget, 0.01);
        assert_eq!(s[1].target, 0.99);
        let star = SliOptions {
            classes: Some(vec!["*".into()]),
            ..Default::default()
        };
        let e = resolve(&f, &star).unwrap_err().to_string();
        assert!(e.contains("not a class of its own"), "{e}");
        // Alone, "*" is all traffic (the built-in SLO): one class, no class matcher.
        let only = slo("objectives:\n  \"*\": {error_rate: 1%}\n");
        let (s, _) = resolve(&only, &SliOptions::default()).unwrap();
        assert_eq!(s.len(), 1);
        assert!(matches!(&s[0].source, SliSource::Errors { selector, .. } if selector.is_empty()));
    }

    #[test]
    fn error_sli_adds_http_5xx_with_zero_fallbacks() {
        let f = slo("objectives:\n  chat: {error_rate: 0.5%}\n");
        let mut opts = SliOptions::default();
        opts.selectors.common = vec![Matcher::eq("job", "vllm")];
        let (s, _) = resolve(&f, &opts).unwrap();
        let (bad, total) = s[0].increases("30d");
        assert_eq!(
            bad,
            "(sum(increase(vllm:request_success_total{model_name=\"chat\",job=\"vllm\",finished_reason=~\"abort|error\"}[30d])) or vector(0)) + (sum(increase(http_requests_total{handler=~\"/v1/.*\",job=\"vllm\",status=~\"5..\"}[30d]) * on(job, instance) group_left() group by (job, instance) (vllm:num_requests_running{model_name=\"chat\",job=\"vllm\"})) or vector(0))"
        );
        assert!(total.starts_with(
            "(sum(increase(vllm:request_success_total{model_name=\"chat\",job=\"vllm\"}[30d])) or vector(0)) + "
        ));
        crate::promql::validate(&s[0].error_ratio("30d")).unwrap();
    }

    #[test]
    fn gateway_source_uses_class_label_and_exact_threshold() {
        let f = slo("objectives:\n  chat: {ttft: {p95: 300ms}, itl: {p99: 1s}}\n");
        let opts = SliOptions {
            latency_source: LatencySource::Gateway,
            ..Default::default()
        };
        let (s, _) = resolve(&f, &opts).unwrap();
        let (bad, _) = s[0].rates("5m");
        assert!(
            bad.contains("headroom_gateway_ttft_seconds_bucket{class=\"chat\",le=\"0.3\"}"),
            "{bad}"
        );
        let (bad, _) = s[1].rates("5m");
        assert!(bad.contains("le=~\"1(\\\\.0)?\""), "{bad}");
    }
}
