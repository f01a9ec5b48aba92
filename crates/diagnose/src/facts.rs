//! Facts: the derived figures every step and rule reads, computed once from a window (and the
//! client's view when there is one). Each figure is `None` when the server does not export what
//! it needs, so a rule can never fire on a missing number.

use headroom_signals::adapter::GpuField;
use headroom_signals::window::OCCUPANCY_GAUGES;
use headroom_signals::{GaugeValidity, Quantile, Signal, Window};

/// Derived figures over one window. Times in seconds, ratios 0–1, counts as f64.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Requests finished (all reasons).
    pub finished: Option<f64>,
    /// Requests finished with `length` (cut at `max_tokens`).
    pub finished_length: Option<f64>,
    /// Requests finished with `error`.
    pub finished_error: Option<f64>,
    /// Requests finished with `abort`.
    pub finished_abort: Option<f64>,
    /// HTTP requests answered 4xx by the API server.
    pub http_4xx: Option<f64>,
    /// HTTP requests answered 5xx by the API server.
    pub http_5xx: Option<f64>,
    /// HTTP requests of any status.
    pub http_total: Option<f64>,
    /// Admission rejections (HTTP 503 at the queue limit).
    pub admission_rejections: Option<f64>,
    /// Mean queue time per request, s (`request_queue_time_seconds` sum/count).
    pub queue_mean_s: Option<f64>,
    /// Mean prefill time per request, s.
    pub prefill_mean_s: Option<f64>,
    /// Mean decode time per request, s.
    pub decode_mean_s: Option<f64>,
    /// Mean inference (prefill + decode) time per request, s.
    pub inference_mean_s: Option<f64>,
    /// Mean server TTFT, s.
    pub ttft_mean_s: Option<f64>,
    /// Mean server E2E, s.
    pub e2e_mean_s: Option<f64>,
    /// Mean server ITL (per engine step), s.
    pub itl_mean_s: Option<f64>,
    /// Server ITL median with its bucket bracket (`histogram_quantile(0.5, …)`).
    pub itl_p50: Option<Quantile>,
    /// Server ITL p95 with its bucket bracket.
    pub itl_p95: Option<Quantile>,
    /// Queue share of server TTFT: queue mean / TTFT mean.
    pub queue_share_of_ttft: Option<f64>,
    /// Prefill share of server TTFT.
    pub prefill_share_of_ttft: Option<f64>,
    /// Decode share of the running (inference) time: decode mean / inference mean.
    pub decode_share_of_inference: Option<f64>,
    /// Queue share of E2E.
    pub queue_share_of_e2e: Option<f64>,
    /// Preemptions over the window.
    pub preemptions: Option<f64>,
    /// Preemptions per finished request.
    pub preemptions_per_request: Option<f64>,
    /// KV-cache usage, max over scrapes (0–1).
    pub kv_usage_max: Option<f64>,
    /// KV-cache usage, mean over scrapes (0–1).
    pub kv_usage_mean: Option<f64>,
    /// Scrapes behind the gauges.
    pub gauge_samples: usize,
    /// Running requests, max / mean over scrapes.
    pub running_max: Option<f64>,
    /// Running requests, mean over scrapes.
    pub running_mean: Option<f64>,
    /// Waiting requests, max over scrapes.
    pub waiting_max: Option<f64>,
    /// Waiting requests, mean over scrapes.
    pub waiting_mean: Option<f64>,
    /// Waiting for capacity (slot or KV), max over scrapes.
    pub waiting_capacity_max: Option<f64>,
    /// Occupancy gauges whose every sample read 0 while the counters show work
    /// ([`headroom_signals::GaugeValidity::IdleSampled`]): the scrapes fell on idle moments.
    /// Their figures above (`kv_usage_*`, `running_*`, `waiting_*`) are `None`, so no rule can
    /// cite them; occupancy then comes from the counters (`*_from_counters`).
    pub idle_gauges: Vec<Signal>,
    /// Mean requests running over the window by Little's law, Δ`_sum` of
    /// `vllm:request_inference_time_seconds` / window s
    /// ([`Window::running_mean_from_counters`]).
    pub running_mean_from_counters: Option<f64>,
    /// Mean requests waiting over the window by Little's law, Δ`_sum` of
    /// `vllm:request_queue_time_seconds` / window s ([`Window::waiting_mean_from_counters`]).
    pub waiting_mean_from_counters: Option<f64>,
    /// Whether the server runs with prefix caching (`vllm:cache_config_info`
    /// `enable_prefix_caching`); `None` when not exported.
    pub prefix_caching: Option<bool>,
    /// KV pool size in tokens: vLLM's `kv_cache_size_tokens` (`cache_config_info`, mid-2026
    /// builds; the "GPU KV cache size" of its start-up log) when exported, else
    /// `num_gpu_blocks × block_size`. vLLM 0.32 reports the two equal (24 × 128 = 3072).
    pub kv_pool_tokens: Option<f64>,
    /// vLLM's "Maximum concurrency for `max_model_len` tokens per request"
    /// (`cache_config_info` label `kv_cache_max_concurrency`): requests of the *full* context
    /// length the pool holds at once. Real requests are usually far shorter, so this is a floor,
    /// not the batch the pool can hold; see [`Facts::kv_concurrency_at_mean_request`].
    pub kv_max_concurrency: Option<f64>,
    /// Mean tokens a finished request held in the KV cache at its end: mean prompt length +
    /// mean generated length (`vllm:request_prompt_tokens`, `vllm:request_generation_tokens`).
    pub request_tokens_mean: Option<f64>,
    /// Requests of the observed mean size the KV pool holds at once:
    /// [`Facts::kv_pool_tokens`] / [`Facts::request_tokens_mean`]. Per-request rounding up
    /// to whole blocks lowers it; prefix sharing raises it.
    pub kv_concurrency_at_mean_request: Option<f64>,
    /// Prefix-cache hit ratio.
    pub prefix_hit_ratio: Option<f64>,
    /// Prefix-cache queries (tokens).
    pub prefix_queries: Option<f64>,
    /// Tokens per engine step (iteration_tokens sum/count).
    pub tokens_per_iteration: Option<f64>,
    /// Mean prompt length, tokens per finished request.
    pub prompt_len_mean: Option<f64>,
    /// Mean generated length, tokens per finished request.
    pub gen_len_mean: Option<f64>,
    /// Mean `max_tokens` parameter.
    pub max_tokens_mean: Option<f64>,
    /// The most tokens one engine step carried, at most (`vllm:iteration_tokens_total`: the
    /// bound of the lowest bucket that holds every step).
    pub iteration_tokens_max_upper: Option<f64>,
    /// The longest prompt, at least (`vllm:request_prompt_tokens`: the lower bound of the
    /// highest bucket holding any).
    pub prompt_len_max_lower: Option<f64>,
    /// Prompt tokens over the window.
    pub prompt_tokens: Option<f64>,
    /// Generated tokens over the window.
    pub generation_tokens: Option<f64>,
    /// Window duration, s.
    pub duration_s: Option<f64>,
    /// GPU: max over GPUs of mean `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0–1).
    pub gpu_gr_active: Option<f64>,
    /// GPU: max over GPUs of mean `DCGM_FI_DEV_GPU_UTIL` (percent 0–100).
    pub gpu_util_pct: Option<f64>,
    /// GPU: mean tensor-pipe activity on the busiest GPU (0–1).
    pub gpu_tensor_active: Option<f64>,
    /// GPU: mean DRAM activity on the busiest GPU (0–1).
    pub gpu_dram_active: Option<f64>,
    /// GPU: non-zero XID codes seen (`DCGM_FI_DEV_XID_ERRORS`), as "gpu N: xid X".
    pub gpu_xids: Vec<String>,
    /// GPU: throttle reasons seen (from the clock-event bitmask or violation counters).
    pub gpu_throttle: Vec<String>,
    /// GPU: highest temperature seen, °C.
    pub gpu_temp_max_c: Option<f64>,
    /// GPU: mean total power over all GPUs, W (sum of per-GPU means).
    pub gpu_power_w: Option<f64>,
    /// GPU: framebuffer used, MiB (sum over GPUs of the max).
    pub gpu_fb_used_mib: Option<f64>,
    /// GPU: framebuffer total (used + free + reserved), MiB (sum over GPUs).
    pub gpu_fb_total_mib: Option<f64>,
    /// GPU: energy over the window, J (sum over GPUs; needs two dcgm scrapes).
    pub gpu_energy_j: Option<f64>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

fn hist_mean(w: &Window, s: Signal) -> Option<f64> {
    w.histogram(s).and_then(|h| h.mean())
}

/// The largest observation's bracket `(lower, upper)` from the buckets: it lies above the
/// bound below the highest bucket holding any observation and at most that bucket's bound.
fn max_bracket(w: &Window, s: Signal) -> Option<(f64, f64)> {
    let h = w.histogram(s)?;
    let total = h.observations();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let i = h.buckets.iter().position(|b| b.count >= total)?;
    let lower = if i == 0 { 0.0 } else { h.buckets[i - 1].le };
    Some((lower, h.buckets[i].le))
}

/// Clock-event reason bits that mean the GPU was slowed by something other than idleness or an
/// application clock setting (dcgm `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`, `metrics.md` §5.1).
const THROTTLE_BITS: [(u64, &str); 6] = [
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x10, "sync_boost"),
];

impl Facts {
    /// Computes the facts of a window.
    pub fn of(w: &Window) -> Facts {
        let mut f = Facts {
            finished: w.requests_finished(),
            finished_length: w.counter_key(Signal::RequestsFinished, "length"),
            finished_error: w.counters.get(&Signal::RequestsFinished).map(|m| {
                m.iter()
                    .filter(|(k, _)| *k == "error" || k.starts_with("error:"))
                    .map(|(_, v)| v)
                    .sum()
            }),
            finished_abort: w.counter_key(Signal::RequestsFinished, "abort"),
            http_4xx: w.counter_key(Signal::HttpRequests, "4xx"),
            http_5xx: w.counter_key(Signal::HttpRequests, "5xx"),
            http_total: w.counter(Signal::HttpRequests),
            admission_rejections: w.counter(Signal::AdmissionRejections),
            queue_mean_s: hist_mean(w, Signal::QueueTime),
            prefill_mean_s: hist_mean(w, Signal::PrefillTime),
            decode_mean_s: hist_mean(w, Signal::DecodeTime),
            inference_mean_s: hist_mean(w, Signal::InferenceTime),
            ttft_mean_s: hist_mean(w, Signal::Ttft),
            e2e_mean_s: hist_mean(w, Signal::E2e),
            itl_mean_s: hist_mean(w, Signal::Itl),
            itl_p50: w.histogram(Signal::Itl).and_then(|h| h.quantile(0.5)),
            itl_p95: w.histogram(Signal::Itl).and_then(|h| h.quantile(0.95)),
            preemptions: w.counter(Signal::Preemptions),
            prefix_hit_ratio: w.prefix_cache_hit_ratio(),
            prefix_queries: w.counter(Signal::PrefixCacheQueries),
            tokens_per_iteration: hist_mean(w, Signal::IterationTokens),
            prompt_len_mean: hist_mean(w, Signal::PromptLength),
            gen_len_mean: hist_mean(w, Signal::GenerationLength),
            max_tokens_mean: hist_mean(w, Signal::MaxTokensParam),
            iteration_tokens_max_upper: max_bracket(w, Signal::IterationTokens).map(|b| b.1),
            prompt_len_max_lower: max_bracket(w, Signal::PromptLength).map(|b| b.0),
            prompt_tokens: w.counter(Signal::PromptTokens),
            generation_tokens: w.counter(Signal::GenerationTokens),
            duration_s: w.duration_s(),
            kv_max_concurrency: w.kv_pool.max_concurrency,
            ..Facts::default()
        };
        f.queue_share_of_ttft = ratio(f.queue_mean_s, f.ttft_mean_s);
        f.prefill_share_of_ttft = ratio(f.prefill_mean_s, f.ttft_mean_s);
        f.decode_share_of_inference = ratio(f.decode_mean_s, f.inference_mean_s);
        f.queue_share_of_e2e = ratio(f.queue_mean_s, f.e2e_mean_s);
        f.preemptions_per_request = ratio(f.preemptions, f.finished);
        f.idle_gauges = OCCUPANCY_GAUGES
            .into_iter()
            .filter(|s| w.gauge_validity(*s) == Some(GaugeValidity::IdleSampled))
            .collect();
        // An idle-sampled gauge is no figure of the window: left out here, it can be neither
        // evidence nor a reason to withhold a finding.
        let gauge = |s: Signal| w.gauge(s).filter(|_| !f.idle_gauges.contains(&s)).copied();
        if let Some(g) = gauge(Signal::KvCacheUsage) {
            f.kv_usage_max = Some(g.max);
            f.kv_usage_mean = Some(g.mean);
            f.gauge_samples = g.samples;
        }
        if let Some(g) = gauge(Signal::Running) {
            f.running_max = Some(g.max);
            f.running_mean = Some(g.mean);
            f.gauge_samples = f.gauge_samples.max(g.samples);
        }
        if let Some(g) = gauge(Signal::Waiting) {
            f.waiting_max = Some(g.max);
            f.waiting_mean = Some(g.mean);
        }
        f.waiting_capacity_max = gauge(Signal::WaitingForCapacity).map(|g| g.max);
        f.running_mean_from_counters = w.running_mean_from_counters();
        f.waiting_mean_from_counters = w.waiting_mean_from_counters();
        f.prefix_caching = w.kv_pool.prefix_caching;
        f.kv_pool_tokens =
            w.kv_pool
                .size_tokens
                .or(match (w.kv_pool.num_gpu_blocks, w.kv_pool.block_size) {
                    (Some(n), Some(b)) => Some(n * b),
                    _ => None,
                });
        f.request_tokens_mean = match (f.prompt_len_mean, f.gen_len_mean) {
            (Some(p), Some(g)) if (p + g).is_finite() && p + g > 0.0 => Some(p + g),
            _ => None,
        };
        f.kv_concurrency_at_mean_request = ratio(f.kv_pool_tokens, f.request_tokens_mean);
        f.gpu_facts(w);
        f
    }

    fn gpu_facts(&mut self, w: &Window) {
        let mean =
            |g: &headroom_signals::window::GpuWindow, k: GpuField| g.gauges.get(&k).map(|s| s.mean);
        // the busiest GPU by engine activity, else by utilisation
        let busiest = w.gpus.iter().max_by(|a, b| {
            let key = |g: &headroom_signals::window::GpuWindow| {
                mean(g, GpuField::GrEngineActiveRatio)
                    .or(mean(g, GpuField::GpuUtilPct).map(|u| u / 100.0))
                    .unwrap_or(0.0)
            };
            key(a).total_cmp(&key(b))
        });
        if let Some(g) = busiest {
            self.gpu_gr_active = mean(g, GpuField::GrEngineActiveRatio);
            self.gpu_tensor_active = mean(g, GpuField::TensorActiveRatio);
            self.gpu_dram_active = mean(g, GpuField::DramActiveRatio);
        }
        self.gpu_util_pct = w
            .gpus
            .iter()
            .filter_map(|g| mean(g, GpuField::GpuUtilPct))
            .reduce(f64::max);
        let mut power = None;
        let mut fb_used = None;
        let mut fb_total = None;
        let mut energy = None;
        for g in &w.gpus {
            let label = format!("gpu {}", g.id.gpu);
            if let Some(x) = g.gauges.get(&GpuField::LastXid)
                && x.max > 0.0
            {
                self.gpu_xids.push(format!("{label}: xid {}", x.max));
            }
            if let Some(r) = g.gauges.get(&GpuField::ClockEventReasons) {
                // The bitmask of each scrape is not kept; the largest and the last value are
                // checked, which catches a reason present at the end or in the largest mask.
                for v in [r.max, r.last] {
                    if v.is_finite() && v >= 0.0 && v < 2f64.powi(53) {
                        let bits = v as u64;
                        for (bit, name) in THROTTLE_BITS {
                            let s = format!("{label}: {name}");
                            if bits & bit != 0 && !self.gpu_throttle.contains(&s) {
                                self.gpu_throttle.push(s);
                            }
                        }
                    }
                }
            }
            for (field, name) in [
                (GpuField::PowerViolationNs, "power violation"),
                (GpuField::ThermalViolationNs, "thermal violation"),
            ] {
                if let Some(&ns) = g.increases.get(&field)
                    && ns > 0.0
                {
                    self.gpu_throttle
                        .push(format!("{label}: {name} {:.3} s", ns / 1e9));
                }
            }
            if let Some(t) = g.gauges.get(&GpuField::GpuTempC) {
                self.gpu_temp_max_c = Some(self.gpu_temp_max_c.unwrap_or(f64::MIN).max(t.max));
            }
            if let Some(p) = g.gauges.get(&GpuField::PowerW) {
                *power.get_or_insert(0.0) += p.mean;
            }
            let used = g.gauges.get(&GpuField::FbUsedMib).map(|s| s.max);
            if let Some(u) = used {
                *fb_used.get_or_insert(0.0) += u;
                let free = g
                    .gauges
                    .get(&GpuField::FbFreeMib)
                    .map(|s| s.last)
                    .unwrap_or(0.0);
                let res = g
                    .gauges
                    .get(&GpuField::FbReservedMib)
                    .map(|s| s.last)
                    .unwrap_or(0.0);
                *fb_total.get_or_insert(0.0) += u + free + res;
            }
            if let Some(&j) = g.increases.get(&GpuField::EnergyJ) {
                *energy.get_or_insert(0.0) += j;
            }
        }
        self.gpu_power_w = power;
        self.gpu_fb_used_mib = fb_used;
        self.gpu_fb_total_mib = fb_total;
        self.gpu_energy_j = energy;
    }
}
