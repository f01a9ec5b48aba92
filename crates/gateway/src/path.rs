//! Request paths: percent-decoded and checked once, then routed on the canonical form.
//!
//! The engine behind the gateway routes on the *decoded* path (uvicorn puts
//! `unquote(raw_path)` in the ASGI scope and starlette matches on it), so routing on the raw
//! bytes lets `/v1/load%5Flora%5Fadapter` reach an endpoint the gateway blocks and
//! `/v1/chat/%63ompletions` reach the engine unmeasured and unadmitted. [`canonicalise`]
//! decodes the path exactly once and refuses every form whose meaning depends on who decodes
//! it, or how often:
//! * an escape that is not `%` + two hex digits;
//! * an encoded `/` or `\` (`%2F`, `%5C`: one decoder splits there, another does not) and a raw
//!   `\` (some servers treat it as `/`);
//! * an encoded `%` (`%25`: a second decode would change the path again);
//! * control characters, raw or encoded (`%00`, CR, LF, …), and bytes that do not decode to
//!   UTF-8;
//! * `.` and `..` segments, raw or encoded (`%2e%2e`), and empty segments (`//`).
//!
//! One trailing slash is kept in the canonical form (it is part of the path) but ignored for
//! routing ([`Canonical::route_path`]): `/v1/chat/completions/` is measured as chat and
//! forwarded as `/v1/chat/completions`, so a stray slash neither escapes measurement nor
//! earns an upstream redirect.
//!
//! The path sent upstream ([`Canonical::forward`]) is the canonical form with every byte
//! outside RFC 3986's `pchar` set percent-encoded again, so the upstream, decoding once, sees
//! exactly the path the gateway routed on.

use std::fmt::Write as _;

/// A path that passed [`canonicalise`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    decoded: String,
}

/// Why a path is refused (answered 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Does not start with `/` (`*`, an empty path).
    NotAbsolute,
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%2F` or `%5C`, or a raw `\`.
    EncodedSeparator,
    /// `%25`: the path would decode differently a second time.
    EncodedPercent,
    /// A control character, raw or encoded.
    ControlChar,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
    /// A `.` or `..` segment, raw or encoded.
    DotSegment,
    /// An empty segment (`//`).
    EmptySegment,
}

impl PathError {
    /// The message of the 400 answer.
    pub fn message(self) -> &'static str {
        match self {
            PathError::NotAbsolute => "the request path must start with `/`",
            PathError::BadEscape => {
                "the request path has a `%` that is not followed by two hex digits"
            }
            PathError::EncodedSeparator => {
                "the request path has an encoded `/` or a `\\` (`%2F`, `%5C`); send separators as a plain `/`"
            }
            PathError::EncodedPercent => {
                "the request path has an encoded `%` (`%25`), which would decode differently a second time"
            }
            PathError::ControlChar => "the request path has a control character",
            PathError::NotUtf8 => "the request path does not decode to UTF-8",
            PathError::DotSegment => {
                "the request path has a `.` or `..` segment (raw or encoded); send the resolved path"
            }
            PathError::EmptySegment => "the request path has an empty segment (`//`)",
        }
    }
}

/// Decodes and checks `raw` (a request URI's path, without the query); see the module doc.
///
/// # Errors
/// [`PathError`] for every form the module doc lists.
pub fn canonicalise(raw: &str) -> Result<Canonical, PathError> {
    let b = raw.as_bytes();
    if b.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let d = if c == b'%' {
            let hex = |k: usize| b.get(k).and_then(|&h| (h as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(PathError::BadEscape);
            };
            i += 3;
            let d = (hi * 16 + lo) as u8;
            match d {
                b'/' | b'\\' => return Err(PathError::EncodedSeparator),
                b'%' => return Err(PathError::EncodedPercent),
                _ => d,
            }
        } else {
            i += 1;
            if c == b'\\' {
                return Err(PathError::EncodedSeparator);
            }
            c
        };
        if d < 0x20 || d == 0x7f {
            return Err(PathError::ControlChar);
        }
        out.push(d);
    }
    let decoded = String::from_utf8(out).map_err(|_| PathError::NotUtf8)?;
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (k, s) in segments.iter().enumerate() {
        if *s == "." || *s == ".." {
            return Err(PathError::DotSegment);
        }
        // The last segment may be empty: `/` itself, or one trailing slash.
        if s.is_empty() && k != last {
            return Err(PathError::EmptySegment);
        }
    }
    Ok(Canonical { decoded })
}

impl Canonical {
    /// The decoded path, trailing slash included: what the upstream's router will see.
    pub fn as_str(&self) -> &str {
        &self.decoded
    }

    /// The path routing decisions use: the canonical form without one trailing slash.
    pub fn route_path(&self) -> &str {
        if self.decoded.len() > 1 {
            self.decoded.strip_suffix('/').unwrap_or(&self.decoded)
        } else {
            &self.decoded
        }
    }

    /// The canonical form (trailing slash included) encoded for the request line sent upstream.
    pub fn forward(&self) -> String {
        encode(&self.decoded)
    }
}

/// `path` with every byte outside RFC 3986 `pchar` (and `/`) percent-encoded.
pub fn encode(path: &str) -> String {
    let mut s = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        if keep {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    s
}

/// An upstream `Location` (or `Content-Location`) value as the client may see it: an absolute
/// or scheme-relative URL loses its scheme and authority (the upstream's address, which the
/// client must never learn; a relative reference resolves against the gateway), and the
/// upstream's base path `prefix` is removed from the front of the path. `None` when nothing
/// safe is left (the header is then dropped).
pub fn client_location(v: &str, prefix: &str) -> Option<String> {
    let scheme_end = v.find("://").filter(|&i| {
        i > 0
            && v.as_bytes()[0].is_ascii_alphabetic()
            && v[..i]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+-.".contains(&c))
    });
    let rest = match scheme_end {
        Some(i) => Some(&v[i + 3..]),
        None if authority_after(v) => Some(&v[2..]),
        None => None,
    };
    let path = match rest {
        None => v.to_string(),
        Some(r) => match r.find(['/', '?', '#']) {
            Some(j) if r.as_bytes()[j] == b'/' => r[j..].to_string(),
            Some(j) => format!("/{}", &r[j..]),
            None => "/".to_string(),
        },
    };
    let out = match path.strip_prefix(prefix) {
        Some(tail)
            if !prefix.is_empty() && (tail.is_empty() || tail.starts_with(['/', '?', '#'])) =>
        {
            if tail.starts_with('/') {
                tail.to_string()
            } else {
                format!("/{tail}")
            }
        }
        _ => path,
    };
    // `//host` (or `/\\host`, which URL parsers read alike for http) would name a host again,
    // also when only the prefix stood before it (`/vllm//host`).
    (!authority_after(&out)).then_some(out)
}

/// The properties `crates/gateway/fuzz` (target `path`) and the test loop check on any
/// input: no panic; an accepted path is free of every refused form, its routing path is itself
/// canonical, and its forwarded form decodes back to it; a rewritten `Location` never keeps an
/// authority. Panics when one does not hold.
pub fn check_properties(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = canonicalise(raw) {
        let d = c.as_str();
        assert!(d.starts_with('/'), "{raw:?}");
        assert!(
            !d.bytes()
                .any(|b| b < 0x20 || b == 0x7f || b == b'\\' || b == b'%')
        );
        assert!(!d[1..].split('/').any(|s| s == "." || s == ".."), "{raw:?}");
        assert!(!d.contains("//"), "{raw:?}");
        assert_eq!(canonicalise(&c.forward()).as_ref(), Ok(&c), "{raw:?}");
        let r = canonicalise(c.route_path()).expect("the routing path is canonical");
        assert_eq!(r.route_path(), c.route_path(), "{raw:?}");
    }
    let (prefix, loc) = raw.split_once('\n').unwrap_or(("", raw));
    if let Some(l) = client_location(loc, prefix) {
        assert!(!authority_after(&l), "{loc:?} -> {l:?}");
    }
}

/// Whether `v`, as a URL reference, starts with an authority: two separators (`/` or `\\`,
/// which the WHATWG URL parser treats alike for http), or a scheme followed by `://`.
fn authority_after(v: &str) -> bool {
    let b = v.as_bytes();
    let sep = |c: Option<&u8>| matches!(c, Some(b'/' | b'\\'));
    if sep(b.first()) && sep(b.get(1)) {
        return true;
    }
    v.find("://").is_some_and(|i| {
        b[0].is_ascii_alphabetic()
            && v[..i]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+-.".contains(&c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_once_and_keeps_one_trailing_slash_out_of_routing() {
        for (raw, decoded, route) in [
            (
                "/v1/chat/completions",
                "/v1/chat/completions",
                "/v1/chat/completions",
            ),
            (
                "/v1/chat/%63ompletions",
                "/v1/chat/completions",
                "/v1/chat/completions",
            ),
            (
                "/v1/load%5Flora%5Fadapter",
                "/v1/load_lora_adapter",
                "/v1/load_lora_adapter",
            ),
            ("/v1/models/", "/v1/models/", "/v1/models"),
            ("/", "/", "/"),
            ("/v1/a%20b", "/v1/a b", "/v1/a b"),
            ("/v1/%C3%A9", "/v1/é", "/v1/é"),
            ("/v1/..a/.b", "/v1/..a/.b", "/v1/..a/.b"),
        ] {
            let c = canonicalise(raw).unwrap();
            assert_eq!((c.as_str(), c.route_path()), (decoded, route), "{raw}");
            // Forwarded, it decodes back to the same path.
            assert_eq!(canonicalise(&c.forward()).unwrap(), c, "{raw}");
        }
        assert_eq!(canonicalise("/v1/a%20b").unwrap().forward(), "/v1/a%20b");
        assert_eq!(
            canonicalise("/v1/chat/%63ompletions").unwrap().forward(),
            "/v1/chat/completions"
        );
    }

    #[test]
    fn refuses_every_ambiguous_form() {
        use PathError::*;
        for (raw, want) in [
            ("", NotAbsolute),
            ("*", NotAbsolute),
            ("v1/models", NotAbsolute),
            ("/v1/%", BadEscape),
            ("/v1/%4", BadEscape),
            ("/v1/%zz", BadEscape),
            ("/v1/chat%2Fcompletions", EncodedSeparator),
            ("/v1/chat%2fcompletions", EncodedSeparator),
            ("/v1/chat%5Ccompletions", EncodedSeparator),
            ("/v1/chat\\completions", EncodedSeparator),
            ("/v1/%2563ompletions", EncodedPercent),
            ("/v1/%00", ControlChar),
            ("/v1/%0d%0aX-Injected:%201", ControlChar),
            ("/v1/%7F", ControlChar),
            ("/v1/%FF", NotUtf8),
            ("/v1/../metrics", DotSegment),
            ("/v1/%2e%2e/metrics", DotSegment),
            ("/v1/%2E./metrics", DotSegment),
            ("/v1/./models", DotSegment),
            ("/v1/%2e/models", DotSegment),
            ("/v1/..", DotSegment),
            ("//v1/models", EmptySegment),
            ("/v1//models", EmptySegment),
            ("/v1/models//", EmptySegment),
        ] {
            assert_eq!(canonicalise(raw), Err(want), "{raw}");
        }
    }

    /// The fuzz target's properties over inputs built from the tokens that matter (escapes of
    /// `.`, `/`, `\\`, `%`, controls, invalid UTF-8, separators), for machines without the
    /// nightly toolchain cargo-fuzz needs.
    #[test]
    fn properties_hold_on_generated_paths() {
        const TOKENS: [&str; 24] = [
            "/",
            "//",
            ".",
            "..",
            "%2e",
            "%2E",
            "%2f",
            "%2F",
            "%5c",
            "\\",
            "%25",
            "%00",
            "%0a",
            "%",
            "%4",
            "%zz",
            "%FF",
            "%C3%A9",
            "v1",
            "chat",
            "completions",
            "?",
            "http://h:1",
            "\n/p",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            // xorshift64: deterministic, no dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let n = 1 + next() % 8;
            let s: String = (0..n)
                .map(|_| TOKENS[(next() % TOKENS.len() as u64) as usize])
                .collect();
            check_properties(s.as_bytes());
            check_properties(format!("/{s}").as_bytes());
            // A Location under the upstream's base path, which is stripped from it.
            check_properties(format!("/p\n/p{s}").as_bytes());
        }
    }

    #[test]
    fn locations_lose_the_upstreams_address() {
        for (v, prefix, want) in [
            ("http://10.0.0.7:8000/v1/models", "", Some("/v1/models")),
            (
                "https://internal.example:8443/v1/models?x=1",
                "",
                Some("/v1/models?x=1"),
            ),
            ("//10.0.0.7:8000/v1/models", "", Some("/v1/models")),
            ("http://10.0.0.7:8000", "", Some("/")),
            ("http://10.0.0.7:8000?a", "", Some("/?a")),
            ("/v1/models", "", Some("/v1/models")),
            (
                "http://10.0.0.7:8000/vllm/v1/models",
                "/vllm",
                Some("/v1/models"),
            ),
            ("/vllm", "/vllm", Some("/")),
            ("/vllmx/v1", "/vllm", Some("/vllmx/v1")),
            ("http://h//evil.example/x", "", None),
            ("/\\evil.example/x", "", Some("/x")),
            ("\\\\evil.example/x", "", Some("/x")),
            ("http://h/\\evil.example", "", None),
            ("models", "", Some("models")),
            // What follows the stripped base path must not name a host either (found by the
            // fuzz target `path`: `/vllm///x` left `///x`).
            ("/vllm//evil.example/x", "/vllm", None),
            ("/vllm/\\evil.example/x", "/vllm", None),
            ("http://10.0.0.7:8000/vllm///x", "/vllm", None),
            ("/vllm/x//y", "/vllm", Some("/x//y")),
        ] {
            assert_eq!(client_location(v, prefix).as_deref(), want, "{v}");
        }
    }
}
