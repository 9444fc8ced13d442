//! A three-node cluster of real `iggyd` processes (loopback, generated
//! certificates) and the unmodified SDK: it is sent to the leader, keeps
//! producing while the leader is killed, and every message it was told was
//! stored is served after the failover and after the killed node rejoins,
//! and every node's copy of the partition is the same (each node is shown
//! serving it as the leader, the others stopped in turn).

use crate::common::*;
use iggy::prelude::*;
use iggyd_testkit::TestDaemon;
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const NODES: u64 = 3;
pub(crate) const STREAM: &str = "orders";
pub(crate) const TOPIC: &str = "events";
pub(crate) const PARTITIONS: u32 = 2;
const BATCHES: u64 = 120;
const PER_BATCH: u64 = 10;
/// The batch after which the leader is killed.
const KILL_AT: u64 = 40;
/// The batch before which the killed node is back and a follower that was
/// never down is paused (SIGSTOP), and the one before which it resumes:
/// meanwhile the leader and the node that just rejoined are the majority.
const PAUSE_AT: u64 = 80;
const RESUME_AT: u64 = 100;
/// A paused follower resumes after this at the latest: the client may be
/// on it (a follower serves the sends it gets), and then its sends wait
/// for the resume, as they would for a paused leader.
const PAUSE_FOR: Duration = Duration::from_secs(3);

/// Free loopback ports (bound then released: the daemons bind them next).
///
/// The ports are drawn below the kernel's ephemeral range: a port from
/// that range, released, can be taken by any outgoing connection before
/// the daemon binds it (seen in CI: a joining node started seconds after
/// its address was drawn found it in use). Below the range only another
/// explicit bind can take it.
fn free_addresses(count: usize) -> Vec<SocketAddr> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (low, high) = (10_000_u16, ephemeral_low.max(10_001));
    let random = std::collections::hash_map::RandomState::new();
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(count);
    let mut draw = 0_u64;
    while listeners.len() < count {
        draw += 1;
        assert!(draw < 100_000, "no free port below {high}");
        let mut hasher = random.build_hasher();
        hasher.write_u64(draw);
        let port = low + (hasher.finish() % u64::from(high - low)) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("address"))
        .collect()
}

pub(crate) struct Cluster {
    nodes: Vec<(u64, SocketAddr, TestDaemon)>,
    _certs: tempfile::TempDir,
    /// Environment every node starts with besides the cluster's own.
    env: Vec<(String, String)>,
}

/// Where a cluster's nodes listen, and in which network namespace each
/// runs (`None`: this one).
pub(crate) struct Layout {
    /// Node `id`'s client address at `id - 1`.
    pub clients: Vec<SocketAddr>,
    /// Node `id`'s replication address at `id - 1`.
    pub replication: Vec<SocketAddr>,
    /// Node `id`'s namespace at `id - 1`.
    pub namespaces: Option<Vec<String>>,
    /// Node `id`'s Prometheus endpoint at `id - 1` (`None`: off).
    pub metrics: Option<Vec<SocketAddr>>,
}

impl Layout {
    /// Free loopback ports in this namespace.
    fn loopback() -> Layout {
        Layout::loopback_for(NODES)
    }

    /// Free loopback ports in this namespace for nodes 1 to `nodes`.
    pub(crate) fn loopback_for(nodes: u64) -> Layout {
        let addresses = free_addresses(2 * nodes as usize);
        let (clients, replication) = addresses.split_at(nodes as usize);
        Layout {
            clients: clients.to_vec(),
            replication: replication.to_vec(),
            namespaces: None,
            metrics: None,
        }
    }

    /// Free loopback ports, with a Prometheus endpoint on each node.
    pub(crate) fn loopback_with_metrics() -> Layout {
        let addresses = free_addresses(3 * NODES as usize);
        let (clients, rest) = addresses.split_at(NODES as usize);
        let (replication, metrics) = rest.split_at(NODES as usize);
        Layout {
            clients: clients.to_vec(),
            replication: replication.to_vec(),
            namespaces: None,
            metrics: Some(metrics.to_vec()),
        }
    }
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        Cluster::start_timed(Some(("500ms", "100ms")))
    }

    /// `timing`: election timeout and heartbeat interval (`None`: the
    /// defaults, 1 s and 200 ms).
    fn start_timed(timing: Option<(&str, &str)>) -> Cluster {
        Cluster::start_on(&Layout::loopback(), timing)
    }

    pub(crate) fn start_on(layout: &Layout, timing: Option<(&str, &str)>) -> Cluster {
        Cluster::start_certified(layout, timing, NODES)
    }

    /// Nodes 1 to `NODES` on `layout`, with certificates for nodes 1 to
    /// `certified` (a node joining later needs one from the same CA).
    pub(crate) fn start_certified(
        layout: &Layout,
        timing: Option<(&str, &str)>,
        certified: u64,
    ) -> Cluster {
        Cluster::start_with_env(layout, timing, certified, &[])
    }

    /// [`Cluster::start_certified`], every node with `env` too.
    pub(crate) fn start_with_env(
        layout: &Layout,
        timing: Option<(&str, &str)>,
        certified: u64,
        env: &[(&str, &str)],
    ) -> Cluster {
        let certs = tempfile::tempdir().expect("certs dir");
        let certified: Vec<u64> = (1..=certified.max(NODES)).collect();
        iggyd_peer::ClusterCerts::generate("compat", &certified)
            .and_then(|generated| generated.write_to(certs.path()))
            .expect("cluster certificates");
        let ids: Vec<u64> = (1..=NODES).collect();
        let mut cluster = Cluster {
            nodes: Vec::new(),
            _certs: certs,
            env: env
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        };
        for id in &ids {
            let daemon = cluster.spawn_node(layout, timing, *id, &ids, false);
            cluster
                .nodes
                .push((*id, layout.clients[(*id - 1) as usize], daemon));
        }
        cluster
    }

    /// Starts node `id` of `layout` with `[cluster.nodes]` listing
    /// `roster` (which must include it); `join`: it waits to be added.
    pub(crate) fn start_node(
        &mut self,
        layout: &Layout,
        timing: Option<(&str, &str)>,
        id: u64,
        roster: &[u64],
        join: bool,
    ) {
        let daemon = self.spawn_node(layout, timing, id, roster, join);
        self.nodes.retain(|(node, _, _)| *node != id);
        self.nodes
            .push((id, layout.clients[(id - 1) as usize], daemon));
    }

    fn spawn_node(
        &self,
        layout: &Layout,
        timing: Option<(&str, &str)>,
        id: u64,
        roster: &[u64],
        join: bool,
    ) -> TestDaemon {
        let certs = self._certs.path();
        let listed: Vec<String> = roster
            .iter()
            .map(|id| {
                let index = (*id - 1) as usize;
                format!(
                    "{{id={id},address=\"{}\",replication_address=\"{}\"}}",
                    layout.clients[index], layout.replication[index]
                )
            })
            .collect();
        let listed = format!("[{}]", listed.join(","));
        let index = (id - 1) as usize;
        let address = layout.clients[index];
        let path = |file: std::path::PathBuf| file.display().to_string();
        let mut builder = TestDaemon::builder();
        for (key, value) in &self.env {
            builder = builder.env(key, value);
        }
        if let Some((election, heartbeat)) = timing {
            builder = builder
                .env("IGGYD_CLUSTER__ELECTION_TIMEOUT", election)
                .env("IGGYD_CLUSTER__HEARTBEAT_INTERVAL", heartbeat);
        }
        if let Some(namespaces) = &layout.namespaces {
            builder = builder.netns(&namespaces[index]);
        }
        if let Some(metrics) = &layout.metrics {
            builder = builder.env("IGGYD_METRICS__ADDRESS", &metrics[index].to_string());
        }
        if join {
            builder = builder.env("IGGYD_CLUSTER__JOIN", "true");
        }
        builder
            .listen(&address.to_string())
            // `IGGYD_TEST_LOG`: another filter, to look into a failed run.
            .log_level(Some(
                &std::env::var("IGGYD_TEST_LOG").unwrap_or_else(|_| "info".into()),
            ))
            .env("IGGY_ROOT_USERNAME", ROOT_USERNAME)
            .env("IGGY_ROOT_PASSWORD", ROOT_PASSWORD)
            .env("IGGYD_SHARDING__CPU_ALLOCATION", "1")
            .env("IGGYD_CLUSTER__ENABLED", "true")
            .env("IGGYD_CLUSTER__NAME", "compat")
            .env("IGGYD_CLUSTER__NODE_ID", &id.to_string())
            .env("IGGYD_CLUSTER__NODES", &listed)
            .env(
                "IGGYD_CLUSTER__TLS__CA_FILE",
                &path(iggyd_peer::ClusterCerts::ca_file(certs)),
            )
            .env(
                "IGGYD_CLUSTER__TLS__CERT_FILE",
                &path(iggyd_peer::ClusterCerts::cert_file(certs, id)),
            )
            .env(
                "IGGYD_CLUSTER__TLS__KEY_FILE",
                &path(iggyd_peer::ClusterCerts::key_file(certs, id)),
            )
            .spawn()
    }

    /// The directory every node's `[cluster.tls]` files are in.
    pub(crate) fn certs_dir(&self) -> &Path {
        self._certs.path()
    }

    pub(crate) fn node(&mut self, id: u64) -> &mut TestDaemon {
        &mut self
            .nodes
            .iter_mut()
            .find(|(node, _, _)| *node == id)
            .expect("a node")
            .2
    }

    pub(crate) fn address(&self, id: u64) -> SocketAddr {
        self.nodes
            .iter()
            .find(|(node, _, _)| *node == id)
            .expect("a node")
            .1
    }

    /// Node `id`'s admin socket.
    pub(crate) fn admin_socket(&self, id: u64) -> std::path::PathBuf {
        self.nodes
            .iter()
            .find(|(node, _, _)| *node == id)
            .expect("a node")
            .2
            .data_dir()
            .join("iggyd.sock")
    }

    fn id_of(&self, address: &str) -> Option<u64> {
        self.nodes
            .iter()
            .find(|(_, node, _)| node.to_string() == address)
            .map(|(id, _, _)| *id)
    }
}

/// The node the roster (as `client` reads it) names Leader + Healthy.
pub(crate) async fn leader(cluster: &Cluster, client: &IggyClient) -> Option<u64> {
    let metadata = client.get_cluster_metadata().await.ok()?;
    assert_eq!(metadata.nodes.len(), NODES as usize, "the full roster");
    let leaders: Vec<&ClusterNode> = metadata
        .nodes
        .iter()
        .filter(|node| node.role == ClusterNodeRole::Leader)
        .collect();
    assert!(leaders.len() <= 1, "one leader at most: {metadata:?}");
    let node = leaders.first()?;
    cluster.id_of(&format!("{}:{}", node.ip, node.endpoints.tcp))
}

/// A client of the cluster that dialed `id` (it moves to the leader).
pub(crate) async fn client_of(cluster: &Cluster, id: u64) -> IggyClient {
    // `IGGYD_TEST_SDK_LOG`: a tracing filter for the SDK's own log lines
    // (`iggy=debug` shows its failovers), to look into a failed run.
    if let Ok(filter) = std::env::var("IGGYD_TEST_SDK_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .try_init();
    }
    let client = IggyClient::from_connection_string(&format!(
        "iggy://{ROOT_USERNAME}:{ROOT_PASSWORD}@{}",
        cluster.address(id)
    ))
    .expect("connection string");
    client.connect().await.expect("connect");
    client
}

/// How long one node's answer to "who leads?" may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Waits for a leader, one of `up`, that every node of `up` names.
pub(crate) async fn agreed_leader(cluster: &Cluster, up: &[u64]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = BTreeSet::new();
        for id in up {
            let client = IggyClient::builder()
                .with_tcp()
                .with_server_address(cluster.address(*id).to_string())
                .build()
                .expect("client");
            // The SDK follows the leader it is told of after login, and a
            // follower names a paused leader until its election timeout
            // passes: without a bound, the probe would wait on the paused
            // process as long as it stays paused (the SDK has no request
            // timeout), and so keep it paused.
            let probe = async {
                if client.connect().await.is_ok()
                    && client
                        .login_user(ROOT_USERNAME, ROOT_PASSWORD)
                        .await
                        .is_ok()
                {
                    Some(leader(cluster, &client).await)
                } else {
                    None
                }
            };
            if let Ok(Some(named)) = tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                seen.insert(named);
            }
        }
        // A follower names a stopped leader until its election timeout
        // passes: only a leader that is up counts.
        if seen.len() == 1
            && let Some(Some(leader)) = seen.first()
            && up.contains(leader)
        {
            return *leader;
        }
        assert!(Instant::now() < deadline, "no agreed leader: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A node's copy of the topic: each partition's payloads in offset order.
pub(crate) type TopicCopy = Vec<(u32, Vec<String>)>;

/// Every message of every partition, as payloads, polled from whichever
/// node leads.
pub(crate) async fn everything(client: &IggyClient) -> TopicCopy {
    let mut all = Vec::new();
    for partition in 0..PARTITIONS {
        let mut payloads_of = Vec::new();
        let mut offset = 0;
        loop {
            let polled = client
                .poll_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    Some(partition),
                    &Consumer::new(named("checker")),
                    &PollingStrategy::offset(offset),
                    1_000,
                    false,
                )
                .await
                .expect("poll");
            if polled.messages.is_empty() {
                break;
            }
            for (expected, got) in (offset..).zip(offsets(&polled)) {
                assert_eq!(got, expected, "dense offsets in partition {partition}");
            }
            offset += polled.messages.len() as u64;
            payloads_of.extend(payloads(&polled));
        }
        all.push((partition, payloads_of));
    }
    all
}

/// [`everything`] from a leader once unchanged for 2 s: a new leader
/// serves what it knows committed, and a replica a fault left behind
/// catches up through openraft's backoff, which grows to seconds.
async fn settled_copy(client: &IggyClient) -> TopicCopy {
    let mut last = everything(client).await;
    let mut since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = everything(client).await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_secs(2) {
            return now;
        }
    }
    panic!("the leader's copy kept changing for 30 s");
}

/// Each partition's message count in `copy`, for a failure message.
pub(crate) fn counts(copy: &TopicCopy) -> Vec<(u32, usize)> {
    copy.iter()
        .map(|(partition, payloads)| (*partition, payloads.len()))
        .collect()
}

pub(crate) fn assert_holds_every_acknowledged(
    all: &[(u32, Vec<String>)],
    acknowledged: &BTreeSet<String>,
    who: &str,
) {
    let held: BTreeSet<&str> = all
        .iter()
        .flat_map(|(_, payloads)| payloads.iter().map(String::as_str))
        .collect();
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|payload| !held.contains(payload.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{who}: {} of {} acknowledged messages missing, first {:?}",
        missing.len(),
        acknowledged.len(),
        missing.first()
    );
}

// Proves the cluster keeps an acknowledged message through the loss of its
// leader, with the official SDK unmodified: the client dials a follower and
// is sent to the leader, the leader is SIGKILLed mid-stream, sends go on
// through the new leader (a send that fails is retried, as an application
// would), the killed node rejoins and catches up, a follower is paused
// (SIGSTOP) and resumed mid-stream, and then each node in turn serves every
// acknowledged message as the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_keeps_every_acknowledged_message_through_losing_its_leader() {
    let started = Instant::now();
    let mut cluster = Cluster::start();
    let first = agreed_leader(&cluster, &[1, 2, 3]).await;
    let dial = if first == 1 { 2 } else { 1 };
    let client = client_of(&cluster, dial).await;
    client
        .create_stream(STREAM)
        .await
        .expect("create the stream through a follower");
    client
        .create_topic(&named(STREAM), TOPIC, &topic_options(PARTITIONS))
        .await
        .expect("create the topic");

    let mut acknowledged = BTreeSet::new();
    let mut failed_sends = 0u32;
    let mut killed = None;
    let mut paused = None;
    for batch in 0..BATCHES {
        if batch == KILL_AT {
            let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
            cluster.node(leader).kill();
            killed = Some(leader);
        }
        if batch == PAUSE_AT {
            // The killed node comes back first, so that pausing one of the
            // others leaves a majority.
            let down = killed.expect("killed first");
            cluster.node(down).restart();
            let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
            let follower = (1..=NODES)
                .find(|id| *id != leader && *id != down)
                .expect("a follower that was never down");
            cluster
                .node(follower)
                .signal(nix::sys::signal::Signal::SIGSTOP);
            paused = Some(follower);
            let pid = nix::unistd::Pid::from_raw(cluster.node(follower).pid());
            std::thread::spawn(move || {
                std::thread::sleep(PAUSE_FOR);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
            });
        }
        if batch == RESUME_AT
            && let Some(node) = paused.take()
        {
            cluster.node(node).signal(nix::sys::signal::Signal::SIGCONT);
        }
        let partition = (batch % u64::from(PARTITIONS)) as u32;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut batch_messages = messages(&format!("b{batch}-"), 0, PER_BATCH);
            match client
                .send_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    &Partitioning::partition_id(partition),
                    &mut batch_messages,
                )
                .await
            {
                Ok(_) => {
                    for message in &batch_messages {
                        acknowledged.insert(String::from_utf8_lossy(&message.payload).into_owned());
                    }
                    break;
                }
                Err(error) => {
                    failed_sends += 1;
                    assert!(
                        Instant::now() < deadline,
                        "batch {batch} not accepted within 60 s: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    let killed = killed.expect("the leader was killed");
    assert_eq!(acknowledged.len() as u64, BATCHES * PER_BATCH);
    eprintln!(
        "cluster: {} messages acknowledged, {failed_sends} sends failed and were retried, node {killed} killed",
        acknowledged.len()
    );
    let second = agreed_leader(&cluster, &[1, 2, 3]).await;
    eprintln!("cluster: node {second} leads after the failover and the pause");
    assert_holds_every_acknowledged(
        &everything(&client).await,
        &acknowledged,
        &format!("node {second} after the failover"),
    );

    assert_library_lines_throttled(&mut cluster, started);

    for (leader, all) in each_node_leading(&mut cluster).await {
        assert_holds_every_acknowledged(&all, &acknowledged, &format!("node {leader} leading"));
    }
}

/// The consensus library's lines are throttled (`logging::throttle`): with
/// a node down for a while, each survivor logged the unanswered heartbeats
/// of every group about once per ten seconds, not five times a second per
/// group. A restarted process starts its own count, so the bound allows
/// two processes per node.
fn assert_library_lines_throttled(cluster: &mut Cluster, started: Instant) {
    let elapsed = started.elapsed().as_secs();
    let bound = 2 * (elapsed / 10 + 1);
    for id in 1..=NODES {
        let lines = cluster
            .node(id)
            .log()
            .lines()
            .filter(|line| line.contains("failed to send a heartbeat"))
            .count() as u64;
        eprintln!("cluster: node {id} logged {lines} unanswered-heartbeat lines in {elapsed} s");
        assert!(
            lines <= bound,
            "node {id}: {lines} unanswered-heartbeat lines in {elapsed} s (at most {bound})"
        );
    }
}

/// Every node's copy of every partition, each read while that node leads:
/// with every node up, stopping the leader each round (and restarting the
/// one stopped the round before) until every node has led. Which of the two
/// left wins is the election's choice, so rounds repeat until each has led
/// (each round about one in two). Leaves every node up.
pub(crate) async fn each_node_leading(cluster: &mut Cluster) -> Vec<(u64, TopicCopy)> {
    let mut copies: Vec<(u64, TopicCopy)> = Vec::new();
    let mut stopped: Option<u64> = None;
    for round in 1.. {
        let up: Vec<u64> = (1..=NODES).filter(|id| Some(*id) != stopped).collect();
        let leader = agreed_leader(cluster, &up).await;
        eprintln!("cluster: round {round}: node {leader} leads, {stopped:?} stopped");
        if !copies.iter().any(|(node, _)| *node == leader) {
            let reader = client_of(cluster, leader).await;
            copies.push((leader, settled_copy(&reader).await));
        }
        if copies.len() == NODES as usize {
            eprintln!("cluster: every node served its copy as leader ({round} rounds)");
            break;
        }
        assert!(
            round < 16,
            "only {} nodes led in {round} rounds",
            copies.len()
        );
        if let Some(node) = stopped.take() {
            cluster.node(node).restart();
        }
        cluster.node(leader).kill();
        stopped = Some(leader);
    }
    if let Some(node) = stopped {
        cluster.node(node).restart();
    }
    copies
}

/// A client on the leader, and the stream with a one-partition topic.
pub(crate) async fn leader_client_with_topic(cluster: &Cluster) -> IggyClient {
    let first = agreed_leader(cluster, &[1, 2, 3]).await;
    let client = client_of(cluster, first).await;
    client.create_stream(STREAM).await.expect("stream");
    client
        .create_topic(&named(STREAM), TOPIC, &topic_options(1))
        .await
        .expect("topic");
    client
}

/// Sends one message to partition 0 on node `address` with a raw client
/// that stays there (the SDK moves to the metadata leader after login):
/// the acknowledged offset. Asked again while the node answers 58 (it
/// does not hear the metadata leader yet, or its metadata does not know
/// the new topic yet), for at most 10 s.
fn raw_send_on(address: SocketAddr, payload: &str) -> u64 {
    use iggyd_testkit::wire::client::{Client, ClientError};
    use iggyd_testkit::wire::request::{Identifier, Partitioning, Request};
    use iggyd_wire::batch::{MessageSpec, encode_producer_batch};
    let mut raw = Client::login_to(address, ROOT_USERNAME, ROOT_PASSWORD).expect("a raw login");
    let batch = encode_producer_batch(
        1_700_000_000_000_000,
        &[MessageSpec {
            id: 1,
            timestamp_delta: 0,
            payload: payload.as_bytes().to_vec(),
            user_headers: Vec::new(),
        }],
    );
    let request = Request::send_messages(
        Identifier::Name(STREAM),
        Identifier::Name(TOPIC),
        Partitioning::PartitionId(0),
        1,
        &batch,
    );
    let started = Instant::now();
    loop {
        match raw.call(&request) {
            // [count u32][stream u32][topic u32][partition u32][base u64]
            Ok(reply) => {
                let base = reply.get(16..24).expect("a send's reply");
                return u64::from_le_bytes(base.try_into().expect("8 bytes"));
            }
            Err(ClientError::Status { status: 58, .. })
                if started.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("a send on {address}: {error}"),
        }
    }
}

// Proves every node serves a send, also one that does not lead the
// partition's group: it forwards the batch to the group's leader, node to
// node. A raw client on each node in turn has its message acknowledged,
// the three offsets are the partition's first three (one log, appended
// by one leader), and a poll serves the three messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_serves_a_send_and_a_follower_forwards_it_to_the_leader() {
    let cluster = Cluster::start();
    let client = leader_client_with_topic(&cluster).await;
    let mut offsets = BTreeSet::new();
    for id in 1..=NODES {
        let address = cluster.address(id);
        let offset =
            tokio::task::spawn_blocking(move || raw_send_on(address, &format!("from-node-{id}")))
                .await
                .expect("the raw client");
        offsets.insert(offset);
    }
    assert_eq!(offsets, BTreeSet::from([0, 1, 2]));
    // The node polled serves up to its own commit index, which a follower
    // of the partition's group learns with the leader's next message.
    let started = Instant::now();
    let served = loop {
        let polled = client
            .poll_messages(
                &named(STREAM),
                &named(TOPIC),
                Some(0),
                &Consumer::default(),
                &PollingStrategy::offset(0),
                10,
                false,
            )
            .await
            .expect("a poll");
        let mut served = payloads(&polled);
        served.sort();
        if served.len() == 3 || started.elapsed() > Duration::from_secs(10) {
            break served;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(served, ["from-node-1", "from-node-2", "from-node-3"]);
}

/// An auto-commit poll of `consumer` for up to `count` messages of
/// partition 0 from where it left off: its payloads.
async fn poll_next(client: &IggyClient, consumer: &Consumer, count: u32) -> Vec<String> {
    let polled = client
        .poll_messages(
            &named(STREAM),
            &named(TOPIC),
            Some(0),
            consumer,
            &PollingStrategy::next(),
            count,
            true,
        )
        .await
        .expect("an auto-commit poll");
    payloads(&polled)
}

// Proves what a client that sees more than one node needs beyond plain
// requests: its auto-commit polls and offset writes travel the SDK's routed
// path (the route asked with 103/123, a data connection attached with 14,
// the poll sent as 104 and the offset write on the data connection), for a
// standalone consumer and a consumer-group member alike, and what they
// commit is what the next poll continues from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_polls_and_offset_writes_take_the_routed_path_on_a_cluster() {
    let cluster = Cluster::start();
    let client = leader_client_with_topic(&cluster).await;
    send_to(&client, STREAM, TOPIC, 0, messages("m", 0, 12)).await;

    let standalone = Consumer::new(named("reader"));
    assert_eq!(
        poll_next(&client, &standalone, 4).await,
        ["m-0", "m-1", "m-2", "m-3"]
    );
    assert_eq!(
        poll_next(&client, &standalone, 4).await,
        ["m-4", "m-5", "m-6", "m-7"]
    );
    client
        .store_consumer_offset(&standalone, &named(STREAM), &named(TOPIC), Some(0), 9)
        .await
        .expect("a routed offset write");
    let stored = client
        .get_consumer_offset(&standalone, &named(STREAM), &named(TOPIC), Some(0))
        .await
        .expect("read the offset")
        .expect("an offset");
    assert_eq!(stored.stored_offset, 9);
    assert_eq!(poll_next(&client, &standalone, 4).await, ["m-10", "m-11"]);

    client
        .create_consumer_group(&named(STREAM), &named(TOPIC), "workers")
        .await
        .expect("group");
    client
        .join_consumer_group(&named(STREAM), &named(TOPIC), &named("workers"))
        .await
        .expect("join");
    let member = Consumer::group(named("workers"));
    assert_eq!(
        poll_next(&client, &member, 5).await,
        ["m-0", "m-1", "m-2", "m-3", "m-4"]
    );
    assert_eq!(
        poll_next(&client, &member, 5).await,
        ["m-5", "m-6", "m-7", "m-8", "m-9"]
    );
    // The node says its role in its live systemd status.
    let mut cluster = cluster;
    let leader = agreed_leader(&cluster, &[1, 2, 3]).await;
    let status = cluster.node(leader).wait_notification(
        &format!("cluster compat node {leader}: leader"),
        Duration::from_secs(15),
    );
    assert!(status.contains("STATUS="), "{status}");
    // The routed path opened a data connection of its own: the leader
    // sees two logged-in clients where plain requests would leave one.
    let clients = client.get_clients().await.expect("clients");
    assert!(
        clients.iter().filter(|info| info.user_id.is_some()).count() >= 2,
        "a routed data connection: {clients:?}"
    );
}

/// The node leading the partition group of `STREAM`/`TOPIC` (every node
/// up and agreeing).
fn partition_leader(cluster: &Cluster) -> u64 {
    crate::cluster_admin::agreed_groups(cluster, 2)
        .iter()
        .find(|(group, _)| *group != iggyd_admin_api::cluster::METADATA_GROUP)
        .map(|(_, leader)| *leader)
        .expect("the partition's group")
}

/// `consumer`'s stored offset of partition 0, asked until a node answers
/// (a failover in progress answers errors for a while).
async fn stored_offset_after_failover(client: &IggyClient, consumer: &Consumer) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client
            .get_consumer_offset(consumer, &named(STREAM), &named(TOPIC), Some(0))
            .await
        {
            Ok(stored) => return stored.map(|stored| stored.stored_offset),
            Err(error) => {
                assert!(Instant::now() < deadline, "no offset within 60 s: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

// Proves stored consumer offsets survive the loss of the partition's
// leader, twice, with the official SDK: a standalone consumer's
// auto-committed polls and an explicit offset write are acknowledged, the
// node leading the partition's Raft group is SIGKILLed, and whichever node
// leads next serves the stored offset unchanged; the consumer's next
// auto-commit poll continues right after it (an offset that went back
// would serve messages again). The killed node restarts, the new leader is
// killed in turn, and the same holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_consumer_offsets_survive_the_loss_of_the_partitions_leader() {
    let mut cluster = Cluster::start();
    let client = leader_client_with_topic(&cluster).await;
    send_to(&client, STREAM, TOPIC, 0, messages("m", 0, 40)).await;
    let reader = Consumer::new(named("reader"));
    assert_eq!(
        poll_next(&client, &reader, 4).await,
        ["m-0", "m-1", "m-2", "m-3"]
    );
    client
        .store_consumer_offset(&reader, &named(STREAM), &named(TOPIC), Some(0), 12)
        .await
        .expect("an offset write");
    let mut stored = 12;
    let mut killed: Option<u64> = None;
    for round in 0..2 {
        if let Some(down) = killed.take() {
            cluster.node(down).restart();
        }
        let leader = partition_leader(&cluster);
        cluster.node(leader).kill();
        killed = Some(leader);
        assert_eq!(
            stored_offset_after_failover(&client, &reader).await,
            Some(stored),
            "round {round}: the offset stored before node {leader} was killed"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let next = loop {
            match client
                .poll_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    Some(0),
                    &reader,
                    &PollingStrategy::next(),
                    4,
                    true,
                )
                .await
            {
                Ok(polled) => break payloads(&polled),
                Err(error) => {
                    assert!(Instant::now() < deadline, "no poll within 60 s: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let want: Vec<String> = (stored + 1..stored + 5)
            .map(|at| format!("m-{at}"))
            .collect();
        assert_eq!(
            next, want,
            "round {round}: the poll after node {leader} was killed"
        );
        stored += 4;
        assert_eq!(
            stored_offset_after_failover(&client, &reader).await,
            Some(stored),
            "round {round}: the poll's auto-commit"
        );
    }
}

// Measures (prints, asserts nothing about time) how long a leader's loss
// keeps producers waiting with the default timing: KILLS times, the leader
// of the partition's group (`iggyd cluster status` on every node) is
// SIGKILLed and the time to the first acknowledged send is taken, as an
// application that retries every 10 ms sees it; the killed node restarts
// before the next round. Run by hand:
// `cargo nextest run -p iggyd-compat --test sdk failover_time --run-ignored only --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (about a minute), not a check"]
async fn failover_time() {
    const KILLS: usize = 20;
    // IGGYD_FAILOVER_TIMING="500ms,100ms" measures other timing than the
    // defaults (election timeout, heartbeat interval).
    let timing = std::env::var("IGGYD_FAILOVER_TIMING").ok();
    let timing = timing.as_deref().and_then(|timing| timing.split_once(','));
    let mut cluster = Cluster::start_timed(timing);
    let client = leader_client_with_topic(&cluster).await;
    let mut times = Vec::new();
    for round in 0..KILLS {
        // The node that leads the partition's group (the one a producer
        // of it waits for), whether or not it also leads the metadata
        // group (which a follower does not need to serve a send).
        send_to(&client, STREAM, TOPIC, 0, messages("warm", 0, 1)).await;
        let groups = crate::cluster_admin::agreed_groups(&cluster, 2);
        let metadata = groups[iggyd_admin_api::cluster::METADATA_GROUP];
        let leader = groups
            .iter()
            .find(|(group, _)| *group != iggyd_admin_api::cluster::METADATA_GROUP)
            .map(|(_, leader)| *leader)
            .expect("the partition's group");
        cluster.node(leader).kill();
        let killed_at = Instant::now();
        loop {
            let mut batch = messages(&format!("r{round}-"), 0, 1);
            if client
                .send_messages(
                    &named(STREAM),
                    &named(TOPIC),
                    &Partitioning::partition_id(0),
                    &mut batch,
                )
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(60),
                "no new leader"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        times.push(killed_at.elapsed());
        eprintln!(
            "failover: round {round}: node {leader} (leading the partition{}) killed, a send acknowledged after {:?}",
            if leader == metadata {
                " and the metadata group"
            } else {
                ""
            },
            killed_at.elapsed()
        );
        cluster.node(leader).restart();
    }
    times.sort();
    let at = |quantile: f64| times[((times.len() - 1) as f64 * quantile).round() as usize];
    eprintln!(
        "failover ({}): {KILLS} leader kills, kill to first acknowledged send p50 {:?}, p99 {:?}, max {:?}",
        timing.map_or(
            "default timing".to_string(),
            |(election, heartbeat)| format!("election {election}, heartbeat {heartbeat}")
        ),
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
}
