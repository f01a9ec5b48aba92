//! `headroom slo dashboard`: a Grafana dashboard (JSON model, schema 39) laid out as Headroom's
//! analysis, one row per step (DESIGN.md "The analysis"), after a row of SLO burn:
//!
//! 0. SLO and error budget (from the recording rules of [`crate::rules()`]);
//! 1. phases — where latency goes: queue, prefill, decode; TTFT and ITL percentiles;
//! 2. efficiency — prefix-cache hit rate, tokens per iteration, running versus waiting, KV use;
//! 3. workload shape — prompt and generation sizes, their ratio, generated versus `max_tokens`;
//! 4. outcomes — `finished_reason` split, error + abort rate, truncation, HTTP status;
//! 5. the GPU as a witness — `DCGM_FI_DEV_GPU_UTIL` next to engine, tensor and DRAM activity;
//! 6. KV pool versus VRAM, and tokens per joule.
//!
//! Variables: `datasource` (any Prometheus), `model` and `engine` (vLLM's `model_name` and
//! data-parallel `engine` labels, multi-select with All), `gpu_instance` (the dcgm-exporter
//! targets). Queries use `$__rate_interval`. Every query is checked with `promql-parser` in
//! tests after substituting the variables.

use crate::catalogue::{self, VLLM_KV_CACHE_USAGE, VLLM_NUM_REQUESTS_WAITING};
use crate::promql::fmt_float;
use crate::sli::{self, SliOptions};
use crate::{Rendered, SloError};
use headroom_core::LatencySignal;
use headroom_core::slo::{Objective, SloFile};
use serde_json::{Value, json};

/// Options of [`dashboard()`].
#[derive(Debug, Clone, PartialEq)]
pub struct DashboardOptions {
    /// Dashboard title.
    pub title: String,
    /// Stable `uid` (Grafana URL path).
    pub uid: String,
    /// Label carrying the model on vLLM series (`model_name`).
    pub class_label: String,
    /// Matchers added to every engine query and variable (`namespace="llm"`, `job="vllm"`).
    pub common: Vec<crate::promql::Matcher>,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            title: "Headroom: vLLM against its SLO".into(),
            uid: "headroom-vllm-slo".into(),
            class_label: "model_name".into(),
            common: Vec::new(),
        }
    }
}

const R: &str = "$__rate_interval";

struct Builder {
    panels: Vec<Value>,
    y: u32,
    x: u32,
    next_id: u32,
}

impl Builder {
    fn row(&mut self, title: &str) {
        if self.x > 0 {
            self.y += 8;
            self.x = 0;
        }
        self.panels.push(json!({
            "type": "row", "title": title, "collapsed": false, "id": self.next_id,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []
        }));
        self.next_id += 1;
        self.y += 1;
    }

    /// A time-series panel, 12 wide, two per line.
    fn panel(&mut self, title: &str, unit: &str, description: &str, targets: &[(&str, String)]) {
        self.panel_with(title, unit, description, targets, None);
    }

    fn panel_with(
        &mut self,
        title: &str,
        unit: &str,
        description: &str,
        targets: &[(&str, String)],
        threshold: Option<f64>,
    ) {
        let targets: Vec<Value> = targets
            .iter()
            .enumerate()
            .map(|(i, (legend, expr))| {
                json!({
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "expr": expr, "legendFormat": legend,
                    "refId": char::from(b'A' + i as u8).to_string()
                })
            })
            .collect();
        let mut defaults = json!({"unit": unit});
        if let Some(t) = threshold {
            defaults["thresholds"] = json!({"mode": "absolute", "steps": [
                {"color": "green", "value": null}, {"color": "red", "value": t}
            ]});
            defaults["custom"] = json!({"thresholdsStyle": {"mode": "dashed"}});
        }
        self.panels.push(json!({
            "type": "timeseries", "title": title, "description": description, "id": self.next_id,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": targets
        }));
        self.next_id += 1;
        if self.x == 0 {
            self.x = 12;
        } else {
            self.x = 0;
            self.y += 8;
        }
    }
}

/// Percentiles to plot for `signal`: p50 plus every percentile the SLO file sets for it, and the
/// tightest threshold across classes (drawn as a dashed line).
fn slo_percentiles(slo: &SloFile, signal: LatencySignal) -> (Vec<f64>, Option<f64>) {
    let mut ps = vec![50.0];
    let mut tightest: Option<f64> = None;
    let mut classes: Vec<String> = slo.objectives.keys().cloned().collect();
    classes.dedup();
    for c in classes {
        for o in slo.spec_for(&c).objectives {
            if let Objective::Latency {
                signal: s,
                percentile,
                threshold_s,
            } = o
                && s == signal
            {
                if !ps.contains(&percentile) {
                    ps.push(percentile);
                }
                tightest = Some(tightest.map_or(threshold_s, |t: f64| t.min(threshold_s)));
            }
        }
    }
    ps.sort_by(f64::total_cmp);
    (ps, tightest)
}

/// `headroom slo dashboard`: the Grafana dashboard JSON (pretty-printed).
///
/// # Errors
/// [`SloError::Invalid`] when `class_label` is not a label name; [`SloError::GeneratedPromql`]
/// if a query fails the parser (a bug, reported instead of written).
pub fn dashboard(slo: &SloFile, opts: &DashboardOptions) -> Result<Rendered, SloError> {
    if !crate::promql::is_label_name(&opts.class_label) {
        return Err(SloError::invalid(
            "class_label",
            format!(
                "`{}` is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)",
                opts.class_label
            ),
        ));
    }
    let scope: String = opts.common.iter().map(|m| format!("{m},")).collect();
    let s = format!(
        "{scope}{}=~\"$model\",engine=~\"$engine\"",
        opts.class_label
    );
    let scope_sel = |extra: &str| {
        let inner = format!("{scope}{extra}");
        let inner = inner.trim_end_matches(',');
        if inner.is_empty() {
            String::new()
        } else {
            format!("{{{inner}}}")
        }
    };
    let model_q = format!(
        "label_values(vllm:num_requests_running{}, {})",
        scope_sel(""),
        opts.class_label
    );
    let engine_q = format!(
        "label_values(vllm:num_requests_running{}, engine)",
        scope_sel(&format!("{}=~\"$model\"", opts.class_label))
    );
    let g = "instance=~\"$gpu_instance\"".to_string();
    let rate_of = |m: &str, extra: &str| format!("sum(rate({m}{{{s}{extra}}}[{R}]))");
    let mean = |m: &str| {
        format!(
            "{} / {}",
            rate_of(&format!("{m}_sum"), ""),
            rate_of(&format!("{m}_count"), "")
        )
    };
    let quantile = |p: f64, m: &str| {
        format!(
            "histogram_quantile({}, sum by (le) (rate({m}_bucket{{{s}}}[{R}])))",
            fmt_float(p / 100.0)
        )
    };
    let mut b = Builder {
        panels: Vec::new(),
        y: 0,
        x: 0,
        next_id: 1,
    };

    b.row("0 · SLO and error budget");
    b.panel(
        "Burn rate over 1h, per class and objective",
        "none",
        "Error ratio over 1h divided by the objective's error budget (recording rules of `headroom slo rules`). 1 spends the budget exactly over the SLO period; the page tier fires at 14.4 (with 5m above it too).",
        &[(
            "{{slo_class}} {{slo_objective}}",
            "headroom:slo_errors_per_event:ratio_rate1h / on(slo_class, slo_objective) group_left() headroom:slo_error_budget:ratio".into(),
        )],
    );
    b.panel(
        "Error budget left over the SLO period",
        "percentunit",
        "1 − (error ratio over the period ÷ budget). Below 0 the budget is spent; past the policy's freeze_at, freeze non-essential tuning.",
        &[(
            "{{slo_class}} {{slo_objective}}",
            "headroom:slo_error_budget_remaining:ratio".into(),
        )],
    );

    b.row("1 · Phases: where latency goes");
    b.panel(
        "Mean time per phase",
        "s",
        "vllm:request_queue_time_seconds (WAITING), vllm:request_prefill_time_seconds (first scheduled → first token), vllm:request_decode_time_seconds (first → last token). Queue time grows first when admission saturates.",
        &[
            ("queue", mean("vllm:request_queue_time_seconds")),
            ("prefill", mean("vllm:request_prefill_time_seconds")),
            ("decode", mean("vllm:request_decode_time_seconds")),
        ],
    );
    let phase_total = format!(
        "({} + {} + {})",
        rate_of("vllm:request_queue_time_seconds_sum", ""),
        rate_of("vllm:request_prefill_time_seconds_sum", ""),
        rate_of("vllm:request_decode_time_seconds_sum", "")
    );
    b.panel(
        "Share of request time per phase",
        "percentunit",
        "Each phase's summed time over the sum of all three. A decode-dominated workload gains nothing from prefill tuning.",
        &[
            (
                "queue",
                format!(
                    "{} / {phase_total}",
                    rate_of("vllm:request_queue_time_seconds_sum", "")
                ),
            ),
            (
                "prefill",
                format!(
                    "{} / {phase_total}",
                    rate_of("vllm:request_prefill_time_seconds_sum", "")
                ),
            ),
            (
                "decode",
                format!(
                    "{} / {phase_total}",
                    rate_of("vllm:request_decode_time_seconds_sum", "")
                ),
            ),
        ],
    );
    for (signal, title) in [
        (LatencySignal::Ttft, "TTFT percentiles (server-side)"),
        (LatencySignal::Itl, "ITL percentiles (per engine step)"),
        (LatencySignal::E2e, "E2E percentiles"),
        (LatencySignal::QueueTime, "Queue-time percentiles"),
    ] {
        let h = catalogue::vllm_histogram(signal);
        let (ps, threshold) = slo_percentiles(slo, signal);
        let targets: Vec<(String, String)> = ps
            .iter()
            .map(|p| (format!("p{}", fmt_float(*p)), quantile(*p, h.metric)))
            .collect();
        let refs: Vec<(&str, String)> = targets
            .iter()
            .map(|(l, e)| (l.as_str(), e.clone()))
            .collect();
        b.panel_with(
            title,
            "s",
            &format!(
                "histogram_quantile over {}_bucket, interpolated inside a bucket like PromQL does; the dashed line is the tightest SLO threshold in slo.yaml.",
                h.metric
            ),
            &refs,
            threshold,
        );
    }

    b.row("2 · Efficiency");
    b.panel(
        "Prefix-cache hit rate",
        "percentunit",
        "rate(vllm:prefix_cache_hits_total) / rate(vllm:prefix_cache_queries_total), in tokens.",
        &[(
            "hit rate",
            format!(
                "{} / {}",
                rate_of("vllm:prefix_cache_hits_total", ""),
                rate_of("vllm:prefix_cache_queries_total", "")
            ),
        )],
    );
    b.panel(
        "Tokens per engine step",
        "none",
        "Mean of vllm:iteration_tokens_total (prompt + generation tokens per step): low values under load mean batching is not working.",
        &[("tokens / step", mean("vllm:iteration_tokens_total"))],
    );
    b.panel(
        "Running versus waiting requests",
        "none",
        "vllm:num_requests_running and vllm:num_requests_waiting. Waiting > 0 for long means admission is saturated: this, with KV-cache use, is the autoscaling signal.",
        &[
            (
                "running",
                format!("sum(vllm:num_requests_running{{{s}}})"),
            ),
            (
                "waiting",
                format!("sum({VLLM_NUM_REQUESTS_WAITING}{{{s}}})"),
            ),
        ],
    );
    b.panel(
        "KV-cache use and preemptions",
        "percentunit",
        "vllm:kv_cache_usage_perc is a 0–1 ratio. Preemptions (per second) with KV use near 1 mean KV-cache pressure.",
        &[
            ("KV use (max engine)", format!("max({VLLM_KV_CACHE_USAGE}{{{s}}})")),
            (
                "preemptions / s",
                rate_of("vllm:num_preemptions_total", ""),
            ),
        ],
    );

    b.row("3 · Workload shape");
    b.panel(
        "Mean prompt and generation length",
        "none",
        "Tokens per finished request (vllm:request_prompt_tokens, vllm:request_generation_tokens).",
        &[
            ("prompt tokens", mean("vllm:request_prompt_tokens")),
            ("generation tokens", mean("vllm:request_generation_tokens")),
        ],
    );
    b.panel(
        "Generation-to-prompt ratio and generated versus max_tokens",
        "none",
        "rate(generation tokens) / rate(prompt tokens); and generated tokens over requested max_tokens (near 1 means answers are cut by max_tokens).",
        &[
            (
                "generation / prompt",
                format!(
                    "{} / {}",
                    rate_of("vllm:generation_tokens_total", ""),
                    rate_of("vllm:prompt_tokens_total", "")
                ),
            ),
            (
                "generated / max_tokens",
                format!(
                    "{} / {}",
                    rate_of("vllm:request_generation_tokens_sum", ""),
                    rate_of("vllm:request_params_max_tokens_sum", "")
                ),
            ),
        ],
    );
    b.panel(
        "Token throughput",
        "none",
        "Prompt and generation tokens per second.",
        &[
            ("prompt tokens / s", rate_of("vllm:prompt_tokens_total", "")),
            (
                "generation tokens / s",
                rate_of("vllm:generation_tokens_total", ""),
            ),
        ],
    );

    b.row("4 · Outcomes");
    b.panel(
        "Finished requests by reason",
        "reqps",
        "vllm:request_success_total by finished_reason (stop, length, abort, error, repetition); it counts aborted and failed requests despite its name.",
        &[(
            "{{finished_reason}}",
            format!("sum by (finished_reason) (rate(vllm:request_success_total{{{s}}}[{R}]))"),
        )],
    );
    let finished = rate_of("vllm:request_success_total", "");
    b.panel(
        "Error + abort rate and truncation share",
        "percentunit",
        "(abort + error) / finished, the error_rate objective's engine part; length / finished is the share of answers cut at max_tokens.",
        &[
            (
                "error + abort",
                format!(
                    "{} / {finished}",
                    rate_of(
                        "vllm:request_success_total",
                        ",finished_reason=~\"abort|error\""
                    )
                ),
            ),
            (
                "truncated (length)",
                format!(
                    "{} / {finished}",
                    rate_of("vllm:request_success_total", ",finished_reason=\"length\"")
                ),
            ),
        ],
    );
    b.panel(
        "HTTP responses by status (OpenAI endpoints)",
        "reqps",
        "http_requests_total of the API servers that serve the selected models (joined on job and instance). 5xx the engine never saw fail outside the engine.",
        &[(
            "{{status}}",
            format!(
                "sum by (status) (rate(http_requests_total{{handler=~\"/v1/.*\"}}[{R}]) * on(job, instance) group_left() group by (job, instance) (vllm:num_requests_running{{{s}}}))"
            ),
        )],
    );

    b.row("5 · The GPU as a witness");
    b.panel(
        "GPU utilisation versus real activity",
        "percentunit",
        "DCGM_FI_DEV_GPU_UTIL (percent, any kernel running) reads high whenever anything runs; DCGM_FI_PROF_GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE and DRAM_ACTIVE (0–1) show how busy the GPU really is. Tensor low with DRAM high means memory-bandwidth bound (quantise before buying hardware).",
        &[
            ("GPU_UTIL / 100", format!("avg(DCGM_FI_DEV_GPU_UTIL{{{g}}}) / 100")),
            (
                "graphics engine active",
                format!("avg(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{g}}})"),
            ),
            (
                "tensor active",
                format!("avg(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{g}}})"),
            ),
            ("DRAM active", format!("avg(DCGM_FI_PROF_DRAM_ACTIVE{{{g}}})")),
        ],
    );
    b.panel(
        "Power, SM clock and temperature",
        "none",
        "DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_SM_CLOCK (MHz), DCGM_FI_DEV_GPU_TEMP (°C), DCGM_FI_DEV_XID_ERRORS (last XID, 0 = none). A falling clock at high temperature or power means throttling.",
        &[
            ("power W", format!("sum(DCGM_FI_DEV_POWER_USAGE{{{g}}})")),
            ("SM clock MHz", format!("avg(DCGM_FI_DEV_SM_CLOCK{{{g}}})")),
            ("temperature °C", format!("max(DCGM_FI_DEV_GPU_TEMP{{{g}}})")),
            ("last XID", format!("max(DCGM_FI_DEV_XID_ERRORS{{{g}}})")),
        ],
    );

    b.row("6 · KV pool versus VRAM");
    b.panel(
        "KV-cache use versus VRAM in use",
        "percentunit",
        "vLLM reserves gpu_memory_utilization of VRAM at start, so VRAM in use is flat whatever the load and says nothing about capacity; the KV pool's use does. Alert on queue time, never on VRAM.",
        &[
            ("KV-cache use (mean engine)", format!("avg({VLLM_KV_CACHE_USAGE}{{{s}}})")),
            (
                "VRAM used / total",
                format!(
                    "sum(DCGM_FI_DEV_FB_USED{{{g}}}) / (sum(DCGM_FI_DEV_FB_USED{{{g}}}) + sum(DCGM_FI_DEV_FB_FREE{{{g}}}))"
                ),
            ),
        ],
    );
    b.panel(
        "Generated tokens per joule",
        "none",
        "Generation tokens per second divided by board power in watts (tokens/s per W = tokens per joule).",
        &[(
            "tokens / J",
            format!(
                "{} / sum(DCGM_FI_DEV_POWER_USAGE{{{g}}})",
                rate_of("vllm:generation_tokens_total", "")
            ),
        )],
    );

    let classes = sli::classes(slo, &SliOptions::default())?;
    let class_list = classes.join(", ");
    let dash = json!({
        "title": opts.title,
        "uid": opts.uid,
        "description": format!("Generated by `headroom slo dashboard` for SLO classes: {class_list}."),
        "tags": ["headroom", "vllm", "slo"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": true,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1},
            {"name": "model", "label": "Model", "type": "query",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": &model_q, "refId": "model"},
             "definition": &model_q,
             "multi": true, "includeAll": true, "allValue": ".*", "refresh": 2, "current": {}},
            {"name": "engine", "label": "Engine", "type": "query",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": &engine_q, "refId": "engine"},
             "definition": &engine_q,
             "multi": true, "includeAll": true, "allValue": ".*", "refresh": 2, "current": {}},
            {"name": "gpu_instance", "label": "GPU exporter", "type": "query",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(DCGM_FI_DEV_GPU_UTIL, instance)", "refId": "gpu"},
             "definition": "label_values(DCGM_FI_DEV_GPU_UTIL, instance)",
             "multi": true, "includeAll": true, "allValue": ".*", "refresh": 2, "current": {}}
        ]},
        "panels": b.panels,
    });
    for expr in queries(&dash) {
        crate::promql::validate(&substitute_variables(&expr))?;
    }
    let text = serde_json::to_string_pretty(&dash).map_err(|e| {
        SloError::invalid("dashboard", format!("cannot serialise the dashboard: {e}"))
    })?;
    Ok(Rendered {
        text: text + "\n",
        warnings: Vec::new(),
    })
}

/// Every `expr` of every panel target in a dashboard JSON model.
pub fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(panels) = dashboard["panels"].as_array() {
        for p in panels {
            if let Some(ts) = p["targets"].as_array() {
                for t in ts {
                    if let Some(e) = t["expr"].as_str() {
                        out.push(e.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Replaces Grafana's variables with values PromQL accepts: `$__rate_interval` → `5m`,
/// `$__interval` → `1m`, `$__range` → `1h`, and `$name` / `${name}` inside label values → `.*`.
pub fn substitute_variables(expr: &str) -> String {
    let mut s = expr
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    for v in ["model", "engine", "gpu_instance"] {
        s = s
            .replace(&format!("${{{v}}}"), ".*")
            .replace(&format!("${v}"), ".*");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn render() -> Value {
        let f = SloFile::parse(
            "objectives:\n  \"*\": {ttft: {p95: 250ms}, queue_time: {p99: 300ms}}\n  chat: {ttft: {p99.9: 1s}}\n",
            Path::new("slo.yaml"),
        )
        .unwrap();
        let r = dashboard(&f, &DashboardOptions::default()).unwrap();
        serde_json::from_str(&r.text).unwrap()
    }

    #[test]
    fn one_row_per_analysis_step_and_the_variables() {
        let d = render();
        let rows: Vec<&str> = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "row")
            .map(|p| p["title"].as_str().unwrap())
            .collect();
        assert_eq!(
            rows,
            vec![
                "0 · SLO and error budget",
                "1 · Phases: where latency goes",
                "2 · Efficiency",
                "3 · Workload shape",
                "4 · Outcomes",
                "5 · The GPU as a witness",
                "6 · KV pool versus VRAM",
            ]
        );
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(vars, vec!["datasource", "model", "engine", "gpu_instance"]);
        assert_eq!(d["templating"]["list"][0]["type"], "datasource");
        for p in d["panels"].as_array().unwrap() {
            if p["type"] == "timeseries" {
                assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            }
        }
    }

    #[test]
    fn slo_percentiles_and_threshold_reach_the_ttft_panel() {
        let d = render();
        let ttft = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["title"] == "TTFT percentiles (server-side)")
            .unwrap();
        let legends: Vec<&str> = ttft["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["legendFormat"].as_str().unwrap())
            .collect();
        assert_eq!(legends, vec!["p50", "p95", "p99.9"]);
        assert_eq!(
            ttft["targets"][2]["expr"],
            "histogram_quantile(0.999, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name=~\"$model\",engine=~\"$engine\"}[$__rate_interval])))"
        );
        assert_eq!(
            ttft["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"],
            0.25
        );
    }

    /// `--namespace` / `--match` scope every engine query and the variables' label_values.
    #[test]
    fn common_matchers_scope_every_query() {
        let f =
            SloFile::parse(headroom_core::slo::DEFAULT_SLO_YAML, Path::new("slo.yaml")).unwrap();
        let o = DashboardOptions {
            common: vec![crate::promql::Matcher::eq("namespace", "llm")],
            ..Default::default()
        };
        let text = dashboard(&f, &o).unwrap().text;
        assert!(
            text.contains(
                "label_values(vllm:num_requests_running{namespace=\\\"llm\\\"}, model_name)"
            ),
            "{text}"
        );
        assert!(text.matches("\"expr\"").count() > 10, "{text}");
        let unscoped = text
            .lines()
            .filter(|l| {
                l.contains("\"expr\"")
                    && l.contains("vllm:")
                    && !l.contains("namespace=\\\"llm\\\"")
            })
            .collect::<Vec<_>>();
        assert!(unscoped.is_empty(), "{unscoped:#?}");
    }

    #[test]
    fn bad_class_label_is_refused() {
        let f = SloFile::parse("objectives:\n  a: {error_rate: 1%}\n", Path::new("s")).unwrap();
        let o = DashboardOptions {
            class_label: "model-name".into(),
            ..Default::default()
        };
        let e = dashboard(&f, &o).unwrap_err().to_string();
        assert!(
            e.starts_with("class_label: `model-name` is not a label name"),
            "{e}"
        );
    }
}
