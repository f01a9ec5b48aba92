//! Response bodies in vLLM 0.32's exact JSON and SSE shapes.
//!
//! Shapes, key order and `null`s follow `shared/fixtures/openai/*` (real vLLM 0.32 answers):
//! * completions chunk: `{"id","object":"text_completion","created","model","choices":[{"index",
//!   "text","logprobs","finish_reason","stop_reason","prompt_token_ids","token_ids"}]}`;
//! * chat: a role-only first chunk `{"delta":{"role":"assistant","content":""}}` followed by
//!   `{"delta":{"content":…}}` chunks; the last content chunk carries `finish_reason` and
//!   `stop_reason`;
//! * with `stream_options.include_usage`, a final chunk with `"choices":[]`, `usage` and
//!   `system_fingerprint`; with `continuous_usage_stats` too, every chunk carries `usage`;
//! * the stream ends with `data: [DONE]`.
//!
//! The streaming path writes bytes directly into a `BytesMut`: the per-request prefix (id,
//! created, model) is rendered once, and each token costs a few `memcpy`s of pre-escaped filler
//! text, with no allocation per token.

use bytes::{BufMut, BytesMut};

use super::protocol::Endpoint;

/// Why a request stopped, as the OpenAI `finish_reason` string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// EOS (natural stop): `"stop"`.
    Stop,
    /// `max_tokens` reached: `"length"`.
    Length,
    /// Aborted (client gone, shutdown): `"abort"`.
    Abort,
}

impl Finish {
    /// The `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// Filler output text, pre-escaped for JSON: piece `i` of a request with offset `o` is
/// `pieces[(i + o) % len]`, each from [`crate::filler_token_text`].
#[derive(Debug)]
pub struct FillerTable {
    pieces: Vec<Box<[u8]>>,
}

impl FillerTable {
    /// Builds `len` pieces (at least one) from `crate::filler_token_text(i, seed)`.
    pub fn new(len: u32, seed: u64) -> FillerTable {
        let len = len.max(1);
        let pieces = (0..len)
            .map(|i| {
                let mut out = Vec::new();
                escape_json_into(&crate::filler_token_text(i, seed), &mut out);
                out.into_boxed_slice()
            })
            .collect();
        FillerTable { pieces }
    }

    /// The JSON-escaped text of output token `index` of a request with offset `offset`.
    pub fn piece(&self, offset: u32, index: u32) -> &[u8] {
        let n = self.pieces.len() as u64;
        &self.pieces[((u64::from(offset) + u64::from(index)) % n) as usize]
    }

    /// Number of distinct pieces.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Always false (the table has at least one piece).
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}

/// Everything that is constant over one response.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    /// Endpoint (decides `object` and the chunk layout).
    pub endpoint: Endpoint,
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// Model name, JSON-escaped (without quotes).
    pub model_escaped: String,
    /// `system_fingerprint`, e.g. `vllm-0.32.0-1ec0e4da`.
    pub fingerprint: String,
    /// Prompt length in tokens (for `usage`).
    pub prompt_tokens: u32,
    /// Filler offset of this request.
    pub text_offset: u32,
    /// `continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
    /// `--enable-per-request-metrics`: a `metrics` object on the final usage chunk.
    pub per_request_metrics: bool,
}

/// Incremental writer of one SSE response.
#[derive(Debug)]
pub struct SseWriter {
    meta: ResponseMeta,
    /// `data: {"id":…,"model":"…","choices":[{"index":0,` rendered once.
    prefix: Vec<u8>,
}

impl SseWriter {
    /// Renders the constant prefix of this response's chunks.
    pub fn new(meta: ResponseMeta) -> SseWriter {
        let mut prefix = Vec::with_capacity(160);
        prefix.extend_from_slice(b"data: {\"id\":\"");
        prefix.extend_from_slice(meta.id.as_bytes());
        prefix.extend_from_slice(b"\",\"object\":\"");
        prefix.extend_from_slice(object_name(meta.endpoint, true).as_bytes());
        prefix.extend_from_slice(b"\",\"created\":");
        put_u64_vec(&mut prefix, meta.created);
        prefix.extend_from_slice(b",\"model\":\"");
        prefix.extend_from_slice(meta.model_escaped.as_bytes());
        prefix.extend_from_slice(b"\",\"choices\":[");
        SseWriter { meta, prefix }
    }

    /// The response's constants.
    pub fn meta(&self) -> &ResponseMeta {
        &self.meta
    }

    /// Chat only: the role-only first chunk.
    pub fn role_chunk(&self, out: &mut BytesMut) {
        out.put_slice(&self.prefix);
        out.put_slice(b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]");
        if self.meta.continuous_usage {
            self.usage(out, 0, true);
        }
        out.put_slice(b",\"prompt_token_ids\":null,\"prompt_text\":null}\n\n");
    }

    /// The chunk of output token `index` (0-based); `finish` on the last one.
    pub fn token_chunk(
        &self,
        out: &mut BytesMut,
        table: &FillerTable,
        index: u32,
        finish: Option<Finish>,
    ) {
        out.put_slice(&self.prefix);
        let text = table.piece(self.meta.text_offset, index);
        match self.meta.endpoint {
            Endpoint::Completions => {
                out.put_slice(b"{\"index\":0,\"text\":\"");
                out.put_slice(text);
                out.put_slice(b"\",\"logprobs\":null,\"finish_reason\":");
                put_finish(out, finish);
                out.put_slice(
                    b",\"stop_reason\":null,\"prompt_token_ids\":null,\"token_ids\":null}]",
                );
            }
            Endpoint::ChatCompletions => {
                out.put_slice(b"{\"index\":0,\"delta\":{\"content\":\"");
                out.put_slice(text);
                out.put_slice(b"\"},\"logprobs\":null,\"finish_reason\":");
                put_finish(out, finish);
                if finish.is_some() {
                    out.put_slice(b",\"stop_reason\":null");
                }
                out.put_slice(b",\"token_ids\":null}]");
            }
        }
        if self.meta.continuous_usage {
            self.usage(
                out,
                index + 1,
                self.meta.endpoint == Endpoint::ChatCompletions,
            );
        }
        out.put_slice(b"}\n\n");
    }

    /// The final usage chunk (`"choices":[]`, `usage`, `system_fingerprint`, and with
    /// per-request metrics `"metrics":{"queue_time_ms":…}` as vLLM 0.32 appends it).
    pub fn usage_chunk(
        &self,
        out: &mut BytesMut,
        completion_tokens: u32,
        queue_time_ms: Option<f64>,
    ) {
        out.put_slice(&self.prefix);
        out.put_slice(b"]");
        self.usage(out, completion_tokens, false);
        out.put_slice(b",\"system_fingerprint\":\"");
        out.put_slice(self.meta.fingerprint.as_bytes());
        out.put_slice(b"\"");
        if self.meta.per_request_metrics
            && let Some(q) = queue_time_ms
        {
            out.put_slice(format!(",\"metrics\":{{\"queue_time_ms\":{q}}}").as_bytes());
        }
        out.put_slice(b"}\n\n");
    }

    /// `data: [DONE]`.
    pub fn done(out: &mut BytesMut) {
        out.put_slice(b"data: [DONE]\n\n");
    }

    fn usage(&self, out: &mut BytesMut, completion: u32, details: bool) {
        let p = self.meta.prompt_tokens;
        out.put_slice(b",\"usage\":{\"prompt_tokens\":");
        put_u64(out, u64::from(p));
        out.put_slice(b",\"total_tokens\":");
        put_u64(out, u64::from(p) + u64::from(completion));
        out.put_slice(b",\"completion_tokens\":");
        put_u64(out, u64::from(completion));
        if details {
            out.put_slice(b",\"completion_tokens_details\":null");
        }
        out.put_slice(b"}");
    }
}

/// The non-streaming body of a finished request with `completion_tokens` output tokens.
pub fn full_response(
    meta: &ResponseMeta,
    table: &FillerTable,
    completion_tokens: u32,
    finish: Finish,
) -> Vec<u8> {
    let mut text = Vec::with_capacity(completion_tokens as usize * 8);
    for i in 0..completion_tokens {
        text.extend_from_slice(table.piece(meta.text_offset, i));
    }
    let mut out = Vec::with_capacity(text.len() + 700);
    out.extend_from_slice(b"{\"id\":\"");
    out.extend_from_slice(meta.id.as_bytes());
    out.extend_from_slice(b"\",\"object\":\"");
    out.extend_from_slice(object_name(meta.endpoint, false).as_bytes());
    out.extend_from_slice(b"\",\"created\":");
    put_u64_vec(&mut out, meta.created);
    out.extend_from_slice(b",\"model\":\"");
    out.extend_from_slice(meta.model_escaped.as_bytes());
    out.extend_from_slice(b"\",\"choices\":[{\"index\":0,");
    match meta.endpoint {
        Endpoint::Completions => {
            out.extend_from_slice(b"\"text\":\"");
            out.extend_from_slice(&text);
            out.extend_from_slice(b"\",\"logprobs\":null,\"finish_reason\":\"");
            out.extend_from_slice(finish.as_str().as_bytes());
            out.extend_from_slice(
                b"\",\"stop_reason\":null,\"token_ids\":null,\"prompt_logprobs\":null,\"prompt_token_ids\":null,\"routed_experts\":null}]",
            );
        }
        Endpoint::ChatCompletions => {
            out.extend_from_slice(b"\"message\":{\"role\":\"assistant\",\"content\":\"");
            out.extend_from_slice(&text);
            out.extend_from_slice(
                b"\",\"refusal\":null,\"annotations\":null,\"audio\":null,\"function_call\":null,\"reasoning\":null},\"logprobs\":null,\"finish_reason\":\"",
            );
            out.extend_from_slice(finish.as_str().as_bytes());
            out.extend_from_slice(
                b"\",\"stop_reason\":null,\"token_ids\":null,\"routed_experts\":null}]",
            );
        }
    }
    out.extend_from_slice(b",\"service_tier\":null,\"system_fingerprint\":\"");
    out.extend_from_slice(meta.fingerprint.as_bytes());
    out.extend_from_slice(b"\",\"usage\":{\"prompt_tokens\":");
    put_u64_vec(&mut out, u64::from(meta.prompt_tokens));
    out.extend_from_slice(b",\"total_tokens\":");
    put_u64_vec(
        &mut out,
        u64::from(meta.prompt_tokens) + u64::from(completion_tokens),
    );
    out.extend_from_slice(b",\"completion_tokens\":");
    put_u64_vec(&mut out, u64::from(completion_tokens));
    out.extend_from_slice(b",\"prompt_tokens_details\":null,\"completion_tokens_details\":null}");
    if meta.endpoint == Endpoint::ChatCompletions {
        out.extend_from_slice(
            b",\"prompt_logprobs\":null,\"prompt_token_ids\":null,\"prompt_text\":null",
        );
    }
    out.extend_from_slice(
        b",\"kv_transfer_params\":null,\"ec_transfer_params\":null,\"metrics\":null}",
    );
    out
}

fn object_name(endpoint: Endpoint, stream: bool) -> &'static str {
    match (endpoint, stream) {
        (Endpoint::Completions, _) => "text_completion",
        (Endpoint::ChatCompletions, true) => "chat.completion.chunk",
        (Endpoint::ChatCompletions, false) => "chat.completion",
    }
}

fn put_finish(out: &mut BytesMut, finish: Option<Finish>) {
    match finish {
        None => out.put_slice(b"null"),
        Some(f) => {
            out.put_u8(b'"');
            out.put_slice(f.as_str().as_bytes());
            out.put_u8(b'"');
        }
    }
}

fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return i;
        }
    }
}

fn put_u64(out: &mut BytesMut, v: u64) {
    let mut buf = [0u8; 20];
    let start = fmt_u64(v, &mut buf);
    out.put_slice(&buf[start..]);
}

fn put_u64_vec(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let start = fmt_u64(v, &mut buf);
    out.extend_from_slice(&buf[start..]);
}

/// Appends `s` as the inside of a JSON string literal (RFC 8259 §7 escaping).
pub fn escape_json_into(s: &str, out: &mut Vec<u8>) {
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
            }
            _ => out.push(b),
        }
    }
}

/// `s` escaped for the inside of a JSON string literal.
pub fn escape_json(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    escape_json_into(s, &mut out);
    // Escaping only replaces ASCII bytes with ASCII sequences, so UTF-8 is preserved.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_through_serde_json() {
        let s = "a\"b\\c\nd\te\u{1}f é 字";
        let quoted = format!("\"{}\"", escape_json(s));
        let back: String = serde_json::from_str(&quoted).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn integers_format_like_display() {
        for v in [0u64, 7, 10, 99, 1_795_969_814, u64::MAX] {
            let mut b = BytesMut::new();
            put_u64(&mut b, v);
            assert_eq!(std::str::from_utf8(&b).unwrap(), v.to_string());
        }
    }
}
