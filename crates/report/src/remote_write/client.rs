//! The HTTP side of remote write: one push ([`RemoteWriteClient`]) with a bounded time, a
//! bounded response read and retries as the 1.0 specification asks of a sender (5xx and 429
//! retried with backoff, other 4xx never), and the sweep's background pusher ([`Pusher`]), which
//! sends each new level's samples without ever holding up the sweep.

use super::{Outbox, Point, proto, write_requests};
use bytes::Bytes;
use headroom_core::run::RunResult;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Time one attempt may take: connect, send, and read the answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts of one request at most (the first and its retries).
pub const ATTEMPTS: u32 = 4;
/// Wait before the first retry; it doubles with each one (0.5, 1, 2 s).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Bytes of a receiver's answer read at most (its error message is quoted from them).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Characters of a receiver's answer an error quotes at most.
pub const EXCERPT_CHARS: usize = 200;
/// How long the end of a sweep waits for its last push: one request's attempts at their
/// longest (4 × 10 s, and 3.5 s of backoff), with margin.
pub const FINISH_WAIT: Duration = Duration::from_secs(60);

/// A push that did not land.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PushError {
    /// The URL is not one this client can push to.
    #[error("{url}: {reason}")]
    InvalidUrl {
        /// The URL as given, credentials removed.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The receiver refused the samples (a 4xx other than 429): sending them again would be
    /// refused again, so they are not.
    #[error("{url}: HTTP {status}, not retried: {body}{}", refusal_hint(*status, body))]
    Refused {
        /// The URL, credentials removed.
        url: String,
        /// HTTP status.
        status: u16,
        /// The start of the receiver's answer ([`EXCERPT_CHARS`]).
        body: String,
    },
    /// Every attempt failed for a reason that may pass (5xx, 429, no connection, timeout).
    #[error("{url}: {attempts} attempts failed, the last: {last}")]
    Failed {
        /// The URL, credentials removed.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Why the last attempt failed (HTTP status and answer, or the transport error).
        last: String,
    },
}

impl PushError {
    /// Whether the samples were refused for good (sending them again cannot help).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, PushError::Failed { .. })
    }
}

/// What a refusal's answer means, when Prometheus's words say: its TSDB appends each series in
/// time order and only within its head block (roughly the last hour to two).
fn refusal_hint(status: u16, body: &str) -> &'static str {
    let b = body.to_ascii_lowercase();
    if status == 400
        && [
            "out of order",
            "out of bounds",
            "too old",
            "duplicate sample",
        ]
        .iter()
        .any(|w| b.contains(w))
    {
        " (Prometheus keeps one value per series and millisecond, appended in time order \
         within its head block, about the last hour: a sample older than the series' newest, \
         a changed value for a time it has, or a run finished hours ago is refused)"
    } else {
        ""
    }
}

/// A remote-write endpoint (`http://host:port/api/v1/write` for Prometheus started with its
/// remote-write receiver on).
#[derive(Clone)]
pub struct RemoteWriteClient {
    uri: hyper::Uri,
    shown: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    attempts: u32,
    first_backoff: Duration,
}

impl RemoteWriteClient {
    /// A client for `url` with [`ATTEMPT_TIMEOUT`], [`ATTEMPTS`] and [`FIRST_BACKOFF`].
    ///
    /// # Errors
    /// [`PushError::InvalidUrl`] for a URL that is not `http://host[:port]/path` (https is not
    /// supported).
    pub fn new(url: &str) -> Result<RemoteWriteClient, PushError> {
        RemoteWriteClient::with_limits(url, ATTEMPT_TIMEOUT, ATTEMPTS, FIRST_BACKOFF)
    }

    /// A client with its own limits (tests use short ones).
    ///
    /// # Errors
    /// As [`RemoteWriteClient::new`].
    pub fn with_limits(
        url: &str,
        timeout: Duration,
        attempts: u32,
        first_backoff: Duration,
    ) -> Result<RemoteWriteClient, PushError> {
        let shown = headroom_core::run::redact_url(url);
        let invalid = |reason: &str| PushError::InvalidUrl {
            url: shown.clone(),
            reason: reason.to_string(),
        };
        let expected =
            "expected http://host:port/api/v1/write (Prometheus's remote-write receiver)";
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| invalid(&format!("{e}; {expected}")))?;
        match uri.scheme_str() {
            Some("http") if uri.host().is_some() => {}
            Some("https") => {
                return Err(invalid(
                    "https is not supported; push over plain http (e.g. through a port-forward)",
                ));
            }
            _ => return Err(invalid(expected)),
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        Ok(RemoteWriteClient {
            uri,
            shown,
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
            attempts: attempts.max(1),
            first_backoff,
        })
    }

    /// The URL as messages show it (credentials and query removed).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Pushes `points` in requests of at most [`super::MAX_SAMPLES_PER_REQUEST`] samples, in
    /// time order, stopping at the first request that does not land.
    ///
    /// # Errors
    /// `(delivered, error)`: how many of `points`, from the first, landed before the failure.
    pub async fn push_points(&self, points: &[Point]) -> Result<(), (usize, PushError)> {
        let mut delivered = 0;
        for (req, chunk) in write_requests(points)
            .iter()
            .zip(points.chunks(super::MAX_SAMPLES_PER_REQUEST))
        {
            self.push(req).await.map_err(|e| (delivered, e))?;
            delivered += chunk.len();
        }
        Ok(())
    }

    /// Pushes one request, retrying what may pass.
    ///
    /// # Errors
    /// [`PushError::Refused`] at once for a 4xx other than 429; [`PushError::Failed`] after
    /// [`ATTEMPTS`] attempts ended in a 5xx, a 429, no connection or a timeout.
    pub async fn push(&self, req: &proto::WriteRequest) -> Result<(), PushError> {
        let body = Bytes::from(proto::encode(req));
        let mut backoff = self.first_backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            if attempt > 1 {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            match self.attempt(body.clone()).await {
                Ok((status, _)) if (200..300).contains(&status) => return Ok(()),
                Ok((status, text)) if status == 429 || status >= 500 => {
                    last = format!("HTTP {status}: {text}");
                }
                Ok((status, text)) => {
                    return Err(PushError::Refused {
                        url: self.shown.clone(),
                        status,
                        body: text,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(PushError::Failed {
            url: self.shown.clone(),
            attempts: self.attempts,
            last,
        })
    }

    /// One POST: `(status, start of the answer)`, or why no answer came.
    async fn attempt(&self, body: Bytes) -> Result<(u16, String), String> {
        let req = hyper::Request::post(self.uri.clone())
            .header(hyper::header::CONTENT_ENCODING, "snappy")
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .header(hyper::header::USER_AGENT, "headroom")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| headroom_core::error_chain(&e))?;
            let status = resp.status().as_u16();
            // A receiver's answer is a short message; only its start is read, whatever it sends.
            let mut limited = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES);
            let mut bytes = Vec::new();
            while let Some(frame) = limited.frame().await {
                match frame {
                    Ok(f) => {
                        if let Ok(data) = f.into_data() {
                            bytes.extend_from_slice(&data);
                        }
                    }
                    // Past the limit, or cut: what arrived is enough to quote.
                    Err(_) => break,
                }
            }
            Ok::<_, String>((status, excerpt(&bytes)))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("no answer within {} s", self.timeout.as_secs_f64()))?
    }
}

/// The start of an answer, one line: at most [`EXCERPT_CHARS`] characters, control characters
/// as spaces, so a receiver cannot write to the terminal.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut s: String = text
        .trim()
        .chars()
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.trim().chars().count() > EXCERPT_CHARS {
        s.push('…');
    }
    s
}

/// How the pushes of a sweep went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushReport {
    /// Pushes tried (each a set of new samples, in one or more requests).
    pub pushes: u32,
    /// Pushes that did not land, wholly or in part.
    pub failed: u32,
    /// Samples delivered.
    pub samples: usize,
    /// The first failure.
    pub first_error: Option<PushError>,
    /// The last failure, when there were several.
    pub last_error: Option<PushError>,
    /// The final push was still running when the sweep stopped waiting for it.
    pub abandoned: bool,
}

/// The sweep's pusher: [`Pusher::offer`] hands it every partial result (a cheap, non-blocking
/// call); a task on the runtime pushes each result's samples not yet sent, newest result only
/// when several arrived during one push, so a slow or dead receiver never holds up a level.
pub struct Pusher {
    tx: tokio::sync::watch::Sender<Option<RunResult>>,
    task: tokio::task::JoinHandle<PushReport>,
}

impl Pusher {
    /// Starts the pusher for run `run_id`; `on_first_failure` is called once, from the task,
    /// with the first failure (so the user learns early that the receiver refuses).
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn spawn(
        client: RemoteWriteClient,
        run_id: String,
        on_first_failure: impl Fn(&PushError) + Send + 'static,
    ) -> Pusher {
        let (tx, mut rx) = tokio::sync::watch::channel::<Option<RunResult>>(None);
        let task = tokio::spawn(async move {
            let mut outbox = Outbox::default();
            let mut report = PushReport::default();
            // Ends when the sender is gone and its last value was seen.
            while rx.changed().await.is_ok() {
                let pending = match &*rx.borrow_and_update() {
                    Some(run) => outbox.pending(run, &run_id),
                    None => continue,
                };
                if pending.is_empty() {
                    continue;
                }
                report.pushes += 1;
                match client.push_points(&pending).await {
                    Ok(()) => {
                        outbox.mark_sent(&pending);
                        report.samples += pending.len();
                    }
                    Err((delivered, e)) => {
                        report.samples += delivered;
                        let done = if e.is_refusal() {
                            pending.len()
                        } else {
                            delivered
                        };
                        outbox.mark_sent(&pending[..done]);
                        report.failed += 1;
                        if report.first_error.is_none() {
                            on_first_failure(&e);
                            report.first_error = Some(e);
                        } else {
                            report.last_error = Some(e);
                        }
                    }
                }
            }
            report
        });
        Pusher { tx, task }
    }

    /// Queues `run` for pushing: replaces any result not yet taken up.
    pub fn offer(&self, run: &RunResult) {
        self.tx.send_replace(Some(run.clone()));
    }

    /// Pushes what is left of the last result offered and reports, waiting at most `wait`.
    pub async fn finish(self, wait: Duration) -> PushReport {
        let Pusher { tx, mut task } = self;
        drop(tx);
        match tokio::time::timeout(wait, &mut task).await {
            Ok(Ok(report)) => report,
            // The task panicked, or is still pushing: no report of its own.
            Ok(Err(_)) | Err(_) => {
                task.abort();
                PushReport {
                    abandoned: true,
                    ..PushReport::default()
                }
            }
        }
    }
}

impl PushReport {
    /// One warning for the terminal when any push failed (`None` when all landed): how many,
    /// the first failure and the last.
    pub fn warning(&self, url: &str) -> Option<String> {
        if self.abandoned {
            return Some(format!(
                "push to {url}: the last push was still running when the sweep ended; the \
                 latest levels may be missing from Prometheus (the run directory has them all; \
                 `headroom report RUN_DIR --push-to URL` pushes them again)"
            ));
        }
        let first = self.first_error.as_ref()?;
        let mut s = format!(
            "{} of {} pushes to {url} failed ({} samples landed): {first}",
            self.failed, self.pushes, self.samples
        );
        if let Some(last) = &self.last_error
            && last != first
        {
            s.push_str(&format!("; the last: {last}"));
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback receiver answering each connection with `answers[i]` (the last one repeated)
    /// and returning each request's head and body through the channel.
    async fn receiver(
        answers: Vec<&'static str>,
    ) -> (
        String,
        Arc<AtomicU32>,
        tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
        let hits = Arc::new(AtomicU32::new(0));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let h = hits.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let i = h.fetch_add(1, Ordering::SeqCst) as usize;
                let answer = answers[i.min(answers.len() - 1)];
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Head, then Content-Length bytes of body.
                    let (head, body) = loop {
                        let n = s.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..i]).to_string();
                            let len: usize = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length: ")
                                        .map(|v| v.trim().parse().unwrap())
                                })
                                .unwrap_or(0);
                            while buf.len() < i + 4 + len {
                                let n = s.read(&mut chunk).await.unwrap();
                                buf.extend_from_slice(&chunk[..n]);
                            }
                            break (head, buf[i + 4..i + 4 + len].to_vec());
                        }
                    };
                    let _ = tx.send((head, body));
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, hits, rx)
    }

    fn quick(url: &str) -> RemoteWriteClient {
        RemoteWriteClient::with_limits(url, Duration::from_secs(2), 3, Duration::from_millis(10))
            .unwrap()
    }

    const OK: &str = "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";
    const BUSY: &str =
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy";
    const OUT_OF_ORDER: &str = "HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\nconnection: close\r\n\r\nout of order sample\n";

    #[tokio::test]
    async fn a_push_is_a_snappy_protobuf_post_with_the_specified_headers() {
        let (url, _, mut rx) = receiver(vec![OK]).await;
        let points = super::super::points(&crate::testdata::run(), "r");
        quick(&url).push_points(&points).await.unwrap();
        let (head, body) = rx.recv().await.unwrap();
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("post /api/v1/write http/1.1"), "{head}");
        for h in [
            "content-encoding: snappy",
            "content-type: application/x-protobuf",
            "x-prometheus-remote-write-version: 0.1.0",
        ] {
            assert!(head.contains(h), "{h} missing from {head}");
        }
        let req = proto::decode(&body).unwrap();
        assert_eq!(req, write_requests(&points)[0]);
    }

    #[tokio::test]
    async fn a_5xx_is_retried_and_a_4xx_is_not() {
        let (url, hits, _rx) = receiver(vec![BUSY, BUSY, OK]).await;
        let req = proto::WriteRequest::default();
        quick(&url).push(&req).await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 3);

        let (url, hits, _rx) = receiver(vec![BUSY]).await;
        let e = quick(&url).push(&req).await.unwrap_err();
        assert_eq!(hits.load(Ordering::SeqCst), 3);
        assert!(!e.is_refusal());
        assert!(
            e.to_string()
                .contains("3 attempts failed, the last: HTTP 503: busy"),
            "{e}"
        );

        let (url, hits, _rx) = receiver(vec![OUT_OF_ORDER, OK]).await;
        let e = quick(&url).push(&req).await.unwrap_err();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "{url}: HTTP 400, not retried: out of order sample"
            )),
            "{msg}"
        );
        assert!(msg.contains("a run finished hours ago is refused"), "{msg}");
    }

    #[tokio::test]
    async fn a_dead_receiver_fails_in_bounded_time_and_a_huge_answer_is_cut() {
        let (_held, port) = {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let p = s.local_addr().unwrap().port();
            (s, p)
        };
        let t0 = std::time::Instant::now();
        let e = quick(&format!("http://127.0.0.1:{port}/api/v1/write"))
            .push(&proto::WriteRequest::default())
            .await
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(e.to_string().contains("Connection refused"), "{e}");

        let huge: &'static str = Box::leak(
            format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-length: 1000000\r\n\r\n\x1b[2J{}",
                "x".repeat(999_996)
            )
            .into_boxed_str(),
        );
        let (url, _, _rx) = receiver(vec![huge]).await;
        let e = quick(&url)
            .push(&proto::WriteRequest::default())
            .await
            .unwrap_err();
        let PushError::Refused { body, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(body.chars().count() <= EXCERPT_CHARS + 1, "{}", body.len());
        assert!(!body.contains('\x1b'));
    }

    #[tokio::test]
    async fn the_pusher_sends_new_samples_and_retries_unsent_ones_later() {
        let (url, _, mut rx) = receiver(vec![BUSY, BUSY, BUSY, OK]).await;
        let mut run = crate::testdata::run();
        for (i, l) in run.phases[0].levels.iter_mut().enumerate() {
            l.started_unix_s = 10.0 * i as f64;
        }
        let full = run.clone();
        run.phases[0].levels.truncate(1);
        run.phases[0].capacity = Some(4.0);
        let failures = Arc::new(AtomicU32::new(0));
        let f = failures.clone();
        let pusher = Pusher::spawn(quick(&url), "r".into(), move |_| {
            f.fetch_add(1, Ordering::SeqCst);
        });
        pusher.offer(&run);
        // The first push fails all 3 attempts; wait for them before the next level arrives.
        for _ in 0..3 {
            rx.recv().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        pusher.offer(&full);
        let report = pusher.finish(Duration::from_secs(10)).await;
        let (_, body) = rx.recv().await.unwrap();
        let sent = proto::decode(&body).unwrap();
        let n: usize = sent.timeseries.iter().map(|s| s.samples.len()).sum();
        // All three levels (8 samples each) and the capacity: level 4's went again.
        assert_eq!(n, 25);
        assert_eq!((report.pushes, report.failed, report.samples), (2, 1, 25));
        assert_eq!(failures.load(Ordering::SeqCst), 1);
        let w = report.warning(&url).unwrap();
        assert!(
            w.starts_with(&format!(
                "1 of 2 pushes to {url} failed (25 samples landed)"
            )),
            "{w}"
        );
    }

    #[test]
    fn only_http_urls_are_taken() {
        for (url, why) in [
            ("https://p:9090/api/v1/write", "https is not supported"),
            (
                "p:9090/api/v1/write",
                "expected http://host:port/api/v1/write",
            ),
            ("http://[::1/x", "invalid"),
        ] {
            let Err(e) = RemoteWriteClient::new(url) else {
                panic!("{url} taken")
            };
            assert!(e.to_string().contains(why), "{url}: {e}");
        }
        let c = RemoteWriteClient::new("http://127.0.0.1:9090/api/v1/write?token=t").unwrap();
        assert_eq!(c.shown(), "http://127.0.0.1:9090/api/v1/write");
    }
}
