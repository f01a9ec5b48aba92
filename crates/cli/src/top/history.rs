//! The scrapes `headroom top` keeps, per class, to compute sliding windows from.
//!
//! Each scrape is reduced at once to one canonical [`EngineSnapshot`] per class (vLLM and the
//! other engines through `headroom-signals`' adapter, one class per `model_name`; a Headroom
//! gateway's `headroom_gateway_*` series per `class` label, read here into the same shape), so
//! the window arithmetic (bucket deltas, counter resets, gauge summaries) is the one the sweep
//! and `diagnose` use ([`Window::from_snapshots`]). A window of `W` seconds runs from the newest
//! snapshot at or before `now − W` (the oldest kept, until there is one) to the newest.
//!
//! Memory is bounded: snapshots older than the longest window are dropped, and those older than
//! [`DENSE_S`] are thinned to one per [`SPARSE_STEP_S`] (the windows' start points need no finer
//! grain than that beside a window of minutes).

use std::collections::BTreeMap;

use headroom_core::LatencySignal;
use headroom_signals::adapter::{
    DcgmSnapshot, EngineSnapshot, SeriesValue, dcgm_snapshot, engine_snapshot, instances,
    series_histograms,
};
use headroom_signals::exposition::Exposition;
use headroom_signals::quality::check_histogram;
use headroom_signals::window::GpuWindow;
use headroom_signals::{Engine, Scrape, Selection, Signal, Window, WindowOptions};
use headroom_slo::catalogue::{
    GATEWAY_CLASS_LABEL, GATEWAY_IN_FLIGHT, GATEWAY_OVERHEAD, GATEWAY_QUEUE, GATEWAY_QUEUED,
    GATEWAY_REQUESTS, gateway_histogram,
};

use super::model::SourceKind;

/// Snapshots younger than this (s) are all kept.
pub const DENSE_S: f64 = 90.0;
/// Older snapshots are kept at most one per this many seconds.
pub const SPARSE_STEP_S: f64 = 5.0;

/// The gateway's gauges and what they stand for in the engine's shape: sequences holding
/// admission slots (running) and requests queued for one (waiting).
const GATEWAY_GAUGES: [(&str, Signal); 2] = [
    (GATEWAY_IN_FLIGHT, Signal::Running),
    (GATEWAY_QUEUED, Signal::Waiting),
];

/// Scrapes reduced to snapshots, per class, time-ordered.
#[derive(Debug, Default)]
pub struct History {
    max_age_s: f64,
    classes: BTreeMap<String, (SourceKind, Vec<(f64, EngineSnapshot)>)>,
    dcgm: Vec<(f64, DcgmSnapshot)>,
}

impl History {
    /// Keeps enough for windows up to `max_window_s` seconds.
    pub fn new(max_window_s: f64) -> History {
        History {
            max_age_s: max_window_s,
            ..History::default()
        }
    }

    /// Adds one scrape of the engine or gateway.
    ///
    /// # Errors
    /// The scrape holds neither engine metrics nor a Headroom gateway's: the message names the
    /// URL and what was looked for (the window's own message).
    pub fn ingest(&mut self, s: &Scrape) -> Result<(), String> {
        let t = s.at_unix_s;
        let per_class = if is_gateway(&s.exposition) {
            gateway_classes(&s.exposition)
                .into_iter()
                .map(|c| {
                    let snap = gateway_snapshot(&s.exposition, &c);
                    (c, SourceKind::Gateway, snap)
                })
                .collect::<Vec<_>>()
        } else {
            let all = engine_snapshot(&s.exposition, None, &Selection::default());
            if all.sources.is_empty() && all.rejected.is_empty() {
                return Err(Window::from_scrapes(
                    std::slice::from_ref(s),
                    &[],
                    &WindowOptions::default(),
                )
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| format!("{}: no engine metrics", s.source)));
            }
            let mut names: Vec<String> = instances(&s.exposition)
                .into_iter()
                .filter_map(|i| i.model_name)
                .collect();
            names.dedup();
            if names.is_empty() {
                vec![("all".to_owned(), SourceKind::Engine, all)]
            } else {
                names
                    .into_iter()
                    .map(|m| {
                        let sel = Selection {
                            model_name: Some(m.clone()),
                            engine: None,
                        };
                        let snap = engine_snapshot(&s.exposition, Some(all.engine), &sel);
                        (m, SourceKind::Engine, snap)
                    })
                    .collect()
            }
        };
        for (class, kind, snap) in per_class {
            let (k, q) = self
                .classes
                .entry(class)
                .or_insert_with(|| (kind, Vec::new()));
            *k = kind;
            push(q, t, snap, self.max_age_s);
        }
        Ok(())
    }

    /// Adds one dcgm-exporter scrape.
    pub fn ingest_dcgm(&mut self, s: &Scrape) {
        push(
            &mut self.dcgm,
            s.at_unix_s,
            dcgm_snapshot(&s.exposition),
            self.max_age_s,
        );
    }

    /// Each class's window of `window_s` seconds ending at its newest snapshot; classes with a
    /// single snapshot so far are left out (one scrape spans no time: its counters would count
    /// since the server started).
    pub fn windows(&self, window_s: f64) -> Vec<(String, SourceKind, Window)> {
        self.classes
            .iter()
            .filter_map(|(c, (kind, q))| {
                let snaps = span(q, window_s);
                (snaps.len() >= 2)
                    .then(|| (c.clone(), *kind, Window::from_snapshots(snaps, &[], false)))
            })
            .collect()
    }

    /// The GPUs over the window (empty without two dcgm scrapes).
    pub fn gpus(&self, window_s: f64) -> Vec<GpuWindow> {
        let d = span(&self.dcgm, window_s);
        if d.len() < 2 {
            return Vec::new();
        }
        Window::from_snapshots(&[], d, false).gpus
    }

    /// Class names seen so far.
    #[cfg(test)]
    pub fn class_names(&self) -> Vec<String> {
        self.classes.keys().cloned().collect()
    }
}

/// Appends `snap`, drops what no window needs and thins the old part (see the module doc).
/// A few hundred entries at most, so removing from the front is cheap.
fn push<T>(q: &mut Vec<(f64, T)>, t: f64, snap: T, max_age_s: f64) {
    if q.last().is_some_and(|(last, _)| t < *last) {
        q.clear(); // the clock went back: the old snapshots are no longer in time order
    }
    q.push((t, snap));
    // keep one snapshot at or before `t − max_age` as the longest window's start
    let old = q
        .iter()
        .skip(1)
        .take_while(|(u, _)| *u <= t - max_age_s)
        .count();
    q.drain(..old);
    let mut i = 1;
    while i + 1 < q.len() {
        if q[i].0 < t - DENSE_S && q[i + 1].0 - q[i - 1].0 < SPARSE_STEP_S {
            q.remove(i);
        } else {
            i += 1;
        }
    }
}

/// The snapshots of the last `window_s` seconds, from the newest at or before the start.
fn span<T>(q: &[(f64, T)], window_s: f64) -> &[(f64, T)] {
    let Some(&(end, _)) = q.last() else {
        return &[];
    };
    let start = q
        .iter()
        .rposition(|(t, _)| *t <= end - window_s)
        .unwrap_or(0);
    &q[start..]
}

pub(crate) fn is_gateway(exp: &Exposition) -> bool {
    exp.families
        .iter()
        .any(|f| f.name.starts_with("headroom_gateway_"))
}

/// The gateway's classes: every `class` label of its request counter (the gateway exports each
/// class's counters at zero from start).
pub(crate) fn gateway_classes(exp: &Exposition) -> Vec<String> {
    let mut out: Vec<String> = exp
        .samples(GATEWAY_REQUESTS)
        .filter_map(|s| s.labels.get(GATEWAY_CLASS_LABEL).map(str::to_owned))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The gateway's histograms with the signal each stands for: TTFT, ITL, TPOT and E2E under the
/// engine's names, its admission wait and its own overhead under their own.
pub(crate) fn gateway_histograms() -> Vec<(&'static str, Signal)> {
    [
        LatencySignal::Ttft,
        LatencySignal::Itl,
        LatencySignal::Tpot,
        LatencySignal::E2e,
    ]
    .into_iter()
    .filter_map(|ls| gateway_histogram(ls).map(|spec| (spec.metric, Signal::of_latency(ls))))
    .chain([
        (GATEWAY_QUEUE, Signal::GatewayQueueTime),
        (GATEWAY_OVERHEAD, Signal::GatewayOverhead),
    ])
    .collect()
}

/// One gateway class in the engine's shape: its TTFT, ITL, TPOT and E2E histograms (every
/// tenant's series, summed by the window), its admission wait and own overhead
/// ([`Signal::GatewayQueueTime`], [`Signal::GatewayOverhead`]), its outcomes as
/// `RequestsFinished` keyed by `outcome`, and its admission gauges. A corrupt histogram series
/// is left out with the signal marked rejected, as the adapter does for an engine.
pub(crate) fn gateway_snapshot(exp: &Exposition, class: &str) -> EngineSnapshot {
    let mine = |l: &headroom_signals::exposition::Labels| l.get(GATEWAY_CLASS_LABEL) == Some(class);
    let mut snap = EngineSnapshot {
        engine: Engine::Unknown,
        version_hint: None,
        values: BTreeMap::new(),
        histograms: BTreeMap::new(),
        sources: BTreeMap::new(),
        missing: BTreeMap::new(),
        kv_pool: Default::default(),
        process_start_unix_s: None,
        rejected: BTreeMap::new(),
        warnings: Vec::new(),
    };
    for (metric, sig) in gateway_histograms() {
        let (by, count_given) = series_histograms(exp, metric, mine);
        if by.is_empty() {
            continue;
        }
        if by.iter().any(|(id, h)| {
            check_histogram(&h.buckets, h.sum, h.count, count_given.contains(id)).is_some()
        }) {
            snap.rejected.insert(sig, metric.to_owned());
            continue;
        }
        snap.sources.insert(sig, metric.to_owned());
        snap.histograms.insert(sig, by.into_values().collect());
    }
    let mut values = |name: &str, sig: Signal, key: Option<&str>| {
        let v: Vec<SeriesValue> = exp
            .samples(name)
            .filter(|s| mine(&s.labels))
            .map(|s| SeriesValue {
                series: s.labels.clone(),
                key: key
                    .and_then(|k| s.labels.get(k))
                    .unwrap_or_default()
                    .to_owned(),
                value: s.value,
            })
            .collect();
        if !v.is_empty() {
            snap.sources.insert(sig, name.to_owned());
            snap.values.insert(sig, v);
        }
    };
    values(GATEWAY_REQUESTS, Signal::RequestsFinished, Some("outcome"));
    for (name, sig) in GATEWAY_GAUGES {
        values(name, sig, None);
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(body: &str, t: f64) -> Scrape {
        Scrape::from_body("http://gw/metrics", body.to_owned(), t, None).unwrap()
    }

    fn gateway(chat_fast: u32, chat_slow: u32, rejected: u32, cancel: u32) -> String {
        let n = chat_fast + chat_slow;
        format!(
            "# TYPE headroom_gateway_ttft_seconds histogram
headroom_gateway_ttft_seconds_bucket{{class=\"chat\",tenant=\"other\",le=\"0.3\"}} {chat_fast}
headroom_gateway_ttft_seconds_bucket{{class=\"chat\",tenant=\"other\",le=\"+Inf\"}} {n}
headroom_gateway_ttft_seconds_sum{{class=\"chat\",tenant=\"other\"}} {sum}
headroom_gateway_ttft_seconds_count{{class=\"chat\",tenant=\"other\"}} {n}
headroom_gateway_ttft_seconds_bucket{{class=\"rag\",tenant=\"other\",le=\"0.3\"}} 0
headroom_gateway_ttft_seconds_bucket{{class=\"rag\",tenant=\"other\",le=\"+Inf\"}} 0
headroom_gateway_ttft_seconds_sum{{class=\"rag\",tenant=\"other\"}} 0
headroom_gateway_ttft_seconds_count{{class=\"rag\",tenant=\"other\"}} 0
# TYPE headroom_gateway_requests counter
headroom_gateway_requests_total{{class=\"chat\",tenant=\"other\",outcome=\"stop\"}} {n}
headroom_gateway_requests_total{{class=\"chat\",tenant=\"other\",outcome=\"rejected\"}} {rejected}
headroom_gateway_requests_total{{class=\"chat\",tenant=\"other\",outcome=\"client_cancel\"}} {cancel}
headroom_gateway_requests_total{{class=\"rag\",tenant=\"other\",outcome=\"stop\"}} 0
# TYPE headroom_gateway_queued gauge
headroom_gateway_queued{{class=\"chat\"}} 2
headroom_gateway_queued{{class=\"rag\"}} 0
",
            sum = f64::from(chat_fast) * 0.1 + f64::from(chat_slow) * 1.0
        )
    }

    /// A gateway's classes become classes; its outcomes count as the catalogue says (rejected is
    /// bad, client_cancel is no event of the service); queue time is the engine's alone.
    #[test]
    fn gateway_series_per_class() {
        use super::super::model::{ClassView, Status};
        use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile};
        let mut h = History::new(60.0);
        h.ingest(&scrape(&gateway(10, 0, 0, 0), 0.0)).unwrap();
        assert!(h.windows(60.0).is_empty(), "one scrape spans no time");
        h.ingest(&scrape(&gateway(48, 2, 1, 7), 30.0)).unwrap();
        assert_eq!(h.class_names(), ["chat", "rag"]);
        let ws = h.windows(60.0);
        let (name, kind, w) = &ws[0];
        assert_eq!((name.as_str(), *kind), ("chat", SourceKind::Gateway));
        let slo = SloFile::parse(DEFAULT_SLO_YAML, std::path::Path::new("s"))
            .unwrap()
            .spec_for("chat");
        let v = ClassView::from_window(name, *kind, w, &slo);
        // 40 new: 38 fast, 2 slow → 5 % above 0.3 s, exactly the budget
        let ttft = &v.objectives[0];
        assert_eq!(ttft.samples, 40);
        assert!((ttft.bad_share.unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(ttft.status, Status::Ok);
        // 40 stop + 1 rejected (7 client_cancel excluded): 1 of 41
        let err = v.objectives.iter().find(|o| o.id == "error_rate").unwrap();
        assert_eq!(err.samples, 41);
        assert!((err.value.unwrap() - 1.0 / 41.0).abs() < 1e-12);
        let q = v
            .objectives
            .iter()
            .find(|o| o.id == "queue_time_p95")
            .unwrap();
        assert_eq!(q.status, Status::NoData);
        assert!(q.note.as_deref().unwrap().contains("engine only"));
        assert_eq!(v.waiting, Some(2.0));
    }

    #[test]
    fn not_metrics_of_an_engine_or_gateway_is_an_error_naming_the_url() {
        let mut h = History::new(60.0);
        let e = h
            .ingest(&scrape("# TYPE foo counter\nfoo_total 1\n", 0.0))
            .unwrap_err();
        assert!(e.contains("http://gw/metrics"), "{e}");
    }

    /// Windows start at the newest snapshot at or before their start; old snapshots are dropped
    /// past the longest window and thinned past the dense span.
    #[test]
    fn windows_slide_and_memory_is_bounded() {
        let mut q: Vec<(f64, u32)> = Vec::new();
        for i in 0..=600 {
            push(&mut q, f64::from(i), i, 300.0);
        }
        assert!(q[0].0 <= 300.0 && q[1].0 > 300.0, "{:?}", q.first());
        // dense for the last 90 s; before, every two consecutive gaps add up to 5 s or more
        assert!(q.len() <= 91 + 84 + 2, "{}", q.len());
        let s = span(&q, 60.0);
        assert_eq!(s.first().unwrap().0, 540.0);
        assert_eq!(s.last().unwrap().0, 600.0);
        let s = span(&q, 200.0);
        assert!(s.first().unwrap().0 <= 400.0 && s.first().unwrap().0 > 390.0);
    }
}
