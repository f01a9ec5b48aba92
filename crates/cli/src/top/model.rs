//! What `headroom top` shows, computed from [`Window`]s without a terminal: per class, each SLO
//! objective's value against its threshold, its bad share and burn rate, the engine's phases,
//! KV cache, queue and preemptions, and the GPU witness. The screen ([`super::draw`]) and the
//! plain lines ([`plain_lines`]) only render a [`TopModel`]; nothing here draws.
//!
//! Figures come from the window's histogram and counter deltas (`headroom-signals`): a
//! percentile is PromQL's `histogram_quantile` over the bucket increases, reported as an upper
//! bound when it falls into the first bucket; the bad share of a latency objective is the share
//! of observations above the threshold, bracketed by the buckets and `_sum`
//! ([`headroom_signals::Histogram::fraction_le_bounded`]), and the burn rate is that share over
//! the error budget (`1 − p/100`; the maximum ratio for the error objective), so 1.0 spends the
//! budget exactly as fast as the SLO allows (Google SRE Workbook, ch. 5).

use headroom_core::run::ObjectiveResult;
use headroom_core::stats::min_samples_for_percentile;
use headroom_core::{Objective, SloSpec, Verdict};
use headroom_signals::adapter::GpuField;
use headroom_signals::window::GpuWindow;
use headroom_signals::{Signal, Window};
use headroom_slo::catalogue::{
    GATEWAY_BAD_OUTCOMES, GATEWAY_NOT_SERVICE_OUTCOMES, VLLM_BAD_FINISHED_REASONS,
};

/// Where a class's series come from, which decides what counts as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// An engine's own `/metrics` (vLLM, SGLang, TGI, llama.cpp), one class per `model_name`.
    Engine,
    /// A Headroom gateway's `headroom_gateway_*` series, one class per `class` label.
    Gateway,
}

/// How an objective stands over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The bad share is within the budget.
    Ok,
    /// The bad share exceeds the budget (burn rate above 1).
    Breach,
    /// Fewer observations than the percentile needs (20 for p95); the figure is shown anyway.
    TooFew,
    /// Enough observations, but the 95 % interval of the bad share still straddles the budget
    /// (the sweep's live view; a level's final verdict takes the point estimate then).
    Undecided,
    /// Nothing observed in the window, or the source has no such series.
    NoData,
}

impl Status {
    /// Stable lowercase word for the plain lines.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Breach => "breach",
            Status::TooFew => "too_few",
            Status::Undecided => "undecided",
            Status::NoData => "no_data",
        }
    }
}

/// One objective of one class over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectiveRow {
    /// Stable id (`ttft_p95`, `error_rate`).
    pub id: headroom_core::objective::ObjectiveId,
    /// Human form (`TTFT p95 < 300 ms`).
    pub description: String,
    /// Whether the figures are seconds (latency) or a ratio (error rate).
    pub latency: bool,
    /// Threshold: seconds, or the maximum ratio.
    pub threshold: f64,
    /// The percentile (s) or the error ratio over the window.
    pub value: Option<f64>,
    /// `value` is only an upper bound (the rank fell into the first bucket).
    pub at_most: bool,
    /// Observations (latency) or finished requests (error rate) in the window.
    pub samples: u64,
    /// Observations the percentile needs ([`min_samples_for_percentile`]); 1 for the error rate.
    pub need: u64,
    /// Share of observations above the threshold (errors among requests), 0–1.
    pub bad_share: Option<f64>,
    /// Share the objective allows (the error budget), 0–1.
    pub allowed: f64,
    /// `bad_share / allowed`.
    pub burn: Option<f64>,
    /// Standing.
    pub status: Status,
    /// Why there is no figure, when there is none.
    pub note: Option<String>,
}

/// One class over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassView {
    /// Class name (`model_name` or the gateway's `class`; `all` when the engine names none).
    pub name: String,
    /// Where its series come from.
    pub kind: SourceKind,
    /// Seconds the window's data actually covers (less than the window until enough history).
    pub span_s: Option<f64>,
    /// Requests finished in the window.
    pub requests: Option<f64>,
    /// One row per objective of the class's SLO.
    pub objectives: Vec<ObjectiveRow>,
    /// Mean engine queue time, s (vLLM `request_queue_time_seconds`).
    pub queue_mean_s: Option<f64>,
    /// Mean prefill time, s (vLLM `request_prefill_time_seconds`).
    pub prefill_mean_s: Option<f64>,
    /// Mean decode time, s (vLLM `request_decode_time_seconds`).
    pub decode_mean_s: Option<f64>,
    /// KV-cache usage at the last scrape, 0–1.
    pub kv_usage: Option<f64>,
    /// Highest KV-cache usage seen in the window, 0–1.
    pub kv_usage_max: Option<f64>,
    /// Requests waiting at the last scrape (the gateway's: queued for admission).
    pub waiting: Option<f64>,
    /// Requests running at the last scrape (the gateway's: sequences holding admission slots).
    pub running: Option<f64>,
    /// Preemptions in the window.
    pub preemptions: Option<f64>,
}

/// One GPU over the window, from dcgm-exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuView {
    /// `gpu` index (with the host when the exporter names one).
    pub name: String,
    /// Mean `DCGM_FI_DEV_GPU_UTIL`, percent.
    pub util_pct: Option<f64>,
    /// Mean `DCGM_FI_DEV_POWER_USAGE`, W.
    pub power_w: Option<f64>,
    /// Mean `DCGM_FI_PROF_DRAM_ACTIVE`, ratio 0–1.
    pub dram_active: Option<f64>,
}

/// Everything one refresh shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopModel {
    /// What is read, as shown (URL without credentials, or `prometheus URL`).
    pub source: String,
    /// The window's label (`1m`) and length, s.
    pub window_label: String,
    /// Window length, s.
    pub window_s: f64,
    /// Time of the newest data, Unix seconds.
    pub at_unix_s: f64,
    /// Classes in name order.
    pub classes: Vec<ClassView>,
    /// GPUs (empty without `--dcgm`).
    pub gpus: Vec<GpuView>,
    /// What failed on this refresh, each naming its URL (the view keeps the last data).
    pub errors: Vec<String>,
}

impl ClassView {
    /// The class `name` over window `w`, judged against `slo`.
    pub fn from_window(name: &str, kind: SourceKind, w: &Window, slo: &SloSpec) -> ClassView {
        let mean = |s: Signal| w.histogram(s).and_then(|h| h.mean());
        let last = |s: Signal| w.gauge(s).map(|g| g.last);
        ClassView {
            name: name.to_owned(),
            kind,
            span_s: w.duration_s().filter(|d| d.is_finite()),
            requests: requests(w, kind).map(|(_, total)| total),
            objectives: slo
                .objectives
                .iter()
                .map(|o| objective_row(o, w, kind))
                .collect(),
            queue_mean_s: mean(Signal::QueueTime).filter(|_| kind == SourceKind::Engine),
            prefill_mean_s: mean(Signal::PrefillTime),
            decode_mean_s: mean(Signal::DecodeTime),
            kv_usage: last(Signal::KvCacheUsage),
            kv_usage_max: w.gauge(Signal::KvCacheUsage).map(|g| g.max),
            waiting: last(Signal::Waiting),
            running: last(Signal::Running),
            preemptions: w.counter(Signal::Preemptions),
        }
    }
}

/// `(bad, total)` finished requests over the window: vLLM's `finished_reason` `abort` and
/// `error` (TGI's `error:*`) among all; the gateway's `upstream_error`, `timeout` and
/// `rejected` among all but `client_cancel` and `invalid_request`, which are not events of the
/// service (`headroom_slo::catalogue`).
fn requests(w: &Window, kind: SourceKind) -> Option<(f64, f64)> {
    let by = w.counters.get(&Signal::RequestsFinished)?;
    let (bad, not_service): (&[&str], &[&str]) = match kind {
        SourceKind::Engine => (VLLM_BAD_FINISHED_REASONS, &[]),
        SourceKind::Gateway => (&GATEWAY_BAD_OUTCOMES, &GATEWAY_NOT_SERVICE_OUTCOMES),
    };
    let mut b = 0.0;
    let mut total = 0.0;
    for (k, v) in by {
        if not_service.contains(&k.as_str()) {
            continue;
        }
        total += v;
        if bad.contains(&k.as_str()) || k.starts_with("error:") {
            b += v;
        }
    }
    Some((b, total))
}

fn objective_row(o: &Objective, w: &Window, kind: SourceKind) -> ObjectiveRow {
    let mut row = ObjectiveRow {
        id: o.id(),
        description: o.describe(),
        latency: true,
        threshold: 0.0,
        value: None,
        at_most: false,
        samples: 0,
        need: 1,
        bad_share: None,
        allowed: 0.0,
        burn: None,
        status: Status::NoData,
        note: None,
    };
    match *o {
        Objective::Latency {
            signal,
            percentile,
            threshold_s,
        } => {
            row.threshold = threshold_s;
            row.need = min_samples_for_percentile(percentile);
            row.allowed = 1.0 - percentile / 100.0;
            if kind == SourceKind::Gateway && signal == headroom_core::LatencySignal::QueueTime {
                row.note = Some("engine only: the gateway does not see the engine's queue".into());
                return row;
            }
            let sig = Signal::of_latency(signal);
            let Some(h) = w.histogram(sig) else {
                row.note = Some(
                    w.rejection(sig)
                        .unwrap_or_else(|| format!("no {} histogram", sig.name())),
                );
                return row;
            };
            let n = h.observations();
            row.samples = if n.is_finite() && n > 0.0 {
                n.round() as u64
            } else {
                0
            };
            if row.samples == 0 {
                row.note = Some("nothing observed in the window".into());
                return row;
            }
            if let Some(q) = h.quantile_bounded(percentile / 100.0) {
                row.value = Some(q.reported());
                row.at_most = q.upper_bound_only;
            }
            row.bad_share = h
                .fraction_le_bounded(threshold_s)
                .map(|(est, _, _)| (1.0 - est).max(0.0));
        }
        Objective::ErrorRate { max_ratio } => {
            row.latency = false;
            row.threshold = max_ratio;
            row.allowed = max_ratio;
            let Some((bad, total)) = requests(w, kind) else {
                row.note = Some("no finished-request counter".into());
                return row;
            };
            row.samples = total.round().max(0.0) as u64;
            if total <= 0.0 {
                row.note = Some("no request finished in the window".into());
                return row;
            }
            row.value = Some(bad / total);
            row.bad_share = row.value;
        }
    }
    row.burn = row
        .bad_share
        .filter(|_| row.allowed > 0.0)
        .map(|b| b / row.allowed);
    row.status = match row.burn {
        Some(b) if b > 1.0 + 1e-9 => Status::Breach,
        _ if row.samples < row.need => Status::TooFew,
        Some(_) => Status::Ok,
        None => Status::NoData,
    };
    row
}

impl ObjectiveRow {
    /// A row of the sweep's live view from the objective as the level's check judged it so
    /// far: samples against what the percentile needs, and, while undecided, the samples at
    /// which the share seen so far would be certain (73 for a p95 with nothing above the
    /// threshold: z²·0.95/0.05), as the sweep's window extension reckons it.
    pub fn from_result(r: &ObjectiveResult) -> ObjectiveRow {
        let allowed = r.objective_allowed_share();
        let bad_share = r
            .share
            .filter(|s| s.n > 0)
            .map(|s| s.bad as f64 / s.n as f64);
        let need = r.needed_samples();
        let certain = match r.share {
            Some(s) if s.n > 0 && s.bad > 0 => s.samples_to_decide(),
            _ => headroom_core::stats::samples_to_decide(0, 1, allowed),
        };
        let status = match r.verdict {
            Verdict::Pass => Status::Ok,
            Verdict::Fail => Status::Breach,
            Verdict::Inconclusive if r.samples == 0 => Status::NoData,
            Verdict::Inconclusive if r.samples < need => Status::TooFew,
            Verdict::Inconclusive => Status::Undecided,
        };
        let decided = r.share.is_some_and(|s| s.is_certain());
        ObjectiveRow {
            id: r.id.clone(),
            description: r.description.clone(),
            latency: !r.id.is_error_rate(),
            threshold: r.threshold,
            value: r.observed,
            at_most: !r.bound.is_exact(),
            samples: r.samples,
            need,
            bad_share,
            allowed,
            burn: bad_share.filter(|_| allowed > 0.0).map(|b| b / allowed),
            status,
            note: certain
                .filter(|_| !decided)
                .map(|c| format!("a certain verdict needs about {c} samples")),
        }
    }
}

/// The sweep's level in progress, as its live view (`--progress tui`) shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LevelView {
    /// Phase (a class or `mix`).
    pub phase: String,
    /// The load (`16 concurrent`, `4 req/s`).
    pub load: String,
    /// Seconds since the level started.
    pub elapsed_s: f64,
    /// Planned seconds (warm-up + window; the window may still be extended).
    pub expected_s: f64,
    /// Whether the measurement window has opened (the first tick comes from it).
    pub in_window: bool,
    /// Requests of the window that ended so far.
    pub finished: u64,
    /// Objective rows: samples so far against what the percentile needs, percentiles so far.
    pub objectives: Vec<ObjectiveRow>,
    /// Levels done so far, one short line each.
    pub done: Vec<String>,
    /// Notes, newest last.
    pub notes: Vec<String>,
}

impl GpuView {
    /// The GPU witness of one dcgm window: means over the window's scrapes.
    pub fn from_window(g: &GpuWindow) -> GpuView {
        let mean = |f: GpuField| g.gauges.get(&f).map(|s| s.mean);
        GpuView {
            name: match &g.id.hostname {
                Some(h) => format!("{h}/gpu{}", g.id.gpu),
                None => format!("gpu{}", g.id.gpu),
            },
            util_pct: mean(GpuField::GpuUtilPct),
            power_w: mean(GpuField::PowerW),
            dram_active: mean(GpuField::DramActiveRatio),
        }
    }
}

/// A window length in the form `--windows` takes (`30s`, `1m`, `1h`).
pub fn window_label(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A figure for the plain lines: `-` when absent, else `digits` decimals.
fn num(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".to_owned(),
    }
}

/// A value for the plain lines: bare when it is a plain token, else quoted as a Rust string.
fn token(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\')
    {
        v.to_owned()
    } else {
        format!("{v:?}")
    }
}

/// The plain form of one refresh: one line per class, then one per error, each
/// `key=value` pairs separated by spaces (logfmt), keys fixed, absent figures `-`:
///
/// `ts=… source=… class=… window=1m span_s=… requests=… <id>=… <id>_max=… <id>_burn=…
/// <id>_n=… <id>_status=ok|breach|too_few|no_data …` for each objective (a latency's value in
/// seconds, prefixed `<=` when only an upper bound; the error rate as a ratio), then
/// `queue_mean_s prefill_mean_s decode_mean_s kv_usage waiting running preemptions`, then, with
/// `--dcgm`, `gpus gpu_util_pct gpu_power_w gpu_dram_active` (means over the GPUs).
/// An error line is `ts=… source=… error="…"`.
pub fn plain_lines(m: &TopModel, ts: &str) -> Vec<String> {
    let mut out = Vec::new();
    let head = format!("ts={ts} source={}", token(&m.source));
    for c in &m.classes {
        let mut l = format!(
            "{head} class={} window={} span_s={} requests={}",
            token(&c.name),
            m.window_label,
            num(c.span_s, 1),
            num(c.requests, 0)
        );
        for o in &c.objectives {
            let digits = if o.latency { 6 } else { 5 };
            let value = match o.value {
                Some(_) if o.at_most => format!("<={}", num(o.value, digits)),
                _ => num(o.value, digits),
            };
            l.push_str(&format!(
                " {id}={value} {id}_max={} {id}_burn={} {id}_n={} {id}_status={}",
                num(Some(o.threshold), digits),
                num(o.burn, 2),
                o.samples,
                o.status.word(),
                id = o.id
            ));
        }
        l.push_str(&format!(
            " queue_mean_s={} prefill_mean_s={} decode_mean_s={} kv_usage={} waiting={} running={} preemptions={}",
            num(c.queue_mean_s, 6),
            num(c.prefill_mean_s, 6),
            num(c.decode_mean_s, 6),
            num(c.kv_usage, 3),
            num(c.waiting, 0),
            num(c.running, 0),
            num(c.preemptions, 0)
        ));
        if !m.gpus.is_empty() {
            let avg = |f: fn(&GpuView) -> Option<f64>| {
                let v: Vec<f64> = m.gpus.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            l.push_str(&format!(
                " gpus={} gpu_util_pct={} gpu_power_w={} gpu_dram_active={}",
                m.gpus.len(),
                num(avg(|g| g.util_pct), 1),
                num(avg(|g| g.power_w), 1),
                num(avg(|g| g.dram_active), 3)
            ));
        }
        out.push(l);
    }
    for e in &m.errors {
        out.push(format!("{head} error={:?}", e));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile};
    use headroom_signals::{Scrape, WindowOptions};
    use std::path::Path;

    fn scrape(body: &str, t: f64) -> Scrape {
        Scrape::from_body("test", body.to_owned(), t, None).unwrap()
    }

    /// vLLM-shaped body: `n` TTFT observations, `slow` of them in (0.25, 0.5], the rest ≤ 0.1 s;
    /// `ok` stop + `err` error finishes; KV usage, waiting, preemptions as given.
    fn vllm(n: u32, slow: u32, ok: u32, err: u32, kv: f64, preempt: u32) -> String {
        let fast = n - slow;
        format!(
            "# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le=\"0.1\",model_name=\"m\"}} {fast}
vllm:time_to_first_token_seconds_bucket{{le=\"0.25\",model_name=\"m\"}} {fast}
vllm:time_to_first_token_seconds_bucket{{le=\"0.5\",model_name=\"m\"}} {n}
vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}
vllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {sum}
vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} {n}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{finished_reason=\"stop\",model_name=\"m\"}} {ok}
vllm:request_success_total{{finished_reason=\"error\",model_name=\"m\"}} {err}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name=\"m\"}} {kv}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name=\"m\"}} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name=\"m\"}} 5
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{model_name=\"m\"}} {preempt}
",
            sum = f64::from(fast) * 0.05 + f64::from(slow) * 0.4
        )
    }

    fn spec() -> SloSpec {
        SloFile::parse(DEFAULT_SLO_YAML, Path::new("slo.yaml"))
            .unwrap()
            .spec_for("m")
    }

    fn view(a: &str, b: &str) -> ClassView {
        let w = Window::from_scrapes(
            &[scrape(a, 100.0), scrape(b, 160.0)],
            &[],
            &WindowOptions::default(),
        )
        .unwrap();
        ClassView::from_window("m", SourceKind::Engine, &w, &spec())
    }

    /// Deltas between two scrapes, by hand: 40 new TTFT observations, 4 of them in (0.25, 0.5];
    /// linear within that bucket, 4 × (0.5 − 0.3)/0.25 = 3.2 of 40 = 8 % lie above 300 ms
    /// (`_sum` does not narrow it), against a 5 % budget: burn 1.6. 2 errors of 40 finished
    /// requests = 5 % against 0.5 %: burn 10.
    #[test]
    fn objectives_from_bucket_deltas() {
        let v = view(
            &vllm(100, 0, 100, 0, 0.1, 2),
            &vllm(140, 4, 138, 2, 0.45, 5),
        );
        assert_eq!(v.span_s, Some(60.0));
        assert_eq!(v.requests, Some(40.0));
        let ttft = &v.objectives[0];
        assert_eq!(ttft.id, "ttft_p95");
        assert_eq!(ttft.samples, 40);
        assert_eq!(ttft.need, 20);
        let bad = ttft.bad_share.unwrap();
        assert!((bad - 0.08).abs() < 1e-9, "{bad}");
        assert!((ttft.burn.unwrap() - 1.6).abs() < 1e-9);
        assert_eq!(ttft.status, Status::Breach);
        // p95 of 40: rank 38 of 40, the 2nd of 4 in (0.25, 0.5] → 0.25 + 0.25 × 2/4 = 0.375
        assert!(
            (ttft.value.unwrap() - 0.375).abs() < 1e-9,
            "{:?}",
            ttft.value
        );
        let err = v.objectives.iter().find(|o| o.id == "error_rate").unwrap();
        assert_eq!(err.samples, 40);
        assert!((err.value.unwrap() - 0.05).abs() < 1e-12);
        assert!((err.burn.unwrap() - 10.0).abs() < 1e-9);
        // ITL: the body has none
        let itl = v.objectives.iter().find(|o| o.id == "itl_p95").unwrap();
        assert_eq!(itl.status, Status::NoData);
        assert_eq!(v.kv_usage, Some(0.45));
        assert_eq!(v.kv_usage_max, Some(0.45));
        assert_eq!(v.waiting, Some(3.0));
        assert_eq!(v.running, Some(5.0));
        assert_eq!(v.preemptions, Some(3.0));
    }

    /// Nothing slow and no errors: burn 0, ok; 10 observations of a p95 are too few.
    #[test]
    fn a_quiet_window_is_ok_or_too_few() {
        let v = view(&vllm(0, 0, 0, 0, 0.0, 0), &vllm(10, 0, 10, 0, 0.0, 0));
        assert_eq!(v.objectives[0].burn, Some(0.0));
        assert_eq!(v.objectives[0].status, Status::TooFew);
        let v = view(&vllm(0, 0, 0, 0, 0.0, 0), &vllm(30, 0, 30, 0, 0.0, 0));
        assert_eq!(v.objectives[0].status, Status::Ok);
        // every observation ≤ 0.1 s, the first bucket: the percentile is only "≤ 0.1 s"
        assert!(v.objectives[0].at_most);
        assert_eq!(v.objectives[0].value, Some(0.1));
    }

    #[test]
    fn plain_lines_are_stable_logfmt() {
        let v = view(
            &vllm(100, 0, 100, 0, 0.1, 2),
            &vllm(140, 4, 138, 2, 0.45, 5),
        );
        let m = TopModel {
            source: "http://127.0.0.1:1/metrics".into(),
            window_label: "1m".into(),
            window_s: 60.0,
            at_unix_s: 160.0,
            classes: vec![v],
            gpus: vec![],
            errors: vec!["http://x/metrics: unreachable".into()],
        };
        let l = plain_lines(&m, "T");
        assert_eq!(l.len(), 2);
        assert!(
            l[0].starts_with(
                "ts=T source=http://127.0.0.1:1/metrics class=m window=1m span_s=60.0 requests=40 ttft_p95=0.375000 ttft_p95_max=0.300000 ttft_p95_burn=1.60 ttft_p95_n=40 ttft_p95_status=breach itl_p95=- itl_p95_max=0.050000 itl_p95_burn=- itl_p95_n=0 itl_p95_status=no_data"
            ),
            "{}",
            l[0]
        );
        assert!(
            l[0].contains(" error_rate=0.05000 error_rate_max=0.00500 error_rate_burn=10.00 error_rate_n=40 error_rate_status=breach"),
            "{}",
            l[0]
        );
        assert!(
            l[0].ends_with(" kv_usage=0.450 waiting=3 running=5 preemptions=3"),
            "{}",
            l[0]
        );
        assert_eq!(
            l[1],
            "ts=T source=http://127.0.0.1:1/metrics error=\"http://x/metrics: unreachable\""
        );
        assert_eq!(token("a b"), "\"a b\"");
        assert_eq!(window_label(60.0), "1m");
        assert_eq!(window_label(1800.0), "30m");
        assert_eq!(window_label(45.0), "45s");
    }
}
