//! Reading and validating `workload.yaml`: the file is parsed once strictly and once leniently
//! for the line and column of each field, so that every semantic error names its place.

use super::datasets::Dataset;
use super::distributions::LengthDist;
use super::spec::{
    DEFAULT_WORKLOAD_YAML, Levels, MAX_LEVEL_SPAN, MAX_REQUEST_TOKENS, Workload, WorkloadSpec,
    check_level,
};
use crate::arrivals::ArrivalProcess;
use headroom_core::yaml::{YamlError, parse_yaml};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;
use std::path::Path;
use std::sync::Arc;

impl Workload {
    /// Reads, parses and validates `workload.yaml`, loading its datasets.
    ///
    /// # Errors
    /// [`YamlError`] naming the file, with line, column and field of the first problem.
    pub fn load(path: &Path) -> Result<Workload, YamlError> {
        let text = headroom_core::input_file::read_to_string(
            path,
            headroom_core::input_file::MAX_CONFIG_BYTES,
        )
        .map_err(|e| YamlError::new(path, format!("cannot read file: {e}")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Workload::parse(&text, path, base)
    }

    /// Parses and validates workload text; `origin` names it in errors and `base_dir` resolves
    /// relative dataset paths.
    ///
    /// # Errors
    /// As [`Workload::load`].
    pub fn parse(text: &str, origin: &Path, base_dir: &Path) -> Result<Workload, YamlError> {
        let spec: WorkloadSpec =
            parse_yaml(text, origin).map_err(|e| name_the_class(e, text, origin))?;
        // A second, lenient pass records where each field sits, so that semantic errors (min >
        // max, weight ≤ 0, a missing dataset) carry a line and column too.
        let locs: Locs = parse_yaml(text, origin).unwrap_or_default();
        let err = |loc: Option<(u64, u64)>, field: String, msg: String| {
            YamlError::at(origin, text, loc, format!("{field}: {msg}"))
        };
        let class_loc = |i: usize, f: fn(&ClassLocs) -> &Option<Spanned<IgnoredAny>>| {
            locs.classes.get(i).and_then(|c| {
                f(c).as_ref()
                    .map(span_pos)
                    .or(c.name.as_ref().map(span_pos))
            })
        };
        let top = |f: fn(&Locs) -> &Option<Spanned<IgnoredAny>>| f(&locs).as_ref().map(span_pos);

        if spec.classes.is_empty() {
            return Err(err(
                None,
                "classes".into(),
                "expected at least one request class".into(),
            ));
        }
        if let Some(m) = &spec.model
            && m.trim().is_empty()
        {
            return Err(err(
                top(|l| &l.model),
                "model".into(),
                "empty; expected a served model name or no `model` field".into(),
            ));
        }
        if spec.measure.is_zero() {
            return Err(err(
                top(|l| &l.measure),
                "measure".into(),
                "expected a positive duration such as 30s".into(),
            ));
        }
        // Every load test stops by itself in bounded time: a level longer than a day is a typo
        // (`30h` for `30s`); a soak belongs in several runs, each with its own results.
        for (value, field, at) in [
            (spec.measure, "measure", top(|l| &l.measure)),
            (spec.warmup, "warmup", top(|l| &l.warmup)),
        ] {
            if value > MAX_LEVEL_SPAN {
                return Err(err(
                    at,
                    field.into(),
                    format!(
                        "{} s is longer than a day per level; expected at most 24h (split a soak into several runs)",
                        value.as_secs()
                    ),
                ));
            }
        }
        let mut datasets = Vec::with_capacity(spec.classes.len());
        for (i, c) in spec.classes.iter().enumerate() {
            let field = |f: &str| format!("classes[{i}] (`{}`).{f}", c.name);
            if c.name.is_empty()
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
            {
                return Err(err(
                    class_loc(i, |c| &c.name),
                    format!("classes[{i}].name"),
                    format!(
                        "`{}`: expected a non-empty name of letters, digits, `_`, `-` or `.`",
                        c.name
                    ),
                ));
            }
            if spec.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(err(
                    class_loc(i, |c| &c.name),
                    format!("classes[{i}].name"),
                    format!("`{}` is used twice; expected unique class names", c.name),
                ));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                return Err(err(
                    class_loc(i, |c| &c.weight),
                    field("weight"),
                    format!("{}: expected a positive number", c.weight),
                ));
            }
            if let Some(p) = &c.prompt_tokens
                && let Err(m) = p.validate()
            {
                return Err(err(
                    class_loc(i, |c| &c.prompt_tokens),
                    field("prompt_tokens"),
                    m,
                ));
            }
            if let Err(m) = c.max_tokens.validate() {
                return Err(err(class_loc(i, |c| &c.max_tokens), field("max_tokens"), m));
            }
            if c.max_tokens.min() == Some(0) {
                return Err(err(
                    class_loc(i, |c| &c.max_tokens),
                    field("max_tokens"),
                    "can be 0; expected at least 1 output token".into(),
                ));
            }
            if u64::from(c.shared_prefix_tokens) > MAX_REQUEST_TOKENS {
                return Err(err(
                    class_loc(i, |c| &c.shared_prefix_tokens),
                    field("shared_prefix_tokens"),
                    format!(
                        "{}: expected at most {MAX_REQUEST_TOKENS} tokens per request",
                        c.shared_prefix_tokens
                    ),
                ));
            }
            let most = u64::from(c.shared_prefix_tokens)
                + c.prompt_tokens
                    .as_ref()
                    .and_then(LengthDist::max)
                    .map_or(0, u64::from)
                + c.max_tokens.max().map_or(0, u64::from);
            if most > MAX_REQUEST_TOKENS {
                return Err(err(
                    class_loc(i, |c| &c.max_tokens),
                    field("max_tokens"),
                    format!(
                        "shared prefix + prompt + max_tokens can reach {most} tokens; expected at most {MAX_REQUEST_TOKENS} per request"
                    ),
                ));
            }
            let prompt_from_dataset = match &c.prompt_tokens {
                None => true,
                Some(LengthDist::Dataset) => true,
                Some(_) => false,
            };
            match (&c.dataset, prompt_from_dataset) {
                (None, true) => {
                    return Err(err(
                        class_loc(i, |c| &c.prompt_tokens),
                        field("prompt_tokens"),
                        "no dataset to draw prompts from; expected a length distribution such as {uniform: {min: 40, max: 60}} or a `dataset`".into(),
                    ));
                }
                (Some(_), false) => {
                    return Err(err(
                        class_loc(i, |c| &c.dataset),
                        field("dataset"),
                        "given, but prompt_tokens is synthetic; expected `prompt_tokens: dataset` (or no prompt_tokens) with a dataset".into(),
                    ));
                }
                _ => {}
            }
            if !prompt_from_dataset
                && c.shared_prefix_tokens == 0
                && c.prompt_tokens.as_ref().and_then(LengthDist::min) == Some(0)
            {
                return Err(err(
                    class_loc(i, |c| &c.prompt_tokens),
                    field("prompt_tokens"),
                    "can be 0 with no shared prefix; expected prompts of at least 1 token".into(),
                ));
            }
            let ds = match &c.dataset {
                None => {
                    if c.max_tokens == LengthDist::Dataset {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            "`dataset` but the class has no dataset; expected a length distribution".into(),
                        ));
                    }
                    None
                }
                Some(d) => {
                    let path = if d.path.is_absolute() {
                        d.path.clone()
                    } else {
                        base_dir.join(&d.path)
                    };
                    let ds = Dataset::load(&path, d.format)
                        .map_err(|m| err(class_loc(i, |c| &c.dataset), field("dataset.path"), m))?;
                    let longest = ds
                        .entries
                        .iter()
                        .filter_map(|e| e.output_tokens)
                        .max()
                        .unwrap_or(0);
                    if c.max_tokens == LengthDist::Dataset
                        && u64::from(longest) > MAX_REQUEST_TOKENS
                    {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            format!(
                                "`dataset`, but an entry of `{}` asks for {longest} output tokens; expected at most {MAX_REQUEST_TOKENS} per request",
                                path.display()
                            ),
                        ));
                    }
                    if c.max_tokens == LengthDist::Dataset && !ds.has_output_lengths() {
                        return Err(err(
                            class_loc(i, |c| &c.max_tokens),
                            field("max_tokens"),
                            format!(
                                "`dataset`, but not every entry of `{}` has an output length (a ShareGPT reply or a JSONL `max_tokens`); expected a length distribution",
                                path.display()
                            ),
                        ));
                    }
                    Some(Arc::new(ds))
                }
            };
            datasets.push(ds);
        }
        let load = &spec.load;
        if let Levels::List(v) = &load.levels {
            if v.is_empty() {
                return Err(err(
                    top(|l| &l.load),
                    "load.levels".into(),
                    "empty list; expected levels such as [1, 2, 4] or `auto`".into(),
                ));
            }
            for x in v {
                if let Err(m) = check_level(load.mode, *x) {
                    return Err(err(top(|l| &l.load), "load.levels".into(), m));
                }
            }
        }
        if let ArrivalProcess::Gamma { burstiness } = load.arrival
            && !(burstiness.is_finite() && burstiness > 0.0)
        {
            return Err(err(
                top(|l| &l.load),
                "load.arrival.gamma.burstiness".into(),
                format!("{burstiness}: expected a positive number (1 = Poisson, < 1 burstier)"),
            ));
        }
        if load.max_concurrency == Some(0) {
            return Err(err(
                top(|l| &l.load),
                "load.max_concurrency".into(),
                "0: expected at least 1 request in flight, or no cap".into(),
            ));
        }
        Ok(Workload {
            spec,
            datasets,
            origin: origin.to_path_buf(),
        })
    }

    /// The built-in workload ([`DEFAULT_WORKLOAD_YAML`]).
    pub fn builtin() -> Workload {
        Workload::parse(
            DEFAULT_WORKLOAD_YAML,
            Path::new("<built-in workload>"),
            Path::new("."),
        )
        .unwrap_or_else(|e| unreachable!("the built-in workload is valid: {e}"))
    }
}

/// A class field's shape error (`max_tokens: a bare number …`, from [`hints`](super::hints))
/// names only the field; this names the class too (`classes[1] (`chat`).max_tokens: …`), as the
/// validation's messages do: the class is the last one that starts at or before the error's line.
fn name_the_class(mut e: YamlError, text: &str, origin: &Path) -> YamlError {
    #[derive(Deserialize)]
    struct Starts {
        #[serde(default)]
        classes: Vec<Spanned<IgnoredAny>>,
    }
    #[derive(Deserialize)]
    struct Names {
        #[serde(default)]
        classes: Vec<Name>,
    }
    #[derive(Deserialize)]
    struct Name {
        #[serde(default)]
        name: Option<String>,
    }
    let Some((line, _)) = e.location else {
        return e;
    };
    if !["prompt_tokens: ", "max_tokens: ", "dataset: "]
        .iter()
        .any(|f| e.message.starts_with(f))
    {
        return e;
    }
    let Ok(starts) = parse_yaml::<Starts>(text, origin) else {
        return e;
    };
    let Some(i) = starts.classes.iter().rposition(|c| span_pos(c).0 <= line) else {
        return e;
    };
    let name = parse_yaml::<Names>(text, origin)
        .ok()
        .and_then(|n| n.classes.into_iter().nth(i))
        .and_then(|n| n.name);
    e.message = match name {
        Some(n) => format!("classes[{i}] (`{n}`).{}", e.message),
        None => format!("classes[{i}].{}", e.message),
    };
    e
}

fn span_pos(s: &Spanned<IgnoredAny>) -> (u64, u64) {
    (s.referenced.line(), s.referenced.column())
}

/// Where fields sit in the file (lenient shadow of [`WorkloadSpec`]).
#[derive(Deserialize, Default)]
struct Locs {
    #[serde(default)]
    model: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    measure: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    warmup: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    load: Option<Spanned<IgnoredAny>>,
    #[serde(default, rename = "classes", deserialize_with = "de_class_locs")]
    classes: Vec<ClassLocs>,
}

fn de_class_locs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ClassLocs>, D::Error> {
    Ok(Option::<Vec<ClassLocs>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
struct ClassLocs {
    #[serde(default)]
    name: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    weight: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    prompt_tokens: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    max_tokens: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    dataset: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    shared_prefix_tokens: Option<Spanned<IgnoredAny>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::test_support::{MIN, parse};
    use crate::workload::{Endpoint, LengthDist};
    use headroom_core::run::LoadMode;
    use std::time::Duration;

    #[test]
    fn builtin_workload_resolves() {
        let w = Workload::builtin();
        let s = &w.spec;
        assert_eq!(s.model, None);
        assert_eq!(s.warmup, Duration::from_secs(5));
        assert_eq!(s.measure, Duration::from_secs(30));
        assert_eq!(s.load.mode, LoadMode::Concurrency);
        assert_eq!(s.load.levels, Levels::Auto);
        let c = &s.classes[0];
        assert_eq!(c.name, "claims_assistant");
        assert_eq!(c.endpoint, Endpoint::Chat);
        assert_eq!(c.shared_prefix_tokens, 200);
        assert_eq!(
            c.max_tokens,
            LengthDist::Uniform {
                min: 500,
                max: 1000
            }
        );
        assert!(c.ignore_eos);
        assert_eq!(s.classes.len(), 1);
        assert_eq!(w.shares(), vec![1.0]);
        assert_eq!(w.datasets, vec![None]);
        // The mixed example adds the long-context class at weight 1 against 9.
        let m = Workload::parse(
            include_str!("../../../../examples/workload-mixed.yaml"),
            Path::new("examples/workload-mixed.yaml"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(m.spec.classes[1].name, "long_context");
        assert_eq!(m.shares(), vec![0.9, 0.1]);
    }

    #[test]
    fn minimal_and_defaults() {
        let w = parse(MIN).unwrap();
        let c = &w.spec.classes[0];
        assert_eq!(c.weight, 1.0);
        assert_eq!(c.endpoint, Endpoint::Chat);
        assert!(!c.ignore_eos);
        assert_eq!(w.spec.load.levels, Levels::List(vec![1.0, 2.0]));
        assert_eq!(w.spec.load.arrival, ArrivalProcess::Poisson);
        assert_eq!(w.spec.seed, None);
        assert_eq!(
            w.spec.load.level_mode(3.6),
            crate::arrivals::LevelMode::Concurrency(4)
        );
    }

    #[test]
    fn arrival_and_durations_parse() {
        let t = "warmup: 0\nmeasure: 1.5m\nload: {mode: rate, levels: [0.5, 2], arrival: {gamma: {burstiness: 0.5}}, max_concurrency: 64}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {lognormal: {median: 100, p90: 400, min: 1, max: 4000}}, max_tokens: {normal: {mean: 200, stddev: 50, min: 1, max: 400}}}\n";
        let w = parse(t).unwrap();
        assert_eq!(w.spec.warmup, Duration::ZERO);
        assert_eq!(w.spec.measure, Duration::from_secs(90));
        assert_eq!(
            w.spec.load.arrival,
            ArrivalProcess::Gamma { burstiness: 0.5 }
        );
        assert_eq!(w.spec.load.max_concurrency, Some(64));
        assert_eq!(w.spec.classes[0].endpoint, Endpoint::Completions);
        assert_eq!(
            w.spec.load.level_mode(2.0),
            crate::arrivals::LevelMode::Rate {
                rate_per_s: 2.0,
                arrival: ArrivalProcess::Gamma { burstiness: 0.5 },
                max_concurrency: Some(64)
            }
        );
        // round trip through YAML keeps the meaning
        let y = serde_saphyr::to_string(&w.spec).unwrap();
        let back = parse(&y).unwrap();
        assert_eq!(back.spec, w.spec);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        for (text, needles) in [
            (
                MIN.replace("{fixed: 5}", "{uniform: {min: 9, max: 3}}"),
                vec![
                    "workload.yaml:5:",
                    "classes[0] (`a`).max_tokens",
                    "min 9 > max 3",
                ],
            ),
            (
                MIN.replace("- name: a\n", "- name: a\n    weight: 0\n"),
                vec!["workload.yaml:4:", "classes[0] (`a`).weight", "positive"],
            ),
            (
                MIN.replace("prompt_tokens: {fixed: 10}", "prompt_tokens: {fixd: 10}"),
                vec!["workload.yaml:", "fixd"],
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "dataset: {path: nope.json, format: sharegpt}",
                ),
                vec!["classes[0] (`a`).dataset.path", "nope.json", "cannot read"],
            ),
            (
                MIN.replace("levels: [1, 2]", "levels: [1.5]"),
                vec!["load.levels", "whole numbers"],
            ),
            (MIN.replace("levels: [1, 2]", "levels: some"), vec!["auto"]),
            (
                MIN.replace("{fixed: 5}", "{fixed: 0}"),
                vec!["max_tokens", "at least 1"],
            ),
            (
                MIN.replace("prompt_tokens: {fixed: 10}", "prompt_tokens: dataset"),
                vec!["prompt_tokens", "no dataset"],
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "prompt_tokens: {lognormal: {median: 10, p90: 5, min: 1, max: 9}}",
                ),
                vec!["0 < median < p90"],
            ),
            (
                MIN.replace("- name: a", "- name: a/b"),
                vec!["classes[0].name"],
            ),
            (
                format!(
                    "{MIN}  - name: a\n    prompt_tokens: {{fixed: 1}}\n    max_tokens: {{fixed: 1}}\n"
                ),
                vec!["used twice"],
            ),
            (
                format!("warmup: 5 parsecs\n{MIN}"),
                vec!["workload.yaml:1:", "unknown unit"],
            ),
            (
                format!("measure: soon\n{MIN}"),
                vec!["workload.yaml:1:", "`soon`"],
            ),
            (
                format!("measure: 99999999h\n{MIN}"),
                vec!["workload.yaml:1:", "measure", "at most 24h"],
            ),
            (
                format!("warmup: 25h\n{MIN}"),
                vec!["workload.yaml:1:", "warmup", "at most 24h"],
            ),
            (
                MIN.replace("levels: [1, 2]", "levels: [1, 2000000]"),
                vec!["load.levels", "2000000", "1 to 1000000"],
            ),
            (
                MIN.replace(
                    "mode: concurrency, levels: [1, 2]",
                    "mode: rate, levels: [1e300]",
                ),
                vec!["load.levels", "to 1000000 req/s"],
            ),
            (format!("{MIN}extra: 1\n"), vec!["extra"]),
        ] {
            let e = match parse(&text) {
                Ok(_) => panic!("accepted: {text}"),
                Err(e) => e.to_string(),
            };
            for n in needles {
                assert!(e.contains(n), "`{n}` not in: {e}");
            }
            assert!(!e.contains("error:") && !e.contains("<input>"), "{e}");
        }
    }

    /// Every way a duration can be out of range is an error at its line, never a panic: values
    /// past `Duration`'s range (which `Duration::from_secs_f64` panics on), negative, not a
    /// number, and longer than a day.
    #[test]
    fn any_out_of_range_duration_is_an_error_at_its_line() {
        for field in ["measure", "warmup"] {
            for v in [
                "99999999999999999999999s",
                "1e30",
                "1e300h",
                "18446744073709551616s",
                "-5",
                "-1s",
                ".nan",
                ".inf",
                "-.inf",
                "25h",
                "86401s",
            ] {
                let text = format!("{field}: {v}\n{MIN}");
                let got = std::panic::catch_unwind(|| parse(&text));
                let e = match got {
                    Err(_) => panic!("{field}: {v} panicked"),
                    Ok(Ok(_)) => panic!("{field}: {v} accepted"),
                    Ok(Err(e)) => e.to_string(),
                };
                assert!(e.contains("workload.yaml:1:"), "{field}: {v}: {e}");
            }
        }
        // The bounds themselves are accepted.
        let w = parse(&format!("measure: 24h\nwarmup: 0\n{MIN}")).unwrap();
        assert_eq!(w.spec.measure, Duration::from_secs(86_400));
        assert_eq!(w.spec.warmup, Duration::ZERO);
    }

    /// Token counts beyond [`MAX_REQUEST_TOKENS`] are refused at their field, for every field
    /// that sets a request's size and for their sum (they once aborted the process allocating
    /// the prompt).
    #[test]
    fn token_counts_beyond_the_cap_are_refused() {
        let over = MAX_REQUEST_TOKENS + 1;
        for (text, needle) in [
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    "prompt_tokens: {fixed: 4000000000}",
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    &format!("prompt_tokens: {{uniform: {{min: 1, max: {over}}}}}"),
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace(
                    "prompt_tokens: {fixed: 10}",
                    &format!(
                        "prompt_tokens: {{lognormal: {{median: 10, p90: 20, min: 1, max: {over}}}}}"
                    ),
                ),
                "prompt_tokens",
            ),
            (
                MIN.replace("max_tokens: {fixed: 5}", "max_tokens: {fixed: 4294967295}"),
                "max_tokens",
            ),
            (
                MIN.replace(
                    "max_tokens: {fixed: 5}",
                    &format!("max_tokens: {{normal: {{mean: 5, stddev: 1, min: 1, max: {over}}}}}"),
                ),
                "max_tokens",
            ),
            (
                MIN.replace(
                    "- name: a\n",
                    "- name: a\n    shared_prefix_tokens: 4294967295\n",
                ),
                "shared_prefix_tokens",
            ),
            // Each under the cap, the sum over it.
            (
                MIN.replace(
                    "- name: a\n",
                    "- name: a\n    shared_prefix_tokens: 6000000\n",
                )
                .replace("{fixed: 5}", "{fixed: 5000000}"),
                "shared prefix + prompt + max_tokens can reach 11000010",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(needle), "`{needle}` not in {e}");
            assert!(e.contains("workload.yaml:"), "{e}");
        }
        // The cap itself is allowed.
        let ok = MIN.replace(
            "max_tokens: {fixed: 5}",
            &format!("max_tokens: {{fixed: {}}}", MAX_REQUEST_TOKENS - 10),
        );
        parse(&ok).unwrap();
        // A dataset's output lengths count too.
        let dir = std::env::temp_dir().join(format!("headroom-wl-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("d.jsonl"),
            "{\"prompt\": \"hi\", \"max_tokens\": 4000000000}\n",
        )
        .unwrap();
        let t = "load: {mode: concurrency, levels: [1]}\nclasses:\n  - name: a\n    dataset: {path: d.jsonl, format: jsonl}\n    max_tokens: dataset\n";
        let e = Workload::parse(t, Path::new("workload.yaml"), &dir)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("4000000000 output tokens"), "{e}");
    }
}
