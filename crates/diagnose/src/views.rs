//! Two views of one request class's objectives: a Headroom gateway's and the engine's.
//!
//! The gateway measures what users see, from the moment it accepted the request (its admission
//! queue and its own overhead included), per `class`; the engine measures from its own arrival,
//! and its series carry no class. So objectives are judged on the gateway's per-class histograms
//! and outcomes, and explained by the engine's phases, whose figures and findings describe every
//! class together. Each objective is judged on both; where they disagree the stricter verdict
//! holds ([`Verdict::combine`]: a FAIL in either fails, else an undecided view leaves it
//! INCONCLUSIVE), and the reason names both. For TTFT and E2E the gap between the views is split
//! into the gateway's admission queue, its own overhead and the rest (network, the proxy's
//! streaming, requests the engine served for other classes):
//! `other = gateway − engine − gateway queue − gateway overhead`, at the objective's percentile
//! (each histogram's own quantile; percentiles do not add, so that remainder is approximate) and
//! for the means (which add, so it is exact up to the two populations' difference).

use headroom_core::objective::{ObjectiveId, Source};
use headroom_core::run::ObjectiveResult;
use headroom_core::{LatencySignal, Objective, SloSpec, Verdict};
use headroom_signals::{Signal, Window};
use serde::Serialize;

use crate::{Assessment, ClientView, Setting, assess_with, bounds, latency_objective_on};

/// One class's series from a Headroom gateway over the same span as the engine's window.
#[derive(Debug, Clone, Copy)]
pub struct GatewayView<'a> {
    /// The gateway's `class` label value; the SLO class judged.
    pub class: &'a str,
    /// The class's series: TTFT, ITL, TPOT and E2E histograms under the engine's signals
    /// ([`Signal::Ttft`], …), the admission wait ([`Signal::GatewayQueueTime`]), the gateway's
    /// own overhead ([`Signal::GatewayOverhead`]) and finished requests keyed by the gateway's
    /// `outcome` ([`Signal::RequestsFinished`]).
    pub window: &'a Window,
    /// Outcomes that burn the error budget (`upstream_error`, `timeout`, `rejected`).
    pub bad_outcomes: &'a [&'a str],
    /// Outcomes that are no event of the service (`client_cancel`, `invalid_request`): neither
    /// failures nor requests of the error ratio.
    pub not_service_outcomes: &'a [&'a str],
}

/// One objective in both views.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectiveViews {
    /// Objective id (`ttft_p95`).
    pub id: ObjectiveId,
    /// Human form (`TTFT p95 < 300 ms`).
    pub description: String,
    /// The gateway's judgement of the class; `None` where the gateway measures no such thing
    /// (queue time: only the engine sees its own queue).
    pub gateway: Option<ObjectiveResult>,
    /// The engine's judgement, over every class together.
    pub engine: ObjectiveResult,
    /// The verdict that holds: the stricter of the two.
    pub verdict: Verdict,
    /// Whether both views give the same verdict (true with one view).
    pub agree: bool,
    /// Where the gateway's latency goes beyond the engine's (TTFT and E2E objectives).
    pub gap: Option<Gap>,
}

/// The gateway's latency split into the engine's, the gateway's admission queue, its overhead
/// and the rest, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    /// The objective's percentile (95 for p95).
    pub percentile: f64,
    /// Each histogram's quantile at the percentile (the remainder is approximate).
    pub at_percentile: GapFigures,
    /// Each histogram's mean, `_sum / _count` (the remainder is exact for the means).
    pub mean: GapFigures,
}

/// One row of a [`Gap`], seconds; `None` where a histogram is missing or empty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GapFigures {
    /// The gateway's TTFT (or E2E) of the class.
    pub gateway_s: Option<f64>,
    /// The engine's, every class together.
    pub engine_s: Option<f64>,
    /// The gateway's admission wait (`headroom_gateway_queue_seconds`).
    pub gateway_queue_s: Option<f64>,
    /// The gateway's own overhead (`headroom_gateway_overhead_seconds`).
    pub gateway_overhead_s: Option<f64>,
    /// `gateway − engine − queue − overhead`: network, streaming through the proxy, other.
    pub other_s: Option<f64>,
}

/// Judges the class of `gateway` against `slo` on both views and assesses the engine's window
/// with the verdicts that hold ([`ObjectiveViews::verdict`]) as the record, so that findings are
/// ranked by what they explain of those. The result's `views` has one entry per objective, and
/// its first notes say what each view covers and, per disagreement, where the gap lies.
pub fn assess_views(
    engine: &Window,
    gateway: &GatewayView<'_>,
    slo: &SloSpec,
    setting: &Setting,
) -> Assessment {
    let alone = assess_with(engine, None, slo, setting);
    let mut views = Vec::new();
    for o in &slo.objectives {
        let Some(e) = alone.objectives.iter().find(|r| r.id == o.id()) else {
            continue;
        };
        let g = judge_gateway(gateway, o);
        let verdict = match &g {
            Some(g) => Verdict::combine([g.verdict, e.verdict]),
            None => e.verdict,
        };
        let gap = match o {
            Objective::Latency {
                signal: s @ (LatencySignal::Ttft | LatencySignal::E2e),
                percentile,
                ..
            } => Some(gap(
                engine,
                gateway.window,
                Signal::of_latency(*s),
                *percentile,
            )),
            _ => None,
        };
        views.push(ObjectiveViews {
            id: o.id(),
            description: o.describe(),
            agree: g.as_ref().is_none_or(|g| g.verdict == e.verdict),
            gateway: g,
            engine: e.clone(),
            verdict,
            gap,
        });
    }
    let record = ClientView {
        objectives: views.iter().map(|v| holding(v, gateway.class)).collect(),
        ..ClientView::default()
    };
    let mut a = assess_with(engine, Some(&record), slo, setting);
    let mut first = vec![format!(
        "two views: objectives are judged on the gateway's class `{}` (what users see, from the gateway's acceptance of the request) and on the engine's series, which carry no class: the engine's figures, steps and findings describe every class together",
        gateway.class
    )];
    first.extend(views.iter().filter(|v| !v.agree).map(disagreement));
    a.notes.splice(0..0, first);
    a.views = views;
    a
}

/// The gateway's judgement of objective `o` for its class; `None` for a queue-time objective.
fn judge_gateway(g: &GatewayView<'_>, o: &Objective) -> Option<ObjectiveResult> {
    match o {
        Objective::Latency {
            signal: LatencySignal::QueueTime,
            ..
        } => None,
        Objective::Latency {
            signal,
            percentile,
            threshold_s,
        } => Some(latency_objective_on(
            g.window,
            o,
            *signal,
            *percentile,
            *threshold_s,
            Source::Gateway,
        )),
        Objective::ErrorRate { max_ratio } => {
            Some(gateway_errors(g, o, *max_ratio).from_source(Source::Gateway))
        }
    }
}

/// The error objective on the gateway's outcomes: bad ones over every outcome that is an event
/// of the service, with the sweep's rule ([`ObjectiveResult::error_ratio`]).
fn gateway_errors(g: &GatewayView<'_>, o: &Objective, max_ratio: f64) -> ObjectiveResult {
    let source = g
        .window
        .sources
        .get(&Signal::RequestsFinished)
        .cloned()
        .unwrap_or_else(|| "headroom_gateway_requests_total".to_owned());
    let Some(by) = g.window.counters.get(&Signal::RequestsFinished) else {
        let why = match g.window.rejection(Signal::RequestsFinished) {
            Some(r) => format!("refused: {r}"),
            None => format!("gateway: no {source} series for the class"),
        };
        return ObjectiveResult::new(o, max_ratio, None, Verdict::Inconclusive, 0, why);
    };
    let count = |keep: &dyn Fn(&str) -> bool| -> f64 {
        by.iter().filter(|(k, _)| keep(k)).map(|(_, v)| v).sum()
    };
    let bad = count(&|k| g.bad_outcomes.contains(&k));
    let n = count(&|k| !g.not_service_outcomes.contains(&k));
    let named: Vec<String> = by
        .iter()
        .filter(|(k, v)| g.bad_outcomes.contains(&k.as_str()) && **v > 0.0)
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect();
    let (bad, n) = (bad.round() as u64, n.round() as u64);
    ObjectiveResult::error_ratio(
        o,
        bad,
        n,
        max_ratio,
        true,
        format!(
            "gateway ({source}): {bad} failed ({}) of {n} requests ({} not counted)",
            if named.is_empty() {
                "none".to_owned()
            } else {
                named.join(", ")
            },
            g.not_service_outcomes.join(", ")
        ),
    )
}

/// The row that holds for `v`: the view whose verdict is the combined one (the gateway's when
/// both are), its reason naming both views.
fn holding(v: &ObjectiveViews, class: &str) -> ObjectiveResult {
    let Some(g) = &v.gateway else {
        let mut r = v.engine.clone();
        r.reason = format!(
            "engine only, every class together (the gateway measures no such thing): {}",
            r.reason
        );
        return r;
    };
    let e = &v.engine;
    let mut r = if g.verdict == v.verdict { g } else { e }.clone();
    r.reason = if v.agree {
        format!(
            "gateway and engine agree; {}; engine, every class together: {}",
            g.reason,
            e.observed
                .map(|x| format!("observed {x:.4}"))
                .unwrap_or_else(|| "no figure".into())
        )
    } else {
        format!(
            "the two views disagree, the stricter holds: the gateway (class `{class}`) says {}, the engine (every class together) {}; {}; engine: {}",
            g.verdict.as_str(),
            e.verdict.as_str(),
            g.reason,
            e.reason
        )
    };
    r
}

/// A note on one disagreement: both figures and, for TTFT and E2E, where the gap lies.
fn disagreement(v: &ObjectiveViews) -> String {
    let fig = |r: &ObjectiveResult| {
        format!(
            "{} ({})",
            r.verdict.as_str(),
            r.observed
                .map(|x| format!("{x:.4}"))
                .unwrap_or_else(|| "no figure".into())
        )
    };
    let g = v.gateway.as_ref().map(fig).unwrap_or_default();
    let mut s = format!(
        "{}: the gateway says {g}, the engine {}; {} holds",
        v.description,
        fig(&v.engine),
        v.verdict.as_str()
    );
    if let Some(gap) = &v.gap {
        s.push_str(&format!("; {}", gap.sentence()));
    }
    s
}

impl Gap {
    /// The gap in a clause, naming its largest part: `at p95 the gateway's admission queue
    /// holds 3.0 s of the 3.1 s, the engine 0.063 s, the gateway's overhead 0.0004 s, network
    /// and other 0.04 s`.
    pub fn sentence(&self) -> String {
        let f = &self.at_percentile;
        let s = |x: Option<f64>| x.map_or_else(|| "?".to_owned(), |x| format!("{x:.4} s"));
        let parts = [
            ("the gateway's admission queue", f.gateway_queue_s),
            ("the engine (every class)", f.engine_s),
            ("the gateway's own overhead", f.gateway_overhead_s),
            ("network and other", f.other_s),
        ];
        let largest = parts
            .iter()
            .filter_map(|(n, x)| x.map(|x| (*n, x)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, _)| n)
            .unwrap_or("nothing measured");
        format!(
            "at p{} the gateway measured {}: {} {}, {} {}, {} {}, {} {} (largest: {largest}; percentiles do not add, the means do: gateway {}, engine {}, queue {}, overhead {}, other {})",
            self.percentile,
            s(f.gateway_s),
            parts[0].0,
            s(parts[0].1),
            parts[1].0,
            s(parts[1].1),
            parts[2].0,
            s(parts[2].1),
            parts[3].0,
            s(parts[3].1),
            s(self.mean.gateway_s),
            s(self.mean.engine_s),
            s(self.mean.gateway_queue_s),
            s(self.mean.gateway_overhead_s),
            s(self.mean.other_s),
        )
    }
}

/// The gap for `sig` (TTFT or E2E) between the gateway's window `g` and the engine's `e`.
fn gap(e: &Window, g: &Window, sig: Signal, percentile: f64) -> Gap {
    let q = |w: &Window, s: Signal| {
        bounds::quantile(w, s, percentile / 100.0)
            .map(|b| b.q.reported())
            .filter(|_| w.histogram(s).is_some_and(|h| h.observations() > 0.0))
    };
    let mean = |w: &Window, s: Signal| w.histogram(s).and_then(|h| h.mean());
    let row = |f: &dyn Fn(&Window, Signal) -> Option<f64>| {
        let (gw, en) = (f(g, sig), f(e, sig));
        let (qu, ov) = (
            f(g, Signal::GatewayQueueTime),
            f(g, Signal::GatewayOverhead),
        );
        GapFigures {
            gateway_s: gw,
            engine_s: en,
            gateway_queue_s: qu,
            gateway_overhead_s: ov,
            other_s: match (gw, en, qu, ov) {
                (Some(a), Some(b), Some(c), Some(d)) => Some(a - b - c - d),
                _ => None,
            },
        }
    };
    Gap {
        percentile,
        at_percentile: row(&q),
        mean: row(&mean),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_signals::{Engine, Histogram};

    /// A window of `engine` with TTFT `n` observations: `fast` of them in `[0, 0.1]`, the rest
    /// in `(0.3, 5]`; bounds 0.1, 0.3 (a threshold edge), 5, +Inf.
    fn window(engine: Engine, n: f64, fast: f64) -> Window {
        let mut w = Window::from_snapshots(&[], &[], false);
        w.engine = engine;
        let h = Histogram::from_pairs(
            [(0.1, fast), (0.3, fast), (5.0, n), (f64::INFINITY, n)],
            fast * 0.05 + (n - fast) * 2.0,
            n,
        );
        w.histograms.insert(Signal::Ttft, h);
        w.sources.insert(Signal::Ttft, "ttft".into());
        w
    }

    fn slo() -> SloSpec {
        SloSpec {
            objectives: vec![
                Objective::Latency {
                    signal: LatencySignal::Ttft,
                    percentile: 95.0,
                    threshold_s: 0.3,
                },
                Objective::Latency {
                    signal: LatencySignal::QueueTime,
                    percentile: 95.0,
                    threshold_s: 0.1,
                },
            ],
        }
    }

    fn views(engine: &Window, gateway: &Window) -> Assessment {
        let g = GatewayView {
            class: "long",
            window: gateway,
            bad_outcomes: &["rejected"],
            not_service_outcomes: &["client_cancel"],
        };
        assess_views(engine, &g, &slo(), &Setting::default())
    }

    /// 40 of 40 fast at the engine (PASS) and 4 of 40 at the gateway (FAIL): FAIL holds, the
    /// two views disagree and the reason says so; the other way round FAIL holds too, from the
    /// engine. Queue time is the engine's alone.
    #[test]
    fn the_stricter_view_holds_and_the_disagreement_is_said() {
        let fast = window(Engine::Vllm, 40.0, 40.0);
        let slow = window(Engine::Unknown, 40.0, 4.0);
        let a = views(&fast, &slow);
        let v = &a.views[0];
        assert_eq!(v.gateway.as_ref().map(|g| g.verdict), Some(Verdict::Fail));
        assert_eq!(
            (v.engine.verdict, v.verdict, v.agree),
            (Verdict::Pass, Verdict::Fail, false)
        );
        let held = a.objectives.iter().find(|o| o.id == "ttft_p95").unwrap();
        assert_eq!(held.verdict, Verdict::Fail);
        assert!(
            held.reason.contains("the two views disagree"),
            "{}",
            held.reason
        );
        assert!(held.reason.starts_with("the two views"), "{}", held.reason);
        assert!(a.notes[0].contains("every class together"), "{:?}", a.notes);
        assert!(
            a.notes[1].contains("the gateway says FAIL"),
            "{:?}",
            a.notes
        );
        // queue time: no gateway view
        assert!(a.views[1].gateway.is_none() && a.views[1].agree);

        let mut slow_engine = window(Engine::Vllm, 40.0, 4.0);
        slow_engine.engine = Engine::Vllm;
        let mut fast_gateway = fast.clone();
        fast_gateway.engine = Engine::Unknown;
        let b = views(&slow_engine, &fast_gateway);
        assert_eq!(
            (b.views[0].verdict, b.views[0].agree),
            (Verdict::Fail, false)
        );
        let held = b.objectives.iter().find(|o| o.id == "ttft_p95").unwrap();
        assert!(
            held.reason
                .contains("the engine (every class together) FAIL"),
            "{}",
            held.reason
        );
        assert_eq!(b.verdict, Verdict::Fail);
    }
}
