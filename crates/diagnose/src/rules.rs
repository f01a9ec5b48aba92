//! The decision table, kept as data: one [`Rule`] per row with its id, the condition in words,
//! the likely bottleneck, the first corrective action, its trade-off, and the metrics to watch.
//! The condition itself is a small named function over [`Facts`] that returns the evidence (or
//! nothing), so every finding carries the figures that made it fire.
//!
//! Thresholds are written in the rows' `condition` text and in the functions, nowhere else.
//!
//! Two rules hold for every row:
//! - A finding fires only when it explains an objective that fails or nearly fails
//!   ([`NEAR_FAILING_SHARE`]) or asks for an action; a description of a healthy workload is a
//!   remark in the six steps instead.
//! - Evidence that makes a qualitative claim ("DRAM busy", "prefill is short") makes it about its
//!   own value, and the note starts with the comparison that decides it (`≥ 0.5: DRAM busy`,
//!   `< 0.3: prefill is short beside the queue`); the claim is chosen by that comparison, so it
//!   cannot contradict the number shown ([`judged`]).
//!
//! Rows whose actions would pull opposite ways (a larger batch against a smaller one, "no change
//! needed" against any change) never fire together: each such row yields to the one whose
//! objective is failing (see the tie-breaks in `admission_saturation` and `efficient_load`).

use headroom_core::LatencySignal::{self, E2e, Itl, QueueTime, Tpot, Ttft};
use headroom_core::Verdict;
use headroom_core::objective::ObjectiveId;
use headroom_core::run::ObjectiveResult;
use headroom_core::verdict::{Confidence, Evidence};

use headroom_signals::Signal;

use crate::facts::Facts;

/// An objective "nearly fails" when its observed value reaches this share of its threshold
/// (0.8: less than 1.25× headroom, the margin a sweep reports as the tightest).
pub const NEAR_FAILING_SHARE: f64 = 0.8;

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
    /// The objectives judged so far, with their verdicts and observed values (`ttft_p95` →
    /// FAIL, observed 0.42 s against 0.3 s, …).
    pub objectives: &'a [ObjectiveResult],
    /// Whether the SLO has a `queue_time` objective.
    pub slo_has_queue_objective: bool,
    /// The client's note that the workload drifted from its spec, if any.
    pub workload_drift: Option<&'a str>,
    /// Share of requests the client sent with `ignore_eos` (see
    /// [`crate::ClientView::ignore_eos_share`]); `None` when unknown.
    pub ignore_eos_share: Option<f64>,
    /// What the workload spec says about shared prefixes ([`crate::Setting::prefixes`]);
    /// `None` when the workload is unknown.
    pub prefixes: Option<crate::PrefixPlan>,
    /// Ids of rows that already fired (rows are evaluated in table order).
    pub fired: &'a [&'static str],
}

impl Context<'_> {
    fn verdict_of(&self, signal: LatencySignal) -> Option<Verdict> {
        let vs: Vec<Verdict> = self
            .objectives
            .iter()
            .filter(|o| o.id.signal() == Some(signal))
            .map(|o| o.verdict)
            .collect();
        (!vs.is_empty()).then(|| Verdict::combine(vs))
    }
    fn all_pass(&self) -> bool {
        !self.objectives.is_empty() && self.objectives.iter().all(|o| o.verdict == Verdict::Pass)
    }
    /// Whether an ITL or TPOT objective fails: decode speed breaks an objective.
    fn decode_fails(&self) -> bool {
        [self.verdict_of(Itl), self.verdict_of(Tpot)].contains(&Some(Verdict::Fail))
    }
    /// Among the objectives on one of `signals` (every objective when `None`), the one closest
    /// to its threshold, with observed / threshold. Readings known only as an upper bound (the
    /// rank fell in a histogram's first bucket) are left out: their value is a bucket edge, not
    /// a margin.
    fn tightest(&self, signals: Option<&[LatencySignal]>) -> Option<(&ObjectiveResult, f64)> {
        self.objectives
            .iter()
            .filter(|o| signals.is_none_or(|s| o.id.signal().is_some_and(|x| s.contains(&x))))
            .filter(|o| o.bound.is_exact())
            .filter_map(|o| {
                let v = o.observed?;
                (o.threshold > 0.0 && v.is_finite()).then(|| (o, v / o.threshold))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// A row that matched: its confidence and evidence.
pub struct Match {
    /// How sure.
    pub confidence: Confidence,
    /// The figures.
    pub evidence: Vec<Evidence>,
    /// The action the evidence calls for when it is not the row's own ([`Rule::action`]): one
    /// of the row's [`Rule::variants`], chosen by the figures (a larger token budget where the
    /// budget already splits prompts, not a smaller one).
    pub action: Option<&'static Action>,
}

/// What a first action is expected to do to an objective's metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// The metric goes down (better for a latency or error objective).
    Lowers,
    /// The metric goes up (worse for a latency or error objective).
    Raises,
}

/// The objective metric an action moves, by objective id prefix (`ttft_p95` → [`Target::Ttft`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Queue time (`queue_time_*` objectives).
    Queue,
    /// TTFT.
    Ttft,
    /// ITL.
    Itl,
    /// TPOT.
    Tpot,
    /// E2E.
    E2e,
    /// Errors + aborts (`error_rate`).
    Errors,
}

impl Target {
    /// The target an objective is about (whatever its class).
    pub fn of_objective(id: &ObjectiveId) -> Target {
        match id.signal() {
            Some(QueueTime) => Target::Queue,
            Some(Ttft) => Target::Ttft,
            Some(Itl) => Target::Itl,
            Some(Tpot) => Target::Tpot,
            Some(E2e) => Target::E2e,
            None => Target::Errors,
        }
    }
}

/// One declared effect of an action: `dir` on `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Move {
    /// Which objective metric.
    pub target: Target,
    /// Which way.
    pub dir: Dir,
}

const fn lowers(target: Target) -> Move {
    Move {
        target,
        dir: Dir::Lowers,
    }
}

const fn raises(target: Target) -> Move {
    Move {
        target,
        dir: Dir::Raises,
    }
}

/// A first action with its declared effects, so a test can check that no finding advises what
/// would worsen an objective that fails.
#[derive(Debug, PartialEq, Eq)]
pub struct Action {
    /// The action in words.
    pub text: &'static str,
    /// Its expected effects on objective metrics (the main ones, not every second-order one).
    pub moves: &'static [Move],
}

/// The declared effects of a finding's action: the row's own ([`Rule::moves`]) or the variant
/// whose text it carries; `None` for an unknown id or text.
pub fn moves_of(id: &str, action: &str) -> Option<&'static [Move]> {
    let r = RULES.iter().find(|r| r.id == id)?;
    if r.action == action {
        return Some(r.moves);
    }
    r.variants
        .iter()
        .find(|v| v.text == action)
        .map(|v| v.moves)
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
    /// Declared effects of `action` on objective metrics.
    pub moves: &'static [Move],
    /// Other actions the evidence may call for instead ([`Match::action`]).
    pub variants: &'static [&'static Action],
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

/// The threshold a [`judged`] claim compares its value with.
#[derive(Debug, Clone, Copy)]
enum Cmp {
    /// The claim holds when value ≥ the threshold.
    AtLeast(f64),
    /// The claim holds when value ≤ the threshold.
    AtMost(f64),
}

fn fmt_threshold(t: f64, unit: &str) -> String {
    match unit {
        "s" | "°C" | "%" | "tokens" => format!("{t} {unit}"),
        _ => format!("{t}"),
    }
}

/// Evidence whose note states a claim about its own value, decided by `cmp`: `holds` when the
/// comparison holds, `fails` otherwise, each preceded by the comparison as it came out
/// (`≥ 0.5: DRAM busy`, `< 0.5: DRAM not busy`), then `; rest` when `rest` is not empty.
fn judged(
    metric: &str,
    value: f64,
    unit: &str,
    cmp: Cmp,
    holds: &str,
    fails: &str,
    rest: impl Into<String>,
) -> Evidence {
    let (op, t, claim) = match cmp {
        Cmp::AtLeast(t) if value >= t => ("≥", t, holds),
        Cmp::AtLeast(t) => ("<", t, fails),
        Cmp::AtMost(t) if value <= t => ("≤", t, holds),
        Cmp::AtMost(t) => (">", t, fails),
    };
    let rest = rest.into();
    let mut note = format!("{op} {}: {claim}", fmt_threshold(t, unit));
    if !rest.is_empty() {
        note.push_str("; ");
        note.push_str(&rest);
    }
    ev(metric, value, unit, note)
}

/// Evidence for one objective's margin: observed / threshold, judged against
/// [`NEAR_FAILING_SHARE`].
fn margin(o: &ObjectiveResult, share: f64, rest: &str) -> Evidence {
    let observed = o.observed.unwrap_or(f64::NAN);
    judged(
        &format!("objective {}", o.id),
        share,
        "ratio",
        Cmp::AtLeast(NEAR_FAILING_SHARE),
        &format!(
            "{} {}",
            o.description,
            if o.verdict == Verdict::Fail {
                "fails"
            } else {
                "nearly fails"
            }
        ),
        &format!("{} passes with room", o.description),
        format!(
            "observed {observed:.4} against the threshold {} ({}){}",
            o.threshold,
            o.verdict.as_str(),
            if rest.is_empty() {
                String::new()
            } else {
                format!("; {rest}")
            }
        ),
    )
}

/// Prefill contention with ITL spikes while TTFT has room: smaller chunks interleave decode.
pub const PREFILL_SMALLER_CHUNKS: Action = Action {
    text: "enable chunked prefill with a smaller --max-num-batched-tokens, so that decode steps interleave with long prefills instead of stalling behind them (the ITL spikes shrink; TTFT, which has room, grows a little)",
    moves: &[lowers(Target::Itl), raises(Target::Ttft)],
};

/// Prefill contention where the per-step token budget already splits prompts into chunks and
/// TTFT fails: a smaller budget would split them further.
pub const PREFILL_LARGER_BUDGET: Action = Action {
    text: "raise --max-num-batched-tokens: no step carried more tokens than the longest prompts need, so each long prompt is prefilled over several steps and its first token waits for all of them; a larger budget prefills it in fewer steps (ITL, which is not failing, grows a little); prefix caching for shared prefixes and a separate pool for long-context traffic help too",
    moves: &[lowers(Target::Ttft), raises(Target::Itl)],
};

/// Decode capacity while queueing (or TTFT) fails too: a smaller batch would lengthen the queue.
pub const DECODE_FASTER_NOT_SMALLER: Action = Action {
    text: "make each decode step faster: quantise the weights (FP8/INT4) or use a GPU with more memory bandwidth, and add replicas for the queue; shrinking the batch (--max-num-seqs) would shorten decode steps but lengthen the queue, which is failing too",
    moves: &[
        lowers(Target::Itl),
        lowers(Target::Tpot),
        lowers(Target::Queue),
        lowers(Target::Ttft),
    ],
};

/// Truncation while an E2E objective fails: longer answers would make it fail further.
pub const TRUNCATION_WHILE_E2E_FAILS: Action = Action {
    text: "keep max_tokens for now: longer answers would lengthen E2E, which already fails; raise it for this class once E2E has room, if full answers are needed",
    moves: &[],
};

/// Low prefix reuse with prefix caching on (`cache_config_info`).
pub const PREFIX_CACHING_ON: Action = Action {
    text: "prefix caching is on (vllm:cache_config_info enable_prefix_caching=True), so the prompts themselves share little at their start: put shared system prompts and documents first and keep them byte-identical; route same-prefix traffic to the same replica",
    moves: &[lowers(Target::Ttft)],
};

/// Low prefix reuse with prefix caching off (`cache_config_info`).
pub const PREFIX_CACHING_OFF: Action = Action {
    text: "start the server with --enable-prefix-caching (vllm:cache_config_info says enable_prefix_caching=False); put shared system prompts and documents first and keep them byte-identical",
    moves: &[lowers(Target::Ttft)],
};

/// The table, in evaluation order (bottlenecks first, advice last).
pub const RULES: &[Rule] = &[
    Rule {
        id: "kv_pressure",
        title: "KV-cache pressure: requests are preempted for lack of KV blocks",
        category: Category::Bottleneck,
        condition: "preemptions > 0 over the window (≥ 0.01 per finished request), or KV-cache usage max ≥ 0.95 with requests waiting for capacity",
        bottleneck: "KV-cache capacity: the paged KV pool cannot hold the running batch, so the scheduler preempts and recomputes requests",
        action: "give the KV cache more room: raise --gpu-memory-utilization, use an FP8 KV cache (--kv-cache-dtype fp8), or lower --max-num-seqs / --max-model-len; add GPUs (tensor parallel) if none of these suffice",
        moves: &[
            lowers(Target::Queue),
            lowers(Target::Ttft),
            lowers(Target::E2e),
        ],
        variants: &[],
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
        action: "keep long prompts from holding everyone's first token: enable prefix caching for shared prefixes, give long-context traffic its own pool, or separate prefill and decode (disaggregation); the chunk size (--max-num-batched-tokens) trades TTFT against ITL, so change it only in the direction the failing objective needs",
        moves: &[lowers(Target::Ttft), lowers(Target::Itl)],
        variants: &[&PREFILL_SMALLER_CHUNKS, &PREFILL_LARGER_BUDGET],
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
        title: "Admission saturation: requests wait for a batch slot while the KV pool has room",
        category: Category::Bottleneck,
        condition: "queue time ≥ 50 % of server TTFT and ≥ 50 ms mean, no preemptions, KV-cache usage max < 0.9 (or unknown), not explained by prefill contention or KV pressure (which fired first), no ITL or TPOT objective failing (a larger batch would break it further: decode capacity and the autoscaling trigger speak then), and, with ≥ 3 scrapes, some requests seen waiting",
        bottleneck: "the scheduler's admission limit (--max-num-seqs / --max-num-batched-tokens) or offered load beyond one replica: requests queue while KV room is left",
        action: "raise --max-num-seqs (and --max-num-batched-tokens) while KV usage and ITL stay within bounds; otherwise add replicas",
        moves: &[
            lowers(Target::Queue),
            lowers(Target::Ttft),
            lowers(Target::E2e),
            raises(Target::Itl),
            raises(Target::Tpot),
        ],
        variants: &[],
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
        condition: "an ITL or TPOT objective fails while decode is ≥ 50 % of running (inference) time",
        bottleneck: "decode step time: batch too large for the GPU's memory bandwidth, or a model too large for the device",
        action: "lower --max-num-seqs to shorten decode steps, or quantise the weights (FP8/INT4) / use a faster GPU; speculative decoding helps at low batch sizes",
        moves: &[
            lowers(Target::Itl),
            lowers(Target::Tpot),
            raises(Target::Queue),
            raises(Target::Ttft),
        ],
        variants: &[&DECODE_FASTER_NOT_SMALLER],
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
        moves: &[
            lowers(Target::Queue),
            lowers(Target::Ttft),
            lowers(Target::Itl),
            lowers(Target::Tpot),
            lowers(Target::E2e),
            lowers(Target::Errors),
        ],
        variants: &[],
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
        action: "quantise before buying hardware (FP8/INT4 weights halve or quarter the bytes read per token); otherwise a GPU with more memory bandwidth",
        moves: &[
            lowers(Target::Itl),
            lowers(Target::Tpot),
            lowers(Target::E2e),
        ],
        variants: &[],
        trade_off: "quantisation may cost accuracy; a larger batch would amortise the reads but raise ITL further, so it is no remedy while an ITL or TPOT objective fails",
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
        moves: &[
            lowers(Target::Queue),
            lowers(Target::Ttft),
            raises(Target::Itl),
        ],
        variants: &[],
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
        action: "read the 4xx/5xx bodies on the client; fix prompt lengths or model names; where vllm:admission_rejections_total rises, raise --max-num-queued-reqs",
        moves: &[lowers(Target::Errors)],
        variants: &[],
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
        moves: &[raises(Target::E2e)],
        variants: &[&TRUNCATION_WHILE_E2E_FAILS],
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
        condition: "≥ 1000 prefix-cache query tokens and hit ratio < 10 %; when the workload spec is known, not if it shares nothing (no class sets shared_prefix_tokens or draws dataset prompts) or its shared prefixes are < 10 % of the mean prompt (the ratio is then low by design); when it is unknown (a live server, scrape files, Prometheus), the finding assumes the traffic shares prefixes",
        bottleneck: "prompts do not share prefixes, or shared parts do not reach the cache as shared: not at the start or not byte-identical, prefix caching off, or cached blocks evicted before reuse",
        action: "put shared system prompts and documents first and keep them byte-identical; check that the server runs with --enable-prefix-caching (vLLM V1's default); route same-prefix traffic to the same replica",
        moves: &[lowers(Target::Ttft)],
        variants: &[&PREFIX_CACHING_ON, &PREFIX_CACHING_OFF],
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
        condition: "decode ≥ 80 % of running (inference) time, an ITL, TPOT or E2E objective fails or nearly fails (observed ≥ 80 % of its threshold), and neither decode capacity (it already gives the decode-side action) nor prefill contention (prefill work pays there) fired; on a level where those objectives pass with room, the decode share is a remark in step 1, not a finding",
        bottleneck: "generation length: most of a request's running time is decode, so decode speed sets the objective that is failing or close to it",
        action: "to gain room on this objective, spend the effort on decode (quantisation, speculative decoding, a GPU with more memory bandwidth), not on prefill: chunked prefill or shorter prompts cannot move it much",
        moves: &[
            lowers(Target::Itl),
            lowers(Target::Tpot),
            lowers(Target::E2e),
        ],
        variants: &[],
        trade_off: "quantisation may cost accuracy; speculative decoding needs a draft model and GPU memory",
        watch: &[
            "vllm:request_decode_time_seconds",
            "vllm:request_inference_time_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:e2e_request_latency_seconds",
        ],
        inputs: &[Signal::DecodeTime, Signal::InferenceTime],
        check: decode_dominated,
    },
    Rule {
        id: "efficient_load",
        title: "Efficient load: every objective passes with the GPU well used",
        category: Category::Workload,
        condition: "every objective PASS, GPU engine active ≥ 0.6 (or GPU_UTIL ≥ 80 % without profiling metrics), and no bottleneck or health finding fired (their actions would contradict \"no change needed\")",
        bottleneck: "none at this level",
        action: "no change needed at this level; one window cannot tell whether more load would still pass (a sweep's capacity is the highest level where every objective passes), so watch the objective closest to its threshold (in the evidence) as load grows",
        moves: &[],
        variants: &[],
        trade_off: "none",
        watch: &[
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "vllm:request_queue_time_seconds",
            "vllm:inter_token_latency_seconds",
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
        moves: &[],
        variants: &[],
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
        condition: "admission saturation or KV pressure fired, or decode capacity fired while requests were seen waiting (waiting max ≥ 1): one replica cannot take the load at this ITL",
        bottleneck: "capacity of one replica",
        action: "scale replicas on vllm:num_requests_waiting > 0 sustained, or vllm:kv_cache_usage_perc > 0.9; GPU utilisation reads high at any batch size",
        moves: &[
            lowers(Target::Queue),
            lowers(Target::Ttft),
            lowers(Target::E2e),
        ],
        variants: &[],
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
        moves: &[],
        variants: &[],
        trade_off: "none",
        watch: &["vllm:request_queue_time_seconds"],
        inputs: &[Signal::QueueTime, Signal::Ttft],
        check: alert_on_queue_time,
    },
];

/// Evidence on the KV pool's size in requests: vLLM's figure at `max_model_len`, and the pool at
/// the observed mean request size judged against the largest batch seen running.
fn kv_capacity_evidence(f: &Facts, evidence: &mut Vec<Evidence>) {
    if let Some(mc) = f.kv_max_concurrency {
        evidence.push(ev(
            "kv_cache_max_concurrency",
            mc,
            "requests",
            "KV capacity at max_model_len (vLLM's figure, cache_config_info): requests of the whole context length each; real requests use fewer tokens, see kv_concurrency_at_mean_request",
        ));
    }
    let (Some(at_mean), Some(pool), Some(req)) = (
        f.kv_concurrency_at_mean_request,
        f.kv_pool_tokens,
        f.request_tokens_mean,
    ) else {
        return;
    };
    let how = format!(
        "{pool} KV tokens (kv_pool_tokens, cache_config_info) / {req:.1} tokens per request (mean prompt + generation, vllm:request_prompt_tokens + vllm:request_generation_tokens)"
    );
    // A single scrape shows the running gauge at its own moment only (often 0 after a burst):
    // no batch to compare with.
    match f.running_max.filter(|_| f.gauge_samples >= 2) {
        Some(r) => evidence.push(judged(
            "kv_concurrency_at_mean_request",
            at_mean,
            "requests",
            Cmp::AtLeast(r),
            "the pool holds the largest running batch seen (running max) at the mean request size",
            "the pool cannot hold the largest running batch seen (running max) at the mean request size",
            how,
        )),
        None => evidence.push(ev(
            "kv_concurrency_at_mean_request",
            at_mean,
            "requests",
            how,
        )),
    }
}

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
    let mut evidence = vec![
        ev(
            "vllm:num_preemptions_total",
            pre,
            "count",
            "increase over the window",
        ),
        judged(
            "preemptions_per_request",
            per_req,
            "ratio",
            Cmp::AtLeast(0.01),
            "requests are preempted for KV room",
            "preemptions too rare to count",
            "preemptions / finished requests",
        ),
    ];
    if let Some(k) = f.kv_usage_max {
        evidence.push(judged(
            "vllm:kv_cache_usage_perc",
            k,
            "ratio",
            Cmp::AtLeast(0.95),
            "the pool was full at a scrape",
            "below full at every scrape (preemptions free blocks between scrapes)",
            "max over the window's scrapes",
        ));
    }
    if let Some(w) = f.waiting_capacity_max {
        evidence.push(judged(
            "vllm:num_requests_waiting_by_reason{reason=\"capacity\"}",
            w,
            "count",
            Cmp::AtLeast(1.0),
            "requests waited for capacity",
            "no request seen waiting for capacity",
            "max over the window's scrapes",
        ));
    }
    if let Some(t) = f.kv_pool_tokens {
        evidence.push(ev(
            "kv_pool_tokens",
            t,
            "tokens",
            "kv_cache_size_tokens, else num_gpu_blocks × block_size (cache_config_info)",
        ));
    }
    kv_capacity_evidence(f, &mut evidence);
    if let Some(q) = f.queue_mean_s {
        evidence.push(ev(
            "vllm:request_queue_time_seconds",
            q,
            "s",
            "mean per request",
        ));
    }
    // The pool is too small for the batch that ran when, at the observed mean request size, it
    // holds fewer requests than were running at once; without token sizes or a running gauge
    // over ≥ 2 scrapes, vLLM's own figure below 4 full-length requests says the same coarsely.
    let running = f.running_max.filter(|_| f.gauge_samples >= 2);
    let too_small = match (f.kv_concurrency_at_mean_request, running) {
        (Some(m), Some(r)) => m < r,
        _ => f.kv_max_concurrency.is_some_and(|m| m < 4.0),
    };
    let strong = [preempting, full, capacity_wait, too_small]
        .iter()
        .filter(|b| **b)
        .count();
    let confidence = match strong {
        0 | 1 => Confidence::Medium,
        _ => Confidence::High,
    };
    Some(Match {
        action: None,
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
    if f.preemptions.unwrap_or(0.0) > 0.0
        || f.kv_usage_max.is_some_and(|k| k >= 0.9)
        || c.fired.contains(&"kv_pressure")
    {
        return None;
    }
    // Requests that queue because long prefills hold the token budget are prefill contention
    // (engine twin: a quarter of 8k-token prompts, queue ≈ prefill ≈ 1 s), not a slot limit.
    if c.fired.contains(&"prefill_contention") {
        return None;
    }
    // "Raise --max-num-seqs" lengthens every decode step: with an ITL or TPOT objective failing
    // it would break that objective further, and it would contradict decode capacity's "lower
    // --max-num-seqs" (engine twin at 256 clients: queue 1.1 s and ITL p95 76 ms > 50 ms). The
    // queue then says one replica cannot take the load: the autoscaling trigger fires instead.
    if c.decode_fails() {
        return None;
    }
    // With several scrapes and never a request waiting, the queue time was transient (bursts
    // between scrapes), not a standing queue behind a slot limit. A single scrape (since server
    // start) shows the gauges only at its end, so it cannot tell.
    if f.gauge_samples >= 3 && f.waiting_max == Some(0.0) {
        return None;
    }
    let mut evidence = vec![
        judged(
            "vllm:request_queue_time_seconds",
            queue,
            "s",
            Cmp::AtLeast(0.05),
            "requests queue long enough to matter",
            "queueing too short to matter",
            "mean per request over the window",
        ),
        judged(
            "queue_share_of_ttft",
            share,
            "ratio",
            Cmp::AtLeast(0.5),
            "most of TTFT is queueing",
            "queueing is the smaller part of TTFT",
            format!(
                "queue mean / server TTFT mean ({:.3} s)",
                f.ttft_mean_s.unwrap_or(f64::NAN)
            ),
        ),
        judged(
            "vllm:num_preemptions_total",
            f.preemptions.unwrap_or(0.0),
            "count",
            Cmp::AtMost(0.0),
            "no request was preempted for KV room",
            "requests were preempted",
            "increase over the window",
        ),
    ];
    if let Some(p) = f.prefill_mean_s {
        evidence.push(ev(
            "vllm:request_prefill_time_seconds",
            p,
            "s",
            "mean per request",
        ));
    }
    // Prefill below 30 % of TTFT is what prefill contention never looks at (its own floor).
    let prefill_share = f.prefill_share_of_ttft;
    if let Some(ps) = prefill_share {
        evidence.push(judged(
            "prefill_share_of_ttft",
            ps,
            "ratio",
            Cmp::AtMost(0.3),
            "prefill is short beside the queue",
            "prefill is a large part of TTFT too: long prompts add to the wait, though prefill contention did not fire (no ITL spikes ≥ 3×, no failing TTFT objective with prefill ≥ 50 % of it)",
            "prefill mean / server TTFT mean",
        ));
    }
    if let Some(k) = f.kv_usage_max {
        evidence.push(judged(
            "vllm:kv_cache_usage_perc",
            k,
            "ratio",
            Cmp::AtMost(0.9),
            "the KV pool has room",
            "the KV pool is nearly full",
            "max over the window's scrapes",
        ));
    }
    if f.gauge_samples >= 3
        && let Some(w) = f.waiting_max
    {
        evidence.push(judged(
            "vllm:num_requests_waiting",
            w,
            "count",
            Cmp::AtLeast(1.0),
            "requests were seen waiting",
            "no request seen waiting",
            format!("max over {} scrapes", f.gauge_samples),
        ));
    }
    kv_capacity_evidence(f, &mut evidence);
    let confidence = if share >= 0.7
        && prefill_share.is_none_or(|p| p <= 0.3)
        && (f.kv_usage_max.is_some() || f.kv_concurrency_at_mean_request.is_some())
    {
        Confidence::High
    } else {
        Confidence::Medium
    };
    Some(Match {
        action: None,
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
    let ttft_fails = c.verdict_of(Ttft) == Some(Verdict::Fail);
    let spiking = spikes.is_some_and(|r| r >= 3.0);
    if !(spiking || (ttft_fails && share >= 0.5)) {
        return None;
    }
    let mut evidence = vec![
        judged(
            "vllm:request_prefill_time_seconds",
            prefill,
            "s",
            Cmp::AtLeast(0.1),
            "prefill is long enough to matter",
            "prefill too short to matter",
            "mean per request",
        ),
        judged(
            "prefill_share_of_ttft",
            share,
            "ratio",
            Cmp::AtLeast(if spiking { 0.3 } else { 0.5 }),
            "prefill is a large part of TTFT",
            "prefill is the smaller part of TTFT",
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
        evidence.push(judged(
            "itl_p95_over_p50",
            r,
            "ratio",
            Cmp::AtLeast(3.0),
            "ITL spikes: decode steps stall behind prefill chunks",
            "no ITL spikes; the failing TTFT objective made this fire",
            format!(
                "vllm:inter_token_latency_seconds p95 in [{}, {}] s over p50 in [{}, {}] s (lower / upper bound)",
                p95.lower, p95.upper, p50.lower, p50.upper
            ),
        ));
    }
    // The chunk size trades TTFT against ITL: pick the direction the failing objective needs.
    // Prompts longer than any step's tokens were split over several steps (the budget is
    // already below them), so a smaller budget would only delay their first token further.
    let chunked = match (f.prompt_len_max_lower, f.iteration_tokens_max_upper) {
        (Some(p), Some(i)) => p > i,
        _ => false,
    };
    let action = if spiking && !ttft_fails {
        Some(&PREFILL_SMALLER_CHUNKS)
    } else if ttft_fails && chunked && !c.decode_fails() {
        if let (Some(p), Some(i)) = (f.prompt_len_max_lower, f.iteration_tokens_max_upper) {
            evidence.push(judged(
                "vllm:iteration_tokens_total",
                i,
                "tokens",
                Cmp::AtMost(p),
                "no step carried a whole long prompt: the token budget splits them into chunks",
                "steps carried whole prompts",
                format!(
                    "most tokens in one engine step (bucket bound) against the longest prompt, > {p} tokens (vllm:request_prompt_tokens)"
                ),
            ));
        }
        Some(&PREFILL_LARGER_BUDGET)
    } else {
        None
    };
    Some(Match {
        action,
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
    let share = f.decode_share_of_inference?;
    if !c.decode_fails() || share < 0.5 {
        return None;
    }
    let mut evidence = vec![judged(
        "decode_share_of_inference",
        share,
        "ratio",
        Cmp::AtLeast(0.5),
        "decode is most of the running time",
        "decode is the smaller part of the running time",
        "decode mean / inference mean",
    )];
    if let Some((o, m)) = c.tightest(Some(&[Itl, Tpot])) {
        evidence.push(margin(o, m, ""));
    }
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
    } else if let Some(r) = f.running_mean_from_counters {
        evidence.push(ev(
            "running_mean_from_counters",
            r,
            "count",
            "mean running by Little's law: Δ request_inference_time_seconds_sum / window length (the running gauge read 0 at every scrape)",
        ));
    }
    if let Some(w) = f.waiting_max.filter(|w| *w >= 1.0) {
        evidence.push(judged(
            "vllm:num_requests_waiting",
            w,
            "count",
            Cmp::AtLeast(1.0),
            "requests also queue: a larger batch would lengthen decode steps further, so the queue calls for replicas (autoscaling trigger), not a higher --max-num-seqs",
            "no request seen waiting",
            "max over the window's scrapes",
        ));
    }
    // A smaller batch lengthens the queue: where queueing (or the TTFT it feeds) fails too,
    // the decode-side remedy must not cost queue time.
    let queue_fails = [c.verdict_of(QueueTime), c.verdict_of(Ttft)].contains(&Some(Verdict::Fail));
    Some(Match {
        action: queue_fails.then_some(&DECODE_FASTER_NOT_SMALLER),
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
        evidence.push(judged(
            "DCGM_FI_DEV_GPU_TEMP",
            t,
            "°C",
            Cmp::AtLeast(85.0),
            "hot enough for the GPU to slow its clocks",
            "below the slowdown range",
            "max over the window",
        ));
    }
    Some(Match {
        action: None,
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
    if !c.decode_fails() {
        return None;
    }
    Some(Match {
        action: None,
        confidence: Confidence::Medium,
        evidence: vec![
            judged(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                gr,
                "ratio",
                Cmp::AtLeast(0.5),
                "the GPU is busy",
                "the GPU is mostly idle",
                "mean, busiest GPU",
            ),
            judged(
                "DCGM_FI_PROF_DRAM_ACTIVE",
                dram,
                "ratio",
                Cmp::AtLeast(0.5),
                "DRAM is busy",
                "DRAM is not busy",
                "mean, busiest GPU",
            ),
            judged(
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                tensor,
                "ratio",
                Cmp::AtMost(0.2),
                "tensor pipes mostly idle: the GPU waits on memory",
                "tensor pipes busy",
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
        action: None,
        confidence: Confidence::Medium,
        evidence: vec![
            judged(
                "vllm:num_requests_waiting",
                w,
                "count",
                Cmp::AtLeast(1.0),
                "requests waited",
                "no request waited",
                format!("max over {} scrapes", f.gauge_samples),
            ),
            judged(
                "vllm:num_requests_running",
                r,
                "count",
                Cmp::AtMost(1.0),
                "one request at a time",
                "requests ran together",
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
    // A stray 4xx among many requests (a user's own typo, a probe) is not a front-end
    // bottleneck: confidence follows the share of the window's HTTP requests that failed.
    // Admission rejections and 5xx are the server's own refusals and keep it high.
    let share = f.http_total.filter(|t| *t > 0.0).map(|t| (e4 + e5) / t);
    let confidence = if rej > 0.0 || e5 > 0.0 || share.is_none_or(|s| s >= 0.05) {
        Confidence::High
    } else if share.is_some_and(|s| s >= 0.01) {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    if let Some(s) = share {
        evidence.push(ev(
            "http_error_share",
            s,
            "ratio",
            "4xx + 5xx of every HTTP request over the window (http_requests_total)",
        ));
    }
    Some(Match {
        action: None,
        confidence,
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
            evidence.push(judged(
                crate::GENERATED_OVER_MAX_TOKENS,
                g / m,
                "ratio",
                Cmp::AtLeast(0.95),
                "answers run to the cap",
                "the mean answer stops below the cap",
                "generated/max_tokens ratio (not a count): mean generated tokens / mean max_tokens",
            ));
            g / m >= 0.95
        }
        _ => false,
    };
    // Every request ending exactly at max_tokens is what a benchmark sending `ignore_eos`
    // produces; the server's metrics cannot tell the two apart.
    // When the client said how many it sent with ignore_eos, the rest is truncation for sure.
    let all_at_cap = c.ignore_eos_share.is_none()
        && share >= 0.999
        && matches!((f.gen_len_mean, f.max_tokens_mean), (Some(g), Some(m)) if m > 0.0 && (g - m).abs() <= 1e-9 * m);
    if all_at_cap {
        evidence.push(ev(
            "finished_length_share",
            share,
            "ratio",
            "every request ran exactly to max_tokens: if the client sent ignore_eos (a benchmark), this is by design, not truncation",
        ));
    }
    let e2e_fails = c.verdict_of(E2e) == Some(Verdict::Fail);
    Some(Match {
        action: e2e_fails.then_some(&TRUNCATION_WHILE_E2E_FAILS),
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
    let m = low_prefix_reuse_match(c)?;
    // "Check --enable-prefix-caching" beside a scrape that says it is on would contradict the
    // scrape: the server's own setting picks the action.
    let (action, caching) = match c.facts.prefix_caching {
        Some(true) => (Some(&PREFIX_CACHING_ON), 1.0),
        Some(false) => (Some(&PREFIX_CACHING_OFF), 0.0),
        None => return Some(m),
    };
    let mut evidence = m.evidence;
    evidence.push(ev(
        "vllm:cache_config_info{enable_prefix_caching}",
        caching,
        "flag",
        "1 = the server runs with prefix caching, 0 = without (the scrape's own setting)",
    ));
    Some(Match {
        action,
        evidence,
        ..m
    })
}

fn low_prefix_reuse_match(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let (q, r) = (f.prefix_queries?, f.prefix_hit_ratio?);
    if q < 1000.0 || r >= 0.1 {
        return None;
    }
    let queries = judged(
        "vllm:prefix_cache_queries_total",
        q,
        "tokens",
        Cmp::AtLeast(1000.0),
        "enough queries to judge the ratio",
        "too few queries to judge the ratio",
        "increase over the window",
    );
    let ratio = |rest: &str| {
        judged(
            "prefix_cache_hit_ratio",
            r,
            "ratio",
            Cmp::AtMost(0.1),
            "little is shared",
            "prefixes are shared",
            format!("Δhits / Δqueries over the window{rest}"),
        )
    };
    let Some(plan) = c.prefixes else {
        // A live server, scrape files, a Prometheus range: what the traffic shares is unknown.
        return Some(Match {
            action: None,
            confidence: Confidence::Low,
            evidence: vec![
                ratio(
                    "; the workload is unknown here, so this assumes the traffic shares prefixes (traffic without shared prefixes reads near 0 by design)",
                ),
                queries,
            ],
        });
    };
    // The spec sets no shared prefix and no prompt comes from a dataset: the cache has nothing
    // to reuse, and a ratio near 0 is the workload, not the server (step 2 remarks on it).
    if plan.nothing_shared() {
        return None;
    }
    if plan.shared_share <= 0.0 {
        return Some(Match {
            action: None,
            confidence: Confidence::Low,
            evidence: vec![
                ratio(""),
                queries,
                ev(
                    "workload_dataset_share",
                    plan.dataset_share,
                    "ratio",
                    "of the requests (by mix weight) take their prompts from a dataset and no class sets shared_prefix_tokens: this assumes the dataset's prompts share prefixes",
                ),
            ],
        });
    }
    let mut evidence = vec![
        ratio(""),
        queries,
        ev(
            "workload_shared_prefix_share",
            plan.shared_share,
            "ratio",
            "of the requests (by mix weight) start with a shared prefix the workload sets (shared_prefix_tokens): after a class's first request, its prefix should be found in the cache",
        ),
    ];
    // The most the configured prefixes can lift the ratio: their share of the prompt tokens.
    // Below the row's own 0.1, a ratio under 0.1 is the workload's by design, as above.
    let ceiling = f
        .prompt_len_mean
        .filter(|p| p.is_finite() && *p > 0.0)
        .map(|p| ((plan.shared_tokens_mean / p).min(1.0), p));
    if let Some((share, p)) = ceiling {
        if share < 0.1 {
            return None;
        }
        evidence.push(judged(
            "workload_shared_prefix_over_prompt",
            share,
            "ratio",
            Cmp::AtLeast(0.1),
            "the shared prefixes could lift the hit ratio past 0.1",
            "the shared prefixes cannot lift the hit ratio past 0.1",
            format!(
                "mean shared_prefix_tokens {:.1} (workload spec) / mean prompt {p:.1} tokens (vllm:request_prompt_tokens): the ratio a warm cache would approach",
                plan.shared_tokens_mean
            ),
        ));
    }
    Some(Match {
        action: None,
        confidence: if ceiling.is_some() {
            Confidence::Medium
        } else {
            Confidence::Low
        },
        evidence,
    })
}

fn decode_dominated(c: &Context<'_>) -> Option<Match> {
    let share = c.facts.decode_share_of_inference?;
    // Decode capacity already gives the decode-side action; prefill contention found prefill
    // work that pays (a failing TTFT objective), which "not prefill" would contradict (engine
    // twin, 128 clients: TTFT p95 2.0 s > 0.5 s with prefill 75 % of TTFT, ITL at 0.98 of its
    // threshold).
    if share < 0.8
        || c.fired.contains(&"decode_capacity")
        || c.fired.contains(&"prefill_contention")
    {
        return None;
    }
    // A decode-heavy workload is decode-heavy at every load: on its own the share explains
    // nothing (step 1 remarks on it). It is a finding when decode speed sets an objective that
    // fails or nearly fails, where "not prefill" tells the reader where effort pays.
    let (o, m) = c.tightest(Some(&[Itl, Tpot, E2e]))?;
    if m < NEAR_FAILING_SHARE && o.verdict != Verdict::Fail {
        return None;
    }
    // Decode sets an E2E objective only when it is most of E2E: where queueing is most of it
    // (requests waiting for a slot), "spend the effort on decode" would miss the larger part.
    let decode_of_e2e = match (c.facts.decode_mean_s, c.facts.e2e_mean_s) {
        (Some(d), Some(e)) if e > 0.0 => Some(d / e),
        _ => None,
    };
    let about_e2e = o.id.signal() == Some(E2e);
    if about_e2e && decode_of_e2e.is_some_and(|d| d < 0.5) {
        return None;
    }
    let mut evidence = vec![
        judged(
            "decode_share_of_inference",
            share,
            "ratio",
            Cmp::AtLeast(0.8),
            "decode dominates the running time",
            "decode does not dominate the running time",
            "decode mean / inference mean",
        ),
        margin(o, m, "the objective decode speed sets"),
    ];
    if let Some(d) = decode_of_e2e.filter(|_| about_e2e) {
        evidence.push(judged(
            "decode_share_of_e2e",
            d,
            "ratio",
            Cmp::AtLeast(0.5),
            "decode is most of E2E",
            "decode is the smaller part of E2E",
            "decode mean / server E2E mean",
        ));
    }
    if let (Some(g), Some(p)) = (c.facts.gen_len_mean, c.facts.prompt_len_mean)
        && p > 0.0
    {
        evidence.push(ev(
            "generation_to_prompt_ratio",
            g / p,
            "ratio",
            "mean generated / mean prompt tokens",
        ));
    }
    // High only when decode is most of the objective itself (ITL and TPOT are decode; E2E
    // when decode is ≥ 80 % of it), not merely of the running time.
    let decode_is_the_objective = !about_e2e || decode_of_e2e.is_some_and(|d| d >= 0.8);
    Some(Match {
        action: None,
        confidence: if o.verdict == Verdict::Fail && decode_is_the_objective {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
    })
}

fn efficient_load(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    if !c.all_pass() {
        return None;
    }
    // "No change needed" next to a bottleneck's or a faulty GPU's action would contradict it.
    let acting = c.fired.iter().any(|id| {
        RULES
            .iter()
            .find(|r| r.id == *id)
            .is_some_and(|r| matches!(r.category, Category::Bottleneck | Category::Health))
    });
    if acting {
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
        evidence.push(judged(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            gr,
            "ratio",
            Cmp::AtLeast(0.6),
            "the GPU is well used",
            "the GPU is partly idle",
            "mean, busiest GPU",
        ));
    } else if let Some(u) = f.gpu_util_pct {
        evidence.push(judged(
            "DCGM_FI_DEV_GPU_UTIL",
            u,
            "%",
            Cmp::AtLeast(80.0),
            "a kernel ran most of the time (no profiling metrics to say how busy the SMs were)",
            "the GPU is partly idle",
            "mean, busiest GPU",
        ));
    }
    if let Some((o, m)) = c.tightest(None) {
        evidence.push(margin(
            o,
            m,
            "the objective closest to its threshold at this level",
        ));
    }
    Some(Match {
        action: None,
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
        action: None,
        confidence: Confidence::High,
        evidence: vec![ev("workload_drift", 1.0, "flag", note)],
    })
}

fn autoscaling_trigger(c: &Context<'_>) -> Option<Match> {
    let f = c.facts;
    let saturated = c
        .fired
        .iter()
        .any(|id| *id == "admission_saturation" || *id == "kv_pressure");
    let queued_behind_decode =
        c.fired.contains(&"decode_capacity") && f.waiting_max.is_some_and(|w| w >= 1.0);
    if !(saturated || queued_behind_decode) {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some(w) = f.waiting_max {
        evidence.push(ev(
            "vllm:num_requests_waiting",
            w,
            "count",
            "max over the window's scrapes",
        ));
    } else if let Some(w) = f.waiting_mean_from_counters.filter(|w| *w >= 1.0) {
        evidence.push(judged(
            "waiting_mean_from_counters",
            w,
            "count",
            Cmp::AtLeast(1.0),
            "requests waited throughout the window on average",
            "under one request waiting on average",
            "Little's law: Δ request_queue_time_seconds_sum / window length (the waiting gauge read 0 at every scrape)",
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
        action: None,
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
        action: None,
        confidence: Confidence::Medium,
        evidence: vec![judged(
            "queue_share_of_ttft",
            share,
            "ratio",
            Cmp::AtLeast(0.1),
            "queueing is a visible part of TTFT",
            "queueing is a small part of TTFT",
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

    /// An objective result by hand: `id`, threshold and observed value in seconds, verdict.
    fn obj(id: &str, threshold: f64, observed: f64, verdict: Verdict) -> ObjectiveResult {
        ObjectiveResult {
            share: None,
            bound: Default::default(),
            source: None,
            id: serde_json::from_value(serde_json::json!(id)).unwrap(),
            description: id.to_owned(),
            threshold,
            observed: Some(observed),
            verdict,
            samples: 1000,
            reason: String::new(),
        }
    }

    fn ctx<'a>(facts: &'a Facts, objectives: &'a [ObjectiveResult]) -> Context<'a> {
        Context {
            facts,
            objectives,
            slo_has_queue_objective: false,
            workload_drift: None,
            ignore_eos_share: None,
            prefixes: None,
            fired: &[],
        }
    }

    #[test]
    fn nothing_fires_on_no_facts() {
        let facts = Facts::default();
        let ctx = ctx(&facts, &[]);
        for r in RULES {
            assert!((r.check)(&ctx).is_none(), "{} fired on empty facts", r.id);
        }
    }

    /// One 404 among 138 requests (a user's own typo) was reported as a high-confidence
    /// front-end bottleneck with "raise --max-num-queued-reqs". Confidence now follows the
    /// share of failed HTTP requests; 5xx and admission rejections keep it high.
    #[test]
    fn errors_outside_engine_confidence_follows_the_error_share() {
        let conf = |e4: f64, e5: f64, rej: f64, total: Option<f64>| {
            let facts = Facts {
                http_4xx: Some(e4),
                http_5xx: Some(e5),
                admission_rejections: Some(rej),
                http_total: total,
                ..Facts::default()
            };
            errors_outside_engine(&ctx(&facts, &[])).map(|m| m.confidence)
        };
        assert_eq!(conf(0.0, 0.0, 0.0, Some(138.0)), None);
        assert_eq!(conf(1.0, 0.0, 0.0, Some(138.0)), Some(Confidence::Low)); // 0.7 %
        assert_eq!(conf(2.0, 0.0, 0.0, Some(138.0)), Some(Confidence::Medium)); // 1.4 %
        assert_eq!(conf(7.0, 0.0, 0.0, Some(138.0)), Some(Confidence::High)); // 5.1 %
        assert_eq!(conf(0.0, 1.0, 0.0, Some(138.0)), Some(Confidence::High));
        assert_eq!(conf(1.0, 0.0, 1.0, Some(138.0)), Some(Confidence::High));
        assert_eq!(
            conf(1.0, 0.0, 0.0, None),
            Some(Confidence::High),
            "no total: as before"
        );
    }

    #[test]
    fn memory_bound_thresholds() {
        let facts = Facts {
            gpu_gr_active: Some(0.8),
            gpu_dram_active: Some(0.7),
            gpu_tensor_active: Some(0.1),
            ..Facts::default()
        };
        let itl_fails = [obj("itl_p95", 0.05, 0.07, Verdict::Fail)];
        let failing = ctx(&facts, &itl_fails);
        assert!(memory_bandwidth_bound(&failing).is_some());
        // the same GPU profile while decode meets its objective: not a bottleneck
        let itl_passes = [obj("itl_p95", 0.05, 0.03, Verdict::Pass)];
        assert!(memory_bandwidth_bound(&ctx(&facts, &itl_passes)).is_none());
        // the T4 fixture: GR 0.156, DRAM 0.093, tensor 0.006 → not bandwidth bound
        let t4 = Facts {
            gpu_gr_active: Some(0.156205),
            gpu_dram_active: Some(0.092781),
            gpu_tensor_active: Some(0.005822),
            ..Facts::default()
        };
        assert!(memory_bandwidth_bound(&ctx(&t4, &itl_fails)).is_none());
    }

    #[test]
    fn judged_claims_follow_the_comparison() {
        let e = judged(
            "x",
            0.55,
            "ratio",
            Cmp::AtLeast(0.5),
            "busy",
            "idle",
            "mean",
        );
        assert_eq!(e.note, "≥ 0.5: busy; mean");
        let e = judged("x", 0.45, "ratio", Cmp::AtLeast(0.5), "busy", "idle", "");
        assert_eq!(e.note, "< 0.5: idle");
        let e = judged("x", 1.004, "s", Cmp::AtMost(0.3), "short", "long", "");
        assert_eq!(e.note, "> 0.3 s: long");
        let e = judged("x", 0.3, "s", Cmp::AtMost(0.3), "short", "long", "");
        assert_eq!(e.note, "≤ 0.3 s: short");
    }

    #[test]
    fn decode_dominated_needs_a_failing_or_nearly_failing_decode_objective() {
        // decode 0.9 s of 1.0 s running time: decode-dominated whatever the load
        let facts = Facts {
            decode_share_of_inference: Some(0.9),
            ..Facts::default()
        };
        // ITL p95 30 ms against 50 ms (60 %), TTFT failing: decode speed explains nothing here
        let room = [
            obj("ttft_p95", 0.3, 0.5, Verdict::Fail),
            obj("itl_p95", 0.05, 0.03, Verdict::Pass),
        ];
        assert!(decode_dominated(&ctx(&facts, &room)).is_none());
        // no objective at all: nothing to explain
        assert!(decode_dominated(&ctx(&facts, &[])).is_none());
        // ITL p95 42 ms against 50 ms = 0.84 of the threshold (≥ 0.8): nearly failing
        let near = [obj("itl_p95", 0.05, 0.042, Verdict::Pass)];
        let m = decode_dominated(&ctx(&facts, &near)).expect("near-failing ITL");
        let e = m
            .evidence
            .iter()
            .find(|e| e.metric == "objective itl_p95")
            .unwrap();
        assert!((e.value - 0.84).abs() < 1e-12);
        assert!(e.note.starts_with("≥ 0.8: "), "{}", e.note);
        // 38 ms of 50 ms = 0.76 < 0.8: room left
        let below = [obj("itl_p95", 0.05, 0.038, Verdict::Pass)];
        assert!(decode_dominated(&ctx(&facts, &below)).is_none());
        assert_eq!(m.confidence, Confidence::Medium);
        // E2E p95 failing: it fires, with high confidence only where decode is most of E2E
        let e2e = [obj("e2e_p95", 10.0, 12.0, Verdict::Fail)];
        let m = decode_dominated(&ctx(&facts, &e2e)).expect("failing E2E");
        assert_eq!(
            m.confidence,
            Confidence::Medium,
            "decode share of E2E unknown"
        );
        let decode_e2e = Facts {
            decode_mean_s: Some(9.0),
            e2e_mean_s: Some(10.0),
            ..facts.clone()
        };
        let m = decode_dominated(&ctx(&decode_e2e, &e2e)).expect("decode 90 % of E2E");
        assert_eq!(m.confidence, Confidence::High);
        // queueing most of E2E (decode 3 s of 10 s): decode speed does not set it
        let queued = Facts {
            decode_mean_s: Some(3.0),
            e2e_mean_s: Some(10.0),
            queue_mean_s: Some(6.5),
            ..facts.clone()
        };
        assert!(decode_dominated(&ctx(&queued, &e2e)).is_none());
        // decode 0.79 of running time is below the 0.8 floor
        let less = Facts {
            decode_share_of_inference: Some(0.79),
            ..Facts::default()
        };
        assert!(decode_dominated(&ctx(&less, &e2e)).is_none());
        // decode capacity already fired: its action is the decode-side one, no repeat
        let c = Context {
            fired: &["decode_capacity"],
            ..ctx(&facts, &e2e)
        };
        assert!(decode_dominated(&c).is_none());
        // prefill contention fired: prefill work pays there, "not prefill" would contradict it
        let c = Context {
            fired: &["prefill_contention"],
            ..ctx(&facts, &e2e)
        };
        assert!(decode_dominated(&c).is_none());
        // an upper-bound-only reading is a bucket edge, not a margin
        let mut bound = obj("itl_p95", 0.05, 0.05, Verdict::Pass);
        bound.bound = headroom_core::objective::Bound::Upper;
        assert!(decode_dominated(&ctx(&facts, &[bound])).is_none());
    }

    #[test]
    fn efficient_load_says_nothing_about_capacity_and_yields_to_any_bottleneck() {
        let facts = Facts {
            gpu_gr_active: Some(0.7),
            ..Facts::default()
        };
        let pass = [
            obj("ttft_p95", 0.3, 0.15, Verdict::Pass),
            obj("itl_p95", 0.05, 0.035, Verdict::Pass),
        ];
        let m = efficient_load(&ctx(&facts, &pass)).expect("all pass, GPU busy");
        // the tightest objective: ITL at 0.035 / 0.05 = 0.7 (TTFT at 0.5)
        let t = m
            .evidence
            .iter()
            .find(|e| e.metric.starts_with("objective "))
            .unwrap();
        assert_eq!(t.metric, "objective itl_p95");
        assert!((t.value - 0.7).abs() < 1e-12);
        let row = RULES.iter().find(|r| r.id == "efficient_load").unwrap();
        assert!(!row.action.contains("capacity;") && !row.action.contains("keep this load"));
        for blocker in ["kv_pressure", "admission_saturation", "device_fault"] {
            let c = Context {
                fired: &[blocker],
                ..ctx(&facts, &pass)
            };
            assert!(efficient_load(&c).is_none(), "{blocker}");
        }
        // a workload remark does not block it
        let c = Context {
            fired: &["truncation"],
            ..ctx(&facts, &pass)
        };
        assert!(efficient_load(&c).is_some());
        // GPU engine active 0.59 < 0.6: not well used
        let idle = Facts {
            gpu_gr_active: Some(0.59),
            ..Facts::default()
        };
        assert!(efficient_load(&ctx(&idle, &pass)).is_none());
    }

    #[test]
    fn admission_saturation_yields_to_a_failing_itl() {
        // queue 1.08 s of TTFT 1.85 s, prefill 0.65 s, KV 0.08, 18 waiting over 5 scrapes:
        // the engine twin at 256 clients
        let facts = Facts {
            queue_mean_s: Some(1.08),
            ttft_mean_s: Some(1.85),
            queue_share_of_ttft: Some(1.08 / 1.85),
            prefill_mean_s: Some(0.65),
            prefill_share_of_ttft: Some(0.65 / 1.85),
            preemptions: Some(0.0),
            kv_usage_max: Some(0.08),
            waiting_max: Some(18.0),
            gauge_samples: 5,
            ..Facts::default()
        };
        let itl_ok = [obj("itl_p95", 0.05, 0.04, Verdict::Pass)];
        let m = admission_saturation(&ctx(&facts, &itl_ok)).expect("queueing");
        // prefill 0.35 of TTFT > 0.3: never called short, and confidence not high
        let p = m
            .evidence
            .iter()
            .find(|e| e.metric == "prefill_share_of_ttft")
            .unwrap();
        assert!(p.note.starts_with("> 0.3: "), "{}", p.note);
        assert!(!p.note.contains("short"), "{}", p.note);
        assert_eq!(m.confidence, Confidence::Medium);
        let itl_fails = [obj("itl_p95", 0.05, 0.076, Verdict::Fail)];
        assert!(admission_saturation(&ctx(&facts, &itl_fails)).is_none());
    }
}
