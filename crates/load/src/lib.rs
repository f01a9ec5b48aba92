//! The measuring half of `headroom sweep`: what load to offer, and what the client saw (the
//! sweep that chooses levels and judges them is crate `headroom-sweep`).
//!
//! Rooms, one concern each:
//! - [`workload`]: the `workload.yaml` spec (request classes, length distributions, datasets,
//!   load mode, windows, seed) and the built-in default workload;
//! - [`prompt`]: prompt synthesis to a token count (exact with a `tokenizer.json`, approximate
//!   without), shared prefixes, and the drift check of requested versus realised tokens;
//! - [`calibrate`]: fitting synthetic prompts to the target's own tokenizer (its `/tokenize`,
//!   or `usage`) before the first level, when no `tokenizer.json` is given;
//! - [`arrivals`]: closed loop and open loop (constant, Poisson, gamma) schedules, seeded;
//! - [`client`]: the OpenAI-compatible streaming client (hyper, HTTP/1.1) and its SSE parser;
//! - [`recorder`]: HDR histograms per class per level, exact outcome and token counts, merge
//!   and serialisation;
//! - [`runner`]: one load level end to end (warm-up, measurement window, drain, client CPU), and
//!   the pre-flight probe of a target;
//! - [`testkit`]: a minimal SSE stub server on loopback for tests and the client benchmark.
//!
//! Client-side signal definitions (TTFT, ITL, TPOT, E2E) and outcomes are not defined here but in
//! `headroom_core` ([`headroom_core::RequestTiming`], [`headroom_core::Outcome`]).

pub mod arrivals;
pub mod calibrate;
pub mod client;
pub mod prompt;
pub mod recorder;
pub mod runner;
pub mod testkit;
pub mod workload;
