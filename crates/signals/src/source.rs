//! Sources of scrapes for `headroom diagnose`: saved files, a sweep run directory, live polling,
//! and a Prometheus server's HTTP API ([`crate::promql`]).
//!
//! # Saved scrapes (`--from FILE …`)
//!
//! Files are taken in the order given, which must be time order. Each file's time is the
//! explicit suffix `path@unix_seconds` (e.g. `after.prom@1767000030.5`), else the file's
//! modification time. One engine file alone means "everything since the server started"
//! (counters from 0). Files whose metrics are dcgm-exporter's (`DCGM_*`) are GPU scrapes, the
//! rest engine scrapes.
//!
//! # Run directory layout (`--from RUN_DIR`)
//!
//! A sweep stores every scrape verbatim under `RUN_DIR/scrapes/`, one file per scrape, named by
//! [`scrape_file_name`] (the names are [`headroom_core::run_dir`]'s):
//!
//! ```text
//! scrapes/L{level:03}-{seq:04}-{kind}@{unix_seconds}.prom
//! e.g.    scrapes/L002-0000-engine@1767000000.250.prom   level 2, first scrape (level start)
//!         scrapes/L002-0000-dcgm@1767000000.251.prom     the GPU scrape taken with it
//!         scrapes/L002-0007-engine@1767000035.250.prom   level 2, last scrape (level end)
//! ```
//!
//! `level` is the sweep's 0-based level index, `seq` counts scrapes within the level from 0
//! (start) to the end scrape, `kind` is `engine` or `dcgm`, and the time (Unix seconds, three
//! decimals) is when the request was sent. The time is in the name, not only in the file's
//! modification time, so that copying a run directory keeps it. [`write_scrape`] writes a file in
//! this layout; [`load_run_dir`] reads it back grouped by level.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::adapter::dcgm_snapshot;
use crate::scrape::{Scrape, ScrapeError, Scraper};
use headroom_core::run_dir::{self as layout, RunDir};

/// Which endpoint a scrape came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScrapeKind {
    /// The inference engine's `/metrics`.
    Engine,
    /// dcgm-exporter.
    Dcgm,
}

impl ScrapeKind {
    /// `engine` or `dcgm`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScrapeKind::Engine => "engine",
            ScrapeKind::Dcgm => "dcgm",
        }
    }
}

/// Why scrapes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file could not be read.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// A `path@unix_seconds` suffix is not a number.
    #[error("{arg}: the part after `@` must be Unix seconds (e.g. `after.prom@1767000030.5`)")]
    BadTimestamp {
        /// The argument as given.
        arg: String,
    },
    /// A file is not a usable scrape.
    #[error(transparent)]
    Scrape(#[from] ScrapeError),
    /// The run directory has no scrapes in the documented layout.
    #[error("{path}: {reason}")]
    RunDir {
        /// The directory.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Two scrapes of the same kind carry the same time (typically copied files with equal
    /// modification times): the window between them would last 0 s.
    #[error(
        "{first} and {second} are both at {at_unix_s:.3} (Unix seconds, from their `@` suffix, name or modification time): a window needs two distinct times; give each file its scrape time as FILE@unix_seconds (e.g. `{first}@{at_unix_s:.0} {second}@{}` for scrapes 30 s apart)",
        at_unix_s.round() + 30.0
    )]
    SameTime {
        /// The earlier argument.
        first: String,
        /// The later argument.
        second: String,
        /// Their common time, Unix seconds.
        at_unix_s: f64,
    },
    /// No engine scrape among the inputs.
    #[error("no engine scrape among {0}: only dcgm-exporter files were given")]
    NoEngineScrape(String),
}

/// Scrapes read from files, split by kind, each list in time order.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Engine scrapes.
    pub engine: Vec<Scrape>,
    /// dcgm-exporter scrapes.
    pub dcgm: Vec<Scrape>,
}

/// The file name of a scrape in a run directory (see the module docs for the layout):
/// `L{level:03}-{seq:04}-{kind}@{at_unix_s:.3}.prom` ([`layout::scrape_file_name`]).
pub fn scrape_file_name(level: u32, seq: u32, kind: ScrapeKind, at_unix_s: f64) -> String {
    layout::scrape_file_name(level, seq, kind.as_str(), at_unix_s)
}

/// Parses a name written by [`scrape_file_name`] into `(level, seq, kind, at_unix_s)`.
pub fn parse_scrape_file_name(name: &str) -> Option<(u32, u32, ScrapeKind, f64)> {
    let n = layout::parse_scrape_file_name(name)?;
    let kind = match n.kind {
        "engine" => ScrapeKind::Engine,
        "dcgm" => ScrapeKind::Dcgm,
        _ => return None,
    };
    Some((n.level, n.seq, kind, n.at_unix_s))
}

/// Writes a scrape's body verbatim into `run_dir/scrapes/` under [`scrape_file_name`], creating
/// the folder (refused when it is a symbolic link), atomically and without following links
/// ([`headroom_core::atomic`]). Returns the path relative to `run_dir` (`scrapes/…`).
///
/// # Errors
/// The I/O error, naming the file or folder.
pub fn write_scrape(
    run_dir: &Path,
    level: u32,
    seq: u32,
    kind: ScrapeKind,
    scrape: &Scrape,
) -> std::io::Result<String> {
    let name = layout::scrape_name(&scrape_file_name(level, seq, kind, scrape.at_unix_s));
    // Link-safe and atomic: a run directory may sit in a shared folder.
    RunDir::new(run_dir).write(&name, scrape.body.as_bytes())?;
    Ok(name)
}

/// Splits `path@unix_seconds` into the path and the explicit time. An `@` followed by something
/// that is not a number is an error only if no file of the full name exists.
pub fn split_time_suffix(arg: &str) -> Result<(PathBuf, Option<f64>), SourceError> {
    if let Some((p, t)) = arg.rsplit_once('@') {
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() => return Ok((PathBuf::from(p), Some(v))),
            _ if Path::new(arg).exists() => return Ok((PathBuf::from(arg), None)),
            _ => {
                return Err(SourceError::BadTimestamp {
                    arg: arg.to_owned(),
                });
            }
        }
    }
    Ok((PathBuf::from(arg), None))
}

fn read_scrape(path: &Path, at: Option<f64>) -> Result<Scrape, SourceError> {
    let shown = path.display().to_string();
    let io = |e: std::io::Error| SourceError::Io {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let at = match at {
        Some(t) => t,
        None => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(io)?
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    };
    let bytes = read_bounded(path, crate::exposition::Limits::default().max_body_bytes).map_err(
        |reason| SourceError::Io {
            path: shown.clone(),
            reason,
        },
    )?;
    let body = String::from_utf8(bytes).map_err(|_| SourceError::Io {
        path: shown.clone(),
        reason: "not UTF-8 text".to_owned(),
    })?;
    Ok(Scrape::from_body(shown, body, at, None)?)
}

/// Reads at most `limit` bytes of `path` (a file, or a device or pipe such as `/dev/zero`): one
/// byte more than the limit is read to tell "exactly at the limit" from "beyond it", so memory
/// stays bounded whatever the file is. Errors: the I/O error, or a body beyond `limit`.
pub fn read_bounded(path: &Path, limit: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > limit {
        return Err(format!(
            "larger than {} MiB, the most a metrics body may be; not a /metrics scrape",
            limit >> 20
        ));
    }
    Ok(bytes)
}

/// Whether a scrape is dcgm-exporter output (most of its samples are `DCGM_*`/`dcgm_*`).
pub fn is_dcgm(scrape: &Scrape) -> bool {
    !dcgm_snapshot(&scrape.exposition).gpus.is_empty()
        && crate::adapter::detect(&scrape.exposition).engine == crate::adapter::Engine::Unknown
}

/// Reads `--from` arguments (files, each optionally `@unix_seconds`), in the order given, and
/// splits them into engine and dcgm scrapes.
///
/// Errors: unreadable file, bad `@` suffix, a file that is not a metrics body or is larger than
/// [`crate::exposition::Limits::max_body_bytes`] (read bounded, [`read_bounded`]), each naming
/// the file; no engine scrape at all; two engine (or two dcgm) scrapes at the same time
/// ([`SourceError::SameTime`]). Time order is checked when the window is built.
pub fn load_files(args: &[String]) -> Result<Loaded, SourceError> {
    let mut out = Loaded::default();
    for arg in args {
        let (path, at) = split_time_suffix(arg)?;
        // A file saved by a sweep carries its time in its name (`L000-0001-engine@<unix>.prom`):
        // that survives copying, unlike the modification time.
        let at = at.or_else(|| {
            path.file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_scrape_file_name)
                .map(|(_, _, _, t)| t)
        });
        let s = read_scrape(&path, at)?;
        if is_dcgm(&s) {
            out.dcgm.push(s);
        } else {
            out.engine.push(s);
        }
    }
    if out.engine.is_empty() {
        return Err(SourceError::NoEngineScrape(args.join(", ")));
    }
    for list in [&out.engine, &out.dcgm] {
        for pair in list.windows(2) {
            if pair[0].at_unix_s == pair[1].at_unix_s {
                return Err(SourceError::SameTime {
                    first: pair[0].source.clone(),
                    second: pair[1].source.clone(),
                    at_unix_s: pair[0].at_unix_s,
                });
            }
        }
    }
    Ok(out)
}

/// Reads a run directory's `scrapes/` folder, grouped by level index, each level's scrapes in
/// `seq` order. Files not named per [`scrape_file_name`] are ignored.
///
/// Errors: no `scrapes/` folder, or no file in the layout.
pub fn load_run_dir(run_dir: &Path) -> Result<BTreeMap<u32, Loaded>, SourceError> {
    let dir = RunDir::new(run_dir).scrapes();
    let shown = run_dir.display().to_string();
    let entries = std::fs::read_dir(&dir).map_err(|e| SourceError::RunDir {
        path: shown.clone(),
        reason: format!(
            "cannot read its scrapes/ folder ({e}); is this a headroom sweep run directory?"
        ),
    })?;
    let mut found: Vec<(u32, u32, ScrapeKind, f64, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((level, seq, kind, at)) = parse_scrape_file_name(&name) {
            found.push((level, seq, kind, at, e.path()));
        }
    }
    if found.is_empty() {
        return Err(SourceError::RunDir {
            path: shown,
            reason: "scrapes/ holds no files named like L000-0000-engine@1767000000.000.prom"
                .to_owned(),
        });
    }
    found.sort_by_key(|a| (a.0, a.1, a.2));
    let mut out: BTreeMap<u32, Loaded> = BTreeMap::new();
    for (level, _, kind, at, path) in found {
        let s = read_scrape(&path, Some(at))?;
        let l = out.entry(level).or_default();
        match kind {
            ScrapeKind::Engine => l.engine.push(s),
            ScrapeKind::Dcgm => l.dcgm.push(s),
        }
    }
    Ok(out)
}

/// Scrapes collected by [`poll`].
#[derive(Debug, Default)]
pub struct Polled {
    /// Engine scrapes in time order.
    pub engine: Vec<Scrape>,
    /// dcgm scrapes in time order.
    pub dcgm: Vec<Scrape>,
    /// A Headroom gateway's scrapes in time order, taken right after each engine scrape
    /// ([`poll_with_gateway`]); empty without a gateway.
    pub gateway: Vec<Scrape>,
    /// Scrapes that failed after the first one (the window is still usable without them).
    pub failures: Vec<String>,
}

/// Live polling (`--url` with optional `--dcgm`): scrapes at once, every `interval`, and at the
/// end of `duration` (so a window of `duration` has `duration / interval + 1` scrapes).
///
/// Errors: the first engine scrape failing (nothing to build on) returns its [`ScrapeError`];
/// later failures are collected in [`Polled::failures`].
pub async fn poll(
    url: &str,
    dcgm_url: Option<&str>,
    interval: Duration,
    duration: Duration,
    timeout: Duration,
) -> Result<Polled, ScrapeError> {
    poll_with_gateway(url, dcgm_url, None, interval, duration, timeout).await
}

/// [`poll`], and a Headroom gateway's `/metrics` at `gateway_url` scraped right after each
/// engine scrape, so that both windows span the same moments (to within one scrape's time).
///
/// Errors: the first engine or gateway scrape failing returns its [`ScrapeError`]; later
/// failures are collected in [`Polled::failures`].
pub async fn poll_with_gateway(
    url: &str,
    dcgm_url: Option<&str>,
    gateway_url: Option<&str>,
    interval: Duration,
    duration: Duration,
    timeout: Duration,
) -> Result<Polled, ScrapeError> {
    let scraper = Scraper::new(timeout);
    let start = Instant::now();
    let interval = interval.max(Duration::from_millis(100));
    let mut out = Polled::default();
    let mut tick = 0u32;
    loop {
        let engine = scraper.scrape(url).await;
        match engine {
            Ok(s) => out.engine.push(s),
            Err(e) if out.engine.is_empty() => return Err(e),
            Err(e) => out.failures.push(e.to_string()),
        }
        if let Some(g) = gateway_url {
            match scraper.scrape(g).await {
                Ok(s) => out.gateway.push(s),
                Err(e) if out.gateway.is_empty() => return Err(e),
                Err(e) => out.failures.push(e.to_string()),
            }
        }
        if let Some(d) = dcgm_url {
            match scraper.scrape(d).await {
                Ok(s) => out.dcgm.push(s),
                Err(e) => out.failures.push(e.to_string()),
            }
        }
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        tick += 1;
        let next = (interval * tick).min(duration);
        tokio::time::sleep(next.saturating_sub(start.elapsed())).await;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        let n = scrape_file_name(2, 7, ScrapeKind::Engine, 1_767_000_035.25);
        assert_eq!(n, "L002-0007-engine@1767000035.250.prom");
        assert_eq!(
            parse_scrape_file_name(&n),
            Some((2, 7, ScrapeKind::Engine, 1_767_000_035.25))
        );
        assert_eq!(parse_scrape_file_name("L002-0007-gpu@1.prom"), None);
        assert_eq!(parse_scrape_file_name("notes.txt"), None);
    }

    #[test]
    fn reads_are_bounded_whatever_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let exact = dir.path().join("exact.prom");
        std::fs::write(&exact, vec![b'#'; 64]).unwrap();
        assert_eq!(read_bounded(&exact, 64).unwrap().len(), 64);
        let e = read_bounded(&exact, 63).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        // an endless device: stops after limit + 1 bytes instead of reading forever
        if Path::new("/dev/zero").exists() {
            let e = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
            assert!(e.contains("larger than 1 MiB"), "{e}");
            let e = load_files(&["/dev/zero@1".to_owned()])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("/dev/zero: larger than 32 MiB"), "{e}");
        }
    }

    #[test]
    fn two_scrapes_at_the_same_time_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let body =
            "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\"} 1\n";
        let a = dir.path().join("a.prom");
        let b = dir.path().join("b.prom");
        std::fs::write(&a, body).unwrap();
        std::fs::write(&b, body).unwrap();
        let (a, b) = (a.display().to_string(), b.display().to_string());
        // equal explicit times
        let e = load_files(&[format!("{a}@100"), format!("{b}@100")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both at 100.000"), "{e}");
        assert!(e.contains("FILE@unix_seconds"), "{e}");
        // equal modification times (copied files)
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_767_000_000);
        for p in [&a, &b] {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        let e = load_files(&[a.clone(), b.clone()]).unwrap_err().to_string();
        assert!(e.contains("both at 1767000000.000"), "{e}");
        assert!(e.contains(&format!("{b}@1767000030")), "{e}");
        // distinct times are fine
        let l = load_files(&[format!("{a}@100"), format!("{b}@130")]).unwrap();
        assert_eq!(l.engine.len(), 2);
    }

    #[tokio::test]
    async fn poll_scrapes_at_start_every_interval_and_end() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for i in 0..10u32 {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 2048];
                let _ = sock.read(&mut buf).await;
                let body = format!("vllm:prompt_tokens_total{{engine=\"0\"}} {}\n", i * 10);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            }
        });
        let url = format!("http://{addr}/metrics");
        let p = poll(
            &url,
            None,
            Duration::from_millis(100),
            Duration::from_millis(300),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
        server.abort();
        // t = 0, 100, 200, 300 ms
        assert_eq!(p.engine.len(), 4);
        assert!(p.failures.is_empty());
        let w = crate::Window::from_scrapes(&p.engine, &[], &Default::default()).unwrap();
        // 0 → 30 prompt tokens over the four scrapes
        assert_eq!(w.counter(crate::Signal::PromptTokens), Some(30.0));
        let d = w.duration_s().unwrap();
        assert!((0.25..1.5).contains(&d), "{d}");
    }

    #[test]
    fn time_suffix() {
        let (p, t) = split_time_suffix("a/b.prom@1767000030.5").unwrap();
        assert_eq!(p, PathBuf::from("a/b.prom"));
        assert_eq!(t, Some(1_767_000_030.5));
        assert!(matches!(
            split_time_suffix("a/b.prom@yesterday"),
            Err(SourceError::BadTimestamp { .. })
        ));
        assert_eq!(split_time_suffix("plain.prom").unwrap().1, None);
    }
}
