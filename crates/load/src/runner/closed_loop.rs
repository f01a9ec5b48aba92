//! The closed loop: `c` virtual users, each sending its next request when the previous one
//! ended, and the pause a user takes after a refusal or a transport failure.

use super::level::{LevelRun, Msg};
use crate::client::PreparedRequest;
use headroom_core::Outcome;
use std::time::{Duration, Instant};

/// Offers the load of `c` virtual users (at least 1) until the window closes, the caller
/// cancels (returns true) or a request hits the client's own limits.
pub(super) async fn run(lv: &mut LevelRun<'_>, c: u32) -> bool {
    let c = c.max(1) as usize;
    let mut users = Users::new(c, lv.seed);
    let mut steady_rng = crate::arrivals::seeded_rng(lv.seed, 0x5EED_57A7);
    let mut initial_left = if lv.opts.steady_start && !lv.warmup.is_zero() {
        c
    } else {
        0
    };
    loop {
        let now = Instant::now();
        lv.check(now);
        // A client out of descriptors or ports offers less load than asked: no use
        // measuring on.
        if now >= lv.window_end || lv.fl.client_limited > 0 {
            return false;
        }
        users.wake_due(now);
        while let Some(user) = users.ready.pop() {
            let Some(mut d) = lv.mix.next_request().ok() else {
                users.ready.push(user);
                break;
            };
            if initial_left > 0 {
                initial_left -= 1;
                let share: f64 = rand::RngExt::random(&mut steady_rng);
                d.max_tokens = ((f64::from(d.max_tokens) * share).ceil() as u32).max(1);
            }
            let p = PreparedRequest::encode(&d, lv.launcher.target.model());
            let start = Instant::now();
            let in_window = start >= lv.launcher.window_start;
            if in_window {
                lv.out.started += 1;
            } else {
                lv.out.warmup_started += 1;
            }
            lv.launch(p, start, in_window, user);
        }
        // A user's pause never outlasts the level: the loop ends at the window's end
        // whoever is still pausing.
        let wake = users.next_wake().map_or(lv.wake(), |w| lv.wake().min(w));
        tokio::select! {
            biased;
            () = lv.cancel.cancelled() => return true,
            m = lv.rx.recv() => {
                if let Some(Msg::Done(d)) = m {
                    users.finished(d.user, &d.record.outcome, d.retry_after, Instant::now());
                    lv.done(d);
                }
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
        }
    }
}

/// Closed loop: the virtual users, and the pause each takes after a refused or failed request.
///
/// A virtual user sends its next request as soon as the previous one ended — unless that one
/// was refused (HTTP 429 or 503: a gateway's full queue or queue timeout, an overloaded server)
/// or failed in transport (a server that is gone refuses connections at once). Then the user
/// first pauses, as a real client does, instead of re-sending at once: at 64 users a gateway's
/// instant 429s otherwise made ~10,000 requests/s of refusals and burned the client's CPU. The
/// pause is
/// - after a 429 or 503: the `Retry-After` (or `retry-after-ms`) the answer carried, when it is
///   above 0 and at most 60 s; else 0.5 s × 2^(n−1), at most 8 s, times a jitter drawn uniformly
///   from [0.75, 1] (`n`: the user's refusals and failures in a row). This is the OpenAI Python
///   SDK's schedule for its retries (`_calculate_retry_timeout`: `INITIAL_RETRY_DELAY` 0.5 s,
///   `MAX_RETRY_DELAY` 8 s);
/// - after a transport failure: 10 ms × 2^(n−1), at most 1 s (a lost server is retried soon,
///   not hammered).
///
/// Any other ending (an answer, a timeout, a cancel) resets the user's count and takes no
/// pause. The refused request is recorded with its outcome (`http_429`, …) like any other; the
/// pause is no request, and the next request is a new one (new prompt, new start), not a retry
/// of the refused one. A pause never holds the level: the window ends on time and a user still
/// pausing then sends nothing more.
///
/// Open loop has no users to pause: arrivals follow their schedule whatever the answers (that
/// is what an arrival rate means — independent clients that do not see each other's
/// refusals), so a refused arrival is followed by the next scheduled one.
struct Users {
    /// Users ready to send now.
    ready: Vec<usize>,
    /// Users pausing, with the end of their pause.
    pausing: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, usize)>>,
    /// Per user: refused or failed requests in a row.
    streak: Vec<u32>,
    /// Draws the jitter of the exponential pauses (seeded: a level replays the same draws).
    rng: crate::arrivals::SeededRng,
}

impl Users {
    /// `c` users, all ready.
    fn new(c: usize, seed: u64) -> Users {
        Users {
            ready: (0..c).rev().collect(),
            pausing: std::collections::BinaryHeap::new(),
            streak: vec![0; c],
            rng: crate::arrivals::seeded_rng(seed, 0xBAC0_FF00),
        }
    }

    /// Makes the users whose pause ended by `now` ready.
    fn wake_due(&mut self, now: Instant) {
        while let Some(std::cmp::Reverse((at, user))) = self.pausing.peek().copied() {
            if at > now {
                break;
            }
            self.pausing.pop();
            self.ready.push(user);
        }
    }

    /// When the next pause ends.
    fn next_wake(&self) -> Option<Instant> {
        self.pausing.peek().map(|std::cmp::Reverse((at, _))| *at)
    }

    /// `user`'s request ended with `outcome` at `now`: the user pauses or is ready again.
    fn finished(
        &mut self,
        user: usize,
        outcome: &Outcome,
        retry_after: Option<Duration>,
        now: Instant,
    ) {
        let Some(streak) = self.streak.get_mut(user) else {
            return;
        };
        let jitter = 1.0 - 0.25 * rand::RngExt::random::<f64>(&mut self.rng);
        match pause_after(outcome, retry_after, streak, jitter) {
            Some(p) => self.pausing.push(std::cmp::Reverse((now + p, user))),
            None => self.ready.push(user),
        }
    }
}

/// Longest `Retry-After` honoured; a longer one (or 0) gets the exponential pause instead, as in
/// the OpenAI Python SDK.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// The pause of a virtual user whose request ended with `outcome` (see [`Users`]); `streak`
/// counts the user's refusals and failures in a row (updated here); `jitter` in [0.75, 1]
/// scales the exponential pause after a refusal.
fn pause_after(
    outcome: &Outcome,
    retry_after: Option<Duration>,
    streak: &mut u32,
    jitter: f64,
) -> Option<Duration> {
    let refused = matches!(outcome, Outcome::HttpStatus(429 | 503));
    if !refused && *outcome != Outcome::Transport {
        *streak = 0;
        return None;
    }
    *streak = streak.saturating_add(1);
    // 2^(n−1), the exponent capped where every schedule below is at its cap.
    let doubling = 1u64 << streak.saturating_sub(1).min(10);
    if !refused {
        return Some(Duration::from_millis(10 * doubling).min(Duration::from_secs(1)));
    }
    match retry_after {
        Some(ra) if !ra.is_zero() && ra <= RETRY_AFTER_MAX => Some(ra),
        _ => {
            let base = Duration::from_millis(500 * doubling).min(Duration::from_secs(8));
            Some(base.mul_f64(jitter.clamp(0.75, 1.0)))
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::level::OPEN_LOOP;

    /// The pauses of [`Users`], by hand: a honoured `Retry-After` as is; otherwise 0.5 s
    /// doubling to 8 s (times the jitter) after a refusal, 10 ms doubling to 1 s after a
    /// transport failure; any other ending resets the count and takes no pause.
    #[test]
    fn pauses_after_refusals_and_failures() {
        let (r429, r503) = (Outcome::HttpStatus(429), Outcome::HttpStatus(503));
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;
        let mut n = 0;
        assert_eq!(
            pause_after(&r429, Some(secs(1)), &mut n, 1.0),
            Some(secs(1))
        );
        assert_eq!(
            pause_after(&r503, Some(secs(60)), &mut n, 1.0),
            Some(secs(60))
        );
        assert_eq!(n, 2);
        // An answer resets the count.
        assert_eq!(pause_after(&Outcome::Stop, None, &mut n, 1.0), None);
        assert_eq!(n, 0);
        // No header, 0 s, or more than 60 s: 0.5, 1, 2, 4, 8, 8 s.
        let got: Vec<_> = [None, Some(Duration::ZERO), Some(secs(61)), None, None, None]
            .into_iter()
            .map(|ra| pause_after(&r429, ra, &mut n, 1.0).unwrap())
            .collect();
        assert_eq!(got, [ms(500), secs(1), secs(2), secs(4), secs(8), secs(8)]);
        // The jitter scales it down by at most a quarter.
        let mut n = 0;
        assert_eq!(pause_after(&r503, None, &mut n, 0.75), Some(ms(375)));
        // Other statuses, timeouts and cancels take no pause and reset the count.
        for o in [
            Outcome::HttpStatus(500),
            Outcome::HttpStatus(400),
            Outcome::Timeout,
            Outcome::ClientCancel,
            Outcome::Length,
        ] {
            let mut n = 3;
            assert_eq!(pause_after(&o, Some(secs(1)), &mut n, 1.0), None, "{o:?}");
            assert_eq!(n, 0);
        }
        // Transport: 10, 20, 40, …, 640 ms, then 1 s; a Retry-After plays no part.
        let mut n = 0;
        let got: Vec<_> = (0..9)
            .map(|_| pause_after(&Outcome::Transport, None, &mut n, 0.75).unwrap())
            .collect();
        assert_eq!(
            got,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000].map(ms).to_vec()
        );
    }

    /// Users pausing come back in the order their pauses end; the others are ready at once.
    #[test]
    fn users_come_back_when_their_pause_ends() {
        let t = Instant::now();
        let mut u = Users::new(3, 1);
        let all: Vec<usize> = std::iter::from_fn(|| u.ready.pop()).collect();
        assert_eq!(all, [0, 1, 2]);
        u.finished(
            0,
            &Outcome::HttpStatus(429),
            Some(Duration::from_secs(2)),
            t,
        );
        u.finished(
            1,
            &Outcome::HttpStatus(429),
            Some(Duration::from_secs(1)),
            t,
        );
        u.finished(2, &Outcome::Stop, None, t);
        assert_eq!(u.ready, [2]);
        assert_eq!(u.next_wake(), Some(t + Duration::from_secs(1)));
        u.wake_due(t + Duration::from_millis(1500));
        assert_eq!(u.ready, [2, 1]);
        assert_eq!(u.next_wake(), Some(t + Duration::from_secs(2)));
        u.wake_due(t + Duration::from_secs(2));
        assert_eq!(u.ready, [2, 1, 0]);
        assert_eq!(u.next_wake(), None);
        // An unknown user (open loop's) changes nothing.
        u.finished(OPEN_LOOP, &Outcome::HttpStatus(429), None, t);
        assert_eq!(u.ready.len(), 3);
    }
}
