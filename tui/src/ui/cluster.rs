//! The Cluster view: the daemon's `cluster_status` (asked only while this
//! view is shown): every node (id, name, client address, reachable, role
//! in the metadata group, how many groups it leads as this node sees it),
//! then every Raft group (name, leader, term, commit index, its largest
//! follower lag) with the laggiest first, filtered with `/`. On a single
//! node it says the daemon is not a cluster member. It only reads `App`.

use crate::api::cluster::{ClusterStatus, Role};
use crate::app::rows::lag_max;
use crate::app::{App, ClusterPane};
use crate::ui::fmt_count;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState, Wrap};

/// What the view says on a daemon that runs no cluster.
pub const NOT_A_MEMBER: &str = "This daemon is not a cluster member ([cluster] enabled = false): \
     it runs as a single node and has no Raft groups to show.";

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = &app.theme;
    let message = |text: String, style| {
        Paragraph::new(Line::styled(text, style))
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(" Cluster "))
    };
    match &app.cluster {
        ClusterPane::Waiting => frame.render_widget(
            message(
                "asking the daemon for its cluster status…".into(),
                theme.dim(),
            ),
            area,
        ),
        ClusterPane::NotMember => {
            frame.render_widget(message(NOT_A_MEMBER.into(), theme.dim()), area);
        }
        ClusterPane::Failed(reason) => frame.render_widget(
            message(format!("cluster status failed: {reason}"), theme.bad()),
            area,
        ),
        ClusterPane::Member(status) => render_member(frame, area, app, status),
    }
}

/// Groups each node leads, as this node sees them.
fn leads(status: &ClusterStatus, node: u64) -> usize {
    status
        .groups
        .iter()
        .filter(|group| group.leader == Some(node))
        .count()
}

fn render_member(frame: &mut Frame, area: Rect, app: &App, status: &ClusterStatus) {
    let theme = &app.theme;
    // Borders and header take three rows; every node gets its own.
    let nodes_rows = u16::try_from(status.nodes.len())
        .unwrap_or(u16::MAX)
        .saturating_add(3)
        .min(area.height / 2);
    let [nodes_area, groups_area] =
        Layout::vertical([Constraint::Length(nodes_rows), Constraint::Min(0)]).areas(area);

    let metadata = match status.metadata() {
        Some(metadata) => format!(
            "metadata leader {} · term {}",
            metadata
                .leader
                .map_or_else(|| "none".to_string(), |leader| leader.to_string()),
            metadata.term
        ),
        None => "metadata group not running here".to_string(),
    };
    let nodes_title = format!(
        " Cluster {} · node {} · {metadata} ",
        status.cluster, status.node_id
    );
    let node_rows: Vec<Row> = status
        .nodes
        .iter()
        .map(|node| {
            let id = if node.this_node {
                format!("{}*", node.id)
            } else {
                node.id.to_string()
            };
            let reachable = if node.reachable {
                Cell::from("yes").style(theme.good())
            } else {
                Cell::from("no").style(theme.bad())
            };
            let role = Cell::from(node.role.as_str()).style(match node.role {
                Role::Leader => theme.accent(),
                Role::Follower => theme.dim(),
                _ => theme.warn(),
            });
            Row::new(vec![
                Cell::from(id),
                Cell::from(node.name.clone()),
                Cell::from(node.address.clone()),
                reachable,
                role,
                Cell::from(leads(status, node.id).to_string()),
            ])
        })
        .collect();
    let nodes = Table::new(
        node_rows,
        [
            Constraint::Length(5),
            Constraint::Length(12),
            Constraint::Min(15),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(7),
        ],
    )
    .header(Row::new(["node", "name", "address", "reachable", "role", "leads"]).style(theme.dim()))
    .block(Block::bordered().title(nodes_title));
    frame.render_widget(nodes, nodes_area);

    let groups = app.cluster_group_rows();
    let leaderless = status.leaderless().count();
    let mut groups_title = format!(
        " Groups · {} of {} · laggiest first",
        groups.len(),
        status.groups.len()
    );
    if leaderless > 0 {
        groups_title.push_str(&format!(" · {leaderless} without a leader"));
    }
    if !status.shards_silent.is_empty() {
        groups_title.push_str(&format!(" · shards silent: {:?}", status.shards_silent));
    }
    if !app.filter().is_empty() {
        groups_title.push_str(&format!(" · filter: {:?}", app.filter()));
    }
    groups_title.push(' ');
    let group_rows: Vec<Row> = groups
        .iter()
        .map(|group| {
            let leader = match group.leader {
                Some(leader) => Cell::from(leader.to_string()),
                None => Cell::from("none").style(theme.bad()),
            };
            // Lag is known only where this node leads.
            let lag = if group.role == Role::Leader {
                let lag = lag_max(group);
                let style = if lag > 0 { theme.warn() } else { theme.dim() };
                Cell::from(fmt_count(lag)).style(style)
            } else {
                Cell::from("-").style(theme.dim())
            };
            Row::new(vec![
                Cell::from(group.group.clone()),
                leader,
                Cell::from(group.term.to_string()),
                Cell::from(
                    group
                        .committed
                        .map_or_else(|| "-".to_string(), |index| index.to_string()),
                ),
                lag,
                Cell::from(group.role.as_str()),
            ])
        })
        .collect();
    let table = Table::new(
        group_rows,
        [
            Constraint::Min(12),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(9),
        ],
    )
    .header(Row::new(["group", "leader", "term", "commit", "lag max", "here"]).style(theme.dim()))
    .block(Block::bordered().title(groups_title))
    .row_highlight_style(theme.selected())
    .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(Some(app.cluster_selected));
    frame.render_stateful_widget(table, groups_area, &mut state);
}
