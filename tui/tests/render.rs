//! Golden screens: every view rendered with ratatui's `TestBackend` at
//! 80×24, 120×40 and 200×60 from one fixed fixture (the golden v1
//! snapshot plus a deterministic 15-minute / 6-hour history), compared
//! with the text files in `tests/screens/`. After a deliberate change to
//! the screens, regenerate them with
//! `UPDATE_SCREENS=1 cargo nextest run -p iggy-top --test render` and
//! review the diff. A few targeted checks follow (colours, NO_COLOR, tiny
//! terminals).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use iggy_top::api::history::{self, name};
use iggy_top::api::{History, HistoryWindow, Payload, Series, Snapshot, decode};
use iggy_top::app::App;
use iggy_top::event::Event;
use iggy_top::theme::{Depth, Theme};
use iggy_top::ui;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use std::path::PathBuf;
use std::time::Duration;

const GOLDEN: &str = include_str!("../../daemon/tests/golden/control_v1_snapshot.json");
const CLUSTER: &str = include_str!("fixtures/cluster_status.json");
const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 60)];

fn golden() -> Box<Snapshot> {
    match decode(GOLDEN.as_bytes()) {
        Ok(Payload::Snapshot { snapshot, .. }) => snapshot,
        other => panic!("golden snapshot: {other:?}"),
    }
}

/// A deterministic history ending at the snapshot's time: waves and ramps
/// with a different shape per series, so graphs have something to show.
fn fixture_history(snapshot: &Snapshot) -> HistoryWindow {
    let ring = |step_ms: u64, points: usize| {
        let end = snapshot.taken_at_ms;
        let at_ms: Vec<u64> = (0..points as u64)
            .map(|index| end - (points as u64 - 1 - index) * step_ms)
            .collect();
        let wave = |index: usize, period: f32, base: f32, swing: f32| {
            base + swing * ((index as f32) * std::f32::consts::TAU / period).sin()
        };
        let mut series = Vec::new();
        let mut push = |series_name: String, values: Vec<f32>| {
            series.push(Series {
                name: series_name,
                values,
            });
        };
        for shard in &snapshot.shards {
            let scale = if shard.shard == 0 { 1.0 } else { 0.4 };
            let id = shard.shard;
            push(
                name::shard(id, name::MESSAGES_IN),
                (0..points)
                    .map(|i| scale * wave(i, 120.0, 15_000.0, 5_000.0))
                    .collect(),
            );
            push(
                name::shard(id, name::MESSAGES_OUT),
                (0..points)
                    .map(|i| scale * wave(i, 90.0, 30_000.0, 8_000.0))
                    .collect(),
            );
            push(
                name::shard(id, name::BYTES_IN),
                (0..points)
                    .map(|i| scale * wave(i, 120.0, 15.0e6, 5.0e6))
                    .collect(),
            );
            push(
                name::shard(id, name::BYTES_OUT),
                (0..points)
                    .map(|i| scale * wave(i, 90.0, 30.0e6, 8.0e6))
                    .collect(),
            );
            push(
                name::shard(id, name::REQUEST_P50),
                (0..points).map(|i| wave(i, 60.0, 85.0, 20.0)).collect(),
            );
            push(
                name::shard(id, name::REQUEST_P99),
                (0..points).map(|i| wave(i, 45.0, 900.0, 300.0)).collect(),
            );
            push(
                name::shard(id, name::FSYNC_P99),
                (0..points).map(|i| wave(i, 30.0, 1500.0, 400.0)).collect(),
            );
            push(
                name::shard(id, name::QUEUE_WAIT_P99),
                (0..points).map(|i| wave(i, 50.0, 40.0, 10.0)).collect(),
            );
            push(
                name::shard(id, name::BUSY_PERCENT),
                (0..points).map(|_| shard.cpu_percent as f32).collect(),
            );
            push(
                name::shard(id, name::CONNECTIONS),
                vec![shard.connections as f32; points],
            );
        }
        push(
            name::PROCESS_CONNECTIONS.into(),
            (0..points).map(|i| 7.0 + (i % 50) as f32 / 10.0).collect(),
        );
        push(
            name::DISK_USED.into(),
            (0..points)
                .map(|i| 21.0e9 + i as f32 * step_ms as f32 * 1000.0)
                .collect(),
        );
        for topic in &snapshot.topics {
            for group in &topic.consumer_groups {
                push(
                    name::group(topic.stream_id, topic.topic_id, group.group_id),
                    (0..points)
                        .map(|i| wave(i, 200.0, 1500.0, 1000.0))
                        .collect(),
                );
            }
            for partition in &topic.partitions {
                let (s, t, p) = (topic.stream_id, topic.topic_id, partition.partition_id);
                push(
                    name::partition(s, t, p, name::MESSAGES_IN),
                    (0..points)
                        .map(|i| wave(i, 100.0 + p as f32 * 30.0, 7_500.0, 2_500.0))
                        .collect(),
                );
                // Bytes stored grow, so the topic nears its limit.
                push(
                    name::partition(s, t, p, name::BYTES),
                    (0..points)
                        .map(|i| {
                            partition.bytes as f32
                                - (points - 1 - i) as f32 * step_ms as f32 * 1000.0
                        })
                        .collect(),
                );
            }
        }
        History {
            step_ms,
            at_ms,
            series,
        }
    };
    HistoryWindow {
        second: ring(history::SECOND_STEP_MS, history::SECOND_POINTS),
        ten_second: ring(history::TEN_SECOND_STEP_MS, history::TEN_SECOND_POINTS),
    }
}

fn app() -> App {
    let mut app = App::new("/run/iggyd/iggyd.sock".into(), Duration::from_secs(1));
    app.update(Event::Connected(iggy_top::api::Hello {
        version: "0.1.0".into(),
        pid: 4242,
        uptime_ms: 1,
    }));
    let snapshot = golden();
    app.update(Event::History(Box::new(fixture_history(&snapshot))));
    app.update(Event::Snapshot(snapshot));
    match decode(CLUSTER.as_bytes()) {
        Ok(Payload::ClusterStatus { status }) => app.update(Event::Cluster(Ok(status))),
        other => panic!("cluster status fixture: {other:?}"),
    }
    app
}

fn key(app: &mut App, code: KeyCode) {
    app.update(Event::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn keys(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, KeyCode::Char(c));
    }
}

fn draw(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| ui::render(frame, app)).unwrap();
    terminal.backend().buffer().clone()
}

fn rows(buffer: &Buffer) -> Vec<String> {
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

fn text(buffer: &Buffer) -> String {
    let mut text = rows(buffer)
        .iter()
        .map(|row| row.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    text
}

fn find(buffer: &Buffer, needle: &str) -> Option<(u16, u16)> {
    rows(buffer).iter().enumerate().find_map(|(y, row)| {
        row.find(needle)
            .map(|byte| (row[..byte].chars().count() as u16, y as u16))
    })
}

fn assert_has(buffer: &Buffer, needle: &str) -> (u16, u16) {
    find(buffer, needle).unwrap_or_else(|| panic!("{needle:?} not on screen:\n{}", text(buffer)))
}

/// Every screen the golden files pin: (name, keys typed from a fresh app).
const SCREENS: &[(&str, &str)] = &[
    ("overview", ""),
    ("overview_15m", "w"),
    ("shards", "2"),
    ("streams", "3"),
    ("topic_partitions", "3G\n\n"),
    ("segments", "3G\n\nG\n"),
    ("groups", "4"),
    ("group", "4\n"),
    ("clients", "5"),
    ("events", "6"),
    ("cluster", "7"),
    ("help", "?"),
    ("snapshot_prompt", "S/var/log/iggyd/snapshot-2026-01-01.zip"),
    (
        "snapshot_confirm",
        "S/var/log/iggyd/snapshot-2026-01-01.zip\n",
    ),
];

fn screen(keys_typed: &str) -> App {
    let mut app = app();
    for c in keys_typed.chars() {
        match c {
            '\n' => key(&mut app, KeyCode::Enter),
            other => key(&mut app, KeyCode::Char(other)),
        }
    }
    app
}

/// Proves every view at every size matches its golden text exactly (or,
/// with `UPDATE_SCREENS=1`, writes the files to review).
#[test]
fn golden_screens() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/screens");
    let update = std::env::var_os("UPDATE_SCREENS").is_some();
    let mut mismatches = Vec::new();
    for (screen_name, typed) in SCREENS {
        let app = screen(typed);
        for (width, height) in SIZES {
            let actual = text(&draw(&app, width, height));
            let path = dir.join(format!("{screen_name}_{width}x{height}.txt"));
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &actual).unwrap();
                continue;
            }
            let expected = std::fs::read_to_string(&path).unwrap_or_default();
            if expected != actual {
                mismatches.push(format!("{}:\n{actual}", path.display()));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} screens differ (UPDATE_SCREENS=1 regenerates them):\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// Proves the overview uses the screen: at 80×24 it shows the meters and
/// at least two graphs; larger terminals get more graph panels and the
/// busiest partitions; graphs draw braille points from the history.
#[test]
fn overview_grows_with_the_terminal() {
    let app = app();
    let count = |buffer: &Buffer, needle: &str| text(buffer).matches(needle).count();
    let small = draw(&app, 80, 24);
    assert_has(&small, "shard 0");
    assert_has(&small, "throughput msg/s");
    assert_has(&small, "request latency");
    let large = draw(&app, 200, 60);
    assert_has(&large, "Busiest partitions");
    assert_has(&large, "orders/created/1");
    assert_has(&large, "consumer lag");
    assert_has(&large, "connections");
    assert!(find(&small, "Busiest partitions").is_none());
    let braille = |buffer: &Buffer| {
        text(buffer)
            .chars()
            .filter(|c| ('\u{2801}'..='\u{28ff}').contains(c))
            .count()
    };
    assert!(
        braille(&large) > braille(&small) * 2,
        "longer and more graphs"
    );
    assert!(count(&large, " top ") > count(&small, " top "));
    // The disk line: growth over the window and the topic's size limit.
    assert_has(&small, "full in");
    assert_has(&draw(&app, 200, 60), "orders/created at its size limit in");
}

/// Proves stale and hot shards stand out in colour, and NO_COLOR leaves no
/// colour anywhere on screen while keeping the text.
#[test]
fn colours_and_no_color() {
    let mut app = app();
    key(&mut app, KeyCode::Char('2'));
    let buffer = draw(&app, 120, 40);
    let (x, y) = assert_has(&buffer, "3.5s!");
    assert_eq!(buffer[(x, y)].fg, Color::Red);
    app.theme = Theme { depth: Depth::Mono };
    let mono = draw(&app, 120, 40);
    assert_eq!(text(&mono), text(&buffer));
    for y in 0..40 {
        for x in 0..120 {
            let cell = &mono[(x, y)];
            assert_eq!(
                (cell.fg, cell.bg),
                (Color::Reset, Color::Reset),
                "at {x},{y}"
            );
        }
    }
}

/// Proves the disconnected states: before any snapshot the body says who
/// does not answer and the header points at `iggyd doctor`; after one, a
/// banner says "reconnecting" and keeps the last data on screen.
#[test]
fn reconnecting() {
    let mut app = App::new("/tmp/nowhere.sock".into(), Duration::from_secs(1));
    app.update(Event::Disconnected {
        reason: "cannot connect to /tmp/nowhere.sock: Connection refused".into(),
        retry_in: Duration::from_millis(800),
    });
    let buffer = draw(&app, 80, 24);
    assert_has(&buffer, "No iggyd answers at /tmp/nowhere.sock");
    assert_has(&buffer, "reconnecting in 800ms");
    assert_has(&buffer, "`iggyd doctor` checks this host");
    let mut app = self::app();
    app.update(Event::Disconnected {
        reason: "the daemon closed the connection".into(),
        retry_in: Duration::from_millis(200),
    });
    let buffer = draw(&app, 80, 24);
    let (x, y) = assert_has(&buffer, "reconnecting: the daemon closed the connection");
    assert_eq!(buffer[(x, y)].bg, Color::Red);
    assert_has(&buffer, "shard 1");
}

/// Proves the confirmation line and the filter prompt take the footer.
#[test]
fn prompts_and_confirmations() {
    let mut app = app();
    keys(&mut app, "5d");
    let buffer = draw(&app, 80, 24);
    assert!(rows(&buffer)[23].contains("Disconnect client 1 (10.0.0.5:51234)?"));
    keys(&mut app, "n/10.0.0.9");
    let buffer = draw(&app, 80, 24);
    assert!(
        rows(&buffer)[23].contains("filter: 10.0.0.9"),
        "{}",
        rows(&buffer)[23]
    );
}

/// Proves the snapshot path prompt keeps what is being typed in sight: a
/// path longer than the footer shows its end after "…" (the prompt stays,
/// the hint gives way), and Enter turns it into the confirmation line
/// naming the whole path.
#[test]
fn a_long_snapshot_path_shows_its_end() {
    let mut app = app();
    let path = format!("/srv/diagnostics/{}iggyd-snapshot.zip", "deep/".repeat(20));
    key(&mut app, KeyCode::Char('S'));
    keys(&mut app, &path);
    let footer = rows(&draw(&app, 80, 24))[23].clone();
    assert!(
        footer.starts_with("snapshot ZIP path (new, absolute, on the daemon's host): …"),
        "{footer}"
    );
    assert!(footer.contains("/iggyd-snapshot.zip▏"), "{footer}");
    assert!(!footer.contains("Esc cancels"), "{footer}");
    assert_eq!(footer.chars().count(), 80);
    key(&mut app, KeyCode::Enter);
    let footer = rows(&draw(&app, 200, 60))[59].clone();
    assert!(
        footer.contains(&format!(
            "Write a snapshot ZIP (all diagnostics, deflated) to {path}?"
        )),
        "{footer}"
    );
    // Narrow: the question keeps its start and its end, and y/n stays.
    let footer = rows(&draw(&app, 80, 24))[23].clone();
    assert!(footer.starts_with(" Write a snapshot ZIP"), "{footer}");
    assert!(
        footer.contains("…") && footer.contains("iggyd-snapshot.zip? "),
        "{footer}"
    );
    assert!(footer.trim_end().ends_with("y/n"), "{footer}");
}

/// Proves tiny terminals do not panic: every view draws into exactly the
/// area it was given.
#[test]
fn tiny_terminals_do_not_panic() {
    for (_, typed) in SCREENS {
        let app = screen(typed);
        for (width, height) in [(1, 1), (10, 5), (40, 10), (80, 8)] {
            let buffer = draw(&app, width, height);
            assert_eq!((buffer.area.width, buffer.area.height), (width, height));
        }
    }
}

/// Proves the Cluster view on a single node says the daemon is not a
/// cluster member (the daemon's refusal, recognized), with no tables, and
/// that a failed request says why.
#[test]
fn cluster_view_on_a_single_node() {
    let mut app = app();
    key(&mut app, KeyCode::Char('7'));
    app.update(Event::Cluster(Err(format!(
        "the daemon answered: {}",
        iggy_top::api::cluster::NO_CLUSTER
    ))));
    let buffer = draw(&app, 120, 40);
    assert_has(&buffer, "not a cluster member");
    assert!(find(&buffer, "reachable").is_none(), "{}", text(&buffer));
    app.update(Event::Cluster(Err("cannot connect to /x: refused".into())));
    let buffer = draw(&app, 120, 40);
    assert_has(
        &buffer,
        "cluster status failed: cannot connect to /x: refused",
    );
}
