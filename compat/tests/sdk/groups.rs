//! Consumer groups: two members, rebalancing on leave and on disconnect,
//! and the cooperative hand-off when a member joins mid-stream.

use crate::common::*;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const PARTITIONS: u32 = 4;

async fn group(client: &IggyClient) -> ConsumerGroupDetails {
    client
        .get_consumer_group(&named("s"), &named("t"), &named("g"))
        .await
        .expect("get group")
        .expect("group exists")
}

/// Partitions per member, sorted, from GetConsumerGroup.
async fn assignment(client: &IggyClient) -> Vec<Vec<u32>> {
    let mut members: Vec<Vec<u32>> = group(client)
        .await
        .members
        .into_iter()
        .map(|member| {
            let mut partitions = member.partitions;
            partitions.sort();
            partitions
        })
        .collect();
    members.sort();
    members
}

/// Poll as a group member (the SDK picks the partition from its synced
/// assignment) until a full round of the member's partitions comes back
/// empty; returns the messages per partition.
async fn drain_as_member(client: &IggyClient) -> BTreeMap<u32, Vec<String>> {
    let consumer = Consumer::group(named("g"));
    let mut seen: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut empty_in_a_row = 0;
    for _ in 0..200 {
        let polled = client
            .poll_messages(
                &named("s"),
                &named("t"),
                None,
                &consumer,
                &PollingStrategy::next(),
                100,
                true,
            )
            .await
            .expect("group poll");
        if polled.messages.is_empty() {
            empty_in_a_row += 1;
            if empty_in_a_row > PARTITIONS as usize {
                return seen;
            }
            continue;
        }
        empty_in_a_row = 0;
        seen.entry(polled.partition_id)
            .or_default()
            .extend(payloads(&polled));
    }
    panic!("group polling never ran dry: {seen:?}");
}

/// The SDK's own group re-sync, exactly what its heartbeat task runs after
/// each successful ping (SyncConsumerGroup for every joined group). Called on
/// the inner transport: in iggy 0.11.0 `IggyClient`'s own
/// `refresh_consumer_group_assignments` is the trait's no-op default.
async fn sync_assignment(client: &IggyClient) {
    use iggy::prelude::locking::IggyRwLockFn;
    client
        .client()
        .read()
        .await
        .refresh_consumer_group_assignments()
        .await;
}

async fn produce_round(client: &IggyClient, round: &str) {
    for partition in 0..PARTITIONS {
        send_to(
            client,
            "s",
            "t",
            partition,
            messages(&format!("{round}-p{partition}"), 0, 5),
        )
        .await;
    }
}

/// Proves consumer groups work with the SDK's client-side partitioning: two
/// members split the partitions with no overlap and together consume every
/// message exactly once; when one leaves, and later when one just drops its
/// connection (no logout), the other gets all partitions after its next sync
/// and then consumes from every partition.
#[tokio::test]
async fn two_members_rebalance_on_leave_and_on_disconnect() {
    let daemon = SdkDaemon::start();
    let admin = daemon.root_client().await;
    stream_with_topic(&admin, "s", "t", PARTITIONS).await;
    let created = admin
        .create_consumer_group(&named("s"), &named("t"), "g")
        .await
        .expect("create group");
    assert_eq!(created.members_count, 0);
    assert_eq!(created.partitions_count, PARTITIONS);
    produce_round(&admin, "r1").await;

    let a = daemon.root_client().await;
    let b = daemon.root_client().await;
    let (s, t, g) = (named("s"), named("t"), named("g"));
    a.join_consumer_group(&s, &t, &g).await.expect("a joins");
    assert_eq!(assignment(&admin).await, vec![vec![0, 1, 2, 3]]);
    a.join_consumer_group(&s, &t, &g)
        .await
        .expect("joining twice is idempotent");
    b.join_consumer_group(&s, &t, &g).await.expect("b joins");
    let split = |members: &Vec<Vec<u32>>| {
        members.len() == 2
            && members.iter().all(|partitions| partitions.len() == 2)
            && members.iter().flatten().collect::<BTreeSet<_>>().len() == 4
    };
    eventually(
        Duration::from_secs(10),
        "two members, two partitions each",
        || async { split(&assignment(&admin).await) },
    )
    .await;
    assert_eq!(a.get_me().await.unwrap().consumer_groups_count, 1);

    sync_assignment(&a).await;
    sync_assignment(&b).await;
    let from_a = drain_as_member(&a).await;
    let from_b = drain_as_member(&b).await;
    let partitions_a: BTreeSet<u32> = from_a.keys().copied().collect();
    let partitions_b: BTreeSet<u32> = from_b.keys().copied().collect();
    assert_eq!(partitions_a.len(), 2, "{from_a:?}");
    assert!(
        partitions_a.is_disjoint(&partitions_b),
        "{from_a:?} / {from_b:?}"
    );
    for (partition, payloads) in from_a.iter().chain(from_b.iter()) {
        let expected: Vec<String> = (0..5).map(|i| format!("r1-p{partition}-{i}")).collect();
        assert_eq!(
            payloads, &expected,
            "partition {partition} exactly once, in order"
        );
    }

    // Leave: A takes everything after its next sync.
    b.leave_consumer_group(&s, &t, &g).await.expect("b leaves");
    assert_eq!(assignment(&admin).await, vec![vec![0, 1, 2, 3]]);
    produce_round(&admin, "r2").await;
    sync_assignment(&a).await;
    let after_leave = drain_as_member(&a).await;
    assert_eq!(
        after_leave.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    for (partition, payloads) in &after_leave {
        let expected: Vec<String> = (0..5).map(|i| format!("r2-p{partition}-{i}")).collect();
        assert_eq!(payloads, &expected, "group offsets survive the rebalance");
    }

    // Disconnect without logout: the daemon ends B's membership itself.
    b.join_consumer_group(&s, &t, &g)
        .await
        .expect("b joins again");
    eventually(Duration::from_secs(10), "b is back", || async {
        split(&assignment(&admin).await)
    })
    .await;
    b.shutdown().await.expect("b drops its connection");
    eventually(
        Duration::from_secs(10),
        "a alone after b disconnected",
        || async { assignment(&admin).await == vec![vec![0, 1, 2, 3]] },
    )
    .await;
    produce_round(&admin, "r3").await;
    sync_assignment(&a).await;
    let after_disconnect = drain_as_member(&a).await;
    assert_eq!(
        after_disconnect.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );

    a.leave_consumer_group(&s, &t, &g).await.expect("a leaves");
    assert_eq!(group(&admin).await.members_count, 0);
    admin
        .delete_consumer_group(&s, &t, &g)
        .await
        .expect("delete group");
    assert!(
        admin
            .get_consumer_group(&s, &t, &g)
            .await
            .unwrap()
            .is_none()
    );
    daemon.assert_clean_log();
}

/// Commit `offset` of `partition` for the group; false when the daemon
/// refused (a partition the member no longer owns).
async fn commit(client: &IggyClient, partition: u32, offset: u64) -> bool {
    client
        .store_consumer_offset(
            &Consumer::group(named("g")),
            &named("s"),
            &named("t"),
            Some(partition),
            offset,
        )
        .await
        .is_ok()
}

/// One member step: poll (the SDK picks a partition from its synced
/// assignment) and keep what came back; with `commit`, commit the last
/// offset served. Returns the partition and last offset served.
async fn consume_step(
    client: &IggyClient,
    received: &mut Vec<(u32, u64, String)>,
    commit_now: bool,
) -> Option<(u32, u64)> {
    let consumer = Consumer::group(named("g"));
    let polled = client
        .poll_messages(
            &named("s"),
            &named("t"),
            None,
            &consumer,
            &PollingStrategy::next(),
            3,
            false,
        )
        .await
        .expect("group poll");
    for message in &polled.messages {
        received.push((
            polled.partition_id,
            message.header.offset,
            String::from_utf8_lossy(&message.payload).into_owned(),
        ));
    }
    let last = polled.messages.last()?.header.offset;
    if commit_now {
        commit(client, polled.partition_id, last).await;
    }
    Some((polled.partition_id, last))
}

/// Proves a join mid-stream is cooperative: member A consumes with manual
/// commits and holds polled but uncommitted messages when B joins; the
/// partitions B gets stay with A until A has committed what it polled, so
/// between them every message is delivered exactly once — none twice (B
/// never re-reads what A polled), none skipped.
#[tokio::test]
async fn a_member_joining_mid_stream_rereads_nothing() {
    let daemon = SdkDaemon::start();
    let admin = daemon.root_client().await;
    stream_with_topic(&admin, "s", "t", PARTITIONS).await;
    admin
        .create_consumer_group(&named("s"), &named("t"), "g")
        .await
        .expect("create group");
    for partition in 0..PARTITIONS {
        send_to(
            &admin,
            "s",
            "t",
            partition,
            messages(&format!("p{partition}"), 0, 12),
        )
        .await;
    }
    let total = (PARTITIONS * 12) as usize;
    let (s, t, g) = (named("s"), named("t"), named("g"));
    let a = daemon.root_client().await;
    let b = daemon.root_client().await;
    a.join_consumer_group(&s, &t, &g).await.expect("a joins");
    sync_assignment(&a).await;
    let mut from_a = Vec::new();
    let mut from_b = Vec::new();
    // A reads a little from every partition and commits, then reads once
    // more from each: those messages are in flight (polled, processing,
    // not yet committed) when B joins.
    for _ in 0..PARTITIONS {
        consume_step(&a, &mut from_a, true).await;
    }
    let mut in_flight = Vec::new();
    for _ in 0..PARTITIONS {
        in_flight.extend(consume_step(&a, &mut from_a, false).await);
    }
    assert_eq!(in_flight.len(), PARTITIONS as usize);
    b.join_consumer_group(&s, &t, &g).await.expect("b joins");
    sync_assignment(&b).await;
    assert!(
        assignment(&admin).await.contains(&vec![]),
        "B's share waits for A: {:?}",
        assignment(&admin).await
    );
    // B polls meanwhile; A finishes processing and commits what it holds.
    consume_step(&b, &mut from_b, true).await;
    for (partition, offset) in in_flight {
        assert!(
            commit(&a, partition, offset).await,
            "A may commit what it polled from partition {partition}"
        );
    }
    // Both consume to the end, syncing now and then as the SDK's
    // heartbeat does.
    for step in 0..400 {
        if from_a.len() + from_b.len() >= total {
            break;
        }
        consume_step(&a, &mut from_a, true).await;
        consume_step(&b, &mut from_b, true).await;
        if step % 4 == 3 {
            sync_assignment(&a).await;
            sync_assignment(&b).await;
        }
    }
    let mut seen = BTreeMap::new();
    for (partition, offset, payload) in from_a.iter().chain(from_b.iter()) {
        let earlier = seen.insert((*partition, *offset), payload.clone());
        assert!(
            earlier.is_none(),
            "partition {partition} offset {offset} was delivered twice (A: {}, B: {})",
            from_a.len(),
            from_b.len()
        );
    }
    assert_eq!(seen.len(), total, "every message, once");
    for partition in 0..PARTITIONS {
        let payloads: Vec<&String> = seen
            .range((partition, 0)..(partition + 1, 0))
            .map(|(_, payload)| payload)
            .collect();
        let expected: Vec<String> = (0..12).map(|i| format!("p{partition}-{i}")).collect();
        assert_eq!(payloads, expected.iter().collect::<Vec<_>>());
    }
    assert!(!from_b.is_empty(), "B took its share");
    let loads: Vec<usize> = assignment(&admin).await.iter().map(Vec::len).collect();
    assert_eq!(loads, vec![2, 2], "the group ends balanced");
    daemon.assert_clean_log();
}
