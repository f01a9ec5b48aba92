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
//! 1627 generated tokens/s, KV usage 2.8 %, 240 W, DRAM active 80.4 %, tensor active 16.6 %
//! (c = 32).
//!
//! Where capacity decisions are made (CALIBRATION.md, "Fidelity where capacity is decided"): the
//! KV pool against a published vLLM start-up figure on a 24 GB card, FP8 against BF16 against
//! published H100 speedups, and power in compute-bound steps against the prompt phase's draw.

use headroom_sim::{Engine, Load, NewRequest, SimSpec, VirtualOptions, VirtualRun, run_virtual};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

fn walkthrough_engine(seed: u64) -> Engine {
    walkthrough_engine_with(seed, false)
}

fn walkthrough_engine_with(seed: u64, frontend_cpu_queue: bool) -> Engine {
    let spec = SimSpec {
        gpu: "a10g".into(),
        model: "qwen2.5-3b".into(),
        max_model_len: Some(4096),
        seed,
        frontend_cpu_queue,
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
    run_c8_with(seed, false)
}

fn run_c8_with(seed: u64, frontend_cpu_queue: bool) -> C8 {
    let mut e = walkthrough_engine_with(seed, frontend_cpu_queue);
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
    dram_active: f64,
    tensor_active: f64,
}

fn run_c32(seed: u64) -> (C32, VirtualRun) {
    run_c32_with(seed, false)
}

fn run_c32_with(seed: u64, frontend_cpu_queue: bool) -> (C32, VirtualRun) {
    let mut e = walkthrough_engine_with(seed, frontend_cpu_queue);
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
    // dcgm-exporter's reading at the end of the steady window (1 s averages).
    let r = e.telemetry().read(run.end_s.min(300.0));
    let c = C32 {
        dram_active: r.dram_active_ratio,
        tensor_active: r.tensor_active_ratio,
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
    // Seed guide step 6: "dram_active_pct 80.4, tensor_active_pct 16.6" at c = 32.
    within("DCGM DRAM active", c.dram_active, 0.804, 0.15);
    within("DCGM tensor active", c.tensor_active, 0.166, 0.15);
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
    // simulator.md §5.2: 0.9 × the card − 5.75 GiB weights − 0.7–1.5 GiB non-KV ⇒ 23.6k–25.1k
    // blocks (the published run does not print its pool; the range is the reference's).
    let blocks = f64::from(e.config().num_gpu_blocks);
    println!("KV pool (blocks)             model {blocks:>10.0}  reference 23,600–25,100");
    assert!(
        (23_600.0..=25_100.0).contains(&blocks),
        "KV pool {blocks} blocks outside simulator.md §5.2's 23.6k–25.1k"
    );
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

fn resolve(gpu: &str, model: &str, dtype: &str) -> headroom_sim::EngineConfig {
    SimSpec {
        gpu: gpu.into(),
        model: model.into(),
        dtype: dtype.into(),
        max_model_len: Some(4096),
        ..SimSpec::default()
    }
    .resolve()
    .expect("spec resolves")
}

/// vLLM's start-up profiler on a 24 GB card: RTX 4090, Llama-3.1-8B bf16, utilisation 0.9,
/// API-server defaults (2048 batched tokens, 256 sequences) resolved 2588 GPU blocks
/// (LLMServingSim's vLLM run, simulator.md §3.4). Before the non-KV reserve counted the CUDA
/// graph pool and CUDA's own device total, the twin gave 2858 (+10.4 %).
#[test]
fn kv_pool_on_a_24gb_card_matches_vllms_profiler() {
    let cfg = resolve("rtx-4090", "llama-3.1-8b", "bf16");
    within(
        "RTX 4090 Llama-8B GPU blocks",
        f64::from(cfg.num_gpu_blocks),
        2588.0,
        0.03,
    );
    println!("  {}", cfg.kv_log_lines()[0]);
}

/// FP8 W8A8 is not 2× BF16 where it matters, in compute-bound prefill: published H100 figures
/// put it at 1.4–1.8× (NVIDIA's quoted 1.6–1.8×, about 1.4× as the floor of a tuned
/// migration, fastpriors.com "FP8 inference on H100"; 1.6× generation throughput on
/// Llama-3-8B, 7,437 → 11,921 tok/s). One 2048-token chunk of Llama-3.1-8B on an H100 SXM.
#[test]
fn fp8_prefill_is_faster_than_bf16_but_below_twice() {
    let step = |dtype: &str| {
        let cfg = resolve("h100-sxm", "llama-3.1-8b", dtype);
        let m = headroom_sim::engine::timing::StepModel::new(&cfg);
        let mut w = headroom_sim::engine::timing::StepWork::default();
        w.add(0, 2048, true);
        m.cost(&w, 1.0).duration_s
    };
    let speedup = step("bf16") / step("fp8");
    println!("FP8 / BF16 prefill speedup     model {speedup:>10.3}  published 1.4–1.8");
    assert!(
        (1.4..=1.8).contains(&speedup),
        "FP8 prefill speedup {speedup:.2}× outside the published 1.4–1.8×"
    );
}

/// Power rises with compute intensity. Splitwise (Patel et al., ISCA 2024, §III) measures the
/// prompt phase of LLM inference drawing close to the board limit on A100/H100 while the token
/// phase draws well below it; the walkthrough's memory-bound decode draws 240 W of the A10G's
/// 300 W. Long prompts (2000 tokens, 8 tokens out) in a closed loop make most steps 2048-token
/// prefill chunks.
#[test]
fn compute_bound_prefill_draws_more_power_than_decode() {
    let mut e = walkthrough_engine(5);
    let reqs = requests(200, 5, (2000, 2000), 0, (8, 8));
    let load = Load::Closed {
        concurrency: 8,
        requests: reqs,
        ramp_s: 0.0,
        think_s: 0.0,
    };
    let opts = VirtualOptions {
        until_s: Some(60.0),
        sample_every_s: Some(1.0),
        ..VirtualOptions::default()
    };
    let run = run_virtual(&mut e, load, &opts);
    let s: Vec<_> = run.samples.iter().filter(|s| s.t_s >= 20.0).collect();
    let power = s.iter().map(|x| x.power_w).sum::<f64>() / s.len() as f64;
    println!("prefill-bound power (W)      model {power:>10.1}  decode (published) 240, TDP 300");
    assert!(
        power > 240.0 * 1.1,
        "prefill-bound power {power:.0} W not above the decode point (240 W)"
    );
    assert!(
        power >= 0.9 * 300.0,
        "prefill-bound power {power:.0} W not near the 300 W board limit"
    );
}

/// The frontend as one CPU queue (`frontend_cpu_queue`, off by default) keeps the walkthrough's
/// figures within the same ±15 %: at c = 8 the frontend is idle most of the time, and at c = 32
/// the 2 ms between a request's end and the client's next one costs little of a 1–2 s request.
#[test]
fn frontend_queue_keeps_the_walkthrough_and_serialises_bursts() {
    let c = run_c8_with(1, true);
    within("queue on: TTFT mean (ms)", c.ttft_ms, 51.0, 0.15);
    within("queue on: ITL mean (ms)", c.itl_ms, 16.2, 0.15);
    let (c32, _) = run_c32_with(2, true);
    within("queue on: generated tok/s", c32.tok_s, 1627.0, 0.15);
    let ttft_at = |queue: bool| {
        let mut e = walkthrough_engine_with(7, queue);
        // Open loop, bursts of 20 requests every 200 ms (8-token answers): the engine keeps up, the one
        // frontend process serves each burst one request after another.
        let arrivals = requests(1200, 7, (40, 60), 0, (8, 8))
            .into_iter()
            .enumerate()
            .map(|(i, r)| ((i / 20) as f64 * 0.2, r))
            .collect();
        let load = Load::Open { arrivals };
        let run = run_virtual(&mut e, load, &VirtualOptions::default());
        assert!(!run.stalled);
        let h = &e.stats().ttft;
        h.sum() / h.count() as f64 * 1e3
    };
    let (fixed, queued) = (ttft_at(false), ttft_at(true));
    println!(
        "TTFT, bursts of 20, 8-token answers: fixed delay {fixed:.1} ms, CPU queue {queued:.1} ms"
    );
    // A burst reaches the engine core spread by the frontend's per-request CPU time, so the
    // engine prefills it over several steps instead of one 1000-token step: here TTFT falls.
    // The load that makes the queue raise TTFT is not yet pinned by a measurement.
    assert!((queued - fixed).abs() > 1.0, "{queued} vs {fixed}");
}
