//! Incremental reading of an OpenAI SSE stream for measurement, without copying it.
//!
//! The proxy forwards every upstream frame unchanged; [`SseScanner::feed`] looks at the same
//! bytes afterwards. Lines end in LF, CRLF or a lone CR (a CRLF split across frames is one line
//! end); only `data:`
//! lines matter. A `data:` line that is a JSON chunk is decoded into the few fields needed, with
//! no allocation for text: whether any choice carries generated text (`text` for completions,
//! `delta.content`, `delta.reasoning_content` or `delta.reasoning` for chat — a role-only chunk
//! with `content: ""` does not count, as [`headroom_core::signal`] defines TTFT), the last
//! non-null `finish_reason`, `usage.completion_tokens`, and an `error` object. Only a line cut
//! across two frames is copied (into a small carry buffer).

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use std::fmt;

/// What one SSE `data:` event said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventInfo {
    /// The event carries generated text.
    pub content: bool,
    /// A `finish_reason` arrived in this event.
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

/// Splits a byte stream into SSE `data:` events.
#[derive(Debug, Default)]
pub struct SseScanner {
    carry: Vec<u8>,
    after_cr: bool,
    /// Inside a line longer than [`MAX_LINE`]: its bytes are skipped up to its end, so no part
    /// of it is read as a line of its own.
    discarding: bool,
}

/// The longest line kept for measurement, bytes; a longer one is not SSE and is skipped whole.
const MAX_LINE: usize = 1 << 20;

impl SseScanner {
    /// A scanner with an empty carry buffer.
    pub fn new() -> SseScanner {
        SseScanner::default()
    }

    /// Feeds one frame; calls `on` for every complete `data:` event in it.
    pub fn feed(&mut self, mut bytes: &[u8], on: &mut impl FnMut(EventInfo)) {
        if self.after_cr {
            // The CR that ended the last frame's line may be the first half of a CRLF.
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        if self.discarding {
            match line_end(bytes) {
                None => return,
                Some((_, next)) => {
                    self.discarding = false;
                    bytes = self.advance(bytes, next);
                }
            }
        }
        if !self.carry.is_empty() {
            match line_end(bytes) {
                None => {
                    self.carry.extend_from_slice(bytes);
                    // An endless line is not SSE; stop buffering it, and skip the rest of it.
                    if self.carry.len() > MAX_LINE {
                        self.carry.clear();
                        self.discarding = true;
                    }
                    return;
                }
                Some((i, next)) => {
                    self.carry.extend_from_slice(&bytes[..i]);
                    let line = std::mem::take(&mut self.carry);
                    line_event(&line, on);
                    bytes = self.advance(bytes, next);
                }
            }
        }
        while let Some((i, next)) = line_end(bytes) {
            line_event(&bytes[..i], on);
            bytes = self.advance(bytes, next);
        }
        if bytes.len() > MAX_LINE {
            self.discarding = true;
        } else {
            self.carry.extend_from_slice(bytes);
        }
    }

    /// The rest after a line end found at `next` (the index after it; `None` = a CR ending
    /// the frame, which may pair with an LF in the next one).
    fn advance<'a>(&mut self, bytes: &'a [u8], next: Option<usize>) -> &'a [u8] {
        match next {
            Some(n) => &bytes[n..],
            None => {
                self.after_cr = true;
                &[]
            }
        }
    }

    /// Ends the stream: a last line without a line end still counts (one being skipped does not).
    pub fn finish(&mut self, on: &mut impl FnMut(EventInfo)) {
        self.discarding = false;
        let line = std::mem::take(&mut self.carry);
        if !line.is_empty() {
            line_event(&line, on);
        }
    }
}

/// The first line end (LF, CRLF or a lone CR, as the SSE spec allows): its index and the
/// index after it, or `None` for a CR that is the frame's last byte.
fn line_end(b: &[u8]) -> Option<(usize, Option<usize>)> {
    let i = memchr::memchr2(b'\n', b'\r', b)?;
    if b[i] == b'\n' {
        return Some((i, Some(i + 1)));
    }
    match b.get(i + 1) {
        Some(b'\n') => Some((i, Some(i + 2))),
        Some(_) => Some((i, Some(i + 1))),
        None => Some((i, None)),
    }
}

fn line_event(line: &[u8], on: &mut impl FnMut(EventInfo)) {
    let Some(data) = line.strip_prefix(b"data:") else {
        return;
    };
    let data = data.strip_prefix(b" ").unwrap_or(data);
    on(parse_data(data));
}

/// Decodes one `data:` payload (without the `data:` prefix). A plain chunk is read in one pass
/// ([`crate::sse_scan`]); anything that reader is not sure of goes through serde_json.
pub fn parse_data(data: &[u8]) -> EventInfo {
    if data.trim_ascii() == b"[DONE]" {
        return EventInfo {
            done: true,
            ..EventInfo::default()
        };
    }
    crate::sse_scan::scan(data).unwrap_or_else(|| parse_serde(data))
}

/// The reference reading of a JSON payload: serde_json into the fields named in the module doc;
/// anything serde rejects says nothing.
fn parse_serde(data: &[u8]) -> EventInfo {
    let Ok(c) = serde_json::from_slice::<Chunk>(data) else {
        return EventInfo::default();
    };
    let mut info = EventInfo {
        error: c.error.is_some(),
        completion_tokens: c
            .usage
            .and_then(|u| u.completion_tokens)
            .and_then(|n| u32::try_from(n).ok()),
        ..EventInfo::default()
    };
    for ch in &c.choices {
        let delta = ch
            .delta
            .as_ref()
            .is_some_and(|d| d.content.0 || d.reasoning_content.0 || d.reasoning.0);
        info.content |= ch.text.0 || delta;
        if let Some(f) = ch.finish_reason {
            info.finish = Some(f.0);
        }
    }
    info
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    text: NonEmpty,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<FinishField>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: NonEmpty,
    #[serde(default)]
    reasoning_content: NonEmpty,
    #[serde(default)]
    reasoning: NonEmpty,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// `true` for a non-empty string; `false` for `""`, `null` or anything else. Never allocates.
#[derive(Default)]
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NonEmpty, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!s.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<NonEmpty, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<NonEmpty, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(NonEmpty(false))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<NonEmpty, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(NonEmpty(false))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Clone, Copy)]
struct FinishField(Finish);

impl<'de> Deserialize<'de> for FinishField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FinishField, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FinishField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a finish_reason string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<FinishField, E> {
                Ok(FinishField(match s {
                    "length" => Finish::Length,
                    "abort" | "error" => Finish::Failed,
                    _ => Finish::Stop,
                }))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line longer than MAX_LINE is skipped whole, however it is framed: a `data:` event in
    /// its tail is no event (a hostile upstream could otherwise inject one the proxy counts),
    /// and the lines after it are read again.
    #[test]
    fn an_overlong_line_is_skipped_to_its_end() {
        let chunk = br#"data: {"choices":[{"text":"a"}]}"#;
        let mut stream = Vec::new();
        stream.extend_from_slice(b"x");
        stream.extend(std::iter::repeat_n(b'y', MAX_LINE + 10));
        // The tail of the overlong line looks like an event.
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\n");
        stream.extend_from_slice(chunk);
        stream.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        for split in [7, 4096, 65_536, MAX_LINE + 3, stream.len()] {
            let (content, _, _, done) = scan(&stream, split);
            assert_eq!(content, 1, "split {split}");
            assert!(done, "split {split}");
        }
        // Framed so that the buffer gives up exactly before a frame that starts like an event.
        let mut s = SseScanner::new();
        let mut events = 0;
        let mut on = |e: EventInfo| events += usize::from(e.content);
        let mut first = b"x".to_vec();
        first.extend(std::iter::repeat_n(b'y', MAX_LINE));
        s.feed(&first, &mut on);
        s.feed(b"yy", &mut on);
        let mut tail = chunk.to_vec();
        tail.extend_from_slice(b"\n\n");
        s.feed(&tail, &mut on);
        s.feed(&tail, &mut on);
        s.finish(&mut on);
        assert_eq!(events, 1);
    }

    fn fixture(name: &str) -> Vec<u8> {
        let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/openai")
            .join(name);
        let raw = std::fs::read(&p).unwrap();
        // Some fixtures are whole HTTP responses: keep the body after the blank line.
        if raw.starts_with(b"HTTP/") {
            let i = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            raw[i + 4..].to_vec()
        } else {
            raw
        }
    }

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

    /// The JSON payload of every `data:` line of the streaming fixtures.
    fn fixture_payloads() -> Vec<Vec<u8>> {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openai");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("stream") && n.ends_with(".txt"))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for n in names {
            for line in fixture(&n).split(|&c| c == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if let Some(d) = line.strip_prefix(b"data: ")
                    && d.starts_with(b"{")
                {
                    out.push(d.to_vec());
                }
            }
        }
        out
    }

    #[test]
    fn one_pass_reader_agrees_with_serde_on_real_chunks() {
        let payloads = fixture_payloads();
        // By grep over fixtures/openai/*stream*.txt: 26 JSON events, 9 of them carry a
        // `usage` object (left to serde); the other 17 are read in one pass.
        assert_eq!(payloads.len(), 26);
        let mut fast = 0;
        for p in &payloads {
            let reference = parse_serde(p);
            if let Some(info) = crate::sse_scan::scan(p) {
                assert_eq!(info, reference, "{}", String::from_utf8_lossy(p));
                fast += 1;
            }
            assert_eq!(parse_data(p), reference);
        }
        assert_eq!(fast, 17);
    }

    #[test]
    fn one_pass_reader_declines_what_it_cannot_be_sure_of() {
        let cases: [(&[u8], bool); 14] = [
            // (payload, whether the one-pass reader may answer)
            (br#"{"choices":[{"text":"a"}]}"#, true),
            (br#" {"choices" : [ {"text" : "\u00e9"} ] } "#, false),
            (
                b"{\"choices\":[{\"text\":\"caf\xc3\xa9\"}],\"usage\":null}",
                true,
            ),
            (br#"{"choices":[{"text":"a\nb"}]}"#, false),
            (br#"{"choices":[{"text":"a","text":""}]}"#, false),
            (br#"{"choices":[],"choices":[{"text":"a"}]}"#, false),
            (br#"{"choices":[{"text":"a"},]}"#, false),
            (br#"{"choices":[["a",null,"stop"]]}"#, false),
            (br#"{"choices":[{"delta":["x"]}]}"#, false),
            (br#"{"choices":[{"finish_reason":1}]}"#, false),
            (br#"{"choices":[{"text":"a"}],"n":01}"#, false),
            (br#"{"choices":[{"text":"a"}]} x"#, false),
            (
                br#"{"choices":[{"text":"a","x":[1.5e-3,true,{"y":[]}]}],"error":null}"#,
                true,
            ),
            (b"{\"choices\":[{\"text\":\"\xff\"}]}", false),
        ];
        for (p, may) in cases {
            let fast = crate::sse_scan::scan(p);
            assert_eq!(fast.is_some(), may, "{}", String::from_utf8_lossy(p));
            if let Some(info) = fast {
                assert_eq!(info, parse_serde(p), "{}", String::from_utf8_lossy(p));
            }
        }
        // Declined events still get serde's reading: an escaped newline is generated text, a
        // duplicate field makes the event unreadable.
        assert!(parse_data(br#"{"choices":[{"text":"a\nb"}]}"#).content);
        assert!(!parse_data(br#"{"choices":[{"text":"a","text":""}]}"#).content);
        let deep = format!(
            "{{\"choices\":[{{\"text\":\"a\"}}],\"x\":{}1{}}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert_eq!(crate::sse_scan::scan(deep.as_bytes()), None);
        assert!(parse_data(deep.as_bytes()).content);
    }

    #[test]
    fn one_pass_reader_never_disagrees_with_serde_on_mutated_chunks() {
        // Seeded edits (replace, insert, delete) of real chunks with bytes that matter to JSON:
        // whenever the one-pass reader answers, serde must say the same.
        let alphabet = b"\"\\{}[],: nul0-e.tf1\x01\xc3\xa9\xff\t";
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut answered, mut total) = (0, 0);
        for p in fixture_payloads() {
            for _ in 0..600 {
                let mut m = p.clone();
                for _ in 0..1 + next(3) {
                    let at = next(m.len());
                    let c = alphabet[next(alphabet.len())];
                    match next(3) {
                        0 => m[at] = c,
                        1 => m.insert(at, c),
                        _ => {
                            m.remove(at);
                        }
                    }
                    if m.is_empty() {
                        m.push(c);
                    }
                }
                total += 1;
                if let Some(info) = crate::sse_scan::scan(&m) {
                    answered += 1;
                    assert_eq!(info, parse_serde(&m), "{}", String::from_utf8_lossy(&m));
                }
            }
        }
        // The test means something only if many mutants were still readable.
        assert!(answered * 20 > total, "{answered} of {total}");
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
