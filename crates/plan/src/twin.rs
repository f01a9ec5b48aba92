//! One sweep level on the engine twin's virtual clock.
//!
//! The requests are the sweep's own: drawn by [`RequestMix`] from the phase's plans, encoded by
//! [`PreparedRequest::encode`] into the body the HTTP client would send, and parsed by the twin
//! server's [`parse_and_validate`] (chat template, context-window check, natural stop length), so
//! a planned level offers the engine exactly what a sweep of `headroom sim` would. The clock
//! then runs from engine step to engine step instead of in wall time: each token is seen at the
//! end of the step that produced it, as the twin's HTTP server streams it. What a network, an
//! HTTP stack and a client's CPU add is absent, so the figures are the engine's own (the twin's
//! frontend delay is part of the engine).
//!
//! Windows follow the HTTP runner's rules (`headroom_load::runner`): a closed loop starts all
//! its users at once, the first request of each with a uniformly drawn share of its
//! `max_tokens` (caught mid-way, so completions do not arrive in one wave); requests that
//! *start* in the measurement window are recorded; the sweep's check closes the window early or
//! extends it; in-flight requests then drain (bounded by their E2E p99 so far, at most
//! `drain_max`) and the rest are cancelled. Scrapes of the engine's `/metrics` and of its
//! dcgm-exporter are rendered before the level, when the warm-up ends, every
//! [`TwinLevels::scrape_every`] of virtual time, and after the drain.

use headroom_core::Outcome;
use headroom_core::signal::RequestTiming;
use headroom_load::arrivals::{ArrivalSchedule, LevelMode, SeededRng, seeded_rng};
use headroom_load::client::{CancellationFlag, PreparedRequest, RequestRecord};
use headroom_load::prompt::{DrawnRequest, RequestMix};
use headroom_load::recorder::{LevelRecording, new_histogram};
use headroom_load::runner::{record_finished, window_note};
use headroom_load::workload::Endpoint;
use headroom_signals::Scrape;
use headroom_sim::server::protocol::{self, ValidationContext};
use headroom_sim::{Engine, EngineConfig, FinishReason, NewRequest, RequestId};
use headroom_sweep::controller::{LevelMeasurer, LevelRequest, Measured};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

/// Most requests an open-loop level may hold in flight or waiting to be sent (under the
/// workload's `max_concurrency`) before it stops without a verdict. A rate that outruns the
/// engine grows this by the excess every simulated second, and every request holds its prompt
/// (~1 KB with a short one); the HTTP client is bounded the same way by its open-file limit.
/// The first level an automatic search finds failing offers at most twice the capacity, and its
/// window's first samples (the requests queued behind the warm-up's backlog) arrive when about
/// 120 s × the capacity are outstanding: below this bound up to ~2,000 req/s of capacity.
pub const OPEN_LOOP_MAX_OUTSTANDING: usize = 1 << 18;
/// Most prompt tokens those requests may hold together (~5 bytes each in the twin): long
/// prompts lower [`OPEN_LOOP_MAX_OUTSTANDING`] to this over the longest prompt drawn.
pub const OPEN_LOOP_MAX_PROMPT_TOKENS: usize = 1 << 25;
/// The fewest requests the prompt-token bound lowers the cap to.
pub const OPEN_LOOP_MIN_OUTSTANDING: usize = 1_024;

/// Source name of the rendered engine scrapes (what the run directory's server view cites).
pub const ENGINE_SOURCE: &str = "twin (virtual clock) /metrics";
/// Source name of the rendered dcgm-exporter scrapes.
pub const DCGM_SOURCE: &str = "twin (virtual clock) dcgm-exporter /metrics";

/// Runs sweep levels on a fresh twin engine each, on its virtual clock.
#[derive(Debug, Clone)]
pub struct TwinLevels {
    /// The engine (GPU, model, dtype, parallelism, scheduler limits), resolved.
    pub cfg: EngineConfig,
    /// Unix time the first level's clock starts at, seconds: scrapes and windows carry
    /// `origin_unix_s + engine time`, so a run directory's timestamps are ordered and plausible.
    pub origin_unix_s: f64,
    /// Virtual time between periodic scrapes.
    pub scrape_every: Duration,
    /// Cap on engine steps per level (a defect guard; a level of an hour at 40 ms steps is
    /// 90,000).
    pub max_steps: u64,
    /// Ctrl-C or SIGTERM: a level stops at the next engine step (or within 256 sends) and is
    /// recorded as interrupted, as the HTTP runner records it.
    pub cancel: Option<CancellationFlag>,
}

impl TwinLevels {
    /// Levels on `cfg`, scraped every `scrape_every` of virtual time (a few dozen scrapes per
    /// level sample the gauges; each is ~30 KB in the run directory).
    pub fn new(cfg: EngineConfig, origin_unix_s: f64, scrape_every: Duration) -> TwinLevels {
        TwinLevels {
            cfg,
            origin_unix_s,
            scrape_every,
            max_steps: 50_000_000,
            cancel: None,
        }
    }

    /// The same levels, stopped by `cancel`.
    pub fn with_cancel(mut self, cancel: CancellationFlag) -> TwinLevels {
        self.cancel = Some(cancel);
        self
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(CancellationFlag::is_cancelled)
    }

    fn context(&self) -> ValidationContext {
        ValidationContext {
            served_model_names: vec![self.cfg.served_model_name.clone()],
            max_model_len: self.cfg.max_model_len,
            vocab_size: self.cfg.model.vocab_size,
        }
    }
}

/// A request in flight on the virtual clock.
struct Flight {
    class: usize,
    user: Option<usize>,
    start_s: f64,
    send_lag_s: f64,
    in_window: bool,
    chunks_ns: Vec<u64>,
    prompt_tokens: u32,
    requested_prompt_tokens: u32,
    requested_max_tokens: u32,
    queue_s: Option<f64>,
}

impl Flight {
    fn record(&self, window_start_s: f64, end_s: f64, outcome: Outcome) -> RequestRecord {
        let ns = |s: f64| (s.max(0.0) * 1e9).round() as u64;
        let reached_stream =
            !matches!(outcome, Outcome::ClientCancel) || !self.chunks_ns.is_empty();
        RequestRecord {
            class: self.class,
            start_offset_ns: ns(self.start_s - window_start_s),
            send_lag_ns: ns(self.send_lag_s),
            timing: RequestTiming {
                content_chunk_ns: self.chunks_ns.clone(),
                end_ns: ns(end_s - self.start_s),
                output_tokens: reached_stream.then_some(self.chunks_ns.len() as u32),
            },
            server_queue_ns: self.queue_s.map(ns),
            prompt_tokens: reached_stream.then_some(self.prompt_tokens),
            requested_prompt_tokens: self.requested_prompt_tokens,
            requested_max_tokens: self.requested_max_tokens,
            finish_reason: match outcome {
                Outcome::Stop => Some("stop".into()),
                Outcome::Length => Some("length".into()),
                _ => None,
            },
            outcome,
            // Role, one chunk per token, usage and `[DONE]`, as the twin streams them.
            sse_events: self.chunks_ns.len() as u32 + 3,
            message: (outcome == Outcome::ClientCancel)
                .then(|| "cancelled: still streaming when the drain ended".to_string()),
        }
    }
}

fn sim_endpoint(e: Endpoint) -> protocol::Endpoint {
    match e {
        Endpoint::Chat => protocol::Endpoint::ChatCompletions,
        Endpoint::Completions => protocol::Endpoint::Completions,
    }
}

impl LevelMeasurer for TwinLevels {
    fn measure(&self, l: LevelRequest<'_>) -> Measured {
        Level::new(self, &l).run()
    }
}

/// The state of one level's run.
struct Level<'a> {
    twin: &'a TwinLevels,
    req: &'a LevelRequest<'a>,
    engine: Engine,
    ctx: ValidationContext,
    mix: RequestMix<'a>,
    rec: LevelRecording,
    flights: HashMap<RequestId, Flight>,
    /// Arrival number at the "server": the index of the twin's natural stop length.
    index: u64,
    engine_scrapes: Vec<Scrape>,
    dcgm_scrapes: Vec<Scrape>,
    notes: Vec<String>,
    /// Successful requests' E2E, for the drain bound (as the HTTP runner's).
    e2e_all: hdrhistogram::Histogram<u64>,
    warmup_s: f64,
}

impl<'a> Level<'a> {
    fn new(twin: &'a TwinLevels, req: &'a LevelRequest<'a>) -> Level<'a> {
        let names: Vec<&str> = req.phase.plans.iter().map(|p| p.name.as_str()).collect();
        let mut rec = LevelRecording::new(req.mode.level(), req.mode.load_mode(), &names);
        rec.warmup_s = req.warmup.as_secs_f64();
        rec.client.cores = 1;
        let mut cfg = twin.cfg.clone();
        // Each level its own engine (an empty prefix cache, a cold GPU at the level's seed), so a
        // planned level does not depend on the search's path to it.
        cfg.seed ^= req.seed;
        let engine = match Engine::new(cfg) {
            Ok(e) => e,
            // `cfg` was resolved, so this cannot fail; a fresh copy of the original is the fallback.
            Err(_) => Engine::new(twin.cfg.clone()).unwrap_or_else(|e| panic!("{e}")),
        };
        Level {
            twin,
            req,
            engine,
            ctx: twin.context(),
            mix: RequestMix::new(&req.phase.plans, req.seed),
            rec,
            flights: HashMap::new(),
            index: 0,
            engine_scrapes: Vec::new(),
            dcgm_scrapes: Vec::new(),
            notes: Vec::new(),
            e2e_all: new_histogram(),
            warmup_s: req.warmup.as_secs_f64(),
        }
    }

    fn scrape(&mut self, t: f64) {
        let at = self.twin.origin_unix_s + t;
        let mono = Some(Duration::from_secs_f64(t.max(0.0)));
        match Scrape::from_body(ENGINE_SOURCE, self.engine.render_metrics(t), at, mono) {
            Ok(s) => self.engine_scrapes.push(s),
            Err(e) => self.notes.push(e.to_string()),
        }
        match Scrape::from_body(DCGM_SOURCE, self.engine.render_dcgm(t), at, mono) {
            Ok(s) => self.dcgm_scrapes.push(s),
            Err(e) => self.notes.push(e.to_string()),
        }
    }

    /// Draws the next request of the mix.
    fn draw(&mut self) -> Option<DrawnRequest> {
        // A draw fails only when a tokenizer fails; the request is skipped, as over HTTP.
        self.mix.next_request().ok()
    }

    /// Sends `d` at `t` (intended at `intended`), for `user` in a closed loop. A request the
    /// server's validation refuses (a prompt beyond the context window) ends at once with its
    /// HTTP status, as over HTTP; the result says whether the engine took it.
    ///
    /// `lag_s` is the client's own delay: the time a request waited for a slot under the
    /// workload's `max_concurrency`. The clock jumps from engine step to engine step, so a
    /// request due during a step is handed over when the step ends; that wait is the engine's
    /// (vLLM schedules it no sooner than the next step), not the client's, and is no lag.
    fn send(
        &mut self,
        t: f64,
        intended: f64,
        lag_s: f64,
        user: Option<usize>,
        d: &DrawnRequest,
    ) -> bool {
        let in_window = intended >= self.warmup_s;
        if in_window {
            self.rec.started += 1;
        } else {
            self.rec.warmup_started += 1;
        }
        let p = PreparedRequest::encode(d, Some(&self.twin.cfg.served_model_name));
        let mut flight = Flight {
            class: d.class,
            user,
            start_s: intended,
            send_lag_s: lag_s,
            in_window,
            chunks_ns: Vec::new(),
            prompt_tokens: 0,
            requested_prompt_tokens: d.requested_prompt_tokens,
            requested_max_tokens: d.max_tokens,
            queue_s: None,
        };
        let index = self.index;
        self.index += 1;
        match protocol::parse_and_validate(sim_endpoint(d.endpoint), &p.body, &self.ctx) {
            Ok(r) => {
                let natural = protocol::natural_output_len(
                    self.twin.cfg.seed,
                    protocol::natural_stop_index(&r, index),
                    r.min_tokens,
                    r.max_tokens,
                );
                flight.prompt_tokens = r.prompt_tokens.len() as u32;
                let id = self.engine.add_request(
                    NewRequest {
                        prompt_tokens: r.prompt_tokens,
                        max_tokens: r.max_tokens,
                        ignore_eos: r.ignore_eos,
                        eos_after: (!r.ignore_eos).then_some(natural),
                        min_tokens: r.min_tokens,
                    },
                    t,
                );
                self.flights.insert(id, flight);
                true
            }
            Err(e) => {
                let mut r = flight.record(self.warmup_s, t, Outcome::HttpStatus(e.status.as_u16()));
                r.message = Some(e.message.chars().take(300).collect());
                r.prompt_tokens = None;
                r.timing.output_tokens = None;
                self.finish_record(&r, in_window);
                false
            }
        }
    }

    fn finish_record(&mut self, r: &RequestRecord, in_window: bool) {
        if r.outcome.is_success() {
            self.e2e_all.saturating_record(r.timing.end_ns);
        }
        record_finished(&mut self.rec, r, in_window, &self.req.opts.goodput);
    }

    fn run(mut self) -> Measured {
        let warm = self.warmup_s;
        let measure = self.req.measure.as_secs_f64();
        let opts = self.req.opts;
        let hard_end = warm + opts.measure_max.as_secs_f64().max(measure);
        let mut window_end = if opts.check.is_some() {
            hard_end
        } else {
            warm + measure
        };
        // The HTTP runner checks every second of wall time; hours of virtual time need fewer
        // checks (each clones the level's histograms), and a breach a few seconds later changes
        // nothing planned.
        let check_every = (measure / 120.0).max(opts.check_every.as_secs_f64());
        let mut next_check = warm + check_every;
        let scrape_every = self.twin.scrape_every.as_secs_f64().max(1.0);
        self.scrape(0.0);
        let mut next_scrape = warm;
        let mut t = 0.0f64;
        let mut steps = 0u64;
        let mut idle = 0u32;
        // What a closed-loop client waits between an answer's last token and its next request.
        let gap = self.twin.cfg.client_gap_s();

        // Closed loop: every user ready at 0; open loop: the arrival schedule, capped or not.
        // Users by the time they send next (times are ≥ 0, so their bits order as the times do).
        let mut ready: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let mut steady: Option<(usize, SeededRng)> = None;
        let mut arrivals: Option<ArrivalSchedule> = None;
        let mut next_arrival = f64::INFINITY;
        let mut cap = usize::MAX;
        // (intended send time, when the loop first saw it due, request).
        let mut queued: VecDeque<(f64, f64, DrawnRequest)> = VecDeque::new();
        let mut outstanding_cap = OPEN_LOOP_MAX_OUTSTANDING;
        match self.req.mode {
            LevelMode::Concurrency(c) => {
                let c = c.max(1) as usize;
                ready = (0..c).map(|u| Reverse((0.0f64.to_bits(), u))).collect();
                if opts.steady_start && warm > 0.0 {
                    steady = Some((c, seeded_rng(self.req.seed, 0x5EED_57A7)));
                }
            }
            LevelMode::Rate {
                rate_per_s,
                arrival,
                max_concurrency,
            } => match ArrivalSchedule::new(rate_per_s, arrival, self.req.seed) {
                Ok(mut s) => {
                    next_arrival = s.next_gap_s();
                    arrivals = Some(s);
                    cap = max_concurrency.map_or(usize::MAX, |m| m.max(1) as usize);
                }
                Err(e) => {
                    self.rec.aborted = Some(format!("cannot build the arrival schedule: {e}"))
                }
            },
        }

        let mut closed_at: Option<f64> = None;
        let mut interrupted = false;
        let mut drain_deadline = f64::INFINITY;
        loop {
            // Window control.
            if closed_at.is_none() {
                if let Some(chk) = &opts.check
                    && t >= next_check
                {
                    next_check = t + check_every;
                    if chk(&self.rec, Duration::from_secs_f64((t - warm).max(0.0))) {
                        window_end = t;
                    }
                }
                if t >= window_end {
                    closed_at = Some(t.min(window_end).max(warm));
                    let p99 = if self.e2e_all.is_empty() {
                        opts.drain_max.as_secs_f64()
                    } else {
                        self.e2e_all.value_at_quantile(0.99) as f64 * 1e-9
                    };
                    let drain = p99
                        .max(opts.drain_min.as_secs_f64())
                        .min(opts.drain_max.as_secs_f64());
                    drain_deadline = t + drain;
                    // Requests that never got a slot under the cap were never sent.
                    for (intended, _, d) in std::mem::take(&mut queued) {
                        self.unsent(intended, t, &d);
                    }
                }
            }
            if self.twin.cancelled() {
                interrupted = true;
                break;
            }
            if closed_at.is_some() && (self.flights.is_empty() || t >= drain_deadline) {
                break;
            }
            // Sends due by now.
            if closed_at.is_none() {
                let mut sent = 0u32;
                while let Some(&Reverse((at, user))) = ready.peek() {
                    let at = f64::from_bits(at);
                    if at > t {
                        break;
                    }
                    sent += 1;
                    if sent.is_multiple_of(256) && self.twin.cancelled() {
                        break;
                    }
                    ready.pop();
                    let Some(mut d) = self.draw() else {
                        break;
                    };
                    if let Some((left, rng)) = &mut steady
                        && *left > 0
                    {
                        *left -= 1;
                        let share: f64 = rand::RngExt::random(rng);
                        d.max_tokens = ((f64::from(d.max_tokens) * share).ceil() as u32).max(1);
                    }
                    if !self.send(t, at, 0.0, Some(user), &d) {
                        // Refused at once: the user sends its next request a moment later.
                        ready.push(Reverse(((t + 1e-3).to_bits(), user)));
                    }
                }
                while next_arrival <= t {
                    if self.flights.len() + queued.len() >= outstanding_cap {
                        break;
                    }
                    if let Some(d) = self.draw() {
                        outstanding_cap = outstanding_cap
                            .min(
                                OPEN_LOOP_MAX_PROMPT_TOKENS
                                    / d.requested_prompt_tokens.max(1) as usize,
                            )
                            .max(OPEN_LOOP_MIN_OUTSTANDING);
                        queued.push_back((next_arrival, t, d));
                    }
                    next_arrival = match arrivals.as_mut() {
                        Some(s) => next_arrival + s.next_gap_s(),
                        None => f64::INFINITY,
                    };
                }
                while self.flights.len() < cap
                    && let Some((intended, seen, d)) = queued.pop_front()
                {
                    self.send(t, intended, t - seen, None, &d);
                }
            }
            if next_arrival <= t && self.flights.len() + queued.len() >= outstanding_cap {
                self.rec.aborted = Some(format!(
                    "{} requests were in flight or waiting to be sent after {:.1} s of simulated time at {} req/s offered: the engine serves a small share of that rate, and no HTTP client holds that many streams (it is bounded by its open-file limit), so the level has no verdict; its capacity lies below this load",
                    self.flights.len() + queued.len(),
                    t,
                    headroom_core::slo::fmt_num(self.req.mode.level()),
                ));
                break;
            }
            if steps >= self.twin.max_steps {
                self.rec.aborted = Some(format!(
                    "the twin ran {steps} engine steps without ending the level (a planner defect)"
                ));
                break;
            }
            // Periodic scrapes at their own times (rendered when the clock passes them).
            while next_scrape <= t && closed_at.is_none() {
                self.scrape(t);
                next_scrape += scrape_every;
            }
            let next_event = [
                ready
                    .peek()
                    .map_or(f64::INFINITY, |r| f64::from_bits(r.0.0)),
                if queued.is_empty() || self.flights.len() >= cap {
                    next_arrival
                } else {
                    t
                },
                // `next_check` moves on only when there is a check: without one it is no event
                // (an idle engine would otherwise wait at it for ever).
                match (closed_at, &opts.check) {
                    (None, Some(_)) => next_check.min(window_end),
                    (None, None) => window_end,
                    (Some(_), _) => drain_deadline,
                },
            ]
            .into_iter()
            .fold(f64::INFINITY, f64::min);
            if !self.engine.has_work() {
                let n = next_event.min(self.engine.next_queued_s().unwrap_or(f64::INFINITY));
                if n.is_finite() && n > t {
                    t = n;
                    continue;
                }
            }
            let r = self.engine.step(t);
            steps += 1;
            let done = t + r.duration_s;
            for (id, q) in self.engine.finished_queue_times() {
                if let Some(f) = self.flights.get_mut(id) {
                    f.queue_s = Some(*q);
                }
            }
            for tok in &r.tokens {
                let Some(f) = self.flights.get_mut(&tok.id) else {
                    continue;
                };
                f.chunks_ns
                    .push(((done - f.start_s).max(0.0) * 1e9).round() as u64);
                if let Some(reason) = tok.finished {
                    let f = self
                        .flights
                        .remove(&tok.id)
                        .unwrap_or_else(|| unreachable!());
                    let outcome = match reason {
                        FinishReason::Stop => Outcome::Stop,
                        FinishReason::Length => Outcome::Length,
                        FinishReason::Abort => Outcome::Abort,
                    };
                    let rec = f.record(warm, done, outcome);
                    self.finish_record(&rec, f.in_window);
                    if let Some(u) = f.user {
                        ready.push(Reverse(((done + gap).to_bits(), u)));
                    }
                }
            }
            if r.duration_s > 0.0 || !r.tokens.is_empty() {
                idle = 0;
                t = done;
            } else {
                let n = next_event.min(self.engine.next_queued_s().unwrap_or(f64::INFINITY));
                if n.is_finite() && n > t {
                    idle = 0;
                    t = n;
                } else {
                    idle += 1;
                    if idle > 1000 {
                        self.rec.aborted =
                            Some("the twin made no progress with requests in flight".into());
                        break;
                    }
                }
            }
        }
        let closed = closed_at.unwrap_or(t);
        // The rest of the window's requests are cancelled, as the HTTP client hangs up on them.
        let rest: Vec<RequestId> = self.flights.keys().copied().collect();
        for id in rest {
            if let Some(f) = self.flights.remove(&id) {
                self.engine.cancel(id, t);
                let rec = f.record(warm, t, Outcome::ClientCancel);
                if f.in_window {
                    self.rec.cancelled_at_end += 1;
                }
                self.finish_record(&rec, f.in_window);
            }
        }
        // The HTTP sweep waits 300 ms for cancelled streams to reach the engine as aborts.
        self.scrape(t + 0.3);
        self.rec.window_s = (closed.min(window_end) - warm).max(0.0);
        self.rec.started_unix_s = self.twin.origin_unix_s + warm;
        self.rec.drain_s = (t - closed).max(0.0);
        self.rec.interrupted = interrupted;
        self.rec.window_note = window_note(
            interrupted,
            opts.check.is_some(),
            self.rec.window_s,
            self.req.measure,
        );
        Measured {
            rec: self.rec,
            engine: self.engine_scrapes,
            dcgm: self.dcgm_scrapes,
            window_from: usize::from(warm > 0.0),
            notes: self.notes,
        }
    }

    /// A request the concurrency cap kept from being sent until the window closed.
    fn unsent(&mut self, intended: f64, now: f64, d: &DrawnRequest) {
        let f = Flight {
            class: d.class,
            user: None,
            start_s: intended,
            send_lag_s: now - intended,
            in_window: intended >= self.warmup_s,
            chunks_ns: Vec::new(),
            prompt_tokens: 0,
            requested_prompt_tokens: d.requested_prompt_tokens,
            requested_max_tokens: d.max_tokens,
            queue_s: None,
        };
        let mut r = f.record(self.warmup_s, now, Outcome::ClientCancel);
        r.message =
            Some("never sent: the concurrency cap was reached until the window ended".into());
        if f.in_window {
            self.rec.cancelled_at_end += 1;
        }
        self.finish_record(&r, f.in_window);
    }
}
