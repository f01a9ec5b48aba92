//! Prompt calibration: fitting synthetic prompts to the target's own tokenizer before the first
//! level, so that a sweep without `--tokenizer` still sends the prompt lengths its workload asks
//! for.
//!
//! A workload's `prompt_tokens` (plus `shared_prefix_tokens`) is what the server prefills, as it
//! reports it in `usage.prompt_tokens`. Two things separate that from a count of words:
//!
//! 1. **Tokens per word.** Synthetic prompts are words of [`WORDS`]. Calibration measures each
//!    word's cost in the target's tokenizer, at the start of a text (`"w"`), after a space
//!    (`"w w"` minus `"w"`) and after a line end (where a chat template puts a message's first
//!    word), and keeps the words that are one token after a space; those that are one token in
//!    every position may start a text. A text of such
//!    words has as many tokens as words, because every LLM tokenizer in use splits on spaces
//!    before merging (byte-level BPE pre-tokenizers, SentencePiece's whitespace split), so no
//!    token spans two words. The sum is checked on a long sample text.
//! 2. **Per-request overhead.** The server adds special tokens (BOS) and, on the chat endpoint,
//!    the chat template's tokens around each message. One probe request per prompt shape the
//!    workload uses (completions; chat with a user message; chat with a system message too)
//!    gives `usage.prompt_tokens` for a content of known length; the difference is subtracted
//!    from the unique part of every prompt of that shape.
//!
//! How each word is counted, in order of preference:
//! - a `--tokenizer` file ([`Method::Tokenizer`]): exact and local; only the overhead is probed;
//! - the server's `POST /tokenize` ([`Method::TokenizeEndpoint`]: vLLM, SGLang and llama.cpp's
//!   server serve it; one body carries both dialects' fields);
//! - `usage.prompt_tokens` of tiny requests (`max_tokens` 1, [`Method::Usage`]): every
//!   OpenAI-compatible server reports it; a smaller word list is measured to bound the probe.
//!
//! Shared prefixes stay byte-identical across a class's requests (they are drawn from a seed of
//! the class name), so a prefix cache still sees them.

use crate::client::{CancellationFlag, PreparedRequest, Target};
use crate::prompt::{ClassPlan, DrawnRequest, PromptTokenizer, WORDS};
use crate::workload::Endpoint;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How prompt token counts were learned.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Method {
    /// The embedded twin counts one token per word: nothing to learn.
    Twin,
    /// A local `tokenizer.json` counted the words.
    Tokenizer {
        /// The file given.
        path: String,
    },
    /// The server's `POST /tokenize` counted the words.
    TokenizeEndpoint {
        /// The path used (`/tokenize`).
        path: String,
    },
    /// `usage.prompt_tokens` of tiny requests counted the words.
    Usage,
    /// Nothing could count tokens; prompts are one word per token, approximate.
    Words {
        /// Why calibration did not happen.
        reason: String,
    },
}

impl Method {
    /// A few words for the terminal.
    pub fn describe(&self) -> String {
        match self {
            Method::Twin => "the engine twin's one token per word".into(),
            Method::Tokenizer { path } => format!("the tokenizer {path}"),
            Method::TokenizeEndpoint { path } => format!("the server's {path}"),
            Method::Usage => "the server's usage.prompt_tokens".into(),
            Method::Words { reason } => format!("uncalibrated words ({reason})"),
        }
    }
}

/// The prompt shapes whose per-request overhead differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// `/v1/completions`: one text.
    Completions,
    /// `/v1/chat/completions` with one user message.
    ChatUser,
    /// `/v1/chat/completions` with a system message (the shared prefix) and a user message.
    ChatSystemUser,
}

impl Shape {
    /// The shape of a class's requests.
    pub fn of(endpoint: Endpoint, has_prefix: bool) -> Shape {
        match (endpoint, has_prefix) {
            (Endpoint::Completions, _) => Shape::Completions,
            (Endpoint::Chat, false) => Shape::ChatUser,
            (Endpoint::Chat, true) => Shape::ChatSystemUser,
        }
    }
}

/// What the calibration learned; attached to every [`ClassPlan`].
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// How the counts were learned.
    pub method: Method,
    /// Words that are one token after a space (`None`: the plain [`WORDS`] list, or a local
    /// tokenizer that trims to exact counts itself).
    pub(crate) vocabulary: Option<Vec<&'static str>>,
    /// Words that are also one token at the start of a text.
    pub(crate) start_words: Option<Vec<&'static str>>,
    /// Tokens the server adds to a request of each shape beyond its content.
    pub overhead: Vec<(Shape, u32)>,
    /// Tokens per whitespace-separated word of ordinary text (for dataset prompts, whose text
    /// is not ours to choose), measured on the words counted.
    pub tokens_per_word: Option<f64>,
}

impl Calibration {
    /// No calibration: one word per token, no overhead (the twin's rule).
    pub fn words(method: Method) -> Calibration {
        Calibration {
            method,
            vocabulary: None,
            start_words: None,
            overhead: Vec::new(),
            tokens_per_word: None,
        }
    }

    /// Per-request overhead of a shape, tokens (0 when not measured).
    pub fn overhead_of(&self, s: Shape) -> u32 {
        self.overhead
            .iter()
            .find(|(x, _)| *x == s)
            .map_or(0, |(_, n)| *n)
    }

    /// The word list for text after a space.
    pub(crate) fn middle_words(&self) -> &[&'static str] {
        self.vocabulary.as_deref().unwrap_or(WORDS)
    }

    /// The word list for the first word of a text.
    pub(crate) fn first_words(&self) -> &[&'static str] {
        self.start_words
            .as_deref()
            .or(self.vocabulary.as_deref())
            .unwrap_or(WORDS)
    }
}

/// What the calibration did, for `manifest.json` and the terminal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationReport {
    /// How the counts were learned.
    pub method: Method,
    /// Words kept as one token each (of [`WORDS`]' count measured).
    pub vocabulary_words: Option<usize>,
    /// Words measured.
    pub words_measured: usize,
    /// Per-request overhead by shape, tokens.
    pub overhead_tokens: Vec<(Shape, u32)>,
    /// Tokens per word of ordinary text (dataset prompts).
    pub tokens_per_word: Option<f64>,
    /// Requests or tokenize calls the calibration sent (outside every level).
    pub requests_sent: u32,
    /// One check per class: a request drawn as the sweep will draw it, sent with `max_tokens`
    /// 1; its `usage.prompt_tokens` against the workload's request.
    pub checks: Vec<CalibrationCheck>,
    /// What went wrong or is worth knowing, in a sentence each.
    pub notes: Vec<String>,
}

impl CalibrationReport {
    /// The report of prompts left uncalibrated, with why ([`Method::Words`]), and the
    /// calibration that goes with it.
    pub fn uncalibrated(reason: String) -> (Calibration, CalibrationReport) {
        let method = Method::Words { reason };
        (
            Calibration::words(method.clone()),
            CalibrationReport {
                method,
                vocabulary_words: None,
                words_measured: 0,
                overhead_tokens: Vec::new(),
                tokens_per_word: None,
                requests_sent: 0,
                checks: Vec::new(),
                notes: Vec::new(),
            },
        )
    }

    /// The largest relative gap of the checks (`realised / requested − 1`), if any was made.
    pub fn worst_residual(&self) -> Option<f64> {
        self.checks
            .iter()
            .filter(|c| c.requested > 0)
            .map(|c| c.realised as f64 / c.requested as f64 - 1.0)
            .max_by(|a, b| a.abs().total_cmp(&b.abs()))
    }
}

/// One class's check request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationCheck {
    /// Class name.
    pub class: String,
    /// Prompt tokens the workload asked for.
    pub requested: u32,
    /// `usage.prompt_tokens`.
    pub realised: u32,
}

/// Counts the tokens of a text the way the target will.
enum Counter {
    /// `POST /tokenize` (vLLM/SGLang answer `count`, llama.cpp answers `tokens`).
    Endpoint,
    /// `usage.prompt_tokens` of a request to this endpoint with `max_tokens` 1.
    Usage(Endpoint),
}

const TOKENIZE_PATH: &str = "/tokenize";
/// Words measured by the usage method (two requests each): enough variety for random prompts,
/// few enough to cost seconds, not minutes, on a slow server.
const USAGE_WORDS: usize = 48;
/// Concurrent calibration requests: gentle on the server, quick on loopback.
const PARALLEL: usize = 8;
/// The largest token count a calibration text can have (its texts are at most a few hundred
/// words): anything above is the server's error.
const MAX_PLAUSIBLE_COUNT: u32 = 1 << 20;
/// The largest per-request overhead believed (a chat template's tokens): beyond it the server's
/// usage and its tokenizer do not agree.
const MAX_OVERHEAD: u32 = 4096;

/// Tries of one calibration count before it is given up.
const ATTEMPTS: u32 = 3;

impl Counter {
    /// Tokens of `text` (without special tokens for endpoint counts; with the
    /// request's overhead for usage: a constant that differences cancel).
    async fn count(&self, target: &Target, text: &str) -> Result<u32, String> {
        match self {
            Counter::Endpoint => {
                let mut body = serde_json::json!({
                    // vLLM / SGLang
                    "prompt": text,
                    "add_special_tokens": false,
                    // llama.cpp's server
                    "content": text,
                    "add_special": false,
                });
                if let Some(m) = target.model() {
                    body["model"] = serde_json::Value::from(m);
                }
                let (status, bytes) = target.post_json(TOKENIZE_PATH, &body, 1 << 20).await?;
                if !status.is_success() {
                    return Err(format!("HTTP {}", status.as_u16()));
                }
                let v: serde_json::Value = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("answer is not JSON ({e})"))?;
                // A count no prompt of ours can have is the server's error, not a size.
                let plausible = |n: u64| {
                    u32::try_from(n)
                        .ok()
                        .filter(|n| *n <= MAX_PLAUSIBLE_COUNT)
                        .ok_or_else(|| format!("answered a count of {n} tokens"))
                };
                if let Some(n) = v.get("count").and_then(serde_json::Value::as_u64) {
                    return plausible(n);
                }
                v.get("tokens")
                    .and_then(serde_json::Value::as_array)
                    .ok_or_else(|| "answer has neither `count` nor `tokens`".to_string())
                    .and_then(|a| plausible(a.len() as u64))
            }
            Counter::Usage(e) => usage_once(target, *e, "", text).await,
        }
    }

    /// [`Counter::count`], tried up to [`ATTEMPTS`] times: a server that errs now and then (whose
    /// error rate the sweep is to measure) must not leave the prompts uncalibrated.
    async fn count_retrying(&self, target: &Target, text: &str) -> Result<u32, String> {
        retrying(|| self.count(target, text)).await
    }

    /// Counts many texts, [`PARALLEL`] at a time, in order.
    async fn count_all(&self, target: &Target, texts: &[String]) -> Result<Vec<u32>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(PARALLEL) {
            let counts = futures_util::future::join_all(
                chunk.iter().map(|t| self.count_retrying(target, t)),
            )
            .await;
            for c in counts {
                out.push(c?);
            }
        }
        Ok(out)
    }
}

/// `usage.prompt_tokens` of one streamed request (`max_tokens` 1) with `prefix` (the system
/// message on chat; prepended on completions) and `prompt`.
async fn usage_tokens(
    target: &Target,
    endpoint: Endpoint,
    prefix: &str,
    prompt: &str,
) -> Result<u32, String> {
    retrying(|| usage_once(target, endpoint, prefix, prompt)).await
}

/// `attempt`, tried up to [`ATTEMPTS`] times with a growing pause (200, 400 ms): the last error
/// when none succeeds.
async fn retrying<F, Fut>(attempt: F) -> Result<u32, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u32, String>>,
{
    let mut last = String::new();
    for k in 0..ATTEMPTS {
        if k > 0 {
            tokio::time::sleep(Duration::from_millis(100 << k)).await;
        }
        match attempt().await {
            Ok(n) => return Ok(n),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// One try of [`usage_tokens`].
async fn usage_once(
    target: &Target,
    endpoint: Endpoint,
    prefix: &str,
    prompt: &str,
) -> Result<u32, String> {
    let d = DrawnRequest {
        class: 0,
        endpoint,
        prefix: Arc::from(prefix),
        prompt: prompt.to_string(),
        requested_prompt_tokens: 0,
        max_tokens: 1,
        ignore_eos: false,
    };
    let p = PreparedRequest::encode(&d, target.model());
    let cancel = CancellationFlag::new();
    let limit = target.config().request_timeout.min(Duration::from_secs(60));
    let r = tokio::time::timeout(limit, target.send(&p, Instant::now(), &cancel))
        .await
        .map_err(|_| format!("no answer within {} s", limit.as_secs()))?;
    if !r.outcome.is_success() {
        return Err(format!(
            "{} {}: {}",
            endpoint.path(),
            r.outcome.label(),
            r.message.unwrap_or_default()
        ));
    }
    r.prompt_tokens
        .ok_or_else(|| {
            format!(
                "{}: the answer carried no usable usage.prompt_tokens",
                endpoint.path()
            )
        })
        .and_then(|n| {
            (n <= MAX_PLAUSIBLE_COUNT).then_some(n).ok_or_else(|| {
                format!(
                    "{}: usage.prompt_tokens {n} for a short text",
                    endpoint.path()
                )
            })
        })
}

/// Why calibration could not finish; the sweep falls back to words and says so.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("prompt calibration ({method}): {reason}")]
pub struct CalibrationError {
    /// The method that failed.
    pub method: String,
    /// What went wrong.
    pub reason: String,
}

/// Learns the target's tokenizer before the first level (see the module docs). `plans` are the
/// workload's classes, uncalibrated; `tokenizer` is `--tokenizer`, if given. Sends at most a few
/// hundred tiny requests or tokenize calls, outside every level.
///
/// Never fails outright: a method that does not work falls through to the next, and when none
/// works the report's method is [`Method::Words`] with the reason.
pub async fn calibrate(
    target: &Target,
    plans: &[ClassPlan],
    tokenizer: Option<&PromptTokenizer>,
    tokenizer_path: Option<&str>,
) -> (Calibration, CalibrationReport) {
    let mut notes = Vec::new();
    let mut sent = 0u32;
    let usage_endpoint = plans
        .iter()
        .map(|p| p.endpoint)
        .find(|e| *e == Endpoint::Completions)
        .unwrap_or(Endpoint::Chat);
    let (mut cal, measured) = match tokenizer {
        // The tokenizer trims every text to its exact count; only the overhead is learned.
        Some(_) => (
            Calibration::words(Method::Tokenizer {
                path: tokenizer_path.unwrap_or("tokenizer.json").to_string(),
            }),
            None,
        ),
        None => {
            let mut learned = None;
            match probe_endpoint(target, &mut sent).await {
                Ok(()) => match fit_words(target, &Counter::Endpoint, WORDS, &mut sent).await {
                    Ok(w) => {
                        learned = Some((
                            Method::TokenizeEndpoint {
                                path: TOKENIZE_PATH.into(),
                            },
                            w,
                        ))
                    }
                    Err(e) => notes.push(format!("{TOKENIZE_PATH} answered but: {e}")),
                },
                Err(e) => notes.push(format!("no usable {TOKENIZE_PATH} ({e}); using usage")),
            }
            if learned.is_none() {
                let words = &WORDS[..USAGE_WORDS.min(WORDS.len())];
                match fit_words(target, &Counter::Usage(usage_endpoint), words, &mut sent).await {
                    Ok(w) => learned = Some((Method::Usage, w)),
                    Err(e) => notes.push(format!("usage.prompt_tokens: {e}")),
                }
            }
            match learned {
                Some((m, w)) => {
                    let measured = w.measured;
                    let mut c = Calibration::words(m);
                    c.vocabulary = Some(w.vocabulary);
                    c.start_words = Some(w.start_words);
                    c.tokens_per_word = Some(w.tokens_per_word);
                    (c, Some(measured))
                }
                None => {
                    let reason = notes
                        .last()
                        .cloned()
                        .unwrap_or_else(|| "nothing counted tokens".into());
                    (Calibration::words(Method::Words { reason }), None)
                }
            }
        }
    };
    if !matches!(cal.method, Method::Words { .. }) {
        // Overhead: one request per shape, its content a calibrated text of known length.
        let mut shapes: Vec<(Shape, Endpoint)> = Vec::new();
        for p in plans {
            let s = Shape::of(p.endpoint, !p.shared_prefix.is_empty());
            if !shapes.iter().any(|(x, _)| *x == s) {
                shapes.push((s, p.endpoint));
            }
        }
        for (shape, endpoint) in shapes {
            match shape_overhead(target, &cal, tokenizer, shape, endpoint, &mut sent).await {
                Ok(o) => cal.overhead.push((shape, o)),
                Err(e) => notes.push(format!("overhead of {shape:?}: {e}")),
            }
        }
    }
    let report = CalibrationReport {
        method: cal.method.clone(),
        vocabulary_words: cal.vocabulary.as_ref().map(Vec::len),
        words_measured: measured.unwrap_or(0),
        overhead_tokens: cal.overhead.clone(),
        tokens_per_word: cal.tokens_per_word,
        requests_sent: sent,
        checks: Vec::new(),
        notes,
    };
    (cal, report)
}

/// Sends one request per class, drawn as the sweep draws (seed `seed`), with `max_tokens` 1,
/// and records `usage.prompt_tokens` against the request. Classes whose check fails are left
/// out, with a note.
pub async fn check_plans(
    target: &Target,
    plans: &[ClassPlan],
    seed: u64,
    report: &mut CalibrationReport,
) {
    let mut rng = crate::arrivals::seeded_rng(seed, 0x4341_4c49);
    for (i, p) in plans.iter().enumerate() {
        let d = match p.draw(i, &mut rng) {
            Ok(d) => d,
            Err(e) => {
                report.notes.push(format!("check of `{}`: {e}", p.name));
                continue;
            }
        };
        report.requests_sent += 1;
        match usage_tokens(target, d.endpoint, &d.prefix, &d.prompt).await {
            Ok(n) => report.checks.push(CalibrationCheck {
                class: p.name.clone(),
                requested: d.requested_prompt_tokens,
                realised: n,
            }),
            Err(e) => report.notes.push(format!("check of `{}`: {e}", p.name)),
        }
    }
}

/// Is `/tokenize` there and does it count plausibly? (Two words must be 2–8 tokens.)
async fn probe_endpoint(target: &Target, sent: &mut u32) -> Result<(), String> {
    *sent += 1;
    let n = Counter::Endpoint.count(target, "the claim").await?;
    if (1..=8).contains(&n) {
        Ok(())
    } else {
        Err(format!("counted {n} tokens for two words"))
    }
}

/// The words that are one token each, as one counter sees them.
struct FittedWords {
    vocabulary: Vec<&'static str>,
    start_words: Vec<&'static str>,
    tokens_per_word: f64,
    measured: usize,
}

/// Measures each word at the start of a text and after a space; keeps those that are one token
/// both ways (after a space at least), then checks that a long text of them counts as its words.
async fn fit_words(
    target: &Target,
    counter: &Counter,
    words: &'static [&'static str],
    sent: &mut u32,
) -> Result<FittedWords, String> {
    // Each word alone, twice (the cost after a space), and after a line end: a chat template
    // puts the first word of a message after "\n", where SentencePiece adds no word marker, so
    // a word that is one token at the start of a text can be two there.
    let mut texts = Vec::with_capacity(3 * words.len() + 1);
    texts.push("the\n".to_string());
    for w in words {
        texts.push((*w).to_string());
        texts.push(format!("{w} {w}"));
        texts.push(format!("the\n{w}"));
    }
    let counts = counter.count_all(target, &texts).await?;
    *sent += texts.len() as u32;
    let after_newline_base = i64::from(counts[0]);
    // alone = base + start cost; twice − alone = the cost after a space.
    let triples: Vec<(u32, i64, i64)> = counts[1..]
        .chunks(3)
        .map(|c| {
            (
                c[0],
                i64::from(c[1]) - i64::from(c[0]),
                i64::from(c[2]) - after_newline_base,
            )
        })
        .collect();
    // The counter's own constant (BOS, template): the commonest `alone − 1` among one-token words.
    let mut bases: Vec<i64> = triples
        .iter()
        .filter(|(_, after, _)| *after == 1)
        .map(|(alone, _, _)| i64::from(*alone) - 1)
        .collect();
    if bases.is_empty() {
        return Err("no word of the list is a single token after a space".into());
    }
    bases.sort_unstable();
    let base = mode(&bases);
    let mut vocabulary = Vec::new();
    let mut start_words = Vec::new();
    let mut tokens = 0i64;
    for (w, (alone, after, after_newline)) in words.iter().zip(&triples) {
        tokens += after.max(&0);
        if *after == 1 {
            vocabulary.push(*w);
            if i64::from(*alone) - base == 1 && *after_newline == 1 {
                start_words.push(*w);
            }
        }
    }
    if vocabulary.len() < 8 {
        return Err(format!(
            "only {} of {} words are single tokens",
            vocabulary.len(),
            words.len()
        ));
    }
    if start_words.is_empty() {
        start_words = vocabulary.clone();
    }
    // Additivity: a 64-word text of the vocabulary must count 64 (+ base).
    let mut rng = crate::arrivals::seeded_rng(7, 0x4144_4454);
    let sample = crate::prompt::words_text(64, &mut rng, &start_words, &vocabulary, false);
    *sent += 1;
    let n = i64::from(counter.count(target, &sample).await?) - base;
    if (n - 64).abs() > 1 {
        return Err(format!(
            "a 64-word text of single-token words counted {n} tokens: this tokenizer merges across words"
        ));
    }
    Ok(FittedWords {
        vocabulary,
        start_words,
        tokens_per_word: tokens as f64 / words.len() as f64,
        measured: words.len(),
    })
}

/// The commonest value of a sorted slice (the smallest of ties).
fn mode(sorted: &[i64]) -> i64 {
    let mut best = (sorted[0], 0usize);
    let mut i = 0;
    while i < sorted.len() {
        let j = sorted[i..].iter().take_while(|x| **x == sorted[i]).count();
        if j > best.1 {
            best = (sorted[i], j);
        }
        i += j;
    }
    best.0
}

/// `usage.prompt_tokens` minus the content's tokens, for one request of `shape`.
async fn shape_overhead(
    target: &Target,
    cal: &Calibration,
    tokenizer: Option<&PromptTokenizer>,
    shape: Shape,
    endpoint: Endpoint,
    sent: &mut u32,
) -> Result<u32, String> {
    const PREFIX: u32 = 8;
    const BODY: u32 = 16;
    let mut rng = crate::arrivals::seeded_rng(11, 0x4f56_4552);
    let synth = |n: u32, lead: bool, rng: &mut crate::arrivals::SeededRng| match tokenizer {
        Some(t) => crate::prompt::synth_text(n, rng, Some(t), lead).map_err(|e| e.to_string()),
        None => Ok((
            crate::prompt::words_text(n as usize, rng, cal.first_words(), cal.middle_words(), lead),
            n,
        )),
    };
    let (prefix, pk) = match shape {
        Shape::ChatSystemUser => synth(PREFIX, false, &mut rng)?,
        _ => (String::new(), 0),
    };
    // Two content sizes: a constant overhead is the same for both; a server whose usage and
    // tokenizer disagree (usage twice the count) gives two different ones.
    let mut overheads = Vec::with_capacity(2);
    for size in [BODY, 3 * BODY] {
        let (body, bk) = synth(size, false, &mut rng)?;
        *sent += 1;
        let n = usage_tokens(target, endpoint, &prefix, &body).await?;
        let content = pk + bk;
        if n < content {
            return Err(format!(
                "usage.prompt_tokens {n} is below the content's {content} tokens"
            ));
        }
        overheads.push(n - content);
    }
    let (a, b) = (overheads[0], overheads[1]);
    if a != b {
        return Err(format!(
            "the server's usage and the counted tokens disagree: {} and {} content tokens came back as {} and {} more",
            pk + BODY,
            pk + 3 * BODY,
            a,
            b
        ));
    }
    if a > MAX_OVERHEAD {
        return Err(format!(
            "usage.prompt_tokens implies {a} tokens added per request, more than any chat template adds"
        ));
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_takes_the_commonest() {
        assert_eq!(mode(&[0, 0, 1, 1, 1, 5]), 1);
        assert_eq!(mode(&[3]), 3);
        assert_eq!(mode(&[0, 0, 2, 2]), 0);
    }
}
