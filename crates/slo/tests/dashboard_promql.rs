//! Every query of the generated Grafana dashboard is valid PromQL, checked with `promql-parser`
//! independently of the generator (which checks too): Grafana variables are substituted, the
//! expression is parsed, and each one reads at least one metric Headroom knows from the vLLM
//! 0.32 fixture, dcgm-exporter, or its own recording rules.

use headroom_core::SloFile;
use headroom_slo::dashboard::{DashboardOptions, dashboard, queries, substitute_variables};
use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};
use std::path::Path;

struct Names(Vec<String>);

impl ExprVisitor for Names {
    type Error = ();
    fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
        match e {
            Expr::VectorSelector(v) => self.0.extend(v.name.clone()),
            Expr::MatrixSelector(m) => self.0.extend(m.vs.name.clone()),
            _ => {}
        }
        Ok(true)
    }
}

#[test]
fn every_dashboard_query_parses_and_reads_known_metrics() {
    let f = SloFile::parse(headroom_core::slo::DEFAULT_SLO_YAML, Path::new("slo.yaml")).unwrap();
    let r = dashboard(&f, &DashboardOptions::default()).unwrap();
    let d: serde_json::Value = serde_json::from_str(&r.text).unwrap();
    let qs = queries(&d);
    assert!(qs.len() >= 30, "{} queries", qs.len());
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/vllm/v0.32-cpu-after-burst-c16.prom"
    ))
    .unwrap();
    for q in qs {
        let expr = parse(&substitute_variables(&q)).unwrap_or_else(|e| panic!("{e}: {q}"));
        let mut names = Names(Vec::new());
        walk_expr(&mut names, &expr).unwrap();
        assert!(!names.0.is_empty(), "no metric in {q}");
        for n in names.0 {
            let known = fixture.contains(&format!("\n{n}{{"))
                || fixture.contains(&format!("\n{n} "))
                || n.starts_with("DCGM_FI_")
                || n.starts_with("headroom:slo_");
            assert!(known, "{n} (in {q}) is not in the vLLM 0.32 fixture");
        }
    }
}
