//! `headroom sim`: serve the engine twin on loopback (vLLM's defaults: 127.0.0.1:8000).

use anyhow::{Context, Result};
use clap::Args;
use headroom_sim::SimSpec;
use headroom_sim::server::{Faults, ServerConfig, serve};
use std::net::IpAddr;
use std::path::PathBuf;

/// Arguments of `headroom sim`. Flags mirror vLLM's where vLLM has one.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// GPU preset (a10g, l4, l40s, a100-40gb, a100-80gb, a100-80gb-pcie, h100-sxm, h100-pcie, h200, b200, rtx-4090, mi300x).
    #[arg(long, default_value = "a10g")]
    pub gpu: String,
    /// Model preset (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b, llama-3.1-8b, llama-3.1-70b, mistral-7b).
    #[arg(long, default_value = "qwen2.5-3b")]
    pub model: String,
    /// Weight precision: bf16, fp8 or int4.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Tensor-parallel size: 1, 2, 4 or 8.
    #[arg(long = "tensor-parallel-size", default_value_t = 1)]
    pub tensor_parallel: u32,
    /// Share of GPU memory vLLM may use (sizes the KV pool).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// Context limit in tokens (default: the model's).
    #[arg(long)]
    pub max_model_len: Option<u32>,
    /// Largest batch of sequences per step (vLLM --max-num-seqs).
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Token budget per step (vLLM --max-num-batched-tokens).
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Force the number of KV blocks (vLLM --num-gpu-blocks-override).
    #[arg(long)]
    pub num_gpu_blocks_override: Option<u32>,
    /// Disable prefix caching (vLLM --no-enable-prefix-caching).
    #[arg(long = "no-enable-prefix-caching")]
    pub no_prefix_caching: bool,
    /// Model name served in the API (default: the preset's HF name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Scale of step times: 1 = real time, 0 = as fast as possible (zero-latency mode).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// GPU power cap in watts (throttles clocks when reached).
    #[arg(long)]
    pub power_cap_w: Option<f64>,
    /// Simulate thermal throttling.
    #[arg(long)]
    pub thermal_throttle: bool,
    /// Append vLLM's per-request `metrics` (queue_time_ms) to the final streamed chunk.
    #[arg(long)]
    pub enable_per_request_metrics: bool,
    /// Raise an XID error this many seconds after start.
    #[arg(long)]
    pub xid_at_s: Option<f64>,
    /// Whole engine spec as YAML (fields as the flags, snake_case); flags given explicitly win.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Fault injection as YAML (error_500_rate, error_503_rate, slow_start_rate, slow_start_s,
    /// stall_rate, stall_s, disconnect_rate, seed).
    #[arg(long)]
    pub faults: Option<PathBuf>,
    /// Fraction of requests answered with HTTP 500.
    #[arg(long)]
    pub error_500_rate: Option<f64>,
    /// Fraction of streams cut mid-stream without [DONE].
    #[arg(long)]
    pub disconnect_rate: Option<f64>,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// API port (vLLM's default 8000; 0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// dcgm-exporter-compatible port (default: API port + 1).
    #[arg(long)]
    pub dcgm_port: Option<u16>,
    /// Require this API key on every request (`Authorization: Bearer KEY`); better given through
    /// the environment variable than on the command line.
    #[arg(long, env = "HEADROOM_SIM_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// 1-based (line, column) of the value of top-level key `key` in a block-style YAML `text`
/// (`key: value` at column 1); `None` when the key is not written that way.
fn top_level_value(text: &str, key: &str) -> Option<(u64, u64)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let rest = line.strip_prefix(key)?.trim_start_matches([' ', '\t']);
        let value = rest.strip_prefix(':')?;
        let col = line.len() - value.trim_start().len() + 1;
        Some((i as u64 + 1, col as u64))
    })
}

impl SimArgs {
    /// The engine spec these flags describe (the `--config` file first, flags over it).
    pub fn spec(&self) -> Result<SimSpec> {
        let mut spec: SimSpec = match &self.config {
            Some(p) => {
                let mut s: SimSpec = headroom_core::yaml::load_yaml(p)?;
                // Preset files a config names are found beside it, as a workload's datasets are.
                let base = p.parent().unwrap_or(std::path::Path::new("."));
                for f in [&mut s.custom_gpu_file, &mut s.custom_model_file]
                    .into_iter()
                    .flatten()
                {
                    if f.is_relative() {
                        *f = base.join(&*f);
                    }
                }
                s
            }
            None => SimSpec::default(),
        };
        let d = SimSpec::default();
        if self.config.is_none() || self.gpu != d.gpu {
            spec.gpu = self.gpu.clone();
        }
        if self.config.is_none() || self.model != d.model {
            spec.model = self.model.clone();
        }
        if self.config.is_none() || self.dtype != d.dtype {
            spec.dtype = self.dtype.clone();
        }
        if self.tensor_parallel != 1 {
            spec.tensor_parallel = self.tensor_parallel;
        }
        // `!=` on purpose: a NaN flag differs from the default and must reach `resolve()`, which
        // refuses it, instead of silently meaning "the default".
        if self.gpu_memory_utilization.to_bits() != d.gpu_memory_utilization.to_bits() {
            spec.gpu_memory_utilization = self.gpu_memory_utilization;
        }
        spec.max_model_len = self.max_model_len.or(spec.max_model_len);
        spec.max_num_seqs = self.max_num_seqs.or(spec.max_num_seqs);
        spec.max_num_batched_tokens = self.max_num_batched_tokens.or(spec.max_num_batched_tokens);
        spec.num_gpu_blocks_override = self
            .num_gpu_blocks_override
            .or(spec.num_gpu_blocks_override);
        if self.no_prefix_caching {
            spec.enable_prefix_caching = false;
        }
        spec.served_model_name = self.served_model_name.clone().or(spec.served_model_name);
        if self.seed != 0 {
            spec.seed = self.seed;
        }
        if self.time_scale.to_bits() != d.time_scale.to_bits() {
            spec.time_scale = self.time_scale;
        }
        spec.power_cap_w = self.power_cap_w.or(spec.power_cap_w);
        spec.thermal_throttle |= self.thermal_throttle;
        spec.enable_per_request_metrics |= self.enable_per_request_metrics;
        spec.xid_at_s = self.xid_at_s.or(spec.xid_at_s);
        if let Err(e) = spec.resolve() {
            // A value from the --config file: point at its line there.
            if let Some(p) = &self.config
                && e.located.is_none()
                && let Ok(text) = headroom_core::input_file::read_to_string(
                    p,
                    headroom_core::input_file::MAX_CONFIG_BYTES,
                )
                && let Some(at) = top_level_value(&text, &e.field)
            {
                let short = format!("invalid `{}`: {}", e.field, e.message);
                return Err(anyhow::anyhow!(
                    "{}",
                    headroom_core::yaml::YamlError::at(p, &text, Some(at), short)
                ));
            }
            return Err(anyhow::anyhow!("{e}"));
        }
        Ok(spec)
    }

    /// The fault plan (the `--faults` file first, flags over it).
    pub fn faults(&self) -> Result<Faults> {
        let mut f: Faults = match &self.faults {
            Some(p) => headroom_core::yaml::load_yaml(p)?,
            None => Faults::default(),
        };
        if let Some(r) = self.error_500_rate {
            f.error_500_rate = r;
        }
        if let Some(r) = self.disconnect_rate {
            f.disconnect_rate = r;
        }
        Ok(f)
    }
}

/// Runs the twin until Ctrl-C.
pub async fn run(args: SimArgs) -> Result<()> {
    let cfg = ServerConfig {
        host: args.host,
        port: args.port,
        dcgm_port: args.dcgm_port,
        spec: args.spec()?,
        faults: args.faults()?,
        api_key: args.api_key.clone(),
        first_chunk_probe: None,
    };
    let mut stop =
        crate::StopSignal::install().context("cannot install the Ctrl-C and SIGTERM handlers")?;
    let handle = serve(cfg).await.with_context(|| {
        format!(
            "cannot start the engine twin on {}:{}",
            args.host, args.port
        )
    })?;
    eprintln!(
        "headroom sim: OpenAI API on http://{} (metrics at /metrics), dcgm-exporter on http://{}/metrics. Ctrl-C or SIGTERM stops.",
        handle.api_addr, handle.dcgm_addr
    );
    stop.recv().await;
    handle.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::SimArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn spec_err(args: &[&str]) -> String {
        let t = T::try_parse_from(std::iter::once("sim").chain(args.iter().copied())).unwrap();
        match t.sim.spec() {
            Ok(_) => panic!("accepted {args:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    /// A non-finite or out-of-range float flag is refused with the field's name, never taken
    /// silently as the default.
    #[test]
    fn non_finite_float_flags_are_refused_not_ignored() {
        for (args, field) in [
            (&["--time-scale", "nan"][..], "time_scale"),
            (&["--time-scale=-1"], "time_scale"),
            (&["--time-scale", "inf"], "time_scale"),
            (
                &["--gpu-memory-utilization", "nan"],
                "gpu_memory_utilization",
            ),
            (
                &["--gpu-memory-utilization", "1.5"],
                "gpu_memory_utilization",
            ),
            (&["--power-cap-w", "nan"], "power_cap_w"),
            (&["--xid-at-s=-3"], "xid_at_s"),
        ] {
            let e = spec_err(args);
            assert!(e.contains(field), "{args:?}: {e}");
        }
        // The defaults themselves are fine.
        assert!(T::try_parse_from(["sim"]).unwrap().sim.spec().is_ok());
    }

    /// A bad value in the --config file is shown at its line and column there, with the line
    /// quoted; a field the file does not write keeps the short form.
    #[test]
    fn a_bad_config_value_is_located_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sim.yaml");
        std::fs::write(&p, "gpu: a10g\n# memory\ngpu_memory_utilization:   1.5\n").unwrap();
        let e = spec_err(&["--config", p.to_str().unwrap()]);
        let want = format!("{}:3:27: invalid `gpu_memory_utilization`", p.display());
        assert!(e.starts_with(&want), "{e}");
        assert!(e.contains("gpu_memory_utilization:   1.5"), "{e}");
        assert_eq!(super::top_level_value("a: 1\nb:\t2\n", "b"), Some((2, 4)));
        assert_eq!(super::top_level_value("ab: 1\n", "a"), None);
        assert_eq!(super::top_level_value("  a: 1\n", "a"), None);
    }
}
