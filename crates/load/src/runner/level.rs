//! One level: its options, its phases and clock (warm-up, window, the checks that move the
//! window's end, drain), what is in flight, and how an ended request is recorded. The loops that
//! offer the load are `closed_loop` and `open_loop`; both drive a [`LevelRun`].

use super::{closed_loop, open_loop};
use crate::arrivals::LevelMode;
use crate::client::{Answer, CancellationFlag, Dispatched, PreparedRequest, RequestRecord, Target};
use crate::prompt::{ClassPlan, RequestMix};
use crate::recorder::{ClientUsage, LevelRecording, Silence, new_histogram};
use headroom_core::Outcome;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// Called during the measurement window, about every [`RunOptions::check_every`], with the
/// recording so far and the time since the window opened; returning `true` closes the window
/// now. The sweep uses it to stop once a breach is certain, and to extend an undecided window up
/// to [`RunOptions::measure_max`].
pub type LevelCheck = Arc<dyn Fn(&LevelRecording, Duration) -> bool + Send + Sync>;

/// Per-request thresholds for goodput (DistServe: a request is good when it succeeds and meets
/// every one given), nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GoodputSlo {
    /// TTFT at most this.
    pub ttft_ns: Option<u64>,
    /// TPOT at most this.
    pub tpot_ns: Option<u64>,
    /// E2E at most this.
    pub e2e_ns: Option<u64>,
}

impl GoodputSlo {
    /// The per-request thresholds of a class's objectives: each TTFT, TPOT and E2E objective's
    /// threshold (the smallest when a signal has several percentiles). ITL and queue-time
    /// objectives have no per-request form (one request has many gaps; the queue time is the
    /// server's) and error objectives are the success condition itself, as in vLLM's `bench
    /// serve --goodput ttft:… tpot:… e2el:…`.
    pub fn from_objectives(objectives: &[headroom_core::slo::Objective]) -> GoodputSlo {
        use headroom_core::LatencySignal;
        let mut g = GoodputSlo::default();
        for o in objectives {
            if let headroom_core::slo::Objective::Latency {
                signal,
                threshold_s,
                ..
            } = o
            {
                let ns = (threshold_s * 1e9).round() as u64;
                let slot = match signal {
                    LatencySignal::Ttft => &mut g.ttft_ns,
                    LatencySignal::Tpot => &mut g.tpot_ns,
                    LatencySignal::E2e => &mut g.e2e_ns,
                    LatencySignal::Itl | LatencySignal::QueueTime => continue,
                };
                *slot = Some(slot.map_or(ns, |v| v.min(ns)));
            }
        }
        g
    }

    /// Whether `r` succeeded and met every threshold.
    pub fn is_good(&self, r: &RequestRecord) -> bool {
        if !r.outcome.is_success() {
            return false;
        }
        let ok = |lim: Option<u64>, v: Option<u64>| match (lim, v) {
            (None, _) => true,
            (Some(l), Some(v)) => v <= l,
            (Some(_), None) => false,
        };
        ok(self.ttft_ns, r.timing.ttft_ns())
            && (self.tpot_ns.is_none()
                || r.timing
                    .tpot_ns()
                    .is_none_or(|t| t <= self.tpot_ns.unwrap_or(u64::MAX)))
            && ok(self.e2e_ns, Some(r.timing.end_ns))
    }
}

/// Settings of a level beyond the workload's.
#[derive(Clone)]
pub struct RunOptions {
    /// Shortest drain after the window (default 2 s).
    pub drain_min: Duration,
    /// Longest drain after the window (default 120 s).
    pub drain_max: Duration,
    /// Longest measurement window when `check` keeps it open past `measure` (default: zero,
    /// meaning `measure`: no extension).
    pub measure_max: Duration,
    /// Window control, see [`LevelCheck`]. Without it the window is exactly `measure`.
    pub check: Option<LevelCheck>,
    /// How often `check` runs (default 1 s).
    pub check_every: Duration,
    /// Closed loop only: start near steady state. The first `c` requests (all in the warm-up,
    /// never recorded) get a uniformly drawn share of their `max_tokens`, as if caught mid-way,
    /// so completions — and the recorded starts that follow them — are spread out instead of
    /// arriving as one synchronised wave (default true).
    pub steady_start: bool,
    /// Goodput thresholds per class (index of the class in the level's plans); a class
    /// without an entry counts every success as good.
    pub goodput: Vec<GoodputSlo>,
    /// Open loop only: run the pacer thread at the lowest real-time priority (Linux
    /// `SCHED_FIFO` 1) when the OS allows it (CAP_SYS_NICE), so a busy host wakes it on time for
    /// each send (default true). The benchmark `client_throughput` (run `open`) compares both.
    pub pacer_realtime: bool,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("drain_min", &self.drain_min)
            .field("drain_max", &self.drain_max)
            .field("measure_max", &self.measure_max)
            .field("check", &self.check.as_ref().map(|_| "<fn>"))
            .field("check_every", &self.check_every)
            .field("steady_start", &self.steady_start)
            .field("goodput", &self.goodput)
            .field("pacer_realtime", &self.pacer_realtime)
            .finish()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            drain_min: Duration::from_secs(2),
            drain_max: Duration::from_secs(120),
            measure_max: Duration::ZERO,
            check: None,
            check_every: Duration::from_secs(1),
            steady_start: true,
            goodput: Vec::new(),
            pacer_realtime: true,
        }
    }
}

/// Process CPU time (user + system) in seconds, from `getrusage(RUSAGE_SELF)`.
pub fn process_cpu_s() -> f64 {
    rusage_cpu_s(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of the calling thread in seconds, from `getrusage(RUSAGE_THREAD)`
/// (Linux); on other systems, the process's.
pub fn thread_cpu_s() -> f64 {
    #[cfg(target_os = "linux")]
    {
        rusage_cpu_s(libc::RUSAGE_THREAD)
    }
    #[cfg(not(target_os = "linux"))]
    {
        rusage_cpu_s(libc::RUSAGE_SELF)
    }
}

fn rusage_cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: `getrusage` writes into the zeroed struct we own and reads nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; `who` is a constant the call accepts.
    let rc = unsafe { libc::getrusage(who, &raw mut ru) };
    if rc != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs one load level with default [`RunOptions`] (see the module docs).
///
/// `classes` are drawn by weight (one class for a per-class phase, all for the mix); `seed`
/// fixes arrivals, the mix and the prompts; `cancel` stops the level early (Ctrl-C): in-flight
/// requests are cancelled and the partial recording is returned with `interrupted` set.
pub async fn run_level(
    target: &Target,
    classes: &[ClassPlan],
    mode: LevelMode,
    warmup: Duration,
    measure: Duration,
    seed: u64,
    cancel: CancellationFlag,
) -> LevelRecording {
    let spec = LevelSpec {
        mode,
        warmup,
        measure,
        seed,
    };
    run_level_with(target, classes, spec, cancel, &RunOptions::default()).await
}

pub(super) struct Done {
    /// The request's start (see [`RequestRecord`]): its times count from here.
    pub(super) start: Instant,
    pub(super) in_window: bool,
    pub(super) record: RequestRecord,
    /// The wait the server asked for when it refused the request (see [`Answer`]).
    pub(super) retry_after: Option<Duration>,
    /// Closed loop: the virtual user that sent it ([`OPEN_LOOP`] in open loop).
    pub(super) user: usize,
}

/// The `user` of an open-loop request: arrivals belong to no virtual user.
pub(super) const OPEN_LOOP: usize = usize::MAX;

/// What reaches the dispatcher.
pub(super) enum Msg {
    /// A request finished.
    Done(Done),
    /// Capped open loop: an arrival is due (intended send time), and how late the pacer woke
    /// for it (ns).
    Tick(Instant, u64),
    /// Uncapped open loop: the pacer launched a prepared request. Sent before the request's task
    /// is spawned, so it always precedes that request's `Done`.
    Launched {
        /// Its intended time is inside the measurement window.
        in_window: bool,
        /// How late the pacer thread woke for it, ns.
        late_ns: u64,
    },
}

/// What every request of a level is launched with: the target, the window's start (a request's
/// offset counts from it), the level's cancel flag (a child of the caller's, cancelled at the
/// drain's end) and the channel requests report on.
#[derive(Clone)]
pub(super) struct Launcher {
    pub(super) target: Arc<Target>,
    pub(super) window_start: Instant,
    pub(super) cancel: CancellationFlag,
    pub(super) tx: mpsc::UnboundedSender<Msg>,
}

impl Launcher {
    /// The task every launch spawns: awaits the answer to `p` (started at `start`; `sent`: the
    /// pacer already wrote it) and reports it as `Done`; `user` is the closed loop's virtual
    /// user ([`OPEN_LOOP`] in open loop).
    pub(super) fn task(
        &self,
        p: PreparedRequest,
        sent: Option<Dispatched>,
        start: Instant,
        in_window: bool,
        user: usize,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let offset = u64::try_from(
            start
                .saturating_duration_since(self.window_start)
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        let (target, cancel, tx) = (self.target.clone(), self.cancel.clone(), self.tx.clone());
        async move {
            let Answer {
                mut record,
                retry_after,
            } = target.answer(&p, sent, start, &cancel).await;
            record.start_offset_ns = offset;
            let _ = tx.send(Msg::Done(Done {
                start,
                in_window,
                record,
                retry_after,
                user,
            }));
        }
    }
}

/// Requests in flight and the E2E of every success so far (warm-up included; sizes the drain).
pub(super) struct Flight {
    pub(super) in_flight: usize,
    pub(super) in_window: u64,
    e2e_all: hdrhistogram::Histogram<u64>,
    sse_events: u64,
    /// Open loop: how late the pacer woke for each launch of the window, ns.
    pub(super) pacer_late: hdrhistogram::Histogram<u64>,
    /// Requests that failed on the client's own limits ([`Outcome::ClientLimit`]), and the
    /// first one's message: the level is void, its window closes at once.
    pub(super) client_limited: u64,
    client_limit_msg: Option<String>,
    /// When chunks arrived and requests ended, for the longest silence of the window.
    activity: Activity,
}

/// Which slices of the level, counted from the window's start, saw a content chunk arrive or a
/// request end, and how many requests were in flight in each: a server that froze leaves a run
/// of slices with requests in flight and nothing arriving. 10 ms slices, at most an hour of them
/// (1.8 MB), whatever the request rate.
struct Activity {
    from: Instant,
    /// A bit per slice: something arrived.
    seen: Vec<u64>,
    /// Requests starting minus requests ending, per slice (the in-flight count's differences).
    flight: Vec<i32>,
}

impl Activity {
    const SLICE_NS: u64 = 10_000_000;
    /// Slices kept: one hour.
    const MAX_SLICES: usize = 360_000;

    fn new(from: Instant) -> Activity {
        Activity {
            from,
            seen: Vec::new(),
            flight: Vec::new(),
        }
    }

    /// The slice of `at` (0 before the window), at most [`Activity::MAX_SLICES`].
    fn slice(&self, at: Instant) -> usize {
        let ns = at.saturating_duration_since(self.from).as_nanos() / u128::from(Self::SLICE_NS);
        usize::try_from(ns).map_or(Self::MAX_SLICES, |i| i.min(Self::MAX_SLICES))
    }

    /// A request's chunks, its end and the span it was in flight.
    fn request(&mut self, start: Instant, r: &RequestRecord) {
        let end = start + Duration::from_nanos(r.timing.end_ns);
        for at in r
            .timing
            .content_chunk_ns
            .iter()
            .map(|&ns| start + Duration::from_nanos(ns))
        {
            self.mark(at);
        }
        self.mark(end);
        let (a, b) = (self.slice(start), self.slice(end) + 1);
        if self.flight.len() <= b {
            self.flight.resize(b + 1, 0);
        }
        self.flight[a] += 1;
        self.flight[b] -= 1;
    }

    /// Something arrived at `at` (before the window: ignored).
    fn mark(&mut self, at: Instant) {
        if at < self.from {
            return;
        }
        let i = self.slice(at);
        if i >= Self::MAX_SLICES {
            return;
        }
        if self.seen.len() <= i / 64 {
            self.seen.resize(i / 64 + 1, 0);
        }
        self.seen[i / 64] |= 1 << (i % 64);
    }

    /// The longest run of slices in the first `window` of the level's window with a request in
    /// flight and nothing arriving.
    fn longest_silence(&self, window: Duration) -> Option<Silence> {
        let n = usize::try_from(window.as_nanos() / u128::from(Self::SLICE_NS))
            .unwrap_or(usize::MAX)
            .min(Self::MAX_SLICES);
        let seen = |i: usize| {
            self.seen
                .get(i / 64)
                .is_some_and(|w| w & (1 << (i % 64)) != 0)
        };
        let (mut best, mut run_from, mut run, mut in_flight) = (None::<(usize, usize)>, 0, 0, 0i64);
        for i in 0..n {
            in_flight += i64::from(self.flight.get(i).copied().unwrap_or(0));
            if seen(i) || in_flight <= 0 {
                run = 0;
                continue;
            }
            if run == 0 {
                run_from = i;
            }
            run += 1;
            if best.is_none_or(|(_, len)| run > len) {
                best = Some((run_from, run));
            }
        }
        let s = Self::SLICE_NS as f64 / 1e9;
        best.map(|(from, len)| Silence {
            from_s: from as f64 * s,
            len_s: len as f64 * s,
        })
    }
}

impl Flight {
    /// Nothing in flight yet; silences count from `window_start`.
    fn new(window_start: Instant) -> Flight {
        Flight {
            in_flight: 0,
            in_window: 0,
            e2e_all: new_histogram(),
            sse_events: 0,
            pacer_late: new_histogram(),
            client_limited: 0,
            client_limit_msg: None,
            activity: Activity::new(window_start),
        }
    }

    /// Counts a request the pacer launched (open loop), in the window or in the warm-up.
    pub(super) fn launched(&mut self, out: &mut LevelRecording, in_window: bool, late_ns: u64) {
        if in_window {
            out.started += 1;
            self.in_window += 1;
            self.pacer_late.saturating_record(late_ns);
        } else {
            out.warmup_started += 1;
        }
        self.in_flight += 1;
    }

    pub(super) fn done(&mut self, d: Done, out: &mut LevelRecording, good: &[GoodputSlo]) {
        self.in_flight -= 1;
        self.activity.request(d.start, &d.record);
        if d.record.outcome == Outcome::ClientLimit {
            self.client_limited += 1;
            if self.client_limit_msg.is_none() {
                self.client_limit_msg.clone_from(&d.record.message);
            }
        }
        self.sse_events += u64::from(d.record.sse_events);
        if d.record.outcome.is_success() {
            self.e2e_all.saturating_record(d.record.timing.end_ns);
        }
        if d.in_window {
            self.in_window -= 1;
        }
        record_finished(out, &d.record, d.in_window, good);
    }
}

/// How a level's window ended, for [`LevelRecording::window_note`]: `interrupted`, `full`, an
/// early stop (a breach was certain) or an extension (a percentile was undecided), from the
/// window actually used (`window_s`, seconds) against the planned `measure`.
pub fn window_note(interrupted: bool, checked: bool, window_s: f64, measure: Duration) -> String {
    if interrupted {
        "interrupted".to_string()
    } else if !checked {
        "full".to_string()
    } else if window_s + 0.5 < measure.as_secs_f64() {
        format!(
            "early stop after {window_s:.1} s: a breach was certain on the requests finished by then (the verdict uses every request of the window, drained ones included)"
        )
    } else if window_s > measure.as_secs_f64() + 0.5 {
        format!("extended to {window_s:.1} s: a percentile was still undecided")
    } else {
        "full".to_string()
    }
}

/// Records one ended request into a level: every request counts in its class's level totals
/// (the error objective and the reconciliation); one that started in the window also feeds the
/// class's histograms and, when it met `good`'s thresholds for its class, its goodput. One
/// definition for every load generator (HTTP, the twin's virtual clock).
pub fn record_finished(
    out: &mut LevelRecording,
    r: &RequestRecord,
    in_window: bool,
    good: &[GoodputSlo],
) {
    if let Some(t) = out.class_totals.get_mut(r.class) {
        t.add(r);
    }
    if in_window && let Some(c) = out.classes.get_mut(r.class) {
        c.record(r);
        if good.get(r.class).copied().unwrap_or_default().is_good(r) {
            c.goodput += 1;
        }
    }
}

/// What a level's loop works with: its clock and window, the channel its requests report on,
/// the mix it draws from, and the recording so far. [`run_level_with`] sets it up, a loop
/// (`closed_loop::run` or `open_loop::run`) offers the load until the window closes, and the
/// drain finishes it.
pub(super) struct LevelRun<'a> {
    pub(super) launcher: Launcher,
    pub(super) opts: &'a RunOptions,
    /// Seeds arrivals, the mix, the users' pauses and the steady start.
    pub(super) seed: u64,
    pub(super) warmup: Duration,
    /// When the level started.
    pub(super) t0: Instant,
    /// The latest the window may close (`measure`, or `measure_max` with a check).
    pub(super) hard_end: Instant,
    /// When the window closes; a check may move it earlier.
    pub(super) window_end: Instant,
    check_every: Duration,
    next_check: Instant,
    /// The caller's flag (Ctrl-C): the loops stop on it.
    pub(super) cancel: CancellationFlag,
    pub(super) rx: mpsc::UnboundedReceiver<Msg>,
    pub(super) mix: RequestMix<'a>,
    pub(super) fl: Flight,
    pub(super) out: LevelRecording,
    /// Whether the open-loop pacer got real-time priority (see `open_loop`).
    pub(super) pacer_realtime: Arc<AtomicBool>,
}

impl LevelRun<'_> {
    /// Runs the check when due (see [`LevelCheck`]) and closes the window now when it says so;
    /// true when the window's end moved.
    pub(super) fn check(&mut self, now: Instant) -> bool {
        let Some(chk) = &self.opts.check else {
            return false;
        };
        if now >= self.launcher.window_start && now >= self.next_check {
            self.next_check = now + self.check_every;
            if chk(&self.out, now - self.launcher.window_start) {
                let moved = self.window_end != now;
                self.window_end = now;
                return moved;
            }
        }
        false
    }

    /// When a loop must look again though nothing arrived: the next check, or the window's end.
    pub(super) fn wake(&self) -> Instant {
        if self.opts.check.is_some() {
            self.next_check
                .max(self.launcher.window_start)
                .min(self.window_end)
        } else {
            self.window_end
        }
    }

    /// The next request of the mix, encoded; `None` when a draw fails (only a tokenizer fails),
    /// and the request is skipped.
    pub(super) fn next_request(&mut self) -> Option<PreparedRequest> {
        self.mix
            .next_request()
            .ok()
            .map(|d| PreparedRequest::encode(&d, self.launcher.target.model()))
    }

    /// Spawns the task that sends `p` (started at `start`) and reports it; `user` is the
    /// closed loop's virtual user ([`OPEN_LOOP`] in open loop).
    pub(super) fn launch(
        &mut self,
        p: PreparedRequest,
        start: Instant,
        in_window: bool,
        user: usize,
    ) {
        self.fl.in_flight += 1;
        if in_window {
            self.fl.in_window += 1;
        }
        tokio::spawn(self.launcher.task(p, None, start, in_window, user));
    }

    /// Records a request that ended.
    pub(super) fn done(&mut self, d: Done) {
        self.fl.done(d, &mut self.out, &self.opts.goodput);
    }
}

/// What one level offers and for how long: the load, the window and the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelSpec {
    /// Closed loop at a concurrency, or open loop at a rate.
    pub mode: LevelMode,
    /// Warm-up: requests started in it are not recorded.
    pub warmup: Duration,
    /// Measurement window (extended up to [`RunOptions::measure_max`] while the check says so).
    pub measure: Duration,
    /// Seeds arrivals, the mix and the prompts.
    pub seed: u64,
}

/// As [`run_level`], with the level in a [`LevelSpec`] and explicit options.
pub async fn run_level_with(
    target: &Target,
    classes: &[ClassPlan],
    spec: LevelSpec,
    cancel: CancellationFlag,
    opts: &RunOptions,
) -> LevelRecording {
    let LevelSpec {
        mode,
        warmup,
        measure,
        seed,
    } = spec;
    let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
    let mut out = LevelRecording::new(mode.level(), mode.load_mode(), &names);
    out.warmup_s = warmup.as_secs_f64();
    out.client.cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    if classes.is_empty() {
        return out;
    }
    let cpu0 = process_cpu_s();
    let t0 = Instant::now();
    let window_start = t0 + warmup;
    // With a check, the window may close early (check says so) or stay open up to
    // `measure_max`; without one it is exactly `measure`.
    let hard_end = window_start + opts.measure_max.max(measure);
    let window_end = if opts.check.is_some() {
        hard_end
    } else {
        window_start + measure
    };
    let check_every = opts.check_every.max(Duration::from_millis(50));
    let (tx, rx) = mpsc::unbounded_channel::<Msg>();
    let mut lv = LevelRun {
        launcher: Launcher {
            target: Arc::new(target.clone()),
            window_start,
            cancel: cancel.child_token(),
            tx,
        },
        opts,
        seed,
        warmup,
        t0,
        hard_end,
        window_end,
        check_every,
        next_check: window_start + check_every,
        cancel,
        rx,
        mix: RequestMix::new(classes, seed),
        fl: Flight::new(window_start),
        out,
        pacer_realtime: Arc::new(AtomicBool::new(false)),
    };

    let interrupted = match mode {
        LevelMode::Concurrency(c) => closed_loop::run(&mut lv, c).await,
        LevelMode::Rate {
            rate_per_s,
            arrival,
            max_concurrency,
        } => open_loop::run(&mut lv, rate_per_s, arrival, max_concurrency).await,
    };

    let window_closed = Instant::now();
    let LevelRun {
        window_end,
        cancel,
        launcher,
        mut rx,
        mut fl,
        mut out,
        pacer_realtime,
        ..
    } = lv;
    out.window_s = window_closed
        .min(window_end)
        .saturating_duration_since(window_start)
        .as_secs_f64();
    out.started_unix_s = unix_s_at(window_start);
    out.interrupted = interrupted;
    out.window_note = window_note(interrupted, opts.check.is_some(), out.window_s, measure);

    // Drain: let in-flight requests finish, within a bound sized by the E2E seen so far.
    let p99 = if fl.e2e_all.is_empty() {
        opts.drain_max
    } else {
        Duration::from_nanos(fl.e2e_all.value_at_quantile(0.99))
    };
    let drain = if interrupted {
        Duration::ZERO
    } else {
        p99.max(opts.drain_min).min(opts.drain_max)
    };
    let drain_deadline = tokio::time::Instant::from_std(window_closed + drain);
    while fl.in_flight > 0 {
        tokio::select! {
            biased;
            () = cancel.cancelled() => { out.interrupted = true; break; }
            m = rx.recv() => match m {
                Some(Msg::Done(d)) => fl.done(d, &mut out, &opts.goodput),
                Some(_) => {}
                None => break,
            },
            () = tokio::time::sleep_until(drain_deadline) => break,
        }
    }
    out.drain_s = window_closed.elapsed().as_secs_f64();
    // Whatever is left is cancelled; the cancelled requests report back at once.
    out.cancelled_at_end += fl.in_window;
    launcher.cancel.cancel();
    drop(launcher);
    while fl.in_flight > 0 {
        match rx.recv().await {
            Some(Msg::Done(d)) => fl.done(d, &mut out, &opts.goodput),
            Some(_) => {}
            None => break,
        }
    }
    out.longest_silence = fl
        .activity
        .longest_silence(Duration::from_secs_f64(out.window_s));
    if fl.client_limited > 0 && out.aborted.is_none() {
        out.aborted = Some(client_limit_abort(
            fl.client_limited,
            fl.client_limit_msg.as_deref().unwrap_or("no message"),
        ));
    }
    out.client = ClientUsage {
        process_cpu_s: process_cpu_s() - cpu0,
        wall_s: t0.elapsed().as_secs_f64(),
        cores: out.client.cores,
        sse_events: fl.sse_events,
        pacer_late_p99_ns: if fl.pacer_late.is_empty() {
            0
        } else {
            fl.pacer_late.value_at_quantile(0.99)
        },
        pacer_realtime: pacer_realtime.load(Ordering::Relaxed),
    };
    out
}

/// Why a level whose requests hit the client's own limits ([`Outcome::ClientLimit`]) is void:
/// `n` such requests, the first one's `message`, and what to do.
fn client_limit_abort(n: u64, message: &str) -> String {
    format!(
        "the client, not the server, failed {n} request(s): {message}. The load offered was less than asked and the server saw none of them, so the level has no verdict; raise the client's open-file limit (ulimit -n, LimitNOFILE= under systemd, docker run's ulimit option nofile=), widen net.ipv4.ip_local_port_range, or offer less load per client"
    )
}

fn unix_s_at(at: Instant) -> f64 {
    let now_i = Instant::now();
    let now_s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    if at <= now_i {
        now_s - (now_i - at).as_secs_f64()
    } else {
        now_s + (at - now_i).as_secs_f64()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::PreparedRequest;
    use crate::prompt::DrawnRequest;
    use crate::runner::open_loop::unsent;
    use crate::workload::Endpoint;
    use headroom_core::LatencySignal;
    use headroom_core::slo::Objective;

    fn lat(signal: LatencySignal, percentile: f64, threshold_s: f64) -> Objective {
        Objective::Latency {
            signal,
            percentile,
            threshold_s,
        }
    }

    /// Per-request thresholds come from TTFT, TPOT and E2E objectives (the smallest of a
    /// signal's percentiles); ITL, queue time and errors give none.
    #[test]
    fn goodput_thresholds_from_objectives() {
        let g = GoodputSlo::from_objectives(&[
            lat(LatencySignal::Ttft, 95.0, 0.25),
            lat(LatencySignal::Ttft, 99.0, 0.5),
            lat(LatencySignal::Itl, 95.0, 0.05),
            lat(LatencySignal::QueueTime, 95.0, 0.3),
            lat(LatencySignal::E2e, 99.0, 20.0),
            Objective::ErrorRate { max_ratio: 0.005 },
        ]);
        assert_eq!(
            g,
            GoodputSlo {
                ttft_ns: Some(250_000_000),
                tpot_ns: None,
                e2e_ns: Some(20_000_000_000),
            }
        );
        let g = GoodputSlo::from_objectives(&[lat(LatencySignal::Tpot, 90.0, 0.04)]);
        assert_eq!(g.tpot_ns, Some(40_000_000));
        assert_eq!(GoodputSlo::from_objectives(&[]), GoodputSlo::default());
    }

    /// A silence is a run of 10 ms slices with a request in flight and nothing arriving; time
    /// with nothing in flight is none, and a request from before the window counts from its start.
    #[test]
    fn silences_count_only_with_requests_in_flight() {
        const MS: u64 = 1_000_000;
        let t0 = Instant::now();
        let ms = |m: u64| Duration::from_millis(m);
        let record = |chunks: &[u64], end_ms: u64| {
            let mut r = unsent(
                &PreparedRequest::encode(
                    &DrawnRequest {
                        class: 0,
                        endpoint: Endpoint::Completions,
                        prefix: Arc::from(""),
                        prompt: "x".into(),
                        requested_prompt_tokens: 1,
                        max_tokens: 4,
                        ignore_eos: false,
                    },
                    None,
                ),
                t0,
                t0,
                0,
            );
            r.timing.content_chunk_ns = chunks.iter().map(|c| c * MS).collect();
            r.timing.end_ns = end_ms * MS;
            r
        };
        let mut a = Activity::new(t0);
        // Busy 0–1 s, then a request in flight from 2 s that is silent until 4.5 s; nothing in
        // flight between 1 s and 2 s (an idle open loop is no stall).
        a.request(t0, &record(&[100, 500, 900], 1_000));
        a.request(t0 + ms(2_000), &record(&[2_500], 2_600));
        let s = a.longest_silence(ms(5_000)).unwrap();
        assert!(
            (s.from_s - 2.01).abs() < 0.02 && (s.len_s - 2.49).abs() < 0.02,
            "{s:?}"
        );
        // A request before the window counts from the window's start.
        let mut b = Activity::new(t0 + ms(1_000));
        b.request(t0, &record(&[1_500], 1_600));
        let s = b.longest_silence(ms(1_000)).unwrap();
        assert!(s.from_s < 0.01 && (s.len_s - 0.5).abs() < 0.02, "{s:?}");
        assert_eq!(Activity::new(t0).longest_silence(ms(1_000)), None);
    }
}
