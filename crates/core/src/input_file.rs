//! Reading a file a user names (a workload, an SLO file, a preset file, a dataset) without
//! trusting what the name points at.
//!
//! `std::fs::read_to_string` on a FIFO blocks until something writes to it, past Ctrl-C and
//! every timeout, and on a device such as `/dev/zero` allocates until memory runs out. A user's
//! file may be a symbolic link (to a shared config), so links are followed, but what they lead to
//! must be a regular file of a bounded size; it is checked before the file is opened.

use std::io::{self, Read};
use std::path::Path;

/// The most a configuration file (workload, SLO, preset, config) may hold: 64 MiB, far above
/// any real one and small enough to read at once.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The most a dataset file may hold: 4 GiB (the ShareGPT V3 dump is ~0.7 GB).
pub const MAX_DATASET_BYTES: u64 = 4 << 30;

/// Reads `path` as UTF-8 text when it is (or links to) a regular file of at most `max_bytes`.
///
/// # Errors
/// The open or read error, or an [`io::ErrorKind::InvalidInput`] error saying what the path is
/// instead (a FIFO, a device, a directory) or how large it is. The message does not repeat the
/// path; callers name it.
pub fn read_to_string(path: &Path, max_bytes: u64) -> io::Result<String> {
    let m = std::fs::metadata(path)?;
    let ft = m.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else {
            special_kind(&ft)
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    let too_big = |n: u64| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{n} bytes or more, above the limit of {} MiB",
                max_bytes >> 20
            ),
        )
    };
    if m.len() > max_bytes {
        return Err(too_big(m.len()));
    }
    let mut text = String::new();
    // The file may grow between the check and the read: read one byte past the limit at most.
    std::fs::File::open(path)?
        .take(max_bytes + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > max_bytes {
        return Err(too_big(text.len() as u64));
    }
    Ok(text)
}

#[cfg(unix)]
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "not a file"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("hr-input-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_and_a_link_to_one_are_read() {
        let d = dir();
        let f = d.join("a.yaml");
        std::fs::write(&f, "x: 1\n").unwrap();
        assert_eq!(read_to_string(&f, MAX_CONFIG_BYTES).unwrap(), "x: 1\n");
        #[cfg(unix)]
        {
            let l = d.join("link.yaml");
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink(&f, &l).unwrap();
            assert_eq!(read_to_string(&l, MAX_CONFIG_BYTES).unwrap(), "x: 1\n");
        }
    }

    #[test]
    fn a_file_over_the_limit_is_refused_without_reading_it() {
        let d = dir();
        let f = d.join("big.yaml");
        std::fs::write(&f, vec![b'#'; 2048]).unwrap();
        let e = read_to_string(&f, 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("2048 bytes"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_at_once() {
        let d = dir();
        let fifo = d.join("f.yaml");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo has no other precondition.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let zero = d.join("zero.yaml");
        let _ = std::fs::remove_file(&zero);
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (p, what) in [
            (&fifo, "a FIFO"),
            (&zero, "a character device"),
            (&d, "a directory"),
        ] {
            let t0 = std::time::Instant::now();
            let e = read_to_string(p, MAX_CONFIG_BYTES).unwrap_err();
            assert!(e.to_string().starts_with(what), "{}: {e}", p.display());
            assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        }
    }
}
