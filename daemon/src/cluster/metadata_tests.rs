//! The metadata group's snapshots (the in-process nodes of `tests.rs`,
//! each with its store in memory): the group snapshots its store every
//! `METADATA_SNAPSHOT_EVERY` entries, keeps the snapshot beside its log and
//! purges the entries it covers (and the segments they named); a restart
//! with an empty store installs the kept snapshot, then applies the rest;
//! a node cut off while the others purged is sent the leader's snapshot.

use super::metadata::METADATA_KEY;
use super::tests::*;
use crate::shard::op::{PartitionOp, PartitionReport};
use crate::shard::partition::PartitionSettings;
use crate::shard::replica::Replication;
use iggyd_metadata::{Ident, MetadataCommand, TopicOptions};
use iggyd_storage::PartitionStats;
use iggyd_wire::protocol::codes::Status;
use openraft::async_runtime::WatchReceiver;
use std::path::Path;
use std::time::Duration;

/// Small segments, so that purged entries' segments can be seen to go.
fn log_settings() -> PartitionSettings {
    PartitionSettings {
        segment_size_bytes: 4 * 1024,
        ..PartitionSettings::default()
    }
}

async fn open_log(node: &Node) {
    ask(node, |reply| PartitionOp::Open {
        key: METADATA_KEY,
        settings: log_settings(),
        reply,
    })
    .await
    .expect("open the metadata log");
}

fn stream(n: usize) -> MetadataCommand {
    MetadataCommand::CreateStream {
        name: format!("stream-{n}"),
        created_at_us: 1_700_000_000_000_000,
    }
}

/// Commits `command` through whichever of `nodes` leads the metadata
/// group.
async fn commit(nodes: &[&Node], command: MetadataCommand) {
    for _ in 0..300 {
        for node in nodes {
            let Some(proposal) = node.cluster.propose_metadata(command.clone()) else {
                continue;
            };
            match proposal.await {
                Ok(_) => return,
                Err(Status::TransientNotAccepted | Status::TransientNotCommitted) => {}
                Err(status) => panic!("node {}: {status:?}", node.id),
            }
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no node committed {command:?} within 6 s");
}

/// The metadata group's last applied, snapshot and purged indexes on
/// `node`.
fn progress(node: &Node) -> (u64, u64, u64) {
    let raft = node
        .cluster
        .metadata()
        .and_then(|group| group.raft())
        .expect("a metadata group");
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    let index = |id: Option<iggyd_raft::LogId>| id.map_or(0, |id| id.index);
    (
        index(metrics.last_applied),
        index(metrics.snapshot),
        index(metrics.purged),
    )
}

/// Waits until `check` holds for `node`'s progress.
async fn until_progress(node: &Node, what: &str, check: impl Fn((u64, u64, u64)) -> bool) {
    for _ in 0..300 {
        if node
            .cluster
            .metadata()
            .and_then(|group| group.raft())
            .is_some()
            && check(progress(node))
        {
            return;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("node {}: never {what}: {:?}", node.id, progress(node));
}

async fn log_stats(node: &Node) -> PartitionStats {
    let reports: Vec<PartitionReport> = ask(node, |reply| PartitionOp::Report { reply })
        .await
        .expect("a report");
    reports
        .into_iter()
        .find(|report| report.key == METADATA_KEY)
        .expect("the metadata log")
        .stats
}

/// Waits until every store lists `streams` streams and all are the same.
async fn converged(stores: &[&Store], streams: usize) {
    for _ in 0..300 {
        let exported: Vec<_> = stores
            .iter()
            .map(|store| store.borrow().export().expect("an export"))
            .collect();
        if stores
            .iter()
            .all(|store| store.borrow().metadata().streams().count() == streams)
            && exported.windows(2).all(|pair| pair[0] == pair[1])
        {
            return;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    let names: Vec<Vec<String>> = stores
        .iter()
        .map(|store| {
            let store = store.borrow();
            let mut names: Vec<String> = store
                .metadata()
                .streams()
                .map(|stream| stream.name.to_string())
                .collect();
            names.sort();
            names
        })
        .collect();
    let missing: Vec<Vec<&String>> = names
        .iter()
        .map(|some| {
            names[0]
                .iter()
                .filter(|name| !some.contains(name))
                .collect()
        })
        .collect();
    panic!(
        "the stores never converged on {streams} streams: {:?}, missing {missing:?}",
        names.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

async fn stop_metadata(nodes: &[&Node]) {
    for node in nodes {
        if let Some(raft) = node.cluster.metadata().and_then(|group| group.raft()) {
            raft.shutdown().await.expect("shutdown");
        }
    }
}

/// Three nodes, each with an empty store and its metadata log open.
async fn three_nodes(transport: &InProcess) -> (Vec<Node>, Vec<Store>) {
    let mut nodes = Vec::new();
    let mut stores = Vec::new();
    for id in 1..=3 {
        let (store, shared) = memory_store(id);
        stores.push(store);
        nodes.push(start_node_on(
            id,
            transport,
            iggyd_storage::sim::SimIo::new(70 + id),
            Some(shared),
            false,
        ));
    }
    for node in &nodes {
        open_log(node).await;
    }
    (nodes, stores)
}

// Proves the metadata log stops growing and a restart needs only its
// tail: 80 changes later every node has a snapshot kept beside its log
// (`raft/machine`), has purged the entries through it and deleted the
// segments they named; node 3, killed (power loss) and started again with
// an empty store, ends with the same store as the others although its log
// no longer holds the first entries (so the kept snapshot gave them), and
// takes the changes after.
#[test]
fn the_metadata_log_is_snapshotted_purged_and_restarts_from_its_snapshot() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let (mut nodes, mut stores) = three_nodes(&transport).await;
        {
            let all: Vec<&Node> = nodes.iter().collect();
            for n in 0..80 {
                commit(&all, stream(n)).await;
            }
        }
        converged(&stores.iter().collect::<Vec<_>>(), 80).await;
        for node in &nodes {
            until_progress(
                node,
                "purged through a snapshot",
                |(applied, snapshot, purged)| {
                    applied >= 80
                        && snapshot + METADATA_SNAPSHOT_EVERY > applied
                        && purged >= snapshot.saturating_sub(1)
                        && purged >= 48
                },
            )
            .await;
            let kept = Path::new("/data/cluster/metadata/raft/machine");
            assert!(node.io.contents_of(kept).is_some(), "node {}", node.id);
        }
        for node in &nodes {
            for _ in 0..300 {
                if log_stats(node).await.first_offset > 0 {
                    break;
                }
                tick_retention(node);
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            let stats = log_stats(node).await;
            assert!(
                stats.first_offset > 0,
                "node {}: no purged segment went: {stats:?}",
                node.id
            );
        }
        let (_, _, purged) = progress(&nodes[2]);

        // A power loss on node 3, then a start with an empty store.
        let node = nodes.pop().expect("node 3");
        stop_metadata(&[&node]).await;
        let io = node.io.clone();
        drop(node);
        io.crash();
        let (store, shared) = memory_store(3);
        stores[2] = store;
        let node = start_node_on(3, &transport, io, Some(shared), false);
        open_log(&node).await;
        nodes.push(node);
        converged(&stores.iter().collect::<Vec<_>>(), 80).await;
        until_progress(
            &nodes[2],
            "started from its snapshot",
            |(_, snapshot, _)| snapshot >= purged,
        )
        .await;
        {
            let all: Vec<&Node> = nodes.iter().collect();
            for n in 80..100 {
                commit(&all, stream(n)).await;
            }
        }
        converged(&stores.iter().collect::<Vec<_>>(), 100).await;
        stop_metadata(&nodes.iter().collect::<Vec<_>>()).await;
    });
}

// Proves a node that missed the entries a snapshot covers catches up from
// the leader's snapshot: node 3 is cut off after a topic of two partitions
// is created, the other two commit 60 more changes and purge through a
// snapshot past node 3's log; healed, node 3 installs the snapshot (its
// store the same as the leader's, its log started again after the
// snapshot's messages) and knows that it must not initialize the groups
// of the partitions created before the snapshot (it does not know the
// voters they were created with), while a later partition's it would.
#[test]
fn a_node_behind_the_purge_installs_the_leaders_snapshot() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let (nodes, stores) = three_nodes(&transport).await;
        let all: Vec<&Node> = nodes.iter().collect();
        commit(&all, stream(0)).await;
        commit(
            &all,
            MetadataCommand::CreateTopic {
                stream: Ident::Id(0),
                name: "orders".into(),
                partitions_count: 2,
                options: TopicOptions::defaults(iggyd_metadata::Durability::Persisted),
                created_at_us: 1_700_000_000_000_000,
                shard_count: 1,
            },
        )
        .await;
        converged(&stores.iter().collect::<Vec<_>>(), 1).await;
        assert!(nodes[2].cluster.settings.initializes(0));
        let (behind, _, _) = progress(&nodes[2]);

        transport.down.borrow_mut().insert(3);
        let live = [&nodes[0], &nodes[1]];
        for n in 1..=60 {
            commit(&live, stream(n)).await;
        }
        for node in live {
            until_progress(node, "purged past node 3's log", |(_, _, purged)| {
                purged > behind + 1
            })
            .await;
        }
        let (_, _, purged) = progress(&nodes[0]);
        transport.down.borrow_mut().remove(&3);

        converged(&stores.iter().collect::<Vec<_>>(), 61).await;
        until_progress(&nodes[2], "installed the snapshot", |(_, snapshot, _)| {
            snapshot >= purged.min(progress(&nodes[1]).2)
        })
        .await;
        let settings = &nodes[2].cluster.settings;
        assert!(!settings.initializes(0) && !settings.initializes(1));
        assert!(settings.initializes(2));
        // Its log starts again after the snapshot's messages.
        assert!(log_stats(&nodes[2]).await.first_offset > 0);
        commit(&all, stream(61)).await;
        converged(&stores.iter().collect::<Vec<_>>(), 62).await;
        stop_metadata(&all).await;
    });
}
