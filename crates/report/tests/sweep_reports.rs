//! Regression tests for defects a user found in the sweep's run reports (report.md, report.html,
//! the terminal summary). Every expected string is worked out by hand from the run built below.

use headroom_core::Verdict;
use headroom_core::run::*;
use headroom_report::{html, markdown, terminal};
use std::collections::BTreeMap;

fn summary(count: u64, p50: f64, p90: f64, p95: f64, p99: f64) -> LatencySummary {
    LatencySummary {
        count,
        mean_s: p50,
        p50_s: p50,
        p90_s: p90,
        p95_s: p95,
        p99_s: p99,
        max_s: p99 * 2.0,
    }
}

fn objective(id: &str, description: &str, threshold: f64, observed: f64) -> ObjectiveResult {
    ObjectiveResult {
        share: None,
        bound: Default::default(),
        source: None,
        id: serde_json::from_value(serde_json::json!(id)).unwrap(),
        description: description.into(),
        threshold,
        observed: Some(observed),
        verdict: if observed <= threshold {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        samples: 40,
        reason: String::new(),
    }
}

/// A level of 64 concurrent requests: 26 started in its 5 s window (all cancelled at the drain),
/// 37 finished `length` over the whole level; TTFT p50/p90/p95/p99 = 40/70/80/90 ms, ITL p95 =
/// 26.5 ms, p99 = 40 ms, E2E p90/p95/p99 = 2.5/2.8/3.1 s, no TPOT observation (an empty
/// histogram, written with zero percentiles).
fn level(load: f64, objectives: Vec<ObjectiveResult>) -> LevelResult {
    let mut latency = BTreeMap::new();
    latency.insert("ttft".to_string(), summary(26, 0.04, 0.07, 0.08, 0.09));
    latency.insert("itl".to_string(), summary(4906, 0.02, 0.025, 0.0265, 0.04));
    latency.insert("e2e".to_string(), summary(26, 2.0, 2.5, 2.8, 3.1));
    latency.insert("tpot".to_string(), LatencySummary::default());
    let verdict = Verdict::combine(objectives.iter().map(|o| o.verdict));
    LevelResult {
        load,
        mode: LoadMode::Concurrency,
        started_unix_s: 1000.0,
        window_s: 5.0,
        window_note: "full".into(),
        outcomes: [("client_cancel".to_string(), 26)].into(),
        level_outcomes: [
            ("length".to_string(), 37),
            ("client_cancel".to_string(), 57),
        ]
        .into(),
        latency,
        request_rate_per_s: 4.51,
        output_tokens_per_s: 2764.0,
        goodput_per_s: Some(0.0),
        tokens: TokenCounts::default(),
        objectives,
        verdict,
        client: ClientHealth::default(),
        server: None,
        histograms: "histograms/L000.json".into(),
        repeats: Vec::new(),
        warnings: vec![],
    }
}

/// The engine's view of a level: scrapes at 998 (warm-up), 1000.0004 (the window opens) and
/// 1007.32 (after the drain): 7.3196 s of scrapes behind the engine's figures.
fn server() -> ServerView {
    ServerView {
        engine: "vllm".into(),
        figures: [
            ("requests_finished".to_string(), 33.0),
            ("generation_tokens".to_string(), 20232.0),
            ("queue_time_mean_s".to_string(), 0.09),
        ]
        .into(),
        scrapes: vec![
            "scrapes/L000-0000-engine@998.000.prom".into(),
            "scrapes/L000-0000-dcgm@998.002.prom".into(),
            "scrapes/L000-0001-engine@1000.0004.prom".into(),
            "scrapes/L000-0002-engine@1007.320.prom".into(),
        ],
        ..ServerView::default()
    }
}

/// One single-class phase whose objectives cover every kind (latency on each signal at several
/// percentiles, error ratio, and an id of no known kind), and a mix phase with the same kinds
/// per class, as the sweep names them (`class/id`, `class: description`).
fn run() -> RunResult {
    let mut single = level(
        64.0,
        vec![
            objective("ttft_p99", "TTFT p99 < 300 ms", 0.3, 0.09),
            objective("itl_p95", "ITL p95 < 50 ms", 0.05, 0.0265),
            objective("e2e_p90", "E2E p90 < 3 s", 3.0, 2.5),
            objective("queue_time_p95", "queue time p95 < 300 ms", 0.3, 0.0874),
            objective("error_rate", "errors + aborts < 0.5%", 0.005, 0.0),
        ],
    );
    single.server = Some(server());
    let mut breach = level(
        128.0,
        vec![
            objective("ttft_p99", "TTFT p99 < 300 ms", 0.3, 0.09),
            objective("error_rate", "errors + aborts < 0.5%", 0.005, 0.02),
        ],
    );
    breach.histograms = "histograms/L001.json".into();
    let mix = level(
        32.0,
        vec![
            objective("claims/ttft_p99", "claims: TTFT p99 < 300 ms", 0.3, 0.09),
            objective("claims/itl_p95", "claims: ITL p95 < 50 ms", 0.05, 0.0265),
            objective(
                "claims/error_rate",
                "claims: errors + aborts < 0.5%",
                0.005,
                0.004,
            ),
            objective("long/ttft_p95", "long: TTFT p95 < 1 s", 1.0, 0.75),
            objective(
                "long/queue_time_p95",
                "long: queue time p95 < 500 ms",
                0.5,
                0.0874,
            ),
            objective(
                "long/error_rate",
                "long: errors + aborts < 0.5%",
                0.005,
                0.0,
            ),
        ],
    );
    let mut mix_fail = level(
        64.0,
        vec![objective(
            "long/error_rate",
            "long: errors + aborts < 0.5%",
            0.005,
            0.0125,
        )],
    );
    mix_fail.histograms = "histograms/L003.json".into();
    RunResult {
        schema_version: RESULTS_SCHEMA_VERSION,
        status: RunStatus::Complete,
        phases: vec![
            PhaseResult {
                name: "claims".into(),
                classes: vec![("claims".into(), 1.0)],
                mode: LoadMode::Concurrency,
                levels: vec![single, breach],
                capacity: None,
                first_fail: Some(128.0),
                first_breach: serde_json::from_str("\"error_rate\"").unwrap(),
                capacity_band: None,
                search_note: "bracketed".into(),
            },
            PhaseResult {
                name: "mix".into(),
                classes: vec![("claims".into(), 9.0), ("long".into(), 1.0)],
                mode: LoadMode::Concurrency,
                levels: vec![mix, mix_fail],
                capacity: Some(32.0),
                first_fail: Some(64.0),
                first_breach: serde_json::from_str("\"long/error_rate\"").unwrap(),
                capacity_band: None,
                search_note: "bracketed".into(),
            },
        ],
        warnings: vec![],
    }
}

/// The objective rows of every kind, in both a class's own phase and the mix, with the value
/// in the objective's unit: an error ratio as percent (never `0 µs`, the defect), a latency as
/// a duration.
const OBJECTIVE_ROWS: [(&str, &str); 11] = [
    ("TTFT p99 < 300 ms", "90 ms"),
    ("ITL p95 < 50 ms", "26.5 ms"),
    ("E2E p90 < 3 s", "2.5 s"),
    ("queue time p95 < 300 ms", "87.4 ms"),
    ("errors + aborts < 0.5%", "0%"),
    ("claims: TTFT p99 < 300 ms", "90 ms"),
    ("claims: ITL p95 < 50 ms", "26.5 ms"),
    ("claims: errors + aborts < 0.5%", "0.4%"),
    ("long: TTFT p95 < 1 s", "750 ms"),
    ("long: queue time p95 < 500 ms", "87.4 ms"),
    ("long: errors + aborts < 0.5%", "0%"),
];

#[test]
fn every_objective_kind_prints_in_its_own_unit_in_markdown() {
    let md = markdown::render(&run());
    for (desc, value) in OBJECTIVE_ROWS {
        let row = format!("| {desc} | {value} | ");
        assert!(md.contains(&row), "{row} not in\n{md}");
    }
    assert!(!md.contains("0 µs |"), "{md}");
}

#[test]
fn every_objective_kind_prints_in_its_own_unit_in_html() {
    let h = html::render(&run());
    // The full report's objective tables, rendered: description cell, then the observed cell
    // (right-aligned). `<` in a description is escaped.
    for (desc, value) in OBJECTIVE_ROWS {
        let row = format!(
            "<td>{}</td><td style=\"text-align: right\">{value}</td>",
            desc.replace('<', "&lt;")
        );
        assert!(h.contains(&row), "{row} not in\n{h}");
    }
    assert!(!h.contains("0 µs<"), "{h}");
}

#[test]
fn the_terminal_summary_prints_class_objectives_in_their_unit() {
    let t = terminal::render(&run());
    // The mix's capacity (32): tightest headroom is claims' error ratio, 0.005 / 0.004 = 1.25.
    assert!(
        t.contains("claims/error_rate 0.4% against 0.5%, 1.25×"),
        "{t}"
    );
    // The mix broke on long's error ratio at 64: 1.25 % observed.
    assert!(
        t.contains("long: errors + aborts < 0.5% (observed 1.25%) at 64 concurrent"),
        "{t}"
    );
    // The class phase broke on its error ratio at 128: 2 %.
    assert!(
        t.contains("errors + aborts < 0.5% (observed 2%) at 128 concurrent"),
        "{t}"
    );
}

/// The level table's latency columns are at the percentiles the phase's objectives judge
/// (TTFT p99, E2E p90 in the class phase; TTFT p95 and p99 in the mix), p95 for a signal no
/// objective judges (TPOT, and E2E in the mix), with the figure at that percentile.
#[test]
fn level_tables_show_the_percentiles_the_objectives_judge() {
    let md = markdown::render(&run());
    assert!(
        md.contains("| rates from | TTFT p99 | ITL p95 | TPOT p95 | E2E p90 | objectives failed |"),
        "{md}"
    );
    // TTFT p99 90 ms, ITL p95 26.5 ms, no TPOT, E2E p90 2.5 s.
    assert!(md.contains("| 90 ms | 26.5 ms | – | 2.5 s |"), "{md}");
    assert!(
        md.contains(
            "| rates from | TTFT p95 | TTFT p99 | ITL p95 | TPOT p95 | E2E p95 | objectives failed |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| 80 ms | 90 ms | 26.5 ms | – | 2.8 s |"),
        "{md}"
    );
    let h = html::render(&run());
    assert!(
        h.contains("<th>rates from</th><th>TTFT p99</th><th>ITL p95</th></tr>"),
        "{h}"
    );
    assert!(
        h.contains("<th>rates from</th><th>TTFT p95</th><th>TTFT p99</th><th>ITL p95</th></tr>"),
        "{h}"
    );
    assert!(h.contains("<td>90 ms</td><td>26.5 ms</td></tr>"), "{h}");
    assert!(
        h.contains("<td>80 ms</td><td>90 ms</td><td>26.5 ms</td></tr>"),
        "{h}"
    );
}

/// `req/s` and `out tok/s` say where they come from and over what span; the client's own
/// count-based rate (26 started in 5 s: 5.20/s) stands beside them.
#[test]
fn throughput_columns_name_their_source_and_span() {
    let md = markdown::render(&run());
    // Engine counters over 1007.32 − 1000.0004 = 7.3196 s of scrapes.
    assert!(
        md.contains(
            "| 64 concurrent | PASS | 5.0 s | 26 | 5.20 | 0 of 37 | 4.51 | 2764 | server, 7.3 s |"
        ),
        "{md}"
    );
    // No engine view: the client's figures.
    assert!(
        md.contains(
            "| 128 concurrent | FAIL | 5.0 s | 26 | 5.20 | 0 of 37 | 4.51 | 2764 | client |"
        ),
        "{md}"
    );
    assert_eq!(
        md.matches(headroom_report::levels::RATES_NOTE).count(),
        2,
        "one note under each phase's table"
    );
    assert!(md.contains("vllm:request_success_total"), "{md}");
    let h = html::render(&run());
    assert!(
        h.contains("<td>26</td><td>5.20</td><td>4.51</td><td>2764</td><td>server, 7.3 s</td>"),
        "{h}"
    );
    assert!(
        h.contains("<td>26</td><td>5.20</td><td>4.51</td><td>2764</td><td>client</td>"),
        "{h}"
    );
    assert!(
        h.contains("<p class=\"note\"><code>requests</code> and"),
        "{h}"
    );
}

/// Where the engine's figures are shown, one sentence says which requests they cover.
#[test]
fn server_figures_state_their_population() {
    let md = markdown::render(&run());
    assert!(
        md.contains(&format!(
            "Server (`vllm`, over 7.3 s of scrapes): {}\n\n- generation_tokens: 20232\n",
            headroom_report::levels::SERVER_POPULATION_NOTE
        )),
        "{md}"
    );
    assert_eq!(md.matches("Server (`").count(), 1, "{md}");
    let h = html::render(&run());
    assert!(
        h.contains(
            "<p>Server (<code>vllm</code>, over 7.3 s of scrapes): The engine's per-request figures below (queue, prefill"
        ),
        "{h}"
    );
    assert!(
        h.contains("including requests started in the warm-up"),
        "{h}"
    );
}

/// report.html's "Full report" is rendered HTML: tables are tables, Markdown escapes are gone,
/// and text that looks like HTML or a link stays inert text.
#[test]
fn the_full_report_is_rendered_html_and_stays_inert() {
    let mut r = run();
    r.phases[0].name = "<script>alert(1)</script> [x](https://example.com/) a|b".into();
    r.warnings = vec!["<img src=https://example.com/x.png> <b>bold</b>".into()];
    let h = html::render(&r);
    let full = &h[h.find("<h2>Full report</h2>").expect("full report")..];
    assert!(!full.contains("<pre>| load"), "{full}");
    // One level table per phase and one objective table per level (4 levels).
    assert_eq!(full.matches("<table>").count(), 6, "{full}");
    assert!(
        full.contains("<th style=\"text-align: right\">load</th>"),
        "{full}"
    );
    assert!(!full.contains("\\|"), "{full}");
    assert!(
        full.contains("<h4>Phase <code>&lt;script&gt;alert(1)&lt;/script&gt; [x](https://example.com/) a|b</code></h4>"),
        "{full}"
    );
    // Nothing executable and nothing referenced outside the page.
    for bad in ["<script", "<img", "<b>", "<a ", "href="] {
        assert!(!h.contains(bad), "{bad} in {h}");
    }
    assert!(h.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{h}");
    assert!(
        h.contains("&lt;img src=https://example.com/x.png&gt;"),
        "{h}"
    );
    // Headings sit under the page's own "Full report".
    assert!(full.contains("<h4>Summary</h4>"), "{full}");
    assert!(!full.contains("<h1>"), "{full}");
}
