//! Incremental Server-Sent Events parsing and the interpretation of OpenAI stream chunks.
//!
//! Two layers, both allocation-free in the steady state:
//! - [`SseSplitter`]: bytes → events, per the WHATWG HTML "server-sent events" rules that matter
//!   here: lines end in LF, CRLF or a lone CR (a CRLF split across two frames is one line end);
//!   `data:` lines (one optional space after the colon is dropped) accumulate, joined by LF; an
//!   empty line dispatches the event; lines starting with `:` are comments; other fields (`event`,
//!   `id`, `retry`) are ignored. Events may be split across frames at any byte.
//! - [`StreamState`]: events → what a request saw. `[DONE]` ends the stream; every other event is
//!   an OpenAI chunk whose `choices[0].text` (completions) or `choices[0].delta.content` (chat;
//!   also `reasoning_content` / `reasoning` of reasoning models) decides whether it carries
//!   generated text — a role-only chunk (`delta: {role, content: ""}`) does not; `finish_reason`
//!   and `usage` (the final chunk with empty `choices`, or every chunk with continuous usage) are
//!   kept; an error object (`{"error": {...}}`, or vLLM's older top-level `{"object": "error",
//!   "message": ...}`) marks a server error mid-stream.
//!
//! Only the fields needed are decoded, with borrowed strings and a first-element-only `choices`
//! visitor, so a chunk costs one JSON scan and no allocation.

use headroom_core::Outcome;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Longest SSE line accepted, bytes (1 MiB): a vLLM chunk is well under 1 KiB, one with 20 top
/// logprobs per token a few KiB. A server that sends a line without end (a broken proxy, a hostile
/// target) would otherwise grow the client's buffer until the allocator aborts.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Largest SSE event accepted (its `data` lines joined), bytes (4 MiB).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// Splits a byte stream into SSE events (see the module docs), within [`MAX_LINE_BYTES`] per line
/// and [`MAX_EVENT_BYTES`] per event: past either the splitter stops, frees its buffers and says
/// why in [`SseSplitter::overflow`].
#[derive(Debug)]
pub struct SseSplitter {
    /// Bytes of an unfinished line carried over from earlier frames.
    partial: Vec<u8>,
    /// Data of the event being assembled.
    data: Vec<u8>,
    /// True once a `data` field was seen for the current event.
    has_data: bool,
    /// The previous frame ended in CR: a leading LF in the next frame belongs to that line end.
    after_cr: bool,
    max_line: usize,
    max_event: usize,
    /// Set once a limit was passed; nothing more is parsed.
    overflow: Option<String>,
}

impl Default for SseSplitter {
    fn default() -> Self {
        SseSplitter::with_limits(MAX_LINE_BYTES, MAX_EVENT_BYTES)
    }
}

impl SseSplitter {
    /// A splitter with buffers sized for typical chunks and the default limits.
    pub fn new() -> SseSplitter {
        SseSplitter::default()
    }

    /// A splitter that accepts lines of at most `max_line` bytes and events of at most
    /// `max_event` bytes of data.
    pub fn with_limits(max_line: usize, max_event: usize) -> SseSplitter {
        SseSplitter {
            partial: Vec::with_capacity(512),
            data: Vec::with_capacity(512),
            has_data: false,
            after_cr: false,
            max_line,
            max_event,
            overflow: None,
        }
    }

    /// Clears state for reuse on a new stream (keeps the buffers).
    pub fn reset(&mut self) {
        self.partial.clear();
        self.data.clear();
        self.has_data = false;
        self.after_cr = false;
        self.overflow = None;
    }

    /// Why the splitter stopped: a line or an event over its limit. `None` while it parses.
    pub fn overflow(&self) -> Option<&str> {
        self.overflow.as_deref()
    }

    /// Stops parsing with `why` and frees the buffers (they may be large by now).
    fn stop(&mut self, why: String) {
        self.overflow.get_or_insert(why);
        self.partial = Vec::new();
        self.data = Vec::new();
        self.has_data = false;
    }

    /// Feeds one frame; calls `on_event` with the data of every event it completes. After an
    /// overflow ([`SseSplitter::overflow`]) frames are ignored.
    ///
    /// An event whose single `data` line and dispatching blank line both lie in this frame (the
    /// usual case) is handed over as a slice of `frame`, without a copy.
    pub fn feed(&mut self, frame: &[u8], on_event: &mut impl FnMut(&[u8])) {
        // An empty frame (HTTP/2 allows empty DATA frames) changes nothing: between a CR and
        // its LF it must not end the pending CRLF, or the LF would be a second line end.
        if self.overflow.is_some() || frame.is_empty() {
            return;
        }
        let mut i = 0;
        if self.after_cr {
            self.after_cr = false;
            if frame.first() == Some(&b'\n') {
                i = 1;
            }
        }
        // The current event's data while it is a single line inside `frame`.
        let mut borrowed: Option<(usize, usize)> = None;
        while i < frame.len() {
            let Some(off) = memchr::memchr2(b'\n', b'\r', &frame[i..]) else {
                if self.partial.len() + (frame.len() - i) > self.max_line {
                    return self.stop(format!(
                        "SSE line longer than {} bytes without a line end",
                        self.max_line
                    ));
                }
                self.partial.extend_from_slice(&frame[i..]);
                break;
            };
            let pos = i + off;
            let mut next = pos + 1;
            if frame[pos] == b'\r' {
                if next < frame.len() {
                    if frame[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.after_cr = true;
                }
            }
            if self.partial.is_empty() {
                self.line(frame, i, pos, &mut borrowed, on_event);
            } else {
                // Only the first line of a frame can continue a partial one; nothing is
                // borrowed yet.
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&frame[i..pos]);
                let len = line.len();
                let mut held = None;
                self.line(&line, 0, len, &mut held, on_event);
                if let Some((s, e)) = held {
                    self.data.extend_from_slice(&line[s..e]);
                }
                line.clear();
                self.partial = line;
            }
            if self.overflow.is_some() {
                return;
            }
            i = next;
        }
        if let Some((s, e)) = borrowed {
            self.data.extend_from_slice(&frame[s..e]);
        }
    }

    /// End of stream: an unfinished line is processed and a pending event dispatched (a stream
    /// may end without the final blank line).
    pub fn finish(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if self.overflow.is_some() {
            return;
        }
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            let mut held = None;
            self.line(&line, 0, line.len(), &mut held, on_event);
            if let Some((s, e)) = held {
                self.data.extend_from_slice(&line[s..e]);
            }
        }
        self.line(b"", 0, 0, &mut None, on_event);
    }

    /// One line, `buf[start..end]`. `borrowed` holds the current event's data as a range of
    /// `buf` while that is possible (a single `data` line of the same buffer).
    fn line(
        &mut self,
        buf: &[u8],
        start: usize,
        end: usize,
        borrowed: &mut Option<(usize, usize)>,
        on_event: &mut impl FnMut(&[u8]),
    ) {
        let line = &buf[start..end];
        if line.len() > self.max_line {
            return self.stop(format!("SSE line longer than {} bytes", self.max_line));
        }
        if line.is_empty() {
            if self.has_data {
                match borrowed.take() {
                    Some((s, e)) => on_event(&buf[s..e]),
                    None => {
                        on_event(&self.data);
                        self.data.clear();
                    }
                }
                self.has_data = false;
            }
            return;
        }
        if line[0] == b':' {
            return; // comment
        }
        let (field, value_start) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = start + i + 1;
                (
                    &line[..i],
                    if v < end && buf[v] == b' ' { v + 1 } else { v },
                )
            }
            None => (line, end),
        };
        if field == b"data" {
            if !self.has_data {
                *borrowed = Some((value_start, end));
                self.has_data = true;
                return;
            }
            if let Some((s, e)) = borrowed.take() {
                self.data.extend_from_slice(&buf[s..e]);
            }
            if self.data.len() + 1 + (end - value_start) > self.max_event {
                return self.stop(format!("SSE event larger than {} bytes", self.max_event));
            }
            self.data.push(b'\n');
            self.data.extend_from_slice(&buf[value_start..end]);
        }
    }
}

/// `usage` of an OpenAI response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens`.
    #[serde(default)]
    pub completion_tokens: Option<u32>,
}

/// vLLM's per-request metrics (`--enable-per-request-metrics`, vLLM ≥ 0.32): a `metrics` object
/// on the final chunk. Only the engine knows the queue time of one request; with this object the
/// client can judge a queue-time objective per request, exactly, for the requests of its own
/// window (the engine's histogram observes at finish time and mixes in warm-up requests).
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
pub struct RequestMetrics {
    /// `metrics.queue_time_ms`: engine queue time of this request, milliseconds.
    #[serde(default)]
    pub queue_time_ms: Option<f64>,
}

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
    /// `finish_reason` of the first choice, when sent.
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
    pub fn on_event(&mut self, data: &[u8], t_ns: u64) {
        self.events += 1;
        if data == b"[DONE]" {
            self.done = true;
            self.done_ns.get_or_insert(t_ns);
            return;
        }
        if let Some(c) = super::chunk_scan::scan(data) {
            if c.content {
                self.content_chunk(t_ns);
            }
            if let Some(fr) = c.finish_reason
                && self.finish_reason.is_none()
            {
                self.finish_reason = Some(fr.to_string());
            }
            return;
        }
        self.on_event_serde(data, t_ns);
    }

    /// The reference interpretation of one (non-`[DONE]`) event, through serde_json; the fast
    /// path of `chunk_scan` answers only where it agrees with this.
    fn on_event_serde(&mut self, data: &[u8], t_ns: u64) {
        let msg: ChunkMsg<'_> = match serde_json::from_slice(data) {
            Ok(m) => m,
            Err(e) => {
                if self.protocol_error.is_none() {
                    let shown = String::from_utf8_lossy(&data[..data.len().min(200)]);
                    self.protocol_error = Some(format!("bad JSON in SSE event ({e}): {shown}"));
                }
                return;
            }
        };
        if let Some(err) = msg.error {
            self.server_error.get_or_insert_with(|| error_message(&err));
            return;
        }
        if msg.object.as_deref() == Some("error") {
            let m = msg
                .message
                .as_deref()
                .unwrap_or("error object without a message");
            self.server_error.get_or_insert_with(|| m.to_string());
            return;
        }
        if let Some(u) = msg.usage {
            self.usage = Some(u);
        }
        if let Some(m) = msg.metrics {
            self.metrics = Some(m);
        }
        if let Some(c) = msg.choices.0 {
            let delta_content = c
                .delta
                .is_some_and(|d| d.content.0 || d.reasoning_content.0 || d.reasoning.0);
            if c.text.0 || delta_content {
                self.content_chunk(t_ns);
            }
            if let Some(fr) = c.finish_reason
                && self.finish_reason.is_none()
            {
                self.finish_reason = Some(fr.into_owned());
            }
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

/// The message of an OpenAI error object (`{"message": ...}`), or the object as JSON.
pub fn error_message(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => match o.get("message") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => v.to_string(),
        },
        other => other.to_string(),
    }
}

#[derive(Deserialize)]
struct ChunkMsg<'a> {
    #[serde(default, borrow)]
    choices: FirstChoice<'a>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    metrics: Option<RequestMetrics>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    text: NonEmpty,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Clone, Copy)]
struct Delta {
    #[serde(default)]
    content: NonEmpty,
    #[serde(default)]
    reasoning_content: NonEmpty,
    #[serde(default)]
    reasoning: NonEmpty,
}

/// Whether a string field is present and non-empty (null, absent and `""` are false), decoded
/// without keeping the string.
#[derive(Default, Clone, Copy)]
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!v.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<NonEmpty, D2::Error> {
                d.deserialize_any(V)
            }
        }
        d.deserialize_option(V)
    }
}

/// `choices`, keeping only the first element (no allocation for the list).
#[derive(Default)]
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of choices or null")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<FirstChoice<'a>, A::Error> {
                let first = a.next_element::<Choice<'a>>()?;
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
            fn visit_unit<E: de::Error>(self) -> Result<FirstChoice<'a>, E> {
                Ok(FirstChoice(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<FirstChoice<'a>, E> {
                Ok(FirstChoice(None))
            }
            fn visit_some<D2: Deserializer<'de>>(
                self,
                d: D2,
            ) -> Result<FirstChoice<'a>, D2::Error> {
                d.deserialize_seq(self)
            }
        }
        d.deserialize_option(V(std::marker::PhantomData))
    }
}

/// The properties `crates/load/fuzz` (target `sse`) and the test loop check on any input: the
/// splitter and the stream state never panic; split into frames anywhere (the input's first
/// four bytes choose the frame sizes and the line/event limits, the rest is the stream), the
/// splitter yields exactly the events, and stops exactly where, a whole-stream reading by the
/// module's rules does, and again after [`SseSplitter::reset`]; no event is larger than its
/// limits allow; the content chunks kept stay within [`StreamState::max_content_chunks`]; and
/// wherever the chunk fast path answers (on every event, and on the stream read as one event), it
/// answers as the serde path does. Panics when one does not hold.
pub fn check_properties(data: &[u8]) {
    let (head, stream) = data.split_at(data.len().min(4));
    let h = |i: usize| head.get(i).copied().unwrap_or(0) as usize;
    // Small limits (1..=64 bytes a line, 1..=256 an event) so the fuzzer reaches them, or the
    // defaults.
    let (max_line, max_event) = if h(0) & 1 == 0 {
        (1 + (h(0) >> 1) % 64, 1 + h(1))
    } else {
        (MAX_LINE_BYTES, MAX_EVENT_BYTES)
    };
    let want = reference_events(stream, max_line, max_event);
    let mut sp = SseSplitter::with_limits(max_line, max_event);
    for _ in 0..2 {
        let mut got = Vec::new();
        let mut seed = (h(2) << 8 | h(3)) as u32 | 1;
        let mut rest = stream;
        while !rest.is_empty() {
            // xorshift: frames of 1 to 16 bytes, or up to 511 now and then (0: an empty frame).
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let n = if seed.is_multiple_of(8) {
                seed as usize % 512
            } else {
                1 + seed as usize % 16
            };
            let (frame, r) = rest.split_at(n.min(rest.len()));
            sp.feed(frame, &mut |ev| got.push(ev.to_vec()));
            rest = r;
        }
        sp.finish(&mut |ev| got.push(ev.to_vec()));
        assert_eq!(
            (&got, sp.overflow().is_some()),
            (&want.0, want.1),
            "{:?}",
            String::from_utf8_lossy(stream)
        );
        sp.reset();
    }
    let mut st = StreamState {
        max_content_chunks: Some(1 + h(1) % 8),
        ..StreamState::default()
    };
    for (t, ev) in want.0.iter().enumerate() {
        assert!(ev.len() <= max_line.max(max_event), "{} bytes", ev.len());
        st.on_event(ev, t as u64);
        check_fast_path(ev);
    }
    assert!(st.content_chunk_ns.len() <= 1 + h(1) % 8);
    let _ = st.outcome(false);
    check_fast_path(stream);
}

/// `stream`'s events and whether a limit stopped it, read whole by the module's rules: the
/// reference [`SseSplitter`] must match, however the stream is cut into frames. A line over
/// `max_line` stops it; so does a `data` line that would take an event's data over `max_event`
/// (a first `data` line is bounded by `max_line` alone).
fn reference_events(stream: &[u8], max_line: usize, max_event: usize) -> (Vec<Vec<u8>>, bool) {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < stream.len() {
        match stream[i] {
            b'\n' => {
                lines.push(&stream[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&stream[start..i]);
                if stream.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < stream.len() {
        lines.push(&stream[start..]);
    }
    lines.push(b""); // the end of the stream dispatches a pending event
    let mut events = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    for line in lines {
        if line.len() > max_line {
            return (events, true);
        }
        if line.is_empty() {
            events.extend(data.take());
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            continue;
        }
        match &mut data {
            None => data = Some(value.to_vec()),
            Some(d) if d.len() + 1 + value.len() > max_event => return (events, true),
            Some(d) => {
                d.push(b'\n');
                d.extend_from_slice(value);
            }
        }
    }
    (events, false)
}

/// Where the chunk fast path answers on `data`, it answers as the serde path does on a fresh
/// state (content chunk, `finish_reason`, and nothing else: no usage, metrics or error). Returns
/// whether it answered; panics on a disagreement.
fn check_fast_path(data: &[u8]) -> bool {
    let Some(fast) = super::chunk_scan::scan(data) else {
        return false;
    };
    let mut st = StreamState::default();
    st.on_event_serde(data, 1);
    let other = st.usage.is_some()
        || st.metrics.is_some()
        || st.server_error.is_some()
        || st.protocol_error.is_some();
    let content = !st.content_chunk_ns.is_empty();
    assert!(
        !other && content == fast.content && st.finish_reason.as_deref() == fast.finish_reason,
        "fast path disagrees with serde on {:?}: fast {fast:?}, serde ({content}, {:?}, other {other})",
        String::from_utf8_lossy(data),
        st.finish_reason
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> Vec<u8> {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/openai")
            .join(name);
        let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        // Some fixtures are whole HTTP responses: keep the body after the blank line.
        if raw.starts_with(b"HTTP/") {
            let i = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            raw[i + 4..].to_vec()
        } else {
            raw
        }
    }

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

    /// Lines and events over the limits stop the splitter wherever the frames split them; at
    /// the limits exactly they pass.
    #[test]
    fn lines_and_events_are_bounded_at_every_split() {
        let line = |n: usize| format!("data: {}\n\n", "x".repeat(n - 6)).into_bytes();
        let event = |lines: usize| {
            let mut v = Vec::new();
            for _ in 0..lines {
                v.extend_from_slice(format!("data: {}\n", "y".repeat(50)).as_bytes());
            }
            v.push(b'\n');
            v
        };
        // (stream, events expected, overflow expected): 6 + 58 = a 64-byte line; 5 data lines of
        // 50 bytes are 254 bytes joined, 6 are 305.
        let cases = [
            (line(64), 1, None),
            (line(65), 0, Some("line longer than 64")),
            (event(5), 1, None),
            (event(6), 0, Some("event larger than 256")),
            ([b':'; 200].to_vec(), 0, Some("line longer than 64")),
        ];
        for (bytes, events, overflow) in cases {
            for split in 1..bytes.len() {
                let mut sp = SseSplitter::with_limits(64, 256);
                let mut n = 0;
                for f in bytes.chunks(split) {
                    sp.feed(f, &mut |_| n += 1);
                }
                sp.finish(&mut |_| n += 1);
                assert_eq!(n, events, "split {split}");
                match overflow {
                    Some(w) => assert!(sp.overflow().is_some_and(|o| o.contains(w)), "{split}"),
                    None => assert_eq!(sp.overflow(), None, "split {split}"),
                }
            }
        }
        let mut sp = SseSplitter::with_limits(64, 256);
        sp.feed(&line(65), &mut |_| {});
        let mut n = 0;
        sp.feed(b"data: [DONE]\n\n", &mut |_| n += 1);
        assert_eq!(n, 0, "nothing is parsed after an overflow");
        sp.reset();
        sp.feed(b"data: [DONE]\n\n", &mut |_| n += 1);
        assert_eq!((n, sp.overflow()), (1, None));
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

    /// Where the fast path answers, it must answer as serde does.
    fn agrees(data: &[u8]) -> bool {
        check_fast_path(data)
    }

    /// Every event of every stream fixture, and the stub's chunk shapes.
    fn real_events() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for f in FIXTURES {
            let mut sp = SseSplitter::new();
            sp.feed(&fixture(f.file), &mut |ev| out.push(ev.to_vec()));
            sp.finish(&mut |ev| out.push(ev.to_vec()));
        }
        out.retain(|e| e != b"[DONE]");
        out
    }

    #[test]
    fn fast_path_answers_for_plain_chunks_and_agrees_with_serde() {
        let events = real_events();
        let mut answered = 0;
        for e in &events {
            let has_usage = e.windows(7).any(|w| w == b"\"usage\"");
            let fast = agrees(e);
            // every chunk without usage/metrics is plain: the fast path must take it
            assert_eq!(fast, !has_usage, "{}", String::from_utf8_lossy(e));
            answered += usize::from(fast);
        }
        // Plain chunks per fixture, counted by hand (role + content, without usage): chat 5,
        // continuous usage 0 (every chunk carries usage), per-request metrics 4, completion
        // stop 3, completion 5.
        assert_eq!(
            answered,
            [5, 0, 4, 3, 5].iter().sum::<usize>(),
            "{answered}"
        );
    }

    #[test]
    fn fast_path_edge_cases() {
        use super::super::chunk_scan::{Scan, scan};
        let yes = |content, fr| {
            Some(Scan {
                content,
                finish_reason: fr,
            })
        };
        let cases: &[(&str, Option<Scan<'_>>)] = &[
            (r#"{"choices":[{"text":"a"}]}"#, yes(true, None)),
            (
                r#" { "choices" : [ { "text" : "" , "finish_reason" : "stop" } ] } "#,
                yes(false, Some("stop")),
            ),
            (
                r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                yes(false, None),
            ),
            (
                r#"{"choices":[{"delta":{"content":null,"reasoning":"x"}}]}"#,
                yes(true, None),
            ),
            (
                r#"{"choices":[{"delta":null,"text":null}]}"#,
                yes(false, None),
            ),
            (r#"{"choices":[]}"#, yes(false, None)),
            (r#"{"choices":null,"object":null}"#, yes(false, None)),
            (
                r#"{"choices":[{"text":"\n"},{"text":[1,2.5e-3,-0,true]}],"x":{}}"#,
                yes(true, None),
            ),
            (
                r#"{"choices":[{"text":"é","finish_reason":"length"}]}"#,
                yes(true, Some("length")),
            ),
            (r#"{}"#, yes(false, None)),
            // declined: serde must decide
            (r#"{"choices":[{"text":"\u0041"}]}"#, None),
            (r#"{"choices":[{"text":"a","text":"b"}]}"#, None),
            (r#"{"choices":[{"text":"a"}],"choices":[]}"#, None),
            (r#"{"choices":[["a"]]}"#, None),
            (r#"{"choices":[{"delta":["a"]}]}"#, None),
            (r#"{"choices":[{"text":1}]}"#, None),
            (r#"{"choices":[{"text":"a"}],"usage":null}"#, None),
            (r#"{"object":"error","message":"x"}"#, None),
            (r#"{"object":"error"}"#, None),
            (r#"{"error":{"message":"x"}}"#, None),
            (r#"{"choices":[{"text":"a"}]} x"#, None),
            (r#"{"choices":[{"text":"a"}],}"#, None),
            (r#"{"n":01}"#, None),
            (r#"{"n":1.}"#, None),
            (r#"{"n":-}"#, None),
            (r#"{"n":tru}"#, None),
            (r#"{"s":"a\qb"}"#, None),
            (r#"{"ch\/oices":[]}"#, None),
            (r#"{"choices":[{"finish_reason":"st\/op"}]}"#, None),
            (r#"[{"text":"a"}]"#, None),
            (r#"{"choices":[{"text":"a"}]"#, None),
        ];
        for (text, want) in cases {
            assert_eq!(scan(text.as_bytes()), *want, "{text}");
            agrees(text.as_bytes());
        }
        assert_eq!(scan(b"{\"s\":\"a\x01\"}"), None);
        assert_eq!(scan(b"{\"s\":\"\xff\"}"), None);
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(scan(deep.as_bytes()), None);
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

    #[test]
    fn fast_path_agrees_with_serde_on_mutated_chunks() {
        use rand::RngExt;
        let events = real_events();
        let mut rng = crate::arrivals::seeded_rng(7, 0xFA57);
        const BYTES: &[u8] = b"\"\\{}[],: 0-e.nutfa\x01\xc3\xa9\xffE+/";
        let mut answered = 0usize;
        let total = 40_000;
        for _ in 0..total {
            let mut e = events[rng.random_range(0..events.len())].clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..e.len());
                match rng.random_range(0..4) {
                    0 => e[at] = BYTES[rng.random_range(0..BYTES.len())],
                    1 => {
                        e.remove(at);
                    }
                    2 => e.insert(at, BYTES[rng.random_range(0..BYTES.len())]),
                    _ => {
                        let end = (at + rng.random_range(1..12)).min(e.len());
                        let span = e[at..end].to_vec();
                        e.splice(at..at, span);
                    }
                }
                if e.is_empty() {
                    e.push(b'{');
                }
            }
            answered += usize::from(agrees(&e));
        }
        // The mutations must exercise both paths.
        assert!(
            answered > total / 20 && answered < total * 19 / 20,
            "{answered}"
        );
    }
}
