//! `headroom slo autoscale`: an autoscaling trigger that describes admission capacity — a KEDA
//! `ScaledObject` with two Prometheus triggers, plus the same policy as a plain
//! `autoscaling/v2` HorizontalPodAutoscaler on External metrics served by prometheus-adapter
//! (its `externalRules` are included).
//!
//! The two signals and why:
//! - `vllm:kv_cache_usage_perc` (a 0–1 ratio): the KV pool is what bounds how many sequences a
//!   replica can hold. When it runs out, vLLM preempts running requests (recompute) and queues
//!   new ones, and TTFT and ITL break. Target: mean use at most `kv_usage_target` (default 0.8),
//!   which leaves room for the prefill of a burst before preemption starts.
//! - `vllm:num_requests_waiting`: requests the scheduler could not admit. Every waiting request
//!   adds queue time to its TTFT, and queue time is the earliest saturation signal. Target:
//!   `waiting_per_replica` (default 2) on average over 2 minutes: a couple of waiting requests
//!   are admitted within the next engine steps, a sustained queue is not.
//!
//! Both use KEDA's/HPA's `AverageValue`: desired replicas = ⌈Σ metric ÷ target⌉, so the queries
//! sum over the class's engines. Never GPU utilisation: `DCGM_FI_DEV_GPU_UTIL` reads near 100 %
//! whenever any kernel runs, at low and at high load alike under continuous batching, so it says
//! nothing about how many more requests a replica can admit; VRAM is flat because vLLM
//! preallocates it.

use crate::promql::{MatchOp, Matcher, fmt_float, parse_prom_duration, selector};
use crate::sli::{self, SliOptions};
use crate::{Rendered, SloError};
use headroom_core::slo::SloFile;
use serde_json::{Value, json};

/// Options of [`autoscale()`].
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscaleOptions {
    /// Class to scale (a served model). `None`: the file's only class.
    pub class: Option<String>,
    /// Class → series (label `model_name` by default).
    pub sli: SliOptions,
    /// Deployment (or other scalable resource) running the vLLM replicas.
    pub deployment: String,
    /// Namespace of the deployment; `None` leaves it out.
    pub namespace: Option<String>,
    /// Prometheus URL as seen from KEDA.
    pub prometheus_url: String,
    /// Replica bounds.
    pub min_replicas: u32,
    /// Replica bounds.
    pub max_replicas: u32,
    /// Target mean KV-cache use per engine, in (0, 1).
    pub kv_usage_target: f64,
    /// Target waiting requests per replica, averaged over `smoothing`.
    pub waiting_per_replica: f64,
    /// vLLM engines (data-parallel ranks) per replica; the KV target is per engine.
    pub engines_per_replica: u32,
    /// Averaging window of both signals (Prometheus duration).
    pub smoothing: String,
    /// Seconds of stable lower recommendations before scaling down.
    pub scale_down_stabilization_s: u32,
}

impl Default for AutoscaleOptions {
    fn default() -> Self {
        AutoscaleOptions {
            class: None,
            sli: SliOptions::default(),
            deployment: "vllm".into(),
            namespace: None,
            prometheus_url: "http://prometheus-operated.monitoring.svc:9090".into(),
            min_replicas: 1,
            max_replicas: 8,
            kv_usage_target: 0.8,
            waiting_per_replica: 2.0,
            engines_per_replica: 1,
            smoothing: "2m".into(),
            scale_down_stabilization_s: 300,
        }
    }
}

/// A Kubernetes quantity for `v`: whole numbers as they are, others in milli-units (`800m`).
fn quantity(v: f64) -> String {
    if v == v.trunc() {
        fmt_float(v)
    } else {
        format!("{}m", (v * 1000.0).round() as i64)
    }
}

fn check(opts: &AutoscaleOptions) -> Result<(), SloError> {
    if !(opts.kv_usage_target > 0.0 && opts.kv_usage_target < 1.0) {
        return Err(SloError::invalid(
            "kv_usage_target",
            format!(
                "{} is outside (0, 1); vllm:kv_cache_usage_perc is a 0–1 ratio (e.g. 0.8)",
                opts.kv_usage_target
            ),
        ));
    }
    if !(opts.waiting_per_replica > 0.0 && opts.waiting_per_replica.is_finite()) {
        return Err(SloError::invalid(
            "waiting_per_replica",
            format!("{}: expected a positive number", opts.waiting_per_replica),
        ));
    }
    if opts.min_replicas == 0 || opts.min_replicas > opts.max_replicas {
        return Err(SloError::invalid(
            "min_replicas",
            format!(
                "{}..{}: expected 1 ≤ min_replicas ≤ max_replicas (a vLLM replica takes minutes to load, so this trigger does not scale to zero)",
                opts.min_replicas, opts.max_replicas
            ),
        ));
    }
    if opts.engines_per_replica == 0 {
        return Err(SloError::invalid(
            "engines_per_replica",
            "0: expected at least 1",
        ));
    }
    parse_prom_duration(&opts.smoothing).map_err(|m| SloError::invalid("smoothing", m))?;
    Ok(())
}

/// Kubernetes label selector (`matchLabels` / `matchExpressions`) for the HPA example.
fn k8s_selector(matchers: &[Matcher]) -> Result<Value, SloError> {
    let mut labels = serde_json::Map::new();
    let mut exprs = Vec::new();
    for m in matchers {
        match m.op {
            MatchOp::Eq => {
                labels.insert(m.name.clone(), Value::String(m.value.clone()));
            }
            MatchOp::NotRe | MatchOp::Re
                if m.value
                    .split('|')
                    .all(|v| !v.is_empty() && !v.replace("\\.", "").contains(['.', '*', '+'])) =>
            {
                let values: Vec<String> = m.value.split('|').map(|v| v.replace('\\', "")).collect();
                let op = if m.op == MatchOp::Re { "In" } else { "NotIn" };
                exprs.push(json!({"key": m.name, "operator": op, "values": values}));
            }
            _ => {
                return Err(SloError::invalid(
                    "selectors",
                    format!(
                        "the HPA example cannot express the matcher {m} as a Kubernetes label selector; use the KEDA ScaledObject, which takes PromQL"
                    ),
                ));
            }
        }
    }
    let mut sel = serde_json::Map::new();
    if !labels.is_empty() {
        sel.insert("matchLabels".into(), Value::Object(labels));
    }
    if !exprs.is_empty() {
        sel.insert("matchExpressions".into(), Value::Array(exprs));
    }
    Ok(Value::Object(sel))
}

/// `headroom slo autoscale`: KEDA `ScaledObject`, HPA example and prometheus-adapter rules, as
/// a multi-document YAML stream.
///
/// # Errors
/// An unknown class, or no class given when the file has several; targets out of range; a
/// smoothing window Prometheus cannot evaluate; a selector the HPA cannot express.
pub fn autoscale(slo: &SloFile, opts: &AutoscaleOptions) -> Result<Rendered, SloError> {
    check(opts)?;
    let all = sli::classes(slo, &SliOptions::default())?;
    let class = match &opts.class {
        Some(c) => {
            let mut o = opts.sli.clone();
            o.classes = Some(vec![c.clone()]);
            sli::classes(slo, &o)?;
            c.clone()
        }
        None if all.len() == 1 => all[0].clone(),
        None => {
            return Err(SloError::invalid(
                "class",
                format!(
                    "the SLO file defines {} classes ({}); name the one (served model) to scale with --class NAME",
                    all.len(),
                    all.join(", ")
                ),
            ));
        }
    };
    let sel = sli::engine_selector(slo, &opts.sli.selectors, &class);
    let w = &opts.smoothing;
    let waiting_q = format!(
        "sum(avg_over_time({}[{w}]))",
        selector(crate::catalogue::VLLM_NUM_REQUESTS_WAITING, &sel)
    );
    let kv_q = format!(
        "sum(avg_over_time({}[{w}]))",
        selector(crate::catalogue::VLLM_KV_CACHE_USAGE, &sel)
    );
    crate::promql::validate(&waiting_q)?;
    crate::promql::validate(&kv_q)?;
    let kv_target = opts.kv_usage_target * f64::from(opts.engines_per_replica);
    let name = format!("{}-headroom", opts.deployment);
    let mut meta = json!({"name": name, "labels": {"app.kubernetes.io/managed-by": "headroom"}});
    if let Some(ns) = &opts.namespace {
        meta["namespace"] = json!(ns);
    }
    let behavior = json!({
        "scaleUp": {"stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": opts.scale_down_stabilization_s,
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]}
    });
    let keda = json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.deployment},
            "minReplicaCount": opts.min_replicas,
            "maxReplicaCount": opts.max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": opts.scale_down_stabilization_s,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [
                {"type": "prometheus", "name": "kv-cache-usage", "metricType": "AverageValue",
                 "metadata": {"serverAddress": opts.prometheus_url, "query": kv_q,
                              "threshold": fmt_float(kv_target)}},
                {"type": "prometheus", "name": "requests-waiting", "metricType": "AverageValue",
                 "metadata": {"serverAddress": opts.prometheus_url, "query": waiting_q,
                              "threshold": fmt_float(opts.waiting_per_replica),
                              "activationThreshold": "0"}}
            ]
        }
    });
    let k8s_sel = k8s_selector(&sel)?;
    let hpa = json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.deployment},
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "behavior": behavior,
            "metrics": [
                {"type": "External", "external": {
                    "metric": {"name": "vllm_kv_cache_usage_perc", "selector": k8s_sel},
                    "target": {"type": "AverageValue", "averageValue": quantity(kv_target)}}},
                {"type": "External", "external": {
                    "metric": {"name": "vllm_num_requests_waiting", "selector": k8s_sel},
                    "target": {"type": "AverageValue", "averageValue": quantity(opts.waiting_per_replica)}}}
            ]
        }
    });
    let adapter_rule = |metric: &str, as_name: &str| {
        json!({
            "seriesQuery": format!("{metric}{{{}!=\"\"}}", opts.sli.selectors.class_label),
            "resources": {"namespaced": false},
            "name": {"matches": format!("^{metric}$"), "as": as_name},
            "metricsQuery": format!("sum(avg_over_time(<<.Series>>{{<<.LabelMatchers>>}}[{w}]))")
        })
    };
    let adapter = json!({"externalRules": [
        adapter_rule(crate::catalogue::VLLM_KV_CACHE_USAGE, "vllm_kv_cache_usage_perc"),
        adapter_rule(crate::catalogue::VLLM_NUM_REQUESTS_WAITING, "vllm_num_requests_waiting"),
    ]});
    let y = |v: &Value| {
        serde_saphyr::to_string(v)
            .map_err(|e| SloError::invalid("autoscale", format!("cannot serialise YAML: {e}")))
    };
    let header = format!(
        "# Generated by `headroom slo autoscale` for class {class}.\n\
         # Scale on admission capacity: KV-cache use (target {} per engine) and waiting requests\n\
         # (target {} per replica), both averaged over {w}. Never on GPU utilisation: it reads\n\
         # ~100 % whenever any kernel runs and says nothing about how many more requests fit.\n",
        fmt_float(opts.kv_usage_target),
        fmt_float(opts.waiting_per_replica),
    );
    let text = format!(
        "{header}# 1. KEDA ScaledObject (KEDA queries Prometheus directly).\n{}---\n\
         # 2. The same policy as a plain HPA on External metrics; needs prometheus-adapter with the\n\
         #    rules in document 3. Use either 1 or 2, not both.\n{}---\n\
         # 3. prometheus-adapter configuration (values: rules.external).\n{}",
        y(&keda)?,
        y(&hpa)?,
        y(&adapter)?
    );
    Ok(Rendered {
        text,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn slo(t: &str) -> SloFile {
        SloFile::parse(t, Path::new("slo.yaml")).unwrap()
    }

    #[test]
    fn triggers_are_kv_use_and_waiting_never_gpu_utilisation() {
        let f = slo("objectives:\n  llama-70b: {ttft: {p95: 500ms}}\n");
        let r = autoscale(&f, &AutoscaleOptions::default()).unwrap();
        let docs: Vec<&str> = r.text.split("\n---\n").collect();
        assert_eq!(docs.len(), 3);
        assert!(r.text.contains(
            "query: sum(avg_over_time(vllm:kv_cache_usage_perc{model_name=\"llama-70b\"}[2m]))"
        ));
        assert!(r.text.contains(
            "query: sum(avg_over_time(vllm:num_requests_waiting{model_name=\"llama-70b\"}[2m]))"
        ));
        assert!(r.text.contains("threshold: \"0.8\""), "{}", r.text);
        assert!(r.text.contains("averageValue: 800m"), "{}", r.text);
        assert!(r.text.contains("averageValue: \"2\""), "{}", r.text);
        assert!(!r.text.contains("DCGM"));
        assert!(!r.text.to_lowercase().contains("gpu_util"));
    }

    #[test]
    fn default_class_becomes_not_in_for_the_hpa() {
        let f = slo("objectives:\n  \"*\": {error_rate: 1%}\n  a.b: {ttft: {p95: 1s}}\n");
        let o = AutoscaleOptions {
            class: Some("*".into()),
            engines_per_replica: 2,
            ..Default::default()
        };
        let r = autoscale(&f, &o).unwrap();
        assert!(r.text.contains("operator: NotIn"), "{}", r.text);
        assert!(r.text.contains("- a.b"), "{}", r.text);
        // 0.8 per engine × 2 engines per replica.
        assert!(r.text.contains("threshold: \"1.6\""), "{}", r.text);
    }

    #[test]
    fn bad_input_names_the_field() {
        let f = slo("objectives:\n  a: {ttft: {p95: 1s}}\n  b: {ttft: {p95: 1s}}\n");
        let e = autoscale(&f, &AutoscaleOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("class: the SLO file defines 2 classes (a, b)"),
            "{e}"
        );
        assert!(e.contains("--class NAME"), "{e}");
        let o = AutoscaleOptions {
            class: Some("c".into()),
            ..Default::default()
        };
        let e = autoscale(&f, &o).unwrap_err().to_string();
        assert!(e.contains("unknown class `c`"), "{e}");
        let o = AutoscaleOptions {
            class: Some("a".into()),
            kv_usage_target: 80.0,
            ..Default::default()
        };
        let e = autoscale(&f, &o).unwrap_err().to_string();
        assert!(
            e.starts_with("kv_usage_target: 80 is outside (0, 1)"),
            "{e}"
        );
        let o = AutoscaleOptions {
            class: Some("a".into()),
            smoothing: "2 minutes".into(),
            ..Default::default()
        };
        assert!(
            autoscale(&f, &o)
                .unwrap_err()
                .to_string()
                .starts_with("smoothing: ")
        );
    }
}
