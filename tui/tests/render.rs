//! Renders every view, the help overlay and the disconnected states with
//! ratatui's `TestBackend` at 80×24 and 160×48, and checks the buffer: the
//! expected text on the expected rows, columns that appear or drop with the
//! width, and the colour of hot and stale cells.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use iggy_top::api::{Payload, Snapshot, decode};
use iggy_top::app::App;
use iggy_top::event::Event;
use iggy_top::ui;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use std::time::Duration;

const GOLDEN: &str = include_str!("../../daemon/tests/golden/control_v1_snapshot.json");

fn golden() -> Box<Snapshot> {
    match decode(GOLDEN.as_bytes()) {
        Ok(Payload::Snapshot { snapshot }) => snapshot,
        other => panic!("golden snapshot: {other:?}"),
    }
}

fn app() -> App {
    let mut app = App::new("/run/iggyd/iggyd.sock".into(), Duration::from_secs(1));
    app.update(Event::Connected(iggy_top::api::Hello {
        version: "0.1.0".into(),
        pid: 4242,
        uptime_ms: 1,
    }));
    app.update(Event::Snapshot(golden()));
    app
}

fn key(app: &mut App, code: KeyCode) {
    app.update(Event::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn draw(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| ui::render(frame, app)).unwrap();
    terminal.backend().buffer().clone()
}

fn row(buffer: &Buffer, y: u16) -> String {
    (0..buffer.area.width)
        .map(|x| buffer[(x, y)].symbol())
        .collect()
}

fn rows(buffer: &Buffer) -> Vec<String> {
    (0..buffer.area.height).map(|y| row(buffer, y)).collect()
}

/// The row and column where `needle` first appears.
fn find(buffer: &Buffer, needle: &str) -> Option<(u16, u16)> {
    rows(buffer).iter().enumerate().find_map(|(y, text)| {
        text.find(needle).map(|byte| {
            let x = text[..byte].chars().count();
            (x as u16, y as u16)
        })
    })
}

fn assert_has(buffer: &Buffer, needle: &str) -> (u16, u16) {
    find(buffer, needle)
        .unwrap_or_else(|| panic!("{needle:?} not on screen:\n{}", rows(buffer).join("\n")))
}

/// The column of `needle` in row `y`.
fn find_in_row(buffer: &Buffer, y: u16, needle: &str) -> u16 {
    let text = row(buffer, y);
    let byte = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in row {y}: {text}"));
    text[..byte].chars().count() as u16
}

const SIZES: [(u16, u16); 2] = [(80, 24), (160, 48)];

/// Proves the header and shards view at both sizes: header facts on the
/// first rows, a NUMA group row per node, one row per shard under it, and
/// hot (CPU, queue) and stale (heartbeat) cells in red.
#[test]
fn shards_view() {
    let app = app();
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        assert_eq!(assert_has(&buffer, "iggyd 0.1.0").1, 0);
        assert!(row(&buffer, 0).contains("up 1h02m"));
        assert!(row(&buffer, 1).contains("shards 2 on cores 2  NUMA nodes 2"));
        assert!(row(&buffer, 1).contains("durability persisted"));
        assert!(row(&buffer, 1).contains("watchdog ok, every 10s"));
        assert!(
            row(&buffer, 2).contains("in  15.3k msg/s 15.6 MB/s"),
            "{}",
            row(&buffer, 2)
        );
        assert!(row(&buffer, 2).contains("out 30.0k msg/s 30.7 MB/s"));
        assert!(
            row(&buffer, 3).contains("clients refused 412  failed logins 37  evicted 13"),
            "{}",
            row(&buffer, 3)
        );
        // Counters that moved stand out.
        let x = find_in_row(&buffer, 3, "412");
        assert_eq!(buffer[(x, 3)].fg, Color::Yellow);
        assert!(row(&buffer, 4).contains("free of 100.0 GiB"));
        assert!(row(&buffer, 5).contains("1 Shards"));
        assert!(row(&buffer, 5).contains("live"));
        let (_, header_y) = assert_has(&buffer, "In msg/s");
        let (_, node0) = assert_has(&buffer, "node 0");
        let (_, node1) = assert_has(&buffer, "node 1");
        assert_eq!(node0, header_y + 1);
        assert_eq!(node1, node0 + 2, "shard 0 sits between the two groups");
        assert!(
            row(&buffer, node0 + 1).contains("▶   0"),
            "{}",
            row(&buffer, node0 + 1)
        );
        assert!(row(&buffer, node1 + 1).contains("  1 "));
        // Stale heartbeat of shard 1: red, marked with "!".
        let (x, y) = assert_has(&buffer, "3.5s!");
        assert_eq!(y, node1 + 1);
        assert_eq!(buffer[(x, y)].fg, Color::Red);
        // Hot CPU of shard 1 in red; shard 0's calm CPU in the default colour.
        let x = find_in_row(&buffer, node1 + 1, "97.0");
        assert_eq!(buffer[(x, node1 + 1)].fg, Color::Red);
        let x = find_in_row(&buffer, node0 + 1, "42.5");
        assert_eq!(buffer[(x, node0 + 1)].fg, Color::Reset);
        let x = find_in_row(&buffer, node1 + 1, "2048");
        assert_eq!(buffer[(x, node1 + 1)].fg, Color::Red);
        // The group rows are summaries in cyan, not alerts.
        let x = find_in_row(&buffer, node1, "97.0");
        assert_eq!(buffer[(x, node1)].fg, Color::Cyan);
        assert_has(&buffer, "Throughput msg/s");
        assert_has(&buffer, "q quit");
    }
    // Wide terminals show every column; 80 columns drop the least useful.
    let wide = draw(&app, 160, 48);
    let narrow = draw(&app, 80, 24);
    for column in ["Driver", "Parts", "Conns", "p50 µs", "Out MB/s"] {
        assert_has(&wide, column);
        assert!(
            find(&narrow, column).is_none(),
            "{column} shown at 80 columns"
        );
    }
    for column in ["CPU%", "In msg/s", "Out msg/s", "Queue", "p99 µs", "HB age"] {
        assert_has(&narrow, column);
    }
    assert_has(&wide, "io_uring");
}

/// Proves deleted data still on the disk shows on the disk line (in red
/// while a removal keeps failing) when the terminal is wide enough, and
/// not at all when the trash is empty.
#[test]
fn pending_removal_on_the_disk_line() {
    let mut app = app();
    let buffer = draw(&app, 160, 48);
    let (x, y) = assert_has(&buffer, "trash 3.0 MiB in 2 pending removal, 1 failing");
    assert_eq!(y, 4, "the disk line, under the clients line");
    assert_eq!(buffer[(x, y)].fg, Color::Red);
    let mut calm = golden();
    calm.taken_at_ms += 1000;
    calm.process.pending_removal.failing = 0;
    app.update(Event::Snapshot(calm.clone()));
    let buffer = draw(&app, 160, 48);
    let (x, y) = assert_has(&buffer, "trash 3.0 MiB in 2 pending removal");
    assert_ne!(buffer[(x, y)].fg, Color::Red);
    assert!(find(&buffer, "failing").is_none());
    let mut empty = calm;
    empty.taken_at_ms += 1000;
    empty.process.pending_removal = Default::default();
    app.update(Event::Snapshot(empty));
    assert!(find(&draw(&app, 160, 48), "trash").is_none());
}

/// Proves sparklines give way when the shards need the rows: 16 shards at
/// 80×24 show the table (scrolled) but no throughput panel.
#[test]
fn sparklines_hide_when_short() {
    let mut app = app();
    let mut many = golden();
    let template = many.shards[0].clone();
    many.shards = (0..16)
        .map(|id| {
            let mut shard = template.clone();
            shard.shard = id;
            shard
        })
        .collect();
    app.update(Event::Snapshot(many));
    let buffer = draw(&app, 80, 24);
    assert!(find(&buffer, "Throughput").is_none());
    assert_has(&buffer, "node 0");
    let tall = draw(&app, 160, 48);
    assert_has(&tall, "Throughput");
    assert_has(&tall, "shard 15");
}

/// Proves the topics view: topics with messages and max lag, the selected
/// topic's partitions and consumer groups, sort and filter in the title,
/// and the filter being typed in the footer.
#[test]
fn topics_view() {
    let mut app = app();
    key(&mut app, KeyCode::Tab);
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        let (_, header_y) = assert_has(&buffer, "Stream");
        let (_, audit) = assert_has(&buffer, "audit");
        let (_, orders) = assert_has(&buffer, "orders");
        assert_eq!(
            (audit, orders),
            (header_y + 1, header_y + 2),
            "sorted by name"
        );
        assert!(row(&buffer, orders).contains("1.5k") || row(&buffer, orders).contains("1500"));
        assert_has(&buffer, "sort: name");
    }
    key(&mut app, KeyCode::Down);
    let buffer = draw(&app, 160, 48);
    let (_, partitions_title) = assert_has(&buffer, "Partitions of orders/created");
    let (_, groups_title) = assert_has(&buffer, "Consumer groups");
    assert_eq!(partitions_title, groups_title, "side by side when wide");
    assert_has(&buffer, "billing");
    assert_has(&buffer, "1799999");
    let narrow = draw(&app, 80, 24);
    assert_has(&narrow, "Partitions of orders/created");

    key(&mut app, KeyCode::Char('s'));
    let buffer = draw(&app, 80, 24);
    assert_has(&buffer, "sort: messages ↓");
    key(&mut app, KeyCode::Char('/'));
    for c in "aud".chars() {
        key(&mut app, KeyCode::Char(c));
    }
    let buffer = draw(&app, 80, 24);
    assert!(
        row(&buffer, 23).contains("filter: aud"),
        "{}",
        row(&buffer, 23)
    );
    key(&mut app, KeyCode::Enter);
    let buffer = draw(&app, 80, 24);
    assert_has(&buffer, "filter: \"aud\"");
    assert!(find(&buffer, "orders").is_none());
    key(&mut app, KeyCode::Char('/'));
    key(&mut app, KeyCode::Char('x'));
    key(&mut app, KeyCode::Enter);
    assert_has(&draw(&app, 80, 24), "No topic matches \"audx\"");
}

/// Proves the events view lists warnings and errors, newest last, with
/// errors in red.
#[test]
fn events_view() {
    let mut app = app();
    key(&mut app, KeyCode::Char('3'));
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        let (_, warn) = assert_has(&buffer, "WARN");
        let (x, error) = assert_has(&buffer, "ERROR");
        assert!(error > warn, "newest last");
        assert_eq!(buffer[(x, error)].fg, Color::Red);
        assert!(row(&buffer, warn).contains("23:59:50"));
        assert!(row(&buffer, error).contains("fsync of orders/created/2"));
    }
    let mut quiet = golden();
    quiet.events.clear();
    app.update(Event::Snapshot(quiet));
    assert_has(&draw(&app, 80, 24), "No recent warnings or errors.");
}

/// Proves the help overlay draws over any view at both sizes.
#[test]
fn help_overlay() {
    let mut app = app();
    key(&mut app, KeyCode::Char('?'));
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        assert_has(&buffer, "iggy-top help");
        assert_has(&buffer, "pause / resume updates");
    }
}

/// Proves the disconnected states: before any snapshot the body says who
/// does not answer and when the next try is; after one, a red banner keeps
/// the last data on screen. Pause shows in the status.
#[test]
fn disconnected_and_paused() {
    let mut app = App::new("/tmp/nowhere.sock".into(), Duration::from_secs(1));
    app.update(Event::Disconnected {
        reason: "cannot connect to /tmp/nowhere.sock: Connection refused".into(),
        retry_in: Duration::from_millis(800),
    });
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        assert_has(&buffer, "No iggyd answers at /tmp/nowhere.sock");
        assert_has(&buffer, "Retrying in 800ms");
        assert!(row(&buffer, 5).contains("disconnected, retry in 800ms"));
        let (x, y) = assert_has(&buffer, "No iggyd answers");
        assert_eq!(buffer[(x, y)].fg, Color::Red);
    }
    let mut app = self::app();
    app.update(Event::Disconnected {
        reason: "the daemon closed the connection".into(),
        retry_in: Duration::from_millis(200),
    });
    for (width, height) in SIZES {
        let buffer = draw(&app, width, height);
        let (x, y) = assert_has(&buffer, "disconnected: the daemon closed the connection");
        assert_eq!(y, 6);
        assert_eq!(buffer[(x, y)].bg, Color::Red);
        assert_has(&buffer, "node 1");
    }
    key(&mut app, KeyCode::Char('p'));
    assert!(row(&draw(&app, 80, 24), 5).contains("PAUSED"));
}

/// Proves tiny terminals do not panic: every view draws into exactly the
/// area it was given, and draws something once there is room for a line.
#[test]
fn tiny_terminals_do_not_panic() {
    let mut app = app();
    for view in ['1', '2', '3', '?'] {
        key(&mut app, KeyCode::Char(view));
        for (width, height) in [(1, 1), (10, 5), (40, 10), (80, 8)] {
            let buffer = draw(&app, width, height);
            assert_eq!((buffer.area.width, buffer.area.height), (width, height));
            if width >= 10 {
                assert!(
                    rows(&buffer).iter().any(|line| !line.trim().is_empty()),
                    "view {view} at {width}x{height} is blank"
                );
            }
        }
    }
}
