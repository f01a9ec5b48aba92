//! `headroom slo rules|dashboard|autoscale|budget|import`: everything an SRE who owns alerts
//! needs, from one `slo.yaml`. Wiring only: each subcommand fills the options of the matching
//! `headroom_slo` generator, writes its text to stdout (or `--out FILE`) and its warnings to
//! stderr. Errors name the SLO file and the field (`objectives.chat.ttft.p95`); the process then
//! exits with status 2.

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile, parse_duration_s, parse_ratio};
use headroom_slo::promql::Matcher;
use headroom_slo::rules::QueueAlert;
use headroom_slo::sli::SliOptions;
use headroom_slo::{
    AutoscaleKind, AutoscaleOptions, BudgetOptions, DashboardOptions, DeadTiers, ImportOptions,
    LatencySource, OffBucket, Rendered, RulesOptions, Selectors, SloError,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `headroom slo`.
#[derive(Debug, Args)]
pub struct SloArgs {
    #[command(subcommand)]
    command: SloCommand,
}

#[derive(Debug, Subcommand)]
enum SloCommand {
    /// Prometheus recording rules and multi-window, multi-burn-rate alerts per class (passes
    /// `promtool check rules`).
    Rules(RulesArgs),
    /// Grafana dashboard JSON, one row per analysis step.
    Dashboard(DashboardArgs),
    /// KEDA ScaledObject, HPA example and prometheus-adapter rules on KV-cache use and waiting
    /// requests (never GPU utilisation).
    Autoscale(AutoscaleArgs),
    /// Error-budget status per class and objective, read from a Prometheus server.
    Budget(BudgetArgs),
    /// Convert an OpenSLO v1 document into a Headroom slo.yaml.
    Import(ImportArgs),
}

/// Where the SLO comes from and where the output goes.
#[derive(Debug, Args)]
struct IoArgs {
    /// SLO file (default: the built-in SLO, `headroom sweep --print-defaults`).
    #[arg(long)]
    slo: Option<PathBuf>,
    /// Write the output to this file instead of stdout.
    #[arg(long, short)]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SourceArg {
    /// vLLM's own histograms; thresholds must be vLLM bucket bounds.
    Vllm,
    /// The Headroom gateway's histograms (buckets at every SLO threshold).
    Gateway,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OffBucketArg {
    /// Refuse, naming the objective and the nearest bucket bounds.
    Refuse,
    /// Use the next bound above (a looser objective) and warn.
    SnapUp,
    /// Use the next bound below (a stricter objective) and warn.
    SnapDown,
}

/// How classes map to series (shared by rules, autoscale and budget).
#[derive(Debug, Args)]
struct SliArgs {
    /// Only this class (repeatable; default: every class of the SLO file).
    #[arg(long = "class")]
    classes: Vec<String>,
    /// Label carrying the class on engine series (vLLM: `model_name`, the served model name).
    #[arg(long, default_value = "model_name")]
    class_label: String,
    /// Matcher added to every selector, engine and gateway, e.g. `job="vllm"` (repeatable).
    #[arg(long = "match", visible_alias = "selector", value_name = "MATCHER")]
    matchers: Vec<String>,
    /// Kubernetes namespace of the series: `namespace="NS"` is added to every selector.
    #[arg(long)]
    namespace: Option<String>,
    /// Histograms latency SLIs are computed from.
    #[arg(long, value_enum, default_value = "vllm")]
    latency_source: SourceArg,
    /// What to do with a latency threshold that is not a bucket bound (default: refuse; with
    /// the built-in SLO, i.e. without --slo, snap-down with a warning).
    #[arg(long, value_enum)]
    off_bucket: Option<OffBucketArg>,
    /// Leave HTTP 5xx (`http_requests_total`) out of the error SLI.
    #[arg(long)]
    no_http_errors: bool,
}

/// Said once when the built-in SLO's thresholds are snapped by default (no --slo, no
/// --off-bucket): its TTFT p95 < 300 ms, kept from the seed guides for the sweep demo, lies
/// between vLLM's 0.25 s and 0.5 s buckets.
const BUILTIN_SNAP_NOTE: &str = "no --slo given: the built-in SLO's latency thresholds that are not vLLM bucket bounds are snapped to the nearest stricter bound (an objective at least as strict as written); to choose otherwise pass --off-bucket snap-up or --off-bucket refuse, --latency-source gateway (exact thresholds, measured at the Headroom gateway), or --slo FILE with bucket-bound thresholds";

impl SliArgs {
    /// The SLI options; `builtin` is true when the SLO is the built-in one (no `--slo`), where
    /// an off-bucket threshold is snapped down unless `--off-bucket` says otherwise (an explicit
    /// `--slo` file is refused by default). The second value is the note to print when that
    /// default applies.
    fn options(&self, builtin: bool) -> Result<(SliOptions, Option<&'static str>)> {
        let common = scope(&self.matchers, self.namespace.as_deref())?;
        let mut selectors = Selectors {
            class_label: self.class_label.clone(),
            gateway_common: common.clone(),
            common,
            ..Selectors::default()
        };
        if self.no_http_errors {
            selectors.http = None;
        }
        let options = SliOptions {
            selectors,
            latency_source: match self.latency_source {
                SourceArg::Vllm => LatencySource::Vllm,
                SourceArg::Gateway => LatencySource::Gateway,
            },
            off_bucket: match self.off_bucket {
                None if builtin => OffBucket::SnapDown,
                None | Some(OffBucketArg::Refuse) => OffBucket::Refuse,
                Some(OffBucketArg::SnapUp) => OffBucket::SnapUp,
                Some(OffBucketArg::SnapDown) => OffBucket::SnapDown,
            },
            classes: (!self.classes.is_empty()).then(|| self.classes.clone()),
        };
        let note = (builtin && self.off_bucket.is_none()).then_some(BUILTIN_SNAP_NOTE);
        Ok((options, note))
    }
}

/// The matchers of `--match` (alias `--selector`) and `--namespace`, added to every selector.
fn scope(matchers: &[String], namespace: Option<&str>) -> Result<Vec<Matcher>> {
    let mut common = matchers
        .iter()
        .map(|m| Matcher::parse(m).map_err(|e| anyhow!("--match {e}")))
        .collect::<Result<Vec<_>>>()?;
    if let Some(ns) = namespace {
        common.push(Matcher::eq("namespace", ns));
    }
    Ok(common)
}

/// Binding the output to what exists (rules, dashboard, autoscale).
#[derive(Debug, Args)]
struct CheckArgs {
    /// Query this Prometheus for every selector the output uses; one that matches no series is
    /// an error naming the served models, `job`s, namespaces and gateway classes it holds.
    #[arg(long, value_name = "PROMETHEUS_URL")]
    check_against: Option<String>,
    /// OpenAI-compatible server (vLLM) whose `GET /v1/models` must list every class matched as
    /// a served model name.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
}

impl CheckArgs {
    /// Checks `selectors` against `--check-against` and `classes` (matched as `class_label`
    /// values when `by_model`) against `--target`'s served models; without either flag, a
    /// warning when classes are matched as served model names, which nothing has verified.
    async fn check(
        &self,
        selectors: &[String],
        class_label: &str,
        classes: &[String],
        by_model: bool,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        let named: Vec<String> = classes.iter().filter(|c| *c != "*").cloned().collect();
        if let Some(url) = &self.target
            && by_model
        {
            let t = headroom_load::client::Target::new(url, None, None)
                .map_err(|e| anyhow!("--target {url}: {e}"))?;
            let (status, body) = t
                .get("/v1/models", 1 << 20)
                .await
                .map_err(|e| anyhow!("--target {url}: GET /v1/models: {e}"))?;
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                anyhow!("--target {url}: GET /v1/models ({status}) is not JSON: {e}")
            })?;
            let served: Vec<String> = v["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["id"].as_str().map(String::from))
                .collect();
            let missing = headroom_slo::check::unserved(&named, &served);
            if !missing.is_empty() {
                return Err(anyhow!(
                    "--target {url} serves {}; class(es) {} of slo.yaml are no served model, so {class_label}=\"<class>\" matches nothing. Classes are not model names: name a class after the model it runs on, pass --class-label for a label your scrape config adds, or classify requests with the Headroom gateway and use --latency-source gateway",
                    if served.is_empty() {
                        "no model".to_string()
                    } else {
                        served.join(", ")
                    },
                    missing.join(", ")
                ));
            }
        }
        if let Some(url) = &self.check_against {
            let prom = headroom_slo::prom_api::PromClient::new(url, Duration::from_secs(30))
                .map_err(|e| anyhow!("--check-against: {e}"))?;
            headroom_slo::check::check_selectors(&prom, selectors, class_label)
                .await
                .map_err(|e| anyhow!("{e}"))?;
        }
        if self.check_against.is_none() && self.target.is_none() && by_model && !named.is_empty() {
            warnings.push(format!(
                "class(es) {} are matched as {class_label}=\"<class>\" on vLLM's series, which carry the served model name, not a request class: unless these are your served model names the output matches nothing. Check with --target URL (its /v1/models) or --check-against PROMETHEUS_URL; map classes with --class-label, or classify at the Headroom gateway (--latency-source gateway)",
                named.join(", ")
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
struct RulesArgs {
    #[command(flatten)]
    io: IoArgs,
    #[command(flatten)]
    check: CheckArgs,
    #[command(flatten)]
    sli: SliArgs,
    /// Refuse (instead of skipping with a warning) when a burn-rate tier can never fire
    /// (factor × (1 − target) > 1).
    #[arg(long)]
    refuse_dead_tiers: bool,
    /// Mean queue-time threshold of the queue alert for classes without a queue_time objective.
    #[arg(long, default_value = "100ms")]
    queue_alert_mean: String,
    /// `for:` of the queue alert.
    #[arg(long, default_value = "5m")]
    queue_alert_for: String,
    /// Leave the queue-time alert out.
    #[arg(long)]
    no_queue_alert: bool,
    /// `for:` of the alert on a missing SLI series.
    #[arg(long, default_value = "15m")]
    absent_for: String,
    /// Leave the missing-series alert out.
    #[arg(long)]
    no_absent_alert: bool,
    /// Label added to every rule, `NAME=VALUE` (repeatable), e.g. `team=inference`.
    #[arg(long = "label", value_name = "NAME=VALUE")]
    labels: Vec<String>,
}

#[derive(Debug, Args)]
struct DashboardArgs {
    #[command(flatten)]
    io: IoArgs,
    #[command(flatten)]
    check: CheckArgs,
    /// Dashboard title.
    #[arg(long)]
    title: Option<String>,
    /// Stable dashboard uid (Grafana URL path).
    #[arg(long)]
    uid: Option<String>,
    /// Label carrying the model on vLLM series.
    #[arg(long, default_value = "model_name")]
    class_label: String,
    /// Matcher added to every query and variable, e.g. `job="vllm"` (repeatable).
    #[arg(long = "match", visible_alias = "selector", value_name = "MATCHER")]
    matchers: Vec<String>,
    /// Kubernetes namespace of the series: `namespace="NS"` is added to every query.
    #[arg(long)]
    namespace: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KindArg {
    /// A KEDA ScaledObject.
    Keda,
    /// An autoscaling/v2 HPA on External metrics, and prometheus-adapter values
    /// (--adapter-values FILE).
    Hpa,
}

#[derive(Debug, Args)]
struct AutoscaleArgs {
    #[command(flatten)]
    io: IoArgs,
    #[command(flatten)]
    check: CheckArgs,
    /// Label carrying the class on engine series.
    #[arg(long, default_value = "model_name")]
    class_label: String,
    /// Matcher added to every selector, e.g. `job="vllm"` (repeatable).
    #[arg(long = "match", visible_alias = "selector", value_name = "MATCHER")]
    matchers: Vec<String>,
    /// Which autoscaler to write: one object set, never both for one Deployment.
    #[arg(long, value_enum, default_value = "keda")]
    kind: KindArg,
    /// With --kind hpa: write the prometheus-adapter Helm values (rules.external) here.
    #[arg(long, value_name = "FILE")]
    adapter_values: Option<PathBuf>,
    /// Take the KV-use and waiting targets from a sweep's run directory: the capacity level's
    /// peak KV-cache use and mean waiting requests, less --headroom.
    #[arg(long, value_name = "RUN_DIR")]
    from: Option<PathBuf>,
    /// With --from: how far below the measured capacity to scale (`20%` or `0.2`).
    #[arg(long, default_value = "20%")]
    headroom: String,
    /// Class to scale (default: the SLO file's only class).
    #[arg(long)]
    class: Option<String>,
    /// Deployment running the vLLM replicas.
    #[arg(long, default_value = "vllm")]
    deployment: String,
    /// Namespace of the deployment; also scopes every query (`namespace="NS"`).
    #[arg(long)]
    namespace: Option<String>,
    /// Prometheus URL as seen from KEDA.
    #[arg(long, default_value = "http://prometheus-operated.monitoring.svc:9090")]
    prometheus_url: String,
    /// Fewest replicas.
    #[arg(long, default_value_t = 1)]
    min_replicas: u32,
    /// Most replicas.
    #[arg(long, default_value_t = 8)]
    max_replicas: u32,
    /// Target mean KV-cache use per engine, in (0, 1) (`0.8` or `80%`).
    #[arg(long, default_value = "0.8")]
    kv_usage_target: String,
    /// Target waiting requests per replica.
    #[arg(long, default_value_t = 2.0)]
    waiting_per_replica: f64,
    /// vLLM engines (data-parallel ranks) per replica.
    #[arg(long, default_value_t = 1)]
    engines_per_replica: u32,
    /// Averaging window of both signals (Prometheus duration).
    #[arg(long, default_value = "2m")]
    smoothing: String,
    /// Seconds of stable lower recommendations before scaling down.
    #[arg(long, default_value_t = 300)]
    scale_down_stabilization_s: u32,
}

#[derive(Debug, Args)]
struct BudgetArgs {
    #[command(flatten)]
    io: IoArgs,
    #[command(flatten)]
    sli: SliArgs,
    /// Prometheus-compatible base URL.
    #[arg(long)]
    prometheus: String,
    /// Evaluation time, Unix seconds (default: now).
    #[arg(long)]
    at: Option<f64>,
    /// Timeout of each query.
    #[arg(long, default_value = "30s", value_parser = crate::duration_arg::duration_arg)]
    timeout: Duration,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// OpenSLO v1 YAML file (one or more documents).
    file: PathBuf,
    /// Write the slo.yaml to this file instead of stdout.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Label carrying the class on engine series.
    #[arg(long, default_value = "model_name")]
    class_label: String,
    /// Budget consumption past which tuning freezes (OpenSLO has no such field).
    #[arg(long, default_value = "50%")]
    freeze_at: String,
}

/// Where an SLO came from: its name in messages and, for a file, its text (to find the line of
/// a field that a generator refuses).
struct Origin {
    name: String,
    text: Option<String>,
}

fn load_slo(path: Option<&Path>) -> Result<(SloFile, Origin)> {
    match path {
        Some(p) => {
            let text = headroom_core::input_file::read_to_string(
                p,
                headroom_core::input_file::MAX_CONFIG_BYTES,
            )
            .map_err(|e| anyhow!("{}: cannot read file: {e}", p.display()))?;
            let slo = SloFile::parse(&text, p).map_err(|e| anyhow!("{e}"))?;
            Ok((
                slo,
                Origin {
                    name: p.display().to_string(),
                    text: Some(text),
                },
            ))
        }
        None => Ok((
            SloFile::parse(DEFAULT_SLO_YAML, Path::new("built-in slo.yaml"))
                .map_err(|e| anyhow!("{e}"))?,
            Origin {
                name: "built-in slo.yaml".to_owned(),
                text: None,
            },
        )),
    }
}

/// Prefixes a generator error with the file's name and, when the field is written in the file,
/// its line and column (`slo.yaml:4:23: budget.window: …`, the line quoted under it). OpenSLO
/// fields (`openslo[1].spec.objectives[0].op`) are found in their document of the stream.
fn named(origin: &Origin, e: SloError) -> anyhow::Error {
    let hint = match &e {
        SloError::Invalid { message, .. } if message.contains("not a bucket bound") => {
            " (flags: --off-bucket snap-up|snap-down, or --latency-source gateway)"
        }
        _ => "",
    };
    if let (SloError::Invalid { field, message }, Some(text)) = (&e, &origin.text) {
        let loc = match field
            .strip_prefix("openslo[")
            .and_then(|r| r.split_once(']'))
        {
            Some((i, rest)) => i.parse::<usize>().ok().and_then(|i| {
                headroom_core::yaml::document_field_location(text, i, rest.trim_start_matches('.'))
            }),
            None => headroom_core::yaml::field_location(text, field),
        };
        if loc.is_some() {
            let at = headroom_core::yaml::YamlError::at(
                Path::new(&origin.name),
                text,
                loc,
                format!("{field}: {message}{hint}"),
            );
            return anyhow!("{at}");
        }
    }
    anyhow!("{}: {e}{hint}", origin.name)
}

/// Puts `note` before the warnings when a threshold was actually snapped.
fn add_note(r: &mut Rendered, note: Option<&str>) {
    if let Some(n) = note
        && r.warnings.iter().any(|w| w.contains("(snapped "))
    {
        r.warnings.insert(0, n.to_owned());
    }
}

fn emit(r: Rendered, out: Option<&Path>) -> Result<()> {
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    match out {
        Some(p) => headroom_report::write_atomic(p, r.text.as_bytes())
            .with_context(|| format!("cannot write {}", p.display())),
        None => crate::write_stdout(&r.text).context("cannot write to stdout"),
    }
}

/// The name of a run's only phase (a one-class sweep without a mix).
fn only_phase(results: &serde_json::Value) -> Option<String> {
    match results["phases"].as_array().map(Vec::as_slice) {
        Some([p]) => p["name"].as_str().map(String::from),
        _ => None,
    }
}

fn ratio_flag(name: &str, v: &str) -> Result<f64> {
    parse_ratio(v).map_err(|e| anyhow!("--{name} {v:?}: {e}"))
}

/// Runs `headroom slo …`; returns the exit status (0).
///
/// # Errors
/// A bad SLO file or flag, or a generator's refusal, naming the file and field; Prometheus
/// errors naming the URL (the caller exits with status 2).
pub async fn run(a: SloArgs) -> Result<i32> {
    match a.command {
        SloCommand::Rules(r) => {
            let (slo, origin) = load_slo(r.io.slo.as_deref())?;
            let mut labels = BTreeMap::new();
            for l in &r.labels {
                let (k, v) = l
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--label {l:?}: expected NAME=VALUE"))?;
                labels.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            let queue_alert = if r.no_queue_alert {
                None
            } else {
                Some(QueueAlert {
                    default_mean_s: parse_duration_s(&r.queue_alert_mean)
                        .map_err(|e| anyhow!("--queue-alert-mean {:?}: {e}", r.queue_alert_mean))?,
                    for_: r.queue_alert_for.clone(),
                })
            };
            let (sli, note) = r.sli.options(r.io.slo.is_none())?;
            let opts = RulesOptions {
                sli,
                dead_tiers: if r.refuse_dead_tiers {
                    DeadTiers::Refuse
                } else {
                    DeadTiers::Skip
                },
                queue_alert,
                absent_for: (!r.no_absent_alert).then(|| r.absent_for.clone()),
                labels,
                ..RulesOptions::default()
            };
            let mut out = headroom_slo::rules(&slo, &opts).map_err(|e| named(&origin, e))?;
            add_note(&mut out, note);
            let (slis, _) =
                headroom_slo::sli::resolve(&slo, &opts.sli).map_err(|e| named(&origin, e))?;
            let selectors: Vec<String> = slis.iter().map(|s| s.total_series()).collect();
            let classes =
                headroom_slo::sli::classes(&slo, &opts.sli).map_err(|e| named(&origin, e))?;
            let by_model =
                opts.sli.latency_source == LatencySource::Vllm && r.sli.class_label == "model_name";
            r.check
                .check(
                    &selectors,
                    &r.sli.class_label,
                    &classes,
                    by_model,
                    &mut out.warnings,
                )
                .await?;
            emit(out, r.io.out.as_deref())?;
        }
        SloCommand::Dashboard(d) => {
            let (slo, origin) = load_slo(d.io.slo.as_deref())?;
            let def = DashboardOptions::default();
            let opts = DashboardOptions {
                title: d.title.clone().unwrap_or(def.title),
                uid: d.uid.clone().unwrap_or(def.uid),
                class_label: d.class_label.clone(),
                common: scope(&d.matchers, d.namespace.as_deref())?,
            };
            let mut out = headroom_slo::dashboard(&slo, &opts).map_err(|e| named(&origin, e))?;
            // Every panel reads the engine's series under the common matchers; the variables
            // pick the models and engines that exist.
            let selectors = [headroom_slo::promql::selector(
                headroom_slo::catalogue::VLLM_NUM_REQUESTS_RUNNING,
                &opts.common,
            )];
            d.check
                .check(&selectors, &d.class_label, &[], false, &mut out.warnings)
                .await?;
            emit(out, d.io.out.as_deref())?;
        }
        SloCommand::Autoscale(s) => {
            let (slo, origin) = load_slo(s.io.slo.as_deref())?;
            let common = scope(&s.matchers, None)?;
            let mut opts = AutoscaleOptions {
                class: s.class.clone(),
                sli: SliOptions {
                    selectors: Selectors {
                        class_label: s.class_label.clone(),
                        common,
                        ..Selectors::default()
                    },
                    ..SliOptions::default()
                },
                deployment: s.deployment.clone(),
                namespace: s.namespace.clone(),
                prometheus_url: s.prometheus_url.clone(),
                min_replicas: s.min_replicas,
                max_replicas: s.max_replicas,
                kv_usage_target: ratio_flag("kv-usage-target", &s.kv_usage_target)?,
                waiting_per_replica: s.waiting_per_replica,
                engines_per_replica: s.engines_per_replica,
                smoothing: s.smoothing.clone(),
                scale_down_stabilization_s: s.scale_down_stabilization_s,
                kind: match s.kind {
                    KindArg::Keda => AutoscaleKind::Keda,
                    KindArg::Hpa => AutoscaleKind::Hpa,
                },
            };
            let mut notes = Vec::new();
            if let Some(dir) = &s.from {
                let path = headroom_sweep::run_dir::RunDir::new(dir).results();
                let text = headroom_sweep::run_dir::read_text(&path)
                    .with_context(|| format!("--from: cannot read {}", path.display()))?;
                let results: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("--from: {} is not JSON", path.display()))?;
                let class = match &s.class {
                    Some(c) => c.clone(),
                    None => only_phase(&results)
                        .ok_or_else(|| anyhow!("--from {}: the run has several phases; name the one to scale with --class NAME", dir.display()))?,
                };
                // The run's phase is the class to scale; the SLO's class matcher still applies.
                let t = headroom_slo::autoscale::from_sweep(
                    &results,
                    &class,
                    ratio_flag("headroom", &s.headroom)?,
                )
                .map_err(|e| anyhow!("--from {}: {e}", dir.display()))?;
                opts.kv_usage_target = t.kv_usage_target;
                if let Some(w) = t.waiting_per_replica {
                    opts.waiting_per_replica = w;
                }
                notes = t.notes;
            }
            let out = headroom_slo::autoscale(&slo, &opts).map_err(|e| named(&origin, e))?;
            let mut objects = out.objects;
            let classes: Vec<String> = match &opts.class {
                Some(c) => vec![c.clone()],
                None => {
                    headroom_slo::sli::classes(&slo, &opts.sli).map_err(|e| named(&origin, e))?
                }
            };
            s.check
                .check(
                    &out.selectors,
                    &s.class_label,
                    &classes,
                    s.class_label == "model_name",
                    &mut objects.warnings,
                )
                .await?;
            // The sweep's reading goes into the file, as comments, and to stderr.
            let comments: String = notes.iter().map(|n| format!("# {n}\n")).collect();
            objects.text = comments + &objects.text;
            objects.warnings.extend(notes);
            match (out.adapter_values, &s.adapter_values) {
                (Some(values), Some(p)) => headroom_report::write_atomic(p, values.as_bytes())
                    .with_context(|| format!("cannot write {}", p.display()))?,
                (Some(_), None) => objects.warnings.push(
                    "the HPA's External metrics need prometheus-adapter rules: pass --adapter-values FILE to write them".into(),
                ),
                (None, Some(_)) => {
                    return Err(anyhow!("--adapter-values: only --kind hpa has prometheus-adapter rules (KEDA queries Prometheus itself)"));
                }
                (None, None) => {}
            }
            emit(objects, s.io.out.as_deref())?;
        }
        SloCommand::Budget(b) => {
            let (slo, origin) = load_slo(b.io.slo.as_deref())?;
            if b.timeout.is_zero() {
                bail!("--timeout 0: expected a positive duration such as 30s");
            }
            let timeout = b.timeout;
            let (sli, note) = b.sli.options(b.io.slo.is_none())?;
            let opts = BudgetOptions {
                sli,
                at: b.at,
                timeout,
                ..BudgetOptions::default()
            };
            let mut out = headroom_slo::budget_report(&b.prometheus, &slo, &opts)
                .await
                .map_err(|e| match e {
                    e @ SloError::Prometheus { .. } => anyhow!("{e}"),
                    e => named(&origin, e),
                })?;
            add_note(&mut out, note);
            emit(out, b.io.out.as_deref())?;
        }
        SloCommand::Import(i) => {
            let text = headroom_core::input_file::read_to_string(
                &i.file,
                headroom_core::input_file::MAX_CONFIG_BYTES,
            )
            .with_context(|| format!("cannot read {}", i.file.display()))?;
            let opts = ImportOptions {
                class_label: i.class_label.clone(),
                freeze_at: ratio_flag("freeze-at", &i.freeze_at)?,
            };
            let origin = Origin {
                name: i.file.display().to_string(),
                text: Some(text),
            };
            let (file, warnings) =
                headroom_slo::import_openslo(origin.text.as_deref().unwrap_or_default(), &opts)
                    .map_err(|e| named(&origin, e))?;
            let yaml = headroom_slo::to_slo_yaml(&file);
            // The result must read back as an SLO file: check before handing it out.
            SloFile::parse(&yaml, Path::new("imported slo.yaml")).map_err(|e| {
                anyhow!(
                    "{}: the converted SLO does not validate: {e}",
                    i.file.display()
                )
            })?;
            emit(
                Rendered {
                    text: yaml,
                    warnings,
                },
                i.out.as_deref(),
            )?;
        }
    }
    Ok(0)
}
