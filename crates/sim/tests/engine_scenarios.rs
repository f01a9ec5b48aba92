//! Bottlenecks and faults on demand: the signatures of simulator.md §6, asserted as directions and
//! bands (not exact values), on the virtual clock.

use headroom_sim::{Engine, Load, NewRequest, SimSpec, VirtualOptions, VirtualRun, run_virtual};

fn engine(f: impl FnOnce(&mut SimSpec)) -> Engine {
    let mut s = SimSpec {
        max_model_len: Some(4096),
        ..SimSpec::default()
    };
    f(&mut s);
    Engine::new(s.resolve().expect("spec")).expect("engine")
}

fn fixed(prompt: u32, out: u32, salt: u32) -> NewRequest {
    NewRequest {
        prompt_tokens: (0..prompt)
            .map(|k| 50_000 + (k * 31 + salt * 7919) % 60_000)
            .collect(),
        max_tokens: out,
        ignore_eos: true,
        eos_after: None,
        min_tokens: 0,
    }
}

fn closed(e: &mut Engine, c: u32, reqs: Vec<NewRequest>, until_s: f64) -> VirtualRun {
    let opts = VirtualOptions {
        until_s: Some(until_s),
        sample_every_s: Some(1.0),
        ..VirtualOptions::default()
    };
    let load = Load::Closed {
        concurrency: c,
        requests: reqs,
        ramp_s: 1.0,
        think_s: 0.0,
    };
    let run = run_virtual(e, load, &opts);
    assert!(!run.stalled);
    run
}

fn mean(h: &headroom_sim::engine::prom::Histogram) -> f64 {
    h.sum() / h.count().max(1) as f64
}

fn dcgm_value(text: &str, name: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .unwrap_or_else(|| panic!("{name} missing"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn queueing_when_max_num_seqs_is_small() {
    let mut e = engine(|s| s.max_num_seqs = Some(4));
    let reqs = (0..200).map(|i| fixed(50, 100, i)).collect();
    let run = closed(&mut e, 16, reqs, 60.0);
    let max_waiting = run.samples.iter().map(|s| s.waiting).max().unwrap();
    assert!(max_waiting >= 10, "waiting {max_waiting}");
    assert!(run.samples.iter().all(|s| s.running <= 4));
    let st = e.stats();
    // Queue time dominates TTFT; ITL stays at the small-batch decode step (~16 ms).
    assert!(mean(&st.queue) > 1.0, "queue {}", mean(&st.queue));
    assert!(mean(&st.ttft) > mean(&st.queue));
    assert!(
        (0.014..0.020).contains(&mean(&st.itl)),
        "ITL {}",
        mean(&st.itl)
    );
}

#[test]
fn prefill_contention_from_long_prompts() {
    // Qwen2.5-3B c = 16, a quarter of the prompts 8k tokens (simulator.md §6).
    let mut base = engine(|s| s.max_model_len = Some(16384));
    let run_b = closed(
        &mut base,
        16,
        (0..400).map(|i| fixed(100, 200, i)).collect(),
        120.0,
    );
    let mut e = engine(|s| s.max_model_len = Some(16384));
    let reqs = (0..400)
        .map(|i| {
            if i % 4 == 0 {
                fixed(8000, 200, i)
            } else {
                fixed(100, 200, i)
            }
        })
        .collect();
    let run = closed(&mut e, 16, reqs, 120.0);
    let (itl_base, itl) = (mean(&base.stats().itl), mean(&e.stats().itl));
    assert!(itl > 1.5 * itl_base, "ITL {itl} vs baseline {itl_base}");
    // Spikes of one step carrying a 2048-token chunk: ~ 340 ms on the A10G.
    let spike = run.records.iter().map(|r| r.max_itl_s).fold(0.0, f64::max);
    assert!((0.25..0.6).contains(&spike), "max ITL {spike}");
    // Iterations at the 2048 budget appear.
    let it = &e.stats().iteration_tokens;
    let cum = it.cumulative();
    let at_or_below_1024 = cum[8];
    assert!(
        it.count() > at_or_below_1024,
        "some iterations carry > 1024 tokens"
    );
    assert!(mean(&e.stats().ttft) > 5.0 * mean(&base.stats().ttft));
    let _ = run_b;
}

#[test]
fn kv_pressure_causes_preemption() {
    // Qwen2.5-7B on an A10G (≈ 93k-token pool), c = 48, 1500 prompt / 1500 output tokens.
    let mut e = engine(|s| s.model = "qwen2.5-7b".into());
    let reqs = (0..96).map(|i| fixed(1500, 1500, i)).collect();
    let run = closed(&mut e, 48, reqs, 240.0);
    let peak = run
        .samples
        .iter()
        .map(|s| s.kv_cache_usage)
        .fold(0.0, f64::max);
    assert!(peak > 0.9, "peak KV usage {peak}");
    let st = e.stats();
    assert!(
        st.num_preemptions > 10,
        "preemptions {}",
        st.num_preemptions
    );
    // Recompute prefills land inside decode steps: the mean ITL is well above the median step.
    assert!(mean(&st.itl) > 0.045, "ITL {}", mean(&st.itl));
    assert!(run.samples.iter().any(|s| s.waiting > 0));
}

#[test]
fn power_cap_throttles_clocks_and_holds_power_at_the_limit() {
    let load = || (0..64).map(|i| fixed(50, 2000, i)).collect::<Vec<_>>();
    let mut free = engine(|_| {});
    closed(&mut free, 32, load(), 60.0);
    let mut capped = engine(|s| s.power_cap_w = Some(150.0));
    let run = closed(&mut capped, 32, load(), 60.0);
    let tail: Vec<_> = run.samples.iter().filter(|s| s.t_s > 20.0).collect();
    let p = tail.iter().map(|s| s.power_w).sum::<f64>() / tail.len() as f64;
    assert!(
        (140.0..=152.0).contains(&p),
        "power {p} W under a 150 W cap"
    );
    assert!(tail.iter().all(|s| s.clock_factor < 1.0));
    let text = capped.render_dcgm(run.end_s);
    assert_eq!(
        dcgm_value(&text, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") as u64 & 0x4,
        0x4
    );
    assert_eq!(dcgm_value(&text, "DCGM_FI_DEV_POWER_MGMT_LIMIT"), 150.0);
    assert!(dcgm_value(&text, "DCGM_FI_DEV_SM_CLOCK") < 1710.0);
    // Decode is memory-bound: it slows, but less than the clock drops.
    let (itl_free, itl_cap) = (mean(&free.stats().itl), mean(&capped.stats().itl));
    let f = tail.last().unwrap().clock_factor;
    assert!(itl_cap > itl_free * 1.02, "ITL {itl_cap} vs {itl_free}");
    assert!(itl_cap < itl_free / f, "decode slows less than 1/f");
}

#[test]
fn thermal_fault_heats_past_slowdown_and_throttles() {
    let mut e = engine(|s| s.thermal_throttle = true);
    let reqs = (0..200).map(|i| fixed(50, 2000, i)).collect();
    let run = closed(&mut e, 32, reqs, 300.0);
    let last = run.samples.last().unwrap();
    assert!(last.temp_c > 88.0, "temperature {}", last.temp_c);
    assert!(last.clock_factor < 1.0);
    let text = e.render_dcgm(run.end_s);
    assert_eq!(
        dcgm_value(&text, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") as u64 & 0x20,
        0x20
    );
    assert!(dcgm_value(&text, "DCGM_FI_DEV_GPU_TEMP") > 88.0);
    // Without the fault the same load stays below the slowdown temperature.
    let mut ok = engine(|_| {});
    let run_ok = closed(
        &mut ok,
        32,
        (0..200).map(|i| fixed(50, 2000, i)).collect(),
        300.0,
    );
    assert!(run_ok.samples.last().unwrap().temp_c < 85.0);
    assert_eq!(run_ok.samples.last().unwrap().clock_factor, 1.0);
}

#[test]
fn xid_event_appears_in_dcgm_at_its_time() {
    let e = engine(|s| s.xid_at_s = Some(10.0));
    let before = e.render_dcgm(5.0);
    assert_eq!(dcgm_value(&before, "DCGM_FI_DEV_XID_ERRORS"), 0.0);
    assert!(before.contains("err_code=\"0\",err_msg=\"No Error\""));
    let after = e.render_dcgm(15.0);
    assert_eq!(dcgm_value(&after, "DCGM_FI_DEV_XID_ERRORS"), 13.0);
    assert!(after.contains("err_code=\"13\""));
}

#[test]
fn idle_gpu_reads_idle() {
    let e = engine(|_| {});
    let text = e.render_dcgm(100.0);
    assert_eq!(dcgm_value(&text, "DCGM_FI_DEV_GPU_UTIL"), 0.0);
    assert_eq!(dcgm_value(&text, "DCGM_FI_DEV_POWER_USAGE"), 60.0);
    assert_eq!(
        dcgm_value(&text, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") as u64 & 0x1,
        0x1
    );
    assert_eq!(dcgm_value(&text, "DCGM_FI_DEV_SM_CLOCK"), 210.0);
}

#[test]
fn tensor_parallel_emits_one_series_per_gpu() {
    let e = engine(|s| {
        s.gpu = "h100-sxm".into();
        s.model = "llama-3.1-70b".into();
        s.dtype = "fp8".into();
        s.tensor_parallel = 4;
    });
    let text = e.render_dcgm(0.0);
    let n = text
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
        .count();
    assert_eq!(n, 4);
    assert!(text.contains("gpu=\"3\""));
}
