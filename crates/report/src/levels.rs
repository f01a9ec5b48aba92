//! What the per-level tables of `report.md` and `report.html` show and how their columns are
//! labelled: which latency percentiles (those the phase's objectives judge), and where the
//! throughput columns come from (the engine's counters over its scrapes, or the client's count).
//! Nothing here computes a statistic: it picks recorded figures and reads recorded times.

use headroom_core::LatencySignal;
use headroom_core::run::{LatencySummary, LevelResult, PhaseResult};

/// The percentiles a phase's objectives judge on `signal` (`ttft`, `itl`, `tpot`, `e2e`, as
/// `headroom_core::LatencySignal::name` writes them), ascending and without repeats, over every
/// level and, in a mix phase, every class (`claims_assistant/ttft_p99`). `[95.0]` when no
/// objective uses the signal, so a column still shows the usual tail.
pub fn objective_percentiles(p: &PhaseResult, signal: &str) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for o in p.levels.iter().flat_map(|l| l.objectives.iter()) {
        if let Some(pct) = o.id.percentile()
            && o.id.signal().map(LatencySignal::name) == Some(signal)
            && !out.contains(&pct)
        {
            out.push(pct);
        }
    }
    if out.is_empty() {
        out.push(95.0);
    }
    out.sort_by(f64::total_cmp);
    out
}

/// The column header of `signal` at `pct`: `TTFT p99`, `ITL p99.9`.
pub fn percentile_header(signal: &str, pct: f64) -> String {
    format!("{} p{}", signal_display(signal), fmt_pct(pct))
}

/// `signal`'s upper-case display name (`TTFT`, `E2E`, `queue time`), the name itself when it
/// is no `headroom_core::LatencySignal`.
fn signal_display(signal: &str) -> String {
    serde_json::from_value::<headroom_core::LatencySignal>(serde_json::Value::String(
        signal.to_string(),
    ))
    .map_or_else(|_| signal.to_string(), |s| s.display().to_string())
}

/// A percentile as `slo.yaml` writes it: `95`, `99.9`.
fn fmt_pct(p: f64) -> String {
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The level's figure for `signal` at `pct`, seconds: from the client's latency summary when
/// it holds that percentile (p50, p90, p95, p99 of the requests started in the window); for
/// another percentile, the observed value of the level's own objective with that id (a
/// single-class phase; a mix phase judges each class apart and has no all-classes figure).
/// `None` when nothing was observed (an empty histogram's percentiles are no measurement).
pub fn latency_at(l: &LevelResult, signal: &str, pct: f64) -> Option<f64> {
    let s: &LatencySummary = l.latency.get(signal).filter(|s| s.count > 0)?;
    let from_summary = [
        (50.0, s.p50_s),
        (90.0, s.p90_s),
        (95.0, s.p95_s),
        (99.0, s.p99_s),
    ]
    .into_iter()
    .find(|(p, _)| *p == pct)
    .map(|(_, v)| v);
    from_summary.or_else(|| {
        l.objectives
            .iter()
            .find(|o| {
                o.id.class().is_none()
                    && o.id.signal().map(LatencySignal::name) == Some(signal)
                    && o.id.percentile() == Some(pct)
            })
            .and_then(|o| o.observed)
    })
}

/// Where one of a level's throughput figures (`request_rate_per_s`, `output_tokens_per_s`)
/// comes from. The sweep (crate `load`, `judge_level`) takes each from the engine's counter
/// when the level's scrapes held it, else from the client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateSource {
    /// The engine's counter (`vllm:request_success_total{finished_reason="stop"|"length"}`,
    /// `vllm:generation_tokens_total`) between the scrape that opened the measurement window and
    /// the level's last scrape (after the drain): what finished in that span, whenever it
    /// started. `span_s` is that span in seconds, when the scrape file names give it.
    Server {
        /// Seconds between the two scrapes.
        span_s: Option<f64>,
    },
    /// The client's requests started in the window that finished (`stop`/`length`), and their
    /// `usage` output tokens, over the window.
    Client,
}

/// Where the level's `request_rate_per_s` comes from: the engine when its view holds the
/// finished-request counter (figure `requests_finished`).
pub fn request_rate_source(l: &LevelResult) -> RateSource {
    rate_source(l, "requests_finished")
}

/// Where the level's `output_tokens_per_s` comes from: the engine when its view holds the
/// generation-token counter (figure `generation_tokens`).
pub fn token_rate_source(l: &LevelResult) -> RateSource {
    rate_source(l, "generation_tokens")
}

fn rate_source(l: &LevelResult, figure: &str) -> RateSource {
    match &l.server {
        Some(s) if s.figures.contains_key(figure) => RateSource::Server {
            span_s: server_span_s(l),
        },
        _ => RateSource::Client,
    }
}

/// Seconds between the engine scrape that opened the level's measurement window (the one taken
/// nearest its start, `started_unix_s`) and the level's last engine scrape, read from the scrape
/// file names the sweep writes (`scrapes/LNNN-IIII-engine@<unix seconds>.prom`). `None` when
/// fewer than two engine scrapes are named so.
pub fn server_span_s(l: &LevelResult) -> Option<f64> {
    let times: Vec<f64> = l
        .server
        .as_ref()?
        .scrapes
        .iter()
        .filter_map(|f| {
            let n = headroom_core::run_dir::parse_scrape_file_name(f.rsplit('/').next()?)?;
            (n.kind == "engine").then_some(n.at_unix_s)
        })
        .collect();
    let start = times.iter().copied().min_by(|a, b| {
        (a - l.started_unix_s)
            .abs()
            .total_cmp(&(b - l.started_unix_s).abs())
    })?;
    let end = times.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (end > start).then_some(end - start)
}

/// The short label of a rate's source for a table cell: `server, 7.3 s`, `server`, `client`.
pub fn rate_source_label(src: RateSource) -> String {
    match src {
        RateSource::Server { span_s: Some(s) } => format!("server, {s:.1} s"),
        RateSource::Server { span_s: None } => "server".into(),
        RateSource::Client => "client".into(),
    }
}

/// The note printed under a level table: what `requests`/`started/s` count and where `req/s`
/// and `out tok/s` come from, so a reader does not divide one by the other.
pub const RATES_NOTE: &str = "`requests` and `started/s`: requests the client started in the measurement window, and that count over the window. `req/s` (completed requests) and `out tok/s` where `rates from` says *server*: the engine's own counters (for vLLM `vllm:request_success_total{finished_reason=\"stop\"|\"length\"}` and `vllm:generation_tokens_total`) from the scrape that opened the window to the level's last scrape after the drain, over that span (the seconds given): requests that finished then, including ones started in the warm-up, so they are not `requests` ÷ `window`. Where it says *client*: no engine counter was read, and the figure is the client's window-started requests that finished (stop or length), and their usage tokens, over the window.";

/// The sentence printed where a level's server figures are shown.
pub const SERVER_POPULATION_NOTE: &str = "The engine's per-request figures below (queue, prefill, decode and inference times, server TTFT, ITL and E2E, token counts, finished requests) cover the requests that finished between the scrape that opened the measurement window and the level's last scrape after the drain, including requests started in the warm-up; its gauges (running, waiting, KV cache, GPU) are sampled over the same span. The client's figures above cover the requests started in the window: the populations differ, so their percentiles and means need not agree.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_the_objectives_of_every_class() {
        let mut run = crate::testdata::run();
        let p = &mut run.phases[0];
        assert_eq!(objective_percentiles(p, "ttft"), vec![95.0]);
        // No objective on E2E: the usual p95.
        assert_eq!(objective_percentiles(p, "e2e"), vec![95.0]);
        p.levels[0].objectives[0].id = crate::testdata::id("a/ttft_p99");
        p.levels[1].objectives[0].id = crate::testdata::id("b/ttft_p99.9");
        p.levels[2].objectives[0].id = crate::testdata::id("e2e_p90");
        assert_eq!(objective_percentiles(p, "ttft"), vec![99.0, 99.9]);
        assert_eq!(objective_percentiles(p, "e2e"), vec![90.0]);
        assert_eq!(percentile_header("ttft", 99.9), "TTFT p99.9");
        assert_eq!(percentile_header("e2e", 90.0), "E2E p90");
    }

    #[test]
    fn latency_at_reads_the_summary_or_the_objective() {
        let mut l = crate::testdata::level(4.0, 0.2, headroom_core::Verdict::Pass);
        // testdata: p50 = p95 / 2, p90 = 0.9 p95, p99 = 1.2 p95.
        assert_eq!(latency_at(&l, "ttft", 50.0), Some(0.1));
        assert_eq!(latency_at(&l, "ttft", 95.0), Some(0.2));
        assert_eq!(latency_at(&l, "ttft", 99.0), Some(0.2 * 1.2));
        assert_eq!(latency_at(&l, "ttft", 99.9), None);
        l.objectives[0].id = crate::testdata::id("ttft_p99.9");
        l.objectives[0].observed = Some(0.31);
        assert_eq!(latency_at(&l, "ttft", 99.9), Some(0.31));
        // A class's objective is not the whole mix's figure.
        l.objectives[0].id = crate::testdata::id("chat/ttft_p99.9");
        assert_eq!(latency_at(&l, "ttft", 99.9), None);
        // An empty histogram has no percentiles.
        l.latency.get_mut("ttft").unwrap().count = 0;
        assert_eq!(latency_at(&l, "ttft", 95.0), None);
    }

    #[test]
    fn rates_name_their_source_and_span() {
        use headroom_core::run::ServerView;
        let mut l = crate::testdata::level(4.0, 0.2, headroom_core::Verdict::Pass);
        assert_eq!(request_rate_source(&l), RateSource::Client);
        l.started_unix_s = 1000.0;
        l.server = Some(ServerView {
            figures: [("requests_finished".to_string(), 33.0)].into(),
            // Warm-up scrape at 998, the window's at 1000.0004, the last after the drain at
            // 1007.32: span 7.3196 s. dcgm scrapes do not count.
            scrapes: vec![
                "scrapes/L000-0000-engine@998.000.prom".into(),
                "scrapes/L000-0001-engine@1000.0004.prom".into(),
                "scrapes/L000-0001-dcgm@1000.001.prom".into(),
                "scrapes/L000-0002-engine@1007.3200.prom".into(),
                "scrapes/L000-0002-dcgm@1009.000.prom".into(),
            ],
            ..ServerView::default()
        });
        let RateSource::Server { span_s: Some(s) } = request_rate_source(&l) else {
            panic!("{:?}", request_rate_source(&l));
        };
        assert!((s - 7.3196).abs() < 1e-9, "{s}");
        assert_eq!(rate_source_label(request_rate_source(&l)), "server, 7.3 s");
        // No generation-token counter: the token rate is the client's.
        assert_eq!(token_rate_source(&l), RateSource::Client);
        l.server.as_mut().unwrap().scrapes.truncate(1);
        assert_eq!(request_rate_source(&l), RateSource::Server { span_s: None });
        assert_eq!(rate_source_label(request_rate_source(&l)), "server");
    }
}
