//! The gateway's own Prometheus series, served at `/metrics` on the listen address.
//!
//! | series | type | labels | meaning |
//! |---|---|---|---|
//! | `headroom_gateway_ttft_seconds` | histogram | class, tenant | acceptance → first chunk carrying generated text (streams only) |
//! | `headroom_gateway_itl_seconds` | histogram | class, tenant | each gap between content chunks (streams only) |
//! | `headroom_gateway_tpot_seconds` | histogram | class, tenant | (E2E − TTFT) / (output tokens − 1), per stream with `usage` |
//! | `headroom_gateway_e2e_seconds` | histogram | class, tenant | acceptance → end of the response, per request ending `stop` or `length`, streaming or not |
//! | `headroom_gateway_queue_seconds` | histogram | class, tenant | time waiting for an admission slot in the gateway, per request that asked for one except queue-full refusals (see [`QueueWait`]) |
//! | `headroom_gateway_overhead_seconds` | histogram | class, tenant | time the gateway itself adds before the first byte (see [`ClassMetrics::overhead`]) |
//! | `headroom_gateway_requests_total` | counter | class, tenant, outcome | finished requests by [`GatewayOutcome`] |
//! | `headroom_gateway_in_flight` | gauge | class | sequences holding admission slots (a request holds one per prompt × `n`) |
//! | `headroom_gateway_queued` | gauge | class | requests waiting for one |
//! | `headroom_gateway_invalid_requests_total` | counter | reason | requests refused before classification: `bad_path`, `not_found`, `unauthorized`, `body_too_large`, `body_timeout`, `body_unreadable`, `malformed_json` ([`InvalidReason`]) |
//! | `headroom_gateway_passthrough_errors_total` | counter | outcome | requests on unmeasured routes (`/v1/models`, `/health`, …) the gateway answered itself: `upstream_error`, `timeout`, `invalid_request` |
//!
//! Every answer the gateway writes itself is counted in exactly one of these counters, chosen
//! in one place ([`crate::rescue`], which has the table of statuses and counts).
//!
//! Outcomes, and which count against an error objective (`headroom_slo::catalogue`'s
//! `GATEWAY_BAD_OUTCOMES`, used by `headroom slo rules --latency-source gateway`): `stop` and
//! `length` are answers; `upstream_error`, `timeout` and `rejected` (the gateway's own admission
//! refused the request: the client got a 429 or 503 and no answer) are the error budget's bad
//! events; `client_cancel` (the client left first) and `invalid_request` (the upstream refused
//! the client's request as invalid: 400, 404 unknown model, 413, 422, …) are not events of the
//! service at all, so clients' bad requests neither burn nor dilute the budget. Which upstream
//! statuses are which: [`crate::proxy::status_outcome`].
//!
//! The signals are [`headroom_core::signal`]'s definitions with the gateway's acceptance (the
//! moment the request head was read) as the start. Names and the `class` label are those
//! `headroom-slo` queries (`catalogue::gateway_histogram`). Bucket bounds come from
//! [`bucket_bounds`]: a fixed ladder plus, for every threshold of the signal in `slo.yaml` (without
//! `--slo`, the built-in SLO's, which every other command falls back to), the threshold itself
//! and its neighbourhood, so `histogram_quantile` and the SLO ratio rules are
//! exact at the threshold. Bounds are rounded to 12 significant digits so `le` prints as
//! `headroom_slo::promql::le_value` expects (`0.3`, not `0.30000000000000004`).
//!
//! Label values are bounded by construction: classes and tenants come from the configuration
//! (plus `other`), outcomes and reasons from fixed lists. Handles for a (class, tenant) pair are
//! created on first use and cached, so the hot path never hashes a label set. The pairs
//! (class, `other`) are created at startup, so every class's histograms and outcome counters are
//! exported at zero from the first scrape (see [`Metrics::new`]).

use headroom_core::signal::LatencySignal;
use headroom_core::slo::{DEFAULT_SLO_YAML, Objective, SloFile};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

/// How a request handled by the gateway ended (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatewayOutcome {
    /// The stream or body ended with `finish_reason: stop` (or another normal reason).
    Stop,
    /// `finish_reason: length`.
    Length,
    /// The client went away before the response ended (while queued for admission, while the
    /// upstream was generating, or mid-body); the upstream request was cancelled.
    ClientCancel,
    /// The upstream could not be reached, answered 5xx, 429, 408 or an unexpected 1xx/3xx (or
    /// 401/403 to the gateway's own `upstream_api_key`), broke mid-stream, sent an error event,
    /// or the engine aborted the request. A failure of the serving path.
    UpstreamError,
    /// A gateway timeout (first byte, idle or total) ended the request.
    Timeout,
    /// Admission refused the request (queue full or queue timeout).
    Rejected,
    /// The upstream refused the client's request as invalid: a 4xx other than 408 and 429 (and
    /// other than 401/403 when the gateway sets the upstream key), e.g. 400 bad parameters, 404
    /// unknown model, 413, 422; or the gateway did, after classification (a request wider than
    /// its class's whole limit, a URI it cannot forward: [`crate::rescue`]). The client's fault,
    /// not an upstream error: kept out of `upstream_error` so clients' bad requests do not burn
    /// the error budget.
    InvalidRequest,
}

impl GatewayOutcome {
    /// Every outcome, in label order.
    pub const ALL: [GatewayOutcome; 7] = [
        GatewayOutcome::Stop,
        GatewayOutcome::Length,
        GatewayOutcome::ClientCancel,
        GatewayOutcome::UpstreamError,
        GatewayOutcome::Timeout,
        GatewayOutcome::Rejected,
        GatewayOutcome::InvalidRequest,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            GatewayOutcome::Stop => "stop",
            GatewayOutcome::Length => "length",
            GatewayOutcome::ClientCancel => "client_cancel",
            GatewayOutcome::UpstreamError => "upstream_error",
            GatewayOutcome::Timeout => "timeout",
            GatewayOutcome::Rejected => "rejected",
            GatewayOutcome::InvalidRequest => "invalid_request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a request was refused before it could be classified (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidReason {
    /// 400: the body is not a JSON object.
    MalformedJson,
    /// 413: the body is over `max_body_bytes`.
    BodyTooLarge,
    /// 408: the body did not arrive within `timeouts.body_read`.
    BodyTimeout,
    /// 400: the body could not be read (a broken chunked encoding, a connection error while it
    /// arrived).
    BodyUnreadable,
    /// 401: missing or wrong API key.
    Unauthorized,
    /// 404: a path the gateway does not forward.
    NotFound,
    /// 400: a path that is not canonical (see [`crate::path`]).
    BadPath,
}

impl InvalidReason {
    /// Every reason, in label order.
    pub const ALL: [InvalidReason; 7] = [
        InvalidReason::MalformedJson,
        InvalidReason::BodyTooLarge,
        InvalidReason::BodyTimeout,
        InvalidReason::BodyUnreadable,
        InvalidReason::Unauthorized,
        InvalidReason::NotFound,
        InvalidReason::BadPath,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            InvalidReason::MalformedJson => "malformed_json",
            InvalidReason::BodyTooLarge => "body_too_large",
            InvalidReason::BodyTimeout => "body_timeout",
            InvalidReason::BodyUnreadable => "body_unreadable",
            InvalidReason::Unauthorized => "unauthorized",
            InvalidReason::NotFound => "not_found",
            InvalidReason::BadPath => "bad_path",
        }
    }
}

/// The outcomes of `headroom_gateway_passthrough_errors_total` exported from the first scrape:
/// those a rejection of an unmeasured request can have ([`crate::rescue`]).
pub const PASSTHROUGH_OUTCOMES: [GatewayOutcome; 3] = [
    GatewayOutcome::UpstreamError,
    GatewayOutcome::Timeout,
    GatewayOutcome::InvalidRequest,
];

/// The fixed part of every latency histogram's bounds, seconds: 0.5 ms to 5 min.
pub const BASE_BOUNDS_S: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
    60.0, 120.0, 300.0,
];

/// Bucket bounds of `headroom_gateway_overhead_seconds`, seconds: 0.1 ms to 1 s, with the
/// gateway's own budget (0.5 ms of added TTFT) as a bound so the share within it is exact.
pub const OVERHEAD_BOUNDS_S: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Factors around each SLO threshold that become bounds too (its neighbourhood).
pub const NEIGHBOURHOOD: [f64; 8] = [0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0];

/// Smallest bound kept, seconds (finer bounds would print with an exponent).
const MIN_BOUND_S: f64 = 1e-4;

/// `x` rounded to 12 significant digits, the form `le_value` prints.
fn clean(x: f64) -> f64 {
    format!("{x:.11e}").parse().unwrap_or(x)
}

/// Bucket bounds of the gateway histogram for `signal`, ascending, in seconds: [`BASE_BOUNDS_S`]
/// plus `t × f` for every threshold `t` of `signal` in any class of `slo` and every `f` in
/// [`NEIGHBOURHOOD`] (so `t` itself), rounded to 12 significant digits, at least 0.1 ms.
/// [`LatencySignal::QueueTime`] thresholds shape the gateway's queue histogram. Without an SLO
/// the built-in one ([`DEFAULT_SLO_YAML`]) gives the thresholds: `headroom slo rules`, the sweep
/// and diagnose fall back to it too, so its 300 ms TTFT is a bucket of the gateway either way.
pub fn bucket_bounds(slo: Option<&SloFile>, signal: LatencySignal) -> Vec<f64> {
    let builtin;
    let slo = match slo {
        Some(s) => s,
        None => {
            builtin = SloFile::parse(DEFAULT_SLO_YAML, std::path::Path::new("built-in slo.yaml"))
                .expect("the built-in SLO parses");
            &builtin
        }
    };
    let mut v: Vec<f64> = BASE_BOUNDS_S.to_vec();
    for class in slo.objectives.keys() {
        for o in slo.spec_for(class).objectives {
            if let Objective::Latency {
                signal: s,
                threshold_s,
                ..
            } = o
                && s == signal
            {
                v.extend(NEIGHBOURHOOD.iter().map(|f| threshold_s * f));
            }
        }
    }
    let mut v: Vec<f64> = v
        .into_iter()
        .map(clean)
        .filter(|x| x.is_finite() && *x >= MIN_BOUND_S)
        .collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

#[derive(Debug, Clone)]
struct Bounds(Arc<Vec<f64>>);

impl MetricConstructor<Histogram> for Bounds {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

type Labels2 = [(&'static str, String); 2];
type HistFamily = Family<Labels2, Histogram, Bounds>;

/// Metric handles of one (class, tenant) pair: cloned out of the families once, then used
/// without any lookup.
#[derive(Debug)]
pub struct ClassMetrics {
    /// TTFT, seconds.
    pub ttft: Histogram,
    /// ITL, seconds.
    pub itl: Histogram,
    /// TPOT, seconds.
    pub tpot: Histogram,
    /// E2E, seconds.
    pub e2e: Histogram,
    /// Time queued in the gateway, seconds.
    pub queue: Histogram,
    /// What the gateway itself adds to TTFT, seconds, one observation per request that got a
    /// response head from its upstream: acceptance → the request handed to the upstream
    /// connection, minus the admission wait, plus upstream response head → head handed to the
    /// client's connection. Body frames are forwarded in the poll that receives them, so the
    /// first content chunk adds nothing further beyond the gateway's event-loop delay, which
    /// no timestamp inside the process can see (a busy or CPU-starved gateway shows up in
    /// TTFT, not here). Bounds: [`OVERHEAD_BOUNDS_S`].
    pub overhead: Histogram,
    outcomes: [Counter; 7],
}

impl ClassMetrics {
    /// Counts one finished request.
    pub fn outcome(&self, o: GatewayOutcome) {
        self.outcomes[o.index()].inc();
    }

    /// Starts timing a request's wait for an admission slot of a limited class (see
    /// [`QueueWait`]).
    pub fn queue_wait(self: &Arc<Self>) -> QueueWait {
        QueueWait {
            m: Some(self.clone()),
            t0: std::time::Instant::now(),
        }
    }
}

/// One request's wait for an admission slot, observed in `headroom_gateway_queue_seconds` however
/// it ends, so the histogram holds the longest waits too, not only those that ended in a slot:
/// * admitted: the wait [`crate::admit::Limiter::admit`] measured ([`QueueWait::admitted`]);
/// * refused after `queue_timeout` (503): the time it waited, at least `queue_timeout`
///   ([`QueueWait::timed_out`]);
/// * the client left the queue (the handler was dropped while waiting): the time until it left,
///   observed on drop (a lower bound of the wait it would have had).
///
/// A queue-full refusal (429, [`QueueWait::queue_full`]) is **not** observed: the request never
/// entered the queue, and counting it as a 0 s wait would make the queue look fastest exactly
/// when it overflows (many 429s would pull every percentile of queue time down). Those requests
/// are counted in `headroom_gateway_requests_total{outcome="rejected"}`.
#[derive(Debug)]
pub struct QueueWait {
    m: Option<Arc<ClassMetrics>>,
    t0: std::time::Instant,
}

impl QueueWait {
    /// Observes the wait of an admitted request, `waited` as admission measured it.
    pub fn admitted(mut self, waited: std::time::Duration) {
        if let Some(m) = self.m.take() {
            m.queue.observe(waited.as_secs_f64());
        }
    }

    /// Observes the wait of a request refused after `queue_timeout`, `waited` as admission
    /// measured it.
    pub fn timed_out(self, waited: std::time::Duration) {
        self.admitted(waited);
    }

    /// A queue-full refusal: nothing is observed.
    pub fn queue_full(mut self) {
        self.m = None;
    }
}

impl Drop for QueueWait {
    fn drop(&mut self) {
        if let Some(m) = self.m.take() {
            m.queue.observe(self.t0.elapsed().as_secs_f64());
        }
    }
}

/// The registry and every family; see the module doc for the series.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ttft: HistFamily,
    itl: HistFamily,
    tpot: HistFamily,
    e2e: HistFamily,
    queue: HistFamily,
    overhead: HistFamily,
    requests: Family<[(&'static str, String); 3], Counter>,
    in_flight: Family<[(&'static str, String); 1], Gauge>,
    queued: Family<[(&'static str, String); 1], Gauge>,
    invalid: Vec<Counter>,
    passthrough: Family<[(&'static str, String); 1], Counter>,
    classes: Vec<String>,
    tenants: Vec<String>,
    handles: Vec<OnceLock<Arc<ClassMetrics>>>,
}

impl Metrics {
    /// Families for `classes` × (`tenants` + `other`), with bounds from `slo`.
    ///
    /// Every class's series for tenant [`crate::config::OTHER_TENANT`] are created here, at
    /// zero, so they are exported from the first scrape: the six latency histograms (every
    /// bucket, `_sum` and `_count` at 0) and `headroom_gateway_requests_total` for each of the
    /// seven outcomes. This is Prometheus's instrumentation guidance ("avoid missing metrics":
    /// initialise the label sets known in advance): without it a class that has not yet been
    /// requested since a restart has no series at all, so the `absent()` alerts of `headroom slo
    /// rules --latency-source gateway` fire for a merely quiet class, and a series born at 1 on
    /// the first request hides that request from `rate()` (no earlier sample to differ from).
    /// Only `other` is initialised, not every allowlisted tenant: one label set per class is
    /// what the SLO rules need (they sum over tenants), and it keeps an idle gateway at about
    /// 140 series per class (six histograms of 16–40 lines each, seven counters) rather than
    /// that × (tenants + 1), up to 257 × 64 classes. An allowlisted tenant's series still appear
    /// at its first request in the class (with that first request invisible to `rate()`).
    pub fn new(classes: &[String], tenants: &[String], slo: Option<&SloFile>) -> Metrics {
        let mut registry = Registry::default();
        let hist = |signal| Bounds(Arc::new(bucket_bounds(slo, signal)));
        let ttft = HistFamily::new_with_constructor(hist(LatencySignal::Ttft));
        let itl = HistFamily::new_with_constructor(hist(LatencySignal::Itl));
        let tpot = HistFamily::new_with_constructor(hist(LatencySignal::Tpot));
        let e2e = HistFamily::new_with_constructor(hist(LatencySignal::E2e));
        let queue = HistFamily::new_with_constructor(hist(LatencySignal::QueueTime));
        registry.register(
            "headroom_gateway_ttft_seconds",
            "Time to first token from acceptance at the gateway (first chunk carrying generated text)",
            ttft.clone(),
        );
        registry.register(
            "headroom_gateway_itl_seconds",
            "Inter-token latency: each gap between consecutive content chunks",
            itl.clone(),
        );
        registry.register(
            "headroom_gateway_tpot_seconds",
            "Time per output token: (E2E - TTFT) / (output tokens - 1), requests with usage",
            tpot.clone(),
        );
        registry.register(
            "headroom_gateway_e2e_seconds",
            "End-to-end latency from acceptance at the gateway to the end of the response",
            e2e.clone(),
        );
        registry.register(
            "headroom_gateway_queue_seconds",
            "Time waiting for a per-class admission slot in the gateway",
            queue.clone(),
        );
        let overhead =
            HistFamily::new_with_constructor(Bounds(Arc::new(OVERHEAD_BOUNDS_S.to_vec())));
        registry.register(
            "headroom_gateway_overhead_seconds",
            "Time the gateway adds before the first byte: acceptance to upstream dispatch minus the admission wait, plus upstream response head to client",
            overhead.clone(),
        );
        let requests = Family::<[(&'static str, String); 3], Counter>::default();
        registry.register(
            "headroom_gateway_requests",
            "Finished requests by class, tenant and outcome",
            requests.clone(),
        );
        let in_flight = Family::<[(&'static str, String); 1], Gauge>::default();
        registry.register(
            "headroom_gateway_in_flight",
            "Sequences holding admission slots (one per prompt of a batch × n)",
            in_flight.clone(),
        );
        let queued = Family::<[(&'static str, String); 1], Gauge>::default();
        registry.register(
            "headroom_gateway_queued",
            "Requests waiting for an admission slot",
            queued.clone(),
        );
        let invalid_f = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register(
            "headroom_gateway_invalid_requests",
            "Requests refused before classification, by reason",
            invalid_f.clone(),
        );
        let invalid = InvalidReason::ALL
            .iter()
            .map(|r| invalid_f.get_or_create_owned(&[("reason", r.label().to_string())]))
            .collect();
        let passthrough = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register(
            "headroom_gateway_passthrough_errors",
            "Requests on unmeasured routes the gateway answered itself, by outcome",
            passthrough.clone(),
        );
        // The outcomes a rejection on an unmeasured route can have (see `crate::rescue`),
        // exported at zero from the first scrape.
        for o in PASSTHROUGH_OUTCOMES {
            passthrough.get_or_create_owned(&[("outcome", o.label().to_string())]);
        }
        let mut tenants = tenants.to_vec();
        tenants.push(crate::config::OTHER_TENANT.to_string());
        let handles = (0..classes.len() * tenants.len())
            .map(|_| OnceLock::new())
            .collect();
        let m = Metrics {
            registry,
            ttft,
            itl,
            tpot,
            e2e,
            queue,
            overhead,
            requests,
            in_flight,
            queued,
            invalid,
            passthrough,
            classes: classes.to_vec(),
            tenants,
            handles,
        };
        // Every class's series exist from the first scrape, at zero, for tenant `other`.
        let other = m.tenants.len() - 1;
        for c in 0..m.classes.len() {
            m.class(c, other);
        }
        m
    }

    /// Handles of (`class`, `tenant`) (indices as in [`crate::classify::Classified`]).
    ///
    /// # Panics
    /// Never for indices from classification; out-of-range indices are clamped to the last
    /// class and `other`.
    pub fn class(&self, class: usize, tenant: usize) -> Arc<ClassMetrics> {
        let c = class.min(self.classes.len() - 1);
        let t = tenant.min(self.tenants.len() - 1);
        self.handles[c * self.tenants.len() + t]
            .get_or_init(|| {
                let l: Labels2 = [
                    ("class", self.classes[c].clone()),
                    ("tenant", self.tenants[t].clone()),
                ];
                let outcomes = GatewayOutcome::ALL.map(|o| {
                    self.requests.get_or_create_owned(&[
                        ("class", self.classes[c].clone()),
                        ("tenant", self.tenants[t].clone()),
                        ("outcome", o.label().to_string()),
                    ])
                });
                Arc::new(ClassMetrics {
                    ttft: self.ttft.get_or_create_owned(&l),
                    itl: self.itl.get_or_create_owned(&l),
                    tpot: self.tpot.get_or_create_owned(&l),
                    e2e: self.e2e.get_or_create_owned(&l),
                    queue: self.queue.get_or_create_owned(&l),
                    overhead: self.overhead.get_or_create_owned(&l),
                    outcomes,
                })
            })
            .clone()
    }

    /// The `in_flight` and `queued` gauges of `class`.
    pub fn admission_gauges(&self, class: &str) -> (Gauge, Gauge) {
        let l = [("class", class.to_string())];
        (
            self.in_flight.get_or_create_owned(&l),
            self.queued.get_or_create_owned(&l),
        )
    }

    /// Counts a request refused before classification.
    pub fn invalid(&self, r: InvalidReason) {
        if let Some(c) = self.invalid.get(r as usize) {
            c.inc();
        }
    }

    /// Counts a request on an unmeasured route that the gateway answered itself with outcome
    /// `o`.
    pub fn passthrough_error(&self, o: GatewayOutcome) {
        self.passthrough
            .get_or_create(&[("outcome", o.label().to_string())])
            .inc();
    }

    /// The OpenMetrics text of every series (content type [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(64 * 1024);
        // Writing into a String cannot fail.
        let _ = encode(&mut s, &self.registry);
        s
    }
}

/// Content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn slo() -> SloFile {
        SloFile::parse(
            "objectives:\n  \"*\": {ttft: {p95: 300ms}, itl: {p95: 50ms}, queue_time: {p99: 10ms}}\n  long: {ttft: {p99: 2.5s}, e2e: {p50: 7s}}\n",
            Path::new("slo.yaml"),
        )
        .unwrap()
    }

    #[test]
    fn bounds_include_thresholds_and_neighbourhood() {
        let s = slo();
        let b = bucket_bounds(Some(&s), LatencySignal::Ttft);
        // 300 ms × {0.5 … 2} = 0.15, 0.24, 0.27, 0.3, 0.33, 0.375, 0.45, 0.6 (by hand).
        for x in [
            0.15, 0.24, 0.27, 0.3, 0.33, 0.375, 0.45, 0.6, 1.25, 2.0, 2.25, 2.5, 2.75, 3.125, 3.75,
            5.0,
        ] {
            assert!(b.contains(&x), "{x} missing from {b:?}");
        }
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        let itl = bucket_bounds(Some(&s), LatencySignal::Itl);
        for x in [0.025, 0.04, 0.045, 0.05, 0.055, 0.0625, 0.075, 0.1] {
            assert!(itl.contains(&x), "{x} missing from {itl:?}");
        }
        assert_eq!(
            bucket_bounds(None, LatencySignal::Tpot),
            BASE_BOUNDS_S.to_vec()
        );
        assert!(bucket_bounds(Some(&s), LatencySignal::QueueTime).contains(&0.011));
    }

    /// Without `--slo` the gateway measures against the built-in SLO, as every other command
    /// does: its TTFT p95 < 300 ms, ITL p95 < 50 ms and queue p95 < 300 ms are buckets (there
    /// was once no 0.3 s TTFT bucket, so `slo rules --latency-source gateway` alerted on a
    /// threshold the gateway could not count).
    #[test]
    fn without_an_slo_the_built_in_thresholds_are_buckets() {
        for (signal, t) in [
            (LatencySignal::Ttft, 0.3),
            (LatencySignal::Itl, 0.05),
            (LatencySignal::QueueTime, 0.3),
        ] {
            let b = bucket_bounds(None, signal);
            assert!(b.contains(&t), "{signal:?}: {t} missing from {b:?}");
            assert!(
                b.contains(&clean(t * 1.1)),
                "{signal:?}: neighbourhood of {t}"
            );
        }
    }

    #[test]
    fn le_values_match_what_slo_rules_query() {
        let s = slo();
        let m = Metrics::new(&["chat".into(), "long".into()], &["t1".into()], Some(&s));
        m.class(0, 0).ttft.observe(0.29);
        m.class(1, 1).e2e.observe(6.0);
        let text = m.render();
        for (family, signal) in [
            ("headroom_gateway_ttft_seconds", LatencySignal::Ttft),
            ("headroom_gateway_e2e_seconds", LatencySignal::E2e),
        ] {
            let bounds = bucket_bounds(Some(&s), signal);
            let les: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("{family}_bucket{{")))
                // One label set: every class also has tenant `other`'s series from the start.
                .filter(|l| l.contains("class=\"chat\",tenant=\"t1\""))
                .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
                .filter(|le| *le != "+Inf")
                .collect();
            let want: Vec<String> = bounds
                .iter()
                .map(|b| headroom_slo::promql::le_value(*b))
                .collect();
            assert_eq!(les, want, "{family}");
        }
        // The SLO threshold's own bucket, as the slo rules select it.
        assert!(
            text.contains(
                "headroom_gateway_ttft_seconds_bucket{le=\"0.3\",class=\"chat\",tenant=\"t1\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains(
            "headroom_gateway_e2e_seconds_bucket{le=\"7.0\",class=\"long\",tenant=\"other\"} 1"
        ));
        assert!(text.contains(
            "headroom_gateway_requests_total{class=\"chat\",tenant=\"t1\",outcome=\"rejected\"} 0"
        ));
    }

    #[test]
    fn smallest_bounds_print_without_exponent() {
        let s = SloFile::parse(
            "objectives:\n  \"*\": {itl: {p50: 150us}}\n",
            Path::new("slo.yaml"),
        )
        .unwrap();
        let b = bucket_bounds(Some(&s), LatencySignal::Itl);
        assert_eq!(b[0], 1.2e-4); // 150 µs × 0.8; 75 µs is below the 0.1 ms floor
        let m = Metrics::new(&["c".into()], &[], Some(&s));
        m.class(0, 0).itl.observe(0.0001);
        let text = m.render();
        for x in &b {
            let le = headroom_slo::promql::le_value(*x);
            assert!(text.contains(&format!("le=\"{le}\"")), "{le} not in output");
        }
    }
}
