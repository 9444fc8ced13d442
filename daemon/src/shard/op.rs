//! The closed set of operations a shard's pump executes, their replies and
//! their errors. Handlers, the control plane and the bench build these
//! values and send them to the owner shard; only `shard/pump.rs` executes
//! them. This file holds no state and does no I/O.

use super::partition::{PartitionKey, PartitionSettings};
use iggyd_storage::consumer_offsets::ConsumerKey;
use iggyd_storage::{DeletedSegments, PartitionStats, SharedSlice, StorageError};
use iggyd_wire::batch::ValidBatch;
use iggyd_wire::protocol::codes::Status;
use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::primitives::PollingStrategy;

/// Bytes a poll result keeps free in front of its records: the reply header
/// and the 16-byte poll prefix (`partition_id`, `current_offset`, `count`),
/// so the reply is built around the records without copying them.
pub const POLL_HEADROOM: usize = HEADER_SIZE + 16;

/// Where a reply goes: a one-shot channel back to the requester.
pub type Reply<T> = flume::Sender<Result<T, PumpError>>;

/// Offsets of an appended batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAck {
    pub base_offset: u64,
    pub last_offset: u64,
}

/// A poll as the owner shard executes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollRequest {
    /// Whose stored offset `Next` resumes from and auto-commit moves.
    pub consumer: Option<ConsumerKey>,
    pub strategy: PollingStrategy,
    pub count: u32,
    pub auto_commit: bool,
    /// Bytes of records the reply may hold beyond its first batch (the
    /// connection's share of its shard's reply budget).
    pub bytes_max: u64,
}

/// Stored bytes for a poll reply (§5.3), plus what its prefix needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollResult {
    /// Highest stored offset (0 when empty).
    pub current_offset: u64,
    pub message_count: u32,
    /// [`POLL_HEADROOM`] free bytes, then stored records copied here.
    pub bytes: Vec<u8>,
    /// Then stored records lent from the partition's read window.
    pub shared: Option<SharedSlice>,
}

impl PollResult {
    /// A result with no messages.
    pub fn empty(current_offset: u64) -> PollResult {
        PollResult {
            current_offset,
            message_count: 0,
            bytes: vec![0; POLL_HEADROOM],
            shared: None,
        }
    }

    /// The stored records, without the headroom (a copy when part of them
    /// is shared).
    pub fn records(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.shared {
            None => std::borrow::Cow::Borrowed(&self.bytes[POLL_HEADROOM..]),
            Some(shared) => {
                let mut records = self.bytes[POLL_HEADROOM..].to_vec();
                records.extend_from_slice(shared.as_slice());
                std::borrow::Cow::Owned(records)
            }
        }
    }
}

/// `(current_offset, stored_offset)` for GetConsumerOffset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredOffset {
    pub current_offset: u64,
    pub stored_offset: u64,
}

/// One partition's numbers for stats, the console and retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    pub key: PartitionKey,
    pub stats: PartitionStats,
    pub current_offset: u64,
    /// Offset one past the last fsynced message (`current_offset + 1` when
    /// everything stored is durable; 0 when nothing is).
    pub durable_next_offset: u64,
    /// Sealed segments (oldest first) as `(size_bytes, last_timestamp_us)`.
    pub sealed_segments: Vec<(u64, u64)>,
    pub consumer_offsets: Vec<(ConsumerKey, u64)>,
    /// Every segment, oldest first, the active one last (the console's
    /// segment view).
    pub segments: Vec<iggyd_storage::partition_log::SegmentInfo>,
}

/// The closed set of operations on this shard's partitions.
#[derive(Debug)]
pub enum PartitionOp {
    /// Create (or open and recover) a partition this shard owns, or update
    /// the settings of one it already holds.
    Open {
        key: PartitionKey,
        settings: PartitionSettings,
        reply: Reply<()>,
    },
    /// Close a partition and move its directory to the trash (stream,
    /// topic or partition deleted); its files are removed in the
    /// background. Never fails: the delete is durable in metadata already.
    /// Missing partitions are not an error.
    Remove {
        key: PartitionKey,
        reply: Reply<()>,
    },
    /// Append a batch the receiving shard validated; acknowledged once
    /// written (`replicated`) or fsynced (`persisted`).
    Append {
        key: PartitionKey,
        batch: ValidBatch,
        reply: Reply<AppendAck>,
    },
    Poll {
        key: PartitionKey,
        request: PollRequest,
        reply: Reply<PollResult>,
    },
    GetOffset {
        key: PartitionKey,
        consumer: ConsumerKey,
        reply: Reply<Option<StoredOffset>>,
    },
    StoreOffset {
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
        reply: Reply<()>,
    },
    DeleteOffset {
        key: PartitionKey,
        consumer: ConsumerKey,
        reply: Reply<()>,
    },
    /// Delete every message and consumer offset; the partition restarts at 0
    /// (a replicated partition: a purge entry of its group, after which
    /// every replica deletes its messages; offsets go on, stored consumer
    /// offsets stay).
    Purge {
        key: PartitionKey,
        reply: Reply<()>,
    },
    DeleteSegments {
        key: PartitionKey,
        count: u32,
        reply: Reply<DeletedSegments>,
    },
    /// Flush (with `fsync`, make durable) what was written.
    Flush {
        key: PartitionKey,
        fsync: bool,
        reply: Reply<()>,
    },
    Report {
        reply: Reply<Vec<PartitionReport>>,
    },
    /// Make everything written on this shard durable now; answers how many
    /// files were fsynced (the console's `flush` action).
    SyncAll {
        reply: Reply<u64>,
    },
    /// Periodic: fsync partitions with unsynced data (the interval part of
    /// the `replicated` flush policy).
    FlushTick,
    /// Periodic: delete expired sealed segments, and the oldest sealed
    /// segments of partitions over their `max_topic_size` share.
    RetentionTick,
    /// Periodic: remove a few files of deleted data from the trash.
    TrashTick,
}

#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error("partition {0} is not served by this shard")]
    NotHere(PartitionKey),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("offset {offset} is beyond the partition's highest offset ({current:?})")]
    InvalidOffset { offset: u64, current: Option<u64> },
    #[error("no consumer offset is stored")]
    OffsetNotFound,
    #[error(
        "the partition holds {max} consumer offsets (limits.max_consumer_offsets_per_partition)"
    )]
    TooManyConsumerOffsets { max: usize },
    #[error("the shard is stopping")]
    Stopping,
    /// A replicated partition's leader is another node (or none is known):
    /// its request goes there.
    #[error("this node does not lead the partition (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    /// A replicated partition's proposal did not commit (leadership moved,
    /// or the group stopped); it may or may not be stored.
    #[error("the partition's group did not commit the request: {reason}")]
    NotCommitted { reason: String },
    /// A replicated partition refuses an operation the cluster does not
    /// replicate yet.
    #[error("{what} is not available on a replicated partition yet")]
    NotReplicated { what: &'static str },
}

impl PumpError {
    /// The wire status a client gets for this error.
    pub fn status(&self) -> Status {
        match self {
            PumpError::NotHere(_) => Status::PartitionNotFound,
            PumpError::Storage(StorageError::InvalidBatch(error)) => error.status(),
            PumpError::Storage(StorageError::BatchTooLarge { .. }) => Status::InvalidMessagesCount,
            PumpError::Storage(_) | PumpError::Stopping => Status::Error,
            PumpError::InvalidOffset { .. } => Status::InvalidOffset,
            PumpError::OffsetNotFound => Status::ConsumerOffsetNotFound,
            PumpError::TooManyConsumerOffsets { .. } => Status::TooManyConsumerOffsets,
            PumpError::NotLeader { .. } => Status::TransientNotAccepted,
            PumpError::NotCommitted { .. } => Status::TransientNotCommitted,
            PumpError::NotReplicated { .. } => Status::FeatureUnavailable,
        }
    }

    pub(crate) fn is_fatal(&self) -> bool {
        matches!(self, PumpError::Storage(error) if error.is_fatal())
    }
}

/// Answers a request; the requester may have gone (client disconnected),
/// which is not an error.
pub(crate) fn answer<T>(reply: Reply<T>, value: Result<T, PumpError>) {
    let _ = reply.send(value);
}

/// Answers an op with `Stopping` (the shard is fatal or stopping).
pub(crate) fn reply_stopping(op: PartitionOp) {
    match op {
        PartitionOp::Open { reply, .. }
        | PartitionOp::Remove { reply, .. }
        | PartitionOp::StoreOffset { reply, .. }
        | PartitionOp::DeleteOffset { reply, .. }
        | PartitionOp::Purge { reply, .. }
        | PartitionOp::Flush { reply, .. } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::Append { reply, .. } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::Poll { reply, .. } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::GetOffset { reply, .. } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::DeleteSegments { reply, .. } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::Report { reply } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::SyncAll { reply } => answer(reply, Err(PumpError::Stopping)),
        PartitionOp::FlushTick | PartitionOp::RetentionTick | PartitionOp::TrashTick => {}
    }
}
