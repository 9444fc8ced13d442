//! One graph panel: a bordered braille line chart of one to three series
//! over the chosen window, its title carrying each series' newest value in
//! its colour and the scale's top, and a plain "no history yet" when the
//! daemon has not sent points. Shared by the overview and the drill-down
//! views; it only draws what it is given.

use crate::series::{Window, max_y};
use crate::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};

/// One line of a graph.
pub struct Line3<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
}

/// Draw a graph titled `title` with `lines`, values formatted by `format`.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    theme: &Theme,
    title: &str,
    window: Window,
    lines: &[Line3<'_>],
    format: fn(f64) -> String,
) {
    if area.height < 3 || area.width < 8 {
        return;
    }
    let top = lines
        .iter()
        .map(|line| max_y(&line.points, 0.0))
        .fold(0.0, f64::max);
    let mut spans = vec![Span::styled(format!(" {title} "), theme.accent())];
    for line in lines {
        let newest = line.points.last().map_or(0.0, |point| point.1);
        spans.push(Span::styled(
            format!("{} {} ", line.label, format(newest)),
            line.style,
        ));
    }
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::from(spans))
        .title_bottom(Line::styled(
            format!(" {} · top {} ", window.label(), format(top)),
            theme.dim(),
        ));
    if lines.iter().all(|line| line.points.is_empty()) {
        frame.render_widget(
            Paragraph::new(Line::styled("no history yet", theme.dim())).block(block),
            area,
        );
        return;
    }
    let datasets: Vec<Dataset> = lines
        .iter()
        .map(|line| {
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(line.style)
                .data(&line.points)
        })
        .collect();
    let span = window.seconds() as f64;
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(Axis::default().bounds([-span, 0.0]))
        .y_axis(Axis::default().bounds([0.0, if top > 0.0 { top * 1.1 } else { 1.0 }]));
    frame.render_widget(chart, area);
}
