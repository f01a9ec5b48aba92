//! Closed-loop virtual users pause after a refusal (HTTP 429/503, honouring `Retry-After`, else
//! an exponential back-off) or a transport failure, instead of re-sending at once; open loop
//! keeps its schedule. Against the loopback stub, each level a few seconds long.
//!
//! Before the pause existed, a closed loop of 64 users against a gateway answering 429 at once
//! sent ~10,000 requests/s; here 8 users over 3 s send at most 24.

use headroom_core::Outcome;
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::{refusal_warning, run_level};
use headroom_load::testkit::{StubConfig, StubFault, StubServer};
use headroom_load::workload::Workload;
use headroom_testkit::refusing_port;
use std::path::Path;
use std::time::{Duration, Instant};

fn plans() -> Vec<ClassPlan> {
    let text = "load: {mode: concurrency}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 10}, ignore_eos: true}\n";
    let w = Workload::parse(text, Path::new("w.yaml"), Path::new(".")).unwrap();
    ClassPlan::from_workload(&w, None).unwrap()
}

fn refusing(status: u16, retry_after: Option<&str>) -> StubServer {
    let fault = match retry_after {
        Some(v) => StubFault::Refuse {
            status,
            message: "queue full".into(),
            retry_after: v.into(),
        },
        None => StubFault::Status(status, "queue full".into()),
    };
    StubServer::start(StubConfig {
        fault,
        ..StubConfig::default()
    })
    .unwrap()
}

/// Runs a closed-loop level of `users` with no warm-up and a `measure` window; returns the
/// recording and the level's wall time.
async fn closed(
    url: &str,
    users: u32,
    measure: Duration,
) -> (headroom_load::recorder::LevelRecording, Duration) {
    let t = Target::new(url, None, Some("tiny")).unwrap();
    let t0 = Instant::now();
    let rec = run_level(
        &t,
        &plans(),
        LevelMode::Concurrency(users),
        Duration::ZERO,
        measure,
        7,
        CancellationFlag::new(),
    )
    .await;
    (rec, t0.elapsed())
}

/// `Retry-After: 1`, 8 users, 3 s: each user sends at 0, then after each 1 s pause, so at
/// about 0, 1 and 2 s (its k-th request starts no earlier than k s); the 4th would start at
/// 3 s or later, after the window. 8 × 3 / 1 = 24 requests at most, and 24 whenever a refusal
/// takes under ⅓ s to come back (loopback: milliseconds); a loaded host may lose the third of
/// a user or two. Every one is recorded as http_429, and the level ends on time.
#[tokio::test]
async fn users_wait_retry_after_between_refused_requests() {
    let stub = refusing(429, Some("1"));
    let (rec, wall) = closed(&stub.url(), 8, Duration::from_secs(3)).await;
    let n = rec.classes[0].requests();
    assert!((22..=24).contains(&n), "{n} requests");
    assert_eq!(rec.started, n);
    assert_eq!(
        rec.classes[0].outcomes.get(&Outcome::HttpStatus(429)),
        Some(&n)
    );
    assert_eq!(rec.classes[0].outcome_labels().get("http_429"), Some(&n));
    // The pause is no request: the stub saw exactly the recorded ones.
    assert_eq!(stub.requests(), n);
    assert!(
        (rec.window_s - 3.0).abs() < 0.05,
        "window {} s",
        rec.window_s
    );
    assert!(wall < Duration::from_millis(3_500), "level took {wall:?}");
    // 24 of 24 refused: the level says so.
    let w = refusal_warning(&rec).expect("a refusal warning");
    assert!(
        w.starts_with(&format!(
            "{n} of {n} requests of the window (100 %) were refused"
        )),
        "{w}"
    );
    assert!(w.contains("each virtual user paused"), "{w}");
}

/// No `Retry-After`: the OpenAI SDK's pauses, 0.5 s × 2^(k−1) × jitter in [0.75, 1]. A user's
/// requests start at 0; after [0.375, 0.5] s; after a further [0.75, 1] (so at 1.125–1.5 s);
/// after a further [1.5, 2] (2.625–3.5 s, inside a 3 s window or not); the next pause is at
/// least 3 s. So each of 4 users sends 3 or 4 requests in 3 s: 12 to 16 in all.
#[tokio::test]
async fn without_retry_after_users_back_off_exponentially() {
    let stub = refusing(429, None);
    let (rec, wall) = closed(&stub.url(), 4, Duration::from_secs(3)).await;
    let n = rec.classes[0].requests();
    assert!((12..=16).contains(&n), "{n} requests");
    assert_eq!(
        rec.classes[0].outcomes.get(&Outcome::HttpStatus(429)),
        Some(&n)
    );
    assert_eq!(stub.requests(), n);
    assert!(wall < Duration::from_millis(3_500), "level took {wall:?}");
}

/// 503 (a gateway's queue timeout) with `Retry-After: 2`, 2 users, 3 s: requests at 0 and 2 s,
/// 2 per user, 4 in all, counted as http_503.
#[tokio::test]
async fn a_503_is_paused_for_as_well() {
    let stub = refusing(503, Some("2"));
    let (rec, _) = closed(&stub.url(), 2, Duration::from_secs(3)).await;
    let n = rec.classes[0].requests();
    assert_eq!(n, 4);
    assert_eq!(rec.classes[0].outcome_labels().get("http_503"), Some(&4));
    assert_eq!(stub.requests(), 4);
}

/// A `Retry-After` longer than the level never holds it: 4 users told to wait 30 s send one
/// request each, and a 2 s level still ends after 2 s.
#[tokio::test]
async fn a_pause_never_outlasts_the_level() {
    let stub = refusing(429, Some("30"));
    let (rec, wall) = closed(&stub.url(), 4, Duration::from_secs(2)).await;
    assert_eq!(rec.classes[0].requests(), 4);
    assert_eq!(stub.requests(), 4);
    assert!(
        (rec.window_s - 2.0).abs() < 0.05,
        "window {} s",
        rec.window_s
    );
    assert!(wall < Duration::from_millis(2_500), "level took {wall:?}");
}

/// A server that is gone (connections refused): each user pauses 10 ms × 2^(k−1) after its k-th
/// failure in a row, so its k-th request (from 0) starts no earlier than 10 × (2^k − 1) ms:
/// k = 0..=6 fit in 1 s (the 7th at 630 ms, the next at 1,270 ms). 4 users: at most 28
/// requests, and at least 5 each (the 5th at 310 ms plus five refused connects).
#[tokio::test]
async fn a_lost_server_is_retried_with_a_growing_pause() {
    let (_reserved, port) = refusing_port();
    let (rec, wall) = closed(
        &format!("http://127.0.0.1:{port}"),
        4,
        Duration::from_secs(1),
    )
    .await;
    let n = rec.classes[0].requests();
    assert!((20..=28).contains(&n), "{n} requests");
    assert_eq!(rec.classes[0].outcomes.get(&Outcome::Transport), Some(&n));
    assert!(wall < Duration::from_millis(1_500), "level took {wall:?}");
    // Transport failures are not refusals.
    assert_eq!(refusal_warning(&rec), None);
}

/// Open loop keeps its schedule whatever the answers: 50 req/s constant over a 0.2 s warm-up
/// and a 1 s window sends 9 + 50 requests (intended times k/50 s, k = 1..=59), all refused.
#[tokio::test]
async fn open_loop_ignores_retry_after() {
    let stub = refusing(429, Some("1"));
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    let rec = run_level(
        &t,
        &plans(),
        LevelMode::Rate {
            rate_per_s: 50.0,
            arrival: ArrivalProcess::Constant,
            max_concurrency: None,
        },
        Duration::from_millis(200),
        Duration::from_secs(1),
        1,
        CancellationFlag::new(),
    )
    .await;
    assert_eq!(rec.warmup_started, 9);
    assert_eq!(rec.started, 50);
    assert_eq!(rec.classes[0].outcome_labels().get("http_429"), Some(&50));
    assert_eq!(stub.requests(), 59);
    let w = refusal_warning(&rec).expect("a refusal warning");
    assert!(w.contains("50 of 50 requests"), "{w}");
    assert!(w.contains("arrivals kept their schedule"), "{w}");
}
