//! The generated rule files against Prometheus's own tools: `promtool check rules` (syntax,
//! templates) and `promtool test rules` (each burn-rate tier fires and resolves on synthetic
//! series, quiet services stay silent, HTTP 5xx count, the queue-time alert fires).
//!
//! promtool comes from Debian's `prometheus` package (`scripts/install-prometheus`). When it is
//! missing these tests print a loud message and pass, unless `HEADROOM_REQUIRE_PROMTOOL` is set
//! (the project's test script sets it), in which case they fail.
//!
//! Expected alerts are computed by hand in the comments from the Workbook thresholds
//! (factor × budget: 14.4, 6, 3, 1 × 0.05 for p95 = 0.72, 0.3, 0.15, 0.05) and the fraction of
//! bad minutes inside each window; evaluation times keep every ratio at least 10 % away from its
//! threshold so rate extrapolation at window edges cannot flip a result.

use headroom_core::SloFile;
use headroom_slo::rules::{Rule, RuleFile, rule_file};
use headroom_slo::{LatencySource, RulesOptions};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("promtool"))
            .find(|c| c.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if std::env::var_os("HEADROOM_REQUIRE_PROMTOOL").is_some() => {
            panic!(
                "promtool not found on PATH and HEADROOM_REQUIRE_PROMTOOL is set; run scripts/install-prometheus"
            )
        }
        None => {
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! SKIPPED: promtool is not installed, so the generated rules were NOT   !!!\n\
                 !!! checked by Prometheus. Run scripts/install-prometheus, or set          !!!\n\
                 !!! HEADROOM_REQUIRE_PROMTOOL=1 to make this a failure.                    !!!\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            None
        }
    }
}

fn slo(text: &str) -> SloFile {
    SloFile::parse(text, Path::new("slo.yaml")).unwrap()
}

/// Writes the rule file without annotations: `promtool test rules` compares annotations
/// verbatim, and the templates are checked by `promtool check rules` in the first test.
fn write_rules(dir: &Path, file: RuleFile) {
    let mut file = file;
    for g in &mut file.groups {
        for r in &mut g.rules {
            if let Rule::Alert { annotations, .. } = r {
                annotations.clear();
            }
        }
    }
    let yaml = serde_saphyr::to_string(&file).unwrap();
    std::fs::write(dir.join("rules.yaml"), yaml).unwrap();
}

fn run(promtool: &Path, args: &[&str], dir: &Path) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
}

/// Labels of a burn-rate alert of `tier`, from the Workbook table for a 30 d period:
/// (severity, long, short, factor, time to exhaustion = 30 d / factor).
fn burn_labels(class: &str, objective: &str, tier: &str) -> String {
    let (sev, long, short, factor, exh) = match tier {
        "page_fast" => ("page", "1h", "5m", "14.4", "2d2h"),
        "page_slow" => ("page", "6h", "30m", "6", "5d"),
        "ticket_fast" => ("ticket", "1d", "2h", "3", "10d"),
        "ticket_slow" => ("ticket", "3d", "6h", "1", "30d"),
        _ => unreachable!(),
    };
    format!(
        "        - exp_labels: {{severity: {sev}, tier: {tier}, long: \"{long}\", short: \"{short}\", burn_factor: \"{factor}\", exhaustion: \"{exh}\", slo_class: {class}, slo_objective: {objective}}}\n"
    )
}

fn alert_case(out: &mut String, name: &str, at: &str, firing: &[(&str, &str, &str)]) {
    let _ = writeln!(out, "      - eval_time: {at}\n        alertname: {name}");
    if firing.is_empty() {
        out.push_str("        exp_alerts: []\n");
    } else {
        out.push_str("        exp_alerts:\n");
        for (c, o, t) in firing {
            out.push_str(&burn_labels(c, o, t));
        }
    }
}

#[test]
fn generated_rules_pass_promtool_check() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = slo(
        "objectives:\n  \"*\":\n    ttft: {p95: 500ms}\n    e2e: {p99: 10s}\n    error_rate: 0.5%\n  chat:\n    itl: {p90: 50ms, p99: 100ms}\n    tpot: {p95: 75ms}\n    queue_time: {p99: 1s}\n  \"rag.long-context\":\n    ttft: {p95: 2.5s}\nbudget: {window: 28d, target: 99%, freeze_at: 50%}\n",
    );
    let r = headroom_slo::rules(&f, &RulesOptions::default()).unwrap();
    // p90 ITL: the 14.4× and 13.44× tiers cannot fire at a 10 % budget.
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("itl.p90: tier page_fast"))
    );
    std::fs::write(dir.path().join("vllm.yaml"), &r.text).unwrap();
    let mut gw = RulesOptions::default();
    gw.sli.latency_source = LatencySource::Gateway;
    let f2 = slo("objectives:\n  chat: {ttft: {p95: 300ms}, itl: {p99: 42ms}, error_rate: 1%}\n");
    let r2 = headroom_slo::rules(&f2, &gw).unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), &r2.text).unwrap();
    run(
        &pt,
        &["check", "rules", "vllm.yaml", "gateway.yaml"],
        dir.path(),
    );
}

/// Classes whose names differ only in characters a group name leaves out (`chat bot`,
/// `chat_bot`, `chat/bot`), or that spell the default class's group (`default`), get distinct
/// rule groups: promtool refuses a file with two groups of one name. The `"*"` block beside
/// them is their defaults and gets no group of its own.
#[test]
fn colliding_class_names_give_distinct_groups_that_pass_promtool() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = slo(
        "objectives:\n  \"*\": {error_rate: 1%}\n  \"chat bot\": {ttft: {p95: 250ms}}\n  chat_bot: {ttft: {p95: 250ms}}\n  chat-bot: {ttft: {p95: 250ms}}\n  \"chat/bot\": {ttft: {p95: 250ms}}\n  default: {ttft: {p95: 250ms}}\n",
    );
    let (file, _) = rule_file(&f, &RulesOptions::default()).unwrap();
    let mut names: Vec<&str> = file.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(!names.contains(&"headroom-slo-default"), "{names:?}");
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 5, "{names:?}");
    let r = headroom_slo::rules(&f, &RulesOptions::default()).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), &r.text).unwrap();
    run(&pt, &["check", "rules", "rules.yaml"], dir.path());
}

/// Alert labels and annotations are Go templates. Class names that look like templates
/// (`{{ $labels.model_name }}`), that break one (`{{ broken`) or that hold quotes, backslashes and
/// `}}`, and a `--label` value such as `{{ infra`, print literally: promtool accepts the file, and in the fired missing-series alert the
/// summary, the description and the `slo_class` label carry the class exactly as written.
#[test]
fn template_like_class_names_print_literally_in_fired_alerts() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let classes = ["{{ broken", "{{ $labels.model_name }}", "say \"hi\" \\ }}"];
    let mut text = String::from("objectives:\n");
    for c in classes {
        // YAML double-quoted keys: escape `\` and `"` as YAML requires
        let k = c.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(text, "  \"{k}\": {{ttft: {{p95: 250ms}}}}");
    }
    let f = slo(&text);
    let opts = RulesOptions {
        absent_for: Some("1m".into()),
        queue_alert: None,
        labels: [("team".to_string(), "{{ infra".to_string())].into(),
        ..Default::default()
    };
    let r = headroom_slo::rules(&f, &opts).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), &r.text).unwrap();
    run(&pt, &["check", "rules", "rules.yaml"], dir.path());
    // No input series: every SLI series is absent, so each class's alert fires after 1m.
    let mut alerts = Vec::new();
    for c in classes {
        // the PromQL string literal of the class, written by hand: `"` and `\` escaped
        let q = match c {
            "{{ broken" => r#""{{ broken""#,
            "{{ $labels.model_name }}" => r#""{{ $labels.model_name }}""#,
            _ => r#""say \"hi\" \\ }}""#,
        };
        alerts.push(serde_json::json!({
            "exp_labels": {
                "severity": "ticket",
                "team": "{{ infra",
                "slo_class": c,
                "slo_objective": "ttft_p95",
                "model_name": c,
                "le": "0.25",
            },
            "exp_annotations": {
                "summary": format!(
                    "class {c}: no series for TTFT p95 < 250 ms (objectives.{c}.ttft.p95); its burn-rate alerts cannot fire"
                ),
                "description": format!(
                    "absent(vllm:time_to_first_token_seconds_bucket{{model_name={q},le=\"0.25\"}}) for 1m: the target is not scraped, the class selector matches nothing, or the bucket bound does not exist in this vLLM version."
                ),
            },
        }));
    }
    let test = serde_json::json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [],
            "alert_rule_test": [{
                "eval_time": "5m",
                "alertname": "HeadroomSLIAbsent",
                "exp_alerts": alerts,
            }],
        }],
    });
    std::fs::write(dir.path().join("test.yaml"), test.to_string()).unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}

/// The longest SLO period accepted (365 d, written three ways) still gives rules Prometheus
/// parses; anything longer is refused before a rule is written (see tests/durations.rs).
#[test]
fn a_one_year_period_passes_promtool_check() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, w) in ["1y", "365d", "52w1d"].iter().enumerate() {
        let f = slo(&format!(
            "objectives:\n  chat: {{ttft: {{p95: 250ms}}, error_rate: 1%}}\nbudget: {{window: {w}, target: 99%}}\n"
        ));
        let r = headroom_slo::rules(&f, &RulesOptions::default()).unwrap();
        let name = format!("year{i}.yaml");
        std::fs::write(dir.path().join(&name), &r.text).unwrap();
        files.push(name);
    }
    let mut args = vec!["check", "rules"];
    args.extend(files.iter().map(String::as_str));
    run(&pt, &args, dir.path());
}

/// Input series of one class: TTFT at 10 requests/s, all under 250 ms except during
/// `[bad_from, bad_to)` minutes, when a share `r` of them is slower.
fn ttft_series(out: &mut String, class: &str, r: f64, bad_from: u64, bad_to: u64, end: u64) {
    let good = 600.0;
    let bad = (600.0 * (1.0 - r)).round();
    let g1 = good * bad_from as f64;
    let b1 = g1 + bad * (bad_to - bad_from) as f64;
    let _ = writeln!(
        out,
        "      - series: 'vllm:time_to_first_token_seconds_count{{model_name=\"{class}\"}}'\n        values: '0+600x{end}'"
    );
    let _ = writeln!(
        out,
        "      - series: 'vllm:time_to_first_token_seconds_bucket{{model_name=\"{class}\",le=\"0.25\"}}'\n        values: '0+{good}x{bad_from} {}+{bad}x{} {}+{good}x{}'",
        g1 + bad,
        bad_to - bad_from - 1,
        b1 + good,
        end - bad_to - 1
    );
}

#[test]
fn each_burn_tier_fires_and_resolves() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Four classes with the same objective (budget 0.05; thresholds 0.72, 0.3, 0.15, 0.05) and
    // different shares of slow requests while bad: a 0.9, b 0.5, c 0.2, d 0.1.
    let f = slo(
        "objectives:\n  a: {ttft: {p95: 250ms}}\n  b: {ttft: {p95: 250ms}}\n  c: {ttft: {p95: 250ms}}\n  d: {ttft: {p95: 250ms}}\n",
    );
    let (file, warnings) = rule_file(&f, &RulesOptions::default()).unwrap();
    assert!(warnings.is_empty());
    write_rules(dir.path(), file);

    // 6 h good, then 25 h bad (minutes 360–1860), then 8 h good. Rules are evaluated every 5 m
    // (no tier has a `for:`), which keeps promtool's run short.
    let (from, to, end) = (360, 1860, 2340);
    let mut t = String::from(
        "rule_files: [rules.yaml]\nevaluation_interval: 5m\ntests:\n  - interval: 1m\n    input_series:\n",
    );
    for (c, r) in [("a", 0.9), ("b", 0.5), ("c", 0.2), ("d", 0.1)] {
        ttft_series(&mut t, c, r, from, to, end);
    }
    t.push_str("    alert_rule_test:\n");
    let o = "ttft_p95";
    let n = "HeadroomErrorBudgetBurn";
    // 300m: all good, nothing fires.
    alert_case(&mut t, n, "300m", &[]);
    // 375m, 15 min into the burn: a's 5m ratio is 0.9 but its 1h ratio 15/60×0.9 = 0.225 < 0.72,
    // 30m 0.45 but 6h 0.0375 < 0.3; 2h 0.1125 < 0.15; 6h 0.0375 < 0.05. The long windows gate.
    alert_case(&mut t, n, "375m", &[]);
    // 415m, 55 min in: a 1h 55/60×0.9 = 0.825 > 0.72 and 5m 0.9 → page_fast. Windows of 1d and
    // 3d hold only the 415 min of data: a 55/415×0.9 = 0.119 (< 0.15, > 0.05 with 6h
    // 55/360×0.9 = 0.1375) → ticket_slow; b 55/415×0.5 = 0.066 > 0.05 and 6h 0.076 →
    // ticket_slow; c 0.0265 < 0.05 → nothing.
    alert_case(
        &mut t,
        n,
        "415m",
        &[
            ("a", o, "page_fast"),
            ("a", o, "ticket_slow"),
            ("b", o, "ticket_slow"),
        ],
    );
    // 1830m, deep in the burn (1d and shorter windows fully bad; the 3d window holds 1830 min,
    // 1470 of them bad): a 0.9 > all four; b 0.5 > 0.3, 0.15, 0.05; c 0.2 > 0.15, 0.05 (3d
    // 0.16); d 0.1 (3d 0.08) > 0.05 only.
    alert_case(
        &mut t,
        n,
        "1830m",
        &[
            ("a", o, "page_fast"),
            ("a", o, "page_slow"),
            ("a", o, "ticket_fast"),
            ("a", o, "ticket_slow"),
            ("b", o, "page_slow"),
            ("b", o, "ticket_fast"),
            ("b", o, "ticket_slow"),
            ("c", o, "ticket_fast"),
            ("c", o, "ticket_slow"),
            ("d", o, "ticket_slow"),
        ],
    );
    // 1900m, 40 min after the burn stopped: 5m and 30m windows are clean, so both page tiers
    // resolved. 2h window 80/120 bad: a 0.6, b 0.333 > 0.15 → ticket_fast (1d 1400/1440 bad);
    // c 0.133 < 0.15 → not. 6h window 320/360 bad: a 0.8, b 0.444, c 0.178, d 0.089 > 0.05, and
    // 3d 1500/1900 bad (d 0.079) → ticket_slow for all.
    alert_case(
        &mut t,
        n,
        "1900m",
        &[
            ("a", o, "ticket_fast"),
            ("a", o, "ticket_slow"),
            ("b", o, "ticket_fast"),
            ("b", o, "ticket_slow"),
            ("c", o, "ticket_slow"),
            ("d", o, "ticket_slow"),
        ],
    );
    // 2280m, 7 h after: every short window (≤ 6h) is clean → all resolved.
    alert_case(&mut t, n, "2280m", &[]);
    std::fs::write(dir.path().join("test.yaml"), t).unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}

#[test]
fn error_ratio_counts_aborts_and_http_5xx_and_stays_silent_when_quiet() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    // error_rate 1 %: budget 0.01, thresholds 0.144, 0.06, 0.03, 0.01.
    let f = slo("objectives:\n  m: {error_rate: 1%}\n  idle: {error_rate: 1%}\n");
    let (file, _) = rule_file(&f, &RulesOptions::default()).unwrap();
    write_rules(dir.path(), file);
    // Class m: 100 stops/min throughout; 20 aborts/min in minutes 120–240; then 20 HTTP 5xx/min
    // in minutes 240–360 (the 5xx series does not exist before minute 240, as with
    // prometheus-fastapi-instrumentator); all good after 360 until 840. Class idle, on another
    // server: counters that never move (a quiet service); m's HTTP 5xx must not reach it.
    let t = "rule_files: [rules.yaml]
evaluation_interval: 5m
tests:
  - interval: 1m
    input_series:
      - series: 'vllm:request_success_total{job=\"vllm\",instance=\"m:8000\",model_name=\"m\",finished_reason=\"stop\"}'
        values: '0+100x840'
      - series: 'vllm:request_success_total{job=\"vllm\",instance=\"m:8000\",model_name=\"m\",finished_reason=\"length\"}'
        values: '0+0x840'
      - series: 'vllm:request_success_total{job=\"vllm\",instance=\"m:8000\",model_name=\"m\",finished_reason=\"abort\"}'
        values: '0+0x120 20+20x119 2400+0x600'
      - series: 'vllm:num_requests_running{job=\"vllm\",instance=\"m:8000\",model_name=\"m\"}'
        values: '3+0x840'
      - series: 'http_requests_total{job=\"vllm\",instance=\"m:8000\",handler=\"/v1/chat/completions\",method=\"POST\",status=\"2xx\"}'
        values: '0+100x840'
      - series: 'http_requests_total{job=\"vllm\",instance=\"m:8000\",handler=\"/v1/chat/completions\",method=\"POST\",status=\"5xx\"}'
        values: '_x240 20+20x119 2400+0x480'
      - series: 'vllm:request_success_total{job=\"vllm\",instance=\"idle:8000\",model_name=\"idle\",finished_reason=\"stop\"}'
        values: '1000+0x840'
      - series: 'vllm:request_success_total{job=\"vllm\",instance=\"idle:8000\",model_name=\"idle\",finished_reason=\"abort\"}'
        values: '7+0x840'
      - series: 'vllm:num_requests_running{job=\"vllm\",instance=\"idle:8000\",model_name=\"idle\"}'
        values: '0+0x840'
    alert_rule_test:
      # 200m, 80 min of aborts (no 5xx series yet: the `or vector(0)` guard keeps the sum).
      # 1h and 5m: 20/120 = 0.167 > 0.144 → page_fast. 6h and 1d hold 200 min of data:
      # 1600 / (20000 + 1600) = 0.074 > 0.06, 0.03, 0.01; 30m 0.167; 2h 1600/13600 = 0.118.
      # → all four tiers for m; nothing for idle.
      - eval_time: 200m
        alertname: HeadroomErrorBudgetBurn
        exp_alerts:
LABELS_M_ALL
      # 300m, 60 min of HTTP 5xx and no engine error: 1h 20/(100+20) = 0.167 → page_fast;
      # 6h/1d 2400/(30000+2400) = 0.074; 30m 0.167; 2h 2400/14400 = 0.167 → all four.
      - eval_time: 300m
        alertname: HeadroomErrorBudgetBurn
        exp_alerts:
LABELS_M_ALL
      # 430m, 70 min after the errors stopped: 5m, 30m clean → pages resolved. 2h (50 bad min)
      # 1000/13000 = 0.077 > 0.03 and 1d 4800/47800 = 0.100 → ticket_fast; 6h 4800/40800 = 0.118
      # > 0.01 → ticket_slow.
      - eval_time: 430m
        alertname: HeadroomErrorBudgetBurn
        exp_alerts:
LABELS_M_TICKETS
      # 840m, 8 h after: every short window is clean.
      - eval_time: 840m
        alertname: HeadroomErrorBudgetBurn
        exp_alerts: []
      - eval_time: 840m
        alertname: HeadroomSLIAbsent
        exp_alerts: []
    promql_expr_test:
      # A quiet service records nothing (no NaN): 0 events / 0 events is filtered out.
      - expr: 'headroom:slo_errors_per_event:ratio_rate5m{slo_class=\"idle\"}'
        eval_time: 300m
        exp_samples: []
      - expr: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"m\"}'
        eval_time: 700m
        exp_samples:
          - labels: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"m\",slo_objective=\"error_rate\"}'
            value: 0
";
    let all: String = ["page_fast", "page_slow", "ticket_fast", "ticket_slow"]
        .iter()
        .map(|tier| burn_labels("m", "error_rate", tier))
        .collect();
    let tickets: String = ["ticket_fast", "ticket_slow"]
        .iter()
        .map(|tier| burn_labels("m", "error_rate", tier))
        .collect();
    let t = t
        .replace("LABELS_M_ALL\n", &all)
        .replace("LABELS_M_TICKETS\n", &tickets);
    std::fs::write(dir.path().join("test.yaml"), t).unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}

/// With `--latency-source gateway` the error objective reads the gateway's outcomes per class:
/// `upstream_error`, `timeout` and `rejected` burn the budget; `client_cancel` and
/// `invalid_request` are not events of the service and do not dilute it. (A new user found the
/// error rules still reading vLLM's counters by `model_name=<class>`, so a gateway class that is
/// not a served model had no error SLI at all.)
#[test]
fn gateway_error_ratio_reads_the_gateways_outcomes_per_class() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut gw = RulesOptions::default();
    gw.sli.latency_source = LatencySource::Gateway;
    let f = slo("objectives:\n  chat: {error_rate: 1%}\n  long: {error_rate: 1%}\n");
    let (file, _) = rule_file(&f, &gw).unwrap();
    write_rules(dir.path(), file);
    // chat: 100 stop/min, 50 client_cancel/min and 30 invalid_request/min throughout, 20
    // upstream_error/min in minutes 120–240. long: 10 stop/min and nothing else. If cancels
    // and invalid requests counted as events, chat's 1h ratio would be 20/200 = 0.10 < 0.144
    // and page_fast would not fire; as defined it is 20/120 = 0.167.
    let t = "rule_files: [rules.yaml]
evaluation_interval: 5m
tests:
  - interval: 1m
    input_series:
      - series: 'headroom_gateway_requests_total{class=\"chat\",tenant=\"other\",outcome=\"stop\"}'
        values: '0+100x480'
      - series: 'headroom_gateway_requests_total{class=\"chat\",tenant=\"other\",outcome=\"client_cancel\"}'
        values: '0+50x480'
      - series: 'headroom_gateway_requests_total{class=\"chat\",tenant=\"other\",outcome=\"invalid_request\"}'
        values: '0+30x480'
      - series: 'headroom_gateway_requests_total{class=\"chat\",tenant=\"other\",outcome=\"upstream_error\"}'
        values: '0+0x120 20+20x119 2400+0x240'
      - series: 'headroom_gateway_requests_total{class=\"long\",tenant=\"other\",outcome=\"stop\"}'
        values: '0+10x480'
    alert_rule_test:
      - eval_time: 200m
        alertname: HeadroomErrorBudgetBurn
        exp_alerts:
LABELS_CHAT_ALL
      - eval_time: 200m
        alertname: HeadroomSLIAbsent
        exp_alerts: []
    promql_expr_test:
      - expr: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"chat\"}'
        eval_time: 200m
        exp_samples:
          - labels: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"chat\",slo_objective=\"error_rate\"}'
            value: 0.16666666666666666
      - expr: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"long\"}'
        eval_time: 200m
        exp_samples:
          - labels: 'headroom:slo_errors_per_event:ratio_rate1h{slo_class=\"long\",slo_objective=\"error_rate\"}'
            value: 0
";
    let all: String = ["page_fast", "page_slow", "ticket_fast", "ticket_slow"]
        .iter()
        .map(|tier| burn_labels("chat", "error_rate", tier))
        .collect();
    std::fs::write(
        dir.path().join("test.yaml"),
        t.replace("LABELS_CHAT_ALL\n", &all),
    )
    .unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}

#[test]
fn queue_time_alert_fires_on_mean_above_the_objective_and_resolves() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = slo("objectives:\n  q: {queue_time: {p99: 300ms}}\n");
    let (file, _) = rule_file(&f, &RulesOptions::default()).unwrap();
    write_rules(dir.path(), file);
    // 60 requests/min. Mean queue time 1 ms until minute 60, 0.5 s in minutes 60–120, then 1 ms.
    // The 5m mean passes 0.3 s once more than 3 of its 5 minutes are slow (minute ~63); with
    // `for: 5m` the alert fires from ~68m. At 125m the 5m mean is 1 ms again.
    let t = "rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'vllm:request_queue_time_seconds_count{model_name=\"q\"}'
        values: '0+60x180'
      - series: 'vllm:request_queue_time_seconds_sum{model_name=\"q\"}'
        values: '0+0.06x60 33.6+30x59 1803.66+0.06x59'
    alert_rule_test:
      - eval_time: 58m
        alertname: HeadroomEngineQueueing
        exp_alerts: []
      - eval_time: 64m
        alertname: HeadroomEngineQueueing
        exp_alerts: []
      - eval_time: 80m
        alertname: HeadroomEngineQueueing
        exp_alerts:
          - exp_labels: {severity: ticket, slo_class: q}
      - eval_time: 130m
        alertname: HeadroomEngineQueueing
        exp_alerts: []
";
    std::fs::write(dir.path().join("test.yaml"), t).unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}

/// The SLO period's error ratio comes from the recorded 5 m event rates (not from a
/// `rate(…[30d])` over every raw series at each evaluation) and is still the true ratio of
/// events, not an average of 5 m ratios (Sloth #618), and records nothing for a quiet class.
#[test]
fn period_ratio_from_recorded_rates_is_the_true_event_ratio() {
    let Some(pt) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = slo("objectives:\n  m: {error_rate: 1%}\n  idle: {error_rate: 1%}\n");
    let mut opts = RulesOptions::default();
    opts.sli.selectors.http = None;
    let (file, _) = rule_file(&f, &opts).unwrap();
    write_rules(dir.path(), file);
    // Class m: a busy 10 h (100 stops/min, no error), then a quiet 2 h with 5 stops and 5
    // aborts per minute. Over the 12 h: 600 bad of 60 000 + 1 200 = 61 200 events, a ratio of
    // 0.0098 (by hand). An average of 5 m ratios would give about 2/12 × 0.5 = 0.083. The band
    // 0.0095–0.0101 allows for the 4 minutes at each end that a 5 m rate sees only in part.
    let t = "rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'vllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"}'
        values: '0+100x600 60005+5x119'
      - series: 'vllm:request_success_total{model_name=\"m\",finished_reason=\"abort\"}'
        values: '0+0x600 5+5x119'
      - series: 'vllm:request_success_total{model_name=\"idle\",finished_reason=\"stop\"}'
        values: '1000+0x720'
    promql_expr_test:
      - expr: '(headroom:slo_errors_per_event:ratio_rate30d{slo_class=\"m\"} > bool 0.0095) * (headroom:slo_errors_per_event:ratio_rate30d{slo_class=\"m\"} < bool 0.0101)'
        eval_time: 720m
        exp_samples:
          - labels: '{slo_class=\"m\",slo_objective=\"error_rate\"}'
            value: 1
      # The recorded rates themselves: 5 aborts/min and 10 events/min = 1/12 and 1/6 per second
      # (to 1e-9: promtool compares floats exactly).
      - expr: 'abs(headroom:slo_bad_events:rate5m{slo_class=\"m\"} - 1/12) < bool 1e-9'
        eval_time: 720m
        exp_samples:
          - labels: '{slo_class=\"m\",slo_objective=\"error_rate\"}'
            value: 1
      - expr: 'abs(headroom:slo_events:rate5m{slo_class=\"m\"} - 1/6) < bool 1e-9'
        eval_time: 720m
        exp_samples:
          - labels: '{slo_class=\"m\",slo_objective=\"error_rate\"}'
            value: 1
      # 1 - 0.0098 / 0.01: about 2 % of the budget left.
      - expr: '(headroom:slo_error_budget_remaining:ratio{slo_class=\"m\"} > bool 0) * (headroom:slo_error_budget_remaining:ratio{slo_class=\"m\"} < bool 0.06)'
        eval_time: 720m
        exp_samples:
          - labels: '{slo_class=\"m\",slo_objective=\"error_rate\"}'
            value: 1
      # A quiet class: no events over the period, so nothing is recorded (no NaN).
      - expr: 'headroom:slo_errors_per_event:ratio_rate30d{slo_class=\"idle\"}'
        eval_time: 720m
        exp_samples: []
";
    std::fs::write(dir.path().join("test.yaml"), t).unwrap();
    run(&pt, &["test", "rules", "test.yaml"], dir.path());
}
