//! `iggyd cluster status` and `iggyd cluster transfer-leader` against a
//! real three-node cluster (`cluster.rs`'s): every node's status names one
//! agreed leader per group, a transfer moves every group the leader leads
//! while the official SDK keeps sending and polling, and what cannot work
//! is refused with exit 78 and a message naming why; the node certificates
//! rotate to a new CA on SIGHUP (a certificate naming another node is
//! refused, the running one kept).

use crate::cluster::{
    Cluster, NODES, STREAM, TOPIC, agreed_leader, client_of, leader_client_with_topic,
};
use crate::common::*;
use iggy::prelude::*;
use iggyd_admin_api::cluster::{ClusterStatus, METADATA_GROUP, Transfer};
use iggyd_testkit::{Output, iggyd_command, run};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `iggyd cluster <args> --socket <socket>`.
pub(crate) fn cli(socket: &Path, args: &[&str]) -> Output {
    let mut command = iggyd_command();
    command
        .arg("cluster")
        .args(args)
        .arg("--socket")
        .arg(socket);
    run(&mut command)
}

pub(crate) fn status_of(cluster: &Cluster, id: u64) -> (Option<i32>, Option<ClusterStatus>) {
    let out = cli(&cluster.admin_socket(id), &["status", "--json"]);
    (out.code(), serde_json::from_str(&out.stdout).ok())
}

/// Every group's leader as every node sees it, once all of them answer
/// exit 0 with the same groups and the same leader for each (`expect`:
/// the groups there must be), within 30 s.
pub(crate) fn agreed_groups(cluster: &Cluster, expect: usize) -> BTreeMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut views = Vec::new();
        for id in 1..=NODES {
            let (code, status) = status_of(cluster, id);
            if code == Some(0)
                && let Some(status) = status
            {
                assert_eq!(status.node_id, id);
                assert_eq!(status.nodes.len(), NODES as usize, "{status:?}");
                let leaders: BTreeMap<String, u64> = status
                    .groups
                    .iter()
                    .filter_map(|group| Some((group.group.clone(), group.leader?)))
                    .collect();
                views.push(leaders);
            }
        }
        if views.len() == NODES as usize
            && views[0].len() == expect
            && views.iter().all(|view| *view == views[0])
        {
            return views.swap_remove(0);
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader per group on every node: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An application's load through the SDK: sends a batch and polls what
/// it has not read yet until `stop`, then reads the rest (within 10 s);
/// what it read must be what it sent, in order. Returns the count and
/// every error the SDK returned. (A poll may come back empty: a follower
/// serves what it knows is committed, which can trail the leader's
/// acknowledgement by a heartbeat; an application polls again.)
async fn load(client: IggyClient, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let mut sent = 0u64;
    let mut read = 0u64;
    let mut errors = Vec::new();
    let consumer = Consumer::new(named("admin-load"));
    let mut drain_until = None;
    loop {
        if drain_until.is_none() && stop.load(Ordering::Relaxed) {
            drain_until = Some(Instant::now() + Duration::from_secs(10));
        }
        match drain_until {
            Some(deadline) if read == sent || Instant::now() > deadline => break,
            Some(_) => {}
            None => {
                let mut batch = messages("load", sent, 5);
                match client
                    .send_messages(
                        &named(STREAM),
                        &named(TOPIC),
                        &Partitioning::partition_id(0),
                        &mut batch,
                    )
                    .await
                {
                    Ok(_) => sent += 5,
                    Err(error) => errors.push(format!("send after {sent}: {error}")),
                }
            }
        }
        match client
            .poll_messages(
                &named(STREAM),
                &named(TOPIC),
                Some(0),
                &consumer,
                &PollingStrategy::offset(read),
                100,
                false,
            )
            .await
        {
            Ok(polled) => {
                let expected: Vec<String> = (read..read + polled.messages.len() as u64)
                    .map(|n| format!("load-{n}"))
                    .collect();
                if payloads(&polled) != expected {
                    errors.push(format!("poll at {read}: {:?}", payloads(&polled)));
                    break;
                }
                read += polled.messages.len() as u64;
            }
            Err(error) => errors.push(format!("poll at {read}: {error}")),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if read != sent {
        errors.push(format!("read {read} of {sent} sent"));
    }
    (sent, errors)
}

// Proves the admin socket operates a live cluster: `cluster status` on
// every node names the same leader for the metadata group and the
// partition's group (exit 0); `transfer-leader` on the leader hands every
// group it leads to another node, waits until it leads, and the SDK keeps
// sending and polling through the move without an error; one group moves
// alone with `--group`; and the refusals (a node that does not lead, an
// unknown node, this node itself, a malformed group) name why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_agrees_and_transfer_leader_moves_groups_under_sdk_load() {
    let cluster = Cluster::start();
    let setup = leader_client_with_topic(&cluster).await;
    drop(setup);
    let first = agreed_groups(&cluster, 2);
    let leader = first[METADATA_GROUP];
    let partition = first
        .keys()
        .find(|group| group.as_str() != METADATA_GROUP)
        .expect("the partition's group")
        .clone();
    eprintln!("cluster admin: leaders at first {first:?}");
    // One group alone (`--group`): the partition's group joins the
    // metadata leader, so that node leads both.
    let owner = first[&partition];
    if owner != leader {
        let out = cli(
            &cluster.admin_socket(owner),
            &[
                "transfer-leader",
                "--to",
                &leader.to_string(),
                "--group",
                &partition,
            ],
        );
        assert_eq!(out.code(), Some(0), "{out:?}");
        assert!(out.stdout.contains("moved in"), "{}", out.stdout);
    }
    let before = agreed_groups(&cluster, 2);
    assert_eq!(before[&partition], leader, "{before:?}");
    assert_eq!(before[METADATA_GROUP], leader, "{before:?}");

    // The human form names every node and group.
    let table = cli(&cluster.admin_socket(leader), &["status"]);
    assert_eq!(table.code(), Some(0), "{table:?}");
    assert!(table.stdout.contains("REACHABLE"), "{}", table.stdout);
    assert!(table.stdout.contains(&partition), "{}", table.stdout);

    // The SDK works on while the leadership moves.
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(client_of(&cluster, leader).await, stop.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let to = (1..=NODES).find(|id| *id != leader).expect("another node");
    let socket = cluster.admin_socket(leader);
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        cli(
            &socket,
            &["transfer-leader", "--to", &to.to_string(), "--json"],
        )
    })
    .await
    .expect("the transfer");
    let took = started.elapsed();
    assert_eq!(out.code(), Some(0), "{out:?}");
    let transfer: Transfer = serde_json::from_str(&out.stdout).expect("transfer JSON");
    let moved: BTreeSet<&str> = transfer.moves.iter().map(|m| m.group.as_str()).collect();
    let led: BTreeSet<&str> = before
        .iter()
        .filter(|(_, node)| **node == leader)
        .map(|(group, _)| group.as_str())
        .collect();
    assert_eq!(moved, led, "every group node {leader} led: {transfer:?}");
    assert_eq!(moved.len(), 2, "{transfer:?}");
    assert!(transfer.all_moved(), "{transfer:?}");
    eprintln!(
        "cluster admin: transfer-leader {leader} -> {to} of {} group(s) took {took:?} ({:?})",
        transfer.moves.len(),
        transfer
            .moves
            .iter()
            .map(|m| (m.group.as_str(), m.elapsed_ms))
            .collect::<Vec<_>>()
    );
    let after = agreed_groups(&cluster, 2);
    assert_eq!(after[METADATA_GROUP], to, "{after:?}");
    assert_eq!(agreed_leader(&cluster, &[1, 2, 3]).await, to);

    // Keep the load going a little on the new leader, then stop it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (sent, errors) = load.await.expect("the load");
    eprintln!("cluster admin: the SDK sent {sent} messages across the transfer");
    assert!(sent > 0, "the load sent nothing");
    assert!(errors.is_empty(), "the SDK saw errors: {errors:?}");

    let after = agreed_groups(&cluster, 2);
    assert_eq!(after[&partition], to, "{after:?}");

    // Refusals.
    let follower = (1..=NODES).find(|id| *id != to).expect("a follower");
    let out = cli(
        &cluster.admin_socket(follower),
        &[
            "transfer-leader",
            "--to",
            &to.to_string(),
            "--group",
            "metadata",
        ],
    );
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("does not lead group metadata: node {to} does")),
        "{out:?}"
    );
    let out = cli(&cluster.admin_socket(to), &["transfer-leader", "--to", "9"]);
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(out.stderr.contains("unknown node 9"), "{out:?}");
    let out = cli(
        &cluster.admin_socket(to),
        &["transfer-leader", "--to", &to.to_string()],
    );
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(out.stderr.contains("is this node"), "{out:?}");
    let out = cli(
        &cluster.admin_socket(to),
        &["transfer-leader", "--to", "1", "--group", "orders/x"],
    );
    assert_eq!(
        out.code(),
        Some(2),
        "a malformed group is a usage error: {out:?}"
    );
    assert!(out.stderr.contains("expected"), "{out:?}");
}

// Proves a node without a cluster refuses at once and says why: from the
// configuration (no daemon asked), and from a single node's admin socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commands_refuse_clearly_without_a_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut command = iggyd_command();
    command
        .arg("--data-dir")
        .arg(dir.path())
        .args(["cluster", "status"]);
    let out = run(&mut command);
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(out.stderr.contains("[cluster] enabled = false"), "{out:?}");

    let daemon = SdkDaemon::start();
    let socket = daemon.data_dir().join("iggyd.sock");
    let started = Instant::now();
    let out = cli(&socket, &["transfer-leader", "--to", "2"]);
    assert_eq!(out.code(), Some(78), "{out:?}");
    assert!(
        out.stderr.contains("this daemon runs no cluster"),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let out = cli(&dir.path().join("absent.sock"), &["status"]);
    assert_eq!(out.code(), Some(69), "{out:?}");
}

/// Waits until `node`'s log holds `needle` `count` times, within 15 s.
fn logged(cluster: &mut Cluster, node: u64, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = cluster.node(node).log();
        if log.matches(needle).count() >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {node} never logged {needle:?} {count} times: {log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// Proves the node certificates rotate without a restart: every node's
// `[cluster.tls]` files are replaced by a new CA's, and SIGHUP loads them
// on every node; then a follower restarts (it starts with the new files
// only) and rejoins: it reaches the others, which now trust the new CA and
// present its certificates (without the reload they would refuse it, and
// it them), agrees on every group's leader and serves what was sent
// before and after. A certificate naming another node is refused at the
// next SIGHUP, naming why, and the running one kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificates_rotate_to_a_new_ca_on_sighup() {
    let mut cluster = Cluster::start();
    let client = leader_client_with_topic(&cluster).await;
    send_to(&client, STREAM, TOPIC, 0, messages("before", 0, 10)).await;
    let groups = agreed_groups(&cluster, 2);

    let rotated =
        iggyd_peer::ClusterCerts::generate("compat", &[1, 2, 3]).expect("new certificates");
    for id in 1..=NODES {
        let dir = cluster.certs_dir().to_path_buf();
        std::fs::write(iggyd_peer::ClusterCerts::ca_file(&dir), &rotated.ca_pem).expect("ca");
        std::fs::write(
            iggyd_peer::ClusterCerts::cert_file(&dir, id),
            &rotated.nodes[&id].cert_pem,
        )
        .expect("cert");
        std::fs::write(
            iggyd_peer::ClusterCerts::key_file(&dir, id),
            &rotated.nodes[&id].key_pem,
        )
        .expect("key");
    }
    for id in 1..=NODES {
        cluster.node(id).signal(nix::sys::signal::Signal::SIGHUP);
    }
    for id in 1..=NODES {
        logged(&mut cluster, id, "reload: cluster certificate applied", 1);
    }

    // A follower of every group restarts on the new files alone.
    let leaders: BTreeSet<u64> = groups.values().copied().collect();
    let follower = (1..=NODES)
        .find(|id| !leaders.contains(id))
        .unwrap_or_else(|| {
            (1..=NODES)
                .find(|id| *id != groups[METADATA_GROUP])
                .expect("a follower")
        });
    cluster.node(follower).stop();
    cluster.node(follower).restart();
    send_to(&client, STREAM, TOPIC, 0, messages("after", 0, 10)).await;
    // The restarted node takes the lead of every group (over connections
    // made with the new certificates) and serves all 20 messages.
    for (group, owner) in agreed_groups(&cluster, 2) {
        if owner == follower {
            continue;
        }
        let out = cli(
            &cluster.admin_socket(owner),
            &[
                "transfer-leader",
                "--to",
                &follower.to_string(),
                "--group",
                &group,
            ],
        );
        assert_eq!(out.code(), Some(0), "{out:?}");
    }
    let led = agreed_groups(&cluster, 2);
    assert!(led.values().all(|node| *node == follower), "{led:?}");
    let reader = client_of(&cluster, follower).await;
    let polled = reader
        .poll_messages(
            &named(STREAM),
            &named(TOPIC),
            Some(0),
            &Consumer::new(named("checker")),
            &PollingStrategy::offset(0),
            1_000,
            false,
        )
        .await
        .expect("a poll on the restarted node");
    assert_eq!(polled.messages.len(), 20);
    // (`iggyd cluster status` probes each peer's replication port with a
    // bare TCP connect, which the peer logs as a handshake cut short: not
    // a certificate's refusal.)
    for id in 1..=NODES {
        let log = cluster.node(id).log();
        assert!(
            !log.contains("invalid peer certificate"),
            "node {id} refused a certificate: {log}"
        );
    }

    // Node 1's certificate file now holds node 2's certificate: refused.
    let dir = cluster.certs_dir().to_path_buf();
    std::fs::write(
        iggyd_peer::ClusterCerts::cert_file(&dir, 1),
        &rotated.nodes[&2].cert_pem,
    )
    .expect("cert");
    cluster.node(1).allow_log("cluster certificate refused");
    cluster.node(1).signal(nix::sys::signal::Signal::SIGHUP);
    logged(&mut cluster, 1, "reload: cluster certificate refused", 1);
    let log = cluster.node(1).log();
    assert!(log.contains("names node 2"), "{log}");
    // Node 1 goes on with the identity it runs: the cluster takes sends.
    send_to(&reader, STREAM, TOPIC, 0, messages("kept", 0, 5)).await;
}
