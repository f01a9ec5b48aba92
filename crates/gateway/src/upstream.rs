//! Upstream HTTP/1.1 connections: one pool of the wire layer ([`headroom_wire::conn`]) per
//! upstream, its connections driven inside the task that serves the client.
//!
//! A pooled client in the usual style runs every upstream connection in a task of its own: two
//! task polls and a cross-task wake-up per SSE chunk, and one write per chunk even when several
//! arrived together. With the wire layer's connections the handler drives the connection while
//! it waits for the response head, and the response body ([`UpstreamBody`]) drives it whenever
//! the client connection's task asks for the next frame, so a chunk is read, decoded and written
//! in one task poll and every chunk already read goes out with the same `writev`.
//!
//! Idle connections wait newest first, at most [`MAX_IDLE`] of them and each at most
//! [`IDLE_TIMEOUT`]. A request an idle connection refused unsent goes to the next connection; one
//! that died with no response head on a reused connection within 10 ms is sent again once
//! ([`headroom_wire::retry::may_resend_written`]). A connection goes back to the pool only after
//! its response body ended cleanly; one dropped earlier (client gone, timeout, error) closes its
//! socket at once, which is how vLLM learns to abort the request.

use bytes::Bytes;
use headroom_wire::conn::{Failure, Pool, PoolLimits, PooledBody};
use http::header::HOST;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use std::sync::Arc;
use std::time::Duration;

/// An upstream response body: drives its connection while polled, gives it back to the pool at
/// a clean end, closes it when dropped earlier.
pub type UpstreamBody = PooledBody;

/// Most idle connections kept per upstream.
pub const MAX_IDLE: usize = 1024;

/// Longest an idle connection is kept: below the 5 s keep-alive timeout of uvicorn (vLLM's and
/// SGLang's HTTP server, `timeout_keep_alive`), so a pooled connection is rarely one the server
/// is closing at that very moment.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Why a request got no response head.
#[derive(Debug)]
pub enum UpstreamError {
    /// No connection could be made (nothing was sent: another upstream may be tried).
    Connect(String),
    /// The request was sent, or the connection failed after it was made.
    Transport(String),
}

/// The idle connections of one upstream and how to make new ones.
#[derive(Debug)]
pub struct Conns {
    pool: Arc<Pool>,
}

impl Conns {
    /// Connections to the upstream whose base URL has this authority (`host[:port]`, port 80
    /// when absent).
    ///
    /// # Errors
    /// The authority does not parse (the message names it).
    pub fn new(authority: &str, connect_timeout: Duration) -> Result<Conns, String> {
        let limits = PoolLimits {
            max_idle: MAX_IDLE,
            idle_timeout: IDLE_TIMEOUT,
            connect_timeout,
        };
        let pool = Pool::for_authority(authority, limits).map_err(|e| format!("upstream {e}"))?;
        Ok(Conns {
            pool: Arc::new(pool),
        })
    }

    /// The `Host` header value requests to this upstream carry.
    pub fn host_header(&self) -> &HeaderValue {
        self.pool.host_header()
    }

    /// Sends `req` (origin-form URI; the `Host` header is set here) and waits for the response
    /// head, driving the connection in the calling task ([`Pool::request`]: a request is sent
    /// at most twice, and twice only in the keep-alive race).
    ///
    /// # Errors
    /// [`UpstreamError::Connect`] when no connection could be made, else
    /// [`UpstreamError::Transport`] with hyper's error and its causes.
    pub async fn request(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        req.headers_mut()
            .insert(HOST, self.pool.host_header().clone());
        match self.pool.request(req).await {
            Ok((link, resp)) => {
                let (parts, body) = resp.into_parts();
                let body = PooledBody::new(body, link, self.pool.clone());
                Ok(Response::from_parts(parts, body))
            }
            Err(Failure::Connect(e)) => Err(UpstreamError::Connect(e.message)),
            Err(Failure::Transport(e)) => Err(UpstreamError::Transport(e)),
        }
    }
}
