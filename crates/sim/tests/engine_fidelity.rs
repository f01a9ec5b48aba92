//! Fidelity: the A10G + Qwen2.5-3B preset reproduces the published walkthrough figures
//! (simulator.md §5.1, seed guide "At 8 concurrent requests on the A10G" and step 6) within 15 %
//! on the virtual clock.
//!
//! Workloads (simulator.md §5.1, closed-loop clients, vLLM defaults for the A10G):
//! - c = 8: prompts U[40, 60] tokens whose first 16 tokens are a shared system prompt (the
//!   walkthrough's 32 % prefix-cache hit rate), outputs U[84, 124] tokens, every request ending on
//!   `max_tokens` (the walkthrough's 100 % `length`);
//! - c = 32: prompts of 50 tokens, outputs U[512, 1024].
//!
//! Published figures: TTFT 51 ms, ITL 16.2 ms, prefill 38 ms, decode 1665 ms (c = 8);
//! 1627 generated tokens/s, KV usage 2.8 %, 240 W (c = 32).

use headroom_sim::{Engine, Load, NewRequest, SimSpec, VirtualOptions, VirtualRun, run_virtual};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

fn walkthrough_engine(seed: u64) -> Engine {
    let spec = SimSpec {
        gpu: "a10g".into(),
        model: "qwen2.5-3b".into(),
        max_model_len: Some(4096),
        seed,
        ..SimSpec::default()
    };
    Engine::new(spec.resolve().expect("walkthrough spec resolves")).expect("engine builds")
}

fn requests(
    n: usize,
    seed: u64,
    prompt: (u32, u32),
    shared_prefix: u32,
    output: (u32, u32),
) -> Vec<NewRequest> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let len = rng.random_range(prompt.0..=prompt.1);
            let out = rng.random_range(output.0..=output.1);
            let prompt_tokens = (0..len)
                .map(|k| {
                    if k < shared_prefix {
                        7 + k
                    } else {
                        100_000 + (i as u32 * 131 + k) % 30_000
                    }
                })
                .collect();
            NewRequest {
                prompt_tokens,
                max_tokens: out,
                ignore_eos: true,
                eos_after: None,
                min_tokens: 0,
            }
        })
        .collect()
}

fn within(name: &str, got: f64, want: f64, tol: f64) {
    let err = (got - want) / want;
    println!(
        "{name:<28} model {got:>10.3}  published {want:>10.3}  error {:+.1} %",
        err * 100.0
    );
    assert!(
        err.abs() <= tol,
        "{name}: model {got} vs published {want} ({:+.1} %)",
        err * 100.0
    );
}

struct C8 {
    ttft_ms: f64,
    itl_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
    queue_ms: f64,
    prefix_hit: f64,
}

fn run_c8(seed: u64) -> C8 {
    let mut e = walkthrough_engine(seed);
    let reqs = requests(400, seed, (40, 60), 16, (84, 124));
    let load = Load::Closed {
        concurrency: 8,
        requests: reqs,
        ramp_s: 0.0,
        think_s: 0.0,
    };
    let run = run_virtual(&mut e, load, &VirtualOptions::default());
    assert!(!run.stalled);
    assert_eq!(run.records.len(), 400);
    let st = e.stats();
    let mean = |h: &headroom_sim::engine::prom::Histogram| h.sum() / h.count() as f64 * 1e3;
    C8 {
        ttft_ms: mean(&st.ttft),
        itl_ms: mean(&st.itl),
        prefill_ms: mean(&st.prefill),
        decode_ms: mean(&st.decode),
        queue_ms: mean(&st.queue),
        prefix_hit: st.prefix_cache_hits as f64 / st.prefix_cache_queries as f64,
    }
}

struct C32 {
    tok_s: f64,
    kv_usage: f64,
    power_w: f64,
    temp_c: f64,
}

fn run_c32(seed: u64) -> (C32, VirtualRun) {
    let mut e = walkthrough_engine(seed);
    let reqs = requests(700, seed, (50, 50), 0, (512, 1024));
    let load = Load::Closed {
        concurrency: 32,
        requests: reqs,
        ramp_s: 0.0,
        think_s: 0.0,
    };
    let opts = VirtualOptions {
        until_s: Some(300.0),
        sample_every_s: Some(1.0),
        ..VirtualOptions::default()
    };
    let run = run_virtual(&mut e, load, &opts);
    assert!(!run.stalled);
    // Steady state: from 60 s (after the first wave staggered) to 300 s.
    let s: Vec<_> = run.samples.iter().filter(|s| s.t_s >= 60.0).collect();
    let first = s.first().expect("samples");
    let last = s.last().expect("samples");
    let tok_s = (last.generation_tokens - first.generation_tokens) as f64 / (last.t_s - first.t_s);
    let n = s.len() as f64;
    let c = C32 {
        tok_s,
        kv_usage: s.iter().map(|x| x.kv_cache_usage).sum::<f64>() / n,
        power_w: s.iter().map(|x| x.power_w).sum::<f64>() / n,
        temp_c: s.iter().map(|x| x.temp_c).sum::<f64>() / n,
    };
    (c, run)
}

#[test]
fn a10g_qwen3b_c8_latencies_match_the_walkthrough() {
    let c = run_c8(1);
    println!(
        "queue {:.2} ms, prefix-cache hit rate {:.3}",
        c.queue_ms, c.prefix_hit
    );
    within("TTFT mean (ms)", c.ttft_ms, 51.0, 0.15);
    within("ITL mean (ms)", c.itl_ms, 16.2, 0.15);
    within("prefill mean (ms)", c.prefill_ms, 38.0, 0.15);
    within("decode mean (ms)", c.decode_ms, 1665.0, 0.15);
    within("prefix-cache hit rate", c.prefix_hit, 0.325, 0.15);
    // "Queue time is 0.01 ms": below the first queue bucket (0.3 s) by far.
    assert!(c.queue_ms < 10.0, "queue {} ms", c.queue_ms);
}

#[test]
fn a10g_qwen3b_c32_throughput_and_power_match_the_walkthrough() {
    let (c, _) = run_c32(2);
    println!(
        "time-averaged KV usage {:.4}, temperature {:.1} °C",
        c.kv_usage, c.temp_c
    );
    within("generated tok/s", c.tok_s, 1627.0, 0.15);
    within("power (W)", c.power_w, 240.0, 0.15);
    // Walkthrough: 73 °C at 240 W.
    within("GPU temperature (°C)", c.temp_c, 73.0, 0.15);
    // The time-averaged gauge of a steady closed loop is what simulator.md §5.2's DES predicts
    // (3.6 %); the walkthrough's single reading (2.8 %) is checked below. See CALIBRATION.md.
    within("KV usage, time average", c.kv_usage, 0.036, 0.15);
}

/// The walkthrough's 2.8 % is one reading of the gauge. simulator.md §5.2: on a 24.5k-block pool
/// it means ≈ 344 tokens held per running request (50 prompt + ≈ 294 generated), "consistent with
/// reading the gauge early in a 512–1024-token generation". Read the gauge at that moment of a
/// 32-request wave: this checks the pool size (vLLM's memory arithmetic) and the block accounting.
#[test]
fn a10g_qwen3b_c32_kv_reading_matches_the_walkthrough() {
    let mut e = walkthrough_engine(3);
    // 24,550 blocks: 0.9 × 23,028 MiB − 5.75 GiB weights − non-KV (simulator.md §3.4, §4.3).
    let blocks = e.config().num_gpu_blocks;
    within("KV pool (blocks)", f64::from(blocks), 24_500.0, 0.02);
    for r in requests(32, 3, (50, 50), 0, (512, 1024)) {
        e.add_request(r, 0.0);
    }
    let mut t = 0.0;
    while e.stats().generation_tokens < 32 * 294 {
        t += e.step(t).duration_s;
    }
    assert_eq!(e.num_running(), 32);
    within(
        "KV usage at 344 tokens/req",
        e.kv_cache_usage(),
        0.028,
        0.15,
    );
}
