//! Instant PromQL queries for `headroom slo budget`, over the same Prometheus HTTP API client
//! as `headroom diagnose --prometheus` ([`headroom_signals::promql::PromClient`]): one
//! implementation of the URL rules for both commands.
//!
//! The base URL may carry a path prefix (`http://host/prometheus`), `user:password@` (sent as
//! HTTP Basic authentication, never printed) and a query string (`?token=…`, sent with every
//! call, never printed). Every message names the URL without credentials or query
//! ([`headroom_core::run::redact_url`]). Plain HTTP only: put an HTTPS endpoint behind a
//! port-forward or a local proxy. Any PromQL-compatible store (Thanos, Mimir,
//! VictoriaMetrics) answers the same API.
//!
//! What this layer adds: an unreachable server is named with the operating system's reason
//! (`Connection refused`) and the question whether Prometheus runs there, and
//! [`PromClient::single`] refuses a value that no count can take (NaN, infinite) as invalid
//! data instead of passing it on.

use crate::SloError;
use headroom_signals::promql::{PromClient as ApiClient, PromError};
use std::collections::BTreeMap;
use std::time::Duration;

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Labels of the series (without `__name__`).
    pub metric: BTreeMap<String, String>,
    /// Value; NaN when Prometheus said `NaN` or sent something that is not a number.
    pub value: f64,
}

/// A Prometheus HTTP API endpoint (see the module docs for the URL forms).
#[derive(Clone)]
pub struct PromClient {
    api: ApiClient,
    timeout: Duration,
}

impl std::fmt::Debug for PromClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the credentials or the query string
        f.debug_struct("PromClient")
            .field("base", &self.api.shown())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PromClient {
    /// A client for `base_url` (e.g. `http://127.0.0.1:9090`, `http://u:p@host/prometheus?t=x`),
    /// each request bounded by `timeout`.
    ///
    /// # Errors
    /// [`SloError::Prometheus`] (the URL without credentials or query) when the URL is not
    /// `http://`, has no host, carries a `#fragment` or already names an `/api/v1` path.
    pub fn new(base_url: &str, timeout: Duration) -> Result<PromClient, SloError> {
        let api = ApiClient::new(base_url, timeout).map_err(|e| {
            let shown = headroom_core::run::redact_url(base_url.trim().trim_end_matches('/'));
            let text = e.to_string();
            let message = text
                .strip_prefix(&format!("--prometheus {shown}: "))
                .unwrap_or(&text)
                .to_owned();
            SloError::Prometheus {
                url: shown,
                message,
            }
        })?;
        Ok(PromClient { api, timeout })
    }

    /// The base URL as shown in messages: no credentials, no query string.
    pub fn base(&self) -> &str {
        self.api.shown()
    }

    fn err(&self, message: impl Into<String>) -> SloError {
        SloError::Prometheus {
            url: self.base().to_owned(),
            message: message.into(),
        }
    }

    /// Runs an instant query at `time` (Unix seconds; now when `None`) and returns the vector.
    ///
    /// # Errors
    /// [`SloError::Prometheus`]: unreachable (with the operating system's reason), no answer
    /// within the timeout, an answer that is not the Prometheus API, or a rejected query (the
    /// server's error and the PromQL quoted).
    pub async fn query(&self, promql: &str, time: Option<f64>) -> Result<Vec<Sample>, SloError> {
        let at = time.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        });
        match self.api.query(promql, at).await {
            Ok(v) => Ok(v
                .into_iter()
                .map(|s| Sample {
                    metric: s
                        .labels
                        .iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    value: s.value,
                })
                .collect()),
            Err(PromError::Http { reason, .. }) if reason.starts_with("unreachable") => {
                Err(self.err(self.unreachable().await))
            }
            Err(PromError::Http { reason, .. }) => Err(self.err(reason)),
            Err(PromError::Query { error, .. }) => {
                Err(self.err(format!("rejected the query ({error}); query: {promql}")))
            }
            Err(e) => Err(self.err(e.to_string())),
        }
    }

    /// Says why the server cannot be reached: the HTTP client reports only "connection
    /// failed", so one plain TCP connection to the same host and port fetches the operating
    /// system's reason (`Connection refused`, `No route to host`).
    async fn unreachable(&self) -> String {
        let hint =
            "is Prometheus running and listening there? Check the host and port of --prometheus";
        let Ok(uri) = self.base().parse::<http::Uri>() else {
            return format!("unreachable; {hint}");
        };
        let host = uri.host().unwrap_or("").trim_matches(['[', ']']).to_owned();
        let port = uri.port_u16().unwrap_or(80);
        let limit = self.timeout.min(Duration::from_secs(5));
        let why = match tokio::time::timeout(
            limit,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "the connection failed".to_owned(),
            Err(_) => format!("no connection within {limit:?}"),
        };
        format!("unreachable ({why}); {hint}")
    }

    /// Runs a query expected to give at most one number (a vector of zero or one sample, as
    /// `sum(…)` does). `None` when the vector is empty (no series: no data).
    ///
    /// # Errors
    /// As [`PromClient::query`]; also when the vector has several samples, and when the value
    /// is NaN or infinite: invalid data, which a sum of `increase()` never yields from sane
    /// counters, so it is reported rather than read as "no data".
    pub async fn single(&self, promql: &str, time: Option<f64>) -> Result<Option<f64>, SloError> {
        let v = self.query(promql, time).await?;
        match v.as_slice() {
            [] => Ok(None),
            [s] if s.value.is_finite() => Ok(Some(s.value)),
            [s] => Err(self.err(format!(
                "invalid data: the query returned {} (expected a finite number); query: {promql}",
                s.value
            ))),
            _ => Err(self.err(format!(
                "expected one sample, got {}; query: {promql}",
                v.len()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials_or_query() {
        let e = PromClient::new("https://u:secret@p:9090?token=abc", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Prometheus at https://p:9090: expected http://"),
            "{e}"
        );
        assert!(!e.contains("secret") && !e.contains("abc"), "{e}");
        assert!(PromClient::new("p:9090", Duration::from_secs(1)).is_err());
        let c = PromClient::new(
            "http://u:secret@127.0.0.1:9090/prom/?token=abc",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(c.base(), "http://127.0.0.1:9090/prom");
        let d = format!("{c:?}");
        assert!(!d.contains("secret") && !d.contains("abc"), "{d}");
    }
}
