//! Windows: what happened between two or more scrapes of the same server.
//!
//! What lives here: counter deltas, histogram deltas and gauge summaries over a time-ordered list
//! of [`EngineSnapshot`]s (and [`DcgmSnapshot`]s). What does not: reading metric names (that is
//! [`crate::adapter`]) or judging the result (crate `diagnose`).
//!
//! # How deltas are computed
//!
//! * **Counters** are handled per series (one `model_name` × `engine` × key), the way
//!   Prometheus' `increase()` handles them: the increase is `last − first`, plus, for every
//!   scrape whose value is below the previous one (a reset: the server restarted), the value
//!   before the reset. The series' per-series increases are then summed per key.
//! * **No extrapolation.** PromQL's `rate()`/`increase()` extrapolate to the edges of the range
//!   because Prometheus' samples do not fall on the range boundaries. Our scrapes *are* the
//!   boundaries (the sweep scrapes at level start and end), so the delta is exact and not
//!   extrapolated. With a Prometheus range (see [`crate::source`]), PromQL's extrapolated
//!   `increase()` is what comes back.
//! * **Since server start.** With a single scrape (or [`WindowOptions::since_server_start`]),
//!   every counter's baseline is 0: the window covers everything since the process started
//!   (`process_start_time_seconds` gives its start when the server exports it).
//! * A series absent from earlier scrapes and present later starts from 0 when it appears
//!   (vLLM creates its series lazily at 0).
//! * **Histograms** are handled per series as a whole: a reset is any scrape where `_count` or any
//!   bucket decreased, and then every component (buckets, `_sum`, `_count`) adds its pre-reset
//!   value, so buckets stay consistent with each other. Series are then summed by `le` (compared
//!   numerically), as `sum by (le) (increase(…_bucket[…]))`.
//! * **Gauges**: at each scrape the selected series are combined (summed for request counts; the
//!   maximum for the KV-cache usage ratio, since the fullest engine preempts first), then
//!   summarised over the scrapes as min, mean, max and last.
//! * **Corrupt data** ([`crate::quality`]): a signal whose family is corrupt in any scrape, or
//!   whose histogram delta is impossible, is left out of the window entirely and listed in
//!   [`Window::rejected`] with a [`DataWarning`]; a GPU field out of range in any scrape is left
//!   out of that GPU's summaries.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::adapter::{
    DcgmSnapshot, Engine, EngineSnapshot, GpuField, GpuId, KvPool, Selection, SeriesHistogram,
    Signal, SignalKind, dcgm_snapshot, engine_snapshot,
};
use crate::exposition::Labels;
use crate::histogram::Histogram;
use crate::quality::{DataWarning, check_histogram, merge_warning};
use crate::scrape::Scrape;

/// min / mean / max / last of a gauge over the scrapes of a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeSummary {
    /// Smallest value seen.
    pub min: f64,
    /// Arithmetic mean of the values seen (one per scrape, not time-weighted).
    pub mean: f64,
    /// Largest value seen.
    pub max: f64,
    /// Value at the last scrape.
    pub last: f64,
    /// Number of scrapes that had the gauge.
    pub samples: usize,
}

impl GaugeSummary {
    /// Summarises values in time order; `None` when empty.
    pub fn of(values: &[f64]) -> Option<GaugeSummary> {
        let vals: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let last = *vals.last()?;
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        Some(GaugeSummary {
            min,
            mean,
            max,
            last,
            samples: vals.len(),
        })
    }
}

/// The occupancy gauges [`Window::gauge_validity`] judges: running, waiting, waiting for
/// capacity, KV-cache usage.
pub const OCCUPANCY_GAUGES: [Signal; 4] = [
    Signal::Running,
    Signal::Waiting,
    Signal::WaitingForCapacity,
    Signal::KvCacheUsage,
];

/// Whether a gauge's samples describe the window they summarise.
///
/// A gauge shows the moment of each scrape, not the span between them. When every scrape falls
/// on an idle moment (a saved pair taken before and after a burst, a short window, a Prometheus
/// range ending at a quiet minute), running, waiting and KV usage read 0 although the counters
/// show that requests ran: such a summary is no evidence about the window. The counters then
/// give the occupancy by Little's law ([`Window::running_mean_from_counters`],
/// [`Window::waiting_mean_from_counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GaugeValidity {
    /// At least one sample saw the engine at work, or the counters show no work the samples
    /// could have missed: the summary describes the sampled moments of the window.
    Describes,
    /// Every sample read 0 while the counters show work of that kind in the window (requests
    /// ran; for the waiting gauges, requests queued): the scrapes fell on idle moments.
    IdleSampled,
}

/// One GPU over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWindow {
    /// Which GPU.
    pub id: GpuId,
    /// `modelName`.
    pub model: Option<String>,
    /// Kubernetes attributions seen (`pod=…,namespace=…,container=…`).
    pub pods: Vec<String>,
    /// Gauge fields summarised over the scrapes (units per [`GpuField`]).
    pub gauges: BTreeMap<GpuField, GaugeSummary>,
    /// Counter fields' increase over the window (J for energy, ns for violations); empty with a
    /// single dcgm scrape (those counters run since boot, not since the window's start).
    pub increases: BTreeMap<GpuField, f64>,
}

impl GpuWindow {
    /// Mean power over the window from the energy counter, W (`None` without two scrapes).
    pub fn mean_power_from_energy_w(&self, duration_s: f64) -> Option<f64> {
        let j = *self.increases.get(&GpuField::EnergyJ)?;
        (duration_s > 0.0).then(|| j / duration_s)
    }
}

/// Options for building a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowOptions {
    /// Which series to keep (default: all, summed).
    pub selection: Selection,
    /// Force an engine instead of detecting it.
    pub engine: Option<Engine>,
    /// Treat every counter's baseline as 0 (the window starts at server start). Always true
    /// with a single scrape.
    pub since_server_start: bool,
}

/// What happened on the server over a window: the canonical signals of [`Signal`] as deltas
/// (counters, histograms) and summaries (gauges), plus per-GPU summaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Engine detected (or forced).
    pub engine: Engine,
    /// vLLM version range inferred from metric presence.
    pub version_hint: Option<String>,
    /// Start, Unix seconds: the first scrape, or the server's `process_start_time_seconds`
    /// when the window runs since server start (`None` if unknown).
    pub start_unix_s: Option<f64>,
    /// End: the last scrape, Unix seconds.
    pub end_unix_s: f64,
    /// Whether counters count from server start (baseline 0).
    pub since_server_start: bool,
    /// Engine scrapes used.
    pub scrapes: usize,
    /// Counter increases per signal, broken down by key (e.g. `finished_reason`; key `""` when
    /// a signal has no breakdown).
    pub counters: BTreeMap<Signal, BTreeMap<String, f64>>,
    /// Histogram deltas per signal, all selected series summed by `le`.
    pub histograms: BTreeMap<Signal, Histogram>,
    /// Gauge summaries per signal.
    pub gauges: BTreeMap<Signal, GaugeSummary>,
    /// KV pool configuration at the last scrape (vLLM `cache_config_info`).
    pub kv_pool: KvPool,
    /// Per-GPU summaries (empty without dcgm scrapes).
    pub gpus: Vec<GpuWindow>,
    /// Metric name behind each signal present.
    pub sources: BTreeMap<Signal, String>,
    /// Signals the engine normally exports that were absent, with the names looked for.
    pub missing: BTreeMap<Signal, Vec<String>>,
    /// Counter resets detected (series and scrape index), e.g. a server restart mid-window.
    pub counter_resets: Vec<String>,
    /// Anything else worth knowing (e.g. "only one dcgm scrape: no energy").
    pub notes: Vec<String>,
    /// Signals whose family was corrupt in at least one scrape (or whose window delta was), with
    /// the metric name: they are in neither `counters`, `histograms` nor `gauges`, and not in
    /// `missing` either (see [`crate::quality`]).
    pub rejected: BTreeMap<Signal, String>,
    /// What was wrong, one entry per corrupt series and problem (repeats counted), GPU fields
    /// included.
    pub data_warnings: Vec<DataWarning>,
}

/// Why no window could be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    /// No engine scrape given.
    #[error("no engine scrapes: a window needs at least one (two or more for a time window)")]
    NoScrapes,
    /// Scrapes are not in time order.
    #[error(
        "scrapes are not in time order: scrape {index} ({origin}) is at {at_unix_s:.3}, before the previous one at {prev_unix_s:.3}"
    )]
    OutOfOrder {
        /// Index of the offending scrape.
        index: usize,
        /// Where it came from.
        origin: String,
        /// Its time.
        at_unix_s: f64,
        /// The previous scrape's time.
        prev_unix_s: f64,
    },
    /// The scrape holds none of the expected engine metrics.
    #[error(
        "{origin}: none of the expected inference-engine metrics were found (detected: {detected}; looked for e.g. {looked_for}){hint}"
    )]
    NoEngineMetrics {
        /// Where the scrape came from.
        origin: String,
        /// What detection concluded, with its evidence.
        detected: String,
        /// Names looked for.
        looked_for: String,
        /// What to do, when the scrape says what it is instead (`; …`), else empty.
        hint: String,
    },
}

impl Window {
    /// Builds a window from engine scrapes in time order and optional dcgm-exporter scrapes.
    ///
    /// Errors: [`WindowError::NoScrapes`], [`WindowError::OutOfOrder`], and
    /// [`WindowError::NoEngineMetrics`] when the last scrape has none of the canonical engine
    /// metrics (the message says which engine was detected and which names were looked for).
    pub fn from_scrapes(
        engine: &[Scrape],
        dcgm: &[Scrape],
        opts: &WindowOptions,
    ) -> Result<Window, WindowError> {
        check_order(engine)?;
        check_order(dcgm)?;
        let last = engine.last().ok_or(WindowError::NoScrapes)?;
        let detected = crate::adapter::detect(&last.exposition);
        let eng = opts.engine.unwrap_or(detected.engine);
        let snaps: Vec<(f64, EngineSnapshot)> = engine
            .iter()
            .map(|s| {
                (
                    s.at_unix_s,
                    engine_snapshot(&s.exposition, Some(eng), &opts.selection),
                )
            })
            .collect();
        if snaps
            .last()
            .is_some_and(|(_, s)| s.sources.is_empty() && s.rejected.is_empty())
        {
            let looked: Vec<&str> = crate::adapter::mappings_for(if eng == Engine::Unknown {
                Engine::Vllm
            } else {
                eng
            })
            .flat_map(|m| m.names.iter().copied())
            .take(8)
            .collect();
            let filter = if opts.selection == Selection::default() {
                String::new()
            } else {
                format!(
                    "; only series with model_name={:?} engine={:?} were kept",
                    opts.selection.model_name, opts.selection.engine
                )
            };
            // A Headroom gateway in front of the engine serves its own metrics, not the engine's.
            let gateway = last
                .exposition
                .families
                .iter()
                .any(|f| f.name.starts_with("headroom_gateway_"));
            let hint = if gateway {
                "; this is a Headroom gateway's /metrics: give the engine's own, e.g. `--metrics-url http://ENGINE:8000/metrics` (the gateway's upstream)".to_string()
            } else {
                String::new()
            };
            return Err(WindowError::NoEngineMetrics {
                origin: last.source.clone(),
                detected: format!("{} — {}{filter}", eng.name(), detected.evidence),
                looked_for: looked.join(", "),
                hint,
            });
        }
        let dsnaps: Vec<(f64, DcgmSnapshot)> = dcgm
            .iter()
            .map(|s| (s.at_unix_s, dcgm_snapshot(&s.exposition)))
            .collect();
        Ok(Window::from_snapshots(
            &snaps,
            &dsnaps,
            opts.since_server_start,
        ))
    }

    /// Builds a window from canonical snapshots `(unix seconds, snapshot)` in time order
    /// (callers that already hold snapshots; no checks beyond those documented on
    /// [`Window::from_scrapes`]). Panics never; an empty `engine` gives an empty window.
    pub fn from_snapshots(
        engine: &[(f64, EngineSnapshot)],
        dcgm: &[(f64, DcgmSnapshot)],
        since_server_start: bool,
    ) -> Window {
        let since_start = since_server_start || engine.len() == 1;
        let last = engine.last().map(|(_, s)| s);
        let end_unix_s = engine.last().map(|(t, _)| *t).unwrap_or(f64::NAN);
        let start_unix_s = if since_start {
            last.and_then(|s| s.process_start_unix_s)
        } else {
            engine.first().map(|(t, _)| *t)
        };
        let mut w = Window {
            engine: last.map(|s| s.engine).unwrap_or(Engine::Unknown),
            version_hint: last.and_then(|s| s.version_hint.clone()),
            start_unix_s,
            end_unix_s,
            since_server_start: since_start,
            scrapes: engine.len(),
            counters: BTreeMap::new(),
            histograms: BTreeMap::new(),
            gauges: BTreeMap::new(),
            kv_pool: last.map(|s| s.kv_pool).unwrap_or_default(),
            gpus: Vec::new(),
            sources: BTreeMap::new(),
            missing: last.map(|s| s.missing.clone()).unwrap_or_default(),
            counter_resets: Vec::new(),
            notes: Vec::new(),
            rejected: BTreeMap::new(),
            data_warnings: Vec::new(),
        };
        // A signal corrupt in any scrape is rejected for the whole window: a delta or summary
        // over the remaining scrapes would silently describe a different span.
        for (_, s) in engine {
            for (sig, name) in &s.rejected {
                w.rejected.entry(*sig).or_insert_with(|| name.clone());
            }
            for d in &s.warnings {
                merge_warning(&mut w.data_warnings, d);
            }
        }
        for (_, s) in engine {
            for (sig, name) in &s.sources {
                if !w.rejected.contains_key(sig) {
                    w.sources.entry(*sig).or_insert_with(|| name.clone());
                }
            }
        }
        for sig in w.rejected.keys() {
            w.missing.remove(sig);
        }
        let signals: Vec<Signal> = w.sources.keys().copied().collect();
        for sig in signals {
            match sig.kind() {
                SignalKind::Counter => {
                    let by_key = counter_deltas(engine, sig, since_start, &mut w.counter_resets);
                    if !by_key.is_empty() {
                        w.counters.insert(sig, by_key);
                    }
                }
                SignalKind::Gauge => {
                    let per_scrape: Vec<f64> = engine
                        .iter()
                        .filter_map(|(_, s)| {
                            let vals = s.values.get(&sig)?;
                            if vals.is_empty() {
                                return None;
                            }
                            Some(if sig == Signal::KvCacheUsage {
                                vals.iter()
                                    .map(|v| v.value)
                                    .fold(f64::NEG_INFINITY, f64::max)
                            } else {
                                vals.iter().map(|v| v.value).sum()
                            })
                        })
                        .collect();
                    if let Some(g) = GaugeSummary::of(&per_scrape) {
                        w.gauges.insert(sig, g);
                    }
                }
                SignalKind::Histogram => {
                    if let Some(h) =
                        histogram_delta(engine, sig, since_start, &mut w.counter_resets)
                    {
                        let pairs: Vec<(f64, f64)> =
                            h.buckets.iter().map(|b| (b.le, b.count)).collect();
                        // Each scrape was cumulative; the delta of two cumulative scrapes is
                        // too unless observations above some bound were *un*-counted between
                        // them without a reset, which no correct producer does.
                        match check_histogram(&pairs, h.sum, h.count, h.count.is_finite()) {
                            None => {
                                w.histograms.insert(sig, h);
                            }
                            Some((problem, detail)) => {
                                let name = w.sources.remove(&sig).unwrap_or_else(|| sig.name());
                                merge_warning(
                                    &mut w.data_warnings,
                                    &DataWarning {
                                        metric: name.clone(),
                                        series: String::new(),
                                        signal: sig.name(),
                                        problem,
                                        detail: format!(
                                            "the increase over the window is impossible: {detail}"
                                        ),
                                        occurrences: 1,
                                    },
                                );
                                w.rejected.insert(sig, name);
                            }
                        }
                    }
                }
            }
        }
        w.gpus = gpu_windows(dcgm, &mut w.notes, &mut w.data_warnings);
        w
    }

    /// Why a signal was rejected, as one sentence naming the metric and what was wrong
    /// (`vllm:time_to_first_token_seconds{…}: buckets are not cumulative: …`); `None` when it
    /// was not.
    pub fn rejection(&self, sig: Signal) -> Option<String> {
        let metric = self.rejected.get(&sig)?;
        let name = sig.name();
        Some(
            self.data_warnings
                .iter()
                .find(|d| d.signal == name)
                .map(|d| format!("{}{} rejected: {}", d.metric, d.series, d.detail))
                .unwrap_or_else(|| format!("{metric} rejected")),
        )
    }

    /// Duration in seconds, when the start is known.
    pub fn duration_s(&self) -> Option<f64> {
        self.start_unix_s.map(|s| self.end_unix_s - s)
    }

    /// Total increase of a counter signal over all keys; `None` when the server lacks it.
    pub fn counter(&self, sig: Signal) -> Option<f64> {
        self.counters.get(&sig).map(|m| m.values().sum())
    }

    /// Increase of a counter signal for one key (e.g. `finished_reason="length"`); `Some(0)` when
    /// the signal exists but the key does not.
    pub fn counter_key(&self, sig: Signal, key: &str) -> Option<f64> {
        self.counters
            .get(&sig)
            .map(|m| m.get(key).copied().unwrap_or(0.0))
    }

    /// The histogram delta of a signal.
    pub fn histogram(&self, sig: Signal) -> Option<&Histogram> {
        self.histograms.get(&sig)
    }

    /// The gauge summary of a signal.
    pub fn gauge(&self, sig: Signal) -> Option<&GaugeSummary> {
        self.gauges.get(&sig)
    }

    /// Finished requests over the window: the `finished_reason` counter, else the E2E histogram's
    /// count.
    /// `None` when the `finished_reason` counter was rejected as corrupt (its replacement would
    /// be a different figure under the same name).
    pub fn requests_finished(&self) -> Option<f64> {
        if self.rejected.contains_key(&Signal::RequestsFinished) {
            return None;
        }
        self.counter(Signal::RequestsFinished)
            .or_else(|| self.histogram(Signal::E2e).map(|h| h.count))
    }

    /// Whether the summary of gauge `sig` describes the window ([`GaugeValidity`]); `None`
    /// when the window has no such gauge or `sig` is no occupancy gauge (running, waiting,
    /// waiting for capacity, KV-cache usage).
    ///
    /// Idle-sampled means every sample is 0 while the counters show work: for running and KV
    /// usage, a request finished or a token was generated in the window; for the waiting
    /// gauges, either the running gauge is idle-sampled too (the scrapes fell on idle moments)
    /// or Little's law puts at least one request waiting on average
    /// ([`Window::waiting_mean_from_counters`] ≥ 1), which all-zero samples cannot have seen.
    pub fn gauge_validity(&self, sig: Signal) -> Option<GaugeValidity> {
        let g = self.gauge(sig)?;
        let all_zero = g.max <= 0.0;
        let worked = self.requests_finished().is_some_and(|n| n > 0.0)
            || self
                .counter(Signal::GenerationTokens)
                .is_some_and(|n| n > 0.0);
        let idle = match sig {
            Signal::Running | Signal::KvCacheUsage => all_zero && worked,
            Signal::Waiting | Signal::WaitingForCapacity => {
                all_zero
                    && (self.gauge_validity(Signal::Running) == Some(GaugeValidity::IdleSampled)
                        || self.waiting_mean_from_counters().is_some_and(|w| w >= 1.0))
            }
            _ => return None,
        };
        Some(if idle {
            GaugeValidity::IdleSampled
        } else {
            GaugeValidity::Describes
        })
    }

    /// Mean requests running over the window by Little's law: Δ`_sum` of the inference-time
    /// histogram (seconds each finished request spent scheduled, vLLM
    /// `request_inference_time_seconds`) / window length (s). vLLM observes a request when it
    /// finishes, so a request that started before the window counts whole and one still
    /// running at its end not at all: close to the time average when the window is long beside
    /// a request. `None` without the histogram or a known, positive window length.
    pub fn running_mean_from_counters(&self) -> Option<f64> {
        self.little(Signal::InferenceTime)
    }

    /// Mean requests waiting over the window by Little's law: Δ`_sum` of the queue-time
    /// histogram (vLLM `request_queue_time_seconds`) / window length (s); the same caveats as
    /// [`Window::running_mean_from_counters`].
    pub fn waiting_mean_from_counters(&self) -> Option<f64> {
        self.little(Signal::QueueTime)
    }

    fn little(&self, sig: Signal) -> Option<f64> {
        let d = self.duration_s().filter(|d| d.is_finite() && *d > 0.0)?;
        let s = self.histogram(sig)?.sum;
        (s.is_finite() && s >= 0.0).then(|| s / d)
    }

    /// Prefix-cache hit ratio, Δhits / Δqueries (0–1); `None` without queries.
    pub fn prefix_cache_hit_ratio(&self) -> Option<f64> {
        let q = self.counter(Signal::PrefixCacheQueries)?;
        let h = self.counter(Signal::PrefixCacheHits)?;
        (q > 0.0).then(|| h / q)
    }
}

fn check_order(scrapes: &[Scrape]) -> Result<(), WindowError> {
    for (i, pair) in scrapes.windows(2).enumerate() {
        if pair[1].at_unix_s < pair[0].at_unix_s {
            return Err(WindowError::OutOfOrder {
                index: i + 1,
                origin: pair[1].source.clone(),
                at_unix_s: pair[1].at_unix_s,
                prev_unix_s: pair[0].at_unix_s,
            });
        }
    }
    Ok(())
}

/// Prometheus-style increase of one series' values in time order (already including any
/// baseline), with the indices where a reset was seen.
fn increase(values: &[f64]) -> (f64, Vec<usize>) {
    let (Some(first), Some(last)) = (values.first(), values.last()) else {
        return (0.0, Vec::new());
    };
    let mut inc = last - first;
    let mut resets = Vec::new();
    for (i, w) in values.windows(2).enumerate() {
        if w[1] < w[0] {
            inc += w[0];
            resets.push(i + 1);
        }
    }
    (inc, resets)
}

fn counter_deltas(
    engine: &[(f64, EngineSnapshot)],
    sig: Signal,
    since_start: bool,
    resets: &mut Vec<String>,
) -> BTreeMap<String, f64> {
    // series identity → (key, values in time order)
    let mut series: BTreeMap<(String, Labels), Vec<f64>> = BTreeMap::new();
    for (i, (_, s)) in engine.iter().enumerate() {
        for v in s.values.get(&sig).into_iter().flatten() {
            let vals = series.entry((v.key.clone(), v.series.clone())).or_default();
            if vals.is_empty() && (since_start || i > 0) {
                vals.push(0.0); // baseline: server start, or the series appeared mid-window
            }
            vals.push(v.value);
        }
    }
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for ((key, labels), vals) in series {
        let (inc, r) = increase(&vals);
        for idx in r {
            resets.push(format!(
                "{} {}: counter reset before scrape {idx}",
                sig.name(),
                labels
            ));
        }
        *out.entry(key).or_default() += inc;
    }
    out
}

fn histogram_delta(
    engine: &[(f64, EngineSnapshot)],
    sig: Signal,
    since_start: bool,
    resets: &mut Vec<String>,
) -> Option<Histogram> {
    let zero = |h: &SeriesHistogram| SeriesHistogram {
        series: h.series.clone(),
        buckets: h.buckets.iter().map(|b| (b.0, 0.0)).collect(),
        sum: 0.0,
        count: 0.0,
    };
    let mut series: BTreeMap<Labels, Vec<SeriesHistogram>> = BTreeMap::new();
    for (i, (_, s)) in engine.iter().enumerate() {
        for h in s.histograms.get(&sig).into_iter().flatten() {
            let v = series.entry(h.series.clone()).or_default();
            if v.is_empty() && (since_start || i > 0) {
                v.push(zero(h));
            }
            v.push(h.clone());
        }
    }
    if series.is_empty() {
        return None;
    }
    let mut pairs: Vec<(f64, f64)> = Vec::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for (labels, points) in series {
        // Buckets by the bits of their bound (`"1"` and `"1.0"` parse to the same f64), so that
        // matching bounds across scrapes stays O(B log B) on hostile bodies with many buckets.
        let maps: Vec<BTreeMap<u64, f64>> = points
            .iter()
            .map(|p| p.buckets.iter().map(|b| (b.0.to_bits(), b.1)).collect())
            .collect();
        let (first, last) = (&points[0], &points[points.len() - 1]);
        let mut d_sum = last.sum - first.sum;
        let mut d_count = last.count - first.count;
        let mut le_inc: BTreeMap<u64, (f64, f64)> = BTreeMap::new(); // le bits → (le, inc)
        for &(le, c) in &last.buckets {
            let base = maps[0].get(&le.to_bits()).copied().unwrap_or(0.0);
            le_inc.insert(le.to_bits(), (le, c - base));
        }
        for i in 1..points.len() {
            let (prev, cur) = (&points[i - 1], &points[i]);
            let bucket_down = maps[i]
                .iter()
                .any(|(le, c)| maps[i - 1].get(le).is_some_and(|p| c < p));
            if cur.count < prev.count || bucket_down {
                resets.push(format!(
                    "{} {}: histogram reset before scrape {i}",
                    sig.name(),
                    labels,
                ));
                d_sum += prev.sum;
                d_count += prev.count;
                for (le, c) in &maps[i - 1] {
                    if let Some(e) = le_inc.get_mut(le) {
                        e.1 += c;
                    }
                }
            }
        }
        pairs.extend(le_inc.into_values());
        sum += d_sum;
        count += d_count;
    }
    Some(Histogram::from_pairs(pairs, sum, count))
}

fn gpu_windows(
    dcgm: &[(f64, DcgmSnapshot)],
    notes: &mut Vec<String>,
    warnings: &mut Vec<DataWarning>,
) -> Vec<GpuWindow> {
    let mut by_gpu: BTreeMap<GpuId, GpuWindow> = BTreeMap::new();
    let mut series: BTreeMap<(GpuId, GpuField), Vec<f64>> = BTreeMap::new();
    // a field out of range in any scrape is left out for the whole window
    let rejected: std::collections::BTreeSet<(GpuId, GpuField)> = dcgm
        .iter()
        .flat_map(|(_, s)| s.rejected.iter().cloned())
        .collect();
    for (_, snap) in dcgm {
        for d in &snap.warnings {
            merge_warning(warnings, d);
        }
    }
    for (_, snap) in dcgm {
        for g in &snap.gpus {
            let gw = by_gpu.entry(g.id.clone()).or_insert_with(|| GpuWindow {
                id: g.id.clone(),
                model: g.model.clone(),
                pods: Vec::new(),
                gauges: BTreeMap::new(),
                increases: BTreeMap::new(),
            });
            for p in &g.pods {
                if !gw.pods.contains(p) {
                    gw.pods.push(p.clone());
                }
            }
            for (f, v) in &g.fields {
                series.entry((g.id.clone(), *f)).or_default().push(*v);
            }
        }
    }
    if dcgm.len() == 1 && !by_gpu.is_empty() {
        notes.push(
            "one dcgm scrape only: GPU gauges are a single sample and energy/violation counters (since boot) are not used"
                .to_owned(),
        );
    }
    for ((id, field), vals) in series {
        if rejected.contains(&(id.clone(), field)) {
            continue;
        }
        let Some(gw) = by_gpu.get_mut(&id) else {
            continue;
        };
        if field.is_counter() {
            if vals.len() >= 2 {
                gw.increases.insert(field, increase(&vals).0);
            }
        } else if let Some(g) = GaugeSummary::of(&vals) {
            gw.gauges.insert(field, g);
        }
    }
    by_gpu.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increase_handles_resets_like_prometheus() {
        // 10 → 15 → 3 (reset) → 8: increase = (8 − 10) + 15 = 13 (5 before, 8 after the reset).
        let (inc, r) = increase(&[10.0, 15.0, 3.0, 8.0]);
        assert_eq!(inc, 13.0);
        assert_eq!(r, vec![2]);
        assert_eq!(increase(&[4.0]).0, 0.0);
        assert_eq!(increase(&[0.0, 4.0]).0, 4.0);
    }

    /// A sweep pointed at a Headroom gateway scrapes the gateway's metrics by default: the error
    /// says so and names the fix, where a scrape of something else gets no such hint.
    #[test]
    fn a_gateways_metrics_are_named_as_such() {
        let body = |name: &str| {
            format!("# TYPE {name} counter\n{name}{{class=\"default\",outcome=\"stop\"}} 3\n")
        };
        let err = |name: &str| {
            let sc =
                Scrape::from_body("http://127.0.0.1:8080/metrics", body(name), 1.0, None).unwrap();
            Window::from_scrapes(
                &[
                    sc.clone(),
                    Scrape {
                        at_unix_s: 2.0,
                        ..sc
                    },
                ],
                &[],
                &WindowOptions::default(),
            )
            .unwrap_err()
            .to_string()
        };
        let e = err("headroom_gateway_requests_total");
        assert!(e.contains("this is a Headroom gateway's /metrics"), "{e}");
        assert!(e.contains("--metrics-url"), "{e}");
        let e = err("some_app_requests_total");
        assert!(
            e.contains("none of the expected inference-engine metrics"),
            "{e}"
        );
        assert!(!e.contains("gateway"), "{e}");
    }

    #[test]
    fn gauge_summary() {
        let g = GaugeSummary::of(&[1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (g.min, g.mean, g.max, g.last, g.samples),
            (1.0, 2.0, 3.0, 2.0, 3)
        );
        assert!(GaugeSummary::of(&[]).is_none());
    }
}
