//! Every file in `examples/` parses as what its name says it is, and the open-loop example and
//! the built-in workload's commented open-loop alternative mean what their comments say.

use headroom_core::SloFile;
use headroom_core::run::LoadMode;
use headroom_load::arrivals::{ArrivalProcess, LevelMode};
use headroom_load::workload::{DEFAULT_WORKLOAD_YAML, Endpoint, LengthDist, Levels, Workload};
use std::path::{Path, PathBuf};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// `workload-*.yaml` are workloads, `slo-*.yaml` SLO files; `gateway-*.yaml` are gateway
/// configurations, whose schema the gateway crate's own tests check (this crate does not depend
/// on it): here they must be YAML mappings. A file of any other name fails, so a new kind of
/// example gets a check.
#[test]
fn every_example_file_parses() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("workload-") && name.ends_with(".yaml") {
            let w = Workload::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!w.spec.classes.is_empty(), "{name}");
        } else if name.starts_with("slo-") && name.ends_with(".yaml") {
            SloFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
        } else if name.starts_with("gateway-") && name.ends_with(".yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let v: serde_json::Value =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(v.is_object(), "{name}: expected a mapping");
        } else {
            panic!("examples/{name}: no check for this kind of file; add one here");
        }
        seen.push(name);
    }
    for must in [
        "workload-open-loop.yaml",
        "workload-mixed.yaml",
        "slo-mixed.yaml",
    ] {
        assert!(
            seen.iter().any(|n| n == must),
            "{must} not found in {seen:?}"
        );
    }
}

/// The values below are read off the example file by hand.
#[test]
fn open_loop_example_is_an_open_loop_workload() {
    let w = Workload::load(&examples_dir().join("workload-open-loop.yaml")).unwrap();
    let load = &w.spec.load;
    assert_eq!(load.mode, LoadMode::Rate);
    assert_eq!(load.levels, Levels::List(vec![4.0, 8.0, 16.0, 32.0]));
    assert_eq!(load.arrival, ArrivalProcess::Gamma { burstiness: 0.5 });
    assert_eq!(load.max_concurrency, None);
    assert_eq!(
        load.level_mode(4.0),
        LevelMode::Rate {
            rate_per_s: 4.0,
            arrival: ArrivalProcess::Gamma { burstiness: 0.5 },
            max_concurrency: None,
        }
    );
    assert_eq!(w.spec.warmup.as_secs(), 5);
    assert_eq!(w.spec.measure.as_secs(), 30);
    let c = &w.spec.classes[0];
    assert_eq!((c.name.as_str(), c.endpoint), ("chat", Endpoint::Chat));
    assert_eq!(c.shared_prefix_tokens, 200);
    assert_eq!(
        c.prompt_tokens,
        Some(LengthDist::Uniform { min: 40, max: 60 })
    );
    assert_eq!(
        c.max_tokens,
        LengthDist::Lognormal {
            median: 150.0,
            p90: 400.0,
            min: 10,
            max: 1000
        }
    );
    assert!(c.ignore_eos);
    // Its commented cap is a valid one.
    let text = std::fs::read_to_string(examples_dir().join("workload-open-loop.yaml")).unwrap();
    let capped = text.replace("  # max_concurrency: 256", "  max_concurrency: 256");
    assert_ne!(capped, text);
    let w = Workload::parse(&capped, Path::new("capped.yaml"), Path::new(".")).unwrap();
    assert_eq!(w.spec.load.max_concurrency, Some(256));
}

/// `headroom sweep --print-defaults` prints [`DEFAULT_WORKLOAD_YAML`]; its commented open-loop
/// alternative, uncommented in place of the closed-loop lines, is a valid rate-mode load.
#[test]
fn builtin_open_loop_alternative_parses_when_uncommented() {
    let mut out = String::new();
    let mut uncommented = 0;
    for line in DEFAULT_WORKLOAD_YAML.lines() {
        if line.starts_with("  mode: concurrency") || line.starts_with("  levels: auto") {
            continue;
        }
        let field = ["mode:", "levels:", "arrival:", "max_concurrency:"]
            .iter()
            .any(|f| line.starts_with(&format!("  # {f}")));
        if field {
            out.push_str(&line.replacen("  # ", "  ", 1));
            uncommented += 1;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    assert_eq!(uncommented, 4, "{DEFAULT_WORKLOAD_YAML}");
    let w = Workload::parse(&out, Path::new("alt.yaml"), Path::new(".")).unwrap_or_else(|e| {
        panic!("{e}\n{out}");
    });
    let load = &w.spec.load;
    assert_eq!(load.mode, LoadMode::Rate);
    assert_eq!(load.levels, Levels::List(vec![2.0, 4.0, 8.0, 16.0]));
    assert_eq!(load.arrival, ArrivalProcess::Poisson);
    assert_eq!(load.max_concurrency, Some(256));
    // And as printed, the built-in is the closed loop.
    assert_eq!(Workload::builtin().spec.load.mode, LoadMode::Concurrency);
}

/// The README's open-loop workload is a valid one, and the example file's but for the cap.
#[test]
fn readme_open_loop_workload_parses() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let heading = "### `workload.yaml`: closed loop and open loop";
    let section = &readme[readme
        .find(heading)
        .expect("the README's open-loop section")..];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let block = &section[start..];
    let block = &block[..block.find("```").expect("the block's end")];
    let w = Workload::parse(block, Path::new("README.md"), Path::new("."))
        .unwrap_or_else(|e| panic!("{e}\n{block}"));
    assert_eq!(w.spec.load.max_concurrency, Some(256));
    let mut example = Workload::load(&examples_dir().join("workload-open-loop.yaml"))
        .unwrap()
        .spec;
    example.load.max_concurrency = Some(256);
    assert_eq!(w.spec, example);
}
