//! `headroom diagnose`: read a live server, a Prometheus range or saved scrapes, judge the window
//! against the SLO, print the six-step analysis. Wiring only: sources are
//! `headroom_signals::source` / `::promql`, the judgement is `headroom_diagnose::assess`, the
//! output is `headroom_report::diagnosis`.
//!
//! With a Headroom gateway's series (`--gateway URL` beside `--url`, or found by name in
//! `--prometheus`), each gateway class with traffic is judged on both views
//! (`headroom_diagnose::views`): the gateway's per-class histograms and outcomes, what users
//! see, and the engine's, which carry no class.
//!
//! Exit status: 0 when the analysis was rendered, whatever the verdict; 1 with
//! `--fail-on-breach` when any window's verdict is FAIL; 2 on bad input (unreachable endpoint,
//! not a metrics body, no engine metrics, no data in the range, a bad SLO file or flag).

use crate::duration_arg::duration_arg;
use crate::sweep_cmd::fmt_secs;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use headroom_core::Verdict;
use headroom_core::objective::Bound;
use headroom_core::run::redact_url;
use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile, SloSpec};
use headroom_diagnose::{Origin, PrefixPlan, Setting};
use headroom_report::diagnosis::{self, Diagnosis, DiagnosisSource};
use headroom_signals::adapter::{Instance, instances};
use headroom_signals::promql::{
    LabelledSeries, PromClient, parse_range, window_from_prometheus, windows_by_label,
};
use headroom_signals::source::{Loaded, load_files, load_run_dir, poll_with_gateway};
use headroom_signals::{Scrape, Selection, Signal, Window, WindowError, WindowOptions};
use headroom_slo::catalogue::{
    GATEWAY_BAD_OUTCOMES, GATEWAY_CLASS_LABEL, GATEWAY_NOT_SERVICE_OUTCOMES, GATEWAY_REQUESTS,
};
use headroom_sweep::controller::{Phase, phase_spec, rejudge_level};
use headroom_sweep::run_dir::{RunDir, histogram_name, read_recording, read_text, read_workload};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Output formats of `headroom diagnose`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Plain aligned text.
    Terminal,
    /// Markdown with tables.
    Markdown,
    /// JSON; each finding carries its stable `id`.
    Json,
}

/// Arguments of `headroom diagnose`. Exactly one source: `--url`, `--prometheus` or `--from`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["url", "prometheus", "from"])))]
pub struct DiagnoseArgs {
    /// Engine metrics URL to poll (e.g. http://127.0.0.1:8000/metrics).
    #[arg(long)]
    pub url: Option<String>,
    /// dcgm-exporter metrics URL polled alongside --url (e.g. http://127.0.0.1:9400/metrics).
    #[arg(long, requires = "url")]
    pub dcgm: Option<String>,
    /// A Headroom gateway's metrics URL polled alongside --url (e.g.
    /// http://127.0.0.1:8080/metrics): each gateway class is then judged on what users see
    /// behind the gateway and on the engine's view, the stricter verdict holding. With
    /// --prometheus the gateway's series are found by name; no flag is needed.
    #[arg(long, requires = "url", value_name = "URL")]
    pub gateway: Option<String>,
    /// Seconds between scrapes with --url (`5s`, `500ms`).
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    pub interval: Duration,
    /// Length of the live window with --url (`30s`, `2m`); `0s` takes one scrape, read as
    /// everything since the server started.
    #[arg(long, default_value = "30s", value_parser = duration_arg)]
    pub duration: Duration,
    /// Timeout of each scrape or Prometheus query.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    pub timeout: Duration,
    /// Prometheus-compatible base URL (Prometheus, Thanos, Mimir, VictoriaMetrics).
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Range read from --prometheus, ending at --end (`30m`, `1h30m`).
    #[arg(long, default_value = "30m")]
    pub range: String,
    /// End of the --prometheus range, Unix seconds (default: now).
    #[arg(long, requires = "prometheus")]
    pub end: Option<f64>,
    /// Keep only series with this label value: `model_name=NAME` (alias `model=NAME`) or
    /// `engine=INDEX`; repeatable. Without it every series is summed.
    #[arg(long, value_name = "LABEL=VALUE")]
    pub selector: Vec<String>,
    /// Saved scrape files in time order (each optionally `FILE@unix_seconds`; one engine file
    /// alone means everything since the server started; dcgm-exporter files are recognised),
    /// or one sweep run directory. Repeatable.
    #[arg(long, value_name = "FILE[@unix_s]|RUN_DIR")]
    pub from: Vec<String>,
    /// With --from RUN_DIR: the level index to diagnose (default: every level).
    #[arg(long)]
    pub level: Option<u32>,
    /// SLO file (default: with --from RUN_DIR the run's own `slo.yaml`, else the built-in SLO,
    /// `headroom sweep --print-defaults`).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Request class whose objectives apply (its own entry merged over `"*"`).
    #[arg(long, default_value = "*")]
    pub class: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Terminal)]
    pub format: Format,
    /// Exit with status 1 when any verdict is FAIL (still 0 for PASS and INCONCLUSIVE).
    #[arg(long)]
    pub fail_on_breach: bool,
}

/// A window with where it came from, before judgement.
struct Read {
    window: Window,
    kind: &'static str,
    /// The same as `kind`, for the hints of the judgement ([`Origin`]).
    origin: Origin,
    /// dcgm-exporter was scraped for the window (see [`Setting::dcgm_scraped`]).
    dcgm_scraped: bool,
    location: String,
    level: Option<u32>,
    /// A run directory level's every scrape, warm-up included, for the sweep's own judgement
    /// ([`headroom_sweep::controller::rejudge_level`]); `None` for other sources.
    level_scrapes: Option<Loaded>,
    /// A Headroom gateway's windows over the same span, one per `class`; empty without one.
    gateway: BTreeMap<String, Window>,
}

fn selection(args: &[String]) -> Result<Selection> {
    let mut sel = Selection::default();
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            bail!("--selector {a:?}: expected LABEL=VALUE, e.g. model_name=qwen or engine=0");
        };
        let v = v.trim_matches('"').to_owned();
        match k.trim() {
            "model_name" | "model" => sel.model_name = Some(v),
            "engine" => sel.engine = Some(v),
            other => bail!(
                "--selector {a:?}: label `{other}` is not supported; use model_name (alias model) or engine"
            ),
        }
    }
    Ok(sel)
}

/// The SLO file at `path`, or the built-in one.
fn load_slo_file(path: Option<&Path>) -> Result<SloFile> {
    match path {
        Some(p) => SloFile::load(p).map_err(|e| anyhow!("{e}")),
        None => SloFile::parse(DEFAULT_SLO_YAML, Path::new("built-in slo.yaml"))
            .map_err(|e| anyhow!("{e}")),
    }
}

fn load_slo(path: Option<&Path>, class: &str) -> Result<SloSpec> {
    let file = load_slo_file(path)?;
    if class != "*" && !file.objectives.contains_key(class) && !file.objectives.contains_key("*") {
        let known: Vec<&str> = file.objectives.keys().map(String::as_str).collect();
        bail!(
            "--class {class:?}: {} defines no such class and no \"*\" default; it defines {}",
            path.map(|p| p.display().to_string())
                .unwrap_or_else(|| "the built-in SLO".into()),
            known.join(", ")
        );
    }
    Ok(file.spec_for(class))
}

/// Refuses a `--selector` that keeps none of the scrape's model × engine instances: the window
/// would otherwise hold only the label-less series (HTTP counts of every model), figures that
/// look valid and describe something else.
fn check_selection(last: &Scrape, sel: &Selection) -> Result<()> {
    if *sel == Selection::default() {
        return Ok(());
    }
    let found = instances(&last.exposition);
    let keep = |i: &Instance| {
        sel.model_name
            .as_ref()
            .is_none_or(|m| i.model_name.as_ref() == Some(m))
            && sel
                .engine
                .as_ref()
                .is_none_or(|e| i.engine.as_ref() == Some(e))
    };
    if found.is_empty() || found.iter().any(keep) {
        return Ok(());
    }
    let have: Vec<String> = found
        .iter()
        .map(|i| {
            format!(
                "model_name={} engine={}",
                i.model_name.as_deref().unwrap_or("(none)"),
                i.engine.as_deref().unwrap_or("(none)")
            )
        })
        .collect();
    bail!(
        "{}: --selector keeps no engine series; the scrape has {}",
        last.source,
        have.join("; ")
    )
}

/// The window of `engine` and `dcgm` scrapes. A scrape that is a Headroom gateway's `/metrics`
/// is refused with a hint that fits `origin` (`--url` live, a rerun of the sweep for a run
/// directory, another file for `--from`), not the sweep's `--metrics-url` everywhere.
fn window_of(
    engine: &[Scrape],
    dcgm: &[Scrape],
    sel: &Selection,
    origin: Origin,
) -> Result<Window> {
    if let Some(last) = engine.last() {
        check_selection(last, sel)?;
    }
    let opts = WindowOptions {
        selection: sel.clone(),
        ..WindowOptions::default()
    };
    Window::from_scrapes(engine, dcgm, &opts).map_err(|e| match e {
        WindowError::NoEngineMetrics {
            origin: o,
            detected,
            looked_for,
            hint,
        } if !hint.is_empty() => anyhow!(WindowError::NoEngineMetrics {
            origin: o,
            detected,
            looked_for,
            hint: origin.gateway_metrics_hint(),
        }),
        e => anyhow!(e),
    })
}

async fn read_windows(a: &DiagnoseArgs, sel: &Selection) -> Result<Vec<Read>> {
    let (timeout, interval, duration) = (a.timeout, a.interval, a.duration);
    if let Some(url) = &a.url {
        if interval.is_zero() {
            bail!("--interval {}: must be above zero", fmt_secs(interval));
        }
        let extra: Vec<String> = [a.dcgm.as_deref(), a.gateway.as_deref()]
            .into_iter()
            .flatten()
            .map(redact_url)
            .collect();
        eprintln!(
            "headroom diagnose: polling {}{} every {} for {} …",
            redact_url(url),
            extra
                .iter()
                .map(|u| format!(" and {u}"))
                .collect::<String>(),
            fmt_secs(interval),
            fmt_secs(duration)
        );
        let p = poll_with_gateway(
            url,
            a.dcgm.as_deref(),
            a.gateway.as_deref(),
            interval,
            duration,
            timeout,
        )
        .await?;
        for f in &p.failures {
            eprintln!("warning: a scrape failed and was left out: {f}");
        }
        let location = std::iter::once(redact_url(url))
            .chain(extra)
            .collect::<Vec<_>>()
            .join(" + ");
        let gateway = match &a.gateway {
            Some(g) => gateway_windows(&p.gateway, g)?,
            None => BTreeMap::new(),
        };
        return Ok(vec![Read {
            window: window_of(&p.engine, &p.dcgm, sel, Origin::Live)?,
            kind: "url",
            origin: Origin::Live,
            dcgm_scraped: a.dcgm.is_some(),
            location,
            level: None,
            level_scrapes: None,
            gateway,
        }]);
    }
    if let Some(base) = &a.prometheus {
        let range_s = parse_range(&a.range).map_err(|e| anyhow!("--range: {e}"))?;
        let end = match a.end {
            Some(e) if e.is_finite() && e > 0.0 => e,
            Some(e) => bail!("--end {e}: expected Unix seconds"),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        };
        let client = PromClient::new(base, timeout)?;
        let window = window_from_prometheus(&client, range_s, end, sel, None).await?;
        let gateway = gateway_from_prometheus(&client, range_s, end).await?;
        return Ok(vec![Read {
            window,
            kind: "prometheus",
            origin: Origin::Prometheus,
            dcgm_scraped: false,
            location: format!("{} [{}]", client.shown(), a.range),
            level: None,
            level_scrapes: None,
            gateway,
        }]);
    }
    // --from: one run directory, or scrape files
    if let [one] = a.from.as_slice()
        && Path::new(one).is_dir()
    {
        let mut levels = load_run_dir(Path::new(one))?;
        let chosen: Vec<(u32, Loaded)> = match a.level {
            Some(l) => match levels.remove(&l) {
                Some(x) => vec![(l, x)],
                None => {
                    let have: Vec<String> = levels.keys().map(u32::to_string).collect();
                    bail!(
                        "--level {l}: {one} has no scrapes for that level; it has levels {}",
                        have.join(", ")
                    )
                }
            },
            None => levels.into_iter().collect(),
        };
        let starts = measurement_starts(read_results(Path::new(one))?.as_ref());
        let mut out = Vec::new();
        for (level, mut l) in chosen {
            if l.engine.is_empty() {
                eprintln!("warning: {one} level {level}: only dcgm-exporter scrapes; skipped");
                continue;
            }
            let all = Loaded {
                engine: l.engine.clone(),
                dcgm: l.dcgm.clone(),
            };
            measurement_window_only(&mut l, &starts);
            let window = window_of(&l.engine, &l.dcgm, sel, Origin::RunDir)
                .with_context(|| format!("{one} level {level}"))?;
            out.push(Read {
                window,
                kind: "run_dir",
                origin: Origin::RunDir,
                dcgm_scraped: !l.dcgm.is_empty(),
                location: one.clone(),
                level: Some(level),
                level_scrapes: Some(all),
                gateway: BTreeMap::new(),
            });
        }
        if out.is_empty() {
            bail!("{one}: no level has an engine scrape");
        }
        return Ok(out);
    }
    if a.level.is_some() {
        bail!("--level applies to --from RUN_DIR (a sweep run directory) only");
    }
    for f in &a.from {
        if Path::new(f).is_dir() {
            bail!(
                "--from {f}: a run directory must be the only --from; give scrape files or one directory"
            );
        }
    }
    let loaded = load_files(&a.from)?;
    Ok(vec![Read {
        window: window_of(&loaded.engine, &loaded.dcgm, sel, Origin::ScrapeFiles)?,
        kind: "files",
        origin: Origin::ScrapeFiles,
        dcgm_scraped: !loaded.dcgm.is_empty(),
        location: a.from.join(", "),
        level: None,
        level_scrapes: None,
        gateway: BTreeMap::new(),
    }])
}

/// One window per gateway class from a Headroom gateway's live scrapes (`--gateway`).
///
/// # Errors
/// The scrapes are not a Headroom gateway's `/metrics`, named with the URL.
fn gateway_windows(scrapes: &[Scrape], url: &str) -> Result<BTreeMap<String, Window>> {
    use crate::top::history::{gateway_classes, gateway_snapshot, is_gateway};
    let Some(last) = scrapes.last() else {
        return Ok(BTreeMap::new());
    };
    if !is_gateway(&last.exposition) {
        bail!(
            "--gateway {}: not a Headroom gateway's /metrics (no headroom_gateway_* series); give the gateway's listen address with /metrics, e.g. http://127.0.0.1:8080/metrics",
            redact_url(url)
        );
    }
    Ok(gateway_classes(&last.exposition)
        .into_iter()
        .map(|c| {
            let snaps: Vec<_> = scrapes
                .iter()
                .map(|s| (s.at_unix_s, gateway_snapshot(&s.exposition, &c)))
                .collect();
            (c, Window::from_snapshots(&snaps, &[], false))
        })
        .collect())
}

/// A Headroom gateway's windows per class from Prometheus, found by the series' names
/// (`headroom_gateway_ttft_seconds_bucket`, …); empty when the range holds none.
async fn gateway_from_prometheus(
    client: &PromClient,
    range_s: f64,
    end: f64,
) -> Result<BTreeMap<String, Window>> {
    let histograms = crate::top::history::gateway_histograms();
    let series = LabelledSeries {
        by: GATEWAY_CLASS_LABEL,
        histograms: &histograms,
        counters: &[(GATEWAY_REQUESTS, Signal::RequestsFinished, "outcome")],
    };
    Ok(windows_by_label(client, range_s, end, &series).await?)
}

/// The gateway classes to judge: `--class` when given (it must be one of the gateway's), else
/// every class that saw a request in the window.
///
/// # Errors
/// `--class` names no class of the gateway.
fn gateway_classes_to_judge(gw: &BTreeMap<String, Window>, class: &str) -> Result<Vec<String>> {
    if class != "*" {
        if gw.contains_key(class) {
            return Ok(vec![class.to_owned()]);
        }
        let have: Vec<&str> = gw.keys().map(String::as_str).collect();
        bail!(
            "--class {class:?}: the gateway has no such class; its classes are {}",
            have.join(", ")
        );
    }
    Ok(gw
        .iter()
        .filter(|(_, w)| {
            w.counter(Signal::RequestsFinished).is_some_and(|n| n > 0.0)
                || w.histogram(Signal::Ttft)
                    .is_some_and(|h| h.observations() > 0.0)
        })
        .map(|(c, _)| c.clone())
        .collect())
}

/// Refuses a run directory holding a symbolic link among the files diagnose reads (top level,
/// `scrapes/`, `histograms/`): the sweep writes none, and one planted there (`slo.yaml` →
/// `/etc/shadow`) would make diagnose read, and quote, a file it was never given.
///
/// # Errors
/// The first link found, named, or an unreadable folder.
fn refuse_links(run_dir: &Path) -> Result<()> {
    let found = RunDir::new(run_dir)
        .find_link()
        .with_context(|| format!("{}: cannot read the folder", run_dir.display()))?;
    if let Some(link) = found {
        bail!(
            "{}: a symbolic link in a run directory; a sweep writes none, so it is not read (copy the file in if it belongs there)",
            link.display()
        );
    }
    Ok(())
}

/// The run directory's `results.json` as JSON: `None` when there is none (an older or
/// cut-short run: its levels are then judged on the engine's view alone, and a warning says so).
///
/// # Errors
/// A `results.json` that exists but cannot be read or is not JSON, named: judging with other
/// evidence while the run's own record is corrupt would hide that.
fn read_results(run_dir: &Path) -> Result<Option<serde_json::Value>> {
    let p = RunDir::new(run_dir).results();
    let text = match read_text(&p) {
        Ok(t) => t,
        Err(e) if e.missing => return Ok(None),
        Err(e) => bail!("{}: cannot read it: {}", p.display(), e.message),
    };
    // serde_json's message names line and column, never the input.
    serde_json::from_str(&text).map(Some).map_err(|e| {
        anyhow!(
            "{}: not JSON ({e}); the run directory is damaged (a full disk, an interrupted copy): restore the file or rerun the sweep",
            p.display()
        )
    })
}

/// Start of every level's measurement window (`started_unix_s` in the run's `results.json`),
/// in no particular order; empty without results (then a level's whole span is diagnosed,
/// warm-up included).
fn measurement_starts(run: Option<&serde_json::Value>) -> Vec<f64> {
    run.and_then(|v| v["phases"].as_array())
        .into_iter()
        .flatten()
        .flat_map(|p| p["levels"].as_array().into_iter().flatten())
        .filter_map(|l| l["started_unix_s"].as_f64())
        .collect()
}

/// Keeps a sweep level's scrapes from the one taken when its warm-up ended, as the sweep itself
/// judged the level: requests of the warm-up burst (queued behind each other when the level
/// started) would otherwise weigh in the engine's TTFT and queue-time histograms. The level's
/// window start is the `results.json` start that falls inside its scrapes' time span; with
/// none, or fewer than two engine scrapes left, the whole span stays (and a note says so).
fn measurement_window_only(l: &mut Loaded, starts: &[f64]) {
    const SLACK_S: f64 = 0.25;
    let (Some(first), Some(last)) = (l.engine.first(), l.engine.last()) else {
        return;
    };
    let (t0, t1) = (first.at_unix_s, last.at_unix_s);
    let Some(start) = starts
        .iter()
        .copied()
        .find(|&s| s >= t0 - SLACK_S && s <= t1)
    else {
        return;
    };
    let keep = |x: &Scrape| x.at_unix_s >= start - SLACK_S;
    if l.engine.iter().filter(|x| keep(x)).count() < 2 {
        return;
    }
    l.engine.retain(keep);
    l.dcgm.retain(keep);
}

/// What the sweep recorded for one level of a run directory: the phase it belongs to and the
/// level's own results, so `diagnose --from RUN_DIR --level N` judges the level as the sweep did.
struct SweptLevel {
    /// Phase name: the class swept alone, or `mix`.
    phase: String,
    /// More than one class in the phase.
    mix: bool,
    /// The phase's class names.
    classes: Vec<String>,
    level: headroom_core::run::LevelResult,
    /// Share of the phase's requests (by weight) sent with `ignore_eos`, from the run's
    /// workload.yaml; `None` when it cannot be read.
    ignore_eos_share: Option<f64>,
    /// What the phase's classes share as prompt prefixes (by weight), from the run's
    /// workload.yaml; `None` when it cannot be read.
    prefixes: Option<PrefixPlan>,
}

/// A run directory's `results.json` and `workload.yaml`, read once for all its levels.
struct SweptRun {
    run: headroom_core::run::RunResult,
    /// `None` when workload.yaml is missing or unreadable.
    workload: Option<headroom_load::workload::Workload>,
    /// The sweep's phases rebuilt from workload.yaml (each class alone, then the mix); `None`
    /// when the workload cannot be read or planned.
    phases: Option<Vec<Phase>>,
}

/// A swept level judged again as the sweep judged it ([`rejudge_level`]), with the window the
/// engine's rows were judged on.
struct Rejudged {
    level: headroom_core::run::LevelResult,
    /// The level's measurement window (its engine scrapes from the one that closed the warm-up).
    window: Window,
    /// The objectives the level was judged on, each with a row in `level.objectives`.
    spec: SloSpec,
    /// Requests the client started in the level's warm-up (its recording's `warmup_started`).
    warmup_started: u64,
}

impl SweptRun {
    /// `None` when there is no results.json (a run directory of an older or cut-short run: its
    /// levels are then diagnosed on the engine's view alone); a warning names every file that is
    /// missing or unreadable (results.json itself, workload.yaml, the histograms and scrapes
    /// results.json lists).
    ///
    /// # Errors
    /// A results.json that exists but is unreadable or corrupt ([`read_results`]).
    fn load(run_dir: &Path) -> Result<Option<SweptRun>> {
        let Some(value) = read_results(run_dir)? else {
            eprintln!(
                "warning: {}: no results.json; levels are judged on the engine's view alone, without the client's measurements",
                run_dir.display()
            );
            return Ok(None);
        };
        let run: headroom_core::run::RunResult = match serde_json::from_value(value) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "warning: {}: results.json is not a whole sweep's results ({e}); levels are judged on the engine's view alone, without the client's measurements",
                    run_dir.display()
                );
                return Ok(None);
            }
        };
        // The sweep stopped before writing them (a full disk), or they were removed.
        for f in RunDir::new(run_dir).missing_cited(&run) {
            eprintln!(
                "warning: {}: results.json lists {f}, which is missing (the sweep could not write it, or it was removed)",
                run_dir.display()
            );
        }
        let wl = RunDir::new(run_dir).workload();
        let workload = match read_workload(&RunDir::new(run_dir)) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("warning: {e}; the workload's hints are left out");
                None
            }
        };
        let phases = workload.as_ref().and_then(|w| {
            match headroom_load::prompt::ClassPlan::from_workload(w, None) {
                Ok(plans) => Some(headroom_sweep::controller::phases(&plans)),
                Err(e) => {
                    eprintln!(
                        "warning: {}: its classes cannot be planned ({e}); levels are judged as results.json records them",
                        wl.display()
                    );
                    None
                }
            }
        });
        Ok(Some(SweptRun {
            run,
            workload,
            phases,
        }))
    }

    /// Level `sl` (of run directory `run_dir`) judged again from its recording and `scrapes`
    /// (every scrape of the level) against `slo`, by the sweep's own function; `None` with a
    /// warning when the recording or the phase is missing (the level is then judged as
    /// results.json records it).
    fn rejudge(
        &self,
        run_dir: &Path,
        sl: &SweptLevel,
        slo: &SloFile,
        scrapes: &Loaded,
    ) -> Option<Rejudged> {
        let phase = self.phases.as_ref()?.iter().find(|p| p.name == sl.phase)?;
        let rec = match read_recording(&RunDir::new(run_dir), &sl.level) {
            Ok(Some(r)) => r,
            // Found by its histogram file's name (`level`): it cites one.
            Ok(None) => return None,
            Err(e) => {
                eprintln!(
                    "warning: {e}; the level is judged as results.json records it, not again from the client's histograms"
                );
                return None;
            }
        };
        let (level, from) =
            rejudge_level(phase, slo, &rec, &scrapes.engine, &scrapes.dcgm, &sl.level);
        let meas = scrapes.engine.get(from..).unwrap_or(&[]);
        let start = meas.first().map_or(f64::INFINITY, |x| x.at_unix_s);
        // dcgm-exporter scrapes of the window, as the sweep keeps them.
        let dcgm: Vec<Scrape> = scrapes
            .dcgm
            .iter()
            .filter(|x| x.at_unix_s + 0.5 >= start)
            .cloned()
            .collect();
        let window = Window::from_scrapes(meas, &dcgm, &WindowOptions::default()).ok()?;
        let spec = SloSpec {
            objectives: phase_spec(slo, phase)
                .objectives
                .into_iter()
                .filter(|o| level.objectives.iter().any(|r| r.id == o.id()))
                .collect(),
        };
        Some(Rejudged {
            level,
            window,
            spec,
            warmup_started: rec.warmup_started,
        })
    }

    /// The level whose histogram file is level `index`'s ([`histogram_name`]), with its phase.
    fn level(&self, index: u32) -> Option<SweptLevel> {
        let want = histogram_name(index);
        let (phase, level) = self.run.phases.iter().find_map(|p| {
            p.levels
                .iter()
                .find(|l| l.histograms == want)
                .map(|l| (p, l.clone()))
        })?;
        // Mean over the phase's classes by weight of `f(class)`; a class the workload does not
        // define counts 0.
        let by_weight = |f: &dyn Fn(&headroom_load::workload::ClassSpec) -> f64| {
            self.workload.as_ref().map(|w| {
                let total: f64 = phase.classes.iter().map(|(_, wt)| wt).sum();
                let sum: f64 = phase
                    .classes
                    .iter()
                    .map(|(n, wt)| wt * w.spec.classes.iter().find(|c| c.name == *n).map_or(0.0, f))
                    .sum();
                if total > 0.0 { sum / total } else { 0.0 }
            })
        };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        let ignore_eos_share = by_weight(&|c| flag(c.ignore_eos));
        let prefixes = match (
            by_weight(&|c| flag(c.shared_prefix_tokens > 0)),
            by_weight(&|c| f64::from(c.shared_prefix_tokens)),
            // A class with a dataset and no prompt_tokens draws its prompts from the dataset.
            by_weight(&|c| flag(c.dataset.is_some() && c.prompt_tokens.is_none())),
        ) {
            (Some(shared_share), Some(shared_tokens_mean), Some(dataset_share)) => {
                Some(PrefixPlan {
                    shared_share,
                    shared_tokens_mean,
                    dataset_share,
                })
            }
            _ => None,
        };
        Some(SweptLevel {
            phase: phase.name.clone(),
            mix: phase.classes.len() > 1,
            classes: phase.classes.iter().map(|(n, _)| n.clone()).collect(),
            level,
            ignore_eos_share,
            prefixes,
        })
    }
}

/// The objectives the sweep judged level `sl` on: its class's, or for the mix every class's
/// server-only ones ([`phase_spec`]), from the phase's class names in results.json.
fn sweep_objectives(slo: &SloFile, sl: &SweptLevel) -> Vec<headroom_core::Objective> {
    if !sl.mix {
        return slo.spec_for(&sl.phase).objectives;
    }
    let mut out: Vec<headroom_core::Objective> = Vec::new();
    for c in &sl.classes {
        for o in slo.spec_for(c).objectives {
            if !out.iter().any(|x| x.id() == o.id()) {
                out.push(o);
            }
        }
    }
    out
}

/// Adds the client's view of errors to step 4 of a swept level's assessment, beside the
/// engine's: `client_error_ratio` (errors + aborts + HTTP and transport failures over every
/// request of the level that ended, as the sweep's error objective counts them,
/// [`headroom_core::run::LevelResult::error_counts`]) and `client_http_failed` (requests answered
/// with an HTTP error status, which the engine never counts), both from results.json's
/// `level_outcomes`; and a remark when the two rates differ.
fn client_error_figures(
    a: &mut headroom_diagnose::Assessment,
    l: &headroom_core::run::LevelResult,
) {
    let Some(step) = a.steps.iter_mut().find(|s| s.number == 4) else {
        return;
    };
    let (bad, n) = l.error_counts();
    if n == 0 {
        return;
    }
    let outcomes = if l.level_outcomes.is_empty() {
        &l.outcomes
    } else {
        &l.level_outcomes
    };
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "stop" | "length" | "client_cancel"))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let http: u64 = outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("http_"))
        .map(|(_, v)| v)
        .sum();
    let client_ratio = bad as f64 / n as f64;
    let figs = [
        headroom_diagnose::Figure {
            name: "client_error_ratio".into(),
            value: client_ratio,
            unit: "ratio".into(),
            source: format!(
                "client: {bad} of {n} requests of the level that ended failed{} (results.json level_outcomes)",
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", failed.join(", "))
                }
            ),
            bound: Bound::Exact,
        },
        headroom_diagnose::Figure {
            name: "client_http_failed".into(),
            value: http as f64,
            unit: "count".into(),
            source: "client: requests answered with an HTTP error status (results.json level_outcomes http_*)".into(),
            bound: Bound::Exact,
        },
    ];
    // Beside the engine's own rate.
    let at = step
        .figures
        .iter()
        .position(|f| f.name == "error_abort_ratio")
        .map_or(step.figures.len().min(1), |i| i + 1);
    let engine = step
        .figures
        .iter()
        .find(|f| f.name == "error_abort_ratio")
        .map(|f| f.value);
    step.figures.splice(at..at, figs);
    let pct = |r: f64| format!("{:.2} %", r * 100.0);
    step.remarks.push(match engine {
        Some(e) if (e - client_ratio).abs() > 1e-9 => format!(
            "the client saw {} of its requests fail, the engine counted {}: the difference failed outside the engine (HTTP errors the API server or a proxy returned, transport failures) or over a different span (the engine's counters cover the measurement window, the client's every request of the level)",
            pct(client_ratio),
            pct(e)
        ),
        Some(e) => format!(
            "the client saw {} of its requests fail, as the engine counted ({})",
            pct(client_ratio),
            pct(e)
        ),
        None => format!(
            "the client saw {} of its requests fail; the engine's own rate is unknown",
            pct(client_ratio)
        ),
    });
}

fn source_of(r: &Read) -> DiagnosisSource {
    let w = &r.window;
    DiagnosisSource {
        kind: r.kind.to_owned(),
        location: r.location.clone(),
        level: r.level,
        engine: w.engine.name().to_owned(),
        engine_version: w.version_hint.clone(),
        start_unix_s: w.start_unix_s,
        end_unix_s: w.end_unix_s,
        duration_s: w.duration_s(),
        scrapes: w.scrapes,
        since_server_start: w.since_server_start,
        gpus: w.gpus.len(),
    }
}

/// The report's JSON ([`diagnosis::json`]) with one more top-level array per window:
/// `data_warnings`, each `{"metric", "series", "signal", "problem", "detail", "occurrences"}`
/// ([`headroom_signals::DataWarning`]), empty when the data was consistent. `problem` is one of
/// `not_cumulative`, `duplicate_bound`, `duplicate_series`, `negative`, `count_mismatch`, `not_finite`,
/// `out_of_range`. Objectives and figures that are only an upper bound carry `"bound": "upper"`
/// (their `bound` field, [`headroom_core::objective::Bound`]).
fn json_with_data_warnings(ds: &[Diagnosis], reads: &[&Read]) -> Result<String> {
    let mut out = Vec::with_capacity(ds.len());
    for (d, r) in ds.iter().zip(reads) {
        let mut v = serde_json::to_value(d)?;
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "data_warnings".to_owned(),
                serde_json::to_value(&r.window.data_warnings)?,
            );
        }
        out.push(v);
    }
    Ok(match out.as_slice() {
        [one] => serde_json::to_string_pretty(one)?,
        many => serde_json::to_string_pretty(many)?,
    })
}

/// Runs `headroom diagnose`; returns the exit status (see the module docs).
///
/// # Errors
/// Bad input, each message naming the file, URL or flag (the caller exits with status 2).
pub async fn run(a: DiagnoseArgs) -> Result<i32> {
    let sel = selection(&a.selector)?;
    if let [one] = a.from.as_slice()
        && Path::new(one).is_dir()
    {
        refuse_links(Path::new(one))?;
    }
    // A run directory's own SLO (the sweep writes it as RUN_DIR/slo.yaml) unless --slo is given.
    let run_slo = match (&a.slo, a.from.as_slice()) {
        (None, [one]) if Path::new(one).is_dir() => {
            let p = RunDir::new(one).slo();
            p.is_file().then(|| {
                eprintln!(
                    "headroom diagnose: judging against the run's SLO, {}",
                    p.display()
                );
                p
            })
        }
        _ => None,
    };
    let slo_path = a.slo.as_deref().or(run_slo.as_deref());
    let spec = load_slo(slo_path, &a.class)?;
    let reads = read_windows(&a, &sel).await?;
    let swept_run = match a.from.as_slice() {
        [dir] if Path::new(dir).is_dir() => SweptRun::load(Path::new(dir))?,
        _ => None,
    };
    let mut ds = Vec::new();
    // The read behind each diagnosis (a read with a gateway gives one per class).
    let mut read_of: Vec<&Read> = Vec::new();
    for r in &reads {
        for reset in &r.window.counter_resets {
            eprintln!(
                "warning: {reset}; the increase counts the values before and after the reset, as PromQL increase() does"
            );
        }
        for d in &r.window.data_warnings {
            eprintln!("warning: {d}");
        }
        if !r.gateway.is_empty() {
            let classes = gateway_classes_to_judge(&r.gateway, &a.class)?;
            if classes.is_empty() {
                eprintln!(
                    "warning: no class of the gateway saw a request in the window; judged on the engine's view alone"
                );
            }
            let file = load_slo_file(slo_path)?;
            let setting = Setting {
                origin: r.origin,
                dcgm_scraped: r.dcgm_scraped,
                prefixes: None,
            };
            for c in &classes {
                let view = headroom_diagnose::views::GatewayView {
                    class: c,
                    window: &r.gateway[c],
                    bad_outcomes: &GATEWAY_BAD_OUTCOMES,
                    not_service_outcomes: &GATEWAY_NOT_SERVICE_OUTCOMES,
                };
                let mut assessment = headroom_diagnose::views::assess_views(
                    &r.window,
                    &view,
                    &file.spec_for(c),
                    &setting,
                );
                if !file.objectives.contains_key(c.as_str()) {
                    assessment.notes.insert(
                        1,
                        format!(
                            "the SLO defines no class `{c}`: judged against its \"*\" defaults"
                        ),
                    );
                }
                ds.push(Diagnosis {
                    source: source_of(r),
                    class: c.clone(),
                    assessment,
                });
                read_of.push(r);
            }
            if !classes.is_empty() {
                continue;
            }
        }
        // A sweep level: judged as the sweep judged it — its phase's class objectives, and the
        // client's measurements of the window as the record (the engine's histograms cannot
        // tell the window's requests from the warm-up's) — with the engine's view re-read.
        let swept = match (r.kind, r.level, &swept_run) {
            ("run_dir", Some(i), Some(sr)) => sr.level(i),
            _ => None,
        };
        // `--class` other than the phase's asks for another judgement than the sweep's.
        let swept = swept.filter(|sl| {
            let same = a.class == "*" || a.class == sl.phase;
            if !same {
                eprintln!(
                    "warning: level {} was swept as {}; --class {} judges it against that class's objectives on the engine's view alone, not as the sweep did",
                    r.level.unwrap_or(0),
                    sl.phase,
                    a.class
                );
            }
            same
        });
        let rejudged = match (&swept, &swept_run, &r.level_scrapes, a.from.as_slice()) {
            (Some(sl), Some(sr), Some(scrapes), [dir]) => {
                sr.rejudge(Path::new(dir), sl, &load_slo_file(slo_path)?, scrapes)
            }
            _ => None,
        };
        let mut level_notes = Vec::new();
        let mut judged_level = None;
        let (class, spec, client, window) = match &swept {
            Some(sl) => {
                // The sweep's rows: judged again from the recording and the scrapes, or as
                // results.json has them when the run directory cannot say more.
                let (level, spec, window) = match &rejudged {
                    Some(rj) => {
                        if rj.level.verdict != sl.level.verdict {
                            level_notes.push(format!(
                                "judged again from the run directory: {}; results.json records {}",
                                rj.level.verdict.as_str(),
                                sl.level.verdict.as_str()
                            ));
                        }
                        (&rj.level, rj.spec.clone(), &rj.window)
                    }
                    None => {
                        let file = load_slo_file(slo_path)?;
                        let spec = SloSpec {
                            objectives: sweep_objectives(&file, sl)
                                .into_iter()
                                .filter(|o| sl.level.objectives.iter().any(|r| r.id == o.id()))
                                .collect(),
                        };
                        (&sl.level, spec, &r.window)
                    }
                };
                judged_level = Some(level.clone());
                let mut health = level.client.clone();
                // Send lag measures coordinated omission only in open loop (as the sweep reads it).
                if level.mode == headroom_core::run::LoadMode::Concurrency {
                    health.send_lag_p99_s = 0.0;
                    health.send_lag_max_s = 0.0;
                }
                let client = headroom_diagnose::ClientView {
                    // As the sweep passed it, so that the engine's histogram overrules a TTFT
                    // bound exactly where it did; for rows as results.json records them (no
                    // recording), the sweep's final verdicts: no breach re-opens them.
                    started_before_window: Some(
                        rejudged.as_ref().map_or(u64::MAX, |rj| rj.warmup_started),
                    ),
                    objectives: level.objectives.clone(),
                    health: Some(health),
                    requests_finished: None,
                    output_tokens: None,
                    // Already applied to the rows by the sweep's judgement.
                    workload_drift: None,
                    ignore_eos_share: sl.ignore_eos_share,
                };
                (sl.phase.clone(), spec, Some(client), window)
            }
            None => (a.class.clone(), spec.clone(), None, &r.window),
        };
        // The workload's shared prefixes are known for a swept level whose run kept its
        // workload.yaml; a live server, scrape files and Prometheus say nothing of them.
        let setting = Setting {
            origin: r.origin,
            dcgm_scraped: r.dcgm_scraped,
            prefixes: swept.as_ref().and_then(|sl| sl.prefixes),
        };
        read_of.push(r);
        ds.push(Diagnosis {
            source: source_of(r),
            class,
            assessment: {
                let mut a =
                    headroom_diagnose::assess_with(window, client.as_ref(), &spec, &setting);
                a.notes.extend(level_notes);
                if let Some(l) = &judged_level {
                    client_error_figures(&mut a, l);
                }
                a
            },
        });
    }
    let text = match a.format {
        Format::Json => json_with_data_warnings(&ds, &read_of)? + "\n",
        Format::Terminal => ds
            .iter()
            .map(diagnosis::terminal)
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Markdown => ds
            .iter()
            .map(diagnosis::markdown)
            .collect::<Vec<_>>()
            .join("\n"),
    };
    print!("{text}");
    let failed = ds.iter().any(|d| d.assessment.verdict == Verdict::Fail);
    Ok(if a.fail_on_breach && failed { 1 } else { 0 })
}

#[cfg(test)]
mod time_flag_tests {
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: super::DiagnoseArgs,
    }

    /// `headroom diagnose --url … ARGS` (a source is required; nothing is polled here).
    fn parse(args: &[&str]) -> Result<super::DiagnoseArgs, clap::Error> {
        let head = ["diagnose", "--url", "http://127.0.0.1:9/metrics"];
        T::try_parse_from(head.into_iter().chain(args.iter().copied())).map(|t| t.a)
    }

    /// `--interval`, `--duration` and `--timeout` keep their defaults and every form they took
    /// as strings (units, zero as `0` or `0s`), and now plain seconds too.
    #[test]
    fn time_flags_parse_to_durations() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (a.interval, a.duration, a.timeout),
            (
                Duration::from_secs(5),
                Duration::from_secs(30),
                Duration::from_secs(10)
            )
        );
        let a = parse(&["--interval", "500ms", "--duration", "0s", "--timeout", "2"]).unwrap();
        assert_eq!(
            (a.interval, a.duration, a.timeout),
            (
                Duration::from_millis(500),
                Duration::ZERO,
                Duration::from_secs(2)
            )
        );
        let a = parse(&["--duration", "0", "--interval", "1.5m"]).unwrap();
        assert_eq!(
            (a.duration, a.interval),
            (Duration::ZERO, Duration::from_secs(90))
        );
        let e = parse(&["--timeout", "3 parsecs"]).unwrap_err().to_string();
        assert!(
            e.contains("'--timeout <TIMEOUT>'") && e.contains("unknown unit"),
            "{e}"
        );
    }

    /// A zero interval parses (zero is a time) and is refused before anything is polled.
    #[test]
    fn a_zero_interval_is_refused() {
        let a = parse(&["--interval", "0"]).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt.block_on(super::run(a)).unwrap_err().to_string();
        assert_eq!(e, "--interval 0s: must be above zero");
    }
}
