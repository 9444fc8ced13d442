//! `PartitionLog`: the segments of one partition, its next offset, its
//! durability watermarks and syncs, and the three paths that hold state of
//! their own: the write path's `WriteTail` (`write.rs`), the read path's
//! `ReadPath` (`read.rs`) and its `ReadAhead` (`read_ahead.rs`), each of
//! whose fields only its own file touches.
//!
//! This file owns the state the paths share (segments, active files,
//! watermarks, configuration, I/O, buffer pool) and every mutation of its
//! files after recovery. It must be driven by one owner (the
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

use super::StorageError;
use super::buf::BufferPool;
use super::io::{Access, OpenMode, StorageIo};
use super::read::ReadPath;
use super::read_ahead::ReadAhead;
use super::recovery::{RecoveryReport, recover};
use super::segment::Segment;
use super::write::WriteTail;
use crate::limits::{INDEX_SAMPLE_EVERY, READ_WINDOW_BYTES};

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
    /// Bytes a read window reads at once (a multiple of the I/O
    /// alignment): [`READ_WINDOW_BYTES`]; the simulations make it small so
    /// that their polls span and replace windows.
    pub read_window_bytes: usize,
}

impl PartitionConfig {
    pub fn new(partition_id: u64, segment_size_bytes: u64) -> PartitionConfig {
        PartitionConfig {
            partition_id,
            segment_size_bytes,
            index_sample_every: INDEX_SAMPLE_EVERY,
            access: Access::Buffered,
            read_window_bytes: READ_WINDOW_BYTES,
        }
    }

    /// The same with read windows of `bytes` (rounded up to the I/O
    /// alignment).
    pub fn with_read_window(mut self, bytes: usize) -> PartitionConfig {
        self.read_window_bytes = super::buf::align_up(bytes.max(1) as u64) as usize;
        self
    }

    pub fn with_access(mut self, access: Access) -> PartitionConfig {
        self.access = access;
        self
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
    pub(super) next_offset: u64,
    pub(super) written_bytes: u64,
    pub(super) written_messages: u64,
    pub(super) epoch: LogEpoch,
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

/// One partition's log. See the module doc of `storage` for the contract.
pub struct PartitionLog<I: StorageIo> {
    pub(super) io: I,
    pub(super) clock: Rc<dyn Clock>,
    pub(super) dir: PathBuf,
    pub(super) config: PartitionConfig,
    pub(super) pool: BufferPool,
    /// In offset order; the last one is active. Never empty. Describes
    /// written data only (pending batches are in `tail`).
    pub(super) segments: Vec<Segment>,
    /// The handle appends are written through (direct or buffered).
    pub(super) active_log: Rc<I::File>,
    /// A buffered handle on the active `.log` for reads.
    pub(super) active_read: Rc<I::File>,
    pub(super) active_index: Rc<I::File>,
    pub(super) state: RefCell<PartitionState>,
    /// The write-behind tail and its pending batches (`write.rs`).
    pub(super) tail: WriteTail,
    /// Offset the next appended message gets (pending batches included).
    pub(super) next_offset: u64,
    pub(super) durable_next_offset: u64,
    /// Monotone counters of written and fsynced data, for the flush policy.
    pub(super) written_bytes: u64,
    pub(super) synced_bytes: u64,
    pub(super) written_messages: u64,
    pub(super) synced_messages: u64,
    /// Timestamp of the newest appended batch (pending included).
    pub(super) last_timestamp: u64,
    pub(super) epoch: LogEpoch,
    /// A background sync runs (at most one at a time).
    pub(super) background_sync: bool,
    pub(super) recovery: RecoveryReport,
    /// What polls are served from and where the last read ended
    /// (`read.rs`).
    pub(super) read_path: ReadPath,
    /// The read of the window after the current one, parked reads and
    /// reads dropped in flight (`read_ahead.rs`).
    pub(super) read_ahead: ReadAhead,
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
        #[expect(
            clippy::expect_used,
            reason = "recover() creates segment 0 in a directory that has none"
        )]
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
            tail: WriteTail::new(),
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
            read_path: ReadPath::new(),
            read_ahead: ReadAhead::new(),
        };
        log.load_tail(size_bytes).await?;
        Ok(log)
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
        // No segment only after a failed purge (the partition is poisoned).
        self.segments
            .last()
            .map_or(self.next_offset, |segment| segment.next_offset)
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
    /// Asserts the order of the three watermarks every acknowledgement and
    /// every read relies on: durable ≤ written ≤ assigned. The pump checks
    /// it after each phase that moves one (`commit.rs`); the appends and
    /// syncs that move them check their own side.
    pub fn assert_watermarks(&self) {
        let durable = self.durable_next_offset();
        let written = self.written_next_offset();
        assert!(
            durable <= written,
            "durable {durable} past written {written}"
        );
        assert!(
            written <= self.next_offset,
            "written {written} past assigned {}",
            self.next_offset
        );
    }

    pub fn has_pending(&self) -> bool {
        self.tail.has_pending()
    }

    /// A background sync is running.
    pub fn background_sync_running(&self) -> bool {
        self.background_sync
    }

    /// First offset still stored (equals `next_offset` when empty). A
    /// purge that failed midway may leave a poisoned partition without any
    /// segment: then it is the next offset, never a panic.
    pub fn first_offset(&self) -> u64 {
        self.segments
            .first()
            .map_or(self.next_offset, |segment| segment.start_offset)
    }

    pub fn stats(&self) -> PartitionStats {
        PartitionStats {
            messages: self.written_next_offset() - self.first_offset(),
            bytes: self.segments.iter().map(|segment| segment.size_bytes).sum(),
            segments: self.segments.len(),
            first_offset: self.first_offset(),
            next_offset: self.written_next_offset(),
            memory_bytes: size_of::<Self>()
                + self.tail.memory_bytes()
                + self.segments.capacity() * size_of::<Segment>()
                + self
                    .segments
                    .iter()
                    .map(|segment| segment.sampled.memory_bytes())
                    .sum::<usize>(),
        }
    }

    pub(super) fn check_writable(&self) -> Result<(), StorageError> {
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

    #[expect(
        clippy::expect_used,
        reason = "open() starts with a segment and deletion never removes the last one"
    )]
    pub(super) fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a partition always has an active segment")
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
        assert!(
            job.next_offset <= self.written_next_offset(),
            "a sync covered {} but only {} is written",
            job.next_offset,
            self.written_next_offset()
        );
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

    /// Every segment, oldest first, the active one last (for the console).
    pub fn segment_infos(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|segment| SegmentInfo {
                start_offset: segment.start_offset,
                next_offset: segment.next_offset,
                size_bytes: segment.size_bytes,
                last_timestamp: segment.last_timestamp,
            })
            .collect()
    }

    /// The sealed segments (all but the active one), oldest first: what
    /// retention may delete.
    pub fn sealed_segments(&self) -> Vec<SegmentInfo> {
        let sealed = self.segments.len().saturating_sub(1);
        self.segments
            .iter()
            .take(sealed)
            .map(|segment| SegmentInfo {
                start_offset: segment.start_offset,
                next_offset: segment.next_offset,
                size_bytes: segment.size_bytes,
                last_timestamp: segment.last_timestamp,
            })
            .collect()
    }
}

/// Opens the active segment's files: the `.log` for writes (direct or
/// buffered), a buffered `.log` handle for reads (the same one in buffered
/// mode) and the `.index`.
pub(super) async fn open_active<I: StorageIo>(
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
