//! Unit tests of `App::update`: navigation, the drill-down, filters,
//! sorting, pause with history, prompts and confirmations, groups and
//! events, and the connection states.

use super::*;
use crate::api::{Payload, decode};

pub(crate) fn golden() -> Box<Snapshot> {
    let text = include_str!("../../../daemon/tests/golden/control_v1_snapshot.json");
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
    let mut app = App::new("/x".into(), Duration::from_secs(1));
    app.update(Event::Snapshot(golden()));
    app
}

/// Proves digits, Tab and arrows switch among the seven views, `w` cycles
/// the graph window both ways, and `?` takes the keys until closed.
#[test]
fn views_windows_and_help() {
    let mut app = app();
    assert_eq!(app.view, View::Overview);
    for (digit, view) in ('1'..='7').zip(View::ALL) {
        app.update(key(KeyCode::Char(digit)));
        assert_eq!(app.view, view);
    }
    app.update(key(KeyCode::Tab));
    assert_eq!(app.view, View::Overview);
    app.update(key(KeyCode::BackTab));
    assert_eq!(app.view, View::Cluster);
    app.update(key(KeyCode::Char('6')));
    assert_eq!(app.window, Window::M5);
    app.update(key(KeyCode::Char('w')));
    assert_eq!(app.window, Window::M15);
    app.update(key(KeyCode::Char('W')));
    app.update(key(KeyCode::Char('W')));
    assert_eq!(app.window, Window::M1);
    app.update(key(KeyCode::Char('?')));
    app.update(key(KeyCode::Char('1')));
    assert_eq!(app.view, View::Events, "keys go to the help overlay");
    app.update(key(KeyCode::Esc));
    assert!(!app.help);
    app.update(Event::Key(KeyEvent::new(
        KeyCode::Char('c'),
        KeyModifiers::CONTROL,
    )));
    assert!(app.should_quit);
}

/// Proves the drill-down: Enter goes stream → topic → partition →
/// segments (no deeper), the path names each level, Esc goes back one
/// level at a time, and selections are clamped to the rows there are.
#[test]
fn drill_down_reaches_a_segment_and_back() {
    let mut app = app();
    app.update(key(KeyCode::Char('3')));
    assert_eq!(
        app.stream_rows()
            .iter()
            .map(|row| row.name.as_str())
            .collect::<Vec<_>>(),
        vec!["audit", "orders"]
    );
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Down));
    assert_eq!(app.level_selected(), 1, "clamped to two streams");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.level(), Level::Topics { stream_id: 1 });
    app.update(key(KeyCode::Enter));
    assert_eq!(
        app.level(),
        Level::Partitions {
            stream_id: 1,
            topic_id: 1
        }
    );
    app.update(key(KeyCode::End));
    app.update(key(KeyCode::Enter));
    assert_eq!(
        app.level(),
        Level::Segments {
            stream_id: 1,
            topic_id: 1,
            partition_id: 2
        }
    );
    assert_eq!(app.path_text(), "streams › orders › created › partition 2");
    let segments = app.segment_rows(1, 1, 2);
    assert_eq!(segments.len(), 3);
    assert!(!segments[0].sealed, "the active segment comes first");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.path.len(), 4, "segments are the deepest level");
    app.update(key(KeyCode::Esc));
    app.update(key(KeyCode::Esc));
    assert_eq!(app.level(), Level::Topics { stream_id: 1 });
    app.update(key(KeyCode::Esc));
    app.update(key(KeyCode::Esc));
    assert_eq!(app.level(), Level::Streams);
}

/// Proves `/` filters the current view only, Esc clears the filter before
/// it goes back, and a filter that matches nothing leaves no selection
/// out of range.
#[test]
fn filters_belong_to_their_view() {
    let mut app = app();
    app.update(key(KeyCode::Char('5')));
    app.update(key(KeyCode::Char('/')));
    chars(&mut app, "billing");
    assert_eq!(app.client_rows().len(), 3, "not applied while typing");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.filter(), "billing");
    assert_eq!(app.client_rows().len(), 1);
    assert_eq!(app.client_rows()[0].address, "10.0.0.6:40112");
    app.update(key(KeyCode::Char('3')));
    assert_eq!(app.filter(), "", "other views keep their own filter");
    assert_eq!(app.stream_rows().len(), 2);
    app.update(key(KeyCode::Char('5')));
    app.update(key(KeyCode::Esc));
    assert_eq!(app.client_rows().len(), 3);
    app.update(key(KeyCode::Char('/')));
    chars(&mut app, "nomatch");
    app.update(key(KeyCode::Enter));
    assert!(app.client_rows().is_empty());
    assert_eq!(app.client_selected, 0);
}

/// Proves clients sort by bytes in (the default), then out, requests,
/// idle and address; shards stay grouped by NUMA node whatever the sort.
#[test]
fn sorting() {
    let mut app = app();
    app.update(key(KeyCode::Char('5')));
    let first = |app: &App| app.client_rows()[0].client_id;
    assert_eq!(first(&app), 1);
    app.update(key(KeyCode::Char('s')));
    assert_eq!((app.client_sort, first(&app)), (ClientSort::BytesOut, 2));
    app.update(key(KeyCode::Char('s')));
    app.update(key(KeyCode::Char('s')));
    assert_eq!((app.client_sort, first(&app)), (ClientSort::Idle, 3));
    app.update(key(KeyCode::Char('2')));
    app.update(key(KeyCode::Char('s')));
    assert_eq!(app.shard_sort, ShardSort::Cpu);
    let ids: Vec<u32> = app.shard_rows().iter().map(|shard| shard.shard).collect();
    assert_eq!(ids, vec![0, 1], "node 0 first whatever the sort");
}

/// Proves actions wait for a confirmation: `d` on a client and `L` with a
/// level each put a question on the confirmation line; `y` hands the
/// action to the event loop once, anything else cancels; the answer shows.
#[test]
fn actions_need_a_yes() {
    let mut app = app();
    app.update(key(KeyCode::Char('5')));
    app.update(key(KeyCode::Char('d')));
    assert_eq!(
        app.confirm,
        Some(Action::DisconnectClient {
            client_id: 1,
            address: "10.0.0.5:51234".into()
        })
    );
    app.update(key(KeyCode::Char('n')));
    assert!(app.confirm.is_none());
    assert!(app.take_action().is_none());
    app.update(key(KeyCode::Char('L')));
    chars(&mut app, "debug");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.confirm, Some(Action::SetLogLevel("debug".into())));
    app.update(key(KeyCode::Char('y')));
    assert_eq!(app.take_action(), Some(Action::SetLogLevel("debug".into())));
    assert!(app.take_action().is_none());
    app.update(Event::ActionDone(Err("no log handle".into())));
    assert_eq!(app.status, Some((false, "no log handle".into())));
}

/// Proves the snapshot action: `S` opens a path prompt; a relative path is
/// refused on the status line without asking the daemon; an absolute one
/// puts the question on the confirmation line and `y` hands it over once;
/// the daemon's answer shows; the next `S` offers the last path again, Esc
/// leaves the view's filter alone, and the prompt takes a long path up to
/// its cap.
#[test]
fn snapshot_zip_needs_an_absolute_path_and_a_yes() {
    let mut app = app();
    app.update(key(KeyCode::Char('3')));
    app.filters[View::Streams.index()] = "orders".into();
    app.update(key(KeyCode::Char('S')));
    assert_eq!(
        app.input,
        Some(Input {
            kind: InputKind::SnapshotPath,
            text: String::new()
        })
    );
    chars(&mut app, "snap.zip");
    app.update(key(KeyCode::Enter));
    assert!(app.confirm.is_none() && app.input.is_none());
    assert!(app.take_action().is_none());
    let (ok, message) = app.status.clone().expect("a status line");
    assert!(
        !ok && message.contains("\"snap.zip\" is relative"),
        "{message}"
    );
    app.update(key(KeyCode::Char('S')));
    assert_eq!(
        app.input.as_ref().map(|input| input.text.as_str()),
        Some("snap.zip")
    );
    for _ in 0.."snap.zip".len() {
        app.update(key(KeyCode::Backspace));
    }
    chars(&mut app, "/var/log/iggyd/snap.zip");
    app.update(key(KeyCode::Enter));
    let asked = Action::SnapshotFile {
        path: "/var/log/iggyd/snap.zip".into(),
    };
    assert_eq!(app.confirm, Some(asked.clone()));
    app.update(key(KeyCode::Char('y')));
    assert_eq!(app.take_action(), Some(asked.clone()));
    assert!(app.take_action().is_none());
    assert_eq!(
        app.status,
        Some((true, format!("sent: {}", asked.describe())))
    );
    let done = "wrote a snapshot ZIP of 5120 bytes to /var/log/iggyd/snap.zip";
    app.update(Event::ActionDone(Ok(done.into())));
    assert_eq!(app.status, Some((true, done.into())));
    app.update(key(KeyCode::Char('S')));
    assert_eq!(
        app.input.as_ref().map(|input| input.text.as_str()),
        Some("/var/log/iggyd/snap.zip")
    );
    app.update(key(KeyCode::Esc));
    assert!(app.input.is_none() && app.confirm.is_none());
    assert_eq!(app.filter(), "orders", "Esc on the path leaves the filter");
    app.update(key(KeyCode::Char('S')));
    chars(&mut app, &"d/".repeat(PATH_CHARS_MAX));
    let typed = app
        .input
        .as_ref()
        .map_or(0, |input| input.text.chars().count());
    assert_eq!(typed, PATH_CHARS_MAX);
    app.update(key(KeyCode::Char('L')));
    let level = app
        .input
        .as_ref()
        .map_or(0, |input| input.text.chars().count());
    assert_eq!(level, PATH_CHARS_MAX, "a prompt that is full takes no more");
}

/// Proves pause freezes the snapshot and the history, keeps what arrives,
/// and applies it on resume; the history merges into one window.
#[test]
fn pause_holds_snapshots_and_history() {
    use crate::api::{History, HistoryWindow, Series};
    let window = |at: u64, value: f32| HistoryWindow {
        second: History {
            step_ms: 1000,
            at_ms: vec![at],
            series: vec![Series {
                name: "x".into(),
                values: vec![value],
            }],
        },
        ten_second: History::default(),
    };
    let mut app = app();
    app.update(Event::History(Box::new(window(1000, 1.0))));
    app.update(key(KeyCode::Char('p')));
    let mut newer = golden();
    newer.taken_at_ms += 1000;
    assert!(!app.needs_redraw(&Event::Snapshot(newer.clone())));
    app.update(Event::Snapshot(newer.clone()));
    app.update(Event::History(Box::new(window(2000, 2.0))));
    app.update(Event::History(Box::new(window(3000, 3.0))));
    assert_eq!(app.history.second.at_ms, vec![1000]);
    assert_eq!(
        app.snapshot.as_ref().map(|s| s.taken_at_ms),
        Some(golden().taken_at_ms)
    );
    app.update(key(KeyCode::Char('p')));
    assert_eq!(
        app.snapshot.as_ref().map(|s| s.taken_at_ms),
        Some(newer.taken_at_ms)
    );
    assert_eq!(app.history.second.series("x"), Some(&[1.0, 2.0, 3.0][..]));
}

/// Proves the Groups view opens a group and lists its partitions with lag,
/// and the Events level filter narrows the list.
#[test]
fn groups_and_events() {
    let mut app = app();
    app.update(key(KeyCode::Char('4')));
    assert_eq!(app.group_rows().len(), 1);
    app.update(key(KeyCode::Enter));
    assert_eq!(app.group_open, Some((1, 1, 1)));
    let lags: Vec<u64> = app.group_partition_rows().iter().map(|p| p.lag).collect();
    assert_eq!(lags, vec![500, 1000]);
    app.update(key(KeyCode::Esc));
    assert!(app.group_open.is_none());
    app.update(key(KeyCode::Char('6')));
    assert_eq!(app.event_rows().len(), 2);
    app.update(key(KeyCode::Char('e')));
    app.update(key(KeyCode::Char('e')));
    assert_eq!(app.event_filter, EventFilter::Error);
    assert_eq!(app.event_rows().len(), 1);
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
    // Proves the thresholds against the golden shards.
    let snapshot = golden();
    assert!(!is_stale(&snapshot.shards[0]));
    assert!(is_stale(&snapshot.shards[1]));
    assert!(is_hot_cpu(&snapshot.shards[1]));
    assert!(is_hot_queue(&snapshot.shards[1]));
    assert!(!is_hot_queue(&snapshot.shards[0]));
}

fn cluster_status() -> Box<crate::api::cluster::ClusterStatus> {
    let text = include_str!("../../tests/fixtures/cluster_status.json");
    match decode(text.as_bytes()) {
        Ok(Payload::ClusterStatus { status }) => status,
        other => panic!("cluster status fixture: {other:?}"),
    }
}

/// Proves `cluster_status` is asked only while the Cluster view is shown
/// and not paused, once when the view opens and then once per snapshot
/// (the refresh interval), never twice at a time.
#[test]
fn cluster_status_is_asked_only_while_its_view_is_shown() {
    let mut app = app();
    assert!(!app.take_cluster_request(), "not on the overview");
    app.update(Event::Snapshot(golden()));
    assert!(!app.take_cluster_request(), "not on the overview");
    app.update(key(KeyCode::Char('7')));
    assert!(app.take_cluster_request(), "asked when the view opens");
    assert!(!app.take_cluster_request(), "one request at a time");
    app.update(Event::Snapshot(golden()));
    assert!(!app.take_cluster_request(), "still in flight");
    app.update(Event::Cluster(Ok(cluster_status())));
    assert!(
        app.take_cluster_request(),
        "a snapshot arrived since: due again"
    );
    app.update(Event::Cluster(Ok(cluster_status())));
    assert!(!app.take_cluster_request(), "not before the next snapshot");
    app.update(Event::Snapshot(golden()));
    assert!(app.take_cluster_request());
    app.update(Event::Cluster(Ok(cluster_status())));
    app.update(key(KeyCode::Char('p')));
    app.update(Event::Snapshot(golden()));
    assert!(!app.take_cluster_request(), "not while paused");
    app.update(key(KeyCode::Char('p')));
    app.update(key(KeyCode::Char('1')));
    app.update(Event::Snapshot(golden()));
    assert!(!app.take_cluster_request(), "not once the view is left");
}

/// Proves the daemon's refusal on a single node becomes "not a member",
/// any other failure is shown as one, and a member's groups are listed
/// laggiest first (the largest follower lag; unknown lag counts as none),
/// then in the daemon's order, filtered by name.
#[test]
fn cluster_answers_and_group_order() {
    let mut app = app();
    app.update(key(KeyCode::Char('7')));
    app.update(Event::Cluster(Err(format!(
        "the daemon answered: {}",
        crate::api::cluster::NO_CLUSTER
    ))));
    assert_eq!(app.cluster, ClusterPane::NotMember);
    assert!(app.cluster_group_rows().is_empty());
    app.update(Event::Cluster(Err("cannot connect".into())));
    assert_eq!(app.cluster, ClusterPane::Failed("cannot connect".into()));
    app.update(Event::Cluster(Ok(cluster_status())));
    let names: Vec<&str> = app
        .cluster_group_rows()
        .iter()
        .map(|group| group.group.as_str())
        .collect();
    assert_eq!(names, ["1/1/1", "metadata", "1/1/0", "1/1/2"]);
    app.update(key(KeyCode::Char('G')));
    assert_eq!(app.cluster_selected, 3);
    chars(&mut app, "/1/1/");
    app.update(key(KeyCode::Enter));
    let names: Vec<&str> = app
        .cluster_group_rows()
        .iter()
        .map(|group| group.group.as_str())
        .collect();
    assert_eq!(names, ["1/1/1", "1/1/0", "1/1/2"]);
    assert_eq!(app.cluster_selected, 0, "a new filter starts at the top");
}
