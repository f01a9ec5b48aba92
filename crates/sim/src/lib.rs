//! `headroom-sim`: the engine twin — a simulated vLLM engine that behaves like the real scheduler.
//!
//! - [`Engine`]: vLLM V1 scheduling on one step clock (running first, then waiting FCFS; token
//!   budget; chunked prefill; paged KV blocks with prefix caching; recompute preemption), request
//!   timestamps and metrics as vLLM defines them, a roofline step-time model, and a GPU power /
//!   thermal / clock model. See `engine` and `../../shared/reference/simulator.md`.
//! - [`SimSpec`] → [`EngineConfig`]: GPU and model presets (YAML data under `presets/`), dtype,
//!   tensor parallelism, vLLM's defaults and KV pool sizing.
//! - [`run_virtual`]: a discrete-event virtual clock for tests and planning.
//! - [`Engine::render_metrics`] / [`Engine::render_dcgm`]: vLLM 0.32 and dcgm-exporter text.
//! - `server`: the OpenAI-compatible HTTP server (wall clock) around the engine.
//!
//! Tokenisation is a deterministic stand-in (no model download): see [`tokenize`].

pub mod engine;
pub mod server;

pub use engine::virtual_clock::{
    Load, RequestRecord, Sample, VirtualOptions, VirtualRun, run_virtual,
};
pub use engine::{
    ConfigError, Engine, EngineConfig, FinishReason, NewRequest, RequestId, SimSpec, StepResult,
    TokenEvent,
};

/// Size of the stand-in vocabulary: token ids are `0..TOKENIZER_VOCAB`.
pub const TOKENIZER_VOCAB: u32 = 131_072;

/// Filler text repeats with this period (in output tokens).
pub const FILLER_PERIOD: u32 = 4096;

const FILLER_WORDS: [&str; 64] = [
    "the", "model", "answer", "is", "a", "token", "of", "and", "to", "in", "that", "it", "with",
    "as", "for", "on", "this", "by", "be", "are", "from", "at", "or", "an", "which", "can", "more",
    "data", "system", "time", "each", "when", "request", "server", "result", "value", "first",
    "then", "also", "into", "only", "other", "new", "some", "these", "two", "may", "will", "used",
    "over", "such", "after", "most", "where", "through", "between", "under", "while", "both",
    "same", "well", "since", "here", "next",
];

/// Deterministic stand-in tokenizer: **one token per whitespace-separated word**.
///
/// The id of a word is the 64-bit FNV-1a hash of its UTF-8 bytes modulo [`TOKENIZER_VOCAB`], so
/// equal words get equal ids (prefix caching works on repeated text) and the token count of a
/// text is `text.split_whitespace().count()`. Load generators rely on "one word = one token".
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace().map(word_id).collect()
}

fn word_id(word: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(TOKENIZER_VOCAB)) as u32
}

fn filler_word(token_index: u32, seed: u64) -> &'static str {
    let i = token_index % FILLER_PERIOD;
    let h = engine::kv::splitmix64(seed ^ (u64::from(i) << 20) ^ 0x00f1_11e4);
    FILLER_WORDS[(h % FILLER_WORDS.len() as u64) as usize]
}

/// Deterministic filler text of output token `token_index` (0-based) under `seed`: a leading
/// space and one word, e.g. `" model"`. Concatenating the pieces of tokens `0..n` and
/// re-tokenising with [`tokenize`] gives exactly `n` tokens. The sequence repeats every
/// [`FILLER_PERIOD`] tokens.
pub fn filler_token_text(token_index: u32, seed: u64) -> String {
    format!(" {}", filler_word(token_index, seed))
}

/// Token id of [`filler_token_text`]`(token_index, seed)` under [`tokenize`].
pub fn filler_token_id(token_index: u32, seed: u64) -> u32 {
    word_id(filler_word(token_index, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_per_word() {
        assert_eq!(tokenize("").len(), 0);
        assert_eq!(tokenize("  hello   world\n again\t").len(), 3);
        let a = tokenize("hello world hello");
        assert_eq!(a[0], a[2]);
        assert_ne!(a[0], a[1]);
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (published test vector); mod 2^17.
        assert_eq!(
            tokenize("a"),
            vec![(0xaf63_dc4c_8601_ec8c_u64 % 131_072) as u32]
        );
    }

    #[test]
    fn filler_retokenises_to_same_count_and_ids() {
        let n = 300;
        let text: String = (0..n).map(|i| filler_token_text(i, 7)).collect();
        let toks = tokenize(&text);
        assert_eq!(toks.len(), n as usize);
        for (i, t) in toks.iter().enumerate() {
            assert_eq!(*t, filler_token_id(i as u32, 7));
        }
        assert!(filler_token_text(0, 7).starts_with(' '));
        assert_eq!(filler_token_text(5, 1), filler_token_text(5, 1));
    }
}
