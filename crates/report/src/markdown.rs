//! `report.md`: the run summary, one section per phase with its levels, findings and warnings.

use crate::fmt_load;
use headroom_core::run::{LevelResult, PhaseResult, RunResult, RunStatus};
use headroom_core::slo::fmt_num;

/// The `report.md` exporter ([`render`]).
pub static EXPORTER: crate::export::Text = crate::export::Text {
    name: "markdown",
    file_name: headroom_core::run_dir::REPORT_MD,
    render,
};

/// Renders the whole run as Markdown.
pub fn render(run: &RunResult) -> String {
    let mut o = String::from("# Headroom sweep report\n\n");
    match &run.status {
        RunStatus::Complete => {}
        RunStatus::Running => {
            o.push_str("> **Partial results**: the run is still in progress or was killed.\n\n")
        }
        RunStatus::Stopped { reason } => o.push_str(&format!(
            "> **Stopped early**: {}. {}\n\n",
            esc(reason),
            cut_short_note(run)
        )),
    }
    o.push_str("## Summary\n\n```\n");
    o.push_str(&crate::terminal::render(run));
    o.push_str("```\n\n");
    for p in &run.phases {
        phase(&mut o, p);
    }
    if !run.warnings.is_empty() {
        o.push_str("## Warnings\n\n");
        for w in &run.warnings {
            o.push_str(&format!("- {}\n", esc(w)));
        }
        o.push('\n');
    }
    o
}

fn phase(o: &mut String, p: &PhaseResult) {
    o.push_str(&format!("## Phase {}\n\n", code(&p.name)));
    let classes: Vec<String> = p
        .classes
        .iter()
        .map(|(c, w)| format!("{} (weight {})", esc(c), fmt_num(*w)))
        .collect();
    o.push_str(&format!(
        "Classes: {}. Search: {}.\n\n",
        classes.join(", "),
        esc(&p.search_note)
    ));
    // Latency columns at the percentiles the objectives judge (p95 when none judges a signal).
    let cols: Vec<(&str, f64)> = ["ttft", "itl", "tpot", "e2e"]
        .into_iter()
        .flat_map(|sig| {
            crate::levels::objective_percentiles(p, sig)
                .into_iter()
                .map(move |pct| (sig, pct))
        })
        .collect();
    let heads: Vec<String> = cols
        .iter()
        .map(|(s, pct)| crate::levels::percentile_header(s, *pct))
        .collect();
    o.push_str(&format!(
        "| load | verdict | window | requests | started/s | errors | req/s | out tok/s | rates from | {} | objectives failed | objectives inconclusive |\n",
        heads.join(" | ")
    ));
    o.push_str(&format!(
        "|---:|---|---:|---:|---:|---:|---:|---:|---|{}---|---|\n",
        "---:|".repeat(cols.len())
    ));
    for l in &p.levels {
        let lat: Vec<String> = cols
            .iter()
            .map(|(s, pct)| {
                crate::levels::latency_at(l, s, *pct)
                    .map(headroom_core::slo::fmt_duration_s)
                    .unwrap_or_else(|| "–".into())
            })
            .collect();
        let (errors, finished) = l.error_counts();
        let requests = l.outcomes.values().sum::<u64>();
        o.push_str(&format!(
            "| {} | {} | {:.1} s | {} | {:.2} | {} of {} | {:.2} | {:.0} | {} | {} | {} | {} |\n",
            fmt_load(l.load, l.mode),
            l.verdict.as_str(),
            l.window_s,
            requests,
            requests as f64 / l.window_s.max(1e-9),
            errors,
            finished,
            l.request_rate_per_s,
            l.output_tokens_per_s,
            rates_from(l),
            lat.join(" | "),
            crate::join_ids(&l.failed_objectives(), ", "),
            crate::join_ids(&l.inconclusive_objectives(), ", ")
        ));
    }
    o.push_str(&format!("\n{}\n", crate::levels::RATES_NOTE));
    o.push('\n');
    for l in &p.levels {
        level_detail(o, l);
    }
}

fn level_detail(o: &mut String, l: &LevelResult) {
    o.push_str(&format!(
        "### {} — {}\n\n",
        fmt_load(l.load, l.mode),
        l.verdict.as_str()
    ));
    if let Some(i) = level_index(l) {
        o.push_str(&format!(
            "Level {i} of the run: `headroom diagnose --from RUN_DIR --level {i}` re-reads the engine's view of this window.\n\n"
        ));
    }
    o.push_str("| objective | observed | verdict | samples | note |\n|---|---:|---|---:|---|\n");
    for ob in &l.objectives {
        o.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            esc(&ob.description),
            ob.observed
                .map(|v| crate::fmt_observed(ob.unit(), v, ob.threshold))
                .unwrap_or_else(|| "–".into()),
            ob.verdict.as_str(),
            ob.samples,
            esc(&ob.reason)
        ));
    }
    let outcomes: Vec<String> = l.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let outcomes = if outcomes.is_empty() {
        "no request started in the window".to_string()
    } else {
        outcomes.join(", ")
    };
    o.push_str(&format!(
        "\nOutcomes of the requests started in the window: {outcomes}. Window: {}.\n",
        esc(&l.window_note)
    ));
    let t = &l.tokens;
    let finished: u64 = ["stop", "length"]
        .iter()
        .filter_map(|k| l.outcomes.get(*k))
        .sum();
    if finished == 0 {
        // Usage arrives with a request's last chunk: none of the window's requests finished.
        o.push_str("Tokens: no request of the window finished within it and its drain, so none reported usage (answers outlast the window; lengthen --measure to compare requested and realised tokens).\n");
    } else {
        o.push_str(&format!(
            "Tokens (requests with usage): prompt {} requested / {} realised; output cap {} / {} realised.\n",
            t.prompt_requested, t.prompt_realised, t.output_cap_requested, t.output_realised
        ));
    }
    // Send lag only means something in open loop (a closed loop sends when a slot frees).
    let lag = if l.mode == headroom_core::run::LoadMode::Rate {
        format!(
            ", send lag p99 {} (pacer woken late p99 {})",
            headroom_core::slo::fmt_duration_s(l.client.send_lag_p99_s.max(1e-9)),
            headroom_core::slo::fmt_duration_s(l.client.pacer_late_p99_s.max(1e-9))
        )
    } else {
        String::new()
    };
    o.push_str(&format!(
        "Client: {:.2} CPU s over {:.1} s, {:.2} µs per chunk{lag}.\n",
        l.client.cpu_s, l.client.wall_s, l.client.cpu_per_chunk_us,
    ));
    if let Some(s) = &l.server {
        o.push_str(&format!(
            "\nServer ({}{}): {}\n\n",
            code(&s.engine),
            crate::levels::server_span_s(l)
                .map(|s| format!(", over {s:.1} s of scrapes"))
                .unwrap_or_default(),
            crate::levels::SERVER_POPULATION_NOTE
        ));
        for (k, v) in &s.figures {
            o.push_str(&format!("- {k}: {}\n", fmt_num(*v)));
        }
        for r in &s.reconciliation {
            o.push_str(&format!(
                "- reconcile {}: client {} / server {} — {}{}\n",
                r.what,
                fmt_num(r.client),
                fmt_num(r.server),
                // Counts must agree (a disagreement voids the level); the TTFT breakdown is a
                // decomposition that either holds or cannot be derived from the engine's means.
                match (r.agrees, r.what.starts_with("ttft_")) {
                    (true, _) => "agrees",
                    (false, true) => "not derivable",
                    (false, false) => "**disagrees**",
                },
                if r.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", esc(&r.note))
                }
            ));
        }
        for f in &s.findings {
            o.push_str(&format!(
                "- **finding {}** ({:?}): {} — first action: {}\n",
                code(&f.id),
                f.confidence,
                esc(&f.title),
                esc(&f.action)
            ));
        }
        for n in &s.notes {
            o.push_str(&format!("- note: {}\n", esc(n)));
        }
    }
    for w in &l.warnings {
        o.push_str(&format!("- warning: {}\n", esc(w)));
    }
    o.push('\n');
}

/// The `rates from` cell: where `req/s` and `out tok/s` come from (one label when both come
/// from the same place).
pub(crate) fn rates_from(l: &LevelResult) -> String {
    use crate::levels::{rate_source_label, request_rate_source, token_rate_source};
    let (r, t) = (request_rate_source(l), token_rate_source(l));
    if r == t {
        rate_source_label(r)
    } else {
        format!(
            "req/s: {}; tok/s: {}",
            rate_source_label(r),
            rate_source_label(t)
        )
    }
}

/// What the banner of a stopped run says about its levels: which were cut short (window note
/// `interrupted: …`, `server lost: …`, `aborted: …`, the sweep's voided levels, which give no
/// verdict) and that the others ran to the end.
fn cut_short_note(run: &RunResult) -> String {
    let cut: Vec<String> = run
        .phases
        .iter()
        .flat_map(|p| {
            p.levels
                .iter()
                .filter(|l| is_cut_short(l))
                .map(move |l| format!("{} at {}", code(&p.name), fmt_load(l.load, l.mode)))
        })
        .collect();
    if cut.is_empty() {
        "Every level below ran to the end and its verdict stands.".into()
    } else {
        format!(
            "Cut short, so INCONCLUSIVE and never counted as capacity: {}. Every other level below ran to the end and its verdict stands.",
            cut.join(", ")
        )
    }
}

/// A level the sweep voided because it did not run as specified.
fn is_cut_short(l: &LevelResult) -> bool {
    ["interrupted", "server lost", "aborted"]
        .iter()
        .any(|s| l.window_note.starts_with(s))
}

/// A level's index in the run (the `N` of `scrapes/LNNN-…` and `histograms/LNNN.json`), from
/// its histogram file name; `None` when the name is not in that form.
pub(crate) fn level_index(l: &LevelResult) -> Option<u32> {
    headroom_core::run_dir::histogram_index(&l.histograms)
}

/// `s` as an inline code span outside a table, where a backslash would print: a run of
/// backticks longer than any in `s` delimits it (padded with a space when `s` starts or ends with
/// one, as CommonMark strips one), and a line break becomes a space.
fn code(s: &str) -> String {
    let s = s.replace('\n', " ");
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// Escapes text for a Markdown table cell.
fn esc(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn sections_per_phase_and_level() {
        let s = super::render(&crate::testdata::run());
        assert!(s.contains("## Phase `chat <&>`"));
        assert!(s.contains("| 16 concurrent | FAIL |"), "{s}");
        assert_eq!(s.matches("### ").count(), 3);
        assert!(s.contains("## Warnings"));
        // testdata names its histogram files `histograms/x.json`: no index to show.
        assert!(!s.contains("--level"), "{s}");
        let mut run = crate::testdata::run();
        run.phases[0].levels[1].histograms = "histograms/L007.json".into();
        let s = super::render(&run);
        assert_eq!(s.matches("--level 7`").count(), 1, "{s}");
    }

    /// A level whose requests all outlasted the window says so instead of printing zero tokens
    /// as if they had been counted, and an empty outcome list reads as such.
    #[test]
    fn a_level_with_no_finished_request_says_why_it_has_no_token_counts() {
        let mut run = crate::testdata::run();
        let l = &mut run.phases[0].levels[0];
        l.tokens = Default::default();
        l.outcomes.clear();
        run.phases[0].levels[1].outcomes = [("client_cancel".to_string(), 25u64)].into();
        run.phases[0].levels[2].tokens.prompt_realised = 4321;
        let s = super::render(&run);
        assert!(
            s.contains("Tokens: no request of the window finished within it and its drain"),
            "{s}"
        );
        assert!(
            s.contains(
                "Outcomes of the requests started in the window: no request started in the window."
            ),
            "{s}"
        );
        assert_eq!(
            s.matches("Tokens: no request of the window finished")
                .count(),
            2,
            "{s}"
        );
        // The level with finished requests keeps its counts.
        assert!(
            s.contains("Tokens (requests with usage): prompt 0 requested / 4321 realised"),
            "{s}"
        );
    }

    /// A count that differs between client and server "disagrees" (it voids the level); a TTFT
    /// decomposition the engine's means cannot give is "not derivable", not a disagreement.
    #[test]
    fn reconciliation_rows_read_by_kind() {
        use headroom_core::run::{Reconciliation, ServerView};
        let row = |what: &str, agrees: bool| Reconciliation {
            what: what.into(),
            client: 1.0,
            server: 2.0,
            agrees,
            note: String::new(),
        };
        let mut run = crate::testdata::run();
        run.phases[0].levels[0].server = Some(ServerView {
            engine: "vllm".into(),
            reconciliation: vec![
                row("requests_length", false),
                row("ttft_unexplained_mean_s", false),
                row("output_tokens", true),
            ],
            ..ServerView::default()
        });
        let s = super::render(&run);
        assert!(
            s.contains("reconcile requests_length: client 1 / server 2 — **disagrees**"),
            "{s}"
        );
        assert!(
            s.contains("reconcile ttft_unexplained_mean_s: client 1 / server 2 — not derivable"),
            "{s}"
        );
        assert!(
            s.contains("reconcile output_tokens: client 1 / server 2 — agrees"),
            "{s}"
        );
    }

    /// The banner of a stopped run names the levels that were cut short and never says they
    /// are complete; inconclusive objectives are listed apart from failed ones.
    #[test]
    fn a_stopped_run_names_its_cut_short_levels() {
        use headroom_core::Verdict;
        use headroom_core::run::RunStatus;
        let mut run = crate::testdata::run();
        run.status = RunStatus::Stopped {
            reason: "interrupted (Ctrl-C)".into(),
        };
        let s = super::render(&run);
        assert!(s.contains("Every level below ran to the end"), "{s}");
        let l = &mut run.phases[0].levels[1];
        l.window_note = "interrupted: the window was cut short after 2.9 s (Ctrl-C)".into();
        l.verdict = Verdict::Inconclusive;
        l.objectives[0].verdict = Verdict::Inconclusive;
        let s = super::render(&run);
        assert!(
            s.contains("Cut short, so INCONCLUSIVE and never counted as capacity: `chat <&>` at 8 concurrent."),
            "{s}"
        );
        assert!(!s.contains("complete and valid"), "{s}");
        // Row of the 8-concurrent level: nothing failed, ttft_p95 inconclusive.
        assert!(s.contains("|  | ttft_p95 |\n"), "{s}");
        // The 16-concurrent level: ttft_p95 failed, nothing inconclusive; 41 requests started
        // in 10 s (4.10/s); errors 1 of 41.
        assert!(
            s.contains("| 16 concurrent | FAIL | 10.0 s | 41 | 4.10 | 1 of 41 |"),
            "{s}"
        );
        assert!(s.contains("| ttft_p95 |  |\n"), "{s}");
    }
}
