//! The seam between a shard and the replication above it (`cluster`), and
//! the queue through which a partition's Raft group reaches the pump.
//!
//! A replicated partition's pump keeps owning its segment log and its Raft
//! files (`iggyd_storage::raft::RaftFiles`); the partition's consensus group
//! (above the shard, on the same thread) never touches them: its log store
//! sends [`RaftOp`]s through the shard's [`RaftQueue`], which the shard loop
//! drains between inbox rounds, so a Raft append shares the commit phase
//! (coalesced writes, group-commit fsyncs) with every other partition of
//! the shard. The pump, in turn, hands a leader's stamped batches to the
//! group through [`Group::propose`] and never waits for the group: the
//! group waits for the pump (its log I/O), never the reverse, so the two
//! cannot deadlock.
//!
//! Defined here, implemented by `cluster`, handed to each shard by the
//! supervisor as a [`ReplicationStart`].
//!
//! Must not: know about the consensus library, the network or the wire
//! protocol beyond the batch record; hold partition state (the pump's).

use super::context::ShardContext;
use super::op::{AppendAck, PumpError, Reply};
use super::partition::PartitionKey;
pub use iggyd_storage::raft::{LogPosition, StoredBody, StoredEntry};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The storage id of the hidden partition that holds a cluster node's
/// metadata log (on shard 0, in `<data_dir>/cluster/metadata`).
pub const METADATA_STORAGE_ID: u64 = u64::MAX;

/// The metadata log's segments: small, so that those whose entries a
/// snapshot covers are deleted soon after (its records are a few hundred
/// bytes, a snapshot comes every thousand or so).
pub const METADATA_SEGMENT_BYTES: u64 = iggyd_metadata::limits::SEGMENT_SIZE_MIN_BYTES;

/// The hidden partition that holds a cluster node's metadata log.
pub const METADATA_KEY: PartitionKey = PartitionKey {
    stream: 0,
    topic: 0,
    partition: 0,
    storage_id: METADATA_STORAGE_ID,
};

/// Hears whether an offsets entry was committed (on the shard's thread).
pub type OffsetsDone = Box<dyn FnOnce(Result<(), PumpError>)>;

/// Offsets entries a group applied: `(index, writes)` in log order.
pub type AppliedOffsets = Vec<(u64, Vec<iggyd_raft::offsets::OffsetWrite>)>;

/// A reply to a group's task (on the shard's own thread).
pub type LocalReply<T> = Reply<T>;

/// Called once the entries of an append are as durable as the partition's
/// durability asks (written for `replicated`, fsynced for `persisted`), or
/// with why they never will be.
pub type Flushed = Box<dyn FnOnce(Result<(), String>)>;

/// What a group reads when it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftLogState {
    pub last: Option<LogPosition>,
    pub purged: Option<LogPosition>,
    pub committed: Option<LogPosition>,
    pub vote: Option<Vec<u8>>,
}

/// The Raft log operations of a replicated partition, from its group.
pub enum RaftOp {
    State {
        reply: LocalReply<RaftLogState>,
    },
    /// Appends entries (readable when answered); `flushed` runs once they
    /// are durable as the partition's durability asks. A leader's data
    /// entry gets its base offset where it joins the log; a follower's
    /// continues the log already.
    Append {
        entries: Vec<StoredEntry>,
        flushed: Flushed,
        reply: LocalReply<()>,
    },
    /// Drops every entry after `keep` (never a committed one).
    Truncate {
        keep: Option<u64>,
        reply: LocalReply<()>,
    },
    /// Entries through `through` are no longer needed by the group.
    Purge {
        through: LogPosition,
        reply: LocalReply<()>,
    },
    /// Durable before answered.
    SaveVote {
        vote: Vec<u8>,
        reply: LocalReply<()>,
    },
    SaveCommitted {
        committed: Option<LogPosition>,
        reply: LocalReply<()>,
    },
    /// The group applied offsets or purge entries: the pump takes them
    /// ([`Group::take_offsets`]) into the partition's offsets store and
    /// ([`Group::take_purges`]) to its retention.
    OffsetsApplied,
    /// The partition's offsets store, whole (for a snapshot being sent):
    /// the offsets entries applied are taken into it first.
    StoredOffsets {
        reply: LocalReply<iggyd_raft::state_machine::StoredOffsets>,
    },
    /// The group's state-machine snapshot (`iggyd_storage::raft::machine`),
    /// if one was saved.
    MachineSnapshot {
        reply: LocalReply<Option<Vec<u8>>>,
    },
    /// Durable before answered.
    SaveMachineSnapshot {
        bytes: Vec<u8>,
        reply: LocalReply<()>,
    },
    /// Entries `first..end` (fewer when they pass `bytes_max`, at least
    /// one when there is one).
    Read {
        first: u64,
        end: u64,
        bytes_max: u64,
        reply: LocalReply<Vec<StoredEntry>>,
    },
}

impl std::fmt::Debug for RaftOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            RaftOp::State { .. } => "State",
            RaftOp::Append { .. } => "Append",
            RaftOp::Truncate { .. } => "Truncate",
            RaftOp::Purge { .. } => "Purge",
            RaftOp::SaveVote { .. } => "SaveVote",
            RaftOp::SaveCommitted { .. } => "SaveCommitted",
            RaftOp::Read { .. } => "Read",
            RaftOp::OffsetsApplied => "OffsetsApplied",
            RaftOp::StoredOffsets { .. } => "StoredOffsets",
            RaftOp::MachineSnapshot { .. } => "MachineSnapshot",
            RaftOp::SaveMachineSnapshot { .. } => "SaveMachineSnapshot",
        };
        f.write_str(name)
    }
}

impl RaftOp {
    /// Answers the op with `error` (the partition is gone or the shard
    /// stopping); an append's `flushed` hears it too.
    pub fn fail(self, error: impl Fn() -> PumpError) {
        match self {
            RaftOp::State { reply } => {
                let _ = reply.send(Err(error()));
            }
            RaftOp::Append { flushed, reply, .. } => {
                flushed(Err(error().to_string()));
                let _ = reply.send(Err(error()));
            }
            RaftOp::Truncate { reply, .. }
            | RaftOp::Purge { reply, .. }
            | RaftOp::SaveVote { reply, .. }
            | RaftOp::SaveCommitted { reply, .. }
            | RaftOp::SaveMachineSnapshot { reply, .. } => {
                let _ = reply.send(Err(error()));
            }
            RaftOp::Read { reply, .. } => {
                let _ = reply.send(Err(error()));
            }
            RaftOp::StoredOffsets { reply } => {
                let _ = reply.send(Err(error()));
            }
            RaftOp::MachineSnapshot { reply } => {
                let _ = reply.send(Err(error()));
            }
            RaftOp::OffsetsApplied => {}
        }
    }
}

#[derive(Default)]
struct QueueInner {
    ops: VecDeque<(PartitionKey, RaftOp)>,
    waker: Option<Waker>,
}

/// The shard's queue of Raft log operations (its thread only).
#[derive(Clone, Default)]
pub struct RaftQueue {
    inner: Rc<RefCell<QueueInner>>,
}

impl std::fmt::Debug for RaftQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftQueue")
            .field("queued", &self.inner.borrow().ops.len())
            .finish()
    }
}

impl RaftQueue {
    pub fn push(&self, key: PartitionKey, op: RaftOp) {
        let mut inner = self.inner.borrow_mut();
        inner.ops.push_back((key, op));
        if let Some(waker) = inner.waker.take() {
            waker.wake();
        }
    }

    /// Ready when an op waits.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner.borrow_mut();
        if inner.ops.is_empty() {
            inner.waker = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    pub fn pop(&self) -> Option<(PartitionKey, RaftOp)> {
        self.inner.borrow_mut().ops.pop_front()
    }
}

/// A metadata change in flight through the metadata group: what was
/// applied and the view with it, or the status of its rejection.
pub type MetadataProposal = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<
                    (
                        iggyd_metadata::Applied,
                        std::sync::Arc<iggyd_metadata::MetadataView>,
                    ),
                    iggyd_wire::protocol::codes::Status,
                >,
            >,
    >,
>;

/// Who leads a partition's group, as far as this node knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// This node: proposals are accepted.
    Here,
    /// Another node (its cluster node id).
    Elsewhere(u64),
    /// No leader is known (an election, or this node is cut off).
    Unknown,
}

/// A replicated partition's consensus group, as its pump sees it.
pub trait Group {
    /// Proposes a batch stamped with the leader's time; `reply` gets the
    /// offsets once the batch is committed, or why it was not.
    fn propose(&self, batch: Vec<u8>, reply: Reply<AppendAck>);
    fn leadership(&self) -> Leadership;
    /// One past the last committed message: consumers read below it (a
    /// consumer never sees what a failover could take back).
    fn committed_end(&self) -> u64;
    /// The partition was removed here: stop the group.
    fn stop(&self);
    /// Proposes an offsets entry (`iggyd_raft::offsets`); `done` hears
    /// once it is committed (forwarded to the leader when another member
    /// leads), or why not.
    fn propose_offsets(&self, payload: Vec<u8>, done: OffsetsDone) {
        drop(payload);
        done(Err(PumpError::NotLeader { leader: None }));
    }
    /// Proposes a purge entry: every message below `below` (all of them
    /// with `u64::MAX`) is deleted on every replica once it is applied;
    /// `done` hears once it is committed and applied here, or why not.
    fn propose_purge(&self, below: u64, done: OffsetsDone) {
        let _ = below;
        done(Err(PumpError::NotLeader { leader: None }));
    }
    /// The first offset consumers may read here: the messages below were
    /// purged (deleted, or being deleted).
    fn floor(&self) -> u64 {
        0
    }
    /// The purge entries applied since the last call, in log order.
    fn take_purges(&self) -> Vec<iggyd_raft::state_machine::AppliedPurge> {
        Vec::new()
    }
    /// Whether the group has started: it applied every entry its log
    /// records committed (a purge among them), so consumers may read.
    fn readable(&self) -> bool {
        true
    }
    /// Whether stored offsets may be read here: this member has applied
    /// an entry of the current term, so every offsets entry an earlier
    /// leader acknowledged is applied (a new leader's blank entry comes
    /// after them).
    fn offsets_ready(&self) -> bool {
        false
    }
    /// The offsets entries applied since the last call, in log order.
    fn take_offsets(&self) -> AppliedOffsets {
        Vec::new()
    }
    /// Retention asks for a snapshot at `point` (an applied entry and the
    /// offset its messages end at), so the entries through it are purged
    /// and the messages before the offset may be deleted.
    fn snapshot_at(&self, point: SnapshotPoint) {
        let _ = point;
    }
    /// The last snapshot installed from a leader and its membership
    /// (encoded): a purge past the log's end starts the log again there.
    fn installed(&self) -> Option<(SnapshotPoint, Vec<u8>)> {
        None
    }
    /// An installed snapshot's offsets store, once: it replaces the
    /// partition's (when newer), before the entries taken after it.
    fn take_installed_offsets(&self) -> Option<iggyd_raft::state_machine::StoredOffsets> {
        None
    }
}

/// Where a group's snapshot is (`iggyd_raft::state_machine`).
pub use iggyd_raft::state_machine::SnapshotPoint;

/// The replication above a shard (implemented by `cluster`).
pub trait Replication {
    /// Whether `key`'s partition is replicated (its pump opens its Raft
    /// files and serves consumers only what is committed).
    fn replicates(&self, key: &PartitionKey) -> bool;
    /// Starts the group of a replicated partition the pump opened; its log
    /// store reaches the pump through `queue`; `first_offset` is where its
    /// messages start (nothing is committed below it). Must not wait for
    /// the pump.
    /// `snapshot` is its log's purge point, where its snapshot is.
    fn start_group(
        &self,
        key: PartitionKey,
        queue: RaftQueue,
        first_offset: u64,
        snapshot: Option<iggyd_storage::raft::PurgePoint>,
    ) -> Rc<dyn Group>;
    /// A node-to-node call for group `channel`, which this shard owns;
    /// `reply` gets the answer's bytes.
    fn deliver(&self, channel: u64, body: Vec<u8>, reply: flume::Sender<Vec<u8>>);
    /// Shard 0 of a cluster node: proposes a metadata change to the
    /// metadata group; the future resolves with its outcome as applied
    /// here once committed. `None` when this shard runs no metadata group.
    fn propose_metadata(
        &self,
        command: iggyd_metadata::MetadataCommand,
    ) -> Option<MetadataProposal>;
    /// The admin socket's view of this shard's groups (read at once from
    /// what each group publishes; never waits).
    fn group_status(&self, shard: u32) -> Vec<iggyd_admin_api::cluster::GroupStatus>;
    /// Asks group `channel` (a storage id, or `METADATA_STORAGE_ID`) to
    /// hand its leadership to node `to`; `reply` hears whether the request
    /// was taken. Must not wait for the pump.
    fn transfer_leader(&self, channel: u64, to: u64, reply: flume::Sender<Result<(), String>>);
    /// Asks group `channel` (a storage id, or `METADATA_STORAGE_ID`) for
    /// a membership change, carried out where its leader is; `reply` hears
    /// the outcome. Must not wait for the pump.
    fn change_members(
        &self,
        channel: u64,
        change: iggyd_raft::network::ForwardedChange,
        reply: flume::Sender<ChangeAnswer>,
    );
    /// This shard's election and forwarding counters (cumulative). Reads
    /// every group's published metrics: the shard calls it for its
    /// once-a-second report, not per round.
    fn counters(&self) -> ReplicationCounters;
}

/// What a group's membership change came to.
pub type ChangeAnswer =
    Result<iggyd_raft::membership::MemberOutcome, iggyd_raft::membership::MemberError>;

/// A shard's replication counters, cumulative since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicationCounters {
    /// Elections its groups went through: the sum of their Raft terms
    /// (`cluster/counters.rs` says why a term is an election).
    pub elections: u64,
    /// Client batches a follower forwarded to its partition's leader.
    pub forwarded_messages: u64,
    /// Stored consumer offsets a follower forwarded to the leader.
    pub forwarded_offsets: u64,
}

/// Builds a shard's replication on its thread (the supervisor makes it,
/// knowing the layer above). `None` on a single node.
pub struct ReplicationStart(pub Box<dyn FnOnce(Rc<ShardContext>) -> StartedReplication + Send>);

/// A shard's started replication, or why it did not start.
pub type StartedReplication = Result<Rc<dyn Replication>, String>;

impl std::fmt::Debug for ReplicationStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationStart").finish_non_exhaustive()
    }
}
