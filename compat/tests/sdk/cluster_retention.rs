//! Retention on a replicated topic, real processes: a node killed while
//! the other two delete their oldest segments (`max_topic_size`) comes
//! back behind their purge point, is sent its partition group's snapshot,
//! starts its log at the snapshot's offset, and then holds every message
//! acknowledged after it, the same bytes as the others. A purge and
//! delete-segments through the SDK delete the same messages on every node,
//! one that was away included.

use crate::cluster::{Cluster, Layout, NODES, agreed_leader, client_of};
use crate::cluster_admin::cli;
use crate::common::*;
use iggy::prelude::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// Messages of 16 KiB, eight to a send: 1 MiB every eight sends.
const PAYLOAD: usize = 16 * 1024;
const PER_SEND: u64 = 8;

/// Three nodes (retention checked every 200 ms) with stream `r` and its
/// topic `t` of one partition in 1 MiB segments, capped at `max_size`;
/// the metadata leader and a client of it.
async fn cluster_with_topic(max_size: Option<MaxTopicSize>) -> (Cluster, u64, IggyClient) {
    let layout = Layout::loopback_for(NODES);
    let cluster = Cluster::start_with_env(
        &layout,
        Some(("500ms", "100ms")),
        NODES,
        &[("IGGYD_RETENTION__CHECK_INTERVAL", "200ms")],
    );
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    let client = client_of(&cluster, leader).await;
    client.create_stream("r").await.expect("stream");
    let options = TopicCreateOptions {
        segment_size: Some(IggyByteSize::from(MIB)),
        max_topic_size: max_size,
        ..topic_options(1)
    };
    client
        .create_topic(&named("r"), "t", &options)
        .await
        .expect("topic");
    (cluster, leader, client)
}

/// Waits (30 s at most) until node `id` logs that it installed its
/// leader's snapshot.
async fn installed_snapshot(cluster: &mut Cluster, id: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cluster
        .node(id)
        .log()
        .contains("installed the leader's snapshot")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "node {id} never installed the snapshot"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends messages `first..end` (each payload starts with its number, so
/// message `n` of one producer lands at offset `n`).
async fn send(client: &IggyClient, first: u64, end: u64) {
    let mut next = first;
    while next < end {
        let mut batch: Vec<IggyMessage> = (next..end.min(next + PER_SEND))
            .map(|number| {
                let mut bytes = vec![b'r'; PAYLOAD];
                bytes[..8].copy_from_slice(&number.to_le_bytes());
                IggyMessage::from(bytes)
            })
            .collect();
        let count = batch.len() as u64;
        client
            .send_messages(
                &named("r"),
                &named("t"),
                &Partitioning::partition_id(0),
                &mut batch,
            )
            .await
            .expect("a send");
        next += count;
    }
}

/// What node `id` serves of partition 0 of `r`/`t` as the metadata
/// leader: see [`copy_of_topic`].
async fn copy_of(cluster: &Cluster, id: u64) -> Vec<(u64, u64)> {
    copy_of_topic(cluster, id, "r", "t").await
}

/// What node `id` serves of partition 0 of `stream`/`topic` as the
/// metadata leader (only the metadata leader answers polls; it serves its
/// own copy): each message's offset and the number its payload starts
/// with, from its first message on. The leadership is moved to `id` first
/// (`iggyd cluster transfer-leader` on the leader).
pub(crate) async fn copy_of_topic(
    cluster: &Cluster,
    id: u64,
    stream: &str,
    topic: &str,
) -> Vec<(u64, u64)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let leader = agreed_leader(cluster, &[1, 2, 3]).await;
        if leader == id {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node {id} never led");
        let socket = cluster.admin_socket(leader);
        let to = id.to_string();
        let out =
            tokio::task::spawn_blocking(move || cli(&socket, &["transfer-leader", "--to", &to]))
                .await
                .expect("the transfer");
        if out.code() != Some(0) {
            eprintln!("cluster: transfer to {id}: {out:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let client = client_of(cluster, id).await;
    let consumer = Consumer::new(named("checker"));
    let mut copy = Vec::new();
    let mut strategy = PollingStrategy::first();
    loop {
        let polled = client
            .poll_messages(
                &named(stream),
                &named(topic),
                Some(0),
                &consumer,
                &strategy,
                64,
                false,
            )
            .await
            .expect("a poll");
        if polled.messages.is_empty() {
            return copy;
        }
        for message in &polled.messages {
            let number = u64::from_le_bytes(message.payload[..8].try_into().expect("8 bytes"));
            copy.push((message.header.offset, number));
        }
        let last = copy.last().map_or(0, |(offset, _)| *offset);
        strategy = PollingStrategy::offset(last + 1);
    }
}

// Proves retention on a replicated topic with a node away: node `away` is
// SIGKILLed after the first 1 MiB, 6 MiB more are sent, the two nodes
// left delete their oldest segments down to the 3 MiB cap (each once its
// group purged the entries naming them); `away` restarts behind their
// purge point, installs the snapshot (its log starts again at the
// snapshot's offset, past messages no node holds any more), and then
// serves every message from there to the last one acknowledged, dense and
// the same as the others serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_away_while_retention_ran_installs_the_snapshot_and_holds_the_rest() {
    let (mut cluster, leader, client) =
        cluster_with_topic(Some(MaxTopicSize::Custom(IggyByteSize::from(3 * MIB)))).await;
    let first_mib = MIB / PAYLOAD as u64;
    send(&client, 0, first_mib).await;
    // A node other than the metadata leader, which stays up.
    let away = (1..=NODES).find(|id| *id != leader).expect("a follower");
    cluster.node(away).kill();

    let end = 7 * first_mib;
    send(&client, first_mib, end).await;
    let size = || async {
        client
            .get_topic(&named("r"), &named("t"))
            .await
            .expect("get topic")
            .expect("the topic")
            .size
            .as_bytes_u64()
    };
    eventually(
        Duration::from_secs(30),
        "the nodes left back under max_topic_size",
        || async { size().await <= 3 * MIB },
    )
    .await;
    let up: Vec<u64> = (1..=NODES).filter(|id| *id != away).collect();
    for id in &up {
        let copy = copy_of(&cluster, *id).await;
        assert!(
            copy.first().is_some_and(|(offset, _)| *offset >= first_mib),
            "node {id} deleted past what node {away} holds: starts at {:?}",
            copy.first()
        );
    }

    cluster.node(away).restart();
    installed_snapshot(&mut cluster, away).await;
    let mut starts = Vec::new();
    for id in 1..=NODES {
        // A leader elected a moment ago serves what it knows committed.
        let mut copy = copy_of(&cluster, id).await;
        for _ in 0..50 {
            if copy.last().is_some_and(|(offset, _)| *offset == end - 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            copy = copy_of(&cluster, id).await;
        }
        let first = copy.first().map(|(offset, _)| *offset).expect("messages");
        for (at, (offset, number)) in copy.iter().enumerate() {
            assert_eq!(*offset, first + at as u64, "node {id}: dense offsets");
            assert_eq!(number, offset, "node {id}: message {offset}'s bytes");
        }
        assert_eq!(
            copy.last().map(|(offset, _)| *offset),
            Some(end - 1),
            "node {id}"
        );
        starts.push((id, first));
    }
    eprintln!(
        "cluster retention: first offsets {starts:?}, last {}",
        end - 1
    );
    let (_, away_first) = starts.iter().find(|(id, _)| *id == away).expect("away");
    assert!(
        *away_first >= first_mib,
        "node {away} starts at {away_first}, below the snapshot: {starts:?}"
    );
    for id in 1..=NODES {
        cluster.node(id).assert_clean_log();
    }
}

// Proves a purge and delete-segments on a replicated topic with the SDK:
// node `away` is SIGKILLed, the topic is purged (`purge_topic`), every
// node still up serves nothing of it, and the next messages keep the next
// offsets; `away` restarts behind the purge, installs the snapshot at it
// and serves exactly what came after; then `delete_segments` of the
// oldest sealed segment makes every node serve from the same later
// offset, the same bytes, and a restarted node serves nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_and_delete_segments_delete_the_same_messages_on_every_node() {
    let (mut cluster, leader, client) = cluster_with_topic(None).await;
    let first_mib = MIB / PAYLOAD as u64;
    send(&client, 0, first_mib).await;
    let away = (1..=NODES).find(|id| *id != leader).expect("a follower");
    cluster.node(away).kill();
    let purged_end = 2 * first_mib + PER_SEND;
    send(&client, first_mib, purged_end).await;

    client
        .purge_topic(&named("r"), &named("t"))
        .await
        .expect("a purge of a replicated topic");
    let up: Vec<u64> = (1..=NODES).filter(|id| *id != away).collect();
    for id in &up {
        assert_eq!(copy_of(&cluster, *id).await, Vec::new(), "node {id}");
    }
    // Offsets go on where they were (message `n` lands at offset `n`).
    let end = purged_end + 3 * PER_SEND;
    send(&client, purged_end, end).await;

    cluster.node(away).restart();
    installed_snapshot(&mut cluster, away).await;
    let after_purge: Vec<(u64, u64)> = (purged_end..end).map(|n| (n, n)).collect();
    for id in 1..=NODES {
        let mut copy = copy_of(&cluster, id).await;
        for _ in 0..50 {
            if copy == after_purge {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            copy = copy_of(&cluster, id).await;
        }
        assert_eq!(copy, after_purge, "node {id} after the purge");
    }

    // Two more MiB: sealed segments to delete.
    let client = client_of(&cluster, agreed_leader(&cluster, &[1, 2, 3]).await).await;
    let last_end = end + 2 * first_mib;
    send(&client, end, last_end).await;
    client
        .delete_segments(&named("r"), &named("t"), 0, 1)
        .await
        .expect("delete-segments on a replicated topic");
    let mut firsts = Vec::new();
    for id in 1..=NODES {
        let mut copy = copy_of(&cluster, id).await;
        for _ in 0..50 {
            if copy.first().is_some_and(|(offset, _)| *offset > end) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            copy = copy_of(&cluster, id).await;
        }
        let first = copy.first().map(|(offset, _)| *offset).expect("messages");
        let expected: Vec<(u64, u64)> = (first..last_end).map(|n| (n, n)).collect();
        assert_eq!(copy, expected, "node {id} after delete-segments");
        firsts.push(first);
    }
    assert!(firsts.iter().all(|first| *first == firsts[0]), "{firsts:?}");
    assert!(firsts[0] > end && firsts[0] < last_end, "{firsts:?}");

    // Nothing deleted comes back after a restart.
    cluster.node(away).kill();
    cluster.node(away).restart();
    let copy = copy_of(&cluster, away).await;
    assert_eq!(
        copy.first().map(|(offset, _)| *offset),
        Some(firsts[0]),
        "node {away} after a restart"
    );
    eprintln!(
        "cluster purge: purged below {purged_end}, segments deleted below {}",
        firsts[0]
    );
    for id in 1..=NODES {
        cluster.node(id).assert_clean_log();
    }
}
