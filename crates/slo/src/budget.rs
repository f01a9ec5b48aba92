//! `headroom slo budget`: error-budget status per class and objective (SRE Workbook ch. 2, 5).
//!
//! With `bad` and `total` events over the SLO period and the objective's error budget
//! `b = 1 − target`:
//! - SLI = `1 − bad/total` (the share of good events);
//! - budget consumed = `(bad/total) / b` — the period's burn rate, 1 meaning exactly spent;
//! - budget left = `1 − consumed` (negative when overspent);
//! - burn rate over window `w` = `(bad_w/total_w) / b`; a tier "fires" when both its long and
//!   its short window burn faster than its factor (the same condition as the alerts of
//!   [`crate::rules()`]).
//!
//! Policy ([`Decision`]): past `freeze_at` of the budget consumed, freeze non-essential tuning
//! (flag changes, model or runtime upgrades that are not reliability fixes); past 100 %, the
//! budget is exhausted. No events over the period gives no decision rather than a fake 100 %.
//!
//! [`budget_status`] is pure arithmetic; [`fetch_budget`] asks Prometheus for the counts with
//! `sum(increase(…[w]))` over the same SLI expressions as the rules, so it works whether or not
//! the rules are installed, and computes a true ratio over the period (not an average of short
//! ratios, Sloth #618).
//!
//! `increase(…[30d])` over 4 minutes of data is the increase over those 4 minutes: the ratio is
//! a burn rate so far, not a verdict on the period. So [`fetch_budget`] also asks how much of
//! the period the data covers ([`Coverage`]: from the oldest sample of the SLI's series in the
//! period to the evaluation time), and [`render`] prints it beside every row and marks a
//! decision taken on less than [`FULL_COVERAGE`] of the period as provisional.

use crate::prom_api::PromClient;
use crate::promql::fmt_float;
use crate::sli::{self, Sli, SliOptions};
use crate::tiers::{self, BurnTier, Severity, TierSpec};
use crate::{Rendered, SloError};
use headroom_core::objective::ObjectiveId;
use headroom_core::slo::SloFile;
use std::collections::BTreeMap;
use std::time::Duration;

/// Bad and total events over one window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EventCounts {
    /// Events that missed the objective.
    pub bad: f64,
    /// All events.
    pub total: f64,
}

impl EventCounts {
    /// `bad / total`, `None` without events (or with non-finite counts).
    pub fn error_ratio(&self) -> Option<f64> {
        (self.total > 0.0 && self.total.is_finite() && self.bad.is_finite())
            .then(|| (self.bad / self.total).clamp(0.0, 1.0))
    }
}

/// The measured input of one objective.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectiveEvents {
    /// Class name.
    pub class: String,
    /// Objective id (`ttft_p95`, `error_rate`).
    pub objective: ObjectiveId,
    /// Human form (`TTFT p95 < 250 ms`).
    pub description: String,
    /// Error budget `1 − target`, in (0, 1).
    pub budget: f64,
    /// Counts over the SLO period.
    pub period: EventCounts,
    /// Counts per tier window (keyed by the window as written, e.g. `1h`).
    pub windows: BTreeMap<String, EventCounts>,
    /// How much of the period the data covers; `None` when unknown (no events, or the query
    /// failed).
    pub coverage: Option<Coverage>,
}

/// Share of the period that counts as covered: a period holding at least 99 % of its span in
/// data gives a verdict on the period.
pub const FULL_COVERAGE: f64 = 0.99;

/// How much of the SLO period the data in Prometheus covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coverage {
    /// Seconds from the oldest sample of the SLI's series within the period to the evaluation
    /// time, at most `period_s`.
    pub covered_s: f64,
    /// The SLO period (`budget.window`), seconds.
    pub period_s: f64,
}

impl Coverage {
    /// `covered_s / period_s`, in [0, 1].
    pub fn fraction(&self) -> f64 {
        if self.period_s > 0.0 {
            (self.covered_s / self.period_s).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// At least [`FULL_COVERAGE`] of the period.
    pub fn is_full(&self) -> bool {
        self.fraction() >= FULL_COVERAGE
    }

    /// `4m of 30d`, or the period alone when full, as Prometheus durations.
    pub fn describe(&self) -> String {
        let period = fmt_prom_s(self.period_s);
        if self.is_full() {
            period
        } else {
            format!("{} of {period}", fmt_prom_s(self.covered_s))
        }
    }
}

/// `s` seconds, rounded to the second (at least 1 s when positive), as a Prometheus duration.
fn fmt_prom_s(s: f64) -> String {
    let r = s.round();
    let secs = if s > 0.0 && r < 1.0 { 1 } else { r as u64 };
    crate::promql::fmt_prom_duration(secs)
}

/// The burn of one alert tier.
#[derive(Debug, Clone, PartialEq)]
pub struct TierBurn {
    /// Tier name (`page_fast`, …).
    pub tier: String,
    /// Page or ticket.
    pub severity: Severity,
    /// Factor the burn must exceed in both windows.
    pub factor: f64,
    /// Long window.
    pub long: String,
    /// Short window.
    pub short: String,
    /// Burn rate over the long window (`None` without events).
    pub long_burn: Option<f64>,
    /// Burn rate over the short window.
    pub short_burn: Option<f64>,
    /// Both burns above the factor.
    pub burning: bool,
}

/// The policy decision for one objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No events over the period: nothing to judge.
    NoData,
    /// Less than `freeze_at` of the budget consumed: tuning may go on.
    WithinBudget,
    /// At least `freeze_at` consumed: freeze non-essential tuning.
    FreezeTuning,
    /// The whole budget is consumed: only reliability work until it recovers.
    Exhausted,
}

impl Decision {
    /// Words for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Decision::NoData => "no data",
            Decision::WithinBudget => "within budget",
            Decision::FreezeTuning => "freeze non-essential tuning",
            Decision::Exhausted => "budget exhausted: reliability work only",
        }
    }
}

/// Error-budget status of one objective of one class.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStatus {
    /// Class name.
    pub class: String,
    /// Objective id.
    pub objective: ObjectiveId,
    /// Human form.
    pub description: String,
    /// Target share of good events.
    pub target: f64,
    /// Error budget, `1 − target`.
    pub budget: f64,
    /// Counts over the period.
    pub period: EventCounts,
    /// SLI over the period: share of good events.
    pub sli: Option<f64>,
    /// Share of the budget consumed (the period's burn rate).
    pub consumed: Option<f64>,
    /// `1 − consumed`.
    pub remaining: Option<f64>,
    /// Burn of each tier.
    pub tiers: Vec<TierBurn>,
    /// Policy decision, from the counts alone; read it with [`BudgetStatus::verdict`], which says
    /// when the data covers only part of the period.
    pub decision: Decision,
    /// How much of the period the counts cover (`None`: unknown).
    pub coverage: Option<Coverage>,
}

impl BudgetStatus {
    /// The decision in words, marked provisional when the data covers less than
    /// [`FULL_COVERAGE`] of the period or its coverage is unknown: `budget exhausted:
    /// reliability work only (provisional: data covers 4m of 30d)`.
    pub fn verdict(&self) -> String {
        let d = self.decision.describe();
        match (self.decision, self.coverage) {
            (Decision::NoData, _) => d.to_owned(),
            (_, Some(c)) if c.is_full() => d.to_owned(),
            (_, Some(c)) => format!("{d} (provisional: data covers {})", c.describe()),
            (_, None) => format!("{d} (provisional: data coverage unknown)"),
        }
    }
}

/// Pure arithmetic: the status of `ev` under `tiers` and the policy `freeze_at` (0–1).
pub fn budget_status(ev: &ObjectiveEvents, tiers: &[BurnTier], freeze_at: f64) -> BudgetStatus {
    let ratio = ev.period.error_ratio();
    let consumed = ratio.map(|r| r / ev.budget);
    let burn = |w: &str| {
        ev.windows
            .get(w)
            .and_then(EventCounts::error_ratio)
            .map(|r| r / ev.budget)
    };
    let tiers = tiers
        .iter()
        .map(|t| {
            let long_burn = burn(&t.spec.long);
            let short_burn = burn(&t.spec.short);
            TierBurn {
                tier: t.spec.name.clone(),
                severity: t.spec.severity,
                factor: t.factor,
                long: t.spec.long.clone(),
                short: t.spec.short.clone(),
                long_burn,
                short_burn,
                burning: long_burn.is_some_and(|b| b > t.factor)
                    && short_burn.is_some_and(|b| b > t.factor),
            }
        })
        .collect();
    let decision = match consumed {
        None => Decision::NoData,
        Some(c) if c >= 1.0 => Decision::Exhausted,
        Some(c) if c >= freeze_at => Decision::FreezeTuning,
        Some(_) => Decision::WithinBudget,
    };
    BudgetStatus {
        class: ev.class.clone(),
        objective: ev.objective.clone(),
        description: ev.description.clone(),
        target: 1.0 - ev.budget,
        budget: ev.budget,
        period: ev.period,
        sli: ratio.map(|r| 1.0 - r),
        consumed,
        remaining: consumed.map(|c| 1.0 - c),
        tiers,
        decision,
        coverage: ev.coverage,
    }
}

/// Options of [`fetch_budget`].
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetOptions {
    /// Class selectors, latency source, class filter.
    pub sli: SliOptions,
    /// Alert tiers (default: the Workbook's four).
    pub tiers: Vec<TierSpec>,
    /// Evaluation time (Unix seconds); now when `None`.
    pub at: Option<f64>,
    /// Timeout of each query.
    pub timeout: Duration,
}

impl Default for BudgetOptions {
    fn default() -> Self {
        BudgetOptions {
            sli: SliOptions::default(),
            tiers: tiers::workbook_tiers(),
            at: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The SLO period and policy of `slo` (defaults: `30d`, freeze at 50 %).
///
/// # Errors
/// `budget.freeze_at` outside (0, 1].
pub fn policy(slo: &SloFile) -> Result<(String, f64), SloError> {
    let (window, freeze_at) = slo
        .budget
        .as_ref()
        .map(|b| (b.window.clone(), b.freeze_at))
        .unwrap_or_else(|| ("30d".into(), 0.5));
    if !(freeze_at > 0.0 && freeze_at <= 1.0) {
        return Err(SloError::invalid(
            "budget.freeze_at",
            format!("{freeze_at} is outside (0, 100 %]; expected e.g. 50%"),
        ));
    }
    Ok((window, freeze_at))
}

/// Queries `prom` for the events of every objective of every class and computes their status.
/// Returns the statuses and the warnings of SLI resolution (snapped thresholds).
///
/// # Errors
/// As [`sli::resolve`] and [`tiers::resolve`]; [`SloError::Prometheus`] when a query fails.
pub async fn fetch_budget(
    prom: &PromClient,
    slo: &SloFile,
    opts: &BudgetOptions,
) -> Result<(Vec<BudgetStatus>, Vec<String>), SloError> {
    let (period, freeze_at) = policy(slo)?;
    let (period_s, tiers) = tiers::resolve(&period, &opts.tiers)?;
    let (slis, mut warnings) = sli::resolve(slo, &opts.sli)?;
    let mut windows: Vec<String> = Vec::new();
    for t in &tiers {
        for w in [&t.spec.long, &t.spec.short] {
            if !windows.contains(w) {
                windows.push(w.clone());
            }
        }
    }
    // One evaluation instant for every query, so that bad and total events, and all windows,
    // cover exactly the same span.
    let at = opts.at.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    });
    let mut out = Vec::new();
    for s in &slis {
        let period_counts = counts(prom, s, &period, Some(at)).await?;
        let mut per_window = BTreeMap::new();
        for w in &windows {
            per_window.insert(w.clone(), counts(prom, s, w, Some(at)).await?);
        }
        let coverage = if period_counts.total > 0.0 {
            match coverage(prom, s, &period, period_s as f64, at).await {
                Ok(c) => c,
                Err(e) => {
                    warnings.push(format!(
                        "{}: cannot tell how much of the {period} period the data covers ({e}); its decision is marked provisional",
                        s.field
                    ));
                    None
                }
            }
        } else {
            None
        };
        let ev = ObjectiveEvents {
            class: s.class.clone(),
            objective: s.objective.id(),
            description: s.objective.describe(),
            budget: s.budget,
            period: period_counts,
            windows: per_window,
            coverage,
        };
        out.push(budget_status(&ev, &tiers, freeze_at));
    }
    Ok((out, warnings))
}

/// `headroom slo budget --prometheus URL`: fetches the events from Prometheus at
/// `prometheus_url` and renders the status table ([`render`]); warnings of SLI resolution are
/// returned in [`Rendered::warnings`].
///
/// # Errors
/// As [`fetch_budget`], and [`PromClient::new`] for a URL that is not `http://host:port`.
pub async fn budget_report(
    prometheus_url: &str,
    slo: &SloFile,
    opts: &BudgetOptions,
) -> Result<Rendered, SloError> {
    let prom = PromClient::new(prometheus_url, opts.timeout)?;
    let (statuses, warnings) = fetch_budget(&prom, slo, opts).await?;
    let (period, _) = policy(slo)?;
    let mut r = render(&statuses, &period);
    r.warnings = warnings;
    r.warnings.extend(unused_target_note(slo));
    Ok(r)
}

/// The note for a `budget.target` in slo.yaml: it enters neither the rules nor the budget,
/// because each objective carries its own target (`p95` → 95 % of requests within the
/// threshold, `error_rate: 0.5%` → 99.5 % of requests good), and a reader seeing targets of
/// 95 % and 99.5 % beside a file that says 99 % deserves to know why.
pub fn unused_target_note(slo: &SloFile) -> Option<String> {
    let target = slo.budget.as_ref()?.target?;
    Some(format!(
        "budget.target ({} %) is not used: each objective carries its own target (a p95 latency objective: 95 % of requests within its threshold; error_rate 0.5 %: 99.5 % of requests good); budget.window and budget.freeze_at apply; budget.target is optional, so remove it to silence this",
        fmt_float((target * 1e4).round() / 100.0)
    ))
}

/// Step of the subquery that finds the oldest sample over a period of `period_s` seconds: 1 m
/// up to 30 d (43 200 steps), then `period / 43 200`, at most 4 m so that every step stays
/// within Prometheus's default 5 m lookback and no sample falls between two steps.
pub fn coverage_step_s(period_s: u64) -> u64 {
    period_s.div_ceil(43_200).clamp(60, 240)
}

/// The subquery giving the timestamp of the oldest sample of `series` within `range` (Unix
/// seconds), to the nearest `step`: `min(min_over_time(timestamp(series)[range:step]))`.
pub fn oldest_sample_query(series: &str, range: &str, step: &str) -> String {
    format!("min(min_over_time(timestamp({series})[{range}:{step}]))")
}

/// How much of the period the SLI's series cover at `at`: the oldest sample of its all-events
/// series ([`Sli::total_series`]) within the period, found with [`coverage_step_s`]; when that
/// is under an hour old (or not found: a subquery's steps are aligned to multiples of the
/// step, so data younger than one step can fall after the last one), again over the last hour
/// to the second.
async fn coverage(
    prom: &PromClient,
    s: &Sli,
    period: &str,
    period_s: f64,
    at: f64,
) -> Result<Option<Coverage>, SloError> {
    let series = s.total_series();
    let step = crate::promql::fmt_prom_duration(coverage_step_s(period_s as u64));
    let coarse = prom
        .single(&oldest_sample_query(&series, period, &step), Some(at))
        .await?;
    let oldest = match coarse {
        Some(t) if at - t >= 3600.0 => Some(t),
        _ => prom
            .single(&oldest_sample_query(&series, "1h", "1s"), Some(at))
            .await?
            .or(coarse),
    };
    Ok(oldest.map(|t| Coverage {
        covered_s: (at - t).clamp(0.0, period_s),
        period_s,
    }))
}

async fn counts(
    prom: &PromClient,
    s: &Sli,
    window: &str,
    at: Option<f64>,
) -> Result<EventCounts, SloError> {
    let (bad_q, total_q) = s.increases(window);
    let total = prom.single(&total_q, at).await?;
    let bad = prom.single(&bad_q, at).await?;
    checked_counts(bad, total).map_err(|m| SloError::Prometheus {
        url: prom.base().to_owned(),
        message: format!(
            "invalid data for {} over {window}: {m}; bad events: {bad_q}; all events: {total_q}",
            s.field
        ),
    })
}

/// Bad and total event counts as Prometheus returned them (`None`: an empty vector, no
/// series), checked for what counts can be: no series is zero events (no data), but a negative
/// count or more bad events than events is invalid data, never "no data" or a clamped ratio.
///
/// A latency SLI's bad events are `count − bucket`, two series scraped together and
/// extrapolated alike by `increase()`; float rounding may leave a tiny negative, so a bad count
/// down to −1e−9 × max(total, 1) reads as 0, and up to total × (1 + 1e−9) as total.
///
/// # Errors
/// What is wrong, with the values (NaN and infinities are refused earlier, by
/// [`PromClient::single`]).
pub fn checked_counts(bad: Option<f64>, total: Option<f64>) -> Result<EventCounts, String> {
    let total = total.unwrap_or(0.0);
    let bad = bad.unwrap_or(0.0);
    let slack = 1e-9 * total.abs().max(1.0);
    if !(total.is_finite() && bad.is_finite()) {
        return Err(format!(
            "bad events {bad}, all events {total}: expected finite counts"
        ));
    }
    if total < 0.0 {
        return Err(format!(
            "all events = {total}: a count of events cannot be negative"
        ));
    }
    if bad < -slack {
        return Err(format!(
            "bad events = {bad}: a count of events cannot be negative"
        ));
    }
    if bad > total + slack {
        return Err(format!(
            "bad events = {bad} exceed all events = {total}: the error ratio would be above 100 %"
        ));
    }
    Ok(EventCounts {
        bad: bad.clamp(0.0, total),
        total,
    })
}

fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{} %", fmt_float((v * 1e4).round() / 100.0)),
        _ => "–".into(),
    }
}

/// A share in (0, 1) as a percentage with two decimals, `under 0.01 %` rather than `0 %`.
fn share(f: f64) -> String {
    if f > 0.0 && f < 1e-4 {
        "under 0.01 %".into()
    } else {
        pct(Some(f))
    }
}

fn burn(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => fmt_float((v * 100.0).round() / 100.0),
        _ => "–".into(),
    }
}

/// Renders statuses as a plain-text table, one line per class and objective, then one line per
/// burning tier.
pub fn render(statuses: &[BudgetStatus], period: &str) -> Rendered {
    let mut rows: Vec<Vec<String>> = vec![vec![
        "class".into(),
        "objective".into(),
        format!("SLI ({period})"),
        "data".into(),
        "target".into(),
        "budget used".into(),
        "left".into(),
        "burn long/short per tier".into(),
        "decision".into(),
    ]];
    for s in statuses {
        let burns: Vec<String> = s
            .tiers
            .iter()
            .map(|t| {
                format!(
                    "{}/{} {}/{}{}",
                    t.long,
                    t.short,
                    burn(t.long_burn),
                    burn(t.short_burn),
                    if t.burning { "!" } else { "" }
                )
            })
            .collect();
        rows.push(vec![
            s.class.clone(),
            s.description.clone(),
            pct(s.sli),
            match (s.coverage, s.decision) {
                (_, Decision::NoData) => "–".into(),
                (Some(c), _) => c.describe(),
                (None, _) => "?".into(),
            },
            pct(Some(s.target)),
            pct(s.consumed),
            pct(s.remaining),
            burns.join("  "),
            s.verdict(),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(line.join("  ").trim_end());
        text.push('\n');
    }
    for s in statuses {
        if s.decision == Decision::NoData {
            continue;
        }
        match s.coverage {
            Some(c) if c.is_full() => {}
            Some(c) => text.push_str(&format!(
                "{} {}: Prometheus holds {} of the {period} period ({}): every figure of its row is over that span only, so the decision is provisional, not a {period} verdict\n",
                s.class,
                s.objective,
                fmt_prom_s(c.covered_s),
                share(c.fraction()),
            )),
            None => text.push_str(&format!(
                "{} {}: how much of the {period} period the data covers is unknown, so the decision is provisional\n",
                s.class, s.objective
            )),
        }
    }
    for s in statuses {
        for t in s.tiers.iter().filter(|t| t.burning) {
            text.push_str(&format!(
                "{} {}: {} tier {} is burning ({}× budget over {} and {}× over {}, factor {})\n",
                s.class,
                s.objective,
                t.severity.label(),
                t.tier,
                burn(t.long_burn),
                t.long,
                burn(t.short_burn),
                t.short,
                fmt_float(t.factor)
            ));
        }
    }
    Rendered {
        text,
        warnings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unused_budget_target_is_explained() {
        let f = |t: &str| SloFile::parse(t, std::path::Path::new("slo.yaml")).unwrap();
        let n = unused_target_note(&f(
            "objectives:\n  \"*\": {error_rate: 1%}\nbudget: {window: 30d, target: 99.5%}\n",
        ))
        .unwrap();
        assert!(n.starts_with("budget.target (99.5 %) is not used"), "{n}");
        assert_eq!(
            unused_target_note(&f("objectives:\n  \"*\": {error_rate: 1%}\n")),
            None
        );
        // Every slo command once warned about the built-in SLO's and the README's own
        // budget.target: neither sets one now (it is optional), so neither is warned about.
        assert_eq!(
            unused_target_note(&f(headroom_core::slo::DEFAULT_SLO_YAML)),
            None
        );
        let readme = include_str!("../../../README.md");
        let example = readme.lines().find(|l| l.starts_with("budget: {")).unwrap();
        let text = format!("objectives:\n  \"*\": {{error_rate: 1%}}\n{example}\n");
        assert_eq!(unused_target_note(&f(&text)), None, "{example}");
    }

    fn tiers30() -> Vec<BurnTier> {
        tiers::resolve("30d", &tiers::workbook_tiers()).unwrap().1
    }

    fn ev(budget: f64, period: (f64, f64), window: (f64, f64)) -> ObjectiveEvents {
        let w = EventCounts {
            bad: window.0,
            total: window.1,
        };
        ObjectiveEvents {
            class: "chat".into(),
            objective: serde_json::from_str("\"ttft_p95\"").unwrap(),
            description: "TTFT p95 < 250 ms".into(),
            budget,
            period: EventCounts {
                bad: period.0,
                total: period.1,
            },
            windows: ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]
                .iter()
                .map(|k| (k.to_string(), w))
                .collect(),
            coverage: Some(Coverage {
                covered_s: 30.0 * 86_400.0,
                period_s: 30.0 * 86_400.0,
            }),
        }
    }

    /// A new user's first run: 4 minutes of data in Prometheus, 80 % of TTFTs slow against a
    /// 5 % budget, printed as a 30-day "budget exhausted" with −1500 % left and nothing saying
    /// the window held 4 minutes.
    #[test]
    fn minutes_of_data_give_a_provisional_decision_that_says_so() {
        let mut e = ev(0.05, (800.0, 1000.0), (800.0, 1000.0));
        e.coverage = Some(Coverage {
            covered_s: 240.0,
            period_s: 30.0 * 86_400.0,
        });
        let s = budget_status(&e, &tiers30(), 0.5);
        // 0.8 / 0.05 = 16 × the budget: −1500 % left, by hand.
        assert!((s.remaining.unwrap() + 15.0).abs() < 1e-9);
        assert_eq!(s.decision, Decision::Exhausted);
        assert_eq!(
            s.verdict(),
            "budget exhausted: reliability work only (provisional: data covers 4m of 30d)"
        );
        let r = render(&[s], "30d");
        let lines: Vec<&str> = r.text.lines().collect();
        assert!(lines[0].contains("  data  "), "{}", r.text);
        assert!(lines[1].contains("  4m of 30d  "), "{}", r.text);
        assert!(
            lines[1].ends_with("(provisional: data covers 4m of 30d)"),
            "{}",
            r.text
        );
        // 240 s of 2 592 000 s = 0.00926 %.
        assert_eq!(
            lines[2],
            "chat ttft_p95: Prometheus holds 4m of the 30d period (under 0.01 %): every figure of its row is over that span only, so the decision is provisional, not a 30d verdict"
        );
        // 29.8 of 30 days (99.3 %) is the period; unknown coverage is provisional too.
        let mut e = ev(0.05, (800.0, 1000.0), (0.0, 0.0));
        e.coverage = Some(Coverage {
            covered_s: 29.8 * 86_400.0,
            period_s: 30.0 * 86_400.0,
        });
        let s = budget_status(&e, &tiers30(), 0.5);
        assert_eq!(s.verdict(), "budget exhausted: reliability work only");
        e.coverage = None;
        let s = budget_status(&e, &tiers30(), 0.5);
        assert!(
            s.verdict()
                .ends_with("(provisional: data coverage unknown)")
        );
        // No events: no decision to qualify.
        let s = budget_status(&ev(0.05, (0.0, 0.0), (0.0, 0.0)), &tiers30(), 0.5);
        assert_eq!(s.verdict(), "no data");
    }

    #[test]
    fn coverage_step_and_query() {
        // 30 d = 2 592 000 s / 43 200 = 60 s; 1 y = 31 536 000 s / 43 200 = 730 s → capped at 240 s;
        // 3 d → 6 s → at least 60 s.
        assert_eq!(coverage_step_s(2_592_000), 60);
        assert_eq!(coverage_step_s(31_536_000), 240);
        assert_eq!(coverage_step_s(259_200), 60);
        let q = oldest_sample_query("m_count{class=\"chat\"}", "30d", "1m");
        assert_eq!(
            q,
            "min(min_over_time(timestamp(m_count{class=\"chat\"})[30d:1m]))"
        );
        crate::promql::validate(&q).unwrap();
        let c = Coverage {
            covered_s: 0.4,
            period_s: 86_400.0,
        };
        assert_eq!(c.describe(), "1s of 1d");
        // 8 s of 30 d = 0.0003 %: not printed as 0 %.
        assert_eq!(share(8.0 / 2_592_000.0), "under 0.01 %");
        assert_eq!(share(0.5), "50 %");
    }

    #[test]
    fn hand_computed_budget() {
        // p95 (budget 5 %): 1 000 000 TTFTs over 30 d, 30 000 above 250 ms → SLI 97 %,
        // error ratio 3 % = 60 % of the budget used, 40 % left; freeze_at 50 % → freeze.
        // Windows at 18 %: burn 3.6 → above 3 (ticket_fast) and 1 (ticket_slow), below 6 and 14.4.
        let s = budget_status(&ev(0.05, (30_000.0, 1e6), (180.0, 1000.0)), &tiers30(), 0.5);
        assert!((s.sli.unwrap() - 0.97).abs() < 1e-12);
        assert!((s.consumed.unwrap() - 0.6).abs() < 1e-12);
        assert!((s.remaining.unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(s.decision, Decision::FreezeTuning);
        let burning: Vec<&str> = s
            .tiers
            .iter()
            .filter(|t| t.burning)
            .map(|t| t.tier.as_str())
            .collect();
        assert_eq!(burning, vec!["ticket_fast", "ticket_slow"]);
        assert!((s.tiers[0].long_burn.unwrap() - 3.6).abs() < 1e-12);
    }

    #[test]
    fn decisions_at_the_edges() {
        let t = tiers30();
        // error_rate 0.5 %: 40 bad of 10 000 = 0.4 % → 80 % used; freeze_at 90 % → within.
        let s = budget_status(&ev(0.005, (40.0, 10_000.0), (0.0, 100.0)), &t, 0.9);
        assert!((s.consumed.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(s.decision, Decision::WithinBudget);
        assert!(s.tiers.iter().all(|t| !t.burning));
        // 150 bad of 10 000 = 1.5 % → 300 % used, 200 % overspent.
        let s = budget_status(&ev(0.005, (150.0, 10_000.0), (0.0, 100.0)), &t, 0.5);
        assert_eq!(s.decision, Decision::Exhausted);
        assert!((s.remaining.unwrap() + 2.0).abs() < 1e-12);
        // A quiet service: no events, no decision, no burn (not NaN).
        let s = budget_status(&ev(0.05, (0.0, 0.0), (0.0, 0.0)), &t, 0.5);
        assert_eq!(s.decision, Decision::NoData);
        assert_eq!(s.sli, None);
        assert!(s.tiers.iter().all(|t| t.long_burn.is_none() && !t.burning));
    }

    #[test]
    fn render_shows_decision_and_burning_tiers() {
        let s = budget_status(&ev(0.05, (30_000.0, 1e6), (180.0, 1000.0)), &tiers30(), 0.5);
        let r = render(&[s], "30d");
        let lines: Vec<&str> = r.text.lines().collect();
        assert!(lines[0].starts_with("class  objective"), "{}", r.text);
        assert!(lines[1].contains("97 %"), "{}", r.text);
        assert!(lines[1].contains("60 %"), "{}", r.text);
        assert!(lines[1].contains("1d/2h 3.6/3.6!"), "{}", r.text);
        assert!(
            lines[1].ends_with("freeze non-essential tuning"),
            "{}",
            r.text
        );
        assert_eq!(
            lines[2],
            "chat ttft_p95: ticket tier ticket_fast is burning (3.6× budget over 1d and 3.6× over 2h, factor 3)"
        );
    }

    #[test]
    fn impossible_counts_are_invalid_data_not_no_data() {
        // No series at all: zero events, which budget_status reads as no data.
        assert_eq!(checked_counts(None, None), Ok(EventCounts::default()));
        assert_eq!(
            budget_status(&ev(0.05, (0.0, 0.0), (0.0, 0.0)), &tiers30(), 0.5).decision,
            Decision::NoData
        );
        assert_eq!(
            checked_counts(Some(3.0), Some(100.0)),
            Ok(EventCounts {
                bad: 3.0,
                total: 100.0
            })
        );
        // Rounding noise of count − bucket: −1e-12 of 1000 events is 0; 1000 + 1e-7 is 1000.
        assert_eq!(checked_counts(Some(-1e-12), Some(1000.0)).unwrap().bad, 0.0);
        assert_eq!(
            checked_counts(Some(1000.0 + 1e-7), Some(1000.0))
                .unwrap()
                .bad,
            1000.0
        );
        for (bad, total, needle) in [
            (
                Some(-5.0),
                Some(100.0),
                "bad events = -5: a count of events cannot be negative",
            ),
            (Some(-5.0), None, "bad events = -5"),
            (Some(1.0), Some(-2.0), "all events = -2: a count"),
            (
                Some(150.0),
                Some(100.0),
                "bad events = 150 exceed all events = 100",
            ),
            (Some(f64::NAN), Some(100.0), "expected finite counts"),
            (Some(1.0), Some(f64::INFINITY), "expected finite counts"),
        ] {
            let e = checked_counts(bad, total).unwrap_err();
            assert!(e.contains(needle), "{needle} not in {e}");
        }
    }

    #[test]
    fn bad_freeze_at_names_the_field() {
        let mut f = SloFile::parse(
            "objectives:\n  a: {error_rate: 1%}\nbudget: {window: 30d, target: 99%, freeze_at: 50%}\n",
            std::path::Path::new("slo.yaml"),
        )
        .unwrap();
        // `SloFile::parse` already refuses 150 %; a file built in code must be refused here too.
        f.budget.as_mut().unwrap().freeze_at = 1.5;
        let e = policy(&f).unwrap_err().to_string();
        assert!(e.starts_with("budget.freeze_at: 1.5 is outside"), "{e}");
        f.budget = None;
        assert_eq!(policy(&f).unwrap(), ("30d".to_string(), 0.5));
    }
}
