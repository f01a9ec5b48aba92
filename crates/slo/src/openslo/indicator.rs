//! One OpenSLO indicator as a class and an objective: a ratio metric (a latency histogram's
//! bucket over its count, or vLLM's request successes by finished reason) or a threshold metric
//! (a histogram quantile).

use super::doc::{MetricHolder, RatioMetric};
use super::import::ImportOptions;
use super::query::{
    Sel, class_of, counter_query, le_of, note_other_matchers, quantile_query, regex_values,
};
use crate::SloError;
use crate::catalogue::{self, VLLM_REQUEST_SUCCESS};
use headroom_core::LatencySignal;

pub(super) enum Entry {
    Latency(LatencySignal, f64),
    ErrorRate,
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

pub(super) fn ratio(
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

pub(super) fn threshold(
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
