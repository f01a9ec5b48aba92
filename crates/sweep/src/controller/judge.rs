//! Judging a level: the client's objectives, the early stop, the engine's view, refused and
//! inconclusive verdicts, repeats combined, and a level judged again from its run directory.

use super::level_loop::{LOST_STREAK, transport_streak};
use super::phase::{ignore_eos_share, is_server_only, phase_spec, prefix_plan, send_lag_limit_s};
use super::{LevelTick, Phase, TickSlot};
use crate::evaluate::{ClientEvidence, evaluate};
use crate::server_view::{ClientTotals, reconcile, server_view, ttft_remainder};
use headroom_core::objective::{Bound, ObjectiveId, Source};
use headroom_core::run::{LevelResult, LoadMode, ObjectiveResult, ServerView, TokenCounts};
use headroom_core::slo::SloFile;
use headroom_core::{LatencySignal, Objective, Outcome, SloSpec, Verdict};
use headroom_diagnose::{ClientView, Origin, Setting, WorkloadDrift, assess_with};
use headroom_load::prompt::ClassPlan;
use headroom_load::recorder::{ClassRecording, LevelRecording};
use headroom_load::runner::LevelCheck;
use headroom_signals::{Scrape, Window, WindowOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The class's histograms by signal, borrowed: the early-stop check builds this about once a
/// second during a level.
fn latency_map(c: &ClassRecording) -> BTreeMap<LatencySignal, &hdrhistogram::Histogram<u64>> {
    let mut m = BTreeMap::new();
    m.insert(LatencySignal::Ttft, &c.ttft);
    m.insert(LatencySignal::Itl, &c.itl);
    m.insert(LatencySignal::Tpot, &c.tpot);
    m.insert(LatencySignal::E2e, &c.e2e);
    if !c.queue_time.is_empty() {
        m.insert(LatencySignal::QueueTime, &c.queue_time);
    }
    m
}

/// Client objectives of every class in the phase (ids prefixed `class/` in the mix).
pub(crate) fn client_objectives(
    slo: &SloFile,
    phase: &Phase,
    rec: &LevelRecording,
    final_window: bool,
) -> Vec<ObjectiveResult> {
    let mix = phase.plans.len() > 1;
    let mut out = Vec::new();
    for (i, (plan, c)) in phase.plans.iter().zip(&rec.classes).enumerate() {
        let spec = slo.spec_for(&plan.name);
        // Queue time is judged here when the server reported it per request, or when the client's
        // TTFT already bounds it (below); otherwise the engine's histogram decides it (diagnose).
        let per_request = !c.queue_time.is_empty();
        let mut bounded: Vec<ObjectiveResult> = Vec::new();
        let client_objs: Vec<Objective> = spec
            .objectives
            .into_iter()
            .filter(|o| {
                if !is_server_only(o) {
                    return true;
                }
                // Per-request queue times arrive with a request's last chunk, so with answers
                // longer than the window few of them exist: below the percentile's minimum, the
                // TTFT bound (every window start) is tried first.
                let enough = match o {
                    Objective::Latency { percentile, .. } => {
                        c.queue_time.len()
                            >= headroom_core::stats::min_samples_for_percentile(*percentile)
                    }
                    Objective::ErrorRate { .. } => true,
                };
                if !(per_request && enough)
                    && let Some(r) =
                        queue_bound_by_ttft(o, &c.ttft, Some(&c.ttft_censored_age), final_window)
                {
                    bounded.push(r);
                    return false;
                }
                per_request
            })
            .collect();
        // Errors are counted over every request of the level that ended (warm-up, window and
        // drain): an error is an event of the offered load whenever the request began, it is
        // what the server's counters see, and with answers longer than the window (the
        // built-in workload's 10-17 s against 5 s) requests that *start* in the window rarely
        // finish in it. `LevelResult::level_outcomes` holds the same counts, so levels.csv and
        // the reports show the objective's figures.
        let outcomes = rec.class_totals.get(i).map_or(&c.outcomes, |t| &t.outcomes);
        let ev = ClientEvidence {
            latency: latency_map(c),
            outcomes,
            ttft_censored: Some(&c.ttft_censored_age),
        };
        for mut r in evaluate(&client_objs, &ev, final_window)
            .into_iter()
            .chain(bounded)
        {
            if mix {
                r.id = r.id.in_class(&plan.name);
                r.description = format!("{}: {}", plan.name, r.description);
            }
            out.push(r);
        }
    }
    out
}

/// The check the runner calls during the window: stop early once a breach is certain; at the
/// end of the base window, continue (up to `measure_max`) only while an objective is undecided.
pub(super) fn early_stop_check(
    phase: &Phase,
    slo: &SloFile,
    measure: Duration,
    measure_max: Duration,
    ticks: TickSlot,
) -> LevelCheck {
    let phase = phase.clone();
    let slo = slo.clone();
    Arc::new(move |rec: &LevelRecording, elapsed: Duration| {
        // A server that refuses every request: stop offering load now (the level is then
        // checked for a lost server).
        if transport_streak(rec) >= LOST_STREAK {
            return true;
        }
        let results = client_objectives(&slo, &phase, rec, false);
        ticks.send_replace(Some(LevelTick {
            window_elapsed: elapsed,
            started: rec.started,
            finished: rec.classes.iter().flat_map(|c| c.outcomes.values()).sum(),
            objectives: results.clone(),
        }));
        if results.iter().any(|r| r.verdict == Verdict::Fail) {
            return true;
        }
        if elapsed < measure {
            return false;
        }
        // Past the base window: keep measuring only while an objective has too few samples to
        // estimate its percentile at all, and can still gather them by the longest window. (With
        // enough samples an undecided objective is settled by its point estimate.)
        // A request is recorded when it ends, but every request started in the window will
        // give one TTFT (and queue-time) sample: count those for per-request objectives.
        // An objective whose 95 % interval still straddles its target gets up to the longest
        // window: more samples narrow the interval, and a verdict a rerun would repeat is worth
        // the time; past it the point estimate decides and the level is labelled borderline.
        // Only while the samples the same share needs to be certain can arrive in time (a share
        // at the threshold itself never becomes certain).
        let borderline_until = measure_max;
        let growth = borderline_until.as_secs_f64() / elapsed.as_secs_f64().max(1e-3);
        if elapsed < borderline_until
            && results.iter().any(|r| {
                // Every request started in the window gives one TTFT (and queue-time) sample,
                // although it is recorded when it ends (a long answer's TTFT only then).
                let per_request = one_sample_per_started_request(&r.id);
                let k = r.share.map_or(r.samples, |s| s.n);
                let have = if per_request { k.max(rec.started) } else { k };
                let need = match r.share {
                    // The share seen so far: the samples at which it would be certain.
                    Some(s) if s.n > 0 && s.bad > 0 => s.samples_to_decide(),
                    // None above the threshold yet (or not recorded yet): the fewest samples
                    // any certain PASS needs (73 for a p95: z²·0.95/0.05).
                    _ => headroom_core::stats::samples_to_decide(0, 1, r.objective_allowed_share()),
                };
                r.verdict == Verdict::Inconclusive
                    && need.is_some_and(|need| have < need && need as f64 <= have as f64 * growth)
            })
        {
            return false;
        }
        let max_s = measure_max.as_secs_f64();
        let el = elapsed.as_secs_f64().max(1e-3);
        !results.iter().any(|r| {
            let need = r.needed_samples();
            let per_request = one_sample_per_started_request(&r.id);
            let n = if per_request {
                r.samples.max(rec.started)
            } else {
                r.samples
            };
            r.verdict == Verdict::Inconclusive && n < need && n as f64 * max_s / el >= need as f64
        })
    })
}

/// Whether every request started in the window gives the objective one sample, although it is
/// recorded when the request ends (TTFT and queue time; a long answer's TTFT only then).
fn one_sample_per_started_request(id: &ObjectiveId) -> bool {
    matches!(
        id.signal(),
        Some(LatencySignal::Ttft | LatencySignal::QueueTime)
    )
}

/// Every request's engine queue time is at most its TTFT (TTFT = frontend + queue + prefill), so
/// when the client's TTFT meets a queue-time objective's threshold at its percentile, the queue
/// time does too — for exactly the requests of the window. The engine's own histogram cannot say
/// this as well: vLLM observes it when a request finishes, so requests started in the warm-up
/// count in the window. Returns the PASS, or `None` when the bound does not settle it.
fn queue_bound_by_ttft(
    o: &Objective,
    ttft: &hdrhistogram::Histogram<u64>,
    ttft_censored: Option<&hdrhistogram::Histogram<u64>>,
    final_window: bool,
) -> Option<ObjectiveResult> {
    let Objective::Latency {
        signal: LatencySignal::QueueTime,
        percentile,
        threshold_s,
    } = o
    else {
        return None;
    };
    let proxy = Objective::Latency {
        signal: LatencySignal::Ttft,
        percentile: *percentile,
        threshold_s: *threshold_s,
    };
    let none = BTreeMap::new();
    // Requests with no first token after more than the threshold make the bound fail, as
    // they should: their queue time is unknown.
    let ev = ClientEvidence {
        latency: BTreeMap::from([(LatencySignal::Ttft, ttft)]),
        outcomes: &none,
        ttft_censored,
    };
    let r = evaluate(&[proxy], &ev, final_window).pop()?;
    (r.verdict == Verdict::Pass).then(|| ObjectiveResult {
        // An upper bound on the queue-time share: as certain as the TTFT count behind it.
        share: r.share,
        id: o.id(),
        description: o.describe(),
        threshold: *threshold_s,
        observed: None,
        bound: Bound::Exact,
        // The client's TTFT is the evidence.
        source: Some(Source::Client),
        verdict: Verdict::Pass,
        samples: r.samples,
        reason: format!(
            "{} (queue time ≤ TTFT for every request): TTFT p{} = {}; {}",
            headroom_diagnose::QUEUE_BOUND_BY_TTFT,
            headroom_core::slo::fmt_num(*percentile),
            r.observed
                .map(headroom_core::slo::fmt_duration_s)
                .unwrap_or_default(),
            r.reason
        ),
    })
}

/// The objectives the engine's metrics judge for a whole mix: `spec` without the server-only
/// objectives (queue time) that every class already judged from the client's side (per-request
/// queue times, or bounded by its TTFT: a `{class}/{id}` row in `client_rows`). The engine's
/// histogram holds the requests that *finished* in the window, many of them queued behind the
/// warm-up's first burst: as an engine-wide verdict it failed levels whose every class passed
/// on window evidence.
pub(super) fn mix_engine_spec(
    spec: &SloSpec,
    plans: &[ClassPlan],
    client_rows: &[ObjectiveResult],
) -> SloSpec {
    let judged_by_every_class = |o: &Objective| {
        plans.iter().all(|p| {
            let id = o.id().in_class(&p.name);
            client_rows.iter().any(|r| r.id == id)
        })
    };
    SloSpec {
        objectives: spec
            .objectives
            .iter()
            .filter(|o| !is_server_only(o) || !judged_by_every_class(o))
            .cloned()
            .collect(),
    }
}

/// The engine's FAIL rows for the mix's server-only objectives that every class settled from
/// its TTFT (`{class}/{id}` rows, no engine row `{id}`) and the engine's histogram breaches with
/// certainty ([`headroom_diagnose::engine_overrules_bounds`]).
fn overruled_bounds(
    w: &Window,
    spec: &SloSpec,
    rows: &[ObjectiveResult],
    started_before_window: Option<u64>,
) -> Vec<ObjectiveResult> {
    spec.objectives
        .iter()
        .filter(|o| is_server_only(o) && !rows.iter().any(|r| r.id == o.id()))
        .filter_map(|o| {
            let bounds: Vec<&ObjectiveResult> = rows
                .iter()
                .filter(|r| r.id.class().is_some() && r.id.is(o))
                .collect();
            headroom_diagnose::engine_overrules_bounds(w, o, &bounds, started_before_window)
        })
        .collect()
}

/// A level judged again from what its run directory holds, as [`Sweep::run`](super::Sweep::run)
/// judged it: the client's recording (`histograms/L###.json`), every engine and dcgm-exporter
/// scrape of the level (`scrapes/`, in order), the run's `slo.yaml` and the phase rebuilt from its
/// `workload.yaml`. `recorded` is the level as `results.json` has it: its histogram file, its
/// scrape files, and a void the sweep applied after judging (`aborted`, `interrupted`, `server
/// lost`, in its `window_note`), which no recording shows. Returns the level and the index of the
/// engine scrape that opens its measurement window (the one taken when the warm-up ended).
pub fn rejudge_level(
    phase: &Phase,
    slo: &SloFile,
    rec: &LevelRecording,
    engine_scrapes: &[Scrape],
    dcgm_scrapes: &[Scrape],
    recorded: &LevelResult,
) -> (LevelResult, usize) {
    // The sweep opens the window at its second scrape when it had a start scrape and a
    // warm-up; the start scrape is taken before the warm-up, the second when it ends.
    let window_from = usize::from(
        rec.warmup_s > 0.0
            && engine_scrapes
                .first()
                .is_some_and(|s| s.at_unix_s < rec.started_unix_s - rec.warmup_s / 2.0),
    );
    let spec = phase_spec(slo, phase);
    let mut level = judge_level(JudgeInput {
        phase,
        slo,
        spec: &spec,
        rec,
        window_from,
        engine_scrapes,
        dcgm_scrapes,
        scrape_files: recorded
            .server
            .as_ref()
            .map(|s| s.scrapes.clone())
            .unwrap_or_default(),
        hist_file: recorded.histograms.clone(),
        notes: Vec::new(),
    });
    for state in ["aborted", "interrupted", "server lost"] {
        if let Some(why) = recorded.window_note.strip_prefix(&format!("{state}: ")) {
            void_level(&mut level, state, why);
        }
    }
    (level, window_from)
}

/// Samples an objective needs before its percentile is an observation (`ttft_p95` → 20); error
/// objectives need one finished request.
pub(super) struct JudgeInput<'a> {
    pub(super) phase: &'a Phase,
    pub(super) slo: &'a SloFile,
    pub(super) spec: &'a SloSpec,
    pub(super) rec: &'a LevelRecording,
    /// Index of the engine scrape that opens the measurement window.
    pub(super) window_from: usize,
    pub(super) engine_scrapes: &'a [Scrape],
    pub(super) dcgm_scrapes: &'a [Scrape],
    pub(super) scrape_files: Vec<String>,
    pub(super) hist_file: String,
    pub(super) notes: Vec<String>,
}

pub(super) fn judge_level(j: JudgeInput<'_>) -> LevelResult {
    let rec = j.rec;
    let total = rec.total();
    let mix = j.phase.plans.len() > 1;
    let mut objectives = client_objectives(j.slo, j.phase, rec, true);
    let health = rec.client_health();
    let totals = client_totals(rec);
    let mut warnings = rec.client_warnings(send_lag_limit_s(j.slo, j.phase), 0.8);
    warnings.extend(headroom_load::runner::refusal_warning(rec));
    warnings.extend(headroom_load::runner::stall_warning(rec));
    let mut server: Option<ServerView> = None;
    let workload_drift = drift(&total.tokens);
    if let Some(d) = &workload_drift {
        warnings.push(format!("workload drifted from its spec: {}", d.note));
    }
    let build = |engine: &[Scrape], dcgm: &[Scrape]| {
        Window::from_scrapes(engine, dcgm, &WindowOptions::default())
    };
    let meas_engine = j.engine_scrapes.get(j.window_from..).unwrap_or(&[]);
    let meas_start = meas_engine.first().map_or(f64::INFINITY, |x| x.at_unix_s);
    let meas_dcgm: Vec<Scrape> = j
        .dcgm_scrapes
        .iter()
        .filter(|x| x.at_unix_s + 0.5 >= meas_start)
        .cloned()
        .collect();
    let windows = if meas_engine.len() >= 2 {
        match (
            build(j.engine_scrapes, j.dcgm_scrapes),
            build(meas_engine, &meas_dcgm),
        ) {
            (Ok(full), Ok(meas)) => Some((full, meas)),
            (Err(e), _) | (_, Err(e)) => {
                warnings.push(format!("server view unavailable: {e}"));
                None
            }
        }
    } else {
        if !j.engine_scrapes.is_empty() || !j.notes.is_empty() {
            warnings.push(
                "fewer than two engine scrapes in the window: no server view for this level".into(),
            );
        }
        None
    };
    match &windows {
        Some((full, meas)) => {
            // Send lag measures coordinated omission only in open loop; a closed loop starts each
            // request when a slot frees, so its "lag" is connection set-up, part of TTFT.
            let mut h = health.clone();
            if rec.mode == LoadMode::Concurrency {
                h.send_lag_p99_s = 0.0;
                h.send_lag_max_s = 0.0;
            }
            let view = ClientView {
                objectives: if mix { Vec::new() } else { objectives.clone() },
                health: Some(h),
                // Counts are reconciled over the whole level below, not over the window.
                requests_finished: None,
                output_tokens: None,
                workload_drift: workload_drift.clone(),
                started_before_window: Some(rec.warmup_started),
                ignore_eos_share: Some(ignore_eos_share(&j.phase.plans)),
            };
            let spec = if mix {
                mix_engine_spec(j.spec, &j.phase.plans, &objectives)
            } else {
                j.spec.clone()
            };
            let setting = Setting {
                origin: Origin::Sweep,
                dcgm_scraped: !j.dcgm_scrapes.is_empty(),
                prefixes: Some(prefix_plan(&j.phase.plans)),
            };
            let a = assess_with(meas, Some(&view), &spec, &setting);
            if mix {
                // The engine's rows had the drift applied by the assessment; the classes' not.
                if let Some(d) = &workload_drift {
                    headroom_diagnose::apply_drift(&mut objectives, d);
                }
                objectives.extend(a.objectives.iter().cloned());
                // A queue time every class bounded by its TTFT, which the engine's histogram
                // breaches with certainty: the stricter holds.
                let mut over =
                    overruled_bounds(meas, j.spec, &objectives, Some(rec.warmup_started));
                if let Some(d) = &workload_drift {
                    headroom_diagnose::apply_drift(&mut over, d);
                }
                objectives.extend(over);
                if !a.refused.is_empty() {
                    for o in &mut objectives {
                        o.verdict = Verdict::Inconclusive;
                    }
                }
            } else {
                objectives = a.objectives.clone();
            }
            let mut rec_rows = reconcile(full, &totals);
            let ttft_mean = total.summary(LatencySignal::Ttft);
            if ttft_mean.count > 0
                && let Some(r) = ttft_remainder(meas, ttft_mean.mean_s)
            {
                rec_rows.push(r);
            }
            // Client and server must count the same requests; otherwise the level's numbers
            // describe different traffic and no verdict is given.
            let disagree: Vec<String> = rec_rows
                .iter()
                .filter(|r| r.what.starts_with("requests_") && !r.agrees)
                .map(|r| format!("{} client {} / server {}", r.what, r.client, r.server))
                .collect();
            if !disagree.is_empty() {
                let why = format!(
                    "{DISAGREE} ({}): another client may be using the server",
                    disagree.join(", ")
                );
                for o in &mut objectives {
                    if o.verdict != Verdict::Inconclusive {
                        o.reason = format!(
                            "refused ({why}); the figure alone said {}",
                            o.verdict.as_str()
                        );
                        o.verdict = Verdict::Inconclusive;
                    }
                }
                warnings.push(why);
            }
            for o in &mut objectives {
                first_bucket_observation(o, meas);
            }
            let mut sv = server_view(meas, &a, rec_rows, j.scrape_files.clone());
            sv.notes.extend(j.notes.iter().cloned());
            server = Some(sv);
        }
        None => {
            if let Some(d) = &workload_drift {
                headroom_diagnose::apply_drift(&mut objectives, d);
            }
            // Server-only objectives stay INCONCLUSIVE (evaluate's answer without server data).
            for o in j.spec.objectives.iter().filter(|o| is_server_only(o)) {
                let judged = objectives.iter().any(|x| x.id.is(o));
                if !judged {
                    let out = BTreeMap::new();
                    let none = ClientEvidence {
                        latency: BTreeMap::new(),
                        outcomes: &out,
                        ttft_censored: None,
                    };
                    objectives.extend(evaluate(std::slice::from_ref(o), &none, true));
                }
            }
            for n in &j.notes {
                warnings.push(n.clone());
            }
        }
    }
    let verdict = Verdict::combine(objectives.iter().map(|o| o.verdict));
    let window_s = rec.window_s.max(1e-9);
    // Only worth a warning when an objective needs finished requests (TPOT, E2E); otherwise the
    // level's table simply has no TPOT/E2E figures.
    let needs_finished = objectives.iter().any(|o| {
        matches!(
            o.id.signal(),
            Some(LatencySignal::Tpot | LatencySignal::E2e)
        )
    });
    if needs_finished && total.started_in_window() > 0 && total.tokens.output_realised == 0 {
        warnings.push(
            "no request of the window finished within the window and its drain (answers outlast it): TPOT and E2E are not measured; lengthen --measure for them".to_string()
        );
    }
    // Output throughput: the engine's own counter over the measurement window when available
    // (exact, and independent of which requests finished); else the client's finished requests.
    let server_tok_per_s = windows.as_ref().and_then(|(_, meas)| {
        let d = meas.duration_s()?;
        let t = meas.counter(headroom_signals::Signal::GenerationTokens)?;
        (d > 0.0).then(|| t / d)
    });
    let successes: u64 = total
        .outcomes
        .iter()
        .filter(|(k, _)| k.is_success())
        .map(|(_, v)| v)
        .sum();
    // Completed requests per second: the engine's own count of requests that finished with
    // `stop` or `length` during the measurement window (whenever they started), as for tokens;
    // else the client's window-started successes. With answers longer than the window, hardly
    // any window-started request finishes inside it, and the client's figure reads ~0.
    let server_req_per_s = windows.as_ref().and_then(|(_, meas)| {
        let d = meas.duration_s()?;
        let done = meas.counter_key(headroom_signals::Signal::RequestsFinished, "stop")?
            + meas.counter_key(headroom_signals::Signal::RequestsFinished, "length")?;
        (d > 0.0).then(|| done / d)
    });
    let window_note = if rec.interrupted {
        "interrupted: the window was cut short".to_string()
    } else {
        rec.window_note.clone()
    };
    let mut level = LevelResult {
        level_outcomes: rec.level_totals().outcome_labels(),
        load: rec.load,
        mode: rec.mode,
        started_unix_s: rec.started_unix_s,
        window_s: rec.window_s,
        window_note,
        outcomes: total.outcome_labels(),
        latency: LatencySignal::CLIENT
            .iter()
            .map(|s| (s.name().to_string(), total.summary(*s)))
            .collect(),
        request_rate_per_s: server_req_per_s.unwrap_or(successes as f64 / window_s),
        output_tokens_per_s: server_tok_per_s
            .unwrap_or(total.tokens.output_realised as f64 / window_s),
        // Not measured when every window-started request was cut at the window's end.
        goodput_per_s: (successes > 0
            || total
                .outcomes
                .get(&Outcome::ClientCancel)
                .is_none_or(|c| *c == 0))
        .then(|| total.goodput as f64 / window_s),
        tokens: total.tokens.clone(),
        objectives,
        verdict,
        client: health,
        server,
        histograms: j.hist_file,
        repeats: Vec::new(),
        warnings,
    };
    // The window stopped early on the requests finished by then; the verdict counts every
    // request of the window, and with the in-flight ones the breach may no longer be certain:
    // the note must not claim what the verdict does not.
    if level.window_note.starts_with("early stop") && !level.verdict_is_certain() {
        level.window_note.push_str(
            "; with the requests still in flight counted, the breach is borderline, not certain",
        );
    }
    level
}

/// A server-side quantile that falls in the histogram's first bucket says only "at most the first
/// bound" (vLLM's queue-time buckets start at 0.3 s): PromQL's interpolation would print e.g.
/// 285 ms for requests that waited 2 ms. Such an observation is withheld (no headroom is claimed)
/// and the reason says what is known.
fn first_bucket_observation(o: &mut ObjectiveResult, w: &Window) {
    // Per-request queue times are exact; only the histogram's figure is a bucket bound.
    if o.id.signal() != Some(LatencySignal::QueueTime) || o.bound.is_exact() {
        return;
    }
    let Some(h) = w.histogram(headroom_signals::Signal::QueueTime) else {
        return;
    };
    let Some(first) = h.buckets.first().map(|b| b.le) else {
        return;
    };
    if let Some(v) = o.observed
        && v <= first
    {
        o.observed = None;
        // No figure, so nothing it bounds.
        o.bound = Bound::Exact;
        o.reason = format!(
            "{}; every observation at this percentile lies in the first bucket (≤ {} s), so the engine's histogram gives no finer figure (mean {})",
            o.reason,
            headroom_core::slo::fmt_num(first),
            h.mean()
                .map(headroom_core::slo::fmt_duration_s)
                .unwrap_or_else(|| "n/a".into())
        );
    }
}

/// Whole-level client totals (warm-up, window and drain), the span the server's counters cover.
fn client_totals(rec: &LevelRecording) -> ClientTotals {
    let t = &rec.level_totals();
    let get = |o: Outcome| t.outcomes.get(&o).copied().unwrap_or(0);
    ClientTotals {
        stop: get(Outcome::Stop),
        length: get(Outcome::Length),
        // Streams cut mid-way end on the engine as aborts too.
        cancelled: get(Outcome::ClientCancel) + get(Outcome::Timeout) + t.cut_streams,
        server_abort_or_error: get(Outcome::Abort) + get(Outcome::Error),
        output_tokens: t.output_tokens,
        prompt_tokens: t.prompt_tokens,
        unfinished_chunks: t.unfinished_chunks,
    }
}

/// Realised prompt tokens more than 25 % away from the workload's request: the run measured a
/// different workload from the one specified.
pub(crate) fn drift(t: &TokenCounts) -> Option<WorkloadDrift> {
    // Both sums count only requests whose usage came back: requested > 0 with realised 0 is a
    // server that says it prefilled nothing, a drift like any other.
    if t.prompt_requested == 0 {
        return None;
    }
    let ratio = t.prompt_realised as f64 / t.prompt_requested as f64;
    (!(0.75..=1.25).contains(&ratio)).then(|| WorkloadDrift {
        prompt_ratio: ratio,
        note: format!(
            "prompts realised {} tokens against {} requested ({:.0} %); pass --tokenizer for exact counts",
            t.prompt_realised,
            t.prompt_requested,
            ratio * 100.0
        ),
    })
}

/// How strict an objective row is: a certain FAIL, a borderline FAIL, INCONCLUSIVE, a borderline
/// PASS, a certain PASS (lowest first).
fn strictness(o: &ObjectiveResult) -> u8 {
    match (o.verdict, o.is_borderline()) {
        (Verdict::Fail, false) => 0,
        (Verdict::Fail, true) => 1,
        (Verdict::Inconclusive, _) => 2,
        (Verdict::Pass, true) => 3,
        (Verdict::Pass, false) => 4,
    }
}

/// The verdict of a level run several times: each objective takes its strictest repeat's row
/// (its reason then names the repeat), and the level's verdict combines those. The repeats must
/// agree for a PASS: a capacity one repeat in N breaks is not a capacity, and each repeat's
/// verdict keeps its own certainty and server view (merging the client histograms would pool the
/// samples but leave the engine's windows, separated by the other repeats' warm-ups, apart).
/// A disagreement between repeats is a level warning.
pub fn combine_repeats(level: &mut LevelResult) {
    if level.repeats.is_empty() {
        return;
    }
    let n = level.repeats.len() + 1;
    let own: Vec<&str> = std::iter::once(level.verdict)
        .chain(level.repeats.iter().map(|r| r.verdict))
        .map(Verdict::as_str)
        .collect();
    for o in &mut level.objectives {
        let strictest = level
            .repeats
            .iter()
            .enumerate()
            .filter_map(|(k, r)| Some((k + 2, r.objectives.iter().find(|x| x.id == o.id)?)))
            .filter(|(_, x)| strictness(x) < strictness(o))
            .min_by_key(|(_, x)| strictness(x));
        if let Some((k, x)) = strictest {
            *o = x.clone();
            o.reason = format!("repeat {k} of {n}: {}", o.reason);
        }
    }
    level.verdict = Verdict::combine(level.objectives.iter().map(|o| o.verdict));
    if own.iter().any(|v| *v != own[0]) {
        level.warnings.push(format!(
            "the {n} repeats disagree ({}): the strictest holds",
            own.join(", ")
        ));
    }
}

/// Start of the warning (and of the objectives' reasons) when the client's and the server's
/// request counts differ over a level.
pub(super) const DISAGREE: &str = "client and server disagree on finished requests";

/// Takes every verdict of a level away: `state` (`interrupted`, `server lost`, `aborted`) says
/// what happened and `why` the detail. Each objective becomes INCONCLUSIVE and keeps what its
/// figure alone said in its reason, so a cut-short level never counts as a pass (capacity) or a
/// failure (a breach) in the search. A client/server count disagreement is dropped: a level cut
/// short (no drain, no final scrape of a lost server) is expected to disagree, and blaming
/// "another client" would mislead.
pub(super) fn void_level(level: &mut LevelResult, state: &str, why: &str) {
    level.warnings.retain(|w| !w.starts_with(DISAGREE));
    for o in &mut level.objectives {
        if o.reason.starts_with(&format!("refused ({DISAGREE}"))
            && let Some(i) = o.reason.find("; the figure alone said ")
        {
            o.reason = o.reason[i + 2..].to_string();
        }
        if o.verdict != Verdict::Inconclusive {
            o.reason = format!(
                "no verdict ({state}: {why}); the figure alone said {}: {}",
                o.verdict.as_str(),
                o.reason
            );
        } else {
            o.reason = format!("no verdict ({state}: {why}); {}", o.reason);
        }
        o.verdict = Verdict::Inconclusive;
    }
    level.verdict = Verdict::Inconclusive;
    level.window_note = format!("{state}: {why}");
}
