//! Drawing `headroom top` and the sweep's live view with ratatui. Renders a [`TopModel`] or a
//! [`LevelView`] as it is: no figure is computed here, only formatted.

use headroom_core::slo::{fmt_duration_s, fmt_num};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Row, Table, Tabs, Wrap};

use super::model::{ClassView, LevelView, ObjectiveRow, Status, TopModel};

/// What the viewer chose: which class is shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ui {
    /// Index into [`TopModel::classes`] (clamped when drawing).
    pub class: usize,
}

/// The keys, as the footer states them.
pub const KEYS: &str = "tab/←→ class · w window · q quit";

fn status_style(s: Status) -> Style {
    match s {
        Status::Ok => Style::default().fg(Color::Green),
        Status::Breach => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        Status::TooFew | Status::Undecided => Style::default().fg(Color::Yellow),
        Status::NoData => Style::default().fg(Color::DarkGray),
    }
}

fn status_text(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Breach => "BREACH",
        Status::TooFew => "too few",
        Status::Undecided => "undecided",
        Status::NoData => "no data",
    }
}

/// A latency in the SLO's units (`300 ms`), `≤ 100 ms` for an upper bound; a ratio in percent.
fn figure(o: &ObjectiveRow, v: Option<f64>, at_most: bool) -> String {
    match v {
        None => "–".to_owned(),
        Some(v) if o.latency => format!("{}{}", if at_most { "≤ " } else { "" }, fmt_duration_s(v)),
        Some(v) => format!("{} %", fmt_num(v * 100.0)),
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "–".to_owned())
}

/// The objectives table: value against threshold, bad share, burn rate, samples against the
/// count the percentile needs, standing.
pub fn objectives_table(rows: &[ObjectiveRow], title: String) -> Table<'static> {
    let header = Row::new([
        "objective",
        "value",
        "threshold",
        "bad share",
        "burn",
        "samples / need",
        "status",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = rows
        .iter()
        .map(|o| {
            Row::new(vec![
                Span::raw(o.description.clone()),
                Span::raw(figure(o, o.value, o.at_most)),
                Span::raw(figure(o, Some(o.threshold), false)),
                Span::raw(opt(o.bad_share, |b| format!("{} %", fmt_num(b * 100.0)))),
                Span::raw(opt(o.burn, |b| format!("{b:.2}"))),
                Span::raw(if o.latency {
                    format!("{} / {}", o.samples, o.need)
                } else {
                    o.samples.to_string()
                }),
                Span::styled(status_text(o.status), status_style(o.status)),
            ])
        })
        .collect();
    Table::new(
        body,
        [
            Constraint::Length(30),
            Constraint::Length(12),
            Constraint::Length(11),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(15),
            Constraint::Length(10),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::ALL).title(title))
}

fn engine_lines(c: &ClassView) -> Vec<Line<'static>> {
    let s = |v: Option<f64>| opt(v, fmt_duration_s);
    let pct = |v: Option<f64>| opt(v, |x| format!("{} %", fmt_num(x * 100.0)));
    let n = |v: Option<f64>| opt(v, |x| format!("{x:.0}"));
    let (waiting, running) = match c.kind {
        super::model::SourceKind::Engine => ("waiting", "running"),
        super::model::SourceKind::Gateway => ("queued (gateway)", "in flight (gateway)"),
    };
    let mut out = vec![
        Line::from(format!(
            "phases (means)  queue {}   prefill {}   decode {}",
            s(c.queue_mean_s),
            s(c.prefill_mean_s),
            s(c.decode_mean_s)
        )),
        Line::from(format!(
            "KV cache {} (max {})   {waiting} {}   {running} {}   preemptions {}   requests finished {}",
            pct(c.kv_usage),
            pct(c.kv_usage_max),
            n(c.waiting),
            n(c.running),
            n(c.preemptions),
            n(c.requests)
        )),
    ];
    let notes: Vec<String> = c
        .objectives
        .iter()
        .filter_map(|o| o.note.as_ref().map(|n| format!("{}: {n}", o.id)))
        .collect();
    if !notes.is_empty() {
        out.push(Line::styled(
            notes.join("; "),
            Style::default().fg(Color::DarkGray),
        ));
    }
    out
}

/// Draws `headroom top`'s screen.
pub fn draw_top(f: &mut Frame, m: &TopModel, ui: Ui) {
    let area = f.area();
    let gpu_h = if m.gpus.is_empty() {
        0
    } else {
        m.gpus.len().min(8) as u16 + 2
    };
    let err_h = if m.errors.is_empty() {
        0
    } else {
        m.errors.len().min(4) as u16 + 2
    };
    let [head, tabs, objs, engine, gpu, errs, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(5),
        Constraint::Length(gpu_h),
        Constraint::Length(err_h),
        Constraint::Length(1),
    ])
    .areas(area);
    let class = m
        .classes
        .get(ui.class.min(m.classes.len().saturating_sub(1)));
    let span = class
        .and_then(|c| c.span_s)
        .map(|s| format!(" ({} of data)", fmt_duration_s(s.round())))
        .unwrap_or_default();
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                "headroom top",
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("  {}  window {}{span}", m.source, m.window_label)),
        ])),
        head,
    );
    let names: Vec<String> = m.classes.iter().map(|c| c.name.clone()).collect();
    f.render_widget(
        Tabs::new(names)
            .select(ui.class.min(m.classes.len().saturating_sub(1)))
            .highlight_style(Style::default().add_modifier(Modifier::REVERSED)),
        tabs,
    );
    match class {
        Some(c) => {
            f.render_widget(
                objectives_table(
                    &c.objectives,
                    format!(" {} · window {} ", c.name, m.window_label),
                ),
                objs,
            );
            f.render_widget(
                Paragraph::new(engine_lines(c))
                    .wrap(Wrap { trim: true })
                    .block(Block::default().borders(Borders::ALL).title(" server ")),
                engine,
            );
        }
        None => f.render_widget(
            Paragraph::new("waiting for two scrapes of the server…")
                .block(Block::default().borders(Borders::ALL)),
            objs,
        ),
    }
    if gpu_h > 0 {
        let lines: Vec<Line> = m
            .gpus
            .iter()
            .take(8)
            .map(|g| {
                Line::from(format!(
                    "{}  util {}   power {}   DRAM active {}",
                    g.name,
                    opt(g.util_pct, |v| format!("{v:.0} %")),
                    opt(g.power_w, |v| format!("{v:.0} W")),
                    opt(g.dram_active, |v| format!("{:.0} %", v * 100.0)),
                ))
            })
            .collect();
        f.render_widget(
            Paragraph::new(lines).block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" GPU (dcgm-exporter) "),
            ),
            gpu,
        );
    }
    draw_errors(f, &m.errors, errs);
    f.render_widget(
        Paragraph::new(format!("{KEYS}   {} classes", m.classes.len()))
            .style(Style::default().fg(Color::DarkGray)),
        foot,
    );
}

fn draw_errors(f: &mut Frame, errors: &[String], area: Rect) {
    if area.height == 0 {
        return;
    }
    let lines: Vec<Line> = errors
        .iter()
        .take(4)
        .map(|e| Line::styled(e.clone(), Style::default().fg(Color::Red)))
        .collect();
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" errors (retrying) "),
        ),
        area,
    );
}

/// Draws the sweep's live view.
pub fn draw_level(f: &mut Frame, v: &LevelView) {
    let samples: Vec<Line> = v
        .objectives
        .iter()
        .map(|o| {
            let mut l = if !o.latency {
                format!("{}: {} requests", o.id, o.samples)
            } else if o.samples < o.need {
                format!(
                    "{}: {} of the {} samples the percentile needs",
                    o.id, o.samples, o.need
                )
            } else {
                format!(
                    "{}: {} samples, enough for the percentile ({})",
                    o.id, o.samples, o.need
                )
            };
            if let Some(n) = &o.note {
                l.push_str(&format!("; {n}"));
            }
            Line::from(l)
        })
        .collect();
    let [head, bar, objs, counts, done, notes] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(samples.len() as u16 + 2),
        Constraint::Length(v.done.len().min(8) as u16 + 2),
        Constraint::Length(v.notes.len().min(4) as u16 + 2),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(samples).block(Block::default().borders(Borders::ALL).title(" samples ")),
        counts,
    );
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                "headroom sweep",
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                "  phase {}  load {}  {}",
                v.phase,
                v.load,
                if v.in_window {
                    format!("measurement window: {} requests finished", v.finished)
                } else {
                    "warm-up".to_owned()
                }
            )),
        ])),
        head,
    );
    let ratio = if v.expected_s > 0.0 {
        (v.elapsed_s / v.expected_s).clamp(0.0, 1.0)
    } else {
        0.0
    };
    f.render_widget(
        Gauge::default()
            .ratio(ratio)
            .label(format!(
                "elapsed {:.0} s · remaining {:.0} s (planned; extended while an objective lacks samples)",
                v.elapsed_s,
                (v.expected_s - v.elapsed_s).max(0.0)
            ))
            .gauge_style(Style::default().fg(Color::Cyan)),
        bar,
    );
    f.render_widget(
        objectives_table(&v.objectives, format!(" {} · level in progress ", v.phase)),
        objs,
    );
    let lines: Vec<Line> = v
        .done
        .iter()
        .rev()
        .take(8)
        .rev()
        .map(|l| Line::from(l.clone()))
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" levels done "),
        ),
        done,
    );
    let lines: Vec<Line> = v
        .notes
        .iter()
        .rev()
        .take(4)
        .rev()
        .map(|l| Line::from(l.clone()))
        .collect();
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(Block::default().borders(Borders::ALL).title(" notes ")),
        notes,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn row(status: Status) -> ObjectiveRow {
        ObjectiveRow {
            id: serde_json::from_str("\"ttft_p95\"").unwrap(),
            description: "TTFT p95 < 300 ms".into(),
            latency: true,
            threshold: 0.3,
            value: Some(0.1),
            at_most: true,
            samples: 12,
            need: 20,
            bad_share: Some(0.0),
            allowed: 0.05,
            burn: Some(0.0),
            status,
            note: None,
        }
    }

    fn screen(draw: impl FnOnce(&mut Frame)) -> String {
        let mut t = Terminal::new(TestBackend::new(120, 30)).unwrap();
        t.draw(draw).unwrap();
        let b = t.backend().buffer().clone();
        (0..b.area.height)
            .map(|y| {
                (0..b.area.width)
                    .map(|x| b[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The screen renders what the model holds: the objective, its bound, threshold and
    /// standing, the class tabs and the error naming its URL.
    #[test]
    fn top_screen_renders_the_model() {
        let c = ClassView {
            name: "chat".into(),
            kind: super::super::model::SourceKind::Engine,
            span_s: Some(58.0),
            requests: Some(12.0),
            objectives: vec![row(Status::TooFew)],
            queue_mean_s: Some(0.002),
            prefill_mean_s: None,
            decode_mean_s: Some(1.5),
            kv_usage: Some(0.12),
            kv_usage_max: Some(0.4),
            waiting: Some(0.0),
            running: Some(3.0),
            preemptions: Some(0.0),
        };
        let mut other = c.clone();
        other.name = "rag".into();
        let m = TopModel {
            source: "http://127.0.0.1:9/metrics".into(),
            window_label: "1m".into(),
            window_s: 60.0,
            at_unix_s: 0.0,
            classes: vec![c, other],
            gpus: vec![],
            errors: vec!["http://127.0.0.1:9/metrics: unreachable".into()],
        };
        let s = screen(|f| draw_top(f, &m, Ui { class: 1 }));
        for want in [
            "headroom top",
            "window 1m (58 s of data)",
            "rag · window 1m",
            "TTFT p95 < 300 ms",
            "≤ 100 ms",
            "300 ms",
            "12 / 20",
            "too few",
            "queue 2 ms",
            "decode 1.5 s",
            "KV cache 12 % (max 40 %)",
            "unreachable",
            "tab/←→ class",
        ] {
            assert!(s.contains(want), "{want:?} missing in\n{s}");
        }
    }

    #[test]
    fn level_view_renders_progress() {
        let v = LevelView {
            phase: "chat".into(),
            load: "16 concurrent".into(),
            elapsed_s: 3.0,
            expected_s: 9.0,
            finished: 7,
            in_window: true,
            objectives: vec![row(Status::TooFew)],
            done: vec!["chat 8 concurrent: PASS".into()],
            notes: vec!["a note".into()],
        };
        let s = screen(|f| draw_level(f, &v));
        for want in [
            "phase chat",
            "load 16 concurrent",
            "measurement window: 7 requests finished",
            "elapsed 3 s · remaining 6 s",
            "12 / 20",
            "ttft_p95: 12 of the 20 samples the percentile needs",
            "chat 8 concurrent: PASS",
            "a note",
        ] {
            assert!(s.contains(want), "{want:?} missing in\n{s}");
        }
    }
}
