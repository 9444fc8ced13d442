//! `PartitionLog`: the segments of one partition, its next offset, its
//! durability watermarks, reads, rotation, retention deletes and purge.
//!
//! This file owns the in-memory state of one partition's log and every
//! mutation of its files after recovery. It must be driven by one owner (the
//! shard's pump) one call at a time; it does not decide when to fsync
//! (callers do, see the durability contract in `storage/mod.rs`), does not
//! know about consumers or the wire beyond the batch layout, and never
//! panics on disk content. A failed write or fsync poisons it; corruption
//! found on open or on read quarantines it.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::index::IndexEntry;
use super::io::{OpenMode, StorageIo};
use super::recovery::{RecoveryReport, create_segment_files, recover};
use super::segment::Segment;
use super::{INDEX_ENTRY_SIZE, StorageError, is_no_space};
use crate::batch::{self, BatchHeader};
use crate::limits::{
    BATCH_BYTES_MAX, INDEX_READ_ENTRIES_MAX, INDEX_SAMPLE_EVERY, SEGMENT_SIZE_DEFAULT_BYTES,
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

/// Per-partition settings (from the topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    /// Written into every stored batch header.
    pub partition_id: u64,
    /// The active segment is sealed before an append would take it past this
    /// size (a single larger batch gets a segment of its own).
    pub segment_size_bytes: u64,
    /// Keep every n-th index entry in memory (see [`INDEX_SAMPLE_EVERY`]).
    pub index_sample_every: u32,
}

impl PartitionConfig {
    pub fn new(partition_id: u64, segment_size_bytes: u64) -> PartitionConfig {
        PartitionConfig {
            partition_id,
            segment_size_bytes,
            index_sample_every: INDEX_SAMPLE_EVERY,
        }
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

/// Stored batch records returned by a read, concatenated (ready to follow a
/// poll reply prefix).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBatches {
    pub bytes: Vec<u8>,
    pub records: u32,
    pub message_count: u32,
    pub first_offset: Option<u64>,
    pub last_offset: Option<u64>,
}

impl ReadBatches {
    /// Takes `bytes` (whole stored records, checked by the caller) as the
    /// first part of the answer, without copying.
    fn adopt(&mut self, bytes: Vec<u8>, records: u32, first_offset: u64, message_count: u32) {
        assert!(self.bytes.is_empty());
        assert!(records >= 1);
        assert!(message_count >= 1);
        self.bytes = bytes;
        self.records += records;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }

    fn push(&mut self, record: &[u8], first_offset: u64, message_count: u32) {
        assert!(message_count >= 1);
        self.bytes.extend_from_slice(record);
        self.records += 1;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }
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

/// One partition's log. See the module doc of `storage` for the contract.
pub struct PartitionLog<I: StorageIo> {
    io: I,
    clock: Rc<dyn Clock>,
    dir: PathBuf,
    config: PartitionConfig,
    /// In offset order; the last one is active. Never empty.
    segments: Vec<Segment>,
    active_log: Rc<I::File>,
    active_index: Rc<I::File>,
    state: RefCell<PartitionState>,
    next_offset: u64,
    durable_next_offset: u64,
    unsynced_bytes: u64,
    unsynced_messages: u64,
    last_timestamp: u64,
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
        let log_path = active.log_path(&dir);
        let index_path = active.index_path(&dir);
        let active_log = io
            .open(&log_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open log", &log_path, source))?;
        let active_index = io
            .open(&index_path, OpenMode::Create)
            .await
            .map_err(|source| StorageError::io("open index", &index_path, source))?;
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
        Ok(PartitionLog {
            io,
            clock,
            dir,
            config,
            segments,
            active_log: Rc::new(active_log),
            active_index: Rc::new(active_index),
            state: RefCell::new(state),
            next_offset,
            durable_next_offset: next_offset,
            unsynced_bytes: 0,
            unsynced_messages: 0,
            last_timestamp,
            recovery: report,
        })
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

    /// The offset the next appended message gets.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Highest offset written (page cache), `None` when nothing was ever
    /// appended (or since a purge).
    pub fn written_offset(&self) -> Option<u64> {
        self.next_offset.checked_sub(1)
    }

    /// Highest offset known to be fsynced.
    pub fn durable_offset(&self) -> Option<u64> {
        self.durable_next_offset.checked_sub(1)
    }

    /// The poll reply's `current_offset`: highest stored offset, 0 when empty.
    pub fn current_offset(&self) -> u64 {
        self.written_offset().unwrap_or(0)
    }

    pub fn unsynced_bytes(&self) -> u64 {
        self.unsynced_bytes
    }

    pub fn unsynced_messages(&self) -> u64 {
        self.unsynced_messages
    }

    /// First offset still stored (equals `next_offset` when empty).
    pub fn first_offset(&self) -> u64 {
        self.segments[0].start_offset
    }

    pub fn stats(&self) -> PartitionStats {
        PartitionStats {
            messages: self.next_offset - self.first_offset(),
            bytes: self.segments.iter().map(|segment| segment.size_bytes).sum(),
            segments: self.segments.len(),
            first_offset: self.first_offset(),
            next_offset: self.next_offset,
            memory_bytes: size_of::<Self>()
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

    fn poison(&self, reason: String) -> StorageError {
        tracing::error!(dir = %self.dir.display(), "partition poisoned: {reason}");
        *self.state.borrow_mut() = PartitionState::Poisoned {
            reason: reason.clone(),
        };
        StorageError::Poisoned { reason }
    }

    fn quarantine(&self, reason: String) {
        let mut state = self.state.borrow_mut();
        if *state == PartitionState::Open {
            tracing::error!(dir = %self.dir.display(), "partition quarantined: {reason}");
            *state = PartitionState::Quarantined { reason };
        }
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a partition always has an active segment")
    }

    /// Validates, stamps and writes one producer batch to the active segment.
    /// Returns once the bytes are in the page cache; call [`Self::sync`] to
    /// make them durable. On ENOSPC the append is rolled back and
    /// [`StorageError::NoSpace`] returned; other write failures poison.
    pub async fn append(&mut self, mut batch: Vec<u8>) -> Result<AppendResult, StorageError> {
        self.check_writable()?;
        if batch.len() as u64 > BATCH_BYTES_MAX {
            return Err(StorageError::BatchTooLarge {
                found: batch.len() as u64,
                max: BATCH_BYTES_MAX,
            });
        }
        let summary = batch::validate(&batch).map_err(StorageError::InvalidBatch)?;
        let message_count = summary.header.message_count;
        let batch_len = batch.len() as u64;
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
            self.rotate().await?;
        }
        let timestamp = self.clock.now_micros().max(self.last_timestamp);
        let base_offset = self.next_offset;
        let header = batch::stamp(&mut batch, self.config.partition_id, base_offset, timestamp)
            .map_err(StorageError::InvalidBatch)?;
        assert!(header.base_offset == base_offset);
        assert!(header.batch_length == batch_len);

        let active = self.active();
        let position = active.size_bytes;
        let index_position = active.entry_count * INDEX_ENTRY_SIZE as u64;
        let entry = IndexEntry {
            base_offset,
            message_count,
            position,
            length: batch_len as u32,
            timestamp,
        };
        let entry_bytes = entry.encode(active.start_offset).to_vec();
        let log_path = active.log_path(&self.dir);
        let index_path = active.index_path(&self.dir);

        let (result, _) = self.io.write_at(&self.active_log, batch, position).await;
        if let Err(source) = result {
            return Err(self
                .fail_append(source, log_path, position, index_position)
                .await);
        }
        let (result, _) = self
            .io
            .write_at(&self.active_index, entry_bytes, index_position)
            .await;
        if let Err(source) = result {
            return Err(self
                .fail_append(source, index_path, position, index_position)
                .await);
        }
        let active = self.segments.last_mut().expect("active segment");
        active.push_entry(&entry);
        assert!(active.size_bytes == position + batch_len);
        assert!(active.next_offset == base_offset + u64::from(message_count));
        self.next_offset = active.next_offset;
        self.last_timestamp = timestamp;
        self.unsynced_bytes += batch_len;
        self.unsynced_messages += u64::from(message_count);
        Ok(AppendResult {
            base_offset,
            last_offset: header.last_offset(),
            timestamp,
        })
    }

    /// A failed append write: roll back on ENOSPC, poison otherwise.
    async fn fail_append(
        &self,
        source: std::io::Error,
        path: PathBuf,
        log_len: u64,
        index_len: u64,
    ) -> StorageError {
        if !is_no_space(&source) {
            return self.poison(format!("write to {} failed: {source}", path.display()));
        }
        // Cut the partial bytes so the log stays a sequence of whole batches.
        if let Err(truncate_error) = self.io.truncate(&self.active_log, log_len).await {
            return self.poison(format!(
                "rolling back a failed append (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        if let Err(truncate_error) = self.io.truncate(&self.active_index, index_len).await {
            return self.poison(format!(
                "rolling back a failed append (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        tracing::warn!(path = %path.display(), "append failed: no space left on device");
        StorageError::NoSpace { path, source }
    }

    fn needs_rotation(&self, batch_len: u64, message_count: u32) -> bool {
        let active = self.active();
        if active.is_empty() {
            return false;
        }
        let too_big = active.size_bytes + batch_len > self.config.segment_size_bytes;
        let relative_last = self.next_offset + u64::from(message_count) - active.start_offset;
        too_big || relative_last > u64::from(u32::MAX)
    }

    /// Seals the active segment (fsync) and starts a new one at `next_offset`.
    async fn rotate(&mut self) -> Result<(), StorageError> {
        self.sync().await?;
        assert!(self.unsynced_bytes == 0);
        let start_offset = self.next_offset;
        let (log, index) = create_segment_files(&self.io, &self.dir, start_offset).await?;
        if let Err(source) = self.io.sync_dir(&self.dir).await {
            return Err(self.poison(format!(
                "fsync of directory {} failed: {source}",
                self.dir.display()
            )));
        }
        self.segments
            .push(Segment::empty(start_offset, self.config.index_sample_every));
        self.active_log = Rc::new(log);
        self.active_index = Rc::new(index);
        Ok(())
    }

    /// Makes every written message durable (fdatasync of the active `.log`
    /// and `.index`). A failure poisons the partition.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        match &*self.state.borrow() {
            PartitionState::Poisoned { reason } => {
                return Err(StorageError::Poisoned {
                    reason: reason.clone(),
                });
            }
            PartitionState::Quarantined { .. } | PartitionState::Open => {}
        }
        if self.unsynced_bytes == 0 {
            assert!(self.durable_next_offset == self.next_offset);
            return Ok(());
        }
        let active = self.active();
        // Both files at once: on a journaling file system the two
        // fdatasyncs then share one journal commit and one device flush
        // instead of paying for two in a row.
        let (log_synced, index_synced) = monoio::join!(
            self.io.sync(&self.active_log),
            self.io.sync(&self.active_index)
        );
        if let Err(source) = log_synced {
            let path = active.log_path(&self.dir);
            return Err(self.poison(format!("fsync of {} failed: {source}", path.display())));
        }
        if let Err(source) = index_synced {
            let path = active.index_path(&self.dir);
            return Err(self.poison(format!("fsync of {} failed: {source}", path.display())));
        }
        self.durable_next_offset = self.next_offset;
        self.unsynced_bytes = 0;
        self.unsynced_messages = 0;
        Ok(())
    }

    async fn segment_files(
        &self,
        segment_number: usize,
    ) -> Result<(Rc<I::File>, Rc<I::File>), StorageError> {
        if segment_number + 1 == self.segments.len() {
            return Ok((self.active_log.clone(), self.active_index.clone()));
        }
        let segment = &self.segments[segment_number];
        let log_path = segment.log_path(&self.dir);
        let index_path = segment.index_path(&self.dir);
        let log = self
            .io
            .open(&log_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open log", &log_path, source))?;
        let index = self
            .io
            .open(&index_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open index", &index_path, source))?;
        Ok((Rc::new(log), Rc::new(index)))
    }

    /// Reads up to `count` messages starting at `offset` (or the first stored
    /// offset if `offset` is older), returning stored records; the first and
    /// last record are sliced to the range. `bytes_max` caps the bytes
    /// returned, except that the first record is always returned.
    pub async fn read_by_offset(
        &self,
        offset: u64,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        let mut out = ReadBatches::default();
        if count == 0 || offset >= self.next_offset {
            return Ok(out);
        }
        let mut wanted = offset.max(self.first_offset());
        let mut remaining = count;
        let mut segment_number = self
            .segments
            .partition_point(|segment| segment.next_offset <= wanted);
        while segment_number < self.segments.len() && remaining > 0 {
            let segment = &self.segments[segment_number];
            if segment.is_empty() || wanted >= segment.next_offset {
                segment_number += 1;
                continue;
            }
            let (log, index) = self.segment_files(segment_number).await?;
            let (mut entry_number, _) = segment
                .locate_offset(&self.io, &index, &self.dir, wanted)
                .await?;
            while remaining > 0 && entry_number < segment.entry_count {
                let entries = segment
                    .read_entries(
                        &self.io,
                        &index,
                        &self.dir,
                        entry_number,
                        entry_number + INDEX_READ_ENTRIES_MAX,
                    )
                    .await?;
                assert!(!entries.is_empty());
                // Plan the records to return from this window.
                let mut planned = 0usize;
                let mut planned_messages = 0u64;
                let mut planned_bytes = 0u64;
                for entry in &entries {
                    if planned_messages >= u64::from(remaining) {
                        break;
                    }
                    let first_record = out.bytes.is_empty() && planned == 0;
                    let fits = out.bytes.len() as u64 + planned_bytes + u64::from(entry.length)
                        <= bytes_max;
                    if !first_record && !fits {
                        break;
                    }
                    let skip = wanted.max(entry.base_offset) - entry.base_offset;
                    planned_messages += u64::from(entry.message_count) - skip;
                    planned_bytes += u64::from(entry.length);
                    planned += 1;
                }
                if planned == 0 {
                    return Ok(out);
                }
                let plan = &entries[..planned];
                let span_start = plan[0].position;
                let span_end = plan[planned - 1].end_position();
                let log_path = segment.log_path(&self.dir);
                let bytes = self
                    .io
                    .read_exact_at(&log, span_start, (span_end - span_start) as usize)
                    .await
                    .map_err(|source| StorageError::io("read log", &log_path, source))?;
                assert!(bytes.len() as u64 == span_end - span_start);
                // Fast path: nothing returned yet and every planned record is
                // taken whole, so the span read from disk *is* the answer.
                // Handing the buffer over instead of copying it saves a copy
                // and, more expensively, the page faults of a second
                // poll-sized buffer on every poll.
                let plan_messages: u64 = plan
                    .iter()
                    .map(|entry| u64::from(entry.message_count))
                    .sum();
                if out.bytes.is_empty()
                    && wanted == plan[0].base_offset
                    && plan_messages <= u64::from(remaining)
                {
                    for entry in plan {
                        let at = (entry.position - span_start) as usize;
                        let record = &bytes[at..at + entry.length as usize];
                        self.check_record(record, entry, &log_path)?;
                    }
                    out.adopt(bytes, plan.len() as u32, wanted, plan_messages as u32);
                    remaining -= plan_messages as u32;
                    wanted += plan_messages;
                    entry_number += planned as u64;
                    if planned < entries.len() && remaining > 0 {
                        return Ok(out);
                    }
                    continue;
                }
                out.bytes.reserve((span_end - span_start) as usize);
                for entry in plan {
                    let at = (entry.position - span_start) as usize;
                    let record = &bytes[at..at + entry.length as usize];
                    self.check_record(record, entry, &log_path)?;
                    let skip = (wanted - entry.base_offset) as u32;
                    let take = (entry.message_count - skip).min(remaining);
                    if skip == 0 && take == entry.message_count {
                        out.push(record, entry.base_offset, take);
                    } else {
                        let sliced = batch::slice(record, skip, skip + take).map_err(|source| {
                            StorageError::CorruptBatch {
                                path: log_path.clone(),
                                position: entry.position,
                                offset: entry.base_offset,
                                source,
                            }
                        })?;
                        out.push(&sliced, wanted, take);
                    }
                    remaining -= take;
                    wanted += u64::from(take);
                }
                entry_number += planned as u64;
                if planned < entries.len() && remaining > 0 {
                    // Stopped by the byte cap.
                    return Ok(out);
                }
            }
            segment_number += 1;
        }
        Ok(out)
    }

    /// Validates one record read back against its index entry. A mismatch
    /// quarantines the partition.
    fn check_record(
        &self,
        record: &[u8],
        entry: &IndexEntry,
        log_path: &Path,
    ) -> Result<(), StorageError> {
        let header: BatchHeader = match batch::validate(record) {
            Ok(summary) => summary.header,
            Err(source) => {
                let error = StorageError::CorruptBatch {
                    path: log_path.to_path_buf(),
                    position: entry.position,
                    offset: entry.base_offset,
                    source,
                };
                self.quarantine(error.to_string());
                return Err(error);
            }
        };
        if header.base_offset != entry.base_offset || header.message_count != entry.message_count {
            let error = StorageError::BatchMismatch {
                path: log_path.to_path_buf(),
                position: entry.position,
                expected: format!(
                    "offset {} with {} messages (index)",
                    entry.base_offset, entry.message_count
                ),
                found: format!(
                    "offset {} with {} messages",
                    header.base_offset, header.message_count
                ),
            };
            self.quarantine(error.to_string());
            return Err(error);
        }
        Ok(())
    }

    /// Reads from the first batch whose server timestamp is ≥ `timestamp`.
    pub async fn read_by_timestamp(
        &self,
        timestamp: u64,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        let found = self
            .segments
            .iter()
            .enumerate()
            .find(|(_, segment)| !segment.is_empty() && segment.last_timestamp >= timestamp);
        let Some((segment_number, segment)) = found else {
            return Ok(ReadBatches::default());
        };
        let (_, index) = self.segment_files(segment_number).await?;
        let (_, entry) = segment
            .locate_timestamp(&self.io, &index, &self.dir, timestamp)
            .await?;
        self.read_by_offset(entry.base_offset, count, bytes_max)
            .await
    }

    /// The first `count` stored messages.
    pub async fn read_first(
        &self,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        self.read_by_offset(self.first_offset(), count, bytes_max)
            .await
    }

    /// The last `count` stored messages.
    pub async fn read_last(&self, count: u32, bytes_max: u64) -> Result<ReadBatches, StorageError> {
        let start = self
            .next_offset
            .saturating_sub(u64::from(count))
            .max(self.first_offset());
        self.read_by_offset(start, count, bytes_max).await
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
    /// §8 item 11). Segments are removed oldest first, so a crash midway
    /// leaves a valid (shorter) log that a repeated purge finishes.
    pub async fn purge(&mut self) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        let mut deleted = DeletedSegments::default();
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
        self.sync_dir_or_poison().await?;
        self.segments
            .push(Segment::empty(0, self.config.index_sample_every));
        self.active_log = Rc::new(log);
        self.active_index = Rc::new(index);
        self.next_offset = 0;
        self.durable_next_offset = 0;
        self.unsynced_bytes = 0;
        self.unsynced_messages = 0;
        Ok(deleted)
    }

    /// Re-reads and validates every stored batch (a scrub). Corruption
    /// quarantines the partition and is returned as an error.
    pub async fn verify(&self) -> Result<u64, StorageError> {
        let mut checked = 0u64;
        let mut offset = self.first_offset();
        while offset < self.next_offset {
            let read = self
                .read_by_offset(offset, u32::MAX, crate::limits::READ_BYTES_MAX_DEFAULT)
                .await?;
            let Some(last) = read.last_offset else { break };
            checked += u64::from(read.message_count);
            offset = last + 1;
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{MessageSpec, encode_producer_batch, frames};
    use crate::storage::MonoioIo;
    use crate::storage::io::test_runtime as runtime;

    fn producer_batch(messages: usize, payload_len: usize) -> Vec<u8> {
        let specs: Vec<MessageSpec> = (0..messages)
            .map(|index| MessageSpec {
                id: index as u128 + 1,
                timestamp_delta: index as u32,
                payload: vec![index as u8; payload_len],
                user_headers: vec![],
            })
            .collect();
        encode_producer_batch(1, &specs)
    }

    fn offsets(read: &ReadBatches) -> Vec<u64> {
        let mut offsets = Vec::new();
        let mut rest = &read.bytes[..];
        while !rest.is_empty() {
            let header = BatchHeader::decode(rest).unwrap();
            let record = &rest[..header.batch_length as usize];
            offsets.extend(frames(record).unwrap().map(|frame| frame.unwrap().offset));
            rest = &rest[header.batch_length as usize..];
        }
        offsets
    }

    // On real files (monoio, legacy driver): append, sync, rotate, reopen,
    // and read back by offset, timestamp, first and last.
    #[test]
    fn monoio_append_sync_reopen_read() {
        let dir = tempfile::tempdir().unwrap();
        let partition_dir = dir.path().join("streams/1/topics/1/partitions/0");
        runtime().block_on(async {
            let config = PartitionConfig {
                partition_id: 3,
                segment_size_bytes: 4096,
                index_sample_every: 2,
            };
            let clock: Rc<dyn Clock> = Rc::new(SystemClock);
            let mut log =
                PartitionLog::open(MonoioIo, &partition_dir, config.clone(), clock.clone())
                    .await
                    .unwrap();
            assert_eq!(log.written_offset(), None);
            for round in 0..20u64 {
                let appended = log.append(producer_batch(3, 300)).await.unwrap();
                assert_eq!(appended.base_offset, round * 3);
                assert_eq!(appended.last_offset, round * 3 + 2);
            }
            assert_eq!(log.written_offset(), Some(59));
            assert!(log.unsynced_messages() > 0);
            log.sync().await.unwrap();
            assert_eq!(log.durable_offset(), Some(59));
            assert!(log.stats().segments > 1);
            drop(log);

            let log = PartitionLog::open(MonoioIo, &partition_dir, config, clock)
                .await
                .unwrap();
            assert_eq!(log.state(), PartitionState::Open);
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
            assert_eq!(log.verify().await.unwrap(), 60);
            let stored = std::fs::read(partition_dir.join("00000000000000000000.log")).unwrap();
            let header = BatchHeader::decode(&stored).unwrap();
            assert_eq!(header.partition_id, 3);
        });
    }

    // A torn tail on real files (a half-written batch) is truncated on open.
    #[test]
    fn monoio_torn_tail_truncated() {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let clock: Rc<dyn Clock> = Rc::new(SystemClock);
            let config = PartitionConfig::new(0, 1 << 20);
            let mut log = PartitionLog::open(MonoioIo, dir.path(), config.clone(), clock.clone())
                .await
                .unwrap();
            log.append(producer_batch(2, 10)).await.unwrap();
            log.sync().await.unwrap();
            drop(log);
            let path = dir.path().join("00000000000000000000.log");
            let good_len = std::fs::metadata(&path).unwrap().len();
            let half = &producer_batch(5, 100)[..200];
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend_from_slice(half);
            std::fs::write(&path, bytes).unwrap();
            let mut log = PartitionLog::open(MonoioIo, dir.path(), config, clock)
                .await
                .unwrap();
            let torn = log.recovery_report().torn_tail.clone().unwrap();
            assert_eq!(torn.position, good_len);
            assert_eq!(torn.first_dropped_offset, 2);
            assert_eq!(torn.bytes_dropped, 200);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
            assert_eq!(
                log.append(producer_batch(1, 1)).await.unwrap().base_offset,
                2
            );
        });
    }
}
