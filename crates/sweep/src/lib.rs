//! The sweep: for each phase (each request class alone, then the mix), find the highest load
//! that meets every objective.
//!
//! - [`search`]: which level next (bracket, then bisect);
//! - [`policy`]: the windows and search of the workload, the embedded demo or `--quick`;
//! - [`evaluate`]: client-side objectives of a level (PASS / FAIL / INCONCLUSIVE);
//! - [`server_view`]: the engine's account of a level and its reconciliation with the client;
//! - [`controller`]: the loop that runs levels, scrapes, judges and writes results;
//! - [`compare`]: two run directories side by side, and whether the change is safe to promote;
//! - [`run_dir`]: the run directory's layout (from `core`) and its typed reads.

pub mod compare;
pub mod compare_budget;
pub mod compare_html;
pub mod controller;
pub mod evaluate;
pub mod policy;
pub mod run_dir;
pub mod search;
pub mod server_view;

#[cfg(test)]
mod tests;
