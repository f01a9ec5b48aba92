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
    /// The offending source line, when known, as a short redacted excerpt
    /// ([`crate::excerpt`]).
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
                // Short and redacted: the file may be a link to a secret (crate::excerpt).
                text.lines()
                    .nth(usize::try_from(l - 1).ok()?)
                    .map(|s| crate::excerpt(s.trim_end()))
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
    let text = crate::input_file::read_to_string(path, crate::input_file::MAX_CONFIG_BYTES)
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
        YamlError::at(origin, text, location, explain(&quoted_excerpts(&message)))
    })
}

/// `message` with every `` `quoted` `` part (the parser quotes the input's keys and values)
/// shortened and redacted by [`crate::excerpt`]: the file may be a link to a secret.
fn quoted_excerpts(message: &str) -> String {
    let mut out = String::new();
    for (i, part) in message.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        // Odd parts lie between backticks.
        if i % 2 == 1 {
            out.push_str(&crate::excerpt(part));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// Line and column (1-based) of the key named by `field` in the YAML document `text`: a dotted
/// path with `[i]` for sequence items, as validation messages name fields
/// (`budget.window`, `objectives.chat.ttft.p95`, `spec.objectives[1].target`). Keys may hold
/// dots themselves (`objectives.rag.v2.error_rate` finds the class `rag.v2`).
///
/// When the full path is not in the text (a field written differently, or a default), the
/// nearest parent that is gives the location. `None` when nothing matches or `text` is not
/// YAML; locating never fails otherwise.
pub fn field_location(text: &str, field: &str) -> Option<(u64, u64)> {
    document_field_location(text, 0, field)
}

/// As [`field_location`], in the `doc`-th document (0-based) of a multi-document stream
/// (`---` separated, as OpenSLO files are).
pub fn document_field_location(text: &str, doc: usize, field: &str) -> Option<(u64, u64)> {
    let docs: Vec<locate::Node> = serde_saphyr::from_multiple(text).ok()?;
    let root = docs.get(doc)?;
    let mut path = field;
    loop {
        if let Some(l) = root.find(path) {
            return Some(l);
        }
        let cut = path.rfind(['.', '['])?;
        path = &path[..cut];
    }
}

/// A YAML tree that keeps only keys, their locations and the shape, for [`field_location`].
mod locate {
    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_saphyr::Spanned;
    use std::fmt;

    pub(super) enum Node {
        /// Keys (as text), where each key is written, and its value.
        Map(Vec<(String, (u64, u64), Node)>),
        /// Items and where each starts.
        Seq(Vec<((u64, u64), Node)>),
        Leaf,
    }

    fn at<T>(s: &Spanned<T>) -> (u64, u64) {
        (s.referenced.line(), s.referenced.column())
    }

    impl Node {
        /// Location of `path` below this node.
        pub(super) fn find(&self, path: &str) -> Option<(u64, u64)> {
            match self {
                Node::Map(entries) => {
                    // longest keys first, so `rag.v2` wins over `rag`
                    let mut order: Vec<&(String, (u64, u64), Node)> = entries.iter().collect();
                    order.sort_by_key(|e| std::cmp::Reverse(e.0.len()));
                    for (k, loc, v) in order {
                        let Some(rest) = path.strip_prefix(k.as_str()) else {
                            continue;
                        };
                        if rest.is_empty() {
                            return Some(*loc).filter(|l| l.0 > 0);
                        }
                        let found = if let Some(r) = rest.strip_prefix('.') {
                            v.find(r)
                        } else if rest.starts_with('[') {
                            v.find(rest)
                        } else {
                            None
                        };
                        if found.is_some() {
                            return found;
                        }
                    }
                    None
                }
                Node::Seq(items) => {
                    let inner = path.strip_prefix('[')?;
                    let (i, rest) = inner.split_once(']')?;
                    let (loc, v) = items.get(i.parse::<usize>().ok()?)?;
                    if rest.is_empty() {
                        Some(*loc).filter(|l| l.0 > 0)
                    } else if let Some(r) = rest.strip_prefix('.') {
                        v.find(r)
                    } else {
                        v.find(rest)
                    }
                }
                Node::Leaf => None,
            }
        }
    }

    /// Any scalar key, as text.
    struct Key(String);

    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Key;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a scalar key")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                    Ok(Key(v.to_owned()))
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
                    Ok(Key(v.to_string()))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                    Ok(Key(v.to_string()))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                    Ok(Key(v.to_string()))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
                    Ok(Key(v.to_string()))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                    Ok(Key(String::new()))
                }
            }
            d.deserialize_any(V)
        }
    }

    impl<'de> Deserialize<'de> for Node {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Node;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any YAML value")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Node, A::Error> {
                    let mut out = Vec::new();
                    while let Some(k) = m.next_key::<Spanned<Key>>()? {
                        let v = m.next_value::<Node>()?;
                        out.push((k.value.0.clone(), at(&k), v));
                    }
                    Ok(Node::Map(out))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Node, A::Error> {
                    let mut out = Vec::new();
                    while let Some(item) = s.next_element::<Spanned<Node>>()? {
                        let loc = at(&item);
                        out.push((loc, item.value));
                    }
                    Ok(Node::Seq(out))
                }
                fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Node, D2::Error> {
                    Node::deserialize(d)
                }
                fn visit_none<E: de::Error>(self) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
                fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
                    Ok(Node::Leaf)
                }
            }
            d.deserialize_any(V)
        }
    }
}

/// Adds what was expected to the parser's terse numeric messages ("invalid u32").
fn explain(message: &str) -> String {
    // The parser's own wording names its options and budgets, which a user cannot set.
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return format!("duplicate key {key} (each key may appear once in a mapping)");
    }
    if let Some(rest) = message.strip_prefix("budget breached: ") {
        return format!(
            "the file is larger or more deeply nested than a configuration file may be (parser limit reached: {rest})"
        );
    }
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

    #[test]
    fn parser_limits_and_duplicate_keys_read_as_the_users_problem() {
        let e = err("a: 1\na: 2\n");
        assert!(e.contains("duplicate key"), "{e}");
        assert!(!e.contains("DuplicateKeyPolicy"), "{e}");
        let big: String = (0..300_000).map(|i| format!("k{i}: 1\n")).collect();
        let e = parse_yaml::<std::collections::BTreeMap<String, u32>>(&big, Path::new("w.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger or more deeply nested"), "{e}");
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
    fn fields_are_located_at_their_keys() {
        let text = "objectives:\n  \"*\": {error_rate: 1%}\n  rag.v2:\n    ttft: {p95: 1s}\n    error_rate: 0\nbudget: {window: 30d, target: \"0\"}\nlist:\n  - a: 1\n  - {b: 2, c: 3}\n";
        for (field, want) in [
            ("objectives", Some((1, 1))),
            ("objectives.*.error_rate", Some((2, 9))),
            ("objectives.rag.v2", Some((3, 3))),
            ("objectives.rag.v2.error_rate", Some((5, 5))),
            ("objectives.rag.v2.ttft.p95", Some((4, 12))),
            // p99 is not written: the nearest parent, ttft
            ("objectives.rag.v2.ttft.p99", Some((4, 5))),
            ("budget.target", Some((6, 23))),
            ("budget.window", Some((6, 10))),
            ("list[0].a", Some((8, 5))),
            ("list[1]", Some((9, 5))),
            ("list[1].c", Some((9, 12))),
            ("list[7].c", Some((7, 1))),
            ("absent_for", None),
        ] {
            assert_eq!(field_location(text, field), want, "{field}");
        }
        assert_eq!(field_location(": : :\n - [", "a"), None);
        let stream = "a: 1\n---\nspec:\n  objectives:\n    - {op: gt}\n";
        assert_eq!(
            document_field_location(stream, 1, "spec.objectives[0].op"),
            Some((5, 8))
        );
        assert_eq!(document_field_location(stream, 2, "spec"), None);
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
