//! The `headroom` binary: argument parsing and wiring only. Each subcommand lives in its own
//! module and calls into the library crates.

mod compare_cmd;
mod diagnose_cmd;
mod duration_arg;
mod gateway_cmd;
mod plan_cmd;
mod report_cmd;
mod sim_cmd;
mod slo_cmd;
mod sweep_cmd;
mod sweep_progress;
mod top;
mod workload_as_run;

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
    /// Capacity planning: the sweep on the engine twin's virtual clock (hours of simulated
    /// traffic per level in seconds), for any GPU preset, dtype and parallelism; --peak gives
    /// the replicas, --compare-gpus one table for several GPUs.
    Plan(plan_cmd::PlanArgs),
    /// Compare two sweeps' run directories: what changed, capacity with its uncertainty, and
    /// each objective's percentile with a confidence interval on the difference. Exit 0 promote,
    /// 1 regression, 2 inconclusive or bad input.
    Compare(compare_cmd::CompareArgs),
    /// Render a run directory's reports (levels.csv, report.md, report.html) again from its
    /// results.json, with this version's renderers.
    Report(report_cmd::ReportArgs),
    /// Serve the vLLM-compatible engine twin (no GPU needed).
    Sim(sim_cmd::SimArgs),
    /// Judge a live server, a Prometheus range or saved scrapes against the SLO: the six-step
    /// analysis, findings with stable ids, a verdict per objective. Exit 0 when rendered, 1 with
    /// --fail-on-breach when a verdict is FAIL, 2 on bad input.
    Diagnose(diagnose_cmd::DiagnoseArgs),
    /// Rules, burn-rate alerts, dashboard, autoscaling trigger, error budget and OpenSLO import
    /// from one slo.yaml.
    Slo(slo_cmd::SloArgs),
    /// SLO-measuring reverse proxy: per-class TTFT/ITL/E2E at the request boundary, and
    /// per-class admission control (see --print-config).
    Gateway(gateway_cmd::GatewayArgs),
    /// A live view of a server's SLO per class over sliding windows: each objective against
    /// its threshold, the burn rate, the engine's phases, KV cache, queue and the GPU witness.
    /// Plain `key=value` lines when stdout is no terminal (or with --plain).
    Top(top::TopArgs),
}

/// The process's stop request: Ctrl-C (SIGINT) or, on Unix, SIGTERM (what `kill`, `timeout` and
/// Kubernetes send).
///
/// The handlers are installed by [`StopSignal::install`], before the command announces that it
/// is up: a signal that arrives between the announcement and the first wait is then still a
/// clean stop, not the default action that kills the process on the spot.
pub(crate) struct StopSignal {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Installs the handlers now. Call inside the runtime.
    ///
    /// # Errors
    /// When the signal handlers cannot be installed.
    pub(crate) fn install() -> std::io::Result<StopSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignal {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(StopSignal {})
        }
    }

    /// Resolves at the next stop request with the signal's name for the message.
    pub(crate) async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => "Ctrl-C",
                _ = self.term.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// Exit status when the reader of stdout went away (`headroom slo dashboard | head`): 128 +
/// SIGPIPE, what a shell reports for a tool the signal ended, without a panic or a message.
pub(crate) const BROKEN_PIPE_STATUS: i32 = 141;

/// Writes `text` to stdout and flushes it. When stdout is a pipe whose reader has closed, the
/// process ends quietly with [`BROKEN_PIPE_STATUS`]: there is no one left to tell.
///
/// # Errors
/// Any other write error (a full disk behind a redirection).
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(BROKEN_PIPE_STATUS)
        }
        r => r,
    }
}

/// Makes a `print!` to a closed stdout pipe, anywhere in the process, end it quietly with
/// [`BROKEN_PIPE_STATUS`] instead of the panic (exit 101) that Rust's `print!` raises: Rust
/// ignores SIGPIPE, so the write fails with EPIPE. The signal itself is not restored, because
/// the gateway, the twin and the sweep's client write to sockets, where a peer that hung up
/// must be an error, not the end of the process.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // std's message: "failed printing to stdout: Broken pipe (os error 32)".
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
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
            Command::Plan(a) => plan_cmd::run(a, argv).await,
            Command::Diagnose(a) => diagnose_cmd::run(a).await,
            Command::Compare(a) => compare_cmd::run(a).await,
            Command::Report(a) => report_cmd::run(a).await,
            Command::Slo(a) => slo_cmd::run(a).await,
            Command::Gateway(a) => gateway_cmd::run(a).await.map(|()| 0),
            Command::Top(a) => top::run(a).await,
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Flags of vLLM 0.32's engine and server (`vllm/engine/arg_utils.py`) that Headroom's
    /// messages and advice may name; every other `--flag` in a message must be Headroom's own.
    const VLLM_FLAGS: &[&str] = &[
        "enable-prefix-caching",
        "enforce-eager",
        "gpu-memory-utilization",
        "kv-cache-dtype",
        "max-model-len",
        "max-num-batched-tokens",
        "max-num-queued-reqs",
        "max-num-seqs",
        "tensor-parallel-size",
    ];

    fn long_flags(c: &clap::Command, out: &mut BTreeSet<String>) {
        for a in c.get_arguments() {
            if let Some(l) = a.get_long() {
                out.insert(l.to_string());
            }
        }
        for s in c.get_subcommands() {
            long_flags(s, out);
        }
    }

    /// Every `--flag` named in a string of the product's code (messages, warnings, advice; test
    /// modules excluded) or in the README exists: a Headroom flag, or one of vLLM's listed above.
    /// A warning once advised `--shard i/N`, which no command has.
    #[test]
    fn every_flag_a_message_names_exists() {
        let mut known = BTreeSet::new();
        long_flags(&super::Cli::command(), &mut known);
        known.extend(["help", "version"].map(String::from));
        known.extend(VLLM_FLAGS.iter().map(|f| (*f).to_string()));
        // Prometheus's own, for `--push-to`'s receiver.
        known.insert("web.enable-remote-write-receiver".to_string());
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut unknown = Vec::new();
        let mut files = Vec::new();
        let mut dirs = vec![crates];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if p.is_dir() {
                    // Product code only: `src` trees, not tests, benches or fuzz targets.
                    if !matches!(name.as_str(), "tests" | "benches" | "fuzz" | "target") {
                        dirs.push(p);
                    }
                } else if name.ends_with(".rs") && p.components().any(|c| c.as_os_str() == "src") {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 30, "found only {} source files", files.len());
        // The README's commands too (with cargo's own flags).
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        files.push(readme.clone());
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            let is_readme = *f == readme;
            let mut known = known.clone();
            if is_readme {
                known.extend(["release", "bench", "workspace", "all-targets"].map(String::from));
            }
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("#[cfg(test)]") {
                    break;
                }
                let code = line.trim_start();
                if !is_readme && code.starts_with("//") {
                    continue;
                }
                // In code, only inside string literals: after the first `"` of the line.
                let lit = if is_readme {
                    line
                } else {
                    let Some(q) = line.find('"') else { continue };
                    &line[q..]
                };
                let mut rest = lit;
                while let Some(i) = rest.find("--") {
                    let after = &rest[i + 2..];
                    let flag: String = after
                        .chars()
                        .take_while(|c| {
                            c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'
                        })
                        .collect();
                    // A sentence may end right after a flag: `--quick.`
                    let flag = flag.trim_end_matches(['-', '.']).to_string();
                    let before = rest[..i].chars().last();
                    if !flag.is_empty()
                        && flag.starts_with(|c: char| c.is_ascii_lowercase())
                        && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !known.contains(&flag)
                    {
                        unknown.push(format!("{}:{}: --{flag}", f.display(), n + 1));
                    }
                    rest = &after[flag.len().min(after.len())..];
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "flags named but not defined: {unknown:#?}"
        );
    }
}
