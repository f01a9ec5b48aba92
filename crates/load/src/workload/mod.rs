//! The workload spec (`workload.yaml`): request classes, the load to offer, windows and seed.
//!
//! ```yaml
//! model: tiny                 # optional; default: the first model of GET /v1/models
//! seed: 42                    # default: a new random seed per run (recorded in manifest.json)
//! warmup: 5s                  # default 5s; requests started in warm-up are not recorded
//! measure: 30s                # default 30s; requests that START inside are recorded
//! load:
//!   mode: concurrency         # concurrency (closed loop) | rate (open loop, req/s)
//!   levels: [1, 2, 4, 8]      # or `auto` (the sweep brackets, then bisects); default auto
//!   arrival: poisson          # rate mode: constant | poisson | {gamma: {burstiness: 0.5}}
//!   max_concurrency: 256      # rate mode: optional cap on requests in flight
//! classes:
//!   - name: claims_assistant  # letters, digits, `_`, `-`, `.`
//!     weight: 1               # share in the mix (> 0); default 1
//!     endpoint: chat          # chat (/v1/chat/completions) | completions (/v1/completions)
//!     prompt_tokens: {uniform: {min: 40, max: 60}}
//!     max_tokens: {uniform: {min: 500, max: 1000}}
//!     ignore_eos: true        # vLLM extension: generate until max_tokens; default false
//!     shared_prefix_tokens: 200
//!   - name: from_dataset
//!     dataset: {path: sharegpt.json, format: sharegpt}
//!     max_tokens: dataset     # output length of the dataset's reply (see below)
//! ```
//!
//! **Length distributions** (`prompt_tokens`, `max_tokens`), all in tokens, all clamped to
//! `[min, max]` where given and rounded to the nearest integer:
//! - `{fixed: 50}`;
//! - `{uniform: {min: 40, max: 60}}`, inclusive;
//! - `{normal: {mean: 50, stddev: 10, min: 20, max: 80}}`, clamped (not truncated-resampled);
//! - `{lognormal: {median: 300, p90: 1200, min: 10, max: 4000}}`: parameterised by its median
//!   and 90th percentile (easier to read off a production histogram than μ and σ):
//!   `μ = ln(median)`, `σ = ln(p90 / median) / z₀.₉`, `z₀.₉ = 1.2815515655446004`; clamped;
//! - `dataset`: taken from the class's dataset (prompt: the entry's text; `max_tokens`: the
//!   whitespace word count of the entry's reply, ShareGPT, or its `max_tokens` field, JSONL).
//!
//! `prompt_tokens` is the *unique* part of each prompt; `shared_prefix_tokens` more tokens of the
//! same leading text precede it in every request of the class (a system message on the chat
//! endpoint), so the server's prefix cache is exercised. A class with a dataset and no
//! `prompt_tokens` draws its prompts from the dataset.
//!
//! **Datasets** (`dataset: {path, format}`; a relative path is resolved against the directory of
//! the workload file):
//! - `sharegpt`: a JSON list of `{"conversations": [{"from": "human", "value": "…"}, {"from":
//!   "gpt", "value": "…"}, …]}`; the prompt is the first `human` (or `user`) turn, the reply the
//!   next `gpt` (or `assistant`) turn. Entries without a human turn are skipped.
//! - `jsonl`: one JSON object per line, `{"prompt": "…"}` with an optional `"max_tokens": n`;
//!   blank lines are skipped.
//!
//! **Load** (`load:`):
//! - `mode: concurrency`, closed loop: each level keeps that many requests in flight (whole
//!   numbers, 1 to 10⁶); a new request starts when one ends, so a slow server slows the load
//!   down with it.
//! - `mode: rate`, open loop: each level is an arrival rate in req/s (0.001 to 10⁶), sent on a
//!   schedule that does not wait for the server. `arrival` (default `poisson`) spaces the
//!   arrivals, mean gap `1 / rate` in every case: `constant` (every gap `1 / rate`), `poisson`
//!   (exponential gaps, CV 1) or `{gamma: {burstiness: k}}` (gamma gaps of shape `k`, CV
//!   `1 / √k`: `k = 1` is Poisson, `k < 1` burstier, `k > 1` more regular; the parameter of
//!   vLLM's `vllm bench serve`, see [`crate::arrivals`]). `max_concurrency` (optional) caps
//!   the requests in flight: an arrival that finds the cap reached waits, and its wait is send
//!   lag. Latency counts from each request's intended send time, and the send lag (actual −
//!   intended) is recorded (see [`crate::runner`]). `arrival` and `max_concurrency` are ignored
//!   in concurrency mode.
//! - `levels`: a list, run in order, or `auto` (the sweep brackets, then bisects).
//!
//! Errors name the file, the line and column, and the field (`classes[0].max_tokens: …`), and say
//! what was expected; a value of the wrong shape is answered with the form to write instead
//! (`max_tokens: 50` → `write {fixed: 50}`; `arrival: gamma` → `write {gamma: {burstiness:
//! 0.5}}`).
//!
//! Rooms: `spec` (the types as written, the limits on levels and windows, and what a workload
//! needs of a server's context window), `distributions` (length distributions and their
//! sampling), `hints` (the deserialisers whose errors say what to write), `datasets` (ShareGPT
//! and JSONL prompt files) and `parse` (reading and validating a file, with the line
//! and column of each problem).

mod datasets;
mod distributions;
mod hints;
mod parse;
mod spec;

pub use datasets::{Dataset, DatasetEntry};
pub use distributions::{LengthDist, Z_P90, lognormal_params};
pub use spec::{
    ClassSpec, DEFAULT_WORKLOAD_YAML, DatasetFormat, DatasetSpec, Endpoint, Levels, LoadSpec,
    MAX_LEVEL, MAX_LEVEL_SPAN, MAX_REQUEST_TOKENS, MIN_RATE_PER_S, Workload, WorkloadSpec,
    check_level, window_from_secs,
};

/// What the tests of several rooms share: a minimal valid workload and a parser that names it
/// `workload.yaml`.
#[cfg(test)]
mod test_support {
    use super::Workload;
    use headroom_core::yaml::YamlError;
    use std::path::Path;

    pub(super) fn parse(t: &str) -> Result<Workload, YamlError> {
        Workload::parse(t, Path::new("workload.yaml"), Path::new("/nonexistent"))
    }

    pub(super) const MIN: &str = "load: {mode: concurrency, levels: [1, 2]}\nclasses:\n  - name: a\n    prompt_tokens: {fixed: 10}\n    max_tokens: {fixed: 5}\n";
}
