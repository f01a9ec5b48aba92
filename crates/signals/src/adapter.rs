//! Engine and GPU adapters: from a parsed [`Exposition`] to canonical signals.
//!
//! What lives here: which metric names each engine (vLLM across versions, SGLang, TGI,
//! llama.cpp) and dcgm-exporter use for each canonical signal, with units; engine detection; and
//! the per-scrape [`EngineSnapshot`] / [`DcgmSnapshot`]. What does not: differences over time
//! (that is [`crate::window`]).
//!
//! The mapping is data ([`MAPPINGS`]): one row per (engine, signal) with the candidate names in
//! order of preference. For renamed vLLM metrics both names are listed, the current one first,
//! and **only the first present is used** — vLLM 0.9.2–0.10 exported both
//! `vllm:kv_cache_usage_perc` and `vllm:gpu_cache_usage_perc` (`metrics.md` §1.4), and adding them
//! would double the value.
//!
//! Series are kept per label set (one per `model_name` × `engine` for vLLM), so that counter
//! resets are handled per series; [`Selection`] keeps only some series (one model, one
//! data-parallel engine), and everything selected is summed by the window. To see engines or
//! models apart, list them with [`instances`] and build one window per instance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::exposition::{Exposition, Labels, MetricType, parse_le};
use crate::quality::{self, DataWarning, Problem};

/// The inference engine behind a scrape, detected from metric names and labels
/// (`metrics.md` §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// vLLM (`vllm:` metrics with `model_name`, usually `engine`).
    Vllm,
    /// The vllm-project/production-stack router: `vllm:` series carrying `server` and no
    /// `engine` (`metrics.md` §1.7). Its series are the router's view, not an engine's.
    VllmRouter,
    /// SGLang (`sglang:`).
    Sglang,
    /// HuggingFace TGI (`tgi_`).
    Tgi,
    /// llama.cpp server (`llamacpp:`).
    LlamaCpp,
    /// None of the above.
    Unknown,
}

impl Engine {
    /// Lowercase name (`vllm`, `vllm_router`, `sglang`, `tgi`, `llama.cpp`, `unknown`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::VllmRouter => "vllm_router",
            Engine::Sglang => "sglang",
            Engine::Tgi => "tgi",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Unknown => "unknown",
        }
    }
}

/// A canonical engine-side signal. The vLLM meaning is the reference (`metrics.md` §1.2); units are
/// in the doc of each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    // --- counters ---
    /// Prompt tokens (cached ones included), tokens. vLLM `prompt_tokens_total`.
    PromptTokens,
    /// Generated tokens, tokens. vLLM `generation_tokens_total`.
    GenerationTokens,
    /// Preemptions (KV-cache pressure), count. vLLM `num_preemptions_total`; SGLang retractions.
    Preemptions,
    /// Prefix-cache lookups, tokens (blocks before vLLM ≈0.9.0). vLLM `prefix_cache_queries_total`.
    PrefixCacheQueries,
    /// Prefix-cache hits, tokens. vLLM `prefix_cache_hits_total`; SGLang `cached_tokens_total`.
    PrefixCacheHits,
    /// Finished requests, keyed by `finished_reason` (`stop`, `length`, `abort`, `error`,
    /// `repetition`; engines without a reason use `unspecified`, TGI failures `error:<err>`).
    RequestsFinished,
    /// HTTP requests by status class (`2xx`, `4xx`, `5xx`), from the API server.
    HttpRequests,
    /// Requests refused at admission (HTTP 503), keyed by `reason`. vLLM
    /// `admission_rejections_total`.
    AdmissionRejections,
    /// Seconds spent processing prompts (llama.cpp `prompt_seconds_total`).
    PrefillBusySeconds,
    /// Seconds spent generating (llama.cpp `tokens_predicted_seconds_total`).
    DecodeBusySeconds,
    // --- gauges ---
    /// Requests in the running batch, count (summed over series).
    Running,
    /// Waiting requests, count (summed over series).
    Waiting,
    /// Requests waiting for capacity (scheduling slot or KV), count. vLLM
    /// `num_requests_waiting_by_reason{reason="capacity"}` (≈v0.20+).
    WaitingForCapacity,
    /// KV-cache blocks in use, ratio 0–1 (the maximum over series: the fullest engine preempts
    /// first). vLLM `kv_cache_usage_perc` (a ratio despite its name), SGLang `token_usage`.
    KvCacheUsage,
    // --- histograms ---
    /// Queue time, s: engine QUEUED → first SCHEDULED. vLLM `request_queue_time_seconds`.
    QueueTime,
    /// Prefill time, s: first SCHEDULED → first token. vLLM `request_prefill_time_seconds`.
    PrefillTime,
    /// Decode time, s: first token → last token. vLLM `request_decode_time_seconds`.
    DecodeTime,
    /// Inference time, s: prefill + decode. vLLM `request_inference_time_seconds`.
    InferenceTime,
    /// Server TTFT, s: arrival → first token (includes queueing). vLLM
    /// `time_to_first_token_seconds`.
    Ttft,
    /// Server ITL, s: gap between engine outputs, one observation per step. vLLM
    /// `inter_token_latency_seconds` (`time_per_output_token_seconds` before v0.11).
    Itl,
    /// Server TPOT, s: per request decode time / (generated − 1). vLLM
    /// `request_time_per_output_token_seconds`; TGI `request_mean_time_per_token_duration`.
    Tpot,
    /// Server end-to-end latency, s. vLLM `e2e_request_latency_seconds`.
    E2e,
    /// Prompt length per finished request, tokens. vLLM `request_prompt_tokens`.
    PromptLength,
    /// Generated length per finished request, tokens. vLLM `request_generation_tokens`.
    GenerationLength,
    /// `max_tokens` parameter per request, tokens. vLLM `request_params_max_tokens`.
    MaxTokensParam,
    /// Tokens per engine step (prefill + decode), tokens. vLLM `iteration_tokens_total`.
    IterationTokens,
    // --- a Headroom gateway's own histograms (no engine exports them) ---
    /// Admission wait in a Headroom gateway, s: acceptance → admission slot granted, per request
    /// that asked for one. `headroom_gateway_queue_seconds`; part of the gateway's TTFT, never of
    /// the engine's.
    GatewayQueueTime,
    /// Time a Headroom gateway itself adds before the first byte, s.
    /// `headroom_gateway_overhead_seconds`.
    GatewayOverhead,
}

/// What kind of series a signal reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// Monotonic counter: deltas over a window.
    Counter,
    /// Gauge: summarised over the window's scrapes.
    Gauge,
    /// Classic histogram: bucket deltas over a window.
    Histogram,
}

impl Signal {
    /// The kind of series behind the signal.
    pub fn kind(self) -> SignalKind {
        use Signal::*;
        match self {
            PromptTokens | GenerationTokens | Preemptions | PrefixCacheQueries
            | PrefixCacheHits | RequestsFinished | HttpRequests | AdmissionRejections
            | PrefillBusySeconds | DecodeBusySeconds => SignalKind::Counter,
            Running | Waiting | WaitingForCapacity | KvCacheUsage => SignalKind::Gauge,
            _ => SignalKind::Histogram,
        }
    }

    /// The server histogram of an SLO's latency signal (TTFT, ITL, TPOT, E2E, queue time).
    pub fn of_latency(s: headroom_core::LatencySignal) -> Signal {
        use headroom_core::LatencySignal as L;
        match s {
            L::Ttft => Signal::Ttft,
            L::Itl => Signal::Itl,
            L::Tpot => Signal::Tpot,
            L::E2e => Signal::E2e,
            L::QueueTime => Signal::QueueTime,
        }
    }

    /// snake_case name used in JSON and in [`crate::window::Window::missing`].
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// How a series' key (the part of its labels a signal is broken down by) is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// Not broken down: key `""`.
    None,
    /// The value of this label (e.g. `finished_reason`, `status`).
    Label(&'static str),
    /// A fixed key for every series (e.g. `unspecified`).
    Const(&'static str),
    /// `prefix` + the value of the label (e.g. `error:` + TGI's `err`).
    Prefixed(&'static str, &'static str),
}

/// One row of the mapping table: for `engine`, `signal` reads the first of `names` present.
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    /// Engine this row applies to.
    pub engine: Engine,
    /// Canonical signal.
    pub signal: Signal,
    /// Candidate sample names (for histograms: the family base without `_bucket`), newest first.
    pub names: &'static [&'static str],
    /// Only series with this label value (e.g. `reason="capacity"`).
    pub only: Option<(&'static str, &'static str)>,
    /// How the breakdown key is formed.
    pub key: KeyRule,
    /// Multiplier to the canonical unit (1 unless a producer uses another unit).
    pub scale: f64,
}

const fn row(engine: Engine, signal: Signal, names: &'static [&'static str]) -> Mapping {
    Mapping {
        engine,
        signal,
        names,
        only: None,
        key: KeyRule::None,
        scale: 1.0,
    }
}

const fn keyed(
    engine: Engine,
    signal: Signal,
    names: &'static [&'static str],
    key: KeyRule,
) -> Mapping {
    Mapping {
        engine,
        signal,
        names,
        only: None,
        key,
        scale: 1.0,
    }
}

use Engine::{LlamaCpp, Sglang, Tgi, Vllm};
use Signal as S;

/// The mapping table: engine metric names per canonical signal (`metrics.md` §1–4).
pub const MAPPINGS: &[Mapping] = &[
    // vLLM (V1; V0 names where they differ). Renames: metrics.md §1.4.
    row(Vllm, S::PromptTokens, &["vllm:prompt_tokens_total"]),
    row(Vllm, S::GenerationTokens, &["vllm:generation_tokens_total"]),
    row(
        Vllm,
        S::Preemptions,
        &["vllm:num_preemptions_total", "vllm:num_preemptions"],
    ),
    row(
        Vllm,
        S::PrefixCacheQueries,
        &[
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ],
    ),
    row(
        Vllm,
        S::PrefixCacheHits,
        &[
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ],
    ),
    keyed(
        Vllm,
        S::RequestsFinished,
        &["vllm:request_success_total"],
        KeyRule::Label("finished_reason"),
    ),
    keyed(
        Vllm,
        S::HttpRequests,
        &["http_requests_total"],
        KeyRule::Label("status"),
    ),
    keyed(
        Vllm,
        S::AdmissionRejections,
        &["vllm:admission_rejections_total"],
        KeyRule::Label("reason"),
    ),
    row(Vllm, S::Running, &["vllm:num_requests_running"]),
    row(Vllm, S::Waiting, &["vllm:num_requests_waiting"]),
    Mapping {
        only: Some(("reason", "capacity")),
        ..row(
            Vllm,
            S::WaitingForCapacity,
            &["vllm:num_requests_waiting_by_reason"],
        )
    },
    row(
        Vllm,
        S::KvCacheUsage,
        &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    ),
    row(Vllm, S::QueueTime, &["vllm:request_queue_time_seconds"]),
    row(Vllm, S::PrefillTime, &["vllm:request_prefill_time_seconds"]),
    row(Vllm, S::DecodeTime, &["vllm:request_decode_time_seconds"]),
    row(
        Vllm,
        S::InferenceTime,
        &["vllm:request_inference_time_seconds"],
    ),
    row(Vllm, S::Ttft, &["vllm:time_to_first_token_seconds"]),
    row(
        Vllm,
        S::Itl,
        &[
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ],
    ),
    row(
        Vllm,
        S::Tpot,
        &["vllm:request_time_per_output_token_seconds"],
    ),
    row(Vllm, S::E2e, &["vllm:e2e_request_latency_seconds"]),
    row(Vllm, S::PromptLength, &["vllm:request_prompt_tokens"]),
    row(
        Vllm,
        S::GenerationLength,
        &["vllm:request_generation_tokens"],
    ),
    row(Vllm, S::MaxTokensParam, &["vllm:request_params_max_tokens"]),
    row(Vllm, S::IterationTokens, &["vllm:iteration_tokens_total"]),
    // SGLang (metrics.md §2).
    row(Sglang, S::PromptTokens, &["sglang:prompt_tokens_total"]),
    row(
        Sglang,
        S::GenerationTokens,
        &["sglang:generation_tokens_total"],
    ),
    row(
        Sglang,
        S::Preemptions,
        &["sglang:num_retracted_requests_total"],
    ),
    // SGLang's hit rate is cached / prompt tokens.
    row(
        Sglang,
        S::PrefixCacheQueries,
        &["sglang:prompt_tokens_total"],
    ),
    row(Sglang, S::PrefixCacheHits, &["sglang:cached_tokens_total"]),
    keyed(
        Sglang,
        S::RequestsFinished,
        &["sglang:num_requests_total"],
        KeyRule::Const("unspecified"),
    ),
    row(Sglang, S::Running, &["sglang:num_running_reqs"]),
    row(Sglang, S::Waiting, &["sglang:num_queue_reqs"]),
    row(Sglang, S::KvCacheUsage, &["sglang:token_usage"]),
    row(Sglang, S::QueueTime, &["sglang:queue_time_seconds"]),
    row(Sglang, S::Ttft, &["sglang:time_to_first_token_seconds"]),
    row(Sglang, S::Itl, &["sglang:inter_token_latency_seconds"]),
    row(Sglang, S::E2e, &["sglang:e2e_request_latency_seconds"]),
    row(Sglang, S::PromptLength, &["sglang:prompt_tokens_histogram"]),
    row(
        Sglang,
        S::GenerationLength,
        &["sglang:generation_tokens_histogram"],
    ),
    // TGI (metrics.md §3): counters without `_total`, no TTFT.
    keyed(
        Tgi,
        S::RequestsFinished,
        &["tgi_request_success"],
        KeyRule::Const("stop"),
    ),
    keyed(
        Tgi,
        S::RequestsFinished,
        &["tgi_request_failure"],
        KeyRule::Prefixed("error:", "err"),
    ),
    row(Tgi, S::Running, &["tgi_batch_current_size"]),
    row(Tgi, S::Waiting, &["tgi_queue_size"]),
    row(Tgi, S::QueueTime, &["tgi_request_queue_duration"]),
    row(Tgi, S::InferenceTime, &["tgi_request_inference_duration"]),
    row(Tgi, S::E2e, &["tgi_request_duration"]),
    row(Tgi, S::Tpot, &["tgi_request_mean_time_per_token_duration"]),
    row(Tgi, S::PromptLength, &["tgi_request_input_length"]),
    row(Tgi, S::GenerationLength, &["tgi_request_generated_tokens"]),
    row(Tgi, S::MaxTokensParam, &["tgi_request_max_new_tokens"]),
    // llama.cpp (metrics.md §4): no labels, no histograms.
    row(LlamaCpp, S::PromptTokens, &["llamacpp:prompt_tokens_total"]),
    row(
        LlamaCpp,
        S::GenerationTokens,
        &["llamacpp:tokens_predicted_total"],
    ),
    row(
        LlamaCpp,
        S::PrefixCacheHits,
        &["llamacpp:prompt_tokens_cached_total"],
    ),
    row(
        LlamaCpp,
        S::PrefillBusySeconds,
        &["llamacpp:prompt_seconds_total"],
    ),
    row(
        LlamaCpp,
        S::DecodeBusySeconds,
        &["llamacpp:tokens_predicted_seconds_total"],
    ),
    row(LlamaCpp, S::Running, &["llamacpp:requests_processing"]),
    row(LlamaCpp, S::Waiting, &["llamacpp:requests_deferred"]),
    row(
        LlamaCpp,
        S::KvCacheUsage,
        &["llamacpp:kv_cache_usage_ratio"],
    ),
];

/// Where an engine counts the requests that failed, which an error objective ("errors + aborts
/// < 0.5 % of finished requests") needs as evidence: a finished-request counter broken down by
/// outcome. An engine without one can say how many requests finished, never how many of them
/// failed, so its error objective has no evidence (`headroom_diagnose` judges it INCONCLUSIVE,
/// naming what is missing) instead of a failure count read as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutcomeSeries {
    /// The engine.
    pub engine: Engine,
    /// The series read for failed requests, as PromQL would select them (e.g.
    /// `vllm:request_success_total{finished_reason=~"error|abort"}`); `None` when the engine
    /// exports no outcome of a request.
    pub failures: Option<&'static str>,
    /// Whether the failure series being absent while the finished-request counter is present
    /// means no failure yet (TGI creates `tgi_request_failure` at its first failure) rather than
    /// no evidence.
    pub absent_means_none: bool,
    /// What is missing when the evidence is, in a clause naming the engine's series (for the
    /// objective's reason).
    pub missing: &'static str,
}

/// The outcome series of `engine` ([`OutcomeSeries`]), from the [`MAPPINGS`] rows of
/// [`Signal::RequestsFinished`]: vLLM's `finished_reason` label (errors and aborts), TGI's
/// `tgi_request_failure`; SGLang's `sglang:num_requests_total` and llama.cpp's server have no
/// outcome.
pub fn outcome_series(engine: Engine) -> OutcomeSeries {
    let (failures, absent_means_none, missing) = match engine {
        Engine::Vllm | Engine::VllmRouter => (
            Some("vllm:request_success_total{finished_reason=~\"error|abort\"}"),
            false,
            "vllm:request_success_total is not exported, so errors and aborts are not counted (a request count from the E2E histogram has no outcome)",
        ),
        Engine::Tgi => (
            Some("tgi_request_failure"),
            true,
            "neither tgi_request_success nor tgi_request_failure is exported, so failed requests are not counted",
        ),
        Engine::Sglang => (
            None,
            false,
            "SGLang exports no error or abort counter (sglang:num_requests_total counts requests without their outcome)",
        ),
        Engine::LlamaCpp => (
            None,
            false,
            "llama.cpp's server exports no request outcome counter (llamacpp:requests_processing and requests_deferred are gauges)",
        ),
        Engine::Unknown => (None, false, "no engine's outcome series was recognised"),
    };
    OutcomeSeries {
        engine,
        failures,
        absent_means_none,
        missing,
    }
}

/// The mapping rows for one engine.
pub fn mappings_for(engine: Engine) -> impl Iterator<Item = &'static Mapping> {
    let engine = if engine == Engine::VllmRouter {
        Engine::Vllm
    } else {
        engine
    };
    MAPPINGS.iter().filter(move |m| m.engine == engine)
}

/// Which series to keep: `None` keeps all (and the window sums them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// Keep only series with this `model_name` (vLLM `--served-model-name`).
    pub model_name: Option<String>,
    /// Keep only series with this `engine` label (vLLM data-parallel engine index).
    pub engine: Option<String>,
}

impl Selection {
    /// Whether a series with `labels` is selected. A series without the label is kept (vLLM's
    /// HTTP metrics carry no `model_name`).
    pub fn matches(&self, labels: &Labels) -> bool {
        let ok = |want: &Option<String>, name: &str| match (want, labels.get(name)) {
            (Some(w), Some(v)) => w == v,
            _ => true,
        };
        ok(&self.model_name, "model_name") && ok(&self.engine, "engine")
    }
}

/// One model × data-parallel engine found in a scrape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Instance {
    /// `model_name` label.
    pub model_name: Option<String>,
    /// `engine` label.
    pub engine: Option<String>,
}

/// The distinct (`model_name`, `engine`) pairs on the scrape's request counters or running
/// gauge, in sorted order — to build one window per instance.
pub fn instances(exp: &Exposition) -> Vec<Instance> {
    let mut out: Vec<Instance> = Vec::new();
    for name in [
        "vllm:num_requests_running",
        "vllm:request_success_total",
        "sglang:num_running_reqs",
    ] {
        for s in exp.samples(name) {
            let i = Instance {
                model_name: s.labels.get("model_name").map(str::to_owned),
                engine: s.labels.get("engine").map(str::to_owned),
            };
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    out.sort();
    out
}

/// Engine detection result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detection {
    /// The engine.
    pub engine: Engine,
    /// Version range implied by which metrics are present (vLLM only), e.g. `≥ v0.20`.
    pub version_hint: Option<String>,
    /// Number of samples carrying each engine's prefix, for the record.
    pub evidence: String,
}

/// Detects the engine from metric-name prefixes and labels (`metrics.md` §7.3): the prefix with the
/// most samples wins; `vllm:` series carrying `server` and no `engine` label are the
/// production-stack router.
pub fn detect(exp: &Exposition) -> Detection {
    let (mut vllm, mut sglang, mut tgi, mut llama, mut router_like) = (0, 0, 0, 0, 0);
    for f in exp.data_families() {
        for s in &f.samples {
            let n = s.name.as_str();
            if n.starts_with("vllm:") {
                vllm += 1;
                if s.labels.get("server").is_some() && s.labels.get("engine").is_none() {
                    router_like += 1;
                }
            } else if n.starts_with("sglang:") {
                sglang += 1;
            } else if n.starts_with("tgi_") {
                tgi += 1;
            } else if n.starts_with("llamacpp:") {
                llama += 1;
            }
        }
    }
    let best = [
        (vllm, Engine::Vllm),
        (sglang, Engine::Sglang),
        (tgi, Engine::Tgi),
        (llama, Engine::LlamaCpp),
    ]
    .into_iter()
    .max_by_key(|(n, _)| *n)
    .filter(|(n, _)| *n > 0)
    .map(|(_, e)| e)
    .unwrap_or(Engine::Unknown);
    let engine = if best == Engine::Vllm && router_like * 2 > vllm {
        Engine::VllmRouter
    } else {
        best
    };
    let version_hint = (engine == Engine::Vllm)
        .then(|| vllm_version_hint(exp))
        .flatten();
    Detection {
        engine,
        version_hint,
        evidence: format!(
            "samples by prefix: vllm: {vllm} (router-like {router_like}), sglang: {sglang}, tgi_: {tgi}, llamacpp: {llama}"
        ),
    }
}

/// A coarse vLLM version range from metric presence (`metrics.md` §1.4 "which versions have it").
/// Never used to change behaviour, only to explain.
fn vllm_version_hint(exp: &Exposition) -> Option<String> {
    let has = |n: &str| exp.has(n);
    let hint = if has("vllm:admission_rejections_total") {
        "≥ v0.32 (admission_rejections_total)"
    } else if has("vllm:num_requests_waiting_by_reason") {
        "≥ v0.20 (num_requests_waiting_by_reason)"
    } else if has("vllm:estimated_flops_per_gpu_total") {
        "≈ v0.17–v0.19 (MFU counters, no waiting_by_reason)"
    } else if has("vllm:kv_cache_usage_perc") && has("vllm:gpu_cache_usage_perc") {
        "v0.9.2–v0.11 (old and new cache names both exported)"
    } else if has("vllm:kv_cache_usage_perc") {
        if has("vllm:inter_token_latency_seconds") {
            "≥ v0.11"
        } else {
            "v0.9.2–v0.10"
        }
    } else if has("vllm:gpu_cache_usage_perc") {
        "< v0.9.2 (gpu_cache_usage_perc only)"
    } else {
        return None;
    };
    Some(hint.to_owned())
}

/// A counter or gauge value of one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesValue {
    /// The series' identity (all labels).
    pub series: Labels,
    /// Breakdown key ([`KeyRule`]).
    pub key: String,
    /// Value in the canonical unit.
    pub value: f64,
}

/// A histogram of one series: cumulative `(le, count)` pairs, `_sum`, `_count`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesHistogram {
    /// Identity (labels without `le`).
    pub series: Labels,
    /// Cumulative `(le, count)` pairs in body order.
    pub buckets: Vec<(f64, f64)>,
    /// `_sum`, canonical unit.
    pub sum: f64,
    /// `_count`.
    pub count: f64,
}

/// vLLM's KV pool as reported by `vllm:cache_config_info` (label values).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KvPool {
    /// `num_gpu_blocks`.
    pub num_gpu_blocks: Option<f64>,
    /// `block_size`, tokens per block.
    pub block_size: Option<f64>,
    /// `kv_cache_size_tokens` (mid-2026 builds), tokens.
    pub size_tokens: Option<f64>,
    /// `kv_cache_max_concurrency` (mid-2026 builds): full-length requests that fit at once.
    pub max_concurrency: Option<f64>,
    /// `enable_prefix_caching` (`True`/`False`): whether the server runs with prefix caching;
    /// `None` when the label is absent or reads anything else.
    #[serde(default)]
    pub prefix_caching: Option<bool>,
}

/// The canonical view of one engine scrape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineSnapshot {
    /// Detected engine.
    pub engine: Engine,
    /// vLLM version range, if inferable.
    pub version_hint: Option<String>,
    /// Counter and gauge series per signal.
    pub values: BTreeMap<Signal, Vec<SeriesValue>>,
    /// Histogram series per signal.
    pub histograms: BTreeMap<Signal, Vec<SeriesHistogram>>,
    /// The metric name each present signal was read from.
    pub sources: BTreeMap<Signal, String>,
    /// Signals the engine normally has but this scrape lacks, with the names looked for.
    pub missing: BTreeMap<Signal, Vec<String>>,
    /// KV pool configuration (vLLM `cache_config_info`).
    pub kv_pool: KvPool,
    /// `process_start_time_seconds` of the API server, Unix seconds.
    pub process_start_unix_s: Option<f64>,
    /// Signals whose family was present but corrupt in this scrape, with the metric name: no
    /// value of theirs is in [`EngineSnapshot::values`] / [`EngineSnapshot::histograms`].
    pub rejected: BTreeMap<Signal, String>,
    /// Why, one entry per offending series (see [`crate::quality`]).
    pub warnings: Vec<DataWarning>,
}

/// Reads the canonical signals of `engine` (or the detected one when `None`) from a scrape.
pub fn engine_snapshot(
    exp: &Exposition,
    engine: Option<Engine>,
    sel: &Selection,
) -> EngineSnapshot {
    let det = detect(exp);
    let engine = engine.unwrap_or(det.engine);
    let mut snap = EngineSnapshot {
        engine,
        version_hint: det.version_hint,
        values: BTreeMap::new(),
        histograms: BTreeMap::new(),
        sources: BTreeMap::new(),
        missing: BTreeMap::new(),
        kv_pool: KvPool::default(),
        process_start_unix_s: exp
            .samples("process_start_time_seconds")
            .next()
            .map(|s| s.value)
            .filter(|t| t.is_finite() && *t > 0.0),
        rejected: BTreeMap::new(),
        warnings: Vec::new(),
    };
    for m in mappings_for(engine) {
        let found = match m.signal.kind() {
            SignalKind::Histogram => read_histogram(exp, m, sel, &mut snap),
            _ => read_values(exp, m, sel, &mut snap),
        };
        if !found && !snap.sources.contains_key(&m.signal) {
            snap.missing
                .entry(m.signal)
                .or_default()
                .extend(m.names.iter().map(|n| n.to_string()));
        }
    }
    let present: Vec<Signal> = snap
        .sources
        .keys()
        .chain(snap.rejected.keys())
        .copied()
        .collect();
    for sig in present {
        snap.missing.remove(&sig);
    }
    if matches!(engine, Engine::Vllm | Engine::VllmRouter)
        && let Some(cfg) = exp
            .samples("vllm:cache_config_info")
            .find(|s| sel.matches(&s.labels))
    {
        let num = |k: &str| cfg.labels.get(k).and_then(|v| v.parse::<f64>().ok());
        snap.kv_pool = KvPool {
            num_gpu_blocks: num("num_gpu_blocks"),
            block_size: num("block_size"),
            size_tokens: num("kv_cache_size_tokens"),
            max_concurrency: num("kv_cache_max_concurrency"),
            prefix_caching: match cfg.labels.get("enable_prefix_caching") {
                Some("True" | "true") => Some(true),
                Some("False" | "false") => Some(false),
                _ => None,
            },
        };
    }
    snap
}

fn key_of(rule: KeyRule, labels: &Labels) -> String {
    match rule {
        KeyRule::None => String::new(),
        KeyRule::Label(l) => labels.get(l).unwrap_or("").to_owned(),
        KeyRule::Const(c) => c.to_owned(),
        KeyRule::Prefixed(p, l) => format!("{p}{}", labels.get(l).unwrap_or("")),
    }
}

/// A rejection warning, reported under `family`, for every series of the sample `sample` that
/// the scrape writes more than once and `keep` selects ([`quality::check_duplicate`]).
fn duplicate_warnings(
    exp: &Exposition,
    sample: &str,
    family: &str,
    signal: Signal,
    keep: impl Fn(&Labels) -> bool,
) -> Vec<DataWarning> {
    exp.duplicates(sample)
        .filter(|d| keep(&d.labels))
        .map(|d| {
            let (problem, detail) = quality::check_duplicate(d);
            DataWarning::rejected(family, &d.labels, signal.name(), problem, detail)
        })
        .collect()
}

fn read_values(exp: &Exposition, m: &Mapping, sel: &Selection, snap: &mut EngineSnapshot) -> bool {
    for name in m.names {
        // A router's `gpu_prefix_cache_*_total` are gauges: refuse a gauge where a counter is
        // expected.
        if m.signal.kind() == SignalKind::Counter
            && exp
                .family_of_sample(name)
                .is_some_and(|f| f.declared && f.kind == MetricType::Gauge)
        {
            continue;
        }
        let mut found: Vec<SeriesValue> = Vec::new();
        let mut bad: Vec<DataWarning> = Vec::new();
        for s in exp.samples(name) {
            if !sel.matches(&s.labels) {
                continue;
            }
            if let Some((k, v)) = m.only
                && s.labels.get(k) != Some(v)
            {
                continue;
            }
            if let Some((problem, detail)) = quality::check_value(m.signal, s.value) {
                bad.push(DataWarning::rejected(
                    name,
                    &s.labels,
                    m.signal.name(),
                    problem,
                    detail,
                ));
                continue;
            }
            found.push(SeriesValue {
                series: s.labels.clone(),
                key: key_of(m.key, &s.labels),
                value: s.value * m.scale,
            });
        }
        bad.extend(duplicate_warnings(exp, name, name, m.signal, |l| {
            sel.matches(l) && m.only.is_none_or(|(k, v)| l.get(k) == Some(v))
        }));
        if !bad.is_empty() {
            // One corrupt series makes the family's sum (or max) wrong: reject all of it.
            snap.rejected.insert(m.signal, name.to_string());
            snap.values.remove(&m.signal);
            snap.sources.remove(&m.signal);
            snap.warnings.extend(bad);
            return true;
        }
        if !found.is_empty() {
            if snap.rejected.contains_key(&m.signal) {
                return true;
            }
            snap.values.entry(m.signal).or_default().extend(found);
            snap.sources
                .entry(m.signal)
                .and_modify(|e| {
                    if !e.split(", ").any(|x| x == *name) {
                        e.push_str(", ");
                        e.push_str(name);
                    }
                })
                .or_insert_with(|| name.to_string());
            return true;
        }
    }
    false
}

/// The series of the classic histogram `base` (`<base>_bucket`, `_sum`, `_count`) whose labels
/// `keep` selects, by identity (labels without `le`): cumulative `(le, count)` pairs in body
/// order, `_sum` and `_count` as written (NaN when absent), and the identities whose `_count`
/// was written. No check: see [`quality::check_histogram`].
pub fn series_histograms(
    exp: &Exposition,
    base: &str,
    keep: impl Fn(&Labels) -> bool,
) -> (
    BTreeMap<Labels, SeriesHistogram>,
    std::collections::BTreeSet<Labels>,
) {
    let mut by_series: BTreeMap<Labels, SeriesHistogram> = BTreeMap::new();
    for s in exp.samples(&format!("{base}_bucket")) {
        if !keep(&s.labels) {
            continue;
        }
        let Some(le) = s.labels.get("le").and_then(parse_le) else {
            continue;
        };
        let id = s.labels.without(&["le"]);
        by_series
            .entry(id.clone())
            .or_insert_with(|| SeriesHistogram {
                series: id,
                buckets: Vec::new(),
                sum: f64::NAN,
                count: f64::NAN,
            })
            .buckets
            .push((le, s.value));
    }
    let mut count_given = std::collections::BTreeSet::new();
    if by_series.is_empty() {
        return (by_series, count_given);
    }
    for s in exp.samples(&format!("{base}_sum")) {
        if let Some(h) = by_series.get_mut(&s.labels) {
            h.sum = s.value;
        }
    }
    for s in exp.samples(&format!("{base}_count")) {
        if let Some(h) = by_series.get_mut(&s.labels) {
            h.count = s.value;
            count_given.insert(s.labels.clone());
        }
    }
    (by_series, count_given)
}

fn read_histogram(
    exp: &Exposition,
    m: &Mapping,
    sel: &Selection,
    snap: &mut EngineSnapshot,
) -> bool {
    for base in m.names {
        let bucket_name = format!("{base}_bucket");
        let (mut by_series, count_given) = series_histograms(exp, base, |l| sel.matches(l));
        if by_series.is_empty() {
            continue;
        }
        for h in by_series.values_mut() {
            h.sum *= m.scale;
        }
        let mut bad: Vec<DataWarning> = Vec::new();
        for part in [
            bucket_name.clone(),
            format!("{base}_sum"),
            format!("{base}_count"),
        ] {
            bad.extend(duplicate_warnings(exp, &part, base, m.signal, |l| {
                sel.matches(l)
            }));
        }
        for (labels, h) in by_series.iter_mut() {
            if m.scale != 1.0 {
                for b in &mut h.buckets {
                    b.0 *= m.scale;
                }
            }
            if let Some((problem, detail)) =
                quality::check_histogram(&h.buckets, h.sum, h.count, count_given.contains(labels))
            {
                bad.push(DataWarning::rejected(
                    base,
                    labels,
                    m.signal.name(),
                    problem,
                    detail,
                ));
                continue;
            }
            if h.count.is_nan() {
                // `_count` equals the `+Inf` bucket (exposition format spec).
                h.count = h
                    .buckets
                    .iter()
                    .find(|b| b.0 == f64::INFINITY)
                    .map(|b| b.1)
                    .unwrap_or(f64::NAN);
            }
        }
        if !bad.is_empty() {
            // The series are summed by `le` downstream: one corrupt series corrupts the sum.
            snap.rejected.insert(m.signal, base.to_string());
            snap.histograms.remove(&m.signal);
            snap.sources.remove(&m.signal);
            snap.warnings.extend(bad);
            return true;
        }
        snap.histograms
            .entry(m.signal)
            .or_default()
            .extend(by_series.into_values());
        snap.sources.insert(m.signal, base.to_string());
        return true;
    }
    false
}

/// Fields read from dcgm-exporter, with their units (`metrics.md` §5.1). `DCGM_FI_DEV_*_UTIL` are
/// percent 0–100; `DCGM_FI_PROF_*_ACTIVE` ratios 0–1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuField {
    /// `DCGM_FI_DEV_GPU_UTIL`, percent 0–100 ("any kernel running" time).
    GpuUtilPct,
    /// `DCGM_FI_DEV_MEM_COPY_UTIL`, percent 0–100.
    MemCopyUtilPct,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, ratio 0–1.
    GrEngineActiveRatio,
    /// `DCGM_FI_PROF_SM_ACTIVE`, ratio 0–1.
    SmActiveRatio,
    /// `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`, ratio 0–1.
    TensorActiveRatio,
    /// `DCGM_FI_PROF_DRAM_ACTIVE`, ratio 0–1.
    DramActiveRatio,
    /// `DCGM_FI_DEV_POWER_USAGE`, W.
    PowerW,
    /// `DCGM_FI_DEV_GPU_TEMP`, °C.
    GpuTempC,
    /// `DCGM_FI_DEV_MEMORY_TEMP`, °C (0 on GPUs without a sensor).
    MemoryTempC,
    /// `DCGM_FI_DEV_SM_CLOCK`, MHz.
    SmClockMhz,
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    FbUsedMib,
    /// `DCGM_FI_DEV_FB_FREE`, MiB.
    FbFreeMib,
    /// `DCGM_FI_DEV_FB_RESERVED`, MiB.
    FbReservedMib,
    /// `DCGM_FI_DEV_XID_ERRORS`: the last XID code (0 = none).
    LastXid,
    /// `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (formerly `…_CLOCK_THROTTLE_REASONS`): bitmask.
    ClockEventReasons,
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, counter, converted from mJ to J.
    EnergyJ,
    /// `DCGM_FI_DEV_POWER_VIOLATION`, counter, ns throttled.
    PowerViolationNs,
    /// `DCGM_FI_DEV_THERMAL_VIOLATION`, counter, ns throttled.
    ThermalViolationNs,
}

impl GpuField {
    /// snake_case name used in JSON (`gpu_util_pct`, `power_w`, …).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Whether the field is a counter (deltas) rather than a gauge.
    pub fn is_counter(self) -> bool {
        matches!(
            self,
            GpuField::EnergyJ | GpuField::PowerViolationNs | GpuField::ThermalViolationNs
        )
    }
}

/// dcgm-exporter names (current and the 1.x-compatibility lowercase ones) with the factor to the
/// canonical unit.
pub const DCGM_FIELDS: &[(&str, GpuField, f64)] = &[
    ("DCGM_FI_DEV_GPU_UTIL", GpuField::GpuUtilPct, 1.0),
    ("dcgm_gpu_utilization", GpuField::GpuUtilPct, 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", GpuField::MemCopyUtilPct, 1.0),
    ("dcgm_mem_copy_utilization", GpuField::MemCopyUtilPct, 1.0),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        GpuField::GrEngineActiveRatio,
        1.0,
    ),
    ("DCGM_FI_PROF_SM_ACTIVE", GpuField::SmActiveRatio, 1.0),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        GpuField::TensorActiveRatio,
        1.0,
    ),
    ("DCGM_FI_PROF_DRAM_ACTIVE", GpuField::DramActiveRatio, 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", GpuField::PowerW, 1.0),
    ("dcgm_power_usage", GpuField::PowerW, 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", GpuField::GpuTempC, 1.0),
    ("dcgm_gpu_temp", GpuField::GpuTempC, 1.0),
    ("DCGM_FI_DEV_MEMORY_TEMP", GpuField::MemoryTempC, 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", GpuField::SmClockMhz, 1.0),
    ("DCGM_FI_DEV_FB_USED", GpuField::FbUsedMib, 1.0),
    ("dcgm_fb_used", GpuField::FbUsedMib, 1.0),
    ("DCGM_FI_DEV_FB_FREE", GpuField::FbFreeMib, 1.0),
    ("dcgm_fb_free", GpuField::FbFreeMib, 1.0),
    ("DCGM_FI_DEV_FB_RESERVED", GpuField::FbReservedMib, 1.0),
    ("DCGM_FI_DEV_XID_ERRORS", GpuField::LastXid, 1.0),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        GpuField::ClockEventReasons,
        1.0,
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        GpuField::ClockEventReasons,
        1.0,
    ),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        GpuField::EnergyJ,
        1e-3,
    ),
    (
        "DCGM_FI_DEV_POWER_VIOLATION",
        GpuField::PowerViolationNs,
        1.0,
    ),
    (
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        GpuField::ThermalViolationNs,
        1.0,
    ),
];

/// Kubernetes and host attribution labels on dcgm series (current and `--use-old-namespace`).
const K8S_LABELS: [(&str, &str); 6] = [
    ("pod", "pod"),
    ("pod_name", "pod"),
    ("namespace", "namespace"),
    ("pod_namespace", "namespace"),
    ("container", "container"),
    ("container_name", "container"),
];

/// Identity of one GPU in dcgm output.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuId {
    /// `Hostname` (released versions) or `hostname` (HEAD after 4.5.3-4.8.2), if present.
    pub hostname: Option<String>,
    /// `gpu` index.
    pub gpu: String,
    /// `UUID` (or `uuid` with `--use-old-namespace`).
    pub uuid: Option<String>,
    /// MIG `GPU_I_ID`, when the series is a MIG instance.
    pub mig_instance: Option<String>,
}

/// One GPU's values in one dcgm scrape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    /// Which GPU.
    pub id: GpuId,
    /// `modelName`, e.g. `NVIDIA L4`.
    pub model: Option<String>,
    /// `pod`/`namespace`/`container` attributions seen on its series (k8s mapping), sorted.
    pub pods: Vec<String>,
    /// Field values in canonical units.
    pub fields: BTreeMap<GpuField, f64>,
}

/// dcgm-exporter scrape: one entry per GPU, sorted by id.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DcgmSnapshot {
    /// GPUs.
    pub gpus: Vec<GpuSnapshot>,
    /// Fields whose value was outside the field's possible range (a percentage above 100, a
    /// ratio above 1, a negative temperature below −40 °C, …): left out of
    /// [`GpuSnapshot::fields`], with why. See [`crate::quality::gpu_range`].
    pub warnings: Vec<DataWarning>,
    /// `(gpu, field)` pairs left out for that reason.
    pub rejected: Vec<(GpuId, GpuField)>,
}

/// Reads dcgm-exporter fields per GPU. Pod labels do not split a GPU: a GPU shared by several
/// pods (time-slicing) appears once, with every pod listed; for gauges the last value wins, and
/// all series of one GPU carry the same device value.
pub fn dcgm_snapshot(exp: &Exposition) -> DcgmSnapshot {
    let mut gpus: BTreeMap<GpuId, GpuSnapshot> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut rejected = Vec::new();
    for &(name, field, scale) in DCGM_FIELDS {
        // A series written twice: which value the device reported cannot be known.
        let duplicated: Vec<&crate::exposition::Duplicate> = exp.duplicates(name).collect();
        for s in exp.samples(name) {
            let l = &s.labels;
            let Some(gpu) = l.get("gpu") else { continue };
            let id = GpuId {
                hostname: l.get("Hostname").or(l.get("hostname")).map(str::to_owned),
                gpu: gpu.to_owned(),
                uuid: l.get("UUID").or(l.get("uuid")).map(str::to_owned),
                mig_instance: l.get("GPU_I_ID").map(str::to_owned),
            };
            let g = gpus.entry(id.clone()).or_insert_with(|| GpuSnapshot {
                id,
                model: l.get("modelName").map(str::to_owned),
                pods: Vec::new(),
                fields: BTreeMap::new(),
            });
            let mut attribution = Vec::new();
            for (label, canon) in K8S_LABELS {
                if let Some(v) = l.get(label).filter(|v| !v.is_empty()) {
                    attribution.push(format!("{canon}={v}"));
                }
            }
            if !attribution.is_empty() {
                let a = attribution.join(",");
                if !g.pods.contains(&a) {
                    g.pods.push(a);
                }
            }
            let v = s.value * scale;
            let problem = match duplicated.iter().find(|d| d.labels == s.labels) {
                Some(d) => Some(quality::check_duplicate(d)),
                None => quality::check_gpu(field, v).map(|detail| (Problem::OutOfRange, detail)),
            };
            if let Some((problem, detail)) = problem {
                warnings.push(DataWarning::rejected(
                    name,
                    &s.labels,
                    field.name(),
                    problem,
                    detail,
                ));
                g.fields.remove(&field);
                rejected.push((g.id.clone(), field));
                continue;
            }
            if !rejected.contains(&(g.id.clone(), field)) {
                g.fields.insert(field, v);
            }
        }
    }
    let mut out: Vec<GpuSnapshot> = gpus.into_values().collect();
    for g in &mut out {
        g.pods.sort();
    }
    DcgmSnapshot {
        gpus: out,
        warnings,
        rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::parse;

    #[test]
    fn renamed_vllm_metrics_use_first_present_only() {
        // v0.10-style: both names exported with the same value; must not be summed.
        let body = concat!(
            "# TYPE vllm:kv_cache_usage_perc gauge\n",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n",
            "# TYPE vllm:gpu_cache_usage_perc gauge\n",
            "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n",
            "# TYPE vllm:time_per_output_token_seconds histogram\n",
            "vllm:time_per_output_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} 3.0\n",
            "vllm:time_per_output_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 4.0\n",
            "vllm:time_per_output_token_seconds_sum{model_name=\"m\"} 0.5\n",
            "vllm:time_per_output_token_seconds_count{model_name=\"m\"} 4.0\n",
        );
        let exp = parse(body).unwrap();
        let snap = engine_snapshot(&exp, None, &Selection::default());
        assert_eq!(snap.engine, Engine::Vllm);
        let kv = &snap.values[&Signal::KvCacheUsage];
        assert_eq!(kv.len(), 1);
        assert_eq!(kv[0].value, 0.25);
        assert_eq!(
            snap.sources[&Signal::KvCacheUsage],
            "vllm:kv_cache_usage_perc"
        );
        assert_eq!(
            snap.sources[&Signal::Itl],
            "vllm:time_per_output_token_seconds"
        );
        assert_eq!(snap.histograms[&Signal::Itl][0].count, 4.0);
        assert!(snap.missing.contains_key(&Signal::Ttft));
        assert!(!snap.missing.contains_key(&Signal::Itl));
    }

    /// Each engine's outcome series is one its finished-request mapping reads, and an engine
    /// without one says what it lacks in its own names.
    #[test]
    fn outcome_series_are_read_by_the_mappings() {
        for e in [Engine::Vllm, Engine::Sglang, Engine::Tgi, Engine::LlamaCpp] {
            let o = outcome_series(e);
            let read: Vec<&str> = mappings_for(e)
                .filter(|m| m.signal == Signal::RequestsFinished)
                .flat_map(|m| m.names.iter().copied())
                .collect();
            match o.failures {
                Some(f) => {
                    let name = f.split('{').next().unwrap();
                    assert!(read.contains(&name), "{e:?}: {f} not in {read:?}");
                }
                None => assert!(!o.missing.contains("vllm"), "{e:?}: {}", o.missing),
            }
        }
    }

    #[test]
    fn router_gauges_are_not_counters() {
        let body = concat!(
            "# TYPE vllm:gpu_prefix_cache_hits_total gauge\n",
            "vllm:gpu_prefix_cache_hits_total{server=\"http://a\"} 5\n",
            "# TYPE vllm:num_requests_running gauge\n",
            "vllm:num_requests_running{server=\"http://a\"} 2\n",
        );
        let exp = parse(body).unwrap();
        assert_eq!(detect(&exp).engine, Engine::VllmRouter);
        let snap = engine_snapshot(&exp, None, &Selection::default());
        assert!(!snap.values.contains_key(&Signal::PrefixCacheHits));
    }

    #[test]
    fn selection_and_instances() {
        let body = concat!(
            "vllm:num_requests_running{engine=\"0\",model_name=\"a\"} 1\n",
            "vllm:num_requests_running{engine=\"1\",model_name=\"a\"} 2\n",
            "vllm:num_requests_running{engine=\"0\",model_name=\"b\"} 4\n",
        );
        let exp = parse(body).unwrap();
        assert_eq!(instances(&exp).len(), 3);
        let sel = Selection {
            model_name: Some("a".into()),
            engine: None,
        };
        let snap = engine_snapshot(&exp, None, &sel);
        let sum: f64 = snap.values[&Signal::Running].iter().map(|v| v.value).sum();
        assert_eq!(sum, 3.0);
    }

    #[test]
    fn other_engines_detected() {
        let e = parse("# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"} 7\n").unwrap();
        let s = engine_snapshot(&e, None, &Selection::default());
        assert_eq!(s.engine, Engine::Sglang);
        assert_eq!(s.values[&Signal::Waiting][0].value, 7.0);

        let e = parse("# TYPE tgi_request_failure counter\ntgi_request_failure{err=\"overloaded\"} 3\n# TYPE tgi_request_success counter\ntgi_request_success 10\n").unwrap();
        let s = engine_snapshot(&e, None, &Selection::default());
        assert_eq!(s.engine, Engine::Tgi);
        let keys: Vec<_> = s.values[&Signal::RequestsFinished]
            .iter()
            .map(|v| (v.key.as_str(), v.value))
            .collect();
        assert!(keys.contains(&("stop", 10.0)));
        assert!(keys.contains(&("error:overloaded", 3.0)));

        let e = parse("# HELP llamacpp:requests_deferred x\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n").unwrap();
        let s = engine_snapshot(&e, None, &Selection::default());
        assert_eq!(s.engine, Engine::LlamaCpp);
        assert_eq!(s.values[&Signal::Waiting][0].value, 2.0);
    }

    #[test]
    fn dcgm_several_gpus_with_pods() {
        let body = concat!(
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"n1\",pod=\"vllm-0\",namespace=\"llm\",container=\"vllm\"} 91\n",
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"n1\"} 10\n",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\"} 4742776\n",
            "DCGM_FI_DEV_MEMORY_TEMP{gpu=\"1\",UUID=\"GPU-b\",hostname=\"n1\"} 9223372036854775794\n",
        );
        let d = dcgm_snapshot(&parse(body).unwrap());
        assert_eq!(d.gpus.len(), 2);
        let g0 = &d.gpus[0];
        assert_eq!(g0.id.gpu, "0");
        assert_eq!(g0.fields[&GpuField::GpuUtilPct], 91.0);
        assert_eq!(g0.fields[&GpuField::EnergyJ], 4742.776);
        assert_eq!(g0.pods, ["pod=vllm-0,namespace=llm,container=vllm"]);
        assert_eq!(d.gpus[1].id.hostname.as_deref(), Some("n1"));
        assert!(!d.gpus[1].fields.contains_key(&GpuField::MemoryTempC));
    }
}
