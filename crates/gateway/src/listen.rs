//! The listener's own limits: file descriptors, a connection cap and back-off on accept errors.
//!
//! A proxy holds two descriptors per client connection (the client's and, pooled, one
//! upstream), so the fd limit is what bounds it. At start the soft `RLIMIT_NOFILE` is raised to
//! the hard limit ([`raise_fd_limit`]; many systems start processes at a soft 1024), and client
//! connections are capped ([`default_max_connections`]: half of it, less a reserve for upstream
//! connects, the listener and the runtime) so the gateway runs out of connection slots — and
//! leaves later clients in the kernel's accept queue — before it runs out of descriptors.
//!
//! When `accept` fails anyway (EMFILE/ENFILE because something else holds descriptors, ENOBUFS,
//! ENOMEM), retrying at once spins a core on the same error while nothing frees up; the loop
//! sleeps instead, 1 ms doubling to 1 s ([`Backoff`], the practice of hyper's old
//! `AddrIncoming` and of tokio-based servers), and the first error of a run is logged.
//! Errors that concern one connection only (it was reset or aborted before it was accepted)
//! are skipped without a pause.

use std::io;
use std::time::Duration;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (once per process, as the sweep client
/// does: [`headroom_core::fd_limit::fd_limit`]); returns the soft limit in force after (`None`
/// where it cannot be read or is unlimited).
pub fn raise_fd_limit() -> Option<u64> {
    Some(headroom_core::fd_limit::fd_limit().soft).filter(|&s| s != u64::MAX)
}

/// Connection cap for a soft fd limit: two descriptors per connection after a reserve of a
/// quarter of the limit, at most 64; without a known limit, 4096.
pub fn default_max_connections(fd_limit: Option<u64>) -> usize {
    let Some(n) = fd_limit else { return 4096 };
    let reserve = (n / 4).min(64);
    usize::try_from(n.saturating_sub(reserve) / 2)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// Whether an accept error concerns only the connection being accepted (retry at once) rather
/// than the listener or the process (back off).
pub fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Growing pause between failed accepts: 1 ms, doubling, at most 1 s; reset by a success.
#[derive(Debug, Default)]
pub struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    /// Shortest pause.
    pub const MIN: Duration = Duration::from_millis(1);
    /// Longest pause.
    pub const MAX: Duration = Duration::from_secs(1);

    /// The pause after one more failure, and whether it starts a run (to log once per run).
    pub fn fail(&mut self) -> (Duration, bool) {
        let first = self.next.is_none();
        let d = self.next.unwrap_or(Self::MIN);
        self.next = Some((d * 2).min(Self::MAX));
        (d, first)
    }

    /// An accept succeeded.
    pub fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut b = Backoff::default();
        let (d, first) = b.fail();
        assert_eq!((d, first), (Duration::from_millis(1), true));
        let pauses: Vec<u128> = (0..12).map(|_| b.fail().0.as_millis()).collect();
        assert_eq!(
            pauses,
            [2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000, 1000]
        );
        b.reset();
        assert_eq!(b.fail(), (Duration::from_millis(1), true));
    }

    #[test]
    fn cap_leaves_room_for_upstreams_and_the_runtime() {
        assert_eq!(default_max_connections(Some(1024)), 480);
        assert_eq!(default_max_connections(Some(64)), 24);
        assert_eq!(default_max_connections(Some(1 << 20)), 524_256);
        assert_eq!(default_max_connections(Some(1)), 1);
        assert_eq!(default_max_connections(None), 4096);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let soft = raise_fd_limit().expect("readable on unix");
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reads into the struct we own.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut rl) },
            0
        );
        #[allow(clippy::useless_conversion)] // `rlim_t` is not u64 on every unix
        let cur = u64::try_from(rl.rlim_cur).ok();
        assert_eq!(Some(soft), cur);
        // An unlimited hard limit cannot be the soft one (the kernel caps it at nr_open).
        if rl.rlim_max != libc::RLIM_INFINITY {
            assert_eq!(rl.rlim_cur, rl.rlim_max);
        }
    }

    #[test]
    fn per_connection_errors_do_not_back_off() {
        assert!(is_connection_error(&io::Error::from(
            io::ErrorKind::ConnectionAborted
        )));
        assert!(!is_connection_error(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(!is_connection_error(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
    }
}
