//! Headroom's shared vocabulary: no I/O, no clock — except the one file write every
//! run-directory writer shares ([`atomic`]).
//!
//! What lives here: the definitions the field disagrees on (TTFT, ITL, TPOT, E2E; see
//! [`signal`]), request outcomes ([`outcome`]), the SLO file ([`slo`]) and the verdict and finding
//! types every judgement is expressed in ([`verdict`]), and the rule both HTTP connection pools
//! use to resend a request a closing connection lost ([`retry`]). What does not: parsing metrics (crate
//! `signals`), measuring (crate `load`), rendering (crate `report`).

pub mod atomic;
pub mod outcome;
pub mod retry;
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

/// An error and its sources, joined with `: ` (`client error (Connect): tcp connect error:
/// Connection refused (os error 111)`): HTTP client errors keep the operating system's reason
/// in their sources, and their own `Display` says only what failed.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod error_chain_tests {
    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn joins_every_source() {
        let e = E("a", Some(Box::new(E("b", Some(Box::new(E("c", None)))))));
        assert_eq!(super::error_chain(&e), "a: b: c");
        assert_eq!(super::error_chain(&E("x", None)), "x");
    }
}
