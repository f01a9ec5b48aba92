//! Terminal outcome of one request, as seen by a client.
//!
//! Server outcomes mirror vLLM's `finish_reason` values (`stop`, `length`, `abort`) plus `error`
//! (an error object in the stream or a 5xx); client outcomes say what the *client* saw when no
//! server outcome arrived. The split matters: a load tool must say which failures are its own and
//! which are the server's (see oha's treatment of deadline-caused failures).

use serde::{Deserialize, Serialize};
use std::fmt;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "code")]
pub enum Outcome {
    /// The model emitted a stop condition (EOS or a stop string); vLLM `finish_reason="stop"`.
    Stop,
    /// The output hit `max_tokens` (or the context limit); vLLM `finish_reason="length"`.
    Length,
    /// The server aborted the request; vLLM `finish_reason="abort"`.
    Abort,
    /// The server reported an error: an error object mid-stream, or `finish_reason="error"`.
    Error,
    /// The server answered with a non-2xx HTTP status before streaming.
    HttpStatus(u16),
    /// The client's own deadline expired before the stream ended.
    Timeout,
    /// Connection refused, reset or closed before the stream ended.
    Transport,
    /// The server sent something that is not a valid OpenAI stream (bad JSON, no `[DONE]` …).
    Protocol,
    /// The client cancelled (end of a measurement window, Ctrl-C); not a server failure.
    ClientCancel,
    /// The client's own limits failed the request before it reached the server: no file
    /// descriptor left (`EMFILE`, `ENFILE`) or no local port (`EADDRNOTAVAIL`). Not a server
    /// failure: the load offered was not the load asked for, so the level gives no verdict.
    ClientLimit,
}

impl Outcome {
    /// Parses a `finish_reason` string as vLLM sends it. Unknown reasons map to `None`.
    pub fn from_finish_reason(s: &str) -> Option<Outcome> {
        match s {
            "stop" => Some(Outcome::Stop),
            "length" => Some(Outcome::Length),
            "abort" => Some(Outcome::Abort),
            "error" => Some(Outcome::Error),
            _ => None,
        }
    }

    /// True for a request that completed normally (`stop` or `length`).
    pub fn is_success(self) -> bool {
        matches!(self, Outcome::Stop | Outcome::Length)
    }

    /// True for outcomes counted against the error objective: server errors and aborts, HTTP
    /// errors, timeouts, transport and protocol failures. A client cancel is not counted (the
    /// client chose it), nor a client limit (the server never saw the request).
    pub fn counts_as_error(self) -> bool {
        !self.is_success() && !matches!(self, Outcome::ClientCancel | Outcome::ClientLimit)
    }

    /// Stable label, e.g. `stop`, `http_503`, `client_cancel` (used in CSV, JSON and reports).
    pub fn label(self) -> String {
        match self {
            Outcome::HttpStatus(c) => format!("http_{c}"),
            other => other.static_label().to_string(),
        }
    }

    fn static_label(self) -> &'static str {
        match self {
            Outcome::Stop => "stop",
            Outcome::Length => "length",
            Outcome::Abort => "abort",
            Outcome::Error => "error",
            Outcome::HttpStatus(_) => "http_status",
            Outcome::Timeout => "timeout",
            Outcome::Transport => "transport",
            Outcome::Protocol => "protocol",
            Outcome::ClientCancel => "client_cancel",
            Outcome::ClientLimit => "client_limit",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_accounting() {
        assert!(!Outcome::Stop.counts_as_error());
        assert!(!Outcome::Length.counts_as_error());
        assert!(!Outcome::ClientCancel.counts_as_error());
        assert!(!Outcome::ClientLimit.counts_as_error());
        assert_eq!(Outcome::ClientLimit.label(), "client_limit");
        for o in [
            Outcome::Abort,
            Outcome::Error,
            Outcome::HttpStatus(503),
            Outcome::Timeout,
            Outcome::Transport,
            Outcome::Protocol,
        ] {
            assert!(o.counts_as_error(), "{o}");
        }
        assert_eq!(Outcome::HttpStatus(429).label(), "http_429");
        assert_eq!(Outcome::from_finish_reason("length"), Some(Outcome::Length));
        assert_eq!(Outcome::from_finish_reason("tool_calls"), None);
    }
}
