//! One parser for every flag that takes a time: plain seconds (`30`, `2.5`), a duration with a
//! unit as `slo.yaml` writes them (`250ms`, `30s`, `5m`, `1h`, also `ns` and `us`;
//! [`headroom_core::slo::parse_duration_s`]), or zero with or without a unit (`0`, `0s`). Clap
//! runs it, so a command gets a [`Duration`] and checks only its own range (a warm-up may be
//! zero, a refresh interval not).

use std::time::Duration;

/// The forms accepted, for error messages.
pub(crate) const FORMS: &str =
    "expected seconds (30, 2.5) or a duration with a unit: 250ms, 30s, 5m, 1h (also ns, us)";

/// Parses a time flag (see the module docs). Clap puts the flag's name before the message.
///
/// # Errors
/// What was given and the accepted forms: no number, an unknown unit, a negative or non-finite
/// value, or one too long for a [`Duration`].
pub(crate) fn duration_arg(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    let secs = match t.parse::<f64>() {
        Ok(s) => s,
        Err(_) if is_zero_with_unit(t) => 0.0,
        Err(_) => headroom_core::slo::parse_duration_s(t).map_err(|e| format!("{e}; {FORMS}"))?,
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{t}` is not a time of 0 or more; {FORMS}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{t}` is too long; {FORMS}"))
}

/// `0s`, `0ms`, `0.0m`, …: zero, which [`headroom_core::slo::parse_duration_s`] refuses (it
/// reads durations that must be positive) but a warm-up or a one-scrape window may be.
fn is_zero_with_unit(t: &str) -> bool {
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    num.parse::<f64>() == Ok(0.0)
        && matches!(unit.trim(), "ns" | "us" | "µs" | "ms" | "s" | "m" | "h")
}

#[cfg(test)]
mod tests {
    use super::duration_arg;
    use std::time::Duration;

    /// Every form the time flags accepted before they parsed in clap (plain seconds of sweep,
    /// plan and top; units of diagnose and slo; zero of diagnose's --duration), by hand.
    #[test]
    fn time_flags_take_seconds_units_and_zero() {
        let ms = Duration::from_millis;
        for (v, want) in [
            ("3", ms(3000)),
            ("2.5", ms(2500)),
            (" 1.5s ", ms(1500)),
            ("250ms", ms(250)),
            ("30s", ms(30_000)),
            ("5m", ms(300_000)),
            ("1h", ms(3_600_000)),
            ("1.5m", ms(90_000)),
            ("50us", Duration::from_micros(50)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
        ] {
            assert_eq!(duration_arg(v), Ok(want), "{v:?}");
        }
    }

    /// Anything else is refused with what was given and the accepted forms.
    #[test]
    fn other_times_are_refused_with_the_forms() {
        for v in [
            "",
            "s",
            "abc",
            "-",
            "3 parsecs",
            "0parsecs",
            "-5",
            "-1s",
            "NaN",
            "inf",
            "1e300",
        ] {
            let e = duration_arg(v).unwrap_err();
            assert!(
                e.contains("expected seconds (30, 2.5) or a duration with a unit"),
                "{v:?}: {e}"
            );
        }
        assert!(
            duration_arg("3 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}
