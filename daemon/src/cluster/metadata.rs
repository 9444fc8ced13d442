//! The metadata group of a cluster node, on shard 0: streams, topics,
//! partitions, users, tokens and consumer groups are changed by proposing
//! the prepared `MetadataCommand` to it; every node applies each committed
//! command, in log order, to its own store (shard 0's), so every node has
//! the same metadata. Its log is a hidden partition on shard 0's pump
//! (`METADATA_KEY`, `<data_dir>/cluster/metadata`): each entry a record of
//! one message holding the command.
//!
//! A node's store lives in memory. Every `cluster.metadata_snapshot_entries`
//! entries the group takes a snapshot: the store exported, kept durably
//! beside the log (`iggyd_storage::raft::machine`), and openraft purges the
//! entries it covers (the pump deletes the segments they named). A start
//! installs the kept snapshot into the store, then applies the entries
//! after it; a follower behind the leader's purge is sent the snapshot and
//! installs it the same way (its store replaced, the view published,
//! partitions opened and removed as the view lists them). The proposer hears the outcome
//! of its own command from the state machine (the store's answer as
//! applied here), so a rejection ("already exists") reaches the client as
//! on a single node.
//!
//! Must not: apply a command anywhere but through the state machine (a
//! leader's store changes when the command is committed, like everyone
//! else's), or wait for shard 0's loop from inside it except for the
//! apply itself (the loop never waits for this group), or let openraft
//! purge an entry before a snapshot covering it is durable.

use super::ClusterSettings;
use super::backend::PumpBackend;
use crate::shard::op::{AppendAck, PumpError, Reply, answer};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, Leadership, SnapshotPoint};
use futures_util::TryStreamExt;
use iggyd_metadata::{Applied, ExportedStore, MetadataCommand, MetadataView};
use iggyd_raft::{Appended, LogId, PartitionRaft, Proposal};
use iggyd_wire::batch::{BatchHeader, MessageSpec, encode_producer_batch, frames};
use iggyd_wire::protocol::codes::Status;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::async_runtime::WatchReceiver;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::io::Cursor;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

/// The metadata group's channel on node-to-node calls.
pub const METADATA_CHANNEL: u64 = crate::shard::replica::METADATA_STORAGE_ID;

/// The hidden partition that holds the metadata group's log, on shard 0.
pub const METADATA_KEY: PartitionKey = crate::shard::replica::METADATA_KEY;

/// What a metadata change came to: what was applied and the view with it,
/// or the status of its rejection.
pub type MetadataOutcome = Result<(Applied, Arc<MetadataView>), Status>;

/// A future on this shard's thread.
pub type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// This node's metadata store as the metadata group's state machine
/// reaches it (shard 0's loop, in the daemon): every call is answered there,
/// in the order the machine makes them.
pub trait StoreAccess {
    /// Executes a committed command.
    fn apply(&self, command: MetadataCommand) -> LocalFuture<MetadataOutcome>;
    /// The whole store, as its snapshot's bytes.
    fn export(&self) -> LocalFuture<Result<ExportedStore, String>>;
    /// Replaces the whole store with a snapshot's bytes (checked whole
    /// first: bytes that do not check change nothing) and publishes its
    /// view, as a committed command's is.
    fn replace(&self, store: Vec<u8>) -> LocalFuture<Result<(), String>>;
}

/// This node's store, shared by the metadata group's state machine.
pub type SharedStore = Rc<dyn StoreAccess>;

/// What a shard without the store has (a daemon's metadata log is always
/// shard 0's, which has it): every call is refused.
pub struct NoStore;

impl StoreAccess for NoStore {
    fn apply(&self, _command: MetadataCommand) -> LocalFuture<MetadataOutcome> {
        Box::pin(async { Err(Status::Error) })
    }

    fn export(&self) -> LocalFuture<Result<ExportedStore, String>> {
        Box::pin(async { Err("this shard has no metadata store".to_string()) })
    }

    fn replace(&self, _store: Vec<u8>) -> LocalFuture<Result<(), String>> {
        Box::pin(async { Err("this shard has no metadata store".to_string()) })
    }
}

/// A command as its log entry: a record of one message holding it.
pub fn encode_command(command: &MetadataCommand) -> Result<Vec<u8>, String> {
    let payload = postcard::to_allocvec(command).map_err(|error| error.to_string())?;
    Ok(encode_producer_batch(
        0,
        &[MessageSpec {
            id: 1,
            timestamp_delta: 0,
            payload,
            user_headers: Vec::new(),
        }],
    ))
}

/// The commands of a log entry's record.
pub fn decode_commands(record: &[u8]) -> Result<Vec<MetadataCommand>, String> {
    let mut commands = Vec::new();
    for frame in frames(record).map_err(|error| error.to_string())? {
        let frame = frame.map_err(|error| error.to_string())?;
        let payload = record
            .get(frame.payload.clone())
            .ok_or_else(|| "a frame outside its record".to_string())?;
        commands.push(postcard::from_bytes(payload).map_err(|error| error.to_string())?);
    }
    Ok(commands)
}

/// Told each membership the metadata group applies, in log order (the
/// cluster's nodes follow it: the roster clients see, the peers this node
/// dials, the voters new partition groups start with). The machine waits
/// for it before applying the next entry.
pub type MembershipApplied = Rc<dyn Fn(iggyd_raft::Membership) -> LocalFuture<()>>;

/// Outcomes of the commands this node proposed, by log index, until their
/// proposer takes them.
type Outcomes = Rc<RefCell<HashMap<u64, MetadataOutcome>>>;

/// A snapshot's data, as a follower is sent it: the store and where the
/// log's messages end at its entry (a follower whose log it passes starts
/// its log again there).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct SnapshotData {
    next_offset: u64,
    /// The storage id the store's next partition gets: the partitions
    /// below it were created by the entries the snapshot covers.
    next_storage_id: u64,
    store: Vec<u8>,
}

/// The current snapshot as kept beside the log
/// (`iggyd_storage::raft::machine`): its metadata and its data.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct KeptSnapshot {
    meta: SnapshotMetaOf<PartitionRaft>,
    data: Vec<u8>,
}

/// What the metadata group's snapshots share between its state machine,
/// the group and the pump: where they are kept, and the last one
/// installed (from a leader, or this node's own at start).
struct Snapshots {
    backend: PumpBackend,
    current: RefCell<Option<KeptSnapshot>>,
    installed: RefCell<Option<(SnapshotPoint, Vec<u8>)>>,
    /// Told, by each snapshot installed, the storage ids below which
    /// partitions were created before it (`ClusterSettings::adopt_below`),
    /// and how often to take one.
    settings: Arc<ClusterSettings>,
}

/// The metadata group's state machine: each committed command applied to
/// this node's store.
pub struct MetadataMachine {
    store: SharedStore,
    on_membership: Option<MembershipApplied>,
    outcomes: Outcomes,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<PartitionRaft>,
    /// One past the last message of the entries applied (each command's
    /// record is one message).
    next_offset: u64,
    snapshots: Rc<Snapshots>,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl MetadataMachine {
    /// A machine that applied nothing, whose current snapshot is the one
    /// kept beside the log, if any (openraft installs it first at start).
    async fn open(
        store: SharedStore,
        on_membership: Option<MembershipApplied>,
        outcomes: Outcomes,
        snapshots: Rc<Snapshots>,
    ) -> Result<MetadataMachine, String> {
        let kept = match snapshots.backend.machine_snapshot().await? {
            Some(bytes) => Some(
                postcard::from_bytes::<KeptSnapshot>(&bytes)
                    .map_err(|error| format!("the metadata group's snapshot: {error}"))?,
            ),
            None => None,
        };
        *snapshots.current.borrow_mut() = kept;
        Ok(MetadataMachine {
            store,
            on_membership,
            outcomes,
            last_applied: None,
            membership: StoredMembershipOf::<PartitionRaft>::default(),
            next_offset: 0,
            snapshots,
        })
    }

    /// The snapshot of everything applied: the store exported now (the
    /// machine applies nothing meanwhile), kept durably beside the log
    /// before openraft may purge the entries it covers.
    async fn snapshot_now(&mut self) -> Result<SnapshotOf<PartitionRaft, Cursor<Vec<u8>>>, String> {
        if let Some(current) = self.snapshots.current.borrow().as_ref()
            && current.meta.last_log_id == self.last_applied
        {
            return Ok(SnapshotOf::<PartitionRaft, Cursor<Vec<u8>>> {
                meta: current.meta.clone(),
                snapshot: Cursor::new(current.data.clone()),
            });
        }
        let exported = self.store.export().await?;
        let data = postcard::to_allocvec(&SnapshotData {
            next_offset: self.next_offset,
            next_storage_id: exported.next_storage_id,
            store: exported.bytes,
        })
        .map_err(|error| error.to_string())?;
        let last = self.last_applied;
        let meta = SnapshotMetaOf::<PartitionRaft> {
            last_log_id: last,
            last_membership: self.membership.clone(),
        };
        let kept = KeptSnapshot { meta, data };
        let bytes = postcard::to_allocvec(&kept).map_err(|error| error.to_string())?;
        self.snapshots.backend.save_machine_snapshot(bytes).await?;
        tracing::info!(
            entry = last.map_or(0, |last| last.index),
            bytes = kept.data.len(),
            "the metadata group kept a snapshot; the entries it covers may be purged"
        );
        let snapshot = SnapshotOf::<PartitionRaft, Cursor<Vec<u8>>> {
            meta: kept.meta.clone(),
            snapshot: Cursor::new(kept.data.clone()),
        };
        *self.snapshots.current.borrow_mut() = Some(kept);
        Ok(snapshot)
    }
}

/// A snapshot already taken when openraft asked for a builder (taking it
/// then keeps it consistent: the machine applies nothing meanwhile, and
/// snapshots are kept in the order they are taken).
pub struct MetadataSnapshot(Result<SnapshotOf<PartitionRaft, Cursor<Vec<u8>>>, String>);

impl RaftSnapshotBuilder<PartitionRaft> for MetadataSnapshot {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<PartitionRaft, Cursor<Vec<u8>>>, io::Error> {
        match &self.0 {
            Ok(snapshot) => Ok(SnapshotOf::<PartitionRaft, Cursor<Vec<u8>>> {
                meta: snapshot.meta.clone(),
                snapshot: Cursor::new(snapshot.snapshot.get_ref().clone()),
            }),
            Err(error) => Err(io::Error::other(format!(
                "the metadata group's snapshot: {error}"
            ))),
        }
    }
}

impl RaftStateMachine<PartitionRaft> for MetadataMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = MetadataSnapshot;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembershipOf<PartitionRaft>), io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<PartitionRaft>, io::Error>> + Unpin,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let index = entry.log_id.index;
            self.last_applied = Some(entry.log_id);
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Proposal::Batch(record)) => {
                    let header = BatchHeader::decode(record)
                        .map_err(|error| invalid(format!("metadata entry {index}: {error}")))?;
                    self.next_offset = header.base_offset + u64::from(header.message_count);
                    let commands = decode_commands(record)
                        .map_err(|error| invalid(format!("metadata entry {index}: {error}")))?;
                    let mut outcome = Err(Status::Error);
                    for command in commands {
                        outcome = self.store.apply(command).await;
                    }
                    if responder.is_some() {
                        self.outcomes.borrow_mut().insert(index, outcome);
                    }
                }
                EntryPayload::Normal(Proposal::Offsets(_) | Proposal::Purge(_)) => {
                    return Err(invalid(format!(
                        "metadata entry {index}: a partition's entry"
                    )));
                }
                EntryPayload::Membership(membership) => {
                    if let Some(on_membership) = &self.on_membership {
                        on_membership(membership.clone()).await;
                    }
                    self.membership = StoredMembershipOf::<PartitionRaft>::new(
                        Some(entry.log_id),
                        membership.clone(),
                    );
                }
            }
            if let Some(responder) = responder {
                responder.send(Appended::default());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        MetadataSnapshot(self.snapshot_now().await)
    }

    /// A leader's snapshot, or this node's own at start: the store is
    /// replaced by it (and its view published, partitions opened and
    /// removed as it lists them), the membership followed, and the
    /// snapshot kept beside the log before openraft purges the entries it
    /// covers.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<PartitionRaft>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let bytes = snapshot.into_inner();
        let data: SnapshotData = postcard::from_bytes(&bytes)
            .map_err(|error| invalid(format!("the metadata group's snapshot: {error}")))?;
        let kept_already = self
            .snapshots
            .current
            .borrow()
            .as_ref()
            .is_some_and(|current| current.meta == *meta && current.data == bytes);
        self.snapshots.settings.adopt_below(data.next_storage_id);
        self.store
            .replace(data.store)
            .await
            .map_err(|error| invalid(format!("the metadata group's snapshot: {error}")))?;
        let kept = KeptSnapshot {
            meta: meta.clone(),
            data: bytes,
        };
        if !kept_already {
            let encoded = postcard::to_allocvec(&kept).map_err(io::Error::other)?;
            self.snapshots
                .backend
                .save_machine_snapshot(encoded)
                .await
                .map_err(io::Error::other)?;
        }
        let membership = meta.last_membership.membership().clone();
        if let Some(on_membership) = &self.on_membership {
            on_membership(membership.clone()).await;
        }
        let (index, term) = meta
            .last_log_id
            .map_or((0, 0), |last| (last.index, last.leader_id.term));
        *self.snapshots.installed.borrow_mut() = Some((
            SnapshotPoint {
                index,
                term,
                next_offset: data.next_offset,
            },
            iggyd_raft::codec::encode_membership(&membership),
        ));
        tracing::info!(
            entry = index,
            from_leader = !kept_already,
            "the metadata group installed a snapshot"
        );
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.next_offset = data.next_offset;
        *self.snapshots.current.borrow_mut() = Some(kept);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<PartitionRaft, Self::SnapshotData>>, io::Error> {
        Ok(self
            .snapshots
            .current
            .borrow()
            .as_ref()
            .map(|current| SnapshotOf::<PartitionRaft, Cursor<Vec<u8>>> {
                meta: current.meta.clone(),
                snapshot: Cursor::new(current.data.clone()),
            }))
    }
}

/// The metadata group's openraft group.
pub type MetadataRaft = openraft::Raft<PartitionRaft, MetadataMachine>;

/// The metadata group as shard 0 holds it.
pub struct MetadataGroup {
    raft: RefCell<Option<Rc<MetadataRaft>>>,
    outcomes: Outcomes,
    store: SharedStore,
    on_membership: Option<MembershipApplied>,
    snapshots: Rc<Snapshots>,
    stopped: Cell<bool>,
}

impl MetadataGroup {
    /// The group of the store `store`, whose log (and snapshot) `backend`
    /// reaches, on the node `settings` describe.
    pub fn new(
        settings: Arc<ClusterSettings>,
        store: SharedStore,
        backend: PumpBackend,
    ) -> MetadataGroup {
        MetadataGroup {
            raft: RefCell::new(None),
            outcomes: Rc::new(RefCell::new(HashMap::new())),
            store,
            on_membership: None,
            snapshots: Rc::new(Snapshots {
                backend,
                current: RefCell::new(None),
                installed: RefCell::new(None),
                settings,
            }),
            stopped: Cell::new(false),
        }
    }

    /// `on_membership` hears every membership the group applies.
    pub fn with_membership(mut self, on_membership: MembershipApplied) -> MetadataGroup {
        self.on_membership = Some(on_membership);
        self
    }

    /// The state machine the group starts with: its current snapshot the
    /// one kept beside the log (openraft installs it first, then applies
    /// the entries after it).
    pub async fn open_machine(&self) -> Result<MetadataMachine, String> {
        MetadataMachine::open(
            self.store.clone(),
            self.on_membership.clone(),
            self.outcomes.clone(),
            self.snapshots.clone(),
        )
        .await
    }

    pub fn started(&self, raft: Rc<MetadataRaft>) {
        if self.stopped.get() {
            monoio::spawn(async move {
                let _ = raft.shutdown().await;
            });
            return;
        }
        let every = self.snapshots.settings.metadata_snapshot_every.max(1);
        monoio::spawn(keep_snapshots(raft.clone(), every));
        *self.raft.borrow_mut() = Some(raft);
    }

    pub fn raft(&self) -> Option<Rc<MetadataRaft>> {
        self.raft.borrow().clone()
    }

    /// The node that leads the metadata group, if one is known.
    pub fn leader(&self) -> Option<u64> {
        let raft = self.raft()?;
        let metrics = raft.metrics();
        metrics.borrow_watched().current_leader
    }

    /// Proposes `command`; resolves with its outcome as applied on this
    /// node once committed. Refused with 58 (TransientNotAccepted: the
    /// client finds the leader) when this node does not lead, and with 57
    /// (TransientNotCommitted) when leadership moved while it was out.
    pub fn propose(&self, command: MetadataCommand) -> LocalFuture<MetadataOutcome> {
        let raft = self.raft();
        let outcomes = self.outcomes.clone();
        Box::pin(async move {
            let Some(raft) = raft else {
                return Err(Status::TransientNotAccepted);
            };
            if !raft.is_leader() {
                return Err(Status::TransientNotAccepted);
            }
            let record = encode_command(&command).map_err(|error| {
                tracing::error!(%error, "a metadata command that does not encode");
                Status::Error
            })?;
            match raft.client_write(Proposal::Batch(record.into())).await {
                Ok(written) => outcomes
                    .borrow_mut()
                    .remove(&written.log_id.index)
                    .unwrap_or(Err(Status::Error)),
                Err(openraft::errors::RaftError::APIError(
                    openraft::errors::ClientWriteError::ForwardToLeader(_),
                )) => Err(Status::TransientNotAccepted),
                Err(error) => {
                    tracing::warn!(%error, "a metadata change did not commit");
                    Err(Status::TransientNotCommitted)
                }
            }
        })
    }
}

impl Group for MetadataGroup {
    fn propose(&self, _batch: Vec<u8>, reply: Reply<AppendAck>) {
        answer(
            reply,
            Err(PumpError::NotReplicated {
                what: "appending to the metadata log",
            }),
        );
    }

    fn leadership(&self) -> Leadership {
        match self.leader() {
            Some(leader) if leader == self.snapshots.settings.node_id => Leadership::Here,
            Some(leader) => Leadership::Elsewhere(leader),
            None => Leadership::Unknown,
        }
    }

    fn committed_end(&self) -> u64 {
        0
    }

    /// No one reads the metadata log's messages: every sealed segment
    /// whose entries are purged (a snapshot covers them) may go.
    fn floor(&self) -> u64 {
        u64::MAX
    }

    fn installed(&self) -> Option<(SnapshotPoint, Vec<u8>)> {
        self.snapshots.installed.borrow().clone()
    }

    fn stop(&self) {
        self.stopped.set(true);
        if let Some(raft) = self.raft.borrow_mut().take() {
            monoio::spawn(async move {
                let _ = raft.shutdown().await;
            });
        }
    }
}

/// Asks `raft` for a snapshot whenever `every` entries were applied after
/// the last one (openraft then purges the entries it covers, and the pump
/// deletes the segments they named), until the group stops.
async fn keep_snapshots(raft: Rc<MetadataRaft>, every: u64) {
    let mut metrics = raft.metrics();
    let mut asked = 0;
    loop {
        let (applied, snapshot) = {
            let metrics = metrics.borrow_watched();
            (
                metrics.last_applied.map_or(0, |last| last.index),
                metrics.snapshot.map_or(0, |last| last.index),
            )
        };
        if applied >= snapshot.max(asked).saturating_add(every) {
            asked = applied;
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a command survives its trip through a log entry: encoded as a
    // record of one message and decoded back the same, and a record that
    // is not one is refused, not panicked on.
    #[test]
    fn commands_round_trip_through_a_record() {
        let command = MetadataCommand::CreateStream {
            name: "orders".to_string(),
            created_at_us: 1_700_000_000_000_000,
        };
        let record = encode_command(&command).unwrap();
        assert_eq!(decode_commands(&record).unwrap(), vec![command.clone()]);
        assert!(decode_commands(&record[..10]).is_err());
        let mut damaged = record.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        assert_ne!(decode_commands(&damaged), Ok(vec![command]));
    }
}
