//! Three cluster nodes in one thread, each a real pump on its own
//! simulated disk with its partition's group, talking through the RPC
//! codec in process: what a leader's pump acknowledges is on every
//! replica, followers refuse appends with the leader's name, consumers see
//! only committed messages, and losing the leader loses nothing.

use super::*;
use crate::shard::op::{AppendAck, PartitionOp, PollRequest, PollResult, PumpError, Reply};
use crate::shard::partition::{Durability, PartitionSettings};
use crate::shard::pump::{Pump, PumpStorage};
use iggyd_raft::network::TransportError;
use iggyd_storage::sim::{SimClock, SimIo};
use iggyd_storage::trash::TrashStart;
use iggyd_storage::{Access, BufferPool};
use iggyd_wire::batch::{MessageSpec, ValidBatch, encode_producer_batch};
use iggyd_wire::protocol::primitives::PollingStrategy;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

pub(super) const KEY: PartitionKey = PartitionKey {
    stream: 1,
    topic: 1,
    partition: 0,
    storage_id: 5,
};

/// How often the in-process nodes' metadata groups take a snapshot.
pub(super) const METADATA_SNAPSHOT_EVERY: u64 = 16;

/// Calls between the nodes: into the target's cluster layer, unless one
/// of the two is cut off.
#[derive(Clone, Default)]
pub(super) struct InProcess {
    from: u64,
    nodes: Rc<RefCell<BTreeMap<u64, Rc<ShardCluster<InProcess>>>>>,
    pub(super) down: Rc<RefCell<BTreeSet<u64>>>,
    /// Calls made, by channel.
    pub(super) calls: Rc<RefCell<BTreeMap<u64, u64>>>,
}

impl Transport for InProcess {
    async fn call(
        &self,
        target: u64,
        channel: u64,
        body: Vec<u8>,
        _timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        *self.calls.borrow_mut().entry(channel).or_default() += 1;
        let cut_off = {
            let down = self.down.borrow();
            down.contains(&self.from) || down.contains(&target)
        };
        if cut_off {
            return Err(TransportError::Unreachable(format!("{target} is cut off")));
        }
        let cluster = self.nodes.borrow().get(&target).cloned();
        let Some(cluster) = cluster else {
            return Err(TransportError::Unreachable(format!("{target} is not up")));
        };
        let (reply, answer) = flume::bounded(1);
        cluster.deliver(channel, body, reply);
        answer
            .recv_async()
            .await
            .map_err(|_| TransportError::Failed("no answer".to_string()))
    }
}

/// A node: its pump runs in a task that applies ops and the group's Raft
/// log operations, then commits, like the shard loop.
pub(super) struct Node {
    pub(super) id: u64,
    ops: flume::Sender<PartitionOp>,
    pub(super) cluster: Rc<ShardCluster<InProcess>>,
    /// Its disk (kept over a restart).
    pub(super) io: SimIo,
}

/// Kills `node` (its groups stop, its pump is dropped, its disk loses what
/// was not synced) and starts it again on the same disk; the partitions
/// are opened again by the caller.
pub(super) async fn restart(node: Node, transport: &InProcess) -> Node {
    let Node {
        id,
        ops,
        cluster,
        io,
        ..
    } = node;
    if let Some(raft) = cluster.raft(KEY.storage_id) {
        raft.shutdown().await.expect("shutdown");
    }
    drop(ops);
    drop(cluster);
    io.crash();
    start_node_on(id, transport, io, None, false)
}

/// Opens the test partition on `node` with `settings`.
pub(super) async fn open_with(node: &Node, settings: crate::shard::partition::PartitionSettings) {
    ask(node, |reply| PartitionOp::Open {
        key: KEY,
        settings,
        reply,
    })
    .await
    .expect("open");
}

/// Stops the partition group of every node of `nodes` (the end of a
/// test: its tasks would otherwise outlive the runtime's last wait).
pub(super) async fn stop_groups(nodes: &[Node]) {
    for node in nodes {
        if let Some(raft) = node.cluster.raft(KEY.storage_id) {
            raft.shutdown().await.expect("shutdown");
        }
    }
}

fn storage() -> PumpStorage {
    PumpStorage {
        data_dir: PathBuf::from("/data"),
        access: Access::Direct,
        pool: BufferPool::new(1 << 20),
        trash: TrashStart::default(),
        consumer_offsets_max: 16,
        read_window_bytes: 64 * 1024,
    }
}

pub(super) fn start_node(id: u64, transport: &InProcess) -> Node {
    start_node_with(id, transport, None, false)
}

/// Which of `nodes` leads `KEY`'s group, if one does.
pub(super) fn leader_of(nodes: &[&Node]) -> Option<u64> {
    nodes.iter().find_map(|node| {
        let raft = node.cluster.raft(KEY.storage_id)?;
        raft.is_leader().then_some(node.id)
    })
}

/// The node that leads `KEY`'s group, and another one.
fn leader_and_follower(nodes: &[Node]) -> (&Node, &Node) {
    let leader = nodes
        .iter()
        .find(|node| {
            node.cluster
                .raft(KEY.storage_id)
                .is_some_and(|raft| raft.is_leader())
        })
        .expect("a leader");
    let follower = nodes
        .iter()
        .find(|node| node.id != leader.id)
        .expect("a follower");
    (leader, follower)
}

/// Node `id`, waiting to be added to the groups of nodes 1 to 3.
pub(super) fn start_joining_node(id: u64, transport: &InProcess) -> Node {
    start_node_with(id, transport, None, true)
}

fn start_node_with(
    id: u64,
    transport: &InProcess,
    apply: Option<metadata::SharedStore>,
    join: bool,
) -> Node {
    start_node_on(id, transport, SimIo::new(40 + id), apply, join)
}

pub(super) fn start_node_on(
    id: u64,
    transport: &InProcess,
    io: SimIo,
    apply: Option<metadata::SharedStore>,
    join: bool,
) -> Node {
    let raft = ClusterSettings::raft_config(Duration::from_millis(30), Duration::from_millis(150))
        .expect("timing");
    let mut settings = ClusterSettings::new(
        id,
        (1..=3)
            .map(|id| {
                (
                    id,
                    BasicNode {
                        addr: format!("node-{id}"),
                    },
                )
            })
            .collect(),
        join,
        raft,
    );
    // Snapshots of the metadata group come often enough for a test to
    // pass several.
    settings.metadata_snapshot_every = METADATA_SNAPSHOT_EVERY;
    let settings = Arc::new(settings);
    let cluster = Rc::new(ShardCluster::new(
        settings,
        InProcess {
            from: id,
            ..transport.clone()
        },
        apply,
    ));
    transport.nodes.borrow_mut().insert(id, cluster.clone());
    cluster.start_quiet(true);
    let mut pump = Pump::new(
        io.clone(),
        Rc::new(SimClock::new(1_700_000_000_000_000)),
        storage(),
    );
    pump.set_replication(cluster.clone());
    let (ops, inbox) = flume::unbounded::<PartitionOp>();
    monoio::spawn(async move {
        loop {
            let next = {
                let mut receive = std::pin::pin!(inbox.recv_async());
                let queue = pump.raft_queue().clone();
                std::future::poll_fn(|cx| {
                    if queue.poll_ready(cx).is_ready() {
                        return std::task::Poll::Ready(None);
                    }
                    receive.as_mut().poll(cx).map(Some)
                })
                .await
            };
            match next {
                Some(Ok(op)) => pump.apply(op).await,
                Some(Err(_)) => return,
                None => {}
            }
            while let Some((key, op)) = pump.raft_queue().pop() {
                pump.apply_raft(key, op).await;
            }
            pump.commit().await;
        }
    });
    Node {
        id,
        ops,
        cluster,
        io,
    }
}

pub(super) async fn ask<T>(
    node: &Node,
    make: impl FnOnce(Reply<T>) -> PartitionOp,
) -> Result<T, PumpError> {
    let (reply, answer) = flume::bounded(1);
    node.ops.send(make(reply)).expect("the node runs");
    answer.recv_async().await.expect("an answer")
}

/// Runs retention on `node` once (as its `retention.check_interval`
/// does).
pub(super) fn tick_retention(node: &Node) {
    node.ops
        .send(PartitionOp::RetentionTick)
        .expect("the node runs");
}

fn batch(messages: usize, tag: u8) -> ValidBatch {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: index as u128 + 1,
            timestamp_delta: 0,
            payload: vec![tag; 64],
            user_headers: Vec::new(),
        })
        .collect();
    let bytes = encode_producer_batch(1_000, &specs);
    let len = bytes.len();
    ValidBatch::new(bytes, 0..len).expect("a batch")
}

/// Appends `messages` through whichever node leads; the offsets it got.
pub(super) async fn append(nodes: &[&Node], messages: usize, tag: u8) -> AppendAck {
    for _ in 0..300 {
        for node in nodes {
            match ask(node, |reply| PartitionOp::Append {
                key: KEY,
                batch: batch(messages, tag),
                reply,
            })
            .await
            {
                Ok(ack) => return ack,
                Err(PumpError::NotLeader { .. } | PumpError::NotCommitted { .. }) => {}
                Err(error) => panic!("append on node {}: {error}", node.id),
            }
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no node accepted the append within 6 s");
}

pub(super) async fn poll_all(node: &Node) -> PollResult {
    poll_from(node, PollingStrategy::First, 10_000).await
}

/// Polls `count` messages with `strategy` from `node`, once its group has
/// started (58 before: it applies what its log records committed first).
pub(super) async fn poll_from(node: &Node, strategy: PollingStrategy, count: u32) -> PollResult {
    for _ in 0..300 {
        match ask(node, |reply| PartitionOp::Poll {
            key: KEY,
            request: PollRequest {
                consumer: None,
                strategy,
                count,
                auto_commit: false,
                bytes_max: u64::MAX,
            },
            reply,
        })
        .await
        {
            Ok(result) => return result,
            Err(PumpError::NotLeader { .. }) => {
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("a poll on node {}: {error}", node.id),
        }
    }
    panic!("node {}'s group never started", node.id);
}

/// The in-process runtime; `IGGYD_TEST_LOG` (a tracing filter, as for the
/// cluster tests' daemons) prints the nodes' log lines to look into a
/// failed run.
pub(super) fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
    if let Ok(filter) = std::env::var("IGGYD_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("a runtime")
}

// Proves a replicated partition on three pumps: appends are acknowledged
// with dense offsets (a follower forwards to the leader), every
// replica then stores the same messages and serves them once committed,
// and after the leader is cut off the others elect a new one that goes on
// from the next offset, which the old leader catches up on once back.
#[test]
fn three_pumps_replicate_a_partition_and_survive_losing_the_leader() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        let settings = PartitionSettings {
            durability: Durability::Persisted,
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
        let mut next = 0;
        for (messages, tag) in [(3, b'a'), (1, b'b'), (4, b'c')] {
            let ack = append(&everyone, messages, tag).await;
            assert_eq!(ack.base_offset, next);
            assert_eq!(ack.last_offset, next + messages as u64 - 1);
            next += messages as u64;
        }
        // A follower forwards to the leader: the batch takes the leader's
        // next offsets.
        let (leader, follower) = leader_and_follower(&nodes);
        let ack = ask(follower, |reply| PartitionOp::Append {
            key: KEY,
            batch: batch(1, b'x'),
            reply,
        })
        .await
        .expect("a follower's append is forwarded");
        assert_eq!((ack.base_offset, ack.last_offset), (next, next));
        next += 1;
        // Cut the leader off; the other two go on from the next offset.
        transport.down.borrow_mut().insert(leader.id);
        let rest: Vec<&Node> = nodes.iter().filter(|node| node.id != leader.id).collect();
        let ack = append(&rest, 2, b'd').await;
        assert_eq!(ack.base_offset, next);
        next += 2;
        transport.down.borrow_mut().remove(&leader.id);
        // Every replica serves the same committed messages.
        let mut served = Vec::new();
        for node in &nodes {
            let mut result = poll_all(node).await;
            for _ in 0..300 {
                if u64::from(result.message_count) == next {
                    break;
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
                result = poll_all(node).await;
            }
            assert_eq!(u64::from(result.message_count), next, "node {}", node.id);
            served.push(result.records().into_owned());
        }
        assert!(served.windows(2).all(|pair| pair[0] == pair[1]));
        stop_groups(&nodes).await;
    });
}

pub(super) type Store = Rc<RefCell<iggyd_metadata::MetadataStore<iggyd_metadata::io::StdIo>>>;

/// A node's store in memory, and its access as the metadata group's
/// state machine has it (shard 0's loop, in the daemon).
pub(super) fn memory_store(id: u64) -> (Store, metadata::SharedStore) {
    let io = iggyd_metadata::io::StdIo::in_memory(format!("/node-{id}/metadata"));
    let (store, _) = iggyd_metadata::MetadataStore::open(io).expect("an empty store");
    let store = Rc::new(RefCell::new(store));
    (store.clone(), Rc::new(MemoryStore(store)))
}

struct MemoryStore(Store);

impl metadata::StoreAccess for MemoryStore {
    fn apply(
        &self,
        command: iggyd_metadata::MetadataCommand,
    ) -> metadata::LocalFuture<metadata::MetadataOutcome> {
        let store = self.0.clone();
        Box::pin(async move {
            let mut store = store.borrow_mut();
            match store.execute(command) {
                Ok(applied) => Ok((applied, store.publish())),
                Err(error) => Err(error.status()),
            }
        })
    }

    fn export(&self) -> metadata::LocalFuture<Result<iggyd_metadata::ExportedStore, String>> {
        let exported = self.0.borrow().export().map_err(|error| error.to_string());
        Box::pin(async move { exported })
    }

    fn replace(&self, bytes: Vec<u8>) -> metadata::LocalFuture<Result<(), String>> {
        let replaced = self
            .0
            .borrow_mut()
            .replace(&bytes)
            .map_err(|error| error.to_string());
        Box::pin(async move { replaced })
    }
}

// Proves the metadata group: a change proposed on the leader is applied to
// every node's store in the same order (same ids, same names), its
// proposer hears the outcome its own store gave (a duplicate name is
// rejected as on one node), and a follower refuses proposals with 58 so
// that the client goes to the leader.
#[test]
fn the_metadata_group_applies_every_change_on_every_node() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let mut stores = Vec::new();
        let mut nodes = Vec::new();
        for id in 1..=3 {
            let (store, apply) = memory_store(id);
            stores.push(store);
            nodes.push(start_node_with(id, &transport, Some(apply), false));
        }
        for node in &nodes {
            ask(node, |reply| PartitionOp::Open {
                key: metadata::METADATA_KEY,
                settings: PartitionSettings::default(),
                reply,
            })
            .await
            .expect("open the metadata log");
        }
        let create = |name: &str| iggyd_metadata::MetadataCommand::CreateStream {
            name: name.to_string(),
            created_at_us: 1_700_000_000_000_000,
        };
        // Find the leader by proposing until one accepts.
        let mut leader = None;
        for _ in 0..300 {
            for node in &nodes {
                let Some(proposal) = node.cluster.propose_metadata(create("orders")) else {
                    continue;
                };
                match proposal.await {
                    Ok((applied, _)) => {
                        assert_eq!(
                            applied,
                            iggyd_metadata::Applied::StreamCreated { stream_id: 0 }
                        );
                        leader = Some(node.id);
                        break;
                    }
                    Err(status) => assert!(matches!(
                        status,
                        iggyd_wire::protocol::codes::Status::TransientNotAccepted
                            | iggyd_wire::protocol::codes::Status::TransientNotCommitted
                    )),
                }
            }
            if leader.is_some() {
                break;
            }
            monoio::time::sleep(Duration::from_millis(20)).await;
        }
        let leader = leader.expect("a leader accepted the change");
        let on_leader = nodes
            .iter()
            .find(|node| node.id == leader)
            .expect("the leader");
        let second = on_leader
            .cluster
            .propose_metadata(create("payments"))
            .expect("a metadata group")
            .await
            .expect("a second stream");
        assert_eq!(
            second.0,
            iggyd_metadata::Applied::StreamCreated { stream_id: 1 }
        );
        let duplicate = on_leader
            .cluster
            .propose_metadata(create("orders"))
            .expect("a metadata group")
            .await;
        assert_eq!(
            duplicate.map(|(applied, _)| applied),
            Err(iggyd_wire::protocol::codes::Status::StreamNameAlreadyExists)
        );
        let follower = nodes
            .iter()
            .find(|node| node.id != leader)
            .expect("a follower");
        let refused = follower
            .cluster
            .propose_metadata(create("refunds"))
            .expect("a metadata group")
            .await;
        assert_eq!(
            refused.map(|(applied, _)| applied),
            Err(iggyd_wire::protocol::codes::Status::TransientNotAccepted)
        );
        // Every store converges on the same streams.
        for store in &stores {
            for _ in 0..300 {
                if store.borrow().metadata().streams().count() == 2 {
                    break;
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
            let names: Vec<String> = store
                .borrow()
                .metadata()
                .streams()
                .map(|stream| stream.name.clone())
                .collect();
            assert_eq!(names, ["orders", "payments"]);
        }
        for node in &nodes {
            if let Some(raft) = node.cluster.metadata().and_then(|group| group.raft()) {
                raft.shutdown().await.expect("shutdown");
            }
        }
    });
}

// Proves that an idle partition group is quiet: once the followers know
// what is committed, nothing is sent on the group's channel (openraft's
// tick would heartbeat every 30 ms here), only the nodes' beats; and that
// the followers were told the commit index before the group fell quiet.
#[test]
fn an_idle_group_sends_nothing_but_the_nodes_beats() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let nodes: Vec<Node> = (1..=3).map(|id| start_node(id, &transport)).collect();
        for node in &nodes {
            ask(node, |reply| PartitionOp::Open {
                key: KEY,
                settings: PartitionSettings::default(),
                reply,
            })
            .await
            .expect("open");
        }
        let everyone: Vec<&Node> = nodes.iter().collect();
        let ack = append(&everyone, 4, b'q').await;
        let last = ack.last_offset;
        // Every member learns the commit index (a quiet heartbeat carries
        // it), then the group has nothing left to say.
        let committed = |node: &Node| {
            node.cluster.raft(KEY.storage_id).and_then(|raft| {
                quiet::with_metrics(&raft, |metrics| {
                    metrics
                        .local_committed
                        .as_ref()
                        .map(|log_id| log_id.index())
                })
            })
        };
        let mut agreed = false;
        for _ in 0..300 {
            let indexes: BTreeSet<Option<u64>> = nodes.iter().map(committed).collect();
            if indexes.len() == 1 && indexes.first().copied().flatten().is_some() {
                agreed = true;
                break;
            }
            monoio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(agreed, "the members never agreed on the commit index");
        // Settle: the heartbeat that told them is answered.
        monoio::time::sleep(Duration::from_millis(200)).await;
        let on_group =
            |calls: &BTreeMap<u64, u64>| calls.get(&KEY.storage_id).copied().unwrap_or(0);
        let beats =
            |calls: &BTreeMap<u64, u64>| calls.get(&liveness::BEAT_CHANNEL).copied().unwrap_or(0);
        let before = transport.calls.borrow().clone();
        monoio::time::sleep(Duration::from_secs(1)).await;
        let after = transport.calls.borrow().clone();
        assert_eq!(
            on_group(&after) - on_group(&before),
            0,
            "an idle group sent calls ({last} messages in it)"
        );
        // Three nodes beat their two peers every 30 ms: about 200 a second.
        let beaten = beats(&after) - beats(&before);
        assert!((60..=400).contains(&beaten), "{beaten} beats in a second");
        // And it still works after the pause, through a follower too (the
        // leader renews openraft's lease, which lapsed while it was quiet,
        // before it appends a forwarded batch).
        let (leader, follower) = leader_and_follower(&nodes);
        let ack = ask(follower, |reply| PartitionOp::Append {
            key: KEY,
            batch: batch(1, b'r'),
            reply,
        })
        .await
        .expect("a follower's append after the pause is forwarded");
        assert_eq!(ack.base_offset, last + 1);
        monoio::time::sleep(Duration::from_secs(1)).await;
        let ack = ask(leader, |reply| PartitionOp::Append {
            key: KEY,
            batch: batch(1, b's'),
            reply,
        })
        .await
        .expect("the leader's append after a pause");
        assert_eq!(ack.base_offset, last + 2);
        stop_groups(&nodes).await;
    });
}
