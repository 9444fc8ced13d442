//! The topics view: a table of topics (sorted with `s`, filtered with `/`)
//! with messages, bytes and the largest consumer-group lag, and under it
//! the partitions (owner shard, messages, segments, offset) and consumer
//! groups (members, lag) of the selected topic, side by side when wide.

use crate::api::TopicStats;
use crate::app::App;
use crate::ui::{fmt_bytes, fmt_count};
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState, Wrap};

/// Width from which partitions and consumer groups sit side by side.
const SIDE_BY_SIDE_WIDTH: u16 = 100;

fn header(titles: &[&'static str]) -> Row<'static> {
    Row::new(titles.to_vec())
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let topics = app.visible_topics();
    let filter = if app.filter.is_empty() {
        String::new()
    } else {
        format!(" · filter: {:?}", app.filter)
    };
    let title = format!(
        " Topics · sort: {}{filter} · {} shown ",
        app.topic_sort.label(),
        topics.len()
    );
    if topics.is_empty() {
        let message = if app.filter.is_empty() {
            "No topics.".to_string()
        } else {
            format!("No topic matches {:?}. Esc clears the filter.", app.filter)
        };
        frame.render_widget(
            Paragraph::new(message)
                .alignment(Alignment::Center)
                .wrap(Wrap { trim: true })
                .block(Block::bordered().title(title)),
            area,
        );
        return;
    }
    let topic_height = u16::try_from(topics.len())
        .unwrap_or(u16::MAX)
        .saturating_add(3);
    let details_height = area.height.saturating_sub(topic_height);
    let (topics_area, details_area) = if details_height >= 4 {
        let [top, bottom] =
            Layout::vertical([Constraint::Length(topic_height), Constraint::Min(0)]).areas(area);
        (top, Some(bottom))
    } else {
        (area, None)
    };
    let rows = topics.iter().map(|topic| {
        Row::new(vec![
            topic.stream.clone(),
            topic.topic.clone(),
            topic.partitions.len().to_string(),
            fmt_count(topic.messages),
            fmt_bytes(topic.bytes),
            topic.consumer_groups.len().to_string(),
            fmt_count(topic.lag_max()),
        ])
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Fill(2),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(8),
    ];
    let table = Table::new(rows, widths)
        .header(header(&[
            "Stream", "Topic", "Parts", "Messages", "Bytes", "Groups", "Max lag",
        ]))
        .block(Block::bordered().title(title))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(Some(app.topic_selected));
    frame.render_stateful_widget(table, topics_area, &mut state);
    if let (Some(details_area), Some(topic)) = (details_area, app.selected_topic()) {
        render_details(frame, details_area, topic);
    }
}

fn render_details(frame: &mut Frame, area: Rect, topic: &TopicStats) {
    let (partitions_area, groups_area) = if area.width >= SIDE_BY_SIDE_WIDTH {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)])
                .areas(area);
        (left, right)
    } else {
        let groups_height = u16::try_from(topic.consumer_groups.len())
            .unwrap_or(u16::MAX)
            .saturating_add(3);
        let [top, bottom] =
            Layout::vertical([Constraint::Min(4), Constraint::Length(groups_height)]).areas(area);
        (top, bottom)
    };
    let name = format!("{}/{}", topic.stream, topic.topic);
    let partitions = topic.partitions.iter().map(|partition| {
        Row::new(vec![
            partition.partition_id.to_string(),
            partition.shard.to_string(),
            fmt_count(partition.messages),
            fmt_bytes(partition.bytes),
            partition.segments.to_string(),
            partition.current_offset.to_string(),
            fmt_count(partition.consumer_offsets),
        ])
    });
    let table = Table::new(
        partitions,
        [
            Constraint::Length(9),
            Constraint::Length(5),
            Constraint::Length(9),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Min(6),
            Constraint::Length(7),
        ],
    )
    .header(header(&[
        "Partition",
        "Shard",
        "Messages",
        "Bytes",
        "Segments",
        "Offset",
        "Stored",
    ]))
    .block(Block::bordered().title(format!(" Partitions of {name} ")));
    frame.render_widget(table, partitions_area);
    let groups = topic.consumer_groups.iter().map(|group| {
        let lag_style = if group.lag > 0 {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new()
        };
        Row::new(vec![
            ratatui::widgets::Cell::from(group.group_id.to_string()),
            ratatui::widgets::Cell::from(group.name.clone()),
            ratatui::widgets::Cell::from(group.members.to_string()),
            ratatui::widgets::Cell::from(fmt_count(group.lag)).style(lag_style),
        ])
    });
    let table = Table::new(
        groups,
        [
            Constraint::Length(5),
            Constraint::Fill(1),
            Constraint::Length(7),
            Constraint::Length(9),
        ],
    )
    .header(header(&["Group", "Name", "Members", "Lag"]))
    .block(Block::bordered().title(" Consumer groups "));
    frame.render_widget(table, groups_area);
}
