//! OpenAI request parsing and vLLM validation, as a pure function of the request bytes.
//!
//! [`parse_and_validate`] turns the body of a `/v1/completions` or `/v1/chat/completions` POST
//! into a [`ParsedRequest`] or the exact [`ApiError`] vLLM 0.32 would answer. It does no I/O,
//! never panics on any input (it is the fuzz target of `crates/sim/fuzz`), and is the single
//! place where request fields are read.
//!
//! Accepted fields (others are ignored, as vLLM ignores unknown fields):
//! * `model` (string, optional: the first served name is used when absent or null);
//! * completions: `prompt` = a string, a list with one string, a list of token ids, or a list
//!   with one list of token ids (batched prompts are rejected: one choice per request);
//! * chat: `messages` = a list of `{role, content}` with `content` a string, null, or a list of
//!   `{"type": "text", "text": …}` parts;
//! * `max_tokens`, chat's `max_completion_tokens` (which wins, as in vLLM), `min_tokens`,
//!   `ignore_eos`, `stream`, `stream_options.{include_usage, continuous_usage_stats}`, `n`
//!   (only 1), `seed`; sampling knobs (`temperature`, `top_p`, `top_k`, penalties, `stop`, …)
//!   are type-checked and otherwise ignored.
//!
//! Checks, in vLLM's order: body is a JSON object with the right field types (400
//! `"Bad Request"`); `stream_options` only with `stream=true`; `n == 1`; `model` is served (404);
//! `max_tokens ≤ max_model_len`; the prompt is not empty; `prompt_len ≤ max_model_len`;
//! `prompt_len + max_tokens ≤ max_model_len`; `min_tokens ≤ max_tokens`; prompt token ids below
//! the model's `vocab_size` (400 `"Token id N is out of vocabulary"`, N the largest). Without `max_tokens`
//! vLLM uses `max_model_len − prompt_len`. `logprobs` / `top_logprobs` / `prompt_logprobs` get
//! vLLM's before-validators (type, sign, `logprobs` required, none when streaming) and its
//! `--max-logprobs` 20 ([`MAX_LOGPROBS`]); `best_of` is no field of vLLM 0.32's models and is
//! ignored. Numbers in messages are echoed as sent, beyond i64 too (a Python int has no limit).
//!
//! Prompt tokens come from [`crate::tokenize`] (one token per whitespace-separated word). Chat
//! messages are first rendered with the ChatML template of the Qwen2.5 presets
//! (`<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`), so a
//! chat prompt counts its template words too, as a real chat template does.

use serde_json::{Map, Value};

use super::error::{ApiError, ValidationIssue};

/// Which OpenAI endpoint a request was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    ChatCompletions,
}

/// What validation needs to know about the served model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationContext {
    /// Names the model is served under (`--served-model-name`); the first is the default.
    pub served_model_names: Vec<String>,
    /// Context window in tokens (`--max-model-len`).
    pub max_model_len: u32,
    /// The model's vocabulary size (`vocab_size` of its `config.json`): prompt token ids must be
    /// below it.
    pub vocab_size: u32,
}

/// A request that passed validation: everything the HTTP layer and the engine need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    /// The endpoint it came in on.
    pub endpoint: Endpoint,
    /// Model name echoed in the response (`model` as sent, or the default served name).
    pub model: String,
    /// Prompt token ids (chat: after the template).
    pub prompt_tokens: Vec<u32>,
    /// Output budget in tokens: `max_tokens` as sent, or `max_model_len − prompt_len`.
    pub max_tokens: u32,
    /// True when the client sent `max_tokens` (or `max_completion_tokens`).
    pub max_tokens_given: bool,
    /// `min_tokens`: the output is never shorter (vLLM suppresses EOS until then).
    pub min_tokens: u32,
    /// `ignore_eos`: generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// `stream`: answer with server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage` (vLLM's default is true once `stream_options` is given).
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`, effective only with `include_usage`.
    pub continuous_usage: bool,
    /// `seed`, when given (makes the natural stop length a function of the request content).
    pub seed: Option<i64>,
}

/// Parses and validates one request body (see the module doc for the rules).
///
/// # Errors
/// The vLLM-shaped [`ApiError`] the real server would answer: 400 `"Bad Request"` for
/// malformed JSON and wrong types, 400 `BadRequestError` for semantic checks, 404
/// `NotFoundError` for an unknown model.
pub fn parse_and_validate(
    endpoint: Endpoint,
    body: &[u8],
    ctx: &ValidationContext,
) -> Result<ParsedRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let pos = if e.line() <= 1 {
            e.column().saturating_sub(1)
        } else {
            e.column()
        };
        ApiError::validation(&[ValidationIssue {
            kind: "json_invalid",
            loc: vec![pos.to_string()],
            msg: "JSON decode error".into(),
            input: format!("{{}}, 'ctx': {{'error': '{}'}}", py_escape(&e.to_string())),
        }])
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::validation(&[ValidationIssue {
            kind: "model_attributes_type",
            loc: vec![],
            msg: "Input should be a valid dictionary or object to extract fields from".into(),
            input: render_input(&value),
        }]));
    };
    check_logprobs_before(endpoint, &obj)?;
    let mut issues = Vec::new();
    let mut f = Fields {
        obj: &obj,
        issues: &mut issues,
        ids_given: false,
    };

    let model = f.opt_string("model");
    let max_tokens = f.opt_int("max_tokens");
    let max_completion_tokens = match endpoint {
        Endpoint::ChatCompletions => f.opt_int("max_completion_tokens"),
        Endpoint::Completions => None,
    };
    let min_tokens = f.opt_int("min_tokens");
    let ignore_eos = f.opt_bool("ignore_eos");
    let stream = f.opt_bool("stream");
    let n = f.opt_int("n");
    let seed = f.opt_int("seed");
    let temperature = f.opt_number("temperature");
    let top_p = f.opt_number("top_p");
    for key in [
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "length_penalty",
    ] {
        f.opt_number(key);
    }
    f.opt_int("top_k");
    let logprobs = match endpoint {
        Endpoint::Completions => f.opt_int("logprobs"),
        // Chat's sampling logprobs are `top_logprobs` once `logprobs` is true.
        Endpoint::ChatCompletions => {
            let on = f.opt_bool("logprobs").unwrap_or(false);
            f.opt_int("top_logprobs").filter(|_| on)
        }
    };
    let prompt_logprobs = f.opt_int("prompt_logprobs");
    let (include_usage, continuous_usage, has_stream_options) = f.stream_options();
    let prompt = match endpoint {
        Endpoint::Completions => f.prompt(),
        Endpoint::ChatCompletions => f.messages(),
    };
    let ids_given = f.ids_given;
    if !issues.is_empty() {
        return Err(ApiError::validation(&issues));
    }
    if has_stream_options && stream != Some(true) {
        return Err(ApiError::validation(&[ValidationIssue {
            kind: "value_error",
            loc: vec![],
            msg: "Value error, Stream options can only be defined when `stream=True`.".into(),
            input: "{...}".into(),
        }]));
    }
    let prompt = prompt.ok_or_else(|| ApiError::bad_request("The prompt cannot be empty."))?;

    // A number in a message as the client sent it (see [`int_text`]).
    let shown = |key: &str, v: i64| obj.get(key).and_then(int_text).unwrap_or(v.to_string());
    if let Some(n) = n {
        let text = shown("n", n);
        if n < 1 {
            return Err(ApiError::bad_request_param(
                format!("n must be at least 1, got {text}."),
                "n",
                text,
            ));
        }
        if n > 1 {
            return Err(ApiError::bad_request_param(
                format!(
                    "n={text} is not supported by the engine twin, which returns one choice per request; send n=1 or several requests."
                ),
                "n",
                text,
            ));
        }
    }
    if let Some(t) = temperature
        && t < 0.0
    {
        return Err(ApiError::bad_request_param(
            format!("temperature must be non-negative, got {t}."),
            "temperature",
            t,
        ));
    }
    if let Some(p) = top_p
        && !(p > 0.0 && p <= 1.0)
    {
        return Err(ApiError::bad_request_param(
            format!("top_p must be in (0, 1], got {p}."),
            "top_p",
            p,
        ));
    }

    let model = match model {
        None => ctx.served_model_names.first().cloned().unwrap_or_default(),
        Some(m) if ctx.served_model_names.contains(&m) => m,
        Some(m) => return Err(ApiError::unknown_model(&m, &ctx.served_model_names)),
    };

    let len = u64::from(ctx.max_model_len);
    // vLLM's TokenizeParams name the field the limit came from (chat:
    // `max_completion_tokens` when given) and echo the number as sent, beyond i64 too.
    let (requested, out_param) = match max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (max_tokens, "max_tokens"),
    };
    if let Some(m) = requested {
        if m < 1 {
            let m = shown(out_param, m);
            return Err(ApiError::bad_request_param(
                format!("max_tokens must be at least 1, got {m}."),
                "max_tokens",
                m,
            ));
        }
        if m as u64 > len {
            let m = shown(out_param, m);
            return Err(ApiError::bad_request_param(
                format!(
                    "{out_param}={m} cannot be greater than max_model_len={len}. Please request fewer output tokens."
                ),
                out_param,
                m,
            ));
        }
    }
    let prompt_tokens = prompt;
    if prompt_tokens.is_empty() {
        return Err(ApiError::bad_request("The prompt cannot be empty."));
    }
    let p = prompt_tokens.len() as u64;
    // Without max_tokens there is no room for output once the prompt fills the window.
    if p > len || (requested.is_none() && p >= len) {
        return Err(ApiError::bad_request_param(
            format!(
                "This model's maximum context length is {len} tokens. However, your prompt contains {p} input tokens, \
                 which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
            ),
            "input_tokens",
            p,
        ));
    }
    let max_tokens = match requested {
        Some(m) => {
            let m = m as u64; // 1 ..= len, checked above
            if p + m > len {
                return Err(ApiError::bad_request_param(
                    format!(
                        "'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's maximum context length \
                         is {len} tokens and your request has {p} input tokens ({m} > {len} - {p})."
                    ),
                    "max_tokens",
                    m,
                ));
            }
            m as u32
        }
        None => (len - p) as u32,
    };
    let min_tokens = match min_tokens {
        None => 0,
        Some(v) if v < 0 => {
            let v = shown("min_tokens", v);
            return Err(ApiError::bad_request_param(
                format!("min_tokens must be greater than or equal to 0, got {v}."),
                "min_tokens",
                v,
            ));
        }
        Some(v) if v as u64 > u64::from(max_tokens) => {
            let v = shown("min_tokens", v);
            return Err(ApiError::bad_request_param(
                format!(
                    "min_tokens must be less than or equal to max_tokens={max_tokens}, got {v}."
                ),
                "min_tokens",
                v,
            ));
        }
        Some(v) => v as u32,
    };
    // `SamplingParams._validate_logprobs`: a count above `--max-logprobs` (-1: the vocabulary).
    let sample_key = match endpoint {
        Endpoint::Completions => "logprobs",
        Endpoint::ChatCompletions => "top_logprobs",
    };
    for (v, what, param, key) in [
        (logprobs, "sample", "logprobs", sample_key),
        (
            prompt_logprobs,
            "prompt",
            "prompt_logprobs",
            "prompt_logprobs",
        ),
    ] {
        let n = match v {
            Some(-1) => i64::from(ctx.vocab_size),
            Some(n) => n,
            None => 0,
        };
        if n > MAX_LOGPROBS {
            let n = if v == Some(-1) {
                n.to_string()
            } else {
                shown(key, n)
            };
            return Err(ApiError::bad_request_param(
                format!(
                    "Requested {what} logprobs of {n}, which is greater than max allowed: {MAX_LOGPROBS}"
                ),
                param,
                n,
            ));
        }
    }
    // vLLM `InputProcessor._validate_model_input`, after the serving layer's checks: the largest
    // prompt id must be below the vocabulary. Text is tokenised in-vocabulary by construction.
    if ids_given
        && let Some(&max_id) = prompt_tokens.iter().max()
        && max_id >= ctx.vocab_size
    {
        return Err(ApiError::bad_request(format!(
            "Token id {max_id} is out of vocabulary"
        )));
    }
    let stream = stream.unwrap_or(false);
    Ok(ParsedRequest {
        endpoint,
        model,
        prompt_tokens,
        max_tokens,
        max_tokens_given: requested.is_some(),
        min_tokens,
        ignore_eos: ignore_eos.unwrap_or(false),
        stream,
        include_usage: stream && include_usage,
        continuous_usage: stream && include_usage && continuous_usage,
        seed,
    })
}

/// vLLM's default `--max-logprobs` (`ModelConfig.max_logprobs`); the twin has no such flag.
pub const MAX_LOGPROBS: i64 = 20;

/// Python's truthiness of a raw JSON value, as vLLM's `mode="before"` validators test
/// `data.get(...)`.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// vLLM's `check_logprobs` model validators (`mode="before"`: they see the raw JSON, run
/// before field validation, and their error is the only one reported, with `param` set).
fn check_logprobs_before(endpoint: Endpoint, obj: &Map<String, Value>) -> Result<(), ApiError> {
    let fail = |msg: &str, param: &str| {
        let mut e = ApiError::validation(&[ValidationIssue {
            kind: "value_error",
            loc: vec![],
            msg: format!("Value error, {msg}"),
            input: "{...}".into(),
        }]);
        e.param = Some(param.to_string());
        Err(e)
    };
    let count = match endpoint {
        Endpoint::Completions => "logprobs",
        Endpoint::ChatCompletions => "top_logprobs",
    };
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    for key in ["prompt_logprobs", count] {
        // `isinstance(v, (int, float))`: a bool is an int in Python.
        if get(key).is_some_and(|v| !v.is_number() && !v.is_boolean()) {
            return fail(&format!("`{key}` must be an integer."), key);
        }
    }
    let num = |k: &str| {
        get(k).and_then(|v| match v {
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            v => v.as_f64(),
        })
    };
    if let Some(p) = num("prompt_logprobs") {
        if truthy(obj.get("stream")) && (p > 0.0 || p == -1.0) {
            return fail(
                "`prompt_logprobs` are not available when `stream=True`.",
                "prompt_logprobs",
            );
        }
        if p < 0.0 && p != -1.0 {
            return fail(
                "`prompt_logprobs` must be a positive value or -1.",
                "prompt_logprobs",
            );
        }
    }
    if let Some(t) = num(count) {
        if t < 0.0 && t != -1.0 {
            return fail(&format!("`{count}` must be a positive value or -1."), count);
        }
        if endpoint == Endpoint::ChatCompletions
            && (t == -1.0 || t > 0.0)
            && !truthy(obj.get("logprobs"))
        {
            return fail(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                "top_logprobs",
            );
        }
    }
    Ok(())
}

/// Field readers that record pydantic-style issues instead of failing on the first one.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    issues: &'a mut Vec<ValidationIssue>,
    /// The prompt came as token ids (checked against the vocabulary), not text.
    ids_given: bool,
}

impl Fields<'_> {
    fn issue(&mut self, kind: &'static str, loc: &[&str], msg: &str, v: &Value) {
        self.issues.push(ValidationIssue {
            kind,
            loc: loc.iter().map(|s| s.to_string()).collect(),
            msg: msg.to_string(),
            input: render_input(v),
        });
    }

    fn present(&self, key: &str) -> Option<&Value> {
        match self.obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    fn opt_string(&mut self, key: &str) -> Option<String> {
        let v = self.present(key)?.clone();
        match v {
            Value::String(s) => Some(s),
            other => {
                self.issue(
                    "string_type",
                    &[key],
                    "Input should be a valid string",
                    &other,
                );
                None
            }
        }
    }

    fn opt_bool(&mut self, key: &str) -> Option<bool> {
        let v = self.present(key)?.clone();
        match as_bool(&v) {
            Ok(b) => Some(b),
            Err((kind, msg)) => {
                self.issue(kind, &[key], msg, &v);
                None
            }
        }
    }

    fn opt_number(&mut self, key: &str) -> Option<f64> {
        let v = self.present(key)?.clone();
        match as_float(&v) {
            Ok(x) => Some(x),
            Err((kind, msg)) => {
                self.issue(kind, &[key], msg, &v);
                None
            }
        }
    }

    fn opt_int(&mut self, key: &str) -> Option<i64> {
        let v = self.present(key)?.clone();
        match as_int(&v) {
            Ok(i) => Some(i),
            Err((kind, msg)) => {
                self.issue(kind, &[key], msg, &v);
                None
            }
        }
    }

    /// `(include_usage, continuous_usage_stats, stream_options present)`.
    fn stream_options(&mut self) -> (bool, bool, bool) {
        let Some(v) = self.present("stream_options").cloned() else {
            return (false, false, false);
        };
        let Value::Object(o) = v else {
            self.issue(
                "model_type",
                &["stream_options"],
                "Input should be a valid dictionary or instance of StreamOptions",
                &v,
            );
            return (false, false, true);
        };
        let mut flag = |key: &str, default: bool| match o.get(key) {
            None | Some(Value::Null) => default,
            Some(other) => match as_bool(other) {
                Ok(b) => b,
                Err((kind, msg)) => {
                    self.issue(kind, &["stream_options", key], msg, other);
                    default
                }
            },
        };
        // vLLM's StreamOptions: include_usage defaults to True, continuous_usage_stats to False.
        let include = flag("include_usage", true);
        let continuous = flag("continuous_usage_stats", false);
        (include, continuous, true)
    }

    /// The completions `prompt`; `None` after recording an issue.
    fn prompt(&mut self) -> Option<Vec<u32>> {
        let Some(v) = self.obj.get("prompt").cloned() else {
            self.issue(
                "missing",
                &["prompt"],
                "Field required",
                &Value::Object(self.obj.clone()),
            );
            return None;
        };
        match v {
            Value::String(s) => Some(crate::tokenize(&s)),
            Value::Array(items) => {
                if items.is_empty() {
                    return Some(Vec::new());
                }
                if items.len() > 1 && !items.iter().all(|x| x.is_number()) {
                    if items.iter().all(|x| x.is_string() || x.is_array()) {
                        // Valid for vLLM, but a batch answers with several choices.
                        self.issue(
                            "value_error",
                            &["prompt"],
                            "Value error, batched prompts are not supported by the engine twin; send one prompt per request",
                            &Value::Array(items),
                        );
                    } else {
                        self.issue(
                            "list_type",
                            &["prompt"],
                            "Input should be a valid string or list of token ids",
                            &Value::Array(items),
                        );
                    }
                    return None;
                }
                match &items[0] {
                    Value::String(s) if items.len() == 1 => Some(crate::tokenize(s)),
                    Value::Array(ids) => self.token_ids(ids, &["prompt", "0"]),
                    Value::Number(_) => self.token_ids(&items, &["prompt"]),
                    other => {
                        let other = other.clone();
                        self.issue(
                            "string_type",
                            &["prompt", "0"],
                            "Input should be a valid string",
                            &other,
                        );
                        None
                    }
                }
            }
            other => {
                self.issue(
                    "string_type",
                    &["prompt"],
                    "Input should be a valid string",
                    &other,
                );
                None
            }
        }
    }

    fn token_ids(&mut self, ids: &[Value], loc: &[&str]) -> Option<Vec<u32>> {
        self.ids_given = true;
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            match id.as_u64().and_then(|x| u32::try_from(x).ok()) {
                Some(x) => out.push(x),
                None => {
                    let idx = i.to_string();
                    let mut l: Vec<&str> = loc.to_vec();
                    l.push(&idx);
                    self.issue(
                        "int_type",
                        &l,
                        "Input should be a valid token id (an integer in [0, 4294967295])",
                        id,
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    /// The chat `messages`, rendered with the ChatML template and tokenised.
    fn messages(&mut self) -> Option<Vec<u32>> {
        let Some(v) = self.obj.get("messages").cloned() else {
            self.issue(
                "missing",
                &["messages"],
                "Field required",
                &Value::Object(self.obj.clone()),
            );
            return None;
        };
        let Value::Array(msgs) = v else {
            self.issue(
                "list_type",
                &["messages"],
                "Input should be a valid list",
                &v,
            );
            return None;
        };
        let mut text = String::new();
        let mut ok = true;
        for (i, m) in msgs.iter().enumerate() {
            let idx = i.to_string();
            let Value::Object(m) = m else {
                self.issue(
                    "model_type",
                    &["messages", &idx],
                    "Input should be a valid dictionary",
                    m,
                );
                ok = false;
                continue;
            };
            let role = match m.get("role") {
                Some(Value::String(r)) => r.as_str(),
                Some(other) => {
                    self.issue(
                        "string_type",
                        &["messages", &idx, "role"],
                        "Input should be a valid string",
                        other,
                    );
                    ok = false;
                    continue;
                }
                None => {
                    self.issue(
                        "missing",
                        &["messages", &idx, "role"],
                        "Field required",
                        &Value::Object(m.clone()),
                    );
                    ok = false;
                    continue;
                }
            };
            text.push_str("<|im_start|>");
            text.push_str(role);
            text.push('\n');
            match m.get("content") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => text.push_str(s),
                Some(Value::Array(parts)) => {
                    // vLLM joins the text parts of one message with "\n".
                    for (j, part) in parts.iter().enumerate() {
                        let jdx = j.to_string();
                        match part.get("type").and_then(Value::as_str) {
                            Some("text") => match part.get("text") {
                                Some(Value::String(t)) => {
                                    if j > 0 {
                                        text.push('\n');
                                    }
                                    text.push_str(t);
                                }
                                other => {
                                    let other = other.cloned().unwrap_or(Value::Null);
                                    self.issue(
                                        "string_type",
                                        &["messages", &idx, "content", &jdx, "text"],
                                        "Input should be a valid string",
                                        &other,
                                    );
                                    ok = false;
                                }
                            },
                            _ => {
                                self.issue(
                                    "value_error",
                                    &["messages", &idx, "content", &jdx],
                                    "Value error, only text content parts are supported by the engine twin",
                                    part,
                                );
                                ok = false;
                            }
                        }
                    }
                }
                Some(other) => {
                    self.issue(
                        "string_type",
                        &["messages", &idx, "content"],
                        "Input should be a valid string",
                        other,
                    );
                    ok = false;
                }
            }
            text.push_str("<|im_end|>\n");
        }
        if !ok {
            return None;
        }
        text.push_str("<|im_start|>assistant\n");
        Some(crate::tokenize(&text))
    }
}

/// pydantic v2's lax integer, as FastAPI validates vLLM's request models (python mode, on the
/// objects `json.loads` made), after pydantic-core `validate_int` / `float_as_int` /
/// `str_as_int`:
/// * an integer; a bool (`true` → 1); a float with no fractional part inside the i64 range;
/// * a string holding an integer, after trimming whitespace, one leading `+`, leading zeros, a
///   `.0…0` tail and single underscores between digits (`" 5"`, `"+5"`, `"005"`, `"5.00"`,
///   `"1_000"`); not `"5.5"`, `"5."`, `"1e3"`, `"--5"`.
///
/// Errors are pydantic's `(type, msg)`: `int_from_float`, `int_parsing_size` (a float beyond
/// i64 or a string of more than 4300 digits), `int_parsing`, `int_type`. Integers beyond i64 (a
/// Python int has no limit) saturate; vLLM then refuses them by value anyway. A JSON integer
/// literal beyond u64 reaches the twin as a float (serde_json), so it gets `int_parsing_size`
/// where vLLM would take it as a (too large) integer.
fn as_int(v: &Value) -> Result<i64, (&'static str, &'static str)> {
    const INT_PARSING: (&str, &str) = (
        "int_parsing",
        "Input should be a valid integer, unable to parse string as an integer",
    );
    const INT_SIZE: (&str, &str) = (
        "int_parsing_size",
        "Unable to parse input string as an integer, exceeded maximum size",
    );
    match v {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i)
            } else if n.as_u64().is_some() {
                Ok(i64::MAX)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if !f.is_finite() {
                    Err(("finite_number", "Input should be a finite number"))
                } else if f % 1.0 != 0.0 {
                    Err((
                        "int_from_float",
                        "Input should be a valid integer, got a number with a fractional part",
                    ))
                } else if (i64::MIN as f64) < f && f < (i64::MAX as f64) {
                    Ok(f as i64)
                } else {
                    Err(INT_SIZE)
                }
            }
        }
        Value::String(s) => {
            let (negative, digits) = clean_int_str(s).ok_or(INT_PARSING)?;
            if digits.len() > 4300 {
                return Err(INT_SIZE);
            }
            let magnitude: i128 = if digits.len() > 30 {
                i128::MAX
            } else {
                digits.parse().map_err(|_| INT_PARSING)?
            };
            let v = if negative { -magnitude } else { magnitude };
            Ok(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
        }
        _ => Err(("int_type", "Input should be a valid integer")),
    }
}

/// The exact decimal of an integer field as Python holds it (a Python int has no limit), for
/// messages: [`as_int`] saturates at the i64 range, vLLM echoes the number as sent
/// (`max_tokens=18446744073709551615 cannot be greater than …`). `None` when `v` is not an int.
fn int_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| n.as_u64().map(|u| u.to_string()))
            .or_else(|| n.as_f64().map(|f| format!("{f:.0}"))),
        Value::Bool(b) => Some(u8::from(*b).to_string()),
        Value::String(s) => {
            let (negative, digits) = clean_int_str(s)?;
            let digits = digits.split('.').next().unwrap_or("0").replace('_', "");
            let digits = digits.trim_start_matches('0');
            let digits = if digits.is_empty() { "0" } else { digits };
            Some(format!(
                "{}{digits}",
                if negative && digits != "0" { "-" } else { "" }
            ))
        }
        _ => None,
    }
}

/// pydantic-core `clean_int_str`: `(negative, ASCII digits)` of a string an int validator accepts.
fn clean_int_str(s: &str) -> Option<(bool, String)> {
    let mut s = s.trim();
    if let Some(rest) = s.strip_prefix('+') {
        if rest.starts_with('-') {
            return None;
        }
        s = rest;
    }
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        if rest.starts_with(['-', '+']) {
            return None;
        }
        negative = true;
        s = rest;
    }
    // Leading zeros (and underscores among them) go, keeping one zero before a point or alone.
    let bytes = s.as_bytes();
    match bytes.first() {
        Some(b'0') => {
            let mut cut = bytes.len() - 1;
            for (i, &c) in bytes.iter().enumerate().skip(1) {
                match c {
                    b'0' | b'_' => {}
                    b'1'..=b'9' => {
                        cut = i;
                        break;
                    }
                    b'.' => {
                        cut = i - 1;
                        break;
                    }
                    _ => return None,
                }
            }
            s = &s[cut..];
        }
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    if let Some(i) = s.find('.') {
        let frac = &s[i + 1..];
        if !frac.is_empty() && frac.bytes().all(|c| c == b'0') {
            s = &s[..i];
        }
    }
    let digits = if s.contains('_') {
        if s.starts_with('_') || s.ends_with('_') || s.contains("__") {
            return None;
        }
        s.replace('_', "")
    } else {
        s.to_string()
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((negative, digits))
}

/// pydantic v2's lax float (python mode): a number, a bool, or a string that parses as a float
/// after trimming whitespace (`" 0.5"`, `"1e-3"`, `"inf"`, `"1_000.5"`).
fn as_float(v: &Value) -> Result<f64, (&'static str, &'static str)> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or(("float_type", "Input should be a valid number")),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .or_else(|| {
                let t = s.trim();
                if t.starts_with('_') || t.ends_with('_') || t.contains("__") || !t.contains('_') {
                    None
                } else {
                    t.replace('_', "").parse().ok()
                }
            })
            .ok_or((
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            )),
        _ => Err(("float_type", "Input should be a valid number")),
    }
}

/// pydantic v2's lax bool (python mode): a bool, the integers 0 and 1, or one of the strings
/// `0 off f false n no` / `1 on t true y yes` (case-insensitive).
fn as_bool(v: &Value) -> Result<bool, (&'static str, &'static str)> {
    const PARSING: (&str, &str) = (
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    );
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Number(n) => match n.as_i64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(_) => Err(PARSING),
            None => Err(("bool_type", "Input should be a valid boolean")),
        },
        Value::String(s) => {
            let t = s.as_str();
            if ["0", "off", "f", "false", "n", "no"]
                .iter()
                .any(|w| t.eq_ignore_ascii_case(w))
            {
                Ok(false)
            } else if ["1", "on", "t", "true", "y", "yes"]
                .iter()
                .any(|w| t.eq_ignore_ascii_case(w))
            {
                Ok(true)
            } else {
                Err(PARSING)
            }
        }
        _ => Err(("bool_type", "Input should be a valid boolean")),
    }
}

/// Renders an offending input like pydantic's `'input': …`, cut to 100 characters.
fn render_input(v: &Value) -> String {
    // Python reprs of the scalars json.loads makes: True/False/None, floats as `repr(float)`.
    let s = match v {
        Value::String(s) => format!("'{}'", py_escape(s)),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        Value::Number(n) if n.is_f64() => {
            crate::engine::prom::py_repr(n.as_f64().unwrap_or(f64::NAN))
        }
        other => other.to_string(),
    };
    if s.chars().count() > 100 {
        let mut cut: String = s.chars().take(100).collect();
        cut.push_str("...");
        cut
    } else {
        s
    }
}

fn py_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

/// The natural output length of a request without `ignore_eos`: where the twin's "model"
/// emits EOS.
///
/// A real model stops when it samples EOS; the twin draws that point once per request,
/// uniformly over `[max(1, min_tokens), max_tokens]`, from `(seed, index)`. `index` is the
/// request's arrival number at the server, or, when the client sent `seed`, a hash of the
/// client seed and the prompt (so a seeded request gets the same length every time, like a
/// seeded sampler). The mean is therefore about `max_tokens / 2` and a request ends with
/// `finish_reason = "length"` only when the draw lands on `max_tokens` (probability
/// `1 / (max_tokens − min_tokens + 1)`). Send `ignore_eos: true` for exactly `max_tokens`.
pub fn natural_output_len(seed: u64, index: u64, min_tokens: u32, max_tokens: u32) -> u32 {
    let lo = min_tokens.max(1).min(max_tokens.max(1));
    super::seeded::uniform_u32(seed, 0x5709, index, lo, max_tokens.max(1))
}

/// The `index` of [`natural_output_len`] for a request: its arrival number, or a hash of the
/// client's `seed` and the prompt tokens when a seed was sent.
pub fn natural_stop_index(req: &ParsedRequest, arrival_index: u64) -> u64 {
    match req.seed {
        None => arrival_index,
        Some(s) => {
            let mut h = super::seeded::mix64(s as u64 ^ 0x5eed);
            for t in &req.prompt_tokens {
                h = super::seeded::mix64(h ^ u64::from(*t));
            }
            h
        }
    }
}
