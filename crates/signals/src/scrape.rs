//! Scrapes: one `/metrics` body with the time it was taken, fetched live or read back from disk.
//!
//! What lives here: [`Scrape`] and the live scraper ([`scrape_once`], [`Scraper`]) over plain
//! HTTP (hyper). What does not: deciding when to scrape (the sweep and [`crate::source`]) or
//! interpreting the metrics ([`crate::adapter`], [`crate::window`]).
//!
//! The scraper asks for the text format (`Accept: text/plain;version=0.0.4`, as
//! `metrics.md` §7.2 advises, for determinism) but parses OpenMetrics too if that is what comes
//! back. It never asks for compression. `https://` is not supported (use a port-forward).

use headroom_core::error_chain;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::exposition::{Exposition, Format, Limits, ParseError, parse_with};

/// One scrape of one endpoint.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// Where it came from: the URL, or the file path for a saved scrape.
    pub source: String,
    /// When the request was sent (or the file's timestamp), Unix seconds.
    pub at_unix_s: f64,
    /// When the request was sent on the caller's monotonic clock, as time since the
    /// [`Scraper`]'s origin; `None` for saved scrapes.
    pub at_mono: Option<Duration>,
    /// The raw body, as received (kept so that a run directory can store it verbatim).
    pub body: String,
    /// The parsed body.
    pub exposition: Exposition,
}

impl Scrape {
    /// Parses `body` into a scrape taken at `at_unix_s` from `source`.
    ///
    /// Errors: [`ScrapeError::Empty`] for a blank body, [`ScrapeError::NotMetrics`] for an HTML
    /// page, [`ScrapeError::Parse`] for a malformed body (all naming `source`).
    pub fn from_body(
        source: impl Into<String>,
        body: String,
        at_unix_s: f64,
        at_mono: Option<Duration>,
    ) -> Result<Scrape, ScrapeError> {
        let source = source.into();
        check_body(&source, None, &body)?;
        let exposition = parse_with(&body, Format::Auto, &Limits::default()).map_err(|e| {
            ScrapeError::Parse {
                url: source.clone(),
                error: e,
            }
        })?;
        Ok(Scrape {
            source,
            at_unix_s,
            at_mono,
            body,
            exposition,
        })
    }
}

/// Why a scrape failed. Every message names the URL (or file) and says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The URL cannot be used.
    #[error("{url}: not a usable metrics URL: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// Connection refused, DNS failure, reset.
    #[error("{url}: unreachable ({reason}); is the server running and listening on that port?")]
    Unreachable {
        /// The URL.
        url: String,
        /// Transport error text.
        reason: String,
    },
    /// No complete answer within the timeout.
    #[error("{url}: no complete answer within {after:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        after: Duration,
    },
    /// The server answered with a status other than 200.
    #[error("{url}: HTTP {status} instead of 200; body starts: {body_start:?}")]
    Status {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// First 200 characters of the body (llama.cpp says "Start it with `--metrics`").
        body_start: String,
    },
    /// An HTML page came back: wrong port or path, or a login page in front.
    #[error(
        "{url}: got an HTML page, not Prometheus metrics{}; check the port and the /metrics path; body starts: {body_start:?}",
        content_type.as_deref().map(|c| format!(" (Content-Type: {c})")).unwrap_or_default()
    )]
    NotMetrics {
        /// The URL.
        url: String,
        /// `Content-Type` header, if any.
        content_type: Option<String>,
        /// First 200 characters of the body.
        body_start: String,
    },
    /// The body was empty.
    #[error("{url}: empty metrics body (a server started with metrics disabled?)")]
    Empty {
        /// The URL.
        url: String,
    },
    /// The body exceeded the size limit.
    #[error("{url}: body larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// Limit in bytes.
        limit: usize,
    },
    /// The body is not valid UTF-8.
    #[error("{url}: body is not UTF-8 text")]
    NotUtf8 {
        /// The URL.
        url: String,
    },
    /// The body is not a valid exposition.
    ///
    /// The parse error is part of this message and deliberately *not* exposed as
    /// [`std::error::Error::source`]: error reporters that print the chain (anyhow's `{:#}`)
    /// would otherwise print it twice.
    #[error("{url}: not a Prometheus/OpenMetrics exposition: {error}")]
    Parse {
        /// The URL or file.
        url: String,
        /// The parse error (line and what was expected).
        error: ParseError,
    },
}

fn excerpt(s: &str) -> String {
    s.chars().take(200).collect()
}

fn check_body(url: &str, content_type: Option<&str>, body: &str) -> Result<(), ScrapeError> {
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        return Err(ScrapeError::Empty {
            url: url.to_owned(),
        });
    }
    let head: String = trimmed
        .chars()
        .take(15)
        .collect::<String>()
        .to_ascii_lowercase();
    let html_type = content_type.is_some_and(|c| c.to_ascii_lowercase().contains("text/html"));
    if html_type || head.starts_with("<!doctype") || head.starts_with("<html") {
        return Err(ScrapeError::NotMetrics {
            url: url.to_owned(),
            content_type: content_type.map(str::to_owned),
            body_start: excerpt(trimmed),
        });
    }
    Ok(())
}

/// Unix time now, seconds.
pub fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A reusable scraper: one HTTP client (keep-alive), a timeout, and a monotonic origin for
/// [`Scrape::at_mono`].
#[derive(Clone)]
pub struct Scraper {
    client: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
    origin: Instant,
    max_body_bytes: usize,
}

impl Scraper {
    /// A scraper whose monotonic times count from now.
    pub fn new(timeout: Duration) -> Scraper {
        Scraper::with_origin(timeout, Instant::now())
    }

    /// A scraper whose monotonic times count from `origin` (e.g. the sweep level's start).
    pub fn with_origin(timeout: Duration, origin: Instant) -> Scraper {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Scraper {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
            origin,
            max_body_bytes: Limits::default().max_body_bytes,
        }
    }

    /// Fetches and parses `url` once. `at_unix_s`/`at_mono` are the time the request was sent.
    ///
    /// Errors: see [`ScrapeError`]; each names the URL.
    pub async fn scrape(&self, url: &str) -> Result<Scrape, ScrapeError> {
        // messages name the URL without `user:password@` or a query (tokens)
        let shown = headroom_core::run::redact_url(url);
        let uri: hyper::Uri = url.parse().map_err(|e| ScrapeError::InvalidUrl {
            url: shown.clone(),
            reason: format!("{e}"),
        })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(ScrapeError::InvalidUrl {
                    url: shown.clone(),
                    reason: "https is not supported; scrape over plain http (e.g. through a port-forward)".to_owned(),
                });
            }
            _ => {
                return Err(ScrapeError::InvalidUrl {
                    url: shown.clone(),
                    reason: "expected http://host:port/path".to_owned(),
                });
            }
        }
        let req = hyper::Request::get(uri)
            .header(
                hyper::header::ACCEPT,
                "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            )
            .header(hyper::header::USER_AGENT, "headroom")
            .body(Empty::<Bytes>::new())
            .map_err(|e| ScrapeError::InvalidUrl {
                url: shown.clone(),
                reason: e.to_string(),
            })?;
        let at_unix_s = unix_now_s();
        let at_mono = self.origin.elapsed();
        let fetch = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| ScrapeError::Unreachable {
                    url: shown.clone(),
                    reason: error_chain(&e),
                })?;
            let status = resp.status();
            let content_type = resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = Limited::new(resp.into_body(), self.max_body_bytes)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        ScrapeError::TooLarge {
                            url: shown.clone(),
                            limit: self.max_body_bytes,
                        }
                    } else {
                        ScrapeError::Unreachable {
                            url: shown.clone(),
                            reason: format!("reading the body: {e}"),
                        }
                    }
                })?
                .to_bytes();
            Ok::<_, ScrapeError>((status, content_type, body))
        };
        let (status, content_type, body) = tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| ScrapeError::Timeout {
                url: shown.clone(),
                after: self.timeout,
            })??;
        let text = String::from_utf8(body.to_vec())
            .map_err(|_| ScrapeError::NotUtf8 { url: shown.clone() })?;
        if status != hyper::StatusCode::OK {
            return Err(ScrapeError::Status {
                url: shown.clone(),
                status: status.as_u16(),
                body_start: excerpt(&text),
            });
        }
        check_body(&shown, content_type.as_deref(), &text)?;
        let exposition = parse_with(&text, Format::Auto, &Limits::default()).map_err(|e| {
            ScrapeError::Parse {
                url: shown.clone(),
                error: e,
            }
        })?;
        Ok(Scrape {
            source: shown,
            at_unix_s,
            at_mono: Some(at_mono),
            body: text,
            exposition,
        })
    }
}

/// Fetches and parses `url` once with a fresh client; `at_mono` counts from this call.
///
/// Errors: see [`ScrapeError`]; each names the URL.
pub async fn scrape_once(url: &str, timeout: Duration) -> Result<Scrape, ScrapeError> {
    Scraper::new(timeout).scrape(url).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Serves `responses` (one per connection) on 127.0.0.1 and returns the base URL.
    async fn serve(responses: Vec<String>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for r in responses {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(r.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        format!("http://{addr}/metrics")
    }

    fn http(status: &str, ctype: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn scrapes_and_parses() {
        let url = serve(vec![http(
            "200 OK",
            "text/plain; version=0.0.4",
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2.0\n",
        )])
        .await;
        let s = scrape_once(&url, Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            s.exposition
                .samples("vllm:num_requests_running")
                .next()
                .unwrap()
                .value,
            2.0
        );
        assert!(s.at_unix_s > 1.7e9);
        assert_eq!(s.source, url);
    }

    #[tokio::test]
    async fn clear_errors() {
        let html = serve(vec![http(
            "200 OK",
            "text/html",
            "<!DOCTYPE html><html>login</html>",
        )])
        .await;
        let e = scrape_once(&html, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, ScrapeError::NotMetrics { .. }), "{e}");
        assert!(e.to_string().contains(&html));

        let s404 = serve(vec![http("404 Not Found", "text/plain", "nope")]).await;
        let e = scrape_once(&s404, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, ScrapeError::Status { status: 404, .. }), "{e}");

        let empty = serve(vec![http("200 OK", "text/plain", "\n")]).await;
        let e = scrape_once(&empty, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, ScrapeError::Empty { .. }), "{e}");

        // A port nobody listens on, reserved while the test runs (bound, never listening: a port
        // bound and closed again could be taken by a server of a test running beside this one).
        let reserved = tokio::net::TcpSocket::new_v4().unwrap();
        reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = reserved.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/metrics");
        let e = scrape_once(&url, Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, ScrapeError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains(&url));

        let e = scrape_once("https://127.0.0.1:1/metrics", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e, ScrapeError::InvalidUrl { .. }));
    }

    #[tokio::test]
    async fn timeout_names_the_url() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (_sock, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let url = format!("http://{addr}/metrics");
        let e = scrape_once(&url, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(e, ScrapeError::Timeout { .. }), "{e}");
        task.abort();
    }
}
