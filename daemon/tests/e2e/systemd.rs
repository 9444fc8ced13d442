//! The daemon as systemd sees it: the notification sequence, the watchdog
//! cadence, reload on SIGHUP, and a restart that refuses cleanly instead of
//! resetting clients. The harness plays the service manager by owning
//! `NOTIFY_SOCKET` (and setting `WATCHDOG_USEC`).

use iggyd_testkit::TestDaemon;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Proves `WATCHDOG=1` comes at half the interval (±20%) while every shard
/// is healthy: with `WATCHDOG_USEC` = 1 s, pings arrive every ~500 ms.
#[test]
fn watchdog_pings_at_half_the_interval() {
    let mut daemon = TestDaemon::builder()
        .env("WATCHDOG_USEC", "1000000")
        .spawn();
    let mut pings = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pings.len() < 7 && Instant::now() < deadline {
        if let Some(message) = daemon.next_notification(Duration::from_secs(2))
            && message.lines().any(|line| line == "WATCHDOG=1")
        {
            pings.push(Instant::now());
        }
    }
    assert_eq!(pings.len(), 7, "pings: {:?}", daemon.notifications);
    let intervals: Vec<f64> = pings
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1000.0)
        .collect();
    eprintln!("watchdog intervals (ms): {intervals:.1?}");
    for interval in &intervals {
        assert!(
            (400.0..=600.0).contains(interval),
            "interval {interval:.0} ms in {intervals:?}"
        );
    }
    let (status, _) = daemon.stop();
    assert!(status.success());
}

/// Proves the watchdog is not petted for another process: with
/// `WATCHDOG_PID` naming someone else, no `WATCHDOG=1` is sent.
#[test]
fn watchdog_pid_of_another_process_disables_pings() {
    let mut daemon = TestDaemon::builder()
        .env("WATCHDOG_USEC", "400000")
        .env("WATCHDOG_PID", "1")
        .spawn();
    let deadline = Instant::now() + Duration::from_millis(1200);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if daemon.next_notification(left).is_none() {
            break;
        }
    }
    assert!(
        !daemon
            .notifications
            .iter()
            .any(|message| message.contains("WATCHDOG=1")),
        "{:?}",
        daemon.notifications
    );
}

/// Proves the live `STATUS=` summary is refreshed while running, with
/// connections, rates, durability and disk headroom.
#[test]
fn status_line_is_refreshed_with_the_live_summary() {
    let mut daemon = TestDaemon::start();
    let message = daemon.wait_notification("msg/s", Duration::from_secs(12));
    let status = message
        .lines()
        .find_map(|line| line.strip_prefix("STATUS="))
        .unwrap();
    assert!(status.contains("connections"), "{status}");
    assert!(status.contains("durability persisted"), "{status}");
    assert!(status.contains("free"), "{status}");
}

/// Proves SIGHUP re-reads the configuration: `RELOADING=1` then `READY=1`,
/// live keys applied and restart-only keys named; an invalid file is
/// rejected, the running configuration kept, and the daemon keeps serving.
#[test]
fn sighup_reloads_and_rejects_an_invalid_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iggyd.toml");
    std::fs::write(&file, "[shutdown]\ndrain_timeout = \"30 s\"\n").unwrap();
    let mut daemon = TestDaemon::builder()
        .arg("--config")
        .arg(file.to_str().unwrap())
        .spawn();
    daemon.allow_log("reload rejected");

    std::fs::write(
        &file,
        "[shutdown]\ndrain_timeout = \"20 s\"\n[logging]\nmax_file_size = \"10 MB\"\n[sharding]\nrequire_io_uring = true\n",
    )
    .unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    let reloading = daemon.wait_notification("RELOADING=1", Duration::from_secs(5));
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    daemon.wait_notification("READY=1", Duration::from_secs(5));
    let log = daemon.log();
    assert!(
        log.contains("shutdown.drain_timeout") && log.contains("reload: applied"),
        "{log}"
    );
    assert!(
        log.contains("sharding.require_io_uring") && log.contains("needs a restart"),
        "{log}"
    );

    std::fs::write(&file, "[logging]\nrotation_check_interval = \"0 s\"\n").unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    daemon.wait_notification("RELOADING=1", Duration::from_secs(5));
    daemon.wait_notification("READY=1", Duration::from_secs(5));
    assert!(daemon.log().contains("reload rejected"), "{}", daemon.log());
    std::net::TcpStream::connect(daemon.address).expect("still serving");
    let (status, _) = daemon.stop();
    assert!(status.success());
    daemon.assert_clean_log();
}

#[derive(Debug, Default)]
struct Attempts {
    served: u32,
    refused: u32,
    /// Connected, then reset or closed without an answer: must never happen.
    broken: Vec<String>,
}

/// One client attempt: connect, ping, read the reply.
fn attempt(address: std::net::SocketAddr, attempts: &mut Attempts) {
    // While a daemon stops it drops bare SYNs (no reset for anyone): the kernel
    // retransmits after 1 s, 2 s, 4 s…, so give connect the time a real
    // client's does.
    let mut stream = match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(15)) {
        Ok(stream) => stream,
        // Refused: nothing listened. A reset *during* connect is the same
        // outcome for a client: the handshake never completed (the SYN met
        // a listener in the middle of shutting down), no request was sent,
        // and the SDK retries it exactly like a refusal.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            attempts.refused += 1;
            return;
        }
        Err(error) => {
            attempts.broken.push(format!("connect: {error}"));
            return;
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reply = [0u8; 256];
    let outcome = stream
        .write_all(&iggyd_testkit::wire::Request::ping().frame(0, 0, 0))
        .and_then(|()| stream.read_exact(&mut reply));
    match outcome {
        Ok(()) if reply[60] == 8 && reply[216..220] == [0, 0, 0, 0] => attempts.served += 1,
        Ok(()) => attempts
            .broken
            .push(format!("unexpected reply header {:?}", &reply[56..64])),
        Err(error) => attempts.broken.push(format!("after connect: {error}")),
    }
}

/// Proves stop -> start on the same port loses no connection attempt beyond
/// a clean refusal: a client connecting and pinging throughout is either
/// served or refused, never reset after its connection was accepted. Each
/// daemon serves until the client was served three more times (a connect
/// that met a stopping daemon waits for the kernel's SYN retransmit, 1-3 s,
/// so a fixed serving time made the count depend on timing).
#[test]
fn restart_refuses_cleanly_and_never_resets_a_client() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    const SERVED_PER_ROUND: u32 = 3;
    let mut first = TestDaemon::start();
    let address = first.address;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let served = std::sync::Arc::new(AtomicU32::new(0));
    let client = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || {
            let mut attempts = Attempts::default();
            while !stop.load(Ordering::Relaxed) {
                attempt(address, &mut attempts);
                served.store(attempts.served, Ordering::Relaxed);
            }
            attempts
        })
    };
    let mut rounds = Vec::new();
    let mut dir = first.take_dir();
    let (status, _) = first.stop();
    assert!(status.success());
    for round in 0..3 {
        let mut next = TestDaemon::builder()
            .dir(dir)
            .listen(&address.to_string())
            .spawn();
        // Serve until the client got through a few times more.
        let before = served.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while served.load(Ordering::Relaxed) < before + SERVED_PER_ROUND {
            assert!(
                Instant::now() < deadline,
                "round {round}: the restarted daemon served the client {} times in 60 s",
                served.load(Ordering::Relaxed) - before
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        dir = next.take_dir();
        let (status, took) = next.stop();
        assert!(status.success());
        rounds.push(took);
    }
    stop.store(true, Ordering::Relaxed);
    let attempts = client.join().unwrap();
    eprintln!("restart attempts: {attempts:?}, stop times {rounds:?}");
    assert!(attempts.served >= 3 * SERVED_PER_ROUND, "{attempts:?}");
    assert!(
        attempts.broken.is_empty(),
        "{attempts:?} (stop times {rounds:?})"
    );
}

/// Proves the watchdog is gated on every shard: freezing one shard's loop
/// through the admin socket's fault switch stops the `WATCHDOG=1` pings and
/// puts the wedged shard and its PU in `STATUS=`.
#[test]
fn a_frozen_shard_stops_the_watchdog_pings() {
    let mut daemon = TestDaemon::builder().env("WATCHDOG_USEC", "600000").spawn();
    daemon.allow_log("made no progress");
    daemon.allow_log("freeze");
    daemon.wait_notification("WATCHDOG=1", Duration::from_secs(5));
    crate::control::freeze_shard(&daemon, 0);
    let alarm = daemon.wait_notification("made no progress", Duration::from_secs(5));
    assert!(alarm.contains("shard 0 (PU"), "{alarm}");
    // Once the alarm is raised, no ping follows.
    let quiet_until = Instant::now() + Duration::from_millis(1500);
    while let Some(left) = quiet_until.checked_duration_since(Instant::now()) {
        match daemon.next_notification(left) {
            Some(message) => assert!(!message.contains("WATCHDOG=1"), "{message}"),
            None => break,
        }
    }
}
