//! Next-polling with auto-commit across a graceful daemon restart.

use crate::common::*;
use iggy::prelude::*;

/// Proves a consumer that next-polls with auto-commit continues exactly where
/// it left off after the daemon is stopped (SIGTERM) and restarted on the
/// same data directory: no message is skipped or delivered twice, stored
/// offsets and metadata (stream, topic, user) survive, and new messages get
/// offsets after the old ones.
#[tokio::test]
async fn next_polling_with_auto_commit_survives_a_restart() {
    let mut daemon = SdkDaemon::start();
    let consumer = Consumer::new(named("resumer"));
    let mut seen: Vec<String> = Vec::new();
    {
        let client = daemon.root_client().await;
        stream_with_topic(&client, "s", "t", 1).await;
        send_to(&client, "s", "t", 0, messages("m", 0, 100)).await;
        for _ in 0..3 {
            let polled = poll(
                &client,
                "s",
                "t",
                0,
                &consumer,
                PollingStrategy::next(),
                10,
                true,
            )
            .await;
            seen.extend(payloads(&polled));
        }
        assert_eq!(seen.len(), 30);
        client.shutdown().await.unwrap();
    }
    daemon.stop();
    daemon.restart();

    let client = daemon.root_client().await;
    let stored = client
        .get_consumer_offset(&consumer, &named("s"), &named("t"), Some(0))
        .await
        .unwrap()
        .expect("offset survived the restart");
    assert_eq!(stored.stored_offset, 29);
    assert_eq!(stored.current_offset, 99);
    send_to(&client, "s", "t", 0, messages("m", 100, 20)).await;
    loop {
        let polled = poll(
            &client,
            "s",
            "t",
            0,
            &consumer,
            PollingStrategy::next(),
            17,
            true,
        )
        .await;
        if polled.messages.is_empty() {
            break;
        }
        seen.extend(payloads(&polled));
    }
    let expected: Vec<String> = (0..120).map(|i| format!("m-{i}")).collect();
    assert_eq!(
        seen, expected,
        "every message once, in order, across the restart"
    );
    let tail = poll(
        &client,
        "s",
        "t",
        0,
        &consumer,
        PollingStrategy::last(),
        1,
        false,
    )
    .await;
    assert_eq!(offsets(&tail), vec![119]);
    daemon.assert_clean_log();
}
