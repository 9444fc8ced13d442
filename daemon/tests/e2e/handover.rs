//! Restarts that refuse no client: the daemon hands its listeners to the
//! service manager's file descriptor store and takes them back at the next
//! start (`daemon/src/fdstore.rs`), and a stopping daemon tells its clients
//! to reconnect (`net/handover.rs`). The kit plays the store
//! (`TestDaemon::builder().fd_store(N)`): it keeps what the daemon sends
//! with `FDSTORE=1` and passes it back in `LISTEN_FDS`, as systemd does.

use iggyd_testkit::TestDaemon;
use iggyd_testkit::fdstore::FdStore;
use iggyd_testkit::wire::{Client, ClientError, Request};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// The names a daemon with `shards` shards and no metrics endpoint stores.
fn stored_names(shards: usize) -> Vec<String> {
    let mut names: Vec<String> = (0..shards).map(|shard| format!("iggy-{shard}")).collect();
    names.push("admin".to_string());
    names.sort();
    names
}

fn shards_of(daemon: &TestDaemon) -> usize {
    daemon
        .status
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no shard count in {:?}", daemon.status))
}

fn sorted_names(daemon: &TestDaemon) -> Vec<String> {
    let mut names = daemon.fd_store().expect("the kit plays the store").names();
    names.sort();
    names
}

/// A connection that wrote a PING and has not read the answer yet.
fn ping_without_reading(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .unwrap_or_else(|error| panic!("connect to {address}: {error}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(&Request::ping().frame(0, 0, 0))
        .expect("write a PING");
    stream
}

/// Reads one 256-byte header: (byte 60, status, eviction reason).
fn read_header(stream: &mut TcpStream) -> std::io::Result<(u8, u32, u8)> {
    let mut header = [0u8; 256];
    stream.read_exact(&mut header)?;
    let status = u32::from_le_bytes(header[216..220].try_into().unwrap());
    Ok((header[60], status, header[255]))
}

/// Proves the whole hand-over: the daemon stores one listener per shard
/// and the admin socket; on SIGTERM it stops within a second, tells an idle
/// logged-in client to reconnect (an eviction, NoSession, then end of
/// stream); connections made while no daemon runs are not refused but wait
/// in the stored sockets' queues; the next start takes every stored
/// listener back (none bound anew) and answers those waiting connections;
/// and the store holds exactly the same names afterwards.
#[test]
fn listeners_outlive_the_process_and_waiting_clients_are_served_by_the_next() {
    let mut daemon = TestDaemon::builder().fd_store(64).spawn();
    let shards = shards_of(&daemon);
    assert_eq!(sorted_names(&daemon), stored_names(shards));
    let log = daemon.log();
    assert!(
        log.contains("file descriptor store") && log.contains("FDSTORE=64"),
        "{log}"
    );
    let address = daemon.address;

    let mut idle = Client::connect(address).expect("connect");
    idle.login("iggy", "iggy").expect("login");
    idle.ping().expect("ping");

    let (status, took) = daemon.stop();
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    match idle.ping() {
        Err(ClientError::Evicted { reason: 1 }) => {}
        other => panic!("an idle client must read an eviction (NoSession): {other:?}"),
    }
    let log = daemon.log();
    assert!(log.contains("stopped cleanly"), "{log}");
    assert!(
        !log.contains("cannot filter new handshakes"),
        "a handed-over listener gets no filter: {log}"
    );

    // No daemon runs: the stored sockets still complete handshakes.
    let waiting: Vec<TcpStream> = (0..8).map(|_| ping_without_reading(address)).collect();

    daemon.restart();
    assert_eq!(daemon.address, address, "the same port, from the store");
    let log = daemon.log();
    let taken = log
        .matches("Iggy listener taken from the file descriptor store")
        .count();
    assert_eq!(taken, shards, "{log}");
    assert!(
        log.contains("admin socket taken from the file descriptor store"),
        "{log}"
    );
    assert!(!log.contains("anew"), "nothing is bound anew: {log}");
    for (index, mut stream) in waiting.into_iter().enumerate() {
        let (command, status, _) = read_header(&mut stream)
            .unwrap_or_else(|error| panic!("waiting connection {index}: {error}"));
        assert_eq!((command, status), (8, 0), "waiting connection {index}");
    }
    assert_eq!(sorted_names(&daemon), stored_names(shards));
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}

/// Proves a request that arrives while a handing-over daemon stops is not
/// executed but answered with the eviction the SDK replays after
/// reconnecting: sends made in a loop through a stop are each acknowledged
/// until one is evicted; after the restart the topic holds exactly the
/// acknowledged ones (the evicted send was never written), and the
/// connection ended after the linger period (end of stream, no reset).
#[test]
fn a_request_during_the_hand_over_is_answered_with_an_eviction_not_executed() {
    use crate::messages::{batch, poll, stream_with_topic};
    use iggyd_testkit::wire::{Identifier, Partitioning};
    let mut daemon = TestDaemon::builder().fd_store(64).spawn();
    let mut busy = Client::connect(daemon.address).expect("connect");
    busy.login("iggy", "iggy").expect("login");
    stream_with_topic(&mut busy, "s", "t", 1);
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut acknowledged = Vec::new();
    let evicted = loop {
        assert!(Instant::now() < deadline, "no eviction within 10 s");
        let payload = format!("m-{}", acknowledged.len()).into_bytes();
        let request = Request::send_messages(
            Identifier::Name("s"),
            Identifier::Name("t"),
            Partitioning::PartitionId(0),
            1,
            &batch(&[&payload]),
        );
        match busy.call(&request) {
            Ok(_) => acknowledged.push(payload),
            Err(ClientError::Evicted { reason: 1 }) => break payload,
            Err(other) => panic!("after {} sends: {other}", acknowledged.len()),
        }
    };
    // After the linger period the connection ends: end of stream.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(
            Instant::now() < deadline,
            "the connection outlived the linger"
        );
        match busy.ping() {
            Ok(()) => std::thread::sleep(Duration::from_millis(20)),
            Err(ClientError::Closed | ClientError::Io(_)) => break,
            Err(other) => panic!("after the eviction: {other}"),
        }
    }
    let (status, _) = daemon.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}");
    daemon.restart();
    let mut reader = Client::connect(daemon.address).expect("connect");
    reader.login("iggy", "iggy").expect("login");
    let (_, messages) = poll(&mut reader, "s", "t", 0, 0, 10_000);
    let stored: Vec<Vec<u8>> = messages.into_iter().map(|(_, payload)| payload).collect();
    assert_eq!(stored, acknowledged, "exactly the acknowledged sends");
    assert!(!stored.contains(&evicted), "the evicted send was executed");
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}

/// Proves what the SDK sends on its own is still answered while handing
/// over (its leader check, GetClusterMetadata, which it does not reconnect
/// on, and its heartbeat, Ping): sending leader checks, pings and an
/// application request (GetMe) in turn through a stop, every leader check
/// and ping is answered and the eviction comes on GetMe.
#[test]
fn the_sdks_own_requests_are_answered_during_the_hand_over_and_the_next_one_evicted() {
    let mut daemon = TestDaemon::builder().fd_store(64).spawn();
    let mut client = Client::connect(daemon.address).expect("connect");
    client.login("iggy", "iggy").expect("login");
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rounds = 0;
    loop {
        assert!(Instant::now() < deadline, "no eviction within 10 s");
        if let Err(error) = client.call(&Request::get_cluster_metadata()) {
            panic!("leader check {rounds}: {error}");
        }
        if let Err(error) = client.ping() {
            panic!("ping {rounds}: {error}");
        }
        match client.call(&Request::get_me()) {
            Ok(_) => rounds += 1,
            Err(ClientError::Evicted { reason: 1 }) => break,
            Err(other) => panic!("get me {rounds}: {other}"),
        }
    }
    let (status, _) = daemon.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}");
}

/// A listening socket of this process with SO_REUSEPORT on `address`.
fn reuseport_listener(address: &str) -> TcpListener {
    use socket2::{Domain, Protocol, Socket, Type};
    let address: SocketAddr = address.parse().unwrap();
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&address.into()).unwrap();
    socket.listen(16).unwrap();
    socket.into()
}

/// Proves what does not fit the configuration is replaced, each with a
/// log line saying why, and what is not configured any more is closed and
/// removed from the store: a stored `iggy-0` on another address, an
/// `iggy-1` that is not a socket, an `iggy-9` beyond the shards, a
/// `metrics` listener with metrics off, and a name the daemon does not
/// know. The daemon serves on the configured address and leaves exactly
/// its own listeners in the store.
#[test]
fn stored_sockets_that_do_not_fit_are_rebound_or_removed_with_the_reason() {
    let elsewhere = reuseport_listener("127.0.0.2:0");
    let metrics = TcpListener::bind("127.0.0.1:0").unwrap();
    let stray = TcpListener::bind("127.0.0.1:0").unwrap();
    let not_a_socket = std::fs::File::open("/dev/null").unwrap();
    let mut store = FdStore::new(64);
    store.insert("iggy-0", OwnedFd::from(elsewhere));
    store.insert("iggy-1", OwnedFd::from(not_a_socket));
    store.insert("iggy-9", OwnedFd::from(stray));
    store.insert("metrics", OwnedFd::from(metrics));
    store.insert(
        "someone-else",
        OwnedFd::from(TcpListener::bind("127.0.0.1:0").unwrap()),
    );
    let mut daemon = TestDaemon::builder().fd_store_with(store).spawn();
    let shards = shards_of(&daemon);
    let log = daemon.log();
    assert!(
        log.contains("binding the Iggy listener anew") && log.contains("127.0.0.2"),
        "the address mismatch is named: {log}"
    );
    if shards > 1 {
        assert!(log.contains("not a socket"), "{log}");
    }
    for name in ["iggy-9", "metrics", "someone-else"] {
        assert!(
            log.lines()
                .any(|line| line.contains(name) && line.contains("not used by this configuration")),
            "{name} is closed and removed: {log}"
        );
    }
    assert_eq!(daemon.address.ip().to_string(), "127.0.0.1");
    let mut client = Client::connect(daemon.address).expect("connect");
    client.ping().expect("served on the configured address");
    assert_eq!(sorted_names(&daemon), stored_names(shards));
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}

/// Proves a malformed `LISTEN_*` environment never stops the daemon nor
/// makes it guess: each case is logged naming the variable and every
/// listener is bound as usual.
#[test]
fn a_malformed_listen_environment_is_logged_and_ignored() {
    for (fds, names, needle) in [
        ("lots", None, "LISTEN_FDS=\"lots\" is not a count"),
        ("-1", None, "LISTEN_FDS=\"-1\" is not a count"),
        (
            "18446744073709551616",
            None,
            "LISTEN_FDS=\"18446744073709551616\" is not a count",
        ),
        ("100000", None, "is more than the"),
        ("2", Some("iggy-0"), "LISTEN_FDNAMES names 1 descriptors"),
        (
            "3",
            Some("iggy-0:iggy-1:admin"),
            "which is not open; skipped",
        ),
    ] {
        let mut builder = TestDaemon::builder().listen_pid().env("LISTEN_FDS", fds);
        if let Some(names) = names {
            builder = builder.env("LISTEN_FDNAMES", names);
        }
        let mut daemon = builder.spawn();
        let log = daemon.log();
        assert!(log.contains(needle), "LISTEN_FDS={fds}: {log}");
        let mut client = Client::connect(daemon.address).expect("connect");
        client.ping().expect("serves");
        let (status, _) = daemon.stop();
        assert!(status.success(), "LISTEN_FDS={fds}: {status}");
        daemon.assert_clean_log();
    }
    // Addressed to another process: not ours, untouched, not mentioned.
    let mut daemon = TestDaemon::builder()
        .env("LISTEN_PID", "1")
        .env("LISTEN_FDS", "3")
        .spawn();
    assert!(!daemon.log().contains("LISTEN_FDS"), "{}", daemon.log());
    let (status, _) = daemon.stop();
    assert!(status.success());
}

/// Proves that without a store nothing changes: nothing is stored or
/// passed, and a stopped daemon's port refuses connections.
#[test]
fn without_a_store_the_listeners_close_with_the_process() {
    let mut daemon = TestDaemon::start();
    let address = daemon.address;
    assert!(
        !daemon
            .notifications
            .iter()
            .any(|message| message.contains("FDSTORE")),
        "{:?}",
        daemon.notifications
    );
    assert!(
        daemon.log().contains("file descriptor store"),
        "{}",
        daemon.log()
    );
    let (status, _) = daemon.stop();
    assert!(status.success());
    let refused = TcpStream::connect_timeout(&address, Duration::from_secs(5));
    assert!(refused.is_err(), "{refused:?}");
}

/// Proves the hand-over on a TLS port: an idle TLS client (its read was
/// waiting when the stop came) and a busy one (GetMe in a loop) both read
/// the eviction through TLS, the daemon stops cleanly (no read is resumed
/// on a TLS stream whose read was cancelled), and the next start serves
/// TLS on the listeners it took back.
#[test]
fn the_hand_over_on_a_tls_port_evicts_through_tls_and_stops_cleanly() {
    use iggyd_testkit::tls::{TestCa, client_config, write};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("iggyd hand-over CA");
    let issued = ca.server(&["localhost", "127.0.0.1"]);
    let cert = write(dir.path(), "server.pem", &issued.cert_pem);
    let key = write(dir.path(), "server.key", &issued.key_pem);
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_TCP__TLS__ENABLED", "true")
        .env("IGGYD_TCP__TLS__CERT_FILE", cert.to_str().unwrap())
        .env("IGGYD_TCP__TLS__KEY_FILE", key.to_str().unwrap())
        .fd_store(64)
        .spawn();
    let connect = |address| {
        let mut client = Client::connect_tls(address, client_config(&ca.pem, None), "localhost")
            .expect("TLS handshake");
        client.login("iggy", "iggy").expect("login");
        client
    };
    let mut idle = connect(daemon.address);
    let mut busy = connect(daemon.address);
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no eviction within 10 s");
        match busy.call(&Request::get_me()) {
            Ok(_) => {}
            Err(ClientError::Evicted { reason: 1 }) => break,
            Err(other) => panic!("busy TLS client: {other}"),
        }
    }
    let (status, _) = daemon.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}\n{}", daemon.log());
    match idle.ping() {
        Err(ClientError::Evicted { reason: 1 }) => {}
        other => panic!("idle TLS client: {other:?}"),
    }
    daemon.restart();
    connect(daemon.address)
        .ping()
        .expect("TLS served after the restart");
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}
