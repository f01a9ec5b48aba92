//! Quantiles of the server's latency histograms, bounded by what the rest of the window allows:
//! the histogram's own `_sum` ([`Histogram::quantile_bounded`]) and the phases a latency is part
//! of. Per request, queue time and prefill time are parts of TTFT, and TTFT, decode and
//! inference time are parts of E2E, so a quantile of a part cannot exceed the same quantile of
//! the whole (the bucket bracket of the whole, bounded the same way). vLLM observes the parts
//! when a request finishes and TTFT at its first token, so over a short window the populations
//! can differ by the requests in flight at its edges; the bound is applied to the bracket's upper
//! edge only, never below its lower edge.

use headroom_signals::{Histogram, Quantile, Signal, Window};

/// The phases whose same quantile bounds `sig`'s from above (the wholes it is part of).
fn wholes(sig: Signal) -> &'static [Signal] {
    match sig {
        // A gateway's admission wait and own overhead are parts of the TTFT it measures.
        Signal::QueueTime
        | Signal::PrefillTime
        | Signal::GatewayQueueTime
        | Signal::GatewayOverhead => &[Signal::Ttft, Signal::E2e],
        Signal::Ttft | Signal::DecodeTime | Signal::InferenceTime => &[Signal::E2e],
        _ => &[],
    }
}

/// A bounded quantile and, when a bound lowered its upper edge, what did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bounded {
    /// The quantile, `upper` (and `value`) lowered by the bounds.
    pub q: Quantile,
    /// The whole whose quantile lowered it below the `_sum` bound, if one did.
    pub by_phase: Option<Signal>,
}

/// The `q`-quantile of `sig`'s histogram in `w`, bounded by its `_sum` and by the wholes it is
/// part of; `None` where [`Histogram::quantile`] is.
pub(crate) fn quantile(w: &Window, sig: Signal, q: f64) -> Option<Bounded> {
    let own = w.histogram(sig)?.quantile_bounded(q)?;
    let mut out = Bounded {
        q: own,
        by_phase: None,
    };
    for whole in wholes(sig) {
        let Some(cap) = w
            .histogram(*whole)
            .and_then(|h: &Histogram| h.quantile_bounded(q))
            .map(|x| x.upper)
        else {
            continue;
        };
        if cap < out.q.upper && cap >= out.q.lower {
            out.q.upper = cap;
            out.q.value = out.q.value.min(cap);
            out.by_phase = Some(*whole);
        }
    }
    Some(out)
}

impl Bounded {
    /// What lowered the bracket, as a clause for a figure's source (empty when nothing did).
    pub fn why(&self, w: &Window) -> String {
        match (self.by_phase, self.q.capped_by_sum) {
            (Some(p), _) => format!(
                "; capped at the same quantile of {} (a part of a request's latency cannot exceed the whole)",
                w.sources.get(&p).cloned().unwrap_or_else(|| p.name())
            ),
            (None, true) => {
                "; capped by _sum/_count: the observations at or above the rank cannot hold more than the sum leaves".to_owned()
            }
            (None, false) => String::new(),
        }
    }
}
