//! Upstream HTTP/1.1 connections, driven inside the task that serves the client.
//!
//! A pooled client in the usual style (hyper-util's `legacy::Client`) runs every upstream
//! connection in a task of its own: each SSE chunk is then read and decoded by that task, handed
//! over a channel, and woken up for in the client connection's task, which writes it — two task
//! polls and a cross-task wake-up per chunk, and one write per chunk even when several arrived
//! together. Here the connection future (`hyper::client::conn::http1::Connection`) belongs to
//! the request: the handler drives it while it waits for the response head, and the response
//! body ([`UpstreamBody`]) drives it whenever the client connection's task asks for the next
//! frame ([`poll_driven`]). A chunk is read, decoded and written in one task poll, and every
//! chunk already read is written with the same `writev`.
//!
//! hyper's channels between the connection and the body still signal each other while they are
//! polled; those wake-ups go to a relay waker ([`Relay`]) that, during a driven poll, only asks
//! for another round of the same poll instead of scheduling the task again. Wake-ups from
//! outside (the socket, a timer) pass through to the task.
//!
//! Idle connections wait in a per-upstream pool ([`Conns`]), newest first, at most
//! [`MAX_IDLE`] of them and each at most [`IDLE_TIMEOUT`]. Nothing polls an idle connection: one
//! the server closed meanwhile is found out when it is taken again (its first poll reads the
//! end of file, the connection future completes and is dropped at once, so hyper closes its
//! channels and the request fails fast instead of waiting), and the request goes to the next
//! connection. A request sent on a reused connection whose close had not been read yet, and
//! that died with no response head within 10 ms, is sent again once on another connection: the
//! server most likely closed the connection before it took the request
//! ([`headroom_core::retry::may_resend_written`]).
//!
//! A connection goes back to the pool only after its response body ended cleanly; one dropped
//! earlier (client gone, timeout, error) closes its socket at once, which is how vLLM learns to
//! abort the request.

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use headroom_core::retry::{copy_request, may_resend_written};
use http::header::HOST;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Most idle connections kept per upstream.
pub const MAX_IDLE: usize = 1024;

/// Longest an idle connection is kept: below the 5 s keep-alive timeout of uvicorn (vLLM's and
/// SGLang's HTTP server, `timeout_keep_alive`), so a pooled connection is rarely one the server
/// is closing at that very moment.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Rounds of one [`poll_driven`] call before a wake-up that keeps coming (tokio's cooperative
/// budget asking the task to yield) is handed to the task.
const MAX_ROUNDS: u32 = 8;

type Conn = Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// Why a request got no response head.
#[derive(Debug)]
pub enum UpstreamError {
    /// No connection could be made (nothing was sent: another upstream may be tried).
    Connect(String),
    /// The request was sent, or the connection failed after it was made.
    Transport(String),
}

/// The waker handed to the connection and to the channels hyper polls inside it: while a
/// driven poll runs, a wake-up only marks that another round is needed (`woken`); otherwise it
/// marks that something happened since the last poll (`notified`) and wakes the task that last
/// drove the connection.
struct Relay {
    task: AtomicWaker,
    polling: AtomicBool,
    woken: AtomicBool,
    notified: AtomicBool,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
        } else {
            self.notified.store(true, Ordering::SeqCst);
            self.task.wake();
        }
    }
}

/// A connection future, dropped as soon as it completes: hyper closes the request and body
/// channels only when the dispatcher inside it is dropped, so a completed but kept connection
/// would leave whatever waits on it waiting for good.
struct Driver {
    conn: Option<Conn>,
    relay: Arc<Relay>,
    /// `relay` as a waker, made once.
    waker: Waker,
    /// The last driven poll ended with everything waiting: until a wake-up arrives, polling
    /// again cannot make progress.
    parked: bool,
}

impl Driver {
    fn new(conn: Conn) -> Driver {
        let relay = Arc::new(Relay {
            task: AtomicWaker::new(),
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            notified: AtomicBool::new(false),
        });
        Driver {
            conn: Some(conn),
            waker: Waker::from(relay.clone()),
            relay,
            parked: false,
        }
    }
}

/// Polls `f` while driving the connection in the same task, until `f` is ready or both wait.
///
/// Everything `f` waits on (readiness for a request, the response head, a body frame) is made
/// by the connection future, so `f` is polled again after each poll of the connection; once the
/// connection has ended, `f` sees the end (hyper's channels report it). Every waker registered
/// inside is the relay, so when the last call ended with both waiting and no wake-up has come
/// since, nothing is polled: hyper's server asks its body once more after each flush, and that
/// poll then costs no trip through the connection.
fn poll_driven<T>(
    d: &mut Driver,
    cx: &mut Context<'_>,
    f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    d.relay.task.register(cx.waker());
    // After `register`, so that a wake-up from now on reaches this task.
    let notified = d.relay.notified.swap(false, Ordering::SeqCst);
    if d.parked && !notified {
        return Poll::Pending;
    }
    let r = rounds(d, cx, f);
    d.parked = r.is_pending();
    r
}

fn rounds<T>(
    d: &mut Driver,
    cx: &mut Context<'_>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let waker = d.waker.clone();
    let mut inner = Context::from_waker(&waker);
    for _ in 0..MAX_ROUNDS {
        d.relay.woken.store(false, Ordering::SeqCst);
        d.relay.polling.store(true, Ordering::SeqCst);
        let r = round(d, &mut inner, &mut f);
        d.relay.polling.store(false, Ordering::SeqCst);
        // Ready: the caller polls again once it has used the value. Pending: a wake-up during
        // the round (read after `polling` is cleared, so none is lost) may mean progress now.
        if r.is_ready() || !d.relay.woken.load(Ordering::SeqCst) {
            return r;
        }
    }
    // Handed to the task as an outside wake-up, so that its next poll is a real one.
    d.relay.notified.store(true, Ordering::SeqCst);
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// One round: `f`, the connection, `f` again. A wake-up before the connection's poll is
/// answered by that poll (`f`'s only effect on the connection is to say it wants the next frame,
/// which the connection reads when polled), so only wake-ups from the connection's poll or the
/// last `f` ask for another round.
fn round<T>(
    d: &mut Driver,
    cx: &mut Context<'_>,
    f: &mut impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    loop {
        if let Poll::Ready(v) = f(cx) {
            return Poll::Ready(v);
        }
        let Some(c) = d.conn.as_mut() else {
            return Poll::Pending;
        };
        d.relay.woken.store(false, Ordering::SeqCst);
        match Pin::new(c).poll(cx) {
            Poll::Ready(_) => d.conn = None,
            Poll::Pending => return f(cx),
        }
    }
}

async fn drive<T>(d: &mut Driver, mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
    // A new `f` has not been polled yet.
    d.parked = false;
    poll_fn(|cx| poll_driven(d, cx, &mut f)).await
}

/// One HTTP/1.1 connection to an upstream: the request sender and the connection future.
pub struct Link {
    tx: SendRequest<Full<Bytes>>,
    driver: Driver,
    idle_since: Instant,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("open", &self.driver.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// The idle connections of one upstream and how to make new ones.
#[derive(Debug)]
pub struct Conns {
    /// Host as `TcpStream::connect` takes it (IPv6 without brackets).
    host: String,
    port: u16,
    /// `Host` header value (the base URL's authority).
    host_header: HeaderValue,
    /// Oldest first: `put_back` pushes, `checkout` pops.
    idle: Mutex<Vec<Link>>,
    connect_timeout: Duration,
}

impl Conns {
    /// Connections to the upstream whose base URL has this authority (`host[:port]`, port 80
    /// when absent).
    ///
    /// # Errors
    /// The authority does not parse (the message names it).
    pub fn new(authority: &str, connect_timeout: Duration) -> Result<Conns, String> {
        let a: http::uri::Authority = authority
            .parse()
            .map_err(|e| format!("upstream authority `{authority}`: {e}"))?;
        let host_header = HeaderValue::from_str(a.as_str())
            .map_err(|e| format!("upstream authority `{authority}`: {e}"))?;
        Ok(Conns {
            host: a
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port: a.port_u16().unwrap_or(80),
            host_header,
            idle: Mutex::new(Vec::new()),
            connect_timeout,
        })
    }

    /// The `Host` header value requests to this upstream carry.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }

    /// The newest idle connection that has not expired.
    fn checkout(&self) -> Option<Link> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(link) = idle.pop() {
            if link.idle_since.elapsed() <= IDLE_TIMEOUT && !link.tx.is_closed() {
                return Some(link);
            }
        }
        None
    }

    /// Keeps a connection whose exchange ended cleanly, and drops expired ones.
    fn put_back(&self, mut link: Link) {
        if link.driver.conn.is_none() || link.tx.is_closed() {
            return;
        }
        // Nobody waits on an idle connection: a wake-up from its socket must not reach the task
        // that used it last.
        drop(link.driver.relay.task.take());
        link.driver.parked = false;
        let now = Instant::now();
        link.idle_since = now;
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let expired = idle
            .iter()
            .position(|l| now.duration_since(l.idle_since) <= IDLE_TIMEOUT)
            .unwrap_or(idle.len());
        let stale: Vec<Link> = idle.drain(..expired).collect();
        if idle.len() < MAX_IDLE {
            idle.push(link);
        }
        drop(idle);
        drop(stale);
    }

    async fn connect(&self) -> Result<Link, UpstreamError> {
        let tcp = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| {
            UpstreamError::Connect(format!(
                "tcp connect timed out after {:.3} s",
                self.connect_timeout.as_secs_f64()
            ))
        })?
        .map_err(|e| UpstreamError::Connect(format!("tcp connect error: {e}")))?;
        // Chunks are small and latency-critical; a failure here only costs latency.
        let _ = tcp.set_nodelay(true);
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| {
                UpstreamError::Connect(format!("HTTP handshake failed: {}", describe(&e)))
            })?;
        Ok(Link {
            tx,
            driver: Driver::new(conn),
            idle_since: Instant::now(),
        })
    }

    /// Sends `req` (origin-form URI; the `Host` header is set here) on an idle connection or a
    /// new one and waits for the response head, driving the connection in the calling task.
    /// A request an idle connection refused unsent, or that died with no response head on a
    /// reused connection the server closed as it was sent ([`may_resend_written`]: within
    /// 10 ms, once), goes to the next connection; a new connection is the last try. So a
    /// request is sent at most twice, and twice only when the upstream closed a reused
    /// connection within 10 ms of the send without answering: the keep-alive race, which an
    /// upstream that reads a request and drops the connection at once looks exactly like. One
    /// that drops it later, or on a fresh connection, gets no second copy.
    ///
    /// # Errors
    /// [`UpstreamError::Connect`] when no connection could be made, else
    /// [`UpstreamError::Transport`] with hyper's error and its causes.
    pub async fn request(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        req.headers_mut().insert(HOST, self.host_header.clone());
        // The request was written once and sent again already (at most once).
        let mut resent = false;
        loop {
            let (mut link, fresh) = match self.checkout() {
                Some(l) => (l, false),
                None => (self.connect().await?, true),
            };
            let tx = &mut link.tx;
            if let Err(e) = drive(&mut link.driver, |cx| tx.poll_ready(cx)).await {
                if fresh {
                    return Err(UpstreamError::Transport(describe(&e)));
                }
                continue;
            }
            // The body is a shared `Bytes`: keeping a copy for a resend costs no copy of it.
            let backup = (!fresh).then(|| copy_request(&req));
            let sent_at = Instant::now();
            let mut sent = pin!(link.tx.try_send_request(req));
            match drive(&mut link.driver, |cx| sent.as_mut().poll(cx)).await {
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    let body = UpstreamBody {
                        body,
                        link: Some(link),
                        conns: self.clone(),
                    };
                    let mut body = body;
                    body.release_if_ended();
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut e) => match (e.take_message(), backup) {
                    (Some(unsent), _) if !fresh => req = unsent,
                    // Written, then the connection died: resent only when that was the race
                    // with the upstream closing it idle, never when it read the request.
                    (None, Some(copy)) if may_resend_written(e.error(), sent_at, resent) => {
                        resent = true;
                        req = copy;
                    }
                    _ => return Err(UpstreamError::Transport(describe(e.error()))),
                },
            }
        }
    }
}

/// An upstream response body that drives its connection while it is polled, and gives the
/// connection back to the pool when it has ended cleanly. Dropping it earlier closes the
/// connection (the upstream sees the client leave).
#[derive(Debug)]
pub struct UpstreamBody {
    body: Incoming,
    link: Option<Link>,
    conns: Arc<Conns>,
}

impl UpstreamBody {
    /// Gives the connection back once the body has ended.
    fn release_if_ended(&mut self) {
        if self.body.is_end_stream()
            && let Some(link) = self.link.take()
        {
            self.conns.put_back(link);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let body = &mut this.body;
        let r = match this.link.as_mut() {
            Some(link) => poll_driven(&mut link.driver, cx, |cx| {
                Pin::new(&mut *body).poll_frame(cx)
            }),
            None => Pin::new(body).poll_frame(cx),
        };
        match &r {
            Poll::Ready(None) => {
                if let Some(link) = this.link.take() {
                    this.conns.put_back(link);
                }
            }
            Poll::Ready(Some(Ok(_))) => this.release_if_ended(),
            Poll::Ready(Some(Err(_))) => this.link = None,
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An error and its causes, joined with `: ` ([`headroom_core::error_chain`]).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    headroom_core::error_chain(e)
}
