//! The help overlay (`?`): every key and what the colours mean, drawn
//! centred over the current view. The key list is `KEYS`, which the tests
//! check against what `App::update` does.

use crate::app::{App, HOT_CPU_PERCENT, HOT_QUEUE_DEPTH, STALE_HEARTBEAT_MS};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

/// Every key the console reacts to, with what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit"),
    (
        "1-7, Tab, ←→, h l",
        "views: overview shards streams groups clients events cluster",
    ),
    ("↑↓, j k", "move the selection / scroll events"),
    ("PgUp PgDn g G", "page, first, last"),
    (
        "Enter",
        "open: stream → topic → partition → segments; a group",
    ),
    ("Esc, Backspace", "clear the filter, then go back one level"),
    ("w, W", "graph window: 1m 5m 15m 1h 6h"),
    ("s", "sort (shards, clients)"),
    ("/", "filter or search this view; Enter applies, Esc clears"),
    ("e", "events: all levels, warn + error, errors only"),
    ("d", "clients: disconnect the selected client (asks y/n)"),
    ("L", "set the daemon's log level (asks y/n)"),
    (
        "S",
        "the daemon writes a snapshot ZIP to a new path (asks y/n)",
    ),
    ("p", "pause / resume updates"),
    ("?, Esc", "close this help"),
];

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = &app.theme;
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(keys, what)| {
            Line::from(vec![
                Span::styled(format!("{keys:>18}  "), theme.accent()),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled("red", theme.bad()),
        Span::raw(format!(
            ": CPU ≥ {HOT_CPU_PERCENT:.0}%, queue ≥ {HOT_QUEUE_DEPTH}, heartbeat older than {} s (!)",
            STALE_HEARTBEAT_MS / 1000
        )),
    ]));
    lines.push(Line::from(vec![
        Span::styled("yellow", theme.warn()),
        Span::raw(": getting there, or counters that moved"),
    ]));
    let width = area.width.min(80);
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
                .border_style(theme.accent()),
        ),
        popup,
    );
}
