//! Parser for the Prometheus text exposition format 0.0.4 and OpenMetrics 1.0.
//!
//! What lives here: turning one `/metrics` body into [`Family`]s of [`Sample`]s. What does not:
//! knowing what any metric *means* (that is [`crate::adapter`]) or combining scrapes over time
//! (that is [`crate::window`]).
//!
//! The parser is lenient where real producers are sloppy and exact where a number depends on it
//! (the pitfalls are listed in `reference/metrics.md` §7):
//!
//! * metric names may contain colons (`vllm:prompt_tokens_total`), and UTF-8 names may be quoted
//!   inside the braces (`{"my.metric","a"="b"} 1`, Prometheus 3 escaping);
//! * `\r\n`, tabs, repeated spaces, a missing final newline, a trailing comma before `}` and `{}`
//!   are accepted;
//! * samples need no `# TYPE` (untyped, as in dcgm output whose HELP/TYPE lines were stripped).
//!   Suffixes (`_bucket`, `_sum`, `_count`, `_total`, `_created`, …) are only used to group a
//!   sample into a family when a `# TYPE` line says the family has that type;
//! * in 0.0.4 the `<name>_created` series of Python clients are separate gauge families; they are
//!   flagged with [`Family::created_companion`] so that nobody mistakes them for data. In
//!   OpenMetrics `_created` samples live inside their counter/histogram/summary family;
//! * label values unescape `\\`, `\"` and `\n`; HELP text unescapes `\\` and `\n` (and `\"` in
//!   OpenMetrics);
//! * values are Go-`ParseFloat`-style floats: `1`, `1.0`, `-3e-05`, `+Inf`, `-Inf`, `NaN`
//!   (infinities and NaN case-insensitively);
//! * timestamps are integer milliseconds in 0.0.4 and float seconds in OpenMetrics; both are
//!   stored as seconds in [`Sample::timestamp_s`];
//! * OpenMetrics exemplars (`… 3 # {trace_id="abc"} 0.43`) are skipped; `# UNIT` is kept; `# EOF`
//!   ends the document;
//! * dcgm-exporter "blank" sentinels (an integer ≥ `0x7ffffffffffffff0`, or a float ≥ 2^47, on a
//!   `DCGM_*`/`dcgm_*` metric) mean "no value" and are dropped with a warning;
//! * duplicate series (same sample name and the same label set, `le` included) are a producer
//!   bug: the last one is kept in [`Family::samples`] with a warning, and every repeat is listed
//!   in [`Family::duplicates`] so that readers that must not guess (the adapters, see
//!   [`crate::quality`]) reject the family. The same name with other labels, or `_bucket`
//!   samples that differ only in `le`, are distinct series.
//!
//! Memory is bounded on hostile input by [`Limits`]: every limit that is hit is an error, never a
//! panic and never an unbounded allocation.

use std::collections::HashMap;
use std::fmt;

/// Upper bounds the parser enforces; exceeding one is a [`ParseError`].
///
/// The defaults are generous for real servers (a vLLM scrape is ≈ 50 KB, ≈ 600 samples, ≤ 40
/// labels per sample on `vllm:cache_config_info`) and keep memory proportional to a few times
/// the body size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest body accepted, in bytes. Default 32 MiB.
    pub max_body_bytes: usize,
    /// Longest line accepted, in bytes (after removing `\r`). Default 64 KiB.
    pub max_line_bytes: usize,
    /// Most labels on one sample. Default 128.
    pub max_labels_per_sample: usize,
    /// Most samples in one body. Default 1 000 000.
    pub max_samples: usize,
    /// Most families (distinct metric names) in one body. Default 100 000.
    pub max_families: usize,
    /// Most warnings kept as text; further ones are only counted. Default 100.
    pub max_warnings: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 32 << 20,
            max_line_bytes: 64 << 10,
            max_labels_per_sample: 128,
            max_samples: 1_000_000,
            max_families: 100_000,
            max_warnings: 100,
        }
    }
}

/// The exposition format of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Decide from the body: OpenMetrics when its last non-empty line is `# EOF`, otherwise
    /// text 0.0.4.
    Auto,
    /// Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Text004,
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
}

/// The type of a metric family as declared by `# TYPE` (or [`MetricType::Untyped`] without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricType {
    /// Monotonic counter (samples `<n>` in 0.0.4 where the family name carries `_total`;
    /// `<n>_total` and `<n>_created` in OpenMetrics).
    Counter,
    /// Gauge.
    Gauge,
    /// Classic histogram: `<n>_bucket{le}`, `<n>_sum`, `<n>_count` (+ `<n>_created` in OM).
    Histogram,
    /// OpenMetrics gauge histogram: `<n>_bucket{le}`, `<n>_gsum`, `<n>_gcount`.
    GaugeHistogram,
    /// Summary: `<n>{quantile}`, `<n>_sum`, `<n>_count` (+ `<n>_created` in OM).
    Summary,
    /// OpenMetrics info: `<n>_info` with value 1.
    Info,
    /// OpenMetrics state set: `<n>{<n>="state"}` with value 0 or 1.
    StateSet,
    /// `untyped` (0.0.4), `unknown` (OpenMetrics), or no `# TYPE` line at all.
    Untyped,
}

impl MetricType {
    fn from_token(token: &str) -> Option<MetricType> {
        Some(match token {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            "untyped" | "unknown" => MetricType::Untyped,
            _ => return None,
        })
    }

    /// Whether a sample named `<family><suffix>` belongs to a family of this type.
    fn admits_suffix(self, suffix: &str) -> bool {
        match self {
            MetricType::Counter => matches!(suffix, "_total" | "_created"),
            MetricType::Histogram => matches!(suffix, "_bucket" | "_sum" | "_count" | "_created"),
            MetricType::GaugeHistogram => matches!(suffix, "_bucket" | "_gsum" | "_gcount"),
            MetricType::Summary => matches!(suffix, "_sum" | "_count" | "_created"),
            MetricType::Info => suffix == "_info",
            MetricType::Gauge | MetricType::StateSet | MetricType::Untyped => false,
        }
    }
}

/// Suffixes that may separate a sample name from its family name.
const SUFFIXES: [&str; 8] = [
    "_bucket", "_count", "_sum", "_total", "_created", "_info", "_gcount", "_gsum",
];

/// A label set, sorted by label name, without duplicate names.
///
/// Producers do not agree on label order (`prometheus_client` sorts, dcgm-exporter uses its
/// template order), so labels are always compared in this sorted form.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(from = "Vec<(String, String)>")]
pub struct Labels(Vec<(String, String)>);

impl From<Vec<(String, String)>> for Labels {
    fn from(pairs: Vec<(String, String)>) -> Self {
        Labels::from_pairs(pairs)
    }
}

impl Labels {
    /// An empty label set.
    pub fn new() -> Self {
        Labels(Vec::new())
    }

    /// Builds a label set from pairs; later duplicates of a name replace earlier ones.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut labels = Labels::new();
        for (k, v) in pairs {
            labels.insert(k.into(), v.into());
        }
        labels
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Sets `name` to `value`, replacing an existing value. Returns the old value.
    pub fn insert(&mut self, name: String, value: String) -> Option<String> {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&name)) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    /// Removes label `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(i) => Some(self.0.remove(i).1),
            Err(_) => None,
        }
    }

    /// The label set without the labels named in `names`.
    pub fn without(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| !names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// The label set restricted to the labels named in `names`.
    pub fn only(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// `(name, value)` pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Labels {
    /// Writes `{a="x",b="y"}` (escaped as in the text format), or nothing for an empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}=\"")?;
            for c in v.chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '"' => f.write_str("\\\"")?,
                    '\n' => f.write_str("\\n")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The full sample name, suffix included (`vllm:e2e_request_latency_seconds_bucket`).
    pub name: String,
    /// Labels, sorted by name.
    pub labels: Labels,
    /// The value; may be NaN or ±Inf.
    pub value: f64,
    /// The sample's own timestamp in Unix seconds, if the producer wrote one (0.0.4 writes
    /// integer milliseconds, OpenMetrics float seconds; both are converted to seconds).
    pub timestamp_s: Option<f64>,
}

/// A metric family: a name, its declared type, HELP/UNIT text and its samples in body order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Family name as declared by `# TYPE`/`# HELP` or, for undeclared samples, the sample name.
    pub name: String,
    /// Declared type, or [`MetricType::Untyped`].
    pub kind: MetricType,
    /// Unescaped HELP text (may be empty or carry trailing spaces, as real producers write it).
    pub help: Option<String>,
    /// OpenMetrics `# UNIT`.
    pub unit: Option<String>,
    /// Whether a `# TYPE` line declared this family.
    pub declared: bool,
    /// True for a 0.0.4 `<n>_created` gauge family that only holds the creation time (Unix
    /// seconds) of the counter, histogram or summary `<n>`: never data (`metrics.md` §1.1).
    pub created_companion: bool,
    /// Samples in body order (duplicates removed, the last one kept).
    pub samples: Vec<Sample>,
    /// Series that appeared more than once in the body (same sample name and label set), with
    /// every value in body order. Empty for a correct producer.
    pub duplicates: Vec<Duplicate>,
}

/// One series written more than once in one body: the exposition formats allow each series once
/// per scrape (Prometheus text format 0.0.4, OpenMetrics 1.0 "MetricFamilies MUST NOT have
/// duplicate series"), so which value is true cannot be known.
#[derive(Debug, Clone, PartialEq)]
pub struct Duplicate {
    /// Sample name (`vllm:request_success_total`, `vllm:e2e_request_latency_seconds_bucket`).
    pub name: String,
    /// The label set shared by the repeats, sorted by name.
    pub labels: Labels,
    /// Every value written for the series, in body order (at least two).
    pub values: Vec<f64>,
}

/// A parsed body.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// The format the body was parsed as (never [`Format::Auto`]).
    pub format: Option<Format>,
    /// Families in order of first appearance.
    pub families: Vec<Family>,
    /// Leniencies applied (duplicate series, a TYPE after samples, dropped DCGM blanks, …), at
    /// most [`Limits::max_warnings`] of them.
    pub warnings: Vec<String>,
    /// Number of warnings beyond those kept in `warnings`.
    pub warnings_dropped: usize,
    index: HashMap<String, usize>,
}

/// Why a body could not be parsed. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line is malformed; `excerpt` holds a short redacted excerpt of it
    /// ([`headroom_core::excerpt`]).
    #[error("line {line}: {message} (in `{excerpt}`)")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What was expected.
        message: String,
        /// Start of the offending line.
        excerpt: String,
    },
    /// A [`Limits`] bound was exceeded.
    #[error("{what} exceeds the limit of {limit} (at line {line})")]
    Limit {
        /// 1-based line number where the limit was hit (0 for the body size).
        line: usize,
        /// Which bound.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
}

/// Parses a body in either format with the default [`Limits`] (format detected).
pub fn parse(body: &str) -> Result<Exposition, ParseError> {
    parse_with(body, Format::Auto, &Limits::default())
}

/// Parses a body with an explicit format and limits.
///
/// Errors: [`ParseError::Syntax`] for a malformed sample, label or metadata line, and
/// [`ParseError::Limit`] when a [`Limits`] bound is exceeded. Lines after `# EOF` are ignored with
/// a warning.
pub fn parse_with(body: &str, format: Format, limits: &Limits) -> Result<Exposition, ParseError> {
    if body.len() > limits.max_body_bytes {
        return Err(ParseError::Limit {
            line: 0,
            what: "body size in bytes",
            limit: limits.max_body_bytes,
        });
    }
    let format = match format {
        Format::Auto => detect_format(body),
        f => f,
    };
    let mut p = Parser {
        out: Exposition {
            format: Some(format),
            ..Exposition::default()
        },
        om: format == Format::OpenMetrics,
        limits,
        samples: 0,
        last_family: None,
        dcgm_blanks: 0,
    };
    let mut line_no = 0usize;
    let mut lines = body.split('\n');
    for raw in lines.by_ref() {
        line_no += 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.len() > limits.max_line_bytes {
            return Err(ParseError::Limit {
                line: line_no,
                what: "line length in bytes",
                limit: limits.max_line_bytes,
            });
        }
        let line = raw.trim_matches(|c| c == ' ' || c == '\t');
        if line.is_empty() {
            continue;
        }
        if line.starts_with('#') {
            // HELP text keeps its trailing spaces (vLLM's `http_request_duration_seconds`).
            let comment = raw.trim_start_matches([' ', '\t']);
            if p.comment(comment, line_no)? {
                break;
            }
        } else {
            p.sample(line, line_no)?;
        }
    }
    if lines.any(|l| !l.trim().is_empty()) {
        p.warn(format!("content after `# EOF` (line {line_no}) ignored"));
    }
    if p.dcgm_blanks > 0 {
        let n = p.dcgm_blanks;
        p.warn(format!(
            "{n} dcgm-exporter blank sentinel value(s) treated as missing"
        ));
    }
    p.finish();
    Ok(p.out)
}

/// OpenMetrics when the last non-empty line is `# EOF`, text 0.0.4 otherwise.
pub fn detect_format(body: &str) -> Format {
    let last = body
        .trim_end_matches(['\n', '\r', ' ', '\t'])
        .rsplit('\n')
        .next()
        .unwrap_or("");
    if last.trim() == "# EOF" {
        Format::OpenMetrics
    } else {
        Format::Text004
    }
}

/// Parses a bucket bound or quantile label value (`"1"`, `"1.0"`, `"+Inf"`, `"0.005"`) as a number.
/// Returns `None` for anything that is not a float.
pub fn parse_le(s: &str) -> Option<f64> {
    parse_value(s.trim())
}

struct Parser<'l> {
    out: Exposition,
    om: bool,
    limits: &'l Limits,
    samples: usize,
    last_family: Option<usize>,
    dcgm_blanks: usize,
}

fn syntax(line: usize, text: &str, message: impl Into<String>) -> ParseError {
    // Short and redacted: a "scrape" may be a link to a secret file.
    let excerpt = headroom_core::excerpt(text);
    ParseError::Syntax {
        line,
        message: message.into(),
        excerpt,
    }
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}
fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}
fn is_label_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}
fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Go-`ParseFloat`-compatible enough for exposition values: decimal and exponent forms, `+Inf`,
/// `-Inf`, `Inf`, `NaN`, case-insensitive. Rejects empty strings, hex floats and `_` separators.
fn parse_value(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 64 {
        return None;
    }
    // Rust accepts "inf", "infinity" and "nan" in any case, with an optional sign; it rejects
    // underscores and hex. That matches Go's ParseFloat for everything producers emit.
    if !b
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-'))
    {
        return None;
    }
    s.parse::<f64>().ok()
}

impl Parser<'_> {
    fn warn(&mut self, w: String) {
        if self.out.warnings.len() < self.limits.max_warnings {
            self.out.warnings.push(w);
        } else {
            self.out.warnings_dropped += 1;
        }
    }

    fn new_family(
        &mut self,
        name: &str,
        kind: MetricType,
        declared: bool,
        line: usize,
    ) -> Result<usize, ParseError> {
        if self.out.families.len() >= self.limits.max_families {
            return Err(ParseError::Limit {
                line,
                what: "number of metric families",
                limit: self.limits.max_families,
            });
        }
        let idx = self.out.families.len();
        self.out.families.push(Family {
            name: name.to_owned(),
            kind,
            help: None,
            unit: None,
            declared,
            created_companion: false,
            samples: Vec::new(),
            duplicates: Vec::new(),
        });
        self.out.index.insert(name.to_owned(), idx);
        Ok(idx)
    }

    /// Handles a `#` line. Returns true at `# EOF`.
    fn comment(&mut self, line: &str, line_no: usize) -> Result<bool, ParseError> {
        let rest = line[1..].trim_start_matches([' ', '\t']);
        let (keyword, after) = split_token(rest);
        match keyword {
            "EOF" if after.trim().is_empty() => return Ok(true),
            "HELP" | "TYPE" | "UNIT" => {}
            _ => return Ok(false), // a plain comment
        }
        let (name, text) = metadata_name(after).ok_or_else(|| {
            syntax(
                line_no,
                line,
                format!("expected a metric name after `# {keyword}`"),
            )
        })?;
        match keyword {
            "TYPE" => {
                let token = text.trim_matches([' ', '\t']);
                let kind = match MetricType::from_token(token) {
                    Some(k) => k,
                    None => {
                        let t: String = token.chars().take(40).collect();
                        self.warn(format!(
                            "line {line_no}: unknown type `{t}` for `{name}`, treated as untyped"
                        ));
                        MetricType::Untyped
                    }
                };
                match self.out.index.get(name.as_str()).copied() {
                    Some(i) => {
                        let fam = &mut self.out.families[i];
                        if fam.declared {
                            let n = fam.name.clone();
                            self.warn(format!(
                                "line {line_no}: second TYPE line for `{n}` ignored"
                            ));
                        } else {
                            let had_samples = !fam.samples.is_empty();
                            fam.kind = kind;
                            fam.declared = true;
                            if had_samples {
                                self.warn(format!(
                                    "line {line_no}: TYPE for `{name}` after its samples"
                                ));
                            }
                        }
                    }
                    None => {
                        self.new_family(&name, kind, true, line_no)?;
                    }
                }
            }
            "HELP" => {
                // 0.0.4: a single separator space; keep trailing spaces, they are part of the text.
                let text = text.strip_prefix([' ', '\t']).unwrap_or(text);
                let help = unescape_help(text, self.om);
                let i = match self.out.index.get(name.as_str()).copied() {
                    Some(i) => i,
                    None => self.new_family(&name, MetricType::Untyped, false, line_no)?,
                };
                self.out.families[i].help = Some(help);
            }
            _ => {
                let unit = text.trim_matches([' ', '\t']).to_owned();
                let i = match self.out.index.get(name.as_str()).copied() {
                    Some(i) => i,
                    None => self.new_family(&name, MetricType::Untyped, false, line_no)?,
                };
                self.out.families[i].unit = Some(unit);
            }
        }
        Ok(false)
    }

    /// Finds (or creates) the family a sample named `name` belongs to.
    fn family_for(&mut self, name: &str, line_no: usize) -> Result<usize, ParseError> {
        if let Some(i) = self.last_family {
            let f = &self.out.families[i];
            if let Some(rest) = name.strip_prefix(f.name.as_str())
                && (rest.is_empty() || f.kind.admits_suffix(rest))
            {
                return Ok(i);
            }
        }
        if let Some(&i) = self.out.index.get(name) {
            return Ok(i);
        }
        for suffix in SUFFIXES {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some(&i) = self.out.index.get(base)
            {
                let f = &self.out.families[i];
                if f.declared && f.kind.admits_suffix(suffix) {
                    return Ok(i);
                }
            }
        }
        self.new_family(name, MetricType::Untyped, false, line_no)
    }

    fn sample(&mut self, line: &str, line_no: usize) -> Result<(), ParseError> {
        if self.samples >= self.limits.max_samples {
            return Err(ParseError::Limit {
                line: line_no,
                what: "number of samples",
                limit: self.limits.max_samples,
            });
        }
        let b = line.as_bytes();
        let mut pos = 0usize;
        let mut name: Option<String> = None;
        if is_name_start(b[0]) {
            while pos < b.len() && is_name_char(b[pos]) {
                pos += 1;
            }
            name = Some(line[..pos].to_owned());
        } else if b[0] != b'{' {
            return Err(syntax(
                line_no,
                line,
                "expected a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or `{`",
            ));
        }
        let after_name = pos;
        while pos < b.len() && is_ws(b[pos]) {
            pos += 1;
        }
        let mut labels = Labels::new();
        let mut separated = pos > after_name;
        if pos < b.len() && b[pos] == b'{' {
            pos = self.labels(line, pos + 1, line_no, &mut name, &mut labels)?;
            separated = pos < b.len() && is_ws(b[pos]);
        }
        let name = name.ok_or_else(|| syntax(line_no, line, "sample has no metric name"))?;
        // value
        if !separated {
            return Err(syntax(
                line_no,
                line,
                format!("expected a space after `{name}`"),
            ));
        }
        while pos < b.len() && is_ws(b[pos]) {
            pos += 1;
        }
        let vstart = pos;
        while pos < b.len() && !is_ws(b[pos]) {
            pos += 1;
        }
        let vtok = &line[vstart..pos];
        if vtok.is_empty() {
            return Err(syntax(line_no, line, format!("missing value for `{name}`")));
        }
        let value = parse_value(vtok).ok_or_else(|| {
            syntax(
                line_no,
                line,
                format!(
                    "value `{vtok}` is not a float (expected e.g. `1`, `1.5e-3`, `+Inf`, `NaN`)"
                ),
            )
        })?;
        // optional timestamp, optional exemplar
        while pos < b.len() && is_ws(b[pos]) {
            pos += 1;
        }
        let mut timestamp_s = None;
        if pos < b.len() && b[pos] != b'#' {
            let tstart = pos;
            while pos < b.len() && !is_ws(b[pos]) {
                pos += 1;
            }
            let ttok = &line[tstart..pos];
            timestamp_s = Some(self.timestamp(ttok).ok_or_else(|| {
                syntax(
                    line_no,
                    line,
                    format!(
                        "timestamp `{ttok}` is not a number ({})",
                        if self.om {
                            "OpenMetrics: float seconds"
                        } else {
                            "text 0.0.4: integer milliseconds"
                        }
                    ),
                )
            })?);
            while pos < b.len() && is_ws(b[pos]) {
                pos += 1;
            }
        }
        if pos < b.len() {
            if b[pos] == b'#' {
                // Exemplar (`# {trace_id="…"} 0.43 [ts]`): skipped. Checked only for its opening.
                let ex = line[pos + 1..].trim_start();
                if !ex.starts_with('{') {
                    return Err(syntax(
                        line_no,
                        line,
                        "expected an exemplar `# {labels} value` after the value",
                    ));
                }
            } else {
                return Err(syntax(
                    line_no,
                    line,
                    "unexpected text after the value and timestamp",
                ));
            }
        }
        if is_dcgm_blank(&name, vtok, value) {
            self.dcgm_blanks += 1;
            return Ok(());
        }
        let fi = self.family_for(&name, line_no)?;
        self.last_family = Some(fi);
        self.out.families[fi].samples.push(Sample {
            name,
            labels,
            value,
            timestamp_s,
        });
        self.samples += 1;
        Ok(())
    }

    fn timestamp(&self, tok: &str) -> Option<f64> {
        if self.om {
            let v = parse_value(tok)?;
            v.is_finite().then_some(v)
        } else if let Ok(ms) = tok.parse::<i64>() {
            Some(ms as f64 / 1000.0)
        } else {
            // Lenient: some exporters write float milliseconds.
            let v = parse_value(tok)?;
            v.is_finite().then_some(v / 1000.0)
        }
    }

    /// Parses labels after `{`; returns the position after `}`.
    fn labels(
        &mut self,
        line: &str,
        mut pos: usize,
        line_no: usize,
        name: &mut Option<String>,
        labels: &mut Labels,
    ) -> Result<usize, ParseError> {
        let b = line.as_bytes();
        let mut pairs: Vec<(String, String)> = Vec::new();
        loop {
            while pos < b.len() && is_ws(b[pos]) {
                pos += 1;
            }
            if pos >= b.len() {
                return Err(syntax(
                    line_no,
                    line,
                    "unterminated label set: expected `}`",
                ));
            }
            if b[pos] == b'}' {
                pos += 1;
                break;
            }
            // label name: bare or quoted (UTF-8 escaping); a quoted string not followed by `=`
            // is the metric name.
            let lname: String;
            if b[pos] == b'"' {
                let (s, next) = quoted(line, pos + 1)
                    .ok_or_else(|| syntax(line_no, line, "unterminated quoted string"))?;
                pos = next;
                let mut p2 = pos;
                while p2 < b.len() && is_ws(b[p2]) {
                    p2 += 1;
                }
                if p2 < b.len() && (b[p2] == b',' || b[p2] == b'}') {
                    if name.is_some() {
                        return Err(syntax(
                            line_no,
                            line,
                            "metric name given twice (before and inside the braces)",
                        ));
                    }
                    *name = Some(s);
                    pos = p2;
                    if b[pos] == b',' {
                        pos += 1;
                    }
                    continue;
                }
                lname = s;
            } else if is_label_start(b[pos]) {
                let s = pos;
                while pos < b.len() && is_label_char(b[pos]) {
                    pos += 1;
                }
                lname = line[s..pos].to_owned();
            } else {
                return Err(syntax(
                    line_no,
                    line,
                    "expected a label name (`[a-zA-Z_][a-zA-Z0-9_]*`) or `}`",
                ));
            }
            while pos < b.len() && is_ws(b[pos]) {
                pos += 1;
            }
            if pos >= b.len() || b[pos] != b'=' {
                return Err(syntax(
                    line_no,
                    line,
                    format!("expected `=` after label name `{lname}`"),
                ));
            }
            pos += 1;
            while pos < b.len() && is_ws(b[pos]) {
                pos += 1;
            }
            if pos >= b.len() || b[pos] != b'"' {
                return Err(syntax(
                    line_no,
                    line,
                    format!("expected a double-quoted value for label `{lname}`"),
                ));
            }
            let (value, next) = quoted(line, pos + 1).ok_or_else(|| {
                syntax(
                    line_no,
                    line,
                    format!("unterminated value for label `{lname}`"),
                )
            })?;
            pos = next;
            if pairs.len() >= self.limits.max_labels_per_sample {
                return Err(ParseError::Limit {
                    line: line_no,
                    what: "number of labels on one sample",
                    limit: self.limits.max_labels_per_sample,
                });
            }
            pairs.push((lname, value));
            while pos < b.len() && is_ws(b[pos]) {
                pos += 1;
            }
            if pos < b.len() && b[pos] == b',' {
                pos += 1;
            } else if pos < b.len() && b[pos] == b'}' {
                pos += 1;
                break;
            } else {
                return Err(syntax(
                    line_no,
                    line,
                    "expected `,` or `}` after a label value",
                ));
            }
        }
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for w in pairs.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(syntax(
                    line_no,
                    line,
                    format!("label `{}` appears twice", w[0].0),
                ));
            }
        }
        *labels = Labels(pairs);
        Ok(pos)
    }

    fn finish(&mut self) {
        // Duplicate series: keep the last.
        let mut dup_warnings = Vec::new();
        for fam in &mut self.out.families {
            if fam.samples.len() < 2 {
                continue;
            }
            let mut seen: HashMap<(&str, &Labels), usize> =
                HashMap::with_capacity(fam.samples.len());
            let mut drop = vec![false; fam.samples.len()];
            let mut any = false;
            // index into `dups` per repeated series
            let mut dup_of: HashMap<(&str, &Labels), usize> = HashMap::new();
            let mut dups: Vec<Duplicate> = Vec::new();
            for (i, s) in fam.samples.iter().enumerate() {
                let key = (s.name.as_str(), &s.labels);
                if let Some(prev) = seen.insert(key, i) {
                    drop[prev] = true;
                    any = true;
                    match dup_of.get(&key) {
                        Some(&d) => dups[d].values.push(s.value),
                        None => {
                            dup_of.insert(key, dups.len());
                            dups.push(Duplicate {
                                name: s.name.clone(),
                                labels: s.labels.clone(),
                                values: vec![fam.samples[prev].value, s.value],
                            });
                        }
                    }
                    if dup_warnings.len() < 5 {
                        dup_warnings.push(format!(
                            "duplicate series `{}{}`: the last value is kept",
                            s.name, s.labels
                        ));
                    }
                }
            }
            fam.duplicates = dups;
            if any {
                let mut i = 0;
                fam.samples.retain(|_| {
                    let keep = !drop[i];
                    i += 1;
                    keep
                });
            }
        }
        for w in dup_warnings {
            self.warn(w);
        }
        // 0.0.4 `_created` companions.
        let mut companions = Vec::new();
        for (i, fam) in self.out.families.iter().enumerate() {
            if let Some(base) = fam.name.strip_suffix("_created") {
                let owner = [base.to_owned(), format!("{base}_total")]
                    .into_iter()
                    .filter_map(|n| self.out.index.get(&n))
                    .any(|&j| {
                        matches!(
                            self.out.families[j].kind,
                            MetricType::Counter | MetricType::Histogram | MetricType::Summary
                        )
                    });
                if owner {
                    companions.push(i);
                }
            }
        }
        for i in companions {
            self.out.families[i].created_companion = true;
        }
    }
}

fn is_dcgm_blank(name: &str, tok: &str, value: f64) -> bool {
    if !(name.starts_with("DCGM_") || name.starts_with("dcgm_")) {
        return false;
    }
    // DCGM_INT64_BLANK = 0x7ffffffffffffff0 (and +1 … +3); DCGM_FP64_BLANK = 2^47 (and above).
    const INT64_BLANK: u64 = 0x7fff_ffff_ffff_fff0;
    const FP64_BLANK: f64 = 140_737_488_355_328.0;
    if tok.bytes().all(|c| c.is_ascii_digit()) {
        match tok.parse::<u64>() {
            Ok(v) => v >= INT64_BLANK,
            Err(_) => true, // more digits than u64 holds: certainly a sentinel-sized integer
        }
    } else {
        value >= FP64_BLANK
    }
}

/// Splits off the first whitespace-delimited token.
fn split_token(s: &str) -> (&str, &str) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// Parses the metric name of a HELP/TYPE/UNIT line (bare or quoted) and returns the rest.
fn metadata_name(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if let Some(q) = s.strip_prefix('"') {
        let (name, next) = quoted(q, 0)?;
        return Some((name, &q[next..]));
    }
    let b = s.as_bytes();
    if b.is_empty() || !is_name_start(b[0]) {
        return None;
    }
    let mut i = 0;
    while i < b.len() && is_name_char(b[i]) {
        i += 1;
    }
    if i < b.len() && !is_ws(b[i]) {
        return None;
    }
    Some((s[..i].to_owned(), &s[i..]))
}

/// Reads a double-quoted string starting after the opening quote; returns the unescaped text and
/// the position after the closing quote. Unknown escapes are kept verbatim (lenient).
fn quoted(line: &str, start: usize) -> Option<(String, usize)> {
    let b = line.as_bytes();
    let mut i = start;
    // fast path: no escapes
    while i < b.len() && b[i] != b'"' && b[i] != b'\\' {
        i += 1;
    }
    if i < b.len() && b[i] == b'"' {
        return Some((line[start..i].to_owned(), i + 1));
    }
    let mut out = String::with_capacity(i - start + 8);
    out.push_str(&line[start..i]);
    while i < b.len() {
        match b[i] {
            b'"' => return Some((out, i + 1)),
            b'\\' => {
                match b.get(i + 1) {
                    Some(b'\\') => out.push('\\'),
                    Some(b'"') => out.push('"'),
                    Some(b'n') => out.push('\n'),
                    Some(_) => {
                        out.push('\\');
                        i += 1;
                        continue;
                    }
                    None => return None,
                }
                i += 2;
            }
            _ => {
                // copy one UTF-8 char
                let ch_len = utf8_len(b[i]);
                let end = (i + ch_len).min(b.len());
                out.push_str(line.get(i..end)?);
                i = end;
            }
        }
    }
    None
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

fn unescape_help(s: &str, om: bool) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if om => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

impl Exposition {
    /// The family named exactly `name` (as declared, e.g. `vllm:prompt_tokens_total` in 0.0.4 or
    /// `vllm:prompt_tokens` in OpenMetrics).
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.index.get(name).map(|&i| &self.families[i])
    }

    /// The family that holds samples named `sample_name`, whichever format grouped them:
    /// the family of that exact name, or the declared family `<base>` when `sample_name` is
    /// `<base><suffix>` with a suffix its type admits.
    pub fn family_of_sample(&self, sample_name: &str) -> Option<&Family> {
        if let Some(f) = self.family(sample_name)
            && (f.samples.iter().any(|s| s.name == sample_name) || f.samples.is_empty())
        {
            return Some(f);
        }
        for suffix in SUFFIXES {
            if let Some(base) = sample_name.strip_suffix(suffix)
                && let Some(f) = self.family(base)
                && f.declared
                && f.kind.admits_suffix(suffix)
            {
                return Some(f);
            }
        }
        None
    }

    /// All samples named exactly `sample_name` (e.g. `vllm:prompt_tokens_total`,
    /// `vllm:e2e_request_latency_seconds_bucket`), in body order, whatever family holds them.
    pub fn samples(&self, sample_name: &str) -> impl Iterator<Item = &Sample> {
        self.family_of_sample(sample_name)
            .into_iter()
            .flat_map(|f| f.samples.iter())
            .filter(move |s| s.name == sample_name)
    }

    /// The series named `sample_name` that the body wrote more than once (see
    /// [`Family::duplicates`]).
    pub fn duplicates(&self, sample_name: &str) -> impl Iterator<Item = &Duplicate> {
        self.family_of_sample(sample_name)
            .into_iter()
            .flat_map(|f| f.duplicates.iter())
            .filter(move |d| d.name == sample_name)
    }

    /// Whether any sample is named `sample_name`.
    pub fn has(&self, sample_name: &str) -> bool {
        self.samples(sample_name).next().is_some()
    }

    /// Total number of samples.
    pub fn sample_count(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    /// Families that hold data (not `_created` companions).
    pub fn data_families(&self) -> impl Iterator<Item = &Family> {
        self.families.iter().filter(|f| !f.created_companion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(body: &str) -> Exposition {
        parse(body).unwrap_or_else(|e| panic!("parse failed: {e}"))
    }

    #[test]
    fn colon_names_and_sorted_labels() {
        let e = one(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\n",
        );
        let s: Vec<_> = e.samples("vllm:num_requests_running").collect();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].value, 3.0);
        let names: Vec<_> = s[0].labels.iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["engine", "model_name"]);
        assert_eq!(
            e.family("vllm:num_requests_running").unwrap().kind,
            MetricType::Gauge
        );
    }

    #[test]
    fn le_spellings_compare_numerically() {
        assert_eq!(parse_le("1"), Some(1.0));
        assert_eq!(parse_le("1.0"), Some(1.0));
        assert_eq!(parse_le("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_le("0.005"), Some(0.005));
        assert_eq!(parse_le("inf"), Some(f64::INFINITY));
        assert_eq!(parse_le("abc"), None);
        assert_eq!(parse_le(""), None);
    }

    #[test]
    fn values_nan_inf_and_big_ints() {
        let e = one(
            "a NaN\nb +Inf\nc -Inf\nd 1.7740114612872875e+09\ne -3e-05\nf 9223372036854775794\n",
        );
        assert!(e.samples("a").next().unwrap().value.is_nan());
        assert_eq!(e.samples("b").next().unwrap().value, f64::INFINITY);
        assert_eq!(e.samples("c").next().unwrap().value, f64::NEG_INFINITY);
        assert_eq!(
            e.samples("d").next().unwrap().value,
            1_774_011_461.287_287_5
        );
        assert_eq!(e.samples("e").next().unwrap().value, -3e-05);
        // not a DCGM metric: the big integer is a value
        assert_eq!(
            e.samples("f").next().unwrap().value,
            9_223_372_036_854_775_794_f64
        );
    }

    #[test]
    fn dcgm_blank_sentinels_are_missing() {
        let e = one(concat!(
            "DCGM_FI_DEV_MEMORY_TEMP{gpu=\"0\"} 9223372036854775794\n",
            "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 140737488355328.000000\n",
            "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 31\n",
        ));
        assert!(!e.has("DCGM_FI_DEV_MEMORY_TEMP"));
        assert!(!e.has("DCGM_FI_DEV_POWER_USAGE"));
        assert_eq!(
            e.samples("DCGM_FI_DEV_GPU_TEMP").next().unwrap().value,
            31.0
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("2 dcgm-exporter blank"))
        );
    }

    #[test]
    fn label_escapes_and_trailing_comma() {
        let e = one(
            "m{a=\"x\\\"y\",b=\"line\\nnext\",c=\"back\\\\slash\",d=\"NVIDIA H100 80GB HBM3\",} 1\n",
        );
        let s = e.samples("m").next().unwrap();
        assert_eq!(s.labels.get("a"), Some("x\"y"));
        assert_eq!(s.labels.get("b"), Some("line\nnext"));
        assert_eq!(s.labels.get("c"), Some("back\\slash"));
        assert_eq!(s.labels.get("d"), Some("NVIDIA H100 80GB HBM3"));
        let e = one("m{} 2\n");
        assert!(e.samples("m").next().unwrap().labels.is_empty());
    }

    #[test]
    fn timestamps_per_format() {
        let e = one("m 1 1700000000123\n");
        assert_eq!(
            e.samples("m").next().unwrap().timestamp_s,
            Some(1_700_000_000.123)
        );
        let e = one("# TYPE m gauge\nm 1 1700000000.5\n# EOF\n");
        assert_eq!(e.format, Some(Format::OpenMetrics));
        assert_eq!(
            e.samples("m").next().unwrap().timestamp_s,
            Some(1_700_000_000.5)
        );
    }

    #[test]
    fn openmetrics_counter_family_and_exemplars() {
        let body = concat!(
            "# TYPE vllm:prompt_tokens counter\n",
            "# HELP vllm:prompt_tokens Number of \\\"prefill\\\" tokens.\n",
            "vllm:prompt_tokens_total{engine=\"0\"} 97.0\n",
            "vllm:prompt_tokens_created{engine=\"0\"} 1.7e9\n",
            "# TYPE lat histogram\n",
            "# UNIT lat seconds\n",
            "lat_bucket{le=\"0.5\"} 3 # {trace_id=\"abc\"} 0.43 1700000000.123\n",
            "lat_bucket{le=\"+Inf\"} 4\n",
            "lat_count 4\n",
            "lat_sum 1.5\n",
            "# EOF\n",
        );
        let e = one(body);
        let f = e.family("vllm:prompt_tokens").unwrap();
        assert_eq!(f.kind, MetricType::Counter);
        assert_eq!(f.samples.len(), 2);
        assert_eq!(f.help.as_deref(), Some("Number of \"prefill\" tokens."));
        assert_eq!(
            e.samples("vllm:prompt_tokens_total").next().unwrap().value,
            97.0
        );
        let lat = e.family("lat").unwrap();
        assert_eq!(lat.unit.as_deref(), Some("seconds"));
        assert_eq!(lat.samples.len(), 4);
        assert_eq!(e.samples("lat_bucket").count(), 2);
    }

    #[test]
    fn text_created_families_are_companions() {
        let body = concat!(
            "# TYPE vllm:prompt_tokens_total counter\n",
            "vllm:prompt_tokens_total 5.0\n",
            "# TYPE vllm:prompt_tokens_created gauge\n",
            "vllm:prompt_tokens_created 1.7e9\n",
            "# TYPE vllm:prompt_tokens_cached_total counter\n",
            "vllm:prompt_tokens_cached_total 0.0\n",
            "# TYPE h histogram\n",
            "h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n",
            "# TYPE h_created gauge\nh_created 1.7e9\n",
        );
        let e = one(body);
        assert!(
            e.family("vllm:prompt_tokens_created")
                .unwrap()
                .created_companion
        );
        assert!(e.family("h_created").unwrap().created_companion);
        assert!(
            !e.family("vllm:prompt_tokens_cached_total")
                .unwrap()
                .created_companion
        );
        assert_eq!(
            e.samples("vllm:prompt_tokens_total").next().unwrap().value,
            5.0
        );
        assert_eq!(
            e.samples("vllm:prompt_tokens_cached_total")
                .next()
                .unwrap()
                .value,
            0.0
        );
    }

    #[test]
    fn untyped_samples_are_not_merged_by_suffix() {
        let e = one("x_bucket{le=\"1\"} 1\nx_sum 2\nx_count 1\n");
        assert_eq!(e.families.len(), 3);
        assert_eq!(e.samples("x_sum").next().unwrap().value, 2.0);
    }

    #[test]
    fn help_trailing_space_and_crlf_and_tabs() {
        let e = one(
            "# HELP h Duration \r\n# TYPE h histogram\r\nh_bucket{le=\"1\"}\t1\r\nh_bucket{le=\"+Inf\"} 1\r\nh_count   1",
        );
        let f = e.family("h").unwrap();
        assert_eq!(f.help.as_deref(), Some("Duration "));
        assert_eq!(f.samples.len(), 3);
    }

    #[test]
    fn duplicate_series_keep_last() {
        let e = one("m{a=\"1\"} 1\nm{a=\"1\"} 2\n");
        let s: Vec<_> = e.samples("m").collect();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].value, 2.0);
        assert!(e.warnings[0].contains("duplicate"));
        let d: Vec<_> = e.duplicates("m").collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].values, vec![1.0, 2.0]);
        assert_eq!(d[0].labels.get("a"), Some("1"));
    }

    #[test]
    fn duplicates_are_same_name_and_same_labels_only() {
        // other label values, other `le`, the same labels under another sample name: distinct
        let e = one(concat!(
            "# TYPE h histogram\n",
            "h_bucket{le=\"0.1\",m=\"a\"} 1\nh_bucket{le=\"0.2\",m=\"a\"} 2\n",
            "h_bucket{le=\"+Inf\",m=\"a\"} 3\nh_bucket{le=\"+Inf\",m=\"b\"} 1\n",
            "h_sum{m=\"a\"} 0.5\nh_count{m=\"a\"} 3\n",
            "c_total{m=\"a\"} 1\nc_total{m=\"b\"} 1\n",
        ));
        assert_eq!(e.family("h").unwrap().duplicates, vec![]);
        assert_eq!(e.duplicates("c_total").count(), 0);
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        // a bucket repeated with its `le`, label order ignored; three copies list three values
        let e = one(concat!(
            "# TYPE h histogram\n",
            "h_bucket{le=\"0.1\",m=\"a\"} 1\nh_bucket{m=\"a\",le=\"0.1\"} 7\n",
            "h_bucket{le=\"0.1\",m=\"a\"} 9\nh_bucket{le=\"+Inf\",m=\"a\"} 9\n",
        ));
        let d: Vec<_> = e.duplicates("h_bucket").collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].values, vec![1.0, 7.0, 9.0]);
        assert_eq!(d[0].labels.get("le"), Some("0.1"));
        assert_eq!(e.duplicates("h_count").count(), 0);
    }

    #[test]
    fn utf8_quoted_names() {
        let e = one("# TYPE \"my.metric\" gauge\n{\"my.metric\",\"label.x\"=\"v\"} 7\n");
        let s = e.samples("my.metric").next().unwrap();
        assert_eq!(s.value, 7.0);
        assert_eq!(s.labels.get("label.x"), Some("v"));
        assert_eq!(e.family("my.metric").unwrap().kind, MetricType::Gauge);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("ok 1\nbad{a=1} 2\n").unwrap_err();
        assert!(matches!(err, ParseError::Syntax { line: 2, .. }), "{err}");
        let err = parse("m notanumber\n").unwrap_err();
        assert!(err.to_string().contains("not a float"), "{err}");
        let err = parse("m{a=\"1\",a=\"2\"} 1\n").unwrap_err();
        assert!(err.to_string().contains("appears twice"), "{err}");
        assert!(parse("m{a=\"1\" 1\n").is_err());
        assert!(parse("m 1 2 3\n").is_err());
        assert!(parse("1m 1\n").is_err());
        assert!(parse("m\n").is_err());
    }

    #[test]
    fn limits_are_errors() {
        let lim = Limits {
            max_line_bytes: 10,
            ..Limits::default()
        };
        assert!(matches!(
            parse_with("a_very_long_name 1\n", Format::Auto, &lim),
            Err(ParseError::Limit { line: 1, .. })
        ));
        let lim = Limits {
            max_samples: 2,
            ..Limits::default()
        };
        assert!(matches!(
            parse_with("a 1\nb 1\nc 1\n", Format::Auto, &lim),
            Err(ParseError::Limit { line: 3, .. })
        ));
        let lim = Limits {
            max_labels_per_sample: 2,
            ..Limits::default()
        };
        assert!(parse_with("a{x=\"1\",y=\"2\",z=\"3\"} 1\n", Format::Auto, &lim).is_err());
        let lim = Limits {
            max_families: 1,
            ..Limits::default()
        };
        assert!(parse_with("# TYPE a gauge\n# TYPE b gauge\n", Format::Auto, &lim).is_err());
    }

    #[test]
    fn plain_comments_and_eof() {
        let e = one("# just a comment\nm 1\n# EOF\n");
        assert_eq!(e.sample_count(), 1);
        let e = one("# TYPE m gauge\nm 1\n# EOF\nm 2\n");
        assert_eq!(e.samples("m").next().unwrap().value, 1.0);
    }
}
