//! Headroom's shared vocabulary: no I/O, no clock.
//!
//! What lives here: the definitions the field disagrees on (TTFT, ITL, TPOT, E2E; see
//! [`signal`]), request outcomes ([`outcome`]), the SLO file ([`slo`]) and the verdict and finding
//! types every judgement is expressed in ([`verdict`]). What does not: parsing metrics (crate
//! `signals`), measuring (crate `load`), rendering (crate `report`).

pub mod outcome;
pub mod run;
pub mod signal;
pub mod slo;
pub mod stats;
pub mod verdict;
pub mod yaml;

pub use outcome::Outcome;
pub use signal::{LatencySignal, RequestTiming};
pub use slo::{Objective, SloFile, SloSpec};
pub use verdict::{Confidence, Finding, Verdict};
