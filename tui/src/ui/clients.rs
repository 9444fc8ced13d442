//! The Clients view: every connection (id, address, user, TLS, shard,
//! requests, bytes in and out, last command, idle time, age), sorted with
//! `s` and filtered with `/`, so an operator finds the client hammering the
//! node; `d` asks to disconnect the selected one. It only reads `App`.

use crate::app::App;
use crate::ui::{fmt_age, fmt_bytes, fmt_count, fmt_uptime};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = &app.theme;
    let clients = app.client_rows();
    let total = app
        .snapshot
        .as_ref()
        .map_or(0, |snapshot| snapshot.clients.len());
    let title = format!(
        " Clients · {} of {total} · sort: {} {}· d disconnects ",
        clients.len(),
        app.client_sort.label(),
        if app.filter().is_empty() {
            String::new()
        } else {
            format!("· filter: {:?} ", app.filter())
        }
    );
    let block = Block::bordered()
        .border_style(theme.border())
        .title(Line::styled(title, theme.accent()));
    if clients.is_empty() {
        frame.render_widget(Paragraph::new("No client matches.").block(block), area);
        return;
    }
    // Columns by priority: narrow terminals keep who and how much.
    let wide = area.width >= 110;
    let rows: Vec<Row> = clients
        .iter()
        .map(|client| {
            let mut cells = vec![
                Cell::from(client.address.clone()),
                Cell::from(client.user.clone().unwrap_or_else(|| "-".into())),
                Cell::from(client.shard.to_string()),
                Cell::from(fmt_count(client.requests_total)),
                Cell::from(fmt_bytes(client.bytes_in_total)),
                Cell::from(fmt_bytes(client.bytes_out_total)),
                Cell::from(fmt_age(client.idle_ms)),
            ];
            if wide {
                cells.insert(0, Cell::from(client.client_id.to_string()));
                cells.insert(3, Cell::from(if client.tls { "tls" } else { "-" }));
                cells.push(Cell::from(command_name(client.last_command)));
                cells.push(Cell::from(fmt_uptime(client.connected_ms)));
            }
            Row::new(cells)
        })
        .collect();
    let (header, widths): (Vec<&str>, Vec<Constraint>) = if wide {
        (
            vec![
                "id",
                "address",
                "user",
                "tls",
                "shard",
                "requests",
                "in",
                "out",
                "idle",
                "last command",
                "age",
            ],
            vec![
                Constraint::Length(9),
                Constraint::Min(21),
                Constraint::Length(10),
                Constraint::Length(3),
                Constraint::Length(5),
                Constraint::Length(8),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(6),
                Constraint::Length(18),
                Constraint::Length(6),
            ],
        )
    } else {
        (
            vec!["address", "user", "shard", "requests", "in", "out", "idle"],
            vec![
                Constraint::Min(15),
                Constraint::Length(8),
                Constraint::Length(5),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(6),
            ],
        )
    };
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(theme.dim()))
        .block(block)
        .row_highlight_style(theme.selected())
        .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(Some(app.client_selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Iggy's command codes, named (the common ones; others by number).
pub fn command_name(code: u32) -> String {
    let name = match code {
        0 => "-",
        1 => "ping",
        10 => "get_stats",
        20 => "get_me",
        21 => "get_client",
        22 => "get_clients",
        38 => "login_user",
        39 => "logout_user",
        44 => "login_with_token",
        100 => "poll_messages",
        101 => "send_messages",
        102 => "flush_unsaved",
        120 => "get_offset",
        121 => "store_offset",
        200 => "get_stream",
        201 => "get_streams",
        202 => "create_stream",
        300 => "get_topic",
        301 => "get_topics",
        302 => "create_topic",
        600 => "get_group",
        601 => "get_groups",
        602 => "create_group",
        604 => "join_group",
        605 => "leave_group",
        other => return format!("#{other}"),
    };
    name.to_string()
}
