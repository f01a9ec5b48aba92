//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing fetched) with
//! the summary, per-phase charts (TTFT and ITL percentiles versus load with the SLO line,
//! throughput versus load, error rate versus load) and the Markdown report's tables.

use crate::chart::{Series, line_chart};
use headroom_core::run::{PhaseResult, RunResult};
use headroom_core::slo::fmt_num;

/// Renders the HTML page.
pub fn render(run: &RunResult) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom sweep report</title>\
<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f3f3f3}pre{background:#f7f7f7;padding:1em;overflow:auto}.charts{display:flex;flex-wrap:wrap;gap:8px}\
.FAIL{color:#b00}.PASS{color:#070}.INCONCLUSIVE{color:#a60}</style></head><body>\
<h1>Headroom sweep report</h1>",
    );
    o.push_str("<h2>Summary</h2><pre>");
    o.push_str(&esc(&crate::terminal::render(run)));
    o.push_str("</pre>");
    for p in &run.phases {
        phase(&mut o, p);
    }
    o.push_str("<h2>Full report</h2><pre>");
    o.push_str(&esc(&crate::markdown::render(run)));
    o.push_str("</pre></body></html>\n");
    o
}

fn threshold_for(p: &PhaseResult, prefix: &str) -> Option<f64> {
    p.levels
        .iter()
        .flat_map(|l| l.objectives.iter())
        .find(|o| o.id.starts_with(prefix))
        .map(|o| o.threshold)
}

fn phase(o: &mut String, p: &PhaseResult) {
    o.push_str(&format!("<h2>Phase {}</h2>", esc(&p.name)));
    let x = p.mode.unit();
    let lat = |sig: &str| -> Vec<Series<'static>> {
        [("p50", 0usize), ("p95", 1), ("p99", 2)]
            .into_iter()
            .map(|(label, i)| Series {
                label,
                points: p
                    .levels
                    .iter()
                    .filter_map(|l| {
                        let s = l.latency.get(sig).filter(|s| s.count > 0)?;
                        let v = [s.p50_s, s.p95_s, s.p99_s][i];
                        Some((l.load, v * 1e3))
                    })
                    .collect(),
            })
            .collect()
    };
    o.push_str("<div class=\"charts\">");
    for (sig, title) in [("ttft", "TTFT"), ("itl", "ITL")] {
        o.push_str(&line_chart(
            &format!("{title} vs load"),
            x,
            "ms",
            &lat(sig),
            threshold_for(p, &format!("{sig}_p")).map(|t| t * 1e3),
            (520, 320),
        ));
    }
    let tput = [Series {
        label: "output tok/s",
        points: p
            .levels
            .iter()
            .map(|l| (l.load, l.output_tokens_per_s))
            .collect(),
    }];
    o.push_str(&line_chart(
        "Throughput vs load",
        x,
        "tokens/s",
        &tput,
        None,
        (520, 320),
    ));
    let err = [Series {
        label: "errors + aborts %",
        points: p
            .levels
            .iter()
            .map(|l| {
                // The error objective's ratio: errors + aborts over finished requests.
                let (bad, finished) = l.error_counts();
                (
                    l.load,
                    if finished > 0 {
                        100.0 * bad as f64 / finished as f64
                    } else {
                        0.0
                    },
                )
            })
            .collect(),
    }];
    o.push_str(&line_chart(
        "Error rate vs load",
        x,
        "%",
        &err,
        threshold_for(p, "error_rate").map(|t| t * 100.0),
        (520, 320),
    ));
    // `#` is the level's index in the run: `headroom diagnose --from RUN_DIR --level N`.
    o.push_str("</div><table><tr><th>#</th><th>load</th><th>verdict (objectives behind it)</th><th>req/s</th><th>out tok/s</th><th>TTFT p95</th><th>ITL p95</th></tr>");
    for l in &p.levels {
        let q = |s: &str| {
            l.latency
                .get(s)
                .filter(|x| x.count > 0)
                .map(|x| headroom_core::slo::fmt_duration_s(x.p95_s))
                .unwrap_or_else(|| "–".into())
        };
        o.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            crate::markdown::level_index(l).map_or_else(|| "–".to_string(), |i| i.to_string()),
            fmt_num(l.load),
            l.verdict.as_str(),
            esc(&l.verdict_line()),
            l.request_rate_per_s,
            fmt_num(l.output_tokens_per_s),
            q("ttft"),
            q("itl"),
        ));
    }
    o.push_str("</table>");
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn self_contained_with_charts_and_escaped_names() {
        let s = super::render(&crate::testdata::run());
        assert!(s.contains("<svg"));
        // TTFT, throughput and error-rate charts; the test data has no ITL, so no ITL chart.
        assert_eq!(s.matches("<svg").count(), 3);
        assert!(!s.contains("<script"));
        assert!(!s.contains("src=\"http") && !s.contains("href=\"http"));
        assert!(s.contains("chat &lt;&amp;&gt;"));
        assert!(!s.contains("chat <&>"));
    }

    /// The level table names the objectives behind each verdict (as the terminal does) and the
    /// index `diagnose --level` takes.
    #[test]
    fn level_rows_carry_the_verdict_line_and_index() {
        let mut run = crate::testdata::run();
        let l = &mut run.phases[0].levels[0];
        l.histograms = "histograms/L007.json".into();
        l.verdict = headroom_core::Verdict::Fail;
        for o in &mut l.objectives {
            o.verdict = headroom_core::Verdict::Fail;
        }
        let ids: Vec<String> = l.objectives.iter().map(|o| o.id.clone()).collect();
        assert!(!ids.is_empty());
        let s = super::render(&run);
        let row = format!(
            "<tr><td>7</td><td>{}</td><td class=\"FAIL\">FAIL ({})</td>",
            headroom_core::slo::fmt_num(run.phases[0].levels[0].load),
            ids.join(", ")
        );
        assert!(s.contains(&row), "{row} not in {s}");
    }
}
