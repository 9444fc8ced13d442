//! Wire error codes for missing and duplicate resources, as the SDK sees them.

use crate::common::*;
use iggy::prelude::*;

/// Proves the not-found and already-exists codes the SDK maps to typed
/// errors: streams 1009/1012, topics 2010/2013, partitions 3007, consumer
/// groups 5000/5004 (and 5006 for leaving a group one is not in), users 46;
/// and that reads of missing resources answer "none" instead of an error.
#[tokio::test]
async fn not_found_and_already_exists_codes() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "t", 1).await;
    let (s, t) = (named("s"), named("t"));

    // Streams.
    assert_code(client.create_stream("s").await, 1012, "duplicate stream");
    assert_code(
        client.delete_stream(&named("nope")).await,
        1009,
        "delete missing stream",
    );
    assert_code(
        client.delete_stream(&numeric(99)).await,
        1009,
        "delete missing stream id",
    );
    assert_code(
        client
            .update_stream(&named("nope"), "x", &StreamUpdateOptions::default())
            .await,
        1009,
        "update missing stream",
    );
    assert_code(
        client.purge_stream(&named("nope")).await,
        1009,
        "purge missing stream",
    );
    assert!(client.get_stream(&named("nope")).await.unwrap().is_none());

    // Topics.
    assert_code(
        client.create_topic(&s, "t", &topic_options(1)).await,
        2013,
        "duplicate topic",
    );
    assert_code(
        client
            .create_topic(&named("nope"), "t", &topic_options(1))
            .await,
        1009,
        "topic in a missing stream",
    );
    assert_code(
        client.delete_topic(&s, &named("nope")).await,
        2010,
        "delete missing topic",
    );
    assert_code(
        client.purge_topic(&s, &named("nope")).await,
        2010,
        "purge missing topic",
    );
    assert!(
        client
            .get_topic(&s, &named("nope"))
            .await
            .unwrap()
            .is_none()
    );

    // Partitions.
    let consumer = Consumer::new(named("c"));
    assert_code(
        client
            .poll_messages(
                &s,
                &t,
                Some(7),
                &consumer,
                &PollingStrategy::first(),
                1,
                false,
            )
            .await,
        3007,
        "poll a missing partition",
    );
    assert_code(
        client
            .poll_messages(
                &s,
                &named("nope"),
                Some(0),
                &consumer,
                &PollingStrategy::first(),
                1,
                false,
            )
            .await,
        2010,
        "poll a missing topic",
    );

    // Consumer groups.
    client
        .create_consumer_group(&s, &t, "g")
        .await
        .expect("create group");
    assert_code(
        client.create_consumer_group(&s, &t, "g").await,
        5004,
        "duplicate group",
    );
    assert_code(
        client.delete_consumer_group(&s, &t, &named("nope")).await,
        5000,
        "delete missing group",
    );
    assert_code(
        client.delete_consumer_group(&s, &t, &numeric(42)).await,
        5000,
        "delete missing group id",
    );
    assert_code(
        client.join_consumer_group(&s, &t, &named("nope")).await,
        5000,
        "join missing group",
    );
    assert_code(
        client.leave_consumer_group(&s, &t, &named("g")).await,
        5006,
        "leave a group one is not in",
    );
    assert!(
        client
            .get_consumer_group(&s, &t, &named("nope"))
            .await
            .unwrap()
            .is_none()
    );

    // Users.
    client
        .create_user("carol", "carolpw", UserStatus::Active, None)
        .await
        .unwrap();
    assert_code(
        client
            .create_user("carol", "carolpw", UserStatus::Active, None)
            .await,
        46,
        "duplicate user",
    );
    assert!(client.get_user(&named("nobody")).await.unwrap().is_none());
    daemon.assert_clean_log();
}
