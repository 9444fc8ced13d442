//! openraft's `RaftLogStorage` and `RaftLogReader` on a partition's Raft
//! log (`iggyd_storage::raft::RaftLog`). The log store and its readers
//! share the log through an async mutex (one thread: the group's shard), so
//! the replication tasks reading entries and the core appending them take
//! turns, never a borrow across an await.
//!
//! A data entry's batch takes the offsets where the log continues, whatever
//! its proposer stamped (it cannot know them for sure), as over a backend.
//!
//! An append reports its entries flushed once they are fsynced (this step:
//! every append is synced before the callback; the shard's commit phase
//! will batch them). Truncation and purge follow openraft's contract: only
//! entries after the committed one are truncated, and purged entries no
//! longer read back (their messages stay: retention deletes those).
//!
//! Must not: hold the mutex across anything but the log's own I/O, or turn a
//! storage error into a panic (openraft reports it and stops the group).

use crate::codec::{decode_membership, decode_vote, encode_membership, encode_vote};
use crate::{Entry, LogId, PartitionRaft, PartitionTypes, Proposal, Vote};
use futures_util::lock::Mutex;
use iggyd_storage::StorageError;
use iggyd_storage::io::StorageIo;
use iggyd_storage::raft::{EntryBody, RaftLog, StoredBody};
use iggyd_wire::batch::{BatchHeader, ValidBatch, stamp};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, RaftLogReader};
use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::rc::Rc;

/// A storage error as openraft takes it.
pub(crate) fn io_error(error: StorageError) -> io::Error {
    io::Error::other(error.to_string())
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The log store of one partition's group (clones share it), for the type
/// configuration `C` (production's by default, or the cluster
/// simulation's).
pub struct LogStore<I: StorageIo, C = PartitionRaft> {
    log: Rc<Mutex<RaftLog<I>>>,
    types: PhantomData<fn() -> C>,
}

impl<I: StorageIo, C> Clone for LogStore<I, C> {
    fn clone(&self) -> Self {
        LogStore {
            log: self.log.clone(),
            types: PhantomData,
        }
    }
}

impl<I: StorageIo, C> Debug for LogStore<I, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl<I: StorageIo + Clone, C> LogStore<I, C> {
    pub fn new(log: RaftLog<I>) -> LogStore<I, C> {
        LogStore {
            log: Rc::new(Mutex::new(log)),
            types: PhantomData,
        }
    }

    /// The shared log (the partition's messages are read through it).
    pub fn log(&self) -> Rc<Mutex<RaftLog<I>>> {
        self.log.clone()
    }
}

/// `(term, index)` of a log id.
fn position(log_id: &LogId) -> (u64, u64) {
    (log_id.leader_id.term, log_id.index)
}

fn log_id((index, term): (u64, u64)) -> LogId {
    LogId::new_term_index(term, index)
}

impl<I: StorageIo + Clone, C: PartitionTypes> RaftLogReader<C> for LogStore<I, C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let mut log = self.log.lock().await;
        // Entries are read from the files: what was appended is written
        // first (the commit phase would have; a reader may come sooner).
        log.write_pending().await.map_err(io_error)?;
        let Some((last, _)) = log.last() else {
            return Ok(Vec::new());
        };
        let start = match range.start_bound() {
            Bound::Included(start) => *start,
            Bound::Excluded(start) => start.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(end) => (*end).min(last),
            Bound::Excluded(end) => end.saturating_sub(1).min(last),
            Bound::Unbounded => last,
        };
        if matches!(range.end_bound(), Bound::Excluded(0)) {
            return Ok(Vec::new());
        }
        let mut entries = Vec::new();
        let mut index = start;
        while index <= end {
            let Some(stored) = log.get(index).await.map_err(io_error)? else {
                index += 1;
                continue;
            };
            let payload = match stored.body {
                StoredBody::Blank => EntryPayload::Blank,
                StoredBody::Data(bytes) => EntryPayload::Normal(Proposal::Batch(bytes)),
                StoredBody::Offsets(bytes) => EntryPayload::Normal(Proposal::Offsets(bytes)),
                StoredBody::Purge(below) => EntryPayload::Normal(Proposal::Purge(below)),
                StoredBody::Membership(bytes) => EntryPayload::Membership(
                    decode_membership(&bytes)
                        .ok_or_else(|| invalid(format!("entry {index}: a damaged membership")))?,
                ),
            };
            entries.push(Entry::new(log_id((stored.index, stored.term)), payload));
            index += 1;
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let log = self.log.lock().await;
        match log.vote() {
            None => Ok(None),
            Some(bytes) => decode_vote(bytes)
                .map(Some)
                .ok_or_else(|| invalid("a damaged vote".to_string())),
        }
    }
}

impl<I: StorageIo + Clone, C: PartitionTypes> RaftLogStorage<C> for LogStore<I, C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let log = self.log.lock().await;
        Ok(LogState {
            last_purged_log_id: log.purged().map(log_id),
            last_log_id: log.last().map(log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut log = self.log.lock().await;
        log.save_vote(&encode_vote(vote)).await.map_err(io_error)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut log = self.log.lock().await;
        log.set_committed(committed.map(|id| {
            let (term, index) = position(&id);
            (index, term)
        }));
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let log = self.log.lock().await;
        Ok(log.committed().map(log_id))
    }

    async fn append<It>(&mut self, entries: It, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        It: IntoIterator<Item = Entry>,
    {
        let mut log = self.log.lock().await;
        for entry in entries {
            let (term, index) = position(&entry.log_id);
            match &entry.payload {
                EntryPayload::Blank => log.append(index, term, EntryBody::Blank).await,
                EntryPayload::Normal(Proposal::Offsets(bytes)) => {
                    log.append(index, term, EntryBody::Offsets(bytes)).await
                }
                EntryPayload::Normal(Proposal::Purge(below)) => {
                    log.append(index, term, EntryBody::Purge { below: *below })
                        .await
                }
                EntryPayload::Normal(Proposal::Batch(bytes)) => {
                    // A proposal takes its offsets where the log continues
                    // (its proposer's stamp is stale when another proposal
                    // joined the log first), as the daemon's pump does.
                    let mut bytes = bytes.to_vec();
                    let next = log.partition().next_offset();
                    let header = BatchHeader::decode(&bytes)
                        .map_err(|error| invalid(format!("entry {index}: {error}")))?;
                    if header.base_offset != next {
                        stamp(&mut bytes, header.partition_id, next, header.base_timestamp)
                            .map_err(|error| invalid(format!("entry {index}: {error}")))?;
                    }
                    let len = bytes.len();
                    let batch = ValidBatch::new(bytes, 0..len)
                        .map_err(|error| invalid(format!("entry {index}: {error}")))?;
                    log.append(index, term, EntryBody::Data(&batch)).await
                }
                EntryPayload::Membership(membership) => {
                    let bytes = encode_membership(membership);
                    log.append(index, term, EntryBody::Membership(&bytes)).await
                }
            }
            .map_err(io_error)?;
        }
        let synced = log.sync().await.map_err(io_error);
        let reported = synced
            .as_ref()
            .map(|_| ())
            .map_err(|error| io::Error::new(error.kind(), error.to_string()));
        callback.io_completed(reported);
        synced
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        let mut log = self.log.lock().await;
        log.truncate_after(last.map(|id| id.index))
            .await
            .map_err(io_error)
    }

    async fn purge(&mut self, upto: LogId) -> Result<(), io::Error> {
        let mut log = self.log.lock().await;
        let (term, index) = position(&upto);
        log.purge_through((index, term)).await.map_err(io_error)
    }
}
