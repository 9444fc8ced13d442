//! Sending, polling with every strategy, consumer offsets and flush.

use crate::common::*;
use iggy::prelude::*;

/// Proves sends land on the explicit partition the producer names (and that
/// Balanced and MessagesKey, resolved client-side, land where the SDK says),
/// with payloads and user headers intact, and that polling by offset,
/// timestamp, first, last and next (with auto-commit) returns exactly the
/// right slice of each partition.
#[tokio::test]
async fn send_to_partitions_and_poll_with_every_strategy() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "t", 3).await;
    for partition in 0..3 {
        send_to(
            &client,
            "s",
            "t",
            partition,
            messages(&format!("p{partition}"), 0, 10),
        )
        .await;
    }
    let consumer = Consumer::new(named("c1"));
    for partition in 0..3 {
        let all = poll(
            &client,
            "s",
            "t",
            partition,
            &consumer,
            PollingStrategy::first(),
            100,
            false,
        )
        .await;
        assert_eq!(all.partition_id, partition);
        assert_eq!(all.current_offset, 9);
        assert_eq!(offsets(&all), (0..10).collect::<Vec<u64>>());
        let expected: Vec<String> = (0..10).map(|i| format!("p{partition}-{i}")).collect();
        assert_eq!(
            payloads(&all),
            expected,
            "partition {partition} got its own messages"
        );
        for (index, message) in all.messages.iter().enumerate() {
            let headers = message.user_headers_map().unwrap().expect("headers");
            let index_header = &headers[&HeaderKey::try_from("index").unwrap()];
            assert_eq!(u64::try_from(index_header).unwrap(), index as u64);
            let prefix = &headers[&HeaderKey::try_from("prefix").unwrap()];
            assert_eq!(prefix.as_str().unwrap(), format!("p{partition}"));
            assert!(message.header.timestamp > 0, "server append time");
        }
    }

    let by_offset = poll(
        &client,
        "s",
        "t",
        1,
        &consumer,
        PollingStrategy::offset(7),
        100,
        false,
    )
    .await;
    assert_eq!(offsets(&by_offset), vec![7, 8, 9]);
    let capped = poll(
        &client,
        "s",
        "t",
        1,
        &consumer,
        PollingStrategy::offset(2),
        3,
        false,
    )
    .await;
    assert_eq!(offsets(&capped), vec![2, 3, 4]);
    let past_end = poll(
        &client,
        "s",
        "t",
        1,
        &consumer,
        PollingStrategy::offset(10),
        100,
        false,
    )
    .await;
    assert!(past_end.messages.is_empty());
    let last = poll(
        &client,
        "s",
        "t",
        2,
        &consumer,
        PollingStrategy::last(),
        3,
        false,
    )
    .await;
    assert_eq!(offsets(&last), vec![7, 8, 9]);

    // Timestamp: a second batch appended later is found by its append time.
    let first_batch = poll(
        &client,
        "s",
        "t",
        0,
        &consumer,
        PollingStrategy::offset(9),
        1,
        false,
    )
    .await;
    let boundary = first_batch.messages[0].header.timestamp + 1;
    let mut waited = 0;
    loop {
        // The append clock has microsecond resolution: make sure the next
        // batch is stamped after `boundary`.
        let now = IggyTimestamp::now().as_micros();
        if now > boundary {
            break;
        }
        waited += 1;
        assert!(waited < 1_000_000, "clock does not advance");
        std::hint::spin_loop();
    }
    send_to(&client, "s", "t", 0, messages("late", 0, 4)).await;
    let by_time = poll(
        &client,
        "s",
        "t",
        0,
        &consumer,
        PollingStrategy::timestamp(IggyTimestamp::from(boundary)),
        100,
        false,
    )
    .await;
    assert_eq!(
        payloads(&by_time),
        vec!["late-0", "late-1", "late-2", "late-3"]
    );
    assert_eq!(offsets(&by_time), vec![10, 11, 12, 13]);

    // Next with auto-commit walks the partition once, then comes back empty.
    let mut seen = Vec::new();
    loop {
        let next = poll(
            &client,
            "s",
            "t",
            2,
            &consumer,
            PollingStrategy::next(),
            4,
            true,
        )
        .await;
        if next.messages.is_empty() {
            break;
        }
        seen.extend(offsets(&next));
    }
    assert_eq!(seen, (0..10).collect::<Vec<u64>>());
    let stored = client
        .get_consumer_offset(&consumer, &named("s"), &named("t"), Some(2))
        .await
        .unwrap()
        .expect("auto-commit stored an offset");
    assert_eq!(stored.stored_offset, 9);

    // Balanced (round-robin) and MessagesKey are resolved by the SDK into
    // explicit partitions; whatever it picked must hold the messages.
    let balanced_topic = "balanced";
    client
        .create_topic(&named("s"), balanced_topic, &topic_options(2))
        .await
        .unwrap();
    for index in 0..4 {
        let mut batch = messages("bal", index, 1);
        client
            .send_messages(
                &named("s"),
                &named(balanced_topic),
                &Partitioning::balanced(),
                &mut batch,
            )
            .await
            .unwrap();
    }
    let mut keyed = messages("key", 0, 3);
    client
        .send_messages(
            &named("s"),
            &named(balanced_topic),
            &Partitioning::messages_key_str("customer-42").unwrap(),
            &mut keyed,
        )
        .await
        .unwrap();
    let mut counts = Vec::new();
    let mut key_partitions = Vec::new();
    for partition in 0..2 {
        let polled = poll(
            &client,
            "s",
            balanced_topic,
            partition,
            &consumer,
            PollingStrategy::first(),
            100,
            false,
        )
        .await;
        counts.push(
            payloads(&polled)
                .iter()
                .filter(|p| p.starts_with("bal"))
                .count(),
        );
        if payloads(&polled).iter().any(|p| p.starts_with("key")) {
            key_partitions.push(partition);
        }
    }
    assert_eq!(counts, vec![2, 2], "balanced spreads evenly");
    assert_eq!(key_partitions.len(), 1, "one key, one partition");
    daemon.assert_clean_log();
}

/// Proves stored consumer offsets: store, get (stored and current offset),
/// next-polling resumes after the stored offset, delete (then none, and a
/// second delete is 3021), storing past the end is 4100, and offsets are per
/// consumer and per partition.
#[tokio::test]
async fn consumer_offsets_store_get_delete() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "t", 2).await;
    send_to(&client, "s", "t", 0, messages("m", 0, 10)).await;
    send_to(&client, "s", "t", 1, messages("m", 0, 10)).await;
    let (s, t) = (named("s"), named("t"));
    let c1 = Consumer::new(named("c1"));
    let c2 = Consumer::new(numeric(7));

    assert!(
        client
            .get_consumer_offset(&c1, &s, &t, Some(0))
            .await
            .unwrap()
            .is_none()
    );
    client
        .store_consumer_offset(&c1, &s, &t, Some(0), 5)
        .await
        .expect("store");
    let stored = client
        .get_consumer_offset(&c1, &s, &t, Some(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            stored.partition_id,
            stored.stored_offset,
            stored.current_offset
        ),
        (0, 5, 9)
    );
    assert!(
        client
            .get_consumer_offset(&c1, &s, &t, Some(1))
            .await
            .unwrap()
            .is_none(),
        "per partition"
    );
    assert!(
        client
            .get_consumer_offset(&c2, &s, &t, Some(0))
            .await
            .unwrap()
            .is_none(),
        "per consumer"
    );

    let next = poll(&client, "s", "t", 0, &c1, PollingStrategy::next(), 2, false).await;
    assert_eq!(
        offsets(&next),
        vec![6, 7],
        "next resumes after the stored offset"
    );
    assert_code(
        client.store_consumer_offset(&c1, &s, &t, Some(0), 10).await,
        4100,
        "offset past the end",
    );

    client
        .store_consumer_offset(&c2, &s, &t, Some(1), 2)
        .await
        .unwrap();
    client
        .delete_consumer_offset(&c1, &s, &t, Some(0))
        .await
        .expect("delete");
    assert!(
        client
            .get_consumer_offset(&c1, &s, &t, Some(0))
            .await
            .unwrap()
            .is_none()
    );
    assert_code(
        client.delete_consumer_offset(&c1, &s, &t, Some(0)).await,
        3021,
        "delete twice",
    );
    let from_start = poll(&client, "s", "t", 0, &c1, PollingStrategy::next(), 1, false).await;
    assert_eq!(offsets(&from_start), vec![0]);
    let other = client
        .get_consumer_offset(&c2, &s, &t, Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        other.stored_offset, 2,
        "another consumer's offset is untouched"
    );
    daemon.assert_clean_log();
}

/// Proves FlushUnsavedBuffer (with and without fsync) succeeds on an existing
/// partition and the data stays readable, and names a missing partition.
#[tokio::test]
async fn flush_unsaved_buffer() {
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "t", 1).await;
    send_to(&client, "s", "t", 0, messages("m", 0, 3)).await;
    client
        .flush_unsaved_buffer(&named("s"), &named("t"), 0, true)
        .await
        .expect("flush with fsync");
    client
        .flush_unsaved_buffer(&named("s"), &named("t"), 0, false)
        .await
        .expect("flush without fsync");
    assert_code(
        client
            .flush_unsaved_buffer(&named("s"), &named("t"), 5, true)
            .await,
        3007,
        "flush a missing partition",
    );
    let consumer = Consumer::new(named("c"));
    let polled = poll(
        &client,
        "s",
        "t",
        0,
        &consumer,
        PollingStrategy::first(),
        10,
        false,
    )
    .await;
    assert_eq!(polled.messages.len(), 3);
    daemon.assert_clean_log();
}
