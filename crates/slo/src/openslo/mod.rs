//! Import of OpenSLO v1 (`apiVersion: openslo/v1`, `kind: SLO`; github.com/OpenSLO/OpenSLO)
//! into Headroom's `slo.yaml` ([`SloFile`](headroom_core::slo::SloFile)), wherever OpenSLO
//! expresses the same objectives:
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
//! with [`to_slo_yaml`] and re-read with
//! [`SloFile::parse`](headroom_core::slo::SloFile::parse), so it obeys every rule of a
//! hand-written `slo.yaml`.
//!
//! Rooms: `doc` (the OpenSLO document as read), `query` (the PromQL shapes that count what
//! `slo.yaml` counts), `indicator` (a ratio or threshold metric as a class and an objective),
//! `import` (documents and objectives into an `SloFile`, with its targets and percentiles) and
//! `write` (the `slo.yaml` text of an `SloFile`).

mod doc;
mod import;
mod indicator;
mod query;
mod write;

pub use import::{ImportOptions, import_openslo};
pub use write::to_slo_yaml;

/// OpenSLO documents the tests of several rooms mutate, and how they read the outcome.
#[cfg(test)]
mod test_support {
    use super::{ImportOptions, import_openslo, to_slo_yaml};

    pub(super) const RATIO: &str = r#"
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

    pub(super) fn with(replace: (&str, &str)) -> String {
        let first = RATIO.split("---").next().unwrap();
        assert!(first.contains(replace.0), "{}", replace.0);
        first.replace(replace.0, replace.1)
    }

    pub(super) fn first() -> &'static str {
        RATIO.split("---").next().unwrap()
    }
    pub(super) fn second() -> &'static str {
        RATIO.split("---").nth(1).unwrap()
    }
    pub(super) fn third() -> &'static str {
        RATIO.split("---").nth(2).unwrap()
    }

    pub(super) fn refused(text: &str) -> String {
        import_openslo(text, &ImportOptions::default())
            .map(|(f, _)| format!("ACCEPTED: {}", to_slo_yaml(&f)))
            .unwrap_or_else(|e| e.to_string())
    }
}
