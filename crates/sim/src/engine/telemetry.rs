//! GPU power, temperature and clock model driven by per-step work (simulator.md §3.6).
//!
//! ```text
//! within a step:  u_mem = bytes/(BW_peak·t)               achieved share of peak bandwidth
//!                 dram  = min(1, u_mem/η_dram)             DCGM DRAM_ACTIVE: cycles the interface is busy
//!                 k     = flops/(P·MFU·t)                  compute intensity: share of the achievable rate
//!                 tensor = flops/(P_peak·t)                DCGM PIPE_TENSOR_ACTIVE
//! P_demand = P_idle + (TDP − P_idle)·min(1, 0.30 + 0.40·u_mem + 0.66·k)
//! P        = min(P_demand, power_limit)   → clock factor f_power, reason 0x4 (SW power cap)
//! dT/dt    = (T_amb + R_th·P − T)/τ
//! T > T_slowdown → f_thermal = max(0.5, 1 − 0.05·(T − T_slowdown)), reason 0x20 (SW thermal)
//! ```
//! Power rises with compute intensity: a compute-bound prefill runs the tensor pipes at their
//! achievable rate and draws the board limit, as measured for the prompt phase on A100/H100
//! (Splitwise, ISCA 2024); a memory-bound decode draws less. Between steps the GPU draws
//! `P_idle`. Reported power, utilisations and activities are exponential moving averages with a
//! 1 s time constant (NVML averages power over ~1 s). Temperature integrates exactly for
//! piecewise-constant power. The clock factor that the next step runs at is
//! `min(f_power, f_thermal)`; [`super::timing::StepModel`] applies it.

use super::spec::EngineConfig;
use super::timing::{StepCost, StepModel};

/// Time constant of the reported averages (s).
pub const AVG_TAU_S: f64 = 1.0;
/// NVML clock-event reason: GPU idle.
pub const REASON_GPU_IDLE: u64 = 0x1;
/// NVML clock-event reason: software power cap.
pub const REASON_SW_POWER_CAP: u64 = 0x4;
/// NVML clock-event reason: software thermal slowdown.
pub const REASON_SW_THERMAL: u64 = 0x20;
/// `η_dram`: the share of the peak data rate a DRAM interface moves in the cycles DCGM counts it
/// active (`DCGM_FI_PROF_DRAM_ACTIVE`: "ratio of cycles the device memory interface is active
/// sending or receiving data"); refresh, row switches and read/write turnarounds keep it below 1.
/// Fit on the seed guide's A10G decode (0.804 at c = 32, CALIBRATION.md); one point, not validated
/// elsewhere.
pub const DRAM_ACTIVE_EFFICIENCY: f64 = 0.76;
/// Share of the power range drawn by a busy GPU doing neither (clocks up, SMs issuing).
const POWER_BUSY_FLOOR: f64 = 0.30;
/// Share of the power range per unit of achieved bandwidth (`u_mem`).
const POWER_PER_MEM: f64 = 0.40;
/// Share of the power range per unit of compute intensity (`k`): `0.30 + 0.66` reaches the
/// board limit for a compute-bound step even with little DRAM traffic.
const POWER_PER_COMPUTE: f64 = 0.66;
/// Clock reduction per °C above the slowdown temperature.
const THERMAL_SLOPE_PER_C: f64 = 0.05;

/// Telemetry state of one GPU of the engine (all GPUs of a TP group see the same work).
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    last_s: f64,
    temp_c: f64,
    energy_j: f64,
    avg_busy: f64,
    avg_mem: f64,
    avg_comp: f64,
    avg_power_w: f64,
    f_power: f64,
    f_thermal: f64,
    power_capped: bool,
    idle_w: f64,
    tdp_w: f64,
    limit_w: f64,
    ambient_c: f64,
    r_th: f64,
    tau_s: f64,
    slowdown_c: f64,
}

fn decay(dt: f64, tau: f64) -> f64 {
    if dt <= 0.0 { 1.0 } else { (-dt / tau).exp() }
}

impl Telemetry {
    /// Idle GPU at thermal equilibrium. The thermal fault raises ambient by 15 °C and the thermal
    /// resistance by 1.6× (a failed fan / blocked inlet).
    pub fn new(cfg: &EngineConfig) -> Telemetry {
        let g = &cfg.gpu;
        let (ambient_c, r_th) = if cfg.faults.thermal_throttle {
            (g.ambient_c + 15.0, g.thermal_resistance_c_per_w * 1.6)
        } else {
            (g.ambient_c, g.thermal_resistance_c_per_w)
        };
        let limit_w = cfg.faults.power_cap_w.unwrap_or(g.tdp_w).min(g.tdp_w);
        Telemetry {
            last_s: 0.0,
            temp_c: ambient_c + r_th * g.idle_w,
            energy_j: 0.0,
            avg_busy: 0.0,
            avg_mem: 0.0,
            avg_comp: 0.0,
            avg_power_w: g.idle_w,
            f_power: 1.0,
            f_thermal: 1.0,
            power_capped: false,
            idle_w: g.idle_w,
            tdp_w: g.tdp_w,
            limit_w,
            ambient_c,
            r_th,
            tau_s: g.thermal_tau_s,
            slowdown_c: g.slowdown_c,
        }
    }

    /// Integrates an interval of constant power `p_w` and activities.
    fn integrate(&mut self, dt: f64, p_w: f64, busy: f64, mem: f64, comp: f64) {
        if dt <= 0.0 {
            return;
        }
        let k = decay(dt, AVG_TAU_S);
        self.avg_busy = busy + (self.avg_busy - busy) * k;
        self.avg_mem = mem + (self.avg_mem - mem) * k;
        self.avg_comp = comp + (self.avg_comp - comp) * k;
        self.avg_power_w = p_w + (self.avg_power_w - p_w) * k;
        let t_eq = self.ambient_c + self.r_th * p_w;
        self.temp_c = t_eq + (self.temp_c - t_eq) * decay(dt, self.tau_s);
        self.energy_j += p_w * dt;
        self.f_thermal = if self.temp_c > self.slowdown_c {
            (1.0 - THERMAL_SLOPE_PER_C * (self.temp_c - self.slowdown_c)).max(0.5)
        } else {
            1.0
        };
    }

    /// Idle from the last recorded time up to `now_s`.
    pub fn advance_idle(&mut self, now_s: f64) {
        if now_s > self.last_s {
            let dt = now_s - self.last_s;
            self.integrate(dt, self.idle_w, 0.0, 0.0, 0.0);
            self.last_s = now_s;
            if self.power_capped && dt > AVG_TAU_S {
                self.power_capped = false;
                self.f_power = 1.0;
            }
        }
    }

    /// A step of `cost` running over `[start_s, end_s]` on the engine clock.
    pub fn record_step(
        &mut self,
        start_s: f64,
        end_s: f64,
        cost: &StepCost,
        model: &StepModel,
        _cfg: &EngineConfig,
    ) {
        self.advance_idle(start_s);
        let dt = end_s - start_s;
        if dt <= 0.0 || cost.duration_s <= 0.0 {
            return;
        }
        let t = cost.duration_s;
        let u_mem = ((cost.read_bytes + cost.write_bytes) / (model.peak_bw() * t)).min(1.0);
        let dram_active = (u_mem / DRAM_ACTIVE_EFFICIENCY).min(1.0);
        let u_comp = (cost.flops / (model.peak_flops() * t)).min(1.0);
        let intensity = (cost.flops / (model.achievable_flops() * t)).min(1.0);
        let demand = self.idle_w
            + (self.tdp_w - self.idle_w)
                * (POWER_BUSY_FLOOR + POWER_PER_MEM * u_mem + POWER_PER_COMPUTE * intensity)
                    .min(1.0);
        let p = demand.min(self.limit_w);
        // Proportional clock controller toward the power limit.
        let f_now = self.f_power;
        if demand > self.limit_w {
            self.f_power =
                (f_now * (self.limit_w - self.idle_w) / (demand - self.idle_w)).clamp(0.3, 1.0);
            self.power_capped = true;
        } else if self.f_power < 1.0 {
            let headroom = (self.limit_w - self.idle_w) / (demand - self.idle_w).max(1e-9);
            self.f_power = (f_now * headroom.min(1.05)).min(1.0);
            self.power_capped = self.f_power < 1.0;
        }
        self.integrate(dt, p, 1.0, dram_active, u_comp);
        self.last_s = end_s;
    }

    /// Clock factor the next step runs at (1.0 = boost clock).
    pub fn clock_factor(&self) -> f64 {
        self.f_power.min(self.f_thermal)
    }

    /// Values as an exporter would read them at `now_s` (idle decay applied, state unchanged).
    pub fn read(&self, now_s: f64) -> TelemetryReading {
        let mut t = self.clone();
        t.advance_idle(now_s);
        let mut reasons = 0;
        if t.avg_busy < 0.05 {
            reasons |= REASON_GPU_IDLE;
        }
        if t.f_power < 1.0 || t.power_capped {
            reasons |= REASON_SW_POWER_CAP;
        }
        if t.f_thermal < 1.0 {
            reasons |= REASON_SW_THERMAL;
        }
        TelemetryReading {
            power_w: t.avg_power_w,
            energy_mj: t.energy_j * 1000.0,
            temp_c: t.temp_c,
            busy_ratio: t.avg_busy,
            dram_active_ratio: t.avg_mem,
            tensor_active_ratio: t.avg_comp,
            clock_factor: t.clock_factor(),
            clock_event_reasons: reasons,
            power_limit_w: t.limit_w,
        }
    }
}

/// A snapshot of the telemetry (units in the names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TelemetryReading {
    /// Board power averaged over ~1 s (W).
    pub power_w: f64,
    /// Energy since engine start (mJ).
    pub energy_mj: f64,
    /// GPU temperature (°C).
    pub temp_c: f64,
    /// Fraction of time a kernel was running (0–1).
    pub busy_ratio: f64,
    /// DRAM activity as DCGM defines it: the share of cycles the memory interface is sending or
    /// receiving data (0–1), above the achieved share of peak bandwidth.
    pub dram_active_ratio: f64,
    /// Tensor-pipe activity (0–1).
    pub tensor_active_ratio: f64,
    /// SM clock as a fraction of boost (0.3–1).
    pub clock_factor: f64,
    /// NVML clock-event reasons bitmask.
    pub clock_event_reasons: u64,
    /// Effective power limit (W).
    pub power_limit_w: f64,
}
