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
//!
//! **Which chunk carries generated text** is decided by [`ChunkContent`], for the load client
//! and the gateway alike. With `n > 1` a stream carries several choices. vLLM's OpenAI server
//! streams them interleaved, one chunk per choice and engine step, each naming its choice by
//! `index` (`vllm/entrypoints/openai/completion/serving.py`, `completion_stream_generator`:
//! `for output in res.outputs: i = output.index + prompt_idx * num_choices`, one
//! `choices=[…(index=i)]` chunk each; the chat server does the same). The OpenAI Python SDK
//! puts a stream back together by `choice.index` (`openai/lib/streaming/chat/_completions.py`,
//! `ChatCompletionStreamState`), so a chunk is about whichever choices it lists, not only the
//! first. vLLM's benchmark reads `choices[0]` of every chunk
//! (`vllm/benchmarks/lib/endpoint_request_func.py`): on vLLM's one-choice chunks that is the
//! chunk's choice, whichever index, so it times the merged stream. Hence:
//! - a chunk is a **content chunk** when *any* of its choices carries generated text (a server
//!   that lists several choices in one chunk is read the same as vLLM's one-choice chunks);
//! - **TTFT** is the first content chunk of any choice: when the user first sees output;
//! - **ITL** is every gap between consecutive content chunks of the merged stream, as vLLM's
//!   benchmark times it; with `n > 1` the choices of one engine step arrive microseconds apart,
//!   so about `(n − 1)/n` of the gaps are near zero: compare ITL only between runs with the same
//!   `n`;
//! - **TPOT** divides by `usage.completion_tokens`, which vLLM sums over all choices.

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

/// The generated-text fields of one streamed choice, each "present and a non-empty string":
/// `text` (completions), `delta.content` (chat), and the reasoning deltas of reasoning models
/// (`delta.reasoning_content`, vLLM's older name, and `delta.reasoning`). A chat stream's
/// role-only first chunk (`delta: {role, content: ""}`) has none of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChoiceText {
    /// `text` is non-empty.
    pub text: bool,
    /// `delta.content` is non-empty.
    pub content: bool,
    /// `delta.reasoning_content` is non-empty.
    pub reasoning_content: bool,
    /// `delta.reasoning` is non-empty.
    pub reasoning: bool,
}

impl ChoiceText {
    /// Whether the choice carries generated text: any of its fields does.
    pub fn carries_text(self) -> bool {
        self.text || self.content || self.reasoning_content || self.reasoning
    }
}

/// Whether one stream chunk is a content chunk (the TTFT and ITL rule of the module docs): fed
/// every choice of the chunk in order ([`ChunkContent::choice`]), it says whether any carried
/// generated text. A fold rather than a function of a list, so a one-pass reader can apply it
/// without collecting the choices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkContent(bool);

impl ChunkContent {
    /// One more choice of the chunk.
    #[inline]
    pub fn choice(&mut self, c: ChoiceText) {
        self.0 |= c.carries_text();
    }

    /// The chunk is a content chunk.
    #[inline]
    pub fn is_content(self) -> bool {
        self.0
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
    fn any_choice_with_text_makes_a_content_chunk() {
        let role_only = ChoiceText::default();
        let text = ChoiceText {
            text: true,
            ..ChoiceText::default()
        };
        let reasoning = ChoiceText {
            reasoning: true,
            ..ChoiceText::default()
        };
        let fold = |cs: &[ChoiceText]| {
            let mut c = ChunkContent::default();
            cs.iter().for_each(|&x| c.choice(x));
            c.is_content()
        };
        assert!(!fold(&[]));
        assert!(!fold(&[role_only, role_only]));
        assert!(fold(&[role_only, text]), "a later choice counts too");
        assert!(fold(&[reasoning]));
    }

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
