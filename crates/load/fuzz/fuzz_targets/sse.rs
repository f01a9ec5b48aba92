//! Fuzz target: the sweep client's SSE reader (`headroom_load::client::sse`) on arbitrary
//! bytes. The first four bytes choose the frame cuts and the line/event limits, the rest is the
//! stream: the splitter never panics and yields, at any cuts (empty frames included), exactly
//! the events and the stop of a whole-stream reading; no event passes its limits; the stream
//! state keeps its content-chunk bound; the chunk fast path answers only as serde does
//! (`sse::check_properties`).
//!
//! Run in `crates/load/fuzz`, seeded with the recorded vLLM streams (four header bytes each):
//! `mkdir -p corpus/sse && for f in ../../../fixtures/openai/*stream*; do (printf '\0\1\2\3';
//! cat "$f") > "corpus/sse/${f##*/}"; done && cargo +nightly fuzz run sse -- -dict=sse.dict`.
//! Without nightly, the same properties run over generated inputs in
//! `cargo test -p headroom-load --lib client::sse::`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    headroom_load::client::sse::check_properties(data);
});
