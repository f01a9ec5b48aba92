//! Classification and admission a client cannot game: the output limit the engine applies
//! (chat's `max_completion_tokens` over `max_tokens`), every prompt of a batch and the tool
//! schemas in the prompt-length estimate, and `n` × prompts counted against the class's
//! concurrency limit.

mod common;

use common::{call, gateway, hold, scrape, sum_where, twin, url};
use headroom_sim::server::Faults;
use http::StatusCode;
use serde_json::json;
use std::time::Duration;

const YAML: &str = "classes:\n\
    \x20 - {name: long_context, prompt_tokens: {min: 1000}}\n\
    \x20 - {name: short, max_tokens: {max: 64}, concurrency: {limit: 4, queue: 0}}\n";

/// Requests counted in `class`, whatever their outcome.
fn counted(text: &str, class: &str) -> f64 {
    sum_where(
        text,
        "headroom_gateway_requests_total",
        &[&format!("class=\"{class}\"")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_limit_batches_and_tools_choose_the_class_the_engine_sees() {
    let twin = twin(0.0, Faults::default(), None).await;
    let gw = gateway(YAML, &[url(twin.api_addr)], None).await;
    let words = "w ".repeat(2100);
    let quarter = "w ".repeat(600);
    let chat = |extra: serde_json::Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}]});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b.to_string()
    };
    // (path, body, class it must land in)
    let cases = [
        // vLLM generates max_completion_tokens (300), not max_tokens (10).
        (
            "/v1/chat/completions",
            chat(json!({"max_tokens": 10, "max_completion_tokens": 300})),
            "default",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"max_tokens": 300, "max_completion_tokens": 10})),
            "short",
        ),
        // A null max_completion_tokens is "not given": max_tokens decides.
        (
            "/v1/chat/completions",
            chat(json!({"max_tokens": 10, "max_completion_tokens": null})),
            "short",
        ),
        // Completions have no max_completion_tokens; without max_tokens vLLM generates 16.
        (
            "/v1/completions",
            json!({"prompt": "hi", "max_completion_tokens": 300}).to_string(),
            "short",
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "max_tokens": 300, "max_completion_tokens": 10}).to_string(),
            "default",
        ),
        // A batch of short prompts is as long as all of them together.
        (
            "/v1/completions",
            json!({"prompt": [quarter, quarter, quarter, quarter], "max_tokens": 8}).to_string(),
            "long_context",
        ),
        (
            "/v1/completions",
            json!({"prompt": [quarter], "max_tokens": 8}).to_string(),
            "short",
        ),
        // Tool schemas are rendered into the prompt.
        (
            "/v1/chat/completions",
            chat(
                json!({"max_tokens": 8, "tools": [{"type": "function", "function": {
                "name": "f", "description": words, "parameters": {"type": "object"}}}]}),
            ),
            "long_context",
        ),
    ];
    for (i, (path, body, want)) in cases.iter().enumerate() {
        let before = counted(&scrape(gw.addr).await, want);
        let a = call(gw.addr, "POST", path, body, &[]).await;
        assert_ne!(a.status, StatusCode::TOO_MANY_REQUESTS, "case {i}");
        let after = counted(&scrape(gw.addr).await, want);
        assert_eq!(
            after - before,
            1.0,
            "case {i}: {path} {} → {want}",
            &body[..80.min(body.len())]
        );
    }
    gw.shutdown().await;
}

/// Limit 4, queue 0, one slot held: a request of 3 sequences fits, one of 4 (by `n`, by
/// `best_of` or as a batch of prompts) does not and is refused 429, one wider than the whole
/// limit is refused 400 without reaching the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequences_count_against_the_concurrency_limit() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway(YAML, &[url(twin.api_addr)], None).await;
    let addr = gw.addr;
    // ~60 tokens of a 3B model on an A10G: long enough to hold the slot for the checks below.
    let holder = hold(addr, 60);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = scrape(addr).await;
    assert_eq!(
        sum_where(&text, "headroom_gateway_in_flight", &["class=\"short\""]),
        1.0,
        "{text}"
    );
    let req = |extra: serde_json::Value| {
        let mut b = json!({"prompt": "x", "max_tokens": 2});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b.to_string()
    };
    for body in [
        req(json!({"n": 4})),
        req(json!({"n": "4"})),
        req(json!({"best_of": 4})),
        req(json!({"n": 2, "best_of": 4})),
        req(json!({"prompt": ["a", "b", "c", "d"]})),
        req(json!({"prompt": [[1, 2], [3], [4], [5]]})),
        req(json!({"prompt": ["a", "b"], "n": 2})),
    ] {
        let a = call(addr, "POST", "/v1/completions", &body, &[]).await;
        assert_eq!(
            a.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{body}: {}",
            a.body
        );
    }
    for body in [
        req(json!({"n": 5})),
        req(json!({"n": 1e9})),
        req(json!({"prompt": ["a", "b", "c"], "n": 2})),
    ] {
        let a = call(addr, "POST", "/v1/completions", &body, &[]).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {}", a.body);
        assert!(a.body.contains("sequences"), "{body}: {}", a.body);
    }
    // Three sequences fit next to the held one (the twin itself refuses n > 1: admitted).
    let a = call(addr, "POST", "/v1/completions", &req(json!({"n": 3})), &[]).await;
    assert_ne!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.body);
    let a = call(
        addr,
        "POST",
        "/v1/completions",
        &req(json!({"prompt": [[1], [2], [3]]})),
        &[],
    )
    .await;
    assert_ne!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.body);
    let held = holder.await.unwrap();
    assert_eq!(held.status, StatusCode::OK);
    let text = scrape(addr).await;
    let short = |o: &str| {
        sum_where(
            &text,
            "headroom_gateway_requests_total",
            &["class=\"short\"", &format!("outcome=\"{o}\"")],
        )
    };
    assert_eq!(short("rejected"), 7.0, "{text}");
    assert_eq!(short("invalid_request"), 3.0 + 2.0, "{text}");
    assert_eq!(
        sum_where(&text, "headroom_gateway_in_flight", &["class=\"short\""]),
        0.0
    );
    gw.shutdown().await;
}
