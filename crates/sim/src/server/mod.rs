//! The engine twin's HTTP server: an OpenAI-compatible API in front of a wall-clock [`Engine`],
//! shaped like vLLM 0.32's.
//!
//! [`serve`] binds two listeners and returns at once:
//! * the API (`ServerConfig::port`, vLLM's default 8000): `/v1/completions`,
//!   `/v1/chat/completions` (streaming SSE and non-streaming), `/v1/models`, `/health`,
//!   `/version`, `/ping` and `/metrics` (the engine's vLLM families plus `http_requests_total`);
//! * a dcgm-exporter-compatible listener (`ServerConfig::dcgm_port`, default API port + 1, path
//!   `/metrics`, as dcgm-exporter serves on :9400).
//!
//! Layout: [`protocol`] parses and validates requests (pure; fuzzed), [`error`] shapes vLLM's
//! error JSON, [`render`] writes response bodies and SSE chunks, `driver` owns the engine and
//! runs it on the wall clock, `routes` is the axum wiring, [`faults`] is HTTP-level fault
//! injection. Engine behaviour (scheduling, step times, metrics) lives in [`crate::engine`].
//!
//! Output: tokens are filler text ([`crate::filler_token_text`]); a request without `ignore_eos`
//! stops naturally (`finish_reason: "stop"`) after a deterministic length drawn from the seed,
//! see [`protocol::natural_output_len`].

pub mod error;
pub mod faults;
pub mod protocol;
pub mod render;

mod driver;
mod http_metrics;
mod routes;
mod seeded;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use error::ApiError;
pub use faults::{FaultPlan, Faults, FaultsError};
pub use protocol::{Endpoint, ParsedRequest, ValidationContext, parse_and_validate};

use crate::{Engine, SimSpec};

/// Version string the twin reports in `/version` and `system_fingerprint` (the vLLM release
/// whose API and metrics it reproduces).
pub const VLLM_VERSION: &str = "0.32.0";

/// How long [`ServerHandle::shutdown`] waits for open connections before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Everything `headroom sim` (or the load tester's embedded default) needs to start a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address to bind; default `127.0.0.1` (vLLM's own default is all interfaces; the twin is
    /// for loopback use unless told otherwise).
    pub host: IpAddr,
    /// API port; default 8000 as vLLM; 0 = an ephemeral port.
    pub port: u16,
    /// dcgm-exporter port: `None` = API port + 1 (ephemeral when `port` is 0), `Some(0)` =
    /// ephemeral.
    pub dcgm_port: Option<u16>,
    /// GPU, model, engine arguments and engine-level faults.
    pub spec: SimSpec,
    /// HTTP-level faults.
    pub faults: Faults,
    /// vLLM `--api-key`: when set, `/v1/*` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Called once per streaming completion when its first chunk is handed to the HTTP layer;
    /// `None` (the default) for the CLI. For benchmarks of what sits between a client and the
    /// engine: see [`FirstChunkProbe`].
    pub first_chunk_probe: Option<FirstChunkProbe>,
}

/// The engine side of a streaming request's time to first token, for benchmarks that separate
/// the path's latency (client, proxies, kernel) from the engine's (queueing and step
/// boundaries).
///
/// Called from the twin's runtime thread with the request's `X-Request-Id` header (when sent
/// and valid UTF-8), the instant the handler had the whole request (head and body read), and
/// the instant the first chunk of the SSE body was handed to hyper for writing. A client that
/// sends `X-Request-Id` and records its own send and first-byte instants gets the path's share
/// of its TTFT as `(first byte − send) − (first chunk − received)`, free of where in an engine
/// step the request happened to arrive. Keep it cheap: it runs on the engine's event loop.
#[derive(Clone)]
pub struct FirstChunkProbe(pub Arc<FirstChunkFn>);

/// The callback of a [`FirstChunkProbe`]: `(X-Request-Id, received, first chunk)`.
pub type FirstChunkFn = dyn Fn(Option<&str>, Instant, Instant) + Send + Sync;

impl std::fmt::Debug for FirstChunkProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstChunkProbe(..)")
    }
}

impl PartialEq for FirstChunkProbe {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8000,
            dcgm_port: None,
            spec: SimSpec::default(),
            faults: Faults::default(),
            api_key: None,
            first_chunk_probe: None,
        }
    }
}

/// See [`ServerHandle::clock_lag`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClockLagSnapshot {
    /// Steps with a non-zero modelled duration.
    pub steps: u64,
    /// Their modelled time, seconds.
    pub step_s: f64,
    /// Steps delivered more than 2 ms after their end.
    pub late_steps: u64,
    /// Σ lateness of those steps, seconds.
    pub late_s: f64,
}

/// A running server; dropping it leaves the server running until the runtime stops.
#[derive(Debug)]
pub struct ServerHandle {
    /// Bound address of the OpenAI-compatible API.
    pub api_addr: SocketAddr,
    /// Bound address of the dcgm-exporter listener.
    pub dcgm_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tx: mpsc::UnboundedSender<driver::Command>,
    tasks: Vec<JoinHandle<()>>,
    lag: Arc<driver::ClockLag>,
}

impl ServerHandle {
    /// The wall-clock driver's delivery so far (cumulative): steps, their modelled time, and
    /// those whose tokens went out more than 2 ms after the step's end. Many late steps mean the
    /// host is too busy for the twin to deliver on time, so client-side ITL and TTFT percentiles
    /// are inflated (the sweep warns with it).
    pub fn clock_lag(&self) -> ClockLagSnapshot {
        use std::sync::atomic::Ordering;
        ClockLagSnapshot {
            steps: self.lag.steps.load(Ordering::Relaxed),
            step_s: self.lag.step_ns.load(Ordering::Relaxed) as f64 / 1e9,
            late_steps: self.lag.late_steps.load(Ordering::Relaxed),
            late_s: self.lag.late_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    /// Stops accepting connections, aborts requests in flight (their streams end without
    /// `[DONE]`), and waits up to 5 s for connections to close.
    pub async fn shutdown(self) {
        let _ = self.tx.send(driver::Command::Shutdown);
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        for mut task in self.tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

/// Binds the API and dcgm listeners, starts the engine driver and both servers on the current
/// tokio runtime, and returns their addresses at once.
///
/// # Errors
/// An invalid `spec` (the engine's [`crate::ConfigError`], naming the field) or `faults`
/// ([`FaultsError`]), or a listener that cannot be bound (the address is in the message).
pub async fn serve(cfg: ServerConfig) -> anyhow::Result<ServerHandle> {
    cfg.faults.validate()?;
    let engine_cfg = cfg
        .spec
        .resolve()
        .map_err(|e| anyhow::anyhow!("invalid engine twin configuration: {e}"))?;
    let engine = Engine::new(engine_cfg)
        .map_err(|e| anyhow::anyhow!("invalid engine twin configuration: {e}"))?;
    let ecfg = engine.config().clone();

    let api_listener = TcpListener::bind(SocketAddr::new(cfg.host, cfg.port))
        .await
        .with_context(|| format!("cannot bind the API listener on {}:{}", cfg.host, cfg.port))?;
    let api_addr = api_listener.local_addr()?;
    let dcgm_port = match cfg.dcgm_port {
        Some(p) => p,
        None if cfg.port == 0 => 0,
        None => api_addr
            .port()
            .checked_add(1)
            .context("API port 65535 leaves no default dcgm port (API port + 1); set dcgm_port")?,
    };
    let dcgm_listener = TcpListener::bind(SocketAddr::new(cfg.host, dcgm_port))
        .await
        .with_context(|| {
            format!(
                "cannot bind the dcgm-exporter listener on {}:{dcgm_port} (set dcgm_port)",
                cfg.host
            )
        })?;
    let dcgm_addr = dcgm_listener.local_addr()?;

    let (tx, rx) = mpsc::unbounded_channel();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let fingerprint_bits = seeded::fnv1a(
        format!(
            "{}|{}|{}|{}",
            ecfg.gpu_name, ecfg.model_name, ecfg.served_model_name, ecfg.seed
        )
        .as_bytes(),
    );
    let state = Arc::new(routes::AppState {
        tx: tx.clone(),
        ctx: ValidationContext {
            served_model_names: vec![ecfg.served_model_name.clone()],
            max_model_len: ecfg.max_model_len,
            vocab_size: ecfg.model.vocab_size,
        },
        table: Arc::new(render::FillerTable::new(
            ecfg.max_model_len.min(1 << 16),
            ecfg.seed,
        )),
        faults: cfg.faults.clone(),
        seed: cfg.faults.seed.unwrap_or(ecfg.seed),
        fingerprint: format!("vllm-{VLLM_VERSION}-{:08x}", fingerprint_bits as u32),
        per_request_metrics: cfg.spec.enable_per_request_metrics,
        model_root: ecfg.model.hf_name.clone(),
        started_unix,
        api_key: cfg.api_key.clone(),
        first_chunk_probe: cfg.first_chunk_probe.clone(),
        http: http_metrics::HttpCounters::default(),
        next_index: AtomicU64::new(0),
    });

    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let lag = Arc::new(driver::ClockLag::default());
    tasks.push(tokio::spawn(
        driver::Driver::new(engine, rx, lag.clone()).run(),
    ));
    let api = routes::api_router(state);
    tasks.push(tokio::spawn(serve_router(
        api_listener,
        api,
        stop_rx.clone(),
    )));
    let dcgm = routes::dcgm_router(tx.clone());
    tasks.push(tokio::spawn(serve_router(dcgm_listener, dcgm, stop_rx)));
    Ok(ServerHandle {
        api_addr,
        dcgm_addr,
        stop,
        tx,
        tasks,
        lag,
    })
}

/// How long a connection may sit without a complete request head: uvicorn's
/// `--timeout-keep-alive` default (5 s), which vLLM's API server keeps.
///
/// uvicorn (h11 and httptools protocols) arms this timer when a response completes and cancels it
/// on any byte received, so an idle keep-alive connection is closed 5 s after its last response.
/// The twin applies it through hyper's `header_read_timeout`, which also runs from the moment a
/// connection is accepted and until the request head is complete. So, beyond uvicorn, a
/// connection that never sends a request, or trickles its head (slowloris), is closed after 5 s
/// too (uvicorn would hold both open); a client of a real vLLM never relies on either. Time
/// spent on a request (a long non-streaming generation, a stream of many seconds) does not count.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

async fn serve_router(
    listener: TcpListener,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive(true);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = async { drop(stop.wait_for(|s| *s).await) } => break,
            a = listener.accept() => a,
        };
        // Reap finished connection tasks so the set does not grow with the run.
        while connections.try_join_next().is_some() {}
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                eprintln!("headroom sim: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // TCP_NODELAY on every accepted connection, as vLLM's server has it (Python's asyncio
        // sets it on every TCP transport): without it Nagle's algorithm holds back small SSE
        // chunks behind unacknowledged ones, adding up to a delayed-ACK interval (~40 ms) to a
        // token's arrival.
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = builder.serve_connection(TokioIo::new(tcp), service);
        let mut stop = stop.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = async { drop(stop.wait_for(|s| *s).await) } => {
                    // Finish the response in flight, then close (the driver has already ended
                    // every stream); `ServerHandle::shutdown` bounds the wait.
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
}
