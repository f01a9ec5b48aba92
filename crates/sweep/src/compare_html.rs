//! `headroom compare --format html`: one self-contained page (no script, font or stylesheet
//! fetched) with the decision, what changed, the capacity table and, for each phase both runs
//! swept and each of its latency objectives, one chart of the percentile against load for the
//! baseline and the candidate, the SLO threshold as a dashed line, and whiskers on the
//! candidate's points at the levels both runs measured (the candidate's order-statistics
//! interval of the comparison).
//!
//! The SVG is written by hand: a few lines, points and labels need no plotting library. Every
//! text that comes from a file (class names, manifest values, paths, reasons) is escaped.

use super::compare::{
    Change, Comparison, LevelComparison, fmt_band, fmt_s, fmt_signed_s, headline,
    latency_objectives,
};
use crate::run_dir::Run;
use headroom_core::objective::ObjectiveId;
use headroom_core::run::{LevelResult, PhaseResult};
use headroom_core::slo::fmt_num;
use std::fmt::Write as _;

/// Escapes `&`, `<`, `>`, `"` and `'` for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;max-width:72em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}\
td,th{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.material{font-weight:bold}\
.promote{color:#176317}.regression{color:#a31515}.inconclusive,.held{color:#8a5a00}\
figure{display:inline-block;margin:0 1em 1em 0}figcaption{font-size:90%;color:#555}\
svg text{font-size:11px;font-family:system-ui,sans-serif}";

/// Colours of the baseline and the candidate.
const BASE_COLOUR: &str = "#1f5fa8";
const CAND_COLOUR: &str = "#d0631a";

/// The HTML page of a comparison; `a` and `b` are the baseline's and the candidate's run
/// directories (their `results.json` gives the curves).
pub fn render_html(c: &Comparison, a: &Run, b: &Run) -> String {
    let mut o = String::new();
    let decision = c.decision.as_str();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>headroom compare: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(decision)
    );
    let _ = writeln!(
        o,
        "<h1 class=\"{}\">{}</h1>\n<p>candidate <code>{}</code> against baseline <code>{}</code></p>",
        decision.to_lowercase(),
        esc(decision),
        esc(&c.candidate),
        esc(&c.baseline)
    );
    let lines = headline(c);
    o.push_str("<ul>\n");
    if lines.is_empty() {
        o.push_str("<li>nothing moved beyond the runs' uncertainty</li>\n");
    }
    for l in &lines {
        let _ = writeln!(o, "<li>{}</li>", esc(l));
    }
    o.push_str("</ul>\n");

    o.push_str("<h2>What changed</h2>\n");
    if c.changes.is_empty() && c.incomparable.is_empty() {
        o.push_str("<p>nothing in the manifests (same engine, model, configuration, host)</p>\n");
    } else {
        o.push_str("<table>\n<tr><th>what</th><th>baseline</th><th>candidate</th><th></th></tr>\n");
        for ch in &c.changes {
            let material = if ch.material { "material" } else { "" };
            row(
                &mut o,
                if ch.material {
                    " class=\"material\""
                } else {
                    ""
                },
                &[&ch.what, &ch.before, &ch.after, material],
            );
        }
        for i in &c.incomparable {
            row(&mut o, "", &[i, "", "", "allowed"]);
        }
        o.push_str("</table>\n");
    }

    o.push_str("<h2>Capacity</h2>\n<table>\n<tr><th>phase</th><th>baseline</th><th>candidate</th><th>baseline band</th><th>candidate band</th><th>change</th><th>why</th></tr>\n");
    for x in &c.capacity {
        let cap = |v: Option<f64>| {
            v.map_or("none passed".to_string(), |v| {
                format!("{} {}", fmt_num(v), x.mode.unit())
            })
        };
        row(
            &mut o,
            "",
            &[
                &x.phase,
                &cap(x.before),
                &cap(x.after),
                &fmt_band(&x.before_band),
                &fmt_band(&x.after_band),
                x.change.as_str(),
                &x.why,
            ],
        );
    }
    for u in &c.unmatched_phases {
        row(&mut o, "", &[u, "not compared"]);
    }
    o.push_str("</table>\n");

    o.push_str("<h2>Latency against load</h2>\n");
    let _ = writeln!(
        o,
        "<p><span style=\"color:{BASE_COLOUR}\">&#9679; baseline</span>, \
         <span style=\"color:{CAND_COLOUR}\">&#9632; candidate</span>; dashed: the SLO threshold; \
         whiskers: the candidate's confidence interval at the levels both runs measured.</p>"
    );
    for pa in &a.results.phases {
        let Some(pb) = b.results.phases.iter().find(|p| p.name == pa.name) else {
            continue;
        };
        let _ = writeln!(o, "<h3>{}</h3>", esc(&pa.name));
        for (id, _, _, pct, thr) in latency_objectives(&a.slo, pa) {
            o.push_str(&chart(c, pa, pb, &id, pct, thr));
        }
    }
    if !c.warnings.is_empty() {
        o.push_str("<h2>Warnings</h2>\n<ul>\n");
        for w in &c.warnings {
            let _ = writeln!(o, "<li>{}</li>", esc(w));
        }
        o.push_str("</ul>\n");
    }
    o.push_str("</body>\n</html>\n");
    o
}

/// One table row of escaped cells; `attrs` (trusted markup) goes into the `<tr>` tag.
fn row(o: &mut String, attrs: &str, cells: &[&str]) {
    let _ = write!(o, "<tr{attrs}>");
    for c in cells {
        let _ = write!(o, "<td>{}</td>", esc(c));
    }
    o.push_str("</tr>\n");
}

/// The objective's percentile at a level, seconds: the sweep's observed figure, else the
/// client's summary for the percentiles it keeps (p50/p90/p95/p99).
fn observed(l: &LevelResult, id: &ObjectiveId, pct: f64) -> Option<f64> {
    if let Some(v) = l
        .objectives
        .iter()
        .find(|o| o.id == *id)
        .and_then(|o| o.observed)
    {
        return Some(v);
    }
    let s = l.latency.get(id.signal()?.name()).filter(|s| s.count > 0)?;
    match pct.round() as u32 {
        50 => Some(s.p50_s),
        90 => Some(s.p90_s),
        95 => Some(s.p95_s),
        99 => Some(s.p99_s),
        _ => None,
    }
}

/// (load, seconds) of a phase's levels, ascending by load, finite only.
fn curve(p: &PhaseResult, id: &ObjectiveId, pct: f64) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = p
        .levels
        .iter()
        .filter_map(|l| Some((l.load, observed(l, id, pct)?)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    v.sort_by(|x, y| x.0.total_cmp(&y.0));
    v
}

/// A round step for about `n` ticks over `0..max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-12);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// One chart as a `<figure>` holding an inline SVG.
fn chart(
    c: &Comparison,
    pa: &PhaseResult,
    pb: &PhaseResult,
    id: &ObjectiveId,
    pct: f64,
    thr: f64,
) -> String {
    let (w, h) = (520.0, 300.0);
    let (left, right, top, bottom) = (62.0, 16.0, 28.0, 40.0);
    let base = curve(pa, id, pct);
    let cand = curve(pb, id, pct);
    let whiskers: Vec<(f64, f64, f64)> = c
        .levels
        .iter()
        .filter(|l: &&LevelComparison| l.phase == pa.name)
        .flat_map(|l| {
            l.latency
                .iter()
                .filter(|x| x.id == *id)
                .map(|x| (l.load, x.after_ci_s.0, x.after_ci_s.1))
        })
        .filter(|(x, lo, hi)| x.is_finite() && lo.is_finite() && hi.is_finite())
        .collect();
    let x_max = base
        .iter()
        .chain(&cand)
        .map(|p| p.0)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.05;
    let y_max = base
        .iter()
        .chain(&cand)
        .map(|p| p.1)
        .chain(whiskers.iter().map(|w| w.2))
        .chain([thr])
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-6)
        * 1.1;
    let px = |x: f64| left + x / x_max * (w - left - right);
    let py = |y: f64| h - bottom - y / y_max * (h - top - bottom);
    let mut s = String::new();
    let title = format!("{} {id}", pa.name);
    let _ = writeln!(
        s,
        "<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\">"
    );
    let _ = writeln!(s, "<title>{}</title>", esc(&title));
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"16\" font-weight=\"bold\">{}</text>",
        esc(&title)
    );
    // Axes and ticks.
    let _ = writeln!(
        s,
        "<path d=\"M{left} {top} V{:.1} H{:.1}\" fill=\"none\" stroke=\"#444\"/>",
        h - bottom,
        w - right
    );
    let ys = tick_step(y_max, 5.0);
    let mut t = 0.0;
    while t <= y_max + 1e-12 {
        let y = py(t);
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left,
            w - right,
            left - 4.0,
            y + 4.0,
            if t == 0.0 {
                "0".to_string()
            } else {
                esc(&fmt_s(t))
            }
        );
        t += ys;
    }
    let xs = tick_step(x_max, 6.0);
    let mut t = 0.0;
    while t <= x_max + 1e-12 {
        let x = px(t);
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            h - bottom + 14.0,
            esc(&fmt_num(t))
        );
        t += xs;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">load ({})</text>",
        (left + w - right) / 2.0,
        h - 6.0,
        esc(pa.mode.unit())
    );
    // The SLO line.
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#c00\" stroke-dasharray=\"5,4\"/><text x=\"{1:.1}\" y=\"{2:.1}\" text-anchor=\"end\" fill=\"#c00\">SLO {3}</text>",
        py(thr),
        w - right,
        py(thr) - 4.0,
        esc(&fmt_s(thr))
    );
    for (pts, colour, square) in [(&base, BASE_COLOUR, false), (&cand, CAND_COLOUR, true)] {
        if pts.len() > 1 {
            let d: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/>",
                d.join(" ")
            );
        }
        for (x, y) in pts.iter() {
            let (cx, cy) = (px(*x), py(*y));
            let tip = esc(&format!(
                "{} at {} {}: {}",
                if square { "candidate" } else { "baseline" },
                fmt_num(*x),
                pa.mode.unit(),
                fmt_s(*y)
            ));
            if square {
                let _ = writeln!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"{colour}\"><title>{tip}</title></rect>",
                    cx - 3.5,
                    cy - 3.5
                );
            } else {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"3.5\" fill=\"{colour}\"><title>{tip}</title></circle>"
                );
            }
        }
    }
    for (x, lo, hi) in &whiskers {
        let cx = px(*x);
        let _ = writeln!(
            s,
            "<path d=\"M{x0:.1} {ylo:.1} H{x1:.1} M{cx:.1} {ylo:.1} V{yhi:.1} M{x0:.1} {yhi:.1} H{x1:.1}\" stroke=\"{CAND_COLOUR}\" fill=\"none\"><title>{tip}</title></path>",
            x0 = cx - 4.0,
            x1 = cx + 4.0,
            ylo = py(*lo),
            yhi = py(*hi),
            tip = esc(&format!(
                "candidate interval {} … {}",
                fmt_s(*lo),
                fmt_s(*hi)
            )),
        );
    }
    s.push_str("</svg>\n");
    // The caption: the comparison at each common level, in words.
    let words: Vec<String> = c
        .levels
        .iter()
        .filter(|l| l.phase == pa.name)
        .flat_map(|l| {
            l.latency.iter().filter(|x| x.id == *id).map(move |x| {
                format!(
                    "{} {}: {} ({} … {}; {})",
                    fmt_num(l.load),
                    l.mode.unit(),
                    x.change.as_str(),
                    fmt_signed_s(x.diff_ci_s.0),
                    fmt_signed_s(x.diff_ci_s.1),
                    x.noise_words()
                )
            })
        })
        .collect();
    let caption = if words.is_empty() {
        "no level measured by both runs".to_string()
    } else {
        words.join("; ")
    };
    let worse = c
        .levels
        .iter()
        .filter(|l| l.phase == pa.name)
        .flat_map(|l| l.latency.iter())
        .any(|x| x.id == *id && x.change == Change::Worse);
    let _ = writeln!(
        s,
        "<figcaption{}>{}</figcaption>\n</figure>",
        if worse { " class=\"regression\"" } else { "" },
        esc(&caption)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{Gate, compare};
    use headroom_core::run::LoadMode;
    use headroom_load::recorder::LevelRecording;

    const SLO: &str = "objectives:\n  \"*\":\n    ttft: {p95: 500ms}\n    itl: {p95: 250ms}\n    error_rate: 5%\n";

    /// A run directory of one phase `chat <&>` at loads 4 and 16 whose TTFTs and ITLs are
    /// `scale` × (1..=200 ms), with histograms, so that `compare` computes intervals.
    /// With `repeat`, each level has one repeat whose TTFTs are 10 ms longer.
    fn run_dir(dir: &std::path::Path, scale: u64, repeat: bool) -> Run {
        let class = "chat <&>";
        std::fs::create_dir_all(dir.join("histograms")).unwrap();
        let mut levels = Vec::new();
        for (i, load) in [4.0, 16.0].into_iter().enumerate() {
            let write = |file: &str, shift_ms: u64| {
                let mut rec = LevelRecording::new(load, LoadMode::Concurrency, &[class]);
                for ms in 1..=200u64 {
                    let ns = (ms * scale + shift_ms) * 1_000_000;
                    rec.classes[0].ttft.record(ns).unwrap();
                    rec.classes[0].itl.record(ms * scale * 250_000).unwrap();
                }
                rec.classes[0]
                    .outcomes
                    .insert(headroom_core::Outcome::Stop, 200);
                rec.save(&dir.join(file)).unwrap();
            };
            let file = format!("histograms/L{i:03}.json");
            write(&file, 0);
            let p95 = 0.190 * scale as f64;
            levels.push(serde_json::json!({
                "load": load, "mode": "concurrency", "started_unix_s": 0.0, "window_s": 1.0,
                "window_note": "", "outcomes": {}, "latency": {"ttft": {"count": 200,
                "mean_s": 0.1, "p50_s": 0.1, "p90_s": 0.18, "p95_s": p95, "p99_s": 0.198,
                "max_s": 0.2}}, "request_rate_per_s": 0.0,
                "output_tokens_per_s": 0.0, "tokens": {"prompt_requested": 0, "prompt_realised": 0,
                "output_cap_requested": 0, "output_realised": 0, "usage_missing": 0},
                "objectives": [{"id": "itl_p95", "description": "ITL p95 < 250 ms",
                    "threshold": 0.25, "observed": p95 / 4.0, "verdict": "PASS", "samples": 200,
                    "reason": ""}],
                "verdict": "PASS",
                "client": serde_json::to_value(headroom_core::run::ClientHealth::default()).unwrap(),
                "server": null, "histograms": file, "warnings": []
            }));
            if repeat {
                let again = format!("histograms/L{i:03}r.json");
                write(&again, 10);
                let mut r = levels.last().unwrap().clone();
                r["histograms"] = again.into();
                levels.last_mut().unwrap()["repeats"] = serde_json::json!([r]);
            }
        }
        let results = serde_json::json!({
            "schema_version": 1, "status": {"state": "complete"}, "warnings": [],
            "phases": [{"name": class, "classes": [[class, 1.0]], "mode": "concurrency",
                "levels": levels, "capacity": 16.0, "first_fail": null, "first_breach": null,
                "search_note": ""}]
        });
        std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
        std::fs::write(dir.join("slo.yaml"), SLO).unwrap();
        let manifest =
            serde_json::json!({"tool_version": format!("0.{scale}"), "workload": {}, "slo": {}});
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        Run::open(dir).unwrap()
    }

    /// Tags balance (void `meta` aside), every `<` opens a tag or a comment/doctype, and no
    /// attribute or text holds a raw `<`.
    fn assert_well_formed(html: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find('<') {
            let after = &rest[i + 1..];
            let end = after.find('>').expect("unclosed tag");
            let tag = &after[..end];
            assert!(!tag.contains('<'), "raw < inside a tag: {tag}");
            rest = &after[end + 1..];
            if tag.starts_with('!') {
                continue;
            }
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(!name.is_empty(), "not a tag: <{tag}>");
            if let Some(closing) = tag.strip_prefix('/') {
                let open = stack
                    .pop()
                    .unwrap_or_else(|| panic!("</{closing}> opens nothing"));
                assert_eq!(open, name, "</{name}> closes <{open}>");
            } else if !(tag.ends_with('/') || name == "meta") {
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        // Every & starts an entity.
        for (i, _) in html.match_indices('&') {
            let e = &html[i..html.len().min(i + 8)];
            assert!(
                [
                    "&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#9679;", "&#9632;"
                ]
                .iter()
                .any(|x| e.starts_with(x)),
                "bare & at {e}"
            );
        }
    }

    #[test]
    fn one_chart_per_latency_objective_escaped_and_balanced() {
        let t = tempfile::tempdir().unwrap();
        let a = run_dir(&t.path().join("a"), 1, false);
        let b = run_dir(&t.path().join("b"), 2, false);
        let c = compare(&a, &b, &Gate::default()).unwrap();
        let html = render_html(&c, &a, &b);
        assert_well_formed(&html);
        // Two latency objectives (ttft_p95, itl_p95) in one phase: two charts.
        assert_eq!(html.matches("<svg").count(), 2, "{html}");
        assert_eq!(html.matches("<figure>").count(), 2);
        assert!(!html.contains("chat <&>"));
        assert!(html.contains("chat &lt;&amp;&gt;"));
        // Nothing fetched: no script, stylesheet link, image or other source.
        for x in ["<script", "<link", "<img", "src=", "href=", "url("] {
            assert!(!html.contains(x), "{x}");
        }
        // The SLO lines: 500 ms and 250 ms.
        assert!(html.contains("SLO 500.0 ms") && html.contains("SLO 250.0 ms"));
        // Both runs' curves, and whiskers at the two common levels of each chart.
        assert_eq!(html.matches("<polyline").count(), 4);
        assert_eq!(html.matches("candidate interval").count(), 4);
        // A doubled TTFT p95 (190 → 380 ms, far outside the intervals) is worse.
        assert!(html.contains("class=\"regression\""));
        // What changed: the tool version, material.
        assert!(html.contains("<td>headroom version</td><td>0.1</td><td>0.2</td>"));
        assert!(html.contains("<h2>Capacity</h2>"));
    }

    /// The baseline's repeats at 190 and 200 ms (TTFT p95 of 1..200 ms, then shifted 10 ms):
    /// a noise floor of 10 ms, which the candidate's doubling (+190 ms) exceeds; without
    /// repeats the text says how much noise could explain instead.
    #[test]
    fn the_baseline_repeats_give_the_noise_floor() {
        let t = tempfile::tempdir().unwrap();
        let a = run_dir(&t.path().join("a"), 1, true);
        let b = run_dir(&t.path().join("b"), 2, false);
        let c = compare(&a, &b, &Gate::default()).unwrap();
        let ttft = c.levels[0]
            .latency
            .iter()
            .find(|x| x.id == "ttft_p95")
            .unwrap();
        let (lo, hi) = ttft.noise_floor_s.unwrap();
        // HDR keeps 3 significant digits: within 0.1 % of 190 and 200 ms.
        assert!(
            (lo - 0.190).abs() < 2e-4 && (hi - 0.200).abs() < 2e-4,
            "{lo} {hi}"
        );
        assert_eq!(ttft.beyond_noise_floor(), Some(true));
        let text = crate::compare::render_text(&c, false);
        assert!(
            text.contains("(noise floor 10.0 ms): the difference exceeds it"),
            "{text}"
        );
        let c = compare(&b, &a, &Gate::default()).unwrap();
        let text = crate::compare::render_text(&c, false);
        assert!(text.contains("noise alone could explain ±"), "{text}");
    }

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1.0, 5.0), 0.2);
        assert_eq!(tick_step(0.38, 5.0), 0.1);
        assert_eq!(tick_step(170.0, 6.0), 50.0);
    }
}
