//! Every duration that reaches PromQL or a rule file is bounded to 365 days (`1y`): past it the
//! SLO period leaves every burn-rate tier dead, and past about 292 years Prometheus cannot even
//! parse it (a signed 64-bit count of nanoseconds), so `300y` used to yield rules that
//! `promtool check rules` rejects. Each field is refused by name, with the limit stated; 365 d
//! itself still yields rules that promtool accepts.

use headroom_core::SloFile;
use headroom_slo::budget::{BudgetOptions, fetch_budget};
use headroom_slo::prom_api::PromClient;
use headroom_slo::rules::QueueAlert;
use headroom_slo::tiers::workbook_tiers;
use headroom_slo::{AutoscaleOptions, ImportOptions, RulesOptions};
use std::path::Path;
use std::time::Duration;

const LIMIT: &str = "is longer than 365 days (1y), the longest window Headroom accepts";

fn slo(window: &str) -> SloFile {
    SloFile::parse(
        &format!(
            "objectives:\n  chat: {{ttft: {{p95: 250ms}}, error_rate: 1%}}\nbudget: {{window: \"{window}\", target: 99%}}\n"
        ),
        Path::new("slo.yaml"),
    )
    .unwrap()
}

#[tokio::test]
async fn every_duration_past_a_year_is_refused_by_field() {
    let ok = slo("30d");
    for long in [
        "366d",
        "1y1s",
        "53w",
        "10y",
        "300y",
        "99999999999999999999d",
    ] {
        let field_err = |e: String, field: &str| {
            assert!(e.starts_with(&format!("{field}: `{long}` {LIMIT}")), "{e}");
        };
        // the SLO period, in rules and in the budget query
        let f = slo(long);
        field_err(
            headroom_slo::rules(&f, &RulesOptions::default())
                .unwrap_err()
                .to_string(),
            "budget.window",
        );
        // fails before any query: nothing listens on port 9
        let prom = PromClient::new("http://127.0.0.1:9", Duration::from_secs(1)).unwrap();
        field_err(
            fetch_budget(&prom, &f, &BudgetOptions::default())
                .await
                .unwrap_err()
                .to_string(),
            "budget.window",
        );
        // rule options
        let o = RulesOptions {
            absent_for: Some(long.into()),
            ..Default::default()
        };
        field_err(
            headroom_slo::rules(&ok, &o).unwrap_err().to_string(),
            "absent_for",
        );
        let o = RulesOptions {
            queue_alert: Some(QueueAlert {
                for_: long.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        field_err(
            headroom_slo::rules(&ok, &o).unwrap_err().to_string(),
            "queue_alert.for",
        );
        let mut tiers = workbook_tiers();
        tiers[3].long = long.into();
        let o = RulesOptions {
            tiers,
            ..Default::default()
        };
        field_err(
            headroom_slo::rules(&ok, &o).unwrap_err().to_string(),
            "tiers[3] (ticket_slow).long",
        );
        let mut tiers = workbook_tiers();
        tiers[0].for_ = Some(long.into());
        let o = RulesOptions {
            tiers,
            ..Default::default()
        };
        field_err(
            headroom_slo::rules(&ok, &o).unwrap_err().to_string(),
            "tiers[0] (page_fast).for",
        );
        // the autoscaler's smoothing window
        let o = AutoscaleOptions {
            smoothing: long.into(),
            ..Default::default()
        };
        field_err(
            headroom_slo::autoscale(&ok, &o).unwrap_err().to_string(),
            "smoothing",
        );
        // an OpenSLO rolling window
        let doc = format!(
            "apiVersion: openslo/v1\nkind: SLO\nspec:\n  indicator:\n    spec:\n      ratioMetric:\n        counter: true\n        good: {{metricSource: {{type: Prometheus, spec: {{query: 'sum(rate(vllm:time_to_first_token_seconds_bucket{{model_name=\"chat\",le=\"0.25\"}}[5m]))'}}}}}}\n        total: {{metricSource: {{type: Prometheus, spec: {{query: 'sum(rate(vllm:time_to_first_token_seconds_count{{model_name=\"chat\"}}[5m]))'}}}}}}\n  timeWindow: [{{duration: \"{long}\", isRolling: true}}]\n  objectives: [{{target: 0.95}}]\n"
        );
        field_err(
            headroom_slo::import_openslo(&doc, &ImportOptions::default())
                .unwrap_err()
                .to_string(),
            "openslo[0].spec.timeWindow[0].duration",
        );
    }
}

#[test]
fn a_one_year_period_still_gives_rules_with_the_year_in_them() {
    for w in ["1y", "365d", "52w1d"] {
        let r = headroom_slo::rules(&slo(w), &RulesOptions::default()).unwrap();
        assert!(
            r.text.contains(&format!(
                "record: headroom:slo_errors_per_event:ratio_rate{w}"
            )),
            "{w}"
        );
    }
}
