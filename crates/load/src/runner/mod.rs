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
//! exponential back-off (see `closed_loop`). Open loop sends on the
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
//!
//! Rooms: `level` (a level's options, its phases and clock, what is in flight, and how an ended
//! request is recorded), `closed_loop` (the virtual users and their pauses), `open_loop` (the
//! pacer thread, prepared requests and spare connections), `warnings` (what a level's recording
//! says about the target's admission limit or a stalled server) and `probe` (the pre-flight
//! check of a target).

mod closed_loop;
mod level;
mod open_loop;
mod probe;
mod warnings;

pub use level::{
    GoodputSlo, LevelCheck, LevelSpec, RunOptions, process_cpu_s, record_finished, run_level,
    run_level_with, thread_cpu_s, window_note,
};
pub use probe::{ModelInfo, ProbeError, ServerInfo, probe};
pub use warnings::{refusal_warning, stall_warning};
