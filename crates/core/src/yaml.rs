//! Loading the YAML files users write (`slo.yaml`, `workload.yaml`, sim configs) with errors that
//! name the file, the line and the field, and say what was expected.
//!
//! Parsing is `serde-saphyr`; its messages already carry the line and column, and we prefix the
//! file name so the user can jump to it.

use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

/// A YAML file that could not be read or does not match its schema.
///
/// Displays as `FILE:LINE:COLUMN: what was wrong`, then the offending line with a caret under the
/// column, e.g.
///
/// ```text
/// slo.yaml:3:14: invalid u32 (expected a whole number from 0 to 4294967295)
///     3 |   threshold: -5
///       |              ^
/// ```
#[derive(Debug)]
pub struct YamlError {
    /// File that failed (or `<inline>` for strings).
    pub path: PathBuf,
    /// 1-based line and column of the error, when the parser knows them.
    pub location: Option<(u64, u64)>,
    /// What was wrong and what was expected, without the location.
    pub message: String,
    /// The offending source line, when known.
    pub source_line: Option<String>,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some((line, col)) => {
                write!(f, "{}:{line}:{col}: {}", self.path.display(), self.message)?;
                if let Some(src) = &self.source_line {
                    let gutter = line.to_string();
                    let pad = " ".repeat(gutter.len());
                    let caret = " ".repeat(col.saturating_sub(1) as usize);
                    write!(f, "\n    {gutter} | {src}\n    {pad} | {caret}^")?;
                }
                Ok(())
            }
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for YamlError {}

impl YamlError {
    /// An error about `path` as a whole (no position): unreadable, empty, inconsistent.
    pub fn new(path: &Path, message: impl Into<String>) -> YamlError {
        YamlError {
            path: path.to_path_buf(),
            location: None,
            message: message.into(),
            source_line: None,
        }
    }

    /// An error at `location` (1-based line and column; `None` or line 0 when unknown) of the
    /// YAML `text` read from `path`; the offending line is quoted from `text`.
    pub fn at(
        path: &Path,
        text: &str,
        location: Option<(u64, u64)>,
        message: impl Into<String>,
    ) -> YamlError {
        let location = location.filter(|&(l, _)| l > 0);
        YamlError {
            path: path.to_path_buf(),
            location,
            message: message.into(),
            source_line: location.and_then(|(l, _)| {
                text.lines()
                    .nth(usize::try_from(l - 1).ok()?)
                    .map(|s| s.trim_end().to_string())
            }),
        }
    }
}

/// Reads and deserialises a YAML file.
///
/// # Errors
/// [`YamlError`] naming `path` when the file cannot be read, is not valid YAML, or does not match
/// `T` (unknown field, wrong type, invalid value); it carries line and column.
pub fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<T, YamlError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| YamlError::new(path, format!("cannot read file: {e}")))?;
    parse_yaml(&text, path)
}

/// Deserialises YAML text; `origin` is used only in error messages.
///
/// # Errors
/// As [`load_yaml`].
pub fn parse_yaml<T: DeserializeOwned>(text: &str, origin: &Path) -> Result<T, YamlError> {
    serde_saphyr::from_str::<T>(text).map_err(|e| {
        let plain = e.without_snippet().to_string();
        let location = e
            .location()
            .map(|l| (l.line(), l.column()))
            .filter(|&(l, _)| l > 0);
        let message = match location {
            Some((l, c)) => plain
                .strip_suffix(&format!(" at line {l}, column {c}"))
                .unwrap_or(&plain)
                .to_string(),
            None => plain,
        };
        YamlError::at(origin, text, location, explain(&message))
    })
}

/// Adds what was expected to the parser's terse numeric messages ("invalid u32").
fn explain(message: &str) -> String {
    let expected = match message {
        "invalid u8" => "a whole number from 0 to 255",
        "invalid u16" => "a whole number from 0 to 65535",
        "invalid u32" => "a whole number from 0 to 4294967295",
        "invalid u64" | "invalid usize" => "a whole number of 0 or more",
        "invalid i32" | "invalid i64" => "a whole number",
        "invalid f32" | "invalid f64" => "a number",
        "invalid bool" => "true or false",
        _ => return message.to_string(),
    };
    format!("{message} (expected {expected})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        a: u32,
        b: Option<String>,
    }

    fn err(yaml: &str) -> String {
        parse_yaml::<T>(yaml, Path::new("work.yaml"))
            .unwrap_err()
            .to_string()
    }

    /// Every kind of error names the file, line and column once, states the cause once, and
    /// never carries the parser's own `error:` header or its `<input>` placeholder name.
    #[test]
    fn each_error_reads_once_with_file_line_and_column() {
        let cases = [
            (
                "a: 1\nb: x\nc: 3\n",
                "work.yaml:3:1: unknown field `c`, expected one of a, b",
                "c: 3",
            ),
            (
                "a: -5\n",
                "work.yaml:1:4: invalid u32 (expected a whole number from 0 to 4294967295)",
                "a: -5",
            ),
            (
                "a: eighty\n",
                "work.yaml:1:4: invalid u32 (expected a whole number from 0 to 4294967295)",
                "a: eighty",
            ),
            ("b: x\n", "work.yaml:1:1: missing field `a`", "b: x"),
        ];
        for (yaml, head, line) in cases {
            let e = err(yaml);
            let mut lines = e.lines();
            assert_eq!(lines.next(), Some(head), "{e}");
            assert!(
                lines
                    .next()
                    .is_some_and(|l| l.ends_with(&format!("| {line}"))),
                "{e}"
            );
            assert!(
                lines.next().is_some_and(|l| l.trim_end().ends_with('^')),
                "{e}"
            );
            assert!(!e.contains("error:") && !e.contains("<input>"), "{e}");
            let cause = head.split(": ").nth(1).unwrap();
            assert_eq!(e.matches(cause).count(), 1, "{e}");
        }
        // The caret sits under the column.
        let e = err("a: -5\n");
        let caret = e.lines().nth(2).unwrap();
        let src = e.lines().nth(1).unwrap();
        assert_eq!(caret.find('^'), src.find("-5"));
    }

    #[test]
    fn an_unreadable_file_names_it() {
        let e = load_yaml::<T>(Path::new("/nonexistent/x.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/nonexistent/x.yaml: cannot read file: "),
            "{e}"
        );
    }
}
