//! `headroom report RUN_DIR`: a run directory's reports rendered again from its results.json.

use anyhow::Result;
use clap::Args;
use headroom_report::remote_write;
use headroom_sweep::run_dir::RunDir;
use std::path::PathBuf;

/// Arguments of `headroom report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A sweep's run directory (holding results.json).
    pub run_dir: PathBuf,
    /// Prometheus remote-write URL (e.g. http://127.0.0.1:9090/api/v1/write): push the run's
    /// results there as series, as `sweep --push-to` does. Prometheus refuses samples older than
    /// its head block (about the last hour), so this is for a run just finished.
    #[arg(long, value_name = "URL")]
    pub push_to: Option<String>,
}

/// Reads `RUN_DIR/results.json`, writes levels.csv, report.md and report.html with this
/// version's renderers and prints the capacity summary; with `--push-to`, pushes the results'
/// series. Exit 0; bad input or a push that did not land is an error (exit 2).
pub async fn run(a: ReportArgs) -> Result<i32> {
    let push = crate::sweep_cmd::push_client(a.push_to.as_deref())?;
    // Bounded: not a link, a FIFO or device (which would block or never end), nor a giant.
    let run = RunDir::new(&a.run_dir).read_results().map_err(|e| {
        if e.missing {
            anyhow::anyhow!("{e} (is this a sweep's run directory?)")
        } else {
            e.into()
        }
    })?;
    let written = headroom_report::rerender_run_files(&a.run_dir, &run)
        .map_err(|(f, e)| anyhow::anyhow!("{}: cannot write {f}: {e}", a.run_dir.display()))?;
    println!("{}", headroom_report::terminal::render(&run));
    println!(
        "Rendered again in {}: {}",
        a.run_dir.display(),
        written.join(", ")
    );
    if let Some(client) = push {
        let run_id = remote_write::run_id(&a.run_dir);
        let points = remote_write::points(&run, &run_id);
        client
            .push_points(&points)
            .await
            .map_err(|(n, e)| match n {
                0 => anyhow::anyhow!("push: {e}"),
                n => anyhow::anyhow!(
                    "push: {e} ({n} of {} samples were in requests taken before it)",
                    points.len()
                ),
            })?;
        println!(
            "Pushed {} samples to {} (job=\"headroom\", run_id=\"{run_id}\")",
            points.len(),
            client.shown()
        );
    }
    Ok(0)
}
