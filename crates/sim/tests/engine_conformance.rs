//! Conformance of the engine twin's exposition with real exporters.
//!
//! vLLM: every `vllm:*` family the twin emits is compared with the vLLM 0.32 fixtures in
//! `shared/fixtures/vllm/v0.32-*.prom` — family names, `# TYPE`, `# HELP`, label names per series
//! and histogram bucket bounds — and every `vllm:*` family of the fixtures must be emitted.
//! dcgm: every family of `shared/fixtures/dcgm/l4-idle-default-counters.prom` is emitted with the
//! same type, HELP and label names in the same order, and values carry the right units.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use headroom_sim::{Engine, NewRequest, SimSpec};

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Family {
    kind: String,
    help: String,
    /// Label-name sets (sorted, `le` excluded) of its series.
    label_names: BTreeSet<Vec<String>>,
    /// Bucket bounds as printed (`le` values), in order, for histograms.
    buckets: Vec<String>,
}

/// Splits a sample line into (series name, [(label, value)], value).
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, String) {
    let (head, value) = line.rsplit_once(' ').expect("sample has a value");
    let (name, labels) = match head.find('{') {
        Some(i) => (&head[..i], &head[i + 1..head.len() - 1]),
        None => (head, ""),
    };
    let mut out = Vec::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let eq = rest.find('=').expect("label has =");
        let key = rest[..eq].to_string();
        let after = &rest[eq + 2..];
        let mut end = 0;
        let bytes = after.as_bytes();
        while bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        out.push((key, after[..end].to_string()));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    (name.to_string(), out, value.to_string())
}

/// Families of a Prometheus text body, keyed by family name (from `# TYPE`).
fn families(text: &str) -> BTreeMap<String, Family> {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            fams.entry(name.to_string()).or_default().help = help.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
            fams.entry(name.to_string()).or_default().kind = kind.to_string();
            current = name.to_string();
        } else if !line.is_empty() && !line.starts_with('#') {
            let (series, labels, _) = parse_sample(line);
            let fam = fams.get_mut(&current).expect("sample after TYPE");
            assert!(
                series.starts_with(current.as_str()),
                "sample {series} outside its family {current}"
            );
            let mut names: Vec<String> = labels
                .iter()
                .filter(|(k, _)| k != "le")
                .map(|(k, _)| k.clone())
                .collect();
            names.sort();
            fam.label_names.insert(names);
            if series.ends_with("_bucket")
                && let Some((_, le)) = labels.iter().find(|(k, _)| k == "le")
                && !fam.buckets.contains(le)
            {
                fam.buckets.push(le.clone());
            }
        }
    }
    fams
}

fn vllm_fixture_families() -> BTreeMap<String, Family> {
    let dir = fixtures_dir().join("vllm");
    let mut all: BTreeMap<String, Family> = BTreeMap::new();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fixtures/vllm exists") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !(name.starts_with("v0.32-") && name.ends_with(".prom")) {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (k, f) in families(&text) {
            if !k.starts_with("vllm:") {
                continue;
            }
            let e = all.entry(k).or_insert_with(|| f.clone());
            e.label_names.extend(f.label_names.iter().cloned());
        }
    }
    assert!(n >= 5, "expected the five v0.32 fixtures, found {n}");
    all
}

/// An engine with the fixtures' `max_model_len` bucket range (1-2-5 buckets up to 2000), after
/// some traffic so that every series has been touched.
fn busy_engine() -> (Engine, f64) {
    let spec = SimSpec {
        max_model_len: Some(2048),
        served_model_name: Some("tiny".into()),
        ..SimSpec::default()
    };
    let mut e = Engine::new(spec.resolve().unwrap()).unwrap();
    for i in 0..12u32 {
        e.add_request(
            NewRequest {
                prompt_tokens: (0..(20 + i * 7)).collect(),
                max_tokens: 30,
                ignore_eos: i % 3 == 0,
                eos_after: Some(10 + i),
                min_tokens: 0,
            },
            f64::from(i) * 0.01,
        );
    }
    let mut t = 0.0;
    while e.has_work() {
        t += e.step(t).duration_s;
    }
    (e, t)
}

#[test]
fn every_vllm_family_matches_the_v032_fixtures() {
    let fixture = vllm_fixture_families();
    let (e, t) = busy_engine();
    let ours = families(&e.render_metrics(t));
    assert!(ours.keys().all(|k| k.starts_with("vllm:")));
    let missing: Vec<&String> = fixture.keys().filter(|k| !ours.contains_key(*k)).collect();
    assert!(missing.is_empty(), "families not emitted: {missing:?}");
    for (name, f) in &ours {
        let Some(want) = fixture.get(name) else {
            panic!("family {name} is not in the v0.32 fixtures");
        };
        assert_eq!(f.kind, want.kind, "TYPE of {name}");
        assert_eq!(f.help, want.help, "HELP of {name}");
        for names in &f.label_names {
            assert!(
                want.label_names.contains(names),
                "{name}: label names {names:?} not among the fixture's {:?}",
                want.label_names
            );
        }
        assert_eq!(f.buckets, want.buckets, "bucket bounds of {name}");
    }
}

#[test]
fn vllm_samples_carry_the_right_label_values_and_counts() {
    let (e, t) = busy_engine();
    let text = e.render_metrics(t);
    // Every engine series carries engine="0" and the served model name (except the two families
    // that vLLM labels differently: cache_config_info has no model_name, admission_rejections no
    // engine).
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, labels, value) = parse_sample(line);
        assert!(value.parse::<f64>().is_ok() || value == "+Inf", "{line}");
        let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if !series.starts_with("vllm:cache_config_info") {
            assert_eq!(get("model_name"), Some("tiny"), "{line}");
        }
        if !series.starts_with("vllm:admission_rejections") {
            assert_eq!(get("engine"), Some("0"), "{line}");
        }
    }
    // 12 requests: 4 ignore EOS → length; the others stop at 10+i ≤ 30 tokens.
    assert!(text.contains(
        "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"tiny\"} 8.0"
    ));
    assert!(text.contains(
        "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"} 4.0"
    ));
    let expected_gen: u32 = (0..12u32)
        .map(|i| if i % 3 == 0 { 30 } else { 10 + i })
        .sum();
    assert!(text.contains(&format!(
        "vllm:generation_tokens_total{{engine=\"0\",model_name=\"tiny\"}} {expected_gen}.0"
    )));
    let expected_prompt: u32 = (0..12u32).map(|i| 20 + i * 7).sum();
    assert!(text.contains(&format!(
        "vllm:prompt_tokens_total{{engine=\"0\",model_name=\"tiny\"}} {expected_prompt}.0"
    )));
    // ITL observations = generated − requests (one per gap), as in the fixture (2088 = 2115 − 27).
    assert!(text.contains(&format!(
        "vllm:inter_token_latency_seconds_count{{engine=\"0\",model_name=\"tiny\"}} {}.0",
        expected_gen - 12
    )));
    // iteration_tokens_total sum = prompt + generated (fixture: 3236 = 1121 + 2115).
    assert!(text.contains(&format!(
        "vllm:iteration_tokens_total_sum{{engine=\"0\",model_name=\"tiny\"}} {}.0",
        expected_gen + expected_prompt
    )));
}

fn dcgm_fixture() -> String {
    std::fs::read_to_string(fixtures_dir().join("dcgm/l4-idle-default-counters.prom")).unwrap()
}

/// Label names of the first sample of each family, in printed order.
fn ordered_label_names(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, labels, _) = parse_sample(line);
        out.entry(series)
            .or_insert_with(|| labels.into_iter().map(|(k, _)| k).collect());
    }
    out
}

#[test]
fn dcgm_families_match_dcgm_exporter_default_counters() {
    let fixture = dcgm_fixture();
    let want = families(&fixture);
    let want_labels = ordered_label_names(&fixture);
    let spec = SimSpec {
        gpu: "l4".into(),
        model: "qwen2.5-0.5b".into(),
        max_model_len: Some(4096),
        ..SimSpec::default()
    };
    let e = Engine::new(spec.resolve().unwrap()).unwrap();
    let text = e.render_dcgm(0.0);
    let ours = families(&text);
    let our_labels = ordered_label_names(&text);
    for (name, f) in &want {
        let Some(o) = ours.get(name) else {
            panic!("dcgm family {name} not emitted");
        };
        assert_eq!(o.kind, f.kind, "TYPE of {name}");
        assert_eq!(o.help, f.help, "HELP of {name}");
        assert_eq!(our_labels[name], want_labels[name], "label order of {name}");
    }
    // Field order of the fixture is kept.
    let order = |t: &str| -> Vec<String> {
        t.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    let ours_order: Vec<String> = order(&text)
        .into_iter()
        .filter(|n| want.contains_key(n))
        .collect();
    assert_eq!(ours_order, order(&fixture));
}

#[test]
fn dcgm_units_percent_ratio_mib_watts() {
    let spec = SimSpec::default();
    let cfg = spec.resolve().unwrap();
    let mut e = Engine::new(cfg).unwrap();
    for _ in 0..32 {
        e.add_request(
            NewRequest {
                prompt_tokens: (0..50).collect(),
                max_tokens: 600,
                ignore_eos: true,
                eos_after: None,
                min_tokens: 0,
            },
            0.0,
        );
    }
    let mut t = 0.0;
    while t < 5.0 && e.has_work() {
        t += e.step(t).duration_s;
    }
    let text = e.render_dcgm(t);
    let value = |name: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .unwrap_or_else(|| panic!("{name} missing"));
        parse_sample(line).2
    };
    // DCGM_FI_DEV_*_UTIL: integer percent 0–100; busy GPU reads ~100.
    let util: i64 = value("DCGM_FI_DEV_GPU_UTIL")
        .parse()
        .expect("integer percent");
    assert!((90..=100).contains(&util), "GPU_UTIL {util}");
    // DCGM_FI_PROF_*: ratios with 6 decimals.
    for f in [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ] {
        let v = value(f);
        assert_eq!(v.split('.').nth(1).map(str::len), Some(6), "{f}={v}");
        let x: f64 = v.parse().unwrap();
        assert!((0.0..=1.0).contains(&x), "{f}={x}");
    }
    // Framebuffer in MiB: used + free + reserved = 23028 MiB (A10G), used ≈ 0.9·total + context.
    let used: i64 = value("DCGM_FI_DEV_FB_USED").parse().unwrap();
    let free: i64 = value("DCGM_FI_DEV_FB_FREE").parse().unwrap();
    let reserved: i64 = value("DCGM_FI_DEV_FB_RESERVED").parse().unwrap();
    assert_eq!(used + free + reserved, 23028);
    // Walkthrough: 21,483 MiB used at util 0.9.
    assert!((used - 21483).abs() <= 2, "FB_USED {used}");
    // Power in W with 6 decimals, between idle and TDP.
    let p: f64 = value("DCGM_FI_DEV_POWER_USAGE").parse().unwrap();
    assert!((60.0..=300.0).contains(&p), "power {p}");
    // Energy in mJ: at least idle power × elapsed time.
    let mj: f64 = value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        .parse()
        .unwrap();
    assert!(mj >= 60.0 * t * 1000.0 * 0.99, "energy {mj} mJ over {t} s");
    assert_eq!(value("DCGM_FI_DEV_XID_ERRORS"), "0");
}
