//! A three-node cluster broken on purpose while the official SDK produces
//! and consumes: each node runs in a network namespace of its own (a veth
//! pair to a bridge the test makes; traffic stays on this machine), and the
//! nemesis cuts the leader off from its peers in the kernel (nftables in its
//! namespace), cuts off a follower (a minority), pauses the leader
//! (SIGSTOP), drops packets at random between all nodes, and kills the
//! leader (SIGKILL), each while the producer goes on. Afterwards every
//! node's copy is read while it leads and checked: the same on every node,
//! offsets dense, every acknowledged message present, a batch acknowledged
//! at its first attempt present exactly once, and everything the consumer
//! read during the faults is what the final log holds at that offset
//! (nothing uncommitted was ever served).
//!
//! Needs root (namespaces, nftables), as CI runs; every namespace,
//! link and rule it makes is removed when it ends, also when it fails, and
//! ones a killed run left behind are removed by the next.

use crate::cluster::{
    Cluster, Layout, NODES, PARTITIONS, STREAM, TOPIC, agreed_leader, client_of, counts,
    each_node_leading,
};
use crate::common::*;
use iggy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENT_PORT: u16 = 8090;
const REPLICATION_PORT: u16 = 8091;
const PER_BATCH: u64 = 5;
/// Batches the majority must acknowledge while a fault lasts.
const PROGRESS: u64 = 15;
/// How long the cut-off leader stays cut off once the others lead.
const CUT_OFF_HOLD: Duration = Duration::from_secs(2);
/// How long a fault may keep the producer from that progress.
const FAULT_DEADLINE: Duration = Duration::from_secs(45);

/// Runs `program` with `args`; panics with its output when it fails.
fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("{program}: {error} (needs iproute2 and nftables)"));
    assert!(
        output.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `program` with `args`, ignoring how it ends (cleanup).
fn run_quietly(program: &str, args: &[&str]) {
    let _ = Command::new(program).args(args).output();
}

/// The namespaces, bridge and links of one run, removed on drop.
struct Lab {
    tag: u32,
    subnet: u8,
}

impl Lab {
    fn namespace(tag: u32, id: u64) -> String {
        format!("ign-{tag}-{id}")
    }

    fn bridge(tag: u32) -> String {
        format!("ignb-{tag}")
    }

    /// Removes what runs that were killed before their cleanup left: names
    /// carry the pid of the test process that made them.
    fn sweep() {
        let alive = |tag: &str| {
            tag.parse::<u32>()
                .is_ok_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        };
        if let Ok(output) = Command::new("ip").args(["netns", "list"]).output() {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or_default();
                if let Some(rest) = name.strip_prefix("ign-")
                    && let Some((tag, _)) = rest.split_once('-')
                    && !alive(tag)
                {
                    run_quietly("ip", &["netns", "del", name]);
                }
            }
        }
        if let Ok(output) = Command::new("ip")
            .args(["-o", "link", "show", "type", "bridge"])
            .output()
        {
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let name = line.split(':').nth(1).unwrap_or_default().trim();
                if let Some(tag) = name.strip_prefix("ignb-")
                    && !alive(tag)
                {
                    run_quietly("ip", &["link", "del", name]);
                }
            }
        }
    }

    fn new() -> Lab {
        Lab::sweep();
        let tag = std::process::id();
        let lab = Lab {
            tag,
            // One run at a time per pid; the subnet varies with it so that
            // a leftover of another run never shares addresses.
            subnet: (tag % 200) as u8 + 20,
        };
        let bridge = Lab::bridge(tag);
        run("ip", &["link", "add", &bridge, "type", "bridge"]);
        run(
            "ip",
            &["addr", "add", &format!("{}/24", lab.host()), "dev", &bridge],
        );
        run("ip", &["link", "set", &bridge, "up"]);
        for id in 1..=NODES {
            let namespace = Lab::namespace(tag, id);
            let veth = format!("ignv{tag}-{id}");
            run("ip", &["netns", "add", &namespace]);
            run(
                "ip",
                &[
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                    &namespace,
                ],
            );
            run("ip", &["link", "set", &veth, "master", &bridge, "up"]);
            run(
                "ip",
                &[
                    "-n",
                    &namespace,
                    "addr",
                    "add",
                    &format!("{}/24", lab.ip(id)),
                    "dev",
                    "eth0",
                ],
            );
            run("ip", &["-n", &namespace, "link", "set", "eth0", "up"]);
            run("ip", &["-n", &namespace, "link", "set", "lo", "up"]);
        }
        lab
    }

    /// This machine's address on the bridge (the test's clients).
    fn host(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 1)
    }

    fn ip(&self, id: u64) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 10 + id as u8)
    }

    fn layout(&self) -> Layout {
        let at = |port| {
            (1..=NODES)
                .map(|id| SocketAddr::new(IpAddr::V4(self.ip(id)), port))
                .collect()
        };
        Layout {
            clients: at(CLIENT_PORT),
            replication: at(REPLICATION_PORT),
            metrics: None,
            namespaces: Some((1..=NODES).map(|id| Lab::namespace(self.tag, id)).collect()),
        }
    }

    /// The other nodes' addresses, as an nftables set's elements.
    fn peers_of(&self, id: u64) -> String {
        let peers: Vec<String> = (1..=NODES)
            .filter(|other| *other != id)
            .map(|other| self.ip(other).to_string())
            .collect();
        peers.join(", ")
    }

    /// Loads `verdict` for packets between node `id` and the other nodes
    /// into the kernel of its namespace (the table `nemesis`).
    fn rule(&self, id: u64, verdict: &str) {
        let peers = self.peers_of(id);
        let rules = format!(
            "table inet nemesis {{\n\
             \tchain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {peers} }} {verdict}; }}\n\
             \tchain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {peers} }} {verdict}; }}\n\
             }}\n"
        );
        let file = tempfile::NamedTempFile::new().expect("rules file");
        std::fs::write(file.path(), rules).expect("write rules");
        let namespace = Lab::namespace(self.tag, id);
        let path = file.path().display().to_string();
        run("ip", &["netns", "exec", &namespace, "nft", "-f", &path]);
    }

    /// Drops every packet between node `id` and the other nodes; the
    /// test's clients still reach it.
    fn cut_off(&self, id: u64) {
        self.rule(id, "drop");
    }

    /// Drops `percent` % of the packets between nodes at random, in every
    /// node's kernel (this kernel has no netem for delays).
    fn lossy(&self, percent: u32) {
        for id in 1..=NODES {
            self.rule(id, &format!("numgen random mod 100 < {percent} drop"));
        }
    }

    fn heal(&self, id: u64) {
        let namespace = Lab::namespace(self.tag, id);
        run(
            "ip",
            &[
                "netns", "exec", &namespace, "nft", "delete", "table", "inet", "nemesis",
            ],
        );
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for id in 1..=NODES {
            // The veth pair goes with its namespace, and the rules and
            // queueing disciplines inside it too.
            run_quietly("ip", &["netns", "del", &Lab::namespace(self.tag, id)]);
        }
        run_quietly("ip", &["link", "del", &Lab::bridge(self.tag)]);
    }
}

/// One batch the producer sent: its payloads, and how many attempts failed
/// before one was acknowledged.
struct Sent {
    payloads: Vec<String>,
    failed_attempts: u32,
}

/// Sends batches round-robin over the partitions until told to stop,
/// retrying a failed batch (with the same payloads, as an application
/// would) until it is acknowledged.
async fn produce(
    client: IggyClient,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
) -> Vec<Sent> {
    let mut sent = Vec::new();
    for batch in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let partition = (batch % u64::from(PARTITIONS)) as u32;
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut failed_attempts = 0;
        let started = Instant::now();
        loop {
            let mut messages = messages(&format!("b{batch}-"), 0, PER_BATCH);
            match client
                .send_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    &Partitioning::partition_id(partition),
                    &mut messages,
                )
                .await
            {
                Ok(_) => {
                    sent.push(Sent {
                        payloads: messages
                            .iter()
                            .map(|message| String::from_utf8_lossy(&message.payload).into_owned())
                            .collect(),
                        failed_attempts,
                    });
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(error) => {
                    eprintln!(
                        "nemesis: batch {batch} attempt {} failed after {:?}: {error}",
                        failed_attempts + 1,
                        started.elapsed()
                    );
                    failed_attempts += 1;
                    assert!(
                        Instant::now() < deadline,
                        "batch {batch} not accepted within 90 s: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    sent
}

/// Polls every partition from offset 0 onwards until told to stop; what it
/// was served: (partition, offset) → payload.
async fn consume(client: IggyClient, stop: Arc<AtomicBool>) -> BTreeMap<(u32, u64), String> {
    let mut read = BTreeMap::new();
    let mut next = vec![0u64; PARTITIONS as usize];
    let consumer = Consumer::new(named("nemesis-reader"));
    while !stop.load(Ordering::Relaxed) {
        for partition in 0..PARTITIONS {
            let polled = client
                .poll_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    Some(partition),
                    &consumer,
                    &PollingStrategy::offset(next[partition as usize]),
                    100,
                    false,
                )
                .await;
            let Ok(polled) = polled else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            for (offset, payload) in offsets(&polled).into_iter().zip(payloads(&polled)) {
                assert!(
                    read.insert((partition, offset), payload).is_none(),
                    "offset {offset} of partition {partition} served twice"
                );
                next[partition as usize] = offset + 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    read
}

/// Waits until the producer has had `PROGRESS` more batches acknowledged.
async fn progress(acknowledged: &AtomicU64, what: &str) {
    let from = acknowledged.load(Ordering::Relaxed);
    let started = Instant::now();
    while acknowledged.load(Ordering::Relaxed) < from + PROGRESS {
        assert!(
            started.elapsed() < FAULT_DEADLINE,
            "{what}: only {} batches acknowledged in {FAULT_DEADLINE:?}",
            acknowledged.load(Ordering::Relaxed) - from
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "nemesis: {what}: {PROGRESS} batches acknowledged in {:?}",
        started.elapsed()
    );
}

// Proves the cluster's promises under the faults a network and a machine
// have, with the official SDK unmodified (see the module's comment for
// what is broken and what is checked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_in_the_kernel_lose_no_acknowledged_message_and_serve_nothing_uncommitted() {
    if !nix::unistd::geteuid().is_root() {
        return iggyd_testkit::skip("the nemesis needs root for network namespaces");
    }
    if Command::new("nft").arg("--version").output().is_err() {
        return iggyd_testkit::skip("the nemesis needs nft (Debian nftables)");
    }
    let lab = Lab::new();
    let mut cluster = Cluster::start_on(&lab.layout(), Some(("500ms", "100ms")));
    let first = agreed_leader(&cluster, &[1, 2, 3]).await;
    let setup = client_of(&cluster, first).await;
    setup.create_stream(STREAM).await.expect("stream");
    setup
        .create_topic(&named(STREAM), TOPIC, &topic_options(PARTITIONS))
        .await
        .expect("topic");

    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let producer = tokio::spawn(produce(
        client_of(&cluster, 1).await,
        stop.clone(),
        acknowledged.clone(),
    ));
    let consumer = tokio::spawn(consume(client_of(&cluster, 2).await, stop.clone()));
    progress(&acknowledged, "before any fault").await;

    // The leader cut off from both peers until the other two elect a
    // leader of their own, and a while longer: then healed, and the
    // producer goes on. (A batch whose outcome the cut-off node left in
    // doubt waits there to be resolved rather than be sent to the new
    // leader and perhaps stored twice: the producer is held until the
    // heal, or until the SDK gives up after 30 s.)
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    lab.cut_off(leader);
    let rest: Vec<u64> = (1..=NODES).filter(|id| *id != leader).collect();
    let next = agreed_leader(&cluster, &rest).await;
    eprintln!("nemesis: leader {leader} cut off, node {next} leads the majority");
    tokio::time::sleep(CUT_OFF_HOLD).await;
    lab.heal(leader);
    progress(&acknowledged, "cut-off leader healed").await;

    // A follower cut off: the majority goes on without it.
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    let follower = (1..=NODES).find(|id| *id != leader).expect("a follower");
    lab.cut_off(follower);
    progress(&acknowledged, "follower cut off").await;
    lab.heal(follower);

    // The leader paused until the others elect one of their own, then
    // resumed: it finds itself deposed. (A client waiting on the paused
    // process waits with it: the SDK has no request timeout.)
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    cluster
        .node(leader)
        .signal(nix::sys::signal::Signal::SIGSTOP);
    let rest: Vec<u64> = (1..=NODES).filter(|id| *id != leader).collect();
    let next = agreed_leader(&cluster, &rest).await;
    eprintln!("nemesis: leader {leader} paused, node {next} leads the others");
    cluster
        .node(leader)
        .signal(nix::sys::signal::Signal::SIGCONT);
    progress(&acknowledged, "paused leader resumed").await;

    // One packet in twenty between nodes lost, in both directions.
    lab.lossy(5);
    progress(&acknowledged, "lossy network").await;
    for id in 1..=NODES {
        lab.heal(id);
    }

    // The leader killed, and back.
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    cluster.node(leader).kill();
    progress(&acknowledged, "leader killed").await;
    cluster.node(leader).restart();
    progress(&acknowledged, "killed node back").await;

    stop.store(true, Ordering::Relaxed);
    let sent = producer.await.expect("the producer");
    let read = consumer.await.expect("the consumer");

    let copies = each_node_leading(&mut cluster).await;
    let (first_node, reference) = &copies[0];
    for (node, copy) in &copies[1..] {
        assert!(
            copy == reference,
            "node {node}'s copy differs from node {first_node}'s: messages per partition {:?} and {:?}",
            counts(copy),
            counts(reference)
        );
    }
    let mut held: BTreeMap<&str, u32> = BTreeMap::new();
    for (_, payloads) in reference {
        for payload in payloads {
            *held.entry(payload.as_str()).or_default() += 1;
        }
    }
    let mut retried_and_stored_twice = 0;
    for batch in &sent {
        for payload in &batch.payloads {
            let copies = held.get(payload.as_str()).copied().unwrap_or(0);
            assert!(copies > 0, "acknowledged {payload} is on no node");
            if batch.failed_attempts == 0 {
                assert_eq!(
                    copies, 1,
                    "{payload}, acknowledged at once, stored {copies} times"
                );
            } else if copies > 1 {
                retried_and_stored_twice += 1;
            }
        }
    }
    let by_offset: BTreeMap<(u32, u64), &String> = reference
        .iter()
        .flat_map(|(partition, payloads)| {
            payloads
                .iter()
                .enumerate()
                .map(move |(offset, payload)| ((*partition, offset as u64), payload))
        })
        .collect();
    for ((partition, offset), payload) in &read {
        assert_eq!(
            by_offset.get(&(*partition, *offset)).copied(),
            Some(payload),
            "the consumer read {payload} at offset {offset} of partition {partition}, \
             which the final log does not hold there"
        );
    }
    let retried: u32 = sent.iter().map(|batch| batch.failed_attempts).sum();
    let distinct: BTreeSet<&str> = held.keys().copied().collect();
    eprintln!(
        "nemesis: {} batches acknowledged ({} messages, {} distinct stored), {retried} failed \
         attempts retried, {retried_and_stored_twice} messages of retried batches stored twice, \
         {} messages read during the faults, every copy the same",
        sent.len(),
        sent.len() as u64 * PER_BATCH,
        distinct.len(),
        read.len()
    );
    drop(cluster);
    drop(lab);
}
