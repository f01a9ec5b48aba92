//! How `headroom sweep` shows a level in progress (`--progress`): `tui`, the live view of
//! `headroom top` for the level (phase, load, progress bar, elapsed and remaining, samples per
//! objective against what the percentile needs, the percentiles so far against their
//! thresholds); `plain`, one line per level and a heartbeat line at least every 10 s (the
//! sweep's own bars, hidden); `none`, nothing until the final table.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headroom_core::run::{LevelResult, LoadMode};
use headroom_sweep::controller::{LevelTick, Progress};

use crate::top::draw::draw_level;
use crate::top::model::{LevelView, ObjectiveRow};
use crate::top::term::{Screen, Target};

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A line per level, a heartbeat at least every 10 s.
    Plain,
    /// The live full-screen view on stderr.
    Tui,
    /// Nothing but the final table.
    None,
}

impl ProgressMode {
    /// The default: `tui` when stderr is a terminal, else `plain`.
    pub fn detect() -> ProgressMode {
        if std::io::stderr().is_terminal() {
            ProgressMode::Tui
        } else {
            ProgressMode::Plain
        }
    }
}

/// A level's load as the lines print it: `16 concurrent`, `4 req/s`.
pub fn load_label(load: f64, mode: LoadMode) -> String {
    format!("{} {}", headroom_core::slo::fmt_num(load), mode.unit())
}

/// The line a finished level leaves: `  chat: 16 concurrent: PASS`.
pub fn level_line(phase: &str, l: &LevelResult) -> String {
    format!(
        "  {phase}: {}: {}",
        load_label(l.load, l.mode),
        l.verdict_line()
    )
}

/// `--progress none`.
pub struct Silent;

impl Progress for Silent {
    fn level_start(&self, _: &str, _: f64, _: LoadMode, _: Duration) {}
    fn level_done(&self, _: &str, _: &LevelResult) {}
    fn note(&self, _: &str) {}
}

struct Live {
    view: LevelView,
    level_start: Instant,
}

/// `--progress tui`: a thread redraws the view on stderr four times a second from what the
/// sweep reports; dropping it leaves the screen and prints the levels' lines and the notes, so
/// the terminal keeps the record that `plain` would have left.
pub struct Tui {
    live: Arc<Mutex<Live>>,
    quit: Arc<AtomicBool>,
    drawer: Option<std::thread::JoinHandle<()>>,
}

impl Tui {
    /// Enters the alternate screen on stderr (no raw mode: Ctrl-C stays the sweep's signal).
    ///
    /// # Errors
    /// When the terminal refuses (the caller falls back to `plain`).
    pub fn start() -> std::io::Result<Tui> {
        let mut screen = Screen::enter(Target::Stderr, false)?;
        let live = Arc::new(Mutex::new(Live {
            view: LevelView {
                phase: "starting".into(),
                ..LevelView::default()
            },
            level_start: Instant::now(),
        }));
        let quit = Arc::new(AtomicBool::new(false));
        let (l, q) = (live.clone(), quit.clone());
        let drawer = std::thread::spawn(move || {
            while !q.load(Ordering::Relaxed) {
                let view = match l.lock() {
                    Ok(mut g) => {
                        g.view.elapsed_s = g.level_start.elapsed().as_secs_f64();
                        g.view.clone()
                    }
                    Err(_) => return,
                };
                if screen.terminal.draw(|f| draw_level(f, &view)).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            drop(screen);
        });
        Ok(Tui {
            live,
            quit,
            drawer: Some(drawer),
        })
    }

    fn with(&self, f: impl FnOnce(&mut Live)) {
        if let Ok(mut g) = self.live.lock() {
            f(&mut g);
        }
    }
}

impl Progress for Tui {
    fn level_start(&self, phase: &str, load: f64, mode: LoadMode, expected: Duration) {
        self.with(|l| {
            l.level_start = Instant::now();
            l.view.phase = phase.to_owned();
            l.view.load = load_label(load, mode);
            l.view.expected_s = expected.as_secs_f64();
            l.view.finished = 0;
            l.view.in_window = false;
            l.view.objectives.clear();
        });
    }

    fn level_done(&self, phase: &str, level: &LevelResult) {
        self.with(|l| l.view.done.push(level_line(phase, level)));
    }

    fn note(&self, msg: &str) {
        self.with(|l| l.view.notes.push(format!("  {msg}")));
    }

    fn level_tick(&self, tick: &LevelTick) {
        self.with(|l| {
            l.view.in_window = true;
            l.view.finished = tick.finished;
            l.view.objectives = tick
                .objectives
                .iter()
                .map(ObjectiveRow::from_result)
                .collect();
        });
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(d) = self.drawer.take() {
            let _ = d.join();
        }
        if let Ok(g) = self.live.lock() {
            for line in g.view.done.iter().chain(&g.view.notes) {
                eprintln!("{line}");
            }
        }
    }
}
