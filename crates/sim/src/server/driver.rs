//! The wall-clock engine driver: one task owns the [`Engine`] and runs its steps in real time.
//!
//! HTTP handlers never touch the engine. They send [`Command`]s over an unbounded channel and
//! read their tokens from a shared [`Slot`]: the driver stores "tokens produced so far" and the
//! finish reason in atomics and wakes the handler's task. A slow reader therefore never blocks
//! the engine, the engine never queues per-token messages, and a reader that wakes late picks up
//! every token produced meanwhile in one batch (one HTTP write for many SSE events).
//!
//! Clock: engine time is wall time since the driver started (monotonic, on the tokio clock);
//! the engine applies `EngineConfig::time_scale` to its own step durations and frontend delay.
//! Each step starts when the previous one ends on the modelled timeline, and its tokens are
//! delivered when the step ends on the wall clock (`sleep_until`). tokio's timer rounds a
//! deadline up to its next 1 ms tick, so the driver wakes a little after each step's end, and a
//! busy host wakes it later still. The modelled engine did not slow down, only the delivery did,
//! so the next step still starts at the modelled end (or at the last command's arrival, if
//! later) and the timeline does not drift; only a driver more than [`CATCH_UP_MAX_S`] behind
//! starts the next step now (one burst of catch-up tokens would distort more than a shift).
//! Wake-ups later than [`WAKE_JITTER_S`] are counted in [`ClockLag`]: they are the delivery
//! delays a client sees in its ITL. Commands that
//! arrive during a step are applied at once, with their own arrival time, and join a later
//! step, as in vLLM. In zero-latency mode (`time_scale == 0`) every duration is 0: steps run back
//! to back, yielding to the HTTP tasks every millisecond, so clients get tokens as fast as the
//! CPU allows, several per write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::render::Finish;
use crate::{Engine, FinishReason, NewRequest, RequestId};

/// Lateness of the driver's wake-up after a step's end that is timer jitter (tokio's 1 ms tick
/// plus a scheduling delay), not counted as running behind. Seconds.
pub(crate) const WAKE_JITTER_S: f64 = 0.002;

/// Largest lateness the driver makes up by starting the next step at the modelled end; beyond
/// it, the next step starts now. Seconds.
pub(crate) const CATCH_UP_MAX_S: f64 = 0.05;

/// In zero-latency mode the driver steps back to back for at least this long and at least
/// [`ZERO_LATENCY_BURST_STEPS`] steps (but never longer than [`ZERO_LATENCY_BURST_MAX`]) before
/// yielding to the HTTP tasks. Longer bursts mean more tokens per HTTP write (less CPU per
/// token, measured by `benches/server_throughput.rs`) and burstier delivery.
const ZERO_LATENCY_BURST: Duration = Duration::from_millis(1);
/// Fewest steps per zero-latency burst: with thousands of running requests one step alone can
/// take a millisecond, and a burst of one step would mean one token per write.
const ZERO_LATENCY_BURST_STEPS: u32 = 16;
/// Longest zero-latency burst.
const ZERO_LATENCY_BURST_MAX: Duration = Duration::from_millis(20);

/// Per-request delivery state shared by the driver (writer) and one HTTP handler (reader).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    produced: AtomicU32,
    /// 0 = running, else a `Finish` code (see `finish_code`).
    finish: AtomicU8,
    /// Engine queue time in ns + 1, set when the request finishes (0 = unknown).
    queue_ns_plus_one: AtomicU64,
    waker: AtomicWaker,
}

/// A snapshot of a slot: tokens produced so far and the finish reason once finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub produced: u32,
    pub finish: Option<Finish>,
}

fn finish_code(f: Finish) -> u8 {
    match f {
        Finish::Stop => 1,
        Finish::Length => 2,
        Finish::Abort => 3,
    }
}

fn finish_from_code(c: u8) -> Option<Finish> {
    match c {
        1 => Some(Finish::Stop),
        2 => Some(Finish::Length),
        3 => Some(Finish::Abort),
        _ => None,
    }
}

impl Slot {
    /// The engine queue time of the finished request, milliseconds (per-request metrics).
    pub(crate) fn queue_time_ms(&self) -> Option<f64> {
        match self.queue_ns_plus_one.load(Ordering::Acquire) {
            0 => None,
            v => Some((v - 1) as f64 / 1e6),
        }
    }

    /// The current progress (finish read first, so a finished snapshot has the final count).
    pub(crate) fn progress(&self) -> Progress {
        let finish = finish_from_code(self.finish.load(Ordering::Acquire));
        let produced = self.produced.load(Ordering::Acquire);
        Progress { produced, finish }
    }

    /// Progress if it moved past `seen` tokens or finished; otherwise registers the waker and
    /// returns `Pending`.
    pub(crate) fn poll_progress(&self, cx: &mut Context<'_>, seen: u32) -> Poll<Progress> {
        let p = self.progress();
        if p.produced > seen || p.finish.is_some() {
            return Poll::Ready(p);
        }
        self.waker.register(cx.waker());
        let p = self.progress();
        if p.produced > seen || p.finish.is_some() {
            Poll::Ready(p)
        } else {
            Poll::Pending
        }
    }

    fn publish(&self, produced: u32, finish: Option<Finish>) {
        self.produced.store(produced, Ordering::Release);
        if let Some(f) = finish {
            self.finish.store(finish_code(f), Ordering::Release);
        }
        self.waker.wake();
    }
}

/// A message to the driver.
pub(crate) enum Command {
    /// Admit a request; `key` is the server's handle for it (for `Abort`).
    Add {
        key: u64,
        request: NewRequest,
        slot: Arc<Slot>,
    },
    /// The client went away: cancel in the engine ([`crate::Engine::cancel`]): as in vLLM 0.32,
    /// the request is counted under no `finished_reason` (not even `abort`).
    Abort { key: u64 },
    /// Render `/metrics` (vLLM families) at the current engine time.
    Metrics(oneshot::Sender<String>),
    /// Render the dcgm-exporter body at the current engine time.
    Dcgm(oneshot::Sender<String>),
    /// Abort everything in flight and stop.
    Shutdown,
}

struct Clock {
    start: Instant,
}

impl Clock {
    fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn wall_deadline(&self, engine_s: f64) -> Instant {
        self.start + Duration::from_secs_f64(engine_s.clamp(0.0, 1.0e9))
    }
}

/// How late the wall-clock driver delivered steps: a step due at `end` whose tokens go out more
/// than [`WAKE_JITTER_S`] later lengthens that ITL (and shortens the next, as the timeline
/// catches up) beyond what the modelled GPU would show. Cumulative.
#[derive(Debug, Default)]
pub struct ClockLag {
    /// Steps that slept (non-zero modelled duration).
    pub steps: AtomicU64,
    /// Σ modelled step durations of those steps, ns.
    pub step_ns: AtomicU64,
    /// Those steps whose wake-up came more than [`WAKE_JITTER_S`] after their end.
    pub late_steps: AtomicU64,
    /// Σ (actual wake − due time) of the late steps, ns.
    pub late_ns: AtomicU64,
}

/// The driver task's state.
pub(crate) struct Driver {
    lag: Arc<ClockLag>,
    engine: Engine,
    clock: Clock,
    rx: mpsc::UnboundedReceiver<Command>,
    by_id: HashMap<RequestId, Arc<Slot>>,
    by_key: HashMap<u64, RequestId>,
    key_of: HashMap<RequestId, u64>,
    stopping: bool,
    /// Engine time of the last command applied (an arrival or a cancellation): a step never
    /// starts before it.
    last_cmd_s: f64,
}

impl Driver {
    pub(crate) fn new(
        engine: Engine,
        rx: mpsc::UnboundedReceiver<Command>,
        lag: Arc<ClockLag>,
    ) -> Driver {
        Driver {
            lag,
            engine,
            clock: Clock {
                start: Instant::now(),
            },
            rx,
            by_id: HashMap::new(),
            by_key: HashMap::new(),
            key_of: HashMap::new(),
            stopping: false,
            last_cmd_s: 0.0,
        }
    }

    /// Runs until `Shutdown` or until every sender is gone.
    pub(crate) async fn run(mut self) {
        let mut burst_start: Option<(std::time::Instant, u32)> = None;
        // Where the next step starts on the modelled timeline when the driver kept up.
        let mut resume_at: Option<f64> = None;
        loop {
            while let Ok(cmd) = self.rx.try_recv() {
                self.apply(cmd);
            }
            if self.stopping {
                break;
            }
            if !self.engine.has_work() {
                resume_at = None;
                match self.rx.recv().await {
                    Some(cmd) => self.apply(cmd),
                    None => break,
                }
                continue;
            }
            let now = self.clock.now_s();
            let t0 = resume_at
                .take()
                .map_or(now, |end| end.max(self.last_cmd_s).min(now));
            let result = self.engine.step(t0);
            let end = t0 + result.duration_s.max(0.0);
            let sleeps = result.duration_s > 0.0;
            if sleeps {
                let deadline = tokio::time::sleep_until(self.clock.wall_deadline(end));
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut deadline => break,
                        cmd = self.rx.recv() => match cmd {
                            Some(cmd) => self.apply(cmd),
                            None => { self.stopping = true; break; }
                        },
                    }
                }
                let late = (self.clock.now_s() - end).max(0.0);
                self.lag.steps.fetch_add(1, Ordering::Relaxed);
                self.lag
                    .step_ns
                    .fetch_add((result.duration_s * 1e9) as u64, Ordering::Relaxed);
                if late <= CATCH_UP_MAX_S {
                    resume_at = Some(end);
                }
                if late > WAKE_JITTER_S {
                    self.lag.late_steps.fetch_add(1, Ordering::Relaxed);
                    self.lag
                        .late_ns
                        .fetch_add((late * 1e9) as u64, Ordering::Relaxed);
                }
            }
            // Queue times first: a finished request's slot is published below.
            for (id, q) in self.engine.finished_queue_times() {
                if let Some(slot) = self.by_id.get(id) {
                    slot.queue_ns_plus_one
                        .store((q * 1e9) as u64 + 1, Ordering::Release);
                }
            }
            for ev in &result.tokens {
                let Some(slot) = self.by_id.get(&ev.id) else {
                    continue;
                };
                let finish = ev.finished.map(map_finish);
                slot.publish(ev.token_index + 1, finish);
                if finish.is_some() {
                    self.by_id.remove(&ev.id);
                    if let Some(key) = self.key_of.remove(&ev.id) {
                        self.by_key.remove(&key);
                    }
                }
            }
            if self.stopping {
                break;
            }
            if sleeps {
                burst_start = None;
            } else {
                // Zero-duration steps: keep stepping for up to ZERO_LATENCY_BURST before letting
                // the HTTP tasks run, so each wake-up carries several tokens per write.
                let (started, steps) =
                    burst_start.get_or_insert_with(|| (std::time::Instant::now(), 0));
                *steps += 1;
                let elapsed = started.elapsed();
                let done = (elapsed >= ZERO_LATENCY_BURST && *steps >= ZERO_LATENCY_BURST_STEPS)
                    || elapsed >= ZERO_LATENCY_BURST_MAX;
                if done || !self.engine.has_work() {
                    burst_start = None;
                    tokio::task::yield_now().await;
                }
            }
        }
        self.stopping = true;
        self.abort_all();
        // Requests queued behind the shutdown are answered as aborted, and later sends fail.
        self.rx.close();
        while let Ok(cmd) = self.rx.try_recv() {
            self.apply(cmd);
        }
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Add { key, request, slot } => {
                if self.stopping {
                    slot.publish(0, Some(Finish::Abort));
                    return;
                }
                self.last_cmd_s = self.clock.now_s();
                let id = self.engine.add_request(request, self.last_cmd_s);
                self.by_id.insert(id, slot);
                self.by_key.insert(key, id);
                self.key_of.insert(id, key);
            }
            Command::Abort { key } => {
                if let Some(id) = self.by_key.remove(&key) {
                    self.key_of.remove(&id);
                    // The client went away: vLLM cancels such a request without counting it
                    // among finished requests (see `Engine::cancel`).
                    self.last_cmd_s = self.clock.now_s();
                    self.engine.cancel(id, self.last_cmd_s);
                    if let Some(slot) = self.by_id.remove(&id) {
                        let produced = slot.progress().produced;
                        slot.publish(produced, Some(Finish::Abort));
                    }
                }
            }
            Command::Metrics(tx) => {
                let _ = tx.send(self.engine.render_metrics(self.clock.now_s()));
            }
            Command::Dcgm(tx) => {
                let _ = tx.send(self.engine.render_dcgm(self.clock.now_s()));
            }
            Command::Shutdown => self.stopping = true,
        }
    }

    fn abort_all(&mut self) {
        let now = self.clock.now_s();
        for (id, slot) in self.by_id.drain() {
            self.engine.abort(id, now);
            let produced = slot.progress().produced;
            slot.publish(produced, Some(Finish::Abort));
        }
        self.by_key.clear();
        self.key_of.clear();
    }
}

fn map_finish(f: FinishReason) -> Finish {
    match f {
        FinishReason::Stop => Finish::Stop,
        FinishReason::Length => Finish::Length,
        FinishReason::Abort => Finish::Abort,
    }
}
