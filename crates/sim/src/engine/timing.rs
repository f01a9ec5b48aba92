//! Step-time model: a two-group roofline with efficiency factors and fixed overheads
//! (simulator.md §3.1–§3.2).
//!
//! ```text
//! T_step = t_step + L·t_layer + n_seq·t_seq + n_prefill·t_prefill
//!        + max(F_gemm/(TP·P·MFU), W/(TP·BW·MBU))          weight GEMMs
//!        + max(F_attn/(TP·P16·MFU), k_kv·B_kv/(TP·BW·MBU)) attention (always BF16)
//!        + T_tp                                            two all-reduces per layer
//! T_tp   = 2·L·( 2(TP−1)/TP·T·d·2 B / (η·link) + hops·α )
//! ```
//! `P` is the FP8 peak for W8A8 on GPUs with FP8 tensor cores, and its MFU is the BF16 one times
//! [`FP8_MFU_FACTOR`]. `η` and `hops` depend on the interconnect ([`allreduce_shape`]).
//! ```text
//! F_gemm = 2·N_ne·T + 2·V·d·S        W    = N_ne·b_w + V·d·2
//! F_attn = 4·L·H·d_h·Σ n_i·(c0_i + (n_i+1)/2)
//! B_kv   = kv_tok·(Σ c0_i + T)       (read the prior context, write the new tokens)
//! ```
//! `T` = scheduled tokens, `S` = rows that sample a token, `c0_i` = context already computed for
//! entry i, `n_i` = tokens scheduled for it. Clock throttling scales `P` by `f` and `BW` by
//! `0.8 + 0.2·f` (§3.6).

use super::spec::{EngineConfig, Interconnect, WeightDtype};

/// Default `k_kv` ([`super::spec::GpuPreset::k_kv`]): paged-attention KV reads are less
/// efficient than weight GEMVs (BLIS β₂ᵦ/β₃ ≈ 1.4).
pub const K_KV: f64 = 1.4;

/// FP8 W8A8 GEMMs reach this fraction of the BF16 MFU against the doubled FP8 peak, so an FP8
/// prefill is about 1.5× a BF16 one, not 2×: per-token activation quantisation, scale handling
/// and smaller tiles eat into the peak. Published H100 serving figures put FP8 over BF16 at
/// 1.4–1.8× on compute-bound work (CALIBRATION.md, "FP8").
pub const FP8_MFU_FACTOR: f64 = 0.75;

/// Bus efficiency `η` (achieved all-reduce bus bandwidth over the preset's link figure) and
/// latency hops per all-reduce, by interconnect.
///
/// NVLink/NVSwitch and xGMI: vLLM's custom all-reduce is one shot across the switch (one `α`
/// whatever the degree); nccl-tests bus bandwidth on H100 NVLink is about 0.8 of the link.
/// PCIe: a ring of `TP − 1` steps, each paying the latency (no switch; GeForce parts and many
/// cloud VMs have no peer-to-peer, so each step crosses host memory), at 0.6 of the link.
pub fn allreduce_shape(interconnect: Interconnect, tensor_parallel: u32) -> (f64, f64) {
    match interconnect {
        Interconnect::Nvlink => (0.8, 1.0),
        Interconnect::Xgmi => (0.7, 1.0),
        Interconnect::Pcie => (0.6, f64::from(tensor_parallel.saturating_sub(1).max(1))),
    }
}

/// Work of one step, accumulated while scheduling (all sums are over scheduled entries).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepWork {
    /// Scheduled tokens `T`.
    pub tokens: u64,
    /// Rows that need logits `S` (decodes + completing prefill chunks).
    pub sampled: u64,
    /// Scheduled sequences `n_seq`.
    pub seqs: u64,
    /// Scheduled sequences with more than one new token (prompt chunks) `n_prefill`.
    pub prefills: u64,
    /// `Σ n_i·(c0_i + (n_i+1)/2)`: attention query-key pairs per layer per head.
    pub attn_pairs: f64,
    /// `Σ c0_i`: prior context tokens read.
    pub ctx_read: u64,
}

impl StepWork {
    /// Adds one scheduled entry: `n` new tokens on top of `c0` computed ones; `samples` if it
    /// produces a token.
    #[inline]
    pub fn add(&mut self, c0: u32, n: u32, samples: bool) {
        self.tokens += u64::from(n);
        self.seqs += 1;
        // Without speculative decoding a decode row schedules exactly one token.
        if n > 1 {
            self.prefills += 1;
        }
        if samples {
            self.sampled += 1;
        }
        let nf = f64::from(n);
        self.attn_pairs += nf * (f64::from(c0) + (nf + 1.0) / 2.0);
        self.ctx_read += u64::from(c0);
    }

    /// Whether nothing was scheduled.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }
}

/// Cost of one step as the roofline sees it, per GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    /// Modelled duration (s), before `time_scale`.
    pub duration_s: f64,
    /// FLOPs per GPU.
    pub flops: f64,
    /// DRAM bytes read per GPU.
    pub read_bytes: f64,
    /// DRAM bytes written per GPU.
    pub write_bytes: f64,
}

/// Precomputed constants of the step-time equation for one [`EngineConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    fixed_s: f64,
    t_seq_s: f64,
    t_prefill_s: f64,
    n_ne: f64,
    vd: f64,
    weight_bytes: f64,
    attn_flops_per_pair: f64,
    kv_bytes_per_token: f64,
    tp: f64,
    peak_flops: f64,
    attn_peak_flops: f64,
    bw: f64,
    gemm_mfu: f64,
    mfu: f64,
    mbu: f64,
    k_kv: f64,
    tp_bytes_per_token: f64,
    tp_link: f64,
    tp_alpha_s: f64,
}

impl StepModel {
    /// Builds the model for a resolved configuration.
    pub fn new(cfg: &EngineConfig) -> StepModel {
        let g = &cfg.gpu;
        let m = &cfg.model;
        let l = f64::from(m.num_layers);
        let d = f64::from(m.hidden_size);
        let vd = f64::from(m.vocab_size) * d;
        let tp = f64::from(cfg.tensor_parallel);
        // P: the FP8 peak only for W8A8 on GPUs with FP8 tensor cores; int4 pays 1.2× dequant.
        let (peak, gemm_mfu, compute_penalty) = match (cfg.dtype, g.fp8_tflops) {
            (WeightDtype::Bf16, _) | (WeightDtype::Fp8, None) => (g.bf16_tflops, g.mfu, 1.0),
            (WeightDtype::Fp8, Some(f8)) => (f8, g.mfu * FP8_MFU_FACTOR, 1.0),
            (WeightDtype::Int4, _) => (g.bf16_tflops, g.mfu, 1.2),
        };
        let (eta, hops) = allreduce_shape(g.interconnect, cfg.tensor_parallel);
        StepModel {
            fixed_s: g.t_step_ms * 1e-3 + l * g.t_layer_us * 1e-6,
            t_seq_s: g.t_seq_us * 1e-6,
            t_prefill_s: g.t_prefill_ms * 1e-3,
            n_ne: m.params_non_embedding,
            vd,
            weight_bytes: m.params_non_embedding * cfg.dtype.bytes_per_weight() + vd * 2.0,
            attn_flops_per_pair: 4.0 * l * f64::from(m.num_heads) * f64::from(m.head_dim),
            // Per GPU KV bytes × TP = whole-model KV bytes; divided by TP again below.
            kv_bytes_per_token: cfg.kv_bytes_per_token * tp,
            tp,
            peak_flops: peak * 1e12 / compute_penalty,
            attn_peak_flops: g.bf16_tflops * 1e12,
            bw: g.mem_bw_gbps * 1e9,
            gemm_mfu,
            mfu: g.mfu,
            mbu: g.mbu,
            k_kv: g.k_kv,
            tp_bytes_per_token: if cfg.tensor_parallel > 1 {
                2.0 * l * 2.0 * (tp - 1.0) / tp * d * 2.0
            } else {
                0.0
            },
            tp_link: eta * g.link_gbps * 1e9,
            tp_alpha_s: if cfg.tensor_parallel > 1 {
                2.0 * l * hops * g.allreduce_latency_us * 1e-6
            } else {
                0.0
            },
        }
    }

    /// Duration and work of a step at clock factor `f` (1.0 = unthrottled).
    pub fn cost(&self, w: &StepWork, f: f64) -> StepCost {
        if w.is_empty() {
            return StepCost::default();
        }
        let t = w.tokens as f64;
        let s = w.sampled as f64;
        let f = f.clamp(0.05, 1.0);
        let p = self.tp * self.peak_flops * self.gemm_mfu * f;
        let p_attn = self.tp * self.attn_peak_flops * self.mfu * f;
        let bw = self.tp * self.bw * self.mbu * (0.8 + 0.2 * f);
        let f_gemm = 2.0 * self.n_ne * t + 2.0 * self.vd * s;
        let f_attn = self.attn_flops_per_pair * w.attn_pairs;
        let kv_read = self.kv_bytes_per_token * w.ctx_read as f64;
        let kv_write = self.kv_bytes_per_token * t;
        let gemm = (f_gemm / p).max(self.weight_bytes / bw);
        let attn = (f_attn / p_attn).max(self.k_kv * (kv_read + kv_write) / bw);
        let tp_comm = if self.tp > 1.0 {
            self.tp_bytes_per_token * t / self.tp_link + self.tp_alpha_s
        } else {
            0.0
        };
        let duration_s = self.fixed_s
            + w.seqs as f64 * self.t_seq_s
            + w.prefills as f64 * self.t_prefill_s
            + gemm
            + attn
            + tp_comm;
        StepCost {
            duration_s,
            flops: (f_gemm + f_attn) / self.tp,
            read_bytes: (self.weight_bytes + kv_read) / self.tp,
            write_bytes: kv_write / self.tp,
        }
    }

    /// Per-GPU peak FLOP/s used by the model (dense, precision-dependent).
    pub fn peak_flops(&self) -> f64 {
        self.peak_flops
    }

    /// Per-GPU FLOP/s the weight GEMMs reach when compute-bound (peak × MFU, FP8 factor applied).
    pub fn achievable_flops(&self) -> f64 {
        self.peak_flops * self.gemm_mfu
    }

    /// Per-GPU peak DRAM bandwidth (B/s).
    pub fn peak_bw(&self) -> f64 {
        self.bw
    }
}
