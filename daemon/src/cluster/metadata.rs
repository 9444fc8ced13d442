//! The metadata group of a cluster node, on shard 0: streams, topics,
//! partitions, users, tokens and consumer groups are changed by proposing
//! the prepared `MetadataCommand` to it; every node applies each committed
//! command, in log order, to its own store (shard 0's), so every node has
//! the same metadata. Its log is a hidden partition on shard 0's pump
//! (`METADATA_KEY`, `<data_dir>/cluster/metadata`): each entry a record of
//! one message holding the command.
//!
//! A node's store lives in memory and is rebuilt from this log at every
//! start (the log is the durable record). The proposer hears the outcome
//! of its own command from the state machine (the store's answer as
//! applied here), so a rejection ("already exists") reaches the client as
//! on a single node.
//!
//! Must not: apply a command anywhere but through the state machine (a
//! leader's store changes when the command is committed, like everyone
//! else's), or wait for shard 0's loop from inside it except for the
//! apply itself (the loop never waits for this group).

use crate::shard::op::{AppendAck, PumpError, Reply, answer};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, Leadership};
use futures_util::TryStreamExt;
use iggyd_metadata::{Applied, MetadataCommand, MetadataView};
use iggyd_raft::{Appended, LogId, PartitionRaft, Proposal};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch, frames};
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

/// Executes a committed command on this node's store (shard 0's loop).
pub type ApplyMetadata = Rc<dyn Fn(MetadataCommand) -> LocalFuture<MetadataOutcome>>;

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

/// The metadata group's state machine: each committed command applied to
/// this node's store.
pub struct MetadataMachine {
    apply: ApplyMetadata,
    on_membership: Option<MembershipApplied>,
    outcomes: Outcomes,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<PartitionRaft>,
}

impl MetadataMachine {
    fn new(
        apply: ApplyMetadata,
        on_membership: Option<MembershipApplied>,
        outcomes: Outcomes,
    ) -> MetadataMachine {
        MetadataMachine {
            apply,
            on_membership,
            outcomes,
            last_applied: None,
            membership: StoredMembershipOf::<PartitionRaft>::default(),
        }
    }
}

/// The metadata group builds no snapshots yet (its policy is `Never`; the
/// log is kept whole and replayed at start).
pub struct NoSnapshots;

impl RaftSnapshotBuilder<PartitionRaft> for NoSnapshots {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<PartitionRaft, Cursor<Vec<u8>>>, io::Error> {
        Err(io::Error::other(
            "the metadata group does not build snapshots yet",
        ))
    }
}

impl RaftStateMachine<PartitionRaft> for MetadataMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = NoSnapshots;

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
                    let commands = decode_commands(record).map_err(|error| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("metadata entry {index}: {error}"),
                        )
                    })?;
                    let mut outcome = Err(Status::Error);
                    for command in commands {
                        outcome = (self.apply)(command).await;
                    }
                    if responder.is_some() {
                        self.outcomes.borrow_mut().insert(index, outcome);
                    }
                }
                EntryPayload::Normal(Proposal::Offsets(_) | Proposal::Purge(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("metadata entry {index}: a partition's entry"),
                    ));
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
        NoSnapshots
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMetaOf<PartitionRaft>,
        _snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        Err(io::Error::other(
            "the metadata group does not install snapshots yet",
        ))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<PartitionRaft, Self::SnapshotData>>, io::Error> {
        Ok(None)
    }
}

/// The metadata group's openraft group.
pub type MetadataRaft = openraft::Raft<PartitionRaft, MetadataMachine>;

/// The metadata group as shard 0 holds it.
pub struct MetadataGroup {
    node_id: u64,
    raft: RefCell<Option<Rc<MetadataRaft>>>,
    outcomes: Outcomes,
    apply: ApplyMetadata,
    on_membership: Option<MembershipApplied>,
    stopped: Cell<bool>,
}

impl MetadataGroup {
    pub fn new(node_id: u64, apply: ApplyMetadata) -> MetadataGroup {
        MetadataGroup {
            node_id,
            raft: RefCell::new(None),
            outcomes: Rc::new(RefCell::new(HashMap::new())),
            apply,
            on_membership: None,
            stopped: Cell::new(false),
        }
    }

    /// `on_membership` hears every membership the group applies.
    pub fn with_membership(mut self, on_membership: MembershipApplied) -> MetadataGroup {
        self.on_membership = Some(on_membership);
        self
    }

    /// The state machine the group starts with.
    pub fn machine(&self) -> MetadataMachine {
        MetadataMachine::new(
            self.apply.clone(),
            self.on_membership.clone(),
            self.outcomes.clone(),
        )
    }

    pub fn started(&self, raft: Rc<MetadataRaft>) {
        if self.stopped.get() {
            monoio::spawn(async move {
                let _ = raft.shutdown().await;
            });
            return;
        }
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
            Some(leader) if leader == self.node_id => Leadership::Here,
            Some(leader) => Leadership::Elsewhere(leader),
            None => Leadership::Unknown,
        }
    }

    fn committed_end(&self) -> u64 {
        0
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
