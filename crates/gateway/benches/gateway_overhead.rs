//! What the gateway adds, measured side by side with the direct path in one run.
//!
//! Setup (all loopback): the engine twin on its own thread (current-thread runtime, step times
//! scaled by `TIME_SCALE`, batch and KV pool large enough that every stream runs at once); two
//! **child processes** (this binary re-run), so their CPU time and RSS are their own: the
//! gateway (`GW_THREADS` tokio workers) and a bare TCP relay (one worker, `copy_bidirectional`
//! per connection, `TCP_NODELAY` both ways) that does nothing but read and write each chunk —
//! the floor any user-space proxy pays on this machine. Clients: closed-loop streams (minimal
//! hyper HTTP/1.1, one connection each, back to back) on a 2-worker runtime.
//!
//! For each concurrency `n` in `STREAMS`, three phases, each measuring `SECONDS` after a
//! warm-up that lasts at least 2 s and until every stream has finished its first request (the
//! first requests all start at once; a proxied path opens its upstream connections in that
//! burst, so before every stream has gone round once the phases are not comparable: measured
//! without this, the start-up cohort alone gave the proxied phases +600 ms of TTFT):
//! 1. `direct`: `n` streams to the twin;
//! 2. `relay`: `n` streams through the bare relay (CPU floor);
//! 3. `gateway`: `n` streams through the gateway **and, at the same time**, `WITNESS` streams
//!    straight to the twin (`witness`). The witnesses share the twin's batches, the client
//!    runtime and the machine's load with the gateway streams, so the gateway's p99 minus the
//!    witnesses' p99 is the TTFT the gateway path adds, free of the twin's step-to-step noise.
//!
//! Printed per phase: requests finished, TTFT samples (requests *sent* in the window), SSE events
//! and body frames received, TTFT p50/p90/p99/max (send → first body frame; every request of a
//! completions stream starts with a content chunk), and the **path's share** of TTFT, p50 and
//! p99: each request carries an `X-Request-Id`, the twin's
//! [`headroom_sim::server::FirstChunkProbe`] records when its handler had the request and when
//! the first chunk went to hyper, and the path share is the client's TTFT minus that engine
//! span. The engine's share (queueing, and where in a step the request landed, up to a whole
//! step) cancels per request, so the gateway's added latency is resolved to microseconds instead
//! of being lost in step-to-step noise of tens of milliseconds. The path share includes the
//! client's own stack and its queueing behind the other streams' chunks of the same step. For
//! the relay and the gateway also the child's CPU over the phase (utime and stime from
//! `/proc/PID/stat`) per SSE event, split into user and kernel time (on loopback a write also
//! pays for the receiving socket's TCP processing), its RSS while the streams are open minus its
//! RSS before the phase per stream, and how long its threads waited for a CPU (run delay from
//! `/proc/PID/task/*/schedstat`, ms per s of wall time). For the gateway also its event-loop lag
//! (every 1 ms a probe task in the child yields and times how long it waits to run again, p99) and its own per-request overhead
//! from its `/metrics` (`headroom_gateway_overhead_seconds`: the share within 0.5 ms and the
//! bucket holding the p99). The gateway's CPU per event is printed gross (everything the child
//! process spent) and net of its idle cost: the probe and timers keep an idle child busy for
//! ~1.7 % of a core, which at 10–20k events/s is 1–2 µs per event; that rate is measured while
//! the child is idle (during the direct phase) and subtracted. User-space instructions per
//! event, free of machine noise, come from `benches/gateway_instructions.sh` (the fixed-work
//! mode below under callgrind). The machine's state (`/proc/stat` busy share of all cores, load
//! average) is printed with each phase: the TTFT figures only mean what they say when the
//! machine is not saturated.
//!
//! Run: `cargo bench -p headroom-gateway --bench gateway_overhead`; environment `STREAMS`
//! (comma list, default `100,1000`), `WITNESS` (default 100), `MAX_TOKENS` (default 64; each request draws from half to 1.5 times it),
//! `SECONDS` (default 8), `TIME_SCALE` (default 0.25: the default preset's step at 1,000
//! running sequences is ~200 ms, so ~50 ms ITL, ~20k chunks/s, like a large GPU), `ROUNDS` (default 1),
//! `GW_THREADS` (default 1). `FIXED_REQUESTS=N` switches to the fixed-work mode of
//! [`fixed_run`] (see `gateway_instructions.sh`).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headroom_sim::SimSpec;
use headroom_sim::server::{ServerConfig, serve};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;

const GATEWAY_ENV: &str = "HEADROOM_GW_BENCH_UPSTREAM";
const RELAY_ENV: &str = "HEADROOM_GW_BENCH_RELAY";
/// Set for a child of a fixed-work run (see [`fixed_run`]).
const FIXED_ENV: &str = "HEADROOM_GW_BENCH_FIXED";

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Event-loop delays measured in the child (see [`lag_probe`]), nanoseconds, since the last
/// report.
type Lags = Arc<Mutex<Vec<u64>>>;

/// Every millisecond, how long a task that becomes ready waits to run again: `yield_now`
/// queues it behind every task already runnable and one turn of the I/O driver, which is what
/// a stream whose upstream bytes just arrived waits for (CPU starvation by the OS included).
fn lag_probe(lags: Lags) {
    tokio::spawn(async move {
        let mut mine = Vec::with_capacity(1024);
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let t = Instant::now();
            tokio::task::yield_now().await;
            mine.push(t.elapsed().as_nanos() as u64);
            if mine.len() >= 256 {
                lags.lock().expect("lock").append(&mut mine);
            }
        }
    });
}

/// Serves the child's stdin protocol: `lag` → one line `p50_us p99_us max_us` of the probe
/// since the last `lag`; end of input → return.
fn command_loop(lags: &Lags) {
    let stdin = std::io::stdin();
    let mut line = String::new();
    while stdin.lock().read_line(&mut line).is_ok_and(|n| n > 0) {
        if line.trim() == "lag" {
            let mut v = std::mem::take(&mut *lags.lock().expect("lock"));
            v.sort_unstable();
            let q = |p: f64| pct(&v, p) * 1e3;
            println!("{:.1} {:.1} {:.1}", q(50.0), q(99.0), q(100.0));
            let _ = std::io::stdout().flush();
        }
        line.clear();
    }
}

fn child_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("runtime")
}

/// The gateway child: serve until stdin closes.
fn gateway_child(upstream: &str) {
    let rt = child_runtime(env_or("GW_THREADS", 1.0) as usize);
    rt.block_on(async {
        let cfg = headroom_gateway::GatewayConfig::simple(
            "127.0.0.1:0".parse().expect("addr"),
            &[upstream],
        )
        .expect("config");
        let h = headroom_gateway::start(cfg).await.expect("gateway starts");
        let lags = Lags::default();
        // A fixed-work run counts instructions: a probe that runs by the clock would add work
        // that depends on how long the run took.
        if std::env::var_os(FIXED_ENV).is_none() {
            lag_probe(lags.clone());
        }
        println!("{}", h.addr);
        let _ = std::io::stdout().flush();
        let _ = tokio::task::spawn_blocking(move || command_loop(&lags)).await;
        h.shutdown().await;
    });
}

/// The relay child: a bare TCP relay to `upstream` until stdin closes.
fn relay_child(upstream: &str) {
    let upstream: SocketAddr = upstream.parse().expect("relay upstream");
    let rt = child_runtime(1);
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("relay binds");
        println!("{}", l.local_addr().expect("addr"));
        let _ = std::io::stdout().flush();
        tokio::spawn(async move {
            while let Ok((mut down, _)) = l.accept().await {
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = down.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                });
            }
        });
        let lags = Lags::default();
        let _ = tokio::task::spawn_blocking(move || command_loop(&lags)).await;
    });
}

/// Per-process figures from /proc: user and system CPU seconds (USER_HZ = 100), RSS bytes, and
/// the run delay (time runnable but waiting for a CPU) summed over its threads, seconds.
#[derive(Debug, Clone, Copy, Default)]
struct ProcStat {
    utime_s: f64,
    stime_s: f64,
    rss: f64,
    run_delay_s: f64,
}

fn proc_stat(pid: u32) -> ProcStat {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / 100.0
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let mut run_delay_ns = 0.0;
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in dir.flatten() {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            run_delay_ns += s
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    ProcStat {
        utime_s: tick(11),
        stime_s: tick(12),
        rss: rss_kb * 1024.0,
        run_delay_s: run_delay_ns / 1e9,
    }
}

/// (busy, total) jiffies of all cores from /proc/stat.
fn machine_jiffies() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    (total - idle, total)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    frames: AtomicU64,
    requests: AtomicU64,
    /// Streams that have finished at least one request (the warm-up waits for all of them).
    settled: AtomicU64,
    ttft: Mutex<Vec<u64>>,
    /// Requests sent inside the window: (request id, send, first byte), for [`path_ms`].
    sent: Mutex<Vec<(u64, Instant, Instant)>>,
}

/// Request ids the client puts in `X-Request-Id`, unique over the whole run.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What the twin's [`headroom_sim::server::FirstChunkProbe`] saw, by request id: (handler had
/// the request, first chunk handed to hyper).
static ENGINE_SIDE: std::sync::LazyLock<Mutex<std::collections::HashMap<u64, (Instant, Instant)>>> =
    std::sync::LazyLock::new(Mutex::default);

/// The path's share of each TTFT, sorted, ns: (first byte − send) − (first chunk − received).
/// The engine's share (queueing, where in a step the request landed) cancels per request, so
/// what is left is client stack, kernel, proxy and the twin's HTTP layer. Requests the probe
/// did not see (none, normally) are left out.
fn path_ns(sent: &[(u64, Instant, Instant)]) -> Vec<u64> {
    let engine = ENGINE_SIDE.lock().expect("lock");
    let mut v: Vec<u64> = sent
        .iter()
        .filter_map(|(id, send, first)| {
            let (received, chunk) = engine.get(id)?;
            let client = first.saturating_duration_since(*send);
            Some(
                client
                    .saturating_sub(chunk.saturating_duration_since(*received))
                    .as_nanos() as u64,
            )
        })
        .collect();
    v.sort_unstable();
    v
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

/// One closed-loop stream of at most `limit` requests. Each request asks for a length drawn uniformly from
/// `[max_tokens / 2, 3 × max_tokens / 2]` (xorshift seeded by `seed`): with equal lengths every
/// stream would finish and restart in lockstep, and a request arriving a microsecond later than
/// its cohort would wait a whole engine step, which measures the twin's batching, not the path.
async fn stream_loop(
    addr: SocketAddr,
    max_tokens: u64,
    seed: u64,
    limit: u64,
    stop: Arc<AtomicBool>,
    record: Arc<AtomicBool>,
    c: Arc<Counters>,
) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next_len = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (max_tokens / 2 + x % (max_tokens + 1)).max(1)
    };
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
    let mut mine_sent = Vec::new();
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) && sent < limit {
        sent += 1;
        let body = Bytes::from(format!(
            r#"{{"prompt":"benchmark prompt of eight words in total","max_tokens":{},"ignore_eos":true,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
            next_len()
        ));
        let req = hyper::Request::post("/v1/completions")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("request");
        // Only requests sent inside the window count for TTFT: a request sent during the
        // warm-up whose first byte lands in the window belongs to the start-up transient.
        let sent_in_window = record.load(Ordering::Relaxed);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let req = {
            let mut req = req;
            req.headers_mut()
                .insert("x-request-id", hyper::header::HeaderValue::from(id));
            req
        };
        let t0 = Instant::now();
        let Ok(resp) = sender.send_request(req).await else {
            break;
        };
        let mut body = resp.into_body();
        let mut first = true;
        let mut nl = false;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                if first {
                    first = false;
                    if sent_in_window {
                        let now = Instant::now();
                        mine.push((now - t0).as_nanos() as u64);
                        mine_sent.push((id, t0, now));
                    }
                }
                if record.load(Ordering::Relaxed) {
                    c.frames.fetch_add(1, Ordering::Relaxed);
                    c.events
                        .fetch_add(count_events(&data, &mut nl), Ordering::Relaxed);
                }
            }
        }
        if record.load(Ordering::Relaxed) {
            c.requests.fetch_add(1, Ordering::Relaxed);
        }
        if sent == 1 {
            c.settled.fetch_add(1, Ordering::Relaxed);
        }
    }
    c.ttft.lock().expect("lock").extend(mine);
    c.sent.lock().expect("lock").extend(mine_sent);
}

/// `p`-th percentile (nearest rank) of sorted nanoseconds, in milliseconds.
fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1] as f64 / 1e6
}

/// What the client side saw of one group of streams.
struct Seen {
    /// TTFT samples: requests sent inside the window.
    samples: usize,
    ttft_ms: [f64; 4],
    mean_ms: f64,
    /// The path's share of TTFT (see [`path_ns`]): p50, p99, max and mean, µs.
    path_us: [f64; 4],
    requests: u64,
    events: u64,
    frames: u64,
}

impl Seen {
    fn of(c: &Counters) -> Seen {
        let mut v = std::mem::take(&mut *c.ttft.lock().expect("lock"));
        v.sort_unstable();
        let p = path_ns(&std::mem::take(&mut *c.sent.lock().expect("lock")));
        let mean = p.iter().map(|x| *x as f64).sum::<f64>() / p.len() as f64 / 1e3;
        Seen {
            path_us: [
                pct(&p, 50.0) * 1e3,
                pct(&p, 99.0) * 1e3,
                pct(&p, 100.0) * 1e3,
                mean,
            ],
            samples: v.len(),
            ttft_ms: [pct(&v, 50.0), pct(&v, 90.0), pct(&v, 99.0), pct(&v, 100.0)],
            mean_ms: v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64 / 1e6,
            requests: c.requests.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            frames: c.frames.load(Ordering::Relaxed),
        }
    }
}

/// A child process (gateway or relay) and its stdin/stdout protocol.
struct ChildProc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl ChildProc {
    /// This binary as the child named by `env`, run under the command line `wrap` (e.g.
    /// `valgrind --tool=callgrind`) when given; `fixed` marks a child of a fixed-work run.
    fn spawn(env: &str, upstream: String, wrap: Option<&str>, fixed: bool) -> ChildProc {
        let exe = std::env::current_exe().expect("own path");
        let mut cmd = match wrap.map(str::split_whitespace) {
            Some(mut w) => {
                let mut c = Command::new(w.next().expect("CHILD_WRAP names a program"));
                c.args(w).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        if fixed {
            cmd.env(FIXED_ENV, "1");
        }
        let mut child = cmd
            .env(env, upstream)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child starts");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("child address");
        let addr = line.trim().parse().expect("child address");
        ChildProc {
            child,
            stdin,
            stdout,
            addr,
        }
    }

    /// The event-loop lag since the last call: (p50, p99, max) in µs.
    fn lag_us(&mut self) -> [f64; 3] {
        let _ = writeln!(self.stdin, "lag");
        let _ = self.stdin.flush();
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        let mut v = line
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(f64::NAN));
        [(); 3].map(|()| v.next().unwrap_or(f64::NAN))
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

/// Cumulative `headroom_gateway_overhead_seconds` buckets summed over every label set, by `le`.
async fn overhead_buckets(addr: SocketAddr) -> Vec<(f64, f64)> {
    let text = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .ok()?;
        tokio::spawn(conn);
        let req = hyper::Request::get("/metrics")
            .header("host", "127.0.0.1")
            .body(Empty::<Bytes>::new())
            .ok()?;
        let body = s.send_request(req).await.ok()?.into_body();
        let b = body.collect().await.ok()?.to_bytes();
        String::from_utf8(b.to_vec()).ok()
    }
    .await
    .unwrap_or_default();
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("headroom_gateway_overhead_seconds_bucket{") else {
            continue;
        };
        let le = rest
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(|x| {
                if x == "+Inf" {
                    f64::INFINITY
                } else {
                    x.parse().unwrap_or(f64::NAN)
                }
            });
        let n = l.rsplit(' ').next().and_then(|x| x.parse::<f64>().ok());
        if let (Some(le), Some(n)) = (le, n) {
            match by_le.iter_mut().find(|(b, _)| *b == le) {
                Some((_, c)) => *c += n,
                None => by_le.push((le, n)),
            }
        }
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    by_le
}

/// Share of the observations within 0.5 ms, and the upper bound (ms) of the bucket holding the
/// p99, from the difference of two cumulative bucket scrapes.
fn overhead_summary(before: &[(f64, f64)], after: &[(f64, f64)]) -> (f64, f64, f64) {
    let d: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, n - b)
        })
        .collect();
    let total = d.last().map_or(0.0, |(_, n)| *n);
    let within = d
        .iter()
        .find(|(le, _)| (*le - 0.0005).abs() < 1e-12)
        .map_or(f64::NAN, |(_, n)| n / total);
    let p99_le = d
        .iter()
        .find(|(_, n)| *n >= 0.99 * total)
        .map_or(f64::NAN, |(le, _)| le * 1e3);
    (total, within, p99_le)
}

/// What a phase measured: the main streams, the witnesses (gateway phase only), and the child.
struct Phase {
    main: Seen,
    witness: Option<Seen>,
    child: Option<(ProcStat, ProcStat, f64)>, // (at record start, at record end, RSS while open)
    wall_s: f64,
    machine_busy: f64,
    load: String,
    lag_us: Option<[f64; 3]>,
    overhead: Option<(f64, f64, f64)>,
}

struct PhaseSpec {
    addr: SocketAddr,
    streams: u64,
    witness: Option<(SocketAddr, u64)>,
    max_tokens: u64,
    seconds: f64,
}

fn run_phase(
    rt: &tokio::runtime::Runtime,
    spec: &PhaseSpec,
    mut child: Option<&mut ChildProc>,
    metrics: bool,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(AtomicBool::new(false));
    let main = Arc::new(Counters::default());
    let wit = Arc::new(Counters::default());
    let pid = child.as_ref().map(|c| c.child.id());
    let idle = pid.map(proc_stat);
    let mut lag = None;
    let (s0, s1, rss_open, m0, m1, wall, before, after) = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..spec.streams {
            let (s, r, c) = (stop.clone(), record.clone(), main.clone());
            let (a, m) = (spec.addr, spec.max_tokens);
            tasks.push(tokio::spawn(stream_loop(a, m, i, u64::MAX, s, r, c)));
        }
        if let Some((waddr, wn)) = spec.witness {
            for i in 0..wn {
                let (s, r, c) = (stop.clone(), record.clone(), wit.clone());
                let m = spec.max_tokens;
                tasks.push(tokio::spawn(stream_loop(
                    waddr,
                    m,
                    1_000_000 + i,
                    u64::MAX,
                    s,
                    r,
                    c,
                )));
            }
        }
        // Warm-up: at least 2 s, and until every stream has finished its first request. The
        // first requests all start at once, and a proxied path opens its upstream connections
        // in that burst, so until each stream has gone round once the paths are not comparable.
        let everyone = spec.streams + spec.witness.map_or(0, |(_, n)| n);
        let warm = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        while main.settled.load(Ordering::Relaxed) + wit.settled.load(Ordering::Relaxed) < everyone
            && warm.elapsed() < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = if metrics {
            overhead_buckets(spec.addr).await
        } else {
            Vec::new()
        };
        if let Some(c) = child.as_deref_mut() {
            let _ = c.lag_us(); // reset the probe's window
        }
        record.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        let s0 = pid.map(proc_stat);
        let m0 = machine_jiffies();
        // Sample RSS mid-window, when the streams are open.
        tokio::time::sleep(Duration::from_secs_f64(spec.seconds / 2.0)).await;
        let rss_open = pid.map(|p| proc_stat(p).rss);
        tokio::time::sleep(Duration::from_secs_f64(spec.seconds / 2.0)).await;
        record.store(false, Ordering::Relaxed);
        let s1 = pid.map(proc_stat);
        let m1 = machine_jiffies();
        let wall = t0.elapsed().as_secs_f64();
        if let Some(c) = child.as_deref_mut() {
            lag = Some(c.lag_us());
        }
        let after = if metrics {
            overhead_buckets(spec.addr).await
        } else {
            Vec::new()
        };
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
        }
        (s0, s1, rss_open, m0, m1, wall, before, after)
    });
    let child_fig = match (s0, s1, rss_open, idle) {
        (Some(a), Some(b), Some(r), Some(i)) => Some((a, b, r - i.rss)),
        _ => None,
    };
    Phase {
        main: Seen::of(&main),
        witness: spec.witness.map(|_| Seen::of(&wit)),
        child: child_fig,
        wall_s: wall,
        machine_busy: (m1.0 - m0.0) / (m1.1 - m0.1).max(1.0),
        load: loadavg(),
        lag_us: lag,
        overhead: metrics.then(|| overhead_summary(&before, &after)),
    }
}

fn print_row(name: &str, s: &Seen, p: &Phase, streams: u64) {
    let (cpu, rss, delay) = match p.child {
        Some((a, b, rss)) => {
            let ev = s.events as f64;
            let u = (b.utime_s - a.utime_s) * 1e6 / ev;
            let k = (b.stime_s - a.stime_s) * 1e6 / ev;
            (
                format!("{:>7.2} {:>6.2} {:>6.2}", u + k, u, k),
                format!("{:>8.1}", rss / streams as f64 / 1024.0),
                format!("{:>8.0}", (b.run_delay_s - a.run_delay_s) * 1e3 / p.wall_s),
            )
        }
        None => (
            format!("{:>7} {:>6} {:>6}", "-", "-", "-"),
            format!("{:>8}", "-"),
            format!("{:>8}", "-"),
        ),
    };
    println!(
        "{:<8} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7.0} {:>7.0} {cpu} {rss} {delay} {:>5.0}% {:>5}",
        name,
        streams,
        s.requests,
        s.samples,
        s.events,
        s.frames,
        s.ttft_ms[0],
        s.ttft_ms[1],
        s.ttft_ms[2],
        s.ttft_ms[3],
        s.path_us[0],
        s.path_us[1],
        p.machine_busy * 100.0,
        p.load,
    );
}

/// The engine twin on its own thread, sized for `most` concurrent streams: its address, the
/// sender that stops it, and its thread.
fn start_twin(
    most: u64,
    max_tokens: u64,
    time_scale: f64,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
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
                max_num_seqs: Some(most as u32 + 64),
                max_num_batched_tokens: Some(32768),
                num_gpu_blocks_override: Some(
                    ((most + 64) * (2 * max_tokens + 48) / 16 + 1024) as u32,
                ),
                max_model_len: Some(4096),
                ..SimSpec::default()
            };
            let probe = headroom_sim::server::FirstChunkProbe(Arc::new(
                |id: Option<&str>, received: Instant, first: Instant| {
                    if let Some(id) = id.and_then(|v| v.parse::<u64>().ok()) {
                        ENGINE_SIDE
                            .lock()
                            .expect("lock")
                            .insert(id, (received, first));
                    }
                },
            ));
            let h = serve(ServerConfig {
                port: 0,
                dcgm_port: Some(0),
                first_chunk_probe: Some(probe),
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
    (addr_rx.recv().expect("twin address"), stop_tx, twin)
}

/// Fixed work for instruction counting: `STREAMS` (one number, default 10) closed-loop streams
/// of exactly `FIXED_REQUESTS` requests each, through the child named by `FIXED_PATH`
/// (`gateway`, the default, or `relay`), which runs under `CHILD_WRAP` when set (e.g.
/// `valgrind --tool=callgrind --callgrind-out-file=...`) and without the clock-driven lag
/// probe. Prints `fixed: E events F frames R requests` once every stream has finished, then
/// stops the child. `benches/gateway_instructions.sh` runs this at two request counts and
/// divides the difference of the child's instructions by the difference of the events.
fn fixed_run(requests: u64) {
    let streams = env_or("STREAMS", 10.0) as u64;
    let max_tokens = env_or("MAX_TOKENS", 64.0) as u64;
    let time_scale = env_or("TIME_SCALE", 1.0);
    let (twin_addr, stop_tx, twin) = start_twin(streams, max_tokens, time_scale);
    let wrap = std::env::var("CHILD_WRAP").ok();
    let relay = std::env::var("FIXED_PATH").is_ok_and(|p| p == "relay");
    let child = if relay {
        ChildProc::spawn(RELAY_ENV, twin_addr.to_string(), wrap.as_deref(), true)
    } else {
        ChildProc::spawn(
            GATEWAY_ENV,
            format!("http://{twin_addr}"),
            wrap.as_deref(),
            true,
        )
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let c = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(AtomicBool::new(true));
    let before = proc_stat(child.child.id());
    rt.block_on(async {
        let tasks: Vec<_> = (0..streams)
            .map(|i| {
                let (s, r, c) = (stop.clone(), record.clone(), c.clone());
                tokio::spawn(stream_loop(child.addr, max_tokens, i, requests, s, r, c))
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    let after = proc_stat(child.child.id());
    let events = c.events.load(Ordering::Relaxed);
    println!(
        "fixed: {events} events {} frames {} requests; child CPU {:.2} µs per event (user {:.2}, sys {:.2})",
        c.frames.load(Ordering::Relaxed),
        c.requests.load(Ordering::Relaxed),
        (after.utime_s + after.stime_s - before.utime_s - before.stime_s) * 1e6 / events as f64,
        (after.utime_s - before.utime_s) * 1e6 / events as f64,
        (after.stime_s - before.stime_s) * 1e6 / events as f64,
    );
    child.stop();
    let _ = stop_tx.send(());
    let _ = twin.join();
}

fn main() {
    if let Ok(up) = std::env::var(GATEWAY_ENV) {
        gateway_child(&up);
        return;
    }
    if let Ok(up) = std::env::var(RELAY_ENV) {
        relay_child(&up);
        return;
    }
    if let Some(r) = std::env::var("FIXED_REQUESTS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        fixed_run(r);
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs us too: keep that short.
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let levels: Vec<u64> = std::env::var("STREAMS")
        .unwrap_or_else(|_| if quick { "20" } else { "100,1000" }.to_string())
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    let witness = env_or("WITNESS", if quick { 5.0 } else { 100.0 }) as u64;
    let max_tokens = env_or("MAX_TOKENS", 64.0) as u64;
    let seconds = env_or("SECONDS", if quick { 1.0 } else { 8.0 });
    let time_scale = env_or("TIME_SCALE", 0.25);
    let rounds = env_or("ROUNDS", 1.0) as u64;
    let most = levels.iter().copied().max().unwrap_or(0) + witness;

    let (twin_addr, stop_tx, twin) = start_twin(most, max_tokens, time_scale);
    let mut gw = ChildProc::spawn(GATEWAY_ENV, format!("http://{twin_addr}"), None, false);
    let mut relay = ChildProc::spawn(RELAY_ENV, twin_addr.to_string(), None, false);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "gateway_overhead: streams {levels:?} (+{witness} direct witnesses during the gateway phase), max_tokens {max_tokens}, {seconds} s per phase, twin time_scale {time_scale}, gateway pid {}, relay pid {}",
        gw.child.id(),
        relay.child.id()
    );
    println!(
        "{:<8} {:>6} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>6} {:>8} {:>8} {:>6} {:>5}",
        "path",
        "n",
        "requests",
        "ttft n",
        "events",
        "frames",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "path50µs",
        "path99µs",
        "µs/ev",
        "user",
        "sys",
        "KiB/strm",
        "rq ms/s",
        "busy",
        "load"
    );
    for round in 0..rounds {
        for &n in &levels {
            let spec = |addr, witness| PhaseSpec {
                addr,
                streams: n,
                witness,
                max_tokens,
                seconds,
            };
            // The gateway child is idle during the direct phase but for its lag probe and
            // timers: that CPU rate is its idle cost, subtracted below for the net figure.
            let (idle0, t_idle) = (proc_stat(gw.child.id()), Instant::now());
            let d = run_phase(&rt, &spec(twin_addr, None), None, false);
            let idle1 = proc_stat(gw.child.id());
            let idle_rate = (idle1.utime_s + idle1.stime_s - idle0.utime_s - idle0.stime_s)
                / t_idle.elapsed().as_secs_f64();
            print_row("direct", &d.main, &d, n);
            let r = run_phase(&rt, &spec(relay.addr, None), Some(&mut relay), false);
            print_row("relay", &r.main, &r, n);
            let g = run_phase(
                &rt,
                &spec(gw.addr, Some((twin_addr, witness))),
                Some(&mut gw),
                true,
            );
            print_row("gateway", &g.main, &g, n);
            if let Some((a, b, _)) = g.child {
                let cpu = b.utime_s + b.stime_s - a.utime_s - a.stime_s;
                let ev = g.main.events as f64;
                let relay_us = r.child.map_or(f64::NAN, |(a, b, _)| {
                    (b.utime_s + b.stime_s - a.utime_s - a.stime_s) * 1e6 / r.main.events as f64
                });
                println!(
                    "round {round}, {n} streams: gateway CPU per SSE event {:.2} µs gross, {:.2} µs net of its idle cost ({:.1} ms/s, lag probe and timers, measured during the direct phase); relay floor {relay_us:.2} µs",
                    cpu * 1e6 / ev,
                    (cpu - idle_rate * g.wall_s) * 1e6 / ev,
                    idle_rate * 1e3,
                );
            }
            if let Some(w) = &g.witness {
                print_row(
                    "witness",
                    w,
                    &Phase {
                        child: None,
                        ..g.clone_figures()
                    },
                    witness,
                );
                let lag = g.lag_us.unwrap_or([f64::NAN; 3]);
                let (count, within, p99_le) = g.overhead.unwrap_or((0.0, f64::NAN, f64::NAN));
                println!(
                    "round {round}, {n} streams: added TTFT, path share (engine's share cancelled per request) vs witnesses: mean {:+.1} µs, p50 {:+.1} µs, p99 {:+.1} µs; vs direct phase p50 {:+.1} µs, p99 {:+.1} µs",
                    g.main.path_us[3] - w.path_us[3],
                    g.main.path_us[0] - w.path_us[0],
                    g.main.path_us[1] - w.path_us[1],
                    g.main.path_us[0] - d.main.path_us[0],
                    g.main.path_us[1] - d.main.path_us[1],
                );
                println!(
                    "round {round}, {n} streams: added TTFT, whole (engine steps included) vs witnesses mean {:+.2} ms, p50 {:+.2} ms, p99 {:+.2} ms; vs direct phase p50 {:+.2} ms, p99 {:+.2} ms; gateway event-loop delay p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs; gateway overhead (own /metrics, {count} requests): {:.1} % within 0.5 ms, p99 ≤ {p99_le} ms",
                    g.main.mean_ms - w.mean_ms,
                    g.main.ttft_ms[0] - w.ttft_ms[0],
                    g.main.ttft_ms[2] - w.ttft_ms[2],
                    g.main.ttft_ms[0] - d.main.ttft_ms[0],
                    g.main.ttft_ms[2] - d.main.ttft_ms[2],
                    lag[0],
                    lag[1],
                    lag[2],
                    within * 100.0,
                );
            }
        }
    }
    gw.stop();
    relay.stop();
    let _ = stop_tx.send(());
    let _ = twin.join();
}

impl Phase {
    /// The machine figures of this phase without the client-side ones (for the witness row).
    fn clone_figures(&self) -> Phase {
        Phase {
            main: Seen {
                samples: 0,
                path_us: [f64::NAN; 4],
                ttft_ms: [f64::NAN; 4],
                mean_ms: f64::NAN,
                requests: 0,
                events: 0,
                frames: 0,
            },
            witness: None,
            child: self.child,
            wall_s: self.wall_s,
            machine_busy: self.machine_busy,
            load: self.load.clone(),
            lag_us: self.lag_us,
            overhead: self.overhead,
        }
    }
}
