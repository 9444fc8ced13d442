//! Restarts that refuse no client, seen from the official SDK: a producer
//! (`IggyProducer`), a producer on the plain client, a consumer and a loop
//! of new connections run while the daemon is restarted with its listeners
//! handed over through the file descriptor store the kit plays (what
//! systemd does for `systemctl restart`; `scripts/nspawn-e2e.sh` does it
//! under a real systemd). `common/load.rs` is the load.

use crate::common::load::{Load, LoadConfig, now_ms};
use crate::common::*;
use std::time::{Duration, Instant};

/// Time between two restarts: more than the SDK's default
/// `reestablish_after` (5 s).
const RESTARTS_APART: Duration = Duration::from_secs(6);

/// Proves three hand-over restarts under load cost the SDK nothing: no
/// refused or broken connection, no error returned to the application nor
/// to the plain client (each request was answered or evicted unexecuted and
/// replayed by the SDK), every acknowledged message in the topic exactly
/// once, and each restart (SIGTERM to the new daemon's readiness) under
/// 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sdk_clients_ride_through_hand_over_restarts() {
    let mut daemon = SdkDaemon::start_handing_over();
    let config = LoadConfig::new(daemon.address, ROOT_USERNAME, ROOT_PASSWORD);
    let load = Load::start(config).await.expect("the load starts");
    let mut restarts = Vec::new();
    for round in 0..3 {
        // Restarts are apart by more than the SDK's `reestablish_after`
        // (5 s), as real ones are: a client reconnecting again within it
        // waits out the rest (see README, restarts).
        let spaced = Instant::now() + RESTARTS_APART;
        let before = load.acknowledged();
        let deadline = Instant::now() + Duration::from_secs(30);
        while load.acknowledged() < before + 200 || Instant::now() < spaced {
            assert!(Instant::now() < deadline, "round {round}: the load stalled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let begin = now_ms();
        let took = tokio::task::block_in_place(|| {
            daemon.stop();
            daemon.restart();
            Duration::from_millis(now_ms() - begin)
        });
        restarts.push((begin, now_ms(), took));
    }
    let before = load.acknowledged();
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acknowledged() < before + 200 {
        assert!(
            Instant::now() < deadline,
            "the load stalled after the last restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = load.finish().await.expect("the topic reads back");
    eprint!("{}", report.summary());
    for (begin, end, took) in &restarts {
        eprintln!(
            "restart: SIGTERM to ready {took:?}; longest client wait {:?}",
            report.stall_in(*begin, *end)
        );
    }
    let details = report.details();
    assert!(report.app_errors.is_empty(), "{details}");
    assert!(report.transport_errors.is_empty(), "{details}");
    assert_eq!(report.refused(), 0, "{details}");
    assert!(report.broken().is_empty(), "{details}");
    assert!(report.lost.is_empty(), "{details}");
    assert!(report.duplicated.is_empty(), "{details}");
    assert_eq!(report.consumed_twice, 0, "{details}");
    assert!(report.stored >= 800, "{}", report.summary());
    for (_, _, took) in &restarts {
        assert!(*took < Duration::from_secs(5), "restarts took {restarts:?}");
    }
    daemon.assert_clean_log();
}
