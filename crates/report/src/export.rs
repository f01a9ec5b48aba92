//! The files a run directory holds about its results, one format each, behind one trait (as
//! hyperfine's `export/`): [`EXPORTERS`] lists them in the order they are written, and
//! [`crate::write_run_files`] and [`crate::rerender_run_files`] write whatever it lists. A new
//! format is one file with an [`Exporter`] (a [`Text`] for a text rendering) and one entry in
//! the list (and its name in `headroom_core::run_dir::RUN_FILES`, which a test checks against
//! the list).
//!
//! An exporter knows no path: it renders bytes and names its file; the writer puts them into
//! the run directory ([`headroom_core::run_dir::RunDir`]).

use headroom_core::run::RunResult;

/// One format of a run's results.
pub trait Exporter: Sync {
    /// Short name of the format (`json`, `csv`, `markdown`, `html`).
    fn name(&self) -> &'static str;

    /// The file it is written to in a run directory (`report.md`).
    fn file_name(&self) -> &'static str;

    /// The file's bytes for `run`.
    ///
    /// # Errors
    /// When `run` cannot be encoded in the format.
    fn render(&self, run: &RunResult) -> std::io::Result<Vec<u8>>;

    /// Whether the file is the record itself (`results.json`), which a rendering again
    /// (`headroom report`) leaves as it is, rather than a rendering derived from it.
    fn is_record(&self) -> bool {
        false
    }
}

/// A format rendered to text by one function (the renderings: CSV, Markdown, HTML).
pub struct Text {
    /// [`Exporter::name`].
    pub name: &'static str,
    /// [`Exporter::file_name`].
    pub file_name: &'static str,
    /// The text of the file for a run.
    pub render: fn(&RunResult) -> String,
}

impl Exporter for Text {
    fn name(&self) -> &'static str {
        self.name
    }

    fn file_name(&self) -> &'static str {
        self.file_name
    }

    fn render(&self, run: &RunResult) -> std::io::Result<Vec<u8>> {
        Ok((self.render)(run).into_bytes())
    }
}

/// Every format, in the order written: the record first (small and complete, so a failure
/// later loses no result), the renderings after it.
pub static EXPORTERS: [&dyn Exporter; 4] = [
    &crate::json::Json,
    &crate::csv::EXPORTER,
    &crate::markdown::EXPORTER,
    &crate::html::EXPORTER,
];

#[cfg(test)]
mod tests {
    /// The list and the run directory's layout name the same files in the same order.
    #[test]
    fn the_exporters_write_the_run_files_in_order() {
        let names: Vec<&str> = super::EXPORTERS.iter().map(|e| e.file_name()).collect();
        assert_eq!(names, headroom_core::run_dir::RUN_FILES);
        let records: Vec<&str> = super::EXPORTERS
            .iter()
            .filter(|e| e.is_record())
            .map(|e| e.name())
            .collect();
        assert_eq!(records, ["json"]);
    }
}
