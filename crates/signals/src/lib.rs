//! Headroom's reading of engine and GPU telemetry.
//!
//! * [`exposition`]: our own parser for the Prometheus text format 0.0.4 and OpenMetrics 1.0.
//! * [`scrape`]: one `/metrics` body with its time; the live scraper ([`scrape::scrape_once`],
//!   [`scrape::Scraper`]).
//! * [`adapter`]: engine detection and metric names per engine (vLLM across versions, SGLang,
//!   TGI, llama.cpp) and dcgm-exporter, mapped to canonical [`adapter::Signal`]s.
//! * [`histogram`]: classic-bucket quantiles exactly as PromQL's `histogram_quantile`, with the
//!   precision bracket.
//! * [`source`]: saved scrapes, run directories, live polling; [`promql`]: a window from a
//!   Prometheus HTTP API.
//! * [`quality`]: corrupt data (non-cumulative buckets, negative counts, `_count` ≠ `+Inf`,
//!   impossible gauge values) is rejected family by family with a [`quality::DataWarning`], so it
//!   never becomes a figure.
//! * [`window`]: what happened between scrapes ([`window::Window`]): counter and histogram deltas
//!   with resets handled, gauge summaries, per-GPU summaries.
//!
//! # Entry points for the sweep
//!
//! ```no_run
//! # async fn level() -> Result<(), Box<dyn std::error::Error>> {
//! use headroom_signals::{Scrape, Scraper, Window, WindowOptions, adapter::Signal};
//! use std::time::Duration;
//! let scraper = Scraper::new(Duration::from_secs(5));
//! let start: Scrape = scraper.scrape("http://127.0.0.1:8011/metrics").await?;
//! // … run the level, scrape every N s …
//! let end = scraper.scrape("http://127.0.0.1:8011/metrics").await?;
//! // store start.body / end.body verbatim in the run directory, then:
//! let w = Window::from_scrapes(&[start, end], &[], &WindowOptions::default())?;
//! let ttft_p95 = w.histogram(Signal::Ttft).and_then(|h| h.quantile(0.95));
//! let preempted = w.counter(Signal::Preemptions);
//! # Ok(()) }
//! ```

pub mod adapter;
pub mod exposition;
pub mod histogram;
pub mod promql;
pub mod quality;
pub mod scrape;
pub mod source;
pub mod window;

pub use adapter::{Engine, Selection, Signal};
pub use histogram::{Histogram, Quantile};
pub use quality::{DataWarning, Problem};
pub use scrape::{Scrape, ScrapeError, Scraper, scrape_once};
pub use window::{GaugeSummary, GaugeValidity, Window, WindowError, WindowOptions};
