//! `PartitionLog`: the segments of one partition, its next offset, its
//! durability watermarks, the write-behind tail, rotation, retention deletes
//! and purge. Reads live in `read.rs`.
//!
//! This file owns the in-memory state of one partition's log and every
//! mutation of its files after recovery. It must be driven by one owner (the
//! shard's pump) one call at a time; it does not decide when to write or
//! fsync (callers do, see the durability contract in `storage/mod.rs`), does
//! not know about consumers or the wire beyond the batch layout, and never
//! panics on disk content. A failed write or fsync poisons it; corruption
//! found on open or on read quarantines it.
//!
//! Three watermarks, in order: `next_offset` (assigned: appended into the
//! tail, maybe not written), the active segment's `next_offset` (written:
//! the write completed, readable, survives `kill -9`), `durable_next_offset`
//! (fsynced, survives power loss).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::buf::{AlignedBuf, BufferPool, IO_ALIGN, align_down, align_up};
use super::index::IndexEntry;
use super::io::{Access, OpenMode, StorageIo};
use super::recovery::{RecoveryReport, create_segment_files, recover};
use super::segment::Segment;
use super::{INDEX_ENTRY_SIZE, StorageError, is_no_space};
use crate::batch::ValidBatch;
use crate::limits::{
    BATCH_BYTES_MAX, INDEX_SAMPLE_EVERY, SEGMENT_SIZE_DEFAULT_BYTES, TAIL_CHUNK_BYTES,
};

/// Time source for server timestamps, in µs since the Unix epoch.
pub trait Clock {
    fn now_micros(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_micros() as u64)
    }
}

/// Per-partition settings (from the topic and the daemon's I/O mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    /// Written into every stored batch header.
    pub partition_id: u64,
    /// The active segment is sealed before an append would take it past this
    /// size (a single larger batch gets a segment of its own).
    pub segment_size_bytes: u64,
    /// Keep every n-th index entry in memory (see [`INDEX_SAMPLE_EVERY`]).
    pub index_sample_every: u32,
    /// How `.log` data reaches the device: direct (aligned, no page-cache
    /// copy) or buffered. Indexes are always buffered.
    pub access: Access,
}

impl PartitionConfig {
    pub fn new(partition_id: u64, segment_size_bytes: u64) -> PartitionConfig {
        PartitionConfig {
            partition_id,
            segment_size_bytes,
            index_sample_every: INDEX_SAMPLE_EVERY,
            access: Access::Buffered,
        }
    }

    pub fn with_access(mut self, access: Access) -> PartitionConfig {
        self.access = access;
        self
    }
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig::new(0, SEGMENT_SIZE_DEFAULT_BYTES)
    }
}

/// Whether the partition accepts appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionState {
    Open,
    /// Corruption was found; readable up to it, nothing is written.
    Quarantined {
        reason: String,
    },
    /// A write or fsync failed; the process must restart.
    Poisoned {
        reason: String,
    },
}

/// Offsets assigned to an appended batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: u64,
    pub last_offset: u64,
    /// Server timestamp (µs) stamped on the batch.
    pub timestamp: u64,
}

/// What retention needs to know about a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    pub start_offset: u64,
    pub next_offset: u64,
    pub size_bytes: u64,
    /// Server timestamp (µs) of the segment's newest batch.
    pub last_timestamp: u64,
}

/// What `delete_oldest_segments` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeletedSegments {
    pub segments: usize,
    pub messages: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStats {
    pub messages: u64,
    pub bytes: u64,
    pub segments: usize,
    /// First offset still stored (equals `next_offset` when empty).
    pub first_offset: u64,
    pub next_offset: u64,
    /// Approximate heap bytes of the in-memory state.
    pub memory_bytes: usize,
}

/// Which generation of the partition's data an acknowledgement refers to.
/// A rollback (a failed write dropped appended batches, whose offsets are
/// then reused) or a purge (offsets restart at 0) changes it, so a waiter
/// can tell "my batch was written" from "a later batch got my offsets".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEpoch {
    pub rollbacks: u64,
    pub purges: u64,
}

/// An fsync of the active files, taken out of the log so it can run while
/// the owner goes on appending (see [`PartitionLog::begin_sync`]).
pub struct SyncJob<F> {
    log: Rc<F>,
    index: Rc<F>,
    /// The written watermarks the sync covers (captured at its start).
    next_offset: u64,
    written_bytes: u64,
    written_messages: u64,
    epoch: LogEpoch,
    background: bool,
}

impl<F> std::fmt::Debug for SyncJob<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncJob")
            .field("next_offset", &self.next_offset)
            .field("background", &self.background)
            .finish()
    }
}

impl<F> SyncJob<F> {
    /// fdatasyncs the log and the index at once (on a journaling file
    /// system the two then share one journal commit and one device flush).
    pub async fn run<I: StorageIo<File = F>>(&self, io: &I) -> Result<(), String> {
        let (log, index) = monoio::join!(io.sync(&self.log), io.sync(&self.index));
        log.map_err(|error| format!("fsync of the log failed: {error}"))?;
        index.map_err(|error| format!("fsync of the index failed: {error}"))
    }

    /// Offset one past the last message this sync makes durable.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }
}

impl<F: 'static> SyncJob<F> {
    /// [`Self::run`] as a future that owns what it needs, so it can run
    /// while its partition goes on appending (a background sync).
    pub fn run_owned<I: StorageIo<File = F> + 'static>(
        &self,
        io: I,
    ) -> impl std::future::Future<Output = Result<(), String>> + 'static {
        let log = self.log.clone();
        let index = self.index.clone();
        async move {
            let (log, index) = monoio::join!(io.sync(&log), io.sync(&index));
            log.map_err(|error| format!("fsync of the log failed: {error}"))?;
            index.map_err(|error| format!("fsync of the index failed: {error}"))
        }
    }
}

/// The write-behind tail of the active segment: an aligned buffer holding
/// the file's bytes from `start` to the logical end. Bytes before the
/// segment's written size are already on disk (in direct mode the partial
/// last block is kept so the next write can rewrite it whole); batches
/// after it are `pending`, appended but not yet written.
struct Tail {
    /// `None` only while a write owns the buffer.
    buf: Option<AlignedBuf>,
    /// File position of `buf[0]` (block aligned in direct mode).
    start: u64,
    /// Index entries of the pending batches, in order.
    pending: Vec<IndexEntry>,
    pending_bytes: u64,
}

impl Tail {
    fn buf(&self) -> &AlignedBuf {
        self.buf
            .as_ref()
            .expect("the tail buffer is home between writes")
    }

    fn buf_mut(&mut self) -> &mut AlignedBuf {
        self.buf
            .as_mut()
            .expect("the tail buffer is home between writes")
    }

    fn end(&self) -> u64 {
        self.start + self.buf().len() as u64
    }
}

/// One partition's log. See the module doc of `storage` for the contract.
pub struct PartitionLog<I: StorageIo> {
    pub(super) io: I,
    clock: Rc<dyn Clock>,
    pub(super) dir: PathBuf,
    config: PartitionConfig,
    pool: BufferPool,
    /// In offset order; the last one is active. Never empty. Describes
    /// written data only (pending batches are in `tail`).
    pub(super) segments: Vec<Segment>,
    /// The handle appends are written through (direct or buffered).
    active_log: Rc<I::File>,
    /// A buffered handle on the active `.log` for reads.
    pub(super) active_read: Rc<I::File>,
    pub(super) active_index: Rc<I::File>,
    state: RefCell<PartitionState>,
    tail: Tail,
    /// Offset the next appended message gets (pending batches included).
    next_offset: u64,
    durable_next_offset: u64,
    /// Monotone counters of written and fsynced data, for the flush policy.
    written_bytes: u64,
    synced_bytes: u64,
    written_messages: u64,
    synced_messages: u64,
    /// Timestamp of the newest appended batch (pending included).
    last_timestamp: u64,
    epoch: LogEpoch,
    /// A background sync runs (at most one at a time).
    background_sync: bool,
    recovery: RecoveryReport,
}

impl<I: StorageIo> std::fmt::Debug for PartitionLog<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("segments", &self.segments.len())
            .field("next_offset", &self.next_offset)
            .field("durable_next_offset", &self.durable_next_offset)
            .field("state", &self.state.borrow())
            .finish()
    }
}

impl<I: StorageIo> PartitionLog<I> {
    /// Opens the partition in `dir` (creating it when missing) and recovers
    /// it. After `open` every readable message is durable.
    pub async fn open(
        io: I,
        dir: impl Into<PathBuf>,
        config: PartitionConfig,
        clock: Rc<dyn Clock>,
        pool: BufferPool,
    ) -> Result<PartitionLog<I>, StorageError> {
        assert!(config.segment_size_bytes > 0);
        assert!(config.index_sample_every >= 1);
        let dir = dir.into();
        let recovered = recover(&io, &dir, config.index_sample_every).await?;
        let report = recovered.report;
        let segments = recovered.segments;
        let active = segments
            .last()
            .expect("recovery returns at least one segment");
        let (active_log, active_read, active_index) =
            open_active(&io, &dir, active, config.access, OpenMode::Existing).await?;
        let next_offset = active.next_offset;
        let last_timestamp = segments
            .iter()
            .map(|segment| segment.last_timestamp)
            .max()
            .unwrap_or(0);
        let state = match &report.corruption {
            Some(corruption) => {
                tracing::error!(dir = %dir.display(), "partition quarantined: {corruption}");
                PartitionState::Quarantined {
                    reason: corruption.to_string(),
                }
            }
            None => PartitionState::Open,
        };
        if let Some(torn) = &report.torn_tail {
            tracing::warn!(
                segment = %torn.segment.display(),
                position = torn.position,
                first_dropped_offset = torn.first_dropped_offset,
                bytes_dropped = torn.bytes_dropped,
                "truncated torn tail: {}",
                torn.reason
            );
        }
        for (path, entries) in &report.indexes_rebuilt {
            tracing::info!(index = %path.display(), entries, "rebuilt index from log");
        }
        let size_bytes = active.size_bytes;
        let mut log = PartitionLog {
            io,
            clock,
            dir,
            config,
            pool,
            segments,
            active_log,
            active_read,
            active_index,
            state: RefCell::new(state),
            tail: Tail {
                buf: None,
                start: 0,
                pending: Vec::new(),
                pending_bytes: 0,
            },
            next_offset,
            durable_next_offset: next_offset,
            written_bytes: 0,
            synced_bytes: 0,
            written_messages: 0,
            synced_messages: 0,
            last_timestamp,
            epoch: LogEpoch {
                rollbacks: 0,
                purges: 0,
            },
            background_sync: false,
            recovery: report,
        };
        log.load_tail(size_bytes).await?;
        Ok(log)
    }

    /// Points the tail at the end of the active segment (`size_bytes`), and
    /// in direct mode loads its partial last block, which the next write
    /// rewrites whole.
    async fn load_tail(&mut self, size_bytes: u64) -> Result<(), StorageError> {
        let start = match self.config.access {
            Access::Direct => align_down(size_bytes),
            Access::Buffered => size_bytes,
        };
        let partial = (size_bytes - start) as usize;
        let mut buf = self.pool.take(TAIL_IDLE_BYTES);
        if partial > 0 {
            let path = self.active().log_path(&self.dir);
            let bytes = self
                .io
                .read_exact_at(&self.active_read, start, partial)
                .await
                .map_err(|source| StorageError::io("read log tail", &path, source))?;
            buf.extend_from_slice(&bytes);
        }
        if let Some(old) = self.tail.buf.replace(buf) {
            self.pool.give(old);
        }
        self.tail.start = start;
        assert!(self.tail.end() == size_bytes);
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn state(&self) -> PartitionState {
        self.state.borrow().clone()
    }

    pub fn epoch(&self) -> LogEpoch {
        self.epoch
    }

    /// The offset the next appended message gets.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Offset one past the last written message (write completed).
    pub fn written_next_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// Highest offset written (the write completed), `None` when nothing
    /// was ever written (or since a purge).
    pub fn written_offset(&self) -> Option<u64> {
        self.written_next_offset().checked_sub(1)
    }

    /// Offset one past the last fsynced message.
    pub fn durable_next_offset(&self) -> u64 {
        self.durable_next_offset
    }

    /// Highest offset known to be fsynced.
    pub fn durable_offset(&self) -> Option<u64> {
        self.durable_next_offset.checked_sub(1)
    }

    /// The poll reply's `current_offset`: highest written offset, 0 when
    /// empty.
    pub fn current_offset(&self) -> u64 {
        self.written_offset().unwrap_or(0)
    }

    /// Written bytes not yet fsynced.
    pub fn unsynced_bytes(&self) -> u64 {
        self.written_bytes - self.synced_bytes
    }

    /// Written messages not yet fsynced.
    pub fn unsynced_messages(&self) -> u64 {
        self.written_messages - self.synced_messages
    }

    /// Appended batches waiting for [`Self::write_pending`].
    pub fn has_pending(&self) -> bool {
        !self.tail.pending.is_empty()
    }

    /// A background sync is running.
    pub fn background_sync_running(&self) -> bool {
        self.background_sync
    }

    /// First offset still stored (equals `next_offset` when empty).
    pub fn first_offset(&self) -> u64 {
        self.segments[0].start_offset
    }

    pub fn stats(&self) -> PartitionStats {
        PartitionStats {
            messages: self.written_next_offset() - self.first_offset(),
            bytes: self.segments.iter().map(|segment| segment.size_bytes).sum(),
            segments: self.segments.len(),
            first_offset: self.first_offset(),
            next_offset: self.written_next_offset(),
            memory_bytes: size_of::<Self>()
                + self.tail.buf.as_ref().map_or(0, AlignedBuf::capacity)
                + self.tail.pending.capacity() * size_of::<IndexEntry>()
                + self.segments.capacity() * size_of::<Segment>()
                + self
                    .segments
                    .iter()
                    .map(|segment| segment.sampled.memory_bytes())
                    .sum::<usize>(),
        }
    }

    fn check_writable(&self) -> Result<(), StorageError> {
        match &*self.state.borrow() {
            PartitionState::Open => Ok(()),
            PartitionState::Quarantined { reason } => Err(StorageError::Quarantined {
                reason: reason.clone(),
            }),
            PartitionState::Poisoned { reason } => Err(StorageError::Poisoned {
                reason: reason.clone(),
            }),
        }
    }

    pub(super) fn poison(&self, reason: String) -> StorageError {
        tracing::error!(dir = %self.dir.display(), "partition poisoned: {reason}");
        *self.state.borrow_mut() = PartitionState::Poisoned {
            reason: reason.clone(),
        };
        StorageError::Poisoned { reason }
    }

    pub(super) fn quarantine(&self, reason: String) {
        let mut state = self.state.borrow_mut();
        if *state == PartitionState::Open {
            tracing::error!(dir = %self.dir.display(), "partition quarantined: {reason}");
            *state = PartitionState::Quarantined { reason };
        }
    }

    pub(super) fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a partition always has an active segment")
    }

    /// Stamps one validated producer batch with its offsets and server time
    /// and appends it to the tail. Nothing is written yet: the batch becomes
    /// readable and survives a process crash once [`Self::write_pending`]
    /// returns, and survives power loss after a sync. An append that does
    /// not fit the tail buffer writes the pending batches first (flush by
    /// size); one that would pass the segment size seals the segment first.
    /// A write failure there fails this append and drops every pending
    /// batch (the epoch's `rollbacks` changes).
    pub async fn append(&mut self, batch: &ValidBatch) -> Result<AppendResult, StorageError> {
        self.check_writable()?;
        let batch_len = batch.len() as u64;
        if batch_len > BATCH_BYTES_MAX {
            return Err(StorageError::BatchTooLarge {
                found: batch_len,
                max: BATCH_BYTES_MAX,
            });
        }
        let message_count = batch.message_count();
        // Only reachable from a partition recovered near u64::MAX (a hostile
        // or damaged segment name), but offsets must never wrap.
        if self
            .next_offset
            .checked_add(u64::from(message_count))
            .is_none()
        {
            return Err(StorageError::OffsetsExhausted {
                next_offset: self.next_offset,
                message_count,
            });
        }
        if self.needs_rotation(batch_len, message_count) {
            self.write_pending().await?;
            self.rotate().await?;
        }
        if (self.tail.buf().remaining() as u64) < batch_len {
            // Flush by size: pending batches go out in one write once the
            // tail would pass a chunk; below that the buffer just grows.
            if self.tail.buf().len() as u64 + batch_len > TAIL_CHUNK_BYTES as u64 {
                self.write_pending().await?;
            }
            self.grow_tail(batch_len as usize);
        }
        let timestamp = self.clock.now_micros().max(self.last_timestamp);
        let base_offset = self.next_offset;
        let position = self.tail.end();
        let at = self.tail.buf().len();
        let tail = self.tail.buf_mut();
        tail.extend_from_slice(batch.bytes());
        let stored = &mut tail.as_mut_slice()[at..];
        let header = batch.stamp_copy(stored, self.config.partition_id, base_offset, timestamp);
        assert!(header.base_offset == base_offset);
        assert!(header.batch_length == batch_len);
        self.tail.pending.push(IndexEntry {
            base_offset,
            message_count,
            position,
            length: batch_len as u32,
            timestamp,
        });
        self.tail.pending_bytes += batch_len;
        self.next_offset = base_offset + u64::from(message_count);
        self.last_timestamp = timestamp;
        Ok(AppendResult {
            base_offset,
            last_offset: header.last_offset(),
            timestamp,
        })
    }

    /// Makes room in the tail for a batch of `batch_len` bytes: a buffer
    /// from the pool big enough for what the tail holds and the batch (at
    /// least a chunk, so a round of small batches grows it once).
    fn grow_tail(&mut self, batch_len: usize) {
        let kept = self.tail.buf().len();
        if self.tail.buf().remaining() >= batch_len {
            return;
        }
        let mut bigger = self.pool.take((kept + batch_len).max(TAIL_CHUNK_BYTES));
        bigger.extend_from_slice(self.tail.buf().as_slice());
        if let Some(old) = self.tail.buf.replace(bigger) {
            self.pool.give(old);
        }
    }

    /// Writes every pending batch with one write of the tail (in direct
    /// mode: from the partial block before them to the next block boundary,
    /// zero padded) and their index entries with one write. On success they
    /// are readable and count as written. On ENOSPC the write is rolled back
    /// and every pending batch dropped (`NoSpace`); other failures poison.
    pub async fn write_pending(&mut self) -> Result<(), StorageError> {
        if self.tail.pending.is_empty() {
            return Ok(());
        }
        self.check_writable()?;
        let written_end = self.active().size_bytes;
        let entry_count = self.active().entry_count;
        let mut buf = self.tail.buf.take().expect("the tail buffer is home");
        let logical_len = buf.len();
        let from = (written_end - self.tail.start) as usize;
        let (write_from, write_to) = match self.config.access {
            Access::Direct => (
                align_down(from as u64) as usize,
                align_up(logical_len as u64) as usize,
            ),
            Access::Buffered => (from, logical_len),
        };
        buf.zero_extend_to(write_to);
        let position = self.tail.start + write_from as u64;
        let (result, slice) = self
            .io
            .write_at(
                &self.active_log,
                monoio::buf::IoBuf::slice(buf, write_from..write_to),
                position,
            )
            .await;
        let mut buf = slice.into_inner();
        buf.truncate(logical_len);
        self.tail.buf = Some(buf);
        let log_path = self.active().log_path(&self.dir);
        if let Err(source) = result {
            return Err(self
                .fail_write(source, log_path, written_end, entry_count)
                .await);
        }
        let mut index_bytes = Vec::with_capacity(self.tail.pending.len() * INDEX_ENTRY_SIZE);
        let segment_start = self.active().start_offset;
        for entry in &self.tail.pending {
            index_bytes.extend_from_slice(&entry.encode(segment_start));
        }
        let index_position = entry_count * INDEX_ENTRY_SIZE as u64;
        let (result, _) = self
            .io
            .write_at(&self.active_index, index_bytes, index_position)
            .await;
        if let Err(source) = result {
            let index_path = self.active().index_path(&self.dir);
            return Err(self
                .fail_write(source, index_path, written_end, entry_count)
                .await);
        }
        let pending = std::mem::take(&mut self.tail.pending);
        let active = self.segments.last_mut().expect("active segment");
        for entry in &pending {
            active.push_entry(entry);
        }
        assert!(active.size_bytes == self.tail.start + logical_len as u64);
        assert!(active.next_offset == self.next_offset);
        self.written_bytes += self.tail.pending_bytes;
        self.written_messages += pending
            .iter()
            .map(|entry| u64::from(entry.message_count))
            .sum::<u64>();
        self.tail.pending_bytes = 0;
        self.tail.pending = pending;
        self.tail.pending.clear();
        self.recycle_tail();
        Ok(())
    }

    /// After a write: keep only what the next write needs (the partial last
    /// block in direct mode, nothing in buffered mode), in a small buffer,
    /// and return a big one to the pool.
    fn recycle_tail(&mut self) {
        let len = self.tail.buf().len() as u64;
        let keep_from = match self.config.access {
            Access::Direct => align_down(len),
            Access::Buffered => len,
        };
        if self.tail.buf().capacity() > TAIL_IDLE_BYTES {
            let mut small = self.pool.take(TAIL_IDLE_BYTES);
            small.extend_from_slice(&self.tail.buf().as_slice()[keep_from as usize..]);
            if let Some(big) = self.tail.buf.replace(small) {
                self.pool.give(big);
            }
        } else {
            self.tail.buf_mut().keep_from(keep_from as usize);
        }
        self.tail.start += keep_from;
    }

    /// A failed write of pending batches: on ENOSPC cut the partial bytes
    /// (the log stays a sequence of whole batches) and drop every pending
    /// batch; anything else poisons.
    async fn fail_write(
        &mut self,
        source: std::io::Error,
        path: PathBuf,
        log_len: u64,
        entry_count: u64,
    ) -> StorageError {
        if !is_no_space(&source) {
            return self.poison(format!("write to {} failed: {source}", path.display()));
        }
        if let Err(truncate_error) = self.io.truncate(&self.active_log, log_len).await {
            return self.poison(format!(
                "rolling back a failed write (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        let index_len = entry_count * INDEX_ENTRY_SIZE as u64;
        if let Err(truncate_error) = self.io.truncate(&self.active_index, index_len).await {
            return self.poison(format!(
                "rolling back a failed write (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        let dropped = self.tail.pending.len();
        self.tail.pending.clear();
        self.tail.pending_bytes = 0;
        let keep = (log_len - self.tail.start) as usize;
        self.tail.buf_mut().truncate(keep);
        self.next_offset = self.active().next_offset;
        self.last_timestamp = self
            .segments
            .iter()
            .map(|segment| segment.last_timestamp)
            .max()
            .unwrap_or(0);
        self.epoch.rollbacks += 1;
        tracing::warn!(path = %path.display(), batches = dropped, "write failed: no space left on device; the appended batches were dropped");
        StorageError::NoSpace { path, source }
    }

    fn needs_rotation(&self, batch_len: u64, message_count: u32) -> bool {
        let active = self.active();
        if active.is_empty() && self.tail.pending.is_empty() {
            return false;
        }
        let size = active.size_bytes + self.tail.pending_bytes;
        let too_big = size + batch_len > self.config.segment_size_bytes;
        let relative_last = self.next_offset + u64::from(message_count) - active.start_offset;
        too_big || relative_last > u64::from(u32::MAX)
    }

    /// Seals the active segment (cut to its exact size, fsync) and starts a
    /// new one at `next_offset`. Called with nothing pending.
    async fn rotate(&mut self) -> Result<(), StorageError> {
        assert!(self.tail.pending.is_empty());
        self.seal_active().await?;
        assert!(self.unsynced_bytes() == 0);
        let start_offset = self.next_offset;
        let (log, index) = create_segment_files(&self.io, &self.dir, start_offset).await?;
        drop((log, index));
        if let Err(source) = self.io.sync_dir(&self.dir).await {
            return Err(self.poison(format!(
                "fsync of directory {} failed: {source}",
                self.dir.display()
            )));
        }
        let segment = Segment::empty(start_offset, self.config.index_sample_every);
        let (active_log, active_read, active_index) = open_active(
            &self.io,
            &self.dir,
            &segment,
            self.config.access,
            OpenMode::Existing,
        )
        .await?;
        self.segments.push(segment);
        self.active_log = active_log;
        self.active_read = active_read;
        self.active_index = active_index;
        self.load_tail(0).await?;
        Ok(())
    }

    /// Makes the active segment's files exact and durable: in direct mode
    /// the `.log` ends in zero padding up to the next block, which is cut to
    /// the size of its batches (so a sealed segment's length is exact), then
    /// everything is fsynced (the cut too, a size change). Called with
    /// nothing pending.
    async fn seal_active(&mut self) -> Result<(), StorageError> {
        assert!(self.tail.pending.is_empty());
        self.sync().await?;
        if self.config.access == Access::Buffered {
            return Ok(());
        }
        let size = self.active().size_bytes;
        let path = self.active().log_path(&self.dir);
        let file_len = self
            .io
            .file_len(&self.active_log)
            .await
            .map_err(|source| StorageError::io("stat log", &path, source))?;
        if file_len == size {
            return Ok(());
        }
        if let Err(source) = self.io.truncate(&self.active_log, size).await {
            return Err(self.poison(format!(
                "cutting the padding of {} failed: {source}",
                path.display()
            )));
        }
        if let Err(source) = self.io.sync(&self.active_log).await {
            return Err(self.poison(format!("fsync of {} failed: {source}", path.display())));
        }
        Ok(())
    }

    /// Shutdown: write what is pending, cut the padding and fsync, so the
    /// next start finds exact files. A quarantined log is left as found.
    pub async fn close(&mut self) -> Result<(), StorageError> {
        match self.state() {
            PartitionState::Open => {
                self.write_pending().await?;
                self.seal_active().await
            }
            PartitionState::Quarantined { .. } => Ok(()),
            PartitionState::Poisoned { reason } => Err(StorageError::Poisoned { reason }),
        }
    }

    /// Starts an fsync of everything written so far. `background` syncs are
    /// at most one at a time (`None` while one runs); a foreground one may
    /// overlap it. `None` also when nothing written is unsynced. The caller
    /// runs the job and hands the outcome to [`Self::end_sync`].
    pub fn begin_sync(
        &mut self,
        background: bool,
    ) -> Result<Option<SyncJob<I::File>>, StorageError> {
        if let PartitionState::Poisoned { reason } = &*self.state.borrow() {
            return Err(StorageError::Poisoned {
                reason: reason.clone(),
            });
        }
        if self.unsynced_bytes() == 0 || (background && self.background_sync) {
            return Ok(None);
        }
        if background {
            self.background_sync = true;
        }
        Ok(Some(SyncJob {
            log: self.active_log.clone(),
            index: self.active_index.clone(),
            next_offset: self.written_next_offset(),
            written_bytes: self.written_bytes,
            written_messages: self.written_messages,
            epoch: self.epoch,
            background,
        }))
    }

    /// The outcome of a sync job: advances the durable watermark to what
    /// the job covered, or poisons the partition.
    pub fn end_sync(
        &mut self,
        job: SyncJob<I::File>,
        outcome: Result<(), String>,
    ) -> Result<(), StorageError> {
        if job.background {
            self.background_sync = false;
        }
        if job.epoch.purges != self.epoch.purges {
            // The files it synced were purged; nothing it covered exists.
            return Ok(());
        }
        if let Err(reason) = outcome {
            let path = self.active().log_path(&self.dir);
            return Err(self.poison(format!("{} ({})", reason, path.display())));
        }
        // A rollback drops only unwritten batches, never what a sync covers.
        self.durable_next_offset = self.durable_next_offset.max(job.next_offset);
        self.synced_bytes = self.synced_bytes.max(job.written_bytes);
        self.synced_messages = self.synced_messages.max(job.written_messages);
        Ok(())
    }

    /// Makes every written message durable (fdatasync of the active `.log`
    /// and `.index`). A failure poisons the partition.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        let Some(job) = self.begin_sync(false)? else {
            assert!(self.durable_next_offset >= self.written_next_offset());
            return Ok(());
        };
        let outcome = job.run(&self.io).await;
        self.end_sync(job, outcome)
    }

    /// [`Self::append`], then [`Self::write_pending`]: the batch is written
    /// (readable, survives a process crash) when this returns.
    pub async fn append_and_write(
        &mut self,
        batch: &ValidBatch,
    ) -> Result<AppendResult, StorageError> {
        let appended = self.append(batch).await?;
        self.write_pending().await?;
        Ok(appended)
    }

    /// The sealed segments (all but the active one), oldest first: what
    /// retention may delete.
    pub fn sealed_segments(&self) -> Vec<SegmentInfo> {
        let sealed = self.segments.len().saturating_sub(1);
        self.segments[..sealed]
            .iter()
            .map(|segment| SegmentInfo {
                start_offset: segment.start_offset,
                next_offset: segment.next_offset,
                size_bytes: segment.size_bytes,
                last_timestamp: segment.last_timestamp,
            })
            .collect()
    }

    /// Deletes up to `count` of the oldest sealed segments (never the active
    /// one). Used by retention and DeleteSegments.
    pub async fn delete_oldest_segments(
        &mut self,
        count: usize,
    ) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        let deletable = count.min(self.segments.len() - 1);
        let mut deleted = DeletedSegments::default();
        for _ in 0..deletable {
            let segment = self.segments.remove(0);
            assert!(!self.segments.is_empty());
            self.remove_segment_files(&segment).await?;
            deleted.segments += 1;
            deleted.messages += segment.message_count();
            deleted.bytes += segment.size_bytes;
        }
        if deleted.segments > 0 {
            self.sync_dir_or_poison().await?;
        }
        Ok(deleted)
    }

    async fn remove_segment_files(&self, segment: &Segment) -> Result<(), StorageError> {
        // Log first: an orphan index is harmless, an orphan log is a segment.
        for path in [segment.log_path(&self.dir), segment.index_path(&self.dir)] {
            match self.io.remove_file(&path).await {
                Ok(()) => {}
                Err(source) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(
                        self.poison(format!("removing {} failed: {source}", path.display()))
                    );
                }
            }
        }
        Ok(())
    }

    async fn sync_dir_or_poison(&self) -> Result<(), StorageError> {
        self.io.sync_dir(&self.dir).await.map_err(|source| {
            self.poison(format!(
                "fsync of directory {} failed: {source}",
                self.dir.display()
            ))
        })
    }

    /// Deletes every message and resets the partition to offset 0 (protocol
    /// §8 item 11). Pending batches are dropped with the rest (the epoch's
    /// `purges` changes). Segments are removed oldest first, so a crash
    /// midway leaves a valid (shorter) log that a repeated purge finishes.
    pub async fn purge(&mut self) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        let mut deleted = DeletedSegments::default();
        self.tail.pending.clear();
        self.tail.pending_bytes = 0;
        self.epoch.purges += 1;
        for segment in std::mem::take(&mut self.segments) {
            deleted.segments += 1;
            deleted.messages += segment.message_count();
            deleted.bytes += segment.size_bytes;
            if let Err(error) = self.remove_segment_files(&segment).await {
                self.segments.push(segment);
                return Err(error);
            }
        }
        let created = create_segment_files(&self.io, &self.dir, 0).await;
        let (log, index) = match created {
            Ok(files) => files,
            Err(error) => {
                return Err(self.poison(format!("purge could not create segment 0: {error}")));
            }
        };
        drop((log, index));
        self.sync_dir_or_poison().await?;
        let segment = Segment::empty(0, self.config.index_sample_every);
        let opened = open_active(
            &self.io,
            &self.dir,
            &segment,
            self.config.access,
            OpenMode::Existing,
        )
        .await;
        let (active_log, active_read, active_index) = match opened {
            Ok(files) => files,
            Err(error) => {
                return Err(self.poison(format!("purge could not open segment 0: {error}")));
            }
        };
        self.segments.push(segment);
        self.active_log = active_log;
        self.active_read = active_read;
        self.active_index = active_index;
        self.next_offset = 0;
        self.durable_next_offset = 0;
        self.synced_bytes = self.written_bytes;
        self.synced_messages = self.written_messages;
        self.load_tail(0).await?;
        Ok(deleted)
    }
}

/// Opens the active segment's files: the `.log` for writes (direct or
/// buffered), a buffered `.log` handle for reads (the same one in buffered
/// mode) and the `.index`.
async fn open_active<I: StorageIo>(
    io: &I,
    dir: &Path,
    segment: &Segment,
    access: Access,
    mode: OpenMode,
) -> Result<(Rc<I::File>, Rc<I::File>, Rc<I::File>), StorageError> {
    let log_path = segment.log_path(dir);
    let index_path = segment.index_path(dir);
    let active_read = Rc::new(
        io.open(&log_path, mode)
            .await
            .map_err(|source| StorageError::io("open log", &log_path, source))?,
    );
    let active_log = match access {
        Access::Buffered => active_read.clone(),
        Access::Direct => Rc::new(
            io.open_with(&log_path, OpenMode::Existing, Access::Direct)
                .await
                .map_err(|source| StorageError::io("open log (direct)", &log_path, source))?,
        ),
    };
    let active_index = Rc::new(
        io.open(&index_path, OpenMode::Create)
            .await
            .map_err(|source| StorageError::io("open index", &index_path, source))?,
    );
    Ok((active_log, active_read, active_index))
}

/// Capacity of a partition's tail buffer between writes: the partial last
/// block plus room for small batches.
const TAIL_IDLE_BYTES: usize = 2 * IO_ALIGN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchHeader, MessageSpec, encode_producer_batch, frames};
    use crate::storage::io::test_runtime as runtime;
    use crate::storage::{MonoioIo, ReadBatches};

    fn producer_batch(messages: usize, payload_len: usize) -> ValidBatch {
        let specs: Vec<MessageSpec> = (0..messages)
            .map(|index| MessageSpec {
                id: index as u128 + 1,
                timestamp_delta: index as u32,
                payload: vec![index as u8; payload_len],
                user_headers: vec![],
            })
            .collect();
        let bytes = encode_producer_batch(1, &specs);
        let len = bytes.len();
        ValidBatch::new(bytes, 0..len).unwrap()
    }

    fn offsets(read: &ReadBatches) -> Vec<u64> {
        let mut offsets = Vec::new();
        let mut rest = read.records_bytes();
        while !rest.is_empty() {
            let header = BatchHeader::decode(rest).unwrap();
            let record = &rest[..header.batch_length as usize];
            offsets.extend(frames(record).unwrap().map(|frame| frame.unwrap().offset));
            rest = &rest[header.batch_length as usize..];
        }
        offsets
    }

    fn pool() -> BufferPool {
        BufferPool::new(1 << 20)
    }

    // On real files (monoio, legacy driver), in both I/O modes: append,
    // write, sync, rotate, reopen, and read back by offset, timestamp,
    // first and last; sealed segments have their exact size.
    #[test]
    fn monoio_append_sync_reopen_read() {
        for access in [Access::Buffered, Access::Direct] {
            let dir = tempfile::tempdir().unwrap();
            let partition_dir = dir.path().join("streams/1/topics/1/partitions/0");
            runtime().block_on(append_sync_reopen_read(partition_dir, access));
        }
    }

    async fn append_sync_reopen_read(partition_dir: PathBuf, access: Access) {
        let config = PartitionConfig {
            partition_id: 3,
            segment_size_bytes: 4096,
            index_sample_every: 2,
            access,
        };
        let clock: Rc<dyn Clock> = Rc::new(SystemClock);
        let mut log = PartitionLog::open(
            MonoioIo,
            &partition_dir,
            config.clone(),
            clock.clone(),
            pool(),
        )
        .await
        .unwrap();
        assert_eq!(log.written_offset(), None);
        for round in 0..20u64 {
            let appended = log.append(&producer_batch(3, 300)).await.unwrap();
            assert_eq!(appended.base_offset, round * 3);
            assert_eq!(appended.last_offset, round * 3 + 2);
            if round % 3 == 2 {
                log.write_pending().await.unwrap();
            }
        }
        assert_eq!(log.next_offset(), 60);
        log.write_pending().await.unwrap();
        assert_eq!(log.written_offset(), Some(59));
        assert!(log.unsynced_messages() > 0);
        log.sync().await.unwrap();
        assert_eq!(log.durable_offset(), Some(59));
        assert!(log.stats().segments > 1);
        for sealed in &log.segments[..log.segments.len() - 1] {
            let path = sealed.log_path(&partition_dir);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), sealed.size_bytes);
        }
        log.close().await.unwrap();
        drop(log);

        let log = PartitionLog::open(MonoioIo, &partition_dir, config, clock, pool())
            .await
            .unwrap();
        assert_eq!(log.state(), PartitionState::Open);
        assert_eq!(log.recovery_report().torn_tail, None, "{access:?}");
        assert_eq!(log.next_offset(), 60);
        let read = log.read_by_offset(10, 7, u64::MAX).await.unwrap();
        assert_eq!(offsets(&read), (10..17).collect::<Vec<_>>());
        assert_eq!(read.message_count, 7);
        let first = log.read_first(2, u64::MAX).await.unwrap();
        assert_eq!(offsets(&first), vec![0, 1]);
        let last = log.read_last(4, u64::MAX).await.unwrap();
        assert_eq!(offsets(&last), vec![56, 57, 58, 59]);
        let by_time = log.read_by_timestamp(0, 1, u64::MAX).await.unwrap();
        assert_eq!(offsets(&by_time), vec![0]);
        let with_headroom = log.read_by_offset_into(10, 7, u64::MAX, 272).await.unwrap();
        assert_eq!(with_headroom.headroom, 272);
        assert_eq!(with_headroom.records_bytes(), read.records_bytes());
        assert_eq!(log.verify().await.unwrap(), 60);
        let stored = std::fs::read(partition_dir.join("00000000000000000000.log")).unwrap();
        let header = BatchHeader::decode(&stored).unwrap();
        assert_eq!(header.partition_id, 3);
    }

    // Direct mode: a write pads the file to the next block with zeros and
    // the next write rewrites the partial block whole; a process crash
    // (no close) leaves the padding, which recovery trims without calling
    // it a torn tail; appends continue where the written data ends.
    #[test]
    fn direct_writes_rewrite_the_tail_block_and_padding_is_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let clock: Rc<dyn Clock> = Rc::new(SystemClock);
            let config = PartitionConfig::new(0, 1 << 20).with_access(Access::Direct);
            let mut log =
                PartitionLog::open(MonoioIo, dir.path(), config.clone(), clock.clone(), pool())
                    .await
                    .unwrap();
            let path = dir.path().join("00000000000000000000.log");
            log.append_and_write(&producer_batch(2, 10)).await.unwrap();
            let size = log.active().size_bytes;
            assert!(size % IO_ALIGN as u64 != 0);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), align_up(size));
            log.append_and_write(&producer_batch(3, 2000))
                .await
                .unwrap();
            let size = log.active().size_bytes;
            assert_eq!(std::fs::metadata(&path).unwrap().len(), align_up(size));
            log.sync().await.unwrap();
            drop(log);
            let mut log = PartitionLog::open(MonoioIo, dir.path(), config, clock, pool())
                .await
                .unwrap();
            assert_eq!(log.recovery_report().torn_tail, None);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
            assert_eq!(log.next_offset(), 5);
            let appended = log.append_and_write(&producer_batch(1, 1)).await.unwrap();
            assert_eq!(appended.base_offset, 5);
            let read = log.read_by_offset(0, 10, u64::MAX).await.unwrap();
            assert_eq!(offsets(&read), (0..6).collect::<Vec<_>>());
        });
    }

    // A torn tail on real files (a half-written batch) is truncated on open.
    #[test]
    fn monoio_torn_tail_truncated() {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let clock: Rc<dyn Clock> = Rc::new(SystemClock);
            let config = PartitionConfig::new(0, 1 << 20);
            let mut log =
                PartitionLog::open(MonoioIo, dir.path(), config.clone(), clock.clone(), pool())
                    .await
                    .unwrap();
            log.append_and_write(&producer_batch(2, 10)).await.unwrap();
            log.sync().await.unwrap();
            drop(log);
            let path = dir.path().join("00000000000000000000.log");
            let good_len = std::fs::metadata(&path).unwrap().len();
            let torn = producer_batch(5, 100);
            let half = &torn.bytes()[..200];
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend_from_slice(half);
            std::fs::write(&path, bytes).unwrap();
            let mut log = PartitionLog::open(MonoioIo, dir.path(), config, clock, pool())
                .await
                .unwrap();
            let torn = log.recovery_report().torn_tail.clone().unwrap();
            assert_eq!(torn.position, good_len);
            assert_eq!(torn.first_dropped_offset, 2);
            assert_eq!(torn.bytes_dropped, 200);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
            assert_eq!(
                log.append_and_write(&producer_batch(1, 1))
                    .await
                    .unwrap()
                    .base_offset,
                2
            );
        });
    }
}
