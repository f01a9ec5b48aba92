//! `levels.csv`: one row per level of every phase, units in the column names.

use headroom_core::run::{LevelResult, RunResult};

const SIGNALS: [&str; 4] = ["ttft", "itl", "tpot", "e2e"];

/// The `levels.csv` exporter ([`render`]).
pub static EXPORTER: crate::export::Text = crate::export::Text {
    name: "csv",
    file_name: headroom_core::run_dir::LEVELS_CSV,
    render,
};

/// Renders every level as CSV with a header row.
pub fn render(run: &RunResult) -> String {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "phase",
        "mode",
        "load",
        "verdict",
        "window_s",
        "requests",
        "errors",
        "client_cancels",
        "request_rate_per_s",
        "output_tokens_per_s",
        "goodput_per_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in SIGNALS {
        for q in ["p50", "p95", "p99"] {
            header.push(format!("{s}_{q}_ms"));
        }
    }
    header.extend(
        [
            "server_queue_time_p95_ms",
            "server_kv_cache_usage_max_ratio",
            "server_preemptions",
            "client_cpu_per_chunk_us",
            "send_lag_p99_ms",
            "failed_objectives",
            "inconclusive_objectives",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    // Writing to a Vec cannot fail.
    let _ = w.write_record(&header);
    for p in &run.phases {
        for l in &p.levels {
            let _ = w.write_record(row(&p.name, l));
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

fn row(phase: &str, l: &LevelResult) -> Vec<String> {
    let requests: u64 = l.outcomes.values().sum();
    // The error objective's own count (same requests, same rule).
    let (errors, _) = l.error_counts();
    let cancels = l.outcomes.get("client_cancel").copied().unwrap_or(0);
    let mut r = vec![
        phase.to_string(),
        format!("{:?}", l.mode).to_lowercase(),
        l.load.to_string(),
        l.verdict.as_str().to_string(),
        format!("{:.3}", l.window_s),
        requests.to_string(),
        errors.to_string(),
        cancels.to_string(),
        format!("{:.4}", l.request_rate_per_s),
        format!("{:.2}", l.output_tokens_per_s),
        l.goodput_per_s.map_or(String::new(), |g| format!("{g:.4}")),
    ];
    for s in SIGNALS {
        match l.latency.get(s) {
            Some(x) if x.count > 0 => {
                for v in [x.p50_s, x.p95_s, x.p99_s] {
                    r.push(format!("{:.3}", v * 1e3));
                }
            }
            _ => r.extend(std::iter::repeat_n(String::new(), 3)),
        }
    }
    let fig = |k: &str| {
        l.server
            .as_ref()
            .and_then(|s| s.figures.get(k).copied())
            .map(|v| v.to_string())
            .unwrap_or_default()
    };
    r.push(
        l.server
            .as_ref()
            .and_then(|s| s.figures.get("queue_time_p95_s").copied())
            .map(|v| format!("{:.3}", v * 1e3))
            .unwrap_or_default(),
    );
    r.push(fig("kv_cache_usage_max_ratio"));
    r.push(fig("preemptions"));
    r.push(format!("{:.3}", l.client.cpu_per_chunk_us));
    r.push(format!("{:.3}", l.client.send_lag_p99_s * 1e3));
    r.push(crate::join_ids(&l.failed_objectives(), " "));
    r.push(crate::join_ids(&l.inconclusive_objectives(), " "));
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_row_per_level_with_units() {
        let s = super::render(&crate::testdata::run());
        let mut rd = ::csv::Reader::from_reader(s.as_bytes());
        let h = rd.headers().unwrap().clone();
        let rows: Vec<_> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 3);
        let col = |n: &str| h.iter().position(|x| x == n).unwrap();
        assert_eq!(&rows[2][col("verdict")], "FAIL");
        assert_eq!(&rows[2][col("ttft_p95_ms")], "500.000");
        assert_eq!(&rows[0][col("requests")], "41");
        assert_eq!(&rows[0][col("errors")], "1");
        assert_eq!(&rows[2][col("failed_objectives")], "ttft_p95");
        assert_eq!(&rows[2][col("inconclusive_objectives")], "");
        assert_eq!(&rows[0][col("phase")], "chat <&>");
    }
}
