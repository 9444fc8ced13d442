//! Retention on a replicated partition (the in-process nodes of
//! `tests.rs`): each replica deletes its oldest segments only after its
//! group purged the entries naming them, through a snapshot at the end of
//! the deleted messages; a follower that was cut off while its leader
//! deleted is sent that snapshot, starts its log again at the snapshot's
//! offset, holds the consumer offsets stored meanwhile, and then every
//! message acknowledged after it; a node restarted after its log was
//! purged starts from the snapshot of its purge point; and a node added
//! after the purge (`add-node`) is sent the snapshot too.

use super::members_tests::{add_four, change};
use super::offsets_tests::{serves, store};
use super::tests::*;
use crate::shard::op::{PartitionOp, PartitionReport};
use crate::shard::partition::{Durability, PartitionSettings};
use iggyd_raft::membership::MemberOutcome;
use iggyd_storage::PartitionStats;
use std::time::Duration;

/// Small segments and a size cap a few segments above one, so retention
/// always has sealed segments to delete.
fn settings() -> PartitionSettings {
    PartitionSettings {
        durability: Durability::Persisted,
        offset_durability: Durability::Persisted,
        segment_size_bytes: 4 * 1024,
        max_size_bytes: Some(12 * 1024),
        ..PartitionSettings::default()
    }
}

async fn open(node: &Node) {
    open_with(node, settings()).await;
}

pub(super) async fn stats(node: &Node) -> PartitionStats {
    let reports: Vec<PartitionReport> = ask(node, |reply| PartitionOp::Report { reply })
        .await
        .expect("a report");
    reports
        .into_iter()
        .find(|report| report.key == KEY)
        .expect("the partition")
        .stats
}

/// Ticks retention on `node` until its messages start at `first` or
/// later; its first offset then.
async fn retained(node: &Node, first: u64) -> u64 {
    for _ in 0..200 {
        tick_retention(node);
        let now = stats(node).await.first_offset;
        if now >= first {
            return now;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "node {}: retention never deleted below offset {first}: {:?}",
        node.id,
        stats(node).await
    );
}

/// Waits until `node` serves the messages `first..next`.
pub(super) async fn holds(node: &Node, first: u64, next: u64) {
    for _ in 0..300 {
        let now = stats(node).await;
        let served = poll_all(node).await.message_count;
        if now.first_offset == first && now.next_offset == next && u64::from(served) == next - first
        {
            return;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "node {} never held {first}..{next}: {:?}, serving {}",
        node.id,
        stats(node).await,
        poll_all(node).await.message_count
    );
}

// Proves a replicated partition's retention, and the snapshot it leaves:
// node 3 is cut off while the other two take 40 batches and a stored
// consumer offset, then delete their oldest segments (after their groups
// purged the entries naming them); node 3 is back, gets the leader's
// snapshot, starts its log at the snapshot's offset, serves the stored
// offset and takes the next batches; a restarted node (its log purged)
// starts from the snapshot of its purge point and goes on.
#[test]
fn a_follower_behind_retention_installs_the_snapshot_and_goes_on() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let mut nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        for node in &nodes {
            open(node).await;
        }
        let everyone: Vec<&Node> = nodes.iter().collect();
        append(&everyone, 5, b'a').await;
        transport.down.borrow_mut().insert(3);
        let live: Vec<&Node> = nodes.iter().take(2).collect();
        let mut next = 5;
        for round in 0..40u8 {
            let ack = append(&live, 10, round).await;
            assert_eq!(ack.base_offset, next, "dense offsets");
            next = ack.last_offset + 1;
            if round == 3 {
                // Stored while node 3 is away, long before the point
                // retention purges through.
                for node in &live {
                    if store(node, 42).await.is_ok() {
                        break;
                    }
                }
            }
        }
        // Both live nodes delete, each once its group purged.
        let mut first = 0;
        for node in &live {
            first = retained(node, 1).await;
            assert!(first > 5, "node {} deleted only {first}", node.id);
        }
        let leader = leader_of(&live).expect("a leader");
        let leader_first = stats(&nodes[(leader - 1) as usize]).await.first_offset;
        assert!(first > 0);

        // Node 3 is back: it is sent the snapshot (the leader no longer
        // holds the entries it lacks) and starts where the leader's
        // messages do.
        transport.down.borrow_mut().clear();
        holds(&nodes[2], leader_first, next).await;
        serves(&nodes[2], 42).await;

        // Everyone takes what comes next.
        let everyone: Vec<&Node> = nodes.iter().collect();
        let ack = append(&everyone, 3, b'z').await;
        assert_eq!(ack.base_offset, next);
        next = ack.last_offset + 1;
        for node in &nodes {
            let now = stats(node).await;
            for _ in 0..300 {
                if stats(node).await.next_offset == next {
                    break;
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(stats(node).await.next_offset, next, "node {}", node.id);
            assert!(now.first_offset > 0, "node {}: {now:?}", node.id);
        }

        // Node 1 restarts on its purged log: its group starts from the
        // snapshot of its purge point and takes the next batches.
        let node = nodes.remove(0);
        let node = restart(node, &transport).await;
        open(&node).await;
        nodes.insert(0, node);
        let everyone: Vec<&Node> = nodes.iter().collect();
        let ack = append(&everyone, 4, b'y').await;
        assert_eq!(ack.base_offset, next);
        next = ack.last_offset + 1;
        let restarted_first = stats(&nodes[0]).await.first_offset;
        holds(&nodes[0], restarted_first, next).await;
        serves(&nodes[0], 42).await;
        stop_groups(&nodes).await;
    });
}

// Proves a node added after retention purged the group's log starts from
// the snapshot: nodes 1 to 3 take 40 batches and a stored consumer
// offset, and delete their oldest segments; node 4 joins (`add-node`,
// asked of a follower): the leader no longer holds the entries before
// its purge point, so node 4 is sent the snapshot, starts where the
// leader's messages do, serves the stored offset, and takes what comes
// next as a voter.
#[test]
fn a_node_added_after_retention_purged_the_log_is_sent_the_snapshot() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let mut nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        for node in &nodes {
            open(node).await;
        }
        let three: Vec<&Node> = nodes.iter().collect();
        let mut next = 0;
        for round in 0..40u8 {
            let ack = append(&three, 10, round).await;
            assert_eq!(ack.base_offset, next, "dense offsets");
            next = ack.last_offset + 1;
            if round == 5 {
                // Stored at the leader (the others refuse), long before
                // the point retention purges through.
                let mut stored = false;
                for node in &three {
                    if store(node, 42).await.is_ok() {
                        stored = true;
                        break;
                    }
                }
                assert!(stored, "offset 42 stored");
            }
        }
        for node in &three {
            let first = retained(node, 1).await;
            assert!(first > 10, "node {} deleted only {first}", node.id);
        }
        let leader = leader_of(&three).expect("a leader");
        let leader_first = stats(&nodes[(leader - 1) as usize]).await.first_offset;
        for node in &three {
            serves(node, 42).await;
        }

        nodes.push(start_joining_node(4, &transport));
        open(&nodes[3]).await;
        let follower = nodes
            .iter()
            .take(3)
            .find(|node| node.id != leader)
            .expect("a follower");
        assert_eq!(
            change(follower, add_four()).await,
            Ok(MemberOutcome::Changed {
                voters: vec![1, 2, 3, 4]
            })
        );
        holds(&nodes[3], leader_first, next).await;
        serves(&nodes[3], 42).await;

        let everyone: Vec<&Node> = nodes.iter().collect();
        let ack = append(&everyone, 3, b'z').await;
        assert_eq!(ack.base_offset, next);
        next = ack.last_offset + 1;
        holds(&nodes[3], leader_first, next).await;
        stop_groups(&nodes).await;
    });
}
