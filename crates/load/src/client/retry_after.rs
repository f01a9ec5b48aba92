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
    let at = parse_http_date(v, now)?;
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

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// An HTTP-date in any of the three forms RFC 9110 §5.6.7 requires a recipient to accept:
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
/// (`Sunday, 06-Nov-94 08:49:37 GMT`; a two-digit year more than 50 years after `now`'s is read
/// as the past century's, as the RFC says) and asctime (`Sun Nov  6 08:49:37 1994`). `None` for
/// anything else (an impossible date included). Dates before 1970 read as 1970-01-01.
pub(crate) fn parse_http_date(s: &str, now: SystemTime) -> Option<SystemTime> {
    let s = s.trim();
    let (year, month, day, clock) = if let Some((wday, rest)) = s.split_once(',') {
        if wday.is_empty() || !wday.bytes().all(|b| b.is_ascii_alphabetic()) {
            return None;
        }
        let t: Vec<&str> = rest.split_whitespace().collect();
        match t.as_slice() {
            [d, m, y, clock, "GMT"] if y.len() == 4 => {
                (number(y)?, month_of(m)?, number(d)?, *clock)
            }
            [dmy, clock, "GMT"] => {
                let mut p = dmy.split('-');
                let (d, m, y) = (p.next()?, p.next()?, p.next()?);
                if p.next().is_some() || y.len() != 2 {
                    return None;
                }
                let yy = number(y)?;
                let now_year = civil_from_days(unix_days(now)).0;
                let mut year = now_year - now_year.rem_euclid(100) + yy;
                if year > now_year + 50 {
                    year -= 100;
                }
                (year, month_of(m)?, number(d)?, *clock)
            }
            _ => return None,
        }
    } else {
        let t: Vec<&str> = s.split_whitespace().collect();
        match t.as_slice() {
            [wday, m, d, clock, y] if wday.bytes().all(|b| b.is_ascii_alphabetic()) => {
                (number(y)?, month_of(m)?, number(d)?, *clock)
            }
            _ => return None,
        }
    };
    let mut c = clock.split(':');
    let (h, mi, sec) = (number(c.next()?)?, number(c.next()?)?, number(c.next()?)?);
    if c.next().is_some() || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3_600 + mi * 60 + sec;
    let secs = u64::try_from(secs).unwrap_or(0);
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Digits only (1 to 4), as a number.
fn number(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// 1 to 12 from a three-letter month name (case-sensitive, as the RFC's grammar).
fn month_of(s: &str) -> Option<i64> {
    MONTHS.iter().position(|m| *m == s).map(|i| i as i64 + 1)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1–12): the era-based algorithm of
/// H. Hinnant, "chrono-Compatible Low-Level Date Algorithms" (`days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`] (same source): (year, month, day).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn unix_days(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| (d.as_secs() / 86_400) as i64)
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
        let now = at(1_700_000_000); // 2023-11-14
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(s, now), Some(at(784_111_777)), "{s}");
        }
        // A two-digit year up to 50 years ahead is this century's: "30" in 2023 is 2030
        // (2030-01-01 = 21,915 days).
        assert_eq!(
            parse_http_date("Tuesday, 01-Jan-30 00:00:00 GMT", now),
            Some(at(21_915 * 86_400))
        );
        // 2000-02-29 existed (divisible by 400; 11,016 days); 1900-02-29 and 31 April did not.
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT", now),
            Some(at(11_016 * 86_400))
        );
        for bad in [
            "Thu, 29 Feb 1900 00:00:00 GMT",
            "Sun, 31 Apr 2024 00:00:00 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "06 Nov 1994 08:49:37 GMT",
            "Sun, 06 November 1994 08:49:37 GMT",
            "",
            "soon",
        ] {
            assert_eq!(parse_http_date(bad, now), None, "{bad}");
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

    #[test]
    fn civil_days_round_trip() {
        for (y, m, d, days) in [
            (1970, 1, 1, 0),
            (1994, 11, 6, 9_075),
            (2000, 3, 1, 11_017),
            (1969, 12, 31, -1),
        ] {
            assert_eq!(days_from_civil(y, m, d), days);
            assert_eq!(civil_from_days(days), (y, m, d));
        }
    }
}
