//! Replication between iggyd nodes (`[cluster]`): on each shard, the
//! consensus groups of the replicated partitions it owns, their log on the
//! pump (`backend.rs`), their network, and the receiving side of
//! node-to-node calls. The shard knows this layer only through
//! `shard::replica::Replication`, which [`ShardCluster`] implements.
//!
//! A node's groups use one openraft configuration; every voter of the
//! cluster is a replica of every replicated partition (replica sets
//! smaller than the cluster are a later step), and every node initializes
//! a new group with the same voters (a node that hears from an initialized
//! peer first is refused, which is the same outcome), unless it joins an
//! existing cluster (`cluster.join`), when it waits to be added.
//!
//! Must not: mutate a partition (the pump does, through the queue), or
//! wait for a pump from inside it (groups wait for pumps, never the
//! reverse).

pub mod admin;
pub mod backend;
pub mod counters;
pub mod group;
pub mod liveness;
pub mod metadata;
pub mod node;
#[cfg(test)]
mod members_tests;
#[cfg(test)]
mod metadata_tests;
#[cfg(test)]
mod offsets_tests;
#[cfg(test)]
mod purge_tests;
pub mod quiet;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, RaftOp, RaftQueue, Replication, ReplicationCounters};
use backend::PumpBackend;
use group::{GroupRaft, PartitionGroup};
use iggyd_raft::backend::BackendLogStore;
use iggyd_raft::network::{Network, Transport, no_such_group, serve, serve_guarded};
use iggyd_raft::replay::ControlEntry;
use iggyd_raft::state_machine::StateMachine;
use metadata::{METADATA_CHANNEL, METADATA_KEY, MetadataGroup, SharedStore};
use openraft::impls::BasicNode;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

/// What every shard of a cluster node needs to run its groups.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub node_id: u64,
    /// The configured voters, by node id, each with its card
    /// (`iggyd_raft::membership::NodeCard`): the metadata group starts
    /// with them when the cluster is born.
    pub voters: BTreeMap<u64, BasicNode>,
    /// Wait to be added instead of initializing new groups.
    pub join: bool,
    pub raft: Arc<openraft::Config>,
    /// The voters a new partition group starts with: the configured ones,
    /// then those of each membership the metadata group applies, in its
    /// log order (`node.rs` `follow_membership`), so every node starts a
    /// new partition with the same voters whatever the changes since the
    /// cluster was born.
    new_group_voters: Arc<std::sync::RwLock<BTreeMap<u64, BasicNode>>>,
    /// When each peer node last answered a beat (`quiet.rs`).
    pub liveness: Arc<liveness::Liveness>,
    /// The metadata group takes a snapshot every this many entries
    /// (`cluster.metadata_snapshot_entries`).
    pub metadata_snapshot_every: u64,
    /// Partitions with storage ids below this were created before the
    /// metadata snapshot this node last installed: it learned them without
    /// the membership they were created under, so a group of theirs that
    /// it starts new waits for its leader instead of initializing.
    adopted_below: Arc<std::sync::atomic::AtomicU64>,
}

impl ClusterSettings {
    pub fn new(
        node_id: u64,
        voters: BTreeMap<u64, BasicNode>,
        join: bool,
        raft: Arc<openraft::Config>,
    ) -> ClusterSettings {
        ClusterSettings {
            node_id,
            new_group_voters: Arc::new(std::sync::RwLock::new(voters.clone())),
            voters,
            join,
            raft,
            liveness: Arc::default(),
            metadata_snapshot_every: crate::limits::CLUSTER_METADATA_SNAPSHOT_ENTRIES,
            adopted_below: Arc::default(),
        }
    }

    /// See `adopted_below`: raised by each metadata snapshot installed.
    pub fn adopt_below(&self, storage_id: u64) {
        self.adopted_below
            .fetch_max(storage_id, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this node initializes the group of partition `storage_id`
    /// when it never was: not when joining, nor for a partition learned
    /// from a metadata snapshot.
    pub fn initializes(&self, storage_id: u64) -> bool {
        !self.join
            && storage_id
                >= self
                    .adopted_below
                    .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The voters a partition group started now begins with.
    pub fn new_group_voters(&self) -> BTreeMap<u64, BasicNode> {
        self.new_group_voters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// New partition groups start with `membership`'s voters (the newest
    /// configuration of a joint one: a partition created while a change
    /// is under way starts where the change goes).
    pub fn set_new_group_voters(&self, membership: &iggyd_raft::Membership) {
        let voters = voters_of(membership);
        if voters.is_empty() {
            return;
        }
        *self
            .new_group_voters
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = voters;
    }

    /// openraft's configuration for iggyd's groups: the cluster's timing,
    /// pre-vote (a node cut off and back does not depose a healthy
    /// leader), and what the adapter requires ([`iggyd_raft::required_config`]:
    /// snapshots only where a partition's retention asks, every entry
    /// through one purged; a restarted leader campaigns for a new term).
    pub fn raft_config(
        heartbeat: std::time::Duration,
        election_timeout: std::time::Duration,
    ) -> Result<Arc<openraft::Config>, String> {
        let election = election_timeout.as_millis() as u64;
        iggyd_raft::required_config(openraft::Config {
            cluster_name: "iggyd".to_string(),
            heartbeat_interval: heartbeat.as_millis() as u64,
            election_timeout_min: election,
            election_timeout_max: election * 2,
            enable_pre_vote: Some(true),
            ..Default::default()
        })
        .validate()
        .map(Arc::new)
        .map_err(|error| format!("the cluster's Raft timing is not usable: {error}"))
    }
}

/// The voters of `membership`'s newest configuration, with their nodes.
pub fn voters_of(membership: &iggyd_raft::Membership) -> BTreeMap<u64, BasicNode> {
    let Some(newest) = membership.get_joint_config().last() else {
        return BTreeMap::new();
    };
    newest
        .iter()
        .filter_map(|id| Some((*id, membership.get_node(id)?.clone())))
        .collect()
}

/// The groups of one shard of a cluster node.
pub struct ShardCluster<T: Transport> {
    settings: Arc<ClusterSettings>,
    transport: T,
    /// This shard's partition groups, by channel (a storage id).
    groups: RefCell<HashMap<u64, Rc<PartitionGroup>>>,
    /// Shard 0: how committed metadata commands reach the store.
    metadata_store: Option<SharedStore>,
    /// Shard 0: the metadata group, once its log is opened.
    metadata: RefCell<Option<Rc<MetadataGroup>>>,
    /// Where shard 0 tells the node's connections who leads the metadata
    /// group.
    roster: Option<Arc<node::ClusterRoster>>,
    /// Shard 0: what the metadata group's memberships change on this node.
    on_membership: Option<metadata::MembershipApplied>,
    /// What lives as long as this shard's groups (its peer server).
    kept: RefCell<Vec<Box<dyn std::any::Any>>>,
    /// Elections and forwarded requests, for the shard's report.
    counters: counters::Counters,
    /// openraft's configuration for partition groups: the cluster's, with
    /// openraft's tick off (the shard's quiet tick does its work).
    quiet_raft: Arc<openraft::Config>,
    /// Dropped with this shard's cluster layer: its beats stop.
    alive: Rc<()>,
}

impl<T: Transport> ShardCluster<T> {
    /// A shard's cluster layer; shard 0's gets `metadata_store` and runs
    /// the metadata group.
    pub fn new(
        settings: Arc<ClusterSettings>,
        transport: T,
        metadata_store: Option<SharedStore>,
    ) -> Self {
        let quiet_raft = Arc::new(quiet::openraft_config(&settings.raft));
        ShardCluster {
            settings,
            transport,
            groups: RefCell::new(HashMap::new()),
            metadata_store,
            metadata: RefCell::new(None),
            roster: None,
            on_membership: None,
            kept: RefCell::new(Vec::new()),
            counters: counters::Counters::default(),
            quiet_raft,
            alive: Rc::new(()),
        }
    }

    /// Starts the shard's quiet tick (`quiet.rs`): every heartbeat
    /// interval, each partition group of this shard elects, heartbeats or
    /// rests; with `beats` (one shard of the node), this shard also sends
    /// every peer node its beats. The peers are the voters of the
    /// membership the metadata group applied last, so a node added later
    /// is beaten and a removed one no longer.
    pub fn start_quiet(self: &Rc<Self>, beats: bool) {
        let every = std::time::Duration::from_millis(self.settings.raft.heartbeat_interval.max(1));
        let cluster = Rc::downgrade(self);
        monoio::spawn(async move {
            let mut revivals = quiet::Revivals::default();
            let beating: Rc<RefCell<std::collections::BTreeSet<u64>>> = Rc::default();
            loop {
                let Some(cluster) = cluster.upgrade() else {
                    return;
                };
                let peers: Vec<u64> = cluster
                    .settings
                    .new_group_voters()
                    .into_keys()
                    .filter(|node| *node != cluster.settings.node_id)
                    .collect();
                if beats {
                    cluster.beat_new_peers(&peers, &beating, every);
                }
                cluster.quiet_tick(&mut revivals, &peers);
                drop(cluster);
                monoio::time::sleep(every).await;
            }
        });
    }

    /// Starts beating each of `peers` not beaten yet; a peer's beats stop
    /// once it leaves the membership (or the shard stops).
    fn beat_new_peers(
        &self,
        peers: &[u64],
        beating: &Rc<RefCell<std::collections::BTreeSet<u64>>>,
        every: std::time::Duration,
    ) {
        for &peer in peers {
            if !beating.borrow_mut().insert(peer) {
                continue;
            }
            let running = Rc::downgrade(&self.alive);
            let settings = self.settings.clone();
            let beating = beating.clone();
            let beat = liveness::beat(
                self.transport.clone(),
                peer,
                self.settings.liveness.clone(),
                every,
                move || {
                    running.upgrade().is_some() && settings.new_group_voters().contains_key(&peer)
                },
            );
            monoio::spawn(async move {
                beat.await;
                beating.borrow_mut().remove(&peer);
            });
        }
    }

    /// One quiet tick over this shard's partition groups.
    fn quiet_tick(&self, revivals: &mut quiet::Revivals, peers: &[u64]) {
        let timing = quiet::Timing::of(&self.settings.raft);
        let liveness = &self.settings.liveness;
        let revived = revivals.look(liveness, peers, timing.lease());
        if !revived.is_empty() {
            tracing::info!(
                nodes = ?revived,
                "nodes heard again (back, or restarted): their groups are told the commit"
            );
        }
        let now = std::time::Instant::now();
        let groups: Vec<Rc<PartitionGroup>> = self.groups.borrow().values().cloned().collect();
        let mut campaigns = Vec::new();
        for group in groups {
            let Some(raft) = group.raft() else {
                continue;
            };
            let may_elect = campaigns.len() < quiet::CAMPAIGNS_PER_TICK;
            let action = quiet::with_metrics(&raft, |metrics| {
                if let Some(seen) = group.quiet().changed(metrics) {
                    tracing::debug!(
                        group = %group.key(),
                        state = ?metrics.state,
                        leader = ?seen.leader,
                        term = seen.term,
                        committed = ?seen.committed,
                        last = ?seen.last,
                        "a quiet group changed"
                    );
                }
                group
                    .quiet()
                    .tick(metrics, liveness, &revived, timing, now, may_elect)
            });
            match action {
                quiet::Action::None => {}
                quiet::Action::Heartbeat => {
                    monoio::spawn(async move {
                        let _ = raft.trigger().heartbeat().await;
                    });
                }
                quiet::Action::Elect => {
                    campaigns.push(group.key());
                    monoio::spawn(async move {
                        let _ = raft.trigger().elect(true).await;
                    });
                }
                quiet::Action::Transfer(to) => {
                    tracing::info!(
                        group = %group.key(),
                        to,
                        "leadership not taken over yet: asking again"
                    );
                    monoio::spawn(async move {
                        let _ = raft.trigger().transfer_leader(to).await;
                    });
                }
            }
        }
        if let Some(first) = campaigns.first() {
            tracing::info!(
                groups = campaigns.len(),
                first = %first,
                "campaigning where no live leader was heard for an election timeout"
            );
        }
    }

    /// Shard 0 keeps `roster`'s leader current.
    pub fn with_roster(mut self, roster: Arc<node::ClusterRoster>) -> Self {
        self.roster = Some(roster);
        self
    }

    /// Shard 0 tells `on_membership` each membership the metadata group
    /// applies.
    pub fn with_membership(mut self, on_membership: metadata::MembershipApplied) -> Self {
        self.on_membership = Some(on_membership);
        self
    }

    /// Keeps `value` until this shard's cluster layer is dropped (when the
    /// shard stops).
    pub fn keep_until_stopped(&self, value: impl std::any::Any) {
        self.kept.borrow_mut().push(Box::new(value));
    }

    /// This shard's group on `channel`, when it has started.
    pub fn raft(&self, channel: u64) -> Option<Rc<GroupRaft>> {
        self.groups
            .borrow()
            .get(&channel)
            .and_then(|group| group.raft())
    }

    /// The metadata group (shard 0), when it has started.
    pub fn metadata(&self) -> Option<Rc<MetadataGroup>> {
        self.metadata.borrow().clone()
    }

    fn start_metadata_group(&self, queue: RaftQueue) -> Rc<dyn Group> {
        let settings = self.settings.clone();
        let store = match &self.metadata_store {
            Some(store) => store.clone(),
            None => {
                tracing::error!("the metadata log opened on a shard without the store");
                Rc::new(metadata::NoStore)
            }
        };
        let backend = PumpBackend::new(METADATA_KEY, queue.clone());
        let mut group = MetadataGroup::new(settings.clone(), store, backend);
        if let Some(on_membership) = &self.on_membership {
            group = group.with_membership(on_membership.clone());
        }
        let group = Rc::new(group);
        *self.metadata.borrow_mut() = Some(group.clone());
        let network = Network::new(self.transport.clone(), METADATA_CHANNEL);
        let store = BackendLogStore::new(PumpBackend::new(METADATA_KEY, queue));
        let starting = group.clone();
        let roster = self.roster.clone();
        monoio::spawn(async move {
            let machine = match starting.open_machine().await {
                Ok(machine) => machine,
                Err(error) => {
                    tracing::error!(%error, "the metadata group did not start");
                    return;
                }
            };
            let voters = (!settings.join).then(|| settings.voters.clone());
            let config = settings.raft.clone();
            if let Some(raft) = start_raft(
                &settings,
                config,
                voters,
                network,
                store,
                machine,
                "the metadata group",
            )
            .await
            {
                let raft = Rc::new(raft);
                starting.started(raft.clone());
                if let Some(roster) = roster {
                    follow_leader(&raft, &roster).await;
                }
            }
        });
        group
    }
}

/// Keeps `roster`'s leader that of the metadata group's, and when this
/// node leads, when a quorum last acknowledged it, until the group stops.
async fn follow_leader(raft: &metadata::MetadataRaft, roster: &node::ClusterRoster) {
    use openraft::async_runtime::WatchReceiver;
    let mut metrics = raft.metrics();
    loop {
        let (leader, quorum) = {
            let metrics = metrics.borrow_watched();
            // A restarted node remembers voting for itself: it leads only
            // once it has won an election again.
            let leader = match metrics.current_leader {
                Some(leader) if leader == metrics.id && !metrics.state.is_leader() => None,
                leader => leader,
            };
            (leader, quorum_acked(&metrics))
        };
        if roster.leader() != leader {
            tracing::info!(leader = ?leader, "the metadata group's leader");
        }
        roster.set_quorum_acked(quorum);
        roster.set_leader(leader);
        if metrics.changed().await.is_err() {
            roster.set_leader(None);
            return;
        }
    }
}

/// When a quorum of a group's voters last acknowledged this node as their
/// leader, as far as its metrics say (`QuorumAcked::Always` for a group of
/// one voter: it is its own quorum).
pub fn quorum_acked(metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>) -> QuorumAcked {
    use openraft::async_runtime::Instant;
    if metrics.membership_config.voter_ids().count() <= 1 {
        return QuorumAcked::Always;
    }
    match &metrics.last_quorum_acked {
        Some(acked) => QuorumAcked::Ago(acked.elapsed()),
        None => QuorumAcked::Never,
    }
}

/// See [`quorum_acked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumAcked {
    Always,
    Never,
    Ago(std::time::Duration),
}

/// Whether a group's leader still holds its lease: a quorum acknowledged
/// it within `lease` (an election timeout, before which no other member
/// campaigns). A leader cut off from its quorum keeps believing it leads
/// (openraft has no step-down on quorum loss), so clients must not be kept
/// waiting on it.
pub fn lease_holds(
    raft: &openraft::Raft<
        iggyd_raft::PartitionRaft,
        impl openraft::storage::RaftStateMachine<iggyd_raft::PartitionRaft>,
    >,
) -> bool {
    use openraft::async_runtime::WatchReceiver;
    let lease = std::time::Duration::from_millis(raft.config().election_timeout_max);
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    match quorum_acked(&metrics) {
        QuorumAcked::Always => true,
        QuorumAcked::Never => false,
        QuorumAcked::Ago(ago) => ago <= lease,
    }
}

/// Starts an openraft group and, given `voters` (not when this node joins
/// an existing cluster, nor for a partition learned from a metadata
/// snapshot), initializes it with them when it never was (another
/// node's initialization reaching it first is the same outcome: every
/// node initializes a group with the same voters, the configured ones for
/// the metadata group, those of the metadata log's membership where the
/// partition was created for a partition's). A group that was initialized
/// comes back with the membership its log holds.
async fn start_raft<T: Transport, SM>(
    settings: &ClusterSettings,
    config: Arc<openraft::Config>,
    voters: Option<BTreeMap<u64, BasicNode>>,
    network: Network<T>,
    store: BackendLogStore<PumpBackend>,
    machine: SM,
    what: &str,
) -> Option<openraft::Raft<iggyd_raft::PartitionRaft, SM>>
where
    SM: openraft::storage::RaftStateMachine<
            iggyd_raft::PartitionRaft,
            SnapshotData = std::io::Cursor<Vec<u8>>,
        >,
{
    let raft = match openraft::Raft::new(settings.node_id, config, network, store, machine).await {
        Ok(raft) => raft,
        Err(error) => {
            tracing::error!(group = what, %error, "a group did not start");
            return None;
        }
    };
    if let Some(voters) = voters {
        match raft.is_initialized().await {
            Ok(true) => {}
            Ok(false) => match raft.initialize(voters).await {
                Ok(())
                | Err(openraft::errors::RaftError::APIError(
                    openraft::errors::InitializeError::NotAllowed(_),
                )) => {}
                Err(error) => {
                    tracing::error!(group = what, %error, "a group did not initialize");
                }
            },
            Err(error) => {
                tracing::error!(group = what, %error, "a group stopped");
                return None;
            }
        }
    }
    Some(raft)
}

impl<T: Transport> Replication for ShardCluster<T> {
    fn replicates(&self, _key: &PartitionKey) -> bool {
        true
    }

    fn start_group(
        &self,
        key: PartitionKey,
        queue: RaftQueue,
        first_offset: u64,
        snapshot: Option<iggyd_storage::raft::PurgePoint>,
    ) -> Rc<dyn Group> {
        if key == METADATA_KEY {
            return self.start_metadata_group(queue);
        }
        let settings = self.settings.clone();
        let network = Network::new(self.transport.clone(), key.storage_id);
        let forwarding = network.clone();
        let forwarded = self.counters.forwarded.clone();
        let liveness = settings.liveness.clone();
        let timing = quiet::Timing::of(&settings.raft);
        let forward: group::Forward = Rc::new(move |leader, proposal, resolve_after| {
            let network = forwarding.clone();
            let liveness = liveness.clone();
            forwarded
                .messages
                .set(forwarded.messages.get().saturating_add(1));
            Box::pin(async move {
                let call = network.forward(leader, proposal, resolve_after, group::FORWARD_TIMEOUT);
                liveness::unless_silent(call, &liveness, leader, timing).await
            })
        });
        let roster = self.roster.clone();
        let cut_off: group::CutOff =
            Rc::new(move || roster.as_ref().is_some_and(|roster| roster.cut_off()));
        let forwarding = network.clone();
        let forwarded = self.counters.forwarded.clone();
        let liveness = settings.liveness.clone();
        let forward_entry: group::ForwardEntry = Rc::new(move |leader, entry| {
            let network = forwarding.clone();
            let liveness = liveness.clone();
            if matches!(entry, ControlEntry::Offsets(_)) {
                forwarded
                    .offsets
                    .set(forwarded.offsets.get().saturating_add(1));
            }
            Box::pin(async move {
                let call = async {
                    match entry {
                        ControlEntry::Offsets(payload) => {
                            network
                                .forward_offsets(leader, &payload, group::FORWARD_TIMEOUT)
                                .await
                        }
                        ControlEntry::Purge(below) => {
                            network
                                .forward_purge(leader, below, group::FORWARD_TIMEOUT)
                                .await
                        }
                    }
                };
                liveness::unless_silent(call, &liveness, leader, timing).await
            })
        });
        let lease = quiet::Lease {
            liveness: settings.liveness.clone(),
            timing: quiet::Timing::of(&settings.raft),
        };
        // One member of each new group campaigns first (`quiet.rs`).
        let voters: Vec<u64> = settings.new_group_voters().into_keys().collect();
        let preferred = usize::try_from(key.storage_id % voters.len().max(1) as u64)
            .ok()
            .and_then(|at| voters.get(at))
            == Some(&settings.node_id);
        let group = Rc::new(PartitionGroup::new(
            key,
            settings.node_id,
            first_offset,
            forward,
            forward_entry,
            cut_off,
            lease,
        ));
        // Applied offsets entries go to the pump's offsets store, applied
        // purges to its retention.
        let notify_queue = queue.clone();
        group.applied().set_offsets_notify(Box::new(move || {
            notify_queue.push(key, RaftOp::OffsetsApplied);
        }));
        // A snapshot being sent carries the pump's offsets store.
        let source = PumpBackend::new(key, queue.clone());
        group.applied().set_offsets_source(Box::new(move || {
            let source = source.clone();
            Box::pin(async move { source.stored_offsets().await })
        }));
        self.groups
            .borrow_mut()
            .insert(key.storage_id, group.clone());
        let store = BackendLogStore::new(PumpBackend::new(key, queue));
        // A transfer this group asks is asked again until it ends (`quiet.rs`).
        let handing = Rc::downgrade(&group);
        let network = network.handing(Rc::new(move |to| {
            if let Some(group) = handing.upgrade() {
                group.quiet().handing(to, std::time::Instant::now());
            }
        }));
        let starting = group.clone();
        // Read now, as the shard opens the partition for the view that
        // created it (see `node.rs` `follow_membership`).
        let voters = settings
            .initializes(key.storage_id)
            .then(|| settings.new_group_voters());
        let config = self.quiet_raft.clone();
        monoio::spawn(async move {
            let machine = StateMachine::at_purge_point(starting.applied(), snapshot.as_ref());
            let what = key.to_string();
            let initialize = voters.is_some();
            if let Some(raft) =
                start_raft(&settings, config, voters, network, store, machine, &what).await
            {
                // A group that never had a term is new on every member
                // (one this node did not initialize waits for its leader).
                if initialize && quiet::with_metrics(&raft, |metrics| metrics.current_term == 0) {
                    starting
                        .quiet()
                        .first_campaign(preferred, starting.lease().timing);
                }
                starting.started(Rc::new(raft));
            }
        });
        group
    }

    fn deliver(&self, channel: u64, body: Vec<u8>, reply: flume::Sender<Vec<u8>>) {
        if channel == liveness::BEAT_CHANNEL {
            let _ = reply.send(liveness::beat_answer());
            return;
        }
        if channel == METADATA_CHANNEL {
            let Some(raft) = self.metadata().and_then(|group| group.raft()) else {
                let _ = reply.send(no_such_group(channel));
                return;
            };
            monoio::spawn(async move {
                let answer = serve(&raft, None, body.into()).await;
                let _ = reply.send(answer);
            });
            return;
        }
        let group = self.groups.borrow().get(&channel).cloned();
        let Some((raft, group)) = group.and_then(|group| Some((group.raft()?, group))) else {
            let _ = reply.send(no_such_group(channel));
            return;
        };
        monoio::spawn(async move {
            let applied = group.applied();
            let lease = group.lease();
            // A proposal forwarded to this leader appends only with
            // openraft's lease fresh (renewed at once when it is). Not
            // while it hands over: openraft sends no heartbeat then, and
            // the renewal would hold every call (a vote too) a lease long.
            if !group.quiet().hands_over() {
                lease.renew(&raft).await;
            }
            // A quiet group's votes: refused while its leader is alive.
            let guard = |candidate: u64| {
                let (reason, heartbeat) = quiet::with_metrics(&raft, |metrics| {
                    group
                        .quiet()
                        .refuse_vote(metrics, &lease.liveness, lease.timing, candidate)
                })?;
                tracing::debug!(candidate, %reason, "a vote refused");
                if heartbeat {
                    let raft = raft.clone();
                    monoio::spawn(async move {
                        let _ = raft.trigger().heartbeat().await;
                    });
                }
                Some(reason)
            };
            let asked = |leader: u64, term: u64| {
                group.quiet().asked(leader, term, std::time::Instant::now());
            };
            let answer = serve_guarded(
                &raft,
                Some(&applied.replays),
                Some(&guard),
                Some(&asked),
                body.into(),
            )
            .await;
            let _ = reply.send(answer);
        });
    }

    fn propose_metadata(
        &self,
        command: iggyd_metadata::MetadataCommand,
    ) -> Option<metadata::LocalFuture<metadata::MetadataOutcome>> {
        let group = self.metadata()?;
        Some(group.propose(command))
    }

    fn group_status(&self, shard: u32) -> Vec<iggyd_admin_api::cluster::GroupStatus> {
        self.status(shard)
    }

    fn transfer_leader(&self, channel: u64, to: u64, reply: flume::Sender<Result<(), String>>) {
        ShardCluster::transfer_leader(self, channel, to, reply);
    }

    fn counters(&self) -> ReplicationCounters {
        ShardCluster::counters(self)
    }

    fn change_members(
        &self,
        channel: u64,
        change: iggyd_raft::network::ForwardedChange,
        reply: flume::Sender<admin::ChangeAnswer>,
    ) {
        ShardCluster::change_members(self, channel, change, reply);
    }
}
