//! The events view: the daemon's recent warnings and errors, newest at the
//! bottom, coloured by level, filtered by level (`e`) and text (`/`),
//! scrollable with ↑/↓ (towards older/newer).

use crate::api::{EventLevel, Snapshot};
use crate::app::App;
use crate::ui::fmt_clock;
use ratatui::Frame;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

pub fn render(frame: &mut Frame, area: Rect, app: &App, snapshot: &Snapshot) {
    let events = app.event_rows();
    let block = Block::bordered().title(format!(
        " Events · {} of {} recent, newest last · {} (e) {}",
        events.len(),
        snapshot.events.len(),
        app.event_filter.label(),
        if app.filter().is_empty() {
            String::new()
        } else {
            format!("· search {:?} ", app.filter())
        }
    ));
    if snapshot.events.is_empty() {
        frame.render_widget(
            Paragraph::new("No recent warnings or errors.")
                .alignment(Alignment::Center)
                .block(block),
            area,
        );
        return;
    }
    let visible = usize::from(block.inner(area).height);
    let end = events.len().saturating_sub(app.event_scroll);
    let start = end.saturating_sub(visible);
    let lines: Vec<Line> = events[start..end]
        .iter()
        .map(|event| {
            let (label, style) = match event.level {
                EventLevel::Info => ("INFO ", Style::new().fg(Color::Gray)),
                EventLevel::Warn => ("WARN ", Style::new().fg(Color::Yellow)),
                EventLevel::Error => (
                    "ERROR",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
            };
            Line::from(vec![
                Span::styled(
                    format!("{} ", fmt_clock(event.at_ms)),
                    Style::new().fg(Color::DarkGray),
                ),
                Span::styled(label, style),
                Span::raw(" "),
                Span::raw(event.message.clone()),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
