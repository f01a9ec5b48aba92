//! The run directory, for the sweep and every reader of one: [`headroom_core::run_dir`]'s layout
//! (re-exported here; it lives in `core` so that `signals`, which writes the scrapes, and
//! `report`, which writes the renderings, name files from the same place), with the reads of
//! what only crate `load` can type: a level's recording and the workload.

pub use headroom_core::run_dir::*;

use headroom_core::run::{LevelResult, RunResult};
use headroom_core::slo::SloFile;
use headroom_load::recorder::LevelRecording;
use headroom_load::workload::Workload;
use std::path::Path;

/// A run directory, read: its record, manifest and SLO (what `compare` sets side by side).
#[derive(Debug, Clone)]
pub struct Run {
    /// The directory.
    pub dir: RunDir,
    /// `results.json`.
    pub results: RunResult,
    /// `manifest.json`, as JSON.
    pub manifest: serde_json::Value,
    /// `slo.yaml` as run.
    pub slo: SloFile,
}

impl Run {
    /// Reads `results.json`, `manifest.json` and `slo.yaml` of the run directory at `path`.
    ///
    /// # Errors
    /// [`ReadError`] naming the file that is missing or malformed.
    pub fn open(path: &Path) -> Result<Run, ReadError> {
        let dir = RunDir::new(path);
        Ok(Run {
            results: dir.read_results()?,
            manifest: dir.read_manifest()?,
            slo: dir.read_slo()?,
            dir,
        })
    }

    /// The client's recording of `level` (`histograms/L###.json`), if it has one that reads.
    pub fn recording(&self, level: &LevelResult) -> Option<LevelRecording> {
        read_recording(&self.dir, level).ok().flatten()
    }
}

/// The client's recording of `level`, by the name `results.json` cites: `None` when the level
/// cites none.
///
/// # Errors
/// A cited name outside the directory, a file that is not a regular one of bounded size, or not
/// a recording; the message names the file.
pub fn read_recording(dir: &RunDir, level: &LevelResult) -> Result<Option<LevelRecording>, String> {
    if level.histograms.is_empty() {
        return Ok(None);
    }
    let path = dir.cited(&level.histograms).ok_or_else(|| {
        format!(
            "{}: results.json cites {:?}, which is not a name inside the run directory",
            dir.root().display(),
            level.histograms
        )
    })?;
    check_file(&path).map_err(|e| e.to_string())?;
    LevelRecording::load(&path)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Reads and parses `workload.yaml` (its dataset paths relative to the run directory).
///
/// # Errors
/// The file missing, not a regular file of bounded size, or not a valid workload: the message
/// names the file (and the line, for a parse error).
pub fn read_workload(dir: &RunDir) -> Result<Workload, String> {
    let p = dir.workload();
    let text = read_text(&p).map_err(|e| e.to_string())?;
    Workload::parse(&text, &p, dir.root()).map_err(|e| e.to_string())
}
