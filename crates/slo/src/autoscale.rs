//! `headroom slo autoscale`: an autoscaling trigger that describes admission capacity — a KEDA
//! `ScaledObject` with two Prometheus triggers ([`AutoscaleKind::Keda`]), or the same policy as
//! a plain `autoscaling/v2` HorizontalPodAutoscaler on External metrics with the
//! prometheus-adapter rules that serve them, written apart ([`AutoscaleKind::Hpa`]). One object
//! set per output: two autoscalers on one Deployment fight, and a values file in a stream of
//! objects is no Kubernetes object (`kubectl apply`: "Object 'Kind' is missing").
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
    /// Which object set to write.
    pub kind: AutoscaleKind,
}

/// The object set [`autoscale()`] writes: one policy, never two autoscalers for the same
/// Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoscaleKind {
    /// A KEDA `ScaledObject` (KEDA queries Prometheus itself and manages the HPA).
    #[default]
    Keda,
    /// An `autoscaling/v2` HorizontalPodAutoscaler on External metrics, plus the
    /// prometheus-adapter rules that serve them ([`Autoscale::adapter_values`], a separate file:
    /// Helm values, not a Kubernetes object).
    Hpa,
}

/// What [`autoscale()`] writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Autoscale {
    /// The Kubernetes objects (one YAML document each), with a comment header; what
    /// `kubectl apply -f` takes.
    pub objects: Rendered,
    /// With [`AutoscaleKind::Hpa`]: prometheus-adapter Helm values (`rules.external`) serving
    /// the HPA's External metrics.
    pub adapter_values: Option<String>,
    /// Every PromQL selector the objects and the adapter rules query, for checking against a
    /// Prometheus (`metric{matchers}`).
    pub selectors: Vec<String>,
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
            kind: AutoscaleKind::Keda,
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

/// `headroom slo autoscale`: a KEDA `ScaledObject`, or an HPA with its prometheus-adapter
/// rules in a separate file ([`AutoscaleKind`]). The namespace, when given, scopes every query
/// (`namespace="…"`) as well as the object.
///
/// # Errors
/// An unknown class, or no class given when the file has several; targets out of range; a
/// smoothing window Prometheus cannot evaluate; a selector the HPA cannot express.
pub fn autoscale(slo: &SloFile, opts: &AutoscaleOptions) -> Result<Autoscale, SloError> {
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
    let mut sel = sli::engine_selector(slo, &opts.sli.selectors, &class);
    if let Some(ns) = &opts.namespace
        && !sel.iter().any(|m| m.name == "namespace")
    {
        sel.push(Matcher::eq("namespace", ns));
    }
    let w = &opts.smoothing;
    let kv_series = selector(crate::catalogue::VLLM_KV_CACHE_USAGE, &sel);
    let waiting_series = selector(crate::catalogue::VLLM_NUM_REQUESTS_WAITING, &sel);
    let waiting_q = format!("sum(avg_over_time({waiting_series}[{w}]))");
    let kv_q = format!("sum(avg_over_time({kv_series}[{w}]))");
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
    let mut selectors = vec![kv_series, waiting_series];
    let (text, adapter_values) = match opts.kind {
        AutoscaleKind::Keda => {
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
            (
                format!(
                    "{header}# A KEDA ScaledObject (KEDA queries Prometheus itself and manages the HPA;\n\
                     # do not add another HPA for this Deployment).\n{}",
                    y(&keda)?
                ),
                None,
            )
        }
        AutoscaleKind::Hpa => {
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
            // The adapter discovers the series: the class label present, scoped like the
            // queries (namespace, --match) but not to one class (the HPA's selector does that).
            let mut scope: Vec<Matcher> = sel
                .iter()
                .filter(|m| m.name != opts.sli.selectors.class_label)
                .cloned()
                .collect();
            scope.push(Matcher {
                name: opts.sli.selectors.class_label.clone(),
                op: MatchOp::Ne,
                value: String::new(),
            });
            let adapter_rule = |metric: &str, as_name: &str| {
                json!({
                    "seriesQuery": selector(metric, &scope),
                    "resources": {"namespaced": false},
                    "name": {"matches": format!("^{metric}$"), "as": as_name},
                    "metricsQuery": format!("sum(avg_over_time(<<.Series>>{{<<.LabelMatchers>>}}[{w}]))")
                })
            };
            for m in [
                crate::catalogue::VLLM_KV_CACHE_USAGE,
                crate::catalogue::VLLM_NUM_REQUESTS_WAITING,
            ] {
                selectors.push(selector(m, &scope));
            }
            let adapter = json!({"rules": {"external": [
                adapter_rule(crate::catalogue::VLLM_KV_CACHE_USAGE, "vllm_kv_cache_usage_perc"),
                adapter_rule(crate::catalogue::VLLM_NUM_REQUESTS_WAITING, "vllm_num_requests_waiting"),
            ]}});
            (
                format!(
                    "{header}# An autoscaling/v2 HPA on External metrics; prometheus-adapter serves them\n\
                     # with the rules written to the adapter values file (Helm: -f that file).\n{}",
                    y(&hpa)?
                ),
                Some(format!(
                    "# prometheus-adapter Helm values for `headroom slo autoscale --kind hpa` (class {class}):\n\
                     # the External metrics vllm_kv_cache_usage_perc and vllm_num_requests_waiting.\n{}",
                    y(&adapter)?
                )),
            )
        }
    };
    Ok(Autoscale {
        objects: Rendered {
            text,
            warnings: Vec::new(),
        },
        adapter_values,
        selectors,
    })
}

/// Trigger thresholds measured by a sweep ([`from_sweep`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepThresholds {
    /// KV-cache use per engine to scale at: the capacity level's peak × (1 − headroom).
    pub kv_usage_target: f64,
    /// Waiting requests per replica to scale at: the capacity level's mean × (1 − headroom);
    /// `None` when that level had (almost) no queue, so the sweep says nothing about it.
    pub waiting_per_replica: Option<f64>,
    /// What was read, for the output's header and the user.
    pub notes: Vec<String>,
}

/// `x` to three significant digits: a measured threshold, not a false precision.
fn three_digits(x: f64) -> f64 {
    format!("{x:.2e}").parse().unwrap_or(x)
}

/// Below this many waiting requests on average, the capacity level had no queue to speak of.
const MIN_WAITING: f64 = 0.1;

/// The thresholds a sweep measured for `class`, from its `results.json`: at the phase's
/// capacity level (the highest load that met every objective), the engine's peak KV-cache use
/// (`server.figures.kv_cache_usage_max_ratio`) and mean waiting requests (`waiting_mean`),
/// each × (1 − `headroom`), so replicas are added before a replica reaches the load it was
/// measured to hold. The sweep measured one replica.
///
/// # Errors
/// No phase named `class` (naming the phases), a phase without a capacity (no level passed),
/// or a capacity level without the engine's figures (a sweep without `--metrics-url`).
pub fn from_sweep(
    results: &Value,
    class: &str,
    headroom: f64,
) -> Result<SweepThresholds, SloError> {
    let bad = |m: String| SloError::invalid("from", m);
    if !(0.0..1.0).contains(&headroom) {
        return Err(SloError::invalid(
            "headroom",
            format!("{headroom}: expected a share in [0, 1), e.g. 20%"),
        ));
    }
    let phases = results["phases"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    let phase = phases
        .iter()
        .find(|p| p["name"].as_str() == Some(class))
        .ok_or_else(|| {
            bad(format!(
                "results.json has no phase `{class}`; its phases are {} (pass --class with one of them)",
                names.join(", ")
            ))
        })?;
    let capacity = phase["capacity"].as_f64().ok_or_else(|| {
        bad(format!(
            "phase `{class}` has no capacity (no level met every objective): there is no measured load to scale before"
        ))
    })?;
    let unit = phase["mode"].as_str().unwrap_or("concurrency");
    let level = phase["levels"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["load"].as_f64() == Some(capacity)))
        .ok_or_else(|| {
            bad(format!(
                "phase `{class}`: no level at its capacity {capacity}"
            ))
        })?;
    let figures = &level["server"]["figures"];
    let kv = figures["kv_cache_usage_max_ratio"].as_f64();
    let waiting = figures["waiting_mean"].as_f64();
    let Some(kv) = kv.filter(|k| *k > 0.0) else {
        return Err(bad(format!(
            "phase `{class}` at its capacity ({} {unit}) has no kv_cache_usage_max_ratio: the sweep read no engine metrics (--metrics-url)",
            fmt_float(capacity)
        )));
    };
    let keep = 1.0 - headroom;
    let mut notes = vec![format!(
        "from the sweep: phase {class} held {} {unit} (its capacity) with KV-cache use up to {} and {} requests waiting on average; thresholds at {} % of those",
        fmt_float(capacity),
        fmt_float((kv * 1e4).round() / 1e4),
        fmt_float((waiting.unwrap_or(0.0) * 100.0).round() / 100.0),
        fmt_float(keep * 100.0)
    )];
    let waiting_per_replica = match waiting {
        Some(w) if w >= MIN_WAITING => Some(three_digits(w * keep)),
        _ => {
            notes.push(format!(
                "the capacity level had no queue (waiting_mean under {MIN_WAITING}): the waiting-requests trigger keeps its configured target"
            ));
            None
        }
    };
    if kv < 0.1 {
        notes.push(format!(
            "KV-cache use at capacity was only {} %: the KV pool is not what limits this server, so its trigger fires at about the measured capacity, not near a full pool",
            fmt_float((kv * 1e3).round() / 10.0)
        ));
    }
    Ok(SweepThresholds {
        kv_usage_target: three_digits(kv * keep),
        waiting_per_replica,
        notes,
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
        let text = &r.objects.text;
        // One object: the KEDA ScaledObject, nothing else in the stream.
        assert!(!text.contains("\n---"), "{text}");
        assert_eq!(text.matches("kind: ").count(), 2, "{text}"); // the object + its target ref
        assert!(text.contains("kind: ScaledObject"));
        assert!(r.adapter_values.is_none());
        assert!(text.contains(
            "query: sum(avg_over_time(vllm:kv_cache_usage_perc{model_name=\"llama-70b\"}[2m]))"
        ));
        assert!(text.contains(
            "query: sum(avg_over_time(vllm:num_requests_waiting{model_name=\"llama-70b\"}[2m]))"
        ));
        assert!(text.contains("threshold: \"0.8\""), "{text}");
        assert!(!text.contains("DCGM"));
        assert!(!text.to_lowercase().contains("gpu_util"));
        let hpa = autoscale(
            &f,
            &AutoscaleOptions {
                kind: AutoscaleKind::Hpa,
                ..Default::default()
            },
        )
        .unwrap();
        let text = &hpa.objects.text;
        assert!(text.contains("kind: HorizontalPodAutoscaler"), "{text}");
        assert!(
            !text.contains("ScaledObject") && !text.contains("rules:"),
            "{text}"
        );
        assert!(text.contains("averageValue: 800m"), "{text}");
        assert!(text.contains("averageValue: \"2\""), "{text}");
        let values = hpa.adapter_values.unwrap();
        assert!(values.contains("rules:\n  external:"), "{values}");
        assert!(
            values.contains("seriesQuery: vllm:kv_cache_usage_perc{model_name!=\"\"}"),
            "{values}"
        );
    }

    /// With the default SLO (no class) the KEDA query had no selector at all and --namespace
    /// did not scope it: the namespace now scopes every query, the adapter's too.
    #[test]
    fn the_namespace_scopes_every_query() {
        let f = slo(headroom_core::slo::DEFAULT_SLO_YAML);
        for kind in [AutoscaleKind::Keda, AutoscaleKind::Hpa] {
            let o = AutoscaleOptions {
                namespace: Some("llm".into()),
                kind,
                ..Default::default()
            };
            let r = autoscale(&f, &o).unwrap();
            assert_eq!(
                r.selectors[..2],
                [
                    "vllm:kv_cache_usage_perc{namespace=\"llm\"}",
                    "vllm:num_requests_waiting{namespace=\"llm\"}"
                ]
            );
            assert!(
                r.selectors.iter().all(|s| s.contains("namespace=\"llm\"")),
                "{:?}",
                r.selectors
            );
            assert!(
                r.objects.text.contains("namespace: llm"),
                "{}",
                r.objects.text
            );
            if kind == AutoscaleKind::Keda {
                assert!(r.objects.text.contains(
                    "query: sum(avg_over_time(vllm:kv_cache_usage_perc{namespace=\"llm\"}[2m]))"
                ));
            }
        }
    }

    fn results(kv: f64, waiting: f64) -> Value {
        json!({"phases": [{"name": "chat", "mode": "concurrency", "capacity": 32.0, "levels": [
            {"load": 16.0, "server": {"figures": {"kv_cache_usage_max_ratio": 0.3, "waiting_mean": 0.0}}},
            {"load": 32.0, "server": {"figures": {"kv_cache_usage_max_ratio": kv, "waiting_mean": waiting}}},
            {"load": 64.0, "server": {"figures": {"kv_cache_usage_max_ratio": 0.99, "waiting_mean": 40.0}}}
        ]}]})
    }

    /// The thresholds come from the capacity level of the sweep, with headroom, not defaults.
    #[test]
    fn thresholds_from_a_sweep_are_the_capacity_levels_with_headroom() {
        let t = from_sweep(&results(0.75, 5.0), "chat", 0.2).unwrap();
        assert_eq!(t.kv_usage_target, 0.6);
        assert_eq!(t.waiting_per_replica, Some(4.0));
        assert!(t.notes[0].contains("held 32 concurrency"), "{:?}", t.notes);
        let t = from_sweep(&results(0.05, 0.0), "chat", 0.2).unwrap();
        assert_eq!(t.waiting_per_replica, None);
        assert!(
            t.notes.iter().any(|n| n.contains("had no queue")),
            "{:?}",
            t.notes
        );
        assert!(
            t.notes.iter().any(|n| n.contains("not what limits")),
            "{:?}",
            t.notes
        );
        let e = from_sweep(&results(0.75, 5.0), "rag", 0.2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no phase `rag`; its phases are chat"), "{e}");
        let mut none = results(0.75, 5.0);
        none["phases"][0]["capacity"] = Value::Null;
        let e = from_sweep(&none, "chat", 0.2).unwrap_err().to_string();
        assert!(e.contains("has no capacity"), "{e}");
    }

    /// `"*"` beside named classes is their defaults, no class to scale; a regex matcher becomes
    /// a Kubernetes `In` selector in the HPA.
    #[test]
    fn the_default_block_is_no_class_and_regex_matchers_become_in() {
        let f = slo("objectives:\n  \"*\": {error_rate: 1%}\n  a.b: {ttft: {p95: 1s}}\n");
        let o = AutoscaleOptions {
            class: Some("*".into()),
            ..Default::default()
        };
        let e = autoscale(&f, &o).unwrap_err().to_string();
        assert!(e.contains("not a class of its own"), "{e}");
        let mut o = AutoscaleOptions {
            engines_per_replica: 2,
            ..Default::default()
        };
        o.sli.selectors.common = vec![Matcher::re("pod", "vllm-0|vllm-1")];
        let keda = autoscale(&f, &o).unwrap().objects.text;
        // 0.8 per engine × 2 engines per replica.
        assert!(keda.contains("threshold: \"1.6\""), "{keda}");
        o.kind = AutoscaleKind::Hpa;
        let hpa = autoscale(&f, &o).unwrap().objects.text;
        assert!(hpa.contains("operator: In"), "{hpa}");
        assert!(hpa.contains("- vllm-1"), "{hpa}");
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
