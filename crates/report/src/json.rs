//! `results.json`: the run's record, pretty-printed JSON of [`RunResult`], the file every other
//! format and `headroom report`, `diagnose --from` and `compare` read back.

use crate::export::Exporter;
use headroom_core::run::RunResult;
use headroom_core::run_dir::RESULTS;

/// The `results.json` exporter.
pub struct Json;

impl Exporter for Json {
    fn name(&self) -> &'static str {
        "json"
    }

    fn file_name(&self) -> &'static str {
        RESULTS
    }

    fn render(&self, run: &RunResult) -> std::io::Result<Vec<u8>> {
        serde_json::to_vec_pretty(run).map_err(std::io::Error::other)
    }

    fn is_record(&self) -> bool {
        true
    }
}
