//! dcgm-exporter exposition for the engine's GPUs (metrics.md §5; fixtures/dcgm/).
//!
//! Fields in `etc/default-counters.csv` order, then two extras the faults need
//! (`DCGM_FI_DEV_POWER_MGMT_LIMIT`, `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`) and the DCP profiling
//! fields. Units: clocks MHz, temperatures °C, power W (`%f`), energy mJ (counter), framebuffer
//! MiB, `DCGM_FI_DEV_*_UTIL` percent 0–100 (integers), `DCGM_FI_PROF_*` ratios 0–1 (`%f`), PCIe
//! bytes/s. Labels in dcgm-exporter's template order: `gpu, UUID, pci_bus_id, device, modelName,
//! Hostname, DCGM_FI_DRIVER_VERSION` (+ `err_code, err_msg` on XID).

use std::fmt::Write as _;

use super::Engine;
use super::prom::escape_label;

/// XID reported by the XID fault: 13, "Graphics Engine Exception".
pub const INJECTED_XID: u32 = 13;
/// Driver version label value.
pub const DRIVER_VERSION: &str = "580.105.08";
/// Hostname label value.
pub const HOSTNAME: &str = "headroom-sim";

enum V {
    I(i64),
    F(f64),
}

/// Renders dcgm-exporter text for every GPU of the engine's tensor-parallel group.
pub fn render(engine: &Engine, now_s: f64) -> String {
    let cfg = engine.config();
    let g = &cfg.gpu;
    let r = engine.telemetry().read(now_s);
    let tp = cfg.tensor_parallel;
    let busy = r.busy_ratio.clamp(0.0, 1.0);
    let sm_clock = if busy > 0.05 {
        g.boost_clock_mhz * r.clock_factor
    } else {
        g.idle_clock_mhz
    };
    let mem_temp = if g.has_memory_temp {
        r.temp_c + 6.0
    } else {
        0.0
    };
    let used = (g.memory_mib * cfg.gpu_memory_utilization + g.cuda_context_mib)
        .min(g.memory_mib - g.fb_reserved_mib)
        .round();
    let free = (g.memory_mib - g.fb_reserved_mib - used).max(0.0).round();
    let xid_on = cfg.faults.xid_at_s.is_some_and(|t| now_s >= t);
    let (xid, xid_msg) = if xid_on {
        (INJECTED_XID, "Graphics Engine Exception")
    } else {
        (0, "No Error")
    };
    let xid_code = xid.to_string();
    // Token ids in, logits-free sampled ids out: a few hundred kB/s while busy.
    let pcie_tx = (busy * 180_000.0).round();
    let pcie_rx = (busy * 250_000.0).round();

    let fields: Vec<(&str, &str, &str, V)> = vec![
        (
            "DCGM_FI_DEV_SM_CLOCK",
            "gauge",
            "SM clock frequency (in MHz).",
            V::I(sm_clock.round() as i64),
        ),
        (
            "DCGM_FI_DEV_MEM_CLOCK",
            "gauge",
            "Memory clock frequency (in MHz).",
            V::I(g.mem_clock_mhz.round() as i64),
        ),
        (
            "DCGM_FI_DEV_MEMORY_TEMP",
            "gauge",
            "Memory temperature (in C).",
            V::I(mem_temp.round() as i64),
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "gauge",
            "GPU temperature (in C).",
            V::I(r.temp_c.round() as i64),
        ),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            "gauge",
            "Power draw (in W).",
            V::F(r.power_w),
        ),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            V::I(r.energy_mj.floor() as i64),
        ),
        (
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "counter",
            "Total number of PCIe retries.",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_GPU_UTIL",
            "gauge",
            "GPU utilization (in %).",
            V::I((busy * 100.0).round() as i64),
        ),
        (
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "gauge",
            "Memory utilization (in %).",
            V::I((r.dram_active_ratio.clamp(0.0, 1.0) * 100.0).round() as i64),
        ),
        (
            "DCGM_FI_DEV_ENC_UTIL",
            "gauge",
            "Encoder utilization (in %).",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_DEC_UTIL",
            "gauge",
            "Decoder utilization (in %).",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_XID_ERRORS",
            "gauge",
            "Value of the last XID error encountered.",
            V::I(i64::from(xid)),
        ),
        (
            "DCGM_FI_DEV_FB_FREE",
            "gauge",
            "Framebuffer memory free (in MiB).",
            V::I(free as i64),
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "gauge",
            "Framebuffer memory used (in MiB).",
            V::I(used as i64),
        ),
        (
            "DCGM_FI_DEV_FB_RESERVED",
            "gauge",
            "Framebuffer memory reserved (in MiB).",
            V::I(g.fb_reserved_mib.round() as i64),
        ),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "gauge",
            "Whether remapping of rows has failed",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
            "gauge",
            "vGPU License status",
            V::I(0),
        ),
        (
            "DCGM_FI_DEV_POWER_MGMT_LIMIT",
            "gauge",
            "Power management limit (in W).",
            V::F(r.power_limit_w),
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "gauge",
            "Current clock event reasons (bitmask).",
            V::I(r.clock_event_reasons as i64),
        ),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gauge",
            "Ratio of time the graphics engine is active.",
            V::F(busy),
        ),
        (
            "DCGM_FI_PROF_SM_ACTIVE",
            "gauge",
            "Ratio of cycles an SM has at least 1 warp assigned.",
            V::F(0.9 * busy),
        ),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            V::F(r.tensor_active_ratio.clamp(0.0, 1.0)),
        ),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            V::F(r.dram_active_ratio.clamp(0.0, 1.0)),
        ),
        (
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "gauge",
            "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
            V::I(pcie_tx as i64),
        ),
        (
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            "gauge",
            "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
            V::I(pcie_rx as i64),
        ),
    ];

    let model = escape_label(&g.display_name);
    let mut out = String::with_capacity(8 * 1024 * tp as usize);
    for (name, kind, help, v) in &fields {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for i in 0..tp {
            let _ = write!(
                out,
                "{name}{{gpu=\"{i}\",UUID=\"{}\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{i}\",modelName=\"{model}\",Hostname=\"{HOSTNAME}\",DCGM_FI_DRIVER_VERSION=\"{DRIVER_VERSION}\"",
                gpu_uuid(cfg.seed, i),
                0x31 + i * 0x10
            );
            if *name == "DCGM_FI_DEV_XID_ERRORS" {
                let _ = write!(out, ",err_code=\"{xid_code}\",err_msg=\"{xid_msg}\"");
            }
            match v {
                V::I(x) => {
                    let _ = writeln!(out, "}} {x}");
                }
                V::F(x) => {
                    let _ = writeln!(out, "}} {x:.6}");
                }
            }
        }
    }
    out
}

/// A stable fake GPU UUID (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) from the seed and index.
pub fn gpu_uuid(seed: u64, index: u32) -> String {
    let a = super::kv::splitmix64(seed ^ 0x6770_7575_6964 ^ u64::from(index));
    let b = super::kv::splitmix64(a);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a as u16,
        (b >> 48) as u16,
        b & 0xffff_ffff_ffff
    )
}
