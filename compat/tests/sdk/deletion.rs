//! Deletion is total and durable, through the official SDK: data that was
//! deleted never comes back (not with an undeletable file, not after a
//! `kill -9` before its files were removed, not when a stream or topic is
//! created again under the same name), deleted data leaves the disk once it
//! can, and a data directory written in the previous layout is adopted
//! without losing anything. The delete/create race with persisted sends is
//! in `deletion_race.rs`.

use crate::common::*;
use iggy::prelude::*;
use std::path::Path;
use std::time::Duration;

/// Polls one partition from offset 0 as a throwaway consumer.
async fn from_zero(client: &IggyClient, stream: &str, topic: &str, partition: u32) -> Vec<String> {
    let polled = poll(
        client,
        stream,
        topic,
        partition,
        &Consumer::new(named("reader")),
        PollingStrategy::offset(0),
        1000,
        false,
    )
    .await;
    payloads(&polled)
}

/// Waits until the trash is empty on disk and in the admin snapshot.
async fn trash_emptied(daemon: &SdkDaemon) {
    eventually(Duration::from_secs(60), "the trash is emptied", || async {
        daemon.admin_snapshot().process.pending_removal.entries == 0
            && daemon.data_entries("trash").is_empty()
    })
    .await;
}

/// Proves a stream whose partition file cannot be removed (`chattr +i`, as
/// a failing disk would) is deleted for good anyway: the delete succeeds,
/// the stream created again under the same name serves nothing of the old
/// one (polling from 0 returns nothing), before and after a restart; the
/// admin snapshot reports the data as pending removal and failing; once the
/// file can be removed again the trash empties.
#[tokio::test]
async fn an_undeletable_partition_file_never_comes_back() {
    let mut daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "s", "t", 1).await;
    send_to(&client, "s", "t", 0, messages("old", 0, 10)).await;
    let Some(immutable) = Immutable::guard(&daemon.data_dir()) else {
        return;
    };
    let partitions = daemon.data_entries("partitions");
    assert_eq!(partitions.len(), 1, "{partitions:?}");
    let log = daemon
        .data_dir()
        .join("partitions")
        .join(&partitions[0])
        .join("00000000000000000000.log");
    immutable.set(&log);

    client
        .delete_stream(&named("s"))
        .await
        .expect("the delete succeeds although a file cannot be removed");
    assert!(daemon.data_entries("partitions").is_empty());
    stream_with_topic(&client, "s", "t", 1).await;
    assert_eq!(from_zero(&client, "s", "t", 0).await, Vec::<String>::new());
    eventually(
        Duration::from_secs(10),
        "the undeletable data is reported",
        || async {
            let pending = daemon.admin_snapshot().process.pending_removal;
            pending.entries == 1 && pending.failing == 1 && pending.bytes > 0
        },
    )
    .await;
    let error = daemon.admin_snapshot().process.pending_removal.last_error;
    assert!(
        error
            .as_deref()
            .is_some_and(|error| error.contains("00000000000000000000.log")),
        "{error:?}"
    );
    client.shutdown().await.ok();

    daemon.stop();
    daemon.restart();
    let client = daemon.root_client().await;
    assert_eq!(from_zero(&client, "s", "t", 0).await, Vec::<String>::new());
    let topic = client
        .get_topic(&named("s"), &named("t"))
        .await
        .unwrap()
        .expect("the new topic");
    assert_eq!(topic.messages_count, 0);
    eventually(
        Duration::from_secs(10),
        "still reported after the restart",
        || async { daemon.admin_snapshot().process.pending_removal.failing == 1 },
    )
    .await;
    immutable.clear();
    trash_emptied(&daemon).await;
    assert_eq!(daemon.data_entries("partitions").len(), 1);
    client.shutdown().await.ok();
    daemon.assert_clean_log();
}

/// Proves a `kill -9` between a delete's acknowledgement and the removal of
/// its files brings nothing back: the restart finds the deleted data in the
/// trash (a file kept undeletable until the kill makes sure the cleanup had
/// not finished), never serves it, and a stream, topic and consumer group
/// created again under the same names start empty (no messages, no stored
/// offsets, no groups); then the trash empties.
#[tokio::test]
async fn kill_9_after_a_delete_leaves_no_trace() {
    let mut daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "k", "t", 2).await;
    for partition in 0..2 {
        send_to(&client, "k", "t", partition, messages("old", 0, 20)).await;
    }
    let consumer = Consumer::new(named("c"));
    client
        .store_consumer_offset(&consumer, &named("k"), &named("t"), Some(0), 7)
        .await
        .expect("store offset");
    client
        .create_consumer_group(&named("k"), &named("t"), "g")
        .await
        .expect("create group");
    let Some(immutable) = Immutable::guard(&daemon.data_dir()) else {
        return;
    };
    let partitions = daemon.data_entries("partitions");
    assert_eq!(partitions.len(), 2, "{partitions:?}");
    immutable.set(
        &daemon
            .data_dir()
            .join("partitions")
            .join(&partitions[1])
            .join("00000000000000000000.log"),
    );
    client
        .delete_stream(&named("k"))
        .await
        .expect("delete stream");
    daemon.kill();
    immutable.clear();

    daemon.restart();
    assert!(
        daemon.log().contains("deleted data pending removal"),
        "start-up says what is pending removal"
    );
    let client = daemon.root_client().await;
    assert!(client.get_stream(&named("k")).await.unwrap().is_none());
    stream_with_topic(&client, "k", "t", 2).await;
    client
        .create_consumer_group(&named("k"), &named("t"), "g")
        .await
        .expect("a group of the same name on the new topic");
    for partition in 0..2 {
        assert_eq!(
            from_zero(&client, "k", "t", partition).await,
            Vec::<String>::new(),
            "partition {partition} of the new topic"
        );
    }
    let stored = client
        .get_consumer_offset(&consumer, &named("k"), &named("t"), Some(0))
        .await
        .unwrap();
    assert!(
        stored.is_none(),
        "the old topic's offset came back: {stored:?}"
    );
    let groups = client
        .get_consumer_groups(&named("k"), &named("t"))
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
    trash_emptied(&daemon).await;
    assert_eq!(daemon.data_entries("partitions").len(), 2);
    client.shutdown().await.ok();
    daemon.assert_clean_log();
}

/// What `fixtures/legacy-layout-v1` holds, checked after the upgrade.
async fn check_upgraded(client: &IggyClient, extra_on_p0: usize) {
    for partition in 0..3u32 {
        let mut expected: Vec<String> = (0..10)
            .map(|index| format!("created{partition}-{index}"))
            .collect();
        if partition == 0 {
            expected.extend((0..extra_on_p0).map(|index| format!("after-{index}")));
        }
        assert_eq!(
            from_zero(client, "orders", "created", partition).await,
            expected,
            "orders/created partition {partition}"
        );
    }
    for partition in 0..2u32 {
        let expected: Vec<String> = (0..5)
            .map(|index| format!("updated{partition}-{index}"))
            .collect();
        assert_eq!(
            from_zero(client, "orders", "updated", partition).await,
            expected,
            "orders/updated partition {partition}"
        );
    }
    let stored = client
        .get_consumer_offset(
            &Consumer::new(named("c1")),
            &named("orders"),
            &named("created"),
            Some(0),
        )
        .await
        .unwrap()
        .expect("the consumer offset survived the upgrade");
    assert_eq!(stored.stored_offset, 4);
    let group = client
        .get_consumer_group(&named("orders"), &named("created"), &named("g1"))
        .await
        .unwrap()
        .expect("the consumer group survived the upgrade");
    assert_eq!(group.partitions_count, 3);
    assert!(
        client.get_stream(&named("gone")).await.unwrap().is_none(),
        "a deleted stream stays deleted"
    );
}

/// Proves a data directory written by iggyd before storage ids existed
/// (`streams/<s>/topics/<t>/partitions/<p>`, a version-1 metadata snapshot
/// plus journal records after it: `fixtures/legacy-layout-v1`, written by
/// that version through the SDK) is adopted without losing anything:
/// every message, consumer offset and group is served as before, before
/// and after a restart, new messages get the next offsets; the old
/// directory of a stream whose delete could not remove it (an undeletable
/// file at the time) is not served, not even to a stream created again
/// under its name and ids, and leaves the disk.
#[tokio::test]
async fn a_data_directory_in_the_old_layout_is_adopted() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy-layout-v1");
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&fixture, &dir.path().join("data"));
    let mut daemon = SdkDaemon::start_in(dir, &[]);
    assert!(
        daemon
            .log()
            .contains("partition directory moved to the new layout")
    );
    let entries = daemon.data_entries("");
    assert!(!entries.contains(&"streams".to_string()), "{entries:?}");
    assert_eq!(daemon.data_entries("partitions").len(), 5);
    let client = daemon.root_client().await;
    check_upgraded(&client, 0).await;
    send_to(&client, "orders", "created", 0, messages("after", 0, 2)).await;
    let polled = poll(
        &client,
        "orders",
        "created",
        0,
        &Consumer::new(named("reader")),
        PollingStrategy::offset(10),
        10,
        false,
    )
    .await;
    assert_eq!(offsets(&polled), vec![10, 11]);
    // The deleted stream's leftovers (stream id 1, topic 0, partition 0)
    // are not served to a new stream that gets the same ids.
    stream_with_topic(&client, "gone", "t", 1).await;
    let stream = client.get_stream(&named("gone")).await.unwrap().unwrap();
    assert_eq!(stream.id, 1);
    assert_eq!(
        from_zero(&client, "gone", "t", 0).await,
        Vec::<String>::new()
    );
    client.delete_stream(&named("gone")).await.unwrap();
    trash_emptied(&daemon).await;
    client.shutdown().await.ok();

    daemon.stop();
    daemon.restart();
    let client = daemon.root_client().await;
    check_upgraded(&client, 2).await;
    assert_eq!(daemon.data_entries("partitions").len(), 5);
    client.shutdown().await.ok();
    daemon.assert_clean_log();
}
