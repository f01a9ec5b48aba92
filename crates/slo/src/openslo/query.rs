//! The PromQL query shapes that count exactly what `slo.yaml` counts (a counter's rate, a
//! histogram's quantile over summed buckets), read into the one selector they use, and the
//! class and other matchers of that selector.

use crate::SloError;
use promql_parser::label::MatchOp;
use promql_parser::parser::{AggregateExpr, Expr, LabelModifier, VectorSelector, parse};

/// The one vector selector of a query: metric name and its matchers (`__name__` folded into
/// the name).
pub(super) struct Sel {
    pub(super) name: String,
    pub(super) matchers: Vec<(String, MatchOp, String)>,
}

impl Sel {
    /// Matchers other than on `label`, as comparable text (`job="vllm"`), sorted.
    pub(super) fn others(&self, skip: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = self
            .matchers
            .iter()
            .filter(|(n, _, _)| !skip.contains(&n.as_str()))
            .map(|(n, op, v)| format!("{n}{op}{}", crate::promql::quote(v)))
            .collect();
        v.sort();
        v
    }
}

fn parse_query(query: &str, field: &str) -> Result<Expr, SloError> {
    parse(query)
        .map_err(|e| SloError::invalid(field, format!("query is not valid PromQL ({e}): {query}")))
}

/// What a PromQL expression is, for messages.
fn kind_of(e: &Expr) -> String {
    match e {
        Expr::Aggregate(a) => format!("the aggregation {}(…)", a.op),
        Expr::Unary(_) => "a negation (-…)".into(),
        Expr::Binary(b) => format!("arithmetic or a comparison (… {} …)", b.op),
        Expr::Paren(p) => kind_of(&p.expr),
        Expr::Subquery(_) => "a subquery ([…:…])".into(),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => "a constant".into(),
        Expr::VectorSelector(_) => "a bare selector".into(),
        Expr::MatrixSelector(_) => "a range selector without a function".into(),
        Expr::Call(c) => format!("the function {}(…)", c.func.name),
        Expr::Extension(_) => "an extension".into(),
    }
}

/// The selector inside `rate(…[w])` / `increase(…[w])`, refusing `offset` and `@`, which move
/// the window away from "now" where Headroom's SLIs always look.
fn leaf(vs: &VectorSelector, field: &str) -> Result<Sel, SloError> {
    if vs.offset.is_some() || vs.at.is_some() {
        return Err(SloError::invalid(
            field,
            "`offset` or `@` moves the window into the past; Headroom's SLIs always cover the window ending now, so the query cannot be expressed exactly",
        ));
    }
    let mut name = vs.name.clone();
    let mut matchers = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == "__name__" && matches!(m.op, MatchOp::Equal) {
            name = Some(m.value.clone());
        } else {
            matchers.push((m.name.clone(), m.op.clone(), m.value.clone()));
        }
    }
    if !vs.matchers.or_matchers.is_empty() {
        return Err(SloError::invalid(
            field,
            "`or` inside a selector selects several series sets; expected one selector",
        ));
    }
    let name = name.ok_or_else(|| {
        SloError::invalid(
            field,
            "the selector names no metric; expected e.g. vllm:…_count{…}",
        )
    })?;
    Ok(Sel { name, matchers })
}

/// `rate(sel[w])` or `increase(sel[w])`.
fn rate_of(e: &Expr, field: &str) -> Result<Option<Sel>, SloError> {
    match e {
        Expr::Paren(p) => rate_of(&p.expr, field),
        Expr::Call(c) if matches!(c.func.name, "rate" | "increase") => {
            match c.args.args.first().map(|a| a.as_ref()) {
                Some(Expr::MatrixSelector(m)) if c.args.args.len() == 1 => {
                    leaf(&m.vs, field).map(Some)
                }
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// Grouping labels of `sum by (…)` must lie within `allowed` (`sum without (…)` never does):
/// grouping by anything else gives several ratios where `slo.yaml` has one per class.
fn check_grouping(a: &AggregateExpr, allowed: &[&str], field: &str) -> Result<(), SloError> {
    match &a.modifier {
        None => Ok(()),
        Some(LabelModifier::Include(l))
            if l.labels.iter().all(|x| allowed.contains(&x.as_str())) =>
        {
            Ok(())
        }
        Some(m) => Err(SloError::invalid(
            field,
            format!(
                "grouping {} gives one series per group; Headroom's SLI is one ratio per class, so only `sum` (or `sum by ({})`) can be expressed",
                match m {
                    LabelModifier::Include(l) => format!("by ({})", l.labels.join(", ")),
                    LabelModifier::Exclude(l) => format!("without ({})", l.labels.join(", ")),
                },
                allowed.join(", ")
            ),
        )),
    }
}

/// A counter query of a ratio metric: `sum(rate(<counter>{…}[w]))`, `sum(increase(…))`,
/// `rate(…)` / `increase(…)` alone, or the bare counter `<counter>{…}` (OpenSLO's
/// `counter: true` lets the tool take the rate). Anything else (arithmetic such as
/// `1 - sum(…)`, other functions, `offset`) changes what is counted and is refused.
pub(super) fn counter_query(query: &str, field: &str, class_label: &str) -> Result<Sel, SloError> {
    let expr = parse_query(query, field)?;
    let expected = "expected sum(rate(<counter>{…}[<window>])) (or increase, or the bare counter)";
    let mut e = &expr;
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    if let Expr::VectorSelector(vs) = e {
        return leaf(vs, field);
    }
    if let Some(sel) = rate_of(e, field)? {
        return Ok(sel);
    }
    if let Expr::Aggregate(a) = e
        && a.op.to_string() == "sum"
        && a.param.is_none()
    {
        check_grouping(a, &[class_label], field)?;
        if let Some(sel) = rate_of(&a.expr, field)? {
            return Ok(sel);
        }
        return Err(SloError::invalid(
            field,
            format!("sum over {}: {expected}; query: {query}", kind_of(&a.expr)),
        ));
    }
    Err(SloError::invalid(
        field,
        format!(
            "{} cannot be expressed exactly: {expected}; query: {query}",
            kind_of(e)
        ),
    ))
}

/// A threshold metric's query: `histogram_quantile(q, sum by (le) (rate(<histogram>_bucket{…}[w])))`
/// (increase also accepted; grouping by `le` and the class label only). Quantiles of each
/// series (no `sum`) or of other groupings are not the class's percentile and are refused.
pub(super) fn quantile_query(
    query: &str,
    field: &str,
    class_label: &str,
) -> Result<(f64, Sel), SloError> {
    let expr = parse_query(query, field)?;
    let expected =
        "expected histogram_quantile(<q>, sum by (le) (rate(<histogram>_bucket{…}[<window>])))";
    let mut e = &expr;
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    let Expr::Call(c) = e else {
        return Err(SloError::invalid(
            field,
            format!(
                "{} cannot be expressed: {expected}; query: {query}",
                kind_of(e)
            ),
        ));
    };
    if c.func.name != "histogram_quantile" || c.args.args.len() != 2 {
        return Err(SloError::invalid(
            field,
            format!(
                "{} cannot be expressed: {expected}; query: {query}",
                kind_of(e)
            ),
        ));
    }
    let mut q_expr = c.args.args[0].as_ref();
    while let Expr::Paren(p) = q_expr {
        q_expr = &p.expr;
    }
    let Expr::NumberLiteral(q) = q_expr else {
        return Err(SloError::invalid(
            field,
            format!("the quantile must be a number; {expected}; query: {query}"),
        ));
    };
    let mut inner = c.args.args[1].as_ref();
    while let Expr::Paren(p) = inner {
        inner = &p.expr;
    }
    let sel = match inner {
        Expr::Aggregate(a) if a.op.to_string() == "sum" && a.param.is_none() => {
            match &a.modifier {
                Some(LabelModifier::Include(l)) if l.labels.iter().any(|x| x == "le") => {}
                _ => {
                    return Err(SloError::invalid(
                        field,
                        format!(
                            "histogram_quantile needs the buckets summed by le; {expected}; query: {query}"
                        ),
                    ));
                }
            }
            check_grouping(a, &["le", class_label], field)?;
            rate_of(&a.expr, field)?
        }
        _ => None,
    };
    let sel = sel.ok_or_else(|| {
        SloError::invalid(
            field,
            format!(
                "{} inside histogram_quantile cannot be expressed (without `sum by (le)` it is a percentile per series, not the class's); {expected}; query: {query}",
                kind_of(inner)
            ),
        )
    })?;
    if !sel.name.ends_with("_bucket") {
        return Err(SloError::invalid(
            field,
            format!(
                "{} is not a histogram's _bucket series; {expected}",
                sel.name
            ),
        ));
    }
    Ok((q.val, sel))
}

/// The `le` of a selector: `le="0.25"` or Pyrra's `le=~"1(\\.0)?"`.
pub(super) fn le_of(sel: &Sel) -> Option<f64> {
    sel.matchers
        .iter()
        .find(|(n, _, _)| n == "le")
        .and_then(|(_, op, v)| {
            let v = match op {
                MatchOp::Equal => v.as_str(),
                MatchOp::Re(_) => v.strip_suffix("(\\.0)?").unwrap_or(v),
                _ => return None,
            };
            v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)
        })
}

pub(super) fn regex_values(sel: &Sel, label: &str) -> Option<Vec<String>> {
    sel.matchers
        .iter()
        .find(|(n, _, _)| n == label)
        .and_then(|(_, op, v)| match op {
            MatchOp::Equal => Some(vec![v.clone()]),
            MatchOp::Re(_) => Some(v.split('|').map(String::from).collect()),
            _ => None,
        })
}

/// The class a selector reads: the value of an equality matcher on the class label (`"*"`
/// without one). A regex or negative matcher on the class label selects a set of classes,
/// which `slo.yaml` cannot hold (it names one class, or `"*"` for every class).
pub(super) fn class_of(sel: &Sel, label: &str, field: &str) -> Result<String, SloError> {
    let on_label: Vec<&(String, MatchOp, String)> =
        sel.matchers.iter().filter(|(n, _, _)| n == label).collect();
    match on_label.as_slice() {
        [] => Ok("*".to_string()),
        [(_, MatchOp::Equal, v)] => Ok(v.clone()),
        [(n, op, v)] => Err(SloError::invalid(
            field,
            format!(
                "`{n}{op}{}` selects a set of classes; slo.yaml has objectives per class ({n}=\"<class>\") or for every class (no {n} matcher), so it cannot be expressed exactly",
                crate::promql::quote(v)
            ),
        )),
        _ => Err(SloError::invalid(
            field,
            format!(
                "several matchers on the class label {label}; expected at most one `{label}=\"<class>\"`"
            ),
        )),
    }
}

/// Warns about matchers `slo.yaml` does not carry (e.g. `job="vllm"`): they belong in the
/// `--match` flag of `slo rules` and `slo budget`.
pub(super) fn note_other_matchers(
    sel: &Sel,
    skip: &[&str],
    field: &str,
    warnings: &mut Vec<String>,
) {
    let others = sel.others(skip);
    if !others.is_empty() {
        warnings.push(format!(
            "{field}: the matchers {} are not part of slo.yaml; pass them to `headroom slo rules` and `slo budget` as {}",
            others.join(", "),
            others
                .iter()
                .map(|m| format!("--match '{m}'"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
}
#[cfg(test)]
mod tests {
    use crate::openslo::test_support::{RATIO, first, refused, second, third};
    use crate::openslo::{ImportOptions, import_openslo};
    use headroom_core::LatencySignal;
    use headroom_core::slo::Objective;

    const GOOD_Q: &str =
        r#"sum(rate(vllm:time_to_first_token_seconds_bucket{model_name="chat",le="0.25"}[5m]))"#;
    const TOTAL_Q: &str =
        r#"sum(rate(vllm:time_to_first_token_seconds_count{model_name="chat"}[5m]))"#;
    const ERR_BAD_Q: &str = r#"sum(rate(vllm:request_success_total{model_name="chat",finished_reason=~"abort|error"}[5m]))"#;
    const ERR_TOTAL_Q: &str = r#"sum(rate(vllm:request_success_total{model_name="chat"}[5m]))"#;
    const ITL_Q: &str = "histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{model_name=\"chat\"}[5m])))";

    /// Each query shape that does not count what slo.yaml counts is refused at the query's
    /// path with the reason; the accepted shapes give the same objective as the canonical one.
    #[test]
    fn query_shapes_that_cannot_be_expressed_exactly_are_refused() {
        let good = "openslo[0].spec.indicator.spec.ratioMetric.good.metricSource.spec.query: ";
        let total = "openslo[0].spec.indicator.spec.ratioMetric.total.metricSource.spec.query: ";
        let cases: Vec<(String, &str, &str)> = vec![
            // good and total select different classes, or different series
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("\"chat\"", "\"other\"")), total, "total selects {model_name=\"other\"} but good selects {model_name=\"chat\"}"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("le=", "job=\"a\",le=")), total, "but good selects {job=\"a\",model_name=\"chat\"}"),
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("\"chat\"}", "\"chat\",le=\"0.25\"}")), total, "total selects {le=\"0.25\",model_name=\"chat\"}"),
            // arithmetic, other functions and aggregations change what is counted
            (first().replace(GOOD_Q, &format!("1 - {GOOD_Q}")), good, "arithmetic or a comparison (… - …) cannot be expressed exactly"),
            (first().replace(GOOD_Q, &format!("{GOOD_Q} * 2")), good, "arithmetic or a comparison (… * …)"),
            (first().replace(GOOD_Q, &format!("-{GOOD_Q}")), good, "a negation"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(rate(", "max(rate(")), good, "the aggregation max(…) cannot be expressed"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("rate(", "irate(")), good, "sum over the function irate(…)"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(", "sum by (instance) (")), good, "grouping by (instance) gives one series per group"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("sum(", "sum without (instance) (")), good, "grouping without (instance)"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("[5m]", "[5m:1m]")), good, "sum over the function rate(…)"),
            // windows in the past
            (first().replace(GOOD_Q, &GOOD_Q.replace("[5m]", "[5m] offset 1w")), good, "`offset` or `@` moves the window into the past"),
            (first().replace(TOTAL_Q, &TOTAL_Q.replace("[5m]", "[5m] @ 1700000000")), total, "`offset` or `@`"),
            // a set of classes
            (first().replace(GOOD_Q, &GOOD_Q.replace("model_name=\"chat\"", "model_name=~\"chat.*\"")).replace(TOTAL_Q, &TOTAL_Q.replace("model_name=\"chat\"", "model_name=~\"chat.*\"")), good, "`model_name=~\"chat.*\"` selects a set of classes"),
            (first().replace(GOOD_Q, &GOOD_Q.replace("model_name=\"chat\"", "model_name!=\"chat\"")).replace(TOTAL_Q, &TOTAL_Q.replace("model_name=\"chat\"", "model_name!=\"chat\"")), good, "`model_name!=\"chat\"` selects a set of classes"),
            // error ratio: a filtered total, bad reasons that are not abort|error
            (second().replace(ERR_TOTAL_Q, &ERR_TOTAL_Q.replace("\"chat\"}", "\"chat\",finished_reason=\"stop\"}")), "ratioMetric.total.metricSource.spec.query: total filters finished_reason", "a filtered total cannot be expressed"),
            (second().replace(ERR_BAD_Q, &ERR_BAD_Q.replace("abort|error", "abort|error|stop")), "ratioMetric.bad.metricSource.spec.query: ", "finished_reason abort|error|stop cannot be expressed"),
            (second().replace(ERR_TOTAL_Q, &ERR_TOTAL_Q.replace("\"chat\"", "\"other\"")), "ratioMetric.total.metricSource.spec.query: ", "total selects {model_name=\"other\"} but bad selects {model_name=\"chat\"}"),
            // threshold metric: per-series quantiles, other groupings, offsets, regex classes
            (third().replace(ITL_Q, "histogram_quantile(0.99, rate(vllm:inter_token_latency_seconds_bucket{model_name=\"chat\"}[5m]))"), "thresholdMetric.metricSource.spec.query: ", "a percentile per series, not the class's"),
            (third().replace(ITL_Q, &ITL_Q.replace("by (le)", "by (le, instance)")), "thresholdMetric.metricSource.spec.query: ", "grouping by (le, instance)"),
            (third().replace(ITL_Q, &ITL_Q.replace("sum by (le)", "sum")), "thresholdMetric.metricSource.spec.query: ", "needs the buckets summed by le"),
            (third().replace(ITL_Q, &ITL_Q.replace("[5m]", "[5m] offset 1d")), "thresholdMetric.metricSource.spec.query: ", "`offset` or `@`"),
            (third().replace(ITL_Q, &ITL_Q.replace("model_name=\"chat\"", "model_name=~\"chat|rag\"")), "thresholdMetric.metricSource.spec.query: ", "selects a set of classes"),
            (third().replace(ITL_Q, &format!("2 * {ITL_Q}")), "thresholdMetric.metricSource.spec.query: ", "arithmetic or a comparison (… * …) cannot be expressed"),
            (third().replace("0.99, sum", "0.953335, sum"), "thresholdMetric.metricSource.spec.query: ", "quantile 0.953335 has more than three decimals of a percent"),
            (third().replace("op: lte", "op: gt"), "objectives[0].op: ", "`gt`; only lt or lte"),
            (third().replace("op: lte, ", ""), "objectives[0].op: ", "missing; only lt or lte"),
            // targets outside slo.yaml's percentiles: named at the target, not in generated YAML
            (first().replace("target: 0.95", "target: 0.005"), "openslo[0].spec.objectives[0].target: ", "target 0.005 makes p0.5; slo.yaml percentiles lie from p1 to p99.99"),
            (first().replace("target: 0.95", "targetPercent: 99.995"), "openslo[0].spec.objectives[0].targetPercent: ", "makes p99.995"),
            (first().replace("target: 0.95", "target: 0.9512345"), "openslo[0].spec.objectives[0].target: ", "more than three decimals"),
        ];
        for (text, field, reason) in &cases {
            assert!(
                !RATIO.contains(text.as_str()),
                "the mutation did not apply: {reason}"
            );
            let e = refused(text);
            assert!(
                e.contains(field) && e.contains(reason),
                "{field} … {reason}\n  not in: {e}"
            );
            for internal in ["Some(", "Option<", "objectives:\n"] {
                assert!(!e.contains(internal), "{internal} in: {e}");
            }
        }
        // Accepted shapes: rate or increase, the bare counter, sum by the class label,
        // parentheses, other matchers (with a warning naming the --match flag).
        let want = Objective::Latency {
            signal: LatencySignal::Ttft,
            percentile: 95.0,
            threshold_s: 0.25,
        };
        for (g, t) in [
            (GOOD_Q.to_string(), TOTAL_Q.to_string()),
            (
                GOOD_Q.replace("rate(", "increase("),
                TOTAL_Q.replace("rate(", "increase("),
            ),
            (
                r#"vllm:time_to_first_token_seconds_bucket{model_name="chat",le="0.25"}"#
                    .to_string(),
                r#"(vllm:time_to_first_token_seconds_count{model_name="chat"})"#.to_string(),
            ),
            (
                GOOD_Q.replace("sum(", "sum by (model_name) ("),
                format!("({TOTAL_Q})"),
            ),
            (
                GOOD_Q.replace("le=", "job=\"vllm\",le="),
                TOTAL_Q.replace("}", ",job=\"vllm\"}"),
            ),
        ] {
            let text = first().replace(GOOD_Q, &g).replace(TOTAL_Q, &t);
            assert_eq!(text == first(), g == GOOD_Q, "{g}");
            let (f, w) = import_openslo(&text, &ImportOptions::default()).unwrap();
            assert_eq!(f.spec_for("chat").objectives, vec![want.clone()], "{g}");
            if g.contains("job=") {
                assert_eq!(w.len(), 1, "{w:?}");
                assert!(w[0].contains("--match 'job=\"vllm\"'"), "{w:?}");
            } else {
                assert!(w.is_empty(), "{w:?}");
            }
        }
    }
}
