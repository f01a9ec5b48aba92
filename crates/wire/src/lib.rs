//! The HTTP/SSE wire layer the load client (`headroom-load`) and the gateway
//! (`headroom-gateway`) share, so that both read a stream the same way and measure the same
//! thing.
//!
//! What lives here:
//! - [`sse`]: bytes → Server-Sent Events, per the WHATWG rules, within line and event limits;
//! - [`chunk`]: one SSE event → what an OpenAI stream chunk says (generated text by the rule of
//!   [`headroom_core::signal::ChunkContent`], `finish_reason`, `usage`, per-request metrics, an
//!   error object), with a one-pass fast path checked against serde;
//! - [`conn`]: HTTP/1.1 connections driven inside the request's own task, and their pool;
//! - [`retry`]: when a request a closing pooled connection lost is sent again.
//!
//! What does not: what a request's outcome or latency is (crate `core`), recording and pacing
//! (crate `load`), forwarding and exporting (crate `gateway`).

pub mod chunk;
mod chunk_scan;
pub mod conn;
pub mod retry;
pub mod sse;
