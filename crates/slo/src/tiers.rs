//! Multi-window, multi-burn-rate alert tiers (Google SRE Workbook ch. 5, "Alerting on SLOs").
//!
//! A tier consumes `budget_percent` of the error budget over its long window. Its burn-rate
//! factor is computed, not tabulated (the same formula as Sloth's `AlertWindows`):
//! `factor = budget_percent / 100 × period / long_window`. For the 30-day period this gives the
//! Workbook's table: 1h/5m × 14.4 and 6h/30m × 6 (page), 1d/2h × 3 and 3d/6h × 1 (ticket). The
//! short window is 1/12 of the long one, so an alert stops soon after the burn stops.
//!
//! A tier with `factor × (1 − target) ≥ 1` can never fire, because the error ratio cannot exceed
//! 1: at a 90 % latency target the 14.4× tier would need an error ratio of 1.44. Such a tier is
//! *dead*; [`DeadTiers`] says whether to skip it with a warning or refuse.

use crate::SloError;
use crate::promql::{clean, fmt_prom_duration, parse_prom_duration};

/// Page or ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Wake someone up.
    Page,
    /// Handle in working hours.
    Ticket,
}

impl Severity {
    /// `page` or `ticket` (the `severity` label).
    pub fn label(self) -> &'static str {
        match self {
            Severity::Page => "page",
            Severity::Ticket => "ticket",
        }
    }
}

/// One alert tier as configured (before the period is known).
#[derive(Debug, Clone, PartialEq)]
pub struct TierSpec {
    /// Stable name, used in the `tier` label (`page_fast`, `page_slow`, `ticket_fast`,
    /// `ticket_slow`).
    pub name: String,
    /// Page or ticket.
    pub severity: Severity,
    /// Long window, Prometheus duration.
    pub long: String,
    /// Short window, Prometheus duration (1/12 of `long` in the Workbook).
    pub short: String,
    /// Share of the period's error budget this tier lets burn over `long`, in percent.
    pub budget_percent: f64,
    /// Optional `for:` of the alert rule (none in the Workbook).
    pub for_: Option<String>,
}

/// The Workbook's four tiers: 2 % in 1 h and 5 % in 6 h page; 10 % in 1 d and 10 % in 3 d
/// open a ticket.
pub fn workbook_tiers() -> Vec<TierSpec> {
    let t = |name: &str, severity, long: &str, short: &str, pct| TierSpec {
        name: name.into(),
        severity,
        long: long.into(),
        short: short.into(),
        budget_percent: pct,
        for_: None,
    };
    vec![
        t("page_fast", Severity::Page, "1h", "5m", 2.0),
        t("page_slow", Severity::Page, "6h", "30m", 5.0),
        t("ticket_fast", Severity::Ticket, "1d", "2h", 10.0),
        t("ticket_slow", Severity::Ticket, "3d", "6h", 10.0),
    ]
}

/// A tier resolved against the SLO period.
#[derive(Debug, Clone, PartialEq)]
pub struct BurnTier {
    /// The configured tier.
    pub spec: TierSpec,
    /// Burn-rate factor: `budget_percent / 100 × period / long`.
    pub factor: f64,
    /// Long window in seconds.
    pub long_s: u64,
    /// Short window in seconds.
    pub short_s: u64,
}

impl BurnTier {
    /// Error-ratio threshold for an objective with error budget `budget` (= 1 − target).
    pub fn threshold(&self, budget: f64) -> f64 {
        clean(self.factor * budget)
    }

    /// True when the tier can never fire for this budget: `factor × budget ≥ 1`.
    pub fn is_dead(&self, budget: f64) -> bool {
        self.threshold(budget) >= 1.0
    }

    /// Time to exhaust the whole budget at this burn rate, as a Prometheus-style duration
    /// (`period / factor`, e.g. `2d2h` for 14.4× over 30 d).
    pub fn exhaustion(&self, period_s: u64) -> String {
        fmt_prom_duration((period_s as f64 / self.factor).round() as u64)
    }
}

/// What to do with a tier that can never fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadTiers {
    /// Leave it out of the rules and warn (default).
    #[default]
    Skip,
    /// Refuse to generate rules.
    Refuse,
}

/// Resolves `specs` against the SLO period `period` (from `budget.window`).
///
/// # Errors
/// `budget.window` when it is not a Prometheus duration, is longer than 365 days
/// ([`crate::promql::MAX_PROM_DURATION_S`]) or is shorter than a tier's long window; `tiers[i]` when a window does not parse, the short window is not shorter than the long
/// one, or the budget share is not in (0, 100].
pub fn resolve(period: &str, specs: &[TierSpec]) -> Result<(u64, Vec<BurnTier>), SloError> {
    let period_s =
        parse_prom_duration(period).map_err(|m| SloError::invalid("budget.window", m))?;
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let field = format!("tiers[{i}] ({})", spec.name);
        let long_s = parse_prom_duration(&spec.long)
            .map_err(|m| SloError::invalid(format!("{field}.long"), m))?;
        let short_s = parse_prom_duration(&spec.short)
            .map_err(|m| SloError::invalid(format!("{field}.short"), m))?;
        if short_s >= long_s {
            return Err(SloError::invalid(
                field,
                format!(
                    "short window {} is not shorter than long window {}; the Workbook uses 1/12",
                    spec.short, spec.long
                ),
            ));
        }
        if !(spec.budget_percent > 0.0 && spec.budget_percent <= 100.0) {
            return Err(SloError::invalid(
                format!("{field}.budget_percent"),
                format!(
                    "{} is outside (0, 100]; expected the share of the budget this tier lets burn",
                    spec.budget_percent
                ),
            ));
        }
        if long_s > period_s {
            return Err(SloError::invalid(
                "budget.window",
                format!(
                    "period {period} is shorter than the {} window of tier {}; use a period of at least {} (e.g. 7d, 28d, 30d)",
                    spec.long, spec.name, spec.long
                ),
            ));
        }
        if let Some(f) = &spec.for_ {
            parse_prom_duration(f).map_err(|m| SloError::invalid(format!("{field}.for"), m))?;
        }
        let factor = clean(spec.budget_percent / 100.0 * period_s as f64 / long_s as f64);
        out.push(BurnTier {
            spec: spec.clone(),
            factor,
            long_s,
            short_s,
        });
    }
    Ok((period_s, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_days_gives_the_workbook_factors() {
        let (p, t) = resolve("30d", &workbook_tiers()).unwrap();
        assert_eq!(p, 30 * 86_400);
        let f: Vec<f64> = t.iter().map(|x| x.factor).collect();
        assert_eq!(f, vec![14.4, 6.0, 3.0, 1.0]);
        // Time to exhaustion = period / factor: 720 h / 14.4 = 50 h.
        assert_eq!(t[0].exhaustion(p), "2d2h");
        assert_eq!(t[3].exhaustion(p), "30d");
    }

    #[test]
    fn twenty_eight_days_scales_like_sloth() {
        // Sloth's google-28d.yaml: 13.44, 5.6, 2.8, 0.933…
        let (_, t) = resolve("28d", &workbook_tiers()).unwrap();
        let f: Vec<f64> = t.iter().map(|x| x.factor).collect();
        assert_eq!(f[..3], [13.44, 5.6, 2.8]);
        assert!((f[3] - 0.933_333).abs() < 1e-6);
    }

    #[test]
    fn dead_tiers_follow_factor_times_budget() {
        let (_, t) = resolve("30d", &workbook_tiers()).unwrap();
        // 90 % target: 14.4 × 0.1 = 1.44 → dead; 6 × 0.1 = 0.6 → alive.
        assert!(t[0].is_dead(0.1));
        assert!(!t[1].is_dead(0.1));
        // 93.06 % is the Workbook's minimum for the 14.4× tier (1/14.4 = 0.0694…).
        assert!(!t[0].is_dead(0.0694));
        assert_eq!(t[0].threshold(0.05), 0.72);
    }

    #[test]
    fn bad_periods_name_the_field() {
        for (p, needle) in [
            ("1M", "not a Prometheus duration"),
            ("2d", "shorter than the 3d window"),
            ("0d", "longer than zero"),
        ] {
            let e = resolve(p, &workbook_tiers()).unwrap_err().to_string();
            assert!(e.starts_with("budget.window: "), "{e}");
            assert!(e.contains(needle), "{e}");
        }
    }
}
