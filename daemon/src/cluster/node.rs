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

use super::metadata::{ApplyMetadata, METADATA_CHANNEL};
use super::{ClusterSettings, ShardCluster};
use crate::config::ClusterConfig;
use crate::shard::context::ShardContext;
use crate::shard::mesh::{Request, Response, ShardId, ShardMessage};
use crate::shard::replica::{ReplicationStart, StartedReplication};
use crate::shard::router;
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
    pub nodes: Vec<RosterNode>,
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
}

impl ClusterRoster {
    pub fn new(
        name: String,
        node_id: u64,
        nodes: Vec<RosterNode>,
        silent_after: Duration,
        lease: Duration,
    ) -> ClusterRoster {
        ClusterRoster {
            name,
            node_id,
            nodes,
            leader: AtomicU64::new(0),
            heard_at_ms: AtomicU64::new(0),
            heard_from: AtomicU64::new(0),
            since: std::time::Instant::now(),
            silent_after,
            quorum_acked_at_ms: AtomicU64::new(0),
            lease,
        }
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

/// What every shard of a cluster node shares, built from `[cluster]`.
#[derive(Clone)]
pub struct NodeSetup {
    pub settings: Arc<ClusterSettings>,
    pub tls: PeerTls,
    pub limits: ValidLimits,
    pub roster: Arc<ClusterRoster>,
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
    /// `[cluster]` made ready: the certificates read and checked (a file
    /// named `$CREDENTIALS_DIRECTORY/NAME` is read from `credentials`,
    /// systemd's credentials directory, as for `[tcp.tls]`), the Raft
    /// timing validated.
    pub fn prepare(
        config: &ClusterConfig,
        shards: usize,
        credentials: Option<&Path>,
    ) -> Result<NodeSetup, String> {
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
                    BasicNode {
                        addr: node.replication_address.to_string(),
                    },
                )
            })
            .collect();
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
        );
        let limits = PeerLimits::default()
            .validate()
            .map_err(|error| format!("node-to-node limits: {error}"))?;
        Ok(NodeSetup {
            settings: Arc::new(ClusterSettings {
                node_id: config.node_id,
                voters,
                join: config.join,
                raft,
            }),
            tls,
            limits,
            roster: Arc::new(roster),
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
    let cluster = Rc::new(
        ShardCluster::new(setup.settings.clone(), transport, apply)
            .with_roster(setup.roster.clone()),
    );
    let listener = monoio::net::TcpListener::from_std(listener)
        .map_err(|error| format!("the replication listener: {error}"))?;
    let (stop, signal) = iggyd_peer::stop_signal();
    cluster.keep_until_stopped(stop);
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

/// Shard 0 applies what the metadata group committed through its own
/// inbox (the store is the shard's; the group's task never holds it).
fn apply_through_mesh(context: &Rc<ShardContext>) -> ApplyMetadata {
    let context = context.clone();
    Rc::new(move |command| {
        let context = context.clone();
        Box::pin(async move {
            match context
                .mesh
                .request(context.shard, 0, Request::ApplyCommitted(Box::new(command)))
                .await
            {
                Ok(Response::Metadata(outcome)) => outcome,
                Ok(_) | Err(_) => Err(Status::Error),
            }
        })
    })
}

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
/// on this shard (clones share them).
#[derive(Clone)]
pub struct PeerTransport {
    clients: Rc<HashMap<u64, PeerClient>>,
}

impl PeerTransport {
    fn new(setup: &NodeSetup, shard: u16, counters: Arc<PeerCounters>) -> PeerTransport {
        let clients = setup
            .settings
            .voters
            .iter()
            .filter(|(id, _)| **id != setup.settings.node_id)
            .filter_map(|(id, node)| {
                let address: SocketAddr = node.addr.parse().ok()?;
                Some((
                    *id,
                    PeerClient::new(
                        setup.tls.clone(),
                        shard,
                        PeerTarget {
                            node_id: *id,
                            address,
                        },
                        setup.limits,
                        counters.clone(),
                    ),
                ))
            })
            .collect();
        PeerTransport {
            clients: Rc::new(clients),
        }
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
        let Some(client) = self.clients.get(&target) else {
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
            tls,
        }
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
