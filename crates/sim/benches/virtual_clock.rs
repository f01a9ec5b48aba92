//! Benchmark: the virtual clock simulates one hour of open-loop traffic at 20 requests/s
//! (72,000 requests) on the default twin (A10G + Qwen2.5-3B), and a zero-latency burst of 2,000
//! concurrent streams. Target (issue 3): the hour in under 10 s of CPU in release.
//!
//! Run: `cargo bench -p headroom-sim --bench virtual_clock`. Prints the figures; exits non-zero
//! when the hour takes 10 s or more.

use std::time::Instant;

use headroom_sim::{Engine, Load, NewRequest, SimSpec, VirtualOptions, run_virtual};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

fn main() {
    // One hour at 20 req/s, Poisson arrivals, prompts U[64, 512], outputs U[16, 128].
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
    let mut arrivals = Vec::with_capacity(72_000);
    let mut t = 0.0f64;
    while t < 3600.0 {
        t += -(1.0 - rng.random::<f64>()).ln() / 20.0;
        let p = rng.random_range(64..=512u32);
        let o = rng.random_range(16..=128u32);
        arrivals.push((
            t,
            NewRequest {
                prompt_tokens: (0..p).map(|k| (k * 7919 + p) % 100_000).collect(),
                max_tokens: o,
                ignore_eos: true,
                eos_after: None,
                min_tokens: 0,
            },
        ));
    }
    let n = arrivals.len();
    let mut e = Engine::new(SimSpec::default().resolve().expect("default spec")).expect("engine");
    let start = Instant::now();
    let run = run_virtual(&mut e, Load::Open { arrivals }, &VirtualOptions::default());
    let wall = start.elapsed().as_secs_f64();
    let done = run.records.iter().filter(|r| r.finish.is_some()).count();
    let st = e.stats();
    println!(
        "virtual_clock/one_hour_20rps: {n} requests, {done} finished, {} steps, {} generated tokens",
        run.steps, st.generation_tokens
    );
    println!(
        "  simulated {:.1} s of engine time in {wall:.3} s of CPU ({:.0}× real time, {:.0} steps/s)",
        run.end_s,
        run.end_s / wall,
        run.steps as f64 / wall
    );
    println!(
        "  mean TTFT {:.1} ms, mean ITL {:.1} ms, preemptions {}",
        st.ttft.sum() / st.ttft.count() as f64 * 1e3,
        st.itl.sum() / st.itl.count() as f64 * 1e3,
        st.num_preemptions
    );

    // Zero-latency mode: 2,000 concurrent streams of 200 tokens on an H100.
    let spec = SimSpec {
        gpu: "h100-sxm".into(),
        model: "qwen2.5-0.5b".into(),
        time_scale: 0.0,
        max_num_seqs: Some(2048),
        max_num_batched_tokens: Some(16384),
        max_model_len: Some(4096),
        ..SimSpec::default()
    };
    let mut z = Engine::new(spec.resolve().expect("zero-latency spec")).expect("engine");
    for i in 0..2000u32 {
        z.add_request(
            NewRequest {
                prompt_tokens: (0..64).map(|k| k + i).collect(),
                max_tokens: 200,
                ignore_eos: true,
                eos_after: None,
                min_tokens: 0,
            },
            0.0,
        );
    }
    let start = Instant::now();
    let mut tokens = 0usize;
    let mut now = 0.0;
    while z.has_work() {
        let r = z.step(now);
        now += r.duration_s;
        tokens += r.tokens.len();
    }
    let wall_z = start.elapsed().as_secs_f64();
    println!(
        "zero_latency/2000_streams: {tokens} tokens in {wall_z:.3} s = {:.0} tokens/s on one core",
        tokens as f64 / wall_z
    );

    if wall >= 10.0 {
        eprintln!("FAIL: one simulated hour took {wall:.2} s (target < 10 s)");
        std::process::exit(1);
    }
}
