//! HTTP/1.1 connections driven inside the request's own task, and the pool that keeps them.
//!
//! hyper's usual client (hyper-util's `legacy::Client`) runs every connection in a task of its
//! own: each body frame is then read and decoded by that task, handed over a channel, and woken
//! up for in the request's task — two task polls and a cross-task wake-up per SSE chunk. Here the
//! connection future (`hyper::client::conn::http1::Connection`) belongs to the request: whoever
//! waits on it (for readiness, the response head, a body frame) drives it ([`drive`],
//! [`poll_driven`]), so a frame is read, decoded and consumed in one task poll; a proxy that
//! forwards the body ([`PooledBody`]) writes every chunk already read with the same `writev`.
//!
//! hyper's channels between the connection and the body still signal each other while they are
//! polled; those wake-ups go to a relay waker that, during a driven poll, only asks for another
//! round of the same poll instead of scheduling the task again. Wake-ups from outside (the
//! socket, a timer) pass through to the task.
//!
//! Idle connections wait in a [`Pool`], newest first, up to a count and an age. Nothing polls an
//! idle connection: one the server closed meanwhile is found out when it is taken again (its
//! first poll reads the end of file, the connection future completes and is dropped at once, so
//! hyper closes its channels and the request fails fast instead of waiting), and the request
//! goes to the next connection, as hyper-util's pooled client does. So does a request written
//! on a reused connection whose close had not been read yet, when the connection died with no
//! response head soon enough ([`crate::retry::may_resend_written`]).
//!
//! One connection carries one request at a time (HTTP/1.1 without pipelining); a stream in
//! flight holds its connection. A connection goes back to the pool only after its response body
//! ended cleanly; one dropped earlier (client gone, timeout, error) closes its socket at once,
//! which is how vLLM learns to abort the request.

use crate::retry::{copy_request, may_resend_written};
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
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

type Conn = Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// Rounds of one [`poll_driven`] call before a wake-up that keeps coming (tokio's cooperative
/// budget asking the task to yield) is handed to the task.
const MAX_ROUNDS: u32 = 8;

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
/// (the server closed an idle keep-alive connection) would leave whatever waits on it waiting
/// for good.
pub struct Driver {
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
/// poll then costs no trip through the connection. Call [`drive`] for a new `f`, or it may not
/// be polled at all.
#[inline]
pub fn poll_driven<T>(
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
    // Borrowed apart, so that the relay waker is lent to the context rather than cloned (an
    // atomic increment and decrement, through the waker's vtable, on every poll).
    let Driver {
        conn, relay, waker, ..
    } = d;
    let mut inner = Context::from_waker(waker);
    for _ in 0..MAX_ROUNDS {
        relay.woken.store(false, Ordering::SeqCst);
        relay.polling.store(true, Ordering::SeqCst);
        let r = round(conn, relay, &mut inner, &mut f);
        relay.polling.store(false, Ordering::SeqCst);
        // Ready: the caller polls again once it has used the value. Pending: a wake-up during
        // the round (read after `polling` is cleared, so none is lost) may mean progress now.
        if r.is_ready() || !relay.woken.load(Ordering::SeqCst) {
            return r;
        }
    }
    // Handed to the task as an outside wake-up, so that its next poll is a real one.
    relay.notified.store(true, Ordering::SeqCst);
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// One round: `f`, the connection, `f` again. A wake-up before the connection's poll is
/// answered by that poll (`f`'s only effect on the connection is to say it wants the next frame,
/// which the connection reads when polled), so only wake-ups from the connection's poll or the
/// last `f` ask for another round.
fn round<T>(
    conn: &mut Option<Conn>,
    relay: &Relay,
    cx: &mut Context<'_>,
    f: &mut impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    loop {
        if let Poll::Ready(v) = f(cx) {
            return Poll::Ready(v);
        }
        let Some(c) = conn.as_mut() else {
            return Poll::Pending;
        };
        relay.woken.store(false, Ordering::SeqCst);
        match Pin::new(c).poll(cx) {
            // Dropping the finished connection closes hyper's channels, so `f` sees the end
            // (an error, or its value) when polled again.
            Poll::Ready(_) => *conn = None,
            Poll::Pending => return f(cx),
        }
    }
}

/// [`poll_driven`] as a future, for a new `f`.
pub async fn drive<T>(d: &mut Driver, mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
    // A new `f` has not been polled yet.
    d.parked = false;
    poll_fn(|cx| poll_driven(d, cx, &mut f)).await
}

/// One HTTP/1.1 connection: the request sender and the connection future.
pub struct Link {
    tx: SendRequest<Full<Bytes>>,
    /// The connection, to be polled through [`drive`] while anything waits on it.
    pub driver: Driver,
    idle_since: Instant,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("open", &self.driver.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// How many idle connections a [`Pool`] keeps, how long, and how long a connect may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Most idle connections kept.
    pub max_idle: usize,
    /// Longest an idle connection is kept; keep it below the server's keep-alive timeout (5 s
    /// for uvicorn, vLLM's and SGLang's HTTP server) so that a pooled connection is rarely one
    /// the server is closing at that very moment.
    pub idle_timeout: Duration,
    /// Longest a TCP connect may take.
    pub connect_timeout: Duration,
}

/// Why a connection could not be made.
#[derive(Debug)]
pub struct ConnectError {
    /// What failed, for a message (`tcp connect error: …`, `HTTP handshake failed: …`).
    pub message: String,
    /// The connect's own error, when the socket could not be opened (the client tells its own
    /// limits, open files and local ports, from the server's refusal by it).
    pub io: Option<std::io::Error>,
}

/// Why a request got no response head.
#[derive(Debug)]
pub enum Failure {
    /// No connection could be made: nothing was sent.
    Connect(ConnectError),
    /// The connection failed, or broke before the answer (the server's side or the network's),
    /// described.
    Transport(String),
}

/// The idle connections to one server (`host:port`) and how to make new ones.
#[derive(Debug)]
pub struct Pool {
    /// Host as `TcpStream::connect` takes it (IPv6 without brackets).
    host: String,
    port: u16,
    /// `Host` header value (the URL's authority).
    host_header: HeaderValue,
    /// Oldest first: `put_back` pushes, `checkout` pops.
    idle: Mutex<Vec<Link>>,
    /// Idle connections thrown away unused: expired, or found closed by the server.
    discarded: AtomicU64,
    limits: PoolLimits,
}

impl Pool {
    /// A pool for `host:port` (IPv6 without brackets), whose requests carry `host_header`.
    pub fn new(host: String, port: u16, host_header: HeaderValue, limits: PoolLimits) -> Pool {
        Pool {
            host,
            port,
            host_header,
            idle: Mutex::new(Vec::new()),
            discarded: AtomicU64::new(0),
            limits,
        }
    }

    /// A pool for the server of this authority (`host[:port]`, port 80 when absent).
    ///
    /// # Errors
    /// The authority does not parse (the message names it).
    pub fn for_authority(authority: &str, limits: PoolLimits) -> Result<Pool, String> {
        let a: http::uri::Authority = authority
            .parse()
            .map_err(|e| format!("authority `{authority}`: {e}"))?;
        let host_header = HeaderValue::from_str(a.as_str())
            .map_err(|e| format!("authority `{authority}`: {e}"))?;
        let host = a.host().trim_start_matches('[').trim_end_matches(']');
        Ok(Pool::new(
            host.to_string(),
            a.port_u16().unwrap_or(80),
            host_header,
            limits,
        ))
    }

    /// The `Host` header value requests to this server carry.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }

    /// The newest idle connection that has not expired.
    fn checkout(&self) -> Option<Link> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(link) = idle.pop() {
            if link.idle_since.elapsed() <= self.limits.idle_timeout && !link.tx.is_closed() {
                return Some(link);
            }
            self.discarded.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Idle connections thrown away so far without carrying a request: expired (idle longer
    /// than the pool keeps them), or closed by the server while they waited.
    pub fn discarded(&self) -> u64 {
        self.discarded.load(Ordering::Relaxed)
    }

    /// Idle connections in the pool (some may have been closed by the server since).
    pub fn idle_len(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    /// Opens a connection and leaves it idle in the pool.
    ///
    /// # Errors
    /// The connect error.
    pub async fn open_spare(&self) -> Result<(), ConnectError> {
        let link = self.connect().await?;
        self.put_back(link);
        Ok(())
    }

    /// Keeps a connection whose exchange ended cleanly (the whole body was read), and drops
    /// expired ones.
    pub fn put_back(&self, mut link: Link) {
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
            .position(|l| now.duration_since(l.idle_since) <= self.limits.idle_timeout)
            .unwrap_or(idle.len());
        let stale: Vec<Link> = idle.drain(..expired).collect();
        if idle.len() < self.limits.max_idle {
            idle.push(link);
        }
        drop(idle);
        self.discarded
            .fetch_add(stale.len() as u64, Ordering::Relaxed);
        drop(stale);
    }

    async fn connect(&self) -> Result<Link, ConnectError> {
        let tcp = tokio::time::timeout(
            self.limits.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| ConnectError {
            message: format!(
                "tcp connect to {}:{} timed out after {} s",
                self.host,
                self.port,
                self.limits.connect_timeout.as_secs_f64()
            ),
            io: None,
        })?
        .map_err(|e| ConnectError {
            message: format!("tcp connect error: {e}"),
            io: Some(e),
        })?;
        // Chunks are small and latency-critical; a failure here only costs latency.
        let _ = tcp.set_nodelay(true);
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| ConnectError {
                message: format!("HTTP handshake failed: {}", describe(&e)),
                io: None,
            })?;
        Ok(Link {
            tx,
            driver: Driver::new(conn),
            idle_since: Instant::now(),
        })
    }

    /// Sends `req` (origin-form URI, `Host` header set) on an idle connection or a new one and
    /// waits for the response head, driving the connection in the calling task. A request an
    /// idle connection refused unsent, or that died with no response head on a reused
    /// connection the server closed as it was sent ([`may_resend_written`]: soon enough, once),
    /// goes to the next connection; a new connection is the last try. So a request is sent at
    /// most twice, and twice only in the keep-alive race, which a server that reads a request
    /// and drops the connection at once looks exactly like; one that drops it later, or on a
    /// fresh connection, gets no second copy.
    ///
    /// # Errors
    /// [`Failure::Connect`] when no connection could be made, else [`Failure::Transport`] with
    /// hyper's error and its causes.
    pub async fn request(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(Link, Response<Incoming>), Failure> {
        self.request_again(req, false).await
    }

    /// As [`Pool::request`]; `resent` says the request was already written once and sent again
    /// ([`Unanswered::Resend`] with `written`): it is not sent a third time.
    ///
    /// # Errors
    /// As [`Pool::request`].
    pub async fn request_again(
        &self,
        mut req: Request<Full<Bytes>>,
        mut resent: bool,
    ) -> Result<(Link, Response<Incoming>), Failure> {
        loop {
            let (mut link, fresh) = match self.checkout() {
                Some(l) => (l, false),
                None => (self.connect().await.map_err(Failure::Connect)?, true),
            };
            let tx = &mut link.tx;
            if let Err(e) = drive(&mut link.driver, |cx| tx.poll_ready(cx)).await {
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
    /// anything: the load client's open-loop pacer sends this way at the intended time, so that
    /// the send does not wait for a runtime worker to pick a task up. One poll of the connection
    /// (with a waker that does nothing; the task that later awaits the answer registers its own)
    /// hands the request to the socket: on loopback and on any link with room in the socket
    /// buffer the whole request is written then; the rest, if any, goes out when the answer is
    /// awaited.
    ///
    /// `None` when no idle connection is ready (none in the pool, or the ones there were
    /// closed): the caller then sends the request the ordinary way, connecting first.
    pub fn send_now(&self, req: Request<Full<Bytes>>) -> Option<Sent> {
        let mut cx = Context::from_waker(Waker::noop());
        while let Some(mut link) = self.checkout() {
            let tx = &mut link.tx;
            // An idle connection is ready at once; one that is not (closed, or still busy) is
            // dropped, as `request` skips it.
            link.driver.parked = false;
            if !matches!(
                poll_driven(&mut link.driver, &mut cx, |cx| tx.poll_ready(cx)),
                Poll::Ready(Ok(()))
            ) {
                self.discarded.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut sent = Sent::new(link, false, req);
            let Sent { link, response, .. } = &mut sent;
            link.driver.parked = false;
            if let Poll::Ready(r) =
                poll_driven(&mut link.driver, &mut cx, |cx| response.as_mut().poll(cx))
            {
                sent.response = Box::pin(std::future::ready(r));
            }
            sent.at = Instant::now();
            return Some(sent);
        }
        None
    }
}

/// What the response head of a sent request resolves to (hyper's `try_send_request`).
type Answer = Result<Response<Incoming>, TrySendError<Request<Full<Bytes>>>>;

/// A request handed to a connection, its answer not yet awaited ([`Pool::send_now`]).
pub struct Sent {
    link: Link,
    /// The connection was opened for this request (not reused from the pool).
    fresh: bool,
    /// A copy of the request, kept when the connection was reused: a connection the server had
    /// just closed may take the request and die without an answer; the copy then goes to
    /// another connection.
    backup: Option<Request<Full<Bytes>>>,
    response: Pin<Box<dyn Future<Output = Answer> + Send>>,
    /// When the request was handed to the connection.
    pub at: Instant,
}

/// Why a sent request got no response head.
pub enum Unanswered {
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
    pub async fn answer(self, resent: bool) -> Result<(Link, Response<Incoming>), Unanswered> {
        let Sent {
            mut link,
            fresh,
            backup,
            mut response,
            at,
        } = self;
        match drive(&mut link.driver, |cx| response.as_mut().poll(cx)).await {
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

/// A response body that drives its connection while it is polled, and gives the connection
/// back to its pool when it has ended cleanly. Dropping it earlier closes the connection (the
/// server sees the client leave).
#[derive(Debug)]
pub struct PooledBody {
    body: Incoming,
    link: Option<Link>,
    pool: Arc<Pool>,
}

impl PooledBody {
    /// `body`, read over `link`, which goes back to `pool` at the end. A body that is empty
    /// already gives the connection back at once.
    pub fn new(body: Incoming, link: Link, pool: Arc<Pool>) -> PooledBody {
        let mut b = PooledBody {
            body,
            link: Some(link),
            pool,
        };
        b.release_if_ended();
        b
    }

    /// Gives the connection back once the body has ended.
    fn release_if_ended(&mut self) {
        if self.body.is_end_stream()
            && let Some(link) = self.link.take()
        {
            self.pool.put_back(link);
        }
    }
}

impl Body for PooledBody {
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
                    this.pool.put_back(link);
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

/// An error and its sources, joined with `: ` ([`headroom_core::error_chain`]).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    headroom_core::error_chain(e)
}
