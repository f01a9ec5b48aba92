//! Incremental Server-Sent Events framing: bytes → events, allocation-free in the steady state.
//!
//! [`SseSplitter`] follows the WHATWG HTML "server-sent events" rules that matter here: lines end
//! in LF, CRLF or a lone CR (a CRLF split across two frames is one line end); `data:` lines (one
//! optional space after the colon is dropped) accumulate, joined by LF; an empty line dispatches
//! the event; lines starting with `:` are comments; other fields (`event`, `id`, `retry`) are
//! ignored. Events may be split across frames at any byte.
//!
//! Lines and events are bounded ([`MAX_LINE_BYTES`], [`MAX_EVENT_BYTES`]); what happens past a
//! bound is the caller's choice ([`Overflow`]): the load client stops (the request fails as a
//! protocol error), the gateway, which forwards the bytes anyway, drops the event and reads on.

/// Longest SSE line accepted, bytes (1 MiB): a vLLM chunk is well under 1 KiB, one with 20 top
/// logprobs per token a few KiB. A server that sends a line without end (a broken proxy, a hostile
/// target) would otherwise grow the reader's buffer until the allocator aborts.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Largest SSE event accepted (its `data` lines joined), bytes (4 MiB).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// What [`SseSplitter`] does with a line or an event over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Stop: free the buffers, parse nothing more, say why in [`SseSplitter::overflow`].
    Stop,
    /// Drop the event the line or the data belongs to (skipping an overlong line to its end, so
    /// no part of it is read as a line of its own: a hostile upstream could otherwise hide an
    /// event in its tail) and read on from the next event; counted in
    /// [`SseSplitter::skipped`].
    Skip,
}

/// Splits a byte stream into SSE events (see the module docs), within a line and an event limit.
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
    on_overflow: Overflow,
    /// [`Overflow::Stop`]: set once a limit was passed; nothing more is parsed.
    overflow: Option<String>,
    /// [`Overflow::Skip`]: inside an overlong line, dropped up to its end.
    skipping_line: bool,
    /// [`Overflow::Skip`]: the current event passed a limit; its lines are dropped up to the
    /// blank line that ends it, and it is not dispatched.
    skipping_event: bool,
    /// [`Overflow::Skip`]: lines or events dropped so far.
    skipped: u64,
}

impl Default for SseSplitter {
    fn default() -> Self {
        SseSplitter::with_limits(MAX_LINE_BYTES, MAX_EVENT_BYTES)
    }
}

impl SseSplitter {
    /// A splitter with the default limits that stops at the first overflow.
    pub fn new() -> SseSplitter {
        SseSplitter::default()
    }

    /// A splitter that accepts lines of at most `max_line` bytes and events of at most
    /// `max_event` bytes of data, and stops past either ([`Overflow::Stop`]). No buffer is
    /// allocated until an event is cut across frames.
    pub fn with_limits(max_line: usize, max_event: usize) -> SseSplitter {
        SseSplitter {
            partial: Vec::new(),
            data: Vec::new(),
            has_data: false,
            after_cr: false,
            max_line,
            max_event,
            on_overflow: Overflow::Stop,
            overflow: None,
            skipping_line: false,
            skipping_event: false,
            skipped: 0,
        }
    }

    /// The same splitter with `policy` for lines and events over the limits.
    pub fn on_overflow(mut self, policy: Overflow) -> SseSplitter {
        self.on_overflow = policy;
        self
    }

    /// Clears state for reuse on a new stream (keeps the buffers).
    pub fn reset(&mut self) {
        self.partial.clear();
        self.data.clear();
        self.has_data = false;
        self.after_cr = false;
        self.overflow = None;
        self.skipping_line = false;
        self.skipping_event = false;
        self.skipped = 0;
    }

    /// Why the splitter stopped ([`Overflow::Stop`]): a line or an event over its limit. `None`
    /// while it parses.
    pub fn overflow(&self) -> Option<&str> {
        self.overflow.as_deref()
    }

    /// Lines or events dropped over a limit ([`Overflow::Skip`]).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// A limit was passed (`why`): stop, or drop the current event (and, with `line_open`, the
    /// rest of the line that has no end yet).
    fn over(&mut self, why: impl FnOnce() -> String, line_open: bool) {
        match self.on_overflow {
            Overflow::Stop => {
                self.overflow.get_or_insert_with(why);
                // The buffers may be large by now.
                self.partial = Vec::new();
                self.data = Vec::new();
            }
            Overflow::Skip => {
                self.skipped += 1;
                self.partial.clear();
                self.data.clear();
                self.skipping_event = true;
                self.skipping_line = line_open;
            }
        }
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
        if self.skipping_line {
            let Some(off) = memchr::memchr2(b'\n', b'\r', &frame[i..]) else {
                return;
            };
            self.skipping_line = false;
            i = self.after_line_end(frame, i + off);
        }
        // The current event's data while it is a single line inside `frame`.
        let mut borrowed: Option<(usize, usize)> = None;
        while i < frame.len() {
            let Some(off) = memchr::memchr2(b'\n', b'\r', &frame[i..]) else {
                if self.partial.len() + (frame.len() - i) > self.max_line {
                    let max = self.max_line;
                    return self.over(
                        || format!("SSE line longer than {max} bytes without a line end"),
                        true,
                    );
                }
                self.partial.extend_from_slice(&frame[i..]);
                break;
            };
            let pos = i + off;
            let next = self.after_line_end(frame, pos);
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

    /// The index after the line end at `pos` (LF, CR or CRLF); a CR that ends the frame may pair
    /// with an LF at the start of the next one.
    #[inline(always)]
    fn after_line_end(&mut self, frame: &[u8], pos: usize) -> usize {
        let next = pos + 1;
        if frame[pos] == b'\r' {
            match frame.get(next) {
                Some(b'\n') => return next + 1,
                Some(_) => {}
                None => self.after_cr = true,
            }
        }
        next
    }

    /// End of stream: an unfinished line is processed and a pending event dispatched (a stream
    /// may end without the final blank line).
    pub fn finish(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if self.overflow.is_some() {
            return;
        }
        self.skipping_line = false;
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
    #[inline]
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
            *borrowed = None;
            let max = self.max_line;
            return self.over(|| format!("SSE line longer than {max} bytes"), false);
        }
        if line.is_empty() {
            if std::mem::replace(&mut self.skipping_event, false) {
                return;
            }
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
        if line[0] == b':' || self.skipping_event {
            return; // a comment, or a line of a dropped event
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
                let max = self.max_event;
                return self.over(|| format!("SSE event larger than {max} bytes"), false);
            }
            self.data.push(b'\n');
            self.data.extend_from_slice(&buf[value_start..end]);
        }
    }
}

/// The splitter's properties on any input (the body of `crates/load/fuzz`'s target `sse`, with
/// the chunk checks): the splitter never panics; split into frames anywhere (the input's first
/// four bytes choose the frame sizes, the line/event limits and the [`Overflow`] policy; the
/// rest is the stream), it yields exactly the events, and stops or skips exactly where, a
/// whole-stream reading by the module's rules does, and again after [`SseSplitter::reset`]; no
/// event is larger than its limits allow; and wherever the chunk fast path answers (on every
/// event, and on the stream read as one event), it answers as the serde path does
/// ([`crate::chunk::check_fast_path`]). Returns the events; panics when a property does not
/// hold.
pub fn check_properties(data: &[u8]) -> Vec<Vec<u8>> {
    let (head, stream) = data.split_at(data.len().min(4));
    let h = |i: usize| head.get(i).copied().unwrap_or(0) as usize;
    // Small limits (1..=64 bytes a line, 1..=256 an event) so the fuzzer reaches them, or the
    // defaults.
    let (max_line, max_event) = if h(0) & 1 == 0 {
        (1 + (h(0) >> 1) % 64, 1 + h(1))
    } else {
        (MAX_LINE_BYTES, MAX_EVENT_BYTES)
    };
    // The seed below sets its low bit anyway: that bit of byte 3 picks the policy.
    let policy = if h(3) & 1 == 1 {
        Overflow::Skip
    } else {
        Overflow::Stop
    };
    let want = reference_events(stream, max_line, max_event, policy);
    let mut sp = SseSplitter::with_limits(max_line, max_event).on_overflow(policy);
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
            (&got, sp.overflow().is_some(), sp.skipped() > 0),
            (
                &want.0,
                want.1 && policy == Overflow::Stop,
                want.1 && policy == Overflow::Skip
            ),
            "{policy:?} {:?}",
            String::from_utf8_lossy(stream)
        );
        sp.reset();
    }
    for ev in &want.0 {
        assert!(ev.len() <= max_line.max(max_event), "{} bytes", ev.len());
        crate::chunk::check_fast_path(ev);
    }
    crate::chunk::check_fast_path(stream);
    want.0
}

/// `stream`'s events and whether a limit was passed, read whole by the module's rules: the
/// [`SseSplitter`] must match, however the stream is cut into frames. A line over `max_line`
/// passes a limit; so does a `data` line that would take an event's data over `max_event` (a
/// first `data` line is bounded by `max_line` alone). [`Overflow::Stop`] ends the reading there;
/// [`Overflow::Skip`] drops that event's lines up to its blank line and reads on.
fn reference_events(
    stream: &[u8],
    max_line: usize,
    max_event: usize,
    policy: Overflow,
) -> (Vec<Vec<u8>>, bool) {
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
    let (mut passed, mut dropping) = (false, false);
    for line in lines {
        if line.len() > max_line {
            passed = true;
            if policy == Overflow::Stop {
                return (events, true);
            }
            data = None;
            dropping = true;
            continue;
        }
        if line.is_empty() {
            if std::mem::replace(&mut dropping, false) {
                data = None;
            } else {
                events.extend(data.take());
            }
            continue;
        }
        if line[0] == b':' || dropping {
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
            Some(d) if d.len() + 1 + value.len() > max_event => {
                passed = true;
                if policy == Overflow::Stop {
                    return (events, true);
                }
                data = None;
                dropping = true;
            }
            Some(d) => {
                d.push(b'\n');
                d.extend_from_slice(value);
            }
        }
    }
    (events, passed)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// With [`Overflow::Skip`] a line longer than the limit is skipped whole, however it is
    /// framed: a `data:` event in its tail is no event (a hostile upstream could otherwise
    /// inject one a proxy counts), and the events after it are read again.
    #[test]
    fn an_overlong_line_is_skipped_to_its_end() {
        let chunk = br#"data: {"choices":[{"text":"a"}]}"#;
        let mut stream = b"x".to_vec();
        stream.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES + 10));
        // The tail of the overlong line looks like an event.
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\n");
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        let want: [&[u8]; 2] = [&chunk[6..], b"[DONE]"];
        for split in [7, 4096, 65_536, MAX_LINE_BYTES + 3, stream.len()] {
            let mut sp = SseSplitter::new().on_overflow(Overflow::Skip);
            let mut got = Vec::new();
            for f in stream.chunks(split) {
                sp.feed(f, &mut |ev| got.push(ev.to_vec()));
            }
            sp.finish(&mut |ev| got.push(ev.to_vec()));
            assert_eq!(got, want, "split {split}");
            assert_eq!((sp.skipped(), sp.overflow()), (1, None), "split {split}");
        }
        // Framed so that the buffer gives up exactly before a frame that starts like an event.
        let mut sp = SseSplitter::new().on_overflow(Overflow::Skip);
        let mut got = Vec::new();
        let mut first = b"x".to_vec();
        first.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES));
        let mut tail = chunk.to_vec();
        tail.extend_from_slice(b"\n\n");
        for f in [&first[..], b"yy", &tail, &tail] {
            sp.feed(f, &mut |ev| got.push(ev.to_vec()));
        }
        sp.finish(&mut |ev| got.push(ev.to_vec()));
        assert_eq!(got, [&chunk[6..]]);
    }

    /// With [`Overflow::Skip`] an event over its limit is dropped whole, the next one is read.
    #[test]
    fn an_overlarge_event_is_dropped_and_the_next_read() {
        let mut stream = Vec::new();
        for _ in 0..6 {
            stream.extend_from_slice(format!("data: {}\n", "y".repeat(50)).as_bytes());
        }
        stream.extend_from_slice(b"\ndata: a\n\n");
        for split in 1..stream.len() {
            let mut sp = SseSplitter::with_limits(64, 256).on_overflow(Overflow::Skip);
            let mut got = Vec::new();
            for f in stream.chunks(split) {
                sp.feed(f, &mut |ev| got.push(ev.to_vec()));
            }
            sp.finish(&mut |ev| got.push(ev.to_vec()));
            assert_eq!(got, [b"a"], "split {split}");
        }
    }

    /// [`check_properties`] over seeded random streams of SSE lines with random line ends,
    /// limits, policies and frame cuts (the fuzz target's body, for machines without nightly).
    #[test]
    fn properties_hold_on_random_streams() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(0x5E5);
        const LINES: &[&[u8]] = &[
            b"data: {\"choices\":[{\"text\":\"a\"}]}",
            b"data:{\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}",
            b"data: [DONE]",
            b"data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            b"data:",
            b"data",
            b": comment",
            b"event: e",
            b"",
            b"",
        ];
        for _ in 0..20_000 {
            let mut e: Vec<u8> = (0..4).map(|_| rng.random()).collect();
            for _ in 0..rng.random_range(0..24) {
                e.extend_from_slice(LINES[rng.random_range(0..LINES.len())]);
                e.extend_from_slice([&b"\n"[..], b"\r", b"\r\n"][rng.random_range(0..3)]);
            }
            check_properties(&e);
        }
    }
}
