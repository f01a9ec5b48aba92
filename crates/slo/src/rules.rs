//! `headroom slo rules`: a Prometheus rule file with recording rules and multi-window,
//! multi-burn-rate alerts for every objective of every request class.
//!
//! One group per class (`headroom-slo-<class>`, unique even when class names differ only in
//! characters a group name leaves out; recording rules first, so the alerts of the same
//! evaluation read fresh values), holding:
//! - `headroom:slo_bad_events:rate5m` and `headroom:slo_events:rate5m{slo_class, slo_objective}`:
//!   the SLI's bad events and all its events per second over 5 m.
//! - `headroom:slo_errors_per_event:ratio_rate<W>{slo_class, slo_objective}` for every tier
//!   window and the SLO period: the error ratio over `W` (a true ratio of rates, not an average of
//!   short ratios — Sloth #618). An *event* is a request, or a token gap for ITL. Quiet windows
//!   record nothing (see [`crate::sli`]). Tier windows are computed from the raw series; the
//!   period (30 d by default) from the recorded 5 m rates ([`period_ratio`]), so Prometheus does
//!   not read 30 days of every raw series at each evaluation.
//! - `headroom:slo_objective:ratio`, `headroom:slo_error_budget:ratio` and
//!   `headroom:slo_error_budget_remaining:ratio` (1 − period ratio ÷ budget) for dashboards.
//! - One `HeadroomErrorBudgetBurn` alert **per tier** (not one alert ORing the pairs, so the
//!   firing pair is visible — autometrics-shared #82, Pyrra #1883), labelled `severity`, `tier`,
//!   `long`, `short`, `burn_factor`, `exhaustion`, `slo_class`, `slo_objective`.
//! - `HeadroomEngineQueueing`: mean engine queue time over 5 m above the class's tightest
//!   `queue_time` threshold (or [`QueueAlert::default_mean_s`]). A mean above the threshold means
//!   requests wait longer than it on average, so the percentile objective is at risk (it does not
//!   prove it breached: a few very long waits can lift a mean). Queue time rises before TTFT and
//!   before any budget burns: it is the earliest saturation signal. With
//!   `--latency-source gateway` the alert watches every request of the engine (queue time has no
//!   class). There is deliberately no alert on VRAM:
//!   vLLM reserves `gpu_memory_utilization` of it at start, so VRAM in use is flat whatever the
//!   load; KV-cache pressure shows in `vllm:kv_cache_usage_perc` and preemptions instead.
//! - `HeadroomSLIAbsent`: the SLI's series (for latency, the very `le` bucket) is missing, which
//!   would otherwise silence every alert above.

use crate::promql::{fmt_float, quote, validate};
use crate::sli::{self, Sli, SliOptions, SliSource};
use crate::tiers::{self, BurnTier, DeadTiers, TierSpec};
use crate::{Rendered, SloError};
use headroom_core::LatencySignal;
use headroom_core::slo::{Objective, SloFile, fmt_duration_s};
use serde::Serialize;
use serde_saphyr::LitString;
use std::collections::BTreeMap;

/// Name of the recording rules of the error ratio over window `W`:
/// `headroom:slo_errors_per_event:ratio_rate<W>`.
pub fn ratio_record(window: &str) -> String {
    format!("headroom:slo_errors_per_event:ratio_rate{window}")
}

/// Window of the recorded event rates ([`BAD_EVENTS_RECORD`], [`EVENTS_RECORD`]).
pub const EVENTS_WINDOW: &str = "5m";
/// Recording rule of the SLI's bad events per second over [`EVENTS_WINDOW`].
pub const BAD_EVENTS_RECORD: &str = "headroom:slo_bad_events:rate5m";
/// Recording rule of the SLI's events (good and bad) per second over [`EVENTS_WINDOW`].
pub const EVENTS_RECORD: &str = "headroom:slo_events:rate5m";

/// The error ratio over the SLO period `w`, from the recorded 5 m event rates instead of a
/// `rate(…[w])` over every raw series at each evaluation:
///
/// ```text
/// sum_over_time(headroom:slo_bad_events:rate5m{sel}[w]) / (sum_over_time(headroom:slo_events:rate5m{sel}[w]) > 0)
/// ```
///
/// A true ratio of events, not an average of ratios: each recorded sample is a 5 m rate, so an
/// event lies in the 5 m windows of `5m / interval` evaluations, in the numerator and the
/// denominator alike, and the multiplicity cancels whatever the evaluation interval. This is
/// Pyrra's accurate long-window shape (`performanceOverAccuracy`: `sum_over_time` of recorded
/// 5 m increases, not of ratios) without its `[w:5m]` subquery; Sloth's default
/// `sum_over_time(ratio_rate5m[w]) / count_over_time(ratio_rate5m[w])` averages 5 m ratios, so
/// a quiet hour with a few errors weighs as much as a busy one (Sloth #618), and is not used.
/// What it costs: the recorded series hold only what was evaluated since the rules were
/// loaded, and events during an evaluation gap longer than 5 m are missed (from both counts).
pub fn period_ratio(s: &Sli, w: &str) -> String {
    let sel = sel_of(s);
    format!(
        "sum_over_time({BAD_EVENTS_RECORD}{sel}[{w}])\n/\n(sum_over_time({EVENTS_RECORD}{sel}[{w}]) > 0)"
    )
}

/// Name of the burn-rate alerts.
pub const BURN_ALERT: &str = "HeadroomErrorBudgetBurn";
/// Name of the queue-time alert.
pub const QUEUE_ALERT: &str = "HeadroomEngineQueueing";
/// Name of the missing-series alert.
pub const ABSENT_ALERT: &str = "HeadroomSLIAbsent";

/// The queue-time alert.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueAlert {
    /// Threshold on the mean queue time (seconds) for classes without a `queue_time` objective.
    pub default_mean_s: f64,
    /// `for:` of the alert.
    pub for_: String,
}

impl Default for QueueAlert {
    fn default() -> Self {
        QueueAlert {
            default_mean_s: 0.1,
            for_: "5m".into(),
        }
    }
}

/// Options of [`rules()`].
#[derive(Debug, Clone, PartialEq)]
pub struct RulesOptions {
    /// Class selectors, latency source, off-bucket policy, class filter.
    pub sli: SliOptions,
    /// Alert tiers (default: the Workbook's four).
    pub tiers: Vec<TierSpec>,
    /// Tiers that can never fire.
    pub dead_tiers: DeadTiers,
    /// The queue-time alert; `None` leaves it out.
    pub queue_alert: Option<QueueAlert>,
    /// `for:` of the missing-series alert; `None` leaves it out.
    pub absent_for: Option<String>,
    /// Labels added to every rule (e.g. `team`).
    pub labels: BTreeMap<String, String>,
}

impl Default for RulesOptions {
    fn default() -> Self {
        RulesOptions {
            sli: SliOptions::default(),
            tiers: tiers::workbook_tiers(),
            dead_tiers: DeadTiers::Skip,
            queue_alert: Some(QueueAlert::default()),
            absent_for: Some("15m".into()),
            labels: BTreeMap::new(),
        }
    }
}

/// A Prometheus rule file (`groups:`), as `promtool check rules` reads it.
#[derive(Debug, Clone, Serialize)]
pub struct RuleFile {
    /// Rule groups.
    pub groups: Vec<RuleGroup>,
}

/// One rule group.
#[derive(Debug, Clone, Serialize)]
pub struct RuleGroup {
    /// Unique group name.
    pub name: String,
    /// Rules, evaluated in order.
    pub rules: Vec<Rule>,
}

/// A recording or an alerting rule.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Rule {
    /// `record:`
    Record {
        /// Series name.
        record: String,
        /// PromQL.
        expr: LitString,
        /// Labels added to the result.
        labels: BTreeMap<String, String>,
    },
    /// `alert:`
    Alert {
        /// Alert name.
        alert: String,
        /// PromQL.
        expr: LitString,
        /// Pending time before firing.
        #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
        for_: Option<String>,
        /// Labels.
        labels: BTreeMap<String, String>,
        /// Annotations (Go templates).
        annotations: BTreeMap<String, String>,
    },
}

impl Rule {
    fn expr(&self) -> &str {
        match self {
            Rule::Record { expr, .. } | Rule::Alert { expr, .. } => &expr.0,
        }
    }
}

/// The rule file for `slo` as a typed value, plus warnings.
///
/// # Errors
/// As [`sli::resolve`]; `budget.window` that is not a Prometheus duration or is shorter than a
/// tier's long window; a dead tier under [`DeadTiers::Refuse`]; a generated expression that
/// does not parse (a bug, reported instead of written).
pub fn rule_file(slo: &SloFile, opts: &RulesOptions) -> Result<(RuleFile, Vec<String>), SloError> {
    let period = slo
        .budget
        .as_ref()
        .map(|b| b.window.clone())
        .unwrap_or_else(|| "30d".into());
    let (period_s, tiers) = tiers::resolve(&period, &opts.tiers)?;
    if let Some(f) = &opts.absent_for {
        crate::promql::parse_prom_duration(f).map_err(|m| SloError::invalid("absent_for", m))?;
    }
    if let Some(q) = &opts.queue_alert {
        crate::promql::parse_prom_duration(&q.for_)
            .map_err(|m| SloError::invalid("queue_alert.for", m))?;
    }
    let (slis, mut warnings) = sli::resolve(slo, &opts.sli)?;

    let mut windows: Vec<(u64, String)> = Vec::new();
    for t in &tiers {
        windows.push((t.long_s, t.spec.long.clone()));
        windows.push((t.short_s, t.spec.short.clone()));
    }
    let tier_windows: Vec<String> = windows.iter().map(|(_, w)| w.clone()).collect();
    windows.push((period_s, period.clone()));
    windows.sort();
    windows.dedup_by(|a, b| a.1 == b.1);

    let mut groups: Vec<RuleGroup> = Vec::new();
    let classes = sli::classes(slo, &opts.sli)?;
    let names = group_names(&classes);
    for (class, group_name) in classes.into_iter().zip(names) {
        let mut rules = Vec::new();
        let class_slis: Vec<&Sli> = slis.iter().filter(|s| s.class == class).collect();
        for s in &class_slis {
            let labels = with_labels(
                &opts.labels,
                &[
                    ("slo_class", s.class.clone()),
                    ("slo_objective", s.objective.id().to_string()),
                ],
            );
            let (bad, total) = s.rates(EVENTS_WINDOW);
            rules.push(Rule::Record {
                record: BAD_EVENTS_RECORD.into(),
                expr: LitString(bad),
                labels: labels.clone(),
            });
            rules.push(Rule::Record {
                record: EVENTS_RECORD.into(),
                expr: LitString(total),
                labels: labels.clone(),
            });
            for (_, w) in &windows {
                let expr = if *w == period && !tier_windows.contains(w) {
                    period_ratio(s, w)
                } else {
                    s.error_ratio(w)
                };
                rules.push(Rule::Record {
                    record: ratio_record(w),
                    expr: LitString(expr),
                    labels: labels.clone(),
                });
            }
            rules.push(Rule::Record {
                record: "headroom:slo_objective:ratio".into(),
                expr: LitString(format!("vector({})", fmt_float(s.target))),
                labels: labels.clone(),
            });
            rules.push(Rule::Record {
                record: "headroom:slo_error_budget:ratio".into(),
                expr: LitString(format!("vector({})", fmt_float(s.budget))),
                labels: labels.clone(),
            });
            rules.push(Rule::Record {
                record: "headroom:slo_error_budget_remaining:ratio".into(),
                expr: LitString(format!(
                    "1 - {}{} / {}",
                    ratio_record(&period),
                    sel_of(s),
                    fmt_float(s.budget)
                )),
                labels: labels.clone(),
            });
        }
        for s in &class_slis {
            for t in &tiers {
                if let Some(rule) = burn_alert(s, t, period_s, opts, &mut warnings)? {
                    rules.push(rule);
                }
            }
        }
        if let Some(q) = &opts.queue_alert {
            rules.push(queue_alert(slo, &class, q, opts));
        }
        if let Some(f) = &opts.absent_for {
            for s in &class_slis {
                rules.push(absent_alert(s, f, opts));
            }
        }
        groups.push(RuleGroup {
            name: group_name,
            rules,
        });
    }
    for g in &groups {
        for r in &g.rules {
            validate(r.expr())?;
        }
    }
    Ok((RuleFile { groups }, warnings))
}

/// `headroom slo rules`: the rule file as YAML, ready for `promtool check rules` and a
/// Prometheus `rule_files:` entry. Warnings are repeated as comments at the top.
///
/// # Errors
/// As [`rule_file`].
pub fn rules(slo: &SloFile, opts: &RulesOptions) -> Result<Rendered, SloError> {
    let (file, mut warnings) = rule_file(slo, opts)?;
    warnings.extend(crate::budget::unused_target_note(slo));
    let yaml = serde_saphyr::to_string(&file).map_err(|e| SloError::Invalid {
        field: "rules".into(),
        message: format!("cannot serialise the rule file: {e}"),
    })?;
    let mut r = Rendered {
        text: format!(
            "# Generated by `headroom slo rules`: SLO recording rules and multi-window, multi-burn-rate alerts\n# (SRE Workbook ch. 5). Do not edit; regenerate from slo.yaml.\n{yaml}"
        ),
        warnings,
    };
    sli::warning_comments(&mut r);
    Ok(r)
}

/// Rule group names, one per class, unique (Prometheus refuses a file with two groups of one
/// name) and each a function of its own class only, so adding a class never renames another
/// class's group (which would reset its alerts' pending state).
///
/// `headroom-slo-<class>` when the class is already made of ASCII letters, digits, `-`, `_` and
/// `.`; otherwise the other characters become `_` and the FNV-1a hash of the class name is
/// appended (`"chat bot"` → `headroom-slo-chat_bot-<8 hex>`), so classes that only differ in
/// those characters (`chat bot`, `chat/bot`) stay apart. The default class `"*"` is
/// `headroom-slo-default`, and a class literally named `default` gets the hash too. Should two
/// names still meet (a class written as another's hashed form), the later one in class order
/// gets `-2`, `-3`, ….
fn group_names(classes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(classes.len());
    for class in classes {
        let base = if class == "*" {
            "headroom-slo-default".to_owned()
        } else {
            let clean: String = class
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if clean == *class && clean != "default" && !clean.is_empty() {
                format!("headroom-slo-{clean}")
            } else {
                format!("headroom-slo-{clean}-{:08x}", fnv1a(class.as_bytes()))
            }
        };
        let mut name = base.clone();
        let mut n = 2;
        while out.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        out.push(name);
    }
    out
}

/// 32-bit FNV-1a (Fowler–Noll–Vo): a stable, dependency-free hash for name suffixes.
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Labels of an alerting rule: Prometheus expands alert label values as Go templates, so the
/// `--label` values print literally too ([`template_literal`]); the values in `extra` are
/// already template text.
fn alert_labels(
    base: &BTreeMap<String, String>,
    extra: &[(&str, String)],
) -> BTreeMap<String, String> {
    let literal: BTreeMap<String, String> = base
        .iter()
        .map(|(k, v)| (k.clone(), template_literal(v)))
        .collect();
    with_labels(&literal, extra)
}

fn with_labels(
    base: &BTreeMap<String, String>,
    extra: &[(&str, String)],
) -> BTreeMap<String, String> {
    let mut m = base.clone();
    for (k, v) in extra {
        m.insert((*k).to_string(), v.clone());
    }
    m
}

fn sel_of(s: &Sli) -> String {
    format!(
        "{{slo_class={},slo_objective={}}}",
        quote(&s.class),
        quote(&s.objective.id().to_string())
    )
}

/// `class chat` (or `default class`), as template text that prints literally.
fn class_desc(class: &str) -> String {
    if class == "*" {
        "default class".into()
    } else {
        format!("class {}", template_literal(class))
    }
}

/// `text` as Go-template text that Prometheus prints literally in an alert's labels and
/// annotations (both are expanded as Go templates, `text/template`).
///
/// Text without `{{` or `}}` is returned as it is. Otherwise the whole text becomes one action
/// printing a Go string constant, `{{ "…" }}`, with `\`, `"` and control characters escaped
/// as Go's interpreted string literals require (`\n`, `\t`, `\xNN`); inside the quotes
/// neither `{{` nor `}}` ends the action. A class named `{{ $labels.x }}` thus prints as
/// written instead of a label's value, and `{{ broken` no longer makes the rule file invalid.
pub fn template_literal(text: &str) -> String {
    if !text.contains("{{") && !text.contains("}}") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("{{ \"");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push_str("\" }}");
    out
}

fn burn_alert(
    s: &Sli,
    t: &BurnTier,
    period_s: u64,
    opts: &RulesOptions,
    warnings: &mut Vec<String>,
) -> Result<Option<Rule>, SloError> {
    let threshold = t.threshold(s.budget);
    if t.is_dead(s.budget) {
        let msg = format!(
            "tier {} ({}/{} × {}) can never fire: {} × budget {} = {} ≥ 1, and an error ratio cannot exceed 1; this tier needs a target of at least {:.2} %",
            t.spec.name,
            t.spec.long,
            t.spec.short,
            fmt_float(t.factor),
            fmt_float(t.factor),
            fmt_float(s.budget),
            fmt_float(threshold),
            (1.0 - 1.0 / t.factor) * 100.0,
        );
        return match opts.dead_tiers {
            DeadTiers::Refuse => Err(SloError::invalid(&s.field, msg)),
            DeadTiers::Skip => {
                warnings.push(format!("{}: {msg}; skipped", s.field));
                Ok(None)
            }
        };
    }
    let sel = sel_of(s);
    let k = format!("({} * {})", fmt_float(t.factor), fmt_float(s.budget));
    let expr = format!(
        "{}{sel} > {k}\nand\n{}{sel} > {k}",
        ratio_record(&t.spec.long),
        ratio_record(&t.spec.short)
    );
    let labels = alert_labels(
        &opts.labels,
        &[
            ("severity", t.spec.severity.label().into()),
            ("tier", t.spec.name.clone()),
            ("long", t.spec.long.clone()),
            ("short", t.spec.short.clone()),
            ("burn_factor", fmt_float(t.factor)),
            ("exhaustion", t.exhaustion(period_s)),
            ("slo_class", template_literal(&s.class)),
            ("slo_objective", s.objective.id().to_string()),
        ],
    );
    let mut ann = BTreeMap::new();
    ann.insert(
        "summary".into(),
        format!(
            "{}: {} is burning its error budget {}× too fast ({} and {} windows)",
            class_desc(&s.class),
            s.objective.describe(),
            fmt_float(t.factor),
            t.spec.long,
            t.spec.short
        ),
    );
    ann.insert(
        "description".into(),
        format!(
            "Error ratio over {} is {{{{ $value | humanizePercentage }}}} against a budget of {} ({}). At this rate the {} budget is gone in {}. {}",
            t.spec.long,
            fmt_float(s.budget),
            template_literal(&s.field),
            fmt_prom(period_s),
            t.exhaustion(period_s),
            first_look(s)
        ),
    );
    Ok(Some(Rule::Alert {
        alert: BURN_ALERT.into(),
        expr: LitString(expr),
        for_: t.spec.for_.clone(),
        labels,
        annotations: ann,
    }))
}

fn fmt_prom(s: u64) -> String {
    crate::promql::fmt_prom_duration(s)
}

/// Whether `s` is measured on the Headroom gateway's series (`--latency-source gateway`; queue
/// time stays on vLLM's histogram even then).
fn at_gateway(s: &Sli) -> bool {
    match &s.source {
        SliSource::GatewayErrors { .. } => true,
        SliSource::Latency { metric, .. } => metric.starts_with("headroom_gateway_"),
        SliSource::Errors { .. } => false,
    }
}

/// Where to look first when `s` burns, naming the series of its own source.
fn first_look(s: &Sli) -> &'static str {
    let gateway = at_gateway(s);
    match (&s.objective, gateway) {
        (
            Objective::Latency {
                signal: LatencySignal::Ttft,
                ..
            },
            true,
        ) => {
            "Look first at the gateway's own admission (headroom_gateway_queue_seconds, headroom_gateway_queued), then at the engine's: vllm:request_queue_time_seconds and vllm:num_requests_waiting, then vllm:request_prefill_time_seconds (prefill contention)."
        }
        (
            Objective::Latency {
                signal: LatencySignal::Ttft | LatencySignal::QueueTime,
                ..
            },
            _,
        ) => {
            "Look first at vllm:request_queue_time_seconds and vllm:num_requests_waiting (admission), then vllm:request_prefill_time_seconds (prefill contention)."
        }
        (
            Objective::Latency {
                signal: LatencySignal::Itl | LatencySignal::Tpot,
                ..
            },
            _,
        ) => {
            "Look first at vllm:num_requests_running and vllm:iteration_tokens_total (decode batch size), then vllm:kv_cache_usage_perc and vllm:num_preemptions_total."
        }
        (
            Objective::Latency {
                signal: LatencySignal::E2e,
                ..
            },
            true,
        ) => {
            "Split E2E into the gateway's queue (headroom_gateway_queue_seconds) and the engine's queue, prefill and decode (vllm:request_*_time_seconds) to see which phase grew."
        }
        (
            Objective::Latency {
                signal: LatencySignal::E2e,
                ..
            },
            false,
        ) => {
            "Split E2E into queue, prefill and decode (vllm:request_*_time_seconds) to see which phase grew."
        }
        (Objective::ErrorRate { .. }, true) => {
            "Split headroom_gateway_requests_total by outcome: upstream_error (an upstream 5xx or 429, unreachable, or a broken stream), timeout (a gateway timeout: first byte, idle or total), rejected (the gateway's own admission: queue full or queue timeout, see headroom_gateway_queued); then the engine's vllm:request_success_total{finished_reason}."
        }
        (Objective::ErrorRate { .. }, false) => {
            "Split by vllm:request_success_total{finished_reason} and http_requests_total{status}: aborts are client cancellations or timeouts, 5xx without engine errors fail outside the engine."
        }
    }
}

/// Why `absent()` of the SLI's series can hold, for the series' own source.
fn absent_causes(s: &Sli) -> String {
    match (&s.source, at_gateway(s)) {
        (SliSource::Latency { le, .. }, true) => format!(
            "the gateway is not scraped, no gateway class matches the class selector (the class label is the class name in gateway.yaml), or the gateway runs without this slo.yaml (`headroom gateway --slo`), so {} is not one of its bucket bounds",
            template_literal(le)
        ),
        (SliSource::GatewayErrors { .. }, _) => "the gateway is not scraped, or no gateway class matches the class selector (the class label is the class name in gateway.yaml)".into(),
        (SliSource::Latency { .. }, false) => "the target is not scraped, the class selector matches nothing, or the bucket bound does not exist in this vLLM version".into(),
        (SliSource::Errors { .. }, _) => "the target is not scraped, or the class selector matches nothing".into(),
    }
}

fn queue_alert(slo: &SloFile, class: &str, q: &QueueAlert, opts: &RulesOptions) -> Rule {
    let own = slo
        .spec_for(class)
        .objectives
        .iter()
        .filter_map(|o| match o {
            Objective::Latency {
                signal: LatencySignal::QueueTime,
                threshold_s,
                ..
            } => Some(*threshold_s),
            _ => None,
        })
        .fold(None::<f64>, |m, t| Some(m.map_or(t, |m| m.min(t))));
    let threshold = own.unwrap_or(q.default_mean_s);
    // Queue time has no class label: with the gateway's classes, the engine's requests as a whole.
    let sel = if opts.sli.latency_source == crate::LatencySource::Gateway {
        opts.sli.selectors.common.clone()
    } else {
        sli::engine_selector(slo, &opts.sli.selectors, class)
    };
    let m = crate::catalogue::VLLM_QUEUE_TIME;
    let expr = format!(
        "(\n  sum(rate({}[5m]))\n  /\n  (sum(rate({}[5m])) > 0)\n) > {}",
        crate::promql::selector(&format!("{m}_sum"), &sel),
        crate::promql::selector(&format!("{m}_count"), &sel),
        fmt_float(threshold)
    );
    let mut ann = BTreeMap::new();
    ann.insert(
        "summary".into(),
        format!(
            "{}: requests wait in the engine queue {{{{ $value | humanizeDuration }}}} on average (threshold {})",
            class_desc(class),
            fmt_duration_s(threshold)
        ),
    );
    ann.insert(
        "description".into(),
        format!(
            "Mean vllm:request_queue_time_seconds over 5m is above {}{}. Queue time is the earliest saturation signal: admission is full (vllm:num_requests_waiting > 0) before TTFT breaks. Add replicas or lower max concurrency per class; VRAM is not a signal (vLLM preallocates it).",
            fmt_duration_s(threshold),
            if own.is_some() {
                ", the tightest queue_time objective of this class: requests wait longer than that on average, so that objective is at risk and its burn-rate alerts may follow"
            } else {
                ""
            }
        ),
    );
    Rule::Alert {
        alert: QUEUE_ALERT.into(),
        expr: LitString(expr),
        for_: Some(q.for_.clone()),
        labels: alert_labels(
            &opts.labels,
            &[
                ("severity", "ticket".into()),
                ("slo_class", template_literal(class)),
            ],
        ),
        annotations: ann,
    }
}

fn absent_alert(s: &Sli, for_: &str, opts: &RulesOptions) -> Rule {
    let series = match &s.source {
        SliSource::Latency {
            metric,
            le,
            selector,
        } => {
            let mut m = selector.clone();
            m.push(crate::promql::le_matcher(le));
            crate::promql::selector(&format!("{metric}_bucket"), &m)
        }
        SliSource::Errors { .. } | SliSource::GatewayErrors { .. } => s.total_series(),
    };
    let mut ann = BTreeMap::new();
    ann.insert(
        "summary".into(),
        format!(
            "{}: no series for {} ({}); its burn-rate alerts cannot fire",
            class_desc(&s.class),
            s.objective.describe(),
            template_literal(&s.field)
        ),
    );
    ann.insert(
        "description".into(),
        format!(
            "absent({}) for {for_}: {}.",
            template_literal(&series),
            absent_causes(s)
        ),
    );
    Rule::Alert {
        alert: ABSENT_ALERT.into(),
        expr: LitString(format!("absent({series})")),
        for_: Some(for_.to_string()),
        labels: alert_labels(
            &opts.labels,
            &[
                ("severity", "ticket".into()),
                ("slo_class", template_literal(&s.class)),
                ("slo_objective", s.objective.id().to_string()),
            ],
        ),
        annotations: ann,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn slo(t: &str) -> SloFile {
        SloFile::parse(t, Path::new("slo.yaml")).unwrap()
    }

    /// A `"*"` block beside classes `chat` and `rag` once became a catch-all class whose
    /// `absent(headroom_gateway_requests_total{class!~"chat|rag"})` fired forever: it is the
    /// classes' defaults, so no rule selects "every other class".
    #[test]
    fn the_default_block_is_no_catch_all_class() {
        let f = slo(
            "objectives:\n  \"*\": {ttft: {p95: 250ms}, error_rate: 1%}\n  chat: {}\n  rag: {ttft: {p95: 1s}}\n",
        );
        let opts = RulesOptions {
            sli: SliOptions {
                latency_source: crate::LatencySource::Gateway,
                ..Default::default()
            },
            ..Default::default()
        };
        let r = rules(&f, &opts).unwrap();
        assert!(!r.text.contains("!~\"chat|rag\""), "{}", r.text);
        assert!(
            !r.text.contains("slo_class: '*'") && !r.text.contains("default class"),
            "{}",
            r.text
        );
        assert!(r.text.contains("class=\"chat\"") && r.text.contains("class=\"rag\""));
    }

    #[test]
    fn four_tiers_per_objective_with_workbook_thresholds() {
        let f = slo("objectives:\n  chat: {ttft: {p95: 250ms}, error_rate: 0.5%}\n");
        let (file, w) = rule_file(&f, &RulesOptions::default()).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(file.groups.len(), 1);
        assert_eq!(file.groups[0].name, "headroom-slo-chat");
        let alerts: Vec<(&str, &str, &str)> = file.groups[0]
            .rules
            .iter()
            .filter_map(|r| match r {
                Rule::Alert {
                    alert,
                    expr,
                    labels,
                    ..
                } if alert == BURN_ALERT => Some((
                    labels["slo_objective"].as_str(),
                    labels["tier"].as_str(),
                    expr.0.as_str(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(alerts.len(), 8);
        // 14.4 × 0.05 = 0.72 for p95; 14.4 × 0.005 = 0.072 for 0.5 % errors.
        assert!(alerts[0].2.contains(
            "ratio_rate1h{slo_class=\"chat\",slo_objective=\"ttft_p95\"} > (14.4 * 0.05)"
        ));
        assert!(alerts[0].2.contains("ratio_rate5m{"));
        assert_eq!(alerts[3].1, "ticket_slow");
        assert!(alerts[3].2.contains("ratio_rate3d{") && alerts[3].2.contains("ratio_rate6h{"));
        assert!(alerts[4].2.contains("> (14.4 * 0.005)"));
        // Recorded: the 5m event rates, the seven tier windows plus the 30d period, and the
        // three constants.
        let records: Vec<(&str, &str)> = file.groups[0]
            .rules
            .iter()
            .filter_map(|r| match r {
                Rule::Record {
                    record,
                    labels,
                    expr,
                } if labels["slo_objective"] == "ttft_p95" => {
                    Some((record.as_str(), expr.0.as_str()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(records.len(), 2 + 8 + 3);
        assert_eq!(records[0].0, "headroom:slo_bad_events:rate5m");
        assert_eq!(records[1].0, "headroom:slo_events:rate5m");
        assert_eq!(
            records[1].1,
            "sum(rate(vllm:time_to_first_token_seconds_count{model_name=\"chat\"}[5m]))"
        );
        assert_eq!(records[2].0, "headroom:slo_errors_per_event:ratio_rate5m");
        assert_eq!(records[8].0, "headroom:slo_errors_per_event:ratio_rate3d");
        assert!(records[8].1.contains("[3d]))"), "{}", records[8].1);
        assert_eq!(records[9].0, "headroom:slo_errors_per_event:ratio_rate30d");
        // The period from the recorded rates, not from 30 days of raw series.
        assert_eq!(
            records[9].1,
            "sum_over_time(headroom:slo_bad_events:rate5m{slo_class=\"chat\",slo_objective=\"ttft_p95\"}[30d])\n/\n(sum_over_time(headroom:slo_events:rate5m{slo_class=\"chat\",slo_objective=\"ttft_p95\"}[30d]) > 0)"
        );
        assert!(!records[9].1.contains("vllm:"));
    }

    #[test]
    fn dead_tiers_are_skipped_with_a_warning_or_refused() {
        // p90: 14.4 × 0.1 = 1.44 ≥ 1 → dead; 6 × 0.1 = 0.6 → alive.
        let f = slo("objectives:\n  chat: {ttft: {p90: 1s}}\n");
        let (file, w) = rule_file(&f, &RulesOptions::default()).unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("objectives.chat.ttft.p90: tier page_fast"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("14.4 × budget 0.1 = 1.44 ≥ 1"), "{}", w[0]);
        assert!(w[0].contains("at least 93.06 %"), "{}", w[0]);
        let n = file.groups[0]
            .rules
            .iter()
            .filter(|r| matches!(r, Rule::Alert { alert, .. } if alert == BURN_ALERT))
            .count();
        assert_eq!(n, 3);
        let refuse = RulesOptions {
            dead_tiers: DeadTiers::Refuse,
            ..Default::default()
        };
        let e = rule_file(&f, &refuse).unwrap_err().to_string();
        assert!(
            e.starts_with("objectives.chat.ttft.p90: tier page_fast"),
            "{e}"
        );
    }

    #[test]
    fn queue_alert_uses_tightest_queue_objective_and_nothing_watches_vram() {
        let f = slo("objectives:\n  chat: {queue_time: {p99: 300ms, p90: 1s}}\n");
        let r = rules(&f, &RulesOptions::default()).unwrap();
        assert!(r.text.contains("alert: HeadroomEngineQueueing"));
        assert!(r.text.contains("(sum(rate(vllm:request_queue_time_seconds_count{model_name=\"chat\"}[5m])) > 0)\n      ) > 0.3"), "{}", r.text);
        for vram in ["DCGM_FI_DEV_FB_USED", "FB_FREE", "gpu_memory", "GPU_UTIL"] {
            assert!(!r.text.contains(vram), "{vram}");
        }
        assert!(!r.text.contains("already breached"), "{}", r.text);
        // With the gateway's classes the engine's queue is watched whole (no class label).
        let mut gw = RulesOptions::default();
        gw.sli.latency_source = crate::LatencySource::Gateway;
        let r = rules(&f, &gw).unwrap();
        assert!(
            r.text.contains(
                "(sum(rate(vllm:request_queue_time_seconds_count[5m])) > 0)\n      ) > 0.3"
            ),
            "{}",
            r.text
        );
        assert!(!r.text.contains("model_name=\"chat\""), "{}", r.text);
    }

    #[test]
    fn template_text_is_escaped_only_when_it_holds_delimiters() {
        // Go interpreted string literals (go.dev/ref/spec#String_literals): \\ \" \n \t \xNN.
        for (text, want) in [
            ("chat", "chat"),
            ("a{b}c", "a{b}c"),
            ("{{ broken", "{{ \"{{ broken\" }}"),
            ("x }}", "{{ \"x }}\" }}"),
            ("{{ $labels.x }}", "{{ \"{{ $labels.x }}\" }}"),
            ("q\"{{\\\n\t\u{1}é", "{{ \"q\\\"{{\\\\\\n\\t\\x01é\" }}"),
        ] {
            assert_eq!(template_literal(text), want, "{text}");
        }
    }

    #[test]
    fn group_names_are_unique_and_stable_per_class() {
        // FNV-1a 32 reference vectors (offset basis 0x811c9dc5, prime 0x01000193): "a" is
        // 0xe40c292c; "chat bot" computed independently in Python is 0x0ff8c2d2.
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"chat bot"), 0x0ff8_c2d2);
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        let classes: Vec<String> = [
            "chat bot", "chat_bot", "chat-bot", "chat/bot", "default", "*",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let names = group_names(&classes);
        assert_eq!(names[1], "headroom-slo-chat_bot");
        assert_eq!(names[2], "headroom-slo-chat-bot");
        assert_eq!(names[5], "headroom-slo-default");
        assert_eq!(names[0], "headroom-slo-chat_bot-0ff8c2d2");
        assert_eq!(
            names[3],
            format!("headroom-slo-chat_bot-{:08x}", fnv1a(b"chat/bot"))
        );
        assert_eq!(
            names[4],
            format!("headroom-slo-default-{:08x}", fnv1a(b"default"))
        );
        let mut uniq = names.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), names.len(), "{names:?}");
        // Each name depends on its own class only: dropping the others changes nothing.
        assert_eq!(group_names(&classes[..1]), names[..1].to_vec());
        // A class spelled as another's hashed form still gets a name of its own.
        let tricky = vec![
            names[0].trim_start_matches("headroom-slo-").to_string(),
            "chat bot".to_string(),
        ];
        let t = group_names(&tricky);
        assert_eq!(t[0], names[0]);
        assert_eq!(t[1], format!("{}-2", names[0]));
    }

    /// Annotations of `alert` rules, as (slo_objective, description) pairs.
    fn descriptions(file: &RuleFile, alert: &str) -> Vec<(String, String)> {
        file.groups
            .iter()
            .flat_map(|g| &g.rules)
            .filter_map(|r| match r {
                Rule::Alert {
                    alert: a,
                    labels,
                    annotations,
                    ..
                } if a == alert => Some((
                    labels["slo_objective"].clone(),
                    annotations["description"].clone(),
                )),
                _ => None,
            })
            .collect()
    }

    /// A new user found the gateway's rules blaming "this vLLM version" for a missing gateway
    /// bucket and pointing at vllm:request_success_total for the gateway's error ratio.
    #[test]
    fn alert_texts_name_the_series_of_their_own_source() {
        let f = slo(
            "objectives:\n  long_context: {ttft: {p95: 300ms}, e2e: {p99: 20s}, queue_time: {p99: 500ms}, error_rate: 1%}\n",
        );
        let mut gw = RulesOptions::default();
        gw.sli.latency_source = crate::LatencySource::Gateway;
        let (file, _) = rule_file(&f, &gw).unwrap();
        let absent = descriptions(&file, ABSENT_ALERT);
        assert_eq!(absent.len(), 4);
        for (o, d) in &absent {
            match o.as_str() {
                "ttft_p95" => {
                    assert!(d.starts_with("absent(headroom_gateway_ttft_seconds_bucket{class=\"long_context\",le=\"0.3\"}) for 15m: the gateway is not scraped"), "{d}");
                    assert!(d.contains("runs without this slo.yaml"), "{d}");
                    assert!(d.contains("so 0.3 is not one of its bucket bounds"), "{d}");
                }
                "error_rate" => {
                    assert!(d.starts_with("absent(headroom_gateway_requests_total{class=\"long_context\"}) for 15m: the gateway is not scraped, or no gateway class matches"), "{d}");
                    assert!(!d.contains("bucket"), "{d}");
                }
                // Queue time stays on the engine's histogram, whose text stays the engine's.
                "queue_time_p99" => {
                    assert!(
                        d.starts_with("absent(vllm:request_queue_time_seconds_bucket{le=\"0.5\"})"),
                        "{d}"
                    );
                    assert!(d.contains("does not exist in this vLLM version"), "{d}");
                }
                _ => assert!(d.contains("the gateway is not scraped"), "{o}: {d}"),
            }
            if o != "queue_time_p99" {
                assert!(!d.contains("vLLM"), "{o}: {d}");
            }
        }
        let burn = descriptions(&file, BURN_ALERT);
        for (o, d) in &burn {
            match o.as_str() {
                "error_rate" => {
                    assert!(
                        d.contains("Split headroom_gateway_requests_total by outcome"),
                        "{d}"
                    );
                    assert!(!d.contains("http_requests_total{status}"), "{d}");
                }
                "ttft_p95" => assert!(d.contains("headroom_gateway_queue_seconds"), "{d}"),
                "e2e_p99" => assert!(d.contains("the gateway's queue"), "{d}"),
                _ => {}
            }
        }
        // The same file on vLLM's series keeps vLLM's words; an error SLI has no bucket.
        let f = slo("objectives:\n  chat: {ttft: {p95: 250ms}, error_rate: 1%}\n");
        let (file, _) = rule_file(&f, &RulesOptions::default()).unwrap();
        for (o, d) in descriptions(&file, ABSENT_ALERT) {
            match o.as_str() {
                "ttft_p95" => assert!(
                    d.ends_with("or the bucket bound does not exist in this vLLM version."),
                    "{d}"
                ),
                _ => assert_eq!(
                    d,
                    "absent(vllm:request_success_total{model_name=\"chat\"}) for 15m: the target is not scraped, or the class selector matches nothing."
                ),
            }
        }
        assert!(
            descriptions(&file, BURN_ALERT)
                .iter()
                .any(|(o, d)| o == "error_rate"
                    && d.contains("Split by vllm:request_success_total{finished_reason}"))
        );
    }

    #[test]
    fn bad_window_and_unknown_class_name_the_field() {
        let f = slo("objectives:\n  chat: {error_rate: 1%}\nbudget: {window: 1M, target: 99%}\n");
        let e = rules(&f, &RulesOptions::default()).unwrap_err().to_string();
        assert!(
            e.starts_with("budget.window: `1M` is not a Prometheus duration"),
            "{e}"
        );
        let f = slo("objectives:\n  chat: {error_rate: 1%}\n");
        let mut o = RulesOptions::default();
        o.sli.selectors.overrides.insert("caht".into(), vec![]);
        let e = rules(&f, &o).unwrap_err().to_string();
        assert!(
            e.starts_with("selectors.overrides: unknown class `caht`"),
            "{e}"
        );
    }
}
