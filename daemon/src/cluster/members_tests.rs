//! Membership changes of a partition group on the in-process nodes of
//! `tests.rs`: a node that joins is added from a node that does not lead
//! (forwarded to the leader), catches up on what was acknowledged, and
//! the leader is removed (it hands its leadership off first); a removal
//! that would leave no live quorum, or an even count, is refused; a change
//! asked while the leader the nodes know of has just died waits for the
//! next one.

use super::tests::{
    InProcess, KEY, Node, append, leader_of, poll_all, runtime, start_joining_node, start_node,
    stop_groups,
};
use crate::shard::partition::{Durability, PartitionSettings};
use iggyd_raft::membership::{MemberChange, MemberError, MemberOutcome, NodeCard};
use iggyd_raft::network::ForwardedChange;
use std::time::Duration;

async fn open(node: &Node) {
    let settings = PartitionSettings {
        durability: Durability::Persisted,
        ..PartitionSettings::default()
    };
    super::tests::open_with(node, settings).await;
}

pub(super) async fn change(
    node: &Node,
    change: MemberChange,
) -> Result<MemberOutcome, MemberError> {
    let (reply, answer) = flume::bounded(1);
    node.cluster.change_members(
        KEY.storage_id,
        ForwardedChange {
            change,
            wait_ms: 3_000,
            allow_even: false,
        },
        reply,
    );
    answer.recv_async().await.expect("an answer")
}

fn voters_at(node: &Node) -> Vec<u64> {
    use openraft::async_runtime::WatchReceiver;
    node.cluster
        .raft(KEY.storage_id)
        .map(|raft| {
            raft.metrics()
                .borrow_watched()
                .membership_config
                .membership()
                .voter_ids()
                .collect()
        })
        .unwrap_or_default()
}

/// Node 4 added, with its card (replication address, client address,
/// name).
pub(super) fn add_four() -> MemberChange {
    let card = NodeCard {
        replication: "node-4".into(),
        address: Some("127.0.0.1:4".into()),
        name: Some("four".into()),
    };
    MemberChange::Add {
        id: 4,
        node: card.node(),
    }
}

/// Nodes 1 to 3 with `KEY`'s group open and five messages acknowledged
/// (at offset 0), and node 4 started to join (its partition open): the
/// nodes, and which of the first three leads.
async fn three_and_a_joining_fourth(transport: &InProcess) -> (Vec<Node>, u64) {
    let mut nodes: Vec<Node> = (1..=3).map(|id| start_node(id, transport)).collect();
    for node in &nodes {
        open(node).await;
    }
    let everyone: Vec<&Node> = nodes.iter().collect();
    let ack = append(&everyone, 5, b'a').await;
    assert_eq!(ack.base_offset, 0);
    nodes.push(start_joining_node(4, transport));
    open(&nodes[3]).await;
    let old: Vec<&Node> = nodes.iter().take(3).collect();
    let leader = leader_of(&old).expect("a leader");
    (nodes, leader)
}

// Proves a partition group takes a new node and lets the leader go: node
// 4 (joining) is added through a follower, holds every acknowledged
// message, and then the leader is removed, handing off first; the group
// goes on with the three left. Refusals name why.
#[test]
fn a_group_adds_a_joining_node_and_removes_its_leader() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let (nodes, leader) = three_and_a_joining_fourth(&transport).await;
        let old: Vec<&Node> = nodes.iter().take(3).collect();
        let follower = old
            .iter()
            .find(|node| node.id != leader)
            .expect("a follower");

        // Removing a node that is no member is nothing to do.
        assert_eq!(
            change(follower, MemberChange::Remove { id: 9 }).await,
            Ok(MemberOutcome::Unchanged {
                voters: vec![1, 2, 3]
            })
        );
        // Three voters down to two: an even count.
        match change(follower, MemberChange::Remove { id: leader }).await {
            Err(MemberError::Refused(why)) => assert!(why.contains("even count"), "{why}"),
            other => panic!("expected a refusal: {other:?}"),
        }

        assert_eq!(
            change(follower, add_four()).await,
            Ok(MemberOutcome::Changed {
                voters: vec![1, 2, 3, 4]
            })
        );
        // Again: nothing to do.
        assert_eq!(
            change(&nodes[0], add_four()).await,
            Ok(MemberOutcome::Unchanged {
                voters: vec![1, 2, 3, 4]
            })
        );
        let joined = &nodes[3];
        let mut served = poll_all(joined).await;
        for _ in 0..200 {
            if served.message_count == 5 {
                break;
            }
            monoio::time::sleep(Duration::from_millis(20)).await;
            served = poll_all(joined).await;
        }
        assert_eq!(
            served.message_count, 5,
            "node 4 holds what was acknowledged"
        );

        // With node 4 and another follower cut off, removing the last
        // follower that answers would leave three voters of which only the
        // leader answers: no quorum.
        let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
        transport.down.borrow_mut().insert(4);
        transport.down.borrow_mut().insert(others[0]);
        monoio::time::sleep(Duration::from_millis(400)).await;
        let at_leader = nodes.iter().find(|node| node.id == leader).expect("leader");
        match change(at_leader, MemberChange::Remove { id: others[1] }).await {
            Err(MemberError::Refused(why)) => assert!(why.contains("no quorum"), "{why}"),
            other => panic!("expected a refusal: {other:?}"),
        }
        transport.down.borrow_mut().clear();

        // The leader is removed, asked of node 4: it hands off first. The
        // healed nodes count once they answer the leader within its lease
        // (150 ms here), which a loaded machine may not manage at the
        // first ask: a "no quorum" refusal is asked again, for at most
        // 10 s; any other answer is final.
        let mut outcome = change(joined, MemberChange::Remove { id: leader }).await;
        for _ in 0..50 {
            match &outcome {
                Err(MemberError::Refused(why)) if why.contains("no quorum") => {
                    monoio::time::sleep(Duration::from_millis(200)).await;
                    outcome = change(joined, MemberChange::Remove { id: leader }).await;
                }
                _ => break,
            }
        }
        let left: Vec<u64> = [1, 2, 3, 4]
            .into_iter()
            .filter(|id| *id != leader)
            .collect();
        assert_eq!(
            outcome,
            Ok(MemberOutcome::Changed {
                voters: left.clone()
            })
        );
        let rest: Vec<&Node> = nodes.iter().filter(|node| node.id != leader).collect();
        for node in &rest {
            for _ in 0..100 {
                if voters_at(node) == left {
                    break;
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(voters_at(node), left, "node {}", node.id);
        }
        let ack = append(&rest, 2, b'b').await;
        assert_eq!(
            ack.base_offset, 5,
            "the group goes on without node {leader}"
        );
        assert_ne!(leader_of(&rest), None);
        stop_groups(&nodes).await;
    });
}

// Proves a change asked of an idle group is made: its leader heartbeats
// only with news, so openraft's lease (a quorum's acknowledgement within
// an election timeout) has lapsed and openraft refuses the write until
// the leader renews it with a heartbeat. Without the renewal every retry
// found the lease lapsed again, until the change's wait ran out.
#[test]
fn a_change_asked_of_an_idle_group_renews_the_leaders_lease_first() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let (nodes, leader) = three_and_a_joining_fourth(&transport).await;
        let old: Vec<&Node> = nodes.iter().take(3).collect();
        let at_leader = old
            .iter()
            .find(|node| node.id == leader)
            .expect("the leader");
        // Idle for two leases (150 ms each here).
        monoio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            change(at_leader, add_four()).await,
            Ok(MemberOutcome::Changed {
                voters: vec![1, 2, 3, 4]
            })
        );
        // And again once idle: a removal.
        monoio::time::sleep(Duration::from_millis(400)).await;
        let other = old
            .iter()
            .find(|node| node.id != leader)
            .expect("a follower");
        assert_eq!(
            change(at_leader, MemberChange::Remove { id: other.id }).await,
            Ok(MemberOutcome::Changed {
                voters: [1, 2, 3, 4]
                    .into_iter()
                    .filter(|id| *id != other.id)
                    .collect()
            })
        );
        stop_groups(&nodes).await;
    });
}

// Proves a change asked right after a group's leader dies waits for the
// next leader instead of failing on the dead one: the followers still name
// it (no election yet), so the change is first forwarded to a node that
// cannot be reached; it is carried out once the two left elect a leader,
// and node 4 becomes a voter.
#[test]
fn a_change_asked_as_the_leader_dies_waits_for_the_next_leader() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let (nodes, leader) = three_and_a_joining_fourth(&transport).await;
        let old: Vec<&Node> = nodes.iter().take(3).collect();
        let follower = old
            .iter()
            .find(|node| node.id != leader)
            .expect("a follower");
        // The leader dies; the follower still names it.
        transport.down.borrow_mut().insert(leader);
        let known = follower.cluster.raft(KEY.storage_id).and_then(|raft| {
            use openraft::async_runtime::WatchReceiver;
            raft.metrics().borrow_watched().current_leader
        });
        assert_eq!(known, Some(leader), "the follower has not noticed yet");
        assert_eq!(
            change(follower, add_four()).await,
            Ok(MemberOutcome::Changed {
                voters: vec![1, 2, 3, 4]
            })
        );
        let rest: Vec<&Node> = nodes.iter().filter(|node| node.id != leader).collect();
        let elected = leader_of(&rest).expect("a new leader");
        assert_ne!(elected, leader);
        transport.down.borrow_mut().clear();
        stop_groups(&nodes).await;
    });
}
