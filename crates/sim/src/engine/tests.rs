//! Unit tests of the scheduler, KV accounting and request metrics. Expected values are derived by
//! hand from vLLM's rules (simulator.md §2) and the step-time equation (§3.2).

use super::*;

fn cfg_with(f: impl FnOnce(&mut SimSpec)) -> EngineConfig {
    let mut s = SimSpec::default();
    f(&mut s);
    let mut c = s.resolve().expect("valid spec");
    c.step_jitter_sigma = 0.0;
    c.frontend_jitter_sigma = 0.0;
    c
}

fn req(prompt_len: usize, max_tokens: u32) -> NewRequest {
    NewRequest {
        prompt_tokens: (0..prompt_len as u32).map(|i| 1000 + i).collect(),
        max_tokens,
        ignore_eos: true,
        eos_after: None,
        min_tokens: 0,
    }
}

/// Runs until idle; returns (time, all token events, preempted ids).
fn drain(e: &mut Engine, mut t: f64) -> (f64, Vec<(f64, TokenEvent)>, Vec<RequestId>) {
    let mut toks = Vec::new();
    let mut pre = Vec::new();
    let mut n = 0;
    while e.has_work() {
        let r = e.step(t);
        t += r.duration_s;
        toks.extend(r.tokens.iter().map(|k| (t, *k)));
        pre.extend(r.preempted);
        n += 1;
        assert!(n < 100_000, "engine did not drain");
    }
    (t, toks, pre)
}

#[test]
fn single_request_step_times_follow_the_roofline() {
    let cfg = cfg_with(|_| {});
    let mut e = Engine::new(cfg).unwrap();
    let id = e.add_request(req(50, 4), 0.0);
    // A10G + Qwen2.5-3B constants (presets), independent of the code under test.
    let (l, h, dh): (f64, f64, f64) = (36.0, 16.0, 128.0);
    let n_ne: f64 = 2_774_773_760.0;
    let vd = 151_936.0 * 2048.0;
    let p: f64 = 70e12 * 0.50;
    let bw = 600e9 * 0.665;
    let kv_tok = 2.0 * 36.0 * 2.0 * 128.0 * 2.0;
    let w = n_ne * 2.0 + vd * 2.0;
    let fixed = 0.3e-3 + 36.0 * 8e-6 + 25e-6;
    // Step 1: prefill of 50 tokens, one sampled row.
    let f_gemm = 2.0 * n_ne * 50.0 + 2.0 * vd;
    let f_attn = 4.0 * l * h * dh * 50.0 * (0.0 + 51.0 / 2.0);
    let d1 = fixed + (f_gemm / p).max(w / bw) + (f_attn / p).max(1.4 * kv_tok * 50.0 / bw);
    // Decode with context c: one token.
    let dec = |c: f64| {
        let f_gemm = 2.0 * n_ne + 2.0 * vd;
        let f_attn = 4.0 * l * h * dh * (c + 1.0);
        fixed + (f_gemm / p).max(w / bw) + (f_attn / p).max(1.4 * kv_tok * (c + 1.0) / bw)
    };
    // The frontend delay (12 ms on the A10G preset) comes first: an idle step waits for it.
    let r0 = e.step(0.0);
    assert!(r0.tokens.is_empty());
    assert!((r0.duration_s - 0.012).abs() < 1e-12);
    let (end, toks, _) = drain(&mut e, 0.012);
    assert_eq!(toks.len(), 4);
    let expect = [
        0.012 + d1,
        0.012 + d1 + dec(50.0),
        0.012 + d1 + dec(50.0) + dec(51.0),
        0.012 + d1 + dec(50.0) + dec(51.0) + dec(52.0),
    ];
    for (i, (t, k)) in toks.iter().enumerate() {
        assert_eq!(k.id, id);
        assert_eq!(k.token_index, i as u32);
        assert!(
            (t - expect[i]).abs() < 1e-9,
            "token {i}: {t} vs {}",
            expect[i]
        );
    }
    assert_eq!(toks[3].1.finished, Some(FinishReason::Length));
    assert!((end - expect[3]).abs() < 1e-9);
    let st = e.stats();
    assert_eq!(st.prompt_tokens, 50);
    assert_eq!(st.generation_tokens, 4);
    assert_eq!(st.success_length, 1);
    assert_eq!(st.itl.count(), 3);
    assert!(
        (st.ttft.sum() - expect[0]).abs() < 1e-9,
        "TTFT includes the frontend delay"
    );
    // queue = scheduled − queued = 0; prefill = first token − scheduled = d1.
    assert!((st.queue.sum() - 0.0).abs() < 1e-12);
    assert!((st.prefill.sum() - d1).abs() < 1e-9);
    assert!((st.decode.sum() - (expect[3] - expect[0])).abs() < 1e-9);
    assert!((st.tpot.sum() - (expect[3] - expect[0]) / 3.0).abs() < 1e-9);
    // iteration_tokens: first step 50 prompt + 1 generated, then 1 per step.
    assert_eq!(st.iteration_tokens.count(), 4);
    assert_eq!(st.iteration_tokens.sum(), 54.0);
    assert_eq!(e.kv_cache_usage(), 0.0);
}

#[test]
fn eos_stops_early_and_min_tokens_delays_it() {
    let cfg = cfg_with(|s| s.time_scale = 0.0);
    let mut e = Engine::new(cfg).unwrap();
    let mut a = req(10, 100);
    a.ignore_eos = false;
    a.eos_after = Some(7);
    let mut b = a.clone();
    b.min_tokens = 9;
    let mut c = a.clone();
    c.ignore_eos = true;
    let ia = e.add_request(a, 0.0);
    let ib = e.add_request(b, 0.0);
    let ic = e.add_request(c, 0.0);
    let (_, toks, _) = drain(&mut e, 0.0);
    let count = |id| toks.iter().filter(|(_, k)| k.id == id).count();
    assert_eq!(count(ia), 7);
    assert_eq!(count(ib), 9);
    assert_eq!(count(ic), 100);
    assert_eq!(e.stats().success_stop, 2);
    assert_eq!(e.stats().success_length, 1);
}

#[test]
fn max_num_seqs_caps_the_running_batch() {
    let cfg = cfg_with(|s| {
        s.time_scale = 0.0;
        s.max_num_seqs = Some(2);
    });
    let mut e = Engine::new(cfg).unwrap();
    for _ in 0..5 {
        e.add_request(req(20, 10), 0.0);
    }
    e.step(0.0);
    assert_eq!(e.num_running(), 2);
    assert_eq!(e.num_waiting(), 3);
    let mut t = 0.0;
    while e.has_work() {
        assert!(e.num_running() <= 2);
        t += e.step(t).duration_s;
    }
    assert_eq!(e.stats().success_length, 5);
}

#[test]
fn chunked_prefill_splits_long_prompts_by_the_token_budget() {
    let cfg = cfg_with(|s| s.time_scale = 0.0);
    let mut e = Engine::new(cfg).unwrap();
    e.add_request(req(5000, 2), 0.0);
    // Budget 2048: chunks 2048 + 2048 + 904; the first token comes with the third chunk.
    let mut steps = 0;
    let mut first = None;
    let mut t = 0.0;
    while e.has_work() {
        let r = e.step(t);
        t += r.duration_s;
        steps += 1;
        if first.is_none() && !r.tokens.is_empty() {
            first = Some(steps);
        }
    }
    assert_eq!(first, Some(3));
    assert_eq!(e.stats().prompt_tokens, 5000);
    // Iterations with output: the 3rd (5000 prompt + 1) and the decode (1).
    assert_eq!(e.stats().iteration_tokens.sum(), 5002.0);
}

#[test]
fn prefix_cache_hits_full_blocks_and_leaves_one_token_to_compute() {
    let cfg = cfg_with(|s| s.time_scale = 0.0);
    let mut e = Engine::new(cfg).unwrap();
    e.add_request(req(48, 2), 0.0);
    drain(&mut e, 0.0);
    e.add_request(req(48, 2), 1.0);
    drain(&mut e, 1.0);
    let st = e.stats();
    // 48 tokens = 3 full blocks, but at most (48 − 1)/16 = 2 blocks may hit.
    assert_eq!(st.prefix_cache_queries, 96);
    assert_eq!(st.prefix_cache_hits, 32);
    assert_eq!(st.prompt_tokens_cached, 32);
    assert_eq!(st.prefill_kv_computed_tokens.sum(), 48.0 + 16.0);
}

#[test]
fn prefix_caching_off_never_hits() {
    let cfg = cfg_with(|s| {
        s.time_scale = 0.0;
        s.enable_prefix_caching = false;
    });
    let mut e = Engine::new(cfg).unwrap();
    for k in 0..3 {
        e.add_request(req(64, 2), k as f64);
        drain(&mut e, k as f64);
    }
    assert_eq!(e.stats().prefix_cache_hits, 0);
    assert_eq!(e.stats().prefix_cache_queries, 192);
}

#[test]
fn kv_exhaustion_preempts_the_most_recently_admitted_request() {
    // 11 blocks = 10 usable = 160 tokens. Two requests of 64 prompt + 60 output need 8 blocks each.
    let cfg = cfg_with(|s| {
        s.time_scale = 0.0;
        s.num_gpu_blocks_override = Some(11);
        s.max_model_len = Some(128);
        s.enable_prefix_caching = false;
    });
    let mut e = Engine::new(cfg).unwrap();
    let a = e.add_request(req(64, 60), 0.0);
    let b = e.add_request(req(64, 60), 0.0);
    let (_, toks, pre) = drain(&mut e, 0.0);
    assert!(!pre.is_empty());
    assert_eq!(pre[0], b, "the later admission is the victim");
    assert!(!pre.contains(&a));
    let n = |id| toks.iter().filter(|(_, k)| k.id == id).count();
    assert_eq!(n(a), 60);
    assert_eq!(n(b), 60);
    // Token indices of b stay contiguous across the preemption (no token lost or repeated).
    let idx: Vec<u32> = toks
        .iter()
        .filter(|(_, k)| k.id == b)
        .map(|(_, k)| k.token_index)
        .collect();
    assert_eq!(idx, (0..60).collect::<Vec<_>>());
    assert_eq!(e.stats().num_preemptions, pre.len() as u64);
    assert_eq!(e.stats().request_num_preemptions.sum(), pre.len() as f64);
    // Resumed requests are not counted again in prefix-cache queries.
    assert_eq!(e.stats().prefix_cache_queries, 128);
    assert_eq!(e.kv_cache_usage(), 0.0);
}

#[test]
fn abort_frees_blocks_and_counts_abort() {
    let cfg = cfg_with(|s| s.time_scale = 0.0);
    let mut e = Engine::new(cfg).unwrap();
    let a = e.add_request(req(100, 1000), 0.0);
    e.step(0.0);
    e.step(0.0);
    assert!(e.kv_cache_usage() > 0.0);
    e.abort(a, 0.5);
    e.abort(a, 0.6); // second abort is ignored
    assert!(!e.has_work() || e.step(0.5).tokens.is_empty());
    assert_eq!(e.kv_cache_usage(), 0.0);
    assert_eq!(e.stats().success_abort, 1);
    assert_eq!(e.num_running(), 0);
}

#[test]
fn client_cancel_frees_blocks_and_counts_no_finished_request() {
    // vLLM 0.32 (measured live by scripts/conformance/vllm.sh `cancel`): a request whose client
    // disconnected keeps its TTFT observation and the tokens it generated, but appears in no
    // request_success_total reason and no finished-request histogram.
    let cfg = cfg_with(|s| s.time_scale = 0.0);
    let mut e = Engine::new(cfg).unwrap();
    let a = e.add_request(req(100, 1000), 0.0);
    let b = e.add_request(req(100, 1000), 0.0);
    let mut generated = 0;
    for _ in 0..6 {
        generated += e.step(0.0).tokens.len() as u64;
    }
    assert!(generated > 2, "both requests produced tokens: {generated}");
    let before = e.stats().clone();
    e.cancel(a, 0.5);
    e.cancel(a, 0.6); // a second cancel is ignored
    let st = e.stats();
    assert_eq!(st.success_stop + st.success_length + st.success_abort, 0);
    assert_eq!(st.e2e.count(), 0);
    assert_eq!(st.request_generation_tokens.count(), 0);
    assert_eq!(st.ttft.count(), before.ttft.count());
    assert_eq!(st.ttft.count(), 2);
    assert_eq!(st.generation_tokens, before.generation_tokens);
    assert_eq!(e.num_running(), 1);
    // The survivor runs alone; the cancelled request never produces another token.
    let gen_before = e.stats().generation_tokens;
    let r = e.step(0.0);
    assert_eq!(r.tokens.len(), 1);
    assert_eq!(e.stats().generation_tokens, gen_before + 1);
    e.cancel(b, 0.7);
    assert_eq!(e.kv_cache_usage(), 0.0);
    assert!(!e.has_work() || e.step(0.7).tokens.is_empty());
    assert_eq!(e.stats().generation_tokens, gen_before + 1);
}

#[test]
fn usage_counts_blocks_of_running_requests() {
    let cfg = cfg_with(|s| {
        s.time_scale = 0.0;
        s.num_gpu_blocks_override = Some(101);
        s.max_model_len = Some(1024);
    });
    let mut e = Engine::new(cfg).unwrap();
    e.add_request(req(40, 100), 0.0); // 40 prompt tokens + 1 decode slot → 3 blocks
    e.step(0.0);
    // After step 1 (prefill 40 + pipelined decode of token 41): ceil(41/16) = 3 blocks of 100.
    assert!(
        (e.kv_cache_usage() - 0.03).abs() < 1e-12,
        "{}",
        e.kv_cache_usage()
    );
}

#[test]
fn same_seed_same_result_different_seed_different_timing() {
    let run = |seed: u64| {
        let mut c = SimSpec {
            seed,
            ..SimSpec::default()
        }
        .resolve()
        .unwrap();
        c.step_jitter_sigma = 0.05;
        let mut e = Engine::new(c).unwrap();
        for i in 0..20 {
            e.add_request(req(30 + i, 40), i as f64 * 0.01);
        }
        let (t, toks, _) = drain(&mut e, 0.0);
        (t, toks.len())
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1).0, run(2).0);
}

/// Steps `e` from `t` until `until` (s) or idle; returns each step's start and end.
fn run_until(e: &mut Engine, mut t: f64, until: f64) -> Vec<(f64, f64)> {
    let mut steps = Vec::new();
    while e.has_work() && t < until {
        let d = e.step(t).duration_s;
        steps.push((t, t + d));
        t += d;
    }
    steps
}

/// First-token times of `id` among the token events of `e` stepped from `t` until idle.
fn first_token_of(e: &mut Engine, mut t: f64, id: RequestId) -> f64 {
    let mut first = None;
    while e.has_work() {
        let r = e.step(t);
        t += r.duration_s;
        if first.is_none() && r.tokens.iter().any(|k| k.id == id) {
            first = Some(t);
        }
    }
    first.expect("the request produced a token")
}

#[test]
fn queue_time_starts_when_a_step_takes_the_request_in() {
    // vLLM records QUEUED when its busy loop moves the input queue into the scheduler, just
    // before it schedules, so a request with room waits 0 s "in the queue" (the real vLLM of the
    // CPU check reports 0.01 ms), however long it waited for the step in flight to end.
    for async_scheduling in [true, false] {
        let mut cfg = cfg_with(|_| {});
        cfg.async_scheduling = async_scheduling;
        let mut e = Engine::new(cfg).unwrap();
        e.add_request(req(50, 40), 0.0);
        let steps = run_until(&mut e, 0.0, 0.1);
        let (start, end) = *steps.last().unwrap();
        // Arrives at the engine core (after the 12 ms frontend) in the middle of a decode step.
        let mid = start + (end - start) / 2.0;
        e.add_request(req(30, 2), mid - 0.012);
        drain(&mut e, end);
        assert_eq!(e.stats().queue.count(), 2);
        assert!(
            e.stats().queue.sum().abs() < 1e-12,
            "async {async_scheduling}: queue {} s",
            e.stats().queue.sum()
        );
    }
    // Without room (one sequence at a time) the wait for a slot is queue time, from the step
    // that took the request in to the step that scheduled it.
    let mut cfg = cfg_with(|s| s.max_num_seqs = Some(1));
    cfg.async_scheduling = false;
    let mut e = Engine::new(cfg).unwrap();
    e.add_request(req(50, 10), 0.0);
    let steps = run_until(&mut e, 0.0, 0.05);
    let (start, end) = *steps.last().unwrap();
    e.add_request(req(30, 2), (start + end) / 2.0 - 0.012);
    let mut t = end;
    let mut taken_in = None;
    let mut scheduled = None;
    while e.has_work() {
        let before = e.num_waiting();
        let r = e.step(t);
        if taken_in.is_none() {
            taken_in = Some(t);
        }
        if scheduled.is_none() && e.num_running() == 1 && before == 1 && e.num_waiting() == 0 {
            scheduled = Some(t);
        }
        t += r.duration_s;
    }
    let expected = scheduled.unwrap() - taken_in.unwrap();
    assert!(expected > 0.0);
    assert!(
        (e.stats().queue.sum() - expected).abs() < 1e-9,
        "queue {} s, expected {expected} s",
        e.stats().queue.sum()
    );
}

#[test]
fn without_async_scheduling_a_new_prompt_is_prefilled_one_step_sooner() {
    // Async scheduling (vLLM on CUDA) schedules the batch after the one in flight, so a prompt
    // taken in at a step boundary is computed one step later than without it (vLLM's CPU
    // backend): its first token comes one decode step later.
    let first = |async_scheduling: bool| {
        let mut cfg = cfg_with(|_| {});
        cfg.async_scheduling = async_scheduling;
        let mut e = Engine::new(cfg).unwrap();
        e.add_request(req(50, 100), 0.0);
        let steps = run_until(&mut e, 0.0, 0.1);
        let (start, end) = *steps.last().unwrap();
        let id = e.add_request(req(30, 2), (start + end) / 2.0 - 0.012);
        (first_token_of(&mut e, end, id) - end, end - start)
    };
    let (sync_ttft, step) = first(false);
    let (async_ttft, _) = first(true);
    // A decode step at batch 1–2 lasts about as long as the one before it (within 5 %).
    let extra = async_ttft - sync_ttft;
    assert!(
        (extra - step).abs() < 0.05 * step,
        "async adds {extra} s, one decode step is {step} s"
    );
}

#[test]
fn the_frontend_delay_varies_per_request_around_its_median() {
    let draws = |seed: u64| {
        let mut cfg = cfg_with(|s| s.seed = seed);
        cfg.frontend_jitter_sigma = spec::FRONTEND_JITTER_SIGMA;
        let mut e = Engine::new(cfg).unwrap();
        for _ in 0..2001 {
            e.add_request(req(10, 1), 0.0);
        }
        let mut q: Vec<f64> = e.pending.iter().map(|&s| e.req(s).queued_s).collect();
        q.sort_by(f64::total_cmp);
        q
    };
    let q = draws(1);
    // Median 12 ms (the A10G preset's frontend_in_ms), log-spread σ = 0.15.
    let median = q[1000];
    assert!((median / 0.012 - 1.0).abs() < 0.02, "median {median} s");
    let logs: Vec<f64> = q.iter().map(|v| (v / 0.012).ln()).collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
    assert!(
        (sd / spec::FRONTEND_JITTER_SIGMA - 1.0).abs() < 0.1,
        "σ {sd}"
    );
    // Requests sent together reach the engine core apart, and the same seed draws the same.
    assert!(q.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(q, draws(1));
    assert_ne!(q, draws(2));
}

#[test]
fn the_frontend_load_term_adds_its_ms_per_thousand_tokens_per_second_streamed() {
    // 20 ms per 1,000 tokens/s: a request arriving while the engine streams R tokens/s reaches
    // the core 20 ms × R / 1000 later than the frontend's own 12 ms.
    let mut cfg = cfg_with(|_| {});
    cfg.gpu.frontend_load_ms = 20.0;
    let mut e = Engine::new(cfg).unwrap();
    // Idle: no streaming, no extra delay.
    let id = e.add_request(req(10, 1), 0.0);
    let idle = e.req(e.by_id[&id.0]).queued_s;
    assert!((idle - 0.012).abs() < 1e-9, "idle frontend {idle} s");
    let (mut t, _, _) = drain(&mut e, 0.0);
    // 32 long decodes; the rate is counted over the engine's own steps.
    for _ in 0..32 {
        e.add_request(req(10, 100_000), t);
    }
    let mut tokens = 0usize;
    let started = t + 1.0;
    while t < started + 5.0 {
        let r = e.step(t);
        t += r.duration_s.max(1e-4);
        if t > started {
            tokens += r.tokens.len();
        }
    }
    let rate = tokens as f64 / (t - started);
    let id = e.add_request(req(10, 1), t);
    let extra = e.req(e.by_id[&id.0]).queued_s - t - 0.012;
    let want = 0.020 * rate / 1000.0;
    assert!(
        (extra / want - 1.0).abs() < 0.05,
        "extra {extra} s at {rate:.0} tokens/s, want {want} s"
    );
}

/// `k_kv` scales what decode pays per KV byte read, and nothing else: on the default A10G +
/// Qwen2.5-3B, 8 decodes over 2,048 tokens of context each, raising `k_kv` from 1.4 to 14 adds
/// (14 − 1.4) × (KV read + write bytes) / (bandwidth × MBU). KV bytes per token from the model's
/// config: 2 (K and V) × 36 layers × 2 KV heads × 128 dims × 2 bytes = 36,864.
#[test]
fn k_kv_scales_the_kv_bytes_of_decode_attention() {
    let step = |k_kv: f64| {
        let mut c = cfg_with(|_| {});
        c.gpu.k_kv = k_kv;
        let m = timing::StepModel::new(&c);
        let mut w = StepWork::default();
        for _ in 0..8 {
            w.add(2048, 1, true);
        }
        (m.cost(&w, 1.0).duration_s, c)
    };
    let (base, c) = step(1.4);
    let (slow, _) = step(14.0);
    assert_eq!(c.kv_bytes_per_token, 36_864.0);
    let bytes = 36_864.0 * (8.0 * 2048.0 + 8.0);
    let want = (14.0 - 1.4) * bytes / (c.gpu.mem_bw_gbps * 1e9 * c.gpu.mbu);
    assert!(
        ((slow - base) / want - 1.0).abs() < 1e-9,
        "added {:.6} ms, want {:.6} ms",
        (slow - base) * 1e3,
        want * 1e3
    );
    // A preset that does not name it keeps the GPU default.
    assert_eq!(cfg_with(|_| {}).gpu.k_kv, timing::K_KV);
}
