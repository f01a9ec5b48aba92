//! The engine core: a port of vLLM V1's scheduling loop on one step clock.
//!
//! One call to [`Engine::step`] is one engine iteration (simulator.md §2.2):
//! 1. requests whose frontend delay has passed join the waiting queue (`queued_ts`);
//! 2. `schedule()`: RUNNING requests first, in admission order, one token budget
//!    (`max_num_batched_tokens`), chunked prefill, KV blocks allocated from the paged pool; when the
//!    pool is exhausted the most recently admitted request is preempted (recompute) and goes back to
//!    the front of the waiting queue; then WAITING requests FCFS (prefix-cache lookup, admission
//!    while budget, `max_num_seqs` and blocks allow; none after a preemption in the same step);
//! 3. with async scheduling (vLLM's default) the batch scheduled now runs after the batch already in
//!    flight, so the call executes the in-flight batch and returns its duration and tokens.
//!
//! Timestamps and every metric derived from them follow vLLM `v1/metrics/stats.py` (§2.5); the
//! step duration comes from [`timing::StepModel`]; power, temperature and clocks from
//! [`telemetry::Telemetry`].

pub mod dcgm;
pub mod kv;
pub mod metrics;
pub mod prom;
pub mod spec;
pub mod telemetry;
pub mod timing;
pub mod virtual_clock;

use std::collections::{HashMap, VecDeque};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

pub use spec::{
    ConfigError, EngineConfig, FaultConfig, GpuPreset, Interconnect, ModelPreset, SimSpec,
    WeightDtype,
};

use kv::{BlockPool, chain_hash};
use metrics::VllmStats;
use telemetry::Telemetry;
use timing::{StepModel, StepWork};

/// Identifier of a request inside one engine (assigned by [`Engine::add_request`], never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Why a request finished (vLLM `finished_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// The model stopped by itself (EOS / stop condition).
    Stop,
    /// `max_tokens` (or `max_model_len`) reached.
    Length,
    /// Aborted by the client or the server.
    Abort,
}

impl FinishReason {
    /// The `finished_reason` label value (`stop`, `length`, `abort`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// A request as the engine core receives it (already tokenised).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRequest {
    /// Prompt token ids (see [`crate::tokenize`]). An empty prompt is treated as one token; a
    /// prompt of `max_model_len` tokens or more is cut to its last `max_model_len − 1` tokens (the
    /// server is expected to reject such requests with vLLM's 400 before they get here).
    pub prompt_tokens: Vec<u32>,
    /// Most tokens to generate (`max_tokens`); 0 is treated as 1.
    pub max_tokens: u32,
    /// Keep generating past the natural stop (`ignore_eos`).
    pub ignore_eos: bool,
    /// The natural stop: the model emits EOS as its `eos_after`-th token (when `!ignore_eos`).
    /// `None` = the model never stops by itself before `max_tokens`.
    pub eos_after: Option<u32>,
    /// `min_tokens`: EOS is suppressed before this many tokens.
    pub min_tokens: u32,
}

/// One generated token, visible at `now_s + duration_s` of the step that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEvent {
    /// The request.
    pub id: RequestId,
    /// 0-based index of this output token (text: [`crate::filler_token_text`]`(token_index, seed)`).
    pub token_index: u32,
    /// `Some` on the request's last token.
    pub finished: Option<FinishReason>,
}

/// Result of one engine step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepResult {
    /// How long the step takes on the engine clock (s), `time_scale` applied. For an idle step
    /// (nothing to run yet) this is the wait until the next queued request reaches the engine core,
    /// or 0 when there is nothing at all.
    pub duration_s: f64,
    /// Tokens produced, in batch order.
    pub tokens: Vec<TokenEvent>,
    /// Requests preempted (recompute) while scheduling this step.
    pub preempted: Vec<RequestId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Waiting,
    Running,
}

#[derive(Debug, Clone)]
struct Request {
    uid: u64,
    prompt: Vec<u32>,
    prompt_len: u32,
    max_tokens: u32,
    /// Output tokens after which the request finishes, and why.
    target: u32,
    target_reason: FinishReason,
    /// Output tokens emitted.
    out: u32,
    /// Scheduled samples whose token is not out yet (async scheduling).
    placeholders: u32,
    /// Tokens whose KV is computed or scheduled (vLLM `num_computed_tokens`).
    computed: u32,
    blocks: Vec<u32>,
    /// Chain hashes of the full blocks of known tokens.
    hashes: Vec<u64>,
    /// Blocks registered in the prefix cache.
    cached_blocks: u32,
    status: Status,
    /// Bumped on every preemption; in-flight work of an older epoch is discarded.
    epoch: u32,
    num_preemptions: u32,
    arrival_s: f64,
    /// While pending: when the request reaches the engine core (after the frontend). From the
    /// step that takes it into the scheduler: that step's start, vLLM's QUEUED event.
    queued_s: f64,
    scheduled_s: Option<f64>,
    first_token_s: Option<f64>,
    last_token_s: f64,
    /// Prefix-cache hit tokens at first admission.
    cached_tokens: u32,
}

impl Request {
    #[inline]
    fn known(&self) -> u32 {
        self.prompt_len + self.out
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    slot: u32,
    uid: u64,
    epoch: u32,
    samples: bool,
}

#[derive(Debug, Clone, Default)]
struct Batch {
    entries: Vec<Entry>,
    work: StepWork,
}

impl Batch {
    fn clear(&mut self) {
        self.entries.clear();
        self.work = StepWork::default();
    }
}

/// The engine twin: one vLLM engine core on a step clock.
///
/// Drive it with [`Engine::add_request`] and [`Engine::step`]; times are seconds on the caller's
/// monotonic engine clock (starting at 0). Same configuration, seed and inputs give the same
/// results.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Queue times of the requests finished by the last step/abort (see
    /// [`Engine::finished_queue_times`]).
    recent_queue: Vec<(RequestId, f64)>,
    cfg: EngineConfig,
    model: StepModel,
    pool: BlockPool,
    slab: Vec<Option<Request>>,
    free_slots: Vec<u32>,
    by_id: HashMap<u64, u32>,
    next_uid: u64,
    pending: VecDeque<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    in_flight: Batch,
    next_batch: Batch,
    hit_scratch: Vec<u32>,
    rng: Xoshiro256PlusPlus,
    /// Draws of the per-request frontend jitter (apart from `rng`, so that adding requests does
    /// not change the step-time draws).
    frontend_rng: Xoshiro256PlusPlus,
    stats: VllmStats,
    telemetry: Telemetry,
    frontend_in_s: f64,
    /// CPU-bound share of the frontend delay per request (s, `time_scale` applied).
    frontend_service_s: f64,
    /// Frontend time per streamed output chunk (s, `time_scale` applied).
    frontend_chunk_s: f64,
    /// When the frontend process is next free (s, engine clock); used with `frontend_cpu_queue`.
    frontend_free_s: f64,
    /// The last step's output chunks (landing time s, frontend work s), not yet in `frontend_free_s`.
    frontend_chunks: Option<(f64, f64)>,
    /// Frontend delay per output token per second streamed (s² on the engine clock, `time_scale`
    /// applied: a delay scales with it, a rate inversely).
    frontend_load_s: f64,
    /// Exponential average of the output tokens per second (engine clock) as of `out_rate_at_s`.
    out_rate: f64,
    /// When `out_rate` was last brought up to date (s, engine clock).
    out_rate_at_s: f64,
    /// Its time constant (s, `time_scale` applied).
    out_rate_tau_s: f64,
    filler_ids: Vec<u32>,
    created_unix_s: f64,
}

impl Engine {
    /// Builds an engine from a resolved configuration.
    ///
    /// # Errors
    /// [`ConfigError`] when the configuration is inconsistent (it is re-checked here because an
    /// `EngineConfig` can be built by hand): fewer than 2 or more than [`spec::MAX_GPU_BLOCKS`] KV blocks, a KV pool smaller than one
    /// `max_model_len` request, zero `max_num_seqs`, a negative `time_scale`.
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        if !(2..=spec::MAX_GPU_BLOCKS).contains(&cfg.num_gpu_blocks) {
            return Err(ConfigError::new(
                "num_gpu_blocks",
                format!(
                    "expected 2 to {} blocks, got {}",
                    spec::MAX_GPU_BLOCKS,
                    cfg.num_gpu_blocks
                ),
            ));
        }
        if cfg.block_size != spec::BLOCK_SIZE {
            return Err(ConfigError::new(
                "block_size",
                format!("expected {}, got {}", spec::BLOCK_SIZE, cfg.block_size),
            ));
        }
        if cfg.kv_cache_tokens() < u64::from(cfg.max_model_len) {
            return Err(ConfigError::new(
                "num_gpu_blocks",
                format!(
                    "KV pool of {} tokens cannot hold one max_model_len ({}) request",
                    cfg.kv_cache_tokens(),
                    cfg.max_model_len
                ),
            ));
        }
        if cfg.max_num_seqs == 0 || cfg.max_num_batched_tokens == 0 {
            return Err(ConfigError::new(
                "max_num_seqs",
                "expected max_num_seqs and max_num_batched_tokens ≥ 1",
            ));
        }
        if !(cfg.time_scale.is_finite() && cfg.time_scale >= 0.0) {
            return Err(ConfigError::new(
                "time_scale",
                format!("expected a non-negative number, got {}", cfg.time_scale),
            ));
        }
        if cfg.max_model_len < 2 {
            return Err(ConfigError::new("max_model_len", "expected at least 2"));
        }
        let model = StepModel::new(&cfg);
        let pool = BlockPool::new(cfg.num_gpu_blocks, cfg.enable_prefix_caching);
        let stats = VllmStats::new(&cfg);
        let telemetry = Telemetry::new(&cfg);
        let filler_ids = (0..crate::FILLER_PERIOD)
            .map(|i| crate::filler_token_id(i, cfg.seed))
            .collect();
        let created_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Ok(Engine {
            recent_queue: Vec::new(),
            frontend_in_s: cfg.gpu.frontend_in_ms * 1e-3 * cfg.time_scale,
            frontend_service_s: cfg
                .gpu
                .frontend_cpu_ms
                .unwrap_or(spec::FRONTEND_REQUEST_CPU_MS)
                * 1e-3
                * cfg.time_scale,
            frontend_chunk_s: spec::FRONTEND_CHUNK_US * 1e-6 * cfg.time_scale,
            frontend_free_s: 0.0,
            frontend_chunks: None,
            frontend_load_s: cfg.gpu.frontend_load_ms * 1e-6 * cfg.time_scale * cfg.time_scale,
            out_rate: 0.0,
            out_rate_at_s: 0.0,
            out_rate_tau_s: spec::FRONTEND_LOAD_WINDOW_S * cfg.time_scale,
            rng: Xoshiro256PlusPlus::seed_from_u64(cfg.seed ^ 0x5eed_0000_0000_0001),
            frontend_rng: Xoshiro256PlusPlus::seed_from_u64(cfg.seed ^ 0x5eed_0000_0000_0002),
            cfg,
            model,
            pool,
            slab: Vec::new(),
            free_slots: Vec::new(),
            by_id: HashMap::new(),
            next_uid: 0,
            pending: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            in_flight: Batch::default(),
            next_batch: Batch::default(),
            hit_scratch: Vec::new(),
            stats,
            telemetry,
            filler_ids,
            created_unix_s,
        })
    }

    /// The resolved configuration (served model name, `max_model_len`, KV pool, …).
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Requests in the running batch (vLLM `num_requests_running`).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests in the engine core's waiting queue (vLLM `num_requests_waiting`); requests still in
    /// the frontend (see [`GpuPreset::frontend_in_ms`]) are not counted.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// KV-cache usage, a ratio 0–1 (vLLM `kv_cache_usage_perc`).
    pub fn kv_cache_usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Whether anything is queued, running or in flight.
    pub fn has_work(&self) -> bool {
        !self.pending.is_empty()
            || !self.waiting.is_empty()
            || !self.running.is_empty()
            || !self.in_flight.entries.is_empty()
    }

    /// Counters and histograms as vLLM would export them.
    pub fn stats(&self) -> &VllmStats {
        &self.stats
    }

    /// GPU telemetry state (power, temperature, clocks).
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Wall-clock Unix time at which the engine was built (value of the `_created` series).
    pub fn created_unix_s(&self) -> f64 {
        self.created_unix_s
    }

    /// Submits a request arriving at `now_s` (vLLM `arrival_time`). It reaches the engine core's
    /// waiting queue after the frontend delay (`queued_ts = now_s + frontend_in × time_scale`);
    /// with [`EngineConfig::frontend_cpu_queue`] the delay is service on one frontend process,
    /// queued behind earlier requests and output chunks, so it grows under load. Requests are
    /// expected in order of `now_s`.
    pub fn add_request(&mut self, req: NewRequest, now_s: f64) -> RequestId {
        let uid = self.next_uid;
        self.next_uid += 1;
        let max_len = self.cfg.max_model_len;
        let mut prompt = req.prompt_tokens;
        if prompt.is_empty() {
            prompt.push(0);
        }
        if prompt.len() >= max_len as usize {
            let cut = prompt.len() - (max_len as usize - 1);
            prompt.drain(..cut);
        }
        let prompt_len = prompt.len() as u32;
        let max_tokens = req.max_tokens.max(1);
        let room = max_len - prompt_len;
        let mut target = max_tokens.min(room);
        let mut reason = FinishReason::Length;
        if !req.ignore_eos
            && let Some(e) = req.eos_after
        {
            let e = e.max(req.min_tokens).max(1);
            if e <= target {
                target = e;
                reason = FinishReason::Stop;
            }
        }
        let frontend_in_s = (self.frontend_in_s + self.frontend_load_s * self.out_rate_at(now_s))
            * self.frontend_jitter();
        let queued_s = if self.cfg.frontend_cpu_queue {
            // One frontend process: the request's own service (template, tokenisation, IPC)
            // starts when the process is free of earlier requests and output chunks.
            // Of `frontend_in`, the CPU-bound share is serial; the rest (IPC, the event loop's
            // hand-off) is latency that overlaps other requests.
            let service = self.frontend_service_s.min(frontend_in_s);
            if self
                .frontend_chunks
                .is_some_and(|(landed, _)| now_s >= landed)
            {
                self.commit_frontend_chunks();
            }
            let start = now_s.max(self.frontend_free_s);
            self.frontend_free_s = start + service;
            self.frontend_free_s + (frontend_in_s - service)
        } else {
            now_s + frontend_in_s
        };
        let mut r = Request {
            uid,
            prompt,
            prompt_len,
            max_tokens,
            target,
            target_reason: reason,
            out: 0,
            placeholders: 0,
            computed: 0,
            blocks: Vec::new(),
            hashes: Vec::new(),
            cached_blocks: 0,
            status: Status::Pending,
            epoch: 0,
            num_preemptions: 0,
            arrival_s: now_s,
            queued_s,
            scheduled_s: None,
            first_token_s: None,
            last_token_s: now_s,
            cached_tokens: 0,
        };
        if self.cfg.enable_prefix_caching {
            extend_hashes(&mut r, &self.filler_ids);
        }
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(r);
                s
            }
            None => {
                self.slab.push(Some(r));
                (self.slab.len() - 1) as u32
            }
        };
        self.by_id.insert(uid, slot);
        // Keep `pending` ordered by queued time (callers' clocks are monotonic, so this is O(1)).
        let pos = self
            .pending
            .iter()
            .rposition(|&s| self.req(s).queued_s <= queued_s)
            .map(|p| p + 1)
            .unwrap_or(0);
        self.pending.insert(pos, slot);
        RequestId(uid)
    }

    /// Aborts a request inside the engine: frees its KV blocks and counts it under
    /// `vllm:request_success_total{finished_reason="abort"}` and the finished-request histograms
    /// (E2E, token counts), as vLLM does for a request its engine core finishes as aborted.
    /// Unknown or already finished ids are ignored.
    pub fn abort(&mut self, id: RequestId, now_s: f64) {
        if let Some(slot) = self.detach(id) {
            self.finish(slot, FinishReason::Abort, now_s);
        }
    }

    /// Cancels a request whose client went away: frees its KV blocks and stops its generation,
    /// but counts it nowhere among finished requests, exactly as vLLM 0.32 does. There the API
    /// server aborts the request through `OutputProcessor.abort_requests`, which drops the
    /// request's state before the engine core reports a `finished_reason`, so
    /// `vllm:request_success_total` (every `finished_reason`, `abort` included), the E2E, queue,
    /// prefill, decode and token histograms do not move; only what was already observed (its TTFT,
    /// `prompt_tokens_total`, `generation_tokens_total`) stays. Verified against a live vLLM 0.32
    /// by `scripts/conformance/vllm.sh` (steps `cancel` and `twin-cancel`). Unknown or already
    /// finished ids are ignored.
    pub fn cancel(&mut self, id: RequestId, _now_s: f64) {
        if let Some(slot) = self.detach(id) {
            self.release(slot);
        }
    }

    /// Removes a live request from whichever queue holds it; its slot, if it was live.
    fn detach(&mut self, id: RequestId) -> Option<u32> {
        self.recent_queue.clear();
        let &slot = self.by_id.get(&id.0)?;
        let status = self.req(slot).status;
        match status {
            Status::Pending => self.pending.retain(|&s| s != slot),
            Status::Waiting => self.waiting.retain(|&s| s != slot),
            Status::Running => self.running.retain(|&s| s != slot),
        }
        Some(slot)
    }

    fn req(&self, slot: u32) -> &Request {
        match &self.slab[slot as usize] {
            Some(r) => r,
            None => unreachable_slot(),
        }
    }

    fn req_mut(&mut self, slot: u32) -> &mut Request {
        match &mut self.slab[slot as usize] {
            Some(r) => r,
            None => unreachable_slot(),
        }
    }

    /// Engine queue time (first scheduled − queued, seconds) of every request that finished in
    /// the last [`Engine::step`] or [`Engine::abort`] call, for per-request metrics; cleared at
    /// the start of each call.
    pub fn finished_queue_times(&self) -> &[(RequestId, f64)] {
        &self.recent_queue
    }

    /// Runs one engine step starting at `now_s`: schedules, executes, and returns the step's
    /// duration and the tokens it produced (visible at `now_s + duration_s`).
    pub fn step(&mut self, now_s: f64) -> StepResult {
        self.recent_queue.clear();
        let mut result = StepResult::default();
        self.telemetry.advance_idle(now_s);
        while let Some(&slot) = self.pending.front() {
            if self.req(slot).queued_s > now_s {
                break;
            }
            self.pending.pop_front();
            let r = self.req_mut(slot);
            r.status = Status::Waiting;
            // vLLM records QUEUED when its busy loop drains the input queue into the scheduler,
            // right before it schedules (`EngineCore._process_input_queue`), not when the request
            // reached the engine core's socket: the wait for the step in flight is not queue time.
            r.queued_s = now_s;
            self.waiting.push_back(slot);
        }

        let mut exec = std::mem::take(&mut self.in_flight);
        if self.cfg.async_scheduling {
            if exec.entries.is_empty() {
                self.schedule(now_s, &mut exec, &mut result.preempted);
            }
            let mut next = std::mem::take(&mut self.next_batch);
            next.clear();
            self.schedule(now_s, &mut next, &mut result.preempted);
            self.in_flight = next;
        } else {
            self.schedule(now_s, &mut exec, &mut result.preempted);
        }
        self.execute(now_s, &exec, &mut result);
        exec.clear();
        self.next_batch = exec;
        if self.frontend_load_s > 0.0 && !result.tokens.is_empty() {
            let landed = now_s + result.duration_s;
            let r = self.out_rate_at(landed);
            self.out_rate = r + result.tokens.len() as f64 / self.out_rate_tau_s.max(1e-12);
        }
        if self.cfg.frontend_cpu_queue && !result.tokens.is_empty() {
            // The frontend process detokenises and streams this step's outputs when they land.
            // Held until then: a caller may still add a request that arrived before they landed
            // (the virtual clock adds arrivals up to one step late), which is served first.
            self.commit_frontend_chunks();
            let landed = now_s + result.duration_s;
            self.frontend_chunks =
                Some((landed, result.tokens.len() as f64 * self.frontend_chunk_s));
        }

        if result.duration_s == 0.0
            && result.tokens.is_empty()
            && self.in_flight.entries.is_empty()
            && self.waiting.is_empty()
            && self.running.is_empty()
            && let Some(&slot) = self.pending.front()
        {
            result.duration_s = (self.req(slot).queued_s - now_s).max(0.0);
        }
        result
    }

    /// The exponential average of output tokens per second at `t_s`, decayed from the last
    /// update (the average is brought to `t_s` when `t_s` is later).
    fn out_rate_at(&mut self, t_s: f64) -> f64 {
        if self.frontend_load_s <= 0.0 {
            return 0.0;
        }
        let dt = t_s - self.out_rate_at_s;
        if dt > 0.0 {
            self.out_rate *= (-dt / self.out_rate_tau_s.max(1e-12)).exp();
            self.out_rate_at_s = t_s;
        }
        self.out_rate
    }

    /// Adds the held output chunks (landing time, CPU work) to the frontend's busy time.
    fn commit_frontend_chunks(&mut self) {
        if let Some((landed, work)) = self.frontend_chunks.take() {
            self.frontend_free_s = self.frontend_free_s.max(landed) + work;
        }
    }

    /// One request's frontend delay as a multiple of `frontend_in_ms`: log-normal with median 1
    /// and σ [`EngineConfig::frontend_jitter_sigma`].
    fn frontend_jitter(&mut self) -> f64 {
        let sigma = self.cfg.frontend_jitter_sigma;
        if sigma <= 0.0 {
            return 1.0;
        }
        (sigma * standard_normal(&mut self.frontend_rng)).exp()
    }

    /// Time at which the next queued request reaches the engine core, if any is in the frontend.
    pub fn next_queued_s(&self) -> Option<f64> {
        self.pending.front().map(|&s| self.req(s).queued_s)
    }

    /// Tries to give `r` KV slots for `n` more tokens on top of `hits` cache-hit blocks.
    fn allocate_slots(&mut self, slot: u32, n: u32, hits: &[u32]) -> bool {
        let bs = self.cfg.block_size;
        let r = self.req(slot);
        let held = r.blocks.len() as u32 + hits.len() as u32;
        let tokens_after = r.computed + hits.len() as u32 * bs + n;
        let need = tokens_after.div_ceil(bs).saturating_sub(held);
        let evictable = self.pool.count_evictable(hits);
        if need > self.pool.num_free().saturating_sub(evictable) {
            return false;
        }
        self.pool.touch(hits);
        let mut blocks = std::mem::take(&mut self.req_mut(slot).blocks);
        blocks.extend_from_slice(hits);
        self.pool.allocate(need, &mut blocks);
        self.req_mut(slot).blocks = blocks;
        true
    }

    /// Registers newly full blocks of `r` in the prefix cache.
    fn cache_full_blocks(&mut self, slot: u32) {
        if !self.cfg.enable_prefix_caching {
            return;
        }
        let bs = self.cfg.block_size;
        let filler = &self.filler_ids;
        let Some(r) = self.slab[slot as usize].as_mut() else {
            return;
        };
        extend_hashes(r, filler);
        let full = (r.computed.min(r.known()) / bs).min(r.hashes.len() as u32);
        while r.cached_blocks < full {
            let i = r.cached_blocks as usize;
            if i < r.blocks.len() {
                self.pool.cache_block(r.blocks[i], r.hashes[i]);
            }
            r.cached_blocks += 1;
        }
    }

    fn preempt(&mut self, slot: u32) {
        let blocks = {
            let r = self.req_mut(slot);
            r.computed = 0;
            r.placeholders = 0;
            r.cached_blocks = 0;
            r.num_preemptions += 1;
            r.epoch += 1;
            r.status = Status::Waiting;
            std::mem::take(&mut r.blocks)
        };
        self.pool.free(&blocks);
        let mut blocks = blocks;
        blocks.clear();
        self.req_mut(slot).blocks = blocks;
        self.waiting.push_front(slot);
        self.stats.num_preemptions += 1;
    }

    fn push_entry(&mut self, batch: &mut Batch, slot: u32, n: u32) {
        let r = self.req_mut(slot);
        let c0 = r.computed;
        r.computed += n;
        let samples = r.computed >= r.known() + r.placeholders;
        if samples {
            r.placeholders += 1;
        }
        batch.entries.push(Entry {
            slot,
            uid: r.uid,
            epoch: r.epoch,
            samples,
        });
        batch.work.add(c0, n, samples);
        self.cache_full_blocks(slot);
    }

    /// vLLM V1 `Scheduler.schedule()` (simulator.md §2.2).
    fn schedule(&mut self, now_s: f64, batch: &mut Batch, preempted: &mut Vec<RequestId>) {
        let mut budget = self.cfg.max_num_batched_tokens;
        let max_len = self.cfg.max_model_len;
        let mut preempted_now = false;

        // (1) RUNNING, in admission order.
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            let n = {
                let r = self.req(slot);
                let want = r.known() + r.placeholders;
                let prefill_done = r.computed >= r.known();
                if prefill_done && r.out + r.placeholders >= r.target {
                    0
                } else {
                    want.saturating_sub(r.computed)
                        .min(budget)
                        .min((max_len - 1).saturating_sub(r.computed).max(1))
                }
            };
            if n == 0 {
                i += 1;
                continue;
            }
            loop {
                if self.allocate_slots(slot, n, &[]) {
                    break;
                }
                let Some(victim) = self.running.pop() else {
                    break 'running;
                };
                self.preempt(victim);
                preempted.push(RequestId(self.req(victim).uid));
                preempted_now = true;
                if victim == slot {
                    break 'running;
                }
            }
            self.push_entry(batch, slot, n);
            budget -= n;
            i += 1;
        }

        // (2) WAITING, FCFS, only if nobody was preempted in this step.
        if preempted_now {
            return;
        }
        let bs = self.cfg.block_size;
        while budget > 0 && self.running.len() < self.cfg.max_num_seqs as usize {
            let Some(&slot) = self.waiting.front() else {
                break;
            };
            let mut hits = std::mem::take(&mut self.hit_scratch);
            hits.clear();
            let (known, num_hit) = {
                let r = self.req(slot);
                let known = r.known();
                let max_blocks = ((known - 1) / bs) as usize;
                let nh = self
                    .pool
                    .find_cached_prefix(&r.hashes, max_blocks, &mut hits);
                (known, nh as u32)
            };
            let cached = num_hit * bs;
            let n = (known - cached).min(budget);
            if !self.allocate_slots(slot, n, &hits) {
                self.hit_scratch = hits;
                break;
            }
            self.hit_scratch = hits;
            self.waiting.pop_front();
            self.running.push(slot);
            let first_admission = {
                let r = self.req_mut(slot);
                r.status = Status::Running;
                r.computed = cached;
                r.cached_blocks = num_hit;
                let first = r.scheduled_s.is_none();
                if first {
                    r.scheduled_s = Some(now_s);
                    r.cached_tokens = cached;
                }
                r.num_preemptions == 0
            };
            if first_admission {
                // PrefixCacheStats.record at admission; resumed requests are not exported.
                self.stats.prefix_cache_queries += u64::from(known);
                self.stats.prefix_cache_hits += u64::from(cached);
            }
            self.push_entry(batch, slot, n);
            budget -= n;
        }
    }

    fn execute(&mut self, now_s: f64, batch: &Batch, result: &mut StepResult) {
        if batch.entries.is_empty() {
            return;
        }
        let f = self.telemetry.clock_factor();
        let mut cost = self.model.cost(&batch.work, f);
        if self.cfg.step_jitter_sigma > 0.0 {
            // Log-normal jitter with median 1.
            cost.duration_s *= (self.cfg.step_jitter_sigma * standard_normal(&mut self.rng)).exp();
        }
        let duration = cost.duration_s * self.cfg.time_scale;
        let done_s = now_s + duration;
        self.telemetry
            .record_step(now_s, done_s, &cost, &self.model, &self.cfg);
        self.stats.estimated_flops += cost.flops;
        self.stats.estimated_read_bytes += cost.read_bytes;
        self.stats.estimated_write_bytes += cost.write_bytes;
        result.duration_s = duration;

        let mut iter_prompt = 0u64;
        let mut iter_gen = 0u64;
        let mut any_finished = false;
        for e in &batch.entries {
            if !e.samples {
                continue;
            }
            let Some(r) = self.slab[e.slot as usize].as_mut() else {
                continue;
            };
            if r.uid != e.uid || r.epoch != e.epoch || r.status != Status::Running {
                continue;
            }
            r.placeholders = r.placeholders.saturating_sub(1);
            let idx = r.out;
            r.out += 1;
            iter_gen += 1;
            if idx == 0 {
                r.first_token_s = Some(done_s);
                iter_prompt += u64::from(r.prompt_len);
                self.stats
                    .on_first_token(r.prompt_len, r.cached_tokens, done_s - r.arrival_s);
            } else {
                self.stats.itl.observe(done_s - r.last_token_s);
            }
            r.last_token_s = done_s;
            let finished = if r.out >= r.target {
                Some(r.target_reason)
            } else {
                None
            };
            result.tokens.push(TokenEvent {
                id: RequestId(r.uid),
                token_index: idx,
                finished,
            });
            if let Some(reason) = finished {
                self.finish(e.slot, reason, done_s);
                any_finished = true;
            }
        }
        self.stats.generation_tokens += iter_gen;
        if iter_gen > 0 {
            self.stats
                .iteration_tokens
                .observe((iter_prompt + iter_gen) as f64);
        }
        if any_finished {
            let slab = &self.slab;
            self.running.retain(|&s| slab[s as usize].is_some());
        }
    }

    /// Records a finished request (vLLM `update_from_finished_request`) and frees its slot/blocks.
    /// Takes a request out of its slot and frees its KV blocks, its id and the slot; the
    /// request, if the slot held one.
    fn release(&mut self, slot: u32) -> Option<Request> {
        let r = self.slab[slot as usize].take()?;
        self.pool.free(&r.blocks);
        self.by_id.remove(&r.uid);
        self.free_slots.push(slot);
        Some(r)
    }

    fn finish(&mut self, slot: u32, reason: FinishReason, now_s: f64) {
        let Some(r) = self.release(slot) else {
            return;
        };
        if let Some(sched) = r.scheduled_s {
            self.recent_queue
                .push((RequestId(r.uid), (sched - r.queued_s).max(0.0)));
        }
        self.stats.on_finished(&metrics::FinishedRequest {
            reason,
            arrival_s: r.arrival_s,
            queued_s: r.queued_s,
            scheduled_s: r.scheduled_s,
            first_token_s: r.first_token_s,
            last_token_s: if r.out > 0 { r.last_token_s } else { now_s },
            finish_s: now_s,
            prompt_len: r.prompt_len,
            cached_tokens: r.cached_tokens,
            num_generation_tokens: r.out,
            max_tokens: r.max_tokens,
            num_preemptions: r.num_preemptions,
        });
    }

    /// vLLM 0.32 `/metrics` text (engine families only: `vllm:*`), at engine time `now_s`.
    pub fn render_metrics(&self, now_s: f64) -> String {
        metrics::render(self, now_s)
    }

    /// dcgm-exporter `/metrics` text for the engine's GPUs at engine time `now_s`.
    pub fn render_dcgm(&self, now_s: f64) -> String {
        dcgm::render(self, now_s)
    }

    /// KV blocks registered in the prefix cache (referenced or evictable).
    pub fn num_cached_blocks(&self) -> usize {
        self.pool.num_cached()
    }
}

fn extend_hashes(r: &mut Request, filler: &[u32]) {
    let bs = spec::BLOCK_SIZE as usize;
    let known = r.known() as usize;
    while (r.hashes.len() + 1) * bs <= known {
        let start = r.hashes.len() * bs;
        let parent = r.hashes.last().copied().unwrap_or(0);
        let prompt = &r.prompt;
        let pl = prompt.len();
        let h = chain_hash(
            parent,
            (start..start + bs).map(|i| {
                if i < pl {
                    prompt[i]
                } else {
                    filler[(i - pl) % filler.len()]
                }
            }),
        );
        r.hashes.push(h);
    }
}

#[cold]
fn unreachable_slot() -> ! {
    // Slots in the queues always hold a request: every removal path takes the slot out of the
    // queues first. Reaching this is an internal bug, not bad input.
    panic!("headroom-sim: internal error: queue refers to an empty request slot")
}

#[cfg(test)]
mod tests;

/// A standard normal draw (Box–Muller on two uniforms).
fn standard_normal(rng: &mut Xoshiro256PlusPlus) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-12);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}
