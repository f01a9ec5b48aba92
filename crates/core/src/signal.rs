//! Client-side latency signals, defined once.
//!
//! Definitions follow vLLM's benchmark (`vllm bench serve`, `benchmarks/serve.py`) because that is
//! what users compare against:
//! - **TTFT**: request start → arrival of the first chunk that carries generated text. A chat
//!   stream's role-only first chunk does not count. In open-loop modes the start is the
//!   *intended* send time, so a late send counts against the server (no coordinated omission).
//! - **ITL**: every gap between consecutive content-bearing chunks, one observation per gap.
//! - **TPOT**: per request, `(e2e − ttft) / (output_tokens − 1)`, undefined for one output token.
//! - **E2E**: request start → end of stream.
//!
//! All times are nanoseconds on the client's monotonic clock, relative to the level's start.

use serde::{Deserialize, Serialize};

/// Which latency an objective or histogram is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencySignal {
    /// Time to first token (see module docs).
    Ttft,
    /// Inter-token latency, one observation per gap between content chunks.
    Itl,
    /// Time per output token, one observation per request.
    Tpot,
    /// End-to-end request latency.
    E2e,
    /// Server-side queue time (`vllm:request_queue_time_seconds`); only the engine can measure it.
    QueueTime,
}

impl LatencySignal {
    /// All client-measurable signals, in report order.
    pub const CLIENT: [LatencySignal; 4] = [
        LatencySignal::Ttft,
        LatencySignal::Itl,
        LatencySignal::Tpot,
        LatencySignal::E2e,
    ];

    /// Short lowercase name as used in `slo.yaml`, CSV columns and JSON (`ttft`, `itl`, …).
    pub fn name(self) -> &'static str {
        match self {
            LatencySignal::Ttft => "ttft",
            LatencySignal::Itl => "itl",
            LatencySignal::Tpot => "tpot",
            LatencySignal::E2e => "e2e",
            LatencySignal::QueueTime => "queue_time",
        }
    }

    /// Upper-case display name (`TTFT`, `ITL`, …).
    pub fn display(self) -> &'static str {
        match self {
            LatencySignal::Ttft => "TTFT",
            LatencySignal::Itl => "ITL",
            LatencySignal::Tpot => "TPOT",
            LatencySignal::E2e => "E2E",
            LatencySignal::QueueTime => "queue time",
        }
    }
}

/// Timing of one streamed request, in nanoseconds since its start (intended send time in open
/// loop). Built by the client; the derived figures below are the single definition used everywhere.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestTiming {
    /// Arrival of each content-bearing chunk (chunks with non-empty generated text), in order.
    pub content_chunk_ns: Vec<u64>,
    /// End of stream (the `[DONE]` event, or the last byte).
    pub end_ns: u64,
    /// Output tokens from the server's `usage.completion_tokens` (or a flagged estimate).
    pub output_tokens: Option<u32>,
}

impl RequestTiming {
    /// TTFT in ns: the first content-bearing chunk. `None` when no content arrived.
    pub fn ttft_ns(&self) -> Option<u64> {
        self.content_chunk_ns.first().copied()
    }

    /// ITL observations in ns: every gap between consecutive content-bearing chunks.
    pub fn itl_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.content_chunk_ns
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
    }

    /// TPOT in ns: `(e2e − ttft) / (output_tokens − 1)`; `None` for fewer than two output
    /// tokens or no content.
    pub fn tpot_ns(&self) -> Option<u64> {
        let ttft = self.ttft_ns()?;
        let n = self.output_tokens?;
        if n < 2 {
            return None;
        }
        Some(self.end_ns.saturating_sub(ttft) / u64::from(n - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_by_hand() {
        // chunks at 100, 130, 170, 180 ms; end at 185 ms; 5 tokens (the last chunk carried 2)
        let ms = 1_000_000;
        let t = RequestTiming {
            content_chunk_ns: vec![100 * ms, 130 * ms, 170 * ms, 180 * ms],
            end_ns: 185 * ms,
            output_tokens: Some(5),
        };
        assert_eq!(t.ttft_ns(), Some(100 * ms));
        assert_eq!(
            t.itl_ns().collect::<Vec<_>>(),
            vec![30 * ms, 40 * ms, 10 * ms]
        );
        // (185 - 100) / 4 = 21.25 ms
        assert_eq!(t.tpot_ns(), Some(21_250_000));
        let one = RequestTiming {
            content_chunk_ns: vec![5],
            end_ns: 9,
            output_tokens: Some(1),
        };
        assert_eq!(one.tpot_ns(), None);
        assert_eq!(RequestTiming::default().ttft_ns(), None);
    }
}
