//! `headroom compare BASELINE CANDIDATE`: the regression gate between two sweeps.

use anyhow::{Result, bail};
use clap::Args;
use headroom_sweep::compare::{Gate, compare, parse_latency_allowances, render_text};
use headroom_sweep::compare_budget::{BudgetGate, BudgetObjective, apply_budget};
use headroom_sweep::compare_html::render_html;
use headroom_sweep::run_dir::Run;
use std::path::PathBuf;

/// Arguments of `headroom compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directory of the baseline (the configuration in production).
    pub baseline: PathBuf,
    /// Run directory of the candidate (the change to promote).
    pub candidate: PathBuf,
    /// Largest capacity drop to promote, as a share (10%). A drop beyond it that the runs'
    /// uncertainty cannot prove is INCONCLUSIVE; one the bands prove is a REGRESSION.
    #[arg(long, value_name = "SHARE")]
    pub max_capacity_drop: Option<String>,
    /// Largest latency increase to promote per objective, at every level both runs passed:
    /// `ttft_p95=10%,itl_p95=5ms`. An increase whose confidence interval lies wholly beyond it
    /// is a REGRESSION; one the interval cannot rule out is INCONCLUSIVE.
    #[arg(long, value_name = "LIST")]
    pub max_latency_increase: Option<String>,
    /// Compare runs of different workloads or SLOs anyway (their capacities then measure
    /// different things).
    #[arg(long)]
    pub allow_different_workload: bool,
    /// Prometheus-compatible base URL to read the error budget from (as `headroom slo budget`
    /// does, with its default class selectors): an objective past the SLO file's
    /// `budget.freeze_at` holds a candidate that is not strictly better on it (decision HELD,
    /// exit 1). Needs --slo.
    #[arg(long, value_name = "PROMETHEUS_URL", requires = "slo")]
    pub budget_from: Option<String>,
    /// The SLO file whose objectives and `budget:` block the error budget is read for (with
    /// --budget-from).
    #[arg(long, value_name = "FILE", requires = "budget_from")]
    pub slo: Option<PathBuf>,
    /// Output format; `html` is one self-contained page with a chart per latency objective.
    #[arg(long, default_value = "text", value_parser = ["text", "md", "json", "html"])]
    pub format: String,
}

/// The error budget of every objective of `slo_path`, from the Prometheus at `url`.
async fn read_budget(url: &str, slo_path: &std::path::Path) -> Result<BudgetGate> {
    use headroom_slo::budget::{BudgetOptions, Decision, fetch_budget, policy};
    let text = headroom_core::input_file::read_to_string(
        slo_path,
        headroom_core::input_file::MAX_CONFIG_BYTES,
    )
    .map_err(|e| anyhow::anyhow!("{}: cannot read file: {e}", slo_path.display()))?;
    let slo = headroom_core::SloFile::parse(&text, slo_path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let named = |e: headroom_slo::SloError| anyhow::anyhow!("--budget-from: {e}");
    let (_, freeze_at) = policy(&slo).map_err(named)?;
    let opts = BudgetOptions::default();
    let prom = headroom_slo::prom_api::PromClient::new(url, opts.timeout).map_err(named)?;
    let (statuses, warnings) = fetch_budget(&prom, &slo, &opts).await.map_err(named)?;
    for w in warnings {
        eprintln!("headroom: budget: {w}");
    }
    Ok(BudgetGate {
        source: headroom_core::run::redact_url(url),
        freeze_at,
        objectives: statuses
            .iter()
            .map(|s| BudgetObjective {
                class: s.class.clone(),
                objective: s.objective.clone(),
                consumed: s.consumed,
                state: s.verdict(),
                past_freeze: matches!(s.decision, Decision::FreezeTuning | Decision::Exhausted),
                strictly_better: None,
                why: String::new(),
            })
            .collect(),
    })
}

/// Runs the comparison; exit 0 promote, 1 regression or held, 2 inconclusive (bad input also exits 2,
/// from `main`).
pub async fn run(a: CompareArgs) -> Result<i32> {
    let max_capacity_drop = match &a.max_capacity_drop {
        Some(s) => Some(
            headroom_core::slo::parse_ratio(s)
                .ok()
                .filter(|x| (0.0..1.0).contains(x))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--max-capacity-drop {s}: expected a share below 100 %, e.g. 10%"
                    )
                })?,
        ),
        None => None,
    };
    let max_latency_increase = match &a.max_latency_increase {
        Some(s) => parse_latency_allowances(s)
            .map_err(|e| anyhow::anyhow!("--max-latency-increase: {e}"))?,
        None => Default::default(),
    };
    if a.baseline == a.candidate {
        bail!(
            "{}: the baseline and the candidate are the same run directory",
            a.baseline.display()
        );
    }
    let base = Run::open(&a.baseline)?;
    let cand = Run::open(&a.candidate)?;
    let gate = Gate {
        max_capacity_drop,
        max_latency_increase,
        allow_different_workload: a.allow_different_workload,
    };
    let mut c = compare(&base, &cand, &gate)?;
    if let (Some(url), Some(slo)) = (&a.budget_from, &a.slo) {
        apply_budget(&mut c, read_budget(url, slo).await?);
    }
    match a.format.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&c)?),
        "md" => print!("{}", render_text(&c, true)),
        "html" => print!("{}", render_html(&c, &base, &cand)),
        _ => print!("{}", render_text(&c, false)),
    }
    Ok(c.decision.exit_code())
}
