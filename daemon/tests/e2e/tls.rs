//! TLS on the Iggy listener, against the real binary with certificates made
//! by the test (`iggyd_testkit::tls`): the kit's client sends and polls over
//! TLS; a plaintext client on the TLS port and a TLS client on a plaintext
//! port are closed at once (long before any timeout could) with one log line
//! naming the mistake; a client that does not trust the certificate, or
//! lacks a client certificate from `tcp.tls.client_ca_file`, never gets
//! through; SIGHUP rotates the pair for new connections while open ones
//! continue, and a bad pair is refused with the running one kept; a pair
//! that does not load stops the start with exit 78 naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iggyd_testkit::TestDaemon;
use iggyd_testkit::tls::{Issued, TestCa, client_config, peer_fingerprint, write};
use iggyd_testkit::wire::{Client, ClientError};
use nix::sys::signal::Signal;

use crate::messages::{poll, send, stream_with_topic};

/// Long enough that a close within it cannot be the login timeout's work.
const LOGIN_TIMEOUT: &str = "1 h";
/// A prompt close happens well within this (it is far below the login
/// timeout above and the kit's 20 s reply timeout).
const PROMPT: Duration = Duration::from_secs(10);

/// Certificate and key files of `issued` in `dir` under `name`.
fn files(dir: &Path, name: &str, issued: &Issued) -> (PathBuf, PathBuf) {
    (
        write(dir, &format!("{name}.crt"), &issued.cert_pem),
        write(dir, &format!("{name}.key"), &issued.key_pem),
    )
}

/// A daemon serving TLS with the files at `cert` and `key` (and, with
/// `client_ca`, requiring client certificates from it).
fn tls_daemon(cert: &Path, key: &Path, client_ca: Option<&Path>) -> TestDaemon {
    let mut builder = TestDaemon::builder()
        .env("IGGYD_TCP__TLS__ENABLED", "true")
        .env("IGGYD_TCP__TLS__CERT_FILE", cert.to_str().unwrap())
        .env("IGGYD_TCP__TLS__KEY_FILE", key.to_str().unwrap())
        .env("IGGYD_LIMITS__LOGIN_TIMEOUT", LOGIN_TIMEOUT);
    if let Some(ca) = client_ca {
        builder = builder.env("IGGYD_TCP__TLS__CLIENT_CA_FILE", ca.to_str().unwrap());
    }
    builder.spawn()
}

fn tls_client(address: SocketAddr, ca: &TestCa, identity: Option<&Issued>) -> Client {
    Client::connect_tls(address, client_config(&ca.pem, identity), "localhost")
        .expect("TLS handshake")
}

/// Expects the daemon to end the connection without serving it, promptly.
fn assert_turned_away(outcome: Result<(), ClientError>, started: Instant, case: &str) {
    match outcome {
        Err(ClientError::Closed) => {}
        Err(ClientError::Io(error)) if error.kind() != std::io::ErrorKind::WouldBlock => {}
        other => panic!("{case}: expected a close, got {other:?}"),
    }
    assert!(
        started.elapsed() < PROMPT,
        "{case}: the close took {:?}",
        started.elapsed()
    );
}

/// Warning lines of `log` containing `needle` (the debug lines that close
/// each connection repeat the reason; the operator's line is the warning).
fn warnings(log: &str, needle: &str) -> usize {
    log.lines()
        .filter(|line| line.contains(" WARN ") && line.contains(needle))
        .count()
}

/// Waits for the reload a SIGHUP started to finish.
fn reload(daemon: &mut TestDaemon) {
    daemon.signal(Signal::SIGHUP);
    daemon.wait_notification("RELOADING=1", Duration::from_secs(10));
    daemon.wait_notification("READY=1", Duration::from_secs(10));
}

// Proves the TLS listener serves the protocol (send and poll round-trip over
// TLS) and turns away, promptly and with one log line each, a plaintext
// client and a client that does not trust the server's certificate.
#[test]
fn tls_serves_clients_and_turns_away_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("iggyd test CA");
    let (cert, key) = files(
        dir.path(),
        "server",
        &ca.server(&["localhost", "127.0.0.1"]),
    );
    let mut daemon = tls_daemon(&cert, &key, None);
    daemon.allow_log("TLS handshake failed");

    let mut client = tls_client(daemon.address, &ca, None);
    client.login("iggy", "iggy").expect("login over TLS");
    stream_with_topic(&mut client, "secure", "events", 1);
    let payloads: Vec<Vec<u8>> = (0..100).map(|i| format!("m{i}").into_bytes()).collect();
    let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    assert_eq!(send(&mut client, "secure", "events", 0, &slices), 0);
    let (current, messages) = poll(&mut client, "secure", "events", 0, 0, 1000);
    assert_eq!(current, 99);
    let polled: Vec<Vec<u8>> = messages.into_iter().map(|(_, payload)| payload).collect();
    assert_eq!(polled, payloads);

    // A plaintext client (its first byte is a header's, not a TLS record's).
    let started = Instant::now();
    let mut plain = Client::connect(daemon.address).unwrap();
    assert_turned_away(plain.ping(), started, "plaintext on the TLS port");

    // A client that trusts another CA aborts the handshake.
    let stranger = TestCa::new("someone else");
    let started = Instant::now();
    let refused = Client::connect_tls(
        daemon.address,
        client_config(&stranger.pem, None),
        "localhost",
    );
    assert!(refused.is_err(), "a client trusting another CA got through");
    assert!(started.elapsed() < PROMPT);

    client.ping().expect("the TLS client is still served");
    let (status, _) = daemon.stop();
    assert!(status.success());
    let log = daemon.log();
    assert_eq!(
        warnings(&log, "a plaintext client on the TLS Iggy port"),
        1,
        "{log}"
    );
    assert!(log.contains("TLS handshake failed"), "{log}");
    daemon.assert_clean_log();
}

// Proves a TLS client on a plaintext port is closed at once with one log
// line naming the mistake, instead of waiting for a 256-byte header its
// ClientHello may never fill.
#[test]
fn a_tls_client_on_the_plaintext_port_is_closed_at_once() {
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_LIMITS__LOGIN_TIMEOUT", LOGIN_TIMEOUT)
        .spawn();
    let ca = TestCa::new("iggyd test CA");
    let started = Instant::now();
    let outcome = Client::connect_tls(daemon.address, client_config(&ca.pem, None), "localhost");
    assert!(outcome.is_err(), "TLS to a plaintext port succeeded");
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
    let mut plain = Client::login_to(daemon.address, "iggy", "iggy").unwrap();
    plain.ping().unwrap();
    daemon.stop();
    let log = daemon.log();
    assert_eq!(
        warnings(&log, "a TLS client on the plaintext Iggy port"),
        1,
        "{log}"
    );
    daemon.assert_clean_log();
}

// Proves `tcp.tls.client_ca_file`: a client presenting a certificate from
// that CA logs in; one without a certificate, or with one from another CA,
// never gets a request served.
#[test]
fn client_certificates_must_come_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = TestCa::new("server CA");
    let client_ca = TestCa::new("client CA");
    let (cert, key) = files(dir.path(), "server", &server_ca.server(&["localhost"]));
    let client_ca_file = write(dir.path(), "clients.pem", &client_ca.pem);
    let mut daemon = tls_daemon(&cert, &key, Some(&client_ca_file));
    daemon.allow_log("TLS handshake failed");

    let member = client_ca.client("producer-1");
    let mut client = tls_client(daemon.address, &server_ca, Some(&member));
    client
        .login("iggy", "iggy")
        .expect("login with a client certificate");

    let outsider = TestCa::new("other CA").client("intruder");
    for (case, identity) in [("no certificate", None), ("another CA", Some(&outsider))] {
        let started = Instant::now();
        let outcome = Client::connect_tls(
            daemon.address,
            client_config(&server_ca.pem, identity),
            "localhost",
        )
        .map_err(ClientError::Io)
        .and_then(|mut client| client.login("iggy", "iggy").map(drop));
        assert_turned_away(outcome, started, case);
    }
    client.ping().unwrap();
    daemon.stop();
    daemon.assert_clean_log();
}

// Proves rotation without a restart: after the files are replaced and
// SIGHUP, new connections get the new certificate (a client trusting only
// the new CA gets in) while a connection opened before keeps working; a
// pair that does not load is refused on reload with a log line and the
// running pair stays.
#[test]
fn certificates_rotate_on_sighup_and_a_bad_pair_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first_ca = TestCa::new("first CA");
    let second_ca = TestCa::new("second CA");
    let (cert, key) = files(dir.path(), "server", &first_ca.server(&["localhost"]));
    let mut daemon = tls_daemon(&cert, &key, None);
    daemon.allow_log("TLS certificate refused");

    let mut before = tls_client(daemon.address, &first_ca, None);
    before.login("iggy", "iggy").unwrap();
    let first_print = peer_fingerprint(before.tls_connection().unwrap()).unwrap();

    // Rotate: same paths, new pair from another CA.
    files(dir.path(), "server", &second_ca.server(&["localhost"]));
    reload(&mut daemon);
    assert!(
        daemon.log().contains("reload: TLS certificate applied"),
        "{}",
        daemon.log()
    );
    let mut after = tls_client(daemon.address, &second_ca, None);
    after.login("iggy", "iggy").unwrap();
    let second_print = peer_fingerprint(after.tls_connection().unwrap()).unwrap();
    assert_ne!(first_print, second_print);
    assert!(
        Client::connect_tls(
            daemon.address,
            client_config(&first_ca.pem, None),
            "localhost"
        )
        .is_err(),
        "new connections still get the old certificate"
    );
    before
        .ping()
        .expect("a connection opened before the rotation continues");

    // A key that does not belong to the certificate: refused, pair kept.
    let stray = TestCa::new("stray CA").server(&["localhost"]);
    write(dir.path(), "server.key", &stray.key_pem);
    reload(&mut daemon);
    let log = daemon.log();
    assert!(log.contains("reload: TLS certificate refused"), "{log}");
    assert!(log.contains("tcp.tls.key_file"), "{log}");
    let mut kept = tls_client(daemon.address, &second_ca, None);
    kept.login("iggy", "iggy").unwrap();
    assert_eq!(
        peer_fingerprint(kept.tls_connection().unwrap()).unwrap(),
        second_print
    );
    after.ping().unwrap();
    daemon.stop();
    daemon.assert_clean_log();
}

// Proves a pair that does not load stops the start with EX_CONFIG (78) and
// a message naming the key and the file, before any shard runs.
#[test]
fn a_bad_pair_stops_the_start_with_exit_78() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("CA");
    let (cert, _) = files(dir.path(), "server", &ca.server(&["localhost"]));
    let (_, other_key) = files(dir.path(), "other", &ca.server(&["localhost"]));
    let output = iggyd_testkit::run(
        iggyd_testkit::iggyd_command()
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("IGGYD_TCP__TLS__ENABLED", "true")
            .env("IGGYD_TCP__TLS__CERT_FILE", &cert)
            .env("IGGYD_TCP__TLS__KEY_FILE", &other_key)
            .env("IGGYD_LOGGING__DIR", dir.path().join("logs")),
    );
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("tcp.tls.key_file")
            && output.stderr.contains("does not belong to the certificate"),
        "{}",
        output.stderr
    );
}
