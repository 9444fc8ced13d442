//! The header every view shares and the Overview view. The header (three
//! lines) says who the daemon is (version, pid, uptime, RSS, connections,
//! watchdog, durability, and where there is room the hint `iggyd doctor`,
//! which checks the host), what flows (messages and bytes in and out, what
//! clients pressed on) and the disk (used, free, growth rate over the
//! graph window, time until full, the nearest topic size limit, logs,
//! deleted data pending removal). The Overview body is btop-like: a meter
//! per shard (its loop's busy %, core, NUMA node, rates, inbox), then a
//! grid of graphs (throughput, latency, fsync, consumer lag, connections,
//! disk) that gains panels and length as the terminal grows, and the
//! busiest partitions beside them when there is width. Layout follows
//! rules (rows and columns per minimum panel size), not coordinates.

use crate::api::{SecurityStats, Snapshot, WatchdogState, history::name};
use crate::app::App;
use crate::series::{self, growth_per_second};
use crate::ui::graph::{self, Line3};
use crate::ui::{fmt_bytes, fmt_interval, fmt_mb_per_sec, fmt_rate, fmt_uptime};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

/// A graph panel is at least this big.
const GRAPH_HEIGHT_MIN: u16 = 7;
const GRAPH_WIDTH_MIN: u16 = 38;
/// The busiest-partitions panel appears from this width on.
const TOP_PANEL_FROM_WIDTH: u16 = 120;
const TOP_PANEL_WIDTH: u16 = 46;

pub fn render_header(frame: &mut Frame, area: Rect, app: &App) {
    let theme = &app.theme;
    let label = |text: String| Span::styled(text, theme.dim());
    let value = |text: String| Span::styled(text, theme.value());
    let Some(snapshot) = &app.snapshot else {
        let first = match &app.connection {
            crate::app::Connection::Connected(hello) => Line::from(vec![
                Span::styled("iggyd ", theme.accent()),
                value(hello.version.clone()),
                label(format!("  pid {}  up ", hello.pid)),
                value(fmt_uptime(hello.uptime_ms)),
                label("  waiting for the first snapshot".into()),
            ]),
            _ => Line::from(vec![
                Span::styled("iggyd ", theme.accent()),
                label("iggy-top, not connected  ·  `iggyd doctor` checks this host".into()),
            ]),
        };
        let socket = Line::from(vec![
            label("socket ".into()),
            Span::raw(app.socket.display().to_string()),
        ]);
        frame.render_widget(Paragraph::new(vec![first, socket]), area);
        return;
    };
    let process = &snapshot.process;
    let sum =
        |rate: fn(&crate::api::ShardStats) -> f64| snapshot.shards.iter().map(rate).sum::<f64>();
    let watchdog = match process.watchdog.state {
        WatchdogState::Ok => Span::styled(
            format!(
                "ok, every {}",
                fmt_interval(std::time::Duration::from_millis(
                    process.watchdog.interval_ms
                ))
            ),
            theme.good(),
        ),
        WatchdogState::Stalled => Span::styled(
            match process.watchdog.stalled_shard {
                Some(shard) => format!("STALLED on shard {shard}"),
                None => "STALLED".to_string(),
            },
            theme.bad(),
        ),
        WatchdogState::Disabled => Span::styled("off", theme.dim()),
    };
    let first = Line::from(vec![
        Span::styled("iggyd ", theme.accent()),
        value(process.version.clone()),
        label(format!("  pid {}  up ", process.pid)),
        value(fmt_uptime(process.uptime_ms)),
        label("  RSS ".into()),
        value(fmt_bytes(process.rss_bytes)),
        label("  shards ".into()),
        value(format!(
            "{}/{} cores/{} NUMA",
            snapshot.shards.len(),
            process.cores,
            process.numa_nodes
        )),
        label("  conns ".into()),
        value(process.connections.to_string()),
        label("  watchdog ".into()),
        watchdog,
        label("  durability ".into()),
        value(process.durability_default.as_str().to_string()),
        label("  · host check: iggyd doctor".into()),
    ]);
    let mut second = vec![
        label("in ".into()),
        Span::styled(
            format!(
                "{} msg/s {} MB/s",
                fmt_rate(sum(|s| s.messages_in_per_sec)),
                fmt_mb_per_sec(sum(|s| s.bytes_in_per_sec))
            ),
            theme.series_in(),
        ),
        label("  out ".into()),
        Span::styled(
            format!(
                "{} msg/s {} MB/s",
                fmt_rate(sum(|s| s.messages_out_per_sec)),
                fmt_mb_per_sec(sum(|s| s.bytes_out_per_sec))
            ),
            theme.series_out(),
        ),
    ];
    second.extend(clients_spans(app, &process.security));
    frame.render_widget(
        Paragraph::new(vec![first, Line::from(second), disk_line(app, snapshot)]),
        area,
    );
}

/// What clients pressed on since start, most telling first.
fn clients_spans(app: &App, security: &SecurityStats) -> Vec<Span<'static>> {
    let theme = &app.theme;
    let mut spans = vec![Span::styled("  clients: ", theme.dim())];
    for (text, count) in [
        ("refused ", security.connections_refused_total),
        (" failed logins ", security.logins_failed_total),
        (" evicted ", security.evictions_total),
        (" timed out ", security.timeouts_total),
        (" TLS failed ", security.tls_failures_total),
        (" big frames ", security.frames_refused_total),
        (" logins busy ", security.logins_refused_total),
    ] {
        spans.push(Span::styled(text, theme.dim()));
        spans.push(Span::styled(
            count.to_string(),
            if count > 0 {
                theme.warn()
            } else {
                theme.value()
            },
        ));
    }
    spans
}

/// "disk 20.0 GiB used (20%), 80.0 GiB free, +1.2 MB/s, full in 3d04h ·
/// orders/created at its limit in 2h10m · logs 1.0 MiB".
fn disk_line(app: &App, snapshot: &Snapshot) -> Line<'static> {
    let theme = &app.theme;
    let process = &snapshot.process;
    let used_percent = if process.disk_total_bytes == 0 {
        0.0
    } else {
        process.disk_used_bytes as f64 * 100.0 / process.disk_total_bytes as f64
    };
    let mut spans = vec![
        Span::styled("disk ", theme.dim()),
        Span::styled(
            format!("{} used", fmt_bytes(process.disk_used_bytes)),
            theme.meter(used_percent),
        ),
        Span::styled(format!(" ({used_percent:.0}%) "), theme.dim()),
        Span::styled(
            format!("{} free", fmt_bytes(process.disk_free_bytes)),
            theme.value(),
        ),
    ];
    let disk = series::points(&app.history, app.window, name::DISK_USED);
    if let Some(rate) = growth_per_second(&disk) {
        spans.push(Span::styled(
            format!(
                " {}{}/s",
                if rate < 0.0 { "-" } else { "+" },
                fmt_bytes(rate.abs() as u64)
            ),
            theme.value(),
        ));
        if rate > 0.0 {
            let seconds = process.disk_free_bytes as f64 / rate;
            spans.push(Span::styled(" full in ", theme.dim()));
            spans.push(Span::styled(
                fmt_uptime((seconds * 1000.0).min(u64::MAX as f64) as u64),
                if seconds < 86_400.0 {
                    theme.bad()
                } else {
                    theme.value()
                },
            ));
        }
    }
    if let Some((topic, seconds)) = nearest_topic_limit(app, snapshot) {
        spans.push(Span::styled(
            format!(" · {topic} at its size limit in "),
            theme.dim(),
        ));
        spans.push(Span::styled(
            fmt_uptime((seconds * 1000.0) as u64),
            theme.warn(),
        ));
    }
    spans.push(Span::styled("  logs ", theme.dim()));
    spans.push(Span::styled(
        fmt_bytes(process.log_dir_bytes),
        theme.value(),
    ));
    let pending = &process.pending_removal;
    if pending.entries > 0 {
        let text = format!(
            "  trash {} in {} pending removal",
            fmt_bytes(pending.bytes),
            pending.entries
        );
        if pending.failing > 0 {
            spans.push(Span::styled(
                format!("{text}, {} failing", pending.failing),
                theme.bad(),
            ));
        } else {
            spans.push(Span::styled(text, theme.dim()));
        }
    }
    Line::from(spans)
}

/// The topic that reaches its `max_size_bytes` first at its growth over
/// the window, with the seconds left (retention then deletes its oldest
/// segments).
fn nearest_topic_limit(app: &App, snapshot: &Snapshot) -> Option<(String, f64)> {
    snapshot
        .topics
        .iter()
        .filter_map(|topic| {
            let limit = topic.max_size_bytes?;
            let names = topic.partitions.iter().map(|partition| {
                name::partition(
                    topic.stream_id,
                    topic.topic_id,
                    partition.partition_id,
                    name::BYTES,
                )
            });
            let rate = growth_per_second(&series::sum(&app.history, app.window, names))?;
            (rate > 0.0).then(|| {
                let left = limit.saturating_sub(topic.bytes) as f64 / rate;
                (format!("{}/{}", topic.stream, topic.topic), left)
            })
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

pub fn render(frame: &mut Frame, area: Rect, app: &App, snapshot: &Snapshot) {
    let shards = app.shard_rows();
    let meter_columns: u16 = if area.width >= 160 && shards.len() > 4 {
        2
    } else {
        1
    };
    let meter_rows_wanted =
        u16::try_from(shards.len().div_ceil(usize::from(meter_columns))).unwrap_or(u16::MAX);
    // Meters never take more than a third of the body.
    let meter_rows = meter_rows_wanted.min((area.height / 3).max(1));
    let [meters, rest] =
        Layout::vertical([Constraint::Length(meter_rows), Constraint::Min(0)]).areas(area);
    render_meters(frame, meters, app, &shards, meter_columns);
    let (graphs, side) = if rest.width >= TOP_PANEL_FROM_WIDTH {
        let [graphs, side] =
            Layout::horizontal([Constraint::Min(0), Constraint::Length(TOP_PANEL_WIDTH)])
                .areas(rest);
        (graphs, Some(side))
    } else {
        (rest, None)
    };
    render_graphs(frame, graphs, app, snapshot);
    if let Some(side) = side {
        render_busiest(frame, side, app, snapshot);
    }
}

/// One line per shard: "shard 0 c0 n0 ▕███████   ▏ 42% in 15.3k out 30.0k q 12".
fn render_meters(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    shards: &[&crate::api::ShardStats],
    columns: u16,
) {
    let theme = &app.theme;
    let width = area.width / columns.max(1);
    let rows = usize::from(area.height);
    for (index, shard) in shards.iter().enumerate() {
        let column = u16::try_from(index / rows.max(1)).unwrap_or(u16::MAX);
        let row = u16::try_from(index % rows.max(1)).unwrap_or(u16::MAX);
        if column >= columns {
            break;
        }
        let cell = Rect::new(area.x + column * width, area.y + row, width, 1);
        let busy = series::latest(&app.history, &name::shard(shard.shard, name::BUSY_PERCENT))
            .unwrap_or(shard.cpu_percent)
            .clamp(0.0, 100.0);
        let label = format!(
            "shard {:<2} c{} n{} ",
            shard.shard,
            shard.core,
            shard.numa_node.map_or("-".into(), |node| node.to_string())
        );
        let figures = format!(
            " {busy:>3.0}% in {:>6} out {:>6} q {}",
            fmt_rate(shard.messages_in_per_sec),
            fmt_rate(shard.messages_out_per_sec),
            shard.queue_depth
        );
        let used = label.chars().count() + figures.chars().count() + 2;
        let bar_width = usize::from(width).saturating_sub(used).clamp(4, 40);
        let filled = ((busy / 100.0) * bar_width as f64).round() as usize;
        let line = Line::from(vec![
            Span::styled(label, theme.dim()),
            Span::styled("▕", theme.dim()),
            Span::styled("█".repeat(filled.min(bar_width)), theme.meter(busy)),
            Span::raw(" ".repeat(bar_width - filled.min(bar_width))),
            Span::styled("▏", theme.dim()),
            Span::styled(
                figures,
                if crate::app::is_stale(shard) {
                    theme.bad()
                } else {
                    theme.value()
                },
            ),
        ]);
        frame.render_widget(Paragraph::new(line), cell);
    }
}

type Figure = (
    &'static str,
    fn(&App) -> Vec<Line3<'static>>,
    fn(f64) -> String,
);

/// The graphs in the order they are given room.
fn figures() -> [Figure; 6] {
    [
        (
            "throughput msg/s",
            |app| {
                vec![
                    shard_sum(app, name::MESSAGES_IN, "in", app.theme.series_in()),
                    shard_sum(app, name::MESSAGES_OUT, "out", app.theme.series_out()),
                ]
            },
            fmt_rate,
        ),
        (
            "request latency",
            |app| {
                vec![
                    shard_max(app, name::REQUEST_P50, "p50", app.theme.series_in()),
                    shard_max(app, name::REQUEST_P99, "p99", app.theme.series_third()),
                ]
            },
            fmt_micros,
        ),
        (
            "consumer lag",
            |app| {
                let names = app
                    .snapshot
                    .iter()
                    .flat_map(|snapshot| snapshot.topics.iter())
                    .flat_map(|topic| {
                        topic.consumer_groups.iter().map(|group| {
                            name::group(topic.stream_id, topic.topic_id, group.group_id)
                        })
                    })
                    .collect::<Vec<_>>();
                vec![Line3 {
                    label: "total",
                    points: series::sum(&app.history, app.window, names),
                    style: app.theme.series_third(),
                }]
            },
            fmt_rate,
        ),
        (
            "fsync",
            |app| {
                vec![shard_max(
                    app,
                    name::FSYNC_P99,
                    "p99",
                    app.theme.series_out(),
                )]
            },
            fmt_micros,
        ),
        (
            "throughput MB/s",
            |app| {
                vec![
                    shard_sum(app, name::BYTES_IN, "in", app.theme.series_in()),
                    shard_sum(app, name::BYTES_OUT, "out", app.theme.series_out()),
                ]
            },
            |bytes| fmt_mb_per_sec(bytes),
        ),
        (
            "connections",
            |app| {
                vec![Line3 {
                    label: "open",
                    points: series::points(&app.history, app.window, name::PROCESS_CONNECTIONS),
                    style: app.theme.series_in(),
                }]
            },
            fmt_rate,
        ),
    ]
}

fn fmt_micros(micros: f64) -> String {
    if micros >= 1000.0 {
        format!("{:.1}ms", micros / 1000.0)
    } else {
        format!("{micros:.0}µs")
    }
}

fn shard_names(app: &App, metric: &str) -> Vec<String> {
    app.snapshot
        .iter()
        .flat_map(|snapshot| snapshot.shards.iter())
        .map(|shard| name::shard(shard.shard, metric))
        .collect()
}

fn shard_sum(
    app: &App,
    metric: &str,
    label: &'static str,
    style: ratatui::style::Style,
) -> Line3<'static> {
    Line3 {
        label,
        points: series::sum(&app.history, app.window, shard_names(app, metric)),
        style,
    }
}

/// The worst shard at each point (latencies do not add up).
fn shard_max(
    app: &App,
    metric: &str,
    label: &'static str,
    style: ratatui::style::Style,
) -> Line3<'static> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for series_name in shard_names(app, metric) {
        let one = series::points(&app.history, app.window, &series_name);
        if points.is_empty() {
            points = one;
            continue;
        }
        // Both are aligned to the newest point.
        let offset = points.len().saturating_sub(one.len());
        for (index, point) in one.iter().enumerate() {
            if let Some(mine) = points.get_mut(offset + index) {
                mine.1 = mine.1.max(point.1);
            }
        }
    }
    Line3 {
        label,
        points,
        style,
    }
}

fn render_graphs(frame: &mut Frame, area: Rect, app: &App, _snapshot: &Snapshot) {
    let columns = (area.width / GRAPH_WIDTH_MIN).clamp(1, 3);
    let rows = (area.height / GRAPH_HEIGHT_MIN).max(1);
    let figures = figures();
    let count = usize::from(columns * rows).min(figures.len());
    let rows = u16::try_from(count.div_ceil(usize::from(columns)))
        .unwrap_or(1)
        .max(1);
    let row_areas = Layout::vertical(vec![
        Constraint::Ratio(1, u32::from(rows));
        usize::from(rows)
    ])
    .split(area);
    for (row_index, row_area) in row_areas.iter().enumerate() {
        let first = row_index * usize::from(columns);
        let in_row = count.saturating_sub(first).min(usize::from(columns));
        if in_row == 0 {
            break;
        }
        let cells =
            Layout::horizontal(vec![Constraint::Ratio(1, in_row as u32); in_row]).split(*row_area);
        for (cell, (title, lines, format)) in cells.iter().zip(&figures[first..first + in_row]) {
            graph::render(
                frame,
                *cell,
                &app.theme,
                title,
                app.window,
                &lines(app),
                *format,
            );
        }
    }
}

/// The partitions appending the most messages per second now (like `top`).
fn render_busiest(frame: &mut Frame, area: Rect, app: &App, snapshot: &Snapshot) {
    let theme = &app.theme;
    let mut rows: Vec<(String, f64, u64, u32)> = snapshot
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(move |partition| {
                let rate = series::latest(
                    &app.history,
                    &name::partition(
                        topic.stream_id,
                        topic.topic_id,
                        partition.partition_id,
                        name::MESSAGES_IN,
                    ),
                )
                .unwrap_or(0.0);
                (
                    format!(
                        "{}/{}/{}",
                        topic.stream, topic.topic, partition.partition_id
                    ),
                    rate,
                    partition.bytes,
                    partition.shard,
                )
            })
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.2.cmp(&a.2)));
    let table = Table::new(
        rows.iter().map(|(partition, rate, bytes, shard)| {
            Row::new(vec![
                Cell::from(partition.clone()),
                Cell::from(fmt_rate(*rate)),
                Cell::from(fmt_bytes(*bytes)),
                Cell::from(shard.to_string()),
            ])
        }),
        [
            Constraint::Min(16),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(2),
        ],
    )
    .header(Row::new(["partition", "msg/s", "stored", "sh"]).style(theme.dim()))
    .block(
        Block::bordered()
            .border_style(theme.border())
            .title(Line::styled(" Busiest partitions ", theme.accent())),
    );
    frame.render_widget(table, area);
}
