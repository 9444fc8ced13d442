//! The Groups view: every consumer group (stream/topic/group, members,
//! lag) with the selected group's lag over the window; Enter opens a group:
//! its partitions (stored offset, lag, the member holding it, named by the
//! client connection that joined) and its members, with the lag graph. It
//! only reads `App`.

use crate::api::history::name;
use crate::api::{ClientStats, GroupMemberStats};
use crate::app::App;
use crate::series;
use crate::ui::fmt_count;
use crate::ui::graph::{self, Line3};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = &app.theme;
    let graph_rows = if area.height >= 16 {
        area.height / 3
    } else {
        0
    };
    let [table_area, graph_area] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(graph_rows)]).areas(area);
    let lag_of = |stream_id: u32, topic_id: u32, group_id: u32| {
        series::points(
            &app.history,
            app.window,
            &name::group(stream_id, topic_id, group_id),
        )
    };
    let (table, lag) = if let Some((topic, group)) = app.open_group() {
        let title = format!(
            " groups › {}/{}/{} · {} members · lag {} · Esc goes back ",
            topic.stream,
            topic.topic,
            group.name,
            group.members,
            fmt_count(group.lag)
        );
        let clients = app
            .snapshot
            .as_ref()
            .map_or(&[][..], |snapshot| snapshot.clients.as_slice());
        let holder = |partition_id: u32| {
            group
                .member_list
                .iter()
                .find(|member| member.partitions.contains(&partition_id))
                .map_or("-".to_string(), |member| member_name(member, clients))
        };
        let rows: Vec<Row> = app
            .group_partition_rows()
            .iter()
            .map(|partition| {
                Row::new(vec![
                    Cell::from(partition.partition_id.to_string()),
                    Cell::from(
                        partition
                            .offset
                            .map_or("-".into(), |offset| offset.to_string()),
                    ),
                    Cell::from(fmt_count(partition.lag)),
                    Cell::from(holder(partition.partition_id)),
                ])
            })
            .collect();
        let table = Table::new(
            rows,
            [
                Constraint::Length(9),
                Constraint::Length(12),
                Constraint::Length(9),
                Constraint::Min(8),
            ],
        )
        .header(Row::new(["partition", "offset", "lag", "member"]).style(theme.dim()))
        .block(
            Block::bordered()
                .border_style(theme.border())
                .title(Line::styled(title, theme.accent())),
        )
        .row_highlight_style(theme.selected())
        .highlight_symbol("▶ ");
        let lag = lag_of(topic.stream_id, topic.topic_id, group.group_id);
        ((table, app.group_partition_selected), lag)
    } else {
        let groups = app.group_rows();
        let rows: Vec<Row> = groups
            .iter()
            .map(|(topic, group)| {
                Row::new(vec![
                    Cell::from(format!("{}/{}", topic.stream, topic.topic)),
                    Cell::from(group.name.clone()),
                    Cell::from(group.members.to_string()),
                    Cell::from(fmt_count(group.lag)),
                ])
            })
            .collect();
        if rows.is_empty() {
            frame.render_widget(
                Paragraph::new("No consumer groups.")
                    .block(Block::bordered().title(" Consumer groups ")),
                area,
            );
            return;
        }
        let title = format!(" Consumer groups · {} · Enter opens ", groups.len());
        let lag = groups
            .get(app.group_selected)
            .map(|(topic, group)| lag_of(topic.stream_id, topic.topic_id, group.group_id))
            .unwrap_or_default();
        let table = Table::new(
            rows,
            [
                Constraint::Min(16),
                Constraint::Min(10),
                Constraint::Length(7),
                Constraint::Length(9),
            ],
        )
        .header(Row::new(["topic", "group", "members", "lag"]).style(theme.dim()))
        .block(
            Block::bordered()
                .border_style(theme.border())
                .title(Line::styled(title, theme.accent())),
        )
        .row_highlight_style(theme.selected())
        .highlight_symbol("▶ ");
        ((table, app.group_selected), lag)
    };
    let (table, selected) = table;
    let mut state = TableState::default().with_selected(Some(selected));
    frame.render_stateful_widget(table, table_area, &mut state);
    if graph_area.height >= 3 {
        graph::render(
            frame,
            graph_area,
            theme,
            "lag",
            app.window,
            &[Line3 {
                label: "messages",
                points: lag,
                style: theme.series_third(),
            }],
            crate::ui::fmt_rate,
        );
    }
}

/// A member as the operator knows it: the client connection that joined
/// (its id and address, as the Clients view lists it), the client id alone
/// when that connection is not in the snapshot's list, or the daemon's key
/// when the snapshot does not name the connection (an older daemon, or a
/// member whose connection just closed).
pub fn member_name(member: &GroupMemberStats, clients: &[ClientStats]) -> String {
    match member.client_id {
        Some(client_id) => match clients.iter().find(|client| client.client_id == client_id) {
            Some(client) => format!("client {client_id} {}", client.address),
            None => format!("client {client_id}"),
        },
        None => {
            let key = member.member.trim_start_matches('0');
            format!("key {}", if key.is_empty() { "0" } else { key })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a member is named by its client and address when the
    /// snapshot lists the connection, by its client id when it does not,
    /// and by the daemon's key (leading zeros dropped) otherwise.
    #[test]
    fn members_are_named_by_their_client() {
        let client = ClientStats {
            client_id: 16_777_217,
            address: "10.0.0.6:40112".into(),
            user: Some("billing".into()),
            tls: false,
            shard: 1,
            requests_total: 0,
            bytes_in_total: 0,
            bytes_out_total: 0,
            last_command: 0,
            idle_ms: 0,
            connected_ms: 0,
        };
        let member = |client_id: Option<u64>| GroupMemberStats {
            member: "000000000000000000000001000000a7".into(),
            partitions: vec![1],
            client_id,
        };
        let clients = std::slice::from_ref(&client);
        assert_eq!(
            member_name(&member(Some(16_777_217)), clients),
            "client 16777217 10.0.0.6:40112"
        );
        assert_eq!(member_name(&member(Some(5)), clients), "client 5");
        assert_eq!(member_name(&member(None), clients), "key 1000000a7");
        let zero = GroupMemberStats {
            member: "0".repeat(32),
            ..member(None)
        };
        assert_eq!(member_name(&zero, &[]), "key 0");
    }
}
