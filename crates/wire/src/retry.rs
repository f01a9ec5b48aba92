//! Resending a request that a pooled HTTP/1.1 connection lost: servers close idle keep-alive
//! connections (uvicorn, and so vLLM, after 5 s), and a request written on one just as it closes
//! gets no answer. The connection pool ([`crate::conn::Pool`]) of the load client and the
//! gateway resends such a request, once, on a new connection, when [`may_resend_written`] says
//! the server cannot have taken it.

use std::time::{Duration, Instant};

/// A written request whose reused connection died with no response head is sent again only
/// when the connection died this soon after the send: that is the race of a server closing an
/// idle keep-alive connection as the request leaves (its close was already on the way; on
/// loopback it shows within microseconds, on a LAN within a round trip). A connection that died
/// later had a server that read the request and then dropped it (a crashed worker, a proxy):
/// sending it again would make the server see one request twice. Resending without this bound
/// made a server that read each request and closed 50 ms later see one request up to 14 times.
pub const RESEND_WITHIN: Duration = Duration::from_millis(10);

/// Whether a request written at `sent_at` on a reused connection, whose send failed with `e`,
/// may be sent again: the connection was closed under it ([`closed_before_answer`]) within
/// [`RESEND_WITHIN`], and it was not already resent once (`resent`).
pub fn may_resend_written(e: &hyper::Error, sent_at: Instant, resent: bool) -> bool {
    !resent && sent_at.elapsed() <= RESEND_WITHIN && closed_before_answer(e)
}

/// The same request again: method, URI, version, headers and (cloned, for `Full<Bytes>` a
/// shared) body.
pub fn copy_request<B: Clone>(r: &http::Request<B>) -> http::Request<B> {
    let mut c = http::Request::new(r.body().clone());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.version_mut() = r.version();
    *c.headers_mut() = r.headers().clone();
    c
}

/// Whether a send failed because the connection was closed under it before any answer (end of
/// file, reset or broken pipe), as happens to a pooled connection the server had just closed.
pub fn closed_before_answer(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() || e.is_closed() {
        return true;
    }
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        src = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_copy_carries_everything_the_server_reads() {
        let r = http::Request::builder()
            .method("POST")
            .uri("http://h:1/v1/completions")
            .version(http::Version::HTTP_11)
            .header("content-type", "application/json")
            .header("x-request-id", "a")
            .body("{}".to_string())
            .unwrap();
        let c = super::copy_request(&r);
        assert_eq!(c.method(), r.method());
        assert_eq!(c.uri(), r.uri());
        assert_eq!(c.version(), r.version());
        assert_eq!(c.headers(), r.headers());
        assert_eq!(c.body(), r.body());
    }
}
