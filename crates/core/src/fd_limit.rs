//! The process's open-file limit (`RLIMIT_NOFILE`), raised once: the sweep client and the
//! gateway both hold a descriptor per connection, and many systems start processes at a soft
//! limit of 1,024 (or less) under a much higher hard one.

use std::sync::OnceLock;

/// The process's `RLIMIT_NOFILE` after [`fd_limit`] raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Soft limit found at start (open files).
    pub before: u64,
    /// Soft limit now (open files): the hard limit when raising it worked, else `before`.
    pub soft: u64,
    /// Hard limit (open files); `u64::MAX` for unlimited.
    pub hard: u64,
}

/// Highest soft limit asked for when the hard limit is unlimited: Linux refuses more than
/// `fs.nr_open` (1,048,576 by default).
const UNLIMITED_CAP: u64 = 1 << 20;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once per process, and returns the limits.
/// Later calls return the first call's answer. A process that cannot read its limits reports
/// `u64::MAX` for all three (nothing is known to be short).
pub fn fd_limit() -> FdLimit {
    static LIMIT: OnceLock<FdLimit> = OnceLock::new();
    *LIMIT.get_or_init(raise)
}

#[cfg(unix)]
fn raise() -> FdLimit {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut rl) } != 0 {
        return FdLimit {
            before: u64::MAX,
            soft: u64::MAX,
            hard: u64::MAX,
        };
    }
    // rlim_t is u64 on Linux and the BSDs.
    let as_u64 = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    let (before, hard) = (as_u64(rl.rlim_cur), as_u64(rl.rlim_max));
    let mut soft = before;
    for want in [hard, hard.min(UNLIMITED_CAP)] {
        if want <= soft {
            break;
        }
        let new = libc::rlimit {
            rlim_cur: if want == u64::MAX {
                libc::RLIM_INFINITY
            } else {
                want
            },
            rlim_max: rl.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const new) } == 0 {
            soft = want;
            break;
        }
    }
    FdLimit { before, soft, hard }
}

#[cfg(not(unix))]
fn raise() -> FdLimit {
    FdLimit {
        before: u64::MAX,
        soft: u64::MAX,
        hard: u64::MAX,
    }
}
