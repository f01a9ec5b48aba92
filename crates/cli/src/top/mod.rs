//! `headroom top`: a live view of a server's SLO, per class, over sliding windows.
//!
//! * [`history`]: scrapes reduced to per-class snapshots, windows from their deltas;
//! * [`model`]: the pure [`model::TopModel`] the view shows (objective values, bad share, burn
//!   rate, phases, KV cache, queue, preemptions, GPU witness) and its plain lines;
//! * [`draw`]: ratatui rendering only; [`term`]: the terminal, restored however the view ends.
//!
//! This module wires them: reading the source (an engine's or a gateway's `/metrics`, or a
//! Prometheus server), the refresh loop, the keys, and the plain mode without a terminal.

pub mod draw;
pub mod history;
pub mod model;
pub mod term;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use headroom_core::slo::{DEFAULT_SLO_YAML, SloFile};
use headroom_signals::promql::{PromClient, window_from_prometheus};
use headroom_signals::scrape::unix_now_s;
use headroom_signals::{Scraper, Selection};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use tokio::time::Instant;

use crate::duration_arg::duration_arg;
use history::History;
use model::{ClassView, GpuView, SourceKind, TopModel, window_label};

/// `headroom top` flags.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// An engine's `/metrics` (vLLM, the twin `headroom sim`, SGLang, TGI, llama.cpp: one class
    /// per `model_name`) or a Headroom gateway's (one class per `class` label).
    #[arg(
        long,
        conflicts_with = "prometheus",
        required_unless_present = "prometheus"
    )]
    pub url: Option<String>,
    /// A Prometheus server's base URL: windows from PromQL `increase()` over each window (the
    /// engine's series, one class per `model_name`).
    #[arg(long)]
    pub prometheus: Option<String>,
    /// A dcgm-exporter `/metrics`: GPU utilisation, power and DRAM activity as the witness.
    #[arg(long)]
    pub dcgm: Option<String>,
    /// The SLO (default: the built-in one, `headroom sweep --print-defaults`).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// The sliding windows `w` cycles through, the first shown first (and in plain mode).
    #[arg(long, default_value = "1m,5m,30m", value_delimiter = ',', value_parser = duration_arg)]
    pub windows: Vec<Duration>,
    /// Seconds between refreshes (or a duration: `500ms`, `5s`).
    #[arg(long, default_value = "2", value_parser = duration_arg)]
    pub interval: Duration,
    /// Longest wait for one scrape or query, seconds.
    #[arg(long, default_value = "5", value_parser = duration_arg)]
    pub timeout: Duration,
    /// Stop after this long (seconds or a duration); without it, run until q, Ctrl-C or SIGTERM.
    #[arg(long, value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Stop after this many refreshes (the first scrape, a baseline, is not one).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Plain lines instead of the full-screen view (the default when stdout is no terminal):
    /// one line per class per refresh, `key=value` pairs.
    #[arg(long)]
    pub plain: bool,
}

/// Where the figures come from.
enum Feed {
    Scrape {
        url: String,
        shown: String,
        dcgm: Option<String>,
        scraper: Scraper,
        history: History,
    },
    Prometheus {
        client: PromClient,
        /// The last model per window index: cycling windows re-queries.
        cached: Option<TopModel>,
    },
}

struct Top {
    feed: Feed,
    slo: SloFile,
    windows: Vec<f64>,
    window: usize,
    errors: Vec<String>,
}

impl Top {
    /// One refresh: scrape (or query), keep the errors of this refresh.
    async fn refresh(&mut self) {
        self.errors.clear();
        let window_s = self.windows[self.window];
        match &mut self.feed {
            Feed::Scrape {
                url,
                dcgm,
                scraper,
                history,
                ..
            } => {
                let d = async {
                    match dcgm {
                        Some(u) => Some(scraper.scrape(u).await),
                        None => None,
                    }
                };
                let (e, d) = tokio::join!(scraper.scrape(url), d);
                match e {
                    Ok(s) => {
                        if let Err(msg) = history.ingest(&s) {
                            self.errors.push(msg);
                        }
                    }
                    Err(err) => self.errors.push(err.to_string()),
                }
                match d {
                    Some(Ok(s)) => history.ingest_dcgm(&s),
                    Some(Err(err)) => self.errors.push(err.to_string()),
                    None => {}
                }
            }
            Feed::Prometheus { client, cached } => {
                match prometheus_model(client, &self.slo, window_s).await {
                    Ok(m) => *cached = Some(m),
                    Err(e) => self.errors.push(format!("{e:#}")),
                }
            }
        }
    }

    /// The model of the selected window from what was read so far.
    fn model(&self) -> TopModel {
        let window_s = self.windows[self.window];
        let mut m = match &self.feed {
            Feed::Scrape { shown, history, .. } => TopModel {
                source: shown.clone(),
                classes: history
                    .windows(window_s)
                    .iter()
                    .map(|(c, kind, w)| ClassView::from_window(c, *kind, w, &self.slo.spec_for(c)))
                    .collect(),
                gpus: history
                    .gpus(window_s)
                    .iter()
                    .map(GpuView::from_window)
                    .collect(),
                ..TopModel::default()
            },
            Feed::Prometheus { client, cached } => cached.clone().unwrap_or_else(|| TopModel {
                source: format!("prometheus {}", client.shown()),
                ..TopModel::default()
            }),
        };
        m.window_s = window_s;
        m.window_label = window_label(window_s);
        m.at_unix_s = unix_now_s();
        m.errors = self.errors.clone();
        m
    }
}

/// Classes and windows from a Prometheus server: `count by (model_name)` of the running gauge
/// names the classes; each class's window is `headroom-signals`' PromQL window.
async fn prometheus_model(client: &PromClient, slo: &SloFile, window_s: f64) -> Result<TopModel> {
    let now = unix_now_s();
    let found = client
        .query("count by (model_name) (vllm:num_requests_running)", now)
        .await?;
    let mut names: Vec<Option<String>> = found
        .iter()
        .map(|s| s.labels.get("model_name").map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        names.push(None);
    }
    let mut m = TopModel {
        source: format!("prometheus {}", client.shown()),
        ..TopModel::default()
    };
    for name in names {
        let sel = Selection {
            model_name: name.clone(),
            engine: None,
        };
        let w = window_from_prometheus(client, window_s, now, &sel, None).await?;
        if m.gpus.is_empty() {
            m.gpus = w.gpus.iter().map(GpuView::from_window).collect();
        }
        let class = name.unwrap_or_else(|| "all".to_owned());
        m.classes.push(ClassView::from_window(
            &class,
            SourceKind::Engine,
            &w,
            &slo.spec_for(&class),
        ));
    }
    Ok(m)
}

fn check_secs(flag: &str, d: Duration, min: f64) -> Result<Duration> {
    let v = d.as_secs_f64();
    if !(v >= min && v <= 86_400.0 * 90.0) {
        bail!("{flag}: {v} s is out of range ({min} s to 90 days)");
    }
    Ok(d)
}

/// Runs `headroom top` until q/Esc/Ctrl-C, SIGTERM, `--duration` or `--iterations`.
///
/// # Errors
/// Bad flags or an unreadable `--slo`; an unreachable server is not one: it shows as an error
/// line naming the URL and is retried every refresh.
pub async fn run(args: TopArgs) -> Result<i32> {
    let interval = check_secs("--interval", args.interval, 0.1)?;
    let timeout = check_secs("--timeout", args.timeout, 0.1)?;
    let duration = args
        .duration
        .map(|d| check_secs("--duration", d, 0.0))
        .transpose()?;
    if args.windows.is_empty() {
        bail!("--windows: give at least one window, e.g. 1m,5m,30m");
    }
    for w in &args.windows {
        check_secs("--windows", *w, 1.0)?;
    }
    let windows: Vec<f64> = args.windows.iter().map(Duration::as_secs_f64).collect();
    let slo = match &args.slo {
        Some(p) => SloFile::load(p).with_context(|| format!("--slo {}", p.display()))?,
        None => SloFile::parse(DEFAULT_SLO_YAML, std::path::Path::new("<built-in SLO>"))?,
    };
    let max_window = windows.iter().copied().fold(0.0, f64::max);
    let feed = match (&args.url, &args.prometheus) {
        (Some(url), _) => Feed::Scrape {
            url: url.clone(),
            shown: headroom_core::run::redact_url(url),
            dcgm: args.dcgm.clone(),
            scraper: Scraper::new(timeout),
            history: History::new(max_window),
        },
        (None, Some(p)) => Feed::Prometheus {
            client: PromClient::new(p, timeout)?,
            cached: None,
        },
        (None, None) => bail!("give --url (an engine's or gateway's /metrics) or --prometheus"),
    };
    let mut top = Top {
        feed,
        slo,
        windows,
        window: 0,
        errors: Vec::new(),
    };
    let mut stop =
        crate::StopSignal::install().context("cannot install the Ctrl-C and SIGTERM handlers")?;
    let deadline = duration.map(|d| Instant::now() + d);
    let plain = args.plain || !std::io::stdout().is_terminal();
    let is_scrape = matches!(top.feed, Feed::Scrape { .. });
    // The first scrape is the windows' baseline; a Prometheus range needs none.
    if is_scrape {
        top.refresh().await;
    }
    let mut next = Instant::now() + if is_scrape { interval } else { Duration::ZERO };
    if plain {
        let mut done = 0u64;
        loop {
            let until = deadline.map_or(next, |d| d.min(next));
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = stop.recv() => return Ok(0),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
            next = (next + interval).max(Instant::now());
            top.refresh().await;
            let m = top.model();
            let ts = chrono::Utc::now()
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string();
            let mut text = model::plain_lines(&m, &ts).join("\n");
            if !text.is_empty() {
                text.push('\n');
            }
            crate::write_stdout(&text)?;
            done += 1;
            if args.iterations.is_some_and(|n| done >= n) {
                return Ok(0);
            }
        }
    }
    let mut screen = term::Screen::enter(term::Target::Stdout, true)
        .context("cannot set up the terminal; use --plain")?;
    let (tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    let quit = Arc::new(AtomicBool::new(false));
    let reader_quit = quit.clone();
    // crossterm's reads block: a thread of their own, polling so it notices the end.
    let reader = std::thread::spawn(move || {
        while !reader_quit.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => match event::read() {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) => {}
                Err(_) => return,
            }
        }
    });
    let mut ui = draw::Ui::default();
    let mut done = 0u64;
    let result: Result<i32> = async {
        let mut model = top.model();
        screen.terminal.draw(|f| draw::draw_top(f, &model, ui))?;
        'outer: loop {
            let until = deadline.map_or(next, |d| d.min(next));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    _ = stop.recv() => break 'outer,
                    ev = keys.recv() => {
                        let Some(ev) = ev else { break 'outer };
                        let n = model.classes.len().max(1);
                        match ev {
                            Event::Key(k) if k.kind == KeyEventKind::Press => match k.code {
                                KeyCode::Char('q') | KeyCode::Esc => break 'outer,
                                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                                    break 'outer
                                }
                                KeyCode::Tab | KeyCode::Right => ui.class = (ui.class + 1) % n,
                                KeyCode::BackTab | KeyCode::Left => ui.class = (ui.class + n - 1) % n,
                                KeyCode::Char('w') => {
                                    top.window = (top.window + 1) % top.windows.len();
                                    if !is_scrape {
                                        break; // a Prometheus window is another query
                                    }
                                }
                                _ => continue,
                            },
                            Event::Resize(..) => {}
                            _ => continue,
                        }
                        model = top.model();
                        screen.terminal.draw(|f| draw::draw_top(f, &model, ui))?;
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let now = Instant::now();
            if now >= next {
                next = (next + interval).max(now);
            }
            top.refresh().await;
            model = top.model();
            ui.class = ui.class.min(model.classes.len().saturating_sub(1));
            screen.terminal.draw(|f| draw::draw_top(f, &model, ui))?;
            done += 1;
            if args.iterations.is_some_and(|n| done >= n) {
                break;
            }
        }
        Ok(0)
    }
    .await;
    quit.store(true, Ordering::Relaxed);
    drop(screen);
    let _ = reader.join();
    result
}
