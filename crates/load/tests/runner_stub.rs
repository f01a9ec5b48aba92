//! One load level against the loopback stub: windows, drain, open and closed loop, the probe.
//! Each test runs for at most a few seconds and the stub stops when dropped.

use headroom_core::{LatencySignal, Outcome};
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::{LevelSpec, ProbeError, RunOptions, probe, run_level, run_level_with};
use headroom_load::testkit::{StubConfig, StubFault, StubServer};
use headroom_load::workload::{Endpoint, Workload};
use headroom_testkit::refusing_port;
use std::path::Path;
use std::time::{Duration, Instant};

fn plans(yaml_classes: &str) -> Vec<ClassPlan> {
    let text = format!("load: {{mode: concurrency}}\nclasses:\n{yaml_classes}");
    let w = Workload::parse(&text, Path::new("w.yaml"), Path::new(".")).unwrap();
    ClassPlan::from_workload(&w, None).unwrap()
}

const ONE: &str = "  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 10}, ignore_eos: true}\n";
const MS: u64 = 1_000_000;

#[tokio::test]
async fn closed_loop_records_the_window_only() {
    let stub = StubServer::start(StubConfig {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(2),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    let p = plans(ONE);
    let rec = run_level(
        &t,
        &p,
        LevelMode::Concurrency(4),
        Duration::from_millis(300),
        Duration::from_secs(1),
        1,
        CancellationFlag::new(),
    )
    .await;
    let c = &rec.classes[0];
    let n = c.requests();
    // every request started in the window finished in the drain
    assert_eq!(n, rec.started);
    assert_eq!(rec.cancelled_at_end, 0);
    assert_eq!(c.outcomes.get(&Outcome::Length), Some(&n));
    assert!(rec.warmup_started >= 4);
    // each request takes ≥ 20 + 9·2 = 38 ms: 4 streams over 1 s start at most 4·1/0.038 + 4
    assert!((8..=110).contains(&n), "{n}");
    assert!(c.percentile_ns(LatencySignal::Ttft, 50.0).unwrap() >= 20 * MS);
    assert!(c.percentile_ns(LatencySignal::E2e, 1.0).unwrap() >= 38 * MS);
    // usage: the stub reports max_tokens outputs and counts prompt words
    assert_eq!(c.tokens.output_realised, 10 * n);
    assert_eq!(c.tokens.output_cap_requested, 10 * n);
    assert_eq!(c.tokens.prompt_realised, 8 * n);
    assert_eq!(c.tokens.prompt_requested, 8 * n);
    assert_eq!(c.itl.len(), 9 * n);
    assert!((rec.window_s - 1.0).abs() < 0.05, "{}", rec.window_s);
    assert!(rec.client.wall_s >= 1.3);
    assert!(rec.client.process_cpu_s > 0.0);
    assert!(!rec.interrupted);
}

#[tokio::test]
async fn open_loop_constant_rate_starts_exactly_the_schedule() {
    let stub = StubServer::start(StubConfig::default()).unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let p = plans(ONE);
    let rec = run_level(
        &t,
        &p,
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
    // intended times k/50 s: k = 1..=9 fall in the warm-up [0, 0.2), k = 10..=59 in the window
    assert_eq!(rec.warmup_started, 9);
    assert_eq!(rec.started, 50);
    assert_eq!(rec.classes[0].requests(), 50);
    // A sanity bound only: this machine is shared and loaded while tests run; the send-lag
    // figure that matters (p99 ≤ 1 ms at 500 req/s) is the benchmark's (benches/).
    let lag = rec.client_health();
    assert!(
        lag.send_lag_p99_s < 0.25,
        "send lag p99 {}",
        lag.send_lag_p99_s
    );
    // The pacer's own wake-up lateness is part of each request's send lag (the send follows the
    // wake-up), so its p99 is recorded and at most the send lag's (HDR precision: 3 significant
    // digits).
    assert!(lag.pacer_late_p99_s > 0.0, "pacer lateness not recorded");
    assert!(
        lag.pacer_late_p99_s <= lag.send_lag_p99_s * 1.001,
        "pacer late p99 {} > send lag p99 {}",
        lag.pacer_late_p99_s,
        lag.send_lag_p99_s
    );
    assert_eq!(stub.requests(), 59);
    // The pacer sends on idle connections; the runner keeps spares open for it (50 ms of
    // arrivals: 3 at 50/s), and a spare carries no request (the stub counted exactly the
    // schedule above).
    assert!(
        t.idle_connections() >= 3,
        "{} idle connections",
        t.idle_connections()
    );
}

#[tokio::test]
async fn open_loop_cap_queues_and_counts_unsent_arrivals() {
    let stub = StubServer::start(StubConfig {
        ttft: Duration::from_millis(300),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let p = plans(ONE);
    let rec = run_level(
        &t,
        &p,
        LevelMode::Rate {
            rate_per_s: 20.0,
            arrival: ArrivalProcess::Constant,
            max_concurrency: Some(2),
        },
        Duration::ZERO,
        Duration::from_millis(500),
        1,
        CancellationFlag::new(),
    )
    .await;
    // intended at 50, 100, …, 450 ms: 9 arrivals; at most 2 in flight, each ≥ 300 ms, so only
    // the first 2 (at 50, 100 ms) and the next 2 (freed at ≥ 350 ms) are sent in the window
    assert_eq!(rec.started, 9);
    let c = &rec.classes[0];
    assert_eq!(c.requests(), 9);
    let sent_ok = c.outcomes.get(&Outcome::Length).copied().unwrap_or(0);
    let unsent = c.outcomes.get(&Outcome::ClientCancel).copied().unwrap_or(0);
    assert_eq!(sent_ok + unsent, 9);
    assert!((2..=4).contains(&sent_ok), "{:?}", c.outcomes);
    assert_eq!(c.ttft_censored, unsent);
    // queued arrivals waited: their send lag is large
    assert!(rec.client_health().send_lag_max_s > 0.1);
}

#[tokio::test]
async fn in_flight_requests_are_cancelled_after_the_drain() {
    let stub = StubServer::start(StubConfig {
        itl: Duration::from_millis(100),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let p = plans(
        "  - {name: slow, endpoint: chat, prompt_tokens: {fixed: 3}, max_tokens: {fixed: 100}}\n",
    );
    let started = Instant::now();
    let rec = run_level_with(
        &t,
        &p,
        LevelSpec {
            mode: LevelMode::Concurrency(2),
            warmup: Duration::ZERO,
            measure: Duration::from_millis(500),
            seed: 1,
        },
        CancellationFlag::new(),
        &RunOptions {
            drain_min: Duration::from_millis(200),
            drain_max: Duration::from_millis(300),
            ..RunOptions::default()
        },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(rec.started, 2);
    assert_eq!(rec.cancelled_at_end, 2);
    let c = &rec.classes[0];
    assert_eq!(c.outcomes.get(&Outcome::ClientCancel), Some(&2));
    // they did stream: TTFT and ITL are real, E2E is not recorded for cancelled requests
    assert_eq!(c.ttft.len(), 2);
    assert!(c.itl.len() >= 2);
    assert!(c.e2e.is_empty());
    assert_eq!(c.errors(), 0);
}

#[tokio::test]
async fn external_cancel_interrupts_promptly() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::Stall,
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let p = plans(ONE);
    let cancel = CancellationFlag::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c2.cancel();
    });
    let started = Instant::now();
    let rec = run_level(
        &t,
        &p,
        LevelMode::Rate {
            rate_per_s: 10.0,
            arrival: ArrivalProcess::Poisson,
            max_concurrency: None,
        },
        Duration::ZERO,
        Duration::from_secs(30),
        3,
        cancel,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(rec.interrupted);
    assert!(rec.window_s < 1.0);
    let c = &rec.classes[0];
    assert_eq!(c.requests(), rec.started);
    assert!(c.outcomes.keys().all(|o| *o == Outcome::ClientCancel));
}

#[tokio::test]
async fn mix_records_each_class() {
    let stub = StubServer::start(StubConfig::default()).unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let p = plans(
        "  - {name: a, weight: 1, endpoint: chat, prompt_tokens: {fixed: 5}, max_tokens: {fixed: 3}}\n  - {name: b, weight: 1, endpoint: completions, prompt_tokens: {fixed: 5}, max_tokens: {fixed: 7}}\n",
    );
    let rec = run_level(
        &t,
        &p,
        LevelMode::Concurrency(2),
        Duration::ZERO,
        Duration::from_millis(400),
        9,
        CancellationFlag::new(),
    )
    .await;
    let (a, b) = (&rec.classes[0], &rec.classes[1]);
    assert!(a.requests() > 10 && b.requests() > 10);
    assert_eq!(a.tokens.output_realised, 3 * a.requests());
    assert_eq!(b.tokens.output_realised, 7 * b.requests());
    assert_eq!(rec.total().requests(), rec.started);
}

#[tokio::test]
async fn probe_reports_server_and_errors() {
    let stub = StubServer::start(StubConfig {
        models: vec!["tiny".into(), "small".into()],
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    let info = probe(&t, &[Endpoint::Chat, Endpoint::Completions])
        .await
        .unwrap();
    assert_eq!(info.model, "tiny");
    assert_eq!(info.version.as_deref(), Some("stub"));
    assert_eq!(info.models.len(), 2);
    assert_eq!(info.models[1].max_model_len, Some(4096));
    assert!(info.notes.is_empty(), "{:?}", info.notes);

    let t = Target::new(&stub.url(), None, Some("nope")).unwrap();
    let e = probe(&t, &[Endpoint::Chat]).await.unwrap_err();
    assert!(matches!(&e, ProbeError::UnknownModel { served, .. } if served == &["tiny", "small"]));
    assert!(e.to_string().contains("served: tiny, small"), "{e}");

    let bad = StubServer::start(StubConfig {
        fault: StubFault::Status(400, "max_tokens=2 is too large".into()),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&bad.url(), None, None).unwrap();
    let e = probe(&t, &[Endpoint::Chat]).await.unwrap_err();
    assert_eq!(
        e,
        ProbeError::FirstRequest {
            endpoint: "/v1/chat/completions".into(),
            status: 400,
            message: "max_tokens=2 is too large".into()
        }
    );

    let (_reserved, port) = refusing_port();
    let t = Target::new(&format!("http://127.0.0.1:{port}"), None, None).unwrap();
    let e = probe(&t, &[Endpoint::Chat]).await.unwrap_err();
    assert!(matches!(e, ProbeError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("Is the server running"), "{e}");
}

/// A server that answers every request (a one-chunk completion) and closes any connection left
/// idle for `idle_close` (a short keep-alive, or a proxy); counts accepted connections and
/// requests.
async fn short_keepalive_server(
    idle_close: Duration,
) -> (
    String,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (conns, reqs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (c2, r2) = (conns.clone(), reqs.clone());
    let body =
        "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            c2.fetch_add(1, Ordering::Relaxed);
            let (r2, resp) = (r2.clone(), resp.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One whole request (head, then Content-Length bytes), or close when none
                    // starts within `idle_close`.
                    let done = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map_or(0, |v| v.trim().parse().unwrap());
                            if buf.len() >= end + 4 + len {
                                buf.drain(..end + 4 + len);
                                break true;
                            }
                        }
                        let wait = if buf.is_empty() {
                            idle_close
                        } else {
                            Duration::from_secs(5)
                        };
                        match tokio::time::timeout(wait, s.read(&mut chunk)).await {
                            Ok(Ok(k)) if k > 0 => buf.extend_from_slice(&chunk[..k]),
                            _ => break false,
                        }
                    };
                    if !done {
                        return;
                    }
                    r2.fetch_add(1, Ordering::Relaxed);
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, conns, reqs)
}

/// Spare connections kept for the open-loop pacer must not become a connection storm against a
/// server that closes idle connections within milliseconds: every spare dies unused, so top-ups
/// pause. Before, about 3 connects per request (up to 4 per arrival); one per request is what
/// the server forces anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_connections_do_not_storm_a_server_that_closes_idle_ones() {
    use std::sync::atomic::Ordering;
    let (url, conns, reqs) = short_keepalive_server(Duration::from_millis(2)).await;
    let t = Target::new(&url, None, None).unwrap();
    let rec = run_level(
        &t,
        &plans(ONE),
        LevelMode::Rate {
            rate_per_s: 200.0,
            arrival: ArrivalProcess::Poisson,
            max_concurrency: None,
        },
        Duration::from_millis(200),
        Duration::from_secs(1),
        3,
        CancellationFlag::new(),
    )
    .await;
    let (c, r) = (conns.load(Ordering::Relaxed), reqs.load(Ordering::Relaxed));
    assert!(r >= 150, "{r} requests");
    assert_eq!(rec.classes[0].requests(), rec.started);
    assert!(
        c as f64 <= 1.3 * r as f64 + 20.0,
        "{c} connects for {r} requests"
    );
}

/// Goodput counts the successes that met their class's per-request thresholds: with the stub's
/// first token at 50 ms, none meet a 25 ms TTFT objective and all meet a 250 ms one.
#[tokio::test]
async fn goodput_counts_requests_within_their_class_thresholds() {
    use headroom_core::LatencySignal;
    use headroom_core::slo::Objective;
    use headroom_load::runner::GoodputSlo;
    let stub = StubServer::start(StubConfig {
        ttft: Duration::from_millis(50),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, None).unwrap();
    for (threshold_s, all_good) in [(0.025, false), (0.25, true)] {
        let opts = RunOptions {
            goodput: vec![GoodputSlo::from_objectives(&[Objective::Latency {
                signal: LatencySignal::Ttft,
                percentile: 95.0,
                threshold_s,
            }])],
            ..RunOptions::default()
        };
        let rec = run_level_with(
            &t,
            &plans(ONE),
            LevelSpec {
                mode: LevelMode::Concurrency(4),
                warmup: Duration::from_millis(200),
                measure: Duration::from_millis(800),
                seed: 1,
            },
            CancellationFlag::new(),
            &opts,
        )
        .await;
        let c = &rec.classes[0];
        assert!(c.requests() >= 8, "{}", c.requests());
        let want = if all_good { c.requests() } else { 0 };
        assert_eq!(c.goodput, want, "TTFT threshold {threshold_s} s");
    }
}

/// A server error at the probe is retried and, after the last attempt, a note, not a stop: a
/// server whose error rate is to be measured must not refuse to be measured. A 4xx still stops
/// (above), and so does every status of the 4xx class here.
#[tokio::test]
async fn probe_retries_server_errors_and_stops_on_client_errors() {
    for (n, status) in [(1u64, 500u16), (3, 503), (100, 502)] {
        let stub = StubServer::start(StubConfig {
            fault: StubFault::FailFirst { n, status },
            ..StubConfig::default()
        })
        .unwrap();
        let t = Target::new(&stub.url(), None, None).unwrap();
        let info = probe(&t, &[Endpoint::Completions])
            .await
            .unwrap_or_else(|e| panic!("{n} × {status}: {e}"));
        assert_eq!(info.notes.len(), 1, "{:?}", info.notes);
        assert!(info.notes[0].contains("server error"), "{:?}", info.notes);
        let all = n >= 4;
        assert_eq!(info.notes[0].contains("(last:"), all, "{:?}", info.notes);
    }
    for status in [401u16, 404, 422] {
        let stub = StubServer::start(StubConfig {
            fault: StubFault::FailFirst { n: 1, status },
            ..StubConfig::default()
        })
        .unwrap();
        let t = Target::new(&stub.url(), None, None).unwrap();
        let e = probe(&t, &[Endpoint::Completions]).await.unwrap_err();
        assert!(
            matches!(e, ProbeError::FirstRequest { status: s, .. } if s == status),
            "{e}"
        );
    }
}

/// A closed loop of 4 users over `measure` after a 300 ms warm-up, against a stub streaming 10
/// tokens (TTFT 20 ms, ITL 10 ms) with `fault`.
async fn four_users(
    fault: StubFault,
    measure: Duration,
) -> headroom_load::recorder::LevelRecording {
    let stub = StubServer::start(StubConfig {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(10),
        fault,
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    run_level(
        &t,
        &plans(ONE),
        LevelMode::Concurrency(4),
        FOUR_USERS_WARMUP,
        measure,
        3,
        CancellationFlag::new(),
    )
    .await
}

const FOUR_USERS_WARMUP: Duration = Duration::from_millis(300);

/// A server frozen for 3 s of an 8 s closed-loop window with 4 users: the percentiles may pass,
/// but the level says the server went silent, when and for how long; the same level without the
/// freeze says nothing.
#[tokio::test]
async fn a_frozen_server_in_a_closed_loop_is_warned() {
    use headroom_load::runner::stall_warning;
    // The level starts as soon as the stub is up: the window opens after the warm-up.
    let window_start = Instant::now() + FOUR_USERS_WARMUP;
    let fault = StubFault::Freeze {
        from: window_start + Duration::from_secs(2),
        until: window_start + Duration::from_secs(5),
    };
    let rec = four_users(fault, Duration::from_secs(8)).await;
    let s = rec.longest_silence.expect("a silence");
    assert!((2.6..=3.1).contains(&s.len_s), "{s:?}");
    assert!((1.9..=2.4).contains(&s.from_s), "{s:?}");
    let w = stall_warning(&rec).expect("a stall warning");
    assert!(
        w.contains("went silent for") && w.contains("closed loop") && w.contains("{mode: rate}"),
        "{w}"
    );
    // It survives the recording's round trip (results.json carries the warning, the histogram
    // file the silence).
    let back: headroom_load::recorder::LevelRecording =
        serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
    assert_eq!(back.longest_silence, rec.longest_silence);

    let rec = four_users(StubFault::None, Duration::from_secs(2)).await;
    assert_eq!(stall_warning(&rec), None, "{:?}", rec.longest_silence);
}

/// Hostile streams end their requests as `protocol` and the level runs to its end: an endless
/// line on every request of a closed loop neither aborts the level nor the process.
#[tokio::test]
async fn a_hostile_server_fails_requests_not_the_level() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::EndlessLine,
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    let rec = run_level(
        &t,
        &plans(ONE),
        LevelMode::Concurrency(2),
        Duration::ZERO,
        Duration::from_millis(500),
        1,
        CancellationFlag::new(),
    )
    .await;
    let c = &rec.classes[0];
    assert!(c.requests() > 0);
    assert_eq!(c.outcomes.get(&Outcome::Protocol), Some(&c.requests()));
    assert!(c.examples["protocol"].contains("SSE line longer than"));
    assert_eq!(rec.aborted, None);
    assert!(!rec.interrupted);
}
