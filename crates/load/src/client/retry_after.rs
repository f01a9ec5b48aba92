//! The wait a refusal asks for: `Retry-After` (RFC 9110 §10.2.3: delay-seconds or an
//! HTTP-date) and the non-standard `retry-after-ms` that OpenAI's API sends.
//!
//! Read as the OpenAI Python SDK reads them (`_parse_retry_after_header` in its
//! `_base_client.py`): `retry-after-ms` first (milliseconds), then `Retry-After` as a number of
//! seconds (a decimal is accepted, although the RFC allows only an integer), then as an
//! HTTP-date, which is turned into the time left until it. Whether to honour the wait is the
//! caller's decision (the runner honours 0 < wait ≤ 60 s, as the SDK does).

use http::HeaderMap;
use std::time::{Duration, SystemTime};

/// The wait the response headers ask for, measured from `now`: `None` when neither header is
/// present or parses; `Some(ZERO)` for an HTTP-date already past. Never panics on any header
/// value.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(non_negative) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let v = text("retry-after")?.trim();
    if let Some(s) = non_negative(v) {
        return Duration::try_from_secs_f64(s).ok();
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A finite, non-negative decimal number.
fn non_negative(s: &str) -> Option<f64> {
    let s = s.trim();
    // `f64::from_str` also reads "inf", "NaN" and exponents; a header value is digits and a dot.
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    s.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// An HTTP-date in the three forms RFC 9110 §5.6.7 requires a recipient to accept
/// (IMF-fixdate, RFC 850, asctime), read by the `httpdate` crate (hyper's own); `None` for
/// anything else.
pub(crate) fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn at(unix_s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix_s)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// RFC 9110 §5.6.7's own example, 1994-11-06 08:49:37 UTC = 784111777 s since the epoch
    /// (9,075 days × 86,400 + 31,777 s), in its three forms.
    #[test]
    fn the_rfc_example_in_all_three_forms() {
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(s), Some(at(784_111_777)), "{s}");
        }
        for bad in [
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "06 Nov 1994 08:49:37 GMT",
            "",
            "soon",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn waits_from_seconds_dates_and_milliseconds() {
        let now = at(784_111_777);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1")]), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", " 2.5 ")]), now),
            Some(Duration::from_millis(2500))
        );
        // A date 90 s after `now`; one in the past asks for no wait.
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:51:07 GMT")]),
                now
            ),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO)
        );
        // `retry-after-ms` wins over `Retry-After`, as in the OpenAI SDK.
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "250"), ("retry-after", "3")]),
                now
            ),
            Some(Duration::from_millis(250))
        );
        // Garbage, negative, non-finite and overflowing values are no answer, never a panic.
        for v in ["-1", "inf", "NaN", "1e3", "abc", "99999999999999999999999"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", v)]), now),
                None,
                "{v}"
            );
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
