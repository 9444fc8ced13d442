//! The Streams view, k9s style: streams → topics → partitions → segments.
//! Each level is a table (the path in its title, the selection marked),
//! and beside or below it graphs of the selected entity over the window:
//! messages appended per second and bytes stored, summed over the
//! partitions it holds. The segment level lists every segment (range,
//! size, newest message, sealed or active) and the partition's durable
//! offset. It only reads `App`.

use crate::api::history::name;
use crate::app::{App, Level};
use crate::series;
use crate::ui::graph::{self, Line3};
use crate::ui::{fmt_bytes, fmt_clock, fmt_count, fmt_rate};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let wide = area.width >= 110;
    let (table_area, graph_area) = if wide {
        let [table, graphs] =
            Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
                .areas(area);
        (table, graphs)
    } else {
        let graphs = if area.height >= 18 {
            area.height / 3
        } else {
            0
        };
        let [table, graphs] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(graphs)]).areas(area);
        (table, graphs)
    };
    let (header, rows, widths, partitions) = level_table(app);
    let title = format!(
        " {} · {} ",
        app.path_text(),
        if app.filter().is_empty() {
            "Enter opens, Esc goes back".to_string()
        } else {
            format!("filter: {:?}", app.filter())
        }
    );
    let block = Block::bordered()
        .border_style(app.theme.border())
        .title(Line::styled(title, app.theme.accent()));
    if rows.is_empty() {
        let text = if app.filter().is_empty() {
            "Nothing here yet.".to_string()
        } else {
            format!("Nothing matches {:?} (Esc clears).", app.filter())
        };
        frame.render_widget(Paragraph::new(text).block(block), table_area);
    } else {
        let table = Table::new(rows, widths)
            .header(Row::new(header).style(app.theme.dim()))
            .block(block)
            .row_highlight_style(app.theme.selected())
            .highlight_symbol("▶ ");
        let mut state = TableState::default().with_selected(Some(app.level_selected()));
        frame.render_stateful_widget(table, table_area, &mut state);
    }
    if graph_area.height >= 3 {
        render_graphs(frame, graph_area, app, &partitions, wide);
    }
}

type Table4 = (
    Vec<&'static str>,
    Vec<Row<'static>>,
    Vec<Constraint>,
    Vec<String>,
);

/// Header, rows, widths, and the partitions (as series-name prefixes) the
/// selected row holds, for its graphs.
fn level_table(app: &App) -> Table4 {
    let selected = app.level_selected();
    let rate = |stream: u32, topic: u32, partition: u32| {
        series::latest(
            &app.history,
            &name::partition(stream, topic, partition, name::MESSAGES_IN),
        )
        .unwrap_or(0.0)
    };
    match app.level() {
        Level::Streams => {
            let streams = app.stream_rows();
            let partitions = streams
                .get(selected)
                .map(|stream| {
                    app.topic_rows(stream.stream_id)
                        .iter()
                        .flat_map(|topic| partition_keys(topic))
                        .collect()
                })
                .unwrap_or_default();
            let rows = streams
                .iter()
                .map(|stream| {
                    Row::new(vec![
                        Cell::from(stream.name.clone()),
                        Cell::from(stream.topics.to_string()),
                        Cell::from(stream.partitions.to_string()),
                        Cell::from(fmt_count(stream.messages)),
                        Cell::from(fmt_bytes(stream.bytes)),
                    ])
                })
                .collect();
            (
                vec!["stream", "topics", "parts", "messages", "stored"],
                rows,
                vec![
                    Constraint::Min(12),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(9),
                    Constraint::Length(10),
                ],
                partitions,
            )
        }
        Level::Topics { stream_id } => {
            let topics = app.topic_rows(stream_id);
            let partitions = topics
                .get(selected)
                .map(|topic| partition_keys(topic))
                .unwrap_or_default();
            let rows = topics
                .iter()
                .map(|topic| {
                    let appended: f64 = topic
                        .partitions
                        .iter()
                        .map(|partition| {
                            rate(topic.stream_id, topic.topic_id, partition.partition_id)
                        })
                        .sum();
                    Row::new(vec![
                        Cell::from(topic.topic.clone()),
                        Cell::from(topic.partitions.len().to_string()),
                        Cell::from(fmt_count(topic.messages)),
                        Cell::from(fmt_bytes(topic.bytes)),
                        Cell::from(fmt_rate(appended)),
                        Cell::from(fmt_count(topic.lag_max())),
                        Cell::from(topic.max_size_bytes.map_or("∞".into(), fmt_bytes)),
                    ])
                })
                .collect();
            (
                vec![
                    "topic", "parts", "messages", "stored", "msg/s", "max lag", "limit",
                ],
                rows,
                vec![
                    Constraint::Min(10),
                    Constraint::Length(5),
                    Constraint::Length(9),
                    Constraint::Length(10),
                    Constraint::Length(7),
                    Constraint::Length(7),
                    Constraint::Length(10),
                ],
                partitions,
            )
        }
        Level::Partitions {
            stream_id,
            topic_id,
        } => {
            let partitions = app.partition_rows(stream_id, topic_id);
            let keys = partitions
                .get(selected)
                .map(|partition| vec![format!("{stream_id}.{topic_id}.{}", partition.partition_id)])
                .unwrap_or_default();
            let rows = partitions
                .iter()
                .map(|partition| {
                    Row::new(vec![
                        Cell::from(partition.partition_id.to_string()),
                        Cell::from(partition.shard.to_string()),
                        Cell::from(fmt_count(partition.messages)),
                        Cell::from(fmt_bytes(partition.bytes)),
                        Cell::from(partition.segments.to_string()),
                        Cell::from(partition.current_offset.to_string()),
                        Cell::from(partition.durable_next_offset.to_string()),
                        Cell::from(fmt_rate(rate(stream_id, topic_id, partition.partition_id))),
                        Cell::from(fmt_count(partition.consumer_offsets)),
                    ])
                })
                .collect();
            (
                vec![
                    "part", "shard", "messages", "stored", "segs", "offset", "durable", "msg/s",
                    "offsets",
                ],
                rows,
                vec![
                    Constraint::Length(4),
                    Constraint::Length(5),
                    Constraint::Length(9),
                    Constraint::Length(10),
                    Constraint::Length(4),
                    Constraint::Length(10),
                    Constraint::Length(10),
                    Constraint::Length(7),
                    Constraint::Length(7),
                ],
                keys,
            )
        }
        Level::Segments {
            stream_id,
            topic_id,
            partition_id,
        } => {
            let durable = app
                .partition(stream_id, topic_id, partition_id)
                .map_or(0, |partition| partition.durable_next_offset);
            let segments = app.segment_rows(stream_id, topic_id, partition_id);
            let rows = segments
                .iter()
                .enumerate()
                .map(|(index, segment)| {
                    // Newest first: the next row is the older neighbour.
                    let from = segments.get(index + 1).map_or("-".to_string(), |older| {
                        fmt_time_us(older.last_timestamp_us)
                    });
                    let state = if !segment.sealed {
                        "active"
                    } else if durable >= segment.next_offset {
                        "sealed"
                    } else {
                        "sealed*"
                    };
                    Row::new(vec![
                        Cell::from(segment.start_offset.to_string()),
                        Cell::from(
                            segment
                                .next_offset
                                .saturating_sub(1)
                                .max(segment.start_offset)
                                .to_string(),
                        ),
                        Cell::from(fmt_bytes(segment.size_bytes)),
                        Cell::from(from),
                        Cell::from(fmt_time_us(segment.last_timestamp_us)),
                        Cell::from(state),
                    ])
                })
                .collect();
            (
                vec![
                    "first offset",
                    "last offset",
                    "size",
                    "after",
                    "newest",
                    "state",
                ],
                rows,
                vec![
                    Constraint::Length(12),
                    Constraint::Length(12),
                    Constraint::Length(10),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(7),
                ],
                vec![format!("{stream_id}.{topic_id}.{partition_id}")],
            )
        }
    }
}

fn partition_keys(topic: &crate::api::TopicStats) -> Vec<String> {
    topic
        .partitions
        .iter()
        .map(|partition| {
            format!(
                "{}.{}.{}",
                topic.stream_id, topic.topic_id, partition.partition_id
            )
        })
        .collect()
}

/// A segment timestamp (µs) as UTC "HH:MM:SS"; "-" when empty.
fn fmt_time_us(micros: u64) -> String {
    if micros == 0 {
        "-".into()
    } else {
        fmt_clock(micros / 1000)
    }
}

fn render_graphs(frame: &mut Frame, area: Rect, app: &App, partitions: &[String], wide: bool) {
    let names = |metric: &str| {
        partitions
            .iter()
            .map(|key| format!("partition.{key}.{metric}"))
            .collect::<Vec<_>>()
    };
    let appended = Line3 {
        label: "in",
        points: series::sum(&app.history, app.window, names(name::MESSAGES_IN)),
        style: app.theme.series_in(),
    };
    let stored = Line3 {
        label: "stored",
        points: series::sum(&app.history, app.window, names(name::BYTES)),
        style: app.theme.series_third(),
    };
    let areas = if wide {
        Layout::vertical([Constraint::Ratio(1, 2); 2]).split(area)
    } else {
        Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(area)
    };
    graph::render(
        frame,
        areas[0],
        &app.theme,
        "appended msg/s",
        app.window,
        &[appended],
        fmt_rate,
    );
    graph::render(
        frame,
        areas[1],
        &app.theme,
        "bytes",
        app.window,
        &[stored],
        |bytes| fmt_bytes(bytes.max(0.0) as u64),
    );
}
