//! `iggyd cluster add-node` and `remove-node` against real processes
//! (`cluster.rs`'s three nodes, certificates for a fourth): a dead node is
//! replaced while the official SDK produces (node 3 SIGKILLed, node 4
//! started with `cluster.join = true` and added, node 3 removed), every
//! acknowledged message is then served by node 4 leading, a topic created
//! after the change is replicated to node 4, and what cannot work is
//! refused with exit 78 and a message saying why (an unknown node, a
//! removal that leaves no live quorum or an even voter count).

use crate::cluster::{
    Cluster, Layout, PARTITIONS, STREAM, TOPIC, assert_holds_every_acknowledged, everything,
};
use crate::common::*;
use iggy::prelude::*;
use iggyd_admin_api::cluster::{ClusterStatus, METADATA_GROUP, MembershipChange};
use iggyd_testkit::{Output, iggyd_command, run};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMING: Option<(&str, &str)> = Some(("500ms", "100ms"));

/// `iggyd cluster <args> --socket <socket>`.
fn cli(socket: &Path, args: &[&str]) -> Output {
    let mut command = iggyd_command();
    command
        .arg("cluster")
        .args(args)
        .arg("--socket")
        .arg(socket);
    run(&mut command)
}

fn status_of(cluster: &Cluster, id: u64) -> Option<ClusterStatus> {
    let out = cli(&cluster.admin_socket(id), &["status", "--json"]);
    serde_json::from_str(&out.stdout).ok()
}

/// The metadata group's leader as the roster of node `id` names it, once
/// the roster lists exactly `nodes`.
async fn roster_leader(cluster: &Cluster, id: u64, nodes: &[u64]) -> Option<u64> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(cluster.address(id).to_string())
        .build()
        .ok()?;
    client.connect().await.ok()?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await.ok()?;
    let metadata = client.get_cluster_metadata().await.ok()?;
    let listed: BTreeSet<u64> = metadata
        .nodes
        .iter()
        .filter_map(|node| {
            nodes.iter().copied().find(|id| {
                cluster.address(*id).to_string() == format!("{}:{}", node.ip, node.endpoints.tcp)
            })
        })
        .collect();
    if metadata.nodes.len() != nodes.len() || listed.len() != nodes.len() {
        return None;
    }
    let leader = metadata
        .nodes
        .iter()
        .find(|node| node.role == ClusterNodeRole::Leader)?;
    nodes.iter().copied().find(|id| {
        cluster.address(*id).to_string() == format!("{}:{}", leader.ip, leader.endpoints.tcp)
    })
}

/// Waits (up to 10 s) until node `id` shows `groups` groups, each with
/// `voters` (a follower hears of a change a little after its leader
/// answered for it).
async fn sees_voters(cluster: &Cluster, id: u64, groups: usize, voters: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = status_of(cluster, id);
        if let Some(status) = &status
            && status.groups.len() == groups
            && status.groups.iter().all(|group| group.voters == voters)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} does not see the voters {voters:?} on every group: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to 20 s) until every node of `up` shows clients the roster
/// `nodes` and the same leader, one of `up`.
async fn agreed(cluster: &Cluster, up: &[u64], nodes: &[u64]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut seen = BTreeSet::new();
        for id in up {
            seen.insert(roster_leader(cluster, *id, nodes).await);
        }
        if seen.len() == 1
            && let Some(Some(leader)) = seen.first()
            && up.contains(leader)
        {
            return *leader;
        }
        assert!(
            Instant::now() < deadline,
            "no roster of {nodes:?} with one leader on {up:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn client_of(cluster: &Cluster, id: u64) -> IggyClient {
    let client = IggyClient::from_connection_string(&format!(
        "iggy://{ROOT_USERNAME}:{ROOT_PASSWORD}@{}",
        cluster.address(id)
    ))
    .expect("connection string");
    client.connect().await.expect("connect");
    client
}

/// The SDK producing until `stop`: batches of 5 alternating between the
/// partitions, a failed send retried (as an application would); every
/// acknowledged payload goes into `acknowledged`. Returns the failed
/// sends.
async fn produce(
    client: IggyClient,
    acknowledged: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let mut next = 0u64;
    let mut failures = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let partition = u32::try_from(next / 5).unwrap_or(0) % PARTITIONS;
        let mut batch = messages("m", next, 5);
        match client
            .send_messages(
                &named(STREAM),
                &named(TOPIC),
                &Partitioning::partition_id(partition),
                &mut batch,
            )
            .await
        {
            Ok(_) => {
                let mut acknowledged = acknowledged.lock().expect("ledger");
                for message in &batch {
                    acknowledged.insert(String::from_utf8_lossy(&message.payload).into_owned());
                }
                next += 5;
            }
            Err(error) => {
                failures.push(format!("send at {next}: {error}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    failures
}

fn acknowledged_now(acknowledged: &Mutex<BTreeSet<String>>) -> usize {
    acknowledged.lock().expect("ledger").len()
}

/// Waits up to 10 s for the SDK's producer to get `more` acknowledgements
/// past what it had.
async fn producing_goes_on(acknowledged: &Mutex<BTreeSet<String>>, more: usize, when: &str) {
    let from = acknowledged_now(acknowledged);
    let deadline = Instant::now() + Duration::from_secs(10);
    while acknowledged_now(acknowledged) < from + more {
        assert!(
            Instant::now() < deadline,
            "the SDK stopped being acknowledged {when}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A refused request: exit 78, the reason on stderr.
fn assert_refused(out: &Output, says: &str) {
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(out.stderr.contains(says), "expected {says:?}: {out:?}");
}

/// A membership change's answer: exit 0, every group (the metadata group
/// first) done, with `voters` after it.
fn assert_changed(out: &Output, groups: usize, voters: &[u64]) -> MembershipChange {
    assert_eq!(out.code(), Some(0), "{out:?}");
    let change: MembershipChange = serde_json::from_str(&out.stdout).expect("the answer as JSON");
    assert!(change.all_done(), "{change:?}");
    assert_eq!(change.groups.len(), groups, "{change:?}");
    assert_eq!(change.groups[0].group, METADATA_GROUP);
    for group in &change.groups {
        assert_eq!(group.voters, voters, "{change:?}");
    }
    change
}

// Proves a dead node is replaced through the admin socket with the SDK
// producing throughout: node 3 is SIGKILLed, removals that would leave no
// live quorum or name no node are refused, node 4 (joining) is added to
// every group from node 1 (groups led elsewhere forwarded to their
// leader), node 3 is removed from node 2, an even voter count is refused,
// then node 4 leads every group and serves every acknowledged message,
// and a topic created after the change is replicated to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_replaced_by_a_new_one_while_the_sdk_produces() {
    let started = Instant::now();
    let layout = Layout::loopback_for(4);
    let mut cluster = Cluster::start_certified(&layout, TIMING, 4);
    let first = agreed(&cluster, &[1, 2, 3], &[1, 2, 3]).await;
    let client = client_of(&cluster, first).await;
    client.create_stream(STREAM).await.expect("stream");
    client
        .create_topic(&named(STREAM), TOPIC, &topic_options(PARTITIONS))
        .await
        .expect("topic");
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(client, acknowledged.clone(), stop.clone()));
    producing_goes_on(&acknowledged, 50, "at first").await;
    // The groups: the metadata group and each partition's.
    let groups = 1 + PARTITIONS as usize;

    // Node 3 dies.
    cluster.node(3).kill();
    assert_refused(
        &cli(
            &cluster.admin_socket(1),
            &["remove-node", "--id", "9", "--json"],
        ),
        "unknown node 9",
    );
    assert_refused(
        &cli(
            &cluster.admin_socket(1),
            &["remove-node", "--id", "2", "--json"],
        ),
        "no quorum",
    );

    // Node 4 joins and is added from node 1.
    cluster.start_node(&layout, TIMING, 4, &[1, 2, 3, 4], true);
    let out = cli(
        &cluster.admin_socket(1),
        &[
            "add-node",
            "--id",
            "4",
            "--address",
            &layout.clients[3].to_string(),
            "--replication-address",
            &layout.replication[3].to_string(),
            "--json",
        ],
    );
    let added = assert_changed(&out, groups, &[1, 2, 3, 4]);
    assert!(
        added
            .note
            .as_deref()
            .is_some_and(|note| note.contains("even")),
        "{added:?}"
    );
    producing_goes_on(&acknowledged, 25, "after node 4 was added").await;

    // Node 3 is removed, asked on node 2.
    let out = cli(
        &cluster.admin_socket(2),
        &["remove-node", "--id", "3", "--json"],
    );
    assert_changed(&out, groups, &[1, 2, 4]);
    sees_voters(&cluster, 1, groups, &[1, 2, 4]).await;
    // Again, on node 1 once it has heard of the change (asked before, its
    // own check passes and the leaders answer `unchanged`): node 3 is in
    // no group any more.
    assert_refused(
        &cli(
            &cluster.admin_socket(1),
            &["remove-node", "--id", "3", "--json"],
        ),
        "unknown node 3",
    );
    // Down to two voters would be an even count.
    assert_refused(
        &cli(
            &cluster.admin_socket(1),
            &["remove-node", "--id", "1", "--json"],
        ),
        "even count",
    );
    agreed(&cluster, &[1, 2, 4], &[1, 2, 4]).await;
    producing_goes_on(&acknowledged, 25, "after node 3 was removed").await;

    // Node 4 takes every group and serves what was acknowledged.
    for id in [1, 2] {
        let out = cli(
            &cluster.admin_socket(id),
            &["transfer-leader", "--to", "4", "--json"],
        );
        assert_eq!(out.code(), Some(0), "transfer from node {id}: {out:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = status_of(&cluster, 4).expect("node 4's status");
        if status
            .groups
            .iter()
            .all(|group| group.leader == Some(4) && group.voters == [1, 2, 4])
        {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 does not lead every group of voters 1, 2, 4: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.groups.len(), groups, "{status:?}");
    assert_eq!(agreed(&cluster, &[1, 2, 4], &[1, 2, 4]).await, 4);
    producing_goes_on(&acknowledged, 25, "with node 4 leading").await;
    stop.store(true, Ordering::Relaxed);
    let failures = producer.await.expect("the producer");
    let ledger = acknowledged.lock().expect("ledger").clone();
    let reader = client_of(&cluster, 4).await;
    assert_holds_every_acknowledged(&everything(&reader).await, &ledger, "node 4 leading");

    // A topic created now starts on the voters 1, 2, 4 and reaches node 4.
    let before: BTreeSet<String> = status
        .groups
        .iter()
        .map(|group| group.group.clone())
        .collect();
    reader
        .create_topic(&named(STREAM), "after", &topic_options(1))
        .await
        .expect("a topic after the change");
    // The new group elects its leader first: a send is retried meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut batch = messages("after", 0, 20);
        match reader
            .send_messages(
                &named(STREAM),
                &named("after"),
                &Partitioning::partition_id(0),
                &mut batch,
            )
            .await
        {
            Ok(_) => break,
            Err(error) => assert!(
                Instant::now() < deadline,
                "the new topic takes no messages: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = status_of(&cluster, 4).expect("node 4's status");
        let new_groups: Vec<_> = status
            .groups
            .iter()
            .filter(|group| !before.contains(&group.group))
            .collect();
        let replicated = new_groups.len() == 1
            && new_groups.iter().all(|group| {
                group.voters == [1, 2, 4]
                    && group.applied.is_some()
                    && group.applied == group.committed
            });
        if replicated {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new topic's group did not reach node 4: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Node 4 serves the new topic's messages from its own copy.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let polled = reader
            .poll_messages(
                &named(STREAM),
                &named("after"),
                Some(0),
                &Consumer::new(named("after-checker")),
                &PollingStrategy::offset(0),
                100,
                false,
            )
            .await
            .expect("poll the new topic");
        if polled.messages.len() >= 20 {
            // (A send retried after an answer that never came may be
            // stored twice: the first 20 are the batch.)
            let expected: Vec<String> = (0..20).map(|n| format!("after-{n}")).collect();
            assert_eq!(payloads(&polled)[..20], expected[..]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 served {} of 20",
            polled.messages.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "cluster_members: {} messages acknowledged, {} sends retried, {:?}",
        ledger.len(),
        failures.len(),
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
