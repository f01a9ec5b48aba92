//! Benchmark: diagnose a 30-minute range against a local Prometheus (target: at most 2 s).
//!
//! Starts the Debian `prometheus` binary on loopback over 35 minutes of backfilled vLLM 0.32 +
//! dcgm-exporter series (`tests/support/prom_backfill.rs`: the real fixture scrapes replayed
//! every 5 s, 167,000 samples), then times the whole of `headroom diagnose --prometheus URL
//! --range 30m` minus printing: `window_from_prometheus` (every PromQL query, over HTTP) and
//! `diagnose::assess`. Prints the median and best of `RUNS` (env, default 7) runs, the first one
//! (cold caches) separately.
//!
//! With `HEADROOM_BIN=path/to/headroom` it also times the binary end to end (process start,
//! queries, judgement, JSON output).
//!
//! `cargo bench -p headroom-diagnose --bench prometheus_range`

#[path = "../tests/support/prom_backfill.rs"]
mod backfill;

use std::time::{Duration, Instant};

use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile};
use headroom_diagnose::assess;
use headroom_signals::Selection;
use headroom_signals::promql::{PromClient, window_from_prometheus};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (Some(prometheus), Some(promtool)) = (
        backfill::on_path("prometheus"),
        backfill::on_path("promtool"),
    ) else {
        eprintln!(
            "prometheus_range: prometheus/promtool not on PATH (scripts/install-prometheus); nothing measured"
        );
        return;
    };
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    let prom = backfill::start(&prometheus, &promtool, 35);
    println!(
        "prometheus_range: 35 min of series backfilled and served in {:.1} s",
        prom.setup_s
    );
    let slo = SloFile::parse(DEFAULT_SLO_YAML, std::path::Path::new("built-in slo.yaml"))
        .expect("built-in SLO")
        .spec_for("*");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let end = prom.end_unix_s as f64;
    let mut times = Vec::with_capacity(runs);
    let mut findings = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let a = rt.block_on(async {
            let client = PromClient::new(&prom.base, Duration::from_secs(10)).expect("client");
            let w = window_from_prometheus(&client, 1800.0, end, &Selection::default(), None)
                .await
                .expect("window");
            assess(&w, None, &slo)
        });
        times.push(t.elapsed().as_secs_f64());
        findings = a.finding_ids().iter().map(|s| s.to_string()).collect();
    }
    let first = times[0];
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "prometheus_range: diagnose 30m range (library: all PromQL queries + assess): median {:.1} ms, best {:.1} ms, first {:.1} ms over {runs} runs (target ≤ 2000 ms); findings {findings:?}",
        median(times.clone()) * 1e3,
        best * 1e3,
        first * 1e3
    );
    if let Some(bin) = std::env::var_os("HEADROOM_BIN") {
        let mut t_bin = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let out = std::process::Command::new(&bin)
                .args([
                    "diagnose",
                    "--prometheus",
                    &prom.base,
                    "--range",
                    "30m",
                    "--end",
                ])
                .arg(format!("{end}"))
                .args(["--format", "json"])
                .output()
                .expect("run headroom");
            t_bin.push(t.elapsed().as_secs_f64());
            assert!(
                out.status.success(),
                "headroom diagnose failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        println!(
            "prometheus_range: `headroom diagnose --prometheus URL --range 30m --format json` end to end: median {:.1} ms, best {:.1} ms over {runs} runs",
            median(t_bin.clone()) * 1e3,
            t_bin.iter().copied().fold(f64::INFINITY, f64::min) * 1e3
        );
    }
}
