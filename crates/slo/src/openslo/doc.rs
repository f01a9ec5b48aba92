//! The OpenSLO v1 document as read (only the fields the import looks at), and the YAML parser's
//! complaints in the user's terms.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Doc {
    #[serde(default)]
    pub(super) api_version: Option<String>,
    #[serde(default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) spec: Option<SloSpecDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SloSpecDoc {
    #[serde(default)]
    pub(super) indicator: Option<Indicator>,
    #[serde(default)]
    pub(super) indicator_ref: Option<String>,
    #[serde(default)]
    pub(super) time_window: Vec<TimeWindow>,
    #[serde(default)]
    pub(super) budgeting_method: Option<String>,
    #[serde(default)]
    pub(super) objectives: Vec<ObjectiveDoc>,
}

#[derive(Deserialize)]
pub(super) struct Indicator {
    pub(super) spec: IndicatorSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct IndicatorSpec {
    #[serde(default)]
    pub(super) ratio_metric: Option<RatioMetric>,
    #[serde(default)]
    pub(super) threshold_metric: Option<MetricHolder>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RatioMetric {
    #[serde(default)]
    pub(super) counter: Option<bool>,
    #[serde(default)]
    pub(super) good: Option<MetricHolder>,
    #[serde(default)]
    pub(super) bad: Option<MetricHolder>,
    #[serde(default)]
    pub(super) total: Option<MetricHolder>,
    #[serde(default)]
    pub(super) raw: Option<MetricHolder>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MetricHolder {
    pub(super) metric_source: MetricSource,
}

#[derive(Deserialize)]
pub(super) struct MetricSource {
    #[serde(default, rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) spec: QuerySpec,
}

#[derive(Deserialize)]
pub(super) struct QuerySpec {
    pub(super) query: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TimeWindow {
    pub(super) duration: String,
    #[serde(default)]
    pub(super) is_rolling: Option<bool>,
    #[serde(default)]
    pub(super) calendar: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ObjectiveDoc {
    #[serde(default)]
    pub(super) op: Option<String>,
    #[serde(default)]
    pub(super) value: Option<f64>,
    #[serde(default)]
    pub(super) target: Option<f64>,
    #[serde(default)]
    pub(super) target_percent: Option<f64>,
    #[serde(default)]
    pub(super) indicator: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) indicator_ref: Option<String>,
}

/// The YAML parser's complaint in the user's terms: where (line and column) and what, without
/// the parser's snippet or its advice to Rust programmers (`use Option<String>`).
pub(super) fn yaml_problem(e: &serde_saphyr::Error) -> String {
    let plain = e.without_snippet().to_string();
    let loc = e
        .location()
        .map(|l| (l.line(), l.column()))
        .filter(|&(l, _)| l > 0);
    let mut msg = plain.trim_start_matches("error: ").to_owned();
    if let Some((l, c)) = loc {
        for cut in [
            format!(" at line {l}, column {c}"),
            format!("line {l} column {c}: "),
        ] {
            msg = msg.replace(&cut, "");
        }
    }
    if let Some(i) = msg.find("; use ") {
        msg.truncate(i);
    }
    let internal = [
        "deserialize",
        "Option<",
        "struct ",
        "Vec<",
        "String",
        "invalid type",
    ];
    if internal.iter().any(|w| msg.contains(w)) {
        msg = "expected an OpenSLO document here: a mapping with apiVersion, kind and spec, each field of the type the OpenSLO v1 spec gives".to_owned();
    }
    match loc {
        Some((l, c)) => format!("line {l}, column {c}: {msg}"),
        None => msg,
    }
}
#[cfg(test)]
mod tests {
    use crate::openslo::test_support::{first, refused};

    #[test]
    fn yaml_errors_read_without_parser_internals() {
        let e = refused(": : :\n    - [\n");
        assert!(e.starts_with("openslo: not an OpenSLO YAML stream: line 1, column 1: expected an OpenSLO document"), "{e}");
        let e = refused(&first().replace("target: 0.95", "target: \"abc\""));
        assert!(e.contains("line "), "{e}");
        for internal in ["Option<", "use ", "-->", "deserialize"] {
            assert!(!e.contains(internal), "{internal} in: {e}");
        }
    }
}
