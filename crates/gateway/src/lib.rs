//! Headroom's gateway: an SLO-measuring reverse proxy for OpenAI-compatible servers (vLLM
//! first).
//!
//! Engine metrics only see requests the engine accepted; the gateway measures what users see,
//! from the moment it accepts a request, per request class with bounded labels, and applies the
//! decision table's first corrective actions (a per-class concurrency limit, a separate pool for
//! long-context traffic).
//!
//! Rooms, in pipeline order: [`config`] (gateway.yaml), [`path`] (the canonical request path),
//! [`ids`] (X-Request-Id, traceparent),
//! [`classify`] (route, model, prompt-length and max_tokens buckets, tenant allowlist), [`admit`]
//! (per-class limit and wait queue), [`proxy`] (the server and forwarding, assembled in one
//! place), [`upstream`] (upstream connections, driven in the client's task), [`body`] (the
//! measured pass-through), [`sse`] (reading the stream for measurement), [`metrics`]
//! (Prometheus export), [`rescue`] (every answer the gateway writes itself, and how each is
//! counted), [`error`] (OpenAI-shaped errors), [`drain`] (ending open streams at
//! shutdown), [`listen`] (fd limit, connection cap, accept back-off).
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use headroom_gateway::{GatewayConfig, start};
//! let cfg = GatewayConfig::simple("127.0.0.1:8080".parse()?, &["http://127.0.0.1:8000"])?;
//! let gw = start(cfg).await?;
//! println!("gateway on {}", gw.addr);
//! gw.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admit;
pub mod body;
pub mod classify;
pub mod config;
pub mod drain;
pub mod error;
pub mod ids;
pub mod listen;
pub mod metrics;
pub mod path;
pub mod proxy;
pub mod rescue;
pub mod sse;
pub mod upstream;

pub use config::{ConfigError, GatewayConfig, GatewayFile};
pub use metrics::GatewayOutcome;
pub use proxy::{Gateway, GatewayHandle, start};
