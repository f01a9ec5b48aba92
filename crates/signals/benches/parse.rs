//! Parse benchmark: a real ≈ 53 KB vLLM 0.32 `/metrics` body (after a burst: every histogram
//! populated). Target (issue 4): at most 1 ms per parse. Run with
//! `cargo bench -p headroom-signals --bench parse`; prints the median and the best of the runs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use headroom_signals::adapter::{Selection, engine_snapshot};
use headroom_signals::exposition::parse;

fn main() {
    let path = format!(
        "{}/../../fixtures/vllm/v0.32-cpu-after-burst-c16.prom",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = match std::fs::read_to_string(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    let measure = |f: &dyn Fn()| {
        for _ in 0..50 {
            f();
        }
        let mut runs: Vec<Duration> = (0..500)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect();
        runs.sort();
        (runs[runs.len() / 2], runs[0], runs[runs.len() * 99 / 100])
    };
    let (median, best, p99) = measure(&|| {
        black_box(parse(black_box(&body)).expect("fixture parses"));
    });
    println!(
        "parse {} bytes ({} samples): median {:.1} µs, best {:.1} µs, p99 {:.1} µs (target ≤ 1000 µs)",
        body.len(),
        parse(&body).map(|e| e.sample_count()).unwrap_or(0),
        median.as_secs_f64() * 1e6,
        best.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    let exp = parse(&body).expect("fixture parses");
    let (median, _, _) = measure(&|| {
        black_box(engine_snapshot(
            black_box(&exp),
            None,
            &Selection::default(),
        ));
    });
    println!(
        "engine_snapshot (canonical signals) on the same body: median {:.1} µs",
        median.as_secs_f64() * 1e6
    );
}
