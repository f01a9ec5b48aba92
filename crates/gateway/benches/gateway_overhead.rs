//! What the gateway adds, measured side by side with the direct path in one run.
//!
//! Setup (all loopback): the engine twin on its own thread (current-thread runtime, step times
//! scaled by `TIME_SCALE`, batch and KV pool large enough that `STREAMS` requests run at once);
//! the gateway in a **child process** (this binary re-run with `HEADROOM_GW_BENCH_UPSTREAM` set,
//! `GW_THREADS` tokio workers) so its CPU time and RSS are its own; `STREAMS` closed-loop client
//! connections (minimal hyper HTTP/1.1, one stream each, back to back) on a 2-worker runtime.
//!
//! Phases, each `SECONDS` long after a 2 s warm-up, alternating `ROUNDS` times: direct (client →
//! twin), then through the gateway (client → gateway → twin). Printed per phase: requests, SSE
//! events and body frames received, TTFT p50/p90/p99/max (send → first body frame; every request
//! of a completions stream starts with a content chunk). For gateway phases also the gateway
//! process's CPU time over the phase per forwarded SSE event and per frame, and its RSS while the
//! streams are open minus its RSS idle before the phase, divided by `STREAMS`.
//!
//! The added TTFT p99 is the gateway phase's p99 minus the direct phase's p99 of the same round.
//!
//! Run: `cargo bench -p headroom-gateway --bench gateway_overhead`; environment `STREAMS`
//! (default 1000), `MAX_TOKENS` (default 64), `SECONDS` (default 8), `TIME_SCALE` (default 0.05),
//! `ROUNDS` (default 1), `GW_THREADS` (default 1).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headroom_sim::SimSpec;
use headroom_sim::server::{ServerConfig, serve};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

const CHILD_ENV: &str = "HEADROOM_GW_BENCH_UPSTREAM";

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The gateway child: serve until stdin closes.
fn child(upstream: &str) {
    let threads = env_or("GW_THREADS", 1.0) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let cfg = headroom_gateway::GatewayConfig::simple(
            "127.0.0.1:0".parse().expect("addr"),
            &[upstream],
        )
        .expect("config");
        let h = headroom_gateway::start(cfg).await.expect("gateway starts");
        println!("{}", h.addr);
        let _ = std::io::stdout().flush();
        let _ = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await;
        h.shutdown().await;
    });
}

/// (CPU seconds, RSS bytes) of process `pid` from /proc (utime + stime at USER_HZ = 100).
fn proc_cpu_rss(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let cpu = (tick(11) + tick(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    (cpu, rss_kb * 1024.0)
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    frames: AtomicU64,
    requests: AtomicU64,
    open: AtomicU64,
}

fn count_events(chunk: &[u8], prev_newline: &mut bool) -> u64 {
    let mut n = 0;
    for &b in chunk {
        if b == b'\n' {
            if *prev_newline {
                n += 1;
            }
            *prev_newline = true;
        } else {
            *prev_newline = false;
        }
    }
    n
}

async fn stream_loop(
    addr: SocketAddr,
    max_tokens: u64,
    stop: Arc<AtomicBool>,
    record: Arc<AtomicBool>,
    c: Arc<Counters>,
    ttft: Arc<Mutex<Vec<u64>>>,
) {
    let body = Bytes::from(format!(
        r#"{{"prompt":"benchmark prompt of eight words in total","max_tokens":{max_tokens},"ignore_eos":true,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    ));
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
    else {
        return;
    };
    tokio::spawn(conn);
    let mut mine = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let req = hyper::Request::post("/v1/completions")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let t0 = Instant::now();
        let Ok(resp) = sender.send_request(req).await else {
            break;
        };
        c.open.fetch_add(1, Ordering::Relaxed);
        let mut body = resp.into_body();
        let mut first = true;
        let mut nl = false;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                if first {
                    first = false;
                    if record.load(Ordering::Relaxed) {
                        mine.push(t0.elapsed().as_nanos() as u64);
                    }
                }
                if record.load(Ordering::Relaxed) {
                    c.frames.fetch_add(1, Ordering::Relaxed);
                    c.events
                        .fetch_add(count_events(&data, &mut nl), Ordering::Relaxed);
                }
            }
        }
        c.open.fetch_sub(1, Ordering::Relaxed);
        if record.load(Ordering::Relaxed) {
            c.requests.fetch_add(1, Ordering::Relaxed);
        }
    }
    ttft.lock().expect("lock").extend(mine);
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1] as f64 / 1e6
}

struct Phase {
    ttft_ms: [f64; 4],
    requests: u64,
    events: u64,
    frames: u64,
    cpu_s: f64,
    rss_delta: f64,
}

#[allow(clippy::too_many_arguments)]
fn run_phase(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    streams: u64,
    max_tokens: u64,
    seconds: f64,
    child: Option<u32>,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(AtomicBool::new(false));
    let c = Arc::new(Counters::default());
    let ttft = Arc::new(Mutex::new(Vec::new()));
    let idle = child.map(proc_cpu_rss);
    let (cpu0, cpu1, rss_open) = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..streams {
            tasks.push(tokio::spawn(stream_loop(
                addr,
                max_tokens,
                stop.clone(),
                record.clone(),
                c.clone(),
                ttft.clone(),
            )));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        record.store(true, Ordering::Relaxed);
        let cpu0 = child.map(|p| proc_cpu_rss(p).0);
        // Sample RSS mid-window, when the streams are open.
        tokio::time::sleep(Duration::from_secs_f64(seconds / 2.0)).await;
        let rss_open = child.map(|p| proc_cpu_rss(p).1);
        tokio::time::sleep(Duration::from_secs_f64(seconds / 2.0)).await;
        record.store(false, Ordering::Relaxed);
        let cpu1 = child.map(|p| proc_cpu_rss(p).0);
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
        }
        (cpu0, cpu1, rss_open)
    });
    let mut v = std::mem::take(&mut *ttft.lock().expect("lock"));
    v.sort_unstable();
    Phase {
        ttft_ms: [pct(&v, 50.0), pct(&v, 90.0), pct(&v, 99.0), pct(&v, 100.0)],
        requests: c.requests.load(Ordering::Relaxed),
        events: c.events.load(Ordering::Relaxed),
        frames: c.frames.load(Ordering::Relaxed),
        cpu_s: match (cpu0, cpu1) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        },
        rss_delta: match (idle, rss_open) {
            (Some((_, a)), Some(b)) => b - a,
            _ => f64::NAN,
        },
    }
}

fn main() {
    if let Ok(up) = std::env::var(CHILD_ENV) {
        child(&up);
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs us too: keep that short.
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let streams = env_or("STREAMS", if quick { 20.0 } else { 1000.0 }) as u64;
    let max_tokens = env_or("MAX_TOKENS", 64.0) as u64;
    let seconds = env_or("SECONDS", if quick { 1.0 } else { 8.0 });
    let time_scale = env_or("TIME_SCALE", 0.05);
    let rounds = env_or("ROUNDS", 1.0) as u64;

    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let twin = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let spec = SimSpec {
                time_scale,
                max_num_seqs: Some(streams as u32 + 64),
                max_num_batched_tokens: Some(32768),
                num_gpu_blocks_override: Some(
                    ((streams + 64) * (max_tokens + 48) / 16 + 1024) as u32,
                ),
                max_model_len: Some(4096),
                ..SimSpec::default()
            };
            let h = serve(ServerConfig {
                port: 0,
                dcgm_port: Some(0),
                spec,
                ..ServerConfig::default()
            })
            .await
            .expect("twin starts");
            addr_tx.send(h.api_addr).expect("report address");
            let _ = stop_rx.await;
            h.shutdown().await;
        });
    });
    let twin_addr = addr_rx.recv().expect("twin address");

    let mut gw = Command::new(std::env::current_exe().expect("own path"))
        .env(CHILD_ENV, format!("http://{twin_addr}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gateway child starts");
    let gw_pid = gw.id();
    let mut line = String::new();
    BufReader::new(gw.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("gateway address");
    let gw_addr: SocketAddr = line.trim().parse().expect("gateway address");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "gateway_overhead: {streams} concurrent streams, max_tokens {max_tokens}, {seconds} s per phase, twin time_scale {time_scale}, gateway child pid {gw_pid}"
    );
    println!(
        "{:<8} {:>9} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>12}",
        "path",
        "requests",
        "events",
        "frames",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "µs/event",
        "µs/frame",
        "KiB/stream"
    );
    for round in 0..rounds {
        let d = run_phase(&rt, twin_addr, streams, max_tokens, seconds, None);
        let g = run_phase(&rt, gw_addr, streams, max_tokens, seconds, Some(gw_pid));
        for (name, p) in [("direct", &d), ("gateway", &g)] {
            println!(
                "{:<8} {:>9} {:>10} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>11.3} {:>11.3} {:>12.1}",
                name,
                p.requests,
                p.events,
                p.frames,
                p.ttft_ms[0],
                p.ttft_ms[1],
                p.ttft_ms[2],
                p.ttft_ms[3],
                p.cpu_s * 1e6 / p.events as f64,
                p.cpu_s * 1e6 / p.frames as f64,
                p.rss_delta / streams as f64 / 1024.0,
            );
        }
        println!(
            "round {round}: added TTFT p50 {:+.2} ms, p99 {:+.2} ms; gateway CPU {:.3} s over the phase",
            g.ttft_ms[0] - d.ttft_ms[0],
            g.ttft_ms[2] - d.ttft_ms[2],
            g.cpu_s
        );
    }
    drop(gw.stdin.take());
    let _ = gw.wait();
    let _ = stop_tx.send(());
    let _ = twin.join();
}
