//! Prompt datasets: ShareGPT JSON and JSON Lines (see the [module docs](super) for the formats).

use super::spec::DatasetFormat;
use serde::Deserialize;
use std::path::Path;

/// One dataset entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetEntry {
    /// Prompt text.
    pub prompt: String,
    /// Output length hint in tokens (ShareGPT: the reply's whitespace word count; JSONL:
    /// `max_tokens`), when the file has one.
    pub output_tokens: Option<u32>,
}

/// A loaded dataset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dataset {
    /// Entries in file order (at least one).
    pub entries: Vec<DatasetEntry>,
}

impl Dataset {
    /// Reads a dataset file.
    ///
    /// # Errors
    /// A message naming the file (and the line for JSONL) when it cannot be read, does not match
    /// the format, or holds no usable entry.
    pub fn load(path: &Path, format: DatasetFormat) -> Result<Dataset, String> {
        let text = headroom_core::input_file::read_to_string(
            path,
            headroom_core::input_file::MAX_DATASET_BYTES,
        )
        .map_err(|e| format!("cannot read dataset `{}`: {e}", path.display()))?;
        let ds = match format {
            DatasetFormat::Sharegpt => Dataset::parse_sharegpt(&text),
            DatasetFormat::Jsonl => Dataset::parse_jsonl(&text),
        }
        .map_err(|e| format!("dataset `{}`: {e}", path.display()))?;
        if ds.entries.is_empty() {
            return Err(format!(
                "dataset `{}` has no usable entry; expected at least one prompt",
                path.display()
            ));
        }
        Ok(ds)
    }

    /// Parses ShareGPT JSON (see the [`workload`](crate::workload) docs).
    ///
    /// # Errors
    /// When the text is not a JSON list of `{conversations: [{from, value}]}`.
    pub fn parse_sharegpt(text: &str) -> Result<Dataset, String> {
        #[derive(Deserialize)]
        struct Entry {
            #[serde(default)]
            conversations: Vec<Turn>,
        }
        #[derive(Deserialize)]
        struct Turn {
            from: String,
            value: String,
        }
        let entries: Vec<Entry> = serde_json::from_str(text).map_err(|e| {
            format!("expected ShareGPT JSON (a list of {{\"conversations\": [{{\"from\", \"value\"}}]}}): {e}")
        })?;
        let mut out = Vec::new();
        for e in entries {
            let Some(i) = e
                .conversations
                .iter()
                .position(|t| t.from == "human" || t.from == "user")
            else {
                continue;
            };
            let reply = e.conversations[i + 1..]
                .iter()
                .find(|t| t.from == "gpt" || t.from == "assistant")
                .map(|t| t.value.split_whitespace().count() as u32);
            let prompt = e.conversations[i].value.clone();
            if prompt.trim().is_empty() {
                continue;
            }
            out.push(DatasetEntry {
                prompt,
                output_tokens: reply.filter(|n| *n > 0),
            });
        }
        Ok(Dataset { entries: out })
    }

    /// Parses JSON Lines of `{"prompt": "…", "max_tokens": n?}`.
    ///
    /// # Errors
    /// The 1-based line number and what was expected, for the first bad line.
    pub fn parse_jsonl(text: &str) -> Result<Dataset, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            prompt: String,
            #[serde(default)]
            max_tokens: Option<u32>,
        }
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let l: Line = serde_json::from_str(line).map_err(|e| {
                format!(
                    "line {}: expected {{\"prompt\": \"…\", \"max_tokens\": n (optional)}}: {e}",
                    i + 1
                )
            })?;
            out.push(DatasetEntry {
                prompt: l.prompt,
                output_tokens: l.max_tokens,
            });
        }
        Ok(Dataset { entries: out })
    }

    /// True when every entry has an output length hint.
    pub fn has_output_lengths(&self) -> bool {
        self.entries.iter().all(|e| e.output_tokens.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    #[test]
    fn datasets_load_and_validate() {
        let dir = tempfile::tempdir().unwrap();
        let sg = dir.path().join("sg.json");
        std::fs::write(
            &sg,
            r#"[{"id":"x","conversations":[{"from":"system","value":"s"},{"from":"human","value":"What is a claim?"},{"from":"gpt","value":"A claim is a request"}]},
                {"conversations":[{"from":"gpt","value":"orphan"}]},
                {"conversations":[{"from":"human","value":"Hi there"}]}]"#,
        )
        .unwrap();
        let ds = Dataset::load(&sg, DatasetFormat::Sharegpt).unwrap();
        assert_eq!(ds.entries.len(), 2);
        assert_eq!(ds.entries[0].prompt, "What is a claim?");
        assert_eq!(ds.entries[0].output_tokens, Some(5)); // "A claim is a request"
        assert_eq!(ds.entries[1].output_tokens, None);
        assert!(!ds.has_output_lengths());

        let jl = dir.path().join("p.jsonl");
        std::fs::write(
            &jl,
            "{\"prompt\": \"one two\"}\n\n{\"prompt\": \"three\", \"max_tokens\": 7}\n",
        )
        .unwrap();
        let ds = Dataset::load(&jl, DatasetFormat::Jsonl).unwrap();
        assert_eq!(ds.entries.len(), 2);
        assert_eq!(ds.entries[1].output_tokens, Some(7));

        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"prompt\": \"ok\"}\n{\"text\": \"no\"}\n").unwrap();
        let e = Dataset::load(&bad, DatasetFormat::Jsonl).unwrap_err();
        assert!(e.contains("line 2") && e.contains("bad.jsonl"), "{e}");

        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "\n").unwrap();
        let e = Dataset::load(&empty, DatasetFormat::Jsonl).unwrap_err();
        assert!(e.contains("no usable entry"), "{e}");

        // relative to the workload's directory; max_tokens: dataset needs every reply length
        let text = "load: {mode: rate}\nclasses:\n  - name: sg\n    dataset: {path: sg.json, format: sharegpt}\n    max_tokens: dataset\n";
        let e = Workload::parse(text, Path::new("w.yaml"), dir.path()).unwrap_err();
        assert!(e.to_string().contains("output length"), "{e}");
        let text = text.replace("max_tokens: dataset", "max_tokens: {fixed: 10}");
        let w = Workload::parse(&text, Path::new("w.yaml"), dir.path()).unwrap();
        assert_eq!(w.datasets[0].as_ref().unwrap().entries.len(), 2);
        let text = "load: {mode: rate}\nclasses:\n  - name: e\n    dataset: {path: empty.jsonl, format: jsonl}\n    max_tokens: {fixed: 1}\n";
        let e = Workload::parse(text, Path::new("w.yaml"), dir.path()).unwrap_err();
        assert!(
            e.to_string().contains("w.yaml:4:") && e.to_string().contains("no usable entry"),
            "{e}"
        );
    }
}
