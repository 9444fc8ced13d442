//! Pure render functions: `render(frame, app)` draws the whole screen from
//! `App` and nothing else (no I/O, no clock, no state of its own), so every
//! screen is testable with ratatui's `TestBackend`. Layout, top to bottom:
//! header (`overview`), view tabs with the connection status, the current
//! view (`shards`, `partitions`, `events`), a key hint line, and the help
//! overlay (`help`) on top. Narrow or short terminals drop columns and
//! panels rather than wrapping.

pub mod events;
pub mod help;
pub mod overview;
pub mod partitions;
pub mod shards;

use crate::app::{App, Connection, View};
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs, Wrap};

/// Rows the header takes.
pub const HEADER_ROWS: u16 = 5;

pub fn render(frame: &mut Frame, app: &App) {
    let [header, tabs, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_ROWS),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    overview::render(frame, header, app);
    render_tabs(frame, tabs, app);
    render_body(frame, body, app);
    render_footer(frame, footer, app);
    if app.help {
        help::render(frame, frame.area());
    }
}

fn render_tabs(frame: &mut Frame, area: Rect, app: &App) {
    let status = status_span(app);
    let status_width = u16::try_from(status.width())
        .unwrap_or(u16::MAX)
        .min(area.width / 2);
    let [tabs_area, status_area] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(status_width + 1)]).areas(area);
    let titles = View::ALL
        .iter()
        .enumerate()
        .map(|(index, view)| format!("{} {}", index + 1, view.title()));
    let selected = View::ALL.iter().position(|view| *view == app.view);
    let tabs = Tabs::new(titles)
        .select(selected)
        .highlight_style(
            Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
        )
        .divider("│");
    frame.render_widget(tabs, tabs_area);
    frame.render_widget(
        Paragraph::new(Line::from(status)).alignment(Alignment::Right),
        status_area,
    );
}

fn status_span(app: &App) -> Span<'static> {
    if app.paused {
        return Span::styled(
            "⏸ PAUSED (p resumes)",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        );
    }
    match &app.connection {
        Connection::Connecting => Span::styled("… connecting", Style::new().fg(Color::Yellow)),
        Connection::Connected(_) => Span::styled(
            format!("● live, every {}", fmt_interval(app.interval)),
            Style::new().fg(Color::Green),
        ),
        Connection::Disconnected { retry_in, .. } => Span::styled(
            format!("✖ disconnected, retry in {}", fmt_interval(*retry_in)),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
    }
}

fn render_body(frame: &mut Frame, area: Rect, app: &App) {
    let Some(snapshot) = &app.snapshot else {
        render_waiting(frame, area, app);
        return;
    };
    let area = match &app.connection {
        Connection::Disconnected { reason, .. } if area.height > 1 => {
            let [banner, rest] =
                Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
            let text = format!(
                "disconnected: {reason}; showing the snapshot of {} UTC",
                fmt_clock(snapshot.taken_at_ms)
            );
            frame.render_widget(
                Paragraph::new(text).style(Style::new().fg(Color::White).bg(Color::Red)),
                banner,
            );
            rest
        }
        _ => area,
    };
    match app.view {
        View::Shards => shards::render(frame, area, app, snapshot),
        View::Topics => partitions::render(frame, area, app),
        View::Events => events::render(frame, area, app, snapshot),
    }
}

/// The body before the first snapshot: what the console is waiting for.
fn render_waiting(frame: &mut Frame, area: Rect, app: &App) {
    let socket = app.socket.display().to_string();
    let mut lines = Vec::new();
    match &app.connection {
        Connection::Connecting | Connection::Connected(_) => {
            lines.push(Line::from(format!("Connecting to iggyd at {socket} …")));
        }
        Connection::Disconnected { reason, retry_in } => {
            lines.push(Line::styled(
                format!("No iggyd answers at {socket}"),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ));
            lines.push(Line::from(reason.clone()));
            lines.push(Line::from(format!(
                "Retrying in {}. Is iggyd running? Use --socket PATH for another socket. q quits.",
                fmt_interval(*retry_in)
            )));
        }
    }
    let top = area
        .height
        .saturating_sub(u16::try_from(lines.len()).unwrap_or(0))
        / 3;
    let [_, text_area] =
        Layout::vertical([Constraint::Length(top), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(lines)
            .alignment(Alignment::Center)
            .wrap(Wrap { trim: true }),
        text_area,
    );
}

fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let key =
        |text: &'static str| Span::styled(text, Style::new().fg(Color::Black).bg(Color::Gray));
    let mut spans = vec![
        key("q"),
        Span::raw(" quit "),
        key("Tab"),
        Span::raw(" view "),
        key("↑↓"),
        Span::raw(" select "),
        key("s"),
        Span::raw(" sort "),
        key("/"),
        Span::raw(" filter "),
        key("p"),
        Span::raw(if app.paused { " resume " } else { " pause " }),
        key("?"),
        Span::raw(" help"),
    ];
    if let Some(input) = &app.filter_input {
        spans = vec![
            Span::styled("filter: ", Style::new().fg(Color::Cyan)),
            Span::raw(input.clone()),
            Span::styled("▏", Style::new().fg(Color::Cyan)),
            Span::raw("  (Enter applies, Esc clears)"),
        ];
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// 950 -> "950", 15300 -> "15.3k", 2.5e6 -> "2.5M".
pub fn fmt_rate(value: f64) -> String {
    let value = if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    };
    if value < 1_000.0 {
        format!("{value:.0}")
    } else if value < 1_000_000.0 {
        format!("{:.1}k", value / 1_000.0)
    } else if value < 1_000_000_000.0 {
        format!("{:.1}M", value / 1_000_000.0)
    } else {
        format!("{:.1}G", value / 1_000_000_000.0)
    }
}

/// Bytes per second as decimal megabytes per second, one decimal.
pub fn fmt_mb_per_sec(bytes_per_sec: f64) -> String {
    let value = if bytes_per_sec.is_finite() {
        bytes_per_sec.max(0.0)
    } else {
        0.0
    };
    format!("{:.1}", value / 1_000_000.0)
}

/// IEC units: "512 B", "1.0 KiB", "70.0 MiB".
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Whole numbers with k/M/G above 10,000: "9999", "15.3k".
pub fn fmt_count(count: u64) -> String {
    if count < 10_000 {
        count.to_string()
    } else {
        fmt_rate(count as f64)
    }
}

/// "42s", "5m03s", "1h02m", "3d04h".
pub fn fmt_uptime(ms: u64) -> String {
    let seconds = ms / 1000;
    let (days, hours, minutes, secs) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    if days > 0 {
        format!("{days}d{hours:02}h")
    } else if hours > 0 {
        format!("{hours}h{minutes:02}m")
    } else if minutes > 0 {
        format!("{minutes}m{secs:02}s")
    } else {
        format!("{secs}s")
    }
}

/// A heartbeat age: "0.1s", "12.5s", "3m05s".
pub fn fmt_age(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        fmt_uptime(ms)
    }
}

/// "250ms", "1s", "1.5s".
pub fn fmt_interval(interval: std::time::Duration) -> String {
    let ms = interval.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// Unix milliseconds as "HH:MM:SS" (UTC).
pub fn fmt_clock(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_rate(950.4), "950");
        assert_eq!(fmt_rate(15_300.0), "15.3k");
        assert_eq!(fmt_rate(2_500_000.0), "2.5M");
        assert_eq!(fmt_rate(f64::NAN), "0");
        assert_eq!(fmt_mb_per_sec(15_360_512.0), "15.4");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(73_400_320), "70.0 MiB");
        assert_eq!(fmt_bytes(107_374_182_400), "100.0 GiB");
        assert_eq!(fmt_count(9_999), "9999");
        assert_eq!(fmt_count(1_800_000), "1.8M");
        assert_eq!(fmt_uptime(42_000), "42s");
        assert_eq!(fmt_uptime(303_000), "5m03s");
        assert_eq!(fmt_uptime(3_723_000), "1h02m");
        assert_eq!(fmt_uptime(273_600_000), "3d04h");
        assert_eq!(fmt_age(120), "0.1s");
        assert_eq!(fmt_age(185_000), "3m05s");
        assert_eq!(fmt_interval(std::time::Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_interval(std::time::Duration::from_millis(1500)), "1.5s");
        assert_eq!(fmt_clock(1_767_225_599_000), "23:59:59");
    }
}
