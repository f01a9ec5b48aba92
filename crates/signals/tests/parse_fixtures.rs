//! The real fixture bodies parse completely. Expected counts were taken from the files with
//! `grep -vc -e '^#' -e '^$'` (sample lines), `grep -c '^# TYPE'` and
//! `grep -c '^# TYPE .*_created gauge'`.

use headroom_signals::exposition::{Format, MetricType, parse};

fn fixture(rel: &str) -> String {
    let path = format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn vllm_fixtures_parse_completely() {
    for (file, samples, types, created) in [
        ("vllm/v0.17-gpu-idle-qwen05b.prom", 395, 83, 32),
        ("vllm/v0.32-cpu-after-burst-c16.prom", 462, 92, 38),
        ("vllm/v0.32-cpu-idle.prom", 430, 92, 38),
        ("vllm/v0.32-cpu-kv-pressure-24blocks.prom", 430, 92, 38),
        ("vllm/v0.32-cpu-pre-burst.prom", 462, 92, 38),
        ("vllm/v0.32-cpu-queueing-maxseqs4.prom", 430, 92, 38),
    ] {
        let e = parse(&fixture(file)).unwrap();
        assert_eq!(e.format, Some(Format::Text004), "{file}");
        assert_eq!(e.sample_count(), samples, "{file}");
        assert_eq!(
            e.families.iter().filter(|f| f.declared).count(),
            types,
            "{file}"
        );
        assert_eq!(
            e.families.len(),
            types,
            "{file}: every sample belongs to a declared family"
        );
        assert_eq!(
            e.families.iter().filter(|f| f.created_companion).count(),
            created,
            "{file}"
        );
        assert!(e.warnings.is_empty(), "{file}: {:?}", e.warnings);
    }
}

#[test]
fn vllm_histogram_family_and_help_with_trailing_space() {
    let e = parse(&fixture("vllm/v0.32-cpu-queueing-maxseqs4.prom")).unwrap();
    let f = e.family("http_request_duration_seconds").unwrap();
    assert_eq!(f.kind, MetricType::Histogram);
    assert!(f.help.as_deref().unwrap().ends_with("important. "));
    // `vllm:iteration_tokens_total` is a histogram whose family name ends in `_total`.
    let it = e.family("vllm:iteration_tokens_total").unwrap();
    assert_eq!(it.kind, MetricType::Histogram);
    let count = e
        .samples("vllm:iteration_tokens_total_count")
        .next()
        .unwrap();
    assert_eq!(count.value, 513.0);
    // TTFT buckets: 22 finite bounds + `+Inf` (metrics.md §1.2 TTFT_BUCKETS).
    assert_eq!(
        e.samples("vllm:time_to_first_token_seconds_bucket").count(),
        23
    );
    let created = e.family("vllm:prompt_tokens_created").unwrap();
    assert!(created.created_companion);
    let cfg = e.samples("vllm:cache_config_info").next().unwrap();
    assert_eq!(cfg.labels.get("num_gpu_blocks"), Some("8192"));
}

#[test]
fn dcgm_fixtures() {
    let e = parse(&fixture("dcgm/l4-idle-default-counters.prom")).unwrap();
    assert_eq!(e.sample_count(), 23);
    let power = e.samples("DCGM_FI_DEV_POWER_USAGE").next().unwrap();
    assert_eq!(power.value, 16.365);
    assert_eq!(power.labels.get("modelName"), Some("NVIDIA L4"));
    assert_eq!(power.labels.get("Hostname"), Some("gpu-node-a"));
    assert_eq!(
        e.family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .unwrap()
            .kind,
        MetricType::Counter
    );

    // HELP/TYPE stripped: every sample is its own untyped family.
    let e = parse(&fixture("dcgm/t4-loaded-no-help.prom")).unwrap();
    assert_eq!(e.sample_count(), 20);
    assert!(
        e.families
            .iter()
            .all(|f| f.kind == MetricType::Untyped && !f.declared)
    );
    assert_eq!(
        e.samples("DCGM_FI_DEV_GPU_UTIL").next().unwrap().value,
        91.0
    );
    assert_eq!(
        e.samples("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
            .next()
            .unwrap()
            .value,
        0.156205
    );
    assert_eq!(
        e.samples("DCGM_FI_DEV_FB_USED").next().unwrap().value,
        5120.0
    );
}
