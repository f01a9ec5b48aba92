//! vLLM statistics and their Prometheus exposition, as vLLM 0.32 prints them.
//!
//! Definitions (vLLM `v1/metrics/stats.py`, `loggers.py`; simulator.md §2.5):
//! - queue = `scheduled_ts − queued_ts` (first scheduling only); prefill = `first_token_ts −
//!   scheduled_ts`; decode = `last_token_ts − first_token_ts`; inference = `last_token_ts −
//!   scheduled_ts`; TPOT = `decode / (n_gen − 1)` (0 when `n_gen ≤ 1`);
//! - TTFT = first token − `arrival_time` (queue and frontend included); ITL = every gap between
//!   consecutive tokens of a request; e2e = finish − `arrival_time`;
//! - `prompt_tokens_total` grows by the full prompt when the first token is produced,
//!   `generation_tokens_total` by every token, `iteration_tokens_total` observes prompt + generated
//!   tokens of every step that produced output;
//! - prefix-cache queries and hits are counted in tokens at first admission.
//!
//! Family names, types, label names, bucket bounds and HELP strings are copied from
//! `fixtures/vllm/v0.32-*.prom` and checked by `tests/engine_conformance.rs`. Process, Python and
//! HTTP families belong to the HTTP server and are not emitted here.

use std::fmt::Write as _;

use super::prom::{Histogram, buckets_1_2_5, label_set, py_float};
use super::{Engine, EngineConfig, FinishReason};

/// TTFT buckets (s), vLLM `histogram_time_to_first_token`.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// ITL and TPOT buckets (s).
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Request-phase buckets (s): e2e, queue, inference, prefill, decode.
pub const PHASE_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// `iteration_tokens_total` buckets.
pub const ITERATION_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// `request_num_preemptions` buckets.
pub const PREEMPTION_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];
/// `request_params_n` buckets.
pub const N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];

/// What the engine knows about a request when it finishes.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRequest {
    /// Why it finished.
    pub reason: FinishReason,
    /// Frontend arrival (s).
    pub arrival_s: f64,
    /// Engine-core QUEUED event (s).
    pub queued_s: f64,
    /// First SCHEDULED event (s), if it was ever scheduled.
    pub scheduled_s: Option<f64>,
    /// First token (s), if any.
    pub first_token_s: Option<f64>,
    /// Last token (s).
    pub last_token_s: f64,
    /// Finish time (s).
    pub finish_s: f64,
    /// Prompt tokens.
    pub prompt_len: u32,
    /// Prefix-cache hit tokens at first admission.
    pub cached_tokens: u32,
    /// Tokens generated.
    pub num_generation_tokens: u32,
    /// `max_tokens` of the request.
    pub max_tokens: u32,
    /// Times it was preempted.
    pub num_preemptions: u32,
}

/// Counters and histograms of one engine, named after the vLLM series they feed.
#[derive(Debug, Clone, PartialEq)]
pub struct VllmStats {
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens: u64,
    /// `vllm:prompt_tokens_cached_total` (= `by_source{source="local_cache_hit"}`).
    pub prompt_tokens_cached: u64,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: u64,
    /// `vllm:num_preemptions_total`.
    pub num_preemptions: u64,
    /// `vllm:prefix_cache_queries_total` (tokens).
    pub prefix_cache_queries: u64,
    /// `vllm:prefix_cache_hits_total` (tokens).
    pub prefix_cache_hits: u64,
    /// `vllm:request_success_total{finished_reason="stop"}`.
    pub success_stop: u64,
    /// `…{finished_reason="length"}`.
    pub success_length: u64,
    /// `…{finished_reason="abort"}`.
    pub success_abort: u64,
    /// `vllm:estimated_flops_per_gpu_total` (modelled).
    pub estimated_flops: f64,
    /// `vllm:estimated_read_bytes_per_gpu_total` (modelled).
    pub estimated_read_bytes: f64,
    /// `vllm:estimated_write_bytes_per_gpu_total` (modelled).
    pub estimated_write_bytes: f64,
    /// `vllm:request_prompt_tokens`.
    pub request_prompt_tokens: Histogram,
    /// `vllm:request_generation_tokens`.
    pub request_generation_tokens: Histogram,
    /// `vllm:iteration_tokens_total`.
    pub iteration_tokens: Histogram,
    /// `vllm:request_max_num_generation_tokens`.
    pub request_max_num_generation_tokens: Histogram,
    /// `vllm:request_params_n`.
    pub request_params_n: Histogram,
    /// `vllm:request_params_max_tokens`.
    pub request_params_max_tokens: Histogram,
    /// `vllm:time_to_first_token_seconds`.
    pub ttft: Histogram,
    /// `vllm:inter_token_latency_seconds`.
    pub itl: Histogram,
    /// `vllm:request_time_per_output_token_seconds`.
    pub tpot: Histogram,
    /// `vllm:e2e_request_latency_seconds`.
    pub e2e: Histogram,
    /// `vllm:request_queue_time_seconds`.
    pub queue: Histogram,
    /// `vllm:request_inference_time_seconds`.
    pub inference: Histogram,
    /// `vllm:request_prefill_time_seconds`.
    pub prefill: Histogram,
    /// `vllm:request_decode_time_seconds`.
    pub decode: Histogram,
    /// `vllm:request_num_preemptions`.
    pub request_num_preemptions: Histogram,
    /// `vllm:request_prefill_kv_computed_tokens`.
    pub prefill_kv_computed_tokens: Histogram,
}

impl VllmStats {
    /// Empty statistics; token histograms use 1-2-5 buckets up to `max_model_len`.
    pub fn new(cfg: &EngineConfig) -> VllmStats {
        let tok = buckets_1_2_5(u64::from(cfg.max_model_len));
        VllmStats {
            prompt_tokens: 0,
            prompt_tokens_cached: 0,
            generation_tokens: 0,
            num_preemptions: 0,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            success_stop: 0,
            success_length: 0,
            success_abort: 0,
            estimated_flops: 0.0,
            estimated_read_bytes: 0.0,
            estimated_write_bytes: 0.0,
            request_prompt_tokens: Histogram::new(&tok),
            request_generation_tokens: Histogram::new(&tok),
            iteration_tokens: Histogram::new(ITERATION_BUCKETS),
            request_max_num_generation_tokens: Histogram::new(&tok),
            request_params_n: Histogram::new(N_BUCKETS),
            request_params_max_tokens: Histogram::new(&tok),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            tpot: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(PHASE_BUCKETS),
            queue: Histogram::new(PHASE_BUCKETS),
            inference: Histogram::new(PHASE_BUCKETS),
            prefill: Histogram::new(PHASE_BUCKETS),
            decode: Histogram::new(PHASE_BUCKETS),
            request_num_preemptions: Histogram::new(PREEMPTION_BUCKETS),
            prefill_kv_computed_tokens: Histogram::new(&tok),
        }
    }

    /// First token of a request: prompt counters and TTFT.
    pub fn on_first_token(&mut self, prompt_len: u32, cached: u32, ttft_s: f64) {
        self.prompt_tokens += u64::from(prompt_len);
        self.prompt_tokens_cached += u64::from(cached.min(prompt_len));
        self.ttft.observe(ttft_s);
    }

    /// A finished request: `request_success_total` and the per-request histograms.
    ///
    /// Phase histograms (queue, prefill, decode, inference, TPOT) are observed only for requests
    /// that produced a first token; an aborted request that never ran feeds the counter, e2e and
    /// the token histograms.
    pub fn on_finished(&mut self, f: &FinishedRequest) {
        match f.reason {
            FinishReason::Stop => self.success_stop += 1,
            FinishReason::Length => self.success_length += 1,
            FinishReason::Abort => self.success_abort += 1,
        }
        self.e2e.observe((f.finish_s - f.arrival_s).max(0.0));
        self.request_prompt_tokens.observe(f64::from(f.prompt_len));
        self.request_generation_tokens
            .observe(f64::from(f.num_generation_tokens));
        self.request_max_num_generation_tokens
            .observe(f64::from(f.max_tokens));
        self.request_params_n.observe(1.0);
        self.request_params_max_tokens
            .observe(f64::from(f.max_tokens));
        self.request_num_preemptions
            .observe(f64::from(f.num_preemptions));
        self.prefill_kv_computed_tokens
            .observe(f64::from(f.prompt_len.saturating_sub(f.cached_tokens)));
        if let (Some(sched), Some(first)) = (f.scheduled_s, f.first_token_s) {
            let decode = (f.last_token_s - first).max(0.0);
            self.queue.observe((sched - f.queued_s).max(0.0));
            self.prefill.observe((first - sched).max(0.0));
            self.decode.observe(decode);
            self.inference.observe((f.last_token_s - sched).max(0.0));
            let tpot = if f.num_generation_tokens > 1 {
                decode / f64::from(f.num_generation_tokens - 1)
            } else {
                0.0
            };
            self.tpot.observe(tpot);
        }
    }

    /// Finished requests of every reason.
    pub fn finished(&self) -> u64 {
        self.success_stop + self.success_length + self.success_abort
    }
}

/// Kind of a family, for HELP/TYPE lines and `_created` handling.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

struct Out<'a> {
    s: String,
    model: &'a str,
    created: String,
}

impl Out<'_> {
    fn header(&mut self, name: &str, kind: Kind, help: &str) {
        let t = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {t}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let _ = writeln!(self.s, "{name}{} {}", label_set(labels), py_float(v));
    }

    fn created(&mut self, base: &str, help: &str, label_sets: &[Vec<(&str, &str)>]) {
        let name = format!("{base}_created");
        self.header(&name, Kind::Gauge, help);
        let c = self.created.clone();
        for l in label_sets {
            let _ = writeln!(self.s, "{name}{} {c}", label_set(l));
        }
    }

    /// A gauge family with one series per extra-label value.
    fn gauge(&mut self, name: &str, help: &str, series: &[(&[(&str, &str)], f64)]) {
        self.header(name, Kind::Gauge, help);
        let m = self.model.to_string();
        for (extra, v) in series {
            let mut l: Vec<(&str, &str)> = vec![("engine", "0"), ("model_name", &m)];
            l.extend_from_slice(extra);
            self.sample(name, &l, *v);
        }
    }

    /// A counter family (`base_total` + `base_created`).
    fn counter(&mut self, base: &str, help: &str, series: &[(&[(&str, &str)], f64)]) {
        self.counter_with(base, help, series, true);
    }

    fn counter_with(
        &mut self,
        base: &str,
        help: &str,
        series: &[(&[(&str, &str)], f64)],
        engine_label: bool,
    ) {
        let total = format!("{base}_total");
        self.header(&total, Kind::Counter, help);
        let m = self.model.to_string();
        let mut sets = Vec::new();
        for (extra, v) in series {
            let mut l: Vec<(&str, &str)> = Vec::new();
            if engine_label {
                l.push(("engine", "0"));
            }
            l.push(("model_name", &m));
            l.extend_from_slice(extra);
            self.sample(&total, &l, *v);
            sets.push(l);
        }
        self.created(base, help, &sets);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, Kind::Histogram, help);
        let m = self.model.to_string();
        let l: Vec<(&str, &str)> = vec![("engine", "0"), ("model_name", &m)];
        h.write_samples(&mut self.s, name, &l);
        self.created(name, help, &[l]);
    }
}

/// Renders the `vllm:*` families of vLLM 0.32 for `engine` at engine time `now_s`.
pub fn render(engine: &Engine, _now_s: f64) -> String {
    let cfg = engine.config();
    let st = engine.stats();
    let mut o = Out {
        s: String::with_capacity(32 * 1024),
        model: &cfg.served_model_name,
        created: py_float(engine.created_unix_s()),
    };
    const MFU_NOTE: &str = "(for Model Flops Utilization calculations).";
    o.counter(
        "vllm:estimated_flops_per_gpu",
        &format!("Estimated number of floating point operations per GPU {MFU_NOTE}"),
        &[(&[], st.estimated_flops)],
    );
    o.counter(
        "vllm:estimated_read_bytes_per_gpu",
        &format!("Estimated number of bytes read from memory per GPU {MFU_NOTE}"),
        &[(&[], st.estimated_read_bytes)],
    );
    o.counter(
        "vllm:estimated_write_bytes_per_gpu",
        &format!("Estimated number of bytes written to memory per GPU {MFU_NOTE}"),
        &[(&[], st.estimated_write_bytes)],
    );
    let running = engine.num_running() as f64;
    let waiting = engine.num_waiting() as f64;
    o.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        &[(&[], running)],
    );
    o.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        &[(&[], waiting)],
    );
    o.gauge(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        &[
            (&[("reason", "capacity")], waiting),
            (&[("reason", "deferred")], 0.0),
        ],
    );
    o.gauge(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        &[
            (&[("sleep_state", "awake")], 1.0),
            (&[("sleep_state", "weights_offloaded")], 0.0),
            (&[("sleep_state", "discard_all")], 0.0),
        ],
    );
    o.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        &[(&[], engine.kv_cache_usage())],
    );
    o.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        &[(&[], st.prefix_cache_queries as f64)],
    );
    o.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        &[(&[], st.prefix_cache_hits as f64)],
    );
    o.counter(
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        &[(&[], 0.0)],
    );
    o.counter(
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        &[(&[], 0.0)],
    );
    o.counter(
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        &[(&[], 0.0)],
    );
    o.counter(
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        &[(&[], 0.0)],
    );
    o.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        &[(&[], st.num_preemptions as f64)],
    );
    o.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        &[(&[], st.prompt_tokens as f64)],
    );
    let cached = st.prompt_tokens_cached as f64;
    o.counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        &[
            (
                &[("source", "local_compute")],
                st.prompt_tokens as f64 - cached,
            ),
            (&[("source", "local_cache_hit")], cached),
            (&[("source", "external_kv_transfer")], 0.0),
        ],
    );
    o.counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        &[(&[], cached)],
    );
    o.counter(
        "vllm:prompt_tokens_cached_by_source",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        &[
            (&[("source", "device")], st.prefix_cache_hits as f64),
            (&[("source", "host")], 0.0),
            (&[("source", "p2p")], 0.0),
            (&[("source", "disk")], 0.0),
            (&[("source", "external_unspecified")], 0.0),
        ],
    );
    o.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        &[(&[], st.generation_tokens as f64)],
    );
    o.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        &[
            (&[("finished_reason", "stop")], st.success_stop as f64),
            (&[("finished_reason", "length")], st.success_length as f64),
            (&[("finished_reason", "abort")], st.success_abort as f64),
            (&[("finished_reason", "error")], 0.0),
            (&[("finished_reason", "repetition")], 0.0),
        ],
    );
    o.counter_with(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        &[
            (&[("reason", "max_num_queued_reqs")], 0.0),
            (&[("reason", "max_num_queued_tokens")], 0.0),
        ],
        false,
    );
    o.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        &st.request_prompt_tokens,
    );
    o.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        &st.request_generation_tokens,
    );
    o.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        &st.iteration_tokens,
    );
    o.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        &st.request_max_num_generation_tokens,
    );
    o.histogram(
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        &st.request_params_n,
    );
    o.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        &st.request_params_max_tokens,
    );
    o.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &st.ttft,
    );
    o.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &st.itl,
    );
    o.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        &st.tpot,
    );
    o.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        &st.e2e,
    );
    o.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &st.queue,
    );
    o.histogram(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        &st.inference,
    );
    o.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        &st.prefill,
    );
    o.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        &st.decode,
    );
    o.histogram(
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        &st.request_num_preemptions,
    );
    o.histogram(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        &st.prefill_kv_computed_tokens,
    );
    render_cache_config_info(&mut o, cfg);
    o.s
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn render_cache_config_info(o: &mut Out<'_>, cfg: &EngineConfig) {
    o.header(
        "vllm:cache_config_info",
        Kind::Gauge,
        "Information of the LLMEngine CacheConfig",
    );
    let block = cfg.block_size.to_string();
    let num_gpu_blocks = cfg.num_gpu_blocks.to_string();
    let util = py_float(cfg.gpu_memory_utilization);
    let tokens = cfg.kv_cache_tokens().to_string();
    let conc = py_float(cfg.max_concurrency());
    let kv_bytes =
        ((cfg.num_gpu_blocks as f64) * cfg.kv_bytes_per_token * f64::from(cfg.block_size))
            .round()
            .to_string();
    let override_s = if cfg.num_gpu_blocks_overridden {
        cfg.num_gpu_blocks.to_string()
    } else {
        "None".to_string()
    };
    let labels: Vec<(&str, &str)> = vec![
        ("_block_size_resolved", "True"),
        ("block_size", &block),
        ("cache_dtype", "auto"),
        ("cache_hit_alignment_tokens", "None"),
        ("effective_attention_block_size", &block),
        ("enable_mamba_shared_prefix_checkpoint", "False"),
        ("enable_prefix_caching", py_bool(cfg.enable_prefix_caching)),
        ("engine", "0"),
        ("gpu_memory_utilization", &util),
        ("hash_block_size", "None"),
        ("is_attention_free", "False"),
        ("kv_cache_dtype_skip_layers", "[]"),
        ("kv_cache_layout", "None"),
        ("kv_cache_max_concurrency", &conc),
        ("kv_cache_memory_bytes", &kv_bytes),
        ("kv_cache_size_tokens", &tokens),
        ("kv_offloading_backend", "native"),
        ("kv_offloading_size", "None"),
        ("kv_sharing_fast_prefill", "False"),
        ("mamba_block_size", "None"),
        ("mamba_cache_dtype", "auto"),
        ("mamba_cache_mode", "none"),
        ("mamba_page_size_padded", "None"),
        ("mamba_ssm_cache_dtype", "float32"),
        ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", &num_gpu_blocks),
        ("num_gpu_blocks_override", &override_s),
        ("prefix_cache_retention_interval", "0"),
        ("prefix_caching_hash_algo", "sha256"),
        ("prefix_match_unit", "None"),
        ("replayssm_buffer_len", "16"),
        ("skip_page_size_padded", "None"),
        ("sliding_window", "None"),
        ("swa_bounded_replay", "True"),
        ("use_kda_recoverssm", "False"),
        ("use_replayssm", "False"),
        ("user_specified_block_size", "False"),
    ];
    o.sample("vllm:cache_config_info", &labels, 1.0);
}
