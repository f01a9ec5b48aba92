//! Prompt synthesis: text of a requested token length, shared prefixes, and the drift check.
//!
//! **Without a tokenizer** the text has exactly N whitespace-separated words drawn from a fixed
//! list of common English words ([`WORDS`]). The engine twin counts one token per word, so there
//! the count is exact; a real tokenizer gives about 1–1.5 tokens per common English word, so
//! against a real server the count is *approximate* — the realised count comes from the server's
//! `usage` and [`token_drift`] flags the gap.
//!
//! **With a `tokenizer.json`** (Hugging Face `tokenizers`) the text is encoded (without special
//! tokens) and trimmed at a token boundary or extended by words until it encodes to exactly N
//! tokens. The server still adds its own special tokens (BOS) and, on the chat endpoint, the chat
//! template's tokens, so `usage.prompt_tokens` is N plus a small constant per request.
//!
//! **Shared prefix**: every request of a class starts with the same deterministic text of
//! `shared_prefix_tokens` tokens (words without a tokenizer), derived from the class name, so the
//! server's prefix cache sees a common prefix within a class and none across classes. On the chat
//! endpoint it is the system message; on the completions endpoint it precedes the prompt.
//!
//! The unique part of every prompt starts with random words, so two requests never share more
//! than the class prefix (otherwise a prefix cache would serve whole prompts).

use crate::arrivals::{SeededRng, seeded_rng, splitmix64};
use crate::calibrate::{Calibration, Shape};
use crate::workload::{Dataset, Endpoint, LengthDist, Workload};
use rand::RngExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Common English words, lower case ASCII, each a single token in most LLM vocabularies.
pub const WORDS: &[&str] = &[
    "the",
    "claim",
    "policy",
    "car",
    "house",
    "water",
    "damage",
    "report",
    "date",
    "time",
    "amount",
    "insurance",
    "cover",
    "customer",
    "accident",
    "repair",
    "cost",
    "please",
    "help",
    "need",
    "when",
    "where",
    "what",
    "how",
    "why",
    "who",
    "which",
    "was",
    "were",
    "is",
    "are",
    "has",
    "have",
    "had",
    "will",
    "would",
    "could",
    "should",
    "can",
    "may",
    "must",
    "not",
    "and",
    "or",
    "but",
    "if",
    "then",
    "because",
    "after",
    "before",
    "during",
    "while",
    "since",
    "until",
    "about",
    "above",
    "below",
    "under",
    "over",
    "into",
    "from",
    "with",
    "without",
    "for",
    "of",
    "to",
    "in",
    "on",
    "at",
    "by",
    "as",
    "this",
    "that",
    "these",
    "those",
    "my",
    "your",
    "our",
    "their",
    "his",
    "her",
    "its",
    "we",
    "you",
    "they",
    "he",
    "she",
    "it",
    "me",
    "us",
    "them",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "first",
    "second",
    "last",
    "next",
    "new",
    "old",
    "good",
    "bad",
    "high",
    "low",
    "long",
    "short",
    "big",
    "small",
    "large",
    "little",
    "early",
    "late",
    "young",
    "great",
    "right",
    "left",
    "day",
    "week",
    "month",
    "year",
    "today",
    "morning",
    "evening",
    "night",
    "road",
    "street",
    "city",
    "town",
    "home",
    "office",
    "work",
    "school",
    "family",
    "friend",
    "person",
    "people",
    "number",
    "name",
    "phone",
    "email",
    "letter",
    "form",
    "page",
    "file",
    "photo",
    "note",
    "door",
    "window",
    "roof",
    "wall",
    "floor",
    "kitchen",
    "room",
    "garden",
    "fire",
    "storm",
    "rain",
    "wind",
    "tree",
    "glass",
    "metal",
    "paper",
    "money",
    "price",
    "bill",
    "bank",
    "card",
    "account",
    "payment",
    "receipt",
    "company",
    "agent",
    "call",
    "answer",
    "question",
    "problem",
    "reason",
    "result",
    "change",
    "case",
    "fact",
    "part",
    "place",
    "point",
    "side",
    "way",
    "thing",
    "world",
    "life",
    "hand",
    "eye",
    "head",
    "food",
    "make",
    "take",
    "give",
    "get",
    "go",
    "come",
    "see",
    "know",
    "think",
    "look",
    "want",
    "use",
    "find",
    "tell",
    "ask",
    "feel",
    "try",
    "leave",
    "keep",
    "start",
    "stop",
    "open",
    "close",
    "send",
    "pay",
    "buy",
    "sell",
    "move",
    "live",
    "drive",
    "walk",
    "run",
    "hold",
    "bring",
    "write",
    "read",
    "show",
    "hear",
    "play",
    "turn",
    "wait",
    "happen",
    "follow",
    "check",
];

/// Relative tolerance beyond which requested and realised token counts are flagged (10 %).
pub const DEFAULT_DRIFT_TOLERANCE: f64 = 0.10;

/// Errors while preparing prompts.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The tokenizer file could not be loaded.
    #[error(
        "tokenizer `{path}`: {message}; expected a Hugging Face tokenizer.json (the file next to the model's weights)"
    )]
    Tokenizer {
        /// File given.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Encoding failed (should not happen for plain ASCII text).
    #[error("tokenizer `{path}` cannot encode text: {message}")]
    Encode {
        /// File given.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// A Hugging Face tokenizer used to hit token counts exactly.
pub struct PromptTokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for PromptTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptTokenizer")
            .field("path", &self.path)
            .finish()
    }
}

impl PromptTokenizer {
    /// Loads a `tokenizer.json`.
    ///
    /// # Errors
    /// [`PromptError::Tokenizer`] naming the file when it cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<PromptTokenizer, PromptError> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| PromptError::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(PromptTokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// Wraps an in-memory tokenizer (`path` is used in messages only).
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, path: &Path) -> PromptTokenizer {
        PromptTokenizer {
            inner,
            path: path.to_path_buf(),
        }
    }

    fn encode(&self, text: &str) -> Result<tokenizers::Encoding, PromptError> {
        self.inner
            .encode(text, false)
            .map_err(|e| PromptError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// Number of tokens of `text`, without special tokens.
    ///
    /// # Errors
    /// [`PromptError::Encode`] when the tokenizer fails.
    pub fn count(&self, text: &str) -> Result<usize, PromptError> {
        Ok(self.encode(text)?.get_ids().len())
    }
}

/// Appends `n` random words from [`WORDS`], each preceded by a space when `lead_space` or when
/// `out` is non-empty.
fn push_words(out: &mut String, n: usize, rng: &mut SeededRng, lead_space: bool) {
    for _ in 0..n {
        if lead_space || !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
}

/// `n` random words, the first from `first` and the rest from `middle` (both non-empty),
/// separated by single spaces; starting with a space when `lead_space`. With a calibrated
/// vocabulary ([`crate::calibrate`]) every word is one token, so the text is `n` tokens.
pub fn words_text(
    n: usize,
    rng: &mut SeededRng,
    first: &[&str],
    middle: &[&str],
    lead_space: bool,
) -> String {
    let mut out = String::with_capacity(n * 7 + 1);
    for i in 0..n {
        let list = if i == 0 && !lead_space { first } else { middle };
        if lead_space || i > 0 {
            out.push(' ');
        }
        out.push_str(list[rng.random_range(0..list.len())]);
    }
    out
}

/// Synthetic text of `n` tokens: `n` words without a tokenizer (approximate), or exactly `n`
/// tokens (encoded without special tokens) with one. When `lead_space` the text starts with a space
/// and is measured that way, so it keeps its count when appended to other text.
///
/// Returns the text and the number of tokens it is believed to have: `n` without a tokenizer,
/// the tokenizer's count otherwise (equal to `n` except in the rare case where no trim or
/// extension lands exactly, after a bounded number of tries).
///
/// # Errors
/// [`PromptError::Encode`] when the tokenizer fails.
pub fn synth_text(
    n: u32,
    rng: &mut SeededRng,
    tokenizer: Option<&PromptTokenizer>,
    lead_space: bool,
) -> Result<(String, u32), PromptError> {
    let n_us = n as usize;
    let mut text = String::with_capacity(n_us * 7 + 1);
    push_words(&mut text, n_us, rng, lead_space);
    let Some(tok) = tokenizer else {
        return Ok((text, n));
    };
    if n == 0 {
        return Ok((String::new(), 0));
    }
    let mut best = (text.clone(), u32::MAX);
    for _ in 0..24 {
        let enc = tok.encode(&text)?;
        let k = enc.get_ids().len();
        if best.1 == u32::MAX || k.abs_diff(n_us) < (best.1 as usize).abs_diff(n_us) {
            best = (text.clone(), k as u32);
        }
        if k == n_us {
            return Ok((text, n));
        }
        if k < n_us {
            // Words are at least one token each: add at most the missing count.
            push_words(&mut text, (n_us - k).div_ceil(2).max(1), rng, true);
        } else {
            // Cut after token n (byte offsets into the text), then measure again: a cut inside a
            // word may re-encode differently.
            let cut = enc.get_offsets()[n_us - 1].1;
            text.truncate(cut);
        }
    }
    Ok(best)
}

/// The shared prefix of a class: deterministic text of `tokens` tokens (words without a
/// tokenizer) derived from the class name.
///
/// # Errors
/// [`PromptError::Encode`] when the tokenizer fails.
pub fn shared_prefix_text(
    class_name: &str,
    tokens: u32,
    tokenizer: Option<&PromptTokenizer>,
) -> Result<(String, u32), PromptError> {
    synth_text(tokens, &mut prefix_rng(class_name), tokenizer, false)
}

/// The generator of a class's shared prefix: seeded by an FNV-1a hash of the name, so the same
/// class always gets the same prefix.
fn prefix_rng(class_name: &str) -> SeededRng {
    let h = class_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    seeded_rng(splitmix64(h), 0x5052_4546)
}

/// Requested versus realised token counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenDrift {
    /// What the workload asked for.
    pub requested: u64,
    /// What the server reported in `usage`.
    pub realised: u64,
    /// `realised / requested` (1.0 = exact; `inf` when nothing was requested but some realised).
    pub ratio: f64,
    /// True when `|ratio − 1| > tolerance`.
    pub flagged: bool,
}

/// Compares requested and realised totals; flagged beyond `tolerance` (relative, e.g. 0.10).
///
/// Expected drift: without a tokenizer, a real tokenizer yields ≈1–1.5 tokens per word; on the
/// chat endpoint the chat template adds a fixed number of tokens per request; `max_tokens` is a
/// cap, so realised output is below it unless `ignore_eos` is set.
pub fn token_drift(requested: u64, realised: u64, tolerance: f64) -> TokenDrift {
    let ratio = if requested == 0 {
        if realised == 0 { 1.0 } else { f64::INFINITY }
    } else {
        realised as f64 / requested as f64
    };
    TokenDrift {
        requested,
        realised,
        ratio,
        flagged: (ratio - 1.0).abs() > tolerance,
    }
}

/// Where a class's prompts come from.
#[derive(Debug, Clone)]
pub enum PromptSource {
    /// Synthetic text of a drawn length.
    Synthetic(LengthDist),
    /// Entries of a dataset, drawn uniformly at random.
    Dataset(Arc<Dataset>),
}

/// A request class ready to draw requests from.
#[derive(Debug, Clone)]
pub struct ClassPlan {
    /// Class name.
    pub name: String,
    /// Endpoint.
    pub endpoint: Endpoint,
    /// Weight in the mix (> 0).
    pub weight: f64,
    /// Send `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Prompt source.
    pub prompt: PromptSource,
    /// `max_tokens` distribution (`Dataset` uses the entry's output length).
    pub max_tokens: LengthDist,
    /// Shared prefix text (empty when none).
    pub shared_prefix: Arc<str>,
    /// Tokens of the shared prefix (words without a tokenizer).
    pub shared_prefix_tokens: u32,
    tokenizer: Option<Arc<PromptTokenizer>>,
    /// The target's tokenizer as calibration learned it (`None`: uncalibrated).
    calibration: Option<Arc<Calibration>>,
}

/// One drawn request, before it is encoded for the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawnRequest {
    /// Index of the class in the plan list.
    pub class: usize,
    /// Endpoint.
    pub endpoint: Endpoint,
    /// Shared prefix (system message on chat; prepended on completions); may be empty.
    pub prefix: Arc<str>,
    /// The unique part of the prompt.
    pub prompt: String,
    /// Requested prompt tokens: prefix + unique part (the synthesis target, or for a dataset
    /// entry its tokenizer count or word count).
    pub requested_prompt_tokens: u32,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// `ignore_eos`.
    pub ignore_eos: bool,
}

impl ClassPlan {
    /// Builds the plans of every class of `workload`, with an optional tokenizer.
    ///
    /// # Errors
    /// [`PromptError`] when the tokenizer fails on the shared prefix.
    pub fn from_workload(
        workload: &Workload,
        tokenizer: Option<Arc<PromptTokenizer>>,
    ) -> Result<Vec<ClassPlan>, PromptError> {
        workload
            .spec
            .classes
            .iter()
            .zip(&workload.datasets)
            .map(|(c, ds)| {
                let (prefix, prefix_tokens) =
                    shared_prefix_text(&c.name, c.shared_prefix_tokens, tokenizer.as_deref())?;
                let prompt = match (ds, &c.prompt_tokens) {
                    (Some(d), None | Some(LengthDist::Dataset)) => PromptSource::Dataset(d.clone()),
                    (_, Some(dist)) => PromptSource::Synthetic(dist.clone()),
                    // Validation rejects a class with neither; fall back to one word.
                    (None, None) => PromptSource::Synthetic(LengthDist::Fixed(1)),
                };
                Ok(ClassPlan {
                    name: c.name.clone(),
                    endpoint: c.endpoint,
                    weight: c.weight,
                    ignore_eos: c.ignore_eos,
                    prompt,
                    max_tokens: c.max_tokens.clone(),
                    shared_prefix: prefix.into(),
                    shared_prefix_tokens: prefix_tokens,
                    tokenizer: tokenizer.clone(),
                    calibration: None,
                })
            })
            .collect()
    }

    /// The same plans sized by a calibration: prompts drawn from its single-token words (the
    /// shared prefix too, still the same text for every request of a class), the unique part
    /// shortened by the per-request overhead of the class's shape, so that the server's
    /// `usage.prompt_tokens` is the workload's request.
    ///
    /// # Errors
    /// [`PromptError::Encode`] when the tokenizer fails on the shared prefix.
    pub fn calibrated(
        plans: &[ClassPlan],
        cal: Arc<Calibration>,
    ) -> Result<Vec<ClassPlan>, PromptError> {
        plans
            .iter()
            .map(|p| {
                let mut q = p.clone();
                if q.tokenizer.is_none() && cal.vocabulary.is_some() {
                    let mut rng = prefix_rng(&q.name);
                    q.shared_prefix = words_text(
                        q.shared_prefix_tokens as usize,
                        &mut rng,
                        cal.first_words(),
                        cal.middle_words(),
                        false,
                    )
                    .into();
                }
                q.calibration = Some(cal.clone());
                Ok(q)
            })
            .collect()
    }

    /// The calibration these plans were sized by, if any.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_deref()
    }

    /// Draws one request of this class (`class` is its index, carried into the record).
    ///
    /// # Errors
    /// [`PromptError::Encode`] when the tokenizer fails.
    pub fn draw(&self, class: usize, rng: &mut SeededRng) -> Result<DrawnRequest, PromptError> {
        let tok = self.tokenizer.as_deref();
        let cal = self.calibration.as_deref();
        let lead_space = self.endpoint == Endpoint::Completions && !self.shared_prefix.is_empty();
        // Tokens the server adds to every request of this shape (BOS, the chat template).
        let overhead = cal.map_or(0, |c| {
            c.overhead_of(Shape::of(self.endpoint, !self.shared_prefix.is_empty()))
        });
        let (prompt, unique_tokens, entry_out) = match &self.prompt {
            PromptSource::Synthetic(d) => {
                let n = d.sample(rng).unwrap_or(1);
                // The content is what is left of the request after the overhead (at least one
                // token); the request stays `n`, so any gap left shows as drift.
                let content = n.saturating_sub(overhead).max(1);
                let t = match cal {
                    Some(c) if tok.is_none() && c.vocabulary.is_some() => words_text(
                        content as usize,
                        rng,
                        c.first_words(),
                        c.middle_words(),
                        lead_space,
                    ),
                    _ => synth_text(content, rng, tok, lead_space)?.0,
                };
                (t, n, None)
            }
            PromptSource::Dataset(ds) => {
                let e = &ds.entries[rng.random_range(0..ds.entries.len())];
                let mut t = String::with_capacity(e.prompt.len() + 1);
                if lead_space {
                    t.push(' ');
                }
                t.push_str(&e.prompt);
                let words = t.split_whitespace().count() as u32;
                let k = match (tok, cal.and_then(|c| c.tokens_per_word)) {
                    (Some(tk), _) => tk.count(&t)? as u32 + overhead,
                    (None, Some(tpw)) => (f64::from(words) * tpw).round() as u32 + overhead,
                    (None, None) => words,
                };
                (t, k, e.output_tokens)
            }
        };
        let max_tokens = self
            .max_tokens
            .sample(rng)
            .or(entry_out)
            .unwrap_or(1)
            .max(1);
        Ok(DrawnRequest {
            class,
            endpoint: self.endpoint,
            prefix: self.shared_prefix.clone(),
            prompt,
            requested_prompt_tokens: self.shared_prefix_tokens + unique_tokens,
            max_tokens,
            ignore_eos: self.ignore_eos,
        })
    }
}

/// The request mix of a level: picks a class by weight, then draws from it. Deterministic for a
/// seed.
pub struct RequestMix<'a> {
    plans: &'a [ClassPlan],
    cumulative: Vec<f64>,
    rng: SeededRng,
}

impl<'a> RequestMix<'a> {
    /// A mix over `plans` (at least one) seeded by `seed`.
    pub fn new(plans: &'a [ClassPlan], seed: u64) -> RequestMix<'a> {
        let mut acc = 0.0;
        let cumulative = plans
            .iter()
            .map(|p| {
                acc += p.weight.max(0.0);
                acc
            })
            .collect();
        RequestMix {
            plans,
            cumulative,
            rng: seeded_rng(seed, 2),
        }
    }

    /// Picks a class index by weight.
    pub fn pick(&mut self) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        if self.plans.len() <= 1 || total <= 0.0 {
            return 0;
        }
        let x = self.rng.random_range(0.0..total);
        self.cumulative
            .iter()
            .position(|c| x < *c)
            .unwrap_or(self.plans.len() - 1)
    }

    /// Draws the next request.
    ///
    /// # Errors
    /// [`PromptError::Encode`] when the tokenizer fails.
    pub fn next_request(&mut self) -> Result<DrawnRequest, PromptError> {
        let i = self.pick();
        self.plans[i].draw(i, &mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::AddedToken;
    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;

    /// A small byte-level BPE trained here on English-like text: common words become one token,
    /// rarer strings split into several, as with a real LLM tokenizer.
    fn trained_tokenizer() -> PromptTokenizer {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus.txt");
        let mut rng = seeded_rng(1, 1);
        let mut text = String::new();
        // Only half the word list is frequent, so the other half splits into sub-word tokens.
        for _ in 0..20_000 {
            text.push(' ');
            text.push_str(WORDS[rng.random_range(0..WORDS.len() / 2)]);
        }
        std::fs::write(&corpus, text).unwrap();
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(400)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(vec![AddedToken::from("<s>", true)])
            .build()
            .into();
        let mut tk = tokenizers::Tokenizer::new(BPE::default());
        tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tk.with_decoder(Some(ByteLevel::default()));
        tk.train_from_files(&mut trainer, vec![corpus.to_string_lossy().into_owned()])
            .unwrap();
        PromptTokenizer::from_tokenizer(tk, Path::new("trained.json"))
    }

    #[test]
    fn words_without_tokenizer() {
        let mut rng = seeded_rng(3, 0);
        for n in [0u32, 1, 7, 50, 2000] {
            let (t, k) = synth_text(n, &mut rng, None, false).unwrap();
            assert_eq!(k, n);
            assert_eq!(t.split_whitespace().count(), n as usize);
            assert!(!t.starts_with(' '));
            let (t, _) = synth_text(n, &mut rng, None, true).unwrap();
            assert_eq!(t.split_whitespace().count(), n as usize);
            assert!(n == 0 || t.starts_with(' '));
        }
        assert!(
            WORDS
                .iter()
                .all(|w| !w.is_empty() && w.is_ascii() && !w.contains(' '))
        );
    }

    #[test]
    fn exact_counts_with_a_tokenizer() {
        let tk = trained_tokenizer();
        // the rare half of the word list splits: a word is not a token here
        let rare = WORDS[WORDS.len() - 1];
        assert!(tk.count(&format!(" {rare}")).unwrap() > 1, "{rare}");
        let mut rng = seeded_rng(9, 0);
        let mut exact = 0;
        let cases = [1u32, 2, 3, 10, 49, 50, 51, 200, 777];
        for n in cases {
            for lead in [false, true] {
                let (t, k) = synth_text(n, &mut rng, Some(&tk), lead).unwrap();
                // measured independently by the tokenizer
                let counted = tk.count(&t).unwrap() as u32;
                assert_eq!(counted, k, "reported count must be the true count");
                if counted == n {
                    exact += 1;
                }
            }
        }
        assert_eq!(exact, cases.len() * 2, "every target hit exactly");
        // the prefix is the same for a class and differs between classes
        let (a1, ka) = shared_prefix_text("claims", 200, Some(&tk)).unwrap();
        let (a2, _) = shared_prefix_text("claims", 200, Some(&tk)).unwrap();
        let (b, _) = shared_prefix_text("long", 200, Some(&tk)).unwrap();
        assert_eq!(a1, a2);
        assert_ne!(a1, b);
        assert_eq!(ka, 200);
        assert_eq!(tk.count(&a1).unwrap(), 200);
        // appended with its leading space, a continuation keeps its count
        let (c, kc) = synth_text(60, &mut rng, Some(&tk), true).unwrap();
        assert_eq!(tk.count(&format!("{a1}{c}")).unwrap(), 200 + kc as usize);
    }

    #[test]
    fn missing_tokenizer_file_is_a_clear_error() {
        let e = PromptTokenizer::from_file(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("/nonexistent/tokenizer.json") && m.contains("expected"),
            "{m}"
        );
    }

    #[test]
    fn drift_flags_beyond_tolerance() {
        let d = token_drift(1000, 1050, DEFAULT_DRIFT_TOLERANCE);
        assert_eq!(d.ratio, 1.05);
        assert!(!d.flagged);
        let d = token_drift(1000, 1300, DEFAULT_DRIFT_TOLERANCE);
        assert!(d.flagged && (d.ratio - 1.3).abs() < 1e-12);
        assert!(token_drift(1000, 850, 0.10).flagged);
        assert!(!token_drift(0, 0, 0.10).flagged);
        assert!(token_drift(0, 5, 0.10).flagged);
    }

    #[test]
    fn mixed_workload_draws_by_weight_with_prefix() {
        let mixed = "load: {mode: concurrency}\nclasses:\n  - {name: claims_assistant, weight: 9, endpoint: chat, shared_prefix_tokens: 200, prompt_tokens: {uniform: {min: 40, max: 60}}, max_tokens: {uniform: {min: 500, max: 1000}}, ignore_eos: true}\n  - {name: long_context, weight: 1, endpoint: chat, prompt_tokens: {normal: {mean: 2000, stddev: 200, min: 1500, max: 2500}}, max_tokens: {uniform: {min: 100, max: 300}}, ignore_eos: true}\n";
        let w = Workload::parse(mixed, Path::new("mixed.yaml"), Path::new(".")).unwrap();
        let plans = ClassPlan::from_workload(&w, None).unwrap();
        assert_eq!(plans[0].shared_prefix_tokens, 200);
        assert_eq!(plans[0].shared_prefix.split_whitespace().count(), 200);
        assert_eq!(plans[1].shared_prefix.as_ref(), "");
        let mut mix = RequestMix::new(&plans, 11);
        let n = 20_000;
        let mut first = 0;
        for _ in 0..n {
            let r = mix.next_request().unwrap();
            if r.class == 0 {
                first += 1;
                let unique = r.prompt.split_whitespace().count() as u32;
                assert!((40..=60).contains(&unique));
                assert_eq!(r.requested_prompt_tokens, 200 + unique);
                assert!((500..=1000).contains(&r.max_tokens));
                assert!(r.ignore_eos);
                assert_eq!(r.endpoint, Endpoint::Chat);
            } else {
                assert!((1500..=2500).contains(&r.requested_prompt_tokens));
                assert!((100..=300).contains(&r.max_tokens));
            }
        }
        // weights 9:1 → share 0.9; binomial sd = sqrt(0.09/20000) = 0.0021
        let share = f64::from(first) / f64::from(n);
        assert!((share - 0.9).abs() < 0.01, "{share}");
        // deterministic for a seed
        let a: Vec<_> = {
            let mut m = RequestMix::new(&plans, 5);
            (0..20).map(|_| m.next_request().unwrap()).collect()
        };
        let b: Vec<_> = {
            let mut m = RequestMix::new(&plans, 5);
            (0..20).map(|_| m.next_request().unwrap()).collect()
        };
        assert_eq!(a, b);
        // no two prompts identical (prefix caching sees only the shared prefix)
        assert!(a.windows(2).all(|w| w[0].prompt != w[1].prompt));
    }

    #[test]
    fn dataset_prompts_and_lengths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("p.jsonl"),
            "{\"prompt\": \"alpha beta gamma\", \"max_tokens\": 12}\n",
        )
        .unwrap();
        let w = Workload::parse(
            "load: {mode: rate}\nclasses:\n  - {name: d, endpoint: completions, dataset: {path: p.jsonl, format: jsonl}, max_tokens: dataset}\n",
            Path::new("w.yaml"),
            dir.path(),
        )
        .unwrap();
        let plans = ClassPlan::from_workload(&w, None).unwrap();
        let r = plans[0].draw(0, &mut seeded_rng(1, 1)).unwrap();
        assert_eq!(r.prompt, "alpha beta gamma");
        assert_eq!(r.requested_prompt_tokens, 3);
        assert_eq!(r.max_tokens, 12);
    }
}
