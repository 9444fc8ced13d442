//! Stored consumer offsets on three pumps replicating a partition (the
//! nodes of `tests.rs`): a store at the leader, one forwarded by a
//! follower and a follower's poll that auto-commits are each an offsets
//! entry applied on every replica; message offsets stay dense around
//! them; and once the leader is cut off, the new leader answers with the
//! last acknowledged offset (refusing with 58 until it may) and `Next`
//! continues after it.

use super::tests::*;
use crate::shard::op::{PartitionOp, PollRequest, PumpError, StoredOffset};
use crate::shard::partition::{Durability, PartitionSettings};
use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
use iggyd_wire::protocol::primitives::PollingStrategy;
use std::time::Duration;

pub(super) const CONSUMER: ConsumerKey = ConsumerKey {
    kind: ConsumerKind::Consumer,
    id: 9,
};

/// The offset `node` serves for `CONSUMER`, once it may (58 retried).
pub(super) async fn stored(node: &Node) -> Option<u64> {
    for _ in 0..300 {
        match ask(node, |reply| PartitionOp::GetOffset {
            key: KEY,
            consumer: CONSUMER,
            reply,
        })
        .await
        {
            Ok(found) => return found.map(|found: StoredOffset| found.stored_offset),
            Err(PumpError::NotLeader { .. }) => {
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("get offset on node {}: {error}", node.id),
        }
    }
    panic!("node {} never served the stored offset", node.id);
}

/// Waits until `node` serves `want` for `CONSUMER`.
pub(super) async fn serves(node: &Node, want: u64) {
    for _ in 0..300 {
        if stored(node).await == Some(want) {
            return;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stored(node).await, Some(want), "node {}", node.id);
}

pub(super) async fn store(node: &Node, offset: u64) -> Result<(), PumpError> {
    ask(node, |reply| PartitionOp::StoreOffset {
        key: KEY,
        consumer: CONSUMER,
        offset,
        reply,
    })
    .await
}

// Proves stored offsets replicate: each write is applied on every
// replica, a follower forwards its writes (and its auto-commits) to the
// leader, message offsets stay dense, and after the leader is cut off the
// new leader serves the last acknowledged offset, and `Next` continues
// right after it.
#[test]
fn stored_offsets_replicate_and_survive_losing_the_leader() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        let settings = PartitionSettings {
            durability: Durability::Persisted,
            offset_durability: Durability::Persisted,
            ..PartitionSettings::default()
        };
        for node in &nodes {
            ask(node, |reply| PartitionOp::Open {
                key: KEY,
                settings,
                reply,
            })
            .await
            .expect("open");
        }
        let everyone: Vec<&Node> = nodes.iter().collect();
        assert_eq!(append(&everyone, 10, b'a').await.base_offset, 0);
        let leader = leader_node(&nodes);
        let follower = nodes
            .iter()
            .find(|node| node.id != leader.id)
            .expect("a follower");
        // At the leader, then forwarded by a follower.
        store(leader, 3).await.expect("stored at the leader");
        for node in &nodes {
            serves(node, 3).await;
        }
        store(follower, 5).await.expect("forwarded");
        assert_eq!(stored(follower).await, Some(5), "read your write");
        for node in &nodes {
            serves(node, 5).await;
        }
        // A follower's poll with auto-commit stores what it returned.
        let polled = ask(follower, |reply| PartitionOp::Poll {
            key: KEY,
            request: PollRequest {
                consumer: Some(CONSUMER),
                strategy: PollingStrategy::Next,
                count: 2,
                auto_commit: true,
                bytes_max: u64::MAX,
            },
            reply,
        })
        .await
        .expect("a poll");
        assert_eq!(polled.message_count, 2, "offsets 6 and 7");
        for node in &nodes {
            serves(node, 7).await;
        }
        // Offsets entries took no message offsets.
        assert_eq!(append(&everyone, 1, b'b').await.base_offset, 10);
        // The leader goes; the new one serves what was acknowledged.
        transport.down.borrow_mut().insert(leader.id);
        let rest: Vec<&Node> = nodes.iter().filter(|node| node.id != leader.id).collect();
        assert_eq!(append(&rest, 1, b'c').await.base_offset, 11);
        for node in &rest {
            assert_eq!(stored(node).await, Some(7), "node {}", node.id);
        }
        let next = ask(rest[0], |reply| PartitionOp::Poll {
            key: KEY,
            request: PollRequest {
                consumer: Some(CONSUMER),
                strategy: PollingStrategy::Next,
                count: 1,
                auto_commit: false,
                bytes_max: u64::MAX,
            },
            reply,
        })
        .await
        .expect("a poll");
        assert_eq!(next.message_count, 1);
        assert_eq!(next.records().into_owned(), poll_one_at(rest[0], 8).await);
        assert_ne!(next.records().into_owned(), poll_one_at(rest[0], 7).await);
        transport.down.borrow_mut().remove(&leader.id);
        stop_groups(&nodes).await;
    });
}

/// The bytes of the record at `offset` as `node` serves it.
async fn poll_one_at(node: &Node, offset: u64) -> Vec<u8> {
    let result = ask(node, |reply| PartitionOp::Poll {
        key: KEY,
        request: PollRequest {
            consumer: None,
            strategy: PollingStrategy::Offset(offset),
            count: 1,
            auto_commit: false,
            bytes_max: u64::MAX,
        },
        reply,
    })
    .await
    .expect("a poll");
    result.records().into_owned()
}

/// The node whose group leads the partition.
fn leader_node(nodes: &[Node]) -> &Node {
    nodes
        .iter()
        .find(|node| {
            node.cluster
                .raft(KEY.storage_id)
                .is_some_and(|raft| raft.is_leader())
        })
        .expect("a leader")
}
