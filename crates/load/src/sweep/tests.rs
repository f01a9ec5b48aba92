//! The sweep against the loopback stub (`crate::testkit`): faults that must never become a
//! capacity claim. Every test is bounded to a few seconds and its stub stops when dropped.

use crate::arrivals::{ArrivalProcess, ArrivalSchedule, LevelMode};
use crate::client::{CancellationFlag, Target};
use crate::prompt::ClassPlan;
use crate::runner::{RunOptions, run_level_with};
use crate::testkit::{StubConfig, StubServer};
use crate::workload::Workload;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn plans(mode: &str) -> Vec<ClassPlan> {
    let text = format!(
        "load: {{mode: {mode}}}\nclasses:\n  - {{name: a, endpoint: completions, prompt_tokens: {{fixed: 8}}, max_tokens: {{fixed: 4}}}}\n"
    );
    let w = Workload::parse(&text, Path::new("w.yaml"), Path::new(".")).unwrap();
    ClassPlan::from_workload(&w, None).unwrap()
}

/// A rate whose gaps overflow `Duration` (below the workload's 0.001 req/s floor, but reachable
/// through the library) ends the schedule instead of panicking the pacer thread.
#[test]
fn a_schedule_past_any_clock_ends() {
    for rate in [1e-300, 5e-324, 1e-20] {
        let mut s = ArrivalSchedule::new(rate, ArrivalProcess::Constant, 1).unwrap();
        assert_eq!(s.next(), None, "{rate}");
    }
}

#[tokio::test]
async fn a_level_at_a_rate_past_any_clock_returns_without_load() {
    let stub = StubServer::start(StubConfig::default()).unwrap();
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    let p = plans("rate");
    for arrival in [ArrivalProcess::Constant, ArrivalProcess::Poisson] {
        let t0 = Instant::now();
        let rec = run_level_with(
            &t,
            &p,
            LevelMode::Rate {
                rate_per_s: 1e-300,
                arrival,
                max_concurrency: None,
            },
            Duration::ZERO,
            Duration::from_millis(300),
            1,
            CancellationFlag::new(),
            &RunOptions {
                drain_min: Duration::ZERO,
                ..RunOptions::default()
            },
        )
        .await;
        assert_eq!(rec.aborted, None, "{arrival:?}");
        assert_eq!(rec.started, 0);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
