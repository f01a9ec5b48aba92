//! A run directory's layout: the one place that knows the name of every file and folder a sweep
//! (or a plan) writes there, and that every reader (`diagnose --from`, `compare`, `report`,
//! `plan --calibrate-from`, `slo autoscale --from`) looks them up through.
//!
//! ```text
//! RUN_DIR/
//!   results.json        the record (RunResult): written after every level, first
//!   levels.csv          renderings of results.json, after it
//!   report.md
//!   report.html
//!   manifest.json       what was run against what (Manifest)
//!   slo.yaml            the SLO file as given
//!   workload.yaml       the workload file, with the windows as run
//!   calibration.json    `headroom plan --calibrate-from`: the fitted twin constants
//!   histograms/L007.json                    level 7's client recording
//!   scrapes/L007-0003-engine@1767000035.250.prom   its 4th engine scrape, verbatim
//! ```
//!
//! A run's status (running, stopped with a reason, complete) is `results.json`'s `status`; no
//! marker file exists. Writes are atomic and never follow a link ([`crate::atomic`]); reads are
//! bounded ([`read_text`]): a run directory may sit in a shared folder and hold planted files.
//! The names are a format other tools read: changing one breaks every run directory written
//! before.

use crate::atomic::{create_dir_nofollow, write_atomic};
use crate::run::{Manifest, RunResult};
use crate::slo::SloFile;
use std::path::{Component, Path, PathBuf};

/// The record: [`RunResult`] as JSON.
pub const RESULTS: &str = "results.json";
/// One row per level (rendered from [`RESULTS`]).
pub const LEVELS_CSV: &str = "levels.csv";
/// The Markdown report (rendered from [`RESULTS`]).
pub const REPORT_MD: &str = "report.md";
/// The HTML report (rendered from [`RESULTS`]).
pub const REPORT_HTML: &str = "report.html";
/// [`Manifest`] as JSON.
pub const MANIFEST: &str = "manifest.json";
/// The SLO file as given.
pub const SLO: &str = "slo.yaml";
/// The workload file, with the windows as run.
pub const WORKLOAD: &str = "workload.yaml";
/// A plan's fitted twin constants (`headroom plan --calibrate-from`).
pub const CALIBRATION: &str = "calibration.json";
/// A plan's table as JSON (`headroom plan`): per phase, the capacity, its band and its worst case
/// at the edge of the twin's validated error, and the plan's caveats.
pub const PLAN_SUMMARY: &str = "plan.json";
/// Folder of the engine's and dcgm-exporter's scrapes, one file each.
pub const SCRAPES: &str = "scrapes";
/// Folder of the client's recordings, one file per level.
pub const HISTOGRAMS: &str = "histograms";

/// The files written after every level, in the order written: [`RESULTS`] first (the small,
/// complete record), its renderings after it.
pub const RUN_FILES: [&str; 4] = [RESULTS, LEVELS_CSV, REPORT_MD, REPORT_HTML];

/// The largest run-directory file read, bytes (a sweep's results.json of thousands of levels is
/// a few MB): a link to /dev/zero or a planted huge file is refused, not read into memory.
pub const MAX_FILE: u64 = 256 << 20;

/// The name, relative to the run directory, of level `index`'s client recording:
/// `histograms/L{index:03}.json`.
pub fn histogram_name(index: u32) -> String {
    format!("{HISTOGRAMS}/L{index:03}.json")
}

/// The level index of a name written by [`histogram_name`] (`histograms/L007.json` → 7);
/// `None` for any other name.
pub fn histogram_index(name: &str) -> Option<u32> {
    let file = name.strip_prefix(HISTOGRAMS)?.strip_prefix('/')?;
    let digits = file.strip_prefix('L')?.strip_suffix(".json")?;
    if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The file name (inside [`SCRAPES`]) of scrape `seq` of level `level`, of kind `kind`
/// (`engine`, `dcgm`) taken at `at_unix_s`: `L{level:03}-{seq:04}-{kind}@{at_unix_s:.3}.prom`.
pub fn scrape_file_name(level: u32, seq: u32, kind: &str, at_unix_s: f64) -> String {
    format!("L{level:03}-{seq:04}-{kind}@{at_unix_s:.3}.prom")
}

/// The name relative to the run directory (`scrapes/…`) of a [`scrape_file_name`], as a
/// level's `server.scrapes` cites it.
pub fn scrape_name(file_name: &str) -> String {
    format!("{SCRAPES}/{file_name}")
}

/// A scrape file's name, parsed ([`parse_scrape_file_name`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScrapeFileName<'a> {
    /// Level index.
    pub level: u32,
    /// Position among the level's scrapes of its kind.
    pub seq: u32,
    /// `engine` or `dcgm` (any word without `@`; the caller decides what it knows).
    pub kind: &'a str,
    /// Scrape time, Unix seconds.
    pub at_unix_s: f64,
}

/// Parses a name written by [`scrape_file_name`]; `None` for any other.
pub fn parse_scrape_file_name(name: &str) -> Option<ScrapeFileName<'_>> {
    let stem = name.strip_suffix(".prom")?;
    let (head, at) = stem.split_once('@')?;
    let at_unix_s: f64 = at.parse().ok()?;
    let mut parts = head.splitn(3, '-');
    let level = parts.next()?.strip_prefix('L')?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    let kind = parts.next()?;
    at_unix_s.is_finite().then_some(ScrapeFileName {
        level,
        seq,
        kind,
        at_unix_s,
    })
}

/// A file of a run directory that could not be read: missing, not a regular file, too large,
/// or not what it should hold.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
    /// The file does not exist (a reader may then go on without it).
    pub missing: bool,
}

impl ReadError {
    fn new(path: &Path, message: impl Into<String>) -> ReadError {
        ReadError {
            path: path.to_path_buf(),
            message: message.into(),
            missing: false,
        }
    }
}

/// Checks that `path` is a regular file (not a link, a FIFO or a device) of at most
/// [`MAX_FILE`] bytes.
///
/// # Errors
/// [`ReadError`] naming the file and what it is instead.
pub fn check_file(path: &Path) -> Result<(), ReadError> {
    let m = std::fs::symlink_metadata(path).map_err(|e| ReadError {
        missing: e.kind() == std::io::ErrorKind::NotFound,
        ..ReadError::new(path, e.to_string())
    })?;
    if m.file_type().is_symlink() {
        return Err(ReadError::new(
            path,
            "a symbolic link; a run directory's files are read only as themselves",
        ));
    }
    if !m.is_file() {
        return Err(ReadError::new(path, "not a regular file"));
    }
    if m.len() > MAX_FILE {
        return Err(ReadError::new(
            path,
            format!(
                "{} bytes, more than the {} MiB a run directory's file may have",
                m.len(),
                MAX_FILE >> 20
            ),
        ));
    }
    Ok(())
}

/// Reads `path` as text after [`check_file`].
///
/// # Errors
/// [`ReadError`]: [`check_file`]'s, or the read's.
pub fn read_text(path: &Path) -> Result<String, ReadError> {
    check_file(path)?;
    std::fs::read_to_string(path).map_err(|e| ReadError::new(path, e.to_string()))
}

/// A run directory: its paths, and the typed writes and reads of its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run directory at `root` (nothing is read or created).
    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `name` (relative, one of this module's names) inside the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// `results.json`.
    pub fn results(&self) -> PathBuf {
        self.file(RESULTS)
    }

    /// `manifest.json`.
    pub fn manifest(&self) -> PathBuf {
        self.file(MANIFEST)
    }

    /// `slo.yaml`.
    pub fn slo(&self) -> PathBuf {
        self.file(SLO)
    }

    /// `workload.yaml`.
    pub fn workload(&self) -> PathBuf {
        self.file(WORKLOAD)
    }

    /// `calibration.json`.
    pub fn calibration(&self) -> PathBuf {
        self.file(CALIBRATION)
    }

    /// `scrapes/`.
    pub fn scrapes(&self) -> PathBuf {
        self.file(SCRAPES)
    }

    /// `histograms/`.
    pub fn histograms(&self) -> PathBuf {
        self.file(HISTOGRAMS)
    }

    /// A file `results.json` cites (a level's histograms or scrapes), inside the directory;
    /// `None` for an empty, absolute or `..` name, which the sweep never writes.
    pub fn cited(&self, name: &str) -> Option<PathBuf> {
        let rel = Path::new(name);
        let inside = !name.is_empty()
            && !rel.is_absolute()
            && rel.components().all(|c| matches!(c, Component::Normal(_)));
        inside.then(|| self.root.join(rel))
    }

    /// Creates the directory (and its parents) when missing.
    ///
    /// # Errors
    /// The I/O error, naming the directory.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.root).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot create run directory {}: {e}", self.root.display()),
            )
        })
    }

    /// Writes `bytes` to `name` (relative: `results.json`, `scrapes/…`), creating its folder
    /// inside the directory when it has one (refused when that folder is a link), atomically and
    /// without following links.
    ///
    /// # Errors
    /// The I/O error, naming the file or folder.
    pub fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.file(name);
        if let Some(dir) = path.parent()
            && dir != self.root
        {
            create_dir_nofollow(dir)?;
        }
        write_atomic(&path, bytes)
    }

    /// Writes what a run was given, before its first level: `slo.yaml` and `workload.yaml` as
    /// texts (the files as given, the workload with its windows as run) and `manifest.json`.
    ///
    /// # Errors
    /// The first write that failed, naming the file.
    pub fn write_inputs(
        &self,
        slo_text: &str,
        workload_text: &str,
        manifest: &Manifest,
    ) -> std::io::Result<()> {
        self.write(SLO, slo_text.as_bytes())?;
        self.write(WORKLOAD, workload_text.as_bytes())?;
        let json = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
        self.write(MANIFEST, &json)
    }

    /// Reads and parses `results.json`.
    ///
    /// # Errors
    /// [`ReadError`]: missing (`missing` set), not a regular file, or not a sweep's results.
    pub fn read_results(&self) -> Result<RunResult, ReadError> {
        let p = self.results();
        serde_json::from_str(&read_text(&p)?)
            .map_err(|e| ReadError::new(&p, format!("not a sweep's results ({e})")))
    }

    /// Reads `manifest.json` as JSON (its fields are compared and read by pointer, and older
    /// runs lack newer ones).
    ///
    /// # Errors
    /// [`ReadError`]: missing (`missing` set), not a regular file, or not JSON.
    pub fn read_manifest(&self) -> Result<serde_json::Value, ReadError> {
        let p = self.manifest();
        serde_json::from_str(&read_text(&p)?)
            .map_err(|e| ReadError::new(&p, format!("not JSON ({e})")))
    }

    /// Reads and parses `slo.yaml`.
    ///
    /// # Errors
    /// [`ReadError`]: missing (`missing` set), not a regular file, or not a valid SLO file.
    pub fn read_slo(&self) -> Result<SloFile, ReadError> {
        let p = self.slo();
        SloFile::parse(&read_text(&p)?, &p).map_err(|e| ReadError::new(&p, e.to_string()))
    }

    /// The first symbolic link among the files a reader opens (the top level, `scrapes/`,
    /// `histograms/`): the sweep writes none, and one planted there (`slo.yaml` → `/etc/shadow`)
    /// would make a reader open, and quote, a file it was never given.
    ///
    /// # Errors
    /// A folder that cannot be read (a missing `scrapes/` or `histograms/` is no error).
    pub fn find_link(&self) -> std::io::Result<Option<PathBuf>> {
        let dirs = [self.root.clone(), self.scrapes(), self.histograms()];
        for (i, dir) in dirs.iter().enumerate() {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if i > 0 && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                    return Ok(Some(entry.path()));
                }
            }
        }
        Ok(None)
    }

    /// Files `run` cites (each level's histograms and scrapes, repeats included) that the
    /// directory lacks, by the names cited, each once.
    pub fn missing_cited(&self, run: &RunResult) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let levels = run
            .phases
            .iter()
            .flat_map(|p| &p.levels)
            .flat_map(|l| std::iter::once(l).chain(&l.repeats));
        for l in levels {
            let scrapes = l.server.iter().flat_map(|s| &s.scrapes);
            for f in std::iter::once(&l.histograms).chain(scrapes) {
                let present = self.cited(f).is_some_and(|p| p.is_file());
                if !f.is_empty() && !present && !out.contains(f) {
                    out.push(f.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(histogram_name(7), "histograms/L007.json");
        assert_eq!(histogram_index("histograms/L007.json"), Some(7));
        assert_eq!(histogram_index("histograms/L1234.json"), Some(1234));
        assert_eq!(histogram_index("histograms/x.json"), None);
        assert_eq!(histogram_index("L007.json"), None);
        let f = scrape_file_name(2, 7, "engine", 1_767_000_035.25);
        assert_eq!(f, "L002-0007-engine@1767000035.250.prom");
        assert_eq!(
            scrape_name(&f),
            "scrapes/L002-0007-engine@1767000035.250.prom"
        );
        let p = parse_scrape_file_name(&f).unwrap();
        assert_eq!((p.level, p.seq, p.kind), (2, 7, "engine"));
        assert!((p.at_unix_s - 1_767_000_035.25).abs() < 1e-6);
        assert!(parse_scrape_file_name("L002-0007-engine@inf.prom").is_none());
        assert!(parse_scrape_file_name("notes.txt").is_none());
    }

    #[test]
    fn cited_names_stay_inside() {
        let d = RunDir::new("/runs/a");
        assert_eq!(
            d.cited("histograms/L000.json"),
            Some(PathBuf::from("/runs/a/histograms/L000.json"))
        );
        for bad in ["", "/etc/passwd", "../b/results.json", "histograms/../../x"] {
            assert_eq!(d.cited(bad), None, "{bad}");
        }
    }

    #[test]
    fn writes_create_subfolders_and_reads_are_bounded() {
        let t = tempfile::tempdir().unwrap();
        let d = RunDir::new(t.path());
        d.write(&histogram_name(3), b"{}").unwrap();
        assert!(t.path().join("histograms/L003.json").is_file());
        let e = d.read_results().unwrap_err();
        assert!(e.missing, "{e}");
        std::fs::create_dir(t.path().join(RESULTS)).unwrap();
        let e = d.read_results().unwrap_err();
        assert!(
            !e.missing && e.message.contains("not a regular file"),
            "{e}"
        );
        std::fs::write(d.manifest(), "{").unwrap();
        assert!(
            d.read_manifest()
                .unwrap_err()
                .message
                .starts_with("not JSON")
        );
        assert_eq!(d.find_link().unwrap(), None);
        std::fs::create_dir(d.scrapes()).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.scrapes().join("x")).unwrap();
        assert_eq!(d.find_link().unwrap(), Some(d.scrapes().join("x")));
    }
}
