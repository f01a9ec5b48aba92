//! Virtual clock: a discrete-event driver that feeds arrivals to an [`Engine`] and runs its steps
//! back to back, as fast as the CPU allows. Used by tests, benchmarks and capacity planning.
//!
//! Time advances from step to step (`t += duration_s`); arrivals that fall inside a step are
//! submitted with their own timestamps before the next step, exactly as a wall-clock server would
//! see them. When the engine is idle the clock jumps to the next arrival. Deterministic: the same
//! engine configuration (seed included) and the same load give the same [`VirtualRun`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::{Engine, FinishReason, NewRequest, RequestId};

/// The load offered to the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Open loop: each request arrives at its time (s), whatever the engine does.
    Open {
        /// `(arrival time s, request)`, in any order.
        arrivals: Vec<(f64, NewRequest)>,
    },
    /// Closed loop: `concurrency` clients; each sends its next request `think_s` after its previous
    /// one finished. Requests are taken from `requests` in order; the run ends when all are done.
    Closed {
        /// Number of clients.
        concurrency: u32,
        /// The requests, consumed in order.
        requests: Vec<NewRequest>,
        /// Client `i` sends its first request at `i × ramp_s / concurrency` (s).
        ramp_s: f64,
        /// Pause between a response and the client's next request (s).
        think_s: f64,
    },
}

/// Options of a virtual run.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualOptions {
    /// Stop at this engine time (s) even if work remains.
    pub until_s: Option<f64>,
    /// Record a [`Sample`] of engine state every this many seconds (`None`: no samples).
    pub sample_every_s: Option<f64>,
    /// Hard cap on engine steps.
    pub max_steps: u64,
}

impl Default for VirtualOptions {
    fn default() -> Self {
        VirtualOptions {
            until_s: None,
            sample_every_s: None,
            max_steps: 200_000_000,
        }
    }
}

/// What a client saw for one request (times in s on the engine clock).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// Engine id.
    pub id: RequestId,
    /// Send (arrival) time.
    pub send_s: f64,
    /// First token visible.
    pub first_token_s: Option<f64>,
    /// Last token visible.
    pub last_token_s: Option<f64>,
    /// Tokens received.
    pub output_tokens: u32,
    /// Prompt tokens sent.
    pub prompt_tokens: u32,
    /// How it finished, if it did.
    pub finish: Option<FinishReason>,
    /// Largest gap between consecutive tokens.
    pub max_itl_s: f64,
}

impl RequestRecord {
    /// Client TTFT: first token − send.
    pub fn ttft_s(&self) -> Option<f64> {
        self.first_token_s.map(|f| f - self.send_s)
    }

    /// Client TPOT: `(last − first)/(n − 1)` (vLLM bench definition); `None` for n ≤ 1.
    pub fn tpot_s(&self) -> Option<f64> {
        match (self.first_token_s, self.last_token_s) {
            (Some(f), Some(l)) if self.output_tokens > 1 => {
                Some((l - f) / f64::from(self.output_tokens - 1))
            }
            _ => None,
        }
    }

    /// Client e2e: last token − send.
    pub fn e2e_s(&self) -> Option<f64> {
        self.last_token_s.map(|l| l - self.send_s)
    }
}

/// Engine state sampled at a point in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Engine time (s).
    pub t_s: f64,
    /// `kv_cache_usage_perc` (0–1).
    pub kv_cache_usage: f64,
    /// Running requests.
    pub running: usize,
    /// Waiting requests.
    pub waiting: usize,
    /// GPU power averaged over ~1 s (W).
    pub power_w: f64,
    /// GPU temperature (°C).
    pub temp_c: f64,
    /// Clock factor (1 = boost).
    pub clock_factor: f64,
    /// Generated tokens so far.
    pub generation_tokens: u64,
}

/// Result of [`run_virtual`].
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualRun {
    /// One record per submitted request, in submission order.
    pub records: Vec<RequestRecord>,
    /// Periodic samples.
    pub samples: Vec<Sample>,
    /// Engine steps run.
    pub steps: u64,
    /// Engine time at the end (s).
    pub end_s: f64,
    /// Whether the run stopped because the engine made no progress (an engine defect).
    pub stalled: bool,
}

#[derive(PartialEq)]
struct Due(f64, usize);
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on time, then on sequence number (deterministic ties).
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// Runs `load` against `engine` on the virtual clock, starting at engine time 0.
pub fn run_virtual(engine: &mut Engine, load: Load, opts: &VirtualOptions) -> VirtualRun {
    let mut due: BinaryHeap<Due> = BinaryHeap::new();
    let (mut pool, closed_think) = match load {
        Load::Open { arrivals } => {
            let mut reqs = Vec::with_capacity(arrivals.len());
            for (i, (t, r)) in arrivals.into_iter().enumerate() {
                due.push(Due(t.max(0.0), i));
                reqs.push(Some(r));
            }
            (reqs, None)
        }
        Load::Closed {
            concurrency,
            requests,
            ramp_s,
            think_s,
        } => {
            let c = concurrency.max(1) as usize;
            let n = requests.len();
            for i in 0..c.min(n) {
                due.push(Due(ramp_s.max(0.0) * i as f64 / c as f64, i));
            }
            (
                requests.into_iter().map(Some).collect(),
                Some(think_s.max(0.0)),
            )
        }
    };
    let mut next_closed = due.len();
    let client_gap = engine.config().client_gap_s();
    let mut records: Vec<RequestRecord> = Vec::with_capacity(pool.len());
    let mut index: HashMap<RequestId, usize> = HashMap::new();
    let mut samples = Vec::new();
    let mut next_sample = opts.sample_every_s.map(|_| 0.0);
    let mut t = 0.0f64;
    let mut steps = 0u64;
    let mut stalled = false;
    let mut idle_spins = 0u32;

    loop {
        while let Some(d) = due.peek() {
            if d.0 > t {
                break;
            }
            let Due(at, i) = due.pop().unwrap_or(Due(0.0, 0));
            if let Some(req) = pool.get_mut(i).and_then(Option::take) {
                let prompt_tokens = req.prompt_tokens.len() as u32;
                let id = engine.add_request(req, at);
                index.insert(id, records.len());
                records.push(RequestRecord {
                    id,
                    send_s: at,
                    first_token_s: None,
                    last_token_s: None,
                    output_tokens: 0,
                    prompt_tokens,
                    finish: None,
                    max_itl_s: 0.0,
                });
            }
        }
        if let Some(until) = opts.until_s
            && t >= until
        {
            break;
        }
        if steps >= opts.max_steps {
            break;
        }
        if !engine.has_work() {
            match due.peek() {
                Some(d) => {
                    t = t.max(d.0);
                    continue;
                }
                None => break,
            }
        }
        let r = engine.step(t);
        steps += 1;
        let done = t + r.duration_s;
        for tok in &r.tokens {
            let Some(&ri) = index.get(&tok.id) else {
                continue;
            };
            let rec = &mut records[ri];
            if let Some(last) = rec.last_token_s {
                rec.max_itl_s = rec.max_itl_s.max(done - last);
            } else {
                rec.first_token_s = Some(done);
            }
            rec.last_token_s = Some(done);
            rec.output_tokens += 1;
            if let Some(reason) = tok.finished {
                rec.finish = Some(reason);
                index.remove(&tok.id);
                if let Some(think) = closed_think
                    && next_closed < pool.len()
                {
                    due.push(Due(done + client_gap + think, next_closed));
                    next_closed += 1;
                }
            }
        }
        if r.duration_s > 0.0 || !r.tokens.is_empty() {
            idle_spins = 0;
            t = done;
        } else {
            let next = match (due.peek().map(|d| d.0), engine.next_queued_s()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match next {
                Some(n) if n > t => {
                    idle_spins = 0;
                    t = n;
                }
                _ => {
                    idle_spins += 1;
                    if idle_spins > 1000 {
                        stalled = true;
                        break;
                    }
                }
            }
        }
        if let (Some(every), Some(ns)) = (opts.sample_every_s, next_sample.as_mut()) {
            while *ns <= t {
                let tel = engine.telemetry().read(t);
                samples.push(Sample {
                    t_s: *ns,
                    kv_cache_usage: engine.kv_cache_usage(),
                    running: engine.num_running(),
                    waiting: engine.num_waiting(),
                    power_w: tel.power_w,
                    temp_c: tel.temp_c,
                    clock_factor: tel.clock_factor,
                    generation_tokens: engine.stats().generation_tokens,
                });
                *ns += every.max(1e-6);
            }
        }
    }
    VirtualRun {
        records,
        samples,
        steps,
        end_s: t,
        stalled,
    }
}
