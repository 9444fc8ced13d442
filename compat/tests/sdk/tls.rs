//! TLS with the official SDK: `tls_enabled`, `tls_domain` and
//! `tls_ca_file`, against a daemon serving `[tcp.tls]` with a certificate
//! this test made (the kit's `tls` module). Send, poll and a consumer group
//! over TLS; the certificate rotated mid-test by SIGHUP, the connection
//! opened before it continuing and new ones getting the new certificate; a
//! client trusting another CA refused.

use crate::common::*;
use iggy::prelude::*;
use iggyd_testkit::tls::{TestCa, write};
use std::path::Path;
use std::time::Duration;

/// A TLS client of the SDK trusting the CAs in `ca_file`, not logged in.
/// It tries to connect once (no reconnection loop), so a refused handshake
/// is an error here rather than a retry.
async fn tls_client(daemon: &SdkDaemon, ca_file: &Path) -> Result<IggyClient, IggyError> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(daemon.address.to_string())
        .with_tls_enabled(true)
        .with_tls_domain("localhost".to_string())
        .with_tls_ca_file(ca_file.to_string_lossy().into_owned())
        .with_reconnection_max_retries(Some(0))
        .build()?;
    client.connect().await?;
    Ok(client)
}

async fn root_tls_client(daemon: &SdkDaemon, ca_file: &Path) -> IggyClient {
    let client = tls_client(daemon, ca_file)
        .await
        .expect("TLS connect with the SDK");
    client
        .login_user(ROOT_USERNAME, ROOT_PASSWORD)
        .await
        .expect("root login over TLS");
    client
}

/// Sends ten messages to each of the topic's two partitions.
async fn produce(client: &IggyClient, prefix: &str) {
    for partition in 0..2 {
        send_to(client, "tls", "events", partition, messages(prefix, 0, 10)).await;
    }
}

/// Proves the SDK's TLS client against iggyd's TLS listener: send, poll by
/// offset, a consumer group join and group polls with auto-commit; after a
/// certificate rotation (new files, SIGHUP) new connections present the new
/// certificate (a client trusting only the new CA connects, one trusting
/// only the old CA is refused) while the connection opened before keeps
/// working; a client trusting neither is refused.
#[tokio::test]
async fn send_poll_and_groups_over_tls_with_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let first_ca = TestCa::new("first CA");
    let second_ca = TestCa::new("second CA");
    let first_ca_file = write(dir.path(), "first-ca.pem", &first_ca.pem);
    let second_ca_file = write(dir.path(), "second-ca.pem", &second_ca.pem);
    let server = first_ca.server(&["localhost"]);
    let cert = write(dir.path(), "server.crt", &server.cert_pem);
    let key = write(dir.path(), "server.key", &server.key_pem);
    let mut daemon = SdkDaemon::start_with(&[
        ("IGGYD_TCP__TLS__ENABLED", "true"),
        ("IGGYD_TCP__TLS__CERT_FILE", cert.to_str().unwrap()),
        ("IGGYD_TCP__TLS__KEY_FILE", key.to_str().unwrap()),
    ]);
    daemon.allow_log("TLS handshake failed");

    let client = root_tls_client(&daemon, &first_ca_file).await;
    stream_with_topic(&client, "tls", "events", 2).await;
    produce(&client, "before").await;
    let polled = poll(
        &client,
        "tls",
        "events",
        1,
        &Consumer::new(numeric(3)),
        PollingStrategy::offset(0),
        100,
        false,
    )
    .await;
    assert_eq!(payloads(&polled), payloads_of("before", 10));

    // A consumer group over TLS: one member takes both partitions.
    client
        .create_consumer_group(&named("tls"), &named("events"), "readers")
        .await
        .expect("create group");
    let member = root_tls_client(&daemon, &first_ca_file).await;
    member
        .join_consumer_group(&named("tls"), &named("events"), &named("readers"))
        .await
        .expect("join over TLS");
    let mut seen = Vec::new();
    for partition in 0..2 {
        let polled = poll(
            &member,
            "tls",
            "events",
            partition,
            &Consumer::group(named("readers")),
            PollingStrategy::next(),
            100,
            true,
        )
        .await;
        seen.extend(payloads(&polled));
    }
    assert_eq!(seen.len(), 20, "{seen:?}");

    // Rotate: the same paths get a pair from the second CA; SIGHUP.
    let rotated = second_ca.server(&["localhost"]);
    write(dir.path(), "server.crt", &rotated.cert_pem);
    write(dir.path(), "server.key", &rotated.key_pem);
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    daemon.wait_notification("RELOADING=1", Duration::from_secs(10));
    daemon.wait_notification("READY=1", Duration::from_secs(10));
    let after = root_tls_client(&daemon, &second_ca_file).await;
    produce(&after, "after").await;
    assert!(
        tls_client(&daemon, &first_ca_file).await.is_err(),
        "a new connection still got the old certificate"
    );
    // The connections opened before the rotation continue.
    let polled = poll(
        &member,
        "tls",
        "events",
        0,
        &Consumer::group(named("readers")),
        PollingStrategy::next(),
        100,
        true,
    )
    .await;
    assert_eq!(payloads(&polled), payloads_of("after", 10));
    client.ping().await.expect("the first client continues");

    // A client trusting another CA is refused.
    let stranger = write(dir.path(), "stranger.pem", &TestCa::new("stranger").pem);
    assert!(tls_client(&daemon, &stranger).await.is_err());

    daemon.stop();
    daemon.assert_clean_log();
}

fn payloads_of(prefix: &str, count: u64) -> Vec<String> {
    (0..count)
        .map(|index| format!("{prefix}-{index}"))
        .collect()
}
