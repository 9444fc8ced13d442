//! The help overlay (`?`): keys and what the colours mean, drawn centred
//! over the current view.

use crate::app::{HOT_CPU_PERCENT, HOT_QUEUE_DEPTH, STALE_HEARTBEAT_MS};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

pub fn render(frame: &mut Frame, area: Rect) {
    let key = |keys: &'static str, what: &'static str| {
        Line::from(vec![
            Span::styled(
                format!("{keys:>14}  "),
                Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ),
            Span::raw(what),
        ])
    };
    let lines = vec![
        key("q, Ctrl-C", "quit"),
        key("Tab, ←→, h l", "switch view (1 2 3 jump)"),
        key("↑↓, j k", "move the selection / scroll events"),
        key("PgUp PgDn g G", "page, first, last"),
        key("s", "change the sort order"),
        key("/", "filter topics; Enter applies, Esc clears"),
        key("p", "pause / resume updates"),
        key("?, Esc", "close this help"),
        Line::raw(""),
        Line::from(vec![
            Span::styled(
                "red",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                ": CPU ≥ {HOT_CPU_PERCENT:.0}%, queue ≥ {HOT_QUEUE_DEPTH}, or heartbeat older than {} s (!)",
                STALE_HEARTBEAT_MS / 1000
            )),
        ]),
        Line::from(vec![
            Span::styled("yellow", Style::new().fg(Color::Yellow)),
            Span::raw(": getting there"),
        ]),
    ];
    let width = area.width.min(72);
    let height = area
        .height
        .min(u16::try_from(lines.len()).unwrap_or(u16::MAX) + 2);
    let popup = Rect::new(
        area.x + (area.width - width) / 2,
        area.y + (area.height - height) / 2,
        width,
        height,
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(" iggy-top help ")
                .border_style(Style::new().fg(Color::Cyan)),
        ),
        popup,
    );
}
