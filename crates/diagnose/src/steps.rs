//! The six analysis steps of `DESIGN.md`, as figures with their sources and short remarks.
//! Statistics come from [`Facts`] and the window; nothing here is rendered.

use headroom_core::objective::Bound;
use headroom_signals::{Signal, Window};

use crate::facts::Facts;
use crate::setting::Setting;
use crate::{Figure, Step};

struct StepBuilder {
    step: Step,
}

impl StepBuilder {
    fn new(number: u8, title: &str) -> Self {
        StepBuilder {
            step: Step {
                number,
                title: title.to_owned(),
                figures: Vec::new(),
                remarks: Vec::new(),
            },
        }
    }
    fn fig(&mut self, name: &str, value: Option<f64>, unit: &str, source: impl Into<String>) {
        self.fig_bounded(name, value, unit, source, Bound::Exact);
    }
    fn fig_bounded(
        &mut self,
        name: &str,
        value: Option<f64>,
        unit: &str,
        source: impl Into<String>,
        bound: Bound,
    ) {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            self.step.figures.push(Figure {
                name: name.to_owned(),
                value: v,
                unit: unit.to_owned(),
                source: source.into(),
                bound,
            });
        }
    }
    fn remark(&mut self, s: impl Into<String>) {
        self.step.remarks.push(s.into());
    }
}

fn src(w: &Window, s: Signal) -> String {
    w.sources.get(&s).cloned().unwrap_or_else(|| s.name())
}

fn quantiles(b: &mut StepBuilder, w: &Window, sig: Signal, name: &str) {
    for q in [0.5, 0.95, 0.99] {
        if let Some(bounded) = crate::bounds::quantile(w, sig, q) {
            let x = bounded.q;
            let source = if x.upper_bound_only {
                // PromQL would interpolate inside [0, le₀]: a made-up point. Say the bound.
                let le0 = w
                    .histogram(sig)
                    .and_then(|h| h.buckets.first())
                    .map_or(x.upper, |b| b.le);
                format!(
                    "{} {} s: the rank falls in the first bucket [0, {le0}] s of {} ({} observations), so the histogram cannot place it lower{}",
                    crate::UPPER_BOUND_ONLY,
                    crate::bound_s(x.upper),
                    src(w, sig),
                    x.observations,
                    bounded.why(w)
                )
            } else {
                format!(
                    "histogram_quantile({q}) of {} over {} observations; truth between {} and {} s{}",
                    src(w, sig),
                    x.observations,
                    x.lower,
                    x.upper,
                    bounded.why(w)
                )
            };
            b.fig_bounded(
                &format!("{name}_p{}_s", (q * 100.0).round()),
                Some(x.reported()),
                "s",
                source,
                if x.upper_bound_only {
                    Bound::Upper
                } else {
                    Bound::Exact
                },
            );
        }
    }
}

pub(crate) fn six_steps(w: &Window, f: &Facts, setting: &Setting) -> Vec<Step> {
    let mut out = Vec::with_capacity(6);

    // 1. Where latency goes.
    let mut b = StepBuilder::new(1, "Where latency goes: queue, prefill, decode");
    b.fig(
        "queue_time_mean_s",
        f.queue_mean_s,
        "s",
        src(w, Signal::QueueTime),
    );
    b.fig(
        "prefill_time_mean_s",
        f.prefill_mean_s,
        "s",
        src(w, Signal::PrefillTime),
    );
    b.fig(
        "decode_time_mean_s",
        f.decode_mean_s,
        "s",
        src(w, Signal::DecodeTime),
    );
    b.fig(
        "server_ttft_mean_s",
        f.ttft_mean_s,
        "s",
        src(w, Signal::Ttft),
    );
    b.fig("server_e2e_mean_s", f.e2e_mean_s, "s", src(w, Signal::E2e));
    b.fig(
        "queue_share_of_ttft",
        f.queue_share_of_ttft,
        "ratio",
        if f.queue_share_of_ttft.is_some_and(|r| r > 1.0) {
            // Queue time is part of TTFT per request; above 1 the two means cover different
            // requests: vLLM observes TTFT at the first token but queue time at the finish.
            "queue mean / TTFT mean; above 1 because vLLM observes queue time when a request finishes and TTFT at its first token, so requests that started before the window (queued longer) weigh in the queue mean only"
        } else {
            "queue mean / TTFT mean"
        },
    );
    b.fig(
        "queue_share_of_e2e",
        f.queue_share_of_e2e,
        "ratio",
        "queue mean / E2E mean",
    );
    b.fig(
        "decode_share_of_inference",
        f.decode_share_of_inference,
        "ratio",
        "decode mean / inference mean",
    );
    quantiles(&mut b, w, Signal::Ttft, "server_ttft");
    quantiles(&mut b, w, Signal::QueueTime, "queue_time");
    quantiles(&mut b, w, Signal::Itl, "server_itl");
    if let (Some(q), Some(t)) = (f.queue_share_of_ttft, f.ttft_mean_s) {
        b.remark(format!(
            "of a mean server TTFT of {t:.3} s, {:.0} % is queueing",
            q * 100.0
        ));
    }
    // Informational, not a finding: a decode-heavy workload is decode-heavy at every load, and
    // says where effort pays only when an objective is at stake (rules: `decode_dominated`).
    if let Some(d) = f.decode_share_of_inference.filter(|d| *d >= 0.8) {
        b.remark(format!(
            "decode is {:.0} % of the running time (≥ 80 %): a decode-dominated workload, where prefill work (chunked prefill, shorter prompts) moves little",
            d * 100.0
        ));
    }
    if w.histogram(Signal::QueueTime).is_none() {
        b.remark("the engine exports no queue/prefill/decode split (vLLM ≥ 0.8 does)");
    }
    out.push(b.step);

    // 2. Efficiency.
    let mut b = StepBuilder::new(2, "Efficiency: prefix cache, batching, KV use");
    b.fig(
        "prefix_cache_hit_ratio",
        f.prefix_hit_ratio,
        "ratio",
        format!(
            "Δ{} / Δ{}",
            src(w, Signal::PrefixCacheHits),
            src(w, Signal::PrefixCacheQueries)
        ),
    );
    b.fig(
        "tokens_per_iteration",
        f.tokens_per_iteration,
        "tokens",
        format!("{} sum/count", src(w, Signal::IterationTokens)),
    );
    b.fig(
        "kv_cache_usage_max_ratio",
        f.kv_usage_max,
        "ratio",
        src(w, Signal::KvCacheUsage),
    );
    b.fig(
        "kv_cache_usage_mean_ratio",
        f.kv_usage_mean,
        "ratio",
        src(w, Signal::KvCacheUsage),
    );
    b.fig(
        "running_mean",
        f.running_mean,
        "requests",
        src(w, Signal::Running),
    );
    b.fig(
        "running_max",
        f.running_max,
        "requests",
        src(w, Signal::Running),
    );
    b.fig(
        "waiting_mean",
        f.waiting_mean,
        "requests",
        src(w, Signal::Waiting),
    );
    b.fig(
        "waiting_max",
        f.waiting_max,
        "requests",
        src(w, Signal::Waiting),
    );
    b.fig(
        "preemptions",
        f.preemptions,
        "count",
        src(w, Signal::Preemptions),
    );
    b.fig(
        "preemptions_per_request",
        f.preemptions_per_request,
        "ratio",
        "preemptions / finished requests",
    );
    if f.prefix_hit_ratio.is_some() && setting.prefixes.is_some_and(|p| p.nothing_shared()) {
        b.remark("the workload spec sets no shared prefix (no class has shared_prefix_tokens or dataset prompts): the prefix cache has nothing to reuse by design, so its hit ratio is no finding here");
    }
    b.fig(
        "running_mean_from_counters",
        f.running_mean_from_counters,
        "requests",
        format!(
            "Little's law: Δ{}_sum / window length",
            src(w, Signal::InferenceTime)
        ),
    );
    b.fig(
        "waiting_mean_from_counters",
        f.waiting_mean_from_counters,
        "requests",
        format!(
            "Little's law: Δ{}_sum / window length",
            src(w, Signal::QueueTime)
        ),
    );
    if !f.idle_gauges.is_empty() {
        let names: Vec<String> = f.idle_gauges.iter().map(|s| src(w, *s)).collect();
        b.remark(format!(
            "{} read 0 at every scrape while {} requests finished: the scrapes fell on idle moments (the load drained before the last one), so these gauges do not describe the window and are not shown or used; occupancy comes from the counters (Little's law, above)",
            names.join(", "),
            f.finished.unwrap_or(0.0)
        ));
    } else if f.gauge_samples < 2 {
        b.remark(format!(
            "gauges (running, waiting, KV usage) were sampled {} time(s): they show the moment of the scrape, not the window",
            f.gauge_samples
        ));
    }
    out.push(b.step);

    // 3. Workload shape.
    let mut b = StepBuilder::new(3, "Workload shape: prompt and generation sizes");
    b.fig(
        "prompt_tokens_mean",
        f.prompt_len_mean,
        "tokens",
        src(w, Signal::PromptLength),
    );
    b.fig(
        "generation_tokens_mean",
        f.gen_len_mean,
        "tokens",
        src(w, Signal::GenerationLength),
    );
    b.fig(
        "generation_to_prompt_ratio",
        match (f.gen_len_mean, f.prompt_len_mean) {
            (Some(g), Some(p)) if p > 0.0 => Some(g / p),
            _ => None,
        },
        "ratio",
        "mean generated / mean prompt tokens",
    );
    b.fig(
        "max_tokens_mean",
        f.max_tokens_mean,
        "tokens",
        src(w, Signal::MaxTokensParam),
    );
    b.fig(
        crate::GENERATED_OVER_MAX_TOKENS,
        match (f.gen_len_mean, f.max_tokens_mean) {
            (Some(g), Some(m)) if m > 0.0 => Some(g / m),
            _ => None,
        },
        "ratio",
        format!(
            "generated/max_tokens ratio (not a count): mean {} / mean {}; 1 (100 %) = answers run to the cap",
            src(w, Signal::GenerationLength),
            src(w, Signal::MaxTokensParam)
        ),
    );
    b.fig(
        "prompt_tokens",
        f.prompt_tokens,
        "tokens",
        src(w, Signal::PromptTokens),
    );
    b.fig(
        "generation_tokens",
        f.generation_tokens,
        "tokens",
        src(w, Signal::GenerationTokens),
    );
    out.push(b.step);

    // 4. Outcomes. The ratios first (the figures the error objective and a reader need), then
    // the counts behind them.
    let mut b = StepBuilder::new(4, "Outcomes: finish reasons, errors, HTTP");
    b.fig(
        "requests_finished",
        f.finished,
        "count",
        src(w, Signal::RequestsFinished),
    );
    let bad = f.finished_error.unwrap_or(0.0) + f.finished_abort.unwrap_or(0.0);
    // A ratio only where the engine counts failures (`outcome_series`): 0 read from nothing is
    // no figure.
    let outcomes = headroom_signals::adapter::outcome_series(w.engine);
    match outcomes
        .failures
        .filter(|_| w.counters.contains_key(&Signal::RequestsFinished))
    {
        Some(failures) => b.fig(
            "error_abort_ratio",
            f.finished.filter(|n| *n > 0.0).map(|n| bad / n),
            "ratio",
            format!("(error + abort) / finished, {failures}"),
        ),
        None => b.remark(format!("engine error rate unknown: {}", outcomes.missing)),
    }
    let http = w.counters.get(&Signal::HttpRequests);
    if http.is_some() {
        let failed = f.http_4xx.unwrap_or(0.0) + f.http_5xx.unwrap_or(0.0);
        b.fig(
            "http_error_ratio",
            f.http_total.filter(|n| *n > 0.0).map(|n| failed / n),
            "ratio",
            "http_requests_total{status=~\"4xx|5xx\"} / all, every path the API server serves",
        );
    }
    if let Some(m) = w.counters.get(&Signal::RequestsFinished) {
        for (reason, n) in m {
            b.fig(
                &format!("finished_{}", reason.replace(':', "_")),
                Some(*n),
                "count",
                format!(
                    "{}{{finished_reason=\"{reason}\"}}",
                    src(w, Signal::RequestsFinished)
                ),
            );
        }
    }
    match http {
        Some(m) => {
            for (status, n) in m {
                b.fig(
                    &format!("http_{status}"),
                    Some(*n),
                    "count",
                    format!("http_requests_total{{status=\"{status}\"}}"),
                );
            }
            b.remark(
                "the API server's http_requests_total splits statuses only by class (vLLM groups them as 2xx, 4xx, 5xx): which 4xx (a bad request, an unknown model, a rate limit) or 5xx is invisible, and so are requests refused before the API server (a proxy, a load balancer, a gateway) and connections that failed; a 4xx or 5xx the API server answers never reaches the engine's finished-request counter",
            );
        }
        None => b.remark(
            "no HTTP status counter (http_requests_total) in the scrapes: requests the API server answered with a 4xx or 5xx before the engine saw them are invisible here",
        ),
    }
    b.fig(
        "admission_rejections",
        f.admission_rejections,
        "count",
        src(w, Signal::AdmissionRejections),
    );
    out.push(b.step);

    // 5. GPU as an independent witness.
    let mut b = StepBuilder::new(5, "The GPU as an independent witness");
    for g in &w.gpus {
        let label = format!(
            "gpu{}{}",
            g.id.gpu,
            g.id.hostname
                .as_deref()
                .map(|h| format!("@{h}"))
                .unwrap_or_default()
        );
        for (field, name, unit) in [
            (
                headroom_signals::adapter::GpuField::GpuUtilPct,
                "util_mean_pct",
                "%",
            ),
            (
                headroom_signals::adapter::GpuField::GrEngineActiveRatio,
                "engine_active_mean_ratio",
                "ratio",
            ),
            (
                headroom_signals::adapter::GpuField::TensorActiveRatio,
                "tensor_active_mean_ratio",
                "ratio",
            ),
            (
                headroom_signals::adapter::GpuField::DramActiveRatio,
                "dram_active_mean_ratio",
                "ratio",
            ),
            (
                headroom_signals::adapter::GpuField::PowerW,
                "power_mean_w",
                "W",
            ),
            (
                headroom_signals::adapter::GpuField::GpuTempC,
                "temp_max_c",
                "°C",
            ),
        ] {
            let v = g.gauges.get(&field).map(|s| {
                if name.ends_with("max_c") {
                    s.max
                } else {
                    s.mean
                }
            });
            b.fig(
                &format!("{label}_{name}"),
                v,
                unit,
                format!(
                    "dcgm-exporter over {} scrape(s)",
                    g.gauges.get(&field).map(|s| s.samples).unwrap_or(0)
                ),
            );
        }
    }
    match (f.gpu_util_pct, f.gpu_gr_active) {
        (Some(u), Some(gr)) if u >= 80.0 && gr < 0.5 => b.remark(format!(
            "GPU_UTIL {u:.0} % (≥ 80 %) but engine active {gr:.2} (< 0.5): utilisation only says a kernel was running; the SMs are idle more than half the time"
        )),
        _ => {}
    }
    if w.gpus.is_empty() {
        b.remark(setting.origin.gpu_telemetry_hint(setting.dcgm_scraped));
    }
    for x in f.gpu_xids.iter().chain(&f.gpu_throttle) {
        b.remark(x.clone());
    }
    out.push(b.step);

    // 6. KV pool versus VRAM, tokens per watt.
    let mut b = StepBuilder::new(6, "KV pool versus VRAM, tokens per watt");
    b.fig(
        "kv_pool_tokens",
        f.kv_pool_tokens,
        "tokens",
        if w.kv_pool.size_tokens.is_some() {
            "vllm:cache_config_info kv_cache_size_tokens"
        } else {
            "vllm:cache_config_info num_gpu_blocks × block_size"
        },
    );
    b.fig(
        "kv_concurrency_at_max_model_len",
        f.kv_max_concurrency,
        "requests",
        "KV capacity at max_model_len (vLLM's figure, vllm:cache_config_info kv_cache_max_concurrency): requests of the whole context length each, so a floor for real requests",
    );
    if let (Some(pool), Some(p), Some(g)) = (f.kv_pool_tokens, f.prompt_len_mean, f.gen_len_mean) {
        b.fig(
            "kv_concurrency_at_mean_request",
            f.kv_concurrency_at_mean_request,
            "requests",
            format!(
                "KV capacity at the observed mean request: kv_pool_tokens {pool} / ({p:.1} prompt + {g:.1} generated tokens, means of {} and {}); rounding each request up to whole blocks lowers it, prefix sharing raises it",
                src(w, Signal::PromptLength),
                src(w, Signal::GenerationLength)
            ),
        );
    }
    b.fig(
        "vram_used_mib",
        f.gpu_fb_used_mib,
        "MiB",
        "DCGM_FI_DEV_FB_USED (max, summed over GPUs)",
    );
    b.fig(
        "vram_total_mib",
        f.gpu_fb_total_mib,
        "MiB",
        "DCGM_FI_DEV_FB_USED + FB_FREE + FB_RESERVED",
    );
    b.fig(
        "gpu_power_mean_w",
        f.gpu_power_w,
        "W",
        "DCGM_FI_DEV_POWER_USAGE (sum of per-GPU means)",
    );
    let tok_per_j = match (f.generation_tokens, f.gpu_energy_j) {
        (Some(t), Some(j)) if j > 0.0 => Some(t / j),
        _ => None,
    };
    b.fig(
        "generation_tokens_per_joule",
        tok_per_j,
        "tokens/J",
        "generated tokens / ΔDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    );
    if tok_per_j.is_none() {
        let per_w = match (f.generation_tokens, f.duration_s, f.gpu_power_w) {
            (Some(t), Some(d), Some(p)) if d > 0.0 && p > 0.0 => Some(t / d / p),
            _ => None,
        };
        b.fig(
            "generation_tokens_per_s_per_watt",
            per_w,
            "tokens/s/W",
            "generation tokens per second / mean power",
        );
    }
    if f.gpu_fb_used_mib.is_some() {
        b.remark("VRAM is near full by design: vLLM preallocates the KV pool; judge KV use by kv_cache_usage_perc, not by VRAM");
    }
    out.push(b.step);
    out
}
