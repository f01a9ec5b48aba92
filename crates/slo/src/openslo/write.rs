//! The `slo.yaml` text of an [`SloFile`], exact enough to read back to the same value.

use crate::promql::fmt_float;
use headroom_core::slo::SloFile;

/// Writes an [`SloFile`] as `slo.yaml` text that [`SloFile::parse`] reads back to the same value.
pub fn to_slo_yaml(f: &SloFile) -> String {
    let mut out = String::from("objectives:\n");
    for (class, o) in &f.objectives {
        out.push_str(&format!("  {}:\n", crate::promql::quote(class)));
        for (name, map) in [
            ("ttft", &o.ttft),
            ("itl", &o.itl),
            ("tpot", &o.tpot),
            ("e2e", &o.e2e),
            ("queue_time", &o.queue_time),
        ] {
            if map.is_empty() {
                continue;
            }
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("p{}: {}", fmt_float(k.value()), duration(*v)))
                .collect();
            out.push_str(&format!("    {name}: {{{}}}\n", items.join(", ")));
        }
        if let Some(r) = o.error_rate {
            out.push_str(&format!("    error_rate: {}%\n", fmt_float(r * 100.0)));
        }
    }
    if let Some(b) = &f.budget {
        let target = b
            .target
            .map(|t| format!(", target: {}%", fmt_float(t * 100.0)))
            .unwrap_or_default();
        out.push_str(&format!(
            "budget: {{window: {}{target}, freeze_at: {}%}}\n",
            b.window,
            fmt_float(b.freeze_at * 100.0)
        ));
    }
    out
}

/// Seconds as the shortest exact `slo.yaml` duration: `250ms`, `1.5s`, `50us`.
fn duration(s: f64) -> String {
    let ms = crate::promql::clean(s * 1e3);
    if ms >= 1.0 && ms == ms.trunc() {
        if ms >= 1000.0 && (ms / 1000.0) == (ms / 1000.0).trunc() {
            return format!("{}s", fmt_float(ms / 1000.0));
        }
        return format!("{}ms", fmt_float(ms));
    }
    if ms < 1.0 {
        return format!("{}us", fmt_float(s * 1e6));
    }
    format!("{}s", fmt_float(s))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_write_exactly() {
        assert_eq!(duration(0.25), "250ms");
        assert_eq!(duration(2.0), "2s");
        assert_eq!(duration(1.5), "1500ms");
        assert_eq!(duration(0.00005), "50us");
    }
}
