//! What one SSE event of an OpenAI stream says, read once for the load client and the gateway.
//!
//! `[DONE]` ends the stream ([`is_done`]); every other event is a JSON chunk ([`parse`]) whose
//! choices decide whether it carries generated text — by [`headroom_core::signal::ChunkContent`],
//! any choice with a non-empty `text` (completions) or `delta.content` /
//! `delta.reasoning_content` / `delta.reasoning` (chat) — and may carry a `finish_reason`, the
//! `usage` object (the final chunk with empty `choices`, or every chunk with continuous usage),
//! vLLM's per-request `metrics`, or an error object (`{"error": {...}}`, or vLLM's older
//! top-level `{"object": "error", "message": ...}`) that marks a server error mid-stream.
//!
//! Only the fields needed are decoded, with borrowed strings and a `choices` visitor that folds
//! the choices without collecting them, so a chunk costs one JSON scan and no allocation; a plain
//! content chunk is read by a one-pass scanner first, which answers only where it agrees with
//! serde (checked by [`check_fast_path`]).

use headroom_core::signal::{ChoiceText, ChunkContent};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// `usage` of an OpenAI response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens` (with `n > 1`, vLLM's sum over the choices).
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

/// What one JSON chunk said.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chunk<'a> {
    /// A content chunk ([`ChunkContent`] over its choices).
    pub content: bool,
    /// The last non-null `finish_reason` among its choices.
    pub finish_reason: Option<Cow<'a, str>>,
    /// `usage`, when present.
    pub usage: Option<Usage>,
    /// vLLM's per-request `metrics`, when present.
    pub metrics: Option<RequestMetrics>,
    /// The message of an error object; the other fields are then not read.
    pub error: Option<String>,
}

/// `data: [DONE]`, the end of an OpenAI stream.
pub fn is_done(data: &[u8]) -> bool {
    data == b"[DONE]"
}

/// Reads one event's data (not `[DONE]`): the one-pass scanner where it is sure, serde
/// otherwise.
///
/// # Errors
/// The event is not a chunk serde can read (bad JSON, or a field of the wrong type).
#[inline]
pub fn parse(data: &[u8]) -> Result<Chunk<'_>, serde_json::Error> {
    if let Some(s) = parse_plain(data) {
        return Ok(Chunk {
            content: s.content,
            finish_reason: s.finish_reason.map(Cow::Borrowed),
            ..Chunk::default()
        });
    }
    parse_serde(data)
}

/// What [`parse_plain`] reads of a plain content chunk: whether it is a content chunk and the
/// last non-null `finish_reason` of its choices (it has no usage, metrics or error).
pub use crate::chunk_scan::Scan as Plain;

/// [`parse`]'s fast path alone, for a caller that keeps only a few fields of a chunk and would
/// rather not build a [`Chunk`] for every event: `Some` exactly where [`parse`] answers without
/// serde, with the same content and `finish_reason`; `None` where [`parse_serde`] must read the
/// event (usage, metrics, an error object, or anything the scanner does not fully check).
#[inline]
pub fn parse_plain(data: &[u8]) -> Option<Plain<'_>> {
    crate::chunk_scan::scan(data)
}

/// The reference reading of one event through serde_json; [`parse`]'s fast path answers only
/// where it agrees with this.
///
/// # Errors
/// As [`parse`].
pub fn parse_serde(data: &[u8]) -> Result<Chunk<'_>, serde_json::Error> {
    let msg: ChunkMsg<'_> = serde_json::from_slice(data)?;
    if let Some(err) = msg.error {
        return Ok(Chunk {
            error: Some(error_message(&err)),
            ..Chunk::default()
        });
    }
    if msg.object.as_deref() == Some("error") {
        let m = msg
            .message
            .as_deref()
            .unwrap_or("error object without a message");
        return Ok(Chunk {
            error: Some(m.to_string()),
            ..Chunk::default()
        });
    }
    Ok(Chunk {
        content: msg.choices.content.is_content(),
        finish_reason: msg.choices.finish_reason,
        usage: msg.usage,
        metrics: msg.metrics,
        error: None,
    })
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
    choices: Choices<'a>,
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
/// without keeping the string; any other type is an error.
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

/// `choices`, folded as they are read (no allocation for the list): the content rule over all
/// of them and the last non-null `finish_reason`.
#[derive(Default)]
struct Choices<'a> {
    content: ChunkContent,
    finish_reason: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of choices or null")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Choices<'a>, A::Error> {
                let mut out = Choices::default();
                while let Some(c) = a.next_element::<Choice<'a>>()? {
                    let d = c.delta;
                    out.content.choice(ChoiceText {
                        text: c.text.0,
                        content: d.is_some_and(|d| d.content.0),
                        reasoning_content: d.is_some_and(|d| d.reasoning_content.0),
                        reasoning: d.is_some_and(|d| d.reasoning.0),
                    });
                    if c.finish_reason.is_some() {
                        out.finish_reason = c.finish_reason;
                    }
                }
                Ok(out)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Choices<'a>, E> {
                Ok(Choices::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Choices<'a>, E> {
                Ok(Choices::default())
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Choices<'a>, D2::Error> {
                d.deserialize_seq(self)
            }
        }
        d.deserialize_option(V(std::marker::PhantomData))
    }
}

/// Where the fast path answers on `data`, it answers as [`parse_serde`] does (content,
/// `finish_reason`, and nothing else: no usage, metrics or error). Returns whether it answered;
/// panics on a disagreement. The fuzz target `sse` of `crates/load` and the tests call it.
pub fn check_fast_path(data: &[u8]) -> bool {
    let Some(fast) = crate::chunk_scan::scan(data) else {
        return false;
    };
    let want = Chunk {
        content: fast.content,
        finish_reason: fast.finish_reason.map(Cow::Borrowed),
        ..Chunk::default()
    };
    let serde = parse_serde(data);
    assert!(
        serde.as_ref().is_ok_and(|c| *c == want),
        "fast path disagrees with serde on {:?}: fast {fast:?}, serde {serde:?}",
        String::from_utf8_lossy(data),
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_scan::{Scan, scan};

    use headroom_testkit::openai_fixture_body as fixture;

    /// The JSON payload of every event of every stream fixture.
    fn fixture_payloads() -> Vec<Vec<u8>> {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openai");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("stream") && !n.contains("nonstream") && n.ends_with(".txt"))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for n in names {
            let mut sp = crate::sse::SseSplitter::new();
            let mut push = |ev: &[u8]| {
                if !is_done(ev) {
                    out.push(ev.to_vec());
                }
            };
            sp.feed(&fixture(&n), &mut push);
            sp.finish(&mut push);
        }
        out
    }

    #[test]
    fn fast_path_answers_for_plain_chunks_and_agrees_with_serde() {
        let payloads = fixture_payloads();
        // By grep over fixtures/openai/*stream*.txt: 26 JSON events, 9 of them carry a `usage`
        // object (left to serde); the other 17 are read in one pass.
        assert_eq!(payloads.len(), 26);
        let mut answered = 0;
        for p in &payloads {
            let has_usage = p.windows(9).any(|w| w == b"\"usage\":{");
            let fast = check_fast_path(p);
            assert_eq!(fast, !has_usage, "{}", String::from_utf8_lossy(p));
            answered += usize::from(fast);
            assert_eq!(parse(p).unwrap(), parse_serde(p).unwrap());
        }
        assert_eq!(answered, 17);
    }

    #[test]
    fn fast_path_edge_cases() {
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
            // The second choice carries the text: a content chunk all the same (n > 1).
            (
                r#"{"choices":[{"index":0,"text":""},{"index":1,"text":"b"}]}"#,
                yes(true, None),
            ),
            // The last non-null finish_reason of the chunk.
            (
                r#"{"choices":[{"text":"a","finish_reason":"stop"},{"text":"","finish_reason":"length"},{"finish_reason":null}]}"#,
                yes(true, Some("length")),
            ),
            (r#"{"choices":[{"text":"a\nb"}]}"#, yes(true, None)),
            (
                r#"{"choices":[{"text":"é","finish_reason":"length"}]}"#,
                yes(true, Some("length")),
            ),
            (
                r#"{"choices":[{"text":"a"}],"usage":null,"error":null,"metrics":null}"#,
                yes(true, None),
            ),
            (r#"{}"#, yes(false, None)),
            // declined: serde must decide
            (
                r#"{"choices":[{"text":"a"},{"text":[1,2.5e-3,-0,true]}]}"#,
                None,
            ),
            (r#"{"choices":[{"text":"\u0041"}]}"#, None),
            (r#"{"choices":[{"text":"a","text":"b"}]}"#, None),
            (r#"{"choices":[{"text":"a"}],"choices":[]}"#, None),
            (
                r#"{"choices":[{"text":"a"}],"usage":null,"usage":null}"#,
                None,
            ),
            (r#"{"choices":[["a"]]}"#, None),
            (r#"{"choices":[{"text":"a"},["a",null,"stop"]]}"#, None),
            (r#"{"choices":[{"delta":["a"]}]}"#, None),
            (r#"{"choices":[{"text":1}]}"#, None),
            (r#"{"choices":[{"finish_reason":1}]}"#, None),
            (r#"{"choices":[],"usage":{"completion_tokens":1}}"#, None),
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
            check_fast_path(text.as_bytes());
        }
        assert_eq!(scan(b"{\"s\":\"a\x01\"}"), None);
        assert_eq!(scan(b"{\"s\":\"\xff\"}"), None);
        let deep = format!(
            "{{\"choices\":[{{\"text\":\"a\"}}],\"x\":{}1{}}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert_eq!(scan(deep.as_bytes()), None);
        assert!(parse(deep.as_bytes()).unwrap().content, "serde reads it");
    }

    #[test]
    fn serde_reads_what_the_fast_path_declines() {
        let c = parse(br#"{"choices":[{"text":"\u00e9"}]}"#).unwrap();
        assert!(c.content);
        // A duplicate field, and a text that is not a string, make the event unreadable.
        assert!(parse(br#"{"choices":[{"text":"a","text":""}]}"#).is_err());
        assert!(parse(br#"{"choices":[{"text":1}]}"#).is_err());
        let e = parse(br#"{"error":{"message":"x","code":500}}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("x"));
        let old = parse(br#"{"object": "error", "message": "boom", "code": 400}"#).unwrap();
        assert_eq!(old.error.as_deref(), Some("boom"));
        let u =
            parse(br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#).unwrap();
        assert_eq!(
            u.usage,
            Some(Usage {
                prompt_tokens: Some(3),
                completion_tokens: Some(2)
            })
        );
        // n = 2 with usage: serde applies the same content and finish rules as the fast path.
        let two = parse(
            br#"{"choices":[{"index":0,"text":"","finish_reason":"stop"},{"index":1,"text":"x","finish_reason":"length"}],"usage":{"completion_tokens":7}}"#,
        )
        .unwrap();
        assert!(two.content);
        assert_eq!(two.finish_reason.as_deref(), Some("length"));
        assert!(!is_done(b"[DONE] ") && is_done(b"[DONE]"));
    }

    #[test]
    fn fast_path_agrees_with_serde_on_mutated_chunks() {
        use rand::{RngExt, SeedableRng};
        let mut events = fixture_payloads();
        // Chunks of an n = 2 stream, choices interleaved and listed together.
        events.push(br#"{"choices":[{"index":1,"text":" b","finish_reason":null}]}"#.to_vec());
        events.push(
            br#"{"choices":[{"index":0,"text":"","finish_reason":"stop"},{"index":1,"delta":{"content":"c"},"finish_reason":null}]}"#
                .to_vec(),
        );
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(0xFA57);
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
            answered += usize::from(check_fast_path(&e));
        }
        // The mutations must exercise both paths.
        assert!(
            answered > total / 20 && answered < total * 19 / 20,
            "{answered}"
        );
    }
}
