//! `http_requests_total`, the API server's own request counter.
//!
//! vLLM's API server exports it through prometheus-fastapi-instrumentator:
//! `http_requests_total{handler, method, status}` (a counter; `status` grouped as `"2xx"`,
//! `"4xx"`, `"5xx"`; handlers `/metrics`, `/health`, `/load`, `/ping`, `/version`,
//! `/server_info` excluded; unmatched paths grouped as `handler="none"`), see
//! `shared/reference/metrics.md` and `shared/fixtures/vllm/v0.32-*.prom`. It is the only place
//! where HTTP errors the engine never saw (injected 5xx, validation 4xx) become visible.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Counts of finished HTTP requests by `(handler, method, status class)`.
#[derive(Debug, Default)]
pub(crate) struct HttpCounters {
    counts: Mutex<BTreeMap<(String, String, &'static str), u64>>,
}

/// Handlers the instrumentator does not count.
const EXCLUDED: [&str; 6] = [
    "/metrics",
    "/health",
    "/load",
    "/ping",
    "/version",
    "/server_info",
];

impl HttpCounters {
    /// Counts one request answered with `status` (a 3-digit code) on `handler`.
    pub(crate) fn record(&self, handler: &str, method: &str, status: u16) {
        if EXCLUDED.contains(&handler) {
            return;
        }
        let class = match status / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        };
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((handler.to_string(), method_label(method).to_string(), class))
            .or_insert(0) += 1;
    }

    /// Appends the `http_requests_total` family in text format 0.0.4.
    pub(crate) fn render_into(&self, out: &mut String) {
        let m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        out.push_str(
            "# HELP http_requests_total Total number of requests by method, status and handler.\n",
        );
        out.push_str("# TYPE http_requests_total counter\n");
        for ((handler, method, class), n) in m.iter() {
            let _ = writeln!(
                out,
                "http_requests_total{{handler=\"{}\",method=\"{}\",status=\"{class}\"}} {n}.0",
                escape_label(handler),
                escape_label(method)
            );
        }
    }
}

/// The `method` label: a method of RFC 9110 (and PATCH) as sent, anything else `OTHER`, so a
/// client inventing method names cannot grow `/metrics` without bound (any token is a valid
/// method on the wire, and the instrumentator labels it as is).
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("OTHER")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_status_and_skips_excluded_handlers() {
        let c = HttpCounters::default();
        c.record("/v1/completions", "POST", 200);
        c.record("/v1/completions", "POST", 200);
        c.record("/v1/completions", "POST", 400);
        c.record("/v1/completions", "POST", 503);
        c.record("/health", "GET", 200);
        c.record("/metrics", "GET", 200);
        // Invented methods share one label value, however many there are.
        for i in 0..100 {
            c.record("/v1/completions", &format!("X{i}"), 405);
        }
        c.record("/v1/completions", "get", 405);
        let mut s = String::new();
        c.render_into(&mut s);
        let lines: Vec<&str> = s.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                r#"http_requests_total{handler="/v1/completions",method="OTHER",status="4xx"} 101.0"#,
                r#"http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 2.0"#,
                r#"http_requests_total{handler="/v1/completions",method="POST",status="4xx"} 1.0"#,
                r#"http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 1.0"#,
            ]
        );
    }
}
