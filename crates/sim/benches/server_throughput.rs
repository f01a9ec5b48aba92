//! Throughput of the engine twin's HTTP server in zero-latency mode (`time_scale = 0`).
//!
//! The server runs on one thread (a current-thread tokio runtime); N client connections, each a
//! minimal hyper HTTP/1.1 client on a separate multi-thread runtime, stream completions back to
//! back for a fixed time. Printed: streams, tokens streamed per wall second, the server thread's
//! CPU seconds (from `/proc/self/task/<tid>/schedstat`) and tokens per server-CPU second, which
//! is the "on one core" figure of issue 3 (target: ≥ 2,000 concurrent streams and ≥ 200,000
//! streamed tokens/s).
//!
//! Run: `cargo bench -p headroom-sim --bench server_throughput` with optional environment
//! `STREAMS` (default 2000), `MAX_TOKENS` per request (default 200), `SECONDS` (default 10),
//! `CLIENT_THREADS` (default 2).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headroom_sim::SimSpec;
use headroom_sim::server::{ServerConfig, serve};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time of one thread of this process, seconds (`schedstat`'s first field is ns on CPU).
fn thread_cpu_s(tid: &str) -> f64 {
    let text =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e9)
}

/// CPU time of the whole process (utime + stime), seconds, assuming USER_HZ = 100.
fn process_cpu_s() -> f64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // Fields 14 and 15 of stat; `after` starts at field 3.
    (ticks(11) + ticks(12)) / 100.0
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

async fn client(
    addr: SocketAddr,
    max_tokens: u64,
    stop: Arc<AtomicBool>,
    tokens: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
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
    while !stop.load(Ordering::Relaxed) {
        let req = hyper::Request::post("/v1/completions")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let Ok(resp) = sender.send_request(req).await else {
            return;
        };
        let mut body = resp.into_body();
        let (mut events, mut nl) = (0u64, false);
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                let n = count_events(&data, &mut nl);
                events += n;
                tokens.fetch_add(n, Ordering::Relaxed);
            }
        }
        // The usage chunk and `[DONE]` are events too, not tokens.
        tokens.fetch_sub(events.min(2), Ordering::Relaxed);
        requests.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() {
    let streams = env_or("STREAMS", 2000);
    let max_tokens = env_or("MAX_TOKENS", 200);
    let seconds = env_or("SECONDS", 10);
    let client_threads = env_or("CLIENT_THREADS", 2) as usize;

    // Server thread: one core.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<(SocketAddr, String)>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let spec = SimSpec {
                time_scale: 0.0,
                max_num_seqs: Some(streams.max(1) as u32 + 48),
                max_num_batched_tokens: Some(32768),
                num_gpu_blocks_override: Some(
                    ((streams + 64) * (max_tokens + 32) / 16 + 1024) as u32,
                ),
                max_model_len: Some(4096),
                ..SimSpec::default()
            };
            let cfg = ServerConfig {
                port: 0,
                dcgm_port: Some(0),
                spec,
                ..ServerConfig::default()
            };
            let handle = serve(cfg).await.expect("server starts");
            let tid = std::fs::read_link("/proc/thread-self")
                .ok()
                .and_then(|p| p.file_name().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_default();
            addr_tx
                .send((handle.api_addr, tid))
                .expect("report address");
            let _ = stop_rx.await;
            handle.shutdown().await;
        });
    });
    let (addr, tid) = addr_rx.recv().expect("server address");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (wall, srv_cpu, proc_cpu, tok, reqs) = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..streams {
            tasks.push(tokio::spawn(client(
                addr,
                max_tokens,
                stop.clone(),
                tokens.clone(),
                requests.clone(),
            )));
        }
        // Warm-up: let every connection open and the first wave start.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (t0, c0, p0, k0, r0) = (
            Instant::now(),
            thread_cpu_s(&tid),
            process_cpu_s(),
            tokens.load(Ordering::Relaxed),
            requests.load(Ordering::Relaxed),
        );
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let (t1, c1, p1, k1, r1) = (
            Instant::now(),
            thread_cpu_s(&tid),
            process_cpu_s(),
            tokens.load(Ordering::Relaxed),
            requests.load(Ordering::Relaxed),
        );
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        ((t1 - t0).as_secs_f64(), c1 - c0, p1 - p0, k1 - k0, r1 - r0)
    });
    let _ = stop_tx.send(());
    let _ = server.join();

    let tps = tok as f64 / wall;
    println!(
        "server_throughput: zero-latency mode, {streams} concurrent streams, max_tokens {max_tokens}, {client_threads} client threads"
    );
    println!("  measured {wall:.2} s wall: {tok} tokens in {reqs} completed requests");
    println!("  streamed tokens/s (wall):          {tps:.0}");
    println!(
        "  server thread CPU:                 {srv_cpu:.2} s ({:.0} % of one core)",
        100.0 * srv_cpu / wall
    );
    println!(
        "  tokens per server CPU-second:      {:.0}",
        tok as f64 / srv_cpu
    );
    println!("  process CPU (server + clients):    {proc_cpu:.2} s");
}
