//! Headroom's reading of engine and GPU telemetry.
//!
//! * [`exposition`]: our own parser for the Prometheus text format 0.0.4 and OpenMetrics 1.0.
pub mod exposition;
