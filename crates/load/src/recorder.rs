//! What a level measured: HDR histograms per class, exact counts, token sums, client usage.
//!
//! Histograms are HdrHistogram (Tene) with nanosecond values, 3 significant digits (a recorded
//! value is known to within 0.1 %), range 1 ns – 1 h (larger values saturate at 1 h); they are
//! mergeable, so shards of a distributed run combine exactly. Which requests feed which
//! histogram:
//! - **TTFT**: every request whose first content chunk arrived, whatever its outcome (a request
//!   that failed after its first token still had a real TTFT). Requests that ended *without* a
//!   first content chunk and without a server outcome (cancelled, timed out, transport) are counted
//!   in `ttft_censored`, and their ages in `ttft_censored_age`: their TTFT is at least their age,
//!   so one whose age exceeds a TTFT threshold counts above it (an overloaded server whose
//!   requests never reach their first token fails its TTFT objective instead of leaving it
//!   without samples).
//! - **ITL**: every gap between consecutive content chunks of every request (vLLM bench's
//!   per-chunk definition, see [`headroom_core::signal`]).
//! - **TPOT** and **E2E**: successful requests only (`stop`, `length`), as vLLM bench does.
//! - **Send lag**: every request that was sent.
//!
//! Token sums come from the server's `usage`; requests without usage are counted in
//! `usage_missing` and excluded from *both* requested and realised sums, so the two compare like
//! with like.
//!
//! **Serialisation**: a level is one JSON document; each histogram is the base64 text of the
//! standard HdrHistogram "V2 compressed" (deflate) encoding — the same strings HdrHistogram's log
//! format uses, readable by the Java, Go, Python and Rust implementations. Outcomes are a list of
//! `{outcome, count}`.

use crate::client::RequestRecord;
use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{
    Deserializer as HdrDeserializer, Serializer as _, V2DeflateSerializer,
};
use headroom_core::run::{ClientHealth, LatencySummary, LoadMode, TokenCounts};
use headroom_core::{LatencySignal, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Significant decimal digits kept by every histogram.
pub const SIGFIGS: u8 = 3;
/// Largest trackable value, ns (1 hour); larger values are recorded as this.
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;

/// A fresh latency histogram (ns, 1 ns – 1 h, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that HdrHistogram accepts.
    Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGFIGS)
        .unwrap_or_else(|e| unreachable!("valid histogram bounds: {e:?}"))
}

/// Errors merging or reading recordings.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// Two recordings of different class lists were merged.
    #[error("cannot merge recordings of different classes: {0:?} and {1:?}")]
    ClassMismatch(Vec<String>, Vec<String>),
    /// A histogram could not be added (different bounds).
    #[error("cannot merge histograms: {0}")]
    Histogram(String),
    /// A recording file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// File.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// Everything recorded for one request class at one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassRecording {
    /// Class name.
    pub name: String,
    /// TTFT, ns.
    #[serde(with = "hist_b64")]
    pub ttft: Histogram<u64>,
    /// ITL (every gap between content chunks), ns.
    #[serde(with = "hist_b64")]
    pub itl: Histogram<u64>,
    /// TPOT per successful request, ns.
    #[serde(with = "hist_b64")]
    pub tpot: Histogram<u64>,
    /// E2E per successful request, ns.
    #[serde(with = "hist_b64")]
    pub e2e: Histogram<u64>,
    /// Send lag (actual − intended send time), ns.
    #[serde(with = "hist_b64")]
    pub send_lag: Histogram<u64>,
    /// Engine queue time per request, ns, when the server reports it per request (vLLM
    /// `--enable-per-request-metrics`); empty otherwise.
    #[serde(with = "hist_b64", default = "new_histogram")]
    pub queue_time: Histogram<u64>,
    /// Exact request counts by outcome.
    #[serde(with = "outcome_list")]
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Requests that ended without a first content chunk and without a server outcome.
    pub ttft_censored: u64,
    /// Ages of those requests when they ended (ns): each one's TTFT is longer than its age, so
    /// one whose age already exceeds a TTFT threshold is known to be above it.
    #[serde(with = "hist_b64", default = "new_histogram")]
    pub ttft_censored_age: Histogram<u64>,
    /// Token sums over requests with usage.
    pub tokens: TokenCounts,
    /// Content chunks received.
    pub content_chunks: u64,
    /// SSE data events received (content, role-only, usage, `[DONE]`).
    pub sse_events: u64,
    /// First message seen per non-success outcome label (e.g. the server's error text).
    pub examples: BTreeMap<String, String>,
    /// Successful requests that met every per-request objective the runner was given (goodput,
    /// as DistServe defines it: TTFT, TPOT and E2E within their thresholds).
    #[serde(default)]
    pub goodput: u64,
}

impl ClassRecording {
    /// An empty recording for `name`.
    pub fn new(name: &str) -> ClassRecording {
        ClassRecording {
            name: name.to_string(),
            ttft: new_histogram(),
            itl: new_histogram(),
            tpot: new_histogram(),
            e2e: new_histogram(),
            send_lag: new_histogram(),
            queue_time: new_histogram(),
            outcomes: BTreeMap::new(),
            ttft_censored: 0,
            ttft_censored_age: new_histogram(),
            tokens: TokenCounts::default(),
            content_chunks: 0,
            sse_events: 0,
            examples: BTreeMap::new(),
            goodput: 0,
        }
    }

    /// Records one finished request (see the module docs for which histograms it feeds).
    pub fn record(&mut self, r: &RequestRecord) {
        *self.outcomes.entry(r.outcome).or_insert(0) += 1;
        self.send_lag.saturating_record(r.send_lag_ns);
        if let Some(q) = r.server_queue_ns {
            self.queue_time.saturating_record(q);
        }
        let t = &r.timing;
        match t.ttft_ns() {
            Some(ttft) => self.ttft.saturating_record(ttft),
            None if matches!(
                r.outcome,
                Outcome::ClientCancel | Outcome::Timeout | Outcome::Transport
            ) =>
            {
                self.ttft_censored += 1;
                self.ttft_censored_age.saturating_record(t.end_ns);
            }
            None => {}
        }
        for gap in t.itl_ns() {
            self.itl.saturating_record(gap);
        }
        if r.outcome.is_success() {
            self.e2e.saturating_record(t.end_ns);
            if let Some(tpot) = t.tpot_ns() {
                self.tpot.saturating_record(tpot);
            }
        }
        self.content_chunks += t.content_chunk_ns.len() as u64;
        self.sse_events += u64::from(r.sse_events);
        match (r.prompt_tokens, t.output_tokens) {
            (Some(p), Some(o)) => {
                self.tokens.prompt_requested += u64::from(r.requested_prompt_tokens);
                self.tokens.prompt_realised += u64::from(p);
                self.tokens.output_cap_requested += u64::from(r.requested_max_tokens);
                self.tokens.output_realised += u64::from(o);
            }
            _ => {
                // Only requests that reached the stream are expected to carry usage.
                if r.outcome.is_success() || r.outcome == Outcome::Error {
                    self.tokens.usage_missing += 1;
                }
            }
        }
        if !r.outcome.is_success()
            && let Some(m) = &r.message
        {
            self.examples
                .entry(r.outcome.label())
                .or_insert_with(|| m.chars().take(300).collect());
        }
    }

    /// Adds `other` into `self` (same class, another shard or another window).
    ///
    /// # Errors
    /// [`RecordingError::Histogram`] when histogram bounds differ.
    pub fn merge(&mut self, other: &ClassRecording) -> Result<(), RecordingError> {
        for (a, b) in [
            (&mut self.ttft, &other.ttft),
            (&mut self.itl, &other.itl),
            (&mut self.tpot, &other.tpot),
            (&mut self.e2e, &other.e2e),
            (&mut self.send_lag, &other.send_lag),
            (&mut self.queue_time, &other.queue_time),
            (&mut self.ttft_censored_age, &other.ttft_censored_age),
        ] {
            a.add(b)
                .map_err(|e| RecordingError::Histogram(format!("{e:?}")))?;
        }
        for (o, n) in &other.outcomes {
            *self.outcomes.entry(*o).or_insert(0) += n;
        }
        self.ttft_censored += other.ttft_censored;
        let (t, u) = (&mut self.tokens, &other.tokens);
        t.prompt_requested += u.prompt_requested;
        t.prompt_realised += u.prompt_realised;
        t.output_cap_requested += u.output_cap_requested;
        t.output_realised += u.output_realised;
        t.usage_missing += u.usage_missing;
        self.content_chunks += other.content_chunks;
        self.sse_events += other.sse_events;
        self.goodput += other.goodput;
        for (k, v) in &other.examples {
            self.examples.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Ok(())
    }

    /// Requests recorded for this class (they started in the window).
    pub fn started_in_window(&self) -> u64 {
        self.outcomes.values().sum()
    }

    /// The histogram of a client signal (`None` for `queue_time`, which only the server sees).
    pub fn histogram(&self, signal: LatencySignal) -> Option<&Histogram<u64>> {
        match signal {
            LatencySignal::Ttft => Some(&self.ttft),
            LatencySignal::Itl => Some(&self.itl),
            LatencySignal::Tpot => Some(&self.tpot),
            LatencySignal::E2e => Some(&self.e2e),
            LatencySignal::QueueTime => (!self.queue_time.is_empty()).then_some(&self.queue_time),
        }
    }

    /// The `percentile`-th percentile (0–100) of `signal` in ns: the nearest-rank value
    /// (smallest recorded value with at least `percentile` % of observations at or below it),
    /// reported as the top of its HDR bucket, so at most 0.1 % above the exact value. `None`
    /// when nothing was recorded.
    pub fn percentile_ns(&self, signal: LatencySignal, percentile: f64) -> Option<u64> {
        let h = self.histogram(signal)?;
        if h.is_empty() {
            return None;
        }
        Some(h.value_at_quantile((percentile / 100.0).clamp(0.0, 1.0)))
    }

    /// Count, mean, p50/p90/p95/p99 and max of `signal`, in seconds (zeros when empty).
    pub fn summary(&self, signal: LatencySignal) -> LatencySummary {
        self.histogram(signal)
            .map_or_else(LatencySummary::default, summarise)
    }

    /// Requests finished (all outcomes).
    pub fn requests(&self) -> u64 {
        self.outcomes.values().sum()
    }

    /// Requests counted against the error objective (server errors and aborts, HTTP errors,
    /// timeouts, transport and protocol failures; never client cancellations).
    pub fn errors(&self) -> u64 {
        self.outcomes
            .iter()
            .filter(|(o, _)| o.counts_as_error())
            .map(|(_, n)| n)
            .sum()
    }

    /// Outcome counts keyed by label (`stop`, `http_503`, …).
    pub fn outcome_labels(&self) -> BTreeMap<String, u64> {
        labels(&self.outcomes)
    }
}

/// Outcome counts keyed by label (`stop`, `http_503`, …).
fn labels(outcomes: &BTreeMap<Outcome, u64>) -> BTreeMap<String, u64> {
    outcomes.iter().map(|(o, n)| (o.label(), *n)).collect()
}

/// Summary of a histogram in seconds.
pub fn summarise(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    let s = |ns: u64| ns as f64 / 1e9;
    LatencySummary {
        count: h.len(),
        mean_s: h.mean() / 1e9,
        p50_s: s(h.value_at_quantile(0.50)),
        p90_s: s(h.value_at_quantile(0.90)),
        p95_s: s(h.value_at_quantile(0.95)),
        p99_s: s(h.value_at_quantile(0.99)),
        max_s: s(h.max()),
    }
}

/// The client's own resource use during a level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ClientUsage {
    /// CPU seconds (user + system) of the whole process during the level (`getrusage`
    /// `RUSAGE_SELF`); includes an in-process engine twin when one runs.
    pub process_cpu_s: f64,
    /// Wall seconds of the level (warm-up, window and drain).
    pub wall_s: f64,
    /// CPU cores available to the process.
    pub cores: u32,
    /// SSE events received by every request of the level (warm-up, window and drain), the
    /// denominator of CPU per chunk.
    #[serde(default)]
    pub sse_events: u64,
    /// Open loop: how late the operating system woke the pacer thread at the intended send times
    /// of the window's requests, p99, nanoseconds (0 in closed loop). The part of the send lag
    /// the host's scheduler is responsible for; the rest is the client's runtime picking up the
    /// launched request.
    #[serde(default)]
    pub pacer_late_p99_ns: u64,
    /// Open loop: the pacer thread ran at real-time priority (Linux `SCHED_FIFO` 1, granted with
    /// CAP_SYS_NICE), so the scheduler woke it on time even on a busy host.
    #[serde(default)]
    pub pacer_realtime: bool,
}

/// Counts over every request of a level — warm-up, window and drain — the span the server's
/// counters cover, so client and server can be reconciled exactly.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelTotals {
    /// Requests by outcome.
    #[serde(with = "outcome_list")]
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Σ `usage.completion_tokens` of requests that reported usage.
    pub output_tokens: u64,
    /// Σ `usage.prompt_tokens` of requests that reported usage.
    pub prompt_tokens: u64,
    /// Content chunks received by requests that ended without usage (cancelled, cut, failed).
    pub unfinished_chunks: u64,
    /// Streams that started (at least one content chunk) and were then cut or garbled
    /// (`transport`, `protocol`): the engine saw them and ends them as aborts.
    #[serde(default)]
    pub cut_streams: u64,
    /// Requests that failed in transport (`transport`: refused, reset, unreachable) in a row,
    /// counted back from the last one to end: a server that is gone ends every request so.
    #[serde(default)]
    pub transport_streak: u64,
}

impl LevelTotals {
    /// Outcome counts keyed by label (`stop`, `http_503`, …).
    pub fn outcome_labels(&self) -> BTreeMap<String, u64> {
        labels(&self.outcomes)
    }

    /// Adds one finished request.
    pub fn add(&mut self, r: &RequestRecord) {
        *self.outcomes.entry(r.outcome).or_insert(0) += 1;
        match (r.timing.output_tokens, r.prompt_tokens) {
            (Some(o), p) => {
                self.output_tokens += u64::from(o);
                self.prompt_tokens += u64::from(p.unwrap_or(0));
            }
            (None, _) => self.unfinished_chunks += r.timing.content_chunk_ns.len() as u64,
        }
        if matches!(r.outcome, Outcome::Transport | Outcome::Protocol)
            && !r.timing.content_chunk_ns.is_empty()
        {
            self.cut_streams += 1;
        }
        if r.outcome == Outcome::Transport {
            self.transport_streak += 1;
        } else {
            self.transport_streak = 0;
        }
    }

    /// Adds another shard's totals.
    pub fn merge(&mut self, o: &LevelTotals) {
        for (k, v) in &o.outcomes {
            *self.outcomes.entry(*k).or_insert(0) += v;
        }
        self.output_tokens += o.output_tokens;
        self.prompt_tokens += o.prompt_tokens;
        self.unfinished_chunks += o.unfinished_chunks;
        self.cut_streams += o.cut_streams;
        // Shards end at different times: the longer streak is the better evidence.
        self.transport_streak = self.transport_streak.max(o.transport_streak);
    }
}

/// Everything measured at one load level: one [`ClassRecording`] per class of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelRecording {
    /// Concurrency or requests per second.
    pub load: f64,
    /// Mode of `load`.
    pub mode: LoadMode,
    /// Unix time of the measurement window's start, seconds.
    pub started_unix_s: f64,
    /// Warm-up as configured, seconds.
    pub warmup_s: f64,
    /// Measurement window, seconds (requests that started inside it are recorded).
    pub window_s: f64,
    /// Time spent draining in-flight requests after the window, seconds.
    pub drain_s: f64,
    /// Requests started in the window (recorded, whatever their outcome).
    pub started: u64,
    /// Requests started during warm-up (not recorded).
    pub warmup_started: u64,
    /// Requests of the window still in flight after the drain, cancelled (`client_cancel`).
    pub cancelled_at_end: u64,
    /// True when the level was stopped from outside (Ctrl-C, sweep cancel) before its end.
    pub interrupted: bool,
    /// Per class, in plan order.
    pub classes: Vec<ClassRecording>,
    /// Client CPU and wall time.
    pub client: ClientUsage,
    /// Shards merged into this recording (1 for a single client).
    pub shards: u32,
    /// Per class (plan order), every request of the level — warm-up, window and drain — for
    /// reconciliation with the server's counters and for the error objective.
    #[serde(default)]
    pub class_totals: Vec<LevelTotals>,
    /// How the window ended: `full`, `early stop: …`, `extended: …`.
    #[serde(default)]
    pub window_note: String,
    /// Why the level's load generation broke down, when it did (the open-loop pacer thread
    /// panicked, its schedule could not be built, or requests failed on the client's own limits,
    /// [`Outcome::ClientLimit`]): the level offered less load than asked and gives no verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
    /// The longest stretch of the window in which requests were in flight but no content chunk
    /// arrived and no request ended (10 ms resolution); `None` when there was none. A long one is
    /// a stalled server (`runner::stall_warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_silence: Option<Silence>,
}

/// A stretch of a measurement window with requests in flight and neither a content chunk nor a
/// request's end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Silence {
    /// Start, seconds after the window opened.
    pub from_s: f64,
    /// Length, seconds.
    pub len_s: f64,
}

impl LevelRecording {
    /// An empty recording for classes named `names`.
    pub fn new(load: f64, mode: LoadMode, names: &[&str]) -> LevelRecording {
        LevelRecording {
            load,
            mode,
            started_unix_s: 0.0,
            warmup_s: 0.0,
            window_s: 0.0,
            drain_s: 0.0,
            started: 0,
            warmup_started: 0,
            cancelled_at_end: 0,
            interrupted: false,
            classes: names.iter().map(|n| ClassRecording::new(n)).collect(),
            client: ClientUsage::default(),
            shards: 1,
            class_totals: vec![LevelTotals::default(); names.len()],
            window_note: String::new(),
            aborted: None,
            longest_silence: None,
        }
    }

    /// [`LevelRecording::class_totals`] summed over classes.
    pub fn level_totals(&self) -> LevelTotals {
        let mut t = LevelTotals::default();
        for c in &self.class_totals {
            t.merge(c);
        }
        t
    }

    /// All classes merged into one recording named `all` (the mix).
    pub fn total(&self) -> ClassRecording {
        let mut t = ClassRecording::new("all");
        for c in &self.classes {
            // Same bounds everywhere: merging cannot fail.
            let _ = t.merge(c);
        }
        t
    }

    /// Adds another shard's recording of the same level: histograms and counts add, the window
    /// is the longest, CPU adds, loads add (each shard offers its part).
    ///
    /// # Errors
    /// [`RecordingError::ClassMismatch`] when the class lists differ.
    pub fn merge(&mut self, other: &LevelRecording) -> Result<(), RecordingError> {
        let names = |l: &LevelRecording| l.classes.iter().map(|c| c.name.clone()).collect();
        if self.classes.len() != other.classes.len()
            || self
                .classes
                .iter()
                .zip(&other.classes)
                .any(|(a, b)| a.name != b.name)
        {
            return Err(RecordingError::ClassMismatch(names(self), names(other)));
        }
        for (a, b) in self.classes.iter_mut().zip(&other.classes) {
            a.merge(b)?;
        }
        self.load += other.load;
        self.window_s = self.window_s.max(other.window_s);
        self.drain_s = self.drain_s.max(other.drain_s);
        self.started += other.started;
        self.warmup_started += other.warmup_started;
        self.cancelled_at_end += other.cancelled_at_end;
        self.interrupted |= other.interrupted;
        if self.aborted.is_none() {
            self.aborted.clone_from(&other.aborted);
        }
        // Another shard's traffic may fill one shard's silence: the shorter is the safer claim.
        self.longest_silence = match (self.longest_silence, other.longest_silence) {
            (Some(a), Some(b)) => Some(if b.len_s < a.len_s { b } else { a }),
            _ => None,
        };
        self.client.process_cpu_s += other.client.process_cpu_s;
        self.client.wall_s = self.client.wall_s.max(other.client.wall_s);
        self.client.cores += other.client.cores;
        self.client.sse_events += other.client.sse_events;
        self.client.pacer_late_p99_ns = self
            .client
            .pacer_late_p99_ns
            .max(other.client.pacer_late_p99_ns);
        self.client.pacer_realtime &= other.client.pacer_realtime;
        self.shards += other.shards;
        for (a, b) in self.class_totals.iter_mut().zip(&other.class_totals) {
            a.merge(b);
        }
        Ok(())
    }

    /// The client's health in the run-schema shape: CPU, chunks, CPU per chunk, send lag.
    pub fn client_health(&self) -> ClientHealth {
        let t = self.total();
        // CPU covers the whole level, so divide by the events of the whole level when known.
        let chunks = if self.client.sse_events > 0 {
            self.client.sse_events
        } else {
            t.sse_events
        };
        ClientHealth {
            cpu_s: self.client.process_cpu_s,
            wall_s: self.client.wall_s,
            chunks,
            cpu_per_chunk_us: if chunks > 0 {
                self.client.process_cpu_s * 1e6 / chunks as f64
            } else {
                0.0
            },
            send_lag_p99_s: if t.send_lag.is_empty() {
                0.0
            } else {
                t.send_lag.value_at_quantile(0.99) as f64 / 1e9
            },
            send_lag_max_s: t.send_lag.max() as f64 / 1e9,
            pacer_late_p99_s: self.client.pacer_late_p99_ns as f64 / 1e9,
            pacer_realtime: self.client.pacer_realtime,
        }
    }

    /// Warnings when the client may have distorted the numbers: open-loop send lag p99 above
    /// `max_send_lag_s`, or the client process busy more than `max_cpu_ratio` of one core.
    pub fn client_warnings(&self, max_send_lag_s: f64, max_cpu_ratio: f64) -> Vec<String> {
        let h = self.client_health();
        let mut w = Vec::new();
        if self.mode == LoadMode::Rate && h.send_lag_p99_s > max_send_lag_s {
            // Whose delay: the pacer woken late by the OS (a busy host), or the send itself
            // slow after an on-time wake-up (no idle connection ready, so a runtime task had to
            // connect and send; a client process too busy with its streams).
            let cause = if h.pacer_late_p99_s >= 0.5 * h.send_lag_p99_s {
                format!(
                    "the operating system woke the pacer thread up to {:.2} ms late (p99), so the host is too busy: give the client a quieter machine or its own cores{}",
                    h.pacer_late_p99_s * 1e3,
                    if self.client.pacer_realtime {
                        ""
                    } else {
                        ", or CAP_SYS_NICE (root has it) so its pacer runs at real-time priority"
                    }
                )
            } else {
                format!(
                    "the pacer woke on time (p99 {:.2} ms late) but the sends themselves were slow (the client process was too busy with its streams, or had to open new connections): give the client its own cores or a machine of its own, or offer less load per client",
                    h.pacer_late_p99_s * 1e3
                )
            };
            w.push(format!(
                "send lag p99 {:.2} ms exceeds {:.2} ms: requests left later than scheduled, so latencies include client delay; {cause}",
                h.send_lag_p99_s * 1e3,
                max_send_lag_s * 1e3
            ));
        }
        if h.wall_s > 0.0 {
            let busy = h.cpu_s / h.wall_s;
            if busy > max_cpu_ratio {
                w.push(format!(
                    "the client process used {:.0} % of a core ({:.1} CPU s over {:.1} s): its timestamps may lag the network; an in-process engine twin counts here too",
                    busy * 100.0,
                    h.cpu_s,
                    h.wall_s
                ));
            }
        }
        w
    }

    /// Writes this recording as JSON to `path` (see the module docs for the format), through
    /// [`headroom_core::atomic::write_atomic`].
    ///
    /// # Errors
    /// [`RecordingError::Io`] naming the file.
    pub fn save(&self, path: &Path) -> Result<(), RecordingError> {
        let io = |m: String| RecordingError::Io {
            path: path.display().to_string(),
            message: m,
        };
        let text = serde_json::to_vec_pretty(self).map_err(|e| io(e.to_string()))?;
        if let Some(dir) = path.parent() {
            headroom_core::atomic::create_dir_nofollow(dir).map_err(|e| io(e.to_string()))?;
        }
        // Atomic and link-safe: a run directory may sit in a shared folder.
        headroom_core::atomic::write_atomic(path, &text).map_err(|e| io(e.to_string()))
    }

    /// Reads a recording written by [`LevelRecording::save`].
    ///
    /// # Errors
    /// [`RecordingError::Io`] naming the file when it cannot be read or decoded.
    pub fn load(path: &Path) -> Result<LevelRecording, RecordingError> {
        let io = |m: String| RecordingError::Io {
            path: path.display().to_string(),
            message: m,
        };
        let bytes = std::fs::read(path).map_err(|e| io(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| io(format!("not a level recording: {e}")))
    }
}

/// Histograms as base64 of the V2 deflate encoding.
mod hist_b64 {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn encode(h: &Histogram<u64>) -> Result<String, String> {
        let mut buf = Vec::new();
        V2DeflateSerializer::new()
            .serialize(h, &mut buf)
            .map_err(|e| format!("{e:?}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(buf))
    }

    pub fn decode(s: &str) -> Result<Histogram<u64>, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| format!("histogram is not base64: {e}"))?;
        HdrDeserializer::new()
            .deserialize(&mut std::io::Cursor::new(bytes))
            .map_err(|e| format!("not an HdrHistogram V2 encoding: {e:?}"))
    }

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(h).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).map_err(serde::de::Error::custom)
    }
}

/// Encodes a histogram as base64 of the HdrHistogram V2 deflate encoding.
///
/// # Errors
/// When the encoder fails (it does not for histograms made by [`new_histogram`]).
pub fn encode_histogram(h: &Histogram<u64>) -> Result<String, String> {
    hist_b64::encode(h)
}

/// Decodes [`encode_histogram`]'s text (or any HdrHistogram V2 base64 string).
///
/// # Errors
/// When the text is not base64 or not a V2 encoding.
pub fn decode_histogram(s: &str) -> Result<Histogram<u64>, String> {
    hist_b64::decode(s)
}

mod outcome_list {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Entry {
        outcome: Outcome,
        count: u64,
    }

    pub fn serialize<S: Serializer>(m: &BTreeMap<Outcome, u64>, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<Entry> = m
            .iter()
            .map(|(o, c)| Entry {
                outcome: *o,
                count: *c,
            })
            .collect();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<Outcome, u64>, D::Error> {
        let v: Vec<Entry> = Vec::deserialize(d)?;
        let mut m = BTreeMap::new();
        for e in v {
            *m.entry(e.outcome).or_insert(0) += e.count;
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::seeded_rng;
    use headroom_core::RequestTiming;
    use rand_distr::{Distribution, LogNormal};

    const MS: u64 = 1_000_000;

    fn rec(
        outcome: Outcome,
        chunks: &[u64],
        end: u64,
        tokens: Option<(u32, u32)>,
    ) -> RequestRecord {
        RequestRecord {
            class: 0,
            start_offset_ns: 0,
            send_lag_ns: 50_000,
            timing: RequestTiming {
                content_chunk_ns: chunks.to_vec(),
                end_ns: end,
                output_tokens: tokens.map(|t| t.1),
            },
            prompt_tokens: tokens.map(|t| t.0),
            server_queue_ns: None,
            requested_prompt_tokens: 100,
            requested_max_tokens: 10,
            finish_reason: None,
            outcome,
            sse_events: chunks.len() as u32 + 2,
            message: (!outcome.is_success()).then(|| format!("why {outcome}")),
        }
    }

    #[test]
    fn record_by_hand() {
        let mut c = ClassRecording::new("a");
        // success: chunks at 100, 130, 170 ms, end 180, 3 tokens → TPOT (180−100)/2 = 40 ms
        c.record(&rec(
            Outcome::Length,
            &[100 * MS, 130 * MS, 170 * MS],
            180 * MS,
            Some((98, 3)),
        ));
        // server error after one chunk: TTFT counts, no E2E/TPOT, usage missing
        c.record(&rec(Outcome::Error, &[200 * MS], 210 * MS, None));
        // cancelled before its first token: censored TTFT
        c.record(&rec(Outcome::ClientCancel, &[], 5_000 * MS, None));
        // HTTP 503: nothing but the count
        c.record(&rec(Outcome::HttpStatus(503), &[], MS, None));

        assert_eq!(c.requests(), 4);
        assert_eq!(c.errors(), 2); // error + http_503; the cancel is the client's
        assert_eq!(c.ttft.len(), 2);
        assert_eq!(c.ttft_censored, 1);
        assert_eq!(c.itl.len(), 2); // 30 and 40 ms
        assert_eq!(c.e2e.len(), 1);
        assert!(c.e2e.equivalent(c.e2e.max(), 180 * MS));
        assert!(c.tpot.equivalent(c.tpot.max(), 40 * MS));
        assert!(
            c.itl
                .equivalent(c.percentile_ns(LatencySignal::Itl, 50.0).unwrap(), 30 * MS)
        );
        assert_eq!(
            c.tokens,
            TokenCounts {
                prompt_requested: 100,
                prompt_realised: 98,
                output_cap_requested: 10,
                output_realised: 3,
                usage_missing: 1
            }
        );
        assert_eq!(c.content_chunks, 4);
        assert_eq!(c.outcome_labels().get("http_503"), Some(&1));
        assert_eq!(
            c.examples.get("http_503").map(String::as_str),
            Some("why http_503")
        );
        assert_eq!(c.send_lag.len(), 4);
        assert_eq!(c.percentile_ns(LatencySignal::QueueTime, 50.0), None);
        assert_eq!(
            ClassRecording::new("x").percentile_ns(LatencySignal::Ttft, 50.0),
            None
        );
    }

    #[test]
    fn percentiles_match_exact_nearest_rank_within_hdr_precision() {
        let mut rng = seeded_rng(21, 0);
        let d = LogNormal::new((50.0 * MS as f64).ln(), 0.8).unwrap();
        let mut values: Vec<u64> = (0..20_011).map(|_| d.sample(&mut rng) as u64).collect();
        let mut h = new_histogram();
        for v in &values {
            h.record(*v).unwrap();
        }
        values.sort_unstable();
        let n = values.len();
        for p in [1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0] {
            // nearest rank: the ⌈p/100 · n⌉-th smallest value
            let rank = ((p / 100.0 * n as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let got = h.value_at_quantile(p / 100.0);
            assert!(
                got >= exact && (got - exact) as f64 <= exact as f64 * 1e-3 + 1.0,
                "p{p}: hdr {got} vs exact {exact}"
            );
        }
        // mean within precision too
        let mean = values.iter().map(|v| *v as f64).sum::<f64>() / n as f64;
        assert!((h.mean() / mean - 1.0).abs() < 1e-3);
        let s = summarise(&h);
        assert_eq!(s.count, n as u64);
        assert!((s.max_s - values[n - 1] as f64 / 1e9).abs() / s.max_s < 1e-3);
    }

    #[test]
    fn small_sample_percentiles_by_hand() {
        // ten values 1..=10 ms: nearest-rank p50 = 5 ms, p90 = 9 ms, p95 = p99 = 10 ms
        let mut c = ClassRecording::new("a");
        for i in 1..=10u64 {
            c.record(&rec(Outcome::Stop, &[i * MS], i * MS, Some((1, 1))));
        }
        let p = |q| c.percentile_ns(LatencySignal::Ttft, q).unwrap();
        assert!(c.ttft.equivalent(p(50.0), 5 * MS));
        assert!(c.ttft.equivalent(p(90.0), 9 * MS));
        assert!(c.ttft.equivalent(p(95.0), 10 * MS));
        assert!(c.ttft.equivalent(p(99.0), 10 * MS));
        let s = c.summary(LatencySignal::Ttft);
        assert!((s.mean_s - 0.0055).abs() < 0.0055 * 1e-3);
    }

    #[test]
    fn merge_equals_recording_everything_once() {
        let mut rng = seeded_rng(2, 2);
        let mut all = LevelRecording::new(4.0, LoadMode::Concurrency, &["a", "b"]);
        let mut s1 = LevelRecording::new(2.0, LoadMode::Concurrency, &["a", "b"]);
        let mut s2 = LevelRecording::new(2.0, LoadMode::Concurrency, &["a", "b"]);
        for i in 0..2_000u64 {
            let first = rand::RngExt::random_range(&mut rng, 1..500) * MS;
            let r = rec(
                Outcome::Stop,
                &[first, first + 7 * MS],
                first + 9 * MS,
                Some((5, 2)),
            );
            let class = (i % 2) as usize;
            all.classes[class].record(&r);
            let shard = if i % 3 == 0 { &mut s1 } else { &mut s2 };
            shard.classes[class].record(&r);
        }
        s1.started = 700;
        s2.started = 1300;
        s1.merge(&s2).unwrap();
        assert_eq!(s1.load, 4.0);
        assert_eq!(s1.shards, 2);
        assert_eq!(s1.started, 2000);
        assert_eq!(s1.classes, all.classes);
        assert_eq!(s1.total().requests(), 2000);
        let other = LevelRecording::new(1.0, LoadMode::Concurrency, &["a", "c"]);
        assert!(matches!(
            s1.merge(&other),
            Err(RecordingError::ClassMismatch(..))
        ));
    }

    #[test]
    fn save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = LevelRecording::new(8.0, LoadMode::Rate, &["claims"]);
        l.classes[0].record(&rec(
            Outcome::Length,
            &[10 * MS, 20 * MS],
            25 * MS,
            Some((3, 2)),
        ));
        l.classes[0].record(&rec(Outcome::HttpStatus(429), &[], MS, None));
        l.client = ClientUsage {
            process_cpu_s: 0.5,
            wall_s: 10.0,
            cores: 2,
            sse_events: 40,
            pacer_late_p99_ns: 120_000,
            pacer_realtime: true,
        };
        let p = dir.path().join("histograms").join("level-1.json");
        l.save(&p).unwrap();
        let back = LevelRecording::load(&p).unwrap();
        assert_eq!(back, l);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("\"code\": 429"), "{text}");
        // a histogram string decodes on its own
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let h = decode_histogram(v["classes"][0]["ttft"].as_str().unwrap()).unwrap();
        assert_eq!(h.len(), 1);
        let e = LevelRecording::load(&dir.path().join("nope.json")).unwrap_err();
        assert!(e.to_string().contains("nope.json"));
    }

    #[test]
    fn client_health_and_warnings() {
        let mut l = LevelRecording::new(500.0, LoadMode::Rate, &["a"]);
        let mut r = rec(Outcome::Stop, &[MS], 2 * MS, Some((1, 1)));
        for lag_us in 1..=100u64 {
            r.send_lag_ns = lag_us * 100_000; // 0.1 … 10 ms
            l.classes[0].record(&r);
        }
        l.client = ClientUsage {
            process_cpu_s: 9.0,
            wall_s: 10.0,
            cores: 2,
            sse_events: 0, // unknown: falls back to the window's events
            pacer_late_p99_ns: 300_000,
            pacer_realtime: false,
        };
        let h = l.client_health();
        assert_eq!(h.chunks, 300); // 3 SSE events per request
        assert!((h.cpu_per_chunk_us - 30_000.0).abs() < 1e-6);
        assert!((h.send_lag_p99_s - 0.0099).abs() < 0.0099 * 1e-3);
        let w = l.client_warnings(0.001, 0.8);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("send lag p99 9.90 ms"));
        // The pacer woke 0.3 ms late against 9.9 ms of lag: the client's runtime is to blame.
        assert!(
            w[0].contains("the pacer woke on time (p99 0.30 ms late)"),
            "{}",
            w[0]
        );
        assert!(w[1].contains("90 % of a core"));
        // Woken 6 ms late (≥ half the lag): the host's scheduler is to blame.
        l.client.pacer_late_p99_ns = 6_000_000;
        let w = l.client_warnings(0.001, 0.8);
        assert!(
            w[0].contains(
                "woke the pacer thread up to 6.00 ms late (p99), so the host is too busy"
            ),
            "{}",
            w[0]
        );
        assert!((l.client_health().pacer_late_p99_s - 0.006).abs() < 1e-12);
    }
}
