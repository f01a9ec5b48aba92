//! The gateway in front of the engine twin: its SLIs agree with the client's own measurement,
//! a client's cancellation reaches the engine, and long prompts go to their own pool.

mod common;

use bytes::Bytes;
use common::*;
use headroom_load::client::{CancellationFlag, PreparedRequest, RequestRecord, Target};
use headroom_load::workload::Endpoint;
use headroom_sim::server::Faults;
use std::time::{Duration, Instant};

const SLO: &str = "objectives:\n  \"*\": {ttft: {p95: 300ms}, itl: {p95: 50ms}, e2e: {p99: 5s}}\n";

fn prepared(prompt: &str, max_tokens: u32) -> PreparedRequest {
    PreparedRequest {
        class: 0,
        endpoint: Endpoint::Completions,
        body: Bytes::from(completion_body(prompt, max_tokens)),
        requested_prompt_tokens: 8,
        max_tokens,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slis_agree_with_the_clients_measurement() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway("{}", &[url(twin.api_addr)], Some(SLO)).await;
    let target = Target::new(&url(gw.addr), None, None).unwrap();
    let cancel = CancellationFlag::new();
    // 12 requests, 4 at a time, 16 tokens each, real (a10g, qwen2.5-3b) step times.
    let mut records: Vec<RequestRecord> = Vec::new();
    for wave in 0..3 {
        let mut tasks = Vec::new();
        for i in 0..4 {
            let t = target.clone();
            let c = cancel.clone();
            let req = prepared(&format!("wave {wave} request {i} about gateways"), 16);
            tasks.push(tokio::spawn(async move {
                t.send(&req, Instant::now(), &c).await
            }));
        }
        for t in tasks {
            records.push(
                tokio::time::timeout(Duration::from_secs(30), t)
                    .await
                    .expect("request ends")
                    .unwrap(),
            );
        }
    }
    let text = scrape(gw.addr).await;
    let series = |family: &str, what: &str| {
        value(
            &text,
            &format!(
                "headroom_gateway_{family}_seconds_{what}{{class=\"default\",tenant=\"other\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("{family}_{what} missing:\n{text}"))
    };
    let n = records.len() as f64;
    assert!(
        records
            .iter()
            .all(|r| r.outcome == headroom_core::Outcome::Length),
        "{records:?}"
    );
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"length\"}"
        ),
        Some(n)
    );
    // Counts: one TTFT and one E2E per request, one ITL per gap between content chunks, one
    // TPOT per request with at least two output tokens — from the client's own records.
    let client_gaps: usize = records.iter().map(|r| r.timing.itl_ns().count()).sum();
    assert_eq!(series("ttft", "count"), n);
    assert_eq!(series("e2e", "count"), n);
    assert_eq!(series("tpot", "count"), n);
    assert_eq!(series("itl", "count"), client_gaps as f64);
    // Sums: the gateway starts at acceptance and stops at arrival from upstream, so it sees a
    // little less than the client (two loopback hops), never more.
    let s = |f: &dyn Fn(&RequestRecord) -> Option<u64>| -> f64 {
        records.iter().filter_map(f).map(|v| v as f64 / 1e9).sum()
    };
    let checks = [
        ("ttft", s(&|r| r.timing.ttft_ns())),
        ("e2e", s(&|r| Some(r.timing.end_ns))),
        ("itl", s(&|r| Some(r.timing.itl_ns().sum()))),
        ("tpot", s(&|r| r.timing.tpot_ns())),
    ];
    for (family, client_sum) in checks {
        let gw_sum = series(family, "sum");
        let per_request_ms = (client_sum - gw_sum) / n * 1e3;
        // ±10 ms per request on a shared, loaded 2-core machine; the true gap is ~0.2 ms.
        assert!(
            per_request_ms.abs() < 10.0,
            "{family}: client {client_sum:.4} s vs gateway {gw_sum:.4} s over {n} requests"
        );
        assert!(client_sum > 0.0, "{family}");
    }
    // The gateway's own overhead: one observation per request, each part of that request's
    // TTFT as the gateway measured it (acceptance → first content chunk), so the sum is
    // positive and below the TTFT sum.
    assert_eq!(series("overhead", "count"), n);
    let overhead = series("overhead", "sum");
    assert!(
        overhead > 0.0 && overhead < series("ttft", "sum"),
        "overhead {overhead} s vs TTFT {} s",
        series("ttft", "sum")
    );
    // Bucket at the SLO threshold exists and counts what the client saw below 300 ms, give or
    // take requests within a millisecond of it.
    let below = records
        .iter()
        .filter(|r| r.timing.ttft_ns().is_some_and(|t| t <= 300_000_000))
        .count() as f64;
    let bucket = value(
        &text,
        "headroom_gateway_ttft_seconds_bucket{le=\"0.3\",class=\"default\",tenant=\"other\"}",
    )
    .expect("threshold bucket");
    assert!(
        (bucket - below).abs() <= 1.0,
        "bucket {bucket} vs client {below}"
    );
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cancellation_stops_the_engine_request() {
    let twin = twin(1.0, Faults::default(), None).await;
    let gw = gateway("{}", &[url(twin.api_addr)], None).await;
    let target = Target::new(&url(gw.addr), None, None).unwrap();
    let cancel = CancellationFlag::new();
    let c = cancel.clone();
    // 2,000 tokens take tens of seconds on the twin; cancel after the stream has started.
    let req = prepared("a long answer please", 2000);
    let task = tokio::spawn(async move { target.send(&req, Instant::now(), &c).await });
    tokio::time::sleep(Duration::from_millis(600)).await;
    cancel.cancel();
    let rec = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.outcome, headroom_core::Outcome::ClientCancel);
    assert!(
        !rec.timing.content_chunk_ns.is_empty(),
        "stream had started"
    );
    // The engine stops generating at once and counts the request in no finished_reason, as
    // vLLM 0.32 does for a client that went away.
    let t0 = Instant::now();
    let generated = wait_engine_idle(twin.api_addr, Duration::from_secs(5))
        .await
        .expect("the engine dropped the cancelled request");
    let waited = t0.elapsed();
    assert!(waited < Duration::from_secs(2), "cancel took {waited:?}");
    assert!(
        generated >= rec.timing.content_chunk_ns.len() as f64 && generated < 1000.0,
        "generated {generated} of 2000 tokens: the engine kept generating after the disconnect"
    );
    assert_eq!(twin_finished(twin.api_addr).await, 0.0);
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"client_cancel\"}"
        ),
        Some(1.0)
    );
    // A cancelled request has a TTFT but no E2E.
    assert_eq!(
        value(
            &text,
            "headroom_gateway_e2e_seconds_count{class=\"default\",tenant=\"other\"}"
        ),
        Some(0.0)
    );
    gw.shutdown().await;
    twin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_context_requests_use_their_own_pool() {
    let short = twin(0.0, Faults::default(), Some("short-pool")).await;
    let long = twin(0.0, Faults::default(), Some("long-pool")).await;
    let yaml = format!(
        "pools: {{long_context: [{}]}}\nclasses:\n  - {{name: long_context, prompt_tokens: {{min: 200}}, pool: long_context}}\n",
        url(long.api_addr)
    );
    let gw = gateway(&yaml, &[url(short.api_addr)], None).await;
    // 800 characters ≈ 200 tokens → long_context; 40 characters → default.
    let long_prompt = "abcd".repeat(200);
    let a = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body(&long_prompt, 3),
        &[],
    )
    .await;
    let b = call(
        gw.addr,
        "POST",
        "/v1/completions",
        &completion_body(&"abcd".repeat(10), 3),
        &[],
    )
    .await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert!(a.body.contains("\"model\":\"long-pool\""), "{}", a.body);
    assert!(b.body.contains("\"model\":\"short-pool\""), "{}", b.body);
    let text = scrape(gw.addr).await;
    for class in ["long_context", "default"] {
        assert_eq!(
            value(
                &text,
                &format!(
                    "headroom_gateway_requests_total{{class=\"{class}\",tenant=\"other\",outcome=\"length\"}}"
                )
            ),
            Some(1.0),
            "{class}"
        );
    }
    gw.shutdown().await;
    short.shutdown().await;
    long.shutdown().await;
}
