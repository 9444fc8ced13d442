//! Streams, topics, partitions, purges and segments.

use crate::common::*;
use iggy::prelude::*;

/// Proves the metadata lifecycle through the SDK: streams and topics are
/// created, read by id and by name, listed, updated (name, expiry, size cap),
/// partitions are added and removed from the top, and deletes make them
/// disappear (reads answer "none", not an error).
#[tokio::test]
async fn streams_topics_partitions_create_get_list_update_delete() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;

    let stream = client.create_stream("orders").await.expect("create stream");
    assert_eq!(stream.name, "orders");
    assert_eq!(stream.topics_count, 0);
    client.create_stream("other").await.expect("second stream");
    let by_id = client
        .get_stream(&numeric(stream.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_id.name, "orders");
    let names: Vec<String> = client
        .get_streams()
        .await
        .unwrap()
        .into_iter()
        .map(|stream| stream.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    client
        .update_stream(
            &named("orders"),
            "orders-v2",
            &StreamUpdateOptions::default(),
        )
        .await
        .expect("update stream");
    assert!(client.get_stream(&named("orders")).await.unwrap().is_none());
    let stream_id = named("orders-v2");

    let topic = client
        .create_topic(&stream_id, "created", &topic_options(2))
        .await
        .expect("create topic");
    assert_eq!(topic.partitions_count, 2);
    assert_eq!(topic.partitions.len(), 2);
    client
        .create_topic(&stream_id, "second", &topic_options(1))
        .await
        .expect("second topic");
    let topics = client.get_topics(&stream_id).await.unwrap();
    assert_eq!(topics.len(), 2, "{topics:?}");
    assert_eq!(
        client
            .get_stream(&stream_id)
            .await
            .unwrap()
            .unwrap()
            .topics_count,
        2
    );

    let update = TopicUpdateOptions {
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(
            3_600_000_000u64,
        ))),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(1u64 << 30))),
        ..TopicUpdateOptions::default()
    };
    client
        .update_topic(&stream_id, &named("created"), "renamed", &update)
        .await
        .expect("update topic");
    let renamed = client
        .get_topic(&stream_id, &named("renamed"))
        .await
        .unwrap()
        .expect("renamed topic");
    assert_eq!(renamed.id, topic.id);
    assert_eq!(
        renamed.message_expiry,
        IggyExpiry::ExpireDuration(IggyDuration::from(3_600_000_000u64))
    );
    assert_eq!(renamed.max_topic_size.as_bytes_u64(), 1 << 30);
    assert!(
        client
            .get_topic(&stream_id, &named("created"))
            .await
            .unwrap()
            .is_none()
    );

    let topic_id = named("renamed");
    client
        .create_partitions(&stream_id, &topic_id, 3)
        .await
        .expect("create partitions");
    let ids = |details: &TopicDetails| {
        let mut ids: Vec<u32> = details.partitions.iter().map(|p| p.id).collect();
        ids.sort();
        ids
    };
    let grown = client
        .get_topic(&stream_id, &topic_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&grown), vec![0, 1, 2, 3, 4]);
    send_to(&client, "orders-v2", "renamed", 4, messages("p4", 0, 2)).await;
    client
        .delete_partitions(&stream_id, &topic_id, 2)
        .await
        .expect("delete partitions");
    let shrunk = client
        .get_topic(&stream_id, &topic_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&shrunk), vec![0, 1, 2]);
    assert_code(
        client.delete_partitions(&stream_id, &topic_id, 10).await,
        2019,
        "delete more partitions than exist",
    );

    client
        .delete_topic(&stream_id, &named("second"))
        .await
        .expect("delete topic");
    assert_eq!(client.get_topics(&stream_id).await.unwrap().len(), 1);
    client
        .delete_stream(&stream_id)
        .await
        .expect("delete stream");
    assert!(client.get_stream(&stream_id).await.unwrap().is_none());
    assert_eq!(client.get_streams().await.unwrap().len(), 1);
    daemon.assert_clean_log();
}

/// Proves purging a topic and a stream deletes every message and stored
/// offset: the next poll (by offset or by next) never sees purged data,
/// partitions and the topic stay, and new messages start again at offset 0.
#[tokio::test]
async fn purge_topic_and_stream_hide_purged_messages() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "a", 2).await;
    client
        .create_topic(&named("s"), "b", &topic_options(1))
        .await
        .unwrap();
    let consumer = Consumer::new(named("reader"));
    for partition in 0..2 {
        send_to(&client, "s", "a", partition, messages("old", 0, 10)).await;
    }
    send_to(&client, "s", "b", 0, messages("old", 0, 10)).await;
    let first = poll(
        &client,
        "s",
        "a",
        0,
        &consumer,
        PollingStrategy::next(),
        4,
        true,
    )
    .await;
    assert_eq!(offsets(&first), vec![0, 1, 2, 3]);

    client
        .purge_topic(&named("s"), &named("a"))
        .await
        .expect("purge topic");
    for partition in 0..2 {
        let after = poll(
            &client,
            "s",
            "a",
            partition,
            &consumer,
            PollingStrategy::offset(0),
            100,
            false,
        )
        .await;
        assert!(
            after.messages.is_empty(),
            "purged partition {partition}: {after:?}"
        );
    }
    let untouched = poll(
        &client,
        "s",
        "b",
        0,
        &consumer,
        PollingStrategy::first(),
        100,
        false,
    )
    .await;
    assert_eq!(
        untouched.messages.len(),
        10,
        "other topic keeps its messages"
    );
    let topic = client
        .get_topic(&named("s"), &named("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(topic.partitions_count, 2);
    assert_eq!(topic.messages_count, 0);

    send_to(&client, "s", "a", 0, messages("new", 0, 3)).await;
    let next = poll(
        &client,
        "s",
        "a",
        0,
        &consumer,
        PollingStrategy::next(),
        100,
        true,
    )
    .await;
    assert_eq!(offsets(&next), vec![0, 1, 2], "stored offset was cleared");
    assert_eq!(payloads(&next), vec!["new-0", "new-1", "new-2"]);

    client
        .purge_stream(&named("s"))
        .await
        .expect("purge stream");
    for (topic, partition) in [("a", 0), ("a", 1), ("b", 0)] {
        let after = poll(
            &client,
            "s",
            topic,
            partition,
            &consumer,
            PollingStrategy::first(),
            100,
            false,
        )
        .await;
        assert!(
            after.messages.is_empty(),
            "{topic}/{partition} after stream purge"
        );
    }
    let stream = client.get_stream(&named("s")).await.unwrap().unwrap();
    assert_eq!(stream.topics_count, 2);
    assert_eq!(stream.messages_count, 0);
    daemon.assert_clean_log();
}

/// Proves DeleteSegments removes the oldest sealed segments of one partition
/// (segment count and the first readable offset move forward) and never the
/// active one, using a 1 MiB segment size set through the SDK's topic options.
#[tokio::test]
async fn delete_segments_removes_the_oldest_sealed_segments() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    client.create_stream("s").await.unwrap();
    let options = TopicCreateOptions {
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        ..topic_options(1)
    };
    client
        .create_topic(&named("s"), "t", &options)
        .await
        .unwrap();
    let payload = vec![b'x'; 16 * 1024];
    for _ in 0..10 {
        let mut batch: Vec<IggyMessage> = (0..16)
            .map(|_| IggyMessage::from(payload.clone()))
            .collect();
        client
            .send_messages(
                &named("s"),
                &named("t"),
                &Partitioning::partition_id(0),
                &mut batch,
            )
            .await
            .unwrap();
    }
    let before = client
        .get_topic(&named("s"), &named("t"))
        .await
        .unwrap()
        .unwrap();
    let segments_before = before.partitions[0].segments_count;
    assert!(
        segments_before >= 3,
        "2.5 MiB in 1 MiB segments: {before:?}"
    );

    client
        .delete_segments(&named("s"), &named("t"), 0, 1)
        .await
        .expect("delete segments");
    let after = client
        .get_topic(&named("s"), &named("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.partitions[0].segments_count, segments_before - 1);
    let consumer = Consumer::new(named("c"));
    let first = poll(
        &client,
        "s",
        "t",
        0,
        &consumer,
        PollingStrategy::first(),
        1,
        false,
    )
    .await;
    assert!(first.messages[0].header.offset > 0, "oldest segment gone");

    client
        .delete_segments(&named("s"), &named("t"), 0, 1000)
        .await
        .expect("delete all sealed segments");
    let last = client
        .get_topic(&named("s"), &named("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        last.partitions[0].segments_count, 1,
        "the active segment stays"
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
    assert_eq!(offsets(&tail), vec![159]);
    daemon.assert_clean_log();
}

/// Proves read-after-acknowledge across connections: once a metadata change
/// (here: create stream, join group) is acknowledged on one connection, every
/// other connection sees it on its very next request, whichever shard its
/// connection landed on (client ids carry the shard in their top byte; the
/// test opens up to 16 connections to cover at least two shards when the
/// daemon runs more than one).
#[tokio::test]
async fn an_acknowledged_change_is_visible_on_every_connection() {
    let daemon = SdkDaemon::start();
    let mut clients = Vec::new();
    let mut shards = std::collections::BTreeSet::new();
    for _ in 0..16 {
        let client = daemon.root_client().await;
        shards.insert(client.get_me().await.unwrap().client_id >> 24);
        clients.push(client);
        if shards.len() >= 2 && clients.len() >= 4 {
            break;
        }
    }
    for round in 0..40 {
        let writer = &clients[round % clients.len()];
        let name = format!("s{round}");
        writer.create_stream(&name).await.expect("create stream");
        for (index, reader) in clients.iter().enumerate() {
            assert!(
                reader.get_stream(&named(&name)).await.unwrap().is_some(),
                "round {round}: connection {index} does not see the acknowledged stream"
            );
        }
    }
    daemon.assert_clean_log();
}
