//! Classification: from a request's route, body and tenant header to a class and tenant label.
//!
//! The body is read once, without building a JSON tree: [`RequestFacts::from_body`] walks it
//! with serde and keeps only `model`, `stream`, the output limit, `n`, `best_of`, the number of
//! prompts of a batch and the *size* of `prompt` / `messages` / `tools`. Prompt tokens are
//! estimated as ⌈characters / 4⌉ (OpenAI's rule of thumb for English text) over every string
//! of every prompt of a batch, of `messages`, and of `tools` / `functions` with their keys
//! (chat templates render tool schemas into the prompt as JSON), plus one token per integer of
//! a token-id prompt; the estimate only chooses a class, it is never exported. The prompt text
//! itself is never stored, logged or used as a label.
//!
//! What a client could otherwise game is read as vLLM reads it: the output limit follows
//! vLLM's precedence (chat: `max_completion_tokens` when given, else `max_tokens`;
//! completions: `max_tokens` only, 16 when absent or null, as vLLM's `CompletionRequest`), and
//! a request counts as [`RequestFacts::sequences`] = prompts × max(`n`, `best_of`) against its
//! class's concurrency limit ([`crate::admit`]), so one admission slot cannot carry N sequences.
//!
//! Label values stay bounded whatever clients send: the class is one of the configured names and
//! the tenant is an allowlisted name or `other`.

use crate::config::{ClassSpec, GatewayConfig, Route};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// What classification needs from a request body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestFacts {
    /// `model`, if a string.
    pub model: Option<String>,
    /// `stream`, read as vLLM's pydantic request model reads it in lax mode (see [`lax_bool`]).
    pub stream: bool,
    /// The output limit per sequence, in vLLM's precedence (see the module doc), when it reads
    /// as a non-negative integer the way vLLM's pydantic model reads it (see [`lax_u64`]).
    /// `None` for a chat request without one: it may then generate up to the rest of the
    /// context window, so a class rule with a `max_tokens` range does not match it.
    pub max_tokens: Option<u64>,
    /// Estimated prompt tokens over every prompt of the request (see the module doc).
    pub prompt_tokens_est: u64,
    /// Sequences the engine runs for it: prompts of a batch × max(`n`, `best_of`), at least 1.
    /// vLLM 0.32 ignores `best_of` (its request models have no such field), older vLLM and
    /// other servers generate that many; counting it never under-counts.
    pub sequences: u64,
}

/// Why a body is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

impl RequestFacts {
    /// Reads the facts from a JSON request body.
    ///
    /// # Errors
    /// [`BodyError`] when the body is not valid JSON or not a JSON object; the message gives
    /// serde_json's line and column. Fields of unexpected types are ignored here (the upstream
    /// validates them), so the gateway is never stricter than the server behind it.
    /// `route` picks the output-limit precedence (`None`: an unmeasured path, read as chat).
    pub fn from_body(body: &[u8], route: Option<Route>) -> Result<RequestFacts, BodyError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let facts = de
            .deserialize_map(FactsVisitor(route))
            .map_err(|e| BodyError(describe(&e)))?;
        de.end().map_err(|e| BodyError(describe(&e)))?;
        Ok(facts)
    }
}

fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => "is not valid JSON",
        Category::Data => "is not a JSON object",
    };
    format!(
        "the request body {what} (line {}, column {})",
        e.line(),
        e.column()
    )
}

struct FactsVisitor(Option<Route>);

/// A field's value unless it is absent or `null` (pydantic treats both as "not given").
fn given(v: serde_json::Value) -> Option<serde_json::Value> {
    (!v.is_null()).then_some(v)
}

impl<'de> Visitor<'de> for FactsVisitor {
    type Value = RequestFacts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestFacts, A::Error> {
        let mut f = RequestFacts::default();
        let (mut max_tokens, mut max_completion) = (None, None);
        let (mut n, mut best_of) = (None, None);
        let mut size = TextSize::default();
        let mut prompts = 1;
        while let Some(key) = map.next_key::<KeyName>()? {
            match key.0 {
                Key::Model => {
                    f.model = match map.next_value::<serde_json::Value>()? {
                        serde_json::Value::String(s) => Some(s),
                        _ => None,
                    }
                }
                Key::Stream => {
                    f.stream = lax_bool(&map.next_value::<serde_json::Value>()?).unwrap_or(false)
                }
                Key::MaxTokens => max_tokens = given(map.next_value::<serde_json::Value>()?),
                Key::MaxCompletionTokens => {
                    max_completion = given(map.next_value::<serde_json::Value>()?)
                }
                Key::N => n = lax_count(&map.next_value::<serde_json::Value>()?),
                Key::BestOf => best_of = lax_count(&map.next_value::<serde_json::Value>()?),
                Key::Prompt => {
                    let p = map.next_value_seed(SizeSeed { keys: false })?;
                    prompts = p.items.max(1);
                    size.add(&p);
                }
                Key::Messages => size.add(&map.next_value_seed(SizeSeed { keys: false })?),
                Key::Tools => size.add(&map.next_value_seed(SizeSeed { keys: true })?),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        f.max_tokens = match self.0 {
            // vLLM's CompletionRequest: `max_tokens: int | None = 16`, null normalised to 16;
            // it has no `max_completion_tokens`.
            Some(Route::Completions) => max_tokens.map_or(Some(16), |v| lax_u64(&v)),
            // ChatCompletionRequest.build_tok_params: `max_completion_tokens` when not None.
            _ => max_completion.or(max_tokens).and_then(|v| lax_u64(&v)),
        };
        let per_prompt = n.unwrap_or(1).max(best_of.unwrap_or(1)).max(1);
        f.sequences = prompts.saturating_mul(per_prompt);
        f.prompt_tokens_est = size.chars.div_ceil(4) + size.ints;
        Ok(f)
    }
}

/// A JSON value as an integer the way pydantic v2 reads an `int` field in lax mode (vLLM's
/// OpenAI request models are pydantic models; the engine twin accepts the same forms): an
/// integer, a float with no fractional part (`1000.0`, `1e3`), a string holding a decimal
/// integer (surrounding whitespace allowed), or a boolean (`true` = 1). Negative or other
/// values give `None` (vLLM refuses them), so a client cannot slip past a class rule by writing
/// the same number another way.
pub fn lax_u64(v: &serde_json::Value) -> Option<u64> {
    use serde_json::Value;
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            // 2^64 is exactly representable; anything at or above it does not fit.
            (f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0).then_some(f as u64)
        }),
        Value::String(s) => {
            let t = s.trim();
            let digits = t.strip_prefix('+').unwrap_or(t);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        }
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// A count (`n`, `best_of`) as [`lax_u64`] reads it, except that an integer too large for u64
/// (`1e30`, a long digit string: a Python int has no limit) saturates instead of reading as
/// absent, so it cannot pass for `n = 1`.
fn lax_count(v: &serde_json::Value) -> Option<u64> {
    use serde_json::Value;
    lax_u64(v).or_else(|| {
        let big = match v {
            Value::Number(n) => n.as_f64().is_some_and(|f| f >= 1.0 && f.fract() == 0.0),
            Value::String(s) => {
                let t = s.trim();
                let d = t.strip_prefix('+').unwrap_or(t);
                !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
            }
            _ => false,
        };
        big.then_some(u64::MAX)
    })
}

/// A JSON value as a boolean the way pydantic v2 reads a `bool` field in lax mode: `true` /
/// `false`, the integers (and integral floats) 0 and 1, and the strings `0 1 f t n y no on off
/// yes true false` in any case. Anything else is `None`.
pub fn lax_bool(v: &serde_json::Value) -> Option<bool> {
    use serde_json::Value;
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_f64()? {
            0.0 => Some(false),
            1.0 => Some(true),
            _ => None,
        },
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "1" | "t" | "y" | "on" | "yes" | "true" => Some(true),
            "0" | "f" | "n" | "no" | "off" | "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

enum Key {
    Model,
    Stream,
    MaxTokens,
    MaxCompletionTokens,
    N,
    BestOf,
    Prompt,
    Messages,
    Tools,
    Other,
}

struct KeyName(Key);

impl<'de> serde::Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyName, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyName, E> {
                Ok(KeyName(match s {
                    "model" => Key::Model,
                    "stream" => Key::Stream,
                    "max_tokens" => Key::MaxTokens,
                    "max_completion_tokens" => Key::MaxCompletionTokens,
                    "n" => Key::N,
                    "best_of" => Key::BestOf,
                    "prompt" => Key::Prompt,
                    "messages" => Key::Messages,
                    // `functions`: the legacy spelling of `tools`, still rendered by templates.
                    "tools" | "functions" => Key::Tools,
                    _ => Key::Other,
                }))
            }
        }
        d.deserialize_str(V)
    }
}

/// Characters in every string (and, for tools, every key) and the number of integers in any
/// JSON value, without keeping it.
#[derive(Default)]
struct TextSize {
    chars: u64,
    ints: u64,
    /// Top-level items that are prompts of a batch: strings and lists (a flat list of token
    /// ids is one prompt).
    items: u64,
}

impl TextSize {
    fn add(&mut self, o: &TextSize) {
        self.chars += o.chars;
        self.ints += o.ints;
    }
}

/// Sizes a JSON value; `keys`: count the characters of object keys too.
#[derive(Clone, Copy)]
struct SizeSeed {
    keys: bool,
}

impl<'de> de::DeserializeSeed<'de> for SizeSeed {
    type Value = TextSize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TextSize, D::Error> {
        d.deserialize_any(self)
    }
}

/// The length of a map key in characters.
struct KeyChars(u64);

impl<'de> serde::Deserialize<'de> for KeyChars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyChars, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyChars;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyChars, E> {
                Ok(KeyChars(s.chars().count() as u64))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Visitor<'de> for SizeSeed {
    type Value = TextSize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<TextSize, E> {
        Ok(TextSize {
            chars: s.chars().count() as u64,
            items: 1,
            ..TextSize::default()
        })
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextSize, E> {
        Ok(TextSize {
            ints: 1,
            ..TextSize::default()
        })
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextSize, E> {
        self.visit_u64(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextSize, E> {
        Ok(TextSize::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextSize, E> {
        Ok(TextSize::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<TextSize, E> {
        Ok(TextSize::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextSize, A::Error> {
        let mut t = TextSize::default();
        let mut prompts = 0;
        while let Some(s) = seq.next_element_seed(self)? {
            // A string or a list inside a list is one prompt of a batch; an integer is a token.
            prompts += u64::from(s.items > 0 || s.ints == 0);
            t.add(&s);
        }
        t.items = prompts.max(1);
        Ok(t)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextSize, A::Error> {
        let mut t = TextSize {
            items: 1,
            ..TextSize::default()
        };
        while let Some(k) = map.next_key::<KeyChars>()? {
            if self.keys {
                t.chars += k.0;
            }
            t.add(&map.next_value_seed(self)?);
        }
        Ok(t)
    }
}

/// A request's class and tenant, as indices into the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// Index into [`GatewayConfig::classes`].
    pub class: usize,
    /// Index into [`GatewayConfig::tenants`], or `tenants.len()` for `other`.
    pub tenant: usize,
}

/// The tenant index of a header value: its position in the allowlist, else `other`
/// (`tenants.len()`). Comparison is exact; a missing header is `other`.
pub fn tenant_of(cfg: &GatewayConfig, header: Option<&[u8]>) -> usize {
    header
        .and_then(|h| cfg.tenants.iter().position(|t| t.as_bytes() == h))
        .unwrap_or(cfg.tenants.len())
}

/// The first class whose every condition holds (the default class, last, always does).
pub fn classify(cfg: &GatewayConfig, route: Route, facts: &RequestFacts, tenant: usize) -> usize {
    cfg.classes
        .iter()
        .position(|c| matches(c, route, facts, tenant))
        .unwrap_or(cfg.classes.len() - 1)
}

fn matches(c: &ClassSpec, route: Route, f: &RequestFacts, tenant: usize) -> bool {
    c.route.is_none_or(|r| r == route)
        && (c.models.is_empty() || f.model.as_ref().is_some_and(|m| c.models.contains(m)))
        && (c.tenants.is_empty() || c.tenants.contains(&tenant))
        && c.prompt_tokens
            .is_none_or(|r| r.contains(f.prompt_tokens_est))
        && c.max_tokens
            .is_none_or(|r| f.max_tokens.is_some_and(|m| r.contains(m)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayFile;
    use std::path::Path;

    #[test]
    fn facts_from_bodies() {
        // 12 characters of text → ⌈12 / 4⌉ = 3 tokens.
        let f = RequestFacts::from_body(
            br#"{"model":"m","prompt":"hello world!","max_tokens":7,"stream":true,"temperature":0.5}"#, None)
        .unwrap();
        assert_eq!(
            f,
            RequestFacts {
                model: Some("m".into()),
                stream: true,
                max_tokens: Some(7),
                prompt_tokens_est: 3,
                sequences: 1,
            }
        );
        // Chat: strings "system"(6) + "ab"(2) + "user"(4) + "cdé"(3 chars) = 15 → 4 tokens; no
        // max_tokens but max_completion_tokens.
        let f = RequestFacts::from_body(
            "{\"messages\":[{\"role\":\"system\",\"content\":\"ab\"},{\"role\":\"user\",\"content\":[{\"text\":\"cdé\"}]}],\"max_completion_tokens\":9}".as_bytes(), None)
        .unwrap();
        assert_eq!(f.prompt_tokens_est, 4); // keys such as "text" are not counted
        assert_eq!(f.max_tokens, Some(9));
        assert!(!f.stream);
        // Token-id prompt: one token per id.
        let f =
            RequestFacts::from_body(br#"{"prompt":[1,2,3,4,5],"max_tokens":-1}"#, None).unwrap();
        assert_eq!((f.prompt_tokens_est, f.max_tokens), (5, None));
        // Wrong types are left to the upstream.
        let f = RequestFacts::from_body(br#"{"model":5,"stream":"maybe"}"#, None).unwrap();
        assert_eq!((f.model, f.stream), (None, false));
    }

    /// A number a client writes another way (`"1000"`, `1000.0`, `1e3`) reads as vLLM's
    /// pydantic model reads it, so it cannot land in another class (and escape that class's
    /// concurrency limit). Forms from pydantic v2's lax-mode conversion table.
    #[test]
    fn max_tokens_and_stream_read_as_vllm_reads_them() {
        for (v, want) in [
            ("1000", Some(1000)),
            ("1000.0", Some(1000)),
            ("1e3", Some(1000)),
            ("\"1000\"", Some(1000)),
            ("\" 1000 \"", Some(1000)),
            ("\"+7\"", Some(7)),
            ("true", Some(1)),
            ("1000.5", None),
            ("-1", None),
            ("-1.0", None),
            ("\"1e3\"", None),
            ("\"10 00\"", None),
            ("\"\"", None),
            ("1e300", None),
            ("null", None),
            ("[5]", None),
        ] {
            for key in ["max_tokens", "max_completion_tokens"] {
                let body = format!(r#"{{"{key}":{v}}}"#);
                let f = RequestFacts::from_body(body.as_bytes(), None).unwrap();
                assert_eq!(f.max_tokens, want, "{body}");
            }
        }
        for (v, want) in [
            ("true", true),
            ("\"true\"", true),
            ("\"Yes\"", true),
            ("\"on\"", true),
            ("\"1\"", true),
            ("1", true),
            ("1.0", true),
            ("false", false),
            ("\"off\"", false),
            ("0", false),
            ("2", false),
            ("\"maybe\"", false),
            ("null", false),
        ] {
            let body = format!(r#"{{"stream":{v}}}"#);
            assert_eq!(
                RequestFacts::from_body(body.as_bytes(), None)
                    .unwrap()
                    .stream,
                want,
                "{body}"
            );
        }
    }

    /// The output limit in vLLM 0.32's precedence, the sequences a request runs, and the
    /// prompt estimate over every prompt of a batch and the tool schemas.
    #[test]
    fn what_the_engine_runs_not_what_the_client_says_first() {
        use Route::{Chat, Completions};
        let mt = |b: &str, r| {
            RequestFacts::from_body(b.as_bytes(), Some(r))
                .unwrap()
                .max_tokens
        };
        for (body, chat, completions) in [
            (
                r#"{"max_tokens":10,"max_completion_tokens":300}"#,
                Some(300),
                Some(10),
            ),
            (
                r#"{"max_completion_tokens":300,"max_tokens":10}"#,
                Some(300),
                Some(10),
            ),
            (
                r#"{"max_tokens":10,"max_completion_tokens":null}"#,
                Some(10),
                Some(10),
            ),
            (
                r#"{"max_tokens":10,"max_completion_tokens":-1}"#,
                None,
                Some(10),
            ),
            (r#"{"max_completion_tokens":300}"#, Some(300), Some(16)),
            (r#"{"max_tokens":null}"#, None, Some(16)),
            (r#"{}"#, None, Some(16)),
        ] {
            assert_eq!(
                (mt(body, Chat), mt(body, Completions)),
                (chat, completions),
                "{body}"
            );
        }
        let seq = |b: &str| {
            RequestFacts::from_body(b.as_bytes(), None)
                .unwrap()
                .sequences
        };
        for (body, want) in [
            (r#"{"prompt":"a"}"#, 1),
            (r#"{"prompt":"a","n":4}"#, 4),
            (r#"{"prompt":"a","n":"4"}"#, 4),
            (r#"{"prompt":"a","n":0}"#, 1),
            (r#"{"prompt":"a","best_of":3}"#, 3),
            (r#"{"prompt":"a","n":2,"best_of":3}"#, 3),
            (r#"{"prompt":["a","b","c"]}"#, 3),
            (r#"{"prompt":["a","b","c"],"n":2}"#, 6),
            (r#"{"prompt":[1,2,3]}"#, 1),
            (r#"{"prompt":[[1,2],[3]]}"#, 2),
            (r#"{"prompt":[]}"#, 1),
            (
                r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"n":2}"#,
                2,
            ),
            (r#"{"prompt":["a"],"n":1e30}"#, u64::MAX),
            (r#"{"prompt":"a","n":"99999999999999999999999"}"#, u64::MAX),
            (r#"{"prompt":"a","n":-3}"#, 1),
        ] {
            assert_eq!(seq(body), want, "{body}");
        }
        let est = |b: &str| {
            RequestFacts::from_body(b.as_bytes(), None)
                .unwrap()
                .prompt_tokens_est
        };
        // 4 prompts of 8 characters: 32 characters, 8 tokens; the ids of two token prompts.
        assert_eq!(
            est(r#"{"prompt":["abcdefgh","abcdefgh","abcdefgh","abcdefgh"]}"#),
            8
        );
        assert_eq!(est(r#"{"prompt":[[1,2,3],[4,5]]}"#), 5);
        // Tools count their keys too: "type"(4) "function"(8) "function"(8) "name"(4) "f"(1) = 25.
        assert_eq!(
            est(r#"{"tools":[{"type":"function","function":{"name":"f"}}]}"#),
            7
        );
        assert_eq!(est(r#"{"functions":[{"name":"abcdefgh"}]}"#), 3);
    }

    #[test]
    fn malformed_bodies() {
        for (b, needle) in [
            (&b"{\"prompt\": \"x\""[..], "not valid JSON"),
            (b"[1,2]", "not a JSON object"),
            (b"", "not valid JSON"),
            (b"{} extra", "not valid JSON"),
            (b"{\"a\":1,}", "not valid JSON"),
        ] {
            let e = RequestFacts::from_body(b, None).unwrap_err().0;
            assert!(e.contains(needle), "{:?}: {e}", String::from_utf8_lossy(b));
            assert!(e.contains("line 1"), "{e}");
        }
    }

    #[test]
    fn rules_first_match_and_tenants() {
        let f = GatewayFile::parse(
            "upstreams: [http://a:1]\n\
             pools: {long: [http://b:1]}\n\
             tenants: [gold]\n\
             classes:\n\
             \x20 - {name: long_context, prompt_tokens: {min: 100}, pool: long}\n\
             \x20 - {name: gold_chat, route: chat, tenants: [gold]}\n\
             \x20 - {name: short, max_tokens: {max: 64}, models: [m1]}\n",
            Path::new("g.yaml"),
        )
        .unwrap();
        let cfg =
            GatewayConfig::resolve("127.0.0.1:0".parse().unwrap(), &[], f, "g.yaml", None).unwrap();
        let gold = tenant_of(&cfg, Some(b"gold"));
        assert_eq!(gold, 0);
        assert_eq!(tenant_of(&cfg, Some(b"GOLD")), 1);
        assert_eq!(tenant_of(&cfg, None), 1);
        let facts = |p: u64, mt: Option<u64>, m: &str| RequestFacts {
            model: Some(m.into()),
            stream: true,
            max_tokens: mt,
            prompt_tokens_est: p,
            sequences: 1,
        };
        let name = |i: usize| cfg.classes[i].name.as_str();
        assert_eq!(
            name(classify(&cfg, Route::Chat, &facts(100, None, "m1"), gold)),
            "long_context"
        );
        assert_eq!(
            name(classify(&cfg, Route::Chat, &facts(99, None, "m1"), gold)),
            "gold_chat"
        );
        assert_eq!(
            name(classify(
                &cfg,
                Route::Completions,
                &facts(99, Some(63), "m1"),
                gold
            )),
            "short"
        );
        assert_eq!(
            name(classify(
                &cfg,
                Route::Completions,
                &facts(99, Some(64), "m1"),
                gold
            )),
            "default"
        );
        assert_eq!(
            name(classify(
                &cfg,
                Route::Completions,
                &facts(9, None, "m1"),
                gold
            )),
            "default"
        );
        assert_eq!(
            name(classify(&cfg, Route::Chat, &facts(9, Some(1), "m2"), 1)),
            "default"
        );
    }
}
