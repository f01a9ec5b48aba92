//! How wrong a plan may be: what the twin's validation (`crates/sim/CALIBRATION.md`) says of
//! the configuration planned, as sentences a capacity review can quote.
//!
//! A plan's capacity band ([`headroom_core::run::CapacityBand`]) is sampling noise only; the
//! model's own error is what these caveats state. They are derived from the configuration (and,
//! for identical requests, the workload), never from the plan's results, so the same GPU, dtype
//! and parallelism always carry the same ones.

use headroom_core::run::LoadMode;
use headroom_load::prompt::{ClassPlan, PromptSource};
use headroom_load::workload::LengthDist;
use headroom_sim::EngineConfig;
use headroom_sim::engine::{Interconnect, WeightDtype};

/// The twin's validated error on a signal, for a measured preset (CALIBRATION.md, "Fidelity").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignalError {
    /// Signal (`itl`, `ttft`, `throughput`).
    pub signal: &'static str,
    /// Lowest relative error seen (twin − published) / published.
    pub low: f64,
    /// Highest relative error seen.
    pub high: f64,
    /// Where it was measured.
    pub source: &'static str,
}

/// Validated errors of the twin on a measured preset, from CALIBRATION.md and the published
/// sweeps of `tests/published_under_load.rs` (which fails when one of them leaves its band):
/// decode is memory-bound and close; TTFT under load is optimistic, the more so the higher the
/// concurrency on a small model (the real frontend and client are busy streaming); throughput is
/// high.
pub const SIGNAL_ERRORS: [SignalError; 3] = [
    SignalError {
        signal: "itl",
        low: -0.08,
        high: 0.03,
        source: "A10G walkthrough ITL +1.0 %; L4 + Qwen2.5-0.5B c = 1–32 −6.5 … +0.4 %; A100 PCIe + Qwen2.5-7B TPOT TP1 −1.6 %, TP2 −8.0 %",
    },
    SignalError {
        signal: "ttft",
        low: -0.72,
        high: -0.02,
        source: "A10G c = 8 −2.2 %; A100 PCIe + Qwen2.5-7B c = 8 −3.5 % (TP1), −2.0 % (TP2); L4 + Qwen2.5-0.5B −37 % at c = 4, −46 % at 8, −71 % at 32",
    },
    SignalError {
        signal: "throughput",
        low: 0.014,
        high: 0.22,
        source: "A10G tok/s at c = 32 +4.9 %; A100 PCIe req/s +4.6 % (TP1), +11.7 % (TP2); L4 + Qwen2.5-0.5B +1.4 … +21.9 % (c = 2 … 32)",
    },
];

/// Validated errors of a calibrated twin on levels its fit never saw: fitted to the L4 +
/// Qwen2.5-0.5B sweep's c = 1, 2 and 4, read against its c = 8, 16 and 32
/// (`tests/published_under_load.rs`, which fails when one leaves its band). A fit's own residuals
/// are in-sample; a plan beyond the calibrated loads extrapolates, so its worst case
/// ([`crate::worst::ErrorEdge::of`]) takes the wider of the two.
pub const CALIBRATED_HELD_OUT: [SignalError; 3] = [
    SignalError {
        signal: "itl",
        low: -0.06,
        high: 0.01,
        source: "L4 + Qwen2.5-0.5B fitted on c = 1-4: c = 8-32 held out −5.2 … +0.1 %",
    },
    SignalError {
        signal: "ttft",
        low: -0.15,
        high: 0.02,
        source: "L4 + Qwen2.5-0.5B fitted on c = 1-4: c = 8-32 held out −14.1 … +0.9 %",
    },
    SignalError {
        signal: "throughput",
        low: 0.0,
        high: 0.10,
        source: "L4 + Qwen2.5-0.5B fitted on c = 1-4: c = 8-32 held out +2.3 … +8.9 %",
    },
];

/// Validated errors of a calibrated twin on configurations its fit never saw: the real vLLM of
/// `scripts/vllm/` (0.32 on a 2-vCPU CPU) fitted to one sweep and read against a longer prompt
/// class and `--max-num-seqs 2`, the widest over the six recorded runs of
/// `scripts/plan-calibration-check` (`crates/sim/CALIBRATION.md`), rounded outward. Three runs
/// sent identical fixed-length requests, whose closed-loop users lock into groups (TTFT −39 …
/// +55 %); of the three with ranged lengths, two read within ±15 %, the size of that reference's
/// own drift, and one read up to +51 % (twin slow) where the restarted server decoded 23 % faster
/// than the calibrated one. The band keeps the widest, so it covers a plan of identical requests
/// and a server that moves as much. A plan that changes what was measured (another
/// `--max-num-seqs`, another card, contexts past the calibrated ones) takes it into its worst case.
pub const CALIBRATED_WHAT_IF: [SignalError; 3] = [
    SignalError {
        signal: "itl",
        low: -0.20,
        high: 0.52,
        source: "real vLLM on CPU, longer prompts and --max-num-seqs 2 held out, 6 runs: −19 … +51 % (ranged lengths: ±15 % in 2 runs, +51 % where the restarted server drifted 23 %)",
    },
    SignalError {
        signal: "ttft",
        low: -0.40,
        high: 0.55,
        source: "real vLLM on CPU, longer prompts and --max-num-seqs 2 held out, 6 runs: −39 … +55 % (identical fixed-length requests; ranged lengths: ±15 % in 2 runs, +45 % where the restarted server drifted 23 %)",
    },
    SignalError {
        signal: "throughput",
        low: -0.32,
        high: 0.31,
        source: "real vLLM on CPU, longer prompts and --max-num-seqs 2 held out, 6 runs: −31 … +31 % (ranged lengths: ±15 % in 2 runs, −31 % where the restarted server drifted 23 %)",
    },
];

/// What a calibration (`plan --calibrate-from`) measured of the fitted twin's error: it replaces
/// [`SIGNAL_ERRORS`] in a plan's caveats.
#[derive(Debug, Clone, PartialEq)]
pub struct FitBounds {
    /// The run directory fitted to.
    pub source: String,
    /// Whether the planned GPU is the calibrated one (else its constants were carried over).
    pub same_card: bool,
    /// Per signal (`itl`, `ttft`, `throughput`): the lowest and highest relative error of the
    /// fitted twin over the run's levels.
    pub errors: Vec<(&'static str, f64, f64)>,
    /// The constants no measured figure constrained, each with why.
    pub unconstrained: Vec<String>,
    /// Whether the fitted constants describe another card than the one planned: `!same_card`,
    /// or a run whose own dcgm-exporter named another GPU than its `--gpu`. Nothing validates
    /// them there, so the worst case never narrows below the presets' errors.
    pub other_card: bool,
    /// What the plan changes from the measured server (`--max-num-seqs 2 (measured 8)`, …);
    /// empty when it plans the measured configuration at other loads.
    pub what_if: Vec<String>,
}

/// The caveat of a closed-loop plan whose every request of some class is identical (fixed prompt
/// and output lengths, `ignore_eos`), or `None`. Users of identical requests that prefill in one
/// step finish in one step and return together, so they lock into groups on a real server and on
/// the twin alike; TTFT at moderate concurrency then depends on whether a window forms the groups.
/// Measured: the real-vLLM check's fixed-length runs (`crates/sim/CALIBRATION.md`).
pub fn identical_requests_caveat(plans: &[ClassPlan], mode: LoadMode) -> Option<String> {
    if mode != LoadMode::Concurrency {
        return None;
    }
    let names: Vec<&str> = plans
        .iter()
        .filter(|p| {
            p.ignore_eos
                && matches!(p.prompt, PromptSource::Synthetic(LengthDist::Fixed(_)))
                && matches!(p.max_tokens, LengthDist::Fixed(_))
        })
        .map(|p| p.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "{} identical requests (fixed prompt and output lengths, ignore_eos) in a closed loop: users whose prompts share a step finish together and return together, so on a real server and on the twin they lock into groups that prefill at once, and TTFT at moderate concurrency depends on whether a window forms them (a calibrated twin read −39 … +55 % on such runs, against ±15 % with lengths drawn from ranges where the reference held still; CALIBRATION.md). Production traffic has ranges: give prompt_tokens and max_tokens a distribution to plan for it",
        match names.as_slice() {
            [one] => format!("class {one} sends"),
            many => format!("classes {} send", many.join(", ")),
        }
    ))
}

/// Caveats of planning `cfg`: estimated constants, a precision or parallelism checked only in
/// ratio or not at all, contexts beyond what was validated, and the twin's known bias on each
/// signal a capacity rests on.
pub fn caveats(cfg: &EngineConfig) -> Vec<String> {
    caveats_with(cfg, None, None)
}

/// [`caveats`], with a calibration: on the calibrated GPU its constants are measured, not
/// estimated; the fit's own residuals per signal replace the generic [`SIGNAL_ERRORS`]; each
/// constant the run did not constrain is named. `longest_context` (tokens,
/// [`crate::calibrate::longest_context`] of the planned workload; `None`: unknown) keeps the
/// long-context caveat to workloads that can reach 32k tokens, not every 32k `max_model_len`.
pub fn caveats_with(
    cfg: &EngineConfig,
    fit: Option<&FitBounds>,
    longest_context: Option<u64>,
) -> Vec<String> {
    let mut out = Vec::new();
    let prov = &cfg.gpu.provenance;
    if let Some(f) = fit.filter(|f| !f.same_card) {
        out.push(format!(
            "the {} was not measured: the constants fitted to {} are carried over (MBU, MFU and k_kv as ratios to the presets, host overheads as they are); the error below is the calibrated card's",
            cfg.gpu.display_name, f.source
        ));
    }
    if prov.is_estimated() && fit.is_none_or(|f| !f.same_card) {
        out.push(format!(
            "the twin's timing constants for the {} are estimated ({}), not fit to a measurement: the figures are a datasheet projection; their error is unknown",
            cfg.gpu.display_name,
            if prov.source().is_empty() {
                "no basis given"
            } else {
                prov.source()
            }
        ));
    }
    match cfg.dtype {
        WeightDtype::Bf16 => {}
        d => out.push(format!(
            "{}: checked only as a ratio against published FP8/BF16 speedups on an H100 (1.47× against 1.4–1.8×); absolute compute-bound times on this GPU are not validated",
            d.as_str()
        )),
    }
    if cfg.tensor_parallel > 1 {
        let checked = match (cfg.gpu.interconnect, cfg.tensor_parallel) {
            (Interconnect::Pcie, 2) => {
                "checked on one published pair only (A100 80GB PCIe, Qwen2.5-7B, 512/256 at 8 concurrent: TP2 against TP1 +7 % in requests/s, TPOT −7 %)"
            }
            _ => {
                "no published TP1-against-TP measurement on this interconnect and width validates it"
            }
        };
        out.push(format!(
            "tensor parallel {}: the all-reduce cost by interconnect is an estimate; {checked}",
            cfg.tensor_parallel
        ));
    }
    if cfg.frontend_cpu_queue {
        out.push(
            "--frontend-cpu-queue: the frontend as one CPU queue (2 ms per request unless the preset sets frontend_cpu_ms, 50 µs per output chunk) is validated only in part: it reproduces a real CPU-hosted vLLM's grouping of closed-loop prefills, not the published TTFT growth under load on GPU hosts (CALIBRATION.md, limit 10)"
                .to_string(),
        );
    }
    if cfg.max_model_len >= 32_768 && longest_context.is_none_or(|l| l >= 32_768) {
        out.push(format!(
            "max_model_len {}: contexts of 32k tokens and more are not validated (attention and KV traffic dominate there)",
            cfg.max_model_len
        ));
    }
    if let Some(f) = fit {
        for (signal, low, high) in &f.errors {
            out.push(format!(
                "{}: the calibrated twin read {:+.1}% to {:+.1}% against the measured levels of {}",
                match *signal {
                    "itl" => "ITL",
                    "ttft" => "TTFT",
                    _ => "throughput",
                },
                low * 100.0,
                high * 100.0,
                f.source
            ));
        }
        let (held, when) = if f.what_if.is_empty() {
            (
                &CALIBRATED_HELD_OUT,
                "beyond the calibrated loads".to_string(),
            )
        } else {
            (
                &CALIBRATED_WHAT_IF,
                format!("in this what-if ({})", f.what_if.join(", ")),
            )
        };
        for e in held {
            out.push(format!(
                "{} {when}: a calibrated twin read {:+.0}% to {:+.0}% where its fit never saw ({})",
                match e.signal {
                    "itl" => "ITL",
                    "ttft" => "TTFT",
                    _ => "throughput",
                },
                e.low * 100.0,
                e.high * 100.0,
                e.source
            ));
        }
        for u in &f.unconstrained {
            out.push(format!("not constrained by the calibration run: {u}"));
        }
        return out;
    }
    for e in SIGNAL_ERRORS {
        let what = match e.signal {
            "itl" => "ITL (memory-bound decode)",
            "ttft" => "TTFT under load",
            _ => "throughput",
        };
        out.push(format!(
            "{what}: the twin reads {:+.0}% to {:+.0}% against real servers ({}){}",
            e.low * 100.0,
            e.high * 100.0,
            e.source,
            match e.signal {
                "ttft" => "; a capacity bound by TTFT or queue time is optimistic (the presets leave out the frontend host's contention; --calibrate-from a sweep of your server at several loads measures it: fitted on the L4 sweep's c = 1-4, c = 8-32 fall within 10 %)",
                "throughput" => "; tokens/s and tokens/J are optimistic",
                _ => "",
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_sim::SimSpec;

    fn cfg(gpu: &str, dtype: &str, tp: u32) -> EngineConfig {
        SimSpec {
            gpu: gpu.into(),
            model: "qwen2.5-7b".into(),
            dtype: dtype.into(),
            tensor_parallel: tp,
            max_model_len: Some(4096),
            ..SimSpec::default()
        }
        .resolve()
        .unwrap()
    }

    #[test]
    fn an_estimated_gpu_fp8_and_tensor_parallel_each_say_what_no_measurement_checked() {
        let c = caveats(&cfg("l40s", "fp8", 2));
        assert!(c[0].contains("estimated"), "{c:?}");
        assert!(
            c.iter()
                .any(|l| l.starts_with("fp8: checked only as a ratio"))
        );
        assert!(c.iter().any(|l| l.starts_with("tensor parallel 2")));
        let mut q = cfg("a10g", "bf16", 1);
        q.frontend_cpu_queue = true;
        assert!(
            caveats(&q)
                .iter()
                .any(|l| l.starts_with("--frontend-cpu-queue"))
        );
    }

    #[test]
    fn only_a_closed_loop_of_identical_requests_carries_the_lock_step_caveat() {
        let plans = |prompt: &str, out: &str, ignore_eos: bool| {
            let w = format!(
                "load: {{mode: concurrency}}\nclasses:\n  - name: c\n    endpoint: completions\n    prompt_tokens: {prompt}\n    \
                 max_tokens: {out}\n    ignore_eos: {ignore_eos}\n"
            );
            let w = headroom_load::workload::Workload::parse(
                &w,
                std::path::Path::new("w.yaml"),
                std::path::Path::new("."),
            )
            .unwrap();
            ClassPlan::from_workload(&w, None).unwrap()
        };
        let fixed = plans("{fixed: 128}", "{fixed: 64}", true);
        let c = identical_requests_caveat(&fixed, LoadMode::Concurrency).unwrap();
        assert!(c.starts_with("class c sends identical requests"), "{c}");
        // Open loop: arrivals do not follow completions, so nothing locks.
        assert_eq!(identical_requests_caveat(&fixed, LoadMode::Rate), None);
        for (prompt, out, eos) in [
            ("{uniform: {min: 96, max: 160}}", "{fixed: 64}", true),
            ("{fixed: 128}", "{uniform: {min: 48, max: 80}}", true),
            // Without ignore_eos the outputs end where the model stops.
            ("{fixed: 128}", "{fixed: 64}", false),
        ] {
            let p = plans(prompt, out, eos);
            assert_eq!(
                identical_requests_caveat(&p, LoadMode::Concurrency),
                None,
                "{prompt} {out} {eos}"
            );
        }
    }

    #[test]
    fn the_long_context_caveat_follows_the_workloads_contexts_not_the_limit() {
        let mut c = cfg("a10g", "bf16", 1);
        c.max_model_len = 32_768;
        let long = |l| {
            caveats_with(&c, None, l)
                .iter()
                .any(|s| s.starts_with("max_model_len 32768"))
        };
        assert!(long(None), "unknown lengths (a dataset) keep it");
        assert!(long(Some(40_000)));
        assert!(!long(Some(400)));
    }

    #[test]
    fn a_measured_gpu_in_bf16_carries_only_the_signal_biases() {
        let c = caveats(&cfg("a10g", "bf16", 1));
        assert_eq!(c.len(), SIGNAL_ERRORS.len(), "{c:?}");
        assert!(
            c.iter()
                .any(|l| l.contains("TTFT under load") && l.contains("optimistic"))
        );
    }
}
