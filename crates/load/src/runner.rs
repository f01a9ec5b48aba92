//! One load level, end to end, and the pre-flight probe of a target.
//!
//! A level runs in three phases on the caller's tokio runtime:
//! 1. **warm-up** (`warmup`): load is offered as in the window, but requests that start here are
//!    not recorded (caches, connection pool and batch sizes settle);
//! 2. **measurement window** (`measure`): every request that *starts* inside it is recorded,
//!    whatever its outcome, when it finishes;
//! 3. **drain**: no new requests; requests still in flight get up to `max(drain_min, E2E p99 so
//!    far)` (at most `drain_max`) to finish, then are cancelled and recorded as `client_cancel`.
//!
//! Closed loop runs `c` virtual users, each sending its next request when the previous one
//! ended (start = dispatch time), so `c` requests are in flight — except that a user whose request
//! was refused (HTTP 429/503) or failed in transport pauses first: `Retry-After`, else an
//! exponential back-off (see `Users` below). Open loop sends on the
//! schedule of [`crate::arrivals::ArrivalSchedule`]: a pacer thread sleeps to each intended time
//! (the OS timer with 1 µs timer slack, finer than tokio's 1 ms wheel); latency counts from the
//! intended time, and the send lag (actual − intended) is recorded per request. Without a
//! concurrency cap the pacer sends itself at the intended time: it writes a request the
//! dispatcher prepared ahead onto an idle pooled connection
//! ([`crate::client::Target::send_now`]), then spawns the task that awaits the answer, so the send
//! waits for no runtime worker (on a busy 2-core host, waiting for a worker to pick up a task
//! put 1.5–2 ms on the send lag's p99). When no idle connection is ready (the first requests,
//! or a new peak in flight), the task connects and sends. With a cap, the pacer wakes the dispatcher, and arrivals that
//! find the cap reached wait in a queue; their wait is send lag, and those still queued at the
//! window's end are recorded as `client_cancel` without a first token (their TTFT is censored,
//! see [`crate::recorder`]).
//!
//! The client's own CPU time (`getrusage`) over the level is recorded, so a report can warn when
//! the client, not the server, may have shaped the numbers.

use crate::arrivals::{ArrivalSchedule, LevelMode};
use crate::client::{
    Answer, CancellationFlag, Dispatched, PreparedRequest, RequestRecord, Target, server_message,
};
use crate::prompt::{ClassPlan, DrawnRequest, RequestMix};
use crate::recorder::{ClientUsage, LevelRecording, Silence, new_histogram};
use crate::workload::Endpoint;
use headroom_core::Outcome;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    run_level_with(
        target,
        classes,
        mode,
        warmup,
        measure,
        seed,
        cancel,
        &RunOptions::default(),
    )
    .await
}

struct Done {
    /// The request's start (see [`RequestRecord`]): its times count from here.
    start: Instant,
    in_window: bool,
    record: RequestRecord,
    /// The wait the server asked for when it refused the request (see [`Answer`]).
    retry_after: Option<Duration>,
    /// Closed loop: the virtual user that sent it ([`OPEN_LOOP`] in open loop).
    user: usize,
}

/// The `user` of an open-loop request: arrivals belong to no virtual user.
const OPEN_LOOP: usize = usize::MAX;

/// What reaches the dispatcher.
enum Msg {
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

/// Requests the dispatcher keeps prepared for the pacer (uncapped open loop): the arrivals of
/// 50 ms at the mean rate, 16 to 1,024, so a burst does not leave the pacer waiting for the
/// dispatcher to prepare the next one.
fn prepared_ahead(rate_per_s: f64) -> usize {
    (rate_per_s * 0.05).ceil().clamp(16.0, 1024.0) as usize
}

/// Sends one request and reports it; the task every launch spawns.
#[allow(clippy::too_many_arguments)]
fn request_task(
    target: Arc<Target>,
    p: PreparedRequest,
    sent: Option<Dispatched>,
    start: Instant,
    window_start: Instant,
    in_window: bool,
    user: usize,
    cancel: CancellationFlag,
    tx: mpsc::UnboundedSender<Msg>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let offset =
        u64::try_from(start.saturating_duration_since(window_start).as_nanos()).unwrap_or(u64::MAX);
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

/// What the pacer needs to launch requests itself (uncapped open loop).
struct DirectLaunch {
    handle: tokio::runtime::Handle,
    prepared: mpsc::Receiver<PreparedRequest>,
    target: Arc<Target>,
    cancel: CancellationFlag,
    window_start: Instant,
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

/// Requests in flight and the E2E of every success so far (warm-up included; sizes the drain).
struct Flight {
    in_flight: usize,
    in_window: u64,
    e2e_all: hdrhistogram::Histogram<u64>,
    sse_events: u64,
    /// Open loop: how late the pacer woke for each launch of the window, ns.
    pacer_late: hdrhistogram::Histogram<u64>,
    /// Requests that failed on the client's own limits ([`Outcome::ClientLimit`]), and the
    /// first one's message: the level is void, its window closes at once.
    client_limited: u64,
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
    /// Counts a request the pacer launched (open loop), in the window or in the warm-up.
    fn launched(&mut self, out: &mut LevelRecording, in_window: bool, late_ns: u64) {
        if in_window {
            out.started += 1;
            self.in_window += 1;
            self.pacer_late.saturating_record(late_ns);
        } else {
            out.warmup_started += 1;
        }
        self.in_flight += 1;
    }

    fn done(&mut self, d: Done, out: &mut LevelRecording, good: &[GoodputSlo]) {
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

/// As [`run_level`], with explicit options.
#[allow(clippy::too_many_arguments)]
pub async fn run_level_with(
    target: &Target,
    classes: &[ClassPlan],
    mode: LevelMode,
    warmup: Duration,
    measure: Duration,
    seed: u64,
    cancel: CancellationFlag,
    opts: &RunOptions,
) -> LevelRecording {
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
    // Whether the open-loop pacer got real-time priority (see `pace`).
    let pacer_realtime = Arc::new(AtomicBool::new(false));
    // With a check, the window may close early (check says so) or stay open up to
    // `measure_max`; without one it is exactly `measure`.
    let hard_end = window_start + opts.measure_max.max(measure);
    let mut window_end = if opts.check.is_some() {
        hard_end
    } else {
        window_start + measure
    };
    let check_every = opts.check_every.max(Duration::from_millis(50));
    let mut next_check = window_start + check_every;
    // Runs the check when due; returns the (possibly moved) window end.
    let run_check =
        |now: Instant, next_check: &mut Instant, out: &LevelRecording, end: Instant| match &opts
            .check
        {
            Some(chk) if now >= window_start && now >= *next_check => {
                *next_check = now + check_every;
                if chk(out, now - window_start) {
                    now
                } else {
                    end
                }
            }
            _ => end,
        };
    let mut steady_rng = crate::arrivals::seeded_rng(seed, 0x5EED_57A7);
    let level_cancel = cancel.child_token();
    let target = Arc::new(target.clone());
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut mix = RequestMix::new(classes, seed);
    let mut fl = Flight {
        in_flight: 0,
        in_window: 0,
        e2e_all: new_histogram(),
        sse_events: 0,
        pacer_late: new_histogram(),
        client_limited: 0,
        client_limit_msg: None,
        activity: Activity::new(window_start),
    };
    let next_request = |mix: &mut RequestMix<'_>| -> Option<PreparedRequest> {
        // A draw fails only when a tokenizer fails; the request is skipped.
        mix.next_request()
            .ok()
            .map(|d| PreparedRequest::encode(&d, target.model()))
    };
    let launch =
        |p: PreparedRequest, start: Instant, in_window: bool, user: usize, fl: &mut Flight| {
            fl.in_flight += 1;
            if in_window {
                fl.in_window += 1;
            }
            tokio::spawn(request_task(
                target.clone(),
                p,
                None,
                start,
                window_start,
                in_window,
                user,
                level_cancel.clone(),
                tx.clone(),
            ));
        };

    let mut interrupted = false;
    match mode {
        LevelMode::Concurrency(c) => {
            let c = c.max(1) as usize;
            let mut users = Users::new(c, seed);
            let mut initial_left = if opts.steady_start && !warmup.is_zero() {
                c
            } else {
                0
            };
            loop {
                let now = Instant::now();
                window_end = run_check(now, &mut next_check, &out, window_end);
                // A client out of descriptors or ports offers less load than asked: no use
                // measuring on.
                if now >= window_end || fl.client_limited > 0 {
                    break;
                }
                users.wake_due(now);
                while let Some(user) = users.ready.pop() {
                    let Some(mut d) = mix.next_request().ok() else {
                        users.ready.push(user);
                        break;
                    };
                    if initial_left > 0 {
                        initial_left -= 1;
                        let share: f64 = rand::RngExt::random(&mut steady_rng);
                        d.max_tokens = ((f64::from(d.max_tokens) * share).ceil() as u32).max(1);
                    }
                    let p = PreparedRequest::encode(&d, target.model());
                    let start = Instant::now();
                    let in_window = start >= window_start;
                    if in_window {
                        out.started += 1;
                    } else {
                        out.warmup_started += 1;
                    }
                    launch(p, start, in_window, user, &mut fl);
                }
                let wake = if opts.check.is_some() {
                    next_check.max(window_start).min(window_end)
                } else {
                    window_end
                };
                // A user's pause never outlasts the level: the loop ends at `window_end`
                // whoever is still pausing.
                let wake = users.next_wake().map_or(wake, |w| wake.min(w));
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => { interrupted = true; break; }
                    m = rx.recv() => {
                        if let Some(Msg::Done(d)) = m {
                            users.finished(d.user, &d.record.outcome, d.retry_after, Instant::now());
                            fl.done(d, &mut out, &opts.goodput);
                        }
                    }
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
                }
            }
        }
        LevelMode::Rate {
            rate_per_s,
            arrival,
            max_concurrency,
        } => {
            let cap = max_concurrency.map_or(usize::MAX, |m| m.max(1) as usize);
            let total = hard_end.saturating_duration_since(t0);
            let stop = Arc::new(AtomicBool::new(false));
            let pacer_realtime = pacer_realtime.clone();
            let ns_from_t0 = |at: Instant| {
                u64::try_from(at.saturating_duration_since(t0).as_nanos()).unwrap_or(u64::MAX)
            };
            let launch_until_ns = Arc::new(AtomicU64::new(ns_from_t0(window_end)));
            // Uncapped: the pacer launches requests prepared here ahead of time.
            let ahead = prepared_ahead(rate_per_s);
            let (prep_tx, prep_rx) = mpsc::channel::<PreparedRequest>(ahead);
            let mut prep_tx = Some(prep_tx);
            let direct = (max_concurrency.is_none()).then(|| DirectLaunch {
                handle: tokio::runtime::Handle::current(),
                prepared: prep_rx,
                target: target.clone(),
                cancel: level_cancel.clone(),
                window_start,
                launch_until_ns: launch_until_ns.clone(),
            });
            let refill =
                |mix: &mut RequestMix<'_>, prep_tx: &Option<mpsc::Sender<PreparedRequest>>| {
                    if let Some(ptx) = prep_tx
                        && let Some(p) = next_request(mix)
                    {
                        // Never full: one is sent per one the pacer took.
                        let _ = ptx.try_send(p);
                    }
                };
            let spares = Spares::new(rate_per_s, &target);
            if direct.is_some() {
                for _ in 0..ahead {
                    refill(&mut mix, &prep_tx);
                }
                spares.top_up(&target);
            } else {
                prep_tx = None;
            }
            let pacer = match ArrivalSchedule::new(rate_per_s, arrival, seed) {
                Ok(schedule) => {
                    let stop = stop.clone();
                    let tx = tx.clone();
                    let want_rt = opts.pacer_realtime;
                    let rt = pacer_realtime.clone();
                    match std::thread::Builder::new()
                        .name("headroom-pacer".into())
                        .spawn(move || pace(schedule, t0, total, want_rt, &rt, &tx, &stop, direct))
                    {
                        Ok(h) => Some(h),
                        Err(e) => {
                            out.aborted = Some(format!("cannot start the pacer thread: {e}"));
                            None
                        }
                    }
                }
                Err(e) => {
                    out.aborted = Some(format!("no arrival schedule: {e}"));
                    None
                }
            };
            let mut backlog: VecDeque<(Instant, PreparedRequest)> = VecDeque::new();
            let mut pending = if prep_tx.is_none() {
                next_request(&mut mix)
            } else {
                None
            };
            loop {
                let now = Instant::now();
                let before = window_end;
                window_end = run_check(now, &mut next_check, &out, window_end);
                if window_end != before {
                    launch_until_ns.store(ns_from_t0(window_end), Ordering::Relaxed);
                }
                // A client out of descriptors or ports offers less load than asked: no use
                // measuring on.
                if now >= window_end || fl.client_limited > 0 {
                    break;
                }
                let wake = if opts.check.is_some() {
                    next_check.max(window_start).min(window_end)
                } else {
                    window_end
                };
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => { interrupted = true; break; }
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
                    m = rx.recv() => match m {
                        None => break,
                        Some(Msg::Launched { in_window, late_ns }) => {
                            fl.launched(&mut out, in_window, late_ns);
                            refill(&mut mix, &prep_tx);
                            spares.top_up(&target);
                        }
                        Some(Msg::Tick(intended, late_ns)) => {
                            let Some(p) = pending.take() else { break };
                            let in_window = intended >= window_start;
                            if in_window {
                                fl.pacer_late.saturating_record(late_ns);
                                out.started += 1;
                            } else {
                                out.warmup_started += 1;
                            }
                            if fl.in_flight < cap {
                                launch(p, intended, in_window, OPEN_LOOP, &mut fl);
                            } else {
                                backlog.push_back((intended, p));
                            }
                            pending = next_request(&mut mix);
                        }
                        Some(Msg::Done(d)) => {
                            fl.done(d, &mut out, &opts.goodput);
                            while fl.in_flight < cap {
                                let Some((intended, p)) = backlog.pop_front() else { break };
                                let in_window = intended >= window_start;
                                launch(p, intended, in_window, OPEN_LOOP, &mut fl);
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
                out.aborted = Some(format!("the pacer thread panicked: {why}"));
            }
            // Every launch is now in the channel: count them (and whatever finished) before
            // the drain decides what is still in flight.
            while let Ok(m) = rx.try_recv() {
                match m {
                    Msg::Launched { in_window, late_ns } => {
                        fl.launched(&mut out, in_window, late_ns);
                    }
                    Msg::Done(d) => fl.done(d, &mut out, &opts.goodput),
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
                let age = u64::try_from(now.saturating_duration_since(intended).as_nanos())
                    .unwrap_or(u64::MAX);
                let record = unsent(&p, intended, window_start, age);
                if let Some(c) = out.classes.get_mut(p.class) {
                    c.record(&record);
                }
                out.cancelled_at_end += 1;
            }
        }
    }

    let window_closed = Instant::now();
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
    level_cancel.cancel();
    drop(tx);
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

/// The pacer: at real-time priority when asked (`want_realtime`) and the OS allows it
/// (`realtime` says whether it did), sleeps to each intended send time, then launches the
/// request itself (`direct`: a request prepared by the dispatcher, spawned on its
/// runtime) or hands the time to the dispatcher, until the level's end or `stop`.
#[allow(clippy::too_many_arguments)]
fn pace(
    schedule: ArrivalSchedule,
    t0: Instant,
    total: Duration,
    want_realtime: bool,
    realtime: &AtomicBool,
    tx: &mpsc::UnboundedSender<Msg>,
    stop: &AtomicBool,
    mut direct: Option<DirectLaunch>,
) {
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
                let sent = d.target.send_now(&p);
                let in_window = at >= d.window_start;
                let ok = tx.send(Msg::Launched { in_window, late_ns }).is_ok();
                if ok {
                    d.handle.spawn(request_task(
                        d.target.clone(),
                        p,
                        sent,
                        at,
                        d.window_start,
                        in_window,
                        OPEN_LOOP,
                        d.cancel.clone(),
                        tx.clone(),
                    ));
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

fn unsent(
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

/// One served model from `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelInfo {
    /// Model id (the name requests use).
    pub id: String,
    /// vLLM's `max_model_len`, when listed.
    pub max_model_len: Option<u64>,
}

/// What the probe learnt about the server.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerInfo {
    /// Base URL (no credentials).
    pub base_url: String,
    /// Served models, in the server's order.
    pub models: Vec<ModelInfo>,
    /// The model the run will use (given, or the first served).
    pub model: String,
    /// `GET /version` → `version`, when the server has it (vLLM does).
    pub version: Option<String>,
    /// `GET /v1/models` as returned.
    pub models_raw: serde_json::Value,
    /// `GET /version` as returned.
    pub version_raw: Option<serde_json::Value>,
    /// Things worth a warning (for example: no `usage` in the stream).
    pub notes: Vec<String>,
}

/// Why a target is not usable; every message says what to do next.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// Nothing answered.
    #[error(
        "cannot reach {url}: {reason}. Is the server running and listening on that address? (check the port, and that the URL is the OpenAI base URL, e.g. http://127.0.0.1:8000)"
    )]
    Unreachable {
        /// URL tried.
        url: String,
        /// Connection error.
        reason: String,
    },
    /// The server refused the credentials.
    #[error(
        "{url}: HTTP {status}: {message}. Pass the API key the server expects (headroom sweep --api-key-env VAR, with the key in VAR)"
    )]
    Unauthorized {
        /// URL tried.
        url: String,
        /// Status code.
        status: u16,
        /// Server's message.
        message: String,
    },
    /// `/v1/models` did not answer as an OpenAI-compatible server does.
    #[error(
        "{url}: {message}. Is this an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp)?"
    )]
    NotOpenAi {
        /// URL tried.
        url: String,
        /// What came back.
        message: String,
    },
    /// The requested model is not served.
    #[error("model `{requested}` is not served by {url}; served: {}. Use one of these names (workload `model:` or --model)", served.join(", "))]
    UnknownModel {
        /// URL.
        url: String,
        /// Model asked for.
        requested: String,
        /// Models served.
        served: Vec<String>,
    },
    /// The server lists no model.
    #[error("{url}/v1/models lists no model; is the server still loading?")]
    NoModels {
        /// URL.
        url: String,
    },
    /// The first (tiny) request was rejected with an HTTP status.
    #[error("the first request to {endpoint} was rejected: HTTP {status}: {message}")]
    FirstRequest {
        /// Endpoint path.
        endpoint: String,
        /// Status code.
        status: u16,
        /// Server's message.
        message: String,
    },
    /// The first request failed otherwise (transport, protocol, server error, timeout).
    #[error("the first request to {endpoint} failed ({outcome}): {message}")]
    FirstRequestFailed {
        /// Endpoint path.
        endpoint: String,
        /// Outcome label.
        outcome: String,
        /// Detail.
        message: String,
    },
}

/// Attempts of a probe request that meets a server error (HTTP 5xx).
const PROBE_ATTEMPTS: u32 = 4;
/// Pause before the first retry of a probe request; doubled before each next one.
const PROBE_BACKOFF: Duration = Duration::from_millis(200);

/// Checks a target before any load: `GET /v1/models` (reachable, OpenAI-compatible, the model is
/// served — a missing model resolves to the first served), `GET /version` (optional), and one
/// tiny streaming request (`max_tokens` 2) to each endpoint in `endpoints`, which must succeed,
/// or fail with a server error (HTTP 5xx) on each of [`PROBE_ATTEMPTS`] tries: that is a note in
/// [`ServerInfo::notes`], not an error, since a server's error rate is something to measure.
///
/// # Errors
/// [`ProbeError`] with the server's own message where it sent one (4xx, transport, timeout).
pub async fn probe(target: &Target, endpoints: &[Endpoint]) -> Result<ServerInfo, ProbeError> {
    let url = target.base_url().to_string();
    let (status, body) =
        target
            .get("/v1/models", 4 << 20)
            .await
            .map_err(|reason| ProbeError::Unreachable {
                url: url.clone(),
                reason,
            })?;
    if status.as_u16() == 401 || status.as_u16() == 403 {
        return Err(ProbeError::Unauthorized {
            url: format!("{url}/v1/models"),
            status: status.as_u16(),
            message: server_message(&body),
        });
    }
    if !status.is_success() {
        return Err(ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: format!("HTTP {}: {}", status.as_u16(), server_message(&body)),
        });
    }
    let models_raw: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: format!("not JSON ({e})"),
        })?;
    let models: Vec<ModelInfo> = models_raw
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or_else(|| ProbeError::NotOpenAi {
            url: format!("{url}/v1/models"),
            message: "no `data` list in the answer".into(),
        })?
        .iter()
        .filter_map(|m| {
            Some(ModelInfo {
                id: m.get("id")?.as_str()?.to_string(),
                max_model_len: m.get("max_model_len").and_then(serde_json::Value::as_u64),
            })
        })
        .collect();
    if models.is_empty() {
        return Err(ProbeError::NoModels { url });
    }
    let model = match target.model() {
        Some(m) => {
            if !models.iter().any(|x| x.id == m) {
                return Err(ProbeError::UnknownModel {
                    url,
                    requested: m.to_string(),
                    served: models.iter().map(|x| x.id.clone()).collect(),
                });
            }
            m.to_string()
        }
        None => models[0].id.clone(),
    };
    let version_raw = match target.get("/version", 64 << 10).await {
        Ok((s, b)) if s.is_success() => serde_json::from_slice::<serde_json::Value>(&b).ok(),
        _ => None,
    };
    let version = version_raw
        .as_ref()
        .and_then(|v| v.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);

    let t = target.with_model(&model);
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    for e in endpoints {
        if seen.contains(e) {
            continue;
        }
        seen.push(*e);
        let d = DrawnRequest {
            class: 0,
            endpoint: *e,
            prefix: Arc::from(""),
            prompt: "Hello".into(),
            requested_prompt_tokens: 1,
            max_tokens: 2,
            ignore_eos: false,
        };
        let p = PreparedRequest::encode(&d, Some(&model));
        let cancel = CancellationFlag::new();
        let probe_timeout = t.config().request_timeout.min(Duration::from_secs(60));
        // A server whose error rate is what the sweep is to measure fails some first requests:
        // a 5xx is retried, and after the last attempt it is a warning, not a stop. A 4xx (wrong
        // model, bad key) is the caller's to fix and stops at once.
        let mut server_errors = 0u32;
        let r = loop {
            let r = tokio::time::timeout(probe_timeout, t.send(&p, Instant::now(), &cancel)).await;
            let Ok(r) = r else {
                return Err(ProbeError::FirstRequestFailed {
                    endpoint: e.path().into(),
                    outcome: "timeout".into(),
                    message: format!("no complete answer within {} s", probe_timeout.as_secs()),
                });
            };
            match r.outcome {
                Outcome::HttpStatus(code) if code >= 500 => {
                    server_errors += 1;
                    if server_errors >= PROBE_ATTEMPTS {
                        break r;
                    }
                    tokio::time::sleep(PROBE_BACKOFF * 2u32.pow(server_errors - 1)).await;
                }
                _ => break r,
            }
        };
        if server_errors > 0 {
            notes.push(format!(
                "{}: the first request got a server error (HTTP 5xx) {server_errors} time{} of {}{}; the sweep measures the server's errors as they come",
                e.path(),
                if server_errors == 1 { "" } else { "s" },
                server_errors + u32::from(r.outcome.is_success()),
                if r.outcome.is_success() {
                    String::new()
                } else {
                    format!(
                        " (last: {})",
                        r.message.as_deref().unwrap_or_default()
                    )
                }
            ));
        }
        match r.outcome {
            Outcome::Stop | Outcome::Length => {}
            Outcome::HttpStatus(code) if code >= 500 => continue,
            Outcome::HttpStatus(code) => {
                return Err(ProbeError::FirstRequest {
                    endpoint: e.path().into(),
                    status: code,
                    message: r.message.unwrap_or_default(),
                });
            }
            other => {
                return Err(ProbeError::FirstRequestFailed {
                    endpoint: e.path().into(),
                    outcome: other.label(),
                    message: r.message.unwrap_or_default(),
                });
            }
        }
        if r.timing.output_tokens.is_none() || r.prompt_tokens.is_none() {
            notes.push(format!(
                "{}: the stream carried no `usage` although stream_options.include_usage was sent; token counts will be missing (the server's own counters still work)",
                e.path()
            ));
        }
        if r.timing.content_chunk_ns.is_empty() {
            notes.push(format!(
                "{}: the first request produced no text chunk; TTFT cannot be measured for answers like it",
                e.path()
            ));
        }
    }
    Ok(ServerInfo {
        base_url: url,
        models,
        model,
        version,
        models_raw,
        version_raw,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::ArrivalProcess;
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

    /// The refusal warning needs more than half of the window's requests refused (429 and 503
    /// together, over every class); 500s and transport failures are no refusals.
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

    /// Collects what the pacer sends for `schedule` from `t0` over `total`, capped open loop
    /// (the pacer hands each arrival to the dispatcher as a `Tick`).
    fn pace_ticks(t0: Instant, total: Duration, rate: f64) -> Vec<(Instant, u64)> {
        let schedule = ArrivalSchedule::new(rate, ArrivalProcess::Constant, 1).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (rt_flag, stop) = (AtomicBool::new(false), AtomicBool::new(false));
        pace(schedule, t0, total, false, &rt_flag, &tx, &stop, None);
        drop(tx);
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
