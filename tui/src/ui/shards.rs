//! The shards view: one row per shard, grouped under a summary row per NUMA
//! node, with CPU, throughput, inbox depth, p99 latency and heartbeat age;
//! hot shards (CPU or queue) and stale heartbeats are coloured. Below it,
//! when there is room, the selected shard's graphs over the window
//! (throughput, latency, loop busy %) from the daemon's history. Columns are chosen by priority to fit the width, so 80 columns
//! keep the essentials and wide terminals show everything.

use crate::api::{ShardStats, Snapshot};
use crate::app::{App, HOT_CPU_PERCENT, HOT_QUEUE_DEPTH, is_hot_cpu, is_hot_queue, is_stale};
use crate::ui::{fmt_age, fmt_mb_per_sec, fmt_rate};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};

use ratatui::widgets::{Block, Cell, Row, Table, TableState};

/// Columns in display order. `priority` decides which survive on narrow
/// terminals (lower survives longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Shard,
    Pu,
    Core,
    Cpu,
    MessagesIn,
    MessagesOut,
    BytesIn,
    BytesOut,
    Queue,
    P99,
    P50,
    Heartbeat,
    Connections,
    Partitions,
    Driver,
}

impl Column {
    const ALL: [Column; 15] = [
        Column::Shard,
        Column::Pu,
        Column::Core,
        Column::Cpu,
        Column::MessagesIn,
        Column::MessagesOut,
        Column::BytesIn,
        Column::BytesOut,
        Column::Queue,
        Column::P50,
        Column::P99,
        Column::Heartbeat,
        Column::Connections,
        Column::Partitions,
        Column::Driver,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Column::Shard => "Shard",
            Column::Pu => "PU",
            Column::Core => "Core",
            Column::Cpu => "CPU%",
            Column::MessagesIn => "In msg/s",
            Column::MessagesOut => "Out msg/s",
            Column::BytesIn => "In MB/s",
            Column::BytesOut => "Out MB/s",
            Column::Queue => "Queue",
            Column::P50 => "p50 µs",
            Column::P99 => "p99 µs",
            Column::Heartbeat => "HB age",
            Column::Connections => "Conns",
            Column::Partitions => "Parts",
            Column::Driver => "Driver",
        }
    }

    fn width(self) -> u16 {
        match self {
            Column::Shard => 7,
            Column::Pu | Column::Core => 4,
            Column::Cpu | Column::Queue | Column::Partitions => 6,
            Column::MessagesIn | Column::BytesOut => 9,
            Column::MessagesOut => 10,
            Column::BytesIn | Column::P50 | Column::P99 | Column::Driver => 8,
            Column::Heartbeat => 7,
            Column::Connections => 6,
        }
    }

    fn priority(self) -> u8 {
        match self {
            Column::Shard => 0,
            Column::Cpu => 1,
            Column::MessagesIn => 2,
            Column::MessagesOut => 3,
            Column::Queue => 4,
            Column::P99 => 5,
            Column::Heartbeat => 6,
            Column::BytesIn => 7,
            Column::BytesOut => 8,
            Column::Pu => 9,
            Column::Core => 10,
            Column::Connections => 11,
            Column::Partitions => 12,
            Column::P50 => 13,
            Column::Driver => 14,
        }
    }
}

/// The columns that fit in `width` cells, in display order.
pub fn columns_for(width: u16) -> Vec<Column> {
    let mut by_priority = Column::ALL.to_vec();
    by_priority.sort_by_key(|column| column.priority());
    let mut used = 0u16;
    let mut chosen = Vec::new();
    for column in by_priority {
        let needed = column.width() + u16::from(!chosen.is_empty());
        if used + needed <= width {
            used += needed;
            chosen.push(column);
        }
    }
    Column::ALL
        .into_iter()
        .filter(|column| chosen.contains(column))
        .collect()
}

fn cell(column: Column, shard: &ShardStats) -> Cell<'static> {
    let text = match column {
        Column::Shard => format!("  {}", shard.shard),
        Column::Pu => shard.pu.to_string(),
        Column::Core => shard.core.to_string(),
        Column::Cpu => format!("{:.1}", shard.cpu_percent),
        Column::MessagesIn => fmt_rate(shard.messages_in_per_sec),
        Column::MessagesOut => fmt_rate(shard.messages_out_per_sec),
        Column::BytesIn => fmt_mb_per_sec(shard.bytes_in_per_sec),
        Column::BytesOut => fmt_mb_per_sec(shard.bytes_out_per_sec),
        Column::Queue => shard.queue_depth.to_string(),
        Column::P50 => shard.request_latency_us.p50.to_string(),
        Column::P99 => shard.request_latency_us.p99.to_string(),
        Column::Heartbeat => {
            if is_stale(shard) {
                format!("{}!", fmt_age(shard.heartbeat_age_ms))
            } else {
                fmt_age(shard.heartbeat_age_ms)
            }
        }
        Column::Connections => shard.connections.to_string(),
        Column::Partitions => shard.partitions.to_string(),
        Column::Driver => shard.driver.as_str().to_string(),
    };
    let hot = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let warm = Style::new().fg(Color::Yellow);
    let style = match column {
        Column::Cpu if is_hot_cpu(shard) => hot,
        Column::Cpu if shard.cpu_percent >= HOT_CPU_PERCENT * 0.7 => warm,
        Column::Queue if is_hot_queue(shard) => hot,
        Column::Queue if shard.queue_depth >= HOT_QUEUE_DEPTH / 4 => warm,
        Column::Heartbeat if is_stale(shard) => hot,
        _ => Style::new(),
    };
    Cell::from(text).style(style)
}

/// The summary cell of a NUMA node's row.
fn group_cell(column: Column, node: Option<u32>, shards: &[&ShardStats]) -> Cell<'static> {
    let sum = |rate: fn(&ShardStats) -> f64| shards.iter().map(|shard| rate(shard)).sum::<f64>();
    let text = match column {
        Column::Shard => match node {
            Some(node) => format!("node {node}"),
            None => "node ?".to_string(),
        },
        Column::Cpu => format!(
            "{:.1}",
            sum(|shard| shard.cpu_percent) / shards.len().max(1) as f64
        ),
        Column::MessagesIn => fmt_rate(sum(|shard| shard.messages_in_per_sec)),
        Column::MessagesOut => fmt_rate(sum(|shard| shard.messages_out_per_sec)),
        Column::BytesIn => fmt_mb_per_sec(sum(|shard| shard.bytes_in_per_sec)),
        Column::BytesOut => fmt_mb_per_sec(sum(|shard| shard.bytes_out_per_sec)),
        Column::Queue => shards
            .iter()
            .map(|shard| shard.queue_depth)
            .sum::<u64>()
            .to_string(),
        Column::Connections => shards
            .iter()
            .map(|shard| shard.connections)
            .sum::<u64>()
            .to_string(),
        Column::Partitions => shards
            .iter()
            .map(|shard| shard.partitions)
            .sum::<u64>()
            .to_string(),
        _ => String::new(),
    };
    Cell::from(text)
}

pub fn render(frame: &mut Frame, area: Rect, app: &App, snapshot: &Snapshot) {
    let rows = app.shard_rows();
    let mut groups: Vec<(Option<u32>, Vec<&ShardStats>)> = Vec::new();
    for shard in &rows {
        match groups.last_mut() {
            Some((node, members)) if *node == shard.numa_node => members.push(shard),
            _ => groups.push((shard.numa_node, vec![shard])),
        }
    }
    let table_rows = u16::try_from(rows.len() + groups.len()).unwrap_or(u16::MAX);
    let table_height = table_rows.saturating_add(3); // header + borders
    // The selected shard's graphs take the rest when at least a small
    // graph fits under the table.
    let graph_room = area.height.saturating_sub(table_height);
    let (table_area, spark_area) = if graph_room >= 6 {
        let [table, graphs] =
            Layout::vertical([Constraint::Length(table_height), Constraint::Min(0)]).areas(area);
        (table, Some(graphs))
    } else {
        (area, None)
    };

    // Inner width: borders (2) and the highlight symbol (2).
    let columns = columns_for(table_area.width.saturating_sub(4));
    let header = Row::new(columns.iter().map(|column| Cell::from(column.title())))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let group_style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let mut table_lines = Vec::new();
    let mut selected_line = None;
    let mut shard_index = 0;
    for (node, members) in &groups {
        table_lines.push(
            Row::new(
                columns
                    .iter()
                    .map(|column| group_cell(*column, *node, members)),
            )
            .style(group_style),
        );
        for shard in members {
            if shard_index == app.shard_selected {
                selected_line = Some(table_lines.len());
            }
            table_lines.push(Row::new(columns.iter().map(|column| cell(*column, shard))));
            shard_index += 1;
        }
    }
    let title = format!(
        " Shards by NUMA node · sort: {} · {} shards ",
        app.shard_sort.label(),
        snapshot.shards.len()
    );
    let table = Table::new(
        table_lines,
        columns
            .iter()
            .map(|column| Constraint::Length(column.width())),
    )
    .header(header)
    .column_spacing(1)
    .block(Block::bordered().title(title))
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(selected_line);
    frame.render_stateful_widget(table, table_area, &mut state);

    if let Some(spark_area) = spark_area {
        render_shard_graphs(frame, spark_area, app, &rows);
    }
}

/// Graphs of the selected shard over the window: throughput in and out,
/// request latency p50/p99, and its loop's busy %.
fn render_shard_graphs(frame: &mut Frame, area: Rect, app: &App, rows: &[&ShardStats]) {
    use crate::api::history::name;
    use crate::series;
    use crate::ui::graph::{self, Line3};
    let Some(shard) = rows.get(app.shard_selected) else {
        return;
    };
    let id = shard.shard;
    let line = |metric: &str, label: &'static str, style: Style| Line3 {
        label,
        points: series::points(&app.history, app.window, &name::shard(id, metric)),
        style,
    };
    let theme = &app.theme;
    let areas = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(area);
    graph::render(
        frame,
        areas[0],
        theme,
        &format!("shard {id} msg/s"),
        app.window,
        &[
            line(name::MESSAGES_IN, "in", theme.series_in()),
            line(name::MESSAGES_OUT, "out", theme.series_out()),
        ],
        fmt_rate,
    );
    graph::render(
        frame,
        areas[1],
        theme,
        "latency µs",
        app.window,
        &[
            line(name::REQUEST_P50, "p50", theme.series_in()),
            line(name::REQUEST_P99, "p99", theme.series_third()),
            line(name::QUEUE_WAIT_P99, "inbox p99", theme.series_out()),
        ],
        fmt_rate,
    );
    graph::render(
        frame,
        areas[2],
        theme,
        "loop busy %",
        app.window,
        &[line(name::BUSY_PERCENT, "busy", theme.series_third())],
        |percent| format!("{percent:.0}%"),
    );
}
