//! The client's own limits are the client's failure, never the server's: a level run with a low
//! open-file limit (in a child process, so the limit does not reach the other tests) counts no
//! server error and says, in the recording, that the client ran out of descriptors.

use headroom_core::Outcome;
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::run_level;
use headroom_load::testkit::{StubConfig, StubServer};
use headroom_load::workload::Workload;
use std::path::Path;
use std::time::Duration;

/// The child reads the stub's URL from here; without it, the child test does nothing.
const CHILD_ENV: &str = "HEADROOM_TEST_FD_LIMIT_CHILD";

/// Open files the child may hold: the runtime and the test harness need about 20, so a few
/// dozen streams in flight exhaust it.
const CHILD_FDS: u64 = 48;

#[test]
fn a_low_open_file_limit_is_the_clients_failure() {
    let stub = StubServer::start(StubConfig {
        itl: Duration::from_millis(20),
        ..StubConfig::default()
    })
    .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "limited_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, stub.url())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("CHILD-CHECKED"),
        "the child ran no level: {text}"
    );
    eprintln!(
        "{}",
        text.lines()
            .find(|l| l.contains("CHILD-CHECKED"))
            .unwrap_or("")
    );
}

/// Runs only as the child of the test above.
#[test]
fn limited_child() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lim = libc::rlimit {
        rlim_cur: CHILD_FDS,
        rlim_max: CHILD_FDS,
    };
    // SAFETY: setrlimit reads the struct we own; lowering both limits needs no privilege.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) },
        0
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = Target::new(&url, None, Some("tiny")).unwrap();
        let l = headroom_load::client::fd_limit::fd_limit();
        assert_eq!((l.soft, l.hard), (CHILD_FDS, CHILD_FDS), "{l:?}");
        let text = "load: {mode: rate}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 50}, ignore_eos: true}\n";
        let w = Workload::parse(text, Path::new("w.yaml"), Path::new(".")).unwrap();
        let plans = ClassPlan::from_workload(&w, None).unwrap();
        // 300 req/s of 1 s answers want ~300 connections; 48 descriptors hold far fewer.
        let rec = run_level(
            &t,
            &plans,
            LevelMode::Rate {
                rate_per_s: 300.0,
                arrival: ArrivalProcess::Poisson,
                max_concurrency: None,
            },
            Duration::ZERO,
            Duration::from_secs(3),
            7,
            CancellationFlag::new(),
        )
        .await;
        let totals = rec.level_totals();
        let limited = totals.outcomes.get(&Outcome::ClientLimit).copied();
        assert!(limited.is_some_and(|n| n > 0), "{:?}", totals.outcomes);
        // Nothing the client failed itself is counted against the server.
        let server_errors: u64 = rec.classes.iter().map(|c| c.errors()).sum();
        assert_eq!(server_errors, 0, "{:?}", totals.outcomes);
        assert_eq!(totals.outcomes.get(&Outcome::Transport), None);
        let why = rec.aborted.as_deref().unwrap_or_default();
        assert!(
            why.contains("the client, not the server")
                && why.contains("ran out of file descriptors (EMFILE")
                && why.contains("RLIMIT_NOFILE 48"),
            "{why}"
        );
        // The window closed at the first client failure instead of running on.
        assert!(rec.window_s < 2.5, "{}", rec.window_s);
        println!("CHILD-CHECKED {limited:?} {why}");
    });
}
