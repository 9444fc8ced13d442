//! The admin socket of the real daemon: hello and snapshot over
//! `<data_dir>/iggyd.sock`, its mode, replacement of a stale socket after a
//! crash, refusal when another process serves the path, refusal of other
//! users (a client run under `setpriv` as uid 65534), and `iggy-top`
//! itself in a tmux pane against the live daemon (graphs, drill-down, the
//! snapshot action).

use iggyd_testkit::{TestDaemon, iggyd_command, run, skip};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn admin_socket(daemon: &TestDaemon) -> PathBuf {
    daemon.data_dir().join("iggyd.sock")
}

/// Send request lines and read one response line per request.
pub fn ask(path: &Path, requests: &[&str]) -> Vec<serde_json::Value> {
    let stream = UnixStream::connect(path).expect("connect to the admin socket");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = &stream;
    requests
        .iter()
        .map(|request| {
            writeln!(writer, "{request}").unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).expect("a response line");
            serde_json::from_str(&line).expect("the response is JSON")
        })
        .collect()
}

/// Freezes shard `shard`'s loop through the admin socket's fault switch
/// (debug builds): it stops reading its inbox and beating its heartbeat.
pub fn freeze_shard(daemon: &TestDaemon, shard: usize) {
    let request = format!(r#"{{"v":1,"op":"fault","fault":"freeze_shard","shard":{shard}}}"#);
    let answer = ask(&admin_socket(daemon), &[&request]);
    assert_eq!(answer[0]["ok"], true, "{}", answer[0]);
}

/// The planned shards (`iggyd plan --json`) as (shard, pu) pairs.
fn planned_shards() -> Vec<(u64, u64)> {
    let plan = run(iggyd_command().args(["plan", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("plan json");
    plan["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|shard| {
            (
                shard["shard"].as_u64().unwrap(),
                shard["pu"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Proves the socket exists once READY=1 was sent, with mode 0660; hello
/// names this daemon; a snapshot has one entry per planned shard (same
/// PU), each with a fresh heartbeat over a second of subscription; the
/// socket file is removed on a clean stop.
#[test]
fn hello_and_snapshot_show_every_planned_shard() {
    let mut daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    let metadata = std::fs::metadata(&path).expect("admin socket exists at READY=1");
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o660);

    let answers = ask(
        &path,
        &[r#"{"v":1,"op":"hello"}"#, r#"{"v":1,"op":"snapshot"}"#],
    );
    let hello = &answers[0];
    assert_eq!(hello["ok"], true, "{hello}");
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hello["pid"], daemon.pid());
    let snapshot = &answers[1]["snapshot"];
    let planned = planned_shards();
    let shards = snapshot["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), planned.len(), "{snapshot}");
    for (entry, (shard, pu)) in shards.iter().zip(&planned) {
        assert_eq!(entry["shard"], *shard);
        assert_eq!(entry["pu"], *pu);
        assert!(entry["driver"] == "io_uring" || entry["driver"] == "epoll");
    }
    assert_eq!(snapshot["process"]["pid"], daemon.pid());
    assert!(snapshot["process"]["disk_total_bytes"].as_u64().unwrap() > 0);
    assert!(snapshot["process"]["rss_bytes"].as_u64().unwrap() > 0);

    // Over a second of 250 ms snapshots every heartbeat keeps moving.
    let stream = UnixStream::connect(&path).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    writeln!(&stream, r#"{{"v":1,"op":"subscribe","interval_ms":250}}"#).unwrap();
    let mut reader = BufReader::new(&stream);
    let mut last = serde_json::Value::Null;
    for _ in 0..5 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        last = serde_json::from_str(&line).unwrap();
        assert_eq!(last["type"], "snapshot");
    }
    for shard in last["snapshot"]["shards"].as_array().unwrap() {
        let age = shard["heartbeat_age_ms"].as_u64().unwrap();
        assert!(age < 2000, "stale heartbeat: {shard}");
    }
    drop(reader);
    drop(stream);

    let (status, _) = daemon.stop();
    assert!(status.success());
    assert!(!path.exists(), "a clean stop removes the admin socket");
    daemon.assert_clean_log();
}

/// Proves the snapshot counts where sends went: every send accepted by a
/// shard is either for a partition that shard owns or handed to the owner,
/// and one connection sending to partitions on different shards shows both.
#[test]
fn the_snapshot_counts_local_and_forwarded_sends() {
    let daemon = TestDaemon::start();
    let mut client = crate::messages::logged_in(daemon.address, "iggy", "iggy");
    let partitions = 4;
    crate::messages::stream_with_topic(&mut client, "route", "sends", partitions);
    let sends = 12u64;
    for number in 0..sends {
        let payload = number.to_le_bytes();
        crate::messages::send(
            &mut client,
            "route",
            "sends",
            (number % u64::from(partitions)) as u32,
            &[&payload],
        );
    }
    // Shards publish their counters with their heartbeat (every 250 ms at
    // the latest): read snapshots until every send is counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (shards, local, forwarded) = loop {
        let answers = ask(&admin_socket(&daemon), &[r#"{"v":1,"op":"snapshot"}"#]);
        let shards = answers[0]["snapshot"]["shards"]
            .as_array()
            .expect("shards")
            .clone();
        let total = |field: &str| -> u64 {
            shards
                .iter()
                .map(|shard| shard[field].as_u64().unwrap())
                .sum()
        };
        let (local, forwarded) = (total("sends_local_total"), total("sends_forwarded_total"));
        assert!(local + forwarded <= sends, "{shards:?}");
        if local + forwarded == sends || std::time::Instant::now() > deadline {
            break (shards, local, forwarded);
        }
    };
    assert_eq!(local + forwarded, sends, "{shards:?}");
    if shards.len() > 1 {
        assert!(
            local > 0 && forwarded > 0,
            "partitions on every shard: {shards:?}"
        );
    } else {
        assert_eq!(forwarded, 0);
    }
}

/// Proves a daemon killed with SIGKILL leaves a stale socket that the next
/// start on the same directory replaces (and says so).
#[test]
fn a_stale_socket_from_a_killed_daemon_is_replaced() {
    let mut first = TestDaemon::start();
    let path = admin_socket(&first);
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    assert!(path.exists(), "SIGKILL leaves the socket file behind");
    let dir = std::mem::replace(&mut first.dir, tempfile::tempdir().unwrap());
    let mut second = TestDaemon::builder().dir(dir).spawn();
    assert!(second.log().contains("removed a stale admin socket"));
    let hello = &ask(&path, &[r#"{"v":1,"op":"hello"}"#])[0];
    assert_eq!(hello["pid"], second.pid());
    let (status, _) = second.stop();
    assert!(status.success());
}

/// Proves a socket path that another live process serves is not stolen:
/// the daemon exits 78 naming the path, and the other server keeps it.
#[test]
fn a_live_socket_of_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("taken.sock");
    let holder = UnixListener::bind(&path).unwrap();
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("IGGYD_ADMIN__SOCKET", &path));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("served by another running process"),
        "{}",
        output.stderr
    );
    assert!(output.stderr.contains("taken.sock"), "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"));
    assert!(path.exists());
    UnixStream::connect(&path).expect("the other server still has it");
    drop(holder);
}

/// Runs a tiny Python client as `uid`/`gid` (no supplementary groups) with
/// `setpriv`; returns its one line of output, or None when the machine
/// cannot do that (not root, no setpriv, no python3).
fn hello_as(uid: u32, gid: u32, path: &Path) -> Option<String> {
    const CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("CONNECT-ERROR", e.errno)
    sys.exit(0)
s.sendall(b'{"v":1,"op":"hello"}\n')
f = s.makefile()
line = f.readline().strip()
print(line)
if '"ok":false' in line:
    print("EOF" if f.readline() == "" else "MORE")
"#;
    if !nix::unistd::geteuid().is_root() || !Path::new("/usr/bin/python3").exists() {
        return None;
    }
    let output = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "/usr/bin/python3", "-c", CLIENT])
        .arg(path)
        .output()
        .ok()?;
    assert!(output.status.success(), "{output:?}");
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Proves who may use the socket, with a real client of another uid: at
/// mode 0660 the file system keeps uid 65534 out (EACCES); with the mode
/// loosened by hand the peer-credential check still refuses it with the
/// documented line and closes; a client in the daemon's group is served.
#[test]
fn other_users_are_refused() {
    let mut daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    // Let other users reach the socket's directory (temp dirs are 0700).
    for dir in [daemon.dir.path().to_path_buf(), daemon.data_dir()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let daemon_gid = nix::unistd::getegid().as_raw();
    let Some(at_0660) = hello_as(65534, 65534, &path) else {
        return skip("needs root, setpriv and /usr/bin/python3");
    };
    assert_eq!(at_0660.trim(), "CONNECT-ERROR 13", "EACCES from mode 0660");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let refused = hello_as(65534, 65534, &path).unwrap();
    let mut lines = refused.lines();
    let answer: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"v":1,"ok":false,"error":"permission denied: uid 65534 is not root, the daemon's user or in its group"})
    );
    assert_eq!(lines.next(), Some("EOF"), "and disconnected");

    let member = hello_as(65534, daemon_gid, &path).unwrap();
    let answer: serde_json::Value = serde_json::from_str(member.lines().next().unwrap()).unwrap();
    assert_eq!(
        answer["ok"], true,
        "the daemon's group is allowed: {answer}"
    );
    assert!(daemon.log().contains("refused a client"));
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}

/// A tmux server of its own, killed on drop.
struct Tmux {
    server: String,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-L").arg(&self.server);
        command
    }

    fn capture(&self) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-t", "top", "-p"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// The shard id of a row of the shards table ("│▶   0  ..." or "│    1 ...").
fn shard_row(line: &str) -> Option<u64> {
    let cells = line.strip_prefix('│')?.trim_start_matches('▶').trim_start();
    cells.split_whitespace().next()?.parse().ok()
}

/// Proves the console against the live daemon in a real terminal (tmux,
/// 120×40): the header names this daemon, the Shards view has exactly one
/// row per planned shard; under load the Overview's throughput graph moves
/// (its newest value leaves zero and its braille changes between two
/// captures) and the daemon's history op serves the points the console
/// drew; a drill-down streams → topic → partition reaches the partition's
/// active segment; `S`, a path, Enter and `y` have the daemon write a
/// snapshot ZIP there and the status line says so; `q` quits.
#[test]
fn iggy_top_in_tmux_shows_the_header_and_one_row_per_shard() {
    let iggy_top = Path::new(env!("CARGO_BIN_EXE_iggyd")).with_file_name("iggy-top");
    if !iggy_top.exists() {
        return skip(&format!(
            "{} is not built (cargo build --workspace, or nextest, builds it)",
            iggy_top.display()
        ));
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        return skip("tmux is not installed");
    }
    let daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    let tmux = Tmux {
        server: format!("iggyd-e2e-{}", std::process::id()),
    };
    let status = tmux
        .command()
        .args(["new-session", "-d", "-s", "top", "-x", "120", "-y", "40"])
        .arg(format!(
            "{} --socket {} --interval 250ms; sleep 600",
            iggy_top.display(),
            path.display()
        ))
        .status()
        .expect("tmux new-session");
    assert!(status.success());
    let planned = planned_shards();
    let deadline = Instant::now() + Duration::from_secs(15);
    let screen = loop {
        let screen = tmux.capture();
        if screen.contains("live") && screen.contains("shard 0") {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "iggy-top never showed the shards:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    assert!(
        lines[0].contains(&format!("iggyd {}", env!("CARGO_PKG_VERSION"))),
        "{screen}"
    );
    assert!(
        lines[0].contains(&format!("pid {}", daemon.pid())),
        "{screen}"
    );
    assert!(
        lines[0].contains(&format!("shards {}/", planned.len())),
        "{screen}"
    );
    assert!(
        lines[1].contains("msg/s") && lines[1].contains("MB/s"),
        "{screen}"
    );
    let keys = |keys: &[&str]| {
        for key in keys {
            tmux.command()
                .args(["send-keys", "-t", "top", key])
                .status()
                .unwrap();
        }
    };
    keys(&["2"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let shards_view = loop {
        let screen = tmux.capture();
        if screen.contains("In msg/s") {
            break screen;
        }
        assert!(Instant::now() < deadline, "no shards table:\n{screen}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let header = shards_view
        .lines()
        .find(|line| line.contains("In msg/s"))
        .expect("rate column");
    assert!(
        header.contains("Out msg/s") && header.contains("HB age"),
        "{shards_view}"
    );
    let mut rows: Vec<u64> = shards_view.lines().filter_map(shard_row).collect();
    rows.sort_unstable();
    let expected: Vec<u64> = planned.iter().map(|(shard, _)| *shard).collect();
    assert_eq!(rows, expected, "one row per shard:\n{shards_view}");
    keys(&["1"]);

    // Under load the throughput graph moves.
    let address = daemon.address;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut client = crate::messages::logged_in(address, "iggy", "iggy");
            crate::messages::stream_with_topic(&mut client, "top-load", "events", 2);
            let payload = vec![b'x'; 1000];
            let batch: Vec<&[u8]> = (0..100).map(|_| payload.as_slice()).collect();
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                crate::messages::send(&mut client, "top-load", "events", (sent % 2) as u32, &batch);
                sent += 1;
            }
            sent
        })
    };
    // The graph panel's title: "throughput msg/s in 65.4k out 0".
    let graph_in = |screen: &str| -> Option<(f64, String)> {
        let title = screen
            .lines()
            .find(|line| line.contains("throughput msg/s in "))?;
        let rate = title
            .split("throughput msg/s in ")
            .nth(1)?
            .split_whitespace()
            .next()?;
        let (digits, scale) = match rate.strip_suffix('k') {
            Some(digits) => (digits, 1e3),
            None => match rate.strip_suffix('M') {
                Some(digits) => (digits, 1e6),
                None => (rate, 1.0),
            },
        };
        let braille: String = screen
            .chars()
            .filter(|c| ('\u{2801}'..='\u{28ff}').contains(c))
            .collect();
        digits
            .parse::<f64>()
            .ok()
            .map(|value| (value * scale, braille))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (first, first_braille) = loop {
        let screen = tmux.capture();
        if let Some((rate, braille)) = graph_in(&screen)
            && rate > 0.0
            && !braille.is_empty()
        {
            println!("under load:\n{screen}");
            break (rate, braille);
        }
        assert!(Instant::now() < deadline, "the graph never rose:\n{screen}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let screen = tmux.capture();
        if graph_in(&screen).is_some_and(|(_, braille)| braille != first_braille) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the graph stood still:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(first > 0.0);
    let history = ask(&path, &[r#"{"v":1,"op":"history"}"#]);
    let second = &history[0]["history"]["second"];
    assert!(
        second["at_ms"]
            .as_array()
            .is_some_and(|points| points.len() >= 2),
        "{history:?}"
    );
    assert!(
        second["series"]
            .as_array()
            .expect("series")
            .iter()
            .any(|series| series["name"] == "shard.0.messages_in"),
        "{history:?}"
    );

    // Drill down to a segment: filter the streams by name, open the stream,
    // its topic, its first partition.
    keys(&["3", "/"]);
    tmux.command()
        .args(["send-keys", "-t", "top", "-l", "top-load"])
        .status()
        .unwrap();
    keys(&["Enter", "Enter", "Enter", "Enter"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let segments = loop {
        let screen = tmux.capture();
        if screen.contains("top-load › events › partition") && screen.contains("active") {
            break screen;
        }
        assert!(Instant::now() < deadline, "no segment reached:\n{screen}");
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("segments:\n{segments}");
    assert!(
        segments.contains("first") && segments.contains("newest"),
        "{segments}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let batches = producer.join().expect("producer");
    assert!(batches > 0);

    // The snapshot action: S, a path, Enter puts the question on the
    // confirmation line, y has the daemon write the ZIP, whose answer
    // takes the status line.
    let out = tempfile::tempdir().unwrap();
    let zip_path = out.path().join("from-the-console.zip");
    keys(&["S"]);
    tmux.command()
        .args(["send-keys", "-t", "top", "-l"])
        .arg(zip_path.to_str().unwrap())
        .status()
        .unwrap();
    keys(&["Enter"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let screen = tmux.capture();
        if screen.contains("Write a snapshot ZIP") {
            break;
        }
        assert!(Instant::now() < deadline, "no confirmation line:\n{screen}");
        std::thread::sleep(Duration::from_millis(50));
    }
    keys(&["y"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let written = loop {
        let screen = tmux.capture();
        if screen.contains("wrote a snapshot ZIP of") {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "no answer on the status line:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("snapshot written:\n{written}");
    let bytes = std::fs::read(&zip_path).expect("the console's ZIP exists");
    assert!(
        written.contains(&format!("wrote a snapshot ZIP of {} bytes", bytes.len())),
        "{written}"
    );
    let archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a ZIP");
    assert!(
        archive
            .file_names()
            .any(|name| name.is_ok_and(|name| name == "summary.json"))
    );

    tmux.command()
        .args(["send-keys", "-t", "top", "q"])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while tmux.capture().contains("iggyd ") {
        assert!(Instant::now() < deadline, "q did not quit iggy-top");
        std::thread::sleep(Duration::from_millis(50));
    }
}
