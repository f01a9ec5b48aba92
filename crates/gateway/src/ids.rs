//! Correlation ids: `X-Request-Id` and W3C Trace Context `traceparent`.
//!
//! * `X-Request-Id`: a client's value is kept when it is 1–128 visible ASCII characters
//!   (0x21–0x7E); otherwise (missing, too long, control characters) the gateway generates 32
//!   lowercase hex digits. The id goes upstream and back to the client.
//! * `traceparent` (W3C Trace Context level 1, §3.2): `00-<32 hex trace-id>-<16 hex parent-id>-<2
//!   hex flags>`, lowercase, ids not all zero. The gateway is an intermediary with its own span:
//!   it keeps a valid trace-id and flags and sends a new parent-id upstream (§3.2.2.3); a missing
//!   or invalid header starts a new trace (flags `00`, not sampled). `tracestate` is forwarded
//!   only with a valid incoming `traceparent` (§3.3). The client gets back the `traceparent` the
//!   upstream received.

use http::HeaderValue;

/// Longest client-supplied request id kept.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The request id to use: the client's when acceptable, else a generated one.
pub fn request_id(incoming: Option<&HeaderValue>) -> HeaderValue {
    if let Some(v) = incoming {
        let b = v.as_bytes();
        if !b.is_empty()
            && b.len() <= MAX_REQUEST_ID_LEN
            && b.iter().all(|c| (0x21..=0x7e).contains(c))
        {
            return v.clone();
        }
    }
    hex_value(&rand::random::<u128>().to_be_bytes())
}

/// The `traceparent` to send upstream and return: the incoming trace continued with a new
/// parent-id, or a new trace. The second value says whether the incoming header was valid (and
/// so whether `tracestate` may be forwarded).
pub fn traceparent(incoming: Option<&HeaderValue>) -> (HeaderValue, bool) {
    let span = nonzero_u64();
    if let Some((trace, flags)) = incoming.and_then(|v| parse_traceparent(v.as_bytes())) {
        let s = format!("00-{trace}-{span:016x}-{flags}");
        if let Ok(v) = HeaderValue::from_str(&s) {
            return (v, true);
        }
    }
    let mut trace = rand::random::<u128>();
    if trace == 0 {
        trace = 1;
    }
    let s = format!("00-{trace:032x}-{span:016x}-00");
    // Hex digits and dashes are always a valid header value.
    (
        HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static("")),
        false,
    )
}

fn nonzero_u64() -> u64 {
    rand::random::<u64>().max(1)
}

/// Trace-id and flags of a valid `traceparent`, as strings.
fn parse_traceparent(b: &[u8]) -> Option<(&str, &str)> {
    let s = std::str::from_utf8(b).ok()?.trim();
    let mut parts = s.split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let parent = parts.next()?;
    let flags = parts.next()?;
    let rest = parts.next();
    let hex = |x: &str, n: usize| {
        x.len() == n
            && x.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(parent, 16) || !hex(flags, 2)
    {
        return None;
    }
    // Version 00 has exactly four fields; later versions may append more (§3.2.4).
    if version == "00" && rest.is_some() {
        return None;
    }
    if trace.bytes().all(|c| c == b'0') || parent.bytes().all(|c| c == b'0') {
        return None;
    }
    Some((trace, flags))
}

fn hex_value(bytes: &[u8]) -> HeaderValue {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids() {
        let v = HeaderValue::from_static("abc-123");
        assert_eq!(request_id(Some(&v)), v);
        for bad in [
            HeaderValue::from_static(""),
            HeaderValue::from_static("has space"),
            HeaderValue::from_str(&"x".repeat(129)).unwrap(),
        ] {
            let g = request_id(Some(&bad));
            assert_ne!(g, bad);
            assert_eq!(g.len(), 32);
            assert!(g.as_bytes().iter().all(u8::is_ascii_hexdigit));
        }
        assert_ne!(request_id(None), request_id(None));
    }

    #[test]
    fn traceparents() {
        // The W3C spec's own example (§3.2.2.x).
        let inc =
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let (out, valid) = traceparent(Some(&inc));
        assert!(valid);
        let s = out.to_str().unwrap();
        assert!(s.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"), "{s}");
        assert!(s.ends_with("-01"), "{s}");
        assert_ne!(&s[36..52], "00f067aa0ba902b7");
        assert_eq!(s.len(), 55);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "garbage",
        ] {
            let (out, valid) = traceparent(Some(&HeaderValue::from_static(bad)));
            assert!(!valid, "{bad}");
            let s = out.to_str().unwrap();
            assert_eq!(s.len(), 55);
            assert!(s.starts_with("00-") && s.ends_with("-00"), "{s}");
        }
        // A future version with an extra field is accepted (§3.2.4).
        let (_, valid) = traceparent(Some(&HeaderValue::from_static(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        )));
        assert!(valid);
    }
}
