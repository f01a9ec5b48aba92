//! The histograms and counters the SLIs are computed from: vLLM's names and fixed bucket lists
//! (data, not code), and the names the Headroom gateway exports.
//!
//! Bucket lists are vLLM V1's `TTFT_BUCKETS`, `ITL_BUCKETS` and `REQUEST_LATENCY_BUCKETS`
//! (`vllm/v1/metrics/loggers.py`, unchanged since vLLM 0.8.4, #15202), written exactly as
//! vLLM's Python `prometheus_client` prints the `le` label, and checked against the real
//! vLLM 0.32 scrape `shared/fixtures/vllm/v0.32-cpu-after-burst-c16.prom` in this crate's tests.

use headroom_core::LatencySignal;

/// vLLM `TTFT_BUCKETS` (seconds), as printed in `le`.
pub const VLLM_TTFT_BUCKETS: &[&str] = &[
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
    "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0",
];

/// vLLM `ITL_BUCKETS` (seconds), used by `vllm:inter_token_latency_seconds` and
/// `vllm:request_time_per_output_token_seconds`.
pub const VLLM_ITL_BUCKETS: &[&str] = &[
    "0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0",
    "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0",
];

/// vLLM `REQUEST_LATENCY_BUCKETS` (seconds), used by `vllm:e2e_request_latency_seconds` and the
/// phase histograms (`request_queue_time_seconds`, `…_prefill_…`, `…_decode_…`).
pub const VLLM_REQUEST_LATENCY_BUCKETS: &[&str] = &[
    "0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0",
    "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0",
];

/// `vllm:request_success_total{finished_reason}`: every finished request, aborted and failed
/// ones included despite the name. Reasons: `stop`, `length`, `abort`, `error`, `repetition`.
pub const VLLM_REQUEST_SUCCESS: &str = "vllm:request_success_total";

/// `finished_reason` values that count against the error-rate objective. `stop`, `length` and
/// `repetition` are completed responses and count as good.
pub const VLLM_BAD_FINISHED_REASONS: &[&str] = &["abort", "error"];

/// `http_requests_total{handler,method,status}` from prometheus-fastapi-instrumentator in
/// vLLM's API server; `status` is grouped (`2xx`, `4xx`, `5xx`) and carries no model label.
pub const VLLM_HTTP_REQUESTS: &str = "http_requests_total";

/// `vllm:num_requests_waiting`: requests admitted to the engine but not yet scheduled.
pub const VLLM_NUM_REQUESTS_WAITING: &str = "vllm:num_requests_waiting";

/// `vllm:num_requests_running`: requests in the running batch; a gauge every engine exports
/// from start, used to find the scrape targets that serve a class.
pub const VLLM_NUM_REQUESTS_RUNNING: &str = "vllm:num_requests_running";

/// `vllm:kv_cache_usage_perc`: share of KV-cache blocks in use, a 0–1 ratio despite the name.
pub const VLLM_KV_CACHE_USAGE: &str = "vllm:kv_cache_usage_perc";

/// `vllm:request_queue_time_seconds`: engine queue (WAITING phase) per request.
pub const VLLM_QUEUE_TIME: &str = "vllm:request_queue_time_seconds";

/// Where a latency histogram comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramSpec {
    /// The objective's signal.
    pub signal: LatencySignal,
    /// Family name (without `_bucket`, `_count`, `_sum`).
    pub metric: &'static str,
    /// Finite bucket bounds in seconds as printed in `le`; empty when the histogram's buckets
    /// are configured to include every SLO threshold (the gateway's).
    pub buckets: &'static [&'static str],
}

/// vLLM's histogram for `signal`. All are server-side: TTFT and E2E start at the API server's
/// arrival, so they miss the network and the client that [`headroom_core::signal`] measures.
pub fn vllm_histogram(signal: LatencySignal) -> HistogramSpec {
    let (metric, buckets) = match signal {
        LatencySignal::Ttft => ("vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS),
        LatencySignal::Itl => ("vllm:inter_token_latency_seconds", VLLM_ITL_BUCKETS),
        LatencySignal::Tpot => (
            "vllm:request_time_per_output_token_seconds",
            VLLM_ITL_BUCKETS,
        ),
        LatencySignal::E2e => (
            "vllm:e2e_request_latency_seconds",
            VLLM_REQUEST_LATENCY_BUCKETS,
        ),
        LatencySignal::QueueTime => (VLLM_QUEUE_TIME, VLLM_REQUEST_LATENCY_BUCKETS),
    };
    HistogramSpec {
        signal,
        metric,
        buckets,
    }
}

/// The gateway's finished requests by `class`, `tenant` and `outcome` (crate `headroom-gateway`).
pub const GATEWAY_REQUESTS: &str = "headroom_gateway_requests_total";

/// Gateway outcomes that burn the error budget: the service failed the request (an upstream
/// 5xx/429/unreachable/broken stream, a timeout, or the gateway's own admission refusal).
pub const GATEWAY_BAD_OUTCOMES: [&str; 3] = ["upstream_error", "timeout", "rejected"];

/// Gateway outcomes that are not events of the service at all: the client hung up, or sent a
/// request the upstream refused as invalid (400, 404, 413, 422).
pub const GATEWAY_NOT_SERVICE_OUTCOMES: [&str; 2] = ["client_cancel", "invalid_request"];

/// Label that carries the request class on the gateway's series.
pub const GATEWAY_CLASS_LABEL: &str = "class";

/// The gateway's admission wait per request, s (histogram by `class`, `tenant`): part of the
/// TTFT users see behind the gateway, which the engine never sees.
pub const GATEWAY_QUEUE: &str = "headroom_gateway_queue_seconds";

/// The time the gateway itself adds before the first byte, s (histogram by `class`, `tenant`).
pub const GATEWAY_OVERHEAD: &str = "headroom_gateway_overhead_seconds";

/// Sequences holding the gateway's admission slots (gauge by `class`).
pub const GATEWAY_IN_FLIGHT: &str = "headroom_gateway_in_flight";

/// Requests waiting for one of the gateway's admission slots (gauge by `class`).
pub const GATEWAY_QUEUED: &str = "headroom_gateway_queued";

/// The Headroom gateway's histogram for `signal`, measured at the request boundary as
/// [`headroom_core::signal`] defines it, labelled `class`. The gateway builds its buckets from
/// the same `slo.yaml`, so every SLO threshold is a bucket bound, printed with
/// [`crate::promql::le_value`]. `None` for queue time, which only the engine can see.
pub fn gateway_histogram(signal: LatencySignal) -> Option<HistogramSpec> {
    let metric = match signal {
        LatencySignal::Ttft => "headroom_gateway_ttft_seconds",
        LatencySignal::Itl => "headroom_gateway_itl_seconds",
        LatencySignal::Tpot => "headroom_gateway_tpot_seconds",
        LatencySignal::E2e => "headroom_gateway_e2e_seconds",
        LatencySignal::QueueTime => return None,
    };
    Some(HistogramSpec {
        signal,
        metric,
        buckets: &[],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The `le` values of each `…_bucket` family in a real vLLM 0.32 scrape, without `+Inf`.
    fn fixture_buckets() -> BTreeMap<String, Vec<String>> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/vllm/v0.32-cpu-after-burst-c16.prom"
        );
        let text = std::fs::read_to_string(path).expect("fixture present");
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, rest)) = line.split_once('{') else {
                continue;
            };
            let Some(family) = name.strip_suffix("_bucket") else {
                continue;
            };
            let le = rest
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap();
            let v = out.entry(family.to_string()).or_default();
            if le != "+Inf" && !v.iter().any(|x| x == le) {
                v.push(le.to_string());
            }
        }
        out
    }

    #[test]
    fn bucket_lists_match_real_vllm_scrape() {
        let fx = fixture_buckets();
        for s in [
            LatencySignal::Ttft,
            LatencySignal::Itl,
            LatencySignal::Tpot,
            LatencySignal::E2e,
            LatencySignal::QueueTime,
        ] {
            let h = vllm_histogram(s);
            let got = fx
                .get(h.metric)
                .unwrap_or_else(|| panic!("{} in fixture", h.metric));
            assert_eq!(got, &h.buckets.to_vec(), "{}", h.metric);
        }
    }

    #[test]
    fn gateway_has_no_queue_time() {
        assert!(gateway_histogram(LatencySignal::QueueTime).is_none());
        assert_eq!(
            gateway_histogram(LatencySignal::Ttft).unwrap().metric,
            "headroom_gateway_ttft_seconds"
        );
    }
}
