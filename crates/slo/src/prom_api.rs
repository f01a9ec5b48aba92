//! A thin client of the Prometheus HTTP API (`POST /api/v1/query`, form-encoded), enough for
//! instant queries. Any PromQL-compatible store (Thanos, Mimir, VictoriaMetrics) answers the same
//! API. Plain HTTP only (hyper-util's client, no TLS dependency): put an HTTPS endpoint behind a
//! port-forward or a local proxy.
//!
//! Response shape (prometheus.io/docs/prometheus/latest/querying/api/): `{"status":"success",
//! "data":{"resultType":"vector","result":[{"metric":{…},"value":[<unix s>,"<float>"]}]},
//! "warnings":[…]}` or `{"status":"error","errorType":"…","error":"…"}`. Sample values are
//! strings and may be `NaN`, `+Inf`, `-Inf`.

use crate::SloError;
use bytes::Bytes;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest response body accepted (bytes).
const MAX_BODY: usize = 16 << 20;

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Labels of the series.
    pub metric: BTreeMap<String, String>,
    /// Value (may be NaN or infinite).
    pub value: f64,
}

/// Result of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryResult {
    /// `resultType: vector`.
    Vector(Vec<Sample>),
    /// `resultType: scalar`.
    Scalar(f64),
    /// Any other result type (matrix, string), named.
    Other(String),
}

/// A Prometheus HTTP API endpoint.
#[derive(Clone)]
pub struct PromClient {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for PromClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromClient")
            .field("base", &self.base)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Parses a Prometheus sample value (`"1.5"`, `"NaN"`, `"+Inf"`, `"-Inf"`).
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

impl PromClient {
    /// A client for `base_url` (e.g. `http://127.0.0.1:9090`, or with a path prefix such as
    /// `http://host/prometheus`), each request bounded by `timeout`.
    ///
    /// # Errors
    /// [`SloError::Prometheus`] when the URL does not parse, is not `http://`, or has no host.
    pub fn new(base_url: &str, timeout: Duration) -> Result<PromClient, SloError> {
        let err = |m: &str| SloError::Prometheus {
            url: base_url.to_string(),
            message: m.to_string(),
        };
        let uri: Uri = base_url
            .parse()
            .map_err(|e| err(&format!("not a URL ({e}); expected http://host:port")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(err(
                    "https is not supported (no TLS client); reach Prometheus over http, e.g. through kubectl port-forward",
                ));
            }
            _ => return Err(err("expected an http:// URL, e.g. http://127.0.0.1:9090")),
        }
        if uri.host().is_none() {
            return Err(err("no host; expected http://host:port"));
        }
        let base = base_url.trim_end_matches('/').to_string();
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(PromClient {
            base,
            client,
            timeout,
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn err(&self, m: impl Into<String>) -> SloError {
        SloError::Prometheus {
            url: self.base.clone(),
            message: m.into(),
        }
    }

    /// Runs an instant query at `time` (Unix seconds; now when `None`).
    ///
    /// # Errors
    /// [`SloError::Prometheus`] on a transport error or timeout, a non-JSON or oversized answer,
    /// or an API error (its `errorType` and `error` are quoted).
    pub async fn query(&self, promql: &str, time: Option<f64>) -> Result<QueryResult, SloError> {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("query", promql);
        if let Some(t) = time {
            form.append_pair("time", &format!("{t:.3}"));
        }
        let body = form.finish();
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/api/v1/query", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| self.err(format!("cannot build request: {e}")))?;
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| self.err(format!("request failed: {e}")))?;
            let status = resp.status();
            let collected = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| self.err(format!("reading the answer failed: {e}")))?;
            Ok::<_, SloError>((status, collected.to_bytes()))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| self.err(format!("no answer within {:?}", self.timeout)))??;
        let parsed: ApiResponse = serde_json::from_slice(&bytes).map_err(|e| {
            self.err(format!(
                "HTTP {status}: answer is not Prometheus API JSON ({e}): {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })?;
        if parsed.status != "success" {
            return Err(self.err(format!(
                "query failed ({}): {} — query: {promql}",
                parsed.error_type.unwrap_or_default(),
                parsed.error.unwrap_or_default()
            )));
        }
        let data = parsed
            .data
            .ok_or_else(|| self.err("status success without data"))?;
        match data.result_type.as_str() {
            "vector" => {
                let raw: Vec<RawSample> = serde_json::from_value(data.result)
                    .map_err(|e| self.err(format!("unexpected vector shape: {e}")))?;
                let mut out = Vec::with_capacity(raw.len());
                for r in raw {
                    let value = parse_value(&r.value.1)
                        .ok_or_else(|| self.err(format!("sample value `{}`", r.value.1)))?;
                    out.push(Sample {
                        metric: r.metric,
                        value,
                    });
                }
                Ok(QueryResult::Vector(out))
            }
            "scalar" => {
                let (_, v): (f64, String) = serde_json::from_value(data.result)
                    .map_err(|e| self.err(format!("unexpected scalar shape: {e}")))?;
                parse_value(&v)
                    .map(QueryResult::Scalar)
                    .ok_or_else(|| self.err(format!("scalar value `{v}`")))
            }
            other => Ok(QueryResult::Other(other.to_string())),
        }
    }

    /// Runs a query expected to give at most one number (a scalar, or a vector of zero or one
    /// sample, as `sum(…)` does). `None` when the vector is empty.
    ///
    /// # Errors
    /// As [`PromClient::query`]; also when the vector has several samples or the result is a
    /// matrix or string.
    pub async fn single(&self, promql: &str, time: Option<f64>) -> Result<Option<f64>, SloError> {
        match self.query(promql, time).await? {
            QueryResult::Scalar(v) => Ok(Some(v)),
            QueryResult::Vector(v) if v.is_empty() => Ok(None),
            QueryResult::Vector(v) if v.len() == 1 => Ok(Some(v[0].value)),
            QueryResult::Vector(v) => Err(self.err(format!(
                "expected one sample, got {} — query: {promql}",
                v.len()
            ))),
            QueryResult::Other(t) => Err(self.err(format!(
                "expected an instant vector, got {t} — query: {promql}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_urls() {
        assert!(parse_value("NaN").unwrap().is_nan());
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("0.25"), Some(0.25));
        assert_eq!(parse_value("x"), None);
        let e = PromClient::new("https://p:9090", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("https is not supported"), "{e}");
        assert!(PromClient::new("p:9090", Duration::from_secs(1)).is_err());
        let c = PromClient::new("http://127.0.0.1:9090/", Duration::from_secs(1)).unwrap();
        assert_eq!(c.base(), "http://127.0.0.1:9090");
    }
}
