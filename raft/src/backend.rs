//! openraft's `RaftLogStorage` and `RaftLogReader` over a [`LogBackend`]:
//! whoever owns a partition's log (in the daemon, the partition's pump,
//! reached through its shard's queue) performs the operations; this file
//! only translates between openraft's types and the storage's
//! (`iggyd_storage::raft::StoredEntry`, positions as `(index, term)`,
//! votes and memberships as bytes).
//!
//! openraft's writes complete in order here, whatever order the backend
//! completes them in: a vote, a truncation or a purge waits for the flush
//! of every append before it (see [`BackendLogStore`]).
//!
//! Must not: hold log state of its own (but the count of appends not yet
//! flushed), or turn a backend error into a panic (openraft reports it and
//! stops the group).

use crate::codec::{decode_membership, decode_vote, encode_membership, encode_vote};
use crate::{Entry, LogId, PartitionRaft, PartitionTypes, Proposal, Vote};
use iggyd_storage::raft::{LogPosition, StoredBody, StoredEntry};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, RaftLogReader};
use std::cell::{Cell, RefCell};
use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::rc::Rc;
use std::task::{Poll, Waker};

/// What the log holds when a group starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendState {
    pub last: Option<LogPosition>,
    pub purged: Option<LogPosition>,
    pub committed: Option<LogPosition>,
    pub vote: Option<Vec<u8>>,
}

/// Called once appended entries are as durable as the partition asks.
pub type FlushedCallback = Box<dyn FnOnce(Result<(), String>)>;

/// The operations a partition's log performs for its group. Errors are
/// messages: the group stops on any of them.
pub trait LogBackend: Clone + 'static {
    fn state(&self) -> impl Future<Output = Result<BackendState, String>>;
    /// Appends `entries` (readable when this returns); `flushed` runs once
    /// they are durable.
    fn append(
        &self,
        entries: Vec<StoredEntry>,
        flushed: FlushedCallback,
    ) -> impl Future<Output = Result<(), String>>;
    fn truncate_after(&self, keep: Option<u64>) -> impl Future<Output = Result<(), String>>;
    fn purge_through(&self, through: LogPosition) -> impl Future<Output = Result<(), String>>;
    fn save_vote(&self, vote: Vec<u8>) -> impl Future<Output = Result<(), String>>;
    fn save_committed(
        &self,
        committed: Option<LogPosition>,
    ) -> impl Future<Output = Result<(), String>>;
    /// Entries `first..end`, fewer when they pass `bytes_max` (at least one
    /// when there is one).
    fn read(
        &self,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> impl Future<Output = Result<Vec<StoredEntry>, String>>;
}

/// Bytes of batches one replication read returns at most (openraft asks
/// for ranges; a follower far behind gets them in pieces).
pub const READ_BYTES_MAX: u64 = 16 * 1024 * 1024;

fn backend_error(error: String) -> io::Error {
    io::Error::other(error)
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// `(index, term)` of a log id.
fn position(log_id: &LogId) -> LogPosition {
    (log_id.index, log_id.leader_id.term)
}

fn log_id((index, term): LogPosition) -> LogId {
    LogId::new_term_index(term, index)
}

/// A stored entry as openraft's.
pub fn to_entry(stored: StoredEntry) -> Result<Entry, io::Error> {
    let index = stored.index;
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
    Ok(Entry::new(log_id((stored.index, stored.term)), payload))
}

/// openraft's entry as the storage keeps it.
pub fn from_entry(entry: Entry) -> StoredEntry {
    let (index, term) = position(&entry.log_id);
    let body = match entry.payload {
        EntryPayload::Blank => StoredBody::Blank,
        EntryPayload::Normal(Proposal::Batch(bytes)) => StoredBody::Data(bytes),
        EntryPayload::Normal(Proposal::Offsets(bytes)) => StoredBody::Offsets(bytes),
        EntryPayload::Normal(Proposal::Purge(below)) => StoredBody::Purge(below),
        EntryPayload::Membership(membership) => {
            StoredBody::Membership(encode_membership(&membership))
        }
    };
    StoredEntry { index, term, body }
}

/// The log store of one group over its backend, for the type
/// configuration `C` (production's by default, or the cluster
/// simulation's).
///
/// openraft requires a log store's writes to complete in order: a vote
/// saved, or a truncation or purge done, before the appends submitted
/// earlier are flushed would let it count those appends durable (a
/// follower answers its leader that they match, and the leader may commit
/// on them), though a crash can still take them. A backend flushes appends
/// later (the pump's commit phase) but saves a vote at once, so this store
/// holds a vote, a truncation or a purge until every earlier append's
/// flush is reported.
pub struct BackendLogStore<B: LogBackend, C = PartitionRaft> {
    backend: B,
    /// The appends not flushed yet (clones share them).
    unflushed: Rc<Unflushed>,
    types: PhantomData<fn() -> C>,
}

impl<B: LogBackend, C> Clone for BackendLogStore<B, C> {
    fn clone(&self) -> Self {
        BackendLogStore {
            backend: self.backend.clone(),
            unflushed: self.unflushed.clone(),
            types: PhantomData,
        }
    }
}

/// The appends whose flush is not reported yet, and the writes waiting for
/// them.
#[derive(Default)]
struct Unflushed {
    count: Cell<u64>,
    waiting: RefCell<Vec<Waker>>,
}

impl Unflushed {
    /// Counts an append until the returned guard is dropped (its flush is
    /// reported, or the backend dropped its callback).
    fn track(self: &Rc<Self>) -> UnflushedAppend {
        self.count.set(self.count.get() + 1);
        UnflushedAppend(self.clone())
    }

    /// Waits until every append counted so far is flushed.
    async fn drained(&self) {
        std::future::poll_fn(|context| {
            if self.count.get() == 0 {
                Poll::Ready(())
            } else {
                self.waiting.borrow_mut().push(context.waker().clone());
                Poll::Pending
            }
        })
        .await;
    }
}

/// One append not flushed yet.
struct UnflushedAppend(Rc<Unflushed>);

impl Drop for UnflushedAppend {
    fn drop(&mut self) {
        let unflushed = &self.0;
        unflushed.count.set(unflushed.count.get() - 1);
        if unflushed.count.get() == 0 {
            for waker in unflushed.waiting.borrow_mut().drain(..) {
                waker.wake();
            }
        }
    }
}

impl<B: LogBackend, C> Debug for BackendLogStore<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendLogStore").finish_non_exhaustive()
    }
}

impl<B: LogBackend, C> BackendLogStore<B, C> {
    pub fn new(backend: B) -> BackendLogStore<B, C> {
        BackendLogStore {
            backend,
            unflushed: Rc::new(Unflushed::default()),
            types: PhantomData,
        }
    }
}

impl<B: LogBackend, C: PartitionTypes> RaftLogReader<C> for BackendLogStore<B, C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let first = match range.start_bound() {
            Bound::Included(start) => *start,
            Bound::Excluded(start) => start.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(end) => end.saturating_add(1),
            Bound::Excluded(end) => *end,
            Bound::Unbounded => u64::MAX,
        };
        if first >= end {
            return Ok(Vec::new());
        }
        // openraft reads whole ranges (a lagging follower's); read them in
        // pieces of at most `READ_BYTES_MAX`.
        let mut entries = Vec::new();
        let mut next = first;
        while next < end {
            let piece = self
                .backend
                .read(next, end, READ_BYTES_MAX)
                .await
                .map_err(backend_error)?;
            let Some(last) = piece.last() else { break };
            next = last.index + 1;
            for stored in piece {
                entries.push(to_entry(stored)?);
            }
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let state = self.backend.state().await.map_err(backend_error)?;
        match state.vote {
            None => Ok(None),
            Some(bytes) => decode_vote(&bytes)
                .map(Some)
                .ok_or_else(|| invalid("a damaged vote".to_string())),
        }
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, io::Error> {
        // One piece: replication sends what fits, then asks again.
        let piece = self
            .backend
            .read(start, end, READ_BYTES_MAX)
            .await
            .map_err(backend_error)?;
        piece.into_iter().map(to_entry).collect()
    }
}

impl<B: LogBackend, C: PartitionTypes> RaftLogStorage<C> for BackendLogStore<B, C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let state = self.backend.state().await.map_err(backend_error)?;
        Ok(LogState {
            last_purged_log_id: state.purged.map(log_id),
            last_log_id: state.last.map(log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.unflushed.drained().await;
        self.backend
            .save_vote(encode_vote(vote))
            .await
            .map_err(backend_error)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.backend
            .save_committed(committed.as_ref().map(position))
            .await
            .map_err(backend_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let state = self.backend.state().await.map_err(backend_error)?;
        Ok(state.committed.map(log_id))
    }

    async fn append<It>(&mut self, entries: It, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        It: IntoIterator<Item = Entry>,
    {
        let entries: Vec<StoredEntry> = entries.into_iter().map(from_entry).collect();
        let unflushed = self.unflushed.track();
        let flushed: FlushedCallback = Box::new(move |result: Result<(), String>| {
            drop(unflushed);
            callback.io_completed(result.map_err(io::Error::other));
        });
        self.backend
            .append(entries, flushed)
            .await
            .map_err(backend_error)
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        self.unflushed.drained().await;
        self.backend
            .truncate_after(last.map(|id| id.index))
            .await
            .map_err(backend_error)
    }

    async fn purge(&mut self, upto: LogId) -> Result<(), io::Error> {
        self.unflushed.drained().await;
        self.backend
            .purge_through(position(&upto))
            .await
            .map_err(backend_error)
    }
}
