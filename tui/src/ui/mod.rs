//! Pure render functions: `render(frame, app)` draws the whole screen from
//! `App` and nothing else (no I/O, no clock, no state of its own), so every
//! screen is testable with ratatui's `TestBackend`. Layout, top to bottom:
//! the header (`overview::render_header`), view tabs with the graph window
//! and the connection status, the current view (`overview`, `shards`,
//! `streams`, `groups`, `clients`, `events`, `cluster`), a line for keys, prompts,
//! confirmations and action results, and the help overlay (`help`) on top.
//! With `NO_COLOR` a last pass removes every colour, so attributes (bold,
//! reverse) carry the meaning. Narrow or short terminals drop columns and
//! panels rather than wrapping.

pub mod clients;
pub mod cluster;
pub mod events;
pub mod graph;
pub mod groups;
pub mod help;
pub mod overview;
pub mod shards;
pub mod streams;

use crate::app::{App, Connection, InputKind, View};
use crate::theme::Depth;
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs, Wrap};

/// Rows the header takes.
pub const HEADER_ROWS: u16 = 3;

pub fn render(frame: &mut Frame, app: &App) {
    let [header, tabs, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_ROWS),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    overview::render_header(frame, header, app);
    render_tabs(frame, tabs, app);
    render_body(frame, body, app);
    render_footer(frame, footer, app);
    if app.help {
        help::render(frame, frame.area(), app);
    }
    if app.theme.depth == Depth::Mono {
        let area = frame.area();
        let buffer = frame.buffer_mut();
        for y in area.top()..area.bottom() {
            for x in area.left()..area.right() {
                if let Some(cell) = buffer.cell_mut((x, y)) {
                    cell.set_fg(Color::Reset).set_bg(Color::Reset);
                }
            }
        }
    }
}

fn render_tabs(frame: &mut Frame, area: Rect, app: &App) {
    let status = status_span(app);
    let status_width = u16::try_from(status.width())
        .unwrap_or(u16::MAX)
        .min(area.width / 2);
    let [tabs_area, status_area] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(status_width + 1)]).areas(area);
    let narrow = area.width < 100;
    let titles = View::ALL.iter().enumerate().map(|(index, view)| {
        if narrow {
            format!("{} {}", index + 1, &view.title()[..4])
        } else {
            format!("{} {}", index + 1, view.title())
        }
    });
    let tabs = Tabs::new(titles)
        .select(Some(app.view.index()))
        .highlight_style(app.theme.selected())
        .divider("│");
    frame.render_widget(tabs, tabs_area);
    frame.render_widget(
        Paragraph::new(Line::from(status)).alignment(Alignment::Right),
        status_area,
    );
}

fn status_span(app: &App) -> Span<'static> {
    if app.paused {
        return Span::styled("⏸ PAUSED (p resumes)", app.theme.warn());
    }
    match &app.connection {
        Connection::Connecting => Span::styled("… connecting", app.theme.warn()),
        Connection::Connected(_) => Span::styled(
            format!(
                "● live {} · {}",
                fmt_interval(app.interval),
                app.window.label()
            ),
            app.theme.good(),
        ),
        Connection::Disconnected { retry_in, .. } => Span::styled(
            format!("✖ reconnecting in {}", fmt_interval(*retry_in)),
            app.theme.bad(),
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
                "reconnecting: {reason}; showing the snapshot of {} UTC",
                fmt_clock(snapshot.taken_at_ms)
            );
            frame.render_widget(Paragraph::new(text).style(app.theme.banner()), banner);
            rest
        }
        _ => area,
    };
    match app.view {
        View::Overview => overview::render(frame, area, app, snapshot),
        View::Shards => shards::render(frame, area, app, snapshot),
        View::Streams => streams::render(frame, area, app),
        View::Groups => groups::render(frame, area, app),
        View::Clients => clients::render(frame, area, app),
        View::Events => events::render(frame, area, app, snapshot),
        View::Cluster => cluster::render(frame, area, app),
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
                app.theme.bad(),
            ));
            lines.push(Line::from(reason.clone()));
            lines.push(Line::from(format!(
                "Reconnecting in {}. Is iggyd running? Use --socket PATH for another socket. q quits.",
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
    let theme = &app.theme;
    if let Some(action) = &app.confirm {
        let question = format!(" {}? ", capitalized(&action.describe()));
        let width = usize::from(area.width);
        let hint = if question.chars().count() + 35 <= width {
            "  y confirms, any other key cancels"
        } else {
            " y/n"
        };
        let line = Line::from(vec![
            Span::styled(
                elide_middle(&question, width.saturating_sub(hint.len())),
                theme.banner(),
            ),
            Span::raw(hint),
        ]);
        frame.render_widget(Paragraph::new(line), area);
        return;
    }
    if let Some(input) = &app.input {
        let prompt = match input.kind {
            InputKind::Filter => "filter: ",
            InputKind::LogLevel => "log level (e.g. debug, info,iggyd::shard=trace): ",
            InputKind::SnapshotPath => "snapshot ZIP path (new, absolute, on the daemon's host): ",
        };
        let hint = "  (Enter applies, Esc cancels)";
        // The text's end is what is being typed: when the line is too
        // narrow, its start gives way first, then the hint.
        let width = usize::from(area.width);
        let prompt_width = prompt.chars().count();
        let hint = if prompt_width + input.text.chars().count() + 1 + hint.len() <= width {
            hint
        } else {
            ""
        };
        let room = width.saturating_sub(prompt_width + 1 + hint.len()).max(2);
        let length = input.text.chars().count();
        let text = if length <= room {
            input.text.clone()
        } else {
            let tail: String = input.text.chars().skip(length + 1 - room).collect();
            format!("…{tail}")
        };
        let line = Line::from(vec![
            Span::styled(prompt, theme.accent()),
            Span::raw(text),
            Span::styled("▏", theme.accent()),
            Span::raw(hint),
        ]);
        frame.render_widget(Paragraph::new(line), area);
        return;
    }
    let key = |text: &'static str| Span::styled(text, theme.key());
    let mut spans = Vec::new();
    if let Some((ok, message)) = &app.status {
        spans.push(Span::styled(
            format!("{message} "),
            if *ok { theme.good() } else { theme.bad() },
        ));
    }
    spans.extend([
        key("q"),
        Span::raw(" quit "),
        key("Tab"),
        Span::raw(" view "),
        key("Enter"),
        Span::raw(" open "),
        key("Esc"),
        Span::raw(" back "),
        key("w"),
        Span::raw(" window "),
        key("/"),
        Span::raw(" filter "),
        key("p"),
        Span::raw(if app.paused { " resume " } else { " pause " }),
        key("?"),
        Span::raw(" help"),
    ]);
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// `text` in at most `width` characters: when longer, its start and its
/// end with "…" between them (a path's directory and its file name both
/// matter).
fn elide_middle(text: &str, width: usize) -> String {
    let length = text.chars().count();
    if length <= width {
        return text.to_string();
    }
    let Some(kept) = width.checked_sub(1) else {
        return String::new();
    };
    let head = kept / 2;
    let tail = kept - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(length - tail).collect();
    format!("{start}…{end}")
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
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
        assert_eq!(elide_middle("/var/log/x.zip", 20), "/var/log/x.zip");
        assert_eq!(elide_middle("/var/log/iggyd/x.zip", 9), "/var….zip");
        assert_eq!(elide_middle("abc", 0), "");
    }
}
