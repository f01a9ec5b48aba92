//! The client's reading of an OpenAI SSE stream: what a request saw, event by event.
//!
//! Framing and chunk decoding are the wire layer's, shared with the gateway
//! ([`headroom_wire::sse`], [`headroom_wire::chunk`], re-exported here): bytes → events per the
//! WHATWG rules, and each event → whether it is a content chunk (by
//! [`headroom_core::signal::ChunkContent`]: any choice carrying generated text), its
//! `finish_reason`, `usage`, per-request `metrics` or an error object. [`StreamState`]
//! accumulates that per request: `[DONE]` ends the stream; the content chunks' arrival times,
//! the last `finish_reason`, `usage` and `metrics` are kept; an error object marks a server error
//! mid-stream; an event that is not a chunk marks a protocol error.

use headroom_core::Outcome;
pub use headroom_wire::chunk::{RequestMetrics, Usage, error_message};
pub use headroom_wire::sse::{MAX_EVENT_BYTES, MAX_LINE_BYTES, SseSplitter};

/// What one stream showed, accumulated event by event.
#[derive(Debug, Clone, Default)]
pub struct StreamState {
    /// Arrival (ns since the request start) of every chunk carrying generated text.
    pub content_chunk_ns: Vec<u64>,
    /// SSE data events received (all kinds).
    pub events: u32,
    /// The last `usage` seen.
    pub usage: Option<Usage>,
    /// The per-request `metrics` object, when the server sends one.
    pub metrics: Option<RequestMetrics>,
    /// The last `finish_reason` sent, of any choice.
    pub finish_reason: Option<String>,
    /// `[DONE]` arrived.
    pub done: bool,
    /// Arrival of `[DONE]`, ns since the request start.
    pub done_ns: Option<u64>,
    /// Server error message from an error object in the stream.
    pub server_error: Option<String>,
    /// First event that could not be understood (bad JSON), with the reason.
    pub protocol_error: Option<String>,
    /// Most content chunks kept ([`chunk_limit`]); `None`: no limit.
    pub max_content_chunks: Option<usize>,
    /// Set when the stream passed `max_content_chunks`: the server sent more generated text than
    /// asked for, and the request ends as `protocol`.
    pub over_limit: Option<String>,
}

/// The content chunks a request with `max_tokens` may carry before the stream counts as broken:
/// twice `max_tokens`, plus 64. A chunk carries at least one token, so a server within
/// `max_tokens` stays under it with room for empty-text quirks; one that ignores `max_tokens`
/// and streams forever is cut there, its timestamps (8 bytes a chunk) bounded.
pub fn chunk_limit(max_tokens: u32) -> usize {
    (max_tokens as usize).saturating_mul(2).saturating_add(64)
}

impl StreamState {
    /// Clears for reuse (keeps the timestamp buffer's capacity).
    pub fn reset(&mut self) {
        self.content_chunk_ns.clear();
        self.events = 0;
        self.usage = None;
        self.metrics = None;
        self.finish_reason = None;
        self.done = false;
        self.done_ns = None;
        self.server_error = None;
        self.protocol_error = None;
        self.over_limit = None;
    }

    /// A content chunk arrived at `t_ns`: kept, unless it passes `max_content_chunks`.
    #[inline(always)]
    fn content_chunk(&mut self, t_ns: u64) {
        match self.max_content_chunks {
            Some(max) if self.content_chunk_ns.len() >= max => {
                self.over_limit.get_or_insert_with(|| {
                    format!(
                        "the server sent more than {max} content chunks (far more text than max_tokens allows): stream cut"
                    )
                });
            }
            _ => self.content_chunk_ns.push(t_ns),
        }
    }

    /// Interprets one event's data, which arrived at `t_ns`.
    #[inline]
    pub fn on_event(&mut self, data: &[u8], t_ns: u64) {
        self.events += 1;
        if headroom_wire::chunk::is_done(data) {
            self.done = true;
            self.done_ns.get_or_insert(t_ns);
            return;
        }
        // Nearly every event is a plain content chunk: read by the fast path alone, without
        // building the whole `Chunk` that `parse` returns (same answer, fewer moves).
        if let Some(c) = headroom_wire::chunk::parse_plain(data) {
            self.content_and_finish(c.content, c.finish_reason, t_ns);
            return;
        }
        let c = match headroom_wire::chunk::parse_serde(data) {
            Ok(c) => c,
            Err(e) => {
                if self.protocol_error.is_none() {
                    let shown = String::from_utf8_lossy(&data[..data.len().min(200)]);
                    self.protocol_error = Some(format!("bad JSON in SSE event ({e}): {shown}"));
                }
                return;
            }
        };
        if let Some(err) = c.error {
            self.server_error.get_or_insert(err);
            return;
        }
        self.content_and_finish(c.content, c.finish_reason.as_deref(), t_ns);
        if c.usage.is_some() {
            self.usage = c.usage;
        }
        if c.metrics.is_some() {
            self.metrics = c.metrics;
        }
    }

    /// A chunk's content flag and `finish_reason`, which arrived at `t_ns`.
    #[inline(always)]
    fn content_and_finish(&mut self, content: bool, finish_reason: Option<&str>, t_ns: u64) {
        if content {
            self.content_chunk(t_ns);
        }
        // The last one: with `n > 1` each choice finishes on its own, and the stream is over
        // when the last one has (the gateway reads it the same way).
        if let Some(fr) = finish_reason
            && self.finish_reason.as_deref() != Some(fr)
        {
            self.finish_reason = Some(fr.to_string());
        }
    }

    /// How the request ended, given how the body ended: `transport_error` when the connection
    /// failed mid-body.
    ///
    /// Precedence: a server error object → `error`; a `finish_reason` → its outcome (`stop`,
    /// `length`, `abort`, `error`; an unrecognised reason such as `tool_calls` counts as `stop`, a
    /// normal completion); otherwise a transport failure → `transport`; otherwise (clean end
    /// without a finish reason, or undecodable events) → `protocol`.
    pub fn outcome(&self, transport_error: bool) -> Outcome {
        if self.server_error.is_some() {
            return Outcome::Error;
        }
        if let Some(fr) = &self.finish_reason {
            return Outcome::from_finish_reason(fr).unwrap_or(Outcome::Stop);
        }
        if transport_error {
            Outcome::Transport
        } else {
            Outcome::Protocol
        }
    }
}

/// The properties `crates/load/fuzz` (target `sse`) and the test loop check on any input: those
/// of the shared splitter and chunk reader ([`headroom_wire::sse::check_properties`]: framing
/// anywhere gives the whole-stream reading's events, the fast path agrees with serde), and, fed
/// those events, the stream state never panics and keeps its content chunks within
/// [`StreamState::max_content_chunks`]. Panics when one does not hold.
pub fn check_properties(data: &[u8]) {
    let events = headroom_wire::sse::check_properties(data);
    let max = 1 + data.get(1).copied().unwrap_or(0) as usize % 8;
    let mut st = StreamState {
        max_content_chunks: Some(max),
        ..StreamState::default()
    };
    for (t, ev) in events.iter().enumerate() {
        st.on_event(ev, t as u64);
    }
    assert!(st.content_chunk_ns.len() <= max);
    let _ = st.outcome(false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use headroom_testkit::openai_fixture_body as fixture;

    /// Parses `bytes` delivered as two frames split at `split`, each event stamped with the index
    /// of the frame that completed it.
    fn run(bytes: &[u8], splits: &[usize]) -> StreamState {
        let mut sp = SseSplitter::new();
        let mut st = StreamState::default();
        let mut last = 0;
        let mut cuts: Vec<usize> = splits.to_vec();
        cuts.push(bytes.len());
        for (i, c) in cuts.iter().enumerate() {
            sp.feed(&bytes[last..*c], &mut |ev| st.on_event(ev, i as u64));
            last = *c;
        }
        sp.finish(&mut |ev| st.on_event(ev, 99));
        st
    }

    struct Expect {
        file: &'static str,
        content_chunks: usize,
        events: u32,
        prompt: u32,
        completion: u32,
        finish: &'static str,
    }

    // Read off the fixture files by hand: count the `data:` lines whose choices[0] carries a
    // non-empty `text` or `delta.content`; usage from the chunk with `"choices":[]`.
    const FIXTURES: &[Expect] = &[
        // role-only first chunk, then " comparison", " comparison", "exception", " comparison"
        // (finish length), usage chunk, [DONE]
        Expect {
            file: "chat_stream.txt",
            content_chunks: 4,
            events: 7,
            prompt: 17,
            completion: 4,
            finish: "length",
        },
        // usage on every chunk; role chunk, " consists", "INT", " representation", usage, [DONE]
        Expect {
            file: "chat_stream_continuous_usage.txt",
            content_chunks: 3,
            events: 6,
            prompt: 12,
            completion: 3,
            finish: "length",
        },
        // role chunk, " Th", "ser", "Container", usage + metrics, [DONE]
        Expect {
            file: "chat_stream_per_request_metrics.txt",
            content_chunks: 3,
            events: 6,
            prompt: 11,
            completion: 3,
            finish: "length",
        },
        // "ch", "ar", "95" (finish stop, stop_reason "nop"), usage, [DONE]
        Expect {
            file: "completion_stop_stream.txt",
            content_chunks: 3,
            events: 5,
            prompt: 9,
            completion: 3,
            finish: "stop",
        },
        // "char", "95", "nop", "framer", ":]:" (finish length), usage, [DONE]
        Expect {
            file: "completion_stream.txt",
            content_chunks: 5,
            events: 7,
            prompt: 9,
            completion: 5,
            finish: "length",
        },
    ];

    #[test]
    fn every_stream_fixture_is_covered() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openai");
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.contains("stream") && name.ends_with(".txt") && !name.contains("nonstream") {
                assert!(
                    FIXTURES.iter().any(|f| f.file == name),
                    "stream fixture {name} has no expectation"
                );
            }
        }
    }

    #[test]
    fn per_request_metrics_give_the_queue_time() {
        // chat_stream_per_request_metrics.txt: "queue_time_ms":0.1503459999412371 on the usage
        // chunk; the other fixtures have no metrics object.
        let st = run(&fixture("chat_stream_per_request_metrics.txt"), &[]);
        assert_eq!(
            st.metrics.and_then(|m| m.queue_time_ms),
            Some(0.150_345_999_941_237_1)
        );
        assert_eq!(run(&fixture("chat_stream.txt"), &[]).metrics, None);
    }

    #[test]
    fn fixtures_at_every_split_point() {
        for f in FIXTURES {
            let bytes = fixture(f.file);
            for split in 0..=bytes.len() {
                let st = run(&bytes, &[split]);
                let ctx = format!("{} split at {split}", f.file);
                assert_eq!(st.content_chunk_ns.len(), f.content_chunks, "{ctx}");
                assert_eq!(st.events, f.events, "{ctx}");
                assert_eq!(
                    st.usage,
                    Some(Usage {
                        prompt_tokens: Some(f.prompt),
                        completion_tokens: Some(f.completion)
                    }),
                    "{ctx}"
                );
                assert_eq!(st.finish_reason.as_deref(), Some(f.finish), "{ctx}");
                assert!(st.done, "{ctx}");
                assert_eq!(st.protocol_error, None, "{ctx}");
                assert_eq!(st.server_error, None, "{ctx}");
                // timestamps are those of the frame that completed each event
                assert!(st.content_chunk_ns.iter().all(|t| *t <= 1), "{ctx}");
                assert_eq!(
                    st.outcome(false),
                    Outcome::from_finish_reason(f.finish).unwrap()
                );
            }
            // byte by byte
            let splits: Vec<usize> = (1..bytes.len()).collect();
            let st = run(&bytes, &splits);
            assert_eq!(st.content_chunk_ns.len(), f.content_chunks, "{}", f.file);
            assert!(st.content_chunk_ns.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn crlf_comments_and_multiline_data() {
        let crlf: Vec<u8> = String::from_utf8(fixture("completion_stream.txt"))
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes();
        let cr: Vec<u8> = String::from_utf8(fixture("completion_stream.txt"))
            .unwrap()
            .replace('\n', "\r")
            .into_bytes();
        for bytes in [&crlf, &cr] {
            for split in 0..=bytes.len() {
                let st = run(bytes, &[split]);
                assert_eq!(st.content_chunk_ns.len(), 5, "split {split}");
                assert_eq!(st.events, 7, "split {split}");
                assert!(st.done);
            }
        }
        let text = ": keep-alive\n\nevent: message\nid: 1\ndata: {\"choices\":\ndata: [{\"text\":\"a\"}]}\n\n: ping\ndata:[DONE]\n\n";
        let st = run(text.as_bytes(), &[]);
        assert_eq!(st.events, 2);
        assert_eq!(st.content_chunk_ns.len(), 1);
        assert!(st.done);
        assert_eq!(st.protocol_error, None);
    }

    /// Empty frames anywhere — between a CR and its LF above all — change nothing: the LF of a
    /// CRLF cut by an empty frame was read as a second line end, which dispatched a two-line
    /// event after its first line (found by the `sse` property loop).
    #[test]
    fn empty_frames_change_nothing() {
        let text = b"data: {\"choices\":\r\ndata: [{\"text\":\"a\"}]}\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = run(text, &[]);
        assert_eq!((whole.events, whole.content_chunk_ns.len()), (2, 1));
        assert_eq!(whole.protocol_error, None);
        for at in 0..=text.len() {
            let mut sp = SseSplitter::new();
            let mut events = Vec::new();
            for frame in [&text[..at], b"", b"", &text[at..]] {
                sp.feed(frame, &mut |ev| events.push(ev.to_vec()));
            }
            sp.finish(&mut |ev| events.push(ev.to_vec()));
            assert_eq!(
                events,
                [&b"{\"choices\":\n[{\"text\":\"a\"}]}"[..], b"[DONE]"],
                "empty frames after byte {at}"
            );
        }
    }

    #[test]
    fn error_object_mid_stream() {
        let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
data: {\"error\": {\"object\": \"error\", \"message\": \"The engine is dead\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n\
data: [DONE]\n\n";
        let st = run(text.as_bytes(), &[40]);
        assert_eq!(st.content_chunk_ns.len(), 1);
        assert_eq!(st.server_error.as_deref(), Some("The engine is dead"));
        assert_eq!(st.outcome(false), Outcome::Error);
        let old = "data: {\"object\": \"error\", \"message\": \"boom\", \"code\": 400}\n\n";
        let st = run(old.as_bytes(), &[]);
        assert_eq!(st.server_error.as_deref(), Some("boom"));
    }

    #[test]
    fn replacement_characters_and_escapes_count_as_content() {
        // U+FFFD (bytes EF BF BD) as vLLM emits for a partial UTF-8 sequence, and an escaped one
        let text = "data: {\"choices\":[{\"text\":\"\u{FFFD}\",\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"text\":\"\\ufffd\\n\",\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n\
data: [DONE]\n\n";
        for split in 0..=text.len() {
            let st = run(text.as_bytes(), &[split]);
            assert_eq!(st.content_chunk_ns.len(), 2, "split {split}");
            assert_eq!(st.finish_reason.as_deref(), Some("length"));
            assert_eq!(st.outcome(false), Outcome::Length);
        }
    }

    #[test]
    fn content_chunks_past_the_limit_are_not_kept() {
        let mut st = StreamState {
            max_content_chunks: Some(3),
            ..StreamState::default()
        };
        let chunk = br#"{"choices":[{"index":0,"text":" a","finish_reason":null}]}"#;
        for t in 0..10 {
            st.on_event(chunk, t);
        }
        assert_eq!(st.content_chunk_ns, [0, 1, 2]);
        assert!(
            st.over_limit
                .as_deref()
                .is_some_and(|m| m.contains("more than 3"))
        );
    }

    #[test]
    fn broken_streams() {
        // bad JSON → protocol; clean end without finish → protocol; cut mid-stream → transport
        let st = run(b"data: {not json}\n\ndata: [DONE]\n\n", &[]);
        assert!(st.protocol_error.as_deref().unwrap().contains("bad JSON"));
        assert_eq!(st.outcome(false), Outcome::Protocol);
        let st = run(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", &[]);
        assert_eq!(st.outcome(false), Outcome::Protocol);
        assert_eq!(st.outcome(true), Outcome::Transport);
        // a stream that ends without its final blank line still delivers the event
        let st = run(
            b"data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}",
            &[],
        );
        assert_eq!(st.content_chunk_ns, vec![99]);
        assert_eq!(st.outcome(true), Outcome::Stop);
        // unknown finish reasons are normal completions; abort is the server's
        let st = run(b"data: {\"choices\":[{\"delta\":{\"content\":null},\"finish_reason\":\"tool_calls\"}]}\n\n", &[]);
        assert_eq!(st.content_chunk_ns.len(), 0);
        assert_eq!(st.outcome(false), Outcome::Stop);
        let st = run(
            b"data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"abort\"}]}\n\n",
            &[],
        );
        assert_eq!(st.outcome(false), Outcome::Abort);
    }

    #[test]
    fn reasoning_deltas_count_as_generated_text() {
        let st = run(
            b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning\":\"ok\",\"content\":null}}]}\n\n",
            &[],
        );
        assert_eq!(st.content_chunk_ns.len(), 2);
    }

    /// [`check_properties`] (the fuzz target `sse`'s body) over seeded random mutations of
    /// every stream fixture (SSE line ends, fields and JSON bytes inserted) and of streams made of
    /// random lines with random line ends, under random frame cuts and limits: for machines
    /// without a nightly toolchain.
    #[test]
    fn stream_properties_hold_on_mutated_streams() {
        use rand::RngExt;
        let streams: Vec<Vec<u8>> = FIXTURES.iter().map(|f| fixture(f.file)).collect();
        let mut rng = crate::arrivals::seeded_rng(11, 0x55E);
        const PIECES: &[&[u8]] = &[
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"data:",
            b"data: ",
            b":",
            b" ",
            b"event: x",
            b"[DONE]",
            b"\"",
            b"{",
            b"}",
            b"\\u00e9",
            b"\xc3\xa9",
            b"\xff",
            b"\x00",
        ];
        // Lines of every kind, ended by LF, CR or CRLF: multi-line events and line ends cut
        // between frames.
        const LINES: &[&[u8]] = &[
            b"data: {\"choices\":[{\"text\":\"a\"}]}",
            b"data:{\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}",
            b"data: [DONE]",
            b"data: x",
            b"data:",
            b"data",
            b": comment",
            b"event: e",
            b"id: 1",
            b"",
            b"",
        ];
        for i in 0..40_000 {
            let mut e: Vec<u8> = (0..4).map(|_| rng.random()).collect();
            if i % 2 == 0 {
                e.extend_from_slice(&streams[rng.random_range(0..streams.len())]);
            } else {
                for _ in 0..rng.random_range(0..24) {
                    e.extend_from_slice(LINES[rng.random_range(0..LINES.len())]);
                    let end = [&b"\n"[..], b"\r", b"\r\n"][rng.random_range(0..3)];
                    e.extend_from_slice(end);
                }
            }
            for _ in 0..rng.random_range(0..6) {
                let at = rng.random_range(4..=e.len());
                match rng.random_range(0..3) {
                    0 => {
                        let p = PIECES[rng.random_range(0..PIECES.len())];
                        e.splice(at..at, p.iter().copied());
                    }
                    1 => {
                        let end = (at + rng.random_range(1..40)).min(e.len());
                        e.drain(at..end);
                    }
                    _ => {
                        let end = (at + rng.random_range(1..40)).min(e.len());
                        let span = e[at..end].to_vec();
                        e.splice(at..at, span);
                    }
                }
            }
            check_properties(&e);
        }
    }
}
