//! The `workload.yaml` a run directory keeps: the spec as given, with the windows the sweep
//! actually used. `--warmup`/`--measure`, `--quick` and the embedded demo override the file's
//! `warmup`/`measure`; a saved file that said `measure: 30s` for a run whose levels measured
//! 5 s would mislead whoever reads or reruns it (`headroom sweep --workload RUN_DIR/workload.yaml`).

use headroom_load::workload::Workload;
use std::path::Path;
use std::time::Duration;

/// `d` as `workload.yaml` writes a window: whole seconds as `5s`, else milliseconds (`1500ms`).
fn fmt_window(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_secs_f64() * 1000.0)
    }
}

/// Sets the top-level key `key` of a block-style YAML mapping to `value`: rewrites the line
/// `key: …` at column 0 (keeping a trailing comment), or appends one when the key is absent.
fn set_top_level(text: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key}:");
    let mut found = false;
    let mut out: Vec<String> = text
        .lines()
        .map(|line| {
            if !found && line.starts_with(&prefix) {
                found = true;
                let comment = line
                    .find(" #")
                    .map(|i| format!("  {}", line[i..].trim_start()))
                    .unwrap_or_default();
                format!("{prefix} {value}{comment}")
            } else {
                line.to_string()
            }
        })
        .collect();
    if !found {
        out.push(format!("{prefix} {value}"));
    }
    out.join("\n") + "\n"
}

/// The text to save as the run directory's `workload.yaml`: `text` unchanged when the windows
/// as run are the file's, else with `warmup`/`measure` set to them under a comment header saying
/// that the command line overrode the file (and what the file said). When the rewrite would not
/// read back with those windows (a flow-style document), the header alone says so and the text
/// stays as given. `base` is the directory relative paths of the file (a dataset) resolve from.
pub fn workload_as_run(
    text: &str,
    base: &Path,
    given: (Duration, Duration),
    run: (Duration, Duration),
) -> String {
    if given == run {
        return text.to_string();
    }
    let (w, m) = (fmt_window(run.0), fmt_window(run.1));
    let note = format!(
        "# Windows as run: warmup {w}, measure {m} (set by --warmup/--measure, --quick or the\n\
         # embedded demo; the workload as given said warmup {}, measure {}).\n",
        fmt_window(given.0),
        fmt_window(given.1)
    );
    let rewritten = set_top_level(&set_top_level(text, "warmup", &w), "measure", &m);
    let reads_back = Workload::parse(&rewritten, Path::new("workload.yaml"), base)
        .is_ok_and(|wl| (wl.spec.warmup, wl.spec.measure) == run);
    if reads_back {
        note + &rewritten
    } else {
        format!("{note}# The windows below are the file's; the run used the ones above.\n{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_load::workload::DEFAULT_WORKLOAD_YAML;

    /// A 5 s run of the built-in workload (`measure: 30s`) once saved `measure: 30s`: the saved
    /// file now says 5 s, says why, and `--workload` reads it back with the windows as run.
    #[test]
    fn the_saved_workload_has_the_windows_as_run() {
        let given = (Duration::from_secs(5), Duration::from_secs(30));
        let run = (Duration::from_secs(3), Duration::from_millis(5500));
        let saved = workload_as_run(DEFAULT_WORKLOAD_YAML, Path::new("."), given, run);
        assert!(
            saved.starts_with("# Windows as run: warmup 3s, measure 5500ms"),
            "{saved}"
        );
        assert!(saved.contains("\nmeasure: 5500ms"), "{saved}");
        assert!(!saved.contains("measure: 30s"), "{saved}");
        let wl = Workload::parse(&saved, Path::new("workload.yaml"), Path::new(".")).unwrap();
        assert_eq!((wl.spec.warmup, wl.spec.measure), run);
        assert_eq!(
            workload_as_run(DEFAULT_WORKLOAD_YAML, Path::new("."), given, given),
            DEFAULT_WORKLOAD_YAML
        );
    }

    #[test]
    fn absent_windows_are_added_and_comments_kept() {
        let text = DEFAULT_WORKLOAD_YAML
            .replace("warmup: 5s\n", "")
            .replace("measure: 30s", "measure: 30s   # long answers");
        let wl = Workload::parse(&text, Path::new("w.yaml"), Path::new(".")).unwrap();
        let given = (wl.spec.warmup, wl.spec.measure);
        let run = (Duration::from_secs(2), Duration::from_secs(4));
        let saved = workload_as_run(&text, Path::new("."), given, run);
        assert!(saved.contains("\nmeasure: 4s  # long answers\n"), "{saved}");
        assert!(saved.ends_with("\nwarmup: 2s\n"), "{saved}");
        // A flow-style document is kept as given, under the header.
        let flow = format!("{{warmup: 5s, measure: 30s, classes: {}}}", "[]");
        let saved = workload_as_run(&flow, Path::new("."), given, run);
        assert!(
            saved.starts_with("# Windows as run: warmup 2s, measure 4s"),
            "{saved}"
        );
        assert!(saved.ends_with(&flow), "{saved}");
    }
}
