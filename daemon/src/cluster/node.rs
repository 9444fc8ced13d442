//! A cluster node's wiring: what `[cluster]` becomes at start (the Raft
//! settings, the node-to-node TLS, the roster clients are shown), the
//! transport the groups call their peers through (`iggyd-peer` clients,
//! one per shard and peer node), and each shard's peer server, which hands
//! every call to the shard that owns its group.
//!
//! Every shard listens on the node's replication address (`SO_REUSEPORT`,
//! so the kernel spreads peer connections over the shards); a call that
//! lands on a shard that does not own its group travels the mesh to the
//! owner (`ShardMessage::Peer`). The metadata group lives on shard 0.
//!
//! Must not: touch a partition (the groups reach their pump through its
//! queue), or hold a shard's loop while a call is out.

use super::metadata::{LocalFuture, METADATA_CHANNEL, MetadataOutcome, SharedStore, StoreAccess};
use super::{ClusterSettings, ShardCluster};
use crate::config::ClusterConfig;
use crate::shard::context::ShardContext;
use crate::shard::mesh::{Request, Response, ShardId, ShardMessage};
use crate::shard::replica::{ReplicationStart, StartedReplication};
use crate::shard::router;
use iggyd_metadata::{ExportedStore, MetadataCommand};
use iggyd_peer::{
    PeerClient, PeerCounters, PeerError, PeerFailure, PeerHandler, PeerLimits, PeerRequest,
    PeerTarget, PeerTls, ValidLimits,
};
use iggyd_raft::network::{Transport, TransportError};
use iggyd_wire::protocol::codes::Status;
use openraft::impls::BasicNode;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A failure code of this layer's peer handler: the owner shard of the
/// call's group did not answer (stopping, or its inbox is gone).
const NO_OWNER: u16 = 1;

/// One node as clients are shown it (GetClusterMetadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterNode {
    pub id: u64,
    pub name: String,
    /// The Iggy address clients dial.
    pub address: SocketAddr,
    /// The node-to-node address (`iggyd cluster status` shows it).
    pub replication_address: SocketAddr,
}

/// The cluster as this node's client connections describe it: every node,
/// and which one leads the metadata group (shard 0 keeps it current).
#[derive(Debug)]
pub struct ClusterRoster {
    pub name: String,
    pub node_id: u64,
    /// Every node: the configured ones until the metadata group applies a
    /// membership, then its voters and learners (`set_members`).
    nodes: std::sync::RwLock<Vec<RosterNode>>,
    /// The voters among them (the configured nodes until the metadata
    /// group applies a membership): a majority is counted of these.
    voters: std::sync::RwLock<std::collections::BTreeSet<u64>>,
    /// The metadata group's leader as this node last heard (0: none).
    leader: AtomicU64,
    /// When a node last called this one on the metadata group (ms since
    /// `since`), and which: a leader heartbeats its followers.
    heard_at_ms: AtomicU64,
    heard_from: AtomicU64,
    since: std::time::Instant,
    /// A leader silent this long is not shown as one: it is likely gone,
    /// and a client sent there would only fail to connect.
    silent_after: Duration,
    /// When a quorum last acknowledged this node as the metadata group's
    /// leader (ms since `since`; `u64::MAX`: a group of one voter, always).
    quorum_acked_at_ms: AtomicU64,
    /// How long a quorum's acknowledgement lets this node lead clients (an
    /// election timeout: by then the others elect a leader of their own).
    lease: Duration,
    /// When each peer node last answered a beat (`quiet.rs`; the settings'
    /// own).
    liveness: Arc<super::liveness::Liveness>,
}

impl ClusterRoster {
    pub fn new(
        name: String,
        node_id: u64,
        nodes: Vec<RosterNode>,
        silent_after: Duration,
        lease: Duration,
        liveness: Arc<super::liveness::Liveness>,
    ) -> ClusterRoster {
        let voters = nodes.iter().map(|node| node.id).collect();
        ClusterRoster {
            name,
            node_id,
            nodes: std::sync::RwLock::new(nodes),
            voters: std::sync::RwLock::new(voters),
            leader: AtomicU64::new(0),
            heard_at_ms: AtomicU64::new(0),
            heard_from: AtomicU64::new(0),
            since: std::time::Instant::now(),
            silent_after,
            quorum_acked_at_ms: AtomicU64::new(0),
            lease,
            liveness,
        }
    }

    /// Whether this node hears a majority of the cluster's voters (itself,
    /// if it is one, and those that answered its beats within a lease):
    /// else it is cut off from them, and a client must look for the leader
    /// elsewhere (58) rather than wait here (57) for an election it cannot
    /// take part in. Learners are not counted: they elect no one.
    pub fn in_majority(&self) -> bool {
        let voters = self
            .voters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.liveness.quorum_live(self.node_id, &voters, self.lease)
    }

    /// Every node of the cluster as this node knows it now.
    pub fn nodes(&self) -> Vec<RosterNode> {
        self.nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The cluster's nodes become `membership`'s (voters and learners, by
    /// id). A node's card gives its addresses and name; one whose card
    /// holds only the replication address (a membership written before
    /// cards carried more) keeps what this node knew of it, and is left
    /// out when it knew nothing (no address to send clients to).
    pub fn set_members(&self, membership: &iggyd_raft::Membership) {
        let mut nodes = self
            .nodes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = std::mem::take(&mut *nodes);
        for (id, node) in membership.nodes() {
            let before = known.iter().find(|known| known.id == *id);
            if let Some(node) = roster_node(*id, &node.addr, before) {
                nodes.push(node);
            }
        }
        nodes.sort_by_key(|node| node.id);
        *self
            .voters
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = membership.voter_ids().collect();
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When a quorum last acknowledged this node as the leader.
    pub fn set_quorum_acked(&self, acked: crate::cluster::QuorumAcked) {
        use crate::cluster::QuorumAcked;
        let at = match acked {
            QuorumAcked::Always => u64::MAX,
            QuorumAcked::Never => 0,
            QuorumAcked::Ago(ago) => self
                .now_ms()
                .saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX))
                .max(1),
        };
        self.quorum_acked_at_ms.store(at, Ordering::Release);
    }

    /// Whether this node believes it leads the metadata group but no
    /// quorum has acknowledged it for a lease: it is cut off (or paused),
    /// the others are electing or have elected another leader, and clients
    /// must go look for it (58).
    pub fn cut_off(&self) -> bool {
        self.leader() == Some(self.node_id) && !self.lease_holds()
    }

    fn lease_holds(&self) -> bool {
        match self.quorum_acked_at_ms.load(Ordering::Acquire) {
            u64::MAX => true,
            0 => false,
            at => u128::from(self.now_ms().saturating_sub(at)) <= self.lease.as_millis(),
        }
    }

    /// Node `node` called this one on the metadata group just now.
    pub fn heard_from(&self, node: u64) {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.heard_from.store(node, Ordering::Release);
        self.heard_at_ms.store(now, Ordering::Release);
    }

    /// The leader to show clients: this node when it leads, another node
    /// while it is heard from, none while it is silent (clients then wait
    /// for the election instead of being sent to a node that is gone).
    pub fn live_leader(&self) -> Option<u64> {
        let leader = self.leader()?;
        if leader == self.node_id {
            return self.lease_holds().then_some(leader);
        }
        let now = self.now_ms();
        let silent_ms = now.saturating_sub(self.heard_at_ms.load(Ordering::Acquire));
        let heard = self.heard_from.load(Ordering::Acquire) == leader
            && u128::from(silent_ms) <= self.silent_after.as_millis();
        heard.then_some(leader)
    }

    /// The leader to name in the roster clients are shown
    /// (GetClusterMetadata): the live leader; at a node that hears no
    /// majority of the voters, the other node it last knew to lead. That
    /// node cannot tell whether it still leads, but the majority it is
    /// cut off from can, and a client sent there learns the leader at
    /// once; with no leader named, the SDK asks here again for 5 s before
    /// it tries another node (`leader_aware.rs`).
    pub fn leader_to_show(&self) -> Option<u64> {
        self.live_leader().or_else(|| {
            self.leader()
                .filter(|leader| *leader != self.node_id && !self.in_majority())
        })
    }

    /// The metadata group's leader, when there is one.
    pub fn leader(&self) -> Option<u64> {
        match self.leader.load(Ordering::Acquire) {
            0 => None,
            leader => Some(leader),
        }
    }

    pub fn set_leader(&self, leader: Option<u64>) {
        self.leader.store(leader.unwrap_or(0), Ordering::Release);
    }

    /// Whether this node leads the metadata group and a quorum says so
    /// (clients belong here).
    pub fn leads(&self) -> bool {
        self.leader() == Some(self.node_id) && self.lease_holds()
    }
}

/// Node `id` as a membership's card `addr` describes it, what this node
/// knew `before` filling what the card leaves out.
pub fn roster_node(id: u64, addr: &str, before: Option<&RosterNode>) -> Option<RosterNode> {
    let card = iggyd_raft::membership::NodeCard::parse(addr);
    let replication_address = card
        .replication
        .parse()
        .ok()
        .or(before.map(|node| node.replication_address))?;
    let address = card
        .address
        .and_then(|address| address.parse().ok())
        .or(before.map(|node| node.address))?;
    let name = card
        .name
        .or_else(|| before.map(|node| node.name.clone()))
        .unwrap_or_else(|| format!("node-{id}"));
    Some(RosterNode {
        id,
        name,
        address,
        replication_address,
    })
}

/// The nodes this node dials, by id: the configured ones, then every node
/// a membership names (node-wide; each shard's transport reads it when it
/// first calls a node).
#[derive(Debug, Default)]
pub struct PeerDirectory {
    nodes: std::sync::RwLock<HashMap<u64, SocketAddr>>,
}

impl PeerDirectory {
    pub fn learn(&self, id: u64, addr: &str) {
        let card = iggyd_raft::membership::NodeCard::parse(addr);
        let Ok(address) = card.replication.parse::<SocketAddr>() else {
            tracing::warn!(
                node = id,
                addr,
                "a membership names a node with no usable address"
            );
            return;
        };
        let mut nodes = self
            .nodes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if nodes.insert(id, address) != Some(address) {
            tracing::info!(node = id, %address, "a peer node's replication address");
        }
    }

    pub fn address(&self, id: u64) -> Option<SocketAddr> {
        self.nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .copied()
    }
}

/// What every shard of a cluster node shares, built from `[cluster]`.
#[derive(Clone)]
pub struct NodeSetup {
    pub settings: Arc<ClusterSettings>,
    pub tls: PeerTls,
    pub limits: ValidLimits,
    pub roster: Arc<ClusterRoster>,
    /// The peers' replication addresses, as memberships name them.
    pub peers: Arc<PeerDirectory>,
    /// The replication address every shard's peer server binds.
    pub replication_address: SocketAddr,
    /// One per shard.
    pub counters: Arc<[Arc<PeerCounters>]>,
}

impl std::fmt::Debug for NodeSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSetup")
            .field("node_id", &self.settings.node_id)
            .field("replication_address", &self.replication_address)
            .finish_non_exhaustive()
    }
}

/// Heartbeat intervals without a call from the metadata leader after which
/// a follower stops showing it to clients as the leader.
const LEADER_SILENT_HEARTBEATS: u32 = 3;

/// Entries one AppendEntries call carries at most: with batches of up to
/// a few MiB each, a call stays well inside the peer frame limit.
const MAX_PAYLOAD_ENTRIES: u64 = 16;

impl NodeSetup {
    /// This node's peer identity from `[cluster.tls]` (at start, and again
    /// at SIGHUP for a rotation): the files read, the certificate checked
    /// to name this node and to come from the CA.
    pub fn load_tls(config: &ClusterConfig, credentials: Option<&Path>) -> Result<PeerTls, String> {
        let read = |key: &str, file: &Option<std::path::PathBuf>| -> Result<Vec<u8>, String> {
            let file = file
                .as_ref()
                .ok_or_else(|| format!("cluster.tls.{key} is not set"))?;
            let path = crate::config::resolve_credential(file, credentials)
                .map_err(|error| format!("cluster.tls.{key}: {error}"))?;
            std::fs::read(&path).map_err(|error| {
                format!("cluster.tls.{key}: cannot read {}: {error}", path.display())
            })
        };
        let ca = read("ca_file", &config.tls.ca_file)?;
        let cert = read("cert_file", &config.tls.cert_file)?;
        let key = read("key_file", &config.tls.key_file)?;
        let tls = PeerTls::from_pem(&ca, &cert, &key, config.node_id, &config.name)
            .map_err(|error| format!("cluster.tls: {error}"))?;
        Ok(tls)
    }
    /// `[cluster]` made ready: the certificates read and checked (a file
    /// named `$CREDENTIALS_DIRECTORY/NAME` is read from `credentials`,
    /// systemd's credentials directory, as for `[tcp.tls]`), the Raft
    /// timing validated.
    pub fn prepare(
        config: &ClusterConfig,
        shards: usize,
        credentials: Option<&Path>,
    ) -> Result<NodeSetup, String> {
        let tls = NodeSetup::load_tls(config, credentials)?;
        let this = config
            .nodes
            .iter()
            .find(|node| node.id == config.node_id)
            .ok_or_else(|| format!("cluster.node_id {} is not in cluster.nodes", config.node_id))?;
        let mut raft =
            ClusterSettings::raft_config(config.heartbeat_interval, config.election_timeout)?;
        Arc::make_mut(&mut raft).max_payload_entries = MAX_PAYLOAD_ENTRIES;
        let voters: BTreeMap<u64, BasicNode> = config
            .nodes
            .iter()
            .map(|node| {
                (
                    node.id,
                    iggyd_raft::membership::NodeCard {
                        replication: node.replication_address.to_string(),
                        address: Some(node.address.to_string()),
                        name: Some(node.name.clone()),
                    }
                    .node(),
                )
            })
            .collect();
        let liveness = Arc::new(super::liveness::Liveness::default());
        let roster = ClusterRoster::new(
            config.name.clone(),
            config.node_id,
            config
                .nodes
                .iter()
                .map(|node| RosterNode {
                    id: node.id,
                    name: node.name.clone(),
                    address: node.address,
                    replication_address: node.replication_address,
                })
                .collect(),
            config.heartbeat_interval * LEADER_SILENT_HEARTBEATS,
            config.election_timeout,
            liveness.clone(),
        );
        let limits = PeerLimits::default()
            .validate()
            .map_err(|error| format!("node-to-node limits: {error}"))?;
        let peers = PeerDirectory::default();
        for (id, node) in &voters {
            peers.learn(*id, &node.addr);
        }
        let mut settings = ClusterSettings::new(config.node_id, voters, config.join, raft);
        settings.liveness = liveness;
        settings.metadata_snapshot_every = config.metadata_snapshot_entries;
        Ok(NodeSetup {
            settings: Arc::new(settings),
            tls,
            limits,
            roster: Arc::new(roster),
            peers: Arc::new(peers),
            replication_address: this.replication_address,
            counters: (0..shards)
                .map(|_| Arc::new(PeerCounters::default()))
                .collect(),
        })
    }

    /// Shard `shard`'s replication: its groups, its peer clients and its
    /// peer server on `listener` (bound by the supervisor).
    pub fn start(&self, shard: ShardId, listener: std::net::TcpListener) -> ReplicationStart {
        let setup = self.clone();
        ReplicationStart(Box::new(move |context: Rc<ShardContext>| {
            start_shard(setup, shard, listener, context)
        }))
    }
}

fn start_shard(
    setup: NodeSetup,
    shard: ShardId,
    listener: std::net::TcpListener,
    context: Rc<ShardContext>,
) -> StartedReplication {
    let counters = setup
        .counters
        .get(shard)
        .cloned()
        .unwrap_or_else(|| Arc::new(PeerCounters::default()));
    let wire_shard = u16::try_from(shard).map_err(|_| format!("shard {shard} out of range"))?;
    let transport = PeerTransport::new(&setup, wire_shard, counters.clone());
    let apply = (shard == 0).then(|| apply_through_mesh(&context));
    let mut cluster = ShardCluster::new(setup.settings.clone(), transport, apply)
        .with_roster(setup.roster.clone());
    if shard == 0 {
        cluster = cluster.with_membership(follow_membership(&context, &setup));
    }
    let cluster = Rc::new(cluster);
    let listener = monoio::net::TcpListener::from_std(listener)
        .map_err(|error| format!("the replication listener: {error}"))?;
    let (stop, signal) = iggyd_peer::stop_signal();
    cluster.keep_until_stopped(stop);
    // Shard 0 beats the peer nodes for all of the node's shards.
    cluster.start_quiet(shard == 0);
    let handler = route_to_owner(context, setup.roster.clone());
    monoio::spawn(iggyd_peer::serve(
        listener,
        setup.tls,
        wire_shard,
        handler,
        setup.limits,
        counters,
        signal,
    ));
    Ok(cluster)
}

/// Shard 0's store, reached through its own inbox (the store is the
/// shard's; the group's task never holds it): what the metadata group
/// committed is applied, exported and replaced there, in inbox order.
fn apply_through_mesh(context: &Rc<ShardContext>) -> SharedStore {
    Rc::new(ThroughMesh(context.clone()))
}

struct ThroughMesh(Rc<ShardContext>);

impl ThroughMesh {
    fn ask(&self, request: Request) -> LocalFuture<Option<Response>> {
        let context = self.0.clone();
        Box::pin(async move { context.mesh.request(context.shard, 0, request).await.ok() })
    }
}

impl StoreAccess for ThroughMesh {
    fn apply(&self, command: MetadataCommand) -> LocalFuture<MetadataOutcome> {
        let answer = self.ask(Request::ApplyCommitted(Box::new(command)));
        Box::pin(async move {
            match answer.await {
                Some(Response::Metadata(outcome)) => outcome,
                _ => Err(Status::Error),
            }
        })
    }

    fn export(&self) -> LocalFuture<Result<ExportedStore, String>> {
        let answer = self.ask(Request::ExportMetadata);
        Box::pin(async move {
            match answer.await {
                Some(Response::Exported(exported)) => exported,
                _ => Err("shard 0 did not export the metadata store".to_string()),
            }
        })
    }

    fn replace(&self, store: Vec<u8>) -> LocalFuture<Result<(), String>> {
        let answer = self.ask(Request::ReplaceMetadata(store));
        Box::pin(async move {
            match answer.await {
                Some(Response::Replaced(replaced)) => replaced,
                _ => Err("shard 0 did not replace the metadata store".to_string()),
            }
        })
    }
}

/// What the metadata group's memberships change on this node, in its log
/// order: the peers it dials, the roster clients are shown, and the
/// voters new partition groups start with. Before the voters change,
/// every shard has installed the views of the commands applied before
/// the membership (a round trip through each inbox, FIFO): a partition
/// created before the membership entry starts with the voters before it
/// on every node, one created after with those after, whatever each
/// node's timing.
fn follow_membership(
    context: &Rc<ShardContext>,
    setup: &NodeSetup,
) -> super::metadata::MembershipApplied {
    let context = context.clone();
    let settings = setup.settings.clone();
    let roster = setup.roster.clone();
    let peers = setup.peers.clone();
    Rc::new(move |membership: iggyd_raft::Membership| {
        let context = context.clone();
        let settings = settings.clone();
        let roster = roster.clone();
        let peers = peers.clone();
        Box::pin(async move {
            for (id, node) in membership.nodes() {
                if *id != settings.node_id {
                    peers.learn(*id, &node.addr);
                }
            }
            roster.set_members(&membership);
            let voters: Vec<u64> = super::voters_of(&membership).into_keys().collect();
            let before: Vec<u64> = settings.new_group_voters().into_keys().collect();
            if voters == before {
                // The same voters: no partition can start differently.
                settings.set_new_group_voters(&membership);
                return;
            }
            for shard in 0..context.shards {
                if shard == context.shard {
                    continue;
                }
                let barrier = context.mesh.request(context.shard, shard, Request::Ping);
                if monoio::time::timeout(MEMBERSHIP_BARRIER_WAIT, barrier)
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        shard,
                        "a shard did not answer before the voters of new partitions changed"
                    );
                }
            }
            settings.set_new_group_voters(&membership);
        })
    })
}

/// How long a membership's barrier waits for each shard.
const MEMBERSHIP_BARRIER_WAIT: Duration = Duration::from_secs(5);

/// Which shard owns each group, from the installed view (rebuilt when the
/// view changes).
struct Owners {
    version: u64,
    owners: HashMap<u64, ShardId>,
}

fn owner_of(context: &ShardContext, owners: &RefCell<Owners>, channel: u64) -> Option<ShardId> {
    if channel == METADATA_CHANNEL {
        return Some(0);
    }
    let view = context.view();
    let mut cached = owners.borrow_mut();
    if cached.version != view.version || cached.owners.is_empty() {
        cached.version = view.version;
        cached.owners.clear();
        for stream in view.streams() {
            for topic in stream.topics.values() {
                for route in router::topic_routes(stream, topic, context.shards) {
                    cached.owners.insert(route.key.storage_id, route.owner);
                }
            }
        }
    }
    cached.owners.get(&channel).copied()
}

/// The peer server's handler: every call goes to the inbox of the shard
/// that owns its group (this one's included, so calls and the shard's own
/// work are ordered alike); a group no shard owns yet is answered as
/// missing (the caller retries).
fn route_to_owner(context: Rc<ShardContext>, roster: Arc<ClusterRoster>) -> PeerHandler {
    let owners = Rc::new(RefCell::new(Owners {
        version: u64::MAX,
        owners: HashMap::new(),
    }));
    Rc::new(move |request: PeerRequest| {
        let context = context.clone();
        let owners = owners.clone();
        if request.channel == METADATA_CHANNEL {
            roster.heard_from(request.node_id);
        }
        Box::pin(async move {
            // A beat is answered by whichever shard it reached.
            if request.channel == super::liveness::BEAT_CHANNEL {
                return Ok(super::liveness::beat_answer());
            }
            let PeerRequest { channel, body, .. } = request;
            let Some(owner) = owner_of(&context, &owners, channel) else {
                return Ok(iggyd_raft::network::no_such_group(channel));
            };
            let (reply, answer) = flume::bounded(1);
            context
                .mesh
                .send(
                    owner,
                    ShardMessage::Peer {
                        channel,
                        body,
                        reply,
                    },
                )
                .await
                .map_err(|error| PeerFailure {
                    code: NO_OWNER,
                    message: error.to_string(),
                })?;
            answer.recv_async().await.map_err(|_| PeerFailure {
                code: NO_OWNER,
                message: format!("shard {owner} did not answer"),
            })
        })
    })
}

/// The groups' way to their peers: one `iggyd-peer` client per peer node
/// on this shard (clones share them), made when the node is first called
/// (the configured nodes, and those a membership names).
#[derive(Clone)]
pub struct PeerTransport {
    clients: Rc<RefCell<HashMap<u64, PeerClient>>>,
    peers: Arc<PeerDirectory>,
    tls: PeerTls,
    limits: ValidLimits,
    shard: u16,
    node_id: u64,
    counters: Arc<PeerCounters>,
}

impl PeerTransport {
    fn new(setup: &NodeSetup, shard: u16, counters: Arc<PeerCounters>) -> PeerTransport {
        PeerTransport {
            clients: Rc::new(RefCell::new(HashMap::new())),
            peers: setup.peers.clone(),
            tls: setup.tls.clone(),
            limits: setup.limits,
            shard,
            node_id: setup.settings.node_id,
            counters,
        }
    }

    /// This shard's client to node `target`, made now when there is none
    /// (or its address changed).
    fn client(&self, target: u64) -> Option<PeerClient> {
        if target == self.node_id {
            return None;
        }
        let address = self.peers.address(target)?;
        let mut clients = self.clients.borrow_mut();
        if let Some(client) = clients.get(&target)
            && client.target().address == address
        {
            return Some(client.clone());
        }
        let client = PeerClient::new(
            self.tls.clone(),
            self.shard,
            PeerTarget {
                node_id: target,
                address,
            },
            self.limits,
            self.counters.clone(),
        );
        clients.insert(target, client.clone());
        Some(client)
    }
}

impl Transport for PeerTransport {
    async fn call(
        &self,
        target: u64,
        channel: u64,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let Some(client) = self.client(target) else {
            return Err(TransportError::Unreachable(format!(
                "node {target} is not a member"
            )));
        };
        client
            .call(channel, body, timeout)
            .await
            .map_err(|error| match error {
                PeerError::Unreachable { .. } | PeerError::TooLarge { .. } => {
                    TransportError::Unreachable(error.to_string())
                }
                PeerError::Disconnected { .. }
                | PeerError::TimedOut { .. }
                | PeerError::Failed { .. } => TransportError::Failed(error.to_string()),
            })
    }

    fn learn(&self, target: u64, node: &BasicNode) {
        if target != self.node_id {
            self.peers.learn(target, &node.addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterNode, ClusterTlsConfig};
    use iggyd_peer::ClusterCerts;
    use std::path::PathBuf;

    fn one_node(tls: ClusterTlsConfig) -> ClusterConfig {
        ClusterConfig {
            enabled: true,
            name: "demo".to_string(),
            node_id: 1,
            join: false,
            nodes: vec![ClusterNode {
                id: 1,
                name: "node-1".to_string(),
                address: "127.0.0.1:8090".parse().unwrap(),
                replication_address: "127.0.0.1:8091".parse().unwrap(),
            }],
            election_timeout: Duration::from_secs(1),
            heartbeat_interval: Duration::from_millis(200),
            allow_even_voters: false,
            metadata_snapshot_entries: 1024,
            tls,
        }
    }

    /// Node 1's roster of nodes 1 to `nodes`: a leader silent for
    /// `silent_after` is not shown, `lease` is how long answers count.
    fn roster_of(
        nodes: u64,
        silent_after: Duration,
        lease: Duration,
        liveness: Arc<super::super::liveness::Liveness>,
    ) -> ClusterRoster {
        let node = |id: u64| RosterNode {
            id,
            name: format!("node-{id}"),
            address: format!("127.0.0.1:{}", 8090 + id).parse().unwrap(),
            replication_address: format!("127.0.0.1:{}", 9090 + id).parse().unwrap(),
        };
        ClusterRoster::new(
            "demo".to_string(),
            1,
            (1..=nodes).map(node).collect(),
            silent_after,
            lease,
            liveness,
        )
    }

    // Proves a node counts itself in the majority only while the nodes that
    // answered its beats within a lease, with itself, are more than half
    // of the cluster: a follower cut off from the others then sends its
    // clients elsewhere (58) instead of keeping them replaying (57).
    #[test]
    fn a_node_is_in_the_majority_only_while_enough_nodes_answer_its_beats() {
        let liveness = Arc::new(super::super::liveness::Liveness::default());
        let roster = roster_of(
            3,
            Duration::from_millis(600),
            Duration::from_secs(1),
            liveness.clone(),
        );
        assert!(!roster.in_majority(), "no peer answered yet");
        liveness.heard(3);
        assert!(roster.in_majority());
        let alone = roster_of(3, Duration::from_millis(600), Duration::ZERO, liveness);
        assert!(
            !alone.in_majority(),
            "answers older than the lease do not count"
        );

        // Learners are not counted: with voters 1, 2, 3 and learners 4
        // and 5, node 1 hearing both learners but no voter is cut off; a
        // learner hearing two voters is not.
        let five = roster_of(
            5,
            Duration::from_millis(600),
            Duration::from_secs(1),
            Arc::new(super::super::liveness::Liveness::default()),
        );
        let card = |id: u64| openraft::impls::BasicNode {
            addr: format!("127.0.0.1:{}", 9090 + id),
        };
        let membership = iggyd_raft::Membership::new(
            vec![(1..=3).collect::<std::collections::BTreeSet<u64>>()],
            (1..=5)
                .map(|id| (id, card(id)))
                .collect::<std::collections::BTreeMap<u64, _>>(),
        )
        .expect("a membership");
        five.set_members(&membership);
        five.liveness.heard(4);
        five.liveness.heard(5);
        assert!(!five.in_majority(), "two learners heard, no voter");
        five.liveness.heard(2);
        assert!(five.in_majority(), "voters 1 and 2 of 3");
    }

    // Proves the roster shown to clients names the live leader, and at a
    // node cut off from the majority the leader it last knew of (a client
    // is sent there at once instead of asking a node that cannot see an
    // election), but never a silent leader at a node in the majority
    // (an election is on there: clients wait for it), nor this node.
    #[test]
    fn a_node_cut_off_shows_clients_the_leader_it_last_knew() {
        let liveness = Arc::new(super::super::liveness::Liveness::default());
        let roster = roster_of(3, Duration::ZERO, Duration::from_secs(1), liveness.clone());
        roster.set_leader(Some(3));
        // Node 3 silent (no call heard within 0 ms), node 2 answers: an
        // election is on in the majority this node is part of.
        liveness.heard(2);
        assert_eq!(roster.live_leader(), None);
        assert_eq!(roster.leader_to_show(), None);
        // Cut off from both: the leader last known.
        let cut_off = roster_of(
            3,
            Duration::ZERO,
            Duration::from_secs(1),
            Arc::new(super::super::liveness::Liveness::default()),
        );
        cut_off.set_leader(Some(3));
        assert_eq!(cut_off.leader_to_show(), Some(3));
        // Never itself.
        cut_off.set_leader(Some(1));
        assert_eq!(cut_off.leader_to_show(), None);
    }

    // Proves the node reads `[cluster.tls]` files named
    // `$CREDENTIALS_DIRECTORY/NAME` from systemd's credentials directory
    // (what the NixOS module and packaging/README.md configure), and names
    // the key when that directory is not set.
    #[test]
    fn tls_files_from_the_credentials_directory() {
        let dir = tempfile::tempdir().unwrap();
        ClusterCerts::generate("demo", &[1])
            .unwrap()
            .write_to(dir.path())
            .unwrap();
        let credential = |name: &str| Some(PathBuf::from(format!("$CREDENTIALS_DIRECTORY/{name}")));
        let config = one_node(ClusterTlsConfig {
            ca_file: credential("ca.pem"),
            cert_file: credential("node-1.pem"),
            key_file: credential("node-1.key"),
        });
        let setup = NodeSetup::prepare(&config, 1, Some(dir.path())).unwrap();
        assert_eq!(
            setup.replication_address,
            config.nodes[0].replication_address
        );
        let error = NodeSetup::prepare(&config, 1, None).unwrap_err();
        assert!(
            error.starts_with("cluster.tls.ca_file: CREDENTIALS_DIRECTORY is not set"),
            "{error}"
        );
        let absolute = one_node(ClusterTlsConfig {
            ca_file: Some(ClusterCerts::ca_file(dir.path())),
            cert_file: Some(ClusterCerts::cert_file(dir.path(), 1)),
            key_file: Some(ClusterCerts::key_file(dir.path(), 1)),
        });
        NodeSetup::prepare(&absolute, 1, Some(Path::new("/nonexistent"))).unwrap();
    }
}
