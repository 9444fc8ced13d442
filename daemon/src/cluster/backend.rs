//! A partition group's log backend on a cluster node: every operation its
//! log store asks for becomes a `RaftOp` in the shard's `RaftQueue`, which
//! the shard loop hands to the pump (the partition's only mutator); the
//! answer comes back on a one-shot channel.
//!
//! Must not: touch the log itself, or wait for anything but the pump's
//! answer (the pump never waits for a group, so this cannot deadlock).

use crate::shard::op::{PumpError, Reply};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{LogPosition, RaftOp, RaftQueue, StoredEntry};
use iggyd_raft::backend::{BackendState, FlushedCallback, LogBackend};

/// The backend of one partition's group: its pump, through the queue.
#[derive(Clone)]
pub struct PumpBackend {
    key: PartitionKey,
    queue: RaftQueue,
}

impl PumpBackend {
    pub fn new(key: PartitionKey, queue: RaftQueue) -> PumpBackend {
        PumpBackend { key, queue }
    }

    /// Queues the op made by `make` and waits for the pump's answer.
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> RaftOp) -> Result<T, String> {
        let (reply, answer) = flume::bounded(1);
        self.queue.push(self.key, make(reply));
        match answer.recv_async().await {
            Ok(result) => result.map_err(|error: PumpError| error.to_string()),
            Err(_) => Err(format!("partition {}: the pump is gone", self.key)),
        }
    }
}

impl PumpBackend {
    /// The partition's offsets store, whole (a snapshot being sent carries
    /// it).
    pub async fn stored_offsets(&self) -> Result<iggyd_raft::state_machine::StoredOffsets, String> {
        self.ask(|reply| RaftOp::StoredOffsets { reply }).await
    }

    /// The group's state-machine snapshot, if one was saved (the metadata
    /// group's store, `metadata.rs`).
    pub async fn machine_snapshot(&self) -> Result<Option<Vec<u8>>, String> {
        self.ask(|reply| RaftOp::MachineSnapshot { reply }).await
    }

    /// Saves the group's state-machine snapshot; durable when answered.
    pub async fn save_machine_snapshot(&self, bytes: Vec<u8>) -> Result<(), String> {
        self.ask(|reply| RaftOp::SaveMachineSnapshot { bytes, reply })
            .await
    }
}

impl LogBackend for PumpBackend {
    async fn state(&self) -> Result<BackendState, String> {
        let state = self.ask(|reply| RaftOp::State { reply }).await?;
        Ok(BackendState {
            last: state.last,
            purged: state.purged,
            committed: state.committed,
            vote: state.vote,
        })
    }

    async fn append(
        &self,
        entries: Vec<StoredEntry>,
        flushed: FlushedCallback,
    ) -> Result<(), String> {
        self.ask(|reply| RaftOp::Append {
            entries,
            flushed,
            reply,
        })
        .await
    }

    async fn truncate_after(&self, keep: Option<u64>) -> Result<(), String> {
        self.ask(|reply| RaftOp::Truncate { keep, reply }).await
    }

    async fn purge_through(&self, through: LogPosition) -> Result<(), String> {
        self.ask(|reply| RaftOp::Purge { through, reply }).await
    }

    async fn save_vote(&self, vote: Vec<u8>) -> Result<(), String> {
        self.ask(|reply| RaftOp::SaveVote { vote, reply }).await
    }

    async fn save_committed(&self, committed: Option<LogPosition>) -> Result<(), String> {
        self.ask(|reply| RaftOp::SaveCommitted { committed, reply })
            .await
    }

    async fn read(&self, first: u64, end: u64, bytes_max: u64) -> Result<Vec<StoredEntry>, String> {
        self.ask(|reply| RaftOp::Read {
            first,
            end,
            bytes_max,
            reply,
        })
        .await
    }
}
