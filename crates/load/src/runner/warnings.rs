//! Warnings read off a level's recording: a target whose admission control shaped the level
//! (most requests refused), and a server that went silent with requests in flight.

use crate::recorder::LevelRecording;
use headroom_core::Outcome;

/// A warning for a level where most requests of the window (more than half) were refused with
/// HTTP 429 or 503: the target's admission control (a gateway's concurrency limit or queue, an
/// overloaded server), not the engine, shaped the level, and its latencies describe the few
/// admitted requests. `None` otherwise, and for a window without requests.
pub fn refusal_warning(rec: &LevelRecording) -> Option<String> {
    let (mut refused, mut n) = (0u64, 0u64);
    for c in &rec.classes {
        for (o, k) in &c.outcomes {
            n += k;
            if matches!(o, Outcome::HttpStatus(429 | 503)) {
                refused += k;
            }
        }
    }
    if n == 0 || refused * 2 <= n {
        return None;
    }
    let pacing = match rec.mode {
        headroom_core::run::LoadMode::Concurrency => {
            "each virtual user paused before its next request (the answer's Retry-After, else 0.5 s doubling to 8 s)"
        }
        headroom_core::run::LoadMode::Rate => "arrivals kept their schedule (open loop)",
    };
    Some(format!(
        "{refused} of {n} requests of the window ({:.0} %) were refused with HTTP 429/503 (a gateway's concurrency limit or queue, or an overloaded server): the level measured that admission limit more than the engine, and its latencies describe the {} admitted requests only; {pacing}",
        100.0 * refused as f64 / n as f64,
        n - refused
    ))
}

/// Silences shorter than this are never a stall: a scheduler hiccup, a long prefill.
const STALL_MIN_S: f64 = 1.0;

/// How many times the typical wait (the larger of TTFT p50 and ITL p50) a silence must last to
/// be a stall.
const STALL_TYPICAL_FACTOR: f64 = 5.0;

/// A warning for a window in which the server went silent: for longer than
/// max([`STALL_MIN_S`], [`STALL_TYPICAL_FACTOR`] × the larger of TTFT p50 and ITL p50),
/// requests were in flight but no content chunk arrived and no request ended
/// ([`LevelRecording::longest_silence`]). A closed
/// loop waits with a frozen server, so its percentiles can pass over a stall that an open loop
/// fails on. `None` otherwise, and for a window without requests.
pub fn stall_warning(rec: &LevelRecording) -> Option<String> {
    let silence = rec.longest_silence.as_ref()?;
    let total = rec.total();
    if total.requests() == 0 {
        return None;
    }
    let p50_s = |sig| {
        total
            .percentile_ns(sig, 50.0)
            .map_or(0.0, |ns| ns as f64 / 1e9)
    };
    let typical =
        p50_s(headroom_core::LatencySignal::Ttft).max(p50_s(headroom_core::LatencySignal::Itl));
    let limit = STALL_MIN_S.max(STALL_TYPICAL_FACTOR * typical);
    if silence.len_s <= limit {
        return None;
    }
    let why = match rec.mode {
        headroom_core::run::LoadMode::Concurrency => {
            "a closed loop waits with a stalled server, so its percentiles can hide the stall; check the server for a pause (a GC pause, a restart, a stuck engine step) and measure it in open loop (`load: {mode: rate}` in the workload), where requests keep arriving during a stall"
        }
        headroom_core::run::LoadMode::Rate => {
            "requests that arrived during it waited, so the latencies include it; check the server for a pause (a GC pause, a restart, a stuck engine step)"
        }
    };
    Some(format!(
        "the server went silent for {:.1} s of the {:.1} s window (from {:.1} s into it): no content chunk arrived and no request ended, longer than {:.1} s (1 s, or 5 x the typical TTFT/ITL p50 of {:.0} ms); {why}",
        silence.len_s,
        rec.window_s,
        silence.from_s,
        limit,
        typical * 1e3
    ))
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal warning needs more than half of the window's requests refused (429 and 503
    /// together, over every class); 500s and transport failures are no refusals.
    #[test]
    fn most_requests_refused_is_warned() {
        use headroom_core::run::LoadMode;
        let level = |counts: &[(Outcome, u64)], mode: LoadMode| {
            let mut r = LevelRecording::new(8.0, mode, &["a", "b"]);
            for (i, (o, n)) in counts.iter().enumerate() {
                r.classes[i % 2].outcomes.insert(*o, *n);
            }
            r
        };
        let half = level(
            &[(Outcome::HttpStatus(429), 3), (Outcome::Stop, 3)],
            LoadMode::Concurrency,
        );
        assert_eq!(refusal_warning(&half), None);
        let most = level(
            &[
                (Outcome::HttpStatus(429), 3),
                (Outcome::HttpStatus(503), 1),
                (Outcome::Stop, 2),
            ],
            LoadMode::Concurrency,
        );
        let w = refusal_warning(&most).unwrap();
        assert!(
            w.starts_with("4 of 6 requests of the window (67 %) were refused with HTTP 429/503"),
            "{w}"
        );
        assert!(w.contains("the 2 admitted requests only"), "{w}");
        let others = level(
            &[(Outcome::HttpStatus(500), 5), (Outcome::Transport, 5)],
            LoadMode::Rate,
        );
        assert_eq!(refusal_warning(&others), None);
        assert_eq!(refusal_warning(&level(&[], LoadMode::Rate)), None);
    }
}
