//! Purge and delete-segments on a replicated partition (the in-process
//! nodes of `tests.rs`): a purge is an entry of the partition's group, so
//! every replica deletes the same messages, a follower that missed it is
//! sent the snapshot at it, and a restarted node serves nothing of what
//! was purged; offsets go on where they were and stored consumer offsets
//! stay.

use super::offsets_tests::serves;
use super::snapshot_tests::{holds, stats};
use super::tests::*;
use crate::shard::op::{PartitionOp, PumpError};
use crate::shard::partition::{Durability, PartitionSettings};
use iggyd_storage::partition_log::DeletedSegments;
use iggyd_wire::protocol::primitives::PollingStrategy;
use std::time::Duration;

/// Small segments, no retention: only purges delete.
fn settings() -> PartitionSettings {
    PartitionSettings {
        durability: Durability::Persisted,
        offset_durability: Durability::Persisted,
        segment_size_bytes: 4 * 1024,
        ..PartitionSettings::default()
    }
}

async fn open(node: &Node) {
    open_with(node, settings()).await;
}

/// Runs `op` on the first of `nodes` that takes it (a follower forwards
/// to the leader; while none leads, each refuses with 58).
async fn on_any<T>(nodes: &[&Node], op: impl Fn(crate::shard::op::Reply<T>) -> PartitionOp) -> T {
    for _ in 0..300 {
        for node in nodes {
            match ask(node, &op).await {
                Ok(answer) => return answer,
                Err(PumpError::NotLeader { .. } | PumpError::NotCommitted { .. }) => {}
                Err(error) => panic!("node {}: {error}", node.id),
            }
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no node took the request within 6 s");
}

/// The first message `node` serves a consumer polling from offset 0.
async fn first_served(node: &Node) -> Option<u64> {
    let result = poll_from(node, PollingStrategy::Offset(0), 1).await;
    (result.message_count > 0).then(|| {
        iggyd_wire::batch::BatchHeader::decode(&result.records())
            .expect("a batch")
            .base_offset
    })
}

// Proves a purge of a replicated partition: node 3 is cut off, the other
// two take more batches and a purge asked of a follower; both serve
// nothing of what was purged at once and delete every segment; the next
// batch keeps the next offset and the stored consumer offset stays; node
// 3, back, is sent the snapshot at the purge (the others no longer hold
// the entries it lacks) and starts its log there; a restarted node
// serves nothing purged either.
#[test]
fn a_purge_deletes_the_same_messages_on_every_replica() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let mut nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        for node in &nodes {
            open(node).await;
        }
        let everyone: Vec<&Node> = nodes.iter().collect();
        let mut next = 0;
        for round in 0..10u8 {
            next = append(&everyone, 10, round).await.last_offset + 1;
        }
        transport.down.borrow_mut().insert(3);
        let live: Vec<&Node> = nodes.iter().take(2).collect();
        for round in 10..20u8 {
            next = append(&live, 10, round).await.last_offset + 1;
        }
        assert_eq!(next, 200);
        on_any(&live, |reply| PartitionOp::StoreOffset {
            key: KEY,
            consumer: super::offsets_tests::CONSUMER,
            offset: 150,
            reply,
        })
        .await;
        // Asked of the follower first, which forwards it.
        let leader = leader_of(&live).expect("a leader");
        let mut order = live.clone();
        order.sort_by_key(|node| node.id == leader);
        on_any(&order, |reply| PartitionOp::Purge { key: KEY, reply }).await;
        for node in &live {
            // At once where the purge was applied: nothing below 200.
            let served = poll_all(node).await;
            assert_eq!(served.message_count, 0, "node {}", node.id);
            // And the segments go once the group purged its entries.
            holds(node, 200, 200).await;
            assert_eq!(stats(node).await.segments, 1, "node {}", node.id);
        }
        let ack = append(&live, 5, b'p').await;
        assert_eq!(ack.base_offset, 200, "offsets go on");
        next = ack.last_offset + 1;
        for node in &live {
            serves(node, 150).await;
            assert_eq!(first_served(node).await, Some(200), "node {}", node.id);
        }

        // Node 3 is back: behind the purge point, it is sent the snapshot
        // and starts where the others do.
        transport.down.borrow_mut().clear();
        holds(&nodes[2], 200, next).await;
        assert_eq!(first_served(&nodes[2]).await, Some(200));
        serves(&nodes[2], 150).await;

        // A restarted node: nothing purged comes back.
        let node = nodes.remove(0);
        let node = restart(node, &transport).await;
        open(&node).await;
        nodes.insert(0, node);
        holds(&nodes[0], 200, next).await;
        assert_eq!(first_served(&nodes[0]).await, Some(200));
        let everyone: Vec<&Node> = nodes.iter().collect();
        let ack = append(&everyone, 2, b'q').await;
        assert_eq!(ack.base_offset, next);
        stop_groups(&nodes).await;
    });
}

// Proves delete-segments on a replicated partition: asked of one node, it
// answers the segments it held there, and every replica then serves from
// the end of those segments on and deletes them; offsets go on.
#[test]
fn delete_segments_deletes_the_same_messages_on_every_replica() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        for node in &nodes {
            open(node).await;
        }
        let everyone: Vec<&Node> = nodes.iter().collect();
        let mut next = 0;
        for round in 0..20u8 {
            next = append(&everyone, 10, round).await.last_offset + 1;
        }
        for node in &nodes {
            holds(node, 0, next).await;
        }
        let deleted: DeletedSegments = on_any(&everyone, |reply| PartitionOp::DeleteSegments {
            key: KEY,
            count: 2,
            reply,
        })
        .await;
        assert_eq!(deleted.segments, 2);
        let first = deleted.messages;
        assert!(first > 0 && first < next, "{deleted:?}");
        for node in &nodes {
            holds(node, first, next).await;
            assert_eq!(first_served(node).await, Some(first), "node {}", node.id);
        }
        let ack = append(&everyone, 3, b'd').await;
        assert_eq!(ack.base_offset, next, "offsets go on");
        // Asking for none, or more than there are, is no error.
        let none: DeletedSegments = on_any(&everyone, |reply| PartitionOp::DeleteSegments {
            key: KEY,
            count: 0,
            reply,
        })
        .await;
        assert_eq!(none, DeletedSegments::default());
        stop_groups(&nodes).await;
    });
}
