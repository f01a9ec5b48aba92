//! Extreme values in every numeric field of the GPU preset, the model preset and the engine spec:
//! each must give either a clear error that names the field, or an engine that sizes a sane KV
//! pool and serves a few requests with finite latencies. Never a panic, never a wrapped count.

use std::path::{Path, PathBuf};

use headroom_sim::engine::spec::MAX_GPU_BLOCKS;
use headroom_sim::{Engine, EngineConfig, Load, NewRequest, SimSpec, VirtualOptions, run_virtual};

/// A plausible custom GPU (RTX 4090-like), one `field: value` per line.
const GPU: &[(&str, &str)] = &[
    ("memory_mib", "24564"),
    ("mem_bw_gbps", "1008"),
    ("bf16_tflops", "165"),
    ("fp8_tflops", "330"),
    ("tdp_w", "450"),
    ("idle_w", "30"),
    ("mbu", "0.81"),
    ("mfu", "0.45"),
    ("boost_clock_mhz", "2520"),
    ("idle_clock_mhz", "210"),
    ("mem_clock_mhz", "10501"),
    ("link_gbps", "25"),
    ("allreduce_latency_us", "25"),
    ("t_step_ms", "0.3"),
    ("t_layer_us", "8"),
    ("t_seq_us", "5"),
    ("frontend_in_ms", "10"),
    ("cuda_context_mib", "600"),
    ("fb_reserved_mib", "300"),
    ("ambient_c", "30"),
    ("thermal_resistance_c_per_w", "0.11"),
    ("thermal_tau_s", "30"),
    ("slowdown_c", "88"),
];

/// A small custom model (4 layers, d = 512).
const MODEL: &[(&str, &str)] = &[
    ("num_layers", "4"),
    ("hidden_size", "512"),
    ("num_heads", "8"),
    ("num_kv_heads", "8"),
    ("head_dim", "64"),
    ("intermediate_size", "1024"),
    ("vocab_size", "1000"),
    ("params_total", "2.0e7"),
    ("params_non_embedding", "1.5e7"),
    ("max_position_embeddings", "4096"),
];

/// Engine spec fields (YAML, as in a `--config` file).
const SPEC: &[&str] = &[
    "gpu_memory_utilization",
    "tensor_parallel",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "num_gpu_blocks_override",
    "seed",
    "time_scale",
    "power_cap_w",
    "xid_at_s",
];

/// The values swept into each field, as YAML scalars.
const EXTREMES: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "0.5",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "1e300",
    "1.0e-300",
    "-1e300",
    ".nan",
    ".inf",
    "-.inf",
];

fn gpu_yaml(over: Option<(&str, &str)>) -> String {
    let mut s = String::from(
        "testgpu:\n  display_name: \"Test GPU\"\n  interconnect: pcie\n  has_memory_temp: false\n",
    );
    for (k, v) in GPU {
        let v = match over {
            Some((f, x)) if f == *k => x,
            _ => v,
        };
        s.push_str(&format!("  {k}: {v}\n"));
    }
    s
}

fn model_yaml(over: Option<(&str, &str)>) -> String {
    let mut s = String::from("tiny:\n  hf_name: t/tiny\n  tie_word_embeddings: true\n");
    for (k, v) in MODEL {
        let v = match over {
            Some((f, x)) if f == *k => x,
            _ => v,
        };
        s.push_str(&format!("  {k}: {v}\n"));
    }
    s
}

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// An accepted configuration must be an engine that works: a pool of 2 ..= MAX_GPU_BLOCKS blocks
/// that holds one `max_model_len` request, and four requests served with finite, ordered times.
fn assert_sane(label: &str, cfg: EngineConfig) {
    assert!(
        (2..=MAX_GPU_BLOCKS).contains(&cfg.num_gpu_blocks),
        "{label}: {} blocks",
        cfg.num_gpu_blocks
    );
    assert!(
        cfg.kv_cache_tokens() >= u64::from(cfg.max_model_len),
        "{label}: pool of {} tokens < max_model_len {}",
        cfg.kv_cache_tokens(),
        cfg.max_model_len
    );
    assert!(cfg.kv_bytes_per_token.is_finite() && cfg.kv_bytes_per_token > 0.0);
    assert!(cfg.weight_bytes_per_gpu.is_finite() && cfg.weight_bytes_per_gpu > 0.0);
    let prompt_len = (cfg.max_model_len / 2).clamp(1, 64);
    // A request stops at max_model_len (prompt + output), as in vLLM.
    let expected_out = 4.min(cfg.max_model_len - prompt_len);
    let mut engine = Engine::new(cfg).unwrap_or_else(|e| panic!("{label}: Engine::new: {e}"));
    let requests = (0..4)
        .map(|i| NewRequest {
            prompt_tokens: (0..prompt_len).map(|t| t + i).collect(),
            max_tokens: 4,
            ignore_eos: true,
            ..NewRequest::default()
        })
        .collect();
    let run = run_virtual(
        &mut engine,
        Load::Closed {
            concurrency: 2,
            requests,
            ramp_s: 0.0,
            think_s: 0.0,
        },
        &VirtualOptions {
            max_steps: 10_000,
            ..VirtualOptions::default()
        },
    );
    assert!(!run.stalled, "{label}: engine stalled");
    assert_eq!(run.records.len(), 4, "{label}");
    for r in &run.records {
        assert_eq!(r.output_tokens, expected_out, "{label}: {r:?}");
        let (ttft, e2e) = (r.ttft_s().unwrap(), r.e2e_s().unwrap());
        assert!(
            ttft.is_finite() && ttft >= 0.0 && e2e.is_finite() && e2e >= ttft,
            "{label}: ttft {ttft}, e2e {e2e}"
        );
    }
    for text in [
        engine.render_metrics(run.end_s),
        engine.render_dcgm(run.end_s),
    ] {
        assert!(!text.contains("NaN"), "{label}: NaN in\n{text}");
    }
}

/// An error must name the field: in the field path (`model tiny: head_dim`) or, for a value the
/// YAML parser refuses, in the quoted source line.
fn assert_names(label: &str, field: &str, err: &str) {
    assert!(
        err.contains(field),
        "{label}: error does not name {field}: {err}"
    );
}

#[test]
fn every_numeric_preset_and_spec_field_errs_by_name_or_gives_a_sane_engine() {
    let dir = std::env::temp_dir().join(format!("headroom-sim-extremes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Dir(dir.clone());
    let good_gpu = write(&dir, "gpu.yaml", &gpu_yaml(None));
    let good_model = write(&dir, "model.yaml", &model_yaml(None));
    let base = SimSpec {
        gpu: "testgpu".into(),
        model: "tiny".into(),
        custom_gpu_file: Some(good_gpu.clone()),
        custom_model_file: Some(good_model.clone()),
        ..SimSpec::default()
    };
    assert_sane("baseline", base.resolve().expect("baseline resolves"));
    let (mut accepted, mut refused) = (0, 0);
    let mut tally = |label: &str, field: &str, r: Result<EngineConfig, String>| match r {
        Ok(cfg) => {
            accepted += 1;
            assert_sane(label, cfg);
        }
        Err(e) => {
            refused += 1;
            assert_names(label, field, &e);
        }
    };
    for value in EXTREMES {
        for (field, _) in GPU {
            let p = write(&dir, "gpu_x.yaml", &gpu_yaml(Some((field, value))));
            let spec = SimSpec {
                custom_gpu_file: Some(p),
                ..base.clone()
            };
            let label = format!("gpu {field}: {value}");
            tally(&label, field, spec.resolve().map_err(|e| e.to_string()));
        }
        for (field, _) in MODEL {
            let p = write(&dir, "model_x.yaml", &model_yaml(Some((field, value))));
            let spec = SimSpec {
                custom_model_file: Some(p),
                ..base.clone()
            };
            let label = format!("model {field}: {value}");
            tally(&label, field, spec.resolve().map_err(|e| e.to_string()));
        }
        for field in SPEC {
            let yaml = format!(
                "gpu: testgpu\nmodel: tiny\ncustom_gpu_file: {}\ncustom_model_file: {}\n{field}: {value}\n",
                good_gpu.display(),
                good_model.display()
            );
            let label = format!("spec {field}: {value}");
            let r = headroom_core::yaml::parse_yaml::<SimSpec>(&yaml, Path::new("sim.yaml"))
                .map_err(|e| e.to_string())
                .and_then(|s| s.resolve().map_err(|e| e.to_string()));
            tally(&label, field, r);
        }
    }
    // Both outcomes occur: the sweep is not vacuous in either direction.
    assert!(
        accepted > 50 && refused > 300,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn a_kv_block_larger_than_the_kv_budget_is_a_clear_error() {
    // The tester's case: head_dim 4e9 → one KV block larger than the whole GPU. Refused by range.
    let dir = std::env::temp_dir().join(format!("headroom-sim-hugehead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Dir(dir.clone());
    let spec = |model: PathBuf| SimSpec {
        model: "tiny".into(),
        custom_model_file: Some(model),
        ..SimSpec::default()
    };
    let huge = write(
        &dir,
        "m1.yaml",
        &model_yaml(Some(("head_dim", "4000000000"))),
    );
    let e = spec(huge).resolve().unwrap_err();
    assert_eq!(e.field, "model tiny: head_dim");
    assert_eq!(
        e.message,
        "expected a whole number from 1 to 65536, got 4000000000"
    );

    // In range but still too big: 10 000 layers × 8 KV heads × 65 536 dims × 2 (K, V) × 2 bytes
    // = 20.97 GB per token, 335.5 GB (312.5 GiB) per 16-token block, on a 22.5 GiB A10G. vLLM:
    // "No available memory for the cache blocks".
    let big = write(
        &dir,
        "m2.yaml",
        &model_yaml(Some(("head_dim", "65536"))).replace("num_layers: 4", "num_layers: 10000"),
    );
    let e = spec(big).resolve().unwrap_err();
    assert_eq!(e.field, "gpu_memory_utilization");
    assert!(
        e.message.starts_with(
            "No available memory for the cache blocks: one KV block of tiny (16 tokens) needs 312.500 GiB per GPU"
        ),
        "{e}"
    );

    // One block fits but not a max_model_len request: vLLM's "max seq len" message, with sizes.
    // 4 layers × 8 × 64 × 2 × 2 = 8 KiB per token; override 3 blocks = 2 usable = 32 tokens.
    let ok = write(&dir, "m3.yaml", &model_yaml(None));
    let e = SimSpec {
        max_model_len: Some(4096),
        num_gpu_blocks_override: Some(3),
        ..spec(ok)
    }
    .resolve()
    .unwrap_err();
    assert_eq!(e.field, "num_gpu_blocks_override");
    // needed: 4096 / 16 = 256 blocks × 128 KiB = 0.03125 GiB; available 2 × 128 KiB.
    assert!(
        e.message.starts_with(
            "To serve at least one request with the model's max seq len (4096), 0.03 GiB KV cache is needed, which is larger than the available KV cache memory (0.00 GiB, 32 tokens)"
        ),
        "{e}"
    );
    assert!(e.message.contains("at least 257"), "{e}");
}

#[test]
fn a_block_override_the_gpu_cannot_hold_is_refused_by_name() {
    // A10G (23 028 MiB, CUDA context 758 MiB) with Qwen2.5-3B in bf16 (presets): weights =
    // 2 774 773 760 × 2 + 151 936 × 2048 × 2 (tied embedding) = 6 171 877 376 B; left:
    // 22 270 MiB − weights = 17 179 910 144 B. A block = 36 layers × 2 KV heads × 128 × 2 × 2 B ×
    // 16 tokens = 589 824 B, so at most 29 127 blocks fit; vLLM would hit CUDA OOM above that.
    let spec = |n: u32| SimSpec {
        num_gpu_blocks_override: Some(n),
        max_model_len: Some(4096),
        ..SimSpec::default()
    };
    let ok = spec(29_127).resolve().expect("29 127 blocks fit");
    assert_eq!(ok.num_gpu_blocks, 29_127);
    assert!(ok.num_gpu_blocks_overridden);
    for n in [29_128, 1 << 30, u32::MAX] {
        let e = spec(n).resolve().unwrap_err();
        assert_eq!(e.field, "num_gpu_blocks_override", "{n}");
        assert!(
            e.message.ends_with("expected at most 29127 blocks"),
            "{n}: {e}"
        );
    }
}

#[test]
fn a_huge_gpu_builds_its_pool_lazily() {
    // 16 TiB custom GPU, 4-layer model with 8 KV heads of 64: 4 × 8 × 64 × 2 (K, V) × 2 B × 16
    // tokens = 131 072 B per block, so the pool is ≈ 0.9 × 16 TiB / 131 072 B ≈ 121 M blocks; an
    // eager pool of 24-byte entries would take 2.9 GB and seconds to build. The engine must come
    // up at once and serve requests.
    let dir = std::env::temp_dir().join(format!("headroom-sim-hugegpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Dir(dir.clone());
    let gpu = write(&dir, "g.yaml", &gpu_yaml(Some(("memory_mib", "16777216"))));
    let model = write(&dir, "m.yaml", &model_yaml(None));
    let spec = SimSpec {
        gpu: "testgpu".into(),
        model: "tiny".into(),
        custom_gpu_file: Some(gpu),
        custom_model_file: Some(model),
        ..SimSpec::default()
    };
    let cfg = spec.resolve().unwrap();
    assert!(
        (120_000_000..121_000_000).contains(&cfg.num_gpu_blocks),
        "{}",
        cfg.num_gpu_blocks
    );
    let t = std::time::Instant::now();
    assert_sane("16 TiB GPU", cfg);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn custom_preset_errors_give_file_line_and_column() {
    let dir = std::env::temp_dir().join(format!("headroom-sim-located-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Dir(dir.clone());
    let spec = |model: &Path| SimSpec {
        model: "tiny".into(),
        custom_model_file: Some(model.to_path_buf()),
        ..SimSpec::default()
    };
    // model_yaml: line 1 `tiny:`, 2 hf_name, 3 tie_word_embeddings, then MODEL in order:
    // num_layers on line 4, head_dim on 8, params_total on 11; values start at column 3 + len + 2.
    let cases = [
        (
            "head_dim",
            "4000000000",
            8,
            13,
            "invalid `model tiny: head_dim`: expected a whole number from 1 to 65536, got 4000000000",
        ),
        (
            "params_total",
            ".inf",
            11,
            17,
            "invalid `model tiny: params_total`: expected a parameter count above 0 and at most 1e15, got inf",
        ),
        (
            "params_total",
            ".nan",
            11,
            17,
            "invalid `model tiny: params_total`: expected a parameter count above 0 and at most 1e15, got NaN",
        ),
        (
            "num_layers",
            "0",
            4,
            15,
            "invalid `model tiny: num_layers`: expected a whole number from 1 to 10000, got 0",
        ),
    ];
    for (field, value, line, col, msg) in cases {
        let p = write(&dir, "m.yaml", &model_yaml(Some((field, value))));
        let e = spec(&p).resolve().unwrap_err();
        assert_eq!(e.field, format!("model tiny: {field}"));
        let shown = e.to_string();
        let head = format!("{}:{line}:{col}: {msg}", p.display());
        assert!(shown.starts_with(&head), "{shown}\nwanted {head}");
        assert!(
            shown.contains(&format!("{line} |   {field}: {value}")),
            "{shown}"
        );
    }
    // A value the parser refuses (a negative u32) is placed by the parser.
    let p = write(&dir, "m.yaml", &model_yaml(Some(("num_layers", "-1"))));
    let e = spec(&p).resolve().unwrap_err();
    assert_eq!(e.field, "custom_model_file");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{}:4:15: invalid u32", p.display())),
        "{shown}"
    );
    // GPU presets too: idle_w above tdp_w (line of idle_w: 5 header lines... see gpu_yaml).
    let g = write(&dir, "g.yaml", &gpu_yaml(Some(("idle_w", "500"))));
    let e = SimSpec {
        gpu: "testgpu".into(),
        custom_gpu_file: Some(g.clone()),
        ..SimSpec::default()
    }
    .resolve()
    .unwrap_err();
    // gpu_yaml: 4 header lines, then GPU in order; idle_w is the 6th entry → line 10, column 11.
    assert!(
        e.to_string().starts_with(&format!(
            "{}:10:11: invalid `gpu testgpu: idle_w`: expected 0 ≤ idle_w < tdp_w (450), got 500",
            g.display()
        )),
        "{e}"
    );
}
