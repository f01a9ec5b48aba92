//! Choosing the next load level: bracket geometrically from a low load until the first failure,
//! then bisect between the last pass and the first failure to a stated resolution.
//!
//! Pure state machine, no I/O, so the search is tested on targets with known capacity. A level that
//! is INCONCLUSIVE never counts as a pass (a capacity claim needs a pass); while bracketing it does
//! not stop the climb, while bisecting it bounds the bisection as a failure would (the
//! conservative side) but is not reported as the first failure. Below every failure with no pass
//! yet, an INCONCLUSIVE level ends the search: a lower load only gives fewer samples per window
//! (the mixed example once walked from 16 down to 1 through undecided levels and then reported
//! "the lowest level tried (1) already fails").

use headroom_core::Verdict;

/// How levels are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum LevelPlan {
    /// Run these levels in order; stop after two consecutive failures.
    Fixed(Vec<f64>),
    /// Bracket then bisect.
    Auto {
        /// First level.
        start: f64,
        /// Multiplier while bracketing (> 1).
        growth: f64,
        /// Highest level ever tried.
        max: f64,
        /// Stop bisecting when `fail − pass ≤ max(min_step, resolution × pass)`.
        resolution: f64,
        /// Smallest meaningful step (1 for concurrency).
        min_step: f64,
        /// Round levels to integers (concurrency).
        integer: bool,
    },
}

/// The automatic search's bracket: its first level, growth while bracketing and highest level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoBracket {
    /// First level.
    pub start: f64,
    /// Multiplier while bracketing (> 1).
    pub growth: f64,
    /// Highest level ever tried.
    pub max: f64,
}

impl LevelPlan {
    /// The levels a run uses: `given` (`--levels`) first, else the workload's own list, else the
    /// automatic search over `bracket`, stepping by whole users in closed loop and by 0.05 req/s
    /// in open loop.
    pub fn resolve(
        given: Option<&Vec<f64>>,
        workload: &headroom_load::workload::Levels,
        mode: headroom_core::run::LoadMode,
        bracket: AutoBracket,
        resolution: f64,
    ) -> LevelPlan {
        use headroom_load::workload::Levels;
        let concurrency = mode == headroom_core::run::LoadMode::Concurrency;
        match (given, workload) {
            (Some(l), _) | (None, Levels::List(l)) => LevelPlan::Fixed(l.clone()),
            (None, Levels::Auto) => LevelPlan::Auto {
                start: bracket.start,
                growth: bracket.growth,
                max: bracket.max,
                resolution,
                min_step: if concurrency { 1.0 } else { 0.05 },
                integer: concurrency,
            },
        }
    }
}

/// Search state for one phase.
#[derive(Debug, Clone)]
pub struct Search {
    plan: LevelPlan,
    tried: Vec<(f64, Verdict)>,
    /// Highest passing level so far.
    best_pass: Option<f64>,
    /// Lowest failing level (FAIL only).
    lowest_fail: Option<f64>,
    /// Lowest level that did not pass once bracketing ended (FAIL, or INCONCLUSIVE while
    /// bisecting): the bisection's upper bound.
    lowest_bad: Option<f64>,
    /// An INCONCLUSIVE level while bisecting with no pass below it: the search stops.
    stalled: Option<f64>,
    bracketing: bool,
    /// Why the search ended, once it has.
    pub note: String,
}

impl Search {
    /// A new search following `plan`.
    pub fn new(plan: LevelPlan) -> Search {
        Search {
            plan,
            tried: Vec::new(),
            best_pass: None,
            lowest_fail: None,
            lowest_bad: None,
            stalled: None,
            bracketing: true,
            note: String::new(),
        }
    }

    /// Levels tried so far with their verdicts, in order.
    pub fn tried(&self) -> &[(f64, Verdict)] {
        &self.tried
    }

    /// Highest level that passed.
    pub fn capacity(&self) -> Option<f64> {
        self.best_pass
    }

    /// Lowest level that failed (an INCONCLUSIVE level is not a failure).
    pub fn first_fail(&self) -> Option<f64> {
        self.lowest_fail
    }

    /// Records the verdict of `load`.
    pub fn record(&mut self, load: f64, verdict: Verdict) {
        self.tried.push((load, verdict));
        match verdict {
            Verdict::Pass => {
                if self.best_pass.is_none_or(|p| load > p) {
                    self.best_pass = Some(load);
                }
            }
            Verdict::Fail => {
                if self.lowest_fail.is_none_or(|f| load < f) {
                    self.lowest_fail = Some(load);
                }
                if self.lowest_bad.is_none_or(|f| load < f) {
                    self.lowest_bad = Some(load);
                }
                self.bracketing = false;
            }
            Verdict::Inconclusive => {
                if !self.bracketing {
                    if self.lowest_bad.is_none_or(|f| load < f) {
                        self.lowest_bad = Some(load);
                    }
                    if self.best_pass.is_none_or(|p| p >= load) {
                        self.stalled = Some(load);
                    }
                }
            }
        }
    }

    /// The next level to run, or `None` when the search is over (see [`Search::note`]).
    pub fn next_level(&mut self) -> Option<f64> {
        match self.plan.clone() {
            LevelPlan::Fixed(levels) => {
                let n = self.tried.len();
                let consecutive_fails = self
                    .tried
                    .iter()
                    .rev()
                    .take_while(|(_, v)| *v == Verdict::Fail)
                    .count();
                if consecutive_fails >= 2 {
                    self.note = "stopped after two consecutive failing levels".into();
                    return None;
                }
                if n >= levels.len() {
                    self.note = "all given levels run".into();
                    return None;
                }
                Some(levels[n])
            }
            LevelPlan::Auto {
                start,
                growth,
                max,
                resolution,
                min_step,
                integer,
            } => {
                let round = |x: f64| if integer { x.round() } else { x };
                let Some(&(last, _)) = self.tried.last() else {
                    return Some(round(start.min(max)));
                };
                if self.bracketing {
                    if last >= max {
                        self.note = format!("every level up to the maximum {max} passed");
                        return None;
                    }
                    let mut next = round(last * growth).min(max);
                    if next <= last {
                        next = (last + min_step).min(max);
                    }
                    return Some(next);
                }
                if let (Some(u), None) = (self.stalled, self.best_pass) {
                    let fail = self
                        .lowest_fail
                        .map_or(String::new(), |f| format!(" and {f} failed"));
                    self.note = format!(
                        "no level passed: {u} was undecided{fail}; a lower load gives fewer samples per window, so a longer --measure is what decides it"
                    );
                    return None;
                }
                let hi = self.lowest_bad.unwrap_or(last);
                let lo = self.best_pass.filter(|p| *p < hi).unwrap_or(0.0);
                let step = min_step.max(resolution * lo);
                if hi - lo <= step + 1e-9 {
                    let upper = match self.lowest_fail {
                        Some(f) if f > hi => format!("{hi} (undecided; {f} fails)"),
                        _ => format!("{hi} (fail)"),
                    };
                    self.note = if lo == 0.0 {
                        format!("the lowest level tried ({hi}) already fails")
                    } else {
                        format!(
                            "bracketed between {lo} (pass) and {upper} at resolution {}",
                            fmt_res(resolution, min_step)
                        )
                    };
                    return None;
                }
                let mut mid = round((lo + hi) / 2.0);
                if mid <= lo {
                    mid = lo + min_step;
                }
                if mid >= hi {
                    self.note = format!("bracketed between {lo} (pass) and {hi} (fail)");
                    return None;
                }
                if self.tried.iter().any(|(l, _)| (*l - mid).abs() < 1e-9) {
                    self.note =
                        format!("bracketed between {lo} and {hi}; no untried level between");
                    return None;
                }
                Some(mid)
            }
        }
    }
}

fn fmt_res(resolution: f64, min_step: f64) -> String {
    format!("{:.0}% (min step {min_step})", resolution * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(start: f64, max: f64) -> LevelPlan {
        LevelPlan::Auto {
            start,
            growth: 2.0,
            max,
            resolution: 0.1,
            min_step: 1.0,
            integer: true,
        }
    }

    /// Runs the search against a target that passes exactly up to `capacity`.
    fn run(plan: LevelPlan, capacity: f64) -> (Search, Vec<f64>) {
        let mut s = Search::new(plan);
        let mut seen = Vec::new();
        while let Some(l) = s.next_level() {
            seen.push(l);
            assert!(seen.len() < 50, "search does not terminate: {seen:?}");
            s.record(
                l,
                if l <= capacity {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
            );
        }
        (s, seen)
    }

    #[test]
    fn finds_known_capacity_to_resolution() {
        // Capacity 37: bracket 1,2,4,8,16,32,64, then bisect 48 (fail), 40 (fail), 36 (pass),
        // 38 (fail); 38 - 36 = 2 <= 10 % of 36, so the search stops at pass 36, fail 38.
        let (s, seen) = run(auto(1.0, 512.0), 37.0);
        assert_eq!(
            seen,
            vec![1., 2., 4., 8., 16., 32., 64., 48., 40., 36., 38.]
        );
        assert_eq!(s.capacity(), Some(36.0));
        assert_eq!(s.first_fail(), Some(38.0));
        // Every capacity from 1 to 200 is found within max(1, 10 %).
        for cap in 1..=200 {
            let (s, _) = run(auto(1.0, 512.0), cap as f64);
            let c = s.capacity().unwrap();
            let f = s.first_fail().unwrap();
            assert!(c <= cap as f64 && f > cap as f64, "cap {cap}: {c} {f}");
            assert!(f - c <= 1f64.max(0.1 * c) + 1e-9, "cap {cap}: {c} {f}");
        }
    }

    #[test]
    fn all_pass_and_none_pass() {
        let (s, seen) = run(auto(4.0, 20.0), 1000.0);
        assert_eq!(seen, vec![4., 8., 16., 20.]);
        assert_eq!(s.capacity(), Some(20.0));
        assert!(s.note.contains("maximum"));
        let (s, seen) = run(auto(4.0, 20.0), 0.0);
        assert_eq!(seen, vec![4., 2., 1.]);
        assert_eq!(s.capacity(), None);
        assert!(s.note.contains("already fails"), "{}", s.note);
    }

    #[test]
    fn inconclusive_is_never_capacity() {
        let mut s = Search::new(auto(1.0, 64.0));
        // 1 inconclusive (too few samples), 2 pass, 4 fail -> bisect to 3.
        assert_eq!(s.next_level(), Some(1.0));
        s.record(1.0, Verdict::Inconclusive);
        assert_eq!(s.next_level(), Some(2.0));
        s.record(2.0, Verdict::Pass);
        assert_eq!(s.next_level(), Some(4.0));
        s.record(4.0, Verdict::Fail);
        assert_eq!(s.next_level(), Some(3.0));
        s.record(3.0, Verdict::Inconclusive);
        assert_eq!(s.next_level(), None);
        assert_eq!(s.capacity(), Some(2.0));
        // 3 bounds the bisection but is no failure: 4 is the first.
        assert_eq!(s.first_fail(), Some(4.0));
        assert!(
            s.note
                .contains("between 2 (pass) and 3 (undecided; 4 fails)"),
            "{}",
            s.note
        );
    }

    /// Failing from the first level, then undecided below: the search stops at the first
    /// undecided level instead of walking down to 1, and reports the real failure.
    #[test]
    fn undecided_below_every_failure_ends_the_search() {
        let mut s = Search::new(auto(64.0, 512.0));
        assert_eq!(s.next_level(), Some(64.0));
        s.record(64.0, Verdict::Fail);
        assert_eq!(s.next_level(), Some(32.0));
        s.record(32.0, Verdict::Fail);
        assert_eq!(s.next_level(), Some(16.0));
        s.record(16.0, Verdict::Inconclusive);
        assert_eq!(s.next_level(), None);
        assert_eq!(s.capacity(), None);
        assert_eq!(s.first_fail(), Some(32.0));
        assert!(
            s.note
                .starts_with("no level passed: 16 was undecided and 32 failed"),
            "{}",
            s.note
        );
    }

    #[test]
    fn fixed_levels_stop_after_two_failures() {
        let (s, seen) = run(LevelPlan::Fixed(vec![1., 2., 4., 8., 16.]), 2.0);
        assert_eq!(seen, vec![1., 2., 4., 8.]);
        assert_eq!(s.capacity(), Some(2.0));
        let (_, seen) = run(LevelPlan::Fixed(vec![1., 2.]), 100.0);
        assert_eq!(seen, vec![1., 2.]);
    }

    #[test]
    fn rate_mode_is_continuous() {
        let plan = LevelPlan::Auto {
            start: 0.5,
            growth: 2.0,
            max: 100.0,
            resolution: 0.1,
            min_step: 0.05,
            integer: false,
        };
        let (s, _) = run(plan, 3.3);
        let c = s.capacity().unwrap();
        let f = s.first_fail().unwrap();
        assert!(c <= 3.3 && f > 3.3 && f - c <= 0.1 * c + 0.05, "{c} {f}");
    }
}
