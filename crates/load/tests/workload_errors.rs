//! A value of the wrong shape in `workload.yaml` is answered with the field, its file, line and
//! column, and the form to write instead, for every field that takes a mapping or a named form:
//! the length distributions (`prompt_tokens`, `max_tokens`), `load.arrival`, `dataset`, `load`,
//! `load.mode` and `load.levels`.
//!
//! serde's derived enums once answered `max_tokens: 50` with "unknown variant `50`, expected one
//! of fixed, uniform…", and `arrival: gamma` with "expected mapping start" at the *next* line.
//! Each expected line and column below is counted by hand from the YAML of the case.

use headroom_load::arrivals::ArrivalProcess;
use headroom_load::workload::{LengthDist, Workload};
use std::path::Path;

/// Lines 1-8; `arrival:`'s value starts at column 12, `prompt_tokens:`'s at 20, `max_tokens:`'s
/// at 17.
const BASE: &str = "\
load:
  mode: rate
  levels: [1, 2]
  arrival: poisson
classes:
  - name: chat
    prompt_tokens: {fixed: 10}
    max_tokens: {fixed: 5}
";

fn parse(text: &str) -> Result<Workload, String> {
    Workload::parse(text, Path::new("w.yaml"), Path::new("/nonexistent")).map_err(|e| e.to_string())
}

/// `BASE` with `from` replaced by `to`, which must be refused with exactly `head` as the first
/// line of the message, and the source line quoted under it.
fn refused(from: &str, to: &str, head: &str) {
    assert!(BASE.contains(from), "{from}");
    let text = BASE.replace(from, to);
    let e = match parse(&text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    };
    let mut lines = e.lines();
    assert_eq!(lines.next(), Some(head), "whole message:\n{e}");
    let quoted = to.lines().last().unwrap_or(to);
    assert!(
        lines.next().is_some_and(|l| l.ends_with(quoted)),
        "source line not quoted:\n{e}"
    );
}

const DIST_FORMS: &str = "expected {fixed: 50}, {uniform: {min: 40, max: 60}}, {normal: {mean: 50, stddev: 10, min: 20, max: 80}}, {lognormal: {median: 300, p90: 1200, min: 10, max: 4000}} or dataset";

#[test]
fn max_tokens_of_the_wrong_shape_says_what_to_write() {
    let f = "max_tokens: {fixed: 5}";
    let at = "w.yaml:8:17: classes[0] (`chat`).max_tokens:";
    refused(
        f,
        "max_tokens: 50",
        &format!("{at} a bare number is not a distribution; write {{fixed: 50}}"),
    );
    refused(
        f,
        "max_tokens: 12.5",
        &format!(
            "{at} a bare number (12.5) is not a distribution; write a whole number of tokens as {{fixed: 50}}"
        ),
    );
    refused(
        f,
        "max_tokens: '50'",
        &format!("{at} a bare number is not a distribution; write {{fixed: 50}}"),
    );
    refused(
        f,
        "max_tokens: uniform",
        &format!("{at} uniform needs its bounds: write {{uniform: {{min: 40, max: 60}}}}"),
    );
    refused(
        f,
        "max_tokens: fixed",
        &format!("{at} fixed needs its token count: write {{fixed: 50}}"),
    );
    refused(
        f,
        "max_tokens: [100, 200]",
        &format!(
            "{at} a list is not a distribution; for a range write {{uniform: {{min: 40, max: 60}}}}"
        ),
    );
    refused(
        f,
        "max_tokens: lots",
        &format!("{at} `lots` is not a distribution; {DIST_FORMS}"),
    );
    refused(
        f,
        "max_tokens: ~",
        &format!("{at} an empty value is not a distribution; {DIST_FORMS}"),
    );
    // The parameters of a named distribution must be a mapping too: at the value, column 26.
    refused(
        f,
        "max_tokens: {normal: 300}",
        "w.yaml:8:26: classes[0] (`chat`).max_tokens: normal needs its parameters: write {normal: {mean: 50, stddev: 10, min: 20, max: 80}}",
    );
    // Block style: the value is on the next lines; the error points at `normal` (9:7).
    refused(
        f,
        "max_tokens:\n      normal",
        "w.yaml:9:7: classes[0] (`chat`).max_tokens: normal needs its parameters: write {normal: {mean: 50, stddev: 10, min: 20, max: 80}}",
    );
}

#[test]
fn prompt_tokens_of_the_wrong_shape_says_what_to_write() {
    let f = "prompt_tokens: {fixed: 10}";
    let at = "w.yaml:7:20: classes[0] (`chat`).prompt_tokens:";
    refused(
        f,
        "prompt_tokens: 50",
        &format!("{at} a bare number is not a distribution; write {{fixed: 50}}"),
    );
    refused(
        f,
        "prompt_tokens: lognormal",
        &format!(
            "{at} lognormal needs its parameters: write {{lognormal: {{median: 300, p90: 1200, min: 10, max: 4000}}}}"
        ),
    );
    refused(
        f,
        "prompt_tokens: normal",
        &format!(
            "{at} normal needs its parameters: write {{normal: {{mean: 50, stddev: 10, min: 20, max: 80}}}}"
        ),
    );
    refused(
        f,
        "prompt_tokens: true",
        &format!("{at} `true` is not a distribution; {DIST_FORMS}"),
    );
    // `{uniform: 40}`: 19 characters of indent and key, 10 of `{uniform: `: 40 at column 30.
    refused(
        f,
        "prompt_tokens: {uniform: 40}",
        "w.yaml:7:30: classes[0] (`chat`).prompt_tokens: uniform needs its bounds: write {uniform: {min: 40, max: 60}}",
    );
}

#[test]
fn arrival_of_the_wrong_shape_says_what_to_write() {
    let f = "arrival: poisson";
    let gamma = "gamma needs its burstiness: write {gamma: {burstiness: 0.5}} (the gamma shape k of the gaps: 1 is Poisson, below 1 burstier, above 1 more regular)";
    refused(
        f,
        "arrival: gamma",
        &format!("w.yaml:4:12: load.arrival: {gamma}"),
    );
    // The report's case: block style, the bare word on the next line (5:5), not after it.
    refused(
        f,
        "arrival:\n    gamma",
        &format!("w.yaml:5:5: load.arrival: {gamma}"),
    );
    refused(
        f,
        "arrival: {gamma: 0.5}",
        &format!("w.yaml:4:20: load.arrival: {gamma}"),
    );
    refused(
        f,
        "arrival: 0.5",
        "w.yaml:4:12: load.arrival: a bare number is not an arrival process; for gamma gaps of burstiness 0.5 write {gamma: {burstiness: 0.5}}, else constant or poisson",
    );
    refused(
        f,
        "arrival: bursty",
        "w.yaml:4:12: load.arrival: `bursty` is not an arrival process; expected constant, poisson or {gamma: {burstiness: 0.5}}",
    );
}

/// Mapping keys that name no form, a second form in one mapping, and a bare word written as a
/// mapping: each names the field. (Where the parser puts these is its own business: the line
/// is asserted, as the key sits on it.)
#[test]
fn wrong_keys_name_the_field_and_the_forms() {
    for (from, to, line, message) in [
        (
            "max_tokens: {fixed: 5}",
            "max_tokens: {fixd: 5}",
            8,
            "classes[0] (`chat`).max_tokens: unknown distribution `fixd`; expected one of fixed, uniform, normal, lognormal (or the bare word dataset)",
        ),
        (
            "max_tokens: {fixed: 5}",
            "max_tokens: {fixed: 5, uniform: {min: 1, max: 2}}",
            8,
            "classes[0] (`chat`).max_tokens: `fixed` and `uniform` in one mapping, but it takes one form; expected {fixed: 50}, {uniform: {min: 40, max: 60}}",
        ),
        (
            "max_tokens: {fixed: 5}",
            "max_tokens: {dataset: x}",
            8,
            "classes[0] (`chat`).max_tokens: write dataset alone (max_tokens: dataset), not as a mapping",
        ),
        (
            "arrival: poisson",
            "arrival: {poisson: 1}",
            4,
            "load.arrival: write poisson alone (load.arrival: poisson), not as a mapping",
        ),
        (
            "arrival: poisson",
            "arrival: {weibull: {k: 2}}",
            4,
            "load.arrival: unknown arrival process `weibull`; expected constant, poisson or {gamma: {burstiness: 0.5}}",
        ),
    ] {
        let e = parse(&BASE.replace(from, to)).unwrap_err();
        let head = e.lines().next().unwrap_or_default();
        assert!(head.starts_with(&format!("w.yaml:{line}:")), "{e}");
        assert!(head.contains(message), "`{message}` not in:\n{e}");
    }
}

#[test]
fn dataset_load_mode_and_levels_of_the_wrong_shape_say_what_to_write() {
    // `dataset:`'s value at column 14 of line 7.
    refused(
        "prompt_tokens: {fixed: 10}",
        "dataset: sharegpt.json",
        "w.yaml:7:14: classes[0] (`chat`).dataset: a bare path is not enough; write {path: sharegpt.json, format: sharegpt} (format: sharegpt or jsonl)",
    );
    refused(
        "prompt_tokens: {fixed: 10}",
        "dataset: prompts.jsonl",
        "w.yaml:7:14: classes[0] (`chat`).dataset: a bare path is not enough; write {path: prompts.jsonl, format: jsonl} (format: sharegpt or jsonl)",
    );
    refused(
        "mode: rate",
        "mode: open",
        "w.yaml:2:9: load.mode: `open`: expected concurrency (closed loop: levels are requests in flight) or rate (open loop: levels are req/s)",
    );
    refused(
        "levels: [1, 2]",
        "levels: 8",
        "w.yaml:3:11: load.levels: a single number is not a list; write [8] or auto",
    );
    refused(
        "load:\n  mode: rate\n  levels: [1, 2]\n  arrival: poisson",
        "load: rate",
        "w.yaml:1:7: load: `rate` is not a load section; write {mode: rate, levels: [1, 2, 4], arrival: poisson} (open loop, req/s) or {mode: concurrency, levels: auto} (closed loop)",
    );
}

/// The class is named by where the error is: the second of two classes, block or flow style.
#[test]
fn the_class_of_the_error_is_named() {
    let two = format!(
        "{BASE}  - name: long_context\n    prompt_tokens: {{fixed: 2000}}\n    max_tokens: 300\n"
    );
    let e = parse(&two).unwrap_err();
    assert_eq!(
        e.lines().next(),
        Some(
            "w.yaml:11:17: classes[1] (`long_context`).max_tokens: a bare number is not a distribution; write {fixed: 300}"
        ),
        "{e}"
    );
    let flow = "load: {mode: rate, levels: [1]}\nclasses:\n  - {name: a, prompt_tokens: {fixed: 1}, max_tokens: {fixed: 1}}\n  - {name: b, prompt_tokens: 7, max_tokens: {fixed: 1}}\n";
    let e = parse(flow).unwrap_err();
    // Line 4, `7` at column 30.
    assert_eq!(
        e.lines().next(),
        Some(
            "w.yaml:4:30: classes[1] (`b`).prompt_tokens: a bare number is not a distribution; write {fixed: 7}"
        ),
        "{e}"
    );
}

/// Every form the module docs list is still read as before, in flow and block style.
#[test]
fn every_documented_form_still_parses() {
    let w = parse(BASE).unwrap();
    assert_eq!(w.spec.load.arrival, ArrivalProcess::Poisson);
    for (to, want) in [
        ("arrival: constant", ArrivalProcess::Constant),
        (
            "arrival: {gamma: {burstiness: 2}}",
            ArrivalProcess::Gamma { burstiness: 2.0 },
        ),
        (
            "arrival:\n    gamma:\n      burstiness: 0.25",
            ArrivalProcess::Gamma { burstiness: 0.25 },
        ),
    ] {
        let w = parse(&BASE.replace("arrival: poisson", to)).unwrap();
        assert_eq!(w.spec.load.arrival, want, "{to}");
    }
    // No `arrival`: Poisson.
    let w = parse(&BASE.replace("  arrival: poisson\n", "")).unwrap();
    assert_eq!(w.spec.load.arrival, ArrivalProcess::Poisson);
    for (to, want) in [
        ("max_tokens: {fixed: 7}", LengthDist::Fixed(7)),
        (
            "max_tokens:\n      uniform:\n        min: 3\n        max: 9",
            LengthDist::Uniform { min: 3, max: 9 },
        ),
        (
            "max_tokens: {normal: {mean: 50, stddev: 10, min: 20, max: 80}}",
            LengthDist::Normal {
                mean: 50.0,
                stddev: 10.0,
                min: 20,
                max: 80,
            },
        ),
        (
            "max_tokens: {lognormal: {median: 300, p90: 1200, min: 10, max: 4000}}",
            LengthDist::Lognormal {
                median: 300.0,
                p90: 1200.0,
                min: 10,
                max: 4000,
            },
        ),
    ] {
        let w = parse(&BASE.replace("max_tokens: {fixed: 5}", to)).unwrap();
        assert_eq!(w.spec.classes[0].max_tokens, want, "{to}");
    }
    // Unknown parameters are still refused at their key.
    let e = parse(&BASE.replace("{fixed: 5}", "{uniform: {min: 1, mx: 3}}")).unwrap_err();
    assert!(
        e.starts_with("w.yaml:8:") && e.contains("unknown field `mx`"),
        "{e}"
    );
    // An empty `prompt_tokens` with a dataset draws from the dataset, as before.
    let dir = std::env::temp_dir().join(format!("headroom-wl-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p.jsonl"), "{\"prompt\": \"hi\"}\n").unwrap();
    let text = BASE.replace(
        "prompt_tokens: {fixed: 10}",
        "prompt_tokens: ~\n    dataset: {path: p.jsonl, format: jsonl}",
    );
    let w = Workload::parse(&text, Path::new("w.yaml"), &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let w = w.unwrap();
    assert_eq!(w.spec.classes[0].prompt_tokens, None);
    assert_eq!(w.datasets[0].as_ref().map(|d| d.entries.len()), Some(1));
}

/// The spec written out as JSON (as `manifest.json` holds it) reads back the same.
#[test]
fn specs_round_trip_through_json() {
    let text = BASE
        .replace("arrival: poisson", "arrival: {gamma: {burstiness: 0.5}}")
        .replace(
            "max_tokens: {fixed: 5}",
            "max_tokens: {lognormal: {median: 300, p90: 1200, min: 10, max: 4000}}",
        );
    let w = parse(&text).unwrap();
    let json = serde_json::to_string(&w.spec).unwrap();
    let back: headroom_load::workload::WorkloadSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, w.spec);
}
