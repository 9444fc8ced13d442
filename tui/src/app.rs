//! The console's state and its one transition function, `App::update`:
//! which view is shown, the drill-down path (streams → topics → partitions
//! → segments; groups → one group), selections, sorts and filters, the
//! graph window, pause, help, the prompts (filter, log level, snapshot
//! path), the confirmation line and the action waiting for the socket, the
//! last snapshot and the daemon's history. It does no I/O and reads no
//! clock, so every behaviour is a unit test; rendering (`ui`) only reads
//! it. Row lists (`rows`) are computed here so that the selection and the
//! screen agree on order.

pub mod rows;

use crate::api::cluster::{ClusterStatus, NO_CLUSTER};
use crate::api::{Hello, HistoryWindow, Snapshot};
use crate::event::Event;
use crate::series::Window;
use crate::theme::Theme;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::path::PathBuf;
use std::time::Duration;

pub use rows::{ClientSort, EventFilter, Level, ShardSort};

/// A shard whose heartbeat has not moved for longer than this is stale.
pub const STALE_HEARTBEAT_MS: u64 = 2_000;
/// A shard above this CPU share (of one core) is hot.
pub const HOT_CPU_PERCENT: f64 = 85.0;
/// A shard with more messages than this waiting in its inbox is hot (a
/// quarter of the daemon's 4096-deep inbox).
pub const HOT_QUEUE_DEPTH: u64 = 1_024;
/// Longest text typed into a filter or log-level prompt.
const INPUT_CHARS_MAX: usize = 64;
/// Longest path typed into the snapshot prompt: whatever its characters,
/// it stays within the daemon's `SNAPSHOT_FILE_PATH_BYTES_MAX`.
pub const PATH_CHARS_MAX: usize = crate::api::SNAPSHOT_FILE_PATH_BYTES_MAX / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Overview,
    Shards,
    Streams,
    Groups,
    Clients,
    Events,
    Cluster,
}

impl View {
    pub const ALL: [View; 7] = [
        View::Overview,
        View::Shards,
        View::Streams,
        View::Groups,
        View::Clients,
        View::Events,
        View::Cluster,
    ];

    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Shards => "Shards",
            View::Streams => "Streams",
            View::Groups => "Groups",
            View::Clients => "Clients",
            View::Events => "Events",
            View::Cluster => "Cluster",
        }
    }

    pub fn index(self) -> usize {
        View::ALL.iter().position(|view| *view == self).unwrap_or(0)
    }

    fn next(self) -> View {
        View::ALL[(self.index() + 1) % View::ALL.len()]
    }

    fn previous(self) -> View {
        View::ALL[(self.index() + View::ALL.len() - 1) % View::ALL.len()]
    }
}

/// What the Cluster view shows: the daemon's `cluster_status`, asked at
/// the refresh interval only while the view is shown.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterPane {
    /// Nothing asked or answered yet.
    Waiting,
    Member(Box<ClusterStatus>),
    /// The daemon runs no cluster (`[cluster] enabled = false`).
    NotMember,
    /// The request failed; the message says why.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Connection {
    Connecting,
    Connected(Hello),
    Disconnected { reason: String, retry_in: Duration },
}

/// An admin request the operator confirmed; the event loop sends it on a
/// connection of its own and reports back with `Event::ActionDone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    SetLogLevel(String),
    DisconnectClient {
        client_id: u64,
        address: String,
    },
    /// The daemon writes an `iggy snapshot` ZIP (every type, deflated) to
    /// this new file on its host.
    SnapshotFile {
        path: String,
    },
}

impl Action {
    pub fn describe(&self) -> String {
        match self {
            Action::SetLogLevel(level) => format!("set the daemon's log level to {level:?}"),
            Action::DisconnectClient { client_id, address } => {
                format!("disconnect client {client_id} ({address})")
            }
            Action::SnapshotFile { path } => {
                format!("write a snapshot ZIP (all diagnostics, deflated) to {path}")
            }
        }
    }
}

/// What a prompt line is typing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Filter,
    LogLevel,
    /// Where the daemon writes a snapshot ZIP.
    SnapshotPath,
}

impl InputKind {
    /// Longest text this prompt takes.
    pub fn chars_max(self) -> usize {
        match self {
            InputKind::Filter | InputKind::LogLevel => INPUT_CHARS_MAX,
            InputKind::SnapshotPath => PATH_CHARS_MAX,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub kind: InputKind,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct App {
    pub socket: PathBuf,
    pub interval: Duration,
    pub theme: Theme,
    pub connection: Connection,
    pub snapshot: Option<Box<Snapshot>>,
    /// The daemon's history as far as it was sent.
    pub history: HistoryWindow,
    pub view: View,
    pub window: Window,
    pub help: bool,
    pub paused: bool,
    /// The newest snapshot and the history that arrived while paused.
    pub held: Option<Box<Snapshot>>,
    pub held_history: Option<HistoryWindow>,
    pub should_quit: bool,
    pub shard_sort: ShardSort,
    pub client_sort: ClientSort,
    pub event_filter: EventFilter,
    /// The drill-down of the Streams view, root first; never empty.
    pub path: Vec<(Level, usize)>,
    /// The Groups view: the list (selected row) and the opened group.
    pub group_selected: usize,
    pub group_open: Option<(u32, u32, u32)>,
    pub group_partition_selected: usize,
    pub shard_selected: usize,
    pub client_selected: usize,
    /// Event lines scrolled up from the newest.
    pub event_scroll: usize,
    /// Applied filters, one per view (case-insensitive substring).
    pub filters: [String; View::ALL.len()],
    pub input: Option<Input>,
    /// A confirmation line waiting for y/n.
    pub confirm: Option<Action>,
    /// A confirmed action for the event loop to send (taken with
    /// `take_action`).
    pub outbox: Option<Action>,
    /// The answer to the last action: (ok, message).
    pub status: Option<(bool, String)>,
    /// The last snapshot path typed, offered again by the next `S`.
    pub snapshot_path: String,
    /// The Cluster view: the last answer and the selected group row.
    pub cluster: ClusterPane,
    pub cluster_selected: usize,
    /// A snapshot (the refresh interval's beat) arrived, or the view was
    /// opened, since the last `cluster_status` was asked.
    cluster_due: bool,
    /// A `cluster_status` was asked and not answered yet.
    cluster_in_flight: bool,
}

impl App {
    pub fn new(socket: PathBuf, interval: Duration) -> App {
        App {
            socket,
            interval,
            theme: Theme::default(),
            connection: Connection::Connecting,
            snapshot: None,
            history: HistoryWindow::default(),
            view: View::Overview,
            window: Window::M5,
            help: false,
            paused: false,
            held: None,
            held_history: None,
            should_quit: false,
            shard_sort: ShardSort::Id,
            client_sort: ClientSort::BytesIn,
            event_filter: EventFilter::All,
            path: vec![(Level::Streams, 0)],
            group_selected: 0,
            group_open: None,
            group_partition_selected: 0,
            shard_selected: 0,
            client_selected: 0,
            event_scroll: 0,
            filters: Default::default(),
            input: None,
            confirm: None,
            outbox: None,
            status: None,
            snapshot_path: String::new(),
            cluster: ClusterPane::Waiting,
            cluster_selected: 0,
            cluster_due: false,
            cluster_in_flight: false,
        }
    }

    /// Whether the event loop should ask for `cluster_status` now: only
    /// while the Cluster view is shown and not paused, at most once per
    /// snapshot (so at the refresh interval), one request at a time.
    pub fn take_cluster_request(&mut self) -> bool {
        if self.view != View::Cluster || self.paused || self.cluster_in_flight || !self.cluster_due
        {
            return false;
        }
        self.cluster_due = false;
        self.cluster_in_flight = true;
        true
    }

    /// Whether the screen must be redrawn after `event`.
    pub fn needs_redraw(&self, event: &Event) -> bool {
        match event {
            Event::Tick => matches!(self.connection, Connection::Disconnected { .. }),
            Event::Snapshot(_) | Event::History(_) => !self.paused,
            Event::Cluster(_) => self.view == View::Cluster && !self.paused,
            _ => true,
        }
    }

    /// The confirmed action, if any, for the event loop to send.
    pub fn take_action(&mut self) -> Option<Action> {
        self.outbox.take()
    }

    pub fn filter(&self) -> &str {
        &self.filters[self.view.index()]
    }

    pub fn update(&mut self, event: Event) {
        match event {
            Event::Key(key) => {
                let before = self.view;
                self.on_key(key);
                if self.view == View::Cluster && before != View::Cluster {
                    self.cluster_due = true;
                }
            }
            Event::Cluster(answer) => {
                self.cluster_in_flight = false;
                if !self.paused {
                    self.cluster = match answer {
                        Ok(status) => ClusterPane::Member(status),
                        Err(message) if message.contains(NO_CLUSTER) => ClusterPane::NotMember,
                        Err(message) => ClusterPane::Failed(message),
                    };
                }
            }
            Event::Resize { .. } | Event::Tick => {}
            Event::Connected(hello) => self.connection = Connection::Connected(hello),
            Event::Disconnected { reason, retry_in } => {
                self.connection = Connection::Disconnected { reason, retry_in };
            }
            Event::History(history) => {
                if self.paused {
                    match &mut self.held_history {
                        Some(held) => held.append(*history),
                        None => self.held_history = Some(*history),
                    }
                } else {
                    self.history.append(*history);
                }
            }
            Event::Snapshot(snapshot) => {
                if self.paused {
                    self.held = Some(snapshot);
                } else {
                    self.snapshot = Some(snapshot);
                    self.cluster_due = true;
                }
            }
            Event::ActionDone(result) => {
                self.status = Some(match result {
                    Ok(message) => (true, message),
                    Err(message) => (false, message),
                });
            }
        }
        self.clamp_selection();
    }

    fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.should_quit = true;
            return;
        }
        if let Some(action) = self.confirm.take() {
            if matches!(key.code, KeyCode::Char('y' | 'Y')) {
                self.status = Some((true, format!("sent: {}", action.describe())));
                self.outbox = Some(action);
            } else {
                self.status = Some((true, "cancelled".into()));
            }
            return;
        }
        if let Some(input) = &mut self.input {
            match key.code {
                KeyCode::Enter => {
                    let text = input.text.trim().to_string();
                    let kind = input.kind;
                    self.input = None;
                    match kind {
                        InputKind::Filter => {
                            self.filters[self.view.index()] = text;
                            self.reset_selection();
                        }
                        InputKind::LogLevel if !text.is_empty() => {
                            self.confirm = Some(Action::SetLogLevel(text));
                        }
                        InputKind::LogLevel => {}
                        InputKind::SnapshotPath if text.is_empty() => {}
                        InputKind::SnapshotPath if !text.starts_with('/') => {
                            self.status = Some((
                                false,
                                format!(
                                    "{text:?} is relative: the daemon writes the ZIP on its own \
                                     host, give an absolute path"
                                ),
                            ));
                            self.snapshot_path = text;
                        }
                        InputKind::SnapshotPath => {
                            self.snapshot_path.clone_from(&text);
                            self.confirm = Some(Action::SnapshotFile { path: text });
                        }
                    }
                }
                KeyCode::Esc => {
                    if input.kind == InputKind::Filter {
                        self.filters[self.view.index()].clear();
                    }
                    self.input = None;
                }
                KeyCode::Backspace => {
                    input.text.pop();
                }
                KeyCode::Char(c) if input.text.chars().count() < input.kind.chars_max() => {
                    input.text.push(c);
                }
                _ => {}
            }
            return;
        }
        if self.help {
            match key.code {
                KeyCode::Char('q') => self.should_quit = true,
                KeyCode::Char('?') | KeyCode::Esc | KeyCode::Enter => self.help = false,
                _ => {}
            }
            return;
        }
        match key.code {
            KeyCode::Char('q') => self.should_quit = true,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Tab | KeyCode::Right | KeyCode::Char('l') => self.view = self.view.next(),
            KeyCode::BackTab | KeyCode::Left | KeyCode::Char('h') => {
                self.view = self.view.previous();
            }
            KeyCode::Char(digit @ '1'..='7') => {
                let index = usize::from(digit as u8 - b'1');
                self.view = View::ALL[index];
            }
            KeyCode::Char('w') => self.window = self.window.next(),
            KeyCode::Char('W') => self.window = self.window.previous(),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX),
            KeyCode::Enter => self.enter(),
            KeyCode::Esc | KeyCode::Backspace => self.back(),
            KeyCode::Char('s') => match self.view {
                View::Shards | View::Overview => self.shard_sort = self.shard_sort.next(),
                View::Clients => self.client_sort = self.client_sort.next(),
                _ => {}
            },
            KeyCode::Char('e') if self.view == View::Events => {
                self.event_filter = self.event_filter.next();
                self.event_scroll = 0;
            }
            KeyCode::Char('/') => {
                self.input = Some(Input {
                    kind: InputKind::Filter,
                    text: self.filter().to_string(),
                });
            }
            KeyCode::Char('L') => {
                self.input = Some(Input {
                    kind: InputKind::LogLevel,
                    text: String::new(),
                });
            }
            KeyCode::Char('S') => {
                self.input = Some(Input {
                    kind: InputKind::SnapshotPath,
                    text: self.snapshot_path.clone(),
                });
            }
            KeyCode::Char('d') if self.view == View::Clients => {
                if let Some(client) = self.client_rows().get(self.client_selected) {
                    self.confirm = Some(Action::DisconnectClient {
                        client_id: client.client_id,
                        address: client.address.clone(),
                    });
                }
            }
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                if !self.paused {
                    if let Some(held) = self.held.take() {
                        self.snapshot = Some(held);
                    }
                    if let Some(held) = self.held_history.take() {
                        self.history.append(held);
                    }
                }
            }
            _ => {}
        }
    }

    /// Enter: go one level deeper in Streams or Groups.
    fn enter(&mut self) {
        match self.view {
            View::Streams => {
                if let Some(next) = self.selected_child() {
                    self.path.push((next, 0));
                    self.filters[self.view.index()].clear();
                }
            }
            View::Groups if self.group_open.is_none() => {
                if let Some((topic, group)) = self.group_rows().get(self.group_selected) {
                    self.group_open = Some((topic.stream_id, topic.topic_id, group.group_id));
                    self.group_partition_selected = 0;
                }
            }
            _ => {}
        }
    }

    /// Esc: clear this view's filter first, then go one level up.
    fn back(&mut self) {
        if !self.filter().is_empty() {
            self.filters[self.view.index()].clear();
            return;
        }
        match self.view {
            View::Streams if self.path.len() > 1 => {
                self.path.pop();
            }
            View::Groups => self.group_open = None,
            _ => {}
        }
    }

    fn reset_selection(&mut self) {
        match self.view {
            View::Streams => {
                if let Some(last) = self.path.last_mut() {
                    last.1 = 0;
                }
            }
            View::Groups => self.group_selected = 0,
            View::Clients => self.client_selected = 0,
            View::Events => self.event_scroll = 0,
            View::Cluster => self.cluster_selected = 0,
            View::Overview | View::Shards => self.shard_selected = 0,
        }
    }

    fn move_selection(&mut self, delta: isize) {
        let move_by = |selected: usize, rows: usize, delta: isize| {
            selected
                .saturating_add_signed(delta)
                .min(rows.saturating_sub(1))
        };
        let rows = self.row_count();
        match self.view {
            View::Overview | View::Shards => {
                self.shard_selected = move_by(self.shard_selected, rows, delta);
            }
            View::Streams => {
                if let Some(last) = self.path.last_mut() {
                    last.1 = move_by(last.1, rows, delta);
                }
            }
            View::Groups if self.group_open.is_some() => {
                self.group_partition_selected = move_by(self.group_partition_selected, rows, delta);
            }
            View::Groups => self.group_selected = move_by(self.group_selected, rows, delta),
            View::Clients => self.client_selected = move_by(self.client_selected, rows, delta),
            View::Cluster => self.cluster_selected = move_by(self.cluster_selected, rows, delta),
            View::Events => {
                // Up scrolls towards older events: away from the bottom.
                self.event_scroll = move_by(self.event_scroll, rows, delta.saturating_neg());
            }
        }
    }

    fn clamp_selection(&mut self) {
        let last = |rows: usize| rows.saturating_sub(1);
        let shards = last(self.shard_rows().len());
        let streams = last(self.level_row_count());
        let groups = last(self.group_rows().len());
        let group_partitions = last(self.group_partition_rows().len());
        let clients = last(self.client_rows().len());
        let events = last(self.event_rows().len());
        let cluster = last(self.cluster_group_rows().len());
        self.shard_selected = self.shard_selected.min(shards);
        if let Some(level) = self.path.last_mut() {
            level.1 = level.1.min(streams);
        }
        self.group_selected = self.group_selected.min(groups);
        self.group_partition_selected = self.group_partition_selected.min(group_partitions);
        self.client_selected = self.client_selected.min(clients);
        self.event_scroll = self.event_scroll.min(events);
        self.cluster_selected = self.cluster_selected.min(cluster);
    }

    fn row_count(&self) -> usize {
        match self.view {
            View::Overview | View::Shards => self.shard_rows().len(),
            View::Streams => self.level_row_count(),
            View::Groups if self.group_open.is_some() => self.group_partition_rows().len(),
            View::Groups => self.group_rows().len(),
            View::Clients => self.client_rows().len(),
            View::Events => self.event_rows().len(),
            View::Cluster => self.cluster_group_rows().len(),
        }
    }

    pub fn is_disconnected(&self) -> bool {
        matches!(self.connection, Connection::Disconnected { .. })
    }
}

/// Whether a shard's heartbeat is older than `STALE_HEARTBEAT_MS`.
pub fn is_stale(shard: &crate::api::ShardStats) -> bool {
    shard.heartbeat_age_ms > STALE_HEARTBEAT_MS
}

pub fn is_hot_cpu(shard: &crate::api::ShardStats) -> bool {
    shard.cpu_percent >= HOT_CPU_PERCENT
}

pub fn is_hot_queue(shard: &crate::api::ShardStats) -> bool {
    shard.queue_depth >= HOT_QUEUE_DEPTH
}

#[cfg(test)]
mod tests;
