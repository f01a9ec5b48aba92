//! Fuzz target: the gateway's request-path handling (`headroom_gateway::path`) on arbitrary
//! bytes: `canonicalise` never panics, an accepted path is free of every refused form (dot
//! segments, encoded separators and `%`, controls, empty segments), its routing path is itself
//! canonical and its forwarded form decodes back to it; `client_location` (input
//! `PREFIX\nLOCATION`) never leaves an authority in a rewritten `Location`.
//!
//! Run: `cargo +nightly fuzz run path` in `crates/gateway/fuzz`. Without nightly, the same
//! properties run over generated inputs in `cargo test -p headroom-gateway --lib path::`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    headroom_gateway::path::check_properties(data);
});
