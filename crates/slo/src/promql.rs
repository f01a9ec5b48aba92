//! Small PromQL building blocks: label matchers, selectors, Prometheus durations, numbers printed
//! exactly, `le` values, and validation of every generated expression with `promql-parser`.
//!
//! Metric names with colons (`vllm:time_to_first_token_seconds_bucket`) are valid classic
//! metric names (Prometheus data model: `[a-zA-Z_:][a-zA-Z0-9_:]*`) and are written bare. The
//! quoted form `{"vllm:…"}` is Prometheus 3 syntax only; Debian's Prometheus 2.42 rejects it.

use crate::SloError;
use std::fmt;

/// How a label matcher compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `=~` (fully anchored RE2)
    Re,
    /// `!~`
    NotRe,
}

/// One label matcher, e.g. `model_name="llama"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// Label name.
    pub name: String,
    /// Comparison.
    pub op: MatchOp,
    /// Value (a regex for `=~` / `!~`), unescaped.
    pub value: String,
}

impl Matcher {
    /// `name="value"`.
    pub fn eq(name: &str, value: &str) -> Matcher {
        Matcher {
            name: name.into(),
            op: MatchOp::Eq,
            value: value.into(),
        }
    }

    /// `name=~"value"`.
    pub fn re(name: &str, value: &str) -> Matcher {
        Matcher {
            name: name.into(),
            op: MatchOp::Re,
            value: value.into(),
        }
    }

    /// `name!~"value"`.
    pub fn not_re(name: &str, value: &str) -> Matcher {
        Matcher {
            name: name.into(),
            op: MatchOp::NotRe,
            value: value.into(),
        }
    }

    /// Parses `name="v"`, `name!="v"`, `name=~"v"` or `name!~"v"` (quotes optional).
    ///
    /// # Errors
    /// A message saying what was expected when there is no operator or the name is not a valid
    /// label name.
    pub fn parse(s: &str) -> Result<Matcher, String> {
        let s = s.trim();
        let (name, op, rest) = if let Some(i) = s.find("=~") {
            (&s[..i], MatchOp::Re, &s[i + 2..])
        } else if let Some(i) = s.find("!~") {
            (&s[..i], MatchOp::NotRe, &s[i + 2..])
        } else if let Some(i) = s.find("!=") {
            (&s[..i], MatchOp::Ne, &s[i + 2..])
        } else if let Some(i) = s.find('=') {
            (&s[..i], MatchOp::Eq, &s[i + 1..])
        } else {
            return Err(format!(
                "`{s}`: expected a label matcher like job=\"vllm\" or model_name=~\"llama.*\""
            ));
        };
        let name = name.trim();
        if !is_label_name(name) {
            return Err(format!(
                "`{s}`: `{name}` is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
            ));
        }
        let v = rest.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .unwrap_or(v);
        Ok(Matcher {
            name: name.into(),
            op,
            value: v.into(),
        })
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            MatchOp::Eq => "=",
            MatchOp::Ne => "!=",
            MatchOp::Re => "=~",
            MatchOp::NotRe => "!~",
        };
        write!(f, "{}{}{}", self.name, op, quote(&self.value))
    }
}

/// True for a valid label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// A PromQL double-quoted string literal, escaping `\` and `"` and control characters.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Escapes RE2 metacharacters so that `s` matches itself literally inside `=~`.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if "\\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// `metric{m1,m2}` (or bare `metric` when there are no matchers).
pub fn selector(metric: &str, matchers: &[Matcher]) -> String {
    if matchers.is_empty() {
        return metric.to_string();
    }
    let inner: Vec<String> = matchers.iter().map(Matcher::to_string).collect();
    format!("{metric}{{{}}}", inner.join(","))
}

/// Prints a number for PromQL and YAML without binary noise: rounded to 12 significant digits
/// and then printed in Rust's shortest form, so `1.0 - 0.95` prints `0.05` and `14.4 * 0.05`
/// prints `0.72`. Never uses an exponent.
pub fn fmt_float(x: f64) -> String {
    let r: f64 = format!("{x:.11e}").parse().unwrap_or(x);
    if r == r.trunc() && r.abs() < 1e15 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// `x` rounded to 12 significant digits (see [`fmt_float`]).
pub fn clean(x: f64) -> f64 {
    format!("{x:.11e}").parse().unwrap_or(x)
}

/// The `le` label value the gateway prints for a bucket bound of `seconds`: the number's
/// shortest form with at least one decimal, like Python's `repr` (`0.25`, `1.0`, `10.0`). The
/// gateway must print its bounds with this function so the rules match them.
pub fn le_value(seconds: f64) -> String {
    let s = fmt_float(seconds);
    if s.contains('.') { s } else { format!("{s}.0") }
}

/// The `le` matcher for a bucket printed as `le` (`0.25`, `1.0`): an equality for fractional
/// bounds, and `le=~"1(\\.0)?"` for whole ones so it matches both Python's `1.0` and Go's `1`
/// (and Prometheus 3's normalised form), as Pyrra does after prometheus/prometheus#14226.
pub fn le_matcher(le: &str) -> Matcher {
    match le.strip_suffix(".0") {
        Some(whole) if whole.chars().all(|c| c.is_ascii_digit()) => {
            Matcher::re("le", &format!("{whole}(\\.0)?"))
        }
        _ => Matcher::eq("le", le),
    }
}

/// The longest duration Headroom writes into PromQL or a rule: 365 days (`1y`), in seconds.
///
/// Every duration of this crate ends up in PromQL or a rule file: `budget.window` (the SLO
/// period, in `increase(…[30d])` and the recording rules), tier windows, `for:` and smoothing
/// windows. Prometheus parses durations into a signed 64-bit count of nanoseconds
/// (`model.ParseDuration`), so it refuses anything past about 292 years, and an SLO period of
/// more than a year is not an error budget anyone can act on: every burn-rate tier of the
/// Workbook is dead long before (at `10y` the slowest tier's factor is 121).
pub const MAX_PROM_DURATION_S: u64 = 365 * 86_400;

/// A duration in Prometheus syntax (`5m`, `1h30m`, `30d`, `4w`), parsed to whole seconds.
///
/// Units in order of size, each at most once: `y` (365 d), `w`, `d`, `h`, `m`, `s`, `ms`.
/// Milliseconds are accepted only when the total is a whole number of seconds. The total must
/// lie in (0, [`MAX_PROM_DURATION_S`]].
///
/// # Errors
/// A message saying what was expected for anything else (`1M`, `30 days`, `0d`, `1.5h`,
/// `366d`, `300y`).
pub fn parse_prom_duration(s: &str) -> Result<u64, String> {
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    let expected = || {
        format!(
            "`{s}` is not a Prometheus duration; expected e.g. 5m, 6h, 30d or 4w (units y, w, d, h, m, s, ms; months and calendar windows cannot be evaluated)"
        )
    };
    if s.is_empty() {
        return Err(expected());
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut last_unit = None::<usize>;
    let mut total_ms: u64 = 0;
    let too_long = || {
        format!(
            "`{s}` is longer than 365 days (1y), the longest window Headroom accepts (Prometheus cannot represent durations past about 292 years, and a period past a year leaves every burn-rate tier dead); use e.g. 30d, 28d or 90d"
        )
    };
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(expected());
        }
        // only digits here, so a failure is an overflow
        let n: u64 = s[start..i].parse().map_err(|_| too_long())?;
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[ustart..i];
        let idx = UNITS
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(expected)?;
        if last_unit.is_some_and(|l| idx <= l) {
            return Err(expected());
        }
        last_unit = Some(idx);
        total_ms = n
            .checked_mul(UNITS[idx].1)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(too_long)?;
    }
    if total_ms > MAX_PROM_DURATION_S * 1000 {
        return Err(too_long());
    }
    if total_ms == 0 {
        return Err(format!("`{s}`: a window must be longer than zero"));
    }
    if !total_ms.is_multiple_of(1000) {
        return Err(format!("`{s}`: expected a whole number of seconds"));
    }
    Ok(total_ms / 1000)
}

/// Formats whole seconds as a compact Prometheus duration (`2d2h`, `50m`, `1h30m`).
pub fn fmt_prom_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// Parses `expr` with `promql-parser` (Prometheus 3.8 grammar).
///
/// # Errors
/// [`SloError::GeneratedPromql`] with the parser's message.
pub fn validate(expr: &str) -> Result<(), SloError> {
    promql_parser::parser::parse(expr)
        .map(|_| ())
        .map_err(|message| SloError::GeneratedPromql {
            expr: expr.to_string(),
            message,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_without_binary_noise() {
        assert_eq!(fmt_float(1.0 - 0.95), "0.05");
        assert_eq!(fmt_float(14.4 * (1.0 - 0.95)), "0.72");
        assert_eq!(fmt_float(300.0 * 1e-3), "0.3");
        assert_eq!(fmt_float(2.0), "2");
        assert_eq!(fmt_float(0.005), "0.005");
        assert_eq!(le_value(1.0), "1.0");
        assert_eq!(le_value(300.0 * 1e-3), "0.3");
        assert_eq!(le_value(2560.0), "2560.0");
    }

    #[test]
    fn le_matchers() {
        assert_eq!(le_matcher("0.25").to_string(), "le=\"0.25\"");
        assert_eq!(le_matcher("1.0").to_string(), "le=~\"1(\\\\.0)?\"");
        assert_eq!(le_matcher("2560.0").to_string(), "le=~\"2560(\\\\.0)?\"");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_prom_duration("5m"), Ok(300));
        assert_eq!(parse_prom_duration("30d"), Ok(2_592_000));
        assert_eq!(parse_prom_duration("1h30m"), Ok(5400));
        assert_eq!(parse_prom_duration("4w"), Ok(2_419_200));
        for bad in ["", "1M", "30 days", "0d", "1.5h", "30m1h", "5mm", "d"] {
            assert!(parse_prom_duration(bad).is_err(), "{bad}");
        }
        // The bound: 365 d = 31 536 000 s is the longest; one second more is refused, and so
        // is anything Prometheus itself could not parse (past 2^63 ns ≈ 292 y) or u64 overflows.
        assert_eq!(parse_prom_duration("1y"), Ok(31_536_000));
        assert_eq!(parse_prom_duration("365d"), Ok(31_536_000));
        assert_eq!(parse_prom_duration("52w1d"), Ok(31_536_000));
        for long in [
            "1y1s",
            "366d",
            "53w",
            "10y",
            "300y",
            "99999999999999999999d",
            "18446744073709551615ms",
        ] {
            let e = parse_prom_duration(long).unwrap_err();
            assert!(e.contains("longer than 365 days (1y)"), "{long}: {e}");
        }
        assert_eq!(fmt_prom_duration(180_000), "2d2h");
        assert_eq!(fmt_prom_duration(5400), "1h30m");
    }

    #[test]
    fn matchers_parse_and_print() {
        let m = Matcher::parse("job=\"vllm\"").unwrap();
        assert_eq!(m, Matcher::eq("job", "vllm"));
        assert_eq!(
            Matcher::parse("model_name=~llama.*").unwrap().op,
            MatchOp::Re
        );
        assert!(Matcher::parse("no operator").is_err());
        assert!(Matcher::parse("1bad=\"x\"").is_err());
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(regex_escape("a.b|c"), "a\\.b\\|c");
        assert_eq!(
            selector(
                "vllm:x",
                &[Matcher::eq("a", "b"), Matcher::not_re("c", "d|e")]
            ),
            "vllm:x{a=\"b\",c!~\"d|e\"}"
        );
    }

    #[test]
    fn colon_names_parse_bare() {
        validate("sum(rate(vllm:time_to_first_token_seconds_bucket{le=~\"1(\\\\.0)?\"}[5m]))")
            .unwrap();
        assert!(validate("sum(rate(x[5m])").is_err());
    }
}
