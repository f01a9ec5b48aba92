//! Do the generated selectors bind to anything? `headroom slo rules|dashboard|autoscale
//! --check-against PROMETHEUS_URL` queries `count(<selector>)` for every selector the output
//! queries; one that matches no series is an error naming what the Prometheus does hold (the
//! values of the class label on vLLM's series, the `job` and `namespace` labels, the gateway's
//! classes), so a class written as `{model_name="chat"}` for a model served as `llama-3-8b`
//! is found before the rules are loaded, not after a month of alerts that never fire.

use crate::SloError;
use crate::prom_api::PromClient;
use std::collections::BTreeSet;

/// Label values present in a Prometheus, for the message of a selector that matches nothing.
async fn values(prom: &PromClient, label: &str, of: &str) -> Result<Vec<String>, SloError> {
    let q = format!("count by ({label}) ({of})");
    let got = prom.query(&q, None).await?;
    let set: BTreeSet<String> = got
        .into_iter()
        .filter_map(|s| s.metric.get(label).cloned())
        .filter(|v| !v.is_empty())
        .collect();
    Ok(set.into_iter().collect())
}

/// Queries `count(s)` for every selector of `selectors` (deduplicated); `Ok(n)` with the number
/// checked when every one matches at least one series.
///
/// # Errors
/// [`SloError::Invalid`] (field `check-against`) listing the selectors that match nothing and
/// what exists: the values of `class_label` on vLLM's series, `job` and `namespace`, and the
/// gateway's `class` values; [`SloError::Prometheus`] when the server cannot be queried.
pub async fn check_selectors(
    prom: &PromClient,
    selectors: &[String],
    class_label: &str,
) -> Result<usize, SloError> {
    let unique: BTreeSet<&String> = selectors.iter().collect();
    let mut missing = Vec::new();
    for s in &unique {
        crate::promql::validate(&format!("count({s})"))?;
        if prom.query(&format!("count({s})"), None).await?.is_empty() {
            missing.push(s.as_str());
        }
    }
    if missing.is_empty() {
        return Ok(unique.len());
    }
    let vllm = r#"{__name__=~"vllm:.+"}"#;
    let show = |name: &str, v: Vec<String>| {
        if v.is_empty() {
            format!("{name}: none")
        } else {
            format!("{name}: {}", v.join(", "))
        }
    };
    let there = [
        show(
            &format!("{class_label} (vLLM series; served models)"),
            values(prom, class_label, vllm).await?,
        ),
        show("job", values(prom, "job", vllm).await?),
        show("namespace", values(prom, "namespace", vllm).await?),
        show(
            "gateway classes",
            values(prom, "class", crate::catalogue::GATEWAY_REQUESTS).await?,
        ),
    ];
    Err(SloError::invalid(
        "check-against",
        format!(
            "{} of {} selectors match no series in Prometheus at {}: {}. It holds {}. A class of slo.yaml is matched as {class_label}=\"<class>\" on vLLM's series: name classes after served models, pass --class-label for a label your scrape config adds, or measure classes at the Headroom gateway (--latency-source gateway)",
            missing.len(),
            unique.len(),
            prom.base(),
            missing.join(", "),
            there.join("; ")
        ),
    ))
}

/// The classes of `classes` that are not among `served` (the ids of `GET /v1/models`), for
/// `--target`: with vLLM's series a class must be a served model name.
pub fn unserved<'a>(classes: &'a [String], served: &[String]) -> Vec<&'a str> {
    classes
        .iter()
        .filter(|c| c.as_str() != "*" && !served.contains(c))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unserved_classes_are_named_and_the_default_is_not() {
        let classes = vec!["chat".to_string(), "rag".into(), "*".into()];
        let served = vec!["rag".to_string(), "llama".into()];
        assert_eq!(unserved(&classes, &served), ["chat"]);
    }
}
