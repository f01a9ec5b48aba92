//! `headroom gateway`: the SLO-measuring reverse proxy in front of OpenAI-compatible servers.

use anyhow::{Context, Result};
use clap::Args;
use headroom_core::SloFile;
use headroom_gateway::config::{ClassFile, TokenRange};
use headroom_gateway::{GatewayConfig, GatewayFile, start};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Arguments of `headroom gateway`.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Address to listen on; the gateway's own metrics are at /metrics here.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Upstream base URL (http://HOST:PORT); repeat for a pool served round-robin.
    #[arg(long)]
    pub upstream: Vec<String>,
    /// slo.yaml: every latency threshold in it becomes a histogram bucket bound.
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// gateway.yaml: classes, tenants, pools, concurrency limits, timeouts, keys, headers.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Upstream for long-context requests (repeatable); adds a first class `long_context`
    /// with its own pool.
    #[arg(long)]
    pub long_context_upstream: Vec<String>,
    /// Estimated prompt tokens from which a request is long-context.
    #[arg(long, default_value_t = 8192)]
    pub long_context_tokens: u64,
    /// Print gateway.yaml with every key commented (classes, admission, timeouts, keys) and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// Runs the gateway until Ctrl-C.
///
/// # Errors
/// Unreadable or invalid `--config` / `--slo` (file, line and field named), no upstream, or a
/// listen address that cannot be bound.
pub async fn run(a: GatewayArgs) -> Result<()> {
    if a.print_config {
        crate::write_stdout(headroom_gateway::config::REFERENCE_YAML)
            .context("cannot write to stdout")?;
        return Ok(());
    }
    let (mut file, origin) = match &a.config {
        Some(p) => (GatewayFile::load(p)?, p.display().to_string()),
        None => (GatewayFile::default(), "command line".to_string()),
    };
    if !a.long_context_upstream.is_empty() {
        file.pools
            .insert("long_context".into(), a.long_context_upstream.clone());
        file.classes.insert(
            0,
            ClassFile {
                name: "long_context".into(),
                prompt_tokens: Some(TokenRange {
                    min: Some(a.long_context_tokens),
                    max: None,
                }),
                pool: Some("long_context".into()),
                ..ClassFile::default()
            },
        );
    }
    let slo = match &a.slo {
        Some(p) => Some(SloFile::load(p)?),
        None => None,
    };
    let cfg = GatewayConfig::resolve(a.listen, &a.upstream, file, &origin, slo)?;
    // Every class the gateway labels requests with, the default class (the last) included: it
    // is classified too, as everything no rule matches.
    let classes: Vec<&str> = cfg.classes.iter().map(|c| c.name.as_str()).collect();
    let unmatched = cfg.slo.as_ref().map(|s| unmatched_slo_classes(s, &classes));
    if let (Some(unmatched), Some(p)) = (unmatched, &a.slo)
        && !unmatched.is_empty()
    {
        eprintln!(
            "headroom gateway: note: {} names class(es) {} that no class of {origin} classifies requests into (gateway classes: {}); their thresholds become histogram buckets, but such requests are counted under another class. Add classes with these names to --config (by route, model, prompt length, max_tokens or tenant) to measure them apart.",
            p.display(),
            unmatched.join(", "),
            classes.join(", ")
        );
    }
    let classes = classes.join(", ");
    let mut stop =
        crate::StopSignal::install().context("cannot install the Ctrl-C and SIGTERM handlers")?;
    let handle = start(cfg).await.context("cannot start the gateway")?;
    eprintln!(
        "headroom gateway on http://{} (metrics at /metrics); classes: {classes}; Ctrl-C or SIGTERM stops",
        handle.addr
    );
    let sig = stop.recv().await;
    let drain = handle.gateway.config().timeouts.drain;
    eprintln!(
        "headroom gateway: {sig}: refusing new connections (/metrics included); open requests may finish within {:.0} s (timeouts.drain), then streams still open end with an error event",
        drain.as_secs_f64()
    );
    let t0 = std::time::Instant::now();
    handle.shutdown().await;
    eprintln!(
        "headroom gateway: stopped after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Classes named in `slo.yaml` (other than the `*` default) that no gateway class carries: the
/// gateway labels requests only with its own classes, so objectives of these classes have no
/// series of their own.
fn unmatched_slo_classes(slo: &SloFile, gateway_classes: &[&str]) -> Vec<String> {
    slo.objectives
        .keys()
        .filter(|k| k.as_str() != "*" && !gateway_classes.contains(&k.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slo_classes_without_a_gateway_class_are_named() {
        let slo = SloFile::parse(
            "objectives:\n  '*': {ttft: {p95: 1s}}\n  chat: {ttft: {p95: 250ms}}\n  long_doc: {ttft: {p95: 2s}}\n",
            std::path::Path::new("slo.yaml"),
        )
        .unwrap();
        assert_eq!(
            unmatched_slo_classes(&slo, &["default"]),
            vec!["chat".to_string(), "long_doc".to_string()]
        );
        assert_eq!(
            unmatched_slo_classes(&slo, &["chat", "other"]),
            vec!["long_doc".to_string()]
        );
        assert!(unmatched_slo_classes(&slo, &["long_doc", "chat"]).is_empty());
    }

    /// The start-up note once said the default class was not classified: it compared the SLO's
    /// classes with the rule classes only. The resolved configuration's classes include the
    /// default class, which is where every request no rule matches goes.
    #[test]
    fn the_default_class_counts_as_classified() {
        let slo = SloFile::parse(
            "objectives:\n  '*': {ttft: {p95: 1s}}\n  chat: {ttft: {p95: 250ms}}\n  long: {ttft: {p95: 2s}}\n",
            std::path::Path::new("slo.yaml"),
        )
        .unwrap();
        let file = GatewayFile::parse(
            "classes:\n  - {name: long, prompt_tokens: {min: 1000}}\ndefault_class: {name: chat}\n",
            std::path::Path::new("gateway.yaml"),
        )
        .unwrap();
        let cfg = GatewayConfig::resolve(
            "127.0.0.1:0".parse().unwrap(),
            &["http://127.0.0.1:1".to_string()],
            file,
            "gateway.yaml",
            Some(slo),
        )
        .unwrap();
        let classes: Vec<&str> = cfg.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(classes, ["long", "chat"]);
        assert!(unmatched_slo_classes(cfg.slo.as_ref().unwrap(), &classes).is_empty());
    }
}
