//! From one `slo.yaml` ([`headroom_core::slo::SloFile`]) to everything an SRE who owns alerts
//! needs: Prometheus recording rules and multi-window, multi-burn-rate alerts ([`rules()`]), a
//! Grafana dashboard laid out by the six analysis steps ([`dashboard()`]), an autoscaling
//! trigger ([`autoscale()`]), error-budget status ([`budget_report`], arithmetic in [`budget`])
//! and an OpenSLO v1 importer ([`import_openslo`]).
//!
//! Each generator is a pure function `(&SloFile, &Options) -> Result<Rendered, SloError>`; the
//! only I/O in this crate is [`prom_api`] (PromQL over the Prometheus HTTP API), used by
//! [`budget_report`] (async). The `headroom slo …` commands in the CLI call these functions and
//! print [`Rendered::text`] to stdout and [`Rendered::warnings`] to stderr.
//!
//! # How an objective becomes an SLI
//! Every objective is an *event ratio* with a target (SRE Workbook ch. 2 and 5):
//! - a latency objective `ttft: {p95: 250ms}` reads "95 % of TTFT observations are at most
//!   250 ms": good events are `…_bucket{le="0.25"}`, all events are `…_count`, the target is
//!   0.95 and the error budget 0.05 (the same reading as Sloth's and Pyrra's latency SLOs);
//! - `error_rate: 0.5%` reads "at most 0.5 % of finished requests end in `abort` or `error`
//!   (vLLM `finished_reason`) or in an HTTP 5xx": target 0.995, budget 0.005.
//!
//! `budget.window` is the SLO period (default `30d`) from which the burn-rate factors are
//! computed, and `budget.freeze_at` drives the policy decision. `budget.target` does not enter
//! the rules or the budget: each objective already carries its own target, as above.
//!
//! # Thresholds and buckets
//! A classic histogram counts events at or below each bound, so a latency threshold must be a
//! bucket bound of the histogram it is measured on (Sloth #506; Pyrra validates the same). vLLM's
//! bounds are fixed ([`catalogue`]): e.g. TTFT has 0.25 s and 0.5 s but not 0.3 s, and queue time
//! starts at 0.3 s. Off-grid thresholds are refused with the nearest bounds, or snapped on
//! request ([`OffBucket`]), or measured on the gateway's histograms ([`LatencySource::Gateway`]),
//! whose buckets include every threshold.
//!
//! # Request class → series
//! See [`sli::Selectors`]: with vLLM alone a class is a served model (`model_name`); the label
//! and the whole matcher list are configurable per class.

pub mod autoscale;
pub mod budget;
pub mod catalogue;
pub mod check;
pub mod dashboard;
pub mod openslo;
pub mod prom_api;
pub mod promql;
pub mod rules;
pub mod sli;
pub mod tiers;

pub use autoscale::{Autoscale, AutoscaleKind, AutoscaleOptions, autoscale};
pub use budget::{BudgetOptions, BudgetStatus, Decision, budget_report, budget_status};
pub use dashboard::{DashboardOptions, dashboard};
pub use openslo::{ImportOptions, import_openslo, to_slo_yaml};
pub use rules::{RulesOptions, rules};
pub use sli::{LatencySource, OffBucket, Selectors};
pub use tiers::{BurnTier, DeadTiers};

/// Text generated for the user (YAML or JSON), plus warnings to print on stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The file's contents.
    pub text: String,
    /// Things the user should know (a dead tier skipped, a threshold snapped to a bucket).
    pub warnings: Vec<String>,
}

/// Why a generator, the budget query or the importer refused.
///
/// Messages name the field (`objectives.chat.ttft.p95`, `budget.window`, `spec.objectives[0]`)
/// and say what was expected; the caller prefixes the file name.
#[derive(Debug, thiserror::Error)]
pub enum SloError {
    /// A field of the SLO file or of the options cannot be turned into rules.
    #[error("{field}: {message}")]
    Invalid {
        /// Dotted path of the field, e.g. `objectives.chat.ttft.p95`.
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A class named in the options is not in the SLO file.
    #[error("{field}: unknown class `{class}`; the SLO file defines {known}")]
    UnknownClass {
        /// Where the class was named (e.g. `classes`, `selectors.overrides`).
        field: String,
        /// The unknown name.
        class: String,
        /// The classes the file defines, comma-separated.
        known: String,
    },
    /// The Prometheus HTTP API failed or answered something unexpected.
    #[error("Prometheus at {url}: {message}")]
    Prometheus {
        /// Base URL queried.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A generated expression failed the PromQL parser: a bug in this crate, reported rather
    /// than written to a rule file.
    #[error("generated PromQL does not parse ({message}): {expr}")]
    GeneratedPromql {
        /// The expression.
        expr: String,
        /// The parser's message.
        message: String,
    },
}

impl SloError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> SloError {
        SloError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}
