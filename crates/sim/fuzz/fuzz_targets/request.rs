//! Fuzz target: `headroom_sim::server::parse_and_validate` on arbitrary request bodies.
//!
//! Byte 0 picks the endpoint (bit 0) and the context window (`max_model_len` 1…2033 tokens in
//! steps of 16); the rest is the body. Beyond "never panics", every outcome is checked:
//! an accepted request fits the window (`prompt + max_tokens ≤ max_model_len`, `max_tokens ≥ 1`,
//! `min_tokens ≤ max_tokens`, a served model name), and a rejection serialises to vLLM's
//! `{"error": {"message", "type", "param", "code"}}` with a 400 or 404 status.
//!
//! Run: `cargo +nightly fuzz run request` in `crates/sim/fuzz`.
#![no_main]

use headroom_sim::server::{Endpoint, ValidationContext, parse_and_validate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    let endpoint = if head & 1 == 0 {
        Endpoint::Completions
    } else {
        Endpoint::ChatCompletions
    };
    let ctx = ValidationContext {
        served_model_names: vec!["tiny".to_string()],
        max_model_len: 1 + u32::from(head >> 1) * 16,
        vocab_size: 151_936,
    };
    match parse_and_validate(endpoint, body, &ctx) {
        Ok(r) => {
            assert!(r.max_tokens >= 1);
            assert!(
                r.prompt_tokens.len() as u64 + u64::from(r.max_tokens)
                    <= u64::from(ctx.max_model_len)
            );
            assert!(!r.prompt_tokens.is_empty());
            assert!(r.min_tokens <= r.max_tokens);
            assert_eq!(r.model, "tiny");
            assert!(!r.continuous_usage || r.include_usage);
            assert!(!r.include_usage || r.stream);
            let n = headroom_sim::server::protocol::natural_output_len(
                7,
                1,
                r.min_tokens,
                r.max_tokens,
            );
            assert!(n >= r.min_tokens.max(1) && n <= r.max_tokens);
        }
        Err(e) => {
            let status = e.status.as_u16();
            assert!(status == 400 || status == 404, "status {status}");
            let v: serde_json::Value =
                serde_json::from_str(&e.to_json()).expect("error body is JSON");
            let err = v["error"].as_object().expect("error object");
            let keys: Vec<&str> = err.keys().map(String::as_str).collect();
            assert_eq!(keys, ["code", "message", "param", "type"]);
            assert_eq!(err["code"].as_u64(), Some(u64::from(status)));
            assert!(err["message"].is_string() && err["type"].is_string());
            assert!(err["param"].is_null() || err["param"].is_string());
        }
    }
});
