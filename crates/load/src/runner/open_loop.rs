//! The open loop: arrivals on the schedule of [`ArrivalSchedule`], sent by a pacer thread at
//! each intended time (itself, on a prepared request and an idle connection, when uncapped;
//! through the dispatcher and its queue when `max_concurrency` caps the requests in flight).

use super::level::{Launcher, LevelRun, Msg, OPEN_LOOP};
use crate::arrivals::{ArrivalProcess, ArrivalSchedule};
use crate::client::{PreparedRequest, RequestRecord, Target};
use headroom_core::Outcome;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Offers arrivals at `rate_per_s` spaced by `arrival`, with at most `max_concurrency` in
/// flight, until the window closes, the caller cancels (returns true) or a request hits the
/// client's own limits; then stops the pacer, counts what it launched, and records the
/// arrivals still queued under the cap as cancelled.
pub(super) async fn run(
    lv: &mut LevelRun<'_>,
    rate_per_s: f64,
    arrival: ArrivalProcess,
    max_concurrency: Option<u32>,
) -> bool {
    let cap = max_concurrency.map_or(usize::MAX, |m| m.max(1) as usize);
    let (t0, window_start) = (lv.t0, lv.launcher.window_start);
    let total = lv.hard_end.saturating_duration_since(t0);
    let stop = Arc::new(AtomicBool::new(false));
    let ns_from_t0 = |at: Instant| {
        u64::try_from(at.saturating_duration_since(t0).as_nanos()).unwrap_or(u64::MAX)
    };
    let launch_until_ns = Arc::new(AtomicU64::new(ns_from_t0(lv.window_end)));
    // Uncapped: the pacer launches requests prepared here ahead of time.
    let ahead = prepared_ahead(rate_per_s);
    let (prep_tx, prep_rx) = mpsc::channel::<PreparedRequest>(ahead);
    let mut prep_tx = Some(prep_tx);
    let direct = (max_concurrency.is_none()).then(|| DirectLaunch {
        handle: tokio::runtime::Handle::current(),
        prepared: prep_rx,
        launcher: lv.launcher.clone(),
        launch_until_ns: launch_until_ns.clone(),
    });
    let spares = Spares::new(rate_per_s, &lv.launcher.target);
    if direct.is_some() {
        for _ in 0..ahead {
            refill(lv, prep_tx.as_ref());
        }
        spares.top_up(&lv.launcher.target);
    } else {
        prep_tx = None;
    }
    let pacer = match ArrivalSchedule::new(rate_per_s, arrival, lv.seed) {
        Ok(schedule) => {
            let pacer = Pacer {
                schedule,
                t0,
                total,
                want_realtime: lv.opts.pacer_realtime,
                realtime: lv.pacer_realtime.clone(),
                tx: lv.launcher.tx.clone(),
                stop: stop.clone(),
                direct,
            };
            match std::thread::Builder::new()
                .name("headroom-pacer".into())
                .spawn(move || pacer.run())
            {
                Ok(h) => Some(h),
                Err(e) => {
                    lv.out.aborted = Some(format!("cannot start the pacer thread: {e}"));
                    None
                }
            }
        }
        Err(e) => {
            lv.out.aborted = Some(format!("no arrival schedule: {e}"));
            None
        }
    };
    let mut backlog: VecDeque<(Instant, PreparedRequest)> = VecDeque::new();
    let mut pending = if prep_tx.is_none() {
        lv.next_request()
    } else {
        None
    };
    let mut interrupted = false;
    loop {
        let now = Instant::now();
        if lv.check(now) {
            launch_until_ns.store(ns_from_t0(lv.window_end), Ordering::Relaxed);
        }
        // A client out of descriptors or ports offers less load than asked: no use
        // measuring on.
        if now >= lv.window_end || lv.fl.client_limited > 0 {
            break;
        }
        let wake = lv.wake();
        tokio::select! {
            biased;
            () = lv.cancel.cancelled() => { interrupted = true; break; }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            m = lv.rx.recv() => match m {
                None => break,
                Some(Msg::Launched { in_window, late_ns }) => {
                    lv.fl.launched(&mut lv.out, in_window, late_ns);
                    refill(lv, prep_tx.as_ref());
                    spares.top_up(&lv.launcher.target);
                }
                Some(Msg::Tick(intended, late_ns)) => {
                    let Some(p) = pending.take() else { break };
                    let in_window = intended >= window_start;
                    if in_window {
                        lv.fl.pacer_late.saturating_record(late_ns);
                        lv.out.started += 1;
                    } else {
                        lv.out.warmup_started += 1;
                    }
                    if lv.fl.in_flight < cap {
                        lv.launch(p, intended, in_window, OPEN_LOOP);
                    } else {
                        backlog.push_back((intended, p));
                    }
                    pending = lv.next_request();
                }
                Some(Msg::Done(d)) => {
                    lv.done(d);
                    while lv.fl.in_flight < cap {
                        let Some((intended, p)) = backlog.pop_front() else { break };
                        let in_window = intended >= window_start;
                        lv.launch(p, intended, in_window, OPEN_LOOP);
                    }
                }
            },
        }
    }
    launch_until_ns.store(0, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    // Unblocks a pacer waiting for a prepared request.
    drop(prep_tx);
    // A pacer that panicked sent fewer requests than the schedule: the level is void.
    if let Some(h) = pacer
        && let Err(p) = h.join()
    {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        lv.out.aborted = Some(format!("the pacer thread panicked: {why}"));
    }
    // Every launch is now in the channel: count them (and whatever finished) before
    // the drain decides what is still in flight.
    while let Ok(m) = lv.rx.try_recv() {
        match m {
            Msg::Launched { in_window, late_ns } => {
                lv.fl.launched(&mut lv.out, in_window, late_ns);
            }
            Msg::Done(d) => lv.done(d),
            Msg::Tick(..) => {}
        }
    }
    // Arrivals of the window that never got a slot: recorded as cancelled before their
    // first token (their age is a lower bound on their TTFT).
    let now = Instant::now();
    for (intended, p) in backlog.drain(..) {
        if intended < window_start {
            continue;
        }
        let age =
            u64::try_from(now.saturating_duration_since(intended).as_nanos()).unwrap_or(u64::MAX);
        let record = unsent(&p, intended, window_start, age);
        if let Some(c) = lv.out.classes.get_mut(p.class) {
            c.record(&record);
        }
        lv.out.cancelled_at_end += 1;
    }
    interrupted
}

/// Tops the pacer's prepared requests up by one (uncapped: `prep_tx` is its channel).
fn refill(lv: &mut LevelRun<'_>, prep_tx: Option<&mpsc::Sender<PreparedRequest>>) {
    if let Some(ptx) = prep_tx
        && let Some(p) = lv.next_request()
    {
        // Never full: one is sent per one the pacer took.
        let _ = ptx.try_send(p);
    }
}

/// Requests the dispatcher keeps prepared for the pacer (uncapped open loop): the arrivals of
/// 50 ms at the mean rate, 16 to 1,024, so a burst does not leave the pacer waiting for the
/// dispatcher to prepare the next one.
fn prepared_ahead(rate_per_s: f64) -> usize {
    (rate_per_s * 0.05).ceil().clamp(16.0, 1024.0) as usize
}

/// What the pacer needs to launch requests itself (uncapped open loop).
struct DirectLaunch {
    handle: tokio::runtime::Handle,
    prepared: mpsc::Receiver<PreparedRequest>,
    launcher: Launcher,
    /// Nothing intended at or after this offset from the level start (ns) is launched: the
    /// window's end, moved by the dispatcher when a check closes the window early.
    launch_until_ns: Arc<AtomicU64>,
}

/// Idle connections kept ready for the open-loop pacer, which sends only on an idle connection
/// ([`Target::send_now`]): without spares, every new peak of requests in flight found none, and
/// its sends (1–2 % of them at 500 req/s Poisson) waited for a runtime worker to connect and send,
/// which put 2–3 ms on the send lag's p99 on a busy 2-core host.
///
/// Spares must not turn into a connection storm against a server that closes idle connections
/// (a short keep-alive, a proxy): whenever idle connections were thrown away unused since the
/// last top-up ([`Target::discarded_connections`]), or a connect failed, top-ups pause for a
/// second, and each launch starts at most [`Spares::BURST`] connects.
struct Spares {
    /// Idle connections wanted: the arrivals of 50 ms at the mean rate, 2 to 1,024.
    want: usize,
    /// Connects under way.
    opening: Arc<AtomicUsize>,
    /// No top-up before this: after a failed connect (the server may be gone) or idle
    /// connections thrown away unused.
    paused_until: Arc<std::sync::Mutex<Instant>>,
    /// [`Target::discarded_connections`] at the last top-up.
    discarded: AtomicU64,
}

impl Spares {
    /// Connects started at once, at most.
    const BURST: usize = 4;
    /// How long top-ups pause.
    const PAUSE: Duration = Duration::from_secs(1);

    fn new(rate_per_s: f64, target: &Target) -> Spares {
        Spares {
            want: (rate_per_s * 0.05).ceil().clamp(2.0, 1024.0) as usize,
            opening: Arc::new(AtomicUsize::new(0)),
            paused_until: Arc::new(std::sync::Mutex::new(Instant::now())),
            discarded: AtomicU64::new(target.discarded_connections()),
        }
    }

    /// Starts connects (at most [`Spares::BURST`]) while the idle connections and those being
    /// opened are fewer than wanted, unless paused.
    fn top_up(&self, target: &Target) {
        let now = Instant::now();
        let discarded = target.discarded_connections();
        if self.discarded.swap(discarded, Ordering::Relaxed) != discarded
            && let Ok(mut p) = self.paused_until.lock()
        {
            *p = now + Self::PAUSE;
        }
        if self.paused_until.lock().is_ok_and(|t| now < *t) {
            return;
        }
        let have = target.idle_connections() + self.opening.load(Ordering::Relaxed);
        for _ in 0..self.want.saturating_sub(have).min(Self::BURST) {
            self.opening.fetch_add(1, Ordering::Relaxed);
            let (t, opening, paused) = (
                target.clone(),
                self.opening.clone(),
                self.paused_until.clone(),
            );
            tokio::spawn(async move {
                if t.open_spare_connection().await.is_err()
                    && let Ok(mut p) = paused.lock()
                {
                    *p = Instant::now() + Self::PAUSE;
                }
                opening.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
}

/// The pacer thread of an open-loop level (see [`Pacer::run`]).
struct Pacer {
    /// The intended send times, as offsets from `t0`.
    schedule: ArrivalSchedule,
    /// The level's start.
    t0: Instant,
    /// Nothing at or after this offset is sent: the level's end.
    total: Duration,
    /// Ask for real-time priority
    /// ([`RunOptions::pacer_realtime`](super::RunOptions::pacer_realtime)).
    want_realtime: bool,
    /// Set when the pacer got real-time priority.
    realtime: Arc<AtomicBool>,
    /// The dispatcher's channel: ticks (capped) and launches (uncapped).
    tx: mpsc::UnboundedSender<Msg>,
    /// Set by the dispatcher when the level's window has closed.
    stop: Arc<AtomicBool>,
    /// Uncapped: what the pacer needs to launch requests itself.
    direct: Option<DirectLaunch>,
}

impl Pacer {
    /// At real-time priority when asked (`want_realtime`) and the OS allows it (`realtime` says
    /// whether it did), sleeps to each intended send time, then launches the request itself
    /// (`direct`: a request prepared by the dispatcher, spawned on its runtime) or hands the
    /// time to the dispatcher, until the level's end or `stop`.
    fn run(self) {
        let Pacer {
            schedule,
            t0,
            total,
            want_realtime,
            realtime,
            tx,
            stop,
            mut direct,
        } = self;
        // The kernel may delay a sleeping thread's wake-up by its timer slack (50 µs by default);
        // 1 µs keeps the wake-up on time.
        #[cfg(target_os = "linux")]
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
        }
        // On a busy host the scheduler wakes a sleeping thread late (2 ms at p99 on a loaded 2-core
        // machine); at the lowest real-time priority the pacer preempts ordinary threads when its
        // time comes (0.08 ms). It sleeps between sends, so it takes no CPU from them otherwise.
        // Needs CAP_SYS_NICE (root has it); without it the pacer stays an ordinary thread.
        #[cfg(target_os = "linux")]
        if want_realtime {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sets the calling thread's policy (pid 0); `param` outlives the call.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
            realtime.store(rc == 0, Ordering::Relaxed);
        }
        #[cfg(target_os = "linux")]
        if !realtime.load(Ordering::Relaxed) {
            request_short_slice();
        }
        for offset in schedule {
            if offset >= total {
                return;
            }
            let at = t0 + offset;
            // Take the request before sleeping, so the launch itself is all that happens at `at`.
            let prepared = match &mut direct {
                Some(d) => match d.prepared.blocking_recv() {
                    Some(p) => Some(p),
                    None => return,
                },
                None => None,
            };
            let mut slept = false;
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let now = Instant::now();
                if now >= at {
                    break;
                }
                // Sleep in slices so a stop is noticed within 20 ms at any rate.
                std::thread::sleep((at - now).min(Duration::from_millis(20)));
                slept = true;
            }
            // The OS's part of the delay: how late the wake-up came. An arrival that was already
            // due when the pacer got to it (a burst it was still sending, or waiting for the next
            // prepared request) had no wake-up to be late: its delay is the client's own, and shows
            // in the send lag alone.
            let late_ns = if slept {
                u64::try_from(Instant::now().saturating_duration_since(at).as_nanos())
                    .unwrap_or(u64::MAX)
            } else {
                0
            };
            let sent = match (&direct, prepared) {
                (Some(d), Some(p)) => {
                    let offset_ns = u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX);
                    if offset_ns >= d.launch_until_ns.load(Ordering::Relaxed) {
                        return;
                    }
                    if tx.is_closed() {
                        return;
                    }
                    // The request goes onto the socket from here, now; the task that awaits its
                    // answer may start later without delaying the send.
                    let sent = d.launcher.target.send_now(&p);
                    let in_window = at >= d.launcher.window_start;
                    let ok = tx.send(Msg::Launched { in_window, late_ns }).is_ok();
                    if ok {
                        d.handle
                            .spawn(d.launcher.task(p, sent, at, in_window, OPEN_LOOP));
                    }
                    ok
                }
                _ => tx.send(Msg::Tick(at, late_ns)).is_ok(),
            };
            if !sent {
                return;
            }
        }
    }
}

/// Asks the kernel for the shortest time slice (0.1 ms) for the calling thread, staying an
/// ordinary (`SCHED_OTHER`) thread; no privilege is needed. Under the EEVDF scheduler (Linux
/// 6.6+; a custom slice since 6.12) a thread with a shorter slice gets an earlier virtual
/// deadline, so when its timer wakes it, it preempts the thread on the CPU instead of waiting
/// for that thread's slice to end. Older kernels refuse or ignore the request; the pacer then
/// runs as before.
#[cfg(target_os = "linux")]
fn request_short_slice() {
    /// `struct sched_attr` up to `sched_period` (`SCHED_ATTR_SIZE_VER0`, 48 bytes), as in
    /// `include/uapi/linux/sched/types.h`.
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        // The kernel's minimum custom slice, ns.
        sched_runtime: 100_000,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads `attr`, which outlives the
    // call; `size` tells the kernel how much of it there is.
    unsafe {
        libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0);
    }
}

/// The record of an arrival of the window that never got a slot under the cap: cancelled before
/// its first token, `age_ns` after its intended time (a lower bound on its TTFT).
pub(super) fn unsent(
    p: &PreparedRequest,
    intended: Instant,
    window_start: Instant,
    age_ns: u64,
) -> RequestRecord {
    RequestRecord {
        class: p.class,
        start_offset_ns: u64::try_from(intended.saturating_duration_since(window_start).as_nanos())
            .unwrap_or(u64::MAX),
        send_lag_ns: age_ns,
        timing: headroom_core::RequestTiming {
            content_chunk_ns: Vec::new(),
            end_ns: age_ns,
            output_tokens: None,
        },
        prompt_tokens: None,
        server_queue_ns: None,
        requested_prompt_tokens: p.requested_prompt_tokens,
        requested_max_tokens: p.max_tokens,
        finish_reason: None,
        outcome: Outcome::ClientCancel,
        sse_events: 0,
        message: Some("never sent: the concurrency cap was reached until the window ended".into()),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Collects what the pacer sends for `schedule` from `t0` over `total`, capped open loop
    /// (the pacer hands each arrival to the dispatcher as a `Tick`).
    fn pace_ticks(t0: Instant, total: Duration, rate: f64) -> Vec<(Instant, u64)> {
        let schedule = ArrivalSchedule::new(rate, ArrivalProcess::Constant, 1).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        Pacer {
            schedule,
            t0,
            total,
            want_realtime: false,
            realtime: Arc::new(AtomicBool::new(false)),
            tx,
            stop: Arc::new(AtomicBool::new(false)),
            direct: None,
        }
        .run();
        let mut ticks = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Msg::Tick(at, late_ns) = m {
                ticks.push((at, late_ns));
            }
        }
        ticks
    }

    /// Arrivals already due when the pacer gets to them (a burst, or a pacer busy sending) had no
    /// wake-up: the OS is not blamed for their delay (their lateness is 0), however late they
    /// are. Arrivals the pacer slept for carry their wake-up lateness.
    #[test]
    fn pacer_lateness_is_the_wake_up_only() {
        // 50 arrivals at 1,000/s, all due 10 s ago.
        let past = Instant::now() - Duration::from_secs(10);
        let ticks = pace_ticks(past, Duration::from_millis(50), 1000.0);
        assert_eq!(ticks.len(), 49);
        assert!(ticks.iter().all(|&(_, late)| late == 0), "{ticks:?}");
        // 5 arrivals at 100/s starting now: the pacer sleeps for each (after the first, whose
        // offset 10 ms is also in the future).
        let ticks = pace_ticks(Instant::now(), Duration::from_millis(55), 100.0);
        assert_eq!(ticks.len(), 5);
        let delivered = Instant::now();
        for (at, late) in ticks {
            // A sleep never returns early; its lateness is below the time since.
            assert!(
                Duration::from_nanos(late) <= delivered.saturating_duration_since(at),
                "{late} ns"
            );
        }
    }

    /// The kernel records a thread's slice in `/proc/thread-self/sched` (`se.slice`, ns) on
    /// EEVDF kernels; an older kernel without the line (or without custom slices) is skipped.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_pacer_asks_for_the_shortest_slice() {
        let slice = std::thread::spawn(|| {
            let read = || {
                std::fs::read_to_string("/proc/thread-self/sched")
                    .ok()?
                    .lines()
                    .find(|l| l.starts_with("se.slice"))?
                    .rsplit(':')
                    .next()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            };
            let before = read();
            super::request_short_slice();
            (before, read())
        })
        .join()
        .unwrap();
        match slice {
            (Some(before), Some(after)) if before != 100_000 => {
                let custom = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .ok()
                    .and_then(|r| {
                        let mut v = r.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
                        Some((v.next()??, v.next()??))
                    })
                    .is_some_and(|v| v >= (6, 12));
                if custom {
                    assert_eq!(after, 100_000, "slice before {before} ns");
                }
            }
            other => eprintln!("skipped: se.slice {other:?}"),
        }
    }
}
