//! Scenarios the seeded runs found, replayed step by step on the same
//! nodes, network and runtime, so that each bug stays pinned whatever the
//! seeds do later.
//!
//! Must not: draw anything at random but what the nodes' seeded disks and
//! the runtime draw (a scenario is a fixed sequence), or wait without a
//! virtual-time bound.

use super::network::SimNet;
use super::node::{Node, StoreKind};
use super::runtime::{sleep, spawn, timeout};
use crate::Proposal;
use iggyd_storage::io::Access;
use iggyd_storage::raft::StoredEntry;
use iggyd_wire::batch::{MessageSpec, encode_producer_batch, stamp};
use openraft::ServerState;
use openraft::impls::BasicNode;
use openraft::rt::WatchReceiver;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A batch of one message whose payload names it.
fn proposal(name: &str) -> Proposal {
    let spec = MessageSpec {
        id: 1,
        timestamp_delta: 0,
        payload: name.as_bytes().to_vec(),
        user_headers: Vec::new(),
    };
    let mut bytes = encode_producer_batch(1_700_000_000_000_000, &[spec]);
    stamp(&mut bytes, 0, 0, 1_700_000_000_000_000).expect("a fresh batch stamps");
    Proposal::Batch(bytes.into())
}

/// The node that leads, once one does (within 10 s).
async fn leader(nodes: &[Node]) -> usize {
    for _ in 0..200 {
        let leading = nodes.iter().position(|node| {
            node.up
                .as_ref()
                .is_some_and(|up| up.group.metrics().borrow_watched().state == ServerState::Leader)
        });
        if let Some(at) = leading {
            return at;
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader in 10 s");
}

/// The last index of a node's log.
async fn last_index(node: &Node) -> Option<u64> {
    let up = node.up.as_ref()?;
    let log = up.log.lock().await;
    log.last().map(|(index, _)| index)
}

/// Three nodes commit an entry; the leader's flushes are then held back
/// (a slow commit phase) while it proposes another, which both followers
/// store; the leader loses power (its copy was never synced), starts again
/// at once, and proposes a third. Returns the entry at the index of the
/// second on the restarted node and on each follower, after a while.
pub async fn restarted_leader(config: openraft::Config) -> Vec<Option<StoredEntry>> {
    let config = Arc::new(config.validate().expect("a valid config"));
    let net = SimNet::new(1);
    let mut nodes: Vec<Node> = (1..=3)
        .map(|id| {
            Node::new(
                id,
                100 + id,
                Access::Buffered,
                64 * 1024,
                StoreKind::Backend,
            )
        })
        .collect();
    for node in &mut nodes {
        node.start(&net, config.clone()).await;
    }
    let members: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|id| {
            (
                id,
                BasicNode {
                    addr: format!("node-{id}"),
                },
            )
        })
        .collect();
    let first = nodes[0].up.as_ref().expect("up").group.clone();
    first.initialize(members).await.expect("initialize");
    let at = leader(&nodes).await;
    let group = nodes[at].up.as_ref().expect("up").group.clone();
    group
        .client_write(proposal("committed"))
        .await
        .expect("the first write commits");
    let committed = last_index(&nodes[at]).await.expect("an entry");

    assert!(
        nodes[at].hold_flushes(true),
        "the leader runs on the backend"
    );
    spawn(async move {
        let _ = group.client_write(proposal("lost by the leader")).await;
    });
    let followers: Vec<usize> = (0..3).filter(|other| *other != at).collect();
    for _ in 0..200 {
        let mut stored = 0;
        for &follower in &followers {
            if last_index(&nodes[follower]).await > Some(committed) {
                stored += 1;
            }
        }
        if stored == followers.len() {
            break;
        }
        sleep(Duration::from_millis(10)).await;
    }
    for &follower in &followers {
        assert_eq!(
            last_index(&nodes[follower]).await,
            Some(committed + 1),
            "follower {follower} stores the second entry"
        );
    }
    nodes[at].crash(&net);
    nodes[at].start(&net, config.clone()).await;
    let restarted = nodes[at].up.as_ref().expect("up").group.clone();
    let _ = timeout(
        Duration::from_secs(2),
        restarted.client_write(proposal("written after the restart")),
    )
    .await;
    sleep(Duration::from_secs(2)).await;
    let mut held = Vec::new();
    for node in std::iter::once(at).chain(followers) {
        let up = nodes[node].up.as_ref().expect("up");
        let log = up.log.lock().await;
        held.push(log.get(committed + 1).await.expect("a readable log"));
    }
    for node in &mut nodes {
        node.crash(&net);
    }
    held
}
