//! The engine's own account of a level, from its `/metrics` scrapes, and its reconciliation with
//! what the client measured.
//!
//! Figures are named with their unit and come from one canonical signal each (see
//! `headroom_signals::Signal` for the metric names per engine). Reconciliation compares counts
//! that must agree exactly when no request was cut short: requests finished by reason and output
//! tokens; and it shows how much of the client's TTFT the server's queue + prefill explain.

use headroom_core::objective::Bound;
use headroom_core::run::{Reconciliation, ServerView};
use headroom_diagnose::Assessment;
use headroom_signals::{Signal, Window};

/// What the client counted over the whole level (warm-up, window and drain), for reconciliation
/// with the server's counters over the same span.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientTotals {
    /// Requests that ended `stop`.
    pub stop: u64,
    /// Requests that ended `length`.
    pub length: u64,
    /// Requests the client cancelled or gave up on (the server should count them as `abort`).
    pub cancelled: u64,
    /// Requests the server ended with `abort` or `error` on its own.
    pub server_abort_or_error: u64,
    /// Σ `usage.completion_tokens` of requests that finished with usage.
    pub output_tokens: u64,
    /// Σ `usage.prompt_tokens` of requests that finished with usage.
    pub prompt_tokens: u64,
    /// Content chunks received by cancelled or failed requests (tokens the server generated that
    /// have no usage).
    pub unfinished_chunks: u64,
}

/// Builds the server view of a level from its measurement window, the assessment of that
/// window, and the reconciliation (computed over the whole level, see [`reconcile`]).
pub fn server_view(
    w: &Window,
    assessment: &Assessment,
    reconciliation: Vec<Reconciliation>,
    scrapes: Vec<String>,
) -> ServerView {
    let mut v = ServerView {
        engine: w.engine.name().to_string(),
        scrapes,
        ..ServerView::default()
    };
    for step in &assessment.steps {
        for f in &step.figures {
            if f.value.is_finite() {
                v.figures.insert(figure_key(f), f.value);
            }
        }
    }
    v.findings = assessment
        .findings
        .iter()
        .map(|f| f.finding.clone())
        .collect();
    v.reconciliation = reconciliation;
    for r in &assessment.refused {
        v.notes.push(format!("verdict refused: {r}"));
    }
    v.notes.extend(assessment.notes.iter().cloned());
    v
}

/// Client against server over the same span (the whole level: warm-up, window and drain, between
/// the first and the last scrape): finished requests by reason and output tokens.
pub fn reconcile(w: &Window, c: &ClientTotals) -> Vec<Reconciliation> {
    let mut out = Vec::new();
    let Some(by_reason) = w.counters.get(&Signal::RequestsFinished) else {
        return out;
    };
    let server_total: f64 = by_reason.values().sum();
    let client_total = c.stop + c.length + c.cancelled + c.server_abort_or_error;
    // vLLM 0.32 counts a request the client disconnected from in no finished_reason at all
    // (output_processor.abort_requests records only its TTFT); other versions and the engine twin
    // count it as `abort`. So cancelled streams may or may not appear on the server's side.
    let lo = client_total.saturating_sub(c.cancelled) as f64;
    out.push(Reconciliation {
        what: "requests_total".into(),
        client: client_total as f64,
        server: server_total,
        agrees: server_total >= lo - 0.5 && server_total <= client_total as f64 + 0.5,
        note: format!(
            "every request the client sent and saw end, against vllm:request_success_total summed over finished_reason; exact up to the {} cancelled streams, which vLLM 0.32 does not count",
            c.cancelled
        ),
    });
    // A stream the client cancels in its last step may finish on the server (`length`) before
    // the abort arrives, so per-reason counts may trade up to one request per cancellation.
    let race = c.cancelled as f64;
    let server_abort = w
        .counter_key(Signal::RequestsFinished, "abort")
        .unwrap_or(0.0);
    for (key, client, server) in [
        (
            "stop",
            c.stop,
            w.counter_key(Signal::RequestsFinished, "stop")
                .unwrap_or(0.0),
        ),
        (
            "length",
            c.length,
            w.counter_key(Signal::RequestsFinished, "length")
                .unwrap_or(0.0),
        ),
        (
            "abort",
            c.cancelled + c.server_abort_or_error,
            server_abort
                + w.counter_key(Signal::RequestsFinished, "error")
                    .unwrap_or(0.0),
        ),
    ] {
        let diff = (server - client as f64).abs();
        out.push(Reconciliation {
            what: format!("requests_{key}"),
            client: client as f64,
            server,
            agrees: diff <= race + 0.5,
            note: if key == "abort" {
                "client cancellations (counted as aborts by some engines, not at all by vLLM 0.32) and server aborts/errors (vllm:request_success_total{finished_reason=\"abort\"|\"error\"})".into()
            } else {
                format!("vllm:request_success_total{{finished_reason=\"{key}\"}}; within {race} when streams were cancelled")
            },
        });
    }
    if let Some(server) = w.counter(Signal::GenerationTokens) {
        let client_all = (c.output_tokens + c.unfinished_chunks) as f64;
        // Exact when every request finished with usage. A cancelled stream's tokens are known
        // only as chunks received, and the engine keeps generating until it notices the
        // disconnect (a few steps): allow 4 tokens per cancelled stream.
        let slack = 4.0 * race + 0.5;
        out.push(Reconciliation {
            what: "output_tokens".into(),
            client: client_all,
            server,
            agrees: (server - client_all).abs() <= slack,
            note: if c.cancelled == 0 {
                "usage.completion_tokens against vllm:generation_tokens_total; must match exactly"
                    .into()
            } else {
                format!(
                    "{} cancelled streams counted by chunks received (±4 tokens each)",
                    c.cancelled
                )
            },
        });
    }
    out
}

/// The key a step figure is stored under: its name, except that a quantile known only as an
/// upper bound (its rank fell in the histogram's first bucket `[0, le₀]`, so the figure is `le₀`,
/// not an estimate) is stored as `…_upper_bound_s`, so `queue_time_p95_s` never shows vLLM's
/// first bucket edge as if it were a measured p95.
fn figure_key(f: &headroom_diagnose::Figure) -> String {
    if f.bound == Bound::Upper {
        match f.name.strip_suffix("_s") {
            Some(stem) => format!("{stem}_upper_bound_s"),
            None => format!("{}_upper_bound", f.name),
        }
    } else {
        f.name.clone()
    }
}

/// How much of the client's TTFT the engine explains: client mean TTFT against the server's mean
/// queue time + mean prefill time over the measurement window (both exact means: HDR on the
/// client, `_sum / _count` on the server). The remainder is frontend (HTTP, tokenisation,
/// detokenisation), network and gateway time. A negative remainder is reported as such, with why
/// (requests that started before the window finish in it and carry their queue time there).
pub fn ttft_remainder(w: &Window, client_ttft_mean_s: f64) -> Option<Reconciliation> {
    let q = w.histogram(Signal::QueueTime)?.mean()?;
    let p = w.histogram(Signal::PrefillTime)?.mean()?;
    let rest = client_ttft_mean_s - q - p;
    Some(Reconciliation {
        what: "ttft_unexplained_mean_s".into(),
        client: client_ttft_mean_s,
        server: q + p,
        agrees: rest >= 0.0,
        note: if rest >= 0.0 {
            format!(
                "client TTFT mean {:.1} ms = engine queue {:.1} ms + prefill {:.1} ms + {:.1} ms of frontend, network and gateway time",
                client_ttft_mean_s * 1e3,
                q * 1e3,
                p * 1e3,
                rest * 1e3
            )
        } else {
            // vLLM observes queue and prefill time when a request finishes, so requests that
            // started before the window (the warm-up, queued behind each other when the level
            // began) weigh in the engine's means but not in the client's TTFT of the window.
            format!(
                "client TTFT mean {:.1} ms < engine queue {:.1} ms + prefill {:.1} ms: the engine observes queue and prefill time when a request finishes, so requests that started before the window count there; no frontend time can be derived (lengthen --warmup, or use --enable-per-request-metrics)",
                client_ttft_mean_s * 1e3,
                q * 1e3,
                p * 1e3,
            )
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bucket_quantiles_are_stored_as_upper_bounds() {
        let fig = |name: &str, bound| headroom_diagnose::Figure {
            name: name.into(),
            value: 0.3,
            unit: "s".into(),
            source: "vllm:request_queue_time_seconds".into(),
            bound,
        };
        let bound = fig("queue_time_p95_s", Bound::Upper);
        assert_eq!(figure_key(&bound), "queue_time_p95_upper_bound_s");
        let point = fig("queue_time_p95_s", Bound::Exact);
        assert_eq!(figure_key(&point), "queue_time_p95_s");
    }
    use headroom_signals::{Scrape, WindowOptions};

    fn scrape(at: f64, length: u32, abort: u32, gen_tokens: u32) -> Scrape {
        let body = format!(
            "# TYPE vllm:request_success_total counter\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"m\"}} {length}\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"}} {abort}\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} 0\n\
             # TYPE vllm:generation_tokens_total counter\n\
             vllm:generation_tokens_total{{engine=\"0\",model_name=\"m\"}} {gen_tokens}\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 0\n"
        );
        Scrape::from_body("test", body, at, None).unwrap()
    }

    fn total_row(server_length: u32, server_abort: u32) -> Reconciliation {
        let w = Window::from_scrapes(
            &[
                scrape(0.0, 0, 0, 0),
                scrape(10.0, server_length, server_abort, 400),
            ],
            &[],
            &WindowOptions::default(),
        )
        .unwrap();
        // The client saw 39 requests end with `length` and cancelled 11 at the end of the window.
        let c = ClientTotals {
            length: 39,
            cancelled: 11,
            output_tokens: 390,
            unfinished_chunks: 10,
            ..ClientTotals::default()
        };
        reconcile(&w, &c)
            .into_iter()
            .find(|r| r.what == "requests_total")
            .unwrap()
    }

    /// vLLM 0.32 does not count client-disconnected requests at all (39 = 50 − 11 cancelled),
    /// the twin and other versions count them as aborts (50); both agree. One request missing
    /// beyond the cancellations, or one extra, is a disagreement.
    #[test]
    fn cancelled_streams_may_or_may_not_be_counted() {
        assert!(total_row(39, 0).agrees);
        assert!(total_row(39, 11).agrees);
        assert!(total_row(39, 5).agrees);
        assert!(!total_row(38, 0).agrees);
        assert!(!total_row(39, 12).agrees);
    }
}
