//! Configuration of the engine twin: GPU and model presets, the user-facing [`SimSpec`], and the
//! resolved [`EngineConfig`] (KV pool size, batch limits, step-time constants).
//!
//! Presets are YAML data files under `crates/sim/presets/`, embedded at build time; custom ones are
//! read from a YAML file with the same schema. KV pool sizing follows vLLM's
//! `gpu_worker.determine_available_memory` + `kv_cache_utils.get_num_blocks` (simulator.md §2.3, §3.4).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

const BUILTIN_GPUS: &str = include_str!("../../presets/gpus.yaml");
const BUILTIN_MODELS: &str = include_str!("../../presets/models.yaml");

/// vLLM's KV block size in tokens (default `--block-size 16`).
pub const BLOCK_SIZE: u32 = 16;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

/// An invalid configuration: which field (or file) is wrong and what was expected.
///
/// Display form: ``invalid `gpu`: unknown gpu 'a10'; expected one of a10g, l4, …``; for a value
/// read from a custom preset file, ``FILE:LINE:COL: invalid `model tiny: head_dim`: …`` followed
/// by the offending line and a caret (as [`headroom_core::yaml::YamlError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field (or `file: field`) that is wrong, e.g. `gpu`, `tensor_parallel`.
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
    /// The whole error rendered at its place in a file (`FILE:LINE:COL: …` and the quoted line),
    /// when the value came from one; `Display` shows this instead of the short form.
    pub located: Option<String>,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
            located: None,
        }
    }

    /// The same error, placed at `location` (1-based line, column) of `text` read from `path`.
    fn at(mut self, path: &Path, text: &str, location: Option<(u64, u64)>) -> Self {
        if location.is_some() {
            let short = format!("invalid `{}`: {}", self.field, self.message);
            self.located =
                Some(headroom_core::yaml::YamlError::at(path, text, location, short).to_string());
        }
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.located {
            Some(l) => f.write_str(l),
            None => write!(f, "invalid `{}`: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How the GPUs of a tensor-parallel group talk to each other (affects the all-reduce term).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interconnect {
    /// PCIe (A10G, L4, L40S, H100 PCIe).
    Pcie,
    /// NVLink / NVSwitch (A100, H100 SXM, H200).
    Nvlink,
    /// AMD Infinity Fabric (MI300X).
    Xgmi,
}

/// Where a GPU preset's timing constants (`mbu`, host overheads) come from.
///
/// In YAML: `provenance: {kind: measured, source: "…"}` or `provenance: {kind: estimated,
/// basis: "…"}`; a preset without the field (a custom file written before it existed) is
/// estimated. A capacity plan on an estimated preset is a datasheet projection, not a fit to a
/// measured server, and should say so.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Provenance {
    /// Fit to a public measurement of vLLM on this GPU; `source` names it (page, figure, version).
    Measured {
        /// The measurement the constants were fit to.
        source: String,
    },
    /// Datasheet values with efficiency factors carried over from similar GPUs.
    Estimated {
        /// What the estimate rests on (datasheet, which GPU's factors), if stated.
        #[serde(default)]
        basis: Option<String>,
    },
}

impl Default for Provenance {
    fn default() -> Self {
        Provenance::Estimated { basis: None }
    }
}

impl Provenance {
    /// Whether the constants are estimates rather than a fit to a measurement.
    pub fn is_estimated(&self) -> bool {
        matches!(self, Provenance::Estimated { .. })
    }

    /// The measurement's source, or the estimate's basis (empty when none was given).
    pub fn source(&self) -> &str {
        match self {
            Provenance::Measured { source } => source,
            Provenance::Estimated { basis } => basis.as_deref().unwrap_or(""),
        }
    }
}

/// One GPU preset (a row of simulator.md §4.1 plus the calibrated constants of §3.2–§3.6).
///
/// Units are in the field names: MiB, GB/s (1e9 B/s), TFLOP/s (1e12, dense), W, °C, MHz, ms, µs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPreset {
    /// Whether the timing constants were fit to a measurement ([`GpuPreset::provenance`]).
    #[serde(default)]
    pub provenance: Provenance,
    /// dcgm-exporter `modelName` label, e.g. `NVIDIA A10G`.
    pub display_name: String,
    /// Other accepted spellings of the preset name.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Total framebuffer as nvidia-smi reports it (MiB).
    pub memory_mib: f64,
    /// Peak DRAM bandwidth, GB/s.
    pub mem_bw_gbps: f64,
    /// Dense BF16 tensor peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor peak, TFLOP/s; `None` where the GPU has no FP8 tensor cores (Ampere).
    pub fp8_tflops: Option<f64>,
    /// Board power limit at default settings (W).
    pub tdp_w: f64,
    /// Power in P0 with a model loaded and no kernels running (W).
    pub idle_w: f64,
    /// Memory-bandwidth utilisation reached by decode GEMVs (0–1).
    pub mbu: f64,
    /// Model-FLOPs utilisation reached by prefill GEMMs (0–1).
    pub mfu: f64,
    /// SM boost clock (MHz).
    pub boost_clock_mhz: f64,
    /// SM clock when idle (MHz).
    pub idle_clock_mhz: f64,
    /// Memory clock (MHz).
    pub mem_clock_mhz: f64,
    /// GPU-to-GPU link used by tensor parallelism.
    pub interconnect: Interconnect,
    /// Link bandwidth per direction (GB/s).
    pub link_gbps: f64,
    /// Fixed latency of one all-reduce (µs).
    pub allreduce_latency_us: f64,
    /// Fixed cost per engine step (ms).
    pub t_step_ms: f64,
    /// Fixed cost per layer per step (µs).
    pub t_layer_us: f64,
    /// Host cost per scheduled sequence per step (µs).
    pub t_seq_us: f64,
    /// Extra cost per sequence whose prompt is prefilled in a step (ms): per-request attention
    /// metadata, varlen kernel set-up and sampler state that a decode row does not pay. Near 0 on
    /// GPUs (no preset sets it); possibly milliseconds on a CPU backend (the real vLLM of
    /// `scripts/plan-calibration-check`, where it trades off against MFU). Fitted by
    /// `plan --calibrate-from`.
    #[serde(default)]
    pub t_prefill_ms: f64,
    /// `k_kv`: how much slower decode attention streams the KV cache than decode GEMVs stream
    /// weights (a factor on the KV bytes in the roofline, [`super::timing`]). Paged-attention
    /// reads on GPUs: 1.4 (BLIS β₂ᵦ/β₃, the default). A CPU backend's attention kernel is far
    /// from bandwidth-bound (the real vLLM of `scripts/plan-calibration-check` decodes a
    /// 256-token context 20–40 % slower than a 128-token one where bandwidth alone predicts
    /// 1 %); `plan --calibrate-from` fits it when the run's classes ask for different context
    /// lengths. From 1 (KV reads as efficient as weight reads) to 1,000.
    #[serde(default = "default_k_kv")]
    pub k_kv: f64,
    /// Frontend time before the engine core sees a request: HTTP, template, tokenisation, IPC (ms).
    pub frontend_in_ms: f64,
    /// Of `frontend_in_ms`, the CPU work one API-server process does per request in turn (ms):
    /// template, tokenisation, validation on its event loop. Used with `frontend_cpu_queue`;
    /// absent: [`FRONTEND_REQUEST_CPU_MS`]. Capped at `frontend_in_ms`, so a large value makes the
    /// whole frontend delay serial, as on a CPU host, where nothing of it is network.
    #[serde(default)]
    pub frontend_cpu_ms: Option<f64>,
    /// Extra frontend time per request for every 1,000 output tokens per second the server is
    /// streaming when the request arrives (ms per 1,000 tokens/s). Every streamed token is a
    /// chunk that the API server detokenises and writes, and that a Python benchmark client
    /// parses, on the same host CPU as the request's own template and tokenisation; published
    /// sweeps of small models show TTFT growing in proportion to the token rate long before
    /// that CPU saturates (L4 + Qwen2.5-0.5B: ~29 ms per 1,000 tokens/s, CALIBRATION.md). A
    /// property of the host and the client, not of the GPU: 0 in every preset (not measured),
    /// fitted by `plan --calibrate-from`. The rate is the engine's output tokens over the last
    /// second or so ([`FRONTEND_LOAD_WINDOW_S`], an exponential average).
    #[serde(default)]
    pub frontend_load_ms: f64,
    /// Whether vLLM schedules asynchronously on this platform (the next batch is scheduled while
    /// the current one runs, so a new prompt waits one step longer). On for CUDA and ROCm, the
    /// default; off on vLLM's CPU backend, which forces `scheduler_config.async_scheduling =
    /// False` (`vllm/platforms/cpu.py`, `check_and_update_config`).
    #[serde(default = "default_async_scheduling")]
    pub async_scheduling: bool,
    /// Framebuffer used outside vLLM's budget: CUDA context, cuBLAS, NCCL (MiB).
    pub cuda_context_mib: f64,
    /// Framebuffer the driver reserves (dcgm `FB_RESERVED`, MiB).
    pub fb_reserved_mib: f64,
    /// Ambient (inlet) temperature (°C).
    pub ambient_c: f64,
    /// Steady-state temperature rise per watt (°C/W).
    pub thermal_resistance_c_per_w: f64,
    /// Thermal time constant (s).
    pub thermal_tau_s: f64,
    /// Temperature above which the driver slows the SM clock (°C).
    pub slowdown_c: f64,
    /// Whether the GPU reports a memory temperature (HBM parts do; GDDR parts report 0).
    pub has_memory_temp: bool,
}

fn default_async_scheduling() -> bool {
    true
}

fn default_k_kv() -> f64 {
    super::timing::K_KV
}

impl GpuPreset {
    /// Where this preset's timing constants come from (measured with its source, or estimated).
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// Memory CUDA reports as the device total (`cudaMemGetInfo`, what vLLM multiplies by
    /// `gpu_memory_utilization`): nvidia-smi's total less the driver's reserve (MiB).
    pub fn cuda_visible_mib(&self) -> f64 {
        self.memory_mib - self.fb_reserved_mib
    }
}

/// One model preset (a row of simulator.md §4.2, from the model's Hugging Face `config.json`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPreset {
    /// Hugging Face repository id; vLLM's default served model name.
    pub hf_name: String,
    /// Other accepted spellings of the preset name.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// `num_hidden_layers`.
    pub num_layers: u32,
    /// `hidden_size` (d).
    pub hidden_size: u32,
    /// `num_attention_heads` (H).
    pub num_heads: u32,
    /// `num_key_value_heads` (H_kv).
    pub num_kv_heads: u32,
    /// Per-head dimension (d_h).
    pub head_dim: u32,
    /// `intermediate_size` (FFN width).
    pub intermediate_size: u32,
    /// `vocab_size` (V).
    pub vocab_size: u32,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// All parameters, embeddings (and an untied LM head) included.
    pub params_total: f64,
    /// Parameters excluding the input embedding and the LM head (N_ne).
    pub params_non_embedding: f64,
    /// `max_position_embeddings`: vLLM's default `max_model_len`.
    pub max_position_embeddings: u32,
}

/// Weight precision of the served checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    /// 2 bytes per weight.
    Bf16,
    /// 1 byte per weight; W8A8 on GPUs with FP8 tensor cores, W8A16 (Marlin) otherwise.
    Fp8,
    /// 0.5 byte per weight (AWQ/GPTQ), with a 1.2× dequantisation penalty on compute.
    Int4,
}

impl WeightDtype {
    /// Bytes per quantised (non-embedding) weight.
    pub fn bytes_per_weight(self) -> f64 {
        match self {
            WeightDtype::Bf16 => 2.0,
            WeightDtype::Fp8 => 1.0,
            WeightDtype::Int4 => 0.5,
        }
    }

    /// The name vLLM would show (`bfloat16`, `fp8`, `int4`).
    pub fn as_str(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp8 => "fp8",
            WeightDtype::Int4 => "int4",
        }
    }
}

/// What the user asks for: GPU, model, precision and vLLM engine arguments, plus faults.
///
/// Field names accept snake_case or kebab-case in YAML (`max_model_len` or `max-model-len`); unknown
/// fields are rejected. [`SimSpec::resolve`] turns it into an [`EngineConfig`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimSpec {
    /// GPU preset name (`a10g`, `l4`, `rtx-4090`, `l40s`, `a100-40gb`, `a100-80gb`,
    /// `a100-80gb-pcie`, `h100-sxm`, `h100-pcie`, `h200`, `b200`, `mi300x`) or a name from
    /// `custom_gpu_file`.
    pub gpu: String,
    /// Model preset name (`qwen2.5-0.5b`, `qwen2.5-1.5b`, `qwen2.5-3b`, `qwen2.5-7b`, `llama-3.1-8b`,
    /// `llama-3.1-70b`, `mistral-7b`) or a name from `custom_model_file`.
    pub model: String,
    /// Weight precision: `bf16`, `fp8` or `int4`.
    pub dtype: String,
    /// Tensor-parallel degree: 1, 2, 4 or 8.
    #[serde(
        alias = "tensor-parallel",
        alias = "tensor_parallel_size",
        alias = "tensor-parallel-size"
    )]
    pub tensor_parallel: u32,
    /// vLLM `--gpu-memory-utilization` (0 < x ≤ 1, default 0.9).
    #[serde(alias = "gpu-memory-utilization")]
    pub gpu_memory_utilization: f64,
    /// vLLM `--max-model-len`; default: the model's `max_position_embeddings`.
    #[serde(alias = "max-model-len")]
    pub max_model_len: Option<u32>,
    /// vLLM `--max-num-seqs`; default 256 (1024 on ≥ 70 GiB non-A100 GPUs).
    #[serde(alias = "max-num-seqs")]
    pub max_num_seqs: Option<u32>,
    /// vLLM `--max-num-batched-tokens`; default 2048 (8192 on ≥ 70 GiB non-A100 GPUs).
    #[serde(alias = "max-num-batched-tokens")]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM `--num-gpu-blocks-override`: the KV pool size in blocks, including vLLM's null block.
    #[serde(alias = "num-gpu-blocks-override")]
    pub num_gpu_blocks_override: Option<u32>,
    /// vLLM `--enable-prefix-caching` (on by default in V1).
    #[serde(alias = "enable-prefix-caching")]
    pub enable_prefix_caching: bool,
    /// vLLM `--served-model-name`; default: the model's Hugging Face id.
    #[serde(alias = "served-model-name")]
    pub served_model_name: Option<String>,
    /// Seed of every random draw (step-time jitter, filler text).
    pub seed: u64,
    /// Multiplier on modelled times: 1.0 = real step times, 0.0 = zero-latency mode.
    #[serde(alias = "time-scale")]
    pub time_scale: f64,
    /// Fault: board power limit in W (below TDP); throttles clocks when demand exceeds it.
    #[serde(alias = "power-cap-w")]
    pub power_cap_w: Option<f64>,
    /// Fault: a cooling fault (ambient +15 °C, thermal resistance ×1.6) so that sustained load
    /// drives the GPU past its slowdown temperature.
    #[serde(alias = "thermal-throttle")]
    pub thermal_throttle: bool,
    /// Fault: at this engine time (s) the GPU reports XID 13 (graphics engine exception) in dcgm.
    #[serde(alias = "xid-at-s")]
    pub xid_at_s: Option<f64>,
    /// YAML file with extra GPU presets (same schema as `presets/gpus.yaml`).
    #[serde(alias = "custom-gpu-file")]
    pub custom_gpu_file: Option<PathBuf>,
    /// YAML file with extra model presets (same schema as `presets/models.yaml`).
    #[serde(alias = "custom-model-file")]
    pub custom_model_file: Option<PathBuf>,
    /// vLLM `--enable-per-request-metrics`: the final streamed chunk (and a non-streaming body)
    /// carries a `metrics` object; the twin fills `queue_time_ms` (engine queue time of that
    /// request, exact) and leaves the other fields out.
    #[serde(alias = "enable-per-request-metrics")]
    pub enable_per_request_metrics: bool,
    /// Model the frontend as one CPU process that serves each request (`frontend_in_ms`) and
    /// each streamed output chunk ([`FRONTEND_CHUNK_US`]) in turn, so TTFT rises under load, and
    /// make closed-loop clients of the virtual clock send their next request
    /// [`FRONTEND_OUT_MS`] after the last token. Off by default: it changes the calibrated
    /// A10G figures other tests assert (CALIBRATION.md, "Frontend queue").
    #[serde(alias = "frontend-cpu-queue")]
    pub frontend_cpu_queue: bool,
}

impl Default for SimSpec {
    fn default() -> Self {
        SimSpec {
            gpu: "a10g".into(),
            model: "qwen2.5-3b".into(),
            dtype: "bf16".into(),
            tensor_parallel: 1,
            gpu_memory_utilization: 0.9,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            num_gpu_blocks_override: None,
            enable_prefix_caching: true,
            served_model_name: None,
            seed: 0,
            time_scale: 1.0,
            power_cap_w: None,
            thermal_throttle: false,
            xid_at_s: None,
            custom_gpu_file: None,
            custom_model_file: None,
            enable_per_request_metrics: false,
            frontend_cpu_queue: false,
        }
    }
}

/// Faults the engine itself models (HTTP-level faults belong to the server).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultConfig {
    /// Board power limit (W); `None` = TDP.
    pub power_cap_w: Option<f64>,
    /// Cooling fault active.
    pub thermal_throttle: bool,
    /// Engine time (s) at which XID 13 is reported.
    pub xid_at_s: Option<f64>,
}

/// Resolved, validated configuration of one engine (one vLLM server on `tensor_parallel` GPUs).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// GPU preset name as resolved (canonical, e.g. `a10g`).
    pub gpu_name: String,
    /// The GPU preset.
    pub gpu: GpuPreset,
    /// Model preset name as resolved (canonical, e.g. `qwen2.5-3b`).
    pub model_name: String,
    /// The model preset.
    pub model: ModelPreset,
    /// Weight precision.
    pub dtype: WeightDtype,
    /// Tensor-parallel degree.
    pub tensor_parallel: u32,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: f64,
    /// Name in `/v1/models` and the `model_name` metric label.
    pub served_model_name: String,
    /// Longest prompt + output in tokens.
    pub max_model_len: u32,
    /// Most requests in the running batch.
    pub max_num_seqs: u32,
    /// Token budget of one step (chunked prefill).
    pub max_num_batched_tokens: u32,
    /// KV block size in tokens (16).
    pub block_size: u32,
    /// KV blocks in the pool, including vLLM's null block (usable = `num_gpu_blocks − 1`).
    pub num_gpu_blocks: u32,
    /// Whether `num_gpu_blocks` came from `num_gpu_blocks_override`.
    pub num_gpu_blocks_overridden: bool,
    /// KV bytes per token per GPU.
    pub kv_bytes_per_token: f64,
    /// Weight bytes per GPU.
    pub weight_bytes_per_gpu: f64,
    /// What vLLM's start-up profiler keeps out of the KV pool per GPU besides the weights (B):
    /// see [`non_kv_bytes`].
    pub non_kv_bytes_per_gpu: f64,
    /// vLLM `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// Async scheduling (vLLM's default): the scheduler works one step ahead of the GPU.
    pub async_scheduling: bool,
    /// Seed of every random draw.
    pub seed: u64,
    /// Multiplier on modelled times (1.0 real, 0.0 zero-latency).
    pub time_scale: f64,
    /// Log-normal σ of per-step time jitter (0 disables it).
    pub step_jitter_sigma: f64,
    /// Log-normal σ of each request's frontend delay around `frontend_in_ms` (its median; 0
    /// disables it). Requests differ in template, tokenisation and the API server's event loop,
    /// so two clients that finish in the same step reach the engine core apart and often in
    /// different steps; without it, fixed-length closed-loop users that once share a step share
    /// every later one and prefill together for good. 0.15: the spread of single-stream TTFT on
    /// the real vLLM of `scripts/plan-calibration-check` (p95 − p50 ≈ 1.4 ms, one 128-token
    /// prefill step being nearly constant, of ~5 ms frontend; `crates/sim/CALIBRATION.md`).
    pub frontend_jitter_sigma: f64,
    /// Engine-modelled faults.
    pub faults: FaultConfig,
    /// The frontend is one CPU queue and closed-loop clients wait [`FRONTEND_OUT_MS`] between a
    /// request's last token and their next request ([`SimSpec::frontend_cpu_queue`]).
    pub frontend_cpu_queue: bool,
}

/// Frontend CPU time per request (ms): chat template, tokenisation, request validation on the
/// one API-server process; the rest of `frontend_in_ms` is IPC and hand-off latency that overlaps
/// other requests. Estimate (BLIS's α₁ of about 1.8 ms per request; not measured on vLLM).
pub const FRONTEND_REQUEST_CPU_MS: f64 = 2.0;

/// Default [`EngineConfig::frontend_jitter_sigma`].
pub const FRONTEND_JITTER_SIGMA: f64 = 0.15;

/// Time constant of the output-token rate that [`GpuPreset::frontend_load_ms`] scales (s): an
/// exponential average over about a second, long against an engine step, short against a level.
pub const FRONTEND_LOAD_WINDOW_S: f64 = 1.0;

/// Frontend CPU time per streamed output chunk (µs): detokenisation and the SSE write. BLIS's
/// fitted α₂ is 46 µs per output token (simulator.md §3.2).
pub const FRONTEND_CHUNK_US: f64 = 50.0;

/// Time from a request's last token to the client holding the finished response (ms): final
/// detokenisation, the last SSE events, the connection's close (simulator.md §3.2, "frontend out").
pub const FRONTEND_OUT_MS: f64 = 2.0;

impl EngineConfig {
    /// Gap a closed-loop client leaves between a request's last token and its next request on
    /// the virtual clock (s, `time_scale` applied): [`FRONTEND_OUT_MS`] with
    /// `frontend_cpu_queue`, else 0.
    pub fn client_gap_s(&self) -> f64 {
        if self.frontend_cpu_queue {
            FRONTEND_OUT_MS * 1e-3 * self.time_scale
        } else {
            0.0
        }
    }

    /// Usable KV tokens (`(num_gpu_blocks − 1) × block_size`), what vLLM logs as "GPU KV cache size".
    pub fn kv_cache_tokens(&self) -> u64 {
        u64::from(self.num_gpu_blocks.saturating_sub(1)) * u64::from(self.block_size)
    }

    /// vLLM's "Maximum concurrency for `max_model_len` tokens per request".
    pub fn max_concurrency(&self) -> f64 {
        self.kv_cache_tokens() as f64 / f64::from(self.max_model_len)
    }

    /// The two start-up log lines vLLM prints about the KV pool.
    pub fn kv_log_lines(&self) -> [String; 2] {
        [
            format!("GPU KV cache size: {} tokens", self.kv_cache_tokens()),
            format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                self.max_model_len,
                self.max_concurrency()
            ),
        ]
    }
}

fn parse_presets<T: for<'de> Deserialize<'de>>(
    text: &str,
    origin: &str,
    field: &str,
) -> Result<BTreeMap<String, T>, ConfigError> {
    serde_saphyr::from_str::<BTreeMap<String, T>>(text).map_err(|e| {
        ConfigError::new(
            field,
            format!("cannot parse {origin}: {e}; expected a YAML mapping of preset name to fields"),
        )
    })
}

fn read_custom(path: &Path, field: &str) -> Result<String, ConfigError> {
    headroom_core::input_file::read_to_string(path, headroom_core::input_file::MAX_CONFIG_BYTES)
        .map_err(|e| ConfigError::new(field, format!("cannot read '{}': {e}", path.display())))
}

/// Reads a custom preset file; parse errors carry `FILE:LINE:COL` ([`headroom_core::yaml`]).
fn load_custom<T: for<'de> Deserialize<'de>>(
    path: &Path,
    field: &str,
) -> Result<(BTreeMap<String, T>, String), ConfigError> {
    let text = read_custom(path, field)?;
    let presets =
        headroom_core::yaml::parse_yaml::<BTreeMap<String, T>>(&text, path).map_err(|e| {
            let mut err = ConfigError::new(
                field,
                format!(
                    "cannot parse '{}': {}; expected a YAML mapping of preset name to fields",
                    path.display(),
                    e.message
                ),
            );
            err.located = Some(format!(
                "{e}\n(in {field}: expected a YAML mapping of preset name to fields)"
            ));
            err
        })?;
    Ok((presets, text))
}

/// Places a preset check error (`field` = `gpu NAME: FIELD` or `model NAME: FIELD`) at the value
/// of that field in the custom file `text`: the first `FIELD:` line inside the block of the
/// top-level key `NAME:`. Unchanged when not found (a built-in preset, an alias, flow style).
fn locate(e: ConfigError, path: &Path, text: &str, preset: &str) -> ConfigError {
    let Some((_, key)) = e.field.split_once(": ") else {
        return e;
    };
    let mut in_block = false;
    let mut place = None;
    for (i, line) in text.lines().enumerate() {
        let body = line.trim_start();
        let indent = line.len() - body.len();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if indent == 0 {
            let name = body
                .split(':')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches(['"', '\'']);
            in_block = name.eq_ignore_ascii_case(preset);
            continue;
        }
        if in_block && let Some(rest) = body.strip_prefix(key).and_then(|r| r.strip_prefix(':')) {
            let value_at = indent + key.len() + 1 + (rest.len() - rest.trim_start().len());
            place = Some((i as u64 + 1, value_at as u64 + 1));
            break;
        }
    }
    e.at(path, text, place)
}

/// The built-in GPU presets, by canonical name.
pub fn builtin_gpus() -> BTreeMap<String, GpuPreset> {
    // The embedded file is covered by tests; a parse failure here is a build defect.
    parse_presets(BUILTIN_GPUS, "presets/gpus.yaml", "gpu").unwrap_or_default()
}

/// The built-in model presets, by canonical name.
pub fn builtin_models() -> BTreeMap<String, ModelPreset> {
    parse_presets(BUILTIN_MODELS, "presets/models.yaml", "model").unwrap_or_default()
}

fn lookup<T: Clone>(
    table: &BTreeMap<String, T>,
    aliases: impl Fn(&T) -> &[String],
    wanted: &str,
    field: &str,
) -> Result<(String, T), ConfigError> {
    let w = wanted.trim().to_ascii_lowercase();
    for (name, v) in table {
        if *name == w || aliases(v).iter().any(|a| a.eq_ignore_ascii_case(&w)) {
            return Ok((name.clone(), v.clone()));
        }
    }
    let names: Vec<&str> = table.keys().map(String::as_str).collect();
    Err(ConfigError::new(
        field,
        format!(
            "unknown {field} '{wanted}'; expected one of {}",
            names.join(", ")
        ),
    ))
}

/// Accepted range of each numeric GPU preset field: `(field, value, lowest, highest, unit)`.
///
/// The bounds are generous (about 100× beyond today's largest parts: 288 GB of HBM, 8 TB/s,
/// 2.5 PFLOP/s dense) so any real or planned GPU fits; they exist so that a typo or an extreme
/// value in a custom preset is refused with the field's name instead of producing a KV pool of
/// billions of blocks or a step that lasts for years.
fn gpu_ranges(g: &GpuPreset) -> [(&'static str, f64, f64, f64, &'static str); 25] {
    [
        (
            "memory_mib",
            g.memory_mib,
            1024.0,
            MAX_GPU_MEMORY_MIB,
            "MiB",
        ),
        ("mem_bw_gbps", g.mem_bw_gbps, 1.0, 1.0e6, "GB/s"),
        ("bf16_tflops", g.bf16_tflops, 0.1, 1.0e6, "TFLOP/s"),
        ("tdp_w", g.tdp_w, 1.0, 1.0e5, "W"),
        ("idle_w", g.idle_w, 0.0, 1.0e5, "W"),
        ("mbu", g.mbu, 0.01, 1.0, "ratio"),
        ("mfu", g.mfu, 0.01, 1.0, "ratio"),
        ("boost_clock_mhz", g.boost_clock_mhz, 1.0, 1.0e5, "MHz"),
        ("idle_clock_mhz", g.idle_clock_mhz, 0.0, 1.0e5, "MHz"),
        ("mem_clock_mhz", g.mem_clock_mhz, 0.0, 1.0e5, "MHz"),
        ("link_gbps", g.link_gbps, 0.1, 1.0e6, "GB/s"),
        (
            "allreduce_latency_us",
            g.allreduce_latency_us,
            0.0,
            1.0e6,
            "µs",
        ),
        ("t_step_ms", g.t_step_ms, 0.0, 1.0e3, "ms"),
        ("t_layer_us", g.t_layer_us, 0.0, 1.0e5, "µs"),
        ("t_seq_us", g.t_seq_us, 0.0, 1.0e5, "µs"),
        ("t_prefill_ms", g.t_prefill_ms, 0.0, 1.0e4, "ms"),
        ("k_kv", g.k_kv, 1.0, 1.0e3, "× the KV bytes"),
        ("frontend_in_ms", g.frontend_in_ms, 0.0, 1.0e5, "ms"),
        (
            "frontend_load_ms",
            g.frontend_load_ms,
            0.0,
            1.0e4,
            "ms per 1000 tokens/s",
        ),
        (
            "cuda_context_mib",
            g.cuda_context_mib,
            0.0,
            MAX_GPU_MEMORY_MIB,
            "MiB",
        ),
        (
            "fb_reserved_mib",
            g.fb_reserved_mib,
            0.0,
            MAX_GPU_MEMORY_MIB,
            "MiB",
        ),
        ("ambient_c", g.ambient_c, -50.0, 100.0, "°C"),
        (
            "thermal_resistance_c_per_w",
            g.thermal_resistance_c_per_w,
            0.0,
            10.0,
            "°C/W",
        ),
        ("thermal_tau_s", g.thermal_tau_s, 0.01, 1.0e5, "s"),
        ("slowdown_c", g.slowdown_c, -50.0, 200.0, "°C"),
    ]
}

/// Largest `time_scale`: every modelled time 1000× slower than the real engine.
pub const MAX_TIME_SCALE: f64 = 1000.0;

/// Largest `memory_mib` a GPU preset may have: 16 TiB (today's largest GPU has 288 GB).
pub const MAX_GPU_MEMORY_MIB: f64 = 16.0 * 1024.0 * 1024.0;

/// Most KV blocks one engine may have (2^30 blocks = 17 G tokens of 16; a 0.5B model on a 141 GB
/// H200 has about 700 k blocks). Block ids are `u32`, with `u32::MAX` reserved.
pub const MAX_GPU_BLOCKS: u32 = 1 << 30;

fn check_gpu(name: &str, g: &GpuPreset) -> Result<(), ConfigError> {
    for (f, v, lo, hi, unit) in gpu_ranges(g) {
        if !(v.is_finite() && v >= lo && v <= hi) {
            return Err(ConfigError::new(
                format!("gpu {name}: {f}"),
                format!("expected a number from {lo} to {hi} ({unit}), got {v}"),
            ));
        }
    }
    if g.idle_w >= g.tdp_w {
        return Err(ConfigError::new(
            format!("gpu {name}: idle_w"),
            format!(
                "expected 0 ≤ idle_w < tdp_w ({}), got {}",
                g.tdp_w, g.idle_w
            ),
        ));
    }
    if g.idle_clock_mhz > g.boost_clock_mhz {
        return Err(ConfigError::new(
            format!("gpu {name}: idle_clock_mhz"),
            format!(
                "expected at most boost_clock_mhz ({}), got {}",
                g.boost_clock_mhz, g.idle_clock_mhz
            ),
        ));
    }
    if g.slowdown_c <= g.ambient_c {
        return Err(ConfigError::new(
            format!("gpu {name}: slowdown_c"),
            format!(
                "expected a temperature above ambient_c ({} °C), got {}",
                g.ambient_c, g.slowdown_c
            ),
        ));
    }
    if g.cuda_context_mib + g.fb_reserved_mib >= g.memory_mib {
        return Err(ConfigError::new(
            format!("gpu {name}: cuda_context_mib"),
            format!(
                "cuda_context_mib ({}) + fb_reserved_mib ({}) must be less than memory_mib ({})",
                g.cuda_context_mib, g.fb_reserved_mib, g.memory_mib
            ),
        ));
    }
    if let Some(c) = g.frontend_cpu_ms
        && !(c.is_finite() && (0.0..=1.0e6).contains(&c))
    {
        return Err(ConfigError::new(
            format!("gpu {name}: frontend_cpu_ms"),
            format!("expected a number from 0 to 1000000 (ms) or null, got {c}"),
        ));
    }
    if let Some(f8) = g.fp8_tflops
        && !(f8.is_finite() && (0.1..=1.0e6).contains(&f8))
    {
        return Err(ConfigError::new(
            format!("gpu {name}: fp8_tflops"),
            format!("expected a number from 0.1 to 1000000 (TFLOP/s) or null, got {f8}"),
        ));
    }
    Ok(())
}

/// Accepted range of each integer model preset field: `(field, value, lowest, highest)`.
///
/// As for [`gpu_ranges`], the bounds are far above any published model (Llama 3.1 405B: 126
/// layers, d = 16384; the largest vocabularies ≈ 262 k; the longest contexts ≈ 10 M tokens).
fn model_ranges(m: &ModelPreset) -> [(&'static str, u32, u32, u32); 8] {
    [
        ("num_layers", m.num_layers, 1, 10_000),
        ("hidden_size", m.hidden_size, 1, 1 << 20),
        ("num_heads", m.num_heads, 1, 1 << 16),
        ("num_kv_heads", m.num_kv_heads, 1, 1 << 16),
        ("head_dim", m.head_dim, 1, 1 << 16),
        ("intermediate_size", m.intermediate_size, 1, 1 << 24),
        ("vocab_size", m.vocab_size, 1, 1 << 24),
        // The default max_model_len; vLLM needs room for one prompt and one output token.
        (
            "max_position_embeddings",
            m.max_position_embeddings,
            2,
            1 << 28,
        ),
    ]
}

fn check_model(name: &str, m: &ModelPreset) -> Result<(), ConfigError> {
    for (f, v, lo, hi) in model_ranges(m) {
        if !(lo..=hi).contains(&v) {
            return Err(ConfigError::new(
                format!("model {name}: {f}"),
                format!("expected a whole number from {lo} to {hi}, got {v}"),
            ));
        }
    }
    if !m.num_heads.is_multiple_of(m.num_kv_heads) {
        return Err(ConfigError::new(
            format!("model {name}: num_kv_heads"),
            format!(
                "expected a divisor of num_heads ({}), got {}",
                m.num_heads, m.num_kv_heads
            ),
        ));
    }
    // 1e15 parameters: 2 PB of bf16 weights, three orders of magnitude above any published model.
    for (f, v) in [
        ("params_total", m.params_total),
        ("params_non_embedding", m.params_non_embedding),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 1.0e15) {
            return Err(ConfigError::new(
                format!("model {name}: {f}"),
                format!("expected a parameter count above 0 and at most 1e15, got {v}"),
            ));
        }
    }
    if m.params_total < m.params_non_embedding {
        return Err(ConfigError::new(
            format!("model {name}: params_total"),
            format!(
                "expected at least params_non_embedding ({}), got {}",
                m.params_non_embedding, m.params_total
            ),
        ));
    }
    Ok(())
}

/// Memory outside PyTorch that vLLM's profiler sees grow during its dummy run (cuBLAS/NCCL
/// workspaces): published start-up logs print `non_torch_memory takes 0.05–0.20GiB`.
pub const NON_TORCH_BYTES: f64 = 0.2 * GIB;

/// The CUDA-graph pool vLLM budgets for its decode graphs (capture sizes up to 512): start-up logs
/// print `Graph capturing finished in N secs, took 0.5–1 GiB`.
pub const CUDA_GRAPH_BYTES: f64 = 0.6 * GIB;

/// Bytes per GPU that vLLM's profiler leaves out of the KV pool besides the weights
/// (simulator.md §2.3, §3.4; vLLM `gpu_worker.determine_available_memory`):
/// [`NON_TORCH_BYTES`] + [`CUDA_GRAPH_BYTES`] + the activation peak of a
/// `max_num_batched_tokens` dummy forward (the MLP's gate/up output and residuals,
/// `T·(2·ffn/TP + 4·d)·2 B`) + the sampler's dummy run on `max_num_seqs` rows of fp32 logits
/// (logits and one working copy, `S·V·4 B·2`).
///
/// Checked against a published vLLM start-up figure: RTX 4090, Llama-3.1-8B, utilisation 0.9,
/// 2588 GPU blocks (simulator.md §3.4); see CALIBRATION.md.
pub fn non_kv_bytes(
    model: &ModelPreset,
    tensor_parallel: u32,
    max_num_batched_tokens: u32,
    max_num_seqs: u32,
) -> f64 {
    let d = f64::from(model.hidden_size);
    let ffn_per_gpu = f64::from(model.intermediate_size) / f64::from(tensor_parallel);
    let activations = f64::from(max_num_batched_tokens) * (2.0 * ffn_per_gpu + 4.0 * d) * 2.0;
    let sampler = f64::from(max_num_seqs) * f64::from(model.vocab_size) * 4.0 * 2.0;
    NON_TORCH_BYTES + CUDA_GRAPH_BYTES + activations + sampler
}

impl SimSpec {
    /// Resolves presets, applies vLLM's defaults and sizes the KV pool.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the field: unknown GPU/model/dtype (listing the accepted names), a
    /// tensor-parallel degree other than 1/2/4/8 or not dividing the attention heads, a utilisation
    /// outside (0, 1], a model that does not fit, a KV pool too small for one `max_model_len`
    /// request, `max_num_batched_tokens < max_num_seqs`, an unreadable or malformed custom file.
    pub fn resolve(&self) -> Result<EngineConfig, ConfigError> {
        let mut gpus = builtin_gpus();
        let mut custom_gpu = None;
        if let Some(p) = &self.custom_gpu_file {
            let (extra, text) = load_custom::<GpuPreset>(p, "custom_gpu_file")?;
            custom_gpu = Some(text);
            gpus.extend(extra.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)));
        }
        let mut models = builtin_models();
        let mut custom_model = None;
        if let Some(p) = &self.custom_model_file {
            let (extra, text) = load_custom::<ModelPreset>(p, "custom_model_file")?;
            custom_model = Some(text);
            models.extend(extra.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)));
        }
        let (gpu_name, gpu) = lookup(&gpus, |g: &GpuPreset| &g.aliases, &self.gpu, "gpu")?;
        check_gpu(&gpu_name, &gpu).map_err(|e| match (&self.custom_gpu_file, &custom_gpu) {
            (Some(p), Some(text)) => locate(e, p, text, &gpu_name),
            _ => e,
        })?;
        let (model_name, model) =
            lookup(&models, |m: &ModelPreset| &m.aliases, &self.model, "model")?;
        check_model(&model_name, &model).map_err(|e| {
            match (&self.custom_model_file, &custom_model) {
                (Some(p), Some(text)) => locate(e, p, text, &model_name),
                _ => e,
            }
        })?;

        let dtype = match self.dtype.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" | "auto" => WeightDtype::Bf16,
            "fp8" | "float8" => WeightDtype::Fp8,
            "int4" | "awq" | "gptq" => WeightDtype::Int4,
            other => {
                return Err(ConfigError::new(
                    "dtype",
                    format!("unknown dtype '{other}'; expected one of bf16, fp8, int4"),
                ));
            }
        };
        let tp = self.tensor_parallel;
        if ![1, 2, 4, 8].contains(&tp) {
            return Err(ConfigError::new(
                "tensor_parallel",
                format!("expected 1, 2, 4 or 8, got {tp}"),
            ));
        }
        if model.num_heads % tp != 0 {
            return Err(ConfigError::new(
                "tensor_parallel",
                format!(
                    "model {model_name} has {} attention heads, not divisible by tensor_parallel {tp}",
                    model.num_heads
                ),
            ));
        }
        let util = self.gpu_memory_utilization;
        if !(util.is_finite() && util > 0.0 && util <= 1.0) {
            return Err(ConfigError::new(
                "gpu_memory_utilization",
                format!("expected a ratio in (0, 1], got {util}"),
            ));
        }
        if !(self.time_scale.is_finite() && (0.0..=MAX_TIME_SCALE).contains(&self.time_scale)) {
            return Err(ConfigError::new(
                "time_scale",
                format!(
                    "expected a number from 0 to {MAX_TIME_SCALE} (1.0 real time, 0.0 zero latency), got {}",
                    self.time_scale
                ),
            ));
        }
        if let Some(cap) = self.power_cap_w
            && !(cap.is_finite() && cap > gpu.idle_w)
        {
            return Err(ConfigError::new(
                "power_cap_w",
                format!(
                    "expected a power limit above the idle draw of {} ({} W), got {cap}",
                    gpu.display_name, gpu.idle_w
                ),
            ));
        }
        if let Some(x) = self.xid_at_s
            && !(x.is_finite() && x >= 0.0)
        {
            return Err(ConfigError::new(
                "xid_at_s",
                format!("expected a non-negative engine time in seconds, got {x}"),
            ));
        }

        // vLLM 0.32 `EngineArgs.get_batch_defaults` for the API server: ≥ 160 GiB → 16384 /
        // 1024; ≥ 70 GiB and not an A100 → 8192 / 1024; else 2048 / 256. vLLM tests the device's
        // name, so the preset's display name (what CUDA reports), not the name a file gives it.
        let memory = gpu.memory_mib * MIB;
        let (def_tokens, def_seqs) = if memory >= 160.0 * GIB {
            (16384, 1024)
        } else if memory >= 70.0 * GIB && !gpu.display_name.to_lowercase().contains("a100") {
            (8192, 1024)
        } else {
            (2048, 256)
        };
        let max_num_seqs = self.max_num_seqs.unwrap_or(def_seqs);
        let max_num_batched_tokens = self.max_num_batched_tokens.unwrap_or(def_tokens);
        if max_num_seqs == 0 {
            return Err(ConfigError::new(
                "max_num_seqs",
                "expected at least 1, got 0",
            ));
        }
        if max_num_batched_tokens < max_num_seqs {
            return Err(ConfigError::new(
                "max_num_batched_tokens",
                format!(
                    "max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to max_num_seqs ({max_num_seqs})"
                ),
            ));
        }
        let max_model_len = self.max_model_len.unwrap_or(model.max_position_embeddings);
        if max_model_len < 2 {
            return Err(ConfigError::new(
                "max_model_len",
                format!("expected at least 2 tokens, got {max_model_len}"),
            ));
        }
        if max_model_len > model.max_position_embeddings {
            return Err(ConfigError::new(
                "max_model_len",
                format!(
                    "{max_model_len} exceeds the model's max_position_embeddings ({}) of {model_name}",
                    model.max_position_embeddings
                ),
            ));
        }

        // Memory per GPU.
        let d = f64::from(model.hidden_size);
        let v = f64::from(model.vocab_size);
        let emb = v * d;
        let head_params = if model.tie_word_embeddings {
            emb
        } else {
            2.0 * emb
        };
        // Quantised checkpoints keep embeddings and LM head in bf16.
        let weight_bytes =
            model.params_non_embedding * dtype.bytes_per_weight() + head_params * 2.0;
        let weight_bytes_per_gpu = weight_bytes / f64::from(tp);
        let kv_heads_per_gpu = (model.num_kv_heads / tp).max(1);
        let kv_bytes_per_token = 2.0
            * f64::from(model.num_layers)
            * f64::from(kv_heads_per_gpu)
            * f64::from(model.head_dim)
            * 2.0;
        let block_bytes = kv_bytes_per_token * f64::from(BLOCK_SIZE);
        let total = gpu.memory_mib * MIB;
        // vLLM multiplies CUDA's device total (nvidia-smi's less the driver's reserve) by the
        // utilisation, then subtracts what its profiler measured (`determine_available_memory`).
        let visible = gpu.cuda_visible_mib() * MIB;
        let non_kv = non_kv_bytes(&model, tp, max_num_batched_tokens, max_num_seqs);
        let available = visible * util - weight_bytes_per_gpu - non_kv;

        // simulator.md §3.4 / vLLM `kv_cache_utils.get_num_blocks`: floor(available / block).
        let (num_gpu_blocks, overridden) = match self.num_gpu_blocks_override {
            Some(n) => {
                if n < 2 {
                    return Err(ConfigError::new(
                        "num_gpu_blocks_override",
                        format!("expected at least 2 blocks (one is vLLM's null block), got {n}"),
                    ));
                }
                // vLLM takes the override as given and allocates it: a pool the GPU cannot hold
                // fails there with CUDA out of memory. The twin refuses it up front.
                let physical = total - gpu.cuda_context_mib * MIB - weight_bytes_per_gpu;
                let max_blocks = (physical / block_bytes)
                    .floor()
                    .clamp(0.0, f64::from(MAX_GPU_BLOCKS));
                if f64::from(n) > max_blocks {
                    return Err(ConfigError::new(
                        "num_gpu_blocks_override",
                        format!(
                            "{n} blocks of {model_name} need {:.2} GiB of KV cache per GPU, but {} has only {:.2} GiB left after the CUDA context and the weights (vLLM would fail with CUDA out of memory); expected at most {max_blocks:.0} blocks",
                            f64::from(n) * block_bytes / GIB,
                            gpu.display_name,
                            physical.max(0.0) / GIB
                        ),
                    ));
                }
                (n, true)
            }
            None => {
                if available <= 0.0 {
                    return Err(ConfigError::new(
                        "model",
                        format!(
                            "{model_name} in {} does not fit on {} × {} at gpu_memory_utilization {util}: weights {:.2} GiB + non-KV {:.2} GiB (activations for max_num_batched_tokens {max_num_batched_tokens}, sampler logits for max_num_seqs {max_num_seqs}) per GPU > budget {:.2} GiB; try fp8/int4, a larger tensor_parallel, a larger GPU or smaller batch limits",
                            dtype.as_str(),
                            tp,
                            gpu.display_name,
                            weight_bytes_per_gpu / GIB,
                            non_kv / GIB,
                            visible * util / GIB
                        ),
                    ));
                }
                let n = (available / block_bytes).floor();
                // Block 0 is vLLM's null block: fewer than 2 leaves nothing to store a token in.
                if n < 2.0 {
                    return Err(ConfigError::new(
                        "gpu_memory_utilization",
                        format!(
                            "No available memory for the cache blocks: one KV block of {model_name} ({BLOCK_SIZE} tokens) needs {:.3} GiB per GPU, but only {:.3} GiB per GPU is left for the KV cache on {} at gpu_memory_utilization {util}; try increasing `gpu_memory_utilization`, a larger tensor_parallel or GPU, or check the model's num_layers, num_kv_heads and head_dim",
                            block_bytes / GIB,
                            available / GIB,
                            gpu.display_name
                        ),
                    ));
                }
                if n > f64::from(MAX_GPU_BLOCKS) {
                    return Err(ConfigError::new(
                        "gpu_memory_utilization",
                        format!(
                            "the KV cache of {model_name} on {} at gpu_memory_utilization {util} would have {n:.0} blocks, more than the twin supports ({MAX_GPU_BLOCKS}); lower gpu_memory_utilization or set num_gpu_blocks_override",
                            gpu.display_name
                        ),
                    ));
                }
                (n as u32, false)
            }
        };
        // `num_gpu_blocks ≥ 2` on both paths above.
        let usable_blocks = num_gpu_blocks.saturating_sub(1);
        let usable_tokens = u64::from(usable_blocks) * u64::from(BLOCK_SIZE);
        if usable_tokens < u64::from(max_model_len) {
            // vLLM `check_enough_kv_cache_memory`: needed = cdiv(max_model_len, block) blocks.
            let needed_blocks = u64::from(max_model_len).div_ceil(u64::from(BLOCK_SIZE));
            let needed_gib = needed_blocks as f64 * block_bytes / GIB;
            let available_gib = f64::from(usable_blocks) * block_bytes / GIB;
            let (field, hint) = if overridden {
                (
                    "num_gpu_blocks_override",
                    format!(
                        "raise num_gpu_blocks_override to at least {} or decrease `max_model_len`",
                        needed_blocks + 1
                    ),
                )
            } else {
                (
                    "max_model_len",
                    "try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
                        .to_string(),
                )
            };
            return Err(ConfigError::new(
                field,
                format!(
                    "To serve at least one request with the model's max seq len ({max_model_len}), {needed_gib:.2} GiB KV cache is needed, which is larger than the available KV cache memory ({available_gib:.2} GiB, {usable_tokens} tokens). Based on the available memory, the estimated maximum model length is {usable_tokens}; {hint}"
                ),
            ));
        }

        let served_model_name = match &self.served_model_name {
            Some(s) if s.trim().is_empty() => {
                return Err(ConfigError::new(
                    "served_model_name",
                    "expected a non-empty name",
                ));
            }
            Some(s) => s.clone(),
            None => model.hf_name.clone(),
        };

        let async_scheduling = gpu.async_scheduling;
        Ok(EngineConfig {
            gpu_name,
            gpu,
            model_name,
            model,
            dtype,
            tensor_parallel: tp,
            gpu_memory_utilization: util,
            served_model_name,
            max_model_len,
            max_num_seqs,
            max_num_batched_tokens,
            block_size: BLOCK_SIZE,
            num_gpu_blocks,
            num_gpu_blocks_overridden: overridden,
            kv_bytes_per_token,
            weight_bytes_per_gpu,
            non_kv_bytes_per_gpu: non_kv,
            enable_prefix_caching: self.enable_prefix_caching,
            async_scheduling,
            seed: self.seed,
            time_scale: self.time_scale,
            step_jitter_sigma: 0.03,
            frontend_jitter_sigma: FRONTEND_JITTER_SIGMA,
            faults: FaultConfig {
                power_cap_w: self.power_cap_w,
                thermal_throttle: self.thermal_throttle,
                xid_at_s: self.xid_at_s,
            },
            frontend_cpu_queue: self.frontend_cpu_queue,
        })
    }
}
