//! The client's own limits: open files and local ports.
//!
//! Every stream in flight holds a connection, and a connection is a file descriptor. With the
//! common default soft `RLIMIT_NOFILE` of 1,024 (or less), an open-loop level of a few hundred
//! requests per second ran out of descriptors, and the failed connects were counted as the
//! server's transport errors. So the soft limit is raised to the hard limit once, when the first
//! [`super::Target`] is made, the connection pool is sized to it, and a connect that fails for
//! the client's own reasons ([`client_limit`]) is an [`headroom_core::Outcome::ClientLimit`],
//! never the server's error.

pub use headroom_core::fd_limit::{FdLimit, fd_limit};

/// Idle connections the pool may keep under the soft limit `soft`: a quarter of it, so idle
/// connections never take the descriptors that streams in flight (and an in-process engine twin,
/// which holds the other end of each) need; at most `configured`.
pub(crate) fn idle_cap(configured: usize, soft: u64) -> usize {
    let quarter = usize::try_from(soft / 4).unwrap_or(usize::MAX);
    configured.min(quarter.max(1))
}

/// What the client ran out of, when `e` is one of its own limits: `EMFILE` (this process's open
/// files), `ENFILE` (the system's), `EADDRNOTAVAIL` (local ports, on connect). `None` for every
/// error that can be the server's or the network's.
pub fn client_limit(e: &std::io::Error) -> Option<&'static str> {
    #[cfg(unix)]
    match e.raw_os_error() {
        Some(libc::EMFILE) => Some("file descriptors (EMFILE: this process's open-file limit)"),
        Some(libc::ENFILE) => Some("file descriptors (ENFILE: the system's open-file table)"),
        Some(libc::EADDRNOTAVAIL) => Some("local ports (EADDRNOTAVAIL)"),
        _ => None,
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        None
    }
}

/// The message of a request that failed on the client's limit `what` with `e`.
pub(crate) fn limit_message(what: &str, e: &std::io::Error) -> String {
    let l = fd_limit();
    let shown = |v: u64| {
        if v == u64::MAX {
            "unlimited".to_string()
        } else {
            v.to_string()
        }
    };
    format!(
        "the client ran out of {what} before sending: {e}; the request never reached the server (soft RLIMIT_NOFILE {}, hard {})",
        shown(l.soft),
        shown(l.hard)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_limits_are_told_from_the_servers_failures() {
        #[cfg(unix)]
        for (code, word) in [
            (libc::EMFILE, "EMFILE"),
            (libc::ENFILE, "ENFILE"),
            (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
        ] {
            let e = std::io::Error::from_raw_os_error(code);
            assert!(client_limit(&e).is_some_and(|w| w.contains(word)), "{e}");
            assert!(limit_message(client_limit(&e).unwrap(), &e).contains("RLIMIT_NOFILE"));
        }
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
        ] {
            assert_eq!(client_limit(&std::io::Error::from(kind)), None);
        }
        assert_eq!(idle_cap(8192, 1024), 256);
        assert_eq!(idle_cap(8192, u64::MAX), 8192);
        assert_eq!(idle_cap(8192, 2), 1);
        let l = fd_limit();
        assert!(l.soft >= l.before && l.soft <= l.hard, "{l:?}");
        assert_eq!(fd_limit(), l);
    }
}
