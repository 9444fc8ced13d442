//! Hostile and broken clients against a real daemon: truncated frames,
//! absurd sizes, seeded random bytes, garbage bodies behind valid headers
//! for every command code, requests in the wrong session state, and 10,000
//! idle connections. Throughout, a well-behaved client (the kit's) keeps
//! being served, the daemon's memory stays bounded, nothing in the data
//! directory changes (log files aside), and the log has no panic or ERROR.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iggyd_testkit::TestDaemon;
use iggyd_testkit::rng::Rng;
use iggyd_testkit::wire::{
    Client, Header, REPLY_TIMEOUT, Reply, Request, connect, exchange, request_checksum,
};
use iggyd_wire::protocol::codes::{CommandCode, Operation};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::messages::{logged_in, poll, send, stream_with_topic};

/// Pause between checks of a condition in a bounded wait on /proc.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// A `/proc/PID/status` memory field (`VmRSS`, `VmSize`) in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    iggyd_testkit::daemon::status_kib(pid.unsigned_abs(), field)
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

fn rss_kib(pid: i32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// Open file descriptors of `pid`.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Soft and hard "Max open files" of `pid`.
fn nofile_limits(pid: i32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("Max open files line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_string(), fields[4].to_string())
}

/// Every regular file under `dir` except the log directory, with contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if path != dir.join("logs") {
                    stack.push(path);
                }
            } else if kind.is_file() {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Waits until the daemon closes `stream` without sending anything; fails
/// if it answers or keeps the connection open past the timeout.
fn expect_closed_without_reply(daemon: &TestDaemon, stream: &mut TcpStream, case: &str) {
    let mut buffer = [0u8; 512];
    match stream.read(&mut buffer) {
        Ok(0) => {}
        Ok(read) => daemon.fail(&format!("{case}: got {read} reply bytes, expected a close")),
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(error) => daemon.fail(&format!("{case}: connection not closed: {error}")),
    }
}

/// The well-behaved client's round: ping and read back what it stored.
fn good_client_round(good: &mut Client, expected: &[Vec<u8>]) {
    good.ping().expect("ping");
    let (_, messages) = poll(good, "good", "events", 0, 0, 100);
    let payloads: Vec<Vec<u8>> = messages.into_iter().map(|(_, payload)| payload).collect();
    assert_eq!(payloads, expected);
}

/// A ping header announcing `size` bytes.
fn header_with_size(size: u32) -> Vec<u8> {
    Header {
        size,
        ..Header::new(2, 1, 0)
    }
    .encode()
    .to_vec()
}

// Proves that broken and hostile input never hurts the daemon or other
// clients: each case gets the reaction the protocol reference prescribes
// (close without reply for untrustworthy framing, status 3 for an unknown
// code, status 40 before login, a NoSession eviction for a replicated
// operation without a session, a reply for every garbage body), while a
// logged-in client on its own connection is served after every case, RSS
// stays bounded, the data directory is byte-for-byte unchanged and the log
// shows no panic or ERROR.
#[test]
fn garbage_never_hurts_the_daemon_or_other_clients() {
    let started = Instant::now();
    let daemon = TestDaemon::start();
    let address = daemon.address;
    let mut good = logged_in(address, "iggy", "iggy");
    stream_with_topic(&mut good, "good", "events", 1);
    let expected: Vec<Vec<u8>> = vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()];
    let slices: Vec<&[u8]> = expected.iter().map(Vec::as_slice).collect();
    assert_eq!(send(&mut good, "good", "events", 0, &slices), 0);
    good_client_round(&mut good, &expected);
    // A flushed, quiet data directory: the send above is acknowledged once
    // durable, so from here on nothing should write.
    let before = snapshot(&daemon.data_dir());
    let rss_before = rss_kib(daemon.pid());
    let mut rng = Rng(0xBAD_1B0D_5EED);

    // Slow lorises: partial headers held open for the whole test.
    let mut lorises: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut stream = connect(address);
            stream.write_all(&[0u8; 100]).unwrap();
            stream
        })
        .collect();
    good_client_round(&mut good, &expected);

    // Truncated frames: header cut, body cut, then close.
    for cut in [1usize, 47, 52, 60, 255] {
        let mut stream = connect(address);
        stream.write_all(&header_with_size(300)[..cut]).unwrap();
    }
    for (size, sent) in [
        (300u32, 0usize),
        (256 + 1000, 500),
        (64 * 1024 * 1024, 4096),
    ] {
        let mut stream = connect(address);
        stream.write_all(&header_with_size(size)).unwrap();
        // A frame over the login frame cap is refused at its header, and
        // the close may reset this write: that is the point.
        let _ = stream.write_all(&rng.bytes(sent));
    }
    good_client_round(&mut good, &expected);

    // Announced bodies before login are refused unread: 64 clients each
    // announce a 64 MiB frame and send one body byte; each gets an eviction
    // (InvalidRequestBodySize) and a close, and the daemon's memory does
    // not follow the sizes claimed (64 x 64 MiB would abort it under strict
    // overcommit or RLIMIT_AS).
    let vm_before = status_kib(daemon.pid(), "VmSize");
    let mut announcers: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut stream = connect(address);
            stream
                .write_all(&header_with_size(64 * 1024 * 1024))
                .unwrap();
            let _ = stream.write_all(&[0]);
            stream
        })
        .collect();
    for stream in &mut announcers {
        let reply = iggyd_testkit::wire::read_frame(stream)
            .unwrap_or_else(|error| daemon.fail(&format!("announcer: {error}")))
            .unwrap_or_else(|| daemon.fail("announcer: closed without an eviction"));
        assert_eq!((reply.command(), reply.eviction_reason()), (13, 6));
        expect_closed_without_reply(&daemon, stream, "announcer after its eviction");
    }
    let vm_announced = status_kib(daemon.pid(), "VmSize");
    assert!(
        vm_announced < vm_before + 256 * 1024,
        "64 announced 64 MiB frames grew VmSize from {vm_before} KiB to {vm_announced} KiB"
    );
    drop(announcers);
    good_client_round(&mut good, &expected);

    // Absurd sizes: closed without a reply.
    for size in [0u32, 1, 255, 64 * 1024 * 1024 + 1, 1 << 31, u32::MAX] {
        let mut stream = connect(address);
        stream.write_all(&header_with_size(size)).unwrap();
        expect_closed_without_reply(&daemon, &mut stream, &format!("size {size}"));
    }
    // A reply or eviction header (command byte 8 / 13) is not a request.
    for command in [0u8, 8, 13, 255] {
        let mut header = header_with_size(256);
        header[60] = command;
        let mut stream = connect(address);
        stream.write_all(&header).unwrap();
        expect_closed_without_reply(&daemon, &mut stream, &format!("command byte {command}"));
    }
    // Operation bytes no client may send: closed.
    for operation in [0u8, 4, 64, 68, 127, 150, 163, 255] {
        let mut stream = connect(address);
        let header = Header::new(operation, 0, 0);
        stream.write_all(&header.encode()).unwrap();
        expect_closed_without_reply(&daemon, &mut stream, &format!("operation {operation}"));
    }
    good_client_round(&mut good, &expected);

    // Seeded random bytes: whatever the daemon answers, it ends the
    // connection once the peer stops sending, and never hangs.
    let mut random_replies = 0;
    for _ in 0..60 {
        let mut stream = connect(address);
        let len = 1 + rng.index(4096);
        let mut bytes = rng.bytes(len);
        if rng.below(2) == 0 && bytes.len() > 61 {
            // Plausible framing so some reach the decoder.
            bytes[48..52].copy_from_slice(&(256 + rng.below(256) as u32).to_le_bytes());
            bytes[60] = 5;
        }
        // The daemon may close (and reset) as soon as it has seen a bad
        // header, so writing the rest may fail: that is the point.
        let _ = stream.write_all(&bytes);
        let _ = stream.shutdown(Shutdown::Write);
        let mut sink = Vec::new();
        match stream.read_to_end(&mut sink) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(error) => daemon.fail(&format!("random bytes: {error}")),
        }
        random_replies += sink.len() / 256;
    }
    good_client_round(&mut good, &expected);

    // Valid headers, garbage bodies, every command code, before login:
    // exactly one reply or eviction each, never a close.
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for code in CommandCode::ALL {
        for round in 0..3 {
            let operation = code.operation();
            let len = round * 8 + rng.index(48);
            let body = rng.bytes(len);
            let header = Header {
                client: 0x5EED,
                request: u64::from(operation != Operation::Register),
                ..Header::new(
                    operation as u8,
                    if operation == Operation::NonReplicated {
                        code as u32
                    } else {
                        0
                    },
                    body.len(),
                )
            };
            let mut stream = connect(address);
            let reply = exchange(&mut stream, &header.frame(&body)).unwrap_or_else(|| {
                daemon.fail(&format!("{code:?}: closed instead of answering garbage"))
            });
            let outcome = match reply.command() {
                8 => format!("status {}", reply.status()),
                13 => format!("eviction {}", reply.eviction_reason()),
                other => daemon.fail(&format!("{code:?}: reply command byte {other}")),
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
    }
    eprintln!("garbage bodies: {outcomes:?}");
    good_client_round(&mut good, &expected);

    // Session-state rules (§3).
    let mut stream = connect(address);
    let sneaky = Request::create_stream("sneaky", &[]);
    let create_stream = Header {
        client: 0x5EED,
        request: 1,
        request_checksum: request_checksum(&sneaky.body),
        ..Header::new(sneaky.operation, 0, sneaky.body.len())
    };
    let reply = exchange(&mut stream, &create_stream.frame(&sneaky.body)).expect("eviction");
    assert_eq!(
        (reply.command(), reply.eviction_reason()),
        (13, 1),
        "NoSession"
    );
    let get_streams = Header::new(2, CommandCode::GetStreams as u32, 0);
    let reply = read_or_reconnect(&mut stream, address, &get_streams.frame(&[]));
    assert_eq!((reply.command(), reply.status()), (8, 40), "before login");
    let unknown = Header::new(2, 9999, 0);
    let reply = read_or_reconnect(&mut stream, address, &unknown.frame(&[]));
    assert_eq!((reply.command(), reply.status()), (8, 3), "unknown code");
    good_client_round(&mut good, &expected);

    // Nothing above changed the data directory; memory stayed bounded.
    for loris in &mut lorises {
        loris.write_all(&[0u8; 10]).unwrap();
    }
    drop(lorises);
    let rss_after = rss_kib(daemon.pid());
    let after = snapshot(&daemon.data_dir());
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    if !changed.is_empty() {
        daemon.fail(&format!("garbage changed the data directory: {changed:?}"));
    }
    eprintln!(
        "bad input: RSS {rss_before} KiB -> {rss_after} KiB, {random_replies} replies to random bytes, {:?}",
        started.elapsed()
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    // The good client still writes, too.
    assert_eq!(send(&mut good, "good", "events", 0, &[b"four"]), 3);
    daemon.assert_clean_log();
}

/// Exchanges on `stream`, reconnecting once if the daemon closed it after
/// an eviction.
fn read_or_reconnect(stream: &mut TcpStream, address: std::net::SocketAddr, bytes: &[u8]) -> Reply {
    if let Some(reply) = exchange(stream, bytes) {
        return reply;
    }
    *stream = connect(address);
    exchange(stream, bytes).expect("reply on a fresh connection")
}

// Proves the daemon holds 10,000 idle connections (within its connection
// caps, raised per address here) with bounded memory and
// keeps serving a logged-in client meanwhile; that it raises its own soft
// RLIMIT_NOFILE to the hard limit at start (it is spawned here with a soft
// limit of 1,024); and that it releases every descriptor once the idle
// clients leave.
#[test]
fn ten_thousand_idle_connections() {
    let started = Instant::now();
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let wanted: u64 = 10_000;
    let connections = wanted.min(hard.saturating_sub(512)) as usize;
    assert!(
        connections >= 1_000,
        "the hard RLIMIT_NOFILE ({hard}) is too low for this test"
    );
    if (connections as u64) < wanted {
        eprintln!("hard RLIMIT_NOFILE is {hard}: holding {connections} connections, not {wanted}");
    }
    // Every idle connection comes from 127.0.0.1 and never logs in: the
    // per-address cap and the login timeout are raised for this test (the
    // bad_clients suite exercises them).
    let daemon = TestDaemon::builder()
        .nofile_soft_limit(1024)
        .env("IGGYD_LIMITS__MAX_CONNECTIONS_PER_ADDRESS", "16777216")
        .env("IGGYD_LIMITS__LOGIN_TIMEOUT", "1 h")
        .spawn();
    let (soft, hard_seen) = nofile_limits(daemon.pid());
    assert_eq!(
        soft, hard_seen,
        "iggyd raised its soft NOFILE limit to the hard one"
    );
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();

    let mut good = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut good, "good", "events", 1);
    send(&mut good, "good", "events", 0, &[b"hello"]);
    let rss_before = rss_kib(daemon.pid());
    let fds_before = fd_count(daemon.pid());

    let mut idle = Vec::with_capacity(connections);
    for number in 0..connections {
        idle.push(connect(daemon.address));
        if number % 2_000 == 0 {
            good.ping().expect("ping");
        }
    }
    // Bounded wait until the daemon accepted them all.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fd_count(daemon.pid()) < fds_before + connections {
        if Instant::now() > deadline {
            daemon.fail(&format!(
                "iggyd holds {} descriptors, expected {} more than {fds_before}",
                fd_count(daemon.pid()),
                connections
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let held = fd_count(daemon.pid()) - fds_before;
    good_client_round(&mut good, &[b"hello".to_vec()]);
    // One of the idle connections wakes up and is served normally.
    let reply = exchange(&mut idle[connections / 2], &Request::ping().frame(0, 0, 0))
        .expect("ping on an idle connection");
    assert!(reply.is_ok());
    let rss_held = rss_kib(daemon.pid());

    drop(idle);
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while fd_count(daemon.pid()) > fds_before + 16 {
        if Instant::now() > deadline {
            daemon.fail(&format!(
                "iggyd still holds {} descriptors after the clients left",
                fd_count(daemon.pid())
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    good_client_round(&mut good, &[b"hello".to_vec()]);
    eprintln!(
        "idle connections: {held} held, RSS {rss_before} KiB -> {rss_held} KiB, {:?}",
        started.elapsed()
    );
    assert!(
        rss_held < 200 * 1024,
        "RSS {rss_held} KiB with {held} idle connections"
    );
    daemon.assert_clean_log();
}
