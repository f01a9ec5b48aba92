//! What the caller knows beyond the window and the client's view: where the window was read from
//! ([`Origin`]) and what the workload spec says about shared prefixes ([`PrefixPlan`]).
//!
//! The origin decides what a hint about missing data tells the reader to do: a live server can be
//! polled again with one more flag, a saved sweep run cannot be scraped again (the sweep must be
//! rerun), a Prometheus range holds only what Prometheus scraped. The prefix plan decides whether
//! a low prefix-cache hit ratio means anything: a workload with no shared prefix offers the cache
//! nothing to reuse.
//!
//! Nothing here reads a file or a flag; `headroom diagnose` fills a [`Setting`] from its
//! arguments and the run directory's `workload.yaml`.

/// Where a window was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// Not said (what [`crate::assess`] assumes): hints name what works in every mode.
    #[default]
    Unspecified,
    /// `headroom diagnose --url`, polling a live server.
    Live,
    /// `headroom sweep`, judging a level while it runs.
    Sweep,
    /// `headroom diagnose --from RUN_DIR`: the scrapes a finished sweep saved.
    RunDir,
    /// `headroom diagnose --from FILE…`: saved scrape files.
    ScrapeFiles,
    /// `headroom diagnose --prometheus`: a range read from a Prometheus-compatible server.
    Prometheus,
}

impl Origin {
    /// What to do to get GPU telemetry when a window has none (step 5's remark). `dcgm_scraped`:
    /// dcgm-exporter was scraped for the window ([`Setting::dcgm_scraped`]) and yet no GPU
    /// series came of it, so the fix is at the exporter, not a missing flag.
    pub fn gpu_telemetry_hint(self, dcgm_scraped: bool) -> String {
        if dcgm_scraped && self != Origin::Prometheus {
            return "no GPU series (DCGM_FI_*) came from dcgm-exporter: check that its scrapes succeeded and that it sees the GPUs (its /metrics lists DCGM_FI_DEV_GPU_UTIL per gpu)".to_owned();
        }
        match self {
            Origin::Unspecified => "no dcgm-exporter data: GPU telemetry comes from a dcgm-exporter read beside the engine (--dcgm URL on `headroom sweep` or `headroom diagnose --url`, dcgm-exporter scrape files given to --from, or DCGM_FI_* series in Prometheus)",
            Origin::Live => "no dcgm-exporter data: add --dcgm URL (dcgm-exporter's /metrics, e.g. http://127.0.0.1:9400/metrics) beside --url",
            Origin::Sweep => "no dcgm-exporter data: run the sweep with --dcgm URL (dcgm-exporter's /metrics, e.g. http://127.0.0.1:9400/metrics) to record GPU telemetry",
            Origin::RunDir => "no dcgm-exporter data in this run: diagnose cannot scrape the past; rerun `headroom sweep` with --dcgm URL (dcgm-exporter's /metrics, e.g. http://127.0.0.1:9400/metrics) to record GPU telemetry",
            Origin::ScrapeFiles => "no dcgm-exporter data among the --from files: add dcgm-exporter scrapes taken over the same span (curl http://HOST:9400/metrics > dcgm.prom), each as one more --from FILE[@unix_s]",
            Origin::Prometheus => "no dcgm-exporter series (DCGM_FI_*) in Prometheus over this range: have Prometheus scrape dcgm-exporter (its /metrics, port 9400 by default) beside the engine",
        }
        .to_owned()
    }

    /// What to do when the scrape given as the engine's is a Headroom gateway's `/metrics` (the
    /// `hint` of [`headroom_signals::WindowError::NoEngineMetrics`], starting with `; `).
    pub fn gateway_metrics_hint(self) -> String {
        let what = "; this is a Headroom gateway's /metrics, not the engine's:";
        let how = match self {
            Origin::Live => {
                "point --url at the engine's own, e.g. http://ENGINE:8000/metrics (the gateway's upstream)"
            }
            Origin::Sweep => {
                "give the sweep the engine's own with --metrics-url http://ENGINE:8000/metrics (the gateway's upstream)"
            }
            Origin::RunDir => {
                "diagnose cannot scrape the past; rerun `headroom sweep` with --metrics-url http://ENGINE:8000/metrics (the gateway's upstream)"
            }
            Origin::ScrapeFiles => {
                "scrape the engine's own (the gateway's upstream, e.g. http://ENGINE:8000/metrics) and give that file to --from"
            }
            Origin::Prometheus | Origin::Unspecified => {
                "read the engine's own metrics (the gateway's upstream, e.g. http://ENGINE:8000/metrics)"
            }
        };
        format!("{what} {how}")
    }
}

/// What a workload spec says about shared prefixes over the requests of one window (its phase's
/// classes, weighted by their mix weights). Source: the spec's `shared_prefix_tokens` and
/// `dataset` per class (`headroom_load::workload::ClassSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PrefixPlan {
    /// Share (0–1, by mix weight) of the requests whose class sets `shared_prefix_tokens` > 0:
    /// every request of such a class starts with the same leading text.
    pub shared_share: f64,
    /// Shared-prefix tokens per request, mean over the mix by weight (0 for classes without one),
    /// in tokens of the spec (the server's tokenizer may count a few more or fewer).
    pub shared_tokens_mean: f64,
    /// Share (0–1, by mix weight) of the requests whose prompts come from a dataset: their text
    /// may share prefixes the spec does not declare.
    pub dataset_share: f64,
}

impl PrefixPlan {
    /// Whether the workload offers the prefix cache nothing to reuse: no class sets a shared
    /// prefix and no prompt comes from a dataset.
    pub fn nothing_shared(&self) -> bool {
        self.shared_share <= 0.0 && self.dataset_share <= 0.0
    }
}

/// What the caller knows beyond the window and the client's view. [`Setting::default()`] is
/// what [`crate::assess`] uses: origin unspecified, workload unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setting {
    /// Where the window was read from.
    pub origin: Origin,
    /// dcgm-exporter was scraped for the window (a `--dcgm` URL polled, dcgm-exporter scrapes
    /// among the files or in the run directory), whether or not GPU series came of it.
    pub dcgm_scraped: bool,
    /// The workload's shared prefixes when its spec is known (a sweep, or `diagnose --from
    /// RUN_DIR` with the run's `workload.yaml`); `None` when unknown (a live server, scrape
    /// files, a Prometheus range).
    pub prefixes: Option<PrefixPlan>,
}
