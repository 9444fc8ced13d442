//! [`RaftLog`]: a partition's segment log and its Raft files together,
//! for code that owns both (the consensus library's log store over the
//! shared log, the tests, the simulations); the daemon's pump keeps the
//! two apart and calls [`RaftFiles`] with its own segment log.
//!
//! Must not: change what [`RaftFiles`] decides; it only passes the segment
//! log along and orders data before records.

use super::*;
use crate::partition_log::{AppendResult, Clock, DeletedSegments, PartitionConfig, PartitionLog};
use crate::trash::Trash;
use crate::{BufferPool, StorageError};
use std::path::Path;
use std::rc::Rc;

/// A partition's Raft log: its segment log and its Raft files together
/// (for code that owns both; the pump keeps them apart).
pub struct RaftLog<I: StorageIo> {
    pub(super) log: PartitionLog<I>,
    pub(super) files: RaftFiles<I>,
}

impl<I: StorageIo> std::fmt::Debug for RaftLog<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLog")
            .field("log", &self.log)
            .field("files", &self.files)
            .finish()
    }
}

impl<I: StorageIo + Clone> RaftLog<I> {
    /// Opens (creating when missing) and recovers the partition in
    /// `partition_dir`: the segment log, then the Raft files, then the two
    /// reconciled (see the module doc).
    pub async fn open(
        io: I,
        partition_dir: &Path,
        config: PartitionConfig,
        clock: Rc<dyn Clock>,
        pool: BufferPool,
    ) -> Result<(RaftLog<I>, RaftRecovery), StorageError> {
        let mut log = PartitionLog::open(io.clone(), partition_dir, config, clock, pool).await?;
        let (files, recovery) = RaftFiles::open(io, partition_dir, &mut log).await?;
        Ok((RaftLog { log, files }, recovery))
    }

    /// The partition's messages (the pump serves polls from it).
    pub fn partition(&self) -> &PartitionLog<I> {
        &self.log
    }

    pub fn partition_mut(&mut self) -> &mut PartitionLog<I> {
        &mut self.log
    }

    /// The Raft files.
    pub fn files(&self) -> &RaftFiles<I> {
        &self.files
    }

    /// The last entry's position, or the purge point when no entry is left.
    pub fn last(&self) -> Option<LogPosition> {
        self.files.last()
    }

    /// The first index the log still holds.
    pub fn first_index(&self) -> Option<u64> {
        self.files.first_index()
    }

    pub fn purged(&self) -> Option<LogPosition> {
        self.files.purged()
    }

    pub fn vote(&self) -> Option<&[u8]> {
        self.files.vote()
    }

    /// [`RaftFiles::save_committed_through`], after making the messages
    /// and entries through it durable (else a power loss could take the
    /// entry and, with it, the committed position: open never keeps one
    /// past the entries it finds).
    pub async fn save_committed_through(
        &mut self,
        position: LogPosition,
    ) -> Result<(), StorageError> {
        self.sync().await?;
        self.files.save_committed_through(position).await
    }

    /// Saves the vote durably before returning.
    pub async fn save_vote(&mut self, vote: &[u8]) -> Result<(), StorageError> {
        self.files.save_vote(vote).await
    }

    pub fn committed(&self) -> Option<LogPosition> {
        self.files.committed()
    }

    /// Records the committed entry (a hint, see [`RaftFiles::set_committed`]).
    pub fn set_committed(&mut self, committed: Option<LogPosition>) {
        self.files.set_committed(committed);
    }

    /// Appends one entry (`index` one past the last). Nothing is written
    /// until [`Self::write_pending`].
    pub async fn append(
        &mut self,
        index: u64,
        term: u64,
        body: EntryBody<'_>,
    ) -> Result<Option<AppendResult>, StorageError> {
        self.files.append(&mut self.log, index, term, body).await
    }

    /// Writes what is appended: the data first, then the records naming it.
    pub async fn write_pending(&mut self) -> Result<(), StorageError> {
        self.log.write_pending().await?;
        self.files.write_pending().await
    }

    /// Makes everything appended durable: the data, then the records.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        self.log.write_pending().await?;
        self.log.sync().await?;
        self.files.sync().await
    }

    /// The entry at `index` (written data only: call
    /// [`Self::write_pending`] first).
    pub async fn get(&self, index: u64) -> Result<Option<StoredEntry>, StorageError> {
        self.files.get(&self.log, index).await
    }

    /// The term of entry `index` (also of the purge point), if known.
    pub async fn term_of(&self, index: u64) -> Result<Option<u64>, StorageError> {
        self.files.term_of(index).await
    }

    /// The entries from `first` (or the first the log still holds) before
    /// `end`, until `bytes_max` of data (see [`RaftFiles::read_range`]).
    pub async fn read_range(
        &self,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> Result<Vec<StoredEntry>, StorageError> {
        self.files
            .read_range(&self.log, first, end, bytes_max)
            .await
    }

    /// The offset one past the last message of the data entries up to
    /// `index`.
    pub async fn messages_end_through(&self, index: u64) -> Result<u64, StorageError> {
        self.files.messages_end_through(&self.log, index).await
    }

    /// [`RaftFiles::purge_point`] of this log.
    pub async fn purge_point(&self) -> Result<Option<PurgePoint>, StorageError> {
        self.files.purge_point(&self.log).await
    }

    /// Drops every entry after `keep` (all for `None`).
    pub async fn truncate_after(&mut self, keep: Option<u64>) -> Result<(), StorageError> {
        self.log.write_pending().await?;
        self.files.truncate_after(&mut self.log, keep).await
    }

    /// Marks every entry through `position` purged.
    pub async fn purge_through(&mut self, position: LogPosition) -> Result<(), StorageError> {
        self.log.write_pending().await?;
        self.files.purge_through(&self.log, position).await
    }

    /// Installs the group's snapshot of `position`, past every entry the
    /// log holds, and starts the segment log again at `next_offset` (see
    /// [`RaftFiles::install_snapshot`]).
    pub async fn install_snapshot(
        &mut self,
        position: LogPosition,
        next_offset: u64,
        membership: &[u8],
        trash: &mut Trash<I>,
    ) -> Result<DeletedSegments, StorageError> {
        self.log.write_pending().await?;
        self.files
            .install_snapshot(position, next_offset, membership)
            .await?;
        self.log.restart_at(next_offset, trash).await
    }

    /// Finishes a restart a crash interrupted ([`RaftFiles::restart_needed`]);
    /// what it deleted, if it had to.
    pub async fn finish_restart(
        &mut self,
        trash: &mut Trash<I>,
    ) -> Result<Option<DeletedSegments>, StorageError> {
        match self.files.restart_needed(&self.log) {
            Some(next_offset) => Ok(Some(self.log.restart_at(next_offset, trash).await?)),
            None => Ok(None),
        }
    }

    /// Shutdown: everything durable, the committed entry saved.
    pub async fn close(&mut self) -> Result<(), StorageError> {
        self.log.write_pending().await?;
        self.log.sync().await?;
        self.files.close().await?;
        self.log.close().await
    }
}
