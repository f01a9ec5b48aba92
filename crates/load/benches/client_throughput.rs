//! Client throughput benchmark: is the load client ever what limits a measurement?
//!
//! Targets (issue 2): ≥ 2,000 concurrent streams and ≥ 200,000 SSE chunks/s on one core; client
//! CPU ≤ 5 µs per chunk; open-loop send lag p99 ≤ 1 ms at 500 requests/s.
//!
//! The server is `headroom_load::testkit::StubServer` on 127.0.0.1 in its own threads; the client
//! runs on a current-thread tokio runtime on the main thread (one core), so the main thread's CPU
//! time (`getrusage(RUSAGE_THREAD)`) is exactly the client's. Three runs:
//! 1. **flat out**: 2,000 streams, the stub sends chunks as fast as it can (many chunks per read);
//! 2. **paced**: 2,000 streams, the stub waits 10 ms between chunks, so 200,000 chunks/s are
//!    offered mostly one per read — the realistic worst case; also reports the client-observed ITL
//!    against the stub's 10 ms;
//! 3. **open loop**: 500 req/s Poisson through `runner::run_level`, printing the send lag.
//!
//! `cargo bench -p headroom-load --bench client_throughput`; environment: `BENCH_SECS` (seconds
//! per throughput run, default 10), `BENCH_STREAMS` (default 2000), `BENCH_SERVER_THREADS`
//! (default: cores − 1, at least 1), `BENCH_RUNS` (comma-separated subset of `parse,flat,paced,open`),
//! `BENCH_OPEN_ITL_MS` (stub ITL in the open-loop run, default 10), `BENCH_PACER_RT` (open-loop
//! pacer modes to compare: 1 asks for real-time priority, 0 does not; default `1,0`), `BENCH_OPEN_ROUNDS` (default 2).
//!
//! A fourth run, `fixed` (only when named in `BENCH_RUNS`), does a fixed amount of work instead of
//! running for a fixed time — `BENCH_STREAMS` streams each sending `BENCH_REQUESTS` requests of
//! `BENCH_TOKENS` tokens with the stub waiting `BENCH_ITL_MS` between chunks — and prints the
//! chunk count. Run under `valgrind --tool=callgrind --separate-threads=yes` at two request
//! counts, the difference of the main thread's instruction counts divided by the difference of
//! the chunk counts is the client's instructions per chunk, free of machine noise and of the
//! fixed cost of start-up; `crates/load/benches/client_instructions.sh` does exactly that.

use headroom_core::LatencySignal;
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::client::sse::{SseSplitter, StreamState};
use headroom_load::client::{CancellationFlag, ClientConfig, PreparedRequest, Target};
use headroom_load::prompt::{ClassPlan, DrawnRequest};
use headroom_load::recorder::ClassRecording;
use headroom_load::runner::{LevelSpec, RunOptions, process_cpu_s, run_level_with, thread_cpu_s};
use headroom_load::testkit::{StubConfig, StubServer};
use headroom_load::workload::{Endpoint, Workload};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Throughput {
    chunks: u64,
    requests: u64,
    secs: f64,
    cpu_s: f64,
    /// Of `cpu_s`, the part spent in the kernel (socket reads, epoll).
    sys_s: f64,
    rec: ClassRecording,
}

/// The calling thread's system (kernel) CPU time in seconds, from `getrusage(RUSAGE_THREAD)`.
fn thread_sys_s() -> f64 {
    // SAFETY: `getrusage` writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut ru) } != 0 {
        return 0.0;
    }
    ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 / 1e6
}

/// Keeps `streams` requests in flight for `secs` seconds; every request goes through the client
/// and the recorder, as in a sweep.
async fn drive(target: &Target, streams: usize, max_tokens: u32, secs: f64) -> Throughput {
    let req = PreparedRequest::encode(
        &DrawnRequest {
            class: 0,
            endpoint: Endpoint::Completions,
            prefix: Arc::from(""),
            prompt: "bench prompt".into(),
            requested_prompt_tokens: 2,
            max_tokens,
            ignore_eos: true,
        },
        Some("tiny"),
    );
    let chunks = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Mutex::new(ClassRecording::new("bench")));
    let cancel = CancellationFlag::new();
    // Open the connections first (not counted).
    let mut tasks = Vec::with_capacity(streams);
    let measuring = Arc::new(AtomicBool::new(false));
    for _ in 0..streams {
        let (t, req, chunks, requests, stop, rec, cancel, measuring) = (
            target.clone(),
            req.clone(),
            chunks.clone(),
            requests.clone(),
            stop.clone(),
            rec.clone(),
            cancel.clone(),
            measuring.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = t.send(&req, Instant::now(), &cancel).await;
                if measuring.load(Ordering::Relaxed) {
                    chunks.fetch_add(u64::from(r.sse_events), Ordering::Relaxed);
                    requests.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut g) = rec.lock() {
                        g.record(&r);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let cpu0 = thread_cpu_s();
    let sys0 = thread_sys_s();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu_s = thread_cpu_s() - cpu0;
    let sys_s = thread_sys_s() - sys0;
    measuring.store(false, Ordering::Relaxed);
    let n_chunks = chunks.load(Ordering::Relaxed);
    let n_requests = requests.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    cancel.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let rec = rec
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|_| ClassRecording::new("bench"));
    Throughput {
        chunks: n_chunks,
        requests: n_requests,
        secs,
        cpu_s,
        sys_s,
        rec,
    }
}

/// `streams` tasks each sending `requests` requests one after another; returns the SSE events
/// received and the successful requests.
async fn fixed(target: &Target, streams: usize, requests: u64, max_tokens: u32) -> (u64, u64) {
    let req = PreparedRequest::encode(
        &DrawnRequest {
            class: 0,
            endpoint: Endpoint::Completions,
            prefix: Arc::from(""),
            prompt: "bench prompt".into(),
            requested_prompt_tokens: 2,
            max_tokens,
            ignore_eos: true,
        },
        Some("tiny"),
    );
    let cancel = CancellationFlag::new();
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (t, req, cancel) = (target.clone(), req.clone(), cancel.clone());
        tasks.push(tokio::spawn(async move {
            let (mut chunks, mut ok) = (0u64, 0u64);
            for _ in 0..requests {
                let r = t.send(&req, Instant::now(), &cancel).await;
                chunks += u64::from(r.sse_events);
                ok += u64::from(r.outcome.is_success());
            }
            (chunks, ok)
        }));
    }
    let (mut chunks, mut ok) = (0, 0);
    for t in tasks {
        if let Ok((c, o)) = t.await {
            chunks += c;
            ok += o;
        }
    }
    (chunks, ok)
}

fn report(name: &str, t: &Throughput) {
    println!(
        "{name}: {:.0} chunks/s ({} chunks, {} requests in {:.1} s); client CPU {:.2} s = {:.0} % of one core, {:.2} µs per chunk ({:.2} µs of it in the kernel)",
        t.chunks as f64 / t.secs,
        t.chunks,
        t.requests,
        t.secs,
        t.cpu_s,
        t.cpu_s / t.secs * 100.0,
        t.cpu_s * 1e6 / t.chunks.max(1) as f64,
        t.sys_s * 1e6 / t.chunks.max(1) as f64
    );
}

fn main() {
    headroom_core::fd_limit::fd_limit();
    let secs = env_u64("BENCH_SECS", 10) as f64;
    let streams = env_u64("BENCH_STREAMS", 2000) as usize;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let server_threads = env_u64(
        "BENCH_SERVER_THREADS",
        (cores.saturating_sub(1)).max(1) as u64,
    ) as usize;
    println!(
        "client: 1 thread (current-thread runtime); stub server: {server_threads} threads; {cores} cores; {streams} streams; {secs} s per run"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config = ClientConfig {
        request_timeout: Duration::from_secs(120),
        ..ClientConfig::default()
    };

    let runs = std::env::var("BENCH_RUNS").unwrap_or_else(|_| "parse,flat,paced,open".into());
    let run = |name: &str| runs.split(',').any(|r| r.trim() == name);

    // 0. parser alone: one vLLM-shaped content event per frame, timestamp + split + decode
    if run("parse") {
        let frame: &[u8] = b"data: {\"id\":\"cmpl-a45c0e7e312ccb17\",\"object\":\"text_completion\",\"created\":1795969814,\"model\":\"tiny\",\"choices\":[{\"index\":0,\"text\":\"char\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null,\"prompt_token_ids\":null,\"token_ids\":null}]}\n\n";
        let n = 2_000_000u64;
        let mut sp = SseSplitter::new();
        let mut st = StreamState::default();
        let start = Instant::now();
        let cpu0 = thread_cpu_s();
        for i in 0..n {
            if i % 1000 == 0 {
                st.reset();
            }
            let t = start.elapsed().as_nanos() as u64;
            sp.feed(frame, &mut |ev| st.on_event(ev, t));
        }
        let cpu = thread_cpu_s() - cpu0;
        println!(
            "parse only: {:.3} µs per chunk (Instant::now + SSE split + JSON decode of a {}-byte vLLM chunk)",
            cpu * 1e6 / n as f64,
            frame.len()
        );
    }

    // fixed work, for instruction counting (see the header)
    if run("fixed") {
        let itl = env_u64("BENCH_ITL_MS", 20);
        let stub = StubServer::start(StubConfig {
            threads: server_threads,
            itl: Duration::from_millis(itl),
            ..StubConfig::default()
        })
        .expect("stub server");
        let target =
            Target::with_config(&stub.url(), None, Some("tiny"), config.clone()).expect("target");
        let (requests, tokens) = (env_u64("BENCH_REQUESTS", 2), env_u64("BENCH_TOKENS", 100));
        let (chunks, ok) = rt.block_on(fixed(&target, streams, requests, tokens as u32));
        println!(
            "fixed: {chunks} chunks, {ok} successful requests ({streams} streams × {requests} requests × {tokens} tokens, stub ITL {itl} ms)"
        );
        drop(target);
        drop(stub);
    }

    // 1. flat out
    if run("flat") {
        let stub = StubServer::start(StubConfig {
            threads: server_threads,
            ..StubConfig::default()
        })
        .expect("stub server");
        let target =
            Target::with_config(&stub.url(), None, Some("tiny"), config.clone()).expect("target");
        let t = rt.block_on(drive(&target, streams, 200, secs));
        report("flat out (stub as fast as it can, 200 tokens/request)", &t);
        drop(target);
        drop(stub);
    }

    // 2. paced: 10 ms between chunks per stream
    if run("paced") {
        let stub = StubServer::start(StubConfig {
            threads: server_threads,
            itl: Duration::from_millis(10),
            ..StubConfig::default()
        })
        .expect("stub server");
        let target =
            Target::with_config(&stub.url(), None, Some("tiny"), config.clone()).expect("target");
        let t = rt.block_on(drive(&target, streams, 100, secs));
        report("paced (stub ITL 10 ms, 100 tokens/request)", &t);
        let ms = |ns: Option<u64>| ns.map_or(f64::NAN, |v| v as f64 / 1e6);
        println!(
            "paced: client-observed ITL p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms (stub sends every 10 ms)",
            ms(t.rec.percentile_ns(LatencySignal::Itl, 50.0)),
            ms(t.rec.percentile_ns(LatencySignal::Itl, 99.0)),
            ms(t.rec.percentile_ns(LatencySignal::Itl, 99.9)),
        );
        drop(target);
        drop(stub);
    }

    // 3. open loop at 500 req/s through the runner
    if !run("open") {
        return;
    }
    let open_itl_ms = env_u64("BENCH_OPEN_ITL_MS", 10);
    let stub = StubServer::start(StubConfig {
        threads: server_threads,
        itl: Duration::from_millis(open_itl_ms),
        ..StubConfig::default()
    })
    .expect("stub server");
    let target = Target::with_config(&stub.url(), None, Some("tiny"), config).expect("target");
    let w = Workload::parse(
        "load: {mode: rate}\nclasses:\n  - {name: bench, endpoint: chat, shared_prefix_tokens: 200, prompt_tokens: {uniform: {min: 40, max: 60}}, max_tokens: {uniform: {min: 50, max: 150}}, ignore_eos: true}\n",
        Path::new("bench.yaml"),
        Path::new("."),
    )
    .expect("bench workload");
    let plans = ClassPlan::from_workload(&w, None).expect("plans");
    // The pacer with and without real-time priority, alternating in this one run so both see
    // the same machine (`BENCH_PACER_RT`: comma-separated 1/0, default "1,0").
    let modes: Vec<bool> = std::env::var("BENCH_PACER_RT")
        .unwrap_or_else(|_| "1,0".into())
        .split(',')
        .map(|v| v.trim() == "1")
        .collect();
    let rounds = env_u64("BENCH_OPEN_ROUNDS", 2);
    for round in 0..rounds {
        for &want_rt in &modes {
            let opts = RunOptions {
                pacer_realtime: want_rt,
                ..RunOptions::default()
            };
            let cpu0 = thread_cpu_s();
            let pcpu0 = process_cpu_s();
            let rec = rt.block_on(run_level_with(
                &target,
                &plans,
                LevelSpec {
                    mode: LevelMode::Rate {
                        rate_per_s: 500.0,
                        arrival: ArrivalProcess::Poisson,
                        max_concurrency: None,
                    },
                    warmup: Duration::from_secs(2),
                    measure: Duration::from_secs_f64(secs),
                    seed: 7 + round,
                },
                CancellationFlag::new(),
                &opts,
            ));
            let cpu = thread_cpu_s() - cpu0;
            let pcpu = process_cpu_s() - pcpu0;
            let c = rec.total();
            let q = |p: f64| c.send_lag.value_at_quantile(p) as f64 / 1e6;
            println!(
                "open loop 500 req/s Poisson, pacer real-time priority asked: {want_rt} (round {}; 50–150 tokens at {open_itl_ms} ms ITL, ≈{:.0} streams in flight by Little's law): {} requests started in {:.1} s window; send lag p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms (of which the pacer thread woke late by p99 {:.3} ms; pacer real-time priority: {}); outcomes {:?}; client thread CPU {:.2} s, process CPU {:.2} s (with the stub) over {:.1} s",
                round + 1,
                500.0 * c.e2e.mean() / 1e9,
                rec.started,
                rec.window_s,
                q(0.50),
                q(0.99),
                q(0.999),
                c.send_lag.max() as f64 / 1e6,
                rec.client.pacer_late_p99_ns as f64 / 1e6,
                rec.client.pacer_realtime,
                c.outcome_labels(),
                cpu,
                pcpu,
                rec.client.wall_s
            );
        }
    }
}
