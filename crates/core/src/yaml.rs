//! Loading the YAML files users write (`slo.yaml`, `workload.yaml`, sim configs) with errors that
//! name the file, the line and the field, and say what was expected.
//!
//! Parsing is `serde-saphyr`; its messages already carry the line and column, and we prefix the
//! file name so the user can jump to it.

use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

/// A YAML file that could not be read or does not match its schema.
#[derive(Debug)]
pub struct YamlError {
    /// File that failed (or `<inline>` for strings).
    pub path: PathBuf,
    /// Human-readable reason, including line, column and field when the parser knows them.
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for YamlError {}

/// Reads and deserialises a YAML file.
///
/// # Errors
/// [`YamlError`] naming `path` when the file cannot be read, is not valid YAML, or does not match
/// `T` (unknown field, wrong type, invalid value); the message carries line and column.
pub fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<T, YamlError> {
    let text = std::fs::read_to_string(path).map_err(|e| YamlError {
        path: path.to_path_buf(),
        message: format!("cannot read file: {e}"),
    })?;
    parse_yaml(&text, path)
}

/// Deserialises YAML text; `origin` is used only in error messages.
///
/// # Errors
/// As [`load_yaml`].
pub fn parse_yaml<T: DeserializeOwned>(text: &str, origin: &Path) -> Result<T, YamlError> {
    serde_saphyr::from_str::<T>(text).map_err(|e| YamlError {
        path: origin.to_path_buf(),
        message: e.to_string(),
    })
}
