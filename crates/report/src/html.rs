//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing fetched) with
//! the summary, per-phase charts (TTFT and ITL percentiles versus load with the SLO line,
//! throughput versus load, error rate versus load), the level tables and the Markdown report
//! rendered as HTML.

use crate::chart::{Series, line_chart};
use headroom_core::run::{PhaseResult, RunResult};
use headroom_core::slo::fmt_num;

/// The `report.html` exporter ([`render`]).
pub static EXPORTER: crate::export::Text = crate::export::Text {
    name: "html",
    file_name: headroom_core::run_dir::REPORT_HTML,
    render,
};

/// Renders the HTML page.
pub fn render(run: &RunResult) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom sweep report</title>\
<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f3f3f3}pre{background:#f7f7f7;padding:1em;overflow:auto}.charts{display:flex;flex-wrap:wrap;gap:8px}\
.full td,.full th{text-align:left}.note{font-size:90%;color:#444}.FAIL{color:#b00}.PASS{color:#070}.INCONCLUSIVE{color:#a60}</style></head><body>\
<h1>Headroom sweep report</h1>",
    );
    o.push_str("<h2>Summary</h2><pre>");
    o.push_str(&esc(&crate::terminal::render(run)));
    o.push_str("</pre>");
    for p in &run.phases {
        phase(&mut o, p);
    }
    o.push_str("<h2>Full report</h2><div class=\"full\">");
    o.push_str(&markdown_to_html(&crate::markdown::render(run)));
    o.push_str("</div></body></html>\n");
    o
}

/// `report.md` as HTML (CommonMark with GitHub tables, by `pulldown-cmark`), kept
/// self-contained and inert: raw HTML in the Markdown is shown as text (escaped), links and
/// images become their text (nothing is referenced outside the page), and the headings are
/// pushed down two levels to sit under this page's "Full report" heading.
fn markdown_to_html(md: &str) -> String {
    use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
    let demote = |l: HeadingLevel| match l {
        HeadingLevel::H1 => HeadingLevel::H3,
        HeadingLevel::H2 => HeadingLevel::H4,
        HeadingLevel::H3 => HeadingLevel::H5,
        _ => HeadingLevel::H6,
    };
    let events = Parser::new_ext(md, Options::ENABLE_TABLES).filter_map(|e| match e {
        Event::Html(t) | Event::InlineHtml(t) => Some(Event::Text(t)),
        Event::Start(Tag::Link { .. } | Tag::Image { .. }) => None,
        Event::End(TagEnd::Link | TagEnd::Image) => None,
        Event::Start(Tag::Heading {
            level,
            id,
            classes,
            attrs,
        }) => Some(Event::Start(Tag::Heading {
            level: demote(level),
            id,
            classes,
            attrs,
        })),
        Event::End(TagEnd::Heading(level)) => Some(Event::End(TagEnd::Heading(demote(level)))),
        e => Some(e),
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events);
    out
}

/// The SLO line of a chart: the threshold of the phase's objectives on `signal` (`ttft`, `itl`)
/// or, for `error_rate`, the error objective — class prefixes of a mix phase ignored — when they
/// all share one threshold; `None` when there is none or the classes differ (one line would be
/// wrong for some of them).
fn threshold_for(p: &PhaseResult, signal: &str) -> Option<f64> {
    let mut ts = p
        .levels
        .iter()
        .flat_map(|l| l.objectives.iter())
        .filter(|o| match o.id.signal() {
            Some(s) => s.name() == signal,
            None => o.id.kind.to_string() == signal,
        })
        .map(|o| o.threshold);
    let first = ts.next()?;
    ts.all(|t| t == first).then_some(first)
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
            threshold_for(p, sig).map(|t| t * 1e3),
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
    // Latency columns at the percentiles the objectives judge (p95 when none judges a signal).
    let cols: Vec<(&str, f64)> = ["ttft", "itl"]
        .into_iter()
        .flat_map(|sig| {
            crate::levels::objective_percentiles(p, sig)
                .into_iter()
                .map(move |pct| (sig, pct))
        })
        .collect();
    o.push_str("</div><table><tr><th>#</th><th>load</th><th>verdict (objectives behind it)</th><th>requests</th><th>started/s</th><th>req/s</th><th>out tok/s</th><th>rates from</th>");
    for (sig, pct) in &cols {
        o.push_str(&format!(
            "<th>{}</th>",
            esc(&crate::levels::percentile_header(sig, *pct))
        ));
    }
    o.push_str("</tr>");
    for l in &p.levels {
        let requests = l.outcomes.values().sum::<u64>();
        o.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td>",
            crate::markdown::level_index(l).map_or_else(|| "–".to_string(), |i| i.to_string()),
            fmt_num(l.load),
            l.verdict.as_str(),
            esc(&l.verdict_line()),
            requests,
            requests as f64 / l.window_s.max(1e-9),
            l.request_rate_per_s,
            fmt_num(l.output_tokens_per_s),
            esc(&crate::markdown::rates_from(l)),
        ));
        for (sig, pct) in &cols {
            o.push_str(&format!(
                "<td>{}</td>",
                crate::levels::latency_at(l, sig, *pct)
                    .map(headroom_core::slo::fmt_duration_s)
                    .unwrap_or_else(|| "–".into())
            ));
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
    o.push_str(&format!(
        "<p class=\"note\">{}</p>",
        markdown_to_html(crate::levels::RATES_NOTE)
            .trim()
            .trim_start_matches("<p>")
            .trim_end_matches("</p>")
    ));
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
        let ids: Vec<String> = l.objectives.iter().map(|o| o.id.to_string()).collect();
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
