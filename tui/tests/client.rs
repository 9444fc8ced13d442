//! The socket client against a scripted daemon: a test thread listens on a
//! Unix socket in a temporary directory and plays canned lines (hello,
//! snapshots, errors), then closes, so reconnects, backoff, error lines and
//! `--once --json` are checked without a real daemon.

use iggy_top::client::{self, BACKOFF_INITIAL, ClientConfig};
use iggy_top::event::Event;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const GOLDEN: &str = include_str!("../../daemon/tests/golden/control_v1_snapshot.json");
const HELLO: &str =
    r#"{"v":1,"ok":true,"type":"hello","version":"0.1.0","pid":4242,"uptime_ms":5}"#;

/// The golden snapshot response as one line.
fn snapshot_line() -> String {
    let value: serde_json::Value = serde_json::from_str(GOLDEN).unwrap();
    value.to_string()
}

/// One scripted connection: read a request line, check it, answer.
fn expect_request(stream: &UnixStream, op: &str) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let request: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(request["v"], 1);
    assert_eq!(request["op"], op);
    request
}

fn send(mut stream: &UnixStream, line: &str) {
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
}

fn next(events: &mpsc::Receiver<Event>) -> Event {
    events
        .recv_timeout(Duration::from_secs(10))
        .expect("an event within 10 s")
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("iggyd.sock")
}

/// Proves the whole client cycle: hello, subscribe with the configured
/// interval, snapshots become events; when the daemon closes, a
/// Disconnected event with the initial backoff follows, the client
/// reconnects by itself and the subscription resumes.
#[test]
fn subscribes_then_reconnects_after_the_daemon_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    let listener = UnixListener::bind(&path).unwrap();
    let script = std::thread::spawn(move || {
        // First connection: hello, subscribe, two snapshots, close.
        let (stream, _) = listener.accept().unwrap();
        expect_request(&stream, "hello");
        send(&stream, HELLO);
        let subscribe = expect_request(&stream, "subscribe");
        assert_eq!(subscribe["interval_ms"], 250);
        send(&stream, &snapshot_line());
        send(&stream, &snapshot_line());
        drop(stream);
        // The reconnect: hello, subscribe, one snapshot, then stay open
        // until the test is done.
        let (stream, _) = listener.accept().unwrap();
        expect_request(&stream, "hello");
        send(&stream, HELLO);
        expect_request(&stream, "subscribe");
        send(&stream, &snapshot_line());
        stream
    });
    let (sender, events) = mpsc::channel();
    client::spawn(
        ClientConfig {
            socket: path,
            interval: Duration::from_millis(250),
        },
        sender,
    )
    .unwrap();
    assert!(matches!(next(&events), Event::Connected(hello) if hello.pid == 4242));
    assert!(matches!(next(&events), Event::Snapshot(snapshot) if snapshot.shards.len() == 2));
    assert!(matches!(next(&events), Event::Snapshot(_)));
    match next(&events) {
        Event::Disconnected { reason, retry_in } => {
            assert!(reason.contains("closed the connection"), "{reason}");
            assert_eq!(retry_in, BACKOFF_INITIAL);
        }
        other => panic!("expected Disconnected, got {other:?}"),
    }
    assert!(matches!(next(&events), Event::Connected(_)));
    assert!(matches!(next(&events), Event::Snapshot(_)));
    drop(script.join().unwrap());
}

/// Proves a refused connection is reported with the daemon's own message
/// (an error line such as the permission check's).
#[test]
fn error_lines_become_the_disconnect_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        send(
            &stream,
            r#"{"v":1,"ok":false,"error":"permission denied: uid 65534 is not root, the daemon's user or in its group"}"#,
        );
        // Keep the listener alive so retries connect (and are not answered).
        std::thread::sleep(Duration::from_secs(5));
        drop(listener);
    });
    let (sender, events) = mpsc::channel();
    client::spawn(
        ClientConfig {
            socket: path,
            interval: Duration::from_secs(1),
        },
        sender,
    )
    .unwrap();
    match next(&events) {
        Event::Disconnected { reason, .. } => {
            assert!(reason.contains("permission denied: uid 65534"), "{reason}")
        }
        other => panic!("expected Disconnected, got {other:?}"),
    }
}

/// Proves the backoff with no daemon at all: the reason names the socket,
/// and the delays double from 200 ms.
#[test]
fn backoff_doubles_without_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    let (sender, events) = mpsc::channel();
    client::spawn(
        ClientConfig {
            socket: path.clone(),
            interval: Duration::from_secs(1),
        },
        sender,
    )
    .unwrap();
    let mut delays = Vec::new();
    for _ in 0..3 {
        match next(&events) {
            Event::Disconnected { reason, retry_in } => {
                assert!(reason.contains(&path.display().to_string()), "{reason}");
                delays.push(retry_in.as_millis());
            }
            other => panic!("expected Disconnected, got {other:?}"),
        }
    }
    assert_eq!(delays, vec![200, 400, 800]);
}

/// Proves `--once --json` prints the daemon's snapshot line unchanged and
/// exits 0, and exits non-zero with a clear message when nobody answers.
#[test]
fn once_json_prints_one_line_or_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    let missing = Command::new(env!("CARGO_BIN_EXE_iggy-top"))
        .args(["--once", "--json", "--socket"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("no iggyd answers"), "{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(missing.stdout.is_empty());

    let listener = UnixListener::bind(&path).unwrap();
    let script = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        expect_request(&stream, "snapshot");
        send(&stream, &snapshot_line());
    });
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_iggy-top"))
        .args(["--once", "--json", "--socket"])
        .arg(&path)
        .output()
        .unwrap();
    script.join().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout, format!("{}\n", snapshot_line()));
    assert!(started.elapsed() < Duration::from_secs(5));

    let bad = Command::new(env!("CARGO_BIN_EXE_iggy-top"))
        .args(["--once", "--socket", "x"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "--once needs --json");
    let bad = Command::new(env!("CARGO_BIN_EXE_iggy-top"))
        .args(["--interval", "10ms"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("100ms to 60s"));
}
