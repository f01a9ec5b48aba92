//! `headroom plan`: what-if capacity planning on the engine twin's virtual clock.
//!
//! A plan is a sweep: the same phases, search, judgement and run directory as `headroom sweep`
//! (`headroom_sweep`), with each level measured by [`twin::TwinLevels`] on a fresh twin
//! engine whose clock jumps from step to step instead of waiting for it. Hours of simulated
//! traffic per level then cost seconds of CPU, every verdict can be certain, and the result is
//! deterministic for a seed.

pub mod bounds;
pub mod calibrate;
pub mod twin;
pub mod worst;
