//! The one file write every run-directory writer shares: whole files, atomically, without
//! following a link someone planted.
//!
//! A run directory may sit in a shared folder (`--out /tmp/x`) and a sweep may run as root, so a
//! writer must never open a name another user could have prepared: the temporary file gets a
//! random name, is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (a symlink, dangling or not, or
//! any existing file at that name makes the open fail, and a new random name is tried), lives in
//! the destination's own folder (so the rename is atomic and never crosses a file system), and
//! is renamed over the destination; `rename` replaces a symlink at the destination itself, never
//! its target.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Names tried before giving up: a clash needs another file at a random 64-bit name, so more than
/// one try means someone is planting names.
const TRIES: u32 = 16;

/// Writes `bytes` to `path` through a temporary file of a random name in the same folder and a
/// rename (see the module docs); on failure the temporary file is removed and `path` keeps what
/// it had.
///
/// # Errors
/// The I/O error, prefixed with `path`: the folder does not exist or is not writable, the disk is
/// full, or [`TRIES`] random names were all taken (`AlreadyExists`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let with_path =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let (mut file, tmp) = create_temp(path, random_u64).map_err(with_path)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.flush())
        .and_then(|()| std::fs::rename(&tmp, path));
    drop(file);
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        with_path(e)
    })
}

/// Creates the folder `dir` (and its parents) when missing, and refuses one that is a symbolic
/// link: a link planted at `scrapes/` or `histograms/` of a shared run directory would send every
/// later write elsewhere.
///
/// # Errors
/// The I/O error of creating it, or `InvalidInput` naming `dir` when it is a link or not a
/// folder.
pub fn create_dir_nofollow(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let t = std::fs::symlink_metadata(dir)?.file_type();
    if t.is_dir() {
        return Ok(());
    }
    let what = if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a folder"
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{} is {what}; refusing to write through it", dir.display()),
    ))
}

/// A new file at a random name beside `path` (`.<name>.<random>.tmp`, `random` drawing the
/// number), opened exclusively and without following links.
fn create_temp(
    path: &Path,
    mut random: impl FnMut() -> u64,
) -> std::io::Result<(std::fs::File, PathBuf)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map_or_else(
        || std::borrow::Cow::Borrowed("file"),
        |n| n.to_string_lossy(),
    );
    let mut last = None;
    for _ in 0..TRIES {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", random()));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(0o644);
        }
        match opts.open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)))
}

/// 64 unpredictable bits: std's per-process random hash keys (seeded from the operating system),
/// advanced by a counter and mixed with the clock, so each call differs and no other user can
/// guess the next.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temps(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn writes_and_replaces_leaving_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("results.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(temps(d.path()).is_empty());
        assert_ne!(random_u64(), random_u64());
    }

    #[cfg(unix)]
    #[test]
    fn planted_links_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"keep me").unwrap();
        let run = d.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let dest = run.join("results.json");
        // The old fixed temporary name is a link to the file an attacker wants overwritten.
        std::os::unix::fs::symlink(&secret, run.join("results.json.tmp")).unwrap();
        write_atomic(&dest, b"new").unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"keep me");
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        // Links (one dangling) at the random names drawn first: they are skipped, not followed,
        // and the next name is used.
        std::os::unix::fs::symlink(&secret, run.join(".results.json.0000000000000001.tmp"))
            .unwrap();
        std::os::unix::fs::symlink(
            run.join("gone"),
            run.join(".results.json.0000000000000002.tmp"),
        )
        .unwrap();
        let mut draws = [1u64, 2, 3].into_iter();
        let (f, tmp) = create_temp(&dest, || draws.next().unwrap_or(4)).unwrap();
        drop(f);
        assert!(
            tmp.ends_with(".results.json.0000000000000003.tmp"),
            "{tmp:?}"
        );
        assert!(!run.join("gone").exists());
        std::fs::remove_file(&tmp).unwrap();
        // Every name taken: an error, and still nothing written through.
        let e = create_temp(&dest, || 1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&secret).unwrap(), b"keep me");
        // A link at the destination itself is replaced, not written through.
        let linked = run.join("report.html");
        std::os::unix::fs::symlink(&secret, &linked).unwrap();
        write_atomic(&linked, b"page").unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"keep me");
        assert!(
            !std::fs::symlink_metadata(&linked)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_folder_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("etc");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = d.path().join("scrapes");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let e = create_dir_nofollow(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        create_dir_nofollow(&d.path().join("histograms").join("x")).unwrap();
    }

    #[test]
    fn a_failed_write_names_the_file_and_keeps_the_old_one() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("no-such-dir").join("results.json");
        let e = write_atomic(&missing, b"x").unwrap_err();
        assert!(e.to_string().contains("no-such-dir"), "{e}");
        // A directory where the file should be: the rename fails, nothing is left behind.
        let p = d.path().join("levels.csv");
        std::fs::create_dir(p.join("")).unwrap();
        std::fs::write(p.join("inside"), b"x").unwrap();
        let e = write_atomic(&p, b"x").unwrap_err();
        assert!(e.to_string().contains("levels.csv"), "{e}");
        assert!(temps(d.path()).is_empty());
    }
}
