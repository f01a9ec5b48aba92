//! The decision table, kept as data: one [`Rule`] per row with its id, the condition in words,
//! the likely bottleneck, the first corrective action, its trade-off, and the metrics to watch.
//! The condition itself is a small named function over [`Facts`] that returns the evidence (or
//! nothing), so every finding carries the figures that made it fire.
//!
//! Thresholds are written in the rows' `condition` text and in the functions, nowhere else.

use headroom_core::Verdict;
use headroom_core::verdict::{Confidence, Evidence};

use headroom_signals::Signal;

use crate::facts::Facts;

/// What kind of statement a row makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Names the resource that limits latency or throughput; at most one or two fire at a time.
    Bottleneck,
    /// Describes the workload or the server's use of it (truncation, prefix reuse, shape).
    Workload,
    /// The hardware is unhealthy.
    Health,
    /// Operational advice that follows from the other findings (alerting, autoscaling).
    Advice,
}

/// Everything a rule may look at.
pub struct Context<'a> {
    /// Derived figures.
    pub facts: &'a Facts,
    /// Verdicts per objective id decided so far (`ttft_p95` → FAIL, …).
    pub verdicts: &'a [(String, Verdict)],
    /// Whether the SLO has a `queue_time` objective.
    pub slo_has_queue_objective: bool,
    /// The client's note that the workload drifted from its spec, if any.
    pub workload_drift: Option<&'a str>,
    /// Share of requests the client sent with `ignore_eos` (see
    /// [`crate::ClientView::ignore_eos_share`]); `None` when unknown.
    pub ignore_eos_share: Option<f64>,
    /// Ids of rows that already fired (rows are evaluated in table order).
    pub fired: &'a [&'static str],
}

impl Context<'_> {
    fn verdict_of(&self, prefix: &str) -> Option<Verdict> {
        let vs: Vec<Verdict> = self
            .verdicts
            .iter()
            .filter(|(id, _)| id.starts_with(prefix))
            .map(|(_, v)| *v)
            .collect();
        (!vs.is_empty()).then(|| Verdict::combine(vs))
    }
    fn all_pass(&self) -> bool {
        !self.verdicts.is_empty() && self.verdicts.iter().all(|(_, v)| *v == Verdict::Pass)
    }
}

/// A row that matched: its confidence and evidence.
pub struct Match {
    /// How sure.
    pub confidence: Confidence,
    /// The figures.
    pub evidence: Vec<Evidence>,
}

/// One row of the decision table.
pub struct Rule {
    /// Stable id (`admission_saturation`, `kv_pressure`, `truncation`, …).
    pub id: &'static str,
    /// One-line statement when it fires.
    pub title: &'static str,
    /// Kind of statement.
    pub category: Category,
    /// The condition, in words (with its thresholds).
    pub condition: &'static str,
    /// Likely bottleneck.
    pub bottleneck: &'static str,
    /// First corrective action to test.
    pub action: &'static str,
    /// What the action costs.
    pub trade_off: &'static str,
    /// Metrics to watch after the change.
    pub watch: &'static [&'static str],
    /// Canonical signals the condition reads where a missing figure would count as "none" (zero
    /// preemptions, KV usage unknown, …): when one of them was rejected as corrupt, the row is
    /// not evaluated at all (`headroom_signals::quality`).
    pub inputs: &'static [Signal],
    /// The condition as code.
    pub check: fn(&Context<'_>) -> Option<Match>,
}

fn ev(metric: &str, value: f64, unit: &str, note: impl Into<String>) -> Evidence {
    Evidence {
        metric: metric.to_owned(),
        value,
        unit: unit.to_owned(),
        note: note.into(),
    }
}

/// The table, in evaluation order (bottlenecks first, advice last).
pub const RULES: &[Rule] = &[
    Rule {
        id: "kv_pressure",
        title: "KV-cache pressure: requests are preempted for lack of KV blocks",
        category: Category::Bottleneck,
        condition: "preemptions > 0 over the window (≥ 0.01 per finished request), or KV-cache usage max ≥ 0.95 with requests waiting for capacity",
        bottleneck: "KV-cache capacity: the paged KV pool cannot hold the running batch, so the scheduler preempts and recomputes requests",
        action: "give the KV cache more room: raise --gpu-memory-utilization, use an FP8 KV cache (--kv-cache-dtype fp8), or lower --max-num-seqs / --max-model-len; add GPUs (tensor parallel) if none of these suffice",
        trade_off: "more KV memory leaves less for activations/CUDA graphs; FP8 KV may cost a little accuracy; fewer sequences lower peak throughput",
        watch: &[
            "vllm:num_preemptions_total",
            "vllm:kv_cache_usage_perc",
            "vllm:num_requests_waiting_by_reason{reason=\"capacity\"}",
            "vllm:request_queue_time_seconds",
        ],
        inputs: &[
            Signal::Preemptions,
            Signal::RequestsFinished,
            Signal::KvCacheUsage,
            Signal::WaitingForCapacity,
        ],
        check: kv_pressure,
    },
    Rule {
        id: "prefill_contention",
        title: "Prefill contention: first tokens wait on long prompt processing",
        category: Category::Bottleneck,
        condition: "prefill ≥ 30 % of server TTFT and ≥ 100 ms mean, and either ITL spikes (ITL p95 ≥ 3 × ITL p50, bucket brackets taken pessimistically: steps carrying prefill chunks stall decode) or a TTFT objective failing with prefill ≥ 50 % of TTFT",
        bottleneck: "prompt processing (prefill) compute: long prompts, or prefill batched against decode",
        action: "enable chunked prefill with a smaller --max-num-batched-tokens, enable prefix caching for shared prefixes, or separate prefill and decode (disaggregation) for long-context traffic",
        trade_off: "smaller prefill chunks lower throughput; disaggregation needs more GPUs and a KV transfer path",
        watch: &[
            "vllm:request_prefill_time_seconds",
            "vllm:time_to_first_token_seconds",
            "vllm:request_prompt_tokens",
            "vllm:iteration_tokens_total",
        ],
        inputs: &[Signal::PrefillTime, Signal::Ttft],
        check: prefill_contention,
    },
    Rule {
        id: "admission_saturation",
        title: "Admission saturation: requests wait for a batch slot, not for KV or compute",
        category: Category::Bottleneck,
        condition: "queue time ≥ 50 % of server TTFT and ≥ 50 ms mean, no preemptions, KV-cache usage max < 0.9 (or unknown), not explained by prefill contention (which fired first), and, with ≥ 3 scrapes, some requests seen waiting",
        bottleneck: "the scheduler's admission limit (--max-num-seqs / --max-num-batched-tokens) or offered load beyond one replica: requests queue while KV room is left",
        action: "raise --max-num-seqs (and --max-num-batched-tokens) while KV usage and ITL stay within bounds; otherwise add replicas",
        trade_off: "a larger batch raises ITL/TPOT for everyone; replicas cost GPUs",
        watch: &[
            "vllm:request_queue_time_seconds",
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
            "vllm:inter_token_latency_seconds",
        ],
        inputs: &[
            Signal::QueueTime,
            Signal::Ttft,
            Signal::Preemptions,
            Signal::KvCacheUsage,
            Signal::Waiting,
        ],
        check: admission_saturation,
    },
    Rule {
        id: "decode_capacity",
        title: "Decode capacity: token generation is too slow for the ITL objective",
        category: Category::Bottleneck,
        condition: "an ITL or TPOT objective fails while decode is ≥ 50 % of running time",
        bottleneck: "decode step time: batch too large for the GPU's memory bandwidth, or a model too large for the device",
        action: "lower --max-num-seqs to shorten decode steps, or quantise the weights (FP8/INT4) / use a faster GPU; speculative decoding helps at low batch sizes",
        trade_off: "smaller batches lower throughput per GPU; quantisation may cost accuracy",
        watch: &[
            "vllm:inter_token_latency_seconds",
            "vllm:request_time_per_output_token_seconds",
            "vllm:num_requests_running",
            "DCGM_FI_PROF_DRAM_ACTIVE",
        ],
        inputs: &[Signal::DecodeTime, Signal::InferenceTime],
        check: decode_capacity,
    },
    Rule {
        id: "device_fault",
        title: "GPU fault or throttling",
        category: Category::Health,
        condition: "a non-zero XID, a throttle reason (power cap, HW slowdown, thermal, power brake), violation time > 0, or GPU temperature ≥ 85 °C",
        bottleneck: "the device itself: errors or clocks held down by power or temperature",
        action: "check the node (nvidia-smi -q, dmesg for XID); fix cooling or power capping; drain the GPU if XIDs repeat",
        trade_off: "draining a GPU removes capacity until it is repaired",
        watch: &[
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
        ],
        inputs: &[],
        check: device_fault,
    },
    Rule {
        id: "memory_bandwidth_bound",
        title: "Memory-bandwidth bound: the GPU waits on DRAM, not on tensor cores",
        category: Category::Bottleneck,
        condition: "an ITL or TPOT objective fails, and GPU engine active ≥ 0.5, DRAM active ≥ 0.5 and tensor-pipe active < 0.2 (means over the window)",
        bottleneck: "HBM bandwidth: decode reads every weight per step",
        action: "quantise before buying hardware (FP8/INT4 weights halve or quarter the bytes read per token); larger batches amortise the reads",
        trade_off: "quantisation may cost accuracy; larger batches raise ITL",
        watch: &[
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        ],
        inputs: &[],
        check: memory_bandwidth_bound,
    },
    Rule {
        id: "batching_not_working",
        title: "Batching is not working: requests wait while the engine runs one at a time",
        category: Category::Bottleneck,
        condition: "at least 2 scrapes, waiting max ≥ 1 while running max ≤ 1",
        bottleneck: "the engine serialises requests (max-num-seqs 1, a client sending one at a time, or an engine without continuous batching)",
        action: "check --max-num-seqs and the client concurrency; use an engine build with continuous batching",
        trade_off: "none beyond higher ITL once batches form",
        watch: &[
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:iteration_tokens_total",
        ],
        inputs: &[Signal::Waiting, Signal::Running],
        check: batching_not_working,
    },
    Rule {
        id: "errors_outside_engine",
        title: "Errors the engine never saw: requests rejected at the HTTP front",
        category: Category::Workload,
        condition: "HTTP 4xx or 5xx responses, or admission rejections, over the window",
        bottleneck: "request validation or admission in the API server (prompt too long, unknown model, queue limit), not the engine",
        action: "read the 4xx/5xx bodies on the client; fix prompt lengths or model names, or raise --max-num-queued-reqs",
        trade_off: "a higher queue limit trades rejections for queueing delay",
        watch: &[
            "http_requests_total{status=~\"4xx|5xx\"}",
            "vllm:admission_rejections_total",
        ],
        inputs: &[Signal::HttpRequests, Signal::AdmissionRejections],
        check: errors_outside_engine,
    },
    Rule {
        id: "truncation",
        title: "Answers cut at max_tokens",
        category: Category::Workload,
        condition: "≥ 5 % of finished requests end with finished_reason=length (low confidence when every request ran exactly to max_tokens: a benchmark with ignore_eos looks the same on the server)",
        bottleneck: "the max_tokens cap, not the server: answers are truncated",
        action: "raise max_tokens for this class if full answers are needed (or accept truncation as the product decision it is)",
        trade_off: "longer answers hold KV blocks and batch slots longer",
        watch: &[
            "vllm:request_success_total{finished_reason=\"length\"}",
            "vllm:request_generation_tokens",
            "vllm:request_params_max_tokens",
        ],
        inputs: &[Signal::RequestsFinished],
        check: truncation,
    },
    Rule {
        id: "low_prefix_reuse",
        title: "Low prefix reuse: the prefix cache finds little to share",
        category: Category::Workload,
        condition: "≥ 1000 prefix-cache query tokens and hit ratio < 10 %",
        bottleneck: "prompts do not share prefixes (or shared parts are not at the start / not byte-identical)",
        action: "put shared system prompts and documents first and keep them byte-identical; route same-prefix traffic to the same replica",
        trade_off: "none on the server; prompt layout changes in the application",
        watch: &[
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_queries_total",
        ],
        inputs: &[Signal::PrefixCacheQueries, Signal::PrefixCacheHits],
        check: low_prefix_reuse,
    },
    Rule {
        id: "decode_dominated",
        title: "Decode-dominated workload: stop optimising prefill",
        category: Category::Workload,
        condition: "decode ≥ 80 % of running (inference) time",
        bottleneck: "generation length: most of a request's running time is decode",
        action: "optimise decode (batching, quantisation, speculative decoding) rather than prefill",
        trade_off: "none; this is a pointer where effort pays",
        watch: &[
            "vllm:request_decode_time_seconds",
            "vllm:request_inference_time_seconds",
        ],
        inputs: &[Signal::DecodeTime, Signal::InferenceTime],
        check: decode_dominated,
    },
    Rule {
        id: "efficient_load",
        title: "Efficient load: the GPU is busy and every objective passes",
        category: Category::Workload,
        condition: "every objective PASS, GPU engine active ≥ 0.6 (or GPU_UTIL ≥ 80 % without profiling metrics)",
        bottleneck: "none: this is the operating point to keep",
        action: "keep this load as the per-replica capacity; scale out beyond it",
        trade_off: "none",
        watch: &[
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "vllm:request_queue_time_seconds",
        ],
        inputs: &[],
        check: efficient_load,
    },
    Rule {
        id: "workload_changed_shape",
        title: "The workload changed shape",
        category: Category::Workload,
        condition: "the client reports drift from the workload spec",
        bottleneck: "not a server problem: the measured traffic is not the traffic the SLO was written for",
        action: "re-check the workload spec (prompt/output lengths, mix) before acting on other findings",
        trade_off: "none",
        watch: &[
            "vllm:request_prompt_tokens",
            "vllm:request_generation_tokens",
        ],
        inputs: &[],
        check: workload_changed_shape,
    },
    Rule {
        id: "autoscaling_trigger",
        title: "Autoscale on KV usage and waiting requests, never on GPU utilisation",
        category: Category::Advice,
        condition: "admission saturation or KV pressure fired",
        bottleneck: "capacity of one replica",
        action: "scale replicas on vllm:num_requests_waiting > 0 sustained, or vllm:kv_cache_usage_perc > 0.9; GPU utilisation reads high at any batch size",
        trade_off: "more replicas cost GPUs; scale-up takes minutes (model load)",
        watch: &["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"],
        inputs: &[],
        check: autoscaling_trigger,
    },
    Rule {
        id: "alert_on_queue_time",
        title: "Alert on queue time, not VRAM",
        category: Category::Advice,
        condition: "queue time ≥ 10 % of server TTFT and the SLO has no queue_time objective",
        bottleneck: "—",
        action: "add a queue_time objective (e.g. p99 < 100 ms) and alert on it; VRAM use is always near full by design (the KV pool is preallocated)",
        trade_off: "none",
        watch: &["vllm:request_queue_time_seconds"],
        inputs: &[Signal::QueueTime, Signal::Ttft],
        check: alert_on_queue_time,
    },
];

fn kv_pressure(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let pre = f.preemptions.unwrap_or(0.0);
    let per_req = f
        .preemptions_per_request
        .unwrap_or(if pre > 0.0 { 1.0 } else { 0.0 });
    let full = f.kv_usage_max.is_some_and(|k| k >= 0.95);
    let capacity_wait = f.waiting_capacity_max.is_some_and(|w| w >= 1.0);
    let preempting = pre > 0.0 && per_req >= 0.01;
    if !(preempting || (full && capacity_wait)) {
        return None;
    }
    let mut evidence = vec![ev(
        "vllm:num_preemptions_total",
        pre,
        "count",
        format!("increase over the window ({per_req:.2} per finished request)"),
    )];
    if let Some(k) = f.kv_usage_max {
        evidence.push(ev(
            "vllm:kv_cache_usage_perc",
            k,
            "ratio",
            "max over the window's scrapes",
        ));
    }
    if let Some(t) = f.kv_pool_tokens {
        evidence.push(ev(
            "kv_pool_tokens",
            t,
            "tokens",
            "num_gpu_blocks × block_size (cache_config_info)",
        ));
    }
    if let Some(mc) = f.kv_max_concurrency {
        evidence.push(ev(
            "kv_cache_max_concurrency",
            mc,
            "requests",
            "full-length requests the pool holds at once (cache_config_info)",
        ));
    }
    if let Some(q) = f.queue_mean_s {
        evidence.push(ev(
            "vllm:request_queue_time_seconds",
            q,
            "s",
            "mean per request (waiting for KV)",
        ));
    }
    let strong = [
        preempting,
        full,
        capacity_wait,
        f.kv_max_concurrency.is_some_and(|m| m < 4.0),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    let confidence = match strong {
        0 | 1 => Confidence::Medium,
        _ => Confidence::High,
    };
    Some(Match {
        confidence,
        evidence,
    })
}

fn admission_saturation(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let share = f.queue_share_of_ttft?;
    let queue = f.queue_mean_s?;
    if share < 0.5 || queue < 0.05 {
        return None;
    }
    if f.preemptions.unwrap_or(0.0) > 0.0 || f.kv_usage_max.is_some_and(|k| k >= 0.9) {
        return None;
    }
    // Requests that queue because long prefills hold the token budget are prefill contention
    // (engine twin: a quarter of 8k-token prompts, queue ≈ prefill ≈ 1 s), not a slot limit.
    if c.fired.contains(&"prefill_contention") {
        return None;
    }
    // With several scrapes and never a request waiting, the queue time was transient (bursts
    // between scrapes), not a standing queue behind a slot limit. A single scrape (since server
    // start) shows the gauges only at its end, so it cannot tell.
    if f.gauge_samples >= 3 && f.waiting_max == Some(0.0) {
        return None;
    }
    let mut evidence = vec![
        ev(
            "vllm:request_queue_time_seconds",
            queue,
            "s",
            "mean per request over the window",
        ),
        ev(
            "queue_share_of_ttft",
            share,
            "ratio",
            format!(
                "queue mean / server TTFT mean ({:.3} s)",
                f.ttft_mean_s.unwrap_or(f64::NAN)
            ),
        ),
        ev(
            "vllm:num_preemptions_total",
            f.preemptions.unwrap_or(0.0),
            "count",
            "no preemption: KV is not the limit",
        ),
    ];
    if let Some(p) = f.prefill_mean_s {
        evidence.push(ev(
            "vllm:request_prefill_time_seconds",
            p,
            "s",
            "mean per request: prefill is short",
        ));
    }
    if let Some(k) = f.kv_usage_max {
        evidence.push(ev(
            "vllm:kv_cache_usage_perc",
            k,
            "ratio",
            "max over the window's scrapes",
        ));
    }
    if let Some(mc) = f.kv_max_concurrency {
        evidence.push(ev(
            "kv_cache_max_concurrency",
            mc,
            "requests",
            "room in the KV pool (cache_config_info)",
        ));
    }
    let confidence = if share >= 0.7 && (f.kv_usage_max.is_some() || f.kv_max_concurrency.is_some())
    {
        Confidence::High
    } else {
        Confidence::Medium
    };
    Some(Match {
        confidence,
        evidence,
    })
}

fn prefill_contention(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let share = f.prefill_share_of_ttft?;
    let prefill = f.prefill_mean_s?;
    if share < 0.3 || prefill < 0.1 {
        return None;
    }
    // Without queueing, prefill *is* most of TTFT for any prompt, so the share alone fires on a
    // healthy server (engine twin, 200-token prompts: prefill 0.13 s = 91 % of TTFT). Contention
    // shows as decode steps stalled by prefill chunks: ITL p95 several times ITL p50, taken
    // pessimistically (p95's lower bucket bound over p50's upper one).
    let spikes = match (f.itl_p50, f.itl_p95) {
        (Some(p50), Some(p95)) if p50.upper.is_finite() && p50.upper > 0.0 => {
            Some(p95.lower / p50.upper)
        }
        _ => None,
    };
    let ttft_fails = c.verdict_of("ttft") == Some(Verdict::Fail);
    let spiking = spikes.is_some_and(|r| r >= 3.0);
    if !(spiking || (ttft_fails && share >= 0.5)) {
        return None;
    }
    let mut evidence = vec![
        ev(
            "vllm:request_prefill_time_seconds",
            prefill,
            "s",
            "mean per request",
        ),
        ev(
            "prefill_share_of_ttft",
            share,
            "ratio",
            "prefill mean / server TTFT mean",
        ),
    ];
    if let Some(p) = f.prompt_len_mean {
        evidence.push(ev(
            "vllm:request_prompt_tokens",
            p,
            "tokens",
            "mean prompt length",
        ));
    }
    if let (Some(r), Some(p50), Some(p95)) = (spikes, f.itl_p50, f.itl_p95) {
        evidence.push(ev(
            "itl_p95_over_p50",
            r,
            "ratio",
            format!(
                "vllm:inter_token_latency_seconds p95 in [{}, {}] s over p50 in [{}, {}] s (lower / upper bound)",
                p95.lower, p95.upper, p50.lower, p50.upper
            ),
        ));
    }
    Some(Match {
        confidence: if ttft_fails && spiking {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
    })
}

fn decode_capacity(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let failing = [c.verdict_of("itl"), c.verdict_of("tpot")].contains(&Some(Verdict::Fail));
    let share = f.decode_share_of_inference?;
    if !failing || share < 0.5 {
        return None;
    }
    let mut evidence = vec![ev(
        "decode_share_of_inference",
        share,
        "ratio",
        "decode mean / inference mean",
    )];
    if let Some(i) = f.itl_mean_s {
        evidence.push(ev(
            "vllm:inter_token_latency_seconds",
            i,
            "s",
            "mean per engine step",
        ));
    }
    if let Some(r) = f.running_mean {
        evidence.push(ev(
            "vllm:num_requests_running",
            r,
            "count",
            "mean over the window's scrapes",
        ));
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence,
    })
}

fn device_fault(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let hot = f.gpu_temp_max_c.filter(|t| *t >= 85.0);
    if f.gpu_xids.is_empty() && f.gpu_throttle.is_empty() && hot.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    for x in &f.gpu_xids {
        evidence.push(ev("DCGM_FI_DEV_XID_ERRORS", 1.0, "event", x.clone()));
    }
    for t in &f.gpu_throttle {
        evidence.push(ev(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            1.0,
            "event",
            t.clone(),
        ));
    }
    if let Some(t) = hot {
        evidence.push(ev("DCGM_FI_DEV_GPU_TEMP", t, "°C", "max over the window"));
    }
    Some(Match {
        confidence: if f.gpu_xids.is_empty() {
            Confidence::Medium
        } else {
            Confidence::High
        },
        evidence,
    })
}

fn memory_bandwidth_bound(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let (gr, dram, tensor) = (f.gpu_gr_active?, f.gpu_dram_active?, f.gpu_tensor_active?);
    if gr < 0.5 || dram < 0.5 || tensor >= 0.2 {
        return None;
    }
    // Decode reads every weight per step, so any busy decode-heavy GPU shows this profile
    // (engine twin, healthy 4-client load: DRAM 0.55, tensor 0.05). It is a bottleneck only
    // when decode speed is what breaks an objective.
    let decode_fails = [c.verdict_of("itl"), c.verdict_of("tpot")].contains(&Some(Verdict::Fail));
    if !decode_fails {
        return None;
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence: vec![
            ev(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                gr,
                "ratio",
                "mean, busiest GPU",
            ),
            ev(
                "DCGM_FI_PROF_DRAM_ACTIVE",
                dram,
                "ratio",
                "mean, busiest GPU",
            ),
            ev(
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                tensor,
                "ratio",
                "mean, busiest GPU",
            ),
        ],
    })
}

fn batching_not_working(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    if f.gauge_samples < 2 {
        return None;
    }
    let (w, r) = (f.waiting_max?, f.running_max?);
    if w < 1.0 || r > 1.0 {
        return None;
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence: vec![
            ev(
                "vllm:num_requests_waiting",
                w,
                "count",
                format!("max over {} scrapes", f.gauge_samples),
            ),
            ev(
                "vllm:num_requests_running",
                r,
                "count",
                "max over the same scrapes",
            ),
        ],
    })
}

fn errors_outside_engine(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let e4 = f.http_4xx.unwrap_or(0.0);
    let e5 = f.http_5xx.unwrap_or(0.0);
    let rej = f.admission_rejections.unwrap_or(0.0);
    if e4 + e5 + rej <= 0.0 {
        return None;
    }
    let mut evidence = Vec::new();
    if e4 > 0.0 {
        evidence.push(ev(
            "http_requests_total{status=\"4xx\"}",
            e4,
            "count",
            "increase over the window",
        ));
    }
    if e5 > 0.0 {
        evidence.push(ev(
            "http_requests_total{status=\"5xx\"}",
            e5,
            "count",
            "increase over the window",
        ));
    }
    if rej > 0.0 {
        evidence.push(ev(
            "vllm:admission_rejections_total",
            rej,
            "count",
            "increase over the window",
        ));
    }
    if let Some(e) = f.finished_error {
        evidence.push(ev(
            "vllm:request_success_total{finished_reason=\"error\"}",
            e,
            "count",
            "errors the engine itself saw",
        ));
    }
    Some(Match {
        confidence: Confidence::High,
        evidence,
    })
}

fn truncation(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let (len, fin) = (f.finished_length?, f.finished?);
    if fin <= 0.0 || len / fin < 0.05 {
        return None;
    }
    let share = len / fin;
    // Requests sent with ignore_eos end at max_tokens by design: only the length share beyond
    // theirs is truncation. When the client sent every request that way, nothing here can be.
    let by_design = c.ignore_eos_share.unwrap_or(0.0).clamp(0.0, 1.0);
    if by_design >= 0.999 || share - by_design < 0.05 {
        return None;
    }
    let mut evidence = vec![ev(
        "vllm:request_success_total{finished_reason=\"length\"}",
        len,
        "count",
        format!("{:.1} % of {fin} finished requests", share * 100.0),
    )];
    if by_design > 0.0 {
        evidence.push(ev(
            "client_ignore_eos_share",
            by_design,
            "ratio",
            "of the requests were sent with ignore_eos and end at max_tokens by design",
        ));
    }
    let at_cap = match (f.gen_len_mean, f.max_tokens_mean) {
        (Some(g), Some(m)) if m > 0.0 => {
            evidence.push(ev(
                "vllm:request_generation_tokens",
                g,
                "tokens",
                format!("mean; mean max_tokens {m}"),
            ));
            g / m >= 0.95
        }
        _ => false,
    };
    // Every request ending exactly at max_tokens is what a benchmark sending `ignore_eos`
    // produces; the server's metrics cannot tell the two apart.
    let all_at_cap = share >= 0.999
        && matches!((f.gen_len_mean, f.max_tokens_mean), (Some(g), Some(m)) if m > 0.0 && (g - m).abs() <= 1e-9 * m);
    if all_at_cap {
        evidence.push(ev(
            "finished_length_share",
            share,
            "ratio",
            "every request ran exactly to max_tokens: if the client sent ignore_eos (a benchmark), this is by design, not truncation",
        ));
    }
    Some(Match {
        confidence: if all_at_cap {
            Confidence::Low
        } else if share >= 0.2 || at_cap {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
    })
}

fn low_prefix_reuse(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let (q, r) = (f.prefix_queries?, f.prefix_hit_ratio?);
    if q < 1000.0 || r >= 0.1 {
        return None;
    }
    Some(Match {
        confidence: Confidence::Low,
        evidence: vec![
            ev(
                "prefix_cache_hit_ratio",
                r,
                "ratio",
                "Δhits / Δqueries over the window",
            ),
            ev(
                "vllm:prefix_cache_queries_total",
                q,
                "tokens",
                "increase over the window",
            ),
        ],
    })
}

fn decode_dominated(c: &Context<'_>) -> Option<Match> {
    let share = c.facts.decode_share_of_inference?;
    if share < 0.8 {
        return None;
    }
    let mut evidence = vec![ev(
        "decode_share_of_inference",
        share,
        "ratio",
        "decode mean / inference mean",
    )];
    if let (Some(g), Some(p)) = (c.facts.gen_len_mean, c.facts.prompt_len_mean) {
        evidence.push(ev(
            "generation_to_prompt_ratio",
            if p > 0.0 { g / p } else { f64::NAN },
            "ratio",
            "mean generated / mean prompt tokens",
        ));
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence,
    })
}

fn efficient_load(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    if !c.all_pass() {
        return None;
    }
    let busy = match (f.gpu_gr_active, f.gpu_util_pct) {
        (Some(gr), _) => gr >= 0.6,
        (None, Some(u)) => u >= 80.0,
        _ => false,
    };
    if !busy {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some(gr) = f.gpu_gr_active {
        evidence.push(ev(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            gr,
            "ratio",
            "mean, busiest GPU",
        ));
    }
    if let Some(u) = f.gpu_util_pct {
        evidence.push(ev("DCGM_FI_DEV_GPU_UTIL", u, "%", "mean, busiest GPU"));
    }
    Some(Match {
        confidence: if f.gpu_gr_active.is_some() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
    })
}

fn workload_changed_shape(c: &Context<'_>) -> Option<Match> {
    let note = c.workload_drift?;
    Some(Match {
        confidence: Confidence::High,
        evidence: vec![ev("workload_drift", 1.0, "flag", note)],
    })
}

fn autoscaling_trigger(c: &Context<'_>) -> Option<Match> {
    if !c
        .fired
        .iter()
        .any(|id| *id == "admission_saturation" || *id == "kv_pressure")
    {
        return None;
    }
    let f = c.facts;
    let mut evidence = Vec::new();
    if let Some(w) = f.waiting_max {
        evidence.push(ev(
            "vllm:num_requests_waiting",
            w,
            "count",
            "max over the window's scrapes",
        ));
    }
    if let Some(k) = f.kv_usage_max {
        evidence.push(ev(
            "vllm:kv_cache_usage_perc",
            k,
            "ratio",
            "max over the window's scrapes",
        ));
    }
    if let Some(q) = f.queue_mean_s {
        evidence.push(ev(
            "vllm:request_queue_time_seconds",
            q,
            "s",
            "mean per request",
        ));
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence,
    })
}

fn alert_on_queue_time(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let share = f.queue_share_of_ttft?;
    if share < 0.1 || c.slo_has_queue_objective {
        return None;
    }
    Some(Match {
        confidence: Confidence::Medium,
        evidence: vec![ev(
            "queue_share_of_ttft",
            share,
            "ratio",
            "queue mean / server TTFT mean; no queue_time objective in the SLO",
        )],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_cover_the_design_rows() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for id in [
            "admission_saturation",
            "prefill_contention",
            "decode_capacity",
            "kv_pressure",
            "device_fault",
            "efficient_load",
            "decode_dominated",
            "memory_bandwidth_bound",
            "truncation",
            "low_prefix_reuse",
            "batching_not_working",
            "errors_outside_engine",
            "autoscaling_trigger",
            "alert_on_queue_time",
            "workload_changed_shape",
        ] {
            assert!(ids.contains(&id), "missing row {id}");
        }
    }

    #[test]
    fn nothing_fires_on_no_facts() {
        let facts = Facts::default();
        let ctx = Context {
            facts: &facts,
            verdicts: &[],
            slo_has_queue_objective: false,
            workload_drift: None,
            ignore_eos_share: None,
            fired: &[],
        };
        for r in RULES {
            assert!((r.check)(&ctx).is_none(), "{} fired on empty facts", r.id);
        }
    }

    #[test]
    fn memory_bound_thresholds() {
        let facts = Facts {
            gpu_gr_active: Some(0.8),
            gpu_dram_active: Some(0.7),
            gpu_tensor_active: Some(0.1),
            ..Facts::default()
        };
        let itl_fails = [("itl_p95".to_owned(), Verdict::Fail)];
        let ctx = Context {
            facts: &facts,
            verdicts: &itl_fails,
            slo_has_queue_objective: false,
            workload_drift: None,
            ignore_eos_share: None,
            fired: &[],
        };
        assert!(memory_bandwidth_bound(&ctx).is_some());
        // the same GPU profile while decode meets its objective: not a bottleneck
        let itl_passes = [("itl_p95".to_owned(), Verdict::Pass)];
        let passing = Context {
            verdicts: &itl_passes,
            ..ctx
        };
        assert!(memory_bandwidth_bound(&passing).is_none());
        let ctx = Context {
            verdicts: &itl_fails,
            ..passing
        };
        // the T4 fixture: GR 0.156, DRAM 0.093, tensor 0.006 → not bandwidth bound
        let t4 = Facts {
            gpu_gr_active: Some(0.156205),
            gpu_dram_active: Some(0.092781),
            gpu_tensor_active: Some(0.005822),
            ..Facts::default()
        };
        let ctx = Context { facts: &t4, ..ctx };
        assert!(memory_bandwidth_bound(&ctx).is_none());
    }
}
