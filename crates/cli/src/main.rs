//! The `headroom` binary: argument parsing and wiring only. Each subcommand lives in its own
//! module and calls into the library crates.

mod diagnose_cmd;
mod gateway_cmd;
mod sim_cmd;
mod slo_cmd;
mod sweep_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Load-test, diagnose and guard self-hosted LLM inference against SLOs.
#[derive(Debug, Parser)]
#[command(name = "headroom", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Find, per request class and for the mix, the highest load meeting every SLO.
    Sweep(sweep_cmd::SweepArgs),
    /// Serve the vLLM-compatible engine twin (no GPU needed).
    Sim(sim_cmd::SimArgs),
    /// Judge a live server, a Prometheus range or saved scrapes against the SLO: the six-step
    /// analysis, findings with stable ids, a verdict per objective. Exit 0 when rendered, 1 with
    /// --fail-on-breach when a verdict is FAIL, 2 on bad input.
    Diagnose(diagnose_cmd::DiagnoseArgs),
    /// Rules, burn-rate alerts, dashboard, autoscaling trigger, error budget and OpenSLO import
    /// from one slo.yaml.
    Slo(slo_cmd::SloArgs),
    /// SLO-measuring reverse proxy: per-class TTFT/ITL/E2E at the request boundary, admission.
    Gateway(gateway_cmd::GatewayArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let argv: Vec<String> = std::env::args().collect();
    let result = rt.block_on(async {
        match cli.command {
            Command::Sim(a) => sim_cmd::run(a).await.map(|()| 0),
            Command::Sweep(a) => sweep_cmd::run(a, argv).await,
            Command::Diagnose(a) => diagnose_cmd::run(a).await,
            Command::Slo(a) => slo_cmd::run(a).await,
            Command::Gateway(a) => gateway_cmd::run(a).await.map(|()| 0),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
