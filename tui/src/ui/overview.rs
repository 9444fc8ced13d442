//! The header: who the daemon is (version, pid, uptime), its shape (shards,
//! cores, NUMA nodes, connections, memory), throughput in and out summed
//! over the shards, disk and log usage (with deleted data still pending
//! removal), default durability and the watchdog, and what clients pressed
//! on (refused connections, failed logins, evictions, timeouts, TLS
//! failures; non-zero counts stand out). Five lines, each cut at the
//! terminal's width; it only reads `App`.

use crate::api::{SecurityStats, Snapshot, WatchdogState};
use crate::app::{App, Connection};
use crate::ui::{fmt_bytes, fmt_interval, fmt_mb_per_sec, fmt_rate, fmt_uptime};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let lines = match &app.snapshot {
        Some(snapshot) => lines(snapshot),
        None => waiting_lines(app),
    };
    frame.render_widget(Paragraph::new(lines), area);
}

fn label(text: impl Into<std::borrow::Cow<'static, str>>) -> Span<'static> {
    Span::styled(text, Style::new().fg(Color::DarkGray))
}

fn value(text: String) -> Span<'static> {
    Span::styled(text, Style::new().add_modifier(Modifier::BOLD))
}

fn title() -> Span<'static> {
    Span::styled(
        "iggyd ",
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
    )
}

fn waiting_lines(app: &App) -> Vec<Line<'static>> {
    let first = match &app.connection {
        Connection::Connected(hello) => Line::from(vec![
            title(),
            value(hello.version.clone()),
            label("  pid "),
            value(hello.pid.to_string()),
            label("  up "),
            value(fmt_uptime(hello.uptime_ms)),
            label("  waiting for the first snapshot"),
        ]),
        _ => Line::from(vec![title(), label("iggy-top, not connected")]),
    };
    vec![
        first,
        Line::from(vec![
            label("socket "),
            Span::raw(app.socket.display().to_string()),
        ]),
    ]
}

fn lines(snapshot: &Snapshot) -> Vec<Line<'static>> {
    let process = &snapshot.process;
    let sum =
        |rate: fn(&crate::api::ShardStats) -> f64| snapshot.shards.iter().map(rate).sum::<f64>();
    let messages_in = sum(|shard| shard.messages_in_per_sec);
    let messages_out = sum(|shard| shard.messages_out_per_sec);
    let bytes_in = sum(|shard| shard.bytes_in_per_sec);
    let bytes_out = sum(|shard| shard.bytes_out_per_sec);
    let used_percent = if process.disk_total_bytes == 0 {
        0.0
    } else {
        process.disk_used_bytes as f64 * 100.0 / process.disk_total_bytes as f64
    };
    let watchdog = match process.watchdog.state {
        WatchdogState::Ok => Span::styled(
            format!(
                "ok, every {}",
                fmt_interval(std::time::Duration::from_millis(
                    process.watchdog.interval_ms
                ))
            ),
            Style::new().fg(Color::Green),
        ),
        WatchdogState::Stalled => Span::styled(
            match process.watchdog.stalled_shard {
                Some(shard) => format!("STALLED on shard {shard}"),
                None => "STALLED".to_string(),
            },
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        ),
        WatchdogState::Disabled => Span::styled("disabled", Style::new().fg(Color::DarkGray)),
    };
    vec![
        Line::from(vec![
            title(),
            value(process.version.clone()),
            label("  pid "),
            value(process.pid.to_string()),
            label("  up "),
            value(fmt_uptime(process.uptime_ms)),
            label("  RSS "),
            value(fmt_bytes(process.rss_bytes)),
            label("  conns "),
            value(process.connections.to_string()),
        ]),
        Line::from(vec![
            label("shards "),
            value(snapshot.shards.len().to_string()),
            label(" on cores "),
            value(process.cores.to_string()),
            label("  NUMA nodes "),
            value(process.numa_nodes.to_string()),
            label("  durability "),
            value(process.durability_default.as_str().to_string()),
            label("  watchdog "),
            watchdog,
        ]),
        Line::from(vec![
            label("in  "),
            value(format!("{} msg/s", fmt_rate(messages_in))),
            Span::raw(" "),
            value(format!("{} MB/s", fmt_mb_per_sec(bytes_in))),
            label("   out "),
            value(format!("{} msg/s", fmt_rate(messages_out))),
            Span::raw(" "),
            value(format!("{} MB/s", fmt_mb_per_sec(bytes_out))),
        ]),
        clients_line(&process.security),
        Line::from(vec![
            label("disk "),
            value(format!("{} used", fmt_bytes(process.disk_used_bytes))),
            label(format!(" ({used_percent:.0}%), ")),
            value(format!("{} free", fmt_bytes(process.disk_free_bytes))),
            label(" of "),
            value(fmt_bytes(process.disk_total_bytes)),
            label("  logs "),
            value(fmt_bytes(process.log_dir_bytes)),
            pending_removal(&process.pending_removal),
        ]),
    ]
}

/// Deleted data still on the disk, when there is any (red while a removal
/// keeps failing).
fn pending_removal(pending: &crate::api::PendingRemoval) -> Span<'static> {
    if pending.entries == 0 {
        return Span::raw("");
    }
    let text = format!(
        "  trash {} in {} pending removal",
        fmt_bytes(pending.bytes),
        pending.entries
    );
    if pending.failing > 0 {
        Span::styled(
            format!("{text}, {} failing", pending.failing),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    } else {
        label(text)
    }
}

/// What clients pressed on since start, most telling first, so a narrow
/// terminal keeps the counters that show an attack.
fn clients_line(security: &SecurityStats) -> Line<'static> {
    let counter = |text: &'static str, count: u64| -> [Span<'static>; 2] {
        let style = if count > 0 {
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        [label(text), Span::styled(count.to_string(), style)]
    };
    let mut spans = vec![label("clients ")];
    for (text, count) in [
        ("refused ", security.connections_refused_total),
        ("  failed logins ", security.logins_failed_total),
        ("  evicted ", security.evictions_total),
        ("  timed out ", security.timeouts_total),
        ("  TLS failed ", security.tls_failures_total),
        ("  big frames ", security.frames_refused_total),
        ("  logins busy ", security.logins_refused_total),
    ] {
        spans.extend(counter(text, count));
    }
    spans.push(label("  caps "));
    spans.push(value(format!(
        "{} / {} per address",
        fmt_rate(security.max_connections as f64),
        fmt_rate(security.max_connections_per_address as f64)
    )));
    Line::from(spans)
}
