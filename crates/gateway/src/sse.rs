//! The gateway's reading of an OpenAI SSE stream for measurement, without copying it.
//!
//! The proxy forwards every upstream frame unchanged; [`SseScanner::feed`] looks at the same
//! bytes afterwards, through the wire layer the load client uses too: SSE framing by the WHATWG
//! rules ([`headroom_wire::sse`]) and one reading of each chunk ([`headroom_wire::chunk`]):
//! whether it is a content chunk by [`headroom_core::signal::ChunkContent`] (any choice carries
//! generated text: `text`, `delta.content`, `delta.reasoning_content` or `delta.reasoning`; a
//! role-only chunk with `content: ""` does not count), the last non-null `finish_reason`,
//! `usage.completion_tokens`, and an error object. Only an event cut across two frames is
//! copied. A line or an event over the wire layer's limits is dropped whole and the stream read
//! on ([`Overflow::Skip`]): the gateway forwards the bytes either way, and measures what it can.

use headroom_wire::chunk;
use headroom_wire::sse::{Overflow, SseSplitter};

/// What one SSE `data:` event said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventInfo {
    /// The event is a content chunk.
    pub content: bool,
    /// A `finish_reason` arrived in this event (the last of its choices').
    pub finish: Option<Finish>,
    /// `usage.completion_tokens`.
    pub completion_tokens: Option<u32>,
    /// The event is an error object.
    pub error: bool,
    /// The event is `data: [DONE]`.
    pub done: bool,
}

/// A `finish_reason` as vLLM sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// `stop`, or any reason that ends a request normally (`tool_calls`, `function_call`, …).
    Stop,
    /// `length`: cut at `max_tokens` or the context limit.
    Length,
    /// `abort` or `error`: the engine gave up on the request.
    Failed,
}

impl Finish {
    /// The kind of a `finish_reason` string.
    pub fn from_reason(reason: &str) -> Finish {
        match reason {
            "length" => Finish::Length,
            "abort" | "error" => Finish::Failed,
            _ => Finish::Stop,
        }
    }
}

/// Splits a byte stream into SSE events and reads each ([`parse_data`]).
#[derive(Debug)]
pub struct SseScanner {
    splitter: SseSplitter,
}

impl Default for SseScanner {
    fn default() -> Self {
        SseScanner::new()
    }
}

impl SseScanner {
    /// A scanner with the wire layer's limits, skipping what passes them.
    pub fn new() -> SseScanner {
        SseScanner {
            splitter: SseSplitter::new().on_overflow(Overflow::Skip),
        }
    }

    /// Feeds one frame; calls `on` for every event it completes.
    #[inline]
    pub fn feed(&mut self, bytes: &[u8], on: &mut impl FnMut(EventInfo)) {
        self.splitter.feed(bytes, &mut |ev| on(parse_data(ev)));
    }

    /// Ends the stream: an event without its final blank line still counts.
    pub fn finish(&mut self, on: &mut impl FnMut(EventInfo)) {
        self.splitter.finish(&mut |ev| on(parse_data(ev)));
    }
}

/// Reads one event's data: `[DONE]`, or a chunk ([`headroom_wire::chunk::parse`]); an event
/// that is not a chunk says nothing.
#[inline]
pub fn parse_data(data: &[u8]) -> EventInfo {
    if chunk::is_done(data) {
        return EventInfo {
            done: true,
            ..EventInfo::default()
        };
    }
    let Ok(c) = chunk::parse(data) else {
        return EventInfo::default();
    };
    EventInfo {
        content: c.content,
        finish: c.finish_reason.as_deref().map(Finish::from_reason),
        completion_tokens: c.usage.and_then(|u| u.completion_tokens),
        error: c.error.is_some(),
        done: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_wire::sse::MAX_LINE_BYTES;

    /// A line longer than MAX_LINE is skipped whole, however it is framed: a `data:` event in
    /// its tail is no event (a hostile upstream could otherwise inject one the proxy counts),
    /// and the lines after it are read again.
    #[test]
    fn an_overlong_line_is_skipped_to_its_end() {
        let chunk = br#"data: {"choices":[{"text":"a"}]}"#;
        let mut stream = Vec::new();
        stream.extend_from_slice(b"x");
        stream.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES + 10));
        // The tail of the overlong line looks like an event.
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\n");
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        for split in [7, 4096, 65_536, MAX_LINE_BYTES + 3, stream.len()] {
            let (content, _, _, done) = scan(&stream, split);
            assert_eq!(content, 1, "split {split}");
            assert!(done, "split {split}");
        }
        // Framed so that the buffer gives up exactly before a frame that starts like an event.
        let mut s = SseScanner::new();
        let mut events = 0;
        let mut on = |e: EventInfo| events += usize::from(e.content);
        let mut first = b"x".to_vec();
        first.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES));
        s.feed(&first, &mut on);
        s.feed(b"yy", &mut on);
        let mut tail = chunk.to_vec();
        tail.extend_from_slice(b"\n\n");
        s.feed(&tail, &mut on);
        s.feed(&tail, &mut on);
        s.finish(&mut on);
        assert_eq!(events, 1);
    }

    use headroom_testkit::openai_fixture_body as fixture;

    /// (content events, finish, completion tokens, done) over the whole stream, fed in pieces of
    /// `split` bytes.
    fn scan(bytes: &[u8], split: usize) -> (usize, Option<Finish>, Option<u32>, bool) {
        let mut s = SseScanner::new();
        let (mut content, mut finish, mut tokens, mut done) = (0, None, None, false);
        let mut on = |e: EventInfo| {
            content += usize::from(e.content);
            finish = e.finish.or(finish);
            tokens = e.completion_tokens.or(tokens);
            done |= e.done;
        };
        for piece in bytes.chunks(split) {
            s.feed(piece, &mut on);
        }
        s.finish(&mut on);
        (content, finish, tokens, done)
    }

    #[test]
    fn real_vllm_streams() {
        // Counted by reading the fixtures: chat_stream.txt has a role-only chunk (content "")
        // then 4 content chunks, finish "length", usage completion_tokens 4; completion_stream.txt
        // has 5 text chunks (usage 5) and completion_stop_stream.txt ends with "stop".
        let chat = fixture("chat_stream.txt");
        for split in [1, 7, 64, chat.len()] {
            assert_eq!(
                scan(&chat, split),
                (4, Some(Finish::Length), Some(4), true),
                "split {split}"
            );
        }
        let (_, fin, _, done) = scan(&fixture("completion_stop_stream.txt"), 13);
        assert_eq!((fin, done), (Some(Finish::Stop), true));
        assert_eq!(
            scan(&fixture("completion_stream.txt"), 5),
            (5, Some(Finish::Length), Some(5), true)
        );
    }

    #[test]
    fn edge_events() {
        assert!(parse_data(br#"{"error":{"message":"x","code":500}}"#).error);
        assert!(parse_data(b"[DONE]").done);
        assert!(
            !parse_data(br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).content
        );
        assert!(parse_data(br#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).content);
        assert!(parse_data(br#"{"choices":[{"text":"\u00e9"}]}"#).content);
        assert_eq!(
            parse_data(br#"{"choices":[{"delta":{"content":null},"finish_reason":"tool_calls"}]}"#),
            EventInfo {
                finish: Some(Finish::Stop),
                ..EventInfo::default()
            }
        );
        assert_eq!(
            parse_data(br#"{"choices":[{"text":"","finish_reason":"abort"}]}"#).finish,
            Some(Finish::Failed)
        );
        assert_eq!(parse_data(b"not json"), EventInfo::default());
        // CRLF and lone-CR line ends and a comment line, split at every byte.
        for text in [
            &b": ping\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\ndata: [DONE]\r\n\r\n"[..],
            b"data: {\"choices\":[{\"text\":\"a\"}]}\r\rdata: {\"choices\":[{\"text\":\"b\"}]}\r\rdata: [DONE]\r\r",
        ] {
            for split in 1..=text.len() {
                let (n, _, _, done) = scan(text, split);
                assert_eq!((n, done), (2, true), "split {split}");
            }
        }
    }
}
