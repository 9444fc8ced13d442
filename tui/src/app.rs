//! The console's state and its one transition function, `App::update`:
//! which view is shown, what is selected, sort and filter, pause, help, the
//! last snapshot and the throughput history. It does no I/O and reads no
//! clock, so every behaviour is a unit test; rendering (`ui`) only reads it.

use crate::api::{Hello, ShardStats, Snapshot, TopicStats};
use crate::event::Event;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

/// Throughput samples kept per shard (two minutes at the default 1 s).
pub const HISTORY_SAMPLES: usize = 120;
/// A shard whose heartbeat has not moved for longer than this is stale.
pub const STALE_HEARTBEAT_MS: u64 = 2_000;
/// A shard above this CPU share (of one core) is hot.
pub const HOT_CPU_PERCENT: f64 = 85.0;
/// A shard with more messages than this waiting in its inbox is hot (a
/// quarter of the daemon's 4096-deep inbox).
pub const HOT_QUEUE_DEPTH: u64 = 1_024;
/// Longest filter text.
const FILTER_CHARS_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Shards,
    Topics,
    Events,
}

impl View {
    pub const ALL: [View; 3] = [View::Shards, View::Topics, View::Events];

    pub fn title(self) -> &'static str {
        match self {
            View::Shards => "Shards",
            View::Topics => "Topics",
            View::Events => "Events",
        }
    }

    fn index(self) -> usize {
        View::ALL.iter().position(|view| *view == self).unwrap_or(0)
    }

    fn next(self) -> View {
        View::ALL[(self.index() + 1) % View::ALL.len()]
    }

    fn previous(self) -> View {
        View::ALL[(self.index() + View::ALL.len() - 1) % View::ALL.len()]
    }
}

/// Order of shards inside their NUMA group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSort {
    Id,
    Cpu,
    Throughput,
    Queue,
}

impl ShardSort {
    pub fn label(self) -> &'static str {
        match self {
            ShardSort::Id => "shard",
            ShardSort::Cpu => "CPU% ↓",
            ShardSort::Throughput => "msg/s ↓",
            ShardSort::Queue => "queue ↓",
        }
    }

    fn next(self) -> ShardSort {
        match self {
            ShardSort::Id => ShardSort::Cpu,
            ShardSort::Cpu => ShardSort::Throughput,
            ShardSort::Throughput => ShardSort::Queue,
            ShardSort::Queue => ShardSort::Id,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicSort {
    Name,
    Messages,
    Bytes,
    Lag,
}

impl TopicSort {
    pub fn label(self) -> &'static str {
        match self {
            TopicSort::Name => "name",
            TopicSort::Messages => "messages ↓",
            TopicSort::Bytes => "bytes ↓",
            TopicSort::Lag => "lag ↓",
        }
    }

    fn next(self) -> TopicSort {
        match self {
            TopicSort::Name => TopicSort::Messages,
            TopicSort::Messages => TopicSort::Bytes,
            TopicSort::Bytes => TopicSort::Lag,
            TopicSort::Lag => TopicSort::Name,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Connection {
    Connecting,
    Connected(Hello),
    Disconnected { reason: String, retry_in: Duration },
}

/// Recent throughput (messages in + out per second), per shard and in
/// total, oldest first.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub shards: BTreeMap<u32, VecDeque<u64>>,
    pub total: VecDeque<u64>,
}

impl History {
    fn record(&mut self, snapshot: &Snapshot) {
        let mut total = 0.0;
        for shard in &snapshot.shards {
            let rate = shard.messages_in_per_sec + shard.messages_out_per_sec;
            total += rate;
            push_bounded(self.shards.entry(shard.shard).or_default(), rate);
        }
        // Shards that are gone (a restart with another plan) stop growing;
        // drop their history so the panel shows the current plan only.
        self.shards
            .retain(|id, _| snapshot.shards.iter().any(|shard| shard.shard == *id));
        push_bounded(&mut self.total, total);
    }
}

fn push_bounded(samples: &mut VecDeque<u64>, rate: f64) {
    if samples.len() == HISTORY_SAMPLES {
        samples.pop_front();
    }
    // Rates are non-negative; `as` saturates, and NaN becomes 0.
    samples.push_back(rate.max(0.0).round() as u64);
}

#[derive(Debug, Clone)]
pub struct App {
    pub socket: PathBuf,
    pub interval: Duration,
    pub connection: Connection,
    pub snapshot: Option<Box<Snapshot>>,
    pub history: History,
    pub view: View,
    pub help: bool,
    pub paused: bool,
    /// The newest snapshot that arrived while paused, shown on resume.
    pub held: Option<Box<Snapshot>>,
    pub should_quit: bool,
    pub shard_sort: ShardSort,
    pub topic_sort: TopicSort,
    pub shard_selected: usize,
    pub topic_selected: usize,
    /// Event lines scrolled up from the newest.
    pub event_scroll: usize,
    /// The applied topic filter (case-insensitive substring of
    /// "stream/topic").
    pub filter: String,
    /// While typing a filter after `/`: the text so far.
    pub filter_input: Option<String>,
}

impl App {
    pub fn new(socket: PathBuf, interval: Duration) -> App {
        App {
            socket,
            interval,
            connection: Connection::Connecting,
            snapshot: None,
            history: History::default(),
            view: View::Shards,
            help: false,
            paused: false,
            held: None,
            should_quit: false,
            shard_sort: ShardSort::Id,
            topic_sort: TopicSort::Name,
            shard_selected: 0,
            topic_selected: 0,
            event_scroll: 0,
            filter: String::new(),
            filter_input: None,
        }
    }

    /// Whether the screen must be redrawn after `event`.
    pub fn needs_redraw(&self, event: &Event) -> bool {
        match event {
            Event::Tick => matches!(self.connection, Connection::Disconnected { .. }),
            Event::Snapshot(_) => !self.paused,
            _ => true,
        }
    }

    pub fn update(&mut self, event: Event) {
        match event {
            Event::Key(key) => self.on_key(key),
            Event::Resize { .. } | Event::Tick => {}
            Event::Connected(hello) => self.connection = Connection::Connected(hello),
            Event::Disconnected { reason, retry_in } => {
                self.connection = Connection::Disconnected { reason, retry_in };
            }
            Event::Snapshot(snapshot) => {
                if self.paused {
                    self.held = Some(snapshot);
                } else {
                    self.apply(snapshot);
                }
            }
        }
        self.clamp_selection();
    }

    fn apply(&mut self, snapshot: Box<Snapshot>) {
        self.history.record(&snapshot);
        self.snapshot = Some(snapshot);
    }

    fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.should_quit = true;
            return;
        }
        if let Some(input) = &mut self.filter_input {
            match key.code {
                KeyCode::Enter => {
                    self.filter = input.trim().to_string();
                    self.filter_input = None;
                    self.topic_selected = 0;
                }
                KeyCode::Esc => {
                    self.filter_input = None;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    input.pop();
                }
                KeyCode::Char(c) if input.chars().count() < FILTER_CHARS_MAX => input.push(c),
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
            KeyCode::Char('1') => self.view = View::Shards,
            KeyCode::Char('2') => self.view = View::Topics,
            KeyCode::Char('3') => self.view = View::Events,
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX),
            KeyCode::Char('s') => match self.view {
                View::Shards => self.shard_sort = self.shard_sort.next(),
                View::Topics => {
                    self.topic_sort = self.topic_sort.next();
                    self.topic_selected = 0;
                }
                View::Events => {}
            },
            KeyCode::Char('/') => {
                self.view = View::Topics;
                self.filter_input = Some(self.filter.clone());
            }
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                if !self.paused
                    && let Some(held) = self.held.take()
                {
                    self.apply(held);
                }
            }
            _ => {}
        }
    }

    fn move_selection(&mut self, delta: isize) {
        let move_by = |selected: usize, rows: usize, delta: isize| {
            selected
                .saturating_add_signed(delta)
                .min(rows.saturating_sub(1))
        };
        match self.view {
            View::Shards => {
                let rows = self.snapshot_shards();
                self.shard_selected = move_by(self.shard_selected, rows, delta);
            }
            View::Topics => {
                let rows = self.visible_topics().len();
                self.topic_selected = move_by(self.topic_selected, rows, delta);
            }
            View::Events => {
                // Up scrolls towards older events: away from the bottom.
                let rows = self
                    .snapshot
                    .as_ref()
                    .map_or(0, |snapshot| snapshot.events.len());
                self.event_scroll = move_by(self.event_scroll, rows, delta.saturating_neg());
            }
        }
    }

    fn snapshot_shards(&self) -> usize {
        self.snapshot
            .as_ref()
            .map_or(0, |snapshot| snapshot.shards.len())
    }

    fn clamp_selection(&mut self) {
        self.shard_selected = self
            .shard_selected
            .min(self.snapshot_shards().saturating_sub(1));
        let topics = self.visible_topics().len();
        self.topic_selected = self.topic_selected.min(topics.saturating_sub(1));
        let events = self
            .snapshot
            .as_ref()
            .map_or(0, |snapshot| snapshot.events.len());
        self.event_scroll = self.event_scroll.min(events.saturating_sub(1));
    }

    /// Shards in display order: grouped by NUMA node (nodes ascending, an
    /// unknown node last), sorted inside each group by `shard_sort`.
    pub fn shard_rows(&self) -> Vec<&ShardStats> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let mut rows: Vec<&ShardStats> = snapshot.shards.iter().collect();
        let throughput =
            |shard: &ShardStats| shard.messages_in_per_sec + shard.messages_out_per_sec;
        rows.sort_by(|a, b| {
            let node = |shard: &ShardStats| shard.numa_node.unwrap_or(u32::MAX);
            node(a).cmp(&node(b)).then_with(|| match self.shard_sort {
                ShardSort::Id => a.shard.cmp(&b.shard),
                ShardSort::Cpu => b.cpu_percent.total_cmp(&a.cpu_percent),
                ShardSort::Throughput => throughput(b).total_cmp(&throughput(a)),
                ShardSort::Queue => b.queue_depth.cmp(&a.queue_depth),
            })
        });
        rows
    }

    /// The shard under the cursor, in display order.
    pub fn selected_shard(&self) -> Option<&ShardStats> {
        self.shard_rows().get(self.shard_selected).copied()
    }

    /// Topics matching the filter, in `topic_sort` order.
    pub fn visible_topics(&self) -> Vec<&TopicStats> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let needle = self.filter.to_lowercase();
        let mut topics: Vec<&TopicStats> = snapshot
            .topics
            .iter()
            .filter(|topic| {
                needle.is_empty()
                    || format!("{}/{}", topic.stream, topic.topic)
                        .to_lowercase()
                        .contains(&needle)
            })
            .collect();
        topics.sort_by(|a, b| match self.topic_sort {
            TopicSort::Name => (&a.stream, &a.topic).cmp(&(&b.stream, &b.topic)),
            TopicSort::Messages => b.messages.cmp(&a.messages),
            TopicSort::Bytes => b.bytes.cmp(&a.bytes),
            TopicSort::Lag => b.lag_max().cmp(&a.lag_max()),
        });
        topics
    }

    pub fn selected_topic(&self) -> Option<&TopicStats> {
        self.visible_topics().get(self.topic_selected).copied()
    }

    pub fn is_disconnected(&self) -> bool {
        matches!(self.connection, Connection::Disconnected { .. })
    }
}

/// Whether a shard's heartbeat is older than `STALE_HEARTBEAT_MS`.
pub fn is_stale(shard: &ShardStats) -> bool {
    shard.heartbeat_age_ms > STALE_HEARTBEAT_MS
}

pub fn is_hot_cpu(shard: &ShardStats) -> bool {
    shard.cpu_percent >= HOT_CPU_PERCENT
}

pub fn is_hot_queue(shard: &ShardStats) -> bool {
    shard.queue_depth >= HOT_QUEUE_DEPTH
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Payload, decode};

    pub(crate) fn golden() -> Box<Snapshot> {
        let text = include_str!("../../daemon/tests/golden/control_v1_snapshot.json");
        match decode(text.as_bytes()) {
            Ok(Payload::Snapshot { snapshot, .. }) => snapshot,
            other => panic!("golden snapshot: {other:?}"),
        }
    }

    fn key(code: KeyCode) -> Event {
        Event::Key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn chars(app: &mut App, text: &str) {
        for c in text.chars() {
            app.update(key(KeyCode::Char(c)));
        }
    }

    fn app() -> App {
        let mut app = App::new("/tmp/iggyd.sock".into(), Duration::from_secs(1));
        app.update(Event::Snapshot(golden()));
        app
    }

    /// Proves q and Ctrl-C quit, and that q typed into the filter does not.
    #[test]
    fn quit_keys() {
        let mut app = app();
        app.update(key(KeyCode::Char('q')));
        assert!(app.should_quit);
        let mut app = app_with_filter_open();
        app.update(key(KeyCode::Char('q')));
        assert!(!app.should_quit);
        assert_eq!(app.filter_input.as_deref(), Some("q"));
        app.update(Event::Key(KeyEvent::new(
            KeyCode::Char('c'),
            KeyModifiers::CONTROL,
        )));
        assert!(app.should_quit);
    }

    fn app_with_filter_open() -> App {
        let mut app = app();
        app.update(key(KeyCode::Char('/')));
        app
    }

    /// Proves Tab/arrows/hjkl/digits switch views and move the selection,
    /// clamped to the rows there are.
    #[test]
    fn navigation() {
        let mut app = app();
        assert_eq!(app.view, View::Shards);
        app.update(key(KeyCode::Tab));
        assert_eq!(app.view, View::Topics);
        app.update(key(KeyCode::Char('l')));
        assert_eq!(app.view, View::Events);
        app.update(key(KeyCode::Right));
        assert_eq!(app.view, View::Shards);
        app.update(key(KeyCode::Char('h')));
        assert_eq!(app.view, View::Events);
        app.update(key(KeyCode::BackTab));
        assert_eq!(app.view, View::Topics);
        app.update(key(KeyCode::Char('1')));
        assert_eq!(app.view, View::Shards);
        app.update(key(KeyCode::Char('j')));
        app.update(key(KeyCode::Down));
        app.update(key(KeyCode::Down));
        assert_eq!(app.shard_selected, 1, "two shards: clamped");
        app.update(key(KeyCode::Char('k')));
        assert_eq!(app.shard_selected, 0);
        app.update(key(KeyCode::Up));
        assert_eq!(app.shard_selected, 0);
        app.update(key(KeyCode::End));
        assert_eq!(app.selected_shard().map(|shard| shard.shard), Some(1));
        app.update(key(KeyCode::Char('?')));
        assert!(app.help);
        app.update(key(KeyCode::Char('j')));
        assert_eq!(app.shard_selected, 1, "keys go to the help overlay");
        app.update(key(KeyCode::Esc));
        assert!(!app.help);
    }

    /// Proves `s` cycles the sort of the current view and the orders hold:
    /// shards stay grouped by NUMA node; topics sort by name, messages,
    /// bytes and lag.
    #[test]
    fn sorting() {
        let mut app = app();
        let ids = |app: &App| {
            app.shard_rows()
                .iter()
                .map(|shard| shard.shard)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&app), vec![0, 1]);
        app.update(key(KeyCode::Char('s')));
        assert_eq!(app.shard_sort, ShardSort::Cpu);
        // Node 0 comes first whatever the sort: shard 0 (node 0) leads.
        assert_eq!(ids(&app), vec![0, 1]);
        app.update(key(KeyCode::Char('2')));
        let names = |app: &App| {
            app.visible_topics()
                .iter()
                .map(|topic| format!("{}/{}", topic.stream, topic.topic))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&app), vec!["audit/events", "orders/created"]);
        app.update(key(KeyCode::Char('s')));
        assert_eq!(app.topic_sort, TopicSort::Messages);
        assert_eq!(names(&app), vec!["orders/created", "audit/events"]);
        app.update(key(KeyCode::Char('s')));
        app.update(key(KeyCode::Char('s')));
        assert_eq!(app.topic_sort, TopicSort::Lag);
        assert_eq!(names(&app)[0], "orders/created");
        app.update(key(KeyCode::Char('s')));
        assert_eq!(app.topic_sort, TopicSort::Name);
    }

    /// Proves the filter: `/` opens it, typing edits, Enter applies
    /// (case-insensitive substring of stream/topic), Esc clears.
    #[test]
    fn filtering() {
        let mut app = app_with_filter_open();
        assert_eq!(app.view, View::Topics);
        chars(&mut app, "ORDX");
        app.update(key(KeyCode::Backspace));
        assert_eq!(app.filter_input.as_deref(), Some("ORD"));
        assert_eq!(app.visible_topics().len(), 2, "not applied while typing");
        app.update(key(KeyCode::Enter));
        assert_eq!(app.filter, "ORD");
        assert!(app.filter_input.is_none());
        assert_eq!(app.visible_topics().len(), 1);
        assert_eq!(
            app.selected_topic().map(|topic| topic.topic.as_str()),
            Some("created")
        );
        app.update(key(KeyCode::Char('/')));
        assert_eq!(
            app.filter_input.as_deref(),
            Some("ORD"),
            "editing starts from the filter"
        );
        app.update(key(KeyCode::Esc));
        assert!(app.filter.is_empty());
        assert_eq!(app.visible_topics().len(), 2);
        chars(&mut app, "/nomatch\n");
        app.update(key(KeyCode::Enter));
        assert_eq!(app.visible_topics().len(), 0);
        assert_eq!(app.topic_selected, 0);
    }

    /// Proves pause freezes the display and history, keeps the newest
    /// snapshot aside, and shows it on resume.
    #[test]
    fn pause_holds_snapshots() {
        let mut app = app();
        assert_eq!(app.history.total.len(), 1);
        app.update(key(KeyCode::Char('p')));
        assert!(app.paused);
        let mut newer = golden();
        newer.taken_at_ms += 1000;
        assert!(!app.needs_redraw(&Event::Snapshot(newer.clone())));
        app.update(Event::Snapshot(newer.clone()));
        assert_eq!(
            app.snapshot.as_ref().map(|s| s.taken_at_ms),
            Some(golden().taken_at_ms)
        );
        assert_eq!(app.history.total.len(), 1);
        app.update(key(KeyCode::Char('p')));
        assert!(!app.paused);
        assert_eq!(
            app.snapshot.as_ref().map(|s| s.taken_at_ms),
            Some(newer.taken_at_ms)
        );
        assert_eq!(app.history.total.len(), 2);
    }

    /// Proves the history is bounded and follows the plan's shards.
    #[test]
    fn history_is_bounded() {
        let mut app = app();
        for _ in 0..HISTORY_SAMPLES + 10 {
            app.update(Event::Snapshot(golden()));
        }
        assert_eq!(app.history.total.len(), HISTORY_SAMPLES);
        assert_eq!(app.history.shards[&0].len(), HISTORY_SAMPLES);
        assert_eq!(app.history.shards[&0].back(), Some(&45_001));
        let mut fewer = golden();
        fewer.shards.truncate(1);
        app.update(Event::Snapshot(fewer));
        assert!(!app.history.shards.contains_key(&1));
    }

    /// Proves connection state transitions and the redraw policy.
    #[test]
    fn connection_states() {
        let mut app = App::new("/x".into(), Duration::from_secs(1));
        assert_eq!(app.connection, Connection::Connecting);
        assert!(!app.needs_redraw(&Event::Tick));
        app.update(Event::Disconnected {
            reason: "refused".into(),
            retry_in: Duration::from_millis(400),
        });
        assert!(app.is_disconnected());
        assert!(app.needs_redraw(&Event::Tick));
        app.update(Event::Connected(Hello {
            version: "0.1.0".into(),
            pid: 1,
            uptime_ms: 2,
        }));
        assert!(!app.is_disconnected());
        assert!(app.shard_rows().is_empty());
    }

    #[test]
    fn hot_and_stale_thresholds() {
        let snapshot = golden();
        assert!(!is_stale(&snapshot.shards[0]));
        assert!(is_stale(&snapshot.shards[1]));
        assert!(is_hot_cpu(&snapshot.shards[1]));
        assert!(is_hot_queue(&snapshot.shards[1]));
        assert!(!is_hot_queue(&snapshot.shards[0]));
    }
}
