//! SVG line charts (plotters' SVG backend): series against load, with an optional horizontal SLO
//! line. Self-contained markup, no fonts or scripts fetched.

use plotters::prelude::*;

/// One line on a chart.
pub struct Series<'a> {
    /// Legend label.
    pub label: &'a str,
    /// (x, y) points, any order; sorted by x before drawing.
    pub points: Vec<(f64, f64)>,
}

/// The largest coordinate drawn: larger values (a corrupt or hostile results file) are left out.
const MAX_COORD: f64 = 1e9;

/// Renders a line chart as an SVG string, `width`×`height` pixels. `threshold` draws a dashed
/// red line labelled `SLO`. Returns an empty string when there is nothing to draw.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    threshold: Option<f64>,
    (width, height): (u32, u32),
) -> String {
    // Values from a results file are not trusted: the plotting library overflows on a negative
    // or astronomic coordinate (a panic) and loops on ticks over a range of 1e308 (a hang).
    let plottable = |v: f64| v.is_finite() && (0.0..=MAX_COORD).contains(&v);
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| plottable(*x) && plottable(*y))
        .collect();
    if pts.is_empty() {
        return String::new();
    }
    let threshold = threshold.filter(|t| plottable(*t));
    let series: Vec<Series<'_>> = series
        .iter()
        .map(|s| Series {
            label: s.label,
            points: s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| plottable(*x) && plottable(*y))
                .collect(),
        })
        .collect();
    let series = &series[..];
    let x_max = pts.iter().map(|p| p.0).fold(0.0f64, f64::max).max(1e-9) * 1.05;
    let mut y_max = pts.iter().map(|p| p.1).fold(0.0f64, f64::max);
    if let Some(t) = threshold {
        y_max = y_max.max(t);
    }
    let y_max = (y_max * 1.1).max(1e-9);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let chart = Chart {
            title,
            x_label,
            y_label,
            series,
            threshold,
            x_max,
            y_max,
        };
        if draw(&root, &chart).is_err() {
            return String::new();
        }
    }
    svg
}

/// What one chart draws, its values already filtered to plottable ones.
struct Chart<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    series: &'a [Series<'a>],
    /// The dashed `SLO` line, when there is one.
    threshold: Option<f64>,
    /// The axes' upper ends (both start at 0).
    x_max: f64,
    y_max: f64,
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &Chart<'_>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let Chart {
        title,
        x_label,
        y_label,
        series,
        threshold,
        x_max,
        y_max,
    } = *c;
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let palette = [BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, s) in series.iter().enumerate() {
        let mut p = s.points.clone();
        p.retain(|(x, y)| x.is_finite() && y.is_finite());
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = palette[i % palette.len()];
        chart
            .draw_series(LineSeries::new(p.clone(), color.stroke_width(2)))?
            .label(s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
        chart.draw_series(p.into_iter().map(|pt| Circle::new(pt, 3, color.filled())))?;
    }
    if let Some(t) = threshold {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, t), (x_max, t)],
                6,
                4,
                RED.stroke_width(2),
            ))?
            .label("SLO")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], RED));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_series_and_slo_line() {
        let s = line_chart(
            "TTFT",
            "concurrency",
            "ms",
            &[Series {
                label: "p95",
                points: vec![(1.0, 10.0), (2.0, 20.0), (4.0, f64::NAN)],
            }],
            Some(30.0),
            (400, 300),
        );
        assert!(s.starts_with("<svg"), "{}", &s[..s.len().min(80)]);
        assert!(s.contains("SLO"));
        assert!(s.contains("p95"));
        assert_eq!(line_chart("x", "x", "y", &[], None, (10, 10)), "");
    }
}

#[cfg(test)]
mod hostile_values {
    use super::*;

    /// Values no run measures (a tampered results.json) are left out, not drawn: a negative or
    /// astronomic threshold or point panicked the plotting library or hung it on its ticks.
    #[test]
    fn absurd_values_are_left_out() {
        let s = [Series {
            label: "p95",
            points: vec![(4.0, 50.0), (8.0, 1e308), (-1.0, 5.0), (16.0, -1e300)],
        }];
        for t in [Some(-1e300), Some(1e308), Some(f64::NAN), Some(300.0), None] {
            let svg = line_chart("t", "x", "ms", &s, t, (200, 100));
            assert!(svg.contains("<svg"), "{t:?}");
        }
        let none = [Series {
            label: "p95",
            points: vec![(1.0, 1e308)],
        }];
        assert!(line_chart("t", "x", "ms", &none, Some(1e308), (200, 100)).is_empty());
    }
}
