//! HTTP/1.1 connections driven inside the request's own task, and the pool that keeps them.
//!
//! hyper's usual client spawns one task per connection: every body frame then costs two task
//! wake-ups (the connection task reads and decodes it, the request task consumes it). Here the
//! request's task polls the connection itself ([`drive`]): the connection future
//! (`hyper::client::conn::http1::Connection`) and the response or body are polled together, so a
//! frame is read, decoded and consumed in one task poll. The wake-ups that hyper's internal
//! channels send while this poll is under way (the body saying it wants the next frame, the
//! connection saying it produced one) are absorbed by a relay waker and turned into another
//! round of the same poll, instead of re-scheduling the task for a poll that would find
//! nothing new; wake-ups from outside (the socket, the timer) pass through to the task. Nothing
//! polls an idle connection; a
//! connection the server closed while it sat in the pool is noticed when it is taken out (its
//! first poll reads the EOF), and a request that such a connection refused unsent goes to the
//! next one, as hyper-util's pooled client does; so does a request sent on a reused connection
//! whose close had not been read yet, when the connection dies with no response head.
//!
//! One connection carries one request at a time (HTTP/1.1 without pipelining); a stream in
//! flight holds its connection, so there are as many connections as streams.

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use headroom_core::retry::{copy_request, may_resend_written};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// A connection's future and whether it has ended (it must not be polled after that).
pub(crate) struct ConnDriver {
    /// The connection future; dropped as soon as it completes, because hyper closes the request
    /// and response channels only when the dispatcher inside it is dropped: a completed but kept
    /// connection (the server closed an idle keep-alive connection) would leave a request on it
    /// waiting for an answer that can never come.
    conn: Option<Connection<TokioIo<TcpStream>, Full<Bytes>>>,
    relay: Arc<Relay>,
    /// `relay` as a waker (made once).
    waker: Waker,
}

/// The waker given to the connection and to what waits on it: while [`poll_driven`] runs, a
/// wake-up only marks that another round is needed; otherwise it wakes the task.
struct Relay {
    task: AtomicWaker,
    polling: AtomicBool,
    woken: AtomicBool,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
        } else {
            self.task.wake();
        }
    }
}

/// Rounds of one [`poll_driven`] call before a wake-up that keeps coming (tokio's cooperative
/// budget asking the task to yield) is passed to the task.
const MAX_ROUNDS: u32 = 8;

impl ConnDriver {
    fn new(conn: Connection<TokioIo<TcpStream>, Full<Bytes>>) -> ConnDriver {
        let relay = Arc::new(Relay {
            task: AtomicWaker::new(),
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        });
        ConnDriver {
            conn: Some(conn),
            waker: Waker::from(relay.clone()),
            relay,
        }
    }
}

/// One HTTP/1.1 connection: the request sender and the connection future.
pub(crate) struct Link {
    tx: SendRequest<Full<Bytes>>,
    /// The connection, to be polled through [`drive`] while anything waits on it.
    pub(crate) conn: ConnDriver,
    idle_since: Instant,
}

/// Polls `f` with `cx` while driving `conn` in the same task, until `f` is ready or both wait.
///
/// Everything `f` can wait on (the response head, a body frame, readiness for a request) is
/// produced by the connection future, so `f` is polled again after every poll of the connection.
/// After the connection ends, `f` sees the end (hyper closes the channels with an error).
pub(crate) fn poll_driven<T>(
    conn: &mut ConnDriver,
    cx: &mut Context<'_>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let relay = conn.relay.clone();
    relay.task.register(cx.waker());
    let waker = conn.waker.clone();
    let mut inner = Context::from_waker(&waker);
    for _ in 0..MAX_ROUNDS {
        relay.woken.store(false, Ordering::SeqCst);
        relay.polling.store(true, Ordering::SeqCst);
        let r = poll_round(conn, &mut inner, &mut f);
        relay.polling.store(false, Ordering::SeqCst);
        // Ready: the caller polls again as soon as it has used the value, so a wake-up from
        // this round needs no other action. Pending: a wake-up during the round (checked after
        // `polling` is cleared, so none is lost) means there may be progress to make now.
        if r.is_ready() || !relay.woken.load(Ordering::SeqCst) {
            return r;
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// One round: `f`, the connection, `f` again.
fn poll_round<T>(
    conn: &mut ConnDriver,
    cx: &mut Context<'_>,
    f: &mut impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    loop {
        if let Poll::Ready(v) = f(cx) {
            return Poll::Ready(v);
        }
        let Some(c) = conn.conn.as_mut() else {
            return Poll::Pending;
        };
        match Pin::new(c).poll(cx) {
            // Dropping the finished connection closes hyper's channels, so `f` sees the end
            // (an error, or its value) when polled again.
            Poll::Ready(_) => conn.conn = None,
            Poll::Pending => return f(cx),
        }
    }
}

/// [`poll_driven`] as a future.
pub(crate) async fn drive<T>(
    conn: &mut ConnDriver,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> T {
    poll_fn(|cx| poll_driven(conn, cx, &mut f)).await
}

/// Where to connect and what to keep.
pub(crate) struct Pool {
    /// Host name or address as `TcpStream::connect` takes it (IPv6 without brackets).
    host: String,
    port: u16,
    /// `Host` header value (the URL's authority).
    pub(crate) host_header: HeaderValue,
    idle: Mutex<Vec<Link>>,
    /// Idle connections thrown away unused: expired, or found closed by the server.
    discarded: AtomicU64,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
}

impl Pool {
    /// A pool for `host:port`; keeps at most `max_idle` idle connections, each at most
    /// `idle_timeout`.
    pub(crate) fn new(
        host: String,
        port: u16,
        host_header: HeaderValue,
        max_idle: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
    ) -> Pool {
        Pool {
            host,
            port,
            host_header,
            idle: Mutex::new(Vec::new()),
            discarded: AtomicU64::new(0),
            max_idle,
            idle_timeout,
            connect_timeout,
        }
    }

    /// The most recently used idle connection that has not expired.
    fn checkout(&self) -> Option<Link> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(link) = idle.pop() {
            if link.idle_since.elapsed() <= self.idle_timeout && !link.tx.is_closed() {
                return Some(link);
            }
            self.discarded.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Idle connections thrown away so far without carrying a request: expired (idle longer
    /// than the pool keeps them), or closed by the server while they waited.
    pub(crate) fn discarded(&self) -> u64 {
        self.discarded.load(Ordering::Relaxed)
    }

    /// Idle connections in the pool (some may have been closed by the server since).
    pub(crate) fn idle_len(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    /// Opens a connection and leaves it idle in the pool.
    ///
    /// # Errors
    /// The connect error, described.
    pub(crate) async fn open_spare(&self) -> Result<(), Failure> {
        let link = self.connect().await?;
        self.put_back(link);
        Ok(())
    }

    /// Returns a connection whose exchange ended cleanly (the whole body was read).
    pub(crate) fn put_back(&self, mut link: Link) {
        if link.conn.conn.is_none() || link.tx.is_closed() {
            return;
        }
        link.idle_since = Instant::now();
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(link);
        }
    }

    async fn connect(&self) -> Result<Link, Failure> {
        let tcp = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| {
            Failure::Transport(format!(
                "tcp connect to {}:{} timed out after {} s",
                self.host,
                self.port,
                self.connect_timeout.as_secs_f64()
            ))
        })?
        .map_err(|e| match super::fd_limit::client_limit(&e) {
            Some(what) => Failure::ClientLimit(super::fd_limit::limit_message(what, &e)),
            None => Failure::Transport(format!("tcp connect error: {e}")),
        })?;
        // Chunks are small and latency-critical; a failure here only costs latency.
        let _ = tcp.set_nodelay(true);
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| Failure::Transport(format!("HTTP handshake failed: {}", describe(&e))))?;
        Ok(Link {
            tx,
            conn: ConnDriver::new(conn),
            idle_since: Instant::now(),
        })
    }

    /// Sends `req` (origin-form URI, `Host` header set) on an idle connection or a new one and
    /// waits for the response head, driving the connection in this task. A request that an idle
    /// connection refused before sending it (the server had closed it) goes to the next
    /// connection; a new connection is the last try.
    ///
    /// # Errors
    /// The connect or transport error, described ([`Failure`]).
    pub(crate) async fn request(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(Link, Response<Incoming>), Failure> {
        self.request_again(req, false).await
    }

    /// As [`Pool::request`]; `resent` says the request was already written once and sent again
    /// ([`Unanswered::Resend`] with `written`): it is not sent a third time.
    pub(crate) async fn request_again(
        &self,
        mut req: Request<Full<Bytes>>,
        mut resent: bool,
    ) -> Result<(Link, Response<Incoming>), Failure> {
        loop {
            let (mut link, fresh) = match self.checkout() {
                Some(l) => (l, false),
                None => (self.connect().await?, true),
            };
            let tx = &mut link.tx;
            if let Err(e) = drive(&mut link.conn, |cx| tx.poll_ready(cx)).await {
                if fresh {
                    return Err(Failure::Transport(describe(&e)));
                }
                self.discarded.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match Sent::new(link, fresh, req).answer(resent).await {
                Ok(r) => return Ok(r),
                Err(Unanswered::Resend { req: r, written }) => {
                    resent |= written;
                    req = *r;
                }
                Err(Unanswered::Failed(e)) => return Err(Failure::Transport(e)),
            }
        }
    }

    /// Writes `req` onto an idle connection now, from the calling thread, without waiting for
    /// anything: the open-loop pacer sends this way at the intended time, so that the send does
    /// not wait for a runtime worker to pick a task up. One poll of the connection (with a waker
    /// that does nothing; the task that later awaits the answer registers its own) hands the
    /// request to the socket: on loopback and on any link with room in the socket buffer the
    /// whole request is written then; the rest, if any, goes out when the answer is awaited.
    ///
    /// `None` when no idle connection is ready (none in the pool, or the ones there were
    /// closed): the caller then sends the request the ordinary way, connecting first.
    pub(crate) fn send_now(&self, req: Request<Full<Bytes>>) -> Option<Sent> {
        let mut cx = Context::from_waker(Waker::noop());
        while let Some(mut link) = self.checkout() {
            let tx = &mut link.tx;
            // An idle connection is ready at once; one that is not (closed, or still busy) is
            // dropped, as `request` skips it.
            if !matches!(
                poll_driven(&mut link.conn, &mut cx, |cx| tx.poll_ready(cx)),
                Poll::Ready(Ok(()))
            ) {
                self.discarded.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut sent = Sent::new(link, false, req);
            let Sent { link, response, .. } = &mut sent;
            if let Poll::Ready(r) =
                poll_driven(&mut link.conn, &mut cx, |cx| response.as_mut().poll(cx))
            {
                sent.response = Box::pin(std::future::ready(r));
            }
            sent.at = Instant::now();
            return Some(sent);
        }
        None
    }
}

/// Why a request got no connection or no answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// The connection failed, or broke before the answer (the server's side or the network's),
    /// described.
    Transport(String),
    /// The client's own limit (open files, local ports) refused the connect: the server never
    /// saw the request ([`super::fd_limit::client_limit`]).
    ClientLimit(String),
}

impl From<Failure> for String {
    fn from(f: Failure) -> String {
        match f {
            Failure::Transport(m) | Failure::ClientLimit(m) => m,
        }
    }
}

/// What the response head of a sent request resolves to (hyper's `try_send_request`).
type Answer = Result<Response<Incoming>, TrySendError<Request<Full<Bytes>>>>;

/// A request handed to a connection, its answer not yet awaited ([`Pool::send_now`]).
pub(crate) struct Sent {
    link: Link,
    /// The connection was opened for this request (not reused from the pool).
    fresh: bool,
    /// A copy of the request, kept when the connection was reused: a connection the server had
    /// just closed may take the request and die without an answer; the copy then goes to
    /// another connection.
    backup: Option<Request<Full<Bytes>>>,
    response: Pin<Box<dyn Future<Output = Answer> + Send>>,
    /// When the request was handed to the connection.
    pub(crate) at: Instant,
}

/// Why a sent request got no response head.
pub(crate) enum Unanswered {
    /// The server never took the request (the connection was closed under it): send it again.
    Resend {
        /// The request.
        req: Box<Request<Full<Bytes>>>,
        /// It had been written (the connection died at once, with no answer), not refused
        /// unwritten by a connection already known closed.
        written: bool,
    },
    /// A transport error, described.
    Failed(String),
}

impl Sent {
    /// Hands `req` to `link`, which must be ready (`poll_ready`); nothing is polled yet.
    fn new(mut link: Link, fresh: bool, req: Request<Full<Bytes>>) -> Sent {
        // The body is a refcounted `Bytes`: the copy is cheap.
        let backup = (!fresh).then(|| copy_request(&req));
        let response = Box::pin(link.tx.try_send_request(req));
        Sent {
            link,
            fresh,
            backup,
            response,
            at: Instant::now(),
        }
    }

    /// Waits for the response head, driving the connection in this task. `resent`: the request
    /// was already written and sent again once, so it is not resent a second time
    /// ([`may_resend_written`]).
    ///
    /// # Errors
    /// [`Unanswered`]: the request to send again, or the transport error.
    pub(crate) async fn answer(
        self,
        resent: bool,
    ) -> Result<(Link, Response<Incoming>), Unanswered> {
        let Sent {
            mut link,
            fresh,
            backup,
            mut response,
            at,
        } = self;
        match drive(&mut link.conn, |cx| response.as_mut().poll(cx)).await {
            Ok(resp) => Ok((link, resp)),
            Err(mut e) => match (e.take_message(), backup) {
                (Some(unsent), _) if !fresh => Err(Unanswered::Resend {
                    req: Box::new(unsent),
                    written: false,
                }),
                // No response head came back on a reused connection that the server closed as
                // the request left: the server never took it, so it goes to the next one.
                (None, Some(copy)) if may_resend_written(e.error(), at, resent) => {
                    Err(Unanswered::Resend {
                        req: Box::new(copy),
                        written: true,
                    })
                }
                _ => Err(Unanswered::Failed(describe(e.error()))),
            },
        }
    }
}

/// An error and its sources, joined with `: ` ([`headroom_core::error_chain`]).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    headroom_core::error_chain(e)
}
