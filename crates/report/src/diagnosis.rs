//! Renderers of `headroom diagnose`: one [`Diagnosis`] (a window's source plus its
//! [`Assessment`]) as plain terminal text ([`terminal`]), Markdown ([`markdown`]) or JSON
//! ([`json`]). Every figure shown was computed by `headroom_diagnose::assess`; nothing here
//! computes a statistic, it only formats values by their unit.
//!
//! # JSON shape
//! One object per window: `source` (where the scrapes came from, the engine, the window), `class`
//! (the SLO class judged) and the assessment's fields flattened beside them: `verdict`
//! (`PASS`/`FAIL`/`INCONCLUSIVE`), `refused` (reasons, empty when the verdict stands),
//! `objectives[]` (`id`, `description`, `threshold`, `observed`, `verdict`, `samples`,
//! `reason`), `steps[]` (`number`, `title`, `figures[]` with `name`/`value`/`unit`/`source`,
//! `remarks[]`), `findings[]` (stable `id` such as `kv_pressure` or `admission_saturation`,
//! `title`, `bottleneck`, `action`, `trade_off`, `evidence[]`, `confidence`, `category`,
//! `watch[]`) and `notes[]`. Several windows (every level of a run directory) are an array of
//! such objects.

use headroom_core::objective::Unit;
use headroom_core::slo::{fmt_duration_s, fmt_num};
use headroom_diagnose::Assessment;
use serde::Serialize;

/// Where a diagnosed window came from, for the report header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiagnosisSource {
    /// `url` (live polling), `prometheus` (HTTP API range), `files` (saved scrapes) or
    /// `run_dir` (a sweep's scrapes).
    pub kind: String,
    /// The URL(s), Prometheus base URL or file/directory names.
    pub location: String,
    /// Sweep level index (run directories only).
    pub level: Option<u32>,
    /// Engine detected from the metrics (`vllm`, `sglang`, `tgi`, `llama_cpp`, …).
    pub engine: String,
    /// Engine version when the metrics reveal it.
    pub engine_version: Option<String>,
    /// Start of the window, Unix seconds; for a single scrape the server's start when known.
    pub start_unix_s: Option<f64>,
    /// End of the window, Unix seconds.
    pub end_unix_s: f64,
    /// Window length in seconds, when the start is known.
    pub duration_s: Option<f64>,
    /// Engine scrapes behind the window (0 for a Prometheus range).
    pub scrapes: usize,
    /// The window counts from server start (a single scrape).
    pub since_server_start: bool,
    /// GPUs seen in dcgm-exporter data.
    pub gpus: usize,
}

/// One diagnosed window: what was read and how it was judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Where the window came from.
    pub source: DiagnosisSource,
    /// The SLO class whose objectives were applied (`*` for the default).
    pub class: String,
    /// The judgement.
    #[serde(flatten)]
    pub assessment: Assessment,
}

/// Formats a value by its unit: seconds as a duration (`812 ms`), ratios as percent, the rest
/// as a number followed by the unit.
pub fn fmt_value(value: f64, unit: &str) -> String {
    match unit {
        "s" => fmt_duration_s(value),
        "ratio" => format!("{} %", fmt_num(value * 100.0)),
        "" => fmt_num(value),
        u => format!("{} {u}", fmt_num(value)),
    }
}

/// An objective's value in its unit: a ratio as percent, seconds as a duration.
fn fmt_objective(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => format!("{} %", fmt_num(v * 100.0)),
        Unit::Seconds => fmt_duration_s(v),
    }
}

fn header_line(d: &Diagnosis) -> String {
    let s = &d.source;
    let engine = match &s.engine_version {
        Some(v) => format!("{} {v}", s.engine),
        None => s.engine.clone(),
    };
    let level = s.level.map(|l| format!(" level {l}")).unwrap_or_default();
    let window = match (s.since_server_start, s.duration_s) {
        (true, Some(d)) => format!("since server start ({})", fmt_duration_s(d)),
        (true, None) => "since server start".to_owned(),
        (false, Some(d)) => fmt_duration_s(d),
        (false, None) => "unknown length".to_owned(),
    };
    let gpus = if s.gpus > 0 {
        format!(", {} GPU(s)", s.gpus)
    } else {
        String::new()
    };
    format!(
        "{engine} from {} {}{level}; window {window}, {} scrape(s){gpus}; SLO class `{}`",
        s.kind, s.location, s.scrapes, d.class
    )
}

/// Left-aligned columns separated by two spaces, each line prefixed by `indent` (the terminal
/// tables of `diagnose` and `plan`).
pub fn table(rows: &[Vec<String>], indent: &str) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::from(indent);
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = widths[c] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Figures shown per step in [`terminal`]; the rest are in `--format json`.
pub const TERMINAL_FIGURES_PER_STEP: usize = 5;

/// Notes shown in [`terminal`]; the rest are in `--format json`.
pub const TERMINAL_NOTES: usize = 5;

/// The objective that decides the verdict, in a line: the failing one furthest past its
/// threshold, else the first without a verdict, else the one closest to its threshold.
fn deciding(a: &Assessment) -> Option<String> {
    use headroom_core::Verdict;
    let ratio = |o: &&headroom_core::run::ObjectiveResult| {
        o.observed
            .filter(|v| v.is_finite() && o.threshold > 0.0)
            .map_or(0.0, |v| v / o.threshold)
    };
    let pick = |v: Verdict| {
        a.objectives
            .iter()
            .filter(|o| o.verdict == v)
            .max_by(|x, y| ratio(x).total_cmp(&ratio(y)))
    };
    let o = match a.verdict {
        Verdict::Fail => pick(Verdict::Fail),
        Verdict::Inconclusive => a
            .objectives
            .iter()
            .find(|o| o.verdict == Verdict::Inconclusive),
        Verdict::Pass => pick(Verdict::Pass),
    }?;
    let observed = o
        .observed
        .map(|v| format!("observed {}", fmt_objective(o.unit(), v)))
        .unwrap_or_else(|| "no figure".into());
    let how = match o.verdict {
        Verdict::Fail => "breached by",
        Verdict::Inconclusive => "undecided",
        Verdict::Pass => "closest",
    };
    // The reason's first clause says where the figure came from and why.
    let why = clip_at_clause(
        o.reason.split("; ").next().unwrap_or(""),
        DECIDING_WHY_CHARS,
    );
    Some(format!("{how}: {} ({observed}; {why})", o.description))
}

/// Longest reason text on the verdict line (characters); the whole reason is in the table.
const DECIDING_WHY_CHARS: usize = 160;

/// `text` whole when it fits in `max` characters, else its leading comma-separated parts that
/// fit, else its leading words with "…": a cut never falls inside a word or a figure.
fn clip_at_clause(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out = String::new();
    for part in text.split(", ") {
        let more = if out.is_empty() { 0 } else { 2 } + part.chars().count();
        if out.chars().count() + more > max {
            break;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(part);
    }
    if out.is_empty() {
        for word in text.split(' ') {
            if out.chars().count() + word.chars().count() + 2 > max {
                break;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        }
        out.push('…');
    }
    out
}

/// Plain text for a terminal (no colour codes). It leads with the verdict, the objective that
/// decides it and the top finding with its first action, in a few lines; then the objectives,
/// the six steps with their first [`TERMINAL_FIGURES_PER_STEP`] figures and the quantiles an
/// objective judges (value with its unit, and its source), the top finding's evidence, the other findings in a line each, and at most
/// [`TERMINAL_NOTES`] notes. Everything left out is in `--format json` ([`json`]), and a line
/// says how much was.
pub fn terminal(d: &Diagnosis) -> String {
    let a = &d.assessment;
    let mut o = format!("headroom diagnose: {}\n\n", header_line(d));
    o.push_str(&format!("Verdict: {}\n", a.verdict.as_str()));
    if let Some(line) = deciding(a) {
        o.push_str(&format!("  {line}\n"));
    }
    match a.findings.first() {
        Some(f) => {
            let fi = &f.finding;
            o.push_str(&format!(
                "Top finding: [{}] {} (confidence: {})\n  first action: {}\n",
                fi.id,
                fi.title,
                confidence(fi.confidence),
                fi.action
            ));
        }
        None => o.push_str("Top finding: none\n"),
    }
    if !a.refused.is_empty() {
        o.push_str("Verdict refused, the evidence is not valid:\n");
        for r in &a.refused {
            o.push_str(&format!("  - {r}\n"));
        }
    }
    o.push_str("\nObjectives\n");
    let mut rows = vec![vec![
        "objective".to_owned(),
        "observed".to_owned(),
        "verdict".to_owned(),
        "samples".to_owned(),
        "reason".to_owned(),
    ]];
    for ob in &a.objectives {
        rows.push(vec![
            ob.description.clone(),
            ob.observed
                .map(|v| fmt_objective(ob.unit(), v))
                .unwrap_or_else(|| "n/a".into()),
            ob.verdict.as_str().to_owned(),
            ob.samples.to_string(),
            ob.reason.clone(),
        ]);
    }
    o.push_str(&table(&rows, "  "));
    if let Some(rows) = view_rows(a) {
        o.push_str("\nTwo views: the gateway's class (what users see) and the engine (every class together)\n");
        o.push_str(&table(&rows, "  "));
        for line in gap_lines(a) {
            o.push_str(&format!("  - {line}\n"));
        }
    }
    let mut left_out = 0;
    for s in &a.steps {
        o.push_str(&format!("\n{}. {}\n", s.number, s.title));
        if s.figures.is_empty() && s.remarks.is_empty() {
            o.push_str("  (no data)\n");
        }
        // The step's first figures, and the quantiles an objective judges (`ttft_p95` →
        // `server_ttft_p95_s`).
        let judged = |name: &str| {
            a.objectives.iter().any(|ob| {
                let kind = ob.id.kind;
                name == format!("{kind}_s") || name == format!("server_{kind}_s")
            })
        };
        let shown: Vec<&headroom_diagnose::Figure> = s
            .figures
            .iter()
            .enumerate()
            .filter(|(i, f)| *i < TERMINAL_FIGURES_PER_STEP || judged(&f.name))
            .map(|(_, f)| f)
            .collect();
        left_out += s.figures.len() - shown.len();
        let rows: Vec<Vec<String>> = shown
            .into_iter()
            .map(|f| {
                vec![
                    f.name.clone(),
                    fmt_value(f.value, &f.unit),
                    f.source.clone(),
                ]
            })
            .collect();
        o.push_str(&table(&rows, "  "));
        for r in &s.remarks {
            o.push_str(&format!("  - {r}\n"));
        }
    }
    o.push_str("\nFindings\n");
    if a.findings.is_empty() {
        o.push_str("  none\n");
    }
    for (i, f) in a.findings.iter().enumerate() {
        let fi = &f.finding;
        if i > 0 {
            o.push_str(&format!(
                "  [{}] {} (confidence: {}): {}\n",
                fi.id,
                fi.title,
                confidence(fi.confidence),
                fi.action
            ));
            continue;
        }
        o.push_str(&format!(
            "\n  [{}] {} (confidence: {})\n",
            fi.id,
            fi.title,
            confidence(fi.confidence)
        ));
        o.push_str(&format!("    bottleneck:   {}\n", fi.bottleneck));
        o.push_str("    evidence:\n");
        let rows: Vec<Vec<String>> = fi
            .evidence
            .iter()
            .map(|e| {
                vec![
                    e.metric.clone(),
                    fmt_value(e.value, &e.unit),
                    e.note.clone(),
                ]
            })
            .collect();
        o.push_str(&table(&rows, "      "));
        o.push_str(&format!("    first action: {}\n", fi.action));
        o.push_str(&format!("    trade-off:    {}\n", fi.trade_off));
        if !f.watch.is_empty() {
            o.push_str(&format!("    watch:        {}\n", f.watch.join(", ")));
        }
        if a.findings.len() > 1 {
            o.push_str("\n  Other findings (their evidence: --format json)\n");
        }
    }
    if !a.notes.is_empty() {
        o.push_str("\nNotes\n");
        for n in a.notes.iter().take(TERMINAL_NOTES) {
            o.push_str(&format!("  - {n}\n"));
        }
    }
    let notes_out = a.notes.len().saturating_sub(TERMINAL_NOTES);
    let more: Vec<String> = [(left_out, "figure(s)"), (notes_out, "note(s)")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} more {what}"))
        .collect();
    if !more.is_empty() {
        o.push_str(&format!("\n{}: --format json\n", more.join(" and ")));
    }
    o
}

/// The two views of each objective as table rows (header first): objective, the gateway's
/// verdict and figure, the engine's, the verdict that holds, whether they agree; `None` without
/// a gateway ([`Assessment::views`] empty).
fn view_rows(a: &Assessment) -> Option<Vec<Vec<String>>> {
    if a.views.is_empty() {
        return None;
    }
    let cell = |r: &headroom_core::run::ObjectiveResult| {
        format!(
            "{} {}",
            r.verdict.as_str(),
            r.observed
                .map(|v| fmt_objective(r.unit(), v))
                .unwrap_or_else(|| "n/a".into())
        )
    };
    let mut rows = vec![
        ["objective", "gateway", "engine", "holds", "views"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for v in &a.views {
        rows.push(vec![
            v.description.clone(),
            v.gateway
                .as_ref()
                .map(cell)
                .unwrap_or_else(|| "not measured".into()),
            cell(&v.engine),
            v.verdict.as_str().to_owned(),
            if v.agree { "agree" } else { "disagree" }.to_owned(),
        ]);
    }
    Some(rows)
}

/// One line per TTFT or E2E objective: where the gateway's latency goes beyond the engine's.
fn gap_lines(a: &Assessment) -> Vec<String> {
    a.views
        .iter()
        .filter_map(|v| {
            v.gap
                .as_ref()
                .map(|g| format!("{}: {}", v.description, g.sentence()))
        })
        .collect()
}

fn confidence(c: headroom_core::Confidence) -> &'static str {
    match c {
        headroom_core::Confidence::Low => "low",
        headroom_core::Confidence::Medium => "medium",
        headroom_core::Confidence::High => "high",
    }
}

fn esc(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Markdown: the same sections as [`terminal`], with tables for objectives, figures and
/// evidence.
pub fn markdown(d: &Diagnosis) -> String {
    let a = &d.assessment;
    let mut o = String::from("# Headroom diagnosis\n\n");
    o.push_str(&format!("{}\n\n", esc(&header_line(d))));
    o.push_str(&format!("**Verdict: {}**\n\n", a.verdict.as_str()));
    if !a.refused.is_empty() {
        o.push_str("Verdict refused, the evidence is not valid:\n\n");
        for r in &a.refused {
            o.push_str(&format!("- {}\n", esc(r)));
        }
        o.push('\n');
    }
    o.push_str("## Objectives\n\n| objective | observed | verdict | samples | reason |\n|---|---:|---|---:|---|\n");
    for ob in &a.objectives {
        o.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            esc(&ob.description),
            ob.observed
                .map(|v| fmt_objective(ob.unit(), v))
                .unwrap_or_else(|| "n/a".into()),
            ob.verdict.as_str(),
            ob.samples,
            esc(&ob.reason)
        ));
    }
    if let Some(rows) = view_rows(a) {
        o.push_str("\n## Two views: the gateway's class (what users see) and the engine (every class together)\n\n");
        for (i, r) in rows.iter().enumerate() {
            let cells: Vec<String> = r.iter().map(|c| esc(c)).collect();
            o.push_str(&format!("| {} |\n", cells.join(" | ")));
            if i == 0 {
                o.push_str("|---|---|---|---|---|\n");
            }
        }
        o.push('\n');
        for line in gap_lines(a) {
            o.push_str(&format!("- {}\n", esc(&line)));
        }
    }
    for s in &a.steps {
        o.push_str(&format!("\n## {}. {}\n\n", s.number, esc(&s.title)));
        if !s.figures.is_empty() {
            o.push_str("| figure | value | source |\n|---|---:|---|\n");
            for f in &s.figures {
                o.push_str(&format!(
                    "| {} | {} | {} |\n",
                    esc(&f.name),
                    fmt_value(f.value, &f.unit),
                    esc(&f.source)
                ));
            }
            o.push('\n');
        }
        for r in &s.remarks {
            o.push_str(&format!("- {}\n", esc(r)));
        }
        if s.figures.is_empty() && s.remarks.is_empty() {
            o.push_str("No data.\n");
        }
    }
    o.push_str("\n## Findings\n\n");
    if a.findings.is_empty() {
        o.push_str("None.\n");
    }
    for f in &a.findings {
        let fi = &f.finding;
        o.push_str(&format!(
            "### `{}`: {}\n\nConfidence: {}. Bottleneck: {}\n\n",
            fi.id,
            esc(&fi.title),
            confidence(fi.confidence),
            esc(&fi.bottleneck)
        ));
        if !fi.evidence.is_empty() {
            o.push_str("| evidence | value | note |\n|---|---:|---|\n");
            for e in &fi.evidence {
                o.push_str(&format!(
                    "| `{}` | {} | {} |\n",
                    esc(&e.metric),
                    fmt_value(e.value, &e.unit),
                    esc(&e.note)
                ));
            }
            o.push('\n');
        }
        o.push_str(&format!(
            "- **First action:** {}\n- **Trade-off:** {}\n",
            esc(&fi.action),
            esc(&fi.trade_off)
        ));
        if !f.watch.is_empty() {
            let w: Vec<String> = f.watch.iter().map(|m| format!("`{}`", esc(m))).collect();
            o.push_str(&format!("- **Watch:** {}\n", w.join(", ")));
        }
        o.push('\n');
    }
    if !a.notes.is_empty() {
        o.push_str("## Notes\n\n");
        for n in &a.notes {
            o.push_str(&format!("- {}\n", esc(n)));
        }
    }
    o
}

/// JSON (pretty-printed, see the module docs for the shape): one object for one window, an
/// array for several.
///
/// # Errors
/// Serialisation errors from `serde_json` (none occur for finite figures; non-finite ones are
/// written as `null`).
pub fn json(ds: &[Diagnosis]) -> Result<String, serde_json::Error> {
    match ds {
        [one] => serde_json::to_string_pretty(one),
        many => serde_json::to_string_pretty(many),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::Verdict;
    use headroom_core::run::ObjectiveResult;
    use headroom_core::verdict::{Confidence, Evidence, Finding};
    use headroom_diagnose::{Category, Figure, RuledFinding, Step};

    fn diagnosis() -> Diagnosis {
        Diagnosis {
            source: DiagnosisSource {
                kind: "files".into(),
                location: "a.prom".into(),
                level: None,
                engine: "vllm".into(),
                engine_version: None,
                start_unix_s: Some(100.0),
                end_unix_s: 130.0,
                duration_s: Some(30.0),
                scrapes: 2,
                since_server_start: false,
                gpus: 0,
            },
            class: "*".into(),
            assessment: Assessment {
                verdict: Verdict::Fail,
                refused: vec![],
                objectives: vec![ObjectiveResult {
                    share: None,
                    bound: Default::default(),
                    source: None,
                    id: crate::testdata::id("ttft_p95"),
                    description: "TTFT p95 < 300 ms".into(),
                    threshold: 0.3,
                    observed: Some(0.8125),
                    verdict: Verdict::Fail,
                    samples: 16,
                    reason: "breached | badly".into(),
                }],
                steps: vec![Step {
                    number: 1,
                    title: "Where latency goes".into(),
                    figures: vec![
                        Figure {
                            name: "queue_time_mean_s".into(),
                            value: 1.074,
                            unit: "s".into(),
                            source: "vllm:request_queue_time_seconds".into(),
                            bound: Default::default(),
                        },
                        Figure {
                            name: "queue_share_of_ttft".into(),
                            value: 0.9,
                            unit: "ratio".into(),
                            source: "derived".into(),
                            bound: Default::default(),
                        },
                    ],
                    remarks: vec!["queueing dominates".into()],
                }],
                findings: vec![RuledFinding {
                    finding: Finding {
                        id: "admission_saturation".into(),
                        title: "Admission saturation".into(),
                        bottleneck: "the scheduler".into(),
                        action: "raise --max-num-seqs".into(),
                        trade_off: "higher ITL".into(),
                        evidence: vec![Evidence {
                            metric: "vllm:num_requests_waiting".into(),
                            value: 12.0,
                            unit: "requests".into(),
                            note: "max".into(),
                        }],
                        confidence: Confidence::High,
                    },
                    category: Category::Bottleneck,
                    watch: vec!["vllm:num_requests_waiting".into()],
                }],
                notes: vec!["vllm 0.32".into()],
                views: vec![],
            },
        }
    }

    #[test]
    fn values_by_unit() {
        assert_eq!(fmt_objective(Unit::Ratio, 0.02), "2 %");
        assert_eq!(fmt_objective(Unit::Ratio, 0.0), "0 %");
        assert_eq!(fmt_objective(Unit::Seconds, 0.3), "300 ms");
        assert_eq!(fmt_value(0.8125, "s"), "812 ms");
        assert_eq!(fmt_value(0.9, "ratio"), "90 %");
        assert_eq!(fmt_value(12.0, "requests"), "12 requests");
        assert_eq!(fmt_value(3072.0, ""), "3072");
    }

    #[test]
    fn terminal_aligns_columns_and_shows_every_section() {
        let t = terminal(&diagnosis());
        assert!(t.contains("Verdict: FAIL\n"), "{t}");
        assert!(t.contains("window 30 s, 2 scrape(s)"), "{t}");
        // the two figure rows of step 1 are aligned on the value column
        let l1 = t.lines().find(|l| l.contains("queue_time_mean_s")).unwrap();
        let l2 = t
            .lines()
            .find(|l| l.contains("queue_share_of_ttft"))
            .unwrap();
        assert_eq!(l1.find("1.07 s"), l2.find("90 %"), "{t}");
        assert!(t.contains("[admission_saturation] Admission saturation (confidence: high)"));
        assert!(t.contains("first action: raise --max-num-seqs"));
        assert!(t.contains("trade-off:    higher ITL"));
        assert!(t.contains("812 ms"));
        assert!(t.contains("  - vllm 0.32"));
    }

    /// The verdict line's reason keeps whole clauses: a 16-sample breach of the real vLLM
    /// fixture (`v0.32-cpu-queueing-maxseqs4.prom`) once read "… with fewer than t)".
    #[test]
    fn the_deciding_reason_is_cut_between_clauses_never_inside_a_word() {
        let r = "server-side (vllm:request_queue_time_seconds), breached: at least 12 of 16 observations above 0.3 s (allowed 5.00 %), a breach certain at 95 % with fewer than the 20 observations p95 needs";
        assert_eq!(
            clip_at_clause(r, 160),
            "server-side (vllm:request_queue_time_seconds), breached: at least 12 of 16 observations above 0.3 s (allowed 5.00 %)"
        );
        assert_eq!(clip_at_clause("short, enough", 160), "short, enough");
        assert_eq!(clip_at_clause("one long clause of words", 12), "one long…");
        for max in 1..r.len() {
            let c = clip_at_clause(r, max);
            assert!(c.chars().count() <= max, "{max}: {c}");
            let body = c.trim_end_matches('…');
            assert!(r.starts_with(body), "{max}: {c}");
            let next = r[body.len()..].chars().next();
            assert!(
                body.is_empty() || matches!(next, None | Some(',') | Some(' ')),
                "{max}: cut inside a word: {c}"
            );
        }
    }

    /// The verdict, what decides it and the top finding come first, in a few lines; a step
    /// shows at most its first figures and says how many more `--format json` has.
    #[test]
    fn terminal_leads_with_the_verdict_and_the_top_finding() {
        let mut d = diagnosis();
        let fig = d.assessment.steps[0].figures[0].clone();
        d.assessment.steps[0].figures = (0..TERMINAL_FIGURES_PER_STEP + 2)
            .map(|i| Figure {
                name: format!("figure_{i}"),
                ..fig.clone()
            })
            .collect();
        let t = terminal(&d);
        let head: Vec<&str> = t.lines().take(6).collect();
        assert_eq!(head[2], "Verdict: FAIL", "{t}");
        assert!(
            head[3].contains("breached by: TTFT p95 < 300 ms (observed 812 ms"),
            "{t}"
        );
        assert!(
            head[4].starts_with("Top finding: [admission_saturation]"),
            "{t}"
        );
        assert_eq!(head[5], "  first action: raise --max-num-seqs", "{t}");
        assert!(t.contains(&format!("figure_{}", TERMINAL_FIGURES_PER_STEP - 1)));
        assert!(!t.contains(&format!("figure_{}", TERMINAL_FIGURES_PER_STEP)));
        assert!(t.contains("2 more figure(s): --format json"), "{t}");
        // JSON keeps every figure.
        let v: serde_json::Value = serde_json::from_str(&json(&[d]).unwrap()).unwrap();
        assert_eq!(
            v["steps"][0]["figures"].as_array().map(Vec::len),
            Some(TERMINAL_FIGURES_PER_STEP + 2)
        );
    }

    #[test]
    fn markdown_escapes_pipes() {
        let m = markdown(&diagnosis());
        assert!(m.contains("breached \\| badly"), "{m}");
        assert!(m.contains("### `admission_saturation`: Admission saturation"));
        assert!(m.contains("| `vllm:num_requests_waiting` | 12 requests | max |"));
    }

    #[test]
    fn json_flattens_the_assessment() {
        let v: serde_json::Value = serde_json::from_str(&json(&[diagnosis()]).unwrap()).unwrap();
        assert_eq!(v["verdict"], "FAIL");
        assert_eq!(v["findings"][0]["id"], "admission_saturation");
        assert_eq!(v["findings"][0]["category"], "bottleneck");
        assert_eq!(v["findings"][0]["confidence"], "high");
        assert_eq!(v["source"]["engine"], "vllm");
        assert_eq!(v["objectives"][0]["verdict"], "FAIL");
        let two: serde_json::Value =
            serde_json::from_str(&json(&[diagnosis(), diagnosis()]).unwrap()).unwrap();
        assert_eq!(two.as_array().map(Vec::len), Some(2));
    }
}
