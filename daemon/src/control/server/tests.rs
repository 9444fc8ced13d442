//! Tests of the admin socket server over real Unix sockets in a temporary
//! directory, with a canned `ControlSource` built from the golden snapshot.

use super::*;
use crate::control::api::{Action, Body, Hello, Snapshot};
use std::io::Read;
use std::sync::atomic::AtomicUsize;

const GOLDEN_SNAPSHOT: &str = include_str!("../../../tests/golden/control_v1_snapshot.json");

struct FakeSource {
    snapshot: Snapshot,
    snapshots_taken: AtomicUsize,
    /// History the test records by hand (`record`); the server's history
    /// thread records nothing into a fake.
    history: Mutex<crate::control::history::Rings>,
}

impl FakeSource {
    fn new() -> Arc<FakeSource> {
        FakeSource::with_padding(0)
    }

    /// A source whose snapshots carry `padding` extra bytes (to fill socket
    /// buffers quickly).
    fn with_padding(padding: usize) -> Arc<FakeSource> {
        let response: Response = serde_json::from_str(GOLDEN_SNAPSHOT).unwrap();
        let Body::Payload(Payload::Snapshot { mut snapshot, .. }) = response.body else {
            panic!("golden file is not a snapshot");
        };
        if padding > 0 {
            snapshot.topics[1].topic = "x".repeat(padding);
        }
        Arc::new(FakeSource {
            snapshot: *snapshot,
            snapshots_taken: AtomicUsize::new(0),
            history: Mutex::new(crate::control::history::Rings::new()),
        })
    }

    /// Record one point of the series `load` at `at_ms`.
    fn record(&self, at_ms: u64, load: f32) {
        use crate::control::history::{Aggregate, SeriesKey, Value};
        lock(&self.history).record(
            at_ms,
            &[Value {
                key: SeriesKey::Process("load"),
                aggregate: Aggregate::Last,
                value: load,
            }],
        );
    }
}

impl ControlSource for FakeSource {
    fn hello(&self) -> Hello {
        Hello {
            version: "0.1.0".into(),
            pid: 7,
            uptime_ms: 1000,
        }
    }
    fn snapshot(&self) -> Snapshot {
        self.snapshots_taken.fetch_add(1, Ordering::SeqCst);
        self.snapshot.clone()
    }
    fn history(&self, cursor: Cursor) -> Option<(api::HistoryWindow, Cursor)> {
        Some(lock(&self.history).since(cursor))
    }
    fn action(&self, action: Action) -> Result<String, String> {
        match action {
            Action::Flush => Ok("flushed 0 partitions".into()),
            other => Err(format!("{other:?} refused by the fake")),
        }
    }
}

struct Client {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    fn connect(path: &Path) -> Client {
        let stream = UnixStream::connect(path).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client { stream, reader }
    }

    fn send(&mut self, line: &str) {
        self.stream.write_all(line.as_bytes()).unwrap();
        self.stream.write_all(b"\n").unwrap();
    }

    /// The next response line, or None at end of stream.
    fn line(&mut self) -> Option<serde_json::Value> {
        let mut text = String::new();
        match self.reader.read_line(&mut text) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&text).unwrap()),
            Err(error) => panic!("read failed: {error}"),
        }
    }

    fn ask(&mut self, line: &str) -> serde_json::Value {
        self.send(line);
        self.line().expect("an answer")
    }
}

fn start(dir: &Path) -> (ControlServer, PathBuf) {
    let path = dir.join("run/iggyd.sock");
    let server = ControlServer::start(&path, FakeSource::new()).unwrap();
    (server, path)
}

/// Proves the request/response cycle over a real socket: hello, snapshot, an
/// action, and errors for bad JSON, unknown ops and wrong versions that keep
/// the connection open; blank lines are skipped; the parent directory is
/// created and the socket has mode 0660.
#[test]
fn requests_and_errors_over_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
    let mut client = Client::connect(&path);
    let hello = client.ask(r#"{"v":1,"op":"hello"}"#);
    assert_eq!(hello["ok"], true);
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["pid"], 7);
    client.send("");
    client.send("   ");
    let snapshot = client.ask(r#"{"v":1,"op":"snapshot"}"#);
    assert_eq!(snapshot["type"], "snapshot");
    assert_eq!(snapshot["snapshot"]["shards"].as_array().unwrap().len(), 2);
    let error = client.ask("{oops");
    assert_eq!(error["ok"], false);
    assert_eq!(error["v"], 1);
    assert!(error["error"].as_str().unwrap().contains("not JSON"));
    let error = client.ask(r#"{"v":1,"op":"dance"}"#);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("unknown op \"dance\"")
    );
    let error = client.ask(r#"{"v":9,"op":"hello"}"#);
    assert!(error["error"].as_str().unwrap().contains("version 9"));
    let done = client.ask(r#"{"v":1,"op":"flush"}"#);
    assert_eq!(done["type"], "done");
    assert_eq!(done["message"], "flushed 0 partitions");
    let refused = client.ask(r#"{"v":1,"op":"rotate_logs"}"#);
    assert_eq!(refused["ok"], false);
    // CRLF line endings (telnet-style clients) work too.
    client
        .stream
        .write_all(b"{\"v\":1,\"op\":\"hello\"}\r\n")
        .unwrap();
    assert_eq!(client.line().unwrap()["type"], "hello");
    server.stop();
    assert!(!path.exists(), "stop removes the socket file");
}

/// Proves a socket file left by a crashed run (nobody listening) is
/// replaced, while one that a live server answers on is refused and keeps
/// working; a regular file at the path is never deleted.
#[test]
fn stale_socket_replaced_live_socket_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iggyd.sock");
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a stale socket file is left behind");
    let server = ControlServer::start(&path, FakeSource::new()).expect("stale socket replaced");
    let second = ControlServer::start(&path, FakeSource::new());
    assert!(
        matches!(second, Err(ControlError::LiveSocket { .. })),
        "{second:?}"
    );
    let message = second.unwrap_err().to_string();
    assert!(message.contains("another running process"), "{message}");
    let mut client = Client::connect(&path);
    assert_eq!(client.ask(r#"{"v":1,"op":"hello"}"#)["ok"], true);
    drop(client);
    server.stop();

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let refused = ControlServer::start(&file, FakeSource::new());
    assert!(matches!(refused, Err(ControlError::NotASocket { .. })));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

/// Proves the 64 KiB request cap: a line of exactly the cap is served, one
/// byte more gets an error line and the connection is closed.
#[test]
fn request_lines_are_capped_at_64_kib() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let prefix = r#"{"v":1,"op":"hello","pad":""#;
    let suffix = r#""}"#;
    let pad = api::REQUEST_LINE_BYTES_MAX - prefix.len() - suffix.len();
    let exact = format!("{prefix}{}{suffix}", "p".repeat(pad));
    assert_eq!(exact.len(), api::REQUEST_LINE_BYTES_MAX);
    let mut client = Client::connect(&path);
    assert_eq!(client.ask(&exact)["type"], "hello");

    let mut client = Client::connect(&path);
    let too_long = vec![b'x'; api::REQUEST_LINE_BYTES_MAX + 1];
    // The server may close before reading everything; ignore write errors.
    let _ = client.stream.write_all(&too_long);
    let error = client.line().expect("an error line");
    assert_eq!(error["ok"], false);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("longer than 65536 bytes")
    );
    assert_eq!(client.line(), None, "and the connection is closed");
    server.stop();
}

/// Proves the subscription cadence: a first snapshot at once, then one per
/// interval (100 ms here, the minimum), not faster and not much slower;
/// out-of-range intervals are refused over the socket.
#[test]
fn subscribe_pushes_at_the_requested_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let mut client = Client::connect(&path);
    let error = client.ask(r#"{"v":1,"op":"subscribe","interval_ms":99}"#);
    assert!(error["error"].as_str().unwrap().contains("out of range"));
    let error = client.ask(r#"{"v":1,"op":"subscribe","interval_ms":60001}"#);
    assert!(error["error"].as_str().unwrap().contains("out of range"));

    let started = Instant::now();
    client.send(r#"{"v":1,"op":"subscribe","interval_ms":100}"#);
    let mut arrivals = Vec::new();
    for _ in 0..6 {
        let line = client.line().expect("a snapshot");
        assert_eq!(line["type"], "snapshot");
        arrivals.push(started.elapsed());
    }
    assert!(
        arrivals[0] < Duration::from_millis(250),
        "first at once: {arrivals:?}"
    );
    for pair in arrivals.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(60), "too fast: {arrivals:?}");
    }
    let total = arrivals[5] - arrivals[0];
    assert!(
        total >= Duration::from_millis(450) && total < Duration::from_millis(1500),
        "five intervals of 100 ms took {total:?}"
    );
    // Further requests on a subscription are refused and end it.
    client.send(r#"{"v":1,"op":"hello"}"#);
    let mut refused = false;
    while let Some(line) = client.line() {
        if line["ok"] == false {
            assert!(
                line["error"]
                    .as_str()
                    .unwrap()
                    .contains("no further requests")
            );
            refused = true;
        }
    }
    assert!(refused);
    server.stop();
}

/// The one-second points' times of a snapshot line's history and the
/// values of its `load` series (empty when the line carries no points).
fn history_points(line: &serde_json::Value) -> (Vec<u64>, Vec<f64>) {
    let second = &line["history"]["second"];
    let times = second["at_ms"]
        .as_array()
        .expect("a history window")
        .iter()
        .map(|at| at.as_u64().unwrap())
        .collect();
    let load = second["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|series| series["name"] == "load")
        .map(|series| {
            series["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|value| value.as_f64().unwrap())
                .collect()
        })
        .unwrap_or_default();
    (times, load)
}

/// Proves history in subscriptions over a real socket: the first line of a
/// `"history":true` subscription carries the whole window, each later line
/// only the points recorded since the line before (an empty window when
/// there are none, and no point twice), and a subscription without the
/// flag carries no history at all.
#[test]
fn history_subscription_sends_the_window_then_only_newer_points() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iggyd.sock");
    let source = FakeSource::new();
    for second in 0..3u64 {
        source.record(1_000_000 + second * 1000, second as f32);
    }
    let server = ControlServer::start(&path, source.clone()).unwrap();
    let mut plain = Client::connect(&path);
    plain.send(r#"{"v":1,"op":"subscribe","interval_ms":100}"#);
    let line = plain.line().expect("a snapshot");
    assert_eq!(line["type"], "snapshot");
    assert!(line.get("history").is_none(), "{line}");

    let mut client = Client::connect(&path);
    client.send(r#"{"v":1,"op":"subscribe","interval_ms":100,"history":true}"#);
    let first = client.line().expect("the first line");
    assert_eq!(first["type"], "snapshot");
    assert_eq!(
        history_points(&first),
        (vec![1_000_000, 1_001_000, 1_002_000], vec![0.0, 1.0, 2.0]),
        "the whole window first"
    );
    let idle = client.line().expect("the next line");
    assert_eq!(history_points(&idle), (vec![], vec![]), "nothing new");
    source.record(1_003_000, 3.0);
    source.record(1_004_000, 4.0);
    let (mut times, mut values) = (Vec::new(), Vec::new());
    while times.len() < 2 {
        let line = client.line().expect("a line with the new points");
        let (new_times, new_values) = history_points(&line);
        assert_eq!(new_times.len(), new_values.len(), "{line}");
        times.extend(new_times);
        values.extend(new_values);
    }
    assert_eq!(times, [1_003_000, 1_004_000], "each new point once");
    assert_eq!(values, [3.0, 4.0]);
    let after = client.line().expect("a line after them");
    assert_eq!(history_points(&after), (vec![], vec![]), "not sent again");
    assert_eq!(
        plain.line().expect("still subscribed")["history"],
        serde_json::Value::Null
    );
    server.stop();
}

/// Proves a subscriber that half-closes after its request (`echo | socat`)
/// keeps receiving snapshots.
#[test]
fn subscribe_survives_a_half_close() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let mut client = Client::connect(&path);
    client.send(r#"{"v":1,"op":"subscribe","interval_ms":100}"#);
    client.stream.shutdown(std::net::Shutdown::Write).unwrap();
    for _ in 0..3 {
        assert_eq!(client.line().expect("snapshot")["type"], "snapshot");
    }
    server.stop();
}

/// Proves the client bound: with the maximum number connected, one more is
/// told so and closed; once a slot frees, new clients are served again.
#[test]
fn client_count_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let mut clients: Vec<Client> = (0..limits::ADMIN_CLIENTS_MAX)
        .map(|_| {
            let mut client = Client::connect(&path);
            assert_eq!(client.ask(r#"{"v":1,"op":"hello"}"#)["ok"], true);
            client
        })
        .collect();
    let mut extra = Client::connect(&path);
    let refusal = extra.line().expect("a refusal line");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("too many admin clients")
    );
    assert_eq!(extra.line(), None);
    drop(clients.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Until the freed slot is seen, a new client may still be refused
        // (and its write or read fail): try again.
        let mut client = Client::connect(&path);
        let mut answer = String::new();
        let served = client
            .stream
            .write_all(b"{\"v\":1,\"op\":\"hello\"}\n")
            .is_ok()
            && client.reader.read_line(&mut answer).is_ok()
            && answer.contains("\"type\":\"hello\"");
        if served {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed: {answer:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop();
}

/// Proves a subscriber that stops reading never holds up other clients, and
/// is dropped once a write blocks past the write timeout.
#[test]
fn slow_subscriber_is_dropped_without_blocking_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iggyd.sock");
    let source = FakeSource::with_padding(512 * 1024);
    let server = ControlServer::start(&path, source.clone()).unwrap();
    let mut stuck = Client::connect(&path);
    stuck.send(r#"{"v":1,"op":"subscribe","interval_ms":100}"#);
    // While the subscriber's buffer fills up, others are served promptly.
    for _ in 0..5 {
        let mut other = Client::connect(&path);
        let asked = Instant::now();
        assert_eq!(other.ask(r#"{"v":1,"op":"hello"}"#)["ok"], true);
        assert!(asked.elapsed() < Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Within the write timeout (plus slack) the server gives up on it.
    let deadline = Instant::now() + limits::ADMIN_CLIENT_WRITE_TIMEOUT * 4;
    while server.clients() > 0 {
        assert!(
            Instant::now() < deadline,
            "the slow subscriber was never dropped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(source.snapshots_taken.load(Ordering::SeqCst) >= 1);
    // Reading now drains what was buffered and then ends: it was closed.
    let mut sink = Vec::new();
    stuck
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let drained = stuck.reader.read_to_end(&mut sink);
    assert!(drained.is_ok(), "{drained:?}");
    server.stop();
}

/// Proves `stop` is prompt even with a subscriber waiting on a 60 s
/// interval: the subscriber sees end of stream and the file is removed.
#[test]
fn stop_is_prompt_and_removes_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (server, path) = start(dir.path());
    let mut subscriber = Client::connect(&path);
    subscriber.send(r#"{"v":1,"op":"subscribe","interval_ms":60000}"#);
    assert_eq!(subscriber.line().unwrap()["type"], "snapshot");
    let mut idle = Client::connect(&path);
    assert_eq!(idle.ask(r#"{"v":1,"op":"hello"}"#)["ok"], true);
    let started = Instant::now();
    server.stop();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(subscriber.line(), None);
    assert_eq!(idle.line(), None);
    assert!(!path.exists());
}

/// Proves who may use the socket: root, the daemon's user, its primary
/// group, or a user whose supplementary groups include the daemon's group;
/// everyone else gets the documented message.
#[test]
fn authorization_rules() {
    let daemon = DaemonIdentity { uid: 990, gid: 990 };
    let no_groups = |_, _| Vec::new();
    assert!(authorize(0, 0, daemon, no_groups).is_ok());
    assert!(authorize(990, 100, daemon, no_groups).is_ok());
    assert!(authorize(1000, 990, daemon, no_groups).is_ok());
    assert!(authorize(1000, 1000, daemon, |_, _| vec![1000, 990]).is_ok());
    assert_eq!(
        authorize(65534, 65534, daemon, |_, _| vec![65534]),
        Err("permission denied: uid 65534 is not root, the daemon's user or in its group".into())
    );
    // The group database answers for real users: root is in group 0.
    assert!(groups_of(0, 0).contains(&0));
    assert!(groups_of(4_000_000_000, 1).is_empty());
}
