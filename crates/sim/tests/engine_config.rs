//! Configuration: presets, vLLM defaults, KV pool sizing against simulator.md §4.3, YAML specs,
//! custom presets, and errors that name the field.

use headroom_sim::{ConfigError, SimSpec};

fn spec(gpu: &str, model: &str) -> SimSpec {
    SimSpec {
        gpu: gpu.into(),
        model: model.into(),
        max_model_len: Some(4096),
        ..SimSpec::default()
    }
}

#[test]
fn kv_pool_matches_the_reference_table() {
    // simulator.md §4.3: thousands of KV tokens at util 0.9 (bf16, TP 1). The table was computed
    // with a fixed ≈ 1 GiB non-KV reserve and nvidia-smi's total; the twin now keeps out what
    // vLLM's profiler does (CUDA graphs, CUDA's smaller device total; checked against a published
    // 2588-block start-up on a 24 GB card in engine_fidelity), which takes up to 8 % off the
    // small pools (Qwen2.5-7B on a 24 GB card: 86k against 93k).
    let table = [
        ("a10g", "qwen2.5-3b", 393.0),
        ("a10g", "qwen2.5-0.5b", 1606.0),
        ("a10g", "qwen2.5-7b", 93.0),
        ("l4", "qwen2.5-1.5b", 614.0),
        ("l40s", "llama-3.1-8b", 201.0),
        ("a100-80gb", "llama-3.1-8b", 459.0),
        ("h100-sxm", "llama-3.1-8b", 456.0),
        ("h200", "mistral-7b", 918.0),
        ("mi300x", "llama-3.1-70b", 132.0),
    ];
    for (gpu, model, k_tokens) in table {
        // The table's reserve assumed the 8192-token batch of a ≥ 70 GiB part; vLLM 0.32 gives
        // ≥ 160 GiB parts 16384, whose larger activation peak is not in the table.
        let c = SimSpec {
            max_num_batched_tokens: (gpu == "mi300x").then_some(8192),
            ..spec(gpu, model)
        }
        .resolve()
        .unwrap_or_else(|e| panic!("{gpu}/{model}: {e}"));
        let got = c.kv_cache_tokens() as f64 / 1000.0;
        let err = (got - k_tokens) / k_tokens;
        assert!(
            err.abs() < 0.08,
            "{gpu}/{model}: {got:.0}k tokens vs {k_tokens}k ({:+.1} %)",
            err * 100.0
        );
    }
}

#[test]
fn vllm_batch_defaults_depend_on_the_gpu() {
    let a10g = spec("a10g", "qwen2.5-3b").resolve().unwrap();
    assert_eq!(
        (a10g.max_num_batched_tokens, a10g.max_num_seqs),
        (2048, 256)
    );
    let a100 = spec("a100-80gb", "llama-3.1-8b").resolve().unwrap();
    assert_eq!(
        (a100.max_num_batched_tokens, a100.max_num_seqs),
        (2048, 256)
    );
    let h100 = spec("h100-sxm", "llama-3.1-8b").resolve().unwrap();
    assert_eq!(
        (h100.max_num_batched_tokens, h100.max_num_seqs),
        (8192, 1024)
    );
    // vLLM 0.32 (`EngineArgs.get_batch_defaults`): 160 GiB and more → 16384 / 1024.
    for gpu in ["b200", "mi300x"] {
        let c = spec(gpu, "llama-3.1-8b").resolve().unwrap();
        assert_eq!(
            (c.max_num_batched_tokens, c.max_num_seqs),
            (16384, 1024),
            "{gpu}"
        );
    }
    // The A100 exception reads the device's name, as vLLM does: a custom preset copied from the
    // A100 PCIe entry under another name keeps the A100's defaults.
    let text = include_str!("../presets/gpus.yaml");
    let block = text
        .split("\na100-80gb-pcie:\n")
        .nth(1)
        .and_then(|rest| rest.split("\nh100-sxm:\n").next())
        .expect("the a100-80gb-pcie entry");
    let dir = std::env::temp_dir().join(format!("hr-a100-name-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("gpus.yaml");
    std::fs::write(&f, format!("mygpu:\n{block}")).unwrap();
    let mine = SimSpec {
        gpu: "mygpu".into(),
        custom_gpu_file: Some(f),
        ..spec("", "qwen2.5-7b")
    }
    .resolve()
    .unwrap();
    assert_eq!(
        (mine.max_num_batched_tokens, mine.max_num_seqs),
        (2048, 256)
    );
    // Default max_model_len = max_position_embeddings; served name = HF id.
    let d = SimSpec::default().resolve().unwrap();
    assert_eq!(d.max_model_len, 32768);
    assert_eq!(d.served_model_name, "Qwen/Qwen2.5-3B-Instruct");
    assert_eq!(d.block_size, 16);
    assert_eq!(
        d.kv_log_lines()[0],
        format!("GPU KV cache size: {} tokens", d.kv_cache_tokens())
    );
}

#[test]
fn fp8_and_tensor_parallel_grow_the_pool() {
    let bf16 = spec("l4", "llama-3.1-8b")
        .resolve()
        .unwrap()
        .kv_cache_tokens() as f64;
    let fp8 = SimSpec {
        dtype: "fp8".into(),
        ..spec("l4", "llama-3.1-8b")
    }
    .resolve()
    .unwrap()
    .kv_cache_tokens() as f64;
    // simulator.md §3.5: 35k → 96k tokens with every weight in fp8. This twin keeps the embedding
    // and LM head in bf16 as vLLM's fp8 checkpoints do (1 GB more) and the profiler's non-KV
    // reserve (CUDA graphs, CUDA's device total: 0.6 GiB more), so ≈ 83k: within 15 %.
    assert!((fp8 / 1000.0 - 96.0).abs() < 14.4, "fp8 pool {fp8}");
    assert!(fp8 > 2.5 * bf16);
    let tp2 = SimSpec {
        tensor_parallel: 2,
        ..spec("a10g", "qwen2.5-7b")
    }
    .resolve()
    .unwrap();
    // simulator.md §4.4: Qwen2.5-7B on A10G TP1 → TP2: 93k → 452k.
    assert!(
        (tp2.kv_cache_tokens() as f64 / 1000.0 - 452.0).abs() < 25.0,
        "{}",
        tp2.kv_cache_tokens()
    );
}

fn err(s: SimSpec) -> ConfigError {
    s.resolve().expect_err("spec must be rejected")
}

#[test]
fn bad_specs_name_the_field_and_what_was_expected() {
    let e = err(SimSpec {
        gpu: "a10".into(),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "gpu");
    assert!(
        e.message.contains("unknown gpu 'a10'") && e.message.contains("a10g"),
        "{e}"
    );
    let e = err(SimSpec {
        model: "gpt-5".into(),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "model");
    assert!(e.message.contains("qwen2.5-3b"));
    let e = err(SimSpec {
        dtype: "fp16x".into(),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "dtype");
    assert!(e.message.contains("bf16, fp8, int4"));
    assert_eq!(
        err(SimSpec {
            tensor_parallel: 3,
            ..SimSpec::default()
        })
        .field,
        "tensor_parallel"
    );
    assert_eq!(
        err(SimSpec {
            gpu_memory_utilization: 1.5,
            ..SimSpec::default()
        })
        .field,
        "gpu_memory_utilization"
    );
    assert_eq!(
        err(SimSpec {
            time_scale: -1.0,
            ..SimSpec::default()
        })
        .field,
        "time_scale"
    );
    assert_eq!(
        err(SimSpec {
            power_cap_w: Some(10.0),
            ..SimSpec::default()
        })
        .field,
        "power_cap_w"
    );
    assert_eq!(
        err(SimSpec {
            max_num_seqs: Some(512),
            max_num_batched_tokens: Some(256),
            ..SimSpec::default()
        })
        .field,
        "max_num_batched_tokens"
    );
    // Llama-3.1-70B in bf16 does not fit an A10G.
    let e = err(spec("a10g", "llama-3.1-70b"));
    assert_eq!(e.field, "model");
    assert!(e.message.contains("does not fit"), "{e}");
    // vLLM refuses a max_model_len the KV pool cannot hold (Llama-3.1-8B on A10G: 131072 > 35k).
    let e = err(SimSpec {
        gpu: "a10g".into(),
        model: "llama-3.1-8b".into(),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "max_model_len");
    let e = err(SimSpec {
        num_gpu_blocks_override: Some(4),
        ..spec("a10g", "qwen2.5-3b")
    });
    assert_eq!(e.field, "num_gpu_blocks_override");
    let e = err(SimSpec {
        custom_gpu_file: Some("/nonexistent/gpus.yaml".into()),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "custom_gpu_file");
    assert!(e.message.contains("/nonexistent/gpus.yaml"));
}

#[test]
fn spec_from_yaml_accepts_snake_and_kebab_case_and_rejects_unknown_fields() {
    let s: SimSpec = serde_saphyr::from_str(
        "gpu: l4\nmodel: qwen2.5-0.5b\nmax-model-len: 2048\nmax_num_seqs: 64\ntime-scale: 0.5\n",
    )
    .unwrap();
    assert_eq!(s.gpu, "l4");
    assert_eq!(s.max_model_len, Some(2048));
    assert_eq!(s.max_num_seqs, Some(64));
    assert_eq!(s.time_scale, 0.5);
    assert_eq!(s.dtype, "bf16", "unspecified fields take the defaults");
    let bad = serde_saphyr::from_str::<SimSpec>("gpu: l4\nmax_modl_len: 10\n");
    let msg = bad.expect_err("unknown field").to_string();
    assert!(msg.contains("max_modl_len"), "{msg}");
}

#[test]
fn custom_presets_from_yaml_files() {
    let dir = std::env::temp_dir().join(format!("headroom-sim-presets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gpu = dir.join("gpus.yaml");
    std::fs::write(
        &gpu,
        "rtx-4090:\n  display_name: \"NVIDIA GeForce RTX 4090\"\n  memory_mib: 24564\n  mem_bw_gbps: 1008\n  bf16_tflops: 165\n  fp8_tflops: 330\n  tdp_w: 450\n  idle_w: 30\n  mbu: 0.81\n  mfu: 0.45\n  boost_clock_mhz: 2520\n  idle_clock_mhz: 210\n  mem_clock_mhz: 10501\n  interconnect: pcie\n  link_gbps: 25\n  allreduce_latency_us: 25\n  t_step_ms: 0.3\n  t_layer_us: 8\n  t_seq_us: 5\n  frontend_in_ms: 10\n  cuda_context_mib: 600\n  fb_reserved_mib: 300\n  ambient_c: 30\n  thermal_resistance_c_per_w: 0.11\n  thermal_tau_s: 30\n  slowdown_c: 88\n  has_memory_temp: false\n",
    )
    .unwrap();
    let c = SimSpec {
        gpu: "rtx-4090".into(),
        custom_gpu_file: Some(gpu.clone()),
        ..spec("x", "qwen2.5-7b")
    }
    .resolve()
    .unwrap();
    assert_eq!(c.gpu.display_name, "NVIDIA GeForce RTX 4090");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "rtx-4090:\n  display_name: x\n  memory_mib: 1\n  bogus: 2\n",
    )
    .unwrap();
    let e = err(SimSpec {
        gpu: "rtx-4090".into(),
        custom_gpu_file: Some(bad.clone()),
        ..SimSpec::default()
    });
    assert_eq!(e.field, "custom_gpu_file");
    assert!(e.message.contains("bad.yaml"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Every built-in GPU preset states where its timing constants come from, in a form code reads
/// (a capacity plan warns on estimated ones); the new parts carry datasheet values, dense peaks.
#[test]
fn gpu_presets_carry_provenance_and_datasheet_values() {
    let gpus = headroom_sim::engine::spec::builtin_gpus();
    let text = include_str!("../presets/gpus.yaml");
    let stated = text
        .lines()
        .filter(|l| l.trim_start().starts_with("provenance:"))
        .count();
    assert_eq!(
        stated,
        gpus.len(),
        "a preset relies on the default provenance"
    );
    for name in ["a10g", "rtx-4090", "l40s", "h200", "b200", "mi300x"] {
        assert!(gpus.contains_key(name), "no preset {name}");
    }
    for (name, g) in &gpus {
        assert!(
            !g.provenance().source().is_empty(),
            "{name}: provenance without a source or basis"
        );
    }
    assert!(!gpus["a10g"].provenance().is_estimated());
    for name in ["l40s", "h200", "b200", "mi300x", "h100-pcie"] {
        assert!(gpus[name].provenance().is_estimated(), "{name}");
    }
    // Ada whitepaper (RTX 4090): 1008 GB/s, BF16 165.2 / FP8 330.3 TFLOP/s dense, 450 W.
    let r = &gpus["rtx-4090"];
    assert_eq!(
        (r.mem_bw_gbps, r.bf16_tflops, r.fp8_tflops, r.tdp_w),
        (1008.0, 165.2, Some(330.3), 450.0)
    );
    // HGX B200 datasheet per GPU: 8 TB/s, BF16 2.25 / FP8 4.5 PFLOP/s dense, 1000 W.
    let b = &gpus["b200"];
    assert_eq!(
        (b.mem_bw_gbps, b.bf16_tflops, b.fp8_tflops, b.tdp_w),
        (8000.0, 2250.0, Some(4500.0), 1000.0)
    );
    // Sparse figures never: dense FP8 is twice dense BF16 on every part that has it.
    for (name, g) in &gpus {
        if let Some(f8) = g.fp8_tflops {
            let ratio = f8 / g.bf16_tflops;
            assert!((1.9..=2.1).contains(&ratio), "{name}: FP8/BF16 {ratio}");
        }
    }
}

/// A custom preset without `provenance` is estimated; one with it reads back as written.
#[test]
fn custom_preset_provenance_defaults_to_estimated() {
    let base = include_str!("../presets/gpus.yaml");
    let block: String = base
        .split("\nl4:\n")
        .next()
        .and_then(|head| head.split("\na10g:\n").nth(1))
        .expect("a10g block")
        .lines()
        .filter(|l| !l.trim_start().starts_with("provenance:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = std::env::temp_dir().join(format!("hr-prov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("gpus.yaml");
    std::fs::write(
        &p,
        format!(
            "mine:\n{block}\nmeasured:\n{block}  provenance: {{kind: measured, source: \"our bench, vLLM 0.32\"}}\n"
        ),
    )
    .unwrap();
    let resolve = |gpu: &str| {
        SimSpec {
            gpu: gpu.into(),
            custom_gpu_file: Some(p.clone()),
            ..spec("a10g", "qwen2.5-3b")
        }
        .resolve()
        .unwrap()
    };
    assert!(resolve("mine").gpu.provenance().is_estimated());
    let m = resolve("measured");
    assert!(!m.gpu.provenance().is_estimated());
    assert_eq!(m.gpu.provenance().source(), "our bench, vLLM 0.32");
    std::fs::remove_dir_all(&dir).ok();
}
